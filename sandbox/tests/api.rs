//! API server semantics over HTTP.

mod common;

use common::*;
use serde_json::json;

const CM: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn crud_conflict_and_noop() {
    let sb = start().await;
    let (c, cm) = req(
        &sb,
        "POST",
        CM,
        json!({"metadata": {"name": "a"}, "data": {"k": "v"}}),
    )
    .await;
    assert_eq!(c, 201);
    assert_eq!(cm["kind"], "ConfigMap");
    let rv = cm["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let (c, s) = req(&sb, "POST", CM, json!({"metadata": {"name": "a"}})).await;
    assert_eq!((c, s["reason"].as_str()), (409, Some("AlreadyExists")));
    // no-op update keeps the resourceVersion
    let (c, same) = req(&sb, "PUT", &format!("{CM}/a"), cm.clone()).await;
    assert_eq!(
        (c, same["metadata"]["resourceVersion"].as_str()),
        (200, Some(rv.as_str()))
    );
    let (_, same) = req_ct(
        &sb,
        "PATCH",
        &format!("{CM}/a"),
        "application/merge-patch+json",
        json!({"data": {"k": "v"}}),
    )
    .await;
    assert_eq!(
        same["metadata"]["resourceVersion"].as_str(),
        Some(rv.as_str())
    );
    // a real change bumps it; the stale rv then conflicts
    let mut changed = cm.clone();
    changed["data"]["k"] = json!("w");
    let (c, new) = req(&sb, "PUT", &format!("{CM}/a"), changed.clone()).await;
    assert_eq!(c, 200);
    assert_ne!(
        new["metadata"]["resourceVersion"].as_str(),
        Some(rv.as_str())
    );
    let (c, s) = req(&sb, "PUT", &format!("{CM}/a"), changed).await;
    assert_eq!((c, s["reason"].as_str()), (409, Some("Conflict")));
    let (c, list) = req(
        &sb,
        "GET",
        &format!("{CM}?labelSelector=app%20notin%20(x)"),
        json!(null),
    )
    .await;
    assert_eq!((c, list["kind"].as_str()), (200, Some("ConfigMapList")));
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
    let (c, _) = req(&sb, "DELETE", &format!("{CM}/a?dryRun=All"), json!(null)).await;
    assert_eq!(c, 200);
    assert_eq!(
        req(&sb, "GET", &format!("{CM}/a"), json!(null)).await.0,
        200,
        "dry run keeps it"
    );
    let (c, _) = req(&sb, "DELETE", &format!("{CM}/a"), json!(null)).await;
    assert_eq!(c, 200);
    let (c, s) = req(&sb, "GET", &format!("{CM}/a"), json!(null)).await;
    assert_eq!((c, s["reason"].as_str()), (404, Some("NotFound")));
    sb.shutdown().await;
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 0}
              color: {type: string, default: blue}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;
const W: &str = "/apis/example.com/v1/namespaces/default/widgets";

#[tokio::test]
async fn status_generation_finalizers_validation() {
    let sb = start().await;
    sb.apply_yaml(CRD).await.expect("crd");
    let (c, w) = req(&sb, "POST", W, json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "finalizers": ["example.com/f"]}, "spec": {"size": 1}, "status": {"x": 1}})).await;
    assert_eq!(c, 201, "{w}");
    assert_eq!(w["metadata"]["generation"], 1);
    assert_eq!(w["spec"]["color"], "blue", "schema default applied");
    assert!(w.get("status").is_none(), "status ignored on create");
    let (c, e) = req(
        &sb,
        "POST",
        W,
        json!({"metadata": {"name": "bad"}, "spec": {"size": -1}}),
    )
    .await;
    assert_eq!((c, e["reason"].as_str()), (422, Some("Invalid")));
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec.size")),
        "{e}"
    );
    // status write changes only status, no generation bump
    let (_, s) = req_ct(
        &sb,
        "PATCH",
        &format!("{W}/w/status"),
        "application/merge-patch+json",
        json!({"spec": {"size": 9}, "status": {"phase": "Ready"}}),
    )
    .await;
    assert_eq!(
        (s["status"]["phase"].as_str(), s["spec"]["size"].as_i64()),
        (Some("Ready"), Some(1))
    );
    assert_eq!(s["metadata"]["generation"], 1);
    // main write ignores status, bumps generation on spec change only
    let (_, m) = req_ct(
        &sb,
        "PATCH",
        &format!("{W}/w"),
        "application/merge-patch+json",
        json!({"spec": {"size": 2}, "status": {"phase": "Nope"}}),
    )
    .await;
    assert_eq!(
        (
            m["status"]["phase"].as_str(),
            m["metadata"]["generation"].as_i64()
        ),
        (Some("Ready"), Some(2))
    );
    let (_, m) = req_ct(
        &sb,
        "PATCH",
        &format!("{W}/w"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .await;
    assert_eq!(m["metadata"]["generation"], 2);
    // finalizer flow
    let (c, d) = req(&sb, "DELETE", &format!("{W}/w"), json!(null)).await;
    assert_eq!(c, 200);
    assert!(d["metadata"]["deletionTimestamp"].is_string());
    let (c, _) = req(&sb, "GET", &format!("{W}/w"), json!(null)).await;
    assert_eq!(c, 200, "still there while finalizers remain");
    let (c, _) = req_ct(
        &sb,
        "PATCH",
        &format!("{W}/w"),
        "application/json-patch+json",
        json!([{"op": "remove", "path": "/metadata/finalizers"}]),
    )
    .await;
    assert_eq!(c, 200);
    let (c, _) = req(&sb, "GET", &format!("{W}/w"), json!(null)).await;
    assert_eq!(c, 404);
    sb.shutdown().await;
}

#[tokio::test]
async fn owner_gc_cascades() {
    let sb = start().await;
    let (_, a) = req(&sb, "POST", CM, json!({"metadata": {"name": "owner"}})).await;
    let owner = |n: &str, uid: &serde_json::Value| {
        json!({"metadata": {"name": n, "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": uid}]}})
    };
    let (_, b) = req(&sb, "POST", CM, owner("child", &a["metadata"]["uid"])).await;
    req(&sb, "POST", CM, owner("grandchild", &b["metadata"]["uid"])).await;
    req(&sb, "POST", CM, owner("orphan-me", &a["metadata"]["uid"])).await;
    // Orphan on a separate owner keeps dependents
    let (_, o2) = req(&sb, "POST", CM, json!({"metadata": {"name": "owner2"}})).await;
    req(&sb, "POST", CM, owner("kept", &o2["metadata"]["uid"])).await;
    req(
        &sb,
        "DELETE",
        &format!("{CM}/owner2"),
        json!({"propagationPolicy": "Orphan"}),
    )
    .await;
    req(&sb, "DELETE", &format!("{CM}/owner"), json!(null)).await;
    for n in ["child", "grandchild", "orphan-me"] {
        assert_eq!(
            req(&sb, "GET", &format!("{CM}/{n}"), json!(null)).await.0,
            404,
            "{n}"
        );
    }
    let (c, kept) = req(&sb, "GET", &format!("{CM}/kept"), json!(null)).await;
    assert_eq!(c, 200);
    assert_eq!(kept["metadata"]["ownerReferences"], json!([]));
    sb.shutdown().await;
}

