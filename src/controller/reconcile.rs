//! One reconcile of one `JobQueue`:
//!
//! 1. **validate** the spec into a plan (pure; an invalid spec is reported as
//!    `Ready=False, reason InvalidSpec` and waits for the next spec change);
//! 2. **read** the Secrets it names and connect (one client per endpoint, shared);
//! 3. **apply** to the queue: check its keys' types, write its settings into `meta`,
//!    reap expired leases within a budget, read its stats: one round trip when `meta`
//!    is current and nothing has expired (`Queue::maintain`);
//! 4. **scale** the workers (with `spec.workers`): read the target's `/scale` and the
//!    namespace's HorizontalPodAutoscalers, decide (pure, [`scaling::decide`]), patch
//!    the scale only when the replicas must change;
//! 5. **build** the status (pure, from the previous status and what was seen);
//! 6. **write** the status only when it changed (server-side apply), then publish the
//!    Events worth a person's attention; requeue after `reaper.interval`.
//!
//! A failure in 2 or 3 becomes a condition with a reason and a message (never a secret),
//! a Warning Event, and a backoff for this queue alone. A failure in 4 (a missing target,
//! an HPA on it, a refused patch) is the `Scaling` condition's reason: the rest of the
//! reconcile goes on.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::endpoints::Endpoint;
use super::metrics::QueueLabels;
use super::scaling::{self, Backlog, Decision, ScalePolicy, TargetRef, TargetState};
use super::status::{self, Failure, Observation, reasons};
use super::validate::{self, EndpointPlan, QueuePlan, UrlSource};
use super::{Context, Error, FIELD_MANAGER, Result};
use crate::crd::{API_VERSION, JobQueue, JobQueueStatus, SecretKeySelector};
use crate::queue::{ConnectOptions, Error as QueueError, Queue, QueueStats};

/// Reconcile one JobQueue.
pub async fn reconcile(jq: Arc<JobQueue>, ctx: Arc<Context>) -> Result<Action> {
    let name = jq.name_any();
    let ns = jq
        .namespace()
        .ok_or_else(|| Error::NoNamespace(name.clone()))?;
    let labels = QueueLabels::new(&ns, &name);
    let _timer = ctx.metrics.reconcile_started(&labels);
    let generation = jq.metadata.generation;
    let prev = jq.status.as_ref();
    let api: Api<JobQueue> = Api::namespaced(ctx.client.clone(), &ns);
    let now = ctx.now();

    let plan = match validate::plan(&jq.spec) {
        Ok(plan) => plan,
        Err(invalid) => {
            let message = invalid.to_string();
            warn!(namespace = %ns, name = %name, error = %message, "invalid spec");
            let mut new = status::invalid_spec(prev, generation, &message, now);
            if jq.spec.workers.is_some() {
                status::scaling_paused(
                    &mut new,
                    reasons::INVALID_SPEC,
                    "not scaling while the spec is invalid: the replicas are left as they are",
                    generation,
                    now,
                );
            }
            write_status(&api, &name, prev, &new).await?;
            publish(
                &ctx,
                &jq,
                EventType::Warning,
                reasons::INVALID_SPEC,
                format!("the spec is invalid: {message}"),
            )
            .await;
            ctx.metrics.reconcile_failed(&labels, "invalid_spec");
            ctx.succeeded(&jq);
            // Retrying cannot help: wait for the spec to change.
            return Ok(Action::await_change());
        }
    };

    match observe(&ctx, &ns, &plan).await {
        Ok(obs) => {
            let scaling = match &plan.workers {
                Some(policy) => {
                    Some(scale_workers(&ctx, &ns, &labels, policy, &obs.stats, now).await)
                }
                None => {
                    ctx.forget_recommendations(&labels);
                    None
                }
            };
            let mut new = status::observed(prev, generation, &obs, now);
            status::scaled(&mut new, scaling.as_ref(), generation, now);
            write_status(&api, &name, prev, &new).await?;
            ctx.metrics.observed(&labels, &obs.stats, &obs.reaped);
            ctx.metrics.replicas(
                &labels,
                scaling.as_ref().and_then(|d| d.desired),
                scaling.as_ref().and_then(|d| d.replicas_after()),
            );
            ctx.succeeded(&jq);
            if obs.reaped.requeued + obs.reaped.dead_lettered > 0 {
                info!(
                    namespace = %ns,
                    name = %name,
                    requeued = obs.reaped.requeued,
                    dead_lettered = obs.reaped.dead_lettered,
                    "reaped expired leases"
                );
            }
            for (kind, reason, note) in success_events(prev, &new, &obs) {
                publish(&ctx, &jq, kind, reason, note).await;
            }
            if let Some(decision) = &scaling {
                for (kind, reason, note) in scaling_events(prev, decision) {
                    if decision.reason.scales() {
                        let recorder = ctx.fresh_recorder();
                        publish_on(&recorder, &jq, kind, reason, note).await;
                    } else {
                        publish(&ctx, &jq, kind, reason, note).await;
                    }
                }
            }
            debug!(namespace = %ns, name = %name, pending = new.pending, "reconciled");
            Ok(Action::requeue(plan.interval))
        }
        Err(failure) => {
            let mut new = status::failed(prev, generation, &failure, now);
            if plan.workers.is_some() {
                status::scaling_paused(
                    &mut new,
                    failure.reason,
                    "not scaling while the queue cannot be read: the replicas are left as \
                     they are",
                    generation,
                    now,
                );
            }
            write_status(&api, &name, prev, &new).await?;
            publish(
                &ctx,
                &jq,
                EventType::Warning,
                failure.reason,
                failure.message.clone(),
            )
            .await;
            Err(Error::Unavailable(failure))
        }
    }
}

