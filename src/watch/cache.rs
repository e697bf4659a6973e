//! A cache of one kind fed by its watch, and the stream of objects that wakes Habitats.
//!
//! # Flow
//!
//! [`cached`] builds one kind's chain, as [the layer's doc](super) tells it; its first list waits
//! for its turn among the caches ([`ListTurns`]), and the whole runs in a task of its own
//! (`forward`), which hands the Controller only the touched objects, over a channel.
//!
//! # Guarantees
//!
//! - The store and the indexes have applied an event before any Habitat is woken by it.
//! - A trigger is the store's own object (shared, never copied): a list's end wakes every object
//!   in the store, not a second copy of the list.
//! - Watch errors never reach the Controller: they are logged and the watch retries on its own.
//! - One first list at a time over all caches; a failed list hands the turn on.
//!
//! # Caveats
//!
//! - kube-runtime's `reflector` and `watcher` are used as they are; the stream around them is the
//!   project's own because kube's `WatchStreamExt::backoff` cannot tell a 410 from other errors,
//!   kube's `Controller` pauses every trigger on any error of one stream, and its trigger streams
//!   are polled only when it takes a trigger (a watch would not retry between two triggers).
//! - Later relists (after a watch expired or failed) take no turn.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use serde::de::DeserializeOwned;

use crate::watch::backoff::WatchRetry;
use crate::watch::triggers::{Triggers, Wake, Woken};

/// Objects per page of a cache's first list. A page's response and its decoded objects make the
/// peak of a restart's memory: with kube's default of 500, a restart over 1,000 settled Habitats
/// peaked at 107 to 115 MiB (69 once settled); with 50, and the caches listing in turn, at 50 MiB,
/// for 150 requests from start to settled instead of 81.
const LIST_PAGE: u32 = 50;

/// Objects per page for pods and StatefulSets, whose responses carry their spec or pod template
/// and every field manager's record: with 25 instead of 50, a restart over 100 settled Habitats
/// peaked at 18.2 to 18.8 MiB instead of 18.8 to 21.0 (target 20), for 33 requests instead of 26.
const LIST_PAGE_LARGE: u32 = 25;

/// Objects per page of the initial list of `K`'s cache.
fn list_page<K: kube::Resource<DynamicType = ()>>() -> u32 {
    match K::kind(&()).as_ref() {
        "Pod" | "StatefulSet" => LIST_PAGE_LARGE,
        _ => LIST_PAGE,
    }
}

pub type Trigger<K> = std::pin::Pin<Box<dyn futures::Stream<Item = Arc<K>> + Send>>;

/// A cache of `K` fed by a watch, and the stream of touched objects that drives it.
/// `indexed` sees every event after the store applied it (the secondary indexes); `wake` says
/// which updates are triggers ([`Triggers`]). The triggers are the cache's own objects (shared,
/// not copied): at the end of a list, every object in the cache. Its first list waits for its
/// turn among the caches (`turns`).
pub fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
    modify: impl FnMut(&mut K) + Send + 'static,
    indexed: impl Fn(&watcher::Event<K>) + Send + 'static,
    wake: Wake,
    turns: &ListTurns,
) -> (Store<K>, Trigger<K>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = turns
        .take(watcher(api, config.page_size(list_page::<K>())))
        .inspect_err(|e| {
            tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying with backoff")
        })
        // Like `.backoff(WatchBackoff)`: after an error the watch is not polled for the delay.
        .scan(WatchRetry::default(), |retry, item| {
            let delay = retry.delay_after(&item);
            async move {
                if let Some(delay) = delay {
                    tokio::time::sleep(delay).await;
                }
                Some(item)
            }
        })
        .modify(modify);
    let stream = woken(stream, writer, indexed, wake);
    (store, forward(stream))
}

/// The caches' first lists, one cache at a time. Listed all at once, the seven caches each
/// decoded a page (its objects whole, managedFields included, before they are slimmed) at the
/// same moment: on a restart over 100 settled Habitats the operator peaked at 24 to 25 MiB
/// against 17 once settled, 19 in turn with pages of 50.
/// Later relists (after a watch expired or failed) take no turn; a list that fails hands the
/// turn on, so a kind the operator may not list holds no other cache back.
#[derive(Clone)]
pub struct ListTurns(Arc<tokio::sync::Semaphore>);

