//! Figure 15: the page-cache comparison, as 4 KiB page objects shared through each
//! scheme: 48 GB of pages in the paper (12M pages), reads with 0, 5 and 50% writes.

use megalon_bench::lineup::Kind;
use megalon_bench::runner::Harness;

use super::{categories, panel, write_mixes, Panel, THROUGHPUT};

/// The paper's pages.
const PAGES: f64 = 12e6;
/// Bytes of a page's value: with the store's 4-byte length, 4 KiB page objects.
const PAGE_VALUE_BYTES: usize = 4092;

pub fn run(h: &mut Harness) -> Result<(), String> {
    let mut setup = h.setup(h.objects(PAGES));
    setup.value_bytes = PAGE_VALUE_BYTES;
    let plans = write_mixes(&setup);
    let points = h.measure_each(&[Kind::Megalon, Kind::HcMeta], &setup, &plans)?;
    let categories = categories(&plans);
    panel(
        h,
        Panel {
            stem: "figure_15",
            title: "Figure 15: 4 KiB pages",
            x_label: "write mix",
            log_x: false,
            categories: Some(&categories),
        },
        &points,
        &[THROUGHPUT],
    )?;
    for (i, name) in categories.iter().enumerate() {
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
