//! One reconcile of one `JobQueue`: the pipeline, and its writes. Each step's logic
//! lives in a module of its own:
//!
//! 1. **validate** the spec into a plan ([`validate::plan`], pure). An invalid
//!    `spec.workers` leaves the rest in force: reaped and counted, not scaled
//!    (`SpecValid=False, reason InvalidWorkers`). A spec invalid as a whole is reaped with
//!    the queue's last good plan (`reason LastGoodSpec`); with none (the operator started
//!    since), it is reported as `Ready=False, reason InvalidSpec` and waits for the next
//!    spec change;
//! 2. **read** the Secrets the plan names ([`cluster_reads::resolve_endpoint`]) and
//!    connect (one client per endpoint, shared:
//!    [`RedisPool`](super::redis_pool::RedisPool));
//! 3. **Redis upkeep**: check the queue's keys' types, write its settings into `meta`,
//!    reap expired leases within a budget, read its stats: one round trip when `meta`
//!    is current and nothing has expired ([`Queue::maintain`]);
//! 4. **scale** the workers (with `spec.workers`): read the target's `/scale` and the
//!    namespace's HorizontalPodAutoscalers ([`cluster_reads::target_state`]), decide
//!    ([`scaling::decide`], pure), patch the scale only when the replicas must change;
//! 5. **decide** the status ([`status`], pure, from the previous status and what was
//!    seen) and the Events worth a person's attention ([`events`], pure);
//! 6. **write** the status only when it changed (server-side apply), then publish the
//!    Events; requeue after `reaper.interval`.
//!
//! A failure in 2 or 3 becomes a condition with a reason and a message
//! ([`failures`](super::failures), never a secret), a Warning Event, and a backoff for
//! this queue alone; after `workers.fallback.failureThreshold` of them in a row the
//! target is held at the fallback's replicas. A failure in 4 (a missing target, an HPA,
//! a KEDA ScaledObject or an older JobQueue on it, a refused patch) is the `Scaling`
//! condition's reason: the rest of the reconcile goes on. The pause annotations
//! ([`pause`]) hold the target in 4 instead of the backlog.
//!
//! The pipeline runs behind the finalizer `jobqueue.dev/cleanup` (kube's `finalizer`
//! helper), added on the first reconcile: a deleted queue waits for its cleanup (the
//! worker target set as `spec.workers.onDelete` says, a `QueueDeleted` Event, the queue
//! forgotten; its Redis keys left in place), decided by [`lifecycle`].

use std::sync::Arc;

use futures::StreamExt;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::finalizer::{self, Event as FinalizerEvent, finalizer};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::events::{self, EventSpec};
use super::failures::{classify, kube_reason};
use super::metrics::QueueLabels;
use super::partitions::{self, PartitionObservation};
use super::scaling::{self, Backlog, Decision, Hold, ScalePolicy, TargetRef, TargetState};
use super::status::{self, Failure, Observation, SpecVerdict, VisibilityObserved, reasons};
use super::validate::{self, InvalidSpec, QueuePlan};
use super::{
    Context, Error, FIELD_MANAGER, Result, caches, cluster_reads, lifecycle, ownership, pause,
};
use crate::crd::{API_VERSION, JobQueue, JobQueueStatus, OnDelete, OriginalReplicas, WorkersSpec};
use crate::queue::auto_visibility::{self, AutoBounds, Owner, VisibilityRecord};
use crate::queue::{Queue, QueueSettings, QueueStats, ReapOutcome};

/// Reconcile one JobQueue: through the finalizer [`lifecycle::FINALIZER`], the pipeline
/// (`apply`) while the queue exists, the cleanup once it is deleted.
pub async fn reconcile(jq: Arc<JobQueue>, ctx: Arc<Context>) -> Result<Action> {
    let ns = jq
        .namespace()
        .ok_or_else(|| Error::NoNamespace(jq.name_any()))?;
    let api: Api<JobQueue> = Api::namespaced(ctx.client.clone(), &ns);
    let adds_finalizer = !lifecycle::has_finalizer(&jq) && jq.metadata.deletion_timestamp.is_none();
    let action = finalizer(&api, lifecycle::FINALIZER, jq.clone(), |event| {
        let ctx = ctx.clone();
        async move {
            match event {
                FinalizerEvent::Apply(jq) => apply(jq, ctx).await,
                FinalizerEvent::Cleanup(jq) => cleanup(jq, ctx).await,
            }
        }
    })
    .await;
    let action = match action {
        // The copy reconciled was older than the finalizer: a reconcile of a related
        // object (a Secret created, say) ran on the cached JobQueue read before the
        // previous reconcile added it, so the patch's test of `/metadata/finalizers`
        // failed (422, or 409). Nothing is wrong: read the queue again and go on with it,
        // instead of waiting out a failure's backoff.
        Err(finalizer::Error::AddFinalizer(kube::Error::Api(status)))
            if status.is_invalid() || status.is_conflict() =>
        {
            let fresh = api.get(&jq.name_any()).await.map_err(Error::Kube)?;
            if lifecycle::has_finalizer(&fresh) && fresh.metadata.deletion_timestamp.is_none() {
                return apply(Arc::new(fresh), ctx).await;
            }
            return Ok(Action::requeue(std::time::Duration::from_secs(1)));
        }
        other => other,
    };
    let action = action.map_err(|e| match e {
        finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
        finalizer::Error::AddFinalizer(e) | finalizer::Error::RemoveFinalizer(e) => Error::Kube(e),
        other => Error::Finalizer(other.to_string()),
    })?;
    if adds_finalizer {
        // The finalizer was added, which changes no generation: its watch event will not
        // bring the queue back, so the pipeline runs now, on the object as read.
        return apply(jq, ctx).await;
    }
    Ok(action)
}

