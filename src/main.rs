//! The `habitat-operator` binary: parses the command line and hands over.
#![forbid(unsafe_code)]

mod sandbox_cmd;

use clap::Parser;
use habitat_operator::api::Habitat;
use habitat_operator::cli::{Cli, Command};
use habitat_operator::{convert, runner, telemetry};
use kube::CustomResourceExt;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
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
        Command::Convert(args) => convert::run(&args.filename),
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
