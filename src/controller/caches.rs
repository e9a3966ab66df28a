//! What the controller watches besides the JobQueues: the Secrets the queues name, the
//! HorizontalPodAutoscalers, and the Deployments and StatefulSets they scale.
//!
//! Each is a reflector cache (a [`Store`]) that the reconciles read instead of a GET or a
//! LIST per queue per reconcile, and a trigger: a Secret created or changed, or a target
//! created, reconciles the queues that name it at once ([`queues_naming_secret`],
//! [`queues_scaling`]), instead of waiting for their backoff.
//!
//! A cache that is absent (the tests build contexts without one) or not synced yet, and
//! an object it does not hold, fall back to the API read of `cluster_reads`: the caches
//! make reads cheaper, never different.
//!
//! Memory: the cached objects are trimmed before they are stored ([`trim_secret`],
//! [`trim_deployment`], ...): no managed fields, no annotations (a
//! `last-applied-configuration` may hold a Secret's whole data), no pod templates and no
//! status. Helm release Secrets and service-account tokens (the bulk of most clusters'
//! Secrets, and never a Redis endpoint) are left out by a field selector
//! ([`SECRET_FIELDS`]).

use std::sync::Arc;

use std::hash::{Hash, Hasher};

use futures::FutureExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Client, ResourceExt};

use super::ownership;
use super::scaling::TargetRef;
use super::validate;
use crate::crd::JobQueue;

/// The Secrets the controller caches: all but Helm releases and service-account tokens.
pub const SECRET_FIELDS: &str =
    "type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token";

/// The reflector caches a reconcile reads from; each `None` is read from the API.
#[derive(Clone, Default)]
pub struct Caches {
    pub secrets: Option<Store<Secret>>,
    pub hpas: Option<Store<HorizontalPodAutoscaler>>,
    pub deployments: Option<Store<Deployment>>,
    pub stateful_sets: Option<Store<StatefulSet>>,
    /// KEDA's ScaledObjects, watched when KEDA was installed as the controller started.
    pub scaled_objects: Option<Store<DynamicObject>>,
    /// Whether KEDA's ScaledObject API existed as the controller started: `Some(false)`,
    /// no ScaledObject can claim a target (and none is listed); `None`, unknown (listed
    /// per reconcile, as without caches).
    pub keda_installed: Option<bool>,
}

/// The store, once its first list is in (before, an absent object proves nothing).
fn synced<K>(store: &Option<Store<K>>) -> Option<&Store<K>>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let store = store.as_ref()?;
    store
        .wait_until_ready()
        .now_or_never()
        .is_some_and(|r| r.is_ok())
        .then_some(store)
}

impl Caches {
    /// The Secret `ns/name` from the cache, when the cache holds it.
    pub fn secret(&self, ns: &str, name: &str) -> Option<Arc<Secret>> {
        synced(&self.secrets)?.get(&ObjectRef::new(name).within(ns))
    }

