//! A faithful simulated Kubernetes cluster in one process on loopback: API server, StatefulSet
//! controller, kubelet and Habitat supervisors.
// Denied, not forbidden: `nodes::habitat::process` alone allows it, for setsid, the
// parent-death signal and kill(2) of the real supervisors' processes.
#![deny(unsafe_code)]

pub mod builtins;
pub mod error;
pub mod events;
pub mod faults;
pub mod lists;
pub mod meta;
pub mod nodes;
pub mod patch;
pub mod registry;
pub mod selector;
pub mod store;
pub mod validation;

pub use error::ApiError;
pub mod sandbox;
pub mod server;
pub mod sim;

pub use faults::Faults;
pub use sandbox::{Error, Options, Sandbox};
