//! Leader election over a `coordination.k8s.io/v1` Lease, so that several replicas can run
//! with one active. The holder renews the lease every retry period; another replica takes it
//! over only after it expired (no renewal for the lease duration) or was released. A holder
//! that cannot renew within the renew deadline (shorter than the lease duration) stops, so that
//! two never act at once. A holder that shuts down releases the lease (empty holder, one-second
//! duration, as client-go's `ReleaseOnCancel`), so that a standby takes over at its next retry.

use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::reconcile::conditions::{from_time, to_time};

/// Lease timing.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub duration: Duration,
    /// How long the holder keeps acting without a successful renewal; shorter than
    /// `duration`, so that it has stopped before anyone else may take over.
    pub renew_deadline: Duration,
    /// How often the holder renews and others retry.
    pub retry: Duration,
}

impl LeaseConfig {
    /// client-go's timing, except a one-second retry so that a released lease is taken over
    /// within about a second: 15 s lease, 10 s renew deadline.
    pub fn new(namespace: String, name: String, identity: String) -> Self {
        LeaseConfig {
            namespace,
            name,
            identity,
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(1),
        }
    }
}

/// Why the lease could not be handled.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server refused or failed.
    #[error("cannot read or write Lease {name}: {source}")]
    Api {
        /// The Lease.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

fn now_micro() -> MicroTime {
    MicroTime(to_time(Utc::now()).0)
}

/// Whether `lease` may be taken by `identity` now.
fn available(lease: &Lease, identity: &str) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return true;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(holder) if holder == identity => true,
        Some(_) => {
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15)) * 1000;
            let renewed = spec
                .renew_time
                .as_ref()
                .map(|t| from_time(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.0)));
            renewed.is_none_or(|r| (Utc::now() - r).num_milliseconds() > duration)
        }
    }
}

/// One attempt to acquire or renew. Returns whether this replica holds the lease afterwards.
pub async fn try_acquire(client: &Client, cfg: &LeaseConfig) -> Result<bool, LeaseError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let err = |source| LeaseError::Api {
        name: cfg.name.clone(),
        source,
    };
    let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.duration.as_secs() as i32),
        acquire_time: acquired.or_else(|| Some(now_micro())),
        renew_time: Some(now_micro()),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    match api.get_opt(&cfg.name).await.map_err(err)? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec(0, None)),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(err(e)),
            }
        }
        Some(lease) if available(&lease, &cfg.identity) => {
            let current = lease.spec.clone().unwrap_or_default();
            let ours = current.holder_identity.as_deref() == Some(cfg.identity.as_str());
            let transitions = current.lease_transitions.unwrap_or(0) + i32::from(!ours);
            let acquired = if ours { current.acquire_time } else { None };
            let updated = Lease {
                metadata: lease.metadata.clone(),
                spec: Some(spec(transitions, acquired)),
            };
            // The resourceVersion in the body makes a concurrent taker lose with 409.
            match api
                .replace(&cfg.name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(err(e)),
            }
        }
        Some(_) => Ok(false),
    }
}

/// Waits until this replica holds the lease.
pub async fn acquire(client: &Client, cfg: &LeaseConfig) {
    loop {
        match try_acquire(client, cfg).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "leader election"),
        }
        tokio::time::sleep(cfg.retry).await;
    }
}

/// Renews the lease until it is lost or no renewal succeeded within the renew deadline; then
/// returns, and the caller must stop acting at once.
pub async fn hold(client: &Client, cfg: &LeaseConfig) {
    // Counted from before the request that renewed: the lease runs from a renewTime no earlier
    // than this instant, so stopping at the deadline is before anyone may take over.
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(cfg.retry).await;
        let attempt = tokio::time::Instant::now();
        let deadline = (last_ok + cfg.renew_deadline).saturating_duration_since(attempt);
        match tokio::time::timeout(deadline, try_acquire(client, cfg)).await {
            Ok(Ok(true)) => last_ok = attempt,
            Ok(Ok(false)) => return,
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew the lease"),
            Err(_) => {}
        }
        if last_ok.elapsed() >= cfg.renew_deadline {
            return;
        }
    }
}

/// Gives the lease up if this replica holds it: empty holder and a one-second duration, so
/// that a standby may take it at its next retry instead of waiting for it to expire. Call it
/// only after this replica stopped acting.
pub async fn release(client: &Client, cfg: &LeaseConfig) -> Result<bool, LeaseError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let err = |source| LeaseError::Api {
        name: cfg.name.clone(),
        source,
    };
    let Some(lease) = api.get_opt(&cfg.name).await.map_err(err)? else {
        return Ok(false);
    };
    let current = lease.spec.clone().unwrap_or_default();
    if current.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return Ok(false);
    }
    let released = Lease {
        metadata: lease.metadata.clone(),
        spec: Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: current.acquire_time,
            renew_time: Some(now_micro()),
            lease_transitions: current.lease_transitions,
            ..LeaseSpec::default()
        }),
    };
    match api
        .replace(&cfg.name, &PostParams::default(), &released)
        .await
    {
        Ok(_) => Ok(true),
        // Someone else wrote it since: it is no longer ours to release.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed_secs_ago: i64) -> Lease {
        let renewed = Utc::now() - chrono::Duration::seconds(renewed_secs_ago);
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(to_time(renewed).0)),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_fresh_lease_of_another_holder_is_not_available() {
        assert!(!available(&lease("b", 2), "a"));
    }

    #[test]
    fn an_expired_lease_or_our_own_is_available() {
        assert!(available(&lease("b", 60), "a"));
        assert!(available(&lease("a", 2), "a"));
    }

    #[test]
    fn a_released_lease_is_available_at_once() {
        let mut released = lease("b", 0);
        released.spec.as_mut().unwrap().holder_identity = None;
        assert!(available(&released, "a"));
    }

    #[test]
    fn the_holder_stops_before_anyone_may_take_over() {
        let cfg = LeaseConfig::new("ns".into(), "l".into(), "a".into());
        assert!(cfg.renew_deadline < cfg.duration);
        assert!(cfg.retry < cfg.renew_deadline);
    }
}
