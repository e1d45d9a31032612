//! The history of a chaos run, as Jepsen records one: every client
//! operation with its process, its call and return times and its outcome,
//! and every fault the nemesis applied with when it began and was healed.
//!
//! Times are nanoseconds since the run began, from one monotonic clock in
//! this process (every client is a task here), so the order of any two
//! operations is the order their clients saw.
//!
//! OUTCOMES. `ok`: the client got its answer. `fail`: the operation had
//! no effect, for certain (a write refused with a conflict, a statement of
//! an open transaction that failed before its COMMIT was sent, a read that
//! got an error). `unknown`: a write whose answer never came or said it
//! "may or may not have committed" (a store or compute killed under it, a
//! deadline during commit); it stays open to the end of the history, and
//! its process is not used again (Jepsen's rule: a crashed process).
//!
//! Two files are written: `history.json` (what the Porcupine checker in
//! `tools/porcupine` reads) and `history.edn`, the same operations as
//! Jepsen's invoke/complete events, so that the history can be re-checked
//! with Knossos or Elle elsewhere (registers as independent `[key value]`
//! tuples with `:read`, `:write` and `:cas`; append transactions as Elle's
//! list-append `:txn` micro-operations).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use parking_lot::Mutex;
use serde::Serialize;

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Fail,
    Unknown,
}

/// One client operation (the fields the checker reads; the ones a kind
/// does not use stay empty).
#[derive(Debug, Clone, Serialize)]
pub struct Op {
    pub process: u64,
    /// read | write | cas | rmw (registers); append | read-group (lists).
    pub f: &'static str,
    pub key: i64,
    pub group: i64,
    /// The value read (read), written (write, rmw), or set (cas).
    pub value: Option<i64>,
    /// cas: the value expected; rmw: the value read under the lock.
    pub old: Option<i64>,
    /// cas: whether it changed the row.
    pub applied: bool,
    /// append: the keys appended to, and each one's element.
    pub keys: Vec<i64>,
    pub elems: Vec<i64>,
    /// Lists read, by key (append, read-group).
    pub reads: BTreeMap<String, Vec<i64>>,
    pub call: u64,
    #[serde(rename = "return")]
    pub ret: Option<u64>,
    pub outcome: Outcome,
    pub error: Option<String>,
}

impl Op {
    pub fn new(process: u64, f: &'static str, call: u64) -> Op {
        Op {
            process,
            f,
            key: 0,
            group: 0,
            value: None,
            old: None,
            applied: false,
            keys: vec![],
            elems: vec![],
            reads: BTreeMap::new(),
            call,
            ret: None,
            outcome: Outcome::Unknown,
            error: None,
        }
    }
}

/// One fault: its name, when it began, when it was healed.
#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    pub name: String,
    pub start: u64,
    pub end: Option<u64>,
}

#[derive(Serialize)]
struct Document<'a> {
    workload: &'a str,
    group_size: i64,
    seed: u64,
    ops: &'a [Op],
    faults: &'a [Fault],
}

/// The operations and faults of a run, appended to by every task.
pub struct History {
    t0: Instant,
    ops: Mutex<Vec<Op>>,
    faults: Mutex<Vec<Fault>>,
}

impl History {
    pub fn new() -> History {
        History {
            t0: Instant::now(),
            ops: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
        }
    }

    /// Nanoseconds since the run began.
    pub fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    pub fn record(&self, op: Op) {
        self.ops.lock().push(op);
    }

    /// Notes that `name` begins now; returns its index for [`History::healed`].
    pub fn fault(&self, name: String) -> usize {
        let mut f = self.faults.lock();
        f.push(Fault {
            name,
            start: self.now(),
            end: None,
        });
        f.len() - 1
    }

    pub fn healed(&self, fault: usize) {
        let now = self.now();
        if let Some(f) = self.faults.lock().get_mut(fault) {
            f.end = Some(now);
        }
    }

    pub fn ops(&self) -> Vec<Op> {
        let mut ops = self.ops.lock().clone();
        ops.sort_by_key(|o| o.call);
        ops
    }

    pub fn faults(&self) -> Vec<Fault> {
        self.faults.lock().clone()
    }

