//! Figure 13: megalon against AllLog at 0, 5 and 50% writes.

use megalon_bench::lineup::Kind;
use megalon_bench::runner::{Harness, PAPER_OBJECTS};

use super::write_mix_bars;

pub fn run(h: &mut Harness) -> Result<(), String> {
    let setup = h.setup(h.objects(PAPER_OBJECTS));
    let title = "Figure 13: megalon vs AllLog";
    let (points, mixes) = write_mix_bars(h, &setup, Kind::AllLog, "figure_13", title)?;
    for (x, paper) in [(0.0, "~1x (no locks, no counters)"), (2.0, "4.14x")] {
        let context = &mixes[x as usize];
        h.compare("13", &points, ["megalon", "all-log"], x, context, paper);
    }
    Ok(())
}
