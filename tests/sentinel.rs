//! Sentinel and durability: a client that finds the primary through the Sentinels and
//! follows it through a failover (`READONLY` from the demoted primary sends it to the new
//! one, scripts are loaded there again), clear errors for a wrong master name and for
//! no Sentinel reachable, `READONLY` on a plain endpoint as an error (not a retry), and
//! `replicated` durability (`WAIT` after the write) against a real replica.

mod support;

use std::process::Command;
use std::time::Duration;

use jobqueue::queue::{ConnectOptions, Durability, Error, NewJob, Queue, Redis};
use support::redis::{RedisServer, free_port};
use support::sentinel::{MASTER, SentinelSetup};

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_through_sentinel_runs_the_protocol_on_the_primary() {
    let setup = SentinelSetup::start();
    let queue = setup.queue("s1").await;
    assert!(
        queue
            .redis()
            .endpoint()
            .starts_with("sentinel://127.0.0.1:")
    );
    queue.enqueue(NewJob::new("a").id("a")).await.unwrap();
    let lease = queue.claim_one("w", None).await.unwrap().expect("a job");
    assert_eq!(lease.id.as_bytes(), b"a");
    assert!(queue.ack(&lease).await.unwrap());
    // It ran on the primary the Sentinels name.
    let primary = setup.primary_port();
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{primary}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let acked: i64 = redis::cmd("HGET")
        .arg("jq:{s1}:stats")
        .arg("acked")
        .query(&mut conn)
        .unwrap_or(0);
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.acked, 1);
    assert!(acked <= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_the_same_client_goes_on_against_the_new_primary() {
    let setup = SentinelSetup::start();
    let queue = setup.queue("s2").await;
    queue.load_scripts().await.unwrap();
    let ids: Vec<String> = (0..20).map(|i| format!("j{i}")).collect();
    queue
        .enqueue_many(
            ids.iter()
                .map(|id| NewJob::new("x").id(id.clone()))
                .collect(),
        )
        .await
        .unwrap();
    let held = queue
        .claim_one("w", Some(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    let old = setup.primary_port();

    let new = tokio::task::block_in_place(|| setup.failover());
    assert_ne!(new, old);
    // The demoted primary answers READONLY; the client asks the Sentinels again and
    // the first write goes to the new primary (which has none of the scripts yet).
    let mut new_conn = redis::Client::open(format!("redis://127.0.0.1:{new}"))
        .unwrap()
        .get_connection()
        .unwrap();
    queue
        .enqueue(NewJob::new("after").id("after"))
        .await
        .expect("the first write after the failover goes to the new primary");
    let there: bool = redis::cmd("EXISTS")
        .arg("jq:{s2}:job:after")
        .query(&mut new_conn)
        .unwrap();
    assert!(there, "the job was written on the new primary");
    // The lease held across the failover is still fenced: a wrong token is refused,
    // the right one acks.
    let stale = jobqueue::queue::LeaseRef {
        id: held.id.as_bytes(),
        token: "not-the-token",
        ..Default::default()
    };
    assert!(!queue.ack(stale).await.unwrap());
    assert!(queue.ack(&held).await.unwrap());
    // Every job enqueued before the failover is there (a manual failover loses nothing).
    let mut claimed = 0;
    while let Some(lease) = queue.claim_one("w", None).await.unwrap() {
        assert!(queue.ack(&lease).await.unwrap());
        claimed += 1;
    }
    assert_eq!(
        claimed, 20,
        "19 left from before the failover + the one after"
    );
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.acked, 21);
    assert_eq!(stats.pending + stats.processing, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_master_name_and_no_sentinel_are_named() {
    let setup = SentinelSetup::start();
    let err = Redis::connect(
        &ConnectOptions::sentinel(setup.addrs(), "nosuchmaster")
            .connect_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::UnknownMaster { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("no master named \"nosuchmaster\"") && text.contains(MASTER),
        "{text}"
    );
    assert!(!err.is_transient());

    let closed = [
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    ];
    let err = Redis::connect(
        &ConnectOptions::sentinel(closed.clone(), MASTER).connect_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::NoSentinel { .. }), "{err:?}");
    assert!(err.to_string().contains(&closed.join(",")), "{err}");

    // The CLI: exit codes 6 and 3, the Sentinels' password never shown.
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("JOBQUEUE_SENTINEL_PASSWORD", "")
            .output()
            .unwrap()
    };
    let out = run(&[
        "stats",
        "--sentinel",
        &setup.addr_list(),
        "--master-name",
        "typo",
        "--tag",
        "x",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("no master named \"typo\""), "{stderr}");
    let out = run(&[
        "stats",
        "--sentinel",
        &closed.join(","),
        "--master-name",
        MASTER,
        "--tag",
        "x",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("no Sentinel reachable"), "{stderr}");
    let out = Command::new(BIN)
        .args([
            "stats",
            "--sentinel",
            &setup.addr_list(),
            "--master-name",
            MASTER,
            "--tag",
            "x",
        ])
        .env("JOBQUEUE_SENTINEL_PASSWORD", "s3cret-sentinel-pw")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("s3cret-sentinel-pw"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_of_the_cli_reaches_the_queue_through_sentinel() {
    let setup = SentinelSetup::start();
    let addrs = setup.addr_list();
    let out = Command::new(BIN)
        .args(["enqueue", "--tag", "cli", "--id", "c1", "hello"])
        .env("JOBQUEUE_SENTINEL", &addrs)
        .env("JOBQUEUE_MASTER_NAME", MASTER)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(BIN)
        .args([
            "show",
            "--sentinel",
            &addrs,
            "--master-name",
            MASTER,
            "--tag",
            "cli",
            "c1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("pending"),
        "{stdout}"
    );
    let queue = setup.queue("cli").await;
    assert_eq!(queue.stats().await.unwrap().pending, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_on_a_plain_endpoint_is_a_clear_error_not_a_retry() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let queue = replica.queue("ro").await;
    let err = queue.enqueue(NewJob::new("x")).await.unwrap_err();
    assert!(
        !err.is_transient(),
        "READONLY must not be retried on the same node: {err}"
    );
    assert!(
        err.to_string()
            .contains("read-only replica, not the primary"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_durability_reports_success_only_when_replicas_confirmed() {
    let primary = RedisServer::start();
    let mut replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    // Wait until the replica is attached (WAIT counts only connected replicas).
    let mut conn = primary.conn();
    support::eventually::eventually("the replica attached", async || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut conn)
            .unwrap();
        info.contains("connected_slaves:1") && info.contains("state=online")
    })
    .await;
    let one: Durability = "replicated:1:2s".parse().unwrap();
    let queue = primary.queue("dur").await.durability(one);
    let out = queue.enqueue(NewJob::new("x").id("d1")).await.unwrap();
    assert!(out.created);
    let lease = queue.claim_one("w", None).await.unwrap().unwrap();
    assert!(queue.ack(&lease).await.unwrap());
    // The ack reached the replica before it was reported.
    let mut rconn = replica.conn();
    let acked: i64 = redis::cmd("HGET")
        .arg("jq:{dur}:stats")
        .arg("acked")
        .query(&mut rconn)
        .unwrap();
    assert_eq!(acked, 1);

    // Asking for two replicas where there is one: the write runs on the primary, but
    // the caller is told it was not confirmed.
    let two = primary
        .queue("dur")
        .await
        .durability("replicated:2:100ms".parse().unwrap());
    let err = two.enqueue(NewJob::new("y").id("d2")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotReplicated {
                acked: 1,
                wanted: 2,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("ran on the primary but only 1 of 2"),
        "{text}"
    );
    assert!(text.contains("may run it twice"), "{text}");
    assert!(two.job("d2").await.unwrap().is_some(), "the write happened");

    // With the replica gone, fail under replicated:1 says so too; the default does not wait.
    replica.kill();
    queue.enqueue(NewJob::new("z").id("d3")).await.unwrap_err();
    let plain = primary.queue("dur").await;
    let lease = plain.claim_one("w", None).await.unwrap().unwrap();
    let err = queue
        .fail(
            &lease,
            "boom",
            jobqueue::queue::FailMode::Retry,
            jobqueue::queue::Backoff::Policy,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotReplicated {
                op: "fail",
                acked: 0,
                ..
            }
        ),
        "{err:?}"
    );
    plain.enqueue(NewJob::new("w").id("d4")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_durability_reloads_scripts_the_server_forgot() {
    let primary = RedisServer::start();
    let _replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let mut conn = primary.conn();
    support::eventually::eventually("the replica attached", async || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut conn)
            .unwrap();
        info.contains("state=online")
    })
    .await;
    let queue: Queue = primary
        .queue("ns")
        .await
        .durability("replicated".parse().unwrap());
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
    let out = queue.enqueue(NewJob::new("x").id("n1")).await.unwrap();
    assert!(out.created);
    assert_eq!(queue.stats().await.unwrap().pending, 1);
}

/// The primary demoted by hand (`REPLICAOF`, which keeps its clients connected) and the
/// Sentinels told to monitor the promoted replica: the client's next write meets
/// `READONLY` on its old connection, asks the Sentinels again and runs on the new
/// primary, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_from_a_demoted_primary_sends_the_write_to_the_new_primary() {
    let setup = SentinelSetup::start();
    let queue = setup.queue("ro2").await;
    queue.enqueue(NewJob::new("before").id("b")).await.unwrap();
    let (old, new) = tokio::task::block_in_place(|| setup.switch_primary_by_hand());
    let node = |port: u16| {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_connection()
            .unwrap()
    };
    // The old primary still holds the client's connection, and refuses writes on it.
    let mut direct = node(old);
    let refused: redis::RedisResult<()> = redis::cmd("SET").arg("k").arg("v").query(&mut direct);
    let refused = refused.unwrap_err();
    assert_eq!(refused.code(), Some("READONLY"), "{refused}");

    let out = queue.enqueue(NewJob::new("after").id("a")).await;
    assert!(
        out.is_ok(),
        "READONLY from the demoted primary must send the write to the new primary: {out:?}"
    );
    let there: bool = redis::cmd("EXISTS")
        .arg("jq:{ro2}:job:a")
        .query(&mut node(new))
        .unwrap();
    assert!(there);
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        stats.pending, 2,
        "the job from before (replicated) and the new one, once"
    );
}

#[tokio::test]
async fn cluster_through_sentinel_is_refused_and_credentials_are_checked_first() {
    let err = Redis::connect(&ConnectOptions::sentinel(["127.0.0.1:1"], MASTER).cluster(true))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidUrl { .. }), "{err:?}");
    assert!(
        err.to_string().contains("not supported through Sentinel"),
        "{err}"
    );
    // A user needs a password, a certificate its key: named before any Sentinel is asked.
    let err = Redis::connect(
        &ConnectOptions::sentinel(["127.0.0.1:1"], MASTER).username(Some("w".into())),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                what: "username",
                ..
            }
        ),
        "{err:?}"
    );
    let pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec();
    let err = Redis::connect(
        &ConnectOptions::sentinel(["127.0.0.1:1"], MASTER).client_cert(Some(pem.clone()), None),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                what: "client certificate",
                ..
            }
        ),
        "{err:?}"
    );
    // A CA is taken (TLS to the data nodes), not refused: the Sentinels are asked.
    let closed = format!("127.0.0.1:{}", free_port());
    let err = Redis::connect(
        &ConnectOptions::sentinel([closed], MASTER)
            .ca_cert(Some(pem))
            .connect_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::NoSentinel { .. }), "{err:?}");
}

/// `ACL SETUSER` is not replicated: the user is created on every data node, as an
/// operator of a Sentinel set-up does.
fn create_user_everywhere(setup: &SentinelSetup, user: &str, password: &str) {
    for server in &setup.servers {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("on")
            .arg(format!(">{password}"))
            .arg("~jq:{*")
            .arg("+@all")
            .query(&mut server.conn())
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_through_sentinel_signs_in_on_the_primary_and_after_a_failover() {
    let setup = SentinelSetup::start();
    create_user_everywhere(&setup, "jq-sentinel-user", "user-pw");
    let options = || {
        setup
            .options()
            .username(Some("jq-sentinel-user".into()))
            .password(Some("user-pw".into()))
    };
    let redis = Redis::connect(&options())
        .await
        .expect("connect as the user");
    assert_eq!(redis.user(), "jq-sentinel-user");
    let queue = Queue::new(redis, "jq", "acl").unwrap();
    let whoami = |queue: Queue| async move {
        let who = queue
            .redis()
            .query_on_node_of("jq:{acl}:meta", redis::cmd("ACL").arg("WHOAMI").clone())
            .await
            .unwrap();
        redis::from_redis_value::<String>(who).unwrap()
    };
    assert_eq!(whoami(queue.clone()).await, "jq-sentinel-user");
    queue.enqueue(NewJob::new("a").id("a")).await.unwrap();
    let lease = queue.claim_one("w", None).await.unwrap().expect("a job");
    assert!(queue.ack(&lease).await.unwrap());

    // Through a failover: the new primary is signed in to as the same user.
    let old = setup.primary_port();
    let new = tokio::task::block_in_place(|| setup.failover());
    assert_ne!(new, old);
    queue
        .enqueue(NewJob::new("b").id("b"))
        .await
        .expect("a write after the failover, as the user");
    assert_eq!(whoami(queue.clone()).await, "jq-sentinel-user");
    let mut on_new = redis::Client::open(format!("redis://127.0.0.1:{new}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let payload: Option<String> = redis::cmd("HGET")
        .arg("jq:{acl}:job:b")
        .arg("payload")
        .query(&mut on_new)
        .unwrap();
    assert_eq!(
        payload.as_deref(),
        Some("b"),
        "the job is on the new primary"
    );

    // A wrong password: refused, naming the user and not the password.
    let err = Redis::connect(&options().password(Some("wrong-pw".into())))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("\"jq-sentinel-user\"") && !text.contains("wrong-pw"),
        "{text}"
    );

    // The CLI's --username with --sentinel (the password from JOBQUEUE_REDIS_PASSWORD).
    let out = Command::new(BIN)
        .args([
            "stats",
            "--sentinel",
            &setup.addr_list(),
            "--master-name",
            MASTER,
            "--username",
            "jq-sentinel-user",
            "--tag",
            "acl",
            "--json",
        ])
        .env("JOBQUEUE_REDIS_PASSWORD", "user-pw")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"pending\":1"), "{stdout}");
}

/// Mutual TLS through Sentinel: the Sentinels are asked in plain TCP, the primary they
/// name is reached over TLS with the CA and the client certificate, as a direct
/// connection would; without the certificate the node's refusal is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_through_sentinel_reaches_the_primary_with_the_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let certs = support::certs::Certs::new(dir.path());
    certs.ca("ca").node("ca", "node").client("ca", "client");
    let (setup, tls_ports) = SentinelSetup::start_tls(&certs);
    assert_eq!(
        setup.primary_port(),
        tls_ports[0],
        "the Sentinels monitor the TLS ports"
    );
    let options = || setup.options().ca_cert(Some(certs.read("ca.crt")));
    let redis = Redis::connect(&options().client_cert(
        Some(certs.read("client.crt")),
        Some(certs.read("client.key")),
    ))
    .await
    .expect("connect over mutual TLS through the Sentinels");
    let queue = Queue::new(redis, "jq", "mtls").unwrap();
    queue.enqueue(NewJob::new("a").id("a")).await.unwrap();
    let lease = queue.claim_one("w", None).await.unwrap().expect("a job");
    assert!(queue.ack(&lease).await.unwrap());
    assert_eq!(queue.stats().await.unwrap().acked, 1);

    // No client certificate: the node refuses the handshake, and the error says so.
    let err = Redis::connect(&options()).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Tls {
                problem: jobqueue::queue::TlsProblem::ClientCertRequired,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("requires a client certificate"),
        "{err}"
    );
}

/// A worker started while the primary is down (the Sentinels still name it) waits out
/// the failover and starts on the new primary; before, it ended at once with exit 3
/// ("the Sentinels know … but name no primary that answers"), which under Kubernetes is
/// a restart in CrashLoopBackOff for a failover of seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_during_a_failover_waits_for_the_new_primary() {
    let mut setup = SentinelSetup::start();
    let old = setup.primary_port();
    setup.server(old).kill();
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("worker.log");
    let mut worker = Command::new(BIN)
        .args([
            "worker",
            "--sentinel",
            &setup.addr_list(),
            "--master-name",
            MASTER,
        ])
        .args(["--tag", "late", "--worker-id", "late", "--exec", "true"])
        .env_remove("JOBQUEUE_REDIS_URL")
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let new = tokio::task::block_in_place(|| setup.wait_for_new_primary(old));
    assert_ne!(new, old);
    let queue = setup.queue("late").await;
    queue.enqueue(NewJob::new("x").id("after")).await.unwrap();
    support::eventually::Wait::for_("the worker to ack the job")
        .within(Duration::from_secs(60))
        .explained_by(log)
        .until(async || {
            if let Ok(Some(status)) = worker.try_wait() {
                panic!("the worker ended: {status}\n{}", log());
            }
            queue.stats().await.ok().filter(|s| s.acked == 1)
        })
        .await;

    // SAFETY: kill has no memory effects.
    assert_eq!(unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) }, 0);
    let status = worker.wait().unwrap();
    let log = log();
    assert!(status.success(), "{status}: {log}");
    assert!(
        log.contains("Redis lost while starting (a failover?); trying again"),
        "{log}"
    );
    assert!(log.contains("worker started"), "{log}");
}

