//! Structural-schema defaulting and validation of custom resources against a CRD's
//! `openAPIV3Schema` (types, required, enum, bounds, lengths, item counts; no CEL, no pattern).

use serde_json::Value;

/// Fill `default` values for absent properties, recursively (like the API server does).
pub fn apply_defaults(schema: &Value, obj: &mut Value) {
    if let (Some(props), Some(map)) = (schema["properties"].as_object(), obj.as_object_mut()) {
        for (name, sub) in props {
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

/// Validate an object; returns field errors in the API server's message style.
pub fn validate(schema: &Value, obj: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    if let (Some(props), Some(map)) = (schema["properties"].as_object(), obj.as_object()) {
        for (name, sub) in props {
            if name == "metadata" || name == "apiVersion" || name == "kind" {
                continue;
            }
            if let Some(v) = map.get(name) {
                check(sub, v, name, &mut errors);
            }
        }
        required(schema, map, "", &mut errors);
    }
    errors
}

fn required(
    schema: &Value,
    map: &serde_json::Map<String, Value>,
    path: &str,
    errors: &mut Vec<String>,
) {
    for r in schema["required"].as_array().into_iter().flatten() {
        if let Some(r) = r.as_str() {
            if r != "metadata" && map.get(r).is_none_or(Value::is_null) {
                errors.push(format!("{}: Required value", join(path, r)));
            }
        }
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn render(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn check(schema: &Value, v: &Value, path: &str, errors: &mut Vec<String>) {
    if v.is_null() {
        if schema["nullable"].as_bool() != Some(true) && schema.get("type").is_some() {
            errors.push(format!(
                "{path}: Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                schema["type"].as_str().unwrap_or("object")
            ));
        }
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"].as_bool() == Some(true);
    if let Some(want) = schema["type"].as_str() {
        let got = type_name(v);
        let ok = got == want
            || (want == "number" && got == "integer")
            || (int_or_string && (got == "integer" || got == "string"));
        if !ok {
            errors.push(format!(
                "{path}: Invalid value: \"{got}\": {path} in body must be of type {want}: \"{got}\""
            ));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(v) {
            let list: Vec<String> = allowed.iter().map(render).collect();
            errors.push(format!(
                "{path}: Unsupported value: {}: supported values: {}",
                render(v),
                list.join(", ")
            ));
        }
    }
    if let (Some(n), Some(min)) = (v.as_f64(), schema["minimum"].as_f64()) {
        if n < min {
            errors.push(format!(
                "{path}: Invalid value: {v}: {path} in body should be greater than or equal to {}",
                schema["minimum"]
            ));
        }
    }
    if let (Some(n), Some(max)) = (v.as_f64(), schema["maximum"].as_f64()) {
        if n > max {
            errors.push(format!(
                "{path}: Invalid value: {v}: {path} in body should be less than or equal to {}",
                schema["maximum"]
            ));
        }
    }
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as u64;
        if let Some(min) = schema["minLength"].as_u64().filter(|m| len < *m) {
            errors.push(format!(
                "{path}: Invalid value: \"{s}\": {path} in body should be at least {min} chars long"
            ));
        }
        if let Some(max) = schema["maxLength"].as_u64().filter(|m| len > *m) {
            errors.push(format!(
                "{path}: Too long: may not be more than {max} bytes"
            ));
        }
    }
    if let Some(arr) = v.as_array() {
        let len = arr.len() as u64;
        if let Some(min) = schema["minItems"].as_u64().filter(|m| len < *m) {
            errors.push(format!(
                "{path}: Invalid value: {len}: {path} in body should have at least {min} items"
            ));
        }
        if let Some(max) = schema["maxItems"].as_u64().filter(|m| len > *m) {
            errors.push(format!(
                "{path}: Too many: {len}: must have at most {max} items"
            ));
        }
        if let Some(items) = schema.get("items") {
            for (i, el) in arr.iter().enumerate() {
                check(items, el, &format!("{path}[{i}]"), errors);
            }
        }
    }
    if let Some(map) = v.as_object() {
        if let Some(props) = schema["properties"].as_object() {
            for (name, sub) in props {
                if let Some(child) = map.get(name) {
                    check(sub, child, &join(path, name), errors);
                }
            }
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|e| e.is_object()) {
            for (name, child) in map {
                check(extra, child, &join(path, name), errors);
            }
        }
        required(schema, map, path, errors);
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
                "count": {"type": "integer", "minimum": 0, "default": 1},
                "service": {"type": "object", "properties": {
                    "topology": {"type": "string", "enum": ["standalone", "leader"], "default": "standalone"}}}}}}})
    }

    #[test]
    fn defaults() {
        let mut o = json!({"spec": {"image": "x", "service": {}}});
        apply_defaults(&schema(), &mut o);
        assert_eq!(o["spec"]["count"], 1);
        assert_eq!(o["spec"]["service"]["topology"], "standalone");
    }

    #[test]
    fn errors() {
        let e = validate(&schema(), &json!({"spec": {"count": -1}}));
        assert!(e.iter().any(|m| m == "spec.image: Required value"), "{e:?}");
        assert!(e
            .iter()
            .any(|m| m.contains("spec.count in body should be greater than or equal to 0")));
        let e = validate(
            &schema(),
            &json!({"spec": {"image": "", "count": "x", "service": {"topology": "bad"}}}),
        );
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(
            e[0].starts_with("spec.count: Invalid value: \"string\""),
            "{e:?}"
        );
    }
}
