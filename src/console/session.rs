//! Login sessions: one random id per login, kept on the server with its expiry, ended
//! by logout; and the cookie that carries it.
//!
//! The cookie's name holds the console's port (`jq_console_8740`), so that two consoles
//! (or any other app) on other ports of the same host, to which the browser sends the
//! same cookies, neither overwrite it nor have theirs taken: a value this console did
//! not hand out at a login is no session here, whatever its name. Behind TLS
//! (`X-Forwarded-Proto: https` from the proxy, or an `https` origin) the cookie is
//! `Secure` with the `__Host-` prefix, so no plain-HTTP page of the host can set it.
//! Always `HttpOnly` (no script reads it) and `SameSite=Strict`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};

/// How long a session lasts from its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// The most sessions kept at once (the oldest is dropped for a new one).
const MAX_SESSIONS: usize = 1000;

struct Session {
    expires: Instant,
    /// A number for the audit log, which never shows the id itself.
    serial: u64,
}

/// The sessions of the logins so far.
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    serial: std::sync::atomic::AtomicU64,
    ttl: Duration,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions::new(SESSION_TTL)
    }
}

impl Sessions {
    /// Sessions that last `ttl` from their login.
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            map: Mutex::default(),
            serial: Default::default(),
            ttl,
        }
    }

    /// A new session: its id (128 random bits, hex) and its serial number.
    pub fn create(&self) -> (String, u64) {
        let id = crate::queue::new_token();
        let serial = self
            .serial
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let now = Instant::now();
        let mut map = self.map.lock().expect("sessions lock");
        map.retain(|_, s| s.expires > now);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            id.clone(),
            Session {
                expires: now + self.ttl,
                serial,
            },
        );
        (id, serial)
    }

    /// The serial number of a live session with this id.
    pub fn check(&self, id: &str) -> Option<u64> {
        let mut map = self.map.lock().expect("sessions lock");
        let session = map.get(id)?;
        if session.expires <= Instant::now() {
            map.remove(id);
            return None;
        }
        Some(session.serial)
    }

    /// End a session (logout); its serial number if it was live.
    pub fn end(&self, id: &str) -> Option<u64> {
        self.map
            .lock()
            .expect("sessions lock")
            .remove(id)
            .map(|s| s.serial)
    }
}

/// Whether the browser reached the console over TLS (through a proxy that says so).
pub fn over_tls(headers: &HeaderMap) -> bool {
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("https://"));
    forwarded || origin
}

/// The cookie's name for the console on `port`.
pub fn cookie_name(port: u16, tls: bool) -> String {
    if tls {
        format!("__Host-jq_console_{port}")
    } else {
        format!("jq_console_{port}")
    }
}

/// `Set-Cookie` for a new session.
pub fn set_cookie(port: u16, tls: bool, id: &str) -> String {
    format!(
        "{}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        cookie_name(port, tls),
        SESSION_TTL.as_secs(),
        if tls { "; Secure" } else { "" }
    )
}

/// `Set-Cookie` that removes the session's cookie.
pub fn clear_cookie(port: u16, tls: bool) -> String {
    format!(
        "{}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
        cookie_name(port, tls),
        if tls { "; Secure" } else { "" }
    )
}

/// The session id the request carries for the console on `port`, under either name.
pub fn session_id(headers: &HeaderMap, port: u16) -> Option<&str> {
    let names = [cookie_name(port, false), cookie_name(port, true)];
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, v)| names.iter().any(|n| n == k) && !v.is_empty())
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_login_is_its_own_session_and_logout_ends_it() {
        let sessions = Sessions::default();
        let (a, sa) = sessions.create();
        let (b, sb) = sessions.create();
        assert_ne!(a, b);
        assert_ne!(sa, sb);
        assert_eq!(sessions.check(&a), Some(sa));
        assert_eq!(sessions.end(&a), Some(sa));
        assert_eq!(sessions.check(&a), None);
        assert_eq!(sessions.check(&b), Some(sb));
        assert_eq!(sessions.check("not-a-session"), None);
        // An expired session is no session.
        let short = Sessions::new(Duration::ZERO);
        let (c, _) = short.create();
        assert_eq!(short.check(&c), None);
    }

    #[test]
    fn the_cookie_is_bound_to_the_port() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "jq_console=old; jq_console_9000=other; jq_console_8740=mine"
                .parse()
                .unwrap(),
        );
        assert_eq!(session_id(&h, 8740), Some("mine"));
        assert_eq!(session_id(&h, 9000), Some("other"));
        assert_eq!(session_id(&h, 1234), None);
        let c = set_cookie(8740, true, "x");
        assert!(c.starts_with("__Host-jq_console_8740=x;"), "{c}");
        assert!(c.contains("Secure") && c.contains("HttpOnly") && c.contains("SameSite=Strict"));
        assert!(!set_cookie(8740, false, "x").contains("Secure"));
    }
}