/// A worker behind Sentinel whose primary is demoted (`READONLY` on its connection): a
/// failover, not a replica given by mistake. It asks the Sentinels again and goes on with
/// the new primary; it does not exit as a worker pointed at a replica does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_behind_sentinel_follows_a_demotion_instead_of_exiting() {
    let setup = SentinelSetup::start();
    let queue = setup.queue("demote").await;
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("worker.log");
    let mut worker = Command::new(BIN)
        .args([
            "worker",
            "--sentinel",
            &setup.addr_list(),
            "--master-name",
            MASTER,
        ])
        .args(["--tag", "demote", "--exec", "true"])
        .env_remove("JOBQUEUE_REDIS_URL")
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    queue.enqueue(NewJob::new("x").id("before")).await.unwrap();
    acked_by_running(&queue, &mut worker, 1, &log).await;
    tokio::task::block_in_place(|| setup.switch_primary_by_hand());
    queue.enqueue(NewJob::new("x").id("after")).await.unwrap();
    acked_by_running(&queue, &mut worker, 2, &log).await;

    // SAFETY: kill has no memory effects.
    assert_eq!(unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) }, 0);
    let status = worker.wait().unwrap();
    let log = log();
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("READONLY"), "the demotion was met: {log}");
    assert!(!log.contains("cannot go on"), "{log}");
}

/// Wait until `n` jobs of `queue` were acked, failing if `worker` ends first.
async fn acked_by_running(
    queue: &Queue,
    worker: &mut std::process::Child,
    n: u64,
    log: &(impl Fn() -> String + Sync),
) {
    support::eventually::Wait::for_(format!("the worker to ack {n} job(s)"))
        .within(Duration::from_secs(60))
        .explained_by(log)
        .until(async || {
            if let Ok(Some(status)) = worker.try_wait() {
                panic!("the worker ended: {status}\n{}", log());
            }
            queue.stats().await.ok().filter(|s| s.acked == n)
        })
        .await;
}
