//! Every case of `tests/admission/cases.yaml` (invalid Habitats, and a few valid ones, with the
//! answers a real kube-apiserver v1.36 gave, recorded by `tests/admission/record.py`) on both
//! grounds: `admission::sandbox` against an in-process sandbox, `admission::real` against the
//! real control plane of `KUBEBUILDER_ASSETS` (skipped without it, unless
//! `HABITAT_REQUIRE_APISERVER=1`). Both install `crds/habitat.yaml` as it is and run the cases
//! in a namespace of their own with `tests/admission/runner.rs`.

#[macro_use]
mod support;

use hyper as http;
use kube::config::{KubeConfigOptions, Kubeconfig};
use support::Ground;

#[path = "admission/runner.rs"]
mod runner;

async fn admission(ground: Ground) {
    let root = support::root();
    match ground {
        Ground::Sandbox => {
            let sb = habitat_sandbox::Sandbox::start(habitat_sandbox::Options::default())
                .await
                .expect("the sandbox starts");
            let uri = sb.url().parse().expect("the sandbox's URL");
            let client = kube::Client::try_from(kube::Config::new(uri)).expect("a client");
            runner::every_case(&client, &root, "the sandbox").await;
        }
        Ground::Real => {
            let Some(cp) = support::control_plane::ControlPlane::shared() else {
                eprintln!("skipped on the real ground: KUBEBUILDER_ASSETS is not set");
                return;
            };
            let kc = Kubeconfig::read_from(cp.admin_kubeconfig()).expect("admin kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .expect("admin kubeconfig valid");
            let client = kube::Client::try_from(config).expect("a client");
            runner::every_case(&client, &root, "the real control plane").await;
        }
    }
}

on_both_grounds!(admission);
