use super::*;
use proptest::prelude::*;

/// An Application in `phase` whose sync result lists `gates` as (name, hookPhase).
fn app(phase: Option<&str>, gates: &[(&str, &str)]) -> Value {
    let resources: Vec<Value> = gates
        .iter()
        .map(|(name, hook)| {
            json!({"group": "wavegate.dev", "version": "v1alpha1", "kind": "WaveGate",
                   "namespace": "ddb", "name": name, "status": "Synced", "hookPhase": hook,
                   "syncPhase": "Sync"})
        })
        .collect();
    let mut a = json!({
        "metadata": {"namespace": "argocd", "name": "ddb", "resourceVersion": "7"},
        "spec": {"destination": {"namespace": "ddb"}},
        "status": {"resources": [
            {"group": "wavegate.dev", "kind": "WaveGate", "namespace": "ddb", "name": "db-ready", "syncWave": 5},
            {"group": "wavegate.dev", "kind": "WaveGate", "namespace": "ddb", "name": "http-ready", "syncWave": 7},
        ]},
    });
    if let Some(phase) = phase {
        a["status"]["operationState"] =
            json!({"phase": phase, "syncResult": {"resources": resources}});
    }
    a
}

fn held(name: &str, wave: i64, health: Option<(HealthStatus, &str)>) -> HeldBy {
    HeldBy {
        namespace: "ddb".into(),
        name: name.into(),
        wave,
        health: health.map(|(s, m)| (s, m.to_string())),
    }
}

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn waiting() -> Notice {
    notice_for(
        ("argocd", "ddb"),
        &[held(
            "db-ready",
            5,
            Some((HealthStatus::Progressing, "1 of 2 checks healthy")),
        )],
        Some("https://wavegate.example.com/"),
    )
    .unwrap()
}

#[test]
fn a_gate_argo_cd_still_waits_for_holds_the_sync() {
    let a = app(Some("Running"), &[("db-ready", "Running")]);
    assert_eq!(
        holding_gates(&App::of(a.clone())),
        vec![("ddb".into(), "db-ready".into())]
    );
    assert_eq!(wave_of(&App::of(a.clone()), "ddb", "db-ready"), 5);
    assert_eq!(wave_of(&App::of(a.clone()), "ddb", "unlisted"), 0);
}

#[test]
fn a_released_gate_or_an_ended_sync_holds_nothing() {
    assert!(holding_gates(&App::of(app(Some("Running"), &[("db-ready", "Succeeded")]))).is_empty());
    for phase in ["Succeeded", "Failed", "Error", "Terminating"] {
        let a = app(Some(phase), &[("db-ready", "Running")]);
        assert!(holding_gates(&App::of(a)).is_empty(), "{phase}");
    }
    assert!(holding_gates(&App::of(app(None, &[]))).is_empty());
    let mut deleting = app(Some("Running"), &[("db-ready", "Running")]);
    deleting["metadata"]["deletionTimestamp"] = json!("2026-12-03T10:00:00Z");
    assert!(holding_gates(&App::of(deleting)).is_empty());
}

#[test]
fn a_resource_that_is_not_a_wavegate_holds_no_notice() {
    let mut a = app(Some("Running"), &[]);
    a["status"]["operationState"]["syncResult"]["resources"] = json!([
        {"group": "apps", "kind": "Deployment", "namespace": "ddb", "name": "forgejo", "hookPhase": "Running"}
    ]);
    assert!(holding_gates(&App::of(a)).is_empty());
}

#[test]
fn the_notice_names_the_wave_the_gate_and_the_reason() {
    let n = waiting();
    assert_eq!(
        n.content,
        "wavegate holds sync wave 5: WaveGate ddb/db-ready is Progressing: 1 of 2 checks healthy"
    );
    assert_eq!(n.severity, Severity::Warning);
    assert_eq!(
        n.url.as_deref(),
        Some("https://wavegate.example.com/api/v1/applications/argocd/ddb/waves")
    );
}

#[test]
fn a_degraded_gate_is_critical_and_named_first() {
    let n = notice_for(
        ("argocd", "ddb"),
        &[
            held("a-slow", 5, Some((HealthStatus::Progressing, "waiting"))),
            held(
                "b-split",
                5,
                Some((HealthStatus::Degraded, "2 cluster IDs")),
            ),
            held("later", 7, Some((HealthStatus::Degraded, "no pods"))),
        ],
        None,
    )
    .unwrap();
    assert_eq!(n.severity, Severity::Critical);
    assert!(
        n.content
            .starts_with("wavegate holds sync wave 5: WaveGate ddb/b-split is Degraded"),
        "{}",
        n.content
    );
    assert!(
        n.content.ends_with("(and 2 more WaveGates)"),
        "{}",
        n.content
    );
    assert_eq!(n.url, None, "no link without --public-url");
}

