/*!
The JSON the web view's API returns: one serde struct per shape, built from
the store's records. These are the API's contract with the page (and with
anyone scripting against `/api`), so they are spelled out here instead of
serialising store records as they happen to be.
*/

use serde::Serialize;
use skein::core::price::{Cost, PriceTable};
use skein::core::usage::{RunFigures, Totals};
use skein::core::{FinishReason, Part, Role, ToolSpec};
use skein::store::{
    ConversationId, ConversationRecord, Origin, Relation, ReplayId, ReplayTurn, RunRecord,
    RunStatus,
};
use skein::{Message, NodeId};

/// `GET /api/info`.
#[derive(Debug, Serialize)]
pub struct Info {
    pub version: &'static str,
    pub database: String,
}

/// `GET /api/conversations`.
#[derive(Debug, Serialize)]
pub struct ConversationList {
    /// Most recently updated first.
    pub conversations: Vec<ConversationView>,
    pub limit: usize,
    /// More conversations follow this page.
    pub truncated: bool,
    /// The address of the next page (`/api/conversations?limit=N&after=…`),
    /// `None` on the last page.
    pub next: Option<String>,
}

/// A conversation bookmark.
#[derive(Clone, Debug, Serialize)]
pub struct ConversationView {
    pub id: ConversationId,
    /// The 12-digit prefix the CLI prints.
    pub short: String,
    pub name: Option<String>,
    /// What to call it when it has no name: its first prompt, shortened.
    pub title: Option<String>,
    pub head: Option<NodeId>,
    /// Messages in its thread.
    pub len: u64,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub origin: Option<Origin>,
    /// The model it was last used with, from its settings.
    pub model: Option<String>,
    /// One line of its last message (only in listings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

impl From<&ConversationRecord> for ConversationView {
    fn from(conversation: &ConversationRecord) -> ConversationView {
        ConversationView {
            id: conversation.id.clone(),
            short: conversation.id.short().to_string(),
            name: conversation.name.clone(),
            title: conversation.settings.title.clone(),
            head: conversation.head,
            len: conversation.len,
            created_ms: conversation.created_ms,
            updated_ms: conversation.updated_ms,
            origin: conversation.origin.clone(),
            model: conversation.settings.model.clone(),
            preview: None,
        }
    }
}

/// `GET /api/conversations/{id}/family`: the node graph of a conversation
/// family, cut into branches.
#[derive(Debug, Serialize)]
pub struct Family {
    /// The conversation the family was asked for.
    pub focus: ConversationId,
    /// The first node of each tree (several when a member's history does
    /// not share the first message, as a rerun that removed part of it).
    pub roots: Vec<NodeId>,
    /// Every node shown, parents before children.
    pub nodes: Vec<FamilyNode>,
    /// The members: conversations joined to the focus by origin (forks,
    /// reply branches, forks from reruns), the first of them first.
    pub conversations: Vec<ConversationView>,
    /// The family has more members than listed.
    pub more_conversations: bool,
    /// Conversations that are no members but share messages with one by
    /// content (the same first messages asked again on a deterministic
    /// model, a proxy client's edited history), newest first.
    pub shares: Vec<ConversationView>,
    /// More conversations share messages than listed.
    pub more_shares: bool,
    /// The root branch first, then each branch after the branch it leaves.
    pub branches: Vec<Branch>,
    /// At most this many nodes are shown.
    pub limit: usize,
    /// The largest `limit` the server accepts.
    pub max_limit: usize,
    /// Part of the family is not shown: it has more nodes than `limit`.
    /// The focused conversation's latest messages come first; a node whose
    /// `parent` is set but not shown starts where earlier messages are cut.
    pub truncated: bool,
    /// The usage and cost of every run of the family (shown or not),
    /// shared work counted once.
    pub usage: TotalsView,
}

/// Usage totals over runs, with their cache hit rate and cost.
#[derive(Debug, Serialize)]
pub struct TotalsView {
    pub runs: usize,
    pub failed: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cache_hit_rate: Option<f64>,
    /// Runs whose token figures are missing or partial.
    pub incomplete_runs: usize,
    pub cost: Cost,
}

impl TotalsView {
    pub fn priced(totals: &Totals, prices: &PriceTable) -> TotalsView {
        TotalsView {
            runs: totals.runs.len(),
            failed: totals.failed.len(),
            input_tokens: totals.input_tokens.value,
            output_tokens: totals.output_tokens.value,
            cache_read_tokens: totals.cache_read_tokens.value,
            cache_write_tokens: totals.cache_write_tokens.value,
            cache_hit_rate: totals.cache_hit_rate(),
            incomplete_runs: totals.incomplete_runs().len(),
            cost: prices.cost(totals),
        }
    }
}

/// A node in a family tree, without its full content.
#[derive(Debug, Serialize)]
pub struct FamilyNode {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub depth: u64,
    pub role: Role,
    pub preview: String,
    /// The id of the branch the node lies on.
    pub branch: String,
    /// Conversations whose head is this node (members and sharers).
    pub heads: Vec<ConversationId>,
}

/// What a branch is, relative to the branch it leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BranchKind {
    /// The family's first line, from a root node.
    Root,
    /// A conversation forked from a node of the branch it leaves.
    Fork,
    /// A line no member or sharer points at (a turn no conversation kept,
    /// or cut off by the limit).
    Continuation,
    /// A rerun's request without its ablated parts, and its answers; or a
    /// conversation forked from a rerun's answer.
    Rerun,
    /// A conversation that is no member but shares the messages before it
    /// by content: not a continuation of the branch it leaves.
    Shares,
    /// A replayed turn's answer (`skein replay`), on the request it sent.
    Replay,
}

