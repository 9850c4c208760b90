//! The command line's column: `skein prompt`, `reply`, `fork` and `again`, one
//! process a turn. Its verdicts are exit codes: 0 (landed), 5 (the model
//! failed), 2 (a bad command line, such as a name that reads as an id).

use super::{Cell, Place, Setup, Surface, Verdict, slow};
use std::process::{Command, Output, Stdio};

pub(crate) struct CommandLine;

/// The verdict an exit code says.
fn verdict(output: &Output) -> Verdict {
    match output.status.code() {
        Some(0) => Verdict::Landed,
        Some(5) => Verdict::ModelFailed,
        Some(2) => Verdict::Refused,
        code => panic!(
            "skein exited with {code:?}: {}",
            skein_testkit::cli::stderr(output)
        ),
    }
}

fn run(place: &Place, args: &[&str]) -> Cell {
    Cell::Ran(verdict(&place.cli.run(args)))
}

/// `skein ARGS` on the slow model, started.
fn slow_command(place: &Place, args: &[&str]) -> Command {
    let mut command = place.cli.command(args);
    command
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", place.slow.base_url())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

impl Surface for CommandLine {
    fn explain(&self, place: &Place, node: &str) -> Cell<String> {
        let report = place.cli.json(&["explain", node, "--embedder", "lexical"]);
        Cell::Ran(report["conversation"].as_str().unwrap().to_string())
    }

    fn name(&self) -> String {
        "the CLI".into()
    }

    fn start(&self, place: &Place, text: &str, name: Option<&str>) -> Cell {
        let mut args = vec!["prompt", "-m", place.scripted.as_str()];
        if let Some(name) = name {
            args.extend(["--name", name]);
        }
        args.push(text);
        run(place, &args)
    }

    fn go_on(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        run(place, &["prompt", "--cid", &setup.conversation, text])
    }

    fn reply_at(&self, place: &Place, _: &Setup, node: &str, text: &str) -> Cell {
        run(place, &["reply", node, text])
    }

    fn fork(&self, place: &Place, setup: &Setup, text: &str, name: Option<&str>) -> Cell {
        let mut args = vec!["fork", setup.head.as_str()];
        if let Some(name) = name {
            args.extend(["--name", name]);
        }
        args.push(text);
        run(place, &args)
    }

    fn race(&self, place: &Place, setup: &Setup, slow: &str, fast: &str) -> Cell<[Verdict; 2]> {
        let cid = setup.conversation.as_str();
        let slow_turn = slow_command(place, &["prompt", "--cid", cid, "-m", slow::MODEL, slow])
            .spawn()
            .unwrap();
        place.slow.wait_for(slow);
        let fast = verdict(&place.cli.run(&["prompt", "--cid", cid, fast]));
        place.slow.release(slow);
        let slow = slow_turn.wait_with_output().unwrap();
        let said = skein_testkit::cli::stderr(&slow);
        assert!(
            said.contains("the reply landed in a new branch"),
            "the slow turn says where it landed: {said}"
        );
        Cell::Ran([verdict(&slow), fast])
    }

    fn tool_loop(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        self.go_on(place, setup, text)
    }

    fn edit_first(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        run(place, &["again", &setup.prompt, text])
    }

    fn retry_first(&self, place: &Place, setup: &Setup, _: &str) -> Cell {
        run(place, &["again", &setup.prompt])
    }

    fn go_on_with_schema(&self, place: &Place, setup: &Setup, text: &str, schema: &str) -> Cell {
        run(
            place,
            &[
                "prompt",
                "--cid",
                &setup.conversation,
                "--schema",
                schema,
                text,
            ],
        )
    }
}
