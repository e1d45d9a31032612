//! Named fault-injection points (the [`fail`] crate, as TiKV uses it).
//!
//! A failpoint is a place in the code where a test can make the process
//! misbehave on purpose: return an error it would get from a failing disk,
//! panic as a crash would, sleep, or pause. Points are inert unless the
//! `failpoints` cargo feature is on; without it [`hit`] is a constant
//! `None` and the optimizer removes every point. With it, each point costs
//! one read-locked map lookup when reached, and every point sits on a path
//! run once per request or per store-loop round, never per row.
//!
//! Switching points on: a process built with the feature serves
//! `PUT /fail/NAME` (body: the actions, in `fail`'s syntax, e.g. `return`,
//! `2*return`, `panic`, `sleep(500)`, `50%return`), `DELETE /fail/NAME`
//! and `GET /fail` on its status port, and reads `FAILPOINTS=NAME=ACTIONS;…`
//! from its environment at start. In-process tests call [`fail::cfg`].
//!
//! A `return` action may carry an argument; every point here but
//! `clock_skew` and `stale_read` (which read a number of ms) reads it as a
//! comma-separated list of store ids the point is limited to
//! (`return(2)`: only store 2), so in-process tests with several stores can
//! hit one of them. Without an argument the point fires everywhere.
//!
//! THE POINTS (each fault has a test of what a user sees,
//! `docs/failure-tests.md`; the `_off` and `_always` points are switches
//! for timing two plans or rules side by side, not faults, and have none)
//!
//! | name | where | a `return` does |
//! |---|---|---|
//! | `raft_before_persist` | store loop, before the round's raft log write | the write fails: the store stops |
//! | `raft_after_persist` | store loop, after it, before messages go | the round fails: the store stops |
//! | `apply_before` | before a batch of committed entries is applied | apply fails: the store stops |
//! | `apply_read_error` | an INSERT's duplicate check during apply | a disk read error: the store stops |
//! | `snapshot_generate` | the leader building a snapshot to send | snapshot temporarily unavailable: raft retries |
//! | `snapshot_apply` | a follower installing a received snapshot | the install fails: the store stops |
//! | `split_propose` | a store asked to split a region | the split is refused: the region stays whole |
//! | `coprocessor_deadline` | a coprocessor task's stop check | the task's deadline has passed |
//! | `coprocessor_slow_batch` | the same check, once per batch | nothing (use `sleep(ms)`: a slow scan) |
//! | `read_pool_full` | admission of a coprocessor request | the store answers ServerIsBusy |
//! | `region_seek_error` | a coprocessor scan's first seek | RocksDB fails the seek |
//! | `meta_write` | a write to the meta region (catalog, ids, users) | the meta write fails |
//! | `raft_isolate` | raft messages this store sends and receives | all are dropped: the store is cut off |
//! | `split_report` | a store telling meta the regions of a split it made | the report fails (retried in the background) |
//! | `meta_create_lost` | a CREATE TABLE's commit on the meta leader, after its peers were made | the commit is lost (StaleCommand): its regions stay pending until the meta leader reclaims them |
//! | `meta_create_unanswered` | the same, after the commit applied | its answer is lost (StaleCommand): the retry finds its table |
//! | `restore_before_name` | a restore WITH REPLACE, between renaming the old table aside and naming the new one | nothing (use `sleep(ms)` and kill the restore there) |
//! | `clock_skew` | a store's wall clock ([`wall_clock_ms`]: the oracle, GC) | `return(MS)`: the clock is MS ms ahead (or behind, negative) |
//! | `cop_parts_always` | a store starting a coprocessor read | a big aggregation is cut into a part per read thread even while other reads keep those threads busy (the rule before `node/coprocessor.rs`'s `fit_parts`, to time both side by side) |
//! | `broadcast_bytes_off` | compute's broadcast rule for distributed plans (`df/mpp/broadcast.rs`), at each plan | only the row bound decides, not a narrow build side's bytes (to time both side by side) |
//! | `probe_sized_broadcasts_off` | compute's task counts for distributed plans (`df/mpp/tasks.rs`), at each plan | a join whose build side is broadcast runs in as many tasks as the planner gives its stage, not as many as its probe side's scans (to time both side by side) |
//! | `colocated_joins_off` | compute's co-located join rule for distributed plans (`df/mpp/colocate.rs`), at each plan | joins of scans clustered on their key are shuffled or broadcast between compute processes instead of run in the scans' own tasks (to time both side by side) |
//! | `spread_physical_kept_off` | compute's plan cache, at each run of a spread statement (`df/running.rs`) | the run plans its kept logical plan physically instead of copying its kept physical plan (to time both side by side) |
//! | `measured_shares_off` | compute's estimate of a scan's filter (`df/region_scan.rs`, the shares of `df/measured_share.rs`), at each plan | conditions the column statistics cannot estimate keep the default fifth instead of their share measured on a sample (to time both side by side) |
//! | `join_order_off` | compute's join-order rule (`df/join_order.rs`), at each plan | the rule keeps the query's order (to time both orders side by side) |
//! | `shared_subplan_off` | compute's rule sharing repeated joins and aggregations (`df/shared_subplan/`), at each plan | each use keeps its own copy (to time both side by side) |
//! | `memory_release_off` | compute, as a query's memory pool goes (`df/memory_release.rs`) | a query that reserved 64 MiB or more does not ask the process to hand its free memory back (to measure both side by side) |
//! | `stale_read` | compute's timestamp for a query's reads | `return(MS)`: queries read MS ms in the past (a broken build for `quarry chaos` to catch) |

