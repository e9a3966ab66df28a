//! Connections to one Redis endpoint, standalone or Cluster, plain or TLS.
//!
//! A [`Redis`] is cheap to clone and is meant to be shared: the operator keeps one per
//! distinct endpoint for all the queues that use it. Commands go over one multiplexed
//! connection (a reconnecting `ConnectionManager`, or the cluster client, which
//! reconnects by itself). Blocking commands never use that shared connection: a
//! [`Redis::dedicated`] connection is made for them.
//!
//! No command is ever sent twice behind the caller's back: a script whose connection
//! broke after it was sent may have run, and running it again would change the answer
//! (enqueue's "already there" for a job it created, a second claim). The
//! `ConnectionManager` reconnects but never resends; the Cluster client is built with no
//! retries, and this module follows only the Cluster's refusals, which say the command
//! did not run: `MOVED` and `ASK` redirects (`ASKING` first), `TRYAGAIN`, `CLUSTERDOWN`,
//! `MASTERDOWN` and `LOADING`. What to do after a lost reply is the caller's decision
//! (claim repeats itself with its request id).

use std::sync::{Arc, Once};
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ErrorKind, Pipeline, RedisError,
    RedisFuture, RedisResult, ServerErrorKind, Value,
};

use super::error::{Error, Result, acl_denial, tls_problem};
use super::pinned::{PinnedResolver, PinnedTarget};
use super::sentinel::{NodeAuth, SentinelOptions, SentinelTarget};

/// How to reach Redis.
#[derive(Clone)]
pub struct ConnectOptions {
    /// `redis://[user:password@]host:port[/db]` or `rediss://` for TLS. For a Cluster,
    /// one or more seed nodes separated by commas.
    pub url: String,
    /// Talk the Cluster protocol (slot routing, MOVED/ASK).
    pub cluster: bool,
    /// Password given apart from the URL (e.g. from a Kubernetes Secret).
    pub password: Option<String>,
    /// How long one command may take. Scripts are bounded, but a busy server can be slow:
    /// redis-rs's 500 ms default is too short.
    pub response_timeout: Duration,
    /// How long establishing a connection may take.
    pub connect_timeout: Duration,
    /// PEM CA bundle that signs the server's certificate (`rediss://` only), for servers
    /// whose certificate the system trust store does not know.
    pub ca_cert: Option<Vec<u8>>,
    /// ACL user (Redis 6+) to authenticate as, given apart from the URL; the URL's own
    /// user (`redis://user:password@`) is used when this is `None`. Needs a password.
    pub username: Option<String>,
    /// PEM client certificate (chain) for mutual TLS (`rediss://` only), sent to a server
    /// that asks for one (`tls-auth-clients yes`). Needs [`ConnectOptions::client_key`].
    pub client_cert: Option<Vec<u8>>,
    /// PEM private key of [`ConnectOptions::client_cert`] (PKCS#8, PKCS#1 or SEC1).
    pub client_key: Option<Vec<u8>>,
    /// Find the primary through Sentinels (and follow its failovers) instead of `url`.
    pub sentinel: Option<SentinelOptions>,
    /// Check the server's certificate for this name (and send it as SNI) instead of the
    /// URL's host, which is still where to connect (`rediss://`, standalone only): for a
    /// server reached by an address its certificate does not list (an IP address, a
    /// Service alias, a port-forward).
    pub tls_server_name: Option<String>,
}

/// Never prints the password.
impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("url", &self.redacted_url())
            .field("cluster", &self.cluster)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("ca_cert", &self.ca_cert.as_ref().map(|c| c.len()))
            .field("username", &self.username)
            .field("client_cert", &self.client_cert.as_ref().map(|c| c.len()))
            .field("client_key", &self.client_key.as_ref().map(|_| "***"))
            .field("sentinel", &self.sentinel)
            .field("tls_server_name", &self.tls_server_name)
            .finish()
    }
}

impl ConnectOptions {
    pub fn new(url: impl Into<String>) -> Self {
        ConnectOptions {
            url: url.into(),
            cluster: false,
            password: None,
            response_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            ca_cert: None,
            username: None,
            client_cert: None,
            client_key: None,
            sentinel: None,
            tls_server_name: None,
        }
    }

    /// Check the server's certificate for `name` instead of the URL's host (see
    /// [`ConnectOptions::tls_server_name`]).
    pub fn tls_server_name(mut self, name: Option<String>) -> Self {
        self.tls_server_name = name.filter(|n| !n.trim().is_empty());
        self
    }

    /// Authenticate as this ACL user (with the password of the URL or of
    /// [`ConnectOptions::password`]).
    pub fn username(mut self, username: Option<String>) -> Self {
        self.username = username;
        self
    }

    /// Present this PEM certificate and key to the server (mutual TLS).
    pub fn client_cert(mut self, cert: Option<Vec<u8>>, key: Option<Vec<u8>>) -> Self {
        self.client_cert = cert;
        self.client_key = key;
        self
    }

