//! Loading a catalog from a directory of TOML files (`skein_engine::load`).

use serde_json::json;
use skein_core::Role;
use skein_engine::load::load_dir;
use skein_engine::{BackendKind, CredentialSource, Engine, EngineError, Request};
use std::path::{Path, PathBuf};
use tempfile::TempDir;

fn data(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(relative)
}

fn good() -> PathBuf {
    data("config")
}

/// A directory holding `files` (path relative to the root, contents).
fn tree(files: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create dirs");
        std::fs::write(path, text).expect("write file");
    }
    dir
}

const ECHO_BACKEND: &str = "[[backend]]\nname = \"echo\"\nkind = \"echo\"\n";
const QUICK_PROFILE: &str = "[[profile]]\nname = \"quick\"\nbackend = \"echo\"\nmodel = \"echo\"\n";
const HELLO_MESSAGE: &str = "[[messages]]\nrole = \"user\"\ntemplate = \"hi\"\n";

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Kind {
    Prompt,
    Profile,
}

/// A load failure, taken apart.
#[derive(Debug)]
struct Failure {
    kind: Kind,
    file: PathBuf,
    key: Option<String>,
    problem: String,
    display: String,
}

impl Failure {
    fn file_name(&self) -> &str {
        self.file
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("")
    }

    fn key(&self) -> &str {
        self.key.as_deref().unwrap_or("")
    }
}

fn failure(dir: &Path) -> Failure {
    let error = match load_dir(dir) {
        Ok(catalog) => panic!("{} loaded: {catalog:?}", dir.display()),
        Err(error) => error,
    };
    let display = error.to_string();
    let (kind, file, key, problem) = match error {
        EngineError::PromptLoad { file, key, problem } => (Kind::Prompt, file, key, problem),
        EngineError::ProfileLoad { file, key, problem } => (Kind::Profile, file, key, problem),
        other => panic!("expected a load error, got {other:?}"),
    };
    let failure = Failure {
        kind,
        file: file.expect("a load error names its file"),
        key,
        problem,
        display,
    };
    assert!(
        failure
            .display
            .contains(&failure.file.display().to_string()),
        "the message names the file: {}",
        failure.display
    );
    if let Some(key) = &failure.key {
        assert!(
            failure.display.contains(key.as_str()),
            "the message names the key: {}",
            failure.display
        );
    }
    failure
}

// ---- the good directory ----

#[test]
fn good_directory_loads_and_builds_an_engine() {
    let catalog = load_dir(&good()).expect("the good directory loads");
    assert_eq!(
        catalog.prompt_ids().collect::<Vec<_>>(),
        ["classify", "greet"]
    );
    assert_eq!(
        catalog.profile_names().collect::<Vec<_>>(),
        ["quick", "remote", "scripted"]
    );
    assert_eq!(
        catalog.backend_names().collect::<Vec<_>>(),
        ["echo", "remote", "script"]
    );
    let engine = Engine::new(catalog).expect("the engine builds");
    assert_eq!(
        engine
            .inspect_backend("echo")
            .expect("echo")
            .available_permits,
        2
    );
}

#[test]
fn inspect_prompt_gives_the_newest_version_and_lists_versions() {
    let engine = Engine::new(load_dir(&good()).expect("loads")).expect("builds");
    let newest = engine.inspect_prompt("greet", None).expect("greet");
    assert_eq!(newest.prompt.version, 2);
    assert_eq!(newest.versions, [1, 2]);
    assert_eq!(
        newest.prompt.session_id.as_deref(),
        Some("greet-{{ name }}")
    );
    assert_eq!(newest.prompt.variables.len(), 2);
    assert!(!newest.prompt.variables[1].required);
    assert_eq!(newest.prompt.variables[1].default, Some(json!("skein")));
    assert_eq!(newest.prompt.messages[0].role, Role::System);

    let first = engine.inspect_prompt("greet", Some(1)).expect("greet v1");
    assert_eq!(first.prompt.version, 1, "version defaults to 1");
    assert_eq!(first.prompt.messages.len(), 1);
    assert_eq!(first.prompt.default_profile.as_deref(), Some("quick"));
}

