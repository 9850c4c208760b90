/*!
Tests of the HTTP providers and the embeddings client, in one binary, against local mock servers
(wiremock, plus a raw TCP server for stalled and cut bodies) speaking the
real OpenAI and Anthropic wire formats. Fixtures live in
`tests/data/openai/` and `tests/data/anthropic/`, modelled on the
providers' documented examples. No test reaches the internet; timeouts and
retry delays are configured small (`common::config`).
*/

mod anthropic;
mod common;
mod embed;
mod mapping;
mod openai;
mod secrets;
mod switching;
mod transport;
