//! The operator: a kube-runtime `Controller` over `JobQueue`.
//!
//! Each reconcile reads (the spec; its Secrets and the worker workload's scale,
//! [`cluster_reads`]; the queue in Redis through the [`redis_pool`]), decides with pure
//! functions ([`validate`], [`scaling`], [`status`], [`events`], [`failures`]) and
//! writes (the scale and the status, only when they change; Events when something
//! needs a person). See [`reconcile`](mod@reconcile) for the pipeline and [`operator`]
//! for the process around it: leader election, the HTTP endpoints and shutdown.
//!
//! What outlives one reconcile sits in the [`Context`]: the shared clients, the metrics,
//! and one state per queue (its failures, for the backoff, and its recent scale
//! recommendations), forgotten as a whole when the queue goes away.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector;
use tracing::warn;

use crate::crd::JobQueue;
use metrics::QueueLabels;

pub mod caches;
pub mod cluster_reads;
pub mod events;
pub mod failures;
pub mod http;
pub mod lifecycle;
pub mod metrics;
pub mod operator;
pub mod ownership;
pub mod partitions;
pub mod pause;
pub mod reconcile;
pub mod redis_pool;
pub mod scaling;
pub mod status;
pub mod status_write;
pub mod validate;

pub use metrics::Metrics;
pub use reconcile::reconcile;
pub use status::Failure;

/// The field manager of every write the operator makes (server-side apply).
pub const FIELD_MANAGER: &str = "jobqueue-operator";
/// The controller's name in Events.
pub const CONTROLLER_NAME: &str = "jobqueue-operator";

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The queue could not be reached or used; the status says so.
    #[error("{}: {}", .0.reason, .0.message)]
    Unavailable(Failure),

    /// The Kubernetes API refused or failed a call.
    #[error("Kubernetes API: {0}")]
    Kube(#[source] kube::Error),

    /// A JobQueue without a namespace (the resource is namespaced, so never in practice).
    #[error("JobQueue {0} has no namespace")]
    NoNamespace(String),

    /// The finalizer could not be used (never in practice: a JobQueue has a name).
    #[error("finalizer: {0}")]
    Finalizer(String),
}

impl Error {
    /// A stable, low-cardinality label for metrics.
    pub fn metric_label(&self) -> String {
        match self {
            Error::Unavailable(f) => snake_case(f.reason),
            Error::Kube(_) => "kube_api".to_string(),
            Error::NoNamespace(_) => "no_namespace".to_string(),
            Error::Finalizer(_) => "finalizer".to_string(),
        }
    }
}

/// `RedisUnreachable` → `redis_unreachable`.
pub fn snake_case(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len() + 4);
    let mut prev_lower = false;
    for c in reason.chars() {
        if c.is_ascii_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower = false;
        } else {
            out.push(c);
            prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
    }
    out
}

/// Tunables of the reconciler.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Reaper calls per reconcile at most (each handles up to `reaper.batchSize` leases).
    pub reap_budget: usize,
    /// How long connecting to a Redis may take.
    pub connect_timeout: Duration,
    /// How long one Redis command may take.
    pub response_timeout: Duration,
    /// The first retry delay after a failed reconcile; doubled per failure.
    pub backoff_initial: Duration,
    /// The longest retry delay after failed reconciles. A queue with a valid spec is
    /// never retried later than one `reaper.interval` after a failure either (see
    /// [`error_policy`]).
    pub backoff_max: Duration,
    /// How often at most a change of the counts alone is written to the status (zero:
    /// every change); a change a person would act on is written at once
    /// ([`status_write::decide`]).
    pub status_interval: Duration,
    /// Watch the Secrets, HPAs, Deployments and StatefulSets into caches (and as
    /// triggers) while the controller runs; without, every read is a request. The
    /// operator's flags turn it on; off by default for tests that script every request.
    pub watch_related: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            reap_budget: 10,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(10),
            backoff_initial: Duration::from_secs(5),
            backoff_max: Duration::from_secs(300),
            status_interval: Duration::ZERO,
            watch_related: false,
        }
    }
}

/// How long a target cache may lag behind a scale the operator made before its count is
/// trusted again (someone else may have set the replicas meanwhile).
pub const CACHE_LAG: Duration = Duration::from_secs(30);

