/*!
The engine directory's prompts, profiles and backends (`engine = DIR` in
the configuration file, else the default one `skein prompt --save` makes:
[`super::engine_dir`]) as the commands find them (`skein inspect` shows them), and `-t PROMPT_ID
[-p NAME VALUE]...` ([`TemplateArgs`], of `prompt` and `prepare`), which
makes a turn render a configured prompt (a template), offering the tools
it names when `-T` names none; and printing a prepared request.

A configured prompt's turn runs on the model `-m` names, else on the
prompt's default profile, else on the default model (seed 002, decision 2:
a follow-up prompt's settings are resolved afresh, never inherited from the
conversation it continues). A model name that is not a profile is opened on
an engine that also holds the directory, so the prompt can be rendered for
it.
*/

use super::context::print_json;
use super::model::{configured_engine, home_model};
use super::turn_options::{PartsArgs, TurnSettings};
use crate::exit::{ExitWith, NOT_FOUND};
use crate::input;
use crate::ui::outln;
use anyhow::{Result, anyhow, bail};
use clap::Args;
use skein::engine::config::PromptDef;
use skein::{Engine, Message, Model, TurnInput};
use std::process::ExitCode;

/// A configured prompt of the engine directory, with its variables.
#[derive(Debug, Args)]
pub struct TemplateArgs {
    /// Render this template: a configured prompt of the engine directory (`prompt --save` makes
    /// one; `ID@VERSION` for another version than the newest); TEXT, if any, follows its
    /// messages. Its model: -m, else the prompt's default profile, else the default model
    #[arg(
        short = 't',
        long = "template",
        value_name = "PROMPT_ID",
        conflicts_with = "system"
    )]
    pub template: Option<String>,
    /// A variable of the configured prompt (repeatable); a VALUE that is valid JSON is JSON
    #[arg(
        short = 'p',
        long = "param",
        num_args = 2,
        value_names = ["NAME", "VALUE"],
        requires = "template",
        allow_negative_numbers = true
    )]
    pub params: Vec<String>,
}

