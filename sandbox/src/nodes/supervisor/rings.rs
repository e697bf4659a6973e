//! Gossip rings: supervisors reach each other only through the addresses in their peer files
//! (`--peer-watch-file`), so a ring is a connected set of pods linked by those addresses.
//! Elections and the census are per ring, as in real Habitat.

use super::{Health, Member};
use crate::meta;
use serde_json::Value;
use std::collections::HashMap;

/// The addresses in the peer files a pod mounts (ConfigMap volumes with a `peer-ip` key).
fn peer_addresses(pod: &Value, config_maps: &[Value]) -> Vec<String> {
    let ns = meta::namespace(pod);
    let volumes = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    volumes
        .iter()
        .filter_map(|v| v["configMap"]["name"].as_str())
        .filter_map(|name| {
            config_maps
                .iter()
                .find(|c| meta::namespace(c) == ns && meta::name(c) == name)
        })
        .filter_map(|c| c["data"]["peer-ip"].as_str())
        .flat_map(|text| {
            text.lines()
                .map(|l| l.trim().split(':').next().unwrap_or_default().to_string())
        })
        .filter(|ip| !ip.is_empty())
        .collect()
}

fn find(parent: &mut HashMap<String, String>, x: &str) -> String {
    let mut root = x.to_string();
    while let Some(p) = parent.get(&root).filter(|p| **p != root) {
        root = p.clone();
    }
    parent.insert(x.to_string(), root.clone());
    root
}

/// Recomputes the ring of every alive member from the pods' peer files. A ring keeps the key
/// most of its members already have, so joins and deaths do not restart its elections; dead
/// members keep their last ring.
pub fn assign(members: &mut HashMap<String, Member>, pods: &[Value], config_maps: &[Value]) {
    let alive: Vec<String> = members
        .iter()
        .filter(|(_, m)| m.health == Health::Alive)
        .map(|(u, _)| u.clone())
        .collect();
    let by_ip: HashMap<(String, String), String> = alive
        .iter()
        .filter_map(|u| {
            members
                .get(u)
                .map(|m| ((m.namespace.clone(), m.ip.clone()), u.clone()))
        })
        .collect();
    let mut parent: HashMap<String, String> =
        alive.iter().map(|u| (u.clone(), u.clone())).collect();
    for pod in pods {
        let uid = meta::uid_of(pod).to_string();
        if !parent.contains_key(&uid) {
            continue;
        }
        for ip in peer_addresses(pod, config_maps) {
            if let Some(other) = by_ip.get(&(meta::namespace(pod).to_string(), ip)) {
                let (a, b) = (find(&mut parent, &uid), find(&mut parent, other));
                if a != b {
                    parent.insert(a, b);
                }
            }
        }
    }
    let mut components: HashMap<String, Vec<String>> = HashMap::new();
    for u in &alive {
        let root = find(&mut parent, u);
        components.entry(root).or_default().push(u.clone());
    }
    for (root, uids) in components {
        let mut votes: HashMap<String, usize> = HashMap::new();
        for u in &uids {
            if let Some(m) = members.get(u).filter(|m| !m.ring.is_empty()) {
                *votes.entry(m.ring.clone()).or_default() += 1;
            }
        }
        let key = votes
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
            .map(|(k, _)| k)
            .unwrap_or(root);
        for u in &uids {
            if let Some(m) = members.get_mut(u) {
                m.ring = key.clone();
            }
        }
    }
}
