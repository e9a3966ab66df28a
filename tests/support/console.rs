//! The web console's test harness: `jobqueue ui` on a free port (`Ui`), plain HTTP
//! requests to it (`http`), and the headless Chromium scenarios of tests/console/
//! (`drive_with`: drive.mjs, or a scenario file tests/console/scenarios/NAME.mjs), with
//! the screenshots they take. Chromium and playwright-core are installed when missing.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::eventually::Wait;

pub const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Chromium and playwright-core, installed when missing (a failure names what is missing).
pub fn ensure_browser() {
    let out = Command::new(root().join("scripts/ensure-browser.sh"))
        .output()
        .expect("run scripts/ensure-browser.sh");
    assert!(
        out.status.success(),
        "scripts/ensure-browser.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `jobqueue ui` process on a free port, killed on drop.
pub struct Ui {
    pub child: Child,
    pub addr: String,
    /// Reads the console's stderr as it is written: a pipe nobody reads fills up (64 KB
    /// of log lines) and then blocks the console in mid-request.
    pub stderr: Option<std::thread::JoinHandle<String>>,
    /// What the console wrote to stderr so far.
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

/// Read `child`'s stderr to its end on a thread of its own.
pub fn drain_stderr(child: &mut Child) -> std::thread::JoinHandle<String> {
    drain_stderr_into(child, Default::default())
}

/// Read `child`'s stderr to its end on a thread of its own, each line also appended to
/// `so_far` as it comes.
pub fn drain_stderr_into(
    child: &mut Child,
    so_far: std::sync::Arc<std::sync::Mutex<String>>,
) -> std::thread::JoinHandle<String> {
    let stderr = child.stderr.take().expect("stderr piped");
    std::thread::spawn(move || {
        let mut log = String::new();
        let mut lines = BufReader::new(stderr);
        let mut line = String::new();
        while lines.read_line(&mut line).unwrap_or(0) > 0 {
            so_far.lock().unwrap().push_str(&line);
            log.push_str(&line);
            line.clear();
        }
        log
    })
}

impl Ui {
    /// `redis` empty: no `--redis` (for `extra` naming Sentinels instead).
    pub fn start(redis: &str, extra: &[&str]) -> Ui {
        Ui::start_with(redis, extra, |_| {})
    }

    /// As `start`, with `prepare` given the command before it runs (environment,
    /// resource limits).
    pub fn start_with(redis: &str, extra: &[&str], prepare: impl FnOnce(&mut Command)) -> Ui {
        let redis_flag: &[&str] = if redis.is_empty() {
            &[]
        } else {
            &["--redis", redis]
        };
        let mut cmd = Command::new(BIN);
        cmd.arg("ui")
            .args(redis_flag)
            .args(["--port", "0", "--refresh", "200ms", "--rescan", "200ms"])
            .args(extra)
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        prepare(&mut cmd);
        let mut child = cmd.spawn().expect("start jobqueue ui");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let stderr = drain_stderr_into(&mut child, log.clone());
        let Some(addr) = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .map(str::to_string)
        else {
            let _ = child.kill();
            let err = stderr.join().unwrap_or_default();
            panic!("jobqueue ui printed no address: {line:?}; stderr: {err}");
        };
        Ui {
            child,
            addr,
            stderr: Some(stderr),
            log,
        }
    }

    /// What the console wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Stop the console and return what it wrote to stderr.
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http(&self.addr, "GET", path, &[], "")
    }

    pub fn get_json(&self, path: &str) -> Value {
        let (code, body) = self.get(path);
        assert_eq!(code, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// The CSRF token the pages carry (every POST needs it).
    pub fn csrf(&self) -> String {
        let (_, page) = self.get("/");
        page.split("name=\"csrf-token\" content=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("the page carries a CSRF token")
            .to_string()
    }

    /// A JSON POST with the page's CSRF token: status and body as JSON.
    pub fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let csrf = self.csrf();
        let (code, reply) = http(
            &self.addr,
            "POST",
            path,
            &[
                ("Content-Type", "application/json"),
                ("X-CSRF-Token", csrf.as_str()),
            ],
            &body.to_string(),
        );
        let value = serde_json::from_str(&reply).unwrap_or(Value::String(reply));
        (code, value)
    }

    /// The snapshot once it has been refreshed after `after_ms` (this host's clock).
    pub fn overview_after(&self, after_ms: i64) -> Value {
        Wait::for_("a console refresh after the set-up").until_blocking(|| {
            let o = self.get_json("/api/overview");
            (o["refreshed_at_ms"].as_i64().unwrap_or(0) > after_ms).then_some(o)
        })
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request with `Host` set to the console's address; status and body.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the console");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    // Small bodies come whole; chunked ones are rare here (JSON replies carry a length).
    (code, body.to_string())
}

/// A reply read off the wire: status, headers (names lowercase), body.
#[derive(Debug)]
pub struct Reply {
    pub code: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// Every value of a header.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Send `request` as it is (it may be incomplete, or stop half-way) and read the reply
/// until the server closes the connection; None when nothing came within `wait`. A write
/// the server refuses half-way (it answered early and closed) is not an error.
pub fn raw_http(addr: &str, request: &[u8], wait: std::time::Duration) -> Option<Reply> {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the console");
    s.set_read_timeout(Some(wait)).unwrap();
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && !out.is_empty() => break,
            Err(_) if out.is_empty() => return None,
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let code = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Reply {
        code,
        headers,
        body: body.to_string(),
    })
}

/// A complete HTTP/1.1 request with `Host` the console's address, `Connection: close`.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut out = req.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A token file readable by its owner only, as `jobqueue ui --token-file` requires.
pub fn token_file(dir: &Path, token: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

pub fn drive_with(
    ui: &Ui,
    scenario: &str,
    queue: &str,
    search: &str,
    shots: Option<&Path>,
) -> Value {
    Drive::start(ui, scenario, queue, &[("SEARCH", search)], shots).finish()
}

/// A browser scenario running while the test goes on (stops or resumes Redis, waits for
/// a file the scenario writes): `env` is read by the scenario as `process.env`.
pub struct Drive {
    scenario: String,
    child: Child,
}

impl Drive {
    pub fn start(
        ui: &Ui,
        scenario: &str,
        queue: &str,
        env: &[(&str, &str)],
        shots: Option<&Path>,
    ) -> Drive {
        let mut cmd = Command::new("node");
        cmd.arg(root().join("tests/console/drive.mjs"))
            .arg(scenario)
            .env("CONSOLE_URL", ui.url())
            .env("QUEUE", queue)
            .env("SEARCH", "")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = shots {
            cmd.env("SHOTS", dir);
        }
        let child = cmd.spawn().expect("run node tests/console/drive.mjs");
        Drive {
            scenario: scenario.to_string(),
            child,
        }
    }

    /// Whether the scenario has ended (a failed one ends early).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Wait for the scenario to end; what it saw (the test fails when it failed).
    pub fn finish(self) -> Value {
        let scenario = self.scenario;
        let out = self
            .child
            .wait_with_output()
            .expect("wait for node tests/console/drive.mjs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let seen: Value = stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| {
                panic!(
                    "drive.mjs printed no result: {stdout}\nstderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        assert!(
            out.status.success() && seen.get("failure").is_none(),
            "the browser scenario {scenario} failed: {}",
            serde_json::to_string_pretty(&seen).unwrap()
        );
        seen
    }
}

/// Where the browser tests put their screenshots: `target/console-screenshots/`, or
/// with `JOBQUEUE_SCREENSHOTS=docs/images` (`make screenshots`) the ones the docs show.
pub fn shots_dir() -> PathBuf {
    let dir = match std::env::var_os("JOBQUEUE_SCREENSHOTS") {
        Some(dir) => root().join(dir),
        None => root().join("target/console-screenshots"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The screenshot `name` was written, as a PNG.
pub fn assert_png(name: &str) {
    let path = shots_dir().join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000,
        "{} is not a screenshot",
        path.display()
    );
}

/// Configure `queue` so that a job dies at its first failure (the dead-letter pages' set-ups).
pub async fn one_attempt(queue: &jobqueue::queue::Queue) {
    queue
        .configure(&jobqueue::queue::QueueSettings {
            max_attempts: 1,
            ..Default::default()
        })
        .await
        .unwrap();
}
