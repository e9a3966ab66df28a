//! One tuning run of an `auto` visibility timeout against a queue (the rule itself is
//! the pure [`super::auto_visibility::decide`]): the turn, the window of snapshots kept in
//! `meta`, the decision and its record. Run by the workers' reapers and the operator.

use std::time::Duration;

use super::auto_visibility::{
    Inputs, Owner, Snapshot, Timing, Tuned, TuningState, VisibilityRecord, decide, fields,
    keep_recent, set_fields, windows,
};
use super::client::Queue;
use super::error::Result;
use super::settings::QueueSettings;

/// Tune `queue` once, as `writer` (`operator`, or `reaper:<worker>`), when its mode is
/// `auto`, the writer is its owner, and no other writer has the tuning turn (taken for
/// `timing.interval`). `None` when it did not run. The snapshots are written each run;
/// the value, `visibility_set_by`, `_set_at` and `_reason` only when the value changes.
pub async fn tune(queue: &Queue, writer: &str, timing: &Timing) -> Result<Option<Tuned>> {
    let meta = queue.meta_fields().await?;
    let record = VisibilityRecord::from_fields(&meta);
    let Some(bounds) = record.auto else {
        return Ok(None);
    };
    let as_operator = writer == "operator";
    if (record.owner == Owner::Operator) != as_operator {
        return Ok(None);
    }
    if !queue.take_tuning_turn(writer, timing.interval).await? {
        return Ok(None);
    }
    let stats = queue.stats().await?;
    let now = queue.now_ms().await?;
    let current = QueueSettings::from_fields(&meta).visibility_timeout;
    let mut state: TuningState = meta
        .get(fields::STATE)
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    state.snapshots.retain(|s| s.at_ms <= now);
    state.snapshots.push(Snapshot::of(&stats, now));
    keep_recent(&mut state.snapshots, now, timing.stabilization);
    let recent = windows(&state.snapshots);
    let since_change = record.set_at_ms.map_or(Duration::MAX, |at| {
        Duration::from_millis(now.saturating_sub(at).max(0) as u64)
    });
    let decision = decide(&Inputs {
        current,
        bounds,
        renewal_floor: timing.renewal_floor,
        recent: &recent,
        since_change,
        stabilization: timing.stabilization,
    });
    let mut write = vec![(
        fields::STATE,
        serde_json::to_string(&state).unwrap_or_default(),
    )];
    if decision.changes(current) {
        write.push((
            "visibility_timeout_ms",
            decision.value.as_millis().to_string(),
        ));
        write.extend(set_fields(writer, now, &decision.reason.to_string()));
    }
    queue.write_meta(&write).await?;
    Ok(Some(Tuned {
        from: current,
        decision,
        at_ms: now,
    }))
}
