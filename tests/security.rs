//! Secret content never leaks, and deleting Habitats keeps what holds data and keys, on both
//! grounds. A marker is planted in every Secret a Habitat uses (the ring key's bytes,
//! `user.toml`, a file), the operator runs at `--log-level trace`, and its log, the namespace's
//! Events, the Habitats' status and the metrics are searched for the marker and for each
//! Secret value in the encodings it travels in. A generated ring key is searched for too.

#[macro_use]
mod support;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::api::ListParams;
use kube::ResourceExt;
use support::{timeout, wait_for, Ground};

const MARKER: &str = "hAbMaRkEr7f3a9c";
const KEY_NAME: &str = "sec-20170829113029";

/// A ring key file for `name` whose 32 key bytes begin with the marker.
fn key_file(name: &str) -> (String, String) {
    let mut key = MARKER.as_bytes().to_vec();
    key.resize(32, b'Z');
    let line = STANDARD.encode(key);
    (format!("SYM-SEC-1\n{name}\n\n{line}"), line)
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

async fn secrets_stay_secret(ground: Ground) {
    require_kubectl!();
    let mut env = env_on!(ground, "security", false);
    let (_operator, metrics_addr) = env.extra_operator(&["--log-level", "trace"]);
    let (ring_file, key_line) = key_file(KEY_NAME);
    let user_toml = format!("password = \"{MARKER}-config\"\n");
    let file = format!("token={MARKER}-file\n");
    env.apply_yaml(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {KEY_NAME}\nstringData:\n  ring-key: |\n{}---
apiVersion: v1\nkind: Secret\nmetadata:\n  name: sec-config\nstringData:\n  user.toml: |\n{}---
apiVersion: v1\nkind: Secret\nmetadata:\n  name: sec-files\nstringData:\n  token.txt: |\n{}---
apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata:\n  name: secure\nspec:\n  image: kinvolk/redis-hab\n  count: 1
  persistentStorage: {{size: 1Gi, mountPath: /hab/svc/redis/data}}
  service:\n    name: redis\n    configSecretName: sec-config\n    filesSecretName: sec-files\n    ringSecretName: {KEY_NAME}\n---
apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata:\n  name: generated\nspec:\n  image: kinvolk/redis-hab\n  count: 1
  persistentStorage: {{size: 1Gi, mountPath: /hab/svc/redis/data}}
  service:\n    name: redis\n    ring: {{name: gen}}\n",
        indent(&ring_file),
        indent(&user_toml),
        indent(&file)
    ));
    env.wait_phase("secure", "Ready", timeout(&env)).await;
    env.wait_phase("generated", "Ready", timeout(&env)).await;
    // A change of the configuration goes through the operator too.
    let user_toml2 = format!("password = \"{MARKER}-changed\"\n");
    env.apply_yaml(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: sec-config\nstringData:\n  user.toml: |\n{}",
        indent(&user_toml2)
    ));
    env.wait_phase("secure", "Ready", timeout(&env)).await;

    let generated = env
        .api::<Secret>()
        .list(&ListParams::default().labels("habitat.sh/ring=gen"))
        .await
        .expect("list")
        .items;
    assert_eq!(generated.len(), 1, "one generated key for ring gen");
    let generated_file = generated[0]
        .data
        .as_ref()
        .and_then(|d| d.get("ring-key"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .expect("the generated key file");
    let generated_line = generated_file
        .lines()
        .nth(3)
        .unwrap_or_default()
        .to_string();
    assert!(generated_line.len() >= 40, "{generated_file:?}");

    let mut needles = vec![MARKER.to_string(), key_line.clone(), generated_line.clone()];
    // The values as the Secrets hold them (a YAML block scalar ends with a newline), in the
    // base64 of a Secret's `data`; the Secrets themselves show that the search would find them.
    let stored: Vec<String> = [
        format!("{ring_file}\n"),
        user_toml2.clone(),
        file.clone(),
        generated_file.clone(),
    ]
    .iter()
    .map(|v| STANDARD.encode(v.as_bytes()))
    .collect();
    let secrets_yaml = env.kubectl_ok(&["get", "secrets", "-o", "yaml"]);
    for b64 in &stored {
        assert!(
            secrets_yaml.contains(b64.as_str()),
            "{b64} is not how a Secret holds it"
        );
    }
    needles.extend(stored);
    needles.push(STANDARD.encode(user_toml.as_bytes()));
    // Give the trace log a moment to carry what the last reconciles did.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let metrics = ureq::get(&format!("http://{metrics_addr}/metrics"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default();
    assert!(
        metrics.contains("habitat_operator"),
        "no metrics: {metrics}"
    );
    let log = env.operator_log();
    assert!(
        log.contains("TRACE") || log.contains("\"level\":\"TRACE\""),
        "the operator did not log at trace level"
    );
    let places = [
        ("the operator log (trace)", log),
        ("Events", env.kubectl_ok(&["get", "events", "-o", "yaml"])),
        (
            "the Habitats' status",
            env.kubectl_ok(&["get", "habitats", "-o", "jsonpath={.items[*].status}"]),
        ),
        ("the metrics", metrics),
    ];
    for (place, text) in &places {
        assert!(text.len() > 10, "{place} is empty");
        for needle in &needles {
            assert!(
                !text.contains(needle.as_str()),
                "Secret content {needle:?} appears in {place}"
            );
        }
    }

    // Deleting the Habitats keeps the claims and the ring keys; nothing of them is owned by a
    // Habitat or a StatefulSet that could take them along.
    for sts in env
        .api::<StatefulSet>()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
    {
        let policy = sts
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_claim_retention_policy.clone());
        assert!(
            policy.as_ref().is_none_or(|p| {
                p.when_deleted.as_deref().is_none_or(|w| w == "Retain")
                    && p.when_scaled.as_deref().is_none_or(|w| w == "Retain")
            }),
            "{}: claims are not retained: {policy:?}",
            sts.name_any()
        );
    }
    let claims_before: Vec<String> = env
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert!(
        claims_before.len() >= 2,
        "the claims were not made: {claims_before:?}"
    );
    env.kubectl_ok(&["delete", "habitat", "--all", "--wait=true", "--timeout=60s"]);
    wait_for(timeout(&env), "the StatefulSets to be gone", || async {
        env.api::<StatefulSet>()
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;
    // Leave the garbage collector time to act on anything it would take.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let claims = env
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    for name in &claims_before {
        let claim = claims.iter().find(|c| &c.name_any() == name);
        assert!(
            claim.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
            "claim {name} was deleted with its Habitat"
        );
    }
    for c in &claims {
        assert!(c.owner_references().is_empty(), "{}: owned", c.name_any());
    }
    for name in [KEY_NAME.to_string(), generated[0].name_any()] {
        let s = env.api::<Secret>().get_opt(&name).await.expect("get");
        let s = s.unwrap_or_else(|| panic!("ring key {name} was deleted with its Habitat"));
        assert!(
            s.metadata.deletion_timestamp.is_none(),
            "{name} is deleting"
        );
        assert!(s.owner_references().is_empty(), "{name}: owned");
    }
    env.assert_processes_running("the Habitats were deleted");
}

on_both_grounds!(secrets_stay_secret);