/// A run of nodes from a branch point (or a root) to the last node before
/// the line ends or splits in a way that belongs to another branch.
#[derive(Debug, Serialize)]
pub struct Branch {
    /// The full id of its first node: stable across requests.
    pub id: String,
    pub kind: BranchKind,
    pub label: String,
    /// The branch it leaves (`None` for a root branch).
    pub parent: Option<String>,
    /// The node it leaves from (`None` for a root branch).
    pub from: Option<NodeId>,
    /// Its nodes, in order.
    pub nodes: Vec<NodeId>,
    /// The conversation the branch belongs to (the oldest one whose head
    /// lies on it or beyond it), if any.
    pub conversation: Option<ConversationId>,
    /// The rerun it shows, when `kind` is `rerun`.
    pub rerun: Option<RerunView>,
    /// The replayed turn it shows, when `kind` is `replay`.
    pub replay: Option<ReplayView>,
}

/// A replayed turn shown as a branch: its replay, and how it was judged.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayView {
    pub id: String,
    /// `changed`, `held`, `diverged` or `failed`.
    pub result: String,
    /// The original turn's answer.
    pub turn_node: NodeId,
}

/// A rerun shown as a branch: what it removed and what it concluded.
#[derive(Clone, Debug, Serialize)]
pub struct RerunView {
    pub id: String,
    /// The source ids removed from the recorded request.
    pub ablation: Vec<String>,
    /// `confirmed`, `not-confirmed` or `inconclusive`; only with a baseline.
    pub verdict: Option<String>,
    /// The reply of the turn it re-ran (unknown for a conversation forked
    /// from a rerun not in this family's reruns).
    pub turn_node: Option<NodeId>,
}

/// `GET /api/nodes/{id}`: one node in full.
#[derive(Debug, Serialize)]
pub struct NodeDetail {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub depth: u64,
    pub role: Role,
    pub parts: Vec<PartView>,
    pub children: Vec<NodeId>,
    /// Conversations whose head is this node.
    pub heads: Vec<ConversationView>,
    /// The runs that produced the node, oldest first.
    pub runs: Vec<RunView>,
    /// The replays that re-sent the turn this node answers.
    pub replays: Vec<ReplayedAt>,
}

/// A replay that re-sent the turn ending at a node, and how it went.
#[derive(Debug, Serialize)]
pub struct ReplayedAt {
    pub replay: ReplayId,
    pub seq: u64,
    /// `changed`, `held`, `diverged`, `failed`, or where it stands.
    pub result: String,
    pub answer_node: Option<NodeId>,
}

impl From<&ReplayTurn> for ReplayedAt {
    fn from(turn: &ReplayTurn) -> ReplayedAt {
        ReplayedAt {
            replay: turn.replay.clone(),
            seq: turn.seq,
            result: skein::recorded::replay::result_of(turn).to_string(),
            answer_node: turn.answer_head,
        }
    }
}

/// One part of a message, as shown. Attachments carry their size, not their
/// bytes (`GET /api/nodes/{id}/parts/{index}` downloads them).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PartView {
    Text {
        text: String,
    },
    ToolCall {
        id: String,
        name: String,
        /// Exactly as the model wrote them; may not even be valid JSON.
        arguments: String,
    },
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
    Attachment {
        media_type: String,
        size: usize,
    },
    /// A part whose content was erased (`skein redact`): what it was, the
    /// digest its id keeps, and who erased it, when and why.
    Erased {
        was: String,
        digest: String,
        erased_by: String,
        erased_at_ms: i64,
        reason: String,
    },
    /// A part kind this build does not know how to show.
    Unknown {
        kind: String,
    },
}

