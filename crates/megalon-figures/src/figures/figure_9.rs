//! Figure 9: key size, read-only, 4.8M objects.

use megalon_bench::lineup::{Kind, Setup};
use megalon_bench::runner::{Harness, PlanAt};

use super::{panel, read_only, throughput_row, Panel, CHURN, THROUGHPUT};

/// The paper's objects in this figure.
const OBJECTS: f64 = 4.8e6;

pub fn run(h: &mut Harness) -> Result<(), String> {
    // Key sizes in bytes.
    let sizes = h.sweep_points(&[16, 50, 90], &[16, 30, 50, 70, 90]);
    let sweep: Vec<(Setup, PlanAt)> = sizes
        .iter()
        .map(|&key_bytes| {
            let mut setup = h.setup(h.objects(OBJECTS));
            setup.key_bytes = key_bytes;
            let plan = (
                key_bytes as f64,
                format!("{key_bytes} B keys"),
                Harness::plan(&setup, read_only(0.99)),
            );
            (setup, plan)
        })
        .collect();
    let points = h.measure_sweep(&[Kind::Megalon, Kind::HcMeta], &sweep)?;
    panel(
        h,
        Panel {
            stem: "figure_9",
            title: "Figure 9: read-only, key size",
            x_label: "key bytes",
            log_x: false,
            categories: None,
        },
        &points,
        &[THROUGHPUT, CHURN],
    )?;
    let (lo, hi) = (sizes[0] as f64, sizes[sizes.len() - 1] as f64);
    for (scheme, paper) in [
        ("megalon", "~1 (the index is not in SCR)"),
        ("hcmeta", "< 1 (inline keys fill the SCR: more churn)"),
    ] {
        let what = format!("{scheme} at {hi} B / at {lo} B keys");
        throughput_row(h, "9", what, &points, ((scheme, lo), (scheme, hi)), paper);
    }
    Ok(())
}
