//! `habitat-operator convert`: the original Go operator's `habitat.sh/v1beta1` Habitats (with
//! `customVersion: v1beta2`, fields under `spec.v1beta2`, or without it, fields directly under
//! `spec`) become `habitat.sh/v1` ones. Every field with a meaning here is kept; each dropped one
//! is named in a note, and so is every document passed through as it was.

use serde_yaml::{Mapping, Value};

use crate::api::Habitat;

/// The claim template the original operator gave its StatefulSets (`persistent`), so its
/// claims are `persistent-<habitat>-<ordinal>`.
pub const ORIGINAL_CLAIM_TEMPLATE: &str = "persistent";

/// The converted documents and what was said about them.
#[derive(Debug, Default, PartialEq)]
pub struct Converted {
    /// Multi-document YAML, one document per input document.
    pub yaml: String,
    /// Notes for standard error: dropped fields and documents passed through.
    pub notes: Vec<String>,
    /// Problems of converted Habitats against this operator's rules, each naming its field.
    pub problems: Vec<String>,
}

/// Converts every document of `input`. Err when `input` is not YAML.
pub fn convert(input: &str) -> Result<Converted, String> {
    let mut out = Converted::default();
    let mut docs = vec![];
    for (i, de) in serde_yaml::Deserializer::from_str(input).enumerate() {
        let doc = serde::Deserialize::deserialize(de)
            .map_err(|e| format!("document {}: not YAML: {e}", i + 1))?;
        docs.push(doc);
    }
    let mut written = vec![];
    for (i, doc) in docs.into_iter().enumerate() {
        if doc == Value::Null {
            continue;
        }
        let at = format!("document {}", i + 1);
        let doc = convert_document(doc, &at, &mut out)?;
        written.push(serde_yaml::to_string(&doc).map_err(|e| format!("{at}: {e}"))?);
    }
    out.yaml = written.join("---\n");
    Ok(out)
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// One document: a v1beta1 Habitat converted, a List converted item by item, anything else as
/// it was.
fn convert_document(doc: Value, at: &str, out: &mut Converted) -> Result<Value, String> {
    if !doc.is_mapping() {
        return Err(format!("{at}: not a Kubernetes object (a mapping)"));
    }
    let api_version = str_of(&doc, "apiVersion").unwrap_or_default().to_string();
    let kind = str_of(&doc, "kind").unwrap_or_default().to_string();
    let name = doc
        .get("metadata")
        .and_then(|m| str_of(m, "name"))
        .unwrap_or("<unnamed>")
        .to_string();
    let what = format!("{at} ({kind} {name})");
    if kind == "List" || (kind.ends_with("List") && doc.get("items").is_some()) {
        let mut doc = doc;
        if let Some(Value::Sequence(items)) = doc.get_mut("items") {
            for (j, item) in items.iter_mut().enumerate() {
                let taken = std::mem::take(item);
                *item = convert_document(taken, &format!("{at} items[{j}]"), out)?;
            }
        }
        if kind == "HabitatList" {
            doc["apiVersion"] = "habitat.sh/v1".into();
        }
        return Ok(doc);
    }
    match (api_version.as_str(), kind.as_str()) {
        ("habitat.sh/v1beta1", "Habitat") => Ok(convert_habitat(&doc, &what, out)),
        ("habitat.sh/v1", "Habitat") => {
            out.notes.push(format!(
                "{what}: already habitat.sh/v1; passed through unchanged"
            ));
            check(&doc, &what, out);
            Ok(doc)
        }
        _ => {
            out.notes.push(format!(
                "{what}: not a habitat.sh/v1beta1 Habitat; passed through unchanged"
            ));
            Ok(doc)
        }
    }
}

/// Metadata the API server sets or the original operator owned: dropped.
const SERVER_METADATA: [&str; 9] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "ownerReferences",
];

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn convert_habitat(doc: &Value, what: &str, out: &mut Converted) -> Value {
    let mut h = Mapping::new();
    h.insert("apiVersion".into(), "habitat.sh/v1".into());
    h.insert("kind".into(), "Habitat".into());
    h.insert("metadata".into(), metadata(doc.get("metadata"), what, out));
    let custom = str_of(doc, "customVersion");
    let spec = doc.get("spec").cloned().unwrap_or_default();
    let (fields, base) = match custom {
        Some("v1beta2") => (spec.get("v1beta2").cloned(), "spec.v1beta2"),
        None if spec.get("v1beta2").is_some() => {
            out.notes.push(format!(
                "{what}: no customVersion, but spec.v1beta2 is set; read the fields from spec.v1beta2"
            ));
            (spec.get("v1beta2").cloned(), "spec.v1beta2")
        }
        None => (Some(spec.clone()), "spec"),
        Some(other) => {
            out.notes.push(format!(
                "{what}: customVersion {other:?} is unknown (v1beta2 or none expected); read the fields from spec.{other}"
            ));
            (spec.get(other).cloned(), "spec")
        }
    };
    if custom == Some("v1beta2") {
        if let Some(m) = spec.as_mapping() {
            for key in m
                .keys()
                .filter_map(Value::as_str)
                .filter(|k| *k != "v1beta2")
            {
                out.notes.push(format!(
                    "{what}: dropped spec.{key}: the original operator ignored it with customVersion v1beta2"
                ));
            }
        }
    }
    let fields = fields.unwrap_or_else(|| {
        out.problems.push(format!(
            "{what}: {base} is missing; the Habitat has no image or service"
        ));
        Value::Mapping(Mapping::new())
    });
    h.insert("spec".into(), convert_spec(&fields, base, what, out));
    if doc.get("status").is_some() {
        out.notes.push(format!(
            "{what}: dropped status: this operator writes its own"
        ));
    }
    let h = Value::Mapping(h);
    if !out.problems.iter().any(|p| p.starts_with(what)) {
        check(&h, what, out);
    }
    h
}

