//! What storage can evaluate: DataFusion expressions translated into the
//! coprocessor's [`Expr`].
//!
//! One translator serves both of DataFusion's expression forms: logical
//! expressions (the filters a [`TableProvider`](datafusion::catalog::TableProvider)
//! is offered) and physical ones (the group keys and aggregate arguments the
//! partial-aggregation rule moves into storage). Each names its columns
//! through a [`ColumnBinder`], which records which table columns the region
//! scan must read.
//!
//! A translation either yields an expression with the *same meaning* as
//! DataFusion's, or `None`: the expression then stays in DataFusion, above
//! the scan, correct but slower. The coprocessor's constructors apply
//! Quarry's type rules (checked decimal arithmetic, comparison types), so
//! only operators whose result does not depend on those rules are
//! translated: comparisons, AND/OR/NOT, `+ - *` (exact for decimals and
//! integers alike; overflow is an error on both sides), `%` of integers,
//! IS \[NOT\] NULL, BETWEEN, IN lists, LIKE, casts between Quarry's
//! types, CASE (DataFusion has already cast every value to one type),
//! COALESCE, NULLIF, EXTRACT/`date_part` of a DATE (BIGINT in storage, INT to
//! DataFusion: the region scan casts the few values it ships), and
//! SUBSTRING with constant positions, OCTET_LENGTH (BIGINT in storage, INT
//! to DataFusion, as EXTRACT). Division and `%` of decimals or
//! floats stay in DataFusion, whose result type and zero rules are the ones
//! the user sees.
//!
//! Chains of AND and OR arrive from DataFusion as binary trees and leave
//! as one n-ary node each (the coprocessor's `Expr::logic` flattens them).
//! What is still nested more than [`MAX_WIRE_DEPTH`] levels after that
//! (a sum of a hundred columns) stays in DataFusion too, so every request
//! decodes within protobuf's nesting limit.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue as DfScalar;
use datafusion::logical_expr::{Expr as LExpr, Operator};
use datafusion::physical_expr::expressions as pe;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::ScalarFunctionExpr;
use quarry_coprocessor::expr::{
    ArithOp, CmpOp, DatePart, Expr, LogicOp, ScalarValue, MAX_WIRE_DEPTH,
};
use quarry_coprocessor::types::arrow_type;
use quarry_proto::coprocessor::{ColumnInfo, TableScan};
use quarry_proto::meta::TableDef;

/// Binds column names to the region scan's columns, in the order first
/// used.
#[derive(Debug, Clone)]
pub struct ColumnBinder {
    table: TableDef,
    /// Indexes into `table.columns`, in scan order.
    used: Vec<usize>,
}

impl ColumnBinder {
    pub fn new(table: &TableDef) -> Self {
        ColumnBinder {
            table: table.clone(),
            used: Vec::new(),
        }
    }

    /// The scan column for table column `pos` (added if new).
    pub fn bind_position(&mut self, pos: usize) -> Option<Expr> {
        let ft = self.table.columns.get(pos)?.field_type.as_ref()?;
        let data_type = arrow_type(ft).ok()?;
        let index = match self.used.iter().position(|&u| u == pos) {
            Some(s) => s,
            None => {
                self.used.push(pos);
                self.used.len() - 1
            }
        };
        Some(Expr::Column { index, data_type })
    }

    pub fn bind_name(&mut self, name: &str) -> Option<Expr> {
        let pos = self.table.columns.iter().position(|c| c.name == name)?;
        self.bind_position(pos)
    }

    /// Scan columns so far (indexes into the table's columns).
    pub fn used(&self) -> &[usize] {
        &self.used
    }

    pub fn table(&self) -> &TableDef {
        &self.table
    }

    /// The TableScan reading the bound columns.
    pub fn table_scan(&self) -> TableScan {
        TableScan {
            table_id: self.table.id,
            columns: self
                .used
                .iter()
                .map(|&i| column_info(&self.table.columns[i]))
                .collect(),
            layout: self.table.layout,
        }
    }
}

