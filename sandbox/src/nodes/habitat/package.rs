//! What a Habitat pod's container runs: the package its image stands for, made by hand in the
//! container's `FS_ROOT` (there is no Builder), and the supervisor's command line and
//! environment as a kubelet and the pod's network namespace would give them.

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::runtime::reflector::{ObjectRef, Store};
use std::io;
use std::path::{Path, PathBuf};

/// The gossip, HTTP gateway and control gateway ports of a supervisor (its defaults).
pub const GOSSIP_PORT: u16 = 9638;
/// The HTTP gateway's port.
pub const HTTP_PORT: u16 = 9631;
/// The control gateway's port.
pub const CTL_PORT: u16 = 9632;

/// Writes the package `ident` (`origin/name/version/release`) under `fs_root` as a local
/// install: a `native` package (hooks run with the supervisor's own PATH; a `standard` one
/// would make the supervisor fetch core/busybox-static from Builder) whose run hook prints its
/// identity and sleeps, whose health check fails while `{svc_data_path}/unhealthy` exists, with
/// a `default.toml` and a config template that renders every setting. It exports `port`, and
/// declares each of `binds` (a required bind on a service exporting `port`): the supervisor
/// refuses a `--bind` the package does not declare. Returns its directory.
pub fn write_package(fs_root: &Path, ident: &str, binds: &[String]) -> io::Result<PathBuf> {
    let parts: Vec<&str> = ident.split('/').collect();
    let [origin, name, version, release] = parts.as_slice() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{ident} is not a fully qualified package ident"),
        ));
    };
    let dir = fs_root
        .join("hab/pkgs")
        .join(origin)
        .join(name)
        .join(version)
        .join(release);
    std::fs::create_dir_all(dir.join("hooks"))?;
    std::fs::create_dir_all(dir.join("config"))?;
    let files: [(&str, String); 12] = [
        ("IDENT", format!("{ident}\n")),
        ("TARGET", "x86_64-linux\n".into()),
        ("SVC_USER", "root\n".into()),
        ("SVC_GROUP", "root\n".into()),
        ("PACKAGE_TYPE", "native\n".into()),
        ("EXPORTS", "port=port\n".into()),
        (
            "default.toml",
            "port = 6379\nmessage = \"hello from default.toml\"\n".into(),
        ),
        (
            "MANIFEST",
            format!("# {origin} / {name}\nmade by the simulated nodes for {ident}\n"),
        ),
        (
            // Every setting, user.toml's included: a test reads what reached the service here.
            "config/service.toml",
            "{{toToml cfg}}\n".into(),
        ),
        (
            "hooks/run",
            "#!/bin/sh\nexec 2>&1\necho \"run hook: {{pkg.ident}} member={{sys.member_id}} \
             ip={{sys.ip}} port={{cfg.port}}\"\nexec sleep infinity\n"
                .into(),
        ),
        (
            "hooks/health-check",
            "#!/bin/sh\n# 0 ok, 2 critical: critical while the flag file exists.\n\
             if [ -f \"{{pkg.svc_data_path}}/unhealthy\" ]; then echo unhealthy; exit 2; fi\n\
             echo healthy\nexit 0\n"
                .into(),
        ),
        ("hooks/.keep", String::new()),
    ];
    for (file, text) in files {
        std::fs::write(dir.join(file), text)?;
    }
    std::fs::remove_file(dir.join("hooks/.keep"))?;
    if !binds.is_empty() {
        let lines: String = binds.iter().map(|b| format!("{b}=port\n")).collect();
        std::fs::write(dir.join("BINDS"), lines)?;
    }
    for hook in ["hooks/run", "hooks/health-check"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join(hook), std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(dir)
}

/// The names of the binds in the container's arguments (`--bind NAME:SERVICE.GROUP`).
pub fn bind_names(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = match a.strip_prefix("--bind=") {
            Some(v) => Some(v.to_string()),
            None if a == "--bind" => it.next().cloned(),
            None => None,
        };
        if let Some((name, _)) = value.as_deref().and_then(|v| v.split_once(':')) {
            out.push(name.to_string());
        }
    }
    out
}