    /// Writes `history.json` and `history.edn` into `dir`.
    pub fn write(&self, dir: &Path, workload: &str, group_size: i64, seed: u64) -> Result<()> {
        let (ops, faults) = (self.ops(), self.faults());
        let doc = Document {
            workload,
            group_size,
            seed,
            ops: &ops,
            faults: &faults,
        };
        let json = serde_json::to_vec(&doc)?;
        std::fs::write(dir.join("history.json"), json)
            .with_context(|| format!("writing {}", dir.join("history.json").display()))?;
        std::fs::write(dir.join("history.edn"), edn(&ops))
            .with_context(|| format!("writing {}", dir.join("history.edn").display()))?;
        Ok(())
    }
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

fn edn_list(l: &[i64]) -> String {
    let items: Vec<String> = l.iter().map(|e| e.to_string()).collect();
    format!("[{}]", items.join(" "))
}

fn edn_opt(v: Option<i64>) -> String {
    v.map_or("nil".into(), |v| v.to_string())
}

/// An operation's `:f` and `:value` as Jepsen writes them, at its
/// invocation (`done` false: what is unknown yet is nil) or completion.
fn edn_value(o: &Op, done: bool) -> (&'static str, String) {
    let known = done && o.outcome == Outcome::Ok;
    match o.f {
        "read" => (
            ":read",
            format!(
                "[{} {}]",
                o.key,
                edn_opt(if known { o.value } else { None })
            ),
        ),
        "write" => (":write", format!("[{} {}]", o.key, edn_opt(o.value))),
        "cas" => (
            ":cas",
            format!("[{} [{} {}]]", o.key, edn_opt(o.old), edn_opt(o.value)),
        ),
        "rmw" => (
            ":txn",
            format!(
                "[[:r {} {}] [:w {} {}]]",
                o.key,
                edn_opt(if known { o.old } else { None }),
                o.key,
                edn_opt(o.value)
            ),
        ),
        _ => {
            let mut mops = Vec::new();
            let read_keys: Vec<i64> = match o.f {
                "append" => o.keys.clone(),
                _ => o.reads.keys().filter_map(|k| k.parse().ok()).collect(),
            };
            for k in &read_keys {
                let seen = o.reads.get(&k.to_string()).filter(|_| known);
                mops.push(format!(
                    "[:r {k} {}]",
                    seen.map_or("nil".into(), |l| edn_list(l))
                ));
            }
            for (k, e) in o.keys.iter().zip(&o.elems) {
                mops.push(format!("[:append {k} {e}]"));
            }
            (":txn", format!("[{}]", mops.join(" ")))
        }
    }
}

/// The history as Jepsen's EDN: an invoke and a completion event per
/// operation (`:ok`, `:fail`, or `:info` at the end for an unknown one),
/// in time order.
fn edn(ops: &[Op]) -> String {
    let end = ops.iter().filter_map(|o| o.ret).max().unwrap_or(0) + 1;
    let mut events: Vec<(u64, String)> = Vec::new();
    for o in ops {
        let (f, value) = edn_value(o, false);
        events.push((
            o.call,
            format!(
                "{{:type :invoke, :f {f}, :value {value}, :process {}, :time {}}}",
                o.process, o.call
            ),
        ));
        let (f, value) = edn_value(o, true);
        let (kind, at) = match o.outcome {
            // Knossos's cas: :ok applied, :fail did not.
            Outcome::Ok if o.f == "cas" && !o.applied => (":fail", o.ret.unwrap_or(end)),
            Outcome::Ok => (":ok", o.ret.unwrap_or(end)),
            Outcome::Fail => (":fail", o.ret.unwrap_or(end)),
            Outcome::Unknown => (":info", end),
        };
        events.push((
            at,
            format!(
                "{{:type {kind}, :f {f}, :value {value}, :process {}, :time {at}}}",
                o.process
            ),
        ));
    }
    events.sort_by_key(|e| e.0);
    let mut out = String::new();
    for (i, (_, e)) in events.iter().enumerate() {
        let _ = writeln!(out, "{}, :index {i}}}", &e[..e.len() - 1]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edn_has_an_invoke_and_a_completion_per_op_and_unknowns_end_as_info() {
        let mut w = Op::new(0, "write", 10);
        w.key = 3;
        w.value = Some(7);
        w.ret = Some(20);
        w.outcome = Outcome::Ok;
        let mut a = Op::new(1, "append", 15);
        a.group = 1;
        a.keys = vec![5, 6];
        a.elems = vec![100, 101];
        a.outcome = Outcome::Unknown;
        let text = edn(&[w, a]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(
            lines[0],
            "{:type :invoke, :f :write, :value [3 7], :process 0, :time 10, :index 0}"
        );
        assert!(lines[1].starts_with("{:type :invoke, :f :txn, :value [[:r 5 nil] [:r 6 nil] [:append 5 100] [:append 6 101]]"), "{}", lines[1]);
        assert!(
            lines[2].starts_with("{:type :ok, :f :write"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with("{:type :info, :f :txn"),
            "{}",
            lines[3]
        );
        assert!(lines[3].contains(":time 21"), "{}", lines[3]);
    }
}