#[test]
fn backends_and_profiles_load_with_their_settings() {
    let catalog = load_dir(&good()).expect("loads");
    let remote = catalog.find_backend("remote").expect("remote");
    assert_eq!(
        remote.kind,
        BackendKind::Openai {
            base_url: Some("http://127.0.0.1:9/v1".into())
        }
    );
    assert_eq!(remote.capacity, 4, "capacity defaults to 4");
    assert_eq!(catalog.find_backend("script").expect("script").capacity, 1);

    let quick = catalog.find_profile("quick").expect("quick");
    assert_eq!(quick.repair_attempts, 0);
    assert_eq!(quick.credential, CredentialSource::Default);
    let scripted = catalog.find_profile("scripted").expect("scripted");
    assert_eq!(scripted.options.temperature, Some(0.0));
    assert_eq!(scripted.options.seed, Some(7));
    assert_eq!(scripted.repair_attempts, 2, "repairs default to 2");
    let remote = catalog.find_profile("remote").expect("remote");
    assert_eq!(
        remote.credential,
        CredentialSource::Env("SKEIN_TEST_REMOTE_KEY".into())
    );
}

#[test]
fn script_paths_resolve_against_their_backend_file() {
    let catalog = load_dir(&good()).expect("loads");
    let BackendKind::Scripted { script } = &catalog.find_backend("script").expect("script").kind
    else {
        panic!("script is a scripted backend");
    };
    assert!(script.is_absolute(), "{}", script.display());
    assert!(
        script.ends_with("config/backends/scripts/replies.toml"),
        "{}",
        script.display()
    );
    assert!(script.is_file());
}

#[test]
fn artifact_paths_resolve_against_their_prompt_file_at_render_time() {
    let engine = Engine::new(load_dir(&good()).expect("loads")).expect("builds");
    let prepared = engine
        .prepare(&Request::prompt("greet").var("name", "Ada"))
        .expect("greet v2 renders");
    let messages = prepared.thread.messages();
    assert_eq!(messages[0].joined_text(), "Tone: warm and brief");
    assert_eq!(messages[1].joined_text(), "Hello Ada, from skein");
    assert_eq!(prepared.profile, "quick");
    assert_eq!(prepared.session_id.as_deref(), Some("greet-Ada"));
    // The artifact path is kept as written; only the directory is recorded.
    let inspection = engine.inspect_prompt("greet", Some(2)).expect("greet v2");
    assert_eq!(
        inspection.prompt.artifacts["tone"],
        Path::new("notes/tone.md")
    );
}

#[test]
fn artifacts_are_not_read_at_load_time() {
    let dir = tree(&[
        ("backends.toml", ECHO_BACKEND),
        ("profiles.toml", QUICK_PROFILE),
        (
            "prompts/later.toml",
            "id = \"later\"\ndefault_profile = \"quick\"\n[artifacts]\nnotes = \"not-yet.md\"\n\
             [[messages]]\nrole = \"user\"\ntemplate = \"{{ artifacts.notes }}\"\n",
        ),
    ]);
    let engine =
        Engine::new(load_dir(dir.path()).expect("a missing artifact does not fail loading"))
            .expect("builds");
    std::fs::write(
        dir.path().join("prompts/not-yet.md"),
        "written after loading",
    )
    .expect("write");
    let prepared = engine.prepare(&Request::prompt("later")).expect("renders");
    assert_eq!(
        prepared.thread.messages()[0].joined_text(),
        "written after loading"
    );
}

#[test]
fn output_contract_file_is_read_as_json() {
    let catalog = load_dir(&good()).expect("loads");
    let classify = catalog.find_prompt("classify", None).expect("classify");
    let contract = classify.output_contract.as_ref().expect("a contract");
    assert_eq!(contract["required"], json!(["label"]));
    assert_eq!(contract["additionalProperties"], json!(false));
}

#[tokio::test]
async fn scripted_backend_runs_from_its_relative_script() {
    let engine = Engine::new(load_dir(&good()).expect("loads")).expect("builds");
    let output = engine
        .run(Request::prompt("classify").var("text", "what a lovely day"))
        .await
        .expect("the scripted backend answers");
    assert_eq!(output.value, Some(json!({"label": "positive"})));
    assert_eq!(output.prepared.backend, "script");
}

