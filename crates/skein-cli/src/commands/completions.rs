/*!
`skein completions SHELL`: a shell completion script, generated from the
clap definitions.
*/

use crate::cli::Cli;
use anyhow::Result;
use clap::{Args, CommandFactory};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

pub fn run(args: CompletionsArgs) -> Result<ExitCode> {
    let mut command = Cli::command();
    // Generated into memory: clap_complete panics when its writer fails.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "skein", &mut script);
    std::io::Write::write_all(&mut crate::ui::Stdout, &script)?;
    Ok(ExitCode::SUCCESS)
}
