//! Figure 12: read-only Zipfian latency with and without local copies of read-shared
//! objects.

use megalon_bench::lineup::{Kind, Setup};
use megalon_bench::runner::{explain, find, ratio, Harness, PAPER_OBJECTS};

use super::{categories, panel, read_only, Panel, LATENCY, THROUGHPUT};

/// The series of megalon with local copies (MEGALON-DATA-COPY).
const COPIES: &str = "megalon + copies";
/// Reads from a host before it keeps a copy.
const COPY_AFTER_READS: u32 = 4;

pub fn run(h: &mut Harness) -> Result<(), String> {
    let setup = h.setup(h.objects(PAPER_OBJECTS));
    let plans = [(
        0.0,
        "read-only, zipf 0.99".to_string(),
        Harness::plan(&setup, read_only(0.99)),
    )];
    let copies = Setup {
        copy_after: COPY_AFTER_READS,
        ..setup
    };
    let mut points = h.measure_warm(Kind::Megalon, &setup, "megalon", &plans)?;
    points.extend(h.measure_warm(Kind::Megalon, &copies, COPIES, &plans)?);
    let categories = categories(&plans);
    panel(
        h,
        Panel {
            stem: "figure_12",
            title: "Figure 12: local copies",
            x_label: "workload",
            log_x: false,
            categories: Some(&categories),
        },
        &points,
        &[LATENCY, THROUGHPUT],
    )?;
    if let (Some(m), Some(c)) = (find(&points, "megalon", 0.0), find(&points, COPIES, 0.0)) {
        h.row(
            "12",
            "read-only latency: megalon / megalon + copies",
            ratio(m.mean_latency_us, c.mean_latency_us),
            "1.3x (copies avoid CXL accesses)",
            format!(
                "{}; copies made {:.4} per op; p99 {:.1} vs {:.1} us",
                explain(&[m, c]),
                c.per_op("copies made"),
                m.p99_latency_us,
                c.p99_latency_us
            ),
        );
    }
    Ok(())
}
