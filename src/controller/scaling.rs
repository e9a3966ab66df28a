//! Scaling the worker workload on the queue's backlog.
//!
//! [`decide`] is pure: the policy, the backlog, what the API server said about the
//! target, the recent recommendations and the time go in; the replicas to set and why
//! come out. It sizes first ([`size`]: the numbers, as a plain [`Sizing`]), then puts
//! them into words. The reconciler does the I/O around it (the target's `/scale`, the
//! namespace's HorizontalPodAutoscalers, the patch).
//!
//! The algorithm is the HorizontalPodAutoscaler's, with the backlog as its metric:
//!
//! 1. **recommend** `ceil((pending + due + processing) / targetBacklogPerReplica)`;
//!    due delayed jobs count as pending (the reaper promotes them, but not always all
//!    in one reconcile), and processing jobs count, so running jobs keep their workers.
//!    The recommendation is 0 when the backlog is at or below `activationBacklog` and
//!    no job is processing: the only way to zero, and any backlog above it leaves zero
//!    at once. A delayed job not yet due is no backlog: at zero it waits for its time;
//! 2. **stabilize** a scale-down: the highest recommendation within
//!    `scaleDownStabilization` wins (never above the current replicas), so a backlog
//!    that comes and goes keeps its workers and the replicas do not flap. Likewise
//!    a scale-up: the lowest recommendation within `behavior.scaleUp`'s
//!    `stabilizationWindowSeconds` wins (never below the current replicas; no window by
//!    default, so a scale-up is immediate);
//! 3. **limit** a scale-up by `behavior.scaleUp`'s policies, as the HPA does: within a
//!    policy's period, the change it allows counts from the replicas at the start of the
//!    period (the current ones less what was added within it), and `selectPolicy` picks
//!    the larger (`Max`) or the smaller (`Min`) allowance, or none (`Disabled`). The
//!    default is the HPA's: +100 % or +4 pods per 15 s, the larger. The deprecated
//!    `maxScaleUpStep` is a Pods policy per reconcile;
//! 4. **clamp** to `[minReplicas, maxReplicas]` (a target outside them is brought back
//!    at once).
//!
//! The recommendations and the recent scale events live in memory, per queue
//! ([`Recommendations`]). After the operator starts (or a standby takes over) the
//! target's current replicas count as a recommendation made then: the first scale-down
//! waits a whole window rather than trusting a history it never saw.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::CrossVersionObjectReference;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ApiResource, GroupVersionKind};

use crate::duration::format as format_duration;

/// The object to scale, with its API version split.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TargetRef {
    /// The API group, empty for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub name: String,
}

impl TargetRef {
    /// From `apiVersion` (`apps/v1`, or `v1` for the core group), `kind` and `name`;
    /// the error says what is wrong with which.
    pub fn parse(api_version: &str, kind: &str, name: &str) -> Result<TargetRef, String> {
        let (group, version) = match api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", api_version),
        };
        let bad = |part: &str| part.is_empty() || part.contains(['/', ' ']);
        if bad(version) || (api_version.contains('/') && bad(group)) {
            return Err(format!(
                "apiVersion {api_version:?} is not group/version (e.g. apps/v1) or a core \
                 version (v1)"
            ));
        }
        if kind.is_empty() || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!("kind {kind:?} is not a kind (e.g. Deployment)"));
        }
        if name.is_empty() {
            return Err("name must not be empty".into());
        }
        Ok(TargetRef {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            name: name.to_string(),
        })
    }

    /// `group/version`, or the version alone for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// For kube's dynamic API. The plural is derived from the kind (`Deployment` →
    /// `deployments`), as for every built-in kind with a scale subresource.
    pub fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk(&GroupVersionKind::gvk(
            &self.group,
            &self.version,
            &self.kind,
        ))
    }

    /// Whether an HPA's `scaleTargetRef` names this object. Versions do not matter (one
    /// object is served under several); the group does, when the HPA gives one.
    pub fn is_targeted_by(&self, r: &CrossVersionObjectReference) -> bool {
        let group_matches = match r.api_version.as_deref() {
            None | Some("") => true,
            Some(v) => v.split_once('/').map_or("", |(g, _)| g) == self.group,
        };
        group_matches && r.kind == self.kind && r.name == self.name
    }
}

impl fmt::Display for TargetRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// `spec.workers`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePolicy {
    pub target: TargetRef,
    pub min_replicas: i32,
    pub max_replicas: i32,
    pub target_backlog_per_replica: u64,
    pub activation_backlog: u64,
    pub scale_down_stabilization: Duration,
    /// How fast replicas are added.
    pub scale_up: ScaleUp,
    /// Jobs one replica runs at once (`workers.concurrency`).
    pub concurrency: u32,
    /// The most replicas the queue's rate limit keeps busy ([`rate_capacity`]), when the
    /// queue has a limit and processing times were seen: the recommendation never goes
    /// above it. Set by the reconcile for one decision ([`ScalePolicy::capped`]).
    pub rate_cap: Option<i32>,
}

impl ScalePolicy {
    /// This policy with the rate limit's cap for one decision.
    pub fn capped(&self, cap: Option<&RateCapacity>) -> ScalePolicy {
        ScalePolicy {
            rate_cap: cap.map(|c| c.replicas),
            ..self.clone()
        }
    }
}

/// What a rate limit can keep busy: at most `limit.max` claims per `limit.per`, each
/// job taking `processing` on a replica that runs `concurrency` at once (Little's law:
/// jobs in flight = rate × time), so `replicas` = ceil(rate × processing ÷
/// concurrency), at least 1. More replicas than that would only wait for claim slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateCapacity {
    pub limit: crate::queue::RateLimit,
    pub processing: Duration,
    pub concurrency: u32,
    pub replicas: i32,
}

/// The replicas `limit` keeps busy when a job takes `processing` and a replica runs
/// `concurrency` at once: ceil(max × processing ÷ (per × concurrency)), at least 1, in
/// whole microseconds (no rounding of a float above an exact quotient).
pub fn rate_capacity(
    limit: crate::queue::RateLimit,
    processing: Duration,
    concurrency: u32,
) -> RateCapacity {
    let jobs = u128::from(limit.max) * processing.as_micros();
    let slots = limit.per.as_micros().max(1) * u128::from(concurrency.max(1));
    let replicas = i32::try_from(jobs.div_ceil(slots))
        .unwrap_or(i32::MAX)
        .max(1);
    RateCapacity {
        limit,
        processing,
        concurrency,
        replicas,
    }
}

/// The rate limit's word on one decision: whether its cap held the recommendation
/// below what the backlog asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateVerdict {
    pub capacity: RateCapacity,
    /// What the backlog asked for, uncapped ([`recommend`]).
    pub asked: i64,
    /// The cap is below `asked`: the workers are held at what the limit keeps busy.
    pub capping: bool,
}

/// [`RateVerdict`] of a policy and backlog under `capacity` (`None`: no cap known).
pub fn rate_verdict(
    policy: &ScalePolicy,
    backlog: Backlog,
    capacity: Option<RateCapacity>,
) -> Option<RateVerdict> {
    let capacity = capacity?;
    let asked = recommend(policy, backlog);
    Some(RateVerdict {
        capacity,
        asked,
        capping: asked > i64::from(capacity.replicas),
    })
}

/// `behavior.scaleUp`, checked: how fast the workers may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleUp {
    pub policies: Vec<RateLimit>,
    pub select: Select,
    /// The lowest recommendation within this window wins a scale-up.
    pub stabilization: Duration,
}

/// One scale-up policy: at most `value` pods, or `value` percent, more per period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub kind: RateKind,
    pub value: i32,
    pub per: Per,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateKind {
    Pods,
    Percent,
}

/// The period of a [`RateLimit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Per {
    /// A period of time: the allowance counts from the replicas at its start.
    Period(Duration),
    /// Each reconcile afresh (the deprecated `maxScaleUpStep`).
    Reconcile,
}

/// Which policy's allowance wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Select {
    /// The largest change.
    #[default]
    Max,
    /// The smallest change.
    Min,
    /// No scale-up (but up to `minReplicas`).
    Disabled,
}

impl Default for ScaleUp {
    /// The HPA's: +100 % or +4 pods per 15 s, the larger; no window.
    fn default() -> ScaleUp {
        let per = Per::Period(Duration::from_secs(15));
        ScaleUp {
            policies: vec![
                RateLimit {
                    kind: RateKind::Percent,
                    value: 100,
                    per,
                },
                RateLimit {
                    kind: RateKind::Pods,
                    value: 4,
                    per,
                },
            ],
            select: Select::Max,
            stabilization: Duration::ZERO,
        }
    }
}

impl ScaleUp {
    /// The deprecated `maxScaleUpStep`: at most `step` replicas more per reconcile.
    pub fn per_reconcile(step: i32) -> ScaleUp {
        ScaleUp {
            policies: vec![RateLimit {
                kind: RateKind::Pods,
                value: step.max(1),
                per: Per::Reconcile,
            }],
            select: Select::Max,
            stabilization: Duration::ZERO,
        }
    }

    /// The step of the deprecated `maxScaleUpStep`, when this is its policy.
    fn step_per_reconcile(&self) -> Option<i32> {
        match self.policies.as_slice() {
            [
                RateLimit {
                    kind: RateKind::Pods,
                    value,
                    per: Per::Reconcile,
                },
            ] if self.select == Select::Max => Some(*value),
            _ => None,
        }
    }

