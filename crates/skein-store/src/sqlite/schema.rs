/*!
The SQLite schema and its versioned migrations (`PRAGMA user_version`).

Nodes carry an integer `seq` (insertion order, which is a topological
order because a node is only ever inserted after its parent) and refer to
their parent by `seq`, so walking a thread is a chain of rowid lookups. Every
other table refers to nodes by their 32-byte id.

Each node also carries the `lane` it was filed in (graph.rs explains
lanes); migration 4 assigns lanes to the nodes of an older database. Each
node and each conversation carries the `root` of its thread (the `seq` of
its first node), so the conversations that share messages with a family are
found by one index range (family.rs); migration 7 fills it in.

Each migration runs in its own `BEGIN IMMEDIATE` transaction; a database
newer than this build is refused rather than guessed at.
*/

use crate::error::{Result, StoreError};
use crate::lanes::Lanes;
use rusqlite::{Connection, TransactionBehavior, params};
use std::collections::HashMap;

/// One step of the schema's history.
enum Migration {
    Sql(&'static str),
    Code(fn(&Connection) -> Result<()>),
}

const MIGRATIONS: &[Migration] = &[
    // 1: the graph, bookmarks, runs and per-run tool sets.
    Migration::Sql(
        r"
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID;

    CREATE TABLE nodes (
        seq    INTEGER PRIMARY KEY,
        id     BLOB NOT NULL UNIQUE,
        parent INTEGER REFERENCES nodes(seq),
        depth  INTEGER NOT NULL,
        role   INTEGER NOT NULL,
        body   BLOB NOT NULL
    );
    CREATE INDEX nodes_by_parent ON nodes(parent);

    CREATE TABLE blobs (
        digest BLOB PRIMARY KEY,
        bytes  BLOB NOT NULL
    ) WITHOUT ROWID;

    CREATE TABLE conversations (
        id                       TEXT PRIMARY KEY,
        name                     TEXT,
        head                     BLOB REFERENCES nodes(id),
        forked_from_node         BLOB,
        forked_from_conversation TEXT,
        forked_from_rerun        TEXT,
        created                  INTEGER NOT NULL,
        updated                  INTEGER NOT NULL,
        meta                     TEXT NOT NULL DEFAULT '{}'
    ) WITHOUT ROWID;
    CREATE INDEX conversations_by_head ON conversations(head);
    CREATE INDEX conversations_by_updated ON conversations(updated);

    CREATE TABLE runs (
        id                 TEXT PRIMARY KEY,
        conversation       TEXT,
        input_head         BLOB,
        output_head        BLOB,
        model              TEXT NOT NULL,
        provider           TEXT NOT NULL,
        profile            TEXT,
        backend            TEXT,
        status             TEXT NOT NULL,
        input_tokens       INTEGER,
        output_tokens      INTEGER,
        cache_read_tokens  INTEGER,
        cache_write_tokens INTEGER,
        usage_complete     INTEGER NOT NULL,
        started            INTEGER NOT NULL,
        finished           INTEGER,
        error              TEXT,
        annotations        TEXT NOT NULL,
        options            TEXT NOT NULL,
        relations          TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX runs_by_conversation ON runs(conversation, started);
    CREATE INDEX runs_by_output ON runs(output_head);
    CREATE INDEX runs_by_started ON runs(started);

    CREATE TABLE tools (
        hash         BLOB PRIMARY KEY,
        name         TEXT NOT NULL,
        description  TEXT NOT NULL,
        input_schema TEXT NOT NULL
    ) WITHOUT ROWID;

    CREATE TABLE run_tools (
        run_id    TEXT NOT NULL REFERENCES runs(id),
        position  INTEGER NOT NULL,
        tool_hash BLOB NOT NULL REFERENCES tools(hash),
        PRIMARY KEY (run_id, position)
    ) WITHOUT ROWID;
    ",
    ),
    // 2: the exact request body of a run that came through the recording
    // proxy, byte for byte as the client sent it.
    Migration::Sql(
        r"
    ALTER TABLE runs ADD COLUMN request TEXT;
    ",
    ),
    // 3: reruns of recorded turns, and the embedding cache (see reruns.rs
    // and embeddings.rs).
    Migration::Sql(
        r"
    CREATE TABLE reruns (
        id              TEXT PRIMARY KEY,
        conversation    TEXT NOT NULL,
        turn            INTEGER NOT NULL,
        turn_node       BLOB NOT NULL,
        request_head    BLOB,
        answer_head     BLOB,
        ablation        TEXT NOT NULL,
        samples         INTEGER NOT NULL,
        sample_runs     TEXT NOT NULL,
        baseline_runs   TEXT NOT NULL,
        verdict         TEXT,
        summary         TEXT NOT NULL,
        detail          TEXT NOT NULL DEFAULT '{}',
        created         INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX reruns_by_conversation ON reruns(conversation, turn, created);
    CREATE INDEX reruns_by_turn_node ON reruns(turn_node);
    CREATE INDEX reruns_by_answer ON reruns(answer_head);

    CREATE TABLE embeddings (
        embedder TEXT NOT NULL,
        digest   BLOB NOT NULL,
        vector   BLOB NOT NULL,
        PRIMARY KEY (embedder, digest)
    ) WITHOUT ROWID;
    ",
    ),
    // 4: lanes, so that a thread loads by range scans (see graph.rs).
    Migration::Code(add_lanes),
    // 5: each run's observation events, so a recorded turn loaded back
    // from the store still has its evidence.
    Migration::Sql("ALTER TABLE runs ADD COLUMN events TEXT NOT NULL DEFAULT '[]';"),
    // 6: typed turn records. A run's finish reason; a recorded-chat run's
    // turn and step as integers (before, a `recorded.step` relation
    // "TURN.STEP" that readers parsed); conversations found by the one they
    // branched from (families), and marked when an import wrote them (so the
    // model files they name are never opened unasked; local to this
    // database, not exported); recorded-chat settings without the version
    // key the typed settings no longer carry.
    Migration::Sql(
        r"
    ALTER TABLE runs ADD COLUMN finish_reason TEXT;
    ALTER TABLE runs ADD COLUMN turn INTEGER;
    ALTER TABLE runs ADD COLUMN step INTEGER;
    UPDATE runs SET
        turn = CAST(substr(s.target, 1, instr(s.target, '.') - 1) AS INTEGER),
        step = CAST(substr(s.target, instr(s.target, '.') + 1) AS INTEGER)
    FROM (SELECT r.id AS run, json_extract(e.value, '$.target') AS target
          FROM runs r, json_each(r.relations) e
          WHERE json_extract(e.value, '$.kind') = 'recorded.step') s
    WHERE runs.id = s.run AND instr(s.target, '.') > 0;
    UPDATE runs SET relations = (
        SELECT json_group_array(json(e.value)) FROM json_each(runs.relations) e
        WHERE json_extract(e.value, '$.kind') NOT IN ('recorded.step', 'recorded.turn'))
    WHERE EXISTS (SELECT 1 FROM json_each(runs.relations) e
                  WHERE json_extract(e.value, '$.kind') IN ('recorded.step', 'recorded.turn'));
    CREATE INDEX conversations_by_origin ON conversations(forked_from_conversation)
        WHERE forked_from_conversation IS NOT NULL;
    ALTER TABLE conversations ADD COLUMN imported INTEGER NOT NULL DEFAULT 0;
    UPDATE conversations SET meta = json_remove(meta, '$.recorded.version')
        WHERE json_valid(meta) AND json_extract(meta, '$.recorded.version') IS NOT NULL;
    ",
    ),
    // 7: the root of every node's and conversation's thread, and
    // conversations found by it (the ones sharing messages with a family).
    Migration::Code(add_roots),
    // 8: the model a client asked the recording proxy for, beside the one
    // its model table chose.
    Migration::Sql("ALTER TABLE runs ADD COLUMN requested_model TEXT;"),
    // 9: the relations usage totals follow, indexed by target (who continues,
    // is associated with, belongs to a sequence) and by run, filled from
    // the runs already stored.
    Migration::Sql(
        r"
    CREATE TABLE run_links (
        kind   TEXT NOT NULL,
        target TEXT NOT NULL,
        run_id TEXT NOT NULL REFERENCES runs(id),
        PRIMARY KEY (kind, target, run_id)
    ) WITHOUT ROWID;
    CREATE INDEX run_links_by_run ON run_links(run_id, kind);
    INSERT INTO run_links(kind, target, run_id)
        SELECT json_extract(e.value, '$.kind'), json_extract(e.value, '$.target'), r.id
        FROM runs r,
             json_each(CASE WHEN json_valid(r.relations) THEN r.relations ELSE '[]' END) e
        WHERE json_extract(e.value, '$.kind')
                  IN ('continuation_of', 'associated_with', 'sequence', 'sequence_start')
          AND json_type(e.value, '$.target') = 'text'
        ON CONFLICT DO NOTHING;
    ",
    ),
    // 10: full-text search, an FTS5 index of every node's words, filled
    // from the stored nodes (see search.rs).
    Migration::Code(super::search::add_search),
    // 11: nothing. PostgreSQL's version 11 adds the lanes this backend has
    // had since version 4.
    Migration::Sql(""),
    // 12: the tools each conversation's calls offered, one row per change
    // (see crate::offers), filled from the runs already stored.
    Migration::Code(super::offers::add_tool_offers),
    // 13: the tool calls each message makes, by call id (see calls.rs),
    // filled from the stored assistant messages.
    Migration::Code(super::calls::add_tool_calls),
    // 14: replays of recorded turns, one row per selected turn with its
    // state and its worker's claim (see crate::replays).
    Migration::Sql(
        r"
    CREATE TABLE replays (
        id          TEXT PRIMARY KEY,
        selection   TEXT NOT NULL,
        change      TEXT NOT NULL,
        model       TEXT NOT NULL,
        settings    TEXT NOT NULL DEFAULT '{}',
        turns       INTEGER NOT NULL,
        created     INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE replay_turns (
        replay          TEXT NOT NULL REFERENCES replays(id),
        seq             INTEGER NOT NULL,
        conversation    TEXT,
        turn_node       BLOB NOT NULL,
        request_node    BLOB NOT NULL,
        status          TEXT NOT NULL DEFAULT 'pending',
        worker          TEXT,
        lease_until     INTEGER,
        answer_head     BLOB,
        runs            TEXT NOT NULL DEFAULT '[]',
        decision        TEXT,
        comparator      TEXT,
        detail          TEXT NOT NULL DEFAULT '{}',
        finished        INTEGER,
        PRIMARY KEY (replay, seq)
    ) WITHOUT ROWID;
    CREATE INDEX replay_turns_open ON replay_turns(replay, status, seq);
    CREATE INDEX replay_turns_by_turn_node ON replay_turns(turn_node);
    CREATE INDEX replay_turns_by_answer ON replay_turns(answer_head);
    ",
    ),
    // 15: the references deletion asks about (crate::forget), indexed: which
    // conversations were forked at a node, which runs took a node as their
    // input, which reruns sent a request ending there.
    Migration::Sql(FORGET_INDEXES),
    // 16: labels on turns (crate::labels): a name on a node, which keeps
    // the node (and its thread) from deletion; replayed turns found by the
    // conversation of their original (deleting it deletes them).
    Migration::Sql(
        r"
    CREATE TABLE labels (
        name    TEXT NOT NULL,
        node    BLOB NOT NULL,
        created INTEGER NOT NULL,
        PRIMARY KEY (name, node)
    ) WITHOUT ROWID;
    CREATE INDEX labels_by_node ON labels(node);
    CREATE INDEX replay_turns_by_conversation ON replay_turns(conversation)
        WHERE conversation IS NOT NULL;
    ",
    ),
    // 17: the conversations a deletion removed that remaining forks still
    // name as their origin, so `verify` tells them from dangling origins.
    Migration::Sql(DELETED_CONVERSATIONS),
    // 18: conversations found by name (`--cid NAME`, a proxy session, a
    // taken-name check) without reading every conversation.
    Migration::Sql(NAME_INDEX),
    // 19: the model the provider says answered each run.
    Migration::Sql(RESPONSE_MODEL),
    // 20: which client of the recording proxy made each run (per-client
    // retention and selections), and runs found by it.
    Migration::Code(add_run_clients),
    // 21: runs and blobs as rowid tables (see `into_rowid_table`).
    Migration::Code(rowid_runs_and_blobs),
    // 22: request bodies as content-addressed pieces (see `request_pieces`).
    Migration::Code(request_pieces),
    // 23: replay and rerun rows keep nodes, not texts.
    Migration::Sql(ROWS_WITHOUT_TEXTS),
    // 24: the candidate model of each replayed turn's row, in a replay
    // that compares several models (crate::replays).
    Migration::Code(add_replay_turn_models),
    // 25: runs found by their input (PostgreSQL's step; SQLite has had the
    // index since 1, so this only keeps the versions in step).
    Migration::Sql(RUNS_BY_INPUT),
];

/// Migration 25: runs found by their input head (search asks whether only
/// a replay's runs sent a message).
const RUNS_BY_INPUT: &str = "CREATE INDEX IF NOT EXISTS runs_by_input ON runs(input_head);";

/// Migration 24: replayed turns' rows keyed by model too, in a replay that
/// compares several candidates (NULL: the replay's one model), unless a
/// test that set the version back left the column there (SQLite has no
/// `ADD COLUMN IF NOT EXISTS`).
fn add_replay_turn_models(conn: &Connection) -> Result<()> {
    let has_model: bool = conn.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('replay_turns') WHERE name = 'model'",
        [],
        |row| row.get(0),
    )?;
    if !has_model {
        conn.execute_batch("ALTER TABLE replay_turns ADD COLUMN model TEXT;")?;
    }
    Ok(())
}

/// Migration 23: the texts replayed turns and reruns kept in their detail
/// (the original answer, the replayed one, a rerun's answers) removed:
/// their rows name the nodes, whose texts the reports read, so erasing a
/// message reaches every report of it (DESIGN invariant 13).
const ROWS_WITHOUT_TEXTS: &str = r"
    UPDATE replay_turns SET detail = json_remove(detail, '$.original', '$.answer')
    WHERE json_valid(detail)
      AND (json_type(detail, '$.original') IS NOT NULL OR json_type(detail, '$.answer') IS NOT NULL);
    UPDATE reruns SET detail = json_remove(detail, '$.original', '$.answers')
    WHERE json_valid(detail)
      AND (json_type(detail, '$.original') IS NOT NULL OR json_type(detail, '$.answers') IS NOT NULL);
";

/// Migration 22's tables: a body's pieces (crate::bodies), each referring
/// to its parent by id; `bytes` is NULL once erased, `erased` then the
/// erased bytes' digest. A run keeps its body's last piece, digest and
/// length.
const REQUEST_PIECES: &str = r"
    CREATE TABLE IF NOT EXISTS request_pieces (
        seq    INTEGER PRIMARY KEY,
        id     BLOB NOT NULL UNIQUE,
        parent BLOB,
        bytes  BLOB,
        erased BLOB,
        len    INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS request_pieces_by_parent ON request_pieces(parent)
        WHERE parent IS NOT NULL;
";

/// Migration 22: every run's kept request body (whole in `runs.request`
/// until now, so a re-sent history was stored again with every request)
/// moved into content-addressed pieces, and the column dropped: nothing
/// outside the graph holds a body whole any more (DESIGN invariant 13).
/// The file keeps its size until `skein gc --compact`.
fn request_pieces(conn: &Connection) -> Result<()> {
    conn.execute_batch(REQUEST_PIECES)?;
    let has = |column: &str| -> Result<bool> {
        Ok(conn.query_row(
            "SELECT count(*) > 0 FROM pragma_table_info('runs') WHERE name = ?1",
            [column],
            |row| row.get(0),
        )?)
    };
    for column in [
        "request_piece BLOB",
        "request_digest BLOB",
        "request_len INTEGER",
    ] {
        let name = column.split(' ').next().unwrap_or(column);
        if !has(name)? {
            conn.execute_batch(&format!("ALTER TABLE runs ADD COLUMN {column};"))?;
        }
    }
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS runs_by_request_piece ON runs(request_piece)
             WHERE request_piece IS NOT NULL;",
    )?;
    if has("request")? {
        // Oldest first, so a history's first body lays down the pieces
        // the later ones share.
        let kept: Vec<i64> = conn
            .prepare("SELECT rowid FROM runs WHERE request IS NOT NULL ORDER BY started, rowid")?
            .query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut read = conn.prepare("SELECT request FROM runs WHERE rowid = ?1")?;
        let mut update = conn.prepare(
            "UPDATE runs SET request_piece = ?2, request_digest = ?3, request_len = ?4
             WHERE rowid = ?1",
        )?;
        for rowid in kept {
            let body: String = read.query_row([rowid], |row| row.get(0))?;
            let head = super::bodies::store(conn, &crate::bodies::cut(body.as_bytes(), &[]))?;
            update.execute(params![
                rowid,
                head.last.map(|last| last.as_bytes().to_vec()),
                head.digest.as_bytes(),
                head.len as i64
            ])?;
        }
        drop((read, update));
        conn.execute_batch("ALTER TABLE runs DROP COLUMN request;")?;
    }
    Ok(())
}

/// Migration 21: `runs` (whose rows carry a proxied request's whole body)
/// and `blobs` (whole attachments) rebuilt as rowid tables. A `WITHOUT
/// ROWID` table keeps each row inside its primary key's b-tree, and SQLite
/// reads a key's whole overflowing payload to compare it, so each insert
/// and each lookup read the full rows it passed on the way down: a proxied
/// turn at depth 800 read several other requests' bodies to store its own.
fn rowid_runs_and_blobs(conn: &Connection) -> Result<()> {
    into_rowid_table(conn, "runs")?;
    into_rowid_table(conn, "blobs")
}

/// Rebuild `table` as a rowid table with the same columns, rows and
/// indexes, unless it is one already (tests set versions back). The
/// caller has foreign keys off (SQLite's procedure for a changed table:
/// `run_tools` refers to `runs`); every row is copied as it is, so every
/// reference holds as it did.
fn into_rowid_table(conn: &Connection, table: &str) -> Result<()> {
    let definition: String = conn.query_row(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [table],
        |row| row.get(0),
    )?;
    // The column list: from the first parenthesis (the name before it may
    // be quoted) up to the `WITHOUT ROWID` that ends the definition.
    let Some(columns) = definition
        .trim_end()
        .strip_suffix("WITHOUT ROWID")
        .and_then(|rest| rest.find('(').map(|start| &rest[start..]))
    else {
        return Ok(());
    };
    let indexes: Vec<String> = conn
        .prepare(
            "SELECT sql FROM sqlite_schema
             WHERE type = 'index' AND tbl_name = ?1 AND sql IS NOT NULL",
        )?
        .query_map([table], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let rebuilt = format!("{table}_rebuilt");
    conn.execute_batch(&format!(
        "CREATE TABLE {rebuilt} {columns};
         INSERT INTO {rebuilt} SELECT * FROM {table};
         DROP TABLE {table};
         ALTER TABLE {rebuilt} RENAME TO {table};"
    ))?;
    for index in indexes {
        conn.execute_batch(&index)?;
    }
    Ok(())
}

/// Migration 19, the same SQL on both backends.
pub(crate) const RESPONSE_MODEL: &str = "ALTER TABLE runs ADD COLUMN response_model TEXT;";

/// Migration 20's index.
const RUN_CLIENTS_INDEX: &str = "CREATE INDEX IF NOT EXISTS runs_by_client
     ON runs(client, conversation) WHERE client IS NOT NULL;";

/// Migration 20: the `client` column of runs (unless a test that set the
/// version back left it there: SQLite has no `ADD COLUMN IF NOT EXISTS`),
/// and its index.
fn add_run_clients(conn: &Connection) -> Result<()> {
    let has_client: bool = conn.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('runs') WHERE name = 'client'",
        [],
        |row| row.get(0),
    )?;
    if !has_client {
        conn.execute_batch("ALTER TABLE runs ADD COLUMN client TEXT;")?;
    }
    conn.execute_batch(RUN_CLIENTS_INDEX)?;
    Ok(())
}

/// Migration 18, the same SQL on both backends.
pub(crate) const NAME_INDEX: &str = "CREATE INDEX IF NOT EXISTS conversations_by_name
     ON conversations(name) WHERE name IS NOT NULL;";

/// Migration 17, the same SQL on both backends: a deleted conversation's
/// id and when it was deleted, kept while a remaining conversation names
/// it as its origin (crate::forget). Origins already missing when it is
/// created were deleted by the `skein delete` of schema 15, which kept no
/// record: they are recorded with the time 0 ("before the record").
pub(crate) const DELETED_CONVERSATIONS: &str = r"
    CREATE TABLE IF NOT EXISTS deleted_conversations (
        id      TEXT PRIMARY KEY,
        deleted BIGINT NOT NULL
    );
    INSERT INTO deleted_conversations(id, deleted)
    SELECT DISTINCT c.forked_from_conversation, 0 FROM conversations c
    WHERE c.forked_from_conversation IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM conversations o WHERE o.id = c.forked_from_conversation)
      AND NOT EXISTS (SELECT 1 FROM deleted_conversations d
                      WHERE d.id = c.forked_from_conversation);
";

/// Migration 13, the same SQL on both backends. `IF NOT EXISTS`: tests of
/// older databases set the version back and migrate again.
pub(crate) const FORGET_INDEXES: &str = r"
    CREATE INDEX IF NOT EXISTS conversations_by_origin_node ON conversations(forked_from_node)
        WHERE forked_from_node IS NOT NULL;
    CREATE INDEX IF NOT EXISTS runs_by_input ON runs(input_head);
    CREATE INDEX IF NOT EXISTS reruns_by_request ON reruns(request_head);
";

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Bring the database up to [`SCHEMA_VERSION`], creating its store key on
/// first use.
pub fn migrate(conn: &mut Connection) -> Result<()> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        // Current: no write transaction, so a database that cannot be
        // written still opens.
        return Ok(());
    }
    // A migration may rebuild a table that others refer to, which SQLite
    // allows only with foreign keys off (and not changeable inside a
    // transaction); each such migration checks the references itself.
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    let migrated = run_migrations(conn);
    conn.pragma_update(None, "foreign_keys", "ON")?;
    migrated
}

