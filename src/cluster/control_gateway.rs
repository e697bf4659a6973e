//! A client of the supervisor's control gateway (`--listen-ctl`, port 9632): the part of the
//! protocol `hab sup depart ID -r IP:9632` speaks, so that the operator can depart a dead member
//! from the ring through any live one.
//!
//! # Flow
//!
//! One TCP connection per request, as `hab` does (`components/sup-client/src/lib.rs`):
//! 1. the client sends a `Handshake { secret_key }` in transaction 0; the server answers `NetOk`,
//!    or `NetErr(Unauthorized)` and closes the connection when the secret does not match its
//!    `/hab/sup/default/CTL_SECRET`;
//! 2. the client sends `SupDepart { member_id }` in transaction 1; the server gossips the
//!    departure from its own gossip server and answers `NetOk` (complete), or `NetErr`.
//!
//! Every message is framed as `components/sup-protocol/src/codec.rs` says: a big-endian u32
//! header (bit 31: a transaction word follows; bits 20..26: the length of the message id; bits
//! 0..20: the length of the body), the optional transaction word (bit 31: a reply, bit 30: the
//! last reply, bits 0..30: the id), the message id as text (`Handshake`, `SupDepart`, `NetOk`,
//! `NetErr`) and the protobuf (proto2) body. The bodies needed here are one string field each
//! (`ctl.proto`, `net.proto`), so they are encoded by hand.
//!
//! # Guarantees
//!
//! - The secret is sent only in the handshake, and never appears in an error, a log or a
//!   `Debug` output of this module.
//! - A request has one deadline for connecting, handshaking and the reply.
//! - A departure is accepted by the server when it answers `NetOk`; it then reaches every
//!   member by gossip (within seconds, measured), and is permanent: a supervisor started again
//!   with a departed id exits (code 86).
//!
//! # Caveats
//!
//! - No TLS: the operator's pods run the gateway in plain TCP (`--ctl-server-certificate` is
//!   not set); a supervisor configured for TLS refuses the handshake.
//! - Departing is irreversible: callers must depart only members gossip has confirmed dead.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The control gateway's port.
pub const CONTROL_GATEWAY_PORT: u16 = 9632;

const TXN_BIT: u32 = 1 << 31;
const ID_LEN_OFFSET: u32 = 20;
const ID_LEN_MASK: u32 = 0x3F;
const BODY_LEN_MASK: u32 = 0xF_FFFF;
const TXN_COMPLETE_BIT: u32 = 1 << 30;
/// Bound on the replies read for one request (the server sends one for a departure).
const MAX_REPLIES: usize = 16;
/// `sup.net.ErrCode::Unauthorized`.
const UNAUTHORIZED: u64 = 4;

/// Why a request to a control gateway failed. Never holds the secret.
#[derive(Debug, thiserror::Error)]
pub enum ControlGatewayError {
    /// No complete answer within the deadline.
    #[error("the control gateway at {0} did not answer within the timeout")]
    Timeout(String),
    /// The connection failed or was closed.
    #[error("cannot talk to the control gateway at {addr}: {message}")]
    Io {
        /// The gateway address.
        addr: String,
        /// What failed.
        message: String,
    },
    /// The supervisor refused the control secret.
    #[error(
        "the supervisor at {0} refused the control secret: its /hab/sup/default/CTL_SECRET is not \
         the Habitat's control gateway Secret"
    )]
    Unauthorized(String),
    /// The supervisor answered with an error.
    #[error("the supervisor at {addr} refused the request (code {code}): {message}")]
    Refused {
        /// The gateway address.
        addr: String,
        /// `sup.net.ErrCode`.
        code: u64,
        /// The supervisor's message.
        message: String,
    },
    /// The answer is not the protocol.
    #[error("the control gateway at {addr} answered something unexpected: {message}")]
    Protocol {
        /// The gateway address.
        addr: String,
        /// What was wrong.
        message: String,
    },
}

