//! The supervisor HTTP gateway on `<podIP>:9631`: `/census`, `/services`, one service
//! (`/services/SVC/GROUP`, with its process's state), health checks.

use super::{Hub, GATEWAY_PORT};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;
use tokio::task::JoinHandle;

type Ctx = (Arc<Hub>, String);

async fn census(State((hub, uid)): State<Ctx>) -> Response {
    match hub.census(&uid) {
        Some(c) => Json(c).into_response(),
        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn health(
    State((hub, uid)): State<Ctx>,
    Path((svc, group)): Path<(String, String)>,
) -> Response {
    let known = hub
        .census(&uid)
        .is_some_and(|c| c["census_groups"].get(format!("{svc}.{group}")).is_some());
    if !known {
        return StatusCode::NOT_FOUND.into_response();
    }
    if hub.healthy(&uid) {
        Json(json!({"status": "OK", "stdout": "", "stderr": ""})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "CRITICAL", "stdout": "", "stderr": "service not started"})),
        )
            .into_response()
    }
}

/// One service, as the real gateway shows it: its process `up` once its hooks ran (for a leader
/// group, once an election finished) while its supervisor is alive, `down` before.
async fn service(
    State((hub, uid)): State<Ctx>,
    Path((svc, group)): Path<(String, String)>,
) -> Response {
    let sg = format!("{svc}.{group}");
    let Some(c) = hub.census(&uid) else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let g = &c["census_groups"][&sg];
    if g.is_null() {
        return StatusCode::NOT_FOUND.into_response();
    }
    let up = hub.healthy(&uid);
    Json(
        json!({"service_group": sg, "desired_state": "Up", "initialized": up,
        "last_election_status": g["election_status"],
        "process": {"pid": null, "state": if up { "up" } else { "down" }}}),
    )
    .into_response()
}

async fn services(State((hub, uid)): State<Ctx>) -> Response {
    let Some(c) = hub.census(&uid) else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let strategy = hub.strategy(&uid).unwrap_or_default().as_str();
    // The services this supervisor runs: its own group, not the others its census knows.
    let own = hub.service_group(&uid);
    let groups: Vec<serde_json::Value> = c["census_groups"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(sg, _)| own.as_deref() == Some(sg.as_str()))
        .map(|(sg, g)| {
            json!({"service_group": sg, "last_election_status": g["election_status"],
                "health_check": if hub.healthy(&uid) { "Ok" } else { "Unknown" },
                "desired_state": "Up", "initialized": hub.healthy(&uid),
                "update_strategy": strategy})
        })
        .collect();
    Json(json!(groups)).into_response()
}

/// Serve the gateway of pod `uid` on `ip:9631`, and its control gateway on `ip:9632`, until
/// aborted.
pub fn spawn(hub: Arc<Hub>, uid: String, ip: String) -> JoinHandle<()> {
    let control = super::control::serve(hub.clone(), ip.clone());
    tokio::spawn(async move {
        futures::join!(http(hub, uid, ip), control);
    })
}

async fn http(hub: Arc<Hub>, uid: String, ip: String) {
    {
        let addr = format!("{ip}:{GATEWAY_PORT}");
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("supervisor gateway on {addr}: {e}");
                return;
            }
        };
        let app = Router::new()
            .route("/census", get(census))
            .route("/services", get(services))
            .route("/services/{svc}/{group}", get(service))
            .route("/services/{svc}/{group}/health", get(health))
            .with_state((hub, uid));
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("supervisor gateway on {addr}: {e}");
        }
    }
}
