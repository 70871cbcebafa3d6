//! Figure 13: megalon against AllLog at 0, 5 and 50% writes.

use megalon_bench::lineup::Kind;
use megalon_bench::runner::{Harness, PAPER_OBJECTS};

use super::{categories, panel, write_mixes, Panel, THROUGHPUT};

pub fn run(h: &mut Harness) -> Result<(), String> {
    let setup = h.setup(h.objects(PAPER_OBJECTS));
    let plans = write_mixes(&setup);
    let points = h.measure_each(&[Kind::Megalon, Kind::AllLog], &setup, &plans)?;
    let categories = categories(&plans);
    panel(
        h,
        Panel {
            stem: "figure_13",
            title: "Figure 13: megalon vs AllLog",
            x_label: "write mix",
            log_x: false,
            categories: Some(&categories),
        },
        &points,
        &[THROUGHPUT],
    )?;
    for (x, paper) in [(0.0, "~1x (no locks, no counters)"), (2.0, "4.14x")] {
        let context = &categories[x as usize];
        h.compare("13", &points, ["megalon", "all-log"], x, context, paper);
    }
    Ok(())
}
