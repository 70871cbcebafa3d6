//! Figure 11: read-only Zipfian over partitioned data as the shared ratio grows: megalon
//! with local partitions (objects move to the DRAM of the host that keeps accessing
//! them) against HCMeta-Local (each owner's partition in its DRAM, shared objects copied
//! to CXL), and megalon without partitions for reference.

use megalon_bench::lineup::{Kind, Setup};
use megalon_bench::mix::Choice;
use megalon_bench::runner::{Harness, PlanAt, PAPER_OBJECTS};

use super::{panel, Panel, CHURN, THROUGHPUT};

/// The series of megalon with local partitions.
const PARTITIONS: &str = "megalon + partitions";

pub fn run(h: &mut Harness) -> Result<(), String> {
    let setup = h.setup(h.objects(PAPER_OBJECTS));
    // Shared ratios.
    let ratios = h.sweep_points(&[0.0, 0.2, 1.0], &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
    let plans: Vec<PlanAt> = ratios
        .iter()
        .map(|&shared_ratio| {
            let choice = Choice::Partitioned {
                shared_ratio,
                skew: 0.99,
            };
            (
                shared_ratio * 100.0,
                format!("{}% shared", shared_ratio * 100.0),
                Harness::plan(&setup, choice),
            )
        })
        .collect();
    let partitioned = Setup {
        partition_after: megalon_core::limits::DEFAULT_PARTITION_ACCESSES,
        ..setup
    };
    let local = Kind::HcMetaLocal;
    let mut points = h.measure_warm(Kind::Megalon, &partitioned, PARTITIONS, &plans)?;
    points.extend(h.measure_warm(local, &setup, local.name(), &plans)?);
    points.extend(h.measure_warm(Kind::Megalon, &setup, "megalon", &plans)?);
    panel(
        h,
        Panel {
            stem: "figure_11",
            title: "Figure 11: read-only, shared ratio",
            x_label: "shared objects (%)",
            log_x: false,
            categories: None,
        },
        &points,
        &[THROUGHPUT, CHURN],
    )?;
    let last = ratios[ratios.len() - 1] * 100.0;
    for (x, paper) in [
        (
            0.0,
            "~1x (megalon matches HCMeta-Local when nothing is shared)",
        ),
        (20.0, "~1x (both local at low sharing)"),
        (
            last,
            "significantly > 1 (HCMeta-Local churns as sharing grows)",
        ),
    ] {
        let context = format!("{x}% shared");
        h.compare(
            "11",
            &points,
            [PARTITIONS, local.name()],
            x,
            &context,
            paper,
        );
    }
    Ok(())
}
