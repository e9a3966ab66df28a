//! A worker cut off from Redis (through a proxy that stops forwarding without closing)
//! for longer than its lease: its handler is cancelled by the lease's local deadline,
//! the job runs on another worker, and nothing the cut-off worker says later counts.
//! And a partitioned worker whose claim lost every reply: the leases a later claim
//! replays keep the local deadline of the first send.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::queue::{ConnectOptions, NewJob, PartitionedQueue, Queue, Redis, SCRIPTS};
use jobqueue::worker::{JobError, Worker};
use support::eventually::{Wait, eventually};
use support::proxy::Proxy;
use support::redis::RedisServer;
use support::reply_dropper::ReplyDropper;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(1);

/// What the cut-off worker's handler saw.
#[derive(Default)]
struct Seen {
    token: Option<String>,
    cancelled_at: Option<Instant>,
    lost: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_worker_stops_at_its_local_deadline_and_its_late_ack_is_refused() {
    let server = RedisServer::start();
    let proxy = Proxy::start(([127, 0, 0, 1], server.port).into());
    let queue = server.queue("part").await;
    // The worker behind the proxy keeps the default response timeout (10 s, ten leases):
    // nothing but the local deadline stops its handler in time.
    let far = Queue::new(
        Redis::connect(&ConnectOptions::new(proxy.url()))
            .await
            .unwrap(),
        "jq",
        "part",
    )
    .unwrap();

    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = CancellationToken::new();
    let cut_off = Worker::builder(far)
        .visibility(Some(LEASE))
        .handle_signals(false)
        .shutdown_token(stop.clone())
        .shutdown_deadline(Duration::from_secs(1))
        .worker_id("cut-off")
        .build()
        .unwrap();
    let cut_off_stats = cut_off.stats();
    let cut_off = tokio::spawn({
        let seen = seen.clone();
        cut_off.run(move |lease, ctx| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().token = Some(lease.token.clone());
                ctx.cancelled().await;
                let mut s = seen.lock().unwrap();
                s.cancelled_at = Some(Instant::now());
                s.lost = ctx.lease_lost();
                Err(JobError::retry("cancelled"))
            }
        })
    });

    queue.enqueue(NewJob::new("x").id("j")).await.unwrap();
    let token = eventually("the cut-off worker runs the job", async || {
        seen.lock().unwrap().token.clone()
    })
    .await;
    // Let a renewal or two go through first.
    tokio::time::sleep(LEASE / 2).await;
    proxy.blackhole();
    let cut_at = Instant::now();

    // The other worker, straight to Redis, and a reaper.
    let ran_elsewhere = Arc::new(Mutex::new(0u32));
    let healthy = Worker::builder(server.queue("part").await)
        .visibility(Some(LEASE))
        .handle_signals(false)
        .shutdown_token(stop.clone())
        .worker_id("healthy")
        .build()
        .unwrap();
    let healthy = tokio::spawn({
        let ran = ran_elsewhere.clone();
        healthy.run(move |_lease, _ctx| {
            let ran = ran.clone();
            async move {
                *ran.lock().unwrap() += 1;
                Ok(())
            }
        })
    });

    // Cancelled by the local deadline (the claim's or a renewal's send time + the lease),
    // while the proxy still holds every byte back.
    let cancelled_at = Wait::for_("the cut-off worker's handler cancelled")
        .within(LEASE * 4)
        .until(async || seen.lock().unwrap().cancelled_at)
        .await;
    let late = cancelled_at.saturating_duration_since(cut_at);
    assert!(
        late <= LEASE + Duration::from_millis(300),
        "cancelled {late:?} after the cut, more than the {LEASE:?} lease"
    );
    assert!(
        seen.lock().unwrap().lost,
        "the handler is told its lease is lost"
    );

    eventually("the job ran and was acked elsewhere", async || {
        queue.reap(100).await.unwrap();
        *ran_elsewhere.lock().unwrap() == 1 && queue.job("j").await.unwrap().is_none()
    })
    .await;
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.acked, stats.failed, stats.reaped), (1, 0, 1));

    proxy.heal();
    // The cut-off worker's lease is fenced: an ack with its token is refused.
    assert!(!queue.ack(("j", token.as_str())).await.unwrap());
    eventually("the cut-off worker counts the lease lost", async || {
        cut_off_stats.get().lost == 1
    })
    .await;
    stop.cancel();
    let cut_off = cut_off.await.unwrap();
    healthy.await.unwrap();
    // It never tried to end the lease it no longer held.
    assert_eq!((cut_off.acked, cut_off.retried, cut_off.dead), (0, 0, 0));
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.acked, stats.failed, stats.pending, stats.processing),
        (1, 0, 0, 0)
    );
}

