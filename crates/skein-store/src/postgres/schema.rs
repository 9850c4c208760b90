/*!
The PostgreSQL schema and its versioned migrations: the port of
`crate::sqlite::schema`, version for version. `MIGRATIONS[i]` here and in
`crate::sqlite::schema` both define version `i + 1`; a unit test fails while one
backend has a version the other lacks.

Differences from SQLite, all representation only: `BYTEA` for ids and
bodies, `BIGINT` for integers, `BOOLEAN` for flags, text ids compared in the
`C` collation (so prefix ranges are byte ranges whatever the server's
locale), nodes refer to their parent by id rather than by `seq` (inserts
then need no round trip per node to learn the parent's `seq`; `seq` stays
the insertion, hence topological, order), nodes carry `blob_refs` (the
digests their body references) so a thread's blobs come back in the same
query as its nodes, and a lane is named by its first node's id rather than
its `seq` (a new lane's name is then known before its node is inserted).

The version lives in `skein_schema`, not in `meta`, because the runner must
read it before migration 1 creates anything. Each migration runs in its own
transaction under a transaction-scoped advisory lock keyed by the current
schema, so concurrent first opens from many processes migrate once.
*/

use crate::error::{Result, StoreError};
use crate::lanes::Lanes;
use deadpool_postgres::{Client, GenericClient, Transaction};
use std::future::Future;
use std::pin::Pin;

