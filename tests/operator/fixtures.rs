//! Test fixtures for the reconciler: JobQueue builders, a test context on kube's mock
//! service, and `ApiServerVerifier`, which answers the requests a scenario expects, in
//! order, and fails on a missing, a different or an extra request.
// Shared by several test files, each using a part.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use jobqueue::controller::{Clock, Context, Metrics, Settings};
use jobqueue::crd::{JobQueue, JobQueueSpec, JobQueueStatus, SecretKeySelector, WorkersSpec};
use k8s_openapi::ByteString;
use k8s_openapi::api::autoscaling::v1::{Scale, ScaleSpec, ScaleStatus};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::client::Body;
use kube::{Client, Resource, ResourceExt};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

pub const NS: &str = "default";

/// A JobQueue named `name` on `url`, with hash tag `tag`, as the API server would hand
/// it to the controller (namespace, uid, generation 1).
pub fn queue(name: &str, url: &str, tag: &str) -> JobQueue {
    let mut jq = JobQueue::new(name, JobQueueSpec::new(url, tag));
    let meta = jq.meta_mut();
    meta.namespace = Some(NS.into());
    meta.uid = Some(format!("uid-{name}"));
    meta.generation = Some(1);
    meta.resource_version = Some("1".into());
    jq
}

/// Builders that read like sentences: `queue(..).with_url_secret("redis", "url")`.
pub trait JobQueueExt {
    fn with_url_secret(self, secret: &str, key: &str) -> Self;
    fn with_password_secret(self, secret: &str, key: &str) -> Self;
    fn with_status(self, status: JobQueueStatus) -> Self;
    fn with_workers(self, workers: WorkersSpec) -> Self;
    fn edit(self, f: impl FnOnce(&mut JobQueueSpec)) -> Self;
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

    fn edit(mut self, f: impl FnOnce(&mut JobQueueSpec)) -> Self {
        f(&mut self.spec);
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
pub fn deployment(name: &'static str) -> ScaleTarget {
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

/// A context whose client talks to the returned verifier; its metrics are registered in
/// the returned registry.
/// Expect a status patch of `jq`.
pub fn status_patch(jq: &JobQueue) -> Expect {
    Expect::StatusPatch(Box::new(jq.clone()))
}

pub fn test_context() -> (Arc<Context>, ApiServerVerifier, Registry) {
    test_context_with(None)
}

/// `test_context` on the test's clock.
pub fn test_context_at(clock: &TestClock) -> (Arc<Context>, ApiServerVerifier, Registry) {
    test_context_with(Some(clock.clock()))
}

fn test_context_with(clock: Option<Clock>) -> (Arc<Context>, ApiServerVerifier, Registry) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, NS);
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::default().register(&mut registry));
    let settings = Settings {
        connect_timeout: Duration::from_secs(2),
        response_timeout: Duration::from_secs(5),
        ..Settings::default()
    };
    let mut ctx = Context::new(client, metrics, Some("test-operator".into()), settings);
    if let Some(clock) = clock {
        ctx = ctx.with_clock(clock);
    }
    (Arc::new(ctx), ApiServerVerifier(handle), registry)
}

pub type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// The mock API server's side.
pub struct ApiServerVerifier(Handle);

/// What the controller sent, for assertions after the scenario.
#[derive(Debug, Default)]
pub struct Seen {
    /// Status bodies of the status patches, in order.
    pub statuses: Vec<JobQueueStatus>,
    /// Raw bodies of every request with one.
    pub bodies: Vec<String>,
    /// Posted Events.
    pub events: Vec<Value>,
    /// The replicas of each scale patch, in order.
    pub scales: Vec<i32>,
}

/// One expected request.
pub enum Expect {
    /// GET of a Secret in `NS`, answered with this data.
    Secret(&'static str, Vec<(&'static str, String)>),
    /// GET of a Secret that does not exist (404).
    SecretMissing(&'static str),
    /// A server-side apply of the JobQueue's status, answered with the object.
    StatusPatch(Box<JobQueue>),
    /// An Event POST of this type and reason.
    Event(&'static str, &'static str),
    /// GET of the target's scale subresource, answered with these replicas.
    GetScale(ScaleTarget, i32),
    /// GET of the scale of a target that does not exist (404).
    ScaleNotFound(ScaleTarget),
    /// A merge patch of the target's scale to these replicas, answered with the scale.
    ScalePatch(ScaleTarget, i32),
    /// LIST of the namespace's HorizontalPodAutoscalers (autoscaling/v2).
    ListHpas(Vec<HorizontalPodAutoscaler>),
}

