//! Least privilege, proven by the real authorizer. On this test binary's own control plane the
//! operator runs as the ServiceAccount of `deploy/` (a TokenRequest token, see
//! `support::control_plane`), bound by nothing but the RBAC of `deploy/`, through a
//! representative set of scenarios; then the API server's audit log must show that not one of
//! its requests was denied, that it never wrote to a Secret beyond creating one, and that every
//! (verb, resource) the ClusterRole grants was used. The namespaced overlay is checked the same
//! way with an operator watching one namespace, bound only by the overlay's Role. The
//! kustomizations are rendered with `kubectl kustomize` and applied to the control plane.
//!
//! Only the real ground: the sandbox has no authorizer.

#[macro_use]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::ResourceExt;
use serde_json::Value;
use support::control_plane::{ControlPlane, OPERATOR_USER};
use support::{timeout, wait_for, Env, Ground};

/// The scenarios of the cluster-wide install run one after another in this one test, so that
/// the audit log is read once all of them are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operator_as_the_service_account_of_deploy_is_never_denied_and_uses_every_rule() {
    require_kubectl!();
    let Some(cp) = ControlPlane::shared() else {
        eprintln!("skipped: no KUBEBUILDER_ASSETS");
        return;
    };
    tokio::join!(
        standalone_scaled_and_deleted(),
        leader_with_a_pod_kill_an_image_change_and_a_topology_change(),
        generated_ring_and_config_secret(),
        leader_election(),
    );
    // A request the RBAC refuses, so that the checks below are seen to see a denial.
    const PROBE: &str = "rbac-denial-probe";
    let operator = support::client_for(cp.operator_kubeconfig()).await;
    let refused = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(operator, "default")
        .delete(PROBE, &DeleteParams::default())
        .await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 403),
        "{refused:?}"
    );
    // Give the last requests of the stopped operators time to land in the log.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let events = audit(cp);
    let (probe, ours): (Vec<&Value>, Vec<&Value>) = events
        .iter()
        .filter(|e| e["user"]["username"] == OPERATOR_USER)
        .partition(|e| e["objectRef"]["name"] == PROBE);
    assert_eq!(
        denials(&probe).len(),
        1,
        "the probe's denial is not found in the audit log"
    );
    assert!(
        !ours.is_empty(),
        "no request of {OPERATOR_USER} in the audit log"
    );

    let denied = denials(&ours);
    let used = used_rules(&ours);
    // The ClusterRole, and the leader-election Role (which the tests grant in their own
    // namespaces, where their Leases are).
    let mut granted = granted_rules(
        &support::root().join("deploy/base/cluster-role.yaml"),
        "ClusterRole",
    );
    granted.extend(granted_rules(
        &support::root().join("deploy/base/leader-election.yaml"),
        "Role",
    ));
    let unused: Vec<&Rule> = granted.iter().filter(|r| !used.contains_key(*r)).collect();
    let secret_writes: Vec<String> = ours
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "secrets")
        .filter(|e| {
            ["update", "patch", "delete", "deletecollection"]
                .contains(&e["verb"].as_str().unwrap_or_default())
        })
        .map(|e| describe(e))
        .collect();
    let ungranted: Vec<&Rule> = used.keys().filter(|r| !granted.contains(*r)).collect();

    eprintln!(
        "audit: {} requests by {OPERATOR_USER}, {} denied; rules granted {}, used {}, unused {:?}",
        ours.len(),
        denied.len(),
        granted.len(),
        used.keys().filter(|r| granted.contains(*r)).count(),
        unused
    );
    for (rule, n) in &used {
        eprintln!("  {rule}: {n}");
    }
    assert!(
        denied.is_empty(),
        "requests of {OPERATOR_USER} were denied:\n{}",
        denied.join("\n")
    );
    assert!(
        secret_writes.is_empty(),
        "the operator wrote to Secrets:\n{}",
        secret_writes.join("\n")
    );
    assert!(
        ungranted.is_empty(),
        "allowed, yet granted by neither the ClusterRole nor the leader-election Role: {ungranted:?}"
    );
    assert!(
        unused.is_empty(),
        "rules of deploy/base no scenario used (remove them, or add a scenario that needs \
         them): {unused:?}"
    );
}

