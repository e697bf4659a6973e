use super::*;

fn docs(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap()
}

const V1BETA2: &str = r#"
apiVersion: habitat.sh/v1beta1
kind: Habitat
metadata:
  name: example-persistent-habitat
  namespace: prod
  uid: 0b6c6f1e-0000-0000-0000-000000000000
  resourceVersion: "4711"
  creationTimestamp: "2018-06-01T10:00:00Z"
  labels:
    app: persistent-habitat
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: "{}"
customVersion: v1beta2
spec:
  v1beta2:
    image: kinvolk/redis-hab
    count: 3
    persistentStorage:
      size: 1Gi
      storageClassName: example-sc
      mountPath: /hab/svc/redis/data
    env:
      - name: HAB_REDIS
        value: '{ "protected-mode": "no" }'
    service:
      name: redis
      topology: leader
      group: foobar
      channel: unstable
      configSecretName: user-toml
      ringSecretName: example-encrypted-ring-20170829113029
      filesSecretName: files
      bind:
        - name: db
          service: postgresql
          group: default
status:
  state: Processed
"#;

#[test]
fn a_v1beta2_habitat_keeps_every_field_with_a_meaning_here() {
    let c = convert(V1BETA2).unwrap();
    assert_eq!(c.problems, Vec::<String>::new());
    let expected = yaml(
        r#"
apiVersion: habitat.sh/v1
kind: Habitat
metadata:
  name: example-persistent-habitat
  namespace: prod
  labels:
    app: persistent-habitat
spec:
  image: kinvolk/redis-hab
  count: 3
  service:
    name: redis
    group: foobar
    channel: unstable
    configSecretName: user-toml
    ringSecretName: example-encrypted-ring-20170829113029
    filesSecretName: files
    topology: leader
    bind:
      - {name: db, service: postgresql, group: default}
  env:
    - name: HAB_REDIS
      value: '{ "protected-mode": "no" }'
  persistentStorage:
    size: 1Gi
    mountPath: /hab/svc/redis/data
    storageClassName: example-sc
    claimTemplateName: persistent
"#,
    );
    assert_eq!(docs(&c.yaml), vec![expected]);
    let notes = c.notes.join("\n");
    assert!(notes.contains("dropped metadata.uid, metadata.resourceVersion, metadata.creationTimestamp, metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]"), "{notes}");
    assert!(notes.contains("dropped status"), "{notes}");
    // The output is a Habitat this operator accepts.
    let h: Habitat = serde_yaml::from_str(&c.yaml).unwrap();
    assert_eq!(
        h.spec
            .persistent_storage
            .as_ref()
            .map(|s| s.claim_template()),
        Some("persistent")
    );
    assert_eq!(crate::api::validate::problem(&h), None);
}

#[test]
fn a_plain_v1beta1_habitat_has_its_fields_directly_under_spec() {
    let c = convert(
        r#"
apiVersion: habitat.sh/v1beta1
kind: Habitat
metadata: {name: web}
spec:
  image: kinvolk/nodejs-hab
  count: 1
  service: {name: nodejs, topology: standalone}
"#,
    )
    .unwrap();
    assert_eq!(c.problems, Vec::<String>::new());
    assert_eq!(
        docs(&c.yaml),
        vec![yaml(
            "{apiVersion: habitat.sh/v1, kind: Habitat, metadata: {name: web}, spec: {image: kinvolk/nodejs-hab, count: 1, service: {name: nodejs, topology: standalone}}}"
        )]
    );
    assert_eq!(c.notes, Vec::<String>::new());
}

#[test]
fn unknown_fields_are_dropped_and_named() {
    let c = convert(
        r#"
apiVersion: habitat.sh/v1beta1
kind: Habitat
metadata: {name: web}
customVersion: v1beta2
spec:
  image: ignored/by-v1beta2
  v1beta2:
    image: kinvolk/nodejs-hab
    count: 1
    nodeSelector: {disk: ssd}
    service: {name: nodejs, color: blue, bind: [{name: db, service: pg, group: default, port: 5432}]}
    persistentStorage: {size: 1Gi, mountPath: /data, accessMode: ReadWriteMany}
"#,
    )
    .unwrap();
    let notes = c.notes.join("\n");
    for field in [
        "dropped spec.image: the original operator ignored it with customVersion v1beta2",
        "dropped spec.v1beta2.nodeSelector",
        "dropped spec.v1beta2.service.color",
        "dropped spec.v1beta2.service.bind[0].port",
        "dropped spec.v1beta2.persistentStorage.accessMode",
        "spec.v1beta2.persistentStorage.storageClassName is unset",
    ] {
        assert!(notes.contains(field), "{field} not in {notes}");
    }
    assert!(notes.starts_with("document 1 (Habitat web): "), "{notes}");
    assert_eq!(c.problems, Vec::<String>::new());
}

