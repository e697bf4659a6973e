//! The watch events of this process's own writes, recognised so that they do not wake the
//! Habitat that wrote them.
//!
//! # Flow
//!
//! A write of a child or of a Habitat's status is remembered ([`Echoes::wrote`]) by the object's
//! uid and the resourceVersion the server answered. The trigger filter asks [`Echoes::is_echo`]
//! of every watch event (not a relist, not a deletion): exactly that version is an echo and wakes
//! nothing; any other version (another writer, a later change) wakes the Habitat as before.
//! Either way the entry goes.
//!
//! # Guarantees
//!
//! - At most one entry per object, until the object's next event or its deletion.
//! - Another writer's change is never taken for an echo: its version differs.
//! - A reconcile handed the copy its own status write replaced (the cache lags by milliseconds)
//!   waits for the written copy and says so ([`Echoes::awaited`]): that echo wakes it.
//!
//! # Caveats
//!
//! - kube-runtime has no such filter (its predicates compare an object with its own previous
//!   version, never with this process's writes). On the way to Ready a standalone Habitat writes
//!   its peer ConfigMap twice, its StatefulSet, its Service and its status twice: without this,
//!   each of those woke one more reconcile that found the state it wrote.
//! - A write that changed nothing answers the version the watch already delivered: its entry
//!   stays until the object's next event, which it does not match.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::{Resource, ResourceExt};

/// The versions this process wrote, by object uid, until their watch events arrive.
#[derive(Debug, Default)]
pub struct Echoes {
    written: Mutex<HashMap<String, String>>,
}

impl Echoes {
    /// Remembers `written`, the server's answer to a write of this process.
    pub fn wrote<K: Resource>(&self, written: &K) {
        if let (Some(uid), Some(version)) = (written.uid(), written.resource_version()) {
            self.written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(uid, version);
        }
    }

    /// Whether the watch event of `object` is the echo of a write of this process. Forgets the
    /// write either way: the next version of the object is someone's change.
    pub fn is_echo<K: Resource>(&self, object: &K) -> bool {
        // Every watch event of a child passes here: nothing is copied.
        let meta = object.meta();
        let Some(uid) = meta.uid.as_deref() else {
            return false;
        };
        match self.take(uid) {
            Some(version) => meta.resource_version.as_deref() == Some(version.as_str()),
            None => false,
        }
    }

    /// A reconcile was handed the copy the write of object `uid` replaced (the cache lags) and
    /// waits for the written one: its echo wakes the object after all.
    pub fn awaited(&self, uid: &str) {
        self.take(uid);
    }

    /// Forgets `object` (deleted).
    pub fn forget<K: Resource>(&self, object: &K) {
        if let Some(uid) = object.meta().uid.as_deref() {
            self.take(uid);
        }
    }

    fn take(&self, uid: &str) -> Option<String> {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if written.is_empty() {
            return None;
        }
        written.remove(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    impl Echoes {
        /// How many writes wait for their echo.
        pub fn len(&self) -> usize {
            self.written.lock().unwrap_or_else(|p| p.into_inner()).len()
        }

        /// Whether none does.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    fn version(uid: &str, rv: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("redis-peer".into());
        cm.metadata.uid = Some(uid.into());
        cm.metadata.resource_version = Some(rv.into());
        cm
    }

    #[test]
    fn only_the_version_written_is_an_echo_and_only_once() {
        let echoes = Echoes::default();
        assert!(!echoes.is_echo(&version("a", "10")), "nothing written");
        echoes.wrote(&version("a", "11"));
        assert!(!echoes.is_echo(&version("b", "11")), "another object");
        assert!(echoes.is_echo(&version("a", "11")));
        assert!(
            !echoes.is_echo(&version("a", "11")),
            "an echo is heard once"
        );
        assert!(echoes.is_empty());
    }

    #[test]
    fn another_version_wakes_and_clears_the_write() {
        let echoes = Echoes::default();
        echoes.wrote(&version("a", "11"));
        // Someone changed the object after the write (or the write changed nothing and this is
        // the next change): not an echo, and the write is forgotten.
        assert!(!echoes.is_echo(&version("a", "12")));
        assert!(echoes.is_empty());
        echoes.wrote(&version("a", "13"));
        echoes.forget(&version("a", "13"));
        assert!(echoes.is_empty());
    }

    #[test]
    fn an_awaited_echo_wakes() {
        let echoes = Echoes::default();
        echoes.wrote(&version("a", "11"));
        echoes.awaited("a");
        assert!(!echoes.is_echo(&version("a", "11")));
    }

    #[test]
    fn an_object_without_a_uid_or_version_is_never_an_echo() {
        let echoes = Echoes::default();
        let mut cm = version("a", "11");
        echoes.wrote(&cm);
        cm.metadata.uid = None;
        assert!(!echoes.is_echo(&cm));
        let mut unversioned = version("c", "1");
        unversioned.metadata.resource_version = None;
        echoes.wrote(&unversioned);
        assert_eq!(echoes.len(), 1, "only the versioned write is remembered");
    }
}
