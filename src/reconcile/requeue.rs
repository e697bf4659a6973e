//! Per-object exponential backoff (crate `backoff`): growing delays with jitter and a cap,
//! kept per object uid and reset when the object reconciles cleanly.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use backoff::backoff::Backoff;
use backoff::ExponentialBackoff;

/// How long a settled object waits before it is looked at again without any change.
pub const RESYNC: Duration = Duration::from_secs(300);

/// Backoff state per object.
pub struct Backoffs {
    initial: Duration,
    max: Duration,
    states: Mutex<HashMap<String, ExponentialBackoff>>,
}

impl Default for Backoffs {
    fn default() -> Self {
        Backoffs::new(Duration::from_millis(500), Duration::from_secs(300))
    }
}

impl Backoffs {
    /// Delays start near `initial`, double with ±50% jitter, and never exceed `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoffs {
            initial,
            max,
            states: Mutex::new(HashMap::new()),
        }
    }

    /// The next delay for `uid`.
    pub fn next(&self, uid: &str) -> Duration {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let state = states
            .entry(uid.to_string())
            .or_insert_with(|| ExponentialBackoff {
                initial_interval: self.initial,
                current_interval: self.initial,
                randomization_factor: 0.5,
                multiplier: 2.0,
                max_interval: self.max,
                // Never give up: a Kubernetes object is retried for as long as it exists.
                max_elapsed_time: None,
                ..ExponentialBackoff::default()
            });
        // The jitter is applied around the current interval, so once that reaches the cap a
        // draw can be up to 1.5 × the cap: clamp it, the cap is a promise.
        state.next_backoff().unwrap_or(self.max).min(self.max)
    }

    /// The next delay for `uid`, and at least `server` (what the API server asked for, see
    /// [`crate::error::retry_after`]) up to the cap: a server that sheds load is not asked again sooner than
    /// it said, and a huge Retry-After does not park an object beyond the cap.
    pub fn next_at_least(&self, uid: &str, server: Option<Duration>) -> Duration {
        let delay = self.next(uid);
        server.map_or(delay, |s| delay.max(s.min(self.max)))
    }

    /// How many objects have a backoff.
    pub fn len(&self) -> usize {
        self.states.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none has.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets `uid`'s failures: the next failure starts from the initial delay.
    pub fn reset(&self, uid: &str) {
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::retry_after;
    use crate::error::tests::refused;

    #[test]
    fn the_requeue_waits_at_least_retry_after_and_at_most_the_cap() {
        let b = Backoffs::new(Duration::from_millis(100), Duration::from_secs(10));
        // A first failure backs off ~100 ms; the server asked for 3 s.
        let d = b.next_at_least("a", retry_after(&refused(429, 3)));
        assert!(d >= Duration::from_secs(3), "{d:?}");
        assert!(d <= Duration::from_secs(10), "{d:?}");
        // Once the backoff has grown past it, the backoff wins.
        for _ in 0..20 {
            b.next("b");
        }
        let d = b.next_at_least("b", Some(Duration::from_secs(1)));
        assert!(d > Duration::from_secs(4), "{d:?}");
        // A Retry-After beyond the cap waits the cap, not longer.
        let d = b.next_at_least("c", retry_after(&refused(503, 3600)));
        assert_eq!(d, Duration::from_secs(10));
        // Without one, the plain backoff.
        assert!(b.next_at_least("d", None) <= Duration::from_millis(150));
    }

    #[test]
    fn delays_grow_with_jitter_up_to_the_cap_and_reset_on_success() {
        let b = Backoffs::new(Duration::from_millis(100), Duration::from_secs(2));
        let delays: Vec<Duration> = (0..10).map(|_| b.next("a")).collect();
        assert!(delays[0] <= Duration::from_millis(150), "{delays:?}");
        assert!(delays[4] > delays[0], "{delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(3)),
            "{delays:?}"
        );
        b.reset("a");
        assert!(b.next("a") <= Duration::from_millis(150));
    }

    #[test]
    fn no_delay_exceeds_the_cap_even_with_jitter() {
        let b = Backoffs::new(Duration::from_millis(100), Duration::from_secs(2));
        let delays: Vec<Duration> = (0..60).map(|_| b.next("a")).collect();
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(2)),
            "{delays:?}"
        );
        assert!(delays[40..].iter().any(|d| *d > Duration::from_secs(1)));
    }

    #[test]
    fn objects_back_off_independently() {
        let b = Backoffs::new(Duration::from_millis(100), Duration::from_secs(60));
        for _ in 0..6 {
            b.next("a");
        }
        assert!(b.next("b") <= Duration::from_millis(150));
    }
}
