/*!
The tools the command line can offer (`-T NAME`): the built-in ones and the
command tools the configuration file declares (`[tools.NAME]`); and `skein
tools`, which lists them with the hash of each one's input schema (what
schema-drift warnings compare).
*/

use super::print_json;
use crate::ui::outln;
use anyhow::{Result, bail};
use serde::Serialize;
use skein::Tool;
use std::process::ExitCode;
use std::sync::Arc;

/// Where a tool comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Builtin,
    Command,
}

/// Every tool `-T` can name, with where it comes from. A configured tool
/// may not take a built-in tool's name.
pub fn available() -> Result<Vec<(Kind, Arc<dyn Tool>)>> {
    let mut tools: Vec<(Kind, Arc<dyn Tool>)> = skein::builtin::all()
        .into_iter()
        .map(|tool| (Kind::Builtin, tool))
        .collect();
    for tool in crate::config::command_tools()? {
        if tools
            .iter()
            .any(|(_, known)| known.spec().name == tool.spec().name)
        {
            bail!(
                "the configuration declares a tool `{}`, which is a built-in tool's name: name it differently",
                tool.spec().name
            );
        }
        tools.push((Kind::Command, Arc::new(tool)));
    }
    Ok(tools)
}

/// Every tool `-T` can name.
pub fn registered() -> Result<Vec<Arc<dyn Tool>>> {
    Ok(available()?.into_iter().map(|(_, tool)| tool).collect())
}

/// The tools named, in order; an unknown name is an error listing them.
pub fn named(names: &[String]) -> Result<Vec<Arc<dyn Tool>>> {
    let tools = registered()?;
    names
        .iter()
        .map(|name| {
            tools
                .iter()
                .find(|tool| tool.spec().name == *name)
                .cloned()
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "unknown tool `{name}`; available: {} (`skein tools` lists them; \
                         declare command tools as [tools.NAME] in the configuration file)",
                        tools
                            .iter()
                            .map(|tool| tool.spec().name.clone())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
        })
        .collect()
}

#[derive(Serialize)]
struct Listed {
    name: String,
    kind: Kind,
    description: String,
    schema_hash: String,
    input_schema: serde_json::Value,
}

/// `skein tools`.
pub fn list(json: bool) -> Result<ExitCode> {
    let listed: Vec<Listed> = available()?
        .into_iter()
        .map(|(kind, tool)| {
            let spec = tool.spec();
            Listed {
                name: spec.name.clone(),
                kind,
                description: spec.description.clone(),
                schema_hash: spec.schema_hash().to_hex(),
                input_schema: spec.input_schema.clone(),
            }
        })
        .collect();
    if json {
        return print_json(&listed);
    }
    for tool in &listed {
        outln!(
            "{}  {:<8} schema {}  {}",
            tool.name,
            match tool.kind {
                Kind::Builtin => "builtin",
                Kind::Command => "command",
            },
            &tool.schema_hash[..12],
            tool.description
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