    /// The ACL user the connection authenticates as: [`ConnectOptions::username`], else
    /// the first URL's user, else `default`. Never a password.
    pub fn user(&self) -> String {
        if let Some(user) = self.username.as_deref().filter(|u| !u.is_empty()) {
            return user.to_string();
        }
        let first = split_urls(&self.url).into_iter().next().unwrap_or_default();
        match split_userinfo(first).1 {
            // Only `user:password@` names a user; `password@` is the password alone.
            Some(userinfo) => match userinfo.split_once(':') {
                Some((user, _)) if !user.is_empty() => user.to_string(),
                _ => "default".to_string(),
            },
            None => "default".to_string(),
        }
    }

    /// Reach the primary that the Sentinels at `addrs` (`host:port`) name for
    /// `master_name`, and follow it through failovers. The password of the Redis nodes is
    /// [`ConnectOptions::password`]; the Sentinels' own is [`ConnectOptions::sentinel_password`].
    pub fn sentinel(
        addrs: impl IntoIterator<Item = impl Into<String>>,
        master_name: impl Into<String>,
    ) -> Self {
        let sentinel = SentinelOptions::new(addrs, master_name);
        let mut options = ConnectOptions::new(sentinel.endpoint());
        options.sentinel = Some(sentinel);
        options
    }

    /// The Sentinels' own password (with [`ConnectOptions::sentinel`]).
    pub fn sentinel_password(mut self, password: Option<String>) -> Self {
        if let Some(sentinel) = &mut self.sentinel {
            sentinel.password = password;
        }
        self
    }

    /// TLS to the data nodes the Sentinels name (with [`ConnectOptions::sentinel`]);
    /// implied by a CA or a client certificate.
    pub fn sentinel_tls(mut self, tls: bool) -> Self {
        if let Some(sentinel) = &mut self.sentinel {
            sentinel.tls = tls;
        }
        self
    }

    /// How long a command waits for a new primary after losing the old one (with
    /// [`ConnectOptions::sentinel`]; default 30 s).
    pub fn failover_wait(mut self, wait: Duration) -> Self {
        if let Some(sentinel) = &mut self.sentinel {
            sentinel.failover_wait = wait;
        }
        self
    }

    pub fn ca_cert(mut self, pem: Option<Vec<u8>>) -> Self {
        self.ca_cert = pem;
        self
    }

    pub fn cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    pub fn password(mut self, password: Option<String>) -> Self {
        self.password = password;
        self
    }

    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The URL with any password replaced by `***`, safe for logs, events and status.
    /// Without cluster mode the whole text is one URL, whatever its password holds
    /// (commas included); a Cluster's list is split as [`redact_url`] does.
    pub fn redacted_url(&self) -> String {
        if self.cluster {
            redact_url(&self.url)
        } else {
            redact_one(self.url.trim())
        }
    }
}

/// Replace the password of every URL in a comma-separated list with `***`. The
/// password is everything between the scheme's `://` (or the user's `:`) and the LAST
/// `@` of its URL, so one holding `/`, `?`, `#`, `@` or `:` unescaped is masked whole;
/// a comma starts a new URL only where a scheme (`redis://`) follows it (see
/// [`split_urls`]).
pub fn redact_url(url: &str) -> String {
    split_urls(url)
        .into_iter()
        .map(redact_one)
        .collect::<Vec<_>>()
        .join(",")
}

/// One URL with its password replaced by `***` (`scheme://user:***@host…`, or
/// `scheme://***@host…` for the password-only form).
fn redact_one(one: &str) -> String {
    let (scheme, userinfo, host) = split_userinfo(one);
    match (scheme, userinfo) {
        (Some(scheme), Some(userinfo)) => {
            let masked = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                // `redis://password@host` form: the whole userinfo is secret.
                None => "***".to_string(),
            };
            format!("{scheme}://{masked}@{host}")
        }
        _ => one.to_string(),
    }
}

/// A URL's scheme, userinfo (everything before its last `@`) and the rest (host, port,
/// path, query). The host part of a Redis URL holds no `@`, so the last one ends the
/// userinfo even when an unescaped password holds `/`, `?` or `@`.
fn split_userinfo(one: &str) -> (Option<&str>, Option<&str>, &str) {
    let Some((scheme, rest)) = one.split_once("://") else {
        return (None, None, one);
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => (Some(scheme), Some(userinfo), host),
        None => (Some(scheme), None, rest),
    }
}

/// A comma-separated list of URLs, split where a comma is followed by a scheme
/// (`redis://`, `rediss://`, any `name://`); a piece that cannot stand alone (it has
/// no `@` yet its authority is not `host[:port]`, as in `redis://:pass,word@host`) is
/// joined with the next, so a password holding a comma stays in its URL.
pub(crate) fn split_urls(list: &str) -> Vec<&str> {
    let starts_url = |text: &str| {
        text.trim_start()
            .split_once("://")
            .is_some_and(|(scheme, _)| {
                !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            })
    };
    let mut cuts = vec![0];
    for (i, _) in list.match_indices(',') {
        if starts_url(&list[i + 1..]) {
            cuts.push(i + 1);
        }
    }
    cuts.push(list.len() + 1);
    let mut out = Vec::new();
    let mut start = 0;
    for w in cuts.windows(2) {
        let end = w[1] - 1;
        let piece = &list[start..end];
        let last = w[1] > list.len();
        if !last && !stands_alone(piece) {
            continue;
        }
        out.push(piece.trim());
        start = w[1];
    }
    out.retain(|u| !u.is_empty());
    out
}

