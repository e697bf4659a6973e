//! The pure decide path of one reconcile, per Habitat: the desired workload's fingerprints, the
//! comparison of the desired objects against the cached ones (fingerprints, peer file, rollout,
//! leader labels), the machine's steps until it waits, and the desired status compared with the
//! one the object carries. No cache reads, no I/O: the snapshot is what `observe` would have
//! read, the census what the supervisors would answer.
//!
//! The settled cases are what most reconciles are: an earlier reconcile of the same generation
//! compared the workload with the same versions of the children and the operator remembers that
//! they were current (`reconcile::memo`), so the child builders do not run. The "nothing remembered" case is the first reconcile after a
//! restart or a spec change: it builds the StatefulSet, the Services and the budget.
//!
//! `cargo bench --bench decide` (criterion). Target: under 20 µs per Habitat.

use std::collections::BTreeMap;
use std::hint::black_box;

use chrono::Utc;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use habitat_machine::{Blocker, Phase, Step};
use habitat_operator::api::{Habitat, MemberStatus, LABEL_LEADER};
use habitat_operator::children::fingerprint;
use habitat_operator::children::{self, peer_config::peer_config, Workload};
use habitat_operator::cluster::apply::FINGERPRINT_ANNOTATION;
use habitat_operator::cluster::census::Election;
use habitat_operator::reconcile::decide::{self as deciding, Decider};
use habitat_operator::reconcile::memo::VerifiedChildren;
use habitat_operator::reconcile::observe::{LeaderView, Snapshot};
use habitat_operator::reconcile::ring::KeyState;
use habitat_operator::reconcile::status::{self, Inputs, Outcome};
use habitat_operator::watch::slim::{slim_pod, slim_statefulset};
use k8s_openapi::api::apps::v1::StatefulSetStatus;
use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};

const REVISION: &str = "bench-7d4b9c";

fn habitat(name: &str, topology: &str, count: i32) -> Habitat {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "habitat.sh/v1",
        "kind": "Habitat",
        "metadata": {
            "name": name, "namespace": "bench", "uid": format!("uid-{name}"),
            "generation": 1, "resourceVersion": "100",
        },
        "spec": {
            "image": "kinvolk/redis-hab",
            "count": count,
            "service": {"name": "redis", "group": format!("g-{name}"), "topology": topology},
        },
    }))
    .expect("a valid Habitat")
}

/// `desired` as the cache holds it after the operator applied it.
fn live<K: Resource + Clone + serde::Serialize>(desired: &K) -> K {
    let mut k = desired.clone();
    k.annotations_mut()
        .insert(FINGERPRINT_ANNOTATION.into(), fingerprint(desired));
    k.meta_mut().generation = Some(1);
    k.meta_mut().resource_version = Some("7".into());
    k
}

