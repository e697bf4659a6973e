//! `habitat-operator sandbox`: a simulated cluster on loopback, the CRD and manifests applied,
//! the operator running against it, and a live table of the Habitats' phases.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use habitat_operator::api::Habitat;
use habitat_operator::runtime::cli::{RunArgs, SandboxArgs, Supervisors};
use habitat_operator::runtime::runner;
use habitat_sandbox::{Options, Sandbox};
use kube::api::ListParams;
use kube::{Api, Client, CustomResourceExt, ResourceExt};

/// Runs the sandbox command.
pub async fn run(args: SandboxArgs) -> Result<(), String> {
    let real = real_supervisors(&args)?;
    if let Some(kubeconfig) = &args.kubeconfig {
        return nodes(kubeconfig, args.namespace.clone(), real).await;
    }
    let opts = Options {
        addr: ([127, 0, 0, 1], args.port).into(),
        faults: args.faults.clone().unwrap_or_default(),
        real_supervisors: real,
        ..Options::default()
    };
    let sandbox = Sandbox::start(opts)
        .await
        .map_err(|e| format!("cannot start the sandbox: {e}"))?;
    println!("sandbox API server on {}", sandbox.url());
    if let Some(faults) = args.faults.as_ref().filter(|f| !f.is_none()) {
        println!(
            "injecting faults: {faults} (counts on {}/debug/faults)",
            sandbox.url()
        );
    }
    if let Some(path) = &args.kubeconfig_out {
        write_whole(path, sandbox.kubeconfig_yaml().as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!(
            "kubeconfig written to {} (kubectl --kubeconfig {} get habitats)",
            path.display(),
            path.display()
        );
    }
    let crd = serde_yaml::to_string(&Habitat::crd()).map_err(|e| e.to_string())?;
    sandbox
        .apply_yaml(&crd)
        .await
        .map_err(|e| format!("cannot install the CRD: {e}"))?;
    let files = if args.files.is_empty() {
        default_manifests()
    } else {
        args.files.clone()
    };
    for file in &files {
        let yaml = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let applied = sandbox
            .apply_yaml(&yaml)
            .await
            .map_err(|e| format!("cannot apply {}: {e}", file.display()))?;
        for line in applied {
            println!("applied {line} ({})", file.display());
        }
    }
    let client = client_for(&sandbox).await?;
    if !args.no_operator {
        let metrics_addr = free_or_any(args.metrics_addr);
        let run_args = RunArgs::embedded(metrics_addr, &args.log_level, args.log_format);
        let operator_client = client.clone();
        tokio::spawn(async move {
            if let Err(e) = runner::run(operator_client, &run_args).await {
                eprintln!("habitat-operator: {e}");
            }
        });
        println!("operator running; metrics on http://{metrics_addr}/metrics");
    }
    let outcome = watch(&client, &args).await;
    sandbox.shutdown().await;
    outcome
}

/// With `--supervisors real`, where the binaries are (checked) and where to describe the
/// containers.
fn real_supervisors(
    args: &SandboxArgs,
) -> Result<Option<habitat_sandbox::nodes::habitat::Config>, String> {
    if args.supervisors != Supervisors::Real {
        return Ok(None);
    }
    habitat_sandbox::nodes::habitat::Config::from_env(args.supervisor_state_dir.clone())
        .map(Some)
        .map_err(|e| e.to_string())
}

/// `sandbox --kubeconfig FILE`: only the simulated nodes, against an existing API server, until
/// SIGINT or SIGTERM.
async fn nodes(
    kubeconfig: &Path,
    namespace: Option<String>,
    real: Option<habitat_sandbox::nodes::habitat::Config>,
) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let client = runner::client(Some(kubeconfig))
        .await
        .map_err(|e| e.to_string())?;
    let opts = habitat_sandbox::nodes::Options {
        namespace: namespace.clone(),
        ..Default::default()
    };
    let nodes = habitat_sandbox::nodes::Nodes::start_with(client, opts, real)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "simulating the nodes of the API server in {} ({})",
        kubeconfig.display(),
        namespace.map_or("every namespace".to_string(), |n| format!("namespace {n}"))
    );
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    nodes.shutdown().await;
    Ok(())
}

/// `addr` when it can be bound, otherwise a free port on the same IP (a busy default port must
/// not stop the demo).
/// Writes `contents` to `path` so that it appears whole: into a file beside it, renamed over
/// it. A script or test waiting for the kubeconfig to exist reads it at once; with a plain
/// write it could find the file created and still empty (the scenario tests' harness did).
fn write_whole(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".{}.partial", std::process::id()));
    let partial = PathBuf::from(partial);
    std::fs::write(&partial, contents)?;
    std::fs::rename(&partial, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })
}

