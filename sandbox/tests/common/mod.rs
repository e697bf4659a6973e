//! Test helpers: a tiny HTTP/1.0 client (no extra dependencies) and a sandbox starter.
#![allow(dead_code)]

use habitat_sandbox::{Options, Sandbox};
use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub async fn start() -> Sandbox {
    Sandbox::start(Options {
        pod_ready_delay: Duration::from_millis(50),
        ..Options::default()
    })
    .await
    .expect("sandbox starts")
}

/// Send a request and read the whole response (until the server closes the connection).
pub async fn raw(addr: &str, method: &str, path: &str, ctype: &str, body: &str) -> (u16, String) {
    try_raw(addr, method, path, ctype, body)
        .await
        .expect("the server answers")
}

/// Like [`raw`], but `None` when nothing listens or the exchange fails (a supervisor's gateway
/// opens a moment after its pod gets an IP).
pub async fn try_raw(
    addr: &str,
    method: &str,
    path: &str,
    ctype: &str,
    body: &str,
) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

pub fn addr(sb: &Sandbox) -> String {
    sb.url().trim_start_matches("http://").to_string()
}

pub async fn req(sb: &Sandbox, method: &str, path: &str, body: Value) -> (u16, Value) {
    req_ct(sb, method, path, "application/json", body).await
}

pub async fn req_ct(sb: &Sandbox, method: &str, path: &str, ct: &str, body: Value) -> (u16, Value) {
    let b = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let (code, text) = raw(&addr(sb), method, path, ct, &b).await;
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Watch lines (parsed) of a watch request that ends by timeoutSeconds.
pub async fn watch_lines(sb: &Sandbox, path: &str) -> Vec<Value> {
    let (_, text) = raw(&addr(sb), "GET", path, "application/json", "").await;
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Poll `f` until it returns Some, or panic after `secs`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}
