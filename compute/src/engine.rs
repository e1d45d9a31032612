//! The query engine: statements in, Arrow record batches out.
//!
//! One [`QueryEngine`] per compute process, shared by every client
//! connection. It holds no table state of its own: each statement looks its
//! table up in the meta region, and region routes are cached and corrected
//! by region errors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use quarry_coprocessor::types::{arrow_type, sql_name};
use quarry_proto::compute::Query;
use quarry_proto::coprocessor::EncodeType;
use quarry_proto::meta::{CreateTableRequest, TableDef};

use crate::cluster::Cluster;
use crate::config::ComputeConfig;
use crate::dispatch::{DispatchConfig, DispatchStats, Dispatcher};
use crate::exec::run_plan;
use crate::insert::insert;
use crate::kv_writer::KvWriter;
use crate::plan::{plan_query, QueryPlan};
use crate::region_cache::RegionCache;
use crate::sql::{self, Statement};
use crate::{plan_err, Error, Result};

/// A statement's result.
#[derive(Debug, Clone)]
pub struct QueryOutput {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    /// Region-level statistics, for queries that touched regions.
    pub stats: Option<DispatchStats>,
}

impl QueryOutput {
    fn single(schema: SchemaRef, batch: RecordBatch) -> Self {
        QueryOutput {
            schema,
            batches: vec![batch],
            stats: None,
        }
    }

    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

/// A statement ready to run: queries are planned (so their schema is known)
/// but not run; everything else has already run.
pub enum Prepared {
    Query(Box<QueryPlan>),
    Done(QueryOutput),
}

pub struct QueryEngine {
    pub(crate) cluster: Arc<Cluster>,
    dispatcher: Dispatcher,
    writer: KvWriter,
    timeout: Duration,
}

fn text_output(column: &str, values: Vec<String>) -> Result<QueryOutput> {
    let schema = Arc::new(Schema::new(vec![Field::new(column, DataType::Utf8, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(StringArray::from(values)) as ArrayRef],
    )?;
    Ok(QueryOutput::single(schema, batch))
}

impl QueryEngine {
    pub fn new(cfg: &ComputeConfig) -> Result<Self> {
        cfg.validate()?;
        let cluster = Arc::new(Cluster::new(cfg.stores.clone(), Duration::from_secs(10)));
        let cache = Arc::new(RegionCache::new(cluster.clone()));
        let dispatcher = Dispatcher::new(
            cache.clone(),
            cluster.clone(),
            DispatchConfig {
                concurrency: cfg.max_inflight_regions,
                max_response_bytes: cfg.max_response_bytes,
                encode: if cfg.encode == "rows" {
                    EncodeType::Rows
                } else {
                    EncodeType::Arrow
                },
                ..Default::default()
            },
        );
        Ok(QueryEngine {
            writer: KvWriter::new(cluster.clone(), cache),
            cluster,
            dispatcher,
            timeout: Duration::from_millis(cfg.query_timeout_ms),
        })
    }

    pub fn writer(&self) -> &KvWriter {
        &self.writer
    }

    /// The table `name`, or an error naming the tables that exist.
    pub async fn table(&self, name: &str) -> Result<TableDef> {
        if let Some(t) = self.cluster.get_table(name).await? {
            return Ok(t);
        }
        let mut names: Vec<String> = self
            .cluster
            .list_tables()
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect();
        names.sort();
        Err(if names.is_empty() {
            plan_err!("unknown table '{name}': there are no tables yet")
        } else {
            plan_err!("unknown table '{name}'; tables are: {}", names.join(", "))
        })
    }

    pub async fn plan(&self, q: &Query) -> Result<QueryPlan> {
        let table = self.table(&q.table).await?;
        plan_query(q, &table)
    }

    /// Runs a planned query.
    pub async fn run(&self, plan: &QueryPlan) -> Result<QueryOutput> {
        let deadline = Instant::now() + self.timeout;
        // Region requests carry the deadline and fail first, naming the
        // store; this outer bound only guards against a bug.
        let guard = self.timeout + Duration::from_secs(2);
        let (batches, stats) =
            match tokio::time::timeout(guard, run_plan(plan, &self.dispatcher, deadline)).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(Error::Deadline(format!(
                        "query exceeded its deadline of {:?}",
                        self.timeout
                    )))
                }
            };
        Ok(QueryOutput {
            schema: plan.schema.clone(),
            batches,
            stats: Some(stats),
        })
    }

    /// Runs a SELECT planned against `table` (as GetFlightInfo saw it).
    pub async fn sql_on(&self, text: &str, table: &TableDef) -> Result<QueryOutput> {
        match sql::parse(text)? {
            Statement::Query(q) if q.table == table.name => self.query_on(&q, table).await,
            _ => self.sql(text).await,
        }
    }

    /// Runs a query against `table` without looking it up.
    pub async fn query_on(&self, q: &Query, table: &TableDef) -> Result<QueryOutput> {
        let plan = plan_query(q, table)?;
        self.run(&plan).await
    }

    pub async fn query(&self, q: &Query) -> Result<QueryOutput> {
        let plan = self.plan(q).await?;
        self.run(&plan).await
    }

    /// Parses and runs one SQL statement.
    pub async fn sql(&self, text: &str) -> Result<QueryOutput> {
        match self.prepare_sql(text).await? {
            Prepared::Query(plan) => self.run(&plan).await,
            Prepared::Done(out) => Ok(out),
        }
    }

    pub async fn prepare_sql(&self, text: &str) -> Result<Prepared> {
        let stmt = sql::parse(text)?;
        Ok(match stmt {
            Statement::Query(q) => Prepared::Query(Box::new(self.plan(&q).await?)),
            Statement::Explain(q) => {
                let plan = self.plan(&q).await?;
                Prepared::Done(text_output("plan", plan.explain())?)
            }
            Statement::ExplainAnalyze(q) => {
                let plan = self.plan(&q).await?;
                let started = std::time::Instant::now();
                let out = self.run(&plan).await?;
                let elapsed = started.elapsed();
                let mut lines = plan.explain();
                let rows: usize = out.batches.iter().map(|b| b.num_rows()).sum();
                lines.push(format!(
                    "Execution: {rows} rows in {:.1} ms",
                    elapsed.as_secs_f64() * 1e3
                ));
                if let Some(st) = &out.stats {
                    let s = &st.summary;
                    lines.push(format!(
                        "  region requests: {}, retries: {}, response bytes: {}",
                        st.requests, st.retries, st.response_bytes
                    ));
                    lines.push(format!(
                        "  storage: {} keys scanned ({} bytes), {} rows out",
                        s.scanned_keys, s.scanned_bytes, s.output_rows
                    ));
                    lines.push(format!(
                        "  packs: {} scanned, {} skipped by zone maps, {} on the generic path",
                        s.blocks_scanned, s.blocks_skipped, s.blocks_fallback
                    ));
                    lines.push(format!(
                        "  storage time: {:.1} ms processing, {:.1} ms queued (summed over regions)",
                        s.process_ns as f64 / 1e6,
                        s.wait_ns as f64 / 1e6
                    ));
                }
                Prepared::Done(text_output("plan", lines)?)
            }
            Statement::CreateTable(ct) => Prepared::Done(self.create_table(ct).await?),
            Statement::DropTable { name, if_exists } => {
                let dropped = self.cluster.drop_table(&name, if_exists).await?;
                Prepared::Done(text_output(
                    "result",
                    vec![if dropped {
                        "DROP TABLE"
                    } else {
                        "DROP TABLE (did not exist)"
                    }
                    .into()],
                )?)
            }
            Statement::Insert(ins) => {
                let table = self.table(&ins.table).await?;
                let n = insert(self, &table, &ins).await?;
                let schema = Arc::new(Schema::new(vec![Field::new(
                    "count",
                    DataType::Int64,
                    false,
                )]));
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(Int64Array::from(vec![n as i64])) as ArrayRef],
                )?;
                Prepared::Done(QueryOutput::single(schema, batch))
            }
            Statement::ShowTables => {
                let mut names: Vec<String> = self
                    .cluster
                    .list_tables()
                    .await?
                    .into_iter()
                    .map(|t| t.name)
                    .collect();
                names.sort();
                Prepared::Done(text_output("name", names)?)
            }
            Statement::Describe(name) => Prepared::Done(self.describe(&name).await?),
        })
    }

    async fn create_table(&self, ct: sql::CreateTable) -> Result<QueryOutput> {
        let table = ct.table_def();
        let resp = self
            .cluster
            .create_table(CreateTableRequest {
                table: Some(table),
                split_handles: ct.split_handles,
                if_not_exists: ct.if_not_exists,
            })
            .await?;
        text_output(
            "result",
            vec![if resp.already_existed {
                format!("CREATE TABLE (table {} already existed)", ct.name)
            } else {
                format!("CREATE TABLE ({} regions)", resp.regions.len())
            }],
        )
    }

    async fn describe(&self, name: &str) -> Result<QueryOutput> {
        let t = self.table(name).await?;
        let schema = Arc::new(Schema::new(vec![
            Field::new("column", DataType::Utf8, false),
            Field::new("type", DataType::Utf8, false),
            Field::new("null", DataType::Utf8, false),
            Field::new("key", DataType::Utf8, false),
        ]));
        let mut cols: [Vec<String>; 4] = Default::default();
        for c in &t.columns {
            let ft = c.field_type.unwrap_or_default();
            cols[0].push(c.name.clone());
            let mut ty = sql_name(&arrow_type(&ft)?);
            if ft.max_len > 0 {
                ty = format!("{ty}({})", ft.max_len);
            }
            cols[1].push(ty);
            cols[2].push(if ft.nullable { "YES" } else { "NO" }.into());
            cols[3].push(
                if c.id == t.handle_column_id {
                    "PRI"
                } else {
                    ""
                }
                .into(),
            );
        }
        let arrays: Vec<ArrayRef> = cols
            .into_iter()
            .map(|v| Arc::new(StringArray::from(v)) as ArrayRef)
            .collect();
        Ok(QueryOutput::single(
            schema.clone(),
            RecordBatch::try_new(schema, arrays)?,
        ))
    }
}
