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

/// The content of the peer file: the address, or nothing. Never a blank line: the supervisor
/// exits on a line it cannot resolve.
pub fn peer_file_content(peer_ip: Option<&str>) -> String {
    peer_ip.map(str::trim).unwrap_or_default().to_string()
}

/// The peer ConfigMap holding `peer_ip` (the address of one running pod), or an empty file.
pub fn peer_config(h: &Habitat, peer_ip: Option<&str>) -> ConfigMap {
    ConfigMap {
        metadata: child_meta(h, h.peer_config_name()),
        data: Some(BTreeMap::from([(
            PEER_IP_KEY.to_string(),
            peer_file_content(peer_ip),
        )])),
        ..ConfigMap::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::habitat;

    #[test]
    fn the_peer_config_holds_one_address_without_blank_lines() {
        let cm = peer_config(&habitat(), Some("10.0.0.5"));
        assert_eq!(cm.metadata.name.as_deref(), Some("redis-peer"));
        assert_eq!(cm.data.unwrap()["peer-ip"], "10.0.0.5");
    }

    #[test]
    fn the_peer_config_is_empty_when_no_pod_runs() {
        let cm = peer_config(&habitat(), None);
        assert_eq!(cm.data.unwrap()["peer-ip"], "");
    }

    #[test]
    fn the_peer_config_is_owned_by_its_habitat_and_labelled() {
        let cm = peer_config(&habitat(), None);
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
