//! Every error of the API is JSON, `{"error": "..."}`, as docs/console.md says: the
//! handlers' own are; this layer turns the rest (an unknown route, a wrong method, a
//! body that is not the JSON or form expected, or too large, a bad query string) into
//! the same shape, keeping the status and the reason. A body announced larger than
//! [`MAX_BODY`] is refused before it is read.

use axum::body::to_bytes;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

/// The most of a plain-text error body kept as the message.
const MAX_MESSAGE: usize = 4096;
/// The largest request body taken (axum's own limit for JSON and forms): one announced
/// larger is refused before any of it is read.
pub const MAX_BODY: u64 = 2 << 20;

fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// The middleware: an error reply of an `/api/` path that is not JSON becomes JSON.
pub async fn json_errors(req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = announced.filter(|l| *l > MAX_BODY) {
        return super::guard::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is {length} bytes: at most {MAX_BODY} are taken"),
        );
    }
    let response = next.run(req).await;
    let status = response.status();
    if !path.starts_with("/api/") || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    if is_json(&response) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = to_bytes(body, MAX_MESSAGE * 4).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let text: String = text.trim().chars().take(MAX_MESSAGE).collect();
    let message = match status {
        StatusCode::NOT_FOUND => format!("no such API route: {method} {path}"),
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("another method");
            format!("{method} is not allowed on {path} (use {allowed})")
        }
        _ if !text.is_empty() => text,
        _ => status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_string(),
    };
    let mut reply = super::guard::error(status, message);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            reply.headers_mut().insert(name, value.clone());
        }
    }
    reply
}
