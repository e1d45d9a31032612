//! Grammar-based SQL fuzzing against a real cluster, as sqlsmith does:
//! random but well-formed statements (expressions of every operator and
//! common function, joins, aggregates with GROUP BY and HAVING, ORDER BY,
//! LIMIT, subqueries, and writes to a scratch table) over TPC-H's nation
//! and region. Each statement must be answered, or refused with an error
//! of the user's kind (invalid input, overflow, deadline); an internal
//! error, a lost connection or a dead compute process fails the test
//! with the statement that caused it.
//!
//! Bounded in CI (`QUARRY_FUZZ_STATEMENTS`, default 400, and 120 s);
//! `docs/failure-tests.md` has the figures of longer runs.

mod common;

use std::time::{Duration, Instant};

use common::*;
use quarry_client::{Client, Error};

/// A seeded generator (xorshift64*), so a failing statement replays.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545F4914F6CDD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// Columns by type, per table alias.
struct Scope {
    ints: Vec<String>,
    texts: Vec<String>,
    tables: String,
}

fn scope(g: &mut Gen) -> Scope {
    let nation_ints = ["n.n_nationkey", "n.n_regionkey"];
    let nation_texts = ["n.n_name", "n.n_comment"];
    let region_ints = ["r.r_regionkey"];
    let region_texts = ["r.r_name", "r.r_comment"];
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match g.below(4) {
        0 => Scope {
            ints: own(&region_ints),
            texts: own(&region_texts),
            tables: "region r".into(),
        },
        1 => Scope {
            ints: [own(&nation_ints), own(&region_ints)].concat(),
            texts: [own(&nation_texts), own(&region_texts)].concat(),
            tables: format!(
                "nation n {} JOIN region r ON {}",
                g.pick(&["", "LEFT", "INNER", "RIGHT", "FULL"]),
                g.pick(&[
                    "n.n_regionkey = r.r_regionkey",
                    "n.n_nationkey = r.r_regionkey",
                    "n.n_regionkey + 1 = r.r_regionkey",
                ])
            ),
        },
        _ => Scope {
            ints: own(&nation_ints),
            texts: own(&nation_texts),
            tables: "nation n".into(),
        },
    }
}

fn int_expr(g: &mut Gen, s: &Scope, depth: usize) -> String {
    if depth == 0 || g.chance(30) {
        return match g.below(6) {
            0..=2 => s.ints[g.below(s.ints.len())].clone(),
            3 => g
                .pick(&[
                    "0",
                    "1",
                    "-1",
                    "7",
                    "9223372036854775807",
                    "-9223372036854775808",
                ])
                .into(),
            4 => g.pick(&["NULL", "CAST(NULL AS BIGINT)"]).into(),
            _ => format!("length({})", s.texts[g.below(s.texts.len())]),
        };
    }
    let a = int_expr(g, s, depth - 1);
    let b = int_expr(g, s, depth - 1);
    match g.below(9) {
        0..=3 => format!("({a} {} {b})", g.pick(&["+", "-", "*", "/", "%"])),
        4 => format!("abs({a})"),
        5 => format!("coalesce({a}, {b})"),
        6 => format!(
            "CASE WHEN {} THEN {a} ELSE {b} END",
            bool_expr(g, s, depth - 1)
        ),
        7 => format!(
            "CAST({a} AS {})",
            g.pick(&["BIGINT", "INT", "DOUBLE", "DECIMAL(12,2)"])
        ),
        _ => format!("(- {a})"),
    }
}

fn text_expr(g: &mut Gen, s: &Scope, depth: usize) -> String {
    if depth == 0 || g.chance(40) {
        return match g.below(4) {
            0..=2 => s.texts[g.below(s.texts.len())].clone(),
            _ => g.pick(&["'ASIA'", "''", "'x''y'", "'é ü'", "NULL"]).into(),
        };
    }
    let a = text_expr(g, s, depth - 1);
    match g.below(6) {
        0 => format!("upper({a})"),
        1 => format!("lower({a})"),
        2 => format!("substr({a}, {}, {})", g.below(5), g.below(30)),
        3 => format!("({a} || {})", text_expr(g, s, depth - 1)),
        4 => format!("trim({a})"),
        _ => format!("CAST({} AS VARCHAR)", int_expr(g, s, depth - 1)),
    }
}

fn bool_expr(g: &mut Gen, s: &Scope, depth: usize) -> String {
    if depth == 0 || g.chance(25) {
        let a = int_expr(g, s, 0);
        return match g.below(6) {
            0 => format!(
                "{a} {} {}",
                g.pick(&["=", "<>", "<", ">", "<=", ">="]),
                g.below(30)
            ),
            1 => format!("{a} IS {}NULL", g.pick(&["", "NOT "])),
            2 => format!("{a} BETWEEN {} AND {}", g.below(10), g.below(30)),
            3 => format!("{a} IN ({}, {}, {})", g.below(25), g.below(25), g.below(25)),
            4 => format!(
                "{} LIKE '{}'",
                text_expr(g, s, 0),
                g.pick(&["%A%", "_", "%", "ASIA", "%\\%"])
            ),
            _ => g.pick(&["TRUE", "FALSE", "NULL"]).into(),
        };
    }
    match g.below(5) {
        0 => format!(
            "({} AND {})",
            bool_expr(g, s, depth - 1),
            bool_expr(g, s, depth - 1)
        ),
        1 => format!(
            "({} OR {})",
            bool_expr(g, s, depth - 1),
            bool_expr(g, s, depth - 1)
        ),
        2 => format!("NOT ({})", bool_expr(g, s, depth - 1)),
        3 => format!(
            "{} {} {}",
            int_expr(g, s, depth - 1),
            g.pick(&["=", "<>", "<", ">="]),
            int_expr(g, s, depth - 1)
        ),
        _ => format!(
            "{} IN (SELECT r_regionkey FROM region WHERE r_regionkey < {})",
            int_expr(g, s, depth - 1),
            g.below(6)
        ),
    }
}

