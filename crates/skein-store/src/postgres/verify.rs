/*!
`verify` on PostgreSQL: streams nodes (in pages, by `seq`), blobs,
conversations and runs (in pages, by id) through the checks shared with
SQLite (crate::verify::VerifyReport).
*/

use super::PgStore;
use super::graph::{decode, fetch_blobs};
use super::transfer::PAGE;
use crate::error::Result;
use crate::verify::{
    CONVERSATIONS, MISSING_LABEL_NODES, MISSING_ORIGINS, MISSING_REPLAY_NODES, MISSING_TOOLS,
    NodeRow, RUNS, Verify, VerifyReport,
};

/// Blobs read per query (they can be large).
const BLOB_PAGE: i64 = 100;

impl Verify for PgStore {
    fn verify(&self) -> Result<VerifyReport> {
        let mut report = VerifyReport::default();
        let mut after = 0_i64;
        loop {
            let (rows, blobs) = self.read(async |client| {
                let statement = client
                    .prepare_cached(
                        // A node either starts its lane (named by its own
                        // id) or continues its parent's; its root is its
                        // parent's, or itself.
                        "SELECT n.seq, n.id, n.parent, n.depth, p.depth, n.role, n.body,
                                n.root IS DISTINCT FROM
                                    (CASE WHEN n.parent IS NULL THEN n.id ELSE p.root END),
                                n.lane <> n.id AND n.lane IS DISTINCT FROM p.lane
                         FROM nodes n LEFT JOIN nodes p ON p.id = n.parent
                         WHERE n.seq > $1 ORDER BY n.seq LIMIT $2",
                    )
                    .await?;
                let rows = client.query(&statement, &[&after, &PAGE]).await?;
                let blobs =
                    fetch_blobs(client, rows.iter().map(|row| row.get::<_, &[u8]>(6))).await?;
                Ok((rows, blobs))
            })?;
            let Some(last) = rows.last() else {
                break;
            };
            after = last.get(0);
            for row in &rows {
                if row.get::<_, bool>(7) {
                    report.wrong_root(row.get(1));
                }
                if row.get::<_, bool>(8) {
                    report.wrong_lane(row.get(1));
                }
                report.check_node(
                    NodeRow {
                        id: row.get(1),
                        parent: row.get(2),
                        depth: row.get(3),
                        parent_depth: row.get(4),
                        role: i64::from(row.get::<_, i16>(5)),
                    },
                    |id| decode(id, row.get(6), &blobs),
                );
            }
        }
        let mut after: Vec<u8> = Vec::new();
        loop {
            let rows = self.read(async |client| {
                let statement = client
                    .prepare_cached(
                        "SELECT digest, bytes FROM blobs WHERE digest > $1 ORDER BY digest LIMIT $2",
                    )
                    .await?;
                Ok(client.query(&statement, &[&after, &BLOB_PAGE]).await?)
            })?;
            let Some(last) = rows.last() else {
                break;
            };
            after = last.get(0);
            for row in &rows {
                report.check_blob(row.get(0), row.get(1));
            }
        }
        let conversations =
            self.read(async |client| Ok(client.query(CONVERSATIONS, &[]).await?))?;
        for row in &conversations {
            report.check_conversation(row.get(0), row.get(1), row.get(2), row.get(3));
        }
        let origins = self.read(async |client| Ok(client.query(MISSING_ORIGINS, &[]).await?))?;
        for row in &origins {
            report.check_origin(row.get(0), row.get(1), row.get(2));
        }
        let mut after = String::new();
        loop {
            let rows = self.read(async |client| {
                let statement = client
                    .prepare_cached(&format!("{RUNS} WHERE r.id > $1 ORDER BY r.id LIMIT $2"))
                    .await?;
                Ok(client.query(&statement, &[&after, &PAGE]).await?)
            })?;
            let Some(last) = rows.last() else {
                break;
            };
            after = last.get(0);
            for row in &rows {
                report.check_run(row.get(0), row.get(1), row.get(2), row.get(3));
            }
        }
        let mut after: Vec<u8> = Vec::new();
        loop {
            let rows = self.read(async |client| {
                let statement = client
                    .prepare_cached(
                        "SELECT p.id, p.parent IS NOT NULL, q.id, p.bytes, p.erased
                         FROM request_pieces p LEFT JOIN request_pieces q ON q.id = p.parent
                         WHERE p.id > $1 ORDER BY p.id LIMIT $2",
                    )
                    .await?;
                Ok(client.query(&statement, &[&after, &BLOB_PAGE]).await?)
            })?;
            let Some(last) = rows.last() else {
                break;
            };
            after = last.get(0);
            for row in &rows {
                let parent = row
                    .get::<_, bool>(1)
                    .then(|| row.get::<_, Option<&[u8]>>(2));
                report.check_piece(row.get(0), parent, row.get(3), row.get(4));
            }
        }
        let bodies = self.read(async |client| {
            Ok(client
                .query(
                    "SELECT r.id FROM runs r WHERE r.request_piece IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM request_pieces p WHERE p.id = r.request_piece)",
                    &[],
                )
                .await?)
        })?;
        for row in &bodies {
            report.missing_body(row.get(0));
        }
        // Each body put together, as a reader would: O(the bodies' bytes),
        // which a check of every recorded request may cost.
        let runs = self.read(async |client| {
            Ok(client
                .query(
                    "SELECT r.id, r.request_piece, r.request_digest, r.request_len FROM runs r
                     WHERE r.request_digest IS NOT NULL
                       AND (r.request_piece IS NULL
                            OR EXISTS (SELECT 1 FROM request_pieces p WHERE p.id = r.request_piece))
                     ORDER BY r.id",
                    &[],
                )
                .await?)
        })?;
        for row in &runs {
            let run: String = row.get(0);
            let body = match crate::bodies::digest_of(row.get(2)) {
                Ok(digest) => self.read(async |client| {
                    super::bodies::load(client, &run, row.get(1), &digest, row.get(3)).await
                }),
                Err(error) => Err(error),
            };
            report.check_body(run, body);
        }
        let tools = self.read(async |client| Ok(client.query(MISSING_TOOLS, &[]).await?))?;
        for row in &tools {
            report.missing_tool(row.get(0), row.get(1));
        }
        let replays = self.read(async |client| {
            let nodes = client.query(MISSING_REPLAY_NODES, &[]).await?;
            let runs = client
                .query(
                    "SELECT t.replay, t.seq, j.value FROM replay_turns t,
                         jsonb_array_elements_text(t.runs::jsonb) AS j(value)
                     WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = j.value)
                     ORDER BY 1, 2, 3",
                    &[],
                )
                .await?;
            let labels = client.query(MISSING_LABEL_NODES, &[]).await?;
            Ok((nodes, runs, labels))
        })?;
        let (nodes, runs, labels) = replays;
        for row in &nodes {
            report.missing_replay_node(row.get(0), row.get(1), row.get(2), row.get(3));
        }
        for row in &runs {
            report.missing_replay_run(row.get(0), row.get(1), row.get(2));
        }
        for row in &labels {
            report.missing_label_node(row.get(0), row.get(1));
        }
        Ok(report)
    }
}