/// One framed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The transaction word, when present.
    pub txn: Option<u32>,
    /// `Handshake`, `SupDepart`, `NetOk`, `NetErr`, ...
    pub message_id: String,
    /// The protobuf body.
    pub body: Vec<u8>,
}

impl Frame {
    /// Whether this is the last reply of its transaction (a message without one is).
    pub fn is_complete(&self) -> bool {
        self.txn.is_none_or(|t| t & TXN_COMPLETE_BIT != 0)
    }
}

/// Encodes a request in transaction `txn`.
pub fn encode(message_id: &str, body: &[u8], txn: u32) -> Vec<u8> {
    let header = TXN_BIT
        | ((message_id.len() as u32 & ID_LEN_MASK) << ID_LEN_OFFSET)
        | (body.len() as u32 & BODY_LEN_MASK);
    let mut out = Vec::with_capacity(8 + message_id.len() + body.len());
    out.extend_from_slice(&header.to_be_bytes());
    out.extend_from_slice(&txn.to_be_bytes());
    out.extend_from_slice(message_id.as_bytes());
    out.extend_from_slice(body);
    out
}

/// A proto2 message whose only field is string field 1 (`Handshake`, `SupDepart`).
pub fn string_field_1(value: &str) -> Vec<u8> {
    let mut out = vec![0x0A];
    put_varint(&mut out, value.len() as u64);
    out.extend_from_slice(value.as_bytes());
    out
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7F) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Decodes a `NetErr` body (`code` = field 1 varint, `msg` = field 2 string); unknown fields
/// are skipped.
pub fn decode_net_err(body: &[u8]) -> Option<(u64, String)> {
    let (mut code, mut msg) = (0, String::new());
    let mut at = 0;
    while at < body.len() {
        let key = get_varint(body, &mut at)?;
        match (key >> 3, key & 7) {
            (1, 0) => code = get_varint(body, &mut at)?,
            (field, 2) => {
                let len = usize::try_from(get_varint(body, &mut at)?).ok()?;
                let bytes = body.get(at..at.checked_add(len)?)?;
                at += len;
                if field == 2 {
                    msg = String::from_utf8_lossy(bytes).into_owned();
                }
            }
            (_, 0) => {
                get_varint(body, &mut at)?;
            }
            (_, 1) => at += 8,
            (_, 5) => at += 4,
            _ => return None,
        }
    }
    Some((code, msg))
}

/// Reads one frame.
async fn read_frame(stream: &mut TcpStream) -> std::io::Result<Frame> {
    let header = stream.read_u32().await?;
    let txn = if header & TXN_BIT != 0 {
        Some(stream.read_u32().await?)
    } else {
        None
    };
    let id_len = ((header >> ID_LEN_OFFSET) & ID_LEN_MASK) as usize;
    let body_len = (header & BODY_LEN_MASK) as usize;
    let mut id = vec![0; id_len];
    stream.read_exact(&mut id).await?;
    let mut body = vec![0; body_len];
    stream.read_exact(&mut body).await?;
    Ok(Frame {
        txn,
        message_id: String::from_utf8_lossy(&id).into_owned(),
        body,
    })
}

/// Departs member ids through supervisors' control gateways. A trait so that tests can record
/// departures.
pub trait ControlGateway: Send + Sync {
    /// Asks the supervisor at `ip` to depart `member_id`, authenticating with `secret`.
    fn depart<'a>(
        &'a self,
        ip: &'a str,
        secret: &'a str,
        member_id: &'a str,
    ) -> BoxFuture<'a, Result<(), ControlGatewayError>>;
}

/// Speaks the protocol over TCP.
#[derive(Debug, Clone)]
pub struct TcpControlGateway {
    port: u16,
    timeout: Duration,
}

impl TcpControlGateway {
    /// A client of gateways on `port`, each request bounded by `timeout`.
    pub fn new(port: u16, timeout: Duration) -> Self {
        TcpControlGateway { port, timeout }
    }

