//! The structural schema: pruning of unknown fields, defaulting, and validation of types,
//! formats, `required`, `enum`, `pattern`, numeric bounds, lengths, item and property counts,
//! with the real API server's messages (go-openapi's, as apiextensions converts them).

use super::Cause;
use serde_json::{Map, Value};

/// Fields every object keeps whatever its schema says.
const ROOT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Drop the fields the schema does not declare, as a real server does silently (it only warns)
/// unless the node has `x-kubernetes-preserve-unknown-fields: true`. `metadata` is kept whole.
pub fn prune(schema: &Value, obj: &mut Value) {
    prune_node(schema, obj, true);
}

fn prune_node(schema: &Value, v: &mut Value, root: bool) {
    let preserve = schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true);
    if let Some(map) = v.as_object_mut() {
        let props = schema["properties"].as_object();
        let extra = schema.get("additionalProperties").filter(|e| e.is_object());
        if let Some(extra) = extra {
            for child in map.values_mut() {
                prune_node(extra, child, false);
            }
            return;
        }
        if !preserve {
            map.retain(|k, _| {
                (root && ROOT_FIELDS.contains(&k.as_str()))
                    || props.is_some_and(|p| p.contains_key(k))
            });
        }
        for (k, sub) in props.into_iter().flatten() {
            if root && k == "metadata" {
                continue;
            }
            if let Some(child) = map.get_mut(k) {
                prune_node(sub, child, false);
            }
        }
    } else if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array_mut()) {
        for el in arr {
            prune_node(items, el, false);
        }
    }
}

/// The fields of `metadata` (ObjectMeta) a server knows.
const META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The paths of the fields that [`prune`] drops (`spec.color`, `spec.bind[0].extra`) and of
/// unknown top-level fields of `metadata`, as the real server names them for the
/// `fieldValidation` of a write: those of `metadata` first, then the others, sorted.
pub fn unknown_fields(schema: &Value, obj: &Value) -> Vec<String> {
    let mut meta: Vec<String> = obj["metadata"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.keys())
        .filter(|k| !META_FIELDS.contains(&k.as_str()))
        .map(|k| format!("metadata.{k}"))
        .collect();
    let mut rest = Vec::new();
    unknown_node(schema, obj, "", true, &mut rest);
    meta.sort();
    rest.sort();
    meta.extend(rest);
    meta
}

fn unknown_node(schema: &Value, v: &Value, path: &str, root: bool, out: &mut Vec<String>) {
    if let Some(map) = v.as_object() {
        if let Some(extra) = schema.get("additionalProperties").filter(|e| e.is_object()) {
            for (k, child) in map {
                unknown_node(extra, child, &join(path, k), false, out);
            }
            return;
        }
        let props = schema["properties"].as_object();
        let preserve = schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true);
        for (k, child) in map {
            if root && ROOT_FIELDS.contains(&k.as_str()) {
                continue;
            }
            match props.and_then(|p| p.get(k)) {
                Some(sub) => unknown_node(sub, child, &join(path, k), false, out),
                None if !preserve => out.push(join(path, k)),
                None => {}
            }
        }
    } else if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, el) in arr.iter().enumerate() {
            unknown_node(items, el, &format!("{path}[{i}]"), false, out);
        }
    }
}

