/*!
The `skein` command line: its global options ([`Cli`]; each command's own
are in its module under `commands/`, named by [`Command`]), and the rule
that makes `skein "hello"` a prompt ([`with_implicit_prompt`]). Help text,
shell completions and the man page all derive from these definitions.
*/

use crate::commands::Command;
use crate::commands::common::values::parse_size;
use clap::{CommandFactory, Parser};
use std::ffi::OsString;
use std::path::PathBuf;

/// Record, continue, branch and replay conversations with language models.
#[derive(Debug, Parser)]
#[command(
    name = "skein",
    version,
    about,
    max_term_width = 100,
    after_help = "Without a command, the command line is a prompt's, as with `llm`: \
                  `skein \"What is a skein?\"` is `skein prompt \"What is a skein?\"`, prompt \
                  options may come first, and text piped on stdin alone is a prompt too \
                  (the rule: docs/cli.md)."
)]
pub struct Cli {
    /// The database: a SQLite file, or a postgres://user@host/db URL [default: skein.db in your
    /// data directory] [env: SKEIN_DB]
    #[arg(
        short = 'd',
        long,
        visible_alias = "database",
        global = true,
        value_name = "PATH|URL",
        help_heading = GLOBAL_OPTIONS
    )]
    pub db: Option<PathBuf>,

    /// A PostgreSQL standby of the database (a postgres:// URL, several hosts allowed) that
    /// commands which only read and the pages of `skein serve` read from; turns read from
    /// the database itself [default: the configuration file's `db_read`, with its `db`] [env:
    /// SKEIN_DB_READ]
    #[arg(long, global = true, value_name = "URL", help_heading = GLOBAL_OPTIONS)]
    pub db_read: Option<String>,

    /// Print records as JSON instead of text
    #[arg(long, global = true, help_heading = GLOBAL_OPTIONS)]
    pub json: bool,

    /// The most a file or URL named on the command line (`--source ID=@FILE`,
    /// `--schema FILE`, `-a`, `-f`) or text piped on stdin may hold, in bytes (`K`,
    /// `M`, `G` suffixes are powers of 1024) [default: 16M] [env: SKEIN_MAX_INPUT]
    #[arg(
        long,
        global = true,
        value_name = "BYTES",
        value_parser = parse_size,
        help_heading = GLOBAL_OPTIONS
    )]
    pub max_input: Option<u64>,

    /// Send an OpenTelemetry trace of every turn to this OTLP collector (its base URL,
    /// e.g. http://localhost:4318) [default: OTEL_EXPORTER_OTLP_ENDPOINT, else the config
    /// file's [otel] endpoint, else none]
    #[arg(long, global = true, value_name = "URL", help_heading = GLOBAL_OPTIONS)]
    pub otlp: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

/// The heading every command's help lists the global options under, after
/// its own.
pub const GLOBAL_OPTIONS: &str = "Global options";

/// `--max-input` when neither it nor `SKEIN_MAX_INPUT` is given.
const DEFAULT_MAX_INPUT: u64 = 16 << 20;

impl Cli {
    /// The global options the environment gives when the command line does
    /// not (`SKEIN_DB`, `SKEIN_DB_READ`, `SKEIN_MAX_INPUT`; an empty
    /// variable is unset). They are read here rather than by clap, which
    /// would show them in a usage line as if they had been typed (and so
    /// as if they were required).
    pub fn with_environment(mut self) -> Result<Cli, clap::Error> {
        let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
        if self.db.is_none() {
            self.db = var("SKEIN_DB").map(PathBuf::from);
        }
        if self.db_read.is_none() {
            self.db_read = var("SKEIN_DB_READ").map(|url| url.to_string_lossy().into_owned());
        }
        if self.max_input.is_none()
            && let Some(value) = var("SKEIN_MAX_INPUT")
        {
            let size = parse_size(&value.to_string_lossy()).map_err(|problem| {
                Cli::command().error(
                    clap::error::ErrorKind::InvalidValue,
                    format!("invalid value in SKEIN_MAX_INPUT: {problem}"),
                )
            })?;
            self.max_input = Some(size);
        }
        Ok(self)
    }

    /// The most one command's inputs may hold (`--max-input`).
    pub fn max_input(&self) -> u64 {
        self.max_input.unwrap_or(DEFAULT_MAX_INPUT)
    }
}

/// The commands of `llm` (0.36) that skein has no command for, each with
/// where skein does that job. Such a word is never sent as a prompt.
const LLM_ONLY_COMMANDS: &[(&str, &str)] = &[
    ("schemas", "give a schema to a turn with `--schema`"),
    ("fragments", "add a file to a turn with `-f FILE`"),
    (
        "plugins",
        "skein's models are built in: `skein models list`",
    ),
    (
        "install",
        "skein's models are built in: `skein models list`, `skein models pull`",
    ),
    (
        "uninstall",
        "skein's models are built in: `skein models list`",
    ),
    (
        "openai",
        "OpenAI models are `-m openai:MODEL`: `skein models list`",
    ),
    ("embed", "skein keeps no embedding collections"),
    ("embed-models", "skein keeps no embedding collections"),
    ("embed-multi", "skein keeps no embedding collections"),
    (
        "similar",
        "find messages by their words with `skein search`",
    ),
    ("collections", "skein keeps no embedding collections"),
];

