//! Restoring a backup: check every file, build each table under a name of
//! its own, compare checksums, then give it its name and its indexes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Int64Type};
use bytes::Bytes;
use object_store::path::Path as StorePath;
use object_store::ObjectStoreExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use prost::Message;
use quarry_compute::cluster::Routes;
use quarry_compute::engine::QueryEngine;
use quarry_coprocessor::codec::key::{pack_key, record_key};
use quarry_coprocessor::codec::pack::PackBuilder;
use quarry_coprocessor::codec::row::{array_datum, Datum, RowEncoder};
use quarry_coprocessor::types::arrow_type;
use quarry_proto::meta::{IndexState, TableDef, ViewDef};
use quarry_raftstore::meta::restores::{REPLACED, RESTORE_REQUEST, RESTORING};
use tokio::sync::mpsc;

use super::lease::RestoreLease;
use super::manifest::{FileEntry, Manifest, TableEntry, ViewEntry, MANIFEST};
use super::{Location, TableDone};
use crate::load::{create_presplit, write_batches, Sink, WritePath, REGION_BYTES, SST_BATCH_BYTES};
use crate::load_file::{quote, table_checksum, Checksum};

#[derive(Debug, Clone)]
pub struct RestoreOptions {
    /// The backup's directory (absolute, or `file://`).
    pub location: String,
    /// Empty: every table in the backup.
    pub tables: Vec<String>,
    /// Drop a table of the same name (else it is an error).
    pub replace: bool,
}

/// Restores the chosen tables of the backup in `opts.location`.
pub async fn restore(
    engine: &QueryEngine,
    opts: &RestoreOptions,
) -> Result<(Vec<TableDone>, Manifest)> {
    let loc = Location::parse(&opts.location, false)?;
    let manifest = match loc.store.get(&StorePath::from(MANIFEST)).await {
        Ok(got) => Manifest::from_json(&got.bytes().await?, &loc.shown)?,
        Err(object_store::Error::NotFound { .. }) => bail!(
            "{} holds no backup: {MANIFEST} is missing (a backup writes it last, so one that \
             did not finish has none)",
            loc.shown
        ),
        Err(e) => return Err(anyhow!(e).context(format!("reading {}/{MANIFEST}", loc.shown))),
    };
    let chosen = manifest.chosen(&opts.tables, &loc.shown)?;
    // Everything that can be refused is refused before anything is made.
    if !opts.replace {
        for e in &chosen {
            if engine.cluster().get_table(&e.name).await?.is_some() {
                bail!(
                    "table {} exists; drop it first, or RESTORE … WITH REPLACE",
                    e.name
                );
            }
        }
    }
    // The views come back with a restore of every table (a backup of
    // named tables has none).
    let views = if opts.tables.is_empty() {
        manifest.views.as_slice()
    } else {
        &[]
    };
    if !views.is_empty() {
        let have = engine.cluster().catalog().await?;
        if let Some(v) = views
            .iter()
            .find(|v| have.tables.iter().any(|t| t.name == v.name))
        {
            bail!(
                "a table named {} exists; the backup's view of that name cannot be restored",
                v.name
            );
        }
        let exists = views
            .iter()
            .find(|v| have.views.iter().any(|h| h.name == v.name));
        if let (false, Some(v)) = (opts.replace, exists) {
            bail!(
                "view {} exists; drop it first, or RESTORE … WITH REPLACE",
                v.name
            );
        }
    }
    for e in &chosen {
        e.table_def()?;
        check_files(e, &loc.shown)?;
        for f in &e.files {
            fetch(&loc, f).await?;
        }
    }
    // Taken before anything is made: while it lasts, the meta leader
    // leaves this restore's tables alone (`lease.rs`).
    let names: Vec<&str> = chosen.iter().map(|e| e.name.as_str()).collect();
    let _lease = RestoreLease::take(engine, &names).await?;
    let made = make_tables(engine, &chosen).await?;
    let mut done: Vec<TableDone> = Vec::new();
    let mut failed = None;
    for (i, m) in made.iter().enumerate() {
        if failed.is_some() {
            drop_unfinished(engine, &made[i..]).await;
            break;
        }
        match restore_table(engine, &loc, m, opts.replace).await {
            Ok(d) => done.push(d),
            Err(err) if done.is_empty() => {
                failed = Some(err);
            }
            Err(err) => {
                let names: Vec<&str> = done.iter().map(|d| d.table.as_str()).collect();
                failed = Some(err.context(format!(
                    "the tables before it are restored: {}",
                    names.join(", ")
                )));
            }
        }
    }
    if failed.is_none() {
        failed = restore_views(engine, views, opts.replace).await.err();
    }
    // The renames and drops did not each wait for other compute
    // processes' kept catalogs to lapse, as the statements do
    // (`catalog_cache.rs`): the restore waits once, before it answers.
    tokio::time::sleep(quarry_compute::catalog_cache::DDL_SETTLE).await;
    match failed {
        Some(err) => Err(err),
        None => Ok((done, manifest)),
    }
}

