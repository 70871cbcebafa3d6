//! Figure 14: YCSB A, B, C, D, F.

use megalon_bench::lineup::Kind;
use megalon_bench::mix::Choice;
use megalon_bench::runner::{Harness, PlanAt, PAPER_OBJECTS};
use megalon_workload::Workload;

use super::{panel, Panel, THROUGHPUT};

/// The order the workloads run in on one store: read-only C first; D last (it adds
/// keys).
const ORDER: [Workload; 5] = [
    Workload::C,
    Workload::B,
    Workload::A,
    Workload::F,
    Workload::D,
];

/// The paper's ratio for each workload, in [`Workload::CORE`]'s order (A, B, C, D, F).
const PAPER: [&str; 5] = [
    "3.93x",
    "9.12x-14.18x (B and C)",
    "9.12x-14.18x (B and C)",
    "4.55x",
    "3.18x",
];

pub fn run(h: &mut Harness) -> Result<(), String> {
    let mut setup = h.setup(h.objects(PAPER_OBJECTS));
    // D inserts 5% of its operations: room for a run at several million operations/s.
    setup.extra_keys = setup.keys / 2 + 200_000;
    let plans: Vec<PlanAt> = ORDER
        .iter()
        .map(|w| {
            let x = Workload::CORE
                .iter()
                .position(|c| c.name() == w.name())
                .unwrap_or(0) as f64;
            (
                x,
                format!("YCSB {}", w.name()),
                Harness::plan(&setup, Choice::Ycsb(*w)),
            )
        })
        .collect();
    let mut points = h.measure_each(&[Kind::Megalon, Kind::HcMeta], &setup, &plans)?;
    points.sort_by(|a, b| a.series.cmp(&b.series).then(a.x.total_cmp(&b.x)));
    let categories: Vec<String> = Workload::CORE
        .iter()
        .map(|w| w.name().to_string())
        .collect();
    panel(
        h,
        Panel {
            stem: "figure_14",
            title: "Figure 14: YCSB workloads",
            x_label: "workload",
            log_x: false,
            categories: Some(&categories),
        },
        &points,
        &[THROUGHPUT],
    )?;
    for (i, name) in categories.iter().enumerate() {
        let context = format!("YCSB {name}");
        h.compare(
            "14",
            &points,
            ["megalon", "hcmeta"],
            i as f64,
            &context,
            PAPER[i],
        );
    }
    Ok(())
}
