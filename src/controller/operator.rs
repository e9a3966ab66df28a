//! The operator process: the Kubernetes client, leader election, the controller, the
//! HTTP endpoints and a graceful shutdown.
//!
//! Two replicas can run: they compete for a coordination Lease and only the holder runs
//! the controller, so only it writes. A standby is ready (it is doing its job: waiting);
//! the leader is ready once its watch cache has synced. On SIGTERM the controller
//! finishes the reconciles in flight, the Lease is released and the process exits.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::controller::{self, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube_lease_manager::LeaseManagerBuilder;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::http::{self, HttpState};
use super::{Context, Metrics, Settings, error_policy, reconcile};
use crate::crd::JobQueue;

/// The one line printed when no cluster can be found.
pub const NO_CLUSTER: &str = "no Kubernetes cluster configured: found no kubeconfig \
     (KUBECONFIG or ~/.kube/config) and no in-cluster service account";

/// How the operator runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Watch only these namespaces (one controller each, sharing the context); all
    /// namespaces when empty.
    pub namespaces: Vec<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` listen.
    pub http_addr: SocketAddr,
    /// Compete for a Lease so only one replica reconciles.
    pub leader_election: bool,
    pub lease_name: String,
    /// The Lease's namespace; the client's default namespace when `None`.
    pub lease_namespace: Option<String>,
    /// This replica's identity in the Lease and in Events; the host name when `None`.
    pub identity: Option<String>,
    /// How long the Lease holds without renewal.
    pub lease_duration: Duration,
    /// How long before expiry the holder renews.
    pub lease_renew_before: Duration,
    /// Queues reconciled at once at most (0: no limit).
    pub concurrency: u16,
    pub settings: Settings,
}

/// Run until SIGTERM or SIGINT.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kube_config = kube::Config::infer()
        .await
        .map_err(|_| anyhow::anyhow!(NO_CLUSTER))?;
    let server = kube_config.cluster_url.to_string();
    let client = Client::try_from(kube_config)
        .map_err(|e| anyhow::anyhow!("cannot create the Kubernetes client: {e}"))?;

    let apis: Vec<Api<JobQueue>> = if config.namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        config
            .namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    };
    // Per namespace: each may have its own Role.
    for api in &apis {
        if let Err(e) = api.list(&ListParams::default().limit(1)).await {
            let hint = match &e {
                kube::Error::Api(s) if s.code == 404 => {
                    " (is the CRD installed? `jobqueue crd | kubectl apply -f -`)"
                }
                _ => "",
            };
            let scope = match api.namespace() {
                Some(ns) => format!(" in namespace {ns}"),
                None => String::new(),
            };
            anyhow::bail!("cannot list JobQueues{scope} at {server}: {e}{hint}");
        }
    }

    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));

    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::default().register(&mut registry));
    let ready = Arc::new(AtomicBool::new(false));
    let http = http::serve(
        config.http_addr,
        HttpState {
            registry: Arc::new(registry),
            ready: ready.clone(),
        },
        shutdown.clone(),
    )
    .await?;
    info!(addr = %config.http_addr, "serving /metrics, /healthz and /readyz");

    let identity = config.identity.clone().unwrap_or_else(default_identity);
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics,
        Some(identity.clone()),
        config.settings.clone(),
    ));

    let result = if config.leader_election {
        lead_then_run(
            &config,
            client,
            identity,
            apis,
            ctx,
            ready,
            shutdown.clone(),
        )
        .await
    } else {
        info!(namespaces = ?config.namespaces, "starting the controller (no leader election)");
        run_controllers(apis, ctx, ready, shutdown.clone(), config.concurrency).await;
        Ok(())
    };
    shutdown.cancel();
    let _ = http.await;
    info!("stopped");
    result
}

/// Wait for the Lease, run the controller while holding it, stand by again when it is
/// lost; release it on shutdown.
async fn lead_then_run(
    config: &Config,
    client: Client,
    identity: String,
    apis: Vec<Api<JobQueue>>,
    ctx: Arc<Context>,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let lease_ns = config
        .lease_namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let manager = LeaseManagerBuilder::new(client, &config.lease_name)
        .with_namespace(&lease_ns)
        .with_identity(&identity)
        .with_duration(config.lease_duration.as_secs().max(2))
        .with_grace(
            config
                .lease_renew_before
                .as_secs()
                .clamp(1, config.lease_duration.as_secs().max(2) - 1),
        )
        .build()
        .await
        .with_context(|| format!("cannot use the Lease {lease_ns}/{}", config.lease_name))?;
    let (mut leader, task) = manager.watch().await;
    info!(lease = %format!("{lease_ns}/{}", config.lease_name), identity = %identity, "waiting for leadership");
    ready.store(true, Ordering::Release);

    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            got = leader.wait_for(|is_leader| *is_leader) => {
                if got.is_err() {
                    error!("leader election stopped");
                    break;
                }
            }
        }
        info!(identity = %identity, "became the leader: starting the controller");
        ready.store(false, Ordering::Release);
        let stop = shutdown.child_token();
        let watch_loss = {
            let mut leader = leader.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = leader.wait_for(|is_leader| !*is_leader) => stop.cancel(),
                    _ = stop.cancelled() => {}
                }
            })
        };
        run_controllers(
            apis.clone(),
            ctx.clone(),
            ready.clone(),
            stop.clone(),
            config.concurrency,
        )
        .await;
        stop.cancel();
        let _ = watch_loss.await;
        if shutdown.is_cancelled() {
            break;
        }
        stand_down(&ctx);
        warn!(identity = %identity, "lost the leadership: standing by");
        ready.store(true, Ordering::Release);
    }
    // Closing the channel makes the manager release the Lease.
    drop(leader);
    match task.await {
        Ok(Ok(_)) => info!("released the Lease"),
        Ok(Err(e)) => warn!(error = %e, "could not release the Lease"),
        Err(e) => warn!(error = %e, "the leader election task failed"),
    }
    Ok(())
}

/// Forget what the leader kept about the queues, once the Lease is lost: the metrics
/// (the new leader publishes the queues now: a standby serving its last values would
/// show two diverging series per queue) and each queue's state. The scale history and
/// the failures are stale by the time this replica leads again (the other leader scaled
/// meanwhile), so it starts as a replica taking over does, with a fresh window.
fn stand_down(ctx: &Context) {
    ctx.retain(&HashSet::new());
}

/// One controller per `apis` (a namespace each, or all namespaces), concurrently and
/// sharing `ctx`, until `stop`; `ready` once every one's cache has synced. A reflector
/// store holds what ONE watch lists, and RBAC may grant each namespace alone, hence a
/// watch (and caches) per namespace.
pub async fn run_controllers(
    apis: Vec<Api<JobQueue>>,
    ctx: Arc<Context>,
    ready: Arc<AtomicBool>,
    stop: CancellationToken,
    concurrency: u16,
) {
    if apis.len() == 1 {
        let api = apis.into_iter().next().expect("one api");
        return run_controller(api, ctx, ready, stop, concurrency).await;
    }
    let unsynced = Arc::new(AtomicUsize::new(apis.len()));
    let runs = apis.into_iter().map(|api| {
        let ready = ready.clone();
        let unsynced = unsynced.clone();
        let synced_once = AtomicBool::new(false);
        let on_synced = move || {
            if !synced_once.swap(true, Ordering::AcqRel)
                && unsynced.fetch_sub(1, Ordering::AcqRel) == 1
            {
                ready.store(true, Ordering::Release);
            }
        };
        run_watch(api, ctx.clone(), on_synced, stop.clone(), concurrency)
    });
    futures::future::join_all(runs).await;
}

/// The controller, until `stop`: a watch filtered by generation and the `jobqueue.dev/`
/// annotations (status writes do not trigger it; the requeue after `reaper.interval`
/// drives the work), reconciles, and the readiness flag once the cache has synced. With
/// `settings.watch_related`, the Secrets, HPAs, Deployments and StatefulSets are watched
/// too, into the caches the reconciles read and as triggers of the queues they concern
/// ([`super::caches`]).
pub async fn run_controller(
    api: Api<JobQueue>,
    ctx: Arc<Context>,
    ready: Arc<AtomicBool>,
    stop: CancellationToken,
    concurrency: u16,
) {
    let on_synced = move || {
        ready.store(true, Ordering::Release);
    };
    run_watch(api, ctx, on_synced, stop, concurrency).await;
}

/// [`run_controller`] of one watch, calling `on_synced` on each synced list.
async fn run_watch(
    api: Api<JobQueue>,
    ctx: Arc<Context>,
    on_synced: impl Fn() + Send + Sync + 'static,
    stop: CancellationToken,
    concurrency: u16,
) {
    let watch_ns = api.namespace().map(str::to_string);
    let (reader, writer) = reflector::store();
    ctx.set_jobqueues_for(watch_ns.as_deref(), reader.clone());
    let synced_once = AtomicBool::new(false);
    let synced = {
        let reader = reader.clone();
        let watch_ns = watch_ns.clone();
        move |event: &Result<watcher::Event<JobQueue>, watcher::Error>| {
            // The initial list is in the cache (reflect ran first).
            if let Ok(watcher::Event::InitDone) = event {
                if !synced_once.swap(true, Ordering::AcqRel) {
                    info!(namespace = ?watch_ns, queues = reader.len(), "watch cache synced");
                }
                on_synced();
            }
        }
    };
    let stream = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .reflect(writer)
        .inspect(synced)
        .applied_objects()
        .predicate_filter(super::pause::spec_or_annotations, Default::default());
    let sweep = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(60));
            loop {
                every.tick().await;
                // The queues of every watched namespace, not only this watch's.
                ctx.retain(&ctx.watched_queues());
            }
        })
    };

    // The Secrets, HPAs and targets: caches the reconciles read, and triggers.
    let watched = Controller::for_stream(stream, reader.clone());
    let watched = if ctx.settings.watch_related {
        let keda = super::caches::keda_installed(&ctx.client, watch_ns.as_deref()).await;
        let (watched, caches) =
            super::caches::watch(watched, &ctx.client, watch_ns.as_deref(), reader, keda);
        ctx.set_caches_for(watch_ns.as_deref(), caches);
        watched
    } else {
        watched
    };
    let forget_caches = ctx.clone();

    watched
        .with_config(controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((queue, _)) => debug!(name = %queue.name, "reconciled"),
                // Reconcile failures are logged by the error policy.
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => warn!(error = %e, "controller"),
            }
        })
        .await;
    sweep.abort();
    forget_caches.forget_caches_for(watch_ns.as_deref());
}

/// Cancels `shutdown` on SIGTERM or SIGINT, listening from the call on.
fn cancel_on_signal(shutdown: CancellationToken) -> impl Future<Output = ()> + Send + 'static {
    let signal = crate::shutdown::shutdown_signal();
    async move {
        let signal = signal.await;
        info!(%signal, "shutting down");
        shutdown.cancel();
    }
}

/// The pod's name (`POD_NAME`, `HOSTNAME`) or the host name, with a random suffix so two
/// processes on one host differ.
fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "jobqueue-operator".to_string());
    if std::env::var("POD_NAME").is_ok() {
        host
    } else {
        format!("{host}-{}", &crate::queue::new_token()[..8])
    }
}

#[cfg(test)]
mod tests {
    use ::http::{Request, Response};
    use k8s_openapi::jiff::Timestamp;
    use kube::Resource;
    use kube::client::Body;

    use super::super::metrics::QueueLabels;
    use super::*;
    use crate::crd::JobQueueSpec;
    use crate::queue::QueueStats;

    /// A replica that loses the Lease and later leads again starts with a fresh scale
    /// window and no backoff, as one taking over for the first time does: the other
    /// leader scaled meanwhile, and this one's history says nothing about it.
    #[tokio::test]
    async fn losing_the_lease_forgets_the_queues() {
        let (service, _) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let ctx = Context::new(client, Arc::default(), None, Settings::default());
        let mut jq = JobQueue::new("emails", JobQueueSpec::new("redis://r:6379", "emails"));
        jq.meta_mut().namespace = Some("default".into());
        jq.meta_mut().uid = Some("uid-1".into());
        let labels = QueueLabels::new("default", "emails");
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        ctx.with_recommendations(&jq, |r| r.record(now, 8));
        for _ in 0..3 {
            ctx.failed(&jq);
        }
        ctx.metrics
            .observed(&labels, &QueueStats::default(), &Default::default());

        stand_down(&ctx);

        assert!(
            ctx.with_recommendations(&jq, |r| r.is_empty()),
            "the scale recommendations of the last leadership survived"
        );
        assert_eq!(
            ctx.failed(&jq),
            ctx.settings.backoff_initial,
            "the failures of the last leadership survived"
        );
        assert!(
            ctx.metrics.pending.get(&labels).is_none(),
            "the metrics of the last leadership survived"
        );
    }

    /// With a watch per namespace, one watch's sweep keeps the queues of the others: it
    /// keeps what any watched namespace's cache holds.
    #[tokio::test]
    async fn a_sweep_keeps_the_queues_of_every_watched_namespace() {
        let (service, _) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let ctx = Context::new(client, Arc::default(), None, Settings::default());
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let mut queues = Vec::new();
        for ns in ["a", "b"] {
            let mut jq = JobQueue::new("work", JobQueueSpec::new("redis://r:6379", "work"));
            jq.meta_mut().namespace = Some(ns.into());
            jq.meta_mut().uid = Some(format!("uid-{ns}"));
            let (reader, mut writer) = reflector::store();
            writer.apply_watcher_event(&watcher::Event::Apply(jq.clone()));
            ctx.set_jobqueues_for(Some(ns), reader);
            ctx.with_recommendations(&jq, |r| r.record(now, 8));
            queues.push(jq);
        }

        ctx.retain(&ctx.watched_queues());

        for jq in &queues {
            assert!(
                !ctx.with_recommendations(jq, |r| r.is_empty()),
                "the sweep forgot {:?}",
                jq.meta().namespace
            );
        }
    }
}
