//! Drift: every field the operator sets on a child is put back when someone changes it, the
//! fields it does not set are left alone, and a child put back is not written again while
//! nothing changes.

#[macro_use]
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use habitat_operator::children::statefulset::CONTAINER;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::Api;
use kube::ResourceExt;
use serde_json::Value;

use support::control_plane::{ControlPlane, OPERATOR_USER};
use support::{timeout, wait_for, Env, Ground};

const NAME: &str = "example-leader";

/// The operator's writes of children (creates, patches, updates, deletes of StatefulSets,
/// Services, ConfigMaps and budgets) so far, as the API server counts them: the sandbox's
/// request counts, or the real API server's audit log. `None` on a cluster whose audit log this
/// test cannot read.
fn child_writes(env: &Env) -> Option<u64> {
    const CHILDREN: [&str; 4] = [
        "statefulsets",
        "services",
        "configmaps",
        "poddisruptionbudgets",
    ];
    const WRITES: [&str; 4] = ["create", "update", "patch", "delete"];
    if env.is_real() {
        let cp = ControlPlane::shared()?;
        if std::env::var_os("HABITAT_E2E_KUBECONFIG").is_some() {
            return None;
        }
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(cp.dir())
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        files.retain(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit") && n.ends_with(".log"))
        });
        let mut n = 0;
        for f in files {
            for line in std::fs::read_to_string(f).unwrap_or_default().lines() {
                let Ok(e) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                let r = &e["objectRef"];
                if e["stage"] == "ResponseComplete"
                    && e["user"]["username"] == OPERATOR_USER
                    && r["namespace"] == env.namespace.as_str()
                    && r["subresource"].is_null()
                    && CHILDREN.iter().any(|c| r["resource"] == *c)
                    && WRITES.iter().any(|w| e["verb"] == *w)
                {
                    n += 1;
                }
            }
        }
        return Some(n);
    }
    let kubeconfig = std::fs::read_to_string(&env.kubeconfig).ok()?;
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))?
        .trim()
        .trim_matches('"')
        .to_string();
    let body = ureq::get(&format!("{server}/debug/requests"))
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()?;
    let v: Value = serde_json::from_str(&body).ok()?;
    Some(
        v["requests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| {
                r["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("habitat-operator/"))
                    && CHILDREN.iter().any(|c| r["resource"] == *c)
                    && WRITES.iter().any(|w| r["verb"] == *w)
            })
            .map(|r| r["count"].as_u64().unwrap_or(0))
            .sum(),
    )
}

async fn get<K>(api: &Api<K>, name: &str) -> Option<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.ok().flatten()
}

/// The resourceVersions of every child, by kind and name.
async fn versions(env: &Env) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let rv = |kind: &str, name: &str, v: Option<String>| {
        (format!("{kind}/{name}"), v.unwrap_or_default())
    };
    let sts = get(&env.api::<StatefulSet>(), NAME).await;
    out.extend([rv(
        "sts",
        NAME,
        sts.and_then(|o| o.metadata.resource_version),
    )]);
    for svc in [NAME.to_string(), format!("{NAME}-leader")] {
        let s = get(&env.api::<Service>(), &svc).await;
        out.extend([rv("svc", &svc, s.and_then(|o| o.metadata.resource_version))]);
    }
    let cm = get(&env.api::<ConfigMap>(), &format!("{NAME}-peer")).await;
    out.extend([rv(
        "cm",
        "peer",
        cm.and_then(|o| o.metadata.resource_version),
    )]);
    let pdb = get(&env.api::<PodDisruptionBudget>(), NAME).await;
    out.extend([rv(
        "pdb",
        NAME,
        pdb.and_then(|o| o.metadata.resource_version),
    )]);
    out
}

fn image(s: &StatefulSet) -> Option<String> {
    s.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.image.clone())
}

