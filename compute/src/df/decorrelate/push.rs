//! Pushing the domain of correlated values down through a subquery's
//! operators until the correlation disappears (the module above says
//! why): a Filter keeps its predicate with the domain's columns bound
//! for the outer ones, a Projection and an Aggregate carry the domain
//! along (an Aggregate groups by it, and a scalar aggregate keeps its
//! one row per domain value), a LIMIT becomes a `row_number()` per
//! domain value, and a join takes the domain on the side that needs it.

use super::*;

/// `plan` evaluated for every row of the domain: its columns after the
/// domain's (named `names`), for each domain row the rows `plan` has
/// with the correlated columns bound to it.
pub(super) fn push(plan: &LogicalPlan, dom: &Domain, names: &[String]) -> DfResult<LogicalPlan> {
    if !dom.in_plan(plan) {
        return LogicalPlanBuilder::from(dom.plan(names)?)
            .cross_join(plan.clone())?
            .build();
    }
    match plan {
        LogicalPlan::Filter(f) => {
            let input = push(&f.input, dom, names)?;
            let predicate = dom.bind(f.predicate.clone(), names)?;
            Ok(LogicalPlan::Filter(Filter::try_new(
                predicate,
                Arc::new(input),
            )?))
        }
        LogicalPlan::Projection(p) => {
            let input = push(&p.input, dom, names)?;
            let mut exprs = Domain::columns(names);
            for (i, e) in p.expr.iter().enumerate() {
                exprs.push(dom.bind_named(e.clone(), names, &p.schema, i)?);
            }
            Ok(LogicalPlan::Projection(Projection::try_new(
                exprs,
                Arc::new(input),
            )?))
        }
        LogicalPlan::SubqueryAlias(a) => {
            let input = push(&a.input, dom, names)?;
            Ok(LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(
                Arc::new(input),
                a.alias.clone(),
            )?))
        }
        LogicalPlan::Aggregate(a) => push_aggregate(a, dom, names),
        LogicalPlan::Sort(s) => match s.fetch {
            None => push(&s.input, dom, names),
            Some(fetch) => per_domain_limit(&s.input, &s.expr, 0, Some(fetch), dom, names),
        },
        LogicalPlan::Limit(l) => push_limit(l, dom, names),
        LogicalPlan::Distinct(Distinct::All(input)) => {
            let input = push(input, dom, names)?;
            Ok(LogicalPlan::Distinct(Distinct::All(Arc::new(input))))
        }
        LogicalPlan::Join(j) => push_join(j, dom, names),
        LogicalPlan::Union(u) => {
            let inputs = u
                .inputs
                .iter()
                .map(|i| push(i, dom, names).map(Arc::new))
                .collect::<DfResult<Vec<_>>>()?;
            Ok(LogicalPlan::Union(Union::try_new_with_loose_types(inputs)?))
        }
        LogicalPlan::Window(w) => {
            let input = push(&w.input, dom, names)?;
            let n = w.input.schema().fields().len();
            let exprs = w
                .window_expr
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let per_domain = partition_by_domain(e.clone(), names)?;
                    let bound = dom.bind(per_domain, names)?;
                    let (q, f) = w.schema.qualified_field(n + i);
                    Ok(bound.alias_qualified(q.cloned(), f.name()))
                })
                .collect::<DfResult<Vec<_>>>()?;
            Ok(LogicalPlan::Window(Window::try_new(
                exprs,
                Arc::new(input),
            )?))
        }
        other => not_impl_err!(
            "a correlated subquery over {} (Quarry unnests subqueries through filters, \
             projections, aggregates, joins, unions, sorts, limits and windows)",
            other.display()
        ),
    }
}

/// A window expression computed for each domain row apart.
fn partition_by_domain(e: Expr, names: &[String]) -> DfResult<Expr> {
    e.transform_up(|e| match e {
        Expr::WindowFunction(w) => {
            let mut w: WindowFunction = *w;
            let mut by = Domain::columns(names);
            by.append(&mut w.params.partition_by);
            w.params.partition_by = by;
            Ok(Transformed::yes(Expr::WindowFunction(Box::new(w))))
        }
        e => Ok(Transformed::no(e)),
    })
    .data()
}

