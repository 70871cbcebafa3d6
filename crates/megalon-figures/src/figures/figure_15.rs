//! Figure 15: the page-cache comparison, as 4 KiB page objects shared through each
//! scheme: 48 GB of pages in the paper (12M pages), reads with 0, 5 and 50% writes.

use megalon_bench::lineup::Kind;
use megalon_bench::runner::Harness;

use super::write_mix_bars;

/// The paper's pages.
const PAGES: f64 = 12e6;
/// Bytes of a page's value: with the store's 4-byte length, 4 KiB page objects.
const PAGE_VALUE_BYTES: usize = 4092;

pub fn run(h: &mut Harness) -> Result<(), String> {
    let mut setup = h.setup(h.objects(PAGES));
    setup.value_bytes = PAGE_VALUE_BYTES;
    let title = "Figure 15: 4 KiB pages";
    let (points, mixes) = write_mix_bars(h, &setup, Kind::HcMeta, "figure_15", title)?;
    for (i, name) in mixes.iter().enumerate() {
        h.compare(
            "15",
            &points,
            ["megalon", "hcmeta"],
            i as f64,
            &format!("4 KiB pages, {name}"),
            "notably higher (HCMeta churns); no figure given",
        );
    }
    Ok(())
}
