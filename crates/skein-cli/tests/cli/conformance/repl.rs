//! The chat REPL's column: `skein chat` on a pseudo-terminal, one line a
//! turn (`!reply NODE` and `!fork` first where the row needs them). Its
//! verdicts are what it prints: the reply, or an error after which
//! the chat goes on (and ends with exit code 0), or exit code 2 before the
//! chat starts.

use super::{Cell, Place, Setup, Surface, Verdict};
use crate::pty::Terminal;
use std::time::{Duration, Instant};

pub(crate) struct Repl;

/// A chat on a terminal, counting its prompts.
struct Chat {
    terminal: Terminal,
    prompts: usize,
}

impl Chat {
    fn open(place: &Place, args: &[&str]) -> Chat {
        let mut all = vec!["chat"];
        all.extend_from_slice(args);
        let mut command = place.cli.command(&all);
        command.env("XDG_DATA_HOME", place.cli.dir().join("chat-data"));
        let terminal = Terminal::spawn(command);
        terminal.wait_for_count("> ", 1);
        Chat {
            terminal,
            prompts: 1,
        }
    }

    /// Type a `!` command and wait for the next prompt.
    fn command(&mut self, line: &str) {
        self.terminal.send(&format!("{line}\r"));
        self.prompts += 1;
        self.terminal.wait_for_count("> ", self.prompts);
    }

    /// Type a turn; what the chat printed of it.
    fn turn(&mut self, text: &str) -> Verdict {
        self.line(text, text)
    }

    /// Type `line`, a turn whose user message is `text`; what the chat
    /// printed of it.
    fn line(&mut self, line: &str, text: &str) -> Verdict {
        let before = self.terminal.output().len();
        self.terminal.send(&format!("{line}\r"));
        let reply = format!("scripted: {text}");
        let deadline = Instant::now() + Duration::from_secs(60);
        let verdict = loop {
            let output = self.terminal.output();
            let since = output.get(before..).unwrap_or(&output);
            if since.contains(&reply) {
                break Verdict::Landed;
            }
            if since.contains("error:") {
                break Verdict::ModelFailed;
            }
            assert!(
                Instant::now() < deadline,
                "the chat printed neither the reply to {text:?} nor the model's error:\n{output}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        self.prompts += 1;
        self.terminal.wait_for_count("> ", self.prompts);
        verdict
    }

    /// Leave; the chat ends well whatever its turns did.
    fn quit(mut self) -> String {
        self.terminal.send("!quit\r");
        let (code, output) = self.terminal.finish_with_output();
        assert_eq!(code, Some(0), "{output}");
        output
    }
}

/// One turn in a chat opened with `args` after the `!` commands `first`.
fn one_turn(place: &Place, args: &[&str], first: &[&str], text: &str) -> Cell {
    let mut chat = Chat::open(place, args);
    for line in first {
        chat.command(line);
    }
    let verdict = chat.turn(text);
    chat.quit();
    Cell::Ran(verdict)
}

impl Surface for Repl {
    fn name(&self) -> String {
        "the chat REPL".into()
    }

    fn start(&self, place: &Place, text: &str, name: Option<&str>) -> Cell {
        let Some(name) = name else {
            return one_turn(place, &["-m", &place.scripted], &[], text);
        };
        // Refused before the chat starts: nothing is typed.
        let command = place
            .cli
            .command(&["chat", "-m", &place.scripted, "--name", name]);
        let (code, output) = Terminal::spawn(command).finish_with_output();
        assert_eq!(code, Some(2), "{output}");
        assert!(output.contains("cannot look like an id"), "{output}");
        Cell::Ran(Verdict::Refused)
    }

    fn go_on(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        one_turn(place, &["--cid", &setup.conversation], &[], text)
    }

    /// From a chat on the default model (the echo): the turn at `node`
    /// must answer on the model of the conversation `node` belongs to.
    fn reply_at(&self, place: &Place, _: &Setup, node: &str, text: &str) -> Cell {
        let reply = format!("!reply {node}");
        one_turn(place, &[], &[&reply], text)
    }

    fn fork_at_another_models_reply(&self, _: &Place, _: &Setup, _: &str) -> Cell {
        Cell::Lacks(
            "`!fork` forks the chat's conversation, which goes on with the chat's model; the \
             chat has no fork of one response",
        )
    }

    fn fork(&self, place: &Place, setup: &Setup, text: &str, name: Option<&str>) -> Cell {
        if name.is_some() {
            return Cell::Lacks("`!fork` takes no name (a name is given with `chat --name`)");
        }
        one_turn(place, &["--cid", &setup.conversation], &["!fork"], text)
    }

    /// The chat holds the conversation at its head while another process
    /// moves it on; the chat's next turn starts from the head it holds.
    fn race(&self, place: &Place, setup: &Setup, slow: &str, fast: &str) -> Cell<[Verdict; 2]> {
        let mut chat = Chat::open(place, &["--cid", &setup.conversation]);
        let fast = place
            .cli
            .run(&["prompt", "--cid", &setup.conversation, fast]);
        assert!(
            fast.status.success(),
            "{}",
            skein_testkit::cli::stderr(&fast)
        );
        let slow = chat.turn(slow);
        let output = chat.quit();
        assert!(
            output.contains("new branch"),
            "the chat says its turn landed in a branch:\n{output}"
        );
        Cell::Ran([slow, Verdict::Landed])
    }

    fn tool_loop(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        self.go_on(place, setup, text)
    }

    fn edit_first(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        let mut chat = Chat::open(place, &["--cid", &setup.conversation]);
        let verdict = chat.line(&format!("!edit {text}"), text);
        chat.quit();
        Cell::Ran(verdict)
    }

    fn retry_first(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        let mut chat = Chat::open(place, &["--cid", &setup.conversation]);
        let verdict = chat.line("!retry", text);
        chat.quit();
        Cell::Ran(verdict)
    }

    fn go_on_with_schema(&self, place: &Place, setup: &Setup, text: &str, schema: &str) -> Cell {
        one_turn(
            place,
            &["--cid", &setup.conversation, "--schema", schema],
            &[],
            text,
        )
    }
}
