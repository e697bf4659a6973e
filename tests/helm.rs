//! The Helm chart in `deploy/helm/habitat-operator`, tested without Helm: no `helm` binary can
//! be installed here (no Debian package, no Go toolchain, no faithful Go-template renderer in
//! the registries). The templates are rendered by [`render`], a strict renderer of the small
//! Go-template subset the chart uses (Helm's semantics for `if`/`else`/`end`, `{{-`/`-}}`,
//! `.Values`/`.Release`/`.Chart`, `.Files.Get`, `toYaml`, `nindent`, `indent`, `default`,
//! `quote`); any other construct, or a `.Values` path missing from `values.yaml`, fails the
//! test. Then the rendered objects are checked for each set of values, and each value in
//! `values.yaml` must be referenced by a template. `HABITAT_HELM_DUMP=1 cargo test --test helm
//! -- --nocapture --test-threads 1` prints what was rendered.

#[macro_use]
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};
use support::control_plane::ControlPlane;

fn chart() -> PathBuf {
    support::root().join("deploy/helm/habitat-operator")
}

/// A strict renderer of the Go-template subset of the chart.
mod render {
    use super::*;

    #[derive(Debug)]
    enum Node {
        Text(String),
        Print(String),
        If(String, Vec<Node>, Vec<Node>),
    }

    /// Splits `src` into text and actions, applying `{{-` and `-}}`; comments vanish.
    fn lex(src: &str) -> Vec<(bool, String)> {
        let mut out: Vec<(bool, String)> = Vec::new();
        let mut rest = src;
        let mut trim_next = false;
        while let Some(start) = rest.find("{{") {
            let mut text = rest[..start].to_string();
            if trim_next {
                text = text.trim_start().to_string();
            }
            let after = &rest[start + 2..];
            let end = after.find("}}").expect("unclosed {{");
            let mut action = &after[..end];
            if let Some(a) = action.strip_prefix("- ") {
                text = text.trim_end().to_string();
                action = a;
            }
            trim_next = false;
            if let Some(a) = action.strip_suffix(" -") {
                trim_next = true;
                action = a;
            }
            out.push((false, text));
            let action = action.trim();
            if !(action.starts_with("/*") && action.ends_with("*/")) {
                out.push((true, action.to_string()));
            }
            rest = &after[end + 2..];
        }
        let mut text = rest.to_string();
        if trim_next {
            text = text.trim_start().to_string();
        }
        out.push((false, text));
        // Trimming applies across a vanished comment too, as in Go.
        out
    }

    fn parse(
        tokens: &mut std::vec::IntoIter<(bool, String)>,
        until: &[&str],
    ) -> (Vec<Node>, String) {
        let mut nodes = Vec::new();
        while let Some((is_action, s)) = tokens.next() {
            if !is_action {
                nodes.push(Node::Text(s));
                continue;
            }
            let word = s.split_whitespace().next().unwrap_or("");
            match word {
                "if" => {
                    let cond = s["if".len()..].trim().to_string();
                    let (then, ended) = parse(tokens, &["else", "end"]);
                    let otherwise = if ended == "else" {
                        parse(tokens, &["end"]).0
                    } else {
                        Vec::new()
                    };
                    nodes.push(Node::If(cond, then, otherwise));
                }
                "else" | "end" if until.contains(&s.as_str()) => return (nodes, s),
                "range" | "with" | "define" | "template" | "include" | "block" | "else" | "end"
                | "tpl" | "required" | "lookup" => {
                    panic!("the chart uses {{{{ {s} }}}}, which tests/helm.rs cannot render")
                }
                _ if s.starts_with('$') || s.contains(":=") => {
                    panic!("variables are not supported: {{{{ {s} }}}}")
                }
                _ => nodes.push(Node::Print(s)),
            }
        }
        assert!(until.is_empty(), "missing {{{{ end }}}}");
        (nodes, String::new())
    }