#[tokio::test]
async fn a_cache_hint_in_a_template_reaches_the_provider_and_the_turns_after() {
    use skein_core::{Annotation, CacheHint};
    let dir = tree(&[
        ("backends.toml", ECHO_BACKEND),
        ("profiles.toml", QUICK_PROFILE),
        (
            "prompts/brief.toml",
            "id = \"brief\"\ndefault_profile = \"quick\"\n\
             [[messages]]\nrole = \"system\"\ntemplate = \"Long shared instructions about {{ topic }}.\"\ncache = \"ephemeral\"\n\
             [[messages]]\nrole = \"user\"\ntemplate = \"Now: {{ topic }}?\"\n\
             [[variables]]\nname = \"topic\"\n",
        ),
    ]);
    let catalog = load_dir(dir.path()).expect("loads");
    let template = &catalog.find_prompt("brief", None).unwrap().messages;
    assert_eq!(template[0].cache, Some(CacheHint::Ephemeral));
    assert_eq!(template[1].cache, None);
    let seen = skein_testkit::Recording::echo();
    let engine = Engine::builder(catalog)
        .provider("echo", seen.clone())
        .build()
        .expect("builds");

    let first = engine
        .run(Request::prompt("brief").var("topic", "tides").capture())
        .await
        .expect("runs");
    let hinted = |request: &skein_core::ModelRequest| -> Vec<(String, u32)> {
        request
            .annotations
            .iter()
            .filter(|(_, list)| list.contains(&Annotation::CacheHint(CacheHint::Ephemeral)))
            .map(|(at, _)| {
                let node = request
                    .thread
                    .at(at.node)
                    .expect("the hint is on a node of the request");
                (node.head().unwrap().message().joined_text(), at.part)
            })
            .collect()
    };
    let system = ("Long shared instructions about tides.".to_string(), 0);
    let requests = seen.requests();
    assert_eq!(hinted(&requests[0]), vec![system.clone()]);
    // Captured with the exchange, so a continuation sends it again.
    let exchange = first.exchange.expect("captured");
    assert_eq!(exchange.annotations(), &requests[0].annotations);
    engine
        .continue_from(
            &exchange,
            Request::messages([skein_core::Message::user("and currents?")]).profile("quick"),
        )
        .await
        .expect("continues");
    let requests = seen.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(hinted(&requests[1]), vec![system]);
    assert_eq!(first.prepared.annotations, requests[0].annotations);
}

#[test]
fn a_cache_hint_must_be_a_known_kind() {
    let dir = tree(&[(
        "prompts/p.toml",
        "id = \"p\"\n[[messages]]\nrole = \"user\"\ntemplate = \"a\"\ncache = \"forever\"\n",
    )]);
    let failure = failure(dir.path());
    assert_eq!(failure.kind, Kind::Prompt);
    assert_eq!(failure.key(), "messages[0].cache");
    assert!(failure.problem.contains("forever"), "{failure:?}");
}

#[test]
fn missing_subdirectories_are_empty() {
    let empty = tree(&[]);
    let catalog = load_dir(empty.path()).expect("an empty directory loads");
    assert_eq!(catalog.prompt_ids().count(), 0);
    assert_eq!(catalog.profile_names().count(), 0);
    assert_eq!(catalog.backend_names().count(), 0);

    let only_backends = tree(&[("backends/echo.toml", ECHO_BACKEND)]);
    let catalog = load_dir(only_backends.path()).expect("loads");
    assert_eq!(catalog.backend_names().collect::<Vec<_>>(), ["echo"]);
}

#[test]
fn non_toml_and_hidden_files_are_ignored() {
    let dir = tree(&[
        ("prompts/.draft.toml", "this is not TOML at all ["),
        ("prompts/notes.md", "not a prompt"),
        ("prompts/nested/deeper.toml", "neither is this ["),
        ("prompts/ok.toml", &format!("id = \"ok\"\n{HELLO_MESSAGE}")),
    ]);
    let catalog = load_dir(dir.path()).expect("loads");
    assert_eq!(catalog.prompt_ids().collect::<Vec<_>>(), ["ok"]);
}

