//! Test harness: a real `quarry playground` (3 storage processes and one
//! compute process on 127.0.0.1, ports picked by the OS) in a temporary
//! directory, driven through the `quarry` CLI and the client library.
//! Everything is stopped and deleted on drop.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Clusters are heavy on a 2-core machine: one at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub const QUARRY: &str = env!("CARGO_BIN_EXE_quarry");

/// A runtime for a test's async calls, made where they are needed.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub struct Playground {
    pub child: Option<Child>,
    /// Lines the playground prints after "ready" (restarted children).
    lines: std::sync::mpsc::Receiver<String>,
    pub dir: tempfile::TempDir,
    /// (pid, address) per store, store 1 first.
    pub stores: Vec<(u32, String)>,
    pub compute: String,
    pub compute_pid: u32,
    pub stderr_path: std::path::PathBuf,
    /// The status URLs the process lines ended with: stores in order,
    /// then compute.
    pub status_urls: Vec<String>,
    /// A secure playground's CA certificate (its `ca PATH` line).
    pub ca: Option<String>,
    /// root's password (`--password`), for `sql`.
    pub password: Option<String>,
    /// Compute's PostgreSQL address (`HOST:PORT`, its `postgres:` line).
    pub postgres: String,
}

impl Playground {
    pub fn start(args: &[&str]) -> Playground {
        Self::start_in(tempfile::tempdir().expect("tempdir"), args)
    }

    /// 3 stores and TPC-H lineitem at SF 0.01 (60,175 rows), with `more`
    /// of the playground's flags.
    pub fn start_lineitem(more: &[&str]) -> Playground {
        let mut args = vec!["--stores", "3", "--sf", "0.01", "--tables", "lineitem"];
        args.extend_from_slice(more);
        Self::start(&args)
    }

    /// A secure playground (`--secure`): 3 stores, TPC-H lineitem at SF
    /// 0.01, the superuser root with `password`.
    pub fn start_secure(password: &str) -> Playground {
        Self::start_lineitem(&["--secure", "--password", password])
    }

