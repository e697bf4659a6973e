//! Store indexes and the semantics they must not change.

use super::*;
use crate::patch::PatchType;
use serde_json::json;

fn configmaps(inner: &Inner) -> ResourceType {
    inner
        .resource("", "v1", "configmaps")
        .expect("configmaps are served")
}

fn statefulsets(inner: &Inner) -> ResourceType {
    inner
        .resource("apps", "v1", "statefulsets")
        .expect("statefulsets are served")
}

fn cm(name: &str, owners: &[&str]) -> Value {
    let refs: Vec<Value> = owners
        .iter()
        .map(|u| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": u}))
        .collect();
    json!({"metadata": {"name": name, "ownerReferences": refs}})
}

fn apply(inner: &mut Inner, rt: &ResourceType, body: Value) -> Result<Value, ApiError> {
    let name = meta::name(&body).to_string();
    inner.patch(
        rt,
        Some("default"),
        &name,
        PatchType::Apply,
        &body,
        false,
        super::Manager::forced("m"),
    )
}

#[test]
fn an_apply_that_changes_anothers_field_is_refused_unless_forced() {
    let store = Store::default();
    let mut inner = store.lock();
    let rt = configmaps(&inner);
    let labelled = |labels: Value| json!({"metadata": {"name": "c", "labels": labels}});
    apply(&mut inner, &rt, labelled(json!({"a": "1", "b": "2"}))).expect("apply");
    let as_n = |inner: &mut Inner, labels: Value, force: bool| {
        let by = Manager {
            name: Some("n"),
            force,
        };
        let body = labelled(labels);
        inner.patch(
            &rt,
            Some("default"),
            "c",
            PatchType::Apply,
            &body,
            false,
            by,
        )
    };
    as_n(&mut inner, json!({"a": "1"}), false).expect("the same value is shared");
    let refused = as_n(&mut inner, json!({"a": "9", "b": "8"}), false).expect_err("a conflict");
    assert_eq!((refused.code, refused.reason), (409, "Conflict"));
    assert_eq!(
        refused.message,
        "Apply failed with 2 conflicts: conflicts with \"m\":\n- .metadata.labels.a\n- .metadata.labels.b"
    );
    let causes = &refused.details.expect("causes")["causes"];
    assert_eq!(causes[1]["field"], ".metadata.labels.b", "{causes}");
    let live = inner.get(&rt, Some("default"), "c").expect("kept");
    assert_eq!(live["metadata"]["labels"]["a"], "1", "nothing changed");
    let forced = as_n(&mut inner, json!({"a": "9"}), true).expect("forced");
    assert_eq!(forced["metadata"]["labels"]["a"], "9");
    // Taken: m's next apply without the label leaves it to n.
    let obj = apply(&mut inner, &rt, labelled(json!({"b": "2"}))).expect("apply");
    assert_eq!(
        obj["metadata"]["labels"],
        json!({"a": "9", "b": "2"}),
        "{obj}"
    );
}

#[test]
fn a_field_manager_owns_nothing_of_a_recreated_object() {
    let store = Store::default();
    let mut inner = store.lock();
    let rt = configmaps(&inner);
    let first = json!({"metadata": {"name": "c", "finalizers": ["x/y"]}});
    apply(&mut inner, &rt, first).expect("apply");
    inner
        .delete(&rt, Some("default"), "c", &DeleteOptions::default())
        .expect("delete");
    // The manager's last apply drops the finalizer (so the object goes) and sets a label.
    let last = json!({"metadata": {"name": "c", "labels": {"x": "1"}}});
    apply(&mut inner, &rt, last).expect("apply");
    assert!(inner.get(&rt, Some("default"), "c").is_err(), "deleted");
    // Created again by another client, then applied by the same manager without the label:
    // the manager never applied that label to this object, so it stays.
    let created = json!({"metadata": {"name": "c", "labels": {"x": "1"}}});
    inner.create(&rt, Some("default"), created).expect("create");
    let applied = json!({"metadata": {"name": "c", "labels": {"y": "1"}}});
    let obj = apply(&mut inner, &rt, applied).expect("apply");
    assert_eq!(
        obj["metadata"]["labels"],
        json!({"x": "1", "y": "1"}),
        "{obj}"
    );
}

#[test]
fn lists_are_per_resource_and_namespace_in_name_order() {
    let store = Store::default();
    let mut inner = store.lock();
    let rt = configmaps(&inner);
    let ns = inner.resource("", "v1", "namespaces").expect("served");
    inner
        .create(&ns, None, json!({"metadata": {"name": "b"}}))
        .expect("namespace");
    for (n, name) in [("default", "z"), ("b", "a"), ("default", "m"), ("b", "q")] {
        inner.create(&rt, Some(n), cm(name, &[])).expect("create");
    }
    fn names<V: std::borrow::Borrow<Value>>(v: Vec<V>) -> Vec<String> {
        v.iter()
            .map(|o| {
                let o: &Value = o.borrow();
                format!("{}/{}", meta::namespace(o), meta::name(o))
            })
            .collect()
    }
    assert_eq!(
        names(inner.list(&rt, None)),
        ["b/a", "b/q", "default/m", "default/z"]
    );
    assert_eq!(
        names(inner.list(&rt, Some("default"))),
        ["default/m", "default/z"]
    );
    assert_eq!(names(inner.list(&rt, Some("de"))), Vec::<String>::new());
    let fields = FieldSelector::parse("metadata.name=q").expect("parse");
    let all = LabelSelector::default();
    assert_eq!(names(inner.select(&rt, Some("b"), &all, &fields)), ["b/q"]);
    assert_eq!(names(inner.select(&rt, None, &all, &fields)), ["b/q"]);
    assert!(inner.select(&rt, Some("default"), &all, &fields).is_empty());
    assert_eq!(inner.namespace_len("b"), 2);
    // The namespaces themselves are cluster-scoped.
    assert_eq!(inner.list(&ns, None).len(), 5);
}

#[test]
fn indexes_follow_updates_and_deletions() {
    let store = Store::default();
    let mut inner = store.lock();
    let rt = configmaps(&inner);
    let owner = inner
        .create(&rt, Some("default"), cm("owner", &[]))
        .expect("owner");
    let uid = meta::uid_of(&owner).to_string();
    inner
        .create(&rt, Some("default"), cm("dep", &[&uid]))
        .expect("dependent");
    let deps: Vec<String> = inner.dependents(&uid).map(|k| k.name.clone()).collect();
    assert_eq!(deps, ["dep"]);
    assert_eq!(
        inner.key_of_uid(&uid).map(|k| k.name.as_str()),
        Some("owner")
    );
    // The dependent drops its owner reference: the index follows.
    let mut dep = inner.get(&rt, Some("default"), "dep").expect("get");
    dep["metadata"]["ownerReferences"] = json!([]);
    inner
        .update(&rt, Some("default"), "dep", dep, false)
        .expect("update");
    assert_eq!(inner.dependents(&uid).count(), 0);
    inner
        .delete(&rt, Some("default"), "owner", &DeleteOptions::default())
        .expect("delete");
    assert!(inner.key_of_uid(&uid).is_none());
    assert!(
        inner.get(&rt, Some("default"), "dep").is_ok(),
        "no longer a dependent"
    );
    assert_eq!(inner.namespace_len("default"), 1);
}

/// The map by key holds exactly the ordered map's objects, the same allocations.
fn assert_maps_agree(inner: &Inner) {
    assert_eq!(inner.by_key.len(), inner.objects.len());
    for (k, o) in &inner.objects {
        let found = inner.by_key.get(k).expect("every stored object by key");
        assert!(Arc::ptr_eq(found, o), "{k:?}: another copy");
    }
}

#[test]
fn point_reads_and_lists_see_the_same_objects() {
    let store = Store::default();
    let mut inner = store.lock();
    let rt = configmaps(&inner);
    for name in ["a", "b", "c"] {
        inner
            .create(&rt, Some("default"), cm(name, &[]))
            .expect("create");
    }
    assert_maps_agree(&inner);
    let mut b = inner.get(&rt, Some("default"), "b").expect("get");
    b["data"] = json!({"k": "v"});
    inner
        .update(&rt, Some("default"), "b", b, false)
        .expect("update");
    apply(&mut inner, &rt, json!({"metadata": {"name": "d"}})).expect("apply creates");
    inner
        .delete(&rt, Some("default"), "a", &DeleteOptions::default())
        .expect("delete");
    assert_maps_agree(&inner);
    assert!(!inner.exists(&rt, Some("default"), "a"));
    assert!(inner.get(&rt, Some("default"), "a").is_err());
    assert_eq!(
        inner.get(&rt, Some("default"), "b").expect("get")["data"],
        json!({"k": "v"})
    );
    let listed: Vec<String> = inner
        .list(&rt, Some("default"))
        .iter()
        .map(|o| meta::name(o).to_string())
        .collect();
    assert_eq!(listed, ["b", "c", "d"]);
}

#[test]
fn the_sweep_collects_objects_whose_owners_never_existed_or_are_gone() {
    let store = Store::default();
    let mut inner = store.lock();
    let rt = configmaps(&inner);
    let a = inner.create(&rt, Some("default"), cm("a", &[])).expect("a");
    let b = inner.create(&rt, Some("default"), cm("b", &[])).expect("b");
    let (ua, ub) = (meta::uid_of(&a).to_string(), meta::uid_of(&b).to_string());
    inner
        .create(&rt, Some("default"), cm("ghost", &["no-such-uid"]))
        .expect("orphan");
    inner
        .create(&rt, Some("default"), cm("half", &["no-such-uid", &ua]))
        .expect("one owner alive");
    inner
        .create(&rt, Some("default"), cm("two", &[&ua, &ub]))
        .expect("two owners");
    inner.sweep();
    let exists = |i: &Inner, n: &str| i.exists(&rt, Some("default"), n);
    assert!(!exists(&inner, "ghost"));
    assert!(exists(&inner, "half") && exists(&inner, "two"));
    // Orphaning keeps the dependents; the sweep then has nothing of theirs to collect.
    let orphan = DeleteOptions {
        propagation: Propagation::Orphan,
        ..DeleteOptions::default()
    };
    inner
        .delete(&rt, Some("default"), "b", &orphan)
        .expect("delete b");
    inner.sweep();
    assert!(exists(&inner, "two"));
    // Its last live owner gone, each goes.
    inner
        .delete(&rt, Some("default"), "a", &DeleteOptions::default())
        .expect("delete a");
    inner.sweep();
    assert!(!exists(&inner, "half") && !exists(&inner, "two"));
}

#[test]
fn history_is_shared_and_expires() {
    let store = Store::default();
    let mut inner = store.lock();
    inner.set_history_limits(history::Limits {
        lower: 2,
        budget: 8,
    });
    let rt = configmaps(&inner);
    let start = inner.rv;
    inner
        .create(&rt, Some("default"), cm("c", &[]))
        .expect("create");
    let mut c = inner.get(&rt, Some("default"), "c").expect("get");
    c["data"] = json!({"k": "v"});
    inner
        .update(&rt, Some("default"), "c", c, false)
        .expect("update");
    let changes: Vec<&Change> = inner
        .changes_of(&rt.storage, start)
        .expect("history")
        .collect();
    assert_eq!(changes.len(), 2);
    let stored = inner.objects.get(&changes[1].key).expect("stored");
    assert!(Arc::ptr_eq(&changes[1].object, stored));
    assert!(Arc::ptr_eq(
        changes[1].old.as_ref().expect("old"),
        &changes[0].object
    ));
    // Another type's changes do not push a ConfigMap's out of its window.
    let secrets = inner.resource("", "v1", "secrets").expect("secrets");
    for i in 0..20 {
        inner
            .create(&secrets, Some("default"), cm(&format!("s{i}"), &[]))
            .expect("create");
    }
    assert_eq!(
        inner.changes_of(&rt.storage, start).map(|c| c.count()),
        Ok(2)
    );
    assert!(inner.changes_of(&secrets.storage, start).is_err());
    // Its own do, past the budget.
    for i in 0..8 {
        inner
            .create(&rt, Some("default"), cm(&format!("n{i}"), &[]))
            .expect("create");
    }
    assert!(inner.changes_of(&rt.storage, start).is_err());
}

#[test]
fn the_generation_follows_the_spec_only() {
    let store = Store::default();
    let mut inner = store.lock();
    let rt = statefulsets(&inner);
    let sts = |replicas: u64, label: &str| {
        json!({"metadata": {"name": "s", "labels": {"l": label}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    };
    let generation = |v: &Value| v["metadata"]["generation"].as_i64();
    let created = inner
        .create(&rt, Some("default"), sts(1, "x"))
        .expect("create");
    assert_eq!(generation(&created), Some(1));
    let relabelled = inner
        .update(&rt, Some("default"), "s", sts(1, "y"), false)
        .expect("a label");
    assert_eq!(generation(&relabelled), Some(1), "metadata is not the spec");
    let mut status = relabelled.clone();
    status["status"] = json!({"replicas": 1});
    let status = inner
        .update(&rt, Some("default"), "s", status, true)
        .expect("status");
    assert_eq!(generation(&status), Some(1), "status is not the spec");
    let scaled = inner
        .update(&rt, Some("default"), "s", sts(2, "y"), false)
        .expect("replicas");
    assert_eq!(generation(&scaled), Some(2));
    let mut extra = sts(2, "y");
    extra["spec"]["minReadySeconds"] = json!(5);
    let extra = inner
        .update(&rt, Some("default"), "s", extra, false)
        .expect("a new spec field");
    assert_eq!(generation(&extra), Some(3));
}

#[test]
fn a_status_apply_owns_the_status_and_a_controllers_write_takes_what_it_changes() {
    let store = Store::default();
    let mut inner = store.lock();
    let rt = statefulsets(&inner);
    let sts = json!({"metadata": {"name": "s"}, "spec": {"serviceName": "s", "replicas": 1,
        "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    inner
        .create_by(&rt, Some("default"), sts, Some("op"))
        .expect("create");
    let body = json!({"metadata": {"name": "s"}, "status": {"replicas": 1, "readyReplicas": 1}});
    let by = Manager::forced("st");
    let applied = inner
        .patch(&rt, Some("default"), "s", PatchType::Apply, &body, true, by)
        .expect("a status apply");
    // How many entries an object's managedFields have, and the status entry's fields.
    let owners = |o: &Value| {
        let entries = o["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let status = entries
            .iter()
            .find(|e| e["subresource"] == "status")
            .map(|e| e["fieldsV1"].clone());
        (entries.len(), status)
    };
    assert_eq!(
        owners(&applied),
        (
            2,
            Some(json!({"f:status": {"f:replicas": {}, "f:readyReplicas": {}}}))
        ),
        "{applied}"
    );
    // One of the sandbox's own controllers (no manager) changes readyReplicas: the apply's
    // entry no longer names it, and no entry is added for the controller.
    let mut live = inner.get(&rt, Some("default"), "s").expect("live");
    live["status"]["readyReplicas"] = json!(0);
    inner
        .update(&rt, Some("default"), "s", live, true)
        .expect("a status update");
    let now = inner.get(&rt, Some("default"), "s").expect("live");
    assert_eq!(
        owners(&now),
        (2, Some(json!({"f:status": {"f:replicas": {}}}))),
        "{now}"
    );
}

#[test]
fn the_stored_object_carries_its_managed_fields_and_a_write_back_keeps_them() {
    let store = Store::default();
    let mut inner = store.lock();
    let rt = configmaps(&inner);
    let body = json!({"metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"k": "v"}});
    let created = inner
        .create_by(&rt, Some("default"), body, Some("maker"))
        .expect("create");
    let key = Inner::key(&rt, Some("default"), "c");
    let stored = inner.raw(&key).cloned().expect("stored");
    assert_eq!(
        stored["metadata"]["managedFields"], created["metadata"]["managedFields"],
        "what is stored is what the answer shows"
    );
    let listed = inner.list(&rt, Some("default"));
    assert_eq!(
        listed[0]["metadata"]["managedFields"][0]["manager"],
        "maker"
    );
    let changes: Vec<_> = inner
        .changes_of(&rt.storage, 1)
        .expect("history")
        .filter(|c| c.key == key)
        .map(|c| c.object["metadata"]["managedFields"].clone())
        .collect();
    assert_eq!(changes, [created["metadata"]["managedFields"].clone()]);

    // Read and written back whole, by a controller that owns nothing: nothing changes.
    let back = inner
        .update(&rt, Some("default"), "c", created.clone(), false)
        .expect("the same object");
    assert_eq!(back, created);
    // Its data changed by the same read-and-write: the object changes, its owners do not
    // (a write by no manager owns nothing, and takes k from maker).
    let mut edited = created.clone();
    edited["data"]["k"] = json!("w");
    let written = inner
        .update(&rt, Some("default"), "c", edited, false)
        .expect("an update");
    assert_ne!(
        written["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    let fields = &written["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(fields["f:data"], json!({".": {}}), "{written}");
    assert_eq!(inner.raw(&key).cloned().as_ref(), Some(&written));
}

#[test]
fn a_refused_write_changes_no_ownership() {
    let store = Store::default();
    let mut inner = store.lock();
    let rt = configmaps(&inner);
    let body = json!({"metadata": {"name": "c"}, "data": {"k": "v"}, "immutable": true});
    let created = inner
        .create_by(&rt, Some("default"), body, Some("maker"))
        .expect("create");
    let by = Manager::forced("n");
    let change = json!({"metadata": {"name": "c"}, "data": {"k": "w"}});
    inner
        .patch(
            &rt,
            Some("default"),
            "c",
            PatchType::Apply,
            &change,
            false,
            by,
        )
        .expect_err("an immutable ConfigMap's data stays");
    let key = Inner::key(&rt, Some("default"), "c");
    assert_eq!(
        inner.managed_fields(&rt, &key),
        created["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    );
}
