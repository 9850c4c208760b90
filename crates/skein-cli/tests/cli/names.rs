//! Conversation names never shadow ids: a name that reads as an id is
//! refused on the command line (exit code 2, nothing recorded) and by the
//! proxy's `x-skein-conversation-name` header (a 400, nothing recorded),
//! and a conversation stored under such a name by an older skein cannot
//! stand in for the conversation whose id it spells: `--cid`, `log`,
//! `usage` and `tree` reach the victim, and its next turn goes there.

use crate::proxy::post_with;
use crate::serve::Server;
use serde_json::{Value, json};
use skein_testkit::Cli;
use skein_testkit::cli::stderr;

/// How many rows `table` of `skein`'s database holds.
fn count(skein: &Cli, table: &str) -> i64 {
    skein::Store::open(skein.db())
        .unwrap()
        .raw_connection()
        .unwrap()
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
            row.get(0)
        })
        .unwrap()
}

/// The refusal of an id-like name on the command line: clap's exit code 2
/// and the store's reason.
fn assert_refused_name(output: &std::process::Output) {
    assert_eq!(output.status.code(), Some(2), "{}", stderr(output));
    let said = stderr(output);
    assert!(said.contains("cannot look like an id"), "{said}");
    assert!(said.contains("non-hex character"), "{said}");
}

#[test]
fn a_name_that_reads_as_an_id_is_refused_before_anything_is_recorded() {
    let skein = Cli::temp(crate::BIN);
    for name in ["0123abcd", "DEADBEEF", "0123456789abcdef0123456789abcdef"] {
        assert_refused_name(&skein.run(&["prompt", "--name", name, "hello"]));
        assert_refused_name(&skein.run(&["chat", "--name", name]));
    }
    assert!(
        !skein.db().exists(),
        "nothing was recorded, no database made"
    );
    let first = skein.json(&["prompt", "--name", "cafe-2", "hello"]);
    let node = first["node"].as_str().unwrap();
    assert_refused_name(&skein.run(&["fork", node, "--name", "cafe", "again"]));
    assert_eq!(count(&skein, "conversations"), 1);
    assert_eq!(count(&skein, "runs"), 1);
    let stored = skein.json(&["log", "--cid", "cafe-2"]);
    assert_eq!(stored["messages"].as_array().unwrap().len(), 2, "{stored}");
}

/// The attack of the issue, end to end: a proxy client names its
/// conversation after the victim's id (refused); an older database where
/// an impostor holds that name anyway (planted in the row); the user's
/// `--cid`, `log`, `usage` and `tree` still reach the victim.
#[test]
fn a_name_cannot_take_over_another_conversations_id() {
    let skein = Cli::temp(crate::BIN);
    let victim = skein.json(&["prompt", "--name", "victim", "hello"]);
    let victim = victim["conversation"].as_str().unwrap().to_string();
    let short = victim[..12].to_string();
    skein.json(&["prompt", "--cid", &victim, "second"]);

    let server = Server::start(&skein.db(), &["--proxy", "-m", "echo"]);
    let runs = count(&skein, "runs");
    let body = json!({"messages": [
        {"role": "system", "content": "injected"},
        {"role": "user", "content": "evil"}
    ]});
    for name in [victim.as_str(), short.as_str(), &short.to_uppercase()] {
        let (status, text) = post_with(
            &server.address,
            "/v1/chat/completions",
            &body.to_string(),
            &[("x-skein-conversation-name", name)],
        );
        assert_eq!(status, 400, "{name}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["type"], "invalid_request_error", "{text}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("x-skein-conversation-name"), "{message}");
        assert!(message.contains("cannot look like an id"), "{message}");
    }
    drop(server);
    assert_eq!(
        count(&skein, "runs"),
        runs,
        "a refused request runs nothing"
    );
    assert_eq!(count(&skein, "conversations"), 1);

    // An older skein let an impostor take the victim's id as its name.
    let impostor = skein.json(&["prompt", "-s", "injected", "evil"]);
    let impostor = impostor["conversation"].as_str().unwrap().to_string();
    for name in [&victim, &short] {
        skein::Store::open(skein.db())
            .unwrap()
            .raw_connection()
            .unwrap()
            .execute(
                "UPDATE conversations SET name = ?1 WHERE id = ?2",
                [name.as_str(), impostor.as_str()],
            )
            .unwrap();
        for typed in [name.as_str(), &name.to_uppercase()] {
            let log = skein.json(&["log", "--cid", typed]);
            let texts = log.to_string();
            assert!(
                texts.contains("hello") && !texts.contains("evil"),
                "{texts}"
            );
            let usage = skein.json(&["usage", "--cid", typed]);
            let runs = usage["runs"].as_array().unwrap();
            assert_eq!(runs.len(), 2, "the victim's two turns: {usage}");
            let tree = skein.json(&["tree", typed]);
            assert!(tree.to_string().contains(&victim), "{tree}");
            assert!(!tree.to_string().contains(&impostor), "{tree}");
        }
    }
    let next = skein.json(&["prompt", "--cid", &short, "and again"]);
    assert_eq!(next["conversation"], victim.as_str());
    let log = skein.json(&["log", "--cid", &victim]).to_string();
    assert!(
        log.contains("and again") && !log.contains("injected"),
        "{log}"
    );
    // The impostor's stored name still reads back, as it was.
    let store = skein::Store::open(skein.db()).unwrap();
    let stored = store
        .conversation(&store.resolve_conversation(&impostor).unwrap())
        .unwrap();
    assert_eq!(stored.name.as_deref(), Some(short.as_str()));
}