    fn words(pipeline: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut chars = pipeline.chars().peekable();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() {
                chars.next();
            } else if c == '"' {
                chars.next();
                let mut s = String::from('"');
                for c in chars.by_ref() {
                    if c == '"' {
                        break;
                    }
                    s.push(c);
                }
                out.push(s);
            } else {
                let mut s = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() {
                        break;
                    }
                    s.push(c);
                    chars.next();
                }
                out.push(s);
            }
        }
        out
    }

    pub struct Ctx<'a> {
        pub root: Value,
        pub chart_dir: &'a Path,
    }

    impl Ctx<'_> {
        fn field(&self, path: &str) -> Value {
            let mut v = &self.root;
            let mut walked = String::new();
            for key in path.trim_start_matches('.').split('.') {
                walked.push('.');
                walked.push_str(key);
                v = match v.get(key) {
                    Some(v) => v,
                    None => panic!("{walked} is not defined (add it to values.yaml)"),
                };
            }
            v.clone()
        }

        fn arg(&self, word: &str) -> Value {
            if let Some(s) = word.strip_prefix('"') {
                Value::String(s.to_string())
            } else if word.starts_with('.') {
                self.field(word)
            } else if let Ok(n) = word.parse::<i64>() {
                Value::Number(n.into())
            } else {
                panic!("unknown argument {word}")
            }
        }

        fn eval(&self, pipeline: &str) -> Value {
            let w = words(pipeline);
            let mut piped: Option<Value> = None;
            for cmd in w.split(|x| x == "|") {
                let (head, rest) = cmd.split_first().expect("empty command");
                let value = if head == ".Files.Get" {
                    let name = self.arg(&rest[0]);
                    let path = self.chart_dir.join(name.as_str().unwrap());
                    Value::String(std::fs::read_to_string(&path).expect("chart file"))
                } else if head.starts_with('.') {
                    assert!(rest.is_empty() && piped.is_none(), "{pipeline}");
                    self.field(head)
                } else {
                    let mut args: Vec<Value> = rest.iter().map(|a| self.arg(a)).collect();
                    args.extend(piped.take());
                    call(head, &args)
                };
                piped = Some(value);
            }
            piped.expect("empty pipeline")
        }

        fn run(&self, nodes: &[Node], out: &mut String) {
            for n in nodes {
                match n {
                    Node::Text(t) => out.push_str(t),
                    Node::Print(p) => out.push_str(&print(&self.eval(p), p)),
                    Node::If(c, then, otherwise) => {
                        if truthy(&self.eval(c)) {
                            self.run(then, out)
                        } else {
                            self.run(otherwise, out)
                        }
                    }
                }
            }
        }
    }

    fn truthy(v: &Value) -> bool {
        match v {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) => !s.is_empty(),
            Value::Sequence(s) => !s.is_empty(),
            Value::Mapping(m) => !m.is_empty(),
            Value::Tagged(_) => true,
        }
    }

    fn print(v: &Value, what: &str) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => n.to_string(),
            other => panic!("{{{{ {what} }}}} prints {other:?} (use toYaml)"),
        }
    }

    fn text(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            other => print(other, "an argument"),
        }
    }

    fn indent(n: &Value, s: &str) -> String {
        let pad = " ".repeat(n.as_u64().expect("indent width") as usize);
        format!("{pad}{}", s.replace('\n', &format!("\n{pad}")))
    }

    fn call(name: &str, args: &[Value]) -> Value {
        let s = match (name, args) {
            ("toYaml", [v]) => serde_yaml::to_string(v)
                .unwrap()
                .trim_end_matches('\n')
                .to_string(),
            ("nindent", [n, s]) => format!("\n{}", indent(n, &text(s))),
            ("indent", [n, s]) => indent(n, &text(s)),
            ("quote", [s]) => serde_json::to_string(&text(s)).unwrap(),
            ("default", [d, v]) => return if truthy(v) { v.clone() } else { d.clone() },
            _ => panic!("{name} with {} arguments is not supported", args.len()),
        };
        Value::String(s)
    }

    /// Renders one template.
    pub fn template(ctx: &Ctx, src: &str) -> String {
        let mut tokens = lex(src).into_iter();
        let (nodes, _) = parse(&mut tokens, &[]);
        let mut out = String::new();
        ctx.run(&nodes, &mut out);
        out
    }
}

