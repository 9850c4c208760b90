/*!
The commands that run turns: `prompt`, `reply` and `fork`. Each finds where
the turn starts (a new conversation, a conversation's head, any node) and
runs it through the library's [`Conversation`], which records it.

No command ever moves a conversation's bookmark anywhere but forward from
the head it started at: replying to a node that is not a head creates a new
conversation there (a branch). With tools (`-T`, or a conversation's own),
the turn is a tool loop bounded by the chain limit.
*/

use super::{Context, print_json};
use crate::flags::{
    ForkArgs, PartsArgs, PrepareArgs, PromptArgs, ReplyArgs, RequestArgs, TemplateArgs, ToolArgs,
    TurnArgs,
};
use crate::input;
use crate::ui::{self, outln};
use anyhow::{Result, bail};
use skein::core::FinishReason;
use skein::core::provider::GenerationOptions;
use skein::{Conversation, Model, OnMoved, Prompt, Tool, TurnInput};
use std::process::ExitCode;
use std::sync::Arc;

/// What [`TurnArgs`] ask of each turn, read and checked once.
pub struct TurnSettings {
    pub model: Option<String>,
    pub system: Option<String>,
    /// The tools named with `-T` (`None`: the conversation's own).
    pub tools: Option<Vec<Arc<dyn Tool>>>,
    pub chain_limit: Option<u32>,
    pub options: GenerationOptions,
    pub schema: Option<serde_json::Value>,
    pub no_log: bool,
    pub output: TurnOutput,
}

/// How a turn's reply is printed (`-u`, `--no-stream`, `-x`).
#[derive(Clone, Copy, Debug, Default)]
pub struct TurnOutput {
    /// Note the token usage on stderr.
    pub usage: bool,
    /// Print the reply once complete.
    pub no_stream: bool,
    /// Print only the first fenced code block.
    pub extract: bool,
}

impl TurnArgs {
    pub async fn settings(&self) -> Result<TurnSettings> {
        let mut settings = self.request.settings(self.no_log).await?;
        settings.output = TurnOutput {
            usage: self.usage,
            no_stream: self.no_stream,
            extract: self.extract,
        };
        Ok(settings)
    }
}

impl RequestArgs {
    pub async fn settings(&self, no_log: bool) -> Result<TurnSettings> {
        Ok(TurnSettings {
            model: self.model.model.clone(),
            system: self.system.clone(),
            tools: self.tools.resolve().await?,
            chain_limit: self.tools.chain_limit,
            options: generation_options(&self.options)?,
            schema: self.schema.as_deref().map(input::schema).transpose()?,
            no_log,
            output: TurnOutput::default(),
        })
    }
}

impl TurnSettings {
    /// The turn's own settings on `prompt`, with `system` (the caller's to
    /// give: `chat` sends `--system` with its first line only).
    pub fn apply(&self, mut prompt: Prompt, system: Option<String>) -> Prompt {
        prompt = prompt.options(self.options.clone());
        if let Some(system) = system {
            prompt = prompt.system(system);
        }
        if let Some(schema) = &self.schema {
            prompt = prompt.schema(schema.clone());
        }
        if let Some(tools) = &self.tools {
            prompt = prompt.tools(tools.clone());
        }
        prompt
    }

    /// A new conversation on `home`, recorded in the CLI's store and named
    /// `name`, with the tools and chain limit asked for.
    pub fn new_conversation(
        &self,
        ctx: &Context,
        home: &Model,
        name: Option<String>,
    ) -> Conversation {
        let mut builder = home.conversation().store(&ctx.store);
        if let Some(name) = name {
            builder = builder.name(name);
        }
        if let Some(tools) = self.tools.clone() {
            builder = builder.tools(tools);
        }
        if let Some(limit) = self.chain_limit {
            builder = builder.chain_limit(limit);
        }
        builder.build()
    }

    /// `conversation`, or with `--no-log` the same one kept in memory only.
    pub fn recorded_or_not(&self, conversation: Conversation) -> Conversation {
        if self.no_log {
            conversation.without_store()
        } else {
            conversation
        }
    }
}

