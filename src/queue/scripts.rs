//! The protocol scripts, compiled into the binary from `lua/` and called by SHA.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, RedisResult, ServerErrorKind, Value};

/// One script of `lua/`.
pub struct Script {
    pub name: &'static str,
    pub source: &'static str,
    pub sha: String,
}

impl Script {
    fn new(name: &'static str, source: &'static str) -> Script {
        let sha = redis::Script::new(source).get_hash().to_string();
        Script { name, source, sha }
    }

    /// Start an `EVALSHA sha numkeys` command; the caller appends KEYS then ARGV.
    pub fn cmd(&self, numkeys: usize) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha).arg(numkeys);
        cmd
    }

    /// Send a command made by [`Script::cmd`]; on NOSCRIPT (a restarted or failed-over
    /// server forgot the script), load it and try once more.
    pub async fn run<C: ConnectionLike>(&self, conn: &mut C, cmd: &Cmd) -> RedisResult<Value> {
        match cmd.query_async::<Value>(conn).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load(conn).await?;
                cmd.query_async(conn).await
            }
            other => other,
        }
    }

    pub async fn load<C: ConnectionLike>(&self, conn: &mut C) -> RedisResult<()> {
        let _: Value = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(self.source)
            .query_async(conn)
            .await?;
        Ok(())
    }
}

/// Every script of the protocol.
pub struct Scripts {
    pub enqueue: Script,
    pub claim: Script,
    pub settle_claim: Script,
    pub ack: Script,
    pub extend: Script,
    pub fail: Script,
    pub reap: Script,
    pub stats: Script,
    pub redrive: Script,
    pub purge: Script,
    pub preview: Script,
    pub manage: Script,
    pub schedule: Script,
}

impl Scripts {
    pub fn all(&self) -> [&Script; 13] {
        [
            &self.enqueue,
            &self.claim,
            &self.settle_claim,
            &self.ack,
            &self.extend,
            &self.fail,
            &self.reap,
            &self.stats,
            &self.redrive,
            &self.purge,
            &self.preview,
            &self.manage,
            &self.schedule,
        ]
    }
}

pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    enqueue: Script::new("enqueue", include_str!("../../lua/enqueue.lua")),
    claim: Script::new("claim", include_str!("../../lua/claim.lua")),
    settle_claim: Script::new("settle_claim", include_str!("../../lua/settle_claim.lua")),
    ack: Script::new("ack", include_str!("../../lua/ack.lua")),
    extend: Script::new("extend", include_str!("../../lua/extend.lua")),
    fail: Script::new("fail", include_str!("../../lua/fail.lua")),
    reap: Script::new("reap", include_str!("../../lua/reap.lua")),
    stats: Script::new("stats", include_str!("../../lua/stats.lua")),
    redrive: Script::new("redrive", include_str!("../../lua/redrive.lua")),
    purge: Script::new("purge", include_str!("../../lua/purge.lua")),
    preview: Script::new("preview", include_str!("../../lua/preview.lua")),
    manage: Script::new("manage", include_str!("../../lua/manage.lua")),
    schedule: Script::new("schedule", include_str!("../../lua/schedule.lua")),
});
