//! `jobqueue demo`, run as `make demo` runs it, with small numbers: workers are killed
//! mid-job, nothing is lost, and the demo leaves no process behind.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// The figure on the summary line that starts with `label`.
fn figure(stdout: &str, label: &str) -> u64 {
    stdout
        .lines()
        .map(str::trim_start)
        .find_map(|l| l.strip_prefix(label).filter(|r| r.starts_with(' ')))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} figure in:\n{stdout}"))
}

/// The port of the demo's redis-server, from its start-up lines.
fn port_of(stdout: &str) -> u16 {
    stdout
        .split_once("on 127.0.0.1:")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in:\n{stdout}"))
}

/// Pids of the demo workers that talk to the redis-server on `port` (Linux /proc).
fn workers_of(port: u16) -> Vec<u32> {
    let url = format!("redis://127.0.0.1:{port}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains("demo-worker") && cmdline.contains(&url)
        })
        .collect()
}

fn server_stopped(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_err()
}

#[test]
fn the_demo_kills_workers_and_loses_nothing() {
    let out: Output = Command::new(BIN)
        .args(["demo", "--jobs", "400", "--workers", "3"])
        .args(["--kill-every", "100ms", "--visibility", "1s"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");

    let enqueued = figure(&stdout, "enqueued");
    let done = figure(&stdout, "done");
    let dead = figure(&stdout, "dead");
    assert_eq!(enqueued, 400);
    assert_eq!(done + dead, enqueued, "{stdout}");
    assert_eq!(figure(&stdout, "lost"), 0, "{stdout}");
    assert_eq!(figure(&stdout, "acked twice"), 0, "{stdout}");
    // Jobs 125 and 375 fail on purpose and end dead; crashes alone never kill a job.
    assert!(stdout.contains("400 jobs (2 fail on purpose"), "{stdout}");
    assert_eq!(dead, 2, "{stdout}");
    // The jobs take at least 800 ms of work (two slow jobs), so kills happened.
    assert!(figure(&stdout, "workers killed") >= 1, "{stdout}");
    assert!(
        figure(&stdout, "ran more than once") <= figure(&stdout, "leases reaped"),
        "a job runs again only after its lease was reaped: {stdout}"
    );

    let port = port_of(&stdout);
    assert!(server_stopped(port), "redis-server on {port} still answers");
    assert!(workers_of(port).is_empty(), "workers left behind");
    assert!(stdout.trim_end().ends_with("the demo left nothing behind."));
}

#[test]
fn a_missing_redis_server_is_one_clear_line() {
    let out = Command::new(BIN)
        .arg("demo")
        .env("REDIS_SERVER", "/nonexistent/redis-server")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: /nonexistent/redis-server not found")
            && stderr.contains("apt-get install redis-server")
            && stderr.contains("make demo"),
        "{stderr}"
    );
}

#[test]
fn sigterm_stops_the_workers_and_the_server() {
    let mut child = Command::new(BIN)
        .args(["demo", "--jobs", "100000", "--kill-every", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Wait for the port, then for the workers to be at work.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = String::new();
    let mut port = None;
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|e| panic!("demo output stopped ({e}):\n{seen}"));
        seen.push_str(&line);
        seen.push('\n');
        if port.is_none() && line.contains("on 127.0.0.1:") {
            port = Some(port_of(&line));
        }
        if line.starts_with('[') && !line.contains(" done      0 ") {
            break;
        }
    }
    let port = port.expect("port line comes first");
    assert!(!server_stopped(port));
    assert_eq!(workers_of(port).len(), 4, "{seen}");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim(), "error: interrupted by SIGTERM");
    assert!(server_stopped(port), "redis-server on {port} still answers");
    assert!(workers_of(port).is_empty(), "workers left behind");
}

