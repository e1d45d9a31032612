//! Planning: a [`Query`] bound against a table becomes a [`QueryPlan`]:
//! the DAG every region runs, and what compute does with the results.
//!
//! ```text
//!  SELECT l_returnflag, sum(l_quantity * 2) AS q FROM lineitem
//!  WHERE l_shipdate <= date '1998-09-02' GROUP BY l_returnflag ORDER BY q
//!
//!  storage, per region:  TableScan[l_returnflag, l_quantity, l_shipdate]
//!                        → Selection[l_shipdate <= 1998-09-02]
//!                        → Aggregation(Partial)[group l_returnflag; sum(l_quantity * 2)]
//!  compute:              Aggregation(Final) → HAVING → outputs → ORDER BY → OFFSET/LIMIT
//! ```
//!
//! Without aggregates, storage runs TableScan → Selection → Projection (of
//! the select list and sort keys) → Limit (when there is no ORDER BY), and
//! compute sorts and cuts.
//!
//! Names are resolved case-insensitively against the table; an unknown
//! column names the valid ones. Expressions are built with the
//! coprocessor's constructors, so every type rule and constant fold is the
//! one storage applies when it rebuilds them.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use quarry_coprocessor::aggregate::AggregateFunction;
use quarry_coprocessor::expr::{self, ArithOp, CmpOp, Expr, LogicOp, ScalarValue};
use quarry_coprocessor::types::{arrow_type, sql_name};
use quarry_proto::compute::{logical_expr::Kind, LogicalExpr, Query};
use quarry_proto::coprocessor::{
    AggFunc, AggKind, Aggregation, ColumnInfo, DagRequest, FuncKind, Projection, Selection,
    TableScan,
};
use quarry_proto::meta::TableDef;

use crate::sql::display;
use crate::{plan_err, Result};

#[derive(Debug, Clone)]
pub struct SortKey {
    pub expr: Expr,
    pub descending: bool,
    pub nulls_first: bool,
}

/// Compute's half of an aggregation.
#[derive(Debug, Clone)]
pub struct FinalAggregate {
    pub key_types: Vec<DataType>,
    pub funcs: Vec<AggregateFunction>,
    /// Over the final aggregate's output (keys, then results).
    pub having: Option<Expr>,
}

#[derive(Debug, Clone)]
pub struct QueryPlan {
    pub table: TableDef,
    /// What each region runs.
    pub dag: DagRequest,
    pub aggregate: Option<FinalAggregate>,
    /// The output columns, over the final aggregate's output (aggregations)
    /// or over the regions' output (scans).
    pub outputs: Vec<Expr>,
    /// Sort keys over the same input as `outputs`.
    pub order_by: Vec<SortKey>,
    pub limit: Option<u64>,
    pub offset: u64,
    pub schema: SchemaRef,
    /// Names for EXPLAIN: scan columns, and the input of `outputs`.
    scan_names: Vec<String>,
    input_names: Vec<String>,
}

/// Binds names to the table's columns and records which ones the scan
/// must read.
struct Binder<'a> {
    table: &'a TableDef,
    /// Indexes into `table.columns` of the scanned columns, in scan order.
    used: Vec<usize>,
}

impl<'a> Binder<'a> {
    fn column(&mut self, name: &str) -> Result<Expr> {
        let pos = self
            .table
            .columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| {
                let valid: Vec<&str> = self.table.columns.iter().map(|c| c.name.as_str()).collect();
                plan_err!(
                    "unknown column '{name}' in table {}; valid columns are: {}",
                    self.table.name,
                    valid.join(", ")
                )
            })?;
        let slot = match self.used.iter().position(|&u| u == pos) {
            Some(s) => s,
            None => {
                self.used.push(pos);
                self.used.len() - 1
            }
        };
        let ft = self.table.columns[pos]
            .field_type
            .as_ref()
            .ok_or_else(|| plan_err!("column {name} has no type"))?;
        Ok(Expr::Column {
            index: slot,
            data_type: arrow_type(ft)?,
        })
    }

    /// Binds an expression over the scanned columns (no aggregates).
    fn scan_expr(&mut self, e: &LogicalExpr) -> Result<Expr> {
        bind(e, &mut |x| match x.kind.as_ref() {
            Some(Kind::Column(name)) => self.column(name).map(Some),
            Some(Kind::Aggregate(_)) => Err(plan_err!(
                "aggregate functions are not allowed here: {}",
                display::logical(x)
            )),
            _ => Ok(None),
        })
    }
}