/// standalone: create, scale up and down, delete (the finalizer).
async fn standalone_scaled_and_deleted() {
    let env = env_on!(Ground::Real, "rbac-standalone");
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    env.patch("example-standalone", r#"{"spec":{"count":3}}"#);
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    env.patch("example-standalone", r#"{"spec":{"count":1}}"#);
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    delete_and_wait(&env, "example-standalone").await;
}

/// leader: a killed pod comes back; an image change replaces the pods one by one (the operator
/// deletes them); leader -> standalone deletes the leader Service and the PodDisruptionBudget.
async fn leader_with_a_pod_kill_an_image_change_and_a_topology_change() {
    let env = env_on!(Ground::Real, "rbac-leader");
    env.apply_example("leader");
    env.wait_phase("example-leader", "Ready", timeout(&env))
        .await;
    let victim = env.pods("example-leader").await[0].name_any();
    env.api::<Pod>()
        .delete(&victim, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete a pod");
    wait_for(timeout(&env), "the killed pod to be replaced", || async {
        env.pods("example-leader")
            .await
            .iter()
            .all(|p| p.name_any() != victim || p.metadata.deletion_timestamp.is_none())
    })
    .await;
    env.wait_phase("example-leader", "Ready", timeout(&env))
        .await;
    env.patch(
        "example-leader",
        r#"{"spec":{"image":"kinvolk/redis-hab:v2"}}"#,
    );
    env.wait_phase("example-leader", "Ready", timeout(&env))
        .await;
    env.patch(
        "example-leader",
        r#"{"spec":{"service":{"topology":"standalone"}}}"#,
    );
    env.wait_phase("example-leader", "Ready", timeout(&env))
        .await;
    delete_and_wait(&env, "example-leader").await;
}

/// A generated ring key (the one Secret the operator creates) and a config Secret it reads.
async fn generated_ring_and_config_secret() {
    let env = env_on!(Ground::Real, "rbac-secrets");
    env.apply_example("generated-ring");
    env.apply_example("config");
    for name in ["example-ring-a", "example-ring-b", "example-config"] {
        env.wait_phase(name, "Ready", timeout(&env)).await;
    }
    // A Habitat whose config Secret is missing: the same warning, again and again.
    env.apply_yaml(
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata:\n  name: missing-config\nspec:\n  \
         image: kinvolk/redis-hab\n  count: 1\n  service:\n    name: redis\n    \
         configSecretName: absent\n",
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    delete_and_wait(&env, "missing-config").await;
    delete_and_wait(&env, "example-config").await;
}

/// Two replicas with --leader-elect in the test namespace; one acts.
async fn leader_election() {
    let env = env_on!(Ground::Real, "rbac-lease", false);
    let ns = env.namespace.clone();
    let flags = ["--leader-elect", "--leader-elect-namespace", ns.as_str()];
    let (mut first, _) = env.extra_operator(&flags);
    let (mut second, _) = env.extra_operator(&flags);
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    // Renewals (update) happen every 2 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let log = env.temp_dir().join("operator.log");
    first.assert_running("electing a leader", &log);
    second.assert_running("electing a leader", &log);
    drop((first, second));
}

async fn delete_and_wait(env: &Env, name: &str) {
    env.kubectl_ok(&["delete", "habitat", name, "--wait=false"]);
    wait_for(timeout(env), &format!("{name} to be gone"), || async {
        env.habitats().get_opt(name).await.ok().flatten().is_none()
    })
    .await;
}

/// The namespaced overlay, moved to a test namespace by a kustomization of its own: rendered,
/// applied, and the operator watching only that namespace as the overlay's ServiceAccount is
/// never denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespaced_overlay_installs_and_its_operator_is_never_denied() {
    require_kubectl!();
    let Some(cp) = ControlPlane::shared() else {
        eprintln!("skipped: no KUBEBUILDER_ASSETS");
        return;
    };
    let mut env = env_on!(Ground::Real, "rbac-namespaced", false);
    let ns = env.namespace.clone();
    let rendered = kustomize_into(&ns);
    for kind in [
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Namespace",
    ] {
        assert!(
            !rendered.contains(&format!("\nkind: {kind}\n")),
            "the namespaced overlay renders a {kind}"
        );
    }
    let path = env.temp_dir().join("namespaced.yaml");
    std::fs::write(&path, &rendered).expect("write");
    env.kubectl_ok(&["apply", "-f", path.to_str().expect("UTF-8")]);
    for object in [
        "deployment/habitat-operator",
        "serviceaccount/habitat-operator",
        "role/habitat-operator",
        "rolebinding/habitat-operator",
        "role/habitat-operator-leader-election",
        "rolebinding/habitat-operator-leader-election",
        "service/habitat-operator-metrics",
    ] {
        env.kubectl_ok(&["get", object]);
    }
    let args = env.kubectl_ok(&[
        "get",
        "deployment/habitat-operator",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]);
    assert!(args.contains("--namespace=$(POD_NAMESPACE)"), "{args}");

    // The operator as the overlay's ServiceAccount, in namespaced mode.
    let admin = support::client_for(cp.admin_kubeconfig()).await;
    let token = support::control_plane::service_account_token(&admin, &ns, "habitat-operator")
        .await
        .expect("a token of the namespaced ServiceAccount");
    let user = format!("system:serviceaccount:{ns}:habitat-operator");
    let kubeconfig = env.temp_dir().join("namespaced.kubeconfig");
    std::fs::write(
        &kubeconfig,
        support::control_plane::token_kubeconfig(cp.url(), &cp.ca(), "namespaced", &token),
    )
    .expect("write kubeconfig");
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "auth",
            "can-i",
            "list",
            "statefulsets.apps",
            "--all-namespaces",
        ])
        .output()
        .expect("kubectl");
    let can = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        can.trim(),
        "no",
        "the namespaced operator has cluster-wide rights"
    );
    env.operator_kubeconfig = kubeconfig;
    let (operator, _) =
        env.extra_operator(&["--leader-elect", "--leader-elect-namespace", ns.as_str()]);
    env.apply_example("standalone");
    env.apply_example("generated-ring");
    for name in ["example-standalone", "example-ring-a", "example-ring-b"] {
        env.wait_phase(name, "Ready", timeout(&env)).await;
    }
    env.patch("example-standalone", r#"{"spec":{"count":2}}"#);
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    delete_and_wait(&env, "example-standalone").await;
    drop(operator);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let events = audit(cp);
    // The operator's requests: not this test's own kubectl auth can-i with the same token.
    let ours: Vec<&Value> = events
        .iter()
        .filter(|e| e["user"]["username"] == user.as_str())
        .filter(|e| {
            !e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("kubectl"))
        })
        .collect();
    let outside: Vec<String> = ours
        .iter()
        .filter(|e| e["objectRef"]["namespace"] != ns.as_str())
        .map(|e| describe(e))
        .collect();
    let denied = denials(&ours);
    eprintln!(
        "audit (namespaced): {} requests by {user}, {} denied, {} outside {ns}",
        ours.len(),
        denied.len(),
        outside.len()
    );
    assert!(
        ours.len() > 10,
        "too few requests by {user}: {}",
        ours.len()
    );
    assert!(
        denied.is_empty(),
        "requests of {user} were denied:\n{}",
        denied.join("\n")
    );
    assert!(
        outside.is_empty(),
        "the namespaced operator asked outside {ns}:\n{}",
        outside.join("\n")
    );
}

