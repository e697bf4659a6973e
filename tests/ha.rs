//! High availability: two operator processes with `--leader-elect` against one cluster. One
//! holds the Lease and acts; the standby says so on `/readyz`. When the active one is killed
//! (SIGKILL) the standby takes over once the lease expired; when it is stopped (SIGTERM) it
//! releases the lease and the standby takes over at once. Reconciling goes on, and no object
//! is written by two replicas: on the real control plane the audit log tells the replicas
//! apart by their User-Agent (`habitat-operator/<version> (habitat-operator-<pid>)`).

#[macro_use]
mod support;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use support::control_plane::ControlPlane;
use support::{timeout, wait_for, Env, Ground, Proc};

/// The lease timing of `src/runtime/lease.rs`.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_secs(1);

fn readyz(addr: &str) -> (u16, String) {
    ureq::get(&format!("http://{addr}/readyz"))
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .map(|mut r| {
            (
                r.status().as_u16(),
                r.body_mut().read_to_string().unwrap_or_default(),
            )
        })
        .unwrap_or((0, String::new()))
}

fn ready(addr: &str) -> bool {
    readyz(addr).0 == 200
}

/// One operator replica: its process, endpoint and Lease identity.
struct Replica {
    proc: Proc,
    addr: String,
    identity: String,
}

impl Replica {
    fn start(env: &Env) -> Replica {
        let ns = env.namespace.clone();
        let (proc, addr) = env.extra_operator(&[
            "--leader-elect",
            "--leader-elect-namespace",
            ns.as_str(),
            "--log-level",
            "info",
        ]);
        let identity = format!("habitat-operator-{}", proc.0.id());
        Replica {
            proc,
            addr,
            identity,
        }
    }

