//! The supervisors' census (`GET /census` on the HTTP gateway): reading it with a timeout and a
//! size bound, and finding the elected leader of a service group in it.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

/// The part of `/census` the operator reads (field names from the supervisor's serializers).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Census {
    /// The id of the member that answered.
    #[serde(default)]
    pub local_member_id: Option<String>,
    /// Groups keyed by `service.group`.
    pub census_groups: HashMap<String, CensusGroup>,
}

/// One service group in the census.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CensusGroup {
    /// `None`, `ElectionInProgress`, `ElectionNoQuorum` or `ElectionFinished`.
    #[serde(default)]
    pub election_status: String,
    /// Member id of the leader, when one was elected.
    #[serde(default)]
    pub leader_id: Option<String>,
    /// Members keyed by member id.
    #[serde(default)]
    pub population: HashMap<String, Member>,
}

/// A member of a service group.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Member {
    /// 32-hex member id.
    pub member_id: String,
    /// Whether this member is the leader.
    #[serde(default)]
    pub leader: bool,
    /// Whether the member is alive (exactly one of alive/suspect/confirmed/departed is true).
    #[serde(default)]
    pub alive: bool,
    /// Whether gossip suspects the member dead (it may still come back).
    #[serde(default)]
    pub suspect: bool,
    /// Whether gossip confirmed the member dead: it still counts for quorum until departed.
    #[serde(default)]
    pub confirmed: bool,
    /// Whether the member departed (it no longer counts for quorum).
    #[serde(default)]
    pub departed: bool,
    /// The package it runs, `origin/name/version/release`.
    #[serde(default)]
    pub package: String,
    /// Addresses of the member.
    pub sys: SysInfo,
}

/// A member's addresses.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SysInfo {
    /// The member's IP: the pod IP.
    pub ip: String,
    /// The member's host name: the pod name.
    #[serde(default)]
    pub hostname: String,
}

/// What the census says about a group's election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Election {
    /// A finished election with an alive leader at this IP.
    Elected {
        /// The leader's `sys.ip`.
        ip: String,
    },
    /// The election is running.
    InProgress,
    /// The group has no quorum.
    NoQuorum,
    /// No election has started (or the named leader is not alive).
    NotStarted,
    /// The group is not in the census (the supervisors have not loaded the service yet).
    GroupMissing,
}

