/*!
The tools the command line can offer (`-T NAME`): the built-in ones, the
command tools the configuration file declares (`[tools.NAME]`) and the
tools of MCP servers (`[mcp.servers.NAME]` in the configuration file, or
`--mcp NAME=...`); and `skein tools`, which lists them with the hash of
each one's input schema (what schema-drift warnings compare).

An MCP server starts only when a command needs its tools: when `-T`
names it, when a conversation being continued offered its tools (a tool
named `SERVER__TOOL`), or when `skein tools` lists everything. The tools
of the servers started so far are registered with every model the command
opens, so a stored conversation finds its tools by name.
*/

use super::print_json;
use crate::flags::{McpArgs, McpTarget};
use crate::ui::outln;
use anyhow::{Context as _, Result, anyhow, bail};
use serde::Serialize;
use skein::Tool;
use skein::mcp::{McpServer, McpTool, Transport, names};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};

/// Where a tool comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Builtin,
    Command,
    Mcp,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Builtin => "builtin",
            Kind::Command => "command",
            Kind::Mcp => "mcp",
        }
    }
}

/// Every tool this process can offer.
struct Registry {
    /// Built-in and command tools.
    fixed: Vec<(Kind, Arc<dyn Tool>)>,
    /// The MCP servers declared: the configuration file's, then the
    /// command line's (which replace those of the same name).
    servers: Vec<McpServer>,
    /// The tools of each server started so far.
    started: Mutex<Vec<(String, Vec<McpTool>)>>,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

/// Declare the command line's MCP servers beside the configuration's.
/// Called once, before any tool is looked up.
pub fn declare(flags: &McpArgs) -> Result<()> {
    let registry = build(flags)?;
    if REGISTRY.set(registry).is_err() {
        bail!("the tools were looked up before the command line's MCP servers were declared");
    }
    Ok(())
}

fn registry() -> Result<&'static Registry> {
    if let Some(registry) = REGISTRY.get() {
        return Ok(registry);
    }
    let registry = build(&McpArgs::default())?;
    Ok(REGISTRY.get_or_init(|| registry))
}

fn build(flags: &McpArgs) -> Result<Registry> {
    let mut fixed: Vec<(Kind, Arc<dyn Tool>)> = skein::builtin::all()
        .into_iter()
        .map(|tool| (Kind::Builtin, tool))
        .collect();
    for tool in crate::config::command_tools()? {
        if fixed
            .iter()
            .any(|(_, known)| known.spec().name == tool.spec().name)
        {
            bail!(
                "the configuration declares a tool `{}`, which is a built-in tool's name: name it differently",
                tool.spec().name
            );
        }
        fixed.push((Kind::Command, Arc::new(tool)));
    }
    let mut servers = crate::config::mcp_servers()?;
    for (name, target) in &flags.servers {
        let transport = match target {
            McpTarget::Command(words) => Transport::stdio(words.iter().cloned()),
            McpTarget::Url(url) => Transport::http(url.clone()),
        };
        let server =
            McpServer::new(name.clone(), transport).with_context(|| format!("--mcp {name}=..."))?;
        servers.retain(|known| known.name() != name);
        servers.push(server);
    }
    Ok(Registry {
        fixed,
        servers,
        started: Mutex::new(Vec::new()),
    })
}

impl Registry {
    fn server(&self, name: &str) -> Option<&McpServer> {
        self.servers.iter().find(|server| server.name() == name)
    }

    fn started(&self) -> std::sync::MutexGuard<'_, Vec<(String, Vec<McpTool>)>> {
        self.started
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// The tools of `server`, starting it the first time.
    async fn start(&self, server: &McpServer) -> Result<Vec<McpTool>> {
        if let Some((_, tools)) = self
            .started()
            .iter()
            .find(|(name, _)| name == server.name())
        {
            return Ok(tools.clone());
        }
        let tools = server.tools().await?;
        for tool in &tools {
            if self
                .fixed
                .iter()
                .any(|(_, known)| known.spec().name == tool.spec().name)
            {
                bail!(
                    "MCP server `{}` has a tool offered as `{}`, which is the name of a built-in or configured tool: rename one",
                    server.name(),
                    tool.spec().name
                );
            }
        }
        self.started()
            .push((server.name().to_string(), tools.clone()));
        Ok(tools)
    }

    /// The built-in, command and started MCP tools.
    fn registered(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools: Vec<Arc<dyn Tool>> =
            self.fixed.iter().map(|(_, tool)| tool.clone()).collect();
        for (_, started) in self.started().iter() {
            tools.extend(started.iter().map(shared));
        }
        tools
    }

