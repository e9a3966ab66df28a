//! The audit log: one structured line (tracing target `jobqueue::audit`) per write, per
//! login, failed login and logout, and per outage of a queue or of the queue listing
//! and its end. A line names who (`bearer`, `session N`, never a token or session id),
//! from where, and what; Redis errors are the client's, whose endpoints are redacted.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Console;

pub const TARGET: &str = "jobqueue::audit";

fn peer_text(peer: Option<SocketAddr>) -> String {
    peer.map_or_else(|| "-".to_string(), |p| p.to_string())
}

/// A write was asked for (POST): its path, the answer's status, who and from where.
pub fn write(method: &str, path: &str, status: u16, who: &str, peer: Option<SocketAddr>) {
    tracing::info!(
        target: TARGET,
        event = "write",
        method,
        path,
        status,
        who,
        peer = %peer_text(peer),
        "console write"
    );
}

/// What a write did to a queue.
pub fn write_done(queue: &str, action: &str, done: u64) {
    tracing::info!(target: TARGET, event = "write_done", queue, action, done, "console write done");
}

pub fn login(serial: u64, peer: Option<SocketAddr>) {
    tracing::info!(target: TARGET, event = "login", session = serial, peer = %peer_text(peer), "console login");
}

pub fn login_failed(peer: Option<SocketAddr>, limited: bool) {
    tracing::warn!(
        target: TARGET,
        event = "login_failed",
        peer = %peer_text(peer),
        rate_limited = limited,
        "console login refused"
    );
}

pub fn logout(serial: Option<u64>, peer: Option<SocketAddr>) {
    tracing::info!(target: TARGET, event = "logout", session = serial, peer = %peer_text(peer), "console logout");
}

/// Watch the snapshot after each refresh and log each outage as it starts and ends: a
/// queue whose read fails, and the listing of queues.
pub fn spawn_outage_watch(console: Arc<Console>, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut down: BTreeMap<String, String> = BTreeMap::new();
        let mut listing_down = false;
        let mut seen_seq = u64::MAX;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(console.config.refresh) => {}
                _ = shutdown.cancelled() => return,
            }
            let snap = console.snapshot.get();
            if snap.seq == seen_seq {
                continue;
            }
            seen_seq = snap.seq;
            match (&snap.error, listing_down) {
                (Some(error), false) => {
                    tracing::warn!(target: TARGET, event = "outage", queue = "*", error = %error, "listing the queues fails");
                    listing_down = true;
                }
                (None, true) => {
                    tracing::info!(target: TARGET, event = "recovered", queue = "*", "listing the queues works again");
                    listing_down = false;
                }
                _ => {}
            }
            for (id, entry) in &snap.entries {
                match (&entry.error, down.contains_key(id)) {
                    (Some(error), false) => {
                        tracing::warn!(target: TARGET, event = "outage", queue = %id, error = %error, "a queue cannot be read");
                        down.insert(id.clone(), error.clone());
                    }
                    (None, true) => {
                        tracing::info!(target: TARGET, event = "recovered", queue = %id, "a queue is read again");
                        down.remove(id);
                    }
                    _ => {}
                }
            }
            down.retain(|id, _| snap.entries.contains_key(id));
        }
    });
}
