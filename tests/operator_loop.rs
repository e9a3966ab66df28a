//! The controller loop on kube's mock API server: it lists and watches JobQueues, turns
//! ready once the cache has synced, reconciles on a new generation, and does not wake
//! itself with its own status writes (a status-only change is filtered out).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{Method, StatusCode};
use jobqueue::controller::operator::run_controller;
use jobqueue::crd::JobQueue;
use jobqueue::queue::NewJob;
use kube::Resource;
use kube::api::Api;
use serde_json::json;
use support::eventually::Wait;
use support::fixtures::{JobQueueExt, NS};
use support::mock_api::{json_response, test_context};
use support::redis::RedisServer;
use tokio_util::sync::CancellationToken;

/// A queue at `generation`, its reaper quiet for the length of the test.
fn queue(name: &str, url: &str, generation: i64) -> JobQueue {
    support::fixtures::queue(name, url, name)
        .edit(|s| s.reaper.interval = "1h".into())
        .at_generation(generation, &format!("{}", 10 + generation))
}

#[tokio::test]
async fn the_loop_reconciles_new_generations_only() {
    let redis = RedisServer::start();
    let q = redis.queue("a").await;
    q.enqueue(NewJob::new("one")).await.unwrap();

    let (ctx, mut handle, registry) = test_context();
    let client = ctx.client.clone();
    let ready = Arc::new(AtomicBool::new(false));
    let stop = CancellationToken::new();
    let api: Api<JobQueue> = Api::namespaced(client, NS);
    let controller = tokio::spawn(run_controller(api, ctx, ready.clone(), stop.clone(), 0));

    // The initial list: one queue.
    let a1 = queue("a", &redis.url(), 1);
    let list = handle.next("the list").await;
    assert_eq!(list.method, Method::GET);
    assert!(
        list.uri.starts_with(&format!(
            "/apis/jobqueue.dev/v1alpha1/namespaces/{NS}/jobqueues?"
        )) && !list.uri.contains("watch=true"),
        "{}",
        list.uri
    );
    list.respond(json_response(
        StatusCode::OK,
        &json!({
            "apiVersion": "jobqueue.dev/v1alpha1",
            "kind": "JobQueueList",
            "metadata": {"resourceVersion": "11"},
            "items": [a1],
        }),
    ));

    // Then the watch and the first reconcile, in either order.
    let mut watch = None;
    let mut first = None;
    for _ in 0..2 {
        let request = handle.next("the watch or the status patch").await;
        if request.uri.contains("watch=true") {
            assert_eq!(request.method, Method::GET);
            assert!(
                request.uri.contains("resourceVersion=11"),
                "{}",
                request.uri
            );
            watch = Some(request.respond_watch());
        } else {
            first = Some(request.status_patch(&a1));
        }
    }
    let watch = watch.expect("a watch");
    let first = first.expect("a status patch");
    assert_eq!((first.pending, first.observed_generation), (1, Some(1)));

    Wait::for_("ready after the cache synced")
        .within(Duration::from_secs(10))
        .every(Duration::from_millis(5))
        .until(async || ready.load(Ordering::Acquire))
        .await;

    // Our own status write comes back as a MODIFIED event with the same generation.
    // Were it let through, the reconcile would write the true count over this one.
    q.enqueue(NewJob::new("two")).await.unwrap();
    let mut written = a1.clone();
    written.status = Some(first.clone());
    written.meta_mut().resource_version = Some("12".into());
    watch.send("MODIFIED", &written);

    // A new queue, then a spec change of the first: each is reconciled once.
    let b1 = queue("b", &redis.url(), 1);
    watch.send("ADDED", &b1);
    let b_status = handle.status_patch(&b1).await;
    assert_eq!(b_status.observed_generation, Some(1));

    let mut a2 = written.clone();
    a2.spec.visibility_timeout = "2m".into();
    a2.meta_mut().generation = Some(2);
    a2.meta_mut().resource_version = Some("14".into());
    watch.send("MODIFIED", &a2);
    let second = handle.status_patch(&a2).await;
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
    handle.expect_released().await;
}
