//! Fidelity of the sandbox's API server: each scenario makes the same requests on both grounds
//! (the sandbox and a real kube-apiserver v1.36) and asserts the real server's answer (status
//! code, reason and, where stable, the message), recorded from the real server. One scenario per
//! divergence that was found and fixed in the sandbox. The simulated kubelet, which plays the
//! nodes on both grounds, is held to a real kubelet's documented behaviour the same way.

#[macro_use]
mod support;

use serde_json::{json, Value};
use support::{Env, Ground};

/// The code, reason and message of an answer (200 and the object for a success).
#[derive(Debug)]
struct Answer {
    code: u16,
    reason: String,
    message: String,
    body: Value,
    /// The whole Status of a refusal.
    status: Option<Box<kube::core::Status>>,
}

async fn call(env: &Env, method: &str, path: &str, body: &Value, content_type: &str) -> Answer {
    call_as(env, None, method, path, body, content_type).await
}

/// `path` with `NS` in its path part naming `namespace`. The query is left alone: it may carry
/// a server's `continue` token, whose base64 can hold "NS" too (`a_list_is_paged_by_limit_and_continue`
/// failed on one, in CI).
fn in_namespace(path: &str, namespace: &str) -> String {
    match path.split_once('?') {
        Some((p, query)) => format!("{}?{query}", p.replace("NS", namespace)),
        None => path.replace("NS", namespace),
    }
}

#[test]
fn a_continue_token_holding_ns_is_sent_as_it_is() {
    assert_eq!(
        in_namespace(
            "/api/v1/namespaces/NS/configmaps?limit=2&continue=eyJNSx",
            "fid"
        ),
        "/api/v1/namespaces/fid/configmaps?limit=2&continue=eyJNSx"
    );
    assert_eq!(
        in_namespace("/api/v1/namespaces/NS-gone/pods", "fid"),
        "/api/v1/namespaces/fid-gone/pods"
    );
}

/// [`call`] with a User-Agent (the test's client sends none).
async fn call_as(
    env: &Env,
    user_agent: Option<&str>,
    method: &str,
    path: &str,
    body: &Value,
    content_type: &str,
) -> Answer {
    let path = in_namespace(path, &env.namespace);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(&path)
        .header("Content-Type", content_type);
    if let Some(agent) = user_agent {
        req = req.header("User-Agent", agent);
    }
    let req = req
        .body(if body.is_null() {
            vec![]
        } else {
            serde_json::to_vec(body).unwrap_or_default()
        })
        .expect("request");
    match env.client.request_text(req).await {
        Ok(text) => Answer {
            code: 200,
            reason: String::new(),
            message: String::new(),
            body: serde_json::from_str(&text).unwrap_or_default(),
            status: None,
        },
        Err(kube::Error::Api(s)) => Answer {
            code: s.code,
            reason: s.reason.clone(),
            message: s.message.clone(),
            body: Value::Null,
            status: Some(s),
        },
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

async fn get(env: &Env, path: &str) -> Answer {
    call(env, "GET", path, &Value::Null, "application/json").await
}

async fn post(env: &Env, path: &str, body: Value) -> Answer {
    call(env, "POST", path, &body, "application/json").await
}

async fn put(env: &Env, path: &str, body: Value) -> Answer {
    call(env, "PUT", path, &body, "application/json").await
}

async fn merge(env: &Env, path: &str, body: Value) -> Answer {
    call(env, "PATCH", path, &body, "application/merge-patch+json").await
}

/// Creates a pod, waiting for the namespace's default ServiceAccount that the real server's
/// admission looks up.
async fn create_pod(env: &Env, pod: Value) {
    for _ in 0..100 {
        let a = post(env, PODS, pod.clone()).await;
        if a.code != 403 {
            ok(&a);
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    panic!("the pod could not be created");
}

fn ok(a: &Answer) -> &Value {
    assert_eq!(a.code, 200, "{a:?}");
    &a.body
}

fn invalid(a: &Answer, message: &str) {
    assert_eq!(
        (a.code, a.reason.as_str(), a.message.as_str()),
        (422, "Invalid", message),
        "{a:?}"
    );
}

const STS: &str = "/apis/apps/v1/namespaces/NS/statefulsets";

fn statefulset(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {"serviceName": "redis", "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "redis:7"}]}}}})
}

/// Only replicas, ordinals, template, updateStrategy, revisionHistoryLimit,
/// persistentVolumeClaimRetentionPolicy and minReadySeconds of a StatefulSet may change.
async fn statefulset_spec_is_immutable_but_for_a_few_fields(ground: Ground) {
    let env = env_on!(ground, "fid-sts", false);
    ok(&post(&env, STS, statefulset("redis")).await);
    let fine = json!({"spec": {"replicas": 0, "minReadySeconds": 3,
        "template": {"spec": {"containers": [{"name": "c", "image": "redis:8"}]}}}});
    ok(&merge(&env, &format!("{STS}/redis"), fine).await);
    let expected = "StatefulSet.apps \"redis\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";
    for patch in [
        json!({"spec": {"serviceName": "other"}}),
        json!({"spec": {"podManagementPolicy": "Parallel"}}),
    ] {
        invalid(&merge(&env, &format!("{STS}/redis"), patch).await, expected);
    }
    // A PUT of a built-in without resourceVersion is an unconditional update, and is
    // validated the same.
    let mut body = statefulset("redis");
    body["spec"]["serviceName"] = json!("other");
    invalid(&put(&env, &format!("{STS}/redis"), body).await, expected);
}

const PODS: &str = "/api/v1/namespaces/NS/pods";

/// A pod update may change the images and a few fields, nothing else of the spec.
async fn pod_spec_updates_change_only_images(ground: Ground) {
    let env = env_on!(ground, "fid-pod", false);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}});
    create_pod(&env, pod).await;
    let image = json!({"spec": {"activeDeadlineSeconds": 600,
        "containers": [{"name": "c", "image": "busybox:2"}]}});
    let a = call(
        &env,
        "PATCH",
        &format!("{PODS}/p1"),
        &image,
        "application/strategic-merge-patch+json",
    )
    .await;
    assert_eq!(ok(&a)["spec"]["containers"][0]["image"], "busybox:2");
    let env_var = json!({"spec": {"containers": [{"name": "c", "image": "busybox:2",
        "env": [{"name": "A", "value": "1"}]}]}});
    let a = call(
        &env,
        "PATCH",
        &format!("{PODS}/p1"),
        &env_var,
        "application/strategic-merge-patch+json",
    )
    .await;
    assert_eq!((a.code, a.reason.as_str()), (422, "Invalid"), "{a:?}");
    // The real message goes on with a diff of Go structs, which the sandbox does not write.
    assert_eq!(
        a.message.lines().next().unwrap_or_default(),
        "Pod \"p1\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
    );
}

/// A pod whose volume needs a Secret that does not exist yet stays `Pending` (a kubelet's
/// ContainerCreating) and starts once the Secret is created: the simulated kubelet stands in for
/// a real one on both grounds, and it started such a pod at once.
async fn a_pod_waits_for_the_secret_its_volume_needs(ground: Ground) {
    use k8s_openapi::api::core::v1::Pod;
    let env = env_on!(ground, "fid-vol", false);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p3"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1",
            "volumeMounts": [{"name": "key", "mountPath": "/key"}]}],
            "volumes": [{"name": "key", "secret": {"secretName": "late"}}]}});
    create_pod(&env, pod).await;
    let pods: kube::Api<Pod> = env.api();
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    // Bound at once and started at once before: two seconds is many kubelet passes.
    let mut bound = false;
    for _ in 0..20 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let p = pods.get("p3").await.expect("the pod");
        bound |= p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        assert_ne!(
            phase(&p).as_deref(),
            Some("Running"),
            "started without its Secret"
        );
    }
    assert!(bound, "the pod was bound to the node");
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "late"},
        "data": {"k": "eA=="}});
    ok(&post(&env, "/api/v1/namespaces/NS/secrets", secret).await);
    let mut last = None;
    for _ in 0..100 {
        last = phase(&pods.get("p3").await.expect("the pod"));
        if last.as_deref() == Some("Running") {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the pod did not start once its Secret existed: phase {last:?}");
}

/// A bound pod cannot be bound again; a Binding must name the pod of the URL.
async fn binding_a_bound_pod_or_another_name_is_refused(ground: Ground) {
    let env = env_on!(ground, "fid-bind", false);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p2"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}});
    create_pod(&env, pod).await;
    let binding = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "elsewhere"}})
    };
    let a = post(&env, &format!("{PODS}/p2/binding"), binding("p3")).await;
    assert_eq!(
        (a.code, a.reason.as_str(), a.message.as_str()),
        (
            400,
            "BadRequest",
            "name in URL does not match name in Binding object"
        )
    );
    // The simulated nodes bind it (or this binding does, if it comes first).
    let _ = post(&env, &format!("{PODS}/p2/binding"), binding("p2")).await;
    let a = post(&env, &format!("{PODS}/p2/binding"), binding("p2")).await;
    assert_eq!((a.code, a.reason.as_str()), (409, "Conflict"), "{a:?}");
    assert!(
        a.message
            .starts_with("Operation cannot be fulfilled on pods/binding \"p2\": pod p2 is already assigned to node \""),
        "{a:?}"
    );
    let a = post(&env, &format!("{PODS}/nope/binding"), binding("nope")).await;
    assert_eq!(
        (a.code, a.message.as_str()),
        (404, "pods \"nope\" not found")
    );
}

