//! A minimal OpenAPI v3 surface: enough for kubectl to see that every resource accepts the
//! `fieldValidation` query parameter (so it validates server-side and needs no schemas).

use crate::registry::Registry;
use serde_json::{json, Map, Value};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of group-version documents.
pub fn index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (g, vs) in reg.groups() {
        for v in vs {
            let p = gv_path(&g, &v);
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=sandbox")}),
            );
        }
    }
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1 | apis/group/version}`.
pub fn group_version(reg: &Registry, path: &str) -> Option<Value> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version) = match segs.as_slice() {
        ["openapi", "v3", "api", v] => ("", *v),
        ["openapi", "v3", "apis", g, v] => (*g, *v),
        _ => return None,
    };
    let mut paths = Map::new();
    let param = json!([
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
    ]);
    for t in reg.in_group_version(group, version) {
        let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
        let base = if t.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(group, version),
                t.plural
            )
        } else {
            format!("/{}/{}", gv_path(group, version), t.plural)
        };
        let op = |id: &str| {
            json!({"operationId": id, "parameters": param, "responses": {},
                "x-kubernetes-action": id, "x-kubernetes-group-version-kind": gvk})
        };
        paths.insert(base.clone(), json!({"post": op("post")}));
        paths.insert(
            format!("{base}/{{name}}"),
            json!({"patch": op("patch"), "put": op("put"), "get": op("get")}),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
