//! The paths the scripts take to save Redis commands must keep the protocol exactly:
//! enqueue checks a batch's job keys with one EXISTS (and reads each key's type only when
//! one exists), claim and ack find a wrong-typed `stats` or `processing` key by their
//! first write to it (and take back what they wrote before), new jobs carry no
//! `attempts` field, and batches of claims and reaps meet orphans and duplicates.

mod support;

use std::time::Duration;

use jobqueue::queue::{Error, NewJob, Queue};
use redis::Commands;
use support::redis::{RedisServer, wait_past};

fn job(id: &str) -> NewJob {
    NewJob::new(format!("payload of {id}").into_bytes()).id(id)
}

async fn enqueue_ids(q: &Queue, ids: &[&str]) {
    let created = q
        .enqueue_many(ids.iter().map(|id| job(id)).collect())
        .await
        .unwrap();
    assert!(created.iter().all(|e| e.created));
}

/// Orphans, duplicates and ordering through the batched claim of `q`.
async fn batched_claim_keeps_the_protocol(q: &Queue, c: &mut redis::Connection) {
    enqueue_ids(q, &["a", "b", "c", "d", "e", "f"]).await;
    // b's hash is gone, d says done, and e sits in pending twice.
    let _: () = c.del(q.keys().job("b")).unwrap();
    let _: () = c.hset(q.keys().job("d"), "status", "done").unwrap();
    let _: () = c.rpush(&q.keys().pending, "e").unwrap();
    // Pending from the front: e (the copy), a, b, c, d, e, f.
    let leases = q.claim(4, "w", None).await.unwrap();
    let ids: Vec<&str> = leases.iter().map(|l| l.id.as_str().unwrap()).collect();
    assert_eq!(ids, ["e", "a", "c", "f"]);
    for l in &leases {
        assert_eq!(l.attempts, 1);
        assert_eq!(l.payload, format!("payload of {}", l.id).into_bytes());
    }
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.pending, stats.processing), (0, 4));
    assert_eq!((stats.claimed, stats.orphans), (4, 3));
    let pending: usize = c.llen(&q.keys().pending).unwrap();
    assert_eq!(pending, 0);
}

#[tokio::test]
async fn batched_claim_skips_orphans_and_duplicates_in_order() {
    let server = RedisServer::start();
    let q = server.queue("orph").await;
    let mut c = server.conn();
    batched_claim_keeps_the_protocol(&q, &mut c).await;
}

#[tokio::test]
async fn a_wrong_typed_job_key_in_a_batch_is_set_aside_and_the_rest_are_claimed() {
    let server = RedisServer::start();
    let q = server.queue("badjob").await;
    let mut c = server.conn();
    enqueue_ids(&q, &["a", "b", "c"]).await;
    let _: () = c.del(q.keys().job("b")).unwrap();
    let _: () = c.set(q.keys().job("b"), "not a hash").unwrap();
    let leases = q.claim(3, "w", None).await.unwrap();
    let ids: Vec<&str> = leases.iter().map(|l| l.id.as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "c"]);
    let pending: usize = c.llen(&q.keys().pending).unwrap();
    assert_eq!(pending, 0);
    let aside: Vec<String> = c.zrange(&q.keys().orphans, 0, -1).unwrap();
    assert_eq!(aside, ["b"], "b is set aside");
    let kept: String = c.get(q.keys().job("b")).unwrap();
    assert_eq!(kept, "not a hash", "the key is left as it is");
    let stats = q.stats().await.unwrap();
    assert_eq!(
        (
            stats.claimed,
            stats.orphans,
            stats.set_aside,
            stats.wrong_type
        ),
        (2, 1, 1, 1)
    );
}

#[tokio::test]
async fn wrong_typed_stats_or_processing_fail_claim_and_ack_and_change_nothing() {
    let server = RedisServer::start();
    let q = server.queue("first").await;
    let mut c = server.conn();
    enqueue_ids(&q, &["a", "b"]).await;
    let snapshot = |c: &mut redis::Connection| -> (Vec<String>, Option<String>, Option<String>) {
        (
            c.lrange(&q.keys().pending, 0, -1).unwrap(),
            c.hget(q.keys().job("a"), "status").unwrap(),
            c.hget(q.keys().job("a"), "claim_token").unwrap(),
        )
    };

    // stats is a list: claim's counter is its first write there.
    let _: () = c.rename(&q.keys().stats, "saved-stats").unwrap();
    let _: () = c.rpush(&q.keys().stats, "x").unwrap();
    let before = snapshot(&mut c);
    let err = q.claim(2, "w", None).await.unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key, .. } if key == &q.keys().stats),
        "{err:?}"
    );
    assert_eq!(snapshot(&mut c), before);
    let processing: bool = c.exists(&q.keys().processing).unwrap();
    assert!(!processing);
    let _: () = c.del(&q.keys().stats).unwrap();

    // processing is a string: the counter written first is taken back, absent again.
    let _: () = c.set(&q.keys().processing, "oops").unwrap();
    let err = q.claim(2, "w", None).await.unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key, .. } if key == &q.keys().processing),
        "{err:?}"
    );
    assert_eq!(snapshot(&mut c), before);
    let stats: bool = c.exists(&q.keys().stats).unwrap();
    assert!(!stats, "the claimed counter was taken back");
    let _: () = c.del(&q.keys().processing).unwrap();
    let _: () = c.rename("saved-stats", &q.keys().stats).unwrap();

    // ack: the same two checks.
    let leases = q.claim(2, "w", None).await.unwrap();
    let refs: Vec<_> = leases.iter().map(|l| l.lease_ref()).collect();
    let counters = |c: &mut redis::Connection| -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = c.hgetall(&q.keys().stats).unwrap();
        all.sort();
        all
    };
    let before = counters(&mut c);
    let scores: Vec<(String, f64)> = c.zrange_withscores(&q.keys().processing, 0, -1).unwrap();
    let _: () = c.rename(&q.keys().processing, "saved-processing").unwrap();
    let _: () = c.set(&q.keys().processing, "oops").unwrap();
    let err = q.ack_many(&refs).await.unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key, .. } if key == &q.keys().processing),
        "{err:?}"
    );
    assert_eq!(counters(&mut c), before, "acked was taken back");
    let token: Option<String> = c.hget(q.keys().job("a"), "claim_token").unwrap();
    assert_eq!(token.as_deref(), Some(leases[0].token.as_str()));
    let _: () = c.del(&q.keys().processing).unwrap();
    let _: () = c.rename("saved-processing", &q.keys().processing).unwrap();
    let _: () = c.rename(&q.keys().stats, "saved-stats").unwrap();
    let _: () = c.rpush(&q.keys().stats, "x").unwrap();
    let err = q.ack_many(&refs).await.unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key, .. } if key == &q.keys().stats),
        "{err:?}"
    );
    let after: Vec<(String, f64)> = c.zrange_withscores(&q.keys().processing, 0, -1).unwrap();
    assert_eq!(after, scores, "processing is as it was");
    let _: () = c.del(&q.keys().stats).unwrap();
    let _: () = c.rename("saved-stats", &q.keys().stats).unwrap();
    assert_eq!(q.ack_many(&refs).await.unwrap(), [true, true]);
}