/// Step 4: read the target's scale and the HPAs that could claim it, decide, and patch
/// the scale when the replicas must change. What goes wrong is the decision's reason,
/// never an error: the reconcile goes on.
async fn scale_workers(
    ctx: &Context,
    ns: &str,
    labels: &QueueLabels,
    policy: &ScalePolicy,
    stats: &QueueStats,
    now: Timestamp,
) -> Decision {
    let target = &policy.target;
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ns, &target.api_resource());
    let state = match api.get_scale(&target.name).await {
        Ok(scale) => {
            let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
            match claiming_hpa(ctx, ns, target).await {
                Ok(Some(hpa)) => TargetState::ClaimedByHpa { hpa, replicas },
                Ok(None) => TargetState::Found { replicas },
                Err(e) => TargetState::Unreadable {
                    message: format!(
                        "cannot list the HorizontalPodAutoscalers of namespace {ns}: {}",
                        kube_reason(&e)
                    ),
                },
            }
        }
        Err(kube::Error::Api(s)) if s.code == 404 => TargetState::NotFound {
            message: format!(
                "{target} ({}) not found in namespace {ns}: {}",
                target.api_version(),
                s.message
            ),
        },
        Err(e) => TargetState::Unreadable {
            message: format!("cannot read the scale of {target}: {}", kube_reason(&e)),
        },
    };
    let backlog = Backlog {
        pending: stats.pending,
        processing: stats.processing,
    };
    let decision = ctx.with_recommendations(labels, |history| {
        scaling::decide(policy, backlog, state, history, now)
    });
    let Some(to) = decision.patch() else {
        return decision;
    };
    let from = decision.current.unwrap_or(0);
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
            ctx.metrics.scaled(labels, from, to);
            info!(
                namespace = %labels.namespace,
                name = %labels.name,
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
            warn!(namespace = %labels.namespace, name = %labels.name, error = %message, "scale failed");
            decision.failed(message)
        }
    }
}

/// The HPA (`namespace/name`) of namespace `ns` that scales `target`, if any.
async fn claiming_hpa(
    ctx: &Context,
    ns: &str,
    target: &TargetRef,
) -> Result<Option<String>, kube::Error> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    let hpas = api.list(&ListParams::default()).await?;
    Ok(hpas
        .items
        .iter()
        .find(|hpa| {
            hpa.spec
                .as_ref()
                .is_some_and(|spec| target.is_targeted_by(&spec.scale_target_ref))
        })
        .map(|hpa| format!("{ns}/{}", hpa.name_any())))
}

/// The Events of the scaler: a Normal one on each scale; a Warning when it stops
/// scaling (a missing target, an HPA, a failure), once, not on every reconcile.
pub fn scaling_events(
    prev: Option<&JobQueueStatus>,
    decision: &Decision,
) -> Vec<(EventType, &'static str, String)> {
    let reason = decision.reason;
    if reason.scales() {
        return vec![(EventType::Normal, reason.as_str(), decision.message.clone())];
    }
    let was = prev
        .and_then(|p| p.condition(status::types::SCALING))
        .map(|c| c.reason.as_str());
    if !reason.is_scaling() && was != Some(reason.as_str()) {
        return vec![(
            EventType::Warning,
            reason.as_str(),
            decision.message.clone(),
        )];
    }
    Vec::new()
}