fn select(g: &mut Gen) -> String {
    let s = scope(g);
    let depth = 1 + g.below(3);
    let mut sql = String::from("SELECT ");
    let grouped = g.chance(40);
    if grouped {
        let key = if g.chance(50) {
            s.ints[g.below(s.ints.len())].clone()
        } else {
            s.texts[g.below(s.texts.len())].clone()
        };
        let agg = match g.below(6) {
            0 => "count(*)".to_string(),
            1 => format!("sum({})", int_expr(g, &s, depth)),
            2 => format!("avg({})", int_expr(g, &s, depth)),
            3 => format!("min({})", text_expr(g, &s, depth)),
            4 => format!("max({})", int_expr(g, &s, depth)),
            _ => format!("count(DISTINCT {})", int_expr(g, &s, depth)),
        };
        sql += &format!("{key}, {agg} AS a FROM {}", s.tables);
        if g.chance(50) {
            sql += &format!(" WHERE {}", bool_expr(g, &s, depth));
        }
        sql += &format!(" GROUP BY {key}");
        if g.chance(30) {
            sql += &format!(" HAVING count(*) > {}", g.below(4));
        }
        if g.chance(60) {
            sql += " ORDER BY 1, 2";
        }
    } else {
        if g.chance(15) {
            sql += "DISTINCT ";
        }
        let n = 1 + g.below(3);
        let items: Vec<String> = (0..n)
            .map(|_| match g.below(3) {
                0 => text_expr(g, &s, depth),
                1 => bool_expr(g, &s, depth),
                _ => int_expr(g, &s, depth),
            })
            .collect();
        sql += &format!("{} FROM {}", items.join(", "), s.tables);
        if g.chance(60) {
            sql += &format!(" WHERE {}", bool_expr(g, &s, depth));
        }
        if g.chance(50) {
            sql += " ORDER BY 1";
        }
    }
    if g.chance(40) {
        sql += &format!(" LIMIT {}", g.below(30));
    }
    sql
}

/// A write to the scratch table `fz (id BIGINT PRIMARY KEY, v BIGINT,
/// s VARCHAR)`.
fn write(g: &mut Gen) -> String {
    let s = Scope {
        ints: vec!["id".into(), "v".into()],
        texts: vec!["s".into()],
        tables: "fz".into(),
    };
    match g.below(4) {
        0 | 1 => {
            let rows: Vec<String> = (0..1 + g.below(4))
                .map(|_| {
                    format!(
                        "({}, {}, {})",
                        g.below(50),
                        g.pick(&["1", "NULL", "-5", "9223372036854775807"]),
                        g.pick(&["'a'", "NULL", "''"])
                    )
                })
                .collect();
            format!("INSERT INTO fz VALUES {}", rows.join(", "))
        }
        2 => format!(
            "UPDATE fz SET v = {} WHERE {}",
            int_expr(g, &s, 1),
            bool_expr(g, &s, 1)
        ),
        _ => format!("DELETE FROM fz WHERE {}", bool_expr(g, &s, 1)),
    }
}

#[test]
fn random_statements_are_answered_or_refused_as_the_users_fault() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3", "--sf", "0.01", "--tables", "nation,region"]);
    pg.ok("CREATE TABLE fz (id BIGINT PRIMARY KEY, v BIGINT, s VARCHAR)");
    let n: usize = std::env::var("QUARRY_FUZZ_STATEMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let budget = Duration::from_secs(
        std::env::var("QUARRY_FUZZ_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(120),
    );
    let seed: u64 = std::env::var("QUARRY_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    let mut g = Gen(seed | 1);
    let (mut answered, mut refused, mut ran) = (0, 0, 0);
    let mut kinds = std::collections::BTreeMap::<&str, usize>::new();
    let t0 = Instant::now();
    runtime().block_on(async {
        let mut c = Client::connect(&pg.compute).await.unwrap();
        while ran < n && t0.elapsed() < budget {
            let sql = if g.chance(15) {
                write(&mut g)
            } else {
                select(&mut g)
            };
            ran += 1;
            match c.sql(&sql).await {
                Ok(_) => answered += 1,
                Err(e) => {
                    let kind = match &e {
                        Error::InvalidInput(_) => "invalid input",
                        Error::Overflow(_) => "overflow",
                        Error::Deadline(_) => "deadline",
                        Error::Conflict(_) => "conflict",
                        other => panic!("statement {ran} (seed {seed}): {sql}\n{other:?}"),
                    };
                    *kinds.entry(kind).or_default() += 1;
                    refused += 1;
                }
            }
        }
    });
    assert!(process_alive(pg.compute_pid), "compute died");
    // The cluster still answers exactly.
    assert_eq!(pg.ok("SELECT count(*) FROM nation"), "count(*)\n25\n");
    eprintln!(
        "{ran} statements in {:.1} s: {answered} answered, {refused} refused {kinds:?}",
        t0.elapsed().as_secs_f64()
    );
    // The generator makes mostly valid statements: the test exercises
    // execution, not only the parser.
    assert!(answered * 2 > ran, "{answered} of {ran} answered");
}