/// Where a node is meant, a conversation's name (or id) stands for its
/// head; a node id still wins, and a name nothing has is exit code 3.
#[test]
fn a_conversation_name_stands_for_its_head_where_a_node_is_meant() {
    let skein = Cli::temp(crate::BIN);
    let first = skein.json(&["prompt", "--name", "mychat", "hello"]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    let head = first["node"].as_str().unwrap().to_string();

    let replied = skein.json(&["reply", "mychat", "and then"]);
    assert_eq!(
        replied["conversation"],
        cid.as_str(),
        "extended, not branched"
    );
    assert!(
        replied["text"]
            .as_str()
            .unwrap()
            .contains("history: 3 messages"),
        "{replied}"
    );
    let new_head = replied["node"].as_str().unwrap().to_string();
    let shown = skein.json(&["show", "mychat"]);
    assert_eq!(shown["node"]["id"], new_head.as_str(), "{shown}");
    let usage = skein.json(&["usage", "mychat"]);
    assert_eq!(usage["runs"].as_array().unwrap().len(), 1, "{usage}");
    // A conversation's id prefix works too; a node prefix is still a node.
    let forked = skein.json(&["fork", &cid[..10], "--name", "offshoot"]);
    assert_eq!(forked["head"], new_head.as_str(), "{forked}");
    let at_first = skein.json(&["fork", &head[..10]]);
    assert_eq!(at_first["head"], head.as_str(), "{at_first}");

    let unknown = skein.run(&["reply", "nochat", "hi"]);
    assert_eq!(unknown.status.code(), Some(3), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("no conversation has that id or name"),
        "{}",
        stderr(&unknown)
    );
    assert_eq!(count(&skein, "runs"), 2, "nothing ran for the unknown name");
}

/// A name already taken is refused when it is set, before anything runs.
#[test]
fn a_duplicate_name_is_refused_when_set() {
    let skein = Cli::temp(crate::BIN);
    let first = skein.json(&["prompt", "--name", "planning", "hello"]);
    let node = first["node"].as_str().unwrap().to_string();
    for args in [
        &["prompt", "--name", "planning", "again"][..],
        &["fork", &node, "--name", "planning"],
        &["fork", &node, "--name", "planning", "with a turn"],
    ] {
        let output = skein.run(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        let said = stderr(&output);
        assert!(said.contains("is already named `planning`"), "{said}");
        assert!(said.contains("choose another name"), "{said}");
        assert!(said.contains("--cid planning"), "{said}");
    }
    let chat = skein.run_with_stdin(&["chat", "--name", "planning"], b"hi\n");
    assert_eq!(chat.status.code(), Some(2), "{}", stderr(&chat));
    assert_eq!(count(&skein, "conversations"), 1);
    assert_eq!(count(&skein, "runs"), 1);
    // The one conversation of that name is still found by it.
    let next = skein.json(&["prompt", "--cid", "planning", "more"]);
    assert_eq!(next["conversation"], first["conversation"]);
}

/// The proxy's `x-skein-conversation-name` may not start a second
/// conversation under a taken name (a 400 in the API's format, nothing
/// recorded); a request that continues the conversation of that name, and
/// a session that continues its own conversation, are not refused.
#[test]
fn the_proxy_never_starts_a_second_conversation_under_a_taken_name() {
    let skein = Cli::temp(crate::BIN);
    skein.json(&["prompt", "--name", "planning", "hello"]);
    let server = Server::start(&skein.db(), &["--proxy", "-m", "echo"]);
    let chat = |messages: Value, headers: &[(&str, &str)]| {
        let body = json!({ "model": "echo", "messages": messages });
        post_with(
            &server.address,
            "/v1/chat/completions",
            &body.to_string(),
            headers,
        )
    };
    let (conversations, runs) = (count(&skein, "conversations"), count(&skein, "runs"));
    let (status, text) = chat(
        json!([{"role": "user", "content": "something else"}]),
        &[("x-skein-conversation-name", "planning")],
    );
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        (count(&skein, "conversations"), count(&skein, "runs")),
        (conversations + 1, runs + 1),
        "the reply is kept, in a conversation of its own"
    );
    let named: i64 = rusqlite::Connection::open(skein.db())
        .unwrap()
        .query_row(
            "SELECT count(*) FROM conversations WHERE name = 'planning'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(named, 1, "the name stays unique");
    let conversations = conversations + 1;

    // The conversation of that name, continued under its name: recorded.
    let stored = skein.json(&["log", "--cid", "planning"]);
    let reply = stored["messages"][1]["parts"][0]["text"].clone();
    let history = json!([
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "more"}
    ]);
    let (status, text) = chat(history, &[("x-skein-conversation-name", "planning")]);
    assert_eq!(status, 200, "{text}");
    assert_eq!(count(&skein, "conversations"), conversations);

    // A session's second request goes on in the session's conversation.
    let first = json!([{"role": "user", "content": "one"}]);
    let (status, text) = chat(first, &[("x-skein-session", "my session")]);
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    let reply = answer["choices"][0]["message"]["content"].clone();
    let second = json!([
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "two"}
    ]);
    let (status, text) = chat(second, &[("x-skein-session", "my session")]);
    assert_eq!(status, 200, "{text}");
    assert_eq!(count(&skein, "conversations"), conversations + 1);
    drop(server);
    let log = skein.json(&["log", "--cid", "my session"]).to_string();
    assert!(log.contains("two"), "{log}");
}

