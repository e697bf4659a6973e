//! CEL rules (`x-kubernetes-validations`) evaluated with the `cel` crate: `rule`, `message`,
//! `messageExpression`, `fieldPath`, `reason`, and transition rules (those naming `oldSelf`),
//! which run only on update where the old object has a value at the rule's node.
//!
//! Not modelled: the real server's CEL libraries beyond the `cel` crate's standard functions
//! (`size`, `matches`, `startsWith`, `endsWith`, `contains`, `has`, macros...; no Kubernetes
//! extensions such as `quantity()` or `isURL()`), the runtime cost budget, and old values of
//! list items (the real server correlates items of `listType: map`/`set` lists only; here no
//! item is correlated, so transition rules under list items never run).

use super::schema::{join, render};
use super::{Cause, Compiled};
use cel::common::types::{CelBool, CelString};
use cel::{Context, Env, ExecutionError, Program};
use serde_json::Value;
use std::sync::{Arc, OnceLock};

/// The standard environment, built once: building it per rule cost a write more than the rule.
/// Its `matches()` is [`matches`].
fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Both fail only when `matches` is already declared: the crate's own is left out
        // (no `regex` feature in Cargo.toml), so a failure here is a build mistake.
        cel::add_member_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>)
            .expect("the cel crate is built without its own matches()");
        cel::add_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>,
            id = "matches")
        .expect("the cel crate is built without its own matches()");
        Arc::new(env)
    })
    .clone()
}

/// CEL's `matches()` (`s.matches(re)` and `matches(s, re)`), with `re` compiled once
/// ([`super::regex`]); the `cel` crate's own compiles it on every call. RE2 syntax, as the
/// real server's, which the `regex` crate follows.
fn matches(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    match super::regex(re.inner()) {
        Ok(compiled) => Ok(CelBool::from(compiled.is_match(this.inner()))),
        Err(err) => Err(ExecutionError::FunctionError {
            function: "matches".to_string(),
            message: format!("'{}' not a valid regex:\n{err}", re.inner()),
        }),
    }
}

/// `source` compiled, once per distinct source ([`Compiled`]).
fn compile(source: &str) -> Result<Arc<Program>, String> {
    static PROGRAMS: Compiled<Arc<Program>> = Compiled::new();
    PROGRAMS.get(source, |s| {
        Program::compile(s).map(Arc::new).map_err(|e| e.to_string())
    })
}

/// Evaluate every rule under `schema` on `v` (at field path `path`), with `old` on update.
pub fn validate(schema: &Value, v: &Value, old: Option<&Value>, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    walk(schema, v, old, path, &mut causes);
    causes
}