/// Builds an [`Expr`] from a logical expression; `leaf` decides column
/// references and aggregates (Some), everything else is structural.
fn bind(
    e: &LogicalExpr,
    leaf: &mut dyn FnMut(&LogicalExpr) -> Result<Option<Expr>>,
) -> Result<Expr> {
    if let Some(x) = leaf(e)? {
        return Ok(x);
    }
    let mut sub = |x: &Option<Box<LogicalExpr>>| -> Result<Expr> {
        bind(
            x.as_deref()
                .ok_or_else(|| plan_err!("incomplete expression"))?,
            leaf,
        )
    };
    Ok(match e.kind.as_ref() {
        None => return Err(plan_err!("empty expression")),
        Some(Kind::Column(c)) => return Err(plan_err!("unresolved column {c}")),
        Some(Kind::Aggregate(_)) => return Err(plan_err!("unexpected aggregate")),
        Some(Kind::Literal(l)) => Expr::literal(ScalarValue::from_proto(l)?),
        Some(Kind::Binary(b)) => {
            let l = sub(&b.left)?;
            let r = sub(&b.right)?;
            match FuncKind::try_from(b.op).unwrap_or(FuncKind::FuncUnspecified) {
                FuncKind::Plus => Expr::arith(ArithOp::Plus, l, r)?,
                FuncKind::Minus => Expr::arith(ArithOp::Minus, l, r)?,
                FuncKind::Multiply => Expr::arith(ArithOp::Multiply, l, r)?,
                FuncKind::Divide => Expr::arith(ArithOp::Divide, l, r)?,
                FuncKind::Eq => Expr::compare(CmpOp::Eq, l, r)?,
                FuncKind::Ne => Expr::compare(CmpOp::Ne, l, r)?,
                FuncKind::Lt => Expr::compare(CmpOp::Lt, l, r)?,
                FuncKind::Le => Expr::compare(CmpOp::Le, l, r)?,
                FuncKind::Gt => Expr::compare(CmpOp::Gt, l, r)?,
                FuncKind::Ge => Expr::compare(CmpOp::Ge, l, r)?,
                FuncKind::And => Expr::logic(LogicOp::And, l, r)?,
                FuncKind::Or => Expr::logic(LogicOp::Or, l, r)?,
                other => return Err(plan_err!("{other:?} is not a binary operator")),
            }
        }
        Some(Kind::Not(x)) => Expr::logical_not(bind(x, leaf)?)?,
        Some(Kind::Negate(x)) => Expr::negate(bind(x, leaf)?)?,
        Some(Kind::IsNull(x)) => Expr::is_null(sub(&x.expr)?, x.negated)?,
        Some(Kind::Between(x)) => {
            let v = sub(&x.expr)?;
            let lo = sub(&x.low)?;
            let hi = sub(&x.high)?;
            Expr::between(v, lo, hi, x.negated)?
        }
        Some(Kind::InList(x)) => {
            let v = sub(&x.expr)?;
            let list = x
                .list
                .iter()
                .map(|i| bind(i, leaf))
                .collect::<Result<Vec<_>>>()?;
            Expr::in_list(v, list, x.negated)?
        }
        Some(Kind::Like(x)) => Expr::like(sub(&x.expr)?, x.pattern.clone(), x.negated)?,
        Some(Kind::Cast(c)) => {
            let to =
                c.to.as_ref()
                    .ok_or_else(|| plan_err!("CAST without a type"))?;
            Expr::cast(sub(&c.expr)?, arrow_type(to)?)?
        }
    })
}