/// An aggregate for each domain row: grouped by the domain too. Without
/// GROUP BY it answers one row per domain row even where no rows are
/// left: the domain left-joined with the groups, and the empty
/// aggregate's value for the missing ones.
fn push_aggregate(a: &Aggregate, dom: &Domain, names: &[String]) -> DfResult<LogicalPlan> {
    let input = push(&a.input, dom, names)?;
    let n_groups = a.group_expr.len();
    let mut group = Domain::columns(names);
    for (i, e) in a.group_expr.iter().enumerate() {
        group.push(dom.bind_named(e.clone(), names, &a.schema, i)?);
    }
    let aggr = a
        .aggr_expr
        .iter()
        .enumerate()
        .map(|(i, e)| dom.bind_named(e.clone(), names, &a.schema, n_groups + i))
        .collect::<DfResult<Vec<_>>>()?;
    let grouped = LogicalPlan::Aggregate(Aggregate::try_new(Arc::new(input), group, aggr)?);
    if n_groups > 0 {
        return Ok(grouped);
    }
    let present = fresh("p");
    let marked = LogicalPlanBuilder::from(grouped)
        .project(
            a.schema
                .columns()
                .into_iter()
                .map(Expr::Column)
                .chain(Domain::columns(names))
                .chain([lit(true).alias(&present)]),
        )?
        .build()?;
    let outer_names = dom.fresh_names();
    let joined = LogicalPlanBuilder::from(dom.plan(&outer_names)?)
        .join_detailed(
            marked,
            JoinType::Left,
            (
                outer_names
                    .iter()
                    .map(Column::new_unqualified)
                    .collect::<Vec<_>>(),
                names
                    .iter()
                    .map(Column::new_unqualified)
                    .collect::<Vec<_>>(),
            ),
            None,
            NullEquality::NullEqualsNull,
        )?
        .build()?;
    let mut exprs: Vec<Expr> = outer_names
        .iter()
        .zip(names)
        .map(|(o, n)| column(o).alias(n))
        .collect();
    for (i, e) in a.aggr_expr.iter().enumerate() {
        let (q, f) = a.schema.qualified_field(i);
        let empty = empty_aggregate(e, f.data_type())?;
        let value = Expr::Column(Column::new(q.cloned(), f.name()));
        exprs.push(
            Expr::Case(Case::new(
                None,
                vec![(
                    Box::new(Expr::IsNull(Box::new(column(&present)))),
                    Box::new(empty),
                )],
                Some(Box::new(value)),
            ))
            .alias_qualified(q.cloned(), f.name()),
        );
    }
    LogicalPlanBuilder::from(joined).project(exprs)?.build()
}

/// An aggregate's value over no rows: 0 for COUNT, NULL for the others.
fn empty_aggregate(e: &Expr, data_type: &DataType) -> DfResult<Expr> {
    let func = match e {
        Expr::Alias(a) => match a.expr.as_ref() {
            Expr::AggregateFunction(f) => Some(f.func.name().to_string()),
            _ => None,
        },
        Expr::AggregateFunction(f) => Some(f.func.name().to_string()),
        _ => None,
    };
    let zero = matches!(func.as_deref(), Some("count" | "approx_distinct"));
    let value = match zero {
        true => ScalarValue::new_zero(data_type)?,
        false => ScalarValue::try_from(data_type)?,
    };
    Ok(lit(value))
}

fn push_limit(l: &Limit, dom: &Domain, names: &[String]) -> DfResult<LogicalPlan> {
    use datafusion::logical_expr::logical_plan::{FetchType, SkipType};
    let skip = match l.get_skip_type()? {
        SkipType::Literal(n) => n,
        SkipType::UnsupportedExpr => return not_impl_err!("a correlated LIMIT's OFFSET"),
    };
    let fetch = match l.get_fetch_type()? {
        FetchType::Literal(n) => n,
        FetchType::UnsupportedExpr => return not_impl_err!("a correlated LIMIT's count"),
    };
    match l.input.as_ref() {
        LogicalPlan::Sort(s) if s.fetch.is_none() => {
            per_domain_limit(&s.input, &s.expr, skip, fetch, dom, names)
        }
        input => per_domain_limit(input, &[], skip, fetch, dom, names),
    }
}

