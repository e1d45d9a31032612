//! The region-scan node: the leaf of every DataFusion plan over a Quarry
//! table, and the boundary between compute and storage.
//!
//! A [`RegionScanExec`] carries one coprocessor DAG — scan, selection, and
//! either a projection (+ limit) or a partial aggregation — and runs it over
//! every region of its table through the [`Dispatcher`]: one batched call
//! per store, then per-region retries and pages, bounded fan-out, pages
//! streamed back as they arrive. DataFusion sees one partition of Arrow batches whose schema is
//! the node's: the table's projected columns, or exactly the schema of the
//! Partial aggregation the node replaced (see `rules.rs`), so that
//! DataFusion's Final aggregation merges the regions' states column-wise.
//!
//! Errors keep their category: a Quarry error travels inside
//! `DataFusionError::External` and is unwrapped at the top (`df/errors.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult, Statistics};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;
use parking_lot::Mutex;
use quarry_coprocessor::expr::Expr;
use quarry_coprocessor::storage::KeyRange;
use quarry_coprocessor::types::arrow_type;
use quarry_proto::coprocessor::DagRequest;
use quarry_proto::meta::{ColumnDef, TableDef};

use super::dynamic_filters::{
    dynamic_ids, dynamic_parts, lists_keys_of, DynamicFilters, MAX_FILTER_WAIT,
};
use super::join_keys::BuildKeys;
use super::late_filters::{LateFilters, QueryParams};
use super::pushdown;
use super::selectivity::{conjunction, conjunction_measured, DEFAULT_SELECTIVITY};
use super::shared_scan::SharedRun;
use super::stats::{ColumnStatistics, TableStatistics, TableStats};
use crate::df::mpp::colocate::CoPartition;
use crate::dispatch::{DispatchStats, Dispatcher};
use crate::Error;

mod statistics;

/// What every region scan of a session shares.
#[derive(Clone)]
pub struct ScanContext {
    pub dispatcher: Arc<Dispatcher>,
    /// A query's whole budget: each scan's requests carry the deadline.
    pub timeout: Duration,
    /// Hash joins send their build keys to the probe side's regions as a
    /// Bloom filter (`join_keys.rs`).
    pub join_bloom_filters: bool,
    /// The most build keys (per join partition) that reach the probe
    /// side's regions as an IN list.
    pub join_key_list_max: usize,
}

impl fmt::Debug for ScanContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScanContext")
            .field("timeout", &self.timeout)
            .field("join_bloom_filters", &self.join_bloom_filters)
            .field("join_key_list_max", &self.join_key_list_max)
            .finish()
    }
}

#[derive(Debug)]
pub struct RegionScanExec {
    ctx: ScanContext,
    table: TableDef,
    dag: DagRequest,
    /// The DAG's output types (what each region returns).
    row_types: Vec<DataType>,
    schema: SchemaRef,
    /// What storage runs, for EXPLAIN.
    storage: String,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    /// The last run's totals, shown by EXPLAIN ANALYZE with exact counts.
    last_run: Arc<Mutex<Option<DispatchStats>>>,
    /// Join filters DataFusion hands this scan, added to the DAG's
    /// selection once the join's build side is known.
    dynamic: Option<Arc<DynamicFilters>>,
    /// What the last run's dynamic filters added, for EXPLAIN ANALYZE.
    last_runtime_filter: Arc<Mutex<Vec<String>>>,
    /// The table's statistics, if known: DataFusion's estimate of a plain
    /// scan's output, for join order (`stats.rs`).
    table_stats: Option<Arc<TableStatistics>>,
    /// Where conditions the statistics cannot estimate are measured
    /// (`measured_share.rs`); None in MPP workers' copies. (Nothing is
    /// measured without `table_stats`.)
    measurer: Option<Arc<TableStats>>,
    /// Hash joins' build keys, each with the probe key over the scan's
    /// columns: a Bloom filter of them joins the selection (`join_keys.rs`).
    build_keys: Vec<(Arc<BuildKeys>, Expr)>,
    /// In a distributed plan, the keys of hash joins in other stages, by
    /// their slot on this process's board (`mpp/cross_stage.rs`), each
    /// with the probe key over the scan's columns: found by the query's
    /// id when the scan runs, then used as `build_keys`.
    remote_keys: Vec<(u32, Expr)>,
    /// The run this scan shares with identical scans of the plan, if any
    /// (`shared_scan.rs`).
    shared: Option<Arc<SharedRun>>,
    /// Filters whose constants each run brings (`late_filters.rs`).
    late: Option<Arc<LateFilters>>,
    /// In a distributed plan, this task's share of the table
    /// (`mpp/tasks.rs`): it scans only these keys. None: all of it.
    share: Option<Vec<KeyRange>>,
    /// In a distributed plan, the column whose value ranges split this
    /// scan into tasks, the same split as the scans it is joined with in
    /// its stage (`mpp/colocate.rs`). None: split by regions.
    co_partition: Option<CoPartition>,
    /// A task's range of `co_partition`'s column, for EXPLAIN.
    value_range: Option<String>,
}

