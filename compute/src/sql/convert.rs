//! sqlparser AST → [`Statement`].

use quarry_coprocessor::types::{add_months, parse_date};
use quarry_proto::compute::{
    logical_expr::Kind, AggregateCall, Between, Binary, Cast, InList, IsNull, Like, LogicalExpr,
    OrderByItem, Query, SelectItem,
};
use quarry_proto::coprocessor::{literal::Value as LitValue, AggKind, FuncKind, Literal};
use quarry_proto::meta::{FieldType, Layout, TypeKind};
use sqlparser::ast::{self, Expr as SqlExpr, SetExpr, Statement as SqlStatement, Value};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::{ColumnSpec, CreateTable, Insert, Statement};
use crate::{plan_err, Result};

/// Parses one SQL statement.
pub fn parse(sql: &str) -> Result<Statement> {
    let mut stmts = Parser::parse_sql(&GenericDialect {}, sql)
        .map_err(|e| plan_err!("SQL syntax error: {e}"))?;
    match stmts.len() {
        0 => Err(plan_err!("empty statement")),
        1 => convert_statement(stmts.pop().expect("one")),
        n => Err(plan_err!("expected one statement, got {n}")),
    }
}

fn unsupported<T>(what: impl std::fmt::Display) -> Result<T> {
    Err(plan_err!("unsupported: {what}"))
}

