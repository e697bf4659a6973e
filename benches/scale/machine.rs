//! The machine around a run: how much CPU went to processes other than the benchmark's own (the
//! benchmark with its simulated nodes, the control plane it started, the operator), so that a
//! run made beside a build says so. On this project's shared 2-core machine that was the
//! largest source of difference between days: the plain floor at N = 1000 took 127 to 145 s
//! beside other builds and 50 to 60 s on the idle machine. And how
//! much went to the control plane the benchmark started (kube-apiserver, etcd,
//! kube-controller-manager): what each run cost the server, whoever made the requests.

use crate::operator::clock_ticks;

/// The processes of the real ground's control plane, by the command names /proc gives them
/// (at most 15 bytes: `kube-controller-manager` is `kube-controller`).
const CONTROL_PLANE: [&str; 3] = ["kube-apiserver", "etcd", "kube-controller"];

/// CPU seconds of each process of the control plane, in the order of [`CONTROL_PLANE`].
pub type ControlPlaneCpu = [f64; 3];

/// CPU time so far, in seconds: the whole machine's busy time, this process tree's, and that of
/// the control plane within it.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    busy: f64,
    own: f64,
    /// The benchmark's own process alone (its driver, floors and simulated nodes).
    bench: f64,
    control_plane: ControlPlaneCpu,
    at: std::time::Instant,
}

impl Sample {
    /// Now; `None` where /proc cannot say.
    pub fn now() -> Option<Sample> {
        let (own, control_plane) = tree_cpu(std::process::id())?;
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let ticks = StatTicks::parse(&stat)?;
        Some(Sample {
            busy: machine_busy()?,
            own,
            bench: (ticks.utime + ticks.stime) / clock_ticks(),
            control_plane,
            at: std::time::Instant::now(),
        })
    }

    /// The CPU seconds each process of the control plane spent from `self` until `later` (none
    /// on the sandbox ground, whose server runs inside the benchmark).
    pub fn control_plane_until(&self, later: &Sample) -> ControlPlaneCpu {
        std::array::from_fn(|i| (later.control_plane[i] - self.control_plane[i]).max(0.0))
    }

    /// The CPU seconds the benchmark's own process (its driver, the floors' clients and the
    /// simulated nodes; on the sandbox ground its server too) spent from `self` until `later`.
    pub fn bench_until(&self, later: &Sample) -> f64 {
        (later.bench - self.bench).max(0.0)
    }

    /// The cores that other processes kept busy on average from `self` until `later`.
    pub fn others_until(&self, later: &Sample) -> f64 {
        let secs = later.at.duration_since(self.at).as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        let others = (later.busy - self.busy) - (later.own - self.own);
        (others / secs).max(0.0)
    }
}

/// The machine's busy CPU seconds, all cores (`/proc/stat`: everything but idle and iowait).
fn machine_busy() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is within user).
    let busy: f64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    Some(busy / clock_ticks())
}

/// The parent and the CPU clock ticks of a process, from its `/proc/PID/stat`.
pub struct StatTicks {
    pub ppid: u32,
    pub utime: f64,
    pub stime: f64,
    /// Of its reaped children.
    pub cutime: f64,
    pub cstime: f64,
}

impl StatTicks {
    pub fn parse(stat: &str) -> Option<StatTicks> {
        // After the command name (in parentheses): state, ppid, ... utime is the 12th field
        // from there; stime, cutime and cstime follow.
        let (_, rest) = stat.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
        Some(StatTicks {
            ppid: fields.get(1)?.parse().ok()?,
            utime: field(11)?,
            stime: field(12)?,
            cutime: field(13)?,
            cstime: field(14)?,
        })
    }
}

/// CPU seconds of `root` and its descendants, the reaped ones included (their time is in their
/// parent's `cutime` and `cstime`), and of each of the control plane's processes among them.
fn tree_cpu(root: u32) -> Option<(f64, ControlPlaneCpu)> {
    let mut parent_and_ticks = vec![];
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(t) = StatTicks::parse(&stat) else {
            continue;
        };
        let server = stat
            .split_once('(')
            .and_then(|(_, rest)| rest.rsplit_once(')'))
            .and_then(|(name, _)| CONTROL_PLANE.iter().position(|p| *p == name));
        parent_and_ticks.push((pid, t.ppid, t.utime + t.stime + t.cutime + t.cstime, server));
    }
    let mut tree = std::collections::HashSet::from([root]);
    // Parents before children is not guaranteed by /proc's order: grow until nothing joins.
    loop {
        let before = tree.len();
        for (pid, ppid, _, _) in &parent_and_ticks {
            if tree.contains(ppid) {
                tree.insert(*pid);
            }
        }
        if tree.len() == before {
            break;
        }
    }
    let (mut ticks, mut server) = (0.0, [0.0; 3]);
    for (_, _, t, part) in parent_and_ticks
        .iter()
        .filter(|(pid, ..)| tree.contains(pid))
    {
        ticks += t;
        if let Some(i) = part {
            server[*i] += t;
        }
    }
    Some((ticks / clock_ticks(), server.map(|t| t / clock_ticks())))
}
