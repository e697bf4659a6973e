//! The real API server restarts under the operator: kube-apiserver is stopped for 10 s in the
//! middle of convergence and started again (same port, etcd, certificates and tokens), and,
//! separately, etcd is restarted (same data directory and ports). The operator and the simulated
//! nodes are not restarted: their watches reconnect, every Habitat reaches Ready, `/readyz`
//! reports the outage while it lasts and `/healthz` stays 200 throughout.
//!
//! Each test has a control plane of its own ([`ControlPlane::start_private`]): stopping its
//! processes must not disturb other tests. The measurements are printed (`--nocapture`).

#[macro_use]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::control_plane::{ControlPlane, PrivateControlPlane};
use support::Env;

/// Habitats converging when the outage begins.
const HABITATS: usize = 8;
/// How long the API server stays down.
const OUTAGE: Duration = Duration::from_secs(10);

/// One restart test at a time: each starts a control plane of its own, and the machine is small.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The test's own control plane, or an early return when there is none.
macro_rules! private_control_plane {
    () => {
        match ControlPlane::start_private() {
            Some(cp) => cp,
            None => {
                eprintln!("skipped: no KUBEBUILDER_ASSETS");
                return;
            }
        }
    };
}

/// The HTTP status of `GET http://ADDR/PATH`, 0 when nothing answers.
fn status(addr: &str, path: &str) -> u16 {
    match ureq::get(&format!("http://{addr}{path}"))
        .config()
        .timeout_global(Some(Duration::from_secs(1)))
        .http_status_as_error(false)
        .build()
        .call()
    {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// `/readyz` and `/healthz` of the operator, sampled every 200 ms on a thread of its own.
struct Probe {
    began: Instant,
    samples: Arc<Mutex<Vec<(Duration, u16, u16)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Probe {
    fn start(addr: &str) -> Probe {
        let began = Instant::now();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, out, halt) = (addr.to_string(), samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !halt.load(Ordering::SeqCst) {
                let (ready, health) = (status(&addr, "/readyz"), status(&addr, "/healthz"));
                out.lock().unwrap_or_else(|e| e.into_inner()).push((
                    began.elapsed(),
                    ready,
                    health,
                ));
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Probe {
            began,
            samples,
            stop,
            thread: Some(thread),
        }
    }

    fn samples(&self) -> Vec<(Duration, u16, u16)> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The samples as runs: `[from, to] readyz=CODE healthz=CODE`.
    fn timeline(&self) -> String {
        let mut runs: Vec<(Duration, Duration, u16, u16)> = Vec::new();
        for (t, r, h) in self.samples() {
            match runs.last_mut() {
                Some(last) if last.2 == r && last.3 == h => last.1 = t,
                _ => runs.push((t, t, r, h)),
            }
        }
        runs.iter()
            .map(|(a, b, r, h)| {
                format!(
                    "  {:6.1}s..{:6.1}s readyz={r} healthz={h}",
                    a.as_secs_f64(),
                    b.as_secs_f64()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Seconds since the probe started.
    fn now(&self) -> Duration {
        self.began.elapsed()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn habitat(name: &str, count: u32) -> String {
    format!(
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata:\n  name: {name}\nspec:\n  \
         image: kinvolk/redis-hab\n  count: {count}\n  service:\n    name: redis\n"
    )
}

/// The Habitats of the namespace that are Ready with their generation observed.
async fn ready_names(env: &Env) -> Vec<String> {
    use kube::ResourceExt;
    env.habitats()
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|h| {
            h.phase_str() == Some("Ready")
                && h.status.as_ref().and_then(|s| s.observed_generation) == h.metadata.generation
        })
        .map(|h| h.name_any())
        .collect()
}

/// The successful reconciles the operator counted.
fn reconciles(env: &Env) -> f64 {
    env.metrics()
        .lines()
        .find_map(|l| l.strip_prefix("habitat_operator_reconciles_total{result=\"success\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Per Habitat, how many reconciles failed (the operator's `reconcile failed` warnings).
fn failures(env: &Env) -> Vec<(String, usize)> {
    let log = env.operator_log();
    (0..HABITATS)
        .map(|i| format!("r-{i}"))
        .chain(["after".to_string()])
        .map(|name| {
            let needle = format!("name={name} ");
            let n = log
                .lines()
                .filter(|l| l.contains("reconcile failed") && l.contains(&needle))
                .count();
            (name, n)
        })
        .collect()
}

/// What happens to the API: the API server down for [`OUTAGE`], or etcd restarted.
#[derive(Debug, Clone, Copy)]
enum Outage {
    ApiServer,
    Etcd,
}

async fn ride_out(cp: &PrivateControlPlane, outage: Outage, test: &str) {
    let mut env = Env::start_on(cp, test, false).await;
    let (operator, addr) = env.extra_operator(&[
        "--log-level",
        "info,habitat_operator=debug,kube_runtime::controller=debug,kube_runtime::utils::stream_backoff=debug",
    ]);
    env.metrics = addr;
    support::wait_for(Duration::from_secs(30), "/readyz to answer 200", || async {
        status(&env.metrics, "/readyz") == 200
    })
    .await;
    let probe = Probe::start(&env.metrics);

    let all: String = (0..HABITATS)
        .map(|i| format!("---\n{}", habitat(&format!("r-{i}"), 3)))
        .collect();
    env.apply_yaml(&all);
    // The middle of convergence: the operator has begun (some Habitat has a status) and not
    // every Habitat is Ready yet.
    support::wait_for(Duration::from_secs(60), "the operator to begin", || async {
        env.habitats()
            .list(&Default::default())
            .await
            .is_ok_and(|l| l.items.iter().any(|h| h.status.is_some()))
    })
    .await;
    let ready_before = ready_names(&env).await.len();
    let reconciles_before = reconciles(&env);

    let stopping_at = probe.now();
    match outage {
        Outage::ApiServer => cp.stop_apiserver().await.expect("kube-apiserver stops"),
        Outage::Etcd => cp.stop_etcd().await.expect("etcd stops"),
    }
    let down_at = probe.now();
    tokio::time::sleep(OUTAGE).await;
    let starting_at = probe.now();
    match outage {
        Outage::ApiServer => cp
            .start_apiserver()
            .await
            .expect("kube-apiserver starts again"),
        Outage::Etcd => cp.start_etcd().await.expect("etcd starts again"),
    }
    let back_at = probe.now();
    let back = Instant::now();
    env.assert_processes_running("the API was down");
    let mut operator = operator;
    operator.assert_running("the API was down", &env.temp_dir().join("operator.log"));

    // A Habitat created now is seen only through a watch that reconnected.
    env.apply_yaml(&habitat("after", 1));
    let applied = back.elapsed();
    loop {
        let seen = env
            .habitats()
            .get_opt("after")
            .await
            .ok()
            .flatten()
            .is_some_and(|h| h.status.is_some());
        if seen {
            break;
        }
        if back.elapsed() > Duration::from_secs(90) {
            let log = env.operator_log();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| {
                    l.contains("API server is") || l.contains("watch failed") || l.contains("after")
                })
                .collect();
            panic!(
                "the operator did not see a Habitat created {applied:.1?} after the outage \
                 (stopping at {stopping_at:.1?}, stopped at {down_at:.1?}, starting at \
                 {starting_at:.1?}, ready at {back_at:.1?}); its log:\n{}\n...\n{}",
                lines.join("\n"),
                support::tail(&log, 10)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = back.elapsed();
    let reconciles_back = reconciles(&env);
    let timeout = Duration::from_secs(120);
    for i in 0..HABITATS {
        env.wait_phase(&format!("r-{i}"), "Ready", timeout).await;
    }
    env.wait_phase("after", "Ready", timeout).await;
    let all_ready = back.elapsed();
    env.assert_processes_running("the Habitats converged after the outage");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let samples = probe.samples();
    let reconciles_after = reconciles(&env);

    let first_503 = samples
        .iter()
        .find(|(t, r, _)| *t >= down_at && *r == 503)
        .map(|(t, ..)| *t - down_at);
    let ready_again = samples
        .iter()
        .find(|(t, r, _)| *t >= back_at && *r == 200)
        .map(|(t, ..)| t.saturating_sub(back_at));
    let log = env.operator_log();
    let outage_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("API server is") || l.contains("watch failed"))
        .collect();
    eprintln!(
        "operator log, {} watch failures; API probe lines:\n{}",
        outage_lines
            .iter()
            .filter(|l| l.contains("watch failed"))
            .count(),
        outage_lines
            .iter()
            .filter(|l| l.contains("API server is"))
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "{outage:?} outage: stopping at {:.1}s, stopped at {:.1}s, starting at {:.1}s, ready at \
         {:.1}s ({ready_before}/{HABITATS} Ready when it began)\n  /readyz 503 after {first_503:.1?} of outage, 200 again {ready_again:.1?} after \
         the API came back\n  a Habitat applied {applied:.1?} after the API came back was seen \
         {seen:.1?} after it; every Habitat Ready {all_ready:.1?} after it\n  successful \
         reconciles: {reconciles_before} before the outage, {reconciles_back} when `after` was \
         seen, {reconciles_after} at the end\n  failed reconciles per Habitat: {:?}\n/readyz and \
         /healthz over time:\n{}",
        stopping_at.as_secs_f64(),
        down_at.as_secs_f64(),
        starting_at.as_secs_f64(),
        back_at.as_secs_f64(),
        failures(&env),
        probe.timeline()
    );

    // The watches reconnected within a few retries of the capped backoff, not tens of seconds
    // later (before the cap: 48.9 s after a 32 s outage).
    assert!(
        seen - applied < Duration::from_secs(15),
        "the operator saw a Habitat created after the outage only {:.1?} after it was applied",
        seen - applied
    );
    // /healthz (liveness) answered 200 throughout: a kubelet would not have killed the operator.
    assert!(
        samples.iter().all(|(_, _, h)| *h == 200),
        "/healthz was not always 200:\n{}",
        probe.timeline()
    );
    // /readyz reported the outage while it lasted, and is 200 again.
    let during: Vec<_> = samples
        .iter()
        .filter(|(t, ..)| *t >= down_at + Duration::from_secs(5) && *t <= starting_at)
        .collect();
    assert!(
        !during.is_empty() && during.iter().all(|(_, r, _)| *r == 503),
        "/readyz did not answer 503 through the outage (from 5 s in):\n{}",
        probe.timeline()
    );
    assert_eq!(
        samples.last().map(|s| s.1),
        Some(200),
        "/readyz is not 200 after the outage:\n{}",
        probe.timeline()
    );
    assert!(
        !env.operator_log().contains("panicked"),
        "the operator panicked:\n{}",
        support::tail(&env.operator_log(), 40)
    );
}

// A Habitat created right after kube-apiserver returns was reconciled only after 90 s and more:
// the watches forwarded their connect errors to the Controller, whose trigger backoff (kube's
// default, 0.8 s doubling to 30 s) then took no trigger for 3, 5, 10, 21 and 51 s in turn
// (`kube_runtime::utils::stream_backoff` at debug). The watches now keep their errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_rides_out_an_api_server_restart() {
    require_kubectl!();
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = private_control_plane!();
    ride_out(&cp, Outage::ApiServer, "apiserver-restart").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_rides_out_an_etcd_restart() {
    require_kubectl!();
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = private_control_plane!();
    ride_out(&cp, Outage::Etcd, "etcd-restart").await;
}
