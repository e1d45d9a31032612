//! sqlparser AST → [`Statement`]: DDL, INSERT (whose values are constant
//! expressions), UPDATE and DELETE (whose expressions stay SQL for
//! DataFusion), SHOW TABLES and DESCRIBE. Queries never come here: they
//! are DataFusion's (`df/`).

use quarry_coprocessor::types::{add_months, parse_date};
use quarry_proto::compute::{
    logical_expr::Kind, Between, Binary, Cast, InList, IsNull, Like, LogicalExpr,
};
use quarry_proto::coprocessor::{literal::Value as LitValue, FuncKind, Literal};
use quarry_proto::meta::{FieldType, Layout, TypeKind};
use sqlparser::ast::{self, Expr as SqlExpr, SetExpr, Statement as SqlStatement, Value};

use super::{AlterOp, ColumnSpec, CreateTable, CreateView, Delete, Insert, Statement, Update};
use crate::{plan_err, Result};

/// Parses one SQL statement (within the default limits, `guard.rs`).
pub fn parse(sql: &str) -> Result<Statement> {
    let mut stmts = super::parse_plain(sql, super::DEFAULT_MAX_STATEMENT_BYTES)?;
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

/// Prefixes of the names RESTORE builds and sets tables aside under
/// (`raftstore/src/meta/restores.rs`, whose meta leader drops or renames
/// the tables of a restore that died): no statement may give a table such
/// a name. Compute does not link the storage crate, so the binary, which
/// links both, checks that the two agree (`src/backup/write.rs`'s tests).
pub const RESTORE_PREFIXES: [&str; 2] = ["__restore_", "__replaced_"];

/// `name`, unless it is one that RESTORE keeps for itself.
fn new_table_name(name: String) -> Result<String> {
    match RESTORE_PREFIXES.iter().find(|p| name.starts_with(*p)) {
        Some(p) => Err(plan_err!(
            "table name {name}: names starting with {p} are kept for RESTORE's tables"
        )),
        None => Ok(name),
    }
}

fn object_name(n: &ast::ObjectName) -> Result<String> {
    match n.0.last() {
        Some(ast::ObjectNamePart::Identifier(i)) if n.0.len() <= 2 => Ok(ident(i)),
        _ => unsupported(format!("table name {n}")),
    }
}

/// `CREATE [UNIQUE] INDEX name ON table (col [ASC | DESC], …)`: plain
/// columns, no partial or expression indexes. Entries are kept in
/// ascending order whatever the direction: an index here finds rows, it
/// does not order them, so the direction changes no answer.
fn convert_create_index(ci: ast::CreateIndex) -> Result<super::CreateIndex> {
    let Some(name) = &ci.name else {
        return unsupported("CREATE INDEX without a name");
    };
    if ci.predicate.is_some() || !ci.include.is_empty() || ci.using.is_some() {
        return unsupported("partial indexes, INCLUDE and USING in CREATE INDEX");
    }
    let mut columns = Vec::new();
    for c in &ci.columns {
        match &c.column.expr {
            ast::Expr::Identifier(i) => columns.push(ident(i)),
            _ => return unsupported(format!("index column {}: only plain columns", c.column)),
        }
    }
    Ok(super::CreateIndex {
        name: object_name(name)?,
        table: object_name(&ci.table_name)?,
        columns,
        unique: ci.unique,
        if_not_exists: ci.if_not_exists,
    })
}

/// A parsed statement in Quarry's terms (DDL, writes, SHOW, DESCRIBE,
/// transaction control).
pub fn convert_statement(s: SqlStatement) -> Result<Statement> {
    match s {
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
        SqlStatement::Drop {
            object_type: ast::ObjectType::View,
            if_exists,
            names,
            ..
        } => {
            let [name] = names.as_slice() else {
                return unsupported("dropping several views at once");
            };
            Ok(Statement::DropView {
                name: object_name(name)?,
                if_exists,
            })
        }
        SqlStatement::AlterTable(a) => {
            if a.if_exists || a.only || a.location.is_some() || a.on_cluster.is_some() {
                return unsupported("ALTER TABLE IF EXISTS / ONLY / SET LOCATION / ON CLUSTER");
            }
            Ok(Statement::AlterTable {
                name: object_name(&a.name)?,
                ops: a
                    .operations
                    .into_iter()
                    .map(convert_alter)
                    .collect::<Result<_>>()?,
            })
        }
        SqlStatement::CreateView(v) => Ok(Statement::CreateView(convert_create_view(v)?)),
        SqlStatement::CreateIndex(ci) => Ok(Statement::CreateIndex(convert_create_index(ci)?)),
        SqlStatement::Drop {
            object_type: ast::ObjectType::Index,
            if_exists,
            names,
            ..
        } => {
            let [name] = names.as_slice() else {
                return unsupported("dropping several indexes at once");
            };
            Ok(Statement::DropIndex {
                name: object_name(name)?,
                if_exists,
            })
        }
        SqlStatement::Insert(ins) => Ok(Statement::Insert(convert_insert(ins)?)),
        SqlStatement::Update(u) => Ok(Statement::Update(convert_update(u)?)),
        SqlStatement::Delete(d) => Ok(Statement::Delete(convert_delete(d)?)),
        SqlStatement::ShowTables { .. } => Ok(Statement::ShowTables),
        SqlStatement::ExplainTable { table_name, .. } => {
            Ok(Statement::Describe(object_name(&table_name)?))
        }
        SqlStatement::StartTransaction {
            modes, statements, ..
        } if statements.is_empty() => {
            if !modes.is_empty() {
                return unsupported(
                    "transaction modes: every transaction runs at snapshot isolation",
                );
            }
            Ok(Statement::Begin)
        }
        SqlStatement::Commit { chain: false, .. } => Ok(Statement::Commit),
        SqlStatement::Rollback {
            chain: false,
            savepoint: None,
        } => Ok(Statement::Rollback),
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

// ---------------------------------------------------------------- UPDATE, DELETE

/// What `SELECT … FROM t [WHERE …] FOR UPDATE` locks: the table, as
/// written with any alias, and the condition (the rows the query reads).
pub(crate) fn for_update_target(q: &ast::Query) -> Result<Delete> {
    let ast::SetExpr::Select(sel) = q.body.as_ref() else {
        return unsupported("FOR UPDATE over a set operation");
    };
    let grouped = !matches!(&sel.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty());
    if grouped || sel.having.is_some() || sel.distinct.is_some() {
        return unsupported("FOR UPDATE with GROUP BY, HAVING or DISTINCT");
    }
    let [from] = sel.from.as_slice() else {
        return unsupported("FOR UPDATE over several tables");
    };
    let (table, relation) = dml_table(from, "SELECT ... FOR UPDATE")?;
    Ok(Delete {
        table,
        relation,
        selection: sel.selection.as_ref().map(|e| e.to_string()),
    })
}

/// The one plain table a DML statement names: (its name, its text with
/// any alias).
fn dml_table(t: &ast::TableWithJoins, what: &str) -> Result<(String, String)> {
    if !t.joins.is_empty() {
        return unsupported(format!("{what} with a join"));
    }
    match &t.relation {
        ast::TableFactor::Table {
            name, args: None, ..
        } => Ok((object_name(name)?, t.relation.to_string())),
        other => unsupported(format!("{what} of {other}")),
    }
}

fn convert_update(u: ast::Update) -> Result<Update> {
    if u.from.is_some() {
        return unsupported("UPDATE ... FROM");
    }
    if u.returning.is_some() || u.output.is_some() {
        return unsupported("UPDATE ... RETURNING");
    }
    if u.limit.is_some() || !u.order_by.is_empty() || u.or.is_some() {
        return unsupported("UPDATE with ORDER BY, LIMIT or OR");
    }
    let (table, relation) = dml_table(&u.table, "UPDATE")?;
    let mut assignments = Vec::with_capacity(u.assignments.len());
    for a in u.assignments {
        let ast::AssignmentTarget::ColumnName(col) = &a.target else {
            return unsupported("UPDATE SET (a, b) = ...");
        };
        let Some(ast::ObjectNamePart::Identifier(c)) = col.0.last() else {
            return unsupported(format!("UPDATE SET {col}"));
        };
        assignments.push((ident(c), a.value.to_string()));
    }
    Ok(Update {
        table,
        relation,
        assignments,
        selection: u.selection.map(|e| e.to_string()),
    })
}

fn convert_delete(d: ast::Delete) -> Result<Delete> {
    if d.using.is_some() || d.returning.is_some() || d.output.is_some() {
        return unsupported("DELETE ... USING or RETURNING");
    }
    if d.limit.is_some() || !d.order_by.is_empty() || !d.tables.is_empty() {
        return unsupported("DELETE with ORDER BY, LIMIT or several tables");
    }
    let from = match &d.from {
        ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t) => t,
    };
    let [t] = from.as_slice() else {
        return unsupported("DELETE from several tables");
    };
    let (table, relation) = dml_table(t, "DELETE")?;
    Ok(Delete {
        table,
        relation,
        selection: d.selection.map(|e| e.to_string()),
    })
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
            array: false,
        } => lx(Kind::Cast(Box::new(Cast {
            expr: Some(Box::new(convert_expr(expr)?)),
            to: Some(parse_type(data_type)?),
        }))),
        SqlExpr::Interval(_) => {
            return unsupported(format!("{e}: INTERVAL only folds onto constant dates"))
        }
        other => return unsupported(format!("expression {other}")),
    })
}

