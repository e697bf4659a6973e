//! The operator as its own process (the built binary), pointed at a kubeconfig; its CPU time and
//! peak RSS from /proc, its /metrics.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running operator process, killed on drop.
pub struct Operator {
    /// From its start until its caches synced (`/readyz` 200), to 0.1 s.
    pub synced_in: Duration,
    child: Child,
    metrics_addr: String,
    log: std::path::PathBuf,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The operator's log filter: `warn`, or `HABITAT_BENCH_OPERATOR_LOG` (for example
/// `warn,habitat_operator::reconcile=debug,kube_runtime::controller=info`: one line per
/// reconcile, with the reason kube's Controller ran it). With it set the log is kept, and its path
/// printed.
pub fn log_level() -> String {
    std::env::var("HABITAT_BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into())
}

/// The operator binary: the one cargo built with this benchmark, or `HABITAT_BENCH_OPERATOR_BIN`
/// (another build of it, to compare two builds on the same benchmark binary).
fn binary() -> std::ffi::OsString {
    std::env::var_os("HABITAT_BENCH_OPERATOR_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_habitat-operator").into())
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn http_get(url: &str) -> Result<(u16, String), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut resp = agent.get(url).call().map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    Ok((status, body))
}

impl Operator {
    /// Starts `habitat-operator run` on `namespace` with the identity (`POD_NAME`) that its
    /// User-Agent carries (`habitat-operator/V (IDENTITY)`), and waits until `/readyz` answers 200 (caches
    /// synced).
    pub async fn start(
        kubeconfig: &Path,
        namespace: &str,
        identity: &str,
        workers: u16,
        resync: Duration,
        log: &Path,
    ) -> Result<Operator, String> {
        let metrics_addr = format!("127.0.0.1:{}", free_port()?);
        let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(binary())
            .args([
                "run",
                "--namespace",
                namespace,
                "--metrics-addr",
                &metrics_addr,
            ])
            .args(["--workers", &workers.to_string()])
            .args(["--resync-seconds", &resync.as_secs().max(1).to_string()])
            .args(["--log-level", &log_level(), "--kubeconfig"])
            .arg(kubeconfig)
            .env("POD_NAME", identity)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting the operator binary: {e}"))?;
        let mut op = Operator {
            synced_in: Duration::ZERO,
            child,
            metrics_addr,
            log: log.to_path_buf(),
        };
        let began = Instant::now();
        loop {
            let url = format!("http://{}/readyz", op.metrics_addr);
            let ready = tokio::task::spawn_blocking(move || http_get(&url))
                .await
                .map_err(|e| e.to_string())?;
            if matches!(ready, Ok((200, _))) {
                op.synced_in = began.elapsed();
                return Ok(op);
            }
            if let Ok(Some(status)) = op.child.try_wait() {
                return Err(format!(
                    "the operator exited ({status}):\n{}",
                    op.log_tail()
                ));
            }
            if began.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "the operator was not ready in 60 s:\n{}",
                    op.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<_> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// An error when the process has exited.
    pub fn check_running(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(format!(
                "the operator exited ({status}):\n{}",
                self.log_tail()
            )),
            _ => Ok(()),
        }
    }

    /// Its `/metrics` text.
    pub async fn metrics(&self) -> Result<String, String> {
        let url = format!("http://{}/metrics", self.metrics_addr);
        match tokio::task::spawn_blocking(move || http_get(&url)).await {
            Ok(Ok((200, body))) => Ok(body),
            Ok(Ok((code, _))) => Err(format!("/metrics answered {code}")),
            Ok(Err(e)) => Err(format!("/metrics: {e}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// (CPU seconds, user and system, so far; peak resident set in MiB), from /proc.
    pub fn usage(&self) -> Result<(f64, f64), String> {
        let pid = self.child.id();
        let stat =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
        let ticks = crate::machine::StatTicks::parse(&stat)
            .ok_or_else(|| format!("/proc/{pid}/stat: cannot read {stat:?}"))?;
        let cpu = (ticks.utime + ticks.stime) / clock_ticks();
        let status =
            std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
        let hwm_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .ok_or("no VmHWM in /proc/PID/status")?;
        Ok((cpu, hwm_kib / 1024.0))
    }
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`, 100 on Linux unless told otherwise).
pub fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}