pub fn cache_name(hint: skein::core::CacheHint) -> String {
    serde_json::to_value(hint)
        .ok()
        .and_then(|value| value.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{hint:?}"))
}

/// A turn rendering a configured prompt: the model it runs on and what it
/// adds after the history.
pub struct Configured {
    pub model: Model,
    pub input: TurnInput,
    /// The tools the prompt names (`tools = [...]`, as `-T` names them).
    pub tools: Vec<String>,
}

impl TemplateArgs {
    /// The configured prompt `-t` names, with `-p`'s variables and `text`
    /// after its messages, on the model `model` (`-m`) names, else the
    /// prompt's default profile, else the default model. `None` without
    /// `-t`.
    pub fn configured(
        &self,
        model: Option<&str>,
        message: Option<Message>,
    ) -> Result<Option<Configured>> {
        let Some(template) = &self.template else {
            return Ok(None);
        };
        let engine = engine()?;
        let (id, version) = prompt_id(template)?;
        let prompt = find_prompt(&engine, id, version)?;
        let mut input = TurnInput::configured(id);
        if let Some(version) = version {
            input = input.version(version);
        }
        for pair in self.params.chunks(2) {
            let [name, value] = pair else {
                bail!("-p takes a NAME and a VALUE");
            };
            if !prompt.variables.iter().any(|v| v.name == *name) {
                let declared: Vec<&str> =
                    prompt.variables.iter().map(|v| v.name.as_str()).collect();
                return Err(crate::exit::usage(format!(
                    "prompt `{}` declares no variable `{name}`, so -p {name} cannot set it \
                     (declared: {})",
                    prompt.id,
                    if declared.is_empty() {
                        "none".to_string()
                    } else {
                        declared.join(", ")
                    }
                )));
            }
            let value = serde_json::from_str(value)
                .unwrap_or_else(|_| serde_json::Value::String(value.clone()));
            input = input.var(name.clone(), value);
        }
        if let Some(message) = message {
            input = input.message(message);
        }
        let name = model.map(str::to_string).or(prompt.default_profile.clone());
        let model = home_model(name)?;
        Ok(Some(Configured {
            model,
            input,
            tools: prompt.tools.clone(),
        }))
    }
}

/// The configured engine, or an error (exit code 3) saying how to make
/// one.
pub fn engine() -> Result<Engine> {
    configured_engine()?.ok_or_else(|| {
        anyhow::Error::new(ExitWith(
            NOT_FOUND,
            format!(
                "there is no engine directory yet, so no templates, profiles or aliases: save a \
                 template with `skein prompt … --save NAME` or an alias with `skein aliases set` \
                 (they go into {}), or name a directory of prompts, profiles and backends with \
                 `engine = \"DIR\"` in the configuration file ({})",
                skein::config::default_engine_dir().map_or_else(
                    |_| "the engine directory".into(),
                    |p| p.display().to_string()
                ),
                crate::config::path_shown()
            ),
        ))
    })
}

/// `ID` or `ID@VERSION`.
pub fn prompt_id(text: &str) -> Result<(&str, Option<u32>)> {
    match text.rsplit_once('@') {
        Some((id, version)) => {
            let version = version
                .parse()
                .map_err(|_| anyhow!("`{text}`: the version after `@` must be a number"))?;
            Ok((id, Some(version)))
        }
        None => Ok((text, None)),
    }
}

pub fn find_prompt<'e>(
    engine: &'e Engine,
    id: &str,
    version: Option<u32>,
) -> Result<&'e PromptDef> {
    engine
        .catalog()
        .find_prompt(id, version)
        .ok_or_else(|| match version {
            Some(version) if engine.catalog().find_prompt(id, None).is_some() => {
                let versions = engine
                    .inspect_prompt(id, None)
                    .map(|i| {
                        i.versions
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                anyhow::Error::new(ExitWith(
                    NOT_FOUND,
                    format!("prompt `{id}` has no version {version} (versions: {versions})"),
                ))
            }
            _ => unknown("prompt", id, engine.catalog().prompt_ids()),
        })
}

/// Exit code 3: no such thing, and what there is.
pub fn unknown<'a>(what: &str, name: &str, known: impl Iterator<Item = &'a str>) -> anyhow::Error {
    let known: Vec<&str> = known.collect();
    anyhow::Error::new(ExitWith(
        NOT_FOUND,
        format!(
            "the engine directory has no {what} `{name}` (known: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ),
    ))
}

/// Print a prepared request: what it runs on, then every message with its
/// annotations.
pub fn show_prepared(prepared: &skein::engine::Prepared, json: bool) -> Result<ExitCode> {
    let messages: Vec<serde_json::Value> = prepared
        .thread
        .nodes()
        .into_iter()
        .map(|node| {
            let annotations: Vec<serde_json::Value> = (0..node.message().parts.len() as u32)
                .filter_map(|part| {
                    let list = prepared.annotations.get(node.id(), part);
                    (!list.is_empty())
                        .then(|| serde_json::json!({"part": part, "annotations": list}))
                })
                .collect();
            serde_json::json!({
                "node": node.id(),
                "role": node.message().role,
                "parts": node.message().parts,
                "annotations": annotations,
            })
        })
        .collect();
    if json {
        let mut value = serde_json::to_value(prepared)?;
        if let Some(fields) = value.as_object_mut() {
            fields.insert("messages".into(), serde_json::Value::Array(messages));
        }
        return print_json(&value);
    }
    let prompt = prepared
        .prompt
        .as_ref()
        .map(|p| format!("prompt {} (version {}) · ", p.id, p.version))
        .unwrap_or_default();
    outln!(
        "{prompt}profile {} · backend {} · model {}",
        prepared.profile,
        prepared.backend,
        prepared.model
    )?;
    let options = serde_json::to_value(&prepared.options)?;
    if options.as_object().is_some_and(|o| !o.is_empty()) {
        outln!("options: {options}")?;
    }
    if let Some(session) = &prepared.session_id {
        outln!("session id: {session}")?;
    }
    if !prepared.tools.is_empty() {
        let names: Vec<&str> = prepared.tools.iter().map(|t| t.name.as_str()).collect();
        outln!("tools: {}", names.join(", "))?;
    }
    if let Some(contract) = &prepared.output_contract {
        outln!("output contract: {contract}")?;
    }
    for (index, node) in prepared.thread.nodes().into_iter().enumerate() {
        let mut notes = Vec::new();
        for part in 0..node.message().parts.len() as u32 {
            for annotation in prepared.annotations.get(node.id(), part) {
                notes.push(match annotation {
                    skein::core::Annotation::CacheHint(hint) => {
                        format!("cache {} on part {part}", cache_name(*hint))
                    }
                    skein::core::Annotation::Source(source) => {
                        format!("source {source} on part {part}")
                    }
                    other => format!("{other:?} on part {part}"),
                });
            }
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!(" · {}", notes.join(", "))
        };
        outln!(
            "\n[{index}] {} {}{notes}",
            node.id().short(),
            node.message().role
        )?;
        for part in &node.message().parts {
            match part {
                skein::Part::Text { text } => outln!("{text}")?,
                other => outln!(
                    "{}",
                    skein::store::preview(
                        &Message::new(node.message().role, vec![other.clone()]),
                        200
                    )
                )?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a turn adds (the text, or the configured prompt `-t` names with
/// the text after it) and, with `-t`, the model it runs on; the tools the
/// prompt names become the turn's when `-T` names none.
pub async fn turn_input(
    template: &TemplateArgs,
    text: Option<String>,
    parts: &PartsArgs,
    settings: &mut TurnSettings,
) -> Result<(TurnInput, Option<Model>)> {
    if template.template.is_none() {
        return Ok((input::turn_input(text, parts).await?, None));
    }
    let message = input::optional_turn_message(text, parts).await?;
    let configured = template
        .configured(settings.model.as_deref(), message)?
        .expect("-t was given");
    if settings.tools.is_none() && !configured.tools.is_empty() {
        settings.tools = Some(super::tools::named(&configured.tools).await?);
    }
    Ok((configured.input, Some(configured.model)))
}
