//! One PostgreSQL connection's session: who logged in, its open
//! transaction, its settings, and running one statement in it.
//!
//! A connection is a session, as in PostgreSQL: its transaction and its
//! settings belong to it alone and end with it. Statements run through
//! the same engine calls Flight SQL's do (`QueryEngine::prepare_sql_in`,
//! `stream_in`), inside the same per-request scope (`caller::in_scope`):
//! the caller, and the session key `session_settings.rs` keeps a
//! session's `statement_timeout` under — here the connection's own id,
//! which no other connection shares.
//!
//! TRANSACTIONS. `BEGIN` opens a Quarry transaction (`crate::session`):
//! snapshot isolation, pessimistic locks as statements write. A statement
//! that fails inside it aborts it (the engine rolls its locks back), and
//! the session is then *failed*: every statement but `COMMIT` and
//! `ROLLBACK` gets 25P02 until one of them ends it, and `COMMIT` of a
//! failed transaction rolls it back and says `ROLLBACK`, as PostgreSQL
//! does. ReadyForQuery carries the state: idle, in a transaction, failed.
//! A connection that closes with a transaction open rolls it back.
//!
//! IMPLICIT TRANSACTIONS. PostgreSQL runs a simple Query of several
//! statements (`psql -c 'INSERT …; INSERT …'`) as one implicit
//! transaction, and so does Quarry: the batch's first write outside a
//! transaction opens one (reads before it run on their own: they have
//! nothing to undo), the later statements run in it, and the Query's end
//! commits it, or rolls it back if a statement failed. A first write that
//! loses a write conflict starts the transaction again and runs again,
//! as an autocommit write would. `BEGIN` inside the batch turns it into
//! an ordinary block. Quarry cannot run CREATE, DROP, ALTER, BACKUP or
//! COPY inside a transaction, so one of them in a batch commits the
//! writes before it first (PostgreSQL would undo those too if the
//! statement failed).
//!
//! The extended protocol's batches (everything up to Sync: pgjdbc's
//! `executeBatch`, asyncpg's `executemany`, psycopg's pipelines) are
//! implicit transactions too, opened when a write is followed by more
//! than a Sync; a lone write and its Sync stay an autocommit write
//! (`batch.rs` says how and why).

mod copy_io;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use parking_lot::Mutex;
use pgwire::api::portal::Portal;
use pgwire::api::results::{FieldFormat, QueryResponse, Response, Tag};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::response::TransactionStatus;

use super::copy::{self, Copy};
use super::encode;
use super::handler::PgStatement;
use super::sqlstate::{pg_error, to_pg};
use super::statement::{self, Outcome, SessionStatement};
use crate::caller::Caller;
use crate::df::pg_functions::{default_setting, DEFAULT_SETTINGS};
use crate::engine::{Prepared, QueryEngine, QueryOutput};
use crate::session::OpenTxn;
use crate::Error;

pub use crate::df::pg_functions::{SERVER_VERSION, SERVER_VERSION_NUM};

/// Settings PostgreSQL reports but does not let a session change.
const READ_ONLY: [&str; 10] = [
    "block_size",
    "integer_datetimes",
    "is_superuser",
    "lc_collate",
    "lc_ctype",
    "max_identifier_length",
    "max_index_keys",
    "server_encoding",
    "server_version",
    "server_version_num",
];

/// Checks a value a session sets where Quarry only has one behaviour,
/// and the time zones it can read.
fn check_value(name: &str, value: &str) -> PgWireResult<()> {
    if name == "timezone" {
        return crate::df::pg_functions::session_zone(value)
            .map(|_| ())
            .map_err(|why| {
                pg_error(
                    "22023",
                    format!("invalid value for parameter \"TimeZone\": \"{value}\" ({why})"),
                )
            });
    }
    let v = value.to_ascii_lowercase();
    let ok = match name {
        "client_encoding" => matches!(v.as_str(), "utf8" | "utf-8" | "unicode"),
        "datestyle" => v.split(',').any(|p| p.trim() == "iso"),
        "intervalstyle" => v == "postgres",
        "bytea_output" => v == "hex",
        "standard_conforming_strings" => v == "on",
        "default_transaction_isolation" | "transaction_isolation" => v != "serializable",
        "transaction_read_only" | "default_transaction_read_only" => v == "off",
        "mpp" => crate::config::MppMode::parse(&v).is_ok(),
        _ => true,
    };
    match ok {
        true => Ok(()),
        false => Err(pg_error(
            "0A000",
            format!("unsupported: {name} = '{value}'; Quarry answers only its default here"),
        )),
    }
}