/// A PUT of a custom resource must carry metadata.resourceVersion (a built-in's need not).
async fn a_custom_resource_put_needs_a_resource_version(ground: Ground) {
    let env = env_on!(ground, "fid-rv", false);
    let path = "/apis/habitat.sh/v1/namespaces/NS/habitats";
    let h = json!({"apiVersion": "habitat.sh/v1", "kind": "Habitat", "metadata": {"name": "h1"},
        "spec": {"image": "kinvolk/redis-hab", "count": 1, "service": {"name": "redis"}}});
    ok(&post(&env, path, h.clone()).await);
    let expected = "habitats.habitat.sh \"h1\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update";
    invalid(&put(&env, &format!("{path}/h1"), h.clone()).await, expected);
    invalid(&put(&env, &format!("{path}/h1/status"), h).await, expected);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
        "data": {"a": "1"}});
    ok(&post(&env, "/api/v1/namespaces/NS/configmaps", cm.clone()).await);
    ok(&put(&env, "/api/v1/namespaces/NS/configmaps/c", cm).await);
}

/// The data of an immutable ConfigMap or Secret does not change, nor does `immutable`.
async fn immutable_config_maps_and_secrets_stay(ground: Ground) {
    let env = env_on!(ground, "fid-imm", false);
    for (path, kind) in [
        ("/api/v1/namespaces/NS/configmaps", "ConfigMap"),
        ("/api/v1/namespaces/NS/secrets", "Secret"),
    ] {
        let data = if kind == "Secret" { "MQ==" } else { "1" };
        let obj = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "frozen"},
            "immutable": true, "data": {"a": data}});
        ok(&post(&env, path, obj).await);
        let other = if kind == "Secret" { "Mg==" } else { "2" };
        let a = merge(
            &env,
            &format!("{path}/frozen"),
            json!({"data": {"a": other}}),
        )
        .await;
        invalid(&a, &format!("{kind} \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"));
        let a = merge(&env, &format!("{path}/frozen"), json!({"immutable": false})).await;
        invalid(&a, &format!("{kind} \"frozen\" is invalid: immutable: Forbidden: field is immutable when `immutable` is set"));
        let labels = json!({"metadata": {"labels": {"x": "y"}}});
        ok(&merge(&env, &format!("{path}/frozen"), labels).await);
    }
}

/// A Service's cluster IP (headless `None` too) may not change; emptying it keeps it.
async fn a_service_keeps_its_cluster_ip(ground: Ground) {
    let env = env_on!(ground, "fid-svc", false);
    let path = "/api/v1/namespaces/NS/services";
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s1"},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}], "selector": {"a": "b"}}});
    ok(&post(&env, path, svc).await);
    for patch in [
        json!({"spec": {"clusterIP": "10.0.0.77", "clusterIPs": ["10.0.0.77"]}}),
        json!({"spec": {"clusterIP": "10.0.0.77"}}),
    ] {
        invalid(
            &merge(&env, &format!("{path}/s1"), patch).await,
            "Service \"s1\" is invalid: spec.clusterIPs[0]: Invalid value: [\"10.0.0.77\"]: may not change once set",
        );
    }
    let a = merge(
        &env,
        &format!("{path}/s1"),
        json!({"spec": {"clusterIP": ""}}),
    )
    .await;
    assert_eq!(ok(&a)["spec"]["clusterIP"], "None");
    assert_eq!(ok(&a)["spec"]["clusterIPs"], json!(["None"]));
}