/// `b` merged into `a` as Helm merges user values into the chart's: maps key by key, anything
/// else replaced.
fn merge(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Mapping(a), Value::Mapping(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(old) => merge(old, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (a, b) => *a = b.clone(),
    }
}

fn yaml(s: &str) -> Value {
    serde_yaml::from_str(s).expect("YAML")
}

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

/// The objects of the chart rendered as release `rel` in namespace `ops`, with `overrides`.
fn render_with(overrides: &str) -> Vec<Value> {
    let mut values = yaml(&std::fs::read_to_string(chart().join("values.yaml")).unwrap());
    merge(&mut values, &yaml(overrides));
    let chart_yaml = yaml(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap());
    let mut chart_obj = Mapping::new();
    for (k, key) in [
        ("name", "Name"),
        ("version", "Version"),
        ("appVersion", "AppVersion"),
    ] {
        chart_obj.insert(key.into(), chart_yaml[k].clone());
    }
    let root = yaml(&format!(
        "Release: {{Name: rel, Namespace: ops, Service: Helm}}\nValues: {}\nChart: {}",
        serde_json::to_string(&values).unwrap(),
        serde_json::to_string(&chart_obj).unwrap()
    ));
    let dir = chart();
    let ctx = render::Ctx {
        root,
        chart_dir: &dir,
    };
    let mut objects = Vec::new();
    for (name, src) in templates() {
        let out = render::template(&ctx, &src);
        if std::env::var_os("HABITAT_HELM_DUMP").is_some() {
            eprintln!("# Source: {name} ({overrides})\n{out}\n---");
        }
        for doc in serde_yaml::Deserializer::from_str(&out) {
            let v = Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{name} renders invalid YAML: {e}\n{out}"));
            if !v.is_null() {
                objects.push(v);
            }
        }
    }
    objects
}

use serde::Deserialize;

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
fn the_defaults_install_a_cluster_wide_operator_locked_down() {
    let objects = render_with("{}");
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

/// The chart grants exactly what `deploy/base` grants, which `tests/rbac.rs` proves is used and
/// enough (the chart's copy had kept rules the operator never uses).
#[test]
fn the_chart_grants_the_proven_rules_of_deploy_base() {
    let base: Vec<Value> = serde_yaml::Deserializer::from_str(
        &std::fs::read_to_string(support::root().join("deploy/base/cluster-role.yaml"))
            .expect("deploy/base/cluster-role.yaml"),
    )
    .map(|d| Value::deserialize(d).expect("YAML"))
    .collect();
    let base_role = base
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole in deploy/base");
    for overrides in ["{}", "watchNamespace: team"] {
        let objects = render_with(overrides);
        let role = objects
            .iter()
            .find(|o| {
                (o["kind"] == "ClusterRole" || o["kind"] == "Role")
                    && o["metadata"]["name"] == "rel"
            })
            .expect("the operator's role");
        assert_eq!(role["rules"], base_role["rules"], "{overrides}");
    }
}

#[test]
fn namespaced_mode_grants_rights_only_in_the_watched_namespace() {
    let cluster = render_with("{}");
    let objects = render_with("watchNamespace: apps");
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
    assert!(!has(&render_with("{}"), "ServiceMonitor"));
    let objects = render_with(
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
        &render_with("metrics: {service: {enabled: false}}"),
        "Service"
    ));
}

#[test]
fn the_prometheus_rule_toggle_ships_the_rules_file() {
    assert!(!has(&render_with("{}"), "PrometheusRule"));
    let objects = render_with("prometheusRule: {enabled: true, labels: {release: prom}}");
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
    let objects = render_with(
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

/// The rendered chart, cluster-wide and namespaced, is accepted by the real API server
/// (server-side dry run: schema, RBAC objects, namespaces).
#[test]
fn the_rendered_chart_is_accepted_by_the_real_api_server() {
    require_kubectl!();
    let Some(cp) = ControlPlane::shared() else {
        return;
    };
    let kubectl = |args: &[&str], stdin: &str| {
        use std::io::Write;
        let mut child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(cp.admin_kubeconfig())
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    kubectl(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ops}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: apps}\n",
    );
    for overrides in ["{}", "watchNamespace: apps"] {
        let docs: Vec<String> = render_with(overrides)
            .iter()
            .map(|o| serde_yaml::to_string(o).unwrap())
            .collect();
        kubectl(
            &["apply", "--dry-run=server", "-f", "-"],
            &docs.join("---\n"),
        );
    }
}
