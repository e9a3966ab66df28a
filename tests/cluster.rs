//! The core scenarios on a real 3-master Redis Cluster, with three queues whose hash
//! tags live on different nodes: every script runs without CROSSSLOT.

mod support;

use std::time::Duration;

use jobqueue::queue::{Backoff, FailMode, FailOutcome, NewJob, Queue, QueueSettings, Selection};
use support::redis::{RedisCluster, redis_now_ms};

/// Wait until `node`'s clock has passed `ms`, without blocking the runtime.
async fn wait_past(node: &support::redis::RedisServer, ms: i64) {
    let mut conn = node.conn();
    while redis_now_ms(&mut conn) <= ms {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn scenario(cluster: &RedisCluster, queue: Queue, node: usize) {
    let server = &cluster.nodes[node];
    let mut conn = server.conn();
    queue
        .configure(&QueueSettings {
            max_attempts: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    // The queue's keys are on the node its tag says, and nowhere else.
    let keys: Vec<String> = redis::cmd("KEYS").arg("jq:*").query(&mut conn).unwrap();
    assert!(keys.contains(&queue.keys().meta), "{keys:?}");

    // FIFO, batch claim, ack.
    let jobs = (0..10)
        .map(|i| NewJob::new(format!("p{i}").into_bytes()).id(format!("j{i}")))
        .collect();
    let created = queue.enqueue_many(jobs).await.unwrap();
    assert!(created.iter().all(|e| e.created));
    let leases = queue.claim(4, "w", None).await.unwrap();
    assert_eq!(
        leases
            .iter()
            .map(|l| l.id.as_str().unwrap())
            .collect::<Vec<_>>(),
        ["j0", "j1", "j2", "j3"]
    );
    let refs: Vec<_> = leases.iter().map(|l| l.lease_ref()).collect();
    assert!(
        queue
            .extend_many(&refs, None)
            .await
            .unwrap()
            .iter()
            .all(Option::is_some)
    );
    assert_eq!(queue.ack_many(&refs).await.unwrap(), [true; 4]);

    // The race: reclaimed lease, late ack rejected.
    let a = queue
        .claim_one("a", Some(Duration::from_millis(1)))
        .await
        .unwrap()
        .unwrap();
    wait_past(server, a.lease_until).await;
    assert_eq!(queue.reap(100).await.unwrap().requeued, 1);
    let b = queue.claim_one("b", None).await.unwrap().unwrap();
    assert_eq!(b.id, a.id);
    assert!(!queue.ack(&a).await.unwrap());
    assert!(queue.ack(&b).await.unwrap());

    // Fail: delayed, then dead; redrive and purge.
    let c = queue.claim_one("c", None).await.unwrap().unwrap();
    let outcome = queue
        .fail(
            &c,
            "transient",
            FailMode::Retry,
            Backoff::After(Duration::from_millis(5)),
        )
        .await
        .unwrap();
    assert_eq!(outcome, FailOutcome::Delayed);
    let mut consumer = queue.consumer("c2");
    let mut seen = None;
    for _ in 0..50 {
        let got = consumer
            .next_jobs(10, Duration::from_millis(200))
            .await
            .unwrap();
        if let Some(l) = got.iter().find(|l| l.id == c.id) {
            seen = Some(l.clone());
        }
        let refs: Vec<_> = got
            .iter()
            .filter(|l| l.id != c.id)
            .map(|l| l.lease_ref())
            .collect();
        if !refs.is_empty() {
            queue.ack_many(&refs).await.unwrap();
        }
        if seen.is_some() {
            break;
        }
    }
    let c2 = seen.expect("delayed job promoted");
    assert_eq!(
        queue
            .fail(&c2, "again", FailMode::Retry, Backoff::Policy)
            .await
            .unwrap(),
        FailOutcome::Dead
    );
    assert_eq!(
        queue
            .redrive(&Selection::Ids(vec![c2.id.to_string()]))
            .await
            .unwrap(),
        1
    );
    let c3 = loop {
        let l = queue
            .claim_one("c3", None)
            .await
            .unwrap()
            .expect("redriven job");
        if l.id == c2.id {
            break l;
        }
        queue.ack(&l).await.unwrap();
    };
    queue
        .fail(&c3, "final", FailMode::Dead, Backoff::Policy)
        .await
        .unwrap();
    assert_eq!(queue.purge(&Selection::Oldest(10)).await.unwrap(), 1);

    // Drain and check the books.
    while let Some(l) = queue.claim_one("d", None).await.unwrap() {
        assert!(queue.ack(&l).await.unwrap());
    }
    queue.check_key_types().await.unwrap();
    let s = queue.stats().await.unwrap();
    assert_eq!((s.pending, s.processing, s.delayed, s.dead), (0, 0, 0, 0));
    assert_eq!(
        (s.enqueued, s.acked, s.stale, s.redriven, s.purged),
        (10, 9, 1, 1, 1)
    );
    assert_eq!(s.histogram.total(), 9);
}

#[tokio::test]
async fn three_queues_on_three_nodes_run_every_script() {
    let cluster = RedisCluster::start();
    let tags = cluster.tags_on_distinct_nodes(3);
    assert_eq!(tags.len(), 3);
    let redis = cluster.redis().await;
    let mut tasks = vec![];
    let cluster = std::sync::Arc::new(cluster);
    for tag in &tags {
        let node = cluster.node_of(&format!("{{{tag}}}"));
        let queue = Queue::new(redis.clone(), "jq", tag).unwrap();
        queue.load_scripts().await.unwrap();
        let cluster = cluster.clone();
        tasks.push(tokio::spawn(async move {
            scenario(&cluster, queue, node).await
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let nodes: std::collections::HashSet<usize> = tags
        .iter()
        .map(|t| cluster.node_of(&format!("{{{t}}}")))
        .collect();
    assert_eq!(nodes.len(), 3, "the three queues live on three nodes");
}

#[tokio::test]
async fn scripts_are_reloaded_on_a_node_that_forgot_them() {
    let cluster = RedisCluster::start();
    let tag = &cluster.tags_on_distinct_nodes(1)[0];
    let node = cluster.node_of(&format!("{{{tag}}}"));
    let queue = Queue::new(cluster.redis().await, "jq", tag).unwrap();
    queue.enqueue(NewJob::new(&b"a"[..])).await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut cluster.nodes[node].conn())
        .unwrap();
    queue.enqueue(NewJob::new(&b"b"[..])).await.unwrap();
    assert_eq!(queue.claim(5, "w", None).await.unwrap().len(), 2);
}

/// `replicated` durability on a Cluster: `WAIT` must run on the node that ran the
/// script (it counts the replicas of that connection's writes). With the replica of one
/// master stopped, writes to a queue on that master fail as not replicated, and writes
/// to queues on the other masters succeed: WAIT followed each script to its node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_durability_waits_on_the_node_that_ran_the_script() {
    use jobqueue::queue::{Durability, Error};
    let mut cluster = RedisCluster::start_with_replicas();
    // Ample time for a replica that is up to confirm on a loaded machine; a short wait
    // where none can.
    let confirmed = Durability::Replicated {
        replicas: 1,
        timeout: Duration::from_secs(10),
    };
    let refused = Durability::Replicated {
        replicas: 1,
        timeout: Duration::from_millis(300),
    };
    let tags = cluster.tags_on_distinct_nodes(3);
    let redis = cluster.redis().await;
    let queues = |durability: Durability| -> Vec<(usize, Queue)> {
        tags.iter()
            .map(|tag| {
                let node = cluster.node_of(&format!("{{{tag}}}"));
                let queue = Queue::new(redis.clone(), "jq", tag)
                    .unwrap()
                    .durability(durability);
                (node, queue)
            })
            .collect()
    };
    // Every master has its replica: every write is confirmed.
    for (node, queue) in &queues(confirmed) {
        queue
            .enqueue(NewJob::new("a").id("a"))
            .await
            .unwrap_or_else(|e| panic!("node {node}: {e}"));
        let lease = queue.claim_one("w", None).await.unwrap().unwrap();
        assert!(queue.ack(&lease).await.unwrap(), "node {node}");
    }

    // Stop the replica of the master of the first queue.
    let queues = queues(refused);
    let (down, _) = &queues[0];
    cluster.replicas[*down].kill();
    for (node, queue) in &queues {
        let result = queue.enqueue(NewJob::new("b").id("b")).await;
        if node == down {
            let err = result.expect_err("no replica can confirm it");
            assert!(
                matches!(
                    err,
                    Error::NotReplicated {
                        acked: 0,
                        wanted: 1,
                        ..
                    }
                ),
                "node {node}: {err:?}"
            );
        } else {
            result.unwrap_or_else(|e| panic!("node {node} still has its replica: {e}"));
        }
        // The write ran on the queue's own master either way.
        let mut conn = cluster.nodes[*node].conn();
        let payload: Option<String> = redis::cmd("HGET")
            .arg(format!("{}:job:b", queue.name()))
            .arg("payload")
            .query(&mut conn)
            .unwrap();
        assert_eq!(payload.as_deref(), Some("b"), "node {node}");
    }
}

/// The slot-migration tests need a Cluster whose masters never bump their config epochs
/// on their own: a bump between the two `SETSLOT … NODE` of a migration can hand the slot
/// back to the source, after which each node names the other as the owner.
#[test]
fn a_new_cluster_has_a_distinct_config_epoch_per_master() {
    let cluster = RedisCluster::start();
    let mut epochs: Vec<i64> = cluster
        .nodes
        .iter()
        .map(|node| {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut node.conn())
                .unwrap();
            info.lines()
                .find_map(|line| line.strip_prefix("cluster_my_epoch:"))
                .expect("cluster_my_epoch in CLUSTER INFO")
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    epochs.sort_unstable();
    epochs.dedup();
    assert_eq!(epochs.len(), 3, "config epochs {epochs:?}");
    assert!(epochs[0] > 0, "config epochs {epochs:?}");
}