const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Names are DNS subdomains (DNS labels for Services and StatefulSets); label keys and values
/// are checked.
async fn names_and_labels_are_validated(ground: Ground) {
    let env = env_on!(ground, "fid-names", false);
    let cms = "/api/v1/namespaces/NS/configmaps";
    let cm = |md: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": md});
    invalid(
        &post(&env, cms, cm(json!({"name": "Bad_Name"}))).await,
        &format!("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": {SUBDOMAIN}"),
    );
    let a = post(
        &env,
        "/api/v1/namespaces/NS/services",
        json!({"apiVersion": "v1",
        "kind": "Service", "metadata": {"name": "a.b"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    invalid(
        &a,
        "Service \"a.b\" is invalid: metadata.name: Invalid value: \"a.b\": must not contain dots",
    );
    invalid(
        &post(&env, STS, statefulset("a.b")).await,
        "StatefulSet.apps \"a.b\" is invalid: metadata.name: Invalid value: \"a.b\": must not contain dots",
    );
    invalid(
        &post(&env, STS, statefulset("Bad")).await,
        "StatefulSet.apps \"Bad\" is invalid: metadata.name: Invalid value: \"Bad\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    );
    let h = json!({"apiVersion": "habitat.sh/v1", "kind": "Habitat", "metadata": {"name": "Bad"},
        "spec": {"image": "x", "count": 1, "service": {"name": "redis"}}});
    invalid(
        &post(&env, "/apis/habitat.sh/v1/namespaces/NS/habitats", h).await,
        // Both the name check and the CRD's own rule on metadata.name answer, the name first.
        &format!("Habitat.habitat.sh \"Bad\" is invalid: [metadata.name: Invalid value: \"Bad\": {SUBDOMAIN}, <nil>: Invalid value: metadata.name must be a DNS-1035 label of at most 52 characters (lower-case letters, digits and '-', starting with a letter): it names the Habitat's Services, and the pods' label controller-revision-hash=<name>-<hash> has at most 63]"),
    );
    ok(&post(&env, cms, cm(json!({"generateName": "fine-"}))).await);
    invalid(
        &post(&env, cms, cm(json!({"name": "cm2", "labels": {"a": "not valid!"}}))).await,
        "ConfigMap \"cm2\" is invalid: metadata.labels: Invalid value: \"not valid!\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
    );
    invalid(
        &post(&env, cms, cm(json!({"name": "cm3", "labels": {"bad key!": "v"}}))).await,
        "ConfigMap \"cm3\" is invalid: metadata.labels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
    );
}

/// PodDisruptionBudgets, Leases and events.k8s.io Events are validated.
async fn budgets_leases_and_events_are_validated(ground: Ground) {
    let env = env_on!(ground, "fid-pdb", false);
    let pdbs = "/apis/policy/v1/namespaces/NS/poddisruptionbudgets";
    let pdb = |name: &str, spec: Value| {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"a": "b"}});
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name}, "spec": spec})
    };
    let a = post(
        &env,
        pdbs,
        pdb("b1", json!({"minAvailable": 1, "maxUnavailable": 1})),
    )
    .await;
    assert_eq!((a.code, a.reason.as_str()), (422, "Invalid"), "{a:?}");
    assert!(
        a.message
            .starts_with("PodDisruptionBudget.policy \"b1\" is invalid: spec: Invalid value: ")
            && a.message
                .ends_with(": minAvailable and maxUnavailable cannot be both set"),
        "{a:?}"
    );
    invalid(
        &post(&env, pdbs, pdb("b2", json!({"minAvailable": -1}))).await,
        "PodDisruptionBudget.policy \"b2\" is invalid: spec.minAvailable: Invalid value: -1: must be greater than or equal to 0",
    );
    invalid(
        &post(&env, pdbs, pdb("b3", json!({"maxUnavailable": "150%"}))).await,
        "PodDisruptionBudget.policy \"b3\" is invalid: spec.maxUnavailable: Invalid value: \"150%\": must not be greater than 100%",
    );
    ok(&post(&env, pdbs, pdb("b4", json!({"maxUnavailable": 1}))).await);
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "l1"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 0}});
    invalid(
        &post(&env, "/apis/coordination.k8s.io/v1/namespaces/NS/leases", lease).await,
        "Lease.coordination.k8s.io \"l1\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
    );
    let event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "e1"}, "reason": "R", "action": "A", "type": "Normal",
        "regarding": {"kind": "Pod", "name": "x", "namespace": env.namespace}});
    invalid(
        &post(&env, "/apis/events.k8s.io/v1/namespaces/NS/events", event).await,
        "Event \"e1\" is invalid: eventTime: Required value",
    );
}

/// A create in a namespace that does not exist (or no longer does) is refused by namespace
/// lifecycle admission with 404 about the namespace itself, not about the object: the operator
/// tells it apart from an object's own 404 by the details' kind (a late Event after the test's
/// namespace was deleted met this on the sandbox).
async fn a_create_in_a_missing_namespace_is_a_404_about_the_namespace(ground: Ground) {
    let env = env_on!(ground, "fid-gone", false);
    let gone = format!("{}-gone", env.namespace);
    let event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "e1"}, "reason": "R", "action": "A", "type": "Normal",
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "c",
        "reportingInstance": "i", "regarding": {"kind": "Pod", "name": "x", "namespace": gone}});
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}});
    for (path, body) in [
        ("/apis/events.k8s.io/v1/namespaces/NS-gone/events", event),
        ("/api/v1/namespaces/NS-gone/configmaps", config_map),
    ] {
        let a = post(&env, path, body).await;
        assert_eq!(
            (a.code, a.reason.as_str(), a.message.clone()),
            (404, "NotFound", format!("namespaces \"{gone}\" not found")),
            "{path}"
        );
        let status = a.status.expect("a refusal's Status");
        let d = status.details.as_ref().expect("details");
        assert_eq!(
            (d.kind.as_str(), d.group.as_str(), d.name.as_str()),
            ("namespaces", "", gone.as_str()),
            "{path}"
        );
        assert!(
            habitat_operator::error::is_namespace_terminating(&kube::Error::Api(status)),
            "{path}"
        );
    }
}

/// A list is paged by `limit` and `continue`: every page at most `limit` objects, in name
/// order, each but the last with a token for the next, and all of them with the first page's
/// resourceVersion. The sandbox answered every list whole, so a client's initial list (the
/// operator's caches list in pages of 100) came in one piece there and in pages on a real server.
async fn a_list_is_paged_by_limit_and_continue(ground: Ground) {
    let env = env_on!(ground, "fid-pages", false);
    let names: Vec<String> = (1..=5).map(|i| format!("c{i}")).collect();
    for name in &names {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"page": "yes"}}});
        ok(&post(&env, "/api/v1/namespaces/NS/configmaps", cm).await);
    }
    let list = "/api/v1/namespaces/NS/configmaps?labelSelector=page%3Dyes&limit=2";
    let (mut seen, mut pages, mut token, mut first_rv) = (vec![], 0, None::<String>, None);
    loop {
        let path = match &token {
            Some(t) => format!("{list}&continue={t}"),
            None => list.to_string(),
        };
        let a = get(&env, &path).await;
        let body = ok(&a);
        pages += 1;
        let items = body["items"].as_array().expect("items");
        assert!(items.len() <= 2, "page {pages}: {body}");
        seen.extend(
            items
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string()),
        );
        let rv = body["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
        assert!(rv.is_some(), "{body}");
        match &first_rv {
            None => first_rv = rv,
            Some(first) => assert_eq!(rv.as_ref(), Some(first), "page {pages}"),
        }
        token = body["metadata"]["continue"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        if token.is_none() || pages > 10 {
            break;
        }
    }
    assert_eq!(seen, names);
    assert!(pages >= 3, "{pages} pages");
    let bad = get(
        &env,
        "/api/v1/namespaces/NS/configmaps?limit=2&continue=not-a-token!",
    )
    .await;
    assert_eq!(
        (bad.code, bad.reason.as_str()),
        (400, "BadRequest"),
        "{bad:?}"
    );
}

