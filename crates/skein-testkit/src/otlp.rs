/*!
An in-process OTLP receiver (the `otlp` feature): a server on a free
loopback port that takes `POST /v1/traces` in OTLP/protobuf
([`OtlpReceiver::start`]), or the OTLP gRPC `TraceService/Export` call
([`OtlpReceiver::start_grpc`], on tonic), as a collector does, and keeps
every span it was sent, so tests can check the spans skein exports
(parents, links, attributes) without a collector. It can also refuse every
export ([`OtlpReceiver::failing`]), as a collector that is down or
overloaded does.
*/

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
pub use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
pub use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
pub use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    requests: Mutex<usize>,
    failing: bool,
}

/// A running receiver; it stops when dropped.
pub struct OtlpReceiver {
    /// Its base URL (`http://127.0.0.1:PORT`): what `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// or `--otlp` take.
    pub url: String,
    received: Arc<Received>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl OtlpReceiver {
    /// Start a receiver that accepts every export.
    pub async fn start() -> OtlpReceiver {
        OtlpReceiver::serve(false).await
    }

    /// Start a receiver that answers every export with 503.
    pub async fn failing() -> OtlpReceiver {
        OtlpReceiver::serve(true).await
    }

    async fn serve(failing: bool) -> OtlpReceiver {
        let received = Arc::new(Received {
            failing,
            ..Received::default()
        });
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        OtlpReceiver {
            url,
            received,
            _stop: stop,
        }
    }

    /// Start a receiver that takes OTLP over gRPC; its `url` is what the
    /// exporter's `grpc` protocol takes.
    pub async fn start_grpc() -> OtlpReceiver {
        let received = Arc::new(Received::default());
        let incoming = tonic::transport::server::TcpIncoming::bind(([127, 0, 0, 1], 0).into())
            .expect("a loopback port");
        let url = format!("http://{}", incoming.local_addr().expect("bound"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = TraceServiceServer::new(Grpc(received.clone()));
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        OtlpReceiver {
            url,
            received,
            _stop: stop,
        }
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<Span> {
        self.received.spans.lock().expect("not poisoned").clone()
    }

    /// How many export requests arrived (refused ones included).
    pub fn requests(&self) -> usize {
        *self.received.requests.lock().expect("not poisoned")
    }

    /// Wait (up to `limit`) until at least `count` spans arrived, and return
    /// them all.
    pub async fn wait_for(&self, count: usize, limit: Duration) -> Vec<Span> {
        let deadline = Instant::now() + limit;
        loop {
            let spans = self.spans();
            if spans.len() >= count || Instant::now() > deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn traces(State(received): State<Arc<Received>>, body: Bytes) -> (StatusCode, Vec<u8>) {
    *received.requests.lock().expect("not poisoned") += 1;
    if received.failing {
        return (StatusCode::SERVICE_UNAVAILABLE, Vec::new());
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    received.keep(request);
    (
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

impl Received {
    fn keep(&self, request: ExportTraceServiceRequest) {
        let spans = request
            .resource_spans
            .into_iter()
            .flat_map(|resource| resource.scope_spans)
            .flat_map(|scope| scope.spans);
        self.spans.lock().expect("not poisoned").extend(spans);
    }
}

/// The gRPC trace service, keeping what it is sent.
struct Grpc(Arc<Received>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        *self.0.requests.lock().expect("not poisoned") += 1;
        self.0.keep(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The value of attribute `key` of `span`, if it has one.
pub fn attribute<'s>(span: &'s Span, key: &str) -> Option<&'s any_value::Value> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| attribute.value.as_ref())
        .and_then(|value| value.value.as_ref())
}

/// Attribute `key` of `span` as a string (`None`: absent or not a string).
pub fn string(span: &Span, key: &str) -> Option<String> {
    match attribute(span, key)? {
        any_value::Value::StringValue(text) => Some(text.clone()),
        _ => None,
    }
}

/// Attribute `key` of `span` as an integer (`None`: absent or not one).
pub fn int(span: &Span, key: &str) -> Option<i64> {
    match attribute(span, key)? {
        any_value::Value::IntValue(n) => Some(*n),
        _ => None,
    }
}
