//! habitat-operator: runs Chef Habitat services on Kubernetes.
//!
//! A reconcile reads as observe ([`observe`], caches only) → decide
//! ([`habitat_machine::decide`]) → act ([`act`], one idempotent step) → persist (one status
//! write in [`reconcile`]). Builders of child objects ([`build`]) are pure.
#![forbid(unsafe_code)]

pub mod act;
pub mod api;
pub mod apply;
pub mod build;
pub mod census;
pub mod cli;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod convert;
pub mod error;
pub mod events;
pub mod leader;
pub mod lease;
pub mod metrics;
pub mod observe;
pub mod peer;
pub mod reconcile;
pub mod requeue;
pub mod ring;
pub mod rollout;
pub mod runner;
pub mod server;
pub mod status;
pub mod telemetry;
pub mod validate;
