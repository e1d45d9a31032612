//! Semi-join reduction: a hash join's build keys, as a Bloom filter, keep
//! the probe side's non-matching rows in their regions.
//!
//! DataFusion hands a hash join's probe side a dynamic filter once the
//! build side is in: the keys' bounds, and the keys themselves as an IN
//! list while they are few (`join-key-list-max`, 16,384 per join
//! partition by default, see `mod.rs`). Past
//! that its filter is a lookup into the join's own hash table, which
//! cannot travel, so a join of 6 million lineitem rows against 230
//! thousand order keys (TPC-H Q5) used to ship every lineitem row to
//! compute, where the join dropped 85% of them. TiDB and Spark answer this
//! with a runtime Bloom filter; so does Quarry:
//!
//! ```text
//!  HashJoinExec(on o_orderkey = l_orderkey)
//!    BuildKeysExec(key o_orderkey)  ── keys ──┐   (shared [`BuildKeys`])
//!      … build side …                         │
//!    RepartitionExec                          ▼
//!      RegionScanExec(lineitem)  waits, then adds `l_orderkey IN bloom(…)`
//!                                to every region's selection
//! ```
//!
//! [`BloomJoinFilters`], a physical optimizer rule that runs after
//! DataFusion's own, finds each hash join whose probe side reaches a
//! region scan through nodes that pass rows unchanged (repartitioning,
//! coalescing, projections of columns, filters) or that group by the key
//! (a condition on a group key keeps or drops whole groups, so it may run
//! before the grouping: TPC-H Q20's year of lineitem grouped by part and
//! supplier is cut, in the regions and before their partial aggregation,
//! to the parts its semi join can keep), or that join it to another input
//! (an inner join's either side, an outer join's preserved side, the side
//! a semi or anti join keeps: TPC-H Q5's Asian suppliers cut lineitem
//! below its join with orders), and whose join type drops
//! probe rows without a match (inner, left, left semi, left anti unless
//! null-aware, right semi; NULL keys never equal). It wraps the build side in a [`BuildKeysExec`], which
//! copies each batch's BIGINT keys into a [`BuildKeys`] as they pass, and
//! gives the region scan the same `BuildKeys`. The scan, like for
//! DataFusion's filters, asks its regions only once every build partition
//! has ended (or a bounded wait has passed: a filter is only ever an
//! optimization), and then, if the keys are worth a filter
//! ([`BuildKeys::filter`]: not when they are more than 40% of the
//! probe column's distinct values), adds a split-block Bloom filter of them
//! (`quarry_coprocessor::expr::Bloom`) to its DAG's selection. Storage
//! tests each pack's key column against it before decoding the other
//! columns, so the rows that cannot join cost one hash and are never
//! decoded, encoded or sent. About 1% of non-matching rows pass (twelve
//! bits per key); the join drops those.
//!
//! A join on several BIGINT columns sends one filter per column (Q5's
//! supplier join on supplier and nation keys).
//!
//! Where every key of a join reaches a region scan this way, the join's
//! own dynamic filter is taken out of those scans
//! (`without_own_dynamic_filter`) and DataFusion builds none: the keys
//! give the same IN list, or their bounds (which go with a Bloom filter,
//! and alone where no filter pays), and DataFusion's list, a
//! `ScalarValue` per key (a struct of them per row for a join on two
//! columns, which storage cannot test), cost more than the rest of the
//! query in TPC-H Q5 and Q20.
//!
//! Left out: keys other than BIGINT (TPC-H's are all BIGINT); deciding
//! at plan time that a filter will not pay (the scan still waits for the
//! build side before it learns that its keys are too many).

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinType, NullEquality, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
#[allow(deprecated)]
use datafusion::physical_plan::coalesce_batches::CoalesceBatchesExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;
use parking_lot::Mutex;
use quarry_coprocessor::expr::{mix64, Bloom, Expr, ScalarValue};
use tokio::sync::watch;

use super::region_scan::RegionScanExec;

/// Bits of Bloom filter per build key: about 1% of other keys pass.
pub const BLOOM_BITS_PER_KEY: usize = 12;

