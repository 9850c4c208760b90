/*!
[`OpenAiCompatible`]: the OpenAI chat-completions API and the servers that
speak it (vLLM, the llama.cpp server, Ollama, ...), selected by
`base_url` (default `https://api.openai.com/v1`).

Each call is `POST {base_url}/chat/completions` with `stream: true` and
`stream_options.include_usage`, the key (when there is one) as
`Authorization: Bearer`. `request` maps the request onto the wire,
`decode` maps the reply (a stream or, from servers that answer
`application/json`, one body) back; the transport
([`super::transport`]) does timeouts, retries and cancellation.
*/

mod decode;
mod request;

use super::config::{HttpConfig, SetupError};
use super::transport::{HttpRequest, KeyHeader, Transport};
use skein_core::{BoxStream, ModelRequest, Provider, ProviderError, StreamEvent};
use std::sync::Arc;

/// An OpenAI-compatible chat-completions backend.
#[derive(Debug, Clone)]
pub struct OpenAiCompatible {
    transport: Arc<Transport>,
}

impl OpenAiCompatible {
    /// A provider for the server at `config.base_url`.
    pub fn new(config: HttpConfig) -> Result<OpenAiCompatible, SetupError> {
        Ok(OpenAiCompatible {
            transport: Arc::new(Transport::new(config)?),
        })
    }

    /// OpenAI itself, with the key from `OPENAI_API_KEY`.
    pub fn from_env() -> Result<OpenAiCompatible, SetupError> {
        OpenAiCompatible::new(HttpConfig::openai_from_env()?)
    }

    pub fn config(&self) -> &HttpConfig {
        self.transport.config()
    }

    fn prepare(&self, request: &ModelRequest) -> Result<HttpRequest, ProviderError> {
        self.transport.post_json(
            "/chat/completions",
            KeyHeader::Bearer,
            request::body(request),
        )
    }
}

impl Provider for OpenAiCompatible {
    fn name(&self) -> &str {
        "openai"
    }

    fn attachments(&self) -> skein_core::AttachmentSupport {
        request::ATTACHMENTS
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        self.transport
            .stream(self.prepare(&request), decode::OpenAiDecoder::new)
    }
}
