//! Departing dead members of groups that elect, so that they stop counting against quorum.
//!
//! # Flow
//!
//! Each supervisor of such a group starts as a new member (no `MEMBER_ID` is mounted: see
//! `children::statefulset::departs_dead_members`), and reads the Habitat's control secret from
//! the Secret `NAME-control-gateway`, which [`ensure_secret`] creates once before the
//! StatefulSet is applied. A pod deleted gracefully departs itself (the supervisor does on
//! SIGTERM); one that dies uncleanly (a node crash, an OOM kill, a container that dies) stays in
//! the ring, `suspect` then `confirmed` after 13 to 19 s (measured), and a confirmed member
//! counts toward quorum until departed. After each census read, [`depart_dead`] departs every
//! member the trusted census lists as `confirmed` through the control gateway of the pod that
//! answered (`hab sup depart ID -r IP:9632`, `cluster::control_gateway`).
//!
//! # Guarantees
//!
//! - Only `confirmed` members are departed: never `alive` or `suspect` ones, which may come
//!   back. Departure is permanent (a supervisor started again with that id exits with code 86);
//!   a member confirmed dead behind a network partition that later comes back therefore exits,
//!   and its container restarts with a new filesystem, hence a new id, and joins again.
//! - The control secret is generated once and never rewritten; it is read from the Secret only
//!   when a departure is due, kept in memory, and never logged or written to an Event.
//! - A departure the supervisor accepted is not sent again for [`RESEND`]: the supervisor marks
//!   the member departed without bumping its member list's update counter, so its census may
//!   go on listing it `confirmed` until the next membership change (measured with the real
//!   supervisor; `tests/control_gateway.rs`), while its quorum already leaves it out.
//!
//! # Caveats
//!
//! - A group's dead members are looked at when its census is read: every pass for a leader
//!   group, and for a standalone group with rolling updates only when its status is refreshed
//!   from the census.
//! - A `persistentStorage.mountPath` that covers `/hab/sup` keeps the member id across
//!   containers: a departed member then cannot start again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::api::Habitat;
use crate::children::control_gateway::{control_secret, control_secret_name, generate, read};
use crate::children::statefulset::departs_dead_members;
use crate::cluster::apply::FIELD_MANAGER;
use crate::cluster::census::Census;
use crate::cluster::control_gateway::{ControlGateway, TcpControlGateway, CONTROL_GATEWAY_PORT};
use crate::cluster::events::Note;
use crate::error::Error;
use crate::reconcile::context::Context;
use crate::reconcile::leader::CensusRead;

/// How long a departure the supervisor accepted is not sent again.
pub const RESEND: Duration = Duration::from_secs(60);
/// How long a Secret this process created is trusted from memory while the cache catches up.
const CREATED_MEMORY: Duration = Duration::from_secs(120);
/// The bound on one request to a control gateway.
const GATEWAY_TIMEOUT: Duration = Duration::from_secs(2);
/// Most departures sent in one pass.
const MAX_PER_PASS: usize = 8;

/// What this process remembers of one Habitat (by uid).
#[derive(Default)]
struct Memory {
    /// The control secret, once created or read.
    secret: Option<String>,
    /// When this process created the Secret.
    created: Option<Instant>,
    /// Departures accepted, by member id.
    sent: HashMap<String, Instant>,
}

/// What this process remembers of each Habitat's departures and control secret, by uid. It is
/// part of the per-Habitat state (`reconcile::state::PerHabitat`), forgotten with the rest.
#[derive(Default)]
pub struct Departures(Mutex<HashMap<String, Memory>>);

impl Departures {
    fn with<T>(&self, uid: &str, f: impl FnOnce(&mut Memory) -> T) -> T {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(all.entry(uid.to_string()).or_default())
    }

    /// Forgets what this process remembers of a Habitat that is going away.
    pub fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(uid);
    }

    /// How many Habitats have an entry.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no Habitat has an entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The members of `group` to depart now: those `census` lists as confirmed dead, less those
/// departed within [`RESEND`], at most `MAX_PER_PASS`.
pub fn to_depart(
    census: &Census,
    group: &str,
    sent: &HashMap<String, Instant>,
    now: Instant,
) -> Vec<String> {
    census
        .confirmed_dead(group)
        .into_iter()
        .filter(|id| {
            sent.get(id)
                .is_none_or(|at| now.duration_since(*at) >= RESEND)
        })
        .take(MAX_PER_PASS)
        .collect()
}

/// Creates the Habitat's control gateway Secret when it does not exist (never replaces it), for
/// groups that elect.
pub async fn ensure_secret(ctx: &Context, h: &Habitat) -> Result<(), Error> {
    if !departs_dead_members(h) {
        return Ok(());
    }
    let ns = h
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let uid = h.uid().unwrap_or_default();
    let name = control_secret_name(h);
    if ctx
        .stores
        .secrets
        .get(&ObjectRef::new(&name).within(&ns))
        .is_some()
    {
        return Ok(());
    }
    if ctx.habitats.departures.with(&uid, |m| {
        m.created.is_some_and(|at| at.elapsed() < CREATED_MEMORY)
    }) {
        return Ok(());
    }
    let value = generate();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, &control_secret(h, value.clone())).await {
        Ok(_) => ctx.habitats.departures.with(&uid, |m| {
            m.secret = Some(value);
            m.created = Some(Instant::now());
        }),
        // Created by an earlier pass or process: it is kept as it is.
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(source) => {
            return Err(Error::Apply {
                action: "create",
                kind: "Secret".into(),
                name,
                source,
            })
        }
    }
    Ok(())
}

