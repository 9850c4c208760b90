/*!
The key `sk-test-SECRET-123` is sent to the server and appears nowhere
else: not in the Debug output of providers, configurations or errors, not
in any error message or retry reason from a 401 (even one that echoes the
key), from an error event, or from a failing connection.
*/

use super::common::*;
use skein_core::{Provider, ProviderError, StreamEvent};
use skein_providers::http::{Anthropic, Credential, HttpConfig, OpenAiCompatible, Secret};
use wiremock::matchers::{header, method};
use wiremock::{Mock, MockServer};

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(KEY), "{what} shows the key: {text}");
}

fn assert_clean_outcome(events: &[StreamEvent], error: &Option<ProviderError>) {
    for event in events {
        assert_clean("an event", &format!("{event:?}"));
    }
    let error = error.as_ref().expect("the call failed");
    assert_clean("the error (Display)", &error.to_string());
    assert_clean("the error (Debug)", &format!("{error:?}"));
}

#[test]
fn debug_output_of_keys_configurations_and_providers_is_clean() {
    let secret = Secret::new(KEY);
    assert_clean("Secret", &format!("{secret:?} {secret}"));
    let config = config("https://api.openai.com/v1");
    assert_clean("HttpConfig", &format!("{config:?} {:?}", config.credential));
    let openai = OpenAiCompatible::new(config.clone()).unwrap();
    assert_clean("OpenAiCompatible", &format!("{openai:?}"));
    assert_clean(
        "Anthropic",
        &format!("{:?}", Anthropic::new(config).unwrap()),
    );
    // The value is still there for the transport.
    assert!(format!("{:?}", Credential::value(KEY)).contains("Secret(****)"));
}

#[tokio::test]
async fn a_401_echoing_the_key_yields_errors_without_it() {
    let echo = format!(
        r#"{{"error": {{"message": "Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account/api-keys.", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}}}"#
    );
    let server = MockServer::start().await;
    // Only a request carrying the key gets the 401: the key was sent.
    Mock::given(method("POST"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(json(401, echo))
        .expect(1)
        .mount(&server)
        .await;
    let (events, error) = collect(openai(&server.uri()).stream(ask("Hi"))).await;
    assert_clean_outcome(&events, &error);
    assert!(
        matches!(
            &error,
            Some(ProviderError::Authentication { message }) if message.contains("Incorrect API key provided: ****")
        ),
        "{error:?}"
    );

    let echo = format!(
        r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {KEY}"}}}}"#
    );
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(header("x-api-key", KEY))
        .respond_with(json(401, echo))
        .expect(1)
        .mount(&server)
        .await;
    let (events, error) = collect(anthropic(&server.uri()).stream(ask("Hi"))).await;
    assert_clean_outcome(&events, &error);
    assert!(matches!(error, Some(ProviderError::Authentication { .. })));
}

#[tokio::test]
async fn retries_and_errors_of_an_echoing_server_error_are_clean() {
    let echo = format!(
        r#"{{"error": {{"message": "upstream rejected key {KEY}", "type": "server_error"}}}}"#
    );
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(json(503, echo.clone()))
        .mount(&server)
        .await;
    let (events, error) = collect(openai(&server.uri()).stream(ask("Hi"))).await;
    assert_eq!(retries(&events).len(), 2);
    assert_clean_outcome(&events, &error);

    let stream = format!(
        "event: error\ndata: {{\"type\": \"error\", \"error\": {{\"type\": \"api_error\", \"message\": \"bad key {KEY}\"}}}}\n\n"
    );
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(sse(stream))
        .mount(&server)
        .await;
    let (events, error) = collect(anthropic(&server.uri()).stream(ask("Hi"))).await;
    assert_clean_outcome(&events, &error);
    assert!(matches!(error, Some(ProviderError::Server { .. })));
}

#[tokio::test]
async fn a_failing_connection_yields_errors_without_the_key() {
    let address = refused();
    for provider in [
        Box::new(openai(&format!("http://{address}"))) as Box<dyn Provider>,
        Box::new(anthropic(&format!("http://{address}"))),
    ] {
        let (events, error) = collect(provider.stream(ask("Hi"))).await;
        assert_eq!(retries(&events).len(), 2);
        assert!(
            matches!(error, Some(ProviderError::Connection { .. })),
            "{error:?}"
        );
        assert_clean_outcome(&events, &error);
    }
}

#[test]
fn credential_errors_name_the_variable_not_a_value() {
    let variable = "SKEIN_HTTP_SECRET_TEST_UNSET";
    let error = HttpConfig::from_env("https://api.openai.com/v1", variable).unwrap_err();
    let message = error.to_string();
    assert!(message.contains(variable));
    assert!(message.contains("export"));
}