/// How a scan reads column `c`: its id, its type, and what a row written
/// before it was added reads as (its DEFAULT).
pub fn column_info(c: &quarry_proto::meta::ColumnDef) -> ColumnInfo {
    ColumnInfo {
        column_id: c.id,
        field_type: c.field_type,
        has_default: c.has_default,
        default_value: c.default_value.clone(),
    }
}

fn cmp_op(op: Operator) -> Option<CmpOp> {
    Some(match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::Ne,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::Le,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::Ge,
        _ => return None,
    })
}

fn arith_op(op: Operator) -> Option<ArithOp> {
    Some(match op {
        Operator::Plus => ArithOp::Plus,
        Operator::Minus => ArithOp::Minus,
        Operator::Multiply => ArithOp::Multiply,
        Operator::Modulo => ArithOp::Modulo,
        _ => return None,
    })
}

/// Builds `left op right` from translated sides.
fn binary(op: Operator, left: Expr, right: Expr) -> Option<Expr> {
    if let Some(c) = cmp_op(op) {
        return Expr::compare(c, left, right).ok();
    }
    if let Some(a) = arith_op(op) {
        let ints = left.data_type() == DataType::Int64 && right.data_type() == DataType::Int64;
        if a == ArithOp::Modulo && !ints {
            return None;
        }
        return Expr::arith(a, left, right).ok();
    }
    match op {
        Operator::And => Expr::logic(LogicOp::And, left, right).ok(),
        Operator::Or => Expr::logic(LogicOp::Or, left, right).ok(),
        _ => None,
    }
}

/// A DataFusion constant as a coprocessor constant, when Quarry has the
/// type.
pub fn scalar(v: &DfScalar) -> Option<ScalarValue> {
    Some(match v {
        DfScalar::Int64(Some(x)) => ScalarValue::Int64(*x),
        DfScalar::Int32(Some(x)) => ScalarValue::Int64(*x as i64),
        DfScalar::Int16(Some(x)) => ScalarValue::Int64(*x as i64),
        DfScalar::Int8(Some(x)) => ScalarValue::Int64(*x as i64),
        DfScalar::Float64(Some(x)) => ScalarValue::Float64(*x),
        DfScalar::Decimal128(Some(x), p, s) => ScalarValue::Decimal(*x, *p, *s),
        DfScalar::Date32(Some(d)) => ScalarValue::Date(*d),
        DfScalar::Utf8(Some(s)) | DfScalar::LargeUtf8(Some(s)) | DfScalar::Utf8View(Some(s)) => {
            ScalarValue::Utf8(s.clone())
        }
        DfScalar::Boolean(Some(b)) => ScalarValue::Boolean(*b),
        other if other.is_null() => ScalarValue::Null(quarry_type(&other.data_type())?),
        _ => return None,
    })
}

/// The Quarry type DataFusion's `t` is, when there is one.
fn quarry_type(t: &DataType) -> Option<DataType> {
    match t {
        DataType::Int64
        | DataType::Float64
        | DataType::Decimal128(..)
        | DataType::Date32
        | DataType::Utf8
        | DataType::Boolean
        | DataType::Null => Some(t.clone()),
        DataType::Utf8View | DataType::LargeUtf8 => Some(DataType::Utf8),
        _ => None,
    }
}

/// A LIKE pattern storage evaluates as DataFusion does: a constant, no
/// escape character, case-sensitive.
fn like_pattern(pattern: Option<ScalarValue>, escape: Option<char>, ci: bool) -> Option<String> {
    match (pattern, escape, ci) {
        (Some(ScalarValue::Utf8(p)), None, false) => Some(p),
        _ => None,
    }
}

/// `CASE [base] WHEN w THEN t … [ELSE e] END` from translated parts; a
/// simple CASE compares `base` with each `w`.
fn case(base: Option<Expr>, whens: Vec<(Expr, Expr)>, otherwise: Option<Expr>) -> Option<Expr> {
    let branches = whens
        .into_iter()
        .map(|(w, t)| match &base {
            Some(b) => Some((Expr::compare(CmpOp::Eq, b.clone(), w).ok()?, t)),
            None => Some((w, t)),
        })
        .collect::<Option<Vec<_>>>()?;
    Expr::case(branches, otherwise).ok()
}