/// A watch of one resource type from a resourceVersion that more than 10,000 changes of another
/// type have passed is served. kube-apiserver keeps each type's recent changes in a window of
/// its own (75 s of them, up to 102,400). The sandbox kept one window of 10,000 changes for
/// every type together and answered such a watch with 410 Expired: at N = 5000 in the scale
/// benchmark, the simulated nodes' watches of pods and ConfigMaps expired and relisted.
async fn a_watch_is_not_expired_by_other_types_changes(ground: Ground) {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::{PostParams, WatchEvent, WatchParams};
    let env = env_on!(ground, "fid-window", false);
    let secrets: kube::Api<Secret> = env.api();
    let secret = |name: &str| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("a Secret")
    };
    let before = secrets
        .create(&PostParams::default(), &secret("before"))
        .await
        .expect("create");
    let rv = before.metadata.resource_version.expect("a resourceVersion");
    let config_maps: kube::Api<ConfigMap> = env.api();
    futures::stream::iter(0..10_001)
        .map(|i| {
            let config_maps = config_maps.clone();
            async move {
                let cm: ConfigMap =
                    serde_json::from_value(json!({"metadata": {"name": format!("w{i}")}}))
                        .expect("a ConfigMap");
                config_maps.create(&PostParams::default(), &cm).await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .expect("10,001 ConfigMaps");
    secrets
        .create(&PostParams::default(), &secret("after"))
        .await
        .expect("create");
    let events: Vec<WatchEvent<Secret>> = secrets
        .watch(&WatchParams::default().timeout(2), &rv)
        .await
        .expect("a watch")
        .try_collect()
        .await
        .expect("its events");
    let seen: Vec<String> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(s) => format!("ADDED {}", s.metadata.name.as_deref().unwrap_or("")),
            WatchEvent::Error(e) => format!("ERROR {} {}", e.code, e.reason),
            other => format!("{other:?}"),
        })
        .filter(|e| !e.starts_with("Bookmark"))
        .collect();
    assert_eq!(seen, vec!["ADDED after".to_string()]);
}

const CMS: &str = "/api/v1/namespaces/NS/configmaps";

fn labelled(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": {"x": "1"}})
}

async fn apply_as_m(env: &Env, name: &str, body: Value) -> Value {
    let path = format!("{CMS}/{name}?fieldManager=m&force=true");
    ok(&call(env, "PATCH", &path, &body, "application/apply-patch+yaml").await).clone()
}

fn labels(o: &Value) -> Vec<String> {
    o["metadata"]["labels"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// A create records its fields under its manager's `Update` entry, which an apply by the same
/// manager does not remove.
async fn a_created_field_stays_after_an_apply_by_its_manager(ground: Ground) {
    let Some(env) = Env::start_with(ground, "fidelity-owners", false).await else {
        return;
    };
    let created = ok(&post(
        &env,
        &format!("{CMS}?fieldManager=m"),
        labelled("c", json!({"a": "1", "b": "2"})),
    )
    .await)
    .clone();
    assert!(created["metadata"]["managedFields"].is_array(), "{created}");
    let applied = apply_as_m(&env, "c", labelled("c", json!({"a": "1"}))).await;
    assert_eq!(
        labels(&applied),
        ["a", "b"],
        "an apply alone keeps a created field"
    );
}

/// What each entry of an object's `managedFields` owns: (manager, operation, subresource, the
/// paths of its fields, a node that is itself a member (`.`) by its own path), in order.
fn owners(o: &Value) -> Vec<(String, String, String, Vec<String>)> {
    fn paths(fields: &Value, at: &str, out: &mut Vec<String>) {
        for (k, v) in fields.as_object().into_iter().flatten() {
            if k == "." {
                out.push(at.to_string());
                continue;
            }
            let here = format!("{at}.{}", k.strip_prefix("f:").unwrap_or(k));
            match v.as_object() {
                Some(m) if !m.is_empty() => paths(v, &here, out),
                _ => out.push(here),
            }
        }
    }
    let mut out: Vec<_> = o["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut fields = Vec::new();
            paths(&e["fieldsV1"], "", &mut fields);
            fields.sort();
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("manager"), s("operation"), s("subresource"), fields)
        })
        .collect();
    out.sort();
    out
}

/// An owner of `paths` by non-apply writes (an `Update` entry).
fn updater(
    manager: &str,
    subresource: &str,
    paths: &[&str],
) -> (String, String, String, Vec<String>) {
    (
        manager.into(),
        "Update".into(),
        subresource.into(),
        paths.iter().map(|p| p.to_string()).collect(),
    )
}

/// Every non-apply write records what it set under its manager's `Update` entry (one per
/// subresource), and takes what it changes or removes from every other entry: a merge patch, a
/// PUT whose manager is its User-Agent's first word, a write of the status. A write that
/// changes nothing records nothing, and `managedFields: [{}]` clears them. The sandbox recorded
/// the create's entry alone, so a field another writer changed stayed its creator's.
async fn every_write_records_its_manager_and_takes_what_it_changes(ground: Ground) {
    let env = env_on!(ground, "fid-updaters", false);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "w", "labels": {"l": "1"}}, "data": {"x": "1", "y": "1"}});
    let created = post(&env, &format!("{CMS}?fieldManager=a"), body).await;
    assert_eq!(
        owners(ok(&created)),
        [updater(
            "a",
            "",
            &[
                ".data",
                ".data.x",
                ".data.y",
                ".metadata.labels",
                ".metadata.labels.l"
            ]
        )],
        "a map the create added is named itself too"
    );
    let b = format!("{CMS}/w?fieldManager=b");
    let patched = merge(&env, &b, json!({"data": {"x": "2", "y": null, "z": "3"}})).await;
    assert_eq!(
        owners(ok(&patched)),
        [
            updater(
                "a",
                "",
                &[".data", ".metadata.labels", ".metadata.labels.l"]
            ),
            updater("b", "", &[".data.x", ".data.z"]),
        ],
        "b took x, which it changed, and y, which it removed"
    );
    let again = merge(&env, &b, json!({"data": {"w": "4"}})).await;
    assert_eq!(
        owners(ok(&again))[1],
        updater("b", "", &[".data.w", ".data.x", ".data.z"]),
        "one entry per manager"
    );
    let mut live = ok(&get(&env, &format!("{CMS}/w")).await).clone();
    live["metadata"]["labels"]["l"] = json!("2");
    let put = call_as(
        &env,
        Some("fid-tester/1.0 (linux/amd64) test"),
        "PUT",
        &format!("{CMS}/w"),
        &live,
        "application/json",
    )
    .await;
    assert_eq!(
        owners(ok(&put)),
        [
            updater("a", "", &[".data", ".metadata.labels"]),
            updater("b", "", &[".data.w", ".data.x", ".data.z"]),
            updater("fid-tester", "", &[".metadata.labels.l"]),
        ],
        "the manager of a PUT without one is its User-Agent's first word"
    );
    let same = merge(
        &env,
        &format!("{CMS}/w?fieldManager=c"),
        json!({"data": {"x": "2"}}),
    )
    .await;
    assert_eq!(
        owners(ok(&same)),
        owners(ok(&put)),
        "a write that changes nothing"
    );

    let habitats = "/apis/habitat.sh/v1/namespaces/NS/habitats";
    let h = json!({"apiVersion": "habitat.sh/v1", "kind": "Habitat", "metadata": {"name": "h"},
        "spec": {"image": "kinvolk/redis-hab", "count": 1, "service": {"name": "redis"}}});
    ok(&post(&env, &format!("{habitats}?fieldManager=a"), h).await);
    let status = format!("{habitats}/h/status?fieldManager=s");
    ok(&merge(&env, &status, json!({"status": {"leader": "h-0"}})).await);
    let labelled = merge(
        &env,
        &format!("{habitats}/h?fieldManager=s"),
        json!({"metadata": {"labels": {"k": "v"}}}),
    )
    .await;
    assert_eq!(
        owners(ok(&labelled)),
        [
            updater(
                "a",
                "",
                &[
                    ".spec",
                    ".spec.count",
                    ".spec.image",
                    ".spec.service",
                    ".spec.service.group",
                    ".spec.service.name",
                    ".spec.service.topology",
                    ".spec.service.updateCondition",
                    ".spec.service.updateStrategy",
                ]
            ),
            updater("s", "", &[".metadata.labels", ".metadata.labels.k"]),
            updater(
                "s",
                "status",
                &[
                    ".status",
                    ".status.leader",
                    ".status.readyReplicas",
                    ".status.replicas"
                ]
            ),
        ],
        "the defaults of decoding are the writer's"
    );
    let reset = merge(
        &env,
        &format!("{habitats}/h?fieldManager=s"),
        json!({"metadata": {"managedFields": [{}]}}),
    )
    .await;
    ok(&reset);
    let cleared = ok(&get(&env, &format!("{habitats}/h")).await).clone();
    assert_eq!(owners(&cleared), [], "{cleared}");
}

