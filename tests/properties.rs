//! Property test of the scripts: random sequences of operations against a model of
//! where each job must be. After every step, every job is in exactly one place, its
//! status says which, `pending` holds no id twice, only the current token acts, and the
//! stats counts agree with the keys.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use jobqueue::queue::{
    Backoff, FailMode, FailOutcome, Lease, NewJob, Queue, QueueSettings, Selection,
};
use proptest::prelude::*;
use redis::Commands;
use support::redis::{RedisServer, redis_now_ms, wait_past};

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        id: u8,
        delayed: bool,
    },
    Claim {
        n: usize,
        short: bool,
    },
    Ack {
        lease: usize,
    },
    Extend {
        lease: usize,
    },
    Fail {
        lease: usize,
        dead: bool,
        immediate: bool,
    },
    ExpireAndReap {
        batch: usize,
    },
    Redrive {
        oldest: bool,
    },
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12, any::<bool>()).prop_map(|(id, d)| Op::Enqueue { id, delayed: d && id % 3 == 0 }),
        3 => (1usize..4, any::<bool>()).prop_map(|(n, short)| Op::Claim { n, short }),
        3 => (0usize..16).prop_map(|lease| Op::Ack { lease }),
        1 => (0usize..16).prop_map(|lease| Op::Extend { lease }),
        2 => (0usize..16, any::<bool>(), any::<bool>())
            .prop_map(|(lease, dead, immediate)| Op::Fail { lease, dead, immediate }),
        2 => (1usize..5).prop_map(|batch| Op::ExpireAndReap { batch }),
        1 => any::<bool>().prop_map(|oldest| Op::Redrive { oldest }),
        1 => Just(Op::Purge),
    ]
}

struct Run {
    queue: Queue,
    conn: redis::Connection,
    /// Every lease ever handed out; the model knows which one is current per id.
    leases: Vec<Lease>,
    current: HashMap<String, String>,
    known: Vec<String>,
    acks: HashMap<String, u32>,
}

impl Run {
    /// The job's status; a job enqueued ready has none until claimed: pending.
    fn status(&mut self, id: &str) -> Option<String> {
        let key = self.queue.keys().job(id);
        let status: Option<String> = self.conn.hget(&key, "status").unwrap();
        let exists: bool = self.conn.exists(&key).unwrap();
        status.or_else(|| exists.then(|| "pending".to_string()))
    }

    fn check_invariants(&mut self) {
        let k = self.queue.keys().clone();
        let pending: Vec<String> = self.conn.lrange(&k.pending, 0, -1).unwrap();
        let mut seen = std::collections::HashSet::new();
        for id in &pending {
            assert!(
                seen.insert(id.clone()),
                "{id} twice in pending: {pending:?}"
            );
        }
        for id in self.known.clone() {
            let status = self.status(&id);
            let in_pending = pending.contains(&id);
            let in_processing: Option<f64> = self.conn.zscore(&k.processing, &id).unwrap();
            let in_delayed: Option<f64> = self.conn.zscore(&k.delayed, &id).unwrap();
            let in_dead: Option<f64> = self.conn.zscore(&k.dead, &id).unwrap();
            let places = [
                in_pending,
                in_processing.is_some(),
                in_delayed.is_some(),
                in_dead.is_some(),
            ];
            let count = places.iter().filter(|p| **p).count();
            match status.as_deref() {
                None => assert_eq!(count, 0, "{id}: gone but still listed {places:?}"),
                Some("pending") => assert!(in_pending && count == 1, "{id}: {places:?}"),
                Some("processing") => {
                    assert!(in_processing.is_some() && count == 1, "{id}: {places:?}")
                }
                Some("delayed") => assert!(in_delayed.is_some() && count == 1, "{id}: {places:?}"),
                Some("dead") => assert!(in_dead.is_some() && count == 1, "{id}: {places:?}"),
                other => panic!("{id}: unexpected status {other:?}"),
            }
            let token: Option<String> = self.conn.hget(k.job(&id), "claim_token").unwrap();
            if status.as_deref() == Some("processing") {
                assert_eq!(token.as_ref(), self.current.get(&id), "{id}: token");
            } else {
                // the claim_token of the last lease stays (when and by whom the job was last
                // claimed); the lease itself must be gone
                let until: Option<String> = self.conn.hget(k.job(&id), "lease_until").unwrap();
                assert_eq!(
                    until, None,
                    "{id}: a lease outlived its end (token {token:?})"
                );
            }
            assert!(
                self.acks.get(&id).copied().unwrap_or(0) <= 1,
                "{id} acked twice"
            );
        }
    }
}

