//! `quarry chaos`: Jepsen's method on a local cluster. Clients run a
//! workload through the Rust client over Flight SQL while a nemesis kills,
//! pauses, partitions and skews the processes; every operation is
//! recorded with its call and return times and outcome (`history.rs`),
//! and the history goes to Porcupine (`tools/porcupine`, a small Go
//! program pinned to `github.com/anishathalye/porcupine` v1.3.1), which
//! searches each key's and each group's operations for a linearization.
//!
//! A run is:
//!
//! 1. a cluster of `--stores` storage processes and one compute process
//!    (or `--addr`, without faults), and the workload's tables;
//! 2. `--clients` clients (`workload.rs`) for `--seconds`, and the
//!    nemesis (`nemesis.rs`) applying faults (one at a time, or up to
//!    `--faults-at-once`) until the last fifth of the run (at least 5 s),
//!    which is quiet; with `--netns` the stores run in network namespaces
//!    and partitions cut the network itself;
//! 3. a final read of every key and group, retried for up to 30 s;
//! 4. the checks: Porcupine's verdict (Ok passes; Illegal and Unknown, a
//!    check that ran out of time, fail); after every heal an operation
//!    succeeded within [`RECOVERY`] (no stuck cluster); every append a
//!    client was told committed is in the final reads; no operation went
//!    unanswered for [`workload::OP_TIMEOUT`].
//!
//! Everything goes under `--out` (default: a new directory under the
//! system's temp dir, printed): `history.json`, `history.edn`, the
//! checker's HTML view of each key or group that failed, `report.json`
//! and the processes' logs.
//!
//! `--stale-reads-ms N` (hidden, for tests) switches compute's
//! `stale_read` failpoint on: queries read N ms in the past, a broken
//! build the checker must catch.

pub mod history;
pub mod nemesis;
pub mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::local::{ClusterArgs, LocalCluster};
use history::{History, Op, Outcome};
pub use nemesis::Nemesis;
pub use workload::Workload;

/// How soon after a fault is healed some operation must succeed.
pub const RECOVERY: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, clap::Args)]
pub struct ChaosOptions {
    /// What the clients do.
    #[arg(long, value_enum, default_value = "register")]
    pub workload: Workload,
    /// Faults, comma-separated (kill, pause, partition, skew, transfer,
    /// split); `all` for every one; none by default.
    #[arg(long, value_delimiter = ',')]
    pub nemesis: Vec<String>,
    /// How long the clients run.
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// Seeds the clients' choices and the nemesis's schedule.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, default_value_t = 6)]
    pub clients: usize,
    #[arg(long, default_value_t = 3)]
    pub stores: usize,
    /// Run each store in a network namespace of its own (needs root), so
    /// that `partition` also cuts links and routes: compute from a store,
    /// a minority of stores from the rest, one way.
    #[arg(long)]
    pub netns: bool,
    /// Up to this many faults of different kinds on at once.
    #[arg(long, default_value_t = 1)]
    pub faults_at_once: usize,
    /// A running compute process (no faults then); without it a local
    /// cluster is started.
    #[arg(long)]
    pub addr: Option<String>,
    /// Where the history, the checker's views, the report and the logs go.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The Porcupine checker's binary (default: $QUARRY_PORCUPINE, else
    /// built with `go build` from tools/porcupine).
    #[arg(long)]
    pub checker: Option<PathBuf>,
    /// TEST ONLY: compute's queries read this many ms in the past.
    #[arg(long, hide = true)]
    pub stale_reads_ms: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ChaosReport {
    pub workload: Workload,
    pub seed: u64,
    pub seconds: f64,
    pub clients: usize,
    pub netns: bool,
    pub faults_at_once: usize,
    /// Operations by "f outcome" (e.g. "cas ok").
    pub ops: BTreeMap<String, u64>,
    pub faults: Vec<history::Fault>,
    /// Porcupine's verdict: Ok, Illegal or Unknown.
    pub verdict: String,
    pub checked: u64,
    pub illegal: Vec<String>,
    pub unknown: Vec<String>,
    pub views: Vec<String>,
    /// Faults after whose heal no operation succeeded within RECOVERY.
    pub not_recovered: Vec<String>,
    /// Acknowledged appends missing from the final reads.
    pub lost: Vec<String>,
    /// Keys or groups the final reads could not read.
    pub unread: Vec<String>,
    pub stuck: u64,
    pub out: String,
    pub passed: bool,
}

fn parse_nemesis(names: &[String]) -> Result<Vec<Nemesis>> {
    use clap::ValueEnum;
    let mut out = Vec::new();
    for n in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if n == "all" {
            out.extend(Nemesis::ALL);
            continue;
        }
        match Nemesis::from_str(n, true) {
            Ok(k) => out.push(k),
            Err(_) => bail!(
                "unknown fault {n:?}: the nemesis knows kill, pause, partition, skew, \
                 transfer, split and all"
            ),
        }
    }
    // Every kind once, whatever the list repeats (`all,kill`): the nemesis
    // never has two faults of one kind on.
    let mut seen = std::collections::HashSet::new();
    out.retain(|k| seen.insert(*k));
    Ok(out)
}