fn metadata(meta: Option<&Value>, what: &str, out: &mut Converted) -> Value {
    let mut meta = meta
        .cloned()
        .unwrap_or_else(|| Value::Mapping(Mapping::new()));
    let mut dropped = vec![];
    if let Some(m) = meta.as_mapping_mut() {
        for key in SERVER_METADATA {
            if m.remove(key).is_some() {
                dropped.push(format!("metadata.{key}"));
            }
        }
        if let Some(Value::Mapping(a)) = m.get_mut("annotations") {
            if a.remove(LAST_APPLIED).is_some() {
                dropped.push(format!("metadata.annotations[{LAST_APPLIED}]"));
            }
            if a.is_empty() {
                m.remove("annotations");
            }
        }
        if let Some(Value::Sequence(f)) = m.get("finalizers") {
            if f.is_empty() {
                m.remove("finalizers");
            }
        }
    }
    if !dropped.is_empty() {
        out.notes.push(format!(
            "{what}: dropped {}: set by the API server for the old object",
            dropped.join(", ")
        ));
    }
    meta
}

/// Takes `key` of `from`, noting it when it is not a string.
fn take_str(
    from: &Value,
    key: &str,
    field: &str,
    what: &str,
    out: &mut Converted,
) -> Option<Value> {
    match from.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Value::String(s.clone())),
        Some(other) => {
            out.problems.push(format!(
                "{what}: {field} must be a string, not {}",
                short(other)
            ));
            Some(other.clone())
        }
    }
}

/// A required field the old object lacks.
fn missing(field: &str, ours: &str, what: &str, out: &mut Converted) {
    out.problems.push(format!(
        "{what}: {field} is missing, and {ours} is required"
    ));
}

fn short(v: &Value) -> String {
    serde_yaml::to_string(v)
        .unwrap_or_default()
        .trim()
        .chars()
        .take(60)
        .collect()
}

/// Notes the keys of `from` not in `known`, at `base`.
fn drop_unknown(from: &Value, known: &[&str], base: &str, what: &str, out: &mut Converted) {
    for key in from.as_mapping().into_iter().flat_map(|m| m.keys()) {
        let key = key.as_str().map_or_else(|| short(key), str::to_string);
        if !known.contains(&key.as_str()) {
            out.notes.push(format!(
                "{what}: dropped {base}.{key}: the original operator's API has no such field, and it has no meaning here"
            ));
        }
    }
}

