/*!
Who may use the server. A loopback bind is reachable only from this
machine and needs no token (one may still be set); any other bind needs a
token, and then every request must present it, as `Authorization: Bearer
TOKEN` or, for a browser opening the web view, a `token` query parameter
(which sets a cookie so the page's own requests carry it).

Without a token, requests must also be addressed to this machine by name
(`Host: localhost`, `127.0.0.1`, `[::1]`, any port). A web page elsewhere
could otherwise point a name of its own at 127.0.0.1 (DNS rebinding) and
read the graph through the browser of the person running `skein serve`.

Writes (any method but `GET`, `HEAD`, `OPTIONS`, `TRACE`) must also come
from this server's own pages or from a program, never from a page of
another origin that the browser lets send a request without reading the
answer (`fetch(..., {mode: "no-cors"})`, a form): such a request would
still make the proxy call its model with the operator's credential. So a
write must be `Content-Type: application/json`, which no page can send
cross-origin without the CORS preflight this server never grants, and a
write carrying the browser's `Origin` (or `Sec-Fetch-Site`) must come from
the origin it is addressed to, unless it presents the token in its
`Authorization` header (which browsers never add on their own; the cookie
does not count: browsers attach it to requests from other ports of the
same host).

The web view's own writes (`/api/...`) must also carry the server's CSRF
token in an `X-Skein-Csrf` header: a random token of this server process
that only its pages can read (from `/api/session`; no CORS header lets
another origin read an answer). And a server started read-only
(`skein serve --read-only`) refuses every write, whoever asks. The web
view's event stream, which holds one of a few places while it is open, is
refused to pages of other origins as writes are.

A proxy with client keys ([`crate::ProxyConfig::clients`]) needs a token,
the operator's: the web view shows and acts on every conversation, so
clients must not open it. Its clients are given their keys only, which
open the proxy's routes (`/v1/...`, where the proxy checks the key, 401
without a known one) and nothing else; those routes do not ask for the
token.
*/

use crate::ServeError;
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;

const COOKIE: &str = "skein_token";
/// The web view's event stream (see `web::events`).
const EVENTS: &str = "/api/events";
/// The header a web view write carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-skein-csrf";

/// The access rule in force.
#[derive(Clone, Debug)]
pub struct Access {
    token: Option<Arc<str>>,
    writes: Writes,
    /// The proxy's routes take client keys in place of the token.
    keyed_proxy: bool,
}

/// What a write must satisfy besides the token.
#[derive(Clone, Debug)]
struct Writes {
    csrf: Arc<str>,
    read_only: bool,
}

impl Access {
    /// The rule for a server bound to `bind`, with `token` if given, and a
    /// fresh CSRF token; `read_only` refuses every write.
    pub fn for_bind(
        bind: SocketAddr,
        token: Option<String>,
        read_only: bool,
    ) -> Result<Access, ServeError> {
        let token = token.filter(|token| !token.is_empty());
        if token.is_none() && !bind.ip().is_loopback() {
            return Err(ServeError::TokenRequired { bind });
        }
        // Two version 4 UUIDs: 244 random bits from the operating system.
        let csrf = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        Ok(Access {
            token: token.map(Arc::from),
            writes: Writes {
                csrf: Arc::from(csrf),
                read_only,
            },
            keyed_proxy: false,
        })
    }

    /// The proxy's routes (`/v1/...`) authenticate their requests by client
    /// key (see the module docs), not by the token; only with a token.
    pub fn with_keyed_proxy(mut self) -> Result<Access, ServeError> {
        if self.token.is_none() {
            return Err(ServeError::ClientKeysNeedToken);
        }
        self.keyed_proxy = true;
        Ok(self)
    }

    /// The CSRF token the web view's writes must carry.
    pub fn csrf(&self) -> Arc<str> {
        self.writes.csrf.clone()
    }

    /// Wrap `app` so that every request is checked: who may connect
    /// first, then what a write must look like.
    pub fn guard(self, app: Router) -> Router {
        let token = self.token.clone();
        let rule = self.writes.clone();
        let app = app.layer(middleware::from_fn(move |request, next| {
            writes(token.clone(), rule.clone(), request, next)
        }));
        let keyed_proxy = self.keyed_proxy;
        match self.token {
            None => app.layer(middleware::from_fn(loopback_host)),
            Some(token) => app.layer(middleware::from_fn(move |request: Request, next: Next| {
                let token = token.clone();
                async move {
                    if keyed_proxy && is_proxy_route(&request) {
                        return next.run(request).await;
                    }
                    check(token, request, next).await
                }
            })),
        }
    }
}