fn walk(schema: &Value, v: &Value, old: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    if v.is_null() {
        return;
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(cause) = check_rule(rule, v, old.filter(|o| !o.is_null()), path) {
            out.push(cause);
        }
    }
    match v {
        Value::Object(map) => {
            for (name, sub) in schema["properties"].as_object().into_iter().flatten() {
                if let Some(child) = map.get(name) {
                    let old_child = old.and_then(|o| o.get(name));
                    walk(sub, child, old_child, &join(path, name), out);
                }
            }
            if let Some(extra) = schema.get("additionalProperties").filter(|e| e.is_object()) {
                for (name, child) in map {
                    let old_child = old.and_then(|o| o.get(name));
                    walk(extra, child, old_child, &join(path, name), out);
                }
            }
        }
        Value::Array(arr) => {
            if let Some(items) = schema.get("items") {
                for (i, el) in arr.iter().enumerate() {
                    walk(items, el, None, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// `v` with every null-valued member of an object removed: the real server's CEL sees a field
/// set to null (`channel: null`, allowed by `nullable: true`) as absent, so `has()` is false
/// for it (recorded in tests/admission/cases.yaml, case track-channel-with-null-channel).
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, x)| !x.is_null())
                .map(|(k, x)| (k.clone(), without_nulls(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// True when a rule names `oldSelf` (a transition rule).
pub fn is_transition(rule: &str) -> bool {
    compile(rule)
        .map(|p| p.references().has_variable("oldSelf"))
        .unwrap_or(false)
}

fn check_rule(rule: &Value, v: &Value, old: Option<&Value>, path: &str) -> Option<Cause> {
    let text = rule["rule"].as_str()?;
    let program = match compile(text) {
        Ok(p) => p,
        Err(e) => {
            return Some(Cause::invalid(
                path,
                "",
                &format!("compilation failed: {e}"),
            ))
        }
    };
    let transition = program.references().has_variable("oldSelf");
    if transition && old.is_none() {
        return None;
    }
    let mut ctx = Context::with_env(env());
    ctx.add_variable("self", without_nulls(v)).ok()?;
    if let Some(o) = old.filter(|_| transition) {
        ctx.add_variable("oldSelf", without_nulls(o)).ok()?;
    }
    let field = match rule["fieldPath"].as_str() {
        Some(fp) => format!("{path}{}", field_path(fp)),
        None => path.to_string(),
    };
    let shown = match v {
        Value::Object(_) | Value::Array(_) => String::new(),
        scalar => render(scalar),
    };
    let detail = match program.execute(&ctx) {
        Ok(cel::Value::Bool(true)) => return None,
        Ok(cel::Value::Bool(false)) => message(rule, &ctx, text),
        Ok(other) => format!("rule did not evaluate to a bool: {other:?}"),
        Err(e) => format!("{e}"),
    };
    Some(
        match rule["reason"].as_str().unwrap_or("FieldValueInvalid") {
            "FieldValueForbidden" => Cause {
                reason: "FieldValueForbidden",
                field,
                message: format!("Forbidden: {detail}"),
            },
            "FieldValueRequired" => Cause {
                reason: "FieldValueRequired",
                field,
                message: format!("Required value: {detail}"),
            },
            "FieldValueDuplicate" => Cause {
                reason: "FieldValueDuplicate",
                field,
                message: format!("Duplicate value: {shown}"),
            },
            _ => Cause::invalid(&field, &shown, &detail),
        },
    )
}

/// The message of a failed rule: `messageExpression` (when it yields a non-empty string), else
/// `message`, else `failed rule: RULE`.
fn message(rule: &Value, ctx: &Context, text: &str) -> String {
    if let Some(expr) = rule["messageExpression"].as_str() {
        let result = compile(expr).ok().map(|p| p.execute(ctx));
        if let Some(Ok(cel::Value::String(s))) = result {
            if !s.trim().is_empty() {
                return s.to_string();
            }
        }
    }
    match rule["message"].as_str() {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => format!("failed rule: {text}"),
    }
}

/// `.a.b['c']` (a rule's `fieldPath`) as a field path suffix `.a.b.c`.
fn field_path(fp: &str) -> String {
    fp.replace("['", ".").replace("']", "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"service": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "!(has(self.ring) && has(self.ringSecretName))", "message": "exclusive"},
                {"rule": "self.name == oldSelf.name", "message": "name is immutable",
                 "fieldPath": ".name", "reason": "FieldValueForbidden"},
                {"rule": "size(self.name) < 5", "messageExpression": "'name ' + self.name + ' is too long'"}],
            "properties": {
                "name": {"type": "string", "x-kubernetes-validations": [
                    {"rule": "self.matches('^[^.#@]+$')", "message": "bad name"},
                    {"rule": "self.startsWith('r')"}]},
                "ring": {"type": "object"}, "ringSecretName": {"type": "string"}}}}})
    }

    fn texts(c: Vec<Cause>) -> Vec<String> {
        c.iter().map(Cause::text).collect()
    }

    #[test]
    fn rules_messages_and_values() {
        let v = json!({"service": {"name": "a.b.c.d", "ring": {}, "ringSecretName": "x"}});
        assert_eq!(
            texts(validate(&schema(), &v, None, "spec")),
            [
                "spec.service: Invalid value: exclusive",
                "spec.service: Invalid value: name a.b.c.d is too long",
                "spec.service.name: Invalid value: \"a.b.c.d\": bad name",
                "spec.service.name: Invalid value: \"a.b.c.d\": failed rule: self.startsWith('r')",
            ]
        );
        assert!(validate(&schema(), &json!({"service": {"name": "r"}}), None, "spec").is_empty());
    }

    #[test]
    fn transition_rules_run_on_update_only() {
        let old = json!({"service": {"name": "r1"}});
        let new = json!({"service": {"name": "r2"}});
        assert!(validate(&schema(), &new, None, "spec").is_empty());
        assert_eq!(
            texts(validate(&schema(), &new, Some(&old), "spec")),
            ["spec.service.name: Forbidden: name is immutable"]
        );
        assert!(is_transition("self == oldSelf"));
        assert!(!is_transition("self.size() > 0"));
    }

    #[test]
    fn matches_in_both_forms_on_every_evaluation_and_a_bad_regex_says_so() {
        let rules = |rule: &str| json!({"type": "string", "x-kubernetes-validations": [{"rule": rule, "message": "no"}]});
        for rule in ["self.matches('^r[0-9]+$')", "matches(self, '^r[0-9]+$')"] {
            for _ in 0..3 {
                assert!(validate(&rules(rule), &json!("r42"), None, "spec.x").is_empty());
                assert_eq!(
                    texts(validate(&rules(rule), &json!("r4x"), None, "spec.x")),
                    ["spec.x: Invalid value: \"r4x\": no"]
                );
            }
        }
        let bad = texts(validate(
            &rules("self.matches('(r')"),
            &json!("r"),
            None,
            "spec.x",
        ));
        assert_eq!(bad.len(), 1);
        assert!(bad[0].contains("not a valid regex"), "{bad:?}");
    }
}
