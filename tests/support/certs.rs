//! Certificates for TLS tests, made with openssl in a scratch directory: CAs, server
//! certificates for 127.0.0.1, client certificates, and a redis-server that asks for them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use super::redis::RedisServer;

fn openssl(dir: &Path, args: &[&str]) {
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
}

/// Files `NAME.crt` and `NAME.key` in one directory.
pub struct Certs {
    pub dir: PathBuf,
}

impl Certs {
    pub fn new(dir: &Path) -> Certs {
        Certs {
            dir: dir.to_path_buf(),
        }
    }

    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).to_str().unwrap().to_string()
    }

    pub fn read(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(file)).unwrap()
    }

    /// A self-signed CA: `NAME.crt`, `NAME.key`.
    pub fn ca(&self, name: &str) -> &Self {
        let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
        openssl(
            &self.dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                &format!("/CN=jobqueue test {name}"),
                "-keyout",
                &key,
                "-out",
                &crt,
            ],
        );
        self
    }

    /// A key `NAME.key` and a signing request `NAME.csr` for `cn`; the names of the
    /// certificate to make from it and of the request.
    fn request(&self, name: &str, cn: &str) -> (String, String) {
        let (crt, key, csr) = (
            format!("{name}.crt"),
            format!("{name}.key"),
            format!("{name}.csr"),
        );
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
        );
        (crt, csr)
    }

    /// A certificate `NAME.crt` (key `NAME.key`) for `cn`, signed by the CA `ca`, with
    /// the extensions `ext` (openssl's `-extfile` lines).
    pub fn issue(&self, ca: &str, name: &str, cn: &str, ext: &str) -> &Self {
        let (crt, csr) = self.request(name, cn);
        let extfile = format!("{name}.ext");
        std::fs::write(self.dir.join(&extfile), ext).unwrap();
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &format!("{ca}.crt"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                &extfile,
                "-out",
                &crt,
            ],
        );
        self
    }

    /// An X.509 v1 certificate `NAME.crt` (key `NAME.key`) for `cn`, signed by `ca`: what
    /// `openssl x509 -req` makes without `-extfile`.
    pub fn issue_v1(&self, ca: &str, name: &str, cn: &str) -> &Self {
        let (crt, csr) = self.request(name, cn);
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &format!("{ca}.crt"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-days",
                "1",
                "-out",
                &crt,
            ],
        );
        self
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self, ca: &str, name: &str) -> &Self {
        self.issue(
            ca,
            name,
            "127.0.0.1",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
    }

    /// A certificate for 127.0.0.1 that serves and signs in as a client both: a Redis
    /// node that replicates over TLS, or a Sentinel that monitors one.
    pub fn node(&self, ca: &str, name: &str) -> &Self {
        self.issue(
            ca,
            name,
            "127.0.0.1",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
    }

    /// A client certificate.
    pub fn client(&self, ca: &str, name: &str) -> &Self {
        self.issue(ca, name, name, "extendedKeyUsage=clientAuth\n")
    }
}

/// The usual set: CA `ca` with its server certificate `server` and client `client`, and
/// another CA `other` with a client `stranger` it signed.
pub fn standard(dir: &Path) -> Certs {
    let certs = Certs::new(dir);
    certs
        .ca("ca")
        .server("ca", "server")
        .client("ca", "client")
        .ca("other")
        .client("other", "stranger");
    certs
}

/// redis-server's arguments for a TLS port `port` with the certificate `cert` and key
/// `key`, trusting clients signed by `ca` as `auth_clients` says (`yes`, `optional`, `no`).
pub fn tls_args(port: u16, cert: &str, key: &str, ca: &str, auth_clients: &str) -> Vec<String> {
    [
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        cert,
        "--tls-key-file",
        key,
        "--tls-ca-cert-file",
        ca,
        "--tls-auth-clients",
        auth_clients,
    ]
    .map(String::from)
    .to_vec()
}

/// A redis-server with a TLS port that asks clients for a certificate signed by `ca`
/// (`tls-auth-clients yes`, or `optional`/`no`). Returns the server and the TLS port.
pub fn tls_server(certs: &Certs, auth_clients: &str) -> (RedisServer, u16) {
    let (server, ports) = RedisServer::start_with_ports(1, |ports| {
        tls_args(
            ports[0],
            &certs.path("server.crt"),
            &certs.path("server.key"),
            &certs.path("ca.crt"),
            auth_clients,
        )
    });
    (server, ports[0])
}
