//! The evaluator: reach, blindness, and verdicts kept until what they read changes.

use super::*;
use crate::resource::{CheckKind, Target};
use std::collections::BTreeSet;

thread_local! {
    /// Judge every ask afresh on this thread, keeping nothing: what a timing compares the kept
    /// verdicts with. Per thread, so that the tests beside it, which run on threads of their
    /// own, keep what they keep.
    pub(crate) static KEEP_NOTHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// An evaluator whose cache watches only `shop` and whose API server never answers.
fn scoped_to_shop() -> Arc<Evaluator> {
    let metrics = Arc::new(Metrics::default());
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let cache = Cache::new(
        kube::Client::try_from(config).unwrap(),
        Some(BTreeSet::from(["shop".to_string()])),
        Duration::from_millis(50),
        metrics.clone(),
    );
    Evaluator::new(cache, EvalConfig::default(), metrics).unwrap()
}

#[tokio::test]
async fn a_namespace_outside_namespaces_is_out_of_reach_not_blind() {
    // Waiting never brings prod into this wavegate's reach: the gate's timeout must apply.
    let ev = scoped_to_shop();
    let ask = Ask::with_defaults(Target::new(CheckKind::SERVICE, "prod", "forgejo").unwrap());
    let j = ev.judge_fresh(&ask).await;
    assert_eq!(j.blind, None, "{j:?}");
    assert!(j.verdict.message.contains("--namespaces"), "{j:?}");
    assert!(j.verdict.message.contains("timeout applies"), "{j:?}");
    // A watched namespace whose cache cannot list (the API server does not answer) is
    // wavegate's own blindness.
    let ask = Ask::with_defaults(Target::new(CheckKind::SERVICE, "shop", "web").unwrap());
    let j = ev.judge_fresh(&ask).await;
    assert!(j.blind.is_some(), "{j:?}");
}

#[test]
fn only_errors_that_may_pass_are_blind() {
    let not_served = CacheError::NotInstalled("crdbclusters.crdb.cockroachlabs.com".into());
    assert_eq!(blindness(&not_served), None);
    let outside = CacheError::NamespaceNotWatched("prod".into());
    assert_eq!(blindness(&outside), None);
    let relisting = CacheError::Relisting {
        what: "pods in prod".into(),
        error: "410 Gone".into(),
    };
    assert!(blindness(&relisting).is_some());
    assert!(blindness(&CacheError::NotSynced("pods in prod".into())).is_some());
}

mod kept {
    //! Verdicts kept until what they read changes, against a cache the test feeds event by
    //! event: whatever the events, relists, watch errors and script changes, a kept verdict is
    //! the one a fresh judgement gives at that moment.

    use super::*;
    use crate::cache::fed::{self, Feed};
    use crate::kinds::Check;
    use crate::resource::GroupResource;
    use k8s_openapi::api::core::v1::{Pod, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::DynamicObject;
    use kube::runtime::watcher::Event;
    use proptest::prelude::*;
    use serde_json::json;

    const NS: &str = "shop";
    /// Objects of each kind in the world, and so asks of each checked kind.
    const N: usize = 3;

    fn deployments() -> GroupResource {
        GroupResource::new("apps", "deployments")
    }

    /// The state of one object; `None`: it does not exist.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Obj {
        /// A Service: selects `app=s<i>`, or nothing.
        Service { selects: bool },
        /// A pod labelled `app=s<of>` (`of` ≥ N: an app no Service selects), ready or not.
        Pod { of: usize, ready: bool },
        /// The EndpointSlice of Service s<i>, with this many ready endpoints.
        Slice { ready: usize },
        /// A Deployment at generation 2, observed at `observed`, paused or not, available or
        /// not.
        Deployment {
            observed: i64,
            paused: bool,
            available: bool,
        },
    }

    fn service(i: usize, selects: bool) -> Service {
        let selector = selects.then(|| json!({"app": format!("s{i}")}));
        serde_json::from_value(json!({
            "metadata": {"name": format!("s{i}"), "namespace": NS, "uid": format!("svc-{i}")},
            "spec": {"selector": selector, "ports": [{"port": 80}]}}))
        .unwrap()
    }

    fn pod(i: usize, of: usize, ready: bool) -> Pod {
        let ready = if ready { "True" } else { "False" };
        serde_json::from_value(json!({
            "metadata": {"name": format!("p{i}"), "namespace": NS,
                         "labels": {"app": format!("s{of}")}},
            "status": {"phase": "Running", "podIP": format!("10.0.0.{}", i + 1),
                       "conditions": [{"type": "Ready", "status": ready}]}}))
        .unwrap()
    }

    fn slice(i: usize, ready: usize) -> EndpointSlice {
        // Endpoint e at pod p<i+e>: the pod s<i> usually runs, then another.
        let endpoints: Vec<_> = (0..ready.max(1))
            .map(|e| {
                let p = (i + e) % N;
                json!({"addresses": [format!("10.0.0.{}", p + 1)],
                       "targetRef": {"kind": "Pod", "namespace": NS, "name": format!("p{p}")},
                       "conditions": {"ready": e < ready}})
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": format!("s{i}-abc"), "namespace": NS,
                         "labels": {"kubernetes.io/service-name": format!("s{i}")}},
            "addressType": "IPv4", "endpoints": endpoints}))
        .unwrap()
    }

    fn deployment(i: usize, observed: i64, paused: bool, available: bool) -> DynamicObject {
        let available = if available { 1 } else { 0 };
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("d{i}"), "namespace": NS, "generation": 2,
                         "uid": format!("dep-{i}")},
            "spec": {"replicas": 1, "paused": paused},
            "status": {"observedGeneration": observed, "replicas": 1, "updatedReplicas": 1,
                       "availableReplicas": available, "readyReplicas": available}}))
        .unwrap()
    }

    /// A world of N objects of each kind, its cache fed the same events.
    struct World {
        services: Arc<Feed<Service>>,
        pods: Arc<Feed<Pod>>,
        slices: Arc<Feed<EndpointSlice>>,
        deployments: Arc<Feed<DynamicObject>>,
        /// By kind (0: services, 1: pods, 2: slices, 3: deployments), then object.
        state: [[Option<Obj>; N]; 4],
        ev: Arc<Evaluator>,
        asks: Vec<Ask>,
    }

    impl World {
        async fn new(lua: Option<Arc<crate::argocd_lua::LuaHealth>>) -> World {
            let cache = fed::cache(NS, &[("apps", "deployments", "Deployment")]).await;
            let state = [
                [Some(Obj::Service { selects: true }); N],
                std::array::from_fn(|i| Some(Obj::Pod { of: i, ready: true })),
                [Some(Obj::Slice { ready: 1 }); N],
                [Some(Obj::Deployment {
                    observed: 2,
                    paused: false,
                    available: true,
                }); N],
            ];
            let world = World {
                services: cache.feed(&GroupResource::SERVICES),
                pods: cache.feed(&GroupResource::PODS),
                slices: cache.feed(&GroupResource::ENDPOINT_SLICES),
                deployments: cache.feed(&deployments()),
                state,
                ev: Evaluator::new(
                    cache,
                    EvalConfig {
                        argocd_lua: lua,
                        ..EvalConfig::default()
                    },
                    Arc::new(Metrics::default()),
                )
                .unwrap(),
                asks: (0..N)
                    .flat_map(|i| {
                        let svc = Target::new(CheckKind::SERVICE, NS, &format!("s{i}")).unwrap();
                        let dep = Ask {
                            namespace: NS.into(),
                            name: format!("d{i}"),
                            check: Check::defaults(CheckKind::Generic {
                                group: "apps".into(),
                                plural: "deployments".into(),
                            }),
                        };
                        [Ask::with_defaults(svc), dep]
                    })
                    .collect(),
            };
            for kind in 0..4 {
                world.list(kind);
            }
            // Every watch started and listed: what was judged while they started is not kept.
            for ask in &world.asks {
                world.ev.judge_kept(ask).await;
            }
            world
        }

        /// Send the whole list of `kind`, as a relist does.
        fn list(&self, kind: usize) {
            let present = |k: usize| (0..N).filter_map(move |i| self.state[k][i].map(|o| (i, o)));
            match kind {
                0 => self
                    .services
                    .list(present(0).map(|(i, o)| self.service_of(i, o))),
                1 => self.pods.list(present(1).map(|(i, o)| self.pod_of(i, o))),
                2 => self
                    .slices
                    .list(present(2).map(|(i, o)| self.slice_of(i, o))),
                _ => self
                    .deployments
                    .list(present(3).map(|(i, o)| self.deployment_of(i, o))),
            }
        }

        fn service_of(&self, i: usize, o: Obj) -> Service {
            match o {
                Obj::Service { selects } => service(i, selects),
                _ => unreachable!(),
            }
        }

        fn pod_of(&self, i: usize, o: Obj) -> Pod {
            match o {
                Obj::Pod { of, ready } => pod(i, of, ready),
                _ => unreachable!(),
            }
        }

        fn slice_of(&self, i: usize, o: Obj) -> EndpointSlice {
            match o {
                Obj::Slice { ready } => slice(i, ready),
                _ => unreachable!(),
            }
        }

        fn deployment_of(&self, i: usize, o: Obj) -> DynamicObject {
            match o {
                Obj::Deployment {
                    observed,
                    paused,
                    available,
                } => deployment(i, observed, paused, available),
                _ => unreachable!(),
            }
        }

        /// Object `i` of `kind` becomes `to` (`None`: deleted), and the watch says so — or,
        /// with `quietly`, not yet (a change the next relist brings).
        fn set(&mut self, kind: usize, i: usize, to: Option<Obj>, quietly: bool) {
            let was = std::mem::replace(&mut self.state[kind][i], to);
            if quietly {
                return;
            }
            match (kind, to, was) {
                (0, Some(o), _) => self.services.send(Event::Apply(self.service_of(i, o))),
                (0, None, Some(o)) => self.services.send(Event::Delete(self.service_of(i, o))),
                (1, Some(o), _) => self.pods.send(Event::Apply(self.pod_of(i, o))),
                (1, None, Some(o)) => self.pods.send(Event::Delete(self.pod_of(i, o))),
                (2, Some(o), _) => self.slices.send(Event::Apply(self.slice_of(i, o))),
                (2, None, Some(o)) => self.slices.send(Event::Delete(self.slice_of(i, o))),
                (3, Some(o), _) => self
                    .deployments
                    .send(Event::Apply(self.deployment_of(i, o))),
                (3, None, Some(o)) => self
                    .deployments
                    .send(Event::Delete(self.deployment_of(i, o))),
                _ => {}
            }
        }

        /// The verdict of ask `a` as served (kept, when it holds), and as judged afresh.
        async fn judge(&self, a: usize) -> (Judgement, Judgement) {
            let ask = &self.asks[a];
            let served = self.ev.judge_kept(ask).await;
            let fresh = self.ev.evaluate(ask).await.0;
            (served, fresh)
        }

        /// The verdict of ask `a` as a view serves it first: kept, without awaiting.
        fn served_at_once(&self, a: usize) -> Option<(Verdict, Option<Instant>)> {
            let kept = self.ev.kept_verdicts(&[&self.asks[a]]).pop().flatten();
            kept.map(|(verdict, until, _)| (verdict, until))
        }

        fn kept(&self, a: usize) -> Option<Judgement> {
            let ev = &self.ev;
            ev.memo
                .get(&self.asks[a], &ev.cache, ev.scripts(), Instant::now())
        }
    }

    /// Judgements compared as callers see them: the instant a verdict expires is the
    /// evaluation's own, whether it has one is not.
    fn seen(
        j: &Judgement,
    ) -> (
        Verdict,
        Option<String>,
        Option<String>,
        Option<String>,
        bool,
    ) {
        (
            j.verdict.clone(),
            j.blind.clone(),
            j.judged_selector.clone(),
            j.judged_state.clone(),
            j.valid_until.is_some(),
        )
    }

    /// A verdict served at once ([`Evaluator::kept_verdicts`]), if any, is the fresh one.
    fn at_once_agrees(at_once: Option<(Verdict, Option<Instant>)>, fresh: &Judgement) -> bool {
        at_once.is_none_or(|(verdict, until)| {
            (verdict, until.is_some()) == (fresh.verdict.clone(), fresh.valid_until.is_some())
        })
    }

    #[derive(Debug, Clone)]
    enum Step {
        /// Object `i` of a kind changes (or is deleted), told by its watch or not.
        Set(usize, usize, Option<Obj>, bool),
        /// A kind's watch lists again, without an error (what kube-rs does on a desync).
        Relist(usize),
        /// Ask `a` is judged once what was sent is applied.
        Judge(usize),
        /// Ask `a` is judged (and kept) while what was sent is being applied, then once it
        /// is: a judgement that read the old state must not be served as the new.
        JudgeRacing(usize),
    }

    fn obj(kind: usize) -> BoxedStrategy<Option<Obj>> {
        let o = match kind {
            0 => any::<bool>()
                .prop_map(|selects| Obj::Service { selects })
                .boxed(),
            1 => (0..N + 1, any::<bool>())
                .prop_map(|(of, ready)| Obj::Pod { of, ready })
                .boxed(),
            2 => (0..3usize).prop_map(|ready| Obj::Slice { ready }).boxed(),
            _ => (1..3i64, any::<bool>(), any::<bool>())
                .prop_map(|(observed, paused, available)| Obj::Deployment {
                    observed,
                    paused,
                    available,
                })
                .boxed(),
        };
        prop_oneof![1 => Just(None), 4 => o.prop_map(Some)].boxed()
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0..4usize, 0..N)
                .prop_flat_map(|(k, i)| (Just(k), Just(i), obj(k), proptest::bool::weighted(0.1)))
                .prop_map(|(k, i, o, quietly)| Step::Set(k, i, o, quietly)),
            1 => (0..4usize).prop_map(Step::Relist),
            3 => (0..2 * N).prop_map(Step::Judge),
            2 => (0..2 * N).prop_map(Step::JudgeRacing),
        ]
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config::config(64))]

        /// Whatever the order of changes, deletions, changes a relist brings and judgements,
        /// the verdict served for an ask is the one a fresh judgement gives at that moment.
        #[test]
        fn a_kept_verdict_equals_a_fresh_one(steps in proptest::collection::vec(step(), 1..40)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let mut world = World::new(None).await;
                for step in steps {
                    match step {
                        Step::Set(k, i, o, quietly) => world.set(k, i, o, quietly),
                        Step::Relist(k) => world.list(k),
                        Step::Judge(a) => {
                            fed::settle().await;
                            let at_once = world.served_at_once(a);
                            let (served, fresh) = world.judge(a).await;
                            prop_assert_eq!(seen(&served), seen(&fresh), "{}", world.asks[a]);
                            prop_assert!(at_once_agrees(at_once, &fresh), "{}", world.asks[a]);
                        }
                        Step::JudgeRacing(a) => {
                            world.ev.judge_kept(&world.asks[a]).await;
                            fed::settle().await;
                            let at_once = world.served_at_once(a);
                            let (served, fresh) = world.judge(a).await;
                            prop_assert_eq!(seen(&served), seen(&fresh), "{}", world.asks[a]);
                            prop_assert!(at_once_agrees(at_once, &fresh), "{}", world.asks[a]);
                        }
                    }
                }
                // And every ask at the end, once all is told.
                fed::settle().await;
                for a in 0..world.asks.len() {
                    let at_once = world.served_at_once(a);
                    let (served, fresh) = world.judge(a).await;
                    prop_assert_eq!(seen(&served), seen(&fresh), "{}", world.asks[a]);
                    prop_assert!(at_once_agrees(at_once, &fresh), "{}", world.asks[a]);
                }
                Ok(())
            })?;
        }
    }

    /// The incident the marks prevent: a Deployment paused after its verdict was kept must not
    /// be served as it was; a change elsewhere leaves the verdict kept.
    #[tokio::test]
    async fn a_kept_verdict_goes_with_a_change_of_what_it_read_and_stays_otherwise() {
        let mut world = World::new(None).await;
        let (svc, dep) = (0, 1);
        world.judge(svc).await;
        world.judge(dep).await;
        assert!(world.kept(svc).is_some() && world.kept(dep).is_some());
        // Another Deployment: neither read it.
        let paused = Obj::Deployment {
            observed: 2,
            paused: true,
            available: true,
        };
        world.set(3, 1, Some(paused), false);
        fed::settle().await;
        assert!(world.kept(svc).is_some() && world.kept(dep).is_some());
        world.set(3, 0, Some(paused), false);
        fed::settle().await;
        assert!(
            world.kept(svc).is_some(),
            "a Service does not read Deployments"
        );
        assert_eq!(world.kept(dep), None, "kept across a change of its object");
        let (served, fresh) = world.judge(dep).await;
        assert_eq!(
            served.verdict.status,
            crate::health::HealthStatus::Suspended
        );
        assert_eq!(seen(&served), seen(&fresh));
        // Any pod of the namespace may change what a Service's selector matches.
        world.set(
            1,
            2,
            Some(Obj::Pod {
                of: 2,
                ready: false,
            }),
            false,
        );
        fed::settle().await;
        assert_eq!(world.kept(svc), None);
    }

    /// The race the marks close: a judgement reads a Deployment paused, and while it runs (a
    /// health script, off the runtime) the Deployment is resumed. Kept as if read after the
    /// resume, it would say Suspended for as long as nothing else changed.
    #[tokio::test]
    async fn a_verdict_judged_while_its_object_changes_is_not_served_after() {
        // Slow enough that the watch task applies what is pending meanwhile.
        let script = "local n = 0\nfor i = 1, 20000 do n = n + i end\n\
                      if obj.spec.paused then return {status = \"Suspended\", message = \"paused\"} end\n\
                      return {status = \"Healthy\", message = \"running\"}";
        let lua = Arc::new(crate::argocd_lua::LuaHealth::default());
        lua.set_argocd_cm(Some(&std::collections::BTreeMap::from([(
            "resource.customizations.health.apps_Deployment".to_string(),
            script.to_string(),
        )])));
        let mut world = World::new(Some(lua)).await;
        let dep = 1;
        let deployment = |paused| {
            Some(Obj::Deployment {
                observed: 2,
                paused,
                available: true,
            })
        };
        // The watch task applies the resume while the script runs, if the scheduler lets it:
        // on a machine busy with other tests it once did not, so the race is tried until it
        // happens (each try that missed it kept a verdict of a settled Deployment: right).
        let mut raced = false;
        for _ in 0..20 {
            world.set(3, 0, deployment(true), false);
            fed::settle().await;
            // Resumed, not yet applied: it is, while the judgement below runs its script.
            world.set(3, 0, deployment(false), false);
            let epoch = world.ev.cache.epoch();
            let racing = world.ev.judge_kept(&world.asks[dep]).await;
            raced = world.ev.cache.epoch() != epoch;
            fed::settle().await;
            if raced {
                assert_eq!(
                    racing.verdict.status,
                    crate::health::HealthStatus::Suspended,
                    "{racing:?}"
                );
                break;
            }
        }
        assert!(raced, "the race did not happen in 20 tries");
        let (served, fresh) = world.judge(dep).await;
        assert_eq!(fresh.verdict.status, crate::health::HealthStatus::Healthy);
        assert_eq!(seen(&served), seen(&fresh));
    }

    /// A watch that fails keeps nothing judged on it: until its relist completes, the verdict
    /// says the cache is relisting (and is not kept), and after, what the relist brought is
    /// judged, though no event told of it.
    #[tokio::test]
    async fn nothing_judged_before_a_watch_error_is_served_after_it() {
        let mut world = World::new(None).await;
        let svc = 0;
        let (before, _) = world.judge(svc).await;
        assert_eq!(before.verdict.status, crate::health::HealthStatus::Healthy);
        assert!(world.kept(svc).is_some());
        // While the watch is away, the only ready endpoint of s0 goes.
        world.set(2, 0, Some(Obj::Slice { ready: 0 }), true);
        world.pods.fail();
        fed::settle().await;
        assert_eq!(world.kept(svc), None, "kept across a watch error");
        let (during, fresh) = world.judge(svc).await;
        assert!(during.verdict.message.contains("relisting"), "{during:?}");
        assert_eq!(seen(&during), seen(&fresh));
        assert_eq!(world.kept(svc), None, "a blind verdict was kept");
        // The pods' relist, and the slices' (which saw no error: a quiet relist).
        let start = Instant::now();
        while world.pods.connections() < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "never reconnected"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        world.list(1);
        world.list(2);
        fed::settle().await;
        let (after, fresh) = world.judge(svc).await;
        assert_ne!(after.verdict.status, crate::health::HealthStatus::Healthy);
        assert_eq!(seen(&after), seen(&fresh));
    }

    /// A store nobody vouches for (the API server silent) is not served, kept or not.
    #[tokio::test]
    async fn nothing_kept_is_served_while_the_api_server_is_silent() {
        let world = World::new(None).await;
        world.judge(1).await;
        assert!(world.kept(1).is_some());
        // Neither a heartbeat nor a list of its watches lately (a list vouches for a store as
        // a heartbeat would).
        world.ev.cache.freeze_for_test(Duration::from_secs(60));
        assert_eq!(world.kept(1), None);
        let (served, fresh) = world.judge(1).await;
        assert_eq!(seen(&served), seen(&fresh));
    }

    /// A verdict judged by one of argocd-cm's scripts is judged again once the scripts change.
    #[tokio::test]
    async fn new_argocd_cm_scripts_judge_at_once() {
        let lua = Arc::new(crate::argocd_lua::LuaHealth::default());
        let script = |status: &str| {
            std::collections::BTreeMap::from([(
                "resource.customizations.health.apps_Deployment".to_string(),
                format!("return {{status = \"{status}\", message = \"by the script\"}}"),
            )])
        };
        lua.set_argocd_cm(Some(&script("Suspended")));
        let world = World::new(Some(lua.clone())).await;
        let (first, _) = world.judge(1).await;
        assert_eq!(first.verdict.status, crate::health::HealthStatus::Suspended);
        assert!(world.kept(1).is_some());
        lua.set_argocd_cm(Some(&script("Healthy")));
        assert_eq!(world.kept(1), None, "kept across new scripts");
        let (served, fresh) = world.judge(1).await;
        assert_eq!(served.verdict.status, crate::health::HealthStatus::Healthy);
        assert_eq!(seen(&served), seen(&fresh));
    }

    /// What rests on more than the reads is never kept: a persistent failure (its grace runs
    /// with time), Unknown, a missing object then created.
    #[tokio::test]
    async fn a_persistent_failure_is_not_kept() {
        let mut world = World::new(None).await;
        // s0 selects app=s0, but its only pod is now labelled for another app: no pod
        // matches while a near one exists.
        world.set(1, 0, Some(Obj::Pod { of: N, ready: true }), false);
        world.set(1, 1, None, false);
        world.set(1, 2, None, false);
        fed::settle().await;
        let (served, fresh) = world.judge(0).await;
        assert_eq!(seen(&served), seen(&fresh));
        if served.valid_until.is_some() {
            assert_eq!(world.kept(0), None, "kept with an expiry: {served:?}");
        }
        world.set(3, 1, None, false);
        fed::settle().await;
        let (gone, _) = world.judge(3).await;
        assert_eq!(gone.verdict.status, crate::health::HealthStatus::Missing);
        assert!(world.kept(3).is_some());
        let back = Obj::Deployment {
            observed: 2,
            paused: false,
            available: true,
        };
        world.set(3, 1, Some(back), false);
        fed::settle().await;
        assert_eq!(
            world.kept(3),
            None,
            "a missing object's verdict outlived its creation"
        );
    }
}
