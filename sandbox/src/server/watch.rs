//! Watch streams: newline-delimited JSON events replayed from the change history, bookmarks,
//! `sendInitialEvents`, selector transitions and `timeoutSeconds`.

use super::table::{self, Include};
use crate::error::ApiError;
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{ChangeKind, Store};
use axum::body::{Body, Bytes};
use axum::response::Response;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// How often bookmarks are sent when requested.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(5);

/// Parameters of one watch request.
#[derive(Debug, Clone)]
pub struct WatchParams {
    /// Namespace filter.
    pub namespace: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// Table output requested (kubectl get -w).
    pub table: Option<Include>,
}

/// One watch event line, `{"object":...,"type":"KIND"}` (the keys in the order serde_json
/// writes an object's), without copying the object.
fn line(kind: &str, object: &Value) -> Bytes {
    line_of(kind, &object.to_string())
}

/// [`line`] of an object already written as JSON text.
fn line_of(kind: &str, object: &str) -> Bytes {
    let mut s = String::with_capacity(object.len() + 32);
    s.push_str("{\"object\":");
    s.push_str(object);
    s.push_str(",\"type\":");
    s.push_str(&Value::String(kind.into()).to_string());
    s.push_str("}\n");
    Bytes::from(s)
}

/// An object a watch event carries: the stored one, shared with its JSON text (written once
/// for every watch), when it is stored as served.
enum Shown {
    Stored(Arc<Value>, Arc<OnceLock<String>>),
    Owned(Value),
}

impl Shown {
    fn line(&self, kind: &str) -> Bytes {
        match self {
            Shown::Stored(v, text) => line_of(kind, text.get_or_init(|| v.to_string())),
            Shown::Owned(v) => line(kind, v),
        }
    }
}

/// Start a watch and return its streaming response.
pub fn serve(store: Arc<Store>, rt: ResourceType, params: WatchParams) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(run(store, rt, params, tx));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}

/// A watch answered with one ERROR event carrying `e` (how kube-apiserver reports a 410 on a
/// watch: status 200, then the Status as the stream's only event).
pub fn error_event(e: &ApiError) -> Response {
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(line("ERROR", &e.to_status())))
        .unwrap_or_default()
}

/// `resp`'s body, aborted `after` it starts (an injected fault: the connection is cut
/// mid-stream, without the final chunk, as a dropped connection looks to the client).
pub fn cut_after(
    resp: Response,
    after: Duration,
    faults: Arc<crate::faults::Injector>,
) -> Response {
    use futures::StreamExt;
    let (parts, body) = resp.into_parts();
    let deadline = tokio::time::Instant::now() + after;
    let stream = body.into_data_stream();
    let cut = futures::stream::unfold(Some(stream), move |state| {
        let faults = faults.clone();
        async move {
            let mut s = state?;
            tokio::select! {
                item = s.next() => item.map(|i| (i.map_err(std::io::Error::other), Some(s))),
                _ = tokio::time::sleep_until(deadline) => {
                    faults.count_cut();
                    Some((Err(std::io::Error::other("watch cut by an injected fault")), None))
                }
            }
        }
    });
    Response::from_parts(parts, Body::from_stream(cut))
}

struct Watcher {
    rt: ResourceType,
    p: WatchParams,
}

impl Watcher {
    /// True when the watch has no selector: every object of its namespace matches.
    fn unfiltered(&self) -> bool {
        self.p.labels.0.is_empty() && self.p.fields.0.is_empty()
    }

    fn matches(&self, o: &Value) -> bool {
        self.p.labels.matches(o) && self.p.fields.matches(o)
    }

    /// The one object name the field selector allows, if it names one.
    fn named(&self) -> Option<&str> {
        self.p
            .fields
            .0
            .iter()
            .find(|(path, eq, _)| *eq && path == "metadata.name")
            .map(|(_, _, name)| name.as_str())
    }