/// Lower-cased unquoted identifiers, as SQL's case-insensitivity asks.
fn ident(i: &ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

fn object_name(n: &ast::ObjectName) -> Result<String> {
    match n.0.last() {
        Some(ast::ObjectNamePart::Identifier(i)) if n.0.len() <= 2 => Ok(ident(i)),
        _ => unsupported(format!("table name {n}")),
    }
}

fn convert_statement(s: SqlStatement) -> Result<Statement> {
    match s {
        SqlStatement::Query(q) => Ok(Statement::Query(convert_query(*q)?)),
        SqlStatement::Explain {
            statement, analyze, ..
        } => match *statement {
            SqlStatement::Query(q) if analyze => Ok(Statement::ExplainAnalyze(convert_query(*q)?)),
            SqlStatement::Query(q) => Ok(Statement::Explain(convert_query(*q)?)),
            other => unsupported(format!("EXPLAIN of {other}")),
        },
        SqlStatement::CreateTable(ct) => Ok(Statement::CreateTable(convert_create(ct)?)),
        SqlStatement::Drop {
            object_type: ast::ObjectType::Table,
            if_exists,
            names,
            ..
        } => {
            let [name] = names.as_slice() else {
                return unsupported("dropping several tables at once");
            };
            Ok(Statement::DropTable {
                name: object_name(name)?,
                if_exists,
            })
        }
        SqlStatement::Insert(ins) => Ok(Statement::Insert(convert_insert(ins)?)),
        SqlStatement::ShowTables { .. } => Ok(Statement::ShowTables),
        SqlStatement::ExplainTable { table_name, .. } => {
            Ok(Statement::Describe(object_name(&table_name)?))
        }
        other => {
            let text = other.to_string();
            let head: String = text
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ");
            unsupported(format!("statement {head} ..."))
        }
    }
}

// ---------------------------------------------------------------- SELECT

fn convert_query(q: ast::Query) -> Result<Query> {
    if q.with.is_some() {
        return unsupported("WITH (common table expressions)");
    }
    if q.fetch.is_some() || !q.locks.is_empty() {
        return unsupported("FETCH / FOR UPDATE");
    }
    let select = match *q.body {
        SetExpr::Select(s) => *s,
        SetExpr::Query(inner) => return convert_query(*inner),
        other => return unsupported(format!("{other}")),
    };
    let mut out = convert_select(select)?;
    if let Some(order_by) = q.order_by {
        let ast::OrderByKind::Expressions(items) = order_by.kind else {
            return unsupported("ORDER BY ALL");
        };
        for item in items {
            let descending = matches!(item.options.sort, Some(ast::OrderBySort::Desc));
            if let Some(ast::OrderBySort::Using(_)) = item.options.sort {
                return unsupported("ORDER BY ... USING");
            }
            out.order_by.push(OrderByItem {
                expr: Some(convert_expr(&item.expr)?),
                descending,
                nulls_first: item.options.nulls_first,
            });
        }
    }
    match q.limit_clause {
        None => {}
        Some(ast::LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) => {
            if !limit_by.is_empty() {
                return unsupported("LIMIT BY");
            }
            if let Some(l) = limit {
                out.limit = Some(const_u64(&l, "LIMIT")?);
            }
            if let Some(o) = offset {
                out.offset = const_u64(&o.value, "OFFSET")?;
            }
        }
        Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => {
            out.limit = Some(const_u64(&limit, "LIMIT")?);
            out.offset = const_u64(&offset, "OFFSET")?;
        }
    }
    Ok(out)
}

fn const_u64(e: &SqlExpr, what: &str) -> Result<u64> {
    match e {
        SqlExpr::Value(v) => match &v.value {
            Value::Number(n, _) => n
                .parse::<u64>()
                .map_err(|_| plan_err!("{what} must be a non-negative integer, got {n}")),
            other => Err(plan_err!(
                "{what} must be a non-negative integer, got {other}"
            )),
        },
        other => Err(plan_err!(
            "{what} must be a non-negative integer, got {other}"
        )),
    }
}

fn convert_select(s: ast::Select) -> Result<Query> {
    if s.top.is_some() || s.into.is_some() || !s.lateral_views.is_empty() {
        return unsupported("TOP / INTO / LATERAL VIEW");
    }
    if s.prewhere.is_some() || s.qualify.is_some() || !s.named_window.is_empty() {
        return unsupported("PREWHERE / QUALIFY / WINDOW");
    }
    if !s.cluster_by.is_empty() || !s.distribute_by.is_empty() || !s.sort_by.is_empty() {
        return unsupported("CLUSTER BY / DISTRIBUTE BY / SORT BY");
    }
    let table = match s.from.as_slice() {
        [] => return unsupported("SELECT without FROM"),
        [t] => {
            if !t.joins.is_empty() {
                return unsupported("JOIN (Quarry runs single-table queries)");
            }
            match &t.relation {
                ast::TableFactor::Table {
                    name, args: None, ..
                } => object_name(name)?,
                other => return unsupported(format!("FROM {other}")),
            }
        }
        _ => return unsupported("several tables in FROM (Quarry runs single-table queries)"),
    };
    let distinct = match s.distinct {
        None | Some(ast::Distinct::All) => false,
        Some(ast::Distinct::Distinct) => true,
        Some(other) => return unsupported(format!("{other}")),
    };
    let mut select = Vec::new();
    for item in &s.projection {
        select.push(match item {
            ast::SelectItem::UnnamedExpr(e) => SelectItem {
                expr: Some(convert_expr(e)?),
                alias: display_name(e),
                wildcard: false,
            },
            ast::SelectItem::ExprWithAlias { expr, alias } => SelectItem {
                expr: Some(convert_expr(expr)?),
                alias: ident(alias),
                wildcard: false,
            },
            ast::SelectItem::Wildcard(_) => SelectItem {
                expr: None,
                alias: String::new(),
                wildcard: true,
            },
            other => return unsupported(format!("select item {other}")),
        });
    }
    let filters = match &s.selection {
        Some(e) => vec![convert_expr(e)?],
        None => vec![],
    };
    let group_by = match &s.group_by {
        ast::GroupByExpr::Expressions(exprs, modifiers) => {
            if !modifiers.is_empty() {
                return unsupported("GROUP BY modifiers (ROLLUP, CUBE, TOTALS)");
            }
            exprs.iter().map(convert_expr).collect::<Result<Vec<_>>>()?
        }
        ast::GroupByExpr::All(_) => return unsupported("GROUP BY ALL"),
    };
    let having = s.having.as_ref().map(convert_expr).transpose()?;
    Ok(Query {
        table,
        select,
        filters,
        group_by,
        having,
        order_by: vec![],
        limit: None,
        offset: 0,
        distinct,
    })
}

/// A select item's default column name: the expression as written, with
/// unquoted identifiers lower-cased (`SUM(l_quantity)` → `sum(l_quantity)`).
fn display_name(e: &SqlExpr) -> String {
    match e {
        SqlExpr::Identifier(i) => ident(i),
        SqlExpr::CompoundIdentifier(parts) => parts.last().map(ident).unwrap_or_default(),
        SqlExpr::Function(f) if f.name.0.len() == 1 => {
            let text = e.to_string();
            match text.find('(') {
                Some(p) => format!("{}{}", text[..p].to_lowercase(), &text[p..]),
                None => text,
            }
        }
        _ => e.to_string(),
    }
}

// ---------------------------------------------------------------- expressions

fn lx(kind: Kind) -> LogicalExpr {
    LogicalExpr { kind: Some(kind) }
}

pub(crate) fn literal(v: LitValue) -> LogicalExpr {
    lx(Kind::Literal(Literal {
        value: Some(v),
        field_type: None,
    }))
}

fn binary(op: FuncKind, l: LogicalExpr, r: LogicalExpr) -> LogicalExpr {
    lx(Kind::Binary(Box::new(Binary {
        op: op as i32,
        left: Some(Box::new(l)),
        right: Some(Box::new(r)),
    })))
}

fn number(text: &str) -> Result<LogicalExpr> {
    if text.contains(['e', 'E']) {
        let v: f64 = text
            .parse()
            .map_err(|_| plan_err!("invalid number {text}"))?;
        return Ok(literal(LitValue::Float64(v)));
    }
    if !text.contains('.') {
        if let Ok(v) = text.parse::<i64>() {
            return Ok(literal(LitValue::Int64(v)));
        }
    }
    let (v, p, s) = quarry_coprocessor::types::parse_decimal(text)?;
    Ok(literal(LitValue::Decimal(
        quarry_proto::coprocessor::Decimal {
            hi: (v >> 64) as i64,
            lo: v as u64,
            precision: p as u32,
            scale: s as u32,
        },
    )))
}

/// A constant date: `date 'YYYY-MM-DD'`, optionally ± intervals.
fn const_date(e: &SqlExpr) -> Result<Option<i32>> {
    match e {
        SqlExpr::TypedString(ts) if matches!(ts.data_type, ast::DataType::Date) => {
            let text = match &ts.value.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s,
                other => return Err(plan_err!("invalid DATE literal {other}")),
            };
            Ok(Some(parse_date(text)?))
        }
        SqlExpr::Nested(inner) => const_date(inner),
        SqlExpr::BinaryOp { left, op, right }
            if matches!(op, ast::BinaryOperator::Plus | ast::BinaryOperator::Minus) =>
        {
            let (Some(d), SqlExpr::Interval(iv)) = (const_date(left)?, right.as_ref()) else {
                return Ok(None);
            };
            let sign = if matches!(op, ast::BinaryOperator::Minus) {
                -1
            } else {
                1
            };
            Ok(Some(add_interval(d, iv, sign)?))
        }
        _ => Ok(None),
    }
}