/// `make demo` on a fresh clone compiles for minutes before the demo prints anything: it
/// says what it is doing before cargo starts, and lets cargo show its progress (no
/// `--quiet` on the build). Run with a stand-in cargo that records its calls, so the
/// order of the lines is what is checked, not a build.
#[test]
fn make_demo_says_what_it_does_before_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("cargo");
    std::fs::write(&fake, "#!/bin/sh\necho \"cargo $*\"\n").unwrap();
    let mut perms = std::fs::metadata(&fake).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&fake, perms).unwrap();
    let out = Command::new("make")
        .args([
            "--no-print-directory",
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "demo",
        ])
        .arg(format!("CARGO={}", fake.display()))
        .output()
        .expect("run make");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with(&*fake.display().to_string()))
        .collect();
    assert!(
        lines.first().is_some_and(|l| l.starts_with("make demo: building jobqueue")
            && l.contains("minutes")),
        "the first line says what make demo does and how long a first build takes:\n{stdout}"
    );
    let build = lines
        .iter()
        .position(|l| *l == "cargo build --release --bin jobqueue");
    let run = lines
        .iter()
        .position(|l| l.starts_with("cargo run --release --quiet --bin jobqueue -- demo"));
    assert!(
        build.is_some_and(|b| run.is_some_and(|r| b < r)),
        "cargo builds with its progress shown, then runs the demo:\n{stdout}"
    );
}

/// The cargo profile a command line builds or runs in: `release` for `--release` or a
/// path under `target/release/`, else `dev` (`debug`).
fn profile_of(line: &str) -> &'static str {
    if line.contains("--release") || line.contains("target/release/") {
        "release"
    } else {
        "dev"
    }
}

/// After `make demo`, the commands the docs give run the binary it built: the demo, the
/// other make targets that run the binary, and every `cargo build`, `cargo run`,
/// `cargo install` or `target/*/jobqueue` line of README.md and docs/*.md use one
/// profile (`release`), so none of them compiles the crate again in another. The README
/// says where that binary is.
#[test]
fn make_demo_and_the_docs_build_one_profile() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let makefile = std::fs::read_to_string(root.join("Makefile")).unwrap();
    let demo: Vec<&str> = makefile
        .lines()
        .skip_while(|l| !l.starts_with("demo:"))
        .skip(1)
        .take_while(|l| l.starts_with('\t'))
        .filter(|l| l.contains("$(CARGO) build") || l.contains("$(CARGO) run"))
        .collect();
    assert_eq!(demo.len(), 2, "make demo builds, then runs:\n{demo:?}");
    let profile = profile_of(demo[0]);
    let mut lines: Vec<(String, String)> = demo
        .iter()
        .map(|l| ("Makefile demo".to_string(), l.trim().to_string()))
        .collect();
    // Other targets that build or run the binary itself (not tests or benches).
    for l in makefile.lines().filter(|l| {
        l.starts_with('\t') && (l.contains("$(CARGO) build") || l.contains("$(CARGO) run"))
    }) {
        lines.push(("Makefile".into(), l.trim().to_string()));
    }
    let mut docs = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    for path in &docs {
        let text = std::fs::read_to_string(path).unwrap();
        for l in text.lines() {
            let runs_binary = ["cargo run", "cargo build", "cargo install"]
                .iter()
                .any(|c| l.contains(c))
                || ["target/debug/jobqueue", "target/release/jobqueue"]
                    .iter()
                    .any(|t| l.contains(t));
            if runs_binary {
                lines.push((path.display().to_string(), l.trim().to_string()));
            }
        }
    }
    let other: Vec<String> = lines
        .iter()
        .filter(|(_, l)| profile_of(l) != profile)
        .map(|(file, l)| format!("{file}: {l}"))
        .collect();
    assert!(
        other.is_empty(),
        "make demo builds the {profile} profile; these lines build another:\n{}",
        other.join("\n")
    );
    assert_eq!(profile, "release", "the docs' commands run a release build");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains("target/release/jobqueue"),
        "the README says where the binary the commands run is"
    );
}
