//! Figure 6: 5% and 50% writes as the dataset grows (the datasets of Figure 5).

use megalon_bench::lineup::Kind;
use megalon_bench::runner::Harness;

use super::figure_5::{dataset_sweep, datasets};
use super::{panel, writes, Panel, CHURN, THROUGHPUT};

/// Each panel: its stem, its write ratio, the paper's ratio at the largest dataset.
const PANELS: [(&str, f64, &str); 2] = [
    ("figure_6a", 0.05, "10x at 24M objects"),
    ("figure_6b", 0.5, "4x"),
];

pub fn run(h: &mut Harness) -> Result<(), String> {
    for (stem, write_ratio, paper) in PANELS {
        let sweep = dataset_sweep(h, writes(write_ratio, 0.99));
        let points = h.measure_sweep(&[Kind::Megalon, Kind::HcMeta], &sweep)?;
        let title = format!("Figure 6: {}% writes, dataset size", write_ratio * 100.0);
        panel(
            h,
            Panel {
                stem,
                title: &title,
                x_label: "dataset (paper's M objects)",
                log_x: true,
                categories: None,
            },
            &points,
            &[THROUGHPUT, CHURN],
        )?;
        let large = datasets(h)[datasets(h).len() - 1] / 1e6;
        let context = format!("{}% writes, {large}M objects", write_ratio * 100.0);
        h.compare("6", &points, ["megalon", "hcmeta"], large, &context, paper);
    }
    Ok(())
}
