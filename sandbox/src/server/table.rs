//! `meta.k8s.io/v1` Table output for `kubectl get` (printer columns).

use crate::meta;
use crate::registry::ResourceType;
use crate::store::{Inner, ObjKey};
use serde_json::{json, Value};

/// What each row's `object` holds (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    /// Nothing.
    None,
    /// PartialObjectMetadata (default).
    Metadata,
    /// The full object.
    Object,
}

impl Include {
    /// Parse the query value.
    pub fn parse(v: Option<&str>) -> Self {
        match v {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// A column: name, type, priority and how to compute the cell.
struct Column {
    name: String,
    ty: String,
    format: String,
    description: String,
    priority: i64,
    cell: Cell,
}

enum Cell {
    Path(String),
    Builtin(fn(&Value) -> Value),
}

fn col(name: &str, ty: &str, priority: i64, f: fn(&Value) -> Value) -> Column {
    Column {
        name: name.into(),
        ty: ty.into(),
        format: if name == "Name" {
            "name".into()
        } else {
            String::new()
        },
        description: String::new(),
        priority,
        cell: Cell::Builtin(f),
    }
}

/// Human age of a timestamp, like kubectl prints it ("5s", "3m", "2d").
pub fn age(ts: Option<&str>) -> String {
    let Some(t) = ts.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) else {
        return "<unknown>".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn name_cell(o: &Value) -> Value {
    json!(meta::name(o))
}
fn age_cell(o: &Value) -> Value {
    json!(age(meta::meta_str(o, "creationTimestamp")))
}

fn pod_ready(o: &Value) -> Value {
    let cs = o["status"]["containerStatuses"].as_array();
    let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = cs.map_or(0, |c| c.iter().filter(|s| s["ready"] == true).count());
    json!(format!("{ready}/{total}"))
}
fn pod_status(o: &Value) -> Value {
    if meta::is_deleting(o) {
        return json!("Terminating");
    }
    json!(o["status"]["reason"]
        .as_str()
        .or_else(|| o["status"]["phase"].as_str())
        .unwrap_or("Pending"))
}
fn pod_restarts(o: &Value) -> Value {
    let n: i64 = o["status"]["containerStatuses"].as_array().map_or(0, |c| {
        c.iter().filter_map(|s| s["restartCount"].as_i64()).sum()
    });
    json!(n)
}
fn str_or_none(v: &Value) -> Value {
    json!(v.as_str().filter(|s| !s.is_empty()).unwrap_or("<none>"))
}

fn builtin_columns(rt: &ResourceType) -> Vec<Column> {
    let mut cols = vec![col("Name", "string", 0, name_cell)];
    match rt.plural.as_str() {
        "pods" => {
            cols.push(col("Ready", "string", 0, pod_ready));
            cols.push(col("Status", "string", 0, pod_status));
            cols.push(col("Restarts", "string", 0, pod_restarts));
            cols.push(col("Age", "string", 0, age_cell));
            cols.push(col("IP", "string", 1, |o| {
                str_or_none(&o["status"]["podIP"])
            }));
            cols.push(col("Node", "string", 1, |o| {
                str_or_none(&o["spec"]["nodeName"])
            }));
            return cols;
        }
        "statefulsets" => cols.push(col("Ready", "string", 0, |o| {
            json!(format!(
                "{}/{}",
                o["status"]["readyReplicas"].as_i64().unwrap_or(0),
                o["spec"]["replicas"].as_i64().unwrap_or(0)
            ))
        })),
        "services" => {
            cols.push(col("Type", "string", 0, |o| {
                str_or_none(&o["spec"]["type"])
            }));
            cols.push(col("Cluster-IP", "string", 0, |o| {
                str_or_none(&o["spec"]["clusterIP"])
            }));
            cols.push(col("Port(s)", "string", 0, |o| {
                let ports: Vec<String> = o["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                    .collect();
                json!(if ports.is_empty() {
                    "<none>".into()
                } else {
                    ports.join(",")
                })
            }));
        }
        "configmaps" | "secrets" => cols.push(col("Data", "string", 0, |o| {
            let n = o["data"].as_object().map_or(0, |m| m.len())
                + o["binaryData"].as_object().map_or(0, |m| m.len());
            json!(n)
        })),
        "namespaces" => cols.push(col("Status", "string", 0, |o| {
            str_or_none(&o["status"]["phase"])
        })),
        "persistentvolumeclaims" => {
            cols.push(col("Status", "string", 0, |o| {
                str_or_none(&o["status"]["phase"])
            }));
            cols.push(col("Volume", "string", 0, |o| {
                str_or_none(&o["spec"]["volumeName"])
            }));
            cols.push(col("Capacity", "string", 0, |o| {
                str_or_none(&o["status"]["capacity"]["storage"])
            }));
        }
        "events" => {
            return vec![
                col("Last Seen", "string", 0, |o| {
                    let ts = o["lastTimestamp"]
                        .as_str()
                        .or_else(|| o["eventTime"].as_str());
                    json!(age(ts))
                }),
                col("Type", "string", 0, |o| str_or_none(&o["type"])),
                col("Reason", "string", 0, |o| str_or_none(&o["reason"])),
                col("Object", "string", 0, |o| {
                    let r = &o["involvedObject"];
                    json!(format!(
                        "{}/{}",
                        r["kind"].as_str().unwrap_or_default().to_lowercase(),
                        r["name"].as_str().unwrap_or_default()
                    ))
                }),
                col("Message", "string", 0, |o| str_or_none(&o["message"])),
            ];
        }
        _ => {}
    }
    cols.push(col("Age", "string", 0, age_cell));
    cols
}

fn crd_columns(inner: &Inner, rt: &ResourceType, crd_name: &str) -> Vec<Column> {
    let key = ObjKey {
        storage: crate::registry::StorageKey::new(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
        ),
        namespace: String::new(),
        name: crd_name.to_string(),
    };
    let declared: Vec<Value> = inner
        .raw(&key)
        .and_then(|crd| crd["spec"]["versions"].as_array())
        .and_then(|vs| vs.iter().find(|v| v["name"] == rt.version.as_str()))
        .and_then(|v| v["additionalPrinterColumns"].as_array())
        .cloned()
        .unwrap_or_default();
    let mut cols = vec![col("Name", "string", 0, name_cell)];
    if declared.is_empty() {
        cols.push(col("Age", "date", 0, age_cell));
        return cols;
    }
    for c in declared {
        cols.push(Column {
            name: c["name"].as_str().unwrap_or_default().to_string(),
            ty: c["type"].as_str().unwrap_or("string").to_string(),
            format: c["format"].as_str().unwrap_or_default().to_string(),
            description: c["description"].as_str().unwrap_or_default().to_string(),
            priority: c["priority"].as_i64().unwrap_or(0),
            cell: Cell::Path(c["jsonPath"].as_str().unwrap_or_default().to_string()),
        });
    }
    cols
}

fn cell(c: &Column, o: &Value) -> Value {
    match &c.cell {
        Cell::Builtin(f) => f(o),
        Cell::Path(p) => match meta::json_path(o, p) {
            None | Some(Value::Null) => Value::Null,
            Some(v) if c.ty == "date" => json!(age(v.as_str())),
            Some(v) => v.clone(),
        },
    }
}

/// Build a Table of `items` (already in the served view).
pub fn build(
    inner: &Inner,
    rt: &ResourceType,
    items: &[Value],
    rv: u64,
    include: Include,
) -> Value {
    let cols = match &rt.crd {
        Some(name) => crd_columns(inner, rt, name),
        None => builtin_columns(rt),
    };
    let defs: Vec<Value> = cols
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": if c.ty == "date" { "string" } else { c.ty.as_str() },
            "format": c.format, "description": c.description, "priority": c.priority})
        })
        .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| cell(c, o)).collect();
            let object = match include {
                Include::None => Value::Null,
                Include::Object => o.clone(),
                Include::Metadata => json!({"kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()}, "columnDefinitions": defs, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(age(None), "<unknown>");
        let t = (chrono::Utc::now() - chrono::Duration::seconds(30)).to_rfc3339();
        assert!(age(Some(&t)).ends_with('s'));
        let t = (chrono::Utc::now() - chrono::Duration::days(3)).to_rfc3339();
        assert_eq!(age(Some(&t)), "3d");
    }
}
