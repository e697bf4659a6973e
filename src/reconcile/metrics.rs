//! Prometheus metrics: one struct of families registered once. Label values come from
//! `Phase`'s `Display` and from error categories, never from free text or object names.

use std::time::Instant;

use habitat_machine::Phase;
use prometheus::{
    histogram_opts, opts, Encoder, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Registry, TextEncoder,
};

/// The values of the `result` label of `reconciles_total`.
pub const RESULTS: [&str; 2] = ["success", "error"];

/// The operator's metric families.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    habitats: IntGaugeVec,
    transitions: IntCounterVec,
    phase_duration: HistogramVec,
    reconcile_duration: Histogram,
    reconciles: IntCounterVec,
    errors: IntCounterVec,
    backoff: Histogram,
    leader_changes: IntCounter,
    state_entries: IntGauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(env!("CARGO_PKG_VERSION"))
    }
}

impl Metrics {
    /// A fresh registry with every family registered and `build_info{version}` set to 1.
    pub fn new(version: &str) -> Self {
        let registry = Registry::new();
        let habitats = IntGaugeVec::new(
            opts!(
                "habitat_operator_habitats",
                "Habitat objects currently in each phase"
            ),
            &["phase"],
        )
        .expect("valid metric");
        let transitions = IntCounterVec::new(
            opts!(
                "habitat_operator_phase_transitions_total",
                "Phase transitions of Habitat objects"
            ),
            &["from", "to"],
        )
        .expect("valid metric");
        let phase_duration = HistogramVec::new(
            histogram_opts!(
                "habitat_operator_phase_duration_seconds",
                "Time a Habitat spent in a phase before leaving it",
                vec![
                    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
                    7200.0, 21600.0, 86400.0
                ]
            ),
            &["phase"],
        )
        .expect("valid metric");
        // Unlabelled histograms are plain `Histogram`s: a `HistogramVec` without labels has no
        // series, and so prints nothing, until its first observation.
        let reconcile_duration = Histogram::with_opts(histogram_opts!(
            "habitat_operator_reconcile_duration_seconds",
            "Duration of one reconcile",
            vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
        ))
        .expect("valid metric");
        let reconciles = IntCounterVec::new(
            opts!(
                "habitat_operator_reconciles_total",
                "Reconciles by result (success, error)"
            ),
            &["result"],
        )
        .expect("valid metric");
        let errors = IntCounterVec::new(
            opts!(
                "habitat_operator_reconcile_errors_total",
                "Failed reconciles by error category"
            ),
            &["reason"],
        )
        .expect("valid metric");
        let backoff = Histogram::with_opts(histogram_opts!(
            "habitat_operator_requeue_backoff_seconds",
            "Requeue delays chosen after failures or while waiting on the supervisors",
            vec![0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0]
        ))
        .expect("valid metric");
        let leader_changes = IntCounter::new(
            "habitat_operator_leader_changes_total",
            "Times the published leader of a leader-topology Habitat changed",
        )
        .expect("valid metric");
        let state_entries = IntGauge::new(
            "habitat_operator_habitat_state_entries",
            "Entries of the state the reconciler keeps per Habitat (backoffs, pending progress, \
             children found current, ...); back to its baseline once the Habitats are deleted",
        )
        .expect("valid metric");
        let build_info = IntGaugeVec::new(
            opts!("habitat_operator_build_info", "Build information; always 1"),
            &["version"],
        )
        .expect("valid metric");
        build_info.with_label_values(&[version]).set(1);
        for c in [
            Box::new(habitats.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(transitions.clone()),
            Box::new(phase_duration.clone()),
            Box::new(reconcile_duration.clone()),
            Box::new(reconciles.clone()),
            Box::new(errors.clone()),
            Box::new(backoff.clone()),
            Box::new(leader_changes.clone()),
            Box::new(state_entries.clone()),
            Box::new(build_info),
        ] {
            registry.register(c).expect("metric registered once");
        }
        for phase in Phase::ALL {
            habitats.with_label_values(&[phase.as_str()]).set(0);
        }
        // Labelled families print nothing until they have a series: create the known ones at 0.
        for result in RESULTS {
            reconciles.with_label_values(&[result]).inc_by(0);
        }
        for (from, to) in habitat_machine::TRANSITIONS {
            transitions
                .with_label_values(&[from.as_str(), to.as_str()])
                .inc_by(0);
            // Creating the series records no observation.
            let _ = phase_duration.with_label_values(&[from.as_str()]);
        }
        // Error series exist from the start, so dashboards and alerts see 0 rather than nothing.
        for category in crate::error::Error::CATEGORIES {
            errors.with_label_values(&[category]).inc_by(0);
        }
        Metrics {
            registry,
            habitats,
            transitions,
            phase_duration,
            reconcile_duration,
            reconciles,
            errors,
            backoff,
            leader_changes,
            state_entries,
        }
    }

    /// Sets the per-phase gauge from a full count (objects without a phase count as Pending).
    pub fn set_phase_counts<'a>(&self, phases: impl IntoIterator<Item = Option<&'a str>>) {
        let mut counts = [0i64; Phase::ALL.len()];
        for p in phases {
            let phase = p
                .and_then(|s| s.parse::<Phase>().ok())
                .unwrap_or(Phase::Pending);
            if let Some(i) = Phase::ALL.iter().position(|x| *x == phase) {
                counts[i] += 1;
            }
        }
        for (phase, n) in Phase::ALL.iter().zip(counts) {
            self.habitats.with_label_values(&[phase.as_str()]).set(n);
        }
    }

