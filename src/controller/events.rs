//! The Events a reconcile raises, built by pure functions from the previous status and
//! what the reconcile saw: what changed and needs a person's attention, not every
//! reconcile. The reconciler publishes them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::{Event, EventType};

use super::scaling::{Decision, Reason};
use super::status::{self, Observation, reasons};
use crate::crd::JobQueueStatus;

/// One Event to publish: its type, its reason and its note (the words for a person).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub kind: EventType,
    pub reason: &'static str,
    pub note: String,
}

impl EventSpec {
    pub fn normal(reason: &'static str, note: String) -> EventSpec {
        EventSpec {
            kind: EventType::Normal,
            reason,
            note,
        }
    }

    pub fn warning(reason: &'static str, note: String) -> EventSpec {
        EventSpec {
            kind: EventType::Warning,
            reason,
            note,
        }
    }

    /// As kube's Event, its note cut to the API's limit.
    pub fn to_event(&self) -> Event {
        Event {
            type_: self.kind,
            reason: self.reason.to_string(),
            note: Some(truncate_note(self.note.clone())),
            action: "Reconcile".to_string(),
            secondary: None,
        }
    }
}

/// The Events of the scaler: a Normal one on each scale; a Warning when it stops
/// scaling (a missing target, an HPA, a ScaledObject, another JobQueue, a failure, the
/// fallback), once, not on every reconcile. A pause is a person's choice: a Normal Event
/// as it starts (and on each scale to the paused replicas), and one as it ends.
pub fn scaling_events(prev: Option<&JobQueueStatus>, decision: &Decision) -> Vec<EventSpec> {
    let reason = decision.reason;
    let was = prev
        .and_then(|p| p.condition(status::types::SCALING))
        .map(|c| c.reason.as_str());
    let mut events = Vec::new();
    let held = [
        Reason::Paused,
        Reason::PausedReplicas,
        Reason::InvalidPauseAnnotation,
    ];
    let was_paused = held.iter().any(|r| was == Some(r.as_str()));
    if was_paused && !held.contains(&reason) {
        events.push(EventSpec::normal(
            RESUMED,
            format!(
                "scaling resumed (no pause annotation): {}",
                decision.message
            ),
        ));
    }
    let news = was != Some(reason.as_str());
    if reason.scales() {
        events.push(EventSpec::normal(reason.as_str(), decision.message.clone()));
    } else if reason.is_pause() {
        if news || decision.patch().is_some() {
            events.push(EventSpec::normal(reason.as_str(), decision.message.clone()));
        }
    } else if !reason.is_scaling() && (news || decision.patch().is_some()) {
        events.push(EventSpec::warning(
            reason.as_str(),
            decision.message.clone(),
        ));
    }
    events
}

/// The reason of the Event that says a pause was lifted.
pub const RESUMED: &str = "ScalingResumed";

/// The reason of the Event for each change of an `auto` visibility timeout.
pub const VISIBILITY_CHANGED: &str = "VisibilityTimeoutChanged";

