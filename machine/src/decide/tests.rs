//! Tests of `decide`: one per declared transition, totality over every combination of facts,
//! and whole journeys from Pending to Ready.

use super::*;

/// Facts of a healthy object whose children are all in shape.
fn settled() -> Facts {
    Facts {
        peer_config_current: true,
        key_ready: true,
        referenced_secrets_present: true,
        workload_current: true,
        rollout_done: true,
        leader_observed: true,
        leader_known: true,
        leader_published: true,
        ..Facts::default()
    }
}

fn leader() -> Facts {
    Facts {
        leader_topology: true,
        ..settled()
    }
}

#[test]
fn pending_becomes_config_map_ready_once_the_peer_config_exists() {
    let d = decide(Phase::Pending, &settled());
    assert_eq!(
        d,
        Decision {
            phase: Phase::ConfigMapReady,
            step: Step::Advance
        }
    );
}

#[test]
fn pending_applies_the_peer_config_first() {
    let f = Facts {
        peer_config_current: false,
        ..settled()
    };
    assert_eq!(
        decide(Phase::Pending, &f),
        Decision {
            phase: Phase::Pending,
            step: Step::ApplyPeerConfig
        }
    );
}

#[test]
fn config_map_ready_becomes_key_ready_when_the_key_is_resolved() {
    assert_eq!(
        decide(Phase::ConfigMapReady, &settled()).phase,
        Phase::KeyReady
    );
}

#[test]
fn a_missing_ring_key_is_generated_when_allowed_and_waited_for_otherwise() {
    let f = Facts {
        key_ready: false,
        key_can_be_generated: true,
        ..settled()
    };
    assert_eq!(decide(Phase::ConfigMapReady, &f).step, Step::ResolveRingKey);
    let f = Facts {
        key_ready: false,
        ..settled()
    };
    assert_eq!(
        decide(Phase::ConfigMapReady, &f),
        Decision {
            phase: Phase::ConfigMapReady,
            step: Step::Wait(Blocker::RingKeyMissing)
        }
    );
}

#[test]
fn key_ready_applies_the_workload_then_becomes_deploying() {
    let f = Facts {
        workload_current: false,
        ..settled()
    };
    assert_eq!(decide(Phase::KeyReady, &f).step, Step::ApplyWorkload);
    assert_eq!(decide(Phase::KeyReady, &settled()).phase, Phase::Deploying);
}

#[test]
fn a_missing_referenced_secret_blocks_the_workload() {
    let f = Facts {
        referenced_secrets_present: false,
        workload_current: false,
        ..settled()
    };
    assert_eq!(
        decide(Phase::KeyReady, &f).step,
        Step::Wait(Blocker::SecretMissing)
    );
}

#[test]
fn standalone_deploying_becomes_ready_when_the_rollout_is_done() {
    let f = Facts {
        rollout_done: false,
        ..settled()
    };
    assert_eq!(
        decide(Phase::Deploying, &f).step,
        Step::Wait(Blocker::Rollout)
    );
    assert_eq!(decide(Phase::Deploying, &settled()).phase, Phase::Ready);
}

#[test]
fn leader_deploying_observes_then_publishes_then_becomes_leader_elected() {
    let f = Facts {
        leader_observed: false,
        leader_known: false,
        leader_published: false,
        ..leader()
    };
    assert_eq!(decide(Phase::Deploying, &f).step, Step::ObserveLeader);
    let f = Facts {
        leader_known: false,
        leader_published: false,
        ..leader()
    };
    assert_eq!(
        decide(Phase::Deploying, &f).step,
        Step::Wait(Blocker::Election)
    );
    let f = Facts {
        leader_published: false,
        ..leader()
    };
    assert_eq!(decide(Phase::Deploying, &f).step, Step::PublishLeader);
    assert_eq!(
        decide(Phase::Deploying, &leader()).phase,
        Phase::LeaderElected
    );
}

#[test]
fn leader_elected_becomes_ready_when_every_replica_is_ready() {
    let f = Facts {
        rollout_done: false,
        ..leader()
    };
    assert_eq!(
        decide(Phase::LeaderElected, &f).step,
        Step::Wait(Blocker::Rollout)
    );
    assert_eq!(decide(Phase::LeaderElected, &leader()).phase, Phase::Ready);
}

#[test]
fn a_spec_change_moves_ready_to_updating_and_back_when_rolled_out() {
    let f = Facts {
        spec_changed: true,
        workload_current: false,
        ..settled()
    };
    assert_eq!(
        decide(Phase::Ready, &f),
        Decision {
            phase: Phase::Updating,
            step: Step::Advance
        }
    );
    assert_eq!(decide(Phase::Updating, &f).step, Step::ApplyWorkload);
    let f = Facts {
        rollout_done: false,
        ..settled()
    };
    assert_eq!(
        decide(Phase::Updating, &f).step,
        Step::Wait(Blocker::Rollout)
    );
    assert_eq!(decide(Phase::Updating, &settled()).phase, Phase::Ready);
}

#[test]
fn a_leader_group_reads_the_census_before_replacing_a_member() {
    let f = Facts {
        rollout_done: false,
        pod_replacement_due: true,
        leader_observed: false,
        ..leader()
    };
    assert_eq!(decide(Phase::Updating, &f).step, Step::ObserveLeader);
}

#[test]
fn updating_replaces_pods_one_at_a_time_when_the_operator_rolls_out() {
    let f = Facts {
        rollout_done: false,
        pod_replacement_due: true,
        ..leader()
    };
    assert_eq!(decide(Phase::Updating, &f).step, Step::ReplacePod);
}