fn pod(h: &Habitat, ordinal: usize, leader: bool) -> Pod {
    let name = h.name_any();
    let mut labels: BTreeMap<String, String> = h.child_labels();
    labels.insert("controller-revision-hash".into(), REVISION.into());
    if leader {
        labels.insert(LABEL_LEADER.into(), "true".into());
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{name}-{ordinal}"), "namespace": "bench", "labels": labels},
        "status": {
            "phase": "Running",
            "podIP": format!("10.1.0.{}", ordinal + 1),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .expect("a valid Pod")
}

/// The census the supervisors of `pods` answer: the first is the elected leader.
fn census(pods: &[Pod]) -> LeaderView {
    let ips: Vec<String> = pods
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    let members = pods
        .iter()
        .enumerate()
        .map(|(i, p)| MemberStatus {
            pod: Some(p.name_any()),
            member_id: p.name_any(),
            package: "kinvolk/redis-hab/0.1.0/20260101000000".into(),
            alive: true,
            leader: i == 0,
        })
        .collect();
    LeaderView::Observed {
        election: Election::Elected { ip: ips[0].clone() },
        pod: Some(pods[0].name_any()),
        alive: ips,
        members,
    }
}

/// A Habitat that is Ready with every child current, as the caches show it, and the census its
/// supervisors answer (leader topology).
struct Settled {
    habitat: Habitat,
    snapshot: Snapshot,
    census: Option<LeaderView>,
    /// The fingerprints the reconcile that made it Ready remembered.
    memo: VerifiedChildren,
}

fn settled(name: &str, topology: &str, count: i32) -> Settled {
    let mut h = habitat(name, topology, count);
    let leader = topology == "leader";
    let w: Workload = children::workload(&h, None);
    // As the controller's caches keep them (slimmed: the pods without specs), each stamped with
    // the fingerprint of its apply.
    let mut sts = live(&w.statefulset);
    slim_statefulset(&mut sts);
    sts.status = Some(StatefulSetStatus {
        observed_generation: Some(1),
        replicas: count,
        ready_replicas: Some(count),
        current_replicas: Some(count),
        updated_replicas: Some(count),
        current_revision: Some(REVISION.into()),
        update_revision: Some(REVISION.into()),
        ..StatefulSetStatus::default()
    });
    let pods: Vec<Pod> = (0..count as usize)
        .map(|i| pod(&h, i, leader && i == 0))
        .map(|mut p| {
            slim_pod(&mut p);
            p
        })
        .collect();
    let mut snapshot = Snapshot {
        statefulset: Some(sts),
        peer_config: None,
        headless: Some(live(&w.headless)),
        leader_service: w.leader.as_ref().map(|(svc, _)| live(svc)),
        creating: None,
        budget: w.leader.as_ref().map(|(_, pdb)| live(pdb)),
        pods: pods.clone(),
        bound_pods: vec![],
        key: KeyState::NotRequired,
        secret_problem: None,
        spec_problem: None,
        leader: LeaderView::NotObserved,
        replaced_pod: false,
    };
    let peers = Decider::default().desired(&h, &snapshot).peers;
    snapshot.peer_config = Some(live(&peer_config(&h, &peers)));
    let census = leader.then(|| census(&pods));
    // The status it carries: the one the operator wrote when it became Ready.
    let mut observed = snapshot.clone();
    if let Some(c) = &census {
        observed.leader = c.clone();
    }
    let facts = facts_of(&h, &observed);
    h.status = Some(status::desired(&Inputs {
        habitat: &h,
        phase: Phase::Ready,
        snapshot: &observed,
        facts: &facts,
        outcome: &Outcome::Waiting(Blocker::Nothing),
        phase_changed: true,
        now: Utc::now(),
    }));
    let memo = VerifiedChildren::default();
    Decider::remembering(&memo).desired(&h, &snapshot);
    Settled {
        habitat: h,
        snapshot,
        census,
        memo,
    }
}

/// One reconcile's decide path: compare, decide until the machine waits (reading the census
/// when it asks), compute the status; returns the phase and whether a status write is due. With
/// `remembered`, the fingerprints come from the memo; without, the workload is built.
fn pass(s: &Settled, mut snap: Snapshot, remembered: bool) -> (Phase, bool) {
    let h = &s.habitat;
    let mut decider = if remembered {
        Decider::remembering(&s.memo)
    } else {
        Decider::default()
    };
    let old = h.status.clone().unwrap_or_default();
    let mut phase: Phase = old
        .phase
        .as_deref()
        .and_then(|p| p.parse().ok())
        .unwrap_or(Phase::Pending);
    let start = phase;
    let outcome = loop {
        let d = decider.next(h, &snap, phase, &[]).decision;
        phase = d.phase;
        match d.step {
            Step::Advance => {}
            Step::Wait(b) => break Outcome::Waiting(b),
            Step::ObserveLeader => {
                snap.leader = s.census.clone().expect("a leader group has a census");
            }
            other => panic!("{}: a settled Habitat asked for {other:?}", h.name_any()),
        }
    };
    let facts = deciding::facts(h, &snap, &decider.desired(h, &snap));
    let new = status::desired(&Inputs {
        habitat: h,
        phase,
        snapshot: &snap,
        facts: &facts,
        outcome: &outcome,
        phase_changed: phase != start,
        now: Utc::now(),
    });
    (phase, !status::same(&new, &old))
}

/// The machine's facts about `h` in `snap`, the desired state computed afresh.
fn facts_of(h: &Habitat, snap: &Snapshot) -> habitat_machine::Facts {
    deciding::facts(h, snap, &Decider::default().desired(h, snap))
}

fn benches(c: &mut Criterion) {
    let cases = [
        (
            "settled standalone, 1 pod",
            settled("solo", "standalone", 1),
        ),
        (
            "settled standalone, 3 pods",
            settled("trio", "standalone", 3),
        ),
        (
            "settled leader group, 3 pods",
            settled("group", "leader", 3),
        ),
    ];
    for (name, case) in &cases {
        // What is measured is the settled path: Ready, nothing to do, nothing to write.
        for remembered in [true, false] {
            assert_eq!(
                pass(case, case.snapshot.clone(), remembered),
                (Phase::Ready, false),
                "{name} is not settled"
            );
        }
        // The snapshot is observe's work (copies out of the caches): made outside the timing.
        c.bench_function(name, |b| {
            b.iter_batched(
                || case.snapshot.clone(),
                |snap| pass(black_box(case), snap, true),
                BatchSize::SmallInput,
            )
        });
    }
    let (_, group) = &cases[2];
    c.bench_function("settled leader group, 3 pods, nothing remembered", |b| {
        b.iter_batched(
            || group.snapshot.clone(),
            |snap| pass(black_box(group), snap, false),
            BatchSize::SmallInput,
        )
    });
    // Its parts, for the leader group.
    let h = &group.habitat;
    let w = children::workload(h, None);
    let mut observed = group.snapshot.clone();
    observed.leader = group.census.clone().unwrap_or(LeaderView::NotObserved);
    c.bench_function("part: build the workload (leader group)", |b| {
        b.iter(|| children::workload(black_box(h), None))
    });
    c.bench_function("part: facts against the cache (leader group)", |b| {
        b.iter(|| facts_of(h, black_box(&observed)))
    });
    let facts = facts_of(h, &observed);
    c.bench_function("part: desired status and compare (leader group)", |b| {
        b.iter(|| {
            let new = status::desired(&Inputs {
                habitat: h,
                phase: Phase::Ready,
                snapshot: &observed,
                facts: &facts,
                outcome: &Outcome::Waiting(Blocker::Nothing),
                phase_changed: false,
                now: Utc::now(),
            });
            status::same(&new, h.status.as_ref().expect("a status"))
        })
    });
    c.bench_function("part: fingerprint of the StatefulSet", |b| {
        b.iter(|| fingerprint(black_box(&w.statefulset)))
    });
}

criterion_group!(decide_path, benches);
criterion_main!(decide_path);