    /// How long scale events matter: the longest period.
    fn memory(&self) -> Duration {
        self.policies
            .iter()
            .filter_map(|p| match p.per {
                Per::Period(d) => Some(d),
                Per::Reconcile => None,
            })
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// The most replicas the policies allow now, for a target at `current` that was
    /// scaled as `events` say. Never below `current`.
    fn limit(&self, current: i32, events: &VecDeque<(Timestamp, i32)>, now: Timestamp) -> i32 {
        let proposals = self.policies.iter().map(|p| {
            let start = match p.per {
                Per::Reconcile => i64::from(current),
                Per::Period(d) => {
                    let cutoff = before(now, d);
                    let change: i64 = events
                        .iter()
                        .filter(|&&(t, _)| t > cutoff)
                        .map(|&(_, c)| i64::from(c))
                        .sum();
                    (i64::from(current) - change).max(0)
                }
            };
            let value = i64::from(p.value);
            match p.kind {
                RateKind::Pods => start + value,
                // Rounded up, so a small workload still grows (as the HPA does).
                RateKind::Percent => start + (start * value + 99) / 100,
            }
        });
        let chosen = match self.select {
            Select::Disabled => None,
            Select::Max => proposals.max(),
            Select::Min => proposals.min(),
        };
        let limit = chosen.unwrap_or(i64::from(current));
        i32::try_from(limit).unwrap_or(i32::MAX).max(current)
    }

    /// The policies in words: `+100% per 15s or +4 pods per 15s, the larger`.
    fn describe(&self) -> String {
        let each: Vec<String> = self
            .policies
            .iter()
            .map(|p| {
                let amount = match p.kind {
                    RateKind::Pods if p.value == 1 => "+1 pod".to_string(),
                    RateKind::Pods => format!("+{} pods", p.value),
                    RateKind::Percent => format!("+{}%", p.value),
                };
                match p.per {
                    Per::Period(d) => format!("{amount} per {}", format_duration(d)),
                    Per::Reconcile => format!("{amount} per reconcile"),
                }
            })
            .collect();
        let which = match (self.select, each.len()) {
            (_, 0 | 1) => "",
            (Select::Min, _) => ", the smaller",
            _ => ", the larger",
        };
        format!("{}{which}", each.join(" or "))
    }
}

/// `d` before `now`, or the beginning of time.
fn before(now: Timestamp, d: Duration) -> Timestamp {
    let span = SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
    now.checked_sub(span).unwrap_or(Timestamp::MIN)
}

/// What the workers have to do: jobs waiting (pending, and delayed jobs whose time has
/// come), and jobs running. Delayed jobs not yet due are not work yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub pending: u64,
    /// Delayed jobs past their time, not yet promoted: waiting like pending ones, so
    /// they count towards activation too (a retry at zero replicas must wake them).
    pub due: u64,
    pub processing: u64,
}

impl Backlog {
    pub fn total(self) -> u64 {
        self.pending
            .saturating_add(self.due)
            .saturating_add(self.processing)
    }
}

impl fmt::Display for Backlog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "backlog {} ({} pending, ", self.total(), self.pending)?;
        // Due jobs are named only when there are some: the usual message stays short.
        if self.due > 0 {
            write!(f, "{} due, ", self.due)?;
        }
        write!(f, "{} processing)", self.processing)
    }
}

/// What the API server said about the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetState {
    /// Its `/scale` answered: `spec.replicas`.
    Found { replicas: i32 },
    /// It does not exist (or its kind has no scale subresource); the API's message.
    NotFound { message: String },
    /// An HPA scales it (`namespace/name` of the HPA); it has `replicas`.
    ClaimedByHpa { hpa: String, replicas: i32 },
    /// It could not be read (permissions, API errors); what went wrong.
    Unreadable { message: String },
    /// A KEDA ScaledObject (`namespace/name`) scales it, paused or not; it has
    /// `replicas`.
    ClaimedByScaledObject {
        scaled_object: String,
        replicas: i32,
    },
    /// An older JobQueue (`namespace/name`) scales it; it has `replicas`.
    OwnedByAnother { queue: String, replicas: i32 },
}

/// The `Scaling` condition's reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Replicas were added.
    ScaledUp,
    /// Replicas were removed.
    ScaledDown,
    /// The backlog asks for fewer replicas, but a higher recommendation is still
    /// within the stabilization window (or, for a scale-up with a window, a lower
    /// one is).
    Stabilizing,
    /// The backlog asks for more replicas, but the scale-up policies allow none more
    /// yet (or scale-up is disabled).
    ScaleUpLimited,
    /// At `minReplicas`, and the backlog asks for no more.
    AtMinReplicas,
    /// At `maxReplicas`, and the backlog asks for as many or more.
    AtMaxReplicas,
    /// The replicas match the backlog, between the bounds.
    Steady,
    /// The scale target does not exist.
    TargetNotFound,
    /// A HorizontalPodAutoscaler scales the same target: the operator stays out.
    HpaConflict,
    /// The target's scale could not be read or written.
    ScaleFailed,
    /// A KEDA ScaledObject scales the same target: the operator stays out.
    ScaledObjectConflict,
    /// An older JobQueue scales the same target: this one stays out.
    TargetOwnedByAnother,
    /// `jobqueue.dev/paused: "true"`: the replicas are left as they are.
    Paused,
    /// `jobqueue.dev/paused-replicas: "N"`: the replicas are held at N.
    PausedReplicas,
    /// A pause annotation has a value that means nothing: scaling pauses until it is
    /// fixed.
    InvalidPauseAnnotation,
    /// The queue could not be read for `fallback.failureThreshold` reconciles: the
    /// replicas are held at `fallback.replicas`.
    Fallback,
    /// The queue is paused (its claims stop: `jobqueue pause`, the console, or
    /// `spec.paused`): the replicas are left as they are.
    QueuePaused,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ScaledUp => "ScaledUp",
            Reason::ScaledDown => "ScaledDown",
            Reason::Stabilizing => "Stabilizing",
            Reason::ScaleUpLimited => "ScaleUpLimited",
            Reason::AtMinReplicas => "AtMinReplicas",
            Reason::AtMaxReplicas => "AtMaxReplicas",
            Reason::Steady => "Steady",
            Reason::TargetNotFound => "TargetNotFound",
            Reason::HpaConflict => "HPAConflict",
            Reason::ScaleFailed => "ScaleFailed",
            Reason::ScaledObjectConflict => "ScaledObjectConflict",
            Reason::TargetOwnedByAnother => "TargetOwnedByAnother",
            Reason::Paused => "Paused",
            Reason::PausedReplicas => "PausedReplicas",
            Reason::InvalidPauseAnnotation => "InvalidPauseAnnotation",
            Reason::Fallback => "Fallback",
            Reason::QueuePaused => "QueuePaused",
        }
    }

    /// Whether the operator is scaling the target (the condition's status).
    pub fn is_scaling(self) -> bool {
        !matches!(
            self,
            Reason::TargetNotFound
                | Reason::HpaConflict
                | Reason::ScaleFailed
                | Reason::ScaledObjectConflict
                | Reason::TargetOwnedByAnother
                | Reason::Paused
                | Reason::PausedReplicas
                | Reason::InvalidPauseAnnotation
                | Reason::Fallback
                | Reason::QueuePaused
        )
    }

    /// Whether the decision holds the target at a fixed count (`paused-replicas`, the
    /// fallback) rather than on the backlog: it patches only when the replicas differ.
    pub fn pins(self) -> bool {
        matches!(self, Reason::PausedReplicas | Reason::Fallback)
    }

    /// Whether scaling is on hold by a person's choice (the pause annotations): its
    /// Events are Normal, and lifting it says so.
    pub fn is_pause(self) -> bool {
        matches!(
            self,
            Reason::Paused | Reason::PausedReplicas | Reason::QueuePaused
        )
    }

    /// Whether the decision changes the target's replicas.
    pub fn scales(self) -> bool {
        matches!(self, Reason::ScaledUp | Reason::ScaledDown)
    }
}

/// The scaler's verdict for one reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub reason: Reason,
    /// The target's replicas as read (before any patch); `None` without a target.
    pub current: Option<i32>,
    /// The replicas the target should have; `None` when the operator does not scale.
    pub desired: Option<i32>,
    /// For people: the numbers behind the decision. Stable while its inputs are, so an
    /// unchanged queue writes no status.
    pub message: String,
}

impl Decision {
    /// The replicas to patch the target to, when it must change.
    pub fn patch(&self) -> Option<i32> {
        if self.reason.scales() || (self.reason.pins() && self.desired != self.current) {
            self.desired
        } else {
            None
        }
    }

    /// The target's replicas once this decision is applied.
    pub fn replicas_after(&self) -> Option<i32> {
        if self.reason.scales() || self.reason.pins() {
            self.desired
        } else {
            self.current
        }
    }

    /// The same decision, failed: writing the scale did not work.
    pub fn failed(self, message: String) -> Decision {
        Decision {
            reason: Reason::ScaleFailed,
            message,
            ..self
        }
    }
}

/// What one queue remembers between reconciles to scale: recent recommendations, for
/// the stabilization windows, and recent scale events, for the scale-up policies.
///
/// Only recommendations that can still be the highest (the lowest) within a window are
/// kept: one is dropped once a later one is as high (as low), since it would leave the
/// window first and never win again. What remains is strictly monotonic, so at most
/// `maxReplicas + 1` entries of each kind whatever the window. Scale events are kept for
/// the longest policy period, at most one per reconcile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recommendations {
    /// The target and `maxReplicas` the entries were recorded for (they are clamped to
    /// it); another target or bound starts over.
    basis: Option<(TargetRef, i32)>,
    /// `(when, replicas)`, oldest first, replicas strictly decreasing: the front is the
    /// highest.
    highs: VecDeque<(Timestamp, i32)>,
    /// `(when, replicas)`, oldest first, replicas strictly increasing: the front is the
    /// lowest.
    lows: VecDeque<(Timestamp, i32)>,
    /// `(when, change)` of the scales decided, oldest first.
    scales: VecDeque<(Timestamp, i32)>,
}

