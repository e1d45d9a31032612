//! Choosing an index for a region scan.
//!
//! A scan's selection, as pushed down (`df::pushdown`), is a list of
//! conjuncts over the scan's columns. The conjuncts that bound a PUBLIC
//! index's leading column by constants (`c = v`, `c IN (…)`, `c < v`,
//! `c >= v`, …) become key ranges of that index's entries
//! ([`quarry_coprocessor::codec::index::entry_range`]): one range per
//! value for `=`/`IN`, one for the intersection of the range conjuncts.
//! The index is taken when the table's statistics estimate that few rows
//! match (at most [`MAX_FRACTION`] of the table and [`MAX_ROWS`] rows), or
//! with no statistics for `=`/`IN` (a lookup of a few values is what an
//! index is for; TiDB's rule for point lookups without statistics). Then
//! the scan reads the entries, and only the rows they name
//! (`df::region_scan`); the selection still runs over those rows.
//!
//! CAVEATS: row-layout tables only (a column table's rows sit in packs
//! keyed by their first handle, which a lookup by handle cannot find
//! without a seek backwards the stores do not offer yet); the leading
//! column only (a second column's conjunct filters the rows, not the
//! entries); range estimates assume values spread evenly between the
//! column's min and max.

use arrow::datatypes::DataType;
use quarry_coprocessor::codec::index::{encode_value, entry_range, NON_NULL};
use quarry_coprocessor::codec::row::Datum;
use quarry_coprocessor::expr::{CmpOp, Expr, ScalarValue};
use quarry_coprocessor::storage::KeyRange;
use quarry_coprocessor::types::arrow_type;
use quarry_proto::coprocessor::DagRequest;
use quarry_proto::meta::{IndexDef, IndexState, Layout, TableDef};

use crate::table_stats::TableStatistics;

/// An index lookup is chosen when the estimate is at most this share of
/// the table's rows…
pub const MAX_FRACTION: f64 = 0.05;
/// …and at most this many rows (each is a point read).
pub const MAX_ROWS: f64 = 100_000.0;
/// The most values of an `IN` list read one by one.
const MAX_POINTS: usize = 1024;

/// An index lookup a scan will make.
#[derive(Debug, Clone)]
pub struct Access {
    pub index: IndexDef,
    /// Entry key ranges, in key order, disjoint.
    pub ranges: Vec<KeyRange>,
    /// The leading column's conditions, for EXPLAIN.
    pub shown: String,
}

/// One side of a range: the encoded value and whether it is included.
type Bound = Option<(Vec<u8>, bool)>;

/// A literal as a stored value of a column of type `dt`, if it is one
/// exactly.
fn datum_of<'a>(v: &'a ScalarValue, dt: &DataType) -> Option<Datum<'a>> {
    Some(match (v, dt) {
        (ScalarValue::Int64(x), DataType::Int64) => Datum::Int(*x),
        (ScalarValue::Float64(x), DataType::Float64) => Datum::Float(*x),
        (ScalarValue::Date(x), DataType::Date32) => Datum::Date(*x),
        (ScalarValue::Utf8(s), DataType::Utf8) => Datum::Bytes(s.as_bytes()),
        (ScalarValue::Boolean(b), DataType::Boolean) => Datum::Bool(*b),
        (ScalarValue::Decimal(x, _, s), DataType::Decimal128(_, cs)) if s == cs => {
            Datum::Decimal(*x)
        }
        _ => return None,
    })
}

fn encoded(d: &Datum) -> Vec<u8> {
    let mut b = Vec::new();
    encode_value(&mut b, d);
    b
}

/// What the conjuncts say about one column.
#[derive(Default)]
struct Constraint {
    /// Values from `=` / `IN` (None: no such conjunct).
    points: Option<Vec<Vec<u8>>>,
    low: Bound,
    high: Bound,
    shown: Vec<String>,
    /// Literal bounds, for the estimate: (low, high).
    lits: (Option<ScalarValue>, Option<ScalarValue>),
}

