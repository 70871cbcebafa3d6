//! Figure 5: read-only as the dataset grows: throughput, latency, normalized churn.

use megalon_bench::lineup::{Kind, Setup};
use megalon_bench::mix::Choice;
use megalon_bench::runner::{Harness, PlanAt};

use super::{panel, read_only, Panel, CHURN, LATENCY, THROUGHPUT};

/// Dataset sizes of Figures 5 and 6, in the paper's objects.
const DATASETS: [f64; 5] = [1.5e6, 3e6, 6e6, 12e6, 24e6];

/// The dataset sizes run (fewer with short runs), in the paper's objects.
pub(super) fn datasets(h: &Harness) -> &'static [f64] {
    h.sweep_points(&[1.5e6, 6e6, 24e6], &DATASETS)
}

/// A point per dataset size: the setup over that many objects (scaled) and `choice`
/// over it, at x = the paper's millions of objects.
pub(super) fn dataset_sweep(h: &Harness, choice: Choice) -> Vec<(Setup, PlanAt)> {
    datasets(h)
        .iter()
        .map(|&paper| {
            let setup = h.setup(h.objects(paper));
            let plan = (
                paper / 1e6,
                format!("{}M objects (paper)", paper / 1e6),
                Harness::plan(&setup, choice),
            );
            (setup, plan)
        })
        .collect()
}

pub fn run(h: &mut Harness) -> Result<(), String> {
    let sweep = dataset_sweep(h, read_only(0.99));
    let kinds = [Kind::Megalon, Kind::HcMeta, Kind::HcMetaLocal];
    let points = h.measure_sweep(&kinds, &sweep)?;
    panel(
        h,
        Panel {
            stem: "figure_5",
            title: "Figure 5: read-only, dataset size",
            x_label: "dataset (paper's M objects)",
            log_x: true,
            categories: None,
        },
        &points,
        &[THROUGHPUT, LATENCY, CHURN],
    )?;
    let sizes = datasets(h);
    let (small, large) = (sizes[0] / 1e6, sizes[sizes.len() - 1] / 1e6);
    for (x, paper) in [
        (small, "1.2x (no churn anywhere)"),
        (large, "15.25x (24.4 vs 1.6 M ops/s at 24M)"),
    ] {
        let context = format!("read-only, {x}M objects");
        h.compare("5", &points, ["megalon", "hcmeta"], x, &context, paper);
    }
    Ok(())
}