/// The queue was deleted: set its worker target as `spec.workers.onDelete` says, leave its
/// Redis keys, say so in a Normal Event and forget the queue (see [`lifecycle`]). An error
/// (a refused scale patch) keeps the finalizer, and the cleanup is tried again.
async fn cleanup(jq: Arc<JobQueue>, ctx: Arc<Context>) -> Result<Action> {
    let q = Subject::new(&jq, &ctx)?;
    let workers = jq.spec.workers.as_ref();
    let target = workers.map(|w| {
        TargetRef::parse(
            &w.scale_target_ref.api_version,
            &w.scale_target_ref.kind,
            &w.scale_target_ref.name,
        )
    });
    let action = match (workers, &target) {
        (Some(w), Some(Ok(target))) => Some(on_delete_scale(&ctx, &q, w, target).await?),
        _ => None,
    };
    // An invalid target was never scaled: it is left as it is.
    let target_name =
        workers.map(|w| format!("{}/{}", w.scale_target_ref.kind, w.scale_target_ref.name));
    let note = lifecycle::deleted_note(
        &jq.spec.key_prefix,
        &jq.spec.hash_tag,
        target_name.as_deref(),
        action,
    );
    info!(namespace = %q.ns, name = %q.name, note = %note, "queue deleted");
    publish(
        &ctx.recorder,
        &jq,
        &EventSpec::normal(lifecycle::QUEUE_DELETED, note),
    )
    .await;
    ctx.forget(&jq);
    Ok(Action::await_change())
}

/// Read the target's replicas and set them as `onDelete` says; a target already gone
/// is left alone (`TargetGone`).
async fn on_delete_scale(
    ctx: &Context,
    q: &Subject<'_>,
    workers: &WorkersSpec,
    target: &TargetRef,
) -> Result<lifecycle::OnDeleteAction> {
    let original = q
        .prev
        .and_then(|s| s.original_replicas.as_ref())
        .filter(|o| o.target == target.to_string())
        .map(|o| o.replicas);
    if workers.on_delete != OnDelete::Keep && !lifecycle::was_scaling(q.prev) {
        // Another owner (an HPA) has it, or it was missing: not the operator's to set.
        return Ok(lifecycle::OnDeleteAction::NotScaling);
    }
    let current = if workers.on_delete == OnDelete::Keep {
        // Nothing to change: no need to read it.
        None
    } else {
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &q.ns, &target.api_resource());
        match api.get_scale(&target.name).await {
            Ok(scale) => Some(scale.spec.and_then(|s| s.replicas).unwrap_or(0)),
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => return Err(Error::Kube(e)),
        }
    };
    let action = lifecycle::on_delete(workers.on_delete, original, current);
    match action {
        lifecycle::OnDeleteAction::Scale { from, to } => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), &q.ns, &target.api_resource());
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            let patch = serde_json::json!({ "spec": { "replicas": to } });
            api.patch_scale(&target.name, &params, &Patch::Merge(&patch))
                .await
                .map_err(|e| {
                    warn!(
                        namespace = %q.ns,
                        name = %q.name,
                        target = %target,
                        error = %kube_reason(&e),
                        "cannot scale the workers of a deleted queue"
                    );
                    Error::Kube(e)
                })?;
            info!(namespace = %q.ns, name = %q.name, target = %target, from, to, "scaled the workers of a deleted queue");
        }
        lifecycle::OnDeleteAction::TargetGone => {
            info!(namespace = %q.ns, name = %q.name, target = %target, "the workers of a deleted queue are gone");
        }
        lifecycle::OnDeleteAction::Keep
        | lifecycle::OnDeleteAction::Leave { .. }
        | lifecycle::OnDeleteAction::NotScaling => {}
    }
    Ok(action)
}