#[test]
fn other_documents_pass_through_unchanged_and_are_named() {
    let input = r#"
apiVersion: v1
kind: Secret
metadata: {name: example-encrypted-ring-20170829113029}
data: {ring-key: U1lNLVNFQy0x}
---
apiVersion: habitat.sh/v1beta1
kind: Habitat
metadata: {name: web}
customVersion: v1beta2
spec: {v1beta2: {image: a/b, count: 1, service: {name: b}}}
---
---
apiVersion: habitat.sh/v1
kind: Habitat
metadata: {name: new}
spec: {image: a/b, service: {name: b}}
"#;
    let c = convert(input).unwrap();
    let out = docs(&c.yaml);
    let all = docs(input);
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], all[0]);
    assert_eq!(out[1]["apiVersion"], "habitat.sh/v1");
    assert_eq!(out[2], all[3]);
    assert_eq!(
        c.notes,
        [
            "document 1 (Secret example-encrypted-ring-20170829113029): not a habitat.sh/v1beta1 Habitat; passed through unchanged",
            "document 4 (Habitat new): already habitat.sh/v1; passed through unchanged",
        ]
    );
}

#[test]
fn a_list_from_kubectl_get_is_converted_item_by_item() {
    let c = convert(
        r#"
apiVersion: v1
kind: List
items:
  - apiVersion: habitat.sh/v1beta1
    kind: Habitat
    metadata: {name: one}
    customVersion: v1beta2
    spec: {v1beta2: {image: a/b, count: 1, service: {name: b}}}
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: peer-watch-file}
"#,
    )
    .unwrap();
    let out = docs(&c.yaml);
    assert_eq!(out[0]["items"][0]["apiVersion"], "habitat.sh/v1");
    assert_eq!(out[0]["items"][1]["kind"], "ConfigMap");
    assert_eq!(
        c.notes,
        ["document 1 items[1] (ConfigMap peer-watch-file): not a habitat.sh/v1beta1 Habitat; passed through unchanged"]
    );
}

#[test]
fn an_unset_count_keeps_the_original_zero() {
    let c = convert(
        "{apiVersion: habitat.sh/v1beta1, kind: Habitat, metadata: {name: w}, customVersion: v1beta2, spec: {v1beta2: {image: a/b, service: {name: b}}}}",
    )
    .unwrap();
    assert_eq!(docs(&c.yaml)[0]["spec"]["count"], 0);
    assert!(c.notes[0].contains("wrote count: 0"), "{:?}", c.notes);
}

#[test]
fn problems_against_our_rules_name_the_field() {
    let c = convert(
        r#"
apiVersion: habitat.sh/v1beta1
kind: Habitat
metadata: {name: bad}
customVersion: v1beta2
spec:
  v1beta2:
    count: 1
    service: {topology: leader}
---
apiVersion: habitat.sh/v1beta1
kind: Habitat
metadata: {name: ring}
customVersion: v1beta2
spec:
  v1beta2:
    image: a/b
    count: 3
    service: {name: b, ringSecretName: prod, bind: [{name: db, service: pg, group: "a.b"}]}
"#,
    )
    .unwrap();
    assert_eq!(
        c.problems,
        [
            "document 1 (Habitat bad): spec.v1beta2.image is missing, and spec.image is required",
            "document 1 (Habitat bad): spec.v1beta2.service.name is missing, and spec.service.name is required",
            "document 2 (Habitat ring): spec.service.ringSecretName \"prod\" must look like <ring>-<YYYYMMDDhhmmss>, e.g. prod-20170829113029",
        ]
    );
}

#[test]
fn input_that_is_not_yaml_is_an_error() {
    assert!(convert("kind: [unclosed")
        .unwrap_err()
        .contains("document 1"));
    assert!(convert("- just\n- a list\n")
        .unwrap_err()
        .contains("not a Kubernetes object"));
}

#[test]
fn the_examples_of_the_original_operator_convert_cleanly() {
    // examples/encrypted/habitat.yml of github.com/habitat-sh/habitat-operator, abridged.
    let c = convert(
        r#"
apiVersion: v1
kind: Secret
metadata:
  name: example-encrypted-ring-20170829113029
  labels: {habitat: "true", ring-key: "true"}
type: Opaque
data:
  ring-key: U1lNLVNFQy0xCmV4YW1wbGUtZW5jcnlwdGVkLXJpbmctMjAxNzA4MjkxMTMwMjkKClFGZm9ZTHJOV3NNRk93Tk4wb0F1d3d4WjA1aVBMdTQxSUdGSzJISVFqTlk9
---
apiVersion: habitat.sh/v1beta1
kind: Habitat
metadata:
  name: example-encrypted-habitat
  labels: {source: operator-example, app: encrypted-habitat}
customVersion: v1beta2
spec:
  v1beta2:
    image: habitat/redis-hab
    count: 3
    service:
      name: redis
      topology: leader
      ringSecretName: example-encrypted-ring-20170829113029
"#,
    )
    .unwrap();
    assert_eq!(c.problems, Vec::<String>::new());
    let out = docs(&c.yaml);
    assert_eq!(
        out[1]["spec"]["service"]["ringSecretName"],
        "example-encrypted-ring-20170829113029"
    );
    assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
}
