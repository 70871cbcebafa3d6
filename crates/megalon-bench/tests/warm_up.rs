//! A measured point finds its store as a store that has been working finds it, not as
//! the load left it: the harness runs a warm-up of each plan (dropped) before it
//! measures it, on the store the plans before it left.

use std::path::PathBuf;

use megalon_bench::lineup::{Kind, Setup};
use megalon_bench::mix::Choice;
use megalon_bench::runner::{Harness, Settings, HOSTS};

/// Record allocations per operation of megalon's run of 50% writes, uniform over 200
/// keys whose records all fit the SCR: measured by the harness (after its warm-up), and
/// measured as given, the run on the freshly loaded store.
fn record_allocs_per_op() -> (f64, f64) {
    let (mut h, setup) = harness();
    let plan = (
        0.0,
        "50% writes".to_string(),
        Harness::plan(&setup, half_writes()),
    );
    let plans = [plan];
    let warm = h
        .measure(Kind::Megalon, &setup, "megalon", &plans)
        .expect("measured");
    let cold = h
        .measure_as_given(Kind::Megalon, &setup, "megalon", &plans, HOSTS)
        .expect("measured as given");
    assert_eq!((warm.len(), cold.len()), (1, 1), "one point each");
    (
        warm[0].per_op("record allocs"),
        cold[0].per_op("record allocs"),
    )
}

/// A harness of 200 objects and short runs, started, and its setup.
fn harness() -> (Harness, Setup) {
    let settings = Settings {
        objects: 200.0,
        seconds: 0.3,
        threads_per_host: 1,
        pod_node: None,
        cxl: None,
        out: PathBuf::from("/nonexistent"),
    };
    let mut h = Harness::new(settings, |_| {});
    h.start();
    let setup = h.setup(200);
    (h, setup)
}

/// 50% writes, uniform.
fn half_writes() -> Choice {
    Choice::Mix {
        write_ratio: 0.5,
        skew: 0.0,
    }
}

/// The warm-up wrote every key many times over (each of the 200 about 240 times on the
/// machine this was written on), so the measured run allocates no record; the run on a
/// freshly loaded store allocates one for each key's first write (0.0021 an operation
/// there). Before the warm-up, the harness measured that.
#[test]
fn a_measured_run_allocates_no_record_for_first_writes_the_warm_up_made() {
    let (warm, cold) = record_allocs_per_op();
    assert!(cold > 0.0, "the cold run allocates records ({cold})");
    assert_eq!(
        warm, 0.0,
        "record allocations per operation after the warm-up"
    );
}

/// A plan after another runs after a warm-up of its own too: 50% writes after a
/// read-only run allocate no record, where they allocated one for each key's first
/// write when the harness warmed up the first plan only (the 5% points of Figures 13
/// and 15 counted 0.023 record allocations an operation).
#[test]
fn a_later_plan_runs_after_a_warm_up_of_its_own() {
    let (mut h, setup) = harness();
    let read_only = Choice::Mix {
        write_ratio: 0.0,
        skew: 0.0,
    };
    let plans = [
        (
            0.0,
            "read-only".to_string(),
            Harness::plan(&setup, read_only),
        ),
        (
            1.0,
            "50% writes".to_string(),
            Harness::plan(&setup, half_writes()),
        ),
    ];
    let points = h
        .measure(Kind::Megalon, &setup, "megalon", &plans)
        .expect("measured");
    let xs: Vec<f64> = points.iter().map(|p| p.x).collect();
    assert_eq!(xs, [0.0, 1.0], "the measured points, in order");
    assert_eq!(
        points[1].per_op("record allocs"),
        0.0,
        "record allocations per operation of the writes after the read-only run"
    );
}
