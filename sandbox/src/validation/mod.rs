//! Admission of custom resources against their CRD, as a real kube-apiserver (v1.36) does it:
//! pruning of unknown fields, defaulting, structural-schema validation ([`schema`]), then the
//! CEL rules of `x-kubernetes-validations` ([`cel`]); and the check of a CRD's CEL rules at
//! CRD creation ([`crd`]).
//!
//! Errors are [`Cause`]s rendered like the API server's `field.Error`s, so that the Status
//! message and `details.causes` match the real server's (the order of the causes does not: the
//! real server walks Go maps, in random order).

pub mod cel;
pub mod crd;
pub mod schema;

use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// What the sources of a CRD's schema compile to (CEL rules, `pattern`s), compiled once per
/// distinct source for the process: a CRD's sources are few and checked on every write. A
/// source that does not compile is not kept.
pub(crate) struct Compiled<T>(OnceLock<Mutex<HashMap<String, T>>>);

impl<T: Clone> Compiled<T> {
    pub(crate) const fn new() -> Self {
        Compiled(OnceLock::new())
    }

    /// `source` compiled by `compile`, the first time only.
    pub(crate) fn get<E>(
        &self,
        source: &str,
        compile: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<T, E> {
        let map = self.0.get_or_init(Default::default);
        let lock = || map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = lock().get(source) {
            return Ok(t.clone());
        }
        let t = compile(source)?;
        lock().insert(source.to_string(), t.clone());
        Ok(t)
    }
}

/// `source` as a regular expression, compiled once for the process ([`Compiled`]): the schema's
/// `pattern`s and the arguments of CEL's `matches()` (the `cel` crate compiled that argument on
/// every evaluation: the image rule's expression, on every Habitat write, was 6% of the
/// sandbox's CPU at N = 1000 in `cargo bench --bench scale`).
pub(crate) fn regex(source: &str) -> Result<regex::Regex, regex::Error> {
    static REGEXES: Compiled<regex::Regex> = Compiled::new();
    REGEXES.get(source, regex::Regex::new)
}

/// One field error, as the API server renders it in `details.causes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    /// The field path (`spec.service.name`), or `<nil>` for an error of the whole object.
    pub field: String,
    /// The message without the field (`Invalid value: -1: ...`).
    pub message: String,
}

impl Cause {
    fn new(reason: &'static str, field: &str, message: String) -> Self {
        let field = if field.is_empty() { "<nil>" } else { field };
        Cause {
            reason,
            field: field.to_string(),
            message,
        }
    }

    /// `Invalid value: VALUE: DETAIL` (VALUE already rendered, or omitted when empty).
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        let message = if value.is_empty() {
            format!("Invalid value: {detail}")
        } else {
            format!("Invalid value: {value}: {detail}")
        };
        Self::new("FieldValueInvalid", field, message)
    }

    /// The `field: message` text of the Status message.
    pub fn text(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }

    /// The entry of `details.causes`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({"reason": self.reason, "message": self.message, "field": self.field})
    }
}

/// The Status message of a 422: `Kind.group "name" is invalid: ...` (one cause bare, several
/// in brackets), as `apierrors.NewInvalid` writes it.
pub fn invalid_message(qualified_kind: &str, name: &str, causes: &[Cause]) -> String {
    let list: Vec<String> = causes.iter().map(Cause::text).collect();
    let body = match list.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", list.join(", ")),
    };
    format!("{qualified_kind} \"{name}\" is invalid: {body}")
}

/// Whether the subtree of the whole object or only `.status` (a write to the status
/// subresource) is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Create, update, patch, apply of the main resource.
    Object,
    /// The status subresource: only `.status` is validated, and its messages name fields
    /// relative to `status` (`replicas in body must be of type integer`), as the real server's.
    Status,
}

