//! The pool of Redis clients: one per distinct endpoint, shared by every queue that
//! uses it.
//!
//! The cache key is the endpoint's redacted URL, the cluster flag and a keyed hash of
//! the full URL, password and CA bundle: credentials never sit in a key that could be
//! printed, and a rotated password makes a new client. Each endpoint connects under its
//! own lock, so an unreachable Redis never holds up the queues of another; a failed
//! connect is not cached, the next reconcile tries again.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::queue::{ConnectOptions, Redis, Result};

/// Endpoints unused for this long are dropped (their queues were deleted or moved).
const IDLE: Duration = Duration::from_secs(15 * 60);

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    endpoint: String,
    cluster: bool,
    secret_hash: u64,
}

struct Slot {
    redis: tokio::sync::Mutex<Option<Redis>>,
    last_used: Mutex<Instant>,
}

/// The connection options of an endpoint, with credentials.
#[derive(Clone)]
pub struct Endpoint {
    pub options: ConnectOptions,
    /// PEM CA bundle for TLS, when the spec names one.
    pub ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.options.redacted_url())
            .field("cluster", &self.options.cluster)
            .field("password", &self.options.password.as_ref().map(|_| "***"))
            .field("ca", &self.ca.as_ref().map(|c| c.len()))
            .finish()
    }
}

/// The shared clients, one per endpoint.
pub struct RedisPool {
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
    hasher: RandomState,
}

impl Default for RedisPool {
    fn default() -> Self {
        RedisPool {
            slots: Mutex::default(),
            hasher: RandomState::new(),
        }
    }
}

impl RedisPool {
    fn key(&self, endpoint: &Endpoint) -> Key {
        let mut h = self.hasher.build_hasher();
        endpoint.options.url.hash(&mut h);
        endpoint.options.password.hash(&mut h);
        endpoint.ca.hash(&mut h);
        // A new user or client certificate makes a new client, as a new password does.
        endpoint.options.username.hash(&mut h);
        endpoint.options.client_cert.hash(&mut h);
        endpoint.options.client_key.hash(&mut h);
        endpoint.options.tls_server_name.hash(&mut h);
        // Through Sentinel: their password and TLS to the data nodes.
        if let Some(sentinel) = &endpoint.options.sentinel {
            sentinel.password.hash(&mut h);
            sentinel.tls.hash(&mut h);
        }
        Key {
            endpoint: endpoint.options.redacted_url(),
            cluster: endpoint.options.cluster,
            secret_hash: h.finish(),
        }
    }

    /// The client for `endpoint`, connecting on first use.
    pub async fn get(&self, endpoint: &Endpoint) -> Result<Redis> {
        let key = self.key(endpoint);
        let slot = {
            let mut slots = self.slots.lock().expect("redis pool lock");
            let now = Instant::now();
            slots.retain(|k, slot| {
                *k == key || now.duration_since(*slot.last_used.lock().expect("slot lock")) < IDLE
            });
            slots
                .entry(key)
                .or_insert_with(|| {
                    Arc::new(Slot {
                        redis: tokio::sync::Mutex::new(None),
                        last_used: Mutex::new(now),
                    })
                })
                .clone()
        };
        *slot.last_used.lock().expect("slot lock") = Instant::now();
        let mut redis = slot.redis.lock().await;
        if let Some(redis) = redis.as_ref() {
            return Ok(redis.clone());
        }
        let connected = Redis::connect(&endpoint.options).await?;
        *redis = Some(connected.clone());
        Ok(connected)
    }

    /// How many endpoints have a client.
    pub fn len(&self) -> usize {
        self.slots.lock().expect("redis pool lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(url: &str, password: Option<&str>) -> Endpoint {
        Endpoint {
            options: ConnectOptions::new(url).password(password.map(String::from)),
            ca: None,
        }
    }

    #[test]
    fn keys_separate_credentials_without_holding_them() {
        let e = RedisPool::default();
        let a = e.key(&endpoint("redis://h:6379", Some("one")));
        let b = e.key(&endpoint("redis://h:6379", Some("two")));
        let a2 = e.key(&endpoint("redis://h:6379", Some("one")));
        assert!(a == a2);
        assert!(a != b, "a rotated password makes a new client");
        assert_eq!(a.endpoint, "redis://h:6379");
        let c = e.key(&endpoint("redis://u:secret@h:6379", None));
        assert_eq!(c.endpoint, "redis://u:***@h:6379");
        let printed = format!("{:?}", endpoint("redis://u:secret@h:6379", Some("pw")));
        assert!(
            !printed.contains("secret") && !printed.contains("pw\""),
            "{printed}"
        );
    }
}
