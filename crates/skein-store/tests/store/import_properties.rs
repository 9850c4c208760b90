/*!
Property tests of JSONL import, the path by which files from elsewhere
enter a database:

- random conversations (every part kind, payloads on both sides of the
  blob threshold, forks sharing prefixes) export, import into an empty
  database and export again to the same bytes;
- a valid export damaged at random (a byte changed, the file cut short, a
  line dropped or repeated) and arbitrary bytes never panic the importer:
  it either succeeds and `verify` passes, or fails with a typed error and
  imports nothing.

Failures are not persisted: copy the minimal input proptest prints into a
test in `tests/transfer.rs`.
*/

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use skein_core::{Attachment, Message, Part, Role, Thread, ToolCall, ToolResult};
use skein_store::{NewConversation, Store, StoreError, TurnCommit};

/// `cases` per property, or `PROPTEST_CASES` for a longer run.
fn config(cases: u32) -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(cases),
        failure_persistence: None,
        ..Config::default()
    }
}

fn payload() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "\\PC{0,24}",
        1 => (0usize..3, "[a-z]{1,4}").prop_map(|(k, s)| s.repeat(4096 / s.len() + k)),
    ]
}

fn part() -> impl Strategy<Value = Part> {
    prop_oneof![
        payload().prop_map(Part::text),
        ("[a-z]{1,8}", "[a-z_]{1,8}", payload()).prop_map(|(id, name, arguments)| {
            Part::ToolCall(ToolCall {
                id,
                name,
                arguments,
            })
        }),
        ("[a-z]{1,8}", payload(), any::<bool>()).prop_map(|(call_id, content, is_error)| {
            Part::ToolResult(ToolResult {
                call_id,
                content,
                is_error,
            })
        }),
        (proptest::collection::vec(any::<u8>(), 0..64), 0usize..2).prop_map(|(mut data, big)| {
            data.resize(data.len() + big * 4096, 7);
            Part::Attachment(Attachment {
                media_type: "image/png".into(),
                data,
            })
        }),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (
        prop_oneof![
            Just(Role::System),
            Just(Role::User),
            Just(Role::Assistant),
            Just(Role::Tool)
        ],
        proptest::collection::vec(part(), 0..3),
    )
        .prop_map(|(role, parts)| Message::new(role, parts))
}

/// A conversation to create: optionally a fork of an earlier one (which,
/// and at which node), then its new messages.
type Spec = (Option<(Index, Index)>, Vec<Message>);

fn conversations() -> impl Strategy<Value = Vec<Spec>> {
    proptest::collection::vec(
        (
            proptest::option::of((any::<Index>(), any::<Index>())),
            proptest::collection::vec(message(), 1..5),
        ),
        1..4,
    )
}

fn populate(store: &Store, spec: &[Spec]) {
    let mut threads: Vec<Thread> = Vec::new();
    for (fork, messages) in spec {
        let mut thread = match fork {
            Some((which, at)) if !threads.is_empty() => {
                let origin = &threads[which.index(threads.len())];
                let nodes = origin.nodes();
                origin.at(nodes[at.index(nodes.len())].id()).unwrap()
            }
            _ => Thread::new(),
        };
        for message in messages {
            thread = thread.push(message.clone());
        }
        let conversation = store
            .create_conversation(NewConversation::default())
            .unwrap();
        store
            .commit_turn(&TurnCommit::continuing(
                &conversation.id,
                None,
                &thread,
                &[],
            ))
            .unwrap();
        threads.push(thread);
    }
}

fn export(store: &Store) -> Vec<u8> {
    let mut out = Vec::new();
    store.export(&mut out).unwrap();
    out
}

fn fresh() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("skein.db")).unwrap();
    (dir, store)
}

fn rows(store: &Store) -> i64 {
    store
        .raw_connection()
        .unwrap()
        .query_row(
            "SELECT (SELECT count(*) FROM nodes) + (SELECT count(*) FROM conversations) \
             + (SELECT count(*) FROM runs) + (SELECT count(*) FROM blobs)",
            [],
            |row| row.get(0),
        )
        .unwrap()
}

/// Import `bytes` into an empty database: success leaves a database that
/// verifies; failure is typed and leaves it empty.
fn import_is_all_or_nothing(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (_dir, store) = fresh();
    match store.import(&mut &bytes[..]) {
        Ok(_) => prop_assert!(store.verify().unwrap().is_ok()),
        Err(error) => {
            prop_assert!(
                matches!(
                    error,
                    StoreError::Import { .. } | StoreError::Io(_) | StoreError::Json(_)
                ),
                "untyped failure: {error:?}"
            );
            prop_assert_eq!(rows(&store), 0, "a failed import wrote rows: {}", error);
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Damage {
    Byte(Index, u8),
    Truncate(Index),
    DropLine(Index),
    RepeatLine(Index),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Damage::Byte(at, byte)),
        any::<Index>().prop_map(Damage::Truncate),
        any::<Index>().prop_map(Damage::DropLine),
        any::<Index>().prop_map(Damage::RepeatLine),
    ]
}

fn apply(bytes: &[u8], damage: &Damage) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = bytes
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    match damage {
        Damage::Byte(at, byte) => {
            let mut out = bytes.to_vec();
            let at = at.index(out.len());
            out[at] = *byte;
            return out;
        }
        Damage::Truncate(at) => return bytes[..at.index(bytes.len())].to_vec(),
        Damage::DropLine(at) => {
            lines.remove(at.index(lines.len()));
        }
        Damage::RepeatLine(at) => {
            let at = at.index(lines.len());
            lines.insert(at, lines[at].clone());
        }
    }
    lines.concat()
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn exports_round_trip_through_import(spec in conversations()) {
        let (_a, source) = fresh();
        populate(&source, &spec);
        let exported = export(&source);
        let (_b, target) = fresh();
        target.import(&mut &exported[..]).unwrap();
        prop_assert!(target.verify().unwrap().is_ok());
        prop_assert_eq!(String::from_utf8(export(&target)).unwrap(), String::from_utf8(exported).unwrap());
    }

    #[test]
    fn a_damaged_export_imports_whole_or_not_at_all(spec in conversations(), damage in damage()) {
        let (_a, source) = fresh();
        populate(&source, &spec);
        import_is_all_or_nothing(&apply(&export(&source), &damage))?;
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn arbitrary_bytes_never_panic_the_importer(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256),
            proptest::collection::vec(
                prop_oneof![
                    Just("{\"kind\":\"header\",\"format\":\"skein-export\",\"version\":1,\"encoding\":1}\n".to_string()),
                    Just("{\"kind\":\"node\",\"id\":\"".to_string()),
                    Just("{\"kind\":\"conversation\",".to_string()),
                    Just("{\"kind\":\"run\",".to_string()),
                    "[a-z0-9\":,{}\\[\\] ]{0,30}",
                    Just("\n".to_string()),
                ],
                0..20,
            ).prop_map(|pieces| pieces.concat().into_bytes()),
        ],
    ) {
        import_is_all_or_nothing(&bytes)?;
    }
}
