//! The figures' runner: the paper's setup scaled to this machine ([`Settings`],
//! [`Harness::setup`]), schemes built, loaded and run over it ([`Harness::measure`] and
//! its kin), what each run measured ([`Measured`]), the CSV of a panel's points, and the
//! summary's rows (our ratio beside the paper's, with the counters that explain it).
//!
//! A run of the figures goes twice over the same figures: first counting the runs they
//! would make (nothing is built or written: [`Harness::counting`]), then, after
//! [`Harness::start`], measuring them under a progress bar of that many runs.

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use megalon_core::CxlModel;

use crate::lineup::{self, Bench, Kind, Setup, Workers};
use crate::mix::{Choice, MixRun, Plan};

/// The paper's object count, which every size here is scaled from.
pub const PAPER_OBJECTS: f64 = 18e6;
/// The paper's SCR size in bytes.
pub const PAPER_SCR_BYTES: f64 = 200e6;
/// Hosts of every pod (the paper's 3).
pub const HOSTS: usize = 3;
/// The paper's key size ("each object has a 24-byte key").
pub const KEY_BYTES: usize = 24;
/// Bytes of a value: with the store's 4-byte length, 1 KiB objects.
pub const VALUE_BYTES: usize = 1020;
/// Seed of every plan's draws.
const PLAN_SEED: u64 = 0x00f1_9e5e;
/// x of a warm-up run, whose point is dropped ([`Harness::measure_warm`]).
const WARM_UP: f64 = -1.0;

/// `plan` for the warm-up run `run` (from 0) before it: the same workload with draws of
/// its own, so that the measured run does not replay the sequence its warm-ups drew.
fn warm_up_plan(plan: &Plan, run: usize) -> Plan {
    Plan {
        seed: plan.seed ^ 0x5741_524d_5550_0000u64.wrapping_add(run as u64 + 1),
        ..*plan
    }
}

/// `plan` for the `run`th run (from 1) after its measured one on a kept store
/// ([`Harness::run_again`]): the same workload with draws of its own.
fn again_plan(plan: &Plan, run: usize) -> Plan {
    Plan {
        seed: plan.seed ^ 0x4147_4149_4e00_0000u64.wrapping_add(run as u64),
        ..*plan
    }
}

/// `plans`, to run one after another on one store, each with draws of its own: a plan
/// whose seed a plan before it has (every plan of [`Harness::plan`] has [`PLAN_SEED`])
/// gets another, made from its seed and its place; the others are left as they are.
/// With one seed, each run drew the keys of the run before it in the same order, and
/// at a write mix that draws the same uniform for an operation's kind (YCSB's, or
/// [`Choice::Mix`]'s `write_ratio`), wrote every key where a run of fewer writes had
/// written it: YCSB A found the records of B's writes in place, Figures 13 and 15's
/// 50% those of their 5%, and Figure 8's measured runs replayed their warm-ups.
fn draws_of_their_own(plans: &[PlanAt]) -> Vec<PlanAt> {
    let mut seeds: Vec<u64> = Vec::new();
    plans
        .iter()
        .enumerate()
        .map(|(place, (x, x_name, plan))| {
            let mut seed = plan.seed;
            let mut tries = 0u64;
            while seeds.contains(&seed) {
                tries += 1;
                seed = plan.seed
                    ^ 0x4f57_4e5f_4452_0000u64
                        .wrapping_add((place as u64) << 8)
                        .wrapping_add(tries);
            }
            seeds.push(seed);
            (*x, x_name.clone(), Plan { seed, ..*plan })
        })
        .collect()
}

/// The point of the warm-up run `run` before `plan` (dropped from the figures).
fn warm_up(plan: &PlanAt, run: usize) -> PlanAt {
    (
        WARM_UP,
        format!("{} (warm-up)", plan.1),
        warm_up_plan(&plan.2, run),
    )
}

/// One point of a panel to run: its x, the x's name, and the plan run there.
pub type PlanAt = (f64, String, Plan);

/// What a run of the figures is sized by and where it goes.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Objects standing for the paper's 18M: every size tied to the object count is
    /// scaled by `objects / PAPER_OBJECTS`.
    pub objects: f64,
    /// Wall-clock seconds of each run.
    pub seconds: f64,
    /// Worker threads on each of the [`HOSTS`] hosts.
    pub threads_per_host: usize,
    /// Bind every pod's memory to this NUMA node.
    pub pod_node: Option<u32>,
    /// Run every host under the CXL cost model with these parameters (`None`: this
    /// machine's memory).
    pub cxl: Option<CxlModel>,
    /// Where CSVs, charts and the summary go.
    pub out: PathBuf,
}

