//! Scenarios for each capability of the original operator: peer file, ring keys, config and
//! files Secrets, binds, env, storage, updates and namespaces. Each fails without its feature.

#[macro_use]
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::ResourceExt;
use support::{timeout, wait_for, Env, Ground};

async fn statefulset(env: &Env, name: &str) -> StatefulSet {
    env.api::<StatefulSet>()
        .get(name)
        .await
        .expect("the StatefulSet exists")
}

fn args(sts: &StatefulSet) -> Vec<String> {
    sts.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers[0].args.clone())
        .unwrap_or_default()
}

fn mount_paths(sts: &StatefulSet) -> Vec<String> {
    let c = sts
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| p.containers[0].clone())
        .unwrap_or_default();
    c.volume_mounts
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.mount_path)
        .collect()
}

fn condition(h: &habitat_operator::api::Habitat, type_: &str) -> (String, String, String) {
    h.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

async fn wait_condition(
    env: &Env,
    name: &str,
    type_: &str,
    reason: &str,
) -> habitat_operator::api::Habitat {
    let mut last = None;
    let start = std::time::Instant::now();
    loop {
        if let Ok(h) = env.habitats().get(name).await {
            if condition(&h, type_).1 == reason {
                return h;
            }
            last = Some(h);
        }
        assert!(
            start.elapsed() < timeout(env),
            "{name} never had {type_} with reason {reason}: {:?}",
            last.and_then(|h| h.status)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn warning_reasons(env: &Env) -> BTreeSet<String> {
    let events = env.events().await;
    events
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.reason)
        .collect()
}

async fn the_peer_file_is_emptied_when_no_pod_runs_and_refilled_when_one_does(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "peer-empty");
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    assert!(!env.peer_ip("example-standalone").await.is_empty());
    env.patch("example-standalone", r#"{"spec":{"count":0}}"#);
    wait_for(timeout(&env), "an empty peer file", || async {
        env.peer_ip("example-standalone").await.is_empty()
    })
    .await;
    env.patch("example-standalone", r#"{"spec":{"count":1}}"#);
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    wait_for(timeout(&env), "a peer address again", || async {
        !env.peer_ip("example-standalone").await.is_empty()
    })
    .await;
}

async fn a_user_ring_key_is_validated_mounted_and_passed_with_ring(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "ring-user");
    env.apply_example("encrypted");
    let h = env
        .wait_phase("example-encrypted", "Ready", timeout(&env))
        .await;
    let secret = "example-encrypted-ring-20170829113029";
    assert_eq!(
        h.status
            .as_ref()
            .and_then(|s| s.ring_secret_name.as_deref()),
        Some(secret)
    );
    let sts = statefulset(&env, "example-encrypted").await;
    assert!(
        args(&sts)
            .windows(2)
            .any(|w| w == ["--ring", "example-encrypted-ring"]),
        "{:?}",
        args(&sts)
    );
    assert!(mount_paths(&sts).contains(&format!("/hab/cache/keys/{secret}.sym.key")));

    // A Habitat naming a missing Secret, then a malformed one, waits with a reason that says so.
    env.apply_yaml(
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: broken}\nspec:\n  image: kinvolk/redis-hab\n  service: {name: redis, ringSecretName: prod-20261130101500}\n"
    );
    let h = wait_condition(&env, "broken", "KeyReady", "SecretNotFound").await;
    assert!(condition(&h, "KeyReady").2.contains("prod-20261130101500"));
    assert_eq!(h.phase_str(), Some("ConfigMapReady"));
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: prod-20261130101500}\nstringData: {ring-key: not-a-key}\n");
    let h = wait_condition(&env, "broken", "KeyReady", "KeyMalformed").await;
    let message = condition(&h, "KeyReady").2;
    assert!(
        message.contains("SYM-SEC-1") && !message.contains("not-a-key"),
        "{message}"
    );
    wait_for(
        timeout(&env),
        "Warning Events for the missing and malformed key",
        || async {
            let reasons = warning_reasons(&env).await;
            reasons.contains("SecretNotFound") && reasons.contains("KeyMalformed")
        },
    )
    .await;
    // Fixing the Secret lets it proceed without touching the Habitat.
    let good = std::fs::read_to_string(support::root().join("examples/encrypted/habitat.yml"))
        .expect("example");
    let key_b64 = good
        .lines()
        .find_map(|l| l.trim().strip_prefix("ring-key: "))
        .expect("example key")
        .to_string();
    use base64::Engine;
    let file = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(&key_b64)
            .expect("base64"),
    )
    .expect("utf-8");
    let renamed = file.replace(
        "example-encrypted-ring-20170829113029",
        "prod-20261130101500",
    );
    let data = base64::engine::general_purpose::STANDARD.encode(renamed);
    env.apply_yaml(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: prod-20261130101500}}\ndata: {{ring-key: {data}}}\n"
    ));
    env.wait_phase("broken", "Ready", timeout(&env)).await;
}

