//! The watches and their caches.
pub mod echoes;