/// The `managedFields` of each entry of an answer: (manager, operation, time), in order.
fn entry_times(o: &Value) -> Vec<(String, String, Option<String>)> {
    o["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (
                s("manager"),
                s("operation"),
                e["time"].as_str().map(String::from),
            )
        })
        .collect()
}

/// An object's `managedFields` are part of it: a list's items and a watch's events carry them
/// as a GET does, and a write that changes only them is a write. An apply of values the object
/// already holds, by a manager new to it, writes its `Apply` entry without a time; an apply
/// that changes nothing writes nothing and keeps its entry's time. `Apply` entries come first,
/// by time (none first), then by manager. The sandbox showed them in GETs and write answers
/// alone, dropped such an apply (the object unchanged, its entry unseen) and gave every `Apply`
/// entry the time of the answer.
async fn managed_fields_are_part_of_the_object(ground: Ground) {
    use futures::TryStreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{ListParams, WatchEvent, WatchParams};
    let env = env_on!(ground, "fid-stamped", false);
    let rv = |o: &Value| {
        o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let created = ok(&post(
        &env,
        &format!("{CMS}?fieldManager=maker"),
        labelled("s", json!({"a": "1"})),
    )
    .await)
    .clone();
    let apply = |manager: &'static str, labels: Value| {
        let env = &env;
        async move {
            let path = format!("{CMS}/s?fieldManager={manager}");
            let body = labelled("s", labels);
            ok(&call(env, "PATCH", &path, &body, "application/apply-patch+yaml").await).clone()
        }
    };
    let taken = apply("applier", json!({"a": "1"})).await;
    assert_ne!(
        rv(&taken),
        rv(&created),
        "a write of managedFields alone is a write"
    );
    assert_eq!(
        entry_times(&taken)[0],
        ("applier".to_string(), "Apply".to_string(), None),
        "an apply that changed nothing has no time: {taken}"
    );
    let changed = apply("applier", json!({"a": "1", "b": "2"})).await;
    let time = entry_times(&changed)[0].2.clone();
    assert!(
        time.is_some(),
        "an apply that changed the object has its time: {changed}"
    );
    // A second passes: an entry given the time of the answer would show it.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let again = apply("applier", json!({"a": "1", "b": "2"})).await;
    assert_eq!(
        rv(&again),
        rv(&changed),
        "the same apply again writes nothing"
    );
    assert_eq!(
        entry_times(&again),
        entry_times(&changed),
        "and keeps the entry's time"
    );
    let other = apply("other", json!({"a": "1"})).await;
    let order: Vec<(String, String)> = entry_times(&other)
        .into_iter()
        .map(|(m, o, _)| (m, o))
        .collect();
    let pair = |m: &str, o: &str| (m.to_string(), o.to_string());
    assert_eq!(
        order,
        [
            pair("other", "Apply"),
            pair("applier", "Apply"),
            pair("maker", "Update")
        ],
        "Apply entries first, without a time first: {other}"
    );

    let got = ok(&get(&env, &format!("{CMS}/s")).await).clone();
    assert_eq!(
        got["metadata"]["managedFields"],
        other["metadata"]["managedFields"]
    );
    let listed = ok(&get(&env, CMS).await).clone();
    let item = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["metadata"]["name"] == "s")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        item["metadata"]["managedFields"], got["metadata"]["managedFields"],
        "a list's item carries them: {listed}"
    );
    let config_maps: kube::Api<ConfigMap> = env.api();
    let page = config_maps
        .list(&ListParams::default())
        .await
        .expect("a list");
    let typed = page
        .items
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some("s"));
    assert_eq!(
        typed
            .and_then(|c| c.metadata.managed_fields.as_ref())
            .map(Vec::len),
        Some(3),
        "{page:?}"
    );
    let events: Vec<WatchEvent<ConfigMap>> = config_maps
        .watch(&WatchParams::default().timeout(1), &rv(&created))
        .await
        .expect("a watch")
        .try_collect()
        .await
        .expect("its events");
    let seen: Vec<(String, usize)> = events
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Modified(c) => Some((
                c.metadata.resource_version.clone().unwrap_or_default(),
                c.metadata.managed_fields.as_ref().map_or(0, Vec::len),
            )),
            _ => None,
        })
        .collect();
    let expected = [(rv(&taken), 2), (rv(&changed), 2), (rv(&other), 3)];
    assert_eq!(
        seen, expected,
        "each event carries the entries of its version"
    );
}

