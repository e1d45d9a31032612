//! A Quarry table as a DataFusion [`TableProvider`].
//!
//! DataFusion offers the table its filters, projection and limit; the table
//! answers with a [`RegionScanExec`] that runs them in the regions:
//!
//! * filters that [`pushdown::logical`](super::pushdown::logical) translates are `Exact`: storage
//!   evaluates them and DataFusion keeps no copy; the rest are
//!   `Unsupported` and DataFusion filters above the scan;
//! * the projection becomes the scan's columns (plus the filters' columns,
//!   projected away in storage);
//! * a limit (DataFusion passes one only when every filter was pushed)
//!   stops each region after that many rows, and the query stops reading
//!   once the limit above the scan is met.
//!
//! Partial aggregation and top-k are moved into the node afterwards, by the
//! physical optimizer rules in `rules.rs`.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Result as DfResult, Statistics};
use datafusion::logical_expr::{Expr as LExpr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use quarry_coprocessor::expr::Expr;
use quarry_coprocessor::types::arrow_type;
use quarry_proto::coprocessor::{DagRequest, Projection, Selection};
use quarry_proto::meta::TableDef;

use super::late_filters::{has_placeholders, translate_planned, LateFilters};
use super::pushdown::ColumnBinder;
use super::region_scan::{external, RegionScanExec, ScanContext};
use super::stats::{TableStatistics, TableStats};
use crate::Result;

#[derive(Debug)]
pub struct QuarryTable {
    def: TableDef,
    schema: SchemaRef,
    ctx: ScanContext,
    /// The table's last statistics, if known (`stats.rs`).
    stats: Option<Arc<TableStatistics>>,
    /// Where its scans' conditions the statistics cannot estimate are
    /// measured (`measured_share.rs`), with the statistics.
    measurer: Option<Arc<TableStats>>,
}

/// The Arrow schema of a table definition.
pub fn table_schema(def: &TableDef) -> Result<SchemaRef> {
    let fields = def
        .columns
        .iter()
        .map(|c| {
            let ft = c.field_type.unwrap_or_default();
            Ok(Field::new(&c.name, arrow_type(&ft)?, ft.nullable))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

impl QuarryTable {
    pub fn new(
        def: TableDef,
        ctx: ScanContext,
        stats: Option<Arc<TableStatistics>>,
    ) -> Result<Self> {
        Ok(QuarryTable {
            schema: table_schema(&def)?,
            def,
            ctx,
            stats,
            measurer: None,
        })
    }

    /// The table, its scans' conditions the statistics cannot estimate
    /// measured by `measurer` (`measured_share.rs`).
    pub fn with_measurer(mut self, measurer: Arc<TableStats>) -> Self {
        self.measurer = Some(measurer);
        self
    }

    /// The table's definition, as the catalog gave it.
    pub fn definition(&self) -> &TableDef {
        &self.def
    }

    /// The region scan for `projection` (table column positions; all when
    /// None), `filters` (each translatable) and `limit`.
    pub fn region_scan(
        &self,
        projection: Option<&Vec<usize>>,
        filters: &[LExpr],
        limit: Option<usize>,
    ) -> Result<RegionScanExec> {
        let all: Vec<usize> = (0..self.def.columns.len()).collect();
        let projection = projection.unwrap_or(&all);
        let schema = Arc::new(self.schema.project(projection)?);
        let mut binder = ColumnBinder::new(&self.def);
        let mut outputs = Vec::with_capacity(projection.len());
        // With no columns asked for (only row counts, as a cross join's
        // side may need), regions still send one column, so that their
        // batches carry the row count; the node then drops it (`conform`).
        let read = if projection.is_empty() {
            &vec![0]
        } else {
            projection
        };
        for &p in read {
            outputs.push(binder.bind_position(p).ok_or_else(|| {
                crate::Error::Internal(format!("column {p} of {} has no type", self.def.name))
            })?);
        }
        let mut conditions = Vec::new();
        let mut shown = Vec::new();
        // Filters with a shape's placeholders: translated with type
        // defaults now, with the run's values when it starts
        // (`late_filters.rs`).
        let mut late = Vec::new();
        for f in filters {
            if has_placeholders(f) {
                late.push((conditions.len(), f.clone()));
            }
            let c = translate_planned(f, &mut binder).ok_or_else(|| {
                crate::Error::Internal(format!("filter {f} was accepted but cannot be pushed"))
            })?;
            conditions.push(c.to_proto()?);
            shown.push(f.to_string());
        }
        let scan = binder.table_scan();
        // Project only when the filters read columns the output does not.
        let dag_projection = (binder.used().len() > outputs.len())
            .then(|| {
                Ok::<_, crate::Error>(Projection {
                    exprs: outputs
                        .iter()
                        .map(Expr::to_proto)
                        .collect::<std::result::Result<_, _>>()?,
                })
            })
            .transpose()?;
        let row_types: Vec<DataType> = outputs.iter().map(Expr::data_type).collect();
        let mut storage = vec![format!(
            "scan {}",
            schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )];
        if !shown.is_empty() {
            storage.push(format!("filter {}", shown.join(" AND ")));
        }
        if let Some(l) = limit {
            storage.push(format!("limit {l}"));
        }
        let dag = DagRequest {
            scan: Some(scan),
            selection: (!conditions.is_empty()).then_some(Selection { conditions }),
            aggregation: None,
            projection: dag_projection,
            limit: limit.unwrap_or(0) as u64,
            top_n: None,
            read_ts: 0,
            not_fill_cache: false,
            group_sieve: None,
            repeatable: false,
        };
        let mut scan = RegionScanExec::new(
            self.ctx.clone(),
            self.def.clone(),
            dag,
            row_types,
            schema,
            storage.join("; "),
        );
        scan.set_table_stats(self.stats.clone(), self.measurer.clone());
        if !late.is_empty() {
            scan.set_late_filters(LateFilters::new(late, binder));
        }
        Ok(scan)
    }

    /// What a scan of this table with `projection`, `filters` and `limit`
    /// would tell DataFusion about its output (rows, and per column
    /// distinct values), from the table's last statistics: the estimate
    /// the join order (`join_order.rs`) reads while the plan is still
    /// logical. None without statistics, or for filters the scan cannot
    /// take.
    pub fn estimate(
        &self,
        projection: Option<&Vec<usize>>,
        filters: &[LExpr],
        limit: Option<usize>,
    ) -> Option<Statistics> {
        self.stats.as_ref()?;
        let scan = self.region_scan(projection, filters, limit).ok()?;
        Some(scan.estimated_statistics())
    }
}

#[async_trait]
impl TableProvider for QuarryTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&LExpr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                let mut binder = ColumnBinder::new(&self.def);
                // A shape's placeholder: as a constant of its type would be.
                match translate_planned(f, &mut binder) {
                    Some(e) if e.data_type() == DataType::Boolean => {
                        TableProviderFilterPushDown::Exact
                    }
                    _ => TableProviderFilterPushDown::Unsupported,
                }
            })
            .collect())
    }

    fn statistics(&self) -> Option<Statistics> {
        None
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[LExpr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let scan = self
            .region_scan(projection, filters, limit)
            .map_err(external)?;
        Ok(Arc::new(scan))
    }
}