/// One measured point.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The scheme's name ([`Kind::name`]).
    pub scheme: &'static str,
    /// The series within the panel (the scheme, or the scheme and a variant).
    pub series: String,
    /// Where on the x axis.
    pub x: f64,
    /// The x's name.
    pub x_name: String,
    /// Operations per second of the whole store.
    pub ops_per_second: f64,
    /// Mean latency of gets and puts together, in microseconds.
    pub mean_latency_us: f64,
    /// 99th percentile latency of gets and puts together, in microseconds.
    pub p99_latency_us: f64,
    /// Operations done.
    pub operations: u64,
    /// Every counter of the scheme over the run, per operation.
    pub per_op: Vec<(&'static str, f64)>,
    /// The scheme's gauges at the run's end (megalon's record width, say).
    pub gauges: Vec<(&'static str, u64)>,
}

impl Measured {
    /// The scheme's gauge `name` at the run's end, if it has one.
    pub fn gauge(&self, name: &str) -> Option<u64> {
        self.gauges.iter().find(|(n, _)| *n == name).map(|g| g.1)
    }

    /// The point of `run`, of scheme `scheme` in series `series` at `x`.
    pub fn from_run(
        scheme: &'static str,
        series: String,
        x: f64,
        x_name: String,
        run: &MixRun,
    ) -> Self {
        let mut latency = run.get_latency();
        latency.merge(&run.put_latency());
        let operations = run.operations().max(1);
        Measured {
            scheme,
            series,
            x,
            x_name,
            ops_per_second: run.ops_per_second(),
            mean_latency_us: latency.mean().as_secs_f64() * 1e6,
            p99_latency_us: latency.quantile(0.99).as_secs_f64() * 1e6,
            operations: run.operations(),
            per_op: run
                .report
                .counters
                .iter()
                .map(|&(name, v)| (name, v as f64 / operations as f64))
                .collect(),
            gauges: run.report.gauges.clone(),
        }
    }

    /// A point not measured: what a counting pass returns.
    fn counted(scheme: &'static str, series: &str, x: f64, x_name: &str) -> Self {
        Measured {
            scheme,
            series: series.into(),
            x,
            x_name: x_name.into(),
            ops_per_second: 0.0,
            mean_latency_us: 0.0,
            p99_latency_us: 0.0,
            operations: 0,
            per_op: Vec::new(),
            gauges: Vec::new(),
        }
    }

    /// Counter `name` per operation (0 if the scheme has no such counter).
    pub fn per_op(&self, name: &str) -> f64 {
        self.per_op
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0.0, |(_, v)| *v)
    }

    /// Churns per operation, in the paper's sense ([`Kind::churn_counter`]).
    pub fn churn(&self) -> f64 {
        self.per_op(Kind::named(self.scheme).map_or("churn", Kind::churn_counter))
    }
}

/// A store measured by [`Harness::measure_until_kept`], kept for more runs of its plan.
/// (While counting, no store: its runs are counted.)
pub struct KeptStore {
    bench: Option<Box<dyn Bench>>,
    scheme: &'static str,
    series: String,
    plan: PlanAt,
    workers: usize,
    /// Runs made by [`Harness::run_again`] so far.
    runs: usize,
}

/// A row of the summary: our ratio beside the paper's.
struct Row {
    figure: &'static str,
    what: String,
    ours: String,
    paper: &'static str,
    explain: String,
}

/// The run: its settings, how hosts' threads are placed, what was measured so far.
pub struct Harness {
    settings: Settings,
    /// Called by each worker thread with its host first (to pin it to the host's CPUs).
    pin: Box<dyn Fn(usize) + Sync>,
    /// Counting runs only (to size the progress bar): nothing is built or written.
    counting: bool,
    runs: u64,
    bar: ProgressBar,
    rows: Vec<Row>,
}

impl Harness {
    /// A harness counting runs ([`counting`](Self::counting)) until
    /// [`start`](Self::start); each worker thread first calls `pin` with its host.
    pub fn new(settings: Settings, pin: impl Fn(usize) + Sync + 'static) -> Self {
        Harness {
            settings,
            pin: Box::new(pin),
            counting: true,
            runs: 0,
            bar: ProgressBar::hidden(),
            rows: Vec::new(),
        }
    }

    /// What the run is sized by and where it goes.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Runs of under a second (`--quick`): the figures sweep fewer points.
    pub fn short_runs(&self) -> bool {
        self.settings.seconds < 1.0
    }

