//! Moving a running service over from the original Go operator (docs/migrating.md): the
//! objects that operator made (its StatefulSet with claims from the `persistent` template, a
//! ring key Secret, the `peer-watch-file` ConfigMap) are made by hand as it made them, the old
//! StatefulSet is deleted (its claims stay), the old Habitat is converted with `convert` and
//! applied, and the new Habitat reaches Ready with the same Secret and the same claims.

#[macro_use]
mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret};
use kube::ResourceExt;
use support::{wait_for, Ground};

on_both_grounds!(a_running_service_of_the_original_operator_moves_over_with_its_key_and_claims);

const RING: &str = "example-encrypted-ring-20170829113029";
// examples/encrypted/habitat.yml of github.com/habitat-sh/habitat-operator.
const RING_KEY: &str = "U1lNLVNFQy0xCmV4YW1wbGUtZW5jcnlwdGVkLXJpbmctMjAxNzA4MjkxMTMwMjkKClFGZm9ZTHJOV3NNRk93Tk4wb0F1d3d4WjA1aVBMdTQxSUdGSzJISVFqTlk9";

/// The old Habitat, as `kubectl get habitats.v1beta1.habitat.sh -o yaml` shows it.
fn old_habitat(ns: &str) -> String {
    format!(
        r#"apiVersion: habitat.sh/v1beta1
kind: Habitat
metadata:
  name: redis
  namespace: {ns}
  uid: 5a3c1c6e-1111-2222-3333-444455556666
  resourceVersion: "1234"
  labels: {{app: redis}}
customVersion: v1beta2
spec:
  v1beta2:
    image: habitat/redis-hab
    count: 3
    persistentStorage:
      size: 1Gi
      storageClassName: example-sc
      mountPath: /hab/svc/redis/data
    service:
      name: redis
      topology: leader
      ringSecretName: {RING}
status:
  state: Processed
"#
    )
}

/// What the original operator made for it (pkg/controller/v1beta2: a StatefulSet named after
/// the Habitat, selector `habitat-name`, claim template `persistent`, the shared
/// `peer-watch-file` ConfigMap), and the user's ring key Secret. The ownerReferences to the
/// old Habitat are `owner` (a YAML line of `metadata`, or nothing once the old Habitat was
/// deleted with `--cascade=orphan`).
fn old_objects(owner: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata:
  name: {RING}
  labels: {{habitat: "true", ring-key: "true"}}
type: Opaque
data:
  ring-key: {RING_KEY}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: peer-watch-file
  labels: {{habitat: "true"}}
  {owner}
data:
  peer-watch-file: 10.0.0.7
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: redis
  labels: {{habitat: "true", habitat-name: redis}}
  {owner}
spec:
  replicas: 3
  selector:
    matchLabels: {{habitat-name: redis}}
  podManagementPolicy: Parallel
  updateStrategy: {{type: OnDelete}}
  template:
    metadata:
      labels: {{habitat: "true", habitat-name: redis, topology: leader, operator.habitat.sh/topology: leader}}
    spec:
      containers:
        - name: habitat-service
          image: habitat/redis-hab
          args: [--topology, leader, --peer-watch-file, /habitat-operator/peer-ip, --ring, example-encrypted-ring]
          volumeMounts:
            - {{name: config, mountPath: /habitat-operator, readOnly: true}}
            - {{name: {RING}, mountPath: /hab/cache/keys}}
            - {{name: persistent, mountPath: /hab/svc/redis/data}}
      volumes:
        - name: config
          configMap:
            name: peer-watch-file
            items: [{{key: peer-watch-file, path: peer-ip}}]
        - name: {RING}
          secret:
            secretName: {RING}
            items: [{{key: ring-key, path: {RING}.sym.key}}]
  volumeClaimTemplates:
    - metadata:
        name: persistent
        labels: {{habitat: "true", habitat-name: redis}}
      spec:
        accessModes: [ReadWriteOnce]
        storageClassName: example-sc
        resources: {{requests: {{storage: 1Gi}}}}
"#
    )
}

/// The original operator's CRD (examples/crd.yml, `apiextensions.k8s.io/v1beta1`, no schema),
/// as `apiextensions.k8s.io/v1` must say it now.
const OLD_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: habitats.habitat.sh
spec:
  group: habitat.sh
  scope: Namespaced
  names: {plural: habitats, singular: habitat, kind: Habitat, shortNames: [hab]}
  versions:
    - name: v1beta1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// Runs kubectl without a namespace; panics when it fails.
fn kubectl_cluster(env: &support::Env, args: &[&str]) -> String {
    support::kubectl_at_ok(&env.kubeconfig, args)
}