impl From<&Part> for PartView {
    fn from(part: &Part) -> PartView {
        match part {
            Part::Text { text } => PartView::Text { text: text.clone() },
            Part::ToolCall(call) => PartView::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
            Part::ToolResult(result) => PartView::ToolResult {
                call_id: result.call_id.clone(),
                content: result.content.clone(),
                is_error: result.is_error,
            },
            Part::Attachment(attachment) => PartView::Attachment {
                media_type: attachment.media_type.clone(),
                size: attachment.data.len(),
            },
            Part::Erased(erased) => PartView::Erased {
                was: erased_kind(&erased.was).to_string(),
                digest: erased.digest.to_hex(),
                erased_by: erased.erased_by.clone(),
                erased_at_ms: erased.erased_at_ms,
                reason: erased.reason.clone(),
            },
            other => PartView::Unknown {
                kind: other.kind_name().to_string(),
            },
        }
    }
}

/// The kind an erased part had, as parts are named.
fn erased_kind(was: &skein::core::ErasedPart) -> &'static str {
    match was {
        skein::core::ErasedPart::Text => "text",
        skein::core::ErasedPart::ToolCall { .. } => "tool_call",
        skein::core::ErasedPart::ToolResult { .. } => "tool_result",
        skein::core::ErasedPart::Attachment { .. } => "attachment",
    }
}

pub fn parts_of(message: &Message) -> Vec<PartView> {
    message.parts.iter().map(PartView::from).collect()
}

/// A run record, as shown.
#[derive(Debug, Serialize)]
pub struct RunView {
    pub id: String,
    pub conversation: Option<ConversationId>,
    /// The message the model answered.
    pub input_head: Option<NodeId>,
    /// The node it produced (`None` when it failed).
    pub output_head: Option<NodeId>,
    pub model: String,
    /// The model a client of the recording proxy asked for.
    pub requested_model: Option<String>,
    /// The model the provider says answered, when it said.
    pub response_model: Option<String>,
    pub provider: String,
    pub profile: Option<String>,
    pub backend: Option<String>,
    pub status: RunStatus,
    pub error: Option<String>,
    pub usage: UsageView,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub duration_ms: Option<i64>,
    /// The tools offered on this call, exactly.
    pub tools: Vec<ToolSpec>,
    /// Cache hints and source tags on the request's parts.
    pub annotations: Vec<AnnotationView>,
    /// Sampling options sent with the call (temperature, seed...).
    pub options: serde_json::Value,
    pub relations: Vec<Relation>,
    /// Why generation ended (`length`: the token limit cut the reply).
    pub finish_reason: Option<FinishReason>,
    /// The exact request body a client sent the recording proxy (spans
    /// erased with the messages they held show as `[erased N bytes]`).
    pub request: Option<String>,
}

/// Token counts; `None` where the backend did not report a figure.
#[derive(Debug, Serialize)]
pub struct UsageView {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    /// False when some attempt of the run did not report its usage.
    pub complete: bool,
    /// The share of input tokens read from a prompt cache.
    pub cache_hit_rate: Option<f64>,
    /// In US dollars at the server's prices; `None` when the model has no
    /// price or the run reported no usage.
    pub cost: Option<f64>,
    /// The cost is a lower bound: part of the usage was not reported.
    pub cost_partial: bool,
}

/// The annotations of one part of a run's request.
#[derive(Debug, Serialize)]
pub struct AnnotationView {
    pub node: NodeId,
    pub part: u32,
    /// Each as `cache_hint: ephemeral` or `source: NAME`.
    pub annotations: Vec<String>,
}

impl RunView {
    /// The run as shown, costed at `prices`.
    pub fn priced(run: &RunRecord, prices: &PriceTable) -> RunView {
        let cost = prices.cost(&Totals::of([(run.id.clone(), Some(RunFigures::from(run)))]));
        let priced = cost.unpriced.is_empty() && !cost.by_model.is_empty();
        RunView {
            id: run.id.to_string(),
            conversation: run.conversation.clone(),
            input_head: run.input_head,
            output_head: run.output_head,
            model: run.model.clone(),
            requested_model: run.requested_model.clone(),
            response_model: run.response_model.clone(),
            provider: run.provider.clone(),
            profile: run.profile.clone(),
            backend: run.backend.clone(),
            status: run.status,
            error: run.error.clone(),
            usage: UsageView {
                input_tokens: run.usage.input_tokens,
                output_tokens: run.usage.output_tokens,
                cache_read_tokens: run.usage.cache_read_tokens,
                cache_write_tokens: run.usage.cache_write_tokens,
                complete: run.usage_complete,
                cache_hit_rate: run.usage.cache_hit_rate(),
                cost: priced.then_some(cost.dollars),
                cost_partial: priced && !cost.is_complete(),
            },
            started_ms: run.started_ms,
            finished_ms: run.finished_ms,
            duration_ms: run.finished_ms.map(|end| end - run.started_ms),
            tools: run.tools.clone(),
            annotations: run
                .annotations
                .iter()
                .map(|(at, list)| AnnotationView {
                    node: at.node,
                    part: at.part,
                    annotations: list.iter().map(describe_annotation).collect(),
                })
                .collect(),
            options: serde_json::to_value(&run.options).unwrap_or(serde_json::Value::Null),
            relations: run.relations.clone(),
            finish_reason: run.finish_reason.clone(),
            request: None,
        }
    }
}

