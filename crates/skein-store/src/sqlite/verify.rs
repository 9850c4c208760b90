/*!
`verify` on SQLite: streams every node, blob, conversation and run row
through the checks crate::verify shares with PostgreSQL.
*/

use super::SqliteStore;
use super::graph::decode_message;
use crate::error::Result;
use crate::verify::{
    CONVERSATIONS, MISSING_LABEL_NODES, MISSING_ORIGINS, MISSING_REPLAY_NODES, MISSING_TOOLS,
    NodeRow, RUNS, Verify, VerifyReport,
};

impl Verify for SqliteStore {
    /// Check the whole database. Problems are reported, never repaired.
    fn verify(&self) -> Result<VerifyReport> {
        self.read(|conn| {
            let mut report = VerifyReport::default();
            // A node either starts its lane (numbered by its own seq) or
            // continues its parent's; its root is its parent's, or itself.
            let mut stmt = conn.prepare(
                "SELECT n.id, p.id, n.depth, p.depth, n.role, n.body,
                        n.lane IS NULL OR (n.lane != n.seq AND n.lane IS NOT p.lane),
                        n.root IS NOT (CASE WHEN n.parent IS NULL THEN n.seq ELSE p.root END)
                 FROM nodes n LEFT JOIN nodes p ON p.seq = n.parent ORDER BY n.seq",
            )?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let id: Vec<u8> = row.get(0)?;
                let parent: Option<Vec<u8>> = row.get(1)?;
                let body: Vec<u8> = row.get(5)?;
                if row.get::<_, bool>(6)? {
                    report.wrong_lane(&id);
                }
                if row.get::<_, bool>(7)? {
                    report.wrong_root(&id);
                }
                report.check_node(
                    NodeRow {
                        id: &id,
                        parent: parent.as_deref(),
                        depth: row.get(2)?,
                        parent_depth: row.get(3)?,
                        role: row.get(4)?,
                    },
                    |id| decode_message(conn, id, &body),
                );
            }
            let mut blobs = conn.prepare("SELECT digest, bytes FROM blobs")?;
            let mut rows = blobs.query([])?;
            while let Some(row) = rows.next()? {
                let digest: Vec<u8> = row.get(0)?;
                let bytes: Vec<u8> = row.get(1)?;
                report.check_blob(&digest, &bytes);
            }
            let mut conversations = conn.prepare(CONVERSATIONS)?;
            let mut rows = conversations.query([])?;
            while let Some(row) = rows.next()? {
                let origin: Option<Vec<u8>> = row.get(2)?;
                report.check_conversation(row.get(0)?, row.get(1)?, origin.as_deref(), row.get(3)?);
            }
            let mut origins = conn.prepare(MISSING_ORIGINS)?;
            let mut rows = origins.query([])?;
            while let Some(row) = rows.next()? {
                report.check_origin(row.get(0)?, row.get(1)?, row.get(2)?);
            }
            let mut runs = conn.prepare(&format!("{RUNS} ORDER BY r.id"))?;
            let mut rows = runs.query([])?;
            while let Some(row) = rows.next()? {
                let input: Option<Vec<u8>> = row.get(2)?;
                let output: Option<Vec<u8>> = row.get(3)?;
                report.check_run(
                    row.get(0)?,
                    row.get(1)?,
                    input.as_deref(),
                    output.as_deref(),
                );
            }
            let mut pieces = conn.prepare(
                "SELECT p.id, p.parent IS NOT NULL, q.id, p.bytes, p.erased
                 FROM request_pieces p LEFT JOIN request_pieces q ON q.id = p.parent
                 ORDER BY p.seq",
            )?;
            let mut rows = pieces.query([])?;
            while let Some(row) = rows.next()? {
                let id: Vec<u8> = row.get(0)?;
                let parent: Option<Vec<u8>> = row.get(2)?;
                let parent = row.get::<_, bool>(1)?.then_some(parent.as_deref());
                let bytes: Option<Vec<u8>> = row.get(3)?;
                let erased: Option<Vec<u8>> = row.get(4)?;
                report.check_piece(&id, parent, bytes.as_deref(), erased.as_deref());
            }
            let mut bodies = conn.prepare(
                "SELECT r.id FROM runs r WHERE r.request_piece IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM request_pieces p WHERE p.id = r.request_piece)",
            )?;
            let mut rows = bodies.query([])?;
            while let Some(row) = rows.next()? {
                report.missing_body(row.get(0)?);
            }
            // Each body put together, as a reader would: O(the bodies'
            // bytes), which a check of every recorded request may cost.
            let mut bodies = conn.prepare(
                "SELECT r.id, r.request_piece, r.request_digest, r.request_len FROM runs r
                 WHERE r.request_digest IS NOT NULL
                   AND (r.request_piece IS NULL
                        OR EXISTS (SELECT 1 FROM request_pieces p WHERE p.id = r.request_piece))",
            )?;
            let mut rows = bodies.query([])?;
            while let Some(row) = rows.next()? {
                let run: String = row.get(0)?;
                let body = crate::bodies::digest_of(row.get(2)?).and_then(|digest| {
                    super::bodies::load(conn, &run, row.get(1)?, &digest, row.get(3)?)
                });
                report.check_body(run, body);
            }
            let mut tools = conn.prepare(MISSING_TOOLS)?;
            let mut rows = tools.query([])?;
            while let Some(row) = rows.next()? {
                let tool: Vec<u8> = row.get(1)?;
                report.missing_tool(row.get(0)?, &tool);
            }
            let mut nodes = conn.prepare(MISSING_REPLAY_NODES)?;
            let mut rows = nodes.query([])?;
            while let Some(row) = rows.next()? {
                let node: Vec<u8> = row.get(3)?;
                report.missing_replay_node(row.get(0)?, row.get(1)?, row.get(2)?, &node);
            }
            let mut runs = conn.prepare(
                "SELECT t.replay, t.seq, j.value FROM replay_turns t, json_each(t.runs) j
                 WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = j.value)
                 ORDER BY 1, 2, 3",
            )?;
            let mut rows = runs.query([])?;
            while let Some(row) = rows.next()? {
                report.missing_replay_run(row.get(0)?, row.get(1)?, row.get(2)?);
            }
            let mut labels = conn.prepare(MISSING_LABEL_NODES)?;
            let mut rows = labels.query([])?;
            while let Some(row) = rows.next()? {
                let node: Vec<u8> = row.get(1)?;
                report.missing_label_node(row.get(0)?, &node);
            }
            Ok(report)
        })
    }
}