/// What the first argument after the global options is, for
/// [`with_implicit_prompt`].
enum FirstArg {
    /// None at all.
    Nothing,
    /// A command, an alias or `help`; or an option that is not the
    /// prompt's (`--help`, `--version`, a mistake): clap's to handle.
    ForClap,
    /// An option of `prompt` (`-m`, `-c`, `--no-log`, ...).
    PromptOption,
    /// A command of `llm` that skein lacks, with where skein does its job.
    LlmOnly(&'static str, &'static str),
    /// Text that is no command nor likely typo of one.
    Text,
}

/// The command line with `prompt` put in front of what is a prompt's:
/// `skein -m echo "hello"` is `skein prompt -m echo "hello"`, and `echo hi
/// | skein` is `skein prompt`.
///
/// The rule (docs/cli.md): after the global options (`--db`/`-d`,
/// `--json`, `--max-input`), the command line is a prompt's when it starts
/// with an option of `prompt`, when it is empty and stdin is not a
/// terminal, or when its first word is text that cannot be mistaken for a
/// command: neither a command nor an alias (nor `help`), nor one edit
/// away from one (`lgo`, a likely typo of `log`, stays an error with
/// clap's suggestion), nor a command of `llm` that skein lacks
/// (`plugins`, `schemas`, ...), which is an error saying where skein
/// does that job. Which options are global and which are `prompt`'s is
/// read from the definitions above, never listed twice.
pub fn with_implicit_prompt(
    args: impl IntoIterator<Item = OsString>,
    stdin_is_terminal: bool,
) -> Result<Vec<OsString>, clap::Error> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let command = Cli::command();
    let first = first_after_globals(&command, &args);
    if first > args.len() {
        // A global option's value is missing (`skein --db`): clap says so.
        return Ok(args);
    }
    let prompt = match classify(&command, args.get(first)) {
        FirstArg::Nothing => !stdin_is_terminal,
        FirstArg::PromptOption | FirstArg::Text => true,
        FirstArg::ForClap => false,
        FirstArg::LlmOnly(word, instead) => {
            return Err(command.clone().error(
                clap::error::ErrorKind::InvalidSubcommand,
                format!(
                    "skein has no `{word}` command (it is `llm`'s; {instead}); \
                     to send `{word}` to a model, write `skein prompt {word}`"
                ),
            ));
        }
    };
    if prompt {
        args.insert(first, OsString::from("prompt"));
    }
    Ok(args)
}

/// The index of the first argument after the global options (past the
/// end when the last of them lacks its value).
fn first_after_globals(command: &clap::Command, args: &[OsString]) -> usize {
    let globals: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .collect();
    let mut index = 1;
    while let Some(arg) = args.get(index).map(|arg| arg.to_string_lossy()) {
        let Some(global) = globals.iter().find(|global| names(global, &arg)) else {
            break;
        };
        let value_attached = arg.contains('=') || (!arg.starts_with("--") && arg.len() > 2);
        index += match global.get_action().takes_values() && !value_attached {
            true => 2,
            false => 1,
        };
    }
    index
}

/// Whether the option `arg` (`--long`, `--long=VALUE`, `-s`, `-sVALUE`)
/// is `option`'s.
fn names(option: &clap::Arg, arg: &str) -> bool {
    if let Some(long) = arg.strip_prefix("--") {
        let long = long.split_once('=').map_or(long, |(name, _)| name);
        return !long.is_empty()
            && (option.get_long() == Some(long)
                || option
                    .get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&long)));
    }
    let short = arg.strip_prefix('-').and_then(|rest| rest.chars().next());
    short.is_some_and(|short| {
        option.get_short() == Some(short)
            || option
                .get_all_short_aliases()
                .is_some_and(|aliases| aliases.contains(&short))
    })
}