/// Each kind of child edited with kubectl, as a user would, is put back within seconds; a
/// user's annotation stays; then nothing is written while nothing changes.
async fn every_edited_child_is_put_back(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "drift", false);
    // Settled Habitats are looked at again every 3 s, so the quiet window below spans resyncs.
    let (_operator, _) = env.extra_operator(&["--resync-seconds", "3"]);
    env.apply_example("leader");
    env.wait_phase(NAME, "Ready", timeout(&env)).await;
    let back = Duration::from_secs(20);
    let statefulsets = env.api::<StatefulSet>();
    let services = env.api::<Service>();
    let budgets = env.api::<PodDisruptionBudget>();
    let applied = get(&statefulsets, NAME).await.expect("the StatefulSet");
    let replicas = applied.spec.as_ref().and_then(|s| s.replicas);
    let applied_image = image(&applied);
    assert!(applied_image.is_some());

    // A user's annotation is theirs: it stays through every repair below.
    env.kubectl_ok(&["annotate", "statefulset", NAME, "user.example/note=mine"]);

    env.kubectl_ok(&["scale", "statefulset", NAME, "--replicas=5"]);
    wait_for(back, "the StatefulSet's replicas put back", || async {
        get(&statefulsets, NAME)
            .await
            .is_some_and(|s| s.spec.and_then(|s| s.replicas) == replicas)
    })
    .await;

    env.kubectl_ok(&[
        "set",
        "image",
        &format!("statefulset/{NAME}"),
        &format!("{CONTAINER}=example/intruder:1"),
    ]);
    wait_for(back, "the StatefulSet's image put back", || async {
        get(&statefulsets, NAME)
            .await
            .is_some_and(|s| image(&s) == applied_image)
    })
    .await;

    for svc in [NAME.to_string(), format!("{NAME}-leader")] {
        let before = get(&services, &svc).await.expect("the Service");
        let selector = before.spec.as_ref().and_then(|s| s.selector.clone());
        let key = selector
            .as_ref()
            .and_then(|s| s.keys().next().cloned())
            .expect("a selector");
        env.kubectl_ok(&[
            "patch",
            "service",
            &svc,
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"spec":{{"selector":{{"{key}":"intruder"}}}}}}"#),
        ]);
        wait_for(back, "the Service's selector put back", || async {
            get(&services, &svc)
                .await
                .is_some_and(|s| s.spec.and_then(|s| s.selector) == selector)
        })
        .await;
    }

    // The peer file names a running pod of the group (which one may change as pods come and
    // go): put back is an address of one of the Habitat's pods, not the intruder's.
    let peer = format!("{NAME}-peer");
    env.kubectl_ok(&[
        "patch",
        "configmap",
        &peer,
        "--type",
        "merge",
        "-p",
        r#"{"data":{"peer-ip":"192.0.2.1"}}"#,
    ]);
    wait_for(back, "the peer ConfigMap's data put back", || async {
        let ip = env.peer_ip(NAME).await;
        let ips: Vec<String> = env
            .pods(NAME)
            .await
            .into_iter()
            .filter_map(|p| p.status.and_then(|s| s.pod_ip))
            .collect();
        ip != "192.0.2.1" && ips.contains(&ip)
    })
    .await;

    env.kubectl_ok(&[
        "patch",
        "pdb",
        NAME,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"maxUnavailable":3}}"#,
    ]);
    wait_for(back, "the budget put back", || async {
        get(&budgets, NAME)
            .await
            .is_some_and(|b| b.spec.and_then(|s| s.max_unavailable) == Some(IntOrString::Int(1)))
    })
    .await;

    let gone = get(&budgets, NAME).await.and_then(|b| b.metadata.uid);
    env.kubectl_ok(&["delete", "pdb", NAME, "--wait=true"]);
    wait_for(back, "the deleted budget made again", || async {
        get(&budgets, NAME)
            .await
            .is_some_and(|b| b.metadata.uid.is_some() && b.metadata.uid != gone)
    })
    .await;

    let sts = get(&statefulsets, NAME).await.expect("the StatefulSet");
    assert_eq!(
        sts.annotations()
            .get("user.example/note")
            .map(String::as_str),
        Some("mine"),
        "a user's annotation is left alone"
    );
    env.wait_phase(NAME, "Ready", timeout(&env)).await;

    // Restored, the children are not written again while nothing changes: no apply loop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (before, writes) = (versions(&env).await, child_writes(&env));
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        versions(&env).await,
        before,
        "a child changed in the quiet window"
    );
    if let Some(writes) = writes {
        assert_eq!(
            child_writes(&env),
            Some(writes),
            "the operator wrote a child in the quiet window"
        );
    }
}

on_both_grounds!(every_edited_child_is_put_back);
