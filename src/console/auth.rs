//! Login and logout: the token once on the login page for a session of its own (see
//! `session`), failed logins rate-limited per client address and in all, each one in
//! the audit log.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::{ConnectInfo, Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{Console, audit, guard, session};

const LOGIN: &str = include_str!("assets/login.html");

/// Failed logins allowed per client address in [`WINDOW`].
const PER_CLIENT: usize = 5;
/// Failed logins allowed from all addresses together in [`WINDOW`].
const IN_ALL: usize = 50;
const WINDOW: Duration = Duration::from_secs(60);

/// When failed logins happened, oldest first.
type Times = VecDeque<Instant>;

/// The failed logins of the last [`WINDOW`], per client address and in all.
#[derive(Default)]
pub struct Logins {
    failed: Mutex<(HashMap<IpAddr, Times>, Times)>,
}

impl Logins {
    /// How long until this client may try again, if it may not now.
    pub fn wait(&self, ip: Option<IpAddr>) -> Option<Duration> {
        let now = Instant::now();
        let mut failed = self.failed.lock().expect("logins lock");
        let (per, all) = &mut *failed;
        let prune = |q: &mut VecDeque<Instant>| {
            while q.front().is_some_and(|t| now.duration_since(*t) >= WINDOW) {
                q.pop_front();
            }
        };
        prune(all);
        per.retain(|_, q| {
            prune(q);
            !q.is_empty()
        });
        let until = |q: &VecDeque<Instant>, max: usize| {
            (q.len() >= max).then(|| WINDOW.saturating_sub(now.duration_since(q[q.len() - max])))
        };
        let mine = ip
            .and_then(|ip| per.get(&ip))
            .and_then(|q| until(q, PER_CLIENT));
        mine.or_else(|| until(all, IN_ALL))
    }

    pub fn failed(&self, ip: Option<IpAddr>) {
        let now = Instant::now();
        let mut failed = self.failed.lock().expect("logins lock");
        let (per, all) = &mut *failed;
        all.push_back(now);
        if let Some(ip) = ip {
            per.entry(ip).or_default().push_back(now);
        }
    }
}

pub async fn login_page() -> Html<&'static str> {
    Html(LOGIN)
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
}

fn login_error(status: StatusCode, text: &str) -> Response {
    (
        status,
        Html(LOGIN.replace(
            "<!--error-->",
            &format!("<p class=\"bad\" id=\"login-error\">{text}</p>"),
        )),
    )
        .into_response()
}

/// The login form: the token once, for a new session's cookie; the token itself never
/// goes into a cookie, a URL or a log.
pub async fn login(
    State(console): State<Arc<Console>>,
    peer: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let peer = peer.map(|Extension(ConnectInfo(p))| p);
    let Some(token) = &console.config.token else {
        return Redirect::to("/").into_response();
    };
    if let Some(wait) = console.logins.wait(peer.map(|p| p.ip())) {
        audit::login_failed(peer, true);
        let secs = wait.as_secs().max(1);
        let mut response = login_error(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("Too many wrong tokens: try again in {secs} s."),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return response;
    }
    if !guard::same(form.token.trim().as_bytes(), token.as_bytes()) {
        console.logins.failed(peer.map(|p| p.ip()));
        audit::login_failed(peer, false);
        return login_error(StatusCode::UNAUTHORIZED, "Wrong token.");
    }
    let (id, serial) = console.sessions.create();
    audit::login(serial, peer);
    let mut response = Redirect::to("/").into_response();
    let cookie = session::set_cookie(
        console.config.listen.port(),
        session::over_tls(&headers),
        &id,
    );
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `POST /logout` (with the CSRF token): the session ends on the server and its cookie
/// is removed; the reply is JSON (`{"done": true}`), the page then goes to the login.
pub async fn logout(
    State(console): State<Arc<Console>>,
    peer: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
) -> Response {
    let port = console.config.listen.port();
    let serial = session::session_id(&headers, port).and_then(|id| console.sessions.end(id));
    audit::logout(serial, peer.map(|Extension(ConnectInfo(p))| p));
    let mut response =
        axum::Json(serde_json::json!({"done": true, "login": "/login"})).into_response();
    for tls in [false, true] {
        if let Ok(value) = HeaderValue::from_str(&session::clear_cookie(port, tls)) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_logins_are_limited_per_client() {
        let logins = Logins::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..PER_CLIENT {
            assert_eq!(logins.wait(Some(a)), None);
            logins.failed(Some(a));
        }
        assert!(logins.wait(Some(a)).is_some_and(|w| w <= WINDOW));
        assert_eq!(logins.wait(Some(b)), None);
    }
}