/// Past this many build keys no filter is sent: at twelve bits a key the
/// filter costs every region 6 MB of request (counted as the keys
/// arrive, repeats included). Whether a big build side leaves much of the
/// probe side out is [`BLOOM_MAX_SHARE`]'s question (TPC-H Q18 joins all
/// 1.5 million orders per SF, and gets none); this limit bounds the
/// request and the keys kept. It was a quarter of this: at SF 10, Q3's
/// 1.45 million qualifying orders then sent no filter, and 32 million
/// lineitem rows travelled to compute for a join that kept a tenth of
/// them.
pub const MAX_BLOOM_KEYS: usize = 1 << 22;

/// Keys filling this share of the span between the smallest and the
/// largest are sent as bounds only (a Bloom filter would keep everything).
const DENSE_KEYS: f64 = 0.9;

/// A Bloom filter is sent only when the build keys are at most this share
/// of the probe column's distinct values (its statistics): one that would
/// keep most rows costs each region a hash and a cache miss per row to
/// drop few (TPC-H Q21's 730 thousand `F` orders against lineitem's 1.5
/// million order keys, a share of 0.49, took 60 ms more than no filter),
/// while Q3's 30 thousand customers against orders' 100 thousand (0.30)
/// still pay for themselves.
pub const BLOOM_MAX_SHARE: f64 = 0.4;

/// A hash join's build keys, filled by its [`BuildKeysExec`] and read by
/// the probe side's region scan once every build partition has ended.
pub struct BuildKeys {
    /// The build key, for EXPLAIN.
    key: String,
    keys: Mutex<Collected>,
    done: watch::Sender<bool>,
}

#[derive(Default)]
struct Collected {
    values: Vec<i64>,
    /// The smallest and the largest key, also past [`MAX_BLOOM_KEYS`].
    bounds: Option<(i64, i64)>,
    /// More than [`MAX_BLOOM_KEYS`]: their bounds only.
    too_many: bool,
    /// A key that is not BIGINT, or did not evaluate: no filter.
    given_up: bool,
    partitions: usize,
    ended: usize,
}

impl fmt::Debug for BuildKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BuildKeys({})", self.key)
    }
}

/// What a scan adds for one join: the condition, and how EXPLAIN ANALYZE
/// shows it (also when there is none, and why).
pub struct KeyFilter {
    pub condition: Option<Expr>,
    pub shown: String,
}

impl BuildKeys {
    pub(crate) fn new(key: String, partitions: usize) -> Arc<BuildKeys> {
        Arc::new(BuildKeys {
            key,
            keys: Mutex::new(Collected {
                partitions,
                ..Default::default()
            }),
            done: watch::channel(false).0,
        })
    }

    /// Keys of the same join not collected yet, for a fresh run of its
    /// plan (`fresh_run.rs`).
    pub(crate) fn fresh(&self) -> Arc<BuildKeys> {
        BuildKeys::new(self.key.clone(), self.keys.lock().partitions)
    }

    pub(crate) fn add(&self, keys: &dyn Array) {
        let mut c = self.keys.lock();
        // Complete already: more keys can only be repeats (another
        // task's copy of a broadcast build side, `mpp/cross_stage.rs`).
        if c.given_up || c.ended >= c.partitions {
            return;
        }
        let Some(keys) = keys.as_primitive_opt::<Int64Type>() else {
            c.given_up = true;
            return;
        };
        if let (Some(lo), Some(hi)) = (arrow::compute::min(keys), arrow::compute::max(keys)) {
            c.bounds = Some(match c.bounds {
                Some((l, h)) => (l.min(lo), h.max(hi)),
                None => (lo, hi),
            });
        }
        if c.too_many {
            return;
        }
        if c.values.len() + keys.len() - keys.null_count() > MAX_BLOOM_KEYS {
            c.too_many = true;
            c.values = Vec::new();
            return;
        }
        c.values.extend(keys.iter().flatten());
    }

    /// No filter from these keys (a key that did not evaluate).
    fn give_up(&self) {
        self.keys.lock().given_up = true;
    }

    pub(crate) fn partition_ended(&self) {
        let mut c = self.keys.lock();
        c.ended += 1;
        if c.ended >= c.partitions {
            self.done.send_replace(true);
        }
    }

    /// Waits until every build partition has ended; false if `until` came
    /// first.
    pub async fn wait(&self, until: Instant) -> bool {
        let mut rx = self.done.subscribe();
        let until = tokio::time::Instant::from_std(until);
        let ready = tokio::time::timeout_at(until, rx.wait_for(|d| *d))
            .await
            .is_ok_and(|r| r.is_ok());
        ready
    }