#[test]
fn a_gate_not_judged_yet_or_already_healthy() {
    let n = notice_for(("argocd", "ddb"), &[held("db-ready", 5, None)], None).unwrap();
    assert!(
        n.content.ends_with("is not judged by wavegate yet"),
        "{}",
        n.content
    );
    let healthy = held("db-ready", 5, Some((HealthStatus::Healthy, "ok")));
    assert_eq!(notice_for(("argocd", "ddb"), &[healthy], None), None);
    assert_eq!(notice_for(("argocd", "ddb"), &[], None), None);
}

#[test]
fn a_long_message_is_cut_where_argo_cd_cuts_it() {
    let long = "é".repeat(2_000);
    let n = notice_for(
        ("argocd", "ddb"),
        &[held(
            "db-ready",
            5,
            Some((HealthStatus::Progressing, &long)),
        )],
        None,
    )
    .unwrap();
    assert_eq!(n.content.chars().count(), MAX_CONTENT);
    assert!(n.content.ends_with('…'));
}

#[test]
fn a_held_app_gets_the_notice_and_a_settled_one_no_write() {
    let patch = plan(&BTreeMap::new(), Some(&waiting())).unwrap();
    let after = apply(&BTreeMap::new(), &patch);
    assert_eq!(owner(&after), Owner::Wavegate);
    assert_eq!(after.get(SEVERITY).map(String::as_str), Some("warning"));
    assert_eq!(
        plan(&after, Some(&waiting())),
        None,
        "written once, not again"
    );
    assert_eq!(
        plan(&BTreeMap::new(), None),
        None,
        "nothing held, nothing written"
    );
}

#[test]
fn the_notice_goes_when_the_wave_advances() {
    let ours = apply(
        &BTreeMap::new(),
        &plan(&BTreeMap::new(), Some(&waiting())).unwrap(),
    );
    let patch = plan(&ours, None).unwrap();
    for key in [CONTENT, SEVERITY, URL, OWNER] {
        assert_eq!(patch.get(key), Some(&Value::Null), "{key}");
    }
    assert!(apply(&ours, &patch).is_empty());
}

#[test]
fn someone_elses_notice_is_never_overwritten_nor_removed() {
    let theirs = annotations(&[
        (CONTENT, "Scheduled DB maintenance on 2026-06-01 02:00 UTC"),
        (SEVERITY, "info"),
    ]);
    assert_eq!(owner(&theirs), Owner::Someone);
    assert_eq!(plan(&theirs, Some(&waiting())), None);
    assert_eq!(plan(&theirs, None), None);
    // Only a `scope` or `icon` of theirs, without content: still not ours to add to.
    assert_eq!(
        plan(
            &annotations(&[("notice.argocd.argoproj.io/scope", "icon")]),
            Some(&waiting())
        ),
        None
    );
}

#[test]
fn a_notice_someone_changed_after_wavegate_wrote_it_is_theirs() {
    let ours = apply(
        &BTreeMap::new(),
        &plan(&BTreeMap::new(), Some(&waiting())).unwrap(),
    );
    let mut edited = ours.clone();
    edited.insert("notice.argocd.argoproj.io/permanent".into(), "true".into());
    assert_eq!(owner(&edited), Owner::Someone);
    // Only our own, now stale, digest goes.
    let patch = plan(&edited, None).unwrap();
    assert_eq!(patch.keys().collect::<Vec<_>>(), vec![OWNER]);
    let after = apply(&edited, &patch);
    assert_eq!(plan(&after, None), None);
    assert_eq!(plan(&after, Some(&waiting())), None);
}

#[test]
fn a_dropped_public_url_removes_the_link() {
    let ours = apply(
        &BTreeMap::new(),
        &plan(&BTreeMap::new(), Some(&waiting())).unwrap(),
    );
    let unlinked = Notice {
        url: None,
        ..waiting()
    };
    let patch = plan(&ours, Some(&unlinked)).unwrap();
    assert_eq!(patch.get(URL), Some(&Value::Null));
    assert_eq!(owner(&apply(&ours, &patch)), Owner::Wavegate);
}

