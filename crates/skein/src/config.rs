/*!
The user's configuration file, read the same way by every surface that
opens skein for a user (the command line, the web view and chat REPL it
runs, and the Python package): `config.toml` in the user's config
directory (`skein config path` prints it; `SKEIN_CONFIG` points
elsewhere), with the keys `skein keys` saves beside it (`keys.json`).
Every key is optional:

```toml
default_model = "smollm2"          # what -m defaults to (`skein models default NAME` sets it)
db = "/home/me/notes/skein.db"     # the database when neither --db nor SKEIN_DB is given
db_read = "postgres://replica/skein"  # a standby of `db` that what only shows reads from
engine = "/home/me/.config/skein/engine"  # prompts/, profiles.toml, backends.toml (default:
                                   # `engine/` beside this file, once `skein prompt --save`
                                   # or `skein aliases set` has made it)

[tools.upper]                      # a command tool, offered with `-T upper`
command = ["tr", "a-z", "A-Z"]     # the program and its arguments (no shell)
description = "Upper-case the JSON it is given"
schema = { type = "object", properties = { text = { type = "string" } } }
timeout = 30                       # seconds (default 30)

[proxy]                            # `skein serve --proxy`
client_keys = "/home/me/.config/skein/clients"  # one client a line, `NAME KEY` (chmod 600), each
                                   # kept apart from the others; --client-keys overrides it

[proxy.models]                     # the model clients ask for -> the model that answers
"gpt-4o-mini" = "openai:gpt-4o-mini"
"claude-haiku" = "anthropic:claude-haiku-4-5"
"*" = "smollm2"                    # any other name (or none); -m overrides it

[mcp.servers.files]                # an MCP server over stdio: `-T files.*`, `-T files.read_file`
command = "npx"                    # the program (or an array: the program and its arguments)
args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
env = { LOG_LEVEL = "warn" }       # added to skein's environment
timeout = 60                       # seconds to start, and to answer a call (default 60)

[mcp.servers.search]               # an MCP server over streamable HTTP
url = "https://example.com/mcp"
headers = { Authorization = "Bearer ..." }

[prices."my-model"]                # US dollars per million tokens: adds to or overrides the
input = 0.5                        # built-in table (`skein::core::price`); cache_read and
output = 1.5                       # cache_write default to the input price
cache_read = 0.05

[otel]                             # OpenTelemetry export of every turn (`skein::telemetry`)
endpoint = "http://localhost:4318" # the OTLP collector; OTEL_EXPORTER_OTLP_ENDPOINT and --otlp win
protocol = "http/protobuf"         # or "grpc" (e.g. endpoint = "http://localhost:4317")
headers = { "x-api-key" = "..." }  # sent with every export
content = false                    # true: prompts, replies, tool arguments and results too

[privacy]
erased_placeholder = "[erased]"    # sent to a model where a history holds erased content
                                   # (`skein redact`); unset: such a turn is refused
```

Precedence, for each setting: the command line, then the environment
(`SKEIN_MODEL`, `SKEIN_DB`), then this file, then the built-in default.
A profile named in the engine directory is usable wherever a model name is
(`-m my-profile`).
*/

use serde::{Deserialize, Serialize};
use skein_core::price::{Price, PriceTable};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Why the configuration could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot find your config directory: set SKEIN_CONFIG to a file path")]
    NoConfigDir,
    #[error(
        "the configuration file {} is not valid: {message}fix it, or move it away to use the defaults",
        .path.display()
    )]
    Invalid { path: PathBuf, message: String },
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the configuration: {0}")]
    Encode(String),
}

/// The built-in default model.
pub const BUILT_IN_MODEL: &str = "smollm2";

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db: Option<PathBuf>,
    /// A PostgreSQL standby of `db` that commands which only read and the
    /// web view read from (docs/postgres.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_read: Option<String>,
    /// A directory of prompts, profiles and backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<PathBuf>,
    /// Command tools, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolConfig>,
    /// The recording proxy's settings.
    #[serde(default, skip_serializing_if = "ProxyConfig::is_empty")]
    pub proxy: ProxyConfig,
    /// Model Context Protocol servers.
    #[serde(default, skip_serializing_if = "McpConfig::is_empty")]
    pub mcp: McpConfig,
    /// How long conversations are kept (`skein gc` applies it).
    #[serde(default, skip_serializing_if = "Retention::is_empty")]
    pub retention: Retention,
    /// Prices per model, over the built-in table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
    /// OpenTelemetry export.
    #[serde(default, skip_serializing_if = "OtelConfig::is_empty")]
    pub otel: OtelConfig,
    /// What model calls do with erased content.
    #[serde(default, skip_serializing_if = "Privacy::is_empty")]
    pub privacy: Privacy,
}