impl Default for ListTurns {
    fn default() -> Self {
        ListTurns(Arc::new(tokio::sync::Semaphore::new(1)))
    }
}

impl ListTurns {
    /// `events` (a watch) waits for its turn before its first request, and hands the turn on
    /// when its first list ended or failed.
    pub fn take<K: Send + 'static>(
        &self,
        events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    ) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send {
        let turns = self.0.clone();
        futures::stream::once(async move {
            let mut turn = turns.acquire_owned().await.ok();
            events.inspect(move |event| {
                if matches!(event, Ok(watcher::Event::InitDone) | Err(_)) {
                    drop(turn.take());
                }
            })
        })
        .flatten()
    }
}

/// The objects a watch's events wake, once `writer` has applied each event to its store:
/// shared with the store, never copied. An update wakes the store's object, a deletion the
/// deleted object, and a list's end every object in the store.
fn woken<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    writer: reflector::store::Writer<K>,
    indexed: impl Fn(&watcher::Event<K>),
    wake: Wake,
) -> impl futures::Stream<Item = Result<Arc<K>, watcher::Error>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::Serialize,
{
    let reader = writer.as_reader();
    events
        .reflect(writer)
        .inspect_ok(move |event| indexed(event))
        .scan(Triggers::new(wake), |triggers, event| {
            futures::future::ready(Some(triggers.after(event)))
        })
        .flat_map(move |woken| {
            let objects = match woken {
                None => vec![],
                // The store's object when it holds this one (an update), else this one (a
                // deletion).
                Some(Woken::Object(o)) => vec![reader
                    .get(&ObjectRef::from_obj(&o))
                    .unwrap_or_else(|| Arc::new(o))],
                Some(Woken::All) => reader.state(),
            };
            futures::stream::iter(objects.into_iter().map(Ok))
        })
}

/// Runs `stream` (a watch) in a task of its own and hands on the objects it touched.
fn forward<K: Send + Sync + 'static>(
    stream: impl futures::Stream<Item = Result<Arc<K>, watcher::Error>> + Send + 'static,
) -> Trigger<K> {
    // Polled by the Controller instead, a watch was polled only when the Controller took a
    // trigger: after a kube-apiserver outage the watches retried once, then not for tens of
    // seconds (`tests/restart.rs`). Only objects cross the channel: the Controller pauses every
    // trigger stream on kube's default backoff (up to 30 s) after each error it receives, and an
    // outage's errors held a Habitat created then back for over 90 s. The Controller deduplicates
    // what piles up in the channel.
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            let Ok(object) = item else { continue };
            if tx.send(object).is_err() {
                return;
            }
        }
    });
    let rx = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|object| (object, rx))
    });
    Box::pin(rx)
}

