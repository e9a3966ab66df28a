//! The web console (`jobqueue ui`) held against what a network or a careless set-up
//! does: idle and half-sent connections, many of them under a low open-file limit;
//! sessions that are per login, expire, end at logout and are no use on another port;
//! API errors that are JSON on every path; an audit log; rate-limited logins; a token
//! file others can read; a Redis password that must never be printed; and pages that
//! stay within a 1280 px screen whatever the length of a tag or an id. Real Redis, real
//! processes, headless Chromium for the pages.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use jobqueue::queue::{Backoff, FailMode, NewJob, Queue};
use serde_json::Value;
use support::console::{BIN, Reply, Ui, drive_with, ensure_browser, raw_http, request, token_file};
use support::eventually::Wait;
use support::redis::{RedisServer, free_port};

/// How long a test waits for the console to answer or close: a bound on a wait, not a
/// measured duration.
const BOUND: Duration = Duration::from_secs(30);

fn get(ui: &Ui, path: &str, headers: &[(&str, &str)]) -> Reply {
    raw_http(
        &ui.addr,
        &request(&ui.addr, "GET", path, headers, b""),
        BOUND,
    )
    .unwrap_or_else(|| panic!("GET {path}: no reply within {BOUND:?}"))
}

fn post(ui: &Ui, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    raw_http(
        &ui.addr,
        &request(&ui.addr, "POST", path, headers, body),
        BOUND,
    )
    .unwrap_or_else(|| panic!("POST {path}: no reply within {BOUND:?}"))
}

/// The CSRF token of the page shell (the shell needs `auth` when there is a token).
fn csrf(ui: &Ui, auth: &[(&str, &str)]) -> String {
    let page = get(ui, "/", auth);
    assert_eq!(page.code, 200, "{page:?}");
    let (_, rest) = page
        .body
        .split_once("name=\"csrf-token\" content=\"")
        .expect("a csrf-token meta tag");
    rest.split('"').next().unwrap().to_string()
}