/// `[privacy]`: what a model call whose history holds erased content
/// (`skein redact`) sends.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Privacy {
    /// Sent in each erased part's place; unset, such a call is refused
    /// (`skein_engine::erased`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erased_placeholder: Option<String>,
}

impl Privacy {
    fn is_empty(&self) -> bool {
        self.erased_placeholder.is_none()
    }
}

/// `[retention]`: conversations `skein gc` (and `skein serve`, every
/// `every`) deletes, with what only they used, as `skein delete` does, by
/// the time since they were last updated: an age such as `90d`, `12h`,
/// `45min`, `2w`, `6mo` or `1y` (a bare `m` is refused: see
/// [`crate::retention::parse_cutoff`]). Unset: kept forever.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// Every conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than: Option<String>,
    /// Conversations the recording proxy recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_older_than: Option<String>,
    /// Per client of the recording proxy (`[retention.clients.NAME]`): the
    /// proxy's conversations holding a run that client made (its
    /// `x-skein-client` header, else OpenAI's `user` or Anthropic's
    /// `metadata.user_id`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clients: BTreeMap<String, ClientRetention>,
    /// How often `skein serve` applies these rules (`30s`, `15min`, `6h`,
    /// `1d`, `1w`; default `1h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
}

impl Retention {
    fn is_empty(&self) -> bool {
        *self == Retention::default()
    }
}

/// `[retention.clients.NAME]`: how long one client's proxy conversations
/// are kept.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientRetention {
    /// Last updated longer ago than this (an age, or a date).
    pub older_than: String,
}

/// `[otel]`: where the spans of every turn are sent (`skein::telemetry`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OtelConfig {
    /// The OTLP collector's URL (for HTTP, its base: `/v1/traces` is added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<OtelProtocol>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Send message content, not only metadata.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub content: bool,
}

impl OtelConfig {
    fn is_empty(&self) -> bool {
        *self == OtelConfig::default()
    }
}

/// How spans travel to the collector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum OtelProtocol {
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    #[serde(rename = "grpc")]
    Grpc,
}

impl OtelProtocol {
    /// A protocol by its `OTEL_EXPORTER_OTLP_PROTOCOL` name.
    pub fn parse(name: &str) -> Option<OtelProtocol> {
        match name {
            "http/protobuf" => Some(OtelProtocol::HttpProtobuf),
            "grpc" => Some(OtelProtocol::Grpc),
            _ => None,
        }
    }
}

impl Config {
    /// The engine directory: the file's `engine`, else the default one
    /// ([`default_engine_dir`]) when it exists.
    pub fn engine_dir(&self) -> Option<PathBuf> {
        self.engine
            .clone()
            .or_else(|| default_engine_dir().ok().filter(|dir| dir.is_dir()))
    }

    /// The built-in price table with this file's prices added or
    /// overriding.
    pub fn price_table(&self) -> PriceTable {
        self.prices
            .iter()
            .fold(PriceTable::builtin(), |table, (model, price)| {
                table.with(model.clone(), *price)
            })
    }
}

/// `[mcp]`: the MCP servers whose tools `-T SERVER.*` offers.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub servers: BTreeMap<String, McpServerConfig>,
}

impl McpConfig {
    fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

/// `[mcp.servers.NAME]`: a `command` (stdio) or a `url` (streamable HTTP).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandLine>,
    /// Arguments after the command's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables added to the environment the command runs in.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The directory the command runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers sent with every HTTP request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Seconds to start, and to answer a call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// A command: a program alone, or the program and its arguments.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum CommandLine {
    Program(String),
    Words(Vec<String>),
}

/// `[proxy]`: how `skein serve --proxy` serves.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The model a client asks for (`"*"`: any other) → the model name or
    /// profile that answers it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, String>,
    /// A file of client keys (`NAME KEY` a line) that keeps the proxy's
    /// clients apart; `--client-keys` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_keys: Option<PathBuf>,
}

impl ProxyConfig {
    fn is_empty(&self) -> bool {
        self.models.is_empty() && self.client_keys.is_none()
    }
}

/// The name in `[proxy.models]` that stands for every other model.
pub const ANY_MODEL: &str = "*";

/// A command tool: an executable that gets the model's arguments as JSON
/// on standard input and answers on standard output.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// The program and its arguments (no shell).
    pub command: Vec<String>,
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of its arguments (a TOML table).
    pub schema: toml::Table,
    /// Seconds it may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// Where the configuration file lives (whether or not it exists).