/// A partitioned worker's claim loses its reply on every try (the first send and its
/// retries, all of which reach Redis); the worker's next claim carries the same request
/// id and Redis replays the lease the first send made. That lease ends in Redis one
/// visibility after the first send reached it, so its local deadline counts from the
/// first send, not from the claim that brought the replay: with every renewal's reply
/// lost too, the handler is cancelled by the end of the lease the reply named, give or
/// take the grace, not a retry chain later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_lease_keeps_the_deadline_of_the_first_send() {
    const LEASE: Duration = Duration::from_secs(3);
    const GRACE: Duration = Duration::from_millis(500);
    let server = RedisServer::start();
    let direct = server.queue("replay").await;
    direct.load_scripts().await.unwrap();
    direct.enqueue(NewJob::new("x").id("j")).await.unwrap();
    let proxy = ReplyDropper::start_with(
        server.port,
        &[SCRIPTS.claim.sha.as_bytes(), SCRIPTS.extend.sha.as_bytes()],
    )
    .await;
    // The first claim and its three retries lose their replies; every renewal too.
    proxy.cut_next_of(0, 4);
    proxy.cut_at_random_of(1, 1000);
    let far = PartitionedQueue::new(
        Redis::connect(
            &ConnectOptions::new(proxy.url())
                .response_timeout(Duration::from_secs(5))
                .connect_timeout(Duration::from_secs(2)),
        )
        .await
        .unwrap(),
        "jq",
        "replay",
        1,
    )
    .unwrap();

    // (the lease as the handler got it, how far past its lease_until Redis's clock was
    // when the handler was cancelled, in ms)
    let seen: Arc<Mutex<Option<(jobqueue::queue::Lease, i64)>>> = Arc::default();
    let stop = CancellationToken::new();
    let worker = Worker::builder(far)
        .visibility(Some(LEASE))
        .lease_grace(GRACE)
        // The claim after the lost one comes a second later.
        .redis_retry(Duration::from_secs(1), Duration::from_secs(1))
        .reaper(false)
        .concurrency(1)
        .handle_signals(false)
        .shutdown_token(stop.clone())
        .shutdown_deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    let worker = tokio::spawn({
        let (seen, direct) = (seen.clone(), direct.clone());
        worker.run(move |lease, ctx| {
            let (seen, direct) = (seen.clone(), direct.clone());
            async move {
                ctx.cancelled().await;
                let past = direct.now_ms().await.unwrap() - lease.lease_until;
                *seen.lock().unwrap() = Some((lease, past));
                Err(JobError::retry("cancelled"))
            }
        })
    });
    let (lease, past) = Wait::for_("the handler cancelled at its local deadline")
        .within(LEASE * 5)
        .until(async || seen.lock().unwrap().clone())
        .await;
    stop.cancel();
    worker.await.unwrap();

    // The lease came from the replay: one claim in Redis, one attempt.
    let stats = direct.stats().await.unwrap();
    assert_eq!(stats.claimed, 1, "{stats:?}");
    assert!(
        stats.replayed >= 4,
        "the retries and the next claim replayed: {stats:?}"
    );
    assert_eq!(lease.attempts, 1);
    assert!(
        past < GRACE.as_millis() as i64,
        "the handler of a replayed lease was cancelled {past} ms after the lease's end \
         (lease_until {}), more than the {GRACE:?} grace",
        lease.lease_until
    );
}

/// The library side of the above: a claim that carries the id of a claim whose every
/// reply was lost says when that claim was first sent (the replayed lease's deadline
/// counts from there), and once a visibility has passed since, the id is not reused.
#[tokio::test]
async fn a_claim_reusing_a_lost_request_says_when_it_was_first_sent() {
    const LEASE: Duration = Duration::from_millis(1500);
    let server = RedisServer::start();
    let direct = server.queue("first").await;
    direct.load_scripts().await.unwrap();
    for id in ["a", "b", "c"] {
        direct.enqueue(NewJob::new("x").id(id)).await.unwrap();
    }
    let proxy = ReplyDropper::start(server.port, SCRIPTS.claim.sha.as_bytes()).await;
    let far = PartitionedQueue::new(
        Redis::connect(&ConnectOptions::new(proxy.url()))
            .await
            .unwrap(),
        "jq",
        "first",
        1,
    )
    .unwrap();

    proxy.cut_next(4);
    let before = Instant::now();
    let err = far.claim_batch(1, "w", Some(LEASE)).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    let failed = Instant::now();
    let replayed = far.claim_batch(1, "w", Some(LEASE)).await.unwrap();
    let ids: Vec<String> = replayed.leases.iter().map(|l| l.id.to_string()).collect();
    assert_eq!(ids, ["a"], "the lease made for the lost claim");
    let first = replayed
        .first_sent
        .expect("a replayed claim says when it was first sent");
    assert!(
        before <= first && first <= failed,
        "first sent {:?} after the call began, which failed {:?} after",
        first - before,
        failed - before
    );

    // Lost again ("b" leased with it); a visibility later the id is not reused: the next
    // claim is a new request with a lease of its own, counted from its own send.
    proxy.cut_next(4);
    let before = Instant::now();
    far.claim_batch(1, "w", Some(LEASE)).await.unwrap_err();
    tokio::time::sleep_until(before + LEASE).await;
    let fresh = far.claim_batch(1, "w", Some(LEASE)).await.unwrap();
    let ids: Vec<String> = fresh.leases.iter().map(|l| l.id.to_string()).collect();
    assert_eq!((ids, fresh.first_sent), (vec!["c".to_string()], None));
    assert_eq!(direct.stats().await.unwrap().claimed, 3);
}
