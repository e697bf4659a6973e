//! Scale benchmark: N Habitats created at once, on the sandbox (its embedded API server with the
//! simulated nodes) or on a real control plane (etcd, kube-apiserver, kube-controller-manager
//! from `KUBEBUILDER_ASSETS`, with the simulated nodes as an API client), the operator running
//! as its own process. Against the same server in the same run, the floor: a plain client that
//! creates the same children at the same concurrency and writes each status once; and the
//! required floor, which adds the finalizer, the status on the way, the leader label and the
//! Events that the issue requires, at their minimal count (`floor::Floor`).
//!
//! ```text
//! cargo bench --bench scale -- [--ground sandbox|real|both]... [--workers W]
//!     [--resync-seconds S] [--no-floor] [--no-required-floor] [--warm-up H] [--rounds R] N...
//! ```
//!
//! With `--rounds R`, R - 1 more rounds follow the measurement, each the plain floor, the required
//! floor and the operator again on the same server (in an order that turns each round), and the
//! medians of the R rounds' time ratios are reported beside each round's: on the 2-core machine
//! the same run of the same work took 4.2 to 7.3 s at N = 100, so one set of runs says little.
//!
//! `cargo bench --bench scale -- N` runs the sandbox. Prints a table per (ground, N) and writes
//! `target/bench/results.json` (under `CARGO_TARGET_DIR` when set). docs/performance.md has the
//! method, the latest numbers and how to read them.

mod floor;
mod ground;
mod machine;
mod operator;
mod report;
mod workload;

#[path = "../../tests/support/prometheus.rs"]
#[allow(unused)]
mod prometheus;

use std::time::{Duration, Instant};

use floor::Floor;
use ground::{Ground, Kind, Settled};
use report::{Breakdown, ControlPlaneRuns, Measurement, PerRun, Restart, Round, RoundProcess};

/// The sandbox runs in this process: the same allocator as the `sandbox` command (src/main.rs).
/// With glibc's malloc, allocation was 37% of the sandbox's CPU samples at N = 1000 and 41% at
/// N = 5000 (`_int_malloc`, `malloc_consolidate`, `unlink_chunk`); with mimalloc the sandbox
/// ground's runs took 17 to 20% less time at both sizes, on average over four runs of each.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The driver's User-Agent (its requests are not counted as anyone's cost).
const DRIVER: &str = "habitat-bench/driver";

struct Args {
    grounds: Vec<Kind>,
    sizes: Vec<usize>,
    workers: u16,
    resync: Duration,
    floor: bool,
    required_floor: bool,
    /// Habitats of the warm-up (at most N; 0: none).
    warm_up: usize,
    /// Rounds of the floors and the operator's run to time, the measurement's own included.
    rounds: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        grounds: vec![],
        sizes: vec![],
        workers: habitat_operator::runtime::controller::DEFAULT_WORKERS,
        resync: Duration::from_secs(60),
        floor: true,
        required_floor: true,
        warm_up: 100,
        rounds: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            // cargo bench passes --bench to a harness-less benchmark.
            "--bench" => {}
            "--ground" => {
                for g in value("--ground")?.split(',') {
                    match g {
                        "sandbox" => args.grounds.push(Kind::Sandbox),
                        "real" => args.grounds.push(Kind::Real),
                        "both" => args.grounds.extend([Kind::Sandbox, Kind::Real]),
                        other => {
                            return Err(format!("--ground {other}: use sandbox, real or both"))
                        }
                    }
                }
            }
            "--workers" => {
                args.workers = value("--workers")?
                    .parse()
                    .map_err(|e| format!("--workers: {e}"))?
            }
            "--resync-seconds" => {
                let s: u64 = value("--resync-seconds")?
                    .parse()
                    .map_err(|e| format!("--resync-seconds: {e}"))?;
                args.resync = Duration::from_secs(s.max(1));
            }
            "--no-floor" => args.floor = false,
            "--no-required-floor" => args.required_floor = false,
            "--warm-up" => {
                args.warm_up = value("--warm-up")?
                    .parse()
                    .map_err(|e| format!("--warm-up: {e}"))?
            }
            "--rounds" => {
                args.rounds = match value("--rounds")?.parse() {
                    Ok(r) if r > 0 => r,
                    _ => return Err("--rounds: a count of at least 1".into()),
                }
            }
            n => match n.parse() {
                Ok(n) if n > 0 => args.sizes.push(n),
                _ => {
                    return Err(format!(
                        "unknown argument {n:?}: usage: scale [--ground sandbox|real|both]... \
                         [--workers W] [--resync-seconds S] [--no-floor] [--no-required-floor] [--warm-up H] [--rounds R] N..."
                    ))
                }
            },
        }
    }
    if args.grounds.is_empty() {
        args.grounds.push(Kind::Sandbox);
    }
    if args.sizes.is_empty() {
        args.sizes.push(50);
    }
    if args.rounds > 1 && !args.floor {
        return Err("--rounds pairs the plain floor with the operator: not with --no-floor".into());
    }
    Ok(args)
}

