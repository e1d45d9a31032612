//! BACKUP and RESTORE: every table (or chosen ones) at one snapshot, as
//! Parquet files and a manifest, and back into a running cluster.
//!
//! **Backup** ([`backup`]). One timestamp from the oracle is the backup's
//! snapshot (`read_ts`), taken together with the catalog's version as of
//! it, so the tables' definitions are the ones that snapshot reads; the
//! GC safe point is held below it until the backup ends
//! (`quarry_compute::gc_hold`), so a backup may outlast `gc-life-time`.
//! Each table is read at `read_ts` through the region scans queries use,
//! region by region in key order, a few at once, so its rows come in
//! handle order without a sort of the whole table
//! (`quarry_compute::handle_order`; a table whose definition changed
//! since the snapshot is refused, not read), and written as Parquet files
//! of up to [`FILE_ROWS`] rows, encoded on a few threads while the scan
//! goes on and streamed to the location in chunks (a multipart upload
//! past the first): the table's columns, after the rows' handles as `_rowid`
//! (with more underscores when a column has that name) when it has no
//! primary key. Files cover ascending, disjoint handle ranges. The
//! manifest (`backup.json`, written last: a directory without one holds no
//! backup) names the snapshot, the views as of it (in a backup of every
//! table; a restore of every table defines them again once the tables are
//! in), each table's definition (the protobuf
//! `TableDef`, and its columns in words), its row count and
//! [`Checksum`](crate::load_file::Checksum) (the row count and per column
//! the count of values and their exact sum), and each file with its rows,
//! handle range, bytes and CRC-32.
//!
//! Why Parquet and not SST files of the stores' keys, as TiDB's BR writes:
//! a Parquet backup is independent of the key encoding, the layout (row
//! or column), the regions and the MVCC versions, so it restores into a
//! cluster that differs in all of them, and DuckDB, DataFusion or pandas
//! read it as it is. The cost is a decode and an encode each way, which
//! SST files would skip.
//!
//! **Restore** ([`restore`]). Every file named is read and its CRC-32 and
//! size checked before anything is created: a missing or corrupt file is
//! an error naming it, and leaves the cluster as it was. Each table is
//! created under a name of its own (`__restore_<name>`), pre-split over
//! its handle range, without its secondary indexes (all of them before the
//! first is written, so the later ones' regions have leaders by their
//! turn), and written as a
//! load writes a new table (`crate::load`): packs (or row values) built
//! here in handle order, sorted into SST files that every replica ingests
//! (raft writes for small tables). Then the rows read from the files, the
//! manifest's checksum and the checksum the cluster computes over the new
//! table (an aggregate that runs in the stores) must agree, column by
//! column. Only then does the table take its name (one meta write, as
//! `ALTER TABLE … RENAME`; with `WITH REPLACE` the existing table is
//! renamed aside first and dropped after), and its indexes are built
//! online (`CREATE INDEX`). The renames and drops skip the statements'
//! wait for other compute processes' kept catalogs to lapse; the restore
//! waits once, before it answers. A failure drops the half-made table and
//! those not yet built. A restore whose process dies cannot: while it
//! runs it renews a hold per table with the meta leader (`lease.rs`), and
//! once that lapses the meta leader drops its half-built tables, and gives
//! a table it had renamed aside its name back
//! (`quarry_raftstore::meta::restores`).
//!
//! Locations go through the `object_store` crate: a local directory (or
//! `file://` URL) now; an S3-compatible store needs the crate's `aws`
//! feature and credentials in the statement (`docs/operations.md`).

mod lease;
mod manifest;
mod read;
mod write;

use std::sync::Arc;

use anyhow::{bail, Result};
use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use async_trait::async_trait;
use object_store::local::LocalFileSystem;
use object_store::ObjectStore;
use quarry_compute::engine::{QueryEngine, QueryOutput};
use quarry_compute::sql::backup::BackupStatement;

pub use manifest::{FileEntry, Manifest, TableEntry, ViewEntry, MANIFEST};
pub use read::{restore, RestoreOptions};
pub use write::{backup, BackupOptions, FILE_ROWS};

/// Where a backup is: a store and the directory within it.
#[derive(Clone)]
pub struct Location {
    pub store: Arc<dyn ObjectStore>,
    /// As the user wrote it, for messages.
    pub shown: String,
}

