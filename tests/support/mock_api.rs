//! kube's mock API for exact-request tests: a client on a tower-test service whose other
//! end, `ApiServerVerifier`, the test drives. A `Scenario` lists the requests one
//! reconcile must make, answers them in order and fails on a missing, a different or an
//! extra request. `next` and `Received` answer requests by hand, a watch kept open
//! (`WatchStream`) included, for tests of the controller loop.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::Frame;
use jobqueue::controller::{Clock, Context, Error, Metrics, Settings};
use jobqueue::crd::{JobQueue, JobQueueStatus};
use k8s_openapi::ByteString;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Secret;
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::fixtures::{FINALIZER, NS, ScaleTarget, TestClock};

/// How long `next` waits for a request the test expects.
const PATIENCE: Duration = Duration::from_secs(30);

/// A response body fed chunk by chunk: whole for an ordinary answer, open while its
/// `WatchStream` lives for a watch.
pub struct MockBody(mpsc::UnboundedReceiver<Bytes>);

impl MockBody {
    pub fn full(bytes: impl Into<Bytes>) -> MockBody {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(bytes.into()).unwrap();
        MockBody(rx)
    }

    /// A body that stays open until the returned stream is dropped.
    pub fn open() -> (WatchStream, MockBody) {
        let (tx, rx) = mpsc::unbounded_channel();
        (WatchStream(tx), MockBody(rx))
    }
}

impl http_body::Body for MockBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}

/// The open end of a watch: each `send` is one watch event on the wire.
pub struct WatchStream(mpsc::UnboundedSender<Bytes>);

impl WatchStream {
    /// Send a watch event of `kind` (`ADDED`, `MODIFIED`, ...) carrying `object`.
    pub fn send(&self, kind: &str, object: &impl serde::Serialize) {
        let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap();
        line.push(b'\n');
        self.0.send(Bytes::from(line)).expect("the watch is open");
    }
}

pub type Handle = tower_test::mock::Handle<Request<Body>, Response<MockBody>>;

pub async fn body_text(body: Body) -> String {
    let bytes = body.collect_bytes().await.expect("request body");
    String::from_utf8(bytes.to_vec()).expect("UTF-8 body")
}

pub fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response<MockBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(MockBody::full(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

/// A context whose client talks to the returned verifier; its metrics are registered in
/// the returned registry.
pub fn test_context() -> (Arc<Context>, ApiServerVerifier, Registry) {
    test_context_with(None)
}

/// `test_context` on the test's clock.
pub fn test_context_at(clock: &TestClock) -> (Arc<Context>, ApiServerVerifier, Registry) {
    test_context_with(Some(clock.clock()))
}

/// `test_context` on the test's clock with settings of its own and reflector caches
/// (as the running controller has them): `tune` edits the test settings.
#[allow(dead_code)]
pub fn test_context_tuned(
    clock: &TestClock,
    tune: impl FnOnce(&mut Settings),
    caches: jobqueue::controller::caches::Caches,
) -> (Arc<Context>, ApiServerVerifier, Registry) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<MockBody>>();
    let client = Client::new(service, NS);
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::default().register(&mut registry));
    let mut settings = Settings {
        connect_timeout: Duration::from_secs(2),
        response_timeout: Duration::from_secs(5),
        ..Settings::default()
    };
    tune(&mut settings);
    let ctx = Context::new(client, metrics, Some("test-operator".into()), settings)
        .with_clock(clock.clock())
        .with_caches(caches);
    (Arc::new(ctx), ApiServerVerifier(handle), registry)
}

fn test_context_with(clock: Option<Clock>) -> (Arc<Context>, ApiServerVerifier, Registry) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<MockBody>>();
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

/// The mock API server's side.
pub struct ApiServerVerifier(Handle);

/// One request as it came, to be answered.
pub struct Received {
    pub method: Method,
    pub uri: String,
    pub body: String,
    send: tower_test::mock::SendResponse<Response<MockBody>>,
}