    pub fn start_in(dir: tempfile::TempDir, args: &[&str]) -> Playground {
        let stderr_path = dir.path().join("playground.stderr");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_path)
            .unwrap();
        let mut child = Command::new(QUARRY)
            .arg("playground")
            .arg("--dir")
            .arg(dir.path().join("data"))
            .arg("--exit-with-parent")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("start quarry playground");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stores = Vec::new();
        let mut compute = String::new();
        let mut compute_pid = 0;
        let mut status_urls = Vec::new();
        let mut ca = None;
        let mut postgres = String::new();
        let password = args
            .iter()
            .position(|a| *a == "--password")
            .map(|i| args[i + 1].to_string());
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "playground not ready in time; stderr:\n{}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                )
            });
            if let Some((_, url)) = line.rsplit_once(" status ") {
                status_urls.push(url.to_string());
            }
            let words = process_line(&line);
            match words.as_slice() {
                ["storage", _n, "pid", pid, "addr", addr] => {
                    stores.push((pid.parse().unwrap(), addr.to_string()))
                }
                ["compute:", "pid", pid, "addr", addr] => {
                    compute_pid = pid.parse().unwrap();
                    compute = addr.to_string();
                }
                ["ca", path] => ca = Some(path.to_string()),
                // More compute processes (`--computes N`).
                ["compute", _n, "addr", _url] => {}
                ["postgres:", "addr", addr, ..] => postgres = addr.to_string(),
                ["ready"] => break,
                _ => panic!("unexpected playground line: {line}"),
            }
        }
        Playground {
            child: Some(child),
            lines: rx,
            dir,
            stores,
            compute,
            compute_pid,
            stderr_path,
            status_urls,
            ca,
            password,
            postgres,
        }
    }

    /// Waits for a line starting with `prefix` (e.g. "storage 2:" when
    /// the playground restarted store 2) and records the new address.
    pub fn wait_line(&mut self, prefix: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "no '{prefix}' line within {within:?}; stderr:\n{}",
                    self.stderr()
                )
            });
            let words = process_line(&line);
            if let ["storage", n, "pid", pid, "addr", addr] = words.as_slice() {
                let i: usize = n.trim_end_matches(':').parse::<usize>().unwrap() - 1;
                self.stores[i] = (pid.parse().unwrap(), addr.to_string());
                if let Some((_, url)) = line.rsplit_once(" status ") {
                    self.status_urls[i] = url.to_string();
                }
            }
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    /// Asks the playground to restart every exited child now.
    pub fn restart_children(&self) {
        signal(self.child.as_ref().unwrap().id(), "HUP");
    }

    /// Another compute process over this cluster's stores, with `args`
    /// (its own settings); stopped on drop.
    pub fn extra_compute(&self, args: &[&str]) -> ExtraCompute {
        let mut child = Command::new(QUARRY)
            .args(["compute", "--addr", "127.0.0.1:0", "--exit-with-parent"])
            .args(["--status-addr", "127.0.0.1:0"])
            .arg("--stores")
            .arg(self.store_addrs().join(","))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start quarry compute");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // "compute listening on ADDR status URL[ postgres ADDR]"
        let word_after = |label: &str| {
            line.split_once(label)
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or_else(|| panic!("no {label:?} in {line:?}"))
                .to_string()
        };
        let addr = word_after("listening on ");
        ExtraCompute {
            child,
            url: format!("http://{addr}"),
            status_url: word_after(" status "),
        }
    }

    pub fn store_addrs(&self) -> Vec<String> {
        self.stores.iter().map(|(_, a)| a.clone()).collect()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The lines of the children's logs (`DIR/data/<name>.log`) that
    /// contain `needle`, each prefixed by its log's name: for failure
    /// messages.
    pub fn log_lines(&self, needle: &str) -> String {
        let mut out = String::new();
        let Ok(entries) = std::fs::read_dir(self.dir.path().join("data")) else {
            return out;
        };
        let mut logs: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        for log in logs {
            let name = log.file_stem().unwrap_or_default().to_string_lossy();
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains(needle)) {
                out.push_str(&format!("{name}: {line}\n"));
            }
        }
        out
    }

    /// `quarry sql --addr <compute> --format <format> <sql>`.
    /// A secure playground's: as root, trusting its CA.
    pub fn sql(&self, format: &str, sql: &str) -> Output {
        let mut cmd = Command::new(QUARRY);
        cmd.args(["sql", "--addr", &self.compute, "--format", format]);
        if let Some(ca) = &self.ca {
            cmd.args(["--ca", ca, "--user", "root"]);
            cmd.env("QUARRY_PASSWORD", self.password.as_deref().unwrap_or(""));
        }
        cmd.arg(sql).output().expect("run quarry sql")
    }

    /// A gRPC channel to the compute process (for Flight clients).
    pub async fn compute_channel(&self) -> tonic::transport::Channel {
        tonic::transport::Endpoint::from_shared(self.compute.clone())
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// Runs SQL that must succeed; returns stdout.
    pub fn ok(&self, sql: &str) -> String {
        let out = self.sql("csv", sql);
        assert!(
            out.status.success(),
            "{} failed: {}",
            statement_for_message(sql),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs SQL that must fail with exit code 1; returns stderr.
    pub fn fails(&self, sql: &str) -> String {
        let out = self.sql("csv", sql);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{} should fail, stdout: {}",
            statement_for_message(sql),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// Stops the playground with SIGTERM and waits for it.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        signal(child.id(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("playground did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Playground {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(c.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A compute process started by [`Playground::extra_compute`].
pub struct ExtraCompute {
    child: Child,
    pub url: String,
    /// Its status port's URL (metrics, the console).
    pub status_url: String,
}

impl ExtraCompute {
    /// Kills the process now (SIGKILL, as a crash would) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ExtraCompute {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A statement as a failure message shows it: whole when short, else its
/// start and its length, so that the error after it is not cut off with it
/// (CI shows only the start and end of a long message).
pub fn statement_for_message(sql: &str) -> String {
    const SHOWN: usize = 200;
    match sql.char_indices().nth(SHOWN) {
        None => sql.to_string(),
        Some((end, _)) => format!("{}… ({} bytes in all)", &sql[..end], sql.len()),
    }
}

/// A playground process line's words without its " status URL" ending
/// (the status ports are checked by tests/metrics.rs).
pub fn process_line(line: &str) -> Vec<&str> {
    let mut words: Vec<&str> = line.split_whitespace().collect();
    if words.len() >= 2 && words[words.len() - 2] == "status" {
        words.truncate(words.len() - 2);
    }
    words
}

pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

pub fn process_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Compares CSV output with an expected CSV: the same header and rows,
/// every field identical except `avg*` columns (DOUBLE), which must agree
/// to a relative 1e-9.
pub fn assert_csv_matches(got: &str, want: &str) {
    let g: Vec<&str> = got.lines().collect();
    let w: Vec<&str> = want.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(g.first(), w.first(), "header");
    assert_eq!(g.len(), w.len(), "row count:\n{got}");
    let header: Vec<&str> = w[0].split(',').collect();
    for (gl, wl) in g.iter().zip(&w).skip(1) {
        for ((gv, wv), name) in gl.split(',').zip(wl.split(',')).zip(&header) {
            if name.starts_with("avg") {
                let (a, b): (f64, f64) = (gv.parse().unwrap(), wv.parse().unwrap());
                assert!((a - b).abs() <= 1e-9 * b.abs(), "{name}: {gv} vs {wv}");
            } else {
                assert_eq!(gv, wv, "{name} in\n{got}");
            }
        }
    }
}

impl Playground {
    /// Stops this playground and starts a new one over the same data dir.
    pub fn restart(mut self, args: &[&str]) -> Playground {
        let status = self.stop();
        assert!(status.success(), "playground exited with {status}");
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        Playground::start_in(dir, args)
    }
}

/// One SQL case checked against DuckDB: its name, its SQL, and DuckDB's
/// answer (CSV) and column types.
pub struct Case {
    pub name: String,
    pub sql: String,
    pub csv: String,
    pub types: String,
}

/// The 22 TPC-H queries with DuckDB's answers at scale factor `sf`.
pub fn tpch_cases(sf: f64) -> Vec<Case> {
    quarry::answers::QUERIES
        .iter()
        .map(|(name, sql)| {
            let (csv, types) = quarry::answers::answer(name, sf).unwrap();
            Case {
                name: name.to_string(),
                sql: sql.to_string(),
                csv: csv.to_string(),
                types: types.to_string(),
            }
        })
        .collect()
}

/// The cases whose answer from the compute process at `compute` fails or
/// differs from DuckDB's, one line each (empty: all match).
pub fn mismatches(compute: &str, cases: &[Case]) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = quarry_client::Client::connect(compute).await.unwrap();
        let mut failures = Vec::new();
        for case in cases {
            match c.sql(&case.sql).await {
                Ok(batches) => {
                    if let Err(e) = quarry::answers::check(&batches, &case.csv, case.types.trim()) {
                        failures.push(format!("{}: {e}", case.name));
                    }
                }
                Err(e) => failures.push(format!("{}: error: {e}", case.name)),
            }
        }
        failures
    })
}

/// The line of `table`'s region scan in an `EXPLAIN ANALYZE` plan, and the
/// rows its regions sent to compute.
pub fn scan_rows_out<'a>(plan: &'a str, table: &str) -> (&'a str, u64) {
    let scan = plan
        .lines()
        .find(|l| l.contains(&format!("RegionScanExec: table={table}")))
        .unwrap_or_else(|| panic!("no {table} scan in {plan}"));
    let rows_out = scan
        .split(" rows out")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no row count in {scan}"));
    (scan, rows_out)
}

/// The plan lines of `EXPLAIN ANALYZE` for `sql`, and the number after
/// `what` in them (e.g. "packs: 3 scanned" → 3 for "packs: ").
pub fn analyzed(pg: &Playground, sql: &str, what: &str) -> (String, u64) {
    let text = pg.ok(&format!("EXPLAIN ANALYZE {sql}"));
    let n = text
        .split(what)
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no '{what}' in {text}"));
    (text, n)
}

/// Waits (30 s at most) until `done(keys, packs)` holds for a COUNT(*) of
/// `table`: keys scanned (packs and delta rows) and packs among them.
pub fn wait_for_keys_and_packs(pg: &Playground, table: &str, done: impl Fn(u64, u64) -> bool) {
    let sql = format!("SELECT count(*) FROM {table}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (text, packs) = analyzed(pg, &sql, "packs: ");
        let (_, keys) = analyzed(pg, &sql, "storage: ");
        if done(keys, packs) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no compaction within 30 s: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// What `quarry status` prints for the playground's first store.
pub fn status_text(pg: &Playground) -> String {
    let out = Command::new(QUARRY)
        .args(["status", "--store", &pg.store_addrs()[0]])
        .output()
        .expect("run quarry status");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the sample `name` (with its labels, as printed) in a
/// metrics page, 0 if absent.
pub fn sample(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// An HTTP/1.1 request to a status port (`url` is `http://HOST:PORT`):
/// (status code, body).
pub fn http(url: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// The status of each store in `addrs` that answers.
pub fn statuses(addrs: &[String]) -> Vec<quarry_proto::meta::StatusResponse> {
    runtime().block_on(async {
        let mut out = Vec::new();
        for a in addrs {
            if let Ok(s) = quarry::status::fetch(a).await {
                out.push(s);
            }
        }
        out
    })
}

/// Waits until every store answers and has applied as far as each
/// region's leader.
pub fn wait_caught_up(pg: &Playground, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let all = statuses(&pg.store_addrs());
        let behind = all.len() < pg.stores.len() || quarry::status::followers_behind(&all);
        if !behind {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replicas did not catch up within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The rows of table `acked (id, v)` by id: the table the tests of loads
/// under faults write (each row `(id, id * 7 + 3)`).
///
/// Read right after a store died or came back, the query may find the
/// meta region between leaders for longer than the compute's 10 s meta
/// budget on a loaded machine (CI once saw "the meta service is
/// unavailable … no leader known"): that refusal loses nothing, so it is
/// retried for up to 30 s after the first. Any other failure fails at
/// once.
pub fn acked_rows(pg: &Playground) -> std::collections::BTreeMap<i64, i64> {
    let sql = "SELECT id, v FROM acked ORDER BY id";
    let mut deadline = None;
    let text = loop {
        let out = pg.sql("csv", sql);
        if out.status.success() {
            break String::from_utf8(out.stdout).unwrap();
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let until = *deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(30));
        assert!(
            err.contains("the meta service is unavailable") && Instant::now() < until,
            "{sql} failed: {err}"
        );
        eprintln!("{sql}: retrying after {}", err.trim());
        std::thread::sleep(Duration::from_millis(500));
    };
    text.lines()
        .skip(1)
        .map(|l| {
            let (a, b) = l.split_once(',').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

/// A client program's output cut at its "== name" lines (each section
/// CSV: a header, then rows).
pub fn sections(out: &str) -> std::collections::BTreeMap<String, String> {
    let mut map = std::collections::BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in out.lines() {
        if let Some(name) = line.strip_prefix("== ") {
            map.extend(current.take());
            current = Some((name.to_string(), String::new()));
        } else if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    map.extend(current);
    map
}

/// Section `name` of [`sections`]' answer, or a failure listing them.
pub fn section<'a>(s: &'a std::collections::BTreeMap<String, String>, name: &str) -> &'a str {
    s.get(name)
        .unwrap_or_else(|| panic!("no section {name} in {s:#?}"))
}

/// A path in the repository.
pub fn repo_path(path: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The venv's Python (`$QUARRY_VENV`, else `~/.cache/quarry-venv`) if it
/// can `import {modules}`, or a failure naming `what` is missing and how
/// to get it.
pub fn venv_python(modules: &str, what: &str) -> std::path::PathBuf {
    let venv = std::env::var_os("QUARRY_VENV")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/quarry-venv"))
        })
        .expect("neither QUARRY_VENV nor HOME is set");
    let python = venv.join("bin/python");
    let ok = Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import {what}: run scripts/setup.sh (or set QUARRY_VENV)",
        python.display()
    );
    python
}

/// `PUT /fail/NAME` with `actions` (or `DELETE` for `None`) on the status
/// port at `url`; panics unless it answers 200.
pub fn failpoint(url: &str, name: &str, actions: Option<&str>) {
    let (method, body) = match actions {
        Some(a) => ("PUT", a),
        None => ("DELETE", ""),
    };
    let (code, text) = http(url, method, &format!("/fail/{name}"), body);
    assert_eq!(code, 200, "{method} /fail/{name}: {text}");
}

/// Switches `name` on (or off) in every store.
pub fn on_every_store(pg: &Playground, name: &str, actions: Option<&str>) {
    for url in &pg.status_urls[..pg.stores.len()] {
        failpoint(url, name, actions);
    }
}
