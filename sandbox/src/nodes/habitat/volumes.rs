//! A pod's volumes made real under its container's `FS_ROOT`, as a kubelet makes them.
//!
//! ConfigMap, Secret and downward-API volumes are directories of files that change by an atomic
//! swap of the `..data` symlink (each key is a symlink `KEY -> ..data/KEY`): a reader sees the
//! old files or the new ones, never a mix, and a watcher of `..data` (the supervisor's peer file
//! and user.toml watchers) sees one change. `items` choose and rename keys; a `subPath` mount is
//! one file written when the container starts and never updated (as a kubelet does). emptyDirs
//! live in the pod's directory (they survive a container restart and die with the pod) and
//! claims in the nodes' claims directory (they outlive the pod); the container sees either
//! through a symlink at its mount path.

use super::package::{field, under_root};
use k8s_openapi::api::core::v1::{ConfigMap, KeyToPath, Pod, Secret, Volume, VolumeMount};
use kube::runtime::reflector::{ObjectRef, Store};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Files by their path in the volume.
pub type Files = BTreeMap<String, Vec<u8>>;

/// What a volume holds now.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Files projected from an object (ConfigMap, Secret, downward API).
    Files(Files),
    /// A directory that lives outside the container's root (emptyDir, claim).
    Dir(PathBuf),
}

/// Where the objects a pod's volumes project come from, and where directories live.
pub struct Sources<'a> {
    /// The nodes' ConfigMaps.
    pub config_maps: &'a Store<ConfigMap>,
    /// The nodes' Secrets.
    pub secrets: &'a Store<Secret>,
    /// The pod's own directory (emptyDirs).
    pub pod_dir: &'a Path,
    /// The directory of every claim (one subdirectory per namespace and claim).
    pub claims_dir: &'a Path,
    /// The pod's IP (downward API `status.podIP`).
    pub ip: &'a str,
}

fn pick(all: BTreeMap<String, Vec<u8>>, items: Option<&Vec<KeyToPath>>) -> Option<Files> {
    match items {
        None => Some(all),
        Some(items) => {
            let mut out = Files::new();
            for i in items {
                // A missing key of a required source keeps the container from starting.
                out.insert(i.path.clone(), all.get(&i.key)?.clone());
            }
            Some(out)
        }
    }
}

/// What `volume` of `pod` holds now; `None` while a required object or key is missing (the
/// container waits, as a kubelet's does in ContainerCreating).
pub fn content(pod: &Pod, volume: &Volume, src: &Sources<'_>) -> Option<Content> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    if let Some(cm) = &volume.config_map {
        let optional = cm.optional.unwrap_or(false);
        let Some(obj) = src.config_maps.get(&ObjectRef::new(&cm.name).within(&ns)) else {
            return optional.then(|| Content::Files(Files::new()));
        };
        let mut all: BTreeMap<String, Vec<u8>> = obj
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
            .collect();
        for (k, v) in obj.binary_data.iter().flatten() {
            all.insert(k.clone(), v.0.clone());
        }
        return pick(all, cm.items.as_ref()).map(Content::Files);
    }
    if let Some(s) = &volume.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let optional = s.optional.unwrap_or(false);
        let Some(obj) = src.secrets.get(&ObjectRef::new(&name).within(&ns)) else {
            return optional.then(|| Content::Files(Files::new()));
        };
        let mut all: BTreeMap<String, Vec<u8>> = obj
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        // A server that keeps stringData as written (the embedded one may) still means it.
        for (k, v) in obj.string_data.iter().flatten() {
            all.entry(k.clone())
                .or_insert_with(|| v.clone().into_bytes());
        }
        return pick(all, s.items.as_ref()).map(Content::Files);
    }
    if let Some(d) = &volume.downward_api {
        let mut files = Files::new();
        for item in d.items.iter().flatten() {
            let value = match &item.field_ref {
                Some(f) => field(pod, &f.field_path, src.ip)?,
                None => String::new(),
            };
            files.insert(item.path.clone(), value.into_bytes());
        }
        return Some(Content::Files(files));
    }
    if volume.empty_dir.is_some() {
        return Some(Content::Dir(src.pod_dir.join("volumes").join(&volume.name)));
    }
    if let Some(c) = &volume.persistent_volume_claim {
        return Some(Content::Dir(src.claims_dir.join(&ns).join(&c.claim_name)));
    }
    // Other kinds (hostPath, projected, ...) are an empty directory of the pod.
    Some(Content::Dir(src.pod_dir.join("volumes").join(&volume.name)))
}

/// Whether every ConfigMap and Secret that `pod`'s volumes require is there, with the keys
/// their `items` pick: until then a kubelet keeps the pod in ContainerCreating, its phase
/// `Pending`. (Environment variables from a missing object keep a real container from starting
/// too, `CreateContainerConfigError`; the real supervisors' nodes check those when they start
/// one, [`super::package::container_env`].)
pub fn sources_present(pod: &Pod, config_maps: &Store<ConfigMap>, secrets: &Store<Secret>) -> bool {
    // Only the volumes projected from objects are looked at: the directories are not used.
    let src = Sources {
        config_maps,
        secrets,
        pod_dir: Path::new(""),
        claims_dir: Path::new(""),
        ip: "",
    };
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| v.config_map.is_some() || v.secret.is_some())
        .all(|v| content(pod, v, &src).is_some())
}