/// Defines the backup's views again (replacing those of the same name
/// when `replace`), once every table is restored. Their queries are
/// stored as they were, not planned again: a view over another view
/// needs no order, and each plans when it is used, as it did before.
async fn restore_views(engine: &QueryEngine, views: &[ViewEntry], replace: bool) -> Result<()> {
    for v in views {
        engine
            .cluster()
            .create_view(ViewDef::from(v), replace)
            .await
            .with_context(|| {
                format!("the tables are restored; restoring view {} failed", v.name)
            })?;
    }
    if !views.is_empty() {
        tracing::info!("restored {} views", views.len());
    }
    Ok(())
}

/// What pack building relies on: files in ascending, disjoint handle
/// ranges, their rows adding up to the table's.
fn check_files(e: &TableEntry, shown: &str) -> Result<()> {
    let mut last: Option<i64> = None;
    for f in e.files.iter().filter(|f| f.rows > 0) {
        if f.min_handle > f.max_handle || last.is_some_and(|l| f.min_handle <= l) {
            bail!(
                "the manifest in {shown} is corrupt: file {} of table {} overlaps the files before it",
                f.path,
                e.name
            );
        }
        last = Some(f.max_handle);
    }
    let rows: u64 = e.files.iter().map(|f| f.rows).sum();
    if rows != e.rows {
        bail!(
            "the manifest in {shown} is corrupt: table {}'s files hold {rows} rows, not {}",
            e.name,
            e.rows
        );
    }
    Ok(())
}

/// A file's bytes, checked against its size and CRC-32 in the manifest.
async fn fetch(loc: &Location, f: &FileEntry) -> Result<Bytes> {
    let path = StorePath::from(f.path.as_str());
    let shown = format!("{}/{}", loc.shown, f.path);
    let data = match loc.store.get(&path).await {
        Ok(got) => got
            .bytes()
            .await
            .with_context(|| format!("reading backup file {shown}"))?,
        Err(object_store::Error::NotFound { .. }) => {
            bail!("backup file {shown} is missing")
        }
        Err(e) => return Err(anyhow!(e).context(format!("reading backup file {shown}"))),
    };
    if data.len() as u64 != f.bytes {
        bail!(
            "backup file {shown} is corrupt: {} bytes where the manifest says {}",
            data.len(),
            f.bytes
        );
    }
    let crc = crc32fast::hash(&data);
    if crc != f.crc32 {
        bail!(
            "backup file {shown} is corrupt: its CRC-32 is {crc:08x} where the manifest says {:08x}",
            f.crc32
        );
    }
    Ok(data)
}

/// A table made for a restore, not yet built: `__restore_<name>`,
/// pre-split over the backup's handle range.
struct Made<'a> {
    entry: &'a TableEntry,
    /// The definition in the backup.
    def: TableDef,
    /// The table made for it.
    table: TableDef,
    splits: Vec<i64>,
}

impl Made<'_> {
    fn temp(&self) -> &str {
        &self.table.name
    }
}

/// Makes the table each of `chosen` is built in, all before the first is
/// built, so that the regions of the later ones have elected their
/// leaders by the time their rows come. A failure drops those made.
async fn make_tables<'a>(engine: &QueryEngine, chosen: &[&'a TableEntry]) -> Result<Vec<Made<'a>>> {
    let mut made = Vec::new();
    for e in chosen {
        match make_table(engine, e).await {
            Ok(m) => made.push(m),
            Err(err) => {
                drop_unfinished(engine, &made).await;
                return Err(err.context(format!("making a table to restore {} in", e.name)));
            }
        }
    }
    Ok(made)
}

