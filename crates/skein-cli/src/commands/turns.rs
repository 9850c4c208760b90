/*!
The commands that run turns: `prompt`, `reply` and `fork`. Each resolves
where the turn starts (a new conversation, a conversation's head, any node),
runs it through the `skein` library and records it.

No command ever moves a conversation's bookmark anywhere but forward from
the head it started at: replying to a node that is not a head creates a new
conversation there (a branch).
*/

use super::{Context, conversation_model, default_model, print_json, short};
use crate::exit::{ExitWith, MODEL_FAILED};
use crate::flags::{ForkArgs, PromptArgs, ReplyArgs};
use crate::ui;
use anyhow::{Context as _, Result, bail};
use skein::store::{Conversation, NewConversation, Origin};
use skein::turn::{self, Turn, TurnError};
use skein::{Message, Thread};
use std::io::{IsTerminal, Read};
use std::process::ExitCode;

pub async fn prompt(ctx: &Context, args: PromptArgs) -> Result<ExitCode> {
    let text = text_or_stdin(args.text)?;
    let target = if args.continue_last {
        Target::Existing(ctx.latest_conversation()?)
    } else if let Some(cid) = &args.cid {
        Target::Existing(ctx.conversation(cid)?)
    } else {
        Target::New(NewConversation {
            name: args.name.clone(),
            ..Default::default()
        })
    };
    let mut messages = Vec::new();
    if let Some(system) = args.system {
        messages.push(Message::system(system));
    }
    messages.push(Message::user(text));
    run_turn(ctx, target, messages, args.model.model, None).await
}

/// Where a turn goes: an existing conversation's head, or a conversation
/// created only once the model call has succeeded (a failed first turn
/// leaves no empty conversation behind).
enum Target {
    Existing(Conversation),
    New(NewConversation),
}

pub async fn reply(ctx: &Context, args: ReplyArgs) -> Result<ExitCode> {
    let node = ctx.node(&args.node)?;
    let text = text_or_stdin(args.text)?;
    let (target, note) = match ctx.store.conversations_at(node)?.into_iter().next() {
        Some(conversation) => (Target::Existing(conversation), None),
        None => (
            Target::New(NewConversation {
                head: Some(node),
                origin: Some(Origin {
                    node: Some(node),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            Some(format!(
                "node {} is not the head of a conversation: branched into a new conversation",
                node.short()
            )),
        ),
    };
    run_turn(
        ctx,
        target,
        vec![Message::user(text)],
        args.model.model,
        note,
    )
    .await
}

pub async fn fork(ctx: &Context, args: ForkArgs) -> Result<ExitCode> {
    let node = ctx.node(&args.node)?;
    let from = ctx
        .store
        .conversations_at(node)?
        .into_iter()
        .next()
        .map(|c| c.id);
    let conversation = ctx.store.fork(node, args.name, from)?;
    match args.text {
        Some(text) => {
            let note = format!("forked at node {} into conversation", node.short());
            run_turn(
                ctx,
                Target::Existing(conversation),
                vec![Message::user(text)],
                args.model.model,
                Some(note),
            )
            .await
        }
        None if ctx.json => print_json(&conversation),
        None => {
            println!("{}", conversation.id.short());
            ui::note(format!(
                "forked new conversation {} at node {}; continue it with `skein prompt --cid {} TEXT`",
                conversation.id.short(),
                node.short(),
                conversation.id.short()
            ));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Run one turn at the target's head and record it.
async fn run_turn(
    ctx: &Context,
    target: Target,
    messages: Vec<Message>,
    model: Option<String>,
    note: Option<String>,
) -> Result<ExitCode> {
    let (start, previous_model) = match &target {
        Target::Existing(conversation) => (conversation.head, conversation_model(conversation)),
        Target::New(new) => (new.head, None),
    };
    let model = model
        .or(previous_model.clone())
        .unwrap_or_else(default_model);
    let resolved = skein::providers::resolve(&model)?;
    let history = match start {
        Some(head) => {
            let store = ctx.store.clone();
            store.run(move |store| store.load_thread(head)).await?
        }
        None => Thread::new(),
    };
    let streaming = !ctx.json;
    let mut on_text = |text: &str| {
        if streaming {
            ui::stream_text(text);
        }
    };
    let result = Turn::new(history, messages, resolved.model)
        .run(resolved.provider.as_ref(), &mut on_text)
        .await;
    let mut outcome = match result {
        Ok(outcome) => outcome,
        Err(TurnError::Provider { mut run, source }) => {
            if streaming {
                println!();
            }
            if let Target::Existing(conversation) = &target {
                run.conversation = Some(conversation.id.clone());
            }
            ctx.store.record_run(&run)?;
            return Err(anyhow::Error::new(ExitWith(
                MODEL_FAILED,
                format!(
                    "the model `{model}` failed: {source} (run {} recorded as failed)",
                    run.id.short()
                ),
            )));
        }
        Err(other) => bail!(other),
    };
    if streaming {
        println!();
    }
    let conversation = match target {
        Target::Existing(conversation) => conversation,
        Target::New(new) => ctx.store.create_conversation(new)?,
    };
    turn::record(&ctx.store, &conversation.id, start, &mut outcome)?;
    if previous_model.as_deref() != Some(model.as_str()) {
        let mut meta = conversation.meta.clone();
        if !meta.is_object() {
            meta = serde_json::json!({});
        }
        meta["model"] = serde_json::Value::String(model);
        ctx.store.set_conversation_meta(&conversation.id, &meta)?;
    }
    if let Some(note) = note {
        ui::note(format!("{note} {}", short(&conversation.id)));
    }
    if ctx.json {
        return print_json(&serde_json::json!({
            "conversation": conversation.id,
            "node": outcome.head(),
            "run": outcome.run.id,
            "text": outcome.response.message.joined_text(),
        }));
    }
    ui::note(format!(
        "conversation {} · node {} · run {}",
        conversation.id.short(),
        outcome.head().short(),
        outcome.run.id.short()
    ));
    Ok(ExitCode::SUCCESS)
}

fn text_or_stdin(text: Option<String>) -> Result<String> {
    if let Some(text) = text {
        return Ok(text);
    }
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!("give the text as an argument, or pipe it on stdin");
    }
    let mut text = String::new();
    stdin
        .read_to_string(&mut text)
        .context("cannot read the text from stdin")?;
    if text.is_empty() {
        bail!("stdin was empty: give the text as an argument, or pipe it on stdin");
    }
    Ok(text)
}
