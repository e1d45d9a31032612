//! `quarry sql --addr URL` with no statement: an interactive SQL shell.
//!
//! Lines are read with rustyline (editing, history kept in
//! `~/.quarry_history` or `$QUARRY_HISTORY`). A statement may span lines
//! and runs when a line ends it with `;` (outside quotes and comments,
//! `script.rs`); several on one line run in order. Every statement runs on
//! the shell's one session, so `BEGIN; …; COMMIT;` is one transaction, and
//! the prompt shows `quarry*>` while one is open. Each result is printed in
//! the current mode (table, csv or json), followed by its row count and
//! time in table mode, or by the time on stderr in the others, so CSV and
//! JSON output stays machine-readable.
//!
//! Backslash commands, alone on a line: `\d` lists tables, `\d NAME`
//! describes one, `\format table|csv|json` switches the mode, `\timing`
//! turns the times off and on, `\?` lists them and `\q` (or Ctrl-D) quits,
//! rolling back a transaction left open. Ctrl-C drops the statement being
//! typed. A failed statement prints its error and the shell goes on (in a
//! transaction the failure has aborted it, as the server says).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use crate::output::{self, Format};
use crate::script;

const HELP: &str = "\
  \\d           list tables
  \\d NAME      describe table NAME
  \\format MODE table, csv or json
  \\timing      turn the time after each statement off or on
  \\q           quit (Ctrl-D too)
SQL statements end with ';' and may span lines.";

fn history_path() -> Option<PathBuf> {
    std::env::var_os("QUARRY_HISTORY")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".quarry_history")))
}

struct Shell<'a> {
    client: &'a mut quarry_client::Client,
    format: Format,
    timing: bool,
}

/// What a backslash command asks for.
enum Meta {
    Quit,
    Run(String),
    Done,
}

impl Shell<'_> {
    fn meta(&mut self, line: &str) -> Meta {
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or_default();
        let arg = words.next();
        match (cmd, arg) {
            ("\\q", None) => return Meta::Quit,
            ("\\d", None) => return Meta::Run("SHOW TABLES".into()),
            ("\\d", Some(name)) => return Meta::Run(format!("DESCRIBE {name}")),
            ("\\format", Some(mode)) => match mode {
                "table" => self.format = Format::Table,
                "csv" => self.format = Format::Csv,
                "json" => self.format = Format::Json,
                other => eprintln!("unknown format {other}: table, csv or json"),
            },
            ("\\timing", None) => {
                self.timing = !self.timing;
                println!("timing {}", if self.timing { "on" } else { "off" });
            }
            ("\\?" | "\\h", _) => println!("{HELP}"),
            _ => eprintln!("unknown command {line}: \\? lists them"),
        }
        Meta::Done
    }

    async fn run(&mut self, stmt: &str) {
        let start = Instant::now();
        let result = self.client.sql(stmt).await;
        let took = start.elapsed().as_secs_f64() * 1e3;
        match result {
            Ok(batches) => {
                let mut out = std::io::stdout().lock();
                let _ = output::print(&mut out, &batches, self.format);
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                if self.timing {
                    let line = format!(
                        "{rows} row{} ({took:.3} ms)",
                        if rows == 1 { "" } else { "s" }
                    );
                    match self.format {
                        Format::Table => {
                            let _ = writeln!(out, "{line}");
                        }
                        _ => eprintln!("{line}"),
                    }
                }
                let _ = out.flush();
            }
            Err(e) => eprintln!("error: {e}"),
        }
    }

    fn prompt(&self, continuing: bool) -> &'static str {
        match (continuing, self.client.in_transaction()) {
            (true, _) => "     -> ",
            (false, true) => "quarry*> ",
            (false, false) => "quarry> ",
        }
    }
}

/// Runs the shell until `\q` or end of input.
pub async fn run(client: &mut quarry_client::Client, format: Format) -> anyhow::Result<()> {
    let mut rl = DefaultEditor::new()?;
    let history = history_path();
    if let Some(h) = &history {
        // A first run has no history yet.
        let _ = rl.load_history(h);
    }
    let mut shell = Shell {
        client,
        format,
        timing: true,
    };
    let mut pending = String::new();
    loop {
        let prompt = shell.prompt(!pending.is_empty());
        let line = match tokio::task::block_in_place(|| rl.readline(prompt)) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                pending.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        if !line.trim().is_empty() {
            let _ = rl.add_history_entry(line.as_str());
        }
        if pending.is_empty() && line.trim_start().starts_with('\\') {
            match shell.meta(line.trim()) {
                Meta::Quit => break,
                Meta::Run(stmt) => shell.run(&stmt).await,
                Meta::Done => {}
            }
            continue;
        }
        if !pending.is_empty() {
            pending.push('\n');
        }
        pending.push_str(&line);
        let (done, rest) = script::split(&pending);
        let rest = rest.map(str::to_string).unwrap_or_default();
        for stmt in done {
            shell.run(&stmt).await;
        }
        pending = rest;
    }
    if let Some(h) = &history {
        if let Err(e) = rl.save_history(h) {
            eprintln!("warning: history not saved to {}: {e}", h.display());
        }
    }
    if shell.client.in_transaction() {
        shell.client.rollback().await?;
        eprintln!("the open transaction was rolled back");
    }
    Ok(())
}