/// The Events a successful reconcile raises, from the previous status and the new one.
pub fn success_events(
    prev: Option<&JobQueueStatus>,
    new: &JobQueueStatus,
    obs: &Observation,
) -> Vec<EventSpec> {
    let mut events = Vec::new();
    // Each change the operator made to an `auto` visibility timeout, with its reason.
    if let Some(v) = &obs.visibility
        && let Some(from) = v.changed_from
    {
        events.push(EventSpec::normal(
            VISIBILITY_CHANGED,
            format!(
                "visibility timeout {} -> {}: {}",
                crate::duration::format(from),
                crate::duration::format(v.current),
                v.reason
            ),
        ));
    }
    // Once, as ids start sitting in the orphans set, on first sight too (a live count,
    // not a total); the `JobsOrphaned` condition says while it lasts.
    let was_orphaned = prev
        .and_then(|p| p.condition(status::types::JOBS_ORPHANED))
        .is_some_and(|c| c.status == "True");
    if new.orphaned > 0 && !was_orphaned {
        events.push(EventSpec::warning(
            reasons::ORPHANED_JOBS,
            status::orphaned_message(new.orphaned),
        ));
    }
    let Some(prev) = prev else {
        return events;
    };
    let was_ready = prev
        .condition(status::types::READY)
        .map(|c| c.status.as_str());
    // Ready only: a queue reaped with its last good spec is reaped, not recovered.
    let is_ready = new
        .condition(status::types::READY)
        .map(|c| c.status.as_str());
    if was_ready == Some("False") && is_ready == Some("True") {
        events.push(EventSpec::normal(
            "Recovered",
            format!("queue {} is healthy again", obs.queue),
        ));
    }
    // A shrink finished draining: once, as the condition turns True.
    fn drained(s: &JobQueueStatus) -> Option<&Condition> {
        s.condition(status::types::PARTITIONS_DRAINED)
            .filter(|c| c.status == "True")
    }
    if let (None, Some(c)) = (drained(prev), drained(new)) {
        events.push(EventSpec::normal(reasons::DRAINED, c.message.clone()));
    }
    // Totals grew since counts were last seen (not since a failure wrote zeros).
    let counted = status::has_counts(prev);
    if counted && new.dead_lettered > prev.dead_lettered {
        events.push(EventSpec::warning(
            "DeadLettered",
            format!(
                "{} jobs moved to the dead-letter set since the last check ({} dead now)",
                new.dead_lettered - prev.dead_lettered,
                new.dead
            ),
        ));
    }
    if counted && new.stale_acks > prev.stale_acks {
        events.push(EventSpec::warning(
            reasons::STALE_ACKS,
            format!(
                "{} acks arrived after their lease had expired: jobs run longer than \
                 visibilityTimeout ({})",
                new.stale_acks - prev.stale_acks,
                crate::duration::format(obs.visibility_timeout)
            ),
        ));
    }
    events
}