/// The Events a successful reconcile raises, from the previous status and the new one.
pub fn success_events(
    prev: Option<&JobQueueStatus>,
    new: &JobQueueStatus,
    obs: &Observation,
) -> Vec<(EventType, &'static str, String)> {
    let mut events = Vec::new();
    let Some(prev) = prev else {
        return events;
    };
    let was_ready = prev
        .condition(status::types::READY)
        .map(|c| c.status.as_str());
    if was_ready == Some("False") {
        events.push((
            EventType::Normal,
            "Recovered",
            format!("queue {} is healthy again", obs.queue),
        ));
    }
    // Totals grew since counts were last seen (not since a failure wrote zeros).
    let counted = status::has_counts(prev);
    if counted && new.dead_lettered > prev.dead_lettered {
        events.push((
            EventType::Warning,
            "DeadLettered",
            format!(
                "{} jobs moved to the dead-letter set since the last check ({} dead now)",
                new.dead_lettered - prev.dead_lettered,
                new.dead
            ),
        ));
    }
    if counted && new.stale_acks > prev.stale_acks {
        events.push((
            EventType::Warning,
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

/// Patch the status subresource when it differs from what the object has.
async fn write_status(
    api: &Api<JobQueue>,
    name: &str,
    prev: Option<&JobQueueStatus>,
    new: &JobQueueStatus,
) -> Result<bool> {
    if prev == Some(new) {
        return Ok(false);
    }
    let patch = serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": "JobQueue",
        "status": new,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(Error::Kube)?;
    Ok(true)
}

/// Publish an Event about `jq`; a failure to publish is logged, never fatal.
async fn publish(ctx: &Context, jq: &JobQueue, type_: EventType, reason: &str, note: String) {
    publish_on(&ctx.recorder, jq, type_, reason, note).await;
}

async fn publish_on(
    recorder: &Recorder,
    jq: &JobQueue,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(truncate_note(note)),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &jq.object_ref(&())).await {
        warn!(name = %jq.name_any(), error = %e, "cannot publish event");
    }
}

/// Event notes are limited to 1 kB.
fn truncate_note(mut note: String) -> String {
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

/// Steps 2 and 3: Secrets, connection, and the queue's work.
async fn observe(ctx: &Context, ns: &str, plan: &QueuePlan) -> Result<Observation, Failure> {
    let endpoint = resolve_endpoint(ctx, ns, &plan.endpoint).await?;
    let redis = ctx
        .endpoints
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
    let (reaped, stats) = (done.reaped, done.stats);
    Ok(Observation {
        endpoint: endpoint_name,
        cluster,
        queue: queue.name().to_string(),
        reaped,
        stats,
        visibility_timeout: plan.settings.visibility_timeout,
    })
}

/// Read the Secrets the endpoint names (each once) and build its connection options.
async fn resolve_endpoint(
    ctx: &Context,
    ns: &str,
    plan: &EndpointPlan,
) -> Result<Endpoint, Failure> {
    let secrets_api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let mut secrets: HashMap<&str, Secret> = HashMap::new();
    for name in plan.secret_names() {
        match secrets_api.get_opt(name).await {
            Ok(Some(secret)) => {
                secrets.insert(name, secret);
            }
            Ok(None) => {
                return Err(Failure {
                    reason: reasons::SECRET_NOT_FOUND,
                    message: format!("Secret {ns}/{name} not found"),
                    redis_reached: false,
                });
            }
            Err(e) => {
                return Err(Failure {
                    reason: reasons::SECRET_UNREADABLE,
                    message: format!("cannot read Secret {ns}/{name}: {}", kube_reason(&e)),
                    redis_reached: false,
                });
            }
        }
    }
    let value = |sel: &SecretKeySelector, field: &str| -> Result<Vec<u8>, Failure> {
        let secret = &secrets[sel.name.as_str()];
        let data = secret
            .data
            .as_ref()
            .and_then(|d| d.get(&sel.key))
            .map(|b| b.0.clone());
        data.ok_or_else(|| Failure {
            reason: reasons::SECRET_KEY_MISSING,
            message: format!(
                "Secret {ns}/{} has no key {:?} (named by {field})",
                sel.name, sel.key
            ),
            redis_reached: false,
        })
    };
    let text = |sel: &SecretKeySelector, field: &str| -> Result<String, Failure> {
        let bytes = value(sel, field)?;
        let text = String::from_utf8(bytes).map_err(|_| Failure {
            reason: reasons::SECRET_KEY_MISSING,
            message: format!(
                "Secret {ns}/{} key {:?} (named by {field}) is not UTF-8 text",
                sel.name, sel.key
            ),
            redis_reached: false,
        })?;
        Ok(text.trim().to_string())
    };
    let url = match &plan.url {
        UrlSource::Inline(url) => url.clone(),
        UrlSource::Secret(sel) => text(sel, "spec.redis.urlSecretRef")?,
    };
    let url = if plan.tls { force_tls(&url) } else { url };
    let password = match &plan.password {
        Some(sel) => Some(text(sel, "spec.redis.passwordSecretRef")?),
        None => None,
    };
    let ca = match &plan.ca {
        Some(sel) => Some(value(sel, "spec.redis.tls.caSecretRef")?),
        None => None,
    };
    let options = ConnectOptions::new(url)
        .cluster(plan.cluster)
        .password(password)
        .connect_timeout(ctx.settings.connect_timeout)
        .response_timeout(ctx.settings.response_timeout)
        .ca_cert(ca.clone());
    Ok(Endpoint { options, ca })
}

/// `redis://` → `rediss://`, for every URL of a comma-separated list.
pub fn force_tls(url: &str) -> String {
    url.split(',')
        .map(|u| {
            let u = u.trim();
            match u.strip_prefix("redis://") {
                Some(rest) => format!("rediss://{rest}"),
                None => u.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The API server's own words for a failed call (its Status message), or the error.
fn kube_reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// A queue client error as a condition reason and message. The client's messages hold
/// only redacted URLs.
pub fn classify(e: &QueueError) -> Failure {
    let (reason, redis_reached) = match e {
        QueueError::Connect { .. } | QueueError::Unavailable(_) => {
            (reasons::REDIS_UNREACHABLE, false)
        }
        QueueError::Redis { .. } if e.is_transient() => (reasons::REDIS_UNREACHABLE, false),
        QueueError::Auth { .. } => (reasons::AUTH_FAILED, false),
        QueueError::InvalidUrl { .. } => (reasons::INVALID_URL, false),
        QueueError::WrongType { .. } => (reasons::WRONG_TYPE, true),
        QueueError::InvalidArgument { .. } => (reasons::INVALID_SPEC, false),
        QueueError::Redis { .. } | QueueError::Rejected { .. } | QueueError::Protocol { .. } => {
            (reasons::REDIS_ERROR, true)
        }
    };
    Failure {
        reason,
        message: e.to_string(),
        redis_reached,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_rewrites_every_plain_url() {
        assert_eq!(
            force_tls("redis://a:1, rediss://b:2,redis://c:3"),
            "rediss://a:1,rediss://b:2,rediss://c:3"
        );
    }

    #[test]
    fn queue_errors_become_reasons() {
        let wrong = QueueError::WrongType {
            queue: "jq:{a}".into(),
            key: "jq:{a}:pending".into(),
            detail: "key jq:{a}:pending holds a hash, expected a list".into(),
        };
        let f = classify(&wrong);
        assert_eq!((f.reason, f.redis_reached), ("WrongType", true));
        let auth = QueueError::Auth {
            endpoint: "redis://u:***@h:1".into(),
            detail: "invalid username-password pair".into(),
        };
        let f = classify(&auth);
        assert_eq!(f.reason, "AuthFailed");
        assert!(f.message.contains("redis://u:***@h:1"), "{}", f.message);
        let gone = QueueError::Unavailable("redis://h:1: timed out connecting".into());
        assert_eq!(classify(&gone).reason, "RedisUnreachable");
    }

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
                .map(|(_, reason, _)| reason)
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
    fn scaling_raises_events_on_scales_and_on_new_trouble() {
        use super::scaling::Reason;
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
                .map(|(kind, reason, _)| (format!("{kind:?}"), reason))
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
}
