//! Quarry's plan nodes on the wire between compute processes: what a
//! worker needs to run a stage that holds them (`datafusion-proto`
//! carries DataFusion's own nodes and expressions).
//!
//! * A [`RegionScanExec`] travels as its table definition and coprocessor
//!   DAG (Quarry's own protobuf messages), its output and row types
//!   (Arrow schemas), and its task's share of the table's keys. The worker rebuilds it
//!   over its own dispatcher and region cache. What a scan is handed at
//!   run time by its neighbours in one process (join filters, a shared
//!   run, the table's statistics for index choice) does not travel: a
//!   distributed plan has none of the first two (`mpp/mod.rs`), and
//!   without statistics a worker scans rather than looks up an index,
//!   which is slower, never wrong.
//! * A scan's keys from joins in other stages (`cross_stage.rs`) travel
//!   as their slots and probe keys (coprocessor expressions), and a
//!   [`CrossStageKeysExec`] as its slot and key column: the two meet on
//!   the worker's board by the query's id.
//! * A [`BuildKeysExec`] passes its input through unchanged; it travels
//!   as nothing and is decoded as its input (the keys it would copy have
//!   no scan in this process to go to).
//! * A [`StartEarlyExec`] travels as its tag and whether it is eager, and
//!   is decoded as itself: a worker starts a nested-loop join's right
//!   side, or a hash join's probe side (`early_probes.rs`), early as the
//!   coordinator planned, and the stage keeps the coordinator's nodes one
//!   for one (`folded.rs` says why EXPLAIN ANALYZE needs that).

