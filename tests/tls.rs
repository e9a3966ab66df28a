//! `rediss://` with a private CA: the client trusts exactly the CA it is given.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use jobqueue::queue::{ConnectOptions, Error, NewJob, Queue, Redis, TlsProblem};
use support::redis::RedisServer;

/// `jobqueue stats --json` on `url` and `tag` with `args`, the connection's variables
/// from the environment cleared and `env` set.
fn stats_cli(url: &str, tag: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobqueue"));
    cmd.args(["stats", "--json", "--redis", url, "--tag", tag])
        .args(args);
    for var in [
        "JOBQUEUE_REDIS_URL",
        "JOBQUEUE_TLS_CERT",
        "JOBQUEUE_TLS_KEY",
        "JOBQUEUE_TLS_SERVER_NAME",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// A CA and a server certificate for 127.0.0.1, made with openssl.
fn make_certs(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=jobqueue test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    ]);
}

#[tokio::test]
async fn a_private_ca_is_trusted_only_when_given() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let file = |name: &str| certs.path().join(name).to_str().unwrap().to_string();
    let (server, ports) = RedisServer::start_with_ports(1, |ports| {
        support::certs::tls_args(
            ports[0],
            &file("server.crt"),
            &file("server.key"),
            &file("ca.crt"),
            "no",
        )
    });
    let _ = server.port;
    let tls_port = ports[0];
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let ca = std::fs::read(certs.path().join("ca.crt")).unwrap();

    let redis = Redis::connect(&ConnectOptions::new(&url).ca_cert(Some(ca.clone())))
        .await
        .unwrap();
    let queue = Queue::new(redis, "jq", "tls").unwrap();
    queue.enqueue(NewJob::new(&b"over tls"[..])).await.unwrap();
    let lease = queue.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!(lease.payload.as_ref(), b"over tls");
    assert!(queue.ack(&lease).await.unwrap());

    // Without the CA the server's certificate is not trusted, and the message says so.
    let err = Redis::connect(&ConnectOptions::new(&url))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Tls {
                problem: TlsProblem::UnknownServerCa,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("not signed by a CA this client trusts"),
        "{err}"
    );

    // A CA with a plain URL is a mistake worth naming.
    let err = Redis::connect(&ConnectOptions::new(server.url()).ca_cert(Some(ca)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidUrl { .. }) && err.to_string().contains("rediss://"),
        "{err}"
    );

    // The command line takes the CA from a file.
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_jobqueue"))
            .args(["stats", "--json", "--redis", &url, "--tag", "tls"])
            .args(extra)
            .env_remove("JOBQUEUE_REDIS_URL")
            .output()
            .unwrap()
    };
    let ok = run(&["--tls-ca", &file("ca.crt")]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        String::from_utf8_lossy(&ok.stdout).contains("\"acked\":1"),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    let untrusted = run(&[]);
    assert_eq!(
        untrusted.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&untrusted.stderr)
    );
    let missing = run(&["--tls-ca", "/nonexistent/ca.pem"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--tls-ca"));
}

/// Mutual TLS: a server with `tls-auth-clients yes` takes a client whose certificate its
/// CA signed, and refuses one with no certificate or one from another CA, each with a
/// message that says which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_takes_the_clients_its_ca_signed() {
    let dir = tempfile::tempdir().unwrap();
    let certs = support::certs::standard(dir.path());
    let (_server, tls_port) = support::certs::tls_server(&certs, "yes");
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let ca = certs.read("ca.crt");
    let with = |cert: &str| {
        ConnectOptions::new(&url)
            .ca_cert(Some(ca.clone()))
            .client_cert(
                Some(certs.read(&format!("{cert}.crt"))),
                Some(certs.read(&format!("{cert}.key"))),
            )
    };

    let redis = Redis::connect(&with("client")).await.unwrap();
    let queue = Queue::new(redis, "jq", "mtls").unwrap();
    queue.enqueue(NewJob::new(&b"mutual"[..])).await.unwrap();
    // The wait for jobs uses a connection of its own, with the same certificate.
    let lease = queue
        .consumer("w")
        .next_job(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a job");
    assert_eq!(lease.payload.as_ref(), b"mutual");
    assert!(queue.ack(&lease).await.unwrap());

    let none = Redis::connect(&ConnectOptions::new(&url).ca_cert(Some(ca.clone())))
        .await
        .unwrap_err();
    assert!(
        matches!(
            none,
            Error::Tls {
                problem: TlsProblem::ClientCertRequired,
                ..
            }
        ),
        "{none:?}"
    );
    assert!(
        none.to_string()
            .contains("the server requires a client certificate"),
        "{none}"
    );
    let stranger = Redis::connect(&with("stranger")).await.unwrap_err();
    assert!(
        matches!(
            stranger,
            Error::Tls {
                problem: TlsProblem::ClientCertRejected,
                ..
            }
        ),
        "{stranger:?}"
    );
    assert!(
        stranger
            .to_string()
            .contains("the server rejected the client certificate"),
        "{stranger}"
    );

    // This client refusing the server: no CA given, so the private CA is unknown.
    let untrusted = Redis::connect(&ConnectOptions::new(&url).client_cert(
        Some(certs.read("client.crt")),
        Some(certs.read("client.key")),
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(
            untrusted,
            Error::Tls {
                problem: TlsProblem::UnknownServerCa,
                ..
            }
        ),
        "{untrusted:?}"
    );

    // Half a pair, or a key that is not PEM, is refused before connecting.
    let half = ConnectOptions::new(&url).client_cert(Some(certs.read("client.crt")), None);
    let err = Redis::connect(&half).await.unwrap_err();
    assert!(err.to_string().contains("needs its private key"), "{err}");
    let not_pem = ConnectOptions::new(&url)
        .client_cert(Some(certs.read("client.crt")), Some(b"not a key".to_vec()));
    let err = Redis::connect(&not_pem).await.unwrap_err();
    assert!(err.to_string().contains("not a PEM private key"), "{err}");

    // The command line: files from flags or from the environment.
    let ca = certs.path("ca.crt");
    let cli = |args: &[&str], env: &[(&str, String)]| {
        let mut all = vec!["--tls-ca", ca.as_str()];
        all.extend_from_slice(args);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        stats_cli(&url, "mtls", &all, &env)
    };
    let ok = cli(
        &[
            "--tls-cert",
            &certs.path("client.crt"),
            "--tls-key",
            &certs.path("client.key"),
        ],
        &[],
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("\"acked\":1"));
    let from_env = cli(
        &[],
        &[
            ("JOBQUEUE_TLS_CERT", certs.path("client.crt")),
            ("JOBQUEUE_TLS_KEY", certs.path("client.key")),
        ],
    );
    assert!(
        from_env.status.success(),
        "{}",
        String::from_utf8_lossy(&from_env.stderr)
    );
}

/// A client certificate the client cannot present (X.509 v1) or a key that is not the
/// certificate's are this side's own files: named at start with exit 2 and the flag, not
/// blamed on the server's certificate or reported as an unreachable server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_client_pair_names_the_local_file() {
    let dir = tempfile::tempdir().unwrap();
    let certs = support::certs::standard(dir.path());
    certs.issue_v1("ca", "v1", "v1");
    let (_server, tls_port) = support::certs::tls_server(&certs, "yes");
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let ca = certs.path("ca.crt");
    let run = |cert: &str, key: &str| {
        let out = stats_cli(
            &url,
            "pair",
            &["--tls-ca", &ca, "--tls-cert", cert, "--tls-key", key],
            &[],
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    let (code, stderr) = run(&certs.path("v1.crt"), &certs.path("v1.key"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--tls-cert") && stderr.contains("X.509 v1"),
        "{stderr}"
    );
    assert!(!stderr.contains("server's certificate"), "{stderr}");

    let (code, stderr) = run(&certs.path("client.crt"), &certs.path("stranger.key"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--tls-key")
            && stderr.contains("not the private key of the client certificate"),
        "{stderr}"
    );
    assert!(!stderr.contains("KeyMismatch"), "{stderr}");

    // The library names the same two problems before connecting.
    let with = |cert: &str, key: &str| {
        ConnectOptions::new(&url)
            .ca_cert(Some(certs.read("ca.crt")))
            .client_cert(Some(certs.read(cert)), Some(certs.read(key)))
    };
    let err = Redis::connect(&with("v1.crt", "v1.key")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                what: "client certificate",
                ..
            }
        ),
        "{err:?}"
    );
    let err = Redis::connect(&with("client.crt", "stranger.key"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                what: "client key",
                ..
            }
        ),
        "{err:?}"
    );
    // A good pair still connects.
    Redis::connect(&with("client.crt", "client.key"))
        .await
        .unwrap();
}

/// A server certificate that does not name the URL's host is refused with that reason.
#[tokio::test]
async fn a_server_certificate_for_another_name_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let certs = support::certs::Certs::new(dir.path());
    certs.ca("ca").issue(
        "ca",
        "server",
        "redis.example",
        "subjectAltName=DNS:redis.example\nextendedKeyUsage=serverAuth\n",
    );
    let (_server, tls_port) = support::certs::tls_server(&certs, "no");
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let err = Redis::connect(&ConnectOptions::new(&url).ca_cert(Some(certs.read("ca.crt"))))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Tls {
                problem: TlsProblem::ServerNameMismatch,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("not valid for the host of the URL"),
        "{err}"
    );
}

/// A server whose certificate lists a name, not the address connected to: with that
/// name as the TLS server name the connection is verified for it (mutual TLS, the
/// waiting connection and a reconnect included); any other name, or none, is refused.
#[tokio::test]
async fn a_tls_server_name_stands_for_the_host_the_certificate_does_not_list() {
    let dir = tempfile::tempdir().unwrap();
    let certs = support::certs::Certs::new(dir.path());
    certs
        .ca("ca")
        .issue(
            "ca",
            "server",
            "redis.example",
            "subjectAltName=DNS:redis.example\nextendedKeyUsage=serverAuth\n",
        )
        .client("ca", "client");
    let (server, tls_port) = support::certs::tls_server(&certs, "yes");
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let options = |name: Option<&str>| {
        ConnectOptions::new(&url)
            .ca_cert(Some(certs.read("ca.crt")))
            .client_cert(
                Some(certs.read("client.crt")),
                Some(certs.read("client.key")),
            )
            .tls_server_name(name.map(str::to_string))
    };

    let redis = Redis::connect(&options(Some("redis.example")))
        .await
        .unwrap();
    let queue = Queue::new(redis, "jq", "named").unwrap();
    queue.enqueue(NewJob::new(&b"by name"[..])).await.unwrap();
    // The wait for jobs uses a connection of its own, verified for the same name.
    let lease = queue
        .consumer("w")
        .next_job(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a job");
    assert_eq!(lease.payload.as_ref(), b"by name");
    assert!(queue.ack(&lease).await.unwrap());

    // The server drops every client: the next command finds the connection gone (or
    // already sees it closed), and the one after connects again under the same name.
    let received = |server: &RedisServer| -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut server.conn())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let before = received(&server);
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut server.conn())
        .unwrap();
    assert!(killed >= 1, "the queue's connection was killed");
    let mut failures = Vec::new();
    let stats = loop {
        match queue.stats().await {
            Ok(stats) => break stats,
            Err(err) => {
                failures.push(err.to_string());
                assert!(failures.len() < 2, "no reconnect: {failures:?}");
            }
        }
    };
    assert_eq!(stats.acked, 1, "after {failures:?}");
    // Two connections made since: INFO's own, and the queue's new TLS connection.
    assert!(received(&server) >= before + 2, "the queue connected again");

    // The certificate does not list another name, nor the address without a name.
    for name in [Some("other.example"), None] {
        let err = Redis::connect(&options(name)).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Tls {
                    problem: TlsProblem::ServerNameMismatch,
                    ..
                }
            ),
            "{name:?}: {err:?}"
        );
    }

    // Where a server name cannot apply, the error says why, before connecting.
    let plain = ConnectOptions::new(server.url()).tls_server_name(Some("redis.example".into()));
    let err = Redis::connect(&plain).await.unwrap_err();
    assert!(matches!(err, Error::InvalidUrl { .. }), "{err:?}");
    assert!(err.to_string().contains("not rediss://"), "{err}");
    let err = Redis::connect(&options(Some("redis.example")).cluster(true))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Cluster mode"), "{err}");
    let err = Redis::connect(&options(Some("not a name")))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("not a DNS name or an IP address"),
        "{err}"
    );
    let err = Redis::connect(
        &ConnectOptions::sentinel(["127.0.0.1:1"], "mymaster")
            .tls_server_name(Some("redis.example".into())),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("through Sentinel"), "{err}");

    // The command line: --tls-server-name, or JOBQUEUE_TLS_SERVER_NAME.
    let (ca, cert, key) = (
        certs.path("ca.crt"),
        certs.path("client.crt"),
        certs.path("client.key"),
    );
    let cli = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
        all.extend_from_slice(args);
        stats_cli(&url, "named", &all, env)
    };
    for out in [
        cli(&["--tls-server-name", "redis.example"], &[]),
        cli(&[], &[("JOBQUEUE_TLS_SERVER_NAME", "redis.example")]),
    ] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("\"acked\":1"));
    }
    let refused = cli(&[], &[]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--tls-server-name"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// The harness behind every TLS test: a TLS port another process takes between the
/// pick and the bind costs the start one more attempt on fresh ports (a fixed TLS port
/// made all twenty attempts fail the same way, and the test with them).
#[test]
fn a_tls_port_taken_before_the_server_binds_it_costs_one_more_attempt() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let file = |name: &str| certs.path().join(name).to_str().unwrap().to_string();
    let taken = std::sync::Mutex::new(None);
    let attempts = std::sync::atomic::AtomicUsize::new(0);
    let (server, ports) = RedisServer::start_with_ports(1, |ports| {
        if attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            let listener = std::net::TcpListener::bind(("127.0.0.1", ports[0])).unwrap();
            *taken.lock().unwrap() = Some(listener);
        }
        support::certs::tls_args(
            ports[0],
            &file("server.crt"),
            &file("server.key"),
            &file("ca.crt"),
            "no",
        )
    });
    let taken = taken.lock().unwrap().take().unwrap();
    let held = taken.local_addr().unwrap().port();
    assert!(attempts.into_inner() >= 2, "the taken port was not retried");
    assert_ne!(
        ports[0], held,
        "the server was given the port someone holds"
    );
    let _: String = redis::cmd("PING").query(&mut server.conn()).unwrap();
}