#[tokio::test]
async fn server_side_apply_fields() {
    let sb = start().await;
    let apply = |body: serde_json::Value| {
        let sb = &sb;
        async move {
            req_ct(
                sb,
                "PATCH",
                &format!("{CM}/ssa?fieldManager=me&force=true"),
                "application/apply-patch+yaml",
                body,
            )
            .await
        }
    };
    let (c, o) = apply(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa",
        "labels": {"a": "1"}}, "data": {"x": "1", "y": "2"}}),
    )
    .await;
    assert_eq!(c, 201, "{o}");
    req_ct(
        &sb,
        "PATCH",
        &format!("{CM}/ssa"),
        "application/merge-patch+json",
        json!({"data": {"other": "3"}}),
    )
    .await;
    let (c, o) = apply(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
        "data": {"x": "9"}}),
    )
    .await;
    assert_eq!(c, 200);
    assert_eq!(
        o["data"],
        json!({"x": "9", "other": "3"}),
        "y dropped, other manager's field kept"
    );
    assert!(o["metadata"]["labels"].get("a").is_none());
    sb.shutdown().await;
}

#[tokio::test]
async fn watch_replay_expiry_bookmarks_and_selectors() {
    let sb = start().await;
    let (_, a) = req(
        &sb,
        "POST",
        CM,
        json!({"metadata": {"name": "a", "labels": {"w": "1"}}}),
    )
    .await;
    let rv = a["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    req(&sb, "POST", CM, json!({"metadata": {"name": "b"}})).await;
    req_ct(
        &sb,
        "PATCH",
        &format!("{CM}/a"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"w": "2"}}}),
    )
    .await;
    let lines = watch_lines(
        &sb,
        &format!("{CM}?watch=1&resourceVersion={rv}&timeoutSeconds=1"),
    )
    .await;
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    assert_eq!(kinds, vec!["ADDED", "MODIFIED"]);
    // selector transition: a stops matching w=1 → DELETED
    let lines = watch_lines(
        &sb,
        &format!("{CM}?watch=true&resourceVersion={rv}&labelSelector=w%3D1&timeoutSeconds=1"),
    )
    .await;
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    assert_eq!(kinds, vec!["DELETED"]);
    // initial events + end bookmark
    let lines = watch_lines(&sb, &format!("{CM}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1")).await;
    assert_eq!(lines.len(), 3);
    assert_eq!(
        lines[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // expiry: push the rv out of the ConfigMaps' history window, made small
    {
        let store = sb.store();
        let mut inner = store.lock();
        inner.set_history_limits(habitat_sandbox::store::history::Limits {
            lower: 8,
            budget: 16,
        });
        let rt = inner.resource("", "v1", "configmaps").expect("cm");
        for i in 0..16 {
            inner
                .create(
                    &rt,
                    Some("default"),
                    json!({"metadata": {"name": format!("f{i}")}}),
                )
                .expect("create");
        }
    }
    let lines = watch_lines(
        &sb,
        &format!("{CM}?watch=1&resourceVersion={rv}&timeoutSeconds=1"),
    )
    .await;
    assert_eq!(lines.len(), 1);
    assert_eq!(
        (
            lines[0]["type"].as_str(),
            lines[0]["object"]["code"].as_i64()
        ),
        (Some("ERROR"), Some(410))
    );
    assert_eq!(lines[0]["object"]["reason"], "Expired");
    sb.shutdown().await;
}

#[tokio::test]
async fn periodic_bookmarks() {
    let sb = start().await;
    let (_, list) = req(&sb, "GET", CM, json!(null)).await;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let secs = habitat_sandbox::server::watch::BOOKMARK_INTERVAL.as_secs() + 1;
    let lines = watch_lines(
        &sb,
        &format!(
            "{CM}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds={secs}"
        ),
    )
    .await;
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "BOOKMARK"
                && l["object"]["metadata"]["resourceVersion"].is_string()),
        "{lines:?}"
    );
    sb.shutdown().await;
}