impl Received {
    /// The body as JSON (`null` when there is none).
    pub fn json(&self) -> Value {
        if self.body.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&self.body).expect("a JSON body")
        }
    }

    pub fn respond(self, response: Response<MockBody>) {
        self.send.send_response(response);
    }

    /// Answer with a watch that stays open: events go down the returned stream.
    pub fn respond_watch(self) -> WatchStream {
        let (stream, body) = MockBody::open();
        self.send.send_response(Response::new(body));
        stream
    }

    /// Check this is the server-side apply of `jq`'s status, answer with the object
    /// holding it, and return the status it carried.
    pub fn status_patch(self, jq: &JobQueue) -> JobQueueStatus {
        assert_eq!(self.method, Method::PATCH, "{}", self.uri);
        assert_eq!(
            self.uri,
            format!(
                "/apis/jobqueue.dev/v1alpha1/namespaces/{NS}/jobqueues/{}/status?&force=true&fieldManager=jobqueue-operator",
                jq.name_any()
            )
        );
        let patch = self.json();
        assert_eq!(patch["apiVersion"], "jobqueue.dev/v1alpha1");
        assert_eq!(patch["kind"], "JobQueue");
        let status: JobQueueStatus =
            serde_json::from_value(patch["status"].clone()).expect("a status");
        let mut applied = jq.clone();
        applied.status = Some(status.clone());
        self.respond(json_response(StatusCode::OK, &applied));
        status
    }
}

impl ApiServerVerifier {
    /// The mock's raw handle, for a test that answers requests its own way.
    pub fn into_handle(self) -> Handle {
        self.0
    }

    /// The next request, naming `what` if it does not come within 30 s.
    pub async fn next(&mut self, what: &str) -> Received {
        let (request, send) = tokio::time::timeout(PATIENCE, self.0.next_request())
            .await
            .unwrap_or_else(|_| panic!("{what} never came"))
            .unwrap_or_else(|| panic!("{what} never came: the client is gone"));
        Self::received(request, send).await
    }

    /// The next request is the status patch of `jq`: answered, its status returned.
    pub async fn status_patch(&mut self, jq: &JobQueue) -> JobQueueStatus {
        let what = format!("the status patch of {}", jq.name_any());
        self.next(&what).await.status_patch(jq)
    }

    /// Once every client is dropped: no request came before, and the service closed.
    pub async fn expect_released(mut self) {
        let after = tokio::time::timeout(Duration::from_secs(10), self.0.next_request())
            .await
            .expect("the client is released");
        if let Some((request, _)) = after {
            panic!("unexpected request: {} {}", request.method(), request.uri());
        }
    }

    async fn received(
        request: Request<Body>,
        send: tower_test::mock::SendResponse<Response<MockBody>>,
    ) -> Received {
        let method = request.method().clone();
        let uri = request.uri().to_string();
        let body = body_text(request.into_body()).await;
        Received {
            method,
            uri,
            body,
            send,
        }
    }

    /// Answer `expected` in order, about `jq`, until `reconciled`; then fail on any
    /// further request.
    async fn answer(
        &mut self,
        jq: &JobQueue,
        expected: Vec<Expect>,
        mut reconciled: oneshot::Receiver<()>,
    ) -> Seen {
        let mut seen = Seen::default();
        for (i, expect) in expected.into_iter().enumerate() {
            let what = expect.describe(jq);
            let next = tokio::select! {
                biased;
                next = self.0.next_request() => next,
                _ = &mut reconciled => panic!("request #{i} ({what}) never came: the reconcile returned without it"),
            };
            let (request, send) = next
                .unwrap_or_else(|| panic!("request #{i} ({what}) never came: the client is gone"));
            let received = Self::received(request, send).await;
            if !received.body.is_empty() {
                seen.bodies.push(received.body.clone());
            }
            expect.answer(i, received, jq, &mut seen);
        }
        // No more until the reconcile returned: another request is one too many.
        tokio::select! {
            extra = self.0.next_request() => {
                if let Some((request, _)) = extra {
                    panic!("unexpected request: {} {}", request.method(), request.uri());
                }
            }
            _ = &mut reconciled => {}
        }
        seen
    }
}

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

impl Seen {
    /// No request body carried `secret`.
    pub fn assert_not_sent(&self, secret: &str) {
        for body in &self.bodies {
            assert!(!body.contains(secret), "a secret was written out: {body}");
        }
    }
}