#[test]
fn profiles_and_backends_may_also_live_in_directories() {
    let dir = tree(&[
        ("backends.toml", ECHO_BACKEND),
        (
            "backends/more.toml",
            "[[backend]]\nname = \"echo2\"\nkind = \"echo\"\n",
        ),
        ("profiles.toml", QUICK_PROFILE),
        (
            "profiles/more.toml",
            "[[profile]]\nname = \"other\"\nbackend = \"echo2\"\nmodel = \"m\"\n",
        ),
    ]);
    let catalog = load_dir(dir.path()).expect("loads");
    assert_eq!(
        catalog.backend_names().collect::<Vec<_>>(),
        ["echo", "echo2"]
    );
    assert_eq!(
        catalog.profile_names().collect::<Vec<_>>(),
        ["other", "quick"]
    );
}

#[test]
fn relative_directory_gives_absolute_paths() {
    let dir = tree(&[(
        "backends.toml",
        "[[backend]]\nname = \"small\"\nkind = \"local\"\npath = \"models/small.gguf\"\n",
    )]);
    let catalog = load_dir(dir.path()).expect("loads");
    let BackendKind::Local { path: Some(path) } =
        &catalog.find_backend("small").expect("small").kind
    else {
        panic!("a local backend with a path");
    };
    assert_eq!(path, &dir.path().join("models/small.gguf"));
}

#[test]
fn example_config_loads() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/config");
    let catalog = load_dir(&example).expect("the example configuration loads");
    let prompt = catalog.find_prompt("sentiment", None).expect("sentiment");
    assert_eq!(prompt.variables[0].name, "text");
    let contract = prompt.output_contract.as_ref().expect("a contract");
    assert_eq!(
        contract["properties"]["sentiment"]["enum"],
        json!(["positive", "negative", "neutral"])
    );
    assert_eq!(
        catalog.find_backend("echo").expect("echo").kind,
        BackendKind::Echo
    );
    assert_eq!(
        catalog.find_backend("local").expect("local").kind,
        BackendKind::Local { path: None }
    );
    let engine = Engine::new(catalog).expect("builds");
    let prepared = engine
        .prepare(
            &Request::prompt("sentiment")
                .var("text", "great!")
                .profile("try"),
        )
        .expect("prepares on the echo profile");
    assert_eq!(prepared.thread.messages()[1].joined_text(), "Text: great!");
    assert!(prepared.output_contract.is_some());
}

#[test]
fn loading_is_deterministic() {
    let first = load_dir(&good()).expect("loads");
    let second = load_dir(&good()).expect("loads");
    assert_eq!(format!("{first:?}"), format!("{second:?}"));
}

// ---- failures ----

#[test]
fn missing_directory_is_an_error_naming_it() {
    let dir = tree(&[]);
    let missing = dir.path().join("no-such-config");
    let failure = failure(&missing);
    assert_eq!(failure.kind, Kind::Prompt);
    assert_eq!(failure.file, missing);
    assert!(failure.problem.contains("does not exist"), "{failure:?}");

    let file = tree(&[("config.toml", "")]);
    let failure = self::failure(&file.path().join("config.toml"));
    assert!(failure.problem.contains("not a directory"), "{failure:?}");
}

#[test]
fn syntax_error_names_the_file_and_line() {
    let failure = failure(&data("bad/syntax"));
    assert_eq!(failure.kind, Kind::Prompt);
    assert_eq!(failure.file_name(), "broken.toml");
    assert!(
        failure.problem.starts_with("line 4, column "),
        "{failure:?}"
    );
}

#[test]
fn key_written_twice_is_named() {
    let dir = tree(&[(
        "prompts/p.toml",
        &format!("id = \"p\"\nversion = 1\nversion = 2\n{HELLO_MESSAGE}"),
    )]);
    let failure = failure(dir.path());
    assert_eq!(failure.key(), "version");
    assert_eq!(failure.problem, "line 3, column 1: duplicate key");
}