/// `kubectl kustomize` of a kustomization (in the target directory, so that the overlay is a
/// relative path: kustomize takes no absolute one) that moves `deploy/namespaced` to `ns`.
fn kustomize_into(ns: &str) -> String {
    let dir = tempfile::Builder::new()
        .prefix("kustomize-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temp dir");
    let overlay = support::root().join("deploy/namespaced");
    let relative = relative_path(dir.path(), &overlay);
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: {ns}\n\
             resources:\n  - {}\n",
            relative.display()
        ),
    )
    .expect("write kustomization");
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(dir.path())
        .output()
        .expect("kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `to` relative to the directory `from` (both absolute).
fn relative_path(from: &Path, to: &Path) -> std::path::PathBuf {
    let (from, to) = (
        from.canonicalize().expect("canonical"),
        to.canonicalize().expect("canonical"),
    );
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path = std::path::PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    for c in &to[common..] {
        path.push(c);
    }
    path
}

/// `kubectl apply -k deploy/` as the README says, on the real control plane: every object of the
/// base is there afterwards.
#[tokio::test]
async fn kubectl_apply_k_deploy_installs_the_base() {
    require_kubectl!();
    let Some(cp) = ControlPlane::shared() else {
        eprintln!("skipped: no KUBEBUILDER_ASSETS");
        return;
    };
    let kubectl = |args: &[&str]| support::kubectl_at_ok(cp.admin_kubeconfig(), args);
    let deploy = support::root().join("deploy");
    kubectl(&["apply", "-k", deploy.to_str().expect("UTF-8")]);
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/habitats.habitat.sh",
    ]);
    for object in [
        "namespace/habitat-operator",
        "clusterrole/habitat-operator",
        "clusterrolebinding/habitat-operator",
    ] {
        kubectl(&["get", object]);
    }
    for object in [
        "serviceaccount/habitat-operator",
        "role/habitat-operator-leader-election",
        "rolebinding/habitat-operator-leader-election",
        "deployment/habitat-operator",
        "service/habitat-operator-metrics",
    ] {
        kubectl(&["-n", "habitat-operator", "get", object]);
    }
    let context = kubectl(&[
        "-n",
        "habitat-operator",
        "get",
        "deployment/habitat-operator",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].securityContext}",
    ]);
    assert!(
        context.contains(r#""readOnlyRootFilesystem":true"#),
        "{context}"
    );
    // The namespaced overlay as the README has it, into the namespace that now exists.
    let namespaced = support::root().join("deploy/namespaced");
    kubectl(&[
        "apply",
        "--dry-run=server",
        "-k",
        namespaced.to_str().expect("UTF-8"),
    ]);
    // A pod of the Deployment's template passes the "restricted" Pod Security Standard of the
    // API server's PodSecurity admission.
    kubectl(&[
        "label",
        "--overwrite",
        "namespace/habitat-operator",
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    let template: Value = serde_json::from_str(&kubectl(&[
        "-n",
        "habitat-operator",
        "get",
        "deployment/habitat-operator",
        "-o",
        "jsonpath={.spec.template}",
    ]))
    .expect("the pod template");
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "habitat-operator-restricted-check", "namespace": "habitat-operator"},
        "spec": template["spec"],
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("pod.json");
    std::fs::write(&path, pod.to_string()).expect("write");
    kubectl(&[
        "create",
        "--dry-run=server",
        "-f",
        path.to_str().expect("UTF-8"),
    ]);
}

/// One (API group, resource[/subresource], verb).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Rule(String, String, String);

impl From<(&str, &str, &str)> for Rule {
    fn from((g, r, v): (&str, &str, &str)) -> Rule {
        Rule(g.into(), r.into(), v.into())
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.0.is_empty() { "core" } else { &self.0 };
        write!(f, "{} {group}/{}", self.2, self.1)
    }
}

/// The audit log's events.
fn audit(cp: &ControlPlane) -> Vec<Value> {
    std::fs::read_to_string(cp.audit_log())
        .expect("audit.log")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        // One event per request: the ResponseComplete stage (watches: ResponseStarted too).
        .filter(|e: &Value| e["stage"] == "ResponseComplete")
        .collect()
}

fn describe(e: &Value) -> String {
    format!(
        "{} {} {}/{} {}: {} {} ({})",
        e["verb"].as_str().unwrap_or_default(),
        e["requestURI"].as_str().unwrap_or_default(),
        e["objectRef"]["resource"].as_str().unwrap_or_default(),
        e["objectRef"]["subresource"].as_str().unwrap_or_default(),
        e["objectRef"]["name"].as_str().unwrap_or_default(),
        e["responseStatus"]["code"],
        e["responseStatus"]["message"].as_str().unwrap_or_default(),
        e["annotations"]["authorization.k8s.io/reason"]
            .as_str()
            .unwrap_or_default(),
    )
}

/// Requests the authorizer refused (`authorization.k8s.io/decision: forbid`), and any other 403
/// (an admission plugin's, such as OwnerReferencesPermissionEnforcement's) except the
/// NamespaceLifecycle plugin's refusal to create in a namespace being deleted, which is the
/// tests' namespaces going away, not a right the operator lacks.
fn denials(events: &[&Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            let forbid = e["annotations"]["authorization.k8s.io/decision"] == "forbid";
            let status = &e["responseStatus"];
            let terminating = status["message"]
                .as_str()
                .is_some_and(|m| m.contains("because it is being terminated"))
                || status["details"]["causes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["reason"] == "NamespaceTerminating");
            forbid || (status["code"] == 403 && !terminating)
        })
        .map(|e| describe(e))
        .collect()
}

/// The rules the requests used, with how often: a watch is `list` with `watch=true`, audited as
/// the verb `watch`; a server-side apply that created its object (201) used `create` as well as
/// `patch` (the API server authorizes both).
fn used_rules(events: &[&Value]) -> BTreeMap<Rule, usize> {
    let mut used = BTreeMap::new();
    for e in events {
        if e["annotations"]["authorization.k8s.io/decision"] != "allow" {
            continue;
        }
        let r = &e["objectRef"];
        let Some(resource) = r["resource"].as_str() else {
            continue;
        };
        let resource = match r["subresource"].as_str() {
            Some(sub) if !sub.is_empty() => format!("{resource}/{sub}"),
            _ => resource.to_string(),
        };
        let group = r["apiGroup"].as_str().unwrap_or_default().to_string();
        let verb = e["verb"].as_str().unwrap_or_default().to_string();
        let created = verb == "patch" && e["responseStatus"]["code"] == 201;
        *used
            .entry(Rule(group.clone(), resource.clone(), verb))
            .or_insert(0) += 1;
        if created {
            *used
                .entry(Rule(group, resource, "create".into()))
                .or_insert(0) += 1;
        }
    }
    used
}

/// Every (group, resource, verb) the `kind` (ClusterRole or Role) in `path` grants.
fn granted_rules(path: &Path, kind: &str) -> BTreeSet<Rule> {
    let text = std::fs::read_to_string(path).expect("manifest");
    let role: serde_yaml::Value = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .find(|d: &serde_yaml::Value| d["kind"] == kind)
        .unwrap_or_else(|| panic!("a {kind} in {}", path.display()));
    let list = |v: &serde_yaml::Value| -> Vec<String> {
        v.as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect()
    };
    let mut rules = BTreeSet::new();
    for rule in role["rules"].as_sequence().into_iter().flatten() {
        for g in list(&rule["apiGroups"]) {
            for r in list(&rule["resources"]) {
                for v in list(&rule["verbs"]) {
                    rules.insert(Rule(g.clone(), r.clone(), v));
                }
            }
        }
    }
    rules
}
