/*!
`skein tools`: every tool `-T` can offer (built in, command tools and MCP
servers' tools, each declared server started to list its own), with the
hash of each one's input schema (what schema-drift warnings compare).
*/

use super::common::context::{Globals, print_json};
use super::common::tools::{McpArgs, declare, every_tool};
use crate::ui::outln;
use anyhow::{Result, bail};
use clap::Args;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ToolsArgs {
    #[command(flatten)]
    pub mcp: McpArgs,
}

/// `skein tools`: every tool, each declared MCP server started to list
/// its own. A server that cannot be started is reported after the list,
/// and the command fails.
pub async fn run(globals: &Globals, args: ToolsArgs) -> Result<ExitCode> {
    declare(&args.mcp)?;
    let json = globals.json;
    let (all, failures) = every_tool().await?;
    if json {
        print_json(&all)?;
    } else {
        // Names differ in length: pad them to the longest so every
        // column starts at one place.
        let width = all
            .iter()
            .map(|tool| tool.name.chars().count())
            .max()
            .unwrap_or(0);
        for tool in &all {
            outln!(
                "{:<width$}  {:<7} schema {}  {}",
                tool.name,
                tool.kind.as_str(),
                &tool.schema_hash[..12],
                crate::ui::one_line(&tool.description, 120)
            )?;
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    Ok(ExitCode::SUCCESS)
}
