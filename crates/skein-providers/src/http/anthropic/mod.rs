/*!
[`Anthropic`]: the Anthropic Messages API (default base
`https://api.anthropic.com`).

Each call is `POST {base_url}/v1/messages` with `stream: true`, the key as
`x-api-key` and `anthropic-version: 2023-06-01`. `request` maps the request
onto the wire (system prompt, role merging, tool use, cache control: its
module documents every choice), `decode` maps the reply back; the
transport ([`super::transport`]) does timeouts, retries and cancellation.
*/

mod decode;
mod request;

pub use request::{arguments_value, tool_use_input};

use super::config::{HttpConfig, SetupError};
use super::transport::{HttpRequest, KeyHeader, Transport};
use reqwest::header::{HeaderName, HeaderValue};
use skein_core::{BoxStream, ModelRequest, Provider, ProviderError, StreamEvent};
use std::sync::Arc;

/// The API version every request names.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The `max_tokens` sent when a request sets none (Anthropic requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// An Anthropic Messages backend.
#[derive(Debug, Clone)]
pub struct Anthropic {
    transport: Arc<Transport>,
    default_max_tokens: u32,
}

impl Anthropic {
    /// A provider for the API at `config.base_url`.
    pub fn new(config: HttpConfig) -> Result<Anthropic, SetupError> {
        Ok(Anthropic {
            transport: Arc::new(Transport::new(config)?),
            default_max_tokens: DEFAULT_MAX_TOKENS,
        })
    }

    /// Anthropic's API, with the key from `ANTHROPIC_API_KEY`.
    pub fn from_env() -> Result<Anthropic, SetupError> {
        Anthropic::new(HttpConfig::anthropic_from_env()?)
    }

    /// The `max_tokens` sent when a request sets none.
    pub fn with_default_max_tokens(mut self, max_tokens: u32) -> Anthropic {
        self.default_max_tokens = max_tokens;
        self
    }

    pub fn config(&self) -> &HttpConfig {
        self.transport.config()
    }

    fn prepare(&self, request: &ModelRequest) -> Result<HttpRequest, ProviderError> {
        let body = request::body(request, self.default_max_tokens);
        let mut prepared =
            self.transport
                .post_json("/v1/messages", KeyHeader::Named("x-api-key"), body)?;
        prepared.headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        Ok(prepared)
    }
}

impl Provider for Anthropic {
    fn name(&self) -> &str {
        "anthropic"
    }

    fn attachments(&self) -> skein_core::AttachmentSupport {
        request::ATTACHMENTS
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        self.transport
            .stream(self.prepare(&request), decode::AnthropicDecoder::new)
    }
}
