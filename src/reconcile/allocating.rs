//! Services created beside the reconciles: those that need a cluster IP.
//!
//! kube-apiserver allocates cluster IPs one at a time (an `IPAddress` object each, created in
//! turn). On the real ground at N = 100 the 30 leader Services took 0.75 s each to create
//! (median; headless Services 34 ms), most of it waiting in that line, and a leader group's first
//! pass held one of the operator's workers for all of it: 21 of the 36 worker-seconds of the
//! first 2.5 s went to waiting, and the standalone Habitats' first passes waited for free
//! workers.
//!
//! So the first apply (the create) of a Service that needs a cluster IP runs in a task of its own, at most
//! [`IN_FLIGHT`] at a time. The pass that starts it goes on as if the Service were there, and
//! later passes see it as pending ([`Allocating::pending`]) until the server answers; meanwhile
//! the Habitat's rollout is not done, so it does not become Ready without it. The answer is then
//! remembered like any write ([`RecentWrites`]), and its watch event wakes the Habitat. A create
//! that fails wakes its Habitat too, and hands the Service back: the next pass applies it in the
//! reconcile itself ([`Allocating::handed_back`]), where an error is reported and backed off as
//! any other. The write is the same server-side apply as every child's, so a Service of that
//! name made meanwhile (by another writer, or a pass that applied a newer version) is taken over;
//! over a newer version it writes an older one, whose watch event wakes the Habitat, and the next
//! pass finds it drifted and applies the newer one again.
//! A create refused because the namespace is being deleted is dropped: its Habitat goes with the
//! namespace. A Service handed back to a Habitat that is never reconciled again (deleted while
//! its create ran) is forgotten after [`HANDED_BACK_FOR`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::Stream;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use tokio::sync::{mpsc, Semaphore};

use crate::api::Habitat;
use crate::cluster::apply::{apply, stamped};
use crate::error::Disposition;
use crate::watch::recent::RecentWrites;
use crate::watch::slim::Slim;

/// Creates of Services under way at once. The server allocates one cluster IP at a time, so more
/// in flight would only wait in its line, and hold its requests.
pub const IN_FLIGHT: usize = 8;

/// How long a Service handed back waits for its Habitat's next pass. Every Habitat is reconciled
/// again within its backoff or resync, both far shorter: an entry this old belongs to a Habitat
/// that is gone. Forgetting one early costs nothing but a round trip: the next pass starts
/// another background create.
pub const HANDED_BACK_FOR: Duration = Duration::from_secs(15 * 60);

enum State {
    /// The create runs; the object is the one sent (with its fingerprint).
    Pending(Box<Service>),
    /// The last create made in the background failed, at this instant: the next pass applies it
    /// itself.
    HandedBack(Instant),
}

/// The Services being created in the background, by (namespace, name).
pub struct Allocating {
    creates: Arc<Mutex<HashMap<(String, String), State>>>,
    permits: Arc<Semaphore>,
    wake: mpsc::UnboundedSender<ObjectRef<Habitat>>,
}

/// Whether a Service needs a cluster IP allocated when created: any but a headless one.
pub fn needs_cluster_ip(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_none_or(|ip| ip != "None")
}

impl Allocating {
    /// A registry with `in_flight` creates at a time, and the stream of the Habitats whose
    /// background create handed its Service back (for the controller to reconcile).
    pub fn new(in_flight: usize) -> (Self, impl Stream<Item = ObjectRef<Habitat>> + Send) {
        let (wake, woken) = mpsc::unbounded_channel();
        let allocating = Allocating {
            creates: Default::default(),
            permits: Arc::new(Semaphore::new(in_flight.max(1))),
            wake,
        };
        let woken =
            futures::stream::unfold(
                woken,
                |mut rx| async move { rx.recv().await.map(|o| (o, rx)) },
            );
        (allocating, woken)
    }

    /// The Service `namespace/name` as sent, while its create runs.
    pub fn pending(&self, namespace: &str, name: &str) -> Option<Service> {
        match self.lock().get(&(namespace.to_string(), name.to_string())) {
            Some(State::Pending(svc)) => Some((**svc).clone()),
            _ => None,
        }
    }

