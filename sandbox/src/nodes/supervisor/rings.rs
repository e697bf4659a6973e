//! Gossip rings: supervisors reach each other only through the addresses they know: those in
//! their peer files (`--peer-watch-file`), or, for a supervisor that restored a member list from
//! a persisted `/hab/sup`, the addresses of that list (it ignores its peer file, facts §1). A
//! ring is a connected set of pods linked by those addresses. Elections and the census are per
//! ring, as in real Habitat.

use super::{Health, Member};
use crate::meta;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The addresses in the peer files a pod mounts (ConfigMap volumes with a `peer-ip` key).
fn peer_addresses<'a>(
    pod: &'a Value,
    config_maps: &HashMap<(&str, &str), &'a Value>,
) -> Vec<&'a str> {
    let ns = meta::namespace(pod);
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["configMap"]["name"].as_str())
        .filter_map(|name| config_maps.get(&(ns, name)))
        .filter_map(|c| c["data"]["peer-ip"].as_str())
        .flat_map(str::lines)
        .map(|l| l.trim().split(':').next().unwrap_or_default())
        .filter(|ip| !ip.is_empty())
        .collect()
}

/// Union-find over member positions.
struct Sets(Vec<usize>);

impl Sets {
    fn find(&mut self, x: usize) -> usize {
        let mut root = x;
        while self.0[root] != root {
            root = self.0[root];
        }
        let mut x = x;
        while self.0[x] != root {
            x = std::mem::replace(&mut self.0[x], root);
        }
        root
    }

    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            self.0[a] = b;
        }
    }
}

/// Recomputes the ring of every alive member (`members` by member id, `by_pod` the running
/// pods' member ids): members already in a ring stay there, and others join through the
/// addresses they know. A ring keeps the key most of its members
/// already have, so joins and deaths do not restart its elections, and no two rings share a
/// key; dead members keep their last ring. It costs one pass over the pods and the members,
/// with one allocation per ring, so that a simulation step stays linear in the world.
pub fn assign(
    members: &mut HashMap<String, Member>,
    by_pod: &HashMap<String, String>,
    pods: &[Arc<Value>],
    config_maps: &[Arc<Value>],
) {
    // Members are numbered in the map's iteration order, which holds until the map changes:
    // the second pass below walks it again, mutably, in the same order.
    let keys: Vec<String> = {
        let all: Vec<&Member> = members.values().collect();
        let pos: HashMap<&str, usize> = all
            .iter()
            .enumerate()
            .map(|(i, m)| (m.member_id.as_str(), i))
            .collect();
        let alive = |i: &usize| all[*i].health == Health::Alive;
        let by_ip: HashMap<(&str, &str), usize> = (0..all.len())
            .filter(alive)
            .map(|i| ((all[i].namespace.as_str(), all[i].ip.as_str()), i))
            .collect();
        let mut sets = Sets((0..all.len()).collect());
        // Members of one ring stay in it: they gossip with each other's current addresses,
        // which no peer file needs to name any more.
        let mut first_of_ring: HashMap<&str, usize> = HashMap::new();
        for i in (0..all.len()).filter(alive) {
            if all[i].ring.is_empty() {
                continue;
            }
            match first_of_ring.get(all[i].ring.as_str()) {
                Some(&first) => sets.union(i, first),
                None => {
                    first_of_ring.insert(&all[i].ring, i);
                }
            }
        }
        let cms: HashMap<(&str, &str), &Value> = config_maps
            .iter()
            .map(|c| ((meta::namespace(c), meta::name(c)), &**c))
            .collect();
        for pod in pods {
            let Some(&i) = by_pod
                .get(meta::uid_of(pod))
                .and_then(|id| pos.get(id.as_str()))
                .filter(|i| alive(i))
            else {
                continue;
            };
            let ns = meta::namespace(pod);
            let known: Vec<&str> = match &all[i].restored_peers {
                Some(ips) => ips.iter().map(String::as_str).collect(),
                None => peer_addresses(pod, &cms),
            };
            for ip in known {
                if let Some(&other) = by_ip.get(&(ns, ip)) {
                    sets.union(i, other);
                }
            }
        }
        let mut components: HashMap<usize, Vec<usize>> = HashMap::new();
        for i in (0..all.len()).filter(alive) {
            components.entry(sets.find(i)).or_default().push(i);
        }
        // Larger rings choose first; a key is never given to two rings.
        let mut components: Vec<(usize, Vec<usize>)> = components.into_iter().collect();
        components.sort_by(|a, b| {
            b.1.len()
                .cmp(&a.1.len())
                .then_with(|| all[a.0].member_id.cmp(&all[b.0].member_id))
        });
        let mut taken: HashSet<&str> = HashSet::new();
        let mut keys = vec![String::new(); all.len()];
        for (root, ids) in components {
            let mut votes: HashMap<&str, usize> = HashMap::new();
            for &i in &ids {
                if !all[i].ring.is_empty() {
                    *votes.entry(all[i].ring.as_str()).or_default() += 1;
                }
            }
            let key = votes
                .into_iter()
                .filter(|(k, _)| !taken.contains(k))
                .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
                .map_or(all[root].member_id.as_str(), |(k, _)| k);
            taken.insert(key);
            for &i in &ids {
                if all[i].ring != key {
                    keys[i] = key.to_string();
                }
            }
        }
        keys
    };
    for (m, key) in members.values_mut().zip(keys) {
        if !key.is_empty() {
            m.ring = key;
        }
    }
}