#[test]
fn ready_stays_ready_when_health_is_lost() {
    let f = Facts {
        rollout_done: false,
        leader_known: false,
        ..leader()
    };
    assert_eq!(
        decide(Phase::Ready, &f),
        Decision {
            phase: Phase::Ready,
            step: Step::Wait(Blocker::Election)
        }
    );
    let f = Facts {
        rollout_done: false,
        ..settled()
    };
    assert_eq!(
        decide(Phase::Ready, &f),
        Decision {
            phase: Phase::Ready,
            step: Step::Wait(Blocker::Nothing)
        }
    );
}

#[test]
fn ready_repairs_children_without_leaving_ready() {
    let f = Facts {
        peer_config_current: false,
        ..settled()
    };
    assert_eq!(
        decide(Phase::Ready, &f),
        Decision {
            phase: Phase::Ready,
            step: Step::ApplyPeerConfig
        }
    );
    let f = Facts {
        workload_current: false,
        ..settled()
    };
    assert_eq!(
        decide(Phase::Ready, &f),
        Decision {
            phase: Phase::Ready,
            step: Step::ApplyWorkload
        }
    );
}

#[test]
fn deletion_moves_every_phase_to_terminating_with_cleanup() {
    for p in Phase::ALL {
        let f = Facts {
            deleting: true,
            ..Facts::default()
        };
        assert_eq!(
            decide(p, &f),
            Decision {
                phase: Phase::Terminating,
                step: Step::Cleanup
            },
            "from {p}"
        );
    }
}

#[test]
fn an_invalid_spec_waits_in_place() {
    for p in Phase::ALL.into_iter().filter(|p| *p != Phase::Terminating) {
        let f = Facts {
            spec_invalid: true,
            ..settled()
        };
        assert_eq!(
            decide(p, &f),
            Decision {
                phase: p,
                step: Step::Wait(Blocker::InvalidSpec)
            }
        );
    }
}

/// Every combination of the boolean facts.
fn all_facts() -> impl Iterator<Item = Facts> {
    (0u32..(1 << 14)).map(|bits| {
        let b = |i: u32| bits & (1 << i) != 0;
        Facts {
            deleting: b(0),
            spec_invalid: b(1),
            peer_config_current: b(2),
            key_ready: b(3),
            key_can_be_generated: b(4),
            referenced_secrets_present: b(5),
            workload_current: b(6),
            spec_changed: b(7),
            rollout_done: b(8),
            pod_replacement_due: b(9),
            leader_topology: b(10),
            leader_observed: b(11),
            leader_known: b(12),
            leader_published: b(13),
        }
    })
}

#[test]
fn decide_is_total_and_takes_exactly_the_declared_edges() {
    let mut taken = std::collections::HashSet::new();
    for p in Phase::ALL {
        for f in all_facts() {
            let d = decide(p, &f);
            if d.phase == p {
                assert_ne!(d.step, Step::Advance, "{p} {f:?}");
                continue;
            }
            let declared = crate::TRANSITIONS.contains(&(p, d.phase));
            assert!(declared, "undeclared edge {p} -> {} for {f:?}", d.phase);
            taken.insert((p, d.phase));
            let expected = if d.phase == Phase::Terminating {
                Step::Cleanup
            } else {
                Step::Advance
            };
            assert_eq!(d.step, expected, "{p} -> {}", d.phase);
        }
    }
    for edge in crate::TRANSITIONS {
        assert!(
            taken.contains(&edge),
            "TRANSITIONS names {edge:?}, which decide never takes"
        );
    }
}

#[test]
fn ready_is_left_only_for_updating_or_terminating() {
    for f in all_facts() {
        let d = decide(Phase::Ready, &f);
        assert!(
            matches!(d.phase, Phase::Ready | Phase::Updating | Phase::Terminating),
            "{f:?}"
        );
    }
}

/// Plays the operator: performs each step by making its fact true, until the machine waits.
fn journey(mut f: Facts) -> Vec<Phase> {
    let mut phase = Phase::Pending;
    let mut phases = vec![phase];
    for _ in 0..32 {
        let d = decide(phase, &f);
        if d.phase != phase {
            phase = d.phase;
            phases.push(phase);
        }
        match d.step {
            Step::Advance => {}
            Step::ApplyPeerConfig => f.peer_config_current = true,
            Step::ResolveRingKey => f.key_ready = true,
            Step::ApplyWorkload => f.workload_current = true,
            Step::ReplacePod => f.pod_replacement_due = false,
            Step::ObserveLeader => {
                f.leader_observed = true;
                f.leader_known = true;
            }
            Step::PublishLeader => f.leader_published = true,
            Step::Wait(Blocker::Rollout) => f.rollout_done = true,
            Step::Cleanup | Step::Wait(_) => return phases,
        }
    }
    panic!("no settled state: {phases:?}");
}

#[test]
fn a_new_standalone_object_walks_every_phase_to_ready() {
    let f = Facts {
        referenced_secrets_present: true,
        key_can_be_generated: true,
        ..Facts::default()
    };
    use Phase::*;
    assert_eq!(
        journey(f),
        vec![Pending, ConfigMapReady, KeyReady, Deploying, Ready]
    );
}

#[test]
fn a_new_leader_object_walks_through_leader_elected() {
    let f = Facts {
        referenced_secrets_present: true,
        key_ready: true,
        leader_topology: true,
        ..Facts::default()
    };
    use Phase::*;
    assert_eq!(
        journey(f),
        vec![
            Pending,
            ConfigMapReady,
            KeyReady,
            Deploying,
            LeaderElected,
            Ready
        ]
    );
}

#[test]
fn resume_rebuilds_the_machine_in_the_persisted_phase() {
    for p in Phase::ALL {
        assert_eq!(phase_of(crate::resume(p)), p);
    }
}
