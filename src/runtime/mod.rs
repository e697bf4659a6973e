//! The process around the reconciler: the command line ([`cli`]), logging ([`telemetry`]), the
//! kube Controller wired to the caches and the reconciler ([`controller`]), the operator's own
//! leader election ([`lease`]), the health and metrics endpoints ([`server`]), and [`runner`],
//! which starts them.
//! (The `sandbox` command lives beside them in `sandbox_cmd.rs` but belongs to the binary: the
//! library never imports the sandbox.)

pub mod cli;
pub mod controller;
pub mod lease;
pub mod runner;
pub mod server;
pub mod telemetry;
