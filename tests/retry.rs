//! Lost replies and retries: no script call is sent twice behind the caller's back,
//! claim is retry-safe by its request id (a lost claim reply leaves no lease to
//! nobody), the Cluster client follows redirects during a slot migration, the queue's
//! clock is its node's, and payloads over the client's limit are refused.

mod support;

use std::time::Duration;

use jobqueue::queue::{
    ConnectOptions, DEFAULT_MAX_PAYLOAD, Error, NewJob, Queue, Redis, SCRIPTS, Settle, Settled,
};
use redis::Commands;
use support::redis::{RedisCluster, RedisServer};
use support::reply_dropper::ReplyDropper;
use support::slot_migration;

async fn queue_at(url: &str, tag: &str) -> Queue {
    let redis = Redis::connect(
        &ConnectOptions::new(url)
            .response_timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    Queue::new(redis, "jq", tag).unwrap()
}

#[tokio::test]
async fn a_lost_claim_reply_is_answered_by_the_retry_with_the_same_lease() {
    let server = RedisServer::start();
    let direct = server.queue("lost").await;
    direct
        .enqueue(NewJob::new(&b"p"[..]).id("a"))
        .await
        .unwrap();
    let proxy = ReplyDropper::start(server.port, SCRIPTS.claim.sha.as_bytes()).await;
    let through = queue_at(&proxy.url(), "lost").await;
    through.load_scripts().await.unwrap();
    proxy.cut_next(2);
    let leases = through
        .claim(1, "w", Some(Duration::from_secs(30)))
        .await
        .expect("the claim is retried after its reply was lost");
    assert_eq!(proxy.cuts(), 2, "both cut replies were claim calls");
    assert_eq!(
        leases.len(),
        1,
        "the job leased by the first call reaches the caller"
    );
    assert_eq!((leases[0].id.as_str(), leases[0].attempts), (Some("a"), 1));
    let info = direct.job("a").await.unwrap().unwrap();
    assert_eq!(info.attempts, 1, "a retry charges no attempt");
    assert_eq!(info.status.as_deref(), Some("processing"));
    let stats = direct.stats().await.unwrap();
    assert_eq!(stats.claimed, 1);
    assert_eq!(stats.replayed, 2);
    assert!(
        through.ack(&leases[0]).await.unwrap(),
        "the caller holds the lease"
    );
}

#[tokio::test]
async fn a_claim_whose_every_try_was_lost_is_answered_on_the_next_call() {
    let server = RedisServer::start();
    let direct = server.queue("later").await;
    direct
        .enqueue(NewJob::new(&b"p"[..]).id("a"))
        .await
        .unwrap();
    let proxy = ReplyDropper::start(server.port, SCRIPTS.claim.sha.as_bytes()).await;
    let through = queue_at(&proxy.url(), "later").await;
    through.load_scripts().await.unwrap();
    proxy.cut_next(100);
    let err = through.claim(1, "w", None).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    let tries = proxy.cuts();
    assert!(tries >= 2, "the claim was tried again: {tries}");
    proxy.cut_next(0);
    let leases = through.claim(1, "w", None).await.unwrap();
    assert_eq!(
        leases.len(),
        1,
        "the worker's next claim gets the lease made for it"
    );
    assert_eq!(direct.job("a").await.unwrap().unwrap().attempts, 1);
    assert_eq!(direct.stats().await.unwrap().claimed, 1);
}

/// A worker's next claim can ask for more jobs than the lost one (slots freed while it
/// waited to try again): it still gets the leases made for the lost one, not new ones
/// beside leases that only the reaper would end.
#[tokio::test]
async fn a_lost_claim_is_answered_on_a_next_call_that_asks_for_more() {
    let server = RedisServer::start();
    let direct = server.queue("wider").await;
    for id in ["a", "b", "c"] {
        direct
            .enqueue(NewJob::new(id.as_bytes().to_vec()).id(id))
            .await
            .unwrap();
    }
    let proxy = ReplyDropper::start(server.port, SCRIPTS.claim.sha.as_bytes()).await;
    let through = queue_at(&proxy.url(), "wider").await;
    through.load_scripts().await.unwrap();
    proxy.cut_next(100);
    let err = through.claim(1, "w", None).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    proxy.cut_next(0);
    let leases = through.claim(3, "w", None).await.unwrap();
    let ids: Vec<_> = leases.iter().map(|l| l.id.to_string()).collect();
    assert_eq!(
        ids,
        ["a"],
        "the next claim returns the lease made for the lost one"
    );
    let stats = direct.stats().await.unwrap();
    assert_eq!(stats.claimed, 1, "no job is leased beside it: {stats:?}");
    assert_eq!(stats.processing, 1);
    assert_eq!(stats.pending, 2);
}

#[tokio::test]
async fn a_repeated_claim_request_returns_the_leases_it_still_holds() {
    let server = RedisServer::start();
    let q = server.queue("req").await;
    let mut c = server.conn();
    for id in ["a", "b", "c"] {
        q.enqueue(NewJob::new(id.as_bytes().to_vec()).id(id))
            .await
            .unwrap();
    }
    let vis = Some(Duration::from_secs(60));
    let first = q.claim_request("r1", 2, "w", vis).await.unwrap();
    assert_eq!(first.leases.len(), 2);
    let again = q.claim_request("r1", 2, "w", vis).await.unwrap();
    assert_eq!(again, first, "same ids, tokens, attempts and lease_until");
    let ttl: i64 = c.pttl(q.keys().claim_request("r1")).unwrap();
    assert!(
        ttl > 0 && ttl <= 60_000,
        "the record lives as long as the leases: {ttl}"
    );
    // Acked and renewed leases: the ended one is left out, the renewed one is current.
    assert!(q.ack(&first.leases[0]).await.unwrap());
    let until = q
        .extend(&first.leases[1], Some(Duration::from_secs(120)))
        .await
        .unwrap()
        .unwrap();
    let third = q.claim_request("r1", 2, "w", vis).await.unwrap();
    assert_eq!(third.leases.len(), 1);
    assert_eq!(third.leases[0].token, first.leases[1].token);
    assert_eq!(third.leases[0].lease_until, until);
    assert_eq!(third.leases[0].attempts, 1);
    // Another request claims what is left.
    let other = q.claim_request("r2", 2, "w", vis).await.unwrap();
    assert_eq!(other.leases.len(), 1);
    assert_eq!(other.leases[0].id, "c");
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.claimed, stats.replayed), (3, 2));
    // An empty claim records nothing.
    assert!(
        q.claim_request("r3", 1, "w", vis)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    let exists: bool = c.exists(q.keys().claim_request("r3")).unwrap();
    assert!(!exists);
    assert!(q.claim_request("", 1, "w", vis).await.is_err());
}