/// Waits until `store` has seen its first full list.
///
/// `Store::wait_until_ready` wakes only its latest waiter (one oneshot receiver behind a
/// mutex), and the Controller waits on the Habitat store too; polling again with a timeout
/// picks up the memoised result instead of sleeping forever.
pub async fn synced<K: kube::Resource<DynamicType = ()> + Clone + 'static>(store: &Store<K>) {
    loop {
        if let Ok(result) =
            tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready()).await
        {
            if result.is_err() {
                tracing::warn!("a cache writer stopped before its first list");
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::controller::Action;
    use kube::runtime::Controller;
    use kube::ResourceExt;

    fn config_map(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm
    }

    #[tokio::test]
    async fn caches_list_one_at_a_time_and_hand_the_turn_on_when_a_list_ends_or_fails() {
        use futures::FutureExt;
        // Listed all at once, the seven caches each decoded a page at the same moment: the
        // restart's peak RSS at N = 100 was 24 to 25 MiB; in turn, 19.
        let turns = ListTurns::default();
        let polled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        // A watch that counts its first poll (its list request), then yields `then`.
        let watch = |then: Vec<Result<watcher::Event<ConfigMap>, watcher::Error>>| {
            let polled = polled.clone();
            futures::stream::once(async move {
                polled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(watcher::Event::Init)
            })
            .chain(futures::stream::iter(then))
            .chain(futures::stream::pending())
        };
        let listed = || {
            vec![
                Ok(watcher::Event::InitApply(config_map("a"))),
                Ok(watcher::Event::InitDone),
                Ok(watcher::Event::Apply(config_map("a"))),
            ]
        };
        let failed = vec![Err(watcher::Error::NoResourceVersion)];
        let mut first = Box::pin(turns.take(watch(failed)));
        let mut second = Box::pin(turns.take(watch(listed())));
        let mut third = Box::pin(turns.take(watch(listed())));
        assert!(matches!(first.next().await, Some(Ok(watcher::Event::Init))));
        assert!(second.next().now_or_never().is_none());
        assert!(third.next().now_or_never().is_none());
        assert_eq!(
            polled.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one list at a time"
        );
        assert!(
            matches!(first.next().await, Some(Err(_))),
            "the first list fails"
        );
        assert!(matches!(
            second.next().await,
            Some(Ok(watcher::Event::Init))
        ));
        assert!(
            third.next().now_or_never().is_none(),
            "the second lists now"
        );
        assert!(matches!(
            second.next().await,
            Some(Ok(watcher::Event::InitApply(_)))
        ));
        assert!(
            third.next().now_or_never().is_none(),
            "its list is not over"
        );
        assert!(matches!(
            second.next().await,
            Some(Ok(watcher::Event::InitDone))
        ));
        assert!(matches!(third.next().await, Some(Ok(watcher::Event::Init))));
        assert_eq!(polled.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert!(
            matches!(second.next().await, Some(Ok(watcher::Event::Apply(_))),),
            "a watch goes on after handing its turn on"
        );
    }

    #[tokio::test]
    async fn a_lists_end_wakes_the_stores_own_objects_and_copies_none() {
        // The trigger filter kept a copy of every listed object until the list ended, beside the
        // store's: on a restart over 1,000 settled Habitats every cached object was held twice
        // (peak RSS 87.4 MiB, 59.7 since).
        let (store, writer) = reflector::store();
        let (a, b) = (config_map("a"), config_map("b"));
        let mut b2 = b.clone();
        b2.data = Some([("k".to_string(), "v".to_string())].into());
        let events = futures::stream::iter([
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(a.clone())),
            Ok(watcher::Event::InitApply(b.clone())),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(b2)),
            Ok(watcher::Event::Delete(a.clone())),
        ]);
        let out: Vec<Arc<ConfigMap>> = woken(events, writer, |_| {}, Wake::Every)
            .try_collect()
            .await
            .expect("no error");
        let names: Vec<String> = out.iter().map(|o| o.name_any()).collect();
        let mut listed = names[..2].to_vec();
        listed.sort();
        assert_eq!(
            listed,
            ["a", "b"],
            "the list's end wakes every cached object"
        );
        assert_eq!(names[2..], ["b", "a"], "then the update and the deletion");
        let b_now = store.get(&ObjectRef::from_obj(&b)).expect("b is cached");
        assert!(
            Arc::ptr_eq(&out[2], &b_now),
            "an update wakes the store's own object"
        );
        assert!(out[2].data.is_some(), "in its updated version");
        assert!(store.get(&ObjectRef::from_obj(&a)).is_none());
    }

    #[tokio::test]
    async fn watch_errors_do_not_hold_the_controller_back() {
        // A watch that failed a few times (an API outage) and then saw an object: the object is
        // reconciled at once. When the errors reached the Controller, its trigger backoff
        // (0.8 s doubling per error) held the object back for about 25 s.
        let (store, mut writer) = reflector::store();
        let cm = config_map("after-the-outage");
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(cm.clone()),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
        }
        let errors = (0..5).map(|_| Err(watcher::Error::NoResourceVersion));
        let stream = futures::stream::iter(errors.chain([Ok(Arc::new(cm))]))
            .chain(futures::stream::pending());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let controller = Controller::for_shared_stream(forward(stream), store).run(
            |cm: Arc<ConfigMap>, tx: Arc<tokio::sync::mpsc::UnboundedSender<String>>| async move {
                let _ = tx.send(cm.name_any());
                Ok::<_, kube::Error>(Action::await_change())
            },
            |_, _, _| Action::await_change(),
            Arc::new(tx),
        );
        tokio::spawn(controller.for_each(|_| async {}));
        let reconciled = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await;
        assert_eq!(
            reconciled.ok().flatten().as_deref(),
            Some("after-the-outage"),
            "the object was not reconciled within 3 s of its watch event"
        );
    }
}
