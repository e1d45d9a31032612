//! `quarry load parquet|csv` against a playground: a Parquet file (written
//! here with the `parquet` crate's ArrowWriter, zstd-compressed) into a new
//! table, a CSV file into an existing table with exact decimals, and the
//! errors a user sees for a type that does not convert, an unknown column
//! and a duplicate key. Answers are checked by construction: the files'
//! values follow formulas whose sums are known.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, RecordBatch,
    StringArray,
};
use arrow::datatypes::{DataType, Field, Schema};
use common::{Playground, QUARRY, SERIAL};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

fn load(pg: &Playground, format: &str, table: &str, files: &[&Path], extra: &[&str]) -> Output {
    Command::new(QUARRY)
        .args(["load", format, "--store"])
        .arg(pg.store_addrs().join(","))
        .args(["--table", table])
        .args(extra)
        .args(files)
        .output()
        .expect("run quarry load")
}

fn succeeded(out: &Output) -> String {
    assert!(
        out.status.success(),
        "load failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "load should fail; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `n` rows, in batches of 1000: id = i (Int32), price = i + i/100 as
/// DECIMAL(12,2) (unscaled i*100 + i%100), day = 2020-01-01 + i % 366,
/// name = "name-i" (NULL every 7th row), ratio = i / 4 (Float64), even
/// (Boolean: tables have no BOOLEAN columns, so BIGINT 0 or 1).
fn write_parquet(path: &Path, n: i32) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, false),
        Field::new("price", DataType::Decimal128(12, 2), false),
        Field::new("day", DataType::Date32, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("ratio", DataType::Float64, true),
        Field::new("even", DataType::Boolean, true),
    ]));
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(5000))
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        schema.clone(),
        Some(props),
    )
    .unwrap();
    let epoch_2020 = 18262;
    for start in (0..n).step_by(1000) {
        let ids: Vec<i32> = (start..(start + 1000).min(n)).collect();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(ids.clone())),
            Arc::new(
                Decimal128Array::from(
                    ids.iter()
                        .map(|&i| i as i128 * 100 + (i % 100) as i128)
                        .collect::<Vec<_>>(),
                )
                .with_precision_and_scale(12, 2)
                .unwrap(),
            ),
            Arc::new(Date32Array::from(
                ids.iter()
                    .map(|&i| epoch_2020 + i % 366)
                    .collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                ids.iter()
                    .map(|&i| (i % 7 != 0).then(|| format!("name-{i}")))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(
                ids.iter().map(|&i| i as f64 / 4.0).collect::<Vec<_>>(),
            )),
            Arc::new(BooleanArray::from(
                ids.iter().map(|&i| i % 2 == 0).collect::<Vec<_>>(),
            )),
        ];
        w.write(&RecordBatch::try_new(schema.clone(), cols).unwrap())
            .unwrap();
    }
    w.close().unwrap();
}

#[test]
fn a_parquet_file_loads_into_a_new_table_with_its_types_and_exact_values() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("items.parquet");
    let n = 20_000;
    write_parquet(&file, n);

    let out = succeeded(&load(
        &pg,
        "parquet",
        "items",
        &[&file],
        &["--batch-rows", "3000"],
    ));
    assert!(
        out.contains("loaded 20000 rows") && out.contains("into new table items"),
        "{out}"
    );
    assert!(out.contains("matches the source"), "{out}");

    // The types came from the file.
    let described = pg.ok("DESCRIBE items");
    for want in [
        "id,BIGINT,NO",
        "price,\"DECIMAL(12,2)\",NO",
        "day,DATE,NO",
        "name,VARCHAR,YES",
        "ratio,DOUBLE,YES",
        "even,BIGINT,YES",
    ] {
        assert!(described.contains(want), "{want} in {described}");
    }
    // Sums known by construction: id 0..n; price = id + (id % 100)/100.
    let ids: i64 = (0..n as i64).sum();
    let cents: i64 = (0..n as i64).map(|i| i * 100 + i % 100).sum();
    let names = (0..n).filter(|i| i % 7 != 0).count();
    let got =
        pg.ok("SELECT count(*), sum(id), sum(price), count(name), sum(even), max(day) FROM items");
    assert_eq!(
        got.lines().nth(1).unwrap(),
        format!(
            "{n},{ids},{}.{:02},{names},{},2020-12-31",
            cents / 100,
            cents % 100,
            n / 2
        )
    );
    assert_eq!(
        pg.ok("SELECT name, price, ratio FROM items WHERE id = 12345")
            .lines()
            .nth(1)
            .unwrap(),
        "name-12345,12345.45,3086.25"
    );
    // Rows inserted afterwards get handles past the loaded ones.
    pg.ok("INSERT INTO items (id, price, day) VALUES (-1, 0.50, DATE '2021-01-01')");
    assert_eq!(
        pg.ok("SELECT count(*) FROM items").lines().nth(1).unwrap(),
        (n + 1).to_string()
    );

    // Loading it again appends: the table exists now, so every batch is a
    // transaction, and the checksum compares what the load added.
    let again = succeeded(&load(&pg, "parquet", "items", &[&file], &["--quiet"]));
    assert!(again.contains("into existing table items"), "{again}");
    assert_eq!(
        pg.ok("SELECT count(*) FROM items").lines().nth(1).unwrap(),
        (2 * n + 1).to_string()
    );
}

