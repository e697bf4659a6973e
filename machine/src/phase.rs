//! The plain `Phase` enum: what `.status.phase` holds and what metrics are labelled with.

use std::fmt;
use std::str::FromStr;

/// A lifecycle phase, as persisted in `.status.phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Accepted, nothing created yet.
    Pending,
    /// The peer ConfigMap exists.
    ConfigMapReady,
    /// The ring key is resolved, or gossip is not encrypted.
    KeyReady,
    /// The StatefulSet and Services are applied; pods are starting.
    Deploying,
    /// Leader topology: the supervisors elected a leader.
    LeaderElected,
    /// Every replica is ready. The steady phase.
    Ready,
    /// The spec of a Ready object changed; the rollout is in progress.
    Updating,
    /// The object is being deleted.
    Terminating,
}

impl Phase {
    /// Every phase, in lifecycle order.
    pub const ALL: [Phase; 8] = [
        Phase::Pending,
        Phase::ConfigMapReady,
        Phase::KeyReady,
        Phase::Deploying,
        Phase::LeaderElected,
        Phase::Ready,
        Phase::Updating,
        Phase::Terminating,
    ];

    /// The name written to `.status.phase` and used as a metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::ConfigMapReady => "ConfigMapReady",
            Phase::KeyReady => "KeyReady",
            Phase::Deploying => "Deploying",
            Phase::LeaderElected => "LeaderElected",
            Phase::Ready => "Ready",
            Phase::Updating => "Updating",
            Phase::Terminating => "Terminating",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `.status.phase` value that names no phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPhase(pub String);

impl fmt::Display for UnknownPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown phase {:?}", self.0)
    }
}

impl std::error::Error for UnknownPhase {}

impl FromStr for Phase {
    type Err = UnknownPhase;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Phase::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPhase(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_round_trips_through_its_name() {
        for p in Phase::ALL {
            assert_eq!(p.to_string().parse::<Phase>(), Ok(p));
        }
    }

    #[test]
    fn an_unknown_name_is_an_error_that_names_it() {
        let err = "Running".parse::<Phase>().unwrap_err();
        assert_eq!(err.to_string(), "unknown phase \"Running\"");
    }
}