impl RegionScanExec {
    pub fn new(
        ctx: ScanContext,
        table: TableDef,
        dag: DagRequest,
        row_types: Vec<DataType>,
        schema: SchemaRef,
        storage: String,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        RegionScanExec {
            ctx,
            table,
            dag,
            row_types,
            schema,
            storage,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
            last_run: Arc::new(Mutex::new(None)),
            dynamic: None,
            last_runtime_filter: Arc::new(Mutex::new(Vec::new())),
            table_stats: None,
            measurer: None,
            build_keys: Vec::new(),
            remote_keys: Vec::new(),
            shared: None,
            late: None,
            share: None,
            co_partition: None,
            value_range: None,
        }
    }

    /// The same scan over only the keys in `share`: one task's of a
    /// distributed scan (`mpp/tasks.rs`).
    pub fn with_share(&self, share: Vec<KeyRange>) -> Self {
        let mut scan = self.with_dag(self.dag.clone(), self.storage.clone());
        scan.share = Some(share);
        scan
    }

    /// The keys this scan is limited to (None: the whole table).
    pub fn share(&self) -> Option<&[KeyRange]> {
        self.share.as_deref()
    }

    /// The DAG's output types.
    pub fn row_types(&self) -> &[DataType] {
        &self.row_types
    }

    /// Whether the scan reads a few rows by key: primary keys its filter
    /// pins, or a selective index (not worth spreading over processes).
    pub fn reads_few_rows(&self) -> bool {
        super::point_get::pinned_handles(&self.table, &self.dag).is_some()
            || crate::index::access::choose(&self.table, &self.dag, self.table_stats.as_deref())
                .is_some()
    }

    /// Whether its filters' constants come with each run.
    pub fn has_late_filters(&self) -> bool {
        self.late.is_some()
    }

    /// Filters whose constants each run brings (`late_filters.rs`).
    pub fn set_late_filters(&mut self, late: LateFilters) {
        self.late = Some(Arc::new(late));
    }

    pub fn table(&self) -> &TableDef {
        &self.table
    }

    /// Whether a run of this scan waits on something a fresh copy of its
    /// plan could not link again (`fresh_run.rs`): build keys of another
    /// stage (a plan holding one is planned for each run:
    /// `plan_cache::reusable`).
    pub fn has_unlinkable_run_state(&self) -> bool {
        !self.remote_keys.is_empty()
    }