impl Constraint {
    fn tighten_low(&mut self, v: Vec<u8>, inclusive: bool, lit: &ScalarValue) {
        if self.low.as_ref().is_none_or(|(b, _)| v > *b) {
            self.low = Some((v, inclusive));
            self.lits.0 = Some(lit.clone());
        }
    }

    fn tighten_high(&mut self, v: Vec<u8>, inclusive: bool, lit: &ScalarValue) {
        if self.high.as_ref().is_none_or(|(b, _)| v < *b) {
            self.high = Some((v, inclusive));
            self.lits.1 = Some(lit.clone());
        }
    }
}

fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        o => o,
    }
}

/// The constraint the conjuncts put on scan column `col` (of type `dt`).
fn constraint(conjuncts: &[Expr], col: usize, dt: &DataType, name: &str) -> Constraint {
    let mut c = Constraint::default();
    let is_col = |e: &Expr| matches!(e, Expr::Column { index, .. } if *index == col);
    for e in conjuncts {
        match e {
            Expr::Compare { op, left, right } => {
                let (op, lit) = match (left.as_ref(), right.as_ref()) {
                    (k, Expr::Literal(v)) if is_col(k) => (*op, v),
                    (Expr::Literal(v), k) if is_col(k) => (flip(*op), v),
                    _ => continue,
                };
                let Some(d) = datum_of(lit, dt) else { continue };
                let v = encoded(&d);
                match op {
                    CmpOp::Eq => {
                        let mut pts = c.points.take().unwrap_or_else(|| vec![v.clone()]);
                        pts.retain(|p| *p == v);
                        c.points = Some(pts);
                    }
                    CmpOp::Lt => c.tighten_high(v, false, lit),
                    CmpOp::Le => c.tighten_high(v, true, lit),
                    CmpOp::Gt => c.tighten_low(v, false, lit),
                    CmpOp::Ge => c.tighten_low(v, true, lit),
                    CmpOp::Ne => continue,
                }
                c.shown.push(format!("{name} {} {}", op_str(op), show(lit)));
            }
            Expr::InList {
                expr,
                list,
                negated: false,
                ..
            } if is_col(expr) && list.len() <= MAX_POINTS => {
                let mut vals = Vec::new();
                for v in list.iter() {
                    match v {
                        ScalarValue::Null(_) => {}
                        v => match datum_of(v, dt) {
                            Some(d) => vals.push(encoded(&d)),
                            None => {
                                vals.clear();
                                break;
                            }
                        },
                    }
                }
                if vals.is_empty() && !list.iter().all(|v| v.is_null()) {
                    continue;
                }
                vals.sort();
                vals.dedup();
                let pts = match c.points.take() {
                    Some(p) => p.into_iter().filter(|x| vals.contains(x)).collect(),
                    None => vals,
                };
                c.points = Some(pts);
                c.shown.push(format!("{name} IN ({} values)", list.len()));
            }
            _ => {}
        }
    }
    c
}

fn op_str(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "=",
        CmpOp::Ne => "<>",
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
    }
}

fn show(v: &ScalarValue) -> String {
    match v {
        ScalarValue::Utf8(s) => format!("'{s}'"),
        ScalarValue::Decimal(x, _, s) => {
            <arrow::array::types::Decimal128Type as arrow::datatypes::DecimalType>::format_decimal(
                *x, 38, *s,
            )
        }
        other => format!("{other:?}")
            .trim_start_matches(|c: char| c.is_alphanumeric())
            .trim_matches(|c| c == '(' || c == ')')
            .to_string(),
    }
}

fn as_f64(v: &ScalarValue) -> Option<f64> {
    Some(match v {
        ScalarValue::Int64(x) => *x as f64,
        ScalarValue::Float64(x) => *x,
        ScalarValue::Date(x) => *x as f64,
        ScalarValue::Decimal(x, _, s) => *x as f64 / 10f64.powi(*s as i32),
        _ => return None,
    })
}

/// A statistics bound (DataFusion's scalar) as a number.
fn stat_f64(v: &datafusion::scalar::ScalarValue) -> Option<f64> {
    use datafusion::scalar::ScalarValue as S;
    Some(match v {
        S::Int64(Some(x)) => *x as f64,
        S::Int32(Some(x)) => *x as f64,
        S::Float64(Some(x)) => *x,
        S::Date32(Some(x)) => *x as f64,
        S::Decimal128(Some(x), _, s) => *x as f64 / 10f64.powi(*s as i32),
        _ => return None,
    })
}

