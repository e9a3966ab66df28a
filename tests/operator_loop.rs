//! The controller loop on kube's mock API server: it lists and watches JobQueues, turns
//! ready once the cache has synced, reconciles on a new generation, and does not wake
//! itself with its own status writes (a status-only change is filtered out).

mod common;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::RedisServer;
use http::{Method, Request, Response};
use http_body::Frame;
use jobqueue::controller::operator::run_controller;
use jobqueue::controller::{Context, Metrics, Settings};
use jobqueue::crd::{JobQueue, JobQueueSpec, JobQueueStatus};
use jobqueue::queue::NewJob;
use kube::api::Api;
use kube::client::Body;
use kube::{Client, Resource};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";

/// A response body fed chunk by chunk: a watch stays open while the sender lives.
struct ChannelBody(mpsc::UnboundedReceiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}

fn full(value: &impl serde::Serialize) -> Response<ChannelBody> {
    let (tx, rx) = mpsc::unbounded_channel();
    tx.send(Bytes::from(serde_json::to_vec(value).unwrap()))
        .unwrap();
    Response::new(ChannelBody(rx))
}

type Handle = tower_test::mock::Handle<Request<Body>, Response<ChannelBody>>;

async fn next(
    handle: &mut Handle,
    what: &str,
) -> (
    Method,
    String,
    Value,
    tower_test::mock::SendResponse<Response<ChannelBody>>,
) {
    let (request, send) = tokio::time::timeout(Duration::from_secs(30), handle.next_request())
        .await
        .unwrap_or_else(|_| panic!("{what} never came"))
        .unwrap_or_else(|| panic!("{what} never came: the client is gone"));
    let method = request.method().clone();
    let uri = request.uri().to_string();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (method, uri, body, send)
}

fn queue(name: &str, url: &str, generation: i64) -> JobQueue {
    let mut spec = JobQueueSpec::new(url, name);
    spec.reaper.interval = "1h".into();
    let mut jq = JobQueue::new(name, spec);
    let meta = jq.meta_mut();
    meta.namespace = Some(NS.into());
    meta.uid = Some(format!("uid-{name}"));
    meta.generation = Some(generation);
    meta.resource_version = Some(format!("{}", 10 + generation));
    jq
}

fn watch_event(kind: &str, object: &JobQueue) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap();
    line.push(b'\n');
    Bytes::from(line)
}

/// Accept a status patch of `jq`: returns the status it carried and answers with the
/// object holding it.
async fn status_patch(handle: &mut Handle, jq: &JobQueue) -> JobQueueStatus {
    let what = format!("the status patch of {}", jq.meta().name.as_deref().unwrap());
    let (method, uri, body, send) = next(handle, &what).await;
    assert_eq!(method, Method::PATCH, "{uri}");
    assert!(
        uri.starts_with(&format!(
            "/apis/jobqueue.dev/v1alpha1/namespaces/{NS}/jobqueues/{}/status?",
            jq.meta().name.as_deref().unwrap()
        )),
        "{uri}"
    );
    let status: JobQueueStatus = serde_json::from_value(body["status"].clone()).unwrap();
    let mut applied = jq.clone();
    applied.status = Some(status.clone());
    send.send_response(full(&applied));
    status
}

#[tokio::test]
async fn the_loop_reconciles_new_generations_only() {
    let redis = RedisServer::start();
    let q = redis.queue("a").await;
    q.enqueue(NewJob::new("one")).await.unwrap();

    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<ChannelBody>>();
    let client = Client::new(service, NS);
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::default().register(&mut registry));
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics,
        Some("test".into()),
        Settings::default(),
    ));
    let ready = Arc::new(AtomicBool::new(false));
    let stop = CancellationToken::new();
    let api: Api<JobQueue> = Api::namespaced(client, NS);
    let controller = tokio::spawn(run_controller(api, ctx, ready.clone(), stop.clone(), 0));

    // The initial list: one queue.
    let a1 = queue("a", &redis.url(), 1);
    let (method, uri, _, send) = next(&mut handle, "the list").await;
    assert_eq!(method, Method::GET);
    assert!(
        uri.starts_with(&format!(
            "/apis/jobqueue.dev/v1alpha1/namespaces/{NS}/jobqueues?"
        )) && !uri.contains("watch=true"),
        "{uri}"
    );
    send.send_response(full(&json!({
        "apiVersion": "jobqueue.dev/v1alpha1",
        "kind": "JobQueueList",
        "metadata": {"resourceVersion": "11"},
        "items": [a1],
    })));

    // Then the watch and the first reconcile, in either order.
    let mut watch = None;
    let mut first = None;
    for _ in 0..2 {
        let (method, uri, body, send) = next(&mut handle, "the watch or the status patch").await;
        if uri.contains("watch=true") {
            assert_eq!(method, Method::GET);
            assert!(uri.contains("resourceVersion=11"), "{uri}");
            let (tx, rx) = mpsc::unbounded_channel();
            send.send_response(Response::new(ChannelBody(rx)));
            watch = Some(tx);
        } else {
            assert_eq!(method, Method::PATCH, "{uri}");
            let status: JobQueueStatus = serde_json::from_value(body["status"].clone()).unwrap();
            let mut applied = a1.clone();
            applied.status = Some(status.clone());
            send.send_response(full(&applied));
            first = Some(status);
        }
    }
    let watch = watch.expect("a watch");
    let first = first.expect("a status patch");
    assert_eq!((first.pending, first.observed_generation), (1, Some(1)));

    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready.load(Ordering::Acquire) {
        assert!(
            Instant::now() < deadline,
            "never ready after the cache synced"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Our own status write comes back as a MODIFIED event with the same generation.
    // Were it let through, the reconcile would write the true count over this one.
    q.enqueue(NewJob::new("two")).await.unwrap();
    let mut written = a1.clone();
    written.status = Some(first.clone());
    written.meta_mut().resource_version = Some("12".into());
    watch.send(watch_event("MODIFIED", &written)).unwrap();

    // A new queue, then a spec change of the first: each is reconciled once.
    let b1 = queue("b", &redis.url(), 1);
    watch.send(watch_event("ADDED", &b1)).unwrap();
    let b_status = status_patch(&mut handle, &b1).await;
    assert_eq!(b_status.observed_generation, Some(1));

    let mut a2 = written.clone();
    a2.spec.visibility_timeout = "2m".into();
    a2.meta_mut().generation = Some(2);
    a2.meta_mut().resource_version = Some("14".into());
    watch.send(watch_event("MODIFIED", &a2)).unwrap();
    let second = status_patch(&mut handle, &a2).await;
    assert_eq!(second.observed_generation, Some(2));
    assert_eq!(
        second.pending, 2,
        "the reconcile of generation 2 sees both jobs"
    );
    assert_eq!(
        q.settings().await.unwrap().visibility_timeout,
        Duration::from_secs(120)
    );

    let text = jobqueue::controller::metrics::encode(&registry);
    let line = r#"jobqueue_reconcile_runs_total{namespace="default",name="a"} 2"#;
    assert!(
        text.contains(line),
        "the status-only event woke the controller:\n{text}"
    );

    // Shutdown: the loop ends, with no further request.
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), controller)
        .await
        .expect("the controller stops")
        .unwrap();
    drop(watch);
    // The controller held the last client: its service is closed now.
    let after = tokio::time::timeout(Duration::from_secs(10), handle.next_request())
        .await
        .expect("the client is released when the controller stops");
    if let Some((request, _)) = after {
        panic!("unexpected request: {} {}", request.method(), request.uri());
    }
}