/// Fill `default` values for absent properties, recursively, like the API server. A `null`
/// of a non-nullable property is replaced by its default, or dropped when it has none.
pub fn apply_defaults(schema: &Value, obj: &mut Value) {
    if let (Some(props), Some(map)) = (schema["properties"].as_object(), obj.as_object_mut()) {
        for (name, sub) in props {
            let nullable = sub["nullable"].as_bool() == Some(true);
            if map.get(name).is_some_and(|v| v.is_null() && !nullable) {
                map.remove(name);
            }
            if !map.contains_key(name) {
                if let Some(d) = sub.get("default") {
                    map.insert(name.clone(), d.clone());
                }
            }
            if let Some(child) = map.get_mut(name) {
                apply_defaults(sub, child);
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), obj.as_array_mut()) {
        for el in arr {
            apply_defaults(items, el);
        }
    }
    if let (Some(extra), Some(map)) = (schema.get("additionalProperties"), obj.as_object_mut()) {
        if extra.is_object() {
            for v in map.values_mut() {
                apply_defaults(extra, v);
            }
        }
    }
}

/// Validate `v` (the object, or its `.status` for the status subresource) against `schema`.
/// `prefix` is the field path of `v` (`""` or `status`); messages name fields relative to `v`,
/// as the real server's do. At the object's root, `metadata`, `apiVersion` and `kind` are left
/// to the API machinery.
pub fn validate(schema: &Value, v: &Value, prefix: &str, root: bool) -> Vec<Cause> {
    let mut ctx = Ctx {
        strip: if prefix.is_empty() {
            0
        } else {
            prefix.len() + 1
        },
        root,
        errors: Vec::new(),
    };
    ctx.check(schema, v, prefix);
    ctx.errors
}

struct Ctx {
    strip: usize,
    root: bool,
    errors: Vec<Cause>,
}

/// A field path joined with a property name.
pub fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// go-openapi's (type, format) of a decoded JSON value.
fn value_type(v: &Value) -> (&'static str, &'static str) {
    match v {
        Value::Null => ("null", ""),
        Value::Bool(_) => ("boolean", ""),
        Value::Number(n) if is_integer(n) => ("integer", "int64"),
        Value::Number(_) => ("number", "float64"),
        Value::String(_) => ("string", ""),
        Value::Array(_) => ("array", ""),
        Value::Object(_) => ("object", ""),
    }
}

fn is_integer(n: &serde_json::Number) -> bool {
    n.is_i64()
        || n.is_u64()
        || n.as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
}

/// The compiled `pattern` of a schema, once per pattern ([`super::regex`]; compiling it on every
/// write was about 7% of the sandbox's CPU at N = 1000 in `cargo bench --bench scale`). `None`
/// for a pattern that does not compile, which is not enforced.
fn pattern(p: &str) -> Option<regex::Regex> {
    super::regex(p).ok()
}

/// A value as Go's `%v`/`%q` print it in field errors.
pub fn render(v: &Value) -> String {
    match v {
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Number(n) => number(n.as_f64().unwrap_or_default(), &n.to_string()),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// Go's `%v` of a float64 bound (`0`, not `0.0`).
fn number(f: f64, text: &str) -> String {
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{}", f as i64)
    } else if text.contains('.') || text.contains('e') {
        format!("{f}")
    } else {
        text.to_string()
    }
}

fn bound(schema: &Value, key: &str) -> Option<(f64, String)> {
    let b = schema.get(key)?;
    let f = b.as_f64()?;
    Some((f, number(f, &b.to_string())))
}

impl Ctx {
    fn rel<'a>(&self, path: &'a str) -> &'a str {
        path.get(self.strip..).unwrap_or(path)
    }

    fn check(&mut self, schema: &Value, v: &Value, path: &str) {
        if v.is_null() {
            return; // a null of a non-nullable field was dropped by defaulting
        }
        self.check_format(schema, v, path);
        let typed = self.check_type(schema, v, path);
        // The real server checks `enum` apart from `type`: a scalar of the wrong type outside
        // the enum gets both errors (lists and objects: only the type's).
        let scalar = !matches!(v, Value::Array(_) | Value::Object(_));
        if !typed && !scalar {
            return;
        }
        if let Some(allowed) = schema["enum"].as_array().filter(|a| !a.contains(v)) {
            let list: Vec<String> = allowed.iter().map(render).collect();
            let msg = format!(
                "Unsupported value: {}: supported values: {}",
                render(v),
                list.join(", ")
            );
            self.errors
                .push(Cause::new("FieldValueNotSupported", path, msg));
        }
        if !typed {
            return;
        }
        let rel = self.rel(path).to_string();
        if let Some(n) = v.as_f64() {
            if let Some((_, text)) = bound(schema, "minimum").filter(|(m, _)| n < *m) {
                let d = format!("{rel} in body should be greater than or equal to {text}");
                self.errors.push(Cause::invalid(path, &render(v), &d));
            }
            if let Some((_, text)) = bound(schema, "maximum").filter(|(m, _)| n > *m) {
                let d = format!("{rel} in body should be less than or equal to {text}");
                self.errors.push(Cause::invalid(path, &render(v), &d));
            }
        }
        match v {
            Value::String(s) => self.check_string(schema, s, path, &rel),
            Value::Array(arr) => {
                let len = arr.len() as u64;
                if let Some(min) = schema["minItems"].as_u64().filter(|m| len < *m) {
                    let d = format!("{rel} in body should have at least {min} items");
                    self.errors.push(Cause::invalid(path, &len.to_string(), &d));
                }
                if let Some(max) = schema["maxItems"].as_u64().filter(|m| len > *m) {
                    let msg = format!("Too many: {len}: must have at most {max} items");
                    self.errors.push(Cause::new("FieldValueTooMany", path, msg));
                }
                if let Some(items) = schema.get("items") {
                    for (i, el) in arr.iter().enumerate() {
                        self.check(items, el, &format!("{path}[{i}]"));
                    }
                }
            }
            Value::Object(map) => self.check_object(schema, map, path, &rel),
            _ => {}
        }
    }

    /// The type check; false when the value has the wrong type (nothing more is checked).
    fn check_type(&mut self, schema: &Value, v: &Value, path: &str) -> bool {
        let (got, got_format) = value_type(v);
        let want = schema["type"].as_str().unwrap_or_default();
        let format = schema["format"].as_str().unwrap_or_default();
        if schema["x-kubernetes-int-or-string"].as_bool() == Some(true) {
            return true; // int-or-string: checked by the structural schema's own rules
        }
        if want.is_empty() {
            return true;
        }
        let fits = |t: &str| t == want || (want == "number" && t == "integer");
        let rel = self.rel(path).to_string();
        let invalid = |shown: &str, got: &str| {
            let d = format!("{rel} in body must be of type {shown}: \"{got}\"");
            Cause::new(
                "FieldValueTypeInvalid",
                path,
                format!("Invalid value: \"{got}\": {d}"),
            )
        };
        let is_number = matches!(v, Value::Number(_) | Value::Bool(_));
        if is_number && !format.is_empty() && !fits(got) && got_format != format {
            self.errors.push(invalid(format, got_format));
            return false;
        }
        if !fits(got) {
            self.errors.push(invalid(want, got));
            return false;
        }
        true
    }

    /// `format: int32`/`int64`: the value must fit (the error is the whole object's, `<nil>`).
    fn check_format(&mut self, schema: &Value, v: &Value, path: &str) {
        let Value::Number(n) = v else {
            return;
        };
        let format = schema["format"].as_str().unwrap_or_default();
        let fits = match format {
            "int32" => n
                .as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f >= i32::MIN as f64 && f <= i32::MAX as f64),
            "int64" => is_integer(n),
            _ => true,
        };
        if !fits {
            let rel = self.rel(path);
            let d = format!("Checked value must be of type integer with format {format} in {rel}");
            self.errors.push(Cause::invalid("", "\"\"", &d));
        }
    }

    fn check_string(&mut self, schema: &Value, s: &str, path: &str, rel: &str) {
        let len = s.chars().count() as u64;
        if let Some(max) = schema["maxLength"].as_u64().filter(|m| len > *m) {
            let msg = format!("Too long: may not be more than {max} bytes");
            self.errors.push(Cause::new("FieldValueTooLong", path, msg));
        }
        // Rendered only for an error: every string of every write is checked.
        let shown = || render(&Value::String(s.to_string()));
        if let Some(min) = schema["minLength"].as_u64().filter(|m| len < *m) {
            let d = format!("{rel} in body should be at least {min} chars long");
            self.errors.push(Cause::invalid(path, &shown(), &d));
        }
        if let Some(p) = schema["pattern"].as_str() {
            if pattern(p).is_some_and(|re| !re.is_match(s)) {
                let d = format!("{rel} in body should match '{p}'");
                self.errors.push(Cause::invalid(path, &shown(), &d));
            }
        }
    }

    fn check_object(&mut self, schema: &Value, map: &Map<String, Value>, path: &str, rel: &str) {
        let root = self.root && path.is_empty();
        let n = map.len() as u64;
        if let Some(max) = schema["maxProperties"].as_u64().filter(|m| n > *m) {
            let msg = format!("Too many: {n}: must have at most {max} items");
            self.errors.push(Cause::new("FieldValueTooMany", path, msg));
        }
        if let Some(min) = schema["minProperties"].as_u64().filter(|m| n < *m) {
            let d = format!("{rel} in body should have at least {min} properties");
            self.errors.push(Cause::invalid(path, &n.to_string(), &d));
        }
        for (name, sub) in schema["properties"].as_object().into_iter().flatten() {
            if root && ROOT_FIELDS.contains(&name.as_str()) {
                continue;
            }
            if let Some(child) = map.get(name) {
                self.check(sub, child, &join(path, name));
            }
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|e| e.is_object()) {
            for (name, child) in map {
                self.check(extra, child, &join(path, name));
            }
        }
        for r in schema["required"].as_array().into_iter().flatten() {
            let Some(r) = r.as_str() else { continue };
            if !(root && r == "metadata") && map.get(r).is_none_or(Value::is_null) {
                let msg = "Required value".to_string();
                self.errors
                    .push(Cause::new("FieldValueRequired", &join(path, r), msg));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["image"],
            "properties": {
                "image": {"type": "string", "minLength": 1},
                "count": {"type": "integer", "format": "int32", "minimum": 0.0, "default": 1},
                "keep": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "service": {"type": "object", "properties": {
                    "topology": {"type": "string", "enum": ["standalone", "leader"], "default": "standalone"}}}}}}})
    }

    fn texts(c: Vec<Cause>) -> Vec<String> {
        c.iter().map(Cause::text).collect()
    }

    #[test]
    fn a_pattern_is_enforced_on_each_write_not_only_the_first() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "pattern": "^[a-z]+$"},
            "odd": {"type": "string", "pattern": "("}}});
        for _ in 0..2 {
            assert!(validate(&schema, &json!({"name": "abc"}), "", true).is_empty());
            let errors = texts(validate(&schema, &json!({"name": "Abc"}), "", true));
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].contains("should match '^[a-z]+$'"), "{errors:?}");
            assert!(errors[0].contains("\"Abc\""), "{errors:?}");
            // A pattern that does not compile is not enforced.
            assert!(validate(&schema, &json!({"odd": "x"}), "", true).is_empty());
        }
    }

    #[test]
    fn defaults_replace_nulls_and_fill_missing() {
        let mut o = json!({"spec": {"image": "x", "count": null, "service": {}}});
        apply_defaults(&schema(), &mut o);
        assert_eq!(o["spec"]["count"], 1);
        assert_eq!(o["spec"]["service"]["topology"], "standalone");
        let mut o = json!({"spec": {"image": null}});
        apply_defaults(&schema(), &mut o);
        assert!(o["spec"].get("image").is_none());
    }

    #[test]
    fn prune_drops_unknown_fields_except_preserved() {
        let mut o = json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "a", "x": 1},
            "junk": 1, "spec": {"image": "x", "foo": 2, "keep": {"any": 3}}});
        prune(&schema(), &mut o);
        assert_eq!(
            o,
            json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "a", "x": 1},
                "spec": {"image": "x", "keep": {"any": 3}}})
        );
    }

    #[test]
    fn unknown_fields_metadata_first_then_sorted() {
        let o = json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "a", "zz": 1},
            "junk": 1, "spec": {"image": "x", "foo": 2, "bar": [], "keep": {"any": 3}}});
        assert_eq!(
            unknown_fields(&schema(), &o),
            ["metadata.zz", "junk", "spec.bar", "spec.foo"]
        );
    }

    #[test]
    fn errors_in_the_real_servers_words() {
        let e = texts(validate(
            &schema(),
            &json!({"spec": {"count": -1}}),
            "",
            true,
        ));
        assert_eq!(
            e,
            [
                "spec.count: Invalid value: -1: spec.count in body should be greater than or equal to 0",
                "spec.image: Required value"
            ]
        );
        let v = json!({"spec": {"image": "", "count": 1.5, "service": {"topology": "bad"}}});
        let e = texts(validate(&schema(), &v, "", true));
        assert_eq!(
            e,
            [
                "<nil>: Invalid value: \"\": Checked value must be of type integer with format int32 in spec.count",
                "spec.count: Invalid value: \"float64\": spec.count in body must be of type int32: \"float64\"",
                "spec.image: Invalid value: \"\": spec.image in body should be at least 1 chars long",
                "spec.service.topology: Unsupported value: \"bad\": supported values: \"standalone\", \"leader\"",
            ]
        );
        let e = texts(validate(
            &schema(),
            &json!({"spec": {"image": "x", "count": 4294967296u64}}),
            "",
            true,
        ));
        assert_eq!(e, ["<nil>: Invalid value: \"\": Checked value must be of type integer with format int32 in spec.count"]);
    }

    #[test]
    fn status_messages_are_relative_to_status() {
        let s = json!({"type": "object", "properties": {"replicas": {"type": "integer"}}});
        let e = texts(validate(&s, &json!({"replicas": "x"}), "status", false));
        assert_eq!(e, ["status.replicas: Invalid value: \"string\": replicas in body must be of type integer: \"string\""]);
    }
}
