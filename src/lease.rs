//! Leader election over a `coordination.k8s.io/v1` Lease, so that several replicas can run
//! with one active. The holder renews the lease; another replica takes it over only after it
//! expired. A holder that cannot renew in time exits, so that two never act at once.

use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::conditions::{from_time, to_time};

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
    /// How often the holder renews and others retry.
    pub retry: Duration,
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
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
            let renewed = spec
                .renew_time
                .as_ref()
                .map(|t| from_time(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.0)));
            renewed.is_none_or(|r| (Utc::now() - r).num_seconds() > duration)
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

/// Renews the lease until a renewal fails for longer than the lease lasts; then returns, and
/// the caller must stop acting.
pub async fn hold(client: &Client, cfg: &LeaseConfig) {
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(cfg.retry).await;
        match try_acquire(client, cfg).await {
            Ok(true) => last_ok = tokio::time::Instant::now(),
            Ok(false) => return,
            Err(e) => tracing::warn!(error = %e, "cannot renew the lease"),
        }
        if last_ok.elapsed() >= cfg.duration {
            return;
        }
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
}
