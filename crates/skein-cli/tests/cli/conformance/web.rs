//! The web API's column: the actions of `skein serve` at a node
//! (`POST /api/nodes/{id}/reply`, `/fork`), as the page calls them (with
//! the session's CSRF token). Its verdicts: 200 and a stream whose last
//! event is `done` (landed) or `error` (the model failed), or 400.

use super::{Cell, Place, Setup, Surface, Verdict, slow};
use serde_json::{Value, json};

pub(crate) struct WebApi;

/// `POST /api/nodes/{node}/{action}` with `body`: the verdict.
async fn act(base: String, node: String, action: &str, body: Value) -> Verdict {
    let client = client();
    let session: Value = client
        .get(format!("{base}/api/session"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let csrf = session["csrf"].as_str().unwrap().to_string();
    let response = client
        .post(format!("{base}/api/nodes/{node}/{action}"))
        .header("x-skein-csrf", csrf)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    match status {
        200 => match last_event(&text).as_deref() {
            Some("done") => Verdict::Landed,
            Some("error") => Verdict::ModelFailed,
            other => panic!("the turn's stream ended with {other:?}: {text}"),
        },
        400 => Verdict::Refused,
        status => panic!("POST {action} answered {status}: {text}"),
    }
}

/// An HTTP client for the local server.
pub(crate) fn client() -> reqwest::Client {
    skein::providers::http::install_crypto_provider();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// The name of a `text/event-stream` body's last event.
fn last_event(body: &str) -> Option<String> {
    body.lines()
        .rev()
        .find_map(|line| line.strip_prefix("event: "))
        .map(str::to_string)
}

fn turn(place: &Place, node: &str, action: &str, body: Value) -> Cell {
    let work = act(place.server.base(), node.to_string(), action, body);
    Cell::Ran(place.runtime.block_on(work))
}

impl Surface for WebApi {
    fn name(&self) -> String {
        "the web API".into()
    }

    fn start(&self, _: &Place, _: &str, _: Option<&str>) -> Cell {
        Cell::Lacks(
            "the web API acts at stored nodes: its new conversations are forks (the fork rows)",
        )
    }

    fn go_on(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        turn(place, &setup.head, "reply", json!({ "text": text }))
    }

    fn reply_at(&self, place: &Place, _: &Setup, node: &str, text: &str) -> Cell {
        turn(place, node, "reply", json!({ "text": text }))
    }

    fn fork(&self, place: &Place, setup: &Setup, text: &str, name: Option<&str>) -> Cell {
        let mut body = json!({ "text": text });
        if let Some(name) = name {
            body["name"] = json!(name);
        }
        turn(place, &setup.head, "fork", body)
    }

    fn race(&self, place: &Place, setup: &Setup, slow: &str, fast: &str) -> Cell<[Verdict; 2]> {
        let base = place.server.base();
        let slow_turn = place.runtime.spawn(act(
            base.clone(),
            setup.head.clone(),
            "reply",
            json!({ "text": slow, "model": slow::MODEL }),
        ));
        place.slow.wait_for(slow);
        let fast = place.runtime.block_on(act(
            base,
            setup.head.clone(),
            "reply",
            json!({ "text": fast }),
        ));
        place.slow.release(slow);
        let slow = place.runtime.block_on(slow_turn).unwrap();
        Cell::Ran([slow, fast])
    }

    fn tool_loop(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        self.go_on(place, setup, text)
    }

    /// The page's report of a recorded turn (`GET /api/nodes/{id}/report`).
    fn explain(&self, place: &Place, node: &str) -> Cell<String> {
        let url = format!("{}/api/nodes/{node}/report", place.server.base());
        let report: Value = place.runtime.block_on(async {
            let response = client().get(&url).send().await.unwrap();
            assert_eq!(response.status().as_u16(), 200, "GET {url}");
            response.json().await.unwrap()
        });
        Cell::Ran(report["turn"]["conversation"].as_str().unwrap().to_string())
    }

    fn edit_first(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        turn(place, &setup.prompt, "edit", json!({ "text": text }))
    }

    /// The page asks a turn again by regenerating its reply: a branch at
    /// the message the reply answered, as a retry of that message is.
    fn retry_first(&self, place: &Place, setup: &Setup, _: &str) -> Cell {
        turn(place, &setup.first, "regenerate", json!({}))
    }

    fn go_on_with_schema(&self, _: &Place, _: &Setup, _: &str, _: &str) -> Cell {
        Cell::Lacks("the page's turns take no output schema")
    }
}
