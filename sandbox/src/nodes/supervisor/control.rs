//! The supervisor's control gateway on `<podIP>:9632`, as far as `hab sup depart ID -r IP:9632`
//! uses it (`sup/src/ctl_gateway/server.rs`): a `Handshake` in a transaction, answered `NetOk`
//! (or `NetErr` Unauthorized, and the connection closed), then a `SupDepart` answered `NetOk`
//! once the member is marked departed. Frames as `sup-protocol/src/codec.rs`: a big-endian u32
//! header (bit 31: a transaction word follows; bits 20..26: the message id's length; bits
//! 0..20: the body's length), the transaction word, the message id, the proto2 body.
//!
//! Divergence kept: the simulated nodes do not read Secrets, so the secret is not compared with
//! the pod's `CTL_SECRET`; an empty one is refused.

use super::Hub;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The control gateway port.
pub const CONTROL_PORT: u16 = 9632;

const TXN_BIT: u32 = 1 << 31;
const REPLY_COMPLETE: u32 = (1 << 31) | (1 << 30);

/// One request frame: transaction, message id, body.
type Frame = (Option<u32>, String, Vec<u8>);

async fn read_frame(s: &mut TcpStream) -> std::io::Result<Frame> {
    let header = s.read_u32().await?;
    let txn = if header & TXN_BIT != 0 {
        Some(s.read_u32().await?)
    } else {
        None
    };
    let mut id = vec![0; ((header >> 20) & 0x3F) as usize];
    s.read_exact(&mut id).await?;
    let mut body = vec![0; (header & 0xF_FFFF) as usize];
    s.read_exact(&mut body).await?;
    Ok((txn, String::from_utf8_lossy(&id).into_owned(), body))
}

/// A complete reply in transaction `txn`.
fn reply(message_id: &str, body: &[u8], txn: u32) -> Vec<u8> {
    let header = TXN_BIT | ((message_id.len() as u32) << 20) | body.len() as u32;
    let mut out = header.to_be_bytes().to_vec();
    out.extend_from_slice(&(txn | REPLY_COMPLETE).to_be_bytes());
    out.extend_from_slice(message_id.as_bytes());
    out.extend_from_slice(body);
    out
}

/// `NetErr { code, msg }`.
fn net_err(code: u8, msg: &str) -> Vec<u8> {
    let mut out = vec![0x08, code, 0x12, msg.len() as u8];
    out.extend_from_slice(msg.as_bytes());
    out
}

/// String field 1 of a proto2 body (`Handshake.secret_key`, `SupDepart.member_id`).
pub fn string_field_1(body: &[u8]) -> Option<String> {
    let (&tag, rest) = body.split_first()?;
    if tag != 0x0A {
        return None;
    }
    let (mut len, mut shift, mut at) = (0usize, 0, 0);
    loop {
        let b = *rest.get(at)?;
        at += 1;
        len |= usize::from(b & 0x7F) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    let bytes = rest.get(at..at.checked_add(len)?)?;
    Some(String::from_utf8_lossy(bytes).into_owned())
}

async fn client(hub: Arc<Hub>, mut s: TcpStream) -> std::io::Result<()> {
    let (txn, id, body) = read_frame(&mut s).await?;
    let Some(txn) = txn.filter(|_| id == "Handshake") else {
        return Ok(());
    };
    if string_field_1(&body).is_none_or(|k| k.is_empty()) {
        let err = net_err(4, "secret key mismatch");
        return s.write_all(&reply("NetErr", &err, txn)).await;
    }
    s.write_all(&reply("NetOk", &[], txn)).await?;
    let (txn, id, body) = read_frame(&mut s).await?;
    let txn = txn.unwrap_or_default();
    match (id.as_str(), string_field_1(&body)) {
        ("SupDepart", Some(member)) => {
            hub.depart(&member);
            s.write_all(&reply("NetOk", &[], txn)).await
        }
        ("SupDepart", None) => {
            let err = net_err(9, "member_id missing");
            s.write_all(&reply("NetErr", &err, txn)).await
        }
        _ => {
            let err = net_err(5, "not simulated");
            s.write_all(&reply("NetErr", &err, txn)).await
        }
    }
}

/// Serves the control gateway on `ip:9632` until aborted.
pub async fn serve(hub: Arc<Hub>, ip: String) {
    let addr = format!("{ip}:{CONTROL_PORT}");
    let listener = match TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("supervisor control gateway on {addr}: {e}");
            return;
        }
    };
    loop {
        let Ok((s, _)) = listener.accept().await else {
            continue;
        };
        let hub = hub.clone();
        tokio::spawn(async move {
            let _ = client(hub, s).await;
        });
    }
}
