//! Figure 4: throughput and latency as threads grow, read-only, 18M objects.

use megalon_bench::lineup::Kind;
use megalon_bench::runner::{Harness, HOSTS, PAPER_OBJECTS};

use super::{panel, read_only, Panel, LATENCY, THROUGHPUT};

/// The schemes compared.
const KINDS: [Kind; 4] = [
    Kind::Megalon,
    Kind::HcMeta,
    Kind::HcMetaLocal,
    Kind::HcMetaUnlimited,
];

pub fn run(h: &mut Harness) -> Result<(), String> {
    let setup = h.setup(h.objects(PAPER_OBJECTS));
    let plan = Harness::plan(&setup, read_only(0.99));
    let threads = h.sweep_points(&[1, 2], &[1, 2, 4]);
    let mut points = Vec::new();
    for kind in KINDS {
        for &per_host in threads {
            let workers = HOSTS * per_host;
            let plans = [(workers as f64, format!("{workers} threads"), plan)];
            points.extend(h.measure_threads(kind, &setup, kind.name(), &plans, workers)?);
        }
    }
    panel(
        h,
        Panel {
            stem: "figure_4",
            title: "Figure 4: read-only, threads",
            x_label: "threads",
            log_x: false,
            categories: None,
        },
        &points,
        &[THROUGHPUT, LATENCY],
    )?;
    let most = (HOSTS * threads[threads.len() - 1]) as f64;
    let context = format!("read-only, {most} threads");
    h.compare(
        "4",
        &points,
        ["megalon", "hcmeta"],
        most,
        &context,
        "HCMeta and HCMeta-Local do not scale (churn); no figure given",
    );
    h.compare(
        "4",
        &points,
        ["megalon", "hcmeta-unlimited"],
        most,
        &context,
        "> 1 (local index vs shared metadata); no figure given",
    );
    Ok(())
}
