//! Test fixtures for the reconciler: JobQueue builders, a test context on kube's mock
//! service, and `ApiServerVerifier`, which answers the requests a scenario expects, in
//! order, and fails on a missing, a different or an extra request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use jobqueue::controller::{Context, Metrics, Settings};
use jobqueue::crd::{JobQueue, JobQueueSpec, JobQueueStatus, SecretKeySelector};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
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

    fn edit(mut self, f: impl FnOnce(&mut JobQueueSpec)) -> Self {
        f(&mut self.spec);
        self
    }
}

/// A context whose client talks to the returned verifier; its metrics are registered in
/// the returned registry.
/// Expect a status patch of `jq`.
pub fn status_patch(jq: &JobQueue) -> Expect {
    Expect::StatusPatch(Box::new(jq.clone()))
}

pub fn test_context() -> (Arc<Context>, ApiServerVerifier, Registry) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, NS);
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::default().register(&mut registry));
    let settings = Settings {
        connect_timeout: Duration::from_secs(2),
        response_timeout: Duration::from_secs(5),
        ..Settings::default()
    };
    let ctx = Context::new(client, metrics, Some("test-operator".into()), settings);
    (Arc::new(ctx), ApiServerVerifier(handle), registry)
}

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

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
}

impl Expect {
    fn describe(&self) -> String {
        match self {
            Expect::Secret(name, _) => format!("GET Secret {name}"),
            Expect::SecretMissing(name) => format!("GET Secret {name} (missing)"),
            Expect::StatusPatch(jq) => format!("PATCH status of {}", jq.name_any()),
            Expect::Event(type_, reason) => format!("POST {type_} Event {reason}"),
        }
    }
}

async fn body_text(body: Body) -> String {
    let bytes = body.collect_bytes().await.expect("request body");
    String::from_utf8(bytes.to_vec()).expect("UTF-8 body")
}

fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

impl ApiServerVerifier {
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