/// How long a run of `n` Habitats may take before it is called a failure.
fn timeout(n: usize) -> Duration {
    Duration::from_secs(180 + 2 * n as u64)
}

/// What one floor measured.
struct FloorRun {
    /// From the first create until every status was written.
    secs: f64,
    writes: u64,
    /// What the machine spent meanwhile.
    usage: Usage,
}

/// What the machine spent during a run (each `None` where /proc could not say).
#[derive(Clone, Copy, Default)]
struct Usage {
    /// The cores other processes kept busy.
    others: Option<f64>,
    /// The control plane's CPU seconds, by process (the real ground only).
    control_plane_s: Option<machine::ControlPlaneCpu>,
    /// The benchmark process's own CPU seconds.
    bench_s: Option<f64>,
}

/// From `before` until now: the control plane's CPU seconds only when `real` (the sandbox's
/// server runs inside the benchmark).
fn usage(before: Option<machine::Sample>, real: bool) -> Usage {
    let between = before.zip(machine::Sample::now());
    Usage {
        others: between.map(|(a, b)| a.others_until(&b)),
        control_plane_s: between
            .filter(|_| real)
            .map(|(a, b)| a.control_plane_until(&b)),
        bench_s: between.map(|(a, b)| a.bench_until(&b)),
    }
}

/// The floor `kind` on `ground`.
async fn floor(
    ground: &Ground,
    kind: Floor,
    args: &Args,
    n: usize,
    round: usize,
) -> Result<FloorRun, String> {
    let driver = ground.client(DRIVER).await?;
    let client = ground.client(kind.agent()).await?;
    let ns = &round_namespace(kind.namespace(), round);
    ground.create_namespace(&driver, ns).await?;
    let before = machine::Sample::now();
    let took = floor::run(
        kind,
        &driver,
        &client,
        ns,
        n,
        usize::from(args.workers),
        timeout(n),
    )
    .await?;
    let usage = usage(before, ground.kind == Kind::Real);
    let counts = ground.requests(kind.agent()).await?;
    let writes = Breakdown::between(&Default::default(), &counts).writes;
    // The required floor's finalizers would hold its namespace (the driver's writes).
    clear(ground, &driver, ns, kind.name(), kind == Floor::Required).await?;
    Ok(FloorRun {
        secs: took.as_secs_f64(),
        writes,
        usage,
    })
}

