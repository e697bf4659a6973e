//! The resource registry: built-in resource types and those registered by CRDs.

use serde_json::Value;

/// Where objects of a resource are stored (shared by every served version).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StorageKey {
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name.
    pub plural: String,
}

impl StorageKey {
    /// A storage key.
    pub fn new(group: &str, plural: &str) -> Self {
        StorageKey {
            group: group.to_string(),
            plural: plural.to_string(),
        }
    }
}

/// One served resource in one group version.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceType {
    /// API group ("" for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural name.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `status` subresource.
    pub status: bool,
    /// Maintains `metadata.generation`.
    pub generation: bool,
    /// Short names.
    pub short_names: Vec<String>,
    /// Categories (e.g. `all`).
    pub categories: Vec<String>,
    /// Storage location.
    pub storage: StorageKey,
    /// Name of the CRD defining it, for custom resources.
    pub crd: Option<String>,
}

impl ResourceType {
    /// Which of its lists are associative ([`crate::lists`]).
    pub fn schema(&self) -> crate::lists::Schema<'_> {
        crate::lists::Schema {
            group: &self.group,
            kind: &self.kind,
        }
    }

    /// `group/version` or `version` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `Kind` + `List`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// True for `events` in either API.
    pub fn is_event(&self) -> bool {
        self.storage == StorageKey::new("", "events")
    }
}

/// All resource types currently served.
#[derive(Debug, Clone)]
pub struct Registry {
    types: Vec<ResourceType>,
}

impl Registry {
    /// A registry serving exactly `types`.
    pub fn from_types(types: Vec<ResourceType>) -> Self {
        Registry { types }
    }

    /// Find a resource by group, version and plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// Find a resource by group and kind (any version, preferred first).
    pub fn find_kind(&self, group: &str, version: &str, kind: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
    }

    /// All types.
    pub fn all(&self) -> &[ResourceType] {
        &self.types
    }

    /// Groups with their versions, preferred version first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for t in &self.types {
            match out.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, vs)) => {
                    if !vs.contains(&t.version) {
                        vs.push(t.version.clone());
                    }
                }
                None => out.push((t.group.clone(), vec![t.version.clone()])),
            }
        }
        for (_, vs) in &mut out {
            vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }

    /// Types served in one group version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceType> + 'a {
        self.types
            .iter()
            .filter(move |t| t.group == group && t.version == version)
    }

    /// Replace every type defined by the CRD `crd_name` with the ones derived from `crd`.
    pub fn register_crd(&mut self, crd_name: &str, crd: &Value) {
        self.unregister_crd(crd_name);
        self.types.extend(types_from_crd(crd_name, crd));
    }

    /// Remove every type defined by the CRD `crd_name`.
    pub fn unregister_crd(&mut self, crd_name: &str) {
        self.types.retain(|t| t.crd.as_deref() != Some(crd_name));
    }
}

/// The resource types declared by a CRD object (one per served version).
pub fn types_from_crd(crd_name: &str, crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = names["plural"].as_str().unwrap_or_default();
    let kind = names["kind"].as_str().unwrap_or_default();
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return vec![];
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut versions: Vec<&Value> = spec["versions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| v["served"].as_bool() != Some(false))
                .collect()
        })
        .unwrap_or_default();
    versions.sort_by(|a, b| {
        version_priority(b["name"].as_str().unwrap_or_default())
            .cmp(&version_priority(a["name"].as_str().unwrap_or_default()))
    });
    versions
        .into_iter()
        .filter_map(|v| {
            let version = v["name"].as_str()?;
            Some(ResourceType {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                plural: plural.into(),
                singular: names["singular"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| kind.to_lowercase()),
                namespaced: spec["scope"].as_str() != Some("Cluster"),
                status: v["subresources"]["status"].is_object(),
                generation: true,
                short_names: strings(&names["shortNames"]),
                categories: strings(&names["categories"]),
                storage: StorageKey::new(group, plural),
                crd: Some(crd_name.to_string()),
            })
        })
        .collect()
}

/// Kubernetes version ordering: GA > beta > alpha, then by numbers.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let rest = v.strip_prefix('v').unwrap_or(v);
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stage, n) = if tail.is_empty() {
        (3, 0)
    } else if let Some(b) = tail.strip_prefix("beta") {
        (2, b.parse().unwrap_or(0))
    } else if let Some(a) = tail.strip_prefix("alpha") {
        (1, a.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (stage, major, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_types() {
        let crd = json!({"spec": {"group": "habitat.sh", "scope": "Namespaced",
            "names": {"plural": "habitats", "kind": "Habitat", "shortNames": ["hab"]},
            "versions": [{"name": "v1beta1", "served": true}, {"name": "v1", "served": true, "subresources": {"status": {}}}]}});
        let mut r = Registry::default();
        r.register_crd("habitats.habitat.sh", &crd);
        let t = r.find("habitat.sh", "v1", "habitats").expect("registered");
        assert!(t.status && t.namespaced);
        assert_eq!(t.short_names, vec!["hab"]);
        assert_eq!(
            r.groups()
                .iter()
                .find(|g| g.0 == "habitat.sh")
                .map(|g| g.1[0].as_str()),
            Some("v1")
        );
        r.unregister_crd("habitats.habitat.sh");
        assert!(r.find("habitat.sh", "v1", "habitats").is_none());
    }

    #[test]
    fn version_order() {
        assert!(version_priority("v1") > version_priority("v1beta1"));
        assert!(version_priority("v1beta2") > version_priority("v1beta1"));
        assert!(version_priority("v1beta1") > version_priority("v1alpha1"));
    }
}
