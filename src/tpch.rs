//! TPC-H for Quarry: all eight tables (region, nation, supplier, customer,
//! part, partsupp, orders, lineitem) as Quarry creates them, their rows from
//! the `tpchgen` crate (the official dbgen data), the query texts, and
//! DuckDB's answers to check against.
//!
//! Every table is described by one [`Table`]: its name, DDL
//! (`tests/tpch/ddl/<table>.sql`), columns, approximate size, and how its
//! rows are generated. Each row gets a unique integer handle (the implicit
//! row id Quarry stores it under), increasing in generator order: the
//! table's key where it has a single-column one, the two-column keys of
//! partsupp and lineitem packed into one integer.

use std::fmt::{Display, Write as _};
use std::str::FromStr;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Date32Type, Decimal128Type, Float64Type, Int64Type};
use quarry_coprocessor::codec::key::append_record_key;
use quarry_coprocessor::codec::row::{Datum, RowEncoder};
use quarry_coprocessor::types::{format_date, format_decimal};
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};

/// `CREATE TABLE lineitem (...)`, exactly as Quarry creates it.
pub const LINEITEM_DDL: &str = include_str!("../tests/tpch/ddl/lineitem.sql");
pub const Q1: &str = include_str!("../tests/tpch/queries/q1.sql");
pub const Q6: &str = include_str!("../tests/tpch/queries/q6.sql");
/// A query that returns many rows (about 10% of lineitem): what the wire
/// format costs when the answer is big, not a partial aggregate.
pub const SCAN: &str = "SELECT l_orderkey, l_linenumber, l_quantity, l_extendedprice, \
    l_discount, l_tax, l_returnflag, l_shipdate FROM lineitem \
    WHERE l_shipdate >= date '1998-01-01'";

/// The top ten of [`SCAN`]'s rows by price. It was meant to isolate the
/// storage-to-compute wire (every row to compute, ten to the client); since
/// top-k moved into the regions each region sends its own ten, so it
/// measures that push-down instead.
pub const TOPN: &str = include_str!("../tests/tpch/topn.sql");

/// The text of a query by name: the 22 TPC-H queries (`q1` … `q22`),
/// `scan` and `topn`.
pub fn query(name: &str) -> Option<&'static str> {
    match name {
        "scan" => Some(SCAN),
        "topn" => Some(TOPN),
        _ => crate::answers::query(name),
    }
}

/// The names `--queries` accepts for a list: `all` is the 22 TPC-H
/// queries.
pub fn expand_queries(names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for n in names {
        if n == "all" {
            out.extend(crate::answers::QUERIES.iter().map(|(q, _)| q.to_string()));
        } else {
            out.push(n.clone());
        }
    }
    out
}

/// DuckDB's column types for a query's answer (empty when unknown: only
/// DOUBLE results are then taken as approximate).
pub fn expected_types(query: &str) -> &'static str {
    crate::answers::answer(query, 1.0).map_or("", |(_, t)| t)
}

/// DuckDB's answer (CSV with a header) for a query at a scale factor, when
/// one is known.
pub fn expected(query: &str, sf: f64) -> Option<&'static str> {
    let key = (query, format!("{sf}"));
    Some(match (key.0, key.1.as_str()) {
        ("q1", "0.01") => include_str!("../tests/tpch/answers/q1_sf0.01.csv"),
        ("q1", "0.1") => include_str!("../tests/tpch/answers/q1_sf0.1.csv"),
        ("q1", "1") => include_str!("../tests/tpch/answers/q1_sf1.csv"),
        ("q1", "10") => include_str!("../tests/tpch/answers/q1_sf10.csv"),
        ("q6", "0.01") => include_str!("../tests/tpch/answers/q6_sf0.01.csv"),
        ("q6", "0.1") => include_str!("../tests/tpch/answers/q6_sf0.1.csv"),
        ("q6", "1") => include_str!("../tests/tpch/answers/q6_sf1.csv"),
        ("q6", "10") => include_str!("../tests/tpch/answers/q6_sf10.csv"),
        ("topn", "0.01") => include_str!("../tests/tpch/answers/topn_sf0.01.csv"),
        ("topn", "0.1") => include_str!("../tests/tpch/answers/topn_sf0.1.csv"),
        ("topn", "1") => include_str!("../tests/tpch/answers/topn_sf1.csv"),
        ("topn", "10") => include_str!("../tests/tpch/answers/topn_sf10.csv"),
        _ => return crate::answers::answer(query, sf).map(|(csv, _)| csv),
    })
}

