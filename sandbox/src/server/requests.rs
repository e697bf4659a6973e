//! The API server's own count of requests, as kube-apiserver's audit log would show them: by
//! client (User-Agent), verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
//! `deletecollection`) and resource (`pods`, `habitats/status`). Served on `GET /debug/requests`
//! for benchmarks that need to know what a client cost the server.

use std::collections::BTreeMap;
use std::sync::Mutex;

use axum::http::Method;
use serde_json::{json, Value};

use super::route::ObjectPath;

/// Counts of resource requests, keyed by (User-Agent, verb, resource).
#[derive(Debug, Default)]
pub struct Requests {
    counts: Mutex<BTreeMap<(String, &'static str, String), u64>>,
}

/// The Kubernetes verb of a request, as the audit log names it.
pub fn verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    }
}

impl Requests {
    /// Counts one request on `p`.
    pub fn record(&self, user_agent: &str, method: &Method, watch: bool, p: &ObjectPath) {
        let resource = match &p.sub {
            Some(sub) => format!("{}/{sub}", p.plural),
            None => p.plural.clone(),
        };
        let verb = verb(method, p.name.is_some(), watch);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *counts
            .entry((user_agent.to_string(), verb, resource))
            .or_default() += 1;
    }

    /// `{"requests": [{"userAgent", "verb", "resource", "count"}, ...]}`, sorted.
    pub fn to_json(&self) -> Value {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let rows: Vec<Value> = counts
            .iter()
            .map(|((agent, verb, resource), n)| {
                json!({"userAgent": agent, "verb": verb, "resource": resource, "count": n})
            })
            .collect();
        json!({ "requests": rows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(plural: &str, name: Option<&str>, sub: Option<&str>) -> ObjectPath {
        ObjectPath {
            group: String::new(),
            version: "v1".into(),
            namespace: Some("default".into()),
            plural: plural.into(),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
        }
    }

    #[test]
    fn requests_are_counted_by_agent_verb_and_resource() {
        let r = Requests::default();
        let pods = path("pods", None, None);
        let status = path("habitats", Some("a"), Some("status"));
        r.record("op/1", &Method::GET, false, &pods);
        r.record("op/1", &Method::GET, true, &pods);
        r.record("op/1", &Method::GET, true, &pods);
        r.record("op/1", &Method::PATCH, false, &status);
        r.record("kubectl/1", &Method::DELETE, false, &pods);
        r.record(
            "kubectl/1",
            &Method::DELETE,
            false,
            &path("pods", Some("p"), None),
        );
        let rows = r.to_json()["requests"].as_array().cloned().unwrap();
        let row = |agent: &str, verb: &str, resource: &str| {
            rows.iter()
                .find(|v| v["userAgent"] == agent && v["verb"] == verb && v["resource"] == resource)
                .and_then(|v| v["count"].as_u64())
        };
        assert_eq!(row("op/1", "list", "pods"), Some(1));
        assert_eq!(row("op/1", "watch", "pods"), Some(2));
        assert_eq!(row("op/1", "patch", "habitats/status"), Some(1));
        assert_eq!(row("kubectl/1", "deletecollection", "pods"), Some(1));
        assert_eq!(row("kubectl/1", "delete", "pods"), Some(1));
        assert_eq!(rows.len(), 5);
    }
}
