/*!
`skein verify`: recompute every id and hash in the database and report
problems (exit code 6 when there are any).
*/

use super::common::context::Globals;
use crate::exit::{ExitWith, INTEGRITY};
use crate::ui::{self, outln};
use anyhow::Result;
use std::process::ExitCode;

pub fn run(globals: &Globals) -> Result<ExitCode> {
    let ctx = &globals.open_to_show()?;
    let report = ctx.store.verify()?;
    if ctx.json {
        ui::json(&report)?;
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