/// Where a reconcile takes the time from: the system clock, or a test's.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// What the controller keeps about one queue between its reconciles.
#[derive(Debug, Default)]
struct QueueState {
    /// The object this is about: a queue deleted and created again under its name is
    /// another object, and starts afresh.
    uid: Option<String>,
    /// Consecutive failed reconciles, for the backoff.
    failures: u32,
    /// Recent scale recommendations, for the scale-down stabilization.
    recommendations: scaling::Recommendations,
    /// The last plan its spec passed validation with, to go on reaping when a later spec
    /// is invalid as a whole. Kept in memory only: an operator that starts on an
    /// invalid spec has none.
    last_good: Option<LastGoodPlan>,
    /// Consecutive reconciles that could not read the queue, for `workers.fallback`.
    unreadable: u32,
    /// When this controller last wrote the status, for the counts' throttle.
    last_status_write: Option<Timestamp>,
    /// The replicas this controller last set on its target (`Kind/name`), and when: until
    /// the target cache shows them, the cache is behind and the target is read from the
    /// API (a reconcile right after a scale must not act on the count before it).
    expected_replicas: Option<(String, i32, Timestamp)>,
}

/// A plan a spec of the queue passed validation with, and that spec's generation.
#[derive(Debug, Clone, PartialEq)]
pub struct LastGoodPlan {
    pub plan: validate::QueuePlan,
    pub generation: Option<i64>,
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub redis_pool: redis_pool::RedisPool,
    pub settings: Settings,
    /// The controller's cache of JobQueues, to tell which of several scaling one target
    /// owns it; `None` (no cache: tests of one queue) skips that check.
    /// Set by the controller as it starts (each leadership has its cache); one per
    /// watched scope: the namespace, `None` for all namespaces.
    jobqueues: std::sync::RwLock<HashMap<Option<String>, reflector::Store<JobQueue>>>,
    /// Who publishes Events (for a recorder of its own per scale Event).
    reporter: Reporter,
    clock: Clock,
    /// One state per queue, forgotten as a whole when the queue goes away.
    queues: Mutex<HashMap<QueueLabels, QueueState>>,
    /// The watched Secrets, HPAs and targets, while the controller runs (none: every
    /// read goes to the API); one per watched scope, as `jobqueues`.
    caches: Mutex<HashMap<Option<String>, caches::Caches>>,
}