    /// The replicas of `target` in `ns` from the cache: Deployments and StatefulSets of
    /// `apps` only (other kinds are read through `/scale`), when the cache holds it.
    pub fn replicas(&self, ns: &str, target: &TargetRef) -> Option<i32> {
        if target.group != "apps" || target.version != "v1" {
            return None;
        }
        // An unset spec.replicas is 1, as the API server defaults it (and /scale says).
        match target.kind.as_str() {
            "Deployment" => synced(&self.deployments)?
                .get(&ObjectRef::new(&target.name).within(ns))
                .map(|d| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)),
            "StatefulSet" => synced(&self.stateful_sets)?
                .get(&ObjectRef::new(&target.name).within(ns))
                .map(|s| s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)),
            _ => None,
        }
    }

    /// The KEDA ScaledObject (`namespace/name`) of `ns` that scales `target`, paused or
    /// not: `Some(None)` when none does (or KEDA is not installed), `None` when they must
    /// be listed.
    pub fn claiming_scaled_object(&self, ns: &str, target: &TargetRef) -> Option<Option<String>> {
        if self.keda_installed == Some(false) {
            return Some(None);
        }
        let store = synced(&self.scaled_objects)?;
        let items: Vec<serde_json::Value> = store
            .state()
            .iter()
            .filter(|so| so.namespace().as_deref() == Some(ns))
            .filter_map(|so| serde_json::to_value(so.as_ref()).ok())
            .collect();
        Some(ownership::claiming_scaled_object(target, &items).map(|name| format!("{ns}/{name}")))
    }

    /// The HPA (`namespace/name`) of `ns` that scales `target`, when the HPA cache is
    /// synced (`Some(None)`: none does); `None` when it must be listed.
    pub fn claiming_hpa(&self, ns: &str, target: &TargetRef) -> Option<Option<String>> {
        let store = synced(&self.hpas)?;
        Some(
            store
                .find(|hpa| {
                    hpa.namespace().as_deref() == Some(ns)
                        && hpa
                            .spec
                            .as_ref()
                            .is_some_and(|spec| target.is_targeted_by(&spec.scale_target_ref))
                })
                .map(|hpa| format!("{ns}/{}", hpa.name_any())),
        )
    }
}

/// The queues of `queues` that read the Secret `ns/name` (URL, user, passwords, CA or
/// client certificate).
pub fn queues_naming_secret(
    queues: &[Arc<JobQueue>],
    ns: &str,
    name: &str,
) -> Vec<ObjectRef<JobQueue>> {
    queues
        .iter()
        .filter(|jq| jq.namespace().as_deref() == Some(ns))
        .filter(|jq| {
            let redis = &jq.spec.redis;
            let tls = redis.tls.as_ref();
            [
                redis.url_secret_ref.as_ref(),
                redis.username_secret_ref.as_ref(),
                redis.password_secret_ref.as_ref(),
                redis
                    .sentinel
                    .as_ref()
                    .and_then(|s| s.password_secret_ref.as_ref()),
                tls.and_then(|t| t.ca_secret_ref.as_ref()),
                tls.and_then(|t| t.client_cert_secret_ref.as_ref()),
                tls.and_then(|t| t.client_key_secret_ref.as_ref()),
            ]
            .into_iter()
            .flatten()
            .any(|sel| sel.name == name)
        })
        .map(|jq| ObjectRef::from_obj(jq.as_ref()))
        .collect()
}