    /// The points a figure sweeps: `short` with [short runs](Self::short_runs), else
    /// `full`.
    pub fn sweep_points<'a, T>(&self, short: &'a [T], full: &'a [T]) -> &'a [T] {
        if self.short_runs() {
            short
        } else {
            full
        }
    }

    /// Whether this pass only counts runs: figures measure nothing real (every point is
    /// zero) and must write nothing.
    pub fn counting(&self) -> bool {
        self.counting
    }

    /// Counts `runs` more runs (for work a figure does besides [`measure`](Self::measure)).
    pub fn count_runs(&mut self, runs: u64) {
        self.runs += runs;
    }

    /// Runs counted so far.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// Ends the counting pass: from now on runs are measured, under a progress bar of
    /// the runs counted.
    pub fn start(&mut self) {
        self.counting = false;
        self.bar = ProgressBar::new(self.runs);
        self.bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} runs  {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
    }

    /// The progress bar (hidden while counting).
    pub fn bar(&self) -> &ProgressBar {
        &self.bar
    }

    /// One line for the report: sizes beside the paper's, runs, where they go.
    pub fn describe(&self) -> String {
        format!(
            "{} objects (paper 18M; factor 1/{:.0}), SCR {} KB (paper 200 MB), {} s per \
             run, {} hosts x {} threads, {}, {} runs, into {}",
            self.objects(PAPER_OBJECTS),
            1.0 / self.factor(),
            self.scr(PAPER_SCR_BYTES / 1e6) / 1000,
            self.settings.seconds,
            HOSTS,
            self.settings.threads_per_host,
            self.memory(),
            self.runs,
            self.settings.out.display()
        )
    }

    /// The memory the hosts run on, for reports: `hardware memory`, or the CXL cost
    /// model and every parameter.
    pub fn memory(&self) -> String {
        match &self.settings.cxl {
            Some(m) => format!(
                "CXL cost model: LNR miss {} ns, write-back {} ns, SCR access {} ns, {} lines \
                 in flight, {} KiB cache per host",
                m.lnr_miss_ns,
                m.write_back_ns,
                m.scr_ns,
                m.lines_in_flight,
                m.cache_bytes >> 10
            ),
            None => "hardware memory".to_string(),
        }
    }

    /// Our objects over the paper's.
    pub fn factor(&self) -> f64 {
        self.settings.objects / PAPER_OBJECTS
    }

    /// The paper's object count `paper` scaled.
    pub fn objects(&self, paper: f64) -> u64 {
        ((paper * self.factor()).round() as u64).max(64)
    }

    /// The paper's SCR size `paper_mb` (in MB) scaled, in whole pages.
    pub fn scr(&self, paper_mb: f64) -> u64 {
        ((paper_mb * 1e6 * self.factor()) as u64)
            .next_multiple_of(4096)
            .max(8 << 10)
    }

    /// The paper's setup over `keys` keys: its hosts, key and value sizes, its SCR
    /// scaled, 32-bit records, no local partitions or copies.
    pub fn setup(&self, keys: u64) -> Setup {
        Setup {
            hosts: HOSTS,
            keys,
            extra_keys: 0,
            key_bytes: KEY_BYTES,
            value_bytes: VALUE_BYTES,
            scr_bytes: self.scr(PAPER_SCR_BYTES / 1e6),
            record_bits: 32,
            numa_node: self.settings.pod_node,
            partition_after: 0,
            copy_after: 0,
            cxl: self.settings.cxl,
        }
    }

    /// `choice` over `setup`'s keys, with the figures' seed.
    pub fn plan(setup: &Setup, choice: Choice) -> Plan {
        Plan {
            keys: setup.keys,
            key_bytes: setup.key_bytes,
            value_bytes: setup.value_bytes,
            choice,
            seed: PLAN_SEED,
        }
    }

    /// Workers of a run with every host's threads.
    pub fn all_workers(&self) -> usize {
        HOSTS * self.settings.threads_per_host
    }

    /// Builds `kind` over `setup`, loads it, and runs each plan in order on it, with
    /// every host's threads, each after a warm-up run of itself (see
    /// [`measure_threads`](Self::measure_threads)).
    pub fn measure(
        &mut self,
        kind: Kind,
        setup: &Setup,
        series: &str,
        plans: &[PlanAt],
    ) -> Result<Vec<Measured>, String> {
        let workers = self.all_workers();
        self.measure_threads(kind, setup, series, plans, workers)
    }

