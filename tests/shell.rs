//! The interactive shell (`quarry sql --addr URL` with no statement)
//! driven through a pseudo-terminal, as a person at a terminal would:
//! statements over several lines, several on one line, backslash
//! commands, output modes, a transaction in the prompt, and the history
//! file.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

/// The terminal's side of the shell: what it printed (all of it, and what
/// the waits have not consumed yet), and a way to type.
struct Terminal {
    master: File,
    all: Arc<Mutex<String>>,
    seen: Arc<Mutex<String>>,
    typed: usize,
}

/// What the line editor prints each time it starts reading a line (it
/// turns on bracketed paste). Input typed before it may be discarded as
/// the editor switches the terminal to raw mode.
const READING: &str = "\x1b[?2004h";

impl Terminal {
    /// Types `line` once the shell reads its next line (the one after the
    /// lines typed so far).
    fn type_line(&mut self, line: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.all.lock().unwrap().matches(READING).count() <= self.typed {
            assert!(
                Instant::now() < deadline,
                "the shell never read line {}: {:?}",
                self.typed + 1,
                self.all.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.typed += 1;
        self.master.write_all(line.as_bytes()).unwrap();
        self.master.write_all(b"\r").unwrap();
        self.master.flush().unwrap();
    }

    /// Waits (20 s at most) until the output holds `text` after what the
    /// last wait consumed; returns the output up to it.
    fn wait_for(&mut self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            {
                let mut seen = self.seen.lock().unwrap();
                if let Some(at) = seen.find(text) {
                    let upto = seen[..at + text.len()].to_string();
                    seen.replace_range(..at + text.len(), "");
                    return upto;
                }
                assert!(
                    Instant::now() < deadline,
                    "the shell never printed {text:?}; it printed:\n{seen}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn the_shell_runs_multiline_statements_backslash_commands_and_keeps_history() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history");
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = File::from(pty.slave);
    let mut child = Command::new(QUARRY)
        .args(["sql", "--addr", &pg.compute])
        .env("QUARRY_HISTORY", &history)
        .env("TERM", "xterm")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let master = File::from(pty.master);
    let seen = Arc::new(Mutex::new(String::new()));
    let all = Arc::new(Mutex::new(String::new()));
    {
        let (seen, all) = (seen.clone(), all.clone());
        let mut reader = master.try_clone().unwrap();
        let mut answer = master.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                // A line editor may ask where the cursor is.
                if text.contains("\x1b[6n") {
                    let _ = answer.write_all(b"\x1b[1;1R");
                }
                seen.lock().unwrap().push_str(&text);
                all.lock().unwrap().push_str(&text);
            }
        });
    }
    let mut t = Terminal {
        master,
        all,
        seen,
        typed: 0,
    };
    t.wait_for("quarry> ");
    t.type_line("CREATE TABLE sh (id BIGINT PRIMARY KEY, v VARCHAR);");
    t.wait_for("CREATE TABLE (");
    t.wait_for("1 row (");
    // A statement over two lines, with a ';' inside a string.
    t.type_line("INSERT INTO sh VALUES (1, 'a;b'),");
    t.type_line("(2, 'c');");
    t.wait_for("     -> ");
    t.wait_for("| 2     |");
    // Two statements on one line, each printed with its row count.
    t.type_line("SELECT v FROM sh WHERE id = 1; SELECT v FROM sh ORDER BY id;");
    t.wait_for("| a;b |");
    t.wait_for("1 row (");
    t.wait_for("| c   |");
    t.wait_for("2 rows (");
    t.type_line("\\d sh");
    let described = t.wait_for("2 rows (");
    assert!(described.contains("PRI"), "{described}");
    t.type_line("\\d");
    t.wait_for("| sh   |");
    // A transaction shows in the prompt, and a failed statement leaves the
    // shell running with the error named.
    t.type_line("BEGIN;");
    t.wait_for("quarry*> ");
    t.type_line("UPDATE sh SET v = 'z' WHERE id = 2;");
    t.wait_for("quarry*> ");
    t.type_line("ROLLBACK;");
    t.wait_for("quarry> ");
    t.type_line("SELECT nope FROM sh;");
    t.wait_for("error: ");
    t.wait_for("nope");
    t.type_line("\\format csv");
    t.type_line("SELECT v FROM sh ORDER BY id;");
    t.wait_for("v\r\na;b\r\nc\r\n");
    t.type_line("\\q");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "\\q did not end the shell");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let kept = std::fs::read_to_string(&history).unwrap();
    assert!(kept.contains("(2, 'c');"), "{kept}");
    assert!(kept.contains("\\d sh"), "{kept}");
}