/// The container's arguments as the supervisor in the pod gets them, on the pod's IP: a pod's
/// network namespace makes `0.0.0.0` its own IP, here the pod IP on loopback stands for it, so
/// each `--listen-*` flag with `0.0.0.0` is moved to `ip` and those missing are added, with
/// `--sys-ip-address`. `--peer-watch-file P` is not relocated by `FS_ROOT`: it becomes the file
/// under `fs_root`.
pub fn supervisor_args(args: &[String], ip: &str, fs_root: &Path) -> Vec<String> {
    let listens = [
        ("--listen-gossip", GOSSIP_PORT),
        ("--listen-http", HTTP_PORT),
        ("--listen-ctl", CTL_PORT),
    ];
    let mut out = Vec::with_capacity(args.len() + 8);
    let mut seen: Vec<&str> = Vec::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let takes_value = listens.iter().any(|(f, _)| *f == flag)
            || flag == "--sys-ip-address"
            || flag == "--peer-watch-file";
        if !takes_value {
            out.push(a.clone());
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => it.next().cloned().unwrap_or_default(),
        };
        seen.push(
            listens
                .iter()
                .find(|(f, _)| *f == flag)
                .map_or(flag, |(f, _)| f),
        );
        let value = match flag {
            "--peer-watch-file" => under_root(fs_root, &value).display().to_string(),
            "--sys-ip-address" if value == "0.0.0.0" => ip.to_string(),
            "--sys-ip-address" => value,
            _ => match value.rsplit_once(':') {
                Some(("0.0.0.0", port)) => format!("{ip}:{port}"),
                _ => value,
            },
        };
        if flag == "--sys-ip-address" {
            seen.push("--sys-ip-address");
        }
        out.push(flag.to_string());
        out.push(value);
    }
    for (flag, port) in listens {
        if !seen.contains(&flag) {
            out.extend([flag.to_string(), format!("{ip}:{port}")]);
        }
    }
    if !seen.contains(&"--sys-ip-address") {
        out.extend(["--sys-ip-address".to_string(), ip.to_string()]);
    }
    out
}

/// `path` (absolute, as the container sees it) under `fs_root`.
pub fn under_root(fs_root: &Path, path: &str) -> PathBuf {
    fs_root.join(path.trim_start_matches('/'))
}

/// The container's environment (`env`): plain values, and `valueFrom` a field of the pod, a
/// Secret's or a ConfigMap's key. A missing optional source leaves the variable out; a missing
/// required one is an error the kubelet reports as `CreateContainerConfigError` would.
pub fn container_env(
    pod: &Pod,
    c: &Container,
    ip: &str,
    config_maps: &Store<ConfigMap>,
    secrets: &Store<Secret>,
) -> Result<Vec<(String, String)>, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut out = Vec::new();
    for e in c.env.iter().flatten() {
        if let Some(v) = &e.value {
            out.push((e.name.clone(), v.clone()));
            continue;
        }
        let Some(from) = &e.value_from else {
            out.push((e.name.clone(), String::new()));
            continue;
        };
        let value = if let Some(f) = &from.field_ref {
            field(pod, &f.field_path, ip)
        } else if let Some(k) = &from.secret_key_ref {
            let found = secrets
                .get(&ObjectRef::new(&k.name).within(&ns))
                .and_then(|o| o.data.as_ref().and_then(|d| d.get(&k.key)).cloned())
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            match found {
                None if !k.optional.unwrap_or(false) => {
                    return Err(format!(
                        "env {}: Secret {} has no key {}",
                        e.name, k.name, k.key
                    ))
                }
                found => found,
            }
        } else if let Some(k) = &from.config_map_key_ref {
            let found = config_maps
                .get(&ObjectRef::new(&k.name).within(&ns))
                .and_then(|o| o.data.as_ref().and_then(|d| d.get(&k.key)).cloned());
            match found {
                None if !k.optional.unwrap_or(false) => {
                    return Err(format!(
                        "env {}: ConfigMap {} has no key {}",
                        e.name, k.name, k.key
                    ))
                }
                found => found,
            }
        } else {
            None
        };
        if let Some(v) = value {
            out.push((e.name.clone(), v));
        }
    }
    Ok(out)
}