#[test]
fn the_digest_is_stable_between_builds() {
    // Every Application with a notice would otherwise be written once more after an upgrade
    // (and a notice written by the older build would look like someone else's).
    assert_eq!(
        digest(&annotations(&[(CONTENT, "x"), (SEVERITY, "warning")])),
        format!(
            "{:016x}",
            crate::gate::stamp::fnv1a(
                b"notice.argocd.argoproj.io/content=x\nnotice.argocd.argoproj.io/severity=warning\n"
            )
        )
    );
}

#[tokio::test(start_paused = true)]
async fn writes_to_one_application_stay_an_interval_apart() {
    let interval = Duration::from_secs(10);
    let start = Instant::now();
    assert_eq!(wait_before(None, start, interval), None);
    tokio::time::advance(Duration::from_secs(4)).await;
    assert_eq!(
        wait_before(Some(start), Instant::now(), interval),
        Some(Duration::from_secs(6))
    );
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(wait_before(Some(start), Instant::now(), interval), None);
}

/// One step of the world around an Application's annotations.
#[derive(Debug, Clone)]
enum Step {
    /// wavegate decides, wanting notice number `n` (`None`: no gate holds the sync).
    Wavegate(Option<u8>),
    /// Someone sets their own notice key to a value.
    SomeoneSets(u8, u8),
    /// Someone removes a notice key.
    SomeoneRemoves(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => proptest::option::of(0u8..3).prop_map(Step::Wavegate),
        1 => (0u8..4, 0u8..2).prop_map(|(k, v)| Step::SomeoneSets(k, v)),
        1 => (0u8..4).prop_map(Step::SomeoneRemoves),
    ]
}

const THEIR_KEYS: [&str; 4] = [
    CONTENT,
    SEVERITY,
    "notice.argocd.argoproj.io/permanent",
    "notice.argocd.argoproj.io/scope",
];

fn wanted(n: u8) -> Notice {
    notice_for(
        ("argocd", "ddb"),
        &[held(
            "db-ready",
            5,
            Some((HealthStatus::Progressing, ["a", "b", "c"][n as usize])),
        )],
        (n == 1).then_some("https://wavegate.example.com"),
    )
    .unwrap_or_else(|| unreachable!())
}

proptest! {
    #![proptest_config(crate::testing::proptest_config::config(2000))]

    /// Whatever anyone does to an Application's notice: wavegate changes only its own keys,
    /// never a notice annotation while the notice is someone else's, sends no write once its
    /// own decision is in place, and its notice is there exactly when one is wanted and nobody
    /// else has one.
    #[test]
    fn only_wavegates_own_notice_is_ever_written_or_removed(
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let mut annotations = BTreeMap::from([("team".to_string(), "payments".to_string())]);
        for s in steps {
            match s {
                Step::SomeoneSets(k, v) => {
                    annotations.insert(THEIR_KEYS[k as usize].into(), ["theirs", "other"][v as usize].into());
                }
                Step::SomeoneRemoves(k) => {
                    annotations.remove(THEIR_KEYS[k as usize]);
                }
                Step::Wavegate(n) => {
                    let want = n.map(wanted);
                    let before = owner(&annotations);
                    let Some(patch) = plan(&annotations, want.as_ref()) else {
                        match (before, &want) {
                            (Owner::Someone, _) => {}
                            (_, Some(w)) => prop_assert_eq!(annotations.get(CONTENT), Some(&w.content)),
                            (_, None) => prop_assert_eq!(before, Owner::Nobody),
                        }
                        continue;
                    };
                    prop_assert!(patch.keys().all(|k| WRITTEN.contains(&k.as_str())), "{patch:?}");
                    if before == Owner::Someone {
                        prop_assert_eq!(patch.keys().collect::<Vec<_>>(), vec![OWNER]);
                    }
                    annotations = apply(&annotations, &patch);
                    prop_assert_eq!(plan(&annotations, want.as_ref()), None, "a second write");
                    prop_assert_eq!(annotations.get("team").map(String::as_str), Some("payments"));
                    match (before, &want) {
                        (Owner::Someone, _) => prop_assert!(!annotations.contains_key(OWNER)),
                        (_, Some(w)) => {
                            prop_assert_eq!(owner(&annotations), Owner::Wavegate);
                            prop_assert_eq!(annotations.get(CONTENT), Some(&w.content));
                        }
                        (_, None) => prop_assert_eq!(owner(&annotations), Owner::Nobody),
                    }
                }
            }
        }
    }
}
