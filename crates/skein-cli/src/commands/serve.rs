/*!
`skein serve`: runs the web view (and with `--proxy` the recording proxy)
over the database until interrupted.
*/

use super::Context;
use super::turns::home_model;
use crate::flags::ServeArgs;
use crate::ui;
use anyhow::Result;
use skein_serve::{ConnectionLimits, ServeConfig};
use std::process::ExitCode;
use std::time::Duration;

pub async fn serve(ctx: &Context, args: ServeArgs) -> Result<ExitCode> {
    let proxy = if args.proxy {
        Some(home_model(args.model.model.clone())?)
    } else {
        None
    };
    let model_name = proxy.as_ref().map(|model| model.name().to_string());
    let config = ServeConfig {
        bind: args.bind,
        token: args.token,
        store: ctx.store.clone(),
        proxy,
        body_limit: args.body_limit,
        limits: ConnectionLimits {
            read_timeout: Duration::from_secs(args.read_timeout),
            idle_timeout: Duration::from_secs(args.idle_timeout),
            max_connections: args.max_connections as usize,
        },
    };
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    skein_serve::serve(
        config,
        |bound| {
            ui::note(format!("serving the graph on http://{bound}/ (Ctrl-C stops)"));
            if let Some(model) = &model_name {
                ui::note(format!(
                    "recording proxy: POST http://{bound}/v1/chat/completions, forwarding to `{model}`"
                ));
            }
        },
        shutdown,
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}
