/*!
`skein verify`: recompute every id and hash in the database and report
problems (exit code 6 when there are any); with `--find TEXT`, also every
place that can hold content (the store's list, `skein_store::places`) that
still holds the text (exit code 6 when any does): how an erasure is proven.
*/

use super::common::context::Globals;
use crate::exit::{BAD_COMMAND_LINE, ExitWith, INTEGRITY};
use crate::ui::{self, outln};
use anyhow::Result;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Also list every place that can hold content (messages, request
    /// bodies, error texts, replay and rerun rows, settings, the search
    /// index) still holding TEXT, byte for byte: after erasing every
    /// message holding it and `skein gc`, none should (exit code 6 if any
    /// does)
    #[arg(long, value_name = "TEXT")]
    pub find: Option<String>,
}

pub fn run(globals: &Globals, args: &VerifyArgs) -> Result<ExitCode> {
    let ctx = &globals.open_to_show()?;
    let report = ctx.store.verify()?;
    let holding = match args.find.as_deref() {
        Some("") => {
            return Err(anyhow::Error::new(ExitWith(
                BAD_COMMAND_LINE,
                "--find needs a text to look for".into(),
            )));
        }
        Some(text) => Some(ctx.store.places_holding(text)?),
        None => None,
    };
    if ctx.json {
        let mut shown = serde_json::to_value(&report)?;
        if let Some(holding) = &holding {
            shown["holding"] = serde_json::to_value(holding)?;
        }
        ui::json(&shown)?;
    } else {
        outln!(
            "checked {} nodes{}, {} blobs, {} conversations{}, {} runs: {}",
            report.nodes,
            if report.erased > 0 {
                format!(" ({} erased)", report.erased)
            } else {
                String::new()
            },
            report.blobs,
            report.conversations,
            if report.origins_deleted > 0 {
                format!(" ({} forked from deleted ones)", report.origins_deleted)
            } else {
                String::new()
            },
            report.runs,
            if report.is_ok() {
                "all consistent".to_string()
            } else {
                format!("{} problems", report.problems.len())
            }
        )?;
        for problem in &report.problems {
            outln!("  {}", serde_json::to_string(problem)?)?;
        }
        match holding.as_deref() {
            Some([]) => outln!("the text is in no place that can hold content")?,
            Some(places) => {
                outln!("the text is still in:")?;
                for place in places {
                    outln!("  {}.{}: {} row(s)", place.table, place.column, place.rows)?;
                }
            }
            None => {}
        }
    }
    if holding.as_ref().is_some_and(|places| !places.is_empty()) {
        return Err(anyhow::Error::new(ExitWith(
            INTEGRITY,
            "the text is still held: erase the messages holding it (`skein search`, `skein redact`), \
             then run `skein gc`"
                .into(),
        )));
    }
    if report.is_ok() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(anyhow::Error::new(ExitWith(
            INTEGRITY,
            "the database failed verification: restore it from an export, or re-import the affected conversations".into(),
        )))
    }
}