pub async fn prompt(ctx: &Context, args: PromptArgs) -> Result<ExitCode> {
    ctx.check_name_free(args.conversation.name.as_deref())?;
    let settings = args.turn.settings().await?;
    let stored = ctx.continued(&args.conversation)?;
    if !args.sources.is_empty() {
        if settings.no_log {
            bail!(
                "--source records the turn so it can be explained: it cannot be combined with --no-log"
            );
        }
        if !args.parts.is_empty() {
            bail!(
                "a turn with --source is text: give its fragments as sources (--source ID=@FILE), and attachments in a turn without --source"
            );
        }
        let text = input::turn_text(args.text)?;
        return super::recorded::prompt_with_sources(
            ctx,
            super::recorded::SourcedTurn {
                model: settings.model,
                existing: stored,
                name: args.conversation.name,
                system: settings.system,
                sources: input::sources(args.sources)?,
                tools: settings.tools.unwrap_or_default(),
                chain_limit: settings.chain_limit,
                text,
            },
        )
        .await;
    }
    let (input, configured_model) =
        turn_input(&args.template, args.text, &args.parts, &settings).await?;
    let conversation = match (stored, configured_model) {
        (Some(stored), Some(model)) => {
            Conversation::load(&ctx.store, &stored.id, &model)
                .model(&model)
                .await?
        }
        (Some(stored), None) => open_stored(ctx, &stored, settings.model.as_deref()).await?,
        (None, configured) => {
            let home = match configured {
                Some(model) => model,
                None => home_model(settings.model.clone())?,
            };
            settings.new_conversation(ctx, &home, args.conversation.name)
        }
    };
    let prompt = settings.apply(
        settings.recorded_or_not(conversation).prompt(input),
        settings.system.clone(),
    );
    run_turn(ctx, prompt, &settings, None).await?;
    Ok(ExitCode::SUCCESS)
}

/// What a turn adds (the text, or the configured prompt `-t` names with
/// the text after it) and, with `-t`, the model it runs on.
async fn turn_input(
    template: &TemplateArgs,
    text: Option<String>,
    parts: &PartsArgs,
    settings: &TurnSettings,
) -> Result<(TurnInput, Option<Model>)> {
    if template.template.is_none() {
        return Ok((input::turn_input(text, parts).await?, None));
    }
    let message = input::optional_turn_message(text, parts).await?;
    let configured = template
        .configured(settings.model.as_deref(), message)?
        .expect("-t was given");
    Ok((configured.input, Some(configured.model)))
}

/// `skein prepare`: the request a `prompt` with the same arguments would
/// send, rendered and resolved, with nothing run or recorded. `store` is
/// needed only with `--cid` or `-c`.
pub async fn prepare(
    store: Option<&skein::Store>,
    json: bool,
    args: PrepareArgs,
) -> Result<ExitCode> {
    let settings = args.request.settings(true).await?;
    let (input, configured_model) =
        turn_input(&args.template, args.text, &PartsArgs::default(), &settings).await?;
    let stored = match (store, &args.cid, args.continue_last) {
        (Some(store), Some(cid), _) => Some(store.conversation(&store.resolve_conversation(cid)?)?),
        (Some(store), None, true) => Some(super::latest_conversation(store)?),
        _ => None,
    };
    let conversation = match (stored, store) {
        (Some(stored), Some(store)) => {
            let model = match configured_model {
                Some(model) => model,
                None => turn_model(settings.model.as_deref(), Some(&stored))?,
            };
            Conversation::load(store, &stored.id, &model)
                .model(&model)
                .await?
        }
        _ => {
            let home = match configured_model {
                Some(model) => model,
                None => home_model(settings.model.clone())?,
            };
            let mut builder = home.conversation();
            if let Some(tools) = settings.tools.clone() {
                builder = builder.tools(tools);
            }
            builder.build()
        }
    };
    let prompt = settings.apply(
        conversation.without_store().prompt(input),
        settings.system.clone(),
    );
    super::configured::show_prepared(&prompt.prepare()?, json)
}