impl Recommendations {
    /// Record `replicas` recommended at `now`.
    pub fn record(&mut self, now: Timestamp, replicas: i32) {
        while self.highs.back().is_some_and(|&(_, r)| r <= replicas) {
            self.highs.pop_back();
        }
        self.highs.push_back((now, replicas));
        while self.lows.back().is_some_and(|&(_, r)| r >= replicas) {
            self.lows.pop_back();
        }
        self.lows.push_back((now, replicas));
    }

    /// Forget what was recommended at or before `down` for the scale-down window, at or
    /// before `up` for the scale-up one.
    fn prune(&mut self, down: Timestamp, up: Timestamp) {
        while self.highs.front().is_some_and(|&(t, _)| t <= down) {
            self.highs.pop_front();
        }
        while self.lows.front().is_some_and(|&(t, _)| t <= up) {
            self.lows.pop_front();
        }
    }

    /// The highest recommendation kept.
    pub fn highest(&self) -> Option<i32> {
        self.highs.front().map(|&(_, r)| r)
    }

    /// The lowest recommendation kept.
    pub fn lowest(&self) -> Option<i32> {
        self.lows.front().map(|&(_, r)| r)
    }

    /// Record a scale by `change` replicas decided at `now`.
    fn scaled(&mut self, now: Timestamp, change: i32) {
        self.scales.push_back((now, change));
    }

    /// The scale decided at `at` did not happen (the patch was refused): forget it, so
    /// the policies do not count replicas that were never added.
    pub fn unscaled(&mut self, at: Timestamp) {
        while self.scales.back().is_some_and(|&(t, _)| t == at) {
            self.scales.pop_back();
        }
    }

    /// Entries kept, of every kind.
    pub fn len(&self) -> usize {
        self.highs.len() + self.lows.len() + self.scales.len()
    }

    pub fn is_empty(&self) -> bool {
        self.highs.is_empty() && self.lows.is_empty() && self.scales.is_empty()
    }

    pub fn clear(&mut self) {
        self.basis = None;
        self.highs.clear();
        self.lows.clear();
        self.scales.clear();
    }
}

/// `ceil(backlog / per_replica)`, or 0 when the backlog does not activate the workload
/// (at or below `activation`, nothing processing). Not yet clamped.
pub fn recommend(policy: &ScalePolicy, backlog: Backlog) -> i64 {
    let total = backlog.total();
    if total <= policy.activation_backlog && backlog.processing == 0 {
        return 0;
    }
    let per = policy.target_backlog_per_replica.max(1);
    i64::try_from(total.div_ceil(per)).unwrap_or(i64::MAX)
}

fn replicas(n: i32) -> String {
    if n == 1 {
        "1 replica".into()
    } else {
        format!("{n} replicas")
    }
}

/// Decide the target's replicas. `history` is this queue's, updated in place; `now`
/// is the reconcile's time.
pub fn decide(
    policy: &ScalePolicy,
    backlog: Backlog,
    target: TargetState,
    history: &mut Recommendations,
    now: Timestamp,
) -> Decision {
    let current = match current_replicas(&policy.target, target, history) {
        Ok(current) => current,
        Err(unscalable) => return unscalable,
    };
    let sizing = size(policy, backlog, current, history, now);
    let reason = sizing.reason();
    Decision {
        reason,
        current: Some(current),
        desired: Some(sizing.desired),
        message: explain(policy, backlog, &sizing, reason),
    }
}

/// The target's replicas, or the decision when the operator cannot scale it. A missing
/// or claimed target forgets the history: it no longer applies.
fn current_replicas(
    t: &TargetRef,
    target: TargetState,
    history: &mut Recommendations,
) -> Result<i32, Decision> {
    match target {
        TargetState::Found { replicas } => Ok(replicas.max(0)),
        TargetState::NotFound { message } => {
            history.clear();
            Err(Decision {
                reason: Reason::TargetNotFound,
                current: None,
                desired: None,
                message,
            })
        }
        TargetState::ClaimedByHpa { hpa, replicas } => {
            history.clear();
            Err(Decision {
                reason: Reason::HpaConflict,
                current: Some(replicas),
                desired: None,
                message: format!(
                    "HorizontalPodAutoscaler {hpa} scales {t}: the operator leaves it alone \
                     (delete the HPA, or spec.workers)"
                ),
            })
        }
        TargetState::Unreadable { message } => Err(Decision {
            reason: Reason::ScaleFailed,
            current: None,
            desired: None,
            message,
        }),
        TargetState::ClaimedByScaledObject {
            scaled_object,
            replicas,
        } => {
            history.clear();
            Err(Decision {
                reason: Reason::ScaledObjectConflict,
                current: Some(replicas),
                desired: None,
                message: format!(
                    "KEDA ScaledObject {scaled_object} scales {t}: the operator leaves it alone \
                     (delete the ScaledObject, or spec.workers)"
                ),
            })
        }
        TargetState::OwnedByAnother { queue, replicas } => {
            history.clear();
            Err(Decision {
                reason: Reason::TargetOwnedByAnother,
                current: Some(replicas),
                desired: None,
                message: format!(
                    "JobQueue {queue} (the older) scales {t}: this one leaves it alone \
                     (point spec.workers at another target, or remove it)"
                ),
            })
        }
    }
}

/// Why scaling does not follow the backlog this reconcile, though the target is there:
/// a pause annotation, or the fallback while the queue cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// `jobqueue.dev/paused: "true"`: leave the replicas as they are.
    Paused,
    /// `jobqueue.dev/paused-replicas: "N"`: scale to N and hold.
    Pinned(i32),
    /// A pause annotation that means nothing (what is wrong): leave the replicas.
    Invalid(String),
    /// `spec.workers.fallback`: the queue could not be read `threshold` times in a row
    /// (or more); scale to `replicas` and hold.
    Fallback { replicas: i32, threshold: u32 },
    /// The queue itself is paused (its claims stop): workers would find nothing to
    /// claim, so the replicas are left as they are.
    QueuePaused,
}

/// Decide the target's replicas while scaling is held. A target the operator cannot
/// scale (missing, another owner's, unreadable) is that decision, as with [`decide`];
/// otherwise the hold's. The history is forgotten: when scaling resumes, the replicas
/// found then count as a fresh recommendation, so the first scale-down waits a window.
pub fn hold(
    policy: &ScalePolicy,
    hold: &Hold,
    target: TargetState,
    history: &mut Recommendations,
) -> Decision {
    let t = &policy.target;
    let current = match current_replicas(t, target, history) {
        Ok(current) => current,
        Err(unscalable) => return unscalable,
    };
    history.clear();
    let (reason, desired, message) = match hold {
        Hold::Paused => (
            Reason::Paused,
            None,
            format!(
                "scaling is paused (jobqueue.dev/paused): {} of {t} left as they are",
                replicas(current)
            ),
        ),
        Hold::Pinned(n) => (
            Reason::PausedReplicas,
            Some(*n),
            if *n == current {
                format!(
                    "scaling is paused at {} of {t} (jobqueue.dev/paused-replicas)",
                    replicas(*n)
                )
            } else {
                format!(
                    "scaling is paused at {}: scaled {t} from {current} \
                     (jobqueue.dev/paused-replicas)",
                    replicas(*n)
                )
            },
        ),
        Hold::QueuePaused => (
            Reason::QueuePaused,
            None,
            format!(
                "the queue is paused (claims stop until `jobqueue resume`, the console's \
                 Resume, or spec.paused: false): {} of {t} left as they are",
                replicas(current)
            ),
        ),
        Hold::Invalid(why) => (
            Reason::InvalidPauseAnnotation,
            None,
            format!(
                "{why}; scaling is paused: {} of {t} left as they are",
                replicas(current)
            ),
        ),
        Hold::Fallback {
            replicas: n,
            threshold,
        } => (
            Reason::Fallback,
            Some(*n),
            format!(
                "the queue could not be read in {threshold} reconciles in a row or more: {t} \
                 held at the fallback of {} until it can",
                replicas(*n)
            ),
        ),
    };
    Decision {
        reason,
        current: Some(current),
        desired,
        message,
    }
}

/// The numbers behind one decision, before any words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// The target's replicas as read.
    pub current: i32,
    /// `minReplicas`.
    pub min: i32,
    /// `maxReplicas`, never below `min`.
    pub max: i32,
    /// What the backlog asks for ([`recommend`]), unclamped.
    pub asked: i64,
    /// `asked` clamped to `max`: the recommendation recorded in the history.
    pub raw: i32,
    /// The highest recommendation within the scale-down window (`raw` included).
    pub highest: i32,
    /// The lowest recommendation within the scale-up window (`raw` included).
    pub lowest: i32,
    /// After both windows: the replicas the recommendations hold.
    pub stabilized: i32,
    /// The most replicas the scale-up policies allow now (`current` when they allow
    /// none); `i32::MAX` when not scaling up.
    pub limit: i32,
    /// The replicas to set: stabilized, limited and clamped.
    pub desired: i32,
}

impl Sizing {
    /// Why `desired` is what it is.
    pub fn reason(&self) -> Reason {
        let Sizing {
            current,
            min,
            max,
            asked,
            raw,
            stabilized,
            desired,
            ..
        } = *self;
        let wanted = raw.clamp(min, max);
        if desired > current {
            Reason::ScaledUp
        } else if desired < current {
            Reason::ScaledDown
        } else if wanted < desired || (wanted > desired && stabilized <= current) {
            Reason::Stabilizing
        } else if wanted > desired {
            Reason::ScaleUpLimited
        } else if desired == max && asked >= i64::from(max) {
            Reason::AtMaxReplicas
        } else if desired == min && asked <= i64::from(min) {
            Reason::AtMinReplicas
        } else {
            Reason::Steady
        }
    }
}

