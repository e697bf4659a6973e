//! The real `kubectl` against the cluster: printer columns, `describe`, `wait`, `explain`-free
//! checks that users rely on.

#[macro_use]
mod support;

use std::time::{Duration, Instant};

use support::{timeout, wait_for, Ground};

async fn kubectl_shows_the_phase_column_reaching_ready_and_describe_shows_conditions_and_events(
    ground: Ground,
) {
    require_kubectl!();
    let env = env_on!(ground, "kubectl");
    env.apply_example("leader");
    let start = Instant::now();
    let table = loop {
        let out = env.kubectl_ok(&["get", "habitats"]);
        if out
            .lines()
            .any(|l| l.starts_with("example-leader") && l.contains("Ready"))
        {
            break out;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never Ready:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "PHASE", "READY", "LEADER", "TOPOLOGY", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(&row[..3], ["example-leader", "Ready", "3/3"], "{table}");
    assert!(
        row[3].starts_with("example-leader-"),
        "no leader in {table}"
    );
    assert_eq!(row[4], "leader");

    let wide = env.kubectl_ok(&["get", "hab", "-o", "wide"]);
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert!(header.ends_with(&["IMAGE", "RELEASE"]), "{wide}");
    assert!(wide.contains("kinvolk/redis-hab"), "{wide}");
    // The release the census reports, once it has been read.
    wait_for(timeout(&env), "the RELEASE column to be filled", || async {
        let wide = env.kubectl_ok(&["get", "hab", "-o", "wide"]);
        wide.lines()
            .nth(1)
            .and_then(|l| l.split_whitespace().last())
            .is_some_and(|r| r.starts_with("0.1.0/"))
    })
    .await;

    env.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "habitat/example-leader",
        "--timeout=30s",
    ]);

    let describe = env.kubectl_ok(&["describe", "habitat", "example-leader"]);
    for needle in [
        "Conditions:",
        "LeaderElected",
        "Available",
        "HabitatReady",
        "Events:",
        // One Event per reconcile pass, naming the path it took.
        "EnteredDeploying",
        "Pending → ConfigMapReady → KeyReady → Deploying",
        "EnteredReady",
        "→ LeaderElected",
    ] {
        assert!(
            describe.contains(needle),
            "describe lacks {needle}:\n{describe}"
        );
    }
    // No Event repeats itself: each (reason, note) once, none with a series.
    let events = env.events().await;
    let mut seen = std::collections::BTreeSet::new();
    for e in events
        .iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("Habitat"))
        .filter(|e| e.involved_object.name.as_deref() == Some("example-leader"))
    {
        let key = (e.reason.clone(), e.message.clone());
        assert!(seen.insert(key.clone()), "repeated Event {key:?}");
        assert!(
            e.series.is_none() && e.count.unwrap_or(1) <= 1,
            "Event {key:?} repeats: {:?} {:?}",
            e.series,
            e.count
        );
        assert!(
            e.reason.as_deref() != Some("EnteredConfigMapReady")
                && e.reason.as_deref() != Some("EnteredKeyReady"),
            "one Event per pass, not per phase: {key:?}"
        );
    }
    assert!(seen.len() >= 2, "{seen:?}");
    // The first election is told once: by the pass's Event, which names the leader, not by a
    // LeaderChanged Event "from none" beside it.
    let told = |(reason, message): &(Option<String>, Option<String>)| {
        reason.as_deref() != Some("LeaderChanged")
            && message
                .as_deref()
                .is_some_and(|m| m.contains("→ LeaderElected") && m.contains(" leads "))
    };
    assert!(
        seen.iter().any(told),
        "no Event names the first leader: {seen:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|(reason, _)| reason.as_deref() == Some("LeaderChanged")),
        "the first election was told twice: {seen:?}"
    );
}

on_both_grounds!(
    kubectl_shows_the_phase_column_reaching_ready_and_describe_shows_conditions_and_events,
);
