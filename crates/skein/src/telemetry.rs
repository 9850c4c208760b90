/*!
OpenTelemetry export: the spans of every turn (what they hold is
`skein_conversation::telemetry`'s) sent to an OTLP collector over
HTTP/protobuf or gRPC, as a surface that opens skein for a user installs
it ([`install`]): the command line (`--otlp URL`), the web view it serves,
the Python package.

Where to send comes from, in order: the surface's own setting (`--otlp`),
the `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`
environment variables every OTel SDK reads, the configuration file's
`[otel]` section. The protocol likewise (`OTEL_EXPORTER_OTLP_PROTOCOL`:
`http/protobuf`, the default, or `grpc`); headers from
`OTEL_EXPORTER_OTLP_HEADERS` and `[otel] headers`; message content only
when `[otel] content = true` or
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`. With none of
them, nothing is installed and spans cost nothing.

Export never slows or fails a turn: spans are made after the turn, queued
in a bounded batch queue (spans beyond it are dropped) and sent by a
background worker; a collector that cannot be reached is logged once
(and once more when it is back), not per batch.
*/

use crate::config::{OtelConfig, OtelProtocol};
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, SdkTracerProvider,
    SpanData, SpanExporter,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Spans waiting to be sent beyond this are dropped, not waited for.
pub const QUEUE: usize = 4096;

/// Why export could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    #[error(
        "cannot export to {endpoint}: {message}: check the OTLP endpoint (--otlp, OTEL_EXPORTER_OTLP_ENDPOINT or [otel] endpoint)"
    )]
    Exporter { endpoint: String, message: String },
    #[error(
        "unknown OTLP protocol `{0}`: use `http/protobuf` or `grpc` (OTEL_EXPORTER_OTLP_PROTOCOL or [otel] protocol)"
    )]
    Protocol(String),
    #[error("OTLP export over gRPC needs a Tokio runtime: install it from inside one")]
    NoRuntime,
}

/// Where and how spans are sent, resolved from a surface's setting, the
/// environment and the configuration file ([`Settings::resolve`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The collector's URL as given (a base URL for HTTP, where
    /// `/v1/traces` is added unless it ends so already); `None` when the
    /// environment names it (the exporter reads it there).
    pub endpoint: Option<String>,
    pub protocol: OtelProtocol,
    pub headers: HashMap<String, String>,
    /// Send message content (prompts, replies, tool arguments and results).
    pub content: bool,
    pub service_name: String,
}

impl Settings {
    /// The settings in force, or `None` when nothing asks for export.
    /// `flag` is the surface's own endpoint (`--otlp URL`).
    pub fn resolve(
        flag: Option<&str>,
        config: &OtelConfig,
    ) -> Result<Option<Settings>, TelemetryError> {
        let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let from_env = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .is_some();
        let endpoint = match flag {
            Some(url) => Some(url.to_string()),
            None if from_env => None,
            None => match &config.endpoint {
                Some(url) => Some(url.clone()),
                None => return Ok(None),
            },
        };
        let protocol = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            Some(name) => OtelProtocol::parse(&name).ok_or(TelemetryError::Protocol(name))?,
            None => config.protocol.unwrap_or_default(),
        };
        let content = config.content
            || env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
                .is_some_and(|value| value.eq_ignore_ascii_case("true"));
        Ok(Some(Settings {
            endpoint,
            protocol,
            headers: config.headers.clone().into_iter().collect(),
            content,
            service_name: env("OTEL_SERVICE_NAME").unwrap_or_else(|| "skein".to_string()),
        }))
    }
}

/// Installed export: dropping it flushes what is queued (briefly) and
/// stops emitting.
#[must_use = "export stops when this is dropped"]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        skein_conversation::telemetry::disable();
        if let Err(error) = self.provider.shutdown_with_timeout(Duration::from_secs(2)) {
            tracing::debug!("OTLP export did not shut down cleanly: {error}");
        }
    }
}

