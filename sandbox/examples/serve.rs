//! Start a sandbox, write its kubeconfig to the path given as the first argument, apply the
//! manifests given as further arguments, and run until interrupted.

use habitat_sandbox::{Options, Sandbox};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let kubeconfig = args
        .next()
        .unwrap_or_else(|| "/tmp/sandbox.kubeconfig".into());
    let sb = Sandbox::start(Options::default()).await?;
    std::fs::write(&kubeconfig, sb.kubeconfig_yaml())?;
    for path in args {
        for line in sb.apply_yaml(&std::fs::read_to_string(&path)?).await? {
            println!("applied {line}");
        }
    }
    println!("sandbox at {} (kubeconfig {kubeconfig})", sb.url());
    tokio::signal::ctrl_c().await?;
    sb.shutdown().await;
    Ok(())
}