/// One value as text: decimals at their scale, dates as `YYYY-MM-DD`,
/// doubles in their shortest round-trip form (as DuckDB prints them).
pub fn format_value(a: &dyn Array, row: usize) -> String {
    if a.is_null(row) {
        return String::new();
    }
    match a.data_type() {
        DataType::Int64 => a.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::Float64 => a.as_primitive::<Float64Type>().value(row).to_string(),
        DataType::Decimal128(_, s) => {
            format_decimal(a.as_primitive::<Decimal128Type>().value(row), *s)
        }
        DataType::Date32 => format_date(a.as_primitive::<Date32Type>().value(row)),
        DataType::Utf8 => a.as_string::<i32>().value(row).to_string(),
        DataType::Boolean => a.as_boolean().value(row).to_string(),
        // Other widths (EXTRACT's Int32, views): Arrow's own display.
        other => arrow::util::display::array_value_to_string(a, row)
            .unwrap_or_else(|_| format!("<{other}>")),
    }
}

/// Checks a result against an expected CSV: same header, same rows; sums,
/// counts and keys digit for digit, DOUBLE columns to a relative 1e-9.
/// Returns the first difference. ([`crate::answers::check`] without
/// DuckDB's column types.)
pub fn compare(batches: &[RecordBatch], expected_csv: &str) -> Result<(), String> {
    crate::answers::check(batches, expected_csv, "")
}

/// A TPC-H table. One mechanism for all eight: the static facts (name,
/// DDL, column types, size) live in one table of specs, the per-table code
/// in two `match`es (largest handle, row generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    Region,
    Nation,
    Supplier,
    Customer,
    Part,
    PartSupp,
    Orders,
    Lineitem,
}

/// A column's type, as the DDL declares it.
#[derive(Debug, Clone, Copy)]
enum Ty {
    /// BIGINT: keys and integers.
    Int,
    /// DECIMAL(15,2).
    Money,
    /// DATE.
    Date,
    /// CHAR(n) / VARCHAR(n).
    Text,
}

/// What is fixed about a table; indexed by `Table as usize`.
struct Spec {
    name: &'static str,
    ddl: &'static str,
    /// Column types in DDL order (column ids are positions + 1).
    types: &'static [Ty],
    /// Rows at SF 1; `fixed`: the same at every scale factor.
    rows_sf1: f64,
    fixed: bool,
    /// Bytes a row takes as a row-layout KV and in a pack, roughly (as
    /// measured at SF 0.1); size the pre-split.
    row_bytes: u64,
    packed_bytes: u64,
    /// The loader sizes a table's regions by its estimated bytes; a spread
    /// table gets at least four per store whatever its size, so scans of
    /// it keep every store busy.
    spread: bool,
}

