//! Which queues the console shows: the tags given, the queues found by a scan of one
//! Redis, or the JobQueues of a Kubernetes cluster, each reached with the Secrets its
//! spec names (as the operator does; read with the user's kubeconfig).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::controller::Settings;
use crate::controller::cluster_reads::resolve_endpoint;
use crate::controller::validate::plan;
use crate::crd::JobQueue;
use crate::queue::{Durability, Queue, QueueStats, Redis};

/// How often a scan for queue keys runs again by default (new queues appear, deleted
/// ones go): a scan reads the whole keyspace, job hashes included, so not every refresh.
pub const RESCAN: Duration = Duration::from_secs(30);
/// How long a JobQueue whose Redis or Secrets could not be read waits before the next
/// try (a connection attempt may take the whole connect timeout).
const RETRY: Duration = Duration::from_secs(30);
/// SCAN's COUNT hint: keys looked at per call.
const SCAN_COUNT: usize = 1000;

/// One queue the console shows.
#[derive(Clone)]
pub struct Found {
    /// How pages and the API name it: the tag, or `namespace/name` of its JobQueue.
    pub id: String,
    /// `None` when it cannot be reached (then `problem` says why).
    pub queue: Option<Queue>,
    /// Why the queue cannot be read, with no credential in it.
    pub problem: Option<String>,
    pub kube: Option<KubeInfo>,
    /// Every partition of a partitioned queue (the layout the queue records, see
    /// `queue::PartitionRecord`), `queue` among them; empty for an unpartitioned one.
    pub parts: Vec<Queue>,
}

impl Found {
    /// The queue's counts: its own, or the sum over its partitions. `None` when it cannot
    /// be reached.
    pub async fn stats(&self) -> Option<crate::queue::Result<QueueStats>> {
        let queue = self.queue.as_ref()?;
        if self.parts.is_empty() {
            return Some(queue.stats().await);
        }
        let each = futures::future::try_join_all(self.parts.iter().map(|q| q.stats())).await;
        Some(each.map(|each| {
            let mut total = QueueStats::default();
            for s in &each {
                crate::queue::add_stats(&mut total, s);
            }
            total
        }))
    }
}

/// The partitions of `queue` (a queue's own tag) that its record names, or of `fallback`
/// partitions when it records none; empty for one partition. A record that cannot be
/// read counts as none.
async fn parts_of(queue: &Queue, tag: &str, fallback: usize) -> Vec<Queue> {
    let layout = match queue.partition_record().await.ok().flatten() {
        Some(record) => record.layout(tag),
        None => crate::queue::PartitionLayout::new(tag, fallback, fallback),
    };
    let Ok(layout) = layout else {
        return Vec::new();
    };
    if layout.tags.len() <= 1 {
        return Vec::new();
    }
    let prefix = queue
        .name()
        .rsplit_once(":{")
        .map_or("", |(prefix, _)| prefix)
        .to_string();
    layout
        .tags
        .iter()
        .filter_map(|t| {
            Queue::new(queue.redis().clone(), &prefix, t)
                .ok()
                .map(|q| q.durability(queue.durability_setting()))
        })
        .collect()
}

/// Tags grouped by queue: a tag whose queue records a partition count stands for all its
/// partitions, whose own tags (`parts~2`, `parts~1`) are not listed apart. Of a scan,
/// only the tags `T` some other tag `T~k` was found beside are asked for a record (a
/// queue whose other partitions hold no key counts the same alone), the asks in
/// parallel; `every` asks each (tags given by name).
async fn grouped(found: Vec<Found>, every: bool) -> Vec<Found> {
    let names: BTreeSet<&str> = found.iter().map(|f| f.id.as_str()).collect();
    let partitioned = |tag: &str| {
        every
            || names.iter().any(|n| {
                n.strip_prefix(tag)
                    .and_then(|rest| rest.strip_prefix('~'))
                    .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
            })
    };
    let asks: Vec<bool> = found.iter().map(|f| partitioned(&f.id)).collect();
    let out: Vec<Found> = futures::stream::iter(found.into_iter().zip(asks))
        .map(|(mut f, ask)| async move {
            if ask && let Some(q) = &f.queue {
                f.parts = parts_of(q, &f.id, 1).await;
            }
            f
        })
        .buffered(16)
        .collect()
        .await;
    let members: BTreeSet<String> = out
        .iter()
        .flat_map(|f| f.parts.iter().map(|q| q.name().to_string()))
        .collect();
    out.into_iter()
        .filter(|f| {
            !f.parts.is_empty() || f.queue.as_ref().is_none_or(|q| !members.contains(q.name()))
        })
        .collect()
}

