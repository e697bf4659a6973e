//! Observability: the Grafana dashboard (`dashboards/habitat-operator.json`) and the alerting
//! rules (`deploy/prometheus/`) are proven against a real Prometheus scraping the operator
//! process, on both grounds (the sandbox, and the real control plane with simulated nodes) with
//! the examples Ready in the test's namespace.
//!
//! Needs `prometheus` and `promtool` on PATH (Debian: `apt-get install prometheus`). Without them
//! the Prometheus parts are skipped, unless `HABITAT_REQUIRE_PROMETHEUS=1` makes that a failure.

#[macro_use]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use kube::api::ListParams;
use kube::ResourceExt;
use serde_json::Value;
use support::{free_port, root, timeout, Ground, Proc};

const DASHBOARD: &str = "dashboards/habitat-operator.json";
const RULES: &str = "deploy/prometheus/habitat-operator-rules.yml";
const RULES_TEST: &str = "deploy/prometheus/habitat-operator-rules_test.yml";
const PROMETHEUS_RULE: &str = "deploy/prometheus/prometheusrule.yaml";

/// How long Prometheus gets to start and to collect enough samples for `rate()`.
const PROMETHEUS_WAIT: Duration = Duration::from_secs(45);
/// How long one panel query may keep returning nothing before it counts as broken.
const QUERY_WAIT: Duration = Duration::from_secs(15);

const ALERTS: [&str; 3] = [
    "HabitatStuckOutsideReady",
    "HabitatOperatorReconcileErrors",
    "HabitatOperatorDown",
];

fn read(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"))
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"))
}

fn yaml(rel: &str) -> serde_yaml::Value {
    serde_yaml::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"))
}

/// Every query of the dashboard: (panel title, refId, expr), rows' nested panels included.
fn dashboard_targets(d: &Value) -> Vec<(String, String, String)> {
    fn walk(panels: &[Value], out: &mut Vec<(String, String, String)>) {
        for p in panels {
            let title = p["title"].as_str().unwrap_or("<untitled>").to_string();
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("panel {title:?}: a target without expr"));
                out.push((
                    title.clone(),
                    t["refId"].as_str().unwrap_or("?").to_string(),
                    expr.to_string(),
                ));
            }
            walk(
                p["panels"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                out,
            );
        }
    }
    let mut out = Vec::new();
    walk(
        d["panels"].as_array().expect("dashboard has panels"),
        &mut out,
    );
    out
}

/// Every panel (rows' nested panels included) that is not a row.
fn dashboard_panels(d: &Value) -> Vec<Value> {
    fn walk(panels: &[Value], out: &mut Vec<Value>) {
        for p in panels {
            if p["type"] != "row" {
                out.push(p.clone());
            }
            walk(
                p["panels"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                out,
            );
        }
    }
    let mut out = Vec::new();
    walk(
        d["panels"].as_array().expect("dashboard has panels"),
        &mut out,
    );
    out
}

/// Grafana's template variables replaced the way Grafana would for "All" namespaces.
fn substitute(expr: &str) -> String {
    let mut e = expr.to_string();
    for (var, value) in [
        ("${__rate_interval}", "1m"),
        ("$__rate_interval", "1m"),
        ("${__interval}", "15s"),
        ("$__interval", "15s"),
        ("${__range}", "5m"),
        ("$__range", "5m"),
        ("${namespace}", ".*"),
        ("$namespace", ".*"),
    ] {
        e = e.replace(var, value);
    }
    assert!(
        !e.contains('$'),
        "unknown template variable left in {expr:?} -> {e:?}"
    );
    e
}

/// The `habitat_operator_*` metric names in a text, without histogram suffixes.
fn metric_names(text: &str) -> BTreeSet<String> {
    const PREFIX: &str = "habitat_operator_";
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(PREFIX) {
        let tail = &rest[i..];
        let end = tail[PREFIX.len()..]
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .map_or(tail.len(), |n| n + PREFIX.len());
        let mut name = &tail[..end];
        for suffix in ["_bucket", "_sum", "_count"] {
            name = name.strip_suffix(suffix).unwrap_or(name);
        }
        names.insert(name.to_string());
        rest = &tail[end..];
    }
    names
}

/// The metric names that have at least one sample in a Prometheus text exposition.
fn exposed_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .flat_map(|l| metric_names(l.split(['{', ' ']).next().unwrap_or_default()))
        .collect()
}

