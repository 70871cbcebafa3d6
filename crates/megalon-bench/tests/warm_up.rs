//! A measured point finds its store as a store that has been working finds it, not as
//! the load left it: the harness runs a warm-up of the first plan (dropped) on every
//! freshly loaded store before it measures.

use std::path::PathBuf;

use megalon_bench::lineup::Kind;
use megalon_bench::mix::Choice;
use megalon_bench::runner::{Harness, Settings, HOSTS};

/// Record allocations per operation of megalon's run of 50% writes, uniform over 200
/// keys whose records all fit the SCR: measured by the harness (after its warm-up), and
/// measured as given, the run on the freshly loaded store.
fn record_allocs_per_op() -> (f64, f64) {
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
    let choice = Choice::Mix {
        write_ratio: 0.5,
        skew: 0.0,
    };
    let plan = (0.0, "50% writes".to_string(), Harness::plan(&setup, choice));
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
