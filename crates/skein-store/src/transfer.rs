/*!
Export to JSONL and import from it.

The file is a header line, then every node in topological order (a parent
always before its children), then conversations, then runs:

```text
{"kind":"header","format":"skein-export","version":1,"encoding":1}
{"kind":"node","id":"…","parent":null,"role":"user","parts":[{"type":"text","text":"hi"}]}
{"kind":"conversation","id":"…","name":null,"head":"…",…}
{"kind":"run","id":"…","model":"echo",…}
```

Import recomputes every node id from its parent and content and checks it
against the file. The whole file is parsed and checked in one transaction: a
malformed line, an id mismatch or an unknown parent aborts the import with
an error naming the line, and nothing is imported.
*/

use crate::error::{Result, StoreError};
use crate::graph::{decode_message, insert_node, node_id};
use crate::records::{Conversation, RunRecord};
use crate::runs::insert_run;
use crate::sqlite::Store;
use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};
use skein_core::encoding::{ENCODING_VERSION, node_id as compute_id};
use skein_core::{Message, NodeId, Part, Role};
use std::io::{BufRead, Write};

const FORMAT: &str = "skein-export";
const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line {
    Header {
        format: String,
        version: u32,
        encoding: u8,
    },
    Node {
        id: NodeId,
        parent: Option<NodeId>,
        role: Role,
        parts: Vec<Part>,
    },
    Conversation(Conversation),
    Run(Box<RunRecord>),
}

/// What an import did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    pub nodes_written: usize,
    /// Nodes the database already held (equal content, equal id).
    pub nodes_present: usize,
    pub conversations: usize,
    pub runs: usize,
}