/// kube-controller-manager's writes are its own in `managedFields`: a StatefulSet's
/// ControllerRevision carries its create's `Update` entry, and the StatefulSet its status
/// entry, beside the creator's; the pods are named from a prefix (`generateName`). The
/// sandbox's StatefulSet controller recorded no entry and gave no prefix. (A real server's pod
/// also carries the controller's create entry; the sandbox leaves it out for its cost,
/// `sim::statefulset`.)
async fn a_statefulsets_pods_and_status_are_the_controller_managers(ground: Ground) {
    use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
    use k8s_openapi::api::core::v1::Pod;
    let env = env_on!(ground, "fid-kcm", false);
    let mut sts = statefulset("k");
    sts["spec"]["replicas"] = json!(1);
    let created = post(&env, &format!("{STS}?fieldManager=op"), sts).await;
    let uid = ok(&created)["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kcm = "kube-controller-manager";
    let pods: kube::Api<Pod> = env.api();
    let statefulsets: kube::Api<StatefulSet> = env.api();
    let entry_of = |o: &Value, manager: &str, subresource: &str| {
        owners(o)
            .into_iter()
            .find(|(m, op, sub, _)| m == manager && op == "Update" && sub == subresource)
            .map(|(_, _, _, paths)| paths)
    };
    let status_paths = [
        ".status.availableReplicas",
        ".status.collisionCount",
        ".status.currentReplicas",
        ".status.currentRevision",
        ".status.observedGeneration",
        ".status.readyReplicas",
        ".status.replicas",
        ".status.updateRevision",
        ".status.updatedReplicas",
    ];
    let status_paths: Vec<String> = status_paths.iter().map(|p| p.to_string()).collect();
    // Until the pod is ready and counted available.
    let mut pod = Value::Null;
    let mut status = None;
    for _ in 0..150 {
        if let Ok(p) = pods.get("k-0").await {
            pod = serde_json::to_value(&p).unwrap_or_default();
        }
        let s = statefulsets.get("k").await.expect("the StatefulSet");
        let s = serde_json::to_value(&s).unwrap_or_default();
        status = entry_of(&s, kcm, "status");
        if !pod.is_null() && status.as_ref() == Some(&status_paths) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(
        pod["metadata"]["generateName"], "k-",
        "a StatefulSet's pods are named from a prefix"
    );
    assert_eq!(
        status,
        Some(status_paths),
        "the StatefulSet's status is the controller's"
    );
    let s = serde_json::to_value(statefulsets.get("k").await.expect("the StatefulSet"))
        .unwrap_or_default();
    let managers: Vec<(String, String, String)> = owners(&s)
        .into_iter()
        .map(|(m, op, sub, _)| (m, op, sub))
        .collect();
    let who = |m: &str, sub: &str| (m.to_string(), "Update".to_string(), sub.to_string());
    assert_eq!(managers, [who(kcm, "status"), who("op", "")]);
    let revisions: kube::Api<ControllerRevision> = env.api();
    let listed = revisions.list(&Default::default()).await.expect("a list");
    let revision = serde_json::to_value(listed.items.first()).unwrap_or_default();
    let managers: Vec<String> = owners(&revision).into_iter().map(|(m, ..)| m).collect();
    assert_eq!(managers, [kcm], "{revision}");
    // An owner reference is one field.
    let owner: Vec<String> = entry_of(&revision, kcm, "")
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.starts_with(".metadata.ownerReferences"))
        .map(|p| p.replace(&uid, "UID"))
        .collect();
    assert_eq!(
        owner,
        [
            ".metadata.ownerReferences",
            ".metadata.ownerReferences.k:{\"uid\":\"UID\"}"
        ],
        "{revision}"
    );
}

/// An object keeps at most ten `Update` entries: beyond them, the oldest are merged into one
/// entry named `ancient-changes`, which later ones join.
async fn beyond_ten_update_entries_the_oldest_merge_into_ancient_changes(ground: Ground) {
    let env = env_on!(ground, "fid-ancient", false);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "many", "labels": {"l00": "x"}}});
    ok(&post(&env, &format!("{CMS}?fieldManager=m00"), body).await);
    let env = &env;
    let label = |i: usize| async move {
        let path = format!("{CMS}/many?fieldManager=m{i:02}");
        let patch = json!({"metadata": {"labels": {format!("l{i:02}"): "x"}}});
        ok(&merge(env, &path, patch).await).clone()
    };
    for i in 1..10 {
        label(i).await;
    }
    let ten = owners(&label(10).await);
    let updater_of = |i: usize| {
        let l = format!(".metadata.labels.l{i:02}");
        updater(&format!("m{i:02}"), "", &[l.as_str()])
    };
    let mut expected = vec![updater(
        "ancient-changes",
        "",
        &[
            ".metadata.labels",
            ".metadata.labels.l00",
            ".metadata.labels.l01",
        ],
    )];
    expected.extend((2..=10).map(updater_of));
    assert_eq!(ten, expected, "m00's and m01's entries merged");
    let eleven = owners(&label(11).await);
    expected[0] = updater(
        "ancient-changes",
        "",
        &[
            ".metadata.labels",
            ".metadata.labels.l00",
            ".metadata.labels.l01",
            ".metadata.labels.l02",
        ],
    );
    expected.remove(1);
    expected.push(updater_of(11));
    assert_eq!(eleven, expected, "m02's entry joined them");
}

/// A forced apply that changes a field another entry owns takes it: the create's entry stops
/// naming it, so the next apply that drops it removes it.
async fn a_forced_apply_takes_the_fields_it_changes(ground: Ground) {
    let Some(env) = Env::start_with(ground, "fidelity-take", false).await else {
        return;
    };
    let created = labelled("t", json!({"a": "1", "b": "2"}));
    ok(&post(&env, &format!("{CMS}?fieldManager=m"), created).await);
    let changed = apply_as_m(&env, "t", labelled("t", json!({"a": "9", "b": "2"}))).await;
    let update = changed["metadata"]["managedFields"]
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e["operation"] == "Update"))
        .map(|e| e["fieldsV1"]["f:metadata"]["f:labels"].clone())
        .expect("the create's entry stays: it still owns b");
    assert!(update.get("f:a").is_none(), "{update}");
    assert!(update.get("f:b").is_some(), "{update}");
    let dropped = apply_as_m(&env, "t", labelled("t", json!({"b": "2"}))).await;
    assert_eq!(labels(&dropped), ["b"], "{dropped}");
}

