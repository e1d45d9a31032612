//! The chaos workloads: what each client does, through the Rust client
//! over Flight SQL, and how it records each operation.
//!
//! * REGISTER (`chaos_register`, one row per key, keys over two regions):
//!   autocommit reads (`SELECT v … WHERE k = ?`), writes (`UPDATE … SET
//!   v = new WHERE k = ?`) and compare-and-sets (`UPDATE … SET v = new
//!   WHERE k = ? AND v = old`, applied when it changed one row). Every
//!   value written is new in the run, so a read names the write it saw.
//! * APPEND (`chaos_append`, groups of [`GROUP_SIZE`] keys, two of the
//!   groups straddling a region boundary): transactions that read 3–5
//!   keys of one group and append a new element to each (`BEGIN; SELECT …
//!   WHERE k IN (…); UPDATE … SET v = v || ',e' …; COMMIT`), and
//!   autocommit reads of a whole group. An update transaction reads only
//!   what it writes, so snapshot isolation with first-committer-wins makes
//!   the history serializable, and the oracle's timestamps make it strict:
//!   Porcupine may check it as linearizable, group by group.
//! * LOCKS (the register table): pessimistic read-modify-writes (`BEGIN;
//!   SELECT v … FOR UPDATE; UPDATE … SET v = new; COMMIT`), with reads.
//!
//! A write's error decides its outcome ([`write_outcome`]): refused
//! (conflict, deadline without a hedge, invalid input) is a failure, no
//! effect; a lost connection, an unreachable store or an error that says
//! the statement "may or may not have committed" is unknown. A statement
//! of an open transaction that fails before COMMIT fails the whole
//! transaction: COMMIT is never sent, and its locks are rolled back.
//! After an unknown outcome the client connects again under a new process
//! id. Every operation is bounded by [`OP_TIMEOUT`]; one that outlives it
//! counts as stuck, which fails the run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use quarry_client::Client;

use super::history::{History, Op, Outcome};
use crate::bank::Rng;

pub const REGISTER_TABLE: &str = "chaos_register";
pub const REGISTER_KEYS: i64 = 8;
pub const APPEND_TABLE: &str = "chaos_append";
pub const GROUP_SIZE: i64 = 5;
pub const GROUPS: i64 = 6;
/// The longest one operation may take before the run calls it stuck.
pub const OP_TIMEOUT: Duration = Duration::from_secs(30);
/// Each client session's statement timeout (below [`OP_TIMEOUT`]).
const STATEMENT_TIMEOUT: &str = "15s";

/// What a client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Register,
    Append,
    Locks,
    /// The three at once, the clients shared among them.
    All,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Register => "register",
            Workload::Append => "append",
            Workload::Locks => "locks",
            Workload::All => "all",
        }
    }

    /// The workload of client `i`.
    pub fn of_client(self, i: usize) -> Workload {
        match self {
            Workload::All => [Workload::Register, Workload::Append, Workload::Locks][i % 3],
            w => w,
        }
    }
}

/// What every client shares.
pub struct Shared {
    pub url: String,
    pub history: Arc<History>,
    pub stop: AtomicBool,
    next_value: AtomicI64,
    next_process: AtomicU64,
    /// Operations that outlived [`OP_TIMEOUT`].
    pub stuck: AtomicU64,
}

impl Shared {
    pub fn new(url: String, history: Arc<History>) -> Arc<Shared> {
        Arc::new(Shared {
            url,
            history,
            stop: AtomicBool::new(false),
            next_value: AtomicI64::new(1),
            next_process: AtomicU64::new(0),
            stuck: AtomicU64::new(0),
        })
    }

    /// A value never written before in this run.
    fn value(&self) -> i64 {
        self.next_value.fetch_add(1, Ordering::Relaxed)
    }

