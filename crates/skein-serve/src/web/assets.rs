/*!
The page's files, embedded in the binary (no build step, nothing fetched
from anywhere), and the headers every web-view response carries. The
script is plain ES modules: `app.js` (routing and views) imports `util.js`
(DOM, API, formatting), `actions.js` (the actions at a message), `diff.js`
(word differences), `live.js` (live updates), `keys.js` (the keyboard and
its `?` overlay) and `replays.js` (the replay pages).
*/

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

struct Asset {
    name: &'static str,
    body: &'static str,
}

impl Asset {
    const fn new(name: &'static str, body: &'static str) -> Asset {
        Asset { name, body }
    }

    /// The media type, by the file's extension.
    fn content_type(&self) -> &'static str {
        match self.name.rsplit_once('.').map(|(_, extension)| extension) {
            Some("html") => "text/html; charset=utf-8",
            Some("js") => "text/javascript; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            Some("svg") => "image/svg+xml",
            _ => "application/octet-stream",
        }
    }
}

const INDEX: Asset = Asset::new("index.html", include_str!("assets/index.html"));

const ASSETS: &[Asset] = &[
    Asset::new("app.js", include_str!("assets/app.js")),
    Asset::new("util.js", include_str!("assets/util.js")),
    Asset::new("actions.js", include_str!("assets/actions.js")),
    Asset::new("diff.js", include_str!("assets/diff.js")),
    Asset::new("live.js", include_str!("assets/live.js")),
    Asset::new("keys.js", include_str!("assets/keys.js")),
    Asset::new("replays.js", include_str!("assets/replays.js")),
    Asset::new("style.css", include_str!("assets/style.css")),
    Asset::new("icon.svg", include_str!("assets/icon.svg")),
];

/// What the page may load and do: its own script, style and icon, requests
/// to this server, nothing inline, no frames. Content shown is model output;
/// even if some of it reached the DOM as markup it could not run.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// `GET /`
pub async fn index(request_headers: HeaderMap) -> Response {
    serve(&INDEX, &request_headers)
}

/// `GET /assets/{file}`
pub async fn asset(Path(file): Path<String>, request_headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|asset| asset.name == file) {
        Some(asset) => serve(asset, &request_headers),
        None => (StatusCode::NOT_FOUND, format!("no asset named `{file}`\n")).into_response(),
    }
}

/// An asset with an ETag, so reloading the page costs a 304 per file.
fn serve(asset: &'static Asset, request_headers: &HeaderMap) -> Response {
    let tag = etag(asset);
    let fresh = request_headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|given| given.as_bytes() == tag.as_bytes());
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        asset.body.into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type()),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(value) = HeaderValue::from_str(tag) {
        headers.insert(header::ETAG, value);
    }
    response
}

fn etag(asset: &'static Asset) -> &'static str {
    static TAGS: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        std::iter::once(&INDEX)
            .chain(ASSETS)
            .map(|asset| {
                // SipHash with fixed keys: the same bytes give the same tag
                // in every process, and the version covers a rebuild.
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                asset.body.hash(&mut hasher);
                let tag = format!("\"{}-{:016x}\"", env!("CARGO_PKG_VERSION"), hasher.finish());
                (asset.name, tag)
            })
            .collect()
    });
    tags.iter()
        .find(|(name, _)| *name == asset.name)
        .map_or("\"\"", |(_, tag)| tag.as_str())
}

/// Headers on every web-view response: the content security policy, no
/// MIME sniffing, no framing, no referrer, and no caching of API answers
/// (the graph changes while the page is open). A handler's own values win.
pub async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let defaults = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in defaults {
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    }
    response
}
