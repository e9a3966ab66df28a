//! What deleting a `JobQueue` means, decided with pure functions (the I/O is the
//! reconcile's cleanup, in `reconcile.rs`).
//!
//! Every JobQueue carries the finalizer [`FINALIZER`], added on its first reconcile. When
//! the queue is deleted the operator, before it lets the object go:
//!
//! - leaves the queue's Redis keys where they are (jobs, leases, dead letters: they may
//!   still be worked, or be wanted later; the operator never deletes them);
//! - sets the worker target's replicas as `spec.workers.onDelete` says ([`on_delete`]):
//!   `keep` (the default) leaves them, `zero` scales to 0, `restore` sets them back to
//!   the count the target had when the operator first took it, which the status keeps
//!   in `originalReplicas` ([`original_replicas`]), written before the first scale. A
//!   record is never replaced by a reconcile that did not see it: a status write from a
//!   copy without the record is conditional on the copy's `resourceVersion`
//!   ([`guards_record`]), and once refused keeps the record the queue has
//!   ([`kept_original`]);
//! - publishes a Normal Event `QueueDeleted` saying where the keys were left
//!   ([`deleted_note`]), and forgets the queue's state and metric series.
//!
//! A target already gone blocks nothing; a refused scale patch is retried (the decision
//! is taken again from the target as read then, so a retry is the same cleanup).

use crate::crd::{JobQueue, JobQueueStatus, OnDelete, OriginalReplicas};

use super::scaling::{Decision, Reason};

/// The finalizer that makes the operator see a JobQueue's deletion.
pub const FINALIZER: &str = "jobqueue.dev/cleanup";

/// The reason of the Normal Event published when a queue is deleted.
pub const QUEUE_DELETED: &str = "QueueDeleted";

/// Whether `jq` carries the operator's finalizer.
pub fn has_finalizer(jq: &JobQueue) -> bool {
    jq.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|n| n == FINALIZER))
}

/// The `originalReplicas` to write with the status: kept once recorded for the same
/// target; recorded when the operator first takes a target (it read its replicas and no
/// HPA owns it); dropped without workers.
///
/// `target` is the spec's target (`Kind/name`) and `decision` this reconcile's, both
/// `None` without `spec.workers`.
pub fn original_replicas(
    prev: Option<&OriginalReplicas>,
    target: Option<&str>,
    decision: Option<&Decision>,
) -> Option<OriginalReplicas> {
    let target = target?;
    if let Some(prev) = prev.filter(|p| p.target == target) {
        return Some(prev.clone());
    }
    let decision = decision?;
    if matches!(
        decision.reason,
        Reason::HpaConflict | Reason::ScaledObjectConflict | Reason::TargetOwnedByAnother
    ) {
        // Another owner's replicas are not the count to restore.
        return None;
    }
    decision.current.map(|replicas| OriginalReplicas {
        target: target.to_string(),
        replicas,
    })
}

/// Whether a status write must be conditional on the `resourceVersion` of the copy it was
/// decided from (`prev` that copy's record, `new` the one written): while the queue has
/// workers, unless it writes the very record the copy has. A reconcile may run on a
/// cached copy older than the last status write (one brought by the scale the previous
/// reconcile made, before the watch brought that reconcile's write); a new record, or
/// none, written from it could replace or drop a record it never saw: the recorded
/// count replaced by the operator's own.
pub fn guards_record(
    has_workers: bool,
    prev: Option<&OriginalReplicas>,
    new: Option<&OriginalReplicas>,
) -> bool {
    has_workers && (new.is_none() || new != prev)
}

/// The `originalReplicas` to write once a conditional status write was refused and the
/// queue read again: the record the queue has for `target` (`Kind/name`, `None` without
/// workers), recorded by an earlier reconcile and never replaced, else `ours`.
pub fn kept_original(
    theirs: Option<&OriginalReplicas>,
    ours: Option<OriginalReplicas>,
    target: Option<&str>,
) -> Option<OriginalReplicas> {
    let target = target?;
    theirs.filter(|t| t.target == target).cloned().or(ours)
}

