//! Conversion between the stored core/v1 Event form and the events.k8s.io/v1 view.

use serde_json::{Map, Value};

/// Field pairs (core/v1 name, events.k8s.io/v1 name).
const PAIRS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reason", "reason"),
    ("type", "type"),
    ("action", "action"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("related", "related"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &Value, from_core: bool, api_version: &str) -> Value {
    let mut out = Map::new();
    out.insert("kind".into(), Value::String("Event".into()));
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("metadata".into(), obj["metadata"].clone());
    for (core, ev) in PAIRS {
        let (src, dst) = if from_core { (core, ev) } else { (ev, core) };
        if let Some(v) = obj.get(*src).filter(|v| !v.is_null()) {
            out.insert((*dst).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// Stored (core/v1) event → events.k8s.io/v1 representation.
pub fn core_to_events(obj: &Value) -> Value {
    rename(obj, true, "events.k8s.io/v1")
}

/// events.k8s.io/v1 representation → stored (core/v1) event.
pub fn events_to_core(obj: &Value) -> Value {
    let mut out = rename(obj, false, "v1");
    let controller = obj["reportingController"].clone();
    if !controller.is_null() && out.get("source").is_none() {
        out["source"] = serde_json::json!({"component": controller});
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip() {
        let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "regarding": {"kind": "Habitat", "name": "h"}, "note": "hello", "reason": "Created",
            "type": "Normal", "reportingController": "habitat-operator", "reportingInstance": "op-1",
            "eventTime": "2025-01-01T00:00:00.000000Z", "series": {"count": 2, "lastObservedTime": "2025-01-01T00:00:01.000000Z"}});
        let core = events_to_core(&ev);
        assert_eq!(core["involvedObject"]["name"], "h");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["source"]["component"], "habitat-operator");
        assert_eq!(core["apiVersion"], "v1");
        let back = core_to_events(&core);
        assert_eq!(back["note"], "hello");
        assert_eq!(back["series"]["count"], 2);
        assert_eq!(back["deprecatedSource"]["component"], "habitat-operator");
    }
}
