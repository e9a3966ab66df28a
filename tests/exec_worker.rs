//! `jobqueue worker --exec` run as users run it: the real binary, `sh -c` handlers, a
//! real Redis.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use jobqueue::queue::{NewJob, Queue, QueueSettings};
use support::eventually::{Wait, eventually};
use support::exec::{ExecWorker, processes_of_job};
use support::procs::alive;
use support::redis::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

async fn queue_with(server: &RedisServer, tag: &str, settings: QueueSettings) -> Queue {
    let queue = server.queue(tag).await;
    queue.configure(&settings).await.unwrap();
    queue
}

async fn status(queue: &Queue, id: &str) -> Option<String> {
    queue.job(id).await.unwrap().and_then(|j| j.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_zero_acks_and_the_child_sees_payload_and_environment() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "ok", QueueSettings::default()).await;
    let out = tempfile::tempdir().unwrap();
    let worker = ExecWorker::start(
        &server,
        "ok",
        out.path(),
        &["--concurrency", "2"],
        r#"printf '%s|%s|%s|' "$JOBQUEUE_JOB_ID" "$JOBQUEUE_ATTEMPT" "$JOBQUEUE_QUEUE" > "$OUT/$JOBQUEUE_JOB_ID.tmp"
           cat >> "$OUT/$JOBQUEUE_JOB_ID.tmp" && mv "$OUT/$JOBQUEUE_JOB_ID.tmp" "$OUT/$JOBQUEUE_JOB_ID""#,
    );
    let payloads: Vec<(&str, Vec<u8>)> = vec![
        ("text", b"hello world\nsecond line\n".to_vec()),
        ("binary", vec![0, 255, 10, 13, 0, 1]),
        ("empty", vec![]),
        ("large", vec![b'z'; 300_000]),
    ];
    for (id, payload) in &payloads {
        queue
            .enqueue(NewJob::new(payload.clone()).id(*id))
            .await
            .unwrap();
    }
    eventually("all acked", || async {
        queue.stats().await.unwrap().acked == payloads.len() as u64
    })
    .await;
    for (id, payload) in &payloads {
        let seen = std::fs::read(out.path().join(id)).unwrap();
        let mut want = format!("{id}|1|jq:{{ok}}|").into_bytes();
        want.extend_from_slice(payload);
        assert_eq!(seen, want, "job {id}");
        assert!(queue.job(id).await.unwrap().is_none(), "{id} acked");
    }
    let (exit, log) = worker.terminate().await;
    assert!(exit.success(), "{exit:?}\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_exit_code_dead_letters_with_the_stderr_text() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "dead", QueueSettings::default()).await;
    let out = tempfile::tempdir().unwrap();
    let worker = ExecWorker::start(
        &server,
        "dead",
        out.path(),
        &[],
        r#"echo "cannot parse $(cat)" >&2; exit 99"#,
    );
    queue.enqueue(NewJob::new("{oops").id("j")).await.unwrap();
    eventually("dead", || async {
        status(&queue, "j").await.as_deref() == Some("dead")
    })
    .await;
    let job = queue.job("j").await.unwrap().unwrap();
    assert_eq!(job.attempts, 1, "dead at once, not retried");
    assert_eq!(
        job.last_error.as_deref(),
        Some("exit code 99 (dead-letter); stderr: cannot parse {oops")
    );
    let (exit, log) = worker.terminate().await;
    assert!(exit.success(), "{log}");

    // Another code can be chosen; 99 then is an ordinary failure.
    let queue = queue_with(
        &server,
        "dead42",
        QueueSettings {
            max_attempts: 1,
            ..Default::default()
        },
    )
    .await;
    let worker = ExecWorker::start(
        &server,
        "dead42",
        out.path(),
        &["--dead-exit-code", "42"],
        r#"if [ "$JOBQUEUE_JOB_ID" = a ]; then exit 42; else exit 99; fi"#,
    );
    queue.enqueue(NewJob::new("").id("a")).await.unwrap();
    queue.enqueue(NewJob::new("").id("b")).await.unwrap();
    eventually("both dead", || async {
        queue.stats().await.unwrap().dead == 2
    })
    .await;
    let a = queue.job("a").await.unwrap().unwrap().last_error.unwrap();
    let b = queue.job("b").await.unwrap().unwrap().last_error.unwrap();
    assert_eq!(a, "exit code 42 (dead-letter)");
    assert_eq!(b, "exit code 99");
    assert_eq!(queue.stats().await.unwrap().retried, 0);
    worker.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_exits_and_signals_retry_with_the_tail_of_stderr() {
    let server = RedisServer::start();
    let settings = QueueSettings {
        max_attempts: 2,
        backoff_initial: Duration::from_millis(1),
        backoff_max: Duration::from_millis(1),
        ..Default::default()
    };
    let queue = queue_with(&server, "retry", settings).await;
    let out = tempfile::tempdir().unwrap();
    let worker = ExecWorker::start(
        &server,
        "retry",
        out.path(),
        &["--concurrency", "2"],
        r#"echo "$JOBQUEUE_ATTEMPT" >> "$OUT/$JOBQUEUE_JOB_ID.attempts"
           case "$JOBQUEUE_JOB_ID" in
             noisy) head -c 5000 /dev/zero | tr '\0' x >&2
                    echo " the end of attempt $JOBQUEUE_ATTEMPT" >&2; exit 3 ;;
             killed) echo "about to die" >&2; kill -9 $$ ;;
           esac"#,
    );
    queue.enqueue(NewJob::new("").id("noisy")).await.unwrap();
    queue.enqueue(NewJob::new("").id("killed")).await.unwrap();
    eventually("both dead after their attempts", || async {
        queue.stats().await.unwrap().dead == 2
    })
    .await;
    for id in ["noisy", "killed"] {
        let attempts = std::fs::read_to_string(out.path().join(format!("{id}.attempts"))).unwrap();
        assert_eq!(attempts, "1\n2\n", "{id} ran twice: one retry");
    }
    let noisy = queue
        .job("noisy")
        .await
        .unwrap()
        .unwrap()
        .last_error
        .unwrap();
    assert!(noisy.starts_with("exit code 3; stderr: …x"), "{noisy}");
    assert!(noisy.ends_with("xx the end of attempt 2"), "{noisy}");
    // The default tail is 2 KiB (plus the "…" marker and the exit status).
    let tail = noisy.split_once("stderr: ").unwrap().1;
    assert!(tail.len() <= 2048 + "…".len(), "{}", tail.len());
    assert!(tail.len() > 2000, "{}", tail.len());
    let killed = queue
        .job("killed")
        .await
        .unwrap()
        .unwrap()
        .last_error
        .unwrap();
    assert_eq!(killed, "killed by signal 9 (SIGKILL); stderr: about to die");
    let qs = queue.stats().await.unwrap();
    assert_eq!((qs.retried, qs.failed, qs.acked), (2, 4, 0));
    worker.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_renewed_while_the_command_runs() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "long", QueueSettings::default()).await;
    let out = tempfile::tempdir().unwrap();
    let worker = ExecWorker::start(
        &server,
        "long",
        out.path(),
        &["--visibility", "600ms"],
        r#"echo run >> "$OUT/runs"; sleep 2"#,
    );
    queue.enqueue(NewJob::new("").id("j")).await.unwrap();
    // Reap all along: an expired lease would be taken away at once.
    let mut reaped = 0;
    eventually("the job acked", async || {
        let acked = queue.stats().await.unwrap().acked >= 1;
        if !acked {
            reaped += queue.reap(100).await.unwrap().requeued;
        }
        acked
    })
    .await;
    assert_eq!(reaped, 0, "the reaper never found the lease expired");
    assert_eq!(
        std::fs::read_to_string(out.path().join("runs")).unwrap(),
        "run\n"
    );
    assert_eq!(queue.stats().await.unwrap().claimed, 1);
    worker.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_reaches_the_child_and_the_deadline_kills_what_ignores_it() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "term", QueueSettings::default()).await;
    let out = tempfile::tempdir().unwrap();
    let worker = ExecWorker::start(
        &server,
        "term",
        out.path(),
        &["--concurrency", "2", "--shutdown-timeout", "1s"],
        r#"case "$JOBQUEUE_JOB_ID" in
             polite) trap 'echo terminated > "$OUT/polite.term"; exit 0' TERM
                     echo $$ > "$OUT/polite.pid"; sleep 60 & wait ;;
             stubborn) trap '' TERM
                       echo $$ > "$OUT/stubborn.pid"; exec sleep 60 ;;
           esac"#,
    );
    queue.enqueue(NewJob::new("").id("polite")).await.unwrap();
    queue.enqueue(NewJob::new("").id("stubborn")).await.unwrap();
    let pid_file = |id: &str| out.path().join(format!("{id}.pid"));
    eventually("both commands running", || async {
        let read = |id| std::fs::read_to_string(pid_file(id)).unwrap_or_default();
        read("polite").ends_with('\n') && read("stubborn").ends_with('\n')
    })
    .await;
    let stubborn_pid: i32 = std::fs::read_to_string(pid_file("stubborn"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let (exit, log) = worker.terminate().await;
    assert!(exit.success(), "{exit:?}\n{log}");
    assert_eq!(
        std::fs::read_to_string(out.path().join("polite.term")).unwrap(),
        "terminated\n",
        "the polite command got SIGTERM"
    );
    // It exited 0 within the deadline: acked.
    assert!(queue.job("polite").await.unwrap().is_none(), "{log}");
    // The stubborn one was SIGKILLed at the deadline and its job handed back, the
    // attempt not charged.
    assert!(!alive(stubborn_pid), "the stubborn command was killed");
    let stubborn = queue.job("stubborn").await.unwrap().unwrap();
    assert_eq!(stubborn.status.as_deref(), Some("pending"));
    assert_eq!(stubborn.attempts, 0);
    assert_eq!(stubborn.last_error, None);
    assert_eq!(stubborn.lease_until, None);
    let qs = queue.stats().await.unwrap();
    assert_eq!((qs.acked, qs.failed, qs.released), (1, 0, 1));
    assert!(log.contains("shutting down"), "{log}");
}

#[test]
fn help_shows_an_example_and_the_exit_code_contract() {
    let out = Command::new(BIN)
        .args(["worker", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("jobqueue worker --redis redis://127.0.0.1:6379 --tag emails"),
        "{help}"
    );
    assert!(help.contains("exit 99"), "{help}");
    assert!(help.contains("JOBQUEUE_ATTEMPT"), "{help}");
}

#[test]
fn a_command_that_cannot_run_is_refused_at_start() {
    let out = Command::new(BIN)
        .args(["worker", "--redis", "redis://127.0.0.1:1", "--tag", "t"])
        .args(["--exec", "no-such-program-for-jobqueue"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err.trim(),
        "error: invalid --exec command: no-such-program-for-jobqueue was not found on PATH"
    );
}

#[test]
fn unreachable_redis_is_one_line_and_exit_code_3() {
    let port = support::redis::free_port();
    let out = Command::new(BIN)
        .args(["worker", "--redis", &format!("redis://127.0.0.1:{port}")])
        .args(["--tag", "t", "--exec", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: cannot connect to Redis at redis://127.0.0.1:"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_takes_every_process_of_its_job_with_it() {
    let server = RedisServer::start();
    let settings = QueueSettings {
        visibility_timeout: Duration::from_millis(600),
        ..QueueSettings::default()
    };
    let queue = queue_with(&server, "grand", settings).await;
    let out = tempfile::tempdir().unwrap();
    // A pipeline in the background and a foreground command: grandchildren of the
    // worker, none of them its direct child.
    let script = r#"if [ "$JOBQUEUE_ATTEMPT" = 1 ]; then
                      sleep 300 | cat & sleep 300 & echo started > "$OUT/started"; wait
                    else
                      echo again > "$OUT/again"
                    fi"#;
    let worker = ExecWorker::start(&server, "grand", out.path(), &[], script);
    let id = format!("grand-{}-{}", std::process::id(), rand::random::<u32>());
    queue
        .enqueue(NewJob::new("").id(id.as_str()))
        .await
        .unwrap();
    let before = eventually("the job's processes running", async || {
        let procs = processes_of_job(&id);
        (out.path().join("started").exists() && procs.len() >= 4).then_some(procs)
    })
    .await;

    worker.signal(libc::SIGKILL);
    drop(worker);
    support::eventually::Wait::for_("every process of the job gone")
        .within(Duration::from_secs(5))
        .explained_by(|| format!("before: {before:?}, left: {:?}", processes_of_job(&id)))
        .until(async || processes_of_job(&id).is_empty())
        .await;

    // The job runs again elsewhere once its lease expires.
    let worker = ExecWorker::start(&server, "grand", out.path(), &[], script);
    eventually("the job ran again and was acked", async || {
        queue.reap(100).await.unwrap();
        out.path().join("again").exists() && queue.job(&id).await.unwrap().is_none()
    })
    .await;
    worker.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_an_interrupted_job_without_charging_an_attempt() {
    let server = RedisServer::start();
    // Its first attempt is its last: charging it would dead-letter the job.
    let settings = QueueSettings {
        max_attempts: 1,
        ..QueueSettings::default()
    };
    let queue = queue_with(&server, "release", settings).await;
    let out = tempfile::tempdir().unwrap();
    let worker = ExecWorker::start(
        &server,
        "release",
        out.path(),
        &[],
        r#"echo $$ > "$OUT/pid.tmp" && mv "$OUT/pid.tmp" "$OUT/pid"; sleep 60"#,
    );
    queue.enqueue(NewJob::new("").id("j")).await.unwrap();
    eventually("the command running", async || {
        out.path().join("pid").exists()
    })
    .await;

    let (exit, log) = worker.terminate().await;
    assert!(exit.success(), "{exit:?}\n{log}");
    let job = queue.job("j").await.unwrap().unwrap();
    assert_eq!(job.status.as_deref(), Some("pending"), "{job:?}\n{log}");
    assert_eq!(job.attempts, 0, "the interrupted run is not charged");
    assert_eq!(job.lease_until, None);
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.pending, stats.dead, stats.failed), (1, 0, 0));
    assert_eq!(stats.released, 1);
}

/// A worker started without `--durability` takes the queue's own (published in `meta`
/// by the operator from `spec.durability`); an explicit flag wins. Here the queue asks
/// for one replica and the server has none: the adopting worker's claims and acks run
/// but are reported as not replicated, the other worker's are plain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_durability_takes_the_one_published_in_meta() {
    use jobqueue::queue::Durability;
    let server = RedisServer::start();
    let queue = server.queue("dur").await;
    queue
        .clone()
        .durability(Durability::Replicated {
            replicas: 1,
            timeout: Duration::from_millis(100),
        })
        .publish_durability()
        .await
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let adopting = ExecWorker::start(&server, "dur", out.path(), &[], "cat >/dev/null");
    queue.enqueue(NewJob::new("a").id("a")).await.unwrap();
    eventually("the adopting worker acks", || async {
        queue.stats().await.unwrap().acked == 1
    })
    .await;
    assert!(
        adopting
            .log()
            .contains("only 0 of 1 replica(s) confirmed it within 100ms"),
        "{}",
        adopting.log()
    );
    let (_, log) = adopting.terminate().await;
    assert!(
        log.contains("using the queue's durability setting")
            && log.contains("durability=replicated:1:100ms"),
        "{log}"
    );
    // The ack ran on the primary all the same.
    assert_eq!(status(&queue, "a").await, None);

    let explicit = ExecWorker::start(
        &server,
        "dur",
        out.path(),
        &["--durability", "primary"],
        "cat >/dev/null",
    );
    let acked = queue.stats().await.unwrap().acked;
    queue.enqueue(NewJob::new("b").id("b")).await.unwrap();
    eventually("acked by the explicit worker", || async {
        queue.stats().await.unwrap().acked == acked + 1
    })
    .await;
    let (exit, log) = explicit.terminate().await;
    assert!(exit.success(), "{exit:?}\n{log}");
    assert!(
        !log.contains("using the queue's durability") && !log.contains("replica"),
        "{log}"
    );
}

/// Redis gone: the worker says so once at warning level, and its further failed
/// retries within the quiet window go to debug level, not a warning per retry of each
/// claim, renewal and reap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_redis_is_one_warning_not_one_per_retry() {
    let mut server = RedisServer::start();
    let _queue = server.queue("quiet").await;
    let out = tempfile::tempdir().unwrap();
    let log = out.path().join("worker.log");
    let mut child = Command::new(BIN)
        .args(["worker", "--redis", &server.url(), "--tag", "quiet"])
        .args(["--exec", "true"])
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    eventually("the worker started", || async {
        read().contains("worker started")
    })
    .await;
    server.kill();
    let retries = |level: &str| {
        read()
            .lines()
            .filter(|l| l.contains(level) && l.contains("failed; retrying"))
            .count()
    };
    eventually("several retries failed", || async { retries("") >= 4 }).await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(retries("WARN") + retries("ERROR"), 1, "{}", read());
}

/// A job whose id is longer than the environment can carry (written straight into Redis,
/// as a release before the id limit could have stored it): starting its command fails
/// with E2BIG, which belongs to that job alone. The job fails (retried, then dead-lettered
/// as usual) with the reason in `last_error`; the worker keeps running and the jobs
/// behind it run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_id_the_environment_cannot_carry_fails_alone() {
    use redis::Commands;
    let server = RedisServer::start();
    let settings = QueueSettings {
        max_attempts: 2,
        backoff_initial: Duration::from_millis(1),
        backoff_max: Duration::from_millis(1),
        ..Default::default()
    };
    let queue = queue_with(&server, "e2big", settings).await;
    let long_id = "L".repeat(128 * 1024);
    let mut conn = server.conn();
    let () = conn
        .hset(format!("jq:{{e2big}}:job:{long_id}"), "payload", "x")
        .unwrap();
    let () = conn.lpush("jq:{e2big}:pending", &long_id).unwrap();
    for id in ["a", "b", "c"] {
        queue.enqueue(NewJob::new("").id(id)).await.unwrap();
    }
    let out = tempfile::tempdir().unwrap();
    let mut worker = ExecWorker::start(
        &server,
        "e2big",
        out.path(),
        &[],
        r#"touch "$OUT/$JOBQUEUE_JOB_ID""#,
    );
    eventually("the long id dead and the others acked", || {
        worker.assert_running();
        let queue = &queue;
        async move {
            let stats = queue.stats().await.unwrap();
            stats.dead == 1 && stats.acked == 3
        }
    })
    .await;
    for id in ["a", "b", "c"] {
        assert!(out.path().join(id).exists(), "{id} ran");
    }
    let job = queue.job(&long_id).await.unwrap().unwrap();
    assert_eq!(
        job.attempts, 2,
        "retried, then dead-lettered by max attempts"
    );
    let error = job.last_error.unwrap();
    assert!(
        error.starts_with("cannot start this job's command: sh: Argument list too long")
            && error.ends_with(
                "(the job's id is 131072 bytes, over the limit of 1024 that enqueue keeps to)"
            ),
        "{error}"
    );
    let (exit, log) = worker.terminate().await;
    assert!(exit.success(), "{exit:?}\n{log}");
}

/// The worker's own credentials (the Redis URL, which may carry a password, and the
/// password variables) never reach the command unless the worker is told to pass them
/// with `--exec-keep-credentials`; the rest of the environment does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_gets_no_credentials_unless_asked() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "env", QueueSettings::default()).await;
    let out = tempfile::tempdir().unwrap();
    let url = server.url();
    // The worker signs in with the user and password of its environment (the password
    // of JOBQUEUE_REDIS_PASSWORD serves --redis too).
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "cred-user-s3cret", "on", ">redis-pw-s3cret"][..])
        .arg(&["~*", "&*", "+@all"][..])
        .query(&mut server.conn())
        .unwrap();
    let secrets = [
        ("JOBQUEUE_REDIS_URL", url.as_str()),
        ("JOBQUEUE_USERNAME", "cred-user-s3cret"),
        ("JOBQUEUE_REDIS_PASSWORD", "redis-pw-s3cret"),
        ("JOBQUEUE_SENTINEL_PASSWORD", "sentinel-pw-s3cret"),
    ];
    let script = r#"env > "$OUT/$JOBQUEUE_JOB_ID.tmp" && mv "$OUT/$JOBQUEUE_JOB_ID.tmp" "$OUT/$JOBQUEUE_JOB_ID""#;
    let run = async |flags: &[&str], env: &[(&str, &str)], id: &str| {
        let mut worker = ExecWorker::start_with_env(&server, "env", out.path(), flags, env, script);
        queue.enqueue(NewJob::new("").id(id)).await.unwrap();
        let path = out.path().join(id);
        eventually(&format!("job {id} ran"), || {
            worker.assert_running();
            let exists = path.exists();
            async move { exists }
        })
        .await;
        let (exit, log) = worker.terminate().await;
        assert!(exit.success(), "{exit:?}\n{log}");
        std::fs::read_to_string(&path).unwrap()
    };

    let env = run(&[], &secrets, "stripped").await;
    for (name, value) in secrets {
        assert!(
            !env.contains(&format!("{name}=")) && !env.contains(value),
            "{name} reached the command:\n{env}"
        );
    }
    assert!(env.contains("JOBQUEUE_JOB_ID=stripped"), "{env}");
    assert!(
        env.contains(&format!("OUT={}", out.path().display())),
        "{env}"
    );

    let env = run(&["--exec-keep-credentials"], &secrets, "kept").await;
    for (name, value) in secrets {
        assert!(
            env.contains(&format!("{name}={value}")),
            "{name} was not kept:\n{env}"
        );
    }
    let mut with_env = secrets.to_vec();
    with_env.push(("JOBQUEUE_EXEC_KEEP_CREDENTIALS", "true"));
    let env = run(&[], &with_env, "kept-by-env").await;
    assert!(env.contains(&format!("JOBQUEUE_REDIS_URL={url}")), "{env}");
}