const SPECS: [Spec; 8] = {
    use Ty::*;
    [
        Spec {
            name: "region",
            ddl: include_str!("../tests/tpch/ddl/region.sql"),
            types: &[Int, Text, Text],
            rows_sf1: 5.0,
            fixed: true,
            row_bytes: 100,
            packed_bytes: 100,
            spread: false,
        },
        Spec {
            name: "nation",
            ddl: include_str!("../tests/tpch/ddl/nation.sql"),
            types: &[Int, Text, Int, Text],
            rows_sf1: 25.0,
            fixed: true,
            row_bytes: 110,
            packed_bytes: 110,
            spread: false,
        },
        Spec {
            name: "supplier",
            ddl: include_str!("../tests/tpch/ddl/supplier.sql"),
            types: &[Int, Text, Text, Int, Text, Money, Text],
            rows_sf1: 10_000.0,
            fixed: false,
            row_bytes: 190,
            packed_bytes: 135,
            spread: false,
        },
        Spec {
            name: "customer",
            ddl: include_str!("../tests/tpch/ddl/customer.sql"),
            types: &[Int, Text, Text, Int, Text, Money, Text, Text],
            rows_sf1: 150_000.0,
            fixed: false,
            row_bytes: 195,
            packed_bytes: 160,
            spread: false,
        },
        Spec {
            name: "part",
            ddl: include_str!("../tests/tpch/ddl/part.sql"),
            types: &[Int, Text, Text, Text, Text, Int, Text, Money, Text],
            rows_sf1: 200_000.0,
            fixed: false,
            row_bytes: 155,
            packed_bytes: 70,
            spread: false,
        },
        Spec {
            name: "partsupp",
            ddl: include_str!("../tests/tpch/ddl/partsupp.sql"),
            types: &[Int, Int, Int, Money, Text],
            rows_sf1: 800_000.0,
            fixed: false,
            row_bytes: 172,
            packed_bytes: 140,
            spread: false,
        },
        Spec {
            name: "orders",
            ddl: include_str!("../tests/tpch/ddl/orders.sql"),
            types: &[Int, Int, Text, Money, Date, Text, Text, Int, Text],
            rows_sf1: 1_500_000.0,
            fixed: false,
            row_bytes: 138,
            packed_bytes: 86,
            spread: true,
        },
        Spec {
            name: "lineitem",
            ddl: LINEITEM_DDL,
            types: &[
                Int, Int, Int, Int, Money, Money, Money, Money, Text, Text, Date, Date, Date, Text,
                Text, Text,
            ],
            rows_sf1: 6_001_215.0,
            fixed: false,
            row_bytes: 140,
            packed_bytes: 60,
            spread: true,
        },
    ]
};

impl Table {
    /// All eight, in load order: the small tables first.
    pub const ALL: [Table; 8] = [
        Table::Region,
        Table::Nation,
        Table::Supplier,
        Table::Customer,
        Table::Part,
        Table::PartSupp,
        Table::Orders,
        Table::Lineitem,
    ];

