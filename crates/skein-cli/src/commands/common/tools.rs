/*!
The tools the command line can offer (`-T NAME`): the built-in ones, the
command tools the configuration file declares (`[tools.NAME]`) and the
tools of MCP servers (`[mcp.servers.NAME]` in the configuration file, or
`--mcp NAME=...`) (what `skein tools` lists); and `-T`/`--chain-limit`
([`ToolArgs`]) and `--mcp` ([`McpArgs`]), the options that name them.

An MCP server starts only when a command needs its tools: when `-T`
names it, when a conversation being continued offered its tools (a tool
named `SERVER__TOOL`), or when `skein tools` lists everything. The tools
of the servers started so far are registered with every model the command
opens, so a stored conversation finds its tools by name.
*/

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use serde::Serialize;
use skein::Tool;
use skein::mcp::{McpServer, McpTool, Transport, names};
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug, Args)]
pub struct ToolArgs {
    /// Offer a tool (repeatable): a built-in one (`skein_time`,
    /// `skein_version`), a command tool declared in the configuration
    /// file, `SERVER.*` for every tool of an MCP server or `SERVER.TOOL`
    /// for one (`skein tools` lists them); the turn becomes a tool loop
    #[arg(short = 'T', long = "tool", value_name = "NAME")]
    pub tools: Vec<String>,
    /// At most N model calls per tool loop (default 10)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub chain_limit: Option<u32>,
    #[command(flatten)]
    pub mcp: McpArgs,
}

/// MCP servers declared on the command line.
#[derive(Clone, Debug, Default, Args)]
pub struct McpArgs {
    /// Declare an MCP server (repeatable) for this command, as NAME=URL
    /// (streamable HTTP) or NAME=COMMAND (stdio; the program and its
    /// arguments, split at spaces); it replaces a server of that name in
    /// the configuration file. Offer its tools with `-T NAME.*`
    #[arg(long = "mcp", value_name = "NAME=COMMAND|URL", value_parser = parse_mcp)]
    pub servers: Vec<(String, McpTarget)>,
}

/// Where an MCP server named on the command line is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTarget {
    Command(Vec<String>),
    Url(String),
}

/// `NAME=URL` or `NAME=COMMAND ARGS...`.
fn parse_mcp(value: &str) -> Result<(String, McpTarget), String> {
    let (name, target) = value
        .split_once('=')
        .ok_or_else(|| format!("`{value}` is not NAME=COMMAND or NAME=URL"))?;
    let name = name.trim();
    if let Some(problem) = names::server_name_problem(name) {
        return Err(format!("`{name}` cannot name an MCP server: {problem}"));
    }
    let target = target.trim();
    let target = if target.starts_with("http://") || target.starts_with("https://") {
        McpTarget::Url(target.to_string())
    } else {
        let words: Vec<String> = target.split_whitespace().map(str::to_string).collect();
        if words.is_empty() {
            return Err(format!("`{value}` names no command or URL for `{name}`"));
        }
        McpTarget::Command(words)
    };
    Ok((name.to_string(), target))
}

impl ToolArgs {
    /// The tools named with `-T`, or `None` when none were named.
    pub async fn resolve(&self) -> Result<Option<Vec<Arc<dyn Tool>>>> {
        if self.tools.is_empty() {
            return Ok(None);
        }
        named(&self.tools).await.map(Some)
    }
}

/// Where a tool comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Builtin,
    Command,
    Mcp,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
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
            return Err(crate::exit::usage(format!(
                "`{name}` is an MCP server: offer its tools with `-T {name}.*`, or one with `-T {name}.TOOL`"
            )));
        }
        Err(crate::exit::usage(format!(
            "unknown tool `{name}`; available: {}{} (`skein tools` lists them; \
             declare command tools as [tools.NAME] in the configuration file)",
            self.fixed
                .iter()
                .map(|(_, tool)| tool.spec().name.clone())
                .collect::<Vec<_>>()
                .join(", "),
            self.declared_note()
        )))
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

/// One tool as `skein tools` lists it.
#[derive(Serialize)]
pub struct Listed {
    pub name: String,
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    pub description: String,
    pub schema_hash: String,
    pub input_schema: serde_json::Value,
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

/// Every tool, each declared MCP server started to list its own, and
/// what went wrong starting the servers that could not be.
pub async fn every_tool() -> Result<(Vec<Listed>, Vec<String>)> {
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
    Ok((all, failures))
}
