//! Resource handlers: get, list, watch, create, update, patch, delete, deletecollection.

use super::table::{self, Include};
use super::watch::{self, WatchParams};
use super::{json_response, App, Req};
use crate::error::ApiError;
use crate::patch::{self, PatchType};
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, Inner, Manager};
use axum::http::{HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::time::Duration;

fn parse_json(r: &Req) -> Result<Value, ApiError> {
    let ct = r.header("content-type");
    // Only JSON (and YAML) bodies are understood; say so, as an API server does for a media
    // type it does not serve, so that clients fall back to JSON.
    if ct.contains("protobuf") || ct.contains("cbor") {
        return Err(ApiError::unsupported_media_type(ct));
    }
    let body = &r.body;
    patch::json_or_yaml(body)
        .map_err(|e| ApiError::bad_request(format!("unable to decode the request body: {e}")))
}

fn selectors(r: &Req, name: Option<&str>) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = match r.query.get("labelSelector") {
        Some(s) => LabelSelector::parse(s)?,
        None => LabelSelector::default(),
    };
    let mut fields = match r.query.get("fieldSelector") {
        Some(s) => FieldSelector::parse(s)?,
        None => FieldSelector::default(),
    };
    if let Some(n) = name {
        fields.0.push(("metadata.name".into(), true, n.into()));
    }
    Ok((labels, fields))
}

/// Run a write on the store, or on a throwaway copy for `?dryRun=All`.
fn write<T>(app: &App, r: &Req, f: impl FnOnce(&mut Inner) -> T) -> T {
    let mut txn = app.store.lock();
    if r.query.contains_key("dryRun") {
        let mut copy: Inner = (*txn).clone();
        f(&mut copy)
    } else {
        f(&mut txn)
    }
}

/// The `fieldValidation` of a write: what becomes of fields the schema does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

/// The 422 of request options (`CreateOptions`, `DeleteOptions`, ...) that `causes` refuse, as
/// kube-apiserver answers it; Ok when there are none.
fn refused_options(options: &str, causes: &[crate::validation::Cause]) -> Result<(), ApiError> {
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_fields("meta.k8s.io", options, "", causes))
    }
}

/// The cause refusing `dryRun` values other than `All` (`ValidateDryRun`), if any.
fn dry_run_cause(values: &[&str]) -> Option<crate::validation::Cause> {
    values.iter().any(|d| *d != "All").then(|| {
        let quoted: Vec<String> = values.iter().map(|d| go_quote(d)).collect();
        crate::validation::Cause {
            reason: "FieldValueNotSupported",
            field: "dryRun".into(),
            message: format!(
                "Unsupported value: [{}]: supported values: \"All\"",
                quoted.join(", ")
            ),
        }
    })
}

/// The most bytes a `fieldManager` may have (`FieldManagerMaxLength`).
const FIELD_MANAGER_MAX_BYTES: usize = 128;

/// The field manager of a write that is no apply, as kube-apiserver's `managerOrUserAgent` names
/// it: the `fieldManager`, or else the User-Agent up to its first `/` (`kubectl` for
/// `kubectl/v1.36.2 (linux/amd64) kubernetes/...`).
fn manager_of(r: &Req) -> &str {
    match r.query.get("fieldManager") {
        Some(m) if !m.is_empty() => m,
        _ => r.header("user-agent").split('/').next().unwrap_or_default(),
    }
}

