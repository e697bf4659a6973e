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
//!     [--resync-seconds S] [--no-floor] [--no-required-floor] N...
//! ```
//!
//! `cargo bench --bench scale -- N` runs the sandbox. Prints a table per (ground, N) and writes
//! `target/bench/results.json` (under `CARGO_TARGET_DIR` when set). See docs/performance.md.

mod floor;
mod ground;
mod operator;
mod report;
mod workload;

#[path = "../../tests/support/prometheus.rs"]
#[allow(unused)]
mod prometheus;

use std::time::{Duration, Instant};

use floor::Floor;
use ground::{Ground, Kind};
use report::{Breakdown, Measurement};

/// The driver's User-Agent (its requests are not counted as anyone's cost).
const DRIVER: &str = "habitat-bench/driver";

struct Args {
    grounds: Vec<Kind>,
    sizes: Vec<usize>,
    workers: u16,
    resync: Duration,
    floor: bool,
    required_floor: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        grounds: vec![],
        sizes: vec![],
        workers: habitat_operator::runtime::controller::DEFAULT_WORKERS,
        resync: Duration::from_secs(60),
        floor: true,
        required_floor: true,
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
            n => match n.parse() {
                Ok(n) if n > 0 => args.sizes.push(n),
                _ => {
                    return Err(format!(
                        "unknown argument {n:?}: usage: scale [--ground sandbox|real|both]... \
                         [--workers W] [--resync-seconds S] [--no-floor] [--no-required-floor] N..."
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
    Ok(args)
}

/// How long a run of `n` Habitats may take before it is called a failure.
fn timeout(n: usize) -> Duration {
    Duration::from_secs(180 + 2 * n as u64)
}

/// The floor `kind` on `ground`: its time to every status written, and its writes.
async fn floor(ground: &Ground, kind: Floor, args: &Args, n: usize) -> Result<(f64, u64), String> {
    let driver = ground.client(DRIVER).await?;
    let client = ground.client(kind.agent()).await?;
    let ns = kind.namespace();
    ground.create_namespace(&driver, ns).await?;
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
    let counts = ground.requests(kind.agent()).await?;
    let writes = Breakdown::between(&Default::default(), &counts).writes;
    // The required floor's finalizers would hold its namespace (the driver's writes).
    if kind == Floor::Required {
        workload::release(&driver, ns).await?;
    }
    // Out of the way of the operator's run: its objects would cost the simulated nodes and
    // kube-controller-manager time (see `Ground::delete_namespace`).
    let began = Instant::now();
    let left = ground
        .delete_namespace(&driver, ns, Duration::from_secs(600))
        .await?;
    match left {
        None => eprintln!(
            "{}: the {}'s namespace was gone after {:.1} s",
            ground.kind.name(),
            kind.name(),
            began.elapsed().as_secs_f64()
        ),
        // A measurement beside them would not be the operator's alone.
        Some(left) => {
            return Err(format!(
                "the {}'s namespace was still there after 600 s, with {left}; the \
                 operator's run would share the server with them",
                kind.name()
            ))
        }
    }
    Ok((took.as_secs_f64(), writes))
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
    // The required floor first: the plain floor keeps its place just before the operator, as
    // in the earlier passes. A run on a server that already ran one is a few percent slower
    // (docs/performance.md), so the order favours the required floor, not the operator.
    let (required_s, required_writes) = if args.floor && args.required_floor {
        let (s, w) = floor(ground, Floor::Required, args, n).await?;
        eprintln!(
            "{}: required floor for N = {n}: {s:.2} s",
            ground.kind.name()
        );
        (Some(s), Some(w))
    } else {
        (None, None)
    };
    let (floor_s, floor_writes) = if args.floor {
        let (s, w) = floor(ground, Floor::Plain, args, n).await?;
        eprintln!("{}: floor for N = {n}: {s:.2} s", ground.kind.name());
        (Some(s), Some(w))
    } else {
        (None, None)
    };

    let driver = ground.client(DRIVER).await?;
    let ns = "bench";
    ground.create_namespace(&driver, ns).await?;
    let identity = format!("bench-{}-{n}", ground.kind.name());
    let mut logs = tempfile::Builder::new()
        .prefix("habitat-bench-operator-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    if std::env::var_os("HABITAT_BENCH_OPERATOR_LOG").is_some() {
        logs.disable_cleanup(true);
        eprintln!(
            "operator log (kept): {}",
            logs.path().join("operator.log").display()
        );
    }
    let mut op = operator::Operator::start(
        &ground.operator_kubeconfig,
        ns,
        &identity,
        args.workers,
        args.resync,
        &logs.path().join("operator.log"),
    )
    .await?;
    // Every request of this process counts, its start-up lists and watches included.
    let agent = format!("({identity})");

    let start = Instant::now();
    let waiter = {
        let driver = driver.clone();
        tokio::spawn(async move { workload::wait_ready(&driver, ns, n, start, timeout(n)).await })
    };
    workload::create(&driver, ns, n, drop).await?;
    let to_ready = waiter
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{e}; operator log:\n{}", op.log_tail()))?;
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

    let (pods, leader_groups) = workload::totals(n);
    let name = "habitat_operator_reconcile_duration_seconds";
    let buckets = prometheus::buckets(&metrics, name);
    let q = |q: f64| prometheus::quantile(&buckets, q).map(|s| s * 1000.0);
    let reconciles = ["success", "error"]
        .iter()
        .map(|r| {
            prometheus::value(
                &metrics,
                &format!("habitat_operator_reconciles_total{{result=\"{r}\"}}"),
            )
        })
        .sum();
    Ok(Measurement {
        ground: ground.kind.name(),
        n,
        pods,
        leader_groups,
        workers: args.workers,
        time_to_ready_s: to_ready.as_secs_f64(),
        floor_s,
        floor_writes,
        required_s,
        required_writes,
        requests: Breakdown::between(&Default::default(), &at_ready),
        quiet: Breakdown::between(&at_ready, &at_end),
        quiet_seconds: quiet_for.as_secs_f64(),
        peak_rss_mib: rss,
        cpu_s: cpu,
        cpu_s_to_ready: cpu_to_ready,
        reconciles,
        reconcile_ms: [q(0.5), q(0.9), q(0.99)],
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
    let mut failed = false;
    for &kind in &args.grounds {
        for &n in &args.sizes {
            match measure(kind, &args, n).await {
                Ok(m) => {
                    m.print();
                    entries.push(m.to_json());
                }
                Err(e) => {
                    eprintln!("scale: {} ground, N = {n}: {e}", kind.name());
                    failed = true;
                }
            }
        }
    }
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
