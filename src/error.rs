//! Errors: one variant per reconcile stage, each with a category used as the Event reason and
//! the metrics label. Messages say what failed; none carries Secret contents.

use std::error::Error as StdError;
use std::time::Duration;

/// A failed reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Applying or deleting a child object failed.
    #[error("cannot {action} {kind} {name}: {source}")]
    Apply {
        /// What was attempted (apply, create, delete, label).
        action: &'static str,
        /// Kind of the child.
        kind: String,
        /// Name of the child.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the Habitat's status failed.
    #[error("cannot write the status of Habitat {name}: {source}")]
    PersistStatus {
        /// The Habitat.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The finalizer could not be added or removed.
    #[error("cannot update the finalizer of Habitat {name}: {message}")]
    Finalizer {
        /// The Habitat.
        name: String,
        /// What failed.
        message: String,
        /// The delay the API server asked for, when it refused the patch with one.
        retry_after: Option<Duration>,
    },
    /// A Secret the Habitat uses could not be read (its contents are never part of this).
    #[error("cannot read Secret {name}: {source}; the operator needs `get` on Secrets in this namespace")]
    ReadSecret {
        /// The Secret.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The object read from the cache lacks a field every stored object has.
    #[error("the Habitat from the cache has no {0}; this is a bug or a broken API server")]
    MissingField(&'static str),
}

impl Error {
    /// Every category, for metrics that must exist before the first failure.
    pub const CATEGORIES: [&'static str; 5] = [
        "ApplyFailed",
        "StatusWriteFailed",
        "FinalizerFailed",
        "SecretReadFailed",
        "MissingField",
    ];

    /// The variant's name: the Event reason and the `reason` label of the error counter.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Apply { .. } => "ApplyFailed",
            Error::PersistStatus { .. } => "StatusWriteFailed",
            Error::Finalizer { .. } => "FinalizerFailed",
            Error::ReadSecret { .. } => "SecretReadFailed",
            Error::MissingField(_) => "MissingField",
        }
    }

    /// The message with its whole source chain, truncated to `max` bytes (Event notes hold 1 KiB).
    pub fn chain(&self, max: usize) -> String {
        let mut text = self.to_string();
        let mut source = self.source();
        while let Some(s) = source {
            let next = s.to_string();
            if !text.contains(&next) {
                text.push_str(": ");
                text.push_str(&next);
            }
            source = s.source();
        }
        truncate(text, max)
    }

    /// The delay the API server asked for (429 or 503 with Retry-After), if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Apply { source, .. }
            | Error::PersistStatus { source, .. }
            | Error::ReadSecret { source, .. } => retry_after(source),
            Error::Finalizer { retry_after, .. } => *retry_after,
            Error::MissingField(_) => None,
        }
    }

    /// Whether the API server said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Apply { source, .. } | Error::PersistStatus { source, .. } => {
                is_not_found(source)
            }
            _ => false,
        }
    }
}

/// The `reason` of the `StatusCause` a kube-apiserver attaches when its namespace lifecycle
/// admission refuses a new object in a namespace that is being deleted
/// (`NamespaceTerminatingCause` in k8s.io/api/core/v1).
pub const NAMESPACE_TERMINATING_CAUSE: &str = "NamespaceTerminating";

/// What a failed reconcile means for the object, and so how the reconciler answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// A real failure: Warning Event, error metrics, retry with backoff.
    Retry,
    /// The namespace is being deleted and refuses new objects. The Habitat goes away with it,
    /// so there is nothing to retry: stop quietly and wait for the object's deletion or change.
    NamespaceTerminating,
}

impl Error {
    /// How the reconciler treats this failure.
    pub fn disposition(&self) -> Disposition {
        match self {
            Error::Apply { source, .. }
            | Error::PersistStatus { source, .. }
            | Error::ReadSecret { source, .. } => disposition(source),
            Error::Finalizer { .. } | Error::MissingField(_) => Disposition::Retry,
        }
    }
}

/// How the reconciler treats a failed API call.
pub fn disposition(e: &kube::Error) -> Disposition {
    if is_namespace_terminating(e) {
        Disposition::NamespaceTerminating
    } else {
        Disposition::Retry
    }
}