/// The checker's binary: given, from the environment, or built now.
fn checker(opts: &ChaosOptions, out: &Path) -> Result<PathBuf> {
    if let Some(p) = &opts.checker {
        return Ok(p.clone());
    }
    if let Some(p) = std::env::var_os("QUARRY_PORCUPINE") {
        return Ok(p.into());
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/porcupine");
    let bin = out.join("porcupine");
    let status = std::process::Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .status()
        .with_context(|| {
            format!(
                "building the checker in {} needs Go (or pass --checker)",
                src.display()
            )
        })?;
    if !status.success() {
        bail!(
            "go build of the checker in {} failed ({status})",
            src.display()
        );
    }
    Ok(bin)
}

#[derive(serde::Deserialize, Default)]
struct Verdict {
    verdict: String,
    checked: u64,
    illegal: Vec<String>,
    unknown: Vec<String>,
    views: Vec<String>,
}

fn run_checker(bin: &Path, out: &Path) -> Result<Verdict> {
    let o = std::process::Command::new(bin)
        .arg("-history")
        .arg(out.join("history.json"))
        .arg("-html")
        .arg(out)
        .args(["-timeout", "120s"])
        .output()
        .with_context(|| format!("running the checker {}", bin.display()))?;
    let text = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(text.trim()).with_context(|| {
        format!(
            "the checker answered {:?} ({}): {}",
            text.trim(),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// Faults after whose heal no operation succeeded within RECOVERY.
fn not_recovered(ops: &[Op], faults: &[history::Fault]) -> Vec<String> {
    faults
        .iter()
        .filter(|f| {
            let healed = f.end.unwrap_or(u64::MAX);
            let by = healed.saturating_add(RECOVERY.as_nanos() as u64);
            !ops.iter()
                .any(|o| o.outcome == Outcome::Ok && o.ret.is_some_and(|r| r >= healed && r <= by))
        })
        .map(|f| f.name.clone())
        .collect()
}

/// Acknowledged appends whose element is not in its key's final list.
fn lost_appends(ops: &[Op]) -> Vec<String> {
    let mut last: BTreeMap<i64, &Op> = BTreeMap::new();
    for o in ops
        .iter()
        .filter(|o| o.f == "read-group" && o.outcome == Outcome::Ok)
    {
        if last.get(&o.group).is_none_or(|l| l.call < o.call) {
            last.insert(o.group, o);
        }
    }
    let mut lost = Vec::new();
    for o in ops
        .iter()
        .filter(|o| o.f == "append" && o.outcome == Outcome::Ok)
    {
        let Some(fin) = last.get(&o.group) else {
            continue;
        };
        for (k, e) in o.keys.iter().zip(&o.elems) {
            let present = fin.reads.get(&k.to_string()).is_some_and(|l| l.contains(e));
            if !present {
                lost.push(format!("element {e} appended to key {k}"));
            }
        }
    }
    lost
}

fn tally(ops: &[Op]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for o in ops {
        let outcome = match o.outcome {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Unknown => "unknown",
        };
        let f = if o.f == "cas" && o.outcome == Outcome::Ok && !o.applied {
            "cas-miss"
        } else {
            o.f
        };
        *m.entry(format!("{f} {outcome}")).or_insert(0) += 1;
    }
    m
}

pub async fn run(opts: &ChaosOptions) -> Result<ChaosReport> {
    let kinds = parse_nemesis(&opts.nemesis)?;
    if opts.addr.is_some() && (!kinds.is_empty() || opts.stale_reads_ms.is_some() || opts.netns) {
        bail!("faults need the local cluster this command starts (leave out --addr)");
    }
    if opts.clients == 0 || opts.seconds <= 0.0 {
        bail!("--clients and --seconds must be positive");
    }
    let out = match &opts.out {
        Some(d) => d.clone(),
        None => tempfile::Builder::new()
            .prefix(&format!("quarry-chaos-{}-", opts.seed))
            .tempdir()?
            .keep(),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let checker_bin = checker(opts, &out)?;

    let mut cluster = match &opts.addr {
        Some(_) => None,
        None => Some(
            LocalCluster::start(
                &out.join("cluster"),
                opts.stores,
                &ClusterArgs {
                    netns: opts.netns,
                    ..ClusterArgs::default()
                },
            )
            .await
            .context("starting the cluster")?,
        ),
    };
    let result = run_on(opts, &kinds, &out, &checker_bin, cluster.as_mut()).await;
    if let Some(c) = cluster.as_mut() {
        c.stop().await;
    }
    result
}

async fn run_on(
    opts: &ChaosOptions,
    kinds: &[Nemesis],
    out: &Path,
    checker_bin: &Path,
    cluster: Option<&mut LocalCluster>,
) -> Result<ChaosReport> {
    let url = match (&opts.addr, cluster.as_deref()) {
        (Some(a), _) => a.clone(),
        (None, Some(c)) => c.compute_url(),
        (None, None) => bail!("no cluster"),
    };
    workload::create_tables(&url)
        .await
        .context("creating the workload's tables")?;
    if let (Some(ms), Some(c)) = (opts.stale_reads_ms, cluster.as_deref()) {
        let status = c.compute.as_ref().and_then(|p| p.status.clone());
        let status = status.context("compute has no status port")?;
        nemesis::failpoint(&status, None, "stale_read", Some(&format!("return({ms})"))).await?;
    }

    let history = Arc::new(History::new());
    let shared = workload::Shared::new(url.clone(), history.clone());
    let run_for = Duration::from_secs_f64(opts.seconds);
    let start = Instant::now();
    let quiet_from = start + run_for - (run_for / 5).max(Duration::from_secs(5)).min(run_for);
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..opts.clients {
        let seed = opts.seed.wrapping_mul(1_000_003) ^ ((i as u64 + 1) * 0x1234_5678_9abc);
        clients.spawn(workload::client(
            opts.workload.of_client(i),
            seed,
            shared.clone(),
        ));
    }
    let faults = match cluster {
        Some(c) => {
            nemesis::run(
                c,
                kinds,
                opts.faults_at_once,
                opts.seed,
                &history,
                quiet_from,
                opts.stale_reads_ms,
            )
            .await
        }
        None => Ok(()),
    };
    tokio::time::sleep(run_for.saturating_sub(start.elapsed())).await;
    shared.stop.store(true, Ordering::SeqCst);
    // Every client ends within one operation's bound.
    while clients.join_next().await.is_some() {}
    faults.context("the nemesis failed")?;
    let unread = workload::final_reads(&shared, opts.workload, Duration::from_secs(30)).await;

    history.write(out, opts.workload.name(), workload::GROUP_SIZE, opts.seed)?;
    let ops = history.ops();
    let faults = history.faults();
    let v = run_checker(checker_bin, out)?;
    let not_recovered = not_recovered(&ops, &faults);
    let lost = lost_appends(&ops);
    let stuck = shared.stuck.load(Ordering::Relaxed);
    let passed = v.verdict == "Ok"
        && not_recovered.is_empty()
        && lost.is_empty()
        && unread.is_empty()
        && stuck == 0;
    let report = ChaosReport {
        workload: opts.workload,
        seed: opts.seed,
        seconds: opts.seconds,
        clients: opts.clients,
        netns: opts.netns,
        faults_at_once: opts.faults_at_once.max(1),
        ops: tally(&ops),
        faults,
        verdict: v.verdict,
        checked: v.checked,
        illegal: v.illegal,
        unknown: v.unknown,
        views: v.views,
        not_recovered,
        lost,
        unread,
        stuck,
        out: out.display().to_string(),
        passed,
    };
    std::fs::write(out.join("report.json"), serde_json::to_vec_pretty(&report)?)?;
    Ok(report)
}

/// The report as text.
pub fn format(r: &ChaosReport) -> String {
    let mut s = format!(
        "chaos: workload {}, seed {}, {} clients, {:.0} s{}{}\n",
        r.workload.name(),
        r.seed,
        r.clients,
        r.seconds,
        if r.netns {
            ", stores in network namespaces"
        } else {
            ""
        },
        match r.faults_at_once {
            0 | 1 => String::new(),
            n => format!(", up to {n} faults at once"),
        }
    );
    s.push_str("operations:");
    for (k, n) in &r.ops {
        s.push_str(&format!(" {k} {n};"));
    }
    s.push('\n');
    s.push_str(&format!("faults ({}):\n", r.faults.len()));
    for f in &r.faults {
        let secs = |t: u64| t as f64 / 1e9;
        s.push_str(&format!(
            "  {:7.1} s  {}{}\n",
            secs(f.start),
            f.name,
            f.end.map_or(" (not healed)".into(), |e| format!(
                ", healed at {:.1} s",
                secs(e)
            ))
        ));
    }
    s.push_str(&format!(
        "porcupine: {} ({} operations checked)\n",
        r.verdict, r.checked
    ));
    for (what, list) in [
        ("not linearizable", &r.illegal),
        ("check ran out of time", &r.unknown),
        ("views", &r.views),
        ("no success within 20 s of healing", &r.not_recovered),
        ("acknowledged but missing from the final reads", &r.lost),
        ("could not be read at the end", &r.unread),
    ] {
        if !list.is_empty() {
            s.push_str(&format!("{what}: {}\n", list.join(", ")));
        }
    }
    if r.stuck > 0 {
        s.push_str(&format!(
            "operations with no answer within 30 s: {}\n",
            r.stuck
        ));
    }
    s.push_str(&format!("history and logs: {}\n", r.out));
    s.push_str(if r.passed { "PASSED\n" } else { "FAILED\n" });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_fault_is_listed_once() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let kinds = parse_nemesis(&names(&["kill", "all", "pause", "kill"])).unwrap();
        assert_eq!(kinds.len(), Nemesis::ALL.len(), "{kinds:?}");
        assert_eq!(kinds[0], Nemesis::Kill);
        let e = parse_nemesis(&names(&["nap"])).unwrap_err();
        assert!(e.to_string().contains("unknown fault \"nap\""), "{e}");
    }
}