/// Deletes the namespace `ns` that the run `what` used, first releasing its Habitats'
/// finalizers when `release` (no operator is left to remove them), and waits until it is gone and
/// kube-controller-manager is done with it: out of the way of the next run, whose objects would
/// otherwise share the simulated nodes and kube-controller-manager with them (see
/// `Ground::delete_namespace`).
async fn clear(
    ground: &Ground,
    driver: &kube::Client,
    ns: &str,
    what: &str,
    release: bool,
) -> Result<(), String> {
    if release {
        workload::release(driver, ns).await?;
    }
    let began = Instant::now();
    let left = ground
        .delete_namespace(driver, ns, Duration::from_secs(600))
        .await?;
    let Some(left) = left else {
        let gone = began.elapsed().as_secs_f64();
        // Nor should the controllers' work on what the namespace held overlap the next run.
        match ground.settle(ns, Duration::from_secs(60)).await? {
            Some(Settled::Done(settled)) => eprintln!(
                "{}: the {what}'s namespace was gone after {gone:.1} s, and \
                 kube-controller-manager done with it {:.1} s later",
                ground.kind.name(),
                settled.as_secs_f64()
            ),
            Some(Settled::GaveUp(waited)) => eprintln!(
                "{}: the {what}'s namespace was gone after {gone:.1} s; \
                 kube-controller-manager was still busy with it {:.1} s later, and the \
                 next run starts anyway",
                ground.kind.name(),
                waited.as_secs_f64()
            ),
            None => eprintln!(
                "{}: the {what}'s namespace was gone after {gone:.1} s",
                ground.kind.name(),
            ),
        }
        return Ok(());
    };
    // A measurement beside them would not be the next run's alone.
    Err(format!(
        "the {what}'s namespace was still there after 600 s, with {left}; the next run would \
         share the server with them"
    ))
}

/// The operator on `ground`.
async fn measure(kind: Kind, args: &Args, n: usize) -> Result<Measurement, String> {
    let ground = Ground::start(kind).await?;
    let result = measure_on(&ground, args, n).await;
    if result.is_err() {
        eprintln!("(failed on {})", ground.where_());
    }
    ground.shutdown().await;
    result
}

