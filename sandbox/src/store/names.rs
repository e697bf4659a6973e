//! Object name and label validation, with the real API server's (v1.36) messages.

use crate::validation::Cause;
use serde_json::Value;

const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const NAME_PART: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && ok(&b[0])
        && ok(&b[b.len() - 1])
        && b.iter().all(|c| ok(c) || *c == b'-')
}

fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label)
}

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && ok(&b[0])
        && ok(&b[b.len() - 1])
        && b.iter().all(|c| ok(c) || matches!(c, b'-' | b'_' | b'.'))
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Whether objects of this resource are named like DNS labels (no dots) rather than DNS
/// subdomains.
fn label_named(group: &str, plural: &str) -> bool {
    matches!(
        (group, plural),
        ("", "namespaces") | ("", "services") | ("apps", "statefulsets") | ("apps", "deployments")
    )
}

/// The errors of `metadata.name` (and `metadata.generateName`) of a new object.
pub fn name_causes(group: &str, plural: &str, name: &str, generate: Option<&str>) -> Vec<Cause> {
    let check = |field: &str, value: &str, prefix: bool| -> Option<Cause> {
        // A generateName prefix is checked with a trailing '-' made valid, as the real server.
        let probe = if prefix {
            value.trim_end_matches('-')
        } else {
            value
        };
        if label_named(group, plural) {
            if is_label(probe) {
                return None;
            }
            let detail = if probe.contains('.') && is_subdomain(probe) {
                "must not contain dots"
            } else {
                LABEL
            };
            Some(Cause::invalid(field, &quoted(value), detail))
        } else if is_subdomain(probe) {
            None
        } else {
            Some(Cause::invalid(field, &quoted(value), SUBDOMAIN))
        }
    };
    let mut causes = Vec::new();
    if let Some(g) = generate.filter(|g| !g.is_empty()) {
        causes.extend(check("metadata.generateName", g, true));
    }
    causes.extend(check("metadata.name", name, false));
    causes
}

/// The errors of `metadata.labels`.
pub fn label_causes(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(labels) = obj["metadata"]["labels"].as_object() else {
        return causes;
    };
    let field = "metadata.labels";
    for (k, v) in labels {
        let (prefix, name) = match k.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        if let Some(p) = prefix {
            if !is_subdomain(p) {
                let detail = format!("prefix part {SUBDOMAIN}");
                causes.push(Cause::invalid(field, &quoted(k), &detail));
            }
        }
        if name.len() > 63 {
            let detail = "name part must be no more than 63 bytes";
            causes.push(Cause::invalid(field, &quoted(k), detail));
        } else if !is_name_part(name) {
            causes.push(Cause::invalid(field, &quoted(k), NAME_PART));
        }
        let value = v.as_str().unwrap_or_default();
        if value.len() > 63 {
            let detail = "must be no more than 63 bytes";
            causes.push(Cause::invalid(field, &quoted(value), detail));
        } else if !value.is_empty() && !is_name_part(value) {
            causes.push(Cause::invalid(field, &quoted(value), LABEL_VALUE));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_by_resource() {
        assert!(name_causes("", "configmaps", "a.b-c", None).is_empty());
        assert!(name_causes("", "services", "1abc", None).is_empty());
        let c = name_causes("", "services", "a.b", None);
        assert_eq!(
            c[0].text(),
            "metadata.name: Invalid value: \"a.b\": must not contain dots"
        );
        let c = name_causes("", "configmaps", "Bad_Name", None);
        assert!(c[0].message.contains("RFC 1123 subdomain"), "{c:?}");
        let c = name_causes("", "configmaps", "Bad_x1", Some("Bad_"));
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].field, "metadata.generateName");
        assert!(name_causes("", "pods", "web-abcde", Some("web-")).is_empty());
    }

    #[test]
    fn labels() {
        let o = json!({"metadata": {"labels": {"app.kubernetes.io/name": "x", "a": ""}}});
        assert!(label_causes(&o).is_empty());
        let o = json!({"metadata": {"labels": {"a": "not valid!"}}});
        assert!(label_causes(&o)[0]
            .message
            .starts_with("Invalid value: \"not valid!\": a valid label"));
        let o = json!({"metadata": {"labels": {"bad key!": "v"}}});
        assert!(label_causes(&o)[0]
            .message
            .contains("name part must consist"));
    }
}
