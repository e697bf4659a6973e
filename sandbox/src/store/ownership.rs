//! Field ownership as a real API server shows it in `managedFields`: each field manager's last
//! apply (an `Apply` entry, per subresource) and what its other writes set (an `Update` entry,
//! per subresource: a create, an update, a non-apply patch). They are part of the stored object
//! ([`Inner::stamp`]), so a write's answer, a GET, a list's items and a watch's events all carry
//! them, and a write that changes them alone is a write. A write that sets
//! `metadata.managedFields` to other entries replaces them first, as client-go's `csaupgrade`
//! does to move a create's fields into an apply's, so that the next apply removes what it no
//! longer sets. A non-apply write takes every field it adds, changes or removes from every
//! other entry, and its manager's `Update` entry gains what it added or changed
//! ([`compare`], after structured-merge-diff's `Updater.Update`); its manager is the
//! `fieldManager`, or the User-Agent up to its first `/`. An apply removes nothing another entry
//! owns. One with `force` takes from the other entries the fields it changes; one without is
//! refused with a conflict per such field ([`Inner::conflicts`]), as kube-apiserver's field
//! manager refuses it. An `Apply` entry's time is that of the last apply that changed the
//! object; an entry whose applies never did has none.
//! Field sets name map keys (`f:NAME`) and the items of associative lists (`k:{...}`, `v:...`,
//! [`crate::lists`]); other lists are one field.
//! A write's fields are those of the client's object as decoded ([`Inner::decoded`]: the
//! defaults of decoding are the writer's), and a map, struct or list it added is named itself
//! too (`.`; a create is compared with the kind's [`zero_object`]).
//! Beyond ten `Update` entries, the oldest merge into one `ancient-changes` entry.
//! The sandbox's StatefulSet controller writes as `kube-controller-manager` (`sim::MANAGER`),
//! but for its pods' creates. An owner reference is one field (`+structType=atomic`), and so
//! is a workload's, a disruption budget's or a Service's selector ([`Schema::atomic`]).
//! Not modelled: the defaults of decoding the sandbox does not know (it fills in a few of each
//! built-in kind's, and a custom resource's schema's); the other atomic structs and maps of
//! built-in kinds (those within a pod spec, say); the ownership of Events, of a StatefulSet's
//! pods' creates (for what they would cost, `sim::statefulset`), and of the writes of the
//! sandbox's garbage collector and namespace deletion, whose changes are still taken from the
//! other entries.

use super::{Inner, ObjKey};
use crate::lists::{element, ListType, Schema};
use crate::meta;
use crate::registry::ResourceType;
use serde_json::{json, Map, Value};

/// Metadata fields the server sets, which no field set names.
const SERVER_METADATA: [&str; 8] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
];

/// The part of an object a write owns fields in: the object without its status (a write of an
/// object whose type has a status subresource), its status alone (a write of that subresource),
/// or all of it (a type without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// All but `status`.
    Object,
    /// `status` alone.
    Status,
    /// Everything.
    Whole,
}

impl Part {
    /// The part a write of `rt` (its status subresource when `status`) owns.
    pub fn of(rt: &ResourceType, status: bool) -> Part {
        match (status, rt.status) {
            (true, _) => Part::Status,
            (false, true) => Part::Object,
            (false, false) => Part::Whole,
        }
    }

    fn skips(self, top_level_key: &str) -> bool {
        match self {
            Part::Object => matches!(top_level_key, "apiVersion" | "kind" | "status"),
            Part::Whole => matches!(top_level_key, "apiVersion" | "kind"),
            Part::Status => top_level_key != "status",
        }
    }
}

/// The field set (FieldsV1) of `part` of a configuration: every map key down to the leaves,
/// which are scalars and atomic lists; an associative list names each item (`k:{...}` or
/// `v:...`, with a `.` for the item itself), as a real server's field sets do.
pub fn fields_in(config: &Value, schema: Schema, part: Part) -> Value {
    fn walk<'a>(v: &'a Value, path: &mut Vec<&'a str>, schema: Schema, part: Part) -> Value {
        match v {
            Value::Object(_) if schema.atomic(path) => json!({}),
            Value::Object(m) => {
                let top = path.is_empty();
                let in_metadata = path.as_slice() == ["metadata"];
                let mut out = Map::new();
                for (k, v) in m {
                    let skipped = (top && part.skips(k))
                        || (in_metadata && SERVER_METADATA.contains(&k.as_str()));
                    if skipped || v.is_null() {
                        continue;
                    }
                    path.push(k);
                    out.insert(format!("f:{k}"), walk(v, path, schema, part));
                    path.pop();
                }
                Value::Object(out)
            }
            Value::Array(items) if !items.is_empty() && schema.at(path) != ListType::Atomic => {
                let ty = schema.at(path);
                let mut out = Map::new();
                out.insert(".".into(), json!({}));
                for item in items {
                    let Some(name) = element(ty, item) else {
                        continue;
                    };
                    let sub = match ty {
                        ListType::Map(_) if !schema.atomic_items(path) => {
                            let mut sub = walk(item, path, schema, part);
                            if let Some(m) = sub.as_object_mut() {
                                m.insert(".".into(), json!({}));
                            }
                            sub
                        }
                        _ => json!({}),
                    };
                    out.insert(name, sub);
                }
                Value::Object(out)
            }
            _ => json!({}),
        }
    }
    walk(config, &mut Vec::new(), schema, part)
}

/// Whether a field set names no field.
pub fn is_empty(fields: &Value) -> bool {
    fields.as_object().is_none_or(Map::is_empty)
}

/// Whether the node a field set reaches at some key is itself a member of the set: a leaf
/// (`{}`), or a node with its own `.`.
fn is_member(node: Option<&Value>) -> bool {
    node.and_then(Value::as_object)
        .is_some_and(|m| m.is_empty() || m.contains_key("."))
}

