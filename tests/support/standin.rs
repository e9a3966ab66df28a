//! A stand-in Kubernetes API server over real HTTP, for running the operator binary from
//! outside: an in-memory object store with list, watch (chunked JSON events), get,
//! create, replace, merge, apply and JSON patches, delete (with finalizers: the object
//! is marked and goes once they are all removed), the status and scale subresources, a
//! write conditional on `metadata.resourceVersion` (409 once the object has moved on), a
//! log of every request for the test to assert on, and watch events held back to make the
//! operator's cache stale on purpose ([`StandIn::hold_watch_from_status_write`]); and the
//! operator binary run against it (`OperatorProcess`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::eventually::Wait;
use super::redis::free_port;

/// One request as the operator sent it.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: String,
}

/// Where an object lives: `/api/v1` or `/apis/group/version`, the plural, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ObjKey {
    prefix: String,
    plural: String,
    namespace: String,
    name: String,
}

#[derive(Clone, Debug)]
struct WatchEvent {
    rv: u64,
    prefix: String,
    plural: String,
    namespace: String,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct Store {
    objects: BTreeMap<ObjKey, Value>,
    rv: u64,
    history: Vec<WatchEvent>,
    log: Vec<Logged>,
    hold: Option<Hold>,
}

/// Watch events of one plural held back from every watcher (see
/// [`StandIn::hold_watch_from_status_write`]).
struct Hold {
    plural: String,
    /// The version of the first status write, from which events are held; `None` until it
    /// comes.
    from: Option<u64>,
    /// The events held so far.
    held: usize,
}

#[derive(Clone)]
pub struct StandIn {
    store: Arc<Mutex<Store>>,
    events: broadcast::Sender<WatchEvent>,
    /// `true` once held watch events may go.
    released: Arc<tokio::sync::watch::Sender<bool>>,
    pub addr: SocketAddr,
}

fn kind_of(plural: &str) -> &'static str {
    match plural {
        "jobqueues" => "JobQueue",
        "secrets" => "Secret",
        "leases" => "Lease",
        "events" => "Event",
        "deployments" => "Deployment",
        "horizontalpodautoscalers" => "HorizontalPodAutoscaler",
        _ => "Object",
    }
}

/// Split `/api/v1/namespaces/ns/secrets/name/status` and friends.
/// prefix, plural, namespace, name, subresource.
type Route = (String, String, String, Option<String>, Option<String>);

fn parse_path(path: &str) -> Option<Route> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (prefix, rest) = match *parts.first()? {
        "api" => (format!("/api/{}", parts.get(1)?), &parts[2..]),
        "apis" => (
            format!("/apis/{}/{}", parts.get(1)?, parts.get(2)?),
            &parts[3..],
        ),
        _ => return None,
    };
    let (namespace, rest) = if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        (rest[1].to_string(), &rest[2..])
    } else {
        (String::new(), rest)
    };
    let plural = rest.first()?.to_string();
    let name = rest.get(1).map(|s| s.to_string());
    let sub = rest.get(2).map(|s| s.to_string());
    Some((prefix, plural, namespace, name, sub))
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16()
    });
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn ok_json(code: StatusCode, v: &Value) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(v.to_string()))
        .unwrap()
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    if let Value::Object(p) = patch {
        if !target.is_object() {
            *target = json!({});
        }
        let t = target.as_object_mut().unwrap();
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    } else {
        *target = patch.clone();
    }
}

impl StandIn {
    pub async fn start() -> StandIn {
        let (events, _) = broadcast::channel(1024);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let standin = StandIn {
            store: Arc::default(),
            events,
            released: Arc::new(tokio::sync::watch::channel(true).0),
            addr,
        };
        let app = Router::new().fallback(handle).with_state(standin.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        standin
    }

    /// A kubeconfig that points at this server, without credentials.
    pub fn kubeconfig(&self, namespace: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: http://{}\ncontexts:\n- name: standin\n  context:\n    cluster: standin\n    user: nobody\n    namespace: {namespace}\nusers:\n- name: nobody\n  user: {{}}\ncurrent-context: standin\n",
            self.addr
        )
    }