    fn spec(self) -> &'static Spec {
        &SPECS[self as usize]
    }

    /// The table's SQL name (`lineitem`, `partsupp`, ...).
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// `CREATE TABLE <name> (...)`, exactly as Quarry creates it.
    pub fn ddl(self) -> &'static str {
        self.spec().ddl
    }

    /// The (column id, type) of every column, as [`Table::ddl`] creates
    /// them (ids are positions + 1).
    pub fn columns(self) -> Vec<(i64, DataType)> {
        self.spec()
            .types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let dt = match t {
                    Ty::Int => DataType::Int64,
                    Ty::Money => DataType::Decimal128(15, 2),
                    Ty::Date => DataType::Date32,
                    Ty::Text => DataType::Utf8,
                };
                (i as i64 + 1, dt)
            })
            .collect()
    }

    /// Approximate rows at a scale factor.
    pub fn approx_rows(self, sf: f64) -> u64 {
        let s = self.spec();
        if s.fixed {
            s.rows_sf1 as u64
        } else {
            (s.rows_sf1 * sf) as u64
        }
    }

    /// Approximate bytes of a row as a row-layout KV.
    pub fn row_bytes(self) -> u64 {
        self.spec().row_bytes
    }

    /// Approximate bytes of a row in a pack (the column layout): the text
    /// columns barely shrink, the numbers and dates do.
    pub fn packed_row_bytes(self) -> u64 {
        self.spec().packed_bytes
    }

    /// Whether the loader spreads the table over every store even when it
    /// is small (lineitem and orders, the tables most queries scan).
    pub fn spread(self) -> bool {
        self.spec().spread
    }

    /// One past the largest handle at a scale factor.
    pub fn handle_end(self, sf: f64) -> i64 {
        let parts = || PartGenerator::calculate_row_count(sf, 1, 1);
        let orders = || OrderGenerator::calculate_row_count(sf, 1, 1);
        match self {
            // Keys 0..n.
            Table::Region | Table::Nation => self.approx_rows(sf) as i64,
            // Keys 1..=n.
            Table::Supplier => SupplierGenerator::calculate_row_count(sf, 1, 1) + 1,
            Table::Customer => CustomerGenerator::calculate_row_count(sf, 1, 1) + 1,
            Table::Part => parts() + 1,
            Table::PartSupp => partsupp_handle(parts() + 1, 0),
            Table::Orders => OrderGenerator::make_order_key(orders()) + 1,
            Table::Lineitem => lineitem_handle(OrderGenerator::make_order_key(orders()) + 1, 0),
        }
    }

    /// Split handles cutting the table into `regions` ranges of about
    /// equal size (fewer when the table has fewer handles than that).
    pub fn split_handles(self, sf: f64, regions: usize) -> Vec<i64> {
        let end = self.handle_end(sf) as i128;
        let n = regions.max(1) as i128;
        let mut splits: Vec<i64> = (1..n).map(|i| (end * i / n) as i64).collect();
        splits.retain(|s| *s > 0);
        splits.dedup();
        splits
    }

    /// Generates part `part` of `parts` (1-based) of the table at `sf`:
    /// dbgen's rows in handle order, calling `row(handle, columns)` with
    /// one datum per column of [`Table::columns`]. Parts cover the table
    /// exactly once (region and nation, which tpchgen does not split, come
    /// whole in part 1).
    pub fn generate_part(
        self,
        sf: f64,
        part: i32,
        parts: i32,
        mut row: impl FnMut(i64, &[(i64, Datum<'_>)]) -> quarry_coprocessor::Result<()>,
    ) -> quarry_coprocessor::Result<()> {
        use Datum::{Bytes, Date, Decimal, Int};
        // Scratch for the columns tpchgen hands out as `Display` values.
        let (mut a, mut b, mut c) = (String::new(), String::new(), String::new());
        match self {
            Table::Region | Table::Nation if part != 1 => {}
            Table::Region => {
                for r in RegionGenerator::new(sf, part, parts).iter() {
                    row(
                        r.r_regionkey,
                        &[
                            (1, Int(r.r_regionkey)),
                            (2, Bytes(r.r_name.as_bytes())),
                            (3, Bytes(r.r_comment.as_bytes())),
                        ],
                    )?;
                }
            }
            Table::Nation => {
                for n in NationGenerator::new(sf, part, parts).iter() {
                    row(
                        n.n_nationkey,
                        &[
                            (1, Int(n.n_nationkey)),
                            (2, Bytes(n.n_name.as_bytes())),
                            (3, Int(n.n_regionkey)),
                            (4, Bytes(n.n_comment.as_bytes())),
                        ],
                    )?;
                }
            }
            Table::Supplier => {
                for_each_prefetched(
                    SupplierGenerator::new(sf, part, parts).iter(),
                    |r| r.s_comment.as_bytes(),
                    |s| {
                        row(
                            s.s_suppkey,
                            &[
                                (1, Int(s.s_suppkey)),
                                (2, Bytes(text(&mut a, s.s_name))),
                                (3, Bytes(text(&mut b, &s.s_address))),
                                (4, Int(s.s_nationkey)),
                                (5, Bytes(text(&mut c, &s.s_phone))),
                                (6, Decimal(s.s_acctbal.0 as i128)),
                                (7, Bytes(s.s_comment.as_bytes())),
                            ],
                        )
                    },
                )?;
            }
            Table::Customer => {
                for_each_prefetched(
                    CustomerGenerator::new(sf, part, parts).iter(),
                    |r| r.c_comment.as_bytes(),
                    |cu| {
                        row(
                            cu.c_custkey,
                            &[
                                (1, Int(cu.c_custkey)),
                                (2, Bytes(text(&mut a, cu.c_name))),
                                (3, Bytes(text(&mut b, &cu.c_address))),
                                (4, Int(cu.c_nationkey)),
                                (5, Bytes(text(&mut c, &cu.c_phone))),
                                (6, Decimal(cu.c_acctbal.0 as i128)),
                                (7, Bytes(cu.c_mktsegment.as_bytes())),
                                (8, Bytes(cu.c_comment.as_bytes())),
                            ],
                        )
                    },
                )?;
            }
            Table::Part => {
                for_each_prefetched(
                    PartGenerator::new(sf, part, parts).iter(),
                    |r| r.p_comment.as_bytes(),
                    |p| {
                        row(
                            p.p_partkey,
                            &[
                                (1, Int(p.p_partkey)),
                                (2, Bytes(text(&mut a, &p.p_name))),
                                (3, Bytes(text(&mut b, p.p_mfgr))),
                                (4, Bytes(text(&mut c, p.p_brand))),
                                (5, Bytes(p.p_type.as_bytes())),
                                (6, Int(p.p_size as i64)),
                                (7, Bytes(p.p_container.as_bytes())),
                                (8, Decimal(p.p_retailprice.0 as i128)),
                                (9, Bytes(p.p_comment.as_bytes())),
                            ],
                        )
                    },
                )?;
            }
            Table::PartSupp => {
                // Four rows per part, consecutive: number them within it.
                let (mut last, mut i) = (i64::MIN, 0);
                for_each_prefetched(
                    PartSuppGenerator::new(sf, part, parts).iter(),
                    |r| r.ps_comment.as_bytes(),
                    |ps| {
                        i = if ps.ps_partkey == last { i + 1 } else { 0 };
                        last = ps.ps_partkey;
                        row(
                            partsupp_handle(ps.ps_partkey, i),
                            &[
                                (1, Int(ps.ps_partkey)),
                                (2, Int(ps.ps_suppkey)),
                                (3, Int(ps.ps_availqty as i64)),
                                (4, Decimal(ps.ps_supplycost.0 as i128)),
                                (5, Bytes(ps.ps_comment.as_bytes())),
                            ],
                        )
                    },
                )?;
            }
            Table::Orders => {
                for_each_prefetched(
                    OrderGenerator::new(sf, part, parts).iter(),
                    |r| r.o_comment.as_bytes(),
                    |o| {
                        row(
                            o.o_orderkey,
                            &[
                                (1, Int(o.o_orderkey)),
                                (2, Int(o.o_custkey)),
                                (3, Bytes(o.o_orderstatus.as_str().as_bytes())),
                                (4, Decimal(o.o_totalprice.0 as i128)),
                                (5, Date(o.o_orderdate.to_unix_epoch())),
                                (6, Bytes(o.o_orderpriority.as_bytes())),
                                (7, Bytes(text(&mut a, o.o_clerk))),
                                (8, Int(o.o_shippriority as i64)),
                                (9, Bytes(o.o_comment.as_bytes())),
                            ],
                        )
                    },
                )?;
            }
            Table::Lineitem => {
                for_each_prefetched(
                    LineItemGenerator::new(sf, part, parts).iter(),
                    |r| r.l_comment.as_bytes(),
                    |li| {
                        row(
                            lineitem_handle(li.l_orderkey, li.l_linenumber),
                            &[
                                (1, Int(li.l_orderkey)),
                                (2, Int(li.l_partkey)),
                                (3, Int(li.l_suppkey)),
                                (4, Int(li.l_linenumber as i64)),
                                (5, Decimal(li.l_quantity as i128 * 100)),
                                (6, Decimal(li.l_extendedprice.0 as i128)),
                                (7, Decimal(li.l_discount.0 as i128)),
                                (8, Decimal(li.l_tax.0 as i128)),
                                (9, Bytes(li.l_returnflag.as_bytes())),
                                (10, Bytes(li.l_linestatus.as_bytes())),
                                (11, Date(li.l_shipdate.to_unix_epoch())),
                                (12, Date(li.l_commitdate.to_unix_epoch())),
                                (13, Date(li.l_receiptdate.to_unix_epoch())),
                                (14, Bytes(li.l_shipinstruct.as_bytes())),
                                (15, Bytes(li.l_shipmode.as_bytes())),
                                (16, Bytes(li.l_comment.as_bytes())),
                            ],
                        )
                    },
                )?;
            }
        }
        Ok(())
    }

    /// Encodes part `part` of `parts` of the table at `sf` as row-layout KV
    /// pairs of table `table_id`, calling `emit(handle, key, value)` per
    /// row.
    pub fn encode_part(
        self,
        sf: f64,
        part: i32,
        parts: i32,
        table_id: i64,
        mut emit: impl FnMut(i64, &[u8], &[u8]),
    ) -> quarry_coprocessor::Result<()> {
        let mut enc = RowEncoder::new();
        let mut key = Vec::with_capacity(32);
        let mut value = Vec::with_capacity(256);
        self.generate_part(sf, part, parts, |h, cols| {
            key.clear();
            append_record_key(&mut key, table_id, h);
            value.clear();
            enc.encode(cols, &mut value)?;
            emit(h, &key, &value);
            Ok(())
        })
    }
}

impl Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Table {
    type Err = String;

    /// A table by its SQL name, case-insensitively.
    fn from_str(s: &str) -> Result<Table, String> {
        Table::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                let names: Vec<&str> = Table::ALL.iter().map(|t| t.name()).collect();
                format!(
                    "unknown TPC-H table '{s}'; tables are: {}",
                    names.join(", ")
                )
            })
    }
}

