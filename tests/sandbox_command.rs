//! `habitat-operator sandbox` as a user runs it: every example becomes Ready, and a Habitat
//! that cannot progress makes `--until-ready` fail with the reason.

use std::process::Command;

fn sandbox(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_habitat-operator"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["sandbox", "--metrics-addr", "127.0.0.1:0"])
        .args(args)
        .output()
        .expect("run the sandbox");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn the_sandbox_brings_every_example_to_ready() {
    let (ok, out) = sandbox(&["--until-ready", "--timeout", "90"]);
    assert!(ok, "{out}");
    assert!(out.contains("every Habitat is Ready"), "{out}");
    let examples = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"))
        .expect("examples")
        .count();
    let applied = out
        .lines()
        .filter(|l| l.starts_with("applied Habitat/"))
        .count();
    assert!(
        applied >= examples,
        "{applied} Habitats from {examples} examples:\n{out}"
    );
}

#[test]
fn until_ready_fails_naming_what_blocks_a_habitat() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("blocked.yml");
    std::fs::write(
        &file,
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: blocked}\nspec:\n  image: kinvolk/redis-hab\n  service: {name: redis, configSecretName: absent}\n",
    )
    .expect("write");
    let (ok, out) = sandbox(&[
        "--until-ready",
        "--timeout",
        "3",
        file.to_str().unwrap_or_default(),
    ]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("default/blocked is blocked: ReferencedSecretMissing"),
        "{out}"
    );
    assert!(
        out.contains("Secret absent named in spec.service.configSecretName does not exist"),
        "{out}"
    );
}

#[test]
fn the_sandbox_stops_on_sigterm() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_habitat-operator"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "sandbox",
            "--metrics-addr",
            "127.0.0.1:0",
            "examples/standalone/habitat.yml",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the sandbox");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.starts_with("---"))),
        "the sandbox never printed its table"
    );
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .is_ok_and(|s| s.success()));
    let start = std::time::Instant::now();
    let exited = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    if exited.is_none() {
        let _ = child.kill();
    }
    assert!(exited.is_some(), "the sandbox ignored SIGTERM");
}
