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