fn free_or_any(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    let probe = std::net::TcpListener::bind(addr)
        .or_else(|_| std::net::TcpListener::bind((addr.ip(), 0)))
        .and_then(|l| l.local_addr());
    match probe {
        Ok(found) if found != addr => {
            if addr.port() != 0 {
                println!("{addr} is busy; serving metrics on {found} instead");
            }
            found
        }
        _ => addr,
    }
}

/// `examples/*/habitat.yml`, from the working directory or the source tree.
fn default_manifests() -> Vec<PathBuf> {
    let roots = [
        PathBuf::from("examples"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"),
    ];
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path().join("habitat.yml"))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        if !files.is_empty() {
            return files;
        }
    }
    vec![]
}

async fn client_for(sandbox: &Sandbox) -> Result<Client, String> {
    runner::client_from_yaml(&sandbox.kubeconfig_yaml())
        .await
        .map_err(|e| e.to_string())
}

/// Prints the table whenever it changes; with --until-ready, returns once all are Ready.
async fn watch(client: &Client, args: &SandboxArgs) -> Result<(), String> {
    let api: Api<Habitat> = Api::all(client.clone());
    let start = Instant::now();
    // Registered once, before the loop: a signal that arrives between two polls is not lost.
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let mut last = String::new();
    loop {
        // Under injected faults a list can fail like any other request: retry.
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(e) if args.faults.is_some() => {
                tracing::debug!("cannot list Habitats (retrying): {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(e) => return Err(format!("cannot list Habitats: {e}")),
        };
        let table = render(&list.items);
        if table != last {
            println!("--- {:>5.1}s\n{table}", start.elapsed().as_secs_f64());
            last = table;
        }
        let all_ready =
            !list.items.is_empty() && list.items.iter().all(|h| h.phase_str() == Some("Ready"));
        if args.until_ready && all_ready {
            println!(
                "every Habitat is Ready after {:.1}s",
                start.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if args.until_ready && start.elapsed() > Duration::from_secs(args.timeout) {
            for h in list.items.iter().filter(|h| h.phase_str() != Some("Ready")) {
                println!(
                    "{}/{} is blocked: {}",
                    h.namespace().unwrap_or_default(),
                    h.name_any(),
                    blocked_reason(h)
                );
            }
            return Err(format!(
                "not every Habitat was Ready within {}s",
                args.timeout
            ));
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = interrupt.recv() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        }
    }
}

fn blocked_reason(h: &Habitat) -> String {
    let conditions = h
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| format!("{}: {}", c.reason, c.message))
        .unwrap_or_else(|| "no status yet".to_string())
}

fn render(items: &[Habitat]) -> String {
    let mut rows: Vec<[String; 6]> = items
        .iter()
        .map(|h| {
            let s = h.status.clone().unwrap_or_default();
            [
                h.namespace().unwrap_or_default(),
                h.name_any(),
                s.phase.unwrap_or_else(|| "-".into()),
                s.ready.unwrap_or_else(|| "-".into()),
                s.leader.unwrap_or_else(|| "-".into()),
                h.spec.service.topology.as_str().to_string(),
            ]
        })
        .collect();
    rows.sort();
    let header = ["NAMESPACE", "NAME", "PHASE", "READY", "LEADER", "TOPOLOGY"].map(String::from);
    let mut widths = [0usize; 6];
    for row in std::iter::once(&header).chain(rows.iter()) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whoever waits for the kubeconfig to exist reads it whole, never created and still empty
    /// or half written.
    #[test]
    fn a_reader_never_sees_a_partial_kubeconfig() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let contents = vec![b'k'; 8 << 20];
        for i in 0..10 {
            let path = dir.path().join(format!("kubeconfig-{i}"));
            let (target, body) = (path.clone(), contents.clone());
            let writer = std::thread::spawn(move || write_whole(&target, &body));
            while !path.is_file() {
                std::thread::yield_now();
            }
            let read = std::fs::read(&path).expect("readable once it exists");
            assert_eq!(
                read.len(),
                contents.len(),
                "round {i}: read part of the file"
            );
            writer.join().expect("the writer ends").expect("written");
        }
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("listable")
            .map(|e| e.expect("an entry").file_name())
            .collect();
        assert_eq!(left.len(), 10, "no partial files left: {left:?}");
    }
}
