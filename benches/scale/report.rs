//! One measurement as a table and as a JSON entry of `target/bench/results.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::ground::Counts;

/// Verbs that change the server's state.
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// Writes a standalone Habitat needs to reach Ready: finalizer 1, peer ConfigMap 2 (create, then
/// the pod's address), StatefulSet 1, Service 1, status 2 (it leaves Pending; it becomes Ready).
pub const MINIMAL_STANDALONE: f64 = 7.0;
/// A leader group adds the leader Service, the PodDisruptionBudget, the control-gateway Secret
/// (the operator departs dead members through it) and the leader label on the elected pod.
pub const MINIMAL_LEADER: f64 = 11.0;

/// Requests by verb and by resource.
pub struct Breakdown {
    pub total: u64,
    pub by_verb: BTreeMap<String, u64>,
    pub by_resource: BTreeMap<String, u64>,
    /// Writes other than Events.
    pub writes: u64,
    /// Event writes.
    pub events: u64,
}

impl Breakdown {
    /// `after` minus `before`.
    pub fn between(before: &Counts, after: &Counts) -> Breakdown {
        let mut b = Breakdown {
            total: 0,
            by_verb: BTreeMap::new(),
            by_resource: BTreeMap::new(),
            writes: 0,
            events: 0,
        };
        for ((verb, resource), n) in after {
            let n = n.saturating_sub(
                before
                    .get(&(verb.clone(), resource.clone()))
                    .copied()
                    .unwrap_or(0),
            );
            if n == 0 {
                continue;
            }
            b.total += n;
            *b.by_verb.entry(verb.clone()).or_default() += n;
            *b.by_resource.entry(resource.clone()).or_default() += n;
            if WRITE_VERBS.contains(&verb.as_str()) {
                if resource == "events" {
                    b.events += n;
                } else {
                    b.writes += n;
                }
            }
        }
        b
    }