/// Event notes are limited to 1 kB.
pub fn truncate_note(mut note: String) -> String {
    if note.len() > 1000 {
        let mut end = 1000;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push('…');
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::status::Failure;

    #[test]
    fn events_follow_what_changed() {
        use k8s_openapi::jiff::Timestamp;
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let obs = |dead_lettered: u64| Observation {
            endpoint: "redis://r:6379".into(),
            queue: "jq:{a}".into(),
            stats: crate::queue::QueueStats {
                dead_lettered,
                dead: dead_lettered,
                ..Default::default()
            },
            ..Observation::default()
        };
        let reasons = |prev: Option<&JobQueueStatus>, o: &Observation| -> Vec<&'static str> {
            let new = status::observed(prev, Some(1), o, now);
            success_events(prev, &new, o)
                .into_iter()
                .map(|event| event.reason)
                .collect()
        };
        // A first sight raises nothing, whatever the totals.
        assert!(reasons(None, &obs(7)).is_empty());
        let seen = status::observed(None, Some(1), &obs(7), now);
        assert!(reasons(Some(&seen), &obs(7)).is_empty());
        assert_eq!(reasons(Some(&seen), &obs(9)), vec!["DeadLettered"]);
        // After a failure: recovered, and the totals compare with the last counts.
        let down = Failure {
            reason: reasons::REDIS_UNREACHABLE,
            message: "down".into(),
            redis_reached: false,
        };
        let failed = status::failed(Some(&seen), Some(1), &down, now);
        assert_eq!(reasons(Some(&failed), &obs(7)), vec!["Recovered"]);
        // A status only ever written by failures is no baseline.
        let never_counted = status::failed(None, Some(1), &down, now);
        assert_eq!(reasons(Some(&never_counted), &obs(7)), vec!["Recovered"]);
    }

    #[test]
    fn each_change_of_an_auto_visibility_timeout_is_an_event() {
        use k8s_openapi::jiff::Timestamp;
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let obs = |changed_from: Option<u64>| Observation {
            queue: "jq:{a}".into(),
            visibility: Some(status::VisibilityObserved {
                current: std::time::Duration::from_secs(40),
                reason: "raised to p99 20s × margin 2".into(),
                set_by: Some("operator".into()),
                set_at_ms: Some(1_700_000_000_000),
                changed_from: changed_from.map(std::time::Duration::from_secs),
            }),
            ..Observation::default()
        };
        let o = obs(Some(10));
        let new = status::observed(None, Some(1), &o, now);
        let events = success_events(None, &new, &o);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, VISIBILITY_CHANGED);
        assert_eq!(
            events[0].note,
            "visibility timeout 10s -> 40s: raised to p99 20s × margin 2"
        );
        let v = new.visibility.unwrap();
        assert_eq!(
            (v.current.as_str(), v.set_by.as_deref()),
            ("40s", Some("operator"))
        );
        assert_eq!(
            v.since,
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now))
        );
        let held = obs(None);
        let again = status::observed(None, Some(1), &held, now);
        assert!(success_events(None, &again, &held).is_empty());
    }

    #[test]
    fn orphans_raise_one_warning_while_they_last() {
        use k8s_openapi::jiff::Timestamp;
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let obs = |orphaned: u64| Observation {
            queue: "jq:{a}".into(),
            stats: crate::queue::QueueStats {
                orphaned,
                ..Default::default()
            },
            ..Observation::default()
        };
        let step = |prev: Option<&JobQueueStatus>, orphaned: u64| {
            let o = obs(orphaned);
            let new = status::observed(prev, Some(1), &o, now);
            let events = success_events(prev, &new, &o);
            (new, events)
        };
        // Seen at the first reconcile: a Warning that says what to do.
        let (first, events) = step(None, 3);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].kind, EventType::Warning);
        assert_eq!(events[0].reason, "OrphanedJobs");
        assert!(events[0].note.starts_with("3 job ids are set aside"));
        assert!(
            events[0]
                .note
                .contains("jobqueue dead purge --orphans --yes")
        );
        // Still there (more of them): nothing new.
        let (more, events) = step(Some(&first), 5);
        assert!(events.is_empty(), "{events:?}");
        // Put back by the reaper, then new ones: a new Warning.
        let (clear, events) = step(Some(&more), 0);
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(step(Some(&clear), 1).1[0].reason, "OrphanedJobs");
        // None at all: nothing.
        assert!(step(None, 0).1.is_empty());
    }

    #[test]
    fn scaling_raises_events_on_scales_and_on_new_trouble() {
        use crate::controller::scaling::Reason;
        use k8s_openapi::jiff::Timestamp;
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let decision = |reason: Reason| Decision {
            reason,
            current: Some(2),
            desired: Some(4),
            message: format!("{} message", reason.as_str()),
        };
        let after = |prev: Option<&JobQueueStatus>, reason: Reason| {
            let mut s = prev.cloned().unwrap_or_default();
            status::scaled(&mut s, Some(&decision(reason)), Some(1), now);
            s
        };
        let events = |prev: Option<&JobQueueStatus>, reason: Reason| -> Vec<(String, &str)> {
            scaling_events(prev, &decision(reason))
                .into_iter()
                .map(|event| (format!("{:?}", event.kind), event.reason))
                .collect()
        };
        // Every scale, even a repeated one.
        let up = after(None, Reason::ScaledUp);
        assert_eq!(
            events(Some(&up), Reason::ScaledUp),
            vec![("Normal".into(), "ScaledUp")]
        );
        assert_eq!(
            events(Some(&up), Reason::ScaledDown),
            vec![("Normal".into(), "ScaledDown")]
        );
        // Holding raises nothing.
        for quiet in [
            Reason::Steady,
            Reason::Stabilizing,
            Reason::AtMinReplicas,
            Reason::AtMaxReplicas,
        ] {
            assert!(events(Some(&up), quiet).is_empty(), "{quiet:?}");
        }
        // Trouble: once when it starts, not again while it lasts.
        for trouble in [
            Reason::TargetNotFound,
            Reason::HpaConflict,
            Reason::ScaleFailed,
        ] {
            assert_eq!(
                events(Some(&up), trouble),
                vec![("Warning".into(), trouble.as_str())]
            );
            assert_eq!(
                events(None, trouble),
                vec![("Warning".into(), trouble.as_str())]
            );
            let lasting = after(Some(&up), trouble);
            assert!(events(Some(&lasting), trouble).is_empty(), "{trouble:?}");
        }
    }

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        let note = truncate_note("é".repeat(600));
        assert!(note.len() <= 1003 && note.ends_with('…'));
        assert_eq!(truncate_note("short".into()), "short");
    }

    /// The Events of pausing, resuming and the fallback: (previous reason, decision's
    /// reason, whether it patches) → the Events' (type, reason).
    #[test]
    fn pause_and_fallback_events_from_a_table() {
        use crate::controller::scaling::Reason as R;
        use k8s_openapi::jiff::Timestamp;
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let decision = |reason: R, patches: bool| Decision {
            reason,
            current: Some(1),
            desired: Some(if patches { 3 } else { 1 }),
            message: "m".into(),
        };
        let prev_with = |reason: Option<R>| {
            let mut s = JobQueueStatus::default();
            if let Some(r) = reason {
                status::scaled(&mut s, Some(&decision(r, false)), Some(1), now);
            }
            s
        };
        let (n, w) = ("Normal", "Warning");
        type Row = (Option<R>, R, bool, Vec<(&'static str, &'static str)>);
        #[rustfmt::skip]
        let rows: Vec<Row> = vec![
            (Some(R::Steady), R::Paused, false, vec![(n, "Paused")]),
            (Some(R::Paused), R::Paused, false, vec![]),
            (Some(R::Steady), R::PausedReplicas, true, vec![(n, "PausedReplicas")]),
            (Some(R::PausedReplicas), R::PausedReplicas, false, vec![]),
            // Someone scaled it by hand: held again, and said so.
            (Some(R::PausedReplicas), R::PausedReplicas, true, vec![(n, "PausedReplicas")]),
            (Some(R::Paused), R::PausedReplicas, true, vec![(n, "PausedReplicas")]),
            (Some(R::Paused), R::Steady, false, vec![(n, "ScalingResumed")]),
            (Some(R::PausedReplicas), R::ScaledUp, true, vec![(n, "ScalingResumed"), (n, "ScaledUp")]),
            (Some(R::InvalidPauseAnnotation), R::Steady, false, vec![(n, "ScalingResumed")]),
            (Some(R::Steady), R::InvalidPauseAnnotation, false, vec![(w, "InvalidPauseAnnotation")]),
            (Some(R::InvalidPauseAnnotation), R::InvalidPauseAnnotation, false, vec![]),
            (None, R::Fallback, true, vec![(w, "Fallback")]),
            (Some(R::Steady), R::Fallback, true, vec![(w, "Fallback")]),
            (Some(R::Fallback), R::Fallback, false, vec![]),
            (Some(R::Fallback), R::Fallback, true, vec![(w, "Fallback")]),
            (Some(R::Fallback), R::Steady, false, vec![]),
            (Some(R::Steady), R::ScaledObjectConflict, false, vec![(w, "ScaledObjectConflict")]),
            (Some(R::ScaledObjectConflict), R::ScaledObjectConflict, false, vec![]),
            (Some(R::Steady), R::TargetOwnedByAnother, false, vec![(w, "TargetOwnedByAnother")]),
            (Some(R::TargetOwnedByAnother), R::TargetOwnedByAnother, false, vec![]),
        ];
        for (was, reason, patches, want) in rows {
            let prev = prev_with(was);
            let got: Vec<(&str, &str)> = scaling_events(Some(&prev), &decision(reason, patches))
                .iter()
                .map(|e| {
                    let kind = match e.kind {
                        EventType::Normal => "Normal",
                        EventType::Warning => "Warning",
                    };
                    (kind, e.reason)
                })
                .collect();
            assert_eq!(got, want, "{was:?} → {reason:?}, patches {patches}");
        }
    }
}
