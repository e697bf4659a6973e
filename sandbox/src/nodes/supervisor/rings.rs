//! Gossip rings: supervisors reach each other only through the addresses they know: those in
//! their peer files (`--peer-watch-file`), or, for a supervisor that restored a member list from
//! a persisted `/hab/sup`, the addresses of that list (it ignores its peer file, facts §1). A
//! ring is a connected set of pods linked by those addresses. Elections and the census are per
//! ring, as in real Habitat.
//!
//! The links are kept as they change ([`Links`]), so that a step re-derives only the rings
//! around the members whose links changed ([`merge`]) and costs what changed, not the world.

use super::{Health, Member};
use crate::meta;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// `(namespace, IP)` of a member, or `(namespace, name)` of a ConfigMap.
type Place = (String, String);

/// The addresses in a peer file (the `peer-ip` key of a ConfigMap); `None` when it has none.
fn peer_file_addresses(cm: &Value) -> Option<Vec<String>> {
    let text = cm["data"]["peer-ip"].as_str()?;
    Some(
        text.lines()
            .map(|l| l.trim().split(':').next().unwrap_or_default())
            .filter(|ip| !ip.is_empty())
            .map(String::from)
            .collect(),
    )
}

/// The names of the ConfigMaps a pod mounts as volumes: its possible peer files.
pub(super) fn mounts(pod: &Value) -> Vec<String> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["configMap"]["name"].as_str())
        .map(String::from)
        .collect()
}

/// A ConfigMap's key: its uid, or `namespace/name` when it has none (as the nodes' mirror
/// keys it).
fn config_map_key(cm: &Value) -> String {
    match meta::uid_of(cm) {
        "" => format!("{}/{}", meta::namespace(cm), meta::name(cm)),
        uid => uid.to_string(),
    }
}

fn remove_from(map: &mut HashMap<Place, HashSet<String>>, key: Place, id: &str) {
    if let Some(set) = map.get_mut(&key) {
        set.remove(id);
        if set.is_empty() {
            map.remove(&key);
        }
    }
}

/// Who links to whom among the alive members, kept up to date as members start and stop and
/// peer files change, in both directions: the addresses a member knows, and the members that
/// know an address.
#[derive(Debug, Default)]
pub(super) struct Links {
    /// Peer files' addresses, by (namespace, ConfigMap name), with the key of the ConfigMap
    /// that holds them: ConfigMaps with `peer-ip` only.
    peer_files: HashMap<Place, (String, Vec<String>)>,
    /// Where each of those ConfigMaps is, by its key (a deletion names only the key).
    peer_file_places: HashMap<String, Place>,
    /// Alive members by (namespace, IP).
    by_ip: HashMap<Place, String>,
    /// The addresses each alive member knows, with its namespace.
    known: HashMap<String, (String, Vec<String>)>,
    /// The alive members that know an address, by (namespace, IP).
    known_by: HashMap<Place, HashSet<String>>,
    /// The alive members whose pods mount a ConfigMap, by (namespace, name).
    mounted_by: HashMap<Place, HashSet<String>>,
    /// Alive members by ring key.
    rings: HashMap<String, HashSet<String>>,
}

impl Links {
    /// A ConfigMap changed (`Some`, as it is now) or was deleted (`None`), known by its key.
    /// Returns the alive members that mount it, when the addresses it names changed: they
    /// must [`Links::learn`] again.
    pub fn set_config_map(&mut self, key: &str, cm: Option<&Value>) -> Vec<String> {
        // A ConfigMap deleted and made again under its name has a new key: the old one's
        // deletion, seen after, removes nothing of it.
        let old = self.peer_file_places.remove(key).and_then(|p| {
            match self.peer_files.get(&p) {
                Some((holder, _)) if holder == key => {}
                _ => return None,
            }
            self.peer_files.remove(&p).map(|(_, a)| (p, a))
        });
        let new = cm.and_then(|c| {
            peer_file_addresses(c).map(|a| {
                let place = (meta::namespace(c).to_string(), meta::name(c).to_string());
                (place, a)
            })
        });
        let unchanged = old == new;
        let mut places: Vec<Place> = old.map(|(p, _)| p).into_iter().collect();
        if let Some((place, addresses)) = new {
            self.peer_file_places.insert(key.to_string(), place.clone());
            self.peer_files
                .insert(place.clone(), (key.to_string(), addresses));
            places.push(place);
        }
        if unchanged {
            return Vec::new();
        }
        let readers: HashSet<&String> = places
            .iter()
            .filter_map(|p| self.mounted_by.get(p))
            .flatten()
            .collect();
        readers.into_iter().cloned().collect()
    }

