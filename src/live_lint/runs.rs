//! Live lint's runs in this process: off the async workers, a few at once, within a size and
//! a time budget, and remembered by what they read.
//!
//! The waves view lints an Application at every poll (the UI extension asks every 5 s), and
//! the rules' cost grows with what a tenant writes. With the shipped 500m CPU limit tokio has
//! one worker, so lint run inline could hold `/healthz` past the kubelet's probe and get the
//! pod restarted. Here the rules run on the blocking pool, at most [`Budget::runs`] at once (a
//! poll that finds them all taken is told "busy" rather than queued), only on inputs within
//! [`Budget::objects`] and [`Budget::bytes`], and a caller waits at most [`Budget::time`]. A run
//! the caller stopped waiting for keeps its permit until it ends, so abandoned work cannot
//! pile up past the permits; its findings are remembered for the next poll.

use super::{Kept, LintInput, LiveLint};
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// How much live lint may cost.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    /// Lint runs at once, across every Application.
    pub runs: usize,
    /// Objects one run may lint.
    pub objects: usize,
    /// Bytes of the linted objects one run may read (their specs as JSON, labels and
    /// annotations).
    pub bytes: usize,
    /// How long a view waits for a run.
    pub time: Duration,
    /// Applications whose last findings are remembered.
    pub remembered: u64,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            // Two: one slow Application cannot keep every other one's lint waiting, and two
            // runs leave the second core (or the one worker) to the API.
            runs: 2,
            objects: 5_000,
            bytes: 8 << 20,
            // Under the extension's 5 s poll, so a view never waits into the next poll.
            time: Duration::from_secs(2),
            remembered: 512,
        }
    }
}

/// Whose findings an entry holds: one Application as one scope sees it (through Argo CD's
/// proxy lint reads only what the viewed project may read, a different input).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Viewed {
    pub namespace: String,
    pub name: String,
    pub project: Option<String>,
}

/// Findings, and the fingerprint of the input they were found in.
type Remembered = (u64, Arc<LiveLint>);

pub(crate) struct Runs {
    budget: Budget,
    permits: Arc<Semaphore>,
    remembered: moka::future::Cache<Viewed, Remembered>,
    /// Keyed per process, so a tenant cannot craft two inputs with one fingerprint.
    fingerprints: RandomState,
    /// The objects lint read, kept while what they were read from holds.
    kept: Kept,
}

impl Default for Runs {
    fn default() -> Runs {
        Runs::new(Budget::default())
    }
}

/// Why a view shows no findings of this poll. The words "lint skipped" lead, as the UIs show
/// the message as it is.
fn skipped(why: impl std::fmt::Display) -> LiveLint {
    LiveLint {
        skipped: Some(format!("lint skipped: {why}")),
        ..LiveLint::default()
    }
}

impl Runs {
    pub(crate) fn new(budget: Budget) -> Runs {
        Runs {
            permits: Arc::new(Semaphore::new(budget.runs)),
            remembered: moka::future::Cache::builder()
                .max_capacity(budget.remembered)
                // An Application nobody views (deleted, or closed in the UI) drops out.
                .time_to_idle(Duration::from_secs(600))
                .build(),
            fingerprints: RandomState::new(),
            kept: Kept::default(),
            budget,
        }
    }

    /// The objects lint read, kept while what they were read from holds.
    pub(crate) fn kept(&self) -> &Kept {
        &self.kept
    }

    /// `rules` on `input`, or what was found in the same input before, or why not.
    pub(crate) async fn lint<F>(&self, viewed: Viewed, input: LintInput, rules: F) -> LiveLint
    where
        F: FnOnce(LintInput) -> LiveLint + Send + 'static,
    {
        let (fingerprint, bytes) = fingerprint(&input, self.fingerprints.build_hasher());
        if let Some((seen, found)) = self.remembered.get(&viewed).await
            && seen == fingerprint
        {
            return (*found).clone();
        }
        let objects = input.objects.len();
        if objects > self.budget.objects || bytes > self.budget.bytes {
            return skipped(format!(
                "over budget: {objects} objects, {bytes} bytes read; live lint reads at most \
                 {} objects and {} bytes (run `wavegate lint` on the manifests instead)",
                self.budget.objects, self.budget.bytes
            ));
        }
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return LiveLint {
                passing: true,
                ..skipped(format!(
                    "busy: {} lint runs in progress; the next poll tries again",
                    self.budget.runs
                ))
            };
        };
        let run = tokio::task::spawn_blocking(move || {
            // Held until the rules end, not until the caller stops waiting.
            let _permit = permit;
            rules(input)
        });
        let remembered = self.remembered.clone();
        let finished = tokio::spawn(async move {
            let found = Arc::new(run.await?);
            remembered
                .insert(viewed, (fingerprint, found.clone()))
                .await;
            Ok::<_, tokio::task::JoinError>(found)
        });
        match tokio::time::timeout(self.budget.time, finished).await {
            Ok(Ok(Ok(found))) => (*found).clone(),
            Ok(Ok(Err(e)) | Err(e)) => LiveLint {
                note: Some(format!("not linted: the lint run failed: {e}")),
                passing: true,
                ..LiveLint::default()
            },
            Err(_) => LiveLint {
                passing: true,
                ..skipped(format!(
                    "over budget: not done within {}; its findings show at a later poll once done",
                    humantime::format_duration(self.budget.time)
                ))
            },
        }
    }
}

