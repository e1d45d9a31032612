//! Writing a backup: the snapshot, each table's files, the manifest last.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int64Type};
use futures::StreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::ArrowSchemaConverter;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, Type as PhysicalType};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use quarry_compute::engine::QueryEngine;
use quarry_proto::meta::TableDef;
use quarry_raftstore::meta::restores::{REPLACED, RESTORING};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::manifest::{ChecksumEntry, FileEntry, Manifest, TableEntry, ViewEntry, MANIFEST};
use super::{Location, TableDone};
use crate::load_file::Checksum;

/// Rows per Parquet file (at most; a file ends at a batch's end). Compute
/// holds about three files' rows (one being cut, one per encoder), so the
/// size is memory: lineitem's files of 1 Mi rows took compute to 1.8 GB
/// at SF 1, and every fresh page is one the kernel zeroes; at 256 Ki rows
/// (with each batch dropped once encoded) 1.06 GB, and a file is still
/// two row groups of a dozen megabytes.
pub const FILE_ROWS: usize = 1 << 18;

/// Rows per Parquet row group.
const ROW_GROUP_ROWS: usize = 1 << 17;

#[derive(Debug, Clone)]
pub struct BackupOptions {
    /// A local directory (absolute, or `file://`), made if missing.
    pub location: String,
    /// Empty: every table.
    pub tables: Vec<String>,
}

/// Backs up the chosen tables at one snapshot into `opts.location`.
pub async fn backup(
    engine: &QueryEngine,
    opts: &BackupOptions,
) -> Result<(Vec<TableDone>, Manifest)> {
    let loc = Location::parse(&opts.location, true)?;
    if loc.store.head(&StorePath::from(MANIFEST)).await.is_ok() {
        bail!(
            "{} already holds a backup ({MANIFEST}); back up into an empty directory",
            loc.shown
        );
    }
    let (read_ts, tables, views) = snapshot(engine, &opts.tables).await?;
    // The versions the snapshot reads stay until the last table is read.
    let _hold = engine.txns().hold_read(read_ts);
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut manifest = Manifest::new(read_ts, started);
    manifest.views = views;
    let mut done = Vec::new();
    for table in &tables {
        let entry = backup_table(engine, &loc, table, read_ts)
            .await
            .with_context(|| format!("backing up table {}", table.name))?;
        done.push(TableDone {
            table: table.name.clone(),
            rows: entry.rows,
            files: entry.files.len() as u64,
            bytes: entry.files.iter().map(|f| f.bytes).sum(),
        });
        manifest.tables.push(entry);
    }
    loc.store
        .put(&StorePath::from(MANIFEST), manifest.to_json()?.into())
        .await
        .with_context(|| format!("writing {}/{MANIFEST}", loc.shown))?;
    Ok((done, manifest))
}

/// A timestamp and the tables as of it, with the views when every table
/// is chosen: the catalog read between two timestamps' worth of DDL would
/// not be the snapshot's, so the catalog's version must be the one the
/// timestamp saw.
async fn snapshot(
    engine: &QueryEngine,
    names: &[String],
) -> Result<(u64, Vec<TableDef>, Vec<ViewEntry>)> {
    for _ in 0..10 {
        let stamp = engine.txns().stamp().await?;
        let catalog = engine.cluster().catalog().await?;
        if catalog.catalog_version != stamp.catalog_version {
            continue;
        }
        let all: Vec<TableDef> = catalog
            .tables
            .into_iter()
            .filter(|t| !t.name.starts_with(RESTORING) && !t.name.starts_with(REPLACED))
            .collect();
        if names.is_empty() {
            let views = catalog.views.into_iter().map(ViewEntry::from).collect();
            return Ok((stamp.ts, all, views));
        }
        let chosen = names
            .iter()
            .map(|n| {
                all.iter().find(|t| &t.name == n).cloned().ok_or_else(|| {
                    let mut have: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
                    have.sort();
                    anyhow!("unknown table '{n}'; tables are: {}", have.join(", "))
                })
            })
            .collect::<Result<_>>()?;
        return Ok((stamp.ts, chosen, vec![]));
    }
    bail!("the catalog kept changing (DDL) while the backup took its snapshot; run it again")
}

