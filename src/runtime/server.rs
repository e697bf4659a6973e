//! The HTTP endpoints: `/metrics` (Prometheus text), `/healthz` (the process serves) and
//! `/readyz` (caches synced and, with leader election, this replica leads).
//!
//! With `--leader-elect`, `/readyz` answers 200 `ok` only on the replica that holds the Lease
//! and has synced its caches; a standby answers 503 `standby: not holding the Lease`, so a
//! Service or `kubectl get pods` shows which replica is active. `/healthz` answers 200 on both.
//!
//! While the API server cannot be reached, `/readyz` answers 503 `API server unreachable`: the
//! operator lists one Habitat every [`API_PROBE_INTERVAL`] (a read at the latest
//! resourceVersion, which also fails while the API server's etcd is down), and its watches
//! cannot be current meanwhile. The watches
//! reconnect by themselves (kube's watcher, with client-go's backoff), and the next successful
//! probe makes `/readyz` 200 again. `/healthz` (liveness) stays 200 through an API outage: a
//! restart of the operator would not bring the API server back.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use kube::api::ListParams;
use kube::runtime::reflector::Store;

use crate::api::Habitat;
use crate::reconcile::metrics::Metrics;

/// What the endpoints read.
#[derive(Clone)]
pub struct Health {
    /// The metric families.
    pub metrics: Metrics,
    /// The Habitat cache, once the controller runs.
    pub habitats: Arc<OnceLock<Store<Habitat>>>,
    /// Caches synced.
    pub synced: Arc<AtomicBool>,
    /// This replica holds the lease (always true without leader election).
    pub leading: Arc<AtomicBool>,
    /// The last probe of the API server succeeded ([`probe_api`]); true until a probe fails.
    pub api_reachable: Arc<AtomicBool>,
    /// Notified when the API server is reachable again after an outage: the controller then
    /// reconciles every Habitat at once instead of waiting out the backoffs the outage grew.
    pub api_back: Arc<tokio::sync::Notify>,
}

impl Health {
    /// Fresh state: not synced; leading unless leader election is on.
    pub fn new(metrics: Metrics, leader_elect: bool) -> Self {
        Health {
            metrics,
            habitats: Arc::new(OnceLock::new()),
            synced: Arc::new(AtomicBool::new(false)),
            leading: Arc::new(AtomicBool::new(!leader_elect)),
            api_reachable: Arc::new(AtomicBool::new(true)),
            api_back: Arc::new(tokio::sync::Notify::new()),
        }
    }
}

async fn metrics(State(h): State<Health>) -> impl IntoResponse {
    // The phase gauge is a recount of the cache at scrape time: exact after restarts and
    // deletions, never accumulated.
    if let Some(store) = h.habitats.get() {
        let all = store.state();
        h.metrics
            .set_phase_counts(all.iter().map(|x| x.phase_str()));
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        h.metrics.render(),
    )
}

async fn healthz() -> &'static str {
    "ok"
}

/// The body of `/readyz` on a standby replica.
pub const STANDBY: &str = "standby: not holding the Lease";

/// The body of `/readyz` while the API server cannot be reached.
pub const API_UNREACHABLE: &str = "API server unreachable";

async fn readyz(State(h): State<Health>) -> (StatusCode, &'static str) {
    match (
        h.leading.load(Ordering::SeqCst),
        h.synced.load(Ordering::SeqCst),
        h.api_reachable.load(Ordering::SeqCst),
    ) {
        (false, ..) => (StatusCode::SERVICE_UNAVAILABLE, STANDBY),
        (true, _, false) => (StatusCode::SERVICE_UNAVAILABLE, API_UNREACHABLE),
        (true, false, true) => (StatusCode::SERVICE_UNAVAILABLE, "caches not synced"),
        (true, true, true) => (StatusCode::OK, "ok"),
    }
}

/// How often [`probe_api`] asks the API server whether it is ready; also the probe's timeout.
pub const API_PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// The shortest outage after which every Habitat is reconciled on the API server's return.
/// A shorter one (a single failed probe: an answer 500, a list slower than the probe's timeout
/// on a loaded machine) grew no object's backoff beyond a few seconds, so reconciling all of
/// them gains nothing and queues them ahead of new work: under `tests/faults.rs`' 20% server
/// errors with 200 Habitats, 28 such blips in 520 s each queued all 200, and 72 of them had not
/// been reconciled once by the end.
pub const RECONCILE_ALL_AFTER: Duration = Duration::from_secs(5);

/// Whether an outage that lasted `down` calls for reconciling every Habitat.
fn reconcile_all_after(down: Duration) -> bool {
    down >= RECONCILE_ALL_AFTER
}

/// Lists one Habitat's metadata (in `namespace`, else in all) every [`API_PROBE_INTERVAL`],
/// forever: a read at the latest resourceVersion, which the API server answers only with its
/// etcd up (its own `/readyz` stayed `ok` through a 10 s etcd outage, measured). Records in
/// `reachable` whether the last answer was a success, and notifies `back` when it is one again
/// after an outage of at least [`RECONCILE_ALL_AFTER`]. Logs the outage's start and end once
/// each.
pub async fn probe_api(
    client: kube::Client,
    namespace: Option<String>,
    reachable: Arc<AtomicBool>,
    back: Arc<tokio::sync::Notify>,
) {
    let api: kube::Api<Habitat> = match namespace.as_deref() {
        Some(ns) => kube::Api::namespaced(client, ns),
        None => kube::Api::all(client),
    };
    let mut down_since: Option<std::time::Instant> = None;
    loop {
        let list = ListParams::default().limit(1);
        let ok = matches!(
            tokio::time::timeout(API_PROBE_INTERVAL, api.list_metadata(&list)).await,
            Ok(Ok(_))
        );
        reachable.store(ok, Ordering::SeqCst);
        match (ok, down_since) {
            (false, None) => {
                tracing::warn!("the API server is unreachable or not ready; /readyz answers 503");
                down_since = Some(std::time::Instant::now());
            }
            (true, Some(since)) => {
                let down = since.elapsed();
                down_since = None;
                if reconcile_all_after(down) {
                    tracing::info!(
                        down_ms = down.as_millis() as u64,
                        "the API server is reachable again; reconciling every Habitat"
                    );
                    back.notify_one();
                } else {
                    tracing::info!(
                        down_ms = down.as_millis() as u64,
                        "the API server is reachable again"
                    );
                }
            }
            _ => {}
        }
        tokio::time::sleep(API_PROBE_INTERVAL).await;
    }
}

/// The router of the endpoints.
pub fn router(h: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(h)
}

/// Serves the endpoints on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, h: Health) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    axum::serve(listener, router(h)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_real_outage_reconciles_every_habitat() {
        // One failed probe: back at the next, about one interval later.
        assert!(!reconcile_all_after(
            API_PROBE_INTERVAL + Duration::from_millis(500)
        ));
        assert!(!reconcile_all_after(Duration::from_millis(4900)));
        // kube-apiserver stopped for 10 s, etcd restarted (tests/restart.rs: 14 to 18 s).
        assert!(reconcile_all_after(RECONCILE_ALL_AFTER));
        assert!(reconcile_all_after(Duration::from_secs(14)));
    }
}
