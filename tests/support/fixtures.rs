//! The objects the operator tests build, shared by the mock API and the stand-in tests:
//! JobQueues as the API server hands them out, a clock the test moves by hand, scale
//! targets and HorizontalPodAutoscalers.

use std::sync::{Arc, Mutex};

use jobqueue::controller::Clock;
use jobqueue::crd::{JobQueue, JobQueueSpec, JobQueueStatus, SecretKeySelector, WorkersSpec};
use k8s_openapi::api::autoscaling::v1::{Scale, ScaleSpec, ScaleStatus};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Resource;

pub const NS: &str = "default";
/// The operator's finalizer on every JobQueue it has seen (part of its API: the docs tell
/// how to remove it by hand).
pub const FINALIZER: &str = "jobqueue.dev/cleanup";

/// A JobQueue named `name` on `url`, with hash tag `tag`, as the API server would hand
/// it to the controller once the operator has seen it (namespace, uid, generation 1, the
/// operator's finalizer).
pub fn queue(name: &str, url: &str, tag: &str) -> JobQueue {
    let mut jq = JobQueue::new(name, JobQueueSpec::new(url, tag));
    let meta = jq.meta_mut();
    meta.namespace = Some(NS.into());
    meta.uid = Some(format!("uid-{name}"));
    meta.generation = Some(1);
    meta.resource_version = Some("1".into());
    meta.finalizers = Some(vec![FINALIZER.into()]);
    jq
}

/// Builders that read like sentences: `queue(..).with_url_secret("redis", "url")`.
pub trait JobQueueExt {
    fn with_url_secret(self, secret: &str, key: &str) -> Self;
    fn with_password_secret(self, secret: &str, key: &str) -> Self;
    fn with_status(self, status: JobQueueStatus) -> Self;
    fn with_workers(self, workers: WorkersSpec) -> Self;
    /// The object after `generation - 1` spec changes, at resource version `version`.
    fn at_generation(self, generation: i64, version: &str) -> Self;
    fn edit(self, f: impl FnOnce(&mut JobQueueSpec)) -> Self;
    /// With the annotation `key: value` (set or replaced).
    fn with_annotation(self, key: &str, value: &str) -> Self;
    /// Created `secs` seconds after `TestClock::new()`'s time.
    fn created_at(self, secs: i64) -> Self;
    /// The object as a new one, before the operator added its finalizer.
    fn without_finalizer(self) -> Self;
    /// The object after a DELETE: its deletion timestamp set, its finalizers kept.
    fn deleted(self) -> Self;
}

impl JobQueueExt for JobQueue {
    fn with_url_secret(mut self, secret: &str, key: &str) -> Self {
        self.spec.redis.url = None;
        self.spec.redis.url_secret_ref = Some(SecretKeySelector {
            name: secret.into(),
            key: key.into(),
        });
        self
    }

    fn with_password_secret(mut self, secret: &str, key: &str) -> Self {
        self.spec.redis.password_secret_ref = Some(SecretKeySelector {
            name: secret.into(),
            key: key.into(),
        });
        self
    }

    fn with_status(mut self, status: JobQueueStatus) -> Self {
        self.status = Some(status);
        self
    }

    fn with_workers(mut self, workers: WorkersSpec) -> Self {
        self.spec.workers = Some(workers);
        self
    }

    fn at_generation(mut self, generation: i64, version: &str) -> Self {
        let meta = self.meta_mut();
        meta.generation = Some(generation);
        meta.resource_version = Some(version.into());
        self
    }

    fn edit(mut self, f: impl FnOnce(&mut JobQueueSpec)) -> Self {
        f(&mut self.spec);
        self
    }

    fn with_annotation(mut self, key: &str, value: &str) -> Self {
        self.meta_mut()
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    fn created_at(mut self, secs: i64) -> Self {
        let at = TestClock::new().now() + SignedDuration::from_secs(secs);
        self.meta_mut().creation_timestamp = Some(Time(at));
        self
    }

    fn without_finalizer(mut self) -> Self {
        self.meta_mut().finalizers = None;
        self
    }

    fn deleted(mut self) -> Self {
        let meta = self.meta_mut();
        meta.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::from_second(1_700_000_000).unwrap(),
        ));
        meta.generation = meta.generation.map(|g| g + 1);
        self
    }
}

/// A clock the test moves by hand, so no test sleeps through a stabilization window.
#[derive(Clone)]
pub struct TestClock(Arc<Mutex<Timestamp>>);

impl TestClock {
    /// A clock at a fixed, whole-second time.
    pub fn new() -> TestClock {
        TestClock(Arc::new(Mutex::new(
            Timestamp::from_second(1_700_000_000).unwrap(),
        )))
    }

    pub fn now(&self) -> Timestamp {
        *self.0.lock().unwrap()
    }

    pub fn advance(&self, secs: i64) {
        let mut now = self.0.lock().unwrap();
        *now += SignedDuration::from_secs(secs);
    }

    /// For `Context::with_clock`.
    pub fn clock(&self) -> Clock {
        let now = self.0.clone();
        Arc::new(move || *now.lock().unwrap())
    }
}

/// An object with a scale subresource, as the API serves it.
#[derive(Clone, Copy, Debug)]
pub struct ScaleTarget {
    /// `apps/v1`, or `v1` for the core group.
    pub api_version: &'static str,
    /// The resource, e.g. `deployments`.
    pub plural: &'static str,
    pub name: &'static str,
}

impl ScaleTarget {
    pub fn path(&self) -> String {
        let root = if self.api_version.contains('/') {
            "apis"
        } else {
            "api"
        };
        format!(
            "/{root}/{}/namespaces/{NS}/{}/{}/scale",
            self.api_version, self.plural, self.name
        )
    }

    pub fn scale(&self, replicas: i32) -> Scale {
        Scale {
            metadata: kube::api::ObjectMeta {
                name: Some(self.name.into()),
                namespace: Some(NS.into()),
                ..Default::default()
            },
            spec: Some(ScaleSpec {
                replicas: Some(replicas),
            }),
            status: Some(ScaleStatus {
                replicas,
                selector: Some(format!("app={}", self.name)),
            }),
        }
    }
}

/// An apps/v1 Deployment.
pub const fn deployment(name: &'static str) -> ScaleTarget {
    ScaleTarget {
        api_version: "apps/v1",
        plural: "deployments",
        name,
    }
}

/// A HorizontalPodAutoscaler `name` in `NS` that scales `kind/target` of `api_version`.
pub fn hpa(name: &str, api_version: &str, kind: &str, target: &str) -> HorizontalPodAutoscaler {
    HorizontalPodAutoscaler {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some(api_version.into()),
                kind: kind.into(),
                name: target.into(),
            },
            max_replicas: 10,
            ..Default::default()
        }),
        status: None,
    }
}

/// Workers of Deployment `worker`: 10 jobs per replica, at most +4 per reconcile (the
/// deprecated `maxScaleUpStep`, explicit so the tests' numbers stay those of a step per
/// reconcile), a five-minute scale-down window.
pub fn workers(min: i32, max: i32) -> WorkersSpec {
    WorkersSpec {
        scale_target_ref: jobqueue::crd::ScaleTargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "worker".into(),
        },
        min_replicas: min,
        max_replicas: max,
        concurrency: 1,
        target_backlog_per_replica: 10,
        activation_backlog: 0,
        scale_down_stabilization: "5m".into(),
        max_scale_up_step: Some(4),
        behavior: None,
        fallback: None,
        on_delete: jobqueue::crd::OnDelete::Keep,
    }
}