async fn make_table<'a>(engine: &QueryEngine, e: &'a TableEntry) -> Result<Made<'a>> {
    let def = e.table_def()?;
    let temp = format!("{RESTORING}{}", e.name);
    let meta = engine.cluster().clone();
    // One a crash left behind.
    meta.drop_table(&temp, true).await?;
    let mut new = def.clone();
    new.id = 0;
    new.name = temp.clone();
    new.created_by.clear();
    new.indexes.clear();
    new.next_index_id = 0;
    new.next_column_id = 0;
    new.index_space = true;
    // Meta numbers a new table's columns 1..n: the key is named by its
    // position, not by the id it had (a dropped column before it made
    // that larger).
    new.handle_column_id = def.key_position().map_or(0, |p| p as i64 + 1);
    let stores = meta.get_stores().await?.len();
    let splits = split_handles(e, stores);
    // Marked as a restore's, so that the meta leader drops it if this
    // restore dies before it is named (`quarry_raftstore::meta::restores`).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let request_id = [RESTORE_REQUEST, format!("{}:{nanos:x}", e.name).as_bytes()].concat();
    let (table, _) = create_presplit(&meta, new, &splits, request_id).await?;
    meta.forget_catalog();
    Ok(Made {
        entry: e,
        def,
        table,
        splits,
    })
}

