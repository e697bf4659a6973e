//! Injected faults: a flaky API server on purpose.
//!
//! `--faults server-errors=0.2,conflicts=0.1,expired=0.1,watch-cut=5s,latency=0-50ms` parses
//! into [`Faults`] (`FromStr`, so clap takes it with `value_parser`). Every key is optional:
//!
//! - `server-errors=RATE`: that share of requests is answered 500, 503 or 429 (one third each),
//!   with the `metav1.Status` body a real kube-apiserver sends; 503 and 429 carry
//!   `Retry-After: 1`.
//! - `conflicts=RATE`: that share of writes to a named object (PUT, PATCH, DELETE) is answered
//!   409 Conflict, "the object has been modified".
//! - `expired=RATE`: that share of lists and watches from a given resourceVersion (not `""`,
//!   not `"0"`) is answered 410 Expired, as if the version had been compacted: a list gets the
//!   410 Status, a watch gets it as its ERROR event (as kube-apiserver does).
//! - `watch-cut=DURATION`: every watch stream is cut (the connection aborted mid-body) this
//!   long after it opens.
//! - `latency=MIN-MAX` (or one duration): every request waits a uniformly random time in that
//!   range before it is served.
//! - `only=PREFIX`: faults hit only clients whose User-Agent starts with PREFIX (for example
//!   `habitat-operator`, the operator's own User-Agent); by default every client is hit.
//!
//! RATE is a fraction (`0.2`) or a percentage (`20%`); DURATION is a number with `ms`, `s` or
//! `m`. The sandbox's own simulated nodes (User-Agent `habitat-sandbox/...`) are always
//! exempt: they play kubelets and supervisors, and the faults are there to test the operator.

use crate::error::ApiError;
use axum::http::Method;
use rand::Rng;
use serde_json::{json, Value};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The User-Agent prefix of the sandbox's own clients (the simulated nodes): never faulted.
pub const SANDBOX_USER_AGENT: &str = "habitat-sandbox";

/// What to inject, and how often.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Share of requests answered 500, 503 or 429.
    pub server_errors: f64,
    /// Share of writes to a named object answered 409 Conflict.
    pub conflicts: f64,
    /// Share of lists and watches from a resourceVersion answered 410 Expired.
    pub expired: f64,
    /// Watch streams are cut this long after they open.
    pub watch_cut: Option<Duration>,
    /// Added latency: a uniformly random wait in this range.
    pub latency: (Duration, Duration),
    /// Only clients whose User-Agent starts with this are hit.
    pub only: Option<String>,
}

impl Faults {
    /// True when nothing is injected.
    pub fn is_none(&self) -> bool {
        self.server_errors == 0.0
            && self.conflicts == 0.0
            && self.expired == 0.0
            && self.watch_cut.is_none()
            && self.latency.1.is_zero()
    }

    /// Whether a client with this User-Agent is hit.
    pub fn applies_to(&self, user_agent: &str) -> bool {
        if self.is_none() || user_agent.starts_with(SANDBOX_USER_AGENT) {
            return false;
        }
        self.only
            .as_deref()
            .is_none_or(|prefix| user_agent.starts_with(prefix))
    }
}

fn parse_rate(key: &str, v: &str) -> Result<f64, String> {
    let (num, scale) = match v.strip_suffix('%') {
        Some(p) => (p, 100.0),
        None => (v, 1.0),
    };
    let r: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{key}: {v:?} is not a rate (0.2 or 20%)"))?;
    let r = r / scale;
    if !(0.0..=1.0).contains(&r) || !r.is_finite() {
        return Err(format!("{key}: {v:?} is not between 0 and 1 (0% and 100%)"));
    }
    Ok(r)
}

fn parse_duration(key: &str, v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let (num, unit) = if let Some(n) = v.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60.0)
    } else {
        return Err(format!("{key}: {v:?} needs a unit (ms, s or m)"));
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{key}: {v:?} is not a duration (50ms, 5s, 1m)"))?;
    if !n.is_finite() || n < 0.0 || n * unit > 3600.0 {
        return Err(format!("{key}: {v:?} is not between 0 and 1 hour"));
    }
    Ok(Duration::from_secs_f64(n * unit))
}

/// `0-50ms`, `10ms-50ms`, `20ms`: the unit of the upper bound applies to a bare lower bound.
fn parse_range(key: &str, v: &str) -> Result<(Duration, Duration), String> {
    let Some((lo, hi)) = v.split_once('-') else {
        let d = parse_duration(key, v)?;
        return Ok((d, d));
    };
    let hi_d = parse_duration(key, hi)?;
    let lo = lo.trim();
    let lo_d = if lo.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let unit: String = hi
            .trim()
            .chars()
            .skip_while(|c| !c.is_alphabetic())
            .collect();
        parse_duration(key, &format!("{lo}{unit}"))?
    } else {
        parse_duration(key, lo)?
    };
    if lo_d > hi_d {
        return Err(format!("{key}: {v:?}: the lower bound is above the upper"));
    }
    Ok((lo_d, hi_d))
}