/// The queues of `queues` whose workers are the `kind` (of group `group`) `ns/name`.
pub fn queues_scaling(
    queues: &[Arc<JobQueue>],
    group: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Vec<ObjectRef<JobQueue>> {
    queues
        .iter()
        .filter(|jq| jq.namespace().as_deref() == Some(ns))
        .filter(|jq| {
            jq.spec.workers.as_ref().is_some_and(|w| {
                let r = &w.scale_target_ref;
                TargetRef::parse(&r.api_version, &r.kind, &r.name)
                    .is_ok_and(|t| t.group == group && t.kind == kind && t.name == name)
            })
        })
        .map(|jq| ObjectRef::from_obj(jq.as_ref()))
        .collect()
}

/// A Secret as the cache keeps it: its data, without what the reads never need.
pub fn trim_secret(secret: &mut Secret) {
    trim_meta(&mut secret.metadata);
    secret.string_data = None;
}

/// An HPA as the cache keeps it: its target (and spec), without its status.
pub fn trim_hpa(hpa: &mut HorizontalPodAutoscaler) {
    trim_meta(&mut hpa.metadata);
    hpa.status = None;
}

/// A Deployment as the cache keeps it: its replicas, without its pod template.
pub fn trim_deployment(d: &mut Deployment) {
    trim_meta(&mut d.metadata);
    d.status = None;
    if let Some(spec) = d.spec.as_mut() {
        spec.template = Default::default();
        spec.selector = Default::default();
        spec.strategy = None;
    }
}

/// A StatefulSet as the cache keeps it: its replicas, without its templates.
pub fn trim_stateful_set(s: &mut StatefulSet) {
    trim_meta(&mut s.metadata);
    s.status = None;
    if let Some(spec) = s.spec.as_mut() {
        spec.template = Default::default();
        spec.selector = Default::default();
        spec.volume_claim_templates = None;
        spec.update_strategy = None;
    }
}

/// A ScaledObject as the cache keeps it: its `spec.scaleTargetRef` (and the name).
pub fn trim_scaled_object(so: &mut DynamicObject) {
    trim_meta(&mut so.metadata);
    let target = so
        .data
        .get("spec")
        .and_then(|spec| spec.get("scaleTargetRef"))
        .cloned();
    so.data = match target {
        Some(target) => serde_json::json!({ "spec": { "scaleTargetRef": target } }),
        None => serde_json::json!({}),
    };
}

fn trim_meta(meta: &mut kube::api::ObjectMeta) {
    meta.managed_fields = None;
    meta.annotations = None;
    meta.labels = None;
    meta.owner_references = None;
}

/// The API of `K` in `ns`, or in every namespace.
fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A predicate that lets an object through once per uid: on its creation (or
/// re-creation), not on its every status change.
fn created<K: kube::Resource>(obj: &K) -> Option<u64> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    obj.meta().uid.as_ref()?.hash(&mut hasher);
    Some(hasher.finish())
}

/// Watch the Secrets, HPAs, Deployments and StatefulSets of `ns` (every namespace when
/// `None`) into caches, each also a trigger of the queues (of `queues`) it concerns:
/// a Secret created or changed, a target created, an HPA created or changed.
///
/// With `keda` (KEDA's ScaledObject API exists), its ScaledObjects too; without, the
/// caches say no ScaledObject claims any target.
pub fn watch(
    controller: Controller<JobQueue>,
    client: &Client,
    ns: Option<&str>,
    queues: Store<JobQueue>,
    keda: Option<bool>,
) -> (Controller<JobQueue>, Caches) {
    let (secrets, secrets_writer) = reflector::store();
    let (hpas, hpas_writer) = reflector::store();
    let (deployments, deployments_writer) = reflector::store();
    let (stateful_sets, stateful_sets_writer) = reflector::store();

    let secret_events = watcher(
        api::<Secret>(client, ns),
        watcher::Config::default()
            .fields(SECRET_FIELDS)
            .any_semantic(),
    )
    .default_backoff()
    .modify(trim_secret)
    .reflect(secrets_writer)
    .applied_objects();
    let hpa_events = watcher(
        api::<HorizontalPodAutoscaler>(client, ns),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .modify(trim_hpa)
    .reflect(hpas_writer)
    .applied_objects()
    .predicate_filter(predicates::generation, Default::default());
    let deployment_events = watcher(
        api::<Deployment>(client, ns),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .modify(trim_deployment)
    .reflect(deployments_writer)
    .applied_objects()
    .predicate_filter(created::<Deployment>, Default::default());
    let stateful_set_events = watcher(
        api::<StatefulSet>(client, ns),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .modify(trim_stateful_set)
    .reflect(stateful_sets_writer)
    .applied_objects()
    .predicate_filter(created::<StatefulSet>, Default::default());

    let q = queues.clone();
    let controller = controller.watches_stream(secret_events, move |secret: Secret| {
        queues_naming_secret(
            &q.state(),
            &secret.namespace().unwrap_or_default(),
            &secret.name_any(),
        )
    });
    let q = queues.clone();
    let controller = controller.watches_stream(hpa_events, move |hpa: HorizontalPodAutoscaler| {
        let Some(spec) = hpa.spec.as_ref() else {
            return Vec::new();
        };
        let r = &spec.scale_target_ref;
        let group = r
            .api_version
            .as_deref()
            .and_then(|v| v.split_once('/'))
            .map_or("", |(g, _)| g);
        queues_scaling(
            &q.state(),
            group,
            &r.kind,
            &hpa.namespace().unwrap_or_default(),
            &r.name,
        )
    });
    let q = queues.clone();
    let controller = controller.watches_stream(deployment_events, move |d: Deployment| {
        queues_scaling(
            &q.state(),
            "apps",
            "Deployment",
            &d.namespace().unwrap_or_default(),
            &d.name_any(),
        )
    });
    let q = queues.clone();
    let controller = controller.watches_stream(stateful_set_events, move |s: StatefulSet| {
        queues_scaling(
            &q.state(),
            "apps",
            "StatefulSet",
            &s.namespace().unwrap_or_default(),
            &s.name_any(),
        )
    });
    let (controller, scaled_objects) = if keda == Some(true) {
        let resource = scaled_object_resource();
        let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
        let scaled_objects = writer.as_reader();
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let events = watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .modify(trim_scaled_object)
            .reflect(writer)
            .applied_objects()
            .predicate_filter(predicates::generation, Default::default());
        let q = queues;
        let mapper = move |so: DynamicObject| {
            let Some(r) = so.data.get("spec").and_then(|s| s.get("scaleTargetRef")) else {
                return Vec::new();
            };
            // KEDA's defaults: apps/v1 Deployment.
            let text = |key: &str, default: &'static str| {
                r.get(key)
                    .and_then(|v| v.as_str())
                    .unwrap_or(default)
                    .to_string()
            };
            let api_version = text("apiVersion", "apps/v1");
            let group = api_version.split_once('/').map_or("", |(g, _)| g);
            queues_scaling(
                &q.state(),
                group,
                &text("kind", "Deployment"),
                &so.namespace().unwrap_or_default(),
                &text("name", ""),
            )
        };
        let controller = controller.watches_stream_with(events, mapper, resource);
        (controller, Some(scaled_objects))
    } else {
        (controller, None)
    };
    let caches = Caches {
        secrets: Some(secrets),
        hpas: Some(hpas),
        deployments: Some(deployments),
        stateful_sets: Some(stateful_sets),
        scaled_objects,
        keda_installed: keda,
    };
    (controller, caches)
}

/// KEDA's `ScaledObject` (`keda.sh/v1alpha1`), for the dynamic API.
pub fn scaled_object_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
        "scaledobjects",
    )
}

/// Whether KEDA's ScaledObject API exists (where the controller watches): `Some(false)`
/// when the API server does not know it (404), `None` when it cannot tell (e.g. not
/// allowed to list them: then each reconcile lists, and says so when refused).
pub async fn keda_installed(client: &Client, ns: Option<&str>) -> Option<bool> {
    let resource = scaled_object_resource();
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    match api.list(&kube::api::ListParams::default().limit(1)).await {
        Ok(_) => Some(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Some(false),
        Err(_) => None,
    }
}

/// The interval of a queue's reaper, when its spec is valid (the error policy's bound).
pub fn reaper_interval(jq: &JobQueue) -> Option<std::time::Duration> {
    validate::plan(&jq.spec).ok().map(|plan| plan.interval)
}

#[cfg(test)]
mod tests {
    use kube::Resource;
    use kube::runtime::reflector::store::Writer;

    use super::*;
    use crate::crd::{JobQueueSpec, SecretKeySelector, WorkersSpec};

    fn queue(ns: &str, name: &str) -> JobQueue {
        let mut jq = JobQueue::new(name, JobQueueSpec::new("redis://r:6379", name));
        jq.meta_mut().namespace = Some(ns.into());
        jq
    }

    fn names(refs: Vec<ObjectRef<JobQueue>>) -> Vec<String> {
        let mut v: Vec<String> = refs
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        v.sort();
        v
    }

    fn sel(name: &str) -> Option<SecretKeySelector> {
        Some(SecretKeySelector {
            name: name.into(),
            key: "k".into(),
        })
    }

    #[test]
    fn a_secret_maps_to_the_queues_naming_it() {
        let mut by_url = queue("a", "by-url");
        by_url.spec.redis.url = None;
        by_url.spec.redis.url_secret_ref = sel("redis");
        let mut by_password = queue("a", "by-password");
        by_password.spec.redis.password_secret_ref = sel("redis");
        let mut other_secret = queue("a", "other");
        other_secret.spec.redis.password_secret_ref = sel("other");
        let mut other_ns = queue("b", "by-url");
        other_ns.spec.redis.password_secret_ref = sel("redis");
        let inline = queue("a", "inline");
        let queues: Vec<Arc<JobQueue>> = [by_url, by_password, other_secret, other_ns, inline]
            .into_iter()
            .map(Arc::new)
            .collect();
        assert_eq!(
            names(queues_naming_secret(&queues, "a", "redis")),
            vec!["a/by-password", "a/by-url"]
        );
        assert_eq!(
            names(queues_naming_secret(&queues, "a", "other")),
            vec!["a/other"]
        );
        assert!(queues_naming_secret(&queues, "a", "unnamed").is_empty());

        // The user, the Sentinels' password and the client certificate count too.
        let mut by_cert = queue("a", "mtls");
        by_cert.spec.redis.tls = Some(crate::crd::TlsSpec {
            client_cert_secret_ref: sel("client-tls"),
            client_key_secret_ref: sel("client-tls"),
            ..Default::default()
        });
        let mut by_sentinel = queue("a", "sentinel");
        by_sentinel.spec.redis.url = None;
        by_sentinel.spec.redis.sentinel = Some(crate::crd::SentinelSpec {
            addresses: vec!["s:26379".into()],
            master_name: "m".into(),
            password_secret_ref: sel("sentinel-auth"),
        });
        by_sentinel.spec.redis.username_secret_ref = sel("acl");
        let queues: Vec<Arc<JobQueue>> = [by_cert, by_sentinel].into_iter().map(Arc::new).collect();
        assert_eq!(
            names(queues_naming_secret(&queues, "a", "client-tls")),
            vec!["a/mtls"]
        );
        assert_eq!(
            names(queues_naming_secret(&queues, "a", "sentinel-auth")),
            vec!["a/sentinel"]
        );
        assert_eq!(
            names(queues_naming_secret(&queues, "a", "acl")),
            vec!["a/sentinel"]
        );
    }

    #[test]
    fn a_target_maps_to_the_queues_scaling_it() {
        let workers = |kind: &str, name: &str| -> WorkersSpec {
            serde_json::from_value(serde_json::json!({
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name},
                "maxReplicas": 5
            }))
            .unwrap()
        };
        let mut d = queue("a", "d");
        d.spec.workers = Some(workers("Deployment", "w"));
        let mut s = queue("a", "s");
        s.spec.workers = Some(workers("StatefulSet", "w"));
        let none = queue("a", "none");
        let queues: Vec<Arc<JobQueue>> = [d, s, none].into_iter().map(Arc::new).collect();
        assert_eq!(
            names(queues_scaling(&queues, "apps", "Deployment", "a", "w")),
            vec!["a/d"]
        );
        assert_eq!(
            names(queues_scaling(&queues, "apps", "StatefulSet", "a", "w")),
            vec!["a/s"]
        );
        assert!(queues_scaling(&queues, "apps", "Deployment", "b", "w").is_empty());
    }

    #[test]
    fn an_unsynced_cache_answers_nothing() {
        let mut writer: Writer<Secret> = Writer::default();
        let caches = Caches {
            secrets: Some(writer.as_reader()),
            ..Caches::default()
        };
        let mut secret = Secret::default();
        secret.meta_mut().name = Some("redis".into());
        secret.meta_mut().namespace = Some("a".into());
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(secret.clone()));
        writer.apply_watcher_event(&watcher::Event::Apply(secret.clone()));
        assert!(
            caches.secret("a", "redis").is_none(),
            "a cache before its first list answered"
        );
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert!(caches.secret("a", "redis").is_some());
        assert!(caches.secret("a", "missing").is_none());
    }
}