/// One expected request (or, for `TargetRead`, the pair every scaling reconcile makes).
pub enum Expect {
    /// GET of a Secret in `NS`, answered with this data.
    Secret(&'static str, Vec<(&'static str, String)>),
    /// GET of a Secret that does not exist (404).
    SecretMissing(&'static str),
    /// A server-side apply of the scenario's JobQueue's status, answered with the object.
    StatusPatch,
    /// An Event POST of this type and reason.
    Event(&'static str, &'static str),
    /// The target read as every reconcile with workers reads it: GET of its scale,
    /// answered with these replicas, then LIST of the HPAs and LIST of the KEDA
    /// ScaledObjects, finding none.
    TargetRead(ScaleTarget, i32),
    /// GET of the target's scale subresource, answered with these replicas.
    GetScale(ScaleTarget, i32),
    /// GET of the scale of a target that does not exist (404).
    ScaleNotFound(ScaleTarget),
    /// A merge patch of the target's scale to these replicas, answered with the scale.
    ScalePatch(ScaleTarget, i32),
    /// LIST of the namespace's HorizontalPodAutoscalers (autoscaling/v2).
    ListHpas(Vec<HorizontalPodAutoscaler>),
    /// LIST of the namespace's KEDA ScaledObjects (keda.sh/v1alpha1), answered with
    /// these items.
    ListScaledObjects(Vec<Value>),
    /// LIST of the KEDA ScaledObjects where KEDA is not installed (404).
    NoScaledObjects,
    /// An Event of this type and reason published again: kube's recorder PATCHes the
    /// series of the first one.
    EventAgain(&'static str, &'static str),
    /// The JSON patch that adds the operator's finalizer to a JobQueue without finalizers,
    /// answered with the object carrying it.
    AddFinalizer,
    /// The JSON patch that removes the operator's finalizer (the first and only one),
    /// answered with the object without it.
    RemoveFinalizer,
    /// The JSON patch that adds the finalizer, refused as the API server refuses it when
    /// the object already has one (422: its `test` of `/metadata/finalizers` failed).
    AddFinalizerStale,
    /// GET of the scenario's JobQueue, answered with it carrying the finalizer.
    GetQueueWithFinalizer,
    /// A server-side apply of the scenario's JobQueue's status conditional on the
    /// resource version the scenario's object has (`metadata.resourceVersion` in the
    /// body), answered as the API server answers it once the object has changed since:
    /// 409 Conflict.
    StatusConflict,
    /// GET of the scenario's JobQueue, answered with this object (the object as the API
    /// server has it, newer than the scenario's copy).
    GetQueue(Box<JobQueue>),
    /// The merge patch that records `status.originalReplicas` (this target, `Kind/name`,
    /// at these replicas) before the first scale, conditional on the resource version of
    /// the scenario's object, answered with the object holding it at the next version.
    RecordOriginal(&'static str, i32),
    /// The same patch, refused with this HTTP status (409: the object has changed since
    /// the scenario's copy; 403: forbidden).
    RecordRefused(&'static str, i32, StatusCode),
}

/// The path of the scenario's JobQueue (for its metadata patches).
fn queue_path(jq: &JobQueue) -> String {
    format!(
        "/apis/jobqueue.dev/v1alpha1/namespaces/{NS}/jobqueues/{}?",
        jq.name_any()
    )
}

impl Expect {
    /// The single requests this stands for.
    fn requests(self) -> Vec<Expect> {
        match self {
            Expect::TargetRead(target, replicas) => {
                vec![
                    Expect::GetScale(target, replicas),
                    Expect::ListHpas(vec![]),
                    Expect::ListScaledObjects(vec![]),
                ]
            }
            one => vec![one],
        }
    }

    fn describe(&self, jq: &JobQueue) -> String {
        match self {
            Expect::Secret(name, _) => format!("GET Secret {name}"),
            Expect::SecretMissing(name) => format!("GET Secret {name} (missing)"),
            Expect::StatusPatch => format!("PATCH status of {}", jq.name_any()),
            Expect::Event(type_, reason) => format!("POST {type_} Event {reason}"),
            Expect::TargetRead(t, n) => {
                format!(
                    "GET {} ({n} replicas), LIST HPAs, LIST ScaledObjects",
                    t.path()
                )
            }
            Expect::GetScale(t, n) => format!("GET {} ({n} replicas)", t.path()),
            Expect::ScaleNotFound(t) => format!("GET {} (missing)", t.path()),
            Expect::ScalePatch(t, n) => format!("PATCH {} to {n} replicas", t.path()),
            Expect::ListHpas(hpas) => format!("LIST HPAs ({} of them)", hpas.len()),
            Expect::ListScaledObjects(items) => {
                format!("LIST ScaledObjects ({} of them)", items.len())
            }
            Expect::NoScaledObjects => "LIST ScaledObjects (KEDA not installed)".into(),
            Expect::EventAgain(type_, reason) => format!("PATCH {type_} Event {reason} again"),
            Expect::AddFinalizer => format!("PATCH {} adding the finalizer", jq.name_any()),
            Expect::RemoveFinalizer => format!("PATCH {} removing the finalizer", jq.name_any()),
            Expect::AddFinalizerStale => {
                format!("PATCH {} adding the finalizer, refused", jq.name_any())
            }
            Expect::GetQueueWithFinalizer => format!("GET {}", jq.name_any()),
            Expect::StatusConflict => format!(
                "PATCH status of {} conditional on resourceVersion {:?}, refused",
                jq.name_any(),
                jq.resource_version()
            ),
            Expect::GetQueue(fresh) => format!(
                "GET {} (at resourceVersion {:?})",
                jq.name_any(),
                fresh.resource_version()
            ),
            Expect::RecordOriginal(target, n) => format!(
                "PATCH status of {} recording {target} at {n} replicas",
                jq.name_any()
            ),
            Expect::RecordRefused(target, n, code) => format!(
                "PATCH status of {} recording {target} at {n} replicas, refused ({code})",
                jq.name_any()
            ),
        }
    }

    /// Check request #`i` is this one and answer it.
    fn answer(self, i: usize, request: Received, jq: &JobQueue, seen: &mut Seen) {
        let (method, uri) = (request.method.clone(), request.uri.clone());
        match self {
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
                request.respond(json_response(StatusCode::OK, &secret));
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
                request.respond(json_response(StatusCode::NOT_FOUND, &status));
            }
            Expect::StatusPatch => {
                let status = request.status_patch(jq);
                seen.statuses.push(status);
            }
            Expect::Event(type_, reason) => {
                assert_eq!(method, Method::POST, "request #{i}: {uri}");
                assert_eq!(
                    uri,
                    format!("/apis/events.k8s.io/v1/namespaces/{NS}/events?")
                );
                let event = request.json();
                assert_eq!(event["type"], type_, "{event}");
                assert_eq!(event["reason"], reason, "{event}");
                assert_eq!(event["regarding"]["kind"], "JobQueue");
                let echo = request.body.clone().into_bytes();
                seen.events.push(event);
                request.respond(Response::new(MockBody::full(echo)));
            }
            Expect::TargetRead(..) => unreachable!("split by `requests`"),
            Expect::GetScale(target, replicas) => {
                assert_eq!(method, Method::GET, "request #{i}: {uri}");
                assert_eq!(uri, target.path(), "request #{i}");
                request.respond(json_response(StatusCode::OK, &target.scale(replicas)));
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
                request.respond(json_response(StatusCode::NOT_FOUND, &status));
            }
            Expect::ScalePatch(target, replicas) => {
                assert_eq!(method, Method::PATCH, "request #{i}: {uri}");
                assert_eq!(
                    uri,
                    format!("{}?&fieldManager=jobqueue-operator", target.path()),
                    "request #{i}"
                );
                assert_eq!(
                    request.json(),
                    json!({"spec": {"replicas": replicas}}),
                    "request #{i}: the patch sets the replicas only"
                );
                seen.scales.push(replicas);
                request.respond(json_response(StatusCode::OK, &target.scale(replicas)));
            }
            Expect::ListHpas(hpas) => {
                assert_eq!(method, Method::GET, "request #{i}: {uri}");
                assert_eq!(
                    uri,
                    format!("/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers?"),
                    "request #{i}"
                );
                let list = json!({
                    "apiVersion": "autoscaling/v2",
                    "kind": "HorizontalPodAutoscalerList",
                    "metadata": {"resourceVersion": "1"},
                    "items": hpas,
                });
                request.respond(json_response(StatusCode::OK, &list));
            }
            Expect::ListScaledObjects(items) => {
                assert_eq!(method, Method::GET, "request #{i}: {uri}");
                assert_eq!(uri, scaled_objects_uri(), "request #{i}");
                let list = json!({
                    "apiVersion": "keda.sh/v1alpha1",
                    "kind": "ScaledObjectList",
                    "metadata": {"resourceVersion": "1"},
                    "items": items,
                });
                request.respond(json_response(StatusCode::OK, &list));
            }
            Expect::NoScaledObjects => {
                assert_eq!(method, Method::GET, "request #{i}: {uri}");
                assert_eq!(uri, scaled_objects_uri(), "request #{i}");
                let status = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "reason": "NotFound", "code": 404,
                    "message": "the server could not find the requested resource",
                });
                request.respond(json_response(StatusCode::NOT_FOUND, &status));
            }
            Expect::EventAgain(type_, reason) => {
                assert_eq!(method, Method::PATCH, "request #{i}: {uri}");
                let prefix = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events/");
                assert!(uri.starts_with(&prefix), "request #{i}: {uri}");
                let event = request.json();
                assert_eq!(event["type"], type_, "{event}");
                assert_eq!(event["reason"], reason, "{event}");
                let echo = request.body.clone().into_bytes();
                seen.events.push(event);
                request.respond(Response::new(MockBody::full(echo)));
            }
            Expect::AddFinalizer => {
                assert_eq!(method, Method::PATCH, "request #{i}: {uri}");
                assert_eq!(uri, queue_path(jq), "request #{i}");
                assert_eq!(
                    request.json(),
                    json!([
                        {"op": "test", "path": "/metadata/finalizers", "value": null},
                        {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
                    ]),
                    "request #{i}: the finalizer is added to an object without finalizers"
                );
                let mut with = jq.clone();
                with.metadata.finalizers = Some(vec![FINALIZER.into()]);
                request.respond(json_response(StatusCode::OK, &with));
            }
            Expect::RemoveFinalizer => {
                assert_eq!(method, Method::PATCH, "request #{i}: {uri}");
                assert_eq!(uri, queue_path(jq), "request #{i}");
                assert_eq!(
                    request.json(),
                    json!([
                        {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
                        {"op": "remove", "path": "/metadata/finalizers/0"},
                    ]),
                    "request #{i}: the finalizer is removed, checked to be the one"
                );
                let mut without = jq.clone();
                without.metadata.finalizers = None;
                request.respond(json_response(StatusCode::OK, &without));
            }
            Expect::AddFinalizerStale => {
                assert_eq!(method, Method::PATCH, "request #{i}: {uri}");
                assert_eq!(uri, queue_path(jq), "request #{i}");
                let status = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "reason": "Invalid", "code": 422,
                    "message": format!(
                        "test failed: /metadata/finalizers is [\"{FINALIZER}\"], not null"
                    ),
                });
                request.respond(json_response(StatusCode::UNPROCESSABLE_ENTITY, &status));
            }
            Expect::GetQueueWithFinalizer => {
                assert_eq!(method, Method::GET, "request #{i}: {uri}");
                assert_eq!(
                    uri,
                    format!(
                        "/apis/jobqueue.dev/v1alpha1/namespaces/{NS}/jobqueues/{}",
                        jq.name_any()
                    ),
                    "request #{i}"
                );
                let mut with = jq.clone();
                with.metadata.finalizers = Some(vec![FINALIZER.into()]);
                request.respond(json_response(StatusCode::OK, &with));
            }
            Expect::StatusConflict => {
                assert_eq!(method, Method::PATCH, "request #{i}: {uri}");
                assert!(uri.contains("/status?"), "request #{i}: {uri}");
                let patch = request.json();
                assert_eq!(
                    patch["metadata"]["resourceVersion"].as_str(),
                    jq.resource_version().as_deref(),
                    "request #{i}: a status write from a copy that may be stale is conditional \
                     on the resource version read, or the API server takes it over whatever was \
                     written since: {patch}"
                );
                seen.statuses
                    .push(serde_json::from_value(patch["status"].clone()).expect("a status"));
                let status = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "reason": "Conflict", "code": 409,
                    "message": format!(
                        "Operation cannot be fulfilled on jobqueues.jobqueue.dev \"{}\": the \
                         object has been modified; please apply your changes to the latest \
                         version and try again",
                        jq.name_any()
                    ),
                });
                request.respond(json_response(StatusCode::CONFLICT, &status));
            }
            Expect::GetQueue(fresh) => {
                assert_eq!(method, Method::GET, "request #{i}: {uri}");
                assert_eq!(
                    uri,
                    format!(
                        "/apis/jobqueue.dev/v1alpha1/namespaces/{NS}/jobqueues/{}",
                        jq.name_any()
                    ),
                    "request #{i}"
                );
                request.respond(json_response(StatusCode::OK, &fresh));
            }
            Expect::RecordRefused(target, replicas, code) => {
                assert_record(i, &request, jq, target, replicas);
                let reason = code
                    .canonical_reason()
                    .unwrap_or("Refused")
                    .replace(' ', "");
                let status = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "reason": reason, "code": code.as_u16(),
                    "message": format!("jobqueues.jobqueue.dev \"{}\": {reason}", jq.name_any()),
                });
                request.respond(json_response(code, &status));
            }
            Expect::RecordOriginal(target, replicas) => {
                let record = assert_record(i, &request, jq, target, replicas);
                let mut recorded = jq.clone();
                let mut status = recorded.status.take().unwrap_or_default();
                status.original_replicas = Some(serde_json::from_value(record).unwrap());
                recorded.status = Some(status);
                recorded.metadata.resource_version = Some(next_version(jq));
                request.respond(json_response(StatusCode::OK, &recorded));
            }
        }
    }
}

