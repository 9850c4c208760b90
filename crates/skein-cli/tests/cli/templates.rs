//! Templates and aliases as an `llm` user has them: `prompt --save NAME`,
//! `-t NAME -p KEY VALUE`, `skein templates`, `skein aliases` and `skein
//! models` listing profiles and aliases; all of them the engine
//! directory's prompts and profiles (the default directory beside the
//! configuration file when none is configured), so replay's
//! `--prompt-version` sees a template's versions.

use serde_json::{Value, json};
use skein_testkit::Cli;
use skein_testkit::cli::stderr;

fn temp() -> Cli {
    Cli::temp(crate::BIN)
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The first message `prepare` would send for these arguments.
fn first_message(skein: &Cli, args: &[&str]) -> String {
    let prepared = skein.json(&[&["prepare"], args].concat());
    prepared["messages"][0]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn an_llm_user_saves_a_template_uses_it_with_parameters_and_names_models() {
    let skein = temp();
    let engine = skein.dir().join("engine");

    // Save: nothing runs, no database is made, and the template is a
    // configured prompt of the default engine directory.
    let saved = skein.run(&[
        "-s",
        "You are a pirate who loves {{ topic }}.",
        "-o",
        "temperature",
        "0.5",
        "--save",
        "pirate",
    ]);
    assert!(saved.status.success(), "{}", stderr(&saved));
    let file = engine.join("prompts/pirate.toml");
    assert_eq!(stdout(&saved).trim(), file.display().to_string());
    assert!(
        stderr(&saved).contains("skein -t pirate -p topic VALUE"),
        "{}",
        stderr(&saved)
    );
    assert!(!skein.db().exists(), "--save opened no database");
    let shown = skein.ok(&["templates", "show", "pirate"]);
    assert!(shown.contains("id = \"pirate\""), "{shown}");
    assert!(shown.contains("{{ topic }}"), "{shown}");
    assert_eq!(
        skein.ok(&["templates", "path"]).trim(),
        engine.join("prompts").display().to_string()
    );
    let config = skein.ok(&["config", "show"]);
    assert!(
        config.contains(&format!("engine dir     {}", engine.display())),
        "{config}"
    );

    // Use it with a parameter: its system text, model and options apply.
    let prepared = skein.json(&["prepare", "-t", "pirate", "-p", "topic", "gold", "ahoy"]);
    assert_eq!(prepared["profile"], "pirate@1", "{prepared}");
    assert_eq!(prepared["options"]["temperature"], 0.5, "{prepared}");
    assert_eq!(
        prepared["messages"][0]["parts"][0]["text"],
        "You are a pirate who loves gold."
    );
    assert_eq!(prepared["messages"][1]["parts"][0]["text"], "ahoy");
    let turn = skein.json(&["-t", "pirate", "-p", "topic", "gold", "ahoy"]);
    assert!(
        turn["text"].as_str().unwrap().contains("system: yes"),
        "{turn}"
    );
    let cid = turn["conversation"].as_str().unwrap().to_string();

    // Saving the name again is a new version; the old one stays.
    skein.ok(&[
        "-s",
        "You are a pirate who hates {{ topic }}.",
        "--save",
        "pirate",
    ]);
    assert!(engine.join("prompts/pirate@2.toml").is_file());
    let listed = skein.json(&["templates", "list"]);
    assert_eq!(listed["templates"][0]["name"], "pirate");
    assert_eq!(listed["templates"][0]["versions"], json!([1, 2]));
    assert_eq!(
        first_message(&skein, &["-t", "pirate@1", "-p", "topic", "rum"]),
        "You are a pirate who loves rum."
    );
    assert_eq!(
        first_message(&skein, &["-t", "pirate", "-p", "topic", "rum"]),
        "You are a pirate who hates rum."
    );
    // Replay sees the versions, as it sees any configured prompt's.
    let replay = skein.run(&[
        "replay",
        "--cid",
        &cid,
        "-m",
        "echo",
        "--prompt-version",
        "pirate@2",
        "--format",
        "json",
    ]);
    // (Echo answers the same to either system text: the turn holds.)
    assert_eq!(replay.status.code(), Some(0), "{}", stderr(&replay));
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(
        report["change"]["prompt_version"],
        json!({"id": "pirate", "version": 2})
    );
    let answer: skein::NodeId = report["turns"][0]["answer_node"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let sent = skein::Store::open(skein.db())
        .unwrap()
        .load_thread(answer)
        .unwrap()
        .messages()[0]
        .joined_text();
    assert_eq!(sent, "You are a pirate who hates gold.", "{report}");

    // A template's tools and schema come with it.
    skein.ok(&[
        "What time is it in {{ city }}?",
        "-T",
        "skein_time",
        "--schema",
        "time",
        "--save",
        "clock",
    ]);
    let clock = skein.json(&["prepare", "-t", "clock", "-p", "city", "Oslo"]);
    assert_eq!(clock["tools"][0]["name"], "skein_time", "{clock}");
    assert_eq!(
        clock["output_contract"]["required"],
        json!(["time"]),
        "{clock}"
    );

    // Edit: the editor's change is checked and kept.
    let edited = skein
        .command(&["templates", "edit", "pirate"])
        .env("EDITOR", "sed -i s/hates/fears/")
        .env_remove("VISUAL")
        .output()
        .unwrap();
    assert!(edited.status.success(), "{}", stderr(&edited));
    assert_eq!(
        first_message(&skein, &["-t", "pirate", "-p", "topic", "rum"]),
        "You are a pirate who fears rum."
    );

    // Aliases: a short name for a model, usable with -m, listed by
    // `models` beside the profiles, with the key each needs.
    assert_eq!(
        skein.ok(&["aliases", "set", "fast", "echo"]).trim(),
        "fast → echo"
    );
    skein.ok(&["aliases", "set", "mini", "openai:gpt-4o-mini"]);
    let answer = skein.json(&["-m", "fast", "hi"]);
    assert!(
        answer["text"].as_str().unwrap().starts_with("echo: \"hi\""),
        "{answer}"
    );
    let aliases = skein.json(&["aliases", "list"]);
    assert_eq!(
        aliases["aliases"],
        json!([
            {"alias": "fast", "model": "echo", "needs_key": null},
            {"alias": "mini", "model": "openai:gpt-4o-mini", "needs_key": "OPENAI_API_KEY"},
        ])
    );
    let models = skein.json(&["models"]);
    let names = |key: &str| -> Vec<String> {
        models[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("aliases"), ["fast", "mini"]);
    assert_eq!(names("profiles"), ["pirate@1"], "{models}");
    assert!(names("model_names").contains(&"echo".to_string()));
    let text = skein.ok(&["models"]);
    assert!(
        text.contains("aliases (`skein aliases`):\n  fast")
            && text.contains(" openai:gpt-4o-mini (needs OPENAI_API_KEY)\n")
            && text.contains("  openai:MODEL ")
            && text.contains(" (needs ANTHROPIC_API_KEY)\n"),
        "{text}"
    );
    // A name close to an alias suggests it.
    let typo = skein.run(&["-m", "fsat", "hi"]);
    assert_eq!(typo.status.code(), Some(2), "{}", stderr(&typo));
    assert!(
        stderr(&typo).contains("did you mean `fast`"),
        "{}",
        stderr(&typo)
    );

    // Removing an alias.
    skein.ok(&["aliases", "remove", "mini"]);
    assert_eq!(
        skein.json(&["aliases", "list"])["aliases"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn templates_and_aliases_refuse_what_they_cannot_do() {
    let skein = temp();
    let fails = |args: &[&str], code: i32, says: &str| {
        let output = skein.run(args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
    };
    // Before any template exists.
    fails(&["-t", "pirate", "hi"], 3, "skein prompt … --save NAME");
    fails(
        &["templates", "show", "pirate"],
        3,
        "there is no template `pirate`",
    );
    // Nothing to save, or something a template cannot hold.
    fails(&["--save", "empty"], 2, "--save empty has nothing to save");
    fails(&["hi", "-c", "--save", "x"], 2, "cannot be used with");
    fails(&["hi", "--save", "a/b"], 2, "`a/b` cannot name a template");
    fails(
        &["hi", "-m", "nosuch", "--save", "x"],
        2,
        "unknown model `nosuch`",
    );
    assert!(!skein.dir().join("engine/prompts/x.toml").exists());
    fails(&["{{ broken", "--save", "x"], 2, "cannot save template `x`");

    skein.ok(&["Tell me about {{ topic }}", "--save", "about"]);
    fails(
        &["-t", "nosuch", "hi"],
        3,
        "no prompt `nosuch` (known: about)",
    );
    fails(
        &["-t", "about", "-p", "topik", "x"],
        2,
        "declares no variable `topik`",
    );
    fails(&["-t", "about@3"], 3, "has no version 3");
    fails(
        &["templates", "edit", "nosuch"],
        3,
        "there is no template `nosuch`",
    );
    // An edit that breaks the template is reported, asking for another.
    let broken = skein
        .command(&["templates", "edit", "about"])
        .env("EDITOR", "sed -i s/^version/versio/")
        .env_remove("VISUAL")
        .output()
        .unwrap();
    assert_eq!(broken.status.code(), Some(1), "{}", stderr(&broken));
    assert!(
        stderr(&broken).contains("run `skein templates edit about` again"),
        "{}",
        stderr(&broken)
    );
    let fixed = skein
        .command(&["templates", "edit", "about"])
        .env("EDITOR", "sed -i s/^versio/version/")
        .env_remove("VISUAL")
        .output()
        .unwrap();
    assert!(fixed.status.success(), "{}", stderr(&fixed));

    // A file of the name that holds another prompt is never overwritten.
    std::fs::write(
        skein.dir().join("engine/prompts/other.toml"),
        "id = \"another\"\n[[messages]]\nrole = \"user\"\ntemplate = \"hi\"\n",
    )
    .unwrap();
    fails(
        &["hello", "--save", "other"],
        1,
        "already exists and holds another prompt",
    );

    // Alias names that clash with a model or a profile, and bad targets.
    fails(
        &["aliases", "set", "smollm2", "echo"],
        2,
        "already a model name",
    );
    skein.ok(&["hi", "-o", "seed", "1", "--save", "seeded"]);
    fails(
        &["aliases", "set", "seeded@1", "echo"],
        2,
        "cannot name an alias",
    );
    std::fs::write(
        skein.dir().join("engine/profiles/mine.toml"),
        "[[profile]]\nname = \"quick\"\nbackend = \"echo\"\nmodel = \"echo\"\n",
    )
    .unwrap();
    fails(&["aliases", "set", "quick", "echo"], 2, "already a profile");
    fails(
        &["aliases", "set", "e2", "nosuch"],
        2,
        "unknown model `nosuch`",
    );
    fails(
        &["aliases", "remove", "nosuch"],
        3,
        "there is no alias `nosuch`",
    );
    // An alias a template runs on stays until the template changes.
    skein.ok(&["aliases", "set", "e2", "quick"]);
    skein.ok(&["hi", "-m", "e2", "--save", "on-alias"]);
    fails(
        &["aliases", "remove", "e2"],
        1,
        "alias `e2` is the model of on-alias@1",
    );
}