/// Whether the API server refused to create an object because its namespace is being deleted,
/// or is already gone. While the namespace controller empties it, namespace lifecycle admission
/// answers HTTP 403 whose details carry the `NamespaceTerminating` cause (every server that
/// serves `apiextensions.k8s.io/v1`, which the Habitat CRD needs, sends it). Once the
/// namespace is deleted, the same admission answers 404 about the namespace itself (details
/// `kind: namespaces`), not about the object: a late Event or status write meets that.
pub fn is_namespace_terminating(e: &kube::Error) -> bool {
    let kube::Error::Api(s) = e else {
        return false;
    };
    if s.code == 404 {
        return s
            .details
            .as_ref()
            .is_some_and(|d| d.kind == "namespaces" && d.group.is_empty());
    }
    if s.code != 403 {
        return false;
    }
    s.details.as_ref().is_some_and(|d| {
        d.causes
            .iter()
            .any(|c| c.reason == NAMESPACE_TERMINATING_CAUSE)
    })
}

/// The delay the API server asked for when it refused a request with 429 Too Many Requests or
/// 503 Service Unavailable. kube-apiserver sends it as the `Retry-After` header and, in the
/// Status body, as `details.retryAfterSeconds` (`NewTooManyRequests`, and the sandbox's fault
/// injection, do both); kube's error keeps the body, not the headers, so the body is read.
/// kube's client already retried such a request a few times (its default retry layer, which
/// honours the header): an error that still carries it reaches the reconciler's backoff.
pub fn retry_after(e: &kube::Error) -> Option<Duration> {
    let kube::Error::Api(s) = e else {
        return None;
    };
    if s.code != 429 && s.code != 503 {
        return None;
    }
    let secs = s.details.as_ref()?.retry_after_seconds;
    (secs > 0).then(|| Duration::from_secs(secs.into()))
}