    /// [`measure`](Self::measure) for each of `kinds` in turn, each its own series.
    pub fn measure_each(
        &mut self,
        kinds: &[Kind],
        setup: &Setup,
        plans: &[PlanAt],
    ) -> Result<Vec<Measured>, String> {
        let mut points = Vec::new();
        for &kind in kinds {
            points.extend(self.measure(kind, setup, kind.name(), plans)?);
        }
        Ok(points)
    }

    /// A sweep: each of `kinds` in turn (each its own series) at each point of `sweep`,
    /// on a store of its own built over that point's setup.
    pub fn measure_sweep(
        &mut self,
        kinds: &[Kind],
        sweep: &[(Setup, PlanAt)],
    ) -> Result<Vec<Measured>, String> {
        let mut points = Vec::new();
        for &kind in kinds {
            for (setup, plan) in sweep {
                let plans = std::slice::from_ref(plan);
                points.extend(self.measure(kind, setup, kind.name(), plans)?);
            }
        }
        Ok(points)
    }

    /// [`measure`](Self::measure) with `workers` threads (worker `w` on host `w % HOSTS`).
    /// Each plan runs after a warm-up of itself with draws of its own, whose point is
    /// dropped: a measured run finds the store as a run finds a store that has been
    /// working that way, not as the load or the plan before left it (megalon allocated a
    /// record for each object's first write, a log entry every host replays, and HCMeta
    /// churned 7-12% more on its first run than on the next; at 50% writes a first run of
    /// megalon allocated 0.17 records an operation, the run after it 0.035). A plan that
    /// inserts keys (YCSB D) after the first has no warm-up: every run of it inserts the
    /// same keys, which a warm-up would leave in the store.
    pub fn measure_threads(
        &mut self,
        kind: Kind,
        setup: &Setup,
        series: &str,
        plans: &[PlanAt],
        workers: usize,
    ) -> Result<Vec<Measured>, String> {
        let mut warmed = Vec::with_capacity(2 * plans.len());
        for (place, plan) in plans.iter().enumerate() {
            if place == 0 || !plan.2.inserts() {
                warmed.push(warm_up(plan, 0));
            }
            warmed.push(plan.clone());
        }
        let points = self.measure_as_given(kind, setup, series, &warmed, workers)?;
        Ok(points.into_iter().filter(|p| p.x != WARM_UP).collect())
    }

    /// Builds `kind` over `setup`, loads it, and runs each of `plans` in order on it with
    /// `workers` threads, as given: no warm-up but the caller's (whose points it returns
    /// too), each plan with draws of its own.
    pub fn measure_as_given(
        &mut self,
        kind: Kind,
        setup: &Setup,
        series: &str,
        plans: &[PlanAt],
        workers: usize,
    ) -> Result<Vec<Measured>, String> {
        if self.counting {
            self.runs += plans.len() as u64;
            return Ok(plans
                .iter()
                .map(|(x, x_name, _)| Measured::counted(kind.name(), series, *x, x_name))
                .collect());
        }
        let first = &plans.first().expect("a plan").2;
        let bench = self.build_loaded(kind, setup, series, first, workers)?;
        let mut out = Vec::new();
        for plan in &draws_of_their_own(plans) {
            out.push(self.run_plan(&*bench, series, plan, workers)?);
        }
        Ok(out)
    }

    /// A store of `kind` over `setup` (series `series`), loaded by `workers` threads for
    /// `first`.
    fn build_loaded(
        &mut self,
        kind: Kind,
        setup: &Setup,
        series: &str,
        first: &Plan,
        workers: usize,
    ) -> Result<Box<dyn Bench>, String> {
        self.bar
            .set_message(format!("{series}: loading {} keys", setup.keys));
        let bench = lineup::build(kind, setup)?;
        bench.load(first, self.workers(workers))?;
        Ok(bench)
    }