/// The algorithm's four steps (see the module's doc), on a target with `current`
/// replicas; records this recommendation, and the scale it decides, in `history`.
pub fn size(
    policy: &ScalePolicy,
    backlog: Backlog,
    current: i32,
    history: &mut Recommendations,
    now: Timestamp,
) -> Sizing {
    let (min, max) = (
        policy.min_replicas,
        policy.max_replicas.max(policy.min_replicas),
    );
    let up = &policy.scale_up;

    // 1. What the backlog asks for, no more than the rate limit keeps busy; kept clamped
    // to max, which bounds the history.
    let asked = recommend(policy, backlog);
    let asked = policy
        .rate_cap
        .map_or(asked, |cap| asked.min(i64::from(cap.max(1))));
    let raw = i32::try_from(asked.min(i64::from(max))).unwrap_or(max);

    // 2. Stabilize: a scale-down on the highest recommendation within its window, a
    // scale-up on the lowest within its own.
    let basis = Some((policy.target.clone(), max));
    if history.basis != basis || history.is_empty() {
        history.clear();
        history.basis = basis;
        // No history seen: the current replicas count as recommended now (for the
        // scale-down window only: a scale-up never waits for a history it lacks).
        history.highs.push_back((now, current.min(max)));
    }
    history.prune(
        before(now, policy.scale_down_stabilization),
        before(now, up.stabilization),
    );
    let highest = history.highest().unwrap_or(raw).max(raw);
    let lowest = history.lowest().unwrap_or(raw).min(raw);
    history.record(now, raw);
    let stabilized = if raw > current {
        lowest.max(current)
    } else {
        highest.min(current)
    };

    // 3. Limit a scale-up by the policies; 4. clamp.
    let forget = before(now, up.memory());
    while history.scales.front().is_some_and(|&(t, _)| t <= forget) {
        history.scales.pop_front();
    }
    let limit = if stabilized > current {
        up.limit(current, &history.scales, now)
    } else {
        i32::MAX
    };
    let desired = stabilized.min(limit).clamp(min, max);
    if desired != current {
        history.scaled(now, desired - current);
    }
    Sizing {
        current,
        min,
        max,
        asked,
        raw,
        highest,
        lowest,
        stabilized,
        limit,
        desired,
    }
}

/// The decision's message: the numbers, and what held the replicas where they are.
fn explain(policy: &ScalePolicy, backlog: Backlog, sizing: &Sizing, reason: Reason) -> String {
    let Sizing {
        current,
        min,
        max,
        asked,
        raw,
        lowest,
        stabilized,
        limit,
        desired,
        ..
    } = *sizing;
    let t = &policy.target;
    let per = policy.target_backlog_per_replica;
    let up = &policy.scale_up;
    let needs = if asked > 0 {
        format!(
            "{backlog} needs {} at {per} per replica",
            replicas_i64(asked)
        )
    } else if backlog.total() > 0 {
        format!(
            "{backlog} is at or below activationBacklog {}",
            policy.activation_backlog
        )
    } else {
        format!("{backlog} needs no replica")
    };
    let window = format_duration(policy.scale_down_stabilization);
    let up_window = format!(
        "behavior.scaleUp.stabilizationWindowSeconds ({})",
        format_duration(up.stabilization)
    );
    let policies = match up.step_per_reconcile() {
        Some(step) => format!("at most +{step} per reconcile (maxScaleUpStep)"),
        None => format!("behavior.scaleUp allows {}", up.describe()),
    };
    match reason {
        Reason::ScaledUp => {
            let note = if desired < stabilized.min(max) && desired == limit {
                match up.step_per_reconcile() {
                    Some(_) => format!("; {policies}"),
                    None => format!("; {policies}, so {limit} for now"),
                }
            } else if stabilized < raw && desired == stabilized {
                format!("; {} recommended within {up_window}", replicas(stabilized))
            } else if asked > i64::from(max) {
                format!("; capped at maxReplicas {max}")
            } else if raw < min {
                format!("; minReplicas is {min}")
            } else {
                String::new()
            };
            format!(
                "scaled {t} from {current} to {}: {needs}{note}",
                replicas(desired)
            )
        }
        Reason::ScaledDown => {
            let note = if current > max {
                format!("; above maxReplicas {max}")
            } else if desired > raw.max(min) {
                format!(
                    "; {} recommended within scaleDownStabilization ({window})",
                    replicas(desired)
                )
            } else if raw < min {
                format!("; minReplicas is {min}")
            } else if !policy.scale_down_stabilization.is_zero() {
                format!("; no higher recommendation within scaleDownStabilization ({window})")
            } else {
                String::new()
            };
            format!(
                "scaled {t} from {current} to {}: {needs}{note}",
                replicas(desired)
            )
        }
        Reason::Stabilizing if raw > desired => format!(
            "keeping {} of {t}: {needs}, but {lowest} were recommended within {up_window}",
            replicas(desired),
        ),
        Reason::Stabilizing => format!(
            "keeping {} of {t}: {needs}, but {desired} were recommended within \
             scaleDownStabilization ({window})",
            replicas(desired),
        ),
        Reason::ScaleUpLimited if up.select == Select::Disabled => format!(
            "keeping {} of {t}: {needs}, but behavior.scaleUp.selectPolicy is Disabled",
            replicas(desired),
        ),
        Reason::ScaleUpLimited => format!(
            "keeping {} of {t}: {needs}, but {policies}, and no more yet",
            replicas(desired),
        ),
        Reason::AtMaxReplicas => format!("{} of {t}, the maximum: {needs}", replicas(desired)),
        Reason::AtMinReplicas => format!("{} of {t}, the minimum: {needs}", replicas(desired)),
        Reason::Steady
        | Reason::TargetNotFound
        | Reason::HpaConflict
        | Reason::ScaleFailed
        | Reason::ScaledObjectConflict
        | Reason::TargetOwnedByAnother
        | Reason::Paused
        | Reason::PausedReplicas
        | Reason::InvalidPauseAnnotation
        | Reason::Fallback
        | Reason::QueuePaused => format!("{} of {t}: {needs}", replicas(desired)),
    }
}