fn convert_spec(v: &Value, base: &str, what: &str, out: &mut Converted) -> Value {
    let mut spec = Mapping::new();
    drop_unknown(
        v,
        &["image", "count", "service", "env", "persistentStorage"],
        base,
        what,
        out,
    );
    match take_str(v, "image", &format!("{base}.image"), what, out) {
        Some(image) => {
            spec.insert("image".into(), image);
        }
        None => missing(&format!("{base}.image"), "spec.image", what, out),
    }
    match v.get("count") {
        Some(c) if !c.is_null() => {
            spec.insert("count".into(), c.clone());
        }
        _ => {
            out.notes.push(format!(
                "{what}: {base}.count is unset, which the original operator ran as 0 pods; wrote count: 0 (this operator's default would be 1)"
            ));
            spec.insert("count".into(), 0.into());
        }
    }
    let service = v.get("service").cloned().unwrap_or_default();
    spec.insert(
        "service".into(),
        convert_service(&service, &format!("{base}.service"), what, out),
    );
    match v.get("env") {
        Some(Value::Sequence(env)) if !env.is_empty() => {
            spec.insert("env".into(), Value::Sequence(env.clone()));
        }
        Some(Value::Sequence(_)) | Some(Value::Null) | None => {}
        Some(other) => {
            out.problems.push(format!(
                "{what}: {base}.env must be a list of environment variables, not {}",
                short(other)
            ));
        }
    }
    if let Some(ps) = v.get("persistentStorage").filter(|p| !p.is_null()) {
        let field = format!("{base}.persistentStorage");
        drop_unknown(
            ps,
            &["size", "mountPath", "storageClassName"],
            &field,
            what,
            out,
        );
        let mut storage = Mapping::new();
        for key in ["size", "mountPath"] {
            if let Some(s) = take_str(ps, key, &format!("{field}.{key}"), what, out) {
                storage.insert(key.into(), s);
            } else {
                let ours = format!("spec.persistentStorage.{key}");
                missing(&format!("{field}.{key}"), &ours, what, out);
            }
        }
        match take_str(ps, "storageClassName", &format!("{field}.storageClassName"), what, out) {
            Some(Value::String(s)) if s.is_empty() => {}
            Some(class) => {
                storage.insert("storageClassName".into(), class);
            }
            None => out.notes.push(format!(
                "{what}: {field}.storageClassName is unset: the original operator asked for class \"\" (no dynamic provisioning), this one for the cluster's default class; existing claims are not affected"
            )),
        }
        storage.insert("claimTemplateName".into(), ORIGINAL_CLAIM_TEMPLATE.into());
        spec.insert("persistentStorage".into(), Value::Mapping(storage));
    }
    Value::Mapping(spec)
}

const SERVICE_FIELDS: [&str; 6] = [
    "name",
    "group",
    "channel",
    "configSecretName",
    "ringSecretName",
    "filesSecretName",
];

fn convert_service(v: &Value, base: &str, what: &str, out: &mut Converted) -> Value {
    let mut svc = Mapping::new();
    let mut known = SERVICE_FIELDS.to_vec();
    known.extend(["topology", "bind"]);
    drop_unknown(v, &known, base, what, out);
    for key in SERVICE_FIELDS {
        if let Some(s) = take_str(v, key, &format!("{base}.{key}"), what, out) {
            svc.insert(key.into(), s);
        } else if key == "name" {
            missing(&format!("{base}.name"), "spec.service.name", what, out);
        }
    }
    match str_of(v, "topology") {
        None | Some("") => {}
        Some(t @ ("standalone" | "leader")) => {
            svc.insert("topology".into(), t.into());
        }
        Some(other) => {
            // The original operator ran anything but `leader` as standalone.
            out.notes.push(format!(
                "{what}: {base}.topology {other:?} is neither standalone nor leader; the original operator ran it as standalone, and so does this"
            ));
        }
    }
    if let Some(Value::Sequence(binds)) = v.get("bind") {
        let mut out_binds = vec![];
        for (i, b) in binds.iter().enumerate() {
            let field = format!("{base}.bind[{i}]");
            drop_unknown(b, &["name", "service", "group"], &field, what, out);
            let mut bind = Mapping::new();
            for key in ["name", "service", "group"] {
                if let Some(s) = take_str(b, key, &format!("{field}.{key}"), what, out) {
                    bind.insert(key.into(), s);
                }
            }
            out_binds.push(Value::Mapping(bind));
        }
        if !out_binds.is_empty() {
            svc.insert("bind".into(), Value::Sequence(out_binds));
        }
    }
    Value::Mapping(svc)
}

/// Holds a written Habitat to this operator's rules: those of `validate` and the schema's types.
fn check(h: &Value, what: &str, out: &mut Converted) {
    let json = match serde_json::to_value(h) {
        Ok(j) => j,
        Err(e) => return out.problems.push(format!("{what}: {e}")),
    };
    match serde_json::from_value::<Habitat>(json) {
        Ok(h) => {
            if let Some(p) = crate::api::validate::problem(&h) {
                out.problems.push(format!("{what}: {p}"));
            }
        }
        Err(e) => out
            .problems
            .push(format!("{what}: not a valid habitat.sh/v1 Habitat: {e}")),
    }
}

#[cfg(test)]
mod tests;