#[tokio::test]
async fn a_new_job_has_no_attempts_field_until_claimed() {
    let server = RedisServer::start();
    let q = server.queue("att").await;
    let mut c = server.conn();
    enqueue_ids(&q, &["a"]).await;
    let fields: Vec<String> = c.hkeys(q.keys().job("a")).unwrap();
    assert!(!fields.contains(&"attempts".to_string()), "{fields:?}");
    assert_eq!(q.job("a").await.unwrap().unwrap().attempts, 0);
    let lease = q.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!(lease.attempts, 1);
    let attempts: Option<String> = c.hget(q.keys().job("a"), "attempts").unwrap();
    assert_eq!(attempts.as_deref(), Some("1"));
}

#[tokio::test]
async fn enqueue_checks_existing_and_wrong_typed_ids_in_a_batch() {
    let server = RedisServer::start();
    let q = server.queue("enq").await;
    let mut c = server.conn();
    enqueue_ids(&q, &["old"]).await;
    let out = q
        .enqueue_many(vec![job("new1"), job("old"), job("new2"), job("new1")])
        .await
        .unwrap();
    let created: Vec<bool> = out.iter().map(|e| e.created).collect();
    assert_eq!(created, [true, false, true, false]);
    let _: () = c.set(q.keys().job("str"), "x").unwrap();
    let keys_before: Vec<String> = c.keys("jq:*").unwrap();
    let err = q
        .enqueue_many(vec![job("n3"), job("str")])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key, .. } if key == &q.keys().job("str")),
        "{err:?}"
    );
    let keys_after: Vec<String> = c.keys("jq:*").unwrap();
    assert_eq!(keys_after.len(), keys_before.len(), "nothing written");
}

/// Reap `count` expired leases of which one's hash is gone, one was extended in the
/// hash only, and one's key was turned into a string (when `bad_key`).
async fn reap_a_batch(q: &Queue, c: &mut redis::Connection, count: usize, bad_key: bool) {
    let ids: Vec<String> = (0..count).map(|i| format!("r{i:02}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    enqueue_ids(q, &refs).await;
    let leases = q
        .claim(count, "w", Some(Duration::from_millis(1)))
        .await
        .unwrap();
    assert_eq!(leases.len(), count);
    let until = leases.iter().map(|l| l.lease_until).max().unwrap();
    wait_past(c, until);
    let _: () = c.del(q.keys().job("r00")).unwrap();
    let later = until + 60_000;
    let _: () = c.hset(q.keys().job("r01"), "lease_until", later).unwrap();
    if bad_key {
        // a job key that is not a hash: set aside like an absent one, the rest reaped
        let _: () = c.del(q.keys().job("r02")).unwrap();
        let _: () = c.set(q.keys().job("r02"), "not a hash").unwrap();
    }
    let out = q.reap(1000).await.unwrap();
    let lost = if bad_key { 2 } else { 1 };
    assert_eq!(out.requeued as usize, count - 1 - lost);
    assert!(!out.more);
    let score: f64 = c.zscore(&q.keys().processing, "r01").unwrap();
    assert_eq!(score as i64, later, "re-scored from the hash");
    let stats = q.stats().await.unwrap();
    assert_eq!(stats.orphans as usize, lost);
    assert_eq!(
        (stats.set_aside as usize, stats.orphaned as usize),
        (lost, lost)
    );
    assert_eq!(stats.wrong_type, u64::from(bad_key));
    assert_eq!(stats.pending as usize, count - 1 - lost);
    // Served earliest-expired first: r03.. (or r02..) in claim order.
    let next = q.claim(1, "w", None).await.unwrap();
    assert_eq!(next[0].id, if bad_key { "r03" } else { "r02" });
    assert_eq!(next[0].attempts, 2);
}

#[tokio::test]
async fn a_large_reap_meets_orphans_rescores_and_wrong_types() {
    let server = RedisServer::start();
    let q = server.queue("reap").await;
    let mut c = server.conn();
    reap_a_batch(&q, &mut c, 40, true).await;
}
