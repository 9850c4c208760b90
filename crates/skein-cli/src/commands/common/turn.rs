/*!
Running a turn for `prompt`, `reply`, `fork` and `chat`: each command finds
where the turn starts (a new conversation, a conversation's head, any node) and
runs it here, through the library's [`Conversation`], which records it.

No command ever moves a conversation's bookmark anywhere but forward from
the head it started at: replying to a node that is not a head creates a new
conversation there (a branch). With tools (`-T`, or a conversation's own),
the turn is a tool loop bounded by the chain limit.
*/

use super::context::Context;
use super::home::{CliHome, cli_error};
use super::turn_options::TurnSettings;
use crate::ui::{self, outln};
use anyhow::{Result, bail};
use skein::conversation::home;
use skein::core::FinishReason;
use skein::{Conversation, Landed, OnMoved, Prompt};

/// A stored conversation to go on with: its MCP servers started (the turn
/// layer's [`home::ready`]), on the model `-m` names when given (for this
/// turn; the stored settings stay as they are), else on the one it was
/// recorded with.
pub async fn open_stored(
    ctx: &Context,
    stored: &skein::store::ConversationRecord,
    model: Option<&str>,
) -> Result<Conversation> {
    let ready = home::ready(&CliHome::of_command()?, stored, model)
        .await
        .map_err(cli_error)?;
    let load = Conversation::load(&ctx.store, &stored.id, &ready.home);
    Ok(match &ready.chosen {
        Some(model) => load.model(model).await?,
        None => load.await?,
    })
}

/// Where a turn after `node` runs (`skein reply`, the chat's `!reply`):
/// the turn layer's [`Conversation::reply_at`] (the conversation whose head
/// `node` is, else a new branch there, stored only once its first turn
/// succeeds), on the model `-m` names for this turn when given, else the
/// conversation's own, never the default first ([`home::ready_at`], which
/// starts the MCP servers of the conversation `node` belongs to). `true`
/// when it is such a branch.
pub async fn continue_at(
    ctx: &Context,
    node: skein::NodeId,
    model: Option<&str>,
) -> Result<(Conversation, bool)> {
    let ready = home::ready_at(&ctx.store, node, &CliHome::of_command()?, model)
        .await
        .map_err(cli_error)?;
    let reply = Conversation::reply_at(&ctx.store, node, &ready.home);
    let conversation = match &ready.chosen {
        Some(model) => reply.model(model).await?,
        None => reply.await?,
    };
    let branched = !conversation.is_stored();
    Ok((conversation, branched))
}

/// A branch at `node` with the settings of the conversation it belongs to
/// (recorded as its origin; its MCP servers started), on the model `-m`
/// names when given.
pub async fn branch_at(
    ctx: &Context,
    node: skein::NodeId,
    model: Option<&str>,
) -> Result<skein::Fork> {
    let ready = home::ready_at(&ctx.store, node, &CliHome::of_command()?, model)
        .await
        .map_err(cli_error)?;
    let branch = Conversation::fork_at(&ctx.store, node, &ready.home);
    Ok(match &ready.chosen {
        Some(model) => branch.model(model).await?,
        None => branch.await?,
    })
}