    /// Whether the last background create of `namespace/name` handed it back; forgets it, so
    /// that the caller applies it itself.
    pub fn handed_back(&self, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_string(), name.to_string());
        let mut creates = self.lock();
        if matches!(creates.get(&key), Some(State::HandedBack(_))) {
            creates.remove(&key);
            return true;
        }
        false
    }

    /// Starts creating `svc` (a desired object, stamped with its fingerprint when sent) for
    /// `owner`, unless a create of it runs already. The server's answer goes to `recent`, as a
    /// write made in the reconcile would; unlike such a write's, its watch event is no echo: it
    /// wakes the Habitat, whose pass waited for it.
    pub fn start(
        &self,
        client: &kube::Client,
        recent: &Arc<RecentWrites>,
        owner: ObjectRef<Habitat>,
        svc: Service,
    ) {
        let Some(namespace) = svc.namespace() else {
            return;
        };
        let key = (namespace, svc.name_any());
        {
            let mut creates = self.lock();
            if matches!(creates.get(&key), Some(State::Pending(_))) {
                return;
            }
            forget_stale(&mut creates, Instant::now());
            creates.insert(key.clone(), State::Pending(Box::new(stamped(&svc))));
        }
        let (client, recent) = (client.clone(), recent.clone());
        let (creates, permits, wake) = (
            self.creates.clone(),
            self.permits.clone(),
            self.wake.clone(),
        );
        tokio::spawn(async move {
            let _turn = permits.acquire_owned().await;
            let result = apply(&client, &svc).await;
            let mut creates = creates.lock().unwrap_or_else(|p| p.into_inner());
            match result {
                Ok(mut written) => {
                    // Remembered before the pending entry goes, so that no pass finds neither.
                    written.slim();
                    recent.services.record(None, &written);
                    creates.remove(&key);
                    return;
                }
                // The namespace is being deleted, and the Habitat with it: no warning, as a
                // pass that meets it stops quietly, and nothing to hand back.
                Err(e) if e.disposition() == Disposition::NamespaceTerminating => {
                    tracing::debug!(namespace = %key.0, name = %key.1, "the namespace is being deleted; the Service is not created");
                    creates.remove(&key);
                    return;
                }
                Err(e) => {
                    tracing::warn!(namespace = %key.0, name = %key.1, error = %e, "creating the Service failed; the next reconcile makes it again");
                }
            }
            creates.insert(key, State::HandedBack(Instant::now()));
            drop(creates);
            let _ = wake.send(owner);
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), State>> {
        self.creates.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Forgets the Services handed back longer than [`HANDED_BACK_FOR`] before `now`.
fn forget_stale(creates: &mut HashMap<(String, String), State>, now: Instant) {
    creates.retain(|_, state| match state {
        State::Pending(_) => true,
        State::HandedBack(at) => now.saturating_duration_since(*at) < HANDED_BACK_FOR,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;

    fn service(cluster_ip: Option<&str>) -> Service {
        Service {
            spec: Some(ServiceSpec {
                cluster_ip: cluster_ip.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A Service handed back to a Habitat that never came for it (deleted while its create ran)
    /// is forgotten once it is older than `HANDED_BACK_FOR`; creates under way are kept.
    #[test]
    fn a_service_handed_back_long_ago_is_forgotten() {
        let at = Instant::now();
        let key = |name: &str| ("ns".to_string(), name.to_string());
        let mut creates = HashMap::from([
            (key("old"), State::HandedBack(at)),
            (
                key("recent"),
                State::HandedBack(at + Duration::from_secs(60)),
            ),
            (key("running"), State::Pending(Box::new(service(None)))),
        ]);
        forget_stale(&mut creates, at + HANDED_BACK_FOR - Duration::from_secs(1));
        assert_eq!(creates.len(), 3, "none is stale yet");
        forget_stale(&mut creates, at + HANDED_BACK_FOR);
        let mut left: Vec<&str> = creates.keys().map(|(_, name)| name.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["recent", "running"]);
    }

    #[test]
    fn only_a_headless_service_needs_no_cluster_ip() {
        assert!(!needs_cluster_ip(&service(Some("None"))));
        assert!(needs_cluster_ip(&service(None)));
        assert!(needs_cluster_ip(&service(Some("10.0.0.1"))));
        assert!(needs_cluster_ip(&Service::default()));
    }

    /// A create that fails wakes its Habitat, and is told once: the next pass makes it itself.
    #[tokio::test]
    async fn a_failed_create_wakes_its_habitat_and_is_told_once() {
        use futures::StreamExt;
        use kube::Resource;
        // Nothing listens on the discard port: every request fails at once.
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        let (allocating, woken) = Allocating::new(1);
        let mut woken = Box::pin(woken);
        let mut svc = service(None);
        svc.metadata.name = Some("redis-leader".into());
        svc.metadata.namespace = Some("ns".into());
        let owner = crate::api::fixtures::habitat();
        let owner_ref = ObjectRef::from_obj(&owner);
        let recent = Default::default();
        allocating.start(&client, &recent, owner_ref.clone(), svc.clone());
        let sent = allocating
            .pending("ns", "redis-leader")
            .expect("pending while the create runs");
        assert!(
            crate::cluster::apply::is_current(&sent.metadata, &svc),
            "the pending Service carries the fingerprint of the desired one"
        );
        assert!(
            !allocating.handed_back("ns", "redis-leader"),
            "not failed yet"
        );
        // Started again while it runs: no second create.
        allocating.start(&client, &recent, owner_ref.clone(), svc);
        let woke = tokio::time::timeout(std::time::Duration::from_secs(10), woken.next())
            .await
            .expect("woken within 10 s")
            .expect("a Habitat");
        assert_eq!(woke, owner_ref);
        assert_eq!(owner.meta().name.as_deref(), Some(woke.name.as_str()));
        assert!(allocating.pending("ns", "redis-leader").is_none());
        assert!(allocating.handed_back("ns", "redis-leader"));
        assert!(!allocating.handed_back("ns", "redis-leader"), "told once");
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(200), woken.next())
                .await
                .is_err(),
            "one create ran, so one failure woke the Habitat"
        );
    }
}