async fn measure_on(ground: &Ground, args: &Args, n: usize) -> Result<Measurement, String> {
    // A fresh server is slow at first: at N = 100 on the real ground the run that came first
    // took 9.1 to 13.7 s, the plain floor after the required floor 7.8 to 9.1 s. The plain
    // floor's work, at most 100 Habitats of it by default, warms the server before anything is
    // measured, so that no measured run pays for being first.
    let warm_up = if args.warm_up > 0 {
        let w = args.warm_up.min(n);
        let run = floor(ground, Floor::WarmUp, args, w, 1).await?;
        eprintln!(
            "{}: warm-up with {w} Habitats: {:.2} s",
            ground.kind.name(),
            run.secs
        );
        Some((w, run))
    } else {
        None
    };
    // The required floor first, so that the plain floor runs just before the operator, on a
    // server in the same state. A run on a server that already ran one was a few percent slower
    // at N = 1000, so the order favours the required floor, not the operator.
    let required = if args.floor && args.required_floor {
        let run = floor(ground, Floor::Required, args, n, 1).await?;
        eprintln!(
            "{}: required floor for N = {n}: {:.2} s",
            ground.kind.name(),
            run.secs
        );
        Some(run)
    } else {
        None
    };
    let plain = if args.floor {
        let run = floor(ground, Floor::Plain, args, n, 1).await?;
        eprintln!(
            "{}: floor for N = {n}: {:.2} s",
            ground.kind.name(),
            run.secs
        );
        Some(run)
    } else {
        None
    };

    let driver = ground.client(DRIVER).await?;
    let ns = OPERATOR_NAMESPACE;
    let identity = format!("bench-{}-{n}", ground.kind.name());
    let mut logs = tempfile::Builder::new()
        .prefix("habitat-bench-operator-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    if std::env::var_os("HABITAT_BENCH_OPERATOR_LOG").is_some() {
        logs.disable_cleanup(true);
        eprintln!(
            "operator logs (kept): {} (one per run, named by the identity)",
            logs.path().display()
        );
    }
    let OperatorRun {
        mut op,
        to_ready,
        usage,
    } = run_operator(ground, &driver, args, n, ns, &identity, logs.path()).await?;
    // Every request of this process counts, its start-up lists and watches included.
    let agent = format!("({identity})");
    op.check_running()?;
    let (cpu_to_ready, _) = op.usage()?;
    let metrics = op.metrics().await?;
    // The writes that trail the last status (its Event) belong to the convergence.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let at_ready = ground.requests(&agent).await?;

    let quiet_for = 2 * args.resync;
    tokio::time::sleep(quiet_for).await;
    op.check_running()?;
    let at_end = ground.requests(&agent).await?;
    let (cpu, rss) = op.usage()?;
    drop(op);
    let restart = restart(ground, args, ns, &identity, n, logs.path()).await?;
    let rounds = if args.rounds > 1 {
        // The restarted operator has exited: the driver releases the Habitats.
        clear(ground, &driver, ns, "operator", true).await?;
        more_rounds(ground, &driver, args, n, &identity, logs.path()).await?
    } else {
        vec![]
    };

    let (pods, leader_groups) = workload::totals(n);
    // The floors' usage: the warm-up's, the required floor's, the plain floor's.
    let runs = [
        warm_up.as_ref().map(|(_, r)| r.usage),
        required.as_ref().map(|r| r.usage),
        plain.as_ref().map(|r| r.usage),
    ]
    .map(Option::unwrap_or_default);
    let name = "habitat_operator_reconcile_duration_seconds";
    let buckets = prometheus::buckets(&metrics, name);
    let q = |q: f64| prometheus::quantile(&buckets, q).map(|s| s * 1000.0);
    let reconciles = reconciles_total(&metrics);
    Ok(Measurement {
        ground: ground.kind.name(),
        n,
        pods,
        leader_groups,
        workers: args.workers,
        time_to_ready_s: to_ready.all.as_secs_f64(),
        ready_half_s: to_ready.half.as_secs_f64(),
        ready_p90_s: to_ready.p90.as_secs_f64(),
        floor_s: plain.as_ref().map(|r| r.secs),
        floor_writes: plain.as_ref().map(|r| r.writes),
        required_s: required.as_ref().map(|r| r.secs),
        required_writes: required.as_ref().map(|r| r.writes),
        warm_up: warm_up.as_ref().map(|(w, r)| (*w, r.secs)),
        restart,
        others: PerRun {
            warm_up: runs[0].others,
            required_floor: runs[1].others,
            floor: runs[2].others,
            operator: usage.others,
        },
        control_plane_cpu_s: ControlPlaneRuns {
            warm_up: runs[0].control_plane_s,
            required_floor: runs[1].control_plane_s,
            floor: runs[2].control_plane_s,
            operator: usage.control_plane_s,
        },
        bench_cpu_s: PerRun {
            warm_up: runs[0].bench_s,
            required_floor: runs[1].bench_s,
            floor: runs[2].bench_s,
            operator: usage.bench_s,
        },
        requests: Breakdown::between(&Default::default(), &at_ready),
        quiet: Breakdown::between(&at_ready, &at_end),
        quiet_seconds: quiet_for.as_secs_f64(),
        peak_rss_mib: rss,
        cpu_s: cpu,
        cpu_s_to_ready: cpu_to_ready,
        reconciles,
        reconcile_ms: [q(0.5), q(0.9), q(0.99)],
        rounds,
    })
}

/// The namespace of the operator's run.
const OPERATOR_NAMESPACE: &str = "bench";

/// The namespace of round `round` of a run whose first round uses `first`: a name of its own,
/// never one just deleted. With the names reused, at N = 100 a run that followed a run of its own
/// kind (in a namespace of the name just deleted, with objects of the same names) took 1.36 times
/// as long as one that followed the other kind for the plain floor, 1.18 times for the operator;
/// with names of their own, 1.04 and 1.08.
fn round_namespace(first: &str, round: usize) -> String {
    if round > 1 {
        format!("{first}-round-{round}")
    } else {
        first.to_string()
    }
}

/// The operator's run, timed: the operator is left running.
struct OperatorRun {
    op: operator::Operator,
    to_ready: workload::ReadyTimes,
    /// What the machine spent meanwhile.
    usage: Usage,
}

