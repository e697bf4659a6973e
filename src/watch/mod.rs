//! The watches and their caches.
pub mod echoes;
pub mod index;
pub mod slim;
pub mod recent;
pub mod triggers;
pub mod lean;