async fn a_generated_ring_key_is_shared_kept_across_restarts_and_deletions_and_rings_coexist(
    ground: Ground,
) {
    require_kubectl!();
    let mut env = env_on!(ground, "ring-gen");
    env.apply_example("generated-ring");
    let a = env
        .wait_phase("example-ring-a", "Ready", timeout(&env))
        .await;
    let b = env
        .wait_phase("example-ring-b", "Ready", timeout(&env))
        .await;
    let key = a
        .status
        .as_ref()
        .and_then(|s| s.ring_secret_name.clone())
        .expect("a key is used");
    assert_eq!(
        b.status
            .as_ref()
            .and_then(|s| s.ring_secret_name.clone())
            .as_deref(),
        Some(key.as_str())
    );
    assert!(
        key.starts_with("example-ring-") && key.len() == "example-ring-".len() + 14,
        "{key}"
    );
    let secret = env.api::<Secret>().get(&key).await.expect("the key Secret");
    assert!(
        secret.owner_references().is_empty(),
        "a ring key must not be owned by a Habitat"
    );

    env.stop_operator();
    env.kubectl_ok(&["delete", "habitat", "example-ring-a", "--wait=false"]);
    env.start_operator();
    let ring_habitat = |name: &str, ring: &str| {
        format!("apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {{name: {name}}}\nspec:\n  image: kinvolk/redis-hab\n  service: {{name: redis, group: {name}, ring: {{name: {ring}}}}}\n")
    };
    env.apply_yaml(&ring_habitat("late", "example-ring"));
    env.apply_yaml(&ring_habitat("other", "other-ring"));
    let late = env.wait_phase("late", "Ready", timeout(&env)).await;
    assert_eq!(
        late.status
            .as_ref()
            .and_then(|s| s.ring_secret_name.clone())
            .as_deref(),
        Some(key.as_str())
    );
    let other = env.wait_phase("other", "Ready", timeout(&env)).await;
    let other_key = other
        .status
        .as_ref()
        .and_then(|s| s.ring_secret_name.clone())
        .expect("a key");
    assert!(other_key.starts_with("other-ring-"), "{other_key}");
    let keys = env
        .api::<Secret>()
        .list(&ListParams::default().labels("habitat.sh/ring"))
        .await
        .expect("list")
        .items;
    let names: BTreeSet<String> = keys.iter().map(|s| s.name_any()).collect();
    assert_eq!(names, BTreeSet::from([key, other_key]));
}

async fn the_user_toml_secret_is_mounted_renaming_it_rolls_pods_and_editing_it_does_not(
    ground: Ground,
) {
    require_kubectl!();
    let env = env_on!(ground, "config");
    env.apply_example("config");
    env.wait_phase("example-config", "Ready", timeout(&env))
        .await;
    let sts = statefulset(&env, "example-config").await;
    assert!(mount_paths(&sts).contains(&"/hab/user/redis/config".to_string()));
    assert!(mount_paths(&sts)
        .iter()
        .all(|p| !p.starts_with("/hab/svc/redis") || p.ends_with("/files")));
    let uids = |pods: Vec<k8s_openapi::api::core::v1::Pod>| {
        pods.iter().filter_map(|p| p.uid()).collect::<Vec<_>>()
    };
    let before = uids(env.pods("example-config").await);

    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: example-config-user-toml}\nstringData: {user.toml: \"port = 6390\\n\"}\n");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        uids(env.pods("example-config").await),
        before,
        "a content change must not restart pods"
    );
    assert_eq!(
        env.habitats()
            .get("example-config")
            .await
            .expect("get")
            .phase_str(),
        Some("Ready")
    );

    env.patch(
        "example-config",
        r#"{"spec":{"service":{"configSecretName":"renamed"}}}"#,
    );
    let h = wait_condition(
        &env,
        "example-config",
        "Deployed",
        "ReferencedSecretMissing",
    )
    .await;
    assert!(condition(&h, "Deployed").2.contains("renamed"));
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: renamed}\nstringData: {user.toml: \"port = 6391\\n\"}\n");
    env.wait_phase("example-config", "Ready", timeout(&env))
        .await;
    wait_for(timeout(&env), "the pods to be replaced", || async {
        let now = uids(env.pods("example-config").await);
        !now.is_empty() && now.iter().all(|u| !before.contains(u))
    })
    .await;
}