    fn signal(&self, signal: &str) {
        let ok = std::process::Command::new("kill")
            .args([signal, &self.proc.0.id().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill {signal} failed");
    }

    /// Waits for the process to end; its exit status.
    async fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.proc.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                start.elapsed() < within,
                "{} did not exit within {within:?}",
                self.identity
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Two replicas; waits until one leads. Returns (active, standby).
async fn pair(env: &Env) -> (Replica, Replica) {
    let a = Replica::start(env);
    let b = Replica::start(env);
    wait_for(Duration::from_secs(30), "one replica to lead", || async {
        ready(&a.addr) || ready(&b.addr)
    })
    .await;
    if ready(&a.addr) {
        (a, b)
    } else {
        (b, a)
    }
}

#[derive(Debug)]
struct LeaseState {
    holder: String,
    acquired: Option<DateTime<Utc>>,
    renewed: Option<DateTime<Utc>>,
    duration: i64,
    transitions: i64,
}

fn time(v: &serde_json::Value) -> Option<DateTime<Utc>> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

fn lease(env: &Env) -> LeaseState {
    let json = env.kubectl_ok(&["get", "lease", "habitat-operator", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("lease json");
    let spec = &v["spec"];
    LeaseState {
        holder: spec["holderIdentity"].as_str().unwrap_or("").to_string(),
        acquired: time(&spec["acquireTime"]),
        renewed: time(&spec["renewTime"]),
        duration: spec["leaseDurationSeconds"].as_i64().unwrap_or(0),
        transitions: spec["leaseTransitions"].as_i64().unwrap_or(0),
    }
}

/// A successful write by an operator replica, from the audit log (the fields show in failure
/// messages).
#[allow(dead_code)]
#[derive(Debug)]
struct Write {
    identity: String,
    at: DateTime<Utc>,
    verb: String,
    resource: String,
    name: String,
}

/// Successful writes in `namespace` by the replicas in `identities`, Leases excluded, in order.
/// None when there is no audit log (the sandbox, or a cluster of `HABITAT_E2E_KUBECONFIG`).
fn writes(env: &Env, identities: &[&str]) -> Option<Vec<Write>> {
    if !env.is_real() {
        return None;
    }
    let cp = ControlPlane::shared()?;
    let log = std::fs::read_to_string(cp.audit_log()).ok()?;
    let mut out = Vec::new();
    for line in log.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if e["stage"] != "ResponseComplete" {
            continue;
        }
        let verb = e["verb"].as_str().unwrap_or("");
        if !matches!(verb, "create" | "update" | "patch" | "delete") {
            continue;
        }
        let code = e["responseStatus"]["code"].as_i64().unwrap_or(0);
        let obj = &e["objectRef"];
        if !(200..300).contains(&code) || obj["namespace"] != env.namespace.as_str() {
            continue;
        }
        if obj["resource"] == "leases" {
            continue;
        }
        let agent = e["userAgent"].as_str().unwrap_or("");
        let Some(identity) = identities
            .iter()
            .find(|i| agent.ends_with(&format!("({i})")))
        else {
            continue;
        };
        out.push(Write {
            identity: identity.to_string(),
            // When the server received the request: a write is in effect from then on.
            at: time(&e["requestReceivedTimestamp"]).expect("audit timestamp"),
            verb: verb.to_string(),
            resource: obj["resource"].as_str().unwrap_or("").to_string(),
            name: obj["name"].as_str().unwrap_or("").to_string(),
        });
    }
    out.sort_by_key(|w| w.at);
    Some(out)
}

/// The audit log holds every write of a request received before now: it is written in
/// blocking mode, but give the last events a moment.
async fn audit_settled() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// No object was written by two replicas at once: all of `old`'s writes come before
/// `old_stopped`, all of `new`'s after `new_acquired`, and the new one wrote (it reconciles).
fn one_writer_at_a_time(
    writes: &[Write],
    old: &str,
    new: &str,
    old_stopped: DateTime<Utc>,
    new_acquired: DateTime<Utc>,
) {
    let late: Vec<&Write> = writes
        .iter()
        .filter(|w| w.identity == old && w.at >= old_stopped)
        .collect();
    assert!(
        late.is_empty(),
        "the old replica wrote after it stopped: {late:?}"
    );
    let early: Vec<&Write> = writes
        .iter()
        .filter(|w| w.identity == new && w.at < new_acquired)
        .collect();
    assert!(
        early.is_empty(),
        "the new replica wrote before it held the lease: {early:?}"
    );
    let last_old = writes
        .iter()
        .filter(|w| w.identity == old)
        .map(|w| w.at)
        .max();
    let first_new = writes
        .iter()
        .filter(|w| w.identity == new)
        .map(|w| w.at)
        .min();
    assert!(
        last_old.is_some(),
        "the old replica never wrote: {writes:?}"
    );
    let first_new = first_new.expect("the new replica never wrote");
    eprintln!(
        "audit: {} writes by the old replica, then {} by the new one",
        writes.iter().filter(|w| w.identity == old).count(),
        writes.iter().filter(|w| w.identity == new).count()
    );
    assert!(
        last_old.unwrap() < first_new,
        "the writes of the two replicas interleave: {writes:?}"
    );
}

async fn readyz_tells_the_active_replica_from_the_standby(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "ha-readyz", false);
    let (active, standby) = pair(&env).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(readyz(&active.addr), (200, "ok".to_string()));
    assert_eq!(
        readyz(&standby.addr),
        (503, "standby: not holding the Lease".to_string())
    );
    for r in [&active, &standby] {
        let health = ureq::get(&format!("http://{}/healthz", r.addr))
            .call()
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        assert_eq!(health, 200, "/healthz of {}", r.identity);
    }
    assert_eq!(lease(&env).holder, active.identity);
    // A standby stopped by SIGTERM just ends, cleanly, and the active one goes on.
    let mut standby = standby;
    standby.signal("-TERM");
    let status = standby.wait_exit(Duration::from_secs(5)).await;
    assert!(
        status.success(),
        "a standby ends cleanly on SIGTERM: {status}"
    );
    assert_eq!(lease(&env).holder, active.identity);
    assert!(ready(&active.addr));
}

async fn sigkill_the_active_replica_and_the_standby_takes_over_within_the_lease_duration(
    ground: Ground,
) {
    require_kubectl!();
    let env = env_on!(ground, "ha-kill", false);
    let (mut active, standby) = pair(&env).await;
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let before = lease(&env);
    assert_eq!(before.holder, active.identity);

    active.signal("-KILL");
    let killed = Utc::now();
    let start = Instant::now();
    active.wait_exit(Duration::from_secs(5)).await;
    // A renewal the server received before the kill is in the Lease now; nothing comes after.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let last_renewal = lease(&env).renewed.expect("renewTime");
    wait_for(
        LEASE_DURATION + RETRY + Duration::from_secs(10),
        "the standby to take over",
        || async { ready(&standby.addr) },
    )
    .await;
    let takeover = start.elapsed();
    let after = lease(&env);
    eprintln!("SIGKILL: the standby is ready {takeover:?} after the kill");
    assert_eq!(after.holder, standby.identity);
    assert_eq!(after.transitions, before.transitions + 1);
    // The lease ran out before it changed hands (no overlap), and was taken at the first
    // retry after that.
    let acquired = after.acquired.expect("acquireTime");
    let gap = (acquired - last_renewal).to_std().unwrap_or_default();
    eprintln!("SIGKILL: {gap:?} from the last renewal of the killed replica to the takeover");
    assert!(
        gap >= LEASE_DURATION,
        "taken over before the lease expired ({gap:?})"
    );
    assert!(
        gap <= LEASE_DURATION + RETRY + Duration::from_secs(2),
        "taken over later than one retry after the lease expired ({gap:?})"
    );
    assert!(
        takeover <= LEASE_DURATION + RETRY + Duration::from_secs(3),
        "{takeover:?}"
    );

    // Reconciling goes on: a change made after the kill is carried out.
    env.patch("example-standalone", r#"{"spec":{"count":2}}"#);
    let h = env
        .wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    assert_eq!(h.status.and_then(|s| s.ready).as_deref(), Some("2/2"));

    audit_settled().await;
    if let Some(w) = writes(&env, &[&active.identity, &standby.identity]) {
        one_writer_at_a_time(&w, &active.identity, &standby.identity, killed, acquired);
    }
}

async fn sigterm_releases_the_lease_and_the_standby_takes_over_in_under_2_s(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "ha-term", false);
    let (mut active, standby) = pair(&env).await;
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let before = lease(&env);
    assert_eq!(before.holder, active.identity);

    active.signal("-TERM");
    let start = Instant::now();
    let mut lease_taken = None;
    let mut exited = None;
    while !ready(&standby.addr) {
        if exited.is_none() {
            if let Some(status) = active.proc.0.try_wait().expect("try_wait") {
                exited = Some((start.elapsed(), Utc::now(), status));
            }
        }
        if lease_taken.is_none() && lease(&env).holder == standby.identity {
            lease_taken = Some(start.elapsed());
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the standby did not take over within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let takeover = start.elapsed();
    let lease_taken = lease_taken.unwrap_or(takeover);
    eprintln!(
        "SIGTERM: the standby holds the Lease after {lease_taken:?} and is ready after {takeover:?}"
    );
    assert!(
        takeover < Duration::from_secs(2),
        "takeover after SIGTERM took {takeover:?}"
    );
    let (exit_after, _exited_at, status) = match exited {
        Some(e) => e,
        None => {
            let status = active.wait_exit(Duration::from_secs(10)).await;
            (start.elapsed(), Utc::now(), status)
        }
    };
    eprintln!("SIGTERM: the old replica exited after {exit_after:?} with {status}");
    assert!(
        status.success(),
        "SIGTERM must end the replica cleanly: {status}"
    );
    let log = env.operator_log();
    assert!(
        log.contains("released the leader lease"),
        "{}",
        support::tail(&log, 20)
    );
    let after = lease(&env);
    assert_eq!(after.holder, standby.identity);
    assert_eq!(after.duration, 15, "the new holder sets its own duration");
    assert_eq!(after.transitions, before.transitions + 1);

    env.patch("example-standalone", r#"{"spec":{"count":2}}"#);
    let h = env
        .wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    assert_eq!(h.status.and_then(|s| s.ready).as_deref(), Some("2/2"));

    audit_settled().await;
    if let Some(w) = writes(&env, &[&active.identity, &standby.identity]) {
        let acquired = after.acquired.expect("acquireTime");
        // The old one stopped writing before it released the lease, so before the new one
        // acquired it.
        one_writer_at_a_time(&w, &active.identity, &standby.identity, acquired, acquired);
    }
}

on_both_grounds!(
    readyz_tells_the_active_replica_from_the_standby,
    sigkill_the_active_replica_and_the_standby_takes_over_within_the_lease_duration,
    sigterm_releases_the_lease_and_the_standby_takes_over_in_under_2_s,
);