/// Binds an expression that references no column (INSERT values); it
/// folds to a literal when it is constant.
pub fn bind_constant(e: &LogicalExpr) -> Result<Expr> {
    bind(e, &mut |x| match x.kind.as_ref() {
        Some(Kind::Column(c)) => Err(plan_err!("INSERT values must be constants, not column {c}")),
        Some(Kind::Aggregate(_)) => Err(plan_err!("INSERT values cannot use aggregate functions")),
        _ => Ok(None),
    })
}

fn split_conjuncts(e: &LogicalExpr, out: &mut Vec<LogicalExpr>) {
    if let Some(Kind::Binary(b)) = e.kind.as_ref() {
        if b.op == FuncKind::And as i32 {
            if let (Some(l), Some(r)) = (&b.left, &b.right) {
                split_conjuncts(l, out);
                split_conjuncts(r, out);
                return;
            }
        }
    }
    out.push(e.clone());
}

fn has_aggregate(e: &LogicalExpr) -> bool {
    let sub = |x: &Option<Box<LogicalExpr>>| x.as_deref().is_some_and(has_aggregate);
    match e.kind.as_ref() {
        None | Some(Kind::Column(_)) | Some(Kind::Literal(_)) => false,
        Some(Kind::Aggregate(_)) => true,
        Some(Kind::Binary(b)) => sub(&b.left) || sub(&b.right),
        Some(Kind::Not(x)) | Some(Kind::Negate(x)) => has_aggregate(x),
        Some(Kind::IsNull(x)) => sub(&x.expr),
        Some(Kind::Between(x)) => sub(&x.expr) || sub(&x.low) || sub(&x.high),
        Some(Kind::InList(x)) => sub(&x.expr) || x.list.iter().any(has_aggregate),
        Some(Kind::Like(x)) => sub(&x.expr),
        Some(Kind::Cast(c)) => sub(&c.expr),
    }
}

/// Rewrites `table.column` references to `column`, refusing other tables.
fn normalize(e: &mut LogicalExpr, table: &str) -> Result<()> {
    let mut err = None;
    visit_mut(e, &mut |x| {
        if let Some(Kind::Column(c)) = x.kind.as_mut() {
            if let Some((t, col)) = c.split_once('.') {
                if t == table {
                    *c = col.to_string();
                } else if err.is_none() {
                    err = Some(plan_err!(
                        "unknown table '{t}' in {t}.{col}; the query reads {table}"
                    ));
                }
            }
        }
    });
    err.map_or(Ok(()), Err)
}

fn visit_mut(e: &mut LogicalExpr, f: &mut dyn FnMut(&mut LogicalExpr)) {
    f(e);
    let mut sub = |x: &mut Option<Box<LogicalExpr>>| {
        if let Some(x) = x.as_deref_mut() {
            visit_mut(x, f)
        }
    };
    match e.kind.as_mut() {
        None | Some(Kind::Column(_)) | Some(Kind::Literal(_)) => {}
        Some(Kind::Aggregate(a)) => sub(&mut a.arg),
        Some(Kind::Binary(b)) => {
            sub(&mut b.left);
            sub(&mut b.right);
        }
        Some(Kind::Not(x)) | Some(Kind::Negate(x)) => visit_mut(x, f),
        Some(Kind::IsNull(x)) => sub(&mut x.expr),
        Some(Kind::Between(x)) => {
            sub(&mut x.expr);
            sub(&mut x.low);
            sub(&mut x.high);
        }
        Some(Kind::InList(x)) => {
            sub(&mut x.expr);
            for i in &mut x.list {
                visit_mut(i, f);
            }
        }
        Some(Kind::Like(x)) => sub(&mut x.expr),
        Some(Kind::Cast(c)) => sub(&mut c.expr),
    }
}

