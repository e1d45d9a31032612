//! How many of a table's rows a region scan's filter keeps, estimated
//! from the column statistics (`stats.rs`), for DataFusion's join order.
//!
//! Filters that storage evaluates are pushed into the region scan as
//! Exact, so DataFusion never sees them and cannot estimate them; the scan
//! does, the way System R did and most planners still do: each conjunct
//! on its own, the conjuncts independent of each other.
//!
//! | condition                    | share of the rows kept               |
//! |------------------------------|--------------------------------------|
//! | `col = v`                    | 1 / NDV(col)                         |
//! | `col <> v`                   | 1 − 1 / NDV(col)                     |
//! | `col < v` (and `<=, >, >=`)  | the part of [min, max] on that side  |
//! | `col IN (n values)`          | n / NDV(col), at most 1              |
//! | `col IS NULL`                | NULLs / rows                         |
//! | `col LIKE p`                 | ½ per literal character of p; without wildcards, as `=` |
//! | `a AND b`, `a OR b`, `NOT a` | s(a)·s(b), s(a)+s(b)−s(a)·s(b), 1−s(a) |
//! | `col >= lo AND col < hi`     | s(≥ lo) + s(< hi) − 1: the part of [min, max] between |
//! | anything else                | a fifth (DataFusion's default); for a conjunct that reads two or more columns, its share measured on a sample (`measured_share.rs`) once it has been |
//!
//! Without statistics for a column its conditions count as "anything
//! else"; so do comparisons of two columns (`l_receiptdate >
//! l_commitdate`), the ones measured. Only a conjunct of the filter is
//! measured, not one with the statement's parameters; inside an OR or a
//! NOT the default stands. The estimates matter where a filter is very selective: TPC-H
//! Q17's `p_brand = 'Brand#23' AND p_container = 'MED BOX'` keeps 204 of
//! 200,000 parts (1/25 · 1/40 estimates 200), where "a fifth" made the
//! part side look bigger than lineitem grouped by part, so DataFusion
//! built its hash table on the grouped side and the parts' keys could no
//! longer cut lineitem in the regions.
//!
//! A column's lower and upper bounds in one conjunction are one range,
//! not two independent conditions (PostgreSQL pairs them the same way):
//! Q14's month of lineitem, `l_shipdate >= '1995-09-01' AND l_shipdate <
//! '1995-10-01'`, keeps 1.2% of the rows, where the product of its two
//! sides, 46% and 54%, said a quarter, and lineitem's 76 k rows looked
//! bigger than all 200 k parts. Left out: histograms (skewed
//! columns), correlated columns, LIKE patterns against the column's values (a
//! LIKE's estimate counts only its pattern's literal characters).

use quarry_coprocessor::expr::{CmpOp, Expr, LogicOp, ScalarValue};

use super::stats::ColumnStatistics;

/// DataFusion's default selectivity of a filter it cannot analyse.
pub const DEFAULT_SELECTIVITY: f64 = 0.2;

/// The share of rows `condition` keeps; `column(i)` gives the statistics
/// of the scan's column `i`, if any; `rows` is the table's row count.
pub fn selectivity<'a>(
    condition: &Expr,
    column: &dyn Fn(usize) -> Option<&'a ColumnStatistics>,
    rows: u64,
) -> f64 {
    estimate(condition, column, rows).unwrap_or(DEFAULT_SELECTIVITY)
}

/// [`selectivity`], None where the statistics say nothing of `condition`
/// itself (the default would stand in; a measured share may:
/// `measured_share.rs`).
fn estimate<'a>(
    condition: &Expr,
    column: &dyn Fn(usize) -> Option<&'a ColumnStatistics>,
    rows: u64,
) -> Option<f64> {
    let s = match condition {
        Expr::Logic {
            op: LogicOp::And,
            args,
        } => conjunction(args.iter(), column, rows),
        Expr::Logic {
            op: LogicOp::Or,
            args,
        } => args
            .iter()
            .map(|a| selectivity(a, column, rows))
            .reduce(|a, b| a + b - a * b)
            .unwrap_or(1.0),
        Expr::Not(e) => 1.0 - selectivity(e, column, rows),
        Expr::Compare { op, left, right } => {
            compare(*op, left, right, column).or_else(|| compare(flip(*op), right, left, column))?
        }
        Expr::InList {
            expr,
            list,
            negated,
            ..
        } => match stats_of(expr, column) {
            Some(c) if c.distinct > 0 => {
                let s = (list.len() as f64 / c.distinct as f64).min(1.0);
                if *negated {
                    1.0 - s
                } else {
                    s
                }
            }
            _ => return None,
        },
        Expr::IsNull { expr, negated } => match stats_of(expr, column) {
            Some(c) if rows > 0 => {
                let s = c.nulls as f64 / rows as f64;
                if *negated {
                    1.0 - s
                } else {
                    s
                }
            }
            _ => return None,
        },
        Expr::Like {
            expr,
            pattern,
            negated,
        } => {
            let s = like(pattern, stats_of(expr, column));
            if *negated {
                1.0 - s
            } else {
                s
            }
        }
        Expr::Literal(ScalarValue::Boolean(b)) => *b as u8 as f64,
        _ => return None,
    };
    Some(s.clamp(0.0, 1.0))
}