/// Reads `table` at `read_ts` in handle order and writes its files.
async fn backup_table(
    engine: &QueryEngine,
    loc: &Location,
    table: &TableDef,
    read_ts: u64,
) -> Result<TableEntry> {
    let mut entry = TableEntry::new(table)?;
    let dir = table_dir(table);
    let mut stream = engine.scan_in_handle_order(table, read_ts).await?;
    let handle_pos = quarry_compute::handle_order::handle_position(table)?;
    let first_column = usize::from(entry.rowid);
    let columns = table.columns.len() + first_column;
    // Cutting and encoding run on other threads while the scan goes on.
    let (tx, rx) = mpsc::channel::<RecordBatch>(4);
    let writer = {
        let (store, shown) = (loc.store.clone(), loc.shown.clone());
        let rt = tokio::runtime::Handle::current();
        let ncols = table.columns.len();
        tokio::task::spawn_blocking(move || {
            let sink = FileSink {
                rt,
                store,
                shown,
                dir,
            };
            let mut files = FileWriter::new(sink, handle_pos);
            let mut sum = Checksum::new(ncols);
            let mut rx = rx;
            while let Some(batch) = rx.blocking_recv() {
                sum.add(&batch.columns()[first_column..])?;
                files.write(batch)?;
            }
            let files = files.finish()?;
            anyhow::Ok((files, sum))
        })
    };
    let mut read_error = None;
    while let Some(batch) = stream.batches.next().await {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                read_error = Some(anyhow::Error::from(e));
                break;
            }
        };
        if batch.num_columns() != columns {
            read_error = Some(anyhow!(
                "its definition changed during the backup (ALTER TABLE?); run the backup again"
            ));
            break;
        }
        if batch.num_rows() > 0 && tx.send(batch).await.is_err() {
            break;
        }
    }
    drop(tx);
    let written = writer.await?;
    if let Some(e) = read_error {
        return Err(e);
    }
    let (files, sum) = written?;
    // Dropped or altered while it was read: what was read may be short.
    engine.unchanged_since(table).await?;
    entry.rows = files.iter().map(|f| f.rows).sum();
    entry.checksum = ChecksumEntry::from(&sum);
    entry.files = files;
    Ok(entry)
}

/// A table's directory in the backup: its name (made safe for a path)
/// and its id, so two names that read the same never share one.
fn table_dir(table: &TableDef) -> String {
    let safe: String = table
        .name
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || c == '_' {
            true => c,
            false => '_',
        })
        .collect();
    format!("{safe}-{}", table.id)
}

/// One file's rows, cut from the stream, to encode.
struct FileJob {
    index: usize,
    batches: Vec<RecordBatch>,
    rows: u64,
    min_handle: i64,
    max_handle: i64,
}

/// Where encoded files go.
#[derive(Clone)]
struct FileSink {
    rt: tokio::runtime::Handle,
    store: std::sync::Arc<dyn ObjectStore>,
    shown: String,
    dir: String,
}

impl FileSink {
    /// Encodes one file and stores it.
    fn encode(&self, job: FileJob) -> Result<FileEntry> {
        let FileJob {
            index,
            batches,
            rows,
            min_handle,
            max_handle,
        } = job;
        let schema = batches[0].schema();
        let props = writer_properties(&batches[0])?;
        let path = format!("{}/part-{:05}.parquet", self.dir, index);
        let mut upload = Upload::new(
            self.rt.clone(),
            self.store.clone(),
            StorePath::from(path.as_str()),
        );
        let encoded = (|| {
            let mut writer = ArrowWriter::try_new(&mut upload, schema, Some(props))?;
            // Each batch is dropped once encoded: the file's rows leave
            // memory as its row groups fill, for the next file's to reuse.
            for b in batches {
                writer.write(&b)?;
            }
            writer.close()?;
            anyhow::Ok(())
        })();
        let (bytes, crc32) = match encoded {
            Ok(()) => upload.finish(),
            Err(e) => {
                upload.abort();
                Err(e)
            }
        }
        .with_context(|| format!("writing {}/{path}", self.shown))?;
        Ok(FileEntry {
            path,
            rows,
            bytes,
            crc32,
            min_handle,
            max_handle,
        })
    }
}