/// The rule for writes (see the module docs).
async fn writes(token: Option<Arc<str>>, rule: Writes, request: Request, next: Next) -> Response {
    if request.method().is_safe() {
        // An event stream holds one of a few places while it is open: a
        // page of another origin may not take them (its browser would
        // drop the answer anyway, having no CORS header to read it by).
        if request.uri().path() == EVENTS
            && let Some(problem) = cross_site(&request)
        {
            return refuse(StatusCode::FORBIDDEN, format!("refused: {problem}"));
        }
        return next.run(request).await;
    }
    if request.method() != Method::POST {
        // Every route is GET or POST: the router answers this 405 with the
        // methods the path takes (404 for no such path), and nothing runs.
        // A route taking another method would have to pass the rule below.
        return next.run(request).await;
    }
    if rule.read_only {
        return refuse(
            StatusCode::FORBIDDEN,
            "this skein server is read-only (skein serve --read-only): it makes no turns, forks or \
             reruns and records nothing"
                .into(),
        );
    }
    let with_token = token
        .as_deref()
        .zip(bearer(&request))
        .is_some_and(|(token, given)| same(&given, token));
    if !with_token && let Some(problem) = cross_site(&request) {
        tracing::warn!(method = %request.method(), path = %request.uri().path(), "refused a cross-site write: {problem}");
        return (
            StatusCode::FORBIDDEN,
            format!(
                "refused: {problem}. This skein server accepts writes only from its own pages and \
                 from programs (which send no Origin), or with `Authorization: Bearer TOKEN`\n"
            ),
        )
            .into_response();
    }
    if !is_json(&request) {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a write to this skein server must be `Content-Type: application/json` \
             (curl: -H 'Content-Type: application/json')\n",
        )
            .into_response();
    }
    if request.uri().path().starts_with("/api/") {
        let given = request
            .headers()
            .get(CSRF_HEADER)
            .and_then(|value| value.to_str().ok());
        let problem = match given {
            None => "has no",
            Some(given) if !same(given, &rule.csrf) => "has the wrong",
            Some(_) => return next.run(request).await,
        };
        tracing::warn!(path = %request.uri().path(), "refused a web view write that {problem} CSRF token");
        return refuse(
            StatusCode::FORBIDDEN,
            format!(
                "refused: the request {problem} CSRF token. A write to the web view must carry \
                 the `X-Skein-Csrf` header with the token of GET /api/session (a new one each \
                 time the server starts: reload the page)"
            ),
        );
    }
    next.run(request).await
}

/// Whether `request` is for one of the proxy's routes, which a keyed proxy
/// authenticates by client key.
fn is_proxy_route(request: &Request) -> bool {
    request.uri().path().starts_with("/v1/")
}

/// A refusal with a JSON body, as the web view's API answers errors.
fn refuse(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

/// Why a request comes from a page of another origin, if it does.
fn cross_site(request: &Request) -> Option<String> {
    let headers = request.headers();
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("(not text)");
        if site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site") {
            return Some(format!("the browser says the request is {site}"));
        }
    }
    let origin = headers.get(header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or("(not text)");
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok());
    match host {
        Some(host) if same_origin(origin, host) => None,
        Some(host) => Some(format!("a page of {origin} may not write to http://{host}")),
        None => Some(format!(
            "a page of {origin} sent a request without a Host header"
        )),
    }
}

/// Whether `origin` (`scheme://host[:port]`) names the server addressed as
/// `host` (the `Host` header). The scheme is not compared: behind a TLS
/// proxy the page's origin is `https` while this server speaks plain HTTP.
fn same_origin(origin: &str, host: &str) -> bool {
    origin
        .split_once("://")
        .is_some_and(|(_scheme, authority)| authority.eq_ignore_ascii_case(host))
}

/// Whether the body is declared as JSON (`application/json`, any
/// parameters).
fn is_json(request: &Request) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