    /// The filter for `probe` (the probe key over the scan's columns), if
    /// the keys are worth one: none when DataFusion's filter already
    /// `listed` them, when there are more than [`MAX_BLOOM_KEYS`], or when
    /// they are so dense that their bounds say as much; an exact IN list
    /// up to `list_max` keys; a Bloom filter past that, unless the probe
    /// column has fewer than `1 / BLOOM_MAX_SHARE` times as many distinct
    /// values (`probe_distinct`, from its statistics).
    pub fn filter(
        &self,
        probe: &Expr,
        listed: bool,
        list_max: usize,
        probe_distinct: Option<u64>,
    ) -> KeyFilter {
        let c = self.keys.lock();
        let none = |why: String| KeyFilter {
            condition: None,
            shown: format!("no bloom({}): {why}", self.key),
        };
        let range = |lo: i64, hi: i64| {
            let bound = |v| Expr::literal(ScalarValue::Int64(v));
            Expr::between(probe.clone(), bound(lo), bound(hi), false)
        };
        // Where no list or Bloom filter pays, the keys' bounds still let
        // the regions skip packs by their zone maps (what DataFusion's
        // own filter of the join sent, before `without_own_dynamic_filter`).
        let bounds_only = |why: String| match c.bounds.map(|(lo, hi)| (lo, hi, range(lo, hi))) {
            Some((lo, hi, Ok(e))) => KeyFilter {
                condition: Some(e),
                shown: format!("range({}: {lo}..={hi}; no bloom: {why})", self.key),
            },
            _ => none(why),
        };
        if c.given_up {
            return none("a key that is not BIGINT".into());
        }
        if listed {
            return none("the join's IN list has them".into());
        }
        if c.too_many {
            return bounds_only(format!("over {MAX_BLOOM_KEYS} keys"));
        }
        // A build side's key column can repeat its values (TPC-H Q5's 20
        // thousand Asian suppliers at SF 10 carry five nation keys; Q9's
        // 319 thousand green-part lineitem rows, 10.7 thousand part keys).
        // Counted with their repeats the keys look too many for a list, or
        // for a Bloom filter that leaves enough out. Past the list limit
        // their distinct count is estimated, and where it is under half
        // of them, or few enough for a list, the repeats are dropped.
        let distinct_keys;
        let estimate = match c.values.len() > list_max {
            true => distinct_estimate(&c.values),
            false => c.values.len(),
        };
        let repeats = estimate * 2 < c.values.len() || estimate <= list_max;
        let keys: &[i64] = if estimate < c.values.len() && repeats {
            let mut set: std::collections::HashSet<i64, foldhash::fast::RandomState> =
                std::collections::HashSet::with_capacity_and_hasher(estimate, Default::default());
            set.extend(c.values.iter().copied());
            distinct_keys = set.into_iter().collect::<Vec<i64>>();
            &distinct_keys
        } else {
            &c.values
        };
        let (Some(lo), Some(hi)) = (keys.iter().min(), keys.iter().max()) else {
            // No build row: no probe row can join.
            return KeyFilter {
                condition: Some(Expr::literal(ScalarValue::Boolean(false))),
                shown: format!("no keys({})", self.key),
            };
        };
        let (lo, hi) = (*lo, *hi);
        if is_dense(keys) {
            return match range(lo, hi) {
                Ok(e) => KeyFilter {
                    condition: Some(e),
                    shown: format!("range({}: {lo}..={hi}, dense)", self.key),
                },
                Err(e) => none(e.to_string()),
            };
        }
        if keys.len() <= list_max {
            let mut list = keys.to_vec();
            list.sort_unstable();
            list.dedup();
            let shown = format!("keys({}: {} keys)", self.key, list.len());
            return match Expr::in_int_list(probe.clone(), &list, false) {
                Ok(e) => KeyFilter {
                    condition: Some(e),
                    shown,
                },
                Err(e) => none(e.to_string()),
            };
        }
        if let Some(distinct) = probe_distinct {
            if keys.len() as f64 > distinct as f64 * BLOOM_MAX_SHARE {
                return bounds_only(format!(
                    "{} keys of about {distinct} values would keep most rows",
                    keys.len()
                ));
            }
        }
        let bloom = Bloom::build(keys, BLOOM_BITS_PER_KEY);
        let shown = format!(
            "bloom({}: {} keys, {} kB)",
            self.key,
            keys.len(),
            bloom.size_bytes() / 1024
        );
        // With the keys' bounds, which the regions' zone maps use.
        match Expr::in_bloom(probe.clone(), bloom).and_then(|b| Expr::and(range(lo, hi)?, b)) {
            Ok(e) => KeyFilter {
                condition: Some(e),
                shown,
            },
            Err(e) => none(e.to_string()),
        }
    }
}

