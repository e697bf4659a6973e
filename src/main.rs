//! The `habitat-operator` binary: parses the command line and hands over.
#![forbid(unsafe_code)]

// The sandbox command belongs to the binary (the library names the sandbox only for that
// command's flags), but lives with the rest of the process in runtime/. It is the cargo feature
// `sandbox`, which the image leaves out.
#[cfg(feature = "sandbox")]
#[path = "runtime/sandbox_cmd.rs"]
mod sandbox_cmd;

use clap::Parser;
use habitat_operator::api::convert;
use habitat_operator::api::Habitat;
use habitat_operator::runtime::cli::{Cli, Command};
use habitat_operator::runtime::{runner, telemetry};
use kube::CustomResourceExt;

/// mimalloc rather than the C library's malloc: glibc's was 28% of the operator's CPU samples at
/// N = 1000 (`_int_malloc`, `malloc_consolidate`...), and its cost per Habitat grew with the heap;
/// musl's, in the static image, is slower still. With it the CPU per Habitat at N = 1000 went
/// from 1.41 to 1.10 times that at N = 100.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // One thread: kube's Controller polls every reconcile and watch inside its own stream, on
    // the thread that awaits it, so worker threads only ran `run`'s HTTP connections, and each
    // request crossed threads twice (context switches were 13% of the operator's CPU at
    // N = 1000). The sandbox serves the API and runs the simulated nodes too: all cores.
    let runtime = match &cli.command {
        #[cfg(feature = "sandbox")]
        Command::Sandbox(_) => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    }
    .enable_all()
    .build();
    match runtime {
        Ok(runtime) => runtime.block_on(command(cli)),
        Err(e) => {
            eprintln!("habitat-operator: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn command(cli: Cli) -> std::process::ExitCode {
    let result = match cli.command {
        Command::Crd => match serde_yaml::to_string(&Habitat::crd()) {
            Ok(yaml) => {
                print!("{yaml}");
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        },
        Command::Run(args) => {
            telemetry::init(&args.log.log_level, args.log.log_format);
            match runner::client(args.kubeconfig.as_deref()).await {
                Ok(client) => runner::run(client, &args).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
        Command::Convert(args) => convert_cmd(&args.filename),
        #[cfg(feature = "sandbox")]
        Command::Sandbox(args) => {
            telemetry::init(&args.log_level, args.log_format);
            sandbox_cmd::run(args).await
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("habitat-operator: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `convert -f PATH`: reads `PATH` (`-`: standard input), writes the converted YAML to standard
/// output and the notes and problems to standard error. Err on input that is not YAML, or when
/// a converted Habitat breaks this operator's rules (the YAML is written all the same).
fn convert_cmd(path: &std::path::Path) -> Result<(), String> {
    use std::io::Read;
    let mut input = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .read_to_string(&mut input)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
    } else {
        input = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    }
    let converted = convert::convert(&input)?;
    print!("{}", converted.yaml);
    for note in &converted.notes {
        eprintln!("note: {note}");
    }
    for problem in &converted.problems {
        eprintln!("error: {problem}");
    }
    match converted.problems.len() {
        0 => Ok(()),
        n => Err(format!(
            "{n} problem(s) in the converted Habitats; fix them before applying"
        )),
    }
}