/// The share of rows every one of `conditions` keeps: the product of
/// their shares, except that a column's lower and upper bounds (`col >=
/// lo`, `col < hi`, either way round, the tightest of each side) count as
/// one range, s(lower) + s(upper) − 1, the part of [min, max] between
/// them; at least one value's share (1 / NDV) when they overlap nowhere
/// in the statistics' view.
pub fn conjunction<'a, 'e>(
    conditions: impl IntoIterator<Item = &'e Expr>,
    column: &dyn Fn(usize) -> Option<&'a ColumnStatistics>,
    rows: u64,
) -> f64 {
    conjunction_measured(conditions, column, rows, &|_| None)
}

/// [`conjunction`], where `measured` gives the share a conjunct the
/// statistics cannot estimate was measured to keep, if it was
/// (`measured_share.rs`); the default stands in for the others.
pub fn conjunction_measured<'a, 'e>(
    conditions: impl IntoIterator<Item = &'e Expr>,
    column: &dyn Fn(usize) -> Option<&'a ColumnStatistics>,
    rows: u64,
    measured: &dyn Fn(&Expr) -> Option<f64>,
) -> f64 {
    // Per column: (its statistics, the tightest lower side's share, the
    // tightest upper side's share).
    let mut ranges: Vec<(usize, &'a ColumnStatistics, f64, f64)> = Vec::new();
    let mut product = 1.0;
    for c in conditions {
        if let Expr::Logic {
            op: LogicOp::And,
            args,
        } = c
        {
            product *= conjunction_measured(args.iter(), column, rows, measured);
            continue;
        }
        let Some((index, stats, lower, share)) = range_side(c, column) else {
            product *= estimate(c, column, rows)
                .or_else(|| measured(c).map(|s| s.clamp(0.0, 1.0)))
                .unwrap_or(DEFAULT_SELECTIVITY);
            continue;
        };
        let slot = match ranges.iter().position(|r| r.0 == index) {
            Some(i) => &mut ranges[i],
            None => {
                ranges.push((index, stats, 1.0, 1.0));
                ranges.last_mut().expect("pushed")
            }
        };
        match lower {
            true => slot.2 = slot.2.min(share),
            false => slot.3 = slot.3.min(share),
        }
    }
    for (_, stats, lower, upper) in ranges {
        let share = match (lower < 1.0, upper < 1.0) {
            (true, true) => (lower + upper - 1.0).max(1.0 / stats.distinct.max(1) as f64),
            _ => lower * upper,
        };
        product *= share;
    }
    product.clamp(0.0, 1.0)
}

/// A range comparison of a column with statistics and a literal, either
/// way round: (the column's index, its statistics, whether it bounds the
/// column from below, the share it keeps).
fn range_side<'a>(
    condition: &Expr,
    column: &dyn Fn(usize) -> Option<&'a ColumnStatistics>,
) -> Option<(usize, &'a ColumnStatistics, bool, f64)> {
    let Expr::Compare { op, left, right } = condition else {
        return None;
    };
    let (op, col, literal) = match (left.as_ref(), right.as_ref()) {
        (c @ Expr::Column { .. }, l @ Expr::Literal(_)) => (*op, c, l),
        (l @ Expr::Literal(_), c @ Expr::Column { .. }) => (flip(*op), c, l),
        _ => return None,
    };
    let lower = match op {
        CmpOp::Gt | CmpOp::Ge => true,
        CmpOp::Lt | CmpOp::Le => false,
        CmpOp::Eq | CmpOp::Ne => return None,
    };
    let Expr::Column { index, .. } = col else {
        return None;
    };
    let stats = column(*index)?;
    let share = compare(op, col, literal, column)?;
    Some((*index, stats, lower, share))
}

/// The share of strings `LIKE pattern` keeps: each literal character
/// halves it ([`LIKE_CHAR_SELECTIVITY`]), PostgreSQL's rule without
/// statistics (its `FIXED_CHAR_SEL`) made gentler; a pattern without
/// wildcards is an equality.
fn like(pattern: &str, stats: Option<&ColumnStatistics>) -> f64 {
    let literal = pattern.chars().filter(|c| !matches!(c, '%' | '_')).count();
    if literal == pattern.chars().count() {
        return match stats {
            Some(c) => 1.0 / c.distinct.max(1) as f64,
            None => DEFAULT_SELECTIVITY,
        };
    }
    LIKE_CHAR_SELECTIVITY.powi(literal as i32)
}