/// The fields of `a` that `b` does not name (structured-merge-diff's `Set.Difference`): a node
/// both name keeps the parts of it only `a` names.
pub fn difference(a: &Value, b: &Value) -> Value {
    fn walk(a: &Map<String, Value>, b: Option<&Value>) -> Map<String, Value> {
        let mut out = Map::new();
        for (k, sub) in a {
            let theirs = b.and_then(|b| b.get(k));
            let kept = match sub.as_object() {
                _ if k == "." => theirs.is_none().then(|| json!({})),
                Some(m) if m.is_empty() => (!is_member(theirs)).then(|| json!({})),
                Some(m) => {
                    let left = walk(m, theirs);
                    (!left.is_empty()).then_some(Value::Object(left))
                }
                None => None,
            };
            if let Some(kept) = kept {
                out.insert(k.clone(), kept);
            }
        }
        out
    }
    match a.as_object() {
        Some(m) => Value::Object(walk(m, Some(b))),
        None => json!({}),
    }
}

/// What a write of `new` over `old` did to `part` of the object, as structured-merge-diff's
/// comparison finds it: the fields it added or whose values it changed, and the fields it
/// removed, each as a field set. A map, struct or list the write added or removed is named
/// itself too (`.`), as in a real `Update` entry. Both objects are walked side by side, and
/// only what differs is built.
pub fn compare(old: &Value, new: &Value, schema: Schema, part: Part) -> (Value, Value) {
    let diff = Diff { schema, part };
    let (changed, removed) = diff.objects(old.as_object(), new.as_object(), &mut Vec::new());
    (Value::Object(changed), Value::Object(removed))
}

/// The side-by-side walk of [`compare`].
struct Diff<'s> {
    schema: Schema<'s>,
    part: Part,
}

/// A value that is there: neither absent nor null.
fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

impl Diff<'_> {
    /// The fields of two maps (or the top level, or metadata, by `path`) that differ: what the
    /// new one adds or changes, and what it removes.
    fn objects<'a>(
        &self,
        old: Option<&'a Map<String, Value>>,
        new: Option<&'a Map<String, Value>>,
        path: &mut Vec<&'a str>,
    ) -> (Map<String, Value>, Map<String, Value>) {
        let top = path.is_empty();
        let in_metadata = path.as_slice() == ["metadata"];
        let skipped =
            |k: &str| (top && self.part.skips(k)) || (in_metadata && SERVER_METADATA.contains(&k));
        let (mut changed, mut removed) = (Map::new(), Map::new());
        for (k, n) in new.into_iter().flatten() {
            if skipped(k) || n.is_null() {
                continue;
            }
            path.push(k);
            let o = present(old.and_then(|o| o.get(k)));
            let key = format!("f:{k}");
            match o {
                // Added: itself and all it holds (metadata is the server's).
                None => {
                    let mut set = self.whole(n, path);
                    let metadata = top && k == "metadata";
                    if metadata {
                        if let Some(m) = set.as_object_mut() {
                            m.remove(".");
                        }
                    }
                    if !(metadata && is_empty(&set)) {
                        changed.insert(key, set);
                    }
                }
                Some(o) => {
                    let (c, r) = self.values(o, n, path);
                    if c.is_null() {
                        changed.insert(key.clone(), json!({}));
                    } else if !is_empty(&c) {
                        changed.insert(key.clone(), c);
                    }
                    if !is_empty(&r) {
                        removed.insert(key, r);
                    }
                }
            }
            path.pop();
        }
        for (k, o) in old.into_iter().flatten() {
            let gone = present(new.and_then(|n| n.get(k))).is_none();
            if skipped(k) || o.is_null() || !gone {
                continue;
            }
            path.push(k);
            removed.insert(format!("f:{k}"), self.whole(o, path));
            path.pop();
        }
        (changed, removed)
    }

    /// Two values of one field: a leaf changed (`{}`) or not (an empty set), or what differs
    /// inside two maps or two associative lists.
    fn values<'a>(
        &self,
        old: &'a Value,
        new: &'a Value,
        path: &mut Vec<&'a str>,
    ) -> (Value, Value) {
        let ty = self.schema.at(path);
        let atomic = self.schema.atomic(path);
        let leaf = |v: &Value| match v {
            Value::Object(_) => atomic,
            Value::Array(_) => ty == ListType::Atomic,
            _ => true,
        };
        match (old, new) {
            // Two maps (or structs), empty ones too: the node stays, its fields differ.
            (Value::Object(o), Value::Object(n)) if !atomic => {
                let (c, r) = self.objects(Some(o), Some(n), path);
                (Value::Object(c), Value::Object(r))
            }
            (Value::Array(o), Value::Array(n)) if ty != ListType::Atomic => {
                let (c, r) = self.lists(ty, o, n, path);
                (Value::Object(c), Value::Object(r))
            }
            _ if leaf(old) && leaf(new) => {
                // Two leaves: changed when their values differ. `Value::Null` marks "the leaf
                // itself" to the caller, which names it `{}`.
                if old == new {
                    (json!({}), json!({}))
                } else {
                    (Value::Null, json!({}))
                }
            }
            // A leaf became a node or the other way: the new value's fields are the write's,
            // the old value's are gone.
            _ => (self.whole(new, path), self.whole(old, path)),
        }
    }

    /// Two associative lists (of type `ty`), item by item.
    fn lists<'a>(
        &self,
        ty: ListType,
        old: &'a [Value],
        new: &'a [Value],
        path: &mut Vec<&'a str>,
    ) -> (Map<String, Value>, Map<String, Value>) {
        let keyed = |items: &'a [Value]| -> Vec<(String, &'a Value)> {
            items
                .iter()
                .filter_map(|i| Some((element(ty, i)?, i)))
                .collect()
        };
        let (old, new) = (keyed(old), keyed(new));
        let (mut changed, mut removed) = (Map::new(), Map::new());
        for (name, n) in &new {
            match old.iter().find(|(k, _)| k == name) {
                None => {
                    changed.insert(name.clone(), self.item(n, path));
                }
                Some((_, o)) if self.schema.atomic_items(path) => {
                    if o != n {
                        changed.insert(name.clone(), json!({}));
                    }
                }
                Some((_, o)) => {
                    if let (ListType::Map(_), Value::Object(om), Value::Object(nm)) = (ty, o, n) {
                        let (c, r) = self.objects(Some(om), Some(nm), path);
                        if !c.is_empty() {
                            changed.insert(name.clone(), Value::Object(c));
                        }
                        if !r.is_empty() {
                            removed.insert(name.clone(), Value::Object(r));
                        }
                    }
                }
            }
        }
        for (name, o) in &old {
            if !new.iter().any(|(k, _)| k == name) {
                removed.insert(name.clone(), self.item(o, path));
            }
        }
        (changed, removed)
    }

    /// The field set of one item of an associative list: itself, and for an item of a
    /// list-map, what it holds.
    fn item<'a>(&self, item: &'a Value, path: &mut Vec<&'a str>) -> Value {
        match item {
            Value::Object(m) if !m.is_empty() && !self.schema.atomic_items(path) => {
                let mut set = self.whole(item, path);
                if let Some(s) = set.as_object_mut() {
                    s.insert(".".into(), json!({}));
                }
                set
            }
            _ => json!({}),
        }
    }

    /// The field set of a whole value: every node in it, itself included (`.`), down to its
    /// leaves.
    fn whole<'a>(&self, v: &'a Value, path: &mut Vec<&'a str>) -> Value {
        let in_metadata = path.as_slice() == ["metadata"];
        match v {
            Value::Object(_) if self.schema.atomic(path) => json!({}),
            Value::Object(m) if !m.is_empty() => {
                let mut out = Map::new();
                out.insert(".".into(), json!({}));
                for (k, sub) in m {
                    if sub.is_null() || (in_metadata && SERVER_METADATA.contains(&k.as_str())) {
                        continue;
                    }
                    path.push(k);
                    out.insert(format!("f:{k}"), self.whole(sub, path));
                    path.pop();
                }
                Value::Object(out)
            }
            Value::Array(items)
                if !items.is_empty() && self.schema.at(path) != ListType::Atomic =>
            {
                let ty = self.schema.at(path);
                let mut out = Map::new();
                out.insert(".".into(), json!({}));
                for i in items {
                    if let Some(name) = element(ty, i) {
                        let set = match ty {
                            ListType::Map(_) => self.item(i, path),
                            _ => json!({}),
                        };
                        out.insert(name, set);
                    }
                }
                Value::Object(out)
            }
            _ => json!({}),
        }
    }
}