/// What deleting the queue does to its worker target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDeleteAction {
    /// `onDelete: keep`: the target is left as it is, without a look at it.
    Keep,
    /// Patch the target's replicas.
    Scale { from: i32, to: i32 },
    /// Leave the target at its replicas.
    Leave { replicas: i32, why: LeaveWhy },
    /// The target is gone: nothing to do.
    TargetGone,
    /// The operator was not scaling the target (its last `Scaling` condition says
    /// another owner has it, or it was missing): left to its owner.
    NotScaling,
}

/// Whether the operator was scaling the target at its last reconcile: not when the
/// `Scaling` condition is `False` for any reason but a refused patch (an HPA or another
/// owner has the target, or it was missing). Without the condition (never reconciled with
/// workers) or while it is `Unknown` (the queue could not be read) it counts as scaling.
pub fn was_scaling(status: Option<&JobQueueStatus>) -> bool {
    let Some(c) = status.and_then(|s| s.condition(super::status::types::SCALING)) else {
        return true;
    };
    c.status != "False" || c.reason == Reason::ScaleFailed.as_str()
}

/// Why the target is left as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaveWhy {
    /// It already has the replicas `onDelete` asks for.
    AlreadyThere,
    /// `onDelete: restore`, but no original count was recorded for it.
    NoOriginal,
}

/// The replicas on delete, from `onDelete`, the recorded original count (for this
/// target) and the target's current replicas (`None`: it does not exist; not read for
/// `keep`).
pub fn on_delete(policy: OnDelete, original: Option<i32>, current: Option<i32>) -> OnDeleteAction {
    if policy == OnDelete::Keep {
        return OnDeleteAction::Keep;
    }
    let Some(current) = current else {
        return OnDeleteAction::TargetGone;
    };
    let to = match policy {
        OnDelete::Keep => unreachable!("returned above"),
        OnDelete::Zero => 0,
        OnDelete::Restore => match original {
            Some(original) => original.max(0),
            None => {
                return OnDeleteAction::Leave {
                    replicas: current,
                    why: LeaveWhy::NoOriginal,
                };
            }
        },
    };
    if to == current {
        OnDeleteAction::Leave {
            replicas: current,
            why: LeaveWhy::AlreadyThere,
        }
    } else {
        OnDeleteAction::Scale { from: current, to }
    }
}

