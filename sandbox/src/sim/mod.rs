//! The controllers of the sandbox's embedded API server that act on its store directly: the
//! StatefulSet controller. (On a real control plane, kube-controller-manager plays it; the
//! simulated nodes, which work on both, are in [`crate::nodes`].)

pub mod statefulset;

use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The field manager of the simulated controllers' writes, as kube-controller-manager's own
/// writes are recorded in `managedFields`.
pub const MANAGER: &str = "kube-controller-manager";

/// How often each component resyncs, besides reacting to changes.
pub const TICK: Duration = Duration::from_millis(50);

/// Running simulation tasks.
pub struct Simulation {
    tasks: Vec<JoinHandle<()>>,
}

/// Run `step` after store changes (a burst of changes counts once) and at least every [`TICK`].
/// Each step scans its whole kind, so stepping per change would make a busy sandbox quadratic:
/// changes gather for the nodes' debounce, or as long as the last step took
/// ([`crate::nodes::pause_after`]).
fn spawn_loop<F>(store: Arc<Store>, mut step: F) -> JoinHandle<()>
where
    F: FnMut(&Arc<Store>) + Send + 'static,
{
    tokio::spawn(async move {
        let mut changed = store.subscribe();
        loop {
            let began = std::time::Instant::now();
            step(&store);
            let pause = crate::nodes::pause_after(began.elapsed());
            tokio::select! {
                r = changed.changed() => {
                    if r.is_ok() {
                        tokio::time::sleep(pause).await;
                        changed.borrow_and_update();
                    }
                }
                _ = tokio::time::sleep(TICK.max(pause)) => {}
            }
        }
    })
}

impl Simulation {
    /// Start the StatefulSet controller.
    pub fn start(store: Arc<Store>) -> Self {
        let mut controller = statefulset::Controller::default();
        let tasks = vec![spawn_loop(store, move |s| controller.step(s))];
        Simulation { tasks }
    }

    /// Stop every task.
    pub async fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
    }
}
