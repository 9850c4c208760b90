/*!
The configuration file as the command line uses it. The file itself (its
format, where it lives, the default model's precedence) is the facade's
[`skein::config`], which every surface reads; here it becomes the
command line's tools, MCP servers and engine directory, with errors that
name the file.
*/

use anyhow::Context as _;
use anyhow::{Result, bail};
pub use skein::config::{
    ANY_MODEL, CommandLine, McpServerConfig, Source, default_model, get, path, prices,
    set_default_model,
};
use std::path::PathBuf;

/// The command tools the configuration file declares.
pub fn command_tools() -> Result<Vec<skein::command::CommandTool>> {
    get()?
        .tools
        .iter()
        .map(|(name, tool)| {
            let schema = serde_json::to_value(&tool.schema)
                .with_context(|| format!("tool `{name}`'s schema in {}", path_shown()))?;
            let mut command = skein::command::CommandTool::new(
                name,
                &tool.description,
                tool.command.clone(),
                schema,
            )
            .with_context(|| format!("in {}", path_shown()))?;
            if let Some(seconds) = tool.timeout {
                command = command.timeout(std::time::Duration::from_secs(seconds.max(1)));
            }
            Ok(command)
        })
        .collect()
}

/// The MCP servers the configuration file declares (none starts yet).
pub fn mcp_servers() -> Result<Vec<skein::mcp::McpServer>> {
    get()?
        .mcp
        .servers
        .iter()
        .map(|(name, server)| {
            mcp_server(name, server)
                .with_context(|| format!("[mcp.servers.{name}] in {}", path_shown()))
        })
        .collect()
}

fn mcp_server(name: &str, config: &McpServerConfig) -> Result<skein::mcp::McpServer> {
    use skein::mcp::{McpServer, Transport};
    let transport = match (&config.command, &config.url) {
        (Some(command), None) => {
            if !config.headers.is_empty() {
                bail!("`headers` are for a server with a `url`");
            }
            let mut words = match command {
                CommandLine::Program(program) => vec![program.clone()],
                CommandLine::Words(words) => words.clone(),
            };
            words.extend(config.args.iter().cloned());
            Transport::Stdio {
                command: words,
                env: config.env.clone(),
                cwd: config.cwd.clone(),
            }
        }
        (None, Some(url)) => {
            if !config.args.is_empty() || !config.env.is_empty() || config.cwd.is_some() {
                bail!("`args`, `env` and `cwd` are for a server with a `command`");
            }
            Transport::Http {
                url: url.clone(),
                headers: config.headers.clone(),
            }
        }
        (Some(_), Some(_)) => bail!("give a `command` or a `url`, not both"),
        (None, None) => bail!("give a `command` (a stdio server) or a `url` (streamable HTTP)"),
    };
    let mut server = McpServer::new(name, transport)?;
    if let Some(seconds) = config.timeout {
        server = server.timeout(std::time::Duration::from_secs(seconds.max(1)));
    }
    Ok(server)
}

pub fn path_shown() -> String {
    path().map_or_else(
        |_| "the configuration file".to_string(),
        |path| path.display().to_string(),
    )
}

/// The engine directory, when one is configured (or the default one,
/// `engine/` beside the configuration file, exists).
pub fn engine_dir() -> Result<Option<PathBuf>> {
    let dir = get()?.engine_dir();
    if let Some(dir) = &dir
        && !dir.is_dir()
    {
        bail!(
            "the engine directory {} named in {} does not exist: create it (prompts/, profiles.toml, backends.toml) or remove the `engine` key",
            dir.display(),
            path()?.display()
        );
    }
    Ok(dir)
}