/// One step of the schema's history: SQL, or SQL followed by code (which
/// runs in the same transaction).
pub(crate) enum Migration {
    Sql(&'static str),
    SqlThen(&'static str, Fill),
    /// Migration 11's lanes, filed in Rust ([`add_lanes`]).
    Lanes,
}

/// Code a migration runs after its SQL, in its transaction.
pub(crate) type Fill =
    for<'a> fn(&'a Transaction<'a>) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

pub(crate) const MIGRATIONS: &[Migration] = &[
    // 1: the graph, bookmarks, runs and per-run tool sets.
    Migration::Sql(
        r#"
    CREATE TABLE meta (
        key   TEXT COLLATE "C" PRIMARY KEY,
        value TEXT NOT NULL
    );

    CREATE TABLE nodes (
        seq    BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        id     BYTEA PRIMARY KEY,
        parent BYTEA REFERENCES nodes(id),
        depth  BIGINT NOT NULL,
        role   SMALLINT NOT NULL,
        body   BYTEA NOT NULL,
        -- The 32-byte digests of the blobs the body references, concatenated
        -- in part order (NULL when none), so a thread loads with its blobs
        -- in one query. Derived from the body; verify never trusts it.
        blob_refs BYTEA
    );
    CREATE INDEX nodes_by_parent ON nodes(parent);

    CREATE TABLE blobs (
        digest BYTEA PRIMARY KEY,
        bytes  BYTEA NOT NULL
    );

    CREATE TABLE conversations (
        id                       TEXT COLLATE "C" PRIMARY KEY,
        name                     TEXT,
        head                     BYTEA REFERENCES nodes(id),
        forked_from_node         BYTEA,
        forked_from_conversation TEXT,
        forked_from_rerun        TEXT,
        created                  BIGINT NOT NULL,
        updated                  BIGINT NOT NULL,
        meta                     TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX conversations_by_head ON conversations(head);
    CREATE INDEX conversations_by_updated ON conversations(updated);

    CREATE TABLE runs (
        id                 TEXT COLLATE "C" PRIMARY KEY,
        conversation       TEXT,
        input_head         BYTEA,
        output_head        BYTEA,
        model              TEXT NOT NULL,
        provider           TEXT NOT NULL,
        profile            TEXT,
        backend            TEXT,
        status             TEXT NOT NULL,
        input_tokens       BIGINT,
        output_tokens      BIGINT,
        cache_read_tokens  BIGINT,
        cache_write_tokens BIGINT,
        usage_complete     BOOLEAN NOT NULL,
        started            BIGINT NOT NULL,
        finished           BIGINT,
        error              TEXT,
        annotations        TEXT NOT NULL,
        options            TEXT NOT NULL,
        relations          TEXT NOT NULL
    );
    CREATE INDEX runs_by_conversation ON runs(conversation, started);
    CREATE INDEX runs_by_output ON runs(output_head);
    CREATE INDEX runs_by_started ON runs(started);

    CREATE TABLE tools (
        hash         BYTEA PRIMARY KEY,
        name         TEXT NOT NULL,
        description  TEXT NOT NULL,
        input_schema TEXT NOT NULL
    );

    CREATE TABLE run_tools (
        run_id    TEXT COLLATE "C" NOT NULL REFERENCES runs(id),
        position  BIGINT NOT NULL,
        tool_hash BYTEA NOT NULL REFERENCES tools(hash),
        PRIMARY KEY (run_id, position)
    );
    "#,
    ),
    // 2: the exact request body of a run that came through the recording
    // proxy.
    Migration::Sql("ALTER TABLE runs ADD COLUMN request TEXT;"),
    // 3: reruns of recorded turns, and the embedding cache.
    Migration::Sql(
        r#"
    CREATE TABLE reruns (
        id              TEXT COLLATE "C" PRIMARY KEY,
        conversation    TEXT COLLATE "C" NOT NULL,
        turn            BIGINT NOT NULL,
        turn_node       BYTEA NOT NULL,
        request_head    BYTEA,
        answer_head     BYTEA,
        ablation        TEXT NOT NULL,
        samples         BIGINT NOT NULL,
        sample_runs     TEXT NOT NULL,
        baseline_runs   TEXT NOT NULL,
        verdict         TEXT,
        summary         TEXT NOT NULL,
        detail          TEXT NOT NULL DEFAULT '{}',
        created         BIGINT NOT NULL
    );
    CREATE INDEX reruns_by_conversation ON reruns(conversation, turn, created);
    CREATE INDEX reruns_by_turn_node ON reruns(turn_node);
    CREATE INDEX reruns_by_answer ON reruns(answer_head);

    CREATE TABLE embeddings (
        embedder TEXT COLLATE "C" NOT NULL,
        digest   BYTEA NOT NULL,
        vector   BYTEA NOT NULL,
        PRIMARY KEY (embedder, digest)
    );
    "#,
    ),
    // 4: nothing here: SQLite's version 4 files nodes in lanes, which came
    // to PostgreSQL with version 11.
    Migration::Sql("-- no change on PostgreSQL"),
    // 5: each run's observation events.
    Migration::Sql("ALTER TABLE runs ADD COLUMN events TEXT NOT NULL DEFAULT '[]';"),
    // 6: typed turn records, as on SQLite: finish reason, a recorded-chat
    // run's turn and step as integers (from its `recorded.step` relation),
    // conversations by the one they branched from, recorded settings
    // without their version key.
    Migration::Sql(
        r"
    ALTER TABLE runs ADD COLUMN finish_reason TEXT;
    ALTER TABLE runs ADD COLUMN turn BIGINT;
    ALTER TABLE runs ADD COLUMN step BIGINT;
    UPDATE runs SET
        turn = split_part(s.target, '.', 1)::BIGINT,
        step = split_part(s.target, '.', 2)::BIGINT
    FROM (SELECT r.id AS run, e.value ->> 'target' AS target
          FROM runs r, jsonb_array_elements(r.relations::jsonb) e
          WHERE e.value ->> 'kind' = 'recorded.step') s
    WHERE runs.id = s.run AND s.target ~ '^[0-9]+\.[0-9]+$';
    UPDATE runs SET relations = (
        SELECT COALESCE(jsonb_agg(e.value ORDER BY e.ordinality), '[]'::jsonb)::text
        FROM jsonb_array_elements(runs.relations::jsonb) WITH ORDINALITY e(value, ordinality)
        WHERE e.value ->> 'kind' NOT IN ('recorded.step', 'recorded.turn'))
    WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(runs.relations::jsonb) e
                  WHERE e.value ->> 'kind' IN ('recorded.step', 'recorded.turn'));
    CREATE INDEX conversations_by_origin ON conversations(forked_from_conversation)
        WHERE forked_from_conversation IS NOT NULL;
    ALTER TABLE conversations ADD COLUMN imported BOOLEAN NOT NULL DEFAULT FALSE;
    UPDATE conversations SET meta = (meta::jsonb #- '{recorded,version}')::text
        WHERE meta::jsonb -> 'recorded' ? 'version';
    ",
    ),
    // 7: the root of every node's and conversation's thread (the id of its
    // first node), and conversations found by it, as on SQLite (there the
    // root is the first node's `seq`).
    Migration::Sql(
        r"
    ALTER TABLE nodes ADD COLUMN root BYTEA;
    ALTER TABLE conversations ADD COLUMN root BYTEA;
    WITH RECURSIVE r(id, root) AS (
        SELECT id, id FROM nodes WHERE parent IS NULL
        UNION ALL
        SELECT n.id, r.root FROM nodes n JOIN r ON n.parent = r.id
    )
    UPDATE nodes SET root = r.root FROM r WHERE nodes.id = r.id;
    UPDATE conversations c SET root = n.root FROM nodes n WHERE n.id = c.head;
    CREATE INDEX conversations_by_root ON conversations(root, created)
        WHERE root IS NOT NULL;
    ",
    ),
    // 8: the model a client asked the recording proxy for.
    Migration::Sql("ALTER TABLE runs ADD COLUMN requested_model TEXT;"),
    // 9: the relations usage totals
    // follow, indexed by target and by run, filled from the stored runs.
    Migration::Sql(
        r#"
    CREATE TABLE run_links (
        kind   TEXT COLLATE "C" NOT NULL,
        target TEXT COLLATE "C" NOT NULL,
        run_id TEXT COLLATE "C" NOT NULL REFERENCES runs(id),
        PRIMARY KEY (kind, target, run_id)
    );
    CREATE INDEX run_links_by_run ON run_links(run_id, kind);
    INSERT INTO run_links(kind, target, run_id)
        SELECT e.value ->> 'kind', e.value ->> 'target', r.id
        FROM runs r, jsonb_array_elements(r.relations::jsonb) e
        WHERE e.value ->> 'kind'
                  IN ('continuation_of', 'associated_with', 'sequence', 'sequence_start')
          AND jsonb_typeof(e.value -> 'target') = 'string'
        ON CONFLICT DO NOTHING;
    "#,
    ),
    // 10: full-text search: each node's words as a `tsvector` (see
    // postgres/search.rs), filled from the stored nodes, then indexed.
    Migration::SqlThen("ALTER TABLE nodes ADD COLUMN search tsvector;", |tx| {
        Box::pin(async move {
            super::search::fill(tx).await?;
            tx.batch_execute("CREATE INDEX nodes_by_search ON nodes USING GIN (search);")
                .await?;
            Ok(())
        })
    }),
    // 11: lanes, as SQLite has had since its version 4, so that a thread
    // loads by range scans of `(lane, depth)` (see graph.rs); a lane is
    // named by its first node's id. Older databases are filed in Rust.
    Migration::Lanes,
    // 12: the tools each conversation's calls offered, one row per change
    // (see crate::offers), filled from the runs already stored.
    Migration::SqlThen(super::offers::CREATE_TOOL_OFFERS, |tx| {
        Box::pin(super::offers::fill_offers(tx, None))
    }),
    // 13: the tool calls each message makes, by call id (see calls.rs),
    // filled from the stored assistant messages.
    Migration::SqlThen(super::calls::CREATE_TOOL_CALLS, |tx| {
        Box::pin(super::calls::fill(tx))
    }),
    // 14: replays of recorded turns, one row per selected turn with its
    // state and its worker's claim (see crate::replays).
    Migration::Sql(
        r#"
    CREATE TABLE replays (
        id          TEXT COLLATE "C" PRIMARY KEY,
        selection   TEXT NOT NULL,
        change      TEXT NOT NULL,
        model       TEXT NOT NULL,
        settings    TEXT NOT NULL DEFAULT '{}',
        turns       BIGINT NOT NULL,
        created     BIGINT NOT NULL
    );
    CREATE TABLE replay_turns (
        replay          TEXT COLLATE "C" NOT NULL REFERENCES replays(id),
        seq             BIGINT NOT NULL,
        conversation    TEXT COLLATE "C",
        turn_node       BYTEA NOT NULL,
        request_node    BYTEA NOT NULL,
        status          TEXT NOT NULL DEFAULT 'pending',
        worker          TEXT,
        lease_until     BIGINT,
        answer_head     BYTEA,
        runs            TEXT NOT NULL DEFAULT '[]',
        decision        TEXT,
        comparator      TEXT,
        detail          TEXT NOT NULL DEFAULT '{}',
        finished        BIGINT,
        PRIMARY KEY (replay, seq)
    );
    CREATE INDEX replay_turns_open ON replay_turns(replay, status, seq);
    CREATE INDEX replay_turns_by_turn_node ON replay_turns(turn_node);
    CREATE INDEX replay_turns_by_answer ON replay_turns(answer_head);
    "#,
    ),
    // 15: the references deletion asks about (crate::forget), indexed, as
    // on SQLite.
    Migration::Sql(crate::sqlite::schema::FORGET_INDEXES),
    // 16: labels on turns (crate::labels), as on SQLite.
    Migration::Sql(
        r#"
    CREATE TABLE labels (
        name    TEXT COLLATE "C" NOT NULL,
        node    BYTEA NOT NULL,
        created BIGINT NOT NULL,
        PRIMARY KEY (name, node)
    );
    CREATE INDEX labels_by_node ON labels(node);
    CREATE INDEX replay_turns_by_conversation ON replay_turns(conversation)
        WHERE conversation IS NOT NULL;
    "#,
    ),
    // 17: deleted conversations that forks still name, as on SQLite.
    Migration::Sql(crate::sqlite::schema::DELETED_CONVERSATIONS),
    // 18: conversations found by name, as on SQLite.
    Migration::Sql(crate::sqlite::schema::NAME_INDEX),
    // 19: the model the provider says answered each run, as on SQLite.
    Migration::Sql(crate::sqlite::schema::RESPONSE_MODEL),
    // 20: the recording proxy's client of each run, and runs found by it.
    Migration::Sql(RUN_CLIENTS),
    // 21: nothing: SQLite rebuilt `runs` and `blobs` as rowid tables, while
    // PostgreSQL's heap tables keep large values out of line already.
    Migration::Sql("SELECT 1;"),
    // 22: request bodies as content-addressed pieces (crate::bodies), the
    // bodies kept whole until now moved into them.
    Migration::SqlThen(super::bodies::REQUEST_PIECES, |tx| {
        Box::pin(super::bodies::move_whole_bodies(tx))
    }),
    // 23: replay and rerun rows keep nodes, not texts (as on SQLite).
    Migration::Sql(
        r"
    UPDATE replay_turns SET detail = ((detail::jsonb) - 'original' - 'answer')::text
    WHERE (detail::jsonb) ?| array['original', 'answer'];
    UPDATE reruns SET detail = ((detail::jsonb) - 'original' - 'answers')::text
    WHERE (detail::jsonb) ?| array['original', 'answers'];
    ",
    ),
    // 24: the candidate model of each replayed turn's row (as on SQLite).
    Migration::Sql("ALTER TABLE replay_turns ADD COLUMN IF NOT EXISTS model TEXT;"),
    // 25: runs found by their input, as search asks whether only a
    // replay's runs sent a message (SQLite has had the index since 1).
    Migration::Sql(RUNS_BY_INPUT),
];

/// Migration 25: runs found by their input head (search asks whether only
/// a replay's runs sent a message).
const RUNS_BY_INPUT: &str = "CREATE INDEX IF NOT EXISTS runs_by_input ON runs(input_head);";

/// Migration 20: which client of the recording proxy made each run, and
/// runs found by it (`IF NOT EXISTS`: tests set the version back and
/// migrate again).
const RUN_CLIENTS: &str = "ALTER TABLE runs ADD COLUMN IF NOT EXISTS client TEXT;
     CREATE INDEX IF NOT EXISTS runs_by_client ON runs(client, conversation)
     WHERE client IS NOT NULL;";

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The schema version skein's bookkeeping records in the current schema, or
/// `None` when it has none (no skein tables: a new database, or another
/// application's).
pub(crate) async fn installed_version(client: &Client) -> Result<Option<i64>> {
    let present: bool = client
        .query_one(
            "SELECT to_regclass(quote_ident(current_schema()) || '.skein_schema') IS NOT NULL",
            &[],
        )
        .await?
        .get(0);
    if !present {
        return Ok(None);
    }
    Ok(Some(
        client
            .query_opt("SELECT version FROM skein_schema", &[])
            .await?
            .map_or(0, |row| row.get(0)),
    ))
}

/// How many rows a bulk write (an import) adds before its tables are
/// analyzed at once rather than when autovacuum gets to them.
pub(crate) const ANALYZE_AFTER_ROWS: usize = 1000;

/// Refresh the planner's statistics of every table in the current schema.
/// Run after migrations and bulk imports: statements prepared before then
/// are planned again with the new figures (an `ANALYZE` invalidates them),
/// so no plan made for a young, tiny table outlives its growth. A role
/// that does not own the tables only gets a warning from the server.
pub(crate) async fn analyze(client: &Client) -> Result<()> {
    let tables: Vec<String> = client
        .query(
            "SELECT quote_ident(tablename) FROM pg_tables \
             WHERE schemaname = current_schema() ORDER BY tablename",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if !tables.is_empty() {
        client
            .batch_execute(&format!("ANALYZE {}", tables.join(", ")))
            .await?;
    }
    Ok(())
}

/// Bring the database (its current schema) up to [`SCHEMA_VERSION`],
/// creating its store key on first use, and refresh its statistics if
/// anything changed.
pub(crate) async fn migrate(client: &mut Client) -> Result<()> {
    let mut migrated = false;
    for (index, migration) in MIGRATIONS.iter().enumerate() {
        let version = index as i64 + 1;
        let tx = client.transaction().await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('skein-migrate:' || current_schema()))",
            &[],
        )
        .await?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS skein_schema (version BIGINT NOT NULL)")
            .await?;
        let current: i64 = tx
            .query_opt("SELECT version FROM skein_schema", &[])
            .await?
            .map_or(0, |row| row.get(0));
        if current > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                found: current,
                supported: SCHEMA_VERSION,
            });
        }
        if current >= version {
            continue;
        }
        match migration {
            Migration::Sql(sql) => tx.batch_execute(sql).await?,
            Migration::SqlThen(sql, fill) => {
                tx.batch_execute(sql).await?;
                fill(&tx).await?;
            }
            Migration::Lanes => add_lanes(&tx).await?,
        }
        if version == 1 {
            let key = uuid::Uuid::new_v4().as_u64_pair().0;
            tx.execute(
                "INSERT INTO meta(key, value) VALUES ('store_key', $1)",
                &[&key.to_string()],
            )
            .await?;
            tx.execute("INSERT INTO skein_schema(version) VALUES (1)", &[])
                .await?;
        } else {
            tx.execute("UPDATE skein_schema SET version = $1", &[&version])
                .await?;
        }
        tx.commit().await?;
        migrated = true;
    }
    if migrated {
        analyze(client).await?;
    }
    Ok(())
}