// ---------------------------------------------------------------- DDL / DML

fn convert_create(ct: ast::CreateTable) -> Result<CreateTable> {
    if ct.query.is_some() || ct.like.is_some() || ct.clone.is_some() {
        return unsupported("CREATE TABLE ... AS / LIKE / CLONE");
    }
    if ct.or_replace || ct.temporary || ct.external {
        return unsupported("CREATE OR REPLACE / TEMPORARY / EXTERNAL TABLE");
    }
    let name = new_table_name(object_name(&ct.name)?)?;
    let mut columns = Vec::new();
    let mut primary_key = None;
    let mut unique: Vec<Vec<usize>> = Vec::new();
    for c in &ct.columns {
        let mut field_type = parse_type(&c.data_type)?;
        for opt in &c.options {
            match &opt.option {
                ast::ColumnOption::Unique(_) => unique.push(vec![columns.len()]),
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
            ast::TableConstraint::Unique(u) => {
                let mut cols = Vec::new();
                for col in &u.columns {
                    let col_name = match &col.column.expr {
                        SqlExpr::Identifier(i) => ident(i),
                        other => return unsupported(format!("UNIQUE on {other}")),
                    };
                    let idx = columns
                        .iter()
                        .position(|c| c.name == col_name)
                        .ok_or_else(|| plan_err!("UNIQUE column {col_name} is not a column"))?;
                    cols.push(idx);
                }
                unique.push(cols);
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
        unique,
    })
}

fn convert_alter(op: ast::AlterTableOperation) -> Result<AlterOp> {
    use ast::AlterTableOperation as Op;
    match op {
        Op::AddColumn {
            if_not_exists,
            column_def,
            column_position: None,
            ..
        } => {
            let mut field_type = parse_type(&column_def.data_type)?;
            let mut default = None;
            for opt in &column_def.options {
                match &opt.option {
                    ast::ColumnOption::Null => field_type.nullable = true,
                    ast::ColumnOption::NotNull => field_type.nullable = false,
                    ast::ColumnOption::Default(e) => {
                        default = Some((convert_expr(e)?, e.to_string()));
                    }
                    other => return unsupported(format!("ADD COLUMN with {other}")),
                }
            }
            Ok(AlterOp::AddColumn {
                column: ColumnSpec {
                    name: ident(&column_def.name),
                    field_type,
                },
                default,
                if_not_exists,
            })
        }
        Op::DropColumn {
            column_names,
            if_exists,
            ..
        } => {
            let [name] = column_names.as_slice() else {
                return unsupported("dropping several columns in one DROP COLUMN");
            };
            Ok(AlterOp::DropColumn {
                name: ident(name),
                if_exists,
            })
        }
        Op::RenameColumn {
            old_column_name,
            new_column_name,
        } => Ok(AlterOp::RenameColumn {
            old: ident(&old_column_name),
            new: ident(&new_column_name),
        }),
        Op::RenameTable {
            table_name: ast::RenameTableNameKind::To(n) | ast::RenameTableNameKind::As(n),
        } => Ok(AlterOp::RenameTable {
            new: new_table_name(object_name(&n)?)?,
        }),
        other => unsupported(format!(
            "ALTER TABLE {other} (Quarry alters tables by ADD COLUMN, DROP COLUMN, RENAME COLUMN \
             and RENAME TO)"
        )),
    }
}

fn convert_create_view(v: ast::CreateView) -> Result<CreateView> {
    if v.materialized || v.temporary || v.or_alter {
        return unsupported("CREATE MATERIALIZED, TEMPORARY or OR ALTER VIEW");
    }
    Ok(CreateView {
        name: object_name(&v.name)?,
        columns: v.columns.iter().map(|c| ident(&c.name)).collect(),
        query: v.query.to_string(),
        or_replace: v.or_replace,
        if_not_exists: v.if_not_exists,
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
        return unsupported("INSERT without VALUES or a query");
    };
    let query = || Insert {
        table: table.clone(),
        columns: columns.clone(),
        rows: vec![],
        query: Some(source.to_string()),
    };
    // Constant rows take Quarry's own path (no planning); anything else
    // is a query DataFusion answers.
    let plain = source.with.is_none()
        && source.order_by.is_none()
        && source.limit_clause.is_none()
        && source.fetch.is_none();
    let values = match source.body.as_ref() {
        SetExpr::Values(values) if plain => values,
        _ => return Ok(query()),
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
        .collect::<Result<Vec<_>>>();
    match rows {
        Ok(rows) => Ok(Insert {
            table,
            columns,
            rows,
            query: None,
        }),
        // Rows of expressions Quarry does not fold, as a query: `SELECT …`
        // for each row (a VALUES list with a subquery in it does not plan
        // in DataFusion). A constant that is wrong (an invalid date) is
        // the user's to fix.
        Err(e) if !e.to_string().contains("unsupported") => Err(e),
        Err(_) => {
            let selects: Vec<String> = values
                .rows
                .iter()
                .map(|r| {
                    let items: Vec<String> = r.content.iter().map(|e| e.to_string()).collect();
                    format!("SELECT {}", items.join(", "))
                })
                .collect();
            Ok(Insert {
                query: Some(selects.join(" UNION ALL ")),
                ..query()
            })
        }
    }
}