#[test]
fn a_csv_file_loads_into_an_existing_table_by_column_name_and_errors_name_the_problem() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE accounts (id BIGINT PRIMARY KEY, owner VARCHAR(10) NOT NULL, balance DECIMAL(15,2), opened DATE)");
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("accounts.csv");
    // Columns in another order than the table's, one value without
    // decimals, one empty balance (NULL).
    let mut text = String::from("balance,id,opened,owner\n");
    for i in 1..=2500 {
        let balance = if i == 7 {
            String::new()
        } else if i == 8 {
            "100".into()
        } else {
            format!("{i}.{:02}", i % 100)
        };
        text.push_str(&format!("{balance},{i},2024-02-{:02},o{i}\n", 1 + i % 28));
    }
    std::fs::write(&csv, text).unwrap();
    let out = succeeded(&load(
        &pg,
        "csv",
        "accounts",
        &[&csv],
        &["--batch-rows", "1000"],
    ));
    assert!(
        out.contains("loaded 2500 rows") && out.contains("existing table accounts"),
        "{out}"
    );
    // Exact: the sum of i + (i%100)/100 over 1..=2500 without rows 7 and 8,
    // plus 100.
    let cents: i64 = (1..=2500i64)
        .filter(|i| *i != 7 && *i != 8)
        .map(|i| i * 100 + i % 100)
        .sum::<i64>()
        + 10_000;
    assert_eq!(
        pg.ok("SELECT count(*), count(balance), sum(balance) FROM accounts")
            .lines()
            .nth(1)
            .unwrap(),
        format!("2500,2499,{}.{:02}", cents / 100, cents % 100)
    );
    assert_eq!(
        pg.ok("SELECT owner, opened FROM accounts WHERE id = 30")
            .lines()
            .nth(1)
            .unwrap(),
        "o30,2024-02-03"
    );

    // The same keys again: the first batch's transaction fails on a
    // duplicate key, nothing of it is kept, and the error says so.
    let dup = failed(&load(&pg, "csv", "accounts", &[&csv], &["--quiet"]));
    assert!(dup.contains("duplicate key"), "{dup}");
    assert!(dup.contains("0 rows were committed to accounts"), "{dup}");
    assert_eq!(
        pg.ok("SELECT count(*) FROM accounts")
            .lines()
            .nth(1)
            .unwrap(),
        "2500"
    );

    // A column the table does not have.
    let extra = dir.path().join("extra.csv");
    std::fs::write(&extra, "id,owner,color\n9001,x,red\n").unwrap();
    let e = failed(&load(&pg, "csv", "accounts", &[&extra], &[]));
    assert!(
        e.contains("the file's column 'color' is not in table accounts"),
        "{e}"
    );
    // A value that does not fit VARCHAR(10).
    let long = dir.path().join("long.csv");
    std::fs::write(&long, "id,owner\n9002,abcdefghijk\n").unwrap();
    let e = failed(&load(&pg, "csv", "accounts", &[&long], &[]));
    assert!(e.contains("too long for VARCHAR(10)"), "{e}");
    // A Parquet DOUBLE does not go into a DECIMAL column.
    let parquet = dir.path().join("items.parquet");
    write_parquet(&parquet, 10);
    pg.ok("CREATE TABLE prices (id BIGINT, ratio DECIMAL(10,2))");
    let only = dir.path().join("ratio.parquet");
    {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ratio",
            DataType::Float64,
            false,
        )]));
        let mut w =
            ArrowWriter::try_new(std::fs::File::create(&only).unwrap(), schema.clone(), None)
                .unwrap();
        w.write(
            &RecordBatch::try_new(schema, vec![Arc::new(Float64Array::from(vec![1.5]))]).unwrap(),
        )
        .unwrap();
        w.close().unwrap();
    }
    let e = failed(&load(&pg, "parquet", "prices", &[&only], &[]));
    assert!(
        e.contains("column ratio: the file has Float64, which does not convert to DECIMAL(10,2)"),
        "{e}"
    );
    assert_eq!(
        pg.ok("SELECT count(*) FROM prices").lines().nth(1).unwrap(),
        "0"
    );
}

