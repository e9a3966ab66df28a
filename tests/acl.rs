//! Least privilege on Redis: the ACL users of docs/operations.md ("ACL users"), created
//! from the doc's own lines on a private redis-server. A producer, a `jobqueue worker`
//! (with its reaper and its wake BLPOP) and the operator's upkeep run under them; a
//! worker's user cannot read or change another queue; each role's scripts call no
//! command its line leaves out, and its line grants nothing they do not use.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use jobqueue::queue::{ConnectOptions, Error, NewJob, Queue, QueueSettings, Redis, SCRIPTS};
use redis::Commands;
use support::eventually::eventually;
use support::redis::{RedisServer, wait_past};

const DOC: &str = include_str!("../docs/operations.md");

/// The doc's `ACL SETUSER` line of the user whose name starts with `jq-ROLE`.
fn acl_line(role: &str) -> Vec<String> {
    let prefix = format!("ACL SETUSER jq-{role}");
    let line = DOC
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("docs/operations.md has no `{prefix}` line"));
    line.split_whitespace().map(str::to_string).collect()
}

/// The commands a role's line grants (`+evalsha` → `evalsha`, `+script|load` too).
fn granted(role: &str) -> BTreeSet<String> {
    acl_line(role)
        .iter()
        .filter_map(|t| t.strip_prefix('+'))
        .map(str::to_lowercase)
        .collect()
}

/// Create the role's user with `password`; returns its name.
fn create_user(conn: &mut redis::Connection, role: &str, password: &str) -> String {
    let line = acl_line(role);
    let mut cmd = redis::cmd("ACL");
    for arg in &line[1..] {
        // `>ROLE-PASSWORD` → this test's password.
        if arg.starts_with('>') {
            cmd.arg(format!(">{password}"));
        } else {
            cmd.arg(arg);
        }
    }
    let _: () = cmd.query(conn).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    line[2].clone()
}

async fn queue_as(server: &RedisServer, user: &str, password: &str, tag: &str) -> Queue {
    let options = ConnectOptions::new(server.url())
        .username(Some(user.to_string()))
        .password(Some(password.to_string()));
    let redis = Redis::connect(&options)
        .await
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"));
    assert_eq!(redis.user(), user);
    Queue::new(redis, "jq", tag).unwrap()
}

/// The denials in the server's ACL LOG (`reason object` per entry), but for `CLIENT
/// SETINFO`, which the client sends on connecting and whose failure it ignores.
fn acl_denials(conn: &mut redis::Connection) -> Vec<String> {
    let log: Vec<BTreeMap<String, redis::Value>> =
        redis::cmd("ACL").arg("LOG").query(conn).unwrap();
    let text = |v: Option<&redis::Value>| match v {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    };
    log.iter()
        .map(|e| {
            format!(
                "{} {} by {}",
                text(e.get("reason")),
                text(e.get("object")),
                text(e.get("username"))
            )
        })
        .filter(|e| !e.contains("client|setinfo"))
        .collect()
}