    /// The expression ids of DataFusion's join filters this scan waits
    /// for (each its producing hash join's).
    pub fn dynamic_filter_ids(&self) -> impl Iterator<Item = u64> + '_ {
        (self.dynamic.iter()).flat_map(|d| d.filters.iter().flat_map(dynamic_ids))
    }

    /// The build keys of this plan's joins that narrow this scan.
    pub fn build_keys(&self) -> impl Iterator<Item = &Arc<BuildKeys>> {
        self.build_keys.iter().map(|(k, _)| k)
    }

    /// The run this scan shares with identical scans, if any.
    pub fn shared_run(&self) -> Option<&Arc<SharedRun>> {
        self.shared.as_ref()
    }

    /// A copy for one run of a kept plan (`fresh_run.rs`): as
    /// `reset_state` makes it, but narrowed by the same joins' build keys
    /// and DataFusion join filters and sharing the same run as the kept
    /// scan, each the one `keys`, `filter` and `run` give for this run.
    pub fn for_run(
        &self,
        mut keys: impl FnMut(&Arc<BuildKeys>) -> Arc<BuildKeys>,
        filter: impl FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<Arc<dyn PhysicalExpr>>,
        run: impl FnOnce(&Arc<SharedRun>) -> Arc<SharedRun>,
    ) -> DfResult<Self> {
        let mut scan = self.with_dag(self.dag.clone(), self.storage.clone());
        scan.dynamic = match &self.dynamic {
            Some(d) => Some(Arc::new(DynamicFilters {
                filters: d.filters.iter().map(filter).collect::<DfResult<_>>()?,
                columns: d.columns.clone(),
            })),
            None => None,
        };
        scan.remote_keys.clear();
        scan.build_keys = (self.build_keys.iter())
            .map(|(k, probe)| (keys(k), probe.clone()))
            .collect();
        if let Some(shared) = &self.shared {
            let shared = run(shared);
            scan.last_run = shared.last_run.clone();
            scan.shared = Some(shared);
        }
        // (Its properties kept: see `reset_state`.)
        scan.properties = self.properties.clone();
        Ok(scan)
    }

    pub fn dag(&self) -> &DagRequest {
        &self.dag
    }

    pub fn context(&self) -> &ScanContext {
        &self.ctx
    }

    pub fn storage(&self) -> &str {
        &self.storage
    }

    /// The same scan (columns, schema) running `dag`, shown as `storage`.
    pub fn with_dag(&self, dag: DagRequest, storage: String) -> Self {
        self.derive(dag, self.row_types.clone(), self.schema.clone(), storage)
    }

    /// A scan of the same table running `dag` with a new output, keeping
    /// the join filters DataFusion gave this one.
    pub fn derive(
        &self,
        dag: DagRequest,
        row_types: Vec<DataType>,
        schema: SchemaRef,
        storage: String,
    ) -> Self {
        let mut scan = RegionScanExec::new(
            self.ctx.clone(),
            self.table.clone(),
            dag,
            row_types,
            schema,
            storage,
        );
        scan.dynamic = self.dynamic.clone();
        scan.table_stats = self.table_stats.clone();
        scan.measurer = self.measurer.clone();
        scan.build_keys = self.build_keys.clone();
        scan.remote_keys = self.remote_keys.clone();
        scan.late = self.late.clone();
        scan.share = self.share.clone();
        scan.co_partition = self.co_partition.clone();
        scan.value_range = self.value_range.clone();
        scan
    }

    /// The same scan, split into tasks by `co` (`mpp/colocate.rs`).
    pub fn with_co_partition(&self, co: CoPartition) -> Self {
        let mut scan = self.with_dag(self.dag.clone(), self.storage.clone());
        scan.co_partition = Some(co);
        scan
    }

    /// How the scan is split into tasks, when it is co-located.
    pub fn co_partition(&self) -> Option<&CoPartition> {
        self.co_partition.as_ref()
    }

    /// A co-located task's range of its key, as shown (None: the scan is
    /// not one).
    pub fn value_range(&self) -> Option<&str> {
        self.value_range.as_deref()
    }

    /// The same scan, a co-located task's whose range (already in its
    /// DAG) shows as `shown`: a worker's copy (`mpp/codec.rs`).
    pub fn with_value_range_shown(mut self, shown: String) -> Self {
        self.value_range = Some(shown);
        self
    }

    /// The same scan, also narrowed by a hash join's build keys on `probe`.
    pub fn with_build_keys(&self, keys: Arc<BuildKeys>, probe: Expr) -> Self {
        let mut scan = self.with_dag(self.dag.clone(), self.storage.clone());
        scan.build_keys.push((keys, probe));
        scan
    }

    /// The same scan, also narrowed by the build keys that a hash join in
    /// another stage of a distributed query leaves on `slot` of each
    /// process's board (`mpp/cross_stage.rs`), on `probe`.
    pub fn with_remote_keys(&self, slot: u32, probe: Expr) -> Self {
        let mut scan = self.with_dag(self.dag.clone(), self.storage.clone());
        scan.remote_keys.push((slot, probe));
        scan
    }

    /// Whether `keys` narrow this scan (a [`Self::with_build_keys`] of it).
    pub fn has_build_keys(&self, keys: &Arc<BuildKeys>) -> bool {
        self.build_keys.iter().any(|(k, _)| Arc::ptr_eq(k, keys))
    }

    /// The same scan without the dynamic filters whose producers'
    /// expression ids are in `ids` (a hash join's, which then finds no
    /// consumer and builds none: `join_keys.rs`); None when it holds none.
    pub fn without_dynamic_filters(&self, ids: &[u64]) -> Option<Self> {
        let d = self.dynamic.as_ref().filter(|d| d.holds_any(ids))?;
        let mut scan = self.with_dag(self.dag.clone(), self.storage.clone());
        scan.dynamic = d.without(ids);
        Some(scan)
    }

    /// The slots and probe keys of [`Self::with_remote_keys`].
    pub fn remote_keys(&self) -> &[(u32, Expr)] {
        &self.remote_keys
    }

    /// `key` (an expression over the scan's output) as an expression over
    /// the columns it reads, if it is a BIGINT that the regions can test
    /// before any aggregation: what a join key filter tests.
    pub fn probe_key(&self, key: &Arc<dyn PhysicalExpr>) -> Option<Expr> {
        let outputs = self.outputs_before_aggregation()?;
        let probe = pushdown::physical(key, &mut |i| outputs.get(i).cloned().flatten())?;
        (probe.data_type() == DataType::Int64).then_some(probe)
    }

    /// Whether a join narrows this scan at run time.
    pub fn has_join_filters(&self) -> bool {
        self.dynamic.is_some() || !self.build_keys.is_empty() || !self.remote_keys.is_empty()
    }

    /// The same scan, without join filters, sharing `run` with the plan's
    /// other scans of the same DAG (`shared_scan.rs`).
    pub fn sharing(&self, run: Arc<SharedRun>) -> Self {
        let mut scan = self.with_dag(self.dag.clone(), self.storage.clone());
        scan.dynamic = None;
        scan.build_keys.clear();
        scan.remote_keys.clear();
        scan.last_run = run.last_run.clone();
        scan.shared = Some(run);
        scan
    }

    /// The types of the columns the DAG's table scan reads (the input of
    /// a probe key).
    pub fn scan_types(&self) -> Result<Vec<DataType>, Error> {
        let scan = self
            .dag
            .scan
            .as_ref()
            .ok_or_else(|| Error::Internal("DAG without scan".into()))?;
        scan.columns
            .iter()
            .map(|c| Ok(arrow_type(&c.field_type.unwrap_or_default())?))
            .collect()
    }

    /// Each output column as an expression over the scan's columns that a
    /// selection condition may use before any aggregation: every column of
    /// a plain scan, the group keys of an aggregating one (a condition on
    /// them keeps or drops whole groups), None for aggregate states. None
    /// when a limit or top-k makes the rows a condition removes matter.
    pub fn outputs_before_aggregation(&self) -> Option<Vec<Option<Expr>>> {
        let dag = &self.dag;
        let Some(aggregation) = &dag.aggregation else {
            return Some(self.plain_outputs()?.into_iter().map(Some).collect());
        };
        if dag.limit != 0 || dag.top_n.is_some() || dag.projection.is_some() {
            return None;
        }
        let scan_types = self.scan_types().ok()?;
        let mut outputs: Vec<Option<Expr>> = aggregation
            .group_by
            .iter()
            .map(|e| Expr::from_proto(e, &scan_types).ok())
            .collect();
        outputs.resize(self.schema.fields().len(), None);
        Some(outputs)
    }

    /// The output columns as expressions over the scan's columns, when this
    /// is a plain scan (no aggregation, limit or top-k yet).
    pub fn plain_outputs(&self) -> Option<Vec<Expr>> {
        let dag = &self.dag;
        if dag.aggregation.is_some() || dag.limit != 0 || dag.top_n.is_some() {
            return None;
        }
        let scan_types = self.scan_types().ok()?;
        match &dag.projection {
            Some(p) => p
                .exprs
                .iter()
                .map(|e| Expr::from_proto(e, &scan_types).ok())
                .collect(),
            None => Some(
                scan_types
                    .iter()
                    .enumerate()
                    .map(|(index, t)| Expr::Column {
                        index,
                        data_type: t.clone(),
                    })
                    .collect(),
            ),
        }
    }
}