/// `date ± INTERVAL 'n' unit` (also `INTERVAL 'n unit'`), unit one of day,
/// week, month, year.
fn add_interval(date: i32, iv: &ast::Interval, sign: i32) -> Result<i32> {
    let text = match iv.value.as_ref() {
        SqlExpr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            other => return Err(plan_err!("invalid INTERVAL value {other}")),
        },
        other => return Err(plan_err!("invalid INTERVAL value {other}")),
    };
    let mut words = text.split_whitespace();
    let n: i32 = words
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| plan_err!("invalid INTERVAL '{text}': expected a whole number"))?;
    let unit = match (&iv.leading_field, words.next()) {
        (Some(f), None) => f.to_string().to_lowercase(),
        (None, Some(u)) => u.to_lowercase(),
        _ => return Err(plan_err!("invalid INTERVAL '{text}': give one unit")),
    };
    let n = n * sign;
    match unit.trim_end_matches('s') {
        "day" => Ok(date + n),
        "week" => Ok(date + 7 * n),
        "month" => Ok(add_months(date, n)?),
        "year" => Ok(add_months(date, 12 * n)?),
        other => unsupported(format!("INTERVAL unit {other}")),
    }
}

/// Parses a SQL type name into a field type (`DECIMAL(15,2)`, `CHAR(1)`).
pub(crate) fn parse_type(dt: &ast::DataType) -> Result<FieldType> {
    let text = dt.to_string().to_uppercase();
    let (name, args) = match text.split_once('(') {
        Some((n, rest)) => (n.trim().to_string(), rest.trim_end_matches(')').to_string()),
        None => (text.trim().to_string(), String::new()),
    };
    let nums: Vec<u32> = args
        .split(',')
        .filter(|a| !a.trim().is_empty())
        .map(|a| a.trim().parse::<u32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| plan_err!("invalid type {text}"))?;
    let ft = |kind: TypeKind| FieldType {
        kind: kind as i32,
        nullable: true,
        ..Default::default()
    };
    Ok(match name.as_str() {
        "BIGINT" | "INT" | "INTEGER" | "SMALLINT" | "TINYINT" | "INT8" | "INT4" | "INT64" => {
            ft(TypeKind::Bigint)
        }
        "DOUBLE" | "DOUBLE PRECISION" | "FLOAT" | "REAL" | "FLOAT8" | "FLOAT64" => {
            ft(TypeKind::Double)
        }
        "DECIMAL" | "NUMERIC" | "DEC" => {
            let (p, s) = match nums.as_slice() {
                [] => (18, 3),
                [p] => (*p, 0),
                [p, s] => (*p, *s),
                _ => return Err(plan_err!("invalid type {text}")),
            };
            if p == 0 || p > 38 || s > p {
                return Err(plan_err!(
                    "invalid type {text}: precision must be 1..=38 and scale 0..=precision"
                ));
            }
            FieldType {
                precision: p,
                scale: s,
                ..ft(TypeKind::Decimal)
            }
        }
        "DATE" => ft(TypeKind::Date),
        "VARCHAR" | "CHAR" | "CHARACTER" | "TEXT" | "STRING" | "CHARACTER VARYING" => FieldType {
            max_len: nums.first().copied().unwrap_or(0),
            ..ft(TypeKind::Varchar)
        },
        "BOOLEAN" | "BOOL" => ft(TypeKind::Boolean),
        _ => return unsupported(format!("type {text}")),
    })
}

