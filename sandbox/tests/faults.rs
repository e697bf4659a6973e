//! Injected faults over HTTP: what a client sees of each.

mod common;

use common::*;
use habitat_sandbox::{Faults, Options, Sandbox};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CM: &str = "/api/v1/namespaces/default/configmaps";

async fn with_faults(faults: &str) -> Sandbox {
    Sandbox::start(Options {
        pod_ready_delay: Duration::from_millis(50),
        faults: faults.parse().expect("valid faults"),
        ..Options::default()
    })
    .await
    .expect("sandbox starts")
}

/// (status, head, body) of one HTTP/1.0 exchange with `user_agent`.
async fn send(
    sb: &Sandbox,
    method: &str,
    path: &str,
    user_agent: &str,
    body: &str,
) -> (u16, String, String) {
    let a = addr(sb);
    let mut s = tokio::net::TcpStream::connect(&a).await.expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {a}\r\nUser-Agent: {user_agent}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (code, head.to_ascii_lowercase(), body.to_string())
}

#[tokio::test]
async fn server_errors_are_statuses_with_retry_after_and_spare_the_sandbox_nodes() {
    let sb = with_faults("server-errors=1").await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let (code, head, body) = send(&sb, "GET", CM, "kubectl/v1.33", "").await;
        let status: Value = serde_json::from_str(&body).expect("a Status body");
        assert_eq!(status["kind"], "Status", "{body}");
        assert_eq!(status["code"], code, "{body}");
        let reason = status["reason"].as_str().unwrap_or_default().to_string();
        match code {
            500 => assert_eq!(reason, "InternalError"),
            503 => assert_eq!(reason, "ServiceUnavailable"),
            429 => {
                assert_eq!(reason, "TooManyRequests");
                assert_eq!(status["details"]["retryAfterSeconds"], 1, "{body}");
            }
            other => panic!("unexpected {other}: {body}"),
        }
        assert_eq!(head.contains("retry-after: 1"), code != 500, "{head}");
        seen.insert(code);
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    let (code, _, _) = send(&sb, "GET", CM, "habitat-sandbox/0.1.0 (nodes)", "").await;
    assert_eq!(code, 200);
    let counts = req(&sb, "GET", "/debug/faults", Value::Null).await.1;
    assert_eq!(counts["requests"], 30, "{counts}");
    sb.shutdown().await;
}

#[tokio::test]
async fn only_selects_clients_by_user_agent() {
    let sb = with_faults("server-errors=1,only=habitat-operator").await;
    assert_eq!(send(&sb, "GET", CM, "kubectl/v1.33", "").await.0, 200);
    let code = send(&sb, "GET", CM, "habitat-operator/0.1.0 (x)", "")
        .await
        .0;
    assert!([500, 503, 429].contains(&code), "{code}");
    sb.shutdown().await;
}

#[tokio::test]
async fn conflicts_hit_writes_to_an_object_only() {
    let sb = with_faults("conflicts=1").await;
    let body = json!({"metadata": {"name": "a"}, "data": {"k": "v"}}).to_string();
    assert_eq!(send(&sb, "POST", CM, "t", &body).await.0, 201);
    assert_eq!(send(&sb, "GET", &format!("{CM}/a"), "t", "").await.0, 200);
    let (code, _, text) = send(&sb, "PUT", &format!("{CM}/a"), "t", &body).await;
    let status: Value = serde_json::from_str(&text).expect("Status");
    assert_eq!(
        (code, status["reason"].as_str()),
        (409, Some("Conflict")),
        "{text}"
    );
    assert!(status["message"]
        .as_str()
        .unwrap_or_default()
        .contains("the object has been modified"));
    sb.shutdown().await;
}

#[tokio::test]
async fn expired_answers_410_to_lists_and_watches_from_a_resource_version() {
    let sb = with_faults("expired=1").await;
    assert_eq!(send(&sb, "GET", CM, "t", "").await.0, 200);
    assert_eq!(
        send(&sb, "GET", &format!("{CM}?resourceVersion=0"), "t", "")
            .await
            .0,
        200
    );
    let (code, _, text) = send(&sb, "GET", &format!("{CM}?resourceVersion=1"), "t", "").await;
    assert_eq!(code, 410, "{text}");
    let (code, _, text) = send(
        &sb,
        "GET",
        &format!("{CM}?watch=true&resourceVersion=1"),
        "t",
        "",
    )
    .await;
    assert_eq!(code, 200, "a watch reports 410 as its event");
    let event: Value = serde_json::from_str(text.trim()).expect("one event");
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
    sb.shutdown().await;
}

#[tokio::test]
async fn watches_are_cut_after_the_interval_and_latency_is_added() {
    let faults: Faults = "watch-cut=300ms,latency=100ms-150ms".parse().unwrap();
    let sb = with_faults(&faults.to_string()).await;
    let start = Instant::now();
    let (code, _, _) = send(&sb, "GET", &format!("{CM}?watch=true"), "t", "").await;
    let took = start.elapsed();
    assert_eq!(code, 200);
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "the watch ended after {took:?}"
    );
    let counts = req(&sb, "GET", "/debug/faults", Value::Null).await.1;
    assert_eq!(counts["watchCuts"], 1, "{counts}");
    sb.shutdown().await;
}
