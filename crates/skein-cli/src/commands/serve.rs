/*!
`skein serve`: runs the web view (and with `--proxy` the recording proxy)
over the database until interrupted.

The web view's actions run on the models every command uses ([`CliHome`]:
`-m` or the default model, the configured engine directory's profiles, the
built-in and MCP tools); `--read-only` refuses every write.

The proxy's models come from `[proxy.models]` in config.toml (the model a
client asks for → the model or profile that answers it, `"*"` for any
other); `-m` answers any other name too, in place of `"*"`. Without a
table every request goes to `-m` or the default model.

The proxy's clients are kept apart by client keys (`--client-keys FILE`,
else `[proxy] client_keys` in config.toml): a file only its owner may
read, one client a line, its name and its key. Without one every client
reaches every conversation.
*/

use super::common::context::Globals;
use super::common::home::CliHome;
use super::common::model::{KeyArgs, ModelArgs, configured_engine, default_model, home_model};
use super::common::values::parse_size;
use crate::config::ANY_MODEL;
use crate::ui;
use anyhow::{Context as _, Result, bail};
use clap::Args;
use skein::store::OpenMode;
use skein::{Home, Model};
use skein_serve::{
    ClientKeys, ConnectionLimits, FromRecording, ModelChoice, ModelTable, Models, ProxyConfig,
    ServeConfig,
};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on; anything but loopback needs --token
    #[arg(long, default_value = "127.0.0.1:8765", value_name = "ADDR")]
    pub bind: std::net::SocketAddr,
    /// The bearer token every request must carry (required off loopback; at
    /// least 16 characters, e.g. `--token "$(openssl rand -hex 16)"`)
    #[arg(
        long,
        env = "SKEIN_SERVE_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true,
        value_parser = parse_token
    )]
    pub token: Option<String>,
    /// Also serve the recording proxy (OpenAI chat completions and Responses, Anthropic Messages),
    /// forwarding to the model (-m, or [proxy.models] in config.toml) and recording every exchange
    #[arg(long)]
    pub proxy: bool,
    /// With --proxy: call models served over HTTP with each request's own key (`x-api-key`, or
    /// `Authorization: Bearer` without --token) instead of this machine's; keys are never stored
    #[arg(long)]
    pub pass_client_key: bool,
    /// With --proxy: the clients, one a line (`NAME KEY`) in a file only its owner may read
    /// (default: `[proxy] client_keys` in config.toml). Each request must carry its client's key
    /// (`x-api-key`, or `Authorization: Bearer`), is recorded as that client's, and reaches only
    /// the conversations its client's requests made. Needs --token, the operator's (the web
    /// view), which clients are not given
    #[arg(long, value_name = "FILE", requires = "proxy")]
    pub client_keys: Option<std::path::PathBuf>,
    /// With --proxy: answer each request the database recorded (the same messages, tools,
    /// options and requested model) with its recorded reply, without calling a model or writing
    /// anything; refuse any other request, naming its first difference from the recording
    #[arg(long, requires = "proxy")]
    pub from_recording: bool,
    /// With --from-recording: send a request the database did not record to the model and record
    /// it, instead of refusing it
    #[arg(long, requires = "from_recording")]
    pub record_misses: bool,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub key: KeyArgs,
    /// The largest request body the proxy accepts, in bytes (`K`, `M`, `G` suffixes are powers of
    /// 1024)
    #[arg(long, default_value = "8M", value_name = "BYTES", value_parser = parse_size)]
    pub body_limit: u64,
    /// With --proxy: the longest one model call may run, start to finish; a call still running
    /// then is stopped, answered with an error and recorded as failed
    #[arg(long, default_value_t = 600, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub reply_deadline: u64,
    /// With --proxy: the most reply text one model call may produce, in bytes (`K`, `M`, `G`
    /// suffixes); a call that passes it is stopped, answered with an error and recorded as failed
    #[arg(long, default_value = "4M", value_name = "BYTES", value_parser = parse_size)]
    pub reply_limit: u64,
    /// The longest a client may take to send a request's headers, then its body (slow clients are dropped)
    #[arg(long, default_value_t = 30, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub read_timeout: u64,
    /// Close a connection after this long with no byte moving while no request is handled, or while its client does not read
    #[arg(long, default_value_t = 15, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: u64,
    /// Connections served at once; more wait to be accepted
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_connections: u64,
    /// Refuse every write: the web view only shows the graph (no replies, forks, edits or reruns),
    /// and the database is opened read-only (a database this user cannot write is served so
    /// without it)
    #[arg(long, conflicts_with = "proxy")]
    pub read_only: bool,
}

/// A server token strong enough to stand between the graph and a network.
fn parse_token(value: &str) -> Result<String, String> {
    const MIN: usize = 16;
    if value.chars().count() < MIN {
        return Err(format!(
            "a token needs at least {MIN} characters; make one with `openssl rand -hex 16`"
        ));
    }
    Ok(value.to_string())
}

