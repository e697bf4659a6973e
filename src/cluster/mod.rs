//! The adapters that do I/O with the cluster for a reconcile: server-side apply and delete
//! ([`apply`]), the supervisors' census over HTTP ([`census`]), departures through their control
//! gateway ([`control_gateway`]) and Kubernetes Events
//! ([`events`]). They know the API types and the children, never the pipeline that calls them.

pub mod apply;
pub mod census;
pub mod control_gateway;
pub mod events;
