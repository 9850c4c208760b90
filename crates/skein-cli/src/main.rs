/*!
The `skein` binary: parses the command line (see [`cli`]), opens the
database, runs one command and maps failures onto documented exit codes
(see [`exit`]). All real work lives in the `skein` library.
*/

mod cli;
mod commands;
mod config;
mod exit;
mod input;
mod ui;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    use std::io::IsTerminal;
    let args = cli::with_implicit_prompt(std::env::args_os(), std::io::stdin().is_terminal())
        .unwrap_or_else(|error| error.exit());
    let cli = cli::Cli::parse_from(args)
        .with_environment()
        .unwrap_or_else(|error| error.exit());
    // A server answers many clients at once, on every core, and the
    // store's work runs in place on its workers (no hop to the blocking
    // pool); every other command does one thing, and starts faster
    // without worker threads to spawn.
    let mut builder = match cli.command {
        commands::Command::Serve(_) => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            ui::note(format!("error: cannot start the async runtime: {error}"));
            return ExitCode::from(exit::FAILURE);
        }
    };
    input::set_limit(cli.max_input());
    let outcome = runtime.block_on(commands::run(cli));
    // What is still buffered: a failure here is reported like any other.
    let flushed = ui::flush();
    match (outcome, ui::stdout_failure()) {
        // A reader that stopped reading (`skein log | head`) is not an
        // error: the command stops quietly, with success.
        (_, Some((std::io::ErrorKind::BrokenPipe, _))) => ExitCode::SUCCESS,
        (Err(error), _) => {
            ui::note(format!("error: {}", exit::message(&error)));
            ExitCode::from(exit::code_for(&error))
        }
        (Ok(_), Some((kind, message))) => {
            ui::note(format!("error: {}", ui::describe_failure(*kind, message)));
            ExitCode::from(exit::FAILURE)
        }
        (Ok(code), None) => match flushed {
            Ok(()) => code,
            Err(error) => {
                ui::note(format!("error: cannot write the output: {error}"));
                ExitCode::from(exit::FAILURE)
            }
        },
    }
}
