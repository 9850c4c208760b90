//! The providers' integration tests, one binary: the HTTP providers and the
//! embeddings client against local mock servers (`http`), the deterministic
//! providers, the model-name registry and loading (`integration`), and
//! properties of the SSE parser (`sse_properties`).

mod http;
mod integration;
mod sse_properties;
