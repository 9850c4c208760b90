//! Request bodies as content-addressed pieces of skeletons that refer to
//! the graph's messages (DESIGN invariant 13), on both backends: a proxied
//! conversation that re-sends its whole history stores each body's new
//! envelope only (its texts live in the graph), and every body reads back
//! byte for byte; erasing a message erases the bodies that carried it and no other;
//! deleting runs removes the pieces only they held; a changed piece is
//! found by `verify` and refused on read; bodies kept whole by schema 21
//! move into pieces; an export carries each piece once (a version 4 file's
//! whole bodies are cut again on import).

use crate::common::{Backend, TempStore};
use skein_core::{Message, NodeId, Thread};
use skein_store::{
    ConversationId, NewConversation, RunId, RunRecord, Selection, Store, Target, TurnCommit,
};
use std::io::BufReader;

for_each_backend!(
    a_resent_history_stores_what_is_new_and_reads_back_byte_for_byte,
    erasing_a_message_erases_the_bodies_that_carried_it_and_no_other,
    deleting_runs_removes_the_pieces_only_they_held,
    a_changed_piece_is_found_by_verify_and_refused_on_read,
    bodies_kept_whole_by_schema_21_move_into_pieces,
    an_export_carries_each_piece_once_and_imports_byte_for_byte,
    a_version_4_export_with_whole_bodies_still_imports,
    a_damaged_piece_line_fails_the_import,
    failed_first_turns_go_by_client_and_age_with_what_only_they_held,
);

#[test]
fn a_body_costs_the_same_statements_and_rows_at_any_depth() {
    // SQLite's meter counts statements and rows (PostgreSQL has none).
    let db = TempStore::new(Backend::Sqlite);
    let store = &db.store;
    let meter = store.meter().expect("a SQLite meter");
    let mut costs = Vec::new();
    for (name, depth) in [("shallow", 10), ("deep", 400)] {
        let recorded = record(store, name, depth, None);
        let before = meter.read();
        let (run, body) = record_next(store, &recorded, depth + 1);
        costs.push(meter.read() - before);
        let back = store.request_body(&run).unwrap().expect("a kept body");
        assert_eq!(back.whole(), Some(body.as_str()));
    }
    // `record_next` loads the thread first (one row per message); the
    // turn's own writes, the body's included, cost the same.
    let (shallow, deep) = (costs[0], costs[1]);
    assert_eq!(deep.statements, shallow.statements, "{shallow} -> {deep}");
    assert_eq!(
        deep.rows - shallow.rows,
        2 * (400 - 10),
        "{shallow} -> {deep}"
    );
}

/// A message of about 600 bytes of varied words (as prose is: a text that
/// repeats one short phrase gives content-defined cuts nothing to cut at).
fn text(role: &str, i: usize, marker: &str) -> String {
    const WORDS: [&str; 16] = [
        "river", "stone", "amber", "quiet", "north", "lamp", "orchard", "signal", "copper",
        "meadow", "harbor", "violet", "timber", "echo", "saffron", "glacier",
    ];
    let mut state = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ role.len() as u64;
    let mut words = format!("{role} {i} {marker}");
    while words.len() < 600 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        words.push(' ');
        words.push_str(WORDS[(state >> 60) as usize]);
    }
    words
}

/// A proxied conversation: `requests` chat-completions requests, each
/// re-sending the whole history, recorded as turns. The runs, oldest first,
/// with the bodies they sent, and each request's last message.
struct Recorded {
    conversation: ConversationId,
    runs: Vec<(RunId, String)>,
    heads: Vec<NodeId>,
}