impl Store {
    /// Write the whole database as JSONL.
    pub fn export(&self, out: &mut dyn Write) -> Result<()> {
        self.read(|conn| {
            write_line(out, &Line::Header {
                format: FORMAT.into(),
                version: FORMAT_VERSION,
                encoding: ENCODING_VERSION,
            })?;
            let mut stmt = conn.prepare(
                "SELECT n.id, p.id, n.body FROM nodes n LEFT JOIN nodes p ON p.seq = n.parent ORDER BY n.seq",
            )?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let id = node_id(&row.get::<_, Vec<u8>>(0)?)?;
                let parent = row.get::<_, Option<Vec<u8>>>(1)?.as_deref().map(node_id).transpose()?;
                let message = decode_message(conn, id, &row.get::<_, Vec<u8>>(2)?)?;
                write_line(out, &Line::Node {
                    id,
                    parent,
                    role: message.role,
                    parts: message.parts,
                })?;
            }
            Ok(())
        })?;
        for conversation in self.list_conversations(usize::MAX >> 1)?.into_iter().rev() {
            write_line(out, &Line::Conversation(conversation))?;
        }
        let mut runs = self.recent_runs(usize::MAX >> 1)?;
        runs.reverse();
        for run in runs {
            write_line(out, &Line::Run(Box::new(run)))?;
        }
        out.flush()?;
        Ok(())
    }

    /// Import a JSONL export. All or nothing.
    pub fn import(&self, input: &mut dyn BufRead) -> Result<ImportReport> {
        let lines = parse_lines(input)?;
        self.write(|tx| {
            let mut report = ImportReport::default();
            for (number, line) in &lines {
                let number = *number;
                let fail = |problem: String| StoreError::Import { line: number, problem };
                match line {
                    Line::Header { .. } => {}
                    Line::Node { id, parent, role, parts } => {
                        let message = Message::new(*role, parts.clone());
                        let computed = compute_id(parent.as_ref(), &message);
                        if computed != *id {
                            return Err(fail(format!(
                                "node {} does not match its content (the content hashes to {}); \
                                 the file was altered or damaged",
                                id.short(),
                                computed.short()
                            )));
                        }
                        if crate::graph::seq_of(tx, *id)?.is_some() {
                            report.nodes_present += 1;
                            continue;
                        }
                        let parent_row = match parent {
                            None => None,
                            Some(parent) => Some(
                                tx.prepare_cached("SELECT seq, depth FROM nodes WHERE id = ?1")?
                                    .query_row([parent.as_bytes()], |row| Ok((row.get(0)?, row.get::<_, i64>(1)?)))
                                    .optional()?
                                    .ok_or_else(|| {
                                        fail(format!(
                                            "node {} names parent {}, which is neither in the database nor earlier in the file",
                                            id.short(),
                                            parent.short()
                                        ))
                                    })?,
                            ),
                        };
                        let depth = parent_row.map_or(0, |(_, depth)| depth as u64 + 1);
                        insert_node(tx, *id, parent_row.map(|(seq, _)| seq), depth, &message)?;
                        report.nodes_written += 1;
                    }
                    Line::Conversation(conversation) => {
                        let existing: Option<Option<Vec<u8>>> = tx
                            .prepare_cached("SELECT head FROM conversations WHERE id = ?1")?
                            .query_row([conversation.id.as_str()], |row| row.get(0))
                            .optional()?;
                        if let Some(head) = existing {
                            if head.as_deref().and_then(NodeId::from_slice) != conversation.head {
                                return Err(fail(format!(
                                    "conversation {} already exists here with a different head",
                                    conversation.id.short()
                                )));
                            }
                            continue;
                        }
                        let origin = conversation.origin.clone().unwrap_or_default();
                        tx.prepare_cached(
                            "INSERT INTO conversations(id, name, head, forked_from_node, forked_from_conversation,
                                 forked_from_rerun, created, updated, meta)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                        )?
                        .execute(params![
                            conversation.id.as_str(),
                            conversation.name,
                            conversation.head.as_ref().map(NodeId::as_bytes),
                            origin.node.as_ref().map(NodeId::as_bytes),
                            origin.conversation.as_ref().map(|c| c.as_str()),
                            origin.rerun,
                            conversation.created_ms,
                            conversation.updated_ms,
                            serde_json::to_string(&conversation.meta)?,
                        ])
                        .map_err(|error| fail(format!("conversation {}: {error}", conversation.id.short())))?;
                        report.conversations += 1;
                    }
                    Line::Run(run) => {
                        let exists = tx
                            .prepare_cached("SELECT 1 FROM runs WHERE id = ?1")?
                            .exists([run.id.as_str()])?;
                        if !exists {
                            insert_run(tx, run)?;
                            report.runs += 1;
                        }
                    }
                }
            }
            Ok(report)
        })
    }
}

fn parse_lines(input: &mut dyn BufRead) -> Result<Vec<(usize, Line)>> {
    let mut lines = Vec::new();
    let mut text = String::new();
    let mut number = 0;
    loop {
        text.clear();
        if input.read_line(&mut text)? == 0 {
            break;
        }
        number += 1;
        if text.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(&text).map_err(|error| StoreError::Import {
            line: number,
            problem: format!("not a valid export record: {error}"),
        })?;
        if let Line::Header {
            format,
            version,
            encoding,
        } = &line
        {
            if format != FORMAT || *version != FORMAT_VERSION || *encoding != ENCODING_VERSION {
                return Err(StoreError::Import {
                    line: number,
                    problem: format!(
                        "unsupported export ({format} version {version}, encoding {encoding}); \
                         this skein reads {FORMAT} version {FORMAT_VERSION}, encoding {ENCODING_VERSION}"
                    ),
                });
            }
        } else if lines.is_empty() {
            return Err(StoreError::Import {
                line: number,
                problem: "the file does not start with a skein export header".into(),
            });
        }
        lines.push((number, line));
    }
    if lines.is_empty() {
        return Err(StoreError::Import {
            line: 0,
            problem: "the file is empty".into(),
        });
    }
    Ok(lines)
}

fn write_line(out: &mut dyn Write, line: &Line) -> Result<()> {
    serde_json::to_writer(&mut *out, line)?;
    out.write_all(b"\n")?;
    Ok(())
}
