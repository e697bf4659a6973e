//! The HTTP API server (axum): routing, content negotiation and JSON responses.

pub mod discovery;
pub mod openapi;
pub mod requests;
mod resource;
pub mod route;
pub mod table;
pub mod watch;

use crate::error::ApiError;
use crate::faults::Injected;
use crate::store::Store;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use route::Route;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// Shared server state.
#[derive(Debug, Clone)]
pub struct App {
    /// The object store.
    pub store: Arc<Store>,
    /// The listen address (for `/api` serverAddressByClientCIDRs).
    pub addr: SocketAddr,
    /// Injected faults (none by default).
    pub faults: Arc<crate::faults::Injector>,
    /// Requests served, by client, verb and resource (`GET /debug/requests`).
    pub requests: Arc<requests::Requests>,
}

/// Build the router.
pub fn router(app: App) -> Router {
    Router::new().fallback(dispatch).with_state(app)
}

/// A JSON response.
pub fn json_response(code: u16, v: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [("content-type", "application/json")],
        v.to_string(),
    )
        .into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json_response(self.code, &self.to_status())
    }
}

/// The parts of a request the handlers use.
pub struct Req {
    /// Method.
    pub method: Method,
    /// Headers.
    pub headers: HeaderMap,
    /// Query parameters.
    pub query: HashMap<String, String>,
    /// Body.
    pub body: axum::body::Bytes,
}

impl Req {
    /// A header value as text.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// True when the client asked for a meta.k8s.io Table.
    pub fn wants_table(&self) -> bool {
        self.header("accept")
            .split(',')
            .next()
            .is_some_and(|first| first.contains("as=Table"))
    }

    /// A query flag (`true` or `1`).
    pub fn flag(&self, name: &str) -> bool {
        matches!(self.query.get(name).map(String::as_str), Some("true" | "1"))
    }
}

async fn dispatch(State(app): State<App>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => return ApiError::bad_request(format!("reading body: {e}")).into_response(),
    };
    let query = Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let r = Req {
        method: parts.method,
        headers: parts.headers,
        query,
        body,
    };
    tracing::debug!(method = %r.method, %path, "request");
    if path == "/debug/faults" {
        return json_response(200, &app.faults.counts());
    }
    if path == "/debug/requests" {
        return json_response(200, &app.requests.to_json());
    }
    let Some(route) = route::parse(&path) else {
        return ApiError::no_route().into_response();
    };
    match route {
        Route::Version => json_response(200, &discovery::version()),
        Route::Health => (StatusCode::OK, "ok").into_response(),
        Route::OpenApi => {
            let reg = app.store.lock().registry.clone();
            let doc = if path.trim_end_matches('/') == "/openapi/v3" {
                Some(openapi::index(&reg))
            } else {
                openapi::group_version(&reg, &path)
            };
            match doc {
                Some(d) => json_response(200, &d),
                None => ApiError::no_route().into_response(),
            }
        }
        Route::CoreVersions => json_response(200, &discovery::core_versions(&app.addr.to_string())),
        Route::Groups => json_response(200, &discovery::groups(&app.store.lock().registry)),
        Route::Group(g) => match discovery::group(&app.store.lock().registry, &g) {
            Some(v) => json_response(200, &v),
            None => ApiError::no_route().into_response(),
        },
        Route::Resources { group, version } => {
            match discovery::resources(&app.store.lock().registry, &group, &version) {
                Some(v) => json_response(200, &v),
                None => ApiError::no_route().into_response(),
            }
        }
        Route::Object(p) => {
            let hit = app.faults.faults.applies_to(r.header("user-agent"));
            let watch = r.flag("watch");
            app.requests
                .record(r.header("user-agent"), &r.method, watch, &p);
            if hit {
                tokio::time::sleep(app.faults.latency()).await;
                let what = (
                    p.group.as_str(),
                    p.plural.as_str(),
                    p.name.as_deref().unwrap_or_default(),
                );
                let rv = r.query.get("resourceVersion").map(String::as_str);
                match app.faults.choose(&r.method, watch, rv, what) {
                    Some(Injected::Error(e, retry_after)) => {
                        let mut resp = e.into_response();
                        if let Some(secs) = retry_after {
                            resp.headers_mut()
                                .insert("retry-after", HeaderValue::from(secs));
                        }
                        return resp;
                    }
                    Some(Injected::WatchExpired(e)) => return watch::error_event(&e),
                    None => {}
                }
            }
            let resp = match resource::handle(&app, p, r).await {
                Ok(resp) => resp,
                Err(e) => e.into_response(),
            };
            match app.faults.faults.watch_cut {
                Some(after) if hit && watch && resp.status().is_success() => {
                    watch::cut_after(resp, after, app.faults.clone())
                }
                _ => resp,
            }
        }
    }
}
