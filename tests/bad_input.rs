//! The bad-input table of `docs/bad-input.md`, row by row: each mistake is run as a user
//! runs it (the built binary, against a private redis-server or a stand-in service), and
//! must exit with the documented code, say what is wrong (the row's quoted text) and,
//! against Redis, leave every key as it was. The doc and [`ROWS`] name the same ids.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::Commands;
use support::redis::{RedisServer, free_port};

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// Where a row's `{url}` points.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Target {
    /// The seeded redis-server.
    Redis,
    /// A redis-server with `proto-max-bulk-len 1mb`.
    SmallBulk,
    /// A TCP listener that answers every connection with a line of garbage.
    Garbage,
    /// A TCP listener that answers like an HTTP server.
    Http,
    /// A port nobody listens on.
    Closed,
    /// A redis-server with `requirepass s3cret-pw`; `{url}` carries no password.
    Auth,
    /// `rediss://` to a redis-server with `tls-auth-clients yes`, its CA `{certs}/ca.crt`.
    Mtls,
    /// A replica of the seeded redis-server.
    Replica,
}

struct Row {
    id: &'static str,
    args: &'static [&'static str],
    target: Target,
    code: i32,
    /// Text the message (stderr) must contain; also quoted in the doc's row.
    says: &'static str,
    /// Environment variables set for the run (after every JOBQUEUE_ one is removed).
    env: &'static [(&'static str, &'static str)],
    /// Taken, not refused: Redis may change, and `says` may be on stdout.
    writes: bool,
    /// Bytes written to its stdin (none: stdin is closed).
    stdin: &'static [u8],
}

const fn row(
    id: &'static str,
    args: &'static [&'static str],
    code: i32,
    says: &'static str,
) -> Row {
    Row {
        id,
        args,
        target: Target::Redis,
        code,
        says,
        env: &[],
        writes: false,
        stdin: b"",
    }
}

const fn on(target: Target, r: Row) -> Row {
    Row { target, ..r }
}

const fn with_env(env: &'static [(&'static str, &'static str)], r: Row) -> Row {
    Row { env, ..r }
}

/// A row whose input is taken (exit 0): it writes to Redis (queue `wr`), and what it
/// says may be on stdout.
const fn writes(r: Row) -> Row {
    Row { writes: true, ..r }
}

const fn with_stdin(stdin: &'static [u8], r: Row) -> Row {
    Row { stdin, ..r }
}