/// Rows a generator hands over at a time ([`for_each_prefetched`]).
const PREFETCH_ROWS: usize = 64;

/// Calls `f` with every row of `rows`, [`PREFETCH_ROWS`] at a time, after
/// touching each of those rows' long text (`text`).
///
/// tpchgen's comments are slices of a 300 MB text pool at random places,
/// so copying one into a pack is a cache miss and a TLB miss, and with a
/// row's other work between two copies the CPU waits for each in turn:
/// that copy was a third of a lineitem load's CPU. Reading a byte of every
/// cache line of the next rows' comments in one short loop lets those
/// misses overlap, and the copies then hit the cache.
fn for_each_prefetched<T>(
    mut rows: impl Iterator<Item = T>,
    text: impl Fn(&T) -> &[u8],
    mut f: impl FnMut(T) -> quarry_coprocessor::Result<()>,
) -> quarry_coprocessor::Result<()> {
    let mut chunk = Vec::with_capacity(PREFETCH_ROWS);
    loop {
        chunk.extend(rows.by_ref().take(PREFETCH_ROWS));
        if chunk.is_empty() {
            return Ok(());
        }
        let mut touched = 0u8;
        for r in &chunk {
            let t = text(r);
            for i in (0..t.len()).step_by(64).chain(t.len().checked_sub(1)) {
                touched ^= t[i];
            }
        }
        std::hint::black_box(touched);
        for r in chunk.drain(..) {
            f(r)?;
        }
    }
}