/// Drops tables made for a restore that did not get to them.
async fn drop_unfinished(engine: &QueryEngine, made: &[Made<'_>]) {
    for m in made {
        if let Err(e) = engine.cluster().drop_table(m.temp(), true).await {
            tracing::warn!("dropping {} failed ({e}); drop it by hand", m.temp());
        }
    }
}

/// Restores one table into the table made for it (see the module docs of
/// `backup`).
async fn restore_table(
    engine: &QueryEngine,
    loc: &Location,
    m: &Made<'_>,
    replace: bool,
) -> Result<TableDone> {
    let e = m.entry;
    let started = std::time::Instant::now();
    let built = match build(engine, loc, e, &m.table, m.splits.clone()).await {
        Ok(checking) => {
            let named = std::time::Instant::now();
            let r = take_name(engine, e, m.temp(), replace).await;
            tracing::info!(
                "restored table {}: {} rows; written in {:.1?}, checked in {:.1?}, named in {:.1?}",
                e.name,
                e.rows,
                checking.duration_since(started),
                named.duration_since(checking),
                named.elapsed()
            );
            r
        }
        Err(err) => Err(err),
    };
    if let Err(err) = built {
        let kept = match engine.cluster().drop_table(m.temp(), true).await {
            Ok(_) => "nothing of it was kept".to_string(),
            Err(d) => format!(
                "dropping the half-made {} failed too ({d}); drop it by hand",
                m.temp()
            ),
        };
        return Err(err.context(format!("restoring table {} failed; {kept}", e.name)));
    }
    rebuild_indexes(engine, e, &m.def).await?;
    Ok(TableDone {
        table: e.name.clone(),
        rows: e.rows,
        files: e.files.len() as u64,
        bytes: e.files.iter().map(|f| f.bytes).sum(),
    })
}

/// Regions by the files' size, at least four per store from a million
/// rows (as `quarry load` sizes a table), cut at evenly spaced handles
/// over the backup's handle range.
fn split_handles(e: &TableEntry, stores: usize) -> Vec<i64> {
    let bytes: u64 = e.files.iter().map(|f| f.bytes).sum();
    let by_size = (bytes / REGION_BYTES) as usize + 1;
    let regions = match e.rows >= 1 << 20 {
        true => by_size.max(4 * stores.max(1)),
        false => by_size,
    };
    let filled = || e.files.iter().filter(|f| f.rows > 0);
    let (Some(lo), Some(hi)) = (
        filled().map(|f| f.min_handle).min(),
        filled().map(|f| f.max_handle).max(),
    ) else {
        return vec![];
    };
    let span = hi as i128 - lo as i128 + 1;
    let mut splits: Vec<i64> = (1..regions as i128)
        .map(|i| (lo as i128 + span * i / regions as i128) as i64)
        .filter(|s| *s > lo)
        .collect();
    splits.dedup();
    splits
}

/// Writes the files' rows into `table` (made for them, split at
/// `splits`) and checks the checksums; returns when the checks began.
async fn build(
    engine: &QueryEngine,
    loc: &Location,
    e: &TableEntry,
    table: &TableDef,
    splits: Vec<i64>,
) -> Result<std::time::Instant> {
    let meta = engine.cluster().clone();
    let bytes: u64 = e.files.iter().map(|f| f.bytes).sum();
    let sst = WritePath::Auto.use_sst(bytes);
    let (tx, rx) = mpsc::channel(8);
    let encoder = Arc::new(Encoder::new(table, e.rowid, splits, sst)?);
    let next = Arc::new(AtomicUsize::new(0));
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(e.files.len())
        .max(1);
    let mut workers = Vec::new();
    for _ in 0..threads {
        let (tx, next, encoder) = (tx.clone(), next.clone(), encoder.clone());
        let (store, shown, files) = (loc.store.clone(), loc.shown.clone(), e.files.clone());
        let rt = tokio::runtime::Handle::current();
        workers.push(tokio::task::spawn_blocking(move || -> Result<Checksum> {
            let mut sink = Sink::new(encoder.regions(), tx, encoder.batch_bytes, Arc::default());
            let mut sum = Checksum::new(encoder.columns.len());
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(f) = files.get(i) else { break };
                let loc = Location {
                    store: store.clone(),
                    shown: shown.clone(),
                };
                let data = rt.block_on(fetch(&loc, f))?;
                encoder
                    .file(data, f, &mut sink, &mut sum)
                    .with_context(|| format!("in backup file {shown}/{}", f.path))?;
                if let Some(err) = sink.failed.take() {
                    return Err(err);
                }
            }
            sink.flush()?;
            Ok(sum)
        }));
    }
    drop(tx);
    let (write_error, _all_sst) = write_batches(&meta, rx, sst).await;
    let mut read = Checksum::new(table.columns.len());
    let mut read_error = None;
    for w in workers {
        match w.await? {
            Ok(sum) => read.absorb(&sum),
            Err(err) => {
                read_error.get_or_insert(err);
            }
        }
    }
    // The writer's failure is the cause; the readers then saw it stop.
    if let Some(err) = write_error.or(read_error) {
        return Err(err);
    }
    let handle_end = e.files.iter().map(|f| f.max_handle).max().unwrap_or(0);
    meta.alloc_handles(table.id, 0, handle_end.saturating_add(1))
        .await?;
    let written = std::time::Instant::now();
    let manifest = Checksum::from(&e.checksum);
    if let Some(diff) = read.difference(&manifest, table) {
        bail!("the files' rows do not match the manifest's checksum: {diff} (the files first)");
    }
    // A whole-table aggregate: not bound by the session's statement
    // timeout.
    let long = std::time::Instant::now() + std::time::Duration::from_secs(24 * 3600);
    let stored =
        quarry_compute::statement_deadline::with_deadline(long, table_checksum(engine, table))
            .await?;
    if let Some(diff) = stored.difference(&manifest, table) {
        bail!("the restored table does not match the backup's checksum: {diff} (the table first)");
    }
    Ok(written)
}

/// Gives the built table its name. With `replace`, the table it replaces
/// is renamed aside first and dropped only once the new one has the name
/// (put back if the rename fails), so an interruption leaves both tables,
/// never neither.
async fn take_name(engine: &QueryEngine, e: &TableEntry, temp: &str, replace: bool) -> Result<()> {
    let meta = engine.cluster();
    let aside = format!("{REPLACED}{}", e.name);
    let replacing = replace && meta.get_table(&e.name).await?.is_some();
    if replacing {
        meta.drop_table(&aside, true).await?;
        rename_table(engine, &e.name, &aside).await?;
    }
    // A test's crash lands here: the worst moment, the old table aside
    // and the new one not yet named.
    let _ = quarry_proto::failpoint::hit("restore_before_name");
    if let Err(err) = rename_table(engine, temp, &e.name).await {
        if replacing {
            rename_table(engine, &aside, &e.name)
                .await
                .with_context(|| {
                    format!("and putting the old table back failed: it is {aside} now")
                })?;
        }
        return Err(err);
    }
    if replacing {
        meta.drop_table(&aside, false).await.with_context(|| {
            format!(
                "table {} is restored; dropping the old one ({aside}) failed",
                e.name
            )
        })?;
    }
    Ok(())
}