/// An apply without `force` is refused (409 Conflict, one cause per field) when it changes a
/// field another manager owns, and changes nothing; one that sets the owner's value shares the
/// field instead; with `force` it takes the field. The answers are the real server's.
async fn an_apply_that_changes_anothers_field_conflicts_unless_forced(ground: Ground) {
    let Some(env) = Env::start_with(ground, "fidelity-conflict", false).await else {
        return;
    };
    let apply_as = |manager: &'static str, labels: Value, force: bool| {
        let env = &env;
        async move {
            let path = format!("{CMS}/k?fieldManager={manager}&force={force}");
            call(
                env,
                "PATCH",
                &path,
                &labelled("k", labels),
                "application/apply-patch+yaml",
            )
            .await
        }
    };
    ok(&apply_as("m", json!({"a": "1", "b": "2"}), false).await);
    let shared = apply_as("n", json!({"a": "1", "c": "3"}), false).await;
    assert_eq!(
        labels(ok(&shared)),
        ["a", "b", "c"],
        "the same value is shared"
    );

    let conflicts = |a: &Answer| -> Vec<(String, String, String)> {
        let causes = a.status.as_ref().and_then(|s| s.details.as_ref());
        causes
            .map(|d| d.causes.iter())
            .into_iter()
            .flatten()
            .map(|c| (c.reason.clone(), c.message.clone(), c.field.clone()))
            .collect()
    };
    let one = apply_as("n", json!({"a": "9", "c": "3"}), false).await;
    assert_eq!(
        (one.code, one.reason.as_str(), one.message.as_str()),
        (
            409,
            "Conflict",
            r#"Apply failed with 1 conflict: conflict with "m": .metadata.labels.a"#
        ),
        "{one:?}"
    );
    assert_eq!(
        conflicts(&one),
        [(
            "FieldManagerConflict".to_string(),
            r#"conflict with "m""#.to_string(),
            ".metadata.labels.a".to_string()
        )]
    );
    let two = apply_as("n", json!({"a": "9", "b": "8", "c": "3"}), false).await;
    assert_eq!(
        (two.code, two.message.as_str()),
        (
            409,
            "Apply failed with 2 conflicts: conflicts with \"m\":\n- .metadata.labels.a\n- .metadata.labels.b"
        ),
        "{two:?}"
    );
    let unchanged = ok(&get(&env, &format!("{CMS}/k")).await).clone();
    assert_eq!(unchanged["metadata"]["labels"]["a"], "1", "{unchanged}");

    // A field a create set belongs to the create's manager, an `Update` entry.
    let created = labelled("u", json!({"x": "1"}));
    ok(&post(&env, &format!("{CMS}?fieldManager=u"), created).await);
    let path = format!("{CMS}/u?fieldManager=n&force=false");
    let over = call(
        &env,
        "PATCH",
        &path,
        &labelled("u", json!({"x": "2"})),
        "application/apply-patch+yaml",
    )
    .await;
    assert_eq!(
        (over.code, over.reason.as_str(), over.message.as_str()),
        (
            409,
            "Conflict",
            r#"Apply failed with 1 conflict: conflict with "u" using v1: .metadata.labels.x"#
        ),
        "{over:?}"
    );

    let forced = apply_as("n", json!({"a": "9", "c": "3"}), true).await;
    assert_eq!(ok(&forced)["metadata"]["labels"]["a"], "9", "{forced:?}");
}

/// A write's options are checked before its body, and a refusal changes nothing: `force` on a
/// patch that is no apply (`false` too), an apply without a `fieldManager`, a `fieldManager`
/// too long or with a control character, an unknown `dryRun`. The answers are the real
/// server's.
async fn a_writes_options_are_checked_before_its_body(ground: Ground) {
    let Some(env) = Env::start_with(ground, "fidelity-options", false).await else {
        return;
    };
    ok(&post(&env, CMS, labelled("o", json!({"a": "1"}))).await);
    let relabel = json!({"metadata": {"labels": {"a": "2"}}});
    for force in ["true", "false"] {
        invalid(
            &merge(&env, &format!("{CMS}/o?force={force}"), relabel.clone()).await,
            r#"PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch"#,
        );
    }
    let unnamed = call(
        &env,
        "PATCH",
        &format!("{CMS}/o"),
        &labelled("o", json!({"a": "2"})),
        "application/apply-patch+yaml",
    )
    .await;
    invalid(
        &unnamed,
        r#"PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch"#,
    );
    let long = "m".repeat(129);
    let both = merge(
        &env,
        &format!("{CMS}/o?fieldManager={long}&dryRun=Nope"),
        relabel.clone(),
    )
    .await;
    invalid(
        &both,
        r#"PatchOptions.meta.k8s.io "" is invalid: [fieldManager: Too long: may not be more than 128 bytes, dryRun: Unsupported value: ["Nope"]: supported values: "All"]"#,
    );
    let reasons: Vec<String> = both
        .status
        .as_ref()
        .and_then(|s| s.details.as_ref())
        .map(|d| d.causes.iter().map(|c| c.reason.clone()).collect())
        .unwrap_or_default();
    assert_eq!(
        reasons,
        ["FieldValueTooLong", "FieldValueNotSupported"],
        "{both:?}"
    );
    // Checked before the body is decoded: this one is no JSON at all.
    let tabbed = call(
        &env,
        "POST",
        &format!("{CMS}?fieldManager=a%09b"),
        &json!("not an object"),
        "application/json",
    )
    .await;
    invalid(
        &tabbed,
        r#"CreateOptions.meta.k8s.io "" is invalid: fieldManager: Invalid value: "a\tb": invalid character U+0009 (at position 1)"#,
    );
    invalid(
        &put(
            &env,
            &format!("{CMS}/o?dryRun=x"),
            labelled("o", json!({"a": "3"})),
        )
        .await,
        r#"UpdateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["x"]: supported values: "All""#,
    );
    let unchanged = ok(&get(&env, &format!("{CMS}/o")).await).clone();
    assert_eq!(unchanged["metadata"]["labels"]["a"], "1", "{unchanged}");
    // The same writes with fit options pass.
    ok(&merge(
        &env,
        &format!("{CMS}/o?fieldManager=m&dryRun=All"),
        relabel.clone(),
    )
    .await);
    let patched = ok(&merge(&env, &format!("{CMS}/o?fieldManager=m"), relabel).await).clone();
    assert_eq!(patched["metadata"]["labels"]["a"], "2", "{patched}");
}

/// A delete's options are checked before the object is looked up: an unknown
/// `propagationPolicy`, one beside the deprecated `orphanDependents`, an unknown `dryRun`. A
/// delete of a collection with `dryRun=All` deletes nothing. The answers are the real server's.
async fn a_deletes_options_are_checked_before_the_delete(ground: Ground) {
    let Some(env) = Env::start_with(ground, "fidelity-delete-options", false).await else {
        return;
    };
    ok(&post(&env, CMS, labelled("d", json!({"a": "1"}))).await);
    let delete = |path: String, body: Value| {
        let env = &env;
        async move { call(env, "DELETE", &path, &body, "application/json").await }
    };
    invalid(
        &delete(format!("{CMS}/d?propagationPolicy=Bogus"), Value::Null).await,
        r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Bogus": supported values: "Foreground", "Background", "Orphan", "nil""#,
    );
    // Checked before the lookup: this ConfigMap does not exist.
    invalid(
        &delete(format!("{CMS}/missing?dryRun=x"), Value::Null).await,
        r#"DeleteOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["x"]: supported values: "All""#,
    );
    let both = json!({"kind": "DeleteOptions", "apiVersion": "v1",
        "propagationPolicy": "Orphan", "orphanDependents": true});
    invalid(
        &delete(format!("{CMS}/d"), both).await,
        r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Orphan": orphanDependents and deletionPropagation cannot be both set"#,
    );
    let dry =
        ok(&delete(format!("{CMS}?dryRun=All&labelSelector=a%3D1"), Value::Null).await).clone();
    assert_eq!(dry["items"].as_array().map(Vec::len), Some(1), "{dry}");
    let kept = get(&env, &format!("{CMS}/d")).await;
    assert_eq!(ok(&kept)["metadata"]["name"], "d", "a dry run deleted it");
    ok(&delete(format!("{CMS}/d?propagationPolicy=Foreground"), Value::Null).await);
}