/// About how many distinct values `keys` holds: linear counting (Whang,
/// Vander-Zanden and Taylor, 1990) on a bitmap of 2^22 bits, within a
/// few percent up to a few million values and a few milliseconds for four
/// million keys (a hash and one bit per key), where sorting them
/// would take a hundred.
fn distinct_estimate(keys: &[i64]) -> usize {
    const LOG_BITS: u32 = 22;
    const BITS: usize = 1 << LOG_BITS;
    let mut map = vec![0u64; BITS / 64];
    for &k in keys {
        // Keys in steps (order keys) must land as if at random, which a
        // bare multiply does not give; the Bloom filter's mixer does.
        let h = (mix64(k as u64) >> (64 - LOG_BITS)) as usize;
        map[h / 64] |= 1 << (h % 64);
    }
    let set: usize = map.iter().map(|w| w.count_ones() as usize).sum();
    if set == BITS {
        return keys.len();
    }
    let empty = (BITS - set) as f64 / BITS as f64;
    ((-(BITS as f64) * empty.ln()).round() as usize).min(keys.len())
}

/// True when the distinct `keys` fill at least [`DENSE_KEYS`] of their
/// span (counted on a bitmap of the span, which is then small).
fn is_dense(keys: &[i64]) -> bool {
    let (Some(lo), Some(hi)) = (keys.iter().min(), keys.iter().max()) else {
        return true;
    };
    let span = (*hi as i128 - *lo as i128 + 1) as f64;
    if (keys.len() as f64) < DENSE_KEYS * span {
        return false;
    }
    let mut seen = vec![0u64; (span as usize).div_ceil(64)];
    let mut distinct = 0usize;
    for k in keys {
        let i = (*k - *lo) as usize;
        let (w, b) = (i / 64, 1u64 << (i % 64));
        if seen[w] & b == 0 {
            seen[w] |= b;
            distinct += 1;
        }
    }
    distinct as f64 >= DENSE_KEYS * span
}

/// A hash join's build side, passed through unchanged while its join keys
/// are copied into a [`BuildKeys`].
#[derive(Debug)]
pub struct BuildKeysExec {
    input: Arc<dyn ExecutionPlan>,
    key: Arc<dyn PhysicalExpr>,
    sink: Arc<BuildKeys>,
}

impl BuildKeysExec {
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>, key: Arc<dyn PhysicalExpr>) -> Self {
        let partitions = input.properties().partitioning.partition_count();
        let sink = BuildKeys::new(key.to_string(), partitions);
        BuildKeysExec { input, key, sink }
    }

    /// Where it copies its keys to.
    pub(crate) fn sink(&self) -> &Arc<BuildKeys> {
        &self.sink
    }

    /// The same tap, copying into `sink` (a fresh run's: `fresh_run.rs`).
    pub(crate) fn with_sink(&self, sink: Arc<BuildKeys>) -> Self {
        BuildKeysExec {
            input: self.input.clone(),
            key: self.key.clone(),
            sink,
        }
    }
}

impl DisplayAs for BuildKeysExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "BuildKeysExec: key={}", self.key)
    }
}

