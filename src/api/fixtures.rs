//! Test fixtures: Habitats built with chained methods.

use kube::api::ObjectMeta;

use crate::api::{Bind, Habitat, HabitatSpec, PersistentStorage, RingSpec, ServiceSpec, Topology};

/// A Habitat `redis` in namespace `ns` with uid `uid-1`, standalone, 3 replicas.
pub fn habitat() -> Habitat {
    let mut h = Habitat::new(
        "redis",
        HabitatSpec {
            image: "habitat/redis-hab".into(),
            count: 3,
            service: ServiceSpec {
                name: "redis".into(),
                group: "default".into(),
                ..ServiceSpec::default()
            },
            env: vec![],
            persistent_storage: None,
        },
    );
    h.metadata = ObjectMeta {
        name: Some("redis".into()),
        namespace: Some("ns".into()),
        uid: Some("uid-1".into()),
        generation: Some(1),
        ..ObjectMeta::default()
    };
    h
}

/// Chained modifiers for fixture Habitats.
pub trait HabitatFixture: Sized {
    fn leader(self) -> Self;
    fn group(self, group: &str) -> Self;
    fn channel(self, channel: &str) -> Self;
    fn bind(self, name: &str, service: &str, group: &str) -> Self;
    fn ring(self, name: &str) -> Self;
    fn ring_secret(self, name: &str) -> Self;
    fn config_secret(self, name: &str) -> Self;
    fn files_secret(self, name: &str) -> Self;
    fn storage(self, size: &str, path: &str) -> Self;
    fn count(self, count: i32) -> Self;
}

impl HabitatFixture for Habitat {
    fn leader(mut self) -> Self {
        self.spec.service.topology = Topology::Leader;
        self
    }
    fn group(mut self, group: &str) -> Self {
        self.spec.service.group = group.into();
        self
    }
    fn channel(mut self, channel: &str) -> Self {
        self.spec.service.channel = Some(channel.into());
        self
    }
    fn bind(mut self, name: &str, service: &str, group: &str) -> Self {
        self.spec.service.bind.push(Bind {
            name: name.into(),
            service: service.into(),
            group: group.into(),
        });
        self
    }
    fn ring(mut self, name: &str) -> Self {
        self.spec.service.ring = Some(RingSpec { name: name.into() });
        self
    }
    fn ring_secret(mut self, name: &str) -> Self {
        self.spec.service.ring_secret_name = Some(name.into());
        self
    }
    fn config_secret(mut self, name: &str) -> Self {
        self.spec.service.config_secret_name = Some(name.into());
        self
    }
    fn files_secret(mut self, name: &str) -> Self {
        self.spec.service.files_secret_name = Some(name.into());
        self
    }
    fn storage(mut self, size: &str, path: &str) -> Self {
        self.spec.persistent_storage = Some(PersistentStorage {
            size: size.into(),
            mount_path: path.into(),
            storage_class_name: None,
            claim_template_name: None,
        });
        self
    }
    fn count(mut self, count: i32) -> Self {
        self.spec.count = count;
        self
    }
}