/// Check request #`i` is the merge patch recording `target` at `replicas`, conditional on
/// `jq`'s version; the record.
fn assert_record(
    i: usize,
    request: &Received,
    jq: &JobQueue,
    target: &str,
    replicas: i32,
) -> Value {
    assert_eq!(
        request.method,
        Method::PATCH,
        "request #{i}: {}",
        request.uri
    );
    assert_eq!(
        request.uri,
        format!(
            "/apis/jobqueue.dev/v1alpha1/namespaces/{NS}/jobqueues/{}/status?&fieldManager=jobqueue-operator",
            jq.name_any()
        ),
        "request #{i}"
    );
    let record = json!({"target": target, "replicas": replicas});
    assert_eq!(
        request.json(),
        json!({
            "metadata": {"resourceVersion": jq.resource_version()},
            "status": {"originalReplicas": record},
        }),
        "request #{i}: the original count alone, conditional on the version read"
    );
    record
}

/// The resource version after `jq`'s (numeric in the fixtures).
fn next_version(jq: &JobQueue) -> String {
    let version: u64 = jq
        .resource_version()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (version + 1).to_string()
}

/// Where the KEDA ScaledObjects of `NS` are listed.
pub fn scaled_objects_uri() -> String {
    format!("/apis/keda.sh/v1alpha1/namespaces/{NS}/scaledobjects?")
}