/// Starts the operator as `identity` (its log in `logs`) on the new namespace `ns`, waits until
/// its caches are synced, then creates the `n` Habitats there and times them to Ready.
async fn run_operator(
    ground: &Ground,
    driver: &kube::Client,
    args: &Args,
    n: usize,
    ns: &str,
    identity: &str,
    logs: &std::path::Path,
) -> Result<OperatorRun, String> {
    ground.create_namespace(driver, ns).await?;
    let op = operator::Operator::start(
        &ground.operator_kubeconfig,
        ns,
        identity,
        args.workers,
        args.resync,
        &logs.join(format!("{identity}.log")),
    )
    .await?;
    let start = Instant::now();
    let before = machine::Sample::now();
    let waiter = {
        let (driver, ns) = (driver.clone(), ns.to_string());
        tokio::spawn(async move { workload::wait_ready(&driver, &ns, n, start, timeout(n)).await })
    };
    workload::create(driver, ns, n, drop).await?;
    let to_ready = waiter
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{e}; operator log:\n{}", op.log_tail()))?;
    Ok(OperatorRun {
        op,
        to_ready,
        usage: usage(before, ground.kind == Kind::Real),
    })
}

/// The rounds after the measurement's (`--rounds`): in each, the plain floor, the required floor
/// (unless `--no-required-floor`) and the operator's run once more on the same server. The
/// measurement's order (required floor, plain floor, operator) turns by one place each round, so
/// that every run takes every place as often and a server that slows (or speeds up) as it runs
/// favours none of them.
async fn more_rounds(
    ground: &Ground,
    driver: &kube::Client,
    args: &Args,
    n: usize,
    identity: &str,
    logs: &std::path::Path,
) -> Result<Vec<Round>, String> {
    let mut rounds = vec![];
    for r in 2..=args.rounds {
        let order = round_order(args.required_floor, r);
        let mut plain = None;
        let mut required = None;
        let mut operator = None;
        for &run in &order {
            match run {
                RoundRun::Plain => plain = Some(floor(ground, Floor::Plain, args, n, r).await?),
                RoundRun::Required => {
                    required = Some(floor(ground, Floor::Required, args, n, r).await?)
                }
                RoundRun::Operator => {
                    let identity = format!("{identity}-round-{r}");
                    let ns = &round_namespace(OPERATOR_NAMESPACE, r);
                    let mut run =
                        run_operator(ground, driver, args, n, ns, &identity, logs).await?;
                    run.op.check_running()?;
                    let (cpu_s, rss_mib) = run.op.usage()?;
                    let reconciles = reconciles_total(&run.op.metrics().await?);
                    drop(run.op);
                    clear(ground, driver, ns, "operator", true).await?;
                    let process = RoundProcess {
                        cpu_s_to_ready: cpu_s,
                        peak_rss_mib: rss_mib,
                        reconciles,
                    };
                    operator = Some((run.to_ready.all.as_secs_f64(), run.usage, process));
                }
            }
        }
        let (Some(plain), Some((operator_s, operator_usage, process))) = (plain, operator) else {
            return Err(format!("round {r} lacks the plain floor or the operator"));
        };
        let required_usage = required.as_ref().map(|r| r.usage).unwrap_or_default();
        let round = Round {
            order: order.iter().map(|r| r.name()).collect(),
            floor_s: plain.secs,
            required_s: required.as_ref().map(|r| r.secs),
            time_to_ready_s: operator_s,
            control_plane_s: [
                plain.usage.control_plane_s,
                required_usage.control_plane_s,
                operator_usage.control_plane_s,
            ],
            bench_s: [
                plain.usage.bench_s,
                required_usage.bench_s,
                operator_usage.bench_s,
            ],
            process,
        };
        let required_line = round
            .required_ratio()
            .map(|q| {
                format!(
                    ", required floor {:.2} s (operator/required {q:.2})",
                    round.required_s.unwrap_or_default()
                )
            })
            .unwrap_or_default();
        eprintln!(
            "{}: round {r} of {} ({}): floor {:.2} s, operator {:.2} s, ratio {:.2}{required_line}, operator CPU {:.2} ms per Habitat",
            ground.kind.name(),
            args.rounds,
            round.order(),
            round.floor_s,
            round.time_to_ready_s,
            round.ratio(),
            round.process.cpu_ms_per_habitat(n)
        );
        rounds.push(round);
    }
    Ok(rounds)
}

