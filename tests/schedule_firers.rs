//! Schedules fired by real processes (tests/support/firers.rs): three `jobqueue worker`
//! processes and two `jobqueue operator` processes (no leader election: both fire) make
//! exactly one job per tick of an `every 1s` schedule, by the Redis clock; after all of
//! them were stopped for five ticks, the missed-tick policy holds; a worker on a
//! queue without schedules sends nothing for schedules beyond its reaper's round trips;
//! and a schedule added while the workers idle fires its first tick on time; a tick due
//! while Redis restarts fires once it is back, still on time.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use jobqueue::queue::Queue;
use serde_json::json;
use support::eventually::Wait;
use support::firers::{Firers, fired_ticks, gaps, schedule_cli, scheduled};
use support::fleet::Fleet;
use support::redis::RedisServer;
use support::runs::Work;

/// An `every 1s` schedule of the CRD, its job a short run of the workers' handler.
fn every_second(name: &str, missed: &str) -> serde_json::Value {
    json!({"name": name, "every": "1s", "payload": "ok 0.010\n", "missed": missed})
}

/// Wait until Redis's clock passes `ms`.
async fn redis_past(queue: &Queue, ms: i64, firers: &Firers) {
    Wait::for_(format!("the Redis clock to pass {ms}"))
        .within(Duration::from_secs(40))
        .every(Duration::from_millis(20))
        .explained_by(|| firers.logs())
        .until(async || queue.now_ms().await.is_ok_and(|now| now > ms))
        .await;
}

