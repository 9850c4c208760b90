/*!
Terminal output: JSON records on stdout, human text on stdout, and status
notes (ids, branching notices) on stderr so piped replies stay clean.

Every byte for stdout goes through here, so that writing never panics and
a failure is remembered: a reader that stopped reading (`skein log | head`)
ends the command quietly, and a full disk (`skein log > /dev/full`) is an
error that says so (see `main`). Human text is written with control
characters escaped when stdout is a terminal (text from a model or an
import must not drive the terminal: ESC, BEL, CR and the other C0 and C1
controls are shown as `\x1b`, `\u{9b}`, ...; bidirectional controls such
as U+202E as `\u{202e}`; newlines and tabs stay); notes on stderr when it
is a terminal likewise. JSON, exports and text written to a pipe or file
are written exactly.
*/

use serde::Serialize;
use std::borrow::Cow;
use std::io::{IsTerminal, Write};
use std::sync::{Mutex, OnceLock};

/// Print one line of human text on stdout (escaped for a terminal); an
/// error means stdout is gone, and the command should stop.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::ui::line(&format!($($arg)*))
    };
}
pub(crate) use outln;

/// The first error writing to stdout met, kept so that `main` can tell a
/// closed pipe (quiet) from a full disk (an error) however the failing
/// write's error was wrapped on its way up.
static STDOUT_FAILURE: OnceLock<(std::io::ErrorKind, String)> = OnceLock::new();

/// How stdout failed, if it did.
pub fn stdout_failure() -> Option<&'static (std::io::ErrorKind, String)> {
    STDOUT_FAILURE.get()
}

/// What to tell someone whose stdout failed with `kind`.
pub fn describe_failure(kind: std::io::ErrorKind, message: &str) -> String {
    match kind {
        std::io::ErrorKind::StorageFull => {
            "cannot write the output: no space left on the device (the disk or the output is full)"
                .into()
        }
        _ => format!("cannot write the output: {message}"),
    }
}

fn remember<T>(result: std::io::Result<T>) -> std::io::Result<T> {
    if let Err(error) = &result {
        let _ = STDOUT_FAILURE.set((error.kind(), error.to_string()));
    }
    result
}

/// Stdout as a writer for exact bytes (JSON, exports, generated scripts),
/// remembering a failure.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        remember(std::io::stdout().write(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        remember(std::io::stdout().flush())
    }
}

/// Flush stdout at the end of a command.
pub fn flush() -> std::io::Result<()> {
    Stdout.flush()
}

fn stdout_is_terminal() -> bool {
    static TERMINAL: OnceLock<bool> = OnceLock::new();
    *TERMINAL.get_or_init(|| std::io::stdout().is_terminal())
}

fn stderr_is_terminal() -> bool {
    static TERMINAL: OnceLock<bool> = OnceLock::new();
    *TERMINAL.get_or_init(|| std::io::stderr().is_terminal())
}

/// Whether `c` is a bidirectional formatting control: embeddings and
/// overrides (U+202A to U+202E), isolates (U+2066 to U+2069) and the
/// marks (U+200E, U+200F, U+061C). Shown raw they reorder the text around
/// them on a terminal (a right-to-left override makes `exe.txt` of
/// `txt.exe`).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}')
}

/// `text` with control characters other than newline and tab escaped, and
/// bidirectional controls too.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| (c.is_control() && c != '\n' && c != '\t') || is_bidi_control(c);
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !unsafe_char(c) => escaped.push(c),
            c if (c as u32) < 0x80 => escaped.push_str(&format!("\\x{:02x}", c as u32)),
            c => escaped.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(escaped)
}

/// `text` as it may reach stdout: escaped when stdout is a terminal.
fn for_stdout(text: &str) -> Cow<'_, str> {
    if stdout_is_terminal() {
        escape_controls(text)
    } else {
        Cow::Borrowed(text)
    }
}

/// One line of human text on stdout (use [`outln!`]).
pub fn line(text: &str) -> std::io::Result<()> {
    let text = for_stdout(text);
    let mut out = std::io::stdout().lock();
    remember(
        out.write_all(text.as_bytes())
            .and_then(|()| out.write_all(b"\n")),
    )
}

/// Print one JSON value on its own line.
pub fn json(value: &impl Serialize) -> anyhow::Result<()> {
    let mut out = Stdout;
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// A status note on stderr (escaped when stderr is a terminal: notes
/// quote tool results and provider messages). Never fails: there is
/// nowhere left to report a failure to write to stderr.
pub fn note(text: impl std::fmt::Display) {
    let text = text.to_string();
    let text = if stderr_is_terminal() {
        escape_controls(&text)
    } else {
        Cow::Borrowed(text.as_str())
    };
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Whether streamed text left stdout in the middle of a line.
static MID_LINE: Mutex<bool> = Mutex::new(false);

fn mid_line() -> std::sync::MutexGuard<'static, bool> {
    MID_LINE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Write streamed reply text to stdout as it arrives. A failure is
/// remembered (the caller checks [`stdout_failure`] when the turn ends);
/// after one, nothing more is written.
pub fn stream_text(text: &str) {
    if text.is_empty() || stdout_failure().is_some() {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = remember(
        out.write_all(for_stdout(text).as_bytes())
            .and_then(|()| out.flush()),
    );
    if written.is_ok() {
        *mid_line() = !text.ends_with('\n');
    }
}

/// End the line streamed text left open, if it did: so that what follows
/// (the next model call's text, a note, an error) starts on its own line.
pub fn end_line() -> std::io::Result<()> {
    let mut open = mid_line();
    if !*open || stdout_failure().is_some() {
        return Ok(());
    }
    *open = false;
    let mut out = std::io::stdout().lock();
    remember(out.write_all(b"\n").and_then(|()| out.flush()))
}

/// Collapse whitespace and cut to `width` characters.
pub fn one_line(text: &str, width: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= width {
        flat
    } else {
        format!(
            "{}…",
            flat.chars()
                .take(width.saturating_sub(1))
                .collect::<String>()
        )
    }
}

/// A Unix-milliseconds timestamp as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn timestamp(ms: i64) -> String {
    let (year, month, day, hour, minute, second) = skein::core::calendar::utc(ms);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}")
}

/// A spinner on stderr while a long step runs; nothing when stderr is not a
/// terminal.
pub fn spinner(message: String) -> indicatif::ProgressBar {
    let bar = if stderr_is_terminal() {
        indicatif::ProgressBar::new_spinner()
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_message(message);
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// A bar counting `what` on stderr (its length set once known); nothing
/// when stderr is not a terminal.
pub fn counter(what: &str) -> indicatif::ProgressBar {
    if !stderr_is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}") {
        bar.set_style(style);
    }
    bar.set_message(what.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_render_in_utc() {
        assert_eq!(timestamp(0), "1970-01-01 00:00:00");
        assert_eq!(timestamp(1_796_000_000_000), "2026-11-30 00:53:20");
    }

    #[test]
    fn one_line_flattens_and_cuts() {
        assert_eq!(one_line("a\n  b", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }

    #[test]
    fn controls_are_escaped_but_newlines_and_tabs_stay() {
        assert_eq!(escape_controls("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(
            escape_controls("a\x1b[31mred\x07\r\u{9b}2J\u{7f}"),
            "a\\x1b[31mred\\x07\\x0d\\u{9b}2J\\x7f"
        );
        assert!(matches!(escape_controls("é ◀ ok"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("txt\u{202e}exe.\u{2066}a\u{2069}\u{200f}"),
            "txt\\u{202e}exe.\\u{2066}a\\u{2069}\\u{200f}"
        );
    }
}