impl ExecutionPlan for BuildKeysExec {
    fn name(&self) -> &str {
        "BuildKeysExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        f(&self.key)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // The same sink: the probe side's scan already holds it (and
        // `fresh_run.rs` finds the kept one here to give a copy its own).
        Ok(Arc::new(BuildKeysExec {
            input: children.swap_remove(0),
            key: self.key.clone(),
            sink: self.sink.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        Ok(tap_keys(input, self.key.clone(), self.sink.clone()))
    }
}

/// `input` unchanged, each batch's `key` copied into `sink` as it passes
/// and the partition's end told to it (a key that does not evaluate: no
/// filter). The tap of [`BuildKeysExec`] and of MPP's
/// `CrossStageKeysExec`.
pub(crate) fn tap_keys(
    input: SendableRecordBatchStream,
    key: Arc<dyn PhysicalExpr>,
    sink: Arc<BuildKeys>,
) -> SendableRecordBatchStream {
    let schema = input.schema();
    let end = sink.clone();
    let mut ended = false;
    let batches = input
        .map(move |b| {
            if let Ok(batch) = &b {
                match key
                    .evaluate(batch)
                    .and_then(|v| v.into_array(batch.num_rows()))
                {
                    Ok(keys) => sink.add(keys.as_ref()),
                    Err(_) => sink.give_up(),
                }
            }
            b
        })
        .chain(futures::stream::poll_fn(move |_| {
            if !ended {
                ended = true;
                end.partition_ended();
            }
            std::task::Poll::Ready(None)
        }));
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}

/// The physical optimizer rule: see the module docs.
#[derive(Debug)]
pub struct BloomJoinFilters;

impl PhysicalOptimizerRule for BloomJoinFilters {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // A distributed plan's join and probe scan may run in different
        // processes (`mpp/`).
        // (Each worker adds them to the stage it runs: `mpp/mod.rs`.)
        if crate::df::mpp::is_distributed(config) {
            return Ok(plan);
        }
        add_build_keys(plan)
    }

    fn name(&self) -> &str {
        "quarry_bloom_join_filters"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan` with every hash join that can use them sending its build keys
/// to its probe side's region scan.
pub fn add_build_keys(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        Ok(match with_build_keys(&node)? {
            Some(n) => Transformed::yes(n),
            None => Transformed::no(node),
        })
    })
    .map(|t| t.data)
}

/// Whether `join`'s build keys may narrow its probe side: its type drops
/// probe rows without a match (inner, left, left semi, left anti unless
/// null-aware, right semi) and NULL keys never equal. A null-aware anti
/// join (NOT IN) answers nothing once its probe side holds a NULL key,
/// which a key filter would drop. (Also MPP's keys across stages,
/// `mpp/cross_stage.rs`.)
pub(crate) fn narrows_probe_side(join: &HashJoinExec) -> bool {
    let drops_unmatched_probe_rows = matches!(
        join.join_type(),
        JoinType::Inner
            | JoinType::Left
            | JoinType::LeftSemi
            | JoinType::LeftAnti
            | JoinType::RightSemi
    );
    drops_unmatched_probe_rows
        && join.null_equality() == NullEquality::NullEqualsNothing
        && !join.null_aware
}

/// `node` with its build keys reaching its probe side's region scan, when
/// `node` is a hash join that can use them.
fn with_build_keys(node: &Arc<dyn ExecutionPlan>) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    let Some(join) = node.downcast_ref::<HashJoinExec>() else {
        return Ok(None);
    };
    if !narrows_probe_side(join) {
        return Ok(None);
    }
    if join
        .left()
        .as_ref()
        .downcast_ref::<BuildKeysExec>()
        .is_some()
    {
        return Ok(None);
    }
    let left_schema = join.left().schema();
    let (mut left, mut right) = (join.left().clone(), join.right().clone());
    let mut sinks = Vec::new();
    let mut every_key = true;
    // Each BIGINT key its own filter: Q5's supplier join sends its
    // suppliers to lineitem and their nations to customer.
    for (build, probe) in join.on() {
        if build.data_type(&left_schema)? != DataType::Int64 {
            every_key = false;
            continue;
        }
        let keys = BuildKeysExec::new(left.clone(), build.clone());
        match with_probe_filter(&right, probe, &keys.sink) {
            Some(r) => {
                sinks.push(keys.sink.clone());
                (left, right) = (Arc::new(keys), r);
            }
            None => every_key = false,
        }
    }
    if sinks.is_empty() {
        return Ok(None);
    }
    if every_key {
        right = without_own_dynamic_filter(node, right, &sinks)?;
    }
    replace_children_if_necessary(node.clone(), vec![left, right]).map(Some)
}

/// `probe` (the probe side of `join`, each of whose keys reaches a region
/// scan as one of `sinks`) without `join`'s own dynamic filter in those
/// scans. The keys say all that filter would: an IN list of the same keys
/// while they are few, else their bounds ([`BuildKeys::filter`]). Kept,
/// it has DataFusion build an IN list of `ScalarValue`s from the build
/// side (a struct of them for a join on two columns, which the regions
/// cannot test) that the scan then drops as redundant: in TPC-H Q20 with
/// three compute processes that was a fifth of their CPU. With no
/// consumer left, the join builds none.
fn without_own_dynamic_filter(
    join: &Arc<dyn ExecutionPlan>,
    probe: Arc<dyn ExecutionPlan>,
    sinks: &[Arc<BuildKeys>],
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let ids: Vec<u64> = join
        .dynamic_expressions_produced()
        .iter()
        .filter_map(|e| e.expression_id())
        .collect();
    if ids.is_empty() {
        return Ok(probe);
    }
    probe
        .transform_up(|node| {
            let Some(scan) = node.downcast_ref::<RegionScanExec>() else {
                return Ok(Transformed::no(node));
            };
            if !sinks.iter().any(|s| scan.has_build_keys(s)) {
                return Ok(Transformed::no(node));
            }
            Ok(match scan.without_dynamic_filters(&ids) {
                Some(s) => Transformed::yes(Arc::new(s) as Arc<dyn ExecutionPlan>),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
}

/// The condition `scan` checks a join's build keys against, for the probe
/// key `key` over its output: None where build keys are off
/// (`join_bloom_filters`) or the key is not a BIGINT of its columns.
/// MPP's stage sizing asks it too (`mpp/tasks.rs`).
pub fn build_key_probe(scan: &RegionScanExec, key: &Arc<dyn PhysicalExpr>) -> Option<Expr> {
    if !scan.context().join_bloom_filters {
        return None;
    }
    scan.probe_key(key)
}

/// `plan` with `sink`'s filter on its region scan, `key` being the probe
/// key over `plan`'s output; None when no plain region scan is reached
/// through nodes that pass rows through unchanged.
fn with_probe_filter(
    plan: &Arc<dyn ExecutionPlan>,
    key: &Arc<dyn PhysicalExpr>,
    sink: &Arc<BuildKeys>,
) -> Option<Arc<dyn ExecutionPlan>> {
    if let Some(scan) = plan.downcast_ref::<RegionScanExec>() {
        let probe = build_key_probe(scan, key)?;
        return Some(Arc::new(scan.with_build_keys(sink.clone(), probe)));
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let column = key.as_ref().downcast_ref::<Column>()?;
        return through_join(join, plan, column.index(), sink);
    }
    let below = key_below(plan, key)?;
    let [child] = plan.children()[..] else {
        return None;
    };
    let child = with_probe_filter(child, &below, sink)?;
    replace_children_if_necessary(plan.clone(), vec![child]).ok()
}

/// Where a condition on `key` (an expression over `plan`'s output) may
/// run instead: the same key as an expression over `plan`'s one child,
/// when `plan` keeps or drops rows without looking at anything the
/// condition could change. That is a node that passes rows through, a
/// projection, a filter, or an aggregation of which `key` is a group key
/// (a condition on a group key keeps or drops whole groups, so it may run
/// before the grouping, and in the regions before their partial
/// aggregation). Never a node with a row limit: which rows pass it would
/// change. Used for join key filters here and for MPP's semi-join
/// reductions (`mpp/broadcast.rs`).
pub fn key_below(
    plan: &Arc<dyn ExecutionPlan>,
    key: &Arc<dyn PhysicalExpr>,
) -> Option<Arc<dyn PhysicalExpr>> {
    if plan.fetch().is_some() {
        return None;
    }
    #[allow(deprecated)]
    let passes_rows = plan.downcast_ref::<BuildKeysExec>().is_some()
        || plan
            .downcast_ref::<crate::df::mpp::cross_stage::CrossStageKeysExec>()
            .is_some()
        || plan.downcast_ref::<RepartitionExec>().is_some()
        || plan.is::<crate::df::mpp::colocate::LocalRepartitionExec>()
        || plan.downcast_ref::<CoalesceBatchesExec>().is_some()
        || plan.downcast_ref::<CoalescePartitionsExec>().is_some()
        || plan.downcast_ref::<CooperativeExec>().is_some();
    if passes_rows {
        return Some(key.clone());
    }
    let column = key.as_ref().downcast_ref::<Column>()?;
    if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        return Some(p.expr().get(column.index())?.expr.clone());
    }
    if let Some(a) = plan.downcast_ref::<AggregateExec>() {
        let groups = a.group_expr();
        if !groups.is_single() || a.limit_options().is_some() {
            return None;
        }
        return Some(groups.expr().get(column.index())?.0.clone());
    }
    if let Some(f) = plan.downcast_ref::<FilterExec>() {
        let index = match f.projection() {
            Some(p) => *p.get(column.index())?,
            None => column.index(),
        };
        let name = f.input().schema().field(index).name().clone();
        return Some(Arc::new(Column::new(&name, index)));
    }
    None
}

/// The input (left: true) and its column that `join`'s output column
/// `index` comes from, when a condition on that column may run on that
/// input before the join: every column of an inner join (its rows are
/// pairs of input rows), the preserved side of an outer join, the side a
/// semi or anti join outputs (None otherwise). Join key filters follow
/// it here, MPP's reductions across shuffles in `mpp/across_shuffles.rs`.
pub fn input_of_join_column(join: &HashJoinExec, index: usize) -> Option<(bool, usize)> {
    let index = match &join.projection {
        Some(p) => *p.get(index)?,
        None => index,
    };
    let left_len = join.left().schema().fields().len();
    match join.join_type() {
        JoinType::Inner if index < left_len => Some((true, index)),
        JoinType::Inner => Some((false, index - left_len)),
        JoinType::Left if index < left_len => Some((true, index)),
        JoinType::Right if index >= left_len => Some((false, index - left_len)),
        JoinType::LeftSemi | JoinType::LeftAnti => Some((true, index)),
        JoinType::RightSemi | JoinType::RightAnti => Some((false, index)),
        _ => None,
    }
}

/// The input of `join` (left: true) that a condition on its output
/// column `index` may run on instead ([`input_of_join_column`]), and that
/// column as an expression over that input.
pub fn key_into_join(join: &HashJoinExec, index: usize) -> Option<(bool, Arc<dyn PhysicalExpr>)> {
    let (on_left, child_index) = input_of_join_column(join, index)?;
    let child = if on_left { join.left() } else { join.right() };
    let name = child.schema().fields().get(child_index)?.name().clone();
    Some((on_left, Arc::new(Column::new(&name, child_index))))
}

/// [`with_probe_filter`] below a join, on the input that output column
/// `index` comes from, when a condition on that column may run before the
/// join: every column of an inner join (its rows are pairs of input rows),
/// the preserved side of an outer join, the side a semi or anti join
/// outputs. Q5's suppliers reach lineitem below its join with orders.
fn through_join(
    join: &HashJoinExec,
    plan: &Arc<dyn ExecutionPlan>,
    index: usize,
    sink: &Arc<BuildKeys>,
) -> Option<Arc<dyn ExecutionPlan>> {
    let (on_left, below) = key_into_join(join, index)?;
    let child = if on_left { join.left() } else { join.right() };
    let filtered = with_probe_filter(child, &below, sink)?;
    let children = if on_left {
        vec![filtered, join.right().clone()]
    } else {
        vec![join.left().clone(), filtered]
    };
    replace_children_if_necessary(plan.clone(), children).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_coprocessor::expr::LogicOp;

    #[test]
    fn distinct_keys_are_estimated_within_a_few_percent() {
        assert_eq!(distinct_estimate(&[]), 0);
        assert_eq!(distinct_estimate(&[7; 1000]), 1);
        for n in [1_000i64, 100_000, 2_000_000] {
            // Each key three times, spread like order keys.
            let keys: Vec<i64> = (0..3 * n).map(|i| (i % n) * 4 + 1).collect();
            let est = distinct_estimate(&keys) as f64;
            assert!((est / n as f64 - 1.0).abs() < 0.03, "{n}: {est}");
        }
    }

    #[test]
    fn density_is_counted_on_distinct_keys() {
        assert!(is_dense(&(0..1000).collect::<Vec<_>>()));
        // 1000 keys over a span of 4000.
        assert!(!is_dense(&(0..1000).map(|k| k * 4).collect::<Vec<_>>()));
        // Many repeats of few keys: long, but not dense.
        let repeats: Vec<i64> = (0..4000).map(|k| (k % 10) * 100).collect();
        assert!(!is_dense(&repeats));
        assert!(is_dense(&[i64::MAX]));
    }

    #[test]
    fn the_filter_fits_the_keys() {
        let probe = Expr::Column {
            index: 0,
            data_type: DataType::Int64,
        };
        let keys_of = |keys: Vec<i64>| {
            let sink = BuildKeys::new("k@0".into(), 1);
            sink.add(&arrow::array::Int64Array::from(keys));
            sink.partition_ended();
            sink
        };
        let sparse = |n: i64| keys_of((0..n).map(|k| k * 3).collect());
        let shape = |f: KeyFilter| match f.condition {
            Some(Expr::InList { list, .. }) => format!("list {}", list.len()),
            // A Bloom filter goes with the keys' bounds.
            Some(Expr::Logic {
                op: LogicOp::And,
                args,
            }) if matches!(args.last(), Some(Expr::InBloom { .. })) => "bloom".into(),
            Some(Expr::Compare { .. } | Expr::Logic { .. }) => "range".into(),
            Some(Expr::Literal(ScalarValue::Boolean(false))) => "nothing".into(),
            Some(other) => format!("{other:?}"),
            None => format!("none: {}", f.shown),
        };
        // Few keys: exact; many: a Bloom filter; past the cap or already
        // listed by DataFusion's own filter: none.
        assert_eq!(
            shape(sparse(100).filter(&probe, false, 1000, None)),
            "list 100"
        );
        assert_eq!(
            shape(keys_of(vec![7, 3, 7]).filter(&probe, false, 10, None)),
            "list 2"
        );
        let many = sparse(50_000).filter(&probe, false, 1000, None);
        assert!(many.shown.contains("50000 keys"), "{}", many.shown);
        assert_eq!(shape(many), "bloom");
        assert!(shape(sparse(50_000).filter(&probe, true, 1000, None)).contains("IN list has them"));
        // A probe column with fewer than 2.5 times as many distinct values
        // as there are keys: a Bloom filter would keep most rows.
        assert_eq!(
            shape(sparse(50_000).filter(&probe, false, 1000, Some(125_000))),
            "bloom"
        );
        let most = sparse(50_000).filter(&probe, false, 1000, Some(124_999));
        assert!(
            most.shown.contains("would keep most rows"),
            "{}",
            most.shown
        );
        // Their bounds still go: the regions' zone maps skip packs by them.
        assert_eq!(shape(most), "range");
        // Many build rows, few distinct keys (Q5's suppliers by nation):
        // a list of the distinct ones, not a Bloom filter refused for
        // keeping most rows.
        let repeated = keys_of((0..20_000).map(|k| (k % 5) * 7 + 8).collect());
        assert_eq!(
            shape(repeated.filter(&probe, false, 1000, Some(25))),
            "list 5"
        );
        // Q9's lineitem rows by part: ten rows a key, the distinct keys a
        // third of the probe column's values: a Bloom filter.
        let per_part = keys_of((0..30_000).map(|k| (k % 3_000) * 3).collect());
        assert_eq!(
            shape(per_part.filter(&probe, false, 1000, Some(9_000))),
            "bloom"
        );
        let sink = BuildKeys::new("k@0".into(), 1);
        sink.add(&arrow::array::Int64Array::from(vec![3, 6, 9]));
        sink.add(&arrow::array::Int64Array::from(vec![0; MAX_BLOOM_KEYS]));
        sink.partition_ended();
        let over = sink.filter(&probe, false, 1000, None);
        assert!(
            over.shown.contains(&format!(
                "range(k@0: 0..=9; no bloom: over {MAX_BLOOM_KEYS} keys"
            )),
            "{}",
            over.shown
        );
        assert_eq!(shape(over), "range");
        // Dense keys: their bounds; no keys: nothing joins.
        assert_eq!(
            shape(keys_of((5..50_000).collect()).filter(&probe, false, 10, None)),
            "range"
        );
        assert_eq!(
            shape(keys_of(vec![]).filter(&probe, false, 10, None)),
            "nothing"
        );
        let other_type = BuildKeys::new("k@0".into(), 1);
        other_type.add(&arrow::array::Int32Array::from(vec![1, 2, 3]));
        assert!(shape(other_type.filter(&probe, false, 10, None)).starts_with("none"));
    }

    #[tokio::test]
    async fn the_keys_are_ready_once_every_partition_has_ended() {
        let sink = BuildKeys::new("k@0".into(), 2);
        let soon = Instant::now() + std::time::Duration::from_millis(20);
        sink.partition_ended();
        assert!(!sink.wait(soon).await, "one partition of two");
        sink.partition_ended();
        assert!(sink.wait(Instant::now()).await);
    }
}