async fn check(token: Arc<str>, request: Request, next: Next) -> Response {
    let presented = bearer(&request).or_else(|| cookie(&request));
    if presented
        .as_deref()
        .is_some_and(|given| same(given, &token))
    {
        return next.run(request).await;
    }
    if let Some(given) = query_token(&request)
        && same(&given, &token)
    {
        let mut response = next.run(request).await;
        if let Ok(value) = HeaderValue::from_str(&format!(
            "{COOKIE}={given}; HttpOnly; SameSite=Strict; Path=/"
        )) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
        return response;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "this skein server needs its token: send `Authorization: Bearer TOKEN`, or open the page with ?token=TOKEN\n",
    )
        .into_response()
}

async fn loopback_host(request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .map(|value| value.to_str().unwrap_or("(not text)").to_string());
    match host {
        Some(host) if !names_loopback(&host) => (
            StatusCode::FORBIDDEN,
            format!(
                "this skein server has no token, so it only answers requests addressed to \
                 localhost or a loopback address, not to `{host}`: open it as http://127.0.0.1:PORT/, \
                 or restart it with --token\n"
            ),
        )
            .into_response(),
        // Clients that send no Host (HTTP/1.0) are not browsers.
        _ => next.run(request).await,
    }
}

/// Whether a `Host` header value names this machine: `localhost` or a
/// loopback address, with or without a port.
fn names_loopback(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _port)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Compare without stopping at the first difference.
fn same(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn bearer(request: &Request) -> Option<String> {
    bearer_of(request.headers())
}

/// The token of an `Authorization: Bearer TOKEN` header.
pub(crate) fn bearer_of(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(str::to_string)
}

fn cookie(request: &Request) -> Option<String> {
    request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| {
            pair.trim()
                .strip_prefix(&format!("{COOKIE}="))
                .map(str::to_string)
        })
}

fn query_token(request: &Request) -> Option<String> {
    request
        .uri()
        .query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token=").map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_needs_no_token_and_other_binds_do() {
        let bind = |address: &str, token: Option<&str>| {
            Access::for_bind(address.parse().unwrap(), token.map(str::to_string), false)
        };
        assert!(bind("127.0.0.1:0", None).is_ok());
        assert!(bind("[::1]:0", None).is_ok());
        let error = bind("0.0.0.0:8080", None).unwrap_err();
        assert!(error.to_string().contains("--token"), "{error}");
        assert!(bind("0.0.0.0:8080", Some("")).is_err());
        assert!(bind("0.0.0.0:8080", Some("t")).is_ok());
    }

    #[test]
    fn each_server_has_its_own_long_csrf_token() {
        let one = Access::for_bind("127.0.0.1:0".parse().unwrap(), None, false).unwrap();
        let two = Access::for_bind("127.0.0.1:0".parse().unwrap(), None, false).unwrap();
        assert_eq!(one.csrf().len(), 64);
        assert_ne!(one.csrf(), two.csrf());
    }

    #[test]
    fn only_loopback_names_pass_without_a_token() {
        for host in [
            "localhost",
            "LOCALHOST:8765",
            "127.0.0.1",
            "127.0.0.1:8765",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:8765",
        ] {
            assert!(names_loopback(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8765",
            "localhost.evil.example",
            "10.0.0.1:8765",
            "[::2]:8765",
            "",
        ] {
            assert!(!names_loopback(host), "{host}");
        }
    }

    #[test]
    fn an_origin_is_this_server_only_with_its_exact_host_and_port() {
        assert!(same_origin("http://127.0.0.1:8765", "127.0.0.1:8765"));
        assert!(same_origin("http://LOCALHOST:8765", "localhost:8765"));
        assert!(same_origin("https://skein.example", "skein.example"));
        assert!(!same_origin("http://127.0.0.1:9999", "127.0.0.1:8765"));
        assert!(!same_origin("http://127.0.0.2:8765", "127.0.0.1:8765"));
        assert!(!same_origin("http://localhost:8765", "127.0.0.1:8765"));
        assert!(!same_origin("http://127.0.0.1:8765.evil", "127.0.0.1:8765"));
        assert!(!same_origin("null", "127.0.0.1:8765"));
        assert!(!same_origin("", "127.0.0.1:8765"));
    }

    #[test]
    fn tokens_compare_exactly() {
        assert!(same("abc", "abc"));
        assert!(!same("abd", "abc"));
        assert!(!same("ab", "abc"));
    }
}