/// The pipeline of a queue that exists (the finalizer's `Apply`).
async fn apply(jq: Arc<JobQueue>, ctx: Arc<Context>) -> Result<Action> {
    let mut q = Subject::new(&jq, &ctx)?;
    let _timer = ctx.metrics.reconcile_started(&q.labels);

    // 1. Validate; a spec invalid as a whole falls back on the last good plan.
    let (plan, verdict) = match validate::plan(&jq.spec) {
        Ok(plan) => {
            ctx.remember_plan(&jq, &plan);
            let verdict = match &plan.invalid_workers {
                Some(problem) => SpecVerdict::InvalidWorkers(problem.to_string()),
                None => SpecVerdict::Valid,
            };
            (plan, verdict)
        }
        Err(invalid) => match ctx.last_good_plan(&jq) {
            Some(good) => {
                let verdict = SpecVerdict::LastGood {
                    problem: invalid.to_string(),
                    generation: good.generation,
                };
                // Reaping only: the workers of an earlier spec are not scaled.
                let plan = QueuePlan {
                    workers: None,
                    ..good.plan
                };
                (plan, verdict)
            }
            None => {
                q.verdict = Some(SpecVerdict::Invalid(invalid.to_string()));
                return invalid_spec(&ctx, &q, &invalid).await;
            }
        },
    };
    q.verdict = Some(verdict.clone());
    if let SpecVerdict::InvalidWorkers(problem) | SpecVerdict::LastGood { problem, .. } = &verdict {
        warn!(namespace = %q.ns, name = %q.name, error = %problem, "spec partly in force");
    }

    // 2 and 3. Read the Secrets, connect, Redis upkeep.
    let obs = match observe(&ctx, &q.ns, &plan, q.prev).await {
        Ok(obs) => obs,
        Err(failure) => {
            let status = status::failed(q.prev, q.generation, &failure, q.now);
            if let Some(decision) = fallback_workers(&ctx, &q, &plan).await {
                report_fallback(&ctx, &q, status, &failure, &decision).await?;
                return Err(Error::Unavailable(failure));
            }
            report_setback(
                &ctx,
                &q,
                Setback {
                    status,
                    reason: failure.reason,
                    scaling: "not scaling while the queue cannot be read: the replicas are \
                              left as they are",
                    note: failure.message.clone(),
                },
            )
            .await?;
            return Err(Error::Unavailable(failure));
        }
    };
    ctx.readable(&jq);

    // 4. Scale the workers.
    let mut rate = None;
    let scaling = match &plan.workers {
        Some(policy) => {
            let (decision, verdict) =
                scale_workers(&ctx, &q, policy, plan.settings.rate_limit, &obs.stats).await;
            rate = verdict;
            Some(decision)
        }
        None => {
            // Kept while spec.workers is only refused for now (see SpecVerdict).
            if jq.spec.workers.is_none() {
                ctx.forget_recommendations(&jq);
            }
            None
        }
    };

    // 5. Decide the status and the Events.
    let mut new = status::observed(q.prev, q.generation, &obs, q.now);
    status::scaled(&mut new, scaling.as_ref(), q.generation, q.now);
    status::rate_limited(
        &mut new,
        plan.settings.rate_limit,
        plan.workers.is_some(),
        rate.as_ref(),
        q.generation,
        q.now,
    );
    let has_workers = jq.spec.workers.is_some();
    status::spec_checked(&mut new, &verdict, has_workers, q.generation, q.now);
    status::keep_transition_times(q.prev, &mut new);
    new.original_replicas = lifecycle::original_replicas(
        q.record().0.as_ref(),
        spec_target(&jq).as_deref(),
        scaling.as_ref(),
    );
    let notes = events::success_events(q.prev, &new, &obs);
    let scale_notes = match &scaling {
        Some(decision) => events::scaling_events(q.prev, decision),
        None => Vec::new(),
    };

    // 6. Write the status (counts alone at most every --status-interval), count, publish.
    ctx.metrics.outcome(&q.labels, &new, Some(q.now));
    if ctx.status_write(&jq, q.prev, &new, q.now).writes() {
        write_status(&q, &new).await?;
        ctx.status_written(&jq, q.now);
    }
    ctx.metrics.observed(&q.labels, &obs.stats, &obs.reaped);
    ctx.metrics.visibility(&q.labels, obs.visibility_timeout);
    ctx.metrics.partitions(&q.labels, new.partitions.as_ref());
    ctx.metrics.replicas(
        &q.labels,
        scaling.as_ref().and_then(|d| d.desired),
        scaling.as_ref().and_then(|d| d.replicas_after()),
    );
    ctx.succeeded(&jq);
    match verdict {
        SpecVerdict::InvalidWorkers(_) => {
            ctx.metrics.reconcile_failed(&q.labels, "invalid_workers")
        }
        SpecVerdict::LastGood { .. } => ctx.metrics.reconcile_failed(&q.labels, "invalid_spec"),
        SpecVerdict::Valid | SpecVerdict::Invalid(_) => {}
    }
    if obs.reaped.requeued + obs.reaped.dead_lettered > 0 {
        info!(
            namespace = %q.ns,
            name = %q.name,
            requeued = obs.reaped.requeued,
            dead_lettered = obs.reaped.dead_lettered,
            "reaped expired leases"
        );
    }
    for note in &notes {
        publish(&ctx.recorder, &jq, note).await;
    }
    publish_spec_warning(&ctx, &q, &new).await;
    let scaled = scaling.as_ref().is_some_and(|d| d.patch().is_some());
    for note in &scale_notes {
        if scaled {
            // Each scale is news of its own (see Context::fresh_recorder).
            publish(&ctx.fresh_recorder(), &jq, note).await;
        } else {
            publish(&ctx.recorder, &jq, note).await;
        }
    }
    debug!(namespace = %q.ns, name = %q.name, pending = new.pending, "reconciled");
    Ok(Action::requeue(plan.interval))
}

/// The queue being reconciled, as every step sees it.
struct Subject<'a> {
    jq: &'a JobQueue,
    ns: String,
    name: String,
    labels: QueueLabels,
    /// Where its status goes.
    api: Api<JobQueue>,
    /// The status as the object has it.
    prev: Option<&'a JobQueueStatus>,
    generation: Option<i64>,
    /// The reconcile's time, for every condition it writes.
    now: Timestamp,
    /// What validation made of the spec, once it ran: every status written says it.
    verdict: Option<SpecVerdict>,
    /// The `originalReplicas` record as written or found on the API server before a
    /// scale ([`record_before_scaling`]), newer than the copy's.
    recorded: std::sync::Mutex<Option<Recorded>>,
}

/// A record of `originalReplicas` the queue has on the API server, and the queue's
/// `resourceVersion` where it was seen.
#[derive(Clone)]
struct Recorded {
    record: OriginalReplicas,
    version: Option<String>,
}

impl<'a> Subject<'a> {
    /// The queue's record as this reconcile knows it, and the version it knows it at: as
    /// recorded before a scale, else as the copy has it.
    fn record(&self) -> (Option<OriginalReplicas>, Option<String>) {
        match self.recorded.lock().expect("record lock").clone() {
            Some(r) => (Some(r.record), r.version),
            None => (
                self.prev.and_then(|s| s.original_replicas.clone()),
                self.jq.metadata.resource_version.clone(),
            ),
        }
    }

