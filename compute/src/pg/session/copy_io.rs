//! A session's COPY: `COPY … FROM STDIN` as it arrives (text and CSV
//! by whole lines, binary by whole tuples, written as INSERT batches in
//! the session's transaction or their own) and `COPY … TO STDOUT` as a
//! stream. What the formats mean is `pg/copy.rs`'s; this is the session's
//! side: the COPY under way, its errors and its row counts.

use std::sync::atomic::Ordering;

use futures::StreamExt;
use pgwire::api::results::{CopyResponse, Response, Tag};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::CopyData;
use quarry_proto::meta::TypeKind;

use super::super::copy::{self, CopyFrom, CopyTo};
use super::super::sqlstate::{pg_error, to_pg};
use super::super::statement;
use super::PgSession;
use crate::engine::Prepared;
use crate::Error;

/// The pending bytes of a binary COPY that make it write the whole
/// tuples among them.
const BINARY_CHUNK: usize = 1 << 20;

/// A `COPY … FROM STDIN` under way (`copy.rs`).
pub(super) struct CopyIn {
    copy: CopyFrom,
    table: quarry_proto::meta::TableDef,
    /// Data received, not yet whole lines.
    pending: Vec<u8>,
    /// No batch written yet (a header line is still to skip).
    first: bool,
    /// A binary COPY's header and trailer as read so far.
    binary: copy::BinaryState,
    /// Rows written, and lines read.
    rows: usize,
    lines: usize,
    /// The error that ended it; later data is dropped until CopyDone.
    error: Option<PgWireError>,
}

impl PgSession {
    /// Starts a `COPY … FROM STDIN`: the client sends its rows next.
    pub(super) async fn begin_copy(&self, copy: CopyFrom) -> PgWireResult<Response> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(pg_error(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        let table = self
            .scoped(self.engine.table(&copy.table))
            .await
            .map_err(to_pg)?;
        let columns = match copy.columns.len() {
            0 => table
                .columns
                .iter()
                .filter(|c| c.id != quarry_coprocessor::codec::key::ROWID_COLUMN_ID)
                .count(),
            n => n,
        };
        let binary = copy.options.binary;
        *self.copy_in.lock().await = Some(CopyIn {
            copy,
            table,
            pending: Vec::new(),
            first: true,
            binary: Default::default(),
            rows: 0,
            lines: 1,
            error: None,
        });
        let format = i8::from(binary);
        let mut response =
            pgwire::api::results::CopyResponse::new(0, columns, futures::stream::empty());
        // (Marked binary after: `new` would add a trailer to the stream.)
        response.format = format;
        Ok(Response::CopyIn(response))
    }

    /// Runs a `COPY … TO STDOUT`'s query: its rows stream out as the
    /// engine makes them, one CopyData each (counted in
    /// [`Self::copied_rows`] for the `COPY n` tag).
    pub(super) async fn copy_out(&self, copy: CopyTo) -> PgWireResult<Response> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(pg_error(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        let txn = self.txn();
        let stream = self
            .scoped(async {
                let text = statement::rewrite(&copy.query);
                match self.engine.prepare_sql_in(&text, txn.as_ref()).await? {
                    Prepared::Query(q) => self.engine.stream_in(*q, txn.clone()).await,
                    Prepared::Done(_) => Err(Error::InvalidInput(
                        "COPY (statement) TO STDOUT needs a query that returns rows".into(),
                    )),
                }
            })
            .await;
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                if txn.is_some() {
                    self.failed.store(true, Ordering::Relaxed);
                }
                return Err(to_pg(e));
            }
        };
        let names: Vec<&str> = stream
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        let prologue = copy::out_prologue(&names, &copy.options);
        let epilogue = copy::out_epilogue(&copy.options);
        let columns = names.len();
        let format = i8::from(copy.options.binary);
        let counter = self.copied.clone();
        counter.store(0, Ordering::Relaxed);
        let options = copy.options;
        let message = |bytes: Vec<u8>| Ok(CopyData::new(bytes.into()));
        let rows = stream
            .batches
            .map(
                move |b| match b.and_then(|b| copy::out_rows(&b, &options)) {
                    Ok(rows) => {
                        counter.fetch_add(rows.len() as u64, Ordering::Relaxed);
                        futures::stream::iter(rows.into_iter().map(message)).boxed()
                    }
                    Err(e) => futures::stream::iter([Err(to_pg(e))]).boxed(),
                },
            )
            .flatten();
        let data = futures::stream::iter(prologue.map(message))
            .chain(rows)
            .chain(futures::stream::iter(epilogue.map(message)));
        // (Made as text and then marked binary: `CopyResponse::new` would
        // add a second binary trailer.)
        let mut response = CopyResponse::new(0, columns, data);
        response.format = format;
        Ok(Response::CopyOut(response))
    }