#[test]
fn template_syntax_errors_name_the_message() {
    let dir = tree(&[(
        "prompts/p.toml",
        "id = \"p\"\n[[messages]]\nrole = \"user\"\ntemplate = \"ok\"\n[[messages]]\nrole = \"user\"\ntemplate = \"{{ name \"\n",
    )]);
    let failure = failure(dir.path());
    assert_eq!(failure.kind, Kind::Prompt);
    assert_eq!(failure.key(), "messages[1].template");
    assert!(
        failure
            .problem
            .starts_with("line 7: the template does not compile"),
        "{failure:?}"
    );

    let dir = tree(&[(
        "prompts/p.toml",
        &format!("id = \"p\"\nsession_id = \"{{% if %}}\"\n{HELLO_MESSAGE}"),
    )]);
    let failure = self::failure(dir.path());
    assert_eq!(failure.key(), "session_id");
}

#[test]
fn syntax_error_in_a_profile_file_is_a_profile_error() {
    let dir = tree(&[
        ("backends.toml", ECHO_BACKEND),
        ("profiles.toml", "[[profile]\nname = 1\n"),
    ]);
    let failure = failure(dir.path());
    assert_eq!(failure.kind, Kind::Profile);
    assert_eq!(failure.file_name(), "profiles.toml");
    assert!(
        failure.problem.starts_with("line 1, column "),
        "{failure:?}"
    );
}

#[test]
fn unknown_key_names_the_file_key_and_line() {
    let failure = failure(&data("bad/unknown_key"));
    assert_eq!(failure.kind, Kind::Profile);
    assert_eq!(failure.file_name(), "profiles.toml");
    assert_eq!(failure.key(), "profile[1].modle");
    assert!(
        failure
            .problem
            .starts_with("line 9, column 1: unknown field `modle`"),
        "{failure:?}"
    );
}

#[test]
fn unknown_keys_in_prompts_name_their_path() {
    let dir = tree(&[(
        "prompts/p.toml",
        "id = \"p\"\n[[messages]]\nrole = \"user\"\ntemplate = \"a\"\n[[messages]]\nrol = \"user\"\ntemplate = \"b\"\n",
    )]);
    let failure = failure(dir.path());
    assert_eq!(failure.kind, Kind::Prompt);
    assert_eq!(failure.file_name(), "p.toml");
    assert_eq!(failure.key(), "messages[1].rol");
    assert!(
        failure
            .problem
            .starts_with("line 6, column 1: unknown field `rol`"),
        "{failure:?}"
    );

    let dir = tree(&[(
        "prompts/p.toml",
        &format!("id = \"p\"\nvariables = [{{ name = \"x\", requird = true }}]\n{HELLO_MESSAGE}"),
    )]);
    let failure = self::failure(dir.path());
    assert_eq!(failure.key(), "variables[0].requird");
    assert!(
        failure.problem.starts_with("line 2, column "),
        "{failure:?}"
    );

    let dir = tree(&[(
        "prompts/p.toml",
        &format!("id = \"p\"\ndefualt_profile = \"x\"\n{HELLO_MESSAGE}"),
    )]);
    let failure = self::failure(dir.path());
    assert_eq!(failure.key(), "defualt_profile");
}

#[test]
fn unknown_generation_option_is_rejected() {
    let dir = tree(&[
        ("backends.toml", ECHO_BACKEND),
        (
            "profiles.toml",
            "[[profile]]\nname = \"p\"\nbackend = \"echo\"\nmodel = \"m\"\n[profile.options]\ntemperature = 0.5\ntemprature = 0.5\n",
        ),
    ]);
    let failure = failure(dir.path());
    assert_eq!(failure.kind, Kind::Profile);
    assert_eq!(failure.key(), "profile[0].options.temprature");
    assert!(
        failure.problem.contains("unknown field `temprature`"),
        "{failure:?}"
    );
}

