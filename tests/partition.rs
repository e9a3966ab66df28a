//! A worker cut off from Redis (through a proxy that stops forwarding without closing)
//! for longer than its lease: its handler is cancelled by the lease's local deadline,
//! the job runs on another worker, and nothing the cut-off worker says later counts.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::queue::{ConnectOptions, NewJob, Queue, Redis};
use jobqueue::worker::{JobError, Worker};
use support::eventually::{Wait, eventually};
use support::proxy::Proxy;
use support::redis::RedisServer;
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