/// The object a create is compared with, as kube-apiserver's field manager compares it: the
/// zero value of the kind's Go type, in which the structs that are no pointers exist, empty (a
/// create's `Update` entry names them by their fields alone, and what else it adds with `.`). A
/// custom resource's zero value is empty.
pub fn zero_object(rt: &ResourceType) -> Value {
    let template = json!({"metadata": {}, "spec": {}});
    match (rt.group.as_str(), rt.kind.as_str()) {
        _ if rt.crd.is_some() => json!({}),
        ("", "Pod" | "Namespace") | ("policy", "PodDisruptionBudget") => {
            json!({"spec": {}, "status": {}})
        }
        ("", "Service") => json!({"spec": {}, "status": {"loadBalancer": {}}}),
        ("", "PersistentVolumeClaim") => json!({"spec": {"resources": {}}, "status": {}}),
        ("", "Event") => json!({"involvedObject": {}, "source": {}}),
        ("apps", "StatefulSet") => {
            json!({"spec": {"template": template, "updateStrategy": {}}, "status": {}})
        }
        ("apps", "Deployment") => {
            json!({"spec": {"template": template, "strategy": {}}, "status": {}})
        }
        ("coordination.k8s.io", "Lease") => json!({"spec": {}}),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            json!({"roleRef": {}})
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            json!({"spec": {"names": {}}, "status": {"acceptedNames": {}}})
        }
        _ => json!({}),
    }
}

/// The part of `live` that the field set `fields` names: the configuration a manager owning
/// those fields would have applied.
pub fn project(live: &Value, fields: &Value, schema: Schema) -> Value {
    fn walk<'a>(live: &'a Value, fields: &Value, path: &mut Vec<&'a str>, schema: Schema) -> Value {
        let named = |f: &Value| f.as_object().is_some_and(|s| s.keys().any(|k| k != "."));
        match live {
            Value::Object(l) => {
                let mut out = Map::new();
                for (k, sub) in fields.as_object().into_iter().flatten() {
                    let Some(name) = k.strip_prefix("f:") else {
                        continue;
                    };
                    let Some((key, value)) = l.get_key_value(name) else {
                        continue;
                    };
                    path.push(key);
                    let v = if named(sub) {
                        walk(value, sub, path, schema)
                    } else {
                        value.clone()
                    };
                    path.pop();
                    out.insert(name.to_string(), v);
                }
                Value::Object(out)
            }
            Value::Array(items) if named(fields) => {
                let ty = schema.at(path);
                let kept = items.iter().filter_map(|item| {
                    let sub = fields.get(element(ty, item)?)?;
                    Some(match ty {
                        ListType::Map(_) if named(sub) => walk(item, sub, path, schema),
                        _ => item.clone(),
                    })
                });
                Value::Array(kept.collect())
            }
            other => other.clone(),
        }
    }
    walk(live, fields, &mut Vec::new(), schema)
}

/// `fields` without what a forced apply of `applied` over `live` changes: a field whose applied
/// value differs from the live one (a scalar or an atomic list) goes to the applier, and its
/// other owners stop naming it. A map or list item some of whose fields went keeps the rest.
pub fn without_changed(fields: &Value, live: &Value, applied: &Value, schema: Schema) -> Value {
    fn walk<'a>(
        fields: &mut Map<String, Value>,
        live: Option<&Value>,
        applied: &'a Value,
        path: &mut Vec<&'a str>,
        schema: Schema,
    ) {
        let Some(a) = applied.as_object() else {
            return;
        };
        for (k, av) in a {
            let key = format!("f:{k}");
            let Some(Value::Object(sub)) = fields.get_mut(&key) else {
                continue;
            };
            let lv = live.and_then(|l| l.get(k));
            path.push(k);
            let had_parts = !sub.is_empty();
            match (av, schema.at(path)) {
                (Value::Object(_), _) if had_parts => walk(sub, lv, av, path, schema),
                (Value::Array(items), ty @ ListType::Map(_)) if had_parts => {
                    for item in items {
                        let Some(name) = element(ty, item) else {
                            continue;
                        };
                        let live_item = lv.and_then(Value::as_array).and_then(|l| {
                            l.iter().find(|i| element(ty, i).as_ref() == Some(&name))
                        });
                        if let Some(Value::Object(isub)) = sub.get_mut(&name) {
                            walk(isub, live_item, item, path, schema);
                        }
                    }
                }
                (Value::Array(_), ListType::Set) if had_parts => {}
                _ => {
                    if lv != Some(av) {
                        fields.remove(&key);
                        path.pop();
                        continue;
                    }
                }
            }
            path.pop();
            if had_parts
                && fields
                    .get(&key)
                    .and_then(Value::as_object)
                    .is_some_and(Map::is_empty)
            {
                fields.remove(&key);
            }
        }
    }
    let mut out = fields.clone();
    if let Some(m) = out.as_object_mut() {
        walk(m, Some(live), applied, &mut Vec::new(), schema);
    }
    out
}