/// A URL without userinfo whose authority is `host[:port]`, or any URL with a `@`.
fn stands_alone(piece: &str) -> bool {
    match split_userinfo(piece.trim()) {
        (Some(_), Some(_), _) => true,
        (Some(_), None, rest) => {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            match authority.rsplit_once(':') {
                Some((_, port)) if !authority.ends_with(']') => {
                    port.chars().all(|c| c.is_ascii_digit())
                }
                _ => true,
            }
        }
        (None, _, _) => true,
    }
}

/// A TLS server name that can stand for the URL's host: `rediss://`, one standalone
/// server, a DNS name or an IP address.
fn check_server_name(options: &ConnectOptions, name: &str) -> std::result::Result<String, String> {
    let name = name.trim();
    if options.cluster {
        return Err(format!(
            "a TLS server name ({name:?}) cannot be given in Cluster mode: each node is \
             checked for the address it announces (give the nodes names their certificates \
             list: cluster-announce-hostname)"
        ));
    }
    if !options.url.trim().starts_with("rediss://") {
        return Err(format!(
            "a TLS server name ({name:?}) was given but the URL is not rediss:// (TLS)"
        ));
    }
    match rustls::pki_types::ServerName::try_from(name) {
        Ok(_) => Ok(name.to_string()),
        Err(_) => Err(format!(
            "the TLS server name {name:?} is not a DNS name or an IP address"
        )),
    }
}

fn tls_certificates(options: &ConnectOptions) -> Option<redis::TlsCertificates> {
    let client_tls = match (&options.client_cert, &options.client_key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.clone(),
        }),
        _ => None,
    };
    if options.ca_cert.is_none() && client_tls.is_none() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls,
        root_cert: options.ca_cert.clone(),
    })
}

/// Check the TLS material and the user before connecting, so that a missing half or a
/// file that is not PEM is named instead of failing the handshake later.
/// `tls`: the connection speaks TLS (`rediss://`, or TLS to the nodes a Sentinel names).
fn check_credentials(options: &ConnectOptions, endpoint: &str, tls: bool) -> Result<()> {
    let invalid = |what: &'static str, reason: String| Error::InvalidArgument { what, reason };
    match (&options.client_cert, &options.client_key) {
        (Some(_), None) => {
            return Err(invalid(
                "client certificate",
                "a client certificate needs its private key".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "client key",
                "a client key needs its certificate".into(),
            ));
        }
        (Some(cert), Some(key)) => {
            if !tls {
                return Err(Error::InvalidUrl {
                    url: endpoint.to_string(),
                    reason: "a client certificate was given but the URL is not rediss:// (TLS)"
                        .into(),
                });
            }
            if pem_blocks(cert, "CERTIFICATE") == 0 {
                return Err(invalid(
                    "client certificate",
                    "not a PEM certificate (no -----BEGIN CERTIFICATE----- line)".into(),
                ));
            }
            if pem_blocks(key, "PRIVATE KEY") == 0 {
                return Err(invalid(
                    "client key",
                    "not a PEM private key (no -----BEGIN ... PRIVATE KEY----- line)".into(),
                ));
            }
            match check_client_pair(cert, key) {
                Ok(()) => {}
                Err(ClientPairProblem::Cert(reason)) => {
                    return Err(invalid("client certificate", reason));
                }
                Err(ClientPairProblem::Key(reason)) => return Err(invalid("client key", reason)),
            }
        }
        (None, None) => {}
    }
    if options.username.as_deref().is_some_and(|u| !u.is_empty())
        && options.password.is_none()
        && !url_has_password(&options.url)
    {
        return Err(invalid(
            "username",
            format!(
                "user {:?} was given without a password (Redis authenticates a user with one)",
                options.user()
            ),
        ));
    }
    Ok(())
}

/// What is wrong with a client certificate and key pair, found without connecting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientPairProblem {
    /// The certificate file cannot be presented (not parsed, or an X.509 v1 certificate).
    Cert(String),
    /// The key file cannot be used, or is not the key of the certificate.
    Key(String),
}

