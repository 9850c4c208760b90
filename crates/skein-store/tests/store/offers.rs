//! What a conversation's calls offered (`tool_offers`: one row per change of
//! a tool's schema, at the depth of the reply whose call changed it), kept
//! by each turn's transaction, rebuilt from the stored runs by the
//! migration that added it and by imports, and read up to a depth.

use crate::common::{Backend, TempStore};
use skein_core::{Message, RunRecord, Thread, ToolSpec};
use skein_store::{ConversationId, NewConversation, ToolOffer, TurnCommit};

fn tool(name: &str, property: &str) -> ToolSpec {
    ToolSpec::new(
        name,
        format!("tool {name}"),
        serde_json::json!({"type": "object", "properties": {property: {"type": "string"}}}),
    )
}

/// Turns of `conversation` (from its empty start), one per tool set: the
/// thread after them.
fn turns(db: &TempStore, conversation: &ConversationId, tool_sets: &[Vec<ToolSpec>]) -> Thread {
    let mut thread = Thread::new();
    for (turn, tools) in tool_sets.iter().enumerate() {
        let from = thread.head_id();
        thread = thread
            .push(Message::user(format!("question {turn}")))
            .push(Message::assistant(format!("answer {turn}")));
        let mut run = RunRecord::new("echo", "echo");
        run.output_head = thread.head_id();
        run.tools = tools.clone();
        db.store
            .commit_turn(&TurnCommit::continuing(
                conversation,
                from,
                &thread,
                std::slice::from_ref(&run),
            ))
            .unwrap();
    }
    thread
}

fn offer(depth: u64, tool: &ToolSpec) -> ToolOffer {
    ToolOffer {
        depth,
        name: tool.name.clone(),
        schema: tool.schema_hash(),
    }
}

/// `a` offered four times (its schema changing once, then back), `b` once:
/// four rows.
fn offered(db: &TempStore) -> (ConversationId, Vec<ToolOffer>) {
    let conversation = db
        .store
        .create_conversation(NewConversation::default())
        .unwrap()
        .id;
    let (a, a2, b) = (tool("a", "x"), tool("a", "y"), tool("b", "x"));
    turns(
        db,
        &conversation,
        &[
            vec![a.clone()],
            vec![a.clone(), b.clone()],
            vec![],
            vec![a2.clone(), b.clone()],
            vec![a.clone()],
        ],
    );
    let expected = vec![offer(1, &a), offer(3, &b), offer(7, &a2), offer(9, &a)];
    (conversation, expected)
}

fn a_turn_records_each_change_of_a_tools_schema_once(backend: Backend) {
    let db = TempStore::new(backend);
    let (conversation, expected) = offered(&db);
    assert_eq!(db.store.tool_offers(&conversation, None).unwrap(), expected);
    assert_eq!(
        db.store.tool_offers(&conversation, Some(7)).unwrap(),
        expected[..3],
        "up to a depth"
    );
    assert_eq!(
        db.store.tool_offers(&conversation, Some(0)).unwrap(),
        [],
        "before any call"
    );
}

fn a_database_from_before_tool_offers_gets_them_from_its_runs_on_open(backend: Backend) {
    let db = TempStore::new(backend);
    let (conversation, expected) = offered(&db);
    db.undo_schemas_from_11();
    db.set_schema_version(10);
    let reopened = db.reopen();
    assert_eq!(reopened.tool_offers(&conversation, None).unwrap(), expected);
}

fn an_import_brings_the_offers_of_the_runs_it_writes(backend: Backend) {
    let db = TempStore::new(backend);
    let (conversation, expected) = offered(&db);
    let mut export = Vec::new();
    db.store.export(&mut export).unwrap();
    let other = TempStore::new(backend);
    other.store.import(&mut export.as_slice()).unwrap();
    assert_eq!(
        other.store.tool_offers(&conversation, None).unwrap(),
        expected
    );
}

for_each_backend!(
    a_turn_records_each_change_of_a_tools_schema_once,
    a_database_from_before_tool_offers_gets_them_from_its_runs_on_open,
    an_import_brings_the_offers_of_the_runs_it_writes,
);