/// What the JobQueue says beside the Redis counts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KubeInfo {
    pub namespace: String,
    pub name: String,
    /// `Kind/name` of the worker workload the operator scales, when the spec names one.
    pub workers: Option<String>,
    pub desired_replicas: Option<i32>,
    pub current_replicas: Option<i32>,
    pub conditions: Vec<KubeCondition>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct KubeCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// A JobQueue as last connected (or not).
pub struct Connected {
    generation: Option<i64>,
    at: Instant,
    found: Found,
}

/// Where the queues come from.
pub enum Source {
    /// One Redis: the tags given, or (none given) a scan for `PREFIX:{tag}:stats` and
    /// `PREFIX:{tag}:meta` keys, again every `rescan`.
    Redis {
        redis: Redis,
        prefix: String,
        tags: Option<Vec<String>>,
        durability: Durability,
        rescan: Duration,
        scanned: Mutex<Option<(Instant, Vec<Found>)>>,
    },
    /// The JobQueues of a cluster (of one namespace, or all).
    Kubernetes {
        client: Client,
        namespace: Option<String>,
        settings: Settings,
        /// Queues by `namespace/name`, with the spec generation they were made for (a new
        /// generation, another URL, tag or Secret reference, connects again) and when: one
        /// that could not be reached is tried again after [`RETRY`], not at every refresh.
        connected: tokio::sync::Mutex<BTreeMap<String, Connected>>,
    },
}

impl Source {
    /// A source of one Redis.
    pub fn redis(
        redis: Redis,
        prefix: &str,
        tags: Option<Vec<String>>,
        durability: Durability,
        rescan: Duration,
    ) -> Source {
        Source::Redis {
            redis,
            prefix: prefix.to_string(),
            tags,
            durability,
            rescan,
            scanned: Mutex::new(None),
        }
    }

    /// A source of a cluster's JobQueues.
    pub fn kubernetes(client: Client, namespace: Option<String>) -> Source {
        Source::Kubernetes {
            client,
            namespace,
            settings: Settings {
                connect_timeout: Duration::from_secs(3),
                response_timeout: Duration::from_secs(5),
                ..Settings::default()
            },
            connected: tokio::sync::Mutex::default(),
        }
    }

    /// The queues now, sorted by id.
    pub async fn list(&self) -> anyhow::Result<Vec<Found>> {
        match self {
            Source::Redis {
                redis,
                prefix,
                tags,
                durability,
                rescan,
                scanned,
            } => {
                let build = |tag: &str| -> Found {
                    match Queue::new(redis.clone(), prefix, tag) {
                        Ok(q) => Found {
                            id: tag.to_string(),
                            queue: Some(q.durability(*durability)),
                            problem: None,
                            kube: None,
                            parts: Vec::new(),
                        },
                        Err(e) => Found {
                            id: tag.to_string(),
                            queue: None,
                            problem: Some(e.to_string()),
                            kube: None,
                            parts: Vec::new(),
                        },
                    }
                };
                if let Some(tags) = tags {
                    return Ok(grouped(tags.iter().map(|t| build(t)).collect(), true).await);
                }
                if let Some((at, found)) = scanned.lock().expect("scan lock").as_ref()
                    && at.elapsed() < *rescan
                {
                    return Ok(found.clone());
                }
                let tags = scan_tags(redis, prefix).await?;
                let found = grouped(tags.iter().map(|t| build(t)).collect(), false).await;
                *scanned.lock().expect("scan lock") = Some((Instant::now(), found.clone()));
                Ok(found)
            }
            Source::Kubernetes {
                client,
                namespace,
                settings,
                connected,
            } => list_kubernetes(client, namespace.as_deref(), settings, connected).await,
        }
    }

    /// A short description for the start-up line and the page header.
    pub fn describe(&self) -> String {
        match self {
            Source::Redis { redis, tags, .. } => match tags {
                Some(tags) => format!("{} ({} tags given)", redis.endpoint(), tags.len()),
                None => format!("{} (queues found by a scan)", redis.endpoint()),
            },
            Source::Kubernetes { namespace, .. } => match namespace {
                Some(ns) => format!("the JobQueues of namespace {ns}"),
                None => "the JobQueues of every namespace".to_string(),
            },
        }
    }
}