/// Prune, default and validate `obj` (the candidate of a write; `old` on update) against the
/// version's `openAPIV3Schema`. Returns the object to store, or the field errors.
///
/// Like the real server, CEL rules are skipped when the schema validation found a "blocking"
/// error (unsupported value, required, too long, too many, wrong type), and an error saying so
/// is added. On update, errors at a field whose value did not change are dropped (the real
/// server's validation ratcheting, on by default since v1.30); this sandbox ratchets by field
/// path only, without the real server's finer rules for lists.
pub fn admit(
    schema: &Value,
    mut obj: Value,
    old: Option<&Value>,
    scope: Scope,
) -> Result<Value, Vec<Cause>> {
    schema::prune(schema, &mut obj);
    schema::apply_defaults(schema, &mut obj);
    let (sub_schema, value, old_value, prefix) = match scope {
        Scope::Object => (schema, &obj, old, ""),
        Scope::Status => (
            &schema["properties"]["status"],
            &obj["status"],
            old.map(|o| &o["status"]),
            "status",
        ),
    };
    let ratchet = |causes: &mut Vec<Cause>| {
        if let Some(old) = old {
            causes.retain(|c| !unchanged(&obj, old, c));
        }
    };
    let mut causes = Vec::new();
    if scope == Scope::Object || !value.is_null() {
        causes = schema::validate(sub_schema, value, prefix, scope == Scope::Object);
        ratchet(&mut causes);
    }
    if causes.iter().any(|c| c.is_blocking()) {
        causes.push(Cause::invalid(
            "",
            "null",
            "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ));
    } else {
        let mut rules = cel::validate(sub_schema, value, old_value, prefix);
        ratchet(&mut rules);
        causes.extend(rules);
    }
    if causes.is_empty() {
        Ok(obj)
    } else {
        Err(causes)
    }
}

impl Cause {
    fn is_blocking(&self) -> bool {
        matches!(
            self.reason,
            "FieldValueNotSupported"
                | "FieldValueRequired"
                | "FieldValueTooLong"
                | "FieldValueTooMany"
                | "FieldValueTypeInvalid"
        )
    }
}

/// Ratcheting: the value the error is about (its parent for a missing field) is the same in
/// the old object.
fn unchanged(new: &Value, old: &Value, cause: &Cause) -> bool {
    if cause.field == "<nil>" {
        return false;
    }
    let mut path = cause.field.as_str();
    if cause.reason == "FieldValueRequired" {
        path = path.rsplit_once('.').map_or("", |(p, _)| p);
    }
    match (lookup(new, path), lookup(old, path)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The value at a field path such as `spec.service.bind[0].name`.
pub fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (name, indices) = seg.split_once('[').map_or((seg, ""), |(n, i)| (n, i));
        if !name.is_empty() {
            cur = cur.get(name)?;
        }
        for idx in indices.split('[').filter(|s| !s.is_empty()) {
            cur = cur.get(idx.trim_end_matches(']').parse::<usize>().ok()?)?;
        }
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn message_brackets_only_several_causes() {
        let one = [Cause::invalid("spec.count", "-1", "bad")];
        assert_eq!(
            invalid_message("Habitat.habitat.sh", "a", &one),
            "Habitat.habitat.sh \"a\" is invalid: spec.count: Invalid value: -1: bad"
        );
        let two = [one[0].clone(), Cause::invalid("", "null", "x")];
        assert_eq!(
            invalid_message("Habitat.habitat.sh", "a", &two),
            "Habitat.habitat.sh \"a\" is invalid: [spec.count: Invalid value: -1: bad, <nil>: Invalid value: null: x]"
        );
    }

    #[test]
    fn lookup_paths() {
        let v = json!({"spec": {"bind": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(lookup(&v, "spec.bind[1].name"), Some(&json!("b")));
        assert_eq!(lookup(&v, "spec.bind[2].name"), None);
        assert_eq!(lookup(&v, ""), Some(&v));
    }

    #[test]
    fn ratcheting_keeps_an_unchanged_invalid_field() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "string", "maxLength": 1}, "b": {"type": "integer"}}}}});
        let old = json!({"spec": {"a": "long", "b": 1}});
        assert!(admit(
            &schema,
            json!({"spec": {"a": "long", "b": 2}}),
            Some(&old),
            Scope::Object
        )
        .is_ok());
        assert!(admit(
            &schema,
            json!({"spec": {"a": "longer", "b": 2}}),
            Some(&old),
            Scope::Object
        )
        .is_err());
        assert!(admit(&schema, old.clone(), None, Scope::Object).is_err());
    }
}
