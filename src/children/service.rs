//! The Services of a Habitat: the headless `NAME` for stable pod DNS and, for leader topology,
//! `NAME-leader` that selects only the elected leader.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::child_meta;
use super::statefulset::{GOSSIP_PORT, HTTP_GATEWAY_PORT};
use crate::api::{Habitat, LABEL_LEADER};

/// The headless Service that gives every pod a stable DNS name. Pods are published before
/// they are ready: supervisors must gossip to become ready.
pub fn headless_service(h: &Habitat) -> Service {
    Service {
        metadata: child_meta(h, h.name_any()),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            publish_not_ready_addresses: Some(true),
            selector: Some(h.child_labels()),
            ports: Some(ports()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The Service that selects the elected leader's pod (label `habitat.sh/leader=true`).
pub fn leader_service(h: &Habitat) -> Service {
    let mut selector = h.child_labels();
    selector.insert(LABEL_LEADER.to_string(), "true".to_string());
    Service {
        metadata: child_meta(h, h.leader_service_name()),
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(ports()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn ports() -> Vec<ServicePort> {
    let port = |name: &str, number: i32, protocol: &str| ServicePort {
        name: Some(name.to_string()),
        port: number,
        target_port: Some(IntOrString::Int(number)),
        protocol: Some(protocol.to_string()),
        ..ServicePort::default()
    };
    vec![
        port("http-gateway", HTTP_GATEWAY_PORT, "TCP"),
        port("gossip", GOSSIP_PORT, "TCP"),
        port("gossip-udp", GOSSIP_PORT, "UDP"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::habitat;

    #[test]
    fn the_headless_service_publishes_every_pod_on_gateway_and_gossip_ports() {
        let s = headless_service(&habitat());
        assert_eq!(s.metadata.name.as_deref(), Some("redis"));
        let spec = s.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let ports: Vec<_> = spec
            .ports
            .unwrap()
            .into_iter()
            .map(|p| (p.port, p.protocol.unwrap()))
            .collect();
        assert_eq!(
            ports,
            vec![
                (9631, "TCP".into()),
                (9638, "TCP".into()),
                (9638, "UDP".into())
            ]
        );
        assert_eq!(spec.selector.unwrap()["habitat.sh/name"], "redis");
    }

    #[test]
    fn the_leader_service_selects_only_the_leader() {
        let s = leader_service(&habitat());
        assert_eq!(s.metadata.name.as_deref(), Some("redis-leader"));
        let selector = s.spec.unwrap().selector.unwrap();
        assert_eq!(selector["habitat.sh/leader"], "true");
        assert_eq!(selector["habitat.sh/name"], "redis");
        assert_eq!(s.metadata.owner_references.unwrap()[0].uid, "uid-1");
    }
}