/// Check a PEM client certificate and key as rustls will use them: the first certificate
/// must parse as an X.509 v3 end-entity certificate, the key must load, and the key must be
/// the certificate's. A bad pair is the client's own files, so it is named before
/// connecting rather than blamed on the server or the network.
pub fn check_client_pair(cert: &[u8], key: &[u8]) -> std::result::Result<(), ClientPairProblem> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| {
            ClientPairProblem::Cert(format!("the PEM certificate does not parse ({e})"))
        })?;
    let Some(first) = chain.first() else {
        return Err(ClientPairProblem::Cert(
            "no PEM certificate in the file".into(),
        ));
    };
    if x509_v1(first) {
        return Err(ClientPairProblem::Cert(
            "an X.509 v1 certificate, which TLS clients cannot present (openssl x509 -req makes \
             one without -extfile); issue it again as v3, e.g. with -extfile holding \
             \"extendedKeyUsage=clientAuth\""
                .into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| ClientPairProblem::Key(format!("the PEM private key does not parse ({e})")))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = rustls::crypto::ring::default_provider();
    match rustls::sign::CertifiedKey::from_der(chain, key, &provider) {
        Ok(_) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(ClientPairProblem::Key(
            "not the private key of the client certificate (--tls-cert); give the key the \
             certificate was issued for"
                .into(),
        )),
        Err(rustls::Error::InvalidCertificate(e)) => Err(ClientPairProblem::Cert(format!(
            "the certificate cannot be presented ({e:?})"
        ))),
        Err(rustls::Error::General(e)) => Err(ClientPairProblem::Key(format!(
            "the private key cannot be used ({e})"
        ))),
        Err(e) => Err(ClientPairProblem::Key(format!(
            "the certificate and key cannot be used together ({e})"
        ))),
    }
}

/// An X.509 certificate without the `[0] EXPLICIT version` field of its TBSCertificate:
/// version 1. `der`: Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version ... } }.
fn x509_v1(der: &[u8]) -> bool {
    /// The content after one DER tag and length.
    fn enter(der: &[u8]) -> Option<&[u8]> {
        let len = *der.get(1)?;
        if len < 0x80 {
            return der.get(2..);
        }
        der.get(2 + usize::from(len & 0x7f)..)
    }
    if der.first() != Some(&0x30) {
        return false;
    }
    let Some(tbs) = enter(der) else { return false };
    if tbs.first() != Some(&0x30) {
        return false;
    }
    enter(tbs)
        .and_then(|t| t.first())
        .is_some_and(|tag| *tag != 0xa0)
}

/// How many PEM blocks whose label ends with `label` (`CERTIFICATE`, `PRIVATE KEY`, which
/// `RSA PRIVATE KEY` and `EC PRIVATE KEY` end with too) the bytes hold.
pub fn pem_blocks(pem: &[u8], label: &str) -> usize {
    String::from_utf8_lossy(pem)
        .lines()
        .filter(|l| {
            l.trim()
                .strip_prefix("-----BEGIN ")
                .and_then(|l| l.strip_suffix("-----"))
                .is_some_and(|l| l.ends_with(label))
        })
        .count()
}

/// Whether a Redis URL (the first, for a Cluster's list) carries a password
/// (`redis://:PW@host`, `redis://user:PW@host`).
pub(crate) fn url_has_password(url: &str) -> bool {
    let first = split_urls(url).into_iter().next().unwrap_or_default();
    split_userinfo(first)
        .1
        .and_then(|userinfo| userinfo.split_once(':'))
        .is_some_and(|(_, password)| !password.is_empty())
}

/// Say what is wrong with a URL redis-rs refused, without echoing its secrets.
fn describe_url_error(url: &str, err: &RedisError) -> String {
    // Only what follows the userinfo is ever quoted: the password is before the last `@`.
    let (_, userinfo, rest) = split_userinfo(url);
    if userinfo.is_some_and(|u| u.contains(['/', '?', '#'])) {
        return "the password (or user) holds '/', '?' or '#', which a URL needs \
                percent-encoded (%2F, %3F, %23): encode it, or give the password in \
                JOBQUEUE_REDIS_PASSWORD or --redis-password-file instead"
            .to_string();
    }
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority;
    if let Some((_, port)) = host_port.rsplit_once(':')
        && !port.is_empty()
        && !host_port.ends_with(']')
        && port.parse::<u16>().is_err()
    {
        return format!("port {port:?} is not a number from 0 to 65535");
    }
    if host_port.is_empty() {
        return "no host given".to_string();
    }
    let path = rest[authority.len()..]
        .split('?')
        .next()
        .unwrap_or_default();
    let db = path.trim_start_matches('/');
    if !db.is_empty() && db.parse::<u16>().is_err() {
        return format!("the database {db:?} is not a number (write e.g. redis://host:6379/0)");
    }
    match err.detail() {
        Some(detail) => format!("cannot parse ({detail})"),
        None => format!("cannot parse ({})", err.category()),
    }
}

fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Several crates may try; the first provider installed wins, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[derive(Clone)]
enum Target {
    Single {
        client: Arc<Client>,
        conn: ConnectionManager,
    },
    Cluster {
        client: Arc<ClusterClient>,
        conn: ClusterConnection,
    },
    Sentinel(Arc<SentinelTarget>),
    /// Standalone, TLS verified under a server name other than the URL's host.
    Pinned {
        target: Arc<PinnedTarget>,
        db: i64,
    },
}

/// A shared handle on one Redis endpoint.
#[derive(Clone)]
pub struct Redis {
    target: Target,
    endpoint: String,
    response_timeout: Duration,
    /// The ACL user the connections authenticate as (`default` without one).
    user: String,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("endpoint", &self.endpoint)
            .field("cluster", &self.is_cluster())
            .finish()
    }
}