impl DisplayAs for RegionScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "RegionScanExec: table={}, storage=[{}]",
            self.table.name, self.storage
        )?;
        if let Some(d) = &self.dynamic {
            write!(f, ", join filters: {}", d.filters.len())?;
        }
        if !self.build_keys.is_empty() {
            write!(f, ", join key filters: {}", self.build_keys.len())?;
        }
        if !self.remote_keys.is_empty() {
            write!(f, ", keys from other stages: {}", self.remote_keys.len())?;
        }
        if let Some(a) =
            crate::index::access::choose(&self.table, &self.dag, self.table_stats.as_deref())
        {
            write!(f, ", index lookup: {} ({})", a.index.name, a.shown)?;
        }
        if let Some(run) = &self.shared {
            write!(f, ", one run shared by {} scans", run.scans)?;
        }
        match (&self.value_range, &self.share) {
            (Some(range), _) => write!(f, ", co-located share: {range}")?,
            (None, Some(share)) => write!(f, ", share: {} key ranges", share.len())?,
            (None, None) => {}
        }
        if let (Some(co), None) = (&self.co_partition, &self.value_range) {
            write!(f, ", co-located by {}", co.name)?;
        }
        let runtime = self.last_runtime_filter.lock();
        if !runtime.is_empty() {
            write!(f, ", runtime filter: [{}]", runtime.join(" AND "))?;
        }
        if let Some(st) = self.last_run.lock().as_ref() {
            let s = &st.summary;
            // (A distributed scan's figures are those of the task that
            // ran in this process, if one did.)
            let ran = match self.share.is_none() {
                true => "ran",
                false => "this task ran",
            };
            write!(
                f,
                ", {ran}: {} region requests, {} retries, {} response bytes; \
                 storage: {} keys scanned ({} bytes), {} rows out; \
                 packs: {} scanned, {} skipped by zone maps, {} on the generic path; \
                 storage time: {:.1} ms processing, {:.1} ms queued (summed over regions)",
                st.requests,
                st.retries,
                st.response_bytes,
                s.scanned_keys,
                s.scanned_bytes,
                s.output_rows,
                s.blocks_scanned,
                s.blocks_skipped,
                s.blocks_fallback,
                s.process_ns as f64 / 1e6,
                s.wait_ns as f64 / 1e6
            )?;
        }
        Ok(())
    }
}

