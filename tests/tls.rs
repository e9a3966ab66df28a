//! `rediss://` with a private CA: the client trusts exactly the CA it is given.

mod support;

use std::path::Path;
use std::process::Command;

use jobqueue::queue::{ConnectOptions, Error, NewJob, Queue, Redis};
use support::redis::{RedisServer, free_port};

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
    let tls_port = free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &file("server.crt"),
        "--tls-key-file",
        &file("server.key"),
        "--tls-ca-cert-file",
        &file("ca.crt"),
        "--tls-auth-clients",
        "no",
    ]);
    let _ = server.port;
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

    // Without the CA the server's certificate is not trusted.
    let err = Redis::connect(&ConnectOptions::new(&url))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");

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