#[test]
fn wrong_types_name_the_key_and_line() {
    let dir = tree(&[(
        "backends.toml",
        "[[backend]]\nname = \"echo\"\nkind = \"echo\"\ncapacity = \"many\"\n",
    )]);
    let failure = failure(dir.path());
    assert_eq!(failure.kind, Kind::Profile);
    assert_eq!(failure.key(), "backend[0].capacity");
    assert!(
        failure
            .problem
            .starts_with("line 4, column 12: invalid type"),
        "{failure:?}"
    );

    let dir = tree(&[(
        "prompts/p.toml",
        "id = \"p\"\n[[messages]]\nrole = \"robot\"\ntemplate = \"x\"\n",
    )]);
    let failure = self::failure(dir.path());
    assert_eq!(failure.key(), "messages[0].role");
    assert!(
        failure.problem.contains("unknown variant `robot`"),
        "{failure:?}"
    );

    let dir = tree(&[
        ("backends.toml", ECHO_BACKEND),
        (
            "profiles.toml",
            "[[profile]]\nname = \"p\"\nbackend = \"echo\"\nmodel = \"m\"\ncredential = { vault = \"x\" }\n",
        ),
    ]);
    let failure = self::failure(dir.path());
    assert_eq!(failure.key(), "profile[0].credential.vault");
}

#[test]
fn missing_fields_name_the_key() {
    let dir = tree(&[("prompts/p.toml", "id = \"p\"\n")]);
    let failure = failure(dir.path());
    assert_eq!(failure.kind, Kind::Prompt);
    assert_eq!(failure.key(), "messages");
    assert!(
        failure.problem.contains("missing field `messages`"),
        "{failure:?}"
    );

    let dir = tree(&[(
        "prompts/p.toml",
        "id = \"p\"\n[[messages]]\nrole = \"user\"\n",
    )]);
    let failure = self::failure(dir.path());
    assert_eq!(failure.key(), "messages[0].template");
    assert!(
        failure
            .problem
            .starts_with("line 2, column 1: missing field `template`"),
        "{failure:?}"
    );

    let dir = tree(&[(
        "profiles.toml",
        "[[profile]]\nname = \"p\"\nbackend = \"echo\"\n",
    )]);
    let failure = self::failure(dir.path());
    assert_eq!(failure.key(), "profile[0].model");
}

#[test]
fn backend_kinds_check_their_own_keys() {
    let cases = [
        (
            "[[backend]]\nname = \"b\"\nkind = \"echo\"\nscript = \"x.toml\"\n",
            "backend[0].script",
            "line 4: `script` does not apply",
        ),
        (
            "[[backend]]\nname = \"b\"\nkind = \"scripted\"\n",
            "backend[0].script",
            "line 3: missing field `script`",
        ),
        (
            "[[backend]]\nname = \"b\"\nkind = \"local\"\nbase_url = \"http://x\"\n",
            "backend[0].base_url",
            "line 4: `base_url` does not apply",
        ),
        (
            "[[backend]]\nname = \"b\"\nkind = \"openai\"\npath = \"m.gguf\"\n",
            "backend[0].path",
            "line 4: `path` does not apply",
        ),
        (
            "[[backend]]\nname = \"b\"\nkind = \"gemini\"\n",
            "backend[0].kind",
            "line 3, column 8: unknown variant `gemini`",
        ),
        (
            "[[backend]]\nname = \"b\"\nkind = \"echo\"\ncapacity = 0\n",
            "backend[0].capacity",
            "line 4: capacity must be at least 1",
        ),
        (
            "[[backends]]\nname = \"b\"\nkind = \"echo\"\n",
            "backends",
            "line 1, column 3: unknown field `backends`",
        ),
    ];
    for (text, key, problem) in cases {
        let dir = tree(&[("backends.toml", text)]);
        let failure = failure(dir.path());
        assert_eq!(failure.kind, Kind::Profile, "{text}");
        assert_eq!(failure.file_name(), "backends.toml");
        assert_eq!(failure.key(), key, "{text}");
        assert!(failure.problem.starts_with(problem), "{text}: {failure:?}");
    }
}

#[test]
fn duplicate_prompt_version_names_both_files() {
    let failure = failure(&data("bad/duplicate_prompt"));
    assert_eq!(failure.kind, Kind::Prompt);
    assert_eq!(
        failure.file_name(),
        "b.toml",
        "files are read in sorted order"
    );
    assert_eq!(failure.key(), "version");
    assert!(
        failure
            .problem
            .contains("duplicate prompt `twice` version 3"),
        "{failure:?}"
    );
    assert!(failure.problem.contains("a.toml, line 2"), "{failure:?}");
}