/// The note of the `QueueDeleted` Event: where the Redis keys were left (prefix and hash
/// tag, never the endpoint, which may hold credentials) and what became of the target
/// (`target` is `Kind/name`, `None` without workers).
pub fn deleted_note(
    prefix: &str,
    tag: &str,
    target: Option<&str>,
    action: Option<OnDeleteAction>,
) -> String {
    let keys = format!(
        "the Redis keys were left in place ({prefix}:{{{tag}}}:*, prefix {prefix:?}, hash tag \
         {tag:?}); `jobqueue` commands still reach them"
    );
    let workers = match (target, action) {
        (Some(t), Some(OnDeleteAction::Scale { from, to })) => {
            format!("{t} scaled from {from} to {to} replicas")
        }
        (Some(t), Some(OnDeleteAction::Keep)) => format!("{t} left as it is (onDelete: keep)"),
        (Some(t), Some(OnDeleteAction::Leave { replicas, why })) => match why {
            LeaveWhy::AlreadyThere => format!("{t} already at {replicas} replicas"),
            LeaveWhy::NoOriginal => format!(
                "{t} left at {replicas} replicas: no original count was recorded to restore"
            ),
        },
        (Some(t), Some(OnDeleteAction::TargetGone)) => format!("{t} not found: nothing to scale"),
        (Some(t), Some(OnDeleteAction::NotScaling)) => format!(
            "{t} left as it is: the operator was not scaling it (see the Scaling condition)"
        ),
        (Some(t), None) => format!("{t} left as it is"),
        (None, _) => "no workers to scale".to_string(),
    };
    format!("JobQueue deleted: {keys}; {workers}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::scaling::Reason;
    use LeaveWhy::*;
    use OnDeleteAction::*;

    #[test]
    fn the_replicas_on_delete() {
        let cases = [
            // (onDelete, original, current) => action
            (OnDelete::Keep, Some(2), Some(7), OnDeleteAction::Keep),
            (OnDelete::Keep, None, Some(0), OnDeleteAction::Keep),
            (OnDelete::Keep, Some(2), None, OnDeleteAction::Keep),
            (OnDelete::Zero, Some(2), Some(7), Scale { from: 7, to: 0 }),
            (OnDelete::Zero, None, Some(3), Scale { from: 3, to: 0 }),
            (
                OnDelete::Zero,
                Some(2),
                Some(0),
                Leave {
                    replicas: 0,
                    why: AlreadyThere,
                },
            ),
            (OnDelete::Zero, None, None, TargetGone),
            (
                OnDelete::Restore,
                Some(2),
                Some(7),
                Scale { from: 7, to: 2 },
            ),
            (
                OnDelete::Restore,
                Some(3),
                Some(0),
                Scale { from: 0, to: 3 },
            ),
            (
                OnDelete::Restore,
                Some(0),
                Some(5),
                Scale { from: 5, to: 0 },
            ),
            (
                OnDelete::Restore,
                Some(4),
                Some(4),
                Leave {
                    replicas: 4,
                    why: AlreadyThere,
                },
            ),
            (
                OnDelete::Restore,
                None,
                Some(6),
                Leave {
                    replicas: 6,
                    why: NoOriginal,
                },
            ),
            (OnDelete::Restore, Some(2), None, TargetGone),
            (
                OnDelete::Restore,
                Some(-1),
                Some(2),
                Scale { from: 2, to: 0 },
            ),
        ];
        for (policy, original, current, want) in cases {
            assert_eq!(
                on_delete(policy, original, current),
                want,
                "{policy:?}, original {original:?}, current {current:?}"
            );
        }
    }

    fn decision(reason: Reason, current: Option<i32>) -> Decision {
        Decision {
            reason,
            current,
            desired: Some(5),
            message: String::new(),
        }
    }

    fn orig(target: &str, replicas: i32) -> OriginalReplicas {
        OriginalReplicas {
            target: target.into(),
            replicas,
        }
    }

    #[test]
    fn the_original_replicas_are_recorded_once_per_target() {
        let d = "Deployment/worker";
        let cases = [
            // First taken: the replicas as read, before the first patch.
            (
                None,
                Some(d),
                Some(decision(Reason::ScaledUp, Some(2))),
                Some(orig(d, 2)),
            ),
            (
                None,
                Some(d),
                Some(decision(Reason::Steady, Some(0))),
                Some(orig(d, 0)),
            ),
            // A failed patch changed nothing: the replicas read are still the original.
            (
                None,
                Some(d),
                Some(decision(Reason::ScaleFailed, Some(3))),
                Some(orig(d, 3)),
            ),
            // Kept across reconciles, whatever the target has since.
            (
                Some(orig(d, 2)),
                Some(d),
                Some(decision(Reason::ScaledDown, Some(9))),
                Some(orig(d, 2)),
            ),
            // Kept while the queue cannot be read (no decision this time).
            (Some(orig(d, 2)), Some(d), None, Some(orig(d, 2))),
            // Not taken: no target, unreadable, or an HPA owns it.
            (
                None,
                Some(d),
                Some(decision(Reason::TargetNotFound, None)),
                None,
            ),
            (
                None,
                Some(d),
                Some(decision(Reason::ScaleFailed, None)),
                None,
            ),
            (
                None,
                Some(d),
                Some(decision(Reason::HpaConflict, Some(4))),
                None,
            ),
            (None, Some(d), None, None),
            // Another target starts afresh; no workers, nothing kept.
            (
                Some(orig("Deployment/old", 2)),
                Some(d),
                Some(decision(Reason::Steady, Some(6))),
                Some(orig(d, 6)),
            ),
            (Some(orig("Deployment/old", 2)), Some(d), None, None),
            (Some(orig(d, 2)), None, None, None),
        ];
        for (i, (prev, target, decision, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                original_replicas(prev.as_ref(), target, decision.as_ref()),
                want,
                "case #{i}"
            );
        }
    }

    #[test]
    fn a_write_that_could_replace_a_record_it_did_not_see_is_conditional() {
        let d = "Deployment/worker";
        let cases = [
            // (workers, the copy's record, the record written) => conditional
            // The copy's own record, written back: nothing it has not seen is at stake.
            (true, Some(orig(d, 2)), Some(orig(d, 2)), false),
            // A new record: the copy may be older than a record already written.
            (true, None, Some(orig(d, 5)), true),
            (
                true,
                Some(orig("Deployment/old", 2)),
                Some(orig(d, 5)),
                true,
            ),
            // None written (an HPA, no target, the queue unreadable): it would drop one.
            (true, None, None, true),
            (true, Some(orig(d, 2)), None, true),
            // Without workers a record is dropped on purpose.
            (false, Some(orig(d, 2)), None, false),
            (false, None, None, false),
        ];
        for (i, (workers, prev, new, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                guards_record(workers, prev.as_ref(), new.as_ref()),
                want,
                "case #{i}"
            );
        }
    }

    #[test]
    fn a_refused_write_keeps_the_record_the_queue_has() {
        let d = "Deployment/worker";
        let cases = [
            // (the queue's record, ours, target) => written
            // Recorded by an earlier reconcile: kept, never replaced by a later count.
            (
                Some(orig(d, 2)),
                Some(orig(d, 5)),
                Some(d),
                Some(orig(d, 2)),
            ),
            (Some(orig(d, 2)), None, Some(d), Some(orig(d, 2))),
            // None yet, or another target's: ours.
            (None, Some(orig(d, 5)), Some(d), Some(orig(d, 5))),
            (
                Some(orig("Deployment/old", 2)),
                Some(orig(d, 5)),
                Some(d),
                Some(orig(d, 5)),
            ),
            (Some(orig("Deployment/old", 2)), None, Some(d), None),
            // Without workers, none.
            (Some(orig(d, 2)), None, None, None),
        ];
        for (i, (theirs, ours, target, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                kept_original(theirs.as_ref(), ours, target),
                want,
                "case #{i}"
            );
        }
    }

    #[test]
    fn only_a_target_the_operator_was_scaling_is_touched() {
        use crate::controller::status::{Status, condition, types};
        let now = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let with = |status: Status, reason: &str| JobQueueStatus {
            conditions: vec![condition(types::SCALING, status, reason, "m", Some(1), now)],
            ..JobQueueStatus::default()
        };
        let cases = [
            (Some(with(Status::True, "ScaledUp")), true),
            (Some(with(Status::True, "Steady")), true),
            (Some(with(Status::Unknown, "RedisUnreachable")), true),
            (Some(with(Status::False, "ScaleFailed")), true),
            (Some(with(Status::False, "HPAConflict")), false),
            (Some(with(Status::False, "TargetNotFound")), false),
            (Some(JobQueueStatus::default()), true),
            (None, true),
        ];
        for (status, want) in cases {
            assert_eq!(was_scaling(status.as_ref()), want, "{status:?}");
        }
    }

    #[test]
    fn the_note_says_where_the_keys_are_and_what_became_of_the_target() {
        let t = Some("Deployment/worker");
        let note = deleted_note("jq", "emails", t, Some(Scale { from: 7, to: 2 }));
        assert_eq!(
            note,
            "JobQueue deleted: the Redis keys were left in place (jq:{emails}:*, prefix \"jq\", \
             hash tag \"emails\"); `jobqueue` commands still reach them; Deployment/worker \
             scaled from 7 to 2 replicas"
        );
        for (action, tail) in [
            (
                Some(OnDeleteAction::Keep),
                "Deployment/worker left as it is (onDelete: keep)",
            ),
            (
                Some(Leave {
                    replicas: 0,
                    why: AlreadyThere,
                }),
                "Deployment/worker already at 0 replicas",
            ),
            (
                Some(Leave {
                    replicas: 6,
                    why: NoOriginal,
                }),
                "Deployment/worker left at 6 replicas: no original count was recorded to restore",
            ),
            (
                Some(TargetGone),
                "Deployment/worker not found: nothing to scale",
            ),
            (
                Some(NotScaling),
                "Deployment/worker left as it is: the operator was not scaling it (see the \
                 Scaling condition)",
            ),
        ] {
            let note = deleted_note("jq", "emails", t, action);
            assert!(note.ends_with(tail), "{note}");
        }
        assert!(deleted_note("jq", "e", None, None).ends_with("; no workers to scale"));
    }
}