    /// Every peer file anew, from every ConfigMap.
    pub fn reset_config_maps(&mut self, config_maps: &[std::sync::Arc<Value>]) {
        self.peer_files.clear();
        self.peer_file_places.clear();
        for cm in config_maps {
            self.set_config_map(&config_map_key(cm), Some(cm));
        }
    }

    /// An alive member: its address, the peer files it mounts, the addresses it knows and its
    /// ring.
    pub fn join(&mut self, m: &Member) {
        let (ns, id) = (&m.namespace, &m.member_id);
        self.by_ip.insert((ns.clone(), m.ip.clone()), id.clone());
        for name in &m.mounts {
            self.mounted_by
                .entry((ns.clone(), name.clone()))
                .or_default()
                .insert(id.clone());
        }
        self.learn(m);
        if !m.ring.is_empty() {
            self.rings
                .entry(m.ring.clone())
                .or_default()
                .insert(id.clone());
        }
    }

    /// A member stopped: it links to no one any more (it keeps its ring's key).
    pub fn leave(&mut self, m: &Member) {
        let (ns, id) = (&m.namespace, &m.member_id);
        let place = (ns.clone(), m.ip.clone());
        if self.by_ip.get(&place) == Some(id) {
            self.by_ip.remove(&place);
        }
        for name in &m.mounts {
            remove_from(&mut self.mounted_by, (ns.clone(), name.clone()), id);
        }
        self.unlearn(id);
        if let Some(set) = self.rings.get_mut(&m.ring) {
            set.remove(id);
            if set.is_empty() {
                self.rings.remove(&m.ring);
            }
        }
    }

    /// The addresses the alive member `m` knows, again: those of the member list it restored,
    /// or those of its peer files.
    pub fn learn(&mut self, m: &Member) {
        self.unlearn(&m.member_id);
        let ns = &m.namespace;
        let addresses: Vec<String> = match &m.restored_peers {
            Some(ips) => ips.clone(),
            None => m
                .mounts
                .iter()
                .filter_map(|name| self.peer_files.get(&(ns.clone(), name.clone())))
                .flat_map(|(_, addresses)| addresses)
                .cloned()
                .collect(),
        };
        for ip in &addresses {
            self.known_by
                .entry((ns.clone(), ip.clone()))
                .or_default()
                .insert(m.member_id.clone());
        }
        self.known
            .insert(m.member_id.clone(), (ns.clone(), addresses));
    }

    fn unlearn(&mut self, id: &str) {
        if let Some((ns, addresses)) = self.known.remove(id) {
            for ip in addresses {
                remove_from(&mut self.known_by, (ns.clone(), ip), id);
            }
        }
    }

    /// The alive members of the ring `key`.
    pub fn ring(&self, key: &str) -> impl Iterator<Item = &String> {
        self.rings.get(key).into_iter().flatten()
    }

    /// The alive members `id` links to or is linked from, and those of its ring.
    fn neighbours(&self, m: &Member) -> Vec<&String> {
        let ns = &m.namespace;
        let mut out: Vec<&String> = self.ring(&m.ring).collect();
        if let Some((_, addresses)) = self.known.get(&m.member_id) {
            out.extend(
                addresses
                    .iter()
                    .filter_map(|ip| self.by_ip.get(&(ns.clone(), ip.clone()))),
            );
        }
        out.extend(
            self.known_by
                .get(&(ns.clone(), m.ip.clone()))
                .into_iter()
                .flatten(),
        );
        out
    }