impl Location {
    /// A local directory (absolute, or a `file://` URL). `create` makes
    /// it if it is missing (a backup's); else it must exist.
    pub fn parse(text: &str, create: bool) -> Result<Location> {
        let path = match text.split_once("://") {
            Some(("file", rest)) => rest,
            Some((scheme, _)) => bail!(
                "backup location {text}: only local directories (a path or file://) are supported; \
                 {scheme}:// needs object_store's cloud features (docs/operations.md)"
            ),
            None => text,
        };
        let dir = std::path::Path::new(path);
        if !dir.is_absolute() {
            bail!(
                "backup location {text}: give an absolute path (it is a directory on the host of \
                 the process that runs the statement)"
            );
        }
        if create {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("cannot create backup directory {text}: {e}"))?;
        } else if !dir.is_dir() {
            bail!("backup location {text} is not a directory");
        }
        let store = LocalFileSystem::new_with_prefix(dir)
            .map_err(|e| anyhow::anyhow!("backup location {text}: {e}"))?;
        Ok(Location {
            store: Arc::new(store),
            shown: text.to_string(),
        })
    }
}

/// What a backup or restore did for one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDone {
    pub table: String,
    pub rows: u64,
    pub files: u64,
    pub bytes: u64,
}

/// A backup's or restore's answer: a row per table
/// (`quarry_compute::engine::backup::result_schema`).
pub fn output(done: &[TableDone], read_ts: u64) -> Result<QueryOutput> {
    let schema = quarry_compute::engine::backup::result_schema();
    let int = |f: &dyn Fn(&TableDone) -> u64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(
            done.iter().map(|d| f(d) as i64),
        ))
    };
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(
                done.iter().map(|d| d.table.as_str()),
            )),
            int(&|d| d.rows),
            int(&|d| d.files),
            int(&|d| d.bytes),
            int(&|_| read_ts),
        ],
    )?;
    Ok(QueryOutput {
        schema,
        batches: vec![batch],
    })
}

/// The SQL statements' runner, installed in `quarry compute`.
///
/// Each statement runs in a task of its own, on an engine of its own made
/// from the compute process's configuration: a client that disconnects
/// (or whose call times out) drops its request, not the backup or the
/// restore half-way through a rename.
pub struct Hook {
    cfg: quarry_compute::config::ComputeConfig,
}

impl Hook {
    pub fn new(cfg: quarry_compute::config::ComputeConfig) -> Hook {
        Hook { cfg }
    }
}

#[async_trait]
impl quarry_compute::engine::backup::BackupRestore for Hook {
    async fn run(
        &self,
        _engine: &QueryEngine,
        stmt: BackupStatement,
    ) -> quarry_compute::Result<QueryOutput> {
        // The process's own engine analyzes the tables when they are
        // queried; this one lives for the statement.
        let engine = QueryEngine::new(&self.cfg)?.without_analysis();
        let word = stmt.word();
        let job = tokio::spawn(async move {
            let done = match stmt {
                BackupStatement::Backup { tables, location } => {
                    let opts = BackupOptions { location, tables };
                    backup(&engine, &opts)
                        .await
                        .and_then(|(done, m)| output(&done, m.read_ts))
                }
                BackupStatement::Restore {
                    tables,
                    location,
                    replace,
                } => {
                    let opts = RestoreOptions {
                        location,
                        tables,
                        replace,
                    };
                    restore(&engine, &opts)
                        .await
                        .and_then(|(done, m)| output(&done, m.read_ts))
                }
            };
            // Logged too: its client may be gone.
            match &done {
                Ok(out) => tracing::info!("{word} done: {} tables", out.num_rows()),
                Err(e) => tracing::warn!("{word} failed: {e:#}"),
            }
            done
        });
        match job.await {
            Ok(done) => done.map_err(categorized),
            Err(e) => Err(quarry_compute::Error::Internal(format!(
                "the backup or restore task ended: {e}"
            ))),
        }
    }
}

/// A failure as the client sees it: the whole story in the message, and
/// the category of the cluster's error underneath (a store down stays
/// Unavailable, a deadline a Deadline); the backup's own refusals (a bad
/// location, a corrupt file, a table that exists) are the user's input.
fn categorized(e: anyhow::Error) -> quarry_compute::Error {
    use quarry_compute::Error as E;
    let msg = format!("{e:#}");
    match e.chain().find_map(|c| c.downcast_ref::<E>()) {
        Some(E::Unavailable(_)) => E::Unavailable(msg),
        Some(E::Deadline(_)) => E::Deadline(msg),
        Some(E::Cancelled(_)) => E::Cancelled(msg),
        Some(E::Conflict(_)) => E::Conflict(msg),
        Some(E::ResourceExhausted(_)) => E::ResourceExhausted(msg),
        Some(E::PermissionDenied(_)) => E::PermissionDenied(msg),
        Some(E::Internal(_)) => E::Internal(msg),
        _ => E::InvalidInput(msg),
    }
}
