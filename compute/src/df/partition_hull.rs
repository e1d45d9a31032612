//! A partitioned hash join's filter, as one condition storage checks
//! before it decodes a row.
//!
//! When a hash join runs partitioned (both sides repartitioned by the key,
//! one hash table per partition), DataFusion's dynamic filter for the probe
//! side is a CASE over the probe row's partition, each branch that
//! partition's key bounds and keys:
//!
//! ```text
//! CASE hash_repartition % 2
//!   WHEN 0 THEN o_custkey >= 18 AND o_custkey <= 149986 AND o_custkey IN (6004 keys)
//!   WHEN 1 THEN o_custkey >= 12 AND o_custkey <= 149993 AND o_custkey IN (6004 keys)
//! END
//! ```
//!
//! Storage cannot compute DataFusion's repartition hash, so the region
//! scan widens the CASE to the OR of its branches (any row some partition
//! can match). Evaluated as written, that OR costs every row two set
//! probes on the generic path *after* its columns are decoded: the storage
//! scan's pre-decode filter (`ZoneFilter`) only reads plain conjuncts.
//! TPC-H Q7's orders scan, 1.5 million rows against 12 thousand customer
//! keys, spent 130–210 ms of store time (summed over regions) there.
//!
//! [`hull`] turns the OR into plain conjuncts instead: for each expression
//! that every branch bounds, the widest range of the branches, and when
//! every branch lists its keys, one IN list of all of them. When every
//! branch is made only of such bounds and lists the result keeps exactly
//! the keys the OR keeps (a branch's bounds are its keys' bounds); else it
//! keeps more, which a join filter may (the join drops what does not
//! match). A row out of the union is then dropped on the packed key column
//! before anything else of it is decoded.
//!
//! Branches with nothing in common (no expression bounded by all of them)
//! stay an OR.

use std::collections::HashSet;

use quarry_coprocessor::expr::{CmpOp, Expr, LogicOp, ScalarValue};

/// What one branch says of one expression: its bounds, and its keys when
/// it lists them.
#[derive(Default)]
struct Bounds {
    lo: Option<i64>,
    hi: Option<i64>,
    keys: Option<HashSet<i64>>,
}

impl Bounds {
    /// Narrows these bounds by `c` if it bounds or lists `e`.
    fn add(&mut self, e: &Expr, c: &Expr) {
        match c {
            Expr::Compare { op, left, right } => {
                let (op, v) = match (left.as_ref(), right.as_ref()) {
                    (x, Expr::Literal(ScalarValue::Int64(v))) if x == e => (*op, *v),
                    (Expr::Literal(ScalarValue::Int64(v)), x) if x == e => (op.flip(), *v),
                    _ => return,
                };
                let (lo, hi) = match op {
                    CmpOp::Eq => (Some(v), Some(v)),
                    CmpOp::Ge => (Some(v), None),
                    CmpOp::Gt => (v.checked_add(1), None),
                    CmpOp::Le => (None, Some(v)),
                    CmpOp::Lt => (None, v.checked_sub(1)),
                    CmpOp::Ne => return,
                };
                if let Some(lo) = lo {
                    self.lo = Some(self.lo.map_or(lo, |l| l.max(lo)));
                }
                if let Some(hi) = hi {
                    self.hi = Some(self.hi.map_or(hi, |h| h.min(hi)));
                }
            }
            Expr::InList {
                expr,
                list,
                negated: false,
                ..
            } if expr.as_ref() == e => {
                let Some(keys) = list
                    .iter()
                    .map(ScalarValue::as_int64)
                    .collect::<Option<HashSet<i64>>>()
                else {
                    return;
                };
                self.keys = Some(match self.keys.take() {
                    None => keys,
                    Some(k) => k.intersection(&keys).copied().collect(),
                });
            }
            _ => {}
        }
    }
}

/// The expression a conjunct bounds or lists, if it is of that shape.
fn subject(c: &Expr) -> Option<&Expr> {
    match c {
        Expr::Compare { op, left, right } if *op != CmpOp::Ne => {
            match (left.as_ref(), right.as_ref()) {
                (x, Expr::Literal(ScalarValue::Int64(_))) => Some(x),
                (Expr::Literal(ScalarValue::Int64(_)), x) => Some(x),
                _ => None,
            }
        }
        Expr::InList {
            expr,
            negated: false,
            ..
        } => Some(expr),
        _ => None,
    }
}

fn conjuncts(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Logic {
            op: LogicOp::And,
            args,
        } => args.iter().flat_map(conjuncts).collect(),
        other => vec![other],
    }
}

