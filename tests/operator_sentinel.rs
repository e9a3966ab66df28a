//! The operator on a Redis behind Sentinel: a reconcile finds the primary through the
//! Sentinels, reaps the queue there, publishes its counts and its durability; what goes
//! wrong on the way (no Sentinel answers, a master name they do not know) is a condition
//! reason of its own, with a message that names the addresses and never a password.
//! The reconciler against kube's mock API and a real primary, two replicas and three
//! Sentinels.

mod support;

use std::time::Duration;

use jobqueue::crd::{
    DurabilityMode, DurabilitySpec, JobQueue, JobQueueStatus, SecretKeySelector, SentinelSpec,
};
use jobqueue::queue::{Durability, NewJob};
use kube::runtime::controller::Action;
use support::fixtures::{JobQueueExt, queue};
use support::mock_api::{Expect, Scenario, test_context};
use support::redis::{free_port, wait_past};
use support::sentinel::{MASTER, SentinelSetup};

fn condition<'a>(status: &'a JobQueueStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = status
        .condition(type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status:?}"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

/// A JobQueue `name` (tag `tag`) that finds its Redis through the Sentinels at `addresses`.
fn sentinel_queue(name: &str, tag: &str, addresses: Vec<String>, master: &str) -> JobQueue {
    queue(name, "redis://unused:6379", tag).edit(|s| {
        s.redis.url = None;
        s.redis.sentinel = Some(SentinelSpec {
            addresses,
            master_name: master.into(),
            password_secret_ref: None,
        });
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_behind_sentinel_is_reaped_on_the_primary_and_its_durability_published() {
    let setup = SentinelSetup::start();
    let q = setup.queue("op").await;
    for i in 0..3 {
        q.enqueue(NewJob::new(format!("job {i}"))).await.unwrap();
    }
    let leases = q
        .claim(3, "crashed-worker", Some(Duration::from_millis(20)))
        .await
        .unwrap();
    assert_eq!(leases.len(), 3);
    let until = leases.iter().map(|l| l.lease_until).max().unwrap();
    let primary = setup.primary_port();
    let mut on_primary = redis::Client::open(format!("redis://127.0.0.1:{primary}"))
        .unwrap()
        .get_connection()
        .unwrap();
    wait_past(&mut on_primary, until);

    let jq = sentinel_queue("op", "op", setup.addrs(), MASTER).edit(|s| {
        s.durability = Some(DurabilitySpec {
            mode: DurabilityMode::Replicated,
            replicas: 2,
            timeout: "2s".into(),
        })
    });
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    let status = &seen.statuses[0];
    assert_eq!(
        (status.pending, status.processing, status.reaped),
        (3, 0, 3),
        "reaped through the primary the Sentinels name, and counted"
    );
    assert_eq!(condition(status, "Ready").0, "True");
    let (s, _, message) = condition(status, "RedisAvailable");
    assert_eq!(s, "True");
    assert!(message.contains("sentinel://127.0.0.1:"), "{message}");
    // On the primary itself, and confirmed by both replicas (WAIT 2 after the reap).
    let pending: u64 = redis::cmd("LLEN")
        .arg("jq:{op}:pending")
        .query(&mut on_primary)
        .unwrap();
    assert_eq!(pending, 3);
    for replica in setup.servers.iter().filter(|s| s.port != primary) {
        let pending: u64 = redis::cmd("LLEN")
            .arg("jq:{op}:pending")
            .query(&mut replica.conn())
            .unwrap();
        assert_eq!(pending, 3, "replica {} has the reap", replica.port);
    }
    // The durability is in meta, where a worker without --durability finds it.
    assert_eq!(
        q.published_durability().await.unwrap(),
        Some(Durability::Replicated {
            replicas: 2,
            timeout: Duration::from_secs(2)
        })
    );

    // Back to primary: the field goes, and workers default to primary again.
    let primary_again = jq
        .clone()
        .at_generation(2, "2")
        .edit(|s| s.durability = None)
        .with_status(status.clone());
    let (result, _) = Scenario::new(&primary_again)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(q.published_durability().await.unwrap(), None);

    // A master name the Sentinels do not monitor: UnknownMaster, naming what they do.
    let typo = sentinel_queue("typo", "typo", setup.addrs(), "mymastr");
    let (result, seen) = Scenario::new(&typo)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "UnknownMaster"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap_err().metric_label(), "unknown_master");
    let (s, reason, message) = condition(&seen.statuses[0], "Ready");
    assert_eq!((s, reason), ("False", "UnknownMaster"));
    assert_eq!(
        message,
        format!(
            "the Sentinels at {} monitor no master named \"mymastr\" (they monitor: {MASTER}); \
             check spec.redis.sentinel.masterName",
            setup.addr_list()
        )
    );
}

#[tokio::test]
async fn no_sentinel_answering_is_sentinel_unreachable_in_the_status() {
    let closed = vec![
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    ];
    let jq = sentinel_queue("nos", "nos", closed.clone(), MASTER).edit(|s| {
        s.redis.sentinel.as_mut().unwrap().password_secret_ref = Some(SecretKeySelector {
            name: "sentinel-auth".into(),
            key: "password".into(),
        })
    });
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::Secret(
            "sentinel-auth",
            vec![("password", "s3cret-sentinel-pw".into())],
        ))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "SentinelUnreachable"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap_err().metric_label(), "sentinel_unreachable");
    let status = &seen.statuses[0];
    let prefix = format!(
        "no Sentinel of spec.redis.sentinel.addresses answered ({}): ",
        closed.join(",")
    );
    for type_ in ["Ready", "RedisAvailable"] {
        let (s, reason, message) = condition(status, type_);
        assert_eq!((s, reason), ("False", "SentinelUnreachable"), "{type_}");
        assert!(message.starts_with(&prefix), "{type_}: {message}");
    }
    // The exact patch: only the status, and no password anywhere in what was sent.
    let patch: serde_json::Value = seen
        .bodies
        .iter()
        .map(|b| serde_json::from_str::<serde_json::Value>(b).unwrap())
        .find(|b| b.get("status").is_some())
        .expect("a status patch");
    assert_eq!(
        patch.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["apiVersion", "kind", "status"]
    );
    assert_eq!(patch["status"]["observedGeneration"], 1);
    let reasons: Vec<(&str, &str)> = patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap(), c["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("RedisAvailable", "SentinelUnreachable"),
            ("Ready", "SentinelUnreachable"),
            ("SpecValid", "ValidSpec")
        ]
    );
    for body in &seen.bodies {
        assert!(!body.contains("s3cret-sentinel-pw"), "{body}");
    }
}