fn record(store: &Store, name: &str, requests: usize, marker_at: Option<usize>) -> Recorded {
    let mut history = History {
        thread: Thread::new().push(Message::system("You are terse.")),
        wire: vec![r#"{"role":"system","content":"You are terse."}"#.to_string()],
        conversation: None,
        head: None,
    };
    let mut recorded = Recorded {
        conversation: ConversationId(String::new()),
        runs: Vec::new(),
        heads: Vec::new(),
    };
    for i in 0..requests {
        let marker = if marker_at == Some(i) {
            "MARKER-4417"
        } else {
            ""
        };
        let sent = history.send(store, name, i, marker);
        recorded.heads.push(sent.input);
        recorded.runs.push((sent.run, sent.body));
    }
    recorded.conversation = history.conversation.expect("at least one request");
    recorded
}

/// A conversation as the client and the store each have it.
struct History {
    thread: Thread,
    /// Its messages as the client encodes them.
    wire: Vec<String>,
    conversation: Option<ConversationId>,
    head: Option<NodeId>,
}

/// One request recorded: its run and body, and its last message.
struct Sent {
    run: RunId,
    body: String,
    input: NodeId,
}

impl History {
    /// The stored conversation `id`, as a client re-sending it would encode it.
    fn of(store: &Store, id: &ConversationId) -> History {
        let conversation = store.conversation(id).unwrap();
        let thread = store.load_thread(conversation.head.unwrap()).unwrap();
        let wire = thread
            .messages()
            .iter()
            .map(|message| {
                let role = match message.role {
                    skein_core::Role::System => "system",
                    skein_core::Role::User => "user",
                    _ => "assistant",
                };
                format!(
                    r#"{{"role":"{role}","content":"{}"}}"#,
                    message.joined_text()
                )
            })
            .collect();
        History {
            thread,
            wire,
            conversation: Some(id.clone()),
            head: conversation.head,
        }
    }

    /// Question `i` (with `marker` in it) and its answer, sent with the
    /// whole history and recorded as a turn (of a new conversation named
    /// `name` the first time).
    fn send(&mut self, store: &Store, name: &str, i: usize, marker: &str) -> Sent {
        let question = text("question", i, marker);
        let answer = text("answer", i, "");
        self.wire
            .push(format!(r#"{{"role":"user","content":"{question}"}}"#));
        let body = format!(
            r#"{{"model":"gpt-4o-mini","messages":[{}],"stream":false,"temperature":0}}"#,
            self.wire.join(",")
        );
        self.thread = self.thread.push(Message::user(question));
        let input = self.thread.head_id().expect("a question");
        self.thread = self.thread.push(Message::assistant(answer.clone()));
        self.wire
            .push(format!(r#"{{"role":"assistant","content":"{answer}"}}"#));
        let mut run = RunRecord::new("echo", "echo");
        run.input_head = Some(input);
        run.output_head = self.thread.head_id();
        run.request = Some(body.clone());
        let runs = std::slice::from_ref(&run);
        let turn = match &self.conversation {
            None => TurnCommit {
                target: Target::New(Box::new(NewConversation {
                    name: Some(name.into()),
                    ..NewConversation::default()
                })),
                thread: Some(&self.thread),
                runs,
            },
            Some(id) => TurnCommit::continuing(id, self.head, &self.thread, runs),
        };
        let committed = store.commit_turn(&turn).unwrap();
        self.conversation = Some(committed.conversation.clone().expect("a conversation"));
        self.head = committed.head;
        Sent {
            run: run.id,
            body,
            input,
        }
    }
}

fn piece_bytes(db: &TempStore) -> i64 {
    db.store
        .debug_query_i64("SELECT CAST(COALESCE(sum(len), 0) AS BIGINT) FROM request_pieces")
        .unwrap()
}

fn a_resent_history_stores_what_is_new_and_reads_back_byte_for_byte(backend: Backend) {
    let db = TempStore::new(backend);
    let requests = 200;
    let mut added = Vec::new();
    let mut before = 0;
    let store = &db.store;
    // Recorded one request at a time, to see what each one added.
    let mut recorded = record(store, "first", 1, None);
    added.push(piece_bytes(&db) - before);
    before = piece_bytes(&db);
    for n in 2..=requests {
        // The same conversation re-sent with one more exchange: record
        // only the last request of a fresh history of n requests.
        let again = record_next(store, &recorded, n);
        recorded.runs.push(again);
        added.push(piece_bytes(&db) - before);
        before = piece_bytes(&db);
    }
    let total_sent: usize = recorded.runs.iter().map(|(_, body)| body.len()).sum();
    let unique = 2 * requests * text("question", 100, "").len();
    let stored = piece_bytes(&db) as usize;
    // The messages live in the graph only: a body keeps references to
    // them, so each request adds its envelope, two references and the
    // piece it re-cuts (never a text, never the history), flat in depth.
    for (depth, bytes) in added.iter().enumerate().skip(1) {
        assert!(*bytes < 1_024, "request {depth} added {bytes} bytes");
    }
    let late: i64 = added[190..200].iter().sum();
    let early: i64 = added[10..20].iter().sum();
    assert!(late < 2 * early + 1_024, "late {late} vs early {early}");
    assert!(
        stored < requests * 600,
        "{stored} bytes of pieces for {unique} unique ({total_sent} sent)"
    );
    let question = text("question", 150, "");
    let holding = store.places_holding(&question).unwrap();
    assert!(
        holding.iter().all(|place| place.table != "request_pieces"),
        "{holding:?}"
    );
    for (run, body) in &recorded.runs {
        let back = store.request_body(run).unwrap().expect("a kept body");
        assert_eq!(back.whole(), Some(body.as_str()));
    }
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(report.body_pieces > 0);
}

/// Record the `n`th request of `recorded`'s conversation (its history
/// loaded back, so the body re-sends every earlier exchange).
fn record_next(store: &Store, recorded: &Recorded, n: usize) -> (RunId, String) {
    let sent = History::of(store, &recorded.conversation).send(store, "", n - 1, "");
    (sent.run, sent.body)
}

fn erasing_a_message_erases_the_bodies_that_carried_it_and_no_other(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let recorded = record(store, "main", 30, Some(20));
    // Another conversation that began alike but never carried the marker.
    let other = record(store, "other", 25, None);
    let marked = recorded.heads[20];
    let erasures = || db.reopen().erasures().unwrap();
    assert_eq!(erasures(), 0);
    let redacted = store.redact(marked, "alice", "a card number").unwrap();
    // Counted where every process sees it (a server drops its caches).
    assert_eq!(erasures(), 1);
    assert!(redacted.body_pieces_erased > 0);
    for (at, (run, body)) in recorded.runs.iter().enumerate() {
        let back = store.request_body(run).unwrap().expect("a kept body");
        if at < 20 {
            assert_eq!(back.whole(), Some(body.as_str()), "request {at}");
        } else {
            assert_eq!(back.whole(), None, "request {at}");
            assert!(!back.display().contains("MARKER-4417"), "request {at}");
            assert!(!back.erased().is_empty());
            assert_eq!(back.len(), body.len());
        }
    }
    for (run, body) in &other.runs {
        let back = store.request_body(run).unwrap().expect("a kept body");
        assert_eq!(back.whole(), Some(body.as_str()));
    }
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(report.body_pieces_erased > 0);
}

fn deleting_runs_removes_the_pieces_only_they_held(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let kept = record(store, "kept", 12, None);
    let alone = piece_bytes(&db);
    // Begins like `kept` (its first requests' bodies are the same bytes),
    // then goes on longer.
    let doomed = record(store, "doomed", 20, None);
    assert!(piece_bytes(&db) > alone);
    let forgotten = store
        .forget(
            &Selection::Conversations(vec![doomed.conversation.clone()]),
            false,
        )
        .unwrap();
    assert!(forgotten.body_pieces > 0);
    assert_eq!(
        piece_bytes(&db),
        alone,
        "exactly what only the deleted runs held"
    );
    for (run, body) in &kept.runs {
        let back = store.request_body(run).unwrap().expect("a kept body");
        assert_eq!(back.whole(), Some(body.as_str()));
    }
    store
        .forget(
            &Selection::Conversations(vec![kept.conversation.clone()]),
            false,
        )
        .unwrap();
    assert_eq!(db.count("request_pieces"), 0);
    assert!(store.verify().unwrap().is_ok());
}

fn a_changed_piece_is_found_by_verify_and_refused_on_read(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let recorded = record(store, "main", 3, None);
    let changed = store
        .debug_execute(&format!(
            "UPDATE request_pieces SET bytes = {} WHERE len > 100 AND parent IS NOT NULL",
            db.bytes_literal(&[b'x'; 101])
        ))
        .unwrap();
    assert!(changed > 0);
    let report = store.verify().unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|problem| matches!(problem, skein_store::Problem::PieceMismatch { .. })),
        "{:?}",
        report.problems
    );
    let (run, _) = recorded.runs.last().unwrap();
    assert!(store.request_body(run).is_err());

    // A body whose run records another length than its pieces and nodes
    // give: verify puts every body together and names the run.
    let db = TempStore::new(backend);
    let recorded = record(&db.store, "main", 3, None);
    let (run, _) = &recorded.runs[1];
    db.store
        .debug_execute(&format!(
            "UPDATE runs SET request_len = request_len + 1 WHERE id = '{}'",
            run.as_str()
        ))
        .unwrap();
    let report = db.store.verify().unwrap();
    assert_eq!(report.request_bodies, 3);
    assert!(
        matches!(
            report.problems.as_slice(),
            [skein_store::Problem::BodyUnreadable { run: named, .. }] if named == run.as_str()
        ),
        "{:?}",
        report.problems
    );
}

fn bodies_kept_whole_by_schema_21_move_into_pieces(backend: Backend) {
    let db = TempStore::new(backend);
    let recorded = record(&db.store, "main", 8, None);
    // Back to schema 21: each body whole in `runs.request`, no pieces.
    let store = &db.store;
    store
        .debug_execute("ALTER TABLE runs ADD COLUMN request TEXT")
        .unwrap();
    for (run, body) in &recorded.runs {
        store
            .debug_execute(&format!(
                "UPDATE runs SET request = '{body}', request_piece = NULL,
                     request_digest = NULL, request_len = NULL WHERE id = '{}'",
                run.as_str()
            ))
            .unwrap();
    }
    store.debug_execute("DELETE FROM request_pieces").unwrap();
    db.set_schema_version(21);
    let reopened = db.reopen();
    for (run, body) in &recorded.runs {
        let back = reopened.request_body(run).unwrap().expect("a kept body");
        assert_eq!(back.whole(), Some(body.as_str()));
    }
    let whole: usize = recorded.runs.iter().map(|(_, body)| body.len()).sum();
    assert!(
        (piece_bytes(&db) as usize) < whole / 2,
        "shared pieces, once"
    );
    assert!(
        reopened
            .debug_execute("UPDATE runs SET request = NULL")
            .is_err(),
        "the whole-body column is gone"
    );
    assert!(reopened.verify().unwrap().is_ok());

    // Moved as they were, the pieces hold every message again; compacting
    // cuts each body against its thread, so they hold the envelope only.
    let moved = piece_bytes(&db);
    let mut seen = Vec::new();
    let recut = reopened
        .compact_bodies(&mut |done, total| seen.push((done, total)))
        .unwrap();
    assert_eq!((recut.bodies, recut.rewritten, recut.erased), (8, 8, 0));
    assert!(recut.pieces_released > 0);
    assert_eq!(seen.last(), Some(&(8, 8)));
    assert!(
        (piece_bytes(&db) as usize) < moved as usize / 3,
        "{} bytes of pieces, {moved} before",
        piece_bytes(&db)
    );
    for (run, body) in &recorded.runs {
        let back = reopened.request_body(run).unwrap().expect("a kept body");
        assert_eq!(back.whole(), Some(body.as_str()));
    }
    assert!(reopened.verify().unwrap().is_ok());
    let again = reopened.compact_bodies(&mut |_, _| {}).unwrap();
    assert_eq!(
        (again.rewritten, again.pieces_released),
        (0, 0),
        "idempotent"
    );
}

fn an_export_carries_each_piece_once_and_imports_byte_for_byte(backend: Backend) {
    let db = TempStore::new(backend);
    let recorded = record(&db.store, "main", 30, None);
    // A message erased: its bodies' pieces go out erased, and come back so.
    db.store
        .redact(recorded.heads[25], "alice", "a test")
        .unwrap();
    let mut exported = Vec::new();
    db.store.export(&mut exported).unwrap();
    let sent: usize = recorded.runs.iter().map(|(_, body)| body.len()).sum();
    assert!(
        exported.len() < sent / 4,
        "an export of {} bytes for {sent} bytes of bodies",
        exported.len()
    );
    let fresh = TempStore::new(backend);
    let report = fresh
        .store
        .import(&mut BufReader::new(exported.as_slice()))
        .unwrap();
    assert!(report.request_pieces > 0);
    for (run, _) in &recorded.runs {
        let before = db.store.request_body(run).unwrap().expect("a kept body");
        let after = fresh.store.request_body(run).unwrap().expect("a kept body");
        assert_eq!(after, before);
    }
    assert!(
        fresh
            .store
            .request_body(&recorded.runs[0].0)
            .unwrap()
            .unwrap()
            .whole()
            .is_some()
    );
    assert_eq!(piece_bytes(&fresh), piece_bytes(&db));
    assert!(fresh.store.verify().unwrap().is_ok());
}

/// A version 4 file carries each body whole in its run's `request`: an
/// import cuts it into pieces that refer to the file's nodes.
fn a_version_4_export_with_whole_bodies_still_imports(backend: Backend) {
    let db = TempStore::new(backend);
    let recorded = record(&db.store, "main", 10, None);
    let mut exported = Vec::new();
    db.store.export(&mut exported).unwrap();
    let bodies: std::collections::HashMap<String, &String> = recorded
        .runs
        .iter()
        .map(|(run, body)| (run.as_str().to_string(), body))
        .collect();
    let mut version_4 = String::new();
    for line in String::from_utf8(exported).unwrap().lines() {
        let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
        match value["kind"].as_str().unwrap() {
            "header" => value["version"] = 4.into(),
            "run" => {
                let body = bodies[value["id"].as_str().unwrap()];
                value["request"] = body.as_str().into();
            }
            "request_piece" | "run_body" => continue,
            _ => {}
        }
        version_4.push_str(&value.to_string());
        version_4.push('\n');
    }
    let fresh = TempStore::new(backend);
    fresh
        .store
        .import(&mut BufReader::new(version_4.as_bytes()))
        .unwrap();
    for (run, body) in &recorded.runs {
        let back = fresh.store.request_body(run).unwrap().expect("a kept body");
        assert_eq!(back.whole(), Some(body.as_str()));
    }
    assert_eq!(
        piece_bytes(&fresh),
        piece_bytes(&db),
        "the same pieces, once"
    );
    assert!(fresh.store.verify().unwrap().is_ok());
}

/// A piece line altered, or one whose parent is nowhere, fails the import
/// with its line named, and nothing is imported.
fn a_damaged_piece_line_fails_the_import(backend: Backend) {
    let db = TempStore::new(backend);
    record(&db.store, "main", 4, None);
    let mut exported = Vec::new();
    db.store.export(&mut exported).unwrap();
    let text = String::from_utf8(exported).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let first_piece = lines
        .iter()
        .position(|line| line.contains("\"kind\":\"request_piece\""))
        .unwrap();
    let mut altered: Vec<String> = lines.iter().map(|line| line.to_string()).collect();
    let mut piece: serde_json::Value = serde_json::from_str(lines[first_piece]).unwrap();
    piece["len"] = 1.into();
    altered[first_piece] = piece.to_string();
    let mut orphaned: Vec<String> = lines.iter().map(|line| line.to_string()).collect();
    orphaned.remove(first_piece);
    for (file, expected) in [(altered, "piece"), (orphaned, "neither in the database")] {
        let fresh = TempStore::new(backend);
        let error = fresh
            .store
            .import(&mut BufReader::new(file.join("\n").as_bytes()))
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{error}");
        assert_eq!(fresh.count("runs"), 0, "{error}");
    }
}

/// A failed first turn: its message and its run, which no conversation
/// holds, with the proxy's body and client.
fn failed_first_turn(store: &Store, text: &str, client: &str) -> RunId {
    let thread = Thread::new().push(Message::user(text));
    let mut run = RunRecord::new("echo", "echo");
    run.status = skein_store::RunStatus::Failed;
    run.input_head = thread.head_id();
    run.client = Some(client.into());
    run.request = Some(format!(
        r#"{{"messages":[{{"role":"user","content":"{text}"}}]}}"#
    ));
    store
        .commit_turn(&TurnCommit {
            target: Target::Detached,
            thread: Some(&thread),
            runs: std::slice::from_ref(&run),
        })
        .unwrap();
    run.id
}

fn failed_first_turns_go_by_client_and_age_with_what_only_they_held(backend: Backend) {
    use skein_store::Filter;
    let db = TempStore::new(backend);
    let store = &db.store;
    let kept = record(store, "kept", 2, None);
    let bot = failed_first_turn(store, "the bot's secret", "bot");
    let other = failed_first_turn(store, "another client's", "other");
    let nodes = db.count("nodes");
    let forgotten = store
        .forget(&Selection::Matching(Filter::default().client("bot")), false)
        .unwrap();
    assert_eq!((forgotten.runs, forgotten.unowned_runs), (1, 1));
    assert!(forgotten.body_pieces > 0);
    assert_eq!(
        forgotten.messages, 1,
        "its message, which nothing else held"
    );
    assert_eq!(db.count("nodes"), nodes - 1);
    assert!(store.run_record(&bot).is_err());
    assert!(store.run_record(&other).is_ok());
    // By age: what retention's `older_than` selects.
    let later = skein_core::now_ms() + 1;
    let forgotten = store
        .forget(
            &Selection::Matching(Filter::default().updated_before_ms(later)),
            true,
        )
        .unwrap();
    assert_eq!(forgotten.unowned_runs, 1, "a dry run plans it");
    assert!(store.run_record(&other).is_ok());
    store
        .forget(
            &Selection::Matching(Filter::default().updated_before_ms(later)),
            false,
        )
        .unwrap();
    assert!(store.run_record(&other).is_err());
    assert!(
        store.request_body(&kept.runs[0].0).is_err(),
        "deleted with its conversation"
    );
    assert_eq!(db.count("runs"), 0);
    assert_eq!(db.count("request_pieces"), 0);
    assert!(store.verify().unwrap().is_ok());
}
