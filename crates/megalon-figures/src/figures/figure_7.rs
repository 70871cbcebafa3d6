//! Figure 7: the SCR size sweep at 18M objects, 5% and 50% writes, skew 0.99 and 0.7.

use megalon_bench::lineup::{Kind, Setup};
use megalon_bench::runner::{Harness, PlanAt, PAPER_OBJECTS};

use super::{panel, writes, Panel, CHURN, THROUGHPUT};

/// Each panel: its stem, its write ratio, its skew.
const PANELS: [(&str, f64, f64); 4] = [
    ("figure_7a_i", 0.05, 0.99),
    ("figure_7a_ii", 0.05, 0.7),
    ("figure_7b_i", 0.5, 0.99),
    ("figure_7b_ii", 0.5, 0.7),
];

pub fn run(h: &mut Harness) -> Result<(), String> {
    // SCR sizes, in the paper's MB.
    let sizes = h.sweep_points(
        &[32.0, 128.0, 512.0],
        &[32.0, 64.0, 128.0, 256.0, 512.0, 1024.0],
    );
    for (stem, write_ratio, skew) in PANELS {
        let sweep: Vec<(Setup, PlanAt)> = sizes
            .iter()
            .map(|&mb| {
                let mut setup = h.setup(h.objects(PAPER_OBJECTS));
                setup.scr_bytes = h.scr(mb);
                let plan = (
                    mb,
                    format!("SCR {mb} MB (paper)"),
                    Harness::plan(&setup, writes(write_ratio, skew)),
                );
                (setup, plan)
            })
            .collect();
        let points = h.measure_sweep(&[Kind::Megalon, Kind::HcMeta], &sweep)?;
        let title = format!(
            "Figure 7: {}% writes, zipf {skew}, SCR size",
            write_ratio * 100.0
        );
        panel(
            h,
            Panel {
                stem,
                title: &title,
                x_label: "SCR (paper's MB)",
                log_x: true,
                categories: None,
            },
            &points,
            &[THROUGHPUT, CHURN],
        )?;
        let at = if sizes.contains(&64.0) { 64.0 } else { 32.0 };
        let paper = if write_ratio < 0.1 && skew > 0.9 {
            "11x at 64 MB; megalon flat down to 128 MB, HCMeta needs > 512 MB"
        } else {
            "megalon ahead at every size; no figure given"
        };
        let context = format!("{}% writes, zipf {skew}, SCR {at} MB", write_ratio * 100.0);
        h.compare("7", &points, ["megalon", "hcmeta"], at, &context, paper);
    }
    Ok(())
}
