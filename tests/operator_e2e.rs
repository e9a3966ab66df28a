//! The operator binary, run from outside against a stand-in API server over real HTTP
//! and a real Redis: list and watch, Secrets, the Lease of leader election, the status
//! subresource, Events, /readyz and /metrics, and a clean exit on SIGTERM.

mod support;

use std::time::Duration;

use jobqueue::queue::NewJob;
use serde_json::{Value, json};
use support::redis::{RedisServer, wait_past};
use support::standin::{OperatorProcess, StandIn, http_get};

const CRD: &str = "/apis/jobqueue.dev/v1alpha1";
const PASSWORD: &str = "s3cret-pass-e2e";

fn condition<'a>(jq: &'a Value, kind: &str) -> Option<&'a Value> {
    jq["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_binary_keeps_a_queue_against_a_real_http_api() {
    let redis = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let mut conn = redis.conn();
    let _: () = redis::cmd("AUTH").arg(PASSWORD).query(&mut conn).unwrap();
    let queue = {
        let r = jobqueue::queue::Redis::connect(
            &jobqueue::queue::ConnectOptions::new(redis.url()).password(Some(PASSWORD.into())),
        )
        .await
        .unwrap();
        jobqueue::queue::Queue::new(r, "jq", "e2e").unwrap()
    };
    // 5 jobs: 2 claimed with leases that run out (the reaper must requeue them), 3 waiting.
    let jobs = (0..5)
        .map(|i| NewJob::new(format!("{i}").into_bytes()))
        .collect();
    queue.enqueue_many(jobs).await.unwrap();
    let leases = queue
        .claim(2, "crashed-worker", Some(Duration::from_millis(1)))
        .await
        .unwrap();
    wait_past(&mut conn, leases[1].lease_until);

    let api = StandIn::start().await;
    api.put(
        "/api/v1",
        "secrets",
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "redis-e2e", "namespace": "jobs"},
            "data": {
                "url": b64(&redis.url()),
                "password": b64(PASSWORD),
            }
        }),
    );
    let spec = json!({
        "redis": {
            "urlSecretRef": {"name": "redis-e2e", "key": "url"},
            "passwordSecretRef": {"name": "redis-e2e", "key": "password"}
        },
        "hashTag": "e2e",
        "visibilityTimeout": "30s",
        "maxAttempts": 4,
        "reaper": {"interval": "1s", "batchSize": 100}
    });
    api.put(
        CRD,
        "jobqueues",
        json!({
            "apiVersion": "jobqueue.dev/v1alpha1", "kind": "JobQueue",
            "metadata": {"name": "e2e", "namespace": "jobs"},
            "spec": spec.clone()
        }),
    );

    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--identity",
        "op-1",
        "--lease-namespace",
        "jobs",
        "--log-format",
        "json",
    ];
    let mut op = OperatorProcess::start(
        &api,
        "jobs",
        dir.path(),
        &args,
        &[("JOBQUEUE_LOG", "debug")],
    );

    // Leader election: the operator takes the Lease before it reconciles.
    // (The Lease may be created empty first and taken by a later update.)
    let lease = op
        .wait_for("the Lease held by op-1")
        .until(async || {
            let lease = api.get(
                "/apis/coordination.k8s.io/v1",
                "leases",
                "jobs",
                "jobqueue-operator",
            )?;
            (lease["spec"]["holderIdentity"] == "op-1").then_some(lease)
        })
        .await;
    assert_eq!(lease["spec"]["holderIdentity"], "op-1");

    // The status shows the counts of the real Redis, with the expired leases requeued.
    let jq = op
        .wait_for("a Ready status")
        .until(async || {
            let jq = api.get(CRD, "jobqueues", "jobs", "e2e")?;
            (condition(&jq, "Ready")?["status"] == "True").then_some(jq)
        })
        .await;
    let st = &jq["status"];
    assert_eq!(st["pending"], 5, "{st}");
    assert_eq!(st["processing"], 0, "{st}");
    assert_eq!(st["reaped"], 2, "{st}");
    assert_eq!(st["observedGeneration"], 1, "{st}");
    assert_eq!(condition(&jq, "RedisAvailable").unwrap()["status"], "True");
    assert!(st["lastReapTime"].is_string(), "{st}");
    // The settings went into meta.
    let vis: String = redis::cmd("HGET")
        .arg("jq:{e2e}:meta")
        .arg("visibility_timeout_ms")
        .query(&mut conn)
        .unwrap();
    assert_eq!(vis, "30000");

    // /readyz and /metrics over HTTP.
    op.wait_for("/readyz 200")
        .within(Duration::from_secs(10))
        .until(async || http_get(&op.metrics, "/readyz").await.map(|r| r.0) == Some(200))
        .await;
    // The reconcile writes the status before it records its metrics: the scrape that
    // follows may still be between the two.
    op.wait_for("/metrics with pending 5")
        .within(Duration::from_secs(10))
        .until(async || {
            http_get(&op.metrics, "/metrics").await.is_some_and(|r| {
                r.1.contains("jobqueue_pending{namespace=\"jobs\",name=\"e2e\"} 5")
            })
        })
        .await;

    // The periodic requeue follows Redis: more work shows up without any API event.
    queue.enqueue(NewJob::new(&b"late"[..])).await.unwrap();
    op.wait_for("pending 6")
        .until(async || {
            let jq = api.get(CRD, "jobqueues", "jobs", "e2e")?;
            (jq["status"]["pending"] == 6).then_some(())
        })
        .await;

    // A spec change (new generation) to an unreachable Redis: a condition and a Warning Event.
    let dead_port = 1; // nothing listens on port 1
    api.put(
        "/api/v1",
        "secrets",
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "redis-e2e", "namespace": "jobs"},
            "data": {"url": b64(&format!("redis://127.0.0.1:{dead_port}")), "password": b64(PASSWORD)}
        }),
    );
    let mut spec2 = spec.clone();
    spec2["maxAttempts"] = json!(5);
    api.put(
        CRD,
        "jobqueues",
        json!({
            "apiVersion": "jobqueue.dev/v1alpha1", "kind": "JobQueue",
            "metadata": {"name": "e2e", "namespace": "jobs"},
            "spec": spec2
        }),
    );
    let jq = op
        .wait_for("RedisAvailable=False at generation 2")
        .until(async || {
            // The Secret's change alone may be reconciled first (still generation 1).
            let jq = api.get(CRD, "jobqueues", "jobs", "e2e")?;
            (condition(&jq, "RedisAvailable")?["status"] == "False"
                && jq["status"]["observedGeneration"] == 2)
                .then_some(jq)
        })
        .await;
    let cond = condition(&jq, "RedisAvailable").unwrap();
    assert_eq!(cond["reason"], "RedisUnreachable", "{cond}");
    assert!(
        cond["message"]
            .as_str()
            .unwrap()
            .contains(&format!("127.0.0.1:{dead_port}:")),
        "{cond}"
    );
    assert_eq!(jq["status"]["observedGeneration"], 2);
    let warning = op
        .wait_for("a Warning event")
        .until(async || {
            api.all("events")
                .into_iter()
                .find(|e| e["type"] == "Warning")
        })
        .await;
    assert_eq!(warning["regarding"]["name"], "e2e", "{warning}");

    // Secrets never leave the operator: not in any request it made, nor in its logs.
    for req in api.log() {
        assert!(
            !req.body.contains(PASSWORD),
            "password sent in {} {}",
            req.method,
            req.path
        );
    }
    assert!(
        !op.logs().contains(PASSWORD),
        "password in the operator's log"
    );
    // Its own status writes did not make it read the JobQueue again and again: status
    // patches are few, spaced by the reaper interval (no hot loop).
    let patches = api
        .log()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/status"))
        .count();
    assert!(patches >= 3, "{patches}");

    // SIGTERM: a clean, prompt exit.
    let status = op.terminate(Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        op.logs()
    );
}

fn b64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = (chunk[0] as u32) << 16
            | (*chunk.get(1).unwrap_or(&0) as u32) << 8
            | *chunk.get(2).unwrap_or(&0) as u32;
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}