/// Puts a region's batch under the node's schema: same columns, casting
/// where the partial state's type is wider than the region's (a few rows).
/// A node with no columns (`SELECT count(*) FROM a, b` needs only row
/// counts) keeps just the row count of what the region sent.
pub fn conform(batch: RecordBatch, schema: &SchemaRef) -> DfResult<RecordBatch> {
    if schema.fields().is_empty() {
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        return Ok(RecordBatch::try_new_with_options(
            schema.clone(),
            vec![],
            &options,
        )?);
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else {
                cast(c, f.data_type())
            }
        })
        .collect::<Result<Vec<ArrayRef>, _>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

pub fn external(e: Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl ExecutionPlan for RegionScanExec {
    fn name(&self) -> &str {
        "RegionScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    /// The join filters this scan holds: a hash join looks for its
    /// dynamic filter here to know that someone consumes it (and only then
    /// completes it, which the scan waits for).
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        if let Some(d) = &self.dynamic {
            for e in &d.filters {
                if f(e)? == TreeNodeRecursion::Stop {
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    /// A plan run again (DataFusion does it for each round of a recursive
    /// CTE's recursive part) must not be narrowed by the keys its joins'
    /// build sides had in an earlier run: DataFusion's join starts a new
    /// dynamic filter that this scan never saw, and a [`BuildKeys`] holds
    /// the earlier keys. The re-run scan goes without join filters:
    /// slower, never wrong.
    fn reset_state(self: Arc<Self>) -> DfResult<Arc<dyn ExecutionPlan>> {
        let mut scan = self.with_dag(self.dag.clone(), self.storage.clone());
        scan.dynamic = None;
        scan.build_keys.clear();
        scan.remote_keys.clear();
        // The same properties (same schema): the operators above see an
        // unchanged child and are copied, not planned again.
        scan.properties = self.properties.clone();
        Ok(Arc::new(scan))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    /// The scan's own estimate ([`RegionScanExec::estimated_statistics`]).
    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> DfResult<Arc<Statistics>> {
        Ok(Arc::new(self.estimated_statistics()))
    }

    /// Keeps the join filters DataFusion offers after optimization (its
    /// dynamic filters) to narrow the regions' selection at run time. They
    /// are reported as not pushed down: the join still applies them, so a
    /// filter storage cannot evaluate costs nothing but rows on the wire.
    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> DfResult<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        tracing::debug!(
            table = %self.table.name,
            ?phase,
            offered = child_pushdown_result.parent_filters.len(),
            filters = ?child_pushdown_result.parent_filters.iter().map(|f| f.filter.to_string()).collect::<Vec<_>>(),
            "region scan offered filters"
        );
        let filters: Vec<Arc<dyn PhysicalExpr>> = child_pushdown_result
            .parent_filters
            .iter()
            .map(|f| f.filter.clone())
            .filter(|f| !dynamic_parts(f).is_empty())
            .collect();
        let propagation = FilterPushdownPropagation::all_unsupported(child_pushdown_result);
        let columns = match (phase, self.plain_outputs()) {
            (FilterPushdownPhase::Post, Some(c)) if !filters.is_empty() => c,
            _ => return Ok(propagation),
        };
        let mut scan = self.derive(
            self.dag.clone(),
            self.row_types.clone(),
            self.schema.clone(),
            self.storage.clone(),
        );
        let mut all = self
            .dynamic
            .as_ref()
            .map_or_else(Vec::new, |d| d.filters.clone());
        all.extend(filters);
        scan.dynamic = Some(Arc::new(DynamicFilters {
            filters: all,
            columns,
        }));
        Ok(propagation.with_updated_node(Arc::new(scan)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "RegionScanExec has one partition, asked for {partition}"
            )));
        }
        let mut dag = self.dag.clone();
        // A task of a distributed scan sees only its share's key ranges,
        // too few to check a group sieve by (`group_sieve.rs`); unless its
        // share is a range of the co-located key, which holds its groups.
        if self.share.is_some() && self.value_range.is_none() {
            dag.group_sieve = None;
        }
        // A shape's scan: its filters with this run's values.
        if let Some(late) = &self.late {
            let params = context
                .session_config()
                .get_extension::<QueryParams>()
                .ok_or_else(|| {
                    DataFusionError::Internal(
                        "a region scan with placeholders ran without their values".into(),
                    )
                })?;
            late.bind(&mut dag, &params.0).map_err(external)?;
        }
        let ranges = super::point_get::scan_ranges(&self.table, &dag);
        // A selective lookup through an index: its rows' ranges instead.
        // (Not for a task of a distributed scan: its share is key ranges
        // of the table's rows.)
        let access = match self.share.is_none() {
            true => crate::index::access::choose(&self.table, &dag, self.table_stats.as_deref()),
            false => None,
        };
        // A task of a distributed query: its coordinator's snapshot and
        // deadline, and its share of the table (`mpp/`).
        let mpp = context
            .session_config()
            .options()
            .extensions
            .get::<crate::df::mpp::MppOptions>();
        let ranges = match &self.share {
            None => ranges,
            Some(mine) => crate::df::mpp::tasks::intersect_all(&ranges, mine),
        };
        // The statement's deadline (absent: compute's query timeout).
        let deadline = context
            .session_config()
            .get_extension::<super::Deadline>()
            .map(|d| d.0)
            .or_else(|| mpp.and_then(|o| o.deadline()))
            .unwrap_or_else(|| Instant::now() + self.ctx.timeout);
        let dispatcher = self.ctx.dispatcher.clone();
        // The query's snapshot (absent: the dispatcher takes a fresh one,
        // which a task of a distributed query must never do).
        if let Some(s) = context.session_config().get_extension::<super::Snapshot>() {
            dag.read_ts = s.read_ts;
            dag.repeatable = s.repeatable;
        } else if let Some(o) = mpp.filter(|o| o.read_ts > 0) {
            dag.read_ts = o.read_ts;
            dag.repeatable = o.repeatable;
        } else if mpp.is_some() {
            return Err(DataFusionError::Internal(
                "a task of a distributed query came without its snapshot".into(),
            ));
        }
        let row_types = self.row_types.clone();
        let dynamic = self.dynamic.clone();
        let mut build_keys = self.build_keys.clone();
        // Keys from joins in other stages, on this process's board under
        // the query's id (`mpp/cross_stage.rs`).
        if let Some(query) = mpp.map(|o| o.query_id.as_str()).filter(|q| !q.is_empty()) {
            for (slot, probe) in &self.remote_keys {
                build_keys.push((
                    crate::df::mpp::cross_stage::board_entry(query, *slot),
                    probe.clone(),
                ));
            }
        }
        let key_list_max = self.ctx.join_key_list_max;
        // Each scan column's distinct values, from the table's statistics.
        let probe_distinct: Vec<Option<u64>> = match (&self.dag.scan, &self.table_stats) {
            (Some(scan), Some(stats)) => scan
                .columns
                .iter()
                .map(|c| stats.columns.get(&c.column_id).map(|s| s.distinct))
                .collect(),
            _ => Vec::new(),
        };
        let runtime_filter = self.last_runtime_filter.clone();
        // The scan's statistics, once it has started.
        let stats: Arc<Mutex<Option<Arc<Mutex<DispatchStats>>>>> = Arc::default();
        let started = stats.clone();
        // Regions are asked only when DataFusion first polls the scan: a
        // join's probe side waits there for its build side's filter.
        let scan = futures::stream::once(async move {
            let added = match dynamic {
                Some(d) => d.narrow(&mut dag, deadline).await,
                None => Vec::new(),
            };
            let mut shown: Vec<String> = added.iter().map(|(_, s)| s.clone()).collect();
            // One bound for all of them: a scan waits at most
            // MAX_FILTER_WAIT for its joins' keys, however many joins.
            let bound = deadline.min(Instant::now() + MAX_FILTER_WAIT);
            for (keys, probe) in &build_keys {
                // As for DataFusion's filters: past the bound, go on
                // without this one.
                if !keys.wait(bound).await {
                    continue;
                }
                let listed = added.iter().any(|(e, _)| lists_keys_of(e, probe));
                let distinct = match probe {
                    Expr::Column { index, .. } => probe_distinct.get(*index).copied().flatten(),
                    _ => None,
                };
                let filter = keys.filter(probe, listed, key_list_max, distinct);
                if let Some(c) = filter.condition.and_then(|c| c.to_proto().ok()) {
                    dag.selection
                        .get_or_insert_with(Default::default)
                        .conditions
                        .push(c);
                }
                shown.push(filter.shown);
            }
            *runtime_filter.lock() = shown;
            let ranges = match (&access, dispatcher.txns()) {
                (Some(a), Some(txns)) => {
                    match crate::index::read::row_ranges(a, &mut dag, txns, deadline).await {
                        Ok(Some(rows)) => rows,
                        Ok(None) => ranges,
                        Err(e) => return futures::stream::iter([Err(e)]).boxed(),
                    }
                }
                _ => ranges,
            };
            if dag.group_sieve.is_some() {
                let (batches, stats, said) =
                    super::group_sieve::run(&dispatcher, &dag, ranges, row_types, deadline).await;
                runtime_filter.lock().push(said);
                *started.lock() = Some(stats);
                return batches;
            }
            let scan = dispatcher.stream(&dag, ranges, row_types, deadline);
            *started.lock() = Some(scan.stats());
            scan.boxed()
        })
        .flatten();
        let last_run = self.last_run.clone();
        let mut reported = false;
        let batches = scan
            .map(|b| b.map_err(external))
            .chain(futures::stream::poll_fn(move |_| {
                // Once the scan has ended: its totals, for EXPLAIN ANALYZE.
                if !reported {
                    reported = true;
                    if let Some(st) = stats.lock().as_ref() {
                        *last_run.lock() = Some(st.lock().clone());
                    }
                }
                std::task::Poll::Ready(None)
            }));
        // A shared run: the first scan polled runs the regions, every one
        // replays the run's batches (its DAG is never sent twice).
        let batches = match self.shared.clone() {
            None => batches.boxed(),
            Some(run) => futures::stream::once(async move { run.batches(batches).await })
                .map(|r| match r {
                    Ok(all) => futures::stream::iter(all.into_iter().map(Ok)).boxed(),
                    Err(e) => futures::stream::iter([Err(e)]).boxed(),
                })
                .flatten()
                .boxed(),
        };
        let rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let schema = self.schema.clone();
        let batches = batches.map(move |b| {
            let b = conform(b?, &schema)?;
            rows.add(b.num_rows());
            crate::metrics::region_rows(b.num_rows());
            Ok(b)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            batches,
        )))
    }
}