    /// Sends `message_id`/`body` after the handshake and returns when the server answered
    /// `NetOk`.
    pub async fn request(
        &self,
        ip: &str,
        secret: &str,
        message_id: &str,
        body: &[u8],
    ) -> Result<(), ControlGatewayError> {
        let addr = if ip.contains(':') && !ip.starts_with('[') {
            format!("[{ip}]:{}", self.port)
        } else {
            format!("{ip}:{}", self.port)
        };
        tokio::time::timeout(self.timeout, exchange(&addr, secret, message_id, body))
            .await
            .unwrap_or_else(|_| Err(ControlGatewayError::Timeout(addr.clone())))
    }
}

impl ControlGateway for TcpControlGateway {
    fn depart<'a>(
        &'a self,
        ip: &'a str,
        secret: &'a str,
        member_id: &'a str,
    ) -> BoxFuture<'a, Result<(), ControlGatewayError>> {
        Box::pin(async move {
            let body = string_field_1(member_id);
            self.request(ip, secret, "SupDepart", &body).await
        })
    }
}

async fn exchange(
    addr: &str,
    secret: &str,
    message_id: &str,
    body: &[u8],
) -> Result<(), ControlGatewayError> {
    let io = |e: std::io::Error| ControlGatewayError::Io {
        addr: addr.to_string(),
        message: e.to_string(),
    };
    let mut stream = TcpStream::connect(addr).await.map_err(io)?;
    stream
        .write_all(&encode("Handshake", &string_field_1(secret), 0))
        .await
        .map_err(io)?;
    expect_ok(addr, &mut stream, true).await?;
    stream
        .write_all(&encode(message_id, body, 1))
        .await
        .map_err(io)?;
    expect_ok(addr, &mut stream, false).await
}