/// One connection's session.
pub struct PgSession {
    engine: Arc<QueryEngine>,
    /// Who logged in (None without logins: trusted).
    caller: Option<Caller>,
    /// This connection's id: the key of its settings in the engine.
    id: String,
    peer: SocketAddr,
    txn: Mutex<Option<Arc<OpenTxn>>>,
    /// The open transaction failed: only COMMIT or ROLLBACK run.
    failed: AtomicBool,
    /// A batch of statements is under way (a simple Query of several
    /// statements, or an extended-protocol batch with more than one
    /// message after a write): its first write outside a transaction
    /// opens an implicit one.
    in_batch: AtomicBool,
    /// An extended-protocol write waiting for the next message
    /// (`batch.rs`).
    deferred: Mutex<Option<Arc<Portal<PgStatement>>>>,
    /// The open transaction is a batch's implicit one: it ends with the
    /// batch, committed, or rolled back if a statement failed.
    implicit: AtomicBool,
    /// Settings changed by SET (names in lower case).
    settings: Mutex<BTreeMap<String, String>>,
    /// The reported parameters as the client last heard them.
    heard: Mutex<Vec<(String, String)>>,
    /// `SET LOCAL`s of the open transaction.
    local: Mutex<BTreeMap<String, String>>,
    /// The settings as the open transaction found them: a transaction
    /// that does not commit takes its SETs back.
    before_txn: Mutex<Option<BTreeMap<String, String>>>,
    /// The open transaction's savepoints, oldest first, each with the
    /// count of writes before it.
    savepoints: Mutex<Vec<(String, u64)>>,
    /// Write statements run in the open transaction.
    writes: std::sync::atomic::AtomicU64,
    /// A `COPY … FROM STDIN` under way.
    copy_in: tokio::sync::Mutex<Option<copy_io::CopyIn>>,
    /// Rows sent by the last `COPY … TO STDOUT`.
    copied: Arc<std::sync::atomic::AtomicU64>,
}

impl PgSession {
    pub fn new(
        engine: Arc<QueryEngine>,
        caller: Option<Caller>,
        peer: SocketAddr,
        startup: &std::collections::HashMap<String, String>,
    ) -> Self {
        let mut settings = BTreeMap::new();
        // Startup parameters are settings, as in PostgreSQL.
        for (k, v) in startup {
            let k = k.to_ascii_lowercase();
            // (A value Quarry cannot honour is left at the default, which
            // the client then hears in ParameterStatus.)
            if default_setting(&k).is_some()
                && !READ_ONLY.contains(&k.as_str())
                && check_value(&k, v).is_ok()
            {
                settings.insert(k, v.clone());
            }
        }
        PgSession {
            engine,
            caller,
            id: format!("pg-{:016x}", fastrand::u64(..)),
            peer,
            txn: Mutex::new(None),
            failed: AtomicBool::new(false),
            in_batch: AtomicBool::new(false),
            deferred: Mutex::new(None),
            implicit: AtomicBool::new(false),
            settings: Mutex::new(settings),
            heard: Mutex::new(Vec::new()),
            local: Mutex::new(BTreeMap::new()),
            before_txn: Mutex::new(None),
            savepoints: Mutex::new(Vec::new()),
            writes: Default::default(),
            copy_in: Default::default(),
            copied: Default::default(),
        }
    }

    pub fn engine(&self) -> &Arc<QueryEngine> {
        &self.engine
    }