#[test]
fn duplicate_profiles_and_backends_are_errors() {
    let dir = tree(&[
        ("backends.toml", ECHO_BACKEND),
        ("profiles.toml", QUICK_PROFILE),
        ("profiles/again.toml", &format!("# again\n{QUICK_PROFILE}")),
    ]);
    let failure = failure(dir.path());
    assert_eq!(failure.kind, Kind::Profile);
    assert_eq!(failure.file_name(), "again.toml");
    assert_eq!(failure.key(), "profile[0].name");
    assert!(
        failure
            .problem
            .starts_with("line 3: duplicate profile `quick`"),
        "{failure:?}"
    );
    assert!(
        failure.problem.contains("profiles.toml, line 2"),
        "{failure:?}"
    );

    let dir = tree(&[("backends.toml", &format!("{ECHO_BACKEND}{ECHO_BACKEND}"))]);
    let failure = self::failure(dir.path());
    assert_eq!(failure.kind, Kind::Profile);
    assert_eq!(failure.key(), "backend[1].name");
    assert!(
        failure.problem.contains("duplicate backend `echo`"),
        "{failure:?}"
    );
}

#[test]
fn profile_naming_an_unknown_backend_is_an_error() {
    let failure = failure(&data("bad/unknown_backend"));
    assert_eq!(failure.kind, Kind::Profile);
    assert_eq!(failure.file_name(), "profiles.toml");
    assert_eq!(failure.key(), "profile[1].backend");
    assert!(failure.problem.starts_with("line 8: "), "{failure:?}");
    assert!(
        failure.problem.contains("unknown backend `nowhere`"),
        "{failure:?}"
    );
    assert!(
        failure.problem.contains("`echo`"),
        "lists the known backends: {failure:?}"
    );
}

#[test]
fn prompt_naming_an_unknown_default_profile_is_an_error() {
    let failure = failure(&data("bad/unknown_default_profile"));
    assert_eq!(failure.kind, Kind::Prompt);
    assert_eq!(failure.file_name(), "orphan.toml");
    assert_eq!(failure.key(), "default_profile");
    assert!(
        failure.problem.contains("unknown profile `missing`"),
        "{failure:?}"
    );
}

#[test]
fn bad_output_contract_file_json_is_an_error() {
    let failure = failure(&data("bad/bad_contract_json"));
    assert_eq!(failure.kind, Kind::Prompt);
    assert_eq!(failure.file_name(), "answer.toml");
    assert_eq!(failure.key(), "output_contract_file");
    assert!(
        failure
            .problem
            .contains("answer.schema.json is not valid JSON"),
        "{failure:?}"
    );
    assert!(
        failure.problem.contains("line 4"),
        "the JSON error's position: {failure:?}"
    );
}

#[test]
fn other_output_contract_problems_are_errors() {
    let missing = tree(&[(
        "prompts/p.toml",
        &format!("id = \"p\"\noutput_contract_file = \"nope.json\"\n{HELLO_MESSAGE}"),
    )]);
    let failure = failure(missing.path());
    assert_eq!(failure.key(), "output_contract_file");
    assert!(failure.problem.contains("cannot read"), "{failure:?}");

    let both = tree(&[
        ("prompts/s.json", "{}"),
        (
            "prompts/p.toml",
            &format!(
                "id = \"p\"\noutput_contract_file = \"s.json\"\noutput_contract = {{ type = \"object\" }}\n{HELLO_MESSAGE}"
            ),
        ),
    ]);
    let failure = self::failure(both.path());
    assert_eq!(failure.key(), "output_contract_file");
    assert!(failure.problem.contains("not both"), "{failure:?}");

    let not_a_path = tree(&[(
        "prompts/p.toml",
        &format!("id = \"p\"\noutput_contract_file = 3\n{HELLO_MESSAGE}"),
    )]);
    let failure = self::failure(not_a_path.path());
    assert_eq!(failure.key(), "output_contract_file");

    let invalid = tree(&[(
        "prompts/p.toml",
        &format!("id = \"p\"\n{HELLO_MESSAGE}[output_contract]\ntype = 5\n"),
    )]);
    let failure = self::failure(invalid.path());
    assert_eq!(failure.kind, Kind::Prompt);
    assert_eq!(failure.key(), "output_contract");
    assert!(
        failure.problem.contains("not a valid JSON Schema"),
        "{failure:?}"
    );
}

