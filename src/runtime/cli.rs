//! The command line: `run`, `crd`, `sandbox`, `convert`. Only our own flags appear in `--help`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::runtime::telemetry::LogFormat;

/// Runs Chef Habitat services on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "habitat-operator", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator against the cluster of the current kubeconfig (or in-cluster config).
    Run(RunArgs),
    /// Print the Habitat CustomResourceDefinition as YAML.
    Crd,
    /// Start a simulated cluster on loopback, apply manifests and run the operator against it.
    #[cfg(feature = "sandbox")]
    Sandbox(SandboxArgs),
    /// Convert the original operator's habitat.sh/v1beta1 Habitats to habitat.sh/v1 (YAML on
    /// standard output, notes on standard error; see docs/migrating.md).
    Convert(ConvertArgs),
}

/// Flags of `convert`.
#[derive(Debug, Clone, Args)]
pub struct ConvertArgs {
    /// YAML file of one or more documents (`-`: standard input).
    #[arg(short = 'f', long = "filename")]
    pub filename: PathBuf,
}

/// Logging flags shared by the commands that run.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Log level or filter directive (e.g. `debug`, `habitat_operator=debug,kube=info`).
    #[arg(long, default_value = "info", env = "HABITAT_OPERATOR_LOG")]
    pub log_level: String,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Flags of `run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Habitats reconciled concurrently.
    #[arg(long, default_value_t = crate::runtime::controller::DEFAULT_WORKERS, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,
    /// Address of the /metrics, /healthz and /readyz endpoints.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Run several replicas with one active, elected through a Lease.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the leader election Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long)]
    pub leader_elect_namespace: Option<String>,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Seconds a settled Habitat waits before it is reconciled again without a change (leader
    /// groups re-read the census every 10 s regardless).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub resync_seconds: u64,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

impl RunArgs {
    /// The settings of an operator embedded in another command (the sandbox, the benchmark):
    /// all namespaces, the default workers, no leader election, the given endpoint and logging.
    pub fn embedded(metrics_addr: SocketAddr, log_level: &str, log_format: LogFormat) -> Self {
        RunArgs {
            namespace: None,
            workers: crate::runtime::controller::DEFAULT_WORKERS,
            metrics_addr,
            leader_elect: false,
            leader_elect_namespace: None,
            kubeconfig: None,
            resync_seconds: crate::reconcile::requeue::RESYNC.as_secs(),
            log: LogArgs {
                log_level: log_level.to_string(),
                log_format,
            },
        }
    }
}

/// What runs in the sandbox's Habitat pods.
#[cfg(feature = "sandbox")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Supervisors {
    /// Simulated supervisors (fast; any number of pods).
    Simulated,
    /// The real Habitat supervisor (`hab sup run`) in each pod.
    Real,
}

/// Flags of `sandbox`.
#[cfg(feature = "sandbox")]
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// Manifests to apply (default: every examples/*/habitat.yml).
    pub files: Vec<PathBuf>,
    /// Serve no API server: play the nodes (kubelet and Habitat supervisors) of the API server
    /// in this kubeconfig, which must have no Nodes (a test control plane, as kwok does). Only
    /// the simulated nodes run; apply manifests and run the operator against it yourself.
    #[arg(long, conflicts_with_all = ["files", "until_ready", "kubeconfig_out", "no_operator", "port", "faults"])]
    pub kubeconfig: Option<PathBuf>,
    /// With --kubeconfig: simulate only the pods of this namespace (default: all namespaces).
    #[arg(long, requires = "kubeconfig")]
    pub namespace: Option<String>,
    /// Exit 0 once every Habitat is Ready (non-zero on timeout).
    #[arg(long)]
    pub until_ready: bool,
    /// Seconds to wait with --until-ready.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Write a kubeconfig for kubectl and for a separate operator process.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Serve the simulated cluster without running the operator in it.
    #[arg(long)]
    pub no_operator: bool,
    /// Inject API faults, comma-separated KEY=VALUE: `server-errors=RATE` (500, 503 or 429
    /// with Retry-After), `conflicts=RATE` (409 on writes to an object), `expired=RATE` (410 on
    /// lists and watches from a resourceVersion), `watch-cut=DURATION` (watch streams cut that
    /// long after they open), `latency=MIN-MAX` (added to every request), `only=PREFIX` (hit
    /// only clients whose User-Agent starts with PREFIX, e.g. habitat-operator). RATE: 0.2 or
    /// 20%; DURATION: 50ms, 5s, 1m. The simulated nodes are never hit. Example:
    /// server-errors=0.2,conflicts=0.1,expired=0.1,watch-cut=5s,latency=0-50ms
    #[arg(long, value_name = "FAULTS", value_parser = clap::value_parser!(habitat_sandbox::Faults))]
    pub faults: Option<habitat_sandbox::Faults>,
    /// Port of the simulated API server (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// What runs in each Habitat pod: `simulated` supervisors, or `real` ones (`hab sup run`
    /// from the directory in HABITAT_SUPERVISOR_BIN, one FS_ROOT and loopback IP per pod).
    #[arg(long, value_enum, default_value_t = Supervisors::Simulated)]
    pub supervisors: Supervisors,
    /// With --supervisors real: describe each running container in DIR/NAMESPACE/POD.json
    /// (session id, FS_ROOT, pod IP), for tests that crash a pod or turn it unhealthy.
    #[arg(long, value_name = "DIR")]
    pub supervisor_state_dir: Option<PathBuf>,
    /// Address of the embedded operator's /metrics endpoint.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub metrics_addr: SocketAddr,
    /// Log level or filter directive of the embedded operator (the table is the main output).
    #[arg(long, default_value = "warn")]
    pub log_level: String,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn long_flags(cmd: &clap::Command) -> Vec<String> {
        cmd.get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect()
    }

    #[test]
    fn the_chart_and_the_embedded_operator_default_to_the_binarys_workers() {
        let cli = Cli::try_parse_from(["habitat-operator", "run"]).unwrap();
        let Command::Run(r) = cli.command else {
            panic!()
        };
        assert_eq!(r.workers, crate::runtime::controller::DEFAULT_WORKERS);
        let embedded = RunArgs::embedded("127.0.0.1:0".parse().unwrap(), "warn", LogFormat::Text);
        assert_eq!(embedded.workers, r.workers);
        let values = include_str!("../../deploy/helm/habitat-operator/values.yaml");
        let chart = values
            .lines()
            .find_map(|l| l.strip_prefix("workers:"))
            .map(|v| v.trim().parse::<u16>().unwrap());
        assert_eq!(chart, Some(r.workers), "deploy/helm values.yaml `workers`");
    }

    #[test]
    fn help_lists_only_our_own_flags() {
        let mut cli = Cli::command();
        cli.build();
        let run = cli.find_subcommand("run").unwrap();
        let mut flags = long_flags(run);
        flags.sort();
        assert_eq!(
            flags,
            [
                "help",
                "kubeconfig",
                "leader-elect",
                "leader-elect-namespace",
                "log-format",
                "log-level",
                "metrics-addr",
                "namespace",
                "resync-seconds",
                "version",
                "workers"
            ]
        );
        let mut top = long_flags(&cli);
        top.sort();
        assert_eq!(top, ["help", "version"]);
    }

    #[test]
    fn run_parses_every_flag() {
        let cli = Cli::try_parse_from([
            "habitat-operator",
            "run",
            "--namespace",
            "prod",
            "--workers",
            "8",
            "--metrics-addr",
            "127.0.0.1:9000",
            "--log-level",
            "debug",
            "--log-format",
            "json",
            "--leader-elect",
            "--resync-seconds",
            "30",
        ])
        .unwrap();
        let Command::Run(r) = cli.command else {
            panic!()
        };
        assert_eq!(r.namespace.as_deref(), Some("prod"));
        assert_eq!(r.workers, 8);
        assert!(r.leader_elect);
        assert_eq!(r.resync_seconds, 30);
        assert_eq!(r.log.log_format, LogFormat::Json);
    }

    #[cfg(feature = "sandbox")]
    #[test]
    fn sandbox_nodes_mode_takes_a_kubeconfig_and_refuses_sandbox_only_flags() {
        let cli = Cli::try_parse_from([
            "habitat-operator",
            "sandbox",
            "--kubeconfig",
            "/tmp/kc",
            "--namespace",
            "e2e",
        ])
        .unwrap();
        let Command::Sandbox(s) = cli.command else {
            panic!()
        };
        assert_eq!(
            s.kubeconfig.as_deref(),
            Some(std::path::Path::new("/tmp/kc"))
        );
        assert_eq!(s.namespace.as_deref(), Some("e2e"));
        for extra in [
            "--until-ready",
            "--no-operator",
            "examples/leader/habitat.yml",
        ] {
            assert!(
                Cli::try_parse_from(["habitat-operator", "sandbox", "--kubeconfig", "k", extra])
                    .is_err(),
                "{extra} must conflict with --kubeconfig"
            );
        }
        assert!(Cli::try_parse_from(["habitat-operator", "sandbox", "--namespace", "x"]).is_err());
    }

    #[cfg(feature = "sandbox")]
    #[test]
    fn real_supervisors_are_chosen_on_both_sandbox_modes() {
        let parse = |args: &[&str]| -> SandboxArgs {
            let all = ["habitat-operator", "sandbox"].iter().chain(args);
            match Cli::try_parse_from(all).expect("valid flags").command {
                Command::Sandbox(s) => s,
                _ => panic!("not the sandbox command"),
            }
        };
        assert_eq!(parse(&[]).supervisors, Supervisors::Simulated);
        let embedded = parse(&["--supervisors", "real", "--until-ready"]);
        assert_eq!(embedded.supervisors, Supervisors::Real);
        let nodes = parse(&[
            "--kubeconfig",
            "k",
            "--supervisors",
            "real",
            "--supervisor-state-dir",
            "/tmp/s",
        ]);
        assert_eq!(nodes.supervisors, Supervisors::Real);
        assert_eq!(
            nodes.supervisor_state_dir.as_deref(),
            Some(std::path::Path::new("/tmp/s"))
        );
        assert!(
            Cli::try_parse_from(["habitat-operator", "sandbox", "--supervisors", "fake"]).is_err()
        );
    }

    #[test]
    fn zero_workers_is_refused() {
        assert!(Cli::try_parse_from(["habitat-operator", "run", "--workers", "0"]).is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