    fn per(map: &BTreeMap<String, u64>, n: usize) -> Value {
        map.iter()
            .map(|(k, v)| (k.clone(), json!(round(*v as f64 / n as f64, 2))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    fn one_line(map: &BTreeMap<String, u64>, n: usize) -> String {
        map.iter()
            .map(|(k, v)| format!("{k} {:.2}", *v as f64 / n as f64))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

pub fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// One number for each run of a measurement: the floors' and the operator's.
#[derive(Default)]
pub struct PerRun {
    pub warm_up: Option<f64>,
    pub required_floor: Option<f64>,
    pub floor: Option<f64>,
    pub operator: Option<f64>,
}

impl PerRun {
    fn json(&self, digits: i32) -> serde_json::Value {
        serde_json::json!({
            "warm_up": self.warm_up.map(|v| round(v, digits)),
            "required_floor": self.required_floor.map(|v| round(v, digits)),
            "floor": self.floor.map(|v| round(v, digits)),
            "operator": self.operator.map(|v| round(v, digits)),
        })
    }

    fn line(&self, digits: usize) -> String {
        let v = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        format!(
            "warm-up {}, required floor {}, floor {}, operator {}",
            v(self.warm_up),
            v(self.required_floor),
            v(self.floor),
            v(self.operator)
        )
    }
}

/// The control plane's CPU seconds in each run, by process (`machine::ControlPlaneCpu`: its
/// kube-apiserver, etcd and kube-controller-manager).
pub struct ControlPlaneRuns {
    pub warm_up: Option<[f64; 3]>,
    pub required_floor: Option<[f64; 3]>,
    pub floor: Option<[f64; 3]>,
    pub operator: Option<[f64; 3]>,
}

/// The names of the control plane's processes, as in `results.json` (printed with `-` for `_`),
/// in the order of its parts.
const CONTROL_PLANE_KEYS: [&str; 3] = ["kube_apiserver", "etcd", "kube_controller_manager"];

impl ControlPlaneRuns {
    /// The whole control plane's seconds in each run.
    pub fn total(&self) -> PerRun {
        let sum = |v: Option<[f64; 3]>| v.map(|v| v.iter().sum());
        PerRun {
            warm_up: sum(self.warm_up),
            required_floor: sum(self.required_floor),
            floor: sum(self.floor),
            operator: sum(self.operator),
        }
    }

    /// One process's seconds in each run.
    pub fn part(&self, i: usize) -> PerRun {
        let at = |v: Option<[f64; 3]>| v.map(|v| v[i]);
        PerRun {
            warm_up: at(self.warm_up),
            required_floor: at(self.required_floor),
            floor: at(self.floor),
            operator: at(self.operator),
        }
    }

    fn json_by_process(&self) -> serde_json::Value {
        CONTROL_PLANE_KEYS
            .iter()
            .enumerate()
            .map(|(i, k)| (k.to_string(), self.part(i).json(2)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// A round after the measurement's (`--rounds`): the plain floor, the required floor (unless
/// `--no-required-floor`) and the operator's run once more, on the same server.
pub struct Round {
    /// The runs in the order they ran.
    pub order: Vec<&'static str>,
    pub floor_s: f64,
    pub required_s: Option<f64>,
    pub time_to_ready_s: f64,
    /// The control plane's CPU seconds during the plain floor's run, the required floor's and
    /// the operator's.
    pub control_plane_s: [Option<[f64; 3]>; 3],
    /// The benchmark process's CPU seconds during the same three runs.
    pub bench_s: [Option<f64>; 3],
    /// The operator process of the round, at convergence.
    pub process: RoundProcess,
}

/// What a round's operator process used until its Habitats were Ready.
pub struct RoundProcess {
    pub cpu_s_to_ready: f64,
    /// Its `VmHWM` at convergence (the measurement's own is read after the quiet period).
    pub peak_rss_mib: f64,
    pub reconciles: f64,
}

impl RoundProcess {
    pub fn cpu_ms_per_habitat(&self, n: usize) -> f64 {
        self.cpu_s_to_ready * 1000.0 / n as f64
    }
}

impl Round {
    pub fn ratio(&self) -> f64 {
        self.time_to_ready_s / self.floor_s
    }

    /// The operator's time over the required floor's.
    pub fn required_ratio(&self) -> Option<f64> {
        self.required_s.map(|r| self.time_to_ready_s / r)
    }

    /// The required floor's time over the plain floor's: what the required writes cost.
    pub fn required_over_plain(&self) -> Option<f64> {
        self.required_s.map(|r| r / self.floor_s)
    }

    pub fn order(&self) -> String {
        self.order.join(", ")
    }

    fn json(&self, n: usize) -> Value {
        let cpu = |v: Option<[f64; 3]>| v.map(|v| round(v.iter().sum(), 2));
        json!({
            "order": self.order,
            "floor_s": round(self.floor_s, 2),
            "required_floor_s": self.required_s.map(|v| round(v, 2)),
            "time_to_ready_s": round(self.time_to_ready_s, 2),
            "time_ratio": round(self.ratio(), 3),
            "time_ratio_required": self.required_ratio().map(|v| round(v, 3)),
            "cpu_ms_per_habitat": round(self.process.cpu_ms_per_habitat(n), 2),
            "reconciles_per_habitat": round(self.process.reconciles / n as f64, 2),
            "peak_rss_mib": round(self.process.peak_rss_mib, 1),
            "control_plane_cpu_s": {
                "floor": cpu(self.control_plane_s[0]),
                "required_floor": cpu(self.control_plane_s[1]),
                "operator": cpu(self.control_plane_s[2]),
            },
            "bench_process_cpu_s": {
                "floor": self.bench_s[0].map(|v| round(v, 2)),
                "required_floor": self.bench_s[1].map(|v| round(v, 2)),
                "operator": self.bench_s[2].map(|v| round(v, 2)),
            },
        })
    }
}

/// How each ground's numbers grow from one size to the next that was measured, on the medians
/// of the rounds: the targets compare N = 5000 with 1000 on the sandbox (time and memory within
/// 5.5 times) and N = 1000 with 100 on the real ground (CPU per Habitat within 1.2 times).
/// With `resync`, the operator's resync interval: a size whose median run outlasts it says so,
/// since every settled Habitat is read again each interval, work that grows with N times the
/// run's length and so faster than N: at a 5 s resync the sandbox's N = 5000 took 5.51 times
/// N = 1000, at 60 s 4.81 times.
pub fn print_scaling(measured: &[Measurement], resync: std::time::Duration) {
    let pairs: Vec<_> = measured
        .windows(2)
        .filter(|w| w[0].ground == w[1].ground && w[0].n < w[1].n)
        .collect();
    if pairs.is_empty() {
        return;
    }
    println!("\nscaling (medians of each size's rounds)");
    for w in pairs {
        let (a, b) = (&w[0], &w[1]);
        let grow = |f: fn(&Measurement) -> Vec<f64>| match (median(&f(a)), median(&f(b))) {
            (Some(x), Some(y)) if x > 0.0 => format!("{:.2}", y / x),
            _ => "-".into(),
        };
        println!(
            "  {} ground, N = {} to {} ({:.1} times the work): time to Ready {}, peak RSS {}, CPU per Habitat {}",
            a.ground,
            a.n,
            b.n,
            b.n as f64 / a.n as f64,
            grow(Measurement::round_times),
            grow(Measurement::round_peak_rss_mib),
            grow(Measurement::round_cpu_ms_per_habitat),
        );
        let run = median(&b.round_times()).unwrap_or(b.time_to_ready_s);
        if run > resync.as_secs_f64() {
            println!(
                "    the runs at N = {} (median {run:.1} s) outlast the resync interval ({} s): \
                 each settled Habitat is read again every interval, so the operator's work grows \
                 faster than N (--resync-seconds)",
                b.n,
                resync.as_secs()
            );
        }
    }
}

/// The median of `values` (the mean of the middle two when they are even); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    match v.len() {
        0 => None,
        len if len % 2 == 1 => Some(v[mid]),
        _ => Some((v[mid - 1] + v[mid]) / 2.0),
    }
}

/// The operator restarted over the settled Habitats (`restart` in main.rs).
pub struct Restart {
    /// From its start until its caches synced (their first lists).
    pub synced_s: f64,
    /// From its caches' sync until it had reconciled every Habitat once.
    pub settled_s: f64,
    pub peak_rss_mib: f64,
    /// Its requests, from its start until then.
    pub requests: Breakdown,
}

/// Everything measured for one (ground, N).
pub struct Measurement {
    pub ground: &'static str,
    pub n: usize,
    pub pods: usize,
    pub leader_groups: usize,
    pub workers: u16,
    pub time_to_ready_s: f64,
    /// When half, and nine in ten, of the Habitats were Ready.
    pub ready_half_s: f64,
    pub ready_p90_s: f64,
    pub floor_s: Option<f64>,
    pub floor_writes: Option<u64>,
    /// The required floor's time and writes (`floor::Floor::Required`).
    pub required_s: Option<f64>,
    pub required_writes: Option<u64>,
    /// The warm-up before the floors: its Habitats and its time (not compared).
    pub warm_up: Option<(usize, f64)>,
    /// The cores other processes on the machine kept busy during each run.
    pub others: PerRun,
    /// The benchmark process's CPU seconds in each run: its driver, the floors' clients and the
    /// simulated nodes (on the sandbox ground, its server too).
    pub bench_cpu_s: PerRun,
    /// The CPU seconds the control plane spent during each run, by process (real ground only).
    pub control_plane_cpu_s: ControlPlaneRuns,
    pub restart: Restart,
    pub requests: Breakdown,
    pub quiet: Breakdown,
    pub quiet_seconds: f64,
    pub peak_rss_mib: f64,
    pub cpu_s: f64,
    pub cpu_s_to_ready: f64,
    pub reconciles: f64,
    pub reconcile_ms: [Option<f64>; 3],
    /// The rounds after this one (`--rounds`).
    pub rounds: Vec<Round>,
}

impl Measurement {
    pub fn minimal_writes_per_habitat(&self) -> f64 {
        let leaders = self.leader_groups as f64;
        let standalone = (self.n - self.leader_groups) as f64;
        (standalone * MINIMAL_STANDALONE + leaders * MINIMAL_LEADER) / self.n as f64
    }

    pub fn writes_per_habitat(&self) -> f64 {
        self.requests.writes as f64 / self.n as f64
    }

    pub fn time_ratio(&self) -> Option<f64> {
        self.floor_s.map(|f| self.time_to_ready_s / f)
    }

    /// Every round's time ratio, this measurement's first (the floor before the operator), then
    /// the rounds after it.
    pub fn round_ratios(&self) -> Vec<f64> {
        self.time_ratio()
            .into_iter()
            .chain(self.rounds.iter().map(Round::ratio))
            .collect()
    }

    /// Every round's time to Ready, this measurement's first.
    pub fn round_times(&self) -> Vec<f64> {
        std::iter::once(self.time_to_ready_s)
            .chain(self.rounds.iter().map(|r| r.time_to_ready_s))
            .collect()
    }

    /// Every round's operator CPU per Habitat until Ready (ms), this measurement's first: the
    /// CPU-per-Habitat comparison across sizes is as noisy as the time (5.1 to 5.9 ms in five
    /// rounds of one run at N = 100), so it is judged on medians too.
    pub fn round_cpu_ms_per_habitat(&self) -> Vec<f64> {
        std::iter::once(self.cpu_s_to_ready * 1000.0 / self.n as f64)
            .chain(
                self.rounds
                    .iter()
                    .map(|r| r.process.cpu_ms_per_habitat(self.n)),
            )
            .collect()
    }

    /// Every round's peak RSS (MiB), this measurement's first (read after its quiet period).
    pub fn round_peak_rss_mib(&self) -> Vec<f64> {
        std::iter::once(self.peak_rss_mib)
            .chain(self.rounds.iter().map(|r| r.process.peak_rss_mib))
            .collect()
    }

    /// The time over the required floor's: what the operator adds to the writes it must make.
    pub fn time_ratio_required(&self) -> Option<f64> {
        self.required_s.map(|f| self.time_to_ready_s / f)
    }

    /// Every round's time over its required floor's, where it ran one, this measurement's first.
    pub fn round_ratios_required(&self) -> Vec<f64> {
        self.time_ratio_required()
            .into_iter()
            .chain(self.rounds.iter().filter_map(Round::required_ratio))
            .collect()
    }

    /// Every round's required floor over its plain floor, where it ran both, this
    /// measurement's first: what the writes the issue requires cost on this server.
    pub fn round_required_over_plain(&self) -> Vec<f64> {
        self.required_s
            .zip(self.floor_s)
            .map(|(r, f)| r / f)
            .into_iter()
            .chain(self.rounds.iter().filter_map(Round::required_over_plain))
            .collect()
    }

    pub fn to_json(&self) -> Value {
        let n = self.n;
        let ms = |v: Option<f64>| v.map(|v| round(v, 2));
        let mut entry = json!({
            "ground": self.ground,
            "n": n,
            "pods": self.pods,
            "leader_groups": self.leader_groups,
            "workers": self.workers,
            "time_to_ready_s": round(self.time_to_ready_s, 2),
            "half_ready_s": round(self.ready_half_s, 2),
            "p90_ready_s": round(self.ready_p90_s, 2),
            "floor_s": self.floor_s.map(|v| round(v, 2)),
            "time_ratio": self.time_ratio().map(|v| round(v, 3)),
            "required_floor_s": self.required_s.map(|v| round(v, 2)),
            "time_ratio_required": self.time_ratio_required().map(|v| round(v, 3)),
            "warm_up_habitats": self.warm_up.map(|(w, _)| w),
            "warm_up_s": self.warm_up.map(|(_, s)| round(s, 2)),
            "other_processes_cores": self.others.json(2),
            "bench_process_cpu_s": self.bench_cpu_s.json(2),
            "control_plane_cpu_s": self.control_plane_cpu_s.total().json(2),
            "control_plane_cpu_by_process_s": self.control_plane_cpu_s.json_by_process(),
            "required_floor_writes_per_habitat": self.required_writes.map(|w| round(w as f64 / n as f64, 2)),
            "requests_per_habitat": {
                "total": round(self.requests.total as f64 / n as f64, 2),
                "by_verb": Breakdown::per(&self.requests.by_verb, n),
                "by_resource": Breakdown::per(&self.requests.by_resource, n),
            },
            "minimal_writes_per_habitat": round(self.minimal_writes_per_habitat(), 2),
            "writes_per_habitat": round(self.writes_per_habitat(), 2),
            "writes_ratio": round(self.writes_per_habitat() / self.minimal_writes_per_habitat(), 3),
            "events_per_habitat": round(self.requests.events as f64 / n as f64, 2),
            "floor_writes_per_habitat": self.floor_writes.map(|w| round(w as f64 / n as f64, 2)),
            "quiet_requests": self.quiet.total,
            "quiet_requests_by_verb": self.quiet.by_verb,
            "quiet_requests_by_resource": self.quiet.by_resource,
            "quiet_seconds": round(self.quiet_seconds, 1),
            "peak_rss_mib": round(self.peak_rss_mib, 1),
            "cpu_s": round(self.cpu_s, 2),
            "cpu_s_to_ready": round(self.cpu_s_to_ready, 2),
            "cpu_ms_per_habitat": round(self.cpu_s_to_ready * 1000.0 / n as f64, 2),
            "reconciles_per_habitat": round(self.reconciles / n as f64, 2),
            "restart": {
                "synced_s": round(self.restart.synced_s, 1),
                "settled_s": round(self.restart.settled_s, 2),
                "peak_rss_mib": round(self.restart.peak_rss_mib, 1),
                "writes": self.restart.requests.writes,
                "events": self.restart.requests.events,
                "requests_by_verb": self.restart.requests.by_verb,
            },
            "reconcile_p50_ms": ms(self.reconcile_ms[0]),
            "reconcile_p90_ms": ms(self.reconcile_ms[1]),
            "reconcile_p99_ms": ms(self.reconcile_ms[2]),
        });
        let ratios = self.round_ratios();
        entry["rounds"] = ratios.len().into();
        entry["time_ratio_median"] = median(&ratios).map(|v| round(v, 3)).into();
        let med = |v: Vec<f64>, places| median(&v).map(|m| round(m, places));
        entry["time_to_ready_median_s"] = med(self.round_times(), 2).into();
        entry["cpu_ms_per_habitat_median"] = med(self.round_cpu_ms_per_habitat(), 2).into();
        entry["peak_rss_mib_median"] = med(self.round_peak_rss_mib(), 1).into();
        entry["time_ratio_required_median"] = med(self.round_ratios_required(), 3).into();
        entry["required_over_floor_median"] = med(self.round_required_over_plain(), 3).into();
        entry["more_rounds"] = self.rounds.iter().map(|r| r.json(n)).collect();
        entry
    }

    pub fn print(&self) {
        let n = self.n;
        let row = |k: &str, v: String| println!("  {k:<34} {v}");
        println!(
            "\n{} ground, N = {n} ({} pods, {} leader groups, {} workers)",
            self.ground, self.pods, self.leader_groups, self.workers
        );
        row(
            "time to all Ready",
            format!("{:.2} s", self.time_to_ready_s),
        );
        row(
            "half, nine in ten Ready",
            format!("{:.2} s, {:.2} s", self.ready_half_s, self.ready_p90_s),
        );
        if let Some((w, s)) = self.warm_up {
            row(
                "warm-up (plain client, not compared)",
                format!("{w} Habitats, {s:.2} s"),
            );
        }
        match self.floor_s {
            Some(f) => {
                row("floor (plain client)", format!("{f:.2} s"));
                row("time ratio", format!("{:.2}", self.time_to_ready_s / f));
            }
            None => row("floor (plain client)", "not run".into()),
        }
        for (i, r) in self.rounds.iter().enumerate() {
            row(
                &format!("round {} ({})", i + 2, r.order()),
                format!(
                    "floor {:.2} s,{} operator {:.2} s, ratio {:.2}; operator CPU {:.2} ms per Habitat, peak RSS {:.1} MiB",
                    r.floor_s,
                    r.required_s
                        .map(|s| format!(" required floor {s:.2} s,"))
                        .unwrap_or_default(),
                    r.time_to_ready_s,
                    r.ratio(),
                    r.process.cpu_ms_per_habitat(n),
                    r.process.peak_rss_mib
                ),
            );
        }
        if !self.rounds.is_empty() {
            let ratios = self.round_ratios();
            if let Some(m) = median(&ratios) {
                row(
                    &format!("time ratio, median of {} rounds", ratios.len()),
                    format!("{m:.2}"),
                );
            }
            let required = self.round_ratios_required();
            if let (Some(q), Some(p)) =
                (median(&required), median(&self.round_required_over_plain()))
            {
                row(
                    &format!("required floor, median of {} rounds", required.len()),
                    format!("operator/required {q:.2}, required/plain {p:.2}"),
                );
            }
            if let (Some(t), Some(c), Some(m)) = (
                median(&self.round_times()),
                median(&self.round_cpu_ms_per_habitat()),
                median(&self.round_peak_rss_mib()),
            ) {
                row(
                    "medians: Ready, CPU, peak RSS",
                    format!("{t:.2} s, {c:.2} ms per Habitat, {m:.1} MiB"),
                );
            }
        }
        if let Some(f) = self.required_s {
            row("required floor (+ required writes)", format!("{f:.2} s"));
            row(
                "time ratio to the required floor",
                format!("{:.2}", self.time_to_ready_s / f),
            );
        }
        row("other processes' cores (busy)", self.others.line(2));
        row("benchmark process CPU s", self.bench_cpu_s.line(2));
        if self.control_plane_cpu_s.operator.is_some() {
            row(
                "control plane CPU s",
                self.control_plane_cpu_s.total().line(2),
            );
            for (i, key) in CONTROL_PLANE_KEYS.iter().enumerate() {
                row(
                    &format!("  {}", key.replace('_', "-")),
                    self.control_plane_cpu_s.part(i).line(2),
                );
            }
        }
        row(
            "requests per Habitat",
            format!("{:.2}", self.requests.total as f64 / n as f64),
        );
        row("  by verb", Breakdown::one_line(&self.requests.by_verb, n));
        row(
            "  by resource",
            Breakdown::one_line(&self.requests.by_resource, n),
        );
        row(
            "writes per Habitat (no Events)",
            format!(
                "{:.2} (minimal {:.2}, ratio {:.3})",
                self.writes_per_habitat(),
                self.minimal_writes_per_habitat(),
                self.writes_per_habitat() / self.minimal_writes_per_habitat()
            ),
        );
        row(
            "Events per Habitat",
            format!("{:.2}", self.requests.events as f64 / n as f64),
        );
        if let Some(w) = self.floor_writes {
            row(
                "floor writes per Habitat",
                format!("{:.2}", w as f64 / n as f64),
            );
        }
        if let Some(w) = self.required_writes {
            row(
                "required floor writes per Habitat",
                format!("{:.2}", w as f64 / n as f64),
            );
        }
        row(
            "quiet requests",
            format!(
                "{} in {:.0} s ({}; {})",
                self.quiet.total,
                self.quiet_seconds,
                Breakdown::one_line(&self.quiet.by_verb, 1),
                Breakdown::one_line(&self.quiet.by_resource, 1)
            ),
        );
        row("operator peak RSS", format!("{:.1} MiB", self.peak_rss_mib));
        row(
            "restarted: peak RSS, synced, settled",
            format!(
                "{:.1} MiB, {:.1} s, {:.2} s ({} writes, {} Events, {} requests)",
                self.restart.peak_rss_mib,
                self.restart.synced_s,
                self.restart.settled_s,
                self.restart.requests.writes,
                self.restart.requests.events,
                self.restart.requests.total
            ),
        );
        row(
            "operator CPU",
            format!(
                "{:.2} s to Ready ({:.2} ms per Habitat), {:.2} s in all",
                self.cpu_s_to_ready,
                self.cpu_s_to_ready * 1000.0 / n as f64,
                self.cpu_s
            ),
        );
        row(
            "reconciles per Habitat",
            format!("{:.2}", self.reconciles / n as f64),
        );
        let q = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        row(
            "reconcile p50 / p90 / p99",
            format!(
                "{} / {} / {} ms",
                q(self.reconcile_ms[0]),
                q(self.reconcile_ms[1]),
                q(self.reconcile_ms[2])
            ),
        );
    }
}

/// `target/bench/results.json`, under `CARGO_TARGET_DIR` when that is set.
pub fn results_path() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("bench")
        .join("results.json")
}

/// Writes the entries into the results file, replacing those of the same (ground, n) and keeping
/// the others, sorted by ground and n.
pub fn save(entries: &[Value]) -> Result<PathBuf, String> {
    let path = results_path();
    let mut all: Vec<Value> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    for e in entries {
        all.retain(|o| !(o["ground"] == e["ground"] && o["n"] == e["n"]));
        all.push(e.clone());
    }
    all.sort_by_key(|e| {
        (
            e["ground"].as_str().unwrap_or_default().to_string(),
            e["n"].as_u64(),
        )
    });
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}
