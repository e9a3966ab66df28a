//! The operator binary, run from outside against a stand-in API server over real HTTP
//! and a real Redis: list and watch, Secrets, the Lease of leader election, the status
//! subresource, Events, /readyz and /metrics, and a clean exit on SIGTERM.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use jobqueue::queue::NewJob;
use serde_json::{Value, json};
use support::redis::{RedisServer, free_port, wait_past};
use support::standin::StandIn;

const CRD: &str = "/apis/jobqueue.dev/v1alpha1";
const PASSWORD: &str = "s3cret-pass-e2e";

struct Operator {
    child: Child,
    metrics: String,
    stderr: std::path::PathBuf,
}

impl Operator {
    fn start(api: &StandIn, dir: &std::path::Path) -> Operator {
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, api.kubeconfig("jobs")).unwrap();
        let metrics = format!("127.0.0.1:{}", free_port());
        let stderr = dir.join("operator.log");
        let child = Command::new(env!("CARGO_BIN_EXE_jobqueue"))
            .args(["operator", "--metrics-addr", &metrics, "--identity", "op-1"])
            .args(["--lease-namespace", "jobs", "--log-format", "json"])
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("RUST_LOG")
            .env("JOBQUEUE_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("start operator");
        Operator {
            child,
            metrics,
            stderr,
        }
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll until `check` returns Some, failing with the operator's log after `secs`.
async fn eventually<T>(
    op: &Operator,
    secs: u64,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; operator log:\n{}",
            op.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, out))
}

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
    let op = Operator::start(&api, dir.path());

    // Leader election: the operator takes the Lease before it reconciles.
    // (The Lease may be created empty first and taken by a later update.)
    let lease = eventually(&op, 30, "the Lease held by op-1", || {
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
    let jq = eventually(&op, 30, "a Ready status", || {
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while http_get(&op.metrics, "/readyz").await.map(|r| r.0) != Some(200) {
        assert!(tokio::time::Instant::now() < deadline, "/readyz never 200");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = http_get(&op.metrics, "/metrics").await.expect("/metrics").1;
    assert!(
        metrics.contains("jobqueue_pending{namespace=\"jobs\",name=\"e2e\"} 5"),
        "{metrics}"
    );

    // The periodic requeue follows Redis: more work shows up without any API event.
    queue.enqueue(NewJob::new(&b"late"[..])).await.unwrap();
    eventually(&op, 30, "pending 6", || {
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
    let jq = eventually(&op, 30, "RedisAvailable=False", || {
        let jq = api.get(CRD, "jobqueues", "jobs", "e2e")?;
        (condition(&jq, "RedisAvailable")?["status"] == "False").then_some(jq)
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
    let warning = eventually(&op, 30, "a Warning event", || {
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
    let mut op = op;
    unsafe_kill_term(op.child.id());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = op_try_wait(&mut op.child) {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no exit after SIGTERM:\n{}",
            op.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        op.logs()
    );
}

fn op_try_wait(child: &mut Child) -> Option<std::process::ExitStatus> {
    child.try_wait().ok().flatten()
}

fn unsafe_kill_term(pid: u32) {
    let ok = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
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