impl Context {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        instance: Option<String>,
        settings: Settings,
    ) -> Context {
        let reporter = Reporter {
            controller: CONTROLLER_NAME.to_string(),
            instance,
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            reporter,
            client,
            metrics,
            redis_pool: redis_pool::RedisPool::default(),
            settings,
            jobqueues: std::sync::RwLock::default(),
            clock: Arc::new(Timestamp::now),
            queues: Mutex::default(),
            caches: Mutex::default(),
        }
    }

    /// The same context reading from `caches` (tests fill them by hand).
    pub fn with_caches(self, caches: caches::Caches) -> Context {
        self.set_caches(caches);
        self
    }

    /// Read from `caches` from now on (the controller's of all namespaces, while it runs).
    pub fn set_caches(&self, caches: caches::Caches) {
        self.set_caches_for(None, caches);
    }

    /// Read from `caches` in the watched `scope` from now on (the namespace, `None` for
    /// all namespaces).
    pub fn set_caches_for(&self, scope: Option<&str>, caches: caches::Caches) {
        let mut all = self.caches.lock().expect("caches lock");
        all.insert(scope.map(str::to_string), caches);
    }

    /// The caches reconciles of all namespaces read from now.
    pub fn caches(&self) -> caches::Caches {
        let all = self.caches.lock().expect("caches lock");
        all.get(&None).cloned().unwrap_or_default()
    }

    /// Drop the caches of the watched `scope` (its controller stopped): reads go to the
    /// API again.
    pub fn forget_caches_for(&self, scope: Option<&str>) {
        let mut all = self.caches.lock().expect("caches lock");
        all.remove(&scope.map(str::to_string));
    }

    /// The caches a reconcile of a queue in `ns` reads: its namespace's controller's,
    /// else the one of all namespaces, else none (every read goes to the API).
    pub fn caches_for(&self, ns: &str) -> caches::Caches {
        let all = self.caches.lock().expect("caches lock");
        all.get(&Some(ns.to_string()))
            .or_else(|| all.get(&None))
            .cloned()
            .unwrap_or_default()
    }

    /// Whether to write `new` over `prev` now (see [`status_write::decide`]).
    pub(crate) fn status_write(
        &self,
        queue: &JobQueue,
        prev: Option<&crate::crd::JobQueueStatus>,
        new: &crate::crd::JobQueueStatus,
        now: Timestamp,
    ) -> status_write::StatusWrite {
        let last = self.with_state(queue, |state| state.last_status_write);
        status_write::decide(prev, new, last, now, self.settings.status_interval)
    }

    /// Remember that the status of `queue` was written at `now`.
    pub(crate) fn status_written(&self, queue: &JobQueue, now: Timestamp) {
        self.with_state(queue, |state| state.last_status_write = Some(now));
    }

    /// The operator set `target`'s replicas to `replicas` at `now`.
    pub(crate) fn scaled_to(
        &self,
        queue: &JobQueue,
        target: String,
        replicas: i32,
        now: Timestamp,
    ) {
        self.with_state(queue, |state| {
            state.expected_replicas = Some((target, replicas, now));
        });
    }

    /// Whether the cached `replicas` of `target` may be trusted: `false` while they are
    /// not yet the count the operator last set (for at most [`CACHE_LAG`]).
    pub(crate) fn cache_caught_up(
        &self,
        queue: &JobQueue,
        target: &str,
        cached: Option<i32>,
        now: Timestamp,
    ) -> bool {
        self.with_state(queue, |state| match &state.expected_replicas {
            Some((t, want, at))
                if t == target
                    && cached != Some(*want)
                    && now.duration_since(*at).as_secs() < CACHE_LAG.as_secs() as i64 =>
            {
                false
            }
            _ => {
                state.expected_replicas = None;
                true
            }
        })
    }

    /// The same context on another clock (tests step time instead of sleeping).
    pub fn with_clock(mut self, clock: Clock) -> Context {
        self.clock = clock;
        self
    }

    /// Use the controller's cache of JobQueues (of all namespaces) from now on.
    pub fn set_jobqueues(&self, store: reflector::Store<JobQueue>) {
        self.set_jobqueues_for(None, store);
    }

    /// Use the cache of JobQueues of the controller watching `scope` (the namespace,
    /// `None` for all namespaces) from now on.
    pub fn set_jobqueues_for(&self, scope: Option<&str>, store: reflector::Store<JobQueue>) {
        let mut all = self.jobqueues.write().expect("jobqueues lock");
        all.insert(scope.map(str::to_string), store);
    }

    /// The queues in every watched scope's cache (what a sweep keeps: one namespace's
    /// controller must not forget another's queues).
    pub(crate) fn watched_queues(&self) -> HashSet<QueueLabels> {
        let all = self.jobqueues.read().expect("jobqueues lock");
        all.values()
            .flat_map(|store| store.state())
            .map(|q| queue_labels(&q))
            .collect()
    }

    /// The JobQueues the controller knows in `ns`: from the cache of that namespace,
    /// else the one of all namespaces; `None` without a cache.
    pub(crate) fn jobqueues_in(&self, ns: &str) -> Option<Vec<Arc<JobQueue>>> {
        let all = self.jobqueues.read().expect("jobqueues lock");
        all.get(&Some(ns.to_string()))
            .or_else(|| all.get(&None))
            .map(|s| s.state())
    }

    /// A recorder with no memory of earlier Events. The shared one folds an Event into
    /// the previous one of the same reason (keeping the first note); each scale is news
    /// of its own, with its own numbers.
    pub(crate) fn fresh_recorder(&self) -> Recorder {
        Recorder::new(self.client.clone(), self.reporter.clone())
    }

    /// Now, at the API's precision (whole seconds).
    pub fn now(&self) -> Timestamp {
        status::truncate((self.clock)())
    }

    /// Run `f` on the state of `queue`, a fresh one if it is another object than the
    /// one the state was kept for.
    fn with_state<T>(&self, queue: &JobQueue, f: impl FnOnce(&mut QueueState) -> T) -> T {
        let mut queues = self.queues.lock().expect("queue state lock");
        let state = queues.entry(queue_labels(queue)).or_default();
        if state.uid != queue.metadata.uid {
            *state = QueueState {
                uid: queue.metadata.uid.clone(),
                ..QueueState::default()
            };
        }
        f(state)
    }

    /// Run `f` on the scale recommendations of `queue`.
    pub(crate) fn with_recommendations<T>(
        &self,
        queue: &JobQueue,
        f: impl FnOnce(&mut scaling::Recommendations) -> T,
    ) -> T {
        self.with_state(queue, |state| f(&mut state.recommendations))
    }

    /// Forget the scale recommendations of `queue` (it no longer scales).
    pub(crate) fn forget_recommendations(&self, queue: &JobQueue) {
        self.with_state(queue, |state| state.recommendations.clear());
    }

    /// Remember `plan` as the last good one of `queue` (its spec passed validation).
    pub(crate) fn remember_plan(&self, queue: &JobQueue, plan: &validate::QueuePlan) {
        let good = LastGoodPlan {
            plan: plan.clone(),
            generation: queue.metadata.generation,
        };
        self.with_state(queue, |state| state.last_good = Some(good));
    }

    /// The last plan a spec of `queue` (this object) passed validation with, if any.
    pub(crate) fn last_good_plan(&self, queue: &JobQueue) -> Option<LastGoodPlan> {
        self.with_state(queue, |state| state.last_good.clone())
    }

    /// Forget what is kept about queues that no longer exist: their metrics and their
    /// state, together.
    pub fn retain(&self, alive: &HashSet<QueueLabels>) {
        self.metrics.retain(alive);
        self.queues
            .lock()
            .expect("queue state lock")
            .retain(|queue, _| alive.contains(queue));
    }

    /// Count a reconcile that could not read the queue; returns how many in a row.
    pub(crate) fn unreadable(&self, queue: &JobQueue) -> u32 {
        self.with_state(queue, |state| {
            state.unreadable = state.unreadable.saturating_add(1);
            state.unreadable
        })
    }

    /// The queue could be read: the count of [`Context::unreadable`] starts over.
    pub(crate) fn readable(&self, queue: &JobQueue) {
        self.with_state(queue, |state| state.unreadable = 0);
    }

    /// Forget all that is kept about `queue` at once (it was deleted): its state and its
    /// metric series, without waiting for the sweep.
    pub fn forget(&self, queue: &JobQueue) {
        let labels = queue_labels(queue);
        self.metrics.forget(&labels);
        self.queues
            .lock()
            .expect("queue state lock")
            .remove(&labels);
    }

    /// Forget a queue's failures after a good reconcile.
    pub(crate) fn succeeded(&self, queue: &JobQueue) {
        self.with_state(queue, |state| state.failures = 0);
    }

    /// Count a failure; returns the delay before the next try (doubling, capped).
    pub fn failed(&self, queue: &JobQueue) -> Duration {
        let failures = self.with_state(queue, |state| {
            state.failures = state.failures.saturating_add(1);
            state.failures
        });
        backoff_delay(
            failures,
            self.settings.backoff_initial,
            self.settings.backoff_max,
        )
    }
}