    fn workers(&self, count: usize) -> Workers<'_> {
        Workers {
            count,
            on_start: &*self.pin,
        }
    }

    /// One run of `plan` on `bench` (loaded), its point in series `series`.
    fn run_plan(
        &mut self,
        bench: &dyn Bench,
        series: &str,
        (x, x_name, plan): &PlanAt,
        workers: usize,
    ) -> Result<Measured, String> {
        self.bar
            .set_message(format!("{series}: {x_name}, {}", plan.describe()));
        let duration = Duration::from_secs_f64(self.settings.seconds);
        let run = bench.run(plan, self.workers(workers), duration)?;
        self.bar.inc(1);
        Ok(Measured::from_run(
            bench.name(),
            series.into(),
            *x,
            x_name.clone(),
            &run,
        ))
    }

    /// Runs each of `plans` on `kind` over `setup` as series `series`, each on a store
    /// of its own (built and loaded afresh: where objects sit depends on the plans
    /// before) and after a warm-up run of itself (objects move to their hosts' DRAM, and
    /// copies are made, only after some accesses), and drops the warm-ups' points.
    pub fn measure_warm(
        &mut self,
        kind: Kind,
        setup: &Setup,
        series: &str,
        plans: &[PlanAt],
    ) -> Result<Vec<Measured>, String> {
        let workers = self.all_workers();
        let mut points = Vec::new();
        for plan in plans {
            let warm = [warm_up(plan, 0), plan.clone()];
            points.extend(self.measure_as_given(kind, setup, series, &warm, workers)?);
        }
        Ok(points.into_iter().filter(|p| p.x != WARM_UP).collect())
    }

    /// [`measure_warm`](Self::measure_warm) of one plan, with warm-up runs until one
    /// leaves the gauge `gauge` where the run before it left it (a scheme that adapts
    /// itself, settled), at most `max_warm_ups`. Returns the measured point and the
    /// warm-up runs it took.
    pub fn measure_settled(
        &mut self,
        kind: Kind,
        setup: &Setup,
        series: &str,
        plan: &PlanAt,
        gauge: &str,
        max_warm_ups: usize,
    ) -> Result<(Measured, usize), String> {
        self.measure_until_kept(
            kind,
            setup,
            series,
            plan,
            max_warm_ups,
            |before, now| match (before.gauge(gauge), now.gauge(gauge)) {
                (_, None) => Err(format!("{series}: no gauge {gauge:?} to settle")),
                (before, now) => Ok(before == now),
            },
        )
        .map(|(point, warm_ups, _)| (point, warm_ups))
    }

    /// [`measure_warm`](Self::measure_warm) of one plan, with warm-up runs until
    /// `settled(run before, run)` says the last one found the store settled, at most
    /// `max_warm_ups`. Returns the measured point, the warm-up runs it took, and the
    /// store, kept for more runs of the plan ([`run_again`](Self::run_again)).
    pub fn measure_until_kept(
        &mut self,
        kind: Kind,
        setup: &Setup,
        series: &str,
        plan: &PlanAt,
        max_warm_ups: usize,
        settled: impl Fn(&Measured, &Measured) -> Result<bool, String>,
    ) -> Result<(Measured, usize, KeptStore), String> {
        assert!(max_warm_ups >= 1, "a warm-up at least");
        let workers = self.all_workers();
        let mut kept = KeptStore {
            bench: None,
            scheme: kind.name(),
            series: series.into(),
            plan: plan.clone(),
            workers,
            runs: 0,
        };
        if self.counting {
            self.runs += max_warm_ups as u64 + 1;
            let point = Measured::counted(kind.name(), series, plan.0, &plan.1);
            return Ok((point, 0, kept));
        }
        let bench = self.build_loaded(kind, setup, series, &plan.2, workers)?;
        let mut before: Option<Measured> = None;
        let mut warm_ups = 0;
        while warm_ups < max_warm_ups {
            let now = self.run_plan(&*bench, series, &warm_up(plan, warm_ups), workers)?;
            warm_ups += 1;
            let done = match &before {
                Some(before) => settled(before, &now)?,
                // The first run has nothing to be compared with; its own answer may still
                // be an error (a gauge it lacks).
                None => settled(&now, &now).map(|_| false)?,
            };
            if done {
                break;
            }
            before = Some(now);
        }
        // The bar counted the warm-ups not run.
        self.bar.inc((max_warm_ups - warm_ups) as u64);
        let point = self.run_plan(&*bench, series, plan, workers)?;
        kept.bench = Some(bench);
        Ok((point, warm_ups, kept))
    }

    /// Runs a kept store's plan once more, with draws of its own (a run the store has not
    /// seen), and returns its point.
    pub fn run_again(&mut self, kept: &mut KeptStore) -> Result<Measured, String> {
        kept.runs += 1;
        let (x, x_name, plan) = &kept.plan;
        let again = (*x, x_name.clone(), again_plan(plan, kept.runs));
        match &kept.bench {
            Some(bench) => self.run_plan(&**bench, &kept.series, &again, kept.workers),
            None => {
                self.runs += 1;
                Ok(Measured::counted(kept.scheme, &kept.series, *x, x_name))
            }
        }
    }

    /// The path of `file` in the output directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.settings.out.join(file)
    }

    /// Writes `contents` to `file` in the output directory; an error names the path.
    pub fn write(&self, file: &str, contents: &str) -> Result<(), String> {
        let path = self.path(file);
        fs::write(&path, contents).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Writes `points` as `{stem}.csv` ([`csv`]).
    pub fn write_csv(&self, stem: &str, points: &[Measured]) -> Result<(), String> {
        self.write(&format!("{stem}.csv"), &csv(points))
    }

    /// Adds a row to the summary (none while counting).
    pub fn row(
        &mut self,
        figure: &'static str,
        what: impl Into<String>,
        ours: String,
        paper: &'static str,
        explain: String,
    ) {
        if !self.counting {
            self.rows.push(Row {
                figure,
                what: what.into(),
                ours,
                paper,
                explain,
            });
        }
    }

    /// Adds a row comparing the throughput of series `ours` with series `theirs` at `x`
    /// (`"{context}: {ours} / {theirs}"`), beside the paper's `paper`, with the counters
    /// that explain it; none if either was not measured.
    pub fn compare(
        &mut self,
        figure: &'static str,
        points: &[Measured],
        [ours, theirs]: [&str; 2],
        x: f64,
        context: &str,
        paper: &'static str,
    ) {
        if let (Some(a), Some(b)) = (find(points, ours, x), find(points, theirs, x)) {
            self.row(
                figure,
                format!("{context}: {ours} / {theirs}"),
                ratio(a.ops_per_second, b.ops_per_second),
                paper,
                explain(&[a, b]),
            );
        }
    }

    /// The summary: a title with the sizes, and a table of every row so far.
    pub fn summary(&self) -> String {
        let mut summary = format!(
            "# Figures at {} objects ({} s per run, {} hosts x {} threads, {})\n\n\
             | figure | comparison | ours | paper | counters per operation |\n\
             | --- | --- | --- | --- | --- |\n",
            self.objects(PAPER_OBJECTS),
            self.settings.seconds,
            HOSTS,
            self.settings.threads_per_host,
            self.memory()
        );
        for r in &self.rows {
            let _ = writeln!(
                summary,
                "| {} | {} | {} | {} | {} |",
                r.figure, r.what, r.ours, r.paper, r.explain
            );
        }
        summary
    }
}