/// The leaves of the field set `fields` that `kept` (a part of it) no longer names, as
/// structured-merge-diff prints a path (`.metadata.labels.a`, `.spec.ports[port=80,protocol="TCP"]`,
/// `.metadata.finalizers[="f"]`).
pub fn lost_paths(fields: &Value, kept: &Value) -> Vec<String> {
    fn element(key: &str) -> String {
        if let Some(name) = key.strip_prefix("f:") {
            return format!(".{name}");
        }
        if let Some(value) = key.strip_prefix("v:") {
            return format!("[={value}]");
        }
        if let Some(Ok(Value::Object(keys))) =
            key.strip_prefix("k:").map(serde_json::from_str::<Value>)
        {
            let pairs: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
            return format!("[{}]", pairs.join(","));
        }
        format!("[{key}]")
    }
    fn walk(fields: &Value, kept: Option<&Value>, path: &str, out: &mut Vec<String>) {
        let Some(m) = fields.as_object() else {
            return;
        };
        if m.is_empty() {
            if kept.is_none() {
                out.push(path.to_string());
            }
            return;
        }
        for (k, v) in m {
            let below = kept.and_then(|kept| kept.get(k));
            if k == "." {
                if below.is_none() {
                    out.push(path.to_string());
                }
            } else {
                walk(v, below, &format!("{path}{}", element(k)), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(fields, Some(kept), "", &mut out);
    out
}

/// The union of two field sets. A field one names whole (`{}`) and the other by its parts is
/// named both ways (`.` and the parts).
pub fn union(a: &Value, b: &Value) -> Value {
    match (a.as_object(), b.as_object()) {
        (Some(x), Some(y)) if x.is_empty() && !y.is_empty() => union(&json!({".": {}}), b),
        (Some(x), Some(y)) if y.is_empty() && !x.is_empty() => union(a, &json!({".": {}})),
        (Some(x), Some(y)) => {
            let mut out = x.clone();
            for (k, v) in y {
                let merged = match out.get(k) {
                    Some(w) => union(w, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

/// A field manager's last apply to an object (to its status, or to the rest): what it applied,
/// and when an apply of it last changed the object.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The configuration it applied, less what other writes have taken from it since.
    pub config: Value,
    /// When an apply last changed the object (RFC 3339, seconds): none when no apply of this
    /// manager has, as a real server leaves the time out of an entry whose first apply only
    /// took over fields that already held its values.
    pub time: Option<String>,
}

/// One `Update` entry of an object's `managedFields`: what a manager's non-apply writes to the
/// object, or to its status, set and still own.
#[derive(Debug, Clone, PartialEq)]
pub struct Updated {
    /// The field manager.
    pub manager: String,
    /// Whether the writes were to the status subresource.
    pub status: bool,
    /// The fields it owns (FieldsV1).
    pub fields: Value,
    /// When it last changed a field (RFC 3339, seconds).
    pub time: String,
}

impl Updated {
    /// The order of `Update` entries, oldest first, as kube-apiserver sorts them (in
    /// `managedFields`, and to pick the ones to merge beyond ten): by time, then by manager.
    fn age(&self) -> (&str, &str, bool) {
        (&self.time, &self.manager, self.status)
    }
}

/// What a non-apply write did to its part of an object ([`compare`]).
#[derive(Debug)]
pub struct Change {
    changed: Value,
    removed: Value,
}

fn entry(
    rt: &ResourceType,
    manager: &str,
    operation: &str,
    status: bool,
    fields: Value,
    time: Option<&str>,
) -> Value {
    let mut e = json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": rt.api_version(),
    });
    if let Some(time) = time {
        e["time"] = json!(time);
    }
    e["fieldsType"] = json!("FieldsV1");
    e["fieldsV1"] = fields;
    if status {
        e["subresource"] = json!("status");
    }
    e
}

/// The most `Update` entries an object keeps (kube-apiserver's `DefaultMaxUpdateManagers`).
const MAX_UPDATE_ENTRIES: usize = 10;

/// The manager into which the oldest `Update` entries beyond [`MAX_UPDATE_ENTRIES`] are merged.
const ANCIENT_CHANGES: &str = "ancient-changes";

/// Keeps at most [`MAX_UPDATE_ENTRIES`] entries, as kube-apiserver's `capManagersManager` does:
/// the oldest (by time, then by manager) are merged into one `ancient-changes` entry of the
/// object itself (the one it has, if any), which takes the time of the last one merged.
fn cap_updates(updated: &mut Vec<Updated>) {
    if updated.len() <= MAX_UPDATE_ENTRIES {
        return;
    }
    let is_bucket = |u: &Updated| u.manager == ANCIENT_CHANGES && !u.status;
    let mut bucket = updated
        .iter()
        .position(is_bucket)
        .map(|i| updated.remove(i));
    updated.sort_by(|a, b| a.age().cmp(&b.age()));
    let mut left = updated.len() + usize::from(bucket.is_some());
    let mut oldest = std::mem::take(updated).into_iter();
    while left > MAX_UPDATE_ENTRIES {
        let Some(u) = oldest.next() else {
            break;
        };
        match &mut bucket {
            Some(b) => {
                b.fields = merged(&b.fields, &u.fields);
                b.time = u.time;
            }
            None => {
                bucket = Some(Updated {
                    manager: ANCIENT_CHANGES.into(),
                    status: false,
                    ..u
                });
                left += 1;
            }
        }
        left -= 1;
    }
    updated.extend(bucket);
    updated.extend(oldest);
}

/// The fields an applier (a manager, and whether it applies to the status) owns by its
/// configuration.
fn applied_fields(rt: &ResourceType, applier: &(String, bool), config: &Value) -> Value {
    fields_in(config, rt.schema(), Part::of(rt, applier.1))
}

/// The union of two field sets, either of which may name nothing.
fn merged(a: &Value, b: &Value) -> Value {
    match (is_empty(a), is_empty(b)) {
        (true, _) => b.clone(),
        (_, true) => a.clone(),
        _ => union(a, b),
    }
}

impl Inner {
    /// The object's `managedFields`, in kube-apiserver's order: `Apply` entries, then `Update`
    /// entries, each by time (an entry without one first), manager and subresource.
    pub(super) fn managed_fields(&self, rt: &ResourceType, key: &ObjKey) -> Vec<Value> {
        let mut entries = Vec::new();
        if let Some(applied) = self.applied.get(key) {
            let mut managers: Vec<_> = applied.iter().collect();
            // By time (none first), manager and subresource, borrowed: this runs at every
            // write that changes ownership.
            managers.sort_by_key(|((manager, status), a)| {
                (a.time.as_deref().unwrap_or(""), manager.as_str(), *status)
            });
            for (applier, a) in managers {
                entries.push(entry(
                    rt,
                    &applier.0,
                    "Apply",
                    applier.1,
                    applied_fields(rt, applier, &a.config),
                    a.time.as_deref(),
                ));
            }
        }
        if let Some(updated) = self.updated.get(key) {
            let mut updated: Vec<_> = updated.iter().collect();
            updated.sort_by(|a, b| a.age().cmp(&b.age()));
            for u in updated {
                entries.push(entry(
                    rt,
                    &u.manager,
                    "Update",
                    u.status,
                    u.fields.clone(),
                    Some(&u.time),
                ));
            }
        }
        entries
    }

    /// Sets `obj`'s `managedFields` to what the ownership of `key` now is (none: no key), as
    /// a write stores them: lists, watches and GETs then show them with the object.
    pub(super) fn stamp(&self, rt: &ResourceType, key: &ObjKey, obj: &mut Value) {
        if !obj.is_object() {
            return;
        }
        let entries = self.managed_fields(rt, key);
        let md = meta::meta_mut(obj);
        if entries.is_empty() {
            md.remove("managedFields");
        } else {
            md.insert("managedFields".into(), Value::Array(entries));
        }
    }

    /// Records a create of `key` by `manager` at `time`: its `Update` entry names the fields
    /// `obj` (the body, as decoded: [`Inner::decoded`]) set, compared with the kind's
    /// [`zero_object`].
    pub(super) fn note_create(
        &mut self,
        rt: &ResourceType,
        key: &ObjKey,
        obj: &Value,
        manager: &str,
        time: String,
    ) {
        let obj = self.decoded(rt, obj, false);
        let (fields, _) = compare(&zero_object(rt), &obj, rt.schema(), Part::of(rt, false));
        if is_empty(&fields) {
            return;
        }
        self.updated.insert(
            key.clone(),
            vec![Updated {
                manager: manager.to_string(),
                status: false,
                fields,
                time,
            }],
        );
    }

    /// What a non-apply write of `candidate` (what the client asked for) over `old` does to
    /// ownership: the fields it adds or changes and those it removes in its part of the object.
    /// `None` when nothing is to be recorded: an Event, or a write by one of the sandbox's own
    /// controllers (no `manager`) to an object no entry owns a field of. Drawn before the write,
    /// from the client's object as decoded ([`Inner::decoded`]): the defaults of decoding are
    /// the writer's, what the server adds after (an address, admission) nobody's.
    pub(super) fn draw_change(
        &self,
        rt: &ResourceType,
        key: &ObjKey,
        old: &Value,
        candidate: &Value,
        status: bool,
        manager: Option<&str>,
    ) -> Option<Change> {
        if rt.is_event() || (manager.is_none() && !self.owns_part(key, status)) {
            return None;
        }
        let candidate = self.decoded(rt, candidate, status);
        let (changed, removed) = compare(old, &candidate, rt.schema(), Part::of(rt, status));
        Some(Change { changed, removed })
    }

    /// Whether an entry of `key` owns fields of the status (`status`) or of the rest: what a
    /// write by no manager could take from.
    fn owns_part(&self, key: &ObjKey, status: bool) -> bool {
        let applies = self.applied.get(key).into_iter().flatten();
        let updates = self.updated.get(key).into_iter().flatten();
        applies
            .map(|(a, _)| a.1)
            .chain(updates.map(|u| u.status))
            .any(|s| s == status)
    }

    /// Records a non-apply write of `key` (or of its status, when `status`) that made `change`,
    /// by `manager` (`None`: one of the sandbox's own controllers, which owns nothing): every
    /// entry loses what the write added, changed or removed, and the manager's `Update` entry
    /// gains what it added or changed, with the time of the write.
    pub(super) fn note_change(
        &mut self,
        rt: &ResourceType,
        key: &ObjKey,
        change: Change,
        status: bool,
        manager: Option<&str>,
    ) {
        let Change { changed, removed } = change;
        let taken = merged(&changed, &removed);
        if is_empty(&taken) {
            return;
        }
        if let Some(updated) = self.updated.get_mut(key) {
            for u in updated.iter_mut() {
                u.fields = difference(&u.fields, &taken);
            }
            updated.retain(|u| !is_empty(&u.fields));
        }
        if let Some(appliers) = self.applied.get_mut(key) {
            let schema = rt.schema();
            appliers.retain(|applier, a| {
                let fields = applied_fields(rt, applier, &a.config);
                let left = difference(&fields, &taken);
                if left != fields {
                    a.config = project(&a.config, &left, schema);
                }
                !is_empty(&left)
            });
            if appliers.is_empty() {
                self.applied.remove(key);
            }
        }
        if let Some(manager) = manager.filter(|_| !is_empty(&changed)) {
            let updated = self.updated.entry(key.clone()).or_default();
            let time = meta::now();
            match updated
                .iter_mut()
                .find(|u| u.manager == manager && u.status == status)
            {
                Some(u) => {
                    u.fields = merged(&u.fields, &changed);
                    u.time = time;
                }
                None => updated.push(Updated {
                    manager: manager.to_string(),
                    status,
                    fields: changed,
                    time,
                }),
            }
            cap_updates(updated);
        }
        if self.updated.get(key).is_some_and(Vec::is_empty) {
            self.updated.remove(key);
        }
    }

    /// A forced apply of `applied` by `applier` over `live` takes what it changes from the other
    /// entries ([`without_changed`]); an entry left with no fields is dropped.
    pub(super) fn take_changed(
        &mut self,
        rt: &ResourceType,
        key: &ObjKey,
        applier: &(String, bool),
        live: &Value,
        applied: &Value,
    ) {
        let schema = rt.schema();
        if let Some(updated) = self.updated.get_mut(key) {
            for u in updated.iter_mut().filter(|u| u.status == applier.1) {
                u.fields = without_changed(&u.fields, live, applied, schema);
            }
            updated.retain(|u| !is_empty(&u.fields));
            if updated.is_empty() {
                self.updated.remove(key);
            }
        }
        if let Some(appliers) = self.applied.get_mut(key) {
            appliers.retain(|manager, a| {
                if manager == applier || manager.1 != applier.1 {
                    return true;
                }
                let left = without_changed(
                    &applied_fields(rt, manager, &a.config),
                    live,
                    applied,
                    schema,
                );
                a.config = project(&a.config, &left, schema);
                !is_empty(&left)
            });
        }
    }

    /// The fields an apply of `applied` by `applier` over `live` would take from other managers
    /// of the same subresource (their `Apply` and `Update` entries): each as the manager
    /// kube-apiserver names in its conflict (`"m"`, or `"m" using v1` for an `Update` entry, both
    /// recorded from a real server in `tests/fidelity.rs`; a status entry's `with subresource
    /// "status"` follows its field manager's `printManager` and is not recorded) and the field's
    /// path. Empty when it changes nothing another manager owns.
    pub(super) fn conflicts(
        &self,
        rt: &ResourceType,
        key: &ObjKey,
        applier: &(String, bool),
        live: &Value,
        applied: &Value,
    ) -> Vec<(String, String)> {
        let schema = rt.schema();
        let lost =
            |fields: &Value| lost_paths(fields, &without_changed(fields, live, applied, schema));
        let subresource = |status: bool| {
            if status {
                " with subresource \"status\""
            } else {
                ""
            }
        };
        let mut out = Vec::new();
        let mut others: Vec<_> = self
            .applied
            .get(key)
            .into_iter()
            .flatten()
            .filter(|(manager, _)| *manager != applier && manager.1 == applier.1)
            .collect();
        others.sort_by(|a, b| a.0.cmp(b.0));
        for (manager, a) in others {
            let who = format!("{:?}{}", manager.0, subresource(manager.1));
            let fields = applied_fields(rt, manager, &a.config);
            out.extend(lost(&fields).into_iter().map(|p| (who.clone(), p)));
        }
        let mut updated: Vec<_> = self
            .updated
            .get(key)
            .into_iter()
            .flatten()
            .filter(|u| u.status == applier.1)
            .collect();
        updated.sort_by(|a, b| a.manager.cmp(&b.manager));
        for u in updated {
            let who = format!(
                "{:?}{} using {}",
                u.manager,
                subresource(u.status),
                rt.api_version()
            );
            out.extend(lost(&u.fields).into_iter().map(|p| (who.clone(), p)));
        }
        out
    }

    /// What managers other than `applier` (a manager and whether it applies to the status) own
    /// of `key`: the union of their field sets.
    pub(super) fn owned_by_others(
        &self,
        rt: &ResourceType,
        key: &ObjKey,
        applier: &(String, bool),
    ) -> Value {
        let mut owned = json!({});
        for (manager, a) in self.applied.get(key).into_iter().flatten() {
            if manager != applier {
                owned = merged(&owned, &applied_fields(rt, manager, &a.config));
            }
        }
        for u in self.updated.get(key).into_iter().flatten() {
            owned = merged(&owned, &u.fields);
        }
        owned
    }

    /// Replaces the ownership of `key` by the `managedFields` a client wrote over `live`, as
    /// kube-apiserver's `decodeLiveOrNew` takes them: an empty list keeps the live entries, a
    /// list of one empty entry resets them, and any other list replaces them: an `Apply`
    /// entry's fields become what its manager applied (its last configuration, when the entry
    /// names the fields that one does), an `Update` entry is kept as written.
    pub(super) fn replace_managed_fields(
        &mut self,
        rt: &ResourceType,
        key: &ObjKey,
        live: &Value,
        entries: &[Value],
    ) {
        if entries.is_empty() {
            return;
        }
        let mut before = self.applied.remove(key).unwrap_or_default();
        let mut applied = std::collections::HashMap::new();
        let mut updated = Vec::new();
        for e in entries {
            let manager = e["manager"].as_str().unwrap_or_default().to_string();
            let status = e["subresource"].as_str() == Some("status");
            let fields = e.get("fieldsV1").cloned().unwrap_or_else(|| json!({}));
            match e["operation"].as_str() {
                Some("Apply") => {
                    let applier = (manager, status);
                    let config = match before.remove(&applier) {
                        Some(a) if applied_fields(rt, &applier, &a.config) == fields => a.config,
                        _ => project(live, &fields, rt.schema()),
                    };
                    let time = e["time"].as_str().map(String::from);
                    applied.insert(applier, Applied { config, time });
                }
                Some("Update") => updated.push(Updated {
                    manager,
                    status,
                    fields,
                    time: e["time"].as_str().map_or_else(meta::now, String::from),
                }),
                _ => {}
            }
        }
        if updated.is_empty() {
            self.updated.remove(key);
        } else {
            self.updated.insert(key.clone(), updated);
        }
        if applied.is_empty() {
            self.applied.remove(key);
        } else {
            self.applied.insert(key.clone(), applied);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_set_names_map_keys_down_to_scalars_and_lists_without_server_fields() {
        let config = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "labels": {"a": "1"}, "annotations": {}},
            "data": {"x": "1"},
            "spec": {"ports": [{"port": 80}], "empty": null},
            "status": {"phase": "x"},
        });
        assert_eq!(
            fields_in(&config, Schema::CONFIG_MAP, Part::Object),
            json!({"f:metadata": {"f:labels": {"f:a": {}}, "f:annotations": {}},
                   "f:data": {"f:x": {}}, "f:spec": {"f:ports": {}}})
        );
        // A Service's ports are a list-map: its field set names each port.
        assert_eq!(
            fields_in(&config, Schema::SERVICE, Part::Object)["f:spec"],
            json!({"f:ports": {".": {}, r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}}}})
        );
        let finalizers = json!({"metadata": {"finalizers": ["a", "b"]}});
        assert_eq!(
            fields_in(&finalizers, Schema::CONFIG_MAP, Part::Object),
            json!({"f:metadata": {"f:finalizers": {".": {}, r#"v:"a""#: {}, r#"v:"b""#: {}}}})
        );
    }

    #[test]
    fn an_owner_reference_is_one_field() {
        let owned = |name: &str| {
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
                "kind": "StatefulSet", "name": name, "uid": "u"}]}})
        };
        let item = r#"k:{"uid":"u"}"#;
        assert_eq!(
            fields_in(&owned("a"), Schema::CONFIG_MAP, Part::Object),
            json!({"f:metadata": {"f:ownerReferences": {".": {}, item: {}}}})
        );
        let (changed, removed) =
            compare(&owned("a"), &owned("b"), Schema::CONFIG_MAP, Part::Object);
        assert_eq!(
            changed,
            json!({"f:metadata": {"f:ownerReferences": {item: {}}}})
        );
        assert_eq!(removed, json!({}));
        let (added, _) = compare(&json!({}), &owned("a"), Schema::CONFIG_MAP, Part::Object);
        assert_eq!(
            added,
            json!({"f:metadata": {"f:ownerReferences": {".": {}, item: {}}}})
        );
    }

    #[test]
    fn a_selector_is_one_field() {
        let with = |selector: Value| json!({"spec": {"selector": selector}});
        let a = with(json!({"matchLabels": {"app": "a"}}));
        let b = with(json!({"matchLabels": {"app": "b"}}));
        let leaf = json!({"f:spec": {"f:selector": {}}});
        assert_eq!(fields_in(&a, Schema::STATEFUL_SET, Part::Object), leaf);
        let (changed, removed) = compare(&a, &b, Schema::STATEFUL_SET, Part::Object);
        assert_eq!((changed, removed), (leaf.clone(), json!({})));
        let (same, _) = compare(&a, &a, Schema::STATEFUL_SET, Part::Object);
        assert_eq!(same, json!({}));
        let (added, _) = compare(&json!({}), &a, Schema::STATEFUL_SET, Part::Object);
        assert_eq!(added, json!({"f:spec": {".": {}, "f:selector": {}}}));
        // A Service's selector is an atomic map; the same path in another kind is not atomic.
        let svc = with(json!({"a": "b"}));
        assert_eq!(fields_in(&svc, Schema::SERVICE, Part::Object), leaf);
        assert_eq!(
            fields_in(&svc, Schema::CONFIG_MAP, Part::Object),
            json!({"f:spec": {"f:selector": {"f:a": {}}}})
        );
    }

    #[test]
    fn a_projection_takes_the_named_fields_of_the_live_object() {
        let live = json!({"metadata": {"name": "c", "labels": {"a": "1", "b": "2"}},
                          "data": {"x": "1", "y": "2"}, "spec": {"ports": [{"port": 80}]}});
        let fields = json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                            "f:data": {"f:y": {}}, "f:spec": {"f:ports": {}}, "f:gone": {}});
        assert_eq!(
            project(&live, &fields, Schema::CONFIG_MAP),
            json!({"metadata": {"labels": {"a": "1"}}, "data": {"y": "2"},
                   "spec": {"ports": [{"port": 80}]}})
        );
        let live =
            json!({"spec": {"ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "b"}]}});
        let fields = json!({"f:spec": {"f:ports": {r#"k:{"port":81,"protocol":"TCP"}"#: {
            ".": {}, "f:port": {}}}}});
        assert_eq!(
            project(&live, &fields, Schema::SERVICE),
            json!({"spec": {"ports": [{"port": 81}]}}),
            "the items named, with their fields named"
        );
    }

    #[test]
    fn a_forced_apply_takes_what_it_changes() {
        let fields = json!({"f:data": {"f:a": {}, "f:b": {}}, "f:spec": {"f:ports": {".": {},
            r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}, "f:name": {}}}}});
        let live =
            json!({"data": {"a": "1", "b": "2"}, "spec": {"ports": [{"port": 80, "name": "x"}]}});
        let applied =
            json!({"data": {"a": "9", "b": "2"}, "spec": {"ports": [{"port": 80, "name": "y"}]}});
        assert_eq!(
            without_changed(&fields, &live, &applied, Schema::SERVICE),
            json!({"f:data": {"f:b": {}}, "f:spec": {"f:ports": {".": {},
                r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}}}}})
        );
        let all = json!({"data": {"a": "9", "b": "9"}});
        assert_eq!(
            without_changed(
                &json!({"f:data": {"f:a": {}, "f:b": {}}}),
                &live,
                &all,
                Schema::SERVICE
            ),
            json!({}),
            "a map left with nothing goes"
        );
    }

    #[test]
    fn the_paths_an_owner_loses_are_printed_as_structured_merge_diff_prints_them() {
        let fields = json!({"f:metadata": {"f:labels": {"f:a": {}, "f:b": {}},
            "f:finalizers": {".": {}, r#"v:"x""#: {}}},
            "f:spec": {"f:ports": {".": {},
                r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}, "f:name": {}}}}});
        let kept = json!({"f:metadata": {"f:labels": {"f:b": {}}, "f:finalizers": {".": {}}},
            "f:spec": {"f:ports": {".": {},
                r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}}}}});
        assert_eq!(
            lost_paths(&fields, &kept),
            [
                ".metadata.finalizers[=\"x\"]",
                ".metadata.labels.a",
                ".spec.ports[port=80,protocol=\"TCP\"].name",
            ]
        );
        assert!(lost_paths(&fields, &fields).is_empty());
    }

    #[test]
    fn a_status_part_names_the_status_alone_and_a_type_without_one_names_it_too() {
        let obj = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1},
                         "status": {"phase": "Ready"}});
        assert_eq!(
            fields_in(&obj, Schema::CONFIG_MAP, Part::Status),
            json!({"f:status": {"f:phase": {}}})
        );
        assert_eq!(
            fields_in(&obj, Schema::CONFIG_MAP, Part::Whole),
            json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:x": {}},
                   "f:status": {"f:phase": {}}})
        );
    }

    #[test]
    fn a_difference_keeps_what_only_the_first_set_names() {
        let a = json!({"f:data": {"f:x": {}, "f:y": {}}, "f:metadata": {"f:labels": {"f:l": {}}},
            "f:spec": {"f:ports": {".": {}, r#"k:{"port":80,"protocol":"TCP"}"#: {".": {},
                "f:port": {}, "f:name": {}}}}});
        let b = json!({"f:data": {"f:x": {}}, "f:metadata": {"f:labels": {"f:l": {}}},
            "f:spec": {"f:ports": {r#"k:{"port":80,"protocol":"TCP"}"#: {"f:name": {}}}}});
        assert_eq!(
            difference(&a, &b),
            json!({"f:data": {"f:y": {}}, "f:spec": {"f:ports": {".": {},
                r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}}}}})
        );
        assert_eq!(difference(&a, &a), json!({}));
        // A leaf of one set is a node with parts in the other: the node itself is not named
        // there, its parts are not named in the first.
        assert_eq!(
            difference(&json!({"f:labels": {}}), &json!({"f:labels": {"f:a": {}}})),
            json!({"f:labels": {}})
        );
        assert_eq!(
            difference(&json!({"f:labels": {"f:a": {}}}), &json!({"f:labels": {}})),
            json!({"f:labels": {"f:a": {}}})
        );
    }

    #[test]
    fn a_comparison_finds_what_a_write_added_changed_and_removed() {
        let old = json!({"metadata": {"name": "c", "resourceVersion": "1", "labels": {"l": "1"}},
            "data": {"x": "1", "y": "1", "same": "s"},
            "spec": {"ports": [{"port": 80, "name": "a"}, {"port": 81}]}});
        let new = json!({"metadata": {"name": "c", "resourceVersion": "2", "labels": {"l": "1"}},
            "data": {"x": "2", "z": "3", "same": "s"},
            "spec": {"ports": [{"port": 80, "name": "b"}, {"port": 82}]}});
        let (changed, removed) = compare(&old, &new, Schema::SERVICE, Part::Object);
        assert_eq!(
            changed,
            json!({"f:data": {"f:x": {}, "f:z": {}}, "f:spec": {"f:ports": {
                r#"k:{"port":80,"protocol":"TCP"}"#: {"f:name": {}},
                r#"k:{"port":82,"protocol":"TCP"}"#: {".": {}, "f:port": {}}}}})
        );
        assert_eq!(
            removed,
            json!({"f:data": {"f:y": {}}, "f:spec": {"f:ports": {
                r#"k:{"port":81,"protocol":"TCP"}"#: {".": {}, "f:port": {}}}}})
        );
        // The server's metadata and another part of the object are not the write's.
        let status = json!({"metadata": {"resourceVersion": "3"}, "status": {"phase": "Ready"}});
        let (changed, removed) = compare(&old, &status, Schema::SERVICE, Part::Status);
        assert_eq!(
            (changed, removed),
            (json!({"f:status": {".": {}, "f:phase": {}}}), json!({})),
            "the status the write added is named itself too"
        );
        let (changed, removed) = compare(&new, &new, Schema::SERVICE, Part::Object);
        assert!(is_empty(&changed) && is_empty(&removed));
    }

    #[test]
    fn a_map_a_write_adds_or_removes_is_named_itself_and_a_struct_of_the_zero_object_is_not() {
        let old = json!({"metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"x": "1"}});
        let new = json!({"metadata": {"name": "c", "annotations": {"b": "2"}}});
        let (changed, removed) = compare(&old, &new, Schema::CONFIG_MAP, Part::Whole);
        assert_eq!(
            changed,
            json!({"f:metadata": {"f:annotations": {".": {}, "f:b": {}}}})
        );
        assert_eq!(
            removed,
            json!({"f:data": {".": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
        );
        // A pod's spec exists in the zero Pod, its nodeSelector does not.
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeSelector": {"k": "v"}}});
        let zero = json!({"spec": {}, "status": {}});
        let (created, _) = compare(&zero, &pod, Schema::CONFIG_MAP, Part::Object);
        assert_eq!(
            created,
            json!({"f:spec": {"f:nodeSelector": {".": {}, "f:k": {}}}})
        );
    }

    #[test]
    fn beyond_ten_update_entries_the_oldest_merge_into_ancient_changes() {
        let entry = |i: usize| Updated {
            manager: format!("m{i:02}"),
            status: false,
            fields: json!({"f:metadata": {"f:labels": {format!("f:l{i:02}"): {}}}}),
            time: format!("2026-12-06T16:00:{i:02}Z"),
        };
        let mut updated: Vec<Updated> = (0..11).rev().map(entry).collect();
        cap_updates(&mut updated);
        let managers: Vec<&str> = updated.iter().map(|u| u.manager.as_str()).collect();
        assert_eq!(
            managers,
            [
                "ancient-changes",
                "m02",
                "m03",
                "m04",
                "m05",
                "m06",
                "m07",
                "m08",
                "m09",
                "m10"
            ]
        );
        assert_eq!(
            (&updated[0].fields, updated[0].time.as_str()),
            (
                &json!({"f:metadata": {"f:labels": {"f:l00": {}, "f:l01": {}}}}),
                "2026-12-06T16:00:01Z"
            )
        );
        // The next one beyond ten goes into the same bucket.
        updated.push(entry(11));
        cap_updates(&mut updated);
        assert_eq!(updated.len(), 10);
        assert_eq!(updated[0].manager, "ancient-changes");
        assert_eq!(
            updated[0].fields,
            json!({"f:metadata": {"f:labels": {"f:l00": {}, "f:l01": {}, "f:l02": {}}}})
        );
    }

    #[test]
    fn a_union_names_what_either_names() {
        assert_eq!(
            union(
                &json!({"f:a": {}, "f:b": {"f:c": {}}}),
                &json!({"f:a": {"f:x": {}}, "f:d": {}})
            ),
            json!({"f:a": {".": {}, "f:x": {}}, "f:b": {"f:c": {}}, "f:d": {}})
        );
    }
}
