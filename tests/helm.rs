//! The Helm chart in `deploy/helm/habitat-operator`, proven by the real `helm`: the binary
//! `$HABITAT_HELM` names (`.ci/run` fetches a static helm v4 and sets it, with
//! `HABITAT_REQUIRE_HELM=1` so that a missing binary fails instead of skipping).
//!
//! - `helm lint --strict`, then `helm template` with the default values, the namespaced mode and
//!   each toggle: the objects are checked (security context, RBAC equal to `deploy/base`'s and
//!   `deploy/namespaced`'s rules, every value reaching the pod).
//! - `values.schema.json`: Helm refuses a bad value with a message naming it.
//! - The Grafana dashboard ConfigMap (chart and kustomize component) holds
//!   `dashboards/habitat-operator.json` exactly.
//! - On the real control plane: `helm install` (the CRD from the chart's `crds/`), the operator
//!   run for each pod of the chart's Deployment as the chart's ServiceAccount (there is no
//!   kubelet: the test runs the binary with the pod's arguments and environment, and the
//!   simulated nodes run the Habitat pods), `helm upgrade`, `helm rollback`, `helm uninstall`.
//!
//! `HABITAT_HELM_LOG=1 cargo test --test helm -- --nocapture` prints each helm command and what
//! it printed.

#[macro_use]
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_yaml::Value;
use support::control_plane::ControlPlane;
use support::{Ground, Proc};

fn chart() -> PathBuf {
    support::root().join("deploy/helm/habitat-operator")
}

/// Whether `HABITAT_REQUIRE_HELM` asks for helm to be there.
fn helm_required() -> bool {
    std::env::var("HABITAT_REQUIRE_HELM").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The real `helm`, with its cache, configuration and data in a temporary directory of its own
/// (a test writes nowhere else), optionally pointed at a cluster.
struct Helm {
    bin: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: Option<PathBuf>,
}

/// `Helm::find()`, or return from the test when there is no helm (panics instead when
/// `HABITAT_REQUIRE_HELM` is set).
macro_rules! require_helm {
    () => {
        match Helm::find() {
            Some(helm) => helm,
            None => return,
        }
    };
}

impl Helm {
    /// The binary `$HABITAT_HELM` names; None (after saying why) when it is unset or not a
    /// file, or a panic when `HABITAT_REQUIRE_HELM` is set.
    fn find() -> Option<Helm> {
        let why = match std::env::var_os("HABITAT_HELM").filter(|v| !v.is_empty()) {
            Some(p) if Path::new(&p).is_file() => {
                return Some(Helm {
                    bin: PathBuf::from(p),
                    home: tempfile::tempdir().expect("temp dir"),
                    kubeconfig: None,
                })
            }
            Some(p) => format!("HABITAT_HELM={} is not a file", Path::new(&p).display()),
            None => "HABITAT_HELM is not set".to_string(),
        };
        assert!(
            !helm_required(),
            "HABITAT_REQUIRE_HELM is set but {why}: point HABITAT_HELM at a helm (v4) \
             binary (.ci/run fetches one)"
        );
        eprintln!("skipped: {why} (point it at a helm binary to run the chart's tests)");
        None
    }

    /// The same helm, talking to the cluster of `kubeconfig`.
    fn at(mut self, kubeconfig: &Path) -> Helm {
        self.kubeconfig = Some(kubeconfig.to_path_buf());
        self
    }

    /// `helm ARGS`: (success, stdout, stderr).
    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let home = self.home.path();
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"));
        match &self.kubeconfig {
            Some(k) => cmd.env("KUBECONFIG", k),
            // No cluster: helm template and lint must not reach one.
            None => cmd.env("KUBECONFIG", home.join("no-cluster")),
        };
        let out = cmd.output().expect("helm runs");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        if std::env::var_os("HABITAT_HELM_LOG").is_some() {
            eprintln!(
                "$ helm {}\n{}\n{stderr}({})",
                args.join(" "),
                support::tail(&stdout, 30),
                out.status
            );
        }
        (out.status.success(), stdout, stderr)
    }

    /// `helm ARGS`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "helm {}: {err}{out}", args.join(" "));
        out
    }

    /// `overrides` (YAML) in a values file of its own.
    fn values_file(&self, overrides: &str) -> PathBuf {
        let path = self
            .home
            .path()
            .join(format!("values-{}.yaml", rand::random::<u32>()));
        std::fs::write(&path, overrides).expect("write values");
        path
    }

    /// `helm template rel CHART --namespace ops -f OVERRIDES`: (success, stdout, stderr).
    fn try_template(&self, overrides: &str) -> (bool, String, String) {
        let values = self.values_file(overrides);
        let chart = chart();
        self.run(&[
            "template",
            "rel",
            chart.to_str().expect("UTF-8"),
            "--namespace",
            "ops",
            "-f",
            values.to_str().expect("UTF-8"),
        ])
    }

    /// The objects of the chart rendered by `helm template` as release `rel` in namespace
    /// `ops`, with `overrides`.
    fn template(&self, overrides: &str) -> Vec<Value> {
        let (ok, out, err) = self.try_template(overrides);
        assert!(ok, "helm template with {overrides}: {err}");
        documents(&out)
    }
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn yaml(s: &str) -> Value {
    serde_yaml::from_str(s).expect("YAML")
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} in {:?}", kinds(objects));
    found[0]
}

