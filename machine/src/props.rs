//! Property tests: random walks of (phase, facts) through [`decide`] never leave the declared
//! transitions, every phase resumes, and [`check_history`] accepts what a watcher can see of a
//! legal walk and refuses what no walk can produce.

use proptest::prelude::*;

use crate::{check_history, decide, phase_of, reachable, resume, Facts, Phase, Step, TRANSITIONS};

fn phase() -> impl Strategy<Value = Phase> {
    prop::sample::select(Phase::ALL.to_vec())
}

fn facts() -> impl Strategy<Value = Facts> {
    any::<[bool; 14]>().prop_map(|b| Facts {
        deleting: b[0],
        spec_invalid: b[1],
        peer_config_current: b[2],
        key_ready: b[3],
        key_can_be_generated: b[4],
        referenced_secrets_present: b[5],
        workload_current: b[6],
        spec_changed: b[7],
        rollout_done: b[8],
        pod_replacement_due: b[9],
        leader_topology: b[10],
        leader_observed: b[11],
        leader_known: b[12],
        leader_published: b[13],
    })
}

/// Facts weighted towards progress (each fact true 3 times in 4, deletion rare), so walks reach
/// the late phases as well as the early ones.
fn progressing_facts() -> impl Strategy<Value = Facts> {
    (facts(), facts(), prop::bool::weighted(0.03)).prop_map(|(a, b, deleting)| Facts {
        deleting,
        spec_invalid: a.spec_invalid && b.spec_invalid,
        peer_config_current: a.peer_config_current || b.peer_config_current,
        key_ready: a.key_ready || b.key_ready,
        key_can_be_generated: a.key_can_be_generated || b.key_can_be_generated,
        referenced_secrets_present: a.referenced_secrets_present || b.referenced_secrets_present,
        workload_current: a.workload_current || b.workload_current,
        spec_changed: a.spec_changed && b.spec_changed,
        rollout_done: a.rollout_done || b.rollout_done,
        pod_replacement_due: a.pod_replacement_due && b.pod_replacement_due,
        leader_topology: a.leader_topology,
        leader_observed: a.leader_observed || b.leader_observed,
        leader_known: a.leader_known || b.leader_known,
        leader_published: a.leader_published || b.leader_published,
    })
}

/// Walks `decide` from `start` through `events`; asserts every step on the way and returns the
/// phases persisted, in order (the start included).
fn walk(start: Phase, events: &[Facts]) -> Result<Vec<Phase>, TestCaseError> {
    let mut at = start;
    let mut phases = vec![at];
    for f in events {
        let d = decide(at, f);
        if d.phase != at {
            prop_assert!(
                TRANSITIONS.contains(&(at, d.phase)),
                "{at:?} -> {:?} under {f:?} is not declared",
                d.phase
            );
            prop_assert!(
                matches!(d.step, Step::Advance | Step::Cleanup),
                "a transition came with {:?}",
                d.step
            );
            phases.push(d.phase);
        } else {
            prop_assert_ne!(d.step, Step::Advance, "Advance without a transition");
        }
        // The machine is thrown away and resumed from the persisted phase every time.
        prop_assert_eq!(phase_of(resume(d.phase)), d.phase);
        at = d.phase;
    }
    Ok(phases)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_events_take_only_declared_transitions(
        start in phase(),
        events in prop::collection::vec(facts(), 0..64),
    ) {
        walk(start, &events)?;
    }

    #[test]
    fn what_a_watcher_sees_of_a_walk_from_pending_is_a_legal_history(
        events in prop::collection::vec(progressing_facts(), 0..64),
        keep in prop::collection::vec(any::<bool>(), 64),
    ) {
        let phases = walk(Phase::Pending, &events)?;
        // A watch may miss any write but the ones it sees come in order.
        let seen: Vec<Phase> = phases
            .iter()
            .zip(keep.iter().chain(std::iter::repeat(&true)))
            .filter_map(|(p, k)| k.then_some(*p))
            .collect();
        prop_assert_eq!(check_history(&phases), Ok(()));
        prop_assert_eq!(check_history(&seen), Ok(()));
    }

    #[test]
    fn every_phase_resumes_and_decides(p in phase(), f in facts()) {
        prop_assert_eq!(phase_of(resume(p)), p);
        let d = decide(p, &f);
        prop_assert!(d.phase == p || TRANSITIONS.contains(&(p, d.phase)));
    }

    #[test]
    fn reachability_is_transitive(a in phase(), b in phase(), c in phase()) {
        if reachable(a, b) && reachable(b, c) {
            prop_assert!(reachable(a, c));
        }
    }
}

#[test]
fn reachable_follows_the_declared_edges_only() {
    for p in Phase::ALL {
        assert!(reachable(p, p));
        assert!(reachable(Phase::Pending, p), "Pending reaches {p:?}");
        assert!(reachable(p, Phase::Terminating));
    }
    for (a, b) in TRANSITIONS {
        assert!(reachable(a, b));
    }
    // Nothing goes back to an earlier creation phase, and Terminating is final.
    assert!(!reachable(Phase::Ready, Phase::Deploying));
    assert!(!reachable(Phase::Updating, Phase::LeaderElected));
    assert!(!reachable(Phase::KeyReady, Phase::ConfigMapReady));
    assert!(!reachable(Phase::Terminating, Phase::Ready));
    assert!(reachable(Phase::Pending, Phase::Ready));
    assert!(reachable(Phase::LeaderElected, Phase::Updating));
}

#[test]
fn check_history_names_the_first_illegal_pair() {
    use Phase::*;
    assert_eq!(check_history(&[]), Ok(()));
    assert_eq!(
        check_history(&[Pending, Deploying, Ready, Updating, Ready]),
        Ok(())
    );
    assert_eq!(check_history(&[Ready, Terminating]), Ok(()));
    assert_eq!(
        check_history(&[KeyReady, Ready, Deploying, Ready]),
        Err((Ready, Deploying))
    );
    assert_eq!(
        check_history(&[Terminating, Pending]),
        Err((Terminating, Pending))
    );
}

#[test]
fn the_random_walks_reach_every_phase_and_take_every_edge() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let events = prop::collection::vec(progressing_facts(), 0..64);
    let mut edges = std::collections::BTreeSet::new();
    for _ in 0..512 {
        let walk_events = events.new_tree(&mut runner).expect("events").current();
        let phases = walk(Phase::Pending, &walk_events).expect("a legal walk");
        edges.extend(phases.windows(2).map(|w| (w[0], w[1])));
    }
    let missing: Vec<_> = TRANSITIONS.iter().filter(|e| !edges.contains(e)).collect();
    assert!(missing.is_empty(), "never taken: {missing:?}");
}
