//! Schedules (lua/schedule.lua): exactly one job per tick whoever fires it, and the
//! missed-tick policy after a stretch with no firer.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use jobqueue::queue::schedule::{Missed, Rule, Schedule};
use jobqueue::queue::{JobOptions, Queue, QueueSettings};
use redis::Commands;
use std::process::{Command, Stdio};
use support::eventually::eventually;
use support::redis::{RedisServer, redis_now_ms, wait_past};

fn every_second(name: &str, missed: Missed) -> Schedule {
    Schedule {
        name: name.into(),
        rule: Rule::Every(Duration::from_secs(1)),
        payload: b"tick".to_vec(),
        options: JobOptions {
            max_attempts: Some(2),
            ..JobOptions::default()
        },
        missed,
        paused: false,
    }
}

/// The ticks of the jobs `name` fired, from their ids in pending, and how many ids there
/// were (a tick fired twice would be counted twice).
fn fired_ticks(conn: &mut redis::Connection, tag: &str, name: &str) -> (BTreeSet<i64>, usize) {
    let ids: Vec<String> = conn.lrange(format!("jq:{{{tag}}}:pending"), 0, -1).unwrap();
    let prefix = format!("sched:{name}:");
    let ticks: Vec<i64> = ids
        .iter()
        .filter_map(|id| id.strip_prefix(&prefix))
        .map(|t| t.parse().unwrap())
        .collect();
    (ticks.iter().copied().collect(), ticks.len())
}

/// Fire `queue`'s schedules as a worker's reaper does: at each next tick (plus jitter),
/// looking again at least every second, until Redis's clock passes `until`.
async fn firer(queue: Queue, until: i64, twin: bool) {
    loop {
        let f = queue.fire_schedules(None).await.unwrap();
        if twin {
            // a twin call for the same ticks right after (a retry, or a second replica)
            queue.fire_schedules(None).await.unwrap();
        }
        if f.now_ms > until {
            return;
        }
        let wait = f.next_tick.map_or(1000, |t| (t - f.now_ms).clamp(0, 1000)) as u64
            + rand::random::<u64>() % 20;
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_firers_make_exactly_one_job_per_tick() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let queue = server.queue("sched").await;
    queue.load_scripts().await.unwrap();
    assert_eq!(
        queue
            .put_schedule(&every_second("s", Missed::Once))
            .await
            .unwrap(),
        1
    );
    // the same rule again changes nothing (as the operator writes it every pass)
    assert_eq!(
        queue
            .put_schedule(&every_second("s", Missed::Once))
            .await
            .unwrap(),
        0
    );
    let first = queue
        .schedule("s")
        .await
        .unwrap()
        .unwrap()
        .next_tick
        .unwrap();
    let until = first + 10_000;

    // three reapers' firers (each with its own connection), one firing twice per look,
    // and the operator's upkeep pass
    let mut tasks = Vec::new();
    for i in 0..3 {
        let q = server.queue("sched").await;
        tasks.push(tokio::spawn(firer(q, until, i == 0)));
    }
    let op = server.queue("sched").await;
    let operator = tokio::spawn(async move {
        loop {
            let m = op
                .maintain(&QueueSettings::default(), 100, 10)
                .await
                .unwrap();
            let now = op.now_ms().await.unwrap();
            if now > until {
                return m;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    });
    for t in tasks {
        t.await.unwrap();
    }
    operator.await.unwrap();
    let end = redis_now_ms(&mut conn);

    let (ticks, ids) = fired_ticks(&mut conn, "sched", "s");
    assert_eq!(
        ids,
        ticks.len(),
        "a tick was fired twice: {ids} ids for {} ticks",
        ticks.len()
    );
    // every tick from the first up to the last one due is fired (one may be in flight)
    let due = (end - first) / 1000 + 1;
    assert!(
        ticks.len() as i64 >= due - 1 && ticks.len() as i64 <= due,
        "{} ticks fired of {due} due: {ticks:?}",
        ticks.len()
    );
    assert_eq!(ticks.first(), Some(&first));
    for t in &ticks {
        assert_eq!((t - first) % 1000, 0, "tick {t} is not on the interval");
    }
    // each job carries the schedule's payload and options
    let job: std::collections::HashMap<String, String> = conn
        .hgetall(format!("jq:{{sched}}:job:sched:s:{first}"))
        .unwrap();
    assert_eq!(job.get("payload").map(String::as_str), Some("tick"));
    assert_eq!(job.get("max_attempts").map(String::as_str), Some("2"));
    assert_eq!(job.get("schedule").map(String::as_str), Some("s"));
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.pending, ids as u64);
}

#[tokio::test]
async fn five_missed_ticks_follow_each_policy() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let queue = server.queue("missed").await;
    queue.load_scripts().await.unwrap();
    queue
        .put_schedule(&every_second("skip", Missed::Skip))
        .await
        .unwrap();
    queue
        .put_schedule(&every_second("once", Missed::Once))
        .await
        .unwrap();
    let first = queue
        .schedule("skip")
        .await
        .unwrap()
        .unwrap()
        .next_tick
        .unwrap();
    assert_eq!(
        queue.schedule("once").await.unwrap().unwrap().next_tick,
        Some(first)
    );

    // no firer for five ticks
    wait_past(&mut conn, first + 4_000);
    let f = queue.fire_schedules(None).await.unwrap();
    assert_eq!((f.fired, f.skipped), (1, 1), "{f:?}");
    let (skip, _) = fired_ticks(&mut conn, "missed", "skip");
    let (once, n) = fired_ticks(&mut conn, "missed", "once");
    assert!(skip.is_empty(), "skip fired {skip:?}");
    assert_eq!((once.into_iter().collect::<Vec<_>>(), n), (vec![first], 1));
    // both jump to the first tick after now: nothing more is due
    for name in ["skip", "once"] {
        let s = queue.schedule(name).await.unwrap().unwrap();
        assert!(s.next_tick.unwrap() > f.now_ms, "{s:?}");
        assert_eq!(s.last_tick, Some(first));
    }
    let again = queue.fire_schedules(Some(f.now_ms)).await.unwrap();
    assert_eq!((again.fired, again.skipped), (0, 0));

    // the next tick, on time, fires under either policy
    let next = queue
        .schedule("skip")
        .await
        .unwrap()
        .unwrap()
        .next_tick
        .unwrap();
    wait_past(&mut conn, next);
    let on_time = eventually("the next tick to fire", async || {
        let f = queue.fire_schedules(None).await.unwrap();
        (f.fired > 0).then_some(f)
    })
    .await;
    assert_eq!(on_time.fired, 2, "{on_time:?}");
    assert_eq!(
        fired_ticks(&mut conn, "missed", "skip").0,
        BTreeSet::from([next])
    );
}

#[tokio::test]
async fn paused_and_removed_schedules_fire_nothing() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let queue = server.queue("paused").await;
    queue.load_scripts().await.unwrap();
    queue
        .put_schedule(&every_second("p", Missed::Once))
        .await
        .unwrap();
    queue
        .put_schedule(&every_second("r", Missed::Once))
        .await
        .unwrap();
    let first = queue
        .schedule("p")
        .await
        .unwrap()
        .unwrap()
        .next_tick
        .unwrap();
    assert_eq!(queue.pause_schedule("p", true).await.unwrap(), Some(true));
    assert_eq!(queue.pause_schedule("p", true).await.unwrap(), Some(false));
    assert!(queue.remove_schedule("r").await.unwrap());
    assert_eq!(queue.pause_schedule("r", true).await.unwrap(), None);
    wait_past(&mut conn, first);
    let f = queue.fire_schedules(None).await.unwrap();
    assert_eq!((f.fired, f.skipped, f.next_tick), (0, 0, None));
    let ls = queue.schedules().await.unwrap();
    assert_eq!(ls.len(), 1);
    assert!(ls[0].paused && ls[0].next_tick.is_none());
    assert_eq!(queue.pause_schedule("p", false).await.unwrap(), Some(true));
    let resumed = queue
        .schedule("p")
        .await
        .unwrap()
        .unwrap()
        .next_tick
        .unwrap();
    assert!(resumed > first, "ticks while paused are not fired");
}

