//! The simulated cluster components that act on the store directly: kubelet, StatefulSet
//! controller and Habitat supervisors.

pub mod kubelet;
pub mod statefulset;
pub mod supervisor;

use crate::sandbox::Options;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How often each component resyncs, besides reacting to changes.
pub const TICK: Duration = Duration::from_millis(50);

/// Running simulation tasks.
pub struct Simulation {
    tasks: Vec<JoinHandle<()>>,
    hub: Option<Arc<supervisor::Hub>>,
}

/// How long a loop lets a burst of store changes gather before it steps once for all of them.
pub const DEBOUNCE: Duration = Duration::from_millis(15);

/// Run `step` after store changes (a burst of changes counts once) and at least every [`TICK`].
/// Each step scans its whole kind, so stepping per change would make a busy sandbox quadratic.
fn spawn_loop<F>(store: Arc<Store>, mut step: F) -> JoinHandle<()>
where
    F: FnMut(&Arc<Store>) + Send + 'static,
{
    tokio::spawn(async move {
        let mut changed = store.subscribe();
        loop {
            step(&store);
            tokio::select! {
                r = changed.changed() => {
                    if r.is_ok() {
                        tokio::time::sleep(DEBOUNCE).await;
                        changed.borrow_and_update();
                    }
                }
                _ = tokio::time::sleep(TICK) => {}
            }
        }
    })
}

impl Simulation {
    /// Start the kubelet, the StatefulSet controller and (optionally) the supervisors.
    pub fn start(store: Arc<Store>, opts: &Options) -> Self {
        let hub = opts
            .simulate_supervisors
            .then(|| Arc::new(supervisor::Hub::new(store.clone())));
        let mut kubelet = kubelet::Kubelet::new(opts.pod_ready_delay, hub.clone());
        let mut tasks = vec![spawn_loop(store.clone(), move |s| kubelet.step(s)), {
            let mut controller = statefulset::Controller::default();
            spawn_loop(store.clone(), move |s| controller.step(s))
        }];
        if let Some(h) = &hub {
            let h = h.clone();
            tasks.push(spawn_loop(store, move |_| h.step()));
        }
        Simulation { tasks, hub }
    }

    /// Stop every task and close every supervisor listener.
    pub async fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(h) = self.hub {
            h.shutdown();
        }
    }
}