impl Redis {
    /// Connect, failing fast with a clear error when the endpoint is unreachable,
    /// the URL is malformed or the credentials are refused.
    pub async fn connect(options: &ConnectOptions) -> Result<Redis> {
        install_crypto_provider();
        if let Some(sentinel) = &options.sentinel {
            let endpoint = sentinel.endpoint();
            if options.cluster {
                return Err(Error::InvalidUrl {
                    url: endpoint,
                    reason: "Cluster mode is not supported through Sentinel (a Cluster \
                             fails over by itself: give its seed nodes instead)"
                        .into(),
                });
            }
            if options.tls_server_name.is_some() {
                return Err(Error::InvalidUrl {
                    url: endpoint,
                    reason: "a TLS server name cannot be given through Sentinel: each data \
                             node is checked for the address the Sentinels name (make the \
                             nodes announce names their certificates list: \
                             replica-announce-ip, and announce-hostnames on the Sentinels)"
                        .into(),
                });
            }
            // A CA or a client certificate means TLS to the data nodes.
            let tls = sentinel.tls || options.ca_cert.is_some() || options.client_cert.is_some();
            check_credentials(options, &endpoint, tls)?;
            let node = NodeAuth {
                username: options.username.clone().filter(|u| !u.is_empty()),
                password: options.password.clone(),
                tls,
                certs: tls_certificates(options),
            };
            let target = SentinelTarget::connect(
                sentinel,
                node,
                options.response_timeout,
                options.connect_timeout,
            )
            .await?;
            let target = Arc::new(target);
            SentinelTarget::watch(&target);
            return Ok(Redis {
                endpoint: target.endpoint().to_string(),
                target: Target::Sentinel(target),
                response_timeout: options.response_timeout,
                user: options.user(),
            });
        }
        let endpoint = options.redacted_url();
        let invalid = |reason: String| Error::InvalidUrl {
            url: endpoint.clone(),
            reason,
        };
        if options.ca_cert.is_some() && !options.url.contains("rediss://") {
            return Err(invalid(
                "a CA certificate was given but the URL is not rediss:// (TLS)".into(),
            ));
        }
        check_credentials(options, &endpoint, options.url.contains("rediss://"))?;
        let server_name = match &options.tls_server_name {
            Some(name) => Some(check_server_name(options, name).map_err(&invalid)?),
            None => None,
        };
        let user = options.user();
        let urls: Vec<&str> = split_urls(&options.url);
        if urls.is_empty() {
            return Err(invalid("no URL given".into()));
        }
        let mut infos = Vec::with_capacity(urls.len());
        for url in &urls {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(invalid(
                    "the scheme must be redis:// or rediss:// (TLS)".into(),
                ));
            }
            let mut info = redis::IntoConnectionInfo::into_connection_info(*url)
                .map_err(|e| invalid(describe_url_error(url, &e)))?;
            if let Some(password) = &options.password {
                let settings = info.redis_settings().clone().set_password(password.clone());
                info = info.set_redis_settings(settings);
            }
            if let Some(username) = options.username.as_deref().filter(|u| !u.is_empty()) {
                let settings = info.redis_settings().clone().set_username(username);
                info = info.set_redis_settings(settings);
            }
            infos.push(info);
        }
        let connect_err = |source: RedisError| classify_connect(&endpoint, &user, source);
        let target = if options.cluster {
            let mut builder = ClusterClient::builder(infos)
                .connection_timeout(options.connect_timeout)
                .response_timeout(options.response_timeout)
                // Nothing is resent by the client: see the module comment.
                .retries(0);
            if let Some(certs) = tls_certificates(options) {
                builder = builder.certs(certs);
            }
            let client = builder.build().map_err(|e| invalid(e.to_string()))?;
            let conn =
                tokio::time::timeout(options.connect_timeout * 2, client.get_async_connection())
                    .await
                    .map_err(|_| Error::Unavailable(format!("{endpoint}: timed out connecting")))?
                    .map_err(connect_err)?;
            Target::Cluster {
                client: Arc::new(client),
                conn,
            }
        } else {
            if infos.len() > 1 {
                return Err(invalid(
                    "several URLs are only allowed with cluster mode".into(),
                ));
            }
            let mut info = infos.remove(0);
            let pinned = match &server_name {
                Some(name) => {
                    let (host, addr) = match info.addr().clone() {
                        ConnectionAddr::TcpTls {
                            host,
                            port,
                            insecure,
                            tls_params,
                        } => (
                            host,
                            ConnectionAddr::TcpTls {
                                host: name.clone(),
                                port,
                                insecure,
                                tls_params,
                            },
                        ),
                        _ => return Err(invalid("a TLS server name needs rediss://".into())),
                    };
                    info = info.set_addr(addr);
                    Some(PinnedResolver { host })
                }
                None => None,
            };
            let db = info.redis_settings().db();
            let client = match tls_certificates(options) {
                Some(certs) => Client::build_with_tls(info, certs),
                None => Client::open(info),
            }
            .map_err(|e| invalid(e.to_string()))?;
            if let Some(resolver) = pinned {
                let config = AsyncConnectionConfig::new()
                    .set_response_timeout(Some(options.response_timeout))
                    .set_connection_timeout(Some(options.connect_timeout));
                let target = Arc::new(PinnedTarget::new(client, resolver, config));
                let mut redis = Redis {
                    target: Target::Pinned { target, db },
                    endpoint,
                    response_timeout: options.response_timeout,
                    user,
                };
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut redis).await;
                pong.map_err(|e| classify_connect(&redis.endpoint, &redis.user, e))?;
                return Ok(redis);
            }
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(options.response_timeout))
                .set_connection_timeout(Some(options.connect_timeout))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_secs(2));
            let conn = ConnectionManager::new_with_config(client.clone(), config)
                .await
                .map_err(connect_err)?;
            Target::Single {
                client: Arc::new(client),
                conn,
            }
        };
        let mut redis = Redis {
            target,
            endpoint,
            response_timeout: options.response_timeout,
            user,
        };
        // Prove the connection works (and that auth was accepted) before handing it out.
        let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut redis).await;
        pong.map_err(|e| classify_connect(&redis.endpoint, &redis.user, e))?;
        Ok(redis)
    }

    /// The endpoint with the password redacted.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The ACL user the connections authenticate as (`default` without one).
    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster { .. })
    }

    /// Commands go to the primary the Sentinels name, found again after a failover
    /// (a `READONLY` reply included).
    pub fn is_sentinel(&self) -> bool {
        matches!(self.target, Target::Sentinel(_))
    }

    /// A connection of its own, for blocking commands (BLPOP) that must not stall the
    /// shared multiplexed connection. `block` is the longest the caller will block.
    pub async fn dedicated(&self, block: Duration) -> Result<Dedicated> {
        let timeout = self.response_timeout + block;
        match &self.target {
            Target::Single { client, .. } => {
                let config = AsyncConnectionConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_connection_timeout(Some(self.response_timeout));
                let conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(|e| classify_connect(&self.endpoint, &self.user, e))?;
                Ok(Dedicated::Single(conn))
            }
            Target::Pinned { target, .. } => {
                let config = AsyncConnectionConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_connection_timeout(Some(self.response_timeout));
                let conn = target
                    .dedicated(config)
                    .await
                    .map_err(|e| classify_connect(&self.endpoint, &self.user, e))?;
                Ok(Dedicated::Single(conn))
            }
            Target::Cluster { client, .. } => {
                let conn = client
                    .get_async_connection()
                    .await
                    .map_err(|e| classify_connect(&self.endpoint, &self.user, e))?;
                Ok(Dedicated::Cluster(conn))
            }
            Target::Sentinel(sentinel) => {
                let config = AsyncConnectionConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_connection_timeout(Some(self.response_timeout));
                let conn = sentinel
                    .dedicated(&config)
                    .await
                    .map_err(|e| classify_connect(&self.endpoint, &self.user, e))?;
                Ok(Dedicated::Single(conn))
            }
        }
    }
}