pub async fn run(globals: &Globals, mut args: ServeArgs) -> Result<ExitCode> {
    args.key.use_for_this_command()?;
    let ctx = &if args.read_only {
        globals.open(OpenMode::ReadOnly)?
    } else if args.proxy {
        globals.open(OpenMode::Create)?
    } else {
        // The web view without the proxy acts on the graph, so it needs
        // one; a database it cannot write is served read-only rather than
        // refused.
        let (ctx, read_only) = globals.open_for_web_view()?;
        args.read_only = read_only;
        ctx
    };
    if args.pass_client_key && !args.proxy {
        bail!("--pass-client-key applies to the proxy: add --proxy");
    }
    let clients = match args.proxy {
        true => client_keys(args.client_keys.as_deref())?,
        false => None,
    };
    if clients.is_some() && args.pass_client_key {
        bail!(
            "client keys and --pass-client-key both read the key a request carries: use one \
             (client keys keep clients apart; --pass-client-key calls models with their keys)"
        );
    }
    let keyed = clients
        .as_ref()
        .map(|clients| clients.names().collect::<Vec<_>>().join(", "));
    let proxy = if args.proxy {
        Some(ProxyConfig {
            models: model_table(args.model.model.clone(), args.pass_client_key)?,
            pass_client_key: args.pass_client_key,
            from_recording: match (args.from_recording, args.record_misses) {
                (false, _) => None,
                (true, false) => Some(FromRecording::Only),
                (true, true) => Some(FromRecording::RecordMisses),
            },
            reply_deadline: Duration::from_secs(args.reply_deadline),
            reply_limit: usize::try_from(args.reply_limit).unwrap_or(usize::MAX),
            clients: clients.map(Arc::new),
        })
    } else {
        None
    };
    let served = proxy.as_ref().map(|proxy| proxy.models.names().join(", "));
    let pass = args.pass_client_key;
    let from_recording = proxy.as_ref().and_then(|proxy| proxy.from_recording);
    let read_only = args.read_only;
    let default = match args.model.model.clone() {
        Some(name) => name,
        None => default_model()?,
    };
    let config = ServeConfig {
        bind: args.bind,
        token: args.token,
        store: ctx.store.clone(),
        proxy,
        body_limit: usize::try_from(args.body_limit).unwrap_or(usize::MAX),
        limits: ConnectionLimits {
            read_timeout: Duration::from_secs(args.read_timeout),
            idle_timeout: Duration::from_secs(args.idle_timeout),
            max_connections: args.max_connections as usize,
        },
        read_only,
        models: Arc::new(CliHome::with_default(default)),
        prices: Arc::new(crate::config::prices()?),
    };
    let retention = schedule_retention(&ctx.store, read_only)?;
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let served = skein_serve::serve(
        config,
        |bound| {
            ui::note(format!(
                "serving the graph on http://{bound}/ ({}Ctrl-C stops)",
                if read_only { "read-only; " } else { "" }
            ));
            if let Some(models) = &served {
                ui::note(format!(
                    "recording proxy: POST http://{bound}/v1/chat/completions, /v1/responses and /v1/messages, serving {models}"
                ));
                match from_recording {
                    Some(FromRecording::Only) => ui::note(
                        "answering from the recording only: a request it lacks is refused (--record-misses forwards it)",
                    ),
                    Some(FromRecording::RecordMisses) => ui::note(
                        "answering from the recording; a request it lacks goes to the model and is recorded",
                    ),
                    None => {}
                }
                if pass {
                    ui::note(
                        "clients' own keys are passed through to models served over HTTP (never stored)",
                    );
                }
                match &keyed {
                    Some(names) => ui::note(format!(
                        "clients kept apart by their keys: {names}; each reaches only its own conversations"
                    )),
                    None => ui::note(
                        "no client keys: every client can reach every conversation (docs/proxy.md, \"Clients\")",
                    ),
                }
            }
        },
        shutdown,
    )
    .await;
    if let Some(retention) = retention {
        retention.abort();
    }
    served?;
    Ok(ExitCode::SUCCESS)
}

/// Apply `[retention]` now and then every `every` (default an hour) while
/// serving, each pass noted with what it deleted; a pass another process
/// is running against the same database is skipped (see
/// [`skein::retention::scheduled_pass`]). Nothing when there are no rules
/// or the database is served read-only. A malformed rule is an error now.
fn schedule_retention(
    store: &skein::Store,
    read_only: bool,
) -> Result<Option<tokio::task::JoinHandle<()>>> {
    let rules = crate::config::get()?.retention.clone();
    if !skein::retention::has_rules(&rules) {
        return Ok(None);
    }
    if read_only || store.is_read_only() {
        ui::note("[retention] is not applied: the database is served read-only");
        return Ok(None);
    }
    let every = skein::retention::interval(&rules)?;
    // Refuse a malformed age before serving, not in the first pass.
    skein::retention::check(&rules)?;
    let store = store.clone();
    Ok(Some(tokio::spawn(async move {
        loop {
            let (pass_store, pass_rules) = (store.clone(), rules.clone());
            let pass = tokio::task::spawn_blocking(move || {
                skein::retention::scheduled_pass(&pass_store, &pass_rules)
            })
            .await;
            match pass {
                Ok(Ok(Some(applied))) => note_retention(&applied),
                Ok(Ok(None)) => {
                    ui::note(
                        "[retention] skipped: another process is applying it to this database",
                    );
                }
                Ok(Err(error)) => ui::note(format!("[retention] failed: {error}")),
                Err(error) => ui::note(format!("[retention] failed: {error}")),
            }
            tokio::time::sleep(every).await;
        }
    })))
}