fn has(objects: &[Value], kind: &str) -> bool {
    objects.iter().any(|o| o["kind"] == kind)
}

fn args(objects: &[Value]) -> Vec<String> {
    one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn helm_lint_strict_passes_with_the_defaults_and_every_toggle() {
    let helm = require_helm!();
    let chart = chart();
    helm.ok(&["lint", "--strict", chart.to_str().expect("UTF-8")]);
    let toggles = helm.values_file(
        "watchNamespace: apps\nmetrics: {serviceMonitor: {enabled: true}}\n\
         prometheusRule: {enabled: true}\ngrafanaDashboard: {enabled: true}\n",
    );
    helm.ok(&[
        "lint",
        "--strict",
        chart.to_str().expect("UTF-8"),
        "-f",
        toggles.to_str().expect("UTF-8"),
    ]);
}
#[test]
fn the_defaults_install_a_cluster_wide_operator_locked_down() {
    let helm = require_helm!();
    let objects = helm.template("{}");
    let mut k = kinds(&objects);
    k.sort();
    assert_eq!(
        k,
        [
            "ClusterRole/rel",
            "ClusterRoleBinding/rel",
            "Deployment/rel",
            "Role/rel-leader-election",
            "RoleBinding/rel-leader-election",
            "Service/rel-metrics",
            "ServiceAccount/rel",
        ]
    );
    for o in &objects {
        if !o["kind"].as_str().unwrap().starts_with("Cluster") {
            assert_eq!(o["metadata"]["namespace"], "ops", "{o:?}");
        }
    }
    let d = one(&objects, "Deployment");
    assert_eq!(d["spec"]["replicas"], 2);
    // Only the active replica is Ready: a rollout must not wait for new pods to be Ready.
    assert_eq!(
        d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        "100%"
    );
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"], "habitat-operator:0.1.0",
        "the tag defaults to appVersion"
    );
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    let a = args(&objects);
    assert!(a.contains(&"--leader-elect".to_string()));
    assert!(a.contains(&"--log-format=json".to_string()));
    assert!(!a.iter().any(|x| x.starts_with("--namespace")), "{a:?}");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    // Non-root, read-only root filesystem, no capabilities, no escalation, RuntimeDefault.
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], yaml("[ALL]"));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    for absent in ["nodeSelector", "tolerations", "affinity"] {
        assert!(pod.get(absent).is_none(), "{absent} without a value");
    }
    assert!(d["spec"]["template"]["metadata"]
        .get("annotations")
        .is_none());
    let binding = one(&objects, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["namespace"], "ops");
}

/// The chart grants exactly what `deploy/base` grants cluster-wide and `deploy/namespaced` in
/// one namespace, which `tests/rbac.rs` proves is used and enough. The leader-election Role is
/// `deploy/base`'s too.
#[test]
fn the_chart_grants_the_proven_rules_of_deploy_base_and_deploy_namespaced() {
    let helm = require_helm!();
    let rules_of = |file: &str, kind: &str, name: &str| -> Value {
        let text = std::fs::read_to_string(support::root().join(file)).expect(file);
        documents(&text)
            .into_iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("a {kind} {name} in {file}"))["rules"]
            .clone()
    };
    let leader = rules_of(
        "deploy/base/leader-election.yaml",
        "Role",
        "habitat-operator-leader-election",
    );
    for (overrides, kind, file) in [
        ("{}", "ClusterRole", "deploy/base/cluster-role.yaml"),
        (
            "watchNamespace: team",
            "Role",
            "deploy/namespaced/role.yaml",
        ),
    ] {
        let objects = helm.template(overrides);
        let find = |kind: &str, name: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("{kind}/{name} with {overrides}"))
        };
        assert_eq!(
            find(kind, "rel")["rules"],
            rules_of(file, kind, "habitat-operator"),
            "{overrides}: the rules of {file}"
        );
        assert_eq!(
            find("Role", "rel-leader-election")["rules"],
            leader,
            "{overrides}"
        );
    }
}

#[test]
fn namespaced_mode_grants_rights_only_in_the_watched_namespace() {
    let helm = require_helm!();
    let cluster = helm.template("{}");
    let objects = helm.template("watchNamespace: apps");
    assert!(!has(&objects, "ClusterRole") && !has(&objects, "ClusterRoleBinding"));
    let roles: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Role").collect();
    let role = roles
        .iter()
        .find(|r| r["metadata"]["name"] == "rel")
        .expect("Role rel");
    assert_eq!(role["metadata"]["namespace"], "apps");
    assert_eq!(role["rules"], one(&cluster, "ClusterRole")["rules"]);
    let binding = objects
        .iter()
        .find(|o| o["kind"] == "RoleBinding" && o["metadata"]["name"] == "rel")
        .expect("RoleBinding rel");
    assert_eq!(binding["metadata"]["namespace"], "apps");
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["subjects"][0]["namespace"], "ops");
    assert!(args(&objects).contains(&"--namespace=apps".to_string()));
    // The leader election Role stays in the release namespace.
    let lease = roles
        .iter()
        .find(|r| r["metadata"]["name"] == "rel-leader-election")
        .unwrap();
    assert_eq!(lease["metadata"]["namespace"], "ops");
}