impl Redis {
    /// Send `cmd` to the node that holds `key`'s slot (any command, keyless ones such as
    /// `TIME` included); on a standalone server, to the server.
    pub async fn query_on_node_of(&self, key: &str, cmd: Cmd) -> RedisResult<Value> {
        match &self.target {
            Target::Single { conn, .. } => cmd.query_async(&mut conn.clone()).await,
            Target::Sentinel(sentinel) => sentinel.command(&cmd).await,
            Target::Pinned { target, .. } => target.command(&cmd).await,
            Target::Cluster { conn, .. } => {
                let slot = slot_of(key.as_bytes());
                let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
                let mut conn = conn.clone();
                let mut result = conn
                    .route_command(cmd.clone(), RoutingInfo::SingleNode(route))
                    .await;
                let mut refusals = Refusals::new();
                loop {
                    result = match result {
                        Err(err) if refused(&err) && refusals.left() => {
                            resend(&mut conn, &cmd, &err, &mut refusals).await
                        }
                        done => return done,
                    };
                }
            }
        }
    }
}

/// How long one command keeps following Cluster refusals. While a slot migrates, a
/// script whose declared keys are split between the two nodes (or absent on the
/// importing one) gets TRYAGAIN until `SETSLOT … NODE` ends the migration; a reshard
/// moves a slot in well under this.
const REFUSALS_FOR: Duration = Duration::from_secs(3);
/// The wait before sending again after TRYAGAIN and the like (doubled up to 100 ms).
const REFUSAL_WAIT: Duration = Duration::from_millis(10);

/// Follows the refusals of one command: true while it may send again.
struct Refusals {
    until: tokio::time::Instant,
    wait: Duration,
}

impl Refusals {
    fn new() -> Refusals {
        Refusals {
            until: tokio::time::Instant::now() + REFUSALS_FOR,
            wait: REFUSAL_WAIT,
        }
    }

    fn left(&self) -> bool {
        tokio::time::Instant::now() < self.until
    }

    async fn pause(&mut self) {
        tokio::time::sleep(self.wait).await;
        self.wait = (self.wait * 2).min(Duration::from_millis(100));
    }
}

/// The Cluster said the command did not run and where (or when) to send it again.
fn refused(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading
        )
    )
}

/// The node a redirect names, as a route.
fn redirect_route(err: &RedisError) -> Option<SingleNodeRoutingInfo> {
    let (addr, _slot) = err.redirect_node()?;
    let (host, port) = addr.rsplit_once(':')?;
    Some(SingleNodeRoutingInfo::ByAddress {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: port.parse().ok()?,
    })
}

/// Send `cmd` again after the refusal `err`: to the node a MOVED names, to the node an
/// ASK names preceded by `ASKING`, or after a short wait (TRYAGAIN while a slot's keys
/// are split between two nodes, CLUSTERDOWN, ...; the slot map is refreshed meanwhile).
async fn resend(
    conn: &mut ClusterConnection,
    cmd: &Cmd,
    err: &RedisError,
    refusals: &mut Refusals,
) -> RedisResult<Value> {
    match (err.kind(), redirect_route(err)) {
        (ErrorKind::Server(ServerErrorKind::Ask), Some(node)) => {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING").ignore().add_command(cmd.clone());
            let mut replies = conn.route_pipeline(pipe, 1, 1, node).await?;
            match replies.pop() {
                Some(Value::ServerError(e)) => Err(e.into()),
                Some(v) => Ok(v),
                None => Err((ErrorKind::Client, "no reply after ASKING").into()),
            }
        }
        (ErrorKind::Server(ServerErrorKind::Moved), Some(node)) => {
            conn.route_command(cmd.clone(), RoutingInfo::SingleNode(node))
                .await
        }
        _ => {
            refusals.pause().await;
            conn.req_packed_command(cmd).await
        }
    }
}