use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use datafusion::common::{internal_err, DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use datafusion_proto::protobuf;
use prost::Message;
use quarry_coprocessor::expr::Expr;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::coprocessor::DagRequest;
use quarry_proto::meta::TableDef;

use super::colocate::LocalRepartitionExec;
use super::cross_stage::CrossStageKeysExec;
use crate::df::join_keys::BuildKeysExec;
use crate::df::region_scan::{RegionScanExec, ScanContext};
use crate::df::start_early::StartEarlyExec;

/// The codec of Quarry's nodes (registered on the coordinator and on
/// every worker).
#[derive(Debug)]
pub struct QuarryCodec {
    scan: ScanContext,
}

impl QuarryCodec {
    pub fn new(scan: ScanContext) -> Self {
        QuarryCodec { scan }
    }
}

/// The first byte of an encoded node: which node it is.
const REGION_SCAN: u8 = 1;
const BUILD_KEYS: u8 = 2;
const CROSS_STAGE_KEYS: u8 = 3;
const START_EARLY: u8 = 4;
const LOCAL_REPARTITION: u8 = 5;

/// A co-located hash repartition (`colocate.rs`): its partition count and
/// its hash keys, which are columns.
#[derive(Clone, PartialEq, prost::Message)]
struct LocalRepartitionProto {
    #[prost(uint32, tag = "1")]
    partitions: u32,
    #[prost(string, repeated, tag = "2")]
    names: Vec<String>,
    #[prost(uint32, repeated, tag = "3")]
    indexes: Vec<u32>,
    #[prost(bool, tag = "4")]
    preserve_order: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RegionScanProto {
    #[prost(bytes = "vec", tag = "1")]
    table: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    dag: Vec<u8>,
    #[prost(message, optional, tag = "3")]
    schema: Option<protobuf::Schema>,
    /// The DAG's output types, as the fields of a schema.
    #[prost(message, optional, tag = "4")]
    row_types: Option<protobuf::Schema>,
    #[prost(string, tag = "5")]
    storage: String,
    /// A task's share of the table's keys (`has_share`: none means all).
    #[prost(message, repeated, tag = "6")]
    share: Vec<KeyRangeProto>,
    #[prost(bool, tag = "7")]
    has_share: bool,
    /// Keys from joins in other stages: a slot and a probe key each.
    #[prost(message, repeated, tag = "8")]
    remote_keys: Vec<RemoteKeyProto>,
    /// A co-located task's range of its key, as EXPLAIN shows it (empty:
    /// not co-located; `colocate.rs`). The range itself is in the DAG's
    /// selection.
    #[prost(string, tag = "9")]
    value_range: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RemoteKeyProto {
    #[prost(uint32, tag = "1")]
    slot: u32,
    /// The probe key over the scan's columns, a coprocessor expression.
    #[prost(bytes = "vec", tag = "2")]
    probe: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct CrossStageKeysProto {
    #[prost(uint32, tag = "1")]
    slot: u32,
    #[prost(string, tag = "2")]
    column: String,
    #[prost(uint32, tag = "3")]
    index: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct KeyRangeProto {
    #[prost(bytes = "vec", tag = "1")]
    start: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    end: Vec<u8>,
}

fn bad(what: &str, e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Internal(format!("decoding a distributed plan's {what}: {e}"))
}

impl PhysicalExtensionCodec for QuarryCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        match buf.split_first() {
            Some((&REGION_SCAN, body)) => {
                let p = RegionScanProto::decode(body).map_err(|e| bad("region scan", e))?;
                let table = TableDef::decode(p.table.as_slice()).map_err(|e| bad("table", e))?;
                let dag = DagRequest::decode(p.dag.as_slice()).map_err(|e| bad("DAG", e))?;
                let schema: Schema = p
                    .schema
                    .as_ref()
                    .ok_or_else(|| bad("region scan", "no schema"))?
                    .try_into()?;
                let rows: Schema = p
                    .row_types
                    .as_ref()
                    .ok_or_else(|| bad("region scan", "no row types"))?
                    .try_into()?;
                let row_types = rows
                    .fields()
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect();
                let share: Vec<KeyRange> = p
                    .share
                    .into_iter()
                    .map(|r| KeyRange::new(r.start, r.end))
                    .collect();
                let scan = RegionScanExec::new(
                    self.scan.clone(),
                    table,
                    dag,
                    row_types,
                    Arc::new(schema),
                    p.storage,
                );
                let mut scan = match p.has_share {
                    true => scan.with_share(share),
                    false => scan,
                };
                if !p.value_range.is_empty() {
                    scan = scan.with_value_range_shown(p.value_range);
                }
                if !p.remote_keys.is_empty() {
                    let read = scan.scan_types().map_err(|e| bad("region scan", e))?;
                    for k in &p.remote_keys {
                        let e = quarry_proto::coprocessor::Expr::decode(k.probe.as_slice())
                            .map_err(|e| bad("probe key", e))?;
                        let probe = Expr::from_proto(&e, &read).map_err(|e| bad("probe key", e))?;
                        scan = scan.with_remote_keys(k.slot, probe);
                    }
                }
                Ok(Arc::new(scan))
            }
            Some((&CROSS_STAGE_KEYS, body)) => {
                let p = CrossStageKeysProto::decode(body).map_err(|e| bad("stage keys", e))?;
                match inputs {
                    [input] => Ok(Arc::new(CrossStageKeysExec::new(
                        input.clone(),
                        Column::new(&p.column, p.index as usize),
                        p.slot,
                    ))),
                    _ => internal_err!("CrossStageKeysExec with {} inputs", inputs.len()),
                }
            }
            // A join's key tap only matters in the process that planned
            // it: a worker runs its input (and taps the joins of the stage
            // it runs itself, `mpp::worker`).
            Some((&BUILD_KEYS, _)) => match inputs {
                [input] => Ok(input.clone()),
                _ => internal_err!("BuildKeysExec with {} inputs", inputs.len()),
            },
            // A nested-loop join's right side starts early on a worker
            // too; and a stage must keep every node the coordinator
            // planned, or EXPLAIN ANALYZE cannot match a task's metrics
            // to the plan's nodes (it failed on Q11 and Q22).
            Some((&START_EARLY, body)) => match inputs {
                // (Its one byte: whether it starts its input early.)
                [input] => Ok(Arc::new(match body.first() {
                    Some(0) => StartEarlyExec::lazy(input.clone()),
                    _ => StartEarlyExec::new(input.clone()),
                })),
                _ => internal_err!("StartEarlyExec with {} inputs", inputs.len()),
            },
            Some((&LOCAL_REPARTITION, body)) => {
                let p = LocalRepartitionProto::decode(body).map_err(|e| bad("repartition", e))?;
                let [input] = inputs else {
                    return internal_err!("LocalRepartitionExec with {} inputs", inputs.len());
                };
                if p.names.len() != p.indexes.len() {
                    return Err(bad("repartition", "key names and indexes differ in number"));
                }
                let keys = p
                    .names
                    .iter()
                    .zip(&p.indexes)
                    .map(|(n, i)| Arc::new(Column::new(n, *i as usize)) as Arc<dyn PhysicalExpr>)
                    .collect();
                let partitioning = Partitioning::Hash(keys, p.partitions as usize);
                let mut r = RepartitionExec::try_new(input.clone(), partitioning)?;
                if p.preserve_order {
                    r = r.with_preserve_order();
                }
                match LocalRepartitionExec::new(Arc::new(r)) {
                    Some(local) => Ok(Arc::new(local)),
                    None => internal_err!("a local repartition that is not by hash"),
                }
            }
            _ => internal_err!("a plan node this compute process does not know"),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        if node.as_ref().downcast_ref::<BuildKeysExec>().is_some() {
            buf.push(BUILD_KEYS);
            return Ok(());
        }
        if let Some(local) = node.as_ref().downcast_ref::<LocalRepartitionExec>() {
            let r = local.repartition();
            let Partitioning::Hash(keys, partitions) = r.partitioning() else {
                return internal_err!("a local repartition that is not by hash");
            };
            let mut p = LocalRepartitionProto {
                partitions: *partitions as u32,
                preserve_order: r.preserve_order(),
                ..Default::default()
            };
            for k in keys {
                let Some(c) = k.downcast_ref::<Column>() else {
                    return internal_err!("a local repartition by {k}, not a column");
                };
                p.names.push(c.name().to_string());
                p.indexes.push(c.index() as u32);
            }
            buf.push(LOCAL_REPARTITION);
            return p
                .encode(buf)
                .map_err(|e| DataFusionError::Internal(format!("encoding a repartition: {e}")));
        }
        if let Some(early) = node.as_ref().downcast_ref::<StartEarlyExec>() {
            buf.extend([START_EARLY, u8::from(early.is_eager())]);
            return Ok(());
        }
        if let Some(keys) = node.as_ref().downcast_ref::<CrossStageKeysExec>() {
            let p = CrossStageKeysProto {
                slot: keys.slot(),
                column: keys.key().name().to_string(),
                index: keys.key().index() as u32,
            };
            buf.push(CROSS_STAGE_KEYS);
            return p
                .encode(buf)
                .map_err(|e| DataFusionError::Internal(format!("encoding stage keys: {e}")));
        }
        let Some(scan) = node.as_ref().downcast_ref::<RegionScanExec>() else {
            return internal_err!("{} cannot run on another compute process", node.name());
        };
        let rows = Schema::new(
            scan.row_types()
                .iter()
                .enumerate()
                .map(|(i, t)| Field::new(format!("c{i}"), t.clone(), true))
                .collect::<Vec<_>>(),
        );
        let p = RegionScanProto {
            table: scan.table().encode_to_vec(),
            dag: scan.dag().encode_to_vec(),
            schema: Some(node.schema().as_ref().try_into()?),
            row_types: Some((&rows).try_into()?),
            storage: scan.storage().to_string(),
            share: scan
                .share()
                .unwrap_or_default()
                .iter()
                .map(|r| KeyRangeProto {
                    start: r.start.clone(),
                    end: r.end.clone(),
                })
                .collect(),
            has_share: scan.share().is_some(),
            value_range: scan.value_range().unwrap_or_default().to_string(),
            remote_keys: scan
                .remote_keys()
                .iter()
                .map(|(slot, probe)| {
                    Ok(RemoteKeyProto {
                        slot: *slot,
                        probe: probe
                            .to_proto()
                            .map_err(|e| {
                                DataFusionError::Internal(format!("encoding a probe key: {e}"))
                            })?
                            .encode_to_vec(),
                    })
                })
                .collect::<DfResult<Vec<_>>>()?,
        };
        buf.push(REGION_SCAN);
        p.encode(buf)
            .map_err(|e| DataFusionError::Internal(format!("encoding a region scan: {e}")))
    }
}