/// `cache_hint: ephemeral`, `source: facts`: the annotation's serde form
/// flattened to one line, so kinds added later still show.
fn describe_annotation(annotation: &skein::core::Annotation) -> String {
    match serde_json::to_value(annotation) {
        Ok(serde_json::Value::Object(map)) => map
            .iter()
            .map(|(kind, value)| match value {
                serde_json::Value::String(text) => format!("{kind}: {text}"),
                other => format!("{kind}: {other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        Ok(serde_json::Value::String(kind)) => kind,
        Ok(other) => other.to_string(),
        Err(_) => "(unreadable annotation)".to_string(),
    }
}

/// `GET /api/compare?a=NODE&b=NODE`: two branches from their common
/// ancestor.
#[derive(Debug, Serialize)]
pub struct Comparison {
    /// The last node both threads share; `None` when they share nothing.
    pub ancestor: Option<NodeId>,
    /// The shared history ending at `ancestor`, oldest first: its last
    /// `limit` nodes.
    pub shared: Vec<NodeSummary>,
    /// Shared nodes before those listed.
    pub shared_omitted: usize,
    pub a: Side,
    pub b: Side,
}

/// One side of a comparison: the nodes after the common ancestor.
#[derive(Debug, Serialize)]
pub struct Side {
    pub head: NodeId,
    /// Conversations whose head is `head`.
    pub heads: Vec<ConversationView>,
    pub nodes: Vec<CompareNode>,
    /// Nodes after the ancestor that are not listed (beyond the limit).
    pub omitted: usize,
}

/// A node's id, role and preview.
#[derive(Debug, Serialize)]
pub struct NodeSummary {
    pub id: NodeId,
    pub depth: u64,
    pub role: Role,
    pub preview: String,
}

/// A node in a comparison: its parts and a summary of the runs behind it.
#[derive(Debug, Serialize)]
pub struct CompareNode {
    pub id: NodeId,
    pub depth: u64,
    pub role: Role,
    pub parts: Vec<PartView>,
    pub runs: Vec<RunSummary>,
}

/// What a comparison shows of a run.
#[derive(Debug, Serialize)]
pub struct RunSummary {
    pub id: String,
    pub model: String,
    pub status: RunStatus,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub duration_ms: Option<i64>,
}

impl From<&RunRecord> for RunSummary {
    fn from(run: &RunRecord) -> RunSummary {
        RunSummary {
            id: run.id.to_string(),
            model: run.model.clone(),
            status: run.status,
            input_tokens: run.usage.input_tokens,
            output_tokens: run.usage.output_tokens,
            duration_ms: run.finished_ms.map(|end| end - run.started_ms),
        }
    }
}

/// The body of every error response.
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    pub error: String,
}

/// `GET /api/search?q=TEXT&limit=N`: the messages matching the words,
/// newest first.
#[derive(Debug, Serialize)]
pub struct SearchView {
    pub results: Vec<SearchHit>,
    /// More messages match than were returned.
    pub truncated: bool,
}

/// One matching message.
#[derive(Debug, Serialize)]
pub struct SearchHit {
    pub node: NodeId,
    /// A conversation whose thread holds the message (the page opens its
    /// family at the node); `None` when no conversation leads to it.
    pub conversation: Option<ConversationId>,
    pub conversation_name: Option<String>,
    pub role: Role,
    /// The text around the first match, on one line, `…` where cut.
    pub snippet: String,
    /// Where the words are in `snippet`: `[start, end)` in UTF-16 code
    /// units, as JavaScript indexes strings.
    pub highlights: Vec<(usize, usize)>,
}

impl From<skein::store::SearchMatch> for SearchHit {
    fn from(found: skein::store::SearchMatch) -> SearchHit {
        let utf16 = |byte: usize| found.snippet[..byte].encode_utf16().count();
        let highlights = found
            .highlights
            .iter()
            .map(|&(start, end)| (utf16(start), utf16(end)))
            .collect();
        let first = found.conversations.into_iter().next();
        SearchHit {
            node: found.node,
            conversation_name: first.as_ref().and_then(|c| c.name.clone()),
            conversation: first.map(|c| c.id),
            role: found.role,
            snippet: found.snippet,
            highlights,
        }
    }
}