/// One run of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RoundRun {
    Required,
    Plain,
    Operator,
}

impl RoundRun {
    fn name(self) -> &'static str {
        match self {
            RoundRun::Required => Floor::Required.name(),
            RoundRun::Plain => Floor::Plain.name(),
            RoundRun::Operator => "operator",
        }
    }
}

/// The order of round `round`'s runs: the measurement's (the required floor when run, the plain
/// floor, the operator), turned by one place per round after the first.
fn round_order(required: bool, round: usize) -> Vec<RoundRun> {
    let mut order: Vec<RoundRun> = [RoundRun::Required, RoundRun::Plain, RoundRun::Operator]
        .into_iter()
        .filter(|r| required || *r != RoundRun::Required)
        .collect();
    let turn = round.saturating_sub(1) % order.len();
    order.rotate_left(turn);
    order
}

/// Reconciles so far, by the operator's `/metrics`.
fn reconciles_total(metrics: &str) -> f64 {
    ["success", "error"]
        .iter()
        .map(|r| {
            prometheus::value(
                metrics,
                &format!("habitat_operator_reconciles_total{{result=\"{r}\"}}"),
            )
        })
        .sum()
}

/// The operator started again over the `n` settled Habitats of `ns`, as after an upgrade: its
/// caches fill from whole lists instead of object by object, and every Habitat is reconciled
/// once. Measured until it has reconciled `n` times: its peak RSS, how long its caches took to
/// sync, how long the reconciles took from then, and its writes (none are due).
async fn restart(
    ground: &Ground,
    args: &Args,
    ns: &str,
    identity: &str,
    n: usize,
    logs: &std::path::Path,
) -> Result<Restart, String> {
    let identity = format!("{identity}-restart");
    let op = operator::Operator::start(
        &ground.operator_kubeconfig,
        ns,
        &identity,
        args.workers,
        args.resync,
        &logs.join(format!("{identity}.log")),
    )
    .await?;
    let began = Instant::now();
    while reconciles_total(&op.metrics().await?) < n as f64 {
        if began.elapsed() > timeout(n) {
            return Err(format!(
                "the restarted operator did not reconcile every Habitat in {:?}:\n{}",
                timeout(n),
                op.log_tail()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settled_s = began.elapsed().as_secs_f64();
    // Writes a reconcile made are received by now; the Events that would trail them too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = ground.requests(&format!("({identity})")).await?;
    let (_, peak_rss_mib) = op.usage()?;
    Ok(Restart {
        synced_s: op.synced_in.as_secs_f64(),
        settled_s,
        peak_rss_mib,
        requests: Breakdown::between(&Default::default(), &requests),
    })
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("scale: {e}");
            std::process::exit(2);
        }
    };
    let mut entries = vec![];
    let mut measured = vec![];
    let mut failed = false;
    for &kind in &args.grounds {
        for &n in &args.sizes {
            match measure(kind, &args, n).await {
                Ok(m) => {
                    m.print();
                    entries.push(m.to_json());
                    measured.push(m);
                }
                Err(e) => {
                    eprintln!("scale: {} ground, N = {n}: {e}", kind.name());
                    failed = true;
                }
            }
        }
    }
    report::print_scaling(&measured, args.resync);
    match report::save(&entries) {
        Ok(path) => println!("\nresults: {}", path.display()),
        Err(e) => {
            eprintln!("scale: writing the results: {e}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}