/// `ORDER BY 2` or `ORDER BY alias`: the select item it names, if any.
fn output_ref(e: &LogicalExpr, names: &[String], table: &TableDef) -> Result<Option<usize>> {
    match e.kind.as_ref() {
        Some(Kind::Literal(l)) => match l.value {
            Some(quarry_proto::coprocessor::literal::Value::Int64(k)) => {
                if k < 1 || k as usize > names.len() {
                    return Err(plan_err!(
                        "position {k} is not in the select list (1..={})",
                        names.len()
                    ));
                }
                Ok(Some(k as usize - 1))
            }
            _ => Ok(None),
        },
        Some(Kind::Column(c)) => {
            let is_column = table.columns.iter().any(|col| &col.name == c);
            Ok(names
                .iter()
                .position(|n| n == c)
                .filter(|_| !is_column || names.iter().filter(|n| *n == c).count() == 1))
        }
        _ => Ok(None),
    }
}

/// Plans `q` over `table`.
pub fn plan_query(q: &Query, table: &TableDef) -> Result<QueryPlan> {
    let mut q = q.clone();
    let tname = table.name.clone();
    let mut all: Vec<&mut LogicalExpr> = Vec::new();
    all.extend(q.select.iter_mut().filter_map(|s| s.expr.as_mut()));
    all.extend(q.filters.iter_mut());
    all.extend(q.group_by.iter_mut());
    all.extend(q.having.iter_mut());
    all.extend(q.order_by.iter_mut().filter_map(|o| o.expr.as_mut()));
    for e in all {
        normalize(e, &tname)?;
    }

    // Expand `*`.
    let mut select: Vec<(LogicalExpr, String)> = Vec::new();
    for item in &q.select {
        if item.wildcard {
            for c in &table.columns {
                select.push((
                    LogicalExpr {
                        kind: Some(Kind::Column(c.name.clone())),
                    },
                    c.name.clone(),
                ));
            }
        } else {
            let e = item
                .expr
                .clone()
                .ok_or_else(|| plan_err!("empty select item"))?;
            let name = if item.alias.is_empty() {
                display::logical(&e)
            } else {
                item.alias.clone()
            };
            select.push((e, name));
        }
    }
    if select.is_empty() {
        return Err(plan_err!("SELECT needs at least one column"));
    }
    let names: Vec<String> = select.iter().map(|(_, n)| n.clone()).collect();

    let mut binder = Binder {
        table,
        used: Vec::new(),
    };
    let mut conjuncts = Vec::new();
    for f in &q.filters {
        if has_aggregate(f) {
            return Err(plan_err!(
                "aggregate functions are not allowed in WHERE: {}",
                display::logical(f)
            ));
        }
        split_conjuncts(f, &mut conjuncts);
    }
    let conditions = conjuncts
        .iter()
        .map(|c| {
            let e = binder.scan_expr(c)?;
            match e.data_type() {
                DataType::Boolean | DataType::Null => Ok(e),
                other => Err(plan_err!(
                    "WHERE needs a BOOLEAN condition, got {} for {}",
                    sql_name(&other),
                    display::logical(c)
                )),
            }
        })
        .collect::<Result<Vec<_>>>()?;

    let aggregating = !q.group_by.is_empty()
        || q.distinct
        || select.iter().any(|(e, _)| has_aggregate(e))
        || q.having.as_ref().is_some_and(has_aggregate)
        || q.order_by
            .iter()
            .any(|o| o.expr.as_ref().is_some_and(has_aggregate));
    if q.having.is_some() && !aggregating {
        return Err(plan_err!("HAVING needs GROUP BY or an aggregate"));
    }

    let dag = DagRequest {
        selection: if conditions.is_empty() {
            None
        } else {
            Some(Selection {
                conditions: conditions
                    .iter()
                    .map(|c| c.to_proto())
                    .collect::<std::result::Result<_, _>>()?,
            })
        },
        ..Default::default()
    };

    if aggregating {
        plan_aggregate(&q, &select, &names, &mut binder, dag)
    } else {
        plan_scan(&q, &select, &names, &mut binder, dag)
    }
}

