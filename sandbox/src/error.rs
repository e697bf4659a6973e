//! The API server's error, [`ApiError`] (a `metav1.Status`), which every layer of the sandbox
//! may return.

use serde_json::{json, Value};

/// An API error, rendered as a `metav1.Status` object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, ...).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Optional `details` (name, group, kind).
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, group: &str, kind: &str, name: &str) -> Self {
        // The real server leaves `group` out for the core group.
        self.details = Some(if group.is_empty() {
            json!({"name": name, "kind": kind})
        } else {
            json!({"name": name, "group": group, "kind": kind})
        });
        self
    }

    /// 404 for a named object of a resource (`plural.group`).
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
        )
        .with_details(group, plural, name)
    }

    /// 404 for an unknown path.
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        )
        .with_details(group, plural, name)
    }

    /// 409 Conflict (stale resourceVersion).
    pub fn conflict(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, plural)
            ),
        )
        .with_details(group, plural, name)
    }

    /// 409 Conflict for an apply without `force` that changes fields other managers own, one
    /// cause per field: `conflicts` holds each owner as kube-apiserver prints it and the field's
    /// path (its field manager's `NewConflictError`).
    pub fn apply_conflict(conflicts: &[(String, String)]) -> Self {
        let message = match conflicts {
            [(who, path)] => format!("Apply failed with 1 conflict: conflict with {who}: {path}"),
            _ => {
                let mut by_owner: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
                for (who, path) in conflicts {
                    by_owner.entry(who).or_default().push(path);
                }
                let lines: Vec<String> = by_owner
                    .iter()
                    .flat_map(|(who, paths)| {
                        std::iter::once(format!("conflicts with {who}:"))
                            .chain(paths.iter().map(|p| format!("- {p}")))
                    })
                    .collect();
                format!(
                    "Apply failed with {} conflicts: {}",
                    conflicts.len(),
                    lines.join("\n")
                )
            }
        };
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|(who, path)| {
                json!({"reason": "FieldManagerConflict", "message": format!("conflict with {who}"),
                    "field": path})
            })
            .collect();
        ApiError {
            details: Some(json!({ "causes": causes })),
            ..Self::new(409, "Conflict", message)
        }
    }

    /// A server-side failure (500, 503, 429 ...) with the given reason, as kube-apiserver
    /// words it.
    pub fn server_error(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(code, reason, message)
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 422 Invalid.
    pub fn invalid(kind: &str, name: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {message}"),
        )
    }

    /// 422 Invalid with `details.causes`, as the API server answers a write that fails
    /// validation (`Kind.group "name" is invalid: ...`).
    pub fn invalid_fields(
        group: &str,
        kind: &str,
        name: &str,
        causes: &[crate::validation::Cause],
    ) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut e = Self::new(
            422,
            "Invalid",
            crate::validation::invalid_message(&qualified, name, causes),
        )
        .with_details(group, kind, name);
        if let Some(d) = e.details.as_mut() {
            d["causes"] = causes
                .iter()
                .map(crate::validation::Cause::to_json)
                .collect();
        }
        e
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {ct})"),
        )
    }

    /// 410 Expired (watch from a too old resourceVersion).
    pub fn expired(rv: &str) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {rv}"))
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 403 from the namespace lifecycle admission: a new object (`name` as sent, empty with
    /// `generateName`) in a namespace whose deletion has begun. The shape of kube-apiserver's
    /// `admission.NewForbidden` plus the `NamespaceTerminating` cause it appends.
    pub fn namespace_terminating(group: &str, plural: &str, name: &str, namespace: &str) -> Self {
        let resource = qualified(group, plural);
        let cause = format!(
            "unable to create new content in namespace {namespace} because it is being terminated"
        );
        let message = if name.is_empty() {
            format!("{resource} is forbidden: {cause}")
        } else {
            format!("{resource} \"{name}\" is forbidden: {cause}")
        };
        let mut details = json!({"kind": plural});
        if !name.is_empty() {
            details["name"] = json!(name);
        }
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        details["causes"] = json!([{
            "reason": NAMESPACE_TERMINATING_CAUSE,
            "message": format!("namespace {namespace} is being terminated"),
            "field": "metadata.namespace",
        }]);
        ApiError {
            details: Some(details),
            ..Self::forbidden(message)
        }
    }

    /// The `metav1.Status` JSON for this error.
    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

/// The cause type kube-apiserver gives a create refused by a terminating namespace
/// (`NamespaceTerminatingCause` in k8s.io/api/core/v1).
pub const NAMESPACE_TERMINATING_CAUSE: &str = "NamespaceTerminating";

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shape() {
        let s = ApiError::not_found("habitat.sh", "habitats", "x").to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "habitats.habitat.sh \"x\" not found");
        assert_eq!(s["details"]["name"], "x");
    }

    #[test]
    fn namespace_terminating_shape() {
        let s = ApiError::namespace_terminating("", "configmaps", "x", "e2e-x").to_status();
        assert_eq!(
            s,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "configmaps \"x\" is forbidden: unable to create new content in namespace e2e-x because it is being terminated",
                "reason": "Forbidden",
                "details": {"name": "x", "kind": "configmaps", "causes": [{
                    "reason": "NamespaceTerminating",
                    "message": "namespace e2e-x is being terminated",
                    "field": "metadata.namespace"
                }]},
                "code": 403
            })
        );
        let s = ApiError::namespace_terminating("apps", "statefulsets", "", "n").to_status();
        assert_eq!(
            s["message"],
            "statefulsets.apps is forbidden: unable to create new content in namespace n because it is being terminated"
        );
        assert_eq!(s["details"]["group"], "apps");
        assert!(s["details"].get("name").is_none());
    }
}