async fn step(run: &mut Run, op: Op) {
    let q = run.queue.clone();
    match op {
        Op::Enqueue { id, delayed } => {
            let id = format!("j{id}");
            let delay = if delayed {
                Duration::from_millis(2)
            } else {
                Duration::ZERO
            };
            let existed = run.status(&id).is_some();
            let out = q
                .enqueue(
                    NewJob::new(id.clone().into_bytes())
                        .id(id.clone())
                        .delay(delay),
                )
                .await
                .unwrap();
            assert_eq!(
                out.created, !existed,
                "{id}: enqueue refuses only existing ids"
            );
            if out.created {
                run.acks.remove(&id);
                if !run.known.contains(&id) {
                    run.known.push(id);
                }
            }
        }
        Op::Claim { n, short } => {
            let visibility = if short {
                Duration::from_millis(1)
            } else {
                Duration::from_secs(3600)
            };
            for lease in q.claim(n, "w", Some(visibility)).await.unwrap() {
                assert_eq!(
                    run.status(lease.id.as_str().unwrap()).as_deref(),
                    Some("processing")
                );
                run.current
                    .insert(lease.id.to_string(), lease.token.clone());
                run.leases.push(lease);
            }
        }
        Op::Ack { lease } => {
            let Some(lease) = run.leases.get(lease % run.leases.len().max(1)).cloned() else {
                return;
            };
            let holds = run.current.get(lease.id.as_str().unwrap()) == Some(&lease.token);
            let ok = q.ack(&lease).await.unwrap();
            assert_eq!(ok, holds, "ack accepted iff the token holds the lease");
            if ok {
                run.current.remove(lease.id.as_str().unwrap());
                *run.acks.entry(lease.id.to_string()).or_default() += 1;
            }
        }
        Op::Extend { lease } => {
            let Some(lease) = run.leases.get(lease % run.leases.len().max(1)).cloned() else {
                return;
            };
            let holds = run.current.get(lease.id.as_str().unwrap()) == Some(&lease.token);
            let until = q
                .extend(&lease, Some(Duration::from_secs(3600)))
                .await
                .unwrap();
            assert_eq!(until.is_some(), holds);
        }
        Op::Fail {
            lease,
            dead,
            immediate,
        } => {
            let Some(lease) = run.leases.get(lease % run.leases.len().max(1)).cloned() else {
                return;
            };
            let holds = run.current.get(lease.id.as_str().unwrap()) == Some(&lease.token);
            let mode = if dead {
                FailMode::Dead
            } else {
                FailMode::Retry
            };
            let backoff = if immediate {
                Backoff::Immediate
            } else {
                Backoff::After(Duration::from_millis(2))
            };
            let out = q.fail(&lease, "e", mode, backoff).await.unwrap();
            assert_eq!(out != FailOutcome::Stale, holds);
            if holds {
                run.current.remove(lease.id.as_str().unwrap());
            }
            if dead && holds {
                assert_eq!(out, FailOutcome::Dead);
            }
        }
        Op::ExpireAndReap { batch } => {
            // Let every short lease run out, then reap until done.
            let now = redis_now_ms(&mut run.conn);
            wait_past(&mut run.conn, now + 1);
            loop {
                let r = q.reap(batch).await.unwrap();
                assert!(r.requeued + r.dead_lettered <= batch as u64);
                if !r.more {
                    break;
                }
            }
            let ids: Vec<String> = run.current.keys().cloned().collect();
            for id in ids {
                if run.status(&id).as_deref() != Some("processing") {
                    run.current.remove(&id);
                }
            }
        }
        Op::Redrive { oldest } => {
            if run.known.is_empty() {
                return;
            }
            let sel = if oldest {
                Selection::Oldest(2)
            } else {
                Selection::Ids(run.known.clone())
            };
            q.redrive(&sel).await.unwrap();
        }
        Op::Purge => {
            q.purge(&Selection::Oldest(1)).await.unwrap();
        }
    }
    run.check_invariants();
    let s = q.stats().await.unwrap();
    let k = q.keys();
    let pending: u64 = run.conn.llen(&k.pending).unwrap();
    let processing: u64 = run.conn.zcard(&k.processing).unwrap();
    let dead: u64 = run.conn.zcard(&k.dead).unwrap();
    assert_eq!(
        (s.pending, s.processing, s.dead),
        (pending, processing, dead)
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_job_is_in_exactly_one_place(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let server = RedisServer::start();
        rt.block_on(async {
            let queue = server.queue("prop").await;
            queue.configure(&QueueSettings { max_attempts: 3, ..Default::default() }).await.unwrap();
            let mut run = Run {
                queue,
                conn: server.conn(),
                leases: vec![],
                current: HashMap::new(),
                known: vec![],
                acks: HashMap::new(),
            };
            for op in ops {
                step(&mut run, op).await;
            }
        });
    }
}