/// Whether any point can fire in this build.
pub const ENABLED: bool = cfg!(feature = "failpoints");

/// Evaluates the point `name`: runs its sleep, pause or panic action, and
/// answers `Some(argument)` when its action is `return` (with or without an
/// argument), `None` when the point is off or its action was not `return`.
#[inline(always)]
pub fn hit(name: &str) -> Option<Option<String>> {
    #[cfg(feature = "failpoints")]
    {
        fail::eval(name, |arg| arg)
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        None
    }
}

/// Whether the point `name` returns on store `store_id`: its action is
/// `return`, and its argument, if any, lists this store.
#[inline(always)]
pub fn fires_on(name: &str, store_id: u64) -> bool {
    match hit(name) {
        None => false,
        Some(None) => true,
        Some(Some(stores)) => stores
            .split(',')
            .any(|s| s.trim().parse::<u64>() == Ok(store_id)),
    }
}

/// Whether the point `name` returns (on any store).
#[inline(always)]
pub fn fires(name: &str) -> bool {
    hit(name).is_some()
}

/// A point whose `return(N)` carries a number rather than store ids (N
/// when it returns with one that parses, else None).
#[inline(always)]
pub fn number(name: &str) -> Option<i64> {
    hit(name).flatten().and_then(|a| a.trim().parse().ok())
}

/// The wall clock in ms since the Unix epoch, moved by `clock_skew`'s
/// `return(MS)` (a test's skewed clock: MS may be negative).
pub fn wall_clock_ms() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    match number("clock_skew") {
        Some(skew) => now.saturating_add_signed(skew),
        None => now,
    }
}

/// The error text of an injected fault: names the point, so a user or a
/// test can tell an injected failure from a real one.
pub fn injected(name: &str) -> String {
    format!("injected fault at failpoint {name}")
}

/// Switches `name` to `actions` (`fail`'s syntax); an error names what did
/// not parse. Without the feature: an error saying so.
pub fn configure(name: &str, actions: &str) -> Result<(), String> {
    #[cfg(feature = "failpoints")]
    {
        fail::cfg(name, actions)
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = (name, actions);
        Err("this build has no failpoints (build with --features failpoints)".into())
    }
}

/// Switches `name` off.
pub fn remove(name: &str) {
    #[cfg(feature = "failpoints")]
    fail::remove(name);
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// Every point that is on, with its actions.
pub fn list() -> Vec<(String, String)> {
    #[cfg(feature = "failpoints")]
    {
        fail::list()
    }
    #[cfg(not(feature = "failpoints"))]
    {
        Vec::new()
    }
}

/// Applies `FAILPOINTS=NAME=ACTIONS;…` (as `fail::FailScenario` reads it);
/// an error names the entry that did not parse.
pub fn configure_from_env() -> Result<(), String> {
    let Ok(spec) = std::env::var("FAILPOINTS") else {
        return Ok(());
    };
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, actions) = entry
            .split_once('=')
            .ok_or_else(|| format!("FAILPOINTS entry {entry:?} is not NAME=ACTIONS"))?;
        configure(name.trim(), actions.trim())
            .map_err(|e| format!("FAILPOINTS entry {entry:?}: {e}"))?;
    }
    Ok(())
}
