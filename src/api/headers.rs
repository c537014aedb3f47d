//! Response headers that keep browsers from misreading or embedding wavegate's answers.
//!
//! The dashboard is one self-contained page with one inline `<script>` and one `<style>`; its
//! Content-Security-Policy allows exactly those (by SHA-256, CSP Level 2 hash sources), requests
//! only to wavegate itself, and no framing. Every other response is JSON or text and gets a policy
//! that allows nothing.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use std::sync::LazyLock;

/// The dashboard page, with the table and timeline model it shares with the UI extension.
pub(crate) static DASHBOARD: LazyLock<String> = LazyLock::new(|| {
    super::ui::with_model(include_str!("dashboard.html"))
        .expect("src/api/dashboard.html has one ui/waves.js region")
});

const NOTHING: &str =
    "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The dashboard's policy, with the hashes of its inline script and style.
pub(crate) static DASHBOARD_CSP: LazyLock<String> = LazyLock::new(|| {
    let script = inline_hashes(&DASHBOARD, "<script>", "</script>");
    let style = inline_hashes(&DASHBOARD, "<style>", "</style>");
    format!(
        "default-src 'none'; script-src {script}; style-src {style}; connect-src 'self'; \
         img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
});

/// `'sha256-…'` for the content of every `open … close` element in `html`.
fn inline_hashes(html: &str, open: &str, close: &str) -> String {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find(open) {
        let body = &rest[start + open.len()..];
        let Some(end) = body.find(close) else { break };
        let digest = ring::digest::digest(&ring::digest::SHA256, &body.as_bytes()[..end]);
        out.push(format!(
            "'sha256-{}'",
            base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
        ));
        rest = &body[end..];
    }
    if out.is_empty() {
        "'none'".into()
    } else {
        out.join(" ")
    }
}

pub(crate) async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // For browsers that predate CSP's frame-ancestors.
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // No cache between wavegate and its reader may keep an answer for another: through Argo
    // CD's proxy one URL (`/api/v1/waves`) answers for whichever Application the headers name,
    // and the answers are what the caller's token may see. A reader's own cache revalidates
    // (the UIs send `If-None-Match` themselves).
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, private"),
        );
    }
    if !h.contains_key(header::VARY) {
        h.insert(
            header::VARY,
            HeaderValue::from_static("Authorization, Argocd-Application-Name, Argocd-Project-Name"),
        );
    }
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(NOTHING),
        );
    }
    resp
}

/// `Content-Security-Policy` for the dashboard response.
pub(crate) fn dashboard_csp() -> (HeaderName, HeaderValue) {
    (
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_str(&DASHBOARD_CSP).unwrap_or(HeaderValue::from_static(NOTHING)),
    )
}