/// A call of one of DataFusion's functions storage also has, from its
/// name and translated arguments.
fn function(name: &str, mut args: Vec<Expr>) -> Option<Expr> {
    let int = |e: &Expr| match e.as_literal() {
        Some(ScalarValue::Int64(v)) => Some(*v),
        _ => None,
    };
    match (name, args.len()) {
        ("coalesce", _) => Expr::coalesce(args).ok(),
        ("nullif", 2) => {
            // NULLIF(a, b) is CASE WHEN a = b THEN NULL ELSE a END.
            let b = args.pop()?;
            let a = args.pop()?;
            let null = Expr::literal(ScalarValue::Null(a.data_type()));
            let same = Expr::compare(CmpOp::Eq, a.clone(), b).ok()?;
            Expr::case(vec![(same, null)], Some(a)).ok()
        }
        ("date_part" | "datepart", 2) => {
            let part = match args[0].as_literal() {
                Some(ScalarValue::Utf8(p)) => DatePart::parse(p.trim_matches(['\'', '"']))?,
                _ => return None,
            };
            Expr::date_part(part, args.pop()?).ok()
        }
        ("substr" | "substring", 2 | 3) => {
            let len = match args.get(2) {
                Some(e) => Some(int(e)?),
                None => None,
            };
            let start = int(&args[1])?;
            args.truncate(1);
            Expr::substring(args.pop()?, start, len).ok()
        }
        ("octet_length", 1) => Expr::octet_length(args.pop()?).ok(),
        _ => None,
    }
}

/// Levels left free under [`MAX_WIRE_DEPTH`] for what wraps a translated
/// expression on its way out: a join's key list or Bloom filter around a
/// probe key, and the OR of AND that widens a partitioned join's filter.
const WRAPPING_LEVELS: usize = 3;

/// Keeps a translation only if it fits on the wire with room for its
/// wrappers.
fn within_wire_depth(e: Expr) -> Option<Expr> {
    (e.depth() + WRAPPING_LEVELS <= MAX_WIRE_DEPTH).then_some(e)
}

/// Translates a logical expression over `binder`'s table.
pub fn logical(e: &LExpr, binder: &mut ColumnBinder) -> Option<Expr> {
    logical_any_depth(e, binder).and_then(within_wire_depth)
}

fn logical_any_depth(e: &LExpr, binder: &mut ColumnBinder) -> Option<Expr> {
    let logical = logical_any_depth;
    match e {
        LExpr::Column(c) => binder.bind_name(&c.name),
        LExpr::Literal(v, _) => Some(Expr::literal(scalar(v)?)),
        LExpr::Alias(a) => logical(&a.expr, binder),
        LExpr::BinaryExpr(b) => {
            let left = logical(&b.left, binder)?;
            let right = logical(&b.right, binder)?;
            binary(b.op, left, right)
        }
        LExpr::Not(x) => Expr::logical_not(logical(x, binder)?).ok(),
        LExpr::IsNull(x) => Expr::is_null(logical(x, binder)?, false).ok(),
        LExpr::IsNotNull(x) => Expr::is_null(logical(x, binder)?, true).ok(),
        LExpr::Negative(x) => Expr::negate(logical(x, binder)?).ok(),
        LExpr::Between(b) => Expr::between(
            logical(&b.expr, binder)?,
            logical(&b.low, binder)?,
            logical(&b.high, binder)?,
            b.negated,
        )
        .ok(),
        LExpr::InList(l) => {
            let list = l
                .list
                .iter()
                .map(|x| logical(x, binder))
                .collect::<Option<Vec<_>>>()?;
            Expr::in_list(logical(&l.expr, binder)?, list, l.negated).ok()
        }
        LExpr::Like(l) => {
            let pattern = match l.pattern.as_ref() {
                LExpr::Literal(v, _) => scalar(v),
                _ => None,
            };
            let pattern = like_pattern(pattern, l.escape_char, l.case_insensitive)?;
            Expr::like(logical(&l.expr, binder)?, pattern, l.negated).ok()
        }
        LExpr::Cast(c) => {
            let to = quarry_type(c.field.data_type())?;
            Expr::cast(logical(&c.expr, binder)?, to).ok()
        }
        LExpr::Case(c) => {
            let base = match &c.expr {
                Some(b) => Some(logical(b, binder)?),
                None => None,
            };
            let whens = c
                .when_then_expr
                .iter()
                .map(|(w, t)| Some((logical(w, binder)?, logical(t, binder)?)))
                .collect::<Option<Vec<_>>>()?;
            let otherwise = match &c.else_expr {
                Some(e) => Some(logical(e, binder)?),
                None => None,
            };
            case(base, whens, otherwise)
        }
        LExpr::ScalarFunction(f) => {
            let args = f
                .args
                .iter()
                .map(|a| logical(a, binder))
                .collect::<Option<Vec<_>>>()?;
            function(f.func.name(), args)
        }
        _ => None,
    }
}

