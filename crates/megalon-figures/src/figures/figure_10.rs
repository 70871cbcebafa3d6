//! Figure 10: record width, 50% writes, zipf 0.7, SCR 32 MB, 18M objects. Its headline
//! row, 8-bit over 32-bit records, is the median of [`PAIRED_ROUNDS`] pairs of runs on
//! the two stores of the sweep's points, alternated. The sweep's own pair is saved with
//! them and left out of the median: the wide width's point ran before the narrow
//! width's store was built, and the narrow's beside the wide store's pumps.

use megalon_bench::lineup::{Kind, Setup};
use megalon_bench::runner::{explain, find, Harness, KeptStore, Measured, PlanAt, PAPER_OBJECTS};

use super::{panel, throughput_row, writes, Panel, CHURN, THROUGHPUT};

/// Record widths in bits, the paper's sweep.
const WIDTHS: [u32; 5] = [32, 16, 8, 4, 2];
/// The series of the width chosen at run time.
const ADAPTIVE: &str = "megalon (adaptive width)";
/// The gauge of the width switches a pod made (its record width's epoch).
const SWITCHES: &str = "record width switches";
/// Warm-up runs at most: of the adaptive series, waiting for its width to settle; of
/// each fixed width, waiting for its record allocations to stop falling.
const MAX_WARM_UPS: usize = 4;
/// The counter of megalon's record allocations (its churn).
const ALLOCS: &str = "record allocs";
/// The paper's SCR in this figure, in MB.
const SCR_MB: f64 = 32.0;
/// The widths of the figure's headline row: 8-bit over 32-bit records.
const PAIR: (u32, u32) = (32, 8);
/// Rounds of one more run at each width of [`PAIR`] on its kept store, after the sweep's
/// points of the two, alternated (and which goes first, too): the row is the median of
/// these rounds' ratios. One pair of runs moved by a sixth from one run of the figures to
/// the next here (2.15x to 2.89x).
const PAIRED_ROUNDS: usize = 5;

