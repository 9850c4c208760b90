//! The rows of the fault matrix: each failure, the server that produces
//! it, and what the turn must come to.

use super::servers::{self, Fault, fixture, json, sse};
use skein::core::ProviderError;
use std::time::Duration;
use wiremock::ResponseTemplate;

#[derive(Clone, Copy, Debug)]
pub enum Wire {
    OpenAi,
    Anthropic,
}

pub enum Server {
    /// wiremock answering in this order, repeating the last response.
    Mock(Vec<ResponseTemplate>),
    Raw(Fault),
    Refused,
}

#[derive(Clone, Copy)]
pub enum Turn {
    /// `conversation.prompt(..)`
    Prompt,
    /// `conversation.chain(..)` with the `get_weather` tool.
    Chain,
    /// An engine run with an output contract the replies never meet.
    Structured,
}

pub enum Outcome {
    Reply(&'static str),
    /// The chain succeeded; the model saw an error result containing this.
    ToolErrorResult(&'static str, &'static str),
    /// The turn failed with a provider error matching this.
    Fails(fn(&ProviderError) -> bool),
    /// The run never met its output contract after this many model calls.
    Invalid {
        attempts: u32,
    },
}

pub struct Case {
    pub name: &'static str,
    pub wire: Wire,
    pub server: Server,
    pub turn: Turn,
    pub retries: usize,
    /// Requests (or connections) that reached the server; `None` when
    /// nothing listens.
    pub requests: Option<usize>,
    /// The delay announced for the first retry, when it is the server's.
    pub first_delay: Option<Duration>,
    pub outcome: Outcome,
}

const CUT_CHUNK: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"},\"finish_reason\":null}]}\n\n";
const OPENAI_HELLO: &str = "Hello! How can I assist you today?";
const ANTHROPIC_HELLO: &str = "Hello! How can I help? été 😀";

pub fn cases() -> Vec<Case> {
    use Outcome::*;
    use Wire::*;
    let ok = || sse(fixture("openai/text_stream.sse"));
    let anthropic_ok = || sse(fixture("anthropic/text_stream.sse"));
    let rate_limit = || json(429, fixture("openai/error_rate_limit.json"));
    let server_error = |status| json(status, fixture("openai/error_server.json"));
    let case = |name, wire, server, turn, retries, requests, outcome| Case {
        name,
        wire,
        server,
        turn,
        retries,
        requests,
        first_delay: None,
        outcome,
    };
    vec![
        Case {
            first_delay: Some(Duration::from_millis(50)),
            ..case(
                "429 with Retry-After, then success",
                OpenAi,
                Server::Mock(vec![
                    rate_limit().insert_header("retry-after", "0.05"),
                    ok(),
                ]),
                Turn::Prompt,
                1,
                Some(2),
                Reply(OPENAI_HELLO),
            )
        },
        case(
            "429 without Retry-After, every time",
            OpenAi,
            Server::Mock(vec![rate_limit()]),
            Turn::Prompt,
            2,
            Some(3),
            Fails(|e| {
                matches!(
                    e,
                    ProviderError::RateLimited {
                        retry_after: None,
                        ..
                    }
                )
            }),
        ),
        case(
            "500, then success",
            OpenAi,
            Server::Mock(vec![server_error(500), ok()]),
            Turn::Prompt,
            1,
            Some(2),
            Reply(OPENAI_HELLO),
        ),
        case(
            "502, then success",
            OpenAi,
            Server::Mock(vec![server_error(502), ok()]),
            Turn::Prompt,
            1,
            Some(2),
            Reply(OPENAI_HELLO),
        ),
        case(
            "503 every time",
            OpenAi,
            Server::Mock(vec![server_error(503)]),
            Turn::Prompt,
            2,
            Some(3),
            Fails(|e| matches!(e, ProviderError::Server { status: 503, .. })),
        ),
        case(
            "529 overloaded (Anthropic), then success",
            Anthropic,
            Server::Mock(vec![
                json(529, fixture("anthropic/error_overloaded.json")),
                anthropic_ok(),
            ]),
            Turn::Prompt,
            1,
            Some(2),
            Reply(ANTHROPIC_HELLO),
        ),
        case(
            "529 overloaded (Anthropic) every time",
            Anthropic,
            Server::Mock(vec![json(529, fixture("anthropic/error_overloaded.json"))]),
            Turn::Prompt,
            2,
            Some(3),
            Fails(|e| matches!(e, ProviderError::Server { status: 529, .. })),
        ),
        case(
            "connection refused",
            OpenAi,
            Server::Refused,
            Turn::Prompt,
            2,
            None,
            Fails(|e| matches!(e, ProviderError::Connection { .. })),
        ),
        case(
            "connection reset mid-stream",
            OpenAi,
            Server::Raw(Fault::Cut(vec![CUT_CHUNK.into()])),
            Turn::Prompt,
            0,
            Some(1),
            Fails(|e| matches!(e, ProviderError::TruncatedStream)),
        ),
        case(
            "idle timeout mid-stream",
            OpenAi,
            Server::Raw(Fault::Stall(vec![CUT_CHUNK.into()])),
            Turn::Prompt,
            0,
            Some(1),
            Fails(|e| matches!(e, ProviderError::Timeout { phase } if phase == "idle")),
        ),
        case(
            "truncated SSE (OpenAI: no finish, no [DONE])",
            OpenAi,
            Server::Mock(vec![sse(fixture("openai/truncated_stream.sse"))]),
            Turn::Prompt,
            0,
            Some(1),
            Fails(|e| matches!(e, ProviderError::TruncatedStream)),
        ),
        case(
            "truncated SSE (Anthropic: no message_stop)",
            Anthropic,
            Server::Mock(vec![sse(fixture("anthropic/truncated_stream.sse"))]),
            Turn::Prompt,
            0,
            Some(1),
            Fails(|e| matches!(e, ProviderError::TruncatedStream)),
        ),
        case(
            "malformed JSON in the stream",
            OpenAi,
            Server::Mock(vec![sse(fixture("openai/malformed_stream.sse"))]),
            Turn::Prompt,
            0,
            Some(1),
            Fails(|e| matches!(e, ProviderError::MalformedResponse { .. })),
        ),
        // The error arrives before any reply content: still safe to retry.
        case(
            "an error event in the stream before any content",
            OpenAi,
            Server::Mock(vec![sse(fixture("openai/error_stream.sse"))]),
            Turn::Prompt,
            2,
            Some(3),
            Fails(|e| matches!(e, ProviderError::Server { .. })),
        ),
        case(
            "invalid tool-call arguments",
            OpenAi,
            Server::Mock(vec![
                sse(servers::openai_tool_call("get_weather", "{\"city\": ")),
                sse(servers::openai_text("It is sunny.")),
            ]),
            Turn::Chain,
            0,
            Some(2),
            ToolErrorResult("not valid JSON", "It is sunny."),
        ),
        case(
            "arguments that break the tool's schema",
            OpenAi,
            Server::Mock(vec![
                sse(servers::openai_tool_call("get_weather", "{\"town\": 3}")),
                sse(servers::openai_text("It is sunny.")),
            ]),
            Turn::Chain,
            0,
            Some(2),
            ToolErrorResult("do not match the tool's schema", "It is sunny."),
        ),
        case(
            "unknown tool name",
            OpenAi,
            Server::Mock(vec![
                sse(servers::openai_tool_call("launch_rockets", "{}")),
                sse(servers::openai_text("I cannot.")),
            ]),
            Turn::Chain,
            0,
            Some(2),
            ToolErrorResult("unknown tool `launch_rockets`", "I cannot."),
        ),
        case(
            "schema-invalid structured output",
            OpenAi,
            Server::Mock(vec![sse(servers::openai_text("not json"))]),
            Turn::Structured,
            0,
            Some(3),
            Invalid { attempts: 3 },
        ),
        case(
            "401 invalid key (OpenAI)",
            OpenAi,
            Server::Mock(vec![json(401, fixture("openai/error_invalid_key.json"))]),
            Turn::Prompt,
            0,
            Some(1),
            Fails(|e| matches!(e, ProviderError::Authentication { .. })),
        ),
        case(
            "401 invalid key (Anthropic)",
            Anthropic,
            Server::Mock(vec![json(
                401,
                fixture("anthropic/error_authentication.json"),
            )]),
            Turn::Prompt,
            0,
            Some(1),
            Fails(|e| matches!(e, ProviderError::Authentication { .. })),
        ),
        case(
            "400 context too long (OpenAI)",
            OpenAi,
            Server::Mock(vec![json(400, fixture("openai/error_context_length.json"))]),
            Turn::Prompt,
            0,
            Some(1),
            Fails(|e| {
                matches!(
                    e,
                    ProviderError::BadRequest {
                        context_too_long: true,
                        ..
                    }
                )
            }),
        ),
        case(
            "400 prompt too long (Anthropic)",
            Anthropic,
            Server::Mock(vec![json(
                400,
                fixture("anthropic/error_prompt_too_long.json"),
            )]),
            Turn::Prompt,
            0,
            Some(1),
            Fails(|e| {
                matches!(
                    e,
                    ProviderError::BadRequest {
                        context_too_long: true,
                        ..
                    }
                )
            }),
        ),
    ]
}
