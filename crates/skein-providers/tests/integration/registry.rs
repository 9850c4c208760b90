/*!
Resolving model names: `echo`, `scripted:PATH`, and the errors for
everything else.
*/

use crate::common::{data, reply, request};
use skein_core::Message;
use skein_providers::{ResolveError, ScriptError, available, resolve};

#[tokio::test]
async fn echo_resolves_to_the_echo_model() {
    let provider = resolve("echo").unwrap();
    assert_eq!(provider.name(), "echo");
    let text = reply(provider.as_ref(), request([Message::user("hi")])).await;
    assert!(text.starts_with("echo: \"hi\""), "{text}");
}

#[tokio::test]
async fn scripted_path_loads_the_rule_file() {
    let model = format!("scripted:{}", data("advisor.toml").display());
    let provider = resolve(&model).unwrap();
    assert_eq!(provider.name(), "scripted");
    let text = reply(provider.as_ref(), request([Message::user("buy?")])).await;
    assert!(text.starts_with("HOLD"), "{text}");
}

#[test]
fn unknown_models_list_what_is_available() {
    for model in ["gpt-4o", "echo:extra", "llama:x"] {
        let error = resolve(model).err().expect("must not resolve");
        let ResolveError::UnknownModel {
            model: got,
            available,
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(got, model);
        assert_eq!(available, &["echo", "scripted:PATH"]);
        let message = error.to_string();
        assert!(
            message.contains(model) && message.contains("scripted:PATH"),
            "{message}"
        );
    }
    assert_eq!(available(), ["echo", "scripted:PATH"]);
}

#[test]
fn scripted_needs_a_path() {
    for model in ["scripted", "scripted:"] {
        let error = resolve(model).err().expect("must not resolve");
        assert!(
            matches!(
                error,
                ResolveError::MissingArgument {
                    syntax: "scripted:PATH",
                    ..
                }
            ),
            "{error:?}"
        );
    }
}

#[test]
fn a_bad_script_path_reports_the_script_error() {
    let error = resolve("scripted:/definitely/not/here.toml").err().unwrap();
    let ResolveError::Script(script_error) = &error else {
        panic!("{error:?}");
    };
    assert!(
        matches!(**script_error, ScriptError::Read { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("/definitely/not/here.toml"));
}
