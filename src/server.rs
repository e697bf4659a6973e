//! The HTTP endpoints: `/metrics` (Prometheus text), `/healthz` (the process serves) and
//! `/readyz` (caches synced and, with leader election, this replica leads).
//!
//! With `--leader-elect`, `/readyz` answers 200 `ok` only on the replica that holds the Lease
//! and has synced its caches; a standby answers 503 `standby: not holding the Lease`, so a
//! Service or `kubectl get pods` shows which replica is active. `/healthz` answers 200 on both.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use kube::runtime::reflector::Store;

use crate::api::Habitat;
use crate::metrics::Metrics;

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
}

impl Health {
    /// Fresh state: not synced; leading unless leader election is on.
    pub fn new(metrics: Metrics, leader_elect: bool) -> Self {
        Health {
            metrics,
            habitats: Arc::new(OnceLock::new()),
            synced: Arc::new(AtomicBool::new(false)),
            leading: Arc::new(AtomicBool::new(!leader_elect)),
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

async fn readyz(State(h): State<Health>) -> (StatusCode, &'static str) {
    match (
        h.leading.load(Ordering::SeqCst),
        h.synced.load(Ordering::SeqCst),
    ) {
        (true, true) => (StatusCode::OK, "ok"),
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, STANDBY),
        (true, false) => (StatusCode::SERVICE_UNAVAILABLE, "caches not synced"),
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