/// A pod field as the downward API gives it (`metadata.name`, `metadata.labels['k']`,
/// `status.podIP`, ...).
pub fn field(pod: &Pod, path: &str, ip: &str) -> Option<String> {
    let m = &pod.metadata;
    let keyed = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['"))
            .and_then(|r| r.strip_suffix("']"))
    };
    let lines = |map: Option<&std::collections::BTreeMap<String, String>>| {
        map.map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
    };
    match path {
        "metadata.name" => m.name.clone(),
        "metadata.namespace" => m.namespace.clone(),
        "metadata.uid" => m.uid.clone(),
        "metadata.labels" => Some(lines(m.labels.as_ref())),
        "metadata.annotations" => Some(lines(m.annotations.as_ref())),
        "status.podIP" => Some(ip.to_string()),
        "spec.nodeName" => Some(super::super::kubelet::NODE_NAME.to_string()),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone()),
        _ => {
            if let Some(k) = keyed("metadata.labels") {
                m.labels.as_ref().and_then(|l| l.get(k)).cloned()
            } else if let Some(k) = keyed("metadata.annotations") {
                m.annotations.as_ref().and_then(|l| l.get(k)).cloned()
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_supervisor_listens_on_the_pod_ip_and_reads_the_peer_file_under_its_root() {
        let root = Path::new("/tmp/r/c1");
        let args = s(&[
            "--topology",
            "leader",
            "--peer-watch-file",
            "/habitat-operator/peer/peer-ip",
            "--listen-http",
            "0.0.0.0:9631",
        ]);
        let out = supervisor_args(&args, "127.5.0.2", root);
        assert_eq!(
            out,
            s(&[
                "--topology",
                "leader",
                "--peer-watch-file",
                "/tmp/r/c1/habitat-operator/peer/peer-ip",
                "--listen-http",
                "127.5.0.2:9631",
                "--listen-gossip",
                "127.5.0.2:9638",
                "--listen-ctl",
                "127.5.0.2:9632",
                "--sys-ip-address",
                "127.5.0.2",
            ])
        );
        let inline = supervisor_args(&s(&["--listen-gossip=0.0.0.0:9638"]), "127.5.0.3", root);
        assert_eq!(inline[..2], s(&["--listen-gossip", "127.5.0.3:9638"]));
        assert_eq!(inline.iter().filter(|a| *a == "--listen-gossip").count(), 1);
    }

    #[test]
    fn a_package_is_a_local_install_with_hooks() {
        let dir = tempfile::tempdir().expect("tmp");
        let binds = bind_names(&s(&["--group", "g", "--bind", "db:postgresql.default"]));
        assert_eq!(binds, s(&["db"]));
        let p =
            write_package(dir.path(), "acme/web/0.1.0/20250101000001", &binds).expect("written");
        let declared = std::fs::read_to_string(p.join("BINDS")).expect("BINDS");
        assert_eq!(declared, "db=port\n");
        assert!(p.ends_with("hab/pkgs/acme/web/0.1.0/20250101000001"));
        let ident = std::fs::read_to_string(p.join("IDENT")).expect("IDENT");
        assert_eq!(ident, "acme/web/0.1.0/20250101000001\n");
        assert!(p.join("hooks/health-check").is_file() && !p.join("hooks/.keep").exists());
        assert!(write_package(dir.path(), "acme/web", &[]).is_err());
    }
}