pub(crate) fn convert_expr(e: &SqlExpr) -> Result<LogicalExpr> {
    use ast::BinaryOperator as B;
    if let Some(d) = const_date(e)? {
        return Ok(literal(LitValue::Date(d)));
    }
    Ok(match e {
        SqlExpr::Identifier(i) => lx(Kind::Column(ident(i))),
        SqlExpr::CompoundIdentifier(parts) => match parts.as_slice() {
            // `table.column`: the planner checks the table part.
            [t, c] => lx(Kind::Column(format!("{}.{}", ident(t), ident(c)))),
            _ => return unsupported(format!("column reference {e}")),
        },
        SqlExpr::Nested(inner) => convert_expr(inner)?,
        SqlExpr::Value(v) => match &v.value {
            Value::Number(n, _) => number(n)?,
            Value::SingleQuotedString(s) => literal(LitValue::Utf8(s.clone())),
            Value::Boolean(b) => literal(LitValue::Boolean(*b)),
            Value::Null => literal(LitValue::Null(true)),
            other => return unsupported(format!("literal {other}")),
        },
        SqlExpr::TypedString(ts) => {
            let text = match &ts.value.value {
                Value::SingleQuotedString(s) => s.clone(),
                other => return unsupported(format!("typed literal {other}")),
            };
            lx(Kind::Cast(Box::new(Cast {
                expr: Some(Box::new(literal(LitValue::Utf8(text)))),
                to: Some(parse_type(&ts.data_type)?),
            })))
        }
        SqlExpr::BinaryOp { left, op, right } => {
            let kind = match op {
                B::Plus => FuncKind::Plus,
                B::Minus => FuncKind::Minus,
                B::Multiply => FuncKind::Multiply,
                B::Divide => FuncKind::Divide,
                B::Eq => FuncKind::Eq,
                B::NotEq => FuncKind::Ne,
                B::Lt => FuncKind::Lt,
                B::LtEq => FuncKind::Le,
                B::Gt => FuncKind::Gt,
                B::GtEq => FuncKind::Ge,
                B::And => FuncKind::And,
                B::Or => FuncKind::Or,
                other => return unsupported(format!("operator {other}")),
            };
            if matches!(right.as_ref(), SqlExpr::Interval(_)) {
                return unsupported(format!(
                    "{e}: INTERVAL arithmetic only folds onto constant dates"
                ));
            }
            binary(kind, convert_expr(left)?, convert_expr(right)?)
        }
        SqlExpr::UnaryOp { op, expr } => match op {
            ast::UnaryOperator::Not => lx(Kind::Not(Box::new(convert_expr(expr)?))),
            ast::UnaryOperator::Minus => match expr.as_ref() {
                SqlExpr::Value(v) if matches!(v.value, Value::Number(..)) => {
                    let Value::Number(n, _) = &v.value else {
                        unreachable!()
                    };
                    number(&format!("-{n}"))?
                }
                _ => lx(Kind::Negate(Box::new(convert_expr(expr)?))),
            },
            ast::UnaryOperator::Plus => convert_expr(expr)?,
            other => return unsupported(format!("operator {other}")),
        },
        SqlExpr::IsNull(x) | SqlExpr::IsNotNull(x) => lx(Kind::IsNull(Box::new(IsNull {
            expr: Some(Box::new(convert_expr(x)?)),
            negated: matches!(e, SqlExpr::IsNotNull(_)),
        }))),
        SqlExpr::Between {
            expr,
            negated,
            low,
            high,
        } => lx(Kind::Between(Box::new(Between {
            expr: Some(Box::new(convert_expr(expr)?)),
            low: Some(Box::new(convert_expr(low)?)),
            high: Some(Box::new(convert_expr(high)?)),
            negated: *negated,
        }))),
        SqlExpr::InList {
            expr,
            list,
            negated,
        } => lx(Kind::InList(Box::new(InList {
            expr: Some(Box::new(convert_expr(expr)?)),
            list: list.iter().map(convert_expr).collect::<Result<_>>()?,
            negated: *negated,
        }))),
        SqlExpr::Like {
            negated,
            any: false,
            expr,
            pattern,
            escape_char: None,
        } => {
            let pattern = match pattern.as_ref() {
                SqlExpr::Value(v) => match &v.value {
                    Value::SingleQuotedString(s) => s.clone(),
                    _ => return unsupported("LIKE with a non-string pattern"),
                },
                _ => return unsupported("LIKE with a non-constant pattern"),
            };
            lx(Kind::Like(Box::new(Like {
                expr: Some(Box::new(convert_expr(expr)?)),
                pattern,
                negated: *negated,
            })))
        }
        SqlExpr::Cast {
            kind: ast::CastKind::Cast | ast::CastKind::DoubleColon,
            expr,
            data_type,
            format: None,
        } => lx(Kind::Cast(Box::new(Cast {
            expr: Some(Box::new(convert_expr(expr)?)),
            to: Some(parse_type(data_type)?),
        }))),
        SqlExpr::Function(f) => convert_function(f)?,
        SqlExpr::Interval(_) => {
            return unsupported(format!("{e}: INTERVAL only folds onto constant dates"))
        }
        other => return unsupported(format!("expression {other}")),
    })
}