/// `--durability replicated:1:50ms` on a Redis with no replica: every WAIT times out.
/// The settle_claim calls that ack finished jobs also lease the next ones; those leases
/// ran on the primary and must reach a handler, not expire and be charged an attempt.
/// Each job is run (the runs are counted from the commands' own record) and acked; none
/// ends dead without having run. The unconfirmed acks are logged as applied on the
/// primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_replication_never_strands_the_jobs_a_call_leased() {
    let server = RedisServer::start();
    let queue = queue_with(
        &server,
        "norep",
        QueueSettings {
            visibility_timeout: Duration::from_secs(2),
            max_attempts: 2,
            ..QueueSettings::default()
        },
    )
    .await;
    let ids: Vec<String> = (0..40).map(|i| format!("j{i}")).collect();
    queue
        .enqueue_many(ids.iter().map(|id| NewJob::new("x").id(id)).collect())
        .await
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let worker = ExecWorker::start(
        &server,
        "norep",
        out.path(),
        &["--concurrency", "4", "--durability", "replicated:1:50ms"],
        r#"cat >/dev/null; echo "$JOBQUEUE_JOB_ID $JOBQUEUE_ATTEMPT" >> "$OUT/runs""#,
    );
    let ended = Wait::for_("every job acked or dead")
        .within(Duration::from_secs(60))
        .explained_by(|| worker.log())
        .until(async || {
            let stats = queue.stats().await.unwrap();
            (stats.acked + stats.dead == ids.len() as u64).then_some(stats)
        })
        .await;
    let runs = std::fs::read_to_string(out.path().join("runs")).unwrap_or_default();
    let mut dead_without_running = Vec::new();
    for id in &ids {
        if queue
            .job(id)
            .await
            .unwrap()
            .is_some_and(|j| j.status.as_deref() == Some("dead"))
        {
            let ran = runs
                .lines()
                .any(|l| l.split(' ').next() == Some(id.as_str()));
            if !ran {
                dead_without_running.push(id.clone());
            }
        }
    }
    assert_eq!(
        (ended.dead, dead_without_running.len()),
        (0, 0),
        "dead jobs (never run: {dead_without_running:?})\n{}",
        worker.log()
    );
    for id in &ids {
        assert!(
            runs.lines().any(|l| l == format!("{id} 1")),
            "{id} never ran on its first attempt: {runs}"
        );
    }
    let (exit, log) = worker.terminate().await;
    assert!(exit.success(), "{exit:?}\n{log}");
    assert!(
        log.contains("applied on the primary but not confirmed by 1 replica"),
        "{log}"
    );
}