pub async fn reply(ctx: &Context, args: ReplyArgs) -> Result<ExitCode> {
    let settings = args.turn.settings().await?;
    let node = ctx.node(&args.node)?;
    let input = input::turn_input(args.text, &args.parts).await?;
    let (conversation, branched) = continue_at(ctx, node, settings.model.as_deref()).await?;
    let note = branched.then(|| {
        format!(
            "node {} is not the head of a conversation: branched into a new conversation",
            node.short()
        )
    });
    let prompt = settings.apply(
        settings.recorded_or_not(conversation).prompt(input),
        settings.system.clone(),
    );
    run_turn(ctx, prompt, &settings, note).await?;
    Ok(ExitCode::SUCCESS)
}

pub async fn fork(ctx: &Context, args: ForkArgs) -> Result<ExitCode> {
    ctx.check_name_free(args.name.as_deref())?;
    if let Some(rerun) = args.from_rerun.clone() {
        // With --from-rerun there is no NODE: a single positional is TEXT.
        let mut args = args;
        if args.text.is_some() {
            anyhow::bail!("with --from-rerun, give only the TEXT of the fork's first turn");
        }
        if !args.parts.is_empty() {
            anyhow::bail!(
                "a fork --from-rerun continues a recorded chat, whose turns are text: -a and -f cannot be used with it"
            );
        }
        args.text = args.node.take();
        return super::recorded::fork_from_rerun(ctx, args, &rerun).await;
    }
    let settings = args.turn.settings().await?;
    if settings.no_log && args.text.is_none() && args.parts.is_empty() {
        bail!(
            "--no-log records nothing, and a fork without TEXT only records a conversation: give TEXT for an unrecorded first turn"
        );
    }
    let node = ctx.node(
        args.node
            .as_deref()
            .expect("clap requires NODE without --from-rerun"),
    )?;
    let mut fork = branch_at(ctx, node, settings.model.as_deref()).await?;
    if let Some(name) = args.name {
        fork = fork.name(name);
    }
    match (args.text, args.parts.is_empty()) {
        (None, true) => {
            let conversation = fork.create().await?;
            if ctx.json {
                return print_json(&ctx.store.conversation(&conversation.id())?);
            }
            outln!("{}", conversation.id().short())?;
            ui::note(format!(
                "forked new conversation {} at node {}; continue it with `skein prompt --cid {} TEXT`",
                conversation.id().short(),
                node.short(),
                conversation.id().short()
            ));
            Ok(ExitCode::SUCCESS)
        }
        (text, _) => {
            let input = input::turn_input(text, &args.parts).await?;
            // Stored with its first turn, and only if that turn succeeds.
            let conversation = settings.recorded_or_not(fork.conversation());
            let note = format!("forked at node {} into conversation", node.short());
            let prompt = settings.apply(conversation.prompt(input), settings.system.clone());
            run_turn(ctx, prompt, &settings, Some(note)).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `-o KEY VALUE` pairs as generation options; an unknown key, a value of
/// the wrong kind or out of range is an error naming what is accepted.
fn generation_options(pairs: &[String]) -> Result<GenerationOptions> {
    let mut map = serde_json::Map::new();
    for pair in pairs.chunks(2) {
        let [key, value] = pair else {
            bail!("-o takes a KEY and a VALUE");
        };
        let value = serde_json::from_str(value)
            .unwrap_or_else(|_| serde_json::Value::String(value.clone()));
        map.insert(key.clone(), value);
    }
    let options: GenerationOptions = serde_json::from_value(serde_json::Value::Object(map))
        .map_err(|error| {
            anyhow::anyhow!("bad -o option: {error} (known: temperature, top_p, seed, max_tokens)")
        })?;
    options
        .check()
        .map_err(|problem| anyhow::anyhow!("bad -o option: {problem}"))?;
    Ok(options)
}

/// A stored conversation to go on with: on the model `-m` names when given
/// (for this turn; the stored settings stay as they are), else on the one
/// it was recorded with.
pub async fn open_stored(
    ctx: &Context,
    stored: &skein::store::ConversationRecord,
    model: Option<&str>,
) -> Result<Conversation> {
    super::tools::start_for(&stored.settings.tools).await?;
    Ok(match model {
        Some(name) => {
            let model = home_model(Some(name.to_string()))?;
            Conversation::load(&ctx.store, &stored.id, &model)
                .model(&model)
                .await?
        }
        None => Conversation::load(&ctx.store, &stored.id, &home_model(None)?).await?,
    })
}

/// Where a turn after `node` runs (`skein reply`, the chat's `!reply`):
/// the turn layer's [`Conversation::reply_at`] (the conversation whose head
/// `node` is, else a new branch there, stored only once its first turn
/// succeeds), on the model `-m` names for this turn when given. `true` when
/// it is such a branch.
pub async fn continue_at(
    ctx: &Context,
    node: skein::NodeId,
    model: Option<&str>,
) -> Result<(Conversation, bool)> {
    start_tools_of_owner(ctx, node).await?;
    let home = home_model(None)?;
    let chosen = model
        .map(|name| home_model(Some(name.to_string())))
        .transpose()?;
    let mut reply = Conversation::reply_at(&ctx.store, node, &home);
    if let Some(model) = &chosen {
        reply = reply.model(model);
    }
    let conversation = reply.await?;
    let branched = !conversation.is_stored();
    Ok((conversation, branched))
}

/// Start the MCP servers whose tools the conversation `node` belongs to
/// offers.
async fn start_tools_of_owner(ctx: &Context, node: skein::NodeId) -> Result<()> {
    if let Some(owner) = skein::conversation::owner_of_node(&ctx.store, node).await? {
        super::tools::start_for(&ctx.store.conversation(&owner)?.settings.tools).await?;
    }
    Ok(())
}

/// A branch at `node` with the settings of the conversation it belongs to
/// (recorded as its origin), on the model `-m` names when given.
pub async fn branch_at(
    ctx: &Context,
    node: skein::NodeId,
    model: Option<&str>,
) -> Result<skein::Fork> {
    start_tools_of_owner(ctx, node).await?;
    Ok(match model {
        Some(name) => {
            let model = home_model(Some(name.to_string()))?;
            Conversation::fork_at(&ctx.store, node, &model)
                .model(&model)
                .await?
                .model(&model)
        }
        None => Conversation::fork_at(&ctx.store, node, &home_model(None)?).await?,
    })
}

/// The model a turn runs on: the one `-m` names, else the one `stored`
/// was recorded with, else the default.
pub fn turn_model(
    model: Option<&str>,
    stored: Option<&skein::store::ConversationRecord>,
) -> Result<Model> {
    match (model, stored) {
        (Some(name), _) => home_model(Some(name.to_string())),
        (None, Some(stored)) => Ok(Model::of_conversation(stored, &home_model(None)?)?),
        (None, None) => home_model(None),
    }
}

/// The model named on the command line, else the default, as every
/// surface opens one ([`skein::home::open_model`]), with the command's
/// tools registered.
pub fn home_model(name: Option<String>) -> Result<Model> {
    Ok(skein::home::open_model(
        name.as_deref(),
        super::tools::registered()?,
    )?)
}

/// The engine over the configured engine directory (prompts, profiles,
/// backends), built once.
pub fn configured_engine() -> Result<Option<skein::Engine>> {
    Ok(skein::home::configured_engine(super::tools::registered()?)?.cloned())
}

impl ToolArgs {
    /// The tools named with `-T`, or `None` when none were named.
    pub async fn resolve(&self) -> Result<Option<Vec<Arc<dyn Tool>>>> {
        if self.tools.is_empty() {
            return Ok(None);
        }
        super::tools::named(&self.tools).await.map(Some)
    }
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
    let asked = prompt.conversation().id().clone();
    let branched_from = prompt
        .conversation()
        .origin()
        .and_then(|origin| origin.conversation.clone());
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
    let joined = branched_from.as_ref() == Some(&conversation.id());
    let moved_on = (!joined && conversation.id() != asked).then_some(&asked);
    if joined {
        ui::note(format!(
            "the model gave the same answer conversation {} already ends with: no branch was made (the run is recorded there)",
            conversation.id().short()
        ));
    } else if let Some(note) = note {
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
            "joined": joined,
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