impl FromStr for Faults {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut f = Faults::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: expected KEY=VALUE"))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "server-errors" => f.server_errors = parse_rate(key, value)?,
                "conflicts" => f.conflicts = parse_rate(key, value)?,
                "expired" => f.expired = parse_rate(key, value)?,
                "watch-cut" => {
                    let d = parse_duration(key, value)?;
                    if d.is_zero() {
                        return Err(format!("{key}: the interval must be above 0"));
                    }
                    f.watch_cut = Some(d);
                }
                "latency" => f.latency = parse_range(key, value)?,
                "only" if !value.is_empty() => f.only = Some(value.to_string()),
                _ => {
                    return Err(format!(
                        "unknown fault {key:?} (known: server-errors, conflicts, expired, \
                         watch-cut, latency, only)"
                    ))
                }
            }
        }
        Ok(f)
    }
}

fn fmt_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

impl fmt::Display for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.server_errors > 0.0 {
            parts.push(format!("server-errors={}", self.server_errors));
        }
        if self.conflicts > 0.0 {
            parts.push(format!("conflicts={}", self.conflicts));
        }
        if self.expired > 0.0 {
            parts.push(format!("expired={}", self.expired));
        }
        if let Some(d) = self.watch_cut {
            parts.push(format!("watch-cut={}", fmt_duration(d)));
        }
        if !self.latency.1.is_zero() {
            parts.push(format!(
                "latency={}-{}",
                fmt_duration(self.latency.0),
                fmt_duration(self.latency.1)
            ));
        }
        if let Some(p) = &self.only {
            parts.push(format!("only={p}"));
        }
        write!(f, "{}", parts.join(","))
    }
}

/// The faults of a running server, with counts of what was injected.
#[derive(Debug, Default)]
pub struct Injector {
    /// The configuration.
    pub faults: Faults,
    requests: AtomicU64,
    server_errors: [AtomicU64; 3],
    conflicts: AtomicU64,
    expired: AtomicU64,
    watch_cuts: AtomicU64,
}

/// A fault chosen for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Injected {
    /// Answer this error instead of serving the request.
    Error(ApiError, Option<u64>),
    /// A watch from a resourceVersion: send this 410 as its ERROR event.
    WatchExpired(ApiError),
}

impl Injector {
    /// An injector for `faults`.
    pub fn new(faults: Faults) -> Self {
        Injector {
            faults,
            ..Default::default()
        }
    }

    /// The added latency of one request.
    pub fn latency(&self) -> Duration {
        let (lo, hi) = self.faults.latency;
        if hi.is_zero() || lo == hi {
            return lo;
        }
        rand::thread_rng().gen_range(lo..=hi)
    }

    /// The fault, if any, for a request of a hit client. `named` is whether the path names one
    /// object; `rv` is the request's `resourceVersion`; `what` names the resource
    /// (`group`, `plural`, `name`) for the Status details.
    pub fn choose(
        &self,
        method: &Method,
        watch: bool,
        rv: Option<&str>,
        what: (&str, &str, &str),
    ) -> Option<Injected> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut rng = rand::thread_rng();
        let f = &self.faults;
        if f.server_errors > 0.0 && rng.gen_bool(f.server_errors) {
            let i = rng.gen_range(0..3usize);
            self.server_errors[i].fetch_add(1, Ordering::Relaxed);
            return Some(match i {
                0 => Injected::Error(internal_error(), None),
                1 => Injected::Error(unavailable(), Some(1)),
                _ => Injected::Error(too_many_requests(), Some(1)),
            });
        }
        let (group, plural, name) = what;
        let write = matches!(*method, Method::PUT | Method::PATCH | Method::DELETE);
        if write && !name.is_empty() && f.conflicts > 0.0 && rng.gen_bool(f.conflicts) {
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            return Some(Injected::Error(
                ApiError::conflict(group, plural, name),
                None,
            ));
        }
        let from_rv = rv.filter(|v| !v.is_empty() && *v != "0");
        // A get of one object from a resourceVersion is never too old; lists and watches are.
        if let Some(v) = from_rv.filter(|_| name.is_empty()) {
            if *method == Method::GET && f.expired > 0.0 && rng.gen_bool(f.expired) {
                self.expired.fetch_add(1, Ordering::Relaxed);
                let e = ApiError::expired(v);
                return Some(if watch {
                    Injected::WatchExpired(e)
                } else {
                    Injected::Error(e, None)
                });
            }
        }
        None
    }

    /// Counts one cut watch stream.
    pub fn count_cut(&self) {
        self.watch_cuts.fetch_add(1, Ordering::Relaxed);
    }

    /// What was injected so far, as JSON (served on `/debug/faults`).
    pub fn counts(&self) -> Value {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        json!({
            "faults": self.faults.to_string(),
            "requests": n(&self.requests),
            "serverErrors": {
                "500": n(&self.server_errors[0]),
                "503": n(&self.server_errors[1]),
                "429": n(&self.server_errors[2]),
            },
            "conflicts": n(&self.conflicts),
            "expired": n(&self.expired),
            "watchCuts": n(&self.watch_cuts),
        })
    }
}

