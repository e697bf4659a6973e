//! Observability: the Grafana dashboard (`dashboards/habitat-operator.json`) and the alerting
//! rules (`deploy/prometheus/`) are proven against a real Prometheus scraping the sandbox.
//!
//! Needs `prometheus` and `promtool` on PATH (Debian: `apt-get install prometheus`). Without them
//! the Prometheus parts are skipped, unless `HABITAT_REQUIRE_PROMETHEUS=1` makes that a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const DASHBOARD: &str = "dashboards/habitat-operator.json";
const RULES: &str = "deploy/prometheus/habitat-operator-rules.yml";
const RULES_TEST: &str = "deploy/prometheus/habitat-operator-rules_test.yml";
const PROMETHEUS_RULE: &str = "deploy/prometheus/prometheusrule.yaml";

/// How long the sandbox gets to bring the examples to Ready.
const SANDBOX_WAIT: Duration = Duration::from_secs(90);
/// How long Prometheus gets to start and to collect enough samples for `rate()`.
const PROMETHEUS_WAIT: Duration = Duration::from_secs(45);
/// How long one panel query may keep returning nothing before it counts as broken.
const QUERY_WAIT: Duration = Duration::from_secs(15);

const ALERTS: [&str; 3] = [
    "HabitatStuckOutsideReady",
    "HabitatOperatorReconcileErrors",
    "HabitatOperatorDown",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

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

/// A child process killed when dropped (also while a failed assertion unwinds).
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(name: &'static str, cmd: &mut Command, log: PathBuf) -> Proc {
        let out = fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc { name, child, log }
    }

    /// Fails if the process has exited; `context` says what we were waiting for.
    fn assert_running(&mut self, context: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited with {status} while {context}; its output:\n{}",
                self.name,
                self.tail()
            );
        }
    }

    /// The last lines the process wrote.
    fn tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
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

#[test]
fn every_dashboard_query_returns_data_from_the_sandbox() {
    let Some((prometheus_bin, _)) = prometheus_tools() else {
        return;
    };
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let http = agent();

    // The sandbox: simulated cluster, the examples, the operator and its /metrics.
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let metrics_url = format!("http://{metrics_addr}/metrics");
    let mut sandbox = Proc::spawn(
        "the sandbox",
        Command::new(env!("CARGO_BIN_EXE_habitat-operator"))
            .args([
                "sandbox",
                "--metrics-addr",
                &metrics_addr,
                "--port",
                "0",
                "--log-level",
                "warn",
            ])
            .current_dir(root()),
        tmp.path().join("sandbox.log"),
    );
    let deadline = Instant::now() + SANDBOX_WAIT;
    let mut last = BTreeMap::new();
    loop {
        sandbox.assert_running("waiting for the examples to become Ready");
        if let Some((200, text)) = get(&http, &metrics_url, &[]) {
            let counts = phase_counts(&text);
            if counts != last {
                last = counts.clone();
            }
            let n = |p: &str| counts.get(p).copied().unwrap_or(0.0);
            let total: f64 = counts.values().sum();
            if total > 0.0 && n("Ready") == total {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the examples did not all reach Ready within {SANDBOX_WAIT:?}; last phases {last:?}; sandbox output:\n{}",
            sandbox.tail()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("sandbox settled after {:?}: {last:?}", started.elapsed());

    // Prometheus scraping it every second, with the alerting rules loaded.
    let prom_port = free_port();
    let prom = format!("http://127.0.0.1:{prom_port}");
    let config = tmp.path().join("prometheus.yml");
    fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: habitat-operator\n    static_configs:\n      \
             - targets: ['{metrics_addr}']\n        labels:\n          namespace: sandbox\n",
            rules = root().join(RULES).display()
        ),
    )
    .expect("write prometheus.yml");
    let mut prometheus = Proc::spawn(
        "prometheus",
        Command::new(&prometheus_bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                tmp.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .arg("--log.level=warn")
            .current_dir(tmp.path()),
        tmp.path().join("prometheus.log"),
    );
    // rate() needs two samples in its window: wait for a few successful scrapes.
    let deadline = Instant::now() + PROMETHEUS_WAIT;
    loop {
        prometheus.assert_running("waiting for it to scrape the sandbox");
        sandbox.assert_running("Prometheus scraped it");
        let scrapes = query(
            &http,
            &prom,
            r#"sum_over_time(up{job="habitat-operator",namespace="sandbox"}[1m])"#,
        )
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
            "Prometheus did not scrape the sandbox 4 times within {PROMETHEUS_WAIT:?} (got {scrapes}); prometheus output:\n{}",
            prometheus.tail()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "prometheus has scraped the sandbox after {:?}",
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
        .is_some_and(|a| a.iter().any(|v| v == "sandbox"))
    {
        problems.push(format!(
            "variable namespace: label values of habitat_operator_build_info are {values}"
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
                Ok(_) if Instant::now() < until => std::thread::sleep(Duration::from_secs(1)),
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
                "metric {name} (used by {}) has no sample in the sandbox's /metrics",
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
            r#"habitat_operator_habitats{job="habitat-operator",phase="Ready"} > 0"#,
        ),
        (
            "transitions to Ready",
            r#"habitat_operator_phase_transitions_total{job="habitat-operator",to="Ready"} > 0"#,
        ),
    ] {
        match query(&http, &prom, promql) {
            Ok(r) if !r.is_empty() => {}
            Ok(_) => problems.push(format!("no {what}: {promql} returned nothing")),
            Err(e) => problems.push(format!("{what}: {promql}: {e}")),
        }
    }

    sandbox.assert_running("the queries ran");
    prometheus.assert_running("the queries ran");
    eprintln!(
        "checked {} panel queries in {:?}",
        targets.len(),
        started.elapsed()
    );
    assert!(
        problems.is_empty(),
        "{} problem(s) with the dashboard and rules against the sandbox:\n  {}\n(sandbox phases: {last:?})",
        problems.len(),
        problems.join("\n  ")
    );
}