/// How a backup's file is encoded, decided from its first batch.
///
/// * Dictionaries only for string columns with few distinct values in
///   the file's first batch ([`few_distinct`]): a flag, a ship mode or a
///   market segment becomes a few bits a row (RLE over dictionary
///   indexes) where Snappy had to read and shrink every plain string
///   (half of lineitem's string bytes, and most of Snappy's time, were
///   such columns). Interning every column cost more than it saved; a
///   dictionary that outgrows its page limit falls back to plain.
/// * Integer columns (INT32 and INT64 in Parquet: BIGINT, DATE,
///   DECIMAL up to 18 digits) as DELTA_BINARY_PACKED,
///   uncompressed: each block of 128 values keeps only the bits its
///   deltas need (a quantity 7, a price 25, a date 13, a sorted key 2 or
///   fewer of 64), and Snappy over the 8-byte plain values was most of
///   a backup's CPU in compute (37% of its samples, warm, at SF 1).
/// * Everything else plain, Snappy-compressed.
/// * Row groups of 128 Ki rows (DuckDB writes 122,880): the writer holds
///   one encoded row group at a time, a few megabytes, where a file-long
///   group held the whole file.
/// * Statistics per column chunk, not per page (no page index: a restore
///   reads whole files), and none for strings, whose min and max cost a
///   comparison per value (5% of compute's CPU in a backup) and prune
///   little.
fn writer_properties(first: &RecordBatch) -> Result<WriterProperties> {
    let schema = first.schema();
    let mut props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
    // Every column Quarry stores is a flat primitive: one Parquet leaf
    // per field, its path the field's name.
    let parquet = ArrowSchemaConverter::new().convert(&schema)?;
    if parquet.num_columns() != schema.fields().len() {
        bail!("a table's columns are not one Parquet column each");
    }
    for (i, column) in parquet.columns().iter().enumerate() {
        let path = column.path().clone();
        if column.physical_type() == PhysicalType::BYTE_ARRAY {
            props = props.set_column_statistics_enabled(path.clone(), EnabledStatistics::None);
            if first.columns().get(i).is_some_and(few_distinct) {
                props = props.set_column_dictionary_enabled(path.clone(), true);
            }
        }
        if matches!(
            column.physical_type(),
            PhysicalType::INT32 | PhysicalType::INT64
        ) {
            props = props
                .set_column_encoding(path.clone(), Encoding::DELTA_BINARY_PACKED)
                .set_column_compression(path, DELTA_COMPRESSION);
        }
    }
    Ok(props.build())
}

const DELTA_COMPRESSION: Compression = Compression::UNCOMPRESSED;

/// Rows of a file's first batch that [`few_distinct`] looks at.
const DICTIONARY_SAMPLE: usize = 4096;

/// Whether a string column's first [`DICTIONARY_SAMPLE`] values hold at
/// most one distinct value in 16 (TPC-H's flags, modes, priorities and
/// segments hold 2 to 25 in 4,096; its names and comments nearly 4,096).
/// A column that is not a string or binary one is not looked at.
fn few_distinct(column: &ArrayRef) -> bool {
    let rows = column.len().min(DICTIONARY_SAMPLE);
    let limit = rows / 16;
    let within = |values: &mut dyn Iterator<Item = Option<&[u8]>>| {
        let mut seen = std::collections::HashSet::with_capacity(limit + 1);
        values
            .take(rows)
            .all(|v| !seen.insert(v) || seen.len() <= limit)
    };
    rows > 0
        && match column.data_type() {
            DataType::Utf8 => within(
                &mut column
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.map(str::as_bytes)),
            ),
            DataType::LargeUtf8 => within(
                &mut column
                    .as_string::<i64>()
                    .iter()
                    .map(|v| v.map(str::as_bytes)),
            ),
            DataType::Binary => within(&mut column.as_binary::<i32>().iter()),
            DataType::LargeBinary => within(&mut column.as_binary::<i64>().iter()),
            _ => false,
        }
}

/// A file's bytes on their way to the store as they are encoded: chunks
/// of [`UPLOAD_CHUNK`] (one put for a file that fits in one, a multipart
/// upload past it, as an S3-compatible store takes a large object), with
/// the file's size and CRC-32 counted as they pass. A whole file in one
/// buffer was a fresh allocation per file, each a few dozen megabytes of
/// pages the kernel zeroed (a fifth to a third of a backup's CPU).
struct Upload {
    rt: tokio::runtime::Handle,
    out: object_store::buffered::BufWriter,
    chunk: Vec<u8>,
    crc: crc32fast::Hasher,
    bytes: u64,
}

/// Bytes per chunk of an [`Upload`].
const UPLOAD_CHUNK: usize = 8 << 20;

impl Upload {
    fn new(
        rt: tokio::runtime::Handle,
        store: std::sync::Arc<dyn ObjectStore>,
        path: StorePath,
    ) -> Upload {
        Upload {
            rt,
            out: object_store::buffered::BufWriter::with_capacity(store, path, UPLOAD_CHUNK),
            chunk: Vec::with_capacity(UPLOAD_CHUNK),
            crc: crc32fast::Hasher::new(),
            bytes: 0,
        }
    }