#[test]
fn files_are_read_in_sorted_order() {
    let dir = tree(&[
        ("profiles/b.toml", "[[profile]]\nbogus_b = 1\n"),
        ("profiles/a.toml", "[[profile]]\nbogus_a = 1\n"),
    ]);
    let failure = failure(dir.path());
    assert_eq!(failure.file_name(), "a.toml");
    assert_eq!(failure.key(), "profile[0].bogus_a");
}

#[test]
fn unreadable_input_never_panics() {
    let cases: &[(&str, &str)] = &[
        ("prompts/p.toml", ""),
        ("prompts/p.toml", "id = 1\n"),
        ("prompts/p.toml", "[[messages]]\n[[messages]]\nrole = 1\n"),
        ("prompts/p.toml", "messages = 3\nid = \"x\"\n"),
        ("prompts/p.toml", "id = \"é\"\nversion = -1\n"),
        ("prompts/p.toml", "id = \"x\"\nversion = 1\nversion = 2\n"),
        ("prompts/p.toml", "\"weird key\" = 1\n"),
        ("profiles.toml", "profile = 1\n"),
        ("profiles.toml", "[[profile]]\noptions = 3\n"),
        ("backends.toml", "backend = [1, 2]\n"),
        ("backends.toml", "[[backend]]\n"),
    ];
    for (path, text) in cases {
        let dir = tree(&[(path, text)]);
        let _ = failure(dir.path());
    }
    let binary = tree(&[]);
    std::fs::create_dir_all(binary.path().join("prompts")).expect("mkdir");
    std::fs::write(binary.path().join("prompts/p.toml"), [0xff, 0xfe, 0x00]).expect("write");
    let failure = failure(binary.path());
    assert!(failure.problem.contains("cannot read"), "{failure:?}");
}

#[test]
fn error_messages_read_well() {
    let failure = failure(&data("bad/unknown_key"));
    assert!(
        failure.display.starts_with("cannot load profile "),
        "{}",
        failure.display
    );
    assert!(
        failure.display.contains("(key `profile[1].modle`): line 9"),
        "{}",
        failure.display
    );
}

/// A prompt written as text (as `skein prompt --save` writes one) declares
/// the variables its templates use, and its tools survive a trip through
/// its TOML file; a template that does not parse is refused, naming it.
#[test]
fn a_prompt_written_as_text_declares_its_variables_and_keeps_its_tools() {
    use skein_engine::config::{MessageTemplate, PromptDef};
    let prompt = PromptDef::new(
        "pirate",
        vec![
            MessageTemplate::new(Role::System, "A pirate fond of {{ topic }}."),
            MessageTemplate::new(
                Role::User,
                "{{ question }} {% if loud is defined %}!{% endif %}",
            ),
        ],
    )
    .variable("question")
    .tools(["skein_time"])
    .declare_used_variables()
    .expect("templates parse");
    let names: Vec<&str> = prompt.variables.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["question", "loud", "topic"]);
    let dir = tree(&[(
        "prompts/pirate.toml",
        &toml::to_string(&prompt).expect("a prompt is TOML"),
    )]);
    let catalog = load_dir(dir.path()).expect("loads");
    let loaded = catalog.find_prompt("pirate", None).expect("the prompt");
    assert_eq!(loaded.tools, ["skein_time"]);
    assert_eq!(loaded.variables.len(), 3);

    let broken = PromptDef::new("bad", vec![MessageTemplate::new(Role::User, "{{ oops")])
        .declare_used_variables()
        .expect_err("does not parse");
    assert!(
        matches!(&broken, EngineError::PromptLoad { key: Some(key), .. } if key == "bad: messages[0]"),
        "{broken}"
    );
}