    /// Put an object (as a client with full rights would), firing a watch event.
    pub fn put(&self, prefix: &str, plural: &str, mut object: Value) -> Value {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let key = ObjKey {
            prefix: prefix.into(),
            plural: plural.into(),
            namespace: namespace.clone(),
            name,
        };
        let mut store = self.store.lock().unwrap();
        let existing = store.objects.get(&key).cloned();
        let generation = match &existing {
            Some(old) if old.get("spec") != object.get("spec") => {
                old["metadata"]["generation"].as_i64().unwrap_or(1) + 1
            }
            Some(old) => old["metadata"]["generation"].as_i64().unwrap_or(1),
            None => 1,
        };
        if let Some(old) = &existing
            && object.get("status").is_none()
            && let Some(st) = old.get("status")
        {
            object["status"] = st.clone();
        }
        object["metadata"]["generation"] = json!(generation);
        if let Some(old) = &existing
            && let Some(ts) = old["metadata"].get("deletionTimestamp")
        {
            // A deletion cannot be undone by a write.
            object["metadata"]["deletionTimestamp"] = ts.clone();
        }
        if existing.is_some() && is_released(&object) {
            return self.commit(&mut store, key, object, "DELETED");
        }
        if existing.is_none() {
            object["metadata"]["uid"] = json!(format!("uid-{}", store.rv + 1));
            object["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        let kind = if existing.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.commit(&mut store, key, object, kind)
    }

    /// From the next status write to an object of `plural` on, hold every watch event of
    /// `plural` back from the watchers (the watches stay open, their other events flow)
    /// until [`release_watch`](Self::release_watch): the watchers' caches keep the objects
    /// as they were before that write, as a watch that lags behind leaves them.
    #[allow(dead_code)]
    pub fn hold_watch_from_status_write(&self, plural: &str) {
        self.store.lock().unwrap().hold = Some(Hold {
            plural: plural.into(),
            from: None,
            held: 0,
        });
        self.released.send_replace(false);
    }

    /// The watch events held back so far: with a hold, one per write committed since the
    /// first status write (that one included).
    #[allow(dead_code)]
    pub fn held_events(&self) -> usize {
        self.store
            .lock()
            .unwrap()
            .hold
            .as_ref()
            .map_or(0, |h| h.held)
    }

    /// Let the held watch events go, in order.
    #[allow(dead_code)]
    pub fn release_watch(&self) {
        self.store.lock().unwrap().hold = None;
        self.released.send_replace(true);
    }

    /// Whether a watch must hold `event` back for now.
    fn is_held(&self, event: &WatchEvent) -> bool {
        self.store
            .lock()
            .unwrap()
            .hold
            .as_ref()
            .is_some_and(|h| h.plural == event.plural && h.from.is_some_and(|f| event.rv >= f))
    }

    /// Wait while `event` is held back.
    async fn gate(&self, event: &WatchEvent) {
        if self.is_held(event) {
            let mut released = self.released.subscribe();
            let _ = released.wait_for(|r| *r).await;
        }
    }

    fn commit(
        &self,
        store: &mut Store,
        key: ObjKey,
        mut object: Value,
        kind: &'static str,
    ) -> Value {
        store.rv += 1;
        if let Some(hold) = store.hold.as_mut()
            && hold.plural == key.plural
            && hold.from.is_some()
        {
            hold.held += 1;
        }
        object["metadata"]["resourceVersion"] = json!(store.rv.to_string());
        let event = WatchEvent {
            rv: store.rv,
            prefix: key.prefix.clone(),
            plural: key.plural.clone(),
            namespace: key.namespace.clone(),
            kind,
            object: object.clone(),
        };
        if kind == "DELETED" {
            store.objects.remove(&key);
        } else {
            store.objects.insert(key, object.clone());
        }
        store.history.push(event.clone());
        let _ = self.events.send(event);
        object
    }

    pub fn get(&self, prefix: &str, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let key = ObjKey {
            prefix: prefix.into(),
            plural: plural.into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        self.store.lock().unwrap().objects.get(&key).cloned()
    }

    /// Every object of one plural.
    pub fn all(&self, plural: &str) -> Vec<Value> {
        let store = self.store.lock().unwrap();
        store
            .objects
            .iter()
            .filter(|(k, _)| k.plural == plural)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn log(&self) -> Vec<Logged> {
        self.store.lock().unwrap().log.clone()
    }

    /// Delete an object as the API server does: with finalizers it is only marked (its
    /// `deletionTimestamp` set and, as for any object with a generation, the generation
    /// bumped; a MODIFIED event) and goes once they are all removed; without them it goes
    /// at once (a DELETED event). The object as left, `None` when there was none.
    pub fn delete(&self, prefix: &str, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let key = ObjKey {
            prefix: prefix.into(),
            plural: plural.into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        let mut store = self.store.lock().unwrap();
        let mut object = store.objects.get(&key).cloned()?;
        let has_finalizers = object["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if !has_finalizers {
            return Some(self.commit(&mut store, key, object, "DELETED"));
        }
        if object["metadata"].get("deletionTimestamp").is_some() {
            return Some(object);
        }
        object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
        object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        if let Some(g) = object["metadata"]["generation"].as_i64() {
            object["metadata"]["generation"] = json!(g + 1);
        }
        Some(self.commit(&mut store, key, object, "MODIFIED"))
    }
}

/// A deleted object whose finalizers are all gone: the server lets it go.
fn is_released(object: &Value) -> bool {
    object["metadata"].get("deletionTimestamp").is_some()
        && object["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty())
}

/// RFC 6902 JSON patch (`test`, `add`, `remove`, `replace`); the error is the message of
/// a 422.
fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops.as_array().ok_or("a JSON patch is an array")?;
    for op in ops {
        let path = op["path"].as_str().ok_or("an operation without a path")?;
        let (parent, last) = match path.rfind('/') {
            Some(i) => (
                &path[..i],
                path[i + 1..].replace("~1", "/").replace("~0", "~"),
            ),
            None => return Err(format!("bad path {path}")),
        };
        match op["op"].as_str() {
            Some("test") => {
                let found = target.pointer(path).unwrap_or(&Value::Null);
                if found != &op["value"] {
                    return Err(format!(
                        "test failed: {path} is {found}, not {}",
                        op["value"]
                    ));
                }
            }
            Some(kind @ ("add" | "replace" | "remove")) => {
                let container = target
                    .pointer_mut(parent)
                    .ok_or_else(|| format!("no {parent}"))?;
                match container {
                    Value::Object(m) => {
                        if kind == "remove" {
                            m.remove(&last).ok_or_else(|| format!("no {path}"))?;
                        } else {
                            m.insert(last, op["value"].clone());
                        }
                    }
                    Value::Array(a) => {
                        let at = if last == "-" {
                            a.len()
                        } else {
                            last.parse().map_err(|_| format!("bad index in {path}"))?
                        };
                        match kind {
                            "add" if at <= a.len() => a.insert(at, op["value"].clone()),
                            "replace" if at < a.len() => a[at] = op["value"].clone(),
                            "remove" if at < a.len() => {
                                a.remove(at);
                            }
                            _ => return Err(format!("index out of range in {path}")),
                        }
                    }
                    _ => return Err(format!("{parent} is not a container")),
                }
            }
            other => return Err(format!("operation {other:?} not served")),
        }
    }
    Ok(())
}

async fn handle(State(s): State<StandIn>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body: Bytes = axum::body::to_bytes(req.into_body(), 64 << 20)
        .await
        .unwrap_or_default();
    let body_text = String::from_utf8_lossy(&body).to_string();
    s.store.lock().unwrap().log.push(Logged {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        content_type: content_type.clone(),
        body: body_text.clone(),
    });
    let params: BTreeMap<String, String> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let Some((prefix, plural, namespace, name, sub)) = parse_path(&path) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("no route {path}"),
        );
    };
    match (method, name) {
        (Method::GET, None) => {
            if params.get("watch").is_some_and(|w| w == "true" || w == "1") {
                watch(&s, prefix, plural, namespace, &params)
            } else {
                list(&s, &prefix, &plural, &namespace)
            }
        }
        (Method::GET, Some(name)) => {
            let Some(obj) = s.get(&prefix, &plural, &namespace, &name) else {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{plural} \"{name}\" not found"),
                );
            };
            match sub.as_deref() {
                Some("scale") => ok_json(StatusCode::OK, &scale_of(&obj)),
                _ => ok_json(StatusCode::OK, &obj),
            }
        }
        (Method::POST, None) => {
            let Ok(mut obj) = serde_json::from_str::<Value>(&body_text) else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "body is not JSON");
            };
            if obj["metadata"]["name"].is_null() {
                let prefix_name = obj["metadata"]["generateName"]
                    .as_str()
                    .unwrap_or("obj-")
                    .to_string();
                let n = s.store.lock().unwrap().rv + 1;
                obj["metadata"]["name"] = json!(format!("{prefix_name}{n}"));
            }
            obj["metadata"]["namespace"] = json!(namespace);
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            if s.get(&prefix, &plural, &namespace, &name).is_some() {
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    &format!("{plural} \"{name}\" already exists"),
                );
            }
            let created = s.put(&prefix, &plural, obj);
            ok_json(StatusCode::CREATED, &created)
        }
        (Method::PUT, Some(name)) => {
            let Ok(obj) = serde_json::from_str::<Value>(&body_text) else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "body is not JSON");
            };
            let Some(old) = s.get(&prefix, &plural, &namespace, &name) else {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{plural} \"{name}\" not found"),
                );
            };
            let want = obj["metadata"]["resourceVersion"].as_str();
            if want.is_some() && want != old["metadata"]["resourceVersion"].as_str() {
                return status(
                    StatusCode::CONFLICT,
                    "Conflict",
                    "the object has been modified",
                );
            }
            let updated = s.put(&prefix, &plural, obj);
            ok_json(StatusCode::OK, &updated)
        }
        (Method::PATCH, Some(name)) => loop {
            let Some(mut obj) = s.get(&prefix, &plural, &namespace, &name) else {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{plural} \"{name}\" not found"),
                );
            };
            // Read, patch, then commit only onto the version read (else patch again): a
            // write that came in between is kept, as the API server's update does.
            let read_rv = obj["metadata"]["resourceVersion"].clone();
            // A patch that names a resourceVersion is conditional on it, whatever its type.
            let wanted = serde_json::from_str::<Value>(&body_text)
                .ok()
                .and_then(|p| p.pointer("/metadata/resourceVersion").cloned());
            if let Some(wanted) = wanted
                && wanted != read_rv
            {
                return status(
                    StatusCode::CONFLICT,
                    "Conflict",
                    &format!(
                        "Operation cannot be fulfilled on {plural} \"{name}\": the object has \
                         been modified; please apply your changes to the latest version and try \
                         again"
                    ),
                );
            }
            let patch: Value = if content_type.contains("yaml") {
                match serde_saphyr::from_str(&body_text) {
                    Ok(v) => v,
                    Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
                }
            } else {
                match serde_json::from_str(&body_text) {
                    Ok(v) => v,
                    Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
                }
            };
            match sub.as_deref() {
                Some("status") => {
                    // Only the status of a status patch counts, as on a real server.
                    if let Some(st) = patch.get("status") {
                        merge(&mut obj["status"], st);
                    }
                }
                Some("scale") => {
                    if let Some(r) = patch.pointer("/spec/replicas") {
                        obj["spec"]["replicas"] = r.clone();
                    }
                }
                _ if content_type.contains("json-patch") => {
                    let status = obj.get("status").cloned();
                    if let Err(e) = json_patch(&mut obj, &patch) {
                        return self::status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &e);
                    }
                    match status {
                        Some(st) => obj["status"] = st,
                        None => {
                            if let Some(m) = obj.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                _ => {
                    let mut patch = patch;
                    if let Some(m) = patch.as_object_mut() {
                        m.remove("status");
                    }
                    merge(&mut obj, &patch);
                }
            }
            let mut store = s.store.lock().unwrap();
            let key = ObjKey {
                prefix: prefix.clone(),
                plural: plural.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
            };
            match store.objects.get(&key) {
                None => {
                    return status(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        &format!("{plural} \"{name}\" not found"),
                    );
                }
                Some(current) if current["metadata"]["resourceVersion"] != read_rv => continue,
                Some(_) => {}
            }
            let kind = if is_released(&obj) {
                "DELETED"
            } else {
                "MODIFIED"
            };
            let next = store.rv + 1;
            if sub.as_deref() == Some("status")
                && let Some(hold) = store.hold.as_mut()
                && hold.plural == plural
                && hold.from.is_none()
            {
                hold.from = Some(next);
            }
            let updated = s.commit(&mut store, key, obj, kind);
            drop(store);
            break match sub.as_deref() {
                Some("scale") => ok_json(StatusCode::OK, &scale_of(&updated)),
                _ => ok_json(StatusCode::OK, &updated),
            };
        },
        (Method::DELETE, Some(name)) if sub.is_none() => {
            match s.delete(&prefix, &plural, &namespace, &name) {
                Some(obj) => ok_json(StatusCode::OK, &obj),
                None => status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{plural} \"{name}\" not found"),
                ),
            }
        }
        (m, _) => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!("{m} not served"),
        ),
    }
}

