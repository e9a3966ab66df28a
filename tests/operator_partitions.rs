//! Partitioned queues in the operator (`spec.partitions`): the status sums the
//! partitions and lists each, the workers scale on the total backlog, and after a shrink
//! the partitions left out are reaped and counted until they are empty, the status
//! remembering them across operator restarts (and a probe making up for a lost status).
//! The reconciler against kube's mock API and a real redis-server.

mod support;

use std::time::Duration;

use jobqueue::crd::{JobQueue, JobQueueStatus};
use jobqueue::queue::partitions::tag_slot;
use jobqueue::queue::{LeaseRef, NewJob, Queue, partition_tags};
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use support::fixtures::{JobQueueExt, ScaleTarget, TestClock, deployment, queue, workers};
use support::mock_api::{Expect, Scenario, test_context, test_context_at};
use support::redis::{RedisCluster, RedisServer, wait_past};

const WORKER: ScaleTarget = deployment("worker");

fn condition<'a>(status: &'a JobQueueStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = status
        .condition(type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status:?}"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

async fn enqueue(q: &Queue, n: usize) {
    let jobs = (0..n).map(|i| NewJob::new(format!("job {i}"))).collect();
    q.enqueue_many(jobs).await.unwrap();
}

/// Claim and ack every job of `q`, as workers draining it would.
async fn work_off(q: &Queue) {
    loop {
        let leases = q.claim(100, "drainer", None).await.unwrap();
        if leases.is_empty() {
            return;
        }
        let refs: Vec<LeaseRef<'_>> = leases.iter().map(LeaseRef::from).collect();
        assert!(q.ack_many(&refs).await.unwrap().iter().all(|&a| a));
    }
}

/// The queues of the `n` partitions of `tag` in `redis`.
async fn partitions(redis: &RedisServer, tag: &str, n: usize) -> Vec<Queue> {
    let mut queues = Vec::new();
    for t in partition_tags(tag, n).unwrap() {
        queues.push(redis.queue(&t).await);
    }
    queues
}

/// The status body of the one status patch among `bodies`, as sent.
fn status_body(bodies: &[String]) -> Value {
    let patches: Vec<Value> = bodies
        .iter()
        .map(|b| serde_json::from_str::<Value>(b).unwrap())
        .filter(|v| v["kind"] == "JobQueue" && v.get("status").is_some())
        .collect();
    assert_eq!(patches.len(), 1, "{bodies:?}");
    patches[0]["status"].clone()
}

#[tokio::test]
async fn the_status_lists_each_partition_and_the_workers_scale_on_the_total() {
    let redis = RedisServer::start();
    let tags = partition_tags("img", 4).unwrap();
    let parts = partitions(&redis, "img", 4).await;
    // 35 jobs in all, unevenly: 5, 10, 0, 20. One of the 10 claimed by a worker.
    for (q, n) in parts.iter().zip([5, 10, 0, 20]) {
        enqueue(q, n).await;
    }
    assert_eq!(parts[1].claim(1, "w-1", None).await.unwrap().len(), 1);

    let jq = queue("img", &redis.url(), "img")
        .edit(|s| s.partitions = 4)
        .with_workers(workers(0, 10));
    let clock = TestClock::new();
    let (ctx, mut api, registry) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 0))
        .expect(Expect::RecordOriginal("Deployment/worker", 0))
        .expect(Expect::ScalePatch(WORKER, 4))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    // The total backlog (34 pending + 1 processing) at 10 per replica: 4 replicas.
    assert_eq!(seen.scales, vec![4]);
    let status = &seen.statuses[0];
    assert_eq!((status.pending, status.processing), (34, 1));
    let (_, reason, message) = condition(status, "Scaling");
    assert_eq!(reason, "ScaledUp");
    assert!(
        message.contains("backlog 35 (34 pending, 1 processing)"),
        "{message}"
    );
    let (ready, _, message) = condition(status, "Ready");
    assert_eq!(ready, "True");
    assert_eq!(
        message,
        "queue jq:{img} (4 partitions) is configured, reaped and counted"
    );
    assert!(status.condition("PartitionsDrained").is_none(), "no shrink");

    // The patch as sent: the partitions in layout order, each with its slot and counts.
    let item = |i: usize, pending: u64, processing: u64| {
        json!({
            "tag": tags[i], "slot": tag_slot(tags[i].as_bytes()),
            "pending": pending, "processing": processing,
            "delayed": 0, "due": 0, "dead": 0, "orphaned": 0,
        })
    };
    assert_eq!(
        status_body(&seen.bodies)["partitions"],
        json!({
            "desired": 4,
            "items": [item(0, 5, 0), item(1, 9, 1), item(2, 0, 0), item(3, 20, 0)],
        })
    );
    // Each partition is one of Redis Cluster's four slot ranges.
    for (i, t) in tags.iter().enumerate() {
        assert_eq!(usize::from(tag_slot(t.as_bytes())) * 4 / 16384, i, "{t}");
    }

    let text = jobqueue::controller::metrics::encode(&registry);
    for line in [
        r#"jobqueue_pending{namespace="default",name="img"} 34"#.to_string(),
        format!(
            r#"jobqueue_partition_pending{{namespace="default",name="img",partition="{}"}} 20"#,
            tags[3]
        ),
        r#"jobqueue_partitions_draining{namespace="default",name="img"} 0"#.to_string(),
    ] {
        assert!(text.contains(&line), "{line} missing from\n{text}");
    }
}