/// Wait until `name` fired a job for a tick after `after`; returns its ticks.
async fn fired_after(
    server: &RedisServer,
    tag: &str,
    name: &str,
    after: i64,
    count: usize,
    firers: &Firers,
) -> Vec<i64> {
    let mut conn = server.conn();
    Wait::for_(format!("{count} jobs of {name} for ticks after {after}"))
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(50))
        .explained_by(|| firers.logs())
        .until(async || {
            let ticks = fired_ticks(&mut conn, tag, name);
            (ticks.iter().filter(|&&t| t > after).count() >= count).then_some(ticks)
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_and_two_operators_fire_one_job_per_tick_for_20_seconds() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let queue = server.queue("fleet").await;
    let schedules = json!([every_second("s", "skip")]);
    let mut firers = Firers::start(&server.url(), "fleet", dir.path(), 3, 2, schedules).await;

    // 20 s of the Redis clock, then everyone stops. They count from the second tick
    // after the first fired: by then every worker's reaper has been round once since the
    // operators wrote the schedule, so every process fires.
    let first = fired_after(&server, "fleet", "s", 0, 1, &firers).await[0] + 2000;
    redis_past(&queue, first + 19_500, &firers).await;
    firers.stop_all();

    let mut conn = server.conn();
    let all = fired_ticks(&mut conn, "fleet", "s");
    let jobs = scheduled(&mut conn, "fleet");
    assert_eq!(jobs, all.len() as u64, "one job per tick: {all:?}");
    let ticks: Vec<i64> = all.into_iter().filter(|&t| t >= first).collect();
    println!(
        "schedule firers: 3 workers + 2 operators, 20 s from tick {first}: {} ticks ({jobs} jobs \
         in all)",
        ticks.len()
    );
    assert!(
        (19..=21).contains(&ticks.len()),
        "20 ± 1 ticks in 20 s: {ticks:?}"
    );
    assert_eq!(ticks[0], first);
    assert_eq!(
        gaps(&ticks, 1000),
        [],
        "consecutive ticks, one second apart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_five_ticks_with_every_process_stopped_each_policy_holds() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let queue = server.queue("missed").await;
    let schedules = json!([every_second("skip", "skip"), every_second("once", "once")]);
    let mut firers = Firers::start(&server.url(), "missed", dir.path(), 3, 2, schedules).await;
    fired_after(&server, "missed", "skip", 0, 2, &firers).await;
    fired_after(&server, "missed", "once", 0, 2, &firers).await;

    firers.stop_all();
    let mut conn = server.conn();
    let before: HashMap<&str, Vec<i64>> = ["skip", "once"]
        .into_iter()
        .map(|n| (n, fired_ticks(&mut conn, "missed", n)))
        .collect();
    // the tick each schedule was due next when everything stopped
    let mut due = HashMap::new();
    for name in ["skip", "once"] {
        let s = queue.schedule(name).await.unwrap().unwrap();
        due.insert(name, s.next_tick.unwrap());
    }
    let last = before.values().map(|t| *t.last().unwrap()).max().unwrap();
    // five ticks pass with nothing running (and a sixth begins)
    redis_past(&queue, last + 5_500, &firers).await;
    let restart = queue.now_ms().await.unwrap();
    firers.start_all();
    for name in ["skip", "once"] {
        fired_after(&server, "missed", name, restart, 2, &firers).await;
    }
    firers.stop_all();

    let mut total = 0;
    for name in ["skip", "once"] {
        let ticks = fired_ticks(&mut conn, "missed", name);
        total += ticks.len();
        let old = *before[name].last().unwrap();
        let caught_up: Vec<i64> = ticks
            .iter()
            .copied()
            .filter(|&t| t > old && t <= restart)
            .collect();
        let after: Vec<i64> = ticks.iter().copied().filter(|&t| t > restart).collect();
        println!(
            "schedule firers: {name}: last tick before the stop {old}, restart at {restart}, \
             catch-up jobs {caught_up:?}, then {after:?}"
        );
        match name {
            "skip" => assert_eq!(
                caught_up,
                Vec::<i64>::new(),
                "skip: no job for missed ticks"
            ),
            _ => assert_eq!(
                caught_up,
                vec![due[name]],
                "once: one job, for the tick due at the stop"
            ),
        }
        assert!(
            after[0] >= due[name] + 5000,
            "{name}: five ticks or more missed"
        );
        assert_eq!(gaps(&after, 1000), [], "{name}: on time after");
    }
    assert_eq!(
        scheduled(&mut conn, "missed"),
        total as u64,
        "one job per tick"
    );
}

/// `INFO commandstats` as (command, calls).
fn command_calls(conn: &mut redis::Connection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_a_queue_without_schedules_sends_nothing_for_them() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet::configured(
        &server.url(),
        false,
        dir.path(),
        "idle",
        Work::Sleep,
        &["--visibility", "3s"],
    )
    .tag("idle")
    .log_level("jobqueue::worker=debug")
    .started(1);
    let rounds = || fleet.logs().matches("reap pass").count();
    let wait = |what: &str| {
        Wait::for_(what.to_string())
            .every(Duration::from_millis(20))
            .explained_by(|| fleet.logs())
    };
    let from = wait("the reaper's first round")
        .until(async || Some(rounds()).filter(|&n| n >= 1))
        .await;
    let mut conn = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    // four reaper rounds, 4–10 s: the old firer looked (TIME, ZRANGE) every second
    let to = wait("four more reaper rounds")
        .until(async || Some(rounds()).filter(|&n| n >= from + 4))
        .await;
    let calls = command_calls(&mut conn);
    let n = |c: &str| calls.get(c).copied().unwrap_or(0);
    println!("idle worker over {} reaper rounds: {calls:?}", to - from);
    // Every script reads the Redis clock once (TIME): a TIME beyond the scripts' is a
    // look of the schedule firer's.
    assert_eq!(
        n("time"),
        n("evalsha"),
        "TIME only from scripts over {} reaper rounds: {calls:?}",
        to - from
    );
    // One ZRANGE of schedule_due per reaper round, in the reap call's round trip, besides
    // the scripts' own (claim reads the earliest delayed job).
    assert!(
        n("zrange") <= n("evalsha") + (to - from) as u64 + 1,
        "ZRANGE over {} reaper rounds: {calls:?}",
        to - from
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_added_while_the_workers_idle_fires_its_first_tick_on_time() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let queue = server.queue("added").await;
    // 60 s leases: each reaper comes round every 22–37 s, its first round at a random
    // point of the first.
    let fleet = Fleet::configured(
        &server.url(),
        false,
        dir.path(),
        "added",
        Work::Sleep,
        &["--visibility", "60s"],
    )
    .tag("added")
    .log_level("jobqueue::worker=debug")
    .started(2);
    // Once every reaper has been round (finding no schedule), the next rounds are 22 s
    // or more away: a firer that learns of the schedule only from them fires late.
    Wait::for_("every worker's first reaper round")
        .within(Duration::from_secs(60))
        .every(Duration::from_millis(50))
        .explained_by(|| fleet.logs())
        .until(async || {
            (0..2)
                .all(|i| fleet.log(i).contains("reap pass"))
                .then_some(())
        })
        .await;
    schedule_cli(
        &server.url(),
        "added",
        &[
            "add",
            "s",
            "--every",
            "1s",
            "--missed",
            "skip",
            "ok 0.010\n",
        ],
    );
    // The first due tick is the first whole second after the add, at the latest this.
    let first_due = (queue.now_ms().await.unwrap() / 1000 + 1) * 1000;
    let mut conn = server.conn();
    let ticks = Wait::for_("the schedule's first job")
        .within(Duration::from_secs(60))
        .every(Duration::from_millis(50))
        .explained_by(|| fleet.logs())
        .until(async || Some(fired_ticks(&mut conn, "added", "s")).filter(|t| !t.is_empty()))
        .await;
    println!(
        "schedule added to idle workers: first due tick {first_due} (at the latest), first \
         fired {}",
        ticks[0]
    );
    // The wake marker reaches an idle worker at once, but its claim and the firer's call
    // wait their turn on these 2 cores beside the file's other fleets: a few ticks late is
    // the load. Learning of the schedule only from a reaper round would be 22 s or more.
    assert!(
        ticks[0] <= first_due + 8000,
        "first fired tick {} is {} ticks after the first due tick {first_due} (at the latest)",
        ticks[0],
        (ticks[0] - first_due) / 1000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firer_that_finds_redis_down_at_a_tick_fires_it_once_redis_is_back() {
    use jobqueue::queue::QueueSettings;
    use jobqueue::queue::schedule::{Missed, Rule, Schedule};

    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let dir = tempfile::tempdir().unwrap();
    let queue = server.queue("down").await;
    // Done jobs are kept, so their hashes tell which ticks fired.
    queue
        .configure(&QueueSettings {
            completed_retention: Duration::from_secs(3600),
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    queue
        .put_schedule(&Schedule {
            name: "s".into(),
            rule: Rule::Every(Duration::from_secs(1)),
            payload: b"ok 0.010\n".to_vec(),
            options: Default::default(),
            missed: Missed::Skip,
            paused: false,
        })
        .await
        .unwrap();
    let mut fleet = Fleet::configured(
        &server.url(),
        false,
        dir.path(),
        "down",
        Work::Sleep,
        &["--visibility", "3s"],
    )
    .tag("down")
    .log_level("jobqueue::worker=debug")
    .started(1);
    let mut conn = server.conn();
    Wait::for_("the schedule's first job")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(20))
        .explained_by(|| fleet.logs())
        .until(async || (!fired_ticks(&mut conn, "down", "s").is_empty()).then_some(()))
        .await;
    // Redis stalls 850 ms after a tick the worker fired, so that the firer's call at the
    // next tick waits for its reply; 300 ms later Redis is SIGKILLed, failing that call,
    // and started again at once: the tick is still on time (less than its interval late)
    // when Redis is back.
    let tick = (queue.now_ms().await.unwrap() / 1000 + 1) * 1000;
    Wait::for_(format!(
        "tick {tick} fired and the Redis clock past {}",
        tick + 850
    ))
    .within(Duration::from_secs(30))
    .every(Duration::from_millis(10))
    .explained_by(|| fleet.logs())
    .until(async || {
        let now = queue.now_ms().await.ok()?;
        (now > tick + 850 && fired_ticks(&mut conn, "down", "s").contains(&tick)).then_some(())
    })
    .await;
    server.pause(true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::block_in_place(|| server.restart());
    let mut conn = server.conn();
    let ticks = Wait::for_(format!("two jobs for ticks after {tick}"))
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(50))
        .explained_by(|| fleet.logs())
        .until(async || {
            let ticks = fired_ticks(&mut conn, "down", "s");
            (ticks.iter().filter(|&&t| t > tick).count() >= 2).then_some(ticks)
        })
        .await;
    let after: Vec<i64> = ticks.into_iter().filter(|&t| t >= tick).collect();
    println!(
        "Redis stalled at {tick} + 850 ms, killed 300 ms later and restarted: ticks fired {after:?}"
    );
    assert_eq!(
        after[1],
        tick + 1000,
        "the tick due while Redis was down fired once it was back\n{}",
        fleet.logs()
    );
    assert_eq!(gaps(&after, 1000), [], "no tick missed");
    assert!(fleet.crashed().is_empty());
    fleet.stop();
}