fn scan_of(binder: &Binder) -> Result<(TableScan, Vec<String>)> {
    let t = binder.table;
    let columns = binder
        .used
        .iter()
        .map(|&i| ColumnInfo {
            column_id: t.columns[i].id,
            field_type: t.columns[i].field_type,
        })
        .collect();
    let names = binder
        .used
        .iter()
        .map(|&i| t.columns[i].name.clone())
        .collect();
    Ok((
        TableScan {
            table_id: t.id,
            columns,
            layout: t.layout,
        },
        names,
    ))
}

fn output_schema(names: &[String], outputs: &[Expr]) -> SchemaRef {
    Arc::new(Schema::new(
        names
            .iter()
            .zip(outputs)
            .map(|(n, e)| Field::new(n, e.data_type(), true))
            .collect::<Vec<_>>(),
    ))
}

fn plan_aggregate(
    q: &Query,
    select: &[(LogicalExpr, String)],
    names: &[String],
    binder: &mut Binder,
    mut dag: DagRequest,
) -> Result<QueryPlan> {
    // GROUP BY items may name select items by position or alias.
    let mut group_lx: Vec<LogicalExpr> = Vec::new();
    let sources: Vec<LogicalExpr> = if q.distinct {
        if select.iter().any(|(e, _)| has_aggregate(e)) || !q.group_by.is_empty() {
            return Err(plan_err!(
                "unsupported: DISTINCT together with aggregates or GROUP BY"
            ));
        }
        select.iter().map(|(e, _)| e.clone()).collect()
    } else {
        q.group_by.clone()
    };
    for g in &sources {
        let g = match output_ref(g, names, binder.table)? {
            Some(i) if !q.distinct => select[i].0.clone(),
            _ => g.clone(),
        };
        if has_aggregate(&g) {
            return Err(plan_err!("aggregate functions are not allowed in GROUP BY"));
        }
        if !group_lx.contains(&g) {
            group_lx.push(g);
        }
    }
    let group_exprs = group_lx
        .iter()
        .map(|g| binder.scan_expr(g))
        .collect::<Result<Vec<_>>>()?;
    let nk = group_exprs.len();
    let key_types: Vec<DataType> = group_exprs.iter().map(Expr::data_type).collect();

    // Aggregate calls found in outputs, HAVING and ORDER BY, deduplicated.
    let mut calls: Vec<LogicalExpr> = Vec::new();
    let mut funcs: Vec<AggregateFunction> = Vec::new();
    let mut args: Vec<Option<Expr>> = Vec::new();
    let mut post = |e: &LogicalExpr, binder: &mut Binder| -> Result<Expr> {
        bind(e, &mut |x| {
            if let Some(i) = group_lx.iter().position(|g| g == x) {
                return Ok(Some(Expr::Column {
                    index: i,
                    data_type: key_types[i].clone(),
                }));
            }
            match x.kind.as_ref() {
                Some(Kind::Aggregate(call)) => {
                    let idx = match calls.iter().position(|c| c == x) {
                        Some(i) => i,
                        None => {
                            let kind = AggKind::try_from(call.kind)
                                .map_err(|_| plan_err!("unknown aggregate {}", call.kind))?;
                            let arg = match &call.arg {
                                Some(a) => {
                                    if has_aggregate(a) {
                                        return Err(plan_err!(
                                            "aggregate functions cannot be nested: {}",
                                            display::logical(x)
                                        ));
                                    }
                                    Some(binder.scan_expr(a)?)
                                }
                                None => None,
                            };
                            let f = AggregateFunction::new(kind, arg.as_ref().map(Expr::data_type))
                                .map_err(|e| plan_err!("{}: {e}", display::logical(x)))?;
                            calls.push(x.clone());
                            funcs.push(f);
                            args.push(arg);
                            calls.len() - 1
                        }
                    };
                    Ok(Some(Expr::Column {
                        index: nk + idx,
                        data_type: funcs[idx].result_type(),
                    }))
                }
                Some(Kind::Column(c)) => Err(plan_err!(
                    "column {c} must appear in the GROUP BY clause or be used in an aggregate function"
                )),
                _ => Ok(None),
            }
        })
    };

    let outputs = select
        .iter()
        .map(|(e, _)| post(e, binder))
        .collect::<Result<Vec<_>>>()?;
    let having = q
        .having
        .as_ref()
        .map(|h| {
            let e = post(h, binder)?;
            match e.data_type() {
                DataType::Boolean | DataType::Null => Ok(e),
                other => Err(plan_err!(
                    "HAVING needs a BOOLEAN condition, got {}",
                    sql_name(&other)
                )),
            }
        })
        .transpose()?;
    let mut order_by = Vec::new();
    for o in &q.order_by {
        let e = o
            .expr
            .as_ref()
            .ok_or_else(|| plan_err!("empty ORDER BY item"))?;
        let expr = match output_ref(e, names, binder.table)? {
            Some(i) => outputs[i].clone(),
            None => post(e, binder)?,
        };
        order_by.push(SortKey {
            expr,
            descending: o.descending,
            nulls_first: o.nulls_first.unwrap_or(o.descending),
        });
    }

    let (scan, scan_names) = scan_of(binder)?;
    dag.scan = Some(scan);
    dag.aggregation = Some(Aggregation {
        group_by: group_exprs
            .iter()
            .map(|g| g.to_proto())
            .collect::<std::result::Result<_, _>>()?,
        aggs: funcs
            .iter()
            .zip(&args)
            .map(|(f, a)| {
                Ok(AggFunc {
                    kind: f.kind as i32,
                    arg: a.as_ref().map(|a| a.to_proto()).transpose()?,
                })
            })
            .collect::<Result<_>>()?,
    });
    let mut input_names: Vec<String> = group_lx.iter().map(display::logical).collect();
    input_names.extend(calls.iter().map(display::logical));
    Ok(QueryPlan {
        table: binder.table.clone(),
        schema: output_schema(names, &outputs),
        dag,
        aggregate: Some(FinalAggregate {
            key_types,
            funcs,
            having,
        }),
        outputs,
        order_by,
        limit: q.limit,
        offset: q.offset,
        scan_names,
        input_names,
    })
}

