//! Checks of a CRD's CEL rules at CRD creation and update.
//!
//! A real API server estimates the cost of every rule from the bounds of the data it can see
//! (`maxLength`, `maxItems`, `maxProperties`; unbounded means "as large as a request can be")
//! and refuses a CRD whose rule, or whose total over the schema, exceeds the budget. This
//! sandbox does not estimate costs. It refuses a CRD where a rule sits on a string without
//! `maxLength`, on or under an array without `maxItems`, or on or under a map
//! (`additionalProperties`) without `maxProperties`, and a rule that does not compile.
//!
//! How faithful that is: it is stricter than the real server in one direction and weaker in
//! the other. Stricter: a real server accepts a cheap rule on an unbounded string (`self.size() > 0`
//! costs the same at any length) and even a few `matches()` on unbounded strings as long
//! as the total fits; this check refuses them all. Weaker: a real server may still refuse a
//! bounded schema when the bounds are large or the rules many (its per-rule limit and total
//! limit); this check accepts any bounded schema. It catches what refused this project's CRD
//! (rules over unbounded strings inside an unbounded list), and a CRD that passes it has every
//! rule over bounded data, which is what the project's API requires (SPEC section 2). The
//! message says it comes from the sandbox rather than imitating the real estimate's factor.

use super::Cause;
use serde_json::Value;

/// The field errors of a CRD's rules, empty when it may be stored.
pub fn check(crd: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, version) in versions.iter().enumerate() {
        let schema = &version["schema"]["openAPIV3Schema"];
        if schema.is_null() {
            continue;
        }
        // One version: the real server names the schema by its internal (v1beta1) place.
        let path = if versions.len() == 1 {
            "spec.validation.openAPIV3Schema".to_string()
        } else {
            format!("spec.versions[{i}].schema.openAPIV3Schema")
        };
        walk(schema, &path, None, &mut out);
    }
    out
}

/// `unbounded`: the path of an enclosing list or map without a bound, if any.
fn walk(schema: &Value, path: &str, unbounded: Option<&str>, out: &mut Vec<Cause>) {
    let ty = schema["type"].as_str().unwrap_or_default();
    let own = match ty {
        "string" if schema.get("maxLength").is_none() => Some("a string without maxLength"),
        "array" if schema.get("maxItems").is_none() => Some("an array without maxItems"),
        "object"
            if schema["additionalProperties"].is_object()
                && schema.get("maxProperties").is_none() =>
        {
            Some("a map without maxProperties")
        }
        _ => None,
    };
    for (i, rule) in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let field = format!("{path}.x-kubernetes-validations[{i}].rule");
        let text = rule["rule"].as_str().unwrap_or_default();
        if let Err(e) = cel::Program::compile(text) {
            out.push(Cause::invalid(
                &field,
                &render(text),
                &format!("compilation failed: {e}"),
            ));
            continue;
        }
        let why = own
            .map(str::to_string)
            .or_else(|| unbounded.map(|u| format!("under {u}")));
        if let Some(why) = why {
            out.push(Cause {
                reason: "FieldValueForbidden",
                field,
                message: format!(
                    "Forbidden: the sandbox refuses a CEL rule on {why}, whose cost a real API server may find over its budget: add maxLength, maxItems or maxProperties"
                ),
            });
        }
    }
    let inner_unbounded = match ty {
        "array" | "object" if own.is_some() => Some(path.to_string()),
        _ => unbounded.map(str::to_string),
    };
    let inner = inner_unbounded.as_deref();
    for (name, sub) in schema["properties"].as_object().into_iter().flatten() {
        walk(sub, &format!("{path}.properties[{name}]"), inner, out);
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        walk(items, &format!("{path}.items"), inner, out);
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|e| e.is_object()) {
        walk(extra, &format!("{path}.additionalProperties"), inner, out);
    }
}

fn render(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(schema: Value) -> Value {
        json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}})
    }

    #[test]
    fn rules_over_unbounded_data_are_refused() {
        let rule = json!([{"rule": "self.matches('^a$')"}]);
        let s = json!({"type": "object", "properties": {
            "a": {"type": "string", "x-kubernetes-validations": rule},
            "b": {"type": "string", "maxLength": 5, "x-kubernetes-validations": rule},
            "l": {"type": "array", "items": {"type": "object", "properties": {
                "c": {"type": "string", "maxLength": 5, "x-kubernetes-validations": rule}}}},
            "m": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 5,
                "x-kubernetes-validations": rule}}}});
        let fields: Vec<String> = check(&crd(s)).into_iter().map(|c| c.field).collect();
        assert_eq!(
            fields,
            [
                "spec.validation.openAPIV3Schema.properties[a].x-kubernetes-validations[0].rule",
                "spec.validation.openAPIV3Schema.properties[l].items.properties[c].x-kubernetes-validations[0].rule",
            ]
        );
    }

    #[test]
    fn rules_that_do_not_compile_are_refused() {
        let s = json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.("}]});
        let c = check(&crd(s));
        assert_eq!(c.len(), 1);
        assert!(c[0].message.contains("compilation failed"), "{c:?}");
    }
}
