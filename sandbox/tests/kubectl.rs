//! Smoke test with the real kubectl (skipped when /usr/bin/kubectl is absent).

mod common;

use std::path::Path;

const KUBECTL: &str = "/usr/bin/kubectl";

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: habitats.habitat.sh}
spec:
  group: habitat.sh
  scope: Namespaced
  names: {plural: habitats, singular: habitat, kind: Habitat, shortNames: [hab]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Phase, type: string, jsonPath: .status.phase}
    - {name: Topology, type: string, jsonPath: .spec.service.topology}
    - {name: Image, type: string, jsonPath: .spec.image, priority: 1}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#;

const HAB: &str = r#"
apiVersion: habitat.sh/v1
kind: Habitat
metadata: {name: redis}
spec: {image: habitat/redis-hab, count: 3, service: {name: redis, topology: leader}}
"#;

async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(KUBECTL)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .await
        .expect("run kubectl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_get_describe_delete() {
    if !Path::new(KUBECTL).exists() {
        println!("skipping: {KUBECTL} not found");
        return;
    }
    let sb = common::start().await;
    let dir = std::env::temp_dir().join(format!("habitat-sandbox-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let kc = dir.join("kubeconfig");
    std::fs::write(&kc, sb.kubeconfig_yaml()).expect("kubeconfig");
    let crd = dir.join("crd.yaml");
    std::fs::write(&crd, CRD).expect("crd");
    let hab = dir.join("hab.yaml");
    std::fs::write(&hab, HAB).expect("hab");
    let path = |p: &Path| p.to_string_lossy().to_string();

    let (ok, out) = kubectl(&kc, &["apply", "-f", &path(&crd)]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        &kc,
        &[
            "wait",
            "--for",
            "condition=established",
            "crd/habitats.habitat.sh",
            "--timeout=10s",
        ],
    )
    .await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&kc, &["apply", "-f", &path(&hab)]).await;
    assert!(
        ok && out.contains("habitat.habitat.sh/redis created"),
        "{out}"
    );
    let (ok, out) = kubectl(&kc, &["apply", "-f", &path(&hab)]).await;
    assert!(ok && out.contains("unchanged"), "{out}");
    let (ok, out) = kubectl(&kc, &["apply", "--server-side", "-f", &path(&hab)]).await;
    assert!(ok, "{out}");

    let (ok, out) = kubectl(&kc, &["get", "habitats"]).await;
    assert!(ok, "{out}");
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, vec!["NAME", "PHASE", "TOPOLOGY", "AGE"], "{out}");
    assert!(out.contains("leader"), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "hab", "-o", "wide"]).await;
    assert!(
        ok && out.contains("IMAGE") && out.contains("habitat/redis-hab"),
        "{out}"
    );
    let (ok, out) = kubectl(&kc, &["get", "habitats", "-o", "name"]).await;
    assert!(ok && out.trim() == "habitat.habitat.sh/redis", "{out}");

    let (ok, out) = kubectl(&kc, &["describe", "habitat", "redis"]).await;
    assert!(
        ok && out.contains("Name:         redis") && out.contains("Topology:  leader"),
        "{out}"
    );

    let (ok, out) = kubectl(&kc, &["delete", "-f", &path(&hab)]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&kc, &["get", "habitats"]).await;
    assert!(ok && out.contains("No resources found"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
    sb.shutdown().await;
}
