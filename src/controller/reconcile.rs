//! One reconcile of one `JobQueue`: the pipeline, and its writes. Each step's logic
//! lives in a module of its own:
//!
//! 1. **validate** the spec into a plan ([`validate::plan`], pure). An invalid spec is
//!    reported as `Ready=False, reason InvalidSpec` and waits for the next spec change;
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
//! this queue alone. A failure in 4 (a missing target, an HPA on it, a refused patch)
//! is the `Scaling` condition's reason: the rest of the reconcile goes on.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::events::{self, EventSpec};
use super::failures::{classify, kube_reason};
use super::metrics::QueueLabels;
use super::scaling::{self, Backlog, Decision, ScalePolicy, TargetRef};
use super::status::{self, Failure, Observation, reasons};
use super::validate::{self, InvalidSpec, QueuePlan};
use super::{Context, Error, FIELD_MANAGER, Result, cluster_reads};
use crate::crd::{API_VERSION, JobQueue, JobQueueStatus};
use crate::queue::{Queue, QueueStats};

/// Reconcile one JobQueue.
pub async fn reconcile(jq: Arc<JobQueue>, ctx: Arc<Context>) -> Result<Action> {
    let q = Subject::new(&jq, &ctx)?;
    let _timer = ctx.metrics.reconcile_started(&q.labels);

    // 1. Validate.
    let plan = match validate::plan(&jq.spec) {
        Ok(plan) => plan,
        Err(invalid) => return invalid_spec(&ctx, &q, &invalid).await,
    };

    // 2 and 3. Read the Secrets, connect, Redis upkeep.
    let obs = match observe(&ctx, &q.ns, &plan).await {
        Ok(obs) => obs,
        Err(failure) => {
            let status = status::failed(q.prev, q.generation, &failure, q.now);
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

    // 4. Scale the workers.
    let scaling = match &plan.workers {
        Some(policy) => Some(scale_workers(&ctx, &q, policy, &obs.stats).await),
        None => {
            ctx.forget_recommendations(&jq);
            None
        }
    };

    // 5. Decide the status and the Events.
    let mut new = status::observed(q.prev, q.generation, &obs, q.now);
    status::scaled(&mut new, scaling.as_ref(), q.generation, q.now);
    let notes = events::success_events(q.prev, &new, &obs);
    let scale_notes = match &scaling {
        Some(decision) => events::scaling_events(q.prev, decision),
        None => Vec::new(),
    };

    // 6. Write the status (counts alone at most every --status-interval), count, publish.
    if ctx.status_write(&jq, q.prev, &new, q.now).writes() {
        write_status(&q, &new).await?;
        ctx.status_written(&jq, q.now);
    }
    ctx.metrics.observed(&q.labels, &obs.stats, &obs.reaped);
    ctx.metrics.replicas(
        &q.labels,
        scaling.as_ref().and_then(|d| d.desired),
        scaling.as_ref().and_then(|d| d.replicas_after()),
    );
    ctx.succeeded(&jq);
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
    let scaled = scaling.as_ref().is_some_and(|d| d.reason.scales());
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
}

impl<'a> Subject<'a> {
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
    write_status(q, &status).await?;
    publish(&ctx.recorder, q.jq, &EventSpec::warning(reason, note)).await;
    Ok(())
}

/// Steps 2 and 3: Secrets, connection, and the queue's upkeep.
async fn observe(ctx: &Context, ns: &str, plan: &QueuePlan) -> Result<Observation, Failure> {
    let endpoint = cluster_reads::resolve_endpoint_in(
        &ctx.caches(),
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
    let queue = Queue::new(redis, &plan.prefix, &plan.tag).map_err(|e| classify(&e))?;
    // One round trip when meta is current and nothing expired (see Queue::maintain).
    let done = queue
        .maintain(&plan.settings, plan.batch, ctx.settings.reap_budget)
        .await
        .map_err(|e| classify(&e))?;
    Ok(Observation {
        endpoint: endpoint_name,
        cluster,
        queue: queue.name().to_string(),
        reaped: done.reaped,
        stats: done.stats,
        visibility_timeout: plan.settings.visibility_timeout,
    })
}

/// Step 4: read the target, decide, and patch the scale when the replicas must change.
/// What goes wrong is the decision's reason, never an error: the reconcile goes on.
async fn scale_workers(
    ctx: &Context,
    q: &Subject<'_>,
    policy: &ScalePolicy,
    stats: &QueueStats,
) -> Decision {
    let state =
        cluster_reads::target_state_in(&ctx.caches(), &ctx.client, &q.ns, &policy.target).await;
    // Due delayed jobs wait like pending ones: the reaper promotes them (a bounded
    // number per reconcile), and they must wake workers at zero.
    let backlog = Backlog {
        pending: stats.pending,
        due: stats.due,
        processing: stats.processing,
    };
    let decision = ctx.with_recommendations(q.jq, |history| {
        scaling::decide(policy, backlog, state, history, q.now)
    });
    match decision.patch() {
        Some(to) => patch_scale(ctx, q, &policy.target, decision, to).await,
        None => decision,
    }
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

/// Patch the status subresource when it differs from what the object has.
async fn write_status(q: &Subject<'_>, new: &JobQueueStatus) -> Result<()> {
    if q.prev == Some(new) {
        return Ok(());
    }
    let patch = serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": "JobQueue",
        "status": new,
    });
    q.api
        .patch_status(
            &q.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::Kube)?;
    Ok(())
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