fn classify(command: &clap::Command, arg: Option<&OsString>) -> FirstArg {
    let Some(arg) = arg.map(|arg| arg.to_string_lossy().into_owned()) else {
        return FirstArg::Nothing;
    };
    if arg.starts_with('-') && arg != "-" {
        let prompt = command
            .find_subcommand("prompt")
            .expect("`prompt` is a command");
        return match prompt.get_arguments().any(|option| names(option, &arg)) {
            true => FirstArg::PromptOption,
            false => FirstArg::ForClap,
        };
    }
    let commands: Vec<String> = command
        .get_subcommands()
        .flat_map(|sub| {
            std::iter::once(sub.get_name().to_string())
                .chain(sub.get_all_aliases().map(str::to_string))
        })
        .chain(["help".to_string()])
        .collect();
    if commands.contains(&arg) {
        return FirstArg::ForClap;
    }
    let typo_of = |name: &str| {
        arg.len() >= 3
            && !arg.contains(char::is_whitespace)
            && strsim::osa_distance(&arg.to_lowercase(), name) <= 1
    };
    if let Some((word, instead)) = LLM_ONLY_COMMANDS.iter().find(|(word, _)| *word == arg) {
        return FirstArg::LlmOnly(word, instead);
    }
    if commands.iter().any(|name| typo_of(name)) {
        return FirstArg::ForClap;
    }
    match LLM_ONLY_COMMANDS.iter().find(|(word, _)| typo_of(word)) {
        Some((word, instead)) => FirstArg::LlmOnly(word, instead),
        None => FirstArg::Text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn implicit_on(args: &[&str], stdin_is_terminal: bool) -> Result<Vec<String>, clap::Error> {
        with_implicit_prompt(
            std::iter::once("skein")
                .chain(args.iter().copied())
                .map(OsString::from),
            stdin_is_terminal,
        )
        .map(|args| {
            args.into_iter()
                .skip(1)
                .map(|arg| arg.into_string().unwrap())
                .collect()
        })
    }

    fn implicit(args: &[&str]) -> Vec<String> {
        implicit_on(args, true).unwrap()
    }

    #[test]
    fn a_first_argument_that_is_no_command_is_a_prompt() {
        assert_eq!(
            implicit(&["hello there", "-m", "echo"]),
            ["prompt", "hello there", "-m", "echo"]
        );
        assert_eq!(
            implicit(&["--json", "--db", "x.db", "hi"]),
            ["--json", "--db", "x.db", "prompt", "hi"]
        );
        assert_eq!(
            implicit(&["--db=x.db", "hello"]),
            ["--db=x.db", "prompt", "hello"]
        );
        assert_eq!(
            implicit(&["-d", "x.db", "hello"]),
            ["-d", "x.db", "prompt", "hello"]
        );
        // Commands, aliases, options and likely typos are left to clap.
        for kept in [
            &["log"][..],
            &["logs", "-n", "2"],
            &["models"],
            &["help"],
            &["--version"],
            &["--help"],
            &["--bogus", "x"],
            &["lgo"],
            &["tre"],
        ] {
            assert_eq!(implicit(kept), kept, "{kept:?}");
        }
        assert!(implicit(&[]).is_empty());
    }

    #[test]
    fn prompt_options_before_the_text_make_a_prompt() {
        assert_eq!(
            implicit(&["-m", "echo", "hi"]),
            ["prompt", "-m", "echo", "hi"]
        );
        assert_eq!(implicit(&["-c", "more"]), ["prompt", "-c", "more"]);
        assert_eq!(
            implicit(&["--json", "-mecho", "hi"]),
            ["--json", "prompt", "-mecho", "hi"]
        );
        assert_eq!(
            implicit(&["--model=echo", "hi"]),
            ["prompt", "--model=echo", "hi"]
        );
        assert_eq!(implicit(&["--no-log", "hi"]), ["prompt", "--no-log", "hi"]);
    }

    /// A global option whose value is missing is clap's to report, even
    /// with stdin piped (it once made the prompt rule panic).
    #[test]
    fn a_global_option_without_its_value_is_left_to_clap() {
        assert_eq!(implicit_on(&["--db"], false).unwrap(), ["--db"]);
        assert_eq!(implicit_on(&["-d"], true).unwrap(), ["-d"]);
    }

    #[test]
    fn stdin_alone_is_a_prompt_only_when_piped() {
        assert_eq!(implicit_on(&[], false).unwrap(), ["prompt"]);
        assert_eq!(
            implicit_on(&["--json"], false).unwrap(),
            ["--json", "prompt"]
        );
        assert!(implicit_on(&[], true).unwrap().is_empty());
    }

    #[test]
    fn an_llm_command_skein_lacks_is_refused_not_sent() {
        // Their likely typos too (`template`), named as the command meant.
        for word in ["schemas", "plugins", "install", "embed"] {
            let error = implicit_on(&[&word[..word.len() - 1]], true).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains(&format!("skein has no `{word}` command")),
                "{error}"
            );
        }
        for word in ["schemas", "plugins", "install", "embed"] {
            let error = implicit_on(&[word, "list"], false).unwrap_err();
            assert_eq!(error.exit_code(), 2);
            let shown = error.to_string();
            assert!(
                shown.contains(&format!("skein has no `{word}` command")),
                "{shown}"
            );
        }
    }

    #[test]
    fn the_command_definitions_are_consistent() {
        Cli::command().debug_assert();
    }
}