pub fn run(h: &mut Harness) -> Result<(), String> {
    let sweep: Vec<(Setup, PlanAt)> = WIDTHS
        .iter()
        .map(|&bits| {
            let mut setup = h.setup(h.objects(PAPER_OBJECTS));
            setup.scr_bytes = h.scr(SCR_MB);
            setup.record_bits = bits;
            let plan = (
                f64::from(bits),
                format!("{bits}-bit records"),
                Harness::plan(&setup, writes(0.5, 0.7)),
            );
            (setup, plan)
        })
        .collect();
    // Each width after warm-up runs of its own (dropped): the paper measures a steady
    // state, where the first write of each object (an alloc every width pays alike)
    // is behind it, and what is left is the churn a width causes. One warm-up run wrote
    // too few of the objects where the memory is slow (under the CXL model, 8-bit
    // records still allocated 0.02 times an operation in the measured run, all first
    // writes): warm-up runs until one allocates records no less than nine tenths as
    // often as the run before it (at most `MAX_WARM_UPS`).
    //
    // The pair's widths first, their stores kept for the alternated rounds, then dropped
    // (their hosts' pumps would run beside the other widths' runs), then the rest.
    let (pair, rest): (Vec<_>, Vec<_>) = sweep
        .iter()
        .zip(WIDTHS)
        .partition(|&(_, bits)| bits == PAIR.0 || bits == PAIR.1);
    let mut points = Vec::new();
    let mut pair_stores = Vec::new();
    for ((setup, plan), _) in pair {
        let (point, store) = measure_width(h, setup, plan)?;
        points.push(point);
        pair_stores.push(store);
    }
    // Wide then narrow: `PAIR`'s order in `WIDTHS`.
    let [wide, narrow]: [KeptStore; 2] = pair_stores
        .try_into()
        .map_err(|_| "figure 10: the pair's widths are not both in the sweep")?;
    let pairs = alternated_pairs(h, &points, [wide, narrow])?;
    if !h.counting() {
        h.write("figure_10_pairs.csv", &pairs_csv(&pairs))?;
    }
    let pair_ratios: Vec<f64> = pairs
        .iter()
        .filter(|pair| pair.round > 0)
        .map(|pair| pair.ratio)
        .collect();
    for ((setup, plan), _) in rest {
        points.push(measure_width(h, setup, plan)?.0);
    }
    // Widest first, as the sweep goes.
    points.sort_by(|a, b| b.x.total_cmp(&a.x));
    // The width chosen at run time: from 32-bit records, the hosts' pumps switch it
    // (`WidthPolicy::default`); drawn at its start, 32. Measured once it has settled, as
    // each fixed width is after its churn from the first writes: warm-up runs until one
    // switches no more (the records re-allocated after a switch behind it too).
    let (setup, plan) = &sweep[0];
    let start = plan.0;
    let adaptive_plan = (start, format!("adaptive, from {start}-bit records"), plan.2);
    let (mut adaptive, warm_ups) = h.measure_settled(
        Kind::MegalonAdaptive,
        setup,
        ADAPTIVE,
        &adaptive_plan,
        SWITCHES,
        MAX_WARM_UPS,
    )?;
    if let (Some(bits), Some(switches)) = (adaptive.gauge("record bits"), adaptive.gauge(SWITCHES))
    {
        adaptive.x_name = format!(
            "adaptive from {start}-bit records, at {bits} bits after {switches} switches \
             ({warm_ups} warm-up runs)"
        );
    }
    points.push(adaptive);
    panel(
        h,
        Panel {
            stem: "figure_10",
            title: "Figure 10: 50% writes, zipf 0.7, SCR 32 MB, record width",
            x_label: "record bits",
            log_x: false,
            categories: None,
        },
        &points,
        &[THROUGHPUT, CHURN],
    )?;
    // Each row: the narrower width's throughput over the wider's, and the paper's shape.
    pair_row(h, &points, &pair_ratios);
    let rows = [
        (
            8,
            4,
            "< 1: below 8 bits wraps hurt (the paper's 4- and 2-bit points fall)",
        ),
        (8, 2, "< 1: every write wraps (a log event per write)"),
    ];
    for (wide, narrow, paper) in rows {
        let what = format!("{narrow}-bit / {wide}-bit records (50% writes, zipf 0.7, SCR 32 MB)");
        let (wide, narrow) = (f64::from(wide), f64::from(narrow));
        let pair = (("megalon", wide), ("megalon", narrow));
        throughput_row(h, "10", what, &points, pair, paper);
    }
    // The adaptive width against where it started and against the best fixed one here.
    for (fixed, paper) in [
        (
            32,
            "not in the paper: > 1 if the policy narrows the width where 32 bits churn",
        ),
        (
            8,
            "not in the paper: about 1 if it settles where the best fixed width is",
        ),
    ] {
        let what = format!(
            "adaptive / {fixed}-bit records (50% writes, zipf 0.7, SCR 32 MB; from {start}-bit)"
        );
        let pair = (("megalon", f64::from(fixed)), (ADAPTIVE, start));
        throughput_row(h, "10", what, &points, pair, paper);
    }
    Ok(())
}

/// The point of one width of the sweep, after its warm-ups, and its store (kept or
/// dropped by the caller).
fn measure_width(
    h: &mut Harness,
    setup: &Setup,
    plan: &PlanAt,
) -> Result<(Measured, KeptStore), String> {
    let (mut point, warm_ups, store) = h.measure_until_kept(
        Kind::Megalon,
        setup,
        "megalon",
        plan,
        MAX_WARM_UPS,
        |before, now| Ok(now.per_op(ALLOCS) >= before.per_op(ALLOCS) * 0.9),
    )?;
    point.x_name = format!("{} ({warm_ups} warm-up runs)", point.x_name);
    Ok((point, store))
}

/// One pair of runs of the headline's widths: which round (0: the sweep's points), which
/// width ran first, the two throughputs and their ratio (narrow over wide).
struct Pair {
    round: usize,
    narrow_first: bool,
    wide: f64,
    narrow: f64,
    ratio: f64,
}