fn replicas_i64(n: i64) -> String {
    match i32::try_from(n) {
        Ok(n) => replicas(n),
        Err(_) => format!("{n} replicas"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn policy() -> ScalePolicy {
        ScalePolicy {
            target: TargetRef::parse("apps/v1", "Deployment", "worker").unwrap(),
            min_replicas: 0,
            max_replicas: 10,
            target_backlog_per_replica: 10,
            activation_backlog: 0,
            scale_down_stabilization: Duration::from_secs(300),
            // Today's numbers for the tests written before the policies: the
            // deprecated maxScaleUpStep, +4 per reconcile.
            scale_up: ScaleUp::per_reconcile(4),
            concurrency: 1,
            rate_cap: None,
        }
    }

    #[test]
    fn a_rate_limit_keeps_busy_rate_times_processing_time_over_concurrency() {
        let limit = |t: &str| t.parse::<crate::queue::RateLimit>().unwrap();
        let ms = Duration::from_millis;
        // (limit, processing time, concurrency per replica, replicas kept busy)
        for (l, processing, concurrency, replicas) in [
            ("100/1s", ms(500), 1, 50),
            ("100/1s", ms(500), 10, 5),
            ("100/1s", ms(500), 3, 17), // 50 jobs in flight over 3 a replica: rounded up
            ("10/1s", ms(800), 2, 4),
            ("10/1s", ms(1), 1, 1), // never below 1
            ("5/500ms", ms(2000), 4, 5),
            ("1/1h", Duration::from_secs(7200), 1, 2),
            ("1000000/1ms", Duration::from_secs(1_000_000), 1, i32::MAX),
        ] {
            let c = rate_capacity(limit(l), processing, concurrency);
            assert_eq!(c.replicas, replicas, "{l} × {processing:?} ÷ {concurrency}");
        }
    }

    #[test]
    fn the_rate_cap_holds_the_recommendation_and_says_so() {
        let limit: crate::queue::RateLimit = "10/1s".parse().unwrap();
        let cap = rate_capacity(limit, Duration::from_millis(800), 2);
        let p = policy().capped(Some(&cap));
        assert_eq!(p.rate_cap, Some(4));
        let mut h = Recommendations::default();
        // a backlog of 100 asks for 10; the limit keeps 4 busy
        let sizing = size(&p, pending(100), 4, &mut h, t(0));
        assert_eq!((sizing.asked, sizing.desired), (4, 4));
        let v = rate_verdict(&p, pending(100), Some(cap)).unwrap();
        assert_eq!((v.asked, v.capping), (10, true));
        // a backlog the limit keeps up with is not capped
        let v = rate_verdict(&p, pending(20), Some(cap)).unwrap();
        assert_eq!((v.asked, v.capping), (2, false));
        assert_eq!(rate_verdict(&p, pending(20), None), None);
        // a scale-up from 0 stops at the cap, not at maxReplicas
        let mut h = Recommendations::default();
        assert_eq!(size(&p, pending(1000), 0, &mut h, t(0)).desired, 4);
    }

    fn pending(n: u64) -> Backlog {
        Backlog {
            pending: n,
            ..Backlog::default()
        }
    }

    fn found(replicas: i32) -> TargetState {
        TargetState::Found { replicas }
    }

    /// One decision with a history that already saw `current` a window ago (so no
    /// stabilization holds it unless the row's own history says so).
    fn once(policy: &ScalePolicy, backlog: Backlog, current: i32) -> Decision {
        let mut history = Recommendations::default();
        let before = t(0) - SignedDuration::from_secs(3600);
        decide(policy, pending(0), found(current), &mut history, before);
        decide(policy, backlog, found(current), &mut history, t(0))
    }

    #[test]
    fn recommendations_follow_the_backlog() {
        let p = policy();
        let rows: &[(u64, u64, i64)] = &[
            // (pending, processing, recommendation)
            (0, 0, 0),
            (1, 0, 1),
            (10, 0, 1),
            (11, 0, 2),
            (0, 11, 2),
            (5, 6, 2),
            (1000, 0, 100),
            // The sum saturates instead of overflowing.
            (u64::MAX, 5, 1_844_674_407_370_955_162),
        ];
        for &(pending, processing, want) in rows {
            let got = recommend(
                &p,
                Backlog {
                    pending,
                    processing,
                    ..Backlog::default()
                },
            );
            assert_eq!(got, want, "pending {pending}, processing {processing}");
        }
    }

    #[test]
    fn activation_decides_zero_and_running_jobs_keep_a_worker() {
        let p = ScalePolicy {
            activation_backlog: 5,
            ..policy()
        };
        let rows: &[(u64, u64, i64)] = &[
            (0, 0, 0),
            (5, 0, 0), // at the activation backlog: zero
            (6, 0, 1), // above it: up from zero at once
            (3, 2, 1), // within it, but jobs are running: they keep a worker
            (0, 1, 1),
            (40, 0, 4),
        ];
        for &(pending, processing, want) in rows {
            let got = recommend(
                &p,
                Backlog {
                    pending,
                    processing,
                    ..Backlog::default()
                },
            );
            assert_eq!(got, want, "pending {pending}, processing {processing}");
        }
    }

    #[test]
    fn due_jobs_wait_like_pending_ones() {
        let p = ScalePolicy {
            activation_backlog: 5,
            ..policy()
        };
        let rows: &[(u64, u64, u64, i64)] = &[
            // (pending, due, processing, recommendation)
            (0, 6, 0, 1), // due jobs alone cross it: up from zero with nothing pending
            (3, 3, 0, 1), // pending and due add up past the activation backlog
            (0, 5, 0, 0), // at it: still zero
            (10, 25, 5, 4),
            (u64::MAX, u64::MAX, 1, 1_844_674_407_370_955_162),
        ];
        // At activation 0, one due job leaves zero.
        let zero = policy();
        assert_eq!(
            recommend(
                &zero,
                Backlog {
                    due: 1,
                    ..Backlog::default()
                }
            ),
            1
        );
        for &(pending, due, processing, want) in rows {
            let backlog = Backlog {
                pending,
                due,
                processing,
            };
            assert_eq!(recommend(&p, backlog), want, "{backlog}");
        }
        assert_eq!(
            Backlog {
                pending: 2,
                due: 3,
                processing: 1
            }
            .to_string(),
            "backlog 6 (2 pending, 3 due, 1 processing)"
        );
    }

    /// Every reason of the `Scaling` condition, one row each (or more).
    #[test]
    fn every_reason_from_a_table() {
        let p = policy();
        struct Row {
            what: &'static str,
            policy: ScalePolicy,
            /// Decisions before this one: (seconds before, pending); the target has
            /// `current` replicas throughout.
            before: &'static [(i64, u64)],
            backlog: Backlog,
            target: TargetState,
            reason: Reason,
            current: Option<i32>,
            desired: Option<i32>,
            message: &'static str,
        }
        // By default the last decision was an hour ago: nothing holds.
        const QUIET: &[(i64, u64)] = &[(3600, 0)];
        let row = |what, backlog, target, reason, current, desired, message| Row {
            what,
            policy: p.clone(),
            before: QUIET,
            backlog,
            target,
            reason,
            current,
            desired,
            message,
        };
        let rows = vec![
            row(
                "up from zero on the first job",
                pending(1),
                found(0),
                Reason::ScaledUp,
                Some(0),
                Some(1),
                "scaled Deployment/worker from 0 to 1 replica: backlog 1 (1 pending, 0 \
                 processing) needs 1 replica at 10 per replica",
            ),
            row(
                "up from zero on a due retry, nothing pending",
                Backlog {
                    due: 1,
                    ..Backlog::default()
                },
                found(0),
                Reason::ScaledUp,
                Some(0),
                Some(1),
                "scaled Deployment/worker from 0 to 1 replica: backlog 1 (0 pending, 1 due, 0 \
                 processing) needs 1 replica at 10 per replica",
            ),
            row(
                "up, limited by the step",
                pending(95),
                found(2),
                Reason::ScaledUp,
                Some(2),
                Some(6),
                "scaled Deployment/worker from 2 to 6 replicas: backlog 95 (95 pending, 0 \
                 processing) needs 10 replicas at 10 per replica; at most +4 per reconcile \
                 (maxScaleUpStep)",
            ),
            row(
                "up, capped at the maximum",
                pending(500),
                found(8),
                Reason::ScaledUp,
                Some(8),
                Some(10),
                "scaled Deployment/worker from 8 to 10 replicas: backlog 500 (500 pending, 0 \
                 processing) needs 50 replicas at 10 per replica; capped at maxReplicas 10",
            ),
            Row {
                policy: ScalePolicy {
                    min_replicas: 7,
                    ..policy()
                },
                ..row(
                    "up to the minimum, whatever the step",
                    pending(0),
                    found(0),
                    Reason::ScaledUp,
                    Some(0),
                    Some(7),
                    "scaled Deployment/worker from 0 to 7 replicas: backlog 0 (0 pending, 0 \
                     processing) needs no replica; minReplicas is 7",
                )
            },
            row(
                "down once the window holds nothing higher",
                pending(25),
                found(6),
                Reason::ScaledDown,
                Some(6),
                Some(3),
                "scaled Deployment/worker from 6 to 3 replicas: backlog 25 (25 pending, 0 \
                 processing) needs 3 replicas at 10 per replica; no higher recommendation \
                 within scaleDownStabilization (5m)",
            ),
            row(
                "down to zero when nothing is left",
                pending(0),
                found(3),
                Reason::ScaledDown,
                Some(3),
                Some(0),
                "scaled Deployment/worker from 3 to 0 replicas: backlog 0 (0 pending, 0 \
                 processing) needs no replica; no higher recommendation within \
                 scaleDownStabilization (5m)",
            ),
            Row {
                before: &[(3600, 0), (200, 50)],
                ..row(
                    "down part of the way: a higher recommendation holds",
                    pending(20),
                    found(8),
                    Reason::ScaledDown,
                    Some(8),
                    Some(5),
                    "scaled Deployment/worker from 8 to 5 replicas: backlog 20 (20 pending, 0 \
                     processing) needs 2 replicas at 10 per replica; 5 replicas recommended \
                     within scaleDownStabilization (5m)",
                )
            },
            row(
                "down to the maximum at once",
                pending(500),
                found(15),
                Reason::ScaledDown,
                Some(15),
                Some(10),
                "scaled Deployment/worker from 15 to 10 replicas: backlog 500 (500 pending, 0 \
                 processing) needs 50 replicas at 10 per replica; above maxReplicas 10",
            ),
            Row {
                before: &[(3600, 0), (10, 60)],
                ..row(
                    "down held by a recommendation within the window",
                    pending(25),
                    found(6),
                    Reason::Stabilizing,
                    Some(6),
                    Some(6),
                    "keeping 6 replicas of Deployment/worker: backlog 25 (25 pending, 0 \
                     processing) needs 3 replicas at 10 per replica, but 6 were recommended \
                     within scaleDownStabilization (5m)",
                )
            },
            row(
                "at the maximum",
                pending(100),
                found(10),
                Reason::AtMaxReplicas,
                Some(10),
                Some(10),
                "10 replicas of Deployment/worker, the maximum: backlog 100 (100 pending, 0 \
                 processing) needs 10 replicas at 10 per replica",
            ),
            row(
                "at zero with nothing to do",
                pending(0),
                found(0),
                Reason::AtMinReplicas,
                Some(0),
                Some(0),
                "0 replicas of Deployment/worker, the minimum: backlog 0 (0 pending, 0 \
                 processing) needs no replica",
            ),
            Row {
                policy: ScalePolicy {
                    activation_backlog: 5,
                    ..policy()
                },
                ..row(
                    "at zero with a backlog at the activation backlog",
                    pending(5),
                    found(0),
                    Reason::AtMinReplicas,
                    Some(0),
                    Some(0),
                    "0 replicas of Deployment/worker, the minimum: backlog 5 (5 pending, 0 \
                     processing) is at or below activationBacklog 5",
                )
            },
            Row {
                policy: ScalePolicy {
                    min_replicas: 2,
                    ..policy()
                },
                ..row(
                    "at a minimum above zero",
                    pending(3),
                    found(2),
                    Reason::AtMinReplicas,
                    Some(2),
                    Some(2),
                    "2 replicas of Deployment/worker, the minimum: backlog 3 (3 pending, 0 \
                     processing) needs 1 replica at 10 per replica",
                )
            },
            row(
                "steady between the bounds",
                Backlog {
                    pending: 20,
                    due: 0,
                    processing: 5,
                },
                found(3),
                Reason::Steady,
                Some(3),
                Some(3),
                "3 replicas of Deployment/worker: backlog 25 (20 pending, 5 processing) needs \
                 3 replicas at 10 per replica",
            ),
            row(
                "a missing target",
                pending(50),
                TargetState::NotFound {
                    message: "Deployment/worker not found".into(),
                },
                Reason::TargetNotFound,
                None,
                None,
                "Deployment/worker not found",
            ),
            row(
                "an HPA on the same target",
                pending(50),
                TargetState::ClaimedByHpa {
                    hpa: "default/worker".into(),
                    replicas: 2,
                },
                Reason::HpaConflict,
                Some(2),
                None,
                "HorizontalPodAutoscaler default/worker scales Deployment/worker: the \
                 operator leaves it alone (delete the HPA, or spec.workers)",
            ),
            row(
                "an unreadable target",
                pending(50),
                TargetState::Unreadable {
                    message: "forbidden".into(),
                },
                Reason::ScaleFailed,
                None,
                None,
                "forbidden",
            ),
            Row {
                policy: ScalePolicy {
                    scale_up: ScaleUp {
                        select: Select::Disabled,
                        ..ScaleUp::default()
                    },
                    ..policy()
                },
                ..row(
                    "scale-up disabled",
                    pending(95),
                    found(2),
                    Reason::ScaleUpLimited,
                    Some(2),
                    Some(2),
                    "keeping 2 replicas of Deployment/worker: backlog 95 (95 pending, 0 \
                     processing) needs 10 replicas at 10 per replica, but \
                     behavior.scaleUp.selectPolicy is Disabled",
                )
            },
        ];
        let mut reasons = std::collections::HashSet::new();
        for row in rows {
            let current = match row.target {
                TargetState::Found { replicas } | TargetState::ClaimedByHpa { replicas, .. } => {
                    replicas
                }
                _ => 0,
            };
            let mut history = Recommendations::default();
            for &(ago, backlog) in row.before {
                let at = t(0) - SignedDuration::from_secs(ago);
                decide(
                    &row.policy,
                    pending(backlog),
                    found(current),
                    &mut history,
                    at,
                );
            }
            let d = decide(&row.policy, row.backlog, row.target, &mut history, t(0));
            assert_eq!(
                (d.reason, d.current, d.desired),
                (row.reason, row.current, row.desired),
                "{}: {}",
                row.what,
                d.message
            );
            assert_eq!(d.message, row.message, "{}", row.what);
            reasons.insert(d.reason);
        }
        assert_eq!(reasons.len(), 10, "every reason has a row: {reasons:?}");
    }

    #[test]
    fn scale_down_waits_for_the_window() {
        let p = policy();
        let mut history = Recommendations::default();
        decide(&p, pending(60), found(6), &mut history, t(0));
        let d = decide(&p, pending(25), found(6), &mut history, t(10));
        assert_eq!(
            (d.reason, d.current, d.desired),
            (Reason::Stabilizing, Some(6), Some(6))
        );
        assert_eq!(
            d.message,
            "keeping 6 replicas of Deployment/worker: backlog 25 (25 pending, 0 processing) \
             needs 3 replicas at 10 per replica, but 6 were recommended within \
             scaleDownStabilization (5m)"
        );
        // 6 was recommended at t(0): it holds through t(299), not at t(300).
        let d = decide(&p, pending(25), found(6), &mut history, t(299));
        assert_eq!((d.reason, d.desired), (Reason::Stabilizing, Some(6)));
        let d = decide(&p, pending(25), found(6), &mut history, t(300));
        assert_eq!((d.reason, d.desired), (Reason::ScaledDown, Some(3)));
    }

    #[test]
    fn the_highest_recommendation_in_the_window_wins() {
        let p = policy();
        let mut history = Recommendations::default();
        let mut step = |backlog: u64, current: i32, at: i64| {
            let d = decide(&p, pending(backlog), found(current), &mut history, t(at));
            d.desired.unwrap()
        };
        assert_eq!(step(80, 8, 0), 8);
        assert_eq!(step(50, 8, 100), 8, "8 at t0 holds");
        assert_eq!(step(20, 8, 200), 8);
        // t0's 8 leaves the window; 5 (t100) is the highest left.
        assert_eq!(step(20, 8, 300), 5);
        // t100's 5 leaves; 2 (t200) is the highest.
        assert_eq!(step(20, 5, 400), 2);
    }

    #[test]
    fn flapping_backlog_does_not_flap_the_replicas() {
        let p = policy();
        let mut history = Recommendations::default();
        let mut current = 0;
        let mut seen = Vec::new();
        // Every 10 s the backlog alternates between 80 and nothing, for 10 minutes.
        for i in 0..60 {
            let backlog = if i % 2 == 0 { 80 } else { 0 };
            let d = decide(
                &p,
                pending(backlog),
                found(current),
                &mut history,
                t(i * 10),
            );
            if let Some(to) = d.patch() {
                seen.push(to);
                current = to;
            }
        }
        assert_eq!(seen, vec![4, 8], "up in two steps, then held");
        // Quiet afterwards: one scale-down, a window after the last burst.
        let last_burst = 58 * 10;
        for s in (last_burst + 10..last_burst + 300).step_by(10) {
            let d = decide(&p, pending(0), found(current), &mut history, t(s));
            assert_eq!(d.reason, Reason::Stabilizing, "at {s}");
        }
        let d = decide(
            &p,
            pending(0),
            found(current),
            &mut history,
            t(last_burst + 300),
        );
        assert_eq!((d.reason, d.desired), (Reason::ScaledDown, Some(0)));
    }

    #[test]
    fn a_fresh_history_counts_the_current_replicas() {
        // After a restart nothing is known: the current replicas hold a whole window.
        let p = policy();
        let mut history = Recommendations::default();
        let d = decide(&p, pending(0), found(5), &mut history, t(0));
        assert_eq!((d.reason, d.desired), (Reason::Stabilizing, Some(5)));
        let d = decide(&p, pending(0), found(5), &mut history, t(300));
        assert_eq!((d.reason, d.desired), (Reason::ScaledDown, Some(0)));
    }

    #[test]
    fn scale_up_is_immediate_and_stepped() {
        let p = policy();
        let mut history = Recommendations::default();
        let mut current = 0;
        let mut seen = Vec::new();
        for i in 0..5 {
            let d = decide(&p, pending(1000), found(current), &mut history, t(i));
            if let Some(to) = d.patch() {
                seen.push(to);
                current = to;
            }
        }
        assert_eq!(seen, vec![4, 8, 10]);
    }

    #[test]
    fn no_window_scales_down_at_once() {
        let p = ScalePolicy {
            scale_down_stabilization: Duration::ZERO,
            ..policy()
        };
        let mut history = Recommendations::default();
        let d = decide(&p, pending(0), found(4), &mut history, t(0));
        assert_eq!((d.reason, d.desired), (Reason::ScaledDown, Some(0)));
        assert_eq!(
            d.message,
            "scaled Deployment/worker from 4 to 0 replicas: backlog 0 (0 pending, 0 \
             processing) needs no replica"
        );
    }

    #[test]
    fn another_target_or_maximum_starts_over() {
        let p = policy();
        let mut history = Recommendations::default();
        decide(&p, pending(100), found(10), &mut history, t(0));
        let other = ScalePolicy {
            target: TargetRef::parse("apps/v1", "StatefulSet", "worker").unwrap(),
            ..policy()
        };
        // The other target's 4 replicas hold (a fresh window), not the first one's 10.
        let d = decide(&other, pending(0), found(4), &mut history, t(10));
        assert_eq!((d.reason, d.desired), (Reason::Stabilizing, Some(4)));
        assert_eq!(history.highest(), Some(4));
    }

    #[test]
    fn missing_or_claimed_targets_forget_the_history() {
        let p = policy();
        let mut history = Recommendations::default();
        decide(&p, pending(100), found(10), &mut history, t(0));
        assert!(!history.is_empty());
        let missing = TargetState::NotFound {
            message: "gone".into(),
        };
        decide(&p, pending(100), missing, &mut history, t(10));
        assert!(history.is_empty());
        decide(&p, pending(100), found(10), &mut history, t(20));
        let claimed = TargetState::ClaimedByHpa {
            hpa: "default/h".into(),
            replicas: 10,
        };
        decide(&p, pending(100), claimed, &mut history, t(30));
        assert!(history.is_empty());
    }

    #[test]
    fn the_history_stays_small() {
        let p = ScalePolicy {
            scale_down_stabilization: Duration::from_secs(24 * 3600),
            ..policy()
        };
        let mut history = Recommendations::default();
        // A day of reconciles every second with a slowly draining backlog.
        for i in 0..86_400u64 {
            let backlog = 200u64.saturating_sub(i / 100);
            decide(&p, pending(backlog), found(10), &mut history, t(i as i64));
        }
        // At most maxReplicas + 1 for the scale-down window, and the last recommendation
        // for the scale-up one (no window); no scale event.
        assert!(history.len() <= 11 + 1, "{} entries", history.len());
    }

    #[test]
    fn a_failed_patch_keeps_the_numbers() {
        let d = once(&policy(), pending(30), 0);
        assert_eq!(d.patch(), Some(3));
        let failed = d.failed("cannot scale: forbidden".into());
        assert_eq!(failed.reason, Reason::ScaleFailed);
        assert_eq!((failed.current, failed.desired), (Some(0), Some(3)));
        assert_eq!(failed.patch(), None);
        assert_eq!(failed.replicas_after(), Some(0));
    }

    #[test]
    fn reasons_and_their_condition_status() {
        for (reason, text, scaling) in [
            (Reason::ScaledUp, "ScaledUp", true),
            (Reason::ScaledDown, "ScaledDown", true),
            (Reason::Stabilizing, "Stabilizing", true),
            (Reason::ScaleUpLimited, "ScaleUpLimited", true),
            (Reason::AtMinReplicas, "AtMinReplicas", true),
            (Reason::AtMaxReplicas, "AtMaxReplicas", true),
            (Reason::Steady, "Steady", true),
            (Reason::TargetNotFound, "TargetNotFound", false),
            (Reason::HpaConflict, "HPAConflict", false),
            (Reason::ScaleFailed, "ScaleFailed", false),
            (Reason::ScaledObjectConflict, "ScaledObjectConflict", false),
            (Reason::TargetOwnedByAnother, "TargetOwnedByAnother", false),
            (Reason::Paused, "Paused", false),
            (Reason::PausedReplicas, "PausedReplicas", false),
            (
                Reason::InvalidPauseAnnotation,
                "InvalidPauseAnnotation",
                false,
            ),
            (Reason::Fallback, "Fallback", false),
        ] {
            assert_eq!(reason.as_str(), text);
            assert_eq!(reason.is_scaling(), scaling, "{text}");
        }
    }

    #[test]
    fn targets_parse_and_match_hpas() {
        let d = TargetRef::parse("apps/v1", "Deployment", "worker").unwrap();
        assert_eq!(d.api_resource().plural, "deployments");
        assert_eq!(d.api_resource().api_version, "apps/v1");
        assert_eq!(d.to_string(), "Deployment/worker");
        let rc = TargetRef::parse("v1", "ReplicationController", "w").unwrap();
        assert_eq!((rc.group.as_str(), rc.version.as_str()), ("", "v1"));
        assert_eq!(rc.api_resource().plural, "replicationcontrollers");
        for (api_version, kind, name, error) in [
            ("", "Deployment", "w", "apiVersion \"\""),
            ("apps/", "Deployment", "w", "apiVersion \"apps/\""),
            ("/v1", "Deployment", "w", "apiVersion \"/v1\""),
            ("a/b/c", "Deployment", "w", "apiVersion \"a/b/c\""),
            ("apps/v1", "", "w", "kind \"\""),
            ("apps/v1", "Deploy ment", "w", "kind \"Deploy ment\""),
            ("apps/v1", "Deployment", "", "name must not be empty"),
        ] {
            let e = TargetRef::parse(api_version, kind, name).unwrap_err();
            assert!(e.starts_with(error), "{e}");
        }
        let hpa = |api_version: Option<&str>, kind: &str, name: &str| CrossVersionObjectReference {
            api_version: api_version.map(String::from),
            kind: kind.into(),
            name: name.into(),
        };
        assert!(d.is_targeted_by(&hpa(Some("apps/v1"), "Deployment", "worker")));
        assert!(d.is_targeted_by(&hpa(Some("apps/v1beta2"), "Deployment", "worker")));
        assert!(d.is_targeted_by(&hpa(None, "Deployment", "worker")));
        assert!(!d.is_targeted_by(&hpa(Some("apps/v1"), "Deployment", "other")));
        assert!(!d.is_targeted_by(&hpa(Some("apps/v1"), "StatefulSet", "worker")));
        assert!(!d.is_targeted_by(&hpa(Some("example.com/v1"), "Deployment", "worker")));
        assert!(rc.is_targeted_by(&hpa(Some("v1"), "ReplicationController", "w")));
    }

    /// The replicas a target follows through reconciles every `every` seconds on a
    /// backlog of `backlog(at)`, starting at `from`: the `(time, replicas)` of each scale.
    fn run(
        p: &ScalePolicy,
        from: i32,
        every: i64,
        until: i64,
        backlog: impl Fn(i64) -> u64,
    ) -> Vec<(i64, i32)> {
        let mut history = Recommendations::default();
        let mut current = from;
        let mut scales = Vec::new();
        for at in (0..=until).step_by(every as usize) {
            let d = decide(p, pending(backlog(at)), found(current), &mut history, t(at));
            if let Some(to) = d.patch() {
                scales.push((at, to));
                current = to;
            }
        }
        scales
    }

    fn hpa_defaults(max: i32) -> ScalePolicy {
        ScalePolicy {
            max_replicas: max,
            scale_up: ScaleUp::default(),
            ..policy()
        }
    }

    /// 0 → 200 on a large backlog with the HPA's defaults (+100 % or +4 pods per 15 s):
    /// +4 from zero (100 % of nothing is nothing), then doubling, one step per period.
    /// A scale at t still counts in the period until t + 15 s, so the next one comes at
    /// the first reconcile at or after t + 15 s: every 20 s with the default 10 s
    /// reconcile (6 steps after the first: 120 s), every 15 s with a 5 s or 15 s one
    /// (90 s, the HPA's own pace at its 15 s sync period). The deprecated +4 per
    /// reconcile took 50 reconciles: 490 s.
    #[test]
    fn from_zero_to_200_in_about_a_minute_or_two() {
        let doubling = [4, 8, 16, 32, 64, 128, 200];
        for (every, step, done) in [(10, 20, 120), (15, 15, 90), (5, 15, 90), (30, 30, 180)] {
            let scales = run(&hpa_defaults(200), 0, every, 600, |_| 1_000_000);
            let want: Vec<(i64, i32)> = doubling
                .iter()
                .enumerate()
                .map(|(i, &r)| (i as i64 * step, r))
                .collect();
            assert_eq!(scales, want, "reconcile every {every}s");
            assert_eq!(scales.last().unwrap().0, done, "reconcile every {every}s");
        }
        let old = ScalePolicy {
            scale_up: ScaleUp::per_reconcile(4),
            ..hpa_defaults(200)
        };
        let scales = run(&old, 0, 10, 600, |_| 1_000_000);
        assert_eq!(scales.len(), 50);
        assert_eq!(scales.last(), Some(&(490, 200)));
    }

    /// The scale-up policies, each from a table: the target follows the decisions
    /// (reconciles every 10 s, backlog 1000 = 100 replicas wanted, maxReplicas 100).
    #[test]
    fn scale_up_policies_from_a_table() {
        let period = |secs| Per::Period(Duration::from_secs(secs));
        let pods = |value, per| RateLimit {
            kind: RateKind::Pods,
            value,
            per,
        };
        let percent = |value, per| RateLimit {
            kind: RateKind::Percent,
            value,
            per,
        };
        let rules = |policies: Vec<RateLimit>, select| ScaleUp {
            policies,
            select,
            stabilization: Duration::ZERO,
        };
        /// (what, the rules, the replicas to start from, the scales: (time, replicas)).
        type Row = (&'static str, ScaleUp, i32, Vec<(i64, i32)>);
        let rows: Vec<Row> = vec![
            (
                "Max: the larger change wins (+100 % of 10 over +4)",
                ScaleUp::default(),
                10,
                vec![(0, 20), (20, 40), (40, 80), (60, 100)],
            ),
            (
                "Min: the smaller change wins (+4 over +100 %)",
                rules(
                    vec![percent(100, period(15)), pods(4, period(15))],
                    Select::Min,
                ),
                10,
                vec![(0, 14), (20, 18), (40, 22), (60, 26), (80, 30)],
            ),
            (
                "Min from zero: 100 % of nothing is nothing",
                rules(
                    vec![percent(100, period(15)), pods(4, period(15))],
                    Select::Min,
                ),
                0,
                vec![],
            ),
            (
                "Disabled: never up",
                rules(vec![pods(4, period(15))], Select::Disabled),
                3,
                vec![],
            ),
            (
                "Percent rounds up: +50 % of 3 is 5; the period is a minute",
                rules(vec![percent(50, period(60))], Select::Max),
                3,
                vec![(0, 5), (60, 8)],
            ),
            (
                "two periods: +2 per 10 s, but at most +5 per minute",
                rules(vec![pods(2, period(10)), pods(5, period(60))], Select::Min),
                0,
                vec![(0, 2), (10, 4), (20, 5), (60, 7), (70, 9), (80, 10)],
            ),
            (
                "the deprecated maxScaleUpStep: +4 per reconcile",
                ScaleUp::per_reconcile(4),
                0,
                (0..=8).map(|i| (i * 10, 4 * (i as i32 + 1))).collect(),
            ),
        ];
        for (what, scale_up, from, want) in rows {
            let p = ScalePolicy {
                max_replicas: 100,
                scale_up,
                ..policy()
            };
            let scales = run(&p, from, 10, 80, |_| 1000);
            assert_eq!(scales, want, "{what}");
        }
    }

    #[test]
    fn a_limited_scale_up_says_so() {
        let p = hpa_defaults(100);
        let mut history = Recommendations::default();
        let d = decide(&p, pending(1000), found(10), &mut history, t(0));
        assert_eq!((d.reason, d.desired), (Reason::ScaledUp, Some(20)));
        assert_eq!(
            d.message,
            "scaled Deployment/worker from 10 to 20 replicas: backlog 1000 (1000 pending, 0 \
             processing) needs 100 replicas at 10 per replica; behavior.scaleUp allows +100% \
             per 15s or +4 pods per 15s, the larger, so 20 for now"
        );
        let d = decide(&p, pending(1000), found(20), &mut history, t(10));
        assert_eq!((d.reason, d.desired), (Reason::ScaleUpLimited, Some(20)));
        assert_eq!(
            d.message,
            "keeping 20 replicas of Deployment/worker: backlog 1000 (1000 pending, 0 \
             processing) needs 100 replicas at 10 per replica, but behavior.scaleUp allows \
             +100% per 15s or +4 pods per 15s, the larger, and no more yet"
        );
        assert_eq!(d.patch(), None);
    }

    #[test]
    fn a_scale_down_within_the_period_counts_as_room_to_grow_back() {
        // As the HPA: the period starts from the replicas before the scale-down.
        let p = ScalePolicy {
            scale_down_stabilization: Duration::ZERO,
            ..hpa_defaults(100)
        };
        let mut history = Recommendations::default();
        let d = decide(&p, pending(50), found(10), &mut history, t(0));
        assert_eq!(d.desired, Some(5));
        // Start of the period: 10; +100 % allows 20.
        let d = decide(&p, pending(1000), found(5), &mut history, t(5));
        assert_eq!((d.reason, d.desired), (Reason::ScaledUp, Some(20)));
    }

    #[test]
    fn a_refused_patch_is_not_counted_against_the_policies() {
        let p = hpa_defaults(100);
        let mut history = Recommendations::default();
        let d = decide(&p, pending(1000), found(10), &mut history, t(0));
        assert_eq!(d.patch(), Some(20));
        history.unscaled(t(0));
        // The target stayed at 10: the period allows 20 again, not 10.
        let d = decide(&p, pending(1000), found(10), &mut history, t(10));
        assert_eq!((d.reason, d.desired), (Reason::ScaledUp, Some(20)));
    }

    #[test]
    fn the_scale_up_window_takes_the_lowest_recommendation() {
        let p = ScalePolicy {
            scale_up: ScaleUp {
                stabilization: Duration::from_secs(60),
                ..ScaleUp::default()
            },
            ..hpa_defaults(100)
        };
        let mut history = Recommendations::default();
        let d = decide(&p, pending(30), found(3), &mut history, t(0));
        assert_eq!((d.reason, d.desired), (Reason::Steady, Some(3)));
        let d = decide(&p, pending(200), found(3), &mut history, t(10));
        assert_eq!((d.reason, d.desired), (Reason::Stabilizing, Some(3)));
        assert_eq!(
            d.message,
            "keeping 3 replicas of Deployment/worker: backlog 200 (200 pending, 0 processing) \
             needs 20 replicas at 10 per replica, but 3 were recommended within \
             behavior.scaleUp.stabilizationWindowSeconds (1m)"
        );
        let d = decide(&p, pending(200), found(3), &mut history, t(59));
        assert_eq!(d.reason, Reason::Stabilizing);
        // t0's 3 leaves the window: 20 is the lowest left; the policies allow 7.
        let d = decide(&p, pending(200), found(3), &mut history, t(60));
        assert_eq!((d.reason, d.desired), (Reason::ScaledUp, Some(7)));

        // A spike shorter than the window never scales up.
        let scales = run(&p, 3, 10, 600, |at| if at == 100 { 1000 } else { 30 });
        assert_eq!(scales, vec![]);
        // A backlog that lasts the window does, a window after the last lower
        // recommendation (t10).
        let scales = run(&p, 3, 10, 80, |at| if at >= 20 { 1000 } else { 30 });
        assert_eq!(scales, vec![(70, 7)]);
    }

    #[test]
    fn the_scale_up_window_holds_part_of_the_way() {
        // Lowest in the window 12, above the current 5: up to 12 (within the policies).
        let p = ScalePolicy {
            scale_up: ScaleUp {
                stabilization: Duration::from_secs(60),
                ..ScaleUp::default()
            },
            ..hpa_defaults(100)
        };
        let mut history = Recommendations::default();
        decide(&p, pending(120), found(5), &mut history, t(0));
        history.unscaled(t(0));
        let d = decide(&p, pending(300), found(5), &mut history, t(10));
        assert_eq!((d.reason, d.desired), (Reason::ScaledUp, Some(10)));
        history.unscaled(t(10));
        let p = ScalePolicy {
            scale_up: ScaleUp {
                policies: vec![RateLimit {
                    kind: RateKind::Pods,
                    value: 100,
                    per: Per::Period(Duration::from_secs(15)),
                }],
                ..p.scale_up.clone()
            },
            ..p
        };
        let d = decide(&p, pending(300), found(5), &mut history, t(20));
        assert_eq!((d.reason, d.desired), (Reason::ScaledUp, Some(12)));
        assert!(
            d.message.ends_with(
                "; 12 replicas recommended within \
                 behavior.scaleUp.stabilizationWindowSeconds (1m)"
            ),
            "{}",
            d.message
        );
    }

    #[test]
    fn the_scale_events_stay_few() {
        let p = ScalePolicy {
            scale_down_stabilization: Duration::ZERO,
            ..hpa_defaults(100)
        };
        let mut history = Recommendations::default();
        let mut current = 0;
        // A backlog that swings every reconcile for a day, every second.
        for i in 0..86_400i64 {
            let backlog = if i % 2 == 0 { 1000 } else { 0 };
            let d = decide(&p, pending(backlog), found(current), &mut history, t(i));
            current = d.replicas_after().unwrap();
        }
        // Events within the 15 s period, one per reconcile at most, and one entry of
        // each window.
        assert!(history.len() <= 15 + 2, "{} entries", history.len());
    }

    /// A held decision (pause, paused replicas, a bad annotation, the fallback) for each
    /// state of the target: (hold, target, reason, current, desired, patch).
    #[test]
    fn held_decisions_from_a_table() {
        let p = policy();
        let so = TargetState::ClaimedByScaledObject {
            scaled_object: "default/so".into(),
            replicas: 4,
        };
        let other = TargetState::OwnedByAnother {
            queue: "default/old".into(),
            replicas: 4,
        };
        let hpa = TargetState::ClaimedByHpa {
            hpa: "default/h".into(),
            replicas: 4,
        };
        let missing = TargetState::NotFound {
            message: "gone".into(),
        };
        let bad = Hold::Invalid("annotation jobqueue.dev/paused: \"maybe\"".into());
        let fallback = Hold::Fallback {
            replicas: 2,
            threshold: 3,
        };
        type Row<'a> = (
            &'a Hold,
            TargetState,
            Reason,
            Option<i32>,
            Option<i32>,
            Option<i32>,
        );
        #[rustfmt::skip]
        let rows: Vec<Row> = vec![
            (&Hold::Paused, found(5), Reason::Paused, Some(5), None, None),
            (&Hold::Paused, found(0), Reason::Paused, Some(0), None, None),
            (&Hold::Pinned(3), found(5), Reason::PausedReplicas, Some(5), Some(3), Some(3)),
            (&Hold::Pinned(3), found(3), Reason::PausedReplicas, Some(3), Some(3), None),
            // Pinned above maxReplicas: as KEDA's paused-replicas, not clamped.
            (&Hold::Pinned(40), found(3), Reason::PausedReplicas, Some(3), Some(40), Some(40)),
            (&Hold::Pinned(0), found(3), Reason::PausedReplicas, Some(3), Some(0), Some(0)),
            (&bad, found(5), Reason::InvalidPauseAnnotation, Some(5), None, None),
            (&fallback, found(0), Reason::Fallback, Some(0), Some(2), Some(2)),
            (&fallback, found(2), Reason::Fallback, Some(2), Some(2), None),
            // Another owner, or no target: the hold changes nothing.
            (&Hold::Pinned(3), so.clone(), Reason::ScaledObjectConflict, Some(4), None, None),
            (&fallback, so, Reason::ScaledObjectConflict, Some(4), None, None),
            (&Hold::Pinned(3), other.clone(), Reason::TargetOwnedByAnother, Some(4), None, None),
            (&fallback, other, Reason::TargetOwnedByAnother, Some(4), None, None),
            (&Hold::Pinned(3), hpa, Reason::HpaConflict, Some(4), None, None),
            (&fallback, missing, Reason::TargetNotFound, None, None, None),
        ];
        for (held, target, reason, current, desired, patch) in rows {
            let what = format!("{held:?} on {target:?}");
            let mut history = Recommendations::default();
            decide(&p, pending(100), found(3), &mut history, t(0));
            let d = hold(&p, held, target, &mut history);
            assert_eq!(d.reason, reason, "{what}: {}", d.message);
            assert_eq!(
                (d.current, d.desired, d.patch()),
                (current, desired, patch),
                "{what}"
            );
            assert!(history.is_empty(), "{what}: a held scaler keeps no history");
            if d.reason.pins() {
                assert_eq!(d.replicas_after(), desired, "{what}");
            } else {
                assert_eq!(d.replicas_after(), current, "{what}");
            }
        }
    }

    #[test]
    fn held_messages_say_why() {
        let p = policy();
        let mut h = Recommendations::default();
        let msg = |held: Hold, current: i32, h: &mut Recommendations| {
            hold(&p, &held, found(current), h).message
        };
        assert_eq!(
            msg(Hold::Paused, 5, &mut h),
            "scaling is paused (jobqueue.dev/paused): 5 replicas of Deployment/worker left as \
             they are"
        );
        assert_eq!(
            msg(Hold::Pinned(3), 5, &mut h),
            "scaling is paused at 3 replicas: scaled Deployment/worker from 5 \
             (jobqueue.dev/paused-replicas)"
        );
        assert_eq!(
            msg(Hold::Pinned(1), 1, &mut h),
            "scaling is paused at 1 replica of Deployment/worker (jobqueue.dev/paused-replicas)"
        );
        assert_eq!(
            msg(
                Hold::Fallback {
                    replicas: 2,
                    threshold: 3
                },
                0,
                &mut h
            ),
            "the queue could not be read in 3 reconciles in a row or more: Deployment/worker \
             held at the fallback of 2 replicas until it can"
        );
        let so = TargetState::ClaimedByScaledObject {
            scaled_object: "default/so".into(),
            replicas: 1,
        };
        assert_eq!(
            decide(&p, pending(10), so, &mut h, t(0)).message,
            "KEDA ScaledObject default/so scales Deployment/worker: the operator leaves it alone \
             (delete the ScaledObject, or spec.workers)"
        );
    }
}