// Placeholders: {url} the target's URL, {tls_url} rediss:// to the seeded server,
// {dir} a scratch directory holding `big.bin` (2 MiB), `notpem.crt` and `ca.pem`,
// {long_tag} 100 000 characters, {long_id} 1025 characters, {sentinel} a Sentinel that
// monitors the seeded server as `mymaster`, {closed_addr} host:port nobody listens on,
// {non_utf8} (a whole argument) the bytes ff fe, which are not UTF-8, {long_hex} 2050 hex
// digits (1025 bytes).
#[rustfmt::skip]
const ROWS: &[Row] = &[
    row("delay-huge", &["enqueue", "--redis", "{url}", "--tag", "bi", "--delay", "99999999999d", "x"], 2, "is too long"),
    row("delay-negative", &["enqueue", "--redis", "{url}", "--tag", "bi", "--delay", "-5s", "x"], 2, "for '--delay <DELAY>': must not be negative"),
    row("delay-negative-eq", &["enqueue", "--redis", "{url}", "--tag", "bi", "--delay=-5s", "x"], 2, "for '--delay <DELAY>': must not be negative"),
    row("delay-no-unit", &["enqueue", "--redis", "{url}", "--tag", "bi", "--delay", "5", "x"], 2, "has no unit"),
    row("delay-bad-unit", &["enqueue", "--redis", "{url}", "--tag", "bi", "--delay", "5y", "x"], 2, "unknown unit"),
    row("visibility-zero", &["configure", "--redis", "{url}", "--tag", "bi", "--visibility-timeout", "0"], 2, "must be at least 1ms"),
    row("visibility-negative", &["configure", "--redis", "{url}", "--tag", "bi", "--visibility-timeout", "-1s"], 2, "must not be negative"),
    row("max-attempts-zero", &["configure", "--redis", "{url}", "--tag", "bi", "--max-attempts", "0"], 2, "must be at least 1"),
    row("max-attempts-negative", &["configure", "--redis", "{url}", "--tag", "bi", "--max-attempts", "-3"], 2, "--max-attempts"),
    row("max-attempts-huge", &["configure", "--redis", "{url}", "--tag", "bi", "--max-attempts", "4294967296"], 2, "--max-attempts"),
    row("multiplier-below-one", &["configure", "--redis", "{url}", "--tag", "bi", "--backoff-multiplier", "0.5"], 2, "must be a number from 1 to 1000"),
    row("multiplier-negative", &["configure", "--redis", "{url}", "--tag", "bi", "--backoff-multiplier", "-1"], 2, "must be a number from 1 to 1000"),
    row("multiplier-huge", &["configure", "--redis", "{url}", "--tag", "bi", "--backoff-multiplier", "1e300"], 2, "must be a number from 1 to 1000"),
    row("multiplier-nan", &["configure", "--redis", "{url}", "--tag", "bi", "--backoff-multiplier", "NaN"], 2, "must be a number from 1 to 1000"),
    row("backoff-max-below-initial", &["configure", "--redis", "{url}", "--tag", "bi", "--backoff-initial", "10s", "--backoff-max", "1s"], 2, "must not be below the initial backoff"),
    row("dead-max-len-huge", &["configure", "--redis", "{url}", "--tag", "bi", "--dead-max-len", "18446744073709551615"], 2, "must be at most 2^53"),
    row("stats-watch-zero", &["stats", "--redis", "{url}", "--tag", "bi", "--watch", "0"], 2, "must be at least 100ms"),
    row("reap-every-zero", &["reap", "--redis", "{url}", "--tag", "bi", "--every", "0"], 2, "--every must be above 0"),
    row("dead-ls-limit-zero", &["dead", "ls", "--redis", "{url}", "--tag", "bi", "--limit", "0"], 2, "--limit must be above 0"),
    row("dead-ls-offset-huge", &["dead", "ls", "--redis", "{url}", "--tag", "bi", "--offset", "99999999999999999999"], 2, "--offset"),
    row("peek-count-zero", &["peek", "--redis", "{url}", "--tag", "bi", "-n", "0"], 2, "1..=1000"),
    row("reap-batch-huge", &["reap", "--redis", "{url}", "--tag", "bi", "--batch", "5000"], 2, "1..=1000"),
    row("tag-empty", &["stats", "--redis", "{url}", "--tag", ""], 2, "must not be empty"),
    row("tag-braces", &["stats", "--redis", "{url}", "--tag", "{emails}"], 2, "must not contain braces"),
    row("tag-huge", &["stats", "--redis", "{url}", "--tag", "{long_tag}"], 2, "100000 bytes: at most 256"),
    row("prefix-braces", &["stats", "--redis", "{url}", "--tag", "bi", "--prefix", "a{b"], 2, "key prefix"),
    writes(row("id-space", &["enqueue", "--redis", "{url}", "--tag", "wr", "--id", "a b", "x"], 0, "a b")),
    row("id-long", &["enqueue", "--redis", "{url}", "--tag", "bi", "--id", "{long_id}", "x"], 2, "1 to 1024 bytes"),
    row("enqueue-no-payload", &["enqueue", "--redis", "{url}", "--tag", "bi"], 2, "required"),
    row("enqueue-file-missing", &["enqueue", "--redis", "{url}", "--tag", "bi", "--file", "/nonexistent"], 1, "cannot read"),
    row("payload-over-max", &["enqueue", "--redis", "{url}", "--tag", "bi", "--max-payload", "10", "a longer payload"], 2, "payload"),
    row("max-payload-unit", &["enqueue", "--redis", "{url}", "--tag", "bi", "--max-payload", "64MB", "x"], 2, "unknown size unit"),
    on(Target::SmallBulk, row("payload-over-server-limit", &["enqueue", "--redis", "{url}", "--tag", "bi", "--file", "{dir}/big.bin"], 1, "proto-max-bulk-len")),
    row("url-scheme", &["stats", "--redis", "http://127.0.0.1:6379", "--tag", "bi"], 6, "scheme must be redis:// or rediss://"),
    row("url-port", &["stats", "--redis", "redis://127.0.0.1:99999", "--tag", "bi"], 6, "port \"99999\" is not a number"),
    row("url-db-name", &["stats", "--redis", "{url}/abc", "--tag", "bi"], 6, "the database \"abc\" is not a number"),
    row("url-db-range", &["stats", "--redis", "{url}/99", "--tag", "bi"], 3, "out of range"),
    on(Target::Closed, row("connection-refused", &["stats", "--redis", "{url}", "--tag", "bi"], 3, "refused")),
    row("tls-against-plain", &["stats", "--redis", "{tls_url}", "--tag", "bi"], 3, "is the server using TLS?"),
    on(Target::Garbage, row("not-redis-garbage", &["stats", "--redis", "{url}", "--tag", "bi"], 3, "does not answer as Redis")),
    on(Target::Http, row("not-redis-http", &["stats", "--redis", "{url}", "--tag", "bi"], 3, "does not answer as Redis")),
    row("tls-ca-missing", &["stats", "--redis", "{tls_url}", "--tag", "bi", "--tls-ca", "/nonexistent/ca.pem"], 2, "--tls-ca"),
    row("tls-ca-not-pem", &["stats", "--redis", "{tls_url}", "--tag", "bi", "--tls-ca", "{dir}/notpem.crt"], 2, "is not a PEM certificate"),
    row("tls-ca-plain-url", &["stats", "--redis", "{url}", "--tag", "bi", "--tls-ca", "{dir}/ca.pem"], 6, "not rediss://"),
    row("wrong-type-stats", &["stats", "--redis", "{url}", "--tag", "wt"], 5, "holds the wrong type"),
    row("wrong-type-enqueue", &["enqueue", "--redis", "{url}", "--tag", "wt", "x"], 5, "jq:{wt}:pending"),
    row("wrong-type-redrive", &["dead", "redrive", "--redis", "{url}", "--tag", "wt", "--all"], 5, "holds the wrong type"),
    row("unknown-tag-stats", &["stats", "--redis", "{url}", "--tag", "bj"], 0, "no queue exists at jq:{bj}"),
    row("unknown-tag-peek", &["peek", "--redis", "{url}", "--tag", "bj"], 0, "no queue exists at jq:{bj}"),
    row("redrive-unknown-id", &["dead", "redrive", "--redis", "{url}", "--tag", "bi", "nosuch"], 0, "skipped nosuch: no such job"),
    row("redrive-pending-id", &["dead", "redrive", "--redis", "{url}", "--tag", "bi", "p1"], 0, "skipped p1: not dead (status pending)"),
    row("purge-unknown-id", &["dead", "purge", "--redis", "{url}", "--tag", "bi", "nosuch"], 0, "skipped nosuch: no such job"),
    row("purge-all-without-yes", &["dead", "purge", "--redis", "{url}", "--tag", "bi", "--all"], 2, "add --yes"),
    row("purge-orphans-without-yes", &["dead", "purge", "--redis", "{url}", "--tag", "bi", "--orphans"], 2, "add --yes"),
    row("redrive-oldest-zero", &["dead", "redrive", "--redis", "{url}", "--tag", "bi", "--oldest", "0"], 2, "--oldest needs a number above 0"),
    row("redrive-nothing", &["dead", "redrive", "--redis", "{url}", "--tag", "bi"], 2, "required"),
    row("dead-show-unknown", &["dead", "show", "--redis", "{url}", "--tag", "bi", "nosuch"], 1, "no job \"nosuch\""),
    row("url-empty", &["stats", "--redis", "", "--tag", "bi"], 6, "no URL given"),
    on(Target::Auth, row("auth-missing", &["stats", "--redis", "{url}", "--tag", "bi"], 4, "refused authentication")),
    on(Target::Auth, row("auth-wrong", &["stats", "--redis", "{auth_url}", "--tag", "bi"], 4, "refused authentication")),
    row("id-with-stdin", &["enqueue", "--redis", "{url}", "--tag", "bi", "--stdin", "--id", "a"], 2, "cannot be used with"),
    row("print-ids-without-stdin", &["enqueue", "--redis", "{url}", "--tag", "bi", "--print-ids", "x"], 2, "--print-ids needs --stdin"),
    row("dead-show-raw-json", &["dead", "show", "--redis", "{url}", "--tag", "bi", "d1", "--raw", "--json"], 2, "cannot be used with"),
    row("unknown-flag", &["stats", "--redis", "{url}", "--tag", "bi", "--colour"], 2, "unexpected argument '--colour'"),
    row("acl-wrong-password", &["stats", "--redis", "{reader_url_wrong}", "--username", "jq-reader", "--tag", "bi"], 4, "user \"jq-reader\""),
    row("acl-username-no-password", &["stats", "--redis", "{url}", "--username", "jq-reader", "--tag", "bi"], 2, "was given without a password"),
    row("acl-denied-command", &["enqueue", "--redis", "{reader_url}", "--tag", "bi", "x"], 4, "denied by the ACL of Redis user \"jq-reader\""),
    row("acl-denied-key", &["stats", "--redis", "{reader_url}", "--tag", "other"], 4, "no permissions to access one of the keys"),
    row("tls-cert-without-key", &["stats", "--redis", "{tls_url}", "--tag", "bi", "--tls-cert", "{certs}/client.crt"], 2, "--tls-key"),
    row("tls-key-not-pem", &["stats", "--redis", "{tls_url}", "--tag", "bi", "--tls-cert", "{certs}/client.crt", "--tls-key", "{dir}/notpem.crt"], 2, "is not a PEM private key"),
    row("tls-cert-plain-url", &["stats", "--redis", "{url}", "--tag", "bi", "--tls-cert", "{certs}/client.crt", "--tls-key", "{certs}/client.key"], 6, "a client certificate was given but the URL is not rediss://"),
    on(Target::Mtls, row("mtls-no-cert", &["stats", "--redis", "{url}", "--tag", "bi", "--tls-ca", "{certs}/ca.crt"], 4, "the server requires a client certificate")),
    on(Target::Mtls, row("mtls-other-ca", &["stats", "--redis", "{url}", "--tag", "bi", "--tls-ca", "{certs}/ca.crt", "--tls-cert", "{certs}/stranger.crt", "--tls-key", "{certs}/stranger.key"], 4, "the server rejected the client certificate")),
    row("tls-server-name-plain-url", &["stats", "--redis", "{url}", "--tag", "bi", "--tls-server-name", "redis.example"], 6, "a TLS server name (\"redis.example\") was given but the URL is not rediss://"),
    on(Target::Mtls, row("tls-server-name-mismatch", &["stats", "--redis", "{url}", "--tag", "bi", "--tls-ca", "{certs}/ca.crt", "--tls-cert", "{certs}/client.crt", "--tls-key", "{certs}/client.key", "--tls-server-name", "other.example"], 3, "or for the TLS server name when one is given")),
    on(Target::Mtls, row("tls-unknown-ca", &["stats", "--redis", "{url}", "--tag", "bi", "--tls-cert", "{certs}/client.crt", "--tls-key", "{certs}/client.key"], 3, "not signed by a CA this client trusts")),
    row("sentinel-unknown-master", &["stats", "--sentinel", "{sentinel}", "--master-name", "typo", "--tag", "bi"], 6, "monitor no master named \"typo\""),
    row("sentinel-unreachable", &["stats", "--sentinel", "{closed_addr}", "--master-name", "mymaster", "--tag", "bi"], 3, "no Sentinel reachable"),
    row("sentinel-url", &["stats", "--sentinel", "redis://127.0.0.1:26379", "--master-name", "mymaster", "--tag", "bi"], 6, "give host:port, not a URL"),
    row("sentinel-no-master-name", &["stats", "--sentinel", "{sentinel}", "--tag", "bi"], 2, "--master-name"),
    row("sentinel-with-cluster", &["stats", "--sentinel", "{sentinel}", "--master-name", "mymaster", "--cluster", "--tag", "bi"], 2, "cannot be used with"),
    row("durability-unknown", &["enqueue", "--redis", "{url}", "--tag", "bi", "--durability", "sync", "x"], 2, "write primary, replicated"),
    row("durability-zero-replicas", &["enqueue", "--redis", "{url}", "--tag", "bi", "--durability", "replicated:0", "x"], 2, "must be at least 1"),
    on(Target::Replica, row("readonly-replica", &["enqueue", "--redis", "{url}", "--tag", "bi", "x"], 1, "read-only replica, not the primary")),
    on(Target::SmallBulk, row("not-replicated", &["enqueue", "--redis", "{url}", "--tag", "nr", "--durability", "replicated:1:100ms", "x"], 1, "ran on the primary but only 0 of 1")),
    // Help, unreplicated enqueues and worker logs
    row("worker-log-format-unknown", &["worker", "--redis", "{url}", "--tag", "bi", "--log-format", "yaml", "--exec", "true"], 2, "invalid value 'yaml' for '--log-format"),
    row("worker-log-level-unknown", &["worker", "--redis", "{url}", "--tag", "bi", "--log-level", "loud", "--exec", "true"], 2, "\"loud\" is not a log level"),
    // Negative numbers, environment variables and the last unclear answers
    row("worker-concurrency-negative", &["worker", "--redis", "{url}", "--tag", "bi", "--concurrency", "-1", "--exec", "true"], 2, "invalid value '-1' for '--concurrency <CONCURRENCY>': must not be negative"),
    row("worker-visibility-negative", &["worker", "--redis", "{url}", "--tag", "bi", "--visibility", "-1s", "--exec", "true"], 2, "invalid value '-1s' for '--visibility <DURATION>': must not be negative"),
    row("worker-shutdown-timeout-negative", &["worker", "--redis", "{url}", "--tag", "bi", "--shutdown-timeout", "-1s", "--exec", "true"], 2, "invalid value '-1s' for '--shutdown-timeout <DURATION>': must not be negative"),
    row("stats-partitions-negative", &["stats", "--redis", "{url}", "--tag", "bi", "--partitions", "-1"], 2, "invalid value '-1' for '--partitions <N>': must not be negative"),
    row("stats-partitions-negative-eq", &["stats", "--redis", "{url}", "--tag", "bi", "--partitions=-1"], 2, "invalid value '-1' for '--partitions <N>': must not be negative"),
    row("stats-partitions-not-a-number", &["stats", "--redis", "{url}", "--tag", "bi", "--partitions", "x"], 2, "invalid value 'x' for '--partitions <N>': must be a whole number"),
    row("dead-ls-offset-negative", &["dead", "ls", "--redis", "{url}", "--tag", "bi", "--offset", "-1"], 2, "invalid value '-1' for '--offset <OFFSET>': must not be negative"),
    row("dead-ls-offset-negative-eq", &["dead", "ls", "--redis", "{url}", "--tag", "bi", "--offset=-1"], 2, "invalid value '-1' for '--offset <OFFSET>': must not be negative"),
    row("ui-rescan-negative", &["ui", "--redis", "{url}", "--rescan", "-5s"], 2, "invalid value '-5s' for '--rescan <RESCAN>': must not be negative"),
    row("redrive-oldest-negative", &["dead", "redrive", "--redis", "{url}", "--tag", "bi", "--oldest", "-1"], 2, "invalid value '-1' for '--oldest <N>': must not be negative"),
    row("max-payload-negative", &["enqueue", "--redis", "{url}", "--tag", "bi", "--max-payload", "-1", "x"], 2, "invalid value '-1' for '--max-payload <SIZE>': must not be negative"),
    row("peek-count-negative", &["peek", "--redis", "{url}", "--tag", "bi", "-n", "-1"], 2, "invalid value '-1' for '--count <COUNT>': must not be negative"),
    row("dead-max-len-negative-eq", &["configure", "--redis", "{url}", "--tag", "bi", "--dead-max-len=-1"], 2, "invalid value '-1' for '--dead-max-len <DEAD_MAX_LEN>': must not be negative"),
    with_env(&[("JOBQUEUE_PARTITIONS", "abc")], row("env-partitions-not-a-number", &["stats", "--redis", "{url}", "--tag", "bi"], 2, "invalid value 'abc' for JOBQUEUE_PARTITIONS (the environment variable of --partitions): must be a whole number")),
    with_env(&[("JOBQUEUE_PARTITIONS", "-2")], row("env-partitions-negative", &["stats", "--redis", "{url}", "--tag", "bi"], 2, "invalid value '-2' for JOBQUEUE_PARTITIONS (the environment variable of --partitions): must not be negative")),
    with_env(&[("JOBQUEUE_CLUSTER", "banana")], row("env-cluster-not-a-boolean", &["stats", "--redis", "{url}", "--tag", "bi"], 2, "invalid value 'banana' for JOBQUEUE_CLUSTER (the environment variable of --cluster): expected true, false, 1, 0, yes or no")),
    with_env(&[("JOBQUEUE_CLUSTER", "1")], row("env-cluster-one", &["stats", "--redis", "{url}", "--tag", "bi"], 3, "This instance has cluster support disabled")),
    with_env(&[("JOBQUEUE_CLUSTER", "0")], row("env-cluster-zero", &["stats", "--redis", "{url}", "--tag", "bj"], 0, "no queue exists at jq:{bj}")),
    on(Target::Auth, with_env(&[("JOBQUEUE_REDIS_PASSWORD", "s3cret-pw")], row("env-redis-password", &["stats", "--redis", "{url}", "--tag", "bj"], 0, "no queue exists at jq:{bj}"))),
    on(Target::Auth, with_env(&[("JOBQUEUE_REDIS_PASSWORD", "s3cret-pw")], row("env-redis-password-and-url", &["stats", "--redis", "{auth_url}", "--tag", "bj"], 2, "invalid JOBQUEUE_REDIS_PASSWORD: it is set and the Redis URL carries a password too"))),
    row("sentinel-with-redis", &["stats", "--sentinel", "{sentinel}", "--master-name", "mymaster", "--redis", "{url}", "--tag", "bi"], 2, "the argument '--sentinel <HOST:PORT,...>' cannot be used with '--redis <REDIS>'"),
    with_env(&[("JOBQUEUE_REDIS_URL", "redis://127.0.0.1:6379")], row("sentinel-with-redis-env", &["stats", "--sentinel", "{sentinel}", "--master-name", "mymaster", "--tag", "bi"], 2, "cannot be used with '--redis <REDIS>' (set by JOBQUEUE_REDIS_URL)")),
    row("argument-not-utf8", &["enqueue", "--redis", "{url}", "--tag", "bi", "{non_utf8}"], 2, "argument 6 (after \"bi\") is not valid UTF-8"),
    row("max-payload-fraction", &["enqueue", "--redis", "{url}", "--tag", "bi", "--max-payload", "1.3KiB", "x"], 2, "\"1.3KiB\" is not a whole number of bytes"),
    row("max-payload-fraction-over", &["enqueue", "--redis", "{url}", "--tag", "bi", "--max-payload", "0.5KiB", "--file", "{dir}/big.bin"], 2, "2097152 bytes is over the limit of 512 bytes"),
    row("backoff-initial-over-max", &["configure", "--redis", "{url}", "--tag", "bi", "--backoff-initial", "213503d"], 2, "--backoff-initial 213503d is above the queue's backoff max (5m): give --backoff-max too"),
    row("id-huge", &["enqueue", "--redis", "{url}", "--tag", "bi", "--id", "{long_tag}", "x"], 2, "… (100000 bytes) must be 1 to 1024 bytes"),
    row("meta-not-a-number", &["configure", "--redis", "{url}", "--tag", "mb"], 0, "note: the meta field max_attempts holds \"banana\", which the scripts do not take as a setting: the queue runs with the default (5)"),
    // Client certificates, byte ids and typo'd tags
    on(Target::Mtls, row("tls-cert-v1", &["stats", "--redis", "{url}", "--tag", "bi", "--tls-ca", "{certs}/ca.crt", "--tls-cert", "{certs}/v1.crt", "--tls-key", "{certs}/v1.key"], 2, "an X.509 v1 certificate, which TLS clients cannot present")),
    on(Target::Mtls, row("tls-key-mismatch", &["stats", "--redis", "{url}", "--tag", "bi", "--tls-ca", "{certs}/ca.crt", "--tls-cert", "{certs}/client.crt", "--tls-key", "{certs}/stranger.key"], 2, "not the private key of the client certificate")),
    row("configure-unknown-tag", &["configure", "--redis", "{url}", "--tag", "bj", "--max-attempts", "3"], 2, "did you mean --tag bi?): check --tag and --prefix; to make a new queue with these settings, add --create"),
    row("unknown-tag-configure-show", &["configure", "--redis", "{url}", "--tag", "bj"], 0, "no queue exists at jq:{bj} (none of its keys are in Redis; did you mean --tag bi?)"),
    row("unknown-tag-dead-ls", &["dead", "ls", "--redis", "{url}", "--tag", "bj"], 0, "no queue exists at jq:{bj} (none of its keys are in Redis; did you mean --tag bi?)"),
    row("unknown-tag-reap", &["reap", "--redis", "{url}", "--tag", "bj"], 0, "no queue exists at jq:{bj} (none of its keys are in Redis; did you mean --tag bi?)"),
    row("unknown-tag-redrive-all", &["dead", "redrive", "--redis", "{url}", "--tag", "bj", "--all"], 0, "no queue exists at jq:{bj} (none of its keys are in Redis; did you mean --tag bi?)"),
    row("unknown-tag-show", &["show", "--redis", "{url}", "--tag", "bj", "j1"], 1, "no queue exists at jq:{bj} (none of its keys are in Redis; did you mean --tag bi?)"),
    row("dead-id-hex-not-hex", &["dead", "redrive", "--redis", "{url}", "--tag", "bi", "--id-hex", "zz"], 2, "--id-hex: \"zz\" is not hex"),
    row("unknown-tag-far", &["stats", "--redis", "{url}", "--tag", "zzzzzz"], 0, "(none of its keys are in Redis): check --tag and --prefix"),
    // Absurd values refused
    row("stats-watch-too-short", &["stats", "--redis", "{url}", "--tag", "bi", "--watch", "1ms"], 2, "invalid value '1ms' for '--watch [<INTERVAL>]': must be at least 100ms"),
    row("ui-history-zero", &["ui", "--redis", "{url}", "--history", "0ms"], 2, "invalid value '0ms' for '--history <HISTORY>': must be at least 1s"),
    row("ui-tag-empty", &["ui", "--redis", "{url}", "--tag", ","], 2, "must not be empty"),
    row("tls-server-name-empty", &["stats", "--redis", "{url}", "--tag", "bi", "--tls-server-name", ""], 2, "invalid value '' for '--tls-server-name <NAME>': must not be empty"),
    row("kill-grace-huge", &["worker", "--redis", "{url}", "--tag", "bi", "--kill-grace", "213503d", "--exec", "true"], 2, "invalid value '213503d' for '--kill-grace <DURATION>': must be at most 1h"),
    row("stderr-tail-huge", &["worker", "--redis", "{url}", "--tag", "bi", "--stderr-tail", "1000000000000", "--exec", "true"], 2, "invalid value '1000000000000' for '--stderr-tail <BYTES>': must be at most 1048576"),
    // Ids of any bytes, reap's account and binary stdin
    writes(row("enqueue-id-control", &["enqueue", "--redis", "{url}", "--tag", "wr", "--id", "tab\there", "x"], 0, "hex:7461620968657265")),
    writes(row("enqueue-id-text-hex-prefix", &["enqueue", "--redis", "{url}", "--tag", "wr", "--id", "hex:41", "x"], 0, "hex:6865783a3431")),
    writes(row("enqueue-id-hex", &["enqueue", "--redis", "{url}", "--tag", "wr", "--id-hex", "626164ff", "x"], 0, "hex:626164ff")),
    writes(row("enqueue-id-hex-again", &["enqueue", "--redis", "{url}", "--tag", "wr", "--id-hex", "hex:626164ff", "y"], 0, "job hex:626164ff already exists in jq:{wr}: nothing changed")),
    row("enqueue-id-hex-not-hex", &["enqueue", "--redis", "{url}", "--tag", "bi", "--id-hex", "zz", "x"], 2, "--id-hex: \"zz\" is not hex"),
    row("enqueue-id-hex-empty", &["enqueue", "--redis", "{url}", "--tag", "bi", "--id-hex", "", "x"], 2, "invalid job id: \"\" must be 1 to 1024 bytes"),
    row("enqueue-id-hex-long", &["enqueue", "--redis", "{url}", "--tag", "bi", "--id-hex", "{long_hex}", "x"], 2, "… (1025 bytes) must be 1 to 1024 bytes"),
    row("enqueue-id-hex-huge", &["enqueue", "--redis", "{url}", "--tag", "bi", "--id-hex", "{long_tag}", "x"], 2, "… (50000 bytes) must be 1 to 1024 bytes"),
    row("enqueue-id-and-id-hex", &["enqueue", "--redis", "{url}", "--tag", "bi", "--id", "a", "--id-hex", "61", "x"], 2, "cannot be used with"),
    row("enqueue-id-hex-with-stdin", &["enqueue", "--redis", "{url}", "--tag", "bi", "--stdin", "--id-hex", "61"], 2, "cannot be used with"),
    row("show-id-hex-not-hex", &["show", "--redis", "{url}", "--tag", "bi", "--id-hex", "zz"], 2, "--id-hex: \"zz\" is not hex"),
    row("show-id-and-id-hex", &["show", "--redis", "{url}", "--tag", "bi", "p1", "--id-hex", "7031"], 2, "cannot be used with"),
    row("show-no-id", &["show", "--redis", "{url}", "--tag", "bi"], 2, "required"),
    row("show-id-hex-unknown", &["show", "--redis", "{url}", "--tag", "bi", "--id-hex", "626164ff"], 1, "no job \"hex:626164ff\" in queue jq:{bi}"),
    row("dead-show-id-hex-not-hex", &["dead", "show", "--redis", "{url}", "--tag", "bi", "--id-hex", "zz"], 2, "--id-hex: \"zz\" is not hex"),
    row("dead-show-id-hex-unknown", &["dead", "show", "--redis", "{url}", "--tag", "bi", "--id-hex", "hex:626164ff"], 1, "no job \"hex:626164ff\" in queue jq:{bi}"),
    row("redrive-id-hex-unknown", &["dead", "redrive", "--redis", "{url}", "--tag", "bi", "--id-hex", "hex:626164ff"], 0, "skipped hex:626164ff: no such job"),
    row("redrive-id-control-unknown", &["dead", "redrive", "--redis", "{url}", "--tag", "bi", "a\nb"], 0, "skipped hex:610a62: no such job"),
    row("purge-id-hex-empty", &["dead", "purge", "--redis", "{url}", "--tag", "bi", "--id-hex", ""], 2, "invalid job id: \"\" must be 1 to 1024 bytes"),
    row("purge-id-hex-not-hex", &["dead", "purge", "--redis", "{url}", "--tag", "bi", "--id-hex", "hex:zz"], 2, "--id-hex: \"hex:zz\" is not hex"),
    writes(with_stdin(b"nul\x00byte\n\xff\xfe\n", row("stdin-binary", &["enqueue", "--redis", "{url}", "--tag", "wr", "--stdin"], 0, "warning: stdin is not text (line 1 holds a NUL byte): each line of it becomes one job"))),
    writes(with_stdin(b"text\n\xff\xfe\n", row("stdin-binary-count", &["enqueue", "--redis", "{url}", "--tag", "wr", "--stdin"], 0, "warning: enqueued 2 jobs from lines of binary input (--file FILE sends a file as one job)"))),
    row("reap-json-unknown-tag", &["reap", "--redis", "{url}", "--tag", "bj", "--json"], 0, "no queue exists at jq:{bj}"),
    // Partition counts
    row("partitions-disagree", &["stats", "--redis", "{url}", "--tag", "parted", "--partitions", "2"], 2, "invalid --partitions: 2 disagrees with the partition count jq:{parted} records: 3"),
    row("partitions-disagree-enqueue", &["enqueue", "--redis", "{url}", "--tag", "parted", "--partitions", "6", "x"], 2, "invalid --partitions: 6 disagrees with the partition count jq:{parted} records: 3"),
    row("partition-key-unpartitioned", &["enqueue", "--redis", "{url}", "--tag", "bi", "--partition-key", "k", "x"], 2, "--partition-key needs a partitioned queue: jq:{bi} has 1 partition"),
    row("partition-record-garbage", &["stats", "--redis", "{url}", "--tag", "pgarbage"], 2, "field partitions of jq:{pgarbage}:meta holds \"many\", not a partition count from 1 to 1024"),
    // Control of single jobs
    row("worker-timeout-zero", &["worker", "--redis", "{url}", "--tag", "bi", "--timeout", "0s", "--exec", "true"], 2, "invalid value '0s' for '--timeout <DURATION>': must be more than 0"),
    row("enqueue-max-attempts-zero", &["enqueue", "--redis", "{url}", "--tag", "bi", "--max-attempts", "0", "x"], 2, "invalid max attempts: 0 is not between 1 and 1000000"),
    row("enqueue-max-attempts-huge", &["enqueue", "--redis", "{url}", "--tag", "bi", "--max-attempts", "1000001", "x"], 2, "invalid max attempts: 1000001 is not between 1 and 1000000"),
    row("enqueue-max-attempts-negative", &["enqueue", "--redis", "{url}", "--tag", "bi", "--max-attempts", "-1", "x"], 2, "for '--max-attempts <MAX_ATTEMPTS>': must not be negative"),
    row("enqueue-multiplier-below-one", &["enqueue", "--redis", "{url}", "--tag", "bi", "--backoff-multiplier", "0.5", "x"], 2, "invalid backoff multiplier: 0.5 is not a number from 1 to 1000"),
    row("enqueue-at-not-a-time", &["enqueue", "--redis", "{url}", "--tag", "bi", "--at", "tomorrow", "x"], 2, "invalid value 'tomorrow' for '--at <TIME>': not an RFC 3339 time such as 2026-12-24T08:00:00Z (with Z or an offset)"),
    row("enqueue-at-no-offset", &["enqueue", "--redis", "{url}", "--tag", "bi", "--at", "2026-12-24T08:00:00", "x"], 2, "failed to find offset component"),
    row("enqueue-at-and-delay", &["enqueue", "--redis", "{url}", "--tag", "bi", "--at", "2026-12-24T08:00:00Z", "--delay", "5s", "x"], 2, "the argument '--at <TIME>' cannot be used with '--delay <DELAY>'"),
    row("enqueue-backoff-max-below-initial", &["enqueue", "--redis", "{url}", "--tag", "bi", "--backoff-initial", "10s", "--backoff-max", "1s", "x"], 2, "invalid backoff max: 1s is below the initial backoff 10s"),
    row("configure-auto-bound-fixed", &["configure", "--redis", "{url}", "--tag", "bi", "--auto-max", "10m"], 2, "--auto-max applies to --visibility-timeout auto"),
    row("configure-auto-margin", &["configure", "--redis", "{url}", "--tag", "bi", "--visibility-timeout", "auto", "--auto-margin", "0.5"], 2, "auto margin: must be a number from 1 to 100"),
    row("configure-auto-max-below-min", &["configure", "--redis", "{url}", "--tag", "bi", "--visibility-timeout", "auto", "--auto-min", "2m", "--auto-max", "1m"], 2, "auto max: must not be below auto min"),
    row("configure-visibility-word", &["configure", "--redis", "{url}", "--tag", "bi", "--visibility-timeout", "sometimes"], 2, "or auto: set from the queue's processing times"),
    row("cancel-no-id", &["cancel", "--redis", "{url}", "--tag", "bi"], 2, "the following required arguments were not provided"),
    row("promote-no-id", &["promote", "--redis", "{url}", "--tag", "bi"], 2, "the following required arguments were not provided"),
    row("cancel-empty-id", &["cancel", "--redis", "{url}", "--tag", "bi", ""], 2, "invalid job id: \"\" must be 1 to 1024 bytes"),
    row("promote-bad-hex", &["promote", "--redis", "{url}", "--tag", "bi", "--id-hex", "zz"], 2, "--id-hex: \"zz\" is not hex"),
    row("promote-pending-id", &["promote", "--redis", "{url}", "--tag", "bi", "p1"], 0, "skipped p1: not delayed (status pending)"),
    row("promote-unknown-id", &["promote", "--redis", "{url}", "--tag", "bi", "nosuch"], 0, "skipped nosuch: no such job"),
    row("cancel-dead-id", &["cancel", "--redis", "{url}", "--tag", "bi", "d1"], 0, "skipped d1: status dead, not cancelled"),
    row("cancel-unknown-id", &["cancel", "--redis", "{url}", "--tag", "bi", "nosuch"], 0, "skipped nosuch: no such job"),
    row("schedule-cron-fields", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--cron", "0 3 * *", "x"], 2, "invalid cron: \"0 3 * *\" has 4 fields: expected 5"),
    row("schedule-cron-syntax", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--cron", "0 25 * * *", "x"], 2, "invalid cron: \"0 25 * * *\""),
    row("schedule-tz", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--cron", "0 3 * * *", "--tz", "Mars/Olympus", "x"], 2, "invalid time zone: \"Mars/Olympus\" is not an IANA time zone"),
    row("schedule-tz-with-every", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "1s", "--tz", "UTC", "x"], 2, "--tz applies to --cron"),
    row("schedule-every-and-cron", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "1s", "--cron", "* * * * *", "x"], 2, "cannot be used with"),
    row("schedule-no-rule", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "x"], 2, "the following required arguments were not provided"),
    row("schedule-every-zero", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "0s", "x"], 2, "invalid every: expected an interval of 1 ms to 10^15 ms"),
    row("schedule-missed-word", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "1s", "--missed", "all", "x"], 2, "[possible values: skip, once]"),
    row("schedule-name", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "a b", "--every", "1s", "x"], 2, "invalid schedule name: \"a b\": expected 1..200 characters"),
    row("schedule-absent", &["schedule", "rm", "--redis", "{url}", "--tag", "bi", "nope"], 1, "no schedule nope on jq:{bi}"),
    row("enqueue-unique-for-no-key", &["enqueue", "--redis", "{url}", "--tag", "bi", "--unique-for", "10m", "x"], 2, "--unique-key <KEY>"),
    row("enqueue-unique-mode-no-key", &["enqueue", "--redis", "{url}", "--tag", "bi", "--unique-mode", "debounce", "x"], 2, "--unique-key <KEY>"),
    row("enqueue-unique-mode-word", &["enqueue", "--redis", "{url}", "--tag", "bi", "--unique-key", "k", "--unique-mode", "forever", "x"], 2, "[possible values: until-started, until-done, debounce]"),
    row("enqueue-unique-key-long", &["enqueue", "--redis", "{url}", "--tag", "bi", "--unique-key", "{long_id}", "x"], 2, "invalid unique key: 1025 bytes: must be 1 to 1024 bytes"),
    row("enqueue-unique-key-empty", &["enqueue", "--redis", "{url}", "--tag", "bi", "--unique-key", "", "x"], 2, "invalid unique key: 0 bytes: must be 1 to 1024 bytes"),
    row("enqueue-unique-for-zero", &["enqueue", "--redis", "{url}", "--tag", "bi", "--unique-key", "k", "--unique-for", "0", "x"], 2, "invalid unique window: 0s must be from 1 ms to 10^15 ms"),
    row("enqueue-unique-held", &["enqueue", "--redis", "{url}", "--tag", "ubi", "--unique-key", "held", "x"], 7, "unique key \"held\" is held by job u1 in jq:{ubi}: nothing enqueued"),
    // Outcomes
    row("wait-timeout-without-wait", &["enqueue", "--redis", "{url}", "--tag", "bi", "--wait-timeout", "5s", "x"], 2, "--wait"),
    row("wait-with-stdin", &["enqueue", "--redis", "{url}", "--tag", "bi", "--wait", "--stdin"], 2, "the argument '--wait' cannot be used with '--stdin'"),
    row("result-limit-huge", &["worker", "--redis", "{url}", "--tag", "bi", "--result-limit", "70000", "--exec", "true"], 2, "\"70000\" is not a number of bytes from 0 to 65536"),
    row("events-from-bad", &["events", "--redis", "{url}", "--tag", "bi", "--from", "yesterday"], 2, "expected a stream id <ms>-<seq>, <ms>, or now, got \"yesterday\""),
    row("configure-events-huge", &["configure", "--redis", "{url}", "--tag", "bi", "--events", "2000000000"], 2, "is not a number of events from 0 (off) to 1000000000"),
    // A job's own timeout and visibility
    row("enqueue-timeout-zero", &["enqueue", "--redis", "{url}", "--tag", "bi", "--timeout", "0s", "x"], 2, "invalid value '0s' for '--timeout <DURATION>': must be more than 0"),
    row("enqueue-visibility-zero", &["enqueue", "--redis", "{url}", "--tag", "bi", "--visibility", "0", "x"], 2, "invalid value '0' for '--visibility <DURATION>': must be more than 0"),
    row("enqueue-visibility-sub-ms", &["enqueue", "--redis", "{url}", "--tag", "bi", "--visibility", "500us", "x"], 2, "invalid visibility: 500µs is too short (at least 1ms)"),
    row("enqueue-timeout-huge", &["enqueue", "--redis", "{url}", "--tag", "bi", "--timeout", "300000000h", "x"], 2, "is too long (the longest is 213503d)"),
    row("rate-limit-zero", &["configure", "--redis", "{url}", "--tag", "bi", "--rate-limit", "0/1s"], 2, "the most claims per window must be 1 to 1000000"),
    row("rate-limit-zero-window", &["configure", "--redis", "{url}", "--tag", "bi", "--rate-limit", "10/0s"], 2, "the window must be at least 1ms"),
    row("rate-limit-shape", &["configure", "--redis", "{url}", "--tag", "bi", "--rate-limit", "abc"], 2, "is not a rate limit: write <claims>/<window>, e.g. 100/1s"),
    row("rate-limit-no-unit", &["configure", "--redis", "{url}", "--tag", "bi", "--rate-limit", "10/1"], 2, "has no unit"),
    row("rate-limit-per-key-no-value", &["configure", "--redis", "{url}", "--tag", "bi", "--rate-limit-per-key"], 2, "a value is required for '--rate-limit-per-key <N/WINDOW>'"),
    row("rate-key-empty", &["enqueue", "--redis", "{url}", "--tag", "bi", "--rate-key", "", "x"], 2, "invalid rate key: 0 bytes: a rate key is 1 to 256 bytes"),
    // Priorities
    row("enqueue-priority-ten", &["enqueue", "--redis", "{url}", "--tag", "bi", "--priority", "10", "x"], 2, "invalid value '10' for '--priority <N>': \"10\" is not a priority: a whole number from 0 (the default, lowest) to 9 (highest)"),
    row("enqueue-priority-negative", &["enqueue", "--redis", "{url}", "--tag", "bi", "--priority", "-1", "x"], 2, "invalid value '-1' for '--priority <N>': must not be negative"),
    row("enqueue-priority-text", &["enqueue", "--redis", "{url}", "--tag", "bi", "--priority", "high", "x"], 2, "invalid value 'high' for '--priority <N>': \"high\" is not a priority"),
    row("configure-priority-mode-word", &["configure", "--redis", "{url}", "--tag", "bi", "--priority-mode", "fair"], 2, "invalid value 'fair' for '--priority-mode <MODE>': \"fair\" is not a priority mode: strict or weighted"),
    // A schedule's job options (the flags and checks of enqueue)
    row("schedule-add-priority-twelve", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "1m", "--priority", "12", "x"], 2, "invalid value '12' for '--priority <N>': \"12\" is not a priority: a whole number from 0 (the default, lowest) to 9 (highest)"),
    row("schedule-add-priority-negative", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "1m", "--priority", "-1", "x"], 2, "invalid value '-1' for '--priority <N>': must not be negative"),
    row("schedule-add-timeout-zero", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "1m", "--timeout", "0s", "x"], 2, "invalid value '0s' for '--timeout <DURATION>': must be more than 0"),
    row("schedule-add-visibility-sub-ms", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "1m", "--visibility", "500us", "x"], 2, "invalid visibility: 500µs is too short (at least 1ms)"),
    row("schedule-add-max-attempts-zero", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "1m", "--max-attempts", "0", "x"], 2, "invalid max attempts: 0 is not between 1 and 1000000"),
    row("schedule-add-multiplier-below-one", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "1m", "--backoff-multiplier", "0.5", "x"], 2, "invalid backoff multiplier: 0.5 is not a number from 1 to 1000"),
    row("schedule-add-rate-key-empty", &["schedule", "add", "--redis", "{url}", "--tag", "bi", "s", "--every", "1m", "--rate-key", "", "x"], 2, "invalid rate key: 0 bytes: a rate key is 1 to 256 bytes"),
];

