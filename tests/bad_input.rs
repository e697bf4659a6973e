//! The corpus of `tests/bad-input/` on both grounds: every manifest is either rejected at
//! admission with its field named, or accepted and reported `Ready=False` with a reason and a
//! message naming the field. Meanwhile a healthy Habitat beside them reaches Ready, the
//! operator keeps running, and the Secrets the healthy one uses change and vanish under it.
//!
//! Each file's comment says its outcome: `# expect: rejected FIELD` or
//! `# expect: not-ready REASON FIELD`.

#[macro_use]
mod support;

use std::time::{Duration, Instant};

use habitat_operator::api::Habitat;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::DeleteParams;
use support::{timeout, Env, Ground};

/// What a corpus file expects.
#[derive(Debug, Clone)]
enum Expect {
    Rejected { field: String },
    NotReady { reason: String, field: String },
}

struct Case {
    file: String,
    text: String,
    habitat: String,
    expect: Expect,
}

fn corpus() -> Vec<Case> {
    let dir = support::root().join("tests/bad-input");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/bad-input")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).expect("readable");
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("# expect: "))
                .unwrap_or_else(|| panic!("{file} has no `# expect:` line"));
            let words: Vec<&str> = line.split_whitespace().collect();
            let expect = match words.as_slice() {
                ["rejected", field] => Expect::Rejected {
                    field: field.to_string(),
                },
                ["not-ready", reason, field] => Expect::NotReady {
                    reason: reason.to_string(),
                    field: field.to_string(),
                },
                _ => panic!("{file}: cannot read `# expect: {line}`"),
            };
            let habitat = serde_yaml::Deserializer::from_str(&text)
                .filter_map(|d| serde_yaml::Value::deserialize(d).ok())
                .filter(|d| d["kind"] == "Habitat")
                .find_map(|d| d["metadata"]["name"].as_str().map(String::from))
                .unwrap_or_else(|| panic!("{file} has no Habitat"));
            Case {
                file,
                text,
                habitat,
                expect,
            }
        })
        .collect()
}

use serde::Deserialize;

/// A valid ring key file for `name` (`<ring>-<revision>`), its key bytes spelling `marker`.
pub fn ring_key_file(name: &str, marker: &str) -> String {
    use base64::Engine;
    let mut key = marker.as_bytes().to_vec();
    key.resize(32, b'k');
    format!(
        "SYM-SEC-1\n{name}\n\n{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

const STEADY_KEY: &str = "steady-20170829113029";

fn steady_manifests(user_toml: &str) -> String {
    let key = ring_key_file(STEADY_KEY, "steady-key");
    let indented: String = key.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {STEADY_KEY}\nstringData:\n  ring-key: |\n{indented}---
apiVersion: v1\nkind: Secret\nmetadata:\n  name: steady-config\nstringData:\n  user.toml: '{user_toml}'\n---
apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata:\n  name: steady\nspec:\n  image: kinvolk/redis-hab\n  count: 1
  service:\n    name: redis\n    configSecretName: steady-config\n    ringSecretName: {STEADY_KEY}\n"
    )
}

/// The Ready condition's (status, reason, message).
fn ready(h: &Habitat) -> Option<(String, String, String)> {
    h.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until `name`'s Ready condition is `status` with `reason` (one of `|`-separated
/// reasons) and a message containing `field`; returns the message.
async fn wait_ready(env: &Env, name: &str, status: &str, reason: &str, field: &str) -> String {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Ok(Some(h)) = env.habitats().get_opt(name).await {
            last = ready(&h);
            if let Some((s, r, m)) = &last {
                if s == status && reason.split('|').any(|x| x == r) && m.contains(field) {
                    return m.clone();
                }
            }
        }
        assert!(
            start.elapsed() < timeout(env),
            "{name}: Ready is {last:?}, not {status} {reason} naming {field}; operator log tail:\n{}",
            support::tail(&env.operator_log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn bad_input(ground: Ground) {
    require_kubectl!();
    let mut env = env_on!(ground, "bad_input");
    let cases = corpus();
    assert!(cases.len() >= 40, "only {} bad inputs", cases.len());
    env.apply_yaml(&steady_manifests("marker = 1"));

    let mut outcomes = Vec::new();
    for case in &cases {
        let (ok, out, err) = env.try_apply_yaml(&case.text);
        match &case.expect {
            Expect::Rejected { field } => {
                assert!(
                    !ok,
                    "{}: accepted, but should be rejected naming {field}: {out}",
                    case.file
                );
                assert!(
                    err.contains(field.as_str()),
                    "{}: rejected without naming {field}: {err}",
                    case.file
                );
                let first = err.lines().next().unwrap_or_default().to_string();
                outcomes.push(format!("{}: rejected: {first}", case.file));
            }
            Expect::NotReady { .. } => {
                assert!(ok, "{}: rejected, but should be accepted: {err}", case.file);
            }
        }
    }
    // One healthy Habitat was there before the bad inputs, another comes after them.
    env.apply_yaml(
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata:\n  name: late\nspec:\n  image: kinvolk/redis-hab\n  count: 2\n  service:\n    name: redis\n",
    );
    env.wait_phase("steady", "Ready", timeout(&env)).await;
    env.wait_phase("late", "Ready", timeout(&env)).await;
    for case in &cases {
        if let Expect::NotReady { reason, field } = &case.expect {
            let message = wait_ready(&env, &case.habitat, "False", reason, field).await;
            outcomes.push(format!("{}: Ready=False {reason}: {message}", case.file));
        }
    }
    // An invalid spec makes no StatefulSet.
    for case in &cases {
        if let Expect::NotReady { reason, .. } = &case.expect {
            if reason == "InvalidSpec" {
                let sts = env.api::<StatefulSet>().get_opt(&case.habitat).await;
                assert!(
                    matches!(sts, Ok(None)),
                    "{}: a StatefulSet exists for an invalid spec",
                    case.file
                );
            }
        }
    }
    env.assert_processes_running("the bad inputs were applied");
    eprintln!("{ground:?}:\n{}", outcomes.join("\n"));

    // The Secrets of a Ready Habitat vanish and change.
    let secrets = env.api::<Secret>();
    secrets
        .delete("steady-config", &DeleteParams::default())
        .await
        .expect("delete the config Secret");
    wait_ready(
        &env,
        "steady",
        "False",
        "ReferencedSecretMissing|Degraded",
        "spec.service.configSecretName",
    )
    .await;
    env.apply_yaml(&steady_manifests("marker = 2"));
    wait_ready(&env, "steady", "True", "HabitatReady", "").await;
    env.apply_yaml(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {STEADY_KEY}\nstringData:\n  ring-key: garbage\n"
    ));
    wait_ready(
        &env,
        "steady",
        "False",
        "KeyMalformed|Degraded",
        "spec.service.ringSecretName",
    )
    .await;
    secrets
        .delete(STEADY_KEY, &DeleteParams::default())
        .await
        .expect("delete the ring Secret");
    wait_ready(
        &env,
        "steady",
        "False",
        "SecretNotFound|Degraded",
        "spec.service.ringSecretName",
    )
    .await;
    env.apply_yaml(&steady_manifests("marker = 3"));
    wait_ready(&env, "steady", "True", "HabitatReady", "").await;
    env.assert_processes_running("the Secrets changed and vanished");
    let log = env.operator_log();
    assert!(!log.contains("panicked"), "the operator panicked:\n{log}");
}

on_both_grounds!(bad_input);