impl Expect {
    fn describe(&self) -> String {
        match self {
            Expect::Secret(name, _) => format!("GET Secret {name}"),
            Expect::SecretMissing(name) => format!("GET Secret {name} (missing)"),
            Expect::StatusPatch(jq) => format!("PATCH status of {}", jq.name_any()),
            Expect::Event(type_, reason) => format!("POST {type_} Event {reason}"),
            Expect::GetScale(t, n) => format!("GET {} ({n} replicas)", t.path()),
            Expect::ScaleNotFound(t) => format!("GET {} (missing)", t.path()),
            Expect::ScalePatch(t, n) => format!("PATCH {} to {n} replicas", t.path()),
            Expect::ListHpas(hpas) => format!("LIST HPAs ({} of them)", hpas.len()),
        }
    }
}

pub async fn body_text(body: Body) -> String {
    let bytes = body.collect_bytes().await.expect("request body");
    String::from_utf8(bytes.to_vec()).expect("UTF-8 body")
}

pub fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

impl ApiServerVerifier {
    /// The mock's raw handle, for a test that answers requests its own way.
    pub fn into_handle(self) -> Handle {
        self.0
    }

    /// Answer `expected` in order, then fail on any further request. Await the handle
    /// (after the reconcile returned and the context was dropped) to get what was sent.
    pub fn run(
        self,
        expected: Vec<Expect>,
        mut reconciled: tokio::sync::oneshot::Receiver<()>,
    ) -> tokio::task::JoinHandle<(ApiServerVerifier, Seen)> {
        tokio::spawn(async move {
            let mut handle = self.0;
            let mut seen = Seen::default();
            for (i, expect) in expected.into_iter().enumerate() {
                let what = expect.describe();
                let next = tokio::select! {
                    biased;
                    next = handle.next_request() => next,
                    _ = &mut reconciled => panic!("request #{i} ({what}) never came: the reconcile returned without it"),
                };
                let (request, send) = next.unwrap_or_else(|| {
                    panic!("request #{i} ({what}) never came: the client is gone")
                });
                let method = request.method().clone();
                let uri = request.uri().to_string();
                let body = body_text(request.into_body()).await;
                if !body.is_empty() {
                    seen.bodies.push(body.clone());
                }
                match expect {
                    Expect::Secret(name, data) => {
                        assert_eq!(method, Method::GET, "request #{i}: {uri}");
                        assert_eq!(uri, format!("/api/v1/namespaces/{NS}/secrets/{name}"));
                        let secret = Secret {
                            metadata: kube::api::ObjectMeta {
                                name: Some(name.into()),
                                namespace: Some(NS.into()),
                                ..Default::default()
                            },
                            data: Some(
                                data.into_iter()
                                    .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
                                    .collect::<BTreeMap<_, _>>(),
                            ),
                            ..Default::default()
                        };
                        send.send_response(json_response(StatusCode::OK, &secret));
                    }
                    Expect::SecretMissing(name) => {
                        assert_eq!(method, Method::GET, "request #{i}: {uri}");
                        assert_eq!(uri, format!("/api/v1/namespaces/{NS}/secrets/{name}"));
                        let status = json!({
                            "kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "reason": "NotFound", "code": 404,
                            "message": format!("secrets \"{name}\" not found"),
                            "details": {"name": name, "kind": "secrets"},
                        });
                        send.send_response(json_response(StatusCode::NOT_FOUND, &status));
                    }
                    Expect::StatusPatch(jq) => {
                        assert_eq!(method, Method::PATCH, "request #{i}: {uri}");
                        assert_eq!(
                            uri,
                            format!(
                                "/apis/jobqueue.dev/v1alpha1/namespaces/{NS}/jobqueues/{}/status?&force=true&fieldManager=jobqueue-operator",
                                jq.name_any()
                            )
                        );
                        let patch: Value = serde_json::from_str(&body).expect("JSON patch");
                        assert_eq!(patch["apiVersion"], "jobqueue.dev/v1alpha1");
                        assert_eq!(patch["kind"], "JobQueue");
                        let status: JobQueueStatus =
                            serde_json::from_value(patch["status"].clone()).expect("a status");
                        let mut applied = (*jq).clone();
                        applied.status = Some(status.clone());
                        seen.statuses.push(status);
                        send.send_response(json_response(StatusCode::OK, &applied));
                    }
                    Expect::Event(type_, reason) => {
                        assert_eq!(method, Method::POST, "request #{i}: {uri}");
                        assert_eq!(
                            uri,
                            format!("/apis/events.k8s.io/v1/namespaces/{NS}/events?")
                        );
                        let event: Value = serde_json::from_str(&body).expect("an Event");
                        assert_eq!(event["type"], type_, "{event}");
                        assert_eq!(event["reason"], reason, "{event}");
                        assert_eq!(event["regarding"]["kind"], "JobQueue");
                        seen.events.push(event);
                        send.send_response(
                            Response::builder()
                                .body(Body::from(body.into_bytes()))
                                .unwrap(),
                        );
                    }
                    Expect::GetScale(target, replicas) => {
                        assert_eq!(method, Method::GET, "request #{i}: {uri}");
                        assert_eq!(uri, target.path(), "request #{i}");
                        send.send_response(json_response(StatusCode::OK, &target.scale(replicas)));
                    }
                    Expect::ScaleNotFound(target) => {
                        assert_eq!(method, Method::GET, "request #{i}: {uri}");
                        assert_eq!(uri, target.path(), "request #{i}");
                        let status = json!({
                            "kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "reason": "NotFound", "code": 404,
                            "message": format!("{}.apps \"{}\" not found", target.plural, target.name),
                            "details": {"name": target.name, "kind": target.plural},
                        });
                        send.send_response(json_response(StatusCode::NOT_FOUND, &status));
                    }
                    Expect::ScalePatch(target, replicas) => {
                        assert_eq!(method, Method::PATCH, "request #{i}: {uri}");
                        assert_eq!(
                            uri,
                            format!("{}?&fieldManager=jobqueue-operator", target.path()),
                            "request #{i}"
                        );
                        let patch: Value = serde_json::from_str(&body).expect("JSON patch");
                        assert_eq!(
                            patch,
                            json!({"spec": {"replicas": replicas}}),
                            "request #{i}: the patch sets the replicas only"
                        );
                        seen.scales.push(replicas);
                        send.send_response(json_response(StatusCode::OK, &target.scale(replicas)));
                    }
                    Expect::ListHpas(hpas) => {
                        assert_eq!(method, Method::GET, "request #{i}: {uri}");
                        assert_eq!(
                            uri,
                            format!(
                                "/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers?"
                            ),
                            "request #{i}"
                        );
                        let list = json!({
                            "apiVersion": "autoscaling/v2",
                            "kind": "HorizontalPodAutoscalerList",
                            "metadata": {"resourceVersion": "1"},
                            "items": hpas,
                        });
                        send.send_response(json_response(StatusCode::OK, &list));
                    }
                }
            }
            // No more until the reconcile returned: another request is one too many.
            tokio::select! {
                extra = handle.next_request() => {
                    if let Some((request, _)) = extra {
                        panic!("unexpected request: {} {}", request.method(), request.uri());
                    }
                }
                _ = &mut reconciled => {}
            }
            (ApiServerVerifier(handle), seen)
        })
    }
}

/// Run `reconcile` against the scenario, then check every expected request came and
/// nothing else: returns the reconcile's result, what was sent and the verifier (for a
/// next reconcile on the same context).
pub async fn reconcile_expecting(
    jq: &JobQueue,
    ctx: &Arc<Context>,
    verifier: ApiServerVerifier,
    expected: Vec<Expect>,
) -> (
    Result<kube::runtime::controller::Action, jobqueue::controller::Error>,
    Seen,
    ApiServerVerifier,
) {
    let (done, reconciled) = tokio::sync::oneshot::channel();
    let server = verifier.run(expected, reconciled);
    let result = jobqueue::controller::reconcile(Arc::new(jq.clone()), ctx.clone()).await;
    let _ = done.send(());
    let (verifier, seen) = server.await.expect("the API server scenario held");
    (result, seen, verifier)
}