fn scale_of(obj: &Value) -> Value {
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"],
            "resourceVersion": obj["metadata"]["resourceVersion"]
        },
        "spec": { "replicas": obj["spec"]["replicas"].as_i64().unwrap_or(0) },
        "status": { "replicas": obj["status"]["replicas"].as_i64().unwrap_or(0), "selector": "app=worker" }
    })
}

fn matches(
    ev_prefix: &str,
    ev_plural: &str,
    ev_ns: &str,
    prefix: &str,
    plural: &str,
    namespace: &str,
) -> bool {
    ev_prefix == prefix && ev_plural == plural && (namespace.is_empty() || ev_ns == namespace)
}

fn list(s: &StandIn, prefix: &str, plural: &str, namespace: &str) -> Response {
    let store = s.store.lock().unwrap();
    let items: Vec<Value> = store
        .objects
        .iter()
        .filter(|(k, _)| {
            matches(
                &k.prefix,
                &k.plural,
                &k.namespace,
                prefix,
                plural,
                namespace,
            )
        })
        .map(|(_, v)| v.clone())
        .collect();
    let api_version = prefix
        .trim_start_matches("/apis/")
        .trim_start_matches("/api/");
    ok_json(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", kind_of(plural)),
            "apiVersion": api_version,
            "metadata": { "resourceVersion": store.rv.to_string() },
            "items": items
        }),
    )
}