/// `v` formatted into `buf` (cleared first).
fn text(buf: &mut String, v: impl Display) -> &[u8] {
    buf.clear();
    // Formatting into a String cannot fail.
    let _ = write!(buf, "{v}");
    buf.as_bytes()
}

/// The handle of a lineitem row: its primary key (orderkey, linenumber)
/// packed into one integer, so rows sort by order as dbgen writes them.
pub fn lineitem_handle(orderkey: i64, linenumber: i32) -> i64 {
    orderkey * 8 + linenumber as i64
}

/// The handle of the `i`th (0..4) partsupp row of part `partkey`: dbgen
/// writes a part's four suppliers one after another.
pub fn partsupp_handle(partkey: i64, i: i64) -> i64 {
    partkey * 4 + i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_rows_match_the_known_row_count_and_first_row() {
        let mut n = 0;
        let mut first = None;
        let mut handles_sorted = true;
        let mut last = i64::MIN;
        Table::Lineitem
            .encode_part(0.01, 1, 1, 7, |h, k, v| {
                n += 1;
                if first.is_none() {
                    first = Some((h, k.to_vec(), v.len()));
                }
                handles_sorted &= h > last;
                last = h;
            })
            .unwrap();
        assert_eq!(n, 60_175, "lineitem rows at SF 0.01");
        assert!(handles_sorted, "dbgen order is handle order");
        assert_eq!(first.unwrap().0, lineitem_handle(1, 1));
        assert!(last < Table::Lineitem.handle_end(0.01));
        assert_eq!(Table::Lineitem.split_handles(0.01, 4).len(), 3);
    }

    /// Rows and the largest handle of part `part` of `parts`; checks that
    /// handles increase and that every row has one datum per column, of
    /// the column's id.
    fn generate(t: Table, sf: f64, part: i32, parts: i32) -> (u64, Option<i64>) {
        let ids: Vec<i64> = t.columns().iter().map(|(id, _)| *id).collect();
        let (mut n, mut last) = (0u64, None);
        t.generate_part(sf, part, parts, |h, cols| {
            assert!(last.is_none_or(|l| h > l), "{t}: handle {h} after {last:?}");
            let got: Vec<i64> = cols.iter().map(|(id, _)| *id).collect();
            assert_eq!(got, ids, "{t}: column ids");
            last = Some(h);
            n += 1;
            Ok(())
        })
        .unwrap();
        (n, last)
    }

    #[test]
    fn every_table_has_the_known_row_count_and_handles_in_range() {
        let known = [
            (Table::Region, 5),
            (Table::Nation, 25),
            (Table::Supplier, 100),
            (Table::Customer, 1_500),
            (Table::Part, 2_000),
            (Table::PartSupp, 8_000),
            (Table::Orders, 15_000),
            (Table::Lineitem, 60_175),
        ];
        assert_eq!(known.map(|(t, _)| t), Table::ALL);
        for (t, rows) in known {
            let end = t.handle_end(0.01);
            let (n, last) = generate(t, 0.01, 1, 1);
            assert_eq!(n, rows, "{t} rows at SF 0.01");
            assert!(last.unwrap() < end, "{t}: last handle {last:?}, end {end}");
            // The estimate sizes regions: within 1% of the truth.
            let approx = t.approx_rows(0.01) as f64;
            assert!((approx - rows as f64).abs() <= rows as f64 / 100.0, "{t}");

            // Three parts: each in handle order, after the one before,
            // the same rows in all.
            let (mut total, mut prev) = (0, None);
            for part in 1..=3 {
                let mut first = None;
                let (mut n, mut last) = (0, None);
                t.generate_part(0.01, part, 3, |h, _| {
                    assert!(last.is_none_or(|l| h > l), "{t} part {part}");
                    first.get_or_insert(h);
                    last = Some(h);
                    n += 1;
                    Ok(())
                })
                .unwrap();
                if let (Some(p), Some(f)) = (prev, first) {
                    assert!(f > p, "{t}: part {part} starts at {f}, before {p}");
                }
                prev = last.or(prev);
                total += n;
            }
            assert_eq!(total, rows, "{t} rows over 3 parts");
        }
    }

    #[test]
    fn columns_match_the_ddl() {
        use quarry_compute::sql::{parse, Statement};
        for t in Table::ALL {
            let Statement::CreateTable(ct) = parse(t.ddl()).unwrap() else {
                panic!("{t}: not a CREATE TABLE");
            };
            let def = ct.table_def();
            assert_eq!(def.name, t.name());
            let from_ddl: Vec<(i64, DataType)> = def
                .columns
                .iter()
                .map(|c| {
                    let ft = c.field_type.as_ref().unwrap();
                    (c.id, quarry_coprocessor::types::arrow_type(ft).unwrap())
                })
                .collect();
            assert_eq!(from_ddl, t.columns(), "{t}");
            assert_eq!(t.name().parse::<Table>(), Ok(t));
        }
        assert!("nope".parse::<Table>().is_err());
    }

    #[test]
    fn split_handles_are_increasing_and_inside_the_table() {
        for t in Table::ALL {
            for regions in [1, 2, 12, 100] {
                let s = t.split_handles(0.01, regions);
                assert!(s.len() < regions.max(1), "{t} {regions}");
                assert!(s.windows(2).all(|w| w[0] < w[1]), "{t} {regions}");
                assert!(s.iter().all(|&h| h > 0 && h < t.handle_end(0.01)));
            }
        }
        assert_eq!(Table::Nation.split_handles(0.01, 100).len(), 24);
        assert_eq!(Table::Region.split_handles(0.01, 1), Vec::<i64>::new());
    }

    #[test]
    fn compare_reports_the_first_difference() {
        use std::sync::Arc;
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("revenue", DataType::Decimal128(38, 4), true),
            arrow::datatypes::Field::new("avg", DataType::Float64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(
                    arrow::array::Decimal128Array::from(vec![11930532253i128])
                        .with_precision_and_scale(38, 4)
                        .unwrap(),
                ),
                Arc::new(arrow::array::Float64Array::from(vec![25.522005853257337])),
            ],
        )
        .unwrap();
        assert_eq!(
            compare(
                std::slice::from_ref(&batch),
                "revenue,avg\n1193053.2253,25.522005853257340\n"
            ),
            Ok(())
        );
        assert_eq!(
            compare(&[batch], "revenue,avg\n1193053.2254,25.5\n"),
            Err("row 1 column revenue: got 1193053.2253, expected 1193053.2254".into())
        );
    }
}
