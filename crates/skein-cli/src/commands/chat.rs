/*!
`skein chat`: an interactive loop where each line is a turn of one
conversation, streamed as it arrives and recorded like `skein prompt`.

On a terminal, lines are edited and recalled with rustyline (history in
`chat_history` in the user's data directory), and Ctrl-C stops the reply
being written: the cut reply is not recorded (no node, no run) and the
chat goes on; at the prompt Ctrl-C clears the line, Ctrl-D leaves. Piped
input is read line by line, without editing.

Lines starting with `!` are commands (see [`HELP`]). `!retry` and `!edit`
branch before the last turn: the turn's starting point is found by
walking back from the head to its user message (and the system message
sent with it), and a new conversation forks there, so the old reply and
the new one are siblings under the same request.

A turn that fails is reported and the chat goes on; nothing of it is
recorded but its failed run.
*/

mod history;

use super::common::context::{Context, Globals};
use super::common::model::home_model;
use super::common::turn::{continue_at, open_stored, run_turn};
use super::common::turn_options::{ContinueArgs, TurnArgs, TurnSettings};
use super::log::LogArgs;
use super::tree::TreeArgs;
use crate::ui::{self, outln};
use anyhow::{Result, anyhow, bail};
use clap::Args;
use history::CommandFile;
use rustyline::error::ReadlineError;
use skein::engine::{CancellationToken, EngineError};
use skein::store::{BoundedLine, OpenMode, read_line_within};
use skein::{Conversation, NodeId, Prompt, Role};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

pub const HELP: &str = "\
Each line is a turn. Commands:
  !multi        type a message of several lines; a line `!end` sends it
  !retry        answer the last message again, as a sibling branch
  !edit [TEXT]  change the last message (given, or edited in place) and
                answer it, as a sibling branch
  !fork         branch at the current head and continue in the branch
  !reply NODE   continue from NODE (any unique id prefix); a node that
                heads no conversation starts a branch there
  !tree         draw this conversation's family
  !log          this conversation's last 10 turns, one line each, with
                their token usage
  !help         this text
  !quit         leave (so does Ctrl-D)
Ctrl-C stops a reply as it is written: nothing of it is recorded.";

/// The line that ends `!multi` input.
const END_MULTI: &str = "!end";

#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub turn: TurnArgs,
    #[command(flatten)]
    pub conversation: ContinueArgs,
}