/// What one literal character of a LIKE pattern keeps. TPC-H's patterns
/// against what they keep at SF 1: Q9's `%green%` 0.031 against 0.054,
/// Q20's `forest%` 0.016 against 0.011, Q2's `%BRASS` 0.031 against 0.2
/// (a word from a list of five), Q13's `NOT LIKE '%special%requests%'`
/// 1.0 against 0.99. DataFusion's flat fifth put Q9's green parts at four
/// times their number, and with them lineitem's joined rows above all of
/// partsupp's, so partsupp became a build side.
const LIKE_CHAR_SELECTIVITY: f64 = 0.5;

fn stats_of<'a>(
    e: &Expr,
    column: &dyn Fn(usize) -> Option<&'a ColumnStatistics>,
) -> Option<&'a ColumnStatistics> {
    match e {
        Expr::Column { index, .. } => column(*index),
        _ => None,
    }
}

/// `v op col` as `col flip(op) v`.
fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        o => o,
    }
}

/// `col op v`, when `left` is a column with statistics and `right` a
/// literal.
fn compare<'a>(
    op: CmpOp,
    left: &Expr,
    right: &Expr,
    column: &dyn Fn(usize) -> Option<&'a ColumnStatistics>,
) -> Option<f64> {
    let c = stats_of(left, column)?;
    let Expr::Literal(v) = right else {
        return None;
    };
    let equal = 1.0 / c.distinct.max(1) as f64;
    Some(match op {
        CmpOp::Eq => equal,
        CmpOp::Ne => 1.0 - equal,
        CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge => {
            let (min, max, v) = (number(&c.min)?, number(&c.max)?, literal_number(v)?);
            if max <= min {
                return None;
            }
            let below = ((v - min) / (max - min)).clamp(0.0, 1.0);
            match op {
                CmpOp::Lt | CmpOp::Le => below,
                _ => 1.0 - below,
            }
        }
    })
}

fn number(v: &datafusion::common::ScalarValue) -> Option<f64> {
    use datafusion::common::ScalarValue as S;
    match v {
        S::Int64(Some(x)) => Some(*x as f64),
        S::Int32(Some(x)) | S::Date32(Some(x)) => Some(*x as f64),
        _ => None,
    }
}

