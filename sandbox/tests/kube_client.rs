//! Fidelity with kube-rs 5: watcher (list + watch), server-side apply, patch_status, events.

mod common;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Config, Resource};
use serde_json::json;
use std::time::Duration;

async fn client(sb: &habitat_sandbox::Sandbox) -> Client {
    let uri = sb.url().parse().expect("uri");
    Client::try_from(Config::new(uri)).expect("client")
}

#[tokio::test]
async fn watcher_sees_applied_objects() {
    let sb = common::start().await;
    let c = client(&sb).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "pre"}})).expect("cm"),
    )
    .await
    .expect("create");
    let mut stream = watcher(cms.clone(), watcher::Config::default().labels("app=x"))
        .applied_objects()
        .boxed();
    let pp = PatchParams::apply("test").force();
    let apply = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "labels": {"app": "x"}}, "data": {"k": "v"}});
    cms.patch("a", &pp, &Patch::Apply(&apply))
        .await
        .expect("apply");
    let got = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("in time")
        .expect("no error")
        .expect("an object");
    assert_eq!(got.metadata.name.as_deref(), Some("a"));
    let apply2 = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "labels": {"app": "x"}}, "data": {"k": "w"}});
    cms.patch("a", &pp, &Patch::Apply(&apply2))
        .await
        .expect("apply");
    let got = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("in time")
        .expect("no error")
        .expect("an object");
    assert_eq!(
        got.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("w")
    );
    let listed = cms
        .list(&ListParams::default().labels("app=x"))
        .await
        .expect("list");
    assert_eq!(listed.items.len(), 1);
    sb.shutdown().await;
}

#[tokio::test]
async fn status_patch_and_recorder_events() {
    let sb = common::start().await;
    let c = client(&sb).await;
    let sts: Api<StatefulSet> = Api::namespaced(c.clone(), "default");
    let obj = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
        "spec": {"replicas": 0, "serviceName": "s", "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let created = sts
        .patch("s", &PatchParams::apply("test"), &Patch::Apply(&obj))
        .await
        .expect("apply");
    assert_eq!(created.metadata.generation, Some(1));
    let patched = sts
        .patch_status(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 0, "collisionCount": 7}})),
        )
        .await
        .expect("status");
    assert_eq!(patched.status.and_then(|s| s.collision_count), Some(7));

    let recorder = Recorder::new(
        c.clone(),
        Reporter {
            controller: "test-ctl".into(),
            instance: Some("i-0".into()),
        },
    );
    let reference = created.object_ref(&());
    let ev = Event {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some("hello".into()),
        action: "Test".into(),
        secondary: None,
    };
    recorder
        .publish(&ev, &reference)
        .await
        .expect("create event");
    recorder
        .publish(&ev, &reference)
        .await
        .expect("patch event series");
    let events: Api<CoreEvent> = Api::namespaced(c, "default");
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let list = events
        .list(&ListParams::default().fields(&format!(
            "involvedObject.uid={uid},involvedObject.kind=StatefulSet"
        )))
        .await
        .expect("list events");
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(e.message.as_deref(), Some("hello"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
    sb.shutdown().await;
}