    fn set_recorded(&self, record: OriginalReplicas, version: Option<String>) {
        *self.recorded.lock().expect("record lock") = Some(Recorded { record, version });
    }

    fn new(jq: &'a JobQueue, ctx: &Context) -> Result<Subject<'a>> {
        let name = jq.name_any();
        let ns = jq
            .namespace()
            .ok_or_else(|| Error::NoNamespace(name.clone()))?;
        Ok(Subject {
            jq,
            labels: QueueLabels::new(&ns, &name),
            api: Api::namespaced(ctx.client.clone(), &ns),
            prev: jq.status.as_ref(),
            generation: jq.metadata.generation,
            now: ctx.now(),
            verdict: None,
            recorded: std::sync::Mutex::new(None),
            ns,
            name,
        })
    }
}

/// Step 1 failed: say so, and wait for the spec to change (retrying cannot help).
async fn invalid_spec(ctx: &Context, q: &Subject<'_>, invalid: &InvalidSpec) -> Result<Action> {
    let message = invalid.to_string();
    warn!(namespace = %q.ns, name = %q.name, error = %message, "invalid spec");
    let status = status::invalid_spec(q.prev, q.generation, &message, q.now);
    report_setback(
        ctx,
        q,
        Setback {
            status,
            reason: reasons::INVALID_SPEC,
            scaling: "not scaling while the spec is invalid: the replicas are left as they are",
            note: format!("the spec is invalid: {message}"),
        },
    )
    .await?;
    ctx.metrics.reconcile_failed(&q.labels, "invalid_spec");
    ctx.succeeded(q.jq);
    Ok(Action::await_change())
}

/// Why a reconcile stopped before the queue's numbers, as the status and a Warning say.
struct Setback {
    /// The status that says why.
    status: JobQueueStatus,
    /// The reason of the Warning, and of the `Scaling` condition while scaling pauses.
    reason: &'static str,
    /// The `Scaling` condition's message while scaling pauses.
    scaling: &'static str,
    /// The Warning's note.
    note: String,
}

/// Write the status of a setback, with scaling paused (the replicas are left as they
/// are), then publish its Warning.
async fn report_setback(ctx: &Context, q: &Subject<'_>, setback: Setback) -> Result<()> {
    let Setback {
        mut status,
        reason,
        scaling,
        note,
    } = setback;
    if q.jq.spec.workers.is_some() {
        status::scaling_paused(&mut status, reason, scaling, q.generation, q.now);
    }
    if let Some(verdict) = &q.verdict {
        status::spec_valid(&mut status, verdict, q.generation, q.now);
    }
    status::keep_transition_times(q.prev, &mut status);
    // Redis was not read: not ready, not up, the counts as old as they were.
    ctx.metrics.outcome(&q.labels, &status, None);
    write_status(q, &status).await?;
    publish(&ctx.recorder, q.jq, &EventSpec::warning(reason, note)).await;
    publish_spec_warning(ctx, q, &status).await;
    Ok(())
}

/// The Warning of a spec partly or no longer in force, once per change.
async fn publish_spec_warning(ctx: &Context, q: &Subject<'_>, new: &JobQueueStatus) {
    if let Some((reason, note)) = status::spec_warning(q.prev, new) {
        publish(&ctx.recorder, q.jq, &EventSpec::warning(reason, note)).await;
    }
}

/// Steps 2 and 3: Secrets, connection, and the queue's upkeep: of each partition, the
/// layout's and those of earlier layouts still draining (see [`partitions`]).
async fn observe(
    ctx: &Context,
    ns: &str,
    plan: &QueuePlan,
    prev: Option<&JobQueueStatus>,
) -> Result<Observation, Failure> {
    let endpoint = cluster_reads::resolve_endpoint_in(
        &ctx.caches_for(ns),
        &ctx.client,
        &ctx.settings,
        ns,
        &plan.endpoint,
    )
    .await?;
    let redis = ctx
        .redis_pool
        .get(&endpoint)
        .await
        .map_err(|e| classify(&e))?;
    let cluster = redis.is_cluster();
    let endpoint_name = redis.endpoint().to_string();
    let mut layout =
        partitions::layout(&plan.tag, plan.partitions, prev).map_err(|e| classify(&e))?;
    if status::needs_partition_probe(prev) {
        // No status remembers what drains: look for partitions of earlier layouts.
        let probe = partitions::probe_tags(&plan.tag, &layout.tags).map_err(|e| classify(&e))?;
        for tag in holding_jobs(&redis, &plan.prefix, &plan.tag, probe).await {
            if !layout.draining.contains(&tag) {
                layout.draining.push(tag);
            }
        }
    }
    let queues = layout
        .all()
        .map(|(tag, draining)| {
            let queue = Queue::new(redis.clone(), &plan.prefix, tag)?.durability(plan.durability);
            Ok((queue, tag, draining))
        })
        .collect::<crate::queue::Result<Vec<_>>>()
        .map_err(|e| classify(&e))?;
    // Each partition: one round trip when meta is current and nothing expired (see
    // Queue::maintain), the partitions' in parallel on the shared connection.
    let (batch, budget) = (plan.batch, ctx.settings.reap_budget);
    // Owned futures (the stream holds no borrowing closure, so the reconcile stays Send).
    // auto: the layout's one partition keeps the value the tuner set (read first).
    let mut first_settings = plan.settings.clone();
    let auto_meta = match (plan.auto, queues.first()) {
        (Some(bounds), Some((queue, _, _))) => {
            let meta = queue.meta_fields().await.map_err(|e| classify(&e))?;
            first_settings.visibility_timeout = QueueSettings::from_fields(&meta)
                .visibility_timeout
                .clamp(bounds.floor(auto_visibility::RENEWAL_FLOOR), bounds.max);
            Some((bounds, meta))
        }
        _ => None,
    };
    let upkeep: Vec<_> = queues
        .iter()
        .enumerate()
        .map(|(i, (queue, _, _))| {
            let settings = if i == 0 {
                first_settings.clone()
            } else {
                plan.settings.clone()
            };
            let (queue, paused) = (queue.clone(), plan.paused);
            async move {
                let mut done = queue.maintain(&settings, batch, budget).await?;
                // spec.paused, when set, holds the queue's pause (as meta holds the settings)
                match paused {
                    Some(true) if !done.stats.paused => {
                        queue.pause().await?;
                        done.stats.paused = true;
                    }
                    Some(false) if done.stats.paused => {
                        queue.resume().await?;
                        done.stats.paused = false;
                        done.stats.paused_at = None;
                    }
                    _ => {}
                }
                Ok::<_, crate::queue::Error>(done)
            }
        })
        .collect();
    let done: Vec<_> = futures::stream::iter(upkeep)
        .buffered(PARALLEL_UPKEEP)
        .collect()
        .await;
    let mut reaped = ReapOutcome::default();
    let mut parts = Vec::with_capacity(queues.len());
    let mut recorded = None;
    for ((queue, tag, draining), done) in queues.iter().zip(done) {
        let done = done.map_err(|e| classify(&e))?;
        reaped += done.reaped;
        if *tag == plan.tag {
            recorded = Some((queue, done.recorded_partitions.clone()));
        }
        if plan.auto.is_none() && done.auto_owner == Some(Owner::Operator) {
            // The spec went back to a duration (written by the upkeep): auto has ended.
            end_auto(queue).await.map_err(|e| classify(&e))?;
        }
        parts.push(PartitionObservation {
            tag: tag.to_string(),
            draining: *draining,
            stats: done.stats,
        });
    }
    // The queue's own meta records the layout, so clients given the tag alone find it
    // (written only when it changes).
    if let Some((queue, fields)) = recorded {
        let was = prev
            .and_then(|s| s.partitions.as_ref())
            .map(|p| p.desired as usize);
        let draining = partitions::still_draining(&parts);
        if let Some(record) =
            partitions::record_to_write(&plan.tag, plan.partitions, was, &draining, &fields)
                .map_err(|e| classify(&e))?
        {
            queue
                .record_partitions(&record)
                .await
                .map_err(|e| classify(&e))?;
        }
    }
    let visibility = match auto_meta {
        Some((bounds, meta)) => Some(
            tune_visibility(&queues[0].0, bounds, &meta, plan.interval)
                .await
                .map_err(|e| classify(&e))?,
        ),
        None => None,
    };
    // spec.schedules, on an unpartitioned queue (validate refuses them otherwise)
    let schedules = if queues.len() == 1 {
        reconcile_schedules(&queues[0].0, &plan.schedules, prev)
            .await
            .map_err(|e| classify(&e))?
    } else {
        Vec::new()
    };
    // The draining partitions are the PartitionsDrained condition's to name.
    let name = match layout.tags.len() {
        1 => queues[0].0.name().to_string(),
        n => format!("{}:{{{}}} ({n} partitions)", plan.prefix, plan.tag),
    };
    Ok(Observation {
        endpoint: endpoint_name,
        cluster,
        queue: name,
        reaped,
        stats: partitions::total(&parts),
        visibility_timeout: visibility
            .as_ref()
            .map_or(plan.settings.visibility_timeout, |v| v.current),
        visibility,
        desired_partitions: plan.partitions,
        partitions: parts,
        schedules,
    })
}

/// `spec.schedules` into Redis: each written (an unchanged rule is left as it is, with
/// its ticks), and the ones the last status listed that the spec no longer has removed
/// (schedules added by `jobqueue schedule add` are not the operator's: left alone).
/// Returns the spec's schedules as Redis holds them, for the status.
async fn reconcile_schedules(
    queue: &Queue,
    wanted: &[crate::queue::schedule::Schedule],
    prev: Option<&JobQueueStatus>,
) -> crate::queue::Result<Vec<crate::queue::schedule::ScheduleInfo>> {
    for s in wanted {
        queue.put_schedule(s).await?;
    }
    for old in prev.map(|p| p.schedules.as_slice()).unwrap_or_default() {
        if !wanted.iter().any(|s| s.name == old.name) {
            queue.remove_schedule(&old.name).await?;
        }
    }
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let mut all = queue.schedules().await?;
    all.retain(|i| wanted.iter().any(|s| s.name == i.name));
    Ok(all)
}

/// The spec's visibility timeout is a duration again: `meta` says so (`fixed`, set by the
/// operator), so neither the reapers nor a reader take the queue for `auto`.
async fn end_auto(queue: &Queue) -> crate::queue::Result<()> {
    let now = queue.now_ms().await?;
    let mut write = vec![(auto_visibility::fields::MODE, "fixed".to_string())];
    write.extend(auto_visibility::set_fields(
        "operator",
        now,
        "spec.visibilityTimeout is a duration again",
    ));
    queue.write_meta(&write).await
}

/// `visibilityTimeout: auto`: the operator takes the queue's tuning (its bounds and
/// `visibility_owner: operator` in `meta`, so the workers' reapers defer), then runs the
/// rule once (see [`crate::queue::tuning::tune`]) and reads back what is in force.
async fn tune_visibility(
    queue: &Queue,
    bounds: AutoBounds,
    meta: &std::collections::HashMap<String, String>,
    interval: std::time::Duration,
) -> crate::queue::Result<VisibilityObserved> {
    let record = VisibilityRecord::from_fields(meta);
    if record.auto != Some(bounds) || record.owner != Owner::Operator {
        let mut write = auto_visibility::auto_fields(&bounds);
        write.push((auto_visibility::fields::OWNER, "operator".to_string()));
        if record.auto.is_none() {
            let now = queue.now_ms().await?;
            let current = QueueSettings::from_fields(meta).visibility_timeout;
            let start = current.clamp(bounds.floor(auto_visibility::RENEWAL_FLOOR), bounds.max);
            let reason = format!(
                "auto turned on by the operator: starts from {}",
                crate::duration::format(start)
            );
            write.extend(auto_visibility::set_fields("operator", now, &reason));
            write.push((auto_visibility::fields::STATE, "{}".to_string()));
        }
        queue.write_meta(&write).await?;
    }
    let timing = auto_visibility::Timing {
        interval,
        ..Default::default()
    };
    let tuned = crate::queue::tuning::tune(queue, "operator", &timing).await?;
    let after = queue.meta_fields().await?;
    let record = VisibilityRecord::from_fields(&after);
    Ok(VisibilityObserved {
        current: QueueSettings::from_fields(&after).visibility_timeout,
        reason: record.reason.unwrap_or_default(),
        set_by: record.set_by,
        set_at_ms: record.set_at_ms,
        changed_from: tuned.filter(|t| t.changed()).map(|t| t.from),
    })
}

/// Partitions maintained at once by one reconcile (each a pipelined round trip on the
/// shared connection).
const PARALLEL_UPKEEP: usize = 16;

/// Of the partition tags `tags`, those whose queue holds a job (any of its pending,
/// processing, delayed, dead or orphans keys exists): one pipelined round trip of `TYPE`
/// each (a command the operator's ACL grants), on its node. Best effort: when the first
/// tag cannot be checked (an ACL that grants the queue's own keys alone), the probe stops
/// there, and a tag that fails later (a node down) is left out; the log says so.
async fn holding_jobs(
    redis: &crate::queue::Redis,
    prefix: &str,
    queue: &str,
    tags: Vec<String>,
) -> Vec<String> {
    let name = format!("{prefix}:{{{queue}}}");
    let Some(first) = tags.first().cloned() else {
        return Vec::new();
    };
    let mut holding = Vec::new();
    match holds_jobs(redis.clone(), prefix.to_string(), first).await {
        Ok(Some(tag)) => holding.push(tag),
        Ok(None) => {}
        Err(e) => {
            info!(queue = %name, error = %e, "not looking for partitions of earlier layouts");
            return holding;
        }
    }
    let checks: Vec<_> = tags
        .into_iter()
        .skip(1)
        .map(|tag| holds_jobs(redis.clone(), prefix.to_string(), tag))
        .collect();
    let found: Vec<_> = futures::stream::iter(checks)
        .buffered(PARALLEL_PROBES)
        .collect()
        .await;
    let mut unchecked = Vec::new();
    for f in found {
        match f {
            Ok(Some(tag)) => holding.push(tag),
            Ok(None) => {}
            Err(e) => unchecked.push(e),
        }
    }
    if let Some(first) = unchecked.first() {
        warn!(
            queue = %name,
            unchecked = unchecked.len(),
            error = %first,
            "cannot look for partitions of earlier layouts in all their places"
        );
    }
    holding
}

/// `Some(tag)` when partition `tag` holds a job (see [`holding_jobs`]).
async fn holds_jobs(
    redis: crate::queue::Redis,
    prefix: String,
    tag: String,
) -> crate::queue::Result<Option<String>> {
    let queue = Queue::new(redis.clone(), &prefix, &tag)?;
    let k = queue.keys();
    let mut pipe = redis::pipe();
    for key in [&k.processing, &k.delayed, &k.dead, &k.orphans] {
        pipe.cmd("TYPE").arg(key);
    }
    // the ready list of every priority (pending is priority 0's)
    for key in k.ready_lists() {
        pipe.cmd("TYPE").arg(key);
    }
    let mut conn = redis;
    let types: Vec<String> = pipe
        .query_async(&mut conn)
        .await
        .map_err(|e| crate::queue::Error::from_redis(queue.name(), "TYPE", e))?;
    Ok(types.iter().any(|t| t != "none").then_some(tag))
}

/// Partitions a probe checks at once.
const PARALLEL_PROBES: usize = 32;

/// Step 4: read the target, decide, and patch the scale when the replicas must change.
/// What goes wrong is the decision's reason, never an error: the reconcile goes on.
/// Under a rate limit the replicas are capped at what it keeps busy (and the verdict
/// returned for the `RateLimited` condition).
async fn scale_workers(
    ctx: &Context,
    q: &Subject<'_>,
    policy: &ScalePolicy,
    rate_limit: Option<crate::queue::RateLimit>,
    stats: &QueueStats,
) -> (Decision, Option<scaling::RateVerdict>) {
    let state = read_target(ctx, q, &policy.target).await;
    // Due delayed jobs wait like pending ones: the reaper promotes them (a bounded
    // number per reconcile), and they must wake workers at zero.
    let backlog = Backlog {
        pending: stats.pending,
        due: stats.due,
        processing: stats.processing,
    };
    // a pause annotation wins; then a paused queue leaves the replicas as they are
    let held = pause::pause_of(q.jq).or_else(|| stats.paused.then_some(Hold::QueuePaused));
    let capacity = rate_limit.and_then(|limit| {
        let processing = stats.histogram.quantile(status::RATE_CAP_QUANTILE)?;
        Some(scaling::rate_capacity(
            limit,
            processing,
            policy.concurrency,
        ))
    });
    let capped = policy.capped(capacity.as_ref());
    let verdict = scaling::rate_verdict(&capped, backlog, capacity);
    let decision = ctx.with_recommendations(q.jq, |history| match &held {
        Some(held) => scaling::hold(&capped, held, state, history),
        None => scaling::decide(&capped, backlog, state, history, q.now),
    });
    let decision = match decision.patch() {
        Some(to) => patch_scale(ctx, q, &policy.target, decision, to).await,
        None => decision,
    };
    (decision, verdict)
}

/// The target as the scaler must see it: its `/scale`, an HPA or a ScaledObject on it
/// ([`cluster_reads::target_state`]), or an older JobQueue scaling it (from the
/// controller's cache, when there is one: [`ownership::other_owner`]).
/// The caches to read `target` from: without the workload caches while they have not yet
/// seen the replicas this controller last set (read from the API instead).
fn fresh_caches(ctx: &Context, q: &Subject<'_>, target: &TargetRef) -> caches::Caches {
    let mut caches = ctx.caches_for(&q.ns);
    let cached = caches.replicas(&q.ns, target);
    if !ctx.cache_caught_up(q.jq, &target.to_string(), cached, q.now) {
        caches.deployments = None;
        caches.stateful_sets = None;
    }
    caches
}

async fn read_target(ctx: &Context, q: &Subject<'_>, target: &TargetRef) -> TargetState {
    let state =
        cluster_reads::target_state_in(&fresh_caches(ctx, q, target), &ctx.client, &q.ns, target)
            .await;
    let TargetState::Found { replicas } = state else {
        return state;
    };
    let queues = ctx.jobqueues_in(&q.ns).unwrap_or_default();
    match ownership::other_owner(q.jq, target, queues.iter().map(|jq| jq.as_ref())) {
        Some(queue) => TargetState::OwnedByAnother { queue, replicas },
        None => state,
    }
}

/// While the queue cannot be read: count it, and once `spec.workers.fallback`'s
/// threshold is reached (and no pause annotation holds the workers), scale the target
/// to the fallback's replicas. `None`: no fallback in force.
async fn fallback_workers(ctx: &Context, q: &Subject<'_>, plan: &QueuePlan) -> Option<Decision> {
    let failures = ctx.unreadable(q.jq);
    let policy = plan.workers.as_ref()?;
    if pause::pause_of(q.jq).is_some() {
        return None;
    }
    let spec = q.jq.spec.workers.as_ref()?.fallback.as_ref();
    let held = pause::fallback(spec, failures)?;
    let state = read_target(ctx, q, &policy.target).await;
    let decision =
        ctx.with_recommendations(q.jq, |history| scaling::hold(policy, &held, state, history));
    Some(match decision.patch() {
        Some(to) => patch_scale(ctx, q, &policy.target, decision, to).await,
        None => decision,
    })
}

/// Write the status of a failed read with the fallback in force, then publish the
/// failure's Warning and the fallback's Events.
async fn report_fallback(
    ctx: &Context,
    q: &Subject<'_>,
    mut status: JobQueueStatus,
    failure: &Failure,
    decision: &Decision,
) -> Result<()> {
    status::scaled(&mut status, Some(decision), q.generation, q.now);
    status::keep_transition_times(q.prev, &mut status);
    write_status(q, &status).await?;
    ctx.metrics
        .replicas(&q.labels, decision.desired, decision.replicas_after());
    let warning = EventSpec::warning(failure.reason, failure.message.clone());
    publish(&ctx.recorder, q.jq, &warning).await;
    for note in events::scaling_events(q.prev, decision) {
        publish(&ctx.recorder, q.jq, &note).await;
    }
    Ok(())
}

/// Set the target's replicas to `to`; a refusal turns the decision into a failed one.
async fn patch_scale(
    ctx: &Context,
    q: &Subject<'_>,
    target: &TargetRef,
    decision: Decision,
    to: i32,
) -> Decision {
    let from = decision.current.unwrap_or(0);
    if let Err(message) = record_before_scaling(q, target, &decision).await {
        warn!(namespace = %q.ns, name = %q.name, error = %message, "scale not made");
        ctx.with_recommendations(q.jq, |history| history.unscaled(q.now));
        return decision.failed(message);
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &q.ns, &target.api_resource());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let patch = serde_json::json!({ "spec": { "replicas": to } });
    match api
        .patch_scale(&target.name, &params, &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            ctx.metrics.scaled(&q.labels, from, to);
            ctx.scaled_to(q.jq, target.to_string(), to, q.now);
            info!(
                namespace = %q.ns,
                name = %q.name,
                target = %target,
                from,
                to,
                "scaled the workers"
            );
            decision
        }
        Err(e) => {
            let message = format!(
                "cannot scale {target} from {from} to {to}: {}",
                kube_reason(&e)
            );
            warn!(namespace = %q.ns, name = %q.name, error = %message, "scale failed");
            // The scale-up policies must not count replicas that were never added.
            ctx.with_recommendations(q.jq, |history| history.unscaled(q.now));
            decision.failed(message)
        }
    }
}