    fn set_ring(&mut self, id: &str, old: &str, new: &str) {
        if let Some(set) = self.rings.get_mut(old) {
            set.remove(id);
            if set.is_empty() {
                self.rings.remove(old);
            }
        }
        self.rings
            .entry(new.to_string())
            .or_default()
            .insert(id.to_string());
    }
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

/// Re-derives the rings of the alive members connected to `touched` (members whose links may
/// have changed): through a shared ring key, or an address one of them knows, in either
/// direction, when both encrypt their gossip with the same key (`--ring`) or neither does. Members already in a ring stay there, and others join through the addresses they
/// know. A ring keeps the key most of its members already have, so joins and deaths do not
/// restart its elections, and no two rings share a key; dead members keep their last ring.
/// Returns the members whose ring changed, each with its previous ring key.
///
/// It costs the rings it reaches, so that a step costs what changed; with every alive member
/// touched it derives every ring.
pub(super) fn merge(
    members: &mut HashMap<String, Member>,
    links: &mut Links,
    touched: impl IntoIterator<Item = String>,
) -> Vec<(String, String)> {
    let alive = |id: &str| members.get(id).is_some_and(|m| m.health == Health::Alive);
    // Every member connected to a touched one, in the order reached.
    let mut reached: Vec<String> = Vec::new();
    let mut pos: HashMap<String, usize> = HashMap::new();
    let mut sets = Sets(Vec::new());
    for id in touched {
        if alive(&id) && !pos.contains_key(&id) {
            pos.insert(id.clone(), reached.len());
            sets.0.push(reached.len());
            reached.push(id);
        }
    }
    let mut next = 0;
    while next < reached.len() {
        let i = next;
        next += 1;
        let Some(m) = members.get(&reached[i]) else {
            continue;
        };
        for other in links.neighbours(m) {
            // Another ring key (or none against one): neither can read the other's gossip.
            let same_key = members
                .get(other)
                .is_some_and(|o| o.gossip_key == m.gossip_key);
            if !alive(other) || !same_key {
                continue;
            }
            let j = match pos.get(other) {
                Some(&j) => j,
                None => {
                    pos.insert(other.clone(), reached.len());
                    sets.0.push(reached.len());
                    reached.push(other.clone());
                    reached.len() - 1
                }
            };
            sets.union(i, j);
        }
    }
    let mut components: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..reached.len() {
        components.entry(sets.find(i)).or_default().push(i);
    }
    // Larger rings choose first (then by their lowest member id); a key is never given to two.
    let mut components: Vec<Vec<usize>> = components.into_values().collect();
    for c in &mut components {
        c.sort_by(|a, b| reached[*a].cmp(&reached[*b]));
    }
    components.sort_by(|a, b| {
        b.len()
            .cmp(&a.len())
            .then_with(|| reached[a[0]].cmp(&reached[b[0]]))
    });
    let mut taken: HashSet<String> = HashSet::new();
    let mut moved = Vec::new();
    for ids in components {
        let mut votes: HashMap<&str, usize> = HashMap::new();
        for &i in &ids {
            if let Some(m) = members.get(&reached[i]).filter(|m| !m.ring.is_empty()) {
                *votes.entry(m.ring.as_str()).or_default() += 1;
            }
        }
        let key = votes
            .into_iter()
            .filter(|(k, _)| !taken.contains(*k))
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
            .map_or_else(|| reached[ids[0]].clone(), |(k, _)| k.to_string());
        for &i in &ids {
            let id = &reached[i];
            let Some(m) = members.get_mut(id) else {
                continue;
            };
            if m.ring != key {
                let old = std::mem::replace(&mut m.ring, key.clone());
                links.set_ring(id, &old, &key);
                moved.push((id.clone(), old));
            }
        }
        taken.insert(key);
    }
    moved
}