/// Rows of the library and the protocol (no process, no exit code: the doc says `-`):
/// id, text the error or outcome must contain, and whether Redis must be unchanged
/// (acks and extends with a stale token count themselves in `stats`).
const LIB_ROWS: &[(&str, &str, bool)] = &[
    ("lib-ack-stale-token", "acked: Ok(false)", false),
    ("lib-extend-stale-token", "extended: None", false),
    ("lib-fail-stale-token", "Stale", false),
    ("lib-id-empty", "must be 1 to 1024 bytes", true),
    ("lib-tag-braces", "must not contain braces", true),
    ("lib-delay-huge", "must be at most 10^15 ms", true),
    ("script-n-zero", "jobqueue: invalid n", true),
    ("script-delay-negative", "delay_ms", true),
    (
        "script-id-long",
        "jobqueue: invalid id: triple 1: expected an id of 1..1024 bytes, got 1025 bytes",
        true,
    ),
    (
        "lib-unique-mode-no-key",
        "a unique mode or window needs a unique key",
        true,
    ),
    (
        "script-unique-key-long",
        "jobqueue: invalid unique_key: triple 1: expected a key of 1..1024 bytes, got 1025 bytes",
        true,
    ),
    (
        "script-unique-mode",
        "jobqueue: invalid unique_mode: expected \"until-started\", \"until-done\" or \"debounce\", got \"forever\"",
        true,
    ),
    // Outcomes
    (
        "lib-result-huge",
        "65537 bytes is more than the 65536",
        true,
    ),
    (
        "lib-progress-percent",
        "101 is not a percent from 0 to 100",
        true,
    ),
    (
        "script-result-huge",
        "jobqueue: invalid result: expected at most 65536 bytes for pair 1, got 65537 bytes",
        true,
    ),
    (
        "script-progress-percent",
        "jobqueue: invalid progress: expected a percent 0..100 for pair 1, got \"101\"",
        true,
    ),
    (
        "script-notify-zero",
        "jobqueue: invalid notify: expected an integer 1..10^15 ms, got \"0\"",
        true,
    ),
    (
        "lib-job-timeout-zero",
        "invalid timeout: 0s is too short (at least 1ms)",
        true,
    ),
    (
        "script-timeout-zero",
        "jobqueue: invalid timeout_ms: expected an integer 1..10^15 ms, got \"0\"",
        true,
    ),
    (
        "script-visibility-exponent",
        "jobqueue: invalid visibility_timeout_ms: expected an integer 1..10^15 ms, got \"1e3\"",
        true,
    ),
    (
        "lib-priority-ten",
        "invalid priority: 10 is not between 0 and 9",
        true,
    ),
    (
        "script-priority-ten",
        "jobqueue: invalid priority: expected an integer 0..9, got \"10\"",
        true,
    ),
    (
        "script-priority-text",
        "jobqueue: invalid priority: expected an integer 0..9, got \"high\"",
        true,
    ),
];

