//! The recording proxy's columns: one per API (chat completions,
//! Responses, Messages), streamed and not. A client sends the whole
//! history every time, so each turn is a request holding the thread up to
//! where it starts and the new user message; a new conversation's name is
//! the `x-skein-conversation-name` header, and a fork is a request named
//! so at the node it starts from. Its verdicts are HTTP statuses: 200
//! (landed), 502 (the model failed), 400 (refused).

use super::{Cell, Place, Setup, Surface, Verdict, slow};
use serde_json::{Value, json};
use skein::{NodeId, Role};

#[derive(Clone, Copy, Debug)]
pub(crate) enum Api {
    ChatCompletions,
    Responses,
    Messages,
}

impl Api {
    pub(crate) const ALL: [Api; 3] = [Api::ChatCompletions, Api::Responses, Api::Messages];

    fn path(self) -> &'static str {
        match self {
            Api::ChatCompletions => "/v1/chat/completions",
            Api::Responses => "/v1/responses",
            Api::Messages => "/v1/messages",
        }
    }

    /// A request for `model` with `history` (role, text), the new user
    /// message last.
    fn body(self, model: &str, history: &[(&'static str, String)], stream: bool) -> Value {
        let messages: Vec<Value> = history
            .iter()
            .map(|(role, text)| json!({ "role": role, "content": text }))
            .collect();
        match self {
            Api::ChatCompletions => {
                json!({ "model": model, "messages": messages, "stream": stream })
            }
            Api::Responses => json!({ "model": model, "input": messages, "stream": stream }),
            Api::Messages => json!({
                "model": model, "max_tokens": 200, "messages": messages, "stream": stream
            }),
        }
    }
}

pub(crate) struct Proxy {
    pub api: Api,
    pub streamed: bool,
}

/// The model name the proxy's clients use for the scripted model (the
/// proxy's `[proxy.models]` maps it).
pub(crate) const MODEL: &str = "conform";

/// POST one request: the verdict its status says.
async fn post(base: String, path: &'static str, body: Value, name: Option<String>) -> Verdict {
    let mut request = super::web::client()
        .post(format!("{base}{path}"))
        .json(&body);
    if let Some(name) = name {
        request = request.header("x-skein-conversation-name", name);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    match status {
        200 => Verdict::Landed,
        502 => Verdict::ModelFailed,
        400 => Verdict::Refused,
        status => panic!("POST {path} answered {status}: {text}"),
    }
}

/// The thread ending at `node`, as a client would send it back.
fn history(place: &Place, node: &str) -> Vec<(&'static str, String)> {
    let thread = place
        .store
        .load_thread(node.parse::<NodeId>().unwrap())
        .unwrap();
    thread
        .messages()
        .into_iter()
        .map(|message| {
            let role = match message.role {
                Role::User => "user",
                Role::Assistant => "assistant",
                other => panic!("a {other:?} message in a proxy client's history"),
            };
            (role, message.joined_text())
        })
        .collect()
}

impl Proxy {
    /// The request of a turn going on from `node` (from nothing when
    /// `None`) with `text`, on `model`.
    fn request(&self, place: &Place, node: Option<&str>, text: &str, model: &str) -> Value {
        let mut messages = node.map_or_else(Vec::new, |node| history(place, node));
        messages.push(("user", text.to_string()));
        self.api.body(model, &messages, self.streamed)
    }

    fn send(&self, place: &Place, node: Option<&str>, text: &str, name: Option<&str>) -> Cell {
        let body = self.request(place, node, text, MODEL);
        let work = post(
            place.server.base(),
            self.api.path(),
            body,
            name.map(str::to_string),
        );
        Cell::Ran(place.runtime.block_on(work))
    }
}

impl Surface for Proxy {
    fn name(&self) -> String {
        let mode = if self.streamed { "streamed" } else { "whole" };
        format!("the proxy's {:?} ({mode})", self.api)
    }

    fn start(&self, place: &Place, text: &str, name: Option<&str>) -> Cell {
        self.send(place, None, text, name)
    }

    fn go_on(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        self.send(place, Some(&setup.head), text, None)
    }

    fn reply_at(&self, place: &Place, _: &Setup, node: &str, text: &str) -> Cell {
        self.send(place, Some(node), text, None)
    }

    fn again_at(&self, _: &Place, _: &Setup, _: &str, _: &str) -> Cell {
        Cell::Lacks(
            "a client re-sending a conversation's own history and getting the reply it ends with \
             is that conversation: the proxy cannot tell a retry from a re-send",
        )
    }

    fn fork_at_another_models_reply(&self, _: &Place, _: &Setup, _: &str) -> Cell {
        Cell::Lacks(
            "a request names its model: a client forking a history sends it to the model it \
             chooses, never one the proxy infers",
        )
    }

    /// A request at the head under a name of its own is a new conversation
    /// there. Names are unique, so an unnamed fork is named after its
    /// (tagged) text.
    fn fork(&self, place: &Place, setup: &Setup, text: &str, name: Option<&str>) -> Cell {
        let name = name.map_or_else(|| format!("a fork: {text}"), str::to_string);
        self.send(place, Some(&setup.head), text, Some(&name))
    }

    fn race(&self, place: &Place, setup: &Setup, slow: &str, fast: &str) -> Cell<[Verdict; 2]> {
        let base = place.server.base();
        let body = self.request(place, Some(&setup.head), slow, slow::PROXY_NAME);
        let slow_turn = place
            .runtime
            .spawn(post(base.clone(), self.api.path(), body, None));
        place.slow.wait_for(slow);
        let fast = self.send(place, Some(&setup.head), fast, None);
        place.slow.release(slow);
        let slow = place.runtime.block_on(slow_turn).unwrap();
        match fast {
            Cell::Ran(fast) => Cell::Ran([slow, fast]),
            Cell::Lacks(reason) => Cell::Lacks(reason),
        }
    }

    fn edit_first(&self, _: &Place, _: &Setup, _: &str) -> Cell {
        Cell::Lacks(
            "a client that changes its first message sends a history of its own: a new \
             conversation sharing nothing, which the first turn row covers",
        )
    }

    fn retry_first(&self, _: &Place, _: &Setup, _: &str) -> Cell {
        Cell::Lacks(
            "a client that asks its first message again re-sends it: the proxy cannot tell a \
             retry from a re-send (the re-send is that conversation)",
        )
    }

    fn go_on_with_schema(&self, _: &Place, _: &Setup, _: &str, _: &str) -> Cell {
        Cell::Lacks("the proxy takes no output schema: its clients check their own replies")
    }

    fn tool_loop(&self, _: &Place, _: &Setup, _: &str) -> Cell {
        Cell::Lacks(
            "the proxy runs no tools: its client does, and sends each call of its loop as a \
             request of its own (the failed call row)",
        )
    }
}