    /// Rows the last `COPY … TO STDOUT` sent.
    pub fn copied_rows(&self) -> u64 {
        self.copied.load(Ordering::Relaxed)
    }

    /// Rows of a COPY: whole lines are written in batches as they come.
    pub async fn copy_data(&self, data: &[u8]) {
        let mut guard = self.copy_in.lock().await;
        let Some(c) = guard.as_mut() else { return };
        if c.error.is_some() {
            return;
        }
        c.pending.extend_from_slice(data);
        if c.copy.options.binary {
            // Whole tuples, about a batch's worth at a time.
            if c.pending.len() >= BINARY_CHUNK {
                if let Err(e) = self.copy_write_binary(c, false).await {
                    c.error = Some(to_pg(e));
                }
            }
            return;
        }
        // Whole lines only, and (for CSV) not inside a quoted field: CSV
        // waits for the end, text goes batch by batch.
        if c.copy.options.csv {
            return;
        }
        let Some(cut) = c.pending.iter().rposition(|b| *b == b'\n') else {
            return;
        };
        if c.pending[..cut].iter().filter(|b| **b == b'\n').count() < copy::BATCH_ROWS {
            return;
        }
        let rest = c.pending.split_off(cut + 1);
        let chunk = std::mem::replace(&mut c.pending, rest);
        if let Err(e) = self.copy_write(c, &chunk).await {
            c.error = Some(to_pg(e));
        }
    }

    /// The end of a COPY's rows: the rest is written; `COPY n`.
    pub async fn copy_done(&self) -> PgWireResult<Tag> {
        let Some(mut c) = self.copy_in.lock().await.take() else {
            return Err(pg_error("08P01", "CopyDone without a COPY under way"));
        };
        if let Some(e) = c.error.take() {
            return Err(e);
        }
        if c.copy.options.binary {
            self.copy_write_binary(&mut c, true).await.map_err(to_pg)?;
            return Ok(Tag::new("COPY").with_rows(c.rows));
        }
        let chunk = std::mem::take(&mut c.pending);
        self.copy_write(&mut c, &chunk).await.map_err(to_pg)?;
        Ok(Tag::new("COPY").with_rows(c.rows))
    }

    /// The client gave up its COPY.
    pub async fn copy_failed(&self) {
        self.copy_in.lock().await.take();
    }

    /// Writes `chunk` (whole lines) of a COPY, [`copy::BATCH_ROWS`]
    /// rows per INSERT.
    async fn copy_write(&self, c: &mut CopyIn, chunk: &[u8]) -> crate::Result<()> {
        let text = std::str::from_utf8(chunk)
            .map_err(|_| Error::InvalidInput(format!("COPY line {}: not UTF-8", c.lines)))?;
        let rows = copy::rows(text, &c.copy.options, c.first)?;
        let header = usize::from(c.first && c.copy.options.header);
        c.first = false;
        self.copy_rows(c, &rows, header).await?;
        c.lines += header;
        Ok(())
    }

    /// Writes the whole tuples at the front of a binary COPY's pending
    /// data; at the end (`last`), refuses data cut off or without its
    /// trailer.
    async fn copy_write_binary(&self, c: &mut CopyIn, last: bool) -> crate::Result<()> {
        let kinds: Vec<TypeKind> = copy::columns(&c.table, &c.copy)?
            .iter()
            .map(|col| {
                col.field_type
                    .as_ref()
                    .map(|t| t.kind())
                    .unwrap_or(TypeKind::Varchar)
            })
            .collect();
        let (rows, used) = copy::binary_rows(&c.pending, &kinds, &mut c.binary, c.lines)?;
        c.pending.drain(..used);
        self.copy_rows(c, &rows, 0).await?;
        if last && (!c.binary.ended || !c.pending.is_empty()) {
            return Err(Error::InvalidInput(match c.binary.ended {
                true => "COPY binary data: bytes after the trailer".into(),
                false => format!(
                    "COPY binary data: the data ends inside row {} or before the trailer \
                     (a field count of -1); the rows before it were written",
                    c.lines
                ),
            }));
        }
        Ok(())
    }

    /// Writes `rows` of a COPY as INSERTs of [`copy::BATCH_ROWS`] rows,
    /// the first of them line `c.lines + header`.
    async fn copy_rows(
        &self,
        c: &mut CopyIn,
        rows: &[Vec<Option<String>>],
        header: usize,
    ) -> crate::Result<()> {
        let txn = self.txn();
        for batch in rows.chunks(copy::BATCH_ROWS) {
            let sql = copy::insert_sql(&c.table, &c.copy, batch, c.lines + header)?;
            let r = self.scoped(self.engine.sql_in(&sql, txn.as_ref())).await;
            if let Err(e) = r {
                if txn.is_some() {
                    self.failed.store(true, Ordering::Relaxed);
                }
                return Err(e);
            }
            if txn.is_some() {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            c.rows += batch.len();
            c.lines += batch.len();
        }
        Ok(())
    }
}