/// `skein rename CONVERSATION NEWNAME` names a conversation after the fact
/// (by id, prefix or its old name), as `--name` does at its start: the new
/// name finds it everywhere, and the store's rule holds (a name another
/// conversation has, or one that reads as an id, is refused, exit code 2,
/// and nothing changes). An unknown conversation is exit code 3; `--clear`
/// takes the name away.
#[test]
fn rename_names_a_conversation_by_the_stores_rule() {
    let skein = Cli::temp(crate::BIN);
    let first = skein.json(&["prompt", "hello"]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    skein.json(&["prompt", "--name", "taken", "other"]);

    let renamed = skein.json(&["rename", &cid[..8], "groceries"]);
    assert_eq!(renamed["id"], cid.as_str(), "{renamed}");
    assert_eq!(renamed["name"], "groceries", "{renamed}");
    let next = skein.json(&["prompt", "--cid", "groceries", "milk"]);
    assert_eq!(next["conversation"], cid.as_str());
    let said = skein.ok(&["rename", "groceries", "shopping"]);
    assert!(said.contains("now named `shopping`"), "{said}");
    assert!(said.contains("(was `groceries`)"), "{said}");

    for (args, code, why) in [
        (
            &["rename", "shopping", "taken"][..],
            2,
            "already named `taken`",
        ),
        (
            &["rename", "shopping", "cafe1234"],
            2,
            "cannot look like an id",
        ),
        (&["rename", "shopping", " "], 2, "cannot be empty"),
        (&["rename", "nosuch", "x"], 3, "skein conversations"),
        (&["rename", "shopping"], 2, "NEWNAME"),
    ] {
        let output = skein.run(args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(why),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let log = skein.json(&["log", "--cid", "shopping"]);
    assert_eq!(log["conversation"]["id"], cid.as_str(), "nothing changed");

    let cleared = skein.json(&["rename", "shopping", "--clear"]);
    assert_eq!(cleared["name"], Value::Null, "{cleared}");
    let gone = skein.run(&["log", "--cid", "shopping"]);
    assert_eq!(gone.status.code(), Some(3));
}
