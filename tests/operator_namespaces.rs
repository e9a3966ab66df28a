//! The operator binary watching several namespaces (`--namespace a,b`) against the
//! stand-in API server and a real Redis: one watch per namespace, the queues of both
//! kept, another namespace never asked about, and ready once both watches synced.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::redis::RedisServer;
use support::standin::{OperatorProcess, StandIn, http_get};

const CRD: &str = "/apis/jobqueue.dev/v1alpha1";

fn ready(jq: &Value) -> bool {
    jq["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_watches_the_namespaces_it_is_given_and_no_other() {
    let redis = RedisServer::start();
    let api = StandIn::start().await;
    for ns in ["a", "b", "c"] {
        api.put(
            "/api/v1",
            "secrets",
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "redis", "namespace": ns},
                "data": {"url": b64(&redis.url())}
            }),
        );
        api.put(
            CRD,
            "jobqueues",
            json!({
                "apiVersion": "jobqueue.dev/v1alpha1", "kind": "JobQueue",
                "metadata": {"name": "work", "namespace": ns},
                "spec": {
                    "redis": {"urlSecretRef": {"name": "redis", "key": "url"}},
                    "hashTag": format!("ns-{ns}"),
                    "reaper": {"interval": "1s", "batchSize": 100}
                }
            }),
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let op = OperatorProcess::start(
        &api,
        "a",
        dir.path(),
        &[
            "--namespace",
            "a,b",
            "--identity",
            "op-ns",
            "--lease-namespace",
            "a",
        ],
        &[],
    );

    for ns in ["a", "b"] {
        op.wait_for(&format!("a Ready status of {ns}/work"))
            .until(async || {
                let jq = api.get(CRD, "jobqueues", ns, "work")?;
                ready(&jq).then_some(())
            })
            .await;
    }
    op.wait_for("/readyz 200")
        .within(Duration::from_secs(10))
        .until(async || http_get(&op.metrics, "/readyz").await.map(|r| r.0) == Some(200))
        .await;
    // c is never reconciled: the operator does not even list or watch it.
    let c = api.get(CRD, "jobqueues", "c", "work").unwrap();
    assert!(
        c.get("status").is_none_or(Value::is_null),
        "c got a status: {c}"
    );
    for req in api.log() {
        assert!(
            !req.path.contains("/namespaces/c/"),
            "a request for namespace c: {} {}",
            req.method,
            req.path
        );
        // No cluster-wide list or watch: the Roles are per namespace.
        assert!(
            req.path.contains("/namespaces/") || !req.path.ends_with("/jobqueues"),
            "a cluster-wide request: {} {}?{}",
            req.method,
            req.path,
            req.query
        );
    }
    // One Lease for the process.
    let lease = api
        .get(
            "/apis/coordination.k8s.io/v1",
            "leases",
            "a",
            "jobqueue-operator",
        )
        .expect("the Lease in a");
    assert_eq!(lease["spec"]["holderIdentity"], "op-ns", "{lease}");
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