/// Before the operator first scales a target, the count it has goes into
/// `status.originalReplicas` on the API server, where it cannot be lost: a scale followed
/// by a failed status write (or a stop between the two) would leave the next reconcile
/// to read the operator's own count as the original. A merge patch of that field alone,
/// conditional on the version the record was not seen at; refused (409: the queue moved
/// on, its copy here was stale), the queue is read again and a record it has for the
/// target is kept. Nothing to write when the record is known, or none is taken
/// ([`lifecycle::original_replicas`]). `Err`: why the scale must not be made.
async fn record_before_scaling(
    q: &Subject<'_>,
    target: &TargetRef,
    decision: &Decision,
) -> Result<(), String> {
    let target_name = target.to_string();
    let (seen, mut version) = q.record();
    let Some(record) =
        lifecycle::original_replicas(seen.as_ref(), Some(&target_name), Some(decision))
    else {
        return Ok(());
    };
    if seen.as_ref() == Some(&record) {
        return Ok(());
    }
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let mut attempt = 1;
    loop {
        let mut patch = serde_json::json!({ "status": { "originalReplicas": record } });
        if let Some(version) = &version {
            patch["metadata"] = serde_json::json!({ "resourceVersion": version });
        }
        match q
            .api
            .patch_status(&q.name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                q.set_recorded(record, written.metadata.resource_version);
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.is_conflict() && attempt < STATUS_ATTEMPTS => {
                attempt += 1;
                let fresh = q.api.get(&q.name).await.map_err(|e| {
                    format!(
                        "cannot read the JobQueue again to record the original replicas of \
                         {target}: {}",
                        kube_reason(&e)
                    )
                })?;
                let theirs = fresh
                    .status
                    .as_ref()
                    .and_then(|s| s.original_replicas.as_ref())
                    .filter(|r| r.target == target_name);
                if let Some(theirs) = theirs {
                    debug!(namespace = %q.ns, name = %q.name, original = ?theirs, "the original replicas were recorded since this copy was read: kept");
                    q.set_recorded(theirs.clone(), fresh.metadata.resource_version.clone());
                    return Ok(());
                }
                version = fresh.metadata.resource_version;
            }
            Err(e) => {
                return Err(format!(
                    "cannot record the original replicas of {target} ({}) before scaling it: {}",
                    record.replicas,
                    kube_reason(&e)
                ));
            }
        }
    }
}