#[tokio::test]
async fn schedule_add_gives_every_fired_job_the_options_enqueue_takes() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let queue = server.queue("opts").await;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobqueue"));
    for var in ["JOBQUEUE_REDIS_URL", "JOBQUEUE_CLUSTER", "JOBQUEUE_TAG"] {
        cmd.env_remove(var);
    }
    let out = cmd
        .args(["schedule", "add", "--redis", &server.url(), "--tag", "opts"])
        .args(["own", "--every", "1s", "tick"])
        .args(["--priority", "7", "--max-attempts", "3"])
        .args(["--backoff-initial", "250ms", "--backoff-max", "1m"])
        .args(["--backoff-multiplier", "1.5", "--timeout", "2m"])
        .args(["--visibility", "30s", "--rate-key", "customer-42"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "schedule add failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let own = JobOptions {
        max_attempts: Some(3),
        backoff_initial: Some(Duration::from_millis(250)),
        backoff_max: Some(Duration::from_secs(60)),
        backoff_multiplier: Some(1.5),
        priority: Some(7),
        visibility: Some(Duration::from_secs(30)),
        timeout: Some(Duration::from_secs(120)),
        rate_key: Some("customer-42".into()),
        notify: None,
    };
    let stored = queue.schedule("own").await.unwrap().unwrap();
    let mut names: Vec<&str> = stored.options.iter().map(|(k, _)| k.as_str()).collect();
    names.sort();
    let mut want: Vec<&str> = own.to_fields().into_iter().map(|(k, _)| k).collect();
    want.sort();
    assert_eq!(names, want, "{:?}", stored.options);

    let tick = stored.next_tick.unwrap();
    wait_past(&mut conn, tick);
    assert_eq!(queue.fire_schedules(None).await.unwrap().fired, 1);
    let id = format!("sched:own:{tick}");
    let job = queue.job(&id).await.unwrap().expect("the fired job");
    assert_eq!((job.priority, &job.options), (7, &own));
    // it waits in priority 7's list, and its lease is its own
    let pending7: Vec<String> = conn.lrange("jq:{opts}:pending:7", 0, -1).unwrap();
    assert_eq!(pending7, vec![id.clone()]);
    let lease = queue.claim(1, "w", None).await.unwrap().remove(0);
    assert_eq!(
        (lease.id.to_string(), lease.visibility, lease.timeout),
        (id, own.visibility, own.timeout)
    );
}
