//! Small helpers for object metadata: timestamps, uids, generated names, field access.

use rand::Rng;
use serde_json::{Map, Value};

/// RFC 3339 timestamp with second precision (`metav1.Time`).
pub fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// RFC 3339 timestamp with microsecond precision (`metav1.MicroTime`).
pub fn now_micro() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// A random UUID-like string (version 4 layout).
pub fn uid() -> String {
    let b: [u8; 16] = rand::thread_rng().gen();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// 32 lowercase hex characters (a Habitat member id).
pub fn hex32() -> String {
    let b: [u8; 16] = rand::thread_rng().gen();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The 5-character suffix used by `generateName`.
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::thread_rng();
    (0..5)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

/// `metadata` as a mutable map (created when missing or not an object).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    if !obj["metadata"].is_object() {
        obj["metadata"] = Value::Object(Map::new());
    }
    match &mut obj["metadata"] {
        Value::Object(m) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

/// A string field of `metadata`.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj["metadata"][field].as_str().filter(|s| !s.is_empty())
}

/// `metadata.name` ("" when missing).
pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or_default()
}

/// `metadata.namespace` ("" when missing).
pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or_default()
}

/// `metadata.uid` ("" when missing).
pub fn uid_of(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or_default()
}

/// True when `metadata.finalizers` is non-empty.
pub fn has_finalizers(obj: &Value) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
}

/// True when `metadata.deletionTimestamp` is set.
pub fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some()
}

/// The uids named by `metadata.ownerReferences`.
pub fn owner_uids(obj: &Value) -> Vec<&str> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .map(|a| a.iter().filter_map(|o| o["uid"].as_str()).collect())
        .unwrap_or_default()
}

/// Value at a simple JSONPath such as `.status.phase` or `.spec.ports[0].port`.
pub fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut cur = obj;
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (field, idx) = match seg.split_once('[') {
            Some((f, rest)) => (f, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (seg, None),
        };
        if !field.is_empty() {
            cur = cur.get(field)?;
        }
        if let Some(i) = idx {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids() {
        assert_eq!(uid().len(), 36);
        assert_eq!(hex32().len(), 32);
        assert_eq!(name_suffix().len(), 5);
    }

    #[test]
    fn paths() {
        let o = json!({"spec": {"ports": [{"port": 80}]}, "status": {"phase": "Ready"}});
        assert_eq!(json_path(&o, ".status.phase"), Some(&json!("Ready")));
        assert_eq!(json_path(&o, ".spec.ports[0].port"), Some(&json!(80)));
        assert_eq!(json_path(&o, ".spec.missing"), None);
    }

    #[test]
    fn meta_access() {
        let mut o = json!({});
        meta_mut(&mut o).insert("name".into(), json!("x"));
        assert_eq!(name(&o), "x");
        assert!(!has_finalizers(&o));
    }
}