/// The sweep's pair (round 0, not in the headline), then the headline's: [`PAIRED_ROUNDS`]
/// rounds of one more run on each kept store (`[wide, narrow]`), both stores alive, the
/// one that goes first alternating. Empty while counting (no throughput).
fn alternated_pairs(
    h: &mut Harness,
    points: &[Measured],
    [mut wide, mut narrow]: [KeptStore; 2],
) -> Result<Vec<Pair>, String> {
    let mut pairs = Vec::new();
    let pair = |round, narrow_first, wide: f64, narrow: f64| {
        ratio_of(narrow, wide).map(|ratio| Pair {
            round,
            narrow_first,
            wide,
            narrow,
            ratio,
        })
    };
    let at = |bits: u32| find(points, "megalon", f64::from(bits)).map(|p| p.ops_per_second);
    if let (Some(w), Some(n)) = (at(PAIR.0), at(PAIR.1)) {
        pairs.extend(pair(0, false, w, n));
    }
    for round in 0..PAIRED_ROUNDS {
        let narrow_first = round % 2 == 1;
        let (w, n) = if narrow_first {
            let n = h.run_again(&mut narrow)?;
            (h.run_again(&mut wide)?, n)
        } else {
            let w = h.run_again(&mut wide)?;
            (w, h.run_again(&mut narrow)?)
        };
        pairs.extend(pair(
            round + 1,
            narrow_first,
            w.ops_per_second,
            n.ops_per_second,
        ));
    }
    Ok(pairs)
}

/// `figure_10_pairs.csv`: the sweep's pair (round 0) and every pair the headline row's
/// median and range come from (rounds 1 on).
fn pairs_csv(pairs: &[Pair]) -> String {
    let mut csv = format!(
        "round,first,{}-bit ops/s,{}-bit ops/s,ratio\n",
        PAIR.0, PAIR.1
    );
    for p in pairs {
        let first = if p.narrow_first { PAIR.1 } else { PAIR.0 };
        csv.push_str(&format!(
            "{},{first}-bit,{:.0},{:.0},{:.4}\n",
            p.round, p.wide, p.narrow, p.ratio
        ));
    }
    csv
}

/// `narrow / wide`, if the wide run did anything.
fn ratio_of(narrow: f64, wide: f64) -> Option<f64> {
    (wide > 0.0).then(|| narrow / wide)
}

/// The summary's 8-bit over 32-bit row: the median of `ratios` and their range, with the
/// sweep's counters of the two widths.
fn pair_row(h: &mut Harness, points: &[Measured], ratios: &[f64]) {
    let (wide, narrow) = (f64::from(PAIR.0), f64::from(PAIR.1));
    let (Some(w), Some(n)) = (
        find(points, "megalon", wide),
        find(points, "megalon", narrow),
    ) else {
        return;
    };
    let mut sorted = ratios.to_vec();
    sorted.sort_by(f64::total_cmp);
    let ours = match sorted.as_slice() {
        [] => "n/a".to_string(),
        [.., last] => format!(
            "{:.2}x (median of {} alternated pairs; {:.2}x-{:.2}x)",
            median(&sorted),
            sorted.len(),
            sorted[0],
            last
        ),
    };
    h.row(
        "10",
        format!(
            "{}-bit / {}-bit records (50% writes, zipf 0.7, SCR 32 MB)",
            PAIR.1, PAIR.0
        ),
        ours,
        "> 1: 8-bit records all fit and match Figure 7(b)(ii)'s best; below 8 bits wraps \
         hurt",
        explain(&[w, n]),
    );
}

/// The median of `sorted` (not empty).
fn median(sorted: &[f64]) -> f64 {
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_of_an_odd_count_is_the_middle_one_of_an_even_the_mean_of_two() {
        assert_eq!(median(&[2.1, 2.4, 2.9]), 2.4);
        assert_eq!(median(&[2.1, 2.4, 2.6, 2.9]), 2.5);
        assert_eq!(median(&[2.7]), 2.7);
    }
}