/// The options of a write, checked as kube-apiserver checks them before it decodes the body
/// (`ValidateCreateOptions`, `ValidateUpdateOptions`, `ValidatePatchOptions` with the patch's
/// type `patch`): `force` only on an apply, a `fieldManager` on every apply, of at most 128
/// bytes and printable characters, `dryRun` only `All`, and a known `fieldValidation`. One 422
/// about `options` (`CreateOptions`, ...) names every cause. Returns the `fieldValidation`, the
/// server's default Warn when none is given.
fn write_options(
    r: &Req,
    options: &str,
    patch: Option<PatchType>,
) -> Result<FieldValidation, ApiError> {
    use crate::validation::Cause;
    let cause = |reason, field: &str, message: String| Cause {
        reason,
        field: field.into(),
        message,
    };
    let mut causes = Vec::new();
    let manager = r
        .query
        .get("fieldManager")
        .map(String::as_str)
        .unwrap_or_default();
    match patch {
        Some(PatchType::Apply) if manager.is_empty() => causes.push(cause(
            "FieldValueRequired",
            "fieldManager",
            "Required value: is required for apply patch".into(),
        )),
        // Any value, `false` too: the server only asks whether it is set.
        Some(pt) if pt != PatchType::Apply && r.query.contains_key("force") => causes.push(cause(
            "FieldValueForbidden",
            "force",
            "Forbidden: may not be specified for non-apply patch".into(),
        )),
        _ => {}
    }
    if manager.len() > FIELD_MANAGER_MAX_BYTES {
        causes.push(cause(
            "FieldValueTooLong",
            "fieldManager",
            format!("Too long: may not be more than {FIELD_MANAGER_MAX_BYTES} bytes"),
        ));
    }
    for (at, c) in manager.char_indices().filter(|(_, c)| !printable(*c)) {
        causes.push(cause(
            "FieldValueInvalid",
            "fieldManager",
            format!(
                "Invalid value: {}: invalid character U+{:04X} (at position {at})",
                go_quote(manager),
                u32::from(c)
            ),
        ));
    }
    if let Some(dry_run) = r.query.get("dryRun") {
        causes.extend(dry_run_cause(&[dry_run]));
    }
    let mode = match r.query.get("fieldValidation").map(String::as_str) {
        None | Some("" | "Warn") => FieldValidation::Warn,
        Some("Ignore") => FieldValidation::Ignore,
        Some("Strict") => FieldValidation::Strict,
        Some(other) => {
            causes.push(cause(
                "FieldValueNotSupported",
                "fieldValidation",
                format!(
                    "Unsupported value: {}: supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"",
                    go_quote(other)
                ),
            ));
            FieldValidation::Warn
        }
    };
    refused_options(options, &causes).map(|()| mode)
}

/// A delete's options (from the query, or its body), checked as kube-apiserver checks them
/// before it looks the object up (`ValidateDeleteOptions`): a known `propagationPolicy`, not
/// together with the deprecated `orphanDependents`, and `dryRun` only `All`.
fn delete_options(r: &Req, body: Option<&Value>) -> Result<(), ApiError> {
    use crate::validation::Cause;
    let from_body = |k: &str| body.and_then(|b| b.get(k)).filter(|v| !v.is_null());
    let policy =
        r.query.get("propagationPolicy").cloned().or_else(|| {
            from_body("propagationPolicy").map(|p| p.as_str().unwrap_or_default().into())
        });
    let orphan =
        r.query.contains_key("orphanDependents") || from_body("orphanDependents").is_some();
    let mut causes = Vec::new();
    if let Some(policy) = &policy {
        if orphan {
            causes.push(Cause::invalid(
                "propagationPolicy",
                &go_quote(policy),
                "orphanDependents and deletionPropagation cannot be both set",
            ));
        }
        if !matches!(policy.as_str(), "Foreground" | "Background" | "Orphan") {
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                field: "propagationPolicy".into(),
                message: format!(
                    "Unsupported value: {}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"",
                    go_quote(policy)
                ),
            });
        }
    }
    let dry_run: Vec<&str> = match r.query.get("dryRun") {
        Some(d) => vec![d.as_str()],
        None => from_body("dryRun")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|v| v.as_str().unwrap_or_default()).collect())
            .unwrap_or_default(),
    };
    causes.extend(dry_run_cause(&dry_run));
    refused_options("DeleteOptions", &causes)
}

