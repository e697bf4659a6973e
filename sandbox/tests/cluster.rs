//! StatefulSet controller, kubelet and supervisor simulation.

mod common;

use common::*;
use habitat_sandbox::Sandbox;
use serde_json::{json, Value};

const STS: &str = "/apis/apps/v1/namespaces/default/statefulsets";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// A StatefulSet of Habitat pods, after the peer ConfigMap they mount (a kubelet starts a pod
/// only once the objects its volumes require exist).
fn sts_yaml(name: &str, replicas: u32, policy: &str, strategy: &str, leader: bool) -> String {
    let topology = if leader { "leader" } else { "standalone" };
    format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}-peer}}
data: {{peer-ip: ""}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  podManagementPolicy: {policy}
  updateStrategy: {{type: {strategy}}}
  serviceName: {name}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: habitat-service
        image: habitat/{name}-hab
        args: ["--topology", "{topology}", "--group", "default"]
        readinessProbe: {{httpGet: {{path: /services/{name}/default/health, port: 9631}}}}
        volumeMounts: [{{name: peer, mountPath: /habitat-operator/peer}}]
      volumes: [{{name: peer, configMap: {{name: {name}-peer}}}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}
"#
    )
}

async fn sts_status(sb: &Sandbox, name: &str) -> Value {
    req(sb, "GET", &format!("{STS}/{name}"), json!(null))
        .await
        .1
}

async fn wait_ready(sb: &Sandbox, name: &str, n: i64) {
    eventually(10, "statefulset ready", || async {
        let s = sts_status(sb, name).await;
        let st = &s["status"];
        // Until the controller has seen the latest spec, its status describes the previous one.
        (st["observedGeneration"] == s["metadata"]["generation"]
            && st["readyReplicas"] == n
            && st["replicas"] == n
            && st["currentRevision"] == st["updateRevision"])
            .then_some(())
    })
    .await
}

