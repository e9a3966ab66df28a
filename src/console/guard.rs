//! What keeps the console safe by default, as one middleware in front of every route:
//!
//! - On a loopback address, the `Host` header must name that address (or `localhost`):
//!   a page of another site cannot reach the console through DNS rebinding.
//! - With a token (`--token-file`), every request but the login page carries it as
//!   `Authorization: Bearer …`, or the cookie the login page sets (a session of that
//!   login, see `session`: never the token itself). Without one the console only
//!   listens on loopback.
//! - Every POST carries the CSRF token of the page (`X-CSRF-Token`, new at each start), and
//!   an `Origin`, when the browser sends one, must be the console's own; a read-only
//!   console refuses every write whatever it carries.
//! - Every response forbids inline scripts and framing (Content-Security-Policy), so a
//!   payload holding markup could not run even if it reached the page as markup.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::Console;

/// The header every POST carries the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A JSON error reply: `{"error": "..."}`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": message.into() })),
    )
        .into_response()
}

/// Equal without an early exit on the first differing byte.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn host_allowed(console: &Console, headers: &HeaderMap) -> bool {
    let listen = console.config.listen;
    if !listen.ip().is_loopback() {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let port = listen.port();
    [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("{listen}"),
    ]
    .iter()
    .any(|allowed| allowed.eq_ignore_ascii_case(host))
}

/// Who the request is, for the audit log: `bearer`, `session N`, `anyone` (no token
/// configured); none when it carries neither the token nor a live session.
fn authenticated(console: &Console, headers: &HeaderMap) -> Option<String> {
    let Some(token) = &console.config.token else {
        return Some("anyone".to_string());
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer.is_some_and(|b| same(b.trim().as_bytes(), token.as_bytes())) {
        return Some("bearer".to_string());
    }
    super::session::session_id(headers, console.config.listen.port())
        .and_then(|id| console.sessions.check(id))
        .map(|serial| format!("session {serial}"))
}

/// The POST's origin is the console's own (or the client sent none, as scripts do).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let bare = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    !host.is_empty() && bare.eq_ignore_ascii_case(host)
}

/// Why a POST is refused: a read-only console (logout aside), a missing or wrong CSRF
/// token, another origin.
fn refuse_write(console: &Console, headers: &HeaderMap, path: &str) -> Option<Response> {
    // Logging out changes nothing of the queues: a read-only console allows it.
    if !console.config.allow_writes && path != "/logout" {
        return Some(error(
            StatusCode::FORBIDDEN,
            "the console is read-only: start it with --allow-writes to redrive or purge",
        ));
    }
    let token = headers.get(CSRF_HEADER).map(|v| v.as_bytes());
    if !token.is_some_and(|t| same(t, console.csrf.as_bytes())) {
        return Some(error(
            StatusCode::FORBIDDEN,
            "missing or wrong CSRF token (X-CSRF-Token): reload the page",
        ));
    }
    if !same_origin(headers) {
        return Some(error(
            StatusCode::FORBIDDEN,
            "the request comes from another origin",
        ));
    }
    None
}

/// The middleware: Host, token, read-only, CSRF, then the route, then the headers.
pub async fn guard(State(console): State<Arc<Console>>, req: Request, next: Next) -> Response {
    let mut response = check(&console, req, next).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn check(console: &Console, req: Request<Body>, next: Next) -> Response {
    let headers = req.headers();
    if !host_allowed(console, headers) {
        return error(
            StatusCode::MISDIRECTED_REQUEST,
            "the Host header does not name this console's address",
        );
    }
    let path = req.uri().path().to_string();
    let open = path == "/login" || path == "/favicon.ico" || path.starts_with("/assets/");
    let who = authenticated(console, headers);
    if !open && who.is_none() {
        if req.method() == Method::GET && !path.starts_with("/api/") {
            return Redirect::to("/login").into_response();
        }
        return error(
            StatusCode::UNAUTHORIZED,
            "a token is needed: Authorization: Bearer <token> (or sign in again: the \
             session ended or expired)",
        );
    }
    if req.method() == Method::POST && path != "/login" {
        let refused = refuse_write(console, headers, &path);
        if path == "/logout" && refused.is_none() {
            return next.run(req).await;
        }
        // Every write, refused or done, is an audit line.
        let peer = peer(&req);
        let method = req.method().to_string();
        let response = match refused {
            Some(refused) => refused,
            None => next.run(req).await,
        };
        super::audit::write(
            &method,
            &path,
            response.status().as_u16(),
            who.as_deref().unwrap_or("-"),
            peer,
        );
        return response;
    }
    next.run(req).await
}

/// The client's address, as the server recorded it (none in unit tests of a router).
pub fn peer(req: &axum::extract::Request) -> Option<std::net::SocketAddr> {
    req.extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|axum::extract::ConnectInfo(addr)| *addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_read_exactly() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:8080".parse().unwrap());
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, "http://127.0.0.1:8080".parse().unwrap());
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(!same_origin(&h));
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"ab", b"abc"));
    }
}