async fn files_binds_env_channel_group_and_storage_reach_the_statefulset(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "spec");
    for example in ["files", "bind", "env-vars", "persisted"] {
        env.apply_example(example);
    }
    env.apply_yaml("apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: tuned}\nspec:\n  image: kinvolk/redis-hab\n  service: {name: redis, group: blue, channel: unstable}\n");
    for name in [
        "example-files",
        "example-bind-web",
        "example-env",
        "example-persisted",
        "tuned",
    ] {
        env.wait_phase(name, "Ready", timeout(&env)).await;
    }
    let files = statefulset(&env, "example-files").await;
    assert!(mount_paths(&files).contains(&"/hab/svc/redis/files".to_string()));
    let init = files
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.init_containers.clone())
        .unwrap_or_default();
    assert_eq!(init.len(), 1, "an init container copies the files");

    // The web group's peer file also names a database pod, so the two gossip in one ring and
    // the bind can be satisfied.
    let db_ips: Vec<String> = env
        .pods("example-bind-db")
        .await
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    wait_for(
        timeout(&env),
        "the web peer file to name a database pod",
        || async {
            let lines: Vec<String> = env
                .peer_ip("example-bind-web")
                .await
                .lines()
                .map(String::from)
                .collect();
            lines.len() == 2 && db_ips.contains(&lines[1])
        },
    )
    .await;
    let web = statefulset(&env, "example-bind-web").await;
    assert!(
        args(&web)
            .windows(2)
            .any(|w| w == ["--bind", "db:postgresql.default"]),
        "{:?}",
        args(&web)
    );

    let envs = statefulset(&env, "example-env").await;
    assert!(env_names(&envs).contains(&"HAB_REDIS".to_string()));

    let tuned = args(&statefulset(&env, "tuned").await);
    assert!(
        tuned.windows(2).any(|w| w == ["--group", "blue"])
            && tuned.windows(2).any(|w| w == ["--channel", "unstable"]),
        "{tuned:?}"
    );

    let persisted = statefulset(&env, "example-persisted").await;
    assert!(mount_paths(&persisted).contains(&"/hab/svc/redis/data".to_string()));
    let claims = env.kubectl_ok(&["get", "pvc", "-o", "name"]);
    assert!(claims.contains("data-example-persisted-0"), "{claims}");
}

/// The container's env var names of a StatefulSet.
fn env_names(sts: &StatefulSet) -> Vec<String> {
    sts.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers[0].env.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.name)
        .collect()
}

/// The children are written by server-side apply alone, under one field manager, so what the
/// spec drops leaves the child.
async fn a_field_taken_out_of_the_spec_leaves_the_child_created_for_it(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "spec-drop");
    env.apply_example("env-vars");
    env.wait_phase("example-env", "Ready", timeout(&env)).await;
    let created = statefulset(&env, "example-env").await;
    assert!(env_names(&created).contains(&"HAB_REDIS".to_string()));
    env.patch("example-env", r#"{"spec":{"env":null}}"#);
    wait_for(
        timeout(&env),
        "HAB_REDIS to leave the StatefulSet",
        || async {
            !env_names(&statefulset(&env, "example-env").await).contains(&"HAB_REDIS".to_string())
        },
    )
    .await;
    // The operator's one entry is its Apply: no create left fields behind.
    let sts = statefulset(&env, "example-env").await;
    let operations: Vec<_> = sts
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.manager.as_deref() == Some("habitat-operator"))
        .filter(|e| e.subresource.is_none())
        .map(|e| e.operation.clone().unwrap_or_default())
        .collect();
    assert_eq!(operations, ["Apply"]);
    env.wait_phase("example-env", "Ready", timeout(&env)).await;
}

async fn scaling_does_not_restart_the_pods_that_stay(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "scale-keep");
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let first = env.pods("example-standalone").await[0].uid();
    env.patch("example-standalone", r#"{"spec":{"count":3}}"#);
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let pods = env.pods("example-standalone").await;
    assert_eq!(pods.len(), 3);
    assert_eq!(pods[0].uid(), first, "pod 0 was restarted by a scale-up");
}