    /// Hands the chunk to the store's writer; `next` is the next chunk's
    /// room.
    fn send(&mut self, next: usize) -> std::io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.chunk, Vec::with_capacity(next));
        self.rt
            .block_on(self.out.put(data.into()))
            .map_err(std::io::Error::other)
    }

    /// Ends the upload: the file is whole in the store. Its size and
    /// CRC-32.
    fn finish(mut self) -> Result<(u64, u32)> {
        self.send(0)?;
        self.rt.block_on(self.out.shutdown())?;
        Ok((self.bytes, self.crc.finalize()))
    }

    /// Drops what was uploaded of a file that failed.
    fn abort(mut self) {
        if let Err(e) = self.rt.block_on(self.out.abort()) {
            tracing::warn!("abandoning a backup file's upload failed: {e}");
        }
    }
}

impl std::io::Write for Upload {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.crc.update(buf);
        self.bytes += buf.len() as u64;
        self.chunk.extend_from_slice(buf);
        if self.chunk.len() >= UPLOAD_CHUNK {
            self.send(UPLOAD_CHUNK)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Cuts a table's batches into files of [`FILE_ROWS`] and has a few
/// threads encode and store them while the scan goes on (Parquet encoding
/// was most of a backup's time in compute when one thread did it).
struct FileWriter {
    handle_pos: usize,
    /// The last handle written, in any file.
    last_handle: Option<i64>,
    pending: Option<FileJob>,
    next_index: usize,
    jobs: Option<std::sync::mpsc::SyncSender<FileJob>>,
    encoders: Vec<std::thread::JoinHandle<Result<Vec<FileEntry>>>>,
}

impl FileWriter {
    fn new(sink: FileSink, handle_pos: usize) -> FileWriter {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        // One file waits while the threads encode: memory stays at a few
        // files' rows.
        let (tx, rx) = std::sync::mpsc::sync_channel::<FileJob>(0);
        let rx = std::sync::Arc::new(parking_lot::Mutex::new(rx));
        let encoders = (0..threads)
            .map(|_| {
                let (rx, sink) = (rx.clone(), sink.clone());
                std::thread::spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let job = rx.lock().recv();
                        let Ok(job) = job else { break };
                        done.push(sink.encode(job)?);
                    }
                    Ok(done)
                })
            })
            .collect();
        FileWriter {
            handle_pos,
            last_handle: None,
            pending: None,
            next_index: 0,
            jobs: Some(tx),
            encoders,
        }
    }

    fn write(&mut self, batch: RecordBatch) -> Result<()> {
        let handles = batch
            .column(self.handle_pos)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| anyhow!("the handle column is not a BIGINT"))?;
        let (first, last) = (handles.value(0), handles.value(handles.len() - 1));
        if handles.values().windows(2).any(|w| w[0] >= w[1])
            || self.last_handle.is_some_and(|l| first <= l)
        {
            bail!("rows came out of handle order");
        }
        self.last_handle = Some(last);
        let index = self.next_index;
        let job = self.pending.get_or_insert_with(|| FileJob {
            index,
            batches: vec![],
            rows: 0,
            min_handle: first,
            max_handle: first,
        });
        job.rows += batch.num_rows() as u64;
        job.max_handle = last;
        job.batches.push(batch);
        if job.rows as usize >= FILE_ROWS {
            self.send()?;
        }
        Ok(())
    }

    /// Hands the pending file to an encoder.
    fn send(&mut self) -> Result<()> {
        let Some(job) = self.pending.take() else {
            return Ok(());
        };
        self.next_index += 1;
        let sent = self.jobs.as_ref().map(|tx| tx.send(job));
        if !matches!(sent, Some(Ok(()))) {
            // An encoder failed: its error says why.
            self.finish()?;
            bail!("the file encoders stopped");
        }
        Ok(())
    }

    /// Sends the last file, waits for the encoders, and returns every
    /// file in order.
    fn finish(&mut self) -> Result<Vec<FileEntry>> {
        if self.pending.is_some() && self.jobs.is_some() {
            self.send()?;
        }
        self.jobs = None;
        let mut files = Vec::new();
        let mut first_error = None;
        for t in self.encoders.drain(..) {
            match t.join() {
                Ok(Ok(done)) => files.extend(done),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(anyhow!("a file encoder panicked"));
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Schema;

    /// What SQL refuses to name a table is what the meta leader reaps.
    #[test]
    fn sql_reserves_the_names_restores_use() {
        assert_eq!(quarry_compute::sql::RESTORE_PREFIXES, [RESTORING, REPLACED]);
    }

    #[test]
    fn table_directories_are_safe_paths_that_never_collide() {
        let t = |id, name: &str| TableDef {
            id,
            name: name.into(),
            ..Default::default()
        };
        assert_eq!(table_dir(&t(3, "lineitem")), "lineitem-3");
        assert_eq!(table_dir(&t(4, "a/b c")), "a_b_c-4");
        assert_ne!(table_dir(&t(5, "a b")), table_dir(&t(6, "a_b")));
    }

    #[test]
    fn integer_columns_are_delta_packed_and_the_rest_snappy() {
        use arrow::array::{
            ArrayRef, BooleanArray, Date32Array, Decimal128Array, Decimal64Array, Float64Array,
            Int64Array, StringArray,
        };
        use arrow::datatypes::Field;
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use std::sync::Arc;
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("n", Arc::new(Int64Array::from(vec![i64::MIN, i64::MAX]))),
            ("d", Arc::new(Date32Array::from(vec![Some(1), None]))),
            (
                "p",
                Arc::new(
                    Decimal64Array::from(vec![Some(-1), None])
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                ),
            ),
            (
                "a.b",
                Arc::new(
                    Decimal64Array::from(vec![5, 7])
                        .with_precision_and_scale(5, 1)
                        .unwrap(),
                ),
            ),
            (
                "w",
                Arc::new(
                    Decimal128Array::from(vec![1, 2])
                        .with_precision_and_scale(30, 4)
                        .unwrap(),
                ),
            ),
            ("s", Arc::new(StringArray::from(vec!["x", "y"]))),
            ("f", Arc::new(Float64Array::from(vec![0.5, 1.5]))),
            ("b", Arc::new(BooleanArray::from(vec![true, false]))),
        ];
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_new(
            schema.clone(),
            columns.into_iter().map(|(_, a)| a).collect(),
        )
        .unwrap();
        let mut file = Vec::new();
        let props = writer_properties(&batch).unwrap();
        let mut w = ArrowWriter::try_new(&mut file, schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let reader = SerializedFileReader::new(bytes::Bytes::from(file)).unwrap();
        let group = reader.metadata().row_group(0);
        for (i, name) in ["n", "d", "p", "a.b", "w", "s", "f", "b"]
            .iter()
            .enumerate()
        {
            let chunk = group.column(i);
            assert_eq!(chunk.column_path().parts(), [name.to_string()]);
            let delta = chunk
                .encodings()
                .any(|e| e == Encoding::DELTA_BINARY_PACKED);
            let want = i < 4;
            assert_eq!(delta, want, "{name}: delta-packed");
            let codec = match want {
                true => Compression::UNCOMPRESSED,
                false => Compression::SNAPPY,
            };
            assert_eq!(chunk.compression(), codec, "{name}");
            // No statistics for strings, for the rest per chunk.
            assert_eq!(chunk.statistics().is_some(), *name != "s", "{name}");
        }
    }

    #[test]
    fn strings_with_few_values_get_a_dictionary_and_read_back_the_same() {
        use arrow::array::{BinaryArray, StringArray};
        use arrow::datatypes::Field;
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use std::sync::Arc;
        let rows = 10_000;
        let modes = ["AIR", "MAIL", "SHIP", "TRUCK"];
        let mode: StringArray = (0..rows)
            .map(|i| (i % 7 != 3).then(|| modes[i % 4]))
            .collect();
        let comment: StringArray = (0..rows).map(|i| Some(format!("note {i}"))).collect();
        let flag: BinaryArray = (0..rows).map(|i| Some(&b"AR"[i % 2..=i % 2])).collect();
        let schema = Arc::new(Schema::new(vec![
            Field::new("mode", DataType::Utf8, true),
            Field::new("comment", DataType::Utf8, false),
            Field::new("flag", DataType::Binary, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(mode), Arc::new(comment), Arc::new(flag)],
        )
        .unwrap();
        assert!(few_distinct(batch.column(0)));
        assert!(!few_distinct(batch.column(1)));
        assert!(few_distinct(batch.column(2)));
        let mut file = Vec::new();
        let props = writer_properties(&batch).unwrap();
        let mut w = ArrowWriter::try_new(&mut file, schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let file = bytes::Bytes::from(file);
        let reader = SerializedFileReader::new(file.clone()).unwrap();
        let group = reader.metadata().row_group(0);
        let dictionary = |i: usize| {
            group
                .column(i)
                .encodings()
                .any(|e| e == Encoding::RLE_DICTIONARY)
        };
        assert!(dictionary(0), "mode");
        assert!(!dictionary(1), "comment");
        assert!(dictionary(2), "flag");
        let read: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let read = arrow::compute::concat_batches(&batch.schema(), &read).unwrap();
        assert_eq!(read, batch);
    }
}