/// The OR of `branches` as plain conjuncts storage filters packed columns
/// by (see the module doc), or the OR itself when the branches bound no
/// expression in common. None for no branches.
pub fn hull(branches: Vec<Expr>) -> Option<Expr> {
    let first = branches.first()?;
    let parts: Vec<Vec<&Expr>> = branches.iter().map(conjuncts).collect();
    // Expressions bounded by every branch, in the first branch's order.
    let mut common: Vec<&Expr> = Vec::new();
    for c in conjuncts(first) {
        let Some(s) = subject(c) else { continue };
        if !common.contains(&s)
            && parts
                .iter()
                .all(|p| p.iter().any(|c| subject(c) == Some(s)))
        {
            common.push(s);
        }
    }
    let mut out = Vec::new();
    for s in common {
        let mut lo: Option<i64> = Some(i64::MAX);
        let mut hi: Option<i64> = Some(i64::MIN);
        let mut keys: Option<HashSet<i64>> = Some(HashSet::new());
        for p in &parts {
            let mut b = Bounds::default();
            for c in p {
                b.add(s, c);
            }
            lo = lo.zip(b.lo).map(|(a, b)| a.min(b));
            hi = hi.zip(b.hi).map(|(a, b)| a.max(b));
            keys = keys.zip(b.keys).map(|(mut a, b)| {
                a.extend(b);
                a
            });
        }
        let int = |v| Expr::literal(ScalarValue::Int64(v));
        if let Some(lo) = lo {
            out.extend(Expr::compare(CmpOp::Ge, s.clone(), int(lo)).ok());
        }
        if let Some(hi) = hi {
            out.extend(Expr::compare(CmpOp::Le, s.clone(), int(hi)).ok());
        }
        if let Some(keys) = keys {
            let mut keys: Vec<i64> = keys.into_iter().collect();
            keys.sort_unstable();
            if keys.is_empty() {
                out.push(Expr::literal(ScalarValue::Boolean(false)));
            } else {
                out.extend(Expr::in_int_list(s.clone(), &keys, false).ok());
            }
        }
    }
    if out.is_empty() {
        return joined(LogicOp::Or, branches);
    }
    joined(LogicOp::And, out)
}

/// `exprs` joined by `op` (an argument that cannot join is left out),
/// None for none.
pub fn joined(op: LogicOp, exprs: impl IntoIterator<Item = Expr>) -> Option<Expr> {
    exprs
        .into_iter()
        .reduce(|a, b| Expr::logic(op, a.clone(), b).unwrap_or(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::DataType;

    fn col(i: usize) -> Expr {
        Expr::Column {
            index: i,
            data_type: DataType::Int64,
        }
    }
    fn int(v: i64) -> Expr {
        Expr::literal(ScalarValue::Int64(v))
    }
    fn cmp(op: CmpOp, l: Expr, r: Expr) -> Expr {
        Expr::compare(op, l, r).unwrap()
    }
    fn and(args: Vec<Expr>) -> Expr {
        Expr::logic_n(LogicOp::And, args).unwrap()
    }
    fn keys(e: &Expr, k: &[i64]) -> Expr {
        Expr::in_int_list(e.clone(), k, false).unwrap()
    }
    /// The rows of `values` (one column) that `e` keeps.
    fn kept(e: &Expr, values: &[i64]) -> Vec<i64> {
        use arrow::array::{Array, AsArray, Int64Array, RecordBatch};
        use arrow::datatypes::{Field, Schema};
        use std::sync::Arc;
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(values.to_vec())) as _],
        )
        .unwrap();
        let mask = e.evaluate_to_array(&batch, None).unwrap();
        let mask = mask.as_boolean();
        (0..values.len())
            .filter(|&i| mask.is_valid(i) && mask.value(i))
            .map(|i| values[i])
            .collect()
    }

    #[test]
    fn partitions_key_lists_become_one_list_keeping_the_same_rows() {
        let k = col(0);
        let b0 = and(vec![
            cmp(CmpOp::Ge, k.clone(), int(18)),
            cmp(CmpOp::Le, k.clone(), int(50)),
            keys(&k, &(18..=50).step_by(2).collect::<Vec<_>>()),
        ]);
        let b1 = and(vec![
            cmp(CmpOp::Ge, k.clone(), int(3)),
            cmp(CmpOp::Le, k.clone(), int(33)),
            keys(&k, &(3..=33).step_by(3).collect::<Vec<_>>()),
        ]);
        let or = Expr::logic(LogicOp::Or, b0.clone(), b1.clone()).unwrap();
        let h = hull(vec![b0, b1]).unwrap();
        // Plain conjuncts: bounds and one list, no OR.
        let parts = conjuncts(&h);
        assert_eq!(parts.len(), 3, "{h:?}");
        assert!(parts
            .iter()
            .any(|c| matches!(c, Expr::InList { set: Some(_), .. })));
        let values: Vec<i64> = (-5..70).collect();
        assert_eq!(kept(&h, &values), kept(&or, &values));
    }

    #[test]
    fn a_branch_without_keys_leaves_the_widest_bounds() {
        // Partition 1's keys were too many to list (DataFusion's hash
        // lookup, which storage cannot run, was dropped).
        let k = col(0);
        let b0 = and(vec![
            cmp(CmpOp::Ge, k.clone(), int(10)),
            cmp(CmpOp::Le, k.clone(), int(20)),
            keys(&k, &[10, 15, 20]),
        ]);
        let b1 = and(vec![
            cmp(CmpOp::Ge, k.clone(), int(5)),
            cmp(CmpOp::Lt, k.clone(), int(30)),
        ]);
        let h = hull(vec![b0, b1]).unwrap();
        let values: Vec<i64> = (0..40).collect();
        assert_eq!(kept(&h, &values), (5..30).collect::<Vec<_>>());
    }

    #[test]
    fn branches_on_different_expressions_stay_an_or() {
        let b0 = cmp(CmpOp::Le, col(0), int(5));
        let b1 = cmp(CmpOp::Ge, col(1), int(7));
        let h = hull(vec![b0.clone(), b1.clone()]).unwrap();
        assert_eq!(h, Expr::logic(LogicOp::Or, b0, b1).unwrap());
    }
}