/// Translates a physical expression; `column(i)` translates input column
/// `i` (the physical plan names its inputs by position).
pub fn physical(
    e: &Arc<dyn PhysicalExpr>,
    column: &mut dyn FnMut(usize) -> Option<Expr>,
) -> Option<Expr> {
    physical_any_depth(e, column).and_then(within_wire_depth)
}

fn physical_any_depth(
    e: &Arc<dyn PhysicalExpr>,
    column: &mut dyn FnMut(usize) -> Option<Expr>,
) -> Option<Expr> {
    let physical = physical_any_depth;
    let any: &dyn PhysicalExpr = e.as_ref();
    if let Some(c) = any.downcast_ref::<pe::Column>() {
        return column(c.index());
    }
    if let Some(l) = any.downcast_ref::<pe::Literal>() {
        return Some(Expr::literal(scalar(l.value())?));
    }
    if let Some(b) = any.downcast_ref::<pe::BinaryExpr>() {
        let left = physical(b.left(), column)?;
        let right = physical(b.right(), column)?;
        return binary(*b.op(), left, right);
    }
    if let Some(n) = any.downcast_ref::<pe::NotExpr>() {
        return Expr::logical_not(physical(n.arg(), column)?).ok();
    }
    if let Some(n) = any.downcast_ref::<pe::IsNullExpr>() {
        return Expr::is_null(physical(n.arg(), column)?, false).ok();
    }
    if let Some(n) = any.downcast_ref::<pe::IsNotNullExpr>() {
        return Expr::is_null(physical(n.arg(), column)?, true).ok();
    }
    if let Some(n) = any.downcast_ref::<pe::NegativeExpr>() {
        return Expr::negate(physical(n.arg(), column)?).ok();
    }
    if let Some(c) = any.downcast_ref::<pe::CastExpr>() {
        let to = quarry_type(c.cast_type())?;
        return Expr::cast(physical(c.expr(), column)?, to).ok();
    }
    if let Some(l) = any.downcast_ref::<pe::InListExpr>() {
        let list = l
            .list()
            .iter()
            .map(|x| physical(x, column))
            .collect::<Option<Vec<_>>>()?;
        return Expr::in_list(physical(l.expr(), column)?, list, l.negated()).ok();
    }
    if let Some(l) = any.downcast_ref::<pe::LikeExpr>() {
        let pattern = l
            .pattern()
            .downcast_ref::<pe::Literal>()
            .and_then(|p| scalar(p.value()));
        let pattern = like_pattern(pattern, None, l.case_insensitive())?;
        return Expr::like(physical(l.expr(), column)?, pattern, l.negated()).ok();
    }
    if let Some(c) = any.downcast_ref::<pe::CaseExpr>() {
        let base = match c.expr() {
            Some(b) => Some(physical(b, column)?),
            None => None,
        };
        let whens = c
            .when_then_expr()
            .iter()
            .map(|(w, t)| Some((physical(w, column)?, physical(t, column)?)))
            .collect::<Option<Vec<_>>>()?;
        let otherwise = match c.else_expr() {
            Some(e) => Some(physical(e, column)?),
            None => None,
        };
        return case(base, whens, otherwise);
    }
    if let Some(f) = any.downcast_ref::<ScalarFunctionExpr>() {
        let args = f
            .args()
            .iter()
            .map(|a| physical(a, column))
            .collect::<Option<Vec<_>>>()?;
        return function(f.name(), args);
    }
    None
}