#[test]
fn the_service_monitor_toggle_scrapes_the_metrics_service() {
    let helm = require_helm!();
    assert!(!has(&helm.template("{}"), "ServiceMonitor"));
    let objects = helm.template(
        "metrics: {serviceMonitor: {enabled: true, interval: 15s, labels: {release: prom}}}",
    );
    let sm = one(&objects, "ServiceMonitor");
    assert_eq!(sm["metadata"]["labels"]["release"], "prom");
    assert_eq!(sm["spec"]["endpoints"][0]["interval"], "15s");
    let svc = one(&objects, "Service");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(&svc["metadata"]["labels"][k.as_str().unwrap()], v, "{k:?}");
    }
    assert_eq!(
        sm["spec"]["endpoints"][0]["port"],
        svc["spec"]["ports"][0]["name"]
    );
    assert!(!has(
        &helm.template("metrics: {service: {enabled: false}}"),
        "Service"
    ));
}

#[test]
fn the_prometheus_rule_toggle_ships_the_rules_file() {
    let helm = require_helm!();
    assert!(!has(&helm.template("{}"), "PrometheusRule"));
    let objects = helm.template("prometheusRule: {enabled: true, labels: {release: prom}}");
    let rule = one(&objects, "PrometheusRule");
    assert_eq!(rule["metadata"]["labels"]["release"], "prom");
    let rules_file = support::root().join("deploy/prometheus/habitat-operator-rules.yml");
    let rules = std::fs::read_to_string(&rules_file).unwrap();
    assert_eq!(rule["spec"]["groups"], yaml(&rules)["groups"]);
    assert_eq!(
        std::fs::read_to_string(chart().join("files/habitat-operator-rules.yml")).unwrap(),
        rules,
        "copy deploy/prometheus/habitat-operator-rules.yml to deploy/helm/habitat-operator/files/"
    );
}

#[test]
fn every_value_reaches_the_pod() {
    let helm = require_helm!();
    let objects = helm.template(
        r#"
image: {repository: registry.example/habitat-operator, tag: "9.9.9", pullPolicy: Always}
replicas: 3
workers: 7
logLevel: debug
logFormat: text
resources: {limits: {memory: 1Gi}}
podLabels: {team: platform}
podAnnotations: {example.com/note: hi}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]}}}
metrics: {port: 9090}
podSecurityContext: {runAsUser: 1000}
"#,
    );
    let d = one(&objects, "Deployment");
    let meta = &d["spec"]["template"]["metadata"];
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(c["image"], "registry.example/habitat-operator:9.9.9");
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(
        c["resources"],
        yaml("{limits: {memory: 1Gi}, requests: {cpu: 50m, memory: 64Mi}}")
    );
    assert_eq!(meta["labels"]["team"], "platform");
    assert_eq!(meta["labels"]["app.kubernetes.io/name"], "habitat-operator");
    assert_eq!(meta["annotations"]["example.com/note"], "hi");
    assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
        "zone"
    );
    assert_eq!(pod["securityContext"]["runAsUser"], 1000);
    assert_eq!(
        pod["securityContext"]["runAsNonRoot"], true,
        "merged, not replaced"
    );
    assert_eq!(c["ports"][0]["containerPort"], 9090);
    let a = args(&objects);
    for flag in [
        "--workers=7",
        "--log-level=debug",
        "--log-format=text",
        "--metrics-addr=0.0.0.0:9090",
    ] {
        assert!(a.contains(&flag.to_string()), "{flag} in {a:?}");
    }
    assert_eq!(one(&objects, "Service")["spec"]["ports"][0]["port"], 9090);
    // The pod labels never leak into the selector (it is immutable).
    assert!(d["spec"]["selector"]["matchLabels"].get("team").is_none());
}