/// `text` as one CSV field (RFC 4180): in double quotes, its own doubled, when it holds a
/// comma, a quote or a line break ("read-only, zipf 0.99" is one field, not two).
pub fn csv_field(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\"")).into()
    } else {
        text.into()
    }
}

/// `points` as CSV: a row per point; after the throughput and latency columns, a column
/// per counter any point has (per operation; 0 where a scheme has no such counter).
pub fn csv(points: &[Measured]) -> String {
    let mut csv = String::from(
        "series,scheme,x,x_name,ops_per_second,mean_latency_us,p99_latency_us,operations",
    );
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in points.iter().flat_map(|p| &p.per_op) {
        if !names.contains(name) {
            names.push(name);
        }
    }
    for name in &names {
        let _ = write!(csv, ",{}", csv_field(&format!("{name} per op")));
    }
    csv.push('\n');
    for p in points {
        let _ = write!(
            csv,
            "{},{},{},{},{:.0},{:.3},{:.3},{}",
            csv_field(&p.series),
            csv_field(p.scheme),
            p.x,
            csv_field(&p.x_name),
            p.ops_per_second,
            p.mean_latency_us,
            p.p99_latency_us,
            p.operations
        );
        for name in &names {
            let _ = write!(csv, ",{:.6}", p.per_op(name));
        }
        csv.push('\n');
    }
    csv
}

/// `a / b` as `"4.2x"`.
pub fn ratio(a: f64, b: f64) -> String {
    if b <= 0.0 {
        "n/a".into()
    } else {
        format!("{:.2}x", a / b)
    }
}

/// The point of series `series` at `x`.
pub fn find<'a>(points: &'a [Measured], series: &str, x: f64) -> Option<&'a Measured> {
    points.iter().find(|p| p.series == series && p.x == x)
}

/// Counters a summary row names when they are not zero.
const EXPLAINING_COUNTERS: [&str; 17] = [
    "rpcs",
    "rpcs sent",
    "moves to a host",
    "move-backs",
    "local reads",
    "copy reads",
    "lines invalidated",
    "SCR atomics",
    "scr atomics",
    "log entries appended",
    "log entries replayed",
    crate::mix::CXL_NS_CHARGED,
    crate::mix::CXL_LINES_MISSED,
    crate::mix::CXL_SCR_ACCESSES,
    crate::mix::CXL_SCR_HITS,
    crate::mix::CXL_CURSOR_ACCESSES,
    crate::mix::CXL_CURSOR_HITS,
];