/// A fingerprint of everything the rules read, and how many bytes that is: of each object's
/// digest, computed once when it was read ([`super::Sealed`]).
fn fingerprint(input: &LintInput, mut hasher: impl Hasher) -> (u64, usize) {
    input.destination.hash(&mut hasher);
    input.unread.hash(&mut hasher);
    let mut bytes = 0;
    for o in &input.objects {
        o.digest.hash(&mut hasher);
        bytes += o.bytes;
    }
    (hasher.finish(), bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live_lint::{Seen, object};
    use crate::resource::ResourceRef;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    fn listed(group: &str, kind: &str, ns: &str, name: &str) -> ResourceRef {
        ResourceRef {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    /// The attack's shape: `databases` CNPG Databases of Cluster pg, and a Deployment whose
    /// env carries `env_bytes` of text besides its database host.
    fn app(databases: usize, env_bytes: usize) -> LintInput {
        input(objects(databases, env_bytes))
    }

    /// The input of `objects`, each sealed as a read seals it.
    fn input(objects: Vec<crate::lint::Object>) -> LintInput {
        LintInput {
            objects: objects
                .into_iter()
                .map(|o| Arc::new(crate::live_lint::Sealed::of(o)))
                .collect(),
            destination: "cicd".into(),
            unread: Vec::new(),
        }
    }

    fn objects(databases: usize, env_bytes: usize) -> Vec<crate::lint::Object> {
        let deployment = json!({"spec": {"template": {"spec": {"containers": [{
            "name": "forgejo", "image": "forgejo", "env": [
                {"name": "FORGEJO__database__HOST", "value": "pg-rw.ddb.svc.cluster.local:5432"},
                {"name": "FORGEJO__database__NAME", "value": "forgejo"},
                {"name": "PADDING", "value": "word ".repeat(env_bytes / 5)}]}]}}}});
        let mut objects = vec![object(
            &listed("apps", "Deployment", "cicd", "forgejo"),
            3,
            Seen::of(&deployment, &["template", "jobTemplate"]),
        )];
        objects.push(object(
            &listed(crate::lint::references::CNPG, "Cluster", "ddb", "pg"),
            3,
            Seen::default(),
        ));
        // The first is the Deployment's, applied in its wave: a same-wave finding.
        objects.extend((0..databases).map(|i| {
            let name = if i == 0 {
                "forgejo".to_string()
            } else {
                format!("db{i}")
            };
            let database = json!({"spec": {"name": name, "cluster": {"name": "pg"}}});
            object(
                &listed(crate::lint::references::CNPG, "Database", "ddb", &name),
                3,
                Seen::of(&database, &["name", "cluster"]),
            )
        }));
        objects
    }

    fn viewed(name: &str) -> Viewed {
        Viewed {
            namespace: "argocd".into(),
            name: name.into(),
            project: None,
        }
    }

    /// The rules, counting their runs.
    fn counted(runs: &Arc<AtomicUsize>) -> impl FnOnce(LintInput) -> LiveLint + Send + 'static {
        let runs = runs.clone();
        move |input| {
            runs.fetch_add(1, Ordering::SeqCst);
            input.lint()
        }
    }

    /// Rules that do not end until `release` is dropped or sent to, counting those running.
    fn held(
        running: &Arc<AtomicUsize>,
        release: std::sync::mpsc::Receiver<()>,
    ) -> impl FnOnce(LintInput) -> LiveLint + Send + 'static {
        let running = running.clone();
        move |input| {
            running.fetch_add(1, Ordering::SeqCst);
            let _ = release.recv();
            running.fetch_sub(1, Ordering::SeqCst);
            input.lint()
        }
    }

    /// Waits for `what`, without a timing bound a loaded machine could miss; a run that never
    /// gets there fails the test after a minute instead of hanging it.
    async fn until(what: impl Fn() -> bool) {
        let waiting = async {
            while !what() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .expect("the awaited state never came");
    }

    /// The shipped 500m limit gives tokio one worker (`#[tokio::test]`'s runtime has one too):
    /// while the rules run, that worker must still answer (`/healthz`). Were the rules run on
    /// it, nothing else could run until they gave up waiting, and the wait below would time out.
    #[tokio::test]
    async fn the_one_async_worker_stays_free_while_the_rules_run() {
        let runs = Arc::new(Runs::new(Budget {
            time: Duration::from_secs(60),
            ..Budget::default()
        }));
        let running = Arc::new(AtomicUsize::new(0));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let slow = running.clone();
        let rules = move |input: LintInput| {
            slow.fetch_add(1, Ordering::SeqCst);
            let _ = wait.recv_timeout(Duration::from_secs(5));
            slow.fetch_sub(1, Ordering::SeqCst);
            input.lint()
        };
        let view = {
            let runs = runs.clone();
            tokio::spawn(async move { runs.lint(viewed("slow"), app(3, 10), rules).await })
        };
        let answered = tokio::time::timeout(
            Duration::from_secs(3),
            until(|| running.load(Ordering::SeqCst) == 1),
        )
        .await;
        assert!(answered.is_ok(), "the async worker was held by the rules");
        let _ = release.send(());
        assert_eq!(view.await.ok().and_then(|f| f.skipped), None);
    }

    #[tokio::test]
    async fn thousands_of_databases_over_budget_are_skipped_without_running_the_rules() {
        let runs = Runs::new(Budget {
            objects: 1_000,
            ..Budget::default()
        });
        let ran = Arc::new(AtomicUsize::new(0));
        let found = runs
            .lint(viewed("ddb"), app(2_000, 100), counted(&ran))
            .await;
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        let skipped = found.skipped.unwrap_or_default();
        assert!(
            skipped.starts_with("lint skipped: over budget: 2002 objects"),
            "{skipped}"
        );
    }

    #[tokio::test]
    async fn a_huge_env_value_over_the_byte_budget_is_skipped_without_running_the_rules() {
        let runs = Runs::new(Budget {
            bytes: 100_000,
            ..Budget::default()
        });
        let ran = Arc::new(AtomicUsize::new(0));
        let found = runs
            .lint(viewed("forgejo"), app(10, 200_000), counted(&ran))
            .await;
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert!(
            found
                .skipped
                .is_some_and(|s| s.starts_with("lint skipped: over budget")),
        );
    }

    #[tokio::test]
    async fn an_unchanged_poll_shows_the_remembered_findings_without_running_the_rules() {
        let runs = Runs::default();
        let ran = Arc::new(AtomicUsize::new(0));
        let first = runs
            .lint(viewed("forgejo"), app(3, 10), counted(&ran))
            .await;
        let second = runs
            .lint(viewed("forgejo"), app(3, 10), counted(&ran))
            .await;
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(!first.findings.is_empty(), "{first:?}");
        assert_eq!(
            serde_json::to_value(&first).ok(),
            serde_json::to_value(&second).ok()
        );
    }

    #[tokio::test]
    async fn a_changed_object_or_wave_runs_the_rules_again() {
        let runs = Runs::default();
        let ran = Arc::new(AtomicUsize::new(0));
        runs.lint(viewed("forgejo"), app(3, 10), counted(&ran))
            .await;
        // A Database added (a new object listed, read at a new resourceVersion).
        runs.lint(viewed("forgejo"), app(4, 10), counted(&ran))
            .await;
        assert_eq!(ran.load(Ordering::SeqCst), 2);
        // The same objects, one moved to another wave in the Application's status.
        let mut moved = objects(4, 10);
        moved[2]
            .annotations
            .insert(crate::lint::sync_order::SYNC_WAVE.into(), "7".into());
        runs.lint(viewed("forgejo"), input(moved), counted(&ran))
            .await;
        assert_eq!(ran.load(Ordering::SeqCst), 3);
        // Another Application with the same objects has findings of its own.
        runs.lint(viewed("other"), app(4, 10), counted(&ran)).await;
        assert_eq!(ran.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_third_view_while_two_runs_are_busy_is_skipped_not_queued() {
        let runs = Arc::new(Runs::new(Budget {
            time: Duration::from_secs(60),
            ..Budget::default()
        }));
        let running = Arc::new(AtomicUsize::new(0));
        let mut releases = Vec::new();
        let mut views = Vec::new();
        for name in ["a", "b"] {
            let (release, wait) = std::sync::mpsc::channel();
            releases.push(release);
            let (runs, rules) = (runs.clone(), held(&running, wait));
            views.push(tokio::spawn(async move {
                runs.lint(viewed(name), app(1, 10), rules).await
            }));
        }
        until(|| running.load(Ordering::SeqCst) == 2).await;
        let ran = Arc::new(AtomicUsize::new(0));
        let third = runs.lint(viewed("c"), app(1, 10), counted(&ran)).await;
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert!(
            third
                .skipped
                .as_deref()
                .is_some_and(|s| s.starts_with("lint skipped: busy")),
            "{third:?}"
        );
        drop(releases);
        for view in views {
            let found = view.await.unwrap();
            assert_eq!(found.skipped, None, "{found:?}");
        }
        // The permits are back.
        let fourth = runs.lint(viewed("c"), app(1, 10), counted(&ran)).await;
        assert_eq!((ran.load(Ordering::SeqCst), fourth.skipped), (1, None));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_past_the_time_budget_is_skipped_keeps_its_permit_and_shows_later() {
        let runs = Runs::new(Budget {
            runs: 1,
            time: Duration::from_millis(50),
            ..Budget::default()
        });
        let running = Arc::new(AtomicUsize::new(0));
        let (release, wait) = std::sync::mpsc::channel();
        let slow = runs
            .lint(viewed("slow"), app(3, 10), held(&running, wait))
            .await;
        assert!(
            slow.skipped
                .as_deref()
                .is_some_and(|s| s.starts_with("lint skipped: over budget: not done within")),
            "{slow:?}"
        );
        // The abandoned run still holds its permit: work does not pile up behind the view.
        let ran = Arc::new(AtomicUsize::new(0));
        let other = runs.lint(viewed("other"), app(1, 10), counted(&ran)).await;
        assert!(other.skipped.is_some_and(|s| s.contains("busy")));
        let _ = release.send(());
        // Once done, its findings are the next poll's, without running the rules again. The
        // run remembers them after its permit is back, so wait for the memory, not the permit.
        until(|| runs.remembered.contains_key(&viewed("slow"))).await;
        assert_eq!(running.load(Ordering::SeqCst), 0);
        let later = runs.lint(viewed("slow"), app(3, 10), counted(&ran)).await;
        assert_eq!(later.skipped, None);
        assert!(!later.findings.is_empty());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn remembered_findings_are_bounded() {
        let runs = Runs::new(Budget {
            remembered: 4,
            ..Budget::default()
        });
        let ran = Arc::new(AtomicUsize::new(0));
        for i in 0..20 {
            runs.lint(viewed(&format!("app{i}")), app(1, 10), counted(&ran))
                .await;
        }
        runs.remembered.run_pending_tasks().await;
        assert!(runs.remembered.entry_count() <= 4);
    }

    /// The cost the budget leaves: the attack's shape (2,000 Databases, a 200 KB env value)
    /// linted, then polled again unchanged. Printed, not asserted (`--nocapture`); the inputs
    /// are built before each clock starts, as the watch cache's reads are not this module's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cost_of_a_2000_database_app_linted_and_remembered() {
        const POLLS: u32 = 20;
        let attack = || app(2_000, 200_000);
        let runs = Runs::default();
        let ran = Arc::new(AtomicUsize::new(0));

        let input = attack();
        let start = Instant::now();
        let (_, bytes) = fingerprint(&input, RandomState::new().build_hasher());
        let fingerprinted = start.elapsed();
        let start = Instant::now();
        let inline = input.lint();
        let rules = start.elapsed();

        let input = attack();
        let start = Instant::now();
        let first = runs.lint(viewed("ddb"), input, counted(&ran)).await;
        let uncached = start.elapsed();
        let inputs: Vec<_> = (0..POLLS).map(|_| attack()).collect();
        let start = Instant::now();
        for input in inputs {
            runs.lint(viewed("ddb"), input, counted(&ran)).await;
        }
        let cached = start.elapsed() / POLLS;
        println!(
            "2,000 Databases + 200 KB env, {bytes} bytes read, {} finding(s): rules alone \
             {rules:?}; first poll {uncached:?} (skipped: {:?}); unchanged poll {cached:?} \
             (fingerprint alone {fingerprinted:?}); rules ran {} time(s) in {} polls",
            inline.findings.len(),
            first.skipped,
            ran.load(Ordering::SeqCst),
            POLLS + 1
        );
    }
}