/// Reads replies until the complete one: `NetOk` is success.
async fn expect_ok(
    addr: &str,
    stream: &mut TcpStream,
    handshake: bool,
) -> Result<(), ControlGatewayError> {
    for _ in 0..MAX_REPLIES {
        let frame = read_frame(stream)
            .await
            .map_err(|e| ControlGatewayError::Io {
                addr: addr.to_string(),
                message: if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    "the connection was closed before the reply".to_string()
                } else {
                    e.to_string()
                },
            })?;
        match frame.message_id.as_str() {
            "NetOk" => return Ok(()),
            "NetErr" => {
                let (code, message) =
                    decode_net_err(&frame.body).ok_or_else(|| ControlGatewayError::Protocol {
                        addr: addr.to_string(),
                        message: "a NetErr that does not decode".to_string(),
                    })?;
                if handshake || code == UNAUTHORIZED {
                    return Err(ControlGatewayError::Unauthorized(addr.to_string()));
                }
                return Err(ControlGatewayError::Refused {
                    addr: addr.to_string(),
                    code,
                    message,
                });
            }
            // Progress messages of a longer transaction; a departure sends none.
            _ if !frame.is_complete() => continue,
            other => {
                return Err(ControlGatewayError::Protocol {
                    addr: addr.to_string(),
                    message: format!("{other} as the last reply"),
                })
            }
        }
    }
    Err(ControlGatewayError::Protocol {
        addr: addr.to_string(),
        message: format!("more than {MAX_REPLIES} replies"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn a_request_is_framed_as_the_supervisor_codec_reads_it() {
        let body = string_field_1("abc");
        assert_eq!(body, [0x0A, 3, b'a', b'b', b'c']);
        let bytes = encode("SupDepart", &body, 1);
        let header = u32::from_be_bytes(bytes[0..4].try_into().unwrap());
        assert_eq!(header >> 31, 1, "a transaction follows");
        assert_eq!((header >> 20) & 0x3F, 9, "the message id's length");
        assert_eq!(header & 0xF_FFFF, 5, "the body's length");
        assert_eq!(&bytes[4..8], &1u32.to_be_bytes());
        assert_eq!(&bytes[8..17], b"SupDepart");
        assert_eq!(&bytes[17..], &body[..]);
    }

    #[test]
    fn long_strings_take_a_multi_byte_length() {
        let s = "x".repeat(300);
        let body = string_field_1(&s);
        assert_eq!(&body[..3], &[0x0A, 0xAC, 0x02]);
        assert_eq!(body.len(), 303);
    }

    #[test]
    fn a_net_err_decodes_and_unknown_fields_are_skipped() {
        let mut body = vec![0x08, 0x07, 0x12, 3];
        body.extend_from_slice(b"bad");
        body.extend_from_slice(&[0x18, 0x01]);
        assert_eq!(decode_net_err(&body), Some((7, "bad".to_string())));
        assert_eq!(decode_net_err(&[0x12, 9, b'x']), None, "truncated");
    }

    /// A reply in transaction `txn`: the word carries the reply and complete bits.
    fn reply(message_id: &str, body: &[u8], txn: u32) -> Vec<u8> {
        encode(message_id, body, txn | (1 << 31) | TXN_COMPLETE_BIT)
    }

    /// A one-connection server: checks the handshake's secret, then answers the request.
    async fn server(
        secret: &'static str,
        answer: Vec<u8>,
    ) -> (String, tokio::task::JoinHandle<Vec<Frame>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut seen = vec![read_frame(&mut s).await.unwrap()];
            if seen[0].body != string_field_1(secret) {
                let mut err = vec![0x08, 0x04, 0x12, 3];
                err.extend_from_slice(b"bad");
                s.write_all(&reply("NetErr", &err, 0)).await.unwrap();
                return seen;
            }
            s.write_all(&reply("NetOk", &[], 0)).await.unwrap();
            seen.push(read_frame(&mut s).await.unwrap());
            s.write_all(&answer).await.unwrap();
            seen
        });
        (port.to_string(), task)
    }

    #[tokio::test]
    async fn a_departure_handshakes_then_departs_in_transaction_one() {
        let (port, task) = server("s3cret", reply("NetOk", &[], 1)).await;
        let gw = TcpControlGateway::new(port.parse().unwrap(), Duration::from_secs(5));
        gw.depart("127.0.0.1", "s3cret", "deadbeef").await.unwrap();
        let seen = task.await.unwrap();
        assert_eq!(seen[0].message_id, "Handshake");
        assert_eq!(seen[0].txn, Some(0));
        assert_eq!(seen[1].message_id, "SupDepart");
        assert_eq!(seen[1].txn, Some(1));
        assert_eq!(seen[1].body, string_field_1("deadbeef"));
    }

    #[tokio::test]
    async fn a_wrong_secret_is_unauthorized_and_the_error_does_not_hold_it() {
        let (port, _task) = server("right", reply("NetOk", &[], 1)).await;
        let gw = TcpControlGateway::new(port.parse().unwrap(), Duration::from_secs(5));
        let err = gw
            .depart("127.0.0.1", "wrong-secret", "m")
            .await
            .unwrap_err();
        assert!(
            matches!(err, ControlGatewayError::Unauthorized(_)),
            "{err:?}"
        );
        assert!(!format!("{err} {err:?}").contains("wrong-secret"));
    }

    #[tokio::test]
    async fn a_refusal_carries_the_supervisors_message() {
        let mut err = vec![0x08, 0x00, 0x12, 4];
        err.extend_from_slice(b"boom");
        let (port, _task) = server("s", reply("NetErr", &err, 1)).await;
        let gw = TcpControlGateway::new(port.parse().unwrap(), Duration::from_secs(5));
        match gw.depart("127.0.0.1", "s", "m").await {
            Err(ControlGatewayError::Refused {
                code: 0, message, ..
            }) => assert_eq!(message, "boom"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_silent_gateway_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let gw = TcpControlGateway::new(port, Duration::from_millis(200));
        let err = gw.depart("127.0.0.1", "s", "m").await.unwrap_err();
        assert!(matches!(err, ControlGatewayError::Timeout(_)), "{err:?}");
        drop(listener);
    }
}