fn convert_function(f: &ast::Function) -> Result<LogicalExpr> {
    let name = match f.name.0.as_slice() {
        [ast::ObjectNamePart::Identifier(i)] => i.value.to_lowercase(),
        _ => return unsupported(format!("function {}", f.name)),
    };
    if f.filter.is_some() || f.over.is_some() || !f.within_group.is_empty() {
        return unsupported(format!("{name}(...) with FILTER, OVER or WITHIN GROUP"));
    }
    let ast::FunctionArguments::List(list) = &f.args else {
        return unsupported(format!("{name} without an argument list"));
    };
    if matches!(
        list.duplicate_treatment,
        Some(ast::DuplicateTreatment::Distinct)
    ) {
        return unsupported(format!("{name}(DISTINCT ...)"));
    }
    if !list.clauses.is_empty() {
        return unsupported(format!("clauses inside {name}(...)"));
    }
    let kind = match name.as_str() {
        "count" => AggKind::Count,
        "sum" => AggKind::Sum,
        "avg" => AggKind::Avg,
        "min" => AggKind::Min,
        "max" => AggKind::Max,
        _ => return Err(plan_err!("unknown function {name}()")),
    };
    let (kind, arg) = match list.args.as_slice() {
        [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard)] if kind == AggKind::Count => {
            (AggKind::CountStar, None)
        }
        [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e))] => {
            (kind, Some(Box::new(convert_expr(e)?)))
        }
        _ => return Err(plan_err!("{name}() takes one argument")),
    };
    Ok(lx(Kind::Aggregate(Box::new(AggregateCall {
        kind: kind as i32,
        arg,
    }))))
}

// ---------------------------------------------------------------- DDL / DML

