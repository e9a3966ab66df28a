//! `jobqueue operator` as a user meets it: its help, its start-up without a cluster, and
//! its HTTP endpoints.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::CommandFactory;
use jobqueue::cli::Cli;
use jobqueue::controller::Metrics;
use jobqueue::controller::http::{HttpState, serve};
use jobqueue::controller::metrics::QueueLabels;
use jobqueue::queue::{QueueStats, ReapOutcome};
use prometheus_client::registry::Registry;
use support::eventually::Wait;
use tokio_util::sync::CancellationToken;

fn jobqueue() -> Command {
    Command::new(env!("CARGO_BIN_EXE_jobqueue"))
}

#[test]
fn help_documents_every_flag() {
    let out = jobqueue().args(["operator", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let cli = Cli::command();
    let operator = cli
        .find_subcommand("operator")
        .expect("an operator subcommand");
    let mut flags = 0;
    for arg in operator.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        flags += 1;
        assert!(
            arg.get_help()
                .is_some_and(|h| !h.to_string().trim().is_empty()),
            "--{long} has no help text"
        );
        assert!(
            help.contains(&format!("--{long}")),
            "--{long} missing from:\n{help}"
        );
    }
    assert!(flags >= 10, "{flags} flags");
    for needle in [
        "--namespace",
        "--all-namespaces",
        "--metrics-addr",
        "--log-format",
        "json",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}

#[test]
fn without_a_cluster_it_fails_with_one_clear_line() {
    let home = tempfile::tempdir().unwrap();
    let out = jobqueue()
        .args(["operator", "--metrics-addr", "127.0.0.1:0"])
        .env_clear()
        .env("HOME", home.path())
        .env("KUBECONFIG", home.path().join("no-such-kubeconfig"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line, got:\n{stderr}");
    assert!(
        lines[0].contains("no kubeconfig") && lines[0].contains("in-cluster"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn conflicting_namespace_flags_are_a_usage_error() {
    let out = jobqueue()
        .args(["operator", "--namespace", "a", "--all-namespaces"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

/// A plain HTTP/1.1 GET: (status code, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = Wait::for_(format!("a connection to {addr}"))
        .within(Duration::from_secs(10))
        .until_blocking(|| TcpStream::connect(addr).ok());
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics_endpoints() {
    let mut registry = Registry::default();
    let metrics = Metrics::default().register(&mut registry);
    metrics.observed(
        &QueueLabels::new("prod", "emails"),
        &QueueStats {
            pending: 42,
            ..QueueStats::default()
        },
        &ReapOutcome::default(),
    );
    let ready = Arc::new(AtomicBool::new(false));
    let shutdown = CancellationToken::new();
    let registry = Arc::new(registry);
    // A free port can be taken by a parallel test before it is bound: take another.
    let mut tries = 0;
    let (addr, server) = loop {
        let addr: SocketAddr = format!("127.0.0.1:{}", support::redis::free_port())
            .parse()
            .unwrap();
        let state = HttpState {
            registry: registry.clone(),
            ready: ready.clone(),
        };
        match serve(addr, state, shutdown.clone()).await {
            Ok(server) => break (addr, server),
            Err(e) if tries < 5 => {
                tries += 1;
                eprintln!("{e}; another port");
            }
            Err(e) => panic!("{e}"),
        }
    };

    let checks = tokio::task::spawn_blocking(move || {
        assert_eq!(get(addr, "/healthz").0, 200);
        let (code, body) = get(addr, "/readyz");
        assert_eq!(code, 503, "{body}");
        ready.store(true, Ordering::Release);
        assert_eq!(get(addr, "/readyz").0, 200);
        let (code, body) = get(addr, "/metrics");
        assert_eq!(code, 200);
        assert!(
            body.contains(r#"jobqueue_pending{namespace="prod",name="emails"} 42"#),
            "{body}"
        );
        assert!(body.contains("# EOF"), "OpenMetrics text ends with # EOF");
        assert_eq!(get(addr, "/nothing").0, 404);
    });
    checks.await.unwrap();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server stops on shutdown")
        .unwrap();
}