/// The spec's target (`Kind/name`), also while spec.workers is refused (its record is
/// kept); `None` without workers or with a target that does not parse.
fn spec_target(jq: &JobQueue) -> Option<String> {
    jq.spec
        .workers
        .as_ref()
        .and_then(|w| {
            TargetRef::parse(
                &w.scale_target_ref.api_version,
                &w.scale_target_ref.kind,
                &w.scale_target_ref.name,
            )
            .ok()
        })
        .map(|t| t.to_string())
}

/// Patch the status subresource when it differs from what the object has.
///
/// `originalReplicas` must survive reconciles, and the copy a reconcile runs on may be
/// older than the last status write: while the queue has workers and the status does not
/// carry the very record the reconcile knows the queue has (recorded before a scale, else
/// the copy's), the write is conditional on the version it knows it at
/// ([`lifecycle::guards_record`]). Refused (409: the object moved on), the queue is read
/// again, the record it has for the target is kept ([`lifecycle::kept_original`]) and the
/// write tried again on that version.
async fn write_status(q: &Subject<'_>, new: &JobQueueStatus) -> Result<()> {
    if q.prev == Some(new) {
        return Ok(());
    }
    let target = spec_target(q.jq);
    let has_workers = q.jq.spec.workers.is_some();
    let (seen, seen_version) = q.record();
    let mut status = new.clone();
    if q.recorded.lock().expect("record lock").is_some() {
        // Recorded on the API server during this reconcile: the queue's record.
        status.original_replicas =
            lifecycle::kept_original(seen.as_ref(), status.original_replicas, target.as_deref());
    }
    let mut version = guarded_version(has_workers, seen.as_ref(), &status, seen_version);
    let mut attempt = 1;
    loop {
        let mut patch = serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": "JobQueue",
            "status": status,
        });
        if let Some(version) = &version {
            patch["metadata"] = serde_json::json!({ "resourceVersion": version });
        }
        let written = q
            .api
            .patch_status(
                &q.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await;
        match written {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s))
                if s.is_conflict() && version.is_some() && attempt < STATUS_ATTEMPTS =>
            {
                attempt += 1;
                let fresh = q.api.get(&q.name).await.map_err(Error::Kube)?;
                let theirs = fresh
                    .status
                    .as_ref()
                    .and_then(|s| s.original_replicas.as_ref());
                status.original_replicas =
                    lifecycle::kept_original(theirs, status.original_replicas, target.as_deref());
                debug!(
                    namespace = %q.ns,
                    name = %q.name,
                    original = ?status.original_replicas,
                    "the status was written since this copy was read: writing on the queue as read again"
                );
                version = guarded_version(
                    has_workers,
                    theirs,
                    &status,
                    fresh.metadata.resource_version.clone(),
                );
            }
            Err(e) => return Err(Error::Kube(e)),
        }
    }
}

/// Status writes tried at most, each refused one on a newer version of the queue.
const STATUS_ATTEMPTS: u32 = 3;

/// `version`, when a status write carrying `new` over the record `seen` must be
/// conditional on it ([`lifecycle::guards_record`]).
fn guarded_version(
    has_workers: bool,
    seen: Option<&OriginalReplicas>,
    new: &JobQueueStatus,
    version: Option<String>,
) -> Option<String> {
    if lifecycle::guards_record(has_workers, seen, new.original_replicas.as_ref()) {
        version
    } else {
        None
    }
}

/// Publish an Event about `jq`; a failure to publish is logged, never fatal.
async fn publish(recorder: &Recorder, jq: &JobQueue, event: &EventSpec) {
    if let Err(e) = recorder
        .publish(&event.to_event(), &jq.object_ref(&()))
        .await
    {
        warn!(name = %jq.name_any(), error = %e, "cannot publish event");
    }
}