fn plan_scan(
    q: &Query,
    select: &[(LogicalExpr, String)],
    names: &[String],
    binder: &mut Binder,
    mut dag: DagRequest,
) -> Result<QueryPlan> {
    let mut pushed = select
        .iter()
        .map(|(e, _)| binder.scan_expr(e))
        .collect::<Result<Vec<_>>>()?;
    let n = pushed.len();
    let mut order_by = Vec::new();
    for o in &q.order_by {
        let e = o
            .expr
            .as_ref()
            .ok_or_else(|| plan_err!("empty ORDER BY item"))?;
        let index = match output_ref(e, names, binder.table)? {
            Some(i) => i,
            None => {
                pushed.push(binder.scan_expr(e)?);
                pushed.len() - 1
            }
        };
        order_by.push(SortKey {
            expr: Expr::Column {
                index,
                data_type: pushed[index].data_type(),
            },
            descending: o.descending,
            nulls_first: o.nulls_first.unwrap_or(o.descending),
        });
    }
    let outputs: Vec<Expr> = (0..n)
        .map(|i| Expr::Column {
            index: i,
            data_type: pushed[i].data_type(),
        })
        .collect();
    let (scan, scan_names) = scan_of(binder)?;
    dag.scan = Some(scan);
    dag.projection = Some(Projection {
        exprs: pushed
            .iter()
            .map(|e| e.to_proto())
            .collect::<std::result::Result<_, _>>()?,
    });
    if q.order_by.is_empty() {
        if let Some(l) = q.limit {
            dag.limit = l.saturating_add(q.offset);
        }
    }
    let mut input_names = names.to_vec();
    input_names.extend(pushed[n..].iter().map(|e| display::bound(e, &scan_names)));
    Ok(QueryPlan {
        table: binder.table.clone(),
        schema: output_schema(names, &outputs),
        dag,
        aggregate: None,
        outputs,
        order_by,
        limit: q.limit,
        offset: q.offset,
        scan_names,
        input_names,
    })
}

