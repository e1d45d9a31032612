//! BACKUP and RESTORE as SQL statements: the hook that runs them.
//!
//! Both statements need the bulk-load path (packs built and sorted into
//! SST files that every replica ingests), which lives with the loaders in
//! the `quarry` binary, the one crate that links RocksDB's SST writer;
//! compute does not. So compute parses the statements
//! ([`crate::sql::backup`]), checks that the caller is a superuser (the
//! location is a path on this process's host), and hands them to the
//! [`BackupRestore`] the binary installs at start-up ([`install`]), as it
//! installs the TLS client (`quarry_proto::security::install_client`). A
//! process without one (an engine built in a test) refuses the statements
//! by name. `quarry backup` and `quarry restore` call the same code with
//! an engine of their own.

use std::sync::{Arc, OnceLock};

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;

use crate::engine::QueryEngine;
use crate::output::QueryOutput;
use crate::sql::backup::BackupStatement;
use crate::{plan_err, Result};

/// Runs BACKUP and RESTORE for an engine.
#[async_trait]
pub trait BackupRestore: Send + Sync {
    async fn run(&self, engine: &QueryEngine, stmt: BackupStatement) -> Result<QueryOutput>;
}

/// What BACKUP and RESTORE answer: a row per table, with the rows and
/// files (and their bytes) written or read, and the backup's snapshot.
pub fn result_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("table", DataType::Utf8, false),
        Field::new("rows", DataType::Int64, false),
        Field::new("files", DataType::Int64, false),
        Field::new("bytes", DataType::Int64, false),
        Field::new("read_ts", DataType::Int64, false),
    ]))
}

static HOOK: OnceLock<Arc<dyn BackupRestore>> = OnceLock::new();

/// Installs the process's BACKUP and RESTORE (the first call wins).
pub fn install(hook: Arc<dyn BackupRestore>) {
    let _ = HOOK.set(hook);
}

/// Runs `stmt` through the installed hook.
pub(crate) async fn run(engine: &QueryEngine, stmt: BackupStatement) -> Result<QueryOutput> {
    let Some(hook) = HOOK.get() else {
        return Err(plan_err!(
            "{} is not available in this process (it runs in `quarry compute` and as `quarry {}`)",
            stmt.word(),
            stmt.word().to_lowercase()
        ));
    };
    engine.auth().require_superuser(stmt.word())?;
    hook.run(engine, stmt).await
}
