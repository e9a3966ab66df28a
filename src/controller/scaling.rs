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
//! 1. **recommend** `ceil((pending + processing) / targetBacklogPerReplica)`; processing
//!    jobs count, so running jobs keep their workers. The recommendation is 0 when the
//!    backlog is at or below `activationBacklog` and no job is processing: the only way
//!    to zero, and any backlog above it leaves zero at once;
//! 2. **stabilize** a scale-down: the highest recommendation within
//!    `scaleDownStabilization` wins (never above the current replicas), so a backlog
//!    that comes and goes keeps its workers and the replicas do not flap;
//! 3. **limit** a scale-up, which is immediate, to `maxScaleUpStep` replicas per
//!    reconcile;
//! 4. **clamp** to `[minReplicas, maxReplicas]` (a target outside them is brought back
//!    at once).
//!
//! The recommendations live in memory, per queue. After the operator starts (or a
//! standby takes over) the target's current replicas count as a recommendation made
//! then: the first scale-down waits a whole window rather than trusting a history it
//! never saw.

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
    pub max_scale_up_step: i32,
}

/// What the workers have to do: jobs waiting, and jobs running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub pending: u64,
    pub processing: u64,
}

impl Backlog {
    pub fn total(self) -> u64 {
        self.pending.saturating_add(self.processing)
    }
}

impl fmt::Display for Backlog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "backlog {} ({} pending, {} processing)",
            self.total(),
            self.pending,
            self.processing
        )
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
}

/// The `Scaling` condition's reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Replicas were added.
    ScaledUp,
    /// Replicas were removed.
    ScaledDown,
    /// The backlog asks for fewer replicas, but a higher recommendation is still
    /// within the stabilization window.
    Stabilizing,
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
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ScaledUp => "ScaledUp",
            Reason::ScaledDown => "ScaledDown",
            Reason::Stabilizing => "Stabilizing",
            Reason::AtMinReplicas => "AtMinReplicas",
            Reason::AtMaxReplicas => "AtMaxReplicas",
            Reason::Steady => "Steady",
            Reason::TargetNotFound => "TargetNotFound",
            Reason::HpaConflict => "HPAConflict",
            Reason::ScaleFailed => "ScaleFailed",
        }
    }

    /// Whether the operator is scaling the target (the condition's status).
    pub fn is_scaling(self) -> bool {
        !matches!(
            self,
            Reason::TargetNotFound | Reason::HpaConflict | Reason::ScaleFailed
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
        if self.reason.scales() {
            self.desired
        } else {
            None
        }
    }

    /// The target's replicas once this decision is applied.
    pub fn replicas_after(&self) -> Option<i32> {
        if self.reason.scales() {
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

/// Recent recommendations of one queue, for the scale-down stabilization.
///
/// Only what can still be the highest within a window is kept: a recommendation is
/// dropped once a later one is as high (it would leave the window first and never be
/// the maximum again). What remains is strictly decreasing, so at most
/// `maxReplicas + 1` entries whatever the window, and the front is the highest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recommendations {
    /// The target and `maxReplicas` the entries were recorded for (they are clamped to
    /// it); another target or bound starts over.
    basis: Option<(TargetRef, i32)>,
    /// `(when, replicas)`, oldest first, replicas strictly decreasing.
    entries: VecDeque<(Timestamp, i32)>,
}

impl Recommendations {
    /// Record `replicas` recommended at `now`.
    pub fn record(&mut self, now: Timestamp, replicas: i32) {
        while self.entries.back().is_some_and(|&(_, r)| r <= replicas) {
            self.entries.pop_back();
        }
        self.entries.push_back((now, replicas));
    }

    /// Forget what was recommended at or before `cutoff`.
    pub fn prune(&mut self, cutoff: Timestamp) {
        while self.entries.front().is_some_and(|&(t, _)| t <= cutoff) {
            self.entries.pop_front();
        }
    }

    /// The highest recommendation kept.
    pub fn highest(&self) -> Option<i32> {
        self.entries.front().map(|&(_, r)| r)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn clear(&mut self) {
        self.basis = None;
        self.entries.clear();
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
    /// `maxScaleUpStep`, at least 1.
    pub step: i32,
    /// The replicas to set: stabilized, stepped and clamped.
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
            desired,
            ..
        } = *self;
        if desired > current {
            Reason::ScaledUp
        } else if desired < current {
            Reason::ScaledDown
        } else if raw.clamp(min, max) < desired {
            Reason::Stabilizing
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
/// replicas; records this recommendation in `history`.
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

    // 1. What the backlog asks for; kept clamped to max, which bounds the history.
    let asked = recommend(policy, backlog);
    let raw = i32::try_from(asked.min(i64::from(max))).unwrap_or(max);

    // 2. Stabilize a scale-down on the highest recommendation within the window.
    let basis = Some((policy.target.clone(), max));
    if history.basis != basis || history.is_empty() {
        history.clear();
        history.basis = basis;
        // No history seen: the current replicas count as recommended now.
        history.record(now, current.min(max));
    }
    let span =
        SignedDuration::try_from(policy.scale_down_stabilization).unwrap_or(SignedDuration::MAX);
    history.prune(now.checked_sub(span).unwrap_or(Timestamp::MIN));
    let highest = history.highest().unwrap_or(raw).max(raw);
    history.record(now, raw);
    let stabilized = if raw >= current {
        raw
    } else {
        current.min(highest)
    };

    // 3. Limit a scale-up; 4. clamp.
    let step = policy.max_scale_up_step.max(1);
    let limited = if stabilized > current {
        stabilized.min(current.saturating_add(step))
    } else {
        stabilized
    };
    Sizing {
        current,
        min,
        max,
        asked,
        raw,
        step,
        desired: limited.clamp(min, max),
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
        step,
        desired,
    } = *sizing;
    let t = &policy.target;
    let per = policy.target_backlog_per_replica;
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
    match reason {
        Reason::ScaledUp => {
            let note = if desired < raw {
                format!("; at most +{step} per reconcile (maxScaleUpStep)")
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
        Reason::Stabilizing => format!(
            "keeping {} of {t}: {needs}, but {desired} were recommended within \
             scaleDownStabilization ({window})",
            replicas(desired),
        ),
        Reason::AtMaxReplicas => format!("{} of {t}, the maximum: {needs}", replicas(desired)),
        Reason::AtMinReplicas => format!("{} of {t}, the minimum: {needs}", replicas(desired)),
        Reason::Steady | Reason::TargetNotFound | Reason::HpaConflict | Reason::ScaleFailed => {
            format!("{} of {t}: {needs}", replicas(desired))
        }
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
            max_scale_up_step: 4,
        }
    }

    fn pending(n: u64) -> Backlog {
        Backlog {
            pending: n,
            processing: 0,
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
                },
            );
            assert_eq!(got, want, "pending {pending}, processing {processing}");
        }
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
        assert_eq!(reasons.len(), 9, "every reason has a row: {reasons:?}");
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
        assert!(history.len() <= 11, "{} entries", history.len());
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
            (Reason::AtMinReplicas, "AtMinReplicas", true),
            (Reason::AtMaxReplicas, "AtMaxReplicas", true),
            (Reason::Steady, "Steady", true),
            (Reason::TargetNotFound, "TargetNotFound", false),
            (Reason::HpaConflict, "HPAConflict", false),
            (Reason::ScaleFailed, "ScaleFailed", false),
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
}