/// `ALTER TABLE from RENAME TO to`, one meta write, without the
/// statement's wait (the restore waits once, at its end).
async fn rename_table(engine: &QueryEngine, from: &str, to: &str) -> Result<()> {
    let meta = engine.cluster();
    let old = meta
        .get_table(from)
        .await?
        .ok_or_else(|| anyhow!("table {from} is gone"))?;
    let mut new = old.clone();
    new.name = to.to_string();
    meta.alter_table(from, new, old.encode_to_vec())
        .await
        .with_context(|| format!("renaming table {from} to {to}"))?;
    Ok(())
}

/// Builds the table's indexes again, online (their entries are not in
/// the backup). The table is restored whatever happens here.
async fn rebuild_indexes(engine: &QueryEngine, e: &TableEntry, def: &TableDef) -> Result<()> {
    for ix in &def.indexes {
        if ix.state != IndexState::Public as i32 {
            continue;
        }
        let columns: Vec<String> = ix
            .column_ids
            .iter()
            .filter_map(|id| def.columns.iter().find(|c| c.id == *id))
            .map(|c| quote(&c.name))
            .collect();
        let sql = format!(
            "CREATE {}INDEX {} ON {} ({})",
            if ix.unique { "UNIQUE " } else { "" },
            quote(&ix.name),
            quote(&e.name),
            columns.join(", ")
        );
        if columns.len() != ix.column_ids.len() {
            bail!(
                "table {} is restored, but its index {} names a column it no longer has",
                e.name,
                ix.name
            );
        }
        engine.sql(&sql).await.with_context(|| {
            format!(
                "table {} is restored, but rebuilding its index {} failed; run `{sql}`",
                e.name, ix.name
            )
        })?;
    }
    Ok(())
}

/// Encodes a file's rows as the new table's pairs, by region.
struct Encoder {
    table_id: i64,
    /// (column id, type) of every column, in the table's order.
    columns: Vec<(i64, DataType)>,
    packed: bool,
    /// Position of the handle in a file's columns.
    handle_pos: usize,
    /// Position of the table's first column in a file's columns.
    first_column: usize,
    splits: Vec<i64>,
    batch_bytes: usize,
}

impl Encoder {
    fn new(table: &TableDef, rowid: bool, splits: Vec<i64>, sst: bool) -> Result<Encoder> {
        let columns = table
            .columns
            .iter()
            .map(|c| Ok((c.id, arrow_type(&c.field_type.unwrap_or_default())?)))
            .collect::<Result<Vec<_>>>()?;
        let handle_pos = quarry_compute::handle_order::handle_position(table)?;
        Ok(Encoder {
            table_id: table.id,
            columns,
            packed: quarry_compute::txn::is_packed(table),
            handle_pos,
            first_column: usize::from(rowid),
            splits,
            batch_bytes: if sst { SST_BATCH_BYTES } else { 4 << 20 },
        })
    }

    fn regions(&self) -> usize {
        self.splits.len() + 1
    }