/// Install export as `settings` say: the global tracer provider, with
/// skein's span ids and a bounded batch queue. Call it inside a Tokio
/// runtime that outlives the returned handle (the exporter's connections
/// live on it).
pub fn install(settings: &Settings) -> Result<Telemetry, TelemetryError> {
    let handle = tokio::runtime::Handle::try_current().map_err(|_| TelemetryError::NoRuntime)?;
    let shown = settings
        .endpoint
        .clone()
        .unwrap_or_else(|| "the OTEL_EXPORTER_OTLP_* endpoint".to_string());
    let failed = |error: opentelemetry_otlp::ExporterBuildError| TelemetryError::Exporter {
        endpoint: shown.clone(),
        message: error.to_string(),
    };
    let exporter = match settings.protocol {
        OtelProtocol::HttpProtobuf => {
            skein_providers::http::install_crypto_provider();
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_http_client(Client {
                    client: reqwest::Client::new(),
                    runtime: handle.clone(),
                })
                .with_headers(settings.headers.clone());
            if let Some(url) = &settings.endpoint {
                builder = builder.with_endpoint(traces_url(url));
            }
            builder.build().map_err(failed)?
        }
        OtelProtocol::Grpc => {
            let _entered = handle.enter();
            let mut metadata = tonic::metadata::MetadataMap::new();
            for (name, value) in &settings.headers {
                if let (Ok(name), Ok(value)) = (
                    tonic::metadata::MetadataKey::from_bytes(name.as_bytes()),
                    value.parse(),
                ) {
                    metadata.insert(name, value);
                }
            }
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_metadata(metadata);
            if let Some(url) = &settings.endpoint {
                builder = builder.with_endpoint(url.clone());
            }
            builder.build().map_err(failed)?
        }
    };
    let exporter = Quiet {
        inner: exporter,
        endpoint: shown.clone(),
        down: Arc::new(AtomicBool::new(false)),
    };
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(QUEUE)
        .with_scheduled_delay(Duration::from_millis(500))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(
            BatchSpanProcessor::builder(exporter)
                .with_batch_config(batch)
                .build(),
        )
        .with_id_generator(SkeinIds::default())
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(settings.service_name.clone())
                .build(),
        )
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    skein_conversation::telemetry::enable(settings.content);
    Ok(Telemetry { provider })
}

/// Send any spans still queued (a short-lived process before it exits).
pub fn flush(telemetry: &Telemetry) {
    if let Err(error) = telemetry.provider.force_flush() {
        tracing::debug!("OTLP export could not flush: {error}");
    }
}

/// A base URL's traces endpoint (`/v1/traces` added once).
fn traces_url(url: &str) -> String {
    let url = url.trim_end_matches('/');
    if url.ends_with("/v1/traces") {
        url.to_string()
    } else {
        format!("{url}/v1/traces")
    }
}

/// Span ids derived from skein's ids where the turn layer chose them (so
/// a fork's span can link to its origin's), random otherwise.
#[derive(Debug, Default)]
struct SkeinIds {
    random: RandomIdGenerator,
}

impl IdGenerator for SkeinIds {
    fn new_trace_id(&self) -> TraceId {
        skein_conversation::telemetry::take_trace_id().unwrap_or_else(|| self.random.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        skein_conversation::telemetry::take_span_id().unwrap_or_else(|| self.random.new_span_id())
    }
}

/// The exporter, logging a dead collector once (and once more when it
/// answers again) instead of at every batch.
#[derive(Debug)]
struct Quiet<E> {
    inner: E,
    endpoint: String,
    down: Arc<AtomicBool>,
}

impl<E: SpanExporter> SpanExporter for Quiet<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        match &result {
            Err(error) if !self.down.swap(true, Ordering::Relaxed) => {
                tracing::warn!(
                    "cannot send traces to {}: {error} (spans are dropped until it answers; turns go on)",
                    self.endpoint
                );
            }
            Ok(()) if self.down.swap(false, Ordering::Relaxed) => {
                tracing::warn!("sending traces to {} again", self.endpoint);
            }
            _ => {}
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The HTTP exporter's client: skein's reqwest, its requests run on the
/// runtime export was installed from (the batch worker is a thread of its
/// own, with no reactor).
#[derive(Debug)]
struct Client {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Client {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let (parts, body) = request.into_parts();
        let sent = self.runtime.spawn(async move {
            let mut request = client
                .request(parts.method, parts.uri.to_string())
                .body(body)
                .timeout(Duration::from_secs(10));
            for (name, value) in &parts.headers {
                request = request.header(name, value);
            }
            let response = request.send().await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = sent.await??;
        let mut response = http::Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