    /// Records a transition and how long the object spent in `from`.
    pub fn transition(&self, from: Phase, to: Phase, seconds_in_from: Option<f64>) {
        self.transitions
            .with_label_values(&[from.as_str(), to.as_str()])
            .inc();
        if let Some(s) = seconds_in_from {
            self.phase_duration
                .with_label_values(&[from.as_str()])
                .observe(s.max(0.0));
        }
    }

    /// Starts timing a reconcile; the time is recorded when the guard drops.
    pub fn reconcile_timer(&self) -> ReconcileTimer {
        ReconcileTimer {
            start: Instant::now(),
            histogram: self.reconcile_duration.clone(),
        }
    }

    /// Counts a successful reconcile.
    pub fn reconciled(&self) {
        self.reconciles.with_label_values(&[RESULTS[0]]).inc();
    }

    /// Counts a failed reconcile under its error category.
    pub fn failed(&self, category: &str) {
        self.reconciles.with_label_values(&[RESULTS[1]]).inc();
        self.errors.with_label_values(&[category]).inc();
    }

    /// Records a requeue delay chosen by the backoff.
    pub fn backoff(&self, seconds: f64) {
        self.backoff.observe(seconds);
    }

    /// Counts a change of the published leader.
    pub fn leader_changed(&self) {
        self.leader_changes.inc();
    }

    /// Sets how many entries the per-Habitat state holds ([`PerHabitat`](crate::reconcile::state::PerHabitat)).
    pub fn state_entries(&self, entries: usize) {
        self.state_entries
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
    }

    /// The Prometheus text exposition of every family.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// Records the reconcile duration when dropped.
pub struct ReconcileTimer {
    start: Instant,
    histogram: prometheus::Histogram,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_metric_is_exposed_from_the_start() {
        let text = Metrics::default().render();
        for name in [
            "habitat_operator_habitats",
            "habitat_operator_build_info",
            "habitat_operator_reconciles_total",
            "habitat_operator_reconcile_errors_total{reason=\"ApplyFailed\"} 0",
        ] {
            assert!(text.contains(name), "{name} missing");
        }
        for phase in Phase::ALL {
            assert!(text.contains(&format!("habitat_operator_habitats{{phase=\"{phase}\"}} 0")));
        }
    }