/// A command on the Cluster: sent once, its refusals followed (see the module comment).
async fn cluster_command(mut conn: ClusterConnection, cmd: &Cmd) -> RedisResult<Value> {
    let mut result = conn.req_packed_command(cmd).await;
    let mut refusals = Refusals::new();
    loop {
        result = match result {
            Err(err) if refused(&err) && refusals.left() => {
                resend(&mut conn, cmd, &err, &mut refusals).await
            }
            done => return done,
        };
    }
}

/// A pipeline on the Cluster: its commands all name the queue's slot, so a refusal
/// refuses the whole pipeline; it is sent again as a command is.
async fn cluster_pipeline(
    mut conn: ClusterConnection,
    pipeline: &Pipeline,
    offset: usize,
    count: usize,
) -> RedisResult<Vec<Value>> {
    let mut result = conn.req_packed_commands(pipeline, offset, count).await;
    let mut refusals = Refusals::new();
    loop {
        let err = match result {
            Err(err) if refused(&err) && refusals.left() => err,
            done => return done,
        };
        result = match (err.kind(), redirect_route(&err)) {
            (ErrorKind::Server(ServerErrorKind::Ask), Some(node)) => {
                let mut asking = redis::pipe();
                asking.cmd("ASKING");
                for cmd in pipeline.cmd_iter() {
                    asking.add_command(cmd.clone());
                }
                conn.route_pipeline(asking, offset + 1, count, node).await
            }
            (ErrorKind::Server(ServerErrorKind::Moved), Some(node)) => {
                conn.route_pipeline(pipeline.clone(), offset, count, node)
                    .await
            }
            _ => {
                refusals.pause().await;
                conn.req_packed_commands(pipeline, offset, count).await
            }
        };
    }
}