    /// The tools one `-T` value names.
    async fn resolve(&self, name: &str) -> Result<Vec<Arc<dyn Tool>>> {
        if let Some((server, tool)) = name.split_once('.') {
            let Some(declared) = self.server(server) else {
                bail!(
                    "`-T {name}` names no MCP server `{server}`{}; declare it as [mcp.servers.{server}] in the configuration file or with --mcp {server}=COMMAND",
                    self.declared_note()
                );
            };
            let tools = self.start(declared).await?;
            if tool == "*" {
                return Ok(tools.iter().map(shared).collect());
            }
            return tools
                .iter()
                .find(|known| known.remote_name() == tool || known.spec().name == tool)
                .map(|found| vec![shared(found)])
                .ok_or_else(|| {
                    anyhow!(
                        "MCP server `{server}` has no tool `{tool}`; it has: {}",
                        tools
                            .iter()
                            .map(|tool| tool.remote_name().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                });
        }
        if let Some((_, tool)) = self.fixed.iter().find(|(_, tool)| tool.spec().name == name) {
            return Ok(vec![tool.clone()]);
        }
        if let Some(declared) = names::server_of(name).and_then(|server| self.server(server)) {
            let tools = self.start(declared).await?;
            if let Some(found) = tools.iter().find(|tool| tool.spec().name == name) {
                return Ok(vec![shared(found)]);
            }
        }
        if self.server(name).is_some() {
            bail!(
                "`{name}` is an MCP server: offer its tools with `-T {name}.*`, or one with `-T {name}.TOOL`"
            );
        }
        bail!(
            "unknown tool `{name}`; available: {}{} (`skein tools` lists them; \
             declare command tools as [tools.NAME] in the configuration file)",
            self.fixed
                .iter()
                .map(|(_, tool)| tool.spec().name.clone())
                .collect::<Vec<_>>()
                .join(", "),
            self.declared_note()
        )
    }

    fn declared_note(&self) -> String {
        if self.servers.is_empty() {
            return String::new();
        }
        format!(
            "; MCP servers: {}",
            self.servers
                .iter()
                .map(|server| format!("{} (-T {}.*)", server.name(), server.name()))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

fn shared(tool: &McpTool) -> Arc<dyn Tool> {
    Arc::new(tool.clone())
}

/// Every tool that models opened by this command register: the built-in
/// and command tools, and the tools of the MCP servers started so far.
pub fn registered() -> Result<Vec<Arc<dyn Tool>>> {
    Ok(registry()?.registered())
}

/// The tools `-T` names, in order, each once; an unknown name is an error
/// listing what there is.
pub async fn named(names: &[String]) -> Result<Vec<Arc<dyn Tool>>> {
    let registry = registry()?;
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for name in names {
        for tool in registry.resolve(name).await? {
            if !tools
                .iter()
                .any(|known| known.spec().name == tool.spec().name)
            {
                tools.push(tool);
            }
        }
    }
    Ok(tools)
}

/// Start the MCP servers whose tools `names` (stored tool names, as a
/// model saw them) include, so that models opened afterwards register
/// them. Names of no declared server are left for the library to report.
pub async fn start_for<'a>(names: impl IntoIterator<Item = &'a String>) -> Result<()> {
    let registry = registry()?;
    for name in names {
        if let Some(server) = names::server_of(name).and_then(|server| registry.server(server)) {
            registry.start(server).await?;
        }
    }
    Ok(())
}

/// Close the connections of the MCP servers this command started.
pub async fn close() {
    if let Some(registry) = REGISTRY.get() {
        for server in &registry.servers {
            server.close().await;
        }
    }
}

#[derive(Serialize)]
struct Listed {
    name: String,
    kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    description: String,
    schema_hash: String,
    input_schema: serde_json::Value,
}

fn listed(kind: Kind, server: Option<&str>, tool: &dyn Tool) -> Listed {
    let spec = tool.spec();
    Listed {
        name: spec.name.clone(),
        kind,
        server: server.map(str::to_string),
        description: spec.description.clone(),
        schema_hash: spec.schema_hash().to_hex(),
        input_schema: spec.input_schema.clone(),
    }
}

/// `skein tools`: every tool, each declared MCP server started to list
/// its own. A server that cannot be started is reported after the list,
/// and the command fails.
pub async fn list(json: bool) -> Result<ExitCode> {
    let registry = registry()?;
    let mut all: Vec<Listed> = registry
        .fixed
        .iter()
        .map(|(kind, tool)| listed(*kind, None, tool.as_ref()))
        .collect();
    let mut failures = Vec::new();
    for server in &registry.servers {
        match registry.start(server).await {
            Ok(tools) => all.extend(
                tools
                    .iter()
                    .map(|tool| listed(Kind::Mcp, Some(server.name()), tool)),
            ),
            Err(error) => failures.push(format!("{error:#}")),
        }
    }
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