#[tokio::test]
async fn discovery_and_events_views() {
    let sb = start().await;
    let (_, apis) = req(&sb, "GET", "/apis", json!(null)).await;
    assert!(apis["groups"]
        .as_array()
        .is_some_and(|g| g.iter().any(|e| e["name"] == "apps")));
    let (c, _) = req(&sb, "GET", "/healthz", json!(null)).await;
    assert_eq!(c, 200);
    let (c, _) = req(&sb, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", json!({
        "metadata": {"name": "e1"}, "regarding": {"kind": "Widget", "name": "w", "namespace": "default", "uid": "u1"},
        "note": "hi", "reason": "R", "type": "Normal", "action": "A", "reportingController": "c",
        "reportingInstance": "i", "eventTime": "2025-01-01T00:00:00.000000Z"})).await;
    assert_eq!(c, 201);
    let (_, l) = req(&sb, "GET", "/api/v1/namespaces/default/events?fieldSelector=involvedObject.uid%3Du1,involvedObject.kind%3DWidget", json!(null)).await;
    assert_eq!(l["items"][0]["message"], "hi");
    assert_eq!(l["items"][0]["source"]["component"], "c");
    sb.shutdown().await;
}

/// kube-apiserver's namespace lifecycle admission: once a namespace's deletion has begun, new
/// objects are refused with 403 and the `NamespaceTerminating` cause; existing objects can still
/// be updated and patched (finalizers must be removable).
#[tokio::test]
async fn a_terminating_namespace_refuses_new_content_only() {
    let sb = start().await;
    let (c, _) = req(
        &sb,
        "POST",
        "/api/v1/namespaces",
        json!({"metadata": {"name": "e2e-x"}}),
    )
    .await;
    assert_eq!(c, 201);
    let cms = "/api/v1/namespaces/e2e-x/configmaps";
    // A finalizer keeps the namespace terminating for the rest of the test.
    let (c, held) = req(
        &sb,
        "POST",
        cms,
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "data": {"k": "v"}}),
    )
    .await;
    assert_eq!(c, 201);
    let (c, _) = req(&sb, "DELETE", "/api/v1/namespaces/e2e-x", json!(null)).await;
    assert_eq!(c, 200);
    let (_, ns) = req(&sb, "GET", "/api/v1/namespaces/e2e-x", json!(null)).await;
    assert!(ns["metadata"]["deletionTimestamp"].is_string(), "{ns}");

    let (c, s) = req(&sb, "POST", cms, json!({"metadata": {"name": "x"}})).await;
    assert_eq!(c, 403);
    assert_eq!(
        s,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps \"x\" is forbidden: unable to create new content in namespace e2e-x because it is being terminated",
            "reason": "Forbidden",
            "details": {"name": "x", "kind": "configmaps", "causes": [{
                "reason": "NamespaceTerminating",
                "message": "namespace e2e-x is being terminated",
                "field": "metadata.namespace"
            }]},
            "code": 403
        })
    );
    // Admission answers before storage: an existing name is refused the same way, not 409.
    let (c, s) = req(&sb, "POST", cms, json!({"metadata": {"name": "held"}})).await;
    assert_eq!((c, s["reason"].as_str()), (403, Some("Forbidden")));
    // generateName: admission sees no name yet.
    let (c, s) = req(
        &sb,
        "POST",
        cms,
        json!({"metadata": {"generateName": "g-"}}),
    )
    .await;
    assert_eq!(c, 403);
    assert_eq!(
        s["message"],
        "configmaps is forbidden: unable to create new content in namespace e2e-x because it is being terminated"
    );
    // Server-side apply that would create is a create; a grouped resource names its group.
    let (c, s) = req_ct(
        &sb,
        "PATCH",
        "/apis/apps/v1/namespaces/e2e-x/statefulsets/web?fieldManager=me&force=true",
        "application/apply-patch+yaml",
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"}}),
    )
    .await;
    assert_eq!(c, 403, "{s}");
    assert_eq!(
        s["message"],
        "statefulsets.apps \"web\" is forbidden: unable to create new content in namespace e2e-x because it is being terminated"
    );
    assert_eq!(s["details"]["group"], "apps");
    assert_eq!(s["details"]["causes"][0]["reason"], "NamespaceTerminating");
    let (c, _) = req(&sb, "GET", &format!("{cms}/x"), json!(null)).await;
    assert_eq!(c, 404, "nothing was created");

    // Existing objects: apply, merge patch and update still work.
    let (c, s) = req_ct(
        &sb,
        "PATCH",
        &format!("{cms}/held?fieldManager=me&force=true"),
        "application/apply-patch+yaml",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held"}, "data": {"k": "w"}}),
    )
    .await;
    assert_eq!(c, 200, "{s}");
    let (c, s) = req_ct(
        &sb,
        "PATCH",
        &format!("{cms}/held"),
        "application/merge-patch+json",
        json!({"data": {"k2": "v2"}}),
    )
    .await;
    assert_eq!(c, 200, "{s}");
    let mut put = s.clone();
    put["data"]["k3"] = json!("v3");
    let (c, s) = req(&sb, "PUT", &format!("{cms}/held"), put).await;
    assert_eq!(c, 200, "{s}");
    assert_eq!(s["data"]["k3"], "v3");
    assert_eq!(s["metadata"]["uid"], held["metadata"]["uid"]);
    sb.shutdown().await;
}