/// The counters per operation that explain a comparison, for the summary.
pub fn explain(points: &[&Measured]) -> String {
    points
        .iter()
        .map(|p| {
            let mut parts = vec![format!("churn {:.3}", p.churn())];
            for name in EXPLAINING_COUNTERS {
                let v = p.per_op(name);
                if v > 0.0 {
                    parts.push(format!("{name} {v:.2}"));
                }
            }
            format!("{} at {}: {}", p.series, p.x_name, parts.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The `main` of a figures command: `--help` (or `-h`) prints `usage`; otherwise the
/// arguments are parsed and run (`run` answers whether everything ran). Exits 0, 1 when
/// something did not run, 2 on bad arguments (the error, then the usage).
pub fn command_main<A>(
    usage: &str,
    args: &[String],
    parse: impl FnOnce(&[String]) -> Result<A, String>,
    run: impl FnOnce(&A) -> bool,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{usage}");
        return ExitCode::SUCCESS;
    }
    match parse(args) {
        Ok(args) if run(&args) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{e}\n\n{usage}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each warm-up draws keys of its own, and the measured run others again: with one
    /// seed for all, the run replayed the sequence its warm-ups had drawn, and found
    /// records already allocated for the keys it wrote first (Figure 10 at 16 bits, one
    /// run: 0.023 record allocations per operation against 0.032 with fresh draws).
    #[test]
    fn warm_ups_draw_other_keys_than_the_run_they_warm() {
        let plan = Plan {
            keys: 1000,
            key_bytes: KEY_BYTES,
            value_bytes: VALUE_BYTES,
            choice: Choice::Mix {
                write_ratio: 0.5,
                skew: 0.7,
            },
            seed: PLAN_SEED,
        };
        let seeds: Vec<u64> = (0..4).map(|run| warm_up_plan(&plan, run).seed).collect();
        let mut distinct = seeds.clone();
        distinct.push(plan.seed);
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 5, "{seeds:x?} and {:x}", plan.seed);
        let warm = warm_up_plan(&plan, 0);
        assert_eq!(
            Plan {
                seed: plan.seed,
                ..warm
            },
            plan,
            "the same workload"
        );
    }

    /// A store's runs draw keys of their own: Figure 14's workloads (one seed, one
    /// store) each get a seed no other has, Figure 8's measured run is not its warm-up's
    /// sequence again, and plans whose seeds differ already (a warm-up of
    /// [`warm_up_plan`] and its run) are left as they are.
    #[test]
    fn runs_on_one_store_draw_keys_of_their_own() {
        let plan = |choice| Plan {
            keys: 1000,
            key_bytes: KEY_BYTES,
            value_bytes: VALUE_BYTES,
            choice,
            seed: PLAN_SEED,
        };
        let ycsb: Vec<PlanAt> = megalon_workload::Workload::CORE
            .iter()
            .enumerate()
            .map(|(i, w)| (i as f64, w.name().to_string(), plan(Choice::Ycsb(*w))))
            .collect();
        let run = draws_of_their_own(&ycsb);
        let mut seeds: Vec<u64> = run.iter().map(|p| p.2.seed).collect();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), ycsb.len(), "{run:?}");
        for (ran, asked) in run.iter().zip(&ycsb) {
            assert_eq!((ran.0, &ran.1), (asked.0, &asked.1));
            assert_eq!(
                Plan {
                    seed: asked.2.seed,
                    ..ran.2
                },
                asked.2
            );
        }
        assert_eq!(run[0].2.seed, PLAN_SEED, "the first run keeps its seed");
        // Figure 8: a warm-up and its run, of one seed.
        let five = plan(Choice::Mix {
            write_ratio: 0.05,
            skew: 0.99,
        });
        let warm = [(-1.0, "w".into(), five), (0.0, "m".into(), five)];
        let run = draws_of_their_own(&warm);
        assert_ne!(run[0].2.seed, run[1].2.seed);
        // A warm-up of its own and its run: nothing to change.
        let at = (0.0, "m".to_string(), five);
        let warm = [warm_up(&at, 0), at];
        assert_eq!(draws_of_their_own(&warm), warm.to_vec());
    }

    /// Why: one seed draws one sequence of keys whatever the write mix, and a put
    /// wherever a mix of fewer puts put. A run of 50% writes after one of 5% on a store
    /// wrote every key the 5% run had written, at the same place in its sequence.
    #[test]
    fn one_seed_replays_the_keys_and_the_puts_of_a_run_of_fewer_writes() {
        let mix = |write_ratio| crate::mix::Mix {
            keys: 10_000,
            value_bytes: 8,
            write_ratio,
            skew: 0.99,
            seed: PLAN_SEED,
        };
        let (mut five, mut half) = (
            crate::mix::Draws::new(&mix(0.05), 0),
            crate::mix::Draws::new(&mix(0.5), 0),
        );
        let mut value = [0u8; 8];
        let (mut puts, mut replayed) = (0, 0);
        for _ in 0..10_000 {
            let (a, b) = (five.next(&mut value), half.next(&mut value));
            assert_eq!(a.index(), b.index());
            if let crate::mix::Draw::Put { .. } = a {
                puts += 1;
                replayed += u32::from(matches!(b, crate::mix::Draw::Put { .. }));
            }
        }
        assert!(puts > 0 && replayed == puts, "{replayed} of {puts}");
    }

    fn point(series: &str, x: f64, per_op: Vec<(&'static str, f64)>) -> Measured {
        Measured {
            per_op,
            ops_per_second: 1000.0,
            ..Measured::counted("megalon", series, x, "x")
        }
    }

    #[test]
    fn the_csv_has_a_column_for_every_counter_of_any_point() {
        let points = [
            point("megalon", 1.0, vec![("reads", 1.0), ("writes", 0.5)]),
            point("hcmeta", 1.0, vec![("reads", 1.0), ("rpcs", 0.25)]),
        ];
        let csv = csv(&points);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "series,scheme,x,x_name,ops_per_second,mean_latency_us,p99_latency_us,operations,\
             reads per op,writes per op,rpcs per op"
        );
        assert_eq!(
            lines[2],
            "hcmeta,megalon,1,x,1000,0.000,0.000,0,1.000000,0.000000,0.250000"
        );
        assert_eq!(lines.len(), 3);
    }

    /// The fields of one CSV line as RFC 4180 reads them (quoted fields may hold commas
    /// and doubled quotes).
    fn fields(line: &str) -> Vec<String> {
        let (mut fields, mut field, mut quoted) = (Vec::new(), String::new(), false);
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    field.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => fields.push(std::mem::take(&mut field)),
                (c, _) => field.push(c),
            }
        }
        fields.push(field);
        fields
    }

    /// A name with a comma or a quote is one field (Figure 12's "read-only, zipf 0.99",
    /// the adaptive series' "adaptive from 32-bit records, at 8 bits ...", the RESP
    /// panel's "megalon-server, 1 host" each made two, and shifted every column after).
    #[test]
    fn a_name_with_a_comma_or_a_quote_is_one_field() {
        let mut named = point("megalon \"adaptive\"", 1.0, vec![("reads", 1.0)]);
        named.x_name = "read-only, zipf 0.99".into();
        let csv = csv(&[named]);
        let lines: Vec<&str> = csv.lines().collect();
        let header = fields(lines[0]);
        let row = fields(lines[1]);
        assert_eq!(row.len(), header.len(), "{}", lines[1]);
        assert_eq!(row[0], "megalon \"adaptive\"");
        assert_eq!(row[3], "read-only, zipf 0.99");
        assert_eq!(row[8], "1.000000");
        assert_eq!(csv_field("plain"), "plain");
    }

    #[test]
    fn counting_counts_runs_and_keeps_no_rows() {
        let settings = Settings {
            objects: 40e3,
            seconds: 0.3,
            threads_per_host: 2,
            pod_node: None,
            cxl: None,
            out: PathBuf::from("/nonexistent"),
        };
        let mut h = Harness::new(settings, |_| {});
        let setup = h.setup(h.objects(PAPER_OBJECTS));
        let plans = [
            (0.0, "a".to_string(), Harness::plan(&setup, read_only())),
            (1.0, "b".to_string(), Harness::plan(&setup, read_only())),
        ];
        let points = h
            .measure_each(&[Kind::Megalon, Kind::HcMeta], &setup, &plans)
            .unwrap();
        // Two points of each scheme, and four runs: each point's warm-up runs too.
        assert_eq!((points.len(), h.runs()), (4, 8));
        assert!(find(&points, "hcmeta", 1.0).is_some());
        h.compare("t", &points, ["megalon", "hcmeta"], 0.0, "c", "p");
        assert!(h.summary().ends_with("| --- | --- | --- | --- | --- |\n"));
        assert_eq!(h.objects(PAPER_OBJECTS), 40_000);
        assert_eq!(ratio(3.0, 2.0), "1.50x");
        assert_eq!(ratio(3.0, 0.0), "n/a");
    }

    fn read_only() -> Choice {
        Choice::Mix {
            write_ratio: 0.0,
            skew: 0.99,
        }
    }
}
