/*!
`verify`: recompute every node id from its parent and content, check depths
and roles, re-hash every blob and check every conversation head, and report
each problem found (it never stops at the first, and never repairs).
*/

use crate::error::Result;
use crate::graph::decode_message;
use crate::sqlite::Store;
use serde::Serialize;
use skein_core::encoding::node_id;
use skein_core::{Digest, NodeId};

/// One inconsistency `verify` found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Problem {
    /// The stored content hashes to another id: the row was altered.
    IdMismatch { id: String, computed: String },
    /// The body cannot be decoded (or names a missing blob).
    Undecodable { id: String, error: String },
    /// The depth column disagrees with the parent's depth.
    DepthMismatch {
        id: String,
        stored: i64,
        expected: i64,
    },
    /// The role column disagrees with the body.
    RoleMismatch { id: String },
    /// A blob's bytes no longer hash to its digest.
    BlobMismatch { digest: String },
    /// A conversation's head is not a stored node.
    DanglingHead { conversation: String },
}

/// What `verify` checked and found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub nodes: u64,
    pub blobs: u64,
    pub conversations: u64,
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Store {
    /// Check the whole database. Problems are reported, never repaired.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.read(|conn| {
            let mut report = VerifyReport::default();
            let mut stmt = conn.prepare(
                "SELECT n.id, p.id, n.depth, p.depth, n.role, n.body
                 FROM nodes n LEFT JOIN nodes p ON p.seq = n.parent ORDER BY n.seq",
            )?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                report.nodes += 1;
                let raw_id: Vec<u8> = row.get(0)?;
                let shown = hex(&raw_id);
                let Some(id) = NodeId::from_slice(&raw_id) else {
                    report.problems.push(Problem::Undecodable {
                        id: shown,
                        error: "id is not 32 bytes".into(),
                    });
                    continue;
                };
                let parent = row
                    .get::<_, Option<Vec<u8>>>(1)?
                    .as_deref()
                    .and_then(NodeId::from_slice);
                let depth: i64 = row.get(2)?;
                let expected_depth = row.get::<_, Option<i64>>(3)?.map_or(0, |d| d + 1);
                if depth != expected_depth {
                    report.problems.push(Problem::DepthMismatch {
                        id: id.to_hex(),
                        stored: depth,
                        expected: expected_depth,
                    });
                }
                let role: u8 = row.get(4)?;
                let body: Vec<u8> = row.get(5)?;
                match decode_message(conn, id, &body) {
                    Err(error) => report.problems.push(Problem::Undecodable {
                        id: id.to_hex(),
                        error: error.to_string(),
                    }),
                    Ok(message) => {
                        if message.role.code() != role {
                            report
                                .problems
                                .push(Problem::RoleMismatch { id: id.to_hex() });
                        }
                        let computed = node_id(parent.as_ref(), &message);
                        if computed != id {
                            report.problems.push(Problem::IdMismatch {
                                id: id.to_hex(),
                                computed: computed.to_hex(),
                            });
                        }
                    }
                }
            }
            let mut blobs = conn.prepare("SELECT digest, bytes FROM blobs")?;
            let mut rows = blobs.query([])?;
            while let Some(row) = rows.next()? {
                report.blobs += 1;
                let digest: Vec<u8> = row.get(0)?;
                let bytes: Vec<u8> = row.get(1)?;
                if Digest::of(&bytes).as_bytes().as_slice() != digest.as_slice() {
                    report.problems.push(Problem::BlobMismatch {
                        digest: hex(&digest),
                    });
                }
            }
            let mut heads = conn.prepare(
                "SELECT c.id, c.head IS NOT NULL AND n.id IS NULL
                 FROM conversations c LEFT JOIN nodes n ON n.id = c.head",
            )?;
            let mut rows = heads.query([])?;
            while let Some(row) = rows.next()? {
                report.conversations += 1;
                if row.get::<_, bool>(1)? {
                    report.problems.push(Problem::DanglingHead {
                        conversation: row.get(0)?,
                    });
                }
            }
            Ok(report)
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