#[test]
fn a_load_into_a_table_with_indexes_writes_their_entries_and_a_unique_one_refuses_duplicates() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    pg.ok("CREATE TABLE people (id BIGINT PRIMARY KEY, team BIGINT, email VARCHAR(40))");
    pg.ok("CREATE INDEX people_team ON people (team)");
    pg.ok("CREATE UNIQUE INDEX people_email ON people (email)");
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("people.csv");
    // Team i % 50 (NULL every 97th row), email e{i}@x.
    let mut text = String::from("id,team,email\n");
    for i in 1..=3000 {
        let team = if i % 97 == 0 {
            String::new()
        } else {
            (i % 50).to_string()
        };
        text.push_str(&format!("{i},{team},e{i}@x\n"));
    }
    std::fs::write(&csv, text).unwrap();
    let out = succeeded(&load(
        &pg,
        "csv",
        "people",
        &[&csv],
        &["--batch-rows", "1000"],
    ));
    assert!(out.contains("loaded 3000 rows"), "{out}");
    // The lookups go through the entries the load wrote: what the index
    // finds is what a full scan (`+ 0`, which no index answers) finds.
    let plan = pg.ok("EXPLAIN SELECT count(*) FROM people WHERE team = 7");
    assert!(plan.contains("index lookup: people_team"), "{plan}");
    let by_scan = |v: i64| {
        (1..=3000i64)
            .filter(|i| i % 97 != 0 && i % 50 == v)
            .count()
            .to_string()
    };
    for v in [0, 7, 49] {
        assert_eq!(
            pg.ok(&format!("SELECT count(*) FROM people WHERE team = {v}"))
                .lines()
                .nth(1)
                .unwrap(),
            by_scan(v),
            "team = {v}"
        );
    }
    let email = pg.ok("EXPLAIN SELECT id FROM people WHERE email = 'e2024@x'");
    assert!(email.contains("index lookup: people_email"), "{email}");
    assert_eq!(
        pg.ok("SELECT id FROM people WHERE email = 'e2024@x'")
            .lines()
            .nth(1)
            .unwrap(),
        "2024"
    );
    // New keys with an email the table has: the unique index refuses the
    // batch by name, and nothing of it is kept.
    let dup = dir.path().join("dup.csv");
    std::fs::write(&dup, "id,team,email\n5001,1,new@x\n5002,1,e17@x\n").unwrap();
    let e = failed(&load(&pg, "csv", "people", &[&dup], &["--quiet"]));
    assert!(e.contains("people_email"), "{e}");
    assert!(e.contains("0 rows were committed to people"), "{e}");
    assert_eq!(
        pg.ok("SELECT count(*) FROM people WHERE id > 5000")
            .lines()
            .nth(1)
            .unwrap(),
        "0"
    );
    // A key twice in one batch is named as the key, not as an index's
    // duplicate entry.
    let twice = dir.path().join("twice.csv");
    std::fs::write(&twice, "id,team,email\n6001,1,a@x\n6001,2,b@x\n").unwrap();
    let e = failed(&load(&pg, "csv", "people", &[&twice], &["--quiet"]));
    assert!(e.contains("primary key 6001 appears twice"), "{e}");
}
