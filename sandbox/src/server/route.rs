//! Parsing request paths into API routes.

/// A parsed request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/version`
    Version,
    /// `/healthz`, `/readyz`, `/livez`
    Health,
    /// `/openapi/...`
    OpenApi,
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(String),
    /// `/api/v1` or `/apis/{group}/{version}`
    Resources {
        /// group ("" for core)
        group: String,
        /// version
        version: String,
    },
    /// A resource path.
    Object(ObjectPath),
}

/// `/api[s]/{gv}/[namespaces/{ns}/]{plural}[/{name}[/{sub}]]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPath {
    /// group ("" for core)
    pub group: String,
    /// version
    pub version: String,
    /// namespace, when the path is namespaced
    pub namespace: Option<String>,
    /// plural resource
    pub plural: String,
    /// object name
    pub name: Option<String>,
    /// subresource (`status`)
    pub sub: Option<String>,
}

/// Parse a request path.
pub fn parse(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["version"] => Some(Route::Version),
        ["healthz" | "readyz" | "livez", ..] => Some(Route::Health),
        ["openapi", ..] => Some(Route::OpenApi),
        ["api"] => Some(Route::CoreVersions),
        ["apis"] => Some(Route::Groups),
        ["apis", g] => Some(Route::Group(g.to_string())),
        ["api", v] => Some(Route::Resources {
            group: String::new(),
            version: v.to_string(),
        }),
        ["apis", g, v] => Some(Route::Resources {
            group: g.to_string(),
            version: v.to_string(),
        }),
        ["api", v, rest @ ..] => object("", v, rest),
        ["apis", g, v, rest @ ..] => object(g, v, rest),
        _ => None,
    }
}

fn object(group: &str, version: &str, rest: &[&str]) -> Option<Route> {
    let s = |x: &&str| x.to_string();
    let (namespace, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !matches!(*plural, "status" | "finalize") => {
            (Some(ns.to_string()), [&[*plural][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    if tail.is_empty() || tail.len() > 3 {
        return None;
    }
    Some(Route::Object(ObjectPath {
        group: group.to_string(),
        version: version.to_string(),
        namespace,
        plural: tail[0].to_string(),
        name: tail.get(1).map(s),
        sub: tail.get(2).map(s),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(p: &str) -> ObjectPath {
        match parse(p) {
            Some(Route::Object(o)) => o,
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn paths() {
        let o = obj("/api/v1/namespaces/default/pods/p1/status");
        assert_eq!(o.namespace.as_deref(), Some("default"));
        assert_eq!(
            (o.plural.as_str(), o.name.as_deref(), o.sub.as_deref()),
            ("pods", Some("p1"), Some("status"))
        );
        let o = obj("/api/v1/namespaces/default");
        assert_eq!(
            (o.plural.as_str(), o.name.as_deref(), o.namespace),
            ("namespaces", Some("default"), None)
        );
        let o = obj("/api/v1/namespaces/x/status");
        assert_eq!(
            (o.name.as_deref(), o.sub.as_deref()),
            (Some("x"), Some("status"))
        );
        let o = obj("/apis/habitat.sh/v1/habitats");
        assert_eq!(
            (o.group.as_str(), o.namespace, o.name),
            ("habitat.sh", None, None)
        );
        let o = obj("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/a.b");
        assert_eq!(o.name.as_deref(), Some("a.b"));
        assert_eq!(
            parse("/apis/apps/v1"),
            Some(Route::Resources {
                group: "apps".into(),
                version: "v1".into()
            })
        );
        assert_eq!(parse("/nope"), None);
    }
}
