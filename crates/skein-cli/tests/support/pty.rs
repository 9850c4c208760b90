//! The `skein` binary on a pseudo-terminal, for what only happens on a
//! terminal (line editing, Ctrl-C, escaped output): stdin, stdout and
//! stderr are the terminal, everything it prints is collected by a reader
//! thread, and the test types into it and waits for text to appear.

use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Waits give up after this long: they guard against a hang, they do not
/// measure anything.
const PATIENCE: Duration = Duration::from_secs(60);

pub struct Terminal {
    child: Child,
    master: File,
    output: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Terminal {
    /// Run `command` with a pseudo-terminal of 120 columns as its stdin,
    /// stdout and stderr.
    pub fn spawn(mut command: Command) -> Terminal {
        let master: OwnedFd = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let size = rustix::termios::Winsize {
            ws_row: 40,
            ws_col: 120,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&master, size).unwrap();
        let slave = || {
            File::options()
                .read(true)
                .write(true)
                .open(name.to_str().unwrap())
                .unwrap()
        };
        let child = command
            .env("TERM", "xterm")
            .stdin(Stdio::from(slave()))
            .stdout(Stdio::from(slave()))
            .stderr(Stdio::from(slave()))
            .spawn()
            .unwrap();
        // The parent's copies of the slave are closed (the `Stdio`s are
        // dropped with the command), so reading the master ends when the
        // child exits.
        drop(command);
        let master = File::from(master);
        let output = Arc::new(Mutex::new(Vec::new()));
        let (mut reader, sink) = (master.try_clone().unwrap(), output.clone());
        let reader = std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(read) = reader.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buffer[..read]);
            }
        });
        Terminal {
            child,
            master,
            output,
            reader: Some(reader),
        }
    }

    /// Type `keys` (`\r` is Enter).
    pub fn send(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
        self.master.flush().unwrap();
    }

    /// Everything printed so far.
    pub fn output(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Wait until `text` has been printed `times` times in all.
    pub fn wait_for_count(&self, text: &str, times: usize) {
        let start = Instant::now();
        while self.output().matches(text).count() < times {
            assert!(
                start.elapsed() < PATIENCE,
                "waited for {text:?} ×{times}; the terminal shows:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until `text` has been printed.
    pub fn wait_for(&self, text: &str) {
        self.wait_for_count(text, 1);
    }

    /// Send SIGINT, as Ctrl-C does to the foreground process.
    pub fn interrupt(&self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    }

    /// Wait for the process to end; its exit code.
    pub fn finish(self) -> Option<i32> {
        self.finish_with_output().0
    }

    /// Wait for the process to end and for all it printed; its exit code
    /// and output.
    pub fn finish_with_output(mut self) -> (Option<i32>, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Reading ends once no process holds the terminal open.
                if let Some(reader) = self.reader.take() {
                    reader.join().unwrap();
                }
                return (status.code(), self.output());
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the process did not end; the terminal shows:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