async fn rv(sb: &Sandbox) -> String {
    req(sb, "GET", PODS, json!(null)).await.1["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn pod_events(sb: &Sandbox, from: &str, kind: &str) -> Vec<String> {
    watch_lines(
        sb,
        &format!("{PODS}?watch=1&resourceVersion={from}&timeoutSeconds=1"),
    )
    .await
    .iter()
    .filter(|l| l["type"] == kind)
    .filter_map(|l| l["object"]["metadata"]["name"].as_str().map(String::from))
    .collect()
}

#[tokio::test]
async fn ordered_scale_up_down_and_rolling_update() {
    let sb = start().await;
    let start_rv = rv(&sb).await;
    sb.apply_yaml(&sts_yaml("web", 3, "OrderedReady", "RollingUpdate", false))
        .await
        .expect("apply");
    wait_ready(&sb, "web", 3).await;
    assert_eq!(
        pod_events(&sb, &start_rv, "ADDED").await,
        vec!["web-0", "web-1", "web-2"]
    );
    let (_, pvcs) = req(
        &sb,
        "GET",
        "/api/v1/namespaces/default/persistentvolumeclaims",
        json!(null),
    )
    .await;
    assert_eq!(pvcs["items"].as_array().map(Vec::len), Some(3));
    let (_, pod) = req(&sb, "GET", &format!("{PODS}/web-1"), json!(null)).await;
    assert_eq!(pod["status"]["phase"], "Running");
    assert!(pod["status"]["podIP"]
        .as_str()
        .is_some_and(|ip| ip.starts_with("127.")));
    assert_eq!(pod["spec"]["nodeName"], "sandbox-node");

    // rolling update: highest ordinal first
    let before = rv(&sb).await;
    let old_rev = sts_status(&sb, "web").await["status"]["currentRevision"].clone();
    req_ct(
        &sb,
        "PATCH",
        &format!("{STS}/web"),
        "application/strategic-merge-patch+json",
        json!({"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}}),
    )
    .await;
    wait_ready(&sb, "web", 3).await;
    assert_eq!(
        pod_events(&sb, &before, "DELETED").await,
        vec!["web-2", "web-1", "web-0"]
    );
    let s = sts_status(&sb, "web").await;
    assert_ne!(s["status"]["currentRevision"], old_rev);
    assert_eq!(s["status"]["updatedReplicas"], 3);
    assert_eq!(
        s["status"]["observedGeneration"],
        s["metadata"]["generation"]
    );

    // scale down from the highest ordinal
    let before = rv(&sb).await;
    req_ct(
        &sb,
        "PATCH",
        &format!("{STS}/web"),
        "application/merge-patch+json",
        json!({"spec": {"replicas": 1}}),
    )
    .await;
    wait_ready(&sb, "web", 1).await;
    assert_eq!(
        pod_events(&sb, &before, "DELETED").await,
        vec!["web-2", "web-1"]
    );
    // PVCs survive; pods are garbage-collected with the StatefulSet
    req(&sb, "DELETE", &format!("{STS}/web"), json!(null)).await;
    eventually(5, "pods gone", || async {
        let (_, l) = req(&sb, "GET", PODS, json!(null)).await;
        l["items"]
            .as_array()
            .is_some_and(Vec::is_empty)
            .then_some(())
    })
    .await;
    let (_, pvcs) = req(
        &sb,
        "GET",
        "/api/v1/namespaces/default/persistentvolumeclaims",
        json!(null),
    )
    .await;
    assert_eq!(pvcs["items"].as_array().map(Vec::len), Some(3));
    sb.shutdown().await;
}

#[tokio::test]
async fn on_delete_updates_only_deleted_pods() {
    let sb = start().await;
    sb.apply_yaml(&sts_yaml("db", 2, "Parallel", "OnDelete", false))
        .await
        .expect("apply");
    wait_ready(&sb, "db", 2).await;
    req_ct(
        &sb,
        "PATCH",
        &format!("{STS}/db"),
        "application/merge-patch+json",
        json!({"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}}),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let s = sts_status(&sb, "db").await;
    assert_eq!(s["status"]["updatedReplicas"], 0);
    let new_rev = s["status"]["updateRevision"]
        .as_str()
        .expect("rev")
        .to_string();
    req(&sb, "DELETE", &format!("{PODS}/db-1"), json!(null)).await;
    let rev_of = |p: Value| {
        p["metadata"]["labels"]["controller-revision-hash"]
            .as_str()
            .map(String::from)
    };
    eventually(5, "db-1 recreated at the new revision", || async {
        let (_, p) = req(&sb, "GET", &format!("{PODS}/db-1"), json!(null)).await;
        (rev_of(p).as_deref() == Some(new_rev.as_str())).then_some(())
    })
    .await;
    let (_, p0) = req(&sb, "GET", &format!("{PODS}/db-0"), json!(null)).await;
    assert_ne!(rev_of(p0).as_deref(), Some(new_rev.as_str()));
    sb.shutdown().await;
}

async fn census(ip: &str) -> Option<Value> {
    let (code, body) = try_raw(
        &format!("{ip}:9631"),
        "GET",
        "/census",
        "application/json",
        "",
    )
    .await?;
    (code == 200)
        .then(|| serde_json::from_str(&body).ok())
        .flatten()
}

async fn pod_ip(sb: &Sandbox, name: &str) -> Option<String> {
    let (_, p) = req(sb, "GET", &format!("{PODS}/{name}"), json!(null)).await;
    p["status"]["podIP"].as_str().map(String::from)
}

#[tokio::test]
async fn census_and_leader_reelection_after_kill_pod() {
    let sb = start().await;
    sb.apply_yaml(&sts_yaml("redis", 3, "Parallel", "RollingUpdate", true))
        .await
        .expect("apply");
    // Supervisors find each other only through a peer file: point it at redis-0, as the
    // operator does.
    let mut ip0 = None;
    for _ in 0..100 {
        ip0 = pod_ip(&sb, "redis-0").await;
        if ip0.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let ip0 = ip0.expect("redis-0 gets an IP");
    sb.apply_yaml(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: redis-peer}}\ndata: {{peer-ip: \"{ip0}\"}}\n"
    ))
    .await
    .expect("peer file");
    wait_ready(&sb, "redis", 3).await;
    let c = census(&ip0).await.expect("census");
    let g = &c["census_groups"]["redis.default"];
    assert_eq!(g["election_status"], "ElectionFinished");
    let leader = g["leader_id"].as_str().expect("leader").to_string();
    let pop = g["population"].as_object().expect("population");
    assert_eq!(pop.len(), 3);
    assert_eq!(pop[&leader]["leader"], true);
    assert!(pop.keys().all(|k| k.len() == 32 && *k <= leader));
    let leader_ip = pop[&leader]["sys"]["ip"].as_str().expect("ip").to_string();
    let (_, health) = raw(
        &format!("{leader_ip}:9631"),
        "GET",
        "/services/redis/default/health",
        "",
        "",
    )
    .await;
    assert!(health.contains("\"OK\""));
    let (_, pods) = req(&sb, "GET", PODS, json!(null)).await;
    let leader_pod = pods["items"]
        .as_array()
        .and_then(|ps| {
            ps.iter()
                .find(|p| p["status"]["podIP"] == leader_ip.as_str())
        })
        .and_then(|p| p["metadata"]["name"].as_str())
        .expect("leader pod")
        .to_string();

    sb.kill_pod("default", &leader_pod).await.expect("kill");
    let other = if leader_pod == "redis-0" {
        "redis-1"
    } else {
        "redis-0"
    };
    let other_ip = pod_ip(&sb, other).await.expect("ip");
    // As the operator does, point the peer file away from the dead pod so that its
    // replacement can join the ring.
    sb.apply_yaml(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: redis-peer}}\ndata: {{peer-ip: \"{other_ip}\"}}\n"
    ))
    .await
    .expect("peer file");
    let new_leader = eventually(10, "a new leader", || async {
        let c = census(&other_ip).await?;
        let g = &c["census_groups"]["redis.default"];
        let l = g["leader_id"].as_str()?;
        (g["election_status"] == "ElectionFinished"
            && l != leader
            && g["population"][l]["alive"] == true)
            .then(|| l.to_string())
    })
    .await;
    assert_ne!(new_leader, leader);
    wait_ready(&sb, "redis", 3).await;
    let c = census(&other_ip).await.expect("census");
    let pop = &c["census_groups"]["redis.default"]["population"];
    // Habitat keeps a dead member Confirmed, counted for quorum, until it departs (after 3
    // days); its container's new member joined a group that had quorum, so nothing was departed: 3 alive
    // of 4 counted (facts §6).
    assert_eq!(
        (
            pop[&leader]["confirmed"].clone(),
            pop[&leader]["departed"].clone()
        ),
        (json!(true), json!(false))
    );
    assert_eq!(
        pop.as_object()
            .map(|p| p.values().filter(|m| m["alive"] == true).count()),
        Some(3)
    );
    assert_eq!(pop.as_object().map(|p| p.len()), Some(4));
    sb.shutdown().await;
}

#[tokio::test]
async fn lone_leader_never_elects() {
    let sb = start().await;
    sb.apply_yaml(&sts_yaml("solo", 1, "Parallel", "RollingUpdate", true))
        .await
        .expect("apply");
    let ip = eventually(5, "pod running", || pod_ip(&sb, "solo-0")).await;
    let c = eventually(5, "census", || census(&ip)).await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let c2 = census(&ip).await.unwrap_or(c);
    assert_eq!(
        c2["census_groups"]["solo.default"]["election_status"],
        "ElectionNoQuorum"
    );
    let (_, p) = req(&sb, "GET", &format!("{PODS}/solo-0"), json!(null)).await;
    assert_eq!(p["status"]["containerStatuses"][0]["ready"], false);
    sb.shutdown().await;
}