/// Run one library or protocol row against queue `lb` (p1 claimed: `lease`).
async fn lib_case(id: &str, server: &RedisServer, lease: &jobqueue::queue::Lease) -> String {
    use jobqueue::queue::{Backoff, FailMode, NewJob, Queue, QueueSettings, SCRIPTS};
    let queue = server.queue("lb").await;
    let stale = (
        std::str::from_utf8(lease.id.as_bytes()).unwrap(),
        "not-the-token",
    );
    let keys = [
        "pending",
        "processing",
        "delayed",
        "dead",
        "meta",
        "stats",
        "wake",
    ]
    .map(|k| format!("jq:{{lb}}:{k}"));
    let script = |source: &str, extra_keys: &[&str], args: &[&str]| {
        let mut conn = server.conn();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(source)
            .arg(7 + extra_keys.len())
            .arg(&keys)
            .arg(extra_keys)
            .arg(args);
        match cmd.query::<redis::Value>(&mut conn) {
            Ok(v) => format!("{v:?}"),
            Err(e) => e.to_string(),
        }
    };
    match id {
        "lib-ack-stale-token" => format!("acked: {:?}", queue.ack(stale).await),
        "lib-extend-stale-token" => match queue.extend(stale, None).await {
            Ok(v) => format!("extended: {v:?}"),
            Err(e) => e.to_string(),
        },
        "lib-fail-stale-token" => {
            format!(
                "{:?}",
                queue
                    .fail(stale, "x", FailMode::Retry, Backoff::Policy)
                    .await
            )
        }
        "lib-id-empty" => match queue.enqueue(NewJob::new(&b"x"[..]).id("")).await {
            Ok(v) => format!("{v:?}"),
            Err(e) => e.to_string(),
        },
        "lib-tag-braces" => match Queue::new(server.redis().await, "jq", "{lb}") {
            Ok(_) => "accepted".into(),
            Err(e) => e.to_string(),
        },
        "lib-delay-huge" => {
            let settings = QueueSettings {
                dead_retention: Duration::from_secs(u64::MAX / 1000),
                ..QueueSettings::default()
            };
            match queue.configure(&settings).await {
                Ok(v) => format!("{v:?}"),
                Err(e) => e.to_string(),
            }
        }
        "script-n-zero" => script(SCRIPTS.enqueue.source, &[], &["jq:{lb}:job:", "0"]),
        "script-delay-negative" => script(
            SCRIPTS.enqueue.source,
            &["jq:{lb}:job:n1"],
            &["jq:{lb}:job:", "1", "n1", "x", "-1"],
        ),
        "script-id-long" => {
            let id = "i".repeat(1025);
            let key = format!("jq:{{lb}}:job:{id}");
            script(
                SCRIPTS.enqueue.source,
                &[&key],
                &["jq:{lb}:job:", "1", &id, "x", "0"],
            )
        }
        "lib-unique-mode-no-key" => {
            let job = NewJob::new(&b"x"[..]).unique_mode(jobqueue::queue::UniqueMode::Debounce);
            match queue.enqueue(job).await {
                Ok(v) => format!("{v:?}"),
                Err(e) => e.to_string(),
            }
        }
        // Outcomes
        "lib-result-huge" => {
            let big = vec![b'x'; jobqueue::queue::MAX_RESULT + 1];
            match queue.ack_many(&[lease.lease_ref().with_result(&big)]).await {
                Ok(v) => format!("{v:?}"),
                Err(e) => e.to_string(),
            }
        }
        "lib-job-timeout-zero" => {
            match queue
                .enqueue(NewJob::new(&b"x"[..]).timeout(Duration::ZERO))
                .await
            {
                Ok(v) => format!("{v:?}"),
                Err(e) => e.to_string(),
            }
        }
        "script-unique-key-long" => {
            let key = "k".repeat(1025);
            script(
                SCRIPTS.enqueue.source,
                &["jq:{lb}:job:u1"],
                &[
                    "jq:{lb}:job:",
                    "1",
                    "u1",
                    "x",
                    "0",
                    "unique",
                    "until-done",
                    "0",
                    &key,
                ],
            )
        }
        "script-unique-mode" => script(
            SCRIPTS.enqueue.source,
            &["jq:{lb}:job:u1"],
            &[
                "jq:{lb}:job:",
                "1",
                "u1",
                "x",
                "0",
                "unique",
                "forever",
                "0",
                "k",
            ],
        ),
        "lib-progress-percent" => match jobqueue::queue::Progress::new(101, "x") {
            Ok(v) => format!("{v:?}"),
            Err(e) => e.to_string(),
        },
        "script-result-huge" => {
            let big = "x".repeat(65537);
            let id = std::str::from_utf8(lease.id.as_bytes()).unwrap();
            let key = format!("jq:{{lb}}:job:{id}");
            script(
                SCRIPTS.ack.source,
                &[&key],
                &["jq:{lb}:job:", "1", id, &lease.token, "results", "1", &big],
            )
        }
        "script-progress-percent" => {
            let id = std::str::from_utf8(lease.id.as_bytes()).unwrap();
            let key = format!("jq:{{lb}}:job:{id}");
            script(
                SCRIPTS.extend.source,
                &[&key],
                &[
                    "jq:{lb}:job:",
                    "0",
                    "1",
                    id,
                    &lease.token,
                    "progress",
                    "1",
                    "101",
                    "x",
                ],
            )
        }
        "script-notify-zero" => script(
            SCRIPTS.enqueue.source,
            &["jq:{lb}:job:n2"],
            &[
                "jq:{lb}:job:",
                "1",
                "n2",
                "x",
                "0",
                "options",
                "notify",
                "0",
            ],
        ),
        "script-timeout-zero" | "script-visibility-exponent" => {
            let (name, value) = match id {
                "script-timeout-zero" => ("timeout_ms", "0"),
                _ => ("visibility_timeout_ms", "1e3"),
            };
            script(
                SCRIPTS.enqueue.source,
                &["jq:{lb}:job:o1"],
                &["jq:{lb}:job:", "1", "o1", "x", "0", "options", name, value],
            )
        }
        "lib-priority-ten" => match queue.enqueue(NewJob::new(&b"x"[..]).priority(10)).await {
            Ok(v) => format!("{v:?}"),
            Err(e) => e.to_string(),
        },
        "script-priority-ten" | "script-priority-text" => {
            let p = if id == "script-priority-ten" {
                "10"
            } else {
                "high"
            };
            script(
                SCRIPTS.enqueue.source,
                &["jq:{lb}:job:n1"],
                &[
                    "jq:{lb}:job:",
                    "1",
                    "n1",
                    "x",
                    "0",
                    "options",
                    "priority",
                    p,
                ],
            )
        }
        other => panic!("no case for {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_library_and_protocol_call_is_refused_or_counted() {
    use jobqueue::queue::NewJob;
    let server = RedisServer::start();
    let queue = server.queue("lb").await;
    queue
        .enqueue(NewJob::new(&b"x"[..]).id("p1"))
        .await
        .unwrap();
    let lease = queue.claim(1, "w", None).await.unwrap().remove(0);
    let mut conn = server.conn();
    let mut failures = Vec::new();
    for (id, says, unchanged) in LIB_ROWS {
        let before = snapshot(&mut conn);
        let got = lib_case(id, &server, &lease).await;
        let changed = before != snapshot(&mut conn);
        if !got.contains(says) || (*unchanged && changed) {
            failures.push(format!("{id}: got {got:?}, changed: {changed}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The doc's rows: id → (what you see, exit code).
fn doc_rows() -> BTreeMap<String, (String, i32)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/bad-input.md"))
        .expect("docs/bad-input.md");
    let mut rows = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(
            cells.len(),
            4,
            "a row has id, input, what you see, exit: {line}"
        );
        let id = cells[0].trim_matches('`').to_string();
        // `-`: a library or script row, with no process and no exit code.
        let code = match cells[3] {
            "-" => -1,
            c => c.parse().unwrap_or_else(|_| panic!("exit code of {line}")),
        };
        assert!(
            rows.insert(id, (cells[2].to_string(), code)).is_none(),
            "duplicate {line}"
        );
    }
    rows
}

#[test]
fn the_doc_table_and_the_test_table_name_the_same_rows() {
    let doc = doc_rows();
    assert!(doc.len() >= 120, "{} rows", doc.len());
    let ids: Vec<&str> = ROWS.iter().map(|r| r.id).collect();
    for r in ROWS {
        let (message, code) = doc
            .get(r.id)
            .unwrap_or_else(|| panic!("{} has no doc row", r.id));
        assert_eq!(*code, r.code, "{}: the doc says exit {code}", r.id);
        let quoted = message.replace('`', "");
        assert!(
            quoted.contains(r.says),
            "{}: the doc's message {message:?} lacks {:?}",
            r.id,
            r.says
        );
    }
    for (id, says, _) in LIB_ROWS {
        let (message, code) = doc
            .get(*id)
            .unwrap_or_else(|| panic!("{id} has no doc row"));
        assert_eq!(*code, -1, "{id}: a library row has exit `-`");
        assert!(
            message.replace('`', "").contains(says),
            "{id}: the doc lacks {says:?}"
        );
    }
    let ids: Vec<&str> = ids
        .into_iter()
        .chain(LIB_ROWS.iter().map(|r| r.0))
        .collect();
    for id in doc.keys() {
        assert!(ids.contains(&id.as_str()), "doc row {id} has no test row");
    }
    assert_eq!(ids.len(), doc.len(), "duplicate test rows");
}

/// A stand-in service on a loopback port that answers each connection with `reply`.
fn stand_in(reply: &'static [u8]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(reply);
            });
        }
    });
    port
}