impl Census {
    /// The ids of the members of `service_group` that gossip confirmed dead (never alive or
    /// suspect ones, never departed ones), sorted.
    pub fn confirmed_dead(&self, service_group: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .census_groups
            .get(service_group)
            .map(|g| {
                g.population
                    .values()
                    .filter(|m| m.confirmed && !m.alive && !m.suspect && !m.departed)
                    .map(|m| m.member_id.clone())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// The IPs of the alive members of `service_group`.
    pub fn alive_ips(&self, service_group: &str) -> Vec<String> {
        self.census_groups
            .get(service_group)
            .map(|g| {
                g.population
                    .values()
                    .filter(|m| m.alive)
                    .map(|m| m.sys.ip.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The election state of `service_group` (`service.group`). A leader is trusted only when
    /// the election finished and the leader member is alive.
    pub fn election(&self, service_group: &str) -> Election {
        let Some(group) = self.census_groups.get(service_group) else {
            return Election::GroupMissing;
        };
        match group.election_status.as_str() {
            "ElectionFinished" => {}
            "ElectionInProgress" => return Election::InProgress,
            "ElectionNoQuorum" => return Election::NoQuorum,
            _ => return Election::NotStarted,
        }
        let leader = group
            .leader_id
            .as_ref()
            .and_then(|id| group.population.get(id))
            .or_else(|| group.population.values().find(|m| m.leader));
        match leader {
            Some(m) if m.alive && m.leader => Election::Elected {
                ip: m.sys.ip.clone(),
            },
            _ => Election::NotStarted,
        }
    }
}

/// Why a census could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CensusError {
    /// No answer within the timeout.
    #[error("the supervisor at {0} did not answer within the timeout")]
    Timeout(String),
    /// Connection or HTTP failure.
    #[error("cannot read the census from {addr}: {message}")]
    Http {
        /// The gateway address.
        addr: String,
        /// What failed.
        message: String,
    },
    /// A status other than 200.
    #[error("the supervisor at {addr} answered HTTP {status}")]
    Status {
        /// The gateway address.
        addr: String,
        /// The status code.
        status: u16,
    },
    /// The body is too large or not census JSON.
    #[error("the census from {addr} is not readable: {message}")]
    Body {
        /// The gateway address.
        addr: String,
        /// What is wrong with it.
        message: String,
    },
}

/// Reads a census from a supervisor at an IP. A trait so that tests can script censuses.
pub trait CensusSource: Send + Sync {
    /// Fetches `/census` from the supervisor at `ip`.
    fn fetch<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<Census, CensusError>>;
}

/// Reads `/census` over HTTP from the gateway port.
#[derive(Clone)]
pub struct HttpCensus {
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    port: u16,
    timeout: Duration,
    max_bytes: usize,
}

impl HttpCensus {
    /// A reader for gateways on `port`, with a per-request `timeout` and a 4 MiB body bound.
    pub fn new(port: u16, timeout: Duration) -> Self {
        HttpCensus {
            // No idle connections are kept: each pod is its own host, and hyper's pool kept one
            // per leader-group pod ever asked, buffers included, for 90 s (and forgot an expired
            // one only when its pod was asked again): 3.4 MB of the heap at N = 1000 (900 pods;
            // heaptrack). Kept for 5 s, the peak RSS was 55.4 MiB; kept for none, 48.7 MiB
            // A new connection to a pod is cheap next to
            // a reconcile pass.
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build_http(),
            port,
            timeout,
            max_bytes: 4 << 20,
        }
    }

    async fn get(&self, ip: &str) -> Result<Census, CensusError> {
        let addr = format!("{ip}:{}", self.port);
        let http = |e: &dyn std::fmt::Display| CensusError::Http {
            addr: addr.clone(),
            message: e.to_string(),
        };
        let uri: hyper::Uri = format!("http://{addr}/census")
            .parse()
            .map_err(|e| http(&e))?;
        let response = self.client.get(uri).await.map_err(|e| http(&e))?;
        if response.status() != hyper::StatusCode::OK {
            return Err(CensusError::Status {
                addr,
                status: response.status().as_u16(),
            });
        }
        let body = Limited::new(response.into_body(), self.max_bytes)
            .collect()
            .await
            .map_err(|e| CensusError::Body {
                addr: addr.clone(),
                message: e.to_string(),
            })?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| CensusError::Body {
            addr,
            message: e.to_string(),
        })
    }
}

impl CensusSource for HttpCensus {
    fn fetch<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<Census, CensusError>> {
        Box::pin(async move {
            tokio::time::timeout(self.timeout, self.get(ip))
                .await
                .unwrap_or_else(|_| Err(CensusError::Timeout(format!("{ip}:{}", self.port))))
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A census of `redis.default` in the supervisor's shape.
    pub fn census_json(status: &str, members: &[(&str, &str, bool, bool)]) -> serde_json::Value {
        let population: serde_json::Map<String, serde_json::Value> = members
            .iter()
            .map(|(id, ip, leader, alive)| {
                (
                    id.to_string(),
                    json!({
                        "member_id": id, "leader": leader, "follower": !leader, "alive": alive,
                        "suspect": false, "confirmed": !alive, "departed": false, "persistent": true,
                        "service": "redis", "group": "default", "org": null,
                        "sys": {"ip": ip, "hostname": "h", "gossip_ip": ip, "gossip_port": 9638,
                                "http_gateway_ip": "0.0.0.0", "http_gateway_port": 9631,
                                "ctl_gateway_ip": "127.0.0.1", "ctl_gateway_port": 9632},
                        "cfg": {}
                    }),
                )
            })
            .collect();
        let leader_id = members.iter().find(|m| m.2).map(|m| m.0);
        json!({
            "local_member_id": "a", "changed": false, "last_service_counter": 0,
            "census_groups": {"redis.default": {
                "service_group": "redis.default", "election_status": status,
                "update_election_status": "None", "leader_id": leader_id,
                "pkg_incarnation": 0, "service_config": null, "local_member_id": "a",
                "update_leader_id": null, "changed_service_files": [], "service_files": {},
                "population": population
            }}
        })
    }

    fn parse(v: serde_json::Value) -> Census {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_finished_election_with_an_alive_leader_names_its_ip() {
        let c = parse(census_json(
            "ElectionFinished",
            &[
                ("a1", "10.0.0.1", false, true),
                ("b2", "10.0.0.2", true, true),
            ],
        ));
        assert_eq!(
            c.election("redis.default"),
            Election::Elected {
                ip: "10.0.0.2".into()
            }
        );
    }

    #[test]
    fn alive_members_are_listed_by_ip() {
        let c = parse(census_json(
            "ElectionFinished",
            &[
                ("a1", "10.0.0.1", false, true),
                ("b2", "10.0.0.2", true, false),
            ],
        ));
        assert_eq!(c.alive_ips("redis.default"), ["10.0.0.1"]);
        assert!(c.alive_ips("redis.blue").is_empty());
    }

    #[test]
    fn a_dead_leader_is_not_trusted() {
        let c = parse(census_json(
            "ElectionFinished",
            &[
                ("a1", "10.0.0.1", false, true),
                ("b2", "10.0.0.2", true, false),
            ],
        ));
        assert_eq!(c.election("redis.default"), Election::NotStarted);
    }

    #[test]
    fn running_and_quorumless_elections_are_reported_as_such() {
        let c = parse(census_json(
            "ElectionInProgress",
            &[("b2", "10.0.0.2", true, true)],
        ));
        assert_eq!(c.election("redis.default"), Election::InProgress);
        let c = parse(census_json(
            "ElectionNoQuorum",
            &[("b2", "10.0.0.2", false, true)],
        ));
        assert_eq!(c.election("redis.default"), Election::NoQuorum);
        let c = parse(census_json("None", &[]));
        assert_eq!(c.election("redis.default"), Election::NotStarted);
        assert_eq!(c.election("redis.blue"), Election::GroupMissing);
    }

    #[tokio::test]
    async fn an_unreachable_gateway_is_an_error_not_a_hang() {
        // Port 9 (discard) on a loopback address nobody listens on: refused at once.
        let reader = HttpCensus::new(9, Duration::from_millis(500));
        let err = reader.fetch("127.0.0.1").await.unwrap_err();
        assert!(
            matches!(err, CensusError::Http { .. } | CensusError::Timeout(_)),
            "{err}"
        );
    }

    /// Serves one connection on a loopback port: reads the request, then writes `answer`
    /// (after `delay`). Returns the port.
    async fn serve_once(answer: Vec<u8>, delay: Duration) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                tokio::time::sleep(delay).await;
                let _ = conn.write_all(&answer).await;
                let _ = conn.shutdown().await;
            }
        });
        port
    }

    #[tokio::test]
    async fn a_huge_body_is_refused_at_the_bound() {
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            (8 << 20) + 2
        )
        .into_bytes();
        answer.push(b'"');
        answer.extend(std::iter::repeat_n(b'a', 8 << 20));
        answer.push(b'"');
        let port = serve_once(answer, Duration::ZERO).await;
        let err = HttpCensus::new(port, Duration::from_secs(10))
            .fetch("127.0.0.1")
            .await
            .unwrap_err();
        assert!(matches!(err, CensusError::Body { .. }), "{err}");
        assert!(err.to_string().contains("length limit"), "{err}");
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        // The redirect points at a server that would answer a valid census.
        let census = census_json("ElectionFinished", &[("a", "10.0.0.1", true, true)]).to_string();
        let ok = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{census}",
            census.len()
        );
        let target = serve_once(ok.into_bytes(), Duration::ZERO).await;
        let redirect = format!(
            "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{target}/census\r\ncontent-length: 0\r\n\r\n"
        );
        let port = serve_once(redirect.into_bytes(), Duration::ZERO).await;
        let err = HttpCensus::new(port, Duration::from_secs(5))
            .fetch("127.0.0.1")
            .await
            .unwrap_err();
        assert!(
            matches!(err, CensusError::Status { status: 302, .. }),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_gateway_that_never_answers_times_out() {
        let port = serve_once(Vec::new(), Duration::from_secs(60)).await;
        let start = std::time::Instant::now();
        let err = HttpCensus::new(port, Duration::from_millis(300))
            .fetch("127.0.0.1")
            .await
            .unwrap_err();
        assert!(matches!(err, CensusError::Timeout(_)), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_body_that_trickles_forever_times_out() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            if let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n{")
                    .await;
                for _ in 0..600 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if conn.write_all(b" ").await.is_err() {
                        break;
                    }
                }
            }
        });
        let start = std::time::Instant::now();
        let err = HttpCensus::new(port, Duration::from_millis(500))
            .fetch("127.0.0.1")
            .await
            .unwrap_err();
        assert!(matches!(err, CensusError::Timeout(_)), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