/// Every migration newer than the database's version, each in its own
/// transaction.
fn run_migrations(conn: &mut Connection) -> Result<()> {
    for (index, migration) in MIGRATIONS.iter().enumerate() {
        let version = index as i64 + 1;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Another process may have migrated while we waited for the lock.
        let current: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
        if current >= version {
            continue;
        }
        match migration {
            Migration::Sql(sql) => tx.execute_batch(sql)?,
            Migration::Code(step) => step(&tx)?,
        }
        if version == 1 {
            let key = uuid::Uuid::new_v4().as_u64_pair().0;
            tx.execute(
                "INSERT INTO meta(key, value) VALUES ('store_key', ?1)",
                [key.to_string()],
            )?;
        }
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
    }
    Ok(())
}

/// Migration 4: add the `lane` column, file every stored node in the lane
/// it would have joined had it been inserted now (in `seq` order), then
/// index lanes by depth.
fn add_lanes(conn: &Connection) -> Result<()> {
    conn.execute_batch("ALTER TABLE nodes ADD COLUMN lane INTEGER")?;
    let mut lanes = Lanes::new();
    let mut nodes = conn.prepare("SELECT seq, parent, depth FROM nodes ORDER BY seq")?;
    let mut file = conn.prepare("UPDATE nodes SET lane = ?1 WHERE seq = ?2")?;
    let mut rows = nodes.query([])?;
    while let Some(row) = rows.next()? {
        let (seq, parent, depth): (i64, Option<i64>, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        // A parent not seen yet (a damaged database) gets the node a lane of
        // its own: always consistent, and `verify` reports the damage.
        let lane = lanes.file(seq, parent.as_ref(), depth);
        file.execute(params![lane, seq])?;
    }
    conn.execute_batch("CREATE UNIQUE INDEX nodes_by_lane ON nodes(lane, depth)")?;
    Ok(())
}

/// Migration 7: add the `root` columns and fill them. Every node of a lane
/// has the root of the lane's first node, which is its own seq when it has
/// no parent and otherwise the root of its parent's (older) lane; so one
/// pass over the lanes' first nodes in `seq` order and one indexed update
/// per lane fill every node. A node whose lane is damaged keeps no root
/// (`verify` reports it). Conversations take their head's.
fn add_roots(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "ALTER TABLE nodes ADD COLUMN root INTEGER;
         ALTER TABLE conversations ADD COLUMN root INTEGER;",
    )?;
    let mut lane_root: HashMap<i64, i64> = HashMap::new();
    let mut starts = conn.prepare(
        "SELECT n.lane, n.parent, p.lane FROM nodes n LEFT JOIN nodes p ON p.seq = n.parent
         WHERE n.lane = n.seq ORDER BY n.seq",
    )?;
    let mut file = conn.prepare("UPDATE nodes SET root = ?1 WHERE lane = ?2")?;
    let mut rows = starts.query([])?;
    while let Some(row) = rows.next()? {
        let (lane, parent, parent_lane): (i64, Option<i64>, Option<i64>) =
            (row.get(0)?, row.get(1)?, row.get(2)?);
        let root = match parent {
            None => Some(lane),
            Some(_) => parent_lane.and_then(|parent_lane| lane_root.get(&parent_lane).copied()),
        };
        if let Some(root) = root {
            lane_root.insert(lane, root);
            file.execute(params![root, lane])?;
        }
    }
    conn.execute_batch(
        "UPDATE conversations SET root = (SELECT n.root FROM nodes n WHERE n.id = conversations.head)
             WHERE head IS NOT NULL;
         CREATE INDEX conversations_by_root ON conversations(root, created)
             WHERE root IS NOT NULL;",
    )?;
    Ok(())
}