    /// The metric names of SPEC section 9 (and the leader-change counter the operator adds).
    const SPEC_METRICS: [&str; 9] = [
        "habitat_operator_habitats",
        "habitat_operator_phase_transitions_total",
        "habitat_operator_phase_duration_seconds",
        "habitat_operator_reconcile_duration_seconds",
        "habitat_operator_reconciles_total",
        "habitat_operator_reconcile_errors_total",
        "habitat_operator_requeue_backoff_seconds",
        "habitat_operator_build_info",
        "habitat_operator_leader_changes_total",
    ];

    #[test]
    fn a_fresh_registry_renders_every_spec_metric_with_samples() {
        let text = Metrics::new("1.2.3").render();
        for name in SPEC_METRICS {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} missing:\n{text}"
            );
            // A sample line, not only the HELP/TYPE header.
            assert!(
                text.lines()
                    .any(|l| !l.starts_with('#') && l.starts_with(name)),
                "{name} has no sample:\n{text}"
            );
        }
        for name in [
            "habitat_operator_requeue_backoff_seconds",
            "habitat_operator_reconcile_duration_seconds",
        ] {
            assert!(text.contains(&format!("{name}_count 0")), "{name}:\n{text}");
            assert!(text.contains(&format!("{name}_bucket{{le=\"+Inf\"}} 0")));
        }
        for result in RESULTS {
            assert!(text.contains(&format!(
                "habitat_operator_reconciles_total{{result=\"{result}\"}} 0"
            )));
        }
        for category in crate::error::Error::CATEGORIES {
            assert!(text.contains(&format!(
                "habitat_operator_reconcile_errors_total{{reason=\"{category}\"}} 0"
            )));
        }
        for (from, to) in habitat_machine::TRANSITIONS {
            assert!(text.contains(&format!(
                "habitat_operator_phase_transitions_total{{from=\"{from}\",to=\"{to}\"}} 0"
            )));
            assert!(text.contains(&format!(
                "habitat_operator_phase_duration_seconds_count{{phase=\"{from}\"}} 0"
            )));
        }
        assert!(text.contains("habitat_operator_build_info{version=\"1.2.3\"} 1"));
        assert!(text.contains("habitat_operator_leader_changes_total 0"));
    }

    #[test]
    fn backoff_observations_are_counted() {
        let m = Metrics::default();
        m.backoff(0.3);
        assert!(m
            .render()
            .contains("habitat_operator_requeue_backoff_seconds_count 1"));
    }

    #[test]
    fn the_phase_gauge_is_a_full_recount() {
        let m = Metrics::default();
        m.set_phase_counts([Some("Ready"), Some("Ready"), None, Some("Deploying")]);
        m.set_phase_counts([Some("Ready")]);
        let text = m.render();
        assert!(text.contains("habitat_operator_habitats{phase=\"Ready\"} 1"));
        assert!(text.contains("habitat_operator_habitats{phase=\"Pending\"} 0"));
        assert!(text.contains("habitat_operator_habitats{phase=\"Deploying\"} 0"));
    }

    #[test]
    fn transitions_count_by_from_and_to_and_time_the_left_phase() {
        let m = Metrics::default();
        m.transition(Phase::Pending, Phase::ConfigMapReady, Some(2.0));
        let text = m.render();
        assert!(text.contains(
            "habitat_operator_phase_transitions_total{from=\"Pending\",to=\"ConfigMapReady\"} 1"
        ));
        assert!(text.contains("habitat_operator_phase_duration_seconds_count{phase=\"Pending\"} 1"));
    }

    #[test]
    fn errors_are_counted_by_category() {
        let m = Metrics::default();
        m.failed("Apply");
        assert!(m
            .render()
            .contains("habitat_operator_reconcile_errors_total{reason=\"Apply\"} 1"));
        assert!(m.render().contains("habitat_operator_build_info{version="));
    }
}
