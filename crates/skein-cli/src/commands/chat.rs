/*!
`skein chat`: an interactive loop where each line is a turn of one
conversation, streamed as it arrives and recorded like `skein prompt`.
Lines starting with `!` are commands: `!fork` branches at the current head
and goes on in the branch, `!reply NODE` goes on from any node (the
conversation whose head it is, or a new branch there), `!help`, `!quit`.

A turn that fails is reported and the chat goes on; nothing of it is
recorded but its failed run.
*/

use super::Context;
use super::turns::{home_model, run_turn};
use crate::flags::ChatArgs;
use crate::ui;
use anyhow::Result;
use skein::Conversation;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

const HELP: &str = "\
Each line is a turn. Commands:
  !fork         branch at the current head and continue in the branch
  !reply NODE   continue from NODE (any unique id prefix)
  !help         this text
  !quit         leave (so does Ctrl-D)";

pub async fn chat(ctx: &Context, args: ChatArgs) -> Result<ExitCode> {
    let tools = args.tools.resolve()?;
    let stored = if args.continue_last {
        Some(ctx.latest_conversation()?)
    } else if let Some(cid) = &args.cid {
        Some(ctx.conversation(cid)?)
    } else {
        None
    };
    let mut conversation = match stored {
        Some(stored) => {
            let home = home_model(
                args.model
                    .model
                    .clone()
                    .or(super::conversation_model(&stored)),
            )?;
            Conversation::load(&ctx.store, stored.id.as_str(), &home).await?
        }
        None => {
            let home = home_model(args.model.model.clone())?;
            let mut builder = home.conversation().store(&ctx.store);
            if let Some(name) = &args.name {
                builder = builder.name(name.clone());
            }
            if let Some(tools) = tools.clone() {
                builder = builder.tools(tools);
            }
            if let Some(limit) = args.tools.chain_limit {
                builder = builder.chain_limit(limit);
            }
            builder.build()
        }
    };
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        ui::note(format!(
            "Chatting with {}. Type !help for commands; !quit or Ctrl-D leaves.",
            conversation.model().name()
        ));
    }
    let mut system = args.system.filter(|_| conversation.head().is_none());
    while let Some(line) = read_line(interactive).await? {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (command, argument) = line.split_once(' ').unwrap_or((line, ""));
        match command {
            "!quit" | "!exit" => break,
            "!help" => println!("{HELP}"),
            "!fork" => match conversation.head() {
                None => ui::note("nothing to fork yet: send a first message"),
                Some(head) => {
                    conversation = conversation.fork().create().await?;
                    ui::note(format!(
                        "forked at node {} into conversation {}",
                        head.short(),
                        conversation.id().short()
                    ));
                }
            },
            "!reply" => match go_to(ctx, &conversation, argument.trim()).await {
                Ok(next) => {
                    conversation = next;
                    ui::note(format!(
                        "continuing conversation {} at node {}",
                        conversation.id().short(),
                        conversation
                            .head()
                            .map_or_else(|| "(empty)".into(), |head| head.short())
                    ));
                }
                Err(error) => ui::note(format!("error: {error:#}")),
            },
            _ if command.starts_with('!') => {
                ui::note(format!("unknown command `{command}`; !help lists them"))
            }
            _ => {
                let mut prompt = conversation.prompt(line);
                if let Some(system) = system.take() {
                    prompt = prompt.system(system);
                }
                if let Some(tools) = tools.clone() {
                    prompt = prompt.tools(tools);
                }
                if let Err(error) = run_turn(ctx, prompt, args.tools.chain_limit, None).await {
                    ui::note(format!("error: {error:#}"));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The conversation to go on with from `node`: the stored conversation
/// whose head it is, or a new branch there.
async fn go_to(ctx: &Context, current: &Conversation, node: &str) -> Result<Conversation> {
    if node.is_empty() {
        anyhow::bail!("say which node: `!reply NODE`");
    }
    let id = ctx.node(node)?;
    let home = current.model().clone();
    if let Some(owner) = ctx.store.conversations_at(id)?.into_iter().next() {
        return Ok(Conversation::load(&ctx.store, owner.id.as_str(), &home).await?);
    }
    Ok(Conversation::fork_at(&ctx.store, node, &home)
        .await?
        .create()
        .await?)
}

/// The next line of input, `None` at its end.
async fn read_line(interactive: bool) -> Result<Option<String>> {
    if interactive {
        print!("> ");
        std::io::stdout().flush()?;
    }
    let read = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map(|read| (read > 0).then_some(line))
    })
    .await??;
    Ok(read)
}
