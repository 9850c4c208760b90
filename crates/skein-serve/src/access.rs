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
*/

use crate::ServeError;
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;

const COOKIE: &str = "skein_token";

/// The access rule in force.
#[derive(Clone, Debug)]
pub struct Access {
    token: Option<Arc<str>>,
}

impl Access {
    pub fn for_bind(bind: SocketAddr, token: Option<String>) -> Result<Access, ServeError> {
        let token = token.filter(|token| !token.is_empty());
        if token.is_none() && !bind.ip().is_loopback() {
            return Err(ServeError::TokenRequired { bind });
        }
        Ok(Access {
            token: token.map(Arc::from),
        })
    }

    /// Wrap `app` so that every request is checked.
    pub fn guard(self, app: Router) -> Router {
        match self.token {
            None => app.layer(middleware::from_fn(loopback_host)),
            Some(token) => app.layer(middleware::from_fn(move |request, next| {
                check(token.clone(), request, next)
            })),
        }
    }
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
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
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
        assert!(Access::for_bind("127.0.0.1:0".parse().unwrap(), None).is_ok());
        assert!(Access::for_bind("[::1]:0".parse().unwrap(), None).is_ok());
        let error = Access::for_bind("0.0.0.0:8080".parse().unwrap(), None).unwrap_err();
        assert!(error.to_string().contains("--token"), "{error}");
        assert!(Access::for_bind("0.0.0.0:8080".parse().unwrap(), Some(String::new())).is_err());
        assert!(Access::for_bind("0.0.0.0:8080".parse().unwrap(), Some("t".into())).is_ok());
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
    fn tokens_compare_exactly() {
        assert!(same("abc", "abc"));
        assert!(!same("abd", "abc"));
        assert!(!same("ab", "abc"));
    }
}