async fn children_live_in_the_habitats_namespace_and_other_namespaces_are_not_watched(
    ground: Ground,
) {
    require_kubectl!();
    let env = env_on!(ground, "namespaces");
    env.apply_example("standalone");
    // The `namespaced` example creates its own namespace, which this operator does not watch.
    let path = support::root().join("examples/namespaced/habitat.yml");
    env.kubectl_ok(&[
        "-n",
        "example-namespace",
        "apply",
        "-f",
        path.to_str().unwrap_or_default(),
    ]);
    let h = env
        .wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let sts = statefulset(&env, "example-standalone").await;
    assert_eq!(sts.namespace(), h.namespace());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (ok, out, _) = env.kubectl(&[
        "-n",
        "example-namespace",
        "get",
        "habitat",
        "example-namespaced",
        "-o",
        "jsonpath={.status.phase}",
    ]);
    assert!(
        ok && out.is_empty(),
        "a Habitat outside --namespace was reconciled: {out}"
    );
}

/// Both grounds refuse it at admission with the CRD's CEL message (the sandbox used to accept
/// it, and this test wrote into `target/`, which need not exist).
async fn an_invalid_spec_is_refused_with_a_message_that_names_the_fields(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "invalid");
    let (applied, out, err) = env.try_apply_yaml(
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: both}\nspec:\n  image: kinvolk/redis-hab\n  service: {name: redis, ring: {name: prod}, ringSecretName: prod-20170829113029}\n",
    );
    assert!(
        !applied,
        "the API server accepted an invalid Habitat: {out}"
    );
    assert!(
        err.contains(r#"The Habitat "both" is invalid: spec.service: Invalid value: spec.service.ring and spec.service.ringSecretName are mutually exclusive; set one"#),
        "{err}"
    );
    let statefulsets = env
        .api::<StatefulSet>()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert!(
        statefulsets.is_empty(),
        "nothing is created for an invalid spec"
    );
}

/// Supervisors that update themselves from a channel pass `--strategy`, and only the census
/// says what they run: the status lists them even for the standalone topology.
async fn a_standalone_group_following_a_channel_shows_its_members_and_release(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "channel-members");
    env.apply_yaml("apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: web}\nspec:\n  image: core/nginx-hab:v3\n  count: 2\n  service: {name: nginx, channel: stable, updateStrategy: at-once, updateCondition: track-channel}\n");
    env.wait_phase("web", "Ready", timeout(&env)).await;
    let args = statefulset(&env, "web")
        .await
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].args.clone().unwrap_or_default())
        .unwrap_or_default();
    let pairs: Vec<&[String]> = args.chunks(2).collect();
    assert!(
        pairs
            .iter()
            .any(|p| p[0] == "--strategy" && p[1] == "at-once")
            && pairs
                .iter()
                .any(|p| p[0] == "--update-condition" && p[1] == "track-channel"),
        "{args:?}"
    );
    let package = habitat_sandbox::nodes::supervisor::package_for("core/nginx-hab:v3", "nginx");
    wait_for(timeout(&env), "status.members of both pods", || async {
        let status = env
            .habitats()
            .get("web")
            .await
            .ok()
            .and_then(|h| h.status)
            .unwrap_or_default();
        let pods: BTreeSet<String> = status
            .members
            .iter()
            .filter(|m| m.alive && m.package == package)
            .filter_map(|m| m.pod.clone())
            .collect();
        pods == BTreeSet::from(["web-0".to_string(), "web-1".to_string()])
            && status.release.as_deref() == package.splitn(3, '/').nth(2)
    })
    .await;
}

on_both_grounds!(
    a_standalone_group_following_a_channel_shows_its_members_and_release,
    the_peer_file_is_emptied_when_no_pod_runs_and_refilled_when_one_does,
    a_user_ring_key_is_validated_mounted_and_passed_with_ring,
    a_generated_ring_key_is_shared_kept_across_restarts_and_deletions_and_rings_coexist,
    the_user_toml_secret_is_mounted_renaming_it_rolls_pods_and_editing_it_does_not,
    files_binds_env_channel_group_and_storage_reach_the_statefulset,
    scaling_does_not_restart_the_pods_that_stay,
    a_field_taken_out_of_the_spec_leaves_the_child_created_for_it,
    children_live_in_the_habitats_namespace_and_other_namespaces_are_not_watched,
    an_invalid_spec_is_refused_with_a_message_that_names_the_fields,
);