fn watch(
    s: &StandIn,
    prefix: String,
    plural: String,
    namespace: String,
    params: &BTreeMap<String, String>,
) -> Response {
    let since: u64 = params
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(60))
        .min(Duration::from_secs(30));
    let mut rx = s.events.subscribe();
    let backlog: Vec<WatchEvent> = s
        .store
        .lock()
        .unwrap()
        .history
        .iter()
        .filter(|e| e.rv > since)
        .cloned()
        .collect();
    let (tx, body_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let s = s.clone();
    tokio::spawn(async move {
        let line = |e: &WatchEvent| {
            Bytes::from(format!("{}\n", json!({"type": e.kind, "object": e.object})))
        };
        let mut last = since;
        for e in backlog {
            if matches(
                &e.prefix,
                &e.plural,
                &e.namespace,
                &prefix,
                &plural,
                &namespace,
            ) {
                last = e.rv;
                s.gate(&e).await;
                if tx.send(Ok(line(&e))).await.is_err() {
                    return;
                }
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                ev = rx.recv() => match ev {
                    Ok(e) if e.rv > last && matches(&e.prefix, &e.plural, &e.namespace, &prefix, &plural, &namespace) => {
                        last = e.rv;
                        s.gate(&e).await;
                        if tx.send(Ok(line(&e))).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                },
            }
        }
    });
    let stream = tokio_stream_from(body_rx);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// `jobqueue operator` run against a stand-in, its log in a file; killed when dropped.
pub struct OperatorProcess {
    pub child: Child,
    /// The address of its /metrics and /readyz.
    pub metrics: String,
    log: PathBuf,
}

impl OperatorProcess {
    /// `jobqueue operator --metrics-addr <a free port> <args>` with a kubeconfig for
    /// `api` in `namespace`, kept (with the log) in `dir`.
    pub fn start(
        api: &StandIn,
        namespace: &str,
        dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> OperatorProcess {
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, api.kubeconfig(namespace)).unwrap();
        let metrics = format!("127.0.0.1:{}", free_port());
        let log = dir.join("operator.log");
        let child = Command::new(env!("CARGO_BIN_EXE_jobqueue"))
            .args(["operator", "--metrics-addr", &metrics])
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("RUST_LOG")
            // Every status change written, as the tests read counts from the status (a
            // test's own env or flag wins).
            .env("JOBQUEUE_STATUS_INTERVAL", "0s")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the operator");
        OperatorProcess {
            child,
            metrics,
            log,
        }
    }

    /// The value of the sample `series` (name and labels, as printed) on its /metrics.
    #[allow(dead_code)]
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = http_get(&self.metrics, "/metrics").await?;
        body.lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A wait for `what` (30 s, polled every 50 ms) that fails with the operator's log.
    pub fn wait_for(&self, what: &str) -> Wait<'static> {
        let log = self.log.clone();
        Wait::for_(what)
            .every(Duration::from_millis(50))
            .explained_by(move || {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                format!("operator log:\n{log}")
            })
    }

    /// SIGTERM, then its exit status within `within`.
    pub async fn terminate(&mut self, within: Duration) -> ExitStatus {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let wait = self.wait_for("an exit after SIGTERM").within(within);
        let child = &mut self.child;
        wait.until(async || child.try_wait().ok().flatten()).await
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET: the status code and the whole response.
pub async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, out))
}
