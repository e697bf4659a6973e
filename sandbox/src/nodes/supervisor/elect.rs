//! Leader and update elections, one per service group of a ring (facts §6, from
//! `butterfly/src/server.rs` and `butterfly/src/rumor/election.rs`).

use super::{Election, Health, Member, State, Strategy};
use std::time::{Duration, Instant};

/// `check_quorum_mlr`: `alive > total / 2` (integer division), where `total` counts the members
/// that are Alive, Suspect or Confirmed (Departed ones are excluded) and `alive` the Alive ones,
/// as the others see them ([`Member::seen_health`]: a member dead but not noticed yet still
/// counts alive). A lone supervisor that never gossiped (`gossiped` false) has no entry of its
/// own and no quorum.
pub(super) fn has_quorum(group: &[&Member], gossiped: bool) -> bool {
    let now = Instant::now();
    let total = group
        .iter()
        .filter(|m| m.seen_health(now) != Health::Departed)
        .count();
    let alive = group
        .iter()
        .filter(|m| m.seen_health(now) == Health::Alive)
        .count();
    (gossiped || alive >= 2) && alive > total / 2
}

/// One election's state: `status`, its leader and when a running one finishes.
struct Race<'a> {
    status: &'a mut Election,
    leader: &'a mut Option<String>,
    until: &'a mut Option<Instant>,
}

/// Advances one election. A finished election stands while its leader is not seen confirmed
/// dead (`leads`: alive or suspect, facts §6) and the group has quorum; a dead leader or a lost
/// quorum restarts it (`term + 1` for a dead leader). A running election finishes after
/// `lasts`, won by the previous leader when it is alive (it re-enters with suitability
/// `u64::MAX`), otherwise by the highest id among the `alive` members. Returns true when a dead
/// leader restarted it.
fn advance(
    race: Race<'_>,
    quorum: bool,
    alive: &[&Member],
    leads: &dyn Fn(&str) -> bool,
    now: Instant,
    lasts: Duration,
) -> bool {
    let leader_alive = race.leader.as_deref().is_some_and(leads);
    if !quorum {
        *race.status = Election::NoQuorum;
        *race.until = None;
        return false;
    }
    match *race.status {
        Election::Finished if leader_alive => false,
        Election::InProgress if race.until.is_some() => {
            if race.until.is_some_and(|u| now >= u) {
                *race.status = Election::Finished;
                *race.until = None;
                if !leader_alive {
                    *race.leader = alive.iter().map(|m| m.member_id.clone()).max();
                }
            }
            false
        }
        previous => {
            *race.status = Election::InProgress;
            *race.until = Some(now + lasts);
            previous == Election::Finished
        }
    }
}

/// Regroups every member from scratch (their rings, health or membership may have changed
/// without the index knowing: tests set them directly) and runs every group's elections.
#[cfg(test)]
pub(super) fn elect(st: &mut State) {
    st.reindex();
    run(st);
}

/// Between world changes only a running election's clock moves a group: the elections run
/// again when the first of them is due, and a tick before that costs nothing.
pub(super) fn tick(st: &mut State) {
    if st.next_deadline.is_some_and(|d| Instant::now() >= d) {
        run(st);
    }
}

/// Runs the elections of the groups that changed and of those with a running election, and
/// starts the services whose election finished. One pass leaves every group at rest but those
/// whose election is running; `next_deadline` is when the first of those finishes. A group at
/// rest stays so until a member joins, leaves or changes health, so the others are left alone.
pub(super) fn run(st: &mut State) {
    let now = Instant::now();
    let mut next: Option<Instant> = None;
    let mut finished: Vec<&String> = Vec::new();
    let mut visit = std::mem::take(&mut st.dirty);
    visit.extend(std::mem::take(&mut st.running));
    let lasts = st.gossip.election;
    let State {
        members,
        groups,
        index,
        running,
        health_moved,
        ..
    } = &mut *st;
    for key in visit {
        let Some(ids) = index.get(&key) else {
            groups.remove(&key);
            continue;
        };
        let members: Vec<&Member> = ids.iter().filter_map(|id| members.get(id)).collect();
        let g = groups.entry(key.clone()).or_default();
        let alive: Vec<&Member> = members
            .iter()
            .copied()
            .filter(|m| m.health == Health::Alive)
            .collect();
        g.gossiped |= alive.len() >= 2;
        let quorum = has_quorum(&members, g.gossiped);
        // A leader leads while the others see it alive or suspect.
        let leads = |id: &str| {
            members.iter().any(|m| {
                m.member_id == id && matches!(m.seen_health(now), Health::Alive | Health::Suspect)
            })
        };
        // A death not noticed yet, or a member still joining, moves the group later.
        for t in members.iter().flat_map(|m| m.deadlines(now)) {
            next = Some(next.map_or(t, |n| n.min(t)));
            running.insert(key.clone());
        }
        let leader_topology = members.iter().any(|m| m.leader_topology);
        if leader_topology {
            let restarted = advance(
                Race {
                    status: &mut g.status,
                    leader: &mut g.leader_id,
                    until: &mut g.running_until,
                },
                quorum,
                &alive,
                &leads,
                now,
                lasts,
            );
            if restarted {
                g.term += 1;
            }
        } else {
            g.status = Election::None;
            g.leader_id = None;
        }
        if members.iter().any(|m| m.strategy == Strategy::Rolling) {
            advance(
                Race {
                    status: &mut g.update_status,
                    leader: &mut g.update_leader_id,
                    until: &mut g.update_running_until,
                },
                quorum,
                &alive,
                &leads,
                now,
                lasts,
            );
        } else {
            g.update_status = Election::None;
            g.update_leader_id = None;
        }
        for until in [g.running_until, g.update_running_until]
            .into_iter()
            .flatten()
        {
            next = Some(next.map_or(until, |n| n.min(until)));
            running.insert(key.clone());
        }
        if matches!(g.status, Election::Finished | Election::None) {
            finished.extend(ids);
        }
    }
    for id in finished {
        // A cut-off member sees no election of its own: its hooks never run.
        if let Some(m) = members
            .get_mut(id)
            .filter(|m| m.health == Health::Alive && !m.cut_off && m.hooks_may_run(now))
        {
            if !m.started {
                health_moved.push(m.pod_uid.clone());
            }
            m.started = true;
        }
    }
    st.next_deadline = next;
}