/// The Cluster slot of a key (CRC16 of its hash tag, or of the key).
fn slot_of(key: &[u8]) -> u16 {
    let tagged = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16_xmodem(tagged) % 16384
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= (byte as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn classify_connect(endpoint: &str, user: &str, source: RedisError) -> Error {
    if source.kind() == ErrorKind::AuthenticationFailed
        || matches!(source.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        let detail = source.detail().unwrap_or("invalid username-password pair");
        return Error::Auth {
            endpoint: endpoint.to_string(),
            detail: format!("user {user:?}: {detail}"),
        };
    }
    if let Some(denied) = acl_denial(&source) {
        return Error::Denied {
            on: endpoint.to_string(),
            op: "connect",
            user: user.to_string(),
            detail: denied,
        };
    }
    if let Some(problem) = tls_problem(&source) {
        return Error::Tls {
            endpoint: endpoint.to_string(),
            problem,
            source,
        };
    }
    Error::Connect {
        endpoint: endpoint.to_string(),
        hint: connect_hint(endpoint, &source).to_string(),
        source,
    }
}

/// The likely cause of a failed connection, said after the error itself.
fn connect_hint(endpoint: &str, err: &RedisError) -> &'static str {
    let unparsable = matches!(
        err.kind(),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType
    ) || err.to_string().contains("Parse error");
    if endpoint.starts_with("rediss://") && (unparsable || err.is_timeout() || err.is_io_error()) {
        return " (is the server using TLS? rediss:// needs a port that speaks TLS; use \
                 redis:// for a plain one)";
    }
    if unparsable {
        return " (the service on that port does not answer as Redis: check the host and port)";
    }
    if err.is_timeout() {
        return " (is the host reachable, and is it Redis on that port?)";
    }
    ""
}

impl ConnectionLike for Redis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.target {
            Target::Single { conn, .. } => conn.req_packed_command(cmd),
            Target::Cluster { conn, .. } => Box::pin(cluster_command(conn.clone(), cmd)),
            Target::Sentinel(sentinel) => {
                let sentinel = sentinel.clone();
                Box::pin(async move { sentinel.command(cmd).await })
            }
            Target::Pinned { target, .. } => {
                let target = target.clone();
                Box::pin(async move { target.command(cmd).await })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.target {
            Target::Single { conn, .. } => conn.req_packed_commands(pipeline, offset, count),
            Target::Cluster { conn, .. } => {
                Box::pin(cluster_pipeline(conn.clone(), pipeline, offset, count))
            }
            Target::Sentinel(sentinel) => {
                let sentinel = sentinel.clone();
                Box::pin(async move { sentinel.pipeline(pipeline, offset, count).await })
            }
            Target::Pinned { target, .. } => {
                let target = target.clone();
                Box::pin(async move { target.pipeline(pipeline, offset, count).await })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match &self.target {
            Target::Single { conn, .. } => conn.get_db(),
            Target::Cluster { conn, .. } => conn.get_db(),
            Target::Sentinel(_) => 0,
            Target::Pinned { db, .. } => *db,
        }
    }
}

/// A connection used by one task only, for blocking commands.
pub enum Dedicated {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Dedicated {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Dedicated::Single(conn) => conn.req_packed_command(cmd),
            Dedicated::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Dedicated::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Dedicated::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Dedicated::Single(conn) => conn.get_db(),
            Dedicated::Cluster(conn) => conn.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://user:s3cret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(
            redact_url("rediss://:s3cret@host:6380"),
            "rediss://:***@host:6380"
        );
        assert_eq!(redact_url("redis://s3cret@host"), "redis://***@host");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(
            redact_url("redis://a:p1@h1:1,redis://a:p2@h2:2"),
            "redis://a:***@h1:1,redis://a:***@h2:2"
        );
        assert!(!redact_url("redis://u:p@ss@h").contains("p@ss"));
        // Unescaped `/`, `?`, `#`, `,` in a password: masked whole, the host kept.
        for url in [
            "redis://:se/cret@127.0.0.1:6379",
            "redis://:se?cret@127.0.0.1:6379",
            "redis://:se#cret@127.0.0.1:6379",
            "redis://:se,cret@127.0.0.1:6379",
            "redis://:se,redis://cret@127.0.0.1:6379",
        ] {
            assert_eq!(redact_url(url), "redis://:***@127.0.0.1:6379", "{url}");
            assert_eq!(
                ConnectOptions::new(url).redacted_url(),
                "redis://:***@127.0.0.1:6379"
            );
            assert!(url_has_password(url), "{url}");
        }
        assert_eq!(
            redact_url("redis://h1:1,redis://a:p/w@h2:2"),
            "redis://h1:1,redis://a:***@h2:2"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 2000, failure_persistence: None, ..Default::default()
        })]

        /// Any password, of any characters, unescaped: the redacted URL is the URL with
        /// `***` in its place, and the error of a URL redis-rs refuses never quotes it.
        #[test]
        fn any_password_is_redacted(password in proptest::prop_oneof![
            proptest::arbitrary::any::<String>(),
            r"[/?#@:,%\\a-z]{0,16}",
        ]) {
            for (url, want) in [
                (format!("redis://:{password}@db.example:6379/0"), "redis://:***@db.example:6379/0"),
                (format!("rediss://user:{password}@10.0.0.1:6380"), "rediss://user:***@10.0.0.1:6380"),
            ] {
                let options = ConnectOptions::new(url.clone());
                proptest::prop_assert_eq!(options.redacted_url(), want);
                if !password.contains("://") {
                    proptest::prop_assert_eq!(redact_url(&url), want);
                    let list = format!("{url},{url}");
                    proptest::prop_assert_eq!(redact_url(&list), format!("{want},{want}"));
                }
                if let Err(e) = redis::IntoConnectionInfo::into_connection_info(url.as_str()) {
                    let text = describe_url_error(&url, &e);
                    let marked = format!("{password}\u{1}");
                    proptest::prop_assert!(
                        password.len() < 4 || !format!("{text}\u{1}").contains(&marked),
                        "{text}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_user_comes_from_the_option_then_the_url() {
        let user = |url: &str, name: Option<&str>| {
            ConnectOptions::new(url)
                .username(name.map(str::to_string))
                .user()
        };
        assert_eq!(user("redis://h:1", None), "default");
        assert_eq!(user("redis://w:pw@h:1/0", None), "w");
        assert_eq!(user("redis://:pw@h:1", None), "default");
        assert_eq!(user("redis://pw@h:1", None), "default");
        assert_eq!(user("redis://w:pw@h:1", Some("ops")), "ops");
        assert_eq!(user("redis://a:p@h1:1,redis://a:p@h2:2", None), "a");
        assert!(url_has_password("redis://:pw@h"));
        assert!(url_has_password("redis://u:pw@h,redis://u:pw@h2"));
        assert!(!url_has_password("redis://u:@h"));
        assert!(!url_has_password("redis://h:6379/0"));
    }

    #[test]
    fn pem_blocks_are_counted_by_label() {
        let pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n\
                    -----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_blocks(pem, "CERTIFICATE"), 2);
        assert_eq!(pem_blocks(pem, "PRIVATE KEY"), 0);
        for key in ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"] {
            let pem = format!("-----BEGIN {key}-----\nMIIE\n-----END {key}-----\n");
            assert_eq!(pem_blocks(pem.as_bytes(), "PRIVATE KEY"), 1, "{key}");
        }
        assert_eq!(pem_blocks(b"not pem", "CERTIFICATE"), 0);
    }

    #[test]
    fn debug_never_shows_the_client_key() {
        let options = ConnectOptions::new("rediss://u:pw@h:1")
            .username(Some("worker".into()))
            .client_cert(Some(b"CERT".to_vec()), Some(b"SECRET-KEY".to_vec()));
        let text = format!("{options:?}");
        assert!(!text.contains("SECRET") && !text.contains("pw"), "{text}");
        assert!(text.contains("worker"), "{text}");
    }

    #[test]
    fn slots_follow_the_hash_tag() {
        // The figures of the Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"jq:{foo}:meta"), 12182);
        assert_eq!(slot_of(b"{}foo"), slot_of(b"{}foo"));
        assert_eq!(slot_of(b"a{}b"), crc16_xmodem(b"a{}b") % 16384);
    }
}