pub async fn run(globals: &Globals, args: ChatArgs) -> Result<ExitCode> {
    args.turn.declare_tools_and_key()?;
    // A new conversation may create the database; continuing one needs it.
    let continues = args.conversation.continues();
    let recording = match continues {
        true => OpenMode::Existing,
        false => OpenMode::Create,
    };
    let ctx = &globals.open_for_turn(recording, args.turn.no_log, continues)?;
    ctx.check_name_free(args.conversation.name.as_deref())?;
    let settings = args.turn.settings().await?;
    let stored = ctx.continued(&args.conversation)?;
    let conversation = match stored {
        Some(stored) => open_stored(ctx, &stored, settings.model.as_deref()).await?,
        None => {
            let home = home_model(settings.model.clone())?;
            settings.new_conversation(ctx, &home, args.conversation.name)
        }
    };
    let conversation = settings.recorded_or_not(conversation);
    let mut input = Input::open(typed_before(&conversation), !args.turn.no_log)?;
    if input.is_interactive() {
        ui::note(format!(
            "Chatting with {}. !help lists the commands; Ctrl-C stops a reply; !quit or Ctrl-D leaves.",
            conversation.model().name()
        ));
    }
    let system = settings
        .system
        .clone()
        .filter(|_| conversation.head().is_none());
    let mut session = Session {
        ctx,
        settings,
        conversation,
        system,
        interactive: input.is_interactive(),
    };
    while let Some(line) = input.read("> ", "").await? {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (command, argument) = line.split_once(' ').unwrap_or((line, ""));
        let argument = argument.trim();
        let done = match command {
            "!quit" | "!exit" => break,
            "!help" => outln!("{HELP}").map_err(Into::into),
            "!multi" => match input.multi().await? {
                Some(text) => session.send(text).await,
                None => {
                    ui::note("(multi-line message abandoned: nothing was sent)");
                    Ok(())
                }
            },
            "!retry" => session.again(None).await,
            "!edit" => match session.last_turn() {
                None => Err(anyhow!("nothing to edit yet: send a first message")),
                Some(last) => {
                    let text = if !argument.is_empty() {
                        Some(argument.to_string())
                    } else if input.is_interactive() {
                        input.read("edit> ", &last.text).await?
                    } else {
                        None
                    };
                    match text.filter(|text| !text.trim().is_empty()) {
                        Some(text) => session.again(Some(text)).await,
                        None if input.is_interactive() => {
                            ui::note("(edit abandoned: nothing was sent)");
                            Ok(())
                        }
                        None => Err(anyhow!("give the new text: `!edit TEXT`")),
                    }
                }
            },
            "!fork" => session.fork(),
            "!reply" => session.go_to(argument).await,
            "!tree" => session.tree().await,
            "!log" => session.log(),
            _ if command.starts_with('!') => {
                ui::note(format!("unknown command `{command}`; !help lists them"));
                Ok(())
            }
            _ => session.send(line.to_string()).await,
        };
        if let Err(error) = done {
            // Nowhere left to write to: the chat is over.
            if ui::stdout_failure().is_some() {
                return Err(error);
            }
            ui::note(format!("error: {}", crate::exit::message(&error)));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The conversation a chat is in, and what each turn sends.
struct Session<'a> {
    ctx: &'a Context,
    settings: TurnSettings,
    conversation: Conversation,
    /// The system prompt still to send: with the first line of a new
    /// conversation.
    system: Option<String>,
    interactive: bool,
}

/// The user message the last turn sent.
struct LastTurn {
    node: NodeId,
    text: String,
}

impl Session<'_> {
    /// A turn after the head.
    async fn send(&mut self, text: String) -> Result<()> {
        let system = self.system.take();
        let prompt = self
            .settings
            .apply(self.conversation.prompt(text), system.clone());
        self.run(prompt, None).await?;
        if self.conversation.head().is_none() {
            self.system = system;
        }
        Ok(())
    }

    /// Run a turn; Ctrl-C (on a terminal) cancels it. The chat goes on in
    /// the conversation the turn ended in.
    async fn run(&mut self, prompt: Prompt, note: Option<String>) -> Result<()> {
        let stop = CancellationToken::new();
        let turn = run_turn(
            self.ctx,
            prompt.cancel_with(stop.clone()),
            &self.settings,
            note,
        );
        let outcome = if self.interactive {
            tokio::pin!(turn);
            loop {
                tokio::select! {
                    // Polled first, so the handler is in place before the
                    // turn's request leaves.
                    biased;
                    _ = tokio::signal::ctrl_c() => stop.cancel(),
                    outcome = &mut turn => break outcome,
                }
            }
        } else {
            turn.await
        };
        match outcome {
            Ok(conversation) => {
                self.conversation = conversation;
                Ok(())
            }
            Err(error) if was_cancelled(&error) => {
                ui::note("(stopped: the cut reply was not recorded)");
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// The last turn: walking back from the head to its user message.
    fn last_turn(&self) -> Option<LastTurn> {
        let thread = self.conversation.thread();
        let user = thread
            .ancestors()
            .find(|node| node.message().role == Role::User)?;
        Some(LastTurn {
            node: user.id(),
            text: user.message().joined_text(),
        })
    }

    /// The last turn asked again (the turn layer's
    /// [`Conversation::again_at`]), with `text` instead of its own when
    /// given: a new conversation branching where its message stood.
    async fn again(&mut self, text: Option<String>) -> Result<()> {
        let Some(last) = self.last_turn() else {
            bail!("nothing to answer again yet: send a first message");
        };
        if self.conversation.store().is_none() {
            bail!(
                "!retry and !edit branch in the database, and this chat records nothing (--no-log)"
            );
        }
        let current = &self.conversation;
        let id = current.id();
        let mut again = Conversation::again_at(&self.ctx.store, last.node, current.model())
            .model(current.model());
        // The chat's own conversation asks, not another that shares the
        // message (a retry answered alike heads the same node).
        if current.is_stored() {
            again = again.of(&id);
        }
        let what = match text {
            Some(text) => {
                again = again.edited(text);
                "edited"
            }
            None => "answered again",
        };
        let mut prompt = self.settings.apply(again.await?, None);
        if self.settings.tools.is_none() {
            prompt = prompt.tools(current.tools().to_vec());
        }
        self.run(
            prompt,
            Some(format!(
                "node {} {what}, as a sibling branch: conversation",
                last.node.short()
            )),
        )
        .await
    }

    fn fork(&mut self) -> Result<()> {
        let Some(head) = self.conversation.head() else {
            ui::note("nothing to fork yet: send a first message");
            return Ok(());
        };
        // A fork waiting for its first turn is already a new branch here;
        // a fork of it would name as its origin a conversation never stored.
        if self.conversation.store().is_some() && !self.conversation.is_stored() {
            ui::note(format!(
                "conversation {} is already a new branch at node {}: it is stored with the next message",
                self.conversation.id().short(),
                head.short()
            ));
            return Ok(());
        }
        // Stored with its first turn, as every fork is: a turn that fails
        // leaves no empty conversation behind.
        self.conversation = self.conversation.fork().conversation();
        ui::note(format!(
            "forked at node {} into conversation {}, stored with its first turn",
            head.short(),
            self.conversation.id().short()
        ));
        Ok(())
    }

    /// Go on from `node` as `skein reply NODE` does: the stored
    /// conversation whose head it is, on its own model (or `-m`'s), or a
    /// new branch there, recorded with its first turn.
    async fn go_to(&mut self, node: &str) -> Result<()> {
        if node.is_empty() {
            bail!("say which node: `!reply NODE`");
        }
        let id = self.ctx.node(node)?;
        let (conversation, branched) =
            continue_at(self.ctx, id, self.settings.model.as_deref()).await?;
        self.conversation = self.settings.recorded_or_not(conversation);
        ui::note(if branched {
            format!(
                "node {} heads no conversation: the next message starts a new branch there, conversation {}",
                id.short(),
                self.conversation.id().short()
            )
        } else {
            format!(
                "continuing conversation {} from its head, node {}",
                self.conversation.id().short(),
                id.short()
            )
        });
        Ok(())
    }

    /// The id of the conversation, once the database has it.
    fn stored_id(&self) -> Option<String> {
        self.conversation
            .is_stored()
            .then(|| self.conversation.id().as_str().to_string())
    }

    async fn tree(&self) -> Result<()> {
        let Some(id) = self.stored_id() else {
            ui::note("nothing recorded yet: the tree starts with the first recorded turn");
            return Ok(());
        };
        super::tree::print_tree(
            self.ctx,
            TreeArgs {
                id: Some(id),
                limit: 500,
            },
        )
        .await
        .map(drop)
    }

    fn log(&self) -> Result<()> {
        let Some(id) = self.stored_id() else {
            ui::note("nothing recorded yet");
            return Ok(());
        };
        super::log::print_log(
            self.ctx,
            LogArgs {
                cid: Some(id),
                current: false,
                model: None,
                query: None,
                usage: true,
                short: true,
                count: Some(10),
                response: false,
                replays: false,
            },
        )
        .map(drop)
    }
}

/// Whether a turn ended because it was cancelled (Ctrl-C).
fn was_cancelled(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<skein::Error>(),
            Some(
                skein::Error::Engine(EngineError::Cancelled { .. })
                    | skein::Error::ChainFailed {
                        error: EngineError::Cancelled { .. },
                        ..
                    }
            )
        )
    })
}

/// The user messages of `conversation`'s thread, oldest first (at most
/// [`history::RECALLED`]): what the line editor recalls.
fn typed_before(conversation: &Conversation) -> Vec<String> {
    let thread = conversation.thread();
    let mut typed: Vec<String> = thread
        .messages()
        .iter()
        .rev()
        .filter(|message| message.role == Role::User)
        .map(|message| message.joined_text())
        .filter(|text| !text.trim().is_empty())
        .take(history::RECALLED)
        .collect();
    typed.reverse();
    typed
}

/// Where lines come from: a line editor on a terminal, else stdin as it is.
enum Input {
    Editor {
        editor: Box<rustyline::DefaultEditor>,
        /// The commands kept in the history file; none with `-n`.
        commands: Option<CommandFile>,
    },
    Piped,
}

impl Input {
    /// The editor recalls `typed` (the conversation's user messages) and
    /// the commands of the history file, which it keeps writing when
    /// `keep` (see history.rs).
    fn open(typed: Vec<String>, keep: bool) -> Result<Input> {
        if !std::io::stdin().is_terminal() {
            return Ok(Input::Piped);
        }
        let config = rustyline::Config::builder()
            .max_history_size(history::RECALLED)?
            .auto_add_history(false)
            .build();
        let mut editor = rustyline::DefaultEditor::with_config(config)?;
        let commands = history_path().map(CommandFile::load);
        // An older skein's file, with typed lines in it, loses them now.
        if let Some(commands) = commands.as_ref().filter(|file| file.dropped())
            && let Err(error) = commands.save()
        {
            ui::note(format!(
                "(cannot rewrite the chat history {}: {error})",
                commands.path().display()
            ));
        }
        for line in commands
            .iter()
            .flat_map(CommandFile::commands)
            .chain(&typed)
        {
            let _ = editor.add_history_entry(line.as_str());
        }
        Ok(Input::Editor {
            editor: Box::new(editor),
            commands: commands.filter(|_| keep),
        })
    }

    fn is_interactive(&self) -> bool {
        matches!(self, Input::Editor { .. })
    }

    /// The next line, `None` at the end of input. On a terminal the line
    /// starts as `initial`, and Ctrl-C gives an empty line.
    async fn read(&mut self, prompt: &str, initial: &str) -> Result<Option<String>> {
        match self {
            Input::Piped => {
                let limit = crate::input::limit() as usize;
                let (read, line) = tokio::task::spawn_blocking(move || {
                    let mut line = Vec::new();
                    read_line_within(&mut std::io::stdin().lock(), limit, &mut line)
                        .map(|read| (read, line))
                })
                .await??;
                match read {
                    BoundedLine::End => Ok(None),
                    BoundedLine::TooLong => bail!(
                        "a line on stdin is longer than {limit} bytes (the --max-input limit)"
                    ),
                    BoundedLine::Line => {
                        let line = String::from_utf8(line)
                            .map_err(|_| anyhow!("a line on stdin is not UTF-8 text"))?;
                        Ok(Some(line.trim_end_matches(['\n', '\r']).to_string()))
                    }
                }
            }
            Input::Editor { editor, commands } => {
                match editor.readline_with_initial(prompt, (initial, "")) {
                    Ok(line) => {
                        if !line.trim().is_empty() {
                            let _ = editor.add_history_entry(line.as_str());
                            if let Some(commands) = commands
                                && let Err(error) = commands.add(line.trim())
                            {
                                ui::note(format!(
                                    "(cannot save the chat history {}: {error})",
                                    commands.path().display()
                                ));
                            }
                        }
                        Ok(Some(line))
                    }
                    Err(ReadlineError::Interrupted) => Ok(Some(String::new())),
                    Err(ReadlineError::Eof) => Ok(None),
                    Err(error) => Err(error.into()),
                }
            }
        }
    }

    /// A message of several lines, up to a line `!end`; `None` when input
    /// ends (or, on a terminal, Ctrl-C is pressed) first.
    async fn multi(&mut self) -> Result<Option<String>> {
        if self.is_interactive() {
            ui::note(format!(
                "(type the message; a line `{END_MULTI}` sends it, Ctrl-C abandons it)"
            ));
        }
        let mut lines = Vec::new();
        loop {
            let line = match self {
                Input::Editor { editor, .. } => match editor.readline("… ") {
                    Ok(line) => line,
                    Err(ReadlineError::Interrupted | ReadlineError::Eof) => return Ok(None),
                    Err(error) => return Err(error.into()),
                },
                Input::Piped => match self.read("", "").await? {
                    Some(line) => line,
                    None => return Ok(None),
                },
            };
            if line.trim() == END_MULTI {
                break;
            }
            lines.push(line);
        }
        let text = lines.join("\n");
        Ok((!text.trim().is_empty()).then_some(text))
    }
}

/// `chat_history` in the user's data directory.
fn history_path() -> Option<PathBuf> {
    directories::ProjectDirs::from("", "", "skein").map(|dirs| dirs.data_dir().join("chat_history"))
}