    fn render(&self, inner: &crate::store::Inner, o: Value) -> Value {
        match self.p.table {
            Some(inc) => table::build(inner, &self.rt, std::slice::from_ref(&o), inner.rv, inc),
            None => o,
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut md = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line(
            "BOOKMARK",
            &json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": md}),
        )
    }
}

async fn run(store: Arc<Store>, rt: ResourceType, p: WatchParams, tx: mpsc::Sender<Bytes>) {
    let w = Watcher { rt, p };
    let mut changed = store.subscribe();
    let rv_param = w.p.resource_version.clone().unwrap_or_default();
    let (mut pos, first) = {
        let inner = store.lock();
        if w.p.send_initial || rv_param.is_empty() || rv_param == "0" {
            let items: Vec<Bytes> = inner
                .select(&w.rt, w.p.namespace.as_deref(), &w.p.labels, &w.p.fields)
                .into_iter()
                .map(|o| match w.p.table {
                    Some(_) => line("ADDED", &w.render(&inner, o.into_owned())),
                    None => line("ADDED", &o),
                })
                .collect();
            (inner.rv, Ok(items))
        } else {
            match rv_param.parse::<u64>() {
                Err(_) => (
                    0,
                    Err(ApiError::bad_request(format!(
                        "invalid resource version: {rv_param}"
                    ))),
                ),
                // Only whether the history reaches back to `rv`: the loop below sends the
                // changes.
                Ok(rv) => match inner.changes_of(&w.rt.storage, rv) {
                    Err(e) => (0, Err(e)),
                    Ok(_) => (rv, Ok(vec![])),
                },
            }
        }
    };
    match first {
        Err(e) => {
            let _ = tx.send(line("ERROR", &e.to_status())).await;
            return;
        }
        Ok(items) => {
            for b in items {
                if tx.send(b).await.is_err() {
                    return;
                }
            }
        }
    }
    if w.p.send_initial && w.p.bookmarks && tx.send(w.bookmark(pos, true)).await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + w.p.timeout.unwrap_or(Duration::from_secs(1800));
    let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
    ticker.tick().await;
    loop {
        // The changes are picked under the store's lock; they are written out after it is
        // released, so a watch with many events does not hold up every other request.
        let batch = {
            let inner = store.lock();
            let picked = match inner.changes_of(&w.rt.storage, pos) {
                Err(e) => Err(e),
                Ok(changes) => {
                    let mut out = Vec::new();
                    for c in changes {
                        if w.p
                            .namespace
                            .as_deref()
                            .is_some_and(|n| n != c.key.namespace)
                        {
                            continue;
                        }
                        if w.named().is_some_and(|n| n != c.key.name) {
                            continue;
                        }
                        let new = inner.view_ref(&w.rt, &c.object);
                        let all = w.unfiltered();
                        let now_m = all || w.matches(&new);
                        let was_m = c
                            .old
                            .as_ref()
                            .map(|o| all || w.matches(&inner.view_ref(&w.rt, o)));
                        let kind = match (c.kind, was_m, now_m) {
                            (ChangeKind::Added, _, true) => "ADDED",
                            (ChangeKind::Deleted, _, true) => "DELETED",
                            (ChangeKind::Modified, Some(true), true) => "MODIFIED",
                            (ChangeKind::Modified, Some(false) | None, true) => "ADDED",
                            (ChangeKind::Modified, Some(true), false) => "DELETED",
                            _ => continue,
                        };
                        let object = match (w.p.table, new) {
                            (Some(_), new) => Shown::Owned(w.render(&inner, new.into_owned())),
                            (None, Cow::Borrowed(_)) => {
                                Shown::Stored(c.object.clone(), c.encoded.clone())
                            }
                            (None, Cow::Owned(v)) => Shown::Owned(v),
                        };
                        out.push((kind, object));
                    }
                    pos = inner.rv;
                    Ok(out)
                }
            };
            picked
        }
        .map(|events| {
            events
                .iter()
                .map(|(kind, object)| object.line(kind))
                .collect::<Vec<_>>()
        });
        match batch {
            Err(e) => {
                let _ = tx.send(line("ERROR", &e.to_status())).await;
                return;
            }
            Ok(lines) => {
                for b in lines {
                    if tx.send(b).await.is_err() {
                        return;
                    }
                }
            }
        }
        tokio::select! {
            r = changed.changed() => if r.is_err() { return },
            _ = tokio::time::sleep_until(deadline) => return,
            _ = tx.closed() => return,
            _ = ticker.tick() => {
                if w.p.bookmarks && tx.send(w.bookmark(pos, false)).await.is_err() {
                    return;
                }
            }
        }
    }
}
