/*!
An OpenAI-compatible embeddings endpoint (`POST {base_url}/embeddings`),
configured with skein-providers' [`HttpConfig`]: base URL, credential
(resolved on every call, never stored or printed) and timeouts. Vectors are
returned in input order (the response's `index` decides, not its order).
*/

use super::{EmbedError, Embedder};
use serde::Deserialize;
use skein_core::BoxFuture;
use skein_providers::http::{HttpConfig, install_crypto_provider};

/// Embeddings from an OpenAI-compatible server.
pub struct OpenAiEmbedder {
    config: HttpConfig,
    model: String,
    id: String,
    client: reqwest::Client,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("base_url", &self.config.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
    index: usize,
}

impl OpenAiEmbedder {
    /// An embedder for `model` at the configured endpoint.
    pub fn new(config: HttpConfig, model: impl Into<String>) -> Result<OpenAiEmbedder, EmbedError> {
        let url = reqwest::Url::parse(&config.base_url).map_err(|e| {
            EmbedError::Setup(format!("invalid base URL `{}`: {e}", config.base_url))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(EmbedError::Setup(format!(
                "the base URL `{}` must use http or https",
                config.base_url
            )));
        }
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(config.timeouts.connect)
            .timeout(config.timeouts.first_byte)
            .build()
            .map_err(|e| EmbedError::Setup(format!("could not build the HTTP client: {e}")))?;
        let model = model.into();
        Ok(OpenAiEmbedder {
            id: format!("openai:{model}@{}", config.base_url.trim_end_matches('/')),
            config,
            model,
            client,
        })
    }

    async fn call(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let secret = self
            .config
            .credential
            .resolve()
            .map_err(|e| EmbedError::Setup(e.to_string()))?;
        let body = serde_json::json!({ "model": self.model, "input": texts });
        let mut request = self
            .client
            .post(format!(
                "{}/embeddings",
                self.config.base_url.trim_end_matches('/')
            ))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(secret) = &secret {
            request = request.bearer_auth(secret.expose());
        }
        let redact = |text: String| match &secret {
            Some(secret) => secret.redact(&text),
            None => text,
        };
        let response = request
            .send()
            .await
            .map_err(|e| EmbedError::Endpoint(redact(format!("could not reach it: {e}"))))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| EmbedError::Endpoint(redact(format!("reading the reply failed: {e}"))))?;
        if !status.is_success() {
            return Err(EmbedError::Endpoint(redact(format!(
                "status {}: {}",
                status.as_u16(),
                text.chars().take(300).collect::<String>()
            ))));
        }
        let parsed: Response = serde_json::from_str(&text)
            .map_err(|e| EmbedError::Endpoint(format!("malformed reply: {e}")))?;
        if parsed.data.len() != texts.len() {
            return Err(EmbedError::Count {
                expected: texts.len(),
                got: parsed.data.len(),
            });
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for item in parsed.data {
            match out.get_mut(item.index) {
                Some(slot @ None) => *slot = Some(item.embedding),
                _ => {
                    return Err(EmbedError::Endpoint(format!(
                        "the reply has a duplicate or out-of-range index {}",
                        item.index
                    )));
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|v| v.expect("every index seen"))
            .collect())
    }
}

impl Embedder for OpenAiEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(self.call(texts))
    }
}