/// A note per rule that deleted something.
fn note_retention(applied: &[(String, skein::store::Forgotten)]) {
    for (rule, report) in applied {
        if report.conversations.is_empty() {
            continue;
        }
        let summary = report.to_string();
        ui::note(format!(
            "[retention] {rule}: {}",
            summary.trim_end().replace('\n', "; ")
        ));
    }
}

/// The proxy's clients: the keys file `--client-keys` names, else the one
/// `[proxy] client_keys` names, else none. The file must be readable by
/// its owner only; its keys are never shown.
fn client_keys(flag: Option<&std::path::Path>) -> Result<Option<ClientKeys>> {
    let configured = crate::config::get()?.proxy.client_keys.clone();
    let Some(path) = flag.map(std::path::Path::to_path_buf).or(configured) else {
        return Ok(None);
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path)
            .with_context(|| format!("cannot read the client keys file {}", path.display()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            bail!(
                "the client keys file {} may be read or written by others (mode {:o}): make it \
                 its owner's only with `chmod 600 {}`",
                path.display(),
                mode & 0o777,
                path.display()
            );
        }
    }
    let text = crate::input::text_file(&path, "the client keys file")?;
    ClientKeys::parse(&text)
        .map(Some)
        .map_err(|why| anyhow::anyhow!("the client keys file {} is refused: {why}", path.display()))
}

/// The proxy's model table: `[proxy.models]`, with `-m` as the fallback
/// when given. Each model is opened once, however many names map to it.
fn model_table(flag: Option<String>, pass_keys: bool) -> Result<ModelTable> {
    let configured = &crate::config::get()?.proxy.models;
    let mut opened: BTreeMap<String, Model> = BTreeMap::new();
    let mut open = |name: &str| -> Result<Model> {
        if let Some(model) = opened.get(name) {
            return Ok(model.clone());
        }
        let model = proxy_model(name, pass_keys).with_context(|| {
            format!("the proxy cannot open model `{name}` ([proxy.models] in config.toml, or -m)")
        })?;
        opened.insert(name.to_string(), model.clone());
        Ok(model)
    };
    let mut named = BTreeMap::new();
    for (client, model) in configured {
        if client != ANY_MODEL {
            named.insert(client.clone(), open(model)?);
        }
    }
    let fallback = match (flag, configured.get(ANY_MODEL)) {
        (Some(name), _) => Some(open(&name)?),
        (None, Some(name)) => Some(open(name)?),
        (None, None) if named.is_empty() => Some(match pass_keys {
            true => open(&default_model()?)?,
            false => home_model(None)?,
        }),
        (None, None) => None,
    };
    Ok(ModelTable::new(named, fallback))
}

/// A profile of the engine directory by that name, else a model name;
/// with `pass_keys`, a model served over HTTP takes each request's key.
fn proxy_model(name: &str, pass_keys: bool) -> Result<Model> {
    if !pass_keys {
        return home_model(Some(name.to_string()));
    }
    if let Some(engine) = configured_engine()?
        && engine.catalog().find_profile(name).is_some()
    {
        return Ok(Model::from_profile(&engine, name)?);
    }
    Ok(Model::open_for_client_keys(
        name,
        super::common::tools::registered()?,
    )?)
}

/// The models the web view's actions run on: those every command opens
/// ([`CliHome`]), offering the default, the engine directory's profiles,
/// the proxy's models and the registry's models that need no argument.
impl Models for CliHome {
    fn choices(&self) -> Vec<ModelChoice> {
        let default = self.default_name();
        let mut choices = vec![ModelChoice {
            name: default.clone(),
            label: format!("{default} (default)"),
        }];
        let mut add = |name: &str, label: String| {
            if !choices.iter().any(|choice| choice.name == name) {
                choices.push(ModelChoice {
                    name: name.to_string(),
                    label,
                });
            }
        };
        if let Ok(Some(engine)) = configured_engine() {
            for name in engine.catalog().profile_names() {
                add(name, format!("{name} (profile)"));
            }
        }
        if let Ok(config) = crate::config::get() {
            for name in config.proxy.models.values() {
                add(name, name.clone());
            }
        }
        for syntax in skein::providers::available() {
            if !syntax.contains(':') {
                add(syntax, syntax.to_string());
            }
        }
        choices
    }
}