/// Nodes filed per statement by [`add_lanes`].
const LANE_PAGE: i64 = 10_000;

/// Migration 11: add the `lane` column, file every stored node in the lane
/// it would have joined had it been inserted now (in `seq` order, by the
/// rule both backends share), a page of nodes per statement, then index
/// lanes by depth and refresh the planner's statistics for the new column.
async fn add_lanes(tx: &impl GenericClient) -> Result<()> {
    tx.batch_execute("ALTER TABLE nodes ADD COLUMN lane BYTEA")
        .await?;
    let page = tx
        .prepare("SELECT seq, id, parent, depth FROM nodes WHERE seq > $1 ORDER BY seq LIMIT $2")
        .await?;
    // The page's `seq` range keeps the update to one index range, whatever
    // the planner thinks of the array's size.
    let file = tx
        .prepare(
            "UPDATE nodes SET lane = u.lane FROM unnest($1::int8[], $2::bytea[]) AS u(seq, lane)
             WHERE nodes.seq = u.seq AND nodes.seq BETWEEN $3 AND $4",
        )
        .await?;
    let mut lanes: Lanes<Vec<u8>> = Lanes::new();
    let mut after = 0_i64;
    loop {
        let rows = tx.query(&page, &[&after, &LANE_PAGE]).await?;
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            break;
        };
        let first: i64 = first.get(0);
        after = last.get(0);
        let mut seqs = Vec::with_capacity(rows.len());
        let mut filed = Vec::with_capacity(rows.len());
        for row in &rows {
            let parent: Option<Vec<u8>> = row.get(2);
            // A parent not seen yet (a damaged database) gets the node a
            // lane of its own: always consistent, and `verify` reports the
            // damage.
            filed.push(lanes.file(row.get::<_, Vec<u8>>(1), parent.as_ref(), row.get(3)));
            seqs.push(row.get::<_, i64>(0));
        }
        tx.execute(&file, &[&seqs, &filed, &first, &after]).await?;
    }
    tx.batch_execute(
        "ALTER TABLE nodes ALTER COLUMN lane SET NOT NULL;
         CREATE UNIQUE INDEX nodes_by_lane ON nodes(lane, depth);
         ANALYZE nodes;",
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_sqlite_migration_has_a_postgres_port() {
        assert_eq!(
            super::SCHEMA_VERSION,
            crate::sqlite::schema::SCHEMA_VERSION,
            "a migration was added to one backend only: port it (see ARCHITECTURE.md, \
             'Porting a SQLite migration to PostgreSQL')"
        );
    }
}