/// A list's or a watch's options, checked as kube-apiserver checks them
/// (`ValidateListOptions`, with the WatchList feature on): a list's `resourceVersionMatch` needs
/// a `resourceVersion` (not `0` for `Exact`) and no `continue`, and a list takes no
/// `sendInitialEvents`; a watch's `resourceVersionMatch` is `NotOlderThan`, and only beside
/// `sendInitialEvents`, which needs it.
fn list_options(r: &Req, watch: bool) -> Result<(), ApiError> {
    use crate::validation::Cause;
    let forbidden = |field: &str, detail: &str| Cause {
        reason: "FieldValueForbidden",
        field: field.into(),
        message: format!("Forbidden: {detail}"),
    };
    let not_supported = |value: &str, supported: &str| Cause {
        reason: "FieldValueNotSupported",
        field: "resourceVersionMatch".into(),
        message: format!(
            "Unsupported value: {}: supported values: {supported}",
            go_quote(value)
        ),
    };
    let param = |k: &str| r.query.get(k).map(String::as_str).unwrap_or_default();
    let matching = param("resourceVersionMatch");
    let send_initial = r.query.contains_key("sendInitialEvents");
    let mut causes = Vec::new();
    if watch {
        if send_initial && matching != "NotOlderThan" {
            causes.push(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !matching.is_empty() {
            if !send_initial {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if matching != "NotOlderThan" {
                causes.push(not_supported(matching, "\"NotOlderThan\""));
            }
        }
    } else {
        if !matching.is_empty() {
            if param("resourceVersion").is_empty() {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !param("continue").is_empty() {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if !matches!(matching, "Exact" | "NotOlderThan") {
                causes.push(not_supported(matching, "\"Exact\", \"NotOlderThan\", \"\""));
            }
            if matching == "Exact" && param("resourceVersion") == "0" {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if send_initial {
            causes.push(forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
    }
    refused_options("ListOptions", &causes)
}

/// Go's `unicode.IsPrint`, as far as the standard library can tell: not a control character,
/// and no space but the ASCII one. (Format characters such as U+200B, which Go also refuses,
/// are taken as printable.)
fn printable(c: char) -> bool {
    c == ' ' || !(c.is_control() || c.is_whitespace())
}

/// `s` quoted as Go's `%q` quotes it (`strconv.Quote`), for the values in a 422's causes.
fn go_quote(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if u32::from(c) < 0x80 && !printable(c) => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)))
            }
            c if !printable(c) && u32::from(c) <= 0xffff => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)))
            }
            c if !printable(c) => out.push_str(&format!("\\U{:08x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `fieldValidation` `mode` of a custom resource's write whose decoded object is `obj`:
/// with Strict and unknown fields, the real server's error (`strict`: a 400 when the request
/// body is the object, the 422 of a patch whose result has them); otherwise the warnings to
/// send (none with Ignore). Other resources are not checked.
fn check_fields(
    app: &App,
    rt: &ResourceType,
    options: &str,
    mode: FieldValidation,
    obj: impl FnOnce(&Inner) -> Option<Value>,
) -> Result<Vec<String>, ApiError> {
    if mode == FieldValidation::Ignore || rt.crd.is_none() {
        return Ok(Vec::new());
    }
    let unknown = {
        let inner = app.store.lock();
        match (inner.crd_schema(rt), obj(&inner)) {
            (Some(schema), Some(obj)) => {
                Some((crate::validation::schema::unknown_fields(schema, &obj), obj))
            }
            _ => None,
        }
    };
    let Some((unknown, obj)) = unknown.filter(|(u, _)| !u.is_empty()) else {
        return Ok(Vec::new());
    };
    let texts: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field {}", Value::String(f.clone())))
        .collect();
    if mode == FieldValidation::Warn {
        return Ok(texts);
    }
    let error = format!("strict decoding error: {}", texts.join(", "));
    if options == "PatchOptions" {
        let cause = crate::validation::Cause {
            reason: "FieldValueInvalid",
            field: "patch".into(),
            message: format!("Invalid value: {}: {error}", Value::String(obj.to_string())),
        };
        return Err(ApiError::invalid_fields("", "", "", &[cause]));
    }
    Err(ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: {error}",
        kind = rt.kind,
        version = rt.version
    )))
}

/// The answer (or error) of a write with `Warning: 299 - "TEXT"` headers.
fn warned(result: Result<Response, ApiError>, warnings: &[String]) -> Response {
    let mut resp = result.unwrap_or_else(IntoResponse::into_response);
    for w in warnings {
        let text = format!("299 - {}", Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

/// Handle a request on a resource path.
pub async fn handle(app: &App, p: super::route::ObjectPath, r: Req) -> Result<Response, ApiError> {
    let rt = app
        .store
        .lock()
        .resource(&p.group, &p.version, &p.plural)
        .ok_or_else(ApiError::no_route)?;
    if !rt.namespaced && p.namespace.is_some() {
        return Err(ApiError::no_route());
    }
    let status = match p.sub.as_deref() {
        None => false,
        Some("status") if rt.status => true,
        Some("binding") if p.group.is_empty() && p.plural == "pods" && r.method == Method::POST => {
            let name = p.name.as_deref().ok_or_else(ApiError::no_route)?;
            let body = parse_json(&r)?;
            write(app, &r, |i| {
                bind(i, &rt, p.namespace.as_deref(), name, &body)
            })?;
            return Ok(json_response(
                201,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Success", "code": 201}),
            ));
        }
        Some("scale") if has_scale(&rt) => {
            let name = p.name.as_deref().ok_or_else(ApiError::no_route)?;
            return scale(app, &rt, p.namespace.as_deref(), name, &r);
        }
        Some(_) => return Err(ApiError::no_route()),
    };
    let ns = p.namespace.as_deref();
    let name = p.name.as_deref();
    let store = &app.store;
    match (&r.method, name) {
        (&Method::GET, _) if r.flag("watch") => {
            let (labels, fields) = selectors(&r, name)?;
            list_options(&r, true)?;
            let params = WatchParams {
                namespace: p.namespace.clone(),
                resource_version: r.query.get("resourceVersion").cloned(),
                labels,
                fields,
                bookmarks: r.flag("allowWatchBookmarks"),
                send_initial: r.flag("sendInitialEvents"),
                timeout: r
                    .query
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse().ok())
                    .map(Duration::from_secs),
                table: r
                    .wants_table()
                    .then(|| Include::parse(r.query.get("includeObject").map(String::as_str))),
            };
            Ok(watch::serve(store.clone(), rt, params))
        }
        (&Method::GET, Some(n)) => {
            let inner = store.lock();
            let obj = inner.get(&rt, ns, n)?;
            if r.wants_table() {
                let inc = Include::parse(r.query.get("includeObject").map(String::as_str));
                return Ok(json_response(
                    200,
                    &table::build(&inner, &rt, &[obj], inner.rv, inc),
                ));
            }
            Ok(json_response(200, &obj))
        }
        (&Method::GET, None) => list(app, &rt, ns, &r),
        (&Method::POST, None) => {
            let mode = write_options(&r, "CreateOptions", None)?;
            let body = parse_json(&r)?;
            let warnings = check_fields(app, &rt, "CreateOptions", mode, |_| Some(body.clone()))?;
            let manager = manager_of(&r);
            let obj = write(app, &r, |i| i.create_by(&rt, ns, body, Some(manager)));
            Ok(warned(obj.map(|o| json_response(201, &o)), &warnings))
        }
        (&Method::PUT, Some(n)) => {
            let mode = write_options(&r, "UpdateOptions", None)?;
            let body = parse_json(&r)?;
            let warnings = check_fields(app, &rt, "UpdateOptions", mode, |_| Some(body.clone()))?;
            let manager = manager_of(&r);
            let obj = write(app, &r, |i| {
                i.update_by(&rt, ns, n, body, status, Some(manager))
            });
            Ok(warned(obj.map(|o| json_response(200, &o)), &warnings))
        }
        (&Method::PATCH, Some(n)) => {
            let pt = PatchType::from_content_type(r.header("content-type"))?;
            let mode = write_options(&r, "PatchOptions", Some(pt))?;
            let body = patch::parse_body(pt, &r.body)?;
            // An apply's unknown fields are the structured merge's to refuse.
            let warnings = if pt == PatchType::Apply {
                Vec::new()
            } else {
                check_fields(app, &rt, "PatchOptions", mode, |i| {
                    let live = i.get(&rt, ns, n).ok()?;
                    patch::apply_patch(pt, &live, &body).ok()
                })?
            };
            let by = Manager {
                // An apply names its manager (`write_options` refused one that does not).
                name: match pt {
                    PatchType::Apply => r.query.get("fieldManager").map(String::as_str),
                    _ => Some(manager_of(&r)),
                },
                // As Go's `strconv.ParseBool`, which the query's conversion uses.
                force: r.query.get("force").is_some_and(|f| {
                    matches!(f.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True")
                }),
            };
            let (existed, obj) = write(app, &r, |i| {
                let existed = i.exists(&rt, ns, n);
                (existed, i.patch(&rt, ns, n, pt, &body, status, by))
            });
            let code = if existed { 200 } else { 201 };
            Ok(warned(obj.map(|o| json_response(code, &o)), &warnings))
        }
        (&Method::DELETE, Some(n)) => {
            let body = if r.body.is_empty() {
                None
            } else {
                Some(parse_json(&r)?)
            };
            delete_options(&r, body.as_ref())?;
            let opts = DeleteOptions::from_parts(body.as_ref(), &r.query);
            let obj = write(app, &r, |i| i.delete(&rt, ns, n, &opts))?;
            Ok(json_response(200, &obj))
        }
        (&Method::DELETE, None) => {
            let body = if r.body.is_empty() {
                None
            } else {
                Some(parse_json(&r)?)
            };
            delete_options(&r, body.as_ref())?;
            let opts = DeleteOptions::from_parts(body.as_ref(), &r.query);
            let (labels, fields) = selectors(&r, None)?;
            // On a throwaway copy with `dryRun=All`, as a single delete.
            let list = write(app, &r, |inner| {
                let targets: Vec<Value> = inner
                    .select(&rt, ns, &labels, &fields)
                    .into_iter()
                    .map(std::borrow::Cow::into_owned)
                    .collect();
                let mut items = Vec::new();
                for o in targets {
                    let o_ns = crate::meta::namespace(&o).to_string();
                    let o_ns = (!o_ns.is_empty()).then_some(o_ns);
                    items.push(inner.delete(&rt, o_ns.as_deref(), crate::meta::name(&o), &opts)?);
                }
                Ok::<_, ApiError>(
                    json!({"kind": rt.list_kind(), "apiVersion": rt.api_version(),
                    "metadata": {"resourceVersion": inner.rv.to_string()}, "items": items}),
                )
            })?;
            Ok(json_response(200, &list))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// Whether a kind has a `scale` subresource (of the kinds the sandbox serves, StatefulSets).
pub fn has_scale(rt: &ResourceType) -> bool {
    rt.group == "apps" && rt.plural == "statefulsets"
}

/// The `autoscaling/v1` `Scale` of a StatefulSet.
fn scale_of(o: &Value) -> Value {
    let m = &o["metadata"];
    let selector = o["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|l| {
            l.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"]},
        "spec": {"replicas": o["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {"replicas": o["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector},
    })
}

/// `GET`, `PUT` and `PATCH` of `statefulsets/NAME/scale`, as `kubectl scale` sends them: the
/// Scale's `spec.replicas` is written to the object's, by the request's field manager.
fn scale(
    app: &App,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    r: &Req,
) -> Result<Response, ApiError> {
    let current = scale_of(&app.store.lock().get(rt, ns, name)?);
    let wanted = match r.method {
        Method::GET => return Ok(json_response(200, &current)),
        Method::PUT => parse_json(r)?,
        Method::PATCH => {
            let pt = PatchType::from_content_type(r.header("content-type"))?;
            if pt == PatchType::Apply {
                return Err(ApiError::method_not_allowed());
            }
            patch::apply_patch(pt, &current, &patch::parse_body(pt, &r.body)?)?
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    let Some(replicas) = wanted["spec"]["replicas"].as_i64() else {
        return Err(ApiError::bad_request("spec.replicas: Required value"));
    };
    let body = json!({"spec": {"replicas": replicas}});
    let by = Manager {
        name: Some(manager_of(r)),
        force: false,
    };
    let obj = write(app, r, |i| {
        i.patch(rt, ns, name, PatchType::Merge, &body, false, by)
    })?;
    Ok(json_response(200, &scale_of(&obj)))
}

/// `POST pods/NAME/binding`, as the scheduler does: sets `spec.nodeName` and the
/// `PodScheduled` condition. A pod is bound once; binding a deleting pod is refused.
fn bind(
    inner: &mut Inner,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    binding: &Value,
) -> Result<(), ApiError> {
    if crate::meta::name(binding) != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    let node = binding["target"]["name"].as_str().unwrap_or_default();
    if node.is_empty() {
        return Err(ApiError::invalid(
            "Binding",
            name,
            "target.name: Required value",
        ));
    }
    let mut pod = inner.get(rt, ns, name)?;
    let conflict = |message: String| ApiError {
        code: 409,
        reason: "Conflict",
        message: format!("Operation cannot be fulfilled on pods/binding \"{name}\": {message}"),
        details: Some(json!({"name": name, "kind": "pods/binding"})),
    };
    if crate::meta::is_deleting(&pod) {
        return Err(conflict(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        )));
    }
    if let Some(current) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Err(conflict(format!(
            "pod {name} is already assigned to node \"{current}\""
        )));
    }
    pod["spec"]["nodeName"] = json!(node);
    let mut pod = inner.bind_node(rt, ns, name, pod)?;
    let scheduled = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null,
        "lastTransitionTime": crate::meta::now()});
    match pod["status"]["conditions"].as_array_mut() {
        Some(conds) => {
            conds.retain(|c| c["type"] != "PodScheduled");
            conds.push(scheduled);
        }
        None => pod["status"]["conditions"] = json!([scheduled]),
    }
    inner.update(rt, ns, name, pod, true)?;
    Ok(())
}

fn list(app: &App, rt: &ResourceType, ns: Option<&str>, r: &Req) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(r, None)?;
    list_options(r, false)?;
    let page = Page::of(r)?;
    let inner = app.store.lock();
    // Paged as a real server pages it (a table, as kubectl asks for, is served whole).
    if let (Some(limit), false) = (page.limit, r.wants_table()) {
        let after = page.after.as_ref().map(|(n, m)| (n.as_str(), m.as_str()));
        let (items, next) = inner.select_page(rt, ns, &labels, &fields, after, limit);
        // Every page carries the first page's resourceVersion, as a real server's does (it
        // serves them all from that snapshot; the sandbox serves the pages from its present
        // state, and a watch from that version replays what changed in between).
        let rv = page.rv.unwrap_or(inner.rv);
        let token = next.map(|(namespace, name)| Page::token(rv, &namespace, &name));
        return Ok(list_response(rt, rv, token.as_deref(), &items));
    }
    let items = inner.select(rt, ns, &labels, &fields);
    if r.wants_table() {
        let inc = Include::parse(r.query.get("includeObject").map(String::as_str));
        let items: Vec<Value> = items
            .into_iter()
            .map(std::borrow::Cow::into_owned)
            .collect();
        return Ok(json_response(
            200,
            &table::build(&inner, rt, &items, inner.rv, inc),
        ));
    }
    Ok(list_response(rt, inner.rv, None, &items))
}

/// A list's paging: `limit` (0 or absent: the whole list) and the `continue` token of the page
/// before, which holds the list's resourceVersion and the last object's namespace and name.
struct Page {
    limit: Option<usize>,
    after: Option<(String, String)>,
    rv: Option<u64>,
}

impl Page {
    fn of(r: &Req) -> Result<Page, ApiError> {
        let limit = match r.query.get("limit").map(|l| l.parse::<i64>()) {
            None => None,
            Some(Ok(l)) if l > 0 => Some(l as usize),
            Some(Ok(_)) => None,
            Some(Err(_)) => {
                return Err(ApiError::bad_request(format!(
                    "limit: Invalid value: {:?}: must be an integer",
                    r.query.get("limit").cloned().unwrap_or_default()
                )))
            }
        };
        let Some(token) = r.query.get("continue").filter(|t| !t.is_empty()) else {
            return Ok(Page {
                limit,
                after: None,
                rv: None,
            });
        };
        let invalid =
            |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|e| invalid(&e.to_string()))?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(&e.to_string()))?;
        let (Some(rv), Some(namespace), Some(name)) = (
            v["rv"].as_u64(),
            v["namespace"].as_str(),
            v["name"].as_str(),
        ) else {
            return Err(invalid("incorrect encoded start resourceVersion"));
        };
        Ok(Page {
            limit,
            after: Some((namespace.to_string(), name.to_string())),
            rv: Some(rv),
        })
    }

    fn token(rv: u64, namespace: &str, name: &str) -> String {
        use base64::Engine as _;
        let v = json!({"v": "meta.k8s.io/v1", "rv": rv, "namespace": namespace, "name": name});
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    }
}

/// The JSON of a list, written from the (borrowed) items without building a copy of them.
/// The keys are in the order serde_json writes an object's.
fn list_response(
    rt: &ResourceType,
    rv: u64,
    continue_token: Option<&str>,
    items: &[std::borrow::Cow<'_, Value>],
) -> Response {
    let text = |s: &str| Value::String(s.into()).to_string();
    let mut body = format!("{{\"apiVersion\":{},\"items\":[", text(&rt.api_version()));
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&item.to_string());
    }
    let more = continue_token
        .map(|t| format!("\"continue\":{},", text(t)))
        .unwrap_or_default();
    body.push_str(&format!(
        "],\"kind\":{},\"metadata\":{{{more}\"resourceVersion\":{}}}}}",
        text(&rt.list_kind()),
        text(&rv.to_string())
    ));
    (
        axum::http::StatusCode::OK,
        [("content-type", "application/json")],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_as_go_quotes_them() {
        assert_eq!(go_quote("plain"), r#""plain""#);
        assert_eq!(go_quote("a\tb\n"), r#""a\tb\n""#);
        assert_eq!(go_quote("q\"\\"), r#""q\"\\""#);
        assert_eq!(go_quote("\u{1}\u{7f}"), r#""\x01\x7f""#);
        assert_eq!(go_quote("é\u{85}\u{a0}"), r#""é\u0085\u00a0""#);
    }

    #[test]
    fn only_the_ascii_space_is_a_printable_space() {
        assert!(printable(' ') && printable('m') && printable('é') && printable('-'));
        assert!(!printable('\t') && !printable('\u{a0}') && !printable('\u{2028}'));
    }
}