/// kube-apiserver's 500 for an internal error.
fn internal_error() -> ApiError {
    ApiError::server_error(
        500,
        "InternalError",
        "Internal error occurred: injected fault",
    )
}

/// kube-apiserver's 503 when a backend is unavailable.
fn unavailable() -> ApiError {
    ApiError::server_error(
        503,
        "ServiceUnavailable",
        "the server is currently unable to handle the request",
    )
}

/// kube-apiserver's 429 from API priority and fairness (`NewTooManyRequests`: the delay is
/// also in `details.retryAfterSeconds`).
fn too_many_requests() -> ApiError {
    ApiError {
        details: Some(json!({"retryAfterSeconds": 1})),
        ..ApiError::server_error(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_syntax() {
        let f: Faults = "server-errors=0.2,conflicts=10%,expired=0.05,watch-cut=5s,latency=0-50ms"
            .parse()
            .unwrap();
        assert_eq!(f.server_errors, 0.2);
        assert!((f.conflicts - 0.1).abs() < 1e-9);
        assert_eq!(f.expired, 0.05);
        assert_eq!(f.watch_cut, Some(Duration::from_secs(5)));
        assert_eq!(f.latency, (Duration::ZERO, Duration::from_millis(50)));
        assert_eq!(f.only, None);
        let g: Faults = f.to_string().parse().unwrap();
        assert_eq!(g, f);
        let l: Faults = "latency=10ms-1s,only=habitat-operator".parse().unwrap();
        assert_eq!(
            l.latency,
            (Duration::from_millis(10), Duration::from_secs(1))
        );
        assert_eq!(l.only.as_deref(), Some("habitat-operator"));
        assert!(Faults::from_str("").unwrap().is_none());
    }

    #[test]
    fn refuses_nonsense_naming_the_key() {
        for (bad, word) in [
            ("server-errors=2", "server-errors"),
            ("conflicts=x", "conflicts"),
            ("watch-cut=5", "unit"),
            ("watch-cut=0s", "above 0"),
            ("latency=50ms-10ms", "lower bound"),
            ("explode=1", "unknown fault"),
            ("server-errors", "KEY=VALUE"),
        ] {
            let e = Faults::from_str(bad).unwrap_err();
            assert!(e.contains(word), "{bad}: {e}");
        }
    }

    #[test]
    fn the_sandbox_nodes_are_exempt_and_only_selects_clients() {
        let f: Faults = "server-errors=1".parse().unwrap();
        assert!(f.applies_to("kubectl/v1.33"));
        assert!(!f.applies_to("habitat-sandbox/0.1.0 (nodes)"));
        let o: Faults = "server-errors=1,only=habitat-operator".parse().unwrap();
        assert!(o.applies_to("habitat-operator/0.1.0 (habitat-operator-1)"));
        assert!(!o.applies_to("kubectl/v1.33"));
        assert!(!Faults::default().applies_to("habitat-operator/0.1.0"));
    }

    #[test]
    fn chooses_the_faults_at_their_rates() {
        let inj = Injector::new("server-errors=1".parse().unwrap());
        match inj.choose(&Method::GET, false, None, ("", "pods", "")) {
            Some(Injected::Error(e, _)) => {
                assert!([500, 503, 429].contains(&e.code), "{e:?}");
                assert_eq!(e.to_status()["kind"], "Status");
            }
            other => panic!("{other:?}"),
        }
        let c = Injector::new("conflicts=1".parse().unwrap());
        assert!(c
            .choose(&Method::GET, false, None, ("", "pods", "a"))
            .is_none());
        assert!(c
            .choose(&Method::POST, false, None, ("", "pods", ""))
            .is_none());
        match c.choose(&Method::PATCH, false, None, ("apps", "statefulsets", "a")) {
            Some(Injected::Error(e, None)) => assert_eq!((e.code, e.reason), (409, "Conflict")),
            other => panic!("{other:?}"),
        }
        let x = Injector::new("expired=1".parse().unwrap());
        assert!(x
            .choose(&Method::GET, true, Some("0"), ("", "pods", ""))
            .is_none());
        assert!(matches!(
            x.choose(&Method::GET, true, Some("42"), ("", "pods", "")),
            Some(Injected::WatchExpired(e)) if e.code == 410
        ));
        assert!(matches!(
            x.choose(&Method::GET, false, Some("42"), ("", "pods", "")),
            Some(Injected::Error(e, None)) if e.code == 410
        ));
        assert_eq!(x.counts()["expired"], 2);
    }
}