/// The labels, and the state key, of a queue.
fn queue_labels(queue: &JobQueue) -> QueueLabels {
    QueueLabels::new(
        queue.metadata.namespace.as_deref().unwrap_or_default(),
        queue.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// `initial × 2^(failures-1)`, capped at `max`.
pub fn backoff_delay(failures: u32, initial: Duration, max: Duration) -> Duration {
    let exp = failures.saturating_sub(1).min(20);
    initial.saturating_mul(1 << exp).min(max)
}

/// After a failed reconcile: count it and retry with a growing delay. Only this queue
/// waits; the others go on. The delay never exceeds the queue's `reaper.interval` (the
/// pace of a healthy queue): reaping and scaling resume within one interval of Redis
/// coming back, however long it was away. A Secret fixed or created is acted on at once
/// (it is watched, see [`caches`]).
pub fn error_policy(queue: Arc<JobQueue>, error: &Error, ctx: Arc<Context>) -> Action {
    let labels = queue_labels(&queue);
    ctx.metrics.reconcile_failed(&labels, &error.metric_label());
    let delay = ctx.failed(&queue);
    let delay = match caches::reaper_interval(&queue) {
        Some(interval) => delay.min(interval),
        None => delay,
    };
    warn!(
        namespace = %labels.namespace,
        name = %labels.name,
        error = %error,
        retry_in = ?delay,
        "reconcile failed"
    );
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use ::http::{Request, Response};
    use kube::Resource;
    use kube::client::Body;

    use super::*;
    use crate::crd::JobQueueSpec;

    /// A context whose client answers nothing (these tests make no API calls).
    fn context() -> Context {
        let (service, _) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        Context::new(client, Arc::default(), None, Settings::default())
    }

    fn queue(name: &str, uid: &str) -> JobQueue {
        let mut jq = JobQueue::new(name, JobQueueSpec::new("redis://r:6379", name));
        jq.meta_mut().namespace = Some("default".into());
        jq.meta_mut().uid = Some(uid.into());
        jq
    }

    #[tokio::test]
    async fn a_recreated_queue_starts_without_the_old_backoff() {
        let ctx = context();
        let initial = ctx.settings.backoff_initial;
        let first = queue("emails", "uid-1");
        for _ in 0..3 {
            ctx.failed(&first);
        }
        // Deleted: the sweep sees it no more; then a queue of the same name comes back.
        ctx.retain(&HashSet::new());
        let again = queue("emails", "uid-2");
        assert_eq!(
            ctx.failed(&again),
            initial,
            "a recreated queue inherited the backoff of the deleted one"
        );
    }

    #[tokio::test]
    async fn a_queue_recreated_before_the_sweep_starts_afresh() {
        let ctx = context();
        let initial = ctx.settings.backoff_initial;
        for _ in 0..3 {
            ctx.failed(&queue("emails", "uid-1"));
        }
        // Deleted and created again within a sweep: only the uid tells them apart.
        assert_eq!(ctx.failed(&queue("emails", "uid-2")), initial);
    }

    #[tokio::test]
    async fn retain_forgets_failures_and_recommendations_together() {
        let ctx = context();
        let initial = ctx.settings.backoff_initial;
        let (gone, kept) = (queue("gone", "uid-g"), queue("kept", "uid-k"));
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        for jq in [&gone, &kept] {
            ctx.failed(jq);
            ctx.with_recommendations(jq, |r| r.record(now, 3));
        }
        ctx.retain(&HashSet::from([queue_labels(&kept)]));
        assert_eq!(ctx.failed(&gone), initial, "the failures of a gone queue");
        assert!(
            ctx.with_recommendations(&gone, |r| r.is_empty()),
            "the recommendations of a gone queue"
        );
        assert_eq!(
            ctx.failed(&kept),
            initial * 2,
            "the failures of a kept queue"
        );
        assert_eq!(ctx.with_recommendations(&kept, |r| r.highest()), Some(3));
    }

    #[tokio::test]
    async fn the_last_good_plan_is_forgotten_with_the_rest_of_the_state() {
        let ctx = context();
        let first = queue("emails", "uid-1");
        let plan = validate::plan(&first.spec).unwrap();
        ctx.remember_plan(&first, &plan);
        assert_eq!(
            ctx.last_good_plan(&first).map(|g| g.plan),
            Some(plan.clone())
        );
        // Another object under the same name: nothing to fall back on.
        assert_eq!(ctx.last_good_plan(&queue("emails", "uid-2")), None);
        ctx.remember_plan(&first, &plan);
        ctx.retain(&HashSet::new());
        assert_eq!(ctx.last_good_plan(&first), None, "a gone queue's plan");
    }

    #[tokio::test]
    async fn forget_drops_a_deleted_queue_at_once() {
        let ctx = context();
        let initial = ctx.settings.backoff_initial;
        let (gone, kept) = (queue("gone", "uid-g"), queue("kept", "uid-k"));
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        for jq in [&gone, &kept] {
            ctx.failed(jq);
            ctx.with_recommendations(jq, |r| r.record(now, 3));
        }
        ctx.forget(&gone);
        assert_eq!(
            ctx.failed(&gone),
            initial,
            "the failures of a deleted queue"
        );
        assert!(ctx.with_recommendations(&gone, |r| r.is_empty()));
        assert_eq!(ctx.failed(&kept), initial * 2, "another queue's failures");
        assert_eq!(ctx.with_recommendations(&kept, |r| r.highest()), Some(3));
    }

    #[test]
    fn reasons_become_metric_labels() {
        assert_eq!(snake_case("RedisUnreachable"), "redis_unreachable");
        assert_eq!(snake_case("InvalidURL"), "invalid_url");
        assert_eq!(snake_case("AuthFailed"), "auth_failed");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let s = Duration::from_secs;
        let delays: Vec<Duration> = (1..=8).map(|n| backoff_delay(n, s(5), s(300))).collect();
        assert_eq!(
            delays,
            vec![s(5), s(10), s(20), s(40), s(80), s(160), s(300), s(300)]
        );
        assert_eq!(backoff_delay(u32::MAX, s(5), s(300)), s(300));
    }
}