/// A KEDA ScaledObject `name` in `NS` on `kind/target` of `apps/v1`, paused or not.
pub fn scaled_object(name: &str, kind: &str, target: &str, paused: bool) -> Value {
    let annotations = if paused {
        json!({"autoscaling.keda.sh/paused": "true"})
    } else {
        json!({})
    };
    json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target},
            "triggers": [{"type": "cpu", "metadata": {"value": "50"}}],
        },
    })
}

/// One reconcile of a JobQueue and the exact requests it must make, in order:
/// `Scenario::new(&jq).expect(Expect::StatusPatch).run(&ctx, &mut api)`.
pub struct Scenario<'a> {
    jq: &'a JobQueue,
    expected: Vec<Expect>,
}

impl<'a> Scenario<'a> {
    pub fn new(jq: &'a JobQueue) -> Scenario<'a> {
        Scenario {
            jq,
            expected: Vec::new(),
        }
    }

    /// The next request the reconcile must make.
    pub fn expect(mut self, expect: Expect) -> Self {
        self.expected.extend(expect.requests());
        self
    }

    /// Reconcile the JobQueue on `ctx` while `api` answers the expected requests; fail
    /// on a missing, a different or an extra one. Returns the reconcile's result and
    /// what was sent.
    pub async fn run(
        self,
        ctx: &Arc<Context>,
        api: &mut ApiServerVerifier,
    ) -> (Result<Action, Error>, Seen) {
        let (done, reconciled) = oneshot::channel();
        let reconcile = async {
            // Boxed: the reconcile's future is deep, and its layout is computed once.
            let result = Box::pin(jobqueue::controller::reconcile(
                Arc::new(self.jq.clone()),
                ctx.clone(),
            ))
            .await;
            let _ = done.send(());
            result
        };
        tokio::join!(reconcile, api.answer(self.jq, self.expected, reconciled))
    }
}
