//! The plan: a DAG's filter, GROUP BY and aggregates in fused form
//! ([`FusedPlan::compile`]), or None when some part has none, in which
//! case the DAG runs on the generic executors.

use arrow::datatypes::DataType;
use quarry_proto::coprocessor::AggKind;

use super::node::Node;
use super::pred::Pred;
use super::source::Source;
use crate::aggregate::AggregateFunction;
use crate::codec::pack::is_int_type;
use crate::expr::Expr;

/// A GROUP BY column.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum KeyCol {
    Int { col: usize, data_type: DataType },
    Str { col: usize },
}

/// What one aggregate reads from the per-group states.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum AggState {
    Count,
    Sum { prog: usize },
    Avg { prog: usize },
    Min { prog: usize },
    Max { prog: usize },
}

/// A DAG's aggregation in fused form.
#[derive(Debug, Clone, PartialEq)]
pub struct FusedPlan {
    pub(super) preds: Vec<Pred>,
    pub(super) keys: Vec<KeyCol>,
    /// Distinct argument programs.
    pub(super) progs: Vec<Node>,
    pub(super) aggs: Vec<(AggregateFunction, AggState)>,
    /// Scan columns any part reads.
    pub(super) used: Vec<bool>,
}

impl FusedPlan {
    /// The fused form of `conditions` + `group_by` + `aggs` over scan
    /// `columns`, or None when some part has none.
    pub fn compile(
        columns: &[(i64, DataType)],
        conditions: &[Expr],
        group_by: &[Expr],
        aggs: &[(AggregateFunction, Option<Expr>)],
    ) -> Option<FusedPlan> {
        let mut preds = Vec::new();
        for c in conditions {
            if !Pred::compile(c, &mut preds) {
                return None;
            }
        }
        let keys = group_by
            .iter()
            .map(|k| match k {
                Expr::Column { index, data_type } if is_int_type(data_type) => Some(KeyCol::Int {
                    col: *index,
                    data_type: data_type.clone(),
                }),
                Expr::Column {
                    index,
                    data_type: DataType::Utf8,
                } => Some(KeyCol::Str { col: *index }),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let mut progs: Vec<Node> = Vec::new();
        let mut states = Vec::new();
        // Columns read only to be sure they hold no NULL (COUNT(x)).
        let mut checked: Vec<usize> = Vec::new();
        for (f, arg) in aggs {
            let mut prog = || -> Option<usize> {
                let node = Node::compile(arg.as_ref()?)?;
                Some(match progs.iter().position(|p| *p == node) {
                    Some(i) => i,
                    None => {
                        progs.push(node);
                        progs.len() - 1
                    }
                })
            };
            let state = match f.kind {
                AggKind::CountStar => AggState::Count,
                // No NULLs in fused blocks: COUNT(x) counts rows.
                AggKind::Count => match arg {
                    Some(Expr::Column { index, .. }) => {
                        checked.push(*index);
                        AggState::Count
                    }
                    _ => return None,
                },
                AggKind::Sum => AggState::Sum { prog: prog()? },
                AggKind::Avg => AggState::Avg { prog: prog()? },
                AggKind::Min => AggState::Min { prog: prog()? },
                AggKind::Max => AggState::Max { prog: prog()? },
                AggKind::ApproxDistinct | AggKind::AggUnspecified => return None,
            };
            if matches!(f.arg_type, Some(DataType::Float64)) {
                return None;
            }
            states.push((f.clone(), state));
        }
        let mut used = vec![false; columns.len()];
        for p in &preds {
            match p {
                Pred::Range { col, .. }
                | Pred::NotEq { col, .. }
                | Pred::IntIn { col, .. }
                | Pred::StrIn { col, .. }
                | Pred::Bloom { col, .. }
                | Pred::NullCheck { col, .. } => *used.get_mut(*col)? = true,
                Pred::Const(_) => {}
            }
        }
        for c in checked {
            *used.get_mut(c)? = true;
        }
        for k in &keys {
            match k {
                KeyCol::Int { col, .. } | KeyCol::Str { col } => *used.get_mut(*col)? = true,
            }
        }
        let mut ok = true;
        for p in &progs {
            p.visit_columns(&mut |c| match used.get_mut(c) {
                Some(u) => *u = true,
                None => ok = false,
            });
        }
        if !ok {
            return None;
        }
        // Every read column must be an integer or a string.
        for (i, (_, dt)) in columns.iter().enumerate() {
            if used[i] && !is_int_type(dt) && *dt != DataType::Utf8 {
                return None;
            }
        }
        // A subtree equal to an earlier program is computed once. Compared
        // with the programs as compiled, so a chain (A, A×B, A×B×C) shares
        // at every step.
        let compiled = progs.clone();
        for (i, p) in progs.iter_mut().enumerate().skip(1) {
            p.share(&compiled[..i]);
        }
        Some(FusedPlan {
            preds,
            keys,
            progs,
            aggs: states,
            used,
        })
    }
    /// Each program's value range over a block, or None when some node
    /// might leave i64 or its precision there (the block goes the generic
    /// way).
    /// `cols` are the block's columns' ranges ([`col_ranges`]).
    pub(super) fn prog_bounds(&self, cols: &[(i64, i64)]) -> Option<Vec<(i128, i128)>> {
        let mut out = Vec::with_capacity(self.progs.len());
        for p in &self.progs {
            let b = p.bounds(cols, &out)?;
            out.push(b);
        }
        Some(out)
    }
}

/// Each column's min and max over a block ((0, 0) for a column that is
/// not an integer one).
pub(super) fn col_ranges(src: &[Source<'_>]) -> Vec<(i64, i64)> {
    src.iter().map(|s| s.range().unwrap_or((0, 0))).collect()
}