    /// Reads one file, adds its values to `sum` and its pairs to `sink`.
    /// A file's rows come in handle order, and its packs end with it.
    fn file(&self, data: Bytes, f: &FileEntry, sink: &mut Sink, sum: &mut Checksum) -> Result<()> {
        let reader = ParquetRecordBatchReaderBuilder::try_new(data)?
            .with_batch_size(8192)
            .build()?;
        let mut packs = match self.packed {
            true => (0..self.regions())
                .map(|_| PackBuilder::new(&self.columns))
                .collect::<quarry_coprocessor::Result<Vec<_>>>()?,
            false => vec![],
        };
        let mut encoder = RowEncoder::default();
        // (first, last) handle so far, and the rows.
        let mut seen: Option<(i64, i64)> = None;
        let mut rows = 0u64;
        for batch in reader {
            // Backups write DECIMAL(p ≤ 18) as Decimal64 (older ones as
            // Decimal128); the table's rows are Decimal128.
            let batch = quarry_coprocessor::ipc::widen(batch?)?;
            let mut row: Vec<(i64, Datum)> = Vec::with_capacity(self.columns.len());
            let arrays: &[ArrayRef] = &batch.columns()[self.first_column..];
            if arrays.len() != self.columns.len() {
                bail!(
                    "{} columns where the table has {}",
                    arrays.len(),
                    self.columns.len()
                );
            }
            for ((_, t), a) in self.columns.iter().zip(arrays) {
                if a.data_type() != t {
                    bail!("a column of type {} where the table has {t}", a.data_type());
                }
            }
            sum.add(arrays)?;
            let handles = batch
                .column(self.handle_pos)
                .as_primitive_opt::<Int64Type>()
                .filter(|h| h.null_count() == 0)
                .ok_or_else(|| anyhow!("the handle column is not BIGINT NOT NULL"))?;
            let handles = handles.values();
            // Ascending within the file, and within the manifest's range.
            let first = handles.first().copied();
            if handles.windows(2).any(|w| w[0] >= w[1])
                || first.is_some_and(|h| seen.is_some_and(|(_, last)| h <= last))
            {
                bail!("its rows are not in ascending handle order");
            }
            if let (Some(lo), Some(hi)) = (first, handles.last().copied()) {
                seen = Some((seen.map_or(lo, |(first, _)| first), hi));
            }
            rows += handles.len() as u64;
            if self.packed {
                // Column by column, a region's run of rows at a time.
                let mut at = 0;
                while at < handles.len() {
                    let region = self.splits.partition_point(|s| *s <= handles[at]);
                    let end = match self.splits.get(region) {
                        Some(next) => at + handles[at..].partition_point(|h| h < next),
                        None => handles.len(),
                    };
                    while at < end {
                        let b = &mut packs[region];
                        at = b.push_arrays(handles, arrays, at, end)?;
                        if at < end || b.is_full() {
                            let (first, v) = b.finish()?;
                            sink.push(region, pack_key(self.table_id, first), v);
                        }
                    }
                }
                continue;
            }
            for (r, &h) in handles.iter().enumerate() {
                row.clear();
                for ((id, t), a) in self.columns.iter().zip(arrays) {
                    row.push((*id, array_datum(a, t, r)?));
                }
                let region = self.splits.partition_point(|s| *s <= h);
                let mut value = Vec::new();
                encoder.encode(&row, &mut value)?;
                sink.push(region, record_key(self.table_id, h), value);
            }
        }
        let range = seen.unwrap_or((f.min_handle, f.max_handle));
        if rows != f.rows || range != (f.min_handle, f.max_handle) {
            bail!(
                "it holds {rows} rows with handles {}..={} where the manifest says {} rows, {}..={}",
                range.0,
                range.1,
                f.rows,
                f.min_handle,
                f.max_handle
            );
        }
        for (region, b) in packs.iter_mut().enumerate() {
            if !b.is_empty() {
                let (first, v) = b.finish()?;
                sink.push(region, pack_key(self.table_id, first), v);
            }
        }
        // A file per region and file: files of different workers never
        // overlap, so each lands in the bottom level.
        sink.send_all();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rows: u64, bytes: u64, lo: i64, hi: i64) -> TableEntry {
        TableEntry {
            name: "t".into(),
            table_def: String::new(),
            columns: vec![],
            rowid: false,
            rows,
            checksum: super::super::manifest::ChecksumEntry::from(&Checksum::new(0)),
            files: vec![FileEntry {
                path: "t-1/part-00000.parquet".into(),
                rows,
                bytes,
                crc32: 0,
                min_handle: lo,
                max_handle: hi,
            }],
        }
    }

    #[test]
    fn regions_cover_the_handle_range_evenly() {
        // Small: one region.
        assert!(split_handles(&entry(1000, 1 << 20, 1, 1000), 3).is_empty());
        // A million rows on 3 stores: 12 regions, 11 ascending splits.
        let s = split_handles(&entry(1 << 20, 100 << 20, 1, 12_000_001), 3);
        assert_eq!(s.len(), 11);
        assert_eq!(s[0], 1_000_001);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        // Handles over the whole i64 range do not overflow.
        let s = split_handles(&entry(1 << 20, 0, i64::MIN, i64::MAX), 1);
        assert_eq!(s.len(), 3);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        // No rows: no splits.
        assert!(split_handles(&entry(0, 0, 0, 0), 3).is_empty());
    }
}
