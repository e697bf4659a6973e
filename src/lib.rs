//! habitat-operator: runs Chef Habitat services on Kubernetes.
//!
//! The reconciler reads as observe (caches) → decide ([`habitat_machine::decide`]) → act (one
//! idempotent step) → persist (one status write). See `reconcile` for the driver.
#![forbid(unsafe_code)]

pub mod api;
pub mod build;