/// A request id names one call of one worker: a record answers only the retry of that
/// call (same worker, same arguments). Another worker, or the same worker with other
/// arguments, sending the id is refused naming `request`, and nothing changes.
#[tokio::test]
async fn a_request_record_answers_only_its_own_worker_and_arguments() {
    let server = RedisServer::start();
    let q = server.queue("owner").await;
    for id in ["x", "y", "a"] {
        q.enqueue(NewJob::new(id.as_bytes().to_vec()).id(id))
            .await
            .unwrap();
    }
    let vis = Some(Duration::from_secs(60));
    let x = q.claim(1, "w1", vis).await.unwrap().remove(0);
    let y = q.claim(1, "w2", vis).await.unwrap().remove(0);
    let first = q
        .settle_claim("R", &[Settle::Ack(x.lease_ref())], 1, "w1", vis)
        .await
        .unwrap();
    assert_eq!(first.settled, [Settled::Acked]);
    assert_eq!(first.claimed.leases.len(), 1);
    let a = &first.claimed.leases[0];
    // w2 reuses w1's request id for its own ack.
    let refused = q
        .settle_claim("R", &[Settle::Ack(y.lease_ref())], 1, "w2", vis)
        .await;
    match &refused {
        Err(Error::Rejected { detail, .. }) if detail.starts_with("invalid request: ") => {}
        other => panic!("another worker's call is refused naming request, got {other:?}"),
    }
    let info = q.job("y").await.unwrap().unwrap();
    assert_eq!(info.status.as_deref(), Some("processing"), "y is not acked");
    let mut c = server.conn();
    let token: String = c.hget(q.keys().job("a"), "claim_token").unwrap();
    assert_eq!(token, a.token, "a stays w1's lease");
    // The same worker with other arguments: refused too.
    let other = q
        .settle_claim("R", &[Settle::Ack(x.lease_ref())], 2, "w1", vis)
        .await;
    assert!(
        matches!(&other, Err(Error::Rejected { detail, .. }) if detail.starts_with("invalid request: ")),
        "{other:?}"
    );
    let claim = q.claim_request("R", 1, "w2", vis).await;
    assert!(
        matches!(&claim, Err(Error::Rejected { detail, .. }) if detail.starts_with("invalid request: ")),
        "{claim:?}"
    );
    assert_eq!(q.stats().await.unwrap().replayed, 0);
    // The call itself, sent again: its answer.
    let again = q
        .settle_claim("R", &[Settle::Ack(x.lease_ref())], 1, "w1", vis)
        .await
        .unwrap();
    assert_eq!(again.settled, first.settled);
    assert_eq!(again.claimed.leases, first.claimed.leases);
    assert_eq!(q.stats().await.unwrap().replayed, 1);
}