/// A list's and a watch's options are checked: `resourceVersionMatch` needs a
/// `resourceVersion` (not `0` for `Exact`) and a known value, a list takes no
/// `sendInitialEvents`, and a watch takes `resourceVersionMatch` only beside it. The answers
/// are the real server's.
async fn a_lists_options_are_checked(ground: Ground) {
    let Some(env) = Env::start_with(ground, "fidelity-list-options", false).await else {
        return;
    };
    let refused = [
        (
            "resourceVersionMatch=NotOlderThan",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
        (
            "resourceVersionMatch=Exact&resourceVersion=0",
            r#"resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0""#,
        ),
        (
            "resourceVersionMatch=Bogus&resourceVersion=1",
            r#"resourceVersionMatch: Unsupported value: "Bogus": supported values: "Exact", "NotOlderThan", """#,
        ),
        (
            "sendInitialEvents=true",
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
        ),
        (
            "watch=true&resourceVersionMatch=NotOlderThan",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ),
    ];
    for (query, cause) in refused {
        invalid(
            &get(&env, &format!("{CMS}?{query}")).await,
            &format!(r#"ListOptions.meta.k8s.io "" is invalid: {cause}"#),
        );
    }
    ok(&get(
        &env,
        &format!("{CMS}?resourceVersion=0&resourceVersionMatch=NotOlderThan"),
    )
    .await);
}

const SVCS: &str = "/api/v1/namespaces/NS/services";

/// A headless Service with ports named `name` on `port`, and `appProtocol` where given.
fn with_ports(ports: &[(&str, u16, Option<&str>)]) -> Value {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(name, port, protocol)| match protocol {
            Some(p) => json!({"name": name, "port": port, "appProtocol": p}),
            None => json!({"name": name, "port": port}),
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"clusterIP": "None", "selector": {"a": "b"}, "ports": ports}})
}

fn ports_of(o: &Value) -> Vec<(String, Option<String>)> {
    o["spec"]["ports"]
        .as_array()
        .map(|ports| {
            ports
                .iter()
                .map(|p| {
                    let name = p["name"].as_str().unwrap_or_default().to_string();
                    (name, p["appProtocol"].as_str().map(String::from))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A Service's ports are a list-map keyed by port and protocol: an apply merges them item by
/// item, in structured-merge-diff's order, leaves the items another entry owns (a create's), and
/// removes what it alone set before. Lists the sandbox once replaced whole.
async fn an_apply_merges_a_list_map_item_by_item(ground: Ground) {
    let Some(env) = Env::start_with(ground, "fidelity-lists", false).await else {
        return;
    };
    let path = format!("{SVCS}/s?fieldManager=m&force=true");
    let apply = |body: Value| {
        let (env, path) = (&env, &path);
        async move { ok(&call(env, "PATCH", path, &body, "application/apply-patch+yaml").await).clone() }
    };
    let created = with_ports(&[("a", 80, None), ("b", 81, None)]);
    ok(&post(&env, &format!("{SVCS}?fieldManager=m"), created).await);
    let s = |name: &str, protocol: Option<&str>| (name.to_string(), protocol.map(String::from));

    let merged = apply(with_ports(&[("a", 80, Some("http"))])).await;
    assert_eq!(
        ports_of(&merged),
        [s("a", Some("http")), s("b", None)],
        "a merged, b kept: the create owns it"
    );
    let reordered = apply(with_ports(&[("c", 82, None), ("a", 80, Some("http"))])).await;
    assert_eq!(
        ports_of(&reordered),
        [s("c", None), s("a", Some("http")), s("b", None)],
        "the applied items in their order, b where it stood"
    );
    let dropped = apply(with_ports(&[("a", 80, None)])).await;
    assert_eq!(
        ports_of(&dropped),
        [s("a", None), s("b", None)],
        "c and a's appProtocol were the apply's alone"
    );
}

/// A label selector (`+structType=atomic`: a StatefulSet's, a PodDisruptionBudget's) and a
/// Service's selector (`+mapType=atomic`) are one field each: a field set names the selector, not its labels, and a forced apply of
/// another selector replaces it whole and takes it. The sandbox named each label, and merged
/// an applied selector into the live one.
async fn a_selector_is_one_field(ground: Ground) {
    let env = env_on!(ground, "fid-selector", false);
    let selector_paths = |o: &Value, manager: &str| -> Vec<String> {
        owners(o)
            .into_iter()
            .filter(|(m, ..)| m == manager)
            .flat_map(|(.., paths)| paths)
            .filter(|p| p.starts_with(".spec.selector"))
            .collect()
    };
    let sts = ok(&post(
        &env,
        &format!("{STS}?fieldManager=maker"),
        statefulset("sel"),
    )
    .await)
    .clone();
    assert_eq!(selector_paths(&sts, "maker"), [".spec.selector"], "{sts}");
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "p"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "sel"}}}});
    let pdb = ok(&post(
        &env,
        "/apis/policy/v1/namespaces/NS/poddisruptionbudgets?fieldManager=maker",
        pdb,
    )
    .await)
    .clone();
    assert_eq!(selector_paths(&pdb, "maker"), [".spec.selector"], "{pdb}");

    let svc = ok(&post(
        &env,
        &format!("{SVCS}?fieldManager=maker"),
        with_ports(&[("a", 80, None)]),
    )
    .await)
    .clone();
    assert_eq!(selector_paths(&svc, "maker"), [".spec.selector"], "{svc}");
    let mut body = with_ports(&[("a", 80, None)]);
    body["spec"]["selector"] = json!({"c": "d"});
    let applied = ok(&call(
        &env,
        "PATCH",
        &format!("{SVCS}/s?fieldManager=applier&force=true"),
        &body,
        "application/apply-patch+yaml",
    )
    .await)
    .clone();
    assert_eq!(
        applied["spec"]["selector"],
        json!({"c": "d"}),
        "the applied selector replaces the live one: {applied}"
    );
    assert_eq!(selector_paths(&applied, "applier"), [".spec.selector"]);
    assert_eq!(
        selector_paths(&applied, "maker"),
        Vec::<String>::new(),
        "the apply took the selector: {applied}"
    );
}

on_both_grounds!(
    a_selector_is_one_field,
    a_statefulsets_pods_and_status_are_the_controller_managers,
    managed_fields_are_part_of_the_object,
    beyond_ten_update_entries_the_oldest_merge_into_ancient_changes,
    every_write_records_its_manager_and_takes_what_it_changes,
    a_lists_options_are_checked,
    a_deletes_options_are_checked_before_the_delete,
    a_writes_options_are_checked_before_its_body,
    an_apply_that_changes_anothers_field_conflicts_unless_forced,
    a_forced_apply_takes_the_fields_it_changes,
    an_apply_merges_a_list_map_item_by_item,
    a_created_field_stays_after_an_apply_by_its_manager,
    a_watch_is_not_expired_by_other_types_changes,
    a_list_is_paged_by_limit_and_continue,
    statefulset_spec_is_immutable_but_for_a_few_fields,
    a_create_in_a_missing_namespace_is_a_404_about_the_namespace,
    pod_spec_updates_change_only_images,
    a_pod_waits_for_the_secret_its_volume_needs,
    binding_a_bound_pod_or_another_name_is_refused,
    a_custom_resource_put_needs_a_resource_version,
    immutable_config_maps_and_secrets_stay,
    a_service_keeps_its_cluster_ip,
    names_and_labels_are_validated,
    budgets_leases_and_events_are_validated,
);