    pub fn process(&self) -> u64 {
        self.next_process.fetch_add(1, Ordering::Relaxed)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// Creates the tables and their first rows (dropping old ones).
pub async fn create_tables(url: &str) -> anyhow::Result<()> {
    let mut c = Client::connect(url).await?;
    for t in [REGISTER_TABLE, APPEND_TABLE] {
        c.sql(&format!("DROP TABLE IF EXISTS {t}")).await?;
    }
    c.sql(&format!(
        "CREATE TABLE {REGISTER_TABLE} (k BIGINT PRIMARY KEY, v BIGINT NOT NULL) \
         WITH (split_handles = '{}')",
        REGISTER_KEYS / 2
    ))
    .await?;
    let rows: Vec<String> = (0..REGISTER_KEYS).map(|k| format!("({k}, 0)")).collect();
    c.sql(&format!(
        "INSERT INTO {REGISTER_TABLE} VALUES {}",
        rows.join(", ")
    ))
    .await?;
    // Groups 2 and 4 straddle a region boundary: their transactions
    // commit in two phases, the others' in one.
    c.sql(&format!(
        "CREATE TABLE {APPEND_TABLE} (k BIGINT PRIMARY KEY, v VARCHAR NOT NULL) \
         WITH (split_handles = '{},{}')",
        2 * GROUP_SIZE + 2,
        4 * GROUP_SIZE + 3
    ))
    .await?;
    let rows: Vec<String> = (0..GROUPS * GROUP_SIZE)
        .map(|k| format!("({k}, '')"))
        .collect();
    c.sql(&format!(
        "INSERT INTO {APPEND_TABLE} VALUES {}",
        rows.join(", ")
    ))
    .await?;
    Ok(())
}

/// The outcome of a write that failed with `e`.
pub fn write_outcome(e: &quarry_client::Error) -> Outcome {
    use quarry_client::Error::*;
    if e.to_string().contains("may or may not") {
        return Outcome::Unknown;
    }
    match e {
        Conflict(_) | InvalidInput(_) | Overflow(_) | Deadline(_) | Unauthenticated(_)
        | PermissionDenied(_) => Outcome::Fail,
        // A reset stream (CANCELLED) may have carried a commit.
        Unavailable(_) | Cancelled(_) | Internal(_) => Outcome::Unknown,
    }
}

fn ints(batches: &[RecordBatch], col: usize) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    for b in batches {
        let a = b
            .column(col)
            .as_primitive_opt::<Int64Type>()
            .ok_or("not a BIGINT column")?;
        for i in 0..a.len() {
            if a.is_null(i) {
                return Err("a NULL".into());
            }
            out.push(a.value(i));
        }
    }
    Ok(out)
}

/// (k, list) pairs of `SELECT k, v` over the append table.
fn lists(batches: &[RecordBatch]) -> Result<BTreeMap<String, Vec<i64>>, String> {
    let mut out = BTreeMap::new();
    let keys = ints(batches, 0)?;
    let mut values = Vec::new();
    for b in batches {
        let col = arrow::compute::cast(b.column(1), &arrow::datatypes::DataType::Utf8)
            .map_err(|e| format!("v is not text: {e}"))?;
        let text = col.as_string::<i32>();
        values.extend((0..text.len()).map(|i| text.value(i).to_string()));
    }
    for (k, v) in keys.into_iter().zip(values) {
        let list = v
            .split(',')
            .filter(|e| !e.is_empty())
            .map(|e| e.parse::<i64>().map_err(|_| format!("element {e:?}")))
            .collect::<Result<Vec<_>, _>>()?;
        out.insert(k.to_string(), list);
    }
    Ok(out)
}

/// A connected client with a bounded statement timeout, or None once the
/// run stopped.
async fn connect(sh: &Shared) -> Option<Client> {
    while !sh.stopped() {
        if let Ok(Ok(mut c)) =
            tokio::time::timeout(Duration::from_secs(5), Client::connect(&sh.url)).await
        {
            let set = format!("SET statement_timeout = '{STATEMENT_TIMEOUT}'");
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(5), c.sql(&set)).await {
                return Some(c);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// Ends `op` as `outcome` now.
fn finish(sh: &Shared, mut op: Op, outcome: Outcome, error: Option<String>) -> Op {
    op.ret = Some(sh.history.now());
    op.outcome = outcome;
    op.error = error;
    op
}

async fn read_register(c: &mut Client, sh: &Shared, op: Op) -> Op {
    let sql = format!("SELECT v FROM {REGISTER_TABLE} WHERE k = {}", op.key);
    match c
        .sql(&sql)
        .await
        .map_err(|e| e.to_string())
        .and_then(|b| ints(&b, 0))
    {
        Ok(v) if v.len() == 1 => {
            let mut op = op;
            op.value = Some(v[0]);
            finish(sh, op, Outcome::Ok, None)
        }
        Ok(v) => finish(sh, op, Outcome::Fail, Some(format!("{} rows", v.len()))),
        Err(e) => finish(sh, op, Outcome::Fail, Some(e)),
    }
}

/// One register operation: a read, a write or a compare-and-set of a
/// random key. `seen` is the last value this client saw per key (a CAS
/// expects it).
async fn register_op(
    c: &mut Client,
    sh: &Shared,
    rng: &mut Rng,
    process: u64,
    seen: &mut BTreeMap<i64, i64>,
) -> Op {
    let key = rng.below(REGISTER_KEYS as u64) as i64;
    let dice = rng.below(10);
    let f = match dice {
        0..=3 => "read",
        4..=6 => "write",
        _ => "cas",
    };
    let mut op = Op::new(process, f, sh.history.now());
    op.key = key;
    if f == "read" {
        let op = read_register(c, sh, op).await;
        if let (Outcome::Ok, Some(v)) = (op.outcome, op.value) {
            seen.insert(key, v);
        }
        return op;
    }
    let new = sh.value();
    op.value = Some(new);
    let sql = if f == "write" {
        format!("UPDATE {REGISTER_TABLE} SET v = {new} WHERE k = {key}")
    } else {
        let old = seen.get(&key).copied().unwrap_or(0);
        op.old = Some(old);
        format!("UPDATE {REGISTER_TABLE} SET v = {new} WHERE k = {key} AND v = {old}")
    };
    match c.sql(&sql).await {
        Ok(b) => match ints(&b, 0).as_deref() {
            Ok([n]) if *n == 1 || (f == "cas" && *n == 0) => {
                op.applied = *n == 1;
                if op.applied {
                    seen.insert(key, new);
                }
                finish(sh, op, Outcome::Ok, None)
            }
            other => finish(
                sh,
                op,
                Outcome::Unknown,
                Some(format!("the UPDATE answered {other:?}")),
            ),
        },
        Err(e) => finish(sh, op, write_outcome(&e), Some(e.to_string())),
    }
}

/// Ends an open transaction whose statements gave `body`: ROLLBACK after
/// a failed statement (the operation failed: COMMIT was never sent), else
/// COMMIT, whose error decides by [`write_outcome`].
async fn end_transaction(c: &mut Client, body: Result<(), String>) -> (Outcome, Option<String>) {
    if let Err(e) = body {
        let _ = c.rollback().await;
        return (Outcome::Fail, Some(e));
    }
    match c.commit().await {
        Ok(()) => (Outcome::Ok, None),
        Err(e) => (write_outcome(&e), Some(format!("COMMIT: {e}"))),
    }
}

/// A pessimistic read-modify-write of a random key (with reads between).
async fn locks_op(c: &mut Client, sh: &Shared, rng: &mut Rng, process: u64) -> Op {
    let key = rng.below(REGISTER_KEYS as u64) as i64;
    if rng.below(10) < 3 {
        let mut op = Op::new(process, "read", sh.history.now());
        op.key = key;
        return read_register(c, sh, op).await;
    }
    let mut op = Op::new(process, "rmw", sh.history.now());
    op.key = key;
    let new = sh.value();
    op.value = Some(new);
    if let Err(e) = c.begin().await {
        return finish(sh, op, Outcome::Fail, Some(format!("BEGIN: {e}")));
    }
    let mut read = None;
    let body = async {
        let b = c
            .sql(&format!(
                "SELECT v FROM {REGISTER_TABLE} WHERE k = {key} FOR UPDATE"
            ))
            .await
            .map_err(|e| format!("SELECT FOR UPDATE: {e}"))?;
        let v = ints(&b, 0)?;
        let [old] = v[..] else {
            return Err(format!("SELECT FOR UPDATE read {} rows", v.len()));
        };
        read = Some(old);
        let b = c
            .sql(&format!(
                "UPDATE {REGISTER_TABLE} SET v = {new} WHERE k = {key}"
            ))
            .await
            .map_err(|e| format!("UPDATE: {e}"))?;
        match ints(&b, 0)?.as_slice() {
            [1] => Ok(()),
            other => Err(format!("the UPDATE answered {other:?}")),
        }
    }
    .await;
    let (outcome, error) = end_transaction(c, body).await;
    op.old = read;
    finish(sh, op, outcome, error)
}

/// Reads every list of `op.group` (autocommit).
async fn read_group(c: &mut Client, sh: &Shared, mut op: Op) -> Op {
    let (lo, hi) = (
        op.group * GROUP_SIZE,
        op.group * GROUP_SIZE + GROUP_SIZE - 1,
    );
    let sql = format!("SELECT k, v FROM {APPEND_TABLE} WHERE k BETWEEN {lo} AND {hi}");
    let r = c.sql(&sql).await.map_err(|e| e.to_string());
    match r.and_then(|b| lists(&b)) {
        Ok(l) if l.len() == GROUP_SIZE as usize => {
            op.reads = l;
            finish(sh, op, Outcome::Ok, None)
        }
        Ok(l) => finish(
            sh,
            op,
            Outcome::Fail,
            Some(format!("read {} of the group's {GROUP_SIZE} rows", l.len())),
        ),
        Err(e) => finish(sh, op, Outcome::Fail, Some(e)),
    }
}

/// An append transaction over 3–5 keys of a random group, or a read of a
/// whole group.
async fn append_op(c: &mut Client, sh: &Shared, rng: &mut Rng, process: u64) -> Op {
    let group = rng.below(GROUPS as u64) as i64;
    let lo = group * GROUP_SIZE;
    if rng.below(10) < 4 {
        let mut op = Op::new(process, "read-group", sh.history.now());
        op.group = group;
        return read_group(c, sh, op).await;
    }
    let n = 3 + rng.below(GROUP_SIZE as u64 - 2) as usize;
    let mut keys: BTreeSet<i64> = BTreeSet::new();
    while keys.len() < n {
        keys.insert(lo + rng.below(GROUP_SIZE as u64) as i64);
    }
    let mut op = Op::new(process, "append", sh.history.now());
    op.group = group;
    op.keys = keys.iter().copied().collect();
    op.elems = op.keys.iter().map(|_| sh.value()).collect();
    let list: Vec<String> = op.keys.iter().map(|k| k.to_string()).collect();
    let list = list.join(", ");
    let cases: Vec<String> = op
        .keys
        .iter()
        .zip(&op.elems)
        .map(|(k, e)| format!("WHEN {k} THEN v || ',{e}'"))
        .collect();
    let select = format!("SELECT k, v FROM {APPEND_TABLE} WHERE k IN ({list})");
    let update = format!(
        "UPDATE {APPEND_TABLE} SET v = CASE k {} END WHERE k IN ({list})",
        cases.join(" ")
    );
    if let Err(e) = c.begin().await {
        return finish(sh, op, Outcome::Fail, Some(format!("BEGIN: {e}")));
    }
    let mut read = BTreeMap::new();
    let body = async {
        let b = c.sql(&select).await.map_err(|e| format!("SELECT: {e}"))?;
        let l = lists(&b)?;
        if l.len() != n {
            return Err(format!("read {} of {n} rows", l.len()));
        }
        read = l;
        let b = c.sql(&update).await.map_err(|e| format!("UPDATE: {e}"))?;
        match ints(&b, 0)?.as_slice() {
            [m] if *m == n as i64 => Ok(()),
            other => Err(format!("the UPDATE answered {other:?}")),
        }
    }
    .await;
    let (outcome, error) = end_transaction(c, body).await;
    if outcome == Outcome::Ok {
        op.reads = read;
    }
    finish(sh, op, outcome, error)
}

/// One client: operations of `workload` until the run stops.
pub async fn client(workload: Workload, seed: u64, sh: Arc<Shared>) {
    let mut rng = Rng(seed | 1);
    let mut seen = BTreeMap::new();
    let mut process = sh.process();
    let Some(mut c) = connect(&sh).await else {
        return;
    };
    while !sh.stopped() {
        let call = sh.history.now();
        let work = async {
            match workload {
                Workload::Register | Workload::All => {
                    register_op(&mut c, &sh, &mut rng, process, &mut seen).await
                }
                Workload::Locks => locks_op(&mut c, &sh, &mut rng, process).await,
                Workload::Append => append_op(&mut c, &sh, &mut rng, process).await,
            }
        };
        let op = match tokio::time::timeout(OP_TIMEOUT, work).await {
            Ok(op) => op,
            Err(_) => {
                sh.stuck.fetch_add(1, Ordering::Relaxed);
                let mut op = Op::new(process, "stuck", call);
                op.error = Some(format!("no answer within {OP_TIMEOUT:?}"));
                tracing::warn!(process, "an operation got no answer within {OP_TIMEOUT:?}");
                op
            }
        };
        let lost = op.outcome == Outcome::Unknown
            || op
                .error
                .as_deref()
                .is_some_and(|e| e.contains("transport") || e.contains("connect"));
        let unknown = op.outcome == Outcome::Unknown;
        if op.f != "stuck" {
            sh.history.record(op);
        }
        if unknown {
            // A crashed process, as Jepsen has it: its op stays open, and
            // the client goes on as a new one.
            process = sh.process();
        }
        if lost || c.in_transaction() {
            match connect(&sh).await {
                Some(n) => c = n,
                None => return,
            }
        }
    }
}

/// Reads every register and every group once more after the run, each
/// retried until it answers or `within` passes; returns what could not be
/// read.
pub async fn final_reads(sh: &Shared, workload: Workload, within: Duration) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + within;
    let mut missing = Vec::new();
    let mut c = None;
    let registers = matches!(
        workload,
        Workload::Register | Workload::Locks | Workload::All
    );
    let groups = matches!(workload, Workload::Append | Workload::All);
    let mut todo: Vec<(bool, i64)> = Vec::new();
    if registers {
        todo.extend((0..REGISTER_KEYS).map(|k| (true, k)));
    }
    if groups {
        todo.extend((0..GROUPS).map(|g| (false, g)));
    }
    for (register, id) in todo {
        loop {
            if c.is_none() {
                c = Client::connect(&sh.url).await.ok();
            }
            if let Some(cl) = c.as_mut() {
                let process = sh.process();
                let op = if register {
                    let mut op = Op::new(process, "read", sh.history.now());
                    op.key = id;
                    read_register(cl, sh, op).await
                } else {
                    let mut op = Op::new(process, "read-group", sh.history.now());
                    op.group = id;
                    read_group(cl, sh, op).await
                };
                let ok = op.outcome == Outcome::Ok;
                sh.history.record(op);
                if ok {
                    break;
                }
                c = None;
            }
            if tokio::time::Instant::now() > deadline {
                missing.push(match register {
                    true => format!("key {id}"),
                    false => format!("group {id}"),
                });
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    missing
}