fn leaf_paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Mapping(m) if !m.is_empty() => {
            for (k, v) in m {
                leaf_paths(v, &format!("{prefix}.{}", k.as_str().unwrap()), out);
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

#[test]
fn every_value_is_used_by_a_template_and_every_toggle_guards_its_object() {
    let values = yaml(&std::fs::read_to_string(chart().join("values.yaml")).unwrap());
    let mut paths = BTreeSet::new();
    leaf_paths(&values, ".Values", &mut paths);
    let all: String = templates().into_iter().map(|(_, s)| s).collect();
    let unused: Vec<&String> = paths
        .iter()
        .filter(|p| {
            // A value is used when a template names it or a map above it (toYaml).
            let mut q = p.as_str();
            loop {
                let used = all
                    .match_indices(q)
                    .any(|(i, _)| !all[i + q.len()..].starts_with(|c: char| c.is_alphanumeric()));
                if used {
                    return false;
                }
                match q.rfind('.') {
                    Some(i) if i > ".Values".len() => q = &q[..i],
                    _ => return true,
                }
            }
        })
        .collect();
    assert!(unused.is_empty(), "values no template uses: {unused:?}");
    // A toggle wraps its whole template.
    for (file, toggle) in [
        ("service.yaml", ".Values.metrics.service.enabled"),
        (
            "servicemonitor.yaml",
            ".Values.metrics.serviceMonitor.enabled",
        ),
        ("prometheusrule.yaml", ".Values.prometheusRule.enabled"),
        ("grafana-dashboard.yaml", ".Values.grafanaDashboard.enabled"),
    ] {
        let src = std::fs::read_to_string(chart().join("templates").join(file)).unwrap();
        let body = src
            .lines()
            .filter(|l| !l.trim().is_empty())
            .skip_while(|l| !l.contains(&format!("{{{{- if {toggle} }}}}")))
            .collect::<Vec<_>>();
        assert!(!body.is_empty(), "{file} is not guarded by {toggle}");
        assert_eq!(body.last().unwrap().trim(), "{{- end }}", "{file}");
        assert!(
            !src.split(&format!("{{{{- if {toggle} }}}}"))
                .next()
                .unwrap()
                .contains("kind:"),
            "{file} has an object outside {toggle}"
        );
    }
}

/// The template files' names and sources.
fn templates() -> Vec<(String, String)> {
    let mut files: Vec<_> = std::fs::read_dir(chart().join("templates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect()
}

/// `values.schema.json`: each bad value is refused by `helm template` (and so by install and
/// upgrade) with a message that names it; the good values next to them pass.
#[test]
fn helm_refuses_a_bad_value_naming_it() {
    let helm = require_helm!();
    for (overrides, named) in [
        ("replicas: two", ["/replicas", "want integer"]),
        ("replicas: -1", ["/replicas", "minimum"]),
        ("logLevel: verbose", ["/logLevel", "'verbose'"]),
        ("logLevel: 'habitat_operator=loud'", ["/logLevel", "loud"]),
        ("logFormat: yaml", ["/logFormat", "one of 'text', 'json'"]),
        ("watchNamespace: Team_A", ["/watchNamespace", "'Team_A'"]),
        ("watchNamespace: team.a", ["/watchNamespace", "'team.a'"]),
        ("workers: 0", ["/workers", "minimum"]),
        ("metrics: {port: 70000}", ["/metrics/port", "maximum"]),
        ("replica: 3", ["replica", "additional properties"]),
        (
            "image: {pullPolicy: Sometimes}",
            ["/image/pullPolicy", "one of 'Always'"],
        ),
        (
            "grafanaDashboard: {enabled: 'yes'}",
            ["/grafanaDashboard/enabled", "boolean"],
        ),
    ] {
        let (ok, out, err) = helm.try_template(overrides);
        assert!(
            !ok,
            "helm accepted {overrides}:\n{}",
            support::tail(&out, 5)
        );
        for word in named {
            assert!(
                err.contains(word),
                "helm's refusal of {overrides} does not say {word:?}: {err}"
            );
        }
    }
    for good in [
        "logLevel: debug",
        "logLevel: 'habitat_operator=debug,kube=info'",
        "logLevel: 'warn,habitat_operator::runtime=trace'",
        "watchNamespace: team-a",
        "replicas: 1",
        "strategy: {type: Recreate, rollingUpdate: null}",
    ] {
        let (ok, _, err) = helm.try_template(good);
        assert!(ok, "helm refused {good}: {err}");
    }
}

const DASHBOARD: &str = "dashboards/habitat-operator.json";

/// The chart's and the kustomize component's copies of the dashboard are the dashboard.
#[test]
fn the_dashboard_copies_are_the_dashboard() {
    let dashboard = std::fs::read_to_string(support::root().join(DASHBOARD)).expect(DASHBOARD);
    for copy in [
        "deploy/helm/habitat-operator/files/habitat-operator.json",
        "deploy/components/grafana-dashboard/habitat-operator.json",
    ] {
        assert!(
            std::fs::read_to_string(support::root().join(copy)).expect(copy) == dashboard,
            "{copy} differs from {DASHBOARD}: cp {DASHBOARD} {copy}"
        );
    }
}

/// The dashboard ConfigMap for Grafana's sidecar: off by default; on, it holds the dashboard
/// exactly, under the label the sidecar looks for (configurable).
#[test]
fn the_grafana_dashboard_toggle_ships_the_dashboard_for_the_sidecar() {
    let helm = require_helm!();
    assert!(!has(&helm.template("{}"), "ConfigMap"));
    let dashboard = std::fs::read_to_string(support::root().join(DASHBOARD)).expect(DASHBOARD);
    let objects = helm.template("grafanaDashboard: {enabled: true}");
    let cm = one(&objects, "ConfigMap");
    assert_eq!(cm["metadata"]["namespace"], "ops");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        cm["data"]["habitat-operator.json"].as_str(),
        Some(dashboard.as_str())
    );
    let objects = helm.template(
        "grafanaDashboard: {enabled: true, label: team_dashboards, labelValue: habitat, \
         annotations: {grafana_folder: Habitat}}",
    );
    let cm = one(&objects, "ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["team_dashboards"], "habitat");
    assert!(cm["metadata"]["labels"].get("grafana_dashboard").is_none());
    assert_eq!(cm["metadata"]["annotations"]["grafana_folder"], "Habitat");
}

/// The kustomize component adds the same ConfigMap to `deploy/` (and follows an overlay's
/// namespace).
#[test]
fn the_grafana_dashboard_component_adds_the_configmap_to_deploy() {
    require_kubectl!();
    let dashboard = std::fs::read_to_string(support::root().join(DASHBOARD)).expect(DASHBOARD);
    for (namespace, expected) in [("", "habitat-operator"), ("monitoring", "monitoring")] {
        let dir = tempfile::Builder::new()
            .prefix("kustomize-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("temp dir");
        let rel = |p: &str| relative_path(dir.path(), &support::root().join(p));
        let ns_line = if namespace.is_empty() {
            String::new()
        } else {
            format!("namespace: {namespace}\n")
        };
        std::fs::write(
            dir.path().join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n{ns_line}\
                 resources:\n  - {}\ncomponents:\n  - {}\n",
                rel("deploy").display(),
                rel("deploy/components/grafana-dashboard").display()
            ),
        )
        .expect("write kustomization");
        let out = Command::new("kubectl")
            .arg("kustomize")
            .arg(dir.path())
            .output()
            .expect("kubectl kustomize");
        assert!(
            out.status.success(),
            "kubectl kustomize: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let objects = documents(&String::from_utf8_lossy(&out.stdout));
        let cm = one(&objects, "ConfigMap");
        assert_eq!(cm["metadata"]["name"], "habitat-operator-dashboard");
        assert_eq!(cm["metadata"]["namespace"], expected);
        assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
        assert_eq!(
            cm["data"]["habitat-operator.json"].as_str(),
            Some(dashboard.as_str())
        );
    }
}

/// `to` relative to the directory `from` (kustomize takes no absolute path).
fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let (from, to) = (
        from.canonicalize().expect("canonical"),
        to.canonicalize().expect("canonical"),
    );
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path = PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    for c in &to[common..] {
        path.push(c);
    }
    path
}

/// What `helm template` renders, cluster-wide and namespaced with the dashboard, is accepted by
/// the real API server (server-side dry run: schema, RBAC objects, namespaces).
#[test]
fn the_rendered_chart_is_accepted_by_the_real_api_server() {
    let helm = require_helm!();
    require_kubectl!();
    let Some(cp) = ControlPlane::shared() else {
        eprintln!("skipped: no KUBEBUILDER_ASSETS");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let namespaces = dir.path().join("namespaces.yaml");
    std::fs::write(
        &namespaces,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ops}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {name: apps}\n",
    )
    .expect("write");
    support::kubectl_at_ok(
        cp.admin_kubeconfig(),
        &["apply", "-f", namespaces.to_str().expect("UTF-8")],
    );
    for overrides in [
        "{}",
        "{watchNamespace: apps, grafanaDashboard: {enabled: true}}",
    ] {
        let (ok, out, err) = helm.try_template(overrides);
        assert!(ok, "helm template: {err}");
        let path = dir.path().join("rendered.yaml");
        std::fs::write(&path, out).expect("write");
        support::kubectl_at_ok(
            cp.admin_kubeconfig(),
            &[
                "apply",
                "--dry-run=server",
                "-f",
                path.to_str().expect("UTF-8"),
            ],
        );
    }
}

/// The operator processes standing in for the running pods of the chart's Deployment (there is
/// no kubelet): one per pod, with the pod's container arguments and environment, authenticated
/// by a token of the pod's ServiceAccount. The one difference: `--metrics-addr` moves from
/// `0.0.0.0:PORT` to a free loopback port, since every "pod" shares this machine.
struct DeploymentPods {
    running: Vec<PodProcess>,
}

struct PodProcess {
    proc: Proc,
    pod: String,
    metrics: String,
    log: PathBuf,
}

impl DeploymentPods {
    /// Waits until the Deployment `release` in `ns` has exactly its replicas of pods, all of its
    /// current template, then runs the operator for each.
    async fn start(
        cp: &ControlPlane,
        admin: &kube::Client,
        ns: &str,
        release: &str,
        dir: &Path,
    ) -> DeploymentPods {
        use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
        use k8s_openapi::api::core::v1::Pod;
        let deployments = kube::Api::<Deployment>::namespaced(admin.clone(), ns);
        let pods_api = kube::Api::<Pod>::namespaced(admin.clone(), ns);
        let selector = format!("app.kubernetes.io/instance={release}");
        let began = std::time::Instant::now();
        let pods: Vec<Pod> = loop {
            if let (Ok(d), Ok(list)) = (
                deployments.get(release).await,
                pods_api
                    .list(&kube::api::ListParams::default().labels(&selector))
                    .await,
            ) {
                let spec = d.spec.unwrap_or_default();
                let want = spec.replicas.unwrap_or(1) as usize;
                let template = spec.template.spec.unwrap_or_default().containers;
                let live: Vec<Pod> = list
                    .items
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .collect();
                let current = live.iter().all(|p| {
                    let c = p.spec.as_ref().map(|s| &s.containers[0]);
                    c.map(|c| (&c.args, &c.resources))
                        == template.first().map(|t| (&t.args, &t.resources))
                });
                if live.len() == want && current {
                    break live;
                }
            }
            if began.elapsed() > Duration::from_secs(60) {
                // Why the ReplicaSet controller made no pod (e.g. PodSecurity's refusal).
                let replica_sets = kube::Api::<ReplicaSet>::namespaced(admin.clone(), ns)
                    .list(&kube::api::ListParams::default().labels(&selector))
                    .await
                    .map(|l| {
                        l.items
                            .iter()
                            .flat_map(|rs| rs.status.iter().flat_map(|s| s.conditions.iter()))
                            .flatten()
                            .map(|c| format!("{}: {}", c.type_, c.message.as_deref().unwrap_or("")))
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default();
                panic!(
                    "the Deployment {ns}/{release} has no pods of its current template; its \
                     ReplicaSets' conditions: {replica_sets:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let mut running = Vec::new();
        for pod in pods {
            let name = pod.metadata.name.clone().expect("a pod's name");
            let spec = pod.spec.expect("a pod's spec");
            let account = spec
                .service_account_name
                .clone()
                .expect("the pod's ServiceAccount");
            let token = support::control_plane::service_account_token(admin, ns, &account)
                .await
                .expect("a token of the chart's ServiceAccount");
            let kubeconfig = dir.join(format!("{name}.kubeconfig"));
            std::fs::write(
                &kubeconfig,
                support::control_plane::token_kubeconfig(cp.url(), &cp.ca(), &account, &token),
            )
            .expect("write kubeconfig");
            let container = &spec.containers[0];
            let metrics = format!("127.0.0.1:{}", support::free_port());
            let args: Vec<String> = container
                .args
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|a| {
                    if a.starts_with("--metrics-addr=") {
                        format!("--metrics-addr={metrics}")
                    } else {
                        a
                    }
                })
                .collect();
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_habitat-operator"));
            cmd.args(&args).arg("--kubeconfig").arg(&kubeconfig);
            for var in container.env.clone().unwrap_or_default() {
                let field = var
                    .value_from
                    .as_ref()
                    .and_then(|v| v.field_ref.as_ref())
                    .map(|f| f.field_path.as_str());
                let value = match (var.value, field) {
                    (Some(v), _) => v,
                    (None, Some("metadata.name")) => name.clone(),
                    (None, Some("metadata.namespace")) => ns.to_string(),
                    (None, other) => panic!("the test cannot give {} from {other:?}", var.name),
                };
                cmd.env(&var.name, value);
            }
            let log = dir.join(format!("{name}.log"));
            let proc = Proc::spawn_logged("operator", &mut cmd, &log);
            running.push(PodProcess {
                proc,
                pod: name,
                metrics,
                log,
            });
        }
        DeploymentPods { running }
    }

    /// Waits until exactly one process answers `/readyz` with 200 and holds the Lease in `ns`;
    /// returns it.
    async fn leader(&mut self, admin: &kube::Client, ns: &str) -> &PodProcess {
        use k8s_openapi::api::coordination::v1::Lease;
        let leases = kube::Api::<Lease>::namespaced(admin.clone(), ns);
        let mut found = None;
        let began = std::time::Instant::now();
        while found.is_none() {
            for p in &mut self.running {
                p.proc.assert_running("electing a leader", &p.log);
            }
            let ready: Vec<usize> = (0..self.running.len())
                .filter(|&i| {
                    ureq::get(&format!("http://{}/readyz", self.running[i].metrics))
                        .call()
                        .is_ok()
                })
                .collect();
            let holder = leases
                .get_opt("habitat-operator")
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity);
            if let [i] = ready[..] {
                if holder.as_deref() == Some(self.running[i].pod.as_str()) {
                    found = Some(i);
                }
            }
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "no single leader among {:?}: ready {ready:?}, Lease held by {holder:?}",
                self.running.iter().map(|p| &p.pod).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        &self.running[found.expect("found")]
    }

    /// SIGTERM to each (as the kubelet stops a pod: the leader hands the Lease over), then
    /// waits for them to exit (killed on drop after 10 s).
    async fn stop(self) {
        for p in &self.running {
            let _ = Command::new("kill")
                .args(["-TERM", &p.proc.0.id().to_string()])
                .status();
        }
        for mut p in self.running {
            let began = std::time::Instant::now();
            while matches!(p.proc.0.try_wait(), Ok(None))
                && began.elapsed() < Duration::from_secs(10)
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The chart's life on the real control plane, as a user lives it: `helm install` into a fresh
/// namespace (the CRD from the chart's `crds/`), the operator of the chart's Deployment (run as
/// its pods would be) brings a Habitat to Ready; `helm upgrade` with a debug log level, three
/// replicas and other resources rolls the Deployment and the new pods' operator keeps serving;
/// `helm rollback` brings revision 1's template back; `helm uninstall` removes what the chart
/// made and leaves the CRD, the Habitat and its PersistentVolumeClaim (Helm never deletes
/// `crds/`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_rolls_back_and_uninstalls_the_operator_on_the_real_control_plane() {
    let helm = require_helm!();
    require_kubectl!();
    let Some(cp) = ControlPlane::shared() else {
        eprintln!("skipped: no KUBEBUILDER_ASSETS");
        return;
    };
    let helm = helm.at(cp.admin_kubeconfig());
    let admin = support::client_for(cp.admin_kubeconfig()).await;
    let kubectl = |args: &[&str]| support::kubectl_at(cp.admin_kubeconfig(), args);
    let suffix = rand::random::<u32>() % 100_000;
    let release = format!("hab-{suffix}");
    let ns = format!("helm-ops-{suffix}");
    let chart = chart();
    let chart = chart.to_str().expect("UTF-8");
    let dir = tempfile::tempdir().expect("temp dir");
    let ns_args = ["--namespace", ns.as_str()];

    // No other test of this binary installs the CRD: it comes from the chart.
    assert!(
        !kubectl(&["get", "crd", "habitats.habitat.sh"]).0,
        "the CRD exists before helm install"
    );
    // The release's namespace enforces the "restricted" Pod Security Standard: the
    // ReplicaSet controller creates no pod of a template that breaks it, and the wait for the
    // Deployment's pods below would time out.
    let namespace = dir.path().join("namespace.yaml");
    std::fs::write(
        &namespace,
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    \
             pod-security.kubernetes.io/enforce: restricted\n"
        ),
    )
    .expect("write");
    support::kubectl_at_ok(
        cp.admin_kubeconfig(),
        &["apply", "-f", namespace.to_str().expect("UTF-8")],
    );
    let out = helm.ok(&[
        &["install", &release, chart, "--create-namespace"][..],
        &ns_args,
    ]
    .concat());
    assert!(out.contains("STATUS: deployed"), "{out}");
    support::kubectl_at_ok(
        cp.admin_kubeconfig(),
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/habitats.habitat.sh",
        ],
    );
    for object in [
        format!("clusterrole/{release}"),
        format!("clusterrolebinding/{release}"),
    ] {
        support::kubectl_at_ok(cp.admin_kubeconfig(), &["get", &object]);
    }
    for object in [
        format!("serviceaccount/{release}"),
        format!("deployment/{release}"),
        format!("service/{release}-metrics"),
        format!("role/{release}-leader-election"),
        format!("rolebinding/{release}-leader-election"),
    ] {
        support::kubectl_at_ok(cp.admin_kubeconfig(), &["-n", &ns, "get", &object]);
    }

    // The Habitats' namespace, with the simulated nodes (the CRD is already there: the Env's
    // own `kubectl apply` of crds/habitat.yaml changes nothing, the two being equal).
    let env = env_on!(Ground::Real, "helm-apps", false);
    let mut pods = DeploymentPods::start(cp, &admin, &ns, &release, dir.path()).await;
    assert_eq!(pods.running.len(), 2, "the chart's default replicas");
    let leader = pods.leader(&admin, &ns).await.pod.clone();
    eprintln!("installed: {release} in {ns}, leader {leader}");
    env.apply_example("persisted");
    let ready = support::timeout(&env);
    env.wait_phase("example-persisted", "Ready", ready).await;

    // Upgrade: a debug log level, three replicas with leader election, other resources.
    let values = helm.values_file(
        "logLevel: debug\nreplicas: 3\nresources: {requests: {cpu: 100m, memory: 96Mi}, \
         limits: {memory: 384Mi}}\n",
    );
    let out = helm.ok(&[
        &[
            "upgrade",
            &release,
            chart,
            "-f",
            values.to_str().expect("UTF-8"),
        ][..],
        &ns_args,
    ]
    .concat());
    assert!(out.contains("REVISION: 2"), "{out}");
    let template = |field: &str| {
        support::kubectl_at_ok(
            cp.admin_kubeconfig(),
            &[
                "-n",
                &ns,
                "get",
                &format!("deployment/{release}"),
                "-o",
                &format!("jsonpath={{{field}}}"),
            ],
        )
    };
    assert!(template(".spec.template.spec.containers[0].args").contains("--log-level=debug"));
    assert_eq!(template(".spec.replicas"), "3");
    assert_eq!(
        template(".spec.template.spec.containers[0].resources.limits.memory"),
        "384Mi"
    );
    // Rolled: a second ReplicaSet, of the new template.
    let replica_sets = || {
        support::kubectl_at_ok(
            cp.admin_kubeconfig(),
            &[
                "-n",
                &ns,
                "get",
                "replicasets",
                "-l",
                &format!("app.kubernetes.io/instance={release}"),
                "-o",
                "name",
            ],
        )
        .lines()
        .count()
    };
    support::wait_for(Duration::from_secs(30), "a second ReplicaSet", || async {
        replica_sets() == 2
    })
    .await;
    // The old pods are gone (maxUnavailable 100%): their operators stop, the new pods' start.
    pods.stop().await;
    let mut pods = DeploymentPods::start(cp, &admin, &ns, &release, dir.path()).await;
    assert_eq!(pods.running.len(), 3, "replicas after the upgrade");
    let leader = pods.leader(&admin, &ns).await;
    let log = std::fs::read_to_string(&leader.log).unwrap_or_default();
    assert!(
        log.contains(r#""level":"DEBUG""#),
        "the upgraded operator does not log at debug:\n{}",
        support::tail(&log, 10)
    );
    env.patch("example-persisted", r#"{"spec":{"count":2}}"#);
    env.wait_phase("example-persisted", "Ready", ready).await;
    assert_eq!(env.pods("example-persisted").await.len(), 2);

    // Rollback to revision 1: the first template again, as revision 3.
    let out = helm.ok(&[&["rollback", &release, "1"][..], &ns_args].concat());
    assert!(out.contains("Rollback was a success"), "{out}");
    let history = helm.ok(&[&["history", &release, "-o", "json"][..], &ns_args].concat());
    let history: serde_json::Value = serde_json::from_str(&history).expect("helm history JSON");
    let revisions: Vec<(i64, String)> = history
        .as_array()
        .expect("a list of revisions")
        .iter()
        .map(|r| {
            (
                r["revision"].as_i64().unwrap_or_default(),
                r["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        revisions,
        [
            (1, "superseded".to_string()),
            (2, "superseded".to_string()),
            (3, "deployed".to_string())
        ]
    );
    assert!(template(".spec.template.spec.containers[0].args").contains("--log-level=info"));
    assert_eq!(template(".spec.replicas"), "2");
    pods.stop().await;
    let mut pods = DeploymentPods::start(cp, &admin, &ns, &release, dir.path()).await;
    assert_eq!(pods.running.len(), 2, "replicas after the rollback");
    pods.leader(&admin, &ns).await;
    env.patch("example-persisted", r#"{"spec":{"count":1}}"#);
    env.wait_phase("example-persisted", "Ready", ready).await;

    // Every request of the operators came as the chart's ServiceAccount, and its RBAC refused
    // none (the audit log; denials after the uninstall below would be the binding going first).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let user = format!("system:serviceaccount:{ns}:{release}");
    let requests: Vec<serde_json::Value> = std::fs::read_to_string(cp.audit_log())
        .expect("audit.log")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete" && e["user"]["username"] == user.as_str())
        .collect();
    let denied: Vec<String> = requests
        .iter()
        .filter(|e| {
            e["annotations"]["authorization.k8s.io/decision"] == "forbid"
                || e["responseStatus"]["code"] == 403
        })
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect();
    eprintln!(
        "audit: {} requests by {user}, {} denied",
        requests.len(),
        denied.len()
    );
    assert!(
        requests.len() > 20,
        "too few requests by {user}: {}",
        requests.len()
    );
    assert!(
        denied.is_empty(),
        "the chart's RBAC refused {user}:\n{}",
        denied.join("\n")
    );

    // Uninstall: the chart's objects go; the CRD, the Habitat and its data stay.
    let out = helm.ok(&[&["uninstall", &release][..], &ns_args].concat());
    assert!(out.contains("uninstalled"), "{out}");
    pods.stop().await;
    for object in [
        format!("clusterrole/{release}"),
        format!("clusterrolebinding/{release}"),
    ] {
        let (found, out, _) = kubectl(&["get", &object, "--ignore-not-found", "-o", "name"]);
        assert!(
            found && out.trim().is_empty(),
            "{object} outlived helm uninstall"
        );
    }
    for object in [
        format!("deployment/{release}"),
        format!("serviceaccount/{release}"),
        format!("service/{release}-metrics"),
        format!("role/{release}-leader-election"),
    ] {
        let (found, out, _) = kubectl(&[
            "-n",
            &ns,
            "get",
            &object,
            "--ignore-not-found",
            "-o",
            "name",
        ]);
        assert!(
            found && out.trim().is_empty(),
            "{object} outlived helm uninstall"
        );
    }
    support::kubectl_at_ok(
        cp.admin_kubeconfig(),
        &["get", "crd", "habitats.habitat.sh"],
    );
    env.kubectl_ok(&["get", "habitat", "example-persisted"]);
    let claims = env.kubectl_ok(&["get", "pvc", "-o", "name"]);
    assert!(
        claims.contains("persistentvolumeclaim/data-example-persisted-0"),
        "the Habitat's data did not outlive helm uninstall: {claims}"
    );
    let (listed, out, _) = helm.run(&[&["list", "-q"][..], &ns_args].concat());
    assert!(
        listed && out.trim().is_empty(),
        "helm list after uninstall: {out}"
    );
    let _ = kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}
