//! Discovery documents: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`.

use crate::registry::Registry;
use serde_json::{json, Value};

/// `/version`
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z", "goVersion": "go1.24.2", "compiler": "gc",
        "platform": "linux/amd64", "emulationMajor": "1", "emulationMinor": "33",
    })
}

/// `/api`
pub fn core_versions(server: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}]})
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`
pub fn groups(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_entry(&g, &vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    reg.groups()
        .into_iter()
        .find(|(g, _)| g == name)
        .map(|(g, vs)| {
            let mut e = group_entry(&g, &vs);
            e["kind"] = json!("APIGroup");
            e["apiVersion"] = json!("v1");
            e
        })
}

/// `/api/v1`, `/apis/{group}/{version}`
pub fn resources(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut out = Vec::new();
    for t in reg.in_group_version(group, version) {
        let mut verbs = vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        if t.plural == "namespaces" {
            verbs.retain(|v| *v != "deletecollection");
        }
        let mut e = json!({
            "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
            "kind": t.kind, "verbs": verbs,
        });
        if !t.short_names.is_empty() {
            e["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            e["categories"] = json!(t.categories);
        }
        out.push(e);
        if super::resource::has_scale(t) {
            out.push(
                json!({"name": format!("{}/scale", t.plural), "singularName": "",
                "namespaced": t.namespaced, "group": "autoscaling", "version": "v1",
                "kind": "Scale", "verbs": ["get", "patch", "update"]}),
            );
        }
        if t.status {
            out.push(
                json!({"name": format!("{}/status", t.plural), "singularName": "",
                "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
    }
    if out.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resources_list_status_subresources() {
        let r = Registry::default();
        let v = resources(&r, "", "v1").expect("core");
        let names: Vec<&str> = v["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert!(names.contains(&"pods") && names.contains(&"pods/status"));
        assert!(groups(&r)["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|e| e["name"] == "apps")));
        assert!(resources(&r, "nope", "v1").is_none());
    }
}
