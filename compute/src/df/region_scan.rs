//! The region-scan node: the leaf of every DataFusion plan over a Quarry
//! table, and the boundary between compute and storage.
//!
//! A [`RegionScanExec`] carries one coprocessor DAG — scan, selection, and
//! either a projection (+ limit) or a partial aggregation — and runs it over
//! every region of its table through the [`Dispatcher`]: one request per
//! region, bounded fan-out, per-region retries, pages streamed back as they
//! arrive. DataFusion sees one partition of Arrow batches whose schema is
//! the node's: the table's projected columns, or exactly the schema of the
//! Partial aggregation the node replaced (see `rules.rs`), so that
//! DataFusion's Final aggregation merges the regions' states column-wise.
//!
//! Errors keep their category: a Quarry error travels inside
//! `DataFusionError::External` and is unwrapped at the top (`df/mod.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;
use parking_lot::Mutex;
use quarry_coprocessor::codec::key::table_record_range;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::coprocessor::DagRequest;
use quarry_proto::meta::TableDef;

use crate::dispatch::{DispatchStats, Dispatcher};
use crate::Error;

/// What every region scan of a session shares.
#[derive(Clone)]
pub struct ScanContext {
    pub dispatcher: Arc<Dispatcher>,
    /// A query's whole budget: each scan's requests carry the deadline.
    pub timeout: Duration,
}

impl fmt::Debug for ScanContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScanContext")
            .field("timeout", &self.timeout)
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
        }
    }

    pub fn table(&self) -> &TableDef {
        &self.table
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
}

impl DisplayAs for RegionScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "RegionScanExec: table={}, storage=[{}]",
            self.table.name, self.storage
        )?;
        if let Some(st) = self.last_run.lock().as_ref() {
            let s = &st.summary;
            write!(
                f,
                ", ran: {} region requests, {} retries, {} response bytes; \
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

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "RegionScanExec has one partition, asked for {partition}"
            )));
        }
        let (start, end) = table_record_range(self.table.id);
        let deadline = Instant::now() + self.ctx.timeout;
        let scan = self.ctx.dispatcher.stream(
            &self.dag,
            vec![KeyRange::new(start, end)],
            self.row_types.clone(),
            deadline,
        );
        let stats = scan.stats();
        let last_run = self.last_run.clone();
        let rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let schema = self.schema.clone();
        let mut reported = false;
        let batches = scan
            .map(move |b| {
                let b = b.map_err(external)?;
                rows.add(b.num_rows());
                conform(b, &schema)
            })
            .chain(futures::stream::poll_fn(move |_| {
                // Once the scan has ended: its totals, for EXPLAIN ANALYZE.
                if !reported {
                    reported = true;
                    *last_run.lock() = Some(stats.lock().clone());
                }
                std::task::Poll::Ready(None)
            }));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            batches,
        )))
    }
}