fn literal_number(v: &ScalarValue) -> Option<f64> {
    match v {
        ScalarValue::Int64(x) => Some(*x as f64),
        ScalarValue::Date(x) => Some(*x as f64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::DataType;
    use datafusion::common::ScalarValue as S;

    fn col(index: usize, data_type: DataType) -> Box<Expr> {
        Box::new(Expr::Column { index, data_type })
    }

    /// A date column of a thousand days, 0 to 1000, each distinct.
    fn days() -> ColumnStatistics {
        ColumnStatistics {
            min: S::Date32(Some(0)),
            max: S::Date32(Some(1000)),
            nulls: 0,
            distinct: 1000,
            clustered: false,
        }
    }

    fn cmp(op: CmpOp, left: Box<Expr>, right: ScalarValue) -> Expr {
        Expr::Compare {
            op,
            left,
            right: Box::new(Expr::Literal(right)),
        }
    }

    #[test]
    fn q17s_part_filter_is_one_in_a_thousand() {
        let brand = ColumnStatistics {
            min: S::Utf8(None),
            max: S::Utf8(None),
            nulls: 0,
            distinct: 25,
            clustered: false,
        };
        let container = ColumnStatistics {
            distinct: 40,
            clustered: false,
            ..brand.clone()
        };
        let stats = |i: usize| [&brand, &container].get(i).copied();
        let q17 = Expr::Logic {
            op: LogicOp::And,
            args: vec![
                cmp(
                    CmpOp::Eq,
                    col(0, DataType::Utf8),
                    ScalarValue::Utf8("Brand#23".into()),
                ),
                cmp(
                    CmpOp::Eq,
                    col(1, DataType::Utf8),
                    ScalarValue::Utf8("MED BOX".into()),
                ),
            ],
        };
        let s = selectivity(&q17, &stats, 200_000);
        assert!((s - 0.001).abs() < 1e-9, "{s}");
        // A column without statistics: the default.
        let none = |_: usize| None;
        assert_eq!(selectivity(&q17, &none, 200_000), 0.2 * 0.2);
    }

    #[test]
    fn a_conjunct_without_an_estimate_takes_its_measured_share() {
        let days = days();
        let stats = |i: usize| (i < 2).then_some(&days);
        // l_receiptdate > l_commitdate: two columns, no estimate.
        let later = Expr::Compare {
            op: CmpOp::Gt,
            left: col(0, DataType::Date32),
            right: col(1, DataType::Date32),
        };
        let ge = cmp(CmpOp::Ge, col(0, DataType::Date32), ScalarValue::Date(250));
        let measured = |e: &Expr| (*e == later).then_some(0.63);
        let s = conjunction_measured([&later, &ge], &stats, 10, &measured);
        assert!((s - 0.63 * 0.75).abs() < 1e-9, "{s}");
        // Not measured: the default; a conjunct with an estimate is never
        // asked for a measurement.
        let s = conjunction_measured([&later, &ge], &stats, 10, &|e| {
            assert_ne!(*e, ge, "asked to measure a range with statistics");
            None
        });
        assert!((s - 0.2 * 0.75).abs() < 1e-9, "{s}");
        // Inside an OR the default stands.
        let or = Expr::Logic {
            op: LogicOp::Or,
            args: vec![later.clone(), later.clone()],
        };
        let s = conjunction_measured([&or], &stats, 10, &|_| Some(0.63));
        assert!((s - (0.4 - 0.04)).abs() < 1e-9, "{s}");
    }

    #[test]
    fn like_halves_per_literal_character() {
        let none = |_: usize| None;
        let like = |pattern: &str, negated| Expr::Like {
            expr: col(0, DataType::Utf8),
            pattern: pattern.into(),
            negated,
        };
        let green = selectivity(&like("%green%", false), &none, 200_000);
        assert!((green - 0.5f64.powi(5)).abs() < 1e-12, "{green}");
        let forest = selectivity(&like("forest%", false), &none, 200_000);
        assert!((forest - 0.5f64.powi(6)).abs() < 1e-12, "{forest}");
        let not = selectivity(&like("%special%requests%", true), &none, 10);
        assert!(not > 0.99 && not < 1.0, "{not}");
        // No wildcard: an equality (1 / NDV with statistics).
        let name = ColumnStatistics {
            min: S::Utf8(None),
            max: S::Utf8(None),
            nulls: 0,
            distinct: 1000,
            clustered: false,
        };
        let stats = |i: usize| (i == 0).then_some(&name);
        assert_eq!(selectivity(&like("abc", false), &stats, 10), 0.001);
    }

    #[test]
    fn ranges_take_their_share_of_min_to_max_from_either_side() {
        let days = days();
        let stats = |i: usize| (i == 0).then_some(&days);
        let ge = cmp(CmpOp::Ge, col(0, DataType::Date32), ScalarValue::Date(250));
        assert!((selectivity(&ge, &stats, 10) - 0.75).abs() < 1e-9);
        // 250 > col reads as col < 250.
        let flipped = Expr::Compare {
            op: CmpOp::Gt,
            left: Box::new(Expr::Literal(ScalarValue::Date(250))),
            right: col(0, DataType::Date32),
        };
        assert!((selectivity(&flipped, &stats, 10) - 0.25).abs() < 1e-9);
        let out_of_range = cmp(CmpOp::Lt, col(0, DataType::Date32), ScalarValue::Date(-5));
        assert_eq!(selectivity(&out_of_range, &stats, 10), 0.0);
    }

    #[test]
    fn a_columns_two_bounds_are_one_range() {
        let days = days();
        let other = ColumnStatistics {
            distinct: 4,
            clustered: false,
            ..days.clone()
        };
        let stats = |i: usize| [&days, &other].get(i).copied();
        let ge = |v| cmp(CmpOp::Ge, col(0, DataType::Date32), ScalarValue::Date(v));
        let lt = |v| cmp(CmpOp::Lt, col(0, DataType::Date32), ScalarValue::Date(v));
        // A month of a thousand days: 3%, not 0.54 × 0.46 (Q14's shipdate).
        let month = [ge(460), lt(490)];
        let s = conjunction(&month, &stats, 10);
        assert!((s - 0.03).abs() < 1e-9, "{s}");
        // The same inside one AND, written the other way round, with the
        // tightest of two lower bounds and another column's equality.
        let flipped = Expr::Compare {
            op: CmpOp::Gt,
            left: Box::new(Expr::Literal(ScalarValue::Date(490))),
            right: col(0, DataType::Date32),
        };
        let and = Expr::Logic {
            op: LogicOp::And,
            args: vec![
                ge(100),
                flipped,
                ge(460),
                cmp(CmpOp::Eq, col(1, DataType::Date32), ScalarValue::Date(1)),
            ],
        };
        let s = selectivity(&and, &stats, 10);
        assert!((s - 0.03 * 0.25).abs() < 1e-9, "{s}");
        // Bounds that do not overlap: one value's share, not a negative.
        let s = conjunction(&[ge(600), lt(400)], &stats, 10);
        assert!((s - 0.001).abs() < 1e-12, "{s}");
        // One side alone is its own share.
        assert!((conjunction(&[ge(250)], &stats, 10) - 0.75).abs() < 1e-9);
    }
}
