//! The watches and their caches.
pub mod backoff;
pub mod cache;
pub mod echoes;
pub mod index;
pub mod lean;
pub mod recent;
pub mod slim;
pub mod triggers;