#[test]
fn the_dashboard_is_well_formed() {
    let d = dashboard();
    assert_eq!(d["uid"], "habitat-operator");
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion {}",
        d["schemaVersion"]
    );
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no template variable {name}"))
            .clone()
    };
    let ds = var("datasource");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    let ns = var("namespace");
    assert_eq!(ns["type"], "query");
    assert_eq!(ns["multi"], true);
    assert_eq!(ns["includeAll"], true);
    assert_eq!(
        ns["definition"],
        "label_values(habitat_operator_build_info, namespace)"
    );
    assert_eq!(ns["datasource"]["uid"], "${datasource}");

    let mut problems = Vec::new();
    for p in dashboard_panels(&d) {
        let title = p["title"].as_str().unwrap_or("<untitled>");
        if p["datasource"]["uid"] != "${datasource}" || p["datasource"]["type"] != "prometheus" {
            problems.push(format!(
                "panel {title:?}: datasource is {} (want ${{datasource}})",
                p["datasource"]
            ));
        }
        if p["targets"].as_array().is_none_or(|t| t.is_empty()) {
            problems.push(format!("panel {title:?}: no targets"));
        }
    }
    for (title, ref_id, expr) in dashboard_targets(&d) {
        if !expr.contains(r#"namespace=~"$namespace""#) {
            problems.push(format!(
                "panel {title:?} {ref_id}: no namespace=~\"$namespace\" in {expr}"
            ));
        }
        for window in ["rate(", "increase("] {
            for (i, _) in expr.match_indices(window) {
                let args = &expr[i..];
                let close = args.find(']').map_or(args, |n| &args[..=n]);
                if !close.contains("[$__rate_interval]") {
                    problems.push(format!(
                        "panel {title:?} {ref_id}: {window} without [$__rate_interval] in {expr}"
                    ));
                }
            }
        }
        substitute(&expr);
    }
    let titles: Vec<String> = dashboard_panels(&d)
        .iter()
        .map(|p| p["title"].as_str().unwrap_or("").to_string())
        .collect();
    for wanted in [
        "Habitats per phase",
        "Current Habitats per phase",
        "Phase transitions",
        "Time spent per phase (p50 / p95)",
        "Reconcile rate by result",
        "Reconcile errors by reason",
        "Reconcile latency (p50 / p95 / p99)",
        "Requeue backoff (p50 / p95)",
        "Leader changes",
        "Build info",
    ] {
        if !titles.iter().any(|t| t == wanted) {
            problems.push(format!("no panel titled {wanted:?}"));
        }
    }
    assert!(
        problems.is_empty(),
        "dashboard problems:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_prometheusrule_carries_the_same_groups_as_the_rules_file() {
    let plain = yaml(RULES);
    let crd = yaml(PROMETHEUS_RULE);
    assert_eq!(crd["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
    assert_eq!(crd["kind"].as_str(), Some("PrometheusRule"));
    assert!(plain["groups"].is_sequence(), "{RULES} has no groups");
    assert!(
        plain["groups"] == crd["spec"]["groups"],
        "{PROMETHEUS_RULE} spec.groups differs from {RULES} groups; copy the groups over (indented by two spaces)"
    );
    let mut seen = BTreeMap::new();
    for rule in plain["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
    {
        let name = rule["alert"]
            .as_str()
            .expect("only alerting rules")
            .to_string();
        assert!(
            rule["labels"]["severity"].as_str().is_some(),
            "{name}: no severity label"
        );
        for a in ["summary", "description"] {
            assert!(
                rule["annotations"][a]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{name}: no {a} annotation"
            );
        }
        seen.insert(name, rule);
    }
    for alert in ALERTS {
        assert!(seen.contains_key(alert), "no alert {alert} in {RULES}");
    }
    let stuck = seen["HabitatStuckOutsideReady"]["annotations"]["description"]
        .as_str()
        .unwrap();
    assert!(
        stuck.contains("kubectl get habitats") && stuck.contains("kubectl describe habitat"),
        "{stuck}"
    );
}

// ---------------------------------------------------------------------------------------------
// Against a real Prometheus.

/// `prometheus` and `promtool`, or None when the test should be skipped.
fn prometheus_tools() -> Option<(PathBuf, PathBuf)> {
    let find = |name: &str| {
        std::env::var_os("PATH")
            .map(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join(name))
                    .find(|f| f.is_file())
            })
            .unwrap_or_default()
    };
    match (find("prometheus"), find("promtool")) {
        (Some(p), Some(t)) => Some((p, t)),
        _ => {
            assert!(
                std::env::var("HABITAT_REQUIRE_PROMETHEUS").as_deref() != Ok("1"),
                "HABITAT_REQUIRE_PROMETHEUS=1 but `prometheus` and `promtool` are not both on PATH \
                 (Debian/Ubuntu: apt-get install prometheus)"
            );
            eprintln!("skipped: `prometheus`/`promtool` not on PATH (set HABITAT_REQUIRE_PROMETHEUS=1 to make this fail)");
            None
        }
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// GET a URL: (status, body), or None when nothing answers.
fn get(agent: &ureq::Agent, url: &str, query: &[(&str, &str)]) -> Option<(u16, String)> {
    let mut req = agent.get(url);
    for (k, v) in query {
        req = req.query(*k, *v);
    }
    let mut resp = req.call().ok()?;
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().ok()?;
    Some((status, body))
}

/// `habitat_operator_habitats` by phase, from an exposition.
fn phase_counts(exposition: &str) -> BTreeMap<String, f64> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("habitat_operator_habitats{phase=\""))
        .filter_map(|l| {
            let (phase, rest) = l.split_once("\"}")?;
            Some((phase.to_string(), rest.trim().parse().ok()?))
        })
        .collect()
}

/// Instant query through the HTTP API: Ok(result array) or Err(what went wrong).
fn query(agent: &ureq::Agent, base: &str, expr: &str) -> Result<Vec<Value>, String> {
    let (status, body) = get(agent, &format!("{base}/api/v1/query"), &[("query", expr)])
        .ok_or_else(|| "Prometheus did not answer".to_string())?;
    let v: Value = serde_json::from_str(&body)
        .map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
    if v["status"] != "success" {
        return Err(format!("HTTP {status}: {} {}", v["errorType"], v["error"]));
    }
    match v["data"]["resultType"].as_str() {
        Some("vector") | Some("matrix") => {
            Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
        }
        Some("scalar") | Some("string") => Ok(vec![v["data"]["result"].clone()]),
        other => Err(format!("unexpected resultType {other:?}: {body}")),
    }
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests() {
    let Some((_, promtool)) = prometheus_tools() else {
        return;
    };
    for args in [["check", "rules", RULES], ["test", "rules", RULES_TEST]] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(root())
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The examples Ready in a namespace of their own, the operator process watching it, and a real
/// Prometheus scraping the operator: every panel query of the dashboard returns data, every
/// metric a panel or a rule uses has samples, and the alerting rules load and evaluate.
async fn every_dashboard_query_returns_data(ground: Ground) {
    let Some((prometheus_bin, _)) = prometheus_tools() else {
        return;
    };
    require_kubectl!();
    let started = Instant::now();
    let mut env = env_on!(ground, "dashboard");
    let http = agent();
    let metrics_url = format!("http://{}/metrics", env.metrics);
    let namespace = env.namespace.clone();

    // The examples, Ready, and the operator's gauge saying so.
    for example in support::NAMESPACE_EXAMPLES {
        env.apply_example(example);
    }
    let names: Vec<String> = env
        .habitats()
        .list(&ListParams::default())
        .await
        .expect("list the Habitats")
        .items
        .iter()
        .map(|h| h.name_any())
        .collect();
    assert!(names.len() >= 13, "{names:?}");
    for name in &names {
        env.wait_phase(name, "Ready", timeout(&env)).await;
    }
    let deadline = Instant::now() + timeout(&env);
    let mut last = BTreeMap::new();
    loop {
        env.assert_processes_running("waiting for the operator to count the examples Ready");
        if let Some((200, text)) = get(&http, &metrics_url, &[]) {
            last = phase_counts(&text);
            let total: f64 = last.values().sum();
            if total == names.len() as f64 && last.get("Ready").copied() == Some(total) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the operator's habitat_operator_habitats does not count the {} examples Ready \
             within {:?}; last phases {last:?}; operator log:\n{}",
            names.len(),
            timeout(&env),
            support::tail(&env.operator_log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "{ground:?}: examples Ready after {:?}: {last:?}",
        started.elapsed()
    );

    // Prometheus scraping the operator every second, with the alerting rules loaded.
    let prom_port = free_port();
    let prom = format!("http://127.0.0.1:{prom_port}");
    let dir = env.temp_dir().join("prometheus");
    fs::create_dir_all(&dir).expect("prometheus directory");
    let config = dir.join("prometheus.yml");
    fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: habitat-operator\n    static_configs:\n      \
             - targets: ['{metrics}']\n        labels:\n          namespace: {namespace}\n",
            rules = root().join(RULES).display(),
            metrics = env.metrics,
        ),
    )
    .expect("write prometheus.yml");
    let prometheus_log = dir.join("prometheus.log");
    let mut prometheus = Proc::spawn_logged(
        "prometheus",
        Command::new(&prometheus_bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .arg("--log.level=warn")
            .current_dir(&dir),
        &prometheus_log,
    );
    // rate() needs two samples in its window: wait for a few successful scrapes.
    let up = format!(r#"sum_over_time(up{{job="habitat-operator",namespace="{namespace}"}}[1m])"#);
    let deadline = Instant::now() + PROMETHEUS_WAIT;
    loop {
        prometheus.assert_running("waiting for it to scrape the operator", &prometheus_log);
        env.assert_processes_running("Prometheus scraped the operator");
        let scrapes = query(&http, &prom, &up)
            .ok()
            .and_then(|r| {
                r.first()
                    .and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok())
            })
            .unwrap_or(0.0);
        if scrapes >= 4.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus did not scrape the operator 4 times within {PROMETHEUS_WAIT:?} (got {scrapes}); prometheus output:\n{}",
            support::tail(&fs::read_to_string(&prometheus_log).unwrap_or_default(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "{ground:?}: prometheus has scraped the operator after {:?}",
        started.elapsed()
    );

    let mut problems = Vec::new();

    // The namespace variable (label_values(habitat_operator_build_info, namespace)) offers the
    // scraped namespace.
    let values = get(
        &http,
        &format!("{prom}/api/v1/label/namespace/values"),
        &[("match[]", "habitat_operator_build_info")],
    )
    .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
    .map(|v| v["data"].clone())
    .unwrap_or_default();
    if !values
        .as_array()
        .is_some_and(|a| a.iter().any(|v| v == namespace.as_str()))
    {
        problems.push(format!(
            "variable namespace: label values of habitat_operator_build_info are {values} (want {namespace})"
        ));
    }

    // Every panel query answers with at least one series.
    let d = dashboard();
    let targets = dashboard_targets(&d);
    for (title, ref_id, expr) in &targets {
        let promql = substitute(expr);
        let until = Instant::now() + QUERY_WAIT;
        let outcome = loop {
            match query(&http, &prom, &promql) {
                Ok(r) if !r.is_empty() => break Ok(r.len()),
                Ok(_) if Instant::now() < until => tokio::time::sleep(Duration::from_secs(1)).await,
                Ok(_) => break Err("no series".to_string()),
                Err(e) => break Err(e),
            }
        };
        match outcome {
            Ok(n) => eprintln!("ok   {title} [{ref_id}]: {n} series"),
            Err(e) => problems.push(format!(
                "panel {title:?} [{ref_id}]: {e}\n      expr: {promql}"
            )),
        }
    }

    // Every habitat_operator_* name a panel or a rule uses is exposed by the operator.
    let exposition = get(&http, &metrics_url, &[])
        .map(|(_, t)| t)
        .unwrap_or_default();
    let exposed = exposed_names(&exposition);
    let mut used = BTreeMap::<String, Vec<String>>::new();
    for (title, _, expr) in &targets {
        for name in metric_names(expr) {
            used.entry(name)
                .or_default()
                .push(format!("panel {title:?}"));
        }
    }
    for name in metric_names(&read(RULES)) {
        used.entry(name).or_default().push(RULES.to_string());
    }
    for (name, users) in &used {
        if !exposed.contains(name) {
            let mut users = users.clone();
            users.dedup();
            problems.push(format!(
                "metric {name} (used by {}) has no sample in the operator's /metrics",
                users.join(", ")
            ));
        }
    }

    // The rules load and evaluate; the operator is up, so HabitatOperatorDown is not active.
    match get(&http, &format!("{prom}/api/v1/rules"), &[]) {
        Some((200, body)) => {
            let v: Value = serde_json::from_str(&body).expect("rules JSON");
            let rules: Vec<Value> = v["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            for alert in ALERTS {
                match rules.iter().find(|r| r["name"] == alert) {
                    None => problems.push(format!("Prometheus did not load alert {alert}")),
                    Some(r) if r["health"] == "err" => {
                        problems.push(format!("alert {alert} fails: {}", r["lastError"]))
                    }
                    Some(r) if alert == "HabitatOperatorDown" && r["state"] != "inactive" => {
                        problems.push(format!(
                            "alert {alert} is {} while the operator is scraped",
                            r["state"]
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        other => problems.push(format!("GET /api/v1/rules: {other:?}")),
    }
    for rule in yaml(RULES)["groups"][0]["rules"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        if let Err(e) = query(&http, &prom, rule["expr"].as_str().unwrap_or_default()) {
            problems.push(format!(
                "alert {:?}: its expr does not evaluate: {e}",
                rule["alert"]
            ));
        }
    }

    // The lifecycle is visible: Habitats counted in Ready, transitions into Ready counted.
    for (what, promql) in [
        (
            "Habitats in phase Ready",
            format!(
                r#"habitat_operator_habitats{{job="habitat-operator",namespace="{namespace}",phase="Ready"}} > 0"#
            ),
        ),
        (
            "transitions to Ready",
            format!(
                r#"habitat_operator_phase_transitions_total{{job="habitat-operator",namespace="{namespace}",to="Ready"}} > 0"#
            ),
        ),
    ] {
        match query(&http, &prom, &promql) {
            Ok(r) if !r.is_empty() => {}
            Ok(_) => problems.push(format!("no {what}: {promql} returned nothing")),
            Err(e) => problems.push(format!("{what}: {promql}: {e}")),
        }
    }

    env.assert_processes_running("the queries ran");
    prometheus.assert_running("the queries ran", &prometheus_log);
    eprintln!(
        "{ground:?}: checked {} panel queries in {:?}",
        targets.len(),
        started.elapsed()
    );
    assert!(
        problems.is_empty(),
        "{} problem(s) with the dashboard and rules against the operator on {ground:?}:\n  {}\n(the operator's phases: {last:?})",
        problems.len(),
        problems.join("\n  ")
    );
}

/// The operator's Event recorder against the server: a repeat of the same note about the same
/// object counts in the first Event's series (a merge patch both grounds accept); another note
/// is an Event of its own.
async fn a_repeated_event_counts_in_its_series(ground: Ground) {
    use habitat_operator::cluster::events::{Note, Recorder};
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::events::v1::Event;
    use kube::api::{Api, PostParams};
    use kube::Resource;

    let env = env_on!(ground, "event-series", false);
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("regarded".into());
    let cm = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("a ConfigMap");
    let recorder = Recorder::new(
        env.client.clone(),
        kube::runtime::events::Reporter {
            controller: "habitat-operator".into(),
            instance: Some("test".into()),
        },
    );
    let regarding = cm.object_ref(&());
    let failed = Note::warning("ApplyFailed", "StatefulSet regarded: forbidden");
    for _ in 0..3 {
        recorder
            .publish(&failed, &regarding)
            .await
            .expect("recorded");
    }
    recorder
        .publish(
            &Note::normal("EnteredReady", "Deploying → Ready"),
            &regarding,
        )
        .await
        .expect("recorded");
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut seen: Vec<(String, Option<i32>)> = events
        .list(&ListParams::default())
        .await
        .expect("Events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("regarded"))
        .map(|e| (e.reason.unwrap_or_default(), e.series.map(|s| s.count)))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("ApplyFailed".to_string(), Some(3)),
            ("EnteredReady".to_string(), None)
        ]
    );
}

on_both_grounds!(
    every_dashboard_query_returns_data,
    a_repeated_event_counts_in_its_series
);