/// Whether the server closed this connection (EOF or reset) within `BOUND`.
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(BOUND)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            // A 408 or 400 may come first; the close is what counts.
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_are_closed_and_cannot_stop_the_console() {
    let server = RedisServer::start();
    server.queue("shop").await;
    // A low open-file limit, as in a container: 256 descriptors for the whole process.
    let ui = Ui::start_with(&server.url(), &["--tag", "shop"], |cmd| {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe; it only lowers this child's limit.
        unsafe {
            cmd.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 256,
                    rlim_max: 256,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    // An idle connection (nothing sent) and a half-sent one (headers never finished) are
    // closed by the console, by its default client timeout (10 s), within the bound.
    let mut idle = TcpStream::connect(&ui.addr).unwrap();
    let mut half = TcpStream::connect(&ui.addr).unwrap();
    write!(
        half,
        "GET /api/overview HTTP/1.1\r\nHost: {}\r\nX-Slow: ",
        ui.addr
    )
    .unwrap();
    assert!(
        closed_by_server(&mut idle),
        "an idle connection was still open after {BOUND:?}"
    );
    assert!(
        closed_by_server(&mut half),
        "a half-sent request's connection was still open after {BOUND:?}"
    );
    // 300 idle connections at once, more than the descriptors the console has: it still
    // answers, each time.
    let crowd: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(&ui.addr).unwrap())
        .collect();
    for round in 0..3 {
        let reply = raw_http(
            &ui.addr,
            &request(&ui.addr, "GET", "/api/overview", &[], b""),
            BOUND,
        );
        let reply = reply.unwrap_or_else(|| {
            panic!(
                "round {round}: no answer within {BOUND:?} with 300 idle connections open; \
                 log: {}",
                ui.log()
            )
        });
        assert_eq!(reply.code, 200, "{reply:?}");
        let o: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(o["queues"][0]["id"], "shop");
    }
    drop(crowd);
}

/// The session cookie of a `Set-Cookie` value: (name, value, attributes).
fn cookie(set_cookie: &str) -> (String, String, String) {
    let (pair, attrs) = set_cookie.split_once(';').unwrap_or((set_cookie, ""));
    let (name, value) = pair.split_once('=').unwrap();
    (name.to_string(), value.to_string(), attrs.to_string())
}

fn login(ui: &Ui, token: &str, extra: &[(&str, &str)]) -> Reply {
    let mut headers = vec![("Content-Type", "application/x-www-form-urlencoded")];
    headers.extend_from_slice(extra);
    post(ui, "/login", &headers, format!("token={token}").as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_login_is_a_session_of_its_own_that_expires_ends_at_logout_and_stays_on_its_port() {
    let server = RedisServer::start();
    server.queue("shop").await;
    let dir = tempfile::tempdir().unwrap();
    let token = "s3cret-token-0123456789";
    let file = token_file(dir.path(), token);
    let ui = Ui::start(
        &server.url(),
        &["--tag", "shop", "--token-file", file.to_str().unwrap()],
    );
    let port = ui.addr.rsplit(':').next().unwrap().to_string();
    let a = login(&ui, token, &[]);
    let b = login(&ui, token, &[]);
    assert_eq!((a.code, b.code), (303, 303), "{a:?} {b:?}");
    let (name_a, value_a, attrs) = cookie(a.all("set-cookie")[0]);
    let (name_b, value_b, _) = cookie(b.all("set-cookie")[0]);
    // Named for this console's port; a value per login, neither the token.
    assert_eq!(name_a, format!("jq_console_{port}"));
    assert_eq!(name_b, name_a);
    assert_ne!(value_a, value_b, "two logins were given the same session");
    assert!(!value_a.contains(token) && value_a.len() >= 32);
    for want in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
        assert!(attrs.contains(want), "{want} missing: {attrs}");
    }
    assert!(!attrs.contains("Secure"), "{attrs}");
    // Behind a TLS proxy: Secure, and the __Host- prefix.
    let tls = login(&ui, token, &[("X-Forwarded-Proto", "https")]);
    let (tls_name, tls_value, tls_attrs) = cookie(tls.all("set-cookie")[0]);
    assert_eq!(tls_name, format!("__Host-jq_console_{port}"));
    assert!(tls_attrs.contains("Secure"), "{tls_attrs}");

    let with = |name: &str, value: &str| format!("{name}={value}");
    let overview = |cookie: &str| get(&ui, "/api/overview", &[("Cookie", cookie)]).code;
    assert_eq!(overview(&with(&name_a, &value_a)), 200);
    assert_eq!(overview(&with(&tls_name, &tls_value)), 200);
    // A value this console did not hand out, under its name or the old shared one, or
    // its own session under another port's name (another app's cookie): refused.
    assert_eq!(overview(&with(&name_a, &"ab".repeat(16))), 401);
    assert_eq!(overview(&with("jq_console", &value_a)), 401);
    let other = (port.parse::<u16>().unwrap() ^ 1).to_string();
    assert_eq!(
        overview(&with(&format!("jq_console_{other}"), &value_a)),
        401
    );
    // Logout ends that session on the server (the cookie is also cleared); the other
    // login's session goes on.
    let cookie_a = with(&name_a, &value_a);
    let token_csrf = csrf(&ui, &[("Cookie", &cookie_a)]);
    let out = post(
        &ui,
        "/logout",
        &[("Cookie", &cookie_a), ("X-CSRF-Token", &token_csrf)],
        b"{}",
    );
    assert_eq!(out.code, 200, "{out:?}");
    assert!(
        out.all("set-cookie")
            .iter()
            .any(|c| c.starts_with(&format!("{name_a}=;")) && c.contains("Max-Age=0")),
        "{out:?}"
    );
    assert_eq!(
        overview(&cookie_a),
        401,
        "a session was still valid after logout"
    );
    assert_eq!(overview(&with(&name_b, &value_b)), 200);
    // The log says who logged in and out by session number, never the session id.
    let log = ui.stop();
    assert!(
        log.contains("console login") && log.contains("console logout"),
        "{log}"
    );
    assert!(
        !log.contains(&value_a) && !log.contains(&value_b) && !log.contains(token),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_are_rate_limited_and_every_attempt_is_in_the_audit_log() {
    let server = RedisServer::start();
    server.queue("shop").await;
    let dir = tempfile::tempdir().unwrap();
    let token = "s3cret-token-0123456789";
    let file = token_file(dir.path(), token);
    let ui = Ui::start(
        &server.url(),
        &[
            "--tag",
            "shop",
            "--token-file",
            file.to_str().unwrap(),
            "--log-format",
            "json",
        ],
    );
    for i in 0..5 {
        let wrong = login(&ui, &format!("wrong-guess-{i}-0123456789"), &[]);
        assert_eq!(wrong.code, 401, "attempt {i}: {wrong:?}");
    }
    // The sixth in a minute is refused before the token is looked at, the right one too.
    let limited = login(&ui, "wrong-guess-6-0123456789", &[]);
    assert_eq!(limited.code, 429, "{limited:?}");
    assert!(!limited.all("retry-after").is_empty(), "{limited:?}");
    assert!(limited.body.contains("try again in"), "{}", limited.body);
    assert_eq!(login(&ui, token, &[]).code, 429);
    let log = ui.stop();
    let audit: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "jobqueue::audit")
        .collect();
    let failed = audit
        .iter()
        .filter(|v| v["event"] == "login_failed")
        .count();
    assert_eq!(failed, 7, "{log}");
    assert!(audit.iter().all(|v| {
        v["peer"]
            .as_str()
            .is_some_and(|p| p.starts_with("127.0.0.1:"))
    }));
    assert!(
        !log.contains("wrong-guess") && !log.contains(token),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_error_is_json_and_writes_and_outages_are_audited() {
    let mut server = RedisServer::start();
    let queue: Queue = server.queue("shop").await;
    let job = queue.enqueue(NewJob::new("{}")).await.unwrap().id;
    let lease = queue.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!(lease.id, job);
    queue
        .fail(&lease, "boom", FailMode::Dead, Backoff::Policy)
        .await
        .unwrap();
    let ui = Ui::start(
        &server.url(),
        &["--tag", "shop", "--allow-writes", "--log-format", "json"],
    );
    ui.overview_after(0);
    let token = csrf(&ui, &[]);
    let json = [
        ("Content-Type", "application/json"),
        ("X-CSRF-Token", token.as_str()),
    ];
    let cases: Vec<(&str, Reply, u16)> = vec![
        ("unknown route", get(&ui, "/api/nothing-here", &[]), 404),
        ("wrong method", get(&ui, "/api/dead/redrive", &[]), 405),
        ("missing query", get(&ui, "/api/queue", &[]), 400),
        ("unknown queue", get(&ui, "/api/queue?q=nosuch", &[]), 404),
        (
            "bad JSON",
            post(&ui, "/api/dead/redrive", &json, b"{not json"),
            400,
        ),
        (
            "JSON of the wrong shape",
            post(&ui, "/api/dead/redrive", &json, b"{\"q\": 5}"),
            422,
        ),
        (
            "no content type",
            post(&ui, "/api/dead/redrive", &[("X-CSRF-Token", &token)], b"{}"),
            415,
        ),
        (
            "too large a body",
            {
                // Announced at 3 MiB, above the 2 MiB limit: refused before it is all sent.
                let head = format!(
                    "POST /api/dead/redrive HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
                 Content-Type: application/json\r\nX-CSRF-Token: {token}\r\n\
                 Content-Length: {}\r\n\r\n{{\"q\":\"",
                    ui.addr,
                    3 << 20
                );
                raw_http(&ui.addr, head.as_bytes(), BOUND).expect("a reply to a large body")
            },
            413,
        ),
    ];
    for (what, reply, code) in &cases {
        assert_eq!(reply.code, *code, "{what}: {reply:?}");
        let body: Value = serde_json::from_str(&reply.body)
            .unwrap_or_else(|e| panic!("{what}: the error is not JSON ({e}): {:?}", reply.body));
        let message = body["error"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{what}: {body}");
    }
    let unknown: Value = serde_json::from_str(&cases[3].1.body).unwrap();
    assert_eq!(unknown["code"], "no_such_queue");
    // A write, then an outage and its end: each an audit line.
    let done = post(
        &ui,
        "/api/dead/redrive",
        &json,
        format!("{{\"q\":\"shop\",\"ids\":[\"{}\"]}}", job.as_str().unwrap()).as_bytes(),
    );
    assert_eq!(done.code, 200, "{done:?}");
    let audit = |event: &'static str| {
        move |log: &str| {
            log.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|v| v["target"] == "jobqueue::audit" && v["event"] == event)
                .collect::<Vec<_>>()
        }
    };
    let refused = post(
        &ui,
        "/api/dead/purge",
        &[("Content-Type", "application/json")],
        b"{}",
    );
    assert_eq!(refused.code, 403, "{refused:?}");
    // The log is read from the console's stderr as it comes: wait for the lines.
    Wait::for_("audit lines for the refused purge and the redrive")
        .explained_by(|| ui.log())
        .until_blocking(|| {
            let writes = audit("write")(&ui.log());
            writes
                .iter()
                .any(|v| v["path"] == "/api/dead/purge" && v["status"] == 403)
                && writes
                    .iter()
                    .any(|v| v["path"] == "/api/dead/redrive" && v["status"] == 200)
        });
    server.kill();
    let outage = Wait::for_("an audit line for the outage")
        .explained_by(|| ui.log())
        .until_blocking(|| audit("outage")(&ui.log()).into_iter().next());
    assert_eq!(outage["queue"], "shop", "{outage}");
    server.restart();
    Wait::for_("an audit line for the recovery")
        .explained_by(|| ui.log())
        .until_blocking(|| !audit("recovered")(&ui.log()).is_empty());
}

/// Run `jobqueue` with `args`; its exit code and stderr, or a failure naming what ran
/// on past the bound (a console that started instead of refusing).
fn run_bounded(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = support::console::drain_stderr(&mut child);
    let status = Wait::for_(format!("jobqueue {args:?} to exit"))
        .every(Duration::from_millis(50))
        .until_blocking(|| child.try_wait().unwrap());
    (status.code(), stderr.join().unwrap())
}

#[test]
fn a_token_file_others_can_read_is_refused_naming_file_and_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = token_file(dir.path(), "s3cret-token-0123456789");
    for (mode, who) in [(0o644, "everyone"), (0o640, "its group")] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let (code, err) = run_bounded(
            &["ui", "--port", "0", "--token-file", file.to_str().unwrap()],
            &[],
        );
        assert_eq!(code, Some(2), "mode {mode:o}: {err}");
        let want = format!("readable by {who} (mode {mode:04o})");
        assert!(
            err.contains(file.to_str().unwrap())
                && err.contains(&want)
                && err.contains("chmod 600"),
            "{err}"
        );
        assert!(!err.contains("s3cret-token"), "{err}");
    }
}

#[test]
fn a_redis_password_holding_url_delimiters_is_never_printed() {
    let closed = free_port();
    for password in ["se/cret-Zq9", "se?cret-Zq9", "se#cret-Zq9", "se,cret-Zq9"] {
        let url = format!("redis://:{password}@127.0.0.1:{closed}");
        for args in [
            vec!["stats", "--tag", "shop", "--redis", &url],
            vec!["ui", "--port", "0", "--tag", "shop", "--redis", &url],
        ] {
            let (code, err) = run_bounded(&args, &[]);
            assert_ne!(code, Some(0), "{args:?}: {err}");
            assert!(!err.is_empty(), "{args:?}: no error");
            let secret = &password[3..];
            assert!(
                !err.contains(secret) && !err.contains("se/") && !err.contains("se?"),
                "{args:?}: the password is in the error: {err}"
            );
            assert!(err.contains(":***@127.0.0.1"), "{args:?}: {err}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_may_come_from_a_file_instead_of_the_url() {
    const PASSWORD: &str = "pa/ss?w#rd@-Zq9";
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("redis-password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let url = format!("redis://127.0.0.1:{}", server.port);
    let out = Command::new(BIN)
        .args([
            "stats",
            "--tag",
            "shop",
            "--redis",
            &url,
            "--redis-password-file",
        ])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // A wrong one: refused by Redis, and not printed.
    std::fs::write(&file, "not-the-password-Zq9\n").unwrap();
    let (code, err) = run_bounded(
        &[
            "stats",
            "--tag",
            "shop",
            "--redis",
            &url,
            "--redis-password-file",
            file.to_str().unwrap(),
        ],
        &[],
    );
    assert_ne!(code, Some(0));
    assert!(!err.contains("not-the-password"), "{err}");
    // Given twice (the file and the environment): refused, naming both.
    let (code, err) = run_bounded(
        &[
            "stats",
            "--tag",
            "shop",
            "--redis",
            &url,
            "--redis-password-file",
            file.to_str().unwrap(),
        ],
        &[("JOBQUEUE_REDIS_PASSWORD", PASSWORD)],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--redis-password-file") && err.contains("JOBQUEUE_REDIS_PASSWORD"),
        "{err}"
    );
    assert!(!err.contains(PASSWORD), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_tags_and_ids_stay_on_a_1280_px_screen_and_empty_states_are_said() {
    ensure_browser();
    let server = RedisServer::start();
    // A 200-byte tag, and in another queue a dead job with a 256-byte id.
    let long_tag = format!("t{}", "x".repeat(199));
    let long = server.queue(&long_tag).await;
    long.enqueue(NewJob::new("{}")).await.unwrap();
    let queue = server.queue("shop").await;
    let long_id = format!("id-{}", "y".repeat(253));
    let id = queue
        .enqueue(NewJob::new("{\"n\":1}").id(long_id.clone()))
        .await
        .unwrap()
        .id;
    let lease = queue.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!(lease.id, id);
    queue
        .fail(
            &lease,
            "card declined: insufficient funds on the account",
            FailMode::Dead,
            Backoff::Policy,
        )
        .await
        .unwrap();
    server.queue("idle").await;
    let tags = format!("{long_tag},shop,idle");
    let ui = Ui::start(&server.url(), &["--tag", &tags]);
    let seen = drive_with(&ui, "hardening", "shop", &long_tag, None);
    let num = |k: &str| seen[k].as_f64().unwrap_or_else(|| panic!("{k}: {seen}"));
    // The queue menu stays narrow; the overview, its last count column included, fits.
    assert!(num("menu_width") <= 260.0, "{seen}");
    assert!(num("overview_right") <= 1280.0, "{seen}");
    assert!(num("page_width") <= 1280.0, "{seen}");
    // On the dead page the 256-byte id wraps; the error column keeps room for its text.
    assert!(num("dead_page_width") <= 1280.0, "{seen}");
    assert!(num("error_width") >= 200.0, "{seen}");
    assert!(num("id_width") <= 420.0, "{seen}");
    // An unknown queue says so instead of "Loading…"; empty tables say they are empty.
    assert!(
        seen["no_such_queue"]
            .as_str()
            .unwrap()
            .contains("No such queue"),
        "{seen}"
    );
    let empty: Vec<&str> = seen["empty_rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        empty,
        [
            "empty: no job waiting",
            "empty: no lease in flight",
            "empty: no delayed job"
        ],
        "{seen}"
    );
    assert_eq!(
        seen["console_errors"].as_array().map(Vec::len),
        Some(0),
        "{seen}"
    );
}