pub fn path() -> Result<PathBuf, ConfigError> {
    if let Some(path) = std::env::var_os("SKEIN_CONFIG").filter(|path| !path.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let dirs = directories::ProjectDirs::from("", "", "skein").ok_or(ConfigError::NoConfigDir)?;
    Ok(dirs.config_dir().join("config.toml"))
}

/// The engine directory used when the configuration file names none:
/// `engine/` beside the configuration file, where `skein prompt --save`
/// and `skein aliases set` write (and which is read once it exists).
pub fn default_engine_dir() -> Result<PathBuf, ConfigError> {
    Ok(path()?.with_file_name("engine"))
}

/// Where `skein keys` saves provider keys: `keys.json` beside the
/// configuration file.
pub fn keys_path() -> Result<PathBuf, ConfigError> {
    Ok(path()?.with_file_name("keys.json"))
}

/// Tell the providers where `skein keys` saved keys are (read after the
/// environment variables), as every surface that opens skein for a user
/// does before it opens a model. Without a config directory there is no
/// key file either.
pub fn use_saved_keys() {
    if let Ok(path) = keys_path() {
        skein_providers::http::keys::use_key_file(skein_providers::http::keys::KeyFile::at(path));
    }
}

/// Make this process's model calls follow `[privacy]`: send its
/// `erased_placeholder` for erased content, or refuse when it has none.
/// Every surface that runs turns for a user calls this once at start.
pub fn use_privacy_settings() -> Result<(), ConfigError> {
    skein_engine::erased::set_default_placeholder(get()?.privacy.erased_placeholder.clone());
    Ok(())
}

/// The configuration, read once per process. A missing file is an empty
/// configuration; a malformed one is an error naming the file.
pub fn get() -> Result<&'static Config, ConfigError> {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    if let Some(config) = CONFIG.get() {
        return Ok(config);
    }
    let loaded = read(&path()?)?;
    Ok(CONFIG.get_or_init(|| loaded))
}

/// The configuration in the file at `path` (a missing file is empty).
pub fn read(path: &Path) -> Result<Config, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|error| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: error.to_string(),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Set the default model in the configuration file, keeping its other keys.
pub fn set_default_model(name: &str) -> Result<PathBuf, ConfigError> {
    let path = path()?;
    let mut config = read(&path)?;
    config.default_model = Some(name.to_string());
    let write = |at: &Path, source| ConfigError::Write {
        path: at.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| write(parent, source))?;
    }
    let text = toml::to_string(&config).map_err(|error| ConfigError::Encode(error.to_string()))?;
    let partial = path.with_extension("toml.partial");
    std::fs::write(&partial, text).map_err(|source| write(&partial, source))?;
    std::fs::rename(&partial, &path).map_err(|source| write(&path, source))?;
    Ok(path)
}

/// The prices usage is costed at: the built-in table with the
/// configuration file's `[prices]`.
pub fn prices() -> Result<PriceTable, ConfigError> {
    Ok(get()?.price_table())
}

/// Where a setting's value came from, for `skein config show`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Flag,
    Environment,
    ConfigFile,
    BuiltIn,
}

/// The default model and where it came from: `SKEIN_MODEL`, else the
/// file's `default_model`, else the built-in one. A flag (`-m`) wins over
/// all three; the surface that has one applies it.
pub fn default_model() -> Result<(String, Source), ConfigError> {
    if let Some(model) = std::env::var("SKEIN_MODEL")
        .ok()
        .filter(|model| !model.is_empty())
    {
        return Ok((model, Source::Environment));
    }
    if let Some(model) = &get()?.default_model {
        return Ok((model.clone(), Source::ConfigFile));
    }
    Ok((BUILT_IN_MODEL.to_string(), Source::BuiltIn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_and_bad_values_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "default_modle = \"echo\"\n").unwrap();
        let error = read(&path).unwrap_err().to_string();
        assert!(error.contains("config.toml"), "{error}");
        assert!(error.contains("default_modle"), "{error}");
        assert_eq!(
            read(&dir.path().join("missing.toml")).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn configured_prices_add_to_and_override_the_built_in_table() {
        let config: Config = toml::from_str(
            "[prices.mine]\ninput = 1.0\noutput = 2.0\n\
             [prices.\"gpt-4o\"]\ninput = 9.0\noutput = 9.0\ncache_read = 1.0\n",
        )
        .unwrap();
        let table = config.price_table();
        let (_, mine, _) = table.price_of("mine").unwrap();
        assert_eq!((mine.input, mine.output, mine.cache_read), (1.0, 2.0, None));
        let (_, gpt, _) = table.price_of("gpt-4o-2024-08-06").unwrap();
        assert_eq!(gpt.input, 9.0);
        assert!(table.price_of("claude-haiku-4-5").is_some());
        let typo = toml::from_str::<Config>("[prices.mine]\ninput = 1.0\noutptu = 2.0\n");
        assert!(typo.unwrap_err().to_string().contains("outptu"));
    }
}
