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
}

/// Read `child`'s stderr to its end on a thread of its own.
pub fn drain_stderr(child: &mut Child) -> std::thread::JoinHandle<String> {
    let mut stderr = child.stderr.take().expect("stderr piped");
    std::thread::spawn(move || {
        let mut log = String::new();
        let _ = stderr.read_to_string(&mut log);
        log
    })
}

impl Ui {
    /// `redis` empty: no `--redis` (for `extra` naming Sentinels instead).
    pub fn start(redis: &str, extra: &[&str]) -> Ui {
        let redis_flag: &[&str] = if redis.is_empty() {
            &[]
        } else {
            &["--redis", redis]
        };
        let mut child = Command::new(BIN)
            .arg("ui")
            .args(redis_flag)
            .args(["--port", "0", "--refresh", "200ms", "--rescan", "200ms"])
            .args(extra)
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start jobqueue ui");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let stderr = drain_stderr(&mut child);
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
        }
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

    /// The page's CSRF token (from the shell's `csrf-token` meta tag).
    pub fn csrf(&self) -> String {
        let (code, page) = self.get("/");
        assert_eq!(code, 200, "GET /: {page}");
        page.split("name=\"csrf-token\" content=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("a csrf-token meta tag")
            .to_string()
    }

    /// A JSON POST with the page's CSRF token: the status and the JSON reply.
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
        let reply =
            serde_json::from_str(&reply).unwrap_or_else(|e| panic!("POST {path}: {e}: {reply}"));
        (code, reply)
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
    let mut cmd = Command::new("node");
    cmd.arg(root().join("tests/console/drive.mjs"))
        .arg(scenario)
        .env("CONSOLE_URL", ui.url())
        .env("QUEUE", queue)
        .env("SEARCH", search);
    if let Some(dir) = shots {
        cmd.env("SHOTS", dir);
    }
    let out = cmd.output().expect("run node tests/console/drive.mjs");
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