/// Every mount of a container with what its volume holds now; `None` while one waits.
pub fn mounts<'p>(
    pod: &'p Pod,
    mounts: &'p [VolumeMount],
    src: &Sources<'_>,
) -> Option<Vec<(&'p VolumeMount, Content)>> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    let mut out = Vec::new();
    for m in mounts {
        let v = volumes.and_then(|vs| vs.iter().find(|v| v.name == m.name))?;
        out.push((m, content(pod, v, src)?));
    }
    Some(out)
}

/// Makes `mount` real under `fs_root` with `content`: a projected directory, one file for a
/// `subPath`, or a symlink to a directory.
pub fn mount(fs_root: &Path, mount: &VolumeMount, content: &Content) -> io::Result<()> {
    let at = under_root(fs_root, &mount.mount_path);
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let sub = mount.sub_path.as_deref().filter(|s| !s.is_empty());
    match (content, sub) {
        (Content::Files(files), Some(sub)) => {
            let text = files.get(sub).cloned().unwrap_or_default();
            std::fs::write(&at, text)
        }
        (Content::Files(files), None) => write_atomic(&at, files),
        (Content::Dir(dir), sub) => {
            let target = match sub {
                Some(s) => dir.join(s),
                None => dir.clone(),
            };
            std::fs::create_dir_all(&target)?;
            if std::fs::symlink_metadata(&at).is_ok() {
                std::fs::remove_dir_all(&at).or_else(|_| std::fs::remove_file(&at))?;
            }
            std::os::unix::fs::symlink(&target, &at)
        }
    }
}

static STAMP: AtomicU64 = AtomicU64::new(0);

/// Writes `files` into `dir` the way a kubelet updates a projected volume: into a new
/// timestamped directory, then `..data` is swapped to it by a rename (atomic), then each
/// top-level name is a symlink through `..data`; the old directory and names no longer
/// projected are removed.
pub fn write_atomic(dir: &Path, files: &Files) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let stamp = format!(
        "..{}.{}",
        chrono::Utc::now().format("%Y_%m_%d_%H_%M_%S"),
        STAMP.fetch_add(1, Ordering::Relaxed)
    );
    let new = dir.join(&stamp);
    std::fs::create_dir(&new)?;
    for (path, text) in files {
        let file = new.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(file, text)?;
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    let tops: std::collections::BTreeSet<&str> = files
        .keys()
        .filter_map(|p| p.split('/').find(|s| !s.is_empty()))
        .collect();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(top), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale = if name.starts_with("..") {
            name != "..data" && name != stamp
        } else {
            !tops.contains(name.as_str())
        };
        if stale {
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(path)?;
            } else {
                std::fs::remove_file(path)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).expect("readable")
    }

    #[test]
    fn a_projected_volume_changes_by_one_swap_of_its_data_link() {
        let dir = tempfile::tempdir().expect("tmp");
        let vol = dir.path().join("peer");
        let mut files = Files::new();
        files.insert("peer-ip".into(), b"127.1.0.2\n".to_vec());
        files.insert("old".into(), b"x".to_vec());
        write_atomic(&vol, &files).expect("written");
        assert_eq!(read(&vol.join("peer-ip")), "127.1.0.2\n");
        let first = std::fs::read_link(vol.join("..data")).expect("a link");
        files.remove("old");
        files.insert("peer-ip".into(), b"127.1.0.3\n".to_vec());
        write_atomic(&vol, &files).expect("rewritten");
        assert_eq!(read(&vol.join("peer-ip")), "127.1.0.3\n");
        assert_eq!(
            std::fs::read_link(vol.join("peer-ip")).expect("a link"),
            Path::new("..data/peer-ip")
        );
        assert_ne!(
            std::fs::read_link(vol.join("..data")).expect("a link"),
            first
        );
        let mut names: Vec<String> = std::fs::read_dir(&vol)
            .expect("listable")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "..data, one stamp, peer-ip: {names:?}");
        assert!(!vol.join("old").exists());
    }

    #[test]
    fn a_sub_path_mount_is_one_file_and_a_dir_mount_a_link() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().join("root");
        let m = VolumeMount {
            name: "id".into(),
            mount_path: "/hab/sup/default/MEMBER_ID".into(),
            sub_path: Some("MEMBER_ID".into()),
            ..VolumeMount::default()
        };
        let files: Files = [("MEMBER_ID".to_string(), b"web-0".to_vec())].into();
        mount(&root, &m, &Content::Files(files)).expect("mounted");
        assert_eq!(read(&root.join("hab/sup/default/MEMBER_ID")), "web-0");
        let data = dir.path().join("claims/ns/data-web-0");
        let m = VolumeMount {
            name: "data".into(),
            mount_path: "/hab/svc/web/data".into(),
            ..VolumeMount::default()
        };
        mount(&root, &m, &Content::Dir(data.clone())).expect("mounted");
        std::fs::write(root.join("hab/svc/web/data/f"), "kept").expect("writable");
        assert_eq!(read(&data.join("f")), "kept");
    }
}
