//! When a failing watch tries again.
//!
//! # Flow
//!
//! Every watch's stream passes each item through [`WatchRetry::delay_after`]; after an error the
//! watch is not polled again for the delay answered, as with kube-runtime's
//! `WatchStreamExt::backoff`. An object or a list resets it.
//!
//! # Guarantees
//!
//! - A failing watch retries 0.5 s after its first error, doubling to at most
//!   [`WATCH_BACKOFF_CAP`] (5 s), with up to a quarter less as jitter.
//! - A first 410 Gone (the watch's resourceVersion expired) relists at once; a 410 right after a
//!   410 waits its turn.
//!
//! # Caveats
//!
//! - Kept instead of kube's `default_backoff` (client-go's: up to 30 s, reset only after 120 s
//!   without an error): after a 30 s API outage the watches came back up to ~50 s late, with
//!   `/readyz` already 200 (`tests/restart.rs`). `WatchStreamExt::backoff` itself cannot be used
//!   because its `Backoff` never sees the error, so it cannot relist a 410 at once.
//! - A handful of watches retrying every 5 s is no load for an API server, but the cap is the
//!   longest a cache can lag behind an API server that is back.

use std::time::Duration;

use kube::runtime::watcher;

/// The watches' retry delays: 0.5 s doubling to at most [`WATCH_BACKOFF_CAP`], with jitter.
/// kube's `default_backoff` (client-go's) grows to 30 s and is reset only after 120 s without an
/// error: after a 30 s API outage the watches came back up to ~50 s late (measured with
/// `tests/restart.rs`), with `/readyz` already 200 and changes unseen meanwhile. The cap bounds
/// that lag to a few seconds; a handful of watches per operator retrying every 5 s is no load for
/// an API server.
pub struct WatchBackoff {
    next: Duration,
}

/// The longest delay between two attempts of a failing watch.
pub const WATCH_BACKOFF_CAP: Duration = Duration::from_secs(5);
const WATCH_BACKOFF_START: Duration = Duration::from_millis(500);

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: WATCH_BACKOFF_START,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (delay * 2).min(WATCH_BACKOFF_CAP);
        // Up to a quarter less, so that the watches do not retry in lockstep.
        let jitter = rand::random::<f64>() * 0.25;
        Some(delay.mul_f64(1.0 - jitter))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = WATCH_BACKOFF_START;
    }
}

/// When a watch tries again after an error: on [`WatchBackoff`], except that a watch whose
/// resourceVersion expired (410 Gone, which makes kube's watcher relist) relists at once, as
/// client-go's reflector does. After a kube-apiserver restart every watch met a 403 (the new
/// server's authorizer not yet loaded) and then a 410; waiting out the backoff again before the
/// relist made a Habitat created then wait 8 s instead of 3 (`tests/restart.rs`). A 410 right
/// after a 410 waits, so that a server answering nothing else is not relisted in a loop.
#[derive(Default)]
pub struct WatchRetry {
    backoff: WatchBackoff,
    expired: bool,
}

impl WatchRetry {
    /// The delay before the watch is polled again after `item`, `None` for none.
    pub fn delay_after<K>(
        &mut self,
        item: &Result<watcher::Event<K>, watcher::Error>,
    ) -> Option<Duration> {
        use kube::runtime::utils::Backoff;
        match item {
            Ok(_) => {
                self.backoff.reset();
                self.expired = false;
                None
            }
            Err(watcher::Error::WatchError(status)) if status.code == 410 && !self.expired => {
                self.expired = true;
                None
            }
            Err(_) => self.backoff.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn an_expired_watch_relists_at_once_unless_it_expired_just_before() {
        let gone = || {
            let status = kube::core::Status {
                code: 410,
                ..Default::default()
            };
            Err::<watcher::Event<ConfigMap>, _>(watcher::Error::WatchError(Box::new(status)))
        };
        let refused = || Err::<watcher::Event<ConfigMap>, _>(watcher::Error::NoResourceVersion);
        let mut retry = WatchRetry::default();
        // The API server was down, came back, and the watch's resourceVersion is gone.
        let first = retry.delay_after(&refused());
        assert!(first.is_some_and(|d| d <= WATCH_BACKOFF_START), "{first:?}");
        for _ in 0..6 {
            assert!(retry.delay_after(&refused()).is_some());
        }
        assert_eq!(
            retry.delay_after(&gone()),
            None,
            "a first 410 relists at once"
        );
        // The relist answered 410 again: back off, at the cap reached before.
        let again = retry.delay_after(&gone());
        assert!(
            again.is_some_and(|d| d > WATCH_BACKOFF_CAP / 2 && d <= WATCH_BACKOFF_CAP),
            "{again:?}"
        );
        assert!(retry.delay_after(&gone()).is_some());
        // An event resets both the backoff and the 410 allowance.
        assert_eq!(
            retry.delay_after(&Ok(watcher::Event::<ConfigMap>::InitDone)),
            None
        );
        assert_eq!(retry.delay_after(&gone()), None);
        let after = retry.delay_after(&refused());
        assert!(after.is_some_and(|d| d <= WATCH_BACKOFF_START), "{after:?}");
    }
}