/// Every key of the server with its DUMP: equal before and after means nothing changed.
fn snapshot(conn: &mut redis::Connection) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    let keys: Vec<Vec<u8>> = conn.keys("*").unwrap();
    keys.into_iter()
        .map(|k| {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(&k).query(conn).unwrap();
            (k, dump)
        })
        .collect()
}

struct Outcome {
    code: i32,
    stderr: String,
    stdout: String,
}

fn run(args: &[String], env: &[(&str, &str)], stdin: &[u8]) -> Outcome {
    let mut cmd = Command::new(BIN);
    for var in [
        "JOBQUEUE_REDIS_URL",
        "JOBQUEUE_CLUSTER",
        "JOBQUEUE_TAG",
        "JOBQUEUE_PREFIX",
        "JOBQUEUE_TLS_CA",
        "JOBQUEUE_USERNAME",
        "JOBQUEUE_TLS_CERT",
        "JOBQUEUE_TLS_KEY",
        "JOBQUEUE_SENTINEL",
        "JOBQUEUE_MASTER_NAME",
        "JOBQUEUE_DURABILITY",
        "JOBQUEUE_SENTINEL_PASSWORD",
        "JOBQUEUE_REDIS_PASSWORD",
    ] {
        cmd.env_remove(var);
    }
    use std::os::unix::ffi::OsStringExt;
    let args = args.iter().map(|a| match a.as_str() {
        "{non_utf8}" => std::ffi::OsString::from_vec(vec![0xff, 0xfe]),
        a => a.into(),
    });
    let mut child = cmd
        .args(args)
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .stdin(if stdin.is_empty() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin).unwrap();
    }
    // A guard against a row that hangs, not a wait for anything: well-behaved rows
    // end in well under a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            return Outcome {
                code: -1,
                stderr: format!(
                    "(still running after 10s) {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Outcome {
        code: out.status.code().expect("exited by a signal"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

fn seed(conn: &mut redis::Connection) {
    // A queue with two pending jobs and one dead one, written the way the scripts do.
    let now: i64 = 1_700_000_000_000;
    for id in ["p1", "p2"] {
        let _: () = conn
            .hset_multiple(
                format!("jq:{{bi}}:job:{id}"),
                &[
                    ("payload", "x"),
                    ("status", "pending"),
                    ("enqueued_at", &now.to_string()),
                ],
            )
            .unwrap();
        let _: () = conn.lpush("jq:{bi}:pending", id).unwrap();
    }
    let _: () = conn
        .hset_multiple(
            "jq:{bi}:job:d1",
            &[
                ("payload", "x"),
                ("status", "dead"),
                ("attempts", "5"),
                ("last_error", "boom"),
            ],
        )
        .unwrap();
    let _: () = conn.zadd("jq:{bi}:dead", "d1", now).unwrap();
    let _: () = conn.hset("jq:{bi}:meta", "max_attempts", 5).unwrap();
    // A queue whose max_attempts another client set to something that is not a number.
    let _: () = conn.hset("jq:{mb}:meta", "max_attempts", "banana").unwrap();
    // A queue whose job u1 holds the unique key `held`, as enqueue writes it.
    let _: () = conn
        .hset_multiple(
            "jq:{ubi}:job:u1",
            &[
                ("payload", "x"),
                ("enqueued_at", &now.to_string()),
                ("unique_key", "held"),
                ("unique_mode", "until-done"),
            ],
        )
        .unwrap();
    let _: () = conn.lpush("jq:{ubi}:pending", "u1").unwrap();
    let _: () = conn.set("jq:{ubi}:unique:held", "u1").unwrap();
    // A queue whose pending list was overwritten by something else.
    let _: () = conn.set("jq:{wt}:pending", "not a list").unwrap();
    // A queue of 3 partitions, recorded; and a record another client garbled.
    let _: () = conn.hset("jq:{parted}:meta", "partitions", 3).unwrap();
    let _: () = conn
        .hset("jq:{pgarbage}:meta", "partitions", "many")
        .unwrap();
}

fn write_files(dir: &Path) {
    std::fs::write(dir.join("big.bin"), vec![b'x'; 2 << 20]).unwrap();
    std::fs::write(dir.join("notpem.crt"), "this is not a certificate\n").unwrap();
    std::fs::write(
        dir.join("ca.pem"),
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
}

#[test]
fn every_bad_input_is_answered_with_its_code_and_message_and_changes_nothing() {
    let server = RedisServer::start();
    let small = RedisServer::start_with(&["--proto-max-bulk-len", "1mb"]);
    let garbage = stand_in(b"hello, this is not redis\r\n");
    let http =
        stand_in(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let closed = free_port();
    let auth = RedisServer::start_with(&["--requirepass", "s3cret-pw"]);
    let certs_dir = tempfile::tempdir().unwrap();
    let certs = support::certs::standard(certs_dir.path());
    certs.issue_v1("ca", "v1", "v1");
    let (_mtls, mtls_port) = support::certs::tls_server(&certs, "yes");
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &server.port.to_string()]);
    let sentinel_dir = tempfile::tempdir().unwrap();
    let sentinel = support::sentinel::start_sentinel(sentinel_dir.path(), server.port);
    let mut conn = server.conn();
    seed(&mut conn);
    // A user that may read the queue `bi` and nothing else.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("jq-reader")
        .arg("reset")
        .arg("on")
        .arg(">reader-pw")
        .arg("~jq:{bi}:*")
        .arg("+@read")
        .arg("+ping")
        .query(&mut conn)
        .unwrap();
    let reader_url = server
        .url()
        .replace("redis://", "redis://jq-reader:reader-pw@");
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path());
    let long_tag = "a".repeat(100_000);
    let long_id = "i".repeat(1025);
    let long_hex = "ab".repeat(1025);

    let mut failures = Vec::new();
    for r in ROWS {
        let url = match r.target {
            Target::Redis => server.url(),
            Target::SmallBulk => small.url(),
            Target::Garbage => format!("redis://127.0.0.1:{garbage}"),
            Target::Http => format!("redis://127.0.0.1:{http}"),
            Target::Closed => format!("redis://127.0.0.1:{closed}"),
            Target::Auth => auth.url(),
            Target::Mtls => format!("rediss://127.0.0.1:{mtls_port}"),
            Target::Replica => replica.url(),
        };
        let args: Vec<String> = r
            .args
            .iter()
            .map(|a| {
                a.replace("{url}", &url)
                    .replace("{tls_url}", &server.url().replace("redis://", "rediss://"))
                    .replace("{dir}", &dir.path().display().to_string())
                    .replace("{long_tag}", &long_tag)
                    .replace("{long_id}", &long_id)
                    .replace("{long_hex}", &long_hex)
                    .replace("{certs}", &certs.dir.display().to_string())
                    .replace("{reader_url}", &reader_url)
                    .replace(
                        "{reader_url_wrong}",
                        &server.url().replace("redis://", "redis://:wrong-pw@"),
                    )
                    .replace("{sentinel}", &format!("127.0.0.1:{}", sentinel.port))
                    .replace("{closed_addr}", &format!("127.0.0.1:{closed}"))
                    .replace(
                        "{auth_url}",
                        &auth.url().replace("redis://", "redis://:wrong-pw@"),
                    )
            })
            .collect();
        let before = snapshot(&mut conn);
        let out = run(&args, r.env, r.stdin);
        let after = snapshot(&mut conn);
        let mut wrong = Vec::new();
        if out.code != r.code {
            wrong.push(format!("exit {} (expected {})", out.code, r.code));
        }
        if r.writes {
            if !out.stderr.contains(r.says) && !out.stdout.contains(r.says) {
                wrong.push(format!("stdout and stderr lack {:?}", r.says));
            }
        } else if !out.stderr.contains(r.says) {
            wrong.push(format!("stderr lacks {:?}", r.says));
        }
        if r.code != 0 && !out.stderr.lines().any(|l| l.starts_with("error: ")) {
            wrong.push("no `error:` line".into());
        }
        if before != after && !r.writes {
            wrong.push("Redis changed".into());
        }
        if ["wrong-pw", "s3cret-pw", "reader-pw"]
            .iter()
            .any(|pw| out.stderr.contains(pw))
        {
            wrong.push("a password is shown".into());
        }
        if !wrong.is_empty() {
            let stderr: String = out.stderr.chars().take(400).collect();
            let stdout: String = out.stdout.chars().take(200).collect();
            failures.push(format!(
                "{}: {}\n    stderr: {stderr}\n    stdout: {stdout}",
                r.id,
                wrong.join("; ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        ROWS.len(),
        failures.join("\n")
    );
}

/// `jobqueue worker` on a tag with no queue says so at start, then keeps waiting for
/// jobs (a note, not an error) and still stops on SIGTERM with success.
#[test]
fn a_worker_on_a_tag_with_no_queue_notes_it_and_keeps_running() {
    use std::io::BufRead;
    let server = RedisServer::start();
    let mut child = Command::new(BIN)
        .args([
            "worker",
            "--redis",
            &server.url(),
            "--tag",
            "nosuch",
            "--exec",
            "true",
        ])
        .env_remove("JOBQUEUE_TAG")
        .env_remove("JOBQUEUE_PREFIX")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("no queue exists at jq:{nosuch}"), "{first}");
    // After the note the worker runs: a job enqueued now is done, and only then is the
    // worker told to stop (its signal handlers are in place once it works).
    let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let mut conn = server.conn();
    let _: () = conn.hset("jq:{nosuch}:job:j1", "payload", "x").unwrap();
    let _: () = conn
        .hset("jq:{nosuch}:job:j1", "status", "pending")
        .unwrap();
    let _: () = conn.lpush("jq:{nosuch}:pending", "j1").unwrap();
    support::eventually::Wait::for_("the worker to ack j1")
        .within(Duration::from_secs(20))
        .until_blocking(|| {
            let acked: Option<u64> = conn.hget("jq:{nosuch}:stats", "acked").unwrap();
            acked == Some(1)
        });
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    drain.join().unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
