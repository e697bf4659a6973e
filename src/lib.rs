//! habitat-operator: runs Chef Habitat services on Kubernetes.
//!
//! Layers, imports pointing down only: [`runtime`] (the process) → [`reconcile`] (observe →
//! decide → act → persist, and the policies) → [`watch`] (the watches, their caches and
//! indexes, and which events wake a Habitat) and [`cluster`] (I/O adapters) → [`children`]
//! (pure builders) → [`api`] (the types and their validation), with one shared [`error`] module
//! at the bottom.
#![forbid(unsafe_code)]

pub mod api;
pub mod children;
pub mod cluster;
pub mod error;
pub mod reconcile;
pub mod runtime;
pub mod watch;