impl QueryPlan {
    /// The plan as indented text, top (compute) to bottom (storage).
    pub fn explain(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let names: Vec<String> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let input = &self.input_names;
        lines.push(format!("Output: {}", names.join(", ")));
        if self.limit.is_some() || self.offset > 0 {
            lines.push(format!(
                "  Limit: {} offset {}",
                self.limit.map_or("none".into(), |l| l.to_string()),
                self.offset
            ));
        }
        if !self.order_by.is_empty() {
            let keys: Vec<String> = self
                .order_by
                .iter()
                .map(|k| {
                    format!(
                        "{}{}",
                        display::bound(&k.expr, input),
                        if k.descending { " DESC" } else { "" }
                    )
                })
                .collect();
            lines.push(format!("  Sort: {}", keys.join(", ")));
        }
        let scan = self.dag.scan.as_ref();
        let scan_names = &self.scan_names;
        let proto_expr = |e: &quarry_proto::coprocessor::Expr| -> String {
            let types: Vec<DataType> = scan
                .map(|s| {
                    s.columns
                        .iter()
                        .map(|c| {
                            c.field_type
                                .as_ref()
                                .and_then(|f| arrow_type(f).ok())
                                .unwrap_or(DataType::Null)
                        })
                        .collect()
                })
                .unwrap_or_default();
            expr::Expr::from_proto(e, &types)
                .map(|b| display::bound(&b, scan_names))
                .unwrap_or_else(|err| format!("<{err}>"))
        };
        if let Some(agg) = &self.aggregate {
            if let Some(h) = &agg.having {
                lines.push(format!("  Filter (HAVING): {}", display::bound(h, input)));
            }
            lines.push(format!(
                "  Aggregate (final, compute): groups [{}]",
                input[..agg.key_types.len()].join(", ")
            ));
        } else {
            lines.push("  Concat (compute)".into());
        }
        lines.push(format!(
            "    Coprocessor (every region of {}, in parallel):",
            self.table.name
        ));
        if let Some(a) = &self.dag.aggregation {
            let groups: Vec<String> = a.group_by.iter().map(proto_expr).collect();
            let aggs: Vec<String> = a
                .aggs
                .iter()
                .map(|f| match &f.arg {
                    None => "count(*)".into(),
                    Some(arg) => format!("{}({})", display::agg_name(f.kind), proto_expr(arg)),
                })
                .collect();
            lines.push(format!(
                "      Aggregate (partial): groups [{}] aggregates [{}]",
                groups.join(", "),
                aggs.join(", ")
            ));
        }
        if let Some(p) = &self.dag.projection {
            let exprs: Vec<String> = p.exprs.iter().map(proto_expr).collect();
            lines.push(format!("      Projection: {}", exprs.join(", ")));
        }
        if self.dag.limit > 0 {
            lines.push(format!("      Limit: {}", self.dag.limit));
        }
        if let Some(s) = &self.dag.selection {
            let conds: Vec<String> = s.conditions.iter().map(proto_expr).collect();
            lines.push(format!("      Selection: {}", conds.join(" AND ")));
        }
        lines.push(format!(
            "      TableScan: {} [{}]{}",
            self.table.name,
            scan_names.join(", "),
            if scan_names.is_empty() {
                " (keys only)"
            } else {
                ""
            }
        ));
        lines
    }
}

#[cfg(test)]
mod tests;
