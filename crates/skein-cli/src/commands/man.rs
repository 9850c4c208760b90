/*!
`skein man`: the man page (roff), generated from the clap definitions.
*/

use crate::cli::Cli;
use anyhow::Result;
use clap::CommandFactory;
use std::process::ExitCode;

pub fn run() -> Result<ExitCode> {
    clap_mangen::Man::new(Cli::command()).render(&mut crate::ui::Stdout)?;
    Ok(ExitCode::SUCCESS)
}