#[tokio::test]
async fn an_enqueue_whose_reply_was_lost_is_not_run_again() {
    let server = RedisServer::start();
    let direct = server.queue("enq").await;
    let proxy = ReplyDropper::start(server.port, SCRIPTS.enqueue.sha.as_bytes()).await;
    let through = queue_at(&proxy.url(), "enq").await;
    through.load_scripts().await.unwrap();
    proxy.cut_next(1);
    match through.enqueue(NewJob::new(&b"p"[..]).id("x")).await {
        Err(err) => assert!(err.is_transient(), "{err}"),
        Ok(e) => assert!(
            e.created,
            "a job created by this call is reported created: {e:?}"
        ),
    }
    assert_eq!(proxy.seen(), 1, "the enqueue was sent once");
    assert_eq!(direct.stats().await.unwrap().enqueued, 1);
}

#[tokio::test]
async fn payloads_over_the_limit_are_refused_before_sending() {
    let server = RedisServer::start();
    let q = server.queue("big").await.max_payload(10);
    assert_eq!(DEFAULT_MAX_PAYLOAD, 64 << 20);
    q.enqueue(NewJob::new(vec![0u8; 10])).await.unwrap();
    let err = q.enqueue(NewJob::new(vec![0u8; 11])).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                what: "payload",
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("11 bytes") && text.contains("limit of 10"),
        "{text}"
    );
    assert_eq!(q.stats().await.unwrap().pending, 1);
}

fn time_calls(cluster: &RedisCluster) -> Vec<u64> {
    cluster
        .nodes
        .iter()
        .map(|n| {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut n.conn())
                .unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("cmdstat_time:calls="))
                .and_then(|rest| rest.split(',').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_clock_is_read_on_the_queues_node() {
    let cluster = RedisCluster::start();
    let q = Queue::new(cluster.redis().await, "jq", "clock").unwrap();
    let home = cluster.node_of("{clock}");
    for n in &cluster.nodes {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut n.conn())
            .unwrap();
    }
    for _ in 0..12 {
        q.now_ms().await.unwrap();
    }
    q.maintain(&Default::default(), 100, 1).await.unwrap();
    let calls = time_calls(&cluster);
    for (node, n) in calls.iter().enumerate() {
        if node == home {
            assert!(*n >= 13, "TIME on the queue's node {node}: {calls:?}");
        } else {
            assert_eq!(
                *n, 0,
                "TIME on node {node}, not the queue's {home}: {calls:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_calls_follow_ask_and_moved_while_a_slot_migrates() {
    let cluster = RedisCluster::start();
    let q = Queue::new(cluster.redis().await, "jq", "moving").unwrap();
    for i in 0..20 {
        q.enqueue(NewJob::new(&b"p"[..]).id(format!("j{i}")))
            .await
            .unwrap();
    }
    let slot = slot_migration::slot_of(&cluster, "{moving}");
    let src = cluster.node_of("{moving}");
    let dst = (src + 1) % 3;
    slot_migration::begin(&cluster, slot, src, dst);
    // Every key on the target, the slot still the source's: the source answers ASK, the
    // target TRYAGAIN (some declared keys are absent) until the migration ends. A call
    // made now waits through that and runs once the slot is the target's.
    while slot_migration::migrate_batch(&cluster, slot, src, dst, 7) > 0 {}
    let during = {
        let q = q.clone();
        tokio::spawn(async move { q.claim_one("w", None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !during.is_finished(),
        "no script can run while the slot is split"
    );
    slot_migration::finish(&cluster, slot, src, dst);
    let lease = match during.await.unwrap() {
        Ok(lease) => lease.expect("a job once the slot moved"),
        Err(err) => panic!("claim during the migration: {err:?}"),
    };
    assert!(q.ack(&lease).await.unwrap());
    q.enqueue(NewJob::new(&b"p"[..]).id("new")).await.unwrap();
    assert_eq!(q.stats().await.unwrap().pending, 20);
    q.maintain(&Default::default(), 100, 1).await.unwrap();
    // The slot is the target's now: the client's map is stale until MOVED refreshes it.
    let lease = q
        .claim_one("w", None)
        .await
        .unwrap()
        .expect("a job after MOVED");
    assert!(q.ack(&lease).await.unwrap());
    assert!(
        q.now_ms().await.unwrap() > 0,
        "TIME follows the slot to its new node"
    );
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.pending, stats.orphaned), (19, 0));
}

#[tokio::test]
async fn the_cli_refuses_payloads_over_max_payload() {
    let server = RedisServer::start();
    let enqueue = |payload: &str, limit: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_jobqueue"))
            .args(["enqueue", payload, "--max-payload", limit])
            .args(["--redis", &server.url(), "--tag", "cli"])
            .output()
            .unwrap()
    };
    let out = enqueue("0123456789x", "10");
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("payload") && stderr.contains("limit of 10"),
        "{stderr}"
    );
    assert!(enqueue("0123456789", "10").status.success());
    assert!(enqueue("0123456789x", "1KiB").status.success());
    let q = server.queue("cli").await;
    assert_eq!(q.stats().await.unwrap().pending, 2);
}
