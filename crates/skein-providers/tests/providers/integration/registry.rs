/*!
Resolving model names: every backend's syntax, the model name each sends,
and the errors for everything else.
*/

use super::common::{data, reply, request};
use skein_core::Message;
use skein_providers::{ResolveError, ScriptError, available, resolve};

#[tokio::test]
async fn echo_resolves_to_the_echo_model() {
    let resolved = resolve("echo").unwrap();
    assert_eq!(resolved.model, "echo");
    let provider = resolved.provider;
    assert_eq!(provider.name(), "echo");
    let text = reply(provider.as_ref(), request([Message::user("hi")])).await;
    assert!(text.starts_with("echo: \"hi\""), "{text}");
}

#[tokio::test]
async fn scripted_path_loads_the_rule_file() {
    let model = format!("scripted:{}", data("advisor.toml").display());
    let provider = resolve(&model).unwrap().provider;
    assert_eq!(provider.name(), "scripted");
    let text = reply(provider.as_ref(), request([Message::user("buy?")])).await;
    assert!(text.starts_with("HOLD"), "{text}");
}

#[test]
fn unknown_models_list_what_is_available() {
    for model in ["gpt-4o", "echo:extra", "llama:x", "smollm2:big"] {
        let error = resolve(model).expect_err("must not resolve");
        let ResolveError::UnknownModel {
            model: got,
            available,
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(got, model);
        assert_eq!(available, &EVERY);
        let message = error.to_string();
        assert!(
            message.contains(model) && message.contains("scripted:PATH"),
            "{message}"
        );
    }
    assert_eq!(available(), EVERY);
}

const EVERY: [&str; 6] = [
    "smollm2",
    "local:PATH",
    "openai:MODEL",
    "anthropic:MODEL",
    "echo",
    "scripted:PATH",
];

#[test]
#[allow(
    unsafe_code,
    reason = "edition 2024 makes editing the environment unsafe"
)]
fn http_models_name_the_model_and_need_a_key_unless_the_url_is_custom() {
    // SAFETY: this test binary touches these variables in this test only.
    unsafe {
        std::env::remove_var("ANTHROPIC_API_KEY");
        std::env::remove_var("ANTHROPIC_BASE_URL");
    }
    let error = resolve("anthropic:claude-x").err().unwrap();
    assert!(error.to_string().contains("ANTHROPIC_API_KEY"), "{error}");
    // SAFETY: as above.
    unsafe { std::env::set_var("ANTHROPIC_BASE_URL", "http://127.0.0.1:9") };
    let resolved = resolve("anthropic:claude-x").unwrap();
    assert_eq!(resolved.model, "claude-x");
    assert_eq!(resolved.provider.name(), "anthropic");
    // SAFETY: as above.
    unsafe { std::env::remove_var("ANTHROPIC_BASE_URL") };
}

#[cfg(feature = "local")]
#[test]
fn a_missing_local_model_file_names_the_path_without_fetch_advice() {
    // `models pull` fetches the embedded model, not a file the user named.
    let error = resolve("local:/no/such/model.gguf")
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("/no/such/model.gguf"), "{error}");
    assert!(
        error.contains("`local:PATH` needs the path of a GGUF model file"),
        "{error}"
    );
    assert!(!error.contains("models pull"), "{error}");
}

/// A build without the embedded models (`--no-default-features`) keeps
/// their names, kinds and types, and every way in says how to get them.
#[cfg(not(feature = "local"))]
#[test]
fn without_the_local_feature_the_embedded_models_say_how_to_get_them() {
    use skein_providers::embed::{EmbedError, MiniLmEmbedder};
    use skein_providers::{BackendKind, Credential};
    for model in ["smollm2", "local:/some/model.gguf"] {
        let error = resolve(model).err().unwrap();
        assert!(
            matches!(&error, ResolveError::NoLocalModel { model: named } if named == model),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains("built without the embedded model")
                && message.contains(&format!("cannot run `{model}`"))
                && message.contains("`local` feature"),
            "{message}"
        );
    }
    let configured = BackendKind::Local { path: None }.provider(Credential::None);
    assert!(
        matches!(configured, Err(ResolveError::NoLocalModel { .. })),
        "a configured local backend"
    );
    let error = MiniLmEmbedder::load(1).unwrap_err();
    assert!(matches!(error, EmbedError::NoLocalModel), "{error:?}");
    assert!(error.to_string().contains("`local` feature"), "{error}");
    assert_eq!(available(), EVERY, "the names stay listed");
}

/// The table says which names open a file of the machine: a stored
/// conversation may not choose one (skein-conversation's settings).
#[test]
fn model_names_that_open_a_file_are_local_and_scripted_paths() {
    for name in [
        "local:/m.gguf",
        "scripted:rules.toml",
        "local:",
        "scripted:",
    ] {
        assert!(skein_providers::names_a_file(name), "{name}");
    }
    for name in [
        "smollm2",
        "echo",
        "openai:gpt-4o",
        "anthropic:claude-x",
        "local",
        "gguf:x",
    ] {
        assert!(!skein_providers::names_a_file(name), "{name}");
    }
}

/// A resolved name says which kind of backend it stands for: the same
/// table the engine builds configured backends from.
#[test]
fn a_resolved_name_carries_its_backend_kind() {
    use skein_providers::BackendKind;
    assert_eq!(resolve("echo").unwrap().kind, BackendKind::Echo);
    let script = data("advisor.toml");
    let resolved = resolve(&format!("scripted:{}", script.display())).unwrap();
    assert_eq!(resolved.kind, BackendKind::Scripted { script });
    assert_eq!(resolved.model, "scripted");
}

#[test]
fn a_bare_provider_model_name_suggests_its_backend() {
    for (name, meant) in [
        ("gpt-4o", "openai:gpt-4o"),
        ("o3-mini", "openai:o3-mini"),
        ("claude-3-5-sonnet", "anthropic:claude-3-5-sonnet"),
        ("model.gguf", "local:model.gguf"),
    ] {
        let error = resolve(name).err().unwrap().to_string();
        assert!(
            error.contains(&format!("did you mean `{meant}`?")),
            "{error}"
        );
    }
    let error = resolve("mistery").err().unwrap().to_string();
    assert!(!error.contains("did you mean"), "{error}");
}

#[test]
fn scripted_needs_a_path() {
    for model in ["scripted", "scripted:"] {
        let error = resolve(model).expect_err("must not resolve");
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