/// The tags of the queues of `prefix` on one Redis: every `PREFIX:{tag}:stats` or
/// `PREFIX:{tag}:meta` key (a queue that ever had a job has the first; one configured
/// before its first job, the second).
pub async fn scan_tags(redis: &Redis, prefix: &str) -> anyhow::Result<Vec<String>> {
    let mut conn = redis.clone();
    let mut tags = BTreeSet::new();
    for suffix in ["stats", "meta"] {
        let pattern = format!("{}:{{*}}:{suffix}", glob_escape(prefix));
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut conn)
                .await
                .map_err(|e| anyhow::anyhow!("cannot scan {} for queues: {e}", redis.endpoint()))?;
            for key in keys {
                if let Some(tag) = tag_of(&key, prefix, suffix) {
                    tags.insert(tag);
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    Ok(tags.into_iter().collect())
}

/// `prefix:{tag}:suffix` → `tag`, when the key is exactly that and the tag is valid.
fn tag_of(key: &[u8], prefix: &str, suffix: &str) -> Option<String> {
    let key = std::str::from_utf8(key).ok()?;
    let rest = key.strip_prefix(prefix)?.strip_prefix(":{")?;
    let tag = rest.strip_suffix(suffix)?.strip_suffix("}:")?;
    crate::queue::validate_tag(tag).ok()?;
    Some(tag.to_string())
}

/// `prefix` as a SCAN pattern that matches only itself.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

async fn list_kubernetes(
    client: &Client,
    namespace: Option<&str>,
    settings: &Settings,
    connected: &tokio::sync::Mutex<BTreeMap<String, Connected>>,
) -> anyhow::Result<Vec<Found>> {
    let api: Api<JobQueue> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("cannot list the JobQueues: {e}"))?;
    let mut connected = connected.lock().await;
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for jq in list.items {
        let ns = jq.namespace().unwrap_or_default();
        let name = jq.name_any();
        let id = format!("{ns}/{name}");
        seen.insert(id.clone());
        let info = kube_info(&jq, &ns, &name);
        let generation = jq.metadata.generation;
        let reuse = connected
            .get(&id)
            .filter(|c| {
                c.generation == generation && (c.found.queue.is_some() || c.at.elapsed() < RETRY)
            })
            .map(|c| c.found.clone());
        let mut found = match reuse {
            Some(found) => found,
            None => {
                let found = connect(client, settings, &ns, &id, &jq).await;
                connected.insert(
                    id.clone(),
                    Connected {
                        generation,
                        at: Instant::now(),
                        found: found.clone(),
                    },
                );
                found
            }
        };
        found.kube = Some(info);
        out.push(found);
    }
    connected.retain(|id, _| seen.contains(id));
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Reach a JobQueue's Redis as the operator does: check the spec, read the Secrets it
/// names, connect.
async fn connect(client: &Client, settings: &Settings, ns: &str, id: &str, jq: &JobQueue) -> Found {
    let failed = |problem: String| Found {
        id: id.to_string(),
        queue: None,
        problem: Some(problem),
        kube: None,
        parts: Vec::new(),
    };
    let plan = match plan(&jq.spec) {
        Ok(plan) => plan,
        Err(e) => return failed(format!("invalid spec: {}: {}", e.field, e.reason)),
    };
    let endpoint = match resolve_endpoint(client, settings, ns, &plan.endpoint).await {
        Ok(endpoint) => endpoint,
        Err(f) => return failed(format!("{}: {}", f.reason, f.message)),
    };
    let redis = match Redis::connect(&endpoint.options).await {
        Ok(redis) => redis,
        Err(e) => return failed(e.to_string()),
    };
    match Queue::new(redis, &plan.prefix, &plan.tag) {
        Ok(queue) => Found {
            id: id.to_string(),
            parts: parts_of(&queue, &plan.tag, plan.partitions).await,
            queue: Some(queue),
            problem: None,
            kube: None,
        },
        Err(e) => failed(e.to_string()),
    }
}

fn kube_info(jq: &JobQueue, ns: &str, name: &str) -> KubeInfo {
    let status = jq.status.clone().unwrap_or_default();
    KubeInfo {
        namespace: ns.to_string(),
        name: name.to_string(),
        workers: jq
            .spec
            .workers
            .as_ref()
            .map(|w| format!("{}/{}", w.scale_target_ref.kind, w.scale_target_ref.name)),
        desired_replicas: status.desired_replicas,
        current_replicas: status.current_replicas,
        conditions: status
            .conditions
            .iter()
            .map(|c| KubeCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_read_off_queue_keys_only() {
        assert_eq!(
            tag_of(b"jq:{emails}:stats", "jq", "stats").as_deref(),
            Some("emails")
        );
        assert_eq!(
            tag_of(b"jq:{a:b}:meta", "jq", "meta").as_deref(),
            Some("a:b")
        );
        assert_eq!(tag_of(b"jq:{emails}:job:1", "jq", "stats"), None);
        assert_eq!(tag_of(b"other:{emails}:stats", "jq", "stats"), None);
        assert_eq!(tag_of(b"jq:{}:stats", "jq", "stats"), None);
        assert_eq!(glob_escape("a*b[c]"), "a\\*b\\[c\\]");
    }
}