/// The control secret of `h`, from memory or read once from its Secret.
async fn secret(ctx: &Context, h: &Habitat, uid: &str) -> Result<Option<String>, Error> {
    if let Some(s) = ctx.habitats.departures.with(uid, |m| m.secret.clone()) {
        return Ok(Some(s));
    }
    let ns = h
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = control_secret_name(h);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let value = api
        .get_opt(&name)
        .await
        .map_err(|source| Error::ReadSecret { name, source })?
        .as_ref()
        .and_then(read);
    if let Some(v) = &value {
        ctx.habitats
            .departures
            .with(uid, |m| m.secret = Some(v.clone()));
    }
    Ok(value)
}

/// Departs the members `read` lists as confirmed dead, through the control gateway of the pod
/// that answered it. Failures become Warning notes; none fails the reconcile.
pub async fn depart_dead(
    ctx: &Context,
    h: &Habitat,
    read: Option<&CensusRead>,
    notes: &mut Vec<Note>,
) {
    let gateway = TcpControlGateway::new(CONTROL_GATEWAY_PORT, GATEWAY_TIMEOUT);
    depart_with(ctx, h, read, notes, &gateway).await;
}

async fn depart_with(
    ctx: &Context,
    h: &Habitat,
    read: Option<&CensusRead>,
    notes: &mut Vec<Note>,
    gateway: &dyn ControlGateway,
) {
    let Some(read) = read else { return };
    if !departs_dead_members(h) {
        return;
    }
    let uid = h.uid().unwrap_or_default();
    let group = format!("{}.{}", h.spec.service.name, h.spec.service.group);
    let now = Instant::now();
    let due = ctx.habitats.departures.with(&uid, |m| {
        m.sent.retain(|_, at| now.duration_since(*at) < RESEND);
        to_depart(&read.census, &group, &m.sent, now)
    });
    if due.is_empty() {
        return;
    }
    let secret = match secret(ctx, h, &uid).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            notes.push(Note::warning(
                "DepartFailed",
                format!(
                    "cannot depart dead members {}: the Secret {} holds no CTL_SECRET; delete \
                     it so that the operator generates it again, then restart the pods",
                    due.join(", "),
                    control_secret_name(h)
                ),
            ));
            return;
        }
        Err(e) => {
            notes.push(Note::warning(
                "DepartFailed",
                format!("cannot depart dead members {}: {e}", due.join(", ")),
            ));
            return;
        }
    };
    for id in due {
        match gateway.depart(&read.ip, &secret, &id).await {
            Ok(()) => {
                ctx.habitats
                    .departures
                    .with(&uid, |m| m.sent.insert(id.clone(), Instant::now()));
                tracing::info!(name = %h.name_any(), member = %id, via = %read.pod, "departed a member confirmed dead");
                notes.push(Note::normal(
                    "MemberDeparted",
                    format!(
                        "departed member {id}, which gossip confirmed dead, through {}'s \
                         control gateway",
                        read.pod
                    ),
                ));
            }
            Err(e) => {
                notes.push(Note::warning(
                    "DepartFailed",
                    format!("cannot depart dead member {id}: {e}"),
                ));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::census::tests::census_json;

    fn census(members: serde_json::Value) -> Census {
        let mut c = census_json(
            "ElectionFinished",
            &[
                ("alive", "10.0.0.1", true, true),
                ("suspect", "10.0.0.2", false, false),
                ("confirmed", "10.0.0.3", false, false),
                ("departed", "10.0.0.4", false, false),
            ],
        );
        let pop = &mut c["census_groups"]["redis.default"]["population"];
        pop["suspect"]["suspect"] = true.into();
        pop["suspect"]["confirmed"] = false.into();
        pop["departed"]["departed"] = true.into();
        pop["departed"]["confirmed"] = false.into();
        if let Some(extra) = members.as_object() {
            for (k, v) in extra {
                pop[k] = v.clone();
            }
        }
        serde_json::from_value(c).unwrap()
    }

    #[test]
    fn only_members_confirmed_dead_are_departed() {
        let c = census(serde_json::json!({}));
        assert_eq!(
            to_depart(&c, "redis.default", &HashMap::new(), Instant::now()),
            ["confirmed"]
        );
        assert!(to_depart(&c, "other.default", &HashMap::new(), Instant::now()).is_empty());
    }

    #[test]
    fn an_accepted_departure_is_not_sent_again_until_the_resend_interval() {
        let c = census(serde_json::json!({}));
        let now = Instant::now();
        let sent = HashMap::from([("confirmed".to_string(), now)]);
        assert!(to_depart(&c, "redis.default", &sent, now + RESEND / 2).is_empty());
        assert_eq!(
            to_depart(&c, "redis.default", &sent, now + RESEND),
            ["confirmed"]
        );
    }

    #[test]
    fn a_pass_departs_a_bounded_number() {
        let mut many = serde_json::Map::new();
        for i in 0..20 {
            let id = format!("dead{i:02}");
            many.insert(
                id.clone(),
                serde_json::json!({"member_id": id, "alive": false, "confirmed": true,
                    "sys": {"ip": "10.0.1.1"}}),
            );
        }
        let c = census(serde_json::Value::Object(many));
        let due = to_depart(&c, "redis.default", &HashMap::new(), Instant::now());
        assert_eq!(due.len(), MAX_PER_PASS);
        assert_eq!(due[0], "confirmed", "sorted, so each pass takes the same");
    }
}