#[tokio::test]
async fn a_shrink_from_4_to_2_drains_the_removed_partitions_then_says_so() {
    let redis = RedisServer::start();
    let four = partition_tags("mail", 4).unwrap();
    let two = partition_tags("mail", 2).unwrap();
    let parts = partitions(&redis, "mail", 4).await;
    for q in &parts {
        enqueue(q, 3).await;
    }
    let removed: Vec<usize> = (0..4).filter(|i| !two.contains(&four[*i])).collect();
    assert_eq!(removed.len(), 2, "2 divides 4: two partitions stay");

    let jq = queue("mail", &redis.url(), "mail").edit(|s| s.partitions = 4);
    let (ctx, mut api, registry) = test_context();
    let (result, mut seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let at_four = seen.statuses.remove(0);
    assert_eq!(at_four.pending, 12);

    // Shrunk to 2. A worker of the old layout holds a lease in a removed partition and
    // dies: the lease must still be reaped, though no new job goes there.
    let leased = &parts[removed[0]];
    let lease = leased
        .claim(1, "dead-worker", Some(Duration::from_millis(20)))
        .await
        .unwrap();
    wait_past(&mut redis.conn(), lease[0].lease_until);
    let shrunk = jq
        .clone()
        .at_generation(2, "2")
        .edit(|s| s.partitions = 2)
        .with_status(at_four);
    let (result, mut seen) = Scenario::new(&shrunk)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let draining = seen.statuses.remove(0);
    assert_eq!(draining.pending, 12, "nothing lost: the total is the same");
    assert_eq!(
        draining.reaped, 1,
        "the lease in a removed partition was reaped"
    );
    assert_eq!(leased.stats().await.unwrap().pending, 3);
    let record = draining.partitions.as_ref().unwrap();
    assert_eq!(record.desired, 2);
    let removed_tags: Vec<String> = removed.iter().map(|i| four[*i].clone()).collect();
    assert_eq!(record.draining, removed_tags);
    let listed: Vec<(&str, bool)> = record
        .items
        .iter()
        .map(|i| (i.tag.as_str(), i.draining))
        .collect();
    let want: Vec<(&str, bool)> = two
        .iter()
        .map(|t| (t.as_str(), false))
        .chain(removed_tags.iter().map(|t| (t.as_str(), true)))
        .collect();
    assert_eq!(listed, want);
    let (s, reason, message) = condition(&draining, "PartitionsDrained");
    assert_eq!((s, reason), ("False", "Draining"));
    assert!(
        message.starts_with(&format!(
            "2 partitions of an earlier layout still hold jobs: {} (3 pending), {} (3 pending)",
            removed_tags[0], removed_tags[1]
        )),
        "{message}"
    );
    let text = jobqueue::controller::metrics::encode(&registry);
    assert!(
        text.contains(r#"jobqueue_partitions_draining{namespace="default",name="mail"} 2"#),
        "{text}"
    );

    // The operator restarts mid-drain: a new controller has only the status to go by.
    let (ctx, mut api, _) = test_context();
    work_off(&parts[removed[0]]).await;
    let restarted = shrunk.clone().with_status(draining.clone());
    let (result, mut seen) = Scenario::new(&restarted)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let half = seen.statuses.remove(0);
    assert_eq!(
        half.partitions.as_ref().unwrap().draining,
        removed_tags[1..],
        "the emptied partition is forgotten, the other still drains"
    );
    assert_eq!(condition(&half, "PartitionsDrained").0, "False");

    // The last removed partition emptied: drained, and the status says so.
    work_off(&parts[removed[1]]).await;
    let again = shrunk.clone().with_status(half);
    let (result, mut seen) = Scenario::new(&again)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "Drained"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(
        seen.events[0]["note"],
        "the partitions of earlier layouts are empty: every job is in the 2 partitions of \
         spec.partitions"
    );
    let drained = seen.statuses.remove(0);
    let (s, reason, _) = condition(&drained, "PartitionsDrained");
    assert_eq!((s, reason), ("True", "Drained"));
    let record = drained.partitions.as_ref().unwrap();
    assert!(record.draining.is_empty());
    assert_eq!(
        record.items.iter().map(|i| &i.tag).collect::<Vec<_>>(),
        two.iter().collect::<Vec<_>>()
    );
    assert_eq!(drained.pending, 6, "the two partitions' jobs");

    // Drained: the next reconcile maintains the two partitions alone. Only what sums
    // the history of the queue changes: the acks of the drained partitions (their
    // processing times) are no longer in it.
    let steady = shrunk.clone().with_status(drained.clone());
    let (result, mut seen) = Scenario::new(&steady)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let after = seen.statuses.remove(0);
    assert!(after.p50.is_none() && drained.p50.is_some(), "{after:?}");
    assert_eq!(
        JobQueueStatus {
            p50: drained.p50.clone(),
            p99: drained.p99.clone(),
            ..after
        },
        drained
    );
}

/// What the queue's own `meta` records of its partitions: `partitions`,
/// `drain_partitions` (docs/partitions.md, "The recorded count").
fn recorded(redis: &RedisServer, tag: &str) -> (Option<String>, Option<String>) {
    redis::cmd("HMGET")
        .arg(format!("jq:{{{tag}}}:meta"))
        .arg("partitions")
        .arg("drain_partitions")
        .query(&mut redis.conn())
        .unwrap()
}

#[tokio::test]
async fn the_operator_records_the_count_in_the_queue_and_the_drain_while_resizing() {
    let redis = RedisServer::start();
    let four = partition_tags("rec", 4).unwrap();
    let two = partition_tags("rec", 2).unwrap();
    let parts = partitions(&redis, "rec", 4).await;
    for q in &parts {
        enqueue(q, 2).await;
    }
    let jq = queue("rec", &redis.url(), "rec").edit(|s| s.partitions = 4);
    let (ctx, mut api, _) = test_context();
    let (result, mut seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(recorded(&redis, "rec"), (Some("4".into()), None));
    let at_four = seen.statuses.remove(0);

    // Shrunk to 2: producers route to 2, and the 4-partition layout is to be drained.
    let shrunk = jq
        .clone()
        .at_generation(2, "2")
        .edit(|s| s.partitions = 2)
        .with_status(at_four);
    let (result, mut seen) = Scenario::new(&shrunk)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(
        recorded(&redis, "rec"),
        (Some("2".into()), Some("4".into()))
    );
    let draining = seen.statuses.remove(0);

    // The removed partitions emptied: the reconcile that finds them drained ends the
    // resize in the record too.
    for (q, t) in parts.iter().zip(&four) {
        if !two.contains(t) {
            work_off(q).await;
        }
    }
    let again = shrunk.clone().with_status(draining);
    let (result, _) = Scenario::new(&again)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "Drained"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(recorded(&redis, "rec"), (Some("2".into()), None));
}

#[tokio::test]
async fn a_queue_created_again_without_its_status_finds_the_old_partitions() {
    // A JobQueue of 8 partitions deleted (its keys stay) and created again with 1: no
    // status remembers the 8, so the first reconcile probes for them.
    let redis = RedisServer::start();
    let eight = partition_tags("old", 8).unwrap();
    let parts = partitions(&redis, "old", 8).await;
    let others: Vec<usize> = (0..8).filter(|i| eight[*i] != "old").collect();
    enqueue(&parts[others[0]], 1).await;
    enqueue(&parts[others[3]], 2).await;

    let jq: JobQueue = queue("old", &redis.url(), "old");
    let (ctx, mut api, _) = test_context();
    let (result, mut seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = seen.statuses.remove(0);
    let record = status
        .partitions
        .as_ref()
        .expect("partitions found draining");
    assert_eq!(record.desired, 1);
    let mut found = record.draining.clone();
    found.sort();
    let mut want = vec![eight[others[0]].clone(), eight[others[3]].clone()];
    want.sort();
    assert_eq!(found, want);
    assert_eq!(status.pending, 3, "every job is counted");
    assert_eq!(condition(&status, "PartitionsDrained").1, "Draining");
}

#[tokio::test]
async fn an_unpartitioned_queue_keeps_its_status_as_it_was() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("plain").await, 2).await;
    let jq = queue("plain", &redis.url(), "plain");
    let (ctx, mut api, registry) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = status_body(&seen.bodies);
    assert!(status.get("partitions").is_none(), "{status}");
    assert_eq!(recorded(&redis, "plain"), (None, None), "nothing to record");
    assert_eq!(status["pending"], 2);
    assert_eq!(
        condition(&seen.statuses[0], "Ready").2,
        "queue jq:{plain} is configured, reaped and counted"
    );
    let text = jobqueue::controller::metrics::encode(&registry);
    assert!(!text.contains("partition_pending{"), "{text}");
}

#[tokio::test]
async fn on_a_cluster_the_partitions_spread_over_the_masters_and_old_ones_are_found() {
    // A queue once of 6 partitions, created again with 3 and no status: the probe finds
    // the three left out on the Cluster's nodes, and they drain.
    let cluster = RedisCluster::start();
    let redis = cluster.redis().await;
    let six = partition_tags("rep", 6).unwrap();
    let three = partition_tags("rep", 3).unwrap();
    let mut parts = Vec::new();
    for t in &six {
        let q = Queue::new(redis.clone(), "jq", t).unwrap();
        enqueue(&q, 2).await;
        parts.push(q);
    }
    let jq = queue("rep", &cluster.url(), "rep").edit(|s| {
        s.redis.cluster = true;
        s.partitions = 3;
    });
    let (ctx, mut api, _) = test_context();
    let (result, mut seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = seen.statuses.remove(0);
    assert_eq!(
        status.pending, 12,
        "every job of the six partitions is counted"
    );
    let record = status.partitions.as_ref().unwrap();
    let mut draining = record.draining.clone();
    draining.sort();
    let mut left_out: Vec<String> = six.iter().filter(|t| !three.contains(t)).cloned().collect();
    left_out.sort();
    assert_eq!(draining, left_out);
    // The three partitions in force, one per master.
    let nodes: Vec<usize> = record
        .items
        .iter()
        .filter(|i| !i.draining)
        .map(|i| cluster.node_of(&format!("{{{}}}", i.tag)))
        .collect();
    assert_eq!(nodes, [0, 1, 2]);
    let (_, _, message) = condition(&status, "Ready");
    assert!(message.contains("(3 partitions)"), "{message}");
    assert!(
        condition(&status, "RedisAvailable")
            .2
            .contains("Redis Cluster")
    );

    for (q, t) in parts.iter().zip(&six) {
        if !three.contains(t) {
            work_off(q).await;
        }
    }
    let again = jq.clone().with_status(status);
    let (result, mut seen) = Scenario::new(&again)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "Drained"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let drained = seen.statuses.remove(0);
    assert_eq!(condition(&drained, "PartitionsDrained").1, "Drained");
    assert_eq!(drained.pending, 6);
    assert_eq!(drained.partitions.unwrap().items.len(), 3);
}

#[tokio::test]
async fn under_the_operators_acl_the_probe_stops_at_its_first_refusal() {
    // docs/operations.md's operator user grants the keys of `emails` alone: the probe's
    // first other tag is refused, once, and the queue is reconciled as always.
    let redis = RedisServer::start();
    let doc = include_str!("../docs/operations.md");
    let line = doc
        .lines()
        .find(|l| l.starts_with("ACL SETUSER jq-operator "))
        .expect("the operator's ACL line");
    let mut admin = redis.conn();
    let mut cmd = redis::cmd("ACL");
    for arg in line.split_whitespace().skip(1) {
        cmd.arg(if arg.starts_with('>') { ">op" } else { arg });
    }
    let _: () = cmd.query(&mut admin).unwrap();
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut admin)
        .unwrap();
    enqueue(&redis.queue("emails").await, 2).await;

    let url = redis.url().replace("redis://", "redis://jq-operator:op@");
    let jq = queue("emails", &url, "emails");
    let (ctx, mut api, _) = test_context();
    let (result, mut seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = seen.statuses.remove(0);
    assert_eq!(condition(&status, "Ready").0, "True");
    assert_eq!((status.pending, status.partitions), (2, None));
    // ACL LOG entries: `[.., "object", key, ..]`, one per refused key.
    let log: Vec<Vec<redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .arg(100)
        .query(&mut admin)
        .unwrap();
    let refused: Vec<String> = log
        .iter()
        .map(|entry| {
            let at = entry
                .iter()
                .position(|v| matches!(v, redis::Value::BulkString(b) if b == b"object"))
                .expect("an object field");
            redis::from_redis_value(entry[at + 1].clone()).unwrap()
        })
        .collect();
    // The keys of the first tag probed, in its one round trip (processing, delayed, dead,
    // orphans and the ready list of each of the ten priorities); no other tag.
    assert_eq!(refused.len(), 14, "{refused:?}");
    let tag = refused[0].split(':').nth(1).unwrap().to_string();
    assert!(
        refused.iter().all(|k| k.split(':').nth(1) == Some(&tag)),
        "{refused:?}"
    );
}