    /// Runs `f` as a request of this session (its caller, its key and
    /// its settings as they are now).
    pub async fn scoped<F: std::future::Future>(&self, f: F) -> F::Output {
        // What differs from the defaults (`current_setting_in` answers
        // the rest): SETs, SET LOCALs over them, and who is superuser.
        let mut settings = self.settings.lock().clone();
        settings.extend(self.local.lock().clone());
        if let Some(su) = self.setting("is_superuser") {
            settings.insert("is_superuser".into(), su);
        }
        crate::caller::in_scope(
            self.caller.clone(),
            self.id.clone(),
            self.peer,
            Arc::new(settings),
            f,
        )
        .await
    }

    /// What ReadyForQuery says (an implicit transaction is no block).
    pub fn status(&self) -> TransactionStatus {
        match (self.in_block(), self.failed.load(Ordering::Relaxed)) {
            (false, _) => TransactionStatus::Idle,
            (true, false) => TransactionStatus::Transaction,
            (true, true) => TransactionStatus::Error,
        }
    }

    /// Whether a transaction block (BEGIN's) is open.
    pub fn in_block(&self) -> bool {
        self.txn.lock().is_some() && !self.implicit.load(Ordering::Relaxed)
    }

    /// The open transaction, if any.
    pub fn txn(&self) -> Option<Arc<OpenTxn>> {
        self.txn.lock().clone()
    }

    /// A batch of statements starts: until [`Self::end_batch`], the
    /// first write outside a transaction opens an implicit one, so the
    /// batch's writes commit together or not at all, as PostgreSQL runs
    /// a batch.
    pub fn begin_batch(&self) {
        self.in_batch.store(true, Ordering::Relaxed);
    }

    /// Whether a batch is under way.
    pub fn in_batch(&self) -> bool {
        self.in_batch.load(Ordering::Relaxed)
    }

    /// Holds an extended-protocol write until the next message
    /// (`batch.rs`).
    pub fn defer(&self, portal: Arc<Portal<PgStatement>>) {
        *self.deferred.lock() = Some(portal);
    }

    /// The held write, if any, no longer held.
    pub fn take_deferred(&self) -> Option<Arc<Portal<PgStatement>>> {
        self.deferred.lock().take()
    }

    /// The batch has ended (the simple Query's last statement, one that
    /// failed, or an extended-protocol Sync):
    /// its implicit transaction, if one opened, commits, or rolls back if
    /// a statement in it failed.
    pub async fn end_batch(&self) -> PgWireResult<()> {
        self.in_batch.store(false, Ordering::Relaxed);
        self.end_implicit().await
    }

    /// Ends the implicit transaction, if one is open: committed, or
    /// rolled back when a statement in it failed.
    async fn end_implicit(&self) -> PgWireResult<()> {
        if !self.implicit.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        let Some(txn) = self.txn.lock().take() else {
            return Ok(());
        };
        let failed = self.failed.swap(false, Ordering::Relaxed);
        let sessions = self.engine.sessions().clone();
        // In a task of its own, as COMMIT: a cancel must not stop it
        // half-way.
        let ended = tokio::spawn(async move {
            match failed {
                true => sessions.rollback(&txn).await,
                false => sessions.commit(&txn).await.map(|_| ()),
            }
        })
        .await
        .map_err(|e| to_pg(Error::Internal(format!("ending a transaction: {e}"))))?;
        self.settings_at_end(!failed && ended.is_ok());
        ended.map_err(to_pg)
    }

    /// The transaction has ended: its `SET LOCAL`s go, and if it did not
    /// commit, so do the `SET`s made in it, as in PostgreSQL.
    fn settings_at_end(&self, committed: bool) {
        self.local.lock().clear();
        let before = self.before_txn.lock().take();
        if let (false, Some(before)) = (committed, before) {
            *self.settings.lock() = before;
        }
    }