fn convert_create(ct: ast::CreateTable) -> Result<CreateTable> {
    if ct.query.is_some() || ct.like.is_some() || ct.clone.is_some() {
        return unsupported("CREATE TABLE ... AS / LIKE / CLONE");
    }
    if ct.or_replace || ct.temporary || ct.external {
        return unsupported("CREATE OR REPLACE / TEMPORARY / EXTERNAL TABLE");
    }
    let name = object_name(&ct.name)?;
    let mut columns = Vec::new();
    let mut primary_key = None;
    for c in &ct.columns {
        let mut field_type = parse_type(&c.data_type)?;
        for opt in &c.options {
            match &opt.option {
                ast::ColumnOption::Null => field_type.nullable = true,
                ast::ColumnOption::NotNull => field_type.nullable = false,
                ast::ColumnOption::PrimaryKey(_) => {
                    if primary_key.is_some() {
                        return unsupported("several PRIMARY KEY columns");
                    }
                    primary_key = Some(columns.len());
                    field_type.nullable = false;
                }
                other => return unsupported(format!("column option {other}")),
            }
        }
        columns.push(ColumnSpec {
            name: ident(&c.name),
            field_type,
        });
    }
    for con in &ct.constraints {
        match con {
            ast::TableConstraint::PrimaryKey(pk) => {
                let [col] = pk.columns.as_slice() else {
                    return unsupported(
                        "composite primary keys: use one BIGINT column, or none (rows then get an implicit handle)",
                    );
                };
                let col_name = match &col.column.expr {
                    SqlExpr::Identifier(i) => ident(i),
                    other => return unsupported(format!("primary key on {other}")),
                };
                let idx = columns
                    .iter()
                    .position(|c| c.name == col_name)
                    .ok_or_else(|| plan_err!("primary key column {col_name} is not a column"))?;
                if primary_key.replace(idx).is_some_and(|p| p != idx) {
                    return unsupported("several PRIMARY KEY columns");
                }
                columns[idx].field_type.nullable = false;
            }
            other => return unsupported(format!("constraint {other}")),
        }
    }
    let mut layout = Layout::Row;
    let mut split_handles = Vec::new();
    let options = match &ct.table_options {
        ast::CreateTableOptions::None => vec![],
        ast::CreateTableOptions::With(o) => o.clone(),
        _ => return unsupported("table options other than WITH (...)"),
    };
    for o in options {
        let ast::SqlOption::KeyValue { key, value } = o else {
            return unsupported(format!("table option {o}"));
        };
        let text = match &value {
            SqlExpr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) => s.clone(),
                Value::Number(n, _) => n.clone(),
                other => other.to_string(),
            },
            other => other.to_string(),
        };
        match ident(&key).as_str() {
            "layout" => {
                layout = match text.to_lowercase().as_str() {
                    "row" => Layout::Row,
                    "column" => Layout::Column,
                    other => {
                        return Err(plan_err!("unknown layout '{other}': use 'row' or 'column'"))
                    }
                }
            }
            "split_handles" => {
                split_handles = text
                    .split(',')
                    .map(|h| h.trim().parse::<i64>())
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|_| plan_err!("split_handles must be comma-separated integers"))?;
            }
            other => {
                return Err(plan_err!(
                    "unknown table option {other}: known are layout, split_handles"
                ))
            }
        }
    }
    Ok(CreateTable {
        name,
        columns,
        primary_key,
        if_not_exists: ct.if_not_exists,
        layout,
        split_handles,
    })
}

fn convert_insert(ins: ast::Insert) -> Result<Insert> {
    let table = match &ins.table {
        ast::TableObject::TableName(n) => object_name(n)?,
        other => return unsupported(format!("INSERT INTO {other}")),
    };
    if ins.on.is_some() || ins.returning.is_some() || ins.overwrite || ins.ignore {
        return unsupported("INSERT ... ON CONFLICT / RETURNING / OVERWRITE / IGNORE");
    }
    let columns = ins
        .columns
        .iter()
        .map(object_name)
        .collect::<Result<Vec<_>>>()?;
    let Some(source) = ins.source else {
        return unsupported("INSERT without VALUES");
    };
    let SetExpr::Values(values) = *source.body else {
        return unsupported("INSERT ... SELECT (only VALUES are supported)");
    };
    let rows = values
        .rows
        .iter()
        .map(|r| {
            r.content
                .iter()
                .map(convert_expr)
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Insert {
        table,
        columns,
        rows,
    })
}