/// Rows `skip + 1 ..= skip + fetch` of `input` in `order`, for each
/// domain row: a row_number() partitioned by the domain.
fn per_domain_limit(
    input: &LogicalPlan,
    order: &[SortExpr],
    skip: usize,
    fetch: Option<usize>,
    dom: &Domain,
    names: &[String],
) -> DfResult<LogicalPlan> {
    let pushed = push(input, dom, names)?;
    let columns: Vec<Expr> = pushed
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let order = order
        .iter()
        .map(|s| {
            Ok(SortExpr {
                expr: dom.bind(s.expr.clone(), names)?,
                ..s.clone()
            })
        })
        .collect::<DfResult<Vec<_>>>()?;
    let rn = fresh("r");
    let numbered = row_number()
        .partition_by(Domain::columns(names))
        .order_by(order)
        .build()?
        .alias(&rn);
    let mut keep = binary(column(&rn), Operator::Gt, lit(skip as u64));
    if let Some(fetch) = fetch {
        keep = and(
            keep,
            binary(column(&rn), Operator::LtEq, lit((skip + fetch) as u64)),
        );
    }
    LogicalPlanBuilder::from(LogicalPlan::Window(Window::try_new(
        vec![numbered],
        Arc::new(pushed),
    )?))
    .filter(keep)?
    .project(columns)?
    .build()
}

/// A join for each domain row: the domain goes to the side that mentions
/// it (or that its condition needs it on), or to both, joined on it too.
fn push_join(
    j: &datafusion::logical_expr::Join,
    dom: &Domain,
    names: &[String],
) -> DfResult<LogicalPlan> {
    use JoinType::*;
    let (in_left, in_right) = (dom.in_plan(&j.left), dom.in_plan(&j.right));
    let (to_left, to_right) = match j.join_type {
        Inner if !in_right => (true, false),
        Inner if !in_left => (false, true),
        Left | LeftSemi | LeftAnti | LeftMark if !in_right => (true, false),
        Right | RightSemi | RightAnti | RightMark if !in_left => (false, true),
        _ => (true, true),
    };
    let right_names = match (to_left, to_right) {
        (true, true) => dom.fresh_names(),
        _ => names.to_vec(),
    };
    let left = match to_left {
        true => push(&j.left, dom, names)?,
        false => j.left.as_ref().clone(),
    };
    let right = match to_right {
        true => push(&j.right, dom, &right_names)?,
        false => j.right.as_ref().clone(),
    };
    // The condition reads the domain from the side that has it (the left
    // one when both do).
    let cond_names = match to_left {
        true => names,
        false => &right_names[..],
    };
    let on =
        j.on.iter()
            .map(|(l, r)| {
                Ok((
                    dom.bind(l.clone(), names)?,
                    dom.bind(r.clone(), &right_names)?,
                ))
            })
            .collect::<DfResult<Vec<_>>>()?;
    let mut filter = j
        .filter
        .clone()
        .map(|f| dom.bind(f, cond_names))
        .transpose()?;
    if to_left && to_right {
        let same = names
            .iter()
            .zip(&right_names)
            .map(|(l, r)| binary(column(l), Operator::IsNotDistinctFrom, column(r)))
            .reduce(and)
            .expect("a domain has columns");
        filter = Some(match filter {
            Some(f) => and(f, same),
            None => same,
        });
    }
    let (left_keys, right_keys): (Vec<Expr>, Vec<Expr>) = on.into_iter().unzip();
    let joined = LogicalPlanBuilder::from(left)
        .join_with_expr_keys(right, j.join_type, (left_keys, right_keys), filter)?
        .build()?;
    // The domain's columns first, from the side that always has them.
    let domain: Vec<Expr> = match (to_left, to_right, j.join_type) {
        (true, true, Full) => names
            .iter()
            .zip(&right_names)
            .map(|(l, r)| {
                Expr::ScalarFunction(ScalarFunction::new_udf(
                    datafusion::functions::core::coalesce(),
                    vec![column(l), column(r)],
                ))
                .alias(l)
            })
            .collect(),
        (_, true, Right | RightSemi | RightAnti | RightMark) | (false, true, _) => names
            .iter()
            .zip(&right_names)
            .map(|(l, r)| column(r).alias(l))
            .collect(),
        _ => Domain::columns(names),
    };
    let rest = joined
        .schema()
        .columns()
        .into_iter()
        .filter(|c| {
            c.relation.is_some() || !(names.contains(&c.name) || right_names.contains(&c.name))
        })
        .map(Expr::Column);
    LogicalPlanBuilder::from(joined)
        .project(domain.into_iter().chain(rest))?
        .build()
}
