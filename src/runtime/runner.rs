//! `habitat-operator run`: connects to the cluster, serves the endpoints, optionally waits for
//! the leader Lease, and runs the controller until a signal.

use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::reconcile::metrics::Metrics;
use crate::runtime::cli::RunArgs;
use crate::runtime::controller::{self, Settings};
use crate::runtime::lease::{self, LeaseConfig};
use crate::runtime::server::{self, Health};

/// Why the operator could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable cluster configuration.
    #[error("cannot load the cluster configuration: {0}; pass --kubeconfig or run in a cluster")]
    Config(String),
    /// The client could not be built.
    #[error("cannot create the Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    /// The endpoints could not be served.
    #[error("cannot serve the metrics endpoint on {addr}: {source}")]
    Serve {
        /// The address.
        addr: std::net::SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// A client for `kubeconfig`, or the default configuration when `None`.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client, RunError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| RunError::Config(e.to_string()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| RunError::Config(e.to_string()))?
        }
        None => Config::infer()
            .await
            .map_err(|e| RunError::Config(e.to_string()))?,
    };
    Ok(Client::try_from(with_user_agent(config))?)
}

/// A client for the kubeconfig in `yaml` (the sandbox writes one).
pub async fn client_from_yaml(yaml: &str) -> Result<Client, RunError> {
    let kc = Kubeconfig::from_yaml(yaml).map_err(|e| RunError::Config(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| RunError::Config(e.to_string()))?;
    Ok(Client::try_from(with_user_agent(config))?)
}

/// Runs the operator with `args` against `client` until a termination signal.
pub async fn run(client: Client, args: &RunArgs) -> Result<(), RunError> {
    let metrics = Metrics::default();
    let health = Health::new(metrics.clone(), args.leader_elect);
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|source| RunError::Serve {
            addr: args.metrics_addr,
            source,
        })?;
    let router = server::router(health.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "metrics endpoint stopped");
        }
    });
    tokio::spawn(server::probe_api(
        client.clone(),
        args.namespace.clone(),
        health.api_reachable.clone(),
        health.api_back.clone(),
    ));
    tracing::info!(addr = %args.metrics_addr, version = env!("CARGO_PKG_VERSION"), "habitat-operator starting");

    let settings = Settings {
        namespace: args.namespace.clone(),
        workers: args.workers,
        resync: std::time::Duration::from_secs(args.resync_seconds),
    };
    let signals = signals();
    let mut stop = signals.clone();
    let run_controller = controller::run(
        client.clone(),
        settings,
        metrics,
        health.habitats.clone(),
        health.synced.clone(),
        health.api_back.clone(),
        async move {
            let _ = stop.wait_for(|n| *n >= 1).await;
        },
    );
    if !args.leader_elect {
        run_controller.await;
        return Ok(());
    }
    let cfg = LeaseConfig::new(
        args.leader_elect_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".to_string()),
        "habitat-operator".to_string(),
        identity(),
    );
    tracing::info!(identity = %cfg.identity, namespace = %cfg.namespace, "standby: waiting for the leader lease");
    let mut standby_stop = signals.clone();
    tokio::select! {
        _ = lease::acquire(&client, &cfg) => {}
        // A standby has nothing to hand over: it just ends.
        _ = standby_stop.wait_for(|n| *n >= 1) => {
            tracing::info!("standby stopped by a signal");
            return Ok(());
        }
    }
    health.leading.store(true, Ordering::SeqCst);
    tracing::info!(identity = %cfg.identity, "acquired the leader lease");
    tokio::select! {
        // The controller returns on SIGTERM or SIGINT, after the reconciles under way finished:
        // nothing writes any more, so the lease can go to a standby at once.
        _ = run_controller => {
            health.leading.store(false, Ordering::SeqCst);
            let started = std::time::Instant::now();
            match tokio::time::timeout(Duration::from_secs(5), lease::release(&client, &cfg)).await {
                Ok(Ok(true)) => tracing::info!(identity = %cfg.identity, elapsed_ms = started.elapsed().as_millis() as u64, "released the leader lease"),
                Ok(Ok(false)) => tracing::info!("the leader lease was no longer ours to release"),
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot release the leader lease; it expires by itself"),
                Err(_) => tracing::warn!("releasing the leader lease timed out; it expires by itself"),
            }
            Ok(())
        }
        _ = lease::hold(&client, &cfg) => {
            health.leading.store(false, Ordering::SeqCst);
            tracing::error!("lost the leader lease; exiting so that only one replica acts");
            std::process::exit(1);
        }
    }
}

/// Counts SIGTERM and SIGINT from the start of the process, so that none is missed between
/// the standby phase and the controller. The first stops the operator gracefully (the
/// controller finishes its reconciles, the lease is released); the second exits at once.
fn signals() -> tokio::sync::watch::Receiver<u32> {
    let (tx, rx) = tokio::sync::watch::channel(0u32);
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        loop {
            #[cfg(unix)]
            let terminate = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let terminate = std::future::pending::<()>();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate => {}
            }
            tx.send_modify(|n| *n += 1);
            if *tx.borrow() >= 2 {
                tracing::warn!("second signal: exiting without waiting for the reconciles");
                std::process::exit(130);
            }
            tracing::info!("signal received: stopping after the reconciles under way");
        }
    });
    rx
}

/// This replica's identity in the Lease and in its User-Agent: `$POD_NAME`, else
/// `habitat-operator-<pid>`.
pub fn identity() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| format!("habitat-operator-{}", std::process::id()))
}

/// `habitat-operator/<version> (<identity>)`: the API server's audit log tells replicas apart.
fn with_user_agent(mut config: Config) -> Config {
    let agent = format!(
        "habitat-operator/{} ({})",
        env!("CARGO_PKG_VERSION"),
        identity()
    );
    if let Ok(value) = axum::http::HeaderValue::from_str(&agent) {
        config.headers.push((axum::http::header::USER_AGENT, value));
    }
    config
}