/// The rows the constraint on column `column_id` is estimated to keep,
/// or None when nothing is known.
fn estimate(c: &Constraint, stats: Option<&TableStatistics>, column_id: i64) -> Option<f64> {
    let stats = stats?;
    let col = stats.columns.get(&column_id)?;
    let rows = stats.rows as f64;
    let per_value = rows / (col.distinct.max(1) as f64);
    if let Some(p) = &c.points {
        return Some(per_value * p.len() as f64);
    }
    let (min, max) = (stat_f64(&col.min)?, stat_f64(&col.max)?);
    let lo = c.lits.0.as_ref().and_then(as_f64).unwrap_or(min).max(min);
    let hi = c.lits.1.as_ref().and_then(as_f64).unwrap_or(max).min(max);
    if hi < lo {
        return Some(0.0);
    }
    let width = (max - min).max(1.0);
    Some(((hi - lo) / width * rows).max(per_value))
}

/// The index lookup for a scan of `table` running `dag`, if one is worth
/// it, at a snapshot `read_ts` (0: not known yet; the lookup then checks
/// the index's `public_ts` itself).
pub fn choose(
    table: &TableDef,
    dag: &DagRequest,
    stats: Option<&TableStatistics>,
) -> Option<Access> {
    if table.layout != Layout::Row as i32 || table.indexes.is_empty() {
        return None;
    }
    let scan = dag.scan.as_ref()?;
    let types: Vec<DataType> = scan
        .columns
        .iter()
        .map(|c| c.field_type.as_ref().and_then(|f| arrow_type(f).ok()))
        .collect::<Option<_>>()?;
    let conjuncts: Vec<Expr> = dag
        .selection
        .as_ref()?
        .conditions
        .iter()
        .filter_map(|c| Expr::from_proto(c, &types).ok())
        .collect();
    let mut best: Option<(f64, Access)> = None;
    for ix in &table.indexes {
        if ix.state() != IndexState::Public {
            continue;
        }
        let lead = *ix.column_ids.first()?;
        let Some(col) = scan.columns.iter().position(|c| c.column_id == lead) else {
            continue;
        };
        let name = table
            .columns
            .iter()
            .find(|c| c.id == lead)
            .map_or("?", |c| c.name.as_str());
        let c = constraint(&conjuncts, col, &types[col], name);
        if c.points.is_none() && c.low.is_none() && c.high.is_none() {
            continue;
        }
        let est = estimate(&c, stats, lead);
        let rows = stats.map(|s| s.rows as f64);
        let worth = match (est, rows) {
            (Some(e), Some(r)) => e <= MAX_ROWS && e <= (r * MAX_FRACTION).max(1.0),
            // No statistics: points only.
            _ => c.points.is_some(),
        };
        if !worth {
            continue;
        }
        let ranges: Vec<KeyRange> = match &c.points {
            Some(points) => points
                .iter()
                .map(|p| {
                    let (s, e) = entry_range(table.id, ix.id, Some((p, true)), Some((p, true)));
                    KeyRange::new(s, e)
                })
                .collect(),
            None => {
                let low = c
                    .low
                    .as_ref()
                    .map(|(v, inc)| (v.as_slice(), *inc))
                    .unwrap_or((NON_NULL, true));
                let high = c.high.as_ref().map(|(v, inc)| (v.as_slice(), *inc));
                let (s, e) = entry_range(table.id, ix.id, Some(low), high);
                if s >= e {
                    Vec::new()
                } else {
                    vec![KeyRange::new(s, e)]
                }
            }
        };
        let score = est.unwrap_or(0.0);
        if best.as_ref().is_none_or(|(b, _)| score < *b) {
            best = Some((
                score,
                Access {
                    index: ix.clone(),
                    ranges,
                    shown: c.shown.join(" AND "),
                },
            ));
        }
    }
    best.map(|(_, a)| a)
}
