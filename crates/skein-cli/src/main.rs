/*!
The `skein` binary: parses the command line (see [`flags`]), opens the
database, runs one command and maps failures onto documented exit codes
(see [`exit`]). All real work lives in the `skein` library.
*/

mod commands;
mod config;
mod exit;
mod flags;
mod ui;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = flags::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        // A reader that stopped reading (`skein man | head`) is not an error.
        Err(error)
            if error.chain().any(|cause| {
                cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(exit::code_for(&error))
        }
    }
}