/// Run one turn (a tool loop when tools are offered), streaming its text
/// (each model call's on its own line, tool calls noted on stderr between
/// them; with `--schema`, only the final valid reply is printed, once it
/// is valid), and report where it was recorded. When another writer moved
/// the conversation on while the turn ran, the turn lands in a new branch
/// where it started (the landing rule), and the report says so.
pub async fn run_turn(
    ctx: &Context,
    prompt: Prompt,
    settings: &TurnSettings,
    note: Option<String>,
) -> Result<Conversation> {
    let prompt = prompt.on_moved(OnMoved::Branch);
    let streaming = !ctx.json
        && settings.schema.is_none()
        && !settings.output.no_stream
        && !settings.output.extract;
    let prompt = if streaming {
        prompt.on_text(ui::stream_text)
    } else {
        prompt
    };
    let outcome = if prompt.offers_tools() {
        let mut chain = prompt.chain();
        if let Some(limit) = settings.chain_limit {
            chain = chain.limit(limit);
        }
        if !ctx.json {
            chain = chain.after_call(|call, result| {
                Box::pin(async move {
                    // The call's text is all sent by now, but it reaches
                    // stdout through a channel drained beside the turn:
                    // yielding once lets the drain write it, so the line is
                    // ended after it.
                    tokio::task::yield_now().await;
                    let _ = ui::end_line();
                    ui::note(format!(
                        "[tool {}({}) {} {}]",
                        call.name,
                        call.arguments,
                        if result.is_error { "failed:" } else { "->" },
                        ui::one_line(&result.content, 200)
                    ));
                })
            });
        }
        chain.send().await.map(|chain| {
            let warnings = chain.warnings();
            (
                chain.last().clone(),
                Some(chain.status()),
                warnings,
                chain.usage(),
            )
        })
    } else {
        prompt.send().await.map(|response| {
            let warnings = response.warnings().to_vec();
            let usage = response.usage();
            (response, None, warnings, usage)
        })
    };
    // A reply cut short still ends its line; nothing streamed, no line.
    ui::end_line()?;
    let (response, status, warnings, usage) = outcome?;
    if !ctx.json && !streaming {
        match settings.output.extract {
            true => outln!("{}", first_code_block(&response.text()))?,
            false => outln!("{}", response.text())?,
        }
    }
    if settings.output.usage {
        ui::note(usage_note(&usage));
    }
    let conversation = response.conversation();
    let moved_on = match response.landed() {
        Landed::Branched { from, .. } => Some(from),
        _ => None,
    };
    if let Some(note) = note {
        ui::note(format!("{note} {}", conversation.id().short()));
    }
    if let Some(asked) = moved_on {
        ui::note(format!(
            "conversation {} moved on while this turn ran: the reply landed in a new branch, conversation {}",
            asked.short(),
            conversation.id().short()
        ));
    }
    if let Some(status) = status.filter(|status| *status != skein::ChainStatus::Completed) {
        ui::note(match status {
            skein::ChainStatus::LimitReached => format!(
                "the tool loop stopped at its limit of {} model calls; raise it with --chain-limit",
                conversation.chain_limit()
            ),
            _ => "the tool loop was stopped".to_string(),
        });
    }
    let finish = &response.output().finish_reason;
    if *finish == FinishReason::Length {
        ui::note(cut_note(response.output()));
    }
    // Every call's warnings: in a tool loop the last call is rarely the one
    // that first offered the drifted tool.
    for warning in &warnings {
        ui::note(format!(
            "warning: tool `{}` is offered with a different input schema than earlier in this conversation",
            warning.tool
        ));
    }
    if ctx.json {
        ui::json(&serde_json::json!({
            "conversation": conversation.id(),
            "node": response.head(),
            "run": response.run_id(),
            "text": response.text(),
            "finish_reason": finish.name(),
            "chain_status": status,
            "recorded": conversation.store().is_some(),
            "branched_from": moved_on,
        }))?;
        return Ok(conversation.clone());
    }
    ui::note(format!(
        "conversation {} · node {} · run {}{}",
        conversation.id().short(),
        response.head().short(),
        response.run_id().short(),
        if conversation.store().is_some() {
            ""
        } else {
            " (not recorded: --no-log)"
        }
    ));
    if let Some((kind, message)) = ui::stdout_failure() {
        // The turn is recorded (the note above says where); its text did
        // not all reach stdout.
        bail!("{}", ui::describe_failure(*kind, message));
    }
    Ok(conversation.clone())
}

/// `-u`'s note: the turn's tokens (every call of a tool loop).
fn usage_note(usage: &skein::core::provider::Usage) -> String {
    let tokens = |n: Option<u64>| n.map_or_else(|| "?".to_string(), |n| n.to_string());
    let mut note = format!(
        "token usage: {} input, {} output",
        tokens(usage.input_tokens),
        tokens(usage.output_tokens)
    );
    if let Some(read) = usage.cache_read_tokens.filter(|n| *n > 0) {
        note.push_str(&format!(", {read} read from the cache"));
    }
    note
}

/// `-x`: the body of the first fenced code block of `text` (a line
/// starting with three or more backticks or tildes, up to the line that
/// closes it, or the end), else the whole text.
fn first_code_block(text: &str) -> &str {
    let mut lines = text.split_inclusive('\n');
    let mut offset = 0;
    for line in lines.by_ref() {
        offset += line.len();
        let trimmed = line.trim_start();
        let fence: String = trimmed
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        let same = fence.chars().all(|c| fence.starts_with(c));
        if fence.len() < 3 || !same {
            continue;
        }
        let start = offset;
        let mut end = start;
        for line in lines.by_ref() {
            if line.trim().starts_with(fence.as_str())
                && line.trim().chars().all(|c| fence.starts_with(c))
            {
                break;
            }
            end += line.len();
        }
        return text[start..end]
            .strip_suffix('\n')
            .unwrap_or(&text[start..end]);
    }
    text
}

/// The note for a reply the token limit cut: the limit the turn set, or
/// else the reply's length (a single model call stops exactly at the
/// provider's default limit).
fn cut_note(output: &skein::engine::RunOutput) -> String {
    let limit = output
        .prepared
        .options
        .max_tokens
        .map(u64::from)
        .or(output.usage.output_tokens.filter(|_| output.attempts == 1));
    match limit {
        Some(limit) => {
            format!("reply cut at the {limit}-token limit; raise it with -o max_tokens N")
        }
        None => "reply cut at the token limit; raise it with -o max_tokens N".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::first_code_block;

    #[test]
    fn extract_takes_the_first_fenced_block_or_everything() {
        let text = "Here:\n```python\nprint(1)\nprint(2)\n```\nand\n```\nsecond\n```\n";
        assert_eq!(first_code_block(text), "print(1)\nprint(2)");
        assert_eq!(first_code_block("~~~\nx\n~~~"), "x");
        assert_eq!(first_code_block("````\na ```\n```\n````"), "a ```\n```");
        assert_eq!(first_code_block("```\nunclosed"), "unclosed");
        assert_eq!(first_code_block("no block here"), "no block here");
    }
}
