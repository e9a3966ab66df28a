//! One reconcile of one `JobQueue`:
//!
//! 1. **validate** the spec into a plan (pure; an invalid spec is reported as
//!    `Ready=False, reason InvalidSpec` and waits for the next spec change);
//! 2. **read** the Secrets it names and connect (one client per endpoint, shared);
//! 3. **apply** to the queue: check its keys' types, write its settings into `meta`,
//!    reap expired leases within a budget, read its stats in one round trip;
//! 4. **build** the status (pure, from the previous status and what was seen);
//! 5. **write** the status only when it changed (server-side apply), then publish the
//!    Events worth a person's attention; requeue after `reaper.interval`.
//!
//! A failure in 2 or 3 becomes a condition with a reason and a message (never a secret),
//! a Warning Event, and a backoff for this queue alone.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::endpoints::Endpoint;
use super::metrics::QueueLabels;
use super::status::{self, Failure, Observation, reasons};
use super::validate::{self, EndpointPlan, QueuePlan, UrlSource};
use super::{Context, Error, FIELD_MANAGER, Result};
use crate::crd::{API_VERSION, JobQueue, JobQueueStatus, SecretKeySelector};
use crate::queue::{ConnectOptions, Error as QueueError, Queue};

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

    let plan = match validate::plan(&jq.spec) {
        Ok(plan) => plan,
        Err(invalid) => {
            let message = invalid.to_string();
            warn!(namespace = %ns, name = %name, error = %message, "invalid spec");
            let new = status::invalid_spec(prev, generation, &message, status::now());
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
            let new = status::observed(prev, generation, &obs, status::now());
            write_status(&api, &name, prev, &new).await?;
            ctx.metrics.observed(&labels, &obs.stats, &obs.reaped);
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
            debug!(namespace = %ns, name = %name, pending = new.pending, "reconciled");
            Ok(Action::requeue(plan.interval))
        }
        Err(failure) => {
            let new = status::failed(prev, generation, &failure, status::now());
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
                status::format_duration(obs.visibility_timeout)
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
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(truncate_note(note)),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &jq.object_ref(&())).await {
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
    let used = |e: QueueError| classify(&e);
    queue.check_key_types().await.map_err(used)?;
    queue.configure(&plan.settings).await.map_err(used)?;
    let reaped = queue
        .reap_expired(plan.batch, ctx.settings.reap_budget)
        .await
        .map_err(used)?;
    let stats = queue.stats().await.map_err(used)?;
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
    fn long_notes_are_cut_on_a_char_boundary() {
        let note = truncate_note("é".repeat(600));
        assert!(note.len() <= 1003 && note.ends_with('…'));
        assert_eq!(truncate_note("short".into()), "short");
    }
}
