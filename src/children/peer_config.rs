//! The peer ConfigMap `NAME-peer`: the file the supervisors read with `--peer-watch-file`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::child_meta;
use crate::api::{Habitat, PEER_IP_KEY};

/// Directory the peer ConfigMap is mounted at (a directory, so the file follows updates).
pub const PEER_DIR: &str = "/habitat-operator/peer";

/// Path of the peer file passed to `--peer-watch-file`.
pub fn peer_file_path() -> String {
    format!("{PEER_DIR}/{PEER_IP_KEY}")
}

/// The content of the peer file: one address per line, no blank line (the supervisor exits on
/// a line it cannot resolve), and nothing at all when no pod runs.
pub fn peer_file_content(addresses: &[String]) -> String {
    let lines: Vec<&str> = addresses
        .iter()
        .map(|a| a.trim())
        .filter(|a| !a.is_empty())
        .collect();
    lines.join("\n")
}

/// The peer ConfigMap holding `addresses` (this Habitat's peer first, then one per bound
/// group), or an empty file.
pub fn peer_config(h: &Habitat, addresses: &[String]) -> ConfigMap {
    ConfigMap {
        metadata: child_meta(h, h.peer_config_name()),
        data: Some(BTreeMap::from([(
            PEER_IP_KEY.to_string(),
            peer_file_content(addresses),
        )])),
        ..ConfigMap::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::habitat;

    #[test]
    fn the_peer_config_holds_addresses_one_per_line_without_blank_lines() {
        let cm = peer_config(&habitat(), &["10.0.0.5".to_string()]);
        assert_eq!(cm.metadata.name.as_deref(), Some("redis-peer"));
        assert_eq!(cm.data.unwrap()["peer-ip"], "10.0.0.5");
        let two = peer_file_content(&["10.0.0.5".into(), " ".into(), "10.0.1.1".into()]);
        assert_eq!(two, "10.0.0.5\n10.0.1.1");
    }

    #[test]
    fn the_peer_config_is_empty_when_no_pod_runs() {
        let cm = peer_config(&habitat(), &[]);
        assert_eq!(cm.data.unwrap()["peer-ip"], "");
    }

    #[test]
    fn the_peer_config_is_owned_by_its_habitat_and_labelled() {
        let cm = peer_config(&habitat(), &[]);
        let owner = &cm.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("Habitat", "uid-1", Some(true))
        );
        let labels = cm.metadata.labels.unwrap();
        assert_eq!(labels["habitat.sh/name"], "redis");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "habitat-operator");
        assert_eq!(cm.metadata.namespace.as_deref(), Some("ns"));
    }
}