fn stat(conn: &mut redis::Connection, tag: &str, field: &str) -> u64 {
    let v: Option<u64> = conn.hget(format!("jq:{{{tag}}}:stats"), field).unwrap();
    v.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_a_worker_and_the_operator_run_under_their_smallest_acl() {
    let server = RedisServer::start();
    let mut admin = server.conn();
    let producer = create_user(&mut admin, "producer", "pp");
    let worker = create_user(&mut admin, "worker", "wp");
    let operator = create_user(&mut admin, "operator", "op");
    // The scripts are loaded by the restricted users themselves (NOSCRIPT → SCRIPT LOAD).
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();

    // The operator's upkeep writes the settings (meta), reaps and counts.
    let ops = queue_as(&server, &operator, "op", "emails").await;
    let settings = QueueSettings {
        max_attempts: 2,
        backoff_initial: Duration::from_millis(20),
        ..QueueSettings::default()
    };
    let done = ops.maintain(&settings, 100, 4).await.unwrap();
    assert!(done.configured, "{done:?}");

    let jobs = queue_as(&server, &producer, "pp", "emails").await;
    for payload in ["ok-1", "ok-2", "fail"] {
        jobs.enqueue(NewJob::new(payload.as_bytes())).await.unwrap();
    }
    jobs.enqueue(NewJob::new(&b"ok-later"[..]).delay(Duration::from_millis(200)))
        .await
        .unwrap();

    // `jobqueue worker` as the worker's user (--username, the password in the URL): it
    // claims, acks, fails and retries, dead-letters, waits on BLPOP, and its reaper
    // promotes the delayed job.
    let child = Command::new(env!("CARGO_BIN_EXE_jobqueue"))
        .args(["worker", "--redis"])
        .arg(format!("redis://:wp@127.0.0.1:{}", server.port))
        .args(["--username", &worker, "--tag", "emails", "--exec"])
        .args(["sh", "-c", r#"read x; [ "$x" != fail ]"#])
        .env_remove("JOBQUEUE_REDIS_URL")
        .env_remove("JOBQUEUE_USERNAME")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watch = server.conn();
    eventually("the worker to ack 3 jobs and dead-letter 1", async || {
        stat(&mut watch, "emails", "acked") == 3 && stat(&mut watch, "emails", "dead_lettered") == 1
    })
    .await;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(!log.contains("denied") && !log.contains("NOPERM"), "{log}");
    assert_eq!(stat(&mut watch, "emails", "retried"), 1);

    // The library's worker calls as the worker's user: a wait on the wake list that
    // times out, one that a new job ends, and a lease left to expire.
    let work = queue_as(&server, &worker, "wp", "emails").await;
    let mut consumer = work.consumer("lib");
    assert!(
        consumer
            .next_job(Duration::from_millis(200))
            .await
            .unwrap()
            .is_none()
    );
    jobs.enqueue(NewJob::new(&b"leased"[..])).await.unwrap();
    let lease = consumer
        .next_job(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a job");
    let until = work
        .extend(&lease, Some(Duration::from_millis(30)))
        .await
        .unwrap()
        .expect("the lease is held");
    assert!(work.claim(1, "lib", None).await.unwrap().is_empty());

    // The operator's reaper, as its user, takes the expired lease back.
    wait_past(&mut admin, until);
    let done = ops.maintain(&settings, 100, 4).await.unwrap();
    assert_eq!(done.reaped.requeued, 1, "{done:?}");
    assert_eq!(done.stats.pending, 1, "{done:?}");

    // spec.schedules: the operator writes a schedule, written only now: the worker process
    // above would have fired its ticks among the jobs it counts.
    let every_second = jobqueue::queue::schedule::Schedule {
        name: "tick".into(),
        rule: jobqueue::queue::schedule::Rule::Every(Duration::from_secs(1)),
        payload: b"tick".to_vec(),
        options: Default::default(),
        missed: jobqueue::queue::schedule::Missed::Once,
        paused: false,
    };
    assert_eq!(ops.put_schedule(&every_second).await.unwrap(), 1);

    // The schedule, fired by the worker's user and by the operator's upkeep.
    let tick = ops.schedule("tick").await.unwrap().unwrap();
    wait_past(&mut admin, tick.next_tick.unwrap());
    work.fire_schedules(None).await.unwrap();
    ops.maintain(&settings, 100, 4).await.unwrap();
    assert!(stat(&mut admin, "emails", "scheduled") >= 1);
    ops.remove_schedule("tick").await.unwrap();

    // Not one command or key was refused along the way.
    assert_eq!(acl_denials(&mut admin), Vec::<String>::new());
}

/// Every key of the server with its DUMP: equal before and after means nothing changed.
fn snapshot(conn: &mut redis::Connection) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    let keys: Vec<Vec<u8>> = conn.keys("*").unwrap();
    keys.into_iter()
        .map(|k| {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(&k).query(conn).unwrap();
            (k, dump)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_user_cannot_read_or_change_another_queue() {
    let server = RedisServer::start();
    let mut admin = server.conn();
    let worker = create_user(&mut admin, "worker", "s3cret-wp");
    let other = server.queue("other").await;
    other.enqueue(NewJob::new(&b"not yours"[..])).await.unwrap();
    let before = snapshot(&mut admin);

    // Through the library: each call is refused by the ACL, naming the user.
    let theirs = queue_as(&server, &worker, "s3cret-wp", "other").await;
    let stats = theirs.stats().await.unwrap_err();
    let claim = theirs.claim(1, "w", None).await.unwrap_err();
    let settings = theirs.settings().await.unwrap_err();
    for err in [&stats, &claim, &settings] {
        assert!(matches!(err, Error::Denied { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("jq:{other}") && text.contains("\"jq-worker-emails\""),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
        assert!(!err.is_transient(), "{text}");
    }
    assert!(settings.to_string().contains("HGETALL meta"), "{settings}");

    // Directly: not even a read.
    let url = format!("redis://{worker}:s3cret-wp@127.0.0.1:{}", server.port);
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    for key in ["jq:{other}:pending", "jq:{other}:stats"] {
        let err = redis::cmd("TYPE")
            .arg(key)
            .query::<String>(&mut raw)
            .unwrap_err();
        assert_eq!(err.code(), Some("NOPERM"), "{key}: {err}");
    }
    let err = redis::cmd("KEYS")
        .arg("*")
        .query::<Vec<String>>(&mut raw)
        .unwrap_err();
    assert_eq!(err.code(), Some("NOPERM"), "{err}");
    // The command line, with the user from JOBQUEUE_USERNAME: exit 4, the user named.
    let out = Command::new(env!("CARGO_BIN_EXE_jobqueue"))
        .args(["stats", "--tag", "other", "--redis"])
        .arg(format!("redis://:s3cret-wp@127.0.0.1:{}", server.port))
        .env_remove("JOBQUEUE_REDIS_URL")
        .env("JOBQUEUE_USERNAME", &worker)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("denied by the ACL of Redis user \"jq-worker-emails\"")
            && !stderr.contains("s3cret"),
        "{stderr}"
    );
    assert_eq!(before, snapshot(&mut admin), "another queue was changed");

    // Its own queue works over the URL form of the user.
    let mine = Redis::connect(&ConnectOptions::new(&url)).await.unwrap();
    assert_eq!(mine.user(), worker);
    let mine = Queue::new(mine, "jq", "emails").unwrap();
    assert!(mine.claim(1, "w", None).await.unwrap().is_empty());

    // A wrong password names the user, never the password.
    let err = Redis::connect(
        &ConnectOptions::new(server.url())
            .username(Some(worker.clone()))
            .password(Some("wrong-s3cret".into())),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    assert!(text.contains("user \"jq-worker-emails\""), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

/// The commands a script calls (`redis.call('HSET', …)`, `redis.pcall(…)`), lowercase.
fn script_commands(source: &str) -> BTreeSet<String> {
    // Without comments, which mention calls too.
    let source: String = source
        .lines()
        .map(|l| l.split("--").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let source = source.as_str();
    let mut found = BTreeSet::new();
    // stats.lua counts through `put(name, key, type, COMMAND, ...)`.
    for call in ["redis.call(", "redis.pcall(", "\nput("] {
        for rest in source.split(call).skip(1) {
            let rest = rest.trim_start();
            if rest.starts_with("...") {
                continue; // put's own body
            }
            let rest = if call == "\nput(" {
                rest.splitn(4, ", ").nth(3).unwrap_or_default()
            } else {
                rest
            };
            let Some(quote) = rest.chars().next().filter(|c| *c == '\'' || *c == '"') else {
                panic!(
                    "a script calls a command by variable: {}",
                    &rest[..40.min(rest.len())]
                );
            };
            let name: String = rest[1..].chars().take_while(|c| *c != quote).collect();
            found.insert(name.to_lowercase());
        }
    }
    found
}

#[test]
fn each_roles_acl_grants_what_its_scripts_call_and_nothing_more() {
    let s = &*SCRIPTS;
    // Each role: the scripts it runs and the commands it sends itself.
    let roles: [(&str, Vec<&jobqueue::queue::Script>, &[&str]); 3] = [
        (
            "producer",
            vec![&s.enqueue],
            &["ping", "evalsha", "script|load", "type", "hmget"],
        ),
        (
            "worker",
            vec![
                &s.claim,
                &s.settle_claim,
                &s.extend,
                &s.ack,
                &s.fail,
                &s.reap,
                // tuning an `auto` visibility timeout
                &s.stats,
                // ending the lease of a cancelled job (`cancelled`)
                &s.manage,
                // the reaper's schedule firer
                &s.schedule,
            ],
            &[
                "ping",
                "evalsha",
                "script|load",
                "time",
                "role",
                "blpop",
                "type",
                "exists",
                "hgetall",
                "hmget",
                "zrange",
                // tuning an `auto` visibility timeout: its turn, its records in meta
                "set",
                "hset",
            ],
        ),
        (
            "operator",
            // manage: the pause of spec.paused; schedule: spec.schedules and firing
            vec![&s.reap, &s.stats, &s.manage, &s.schedule],
            &[
                "ping",
                "evalsha",
                "script|load",
                "time",
                "type",
                "hgetall",
                "hset",
                "hdel",
                "zrange",
                // the tuning turn of an `auto` visibility timeout
                "set",
            ],
        ),
    ];
    for (role, scripts, direct) in roles {
        let mut needed: BTreeSet<String> = direct.iter().map(|c| c.to_string()).collect();
        for script in &scripts {
            needed.extend(script_commands(script.source));
        }
        let granted = granted(role);
        let missing: Vec<_> = needed.difference(&granted).collect();
        let extra: Vec<_> = granted.difference(&needed).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{role}: the doc's line lacks {missing:?} and grants {extra:?} more than needed"
        );
        let line = acl_line(role).join(" ");
        assert!(
            line.contains(" ~jq:{emails}:* ") && line.contains(" reset on "),
            "{line}"
        );
    }
}