/// Whether a kube error is an HTTP 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Cuts `text` to at most `max` bytes on a character boundary.
pub fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max.saturating_sub(3);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The Status kube-apiserver (and the sandbox's fault injection) answers with `code`.
    pub(crate) fn refused(code: u16, retry_after_seconds: u32) -> kube::Error {
        let body = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Too many requests, please try again later.",
            "reason": if code == 429 { "TooManyRequests" } else { "ServiceUnavailable" },
            "details": {"retryAfterSeconds": retry_after_seconds},
            "code": code
        });
        kube::Error::Api(Box::new(
            serde_json::from_value(body).expect("a Status body"),
        ))
    }

    #[test]
    fn retry_after_is_read_from_429_and_503_only() {
        assert_eq!(retry_after(&refused(429, 3)), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(&refused(503, 1)), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(&refused(500, 3)), None);
        assert_eq!(retry_after(&refused(409, 3)), None);
        assert_eq!(retry_after(&refused(429, 0)), None);
        let no_details = kube::Error::Api(
            kube::core::Status::failure("slow down", "TooManyRequests")
                .with_code(429)
                .boxed(),
        );
        assert_eq!(retry_after(&no_details), None);
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("statefulsets.apps \"redis\" is forbidden", "Forbidden")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn categories_lists_every_variant() {
        let all = [
            Error::Apply {
                action: "apply",
                kind: "StatefulSet".into(),
                name: "x".into(),
                source: api_error(403),
            },
            Error::PersistStatus {
                name: "x".into(),
                source: api_error(500),
            },
            Error::Finalizer {
                name: "x".into(),
                message: "m".into(),
                retry_after: None,
            },
            Error::ReadSecret {
                name: "x".into(),
                source: api_error(403),
            },
            Error::MissingField("metadata.uid"),
        ];
        let names: Vec<&str> = all.iter().map(Error::category).collect();
        assert_eq!(names, Error::CATEGORIES);
    }

    #[test]
    fn categories_are_stable_variant_names() {
        let e = Error::Apply {
            action: "apply",
            kind: "StatefulSet".into(),
            name: "redis".into(),
            source: api_error(403),
        };
        assert_eq!(e.category(), "ApplyFailed");
        assert_eq!(Error::MissingField("namespace").category(), "MissingField");
    }

    #[test]
    fn the_chain_names_the_object_and_the_api_error() {
        let e = Error::Apply {
            action: "apply",
            kind: "StatefulSet".into(),
            name: "redis".into(),
            source: api_error(403),
        };
        let text = e.chain(1024);
        assert!(text.starts_with("cannot apply StatefulSet redis"), "{text}");
        assert!(text.contains("forbidden"), "{text}");
    }

    #[test]
    fn long_messages_are_truncated_on_a_character_boundary() {
        let t = truncate("é".repeat(600), 1024);
        assert!(t.len() <= 1024);
        assert!(t.ends_with("..."));
    }

    /// The Status a kube-apiserver answers to a create in a terminating namespace, verbatim.
    const TERMINATING: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"x\" is forbidden: unable to create new content in namespace e2e-x because it is being terminated","reason":"Forbidden","details":{"name":"x","kind":"configmaps","causes":[{"reason":"NamespaceTerminating","message":"namespace e2e-x is being terminated","field":"metadata.namespace"}]},"code":403}"#;

    fn terminating() -> kube::Error {
        let status: kube::core::Status = serde_json::from_str(TERMINATING).expect("a valid Status");
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn a_create_refused_by_a_terminating_namespace_is_not_a_failure() {
        assert!(is_namespace_terminating(&terminating()));
        let e = Error::Apply {
            action: "apply",
            kind: "ConfigMap".into(),
            name: "x".into(),
            source: terminating(),
        };
        assert_eq!(e.disposition(), Disposition::NamespaceTerminating);
        let e = Error::PersistStatus {
            name: "x".into(),
            source: terminating(),
        };
        assert_eq!(e.disposition(), Disposition::NamespaceTerminating);
    }

    #[test]
    fn the_terminating_namespace_is_read_from_its_cause_not_its_message() {
        let mut status: kube::core::Status =
            serde_json::from_str(TERMINATING).expect("a valid Status");
        if let Some(d) = status.details.as_mut() {
            d.causes.clear();
        }
        // The same words without the cause: another 403 (an admission webhook's, RBAC's).
        assert!(!is_namespace_terminating(&kube::Error::Api(status.boxed())));
    }

    /// What a kube-apiserver answers to a create in a namespace that no longer exists, verbatim.
    const NAMESPACE_GONE: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"namespaces \"e2e-x\" not found","reason":"NotFound","details":{"name":"e2e-x","kind":"namespaces"},"code":404}"#;

    #[test]
    fn a_create_in_a_namespace_already_gone_is_not_a_failure() {
        let status: kube::core::Status =
            serde_json::from_str(NAMESPACE_GONE).expect("a valid Status");
        let gone = kube::Error::Api(status.boxed());
        assert!(is_namespace_terminating(&gone));
        assert_eq!(disposition(&gone), Disposition::NamespaceTerminating);
        // A 404 about the object itself (a patch of a deleted ConfigMap) is not about the
        // namespace.
        let mut status: kube::core::Status =
            serde_json::from_str(NAMESPACE_GONE).expect("a valid Status");
        if let Some(d) = status.details.as_mut() {
            d.kind = "configmaps".into();
        }
        assert!(!is_namespace_terminating(&kube::Error::Api(status.boxed())));
        assert!(!is_namespace_terminating(&api_error(404)));
    }

    #[test]
    fn other_forbidden_answers_are_failures() {
        // RBAC: a plain 403 without the cause.
        let e = Error::Apply {
            action: "apply",
            kind: "StatefulSet".into(),
            name: "redis".into(),
            source: api_error(403),
        };
        assert_eq!(e.disposition(), Disposition::Retry);
        // The cause alone, on another code, does not count.
        let mut status: kube::core::Status =
            serde_json::from_str(TERMINATING).expect("a valid Status");
        status.code = 500;
        assert!(!is_namespace_terminating(&kube::Error::Api(status.boxed())));
        assert_eq!(
            Error::MissingField("metadata.uid").disposition(),
            Disposition::Retry
        );
    }

    #[test]
    fn not_found_is_recognised() {
        let e = Error::PersistStatus {
            name: "x".into(),
            source: api_error(404),
        };
        assert!(e.is_not_found());
    }
}