/// A worker or `reap` pointed at a read-only replica cannot do anything there: each
/// exits non-zero at once with an error that names the problem, instead of retrying
/// READONLY for ever (the worker) or reporting a pass that could not have written (reap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_and_reap_pointed_at_a_replica_exit_naming_it() {
    let primary = RedisServer::start();
    let queue = queue_with(&primary, "ro", QueueSettings::default()).await;
    queue.enqueue(NewJob::new("x").id("a")).await.unwrap();
    let replica = RedisServer::start_replica_of(&primary);
    eventually("the job reached the replica", || async {
        let exists: bool = redis::cmd("EXISTS")
            .arg("jq:{ro}:job:a")
            .query(&mut replica.conn())
            .unwrap();
        exists
    })
    .await;
    let want = "read-only replica";

    let out = tempfile::tempdir().unwrap();
    let mut worker = ExecWorker::start(&replica, "ro", out.path(), &[], "cat >/dev/null");
    let log_file = worker.log_path();
    let exited = Wait::for_("the worker on a replica to exit")
        .within(Duration::from_secs(20))
        .explained_by(move || std::fs::read_to_string(&log_file).unwrap_or_default())
        .until(async || worker.try_wait())
        .await;
    let log = worker.log();
    assert!(!exited.success(), "{exited:?}\n{log}");
    assert!(log.contains(want) && log.contains("primary"), "{log}");
    assert_eq!(queue.stats().await.unwrap().pending, 1);

    let reap = Command::new(BIN)
        .args(["reap", "--redis", &replica.url(), "--tag", "ro"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&reap.stderr);
    assert!(!reap.status.success(), "{:?}\n{stderr}", reap.status);
    assert!(
        stderr.contains(want) && stderr.contains("primary"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_timeout_is_stopped_and_its_job_fails() {
    let server = RedisServer::start();
    let settings = QueueSettings {
        max_attempts: 1,
        ..QueueSettings::default()
    };
    let queue = queue_with(&server, "hung", settings).await;
    let out = tempfile::tempdir().unwrap();
    // `hung` stops at SIGTERM; `stubborn` ignores it (so does its sleep, which inherits
    // the ignored signal) and needs the SIGKILL after --kill-grace.
    let script = r#"echo started > "$OUT/$JOBQUEUE_JOB_ID.started"
                    if [ "$JOBQUEUE_JOB_ID" = "$STUBBORN" ]; then trap '' TERM; fi
                    sleep 3600"#;
    let unique = format!("{}-{}", std::process::id(), rand::random::<u32>());
    let hung = format!("hung-{unique}");
    let stubborn = format!("stubborn-{unique}");
    let mut worker = ExecWorker::start_with_env(
        &server,
        "hung",
        out.path(),
        &[
            "--timeout",
            "1s",
            "--kill-grace",
            "300ms",
            "--concurrency",
            "2",
        ],
        &[("STUBBORN", stubborn.as_str())],
        script,
    );
    for id in [&hung, &stubborn] {
        queue
            .enqueue(NewJob::new("").id(id.as_str()))
            .await
            .unwrap();
    }
    for id in [&hung, &stubborn] {
        Wait::for_(format!("{id} dead-lettered"))
            .within(Duration::from_secs(20))
            .explained_by(|| worker.log())
            .until(async || status(&queue, id).await.as_deref() == Some("dead"))
            .await;
        worker.assert_running();
        assert!(
            out.path().join(format!("{id}.started")).exists(),
            "{id} ran"
        );
        let job = queue.job(id.as_str()).await.unwrap().unwrap();
        assert_eq!(
            job.last_error.as_deref(),
            Some("timed out after 1s"),
            "{id}"
        );
        assert_eq!(job.attempts, 1, "{id}");
        Wait::for_(format!("every process of {id} gone"))
            .within(Duration::from_secs(5))
            .explained_by(|| format!("left: {:?}", processes_of_job(id)))
            .until(async || processes_of_job(id).is_empty())
            .await;
    }
    let qs = queue.stats().await.unwrap();
    assert_eq!((qs.dead, qs.acked, qs.processing), (2, 0, 0), "{qs:?}");
    let (exit, log) = worker.terminate().await;
    assert!(exit.success(), "{log}");
}