/// A PersistentVolume pre-bound to `persistent-redis-0` of `ns`, so that claim is Bound (the
/// other two stay Pending: nothing provisions `example-sc`).
fn volume(ns: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata:
  name: {ns}-redis-0
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: example-sc
  persistentVolumeReclaimPolicy: Retain
  hostPath: {{path: /tmp/{ns}-redis-0}}
  claimRef: {{namespace: {ns}, name: persistent-redis-0}}
"#
    )
}

/// `habitat-operator convert -f -` of `input`: (success, stdout, stderr).
fn convert(input: &str) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_habitat-operator"))
        .args(["convert", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("convert runs");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).expect("write stdin");
    }
    let out = child.wait_with_output().expect("convert finishes");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn claims(env: &support::Env) -> BTreeMap<String, PersistentVolumeClaim> {
    env.api::<PersistentVolumeClaim>()
        .list(&Default::default())
        .await
        .expect("list claims")
        .items
        .into_iter()
        .map(|c| (c.name_any(), c))
        .collect()
}

async fn a_running_service_of_the_original_operator_moves_over_with_its_key_and_claims(
    ground: Ground,
) {
    require_kubectl!();
    let mut env = env_on!(ground, "migrate", false);
    let ns = env.namespace.clone();
    let t = support::timeout(&env);
    // On the test's own control plane, the whole way: the original CRD and a v1beta1 Habitat
    // owning its StatefulSet and ConfigMap, the orphaning delete, the CRD swap. Elsewhere (the
    // sandbox, a cluster of HABITAT_E2E_KUBECONFIG) the world after those steps is made as it is.
    let swap_crd = env.is_real() && std::env::var_os("HABITAT_E2E_KUBECONFIG").is_none();

    // The old world, running.
    if env.is_real() {
        env.apply_yaml(&volume(&ns));
    }
    let mut old_yaml = old_habitat(&ns);
    if swap_crd {
        kubectl_cluster(
            &env,
            &["delete", "crd", "habitats.habitat.sh", "--wait=true"],
        );
        env.apply_yaml(OLD_CRD);
        kubectl_cluster(
            &env,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/habitats.habitat.sh",
            ],
        );
        let mut create = old_yaml.clone();
        for server_set in [
            "  uid: 5a3c1c6e-1111-2222-3333-444455556666\n",
            "  resourceVersion: \"1234\"\n",
        ] {
            create = create.replace(server_set, "");
        }
        env.apply_yaml(&create);
        let uid = env.kubectl_ok(&[
            "get",
            "habitats.v1beta1.habitat.sh",
            "redis",
            "-o",
            "jsonpath={.metadata.uid}",
        ]);
        let owner = format!(
            "ownerReferences: [{{apiVersion: habitat.sh/v1beta1, kind: Habitat, name: redis, uid: {uid}}}]"
        );
        env.apply_yaml(&old_objects(&owner));
        // Step 1 of docs/migrating.md: the export is what gets converted.
        old_yaml = env.kubectl_ok(&["get", "habitats.v1beta1.habitat.sh", "-o", "yaml"]);
    } else {
        env.apply_yaml(&old_objects(""));
    }
    let pvcs = &env.api::<PersistentVolumeClaim>();
    let e = &env;
    wait_for(t, "the old StatefulSet's claims", || async move {
        claims(e).await.len() == 3
    })
    .await;
    if env.is_real() {
        wait_for(t, "persistent-redis-0 to be Bound", || async move {
            pvcs.get("persistent-redis-0")
                .await
                .ok()
                .and_then(|c| c.status)
                .and_then(|s| s.phase)
                .as_deref()
                == Some("Bound")
        })
        .await;
    }
    let e = &env;
    wait_for(t, "the old StatefulSet's three pods", || async move {
        e.kubectl(&["get", "pods", "-l", "habitat-name=redis", "-o", "name"])
            .1
            .lines()
            .count()
            == 3
    })
    .await;
    let secret_before = env.api::<Secret>().get(RING).await.expect("ring Secret");
    let claims_before = claims(&env).await;

    if swap_crd {
        // Steps 4 and 5: the old Habitat goes, orphaning what it owned; then the CRD is swapped.
        let sts_uid = env
            .api::<StatefulSet>()
            .get("redis")
            .await
            .expect("old StatefulSet")
            .uid();
        env.kubectl_ok(&[
            "delete",
            "habitats.v1beta1.habitat.sh",
            "redis",
            "--cascade=orphan",
            "--wait=true",
        ]);
        let e = &env;
        wait_for(t, "the old ownerReferences to be removed", || async move {
            let sts = e.api::<StatefulSet>().get("redis").await.ok();
            let cm = e.api::<ConfigMap>().get("peer-watch-file").await.ok();
            sts.is_some_and(|s| s.owner_references().is_empty())
                && cm.is_some_and(|c| c.owner_references().is_empty())
        })
        .await;
        let sts = env
            .api::<StatefulSet>()
            .get("redis")
            .await
            .expect("old StatefulSet");
        assert_eq!(
            sts.uid(),
            sts_uid,
            "the old StatefulSet must survive step 4"
        );
        kubectl_cluster(
            &env,
            &["delete", "crd", "habitats.habitat.sh", "--wait=true"],
        );
        let crd = support::root().join("crds/habitat.yaml");
        kubectl_cluster(&env, &["apply", "-f", crd.to_str().unwrap_or_default()]);
        kubectl_cluster(
            &env,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/habitats.habitat.sh",
            ],
        );
    }
    env.start_operator();

    // Convert the old Habitat.
    let (ok, new_yaml, notes) = convert(&old_yaml);
    assert!(ok, "convert failed: {notes}");
    assert!(
        notes.contains("dropped metadata.uid, metadata.resourceVersion")
            && notes.contains("dropped status"),
        "{notes}"
    );
    assert!(
        new_yaml.contains("claimTemplateName: persistent"),
        "{new_yaml}"
    );
    let (ok, _, err) = convert("kind: [unclosed");
    assert!(!ok && err.contains("not YAML"), "{err}");

    // Applied while the old StatefulSet is there, the new Habitat cannot take it over (its
    // selector and claim templates are immutable) and leaves it alone: on both grounds.
    {
        env.apply_yaml(&new_yaml);
        let e = &env;
        wait_for(
            t,
            "the operator to report the old StatefulSet",
            || async move {
                e.habitats()
                    .get("redis")
                    .await
                    .ok()
                    .and_then(|h| h.status)
                    .is_some_and(|s| {
                        s.conditions.iter().any(|c| {
                            c.type_ == "Ready"
                                && c.message.contains("cannot apply StatefulSet redis")
                                && c.message.contains("Forbidden")
                        })
                    })
            },
        )
        .await;
        let old = env
            .api::<StatefulSet>()
            .get("redis")
            .await
            .expect("old StatefulSet");
        let selector = old.spec.clone().and_then(|s| s.selector.match_labels);
        assert_eq!(
            selector,
            Some(BTreeMap::from([("habitat-name".into(), "redis".into())]))
        );
        assert!(!old.labels().contains_key("app.kubernetes.io/managed-by"));
    }

    // The selector of a StatefulSet is immutable: the old one goes, its claims stay.
    env.kubectl_ok(&["delete", "statefulset", "redis", "--wait=true"]);
    let e = &env;
    wait_for(t, "the old pods to be gone", || async move {
        e.kubectl(&["get", "pods", "-l", "habitat-name=redis", "-o", "name"])
            .1
            .trim()
            .is_empty()
    })
    .await;
    env.wait_phase("redis", "Ready", t).await;
    env.assert_processes_running("the converted Habitat became Ready");

    // The ring key: the same object, the same data, in use.
    let secret_after = env.api::<Secret>().get(RING).await.expect("ring Secret");
    assert_eq!(secret_after.uid(), secret_before.uid());
    assert_eq!(secret_after.data, secret_before.data);
    let h = env.habitats().get("redis").await.expect("Habitat");
    assert_eq!(
        h.status.and_then(|s| s.ring_secret_name).as_deref(),
        Some(RING)
    );

    // The claims: the same objects, mounted by the new StatefulSet's pods; none new.
    let claims_after = claims(&env).await;
    assert_eq!(
        claims_after.keys().collect::<Vec<_>>(),
        claims_before.keys().collect::<Vec<_>>(),
        "the new StatefulSet must reuse the old claims and make none"
    );
    for (name, before) in &claims_before {
        assert_eq!(
            claims_after[name].uid(),
            before.uid(),
            "{name} was replaced"
        );
    }
    if env.is_real() {
        let bound = &claims_after["persistent-redis-0"];
        assert_eq!(
            bound.spec.as_ref().and_then(|s| s.volume_name.clone()),
            Some(format!("{ns}-redis-0"))
        );
    }
    let sts = env
        .api::<StatefulSet>()
        .get("redis")
        .await
        .expect("new StatefulSet");
    assert_eq!(
        sts.labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("habitat-operator")
    );
    let pods = env.pods("redis").await;
    assert_eq!(pods.len(), 3);
    for (i, pod) in pods.iter().enumerate() {
        let claim = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .find_map(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.clone());
        assert_eq!(claim, Some(format!("persistent-redis-{i}")));
    }

    // The old peer ConfigMap is not ours: it stays until the user deletes it.
    let old_peer = env.api::<ConfigMap>().get_opt("peer-watch-file").await;
    assert!(matches!(old_peer, Ok(Some(_))));
    assert!(matches!(
        env.api::<ConfigMap>().get_opt("redis-peer").await,
        Ok(Some(_))
    ));

    if env.is_real() {
        let _ = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&env.kubeconfig)
            .args(["delete", "pv", &format!("{ns}-redis-0"), "--wait=false"])
            .output();
    }
}