    /// Before statement `sql` of a batch: a write outside a transaction
    /// opens the batch's implicit one; a statement that does not run in a
    /// transaction (CREATE, DROP, ALTER, COPY, user statements) commits
    /// the writes before it first.
    async fn implicit_before(&self, sql: &str) -> PgWireResult<()> {
        if self.implicit.load(Ordering::Relaxed) {
            return match statement::runs_outside_transactions(sql) {
                true => self.end_implicit().await,
                false => Ok(()),
            };
        }
        let write = matches!(statement::outcome(sql), Outcome::Count(_));
        if write && self.in_batch.load(Ordering::Relaxed) && self.txn().is_none() {
            self.open_txn().await?;
            self.implicit.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A write lost a conflict: if it is the first statement of the
    /// batch's implicit transaction (nothing written in it yet), the
    /// transaction starts again at a new snapshot and the write runs
    /// again, as Quarry runs an autocommit write again (`engine/dml.rs`),
    /// at most [`crate::engine::dml::MAX_ATTEMPTS`] times in all.
    async fn retry_first_write(&self, attempts: &mut u32) -> PgWireResult<bool> {
        if !self.implicit.load(Ordering::Relaxed)
            || self.writes.load(Ordering::Relaxed) > 0
            || *attempts >= crate::engine::dml::MAX_ATTEMPTS
        {
            return Ok(false);
        }
        let aborted = self.txn.lock().take();
        if let Some(txn) = aborted {
            // (The engine has aborted it; this forgets it.)
            let _ = self.engine.sessions().rollback(&txn).await;
        }
        let backoff = std::time::Duration::from_millis(2u64 << (*attempts).min(6));
        tokio::time::sleep(backoff).await;
        *attempts += 1;
        self.open_txn().await?;
        Ok(true)
    }

    /// Opens a transaction (BEGIN's, or a batch's implicit one).
    async fn open_txn(&self) -> PgWireResult<()> {
        let sessions = self.engine.sessions().clone();
        let txn = self
            .scoped(async { sessions.begin().await })
            .await
            .map_err(to_pg)?;
        *self.txn.lock() = Some(txn);
        *self.before_txn.lock() = Some(self.settings.lock().clone());
        self.local.lock().clear();
        self.failed.store(false, Ordering::Relaxed);
        self.savepoints.lock().clear();
        self.writes.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Notes that a statement failed (or was cancelled): an open
    /// transaction is aborted, and the session failed until it ends.
    pub async fn statement_failed(&self, why: &str) {
        if let Some(txn) = self.txn() {
            self.failed.store(true, Ordering::Relaxed);
            let _ = self
                .engine
                .sessions()
                .fail(&txn, Error::InvalidInput(why.to_string()))
                .await;
        }
    }

    /// Runs one statement (parameters already bound), its columns in
    /// `format(i)`.
    pub async fn run(
        &self,
        sql: &str,
        format: &(dyn Fn(usize) -> FieldFormat + Sync),
    ) -> PgWireResult<Response> {
        if let Some(stmt) = statement::session_statement(sql) {
            let stmt = stmt.map_err(to_pg)?;
            return self.session_statement(stmt, format).await;
        }
        if !self.failed.load(Ordering::Relaxed) {
            self.implicit_before(sql).await?;
        }
        match copy::parse(sql).transpose().map_err(to_pg)? {
            Some(Copy::From(c)) => return self.begin_copy(c).await,
            Some(Copy::To(c)) => return self.copy_out(c).await,
            None => {}
        }
        if self.failed.load(Ordering::Relaxed) {
            return Err(pg_error(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        let text = statement::rewrite(sql);
        let mut attempts = 1;
        let (txn, r) = loop {
            let txn = self.txn();
            let r = self
                .scoped(async {
                    match self.engine.prepare_sql_in(&text, txn.as_ref()).await? {
                        Prepared::Query(q) => {
                            Ok(Ok(self.engine.stream_in(*q, txn.clone()).await?))
                        }
                        Prepared::Done(out) => Ok(Err(out)),
                    }
                })
                .await;
            match r {
                Err(Error::Conflict(_)) if self.retry_first_write(&mut attempts).await? => {}
                r => break (txn, r),
            }
        };
        let r = match r {
            Ok(r) => r,
            Err(mut e) => {
                if txn.is_some() {
                    // The engine has rolled it back.
                    self.failed.store(true, Ordering::Relaxed);
                }
                if self.implicit.load(Ordering::Relaxed) {
                    // No ROLLBACK to send: the batch's end takes it back.
                    e = e.map_message(|m| {
                        m.replace(
                            crate::session::ROLLED_BACK,
                            "the batch's implicit transaction is rolled back",
                        )
                    });
                }
                return Err(to_pg(e));
            }
        };
        match r {
            Ok(stream) => {
                let fields = Arc::new(encode::fields(&stream.schema, format));
                let row_fields = fields.clone();
                let rows = stream
                    .batches
                    .map(
                        move |b| match b.and_then(|b| encode::rows(&b, &row_fields)) {
                            Ok(rows) => futures::stream::iter(rows.into_iter().map(Ok)).boxed(),
                            Err(e) => futures::stream::iter([Err(to_pg(e))]).boxed(),
                        },
                    )
                    .flatten();
                Ok(Response::Query(QueryResponse::new(fields, rows)))
            }
            Err(out) => Ok(match statement::outcome(sql) {
                Outcome::Count(word) if txn.is_some() => {
                    self.writes.fetch_add(1, Ordering::Relaxed);
                    count_response(word, &out)
                }
                Outcome::Rows => rows_response(out, format).map_err(to_pg)?,
                Outcome::Count(word) => count_response(word, &out),
                Outcome::Tag(t) => Response::Execution(Tag::new(&t)),
            }),
        }
    }

    async fn session_statement(
        &self,
        stmt: SessionStatement,
        format: &(dyn Fn(usize) -> FieldFormat + Sync),
    ) -> PgWireResult<Response> {
        use SessionStatement as S;
        let local = matches!(stmt, S::SetLocal(..));
        let sessions = self.engine.sessions().clone();
        if self.failed.load(Ordering::Relaxed)
            && !matches!(stmt, S::Commit | S::Rollback | S::RollbackTo(_))
        {
            return Err(pg_error(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        let tag = |t: &str| Ok(Response::Execution(Tag::new(t)));
        match stmt {
            S::Begin => {
                if self.implicit.swap(false, Ordering::Relaxed) {
                    // The batch's writes so far join the block, as in
                    // PostgreSQL.
                    return Ok(Response::TransactionStart(Tag::new("BEGIN")));
                }
                if self.txn().is_some() {
                    // PostgreSQL warns and goes on.
                    return tag("BEGIN");
                }
                self.open_txn().await?;
                Ok(Response::TransactionStart(Tag::new("BEGIN")))
            }
            S::Commit | S::Rollback => {
                self.implicit.store(false, Ordering::Relaxed);
                let Some(txn) = self.txn.lock().take() else {
                    // PostgreSQL warns "there is no transaction in progress".
                    return tag(if stmt == S::Commit {
                        "COMMIT"
                    } else {
                        "ROLLBACK"
                    });
                };
                let failed = self.failed.swap(false, Ordering::Relaxed);
                let rollback = stmt == S::Rollback || failed;
                // In a task of its own: a cancel request (or a dropped
                // connection) must not stop a commit half-way.
                let ended = tokio::spawn(async move {
                    match rollback {
                        true => sessions.rollback(&txn).await.map(|()| "ROLLBACK"),
                        false => sessions.commit(&txn).await.map(|_| "COMMIT"),
                    }
                })
                .await
                .map_err(|e| to_pg(Error::Internal(format!("ending a transaction: {e}"))))?;
                self.settings_at_end(matches!((&ended, rollback), (Ok(_), false)));
                match (ended, rollback) {
                    (Ok(word), _) => Ok(Response::TransactionEnd(Tag::new(word))),
                    // Rolled back however it went.
                    (Err(_), true) => Ok(Response::TransactionEnd(Tag::new("ROLLBACK"))),
                    (Err(e), false) => Err(to_pg(e)),
                }
            }
            S::SetTransaction => tag("SET"),
            S::Set(name, value) | S::SetLocal(name, value) => {
                let name = canonical(&name);
                if default_setting(&name).is_none() {
                    return Err(unknown_setting(&name));
                }
                if READ_ONLY.contains(&name.as_str()) {
                    return Err(pg_error(
                        "55P02",
                        format!("parameter \"{name}\" cannot be changed"),
                    ));
                }
                if local {
                    // Until the transaction ends; outside one PostgreSQL
                    // warns and changes nothing.
                    if self.txn().is_some() {
                        let v = match value {
                            Some(v) => {
                                check_value(&name, &v)?;
                                v
                            }
                            None => default_setting(&name).unwrap_or_default().to_string(),
                        };
                        self.local.lock().insert(name, v);
                    }
                    return tag("SET");
                }
                // A session SET (or RESET) after a SET LOCAL of the same
                // setting wins over it, as in PostgreSQL.
                self.local.lock().remove(&name);
                match value {
                    Some(v) => {
                        check_value(&name, &v)?;
                        self.settings.lock().insert(name, v);
                    }
                    None => {
                        self.settings.lock().remove(&name);
                    }
                }
                tag("SET")
            }
            S::Reset(name) => {
                let name = canonical(&name);
                if default_setting(&name).is_none() {
                    return Err(unknown_setting(&name));
                }
                self.local.lock().remove(&name);
                self.settings.lock().remove(&name);
                tag("RESET")
            }
            S::ResetAll => {
                self.local.lock().clear();
                self.settings.lock().clear();
                tag("RESET")
            }
            S::Discard => {
                if self.txn().is_some() {
                    return Err(pg_error(
                        "25001",
                        "DISCARD ALL cannot run inside a transaction block",
                    ));
                }
                self.settings.lock().clear();
                self.engine.forget_session(&self.id);
                tag("DISCARD ALL")
            }
            S::Deallocate => tag("DEALLOCATE"),
            S::Savepoint(name) => {
                if !self.in_block() {
                    return Err(no_block("SAVEPOINT"));
                }
                let writes = self.writes.load(Ordering::Relaxed);
                self.savepoints.lock().push((name, writes));
                tag("SAVEPOINT")
            }
            S::Release(name) => {
                if !self.in_block() {
                    return Err(no_block("RELEASE SAVEPOINT"));
                }
                let mut sps = self.savepoints.lock();
                let at = sps
                    .iter()
                    .rposition(|(n, _)| *n == name)
                    .ok_or_else(|| no_savepoint(&name))?;
                sps.truncate(at);
                tag("RELEASE")
            }
            S::RollbackTo(name) => {
                if !self.in_block() {
                    return Err(no_block("ROLLBACK TO SAVEPOINT"));
                }
                let at = {
                    let sps = self.savepoints.lock();
                    sps.iter()
                        .rposition(|(n, _)| *n == name)
                        .map(|i| (i, sps[i].1))
                };
                let (at, writes) = at.ok_or_else(|| no_savepoint(&name))?;
                // Quarry undoes a transaction whole: back to a savepoint
                // only where there is nothing to undo.
                if self.failed.load(Ordering::Relaxed) {
                    return Err(pg_error(
                        "0A000",
                        "unsupported: ROLLBACK TO SAVEPOINT after an error: Quarry has rolled \
                         the whole transaction back; end it with ROLLBACK",
                    ));
                }
                if self.writes.load(Ordering::Relaxed) != writes {
                    return Err(pg_error(
                        "0A000",
                        "unsupported: ROLLBACK TO SAVEPOINT over writes made after the \
                         savepoint: Quarry rolls back a transaction whole; ROLLBACK it",
                    ));
                }
                self.savepoints.lock().truncate(at + 1);
                tag("ROLLBACK")
            }
            S::Show(name) => {
                let name = canonical(&name);
                let value = self.setting(&name).ok_or_else(|| unknown_setting(&name))?;
                let out = QueryOutput::text_columns(&[&name], vec![vec![value]]).map_err(to_pg)?;
                rows_response(out, format).map_err(to_pg)
            }
            S::ShowAll => {
                let names: Vec<&str> = DEFAULT_SETTINGS.iter().map(|(n, _)| *n).collect();
                let values = names
                    .iter()
                    .map(|n| self.setting(n).unwrap_or_default())
                    .collect();
                let names = names.into_iter().map(String::from).collect();
                let out = QueryOutput::text_columns(&["name", "setting"], vec![names, values])
                    .map_err(to_pg)?;
                rows_response(out, format).map_err(to_pg)
            }
        }
    }

    /// A setting's value for this session.
    fn setting(&self, name: &str) -> Option<String> {
        if name == "is_superuser" {
            let su = self.caller.as_ref().is_none_or(|c| c.superuser);
            return Some(if su { "on" } else { "off" }.into());
        }
        if let Some(v) = self.local.lock().get(name) {
            return Some(v.clone());
        }
        if let Some(v) = self.settings.lock().get(name) {
            return Some(v.clone());
        }
        default_setting(name).map(String::from)
    }

    /// The session's parameters a client hears at startup (ParameterStatus).
    pub fn reported(&self) -> Vec<(String, String)> {
        let now = self.reportable();
        *self.heard.lock() = now.clone();
        now
    }

    /// The reported parameters whose values changed since the client last
    /// heard them (a SET, RESET or DISCARD ALL): PostgreSQL sends each
    /// again (ParameterStatus) when it changes, and drivers read them —
    /// psycopg its `TimeZone` for binary TIMESTAMPTZ values.
    pub fn reported_changes(&self) -> Vec<(String, String)> {
        let now = self.reportable();
        let mut heard = self.heard.lock();
        let changed = now.iter().filter(|p| !heard.contains(p)).cloned().collect();
        *heard = now;
        changed
    }

    /// The reported parameters and their values now.
    fn reportable(&self) -> Vec<(String, String)> {
        [
            ("server_version", "server_version"),
            ("server_encoding", "server_encoding"),
            ("client_encoding", "client_encoding"),
            ("DateStyle", "datestyle"),
            ("IntervalStyle", "intervalstyle"),
            ("TimeZone", "timezone"),
            ("integer_datetimes", "integer_datetimes"),
            ("standard_conforming_strings", "standard_conforming_strings"),
            ("is_superuser", "is_superuser"),
            ("application_name", "application_name"),
            (
                "default_transaction_read_only",
                "default_transaction_read_only",
            ),
            ("in_hot_standby", "in_hot_standby"),
            ("search_path", "search_path"),
        ]
        .into_iter()
        .map(|(reported, name)| {
            let value = match name {
                "in_hot_standby" => "off".to_string(),
                n => self.setting(n).unwrap_or_default(),
            };
            (reported.to_string(), value)
        })
        .collect()
    }
}

/// The connection has ended (its extensions are dropped with it): an
/// open transaction is rolled back, and the session's settings in the
/// engine are forgotten.
impl Drop for PgSession {
    fn drop(&mut self) {
        self.engine.forget_session(&self.id);
        let txn = self.txn.lock().take();
        if let (Some(txn), Ok(rt)) = (txn, tokio::runtime::Handle::try_current()) {
            let sessions = self.engine.sessions().clone();
            rt.spawn(async move {
                let _ = sessions.rollback(&txn).await;
            });
        }
    }
}

/// A setting's name as kept: lower case; `TimeZone` and `DateStyle` as
/// any case.
fn canonical(name: &str) -> String {
    name.trim_matches('"').to_ascii_lowercase()
}

fn no_block(what: &str) -> PgWireError {
    pg_error(
        "25P01",
        format!("{what} can only be used in transaction blocks"),
    )
}

fn no_savepoint(name: &str) -> PgWireError {
    pg_error("3B001", format!("savepoint \"{name}\" does not exist"))
}

fn unknown_setting(name: &str) -> PgWireError {
    pg_error(
        "42704",
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

/// An answer in hand as rows.
fn rows_response(
    out: QueryOutput,
    format: &(dyn Fn(usize) -> FieldFormat + Sync),
) -> crate::Result<Response> {
    let fields = Arc::new(encode::fields(&out.schema, format));
    let mut rows = Vec::new();
    for b in &out.batches {
        rows.extend(encode::rows(b, &fields)?.into_iter().map(Ok));
    }
    Ok(Response::Query(QueryResponse::new(
        fields,
        futures::stream::iter(rows),
    )))
}

/// `INSERT 0 n`, `UPDATE n`, `DELETE n`.
fn count_response(word: &str, out: &QueryOutput) -> Response {
    let n = out.row_count().max(0) as usize;
    Response::Execution(match word {
        "INSERT" => Tag::new("INSERT").with_oid(0).with_rows(n),
        w => Tag::new(w).with_rows(n),
    })
}
