//! The Quarry client: connect to a compute process, run SQL or a typed
//! aggregation request, get Arrow [`RecordBatch`]es.
//!
//! ```no_run
//! # async fn demo() -> Result<(), quarry_client::Error> {
//! use quarry_client::{col, lit_date, lit_decimal, sum, Client, Request};
//!
//! let mut client = Client::connect("http://127.0.0.1:4000").await?;
//! let batches = client.sql("SELECT count(*) FROM lineitem").await?;
//!
//! // TPC-H Q6, built instead of written.
//! let q6 = Request::table("lineitem")
//!     .filter(col("l_shipdate").ge(lit_date("1994-01-01")))
//!     .filter(col("l_shipdate").lt(lit_date("1995-01-01")))
//!     .filter(col("l_discount").between(lit_decimal("0.05"), lit_decimal("0.07")))
//!     .filter(col("l_quantity").lt(24))
//!     .aggregate(sum(col("l_extendedprice") * col("l_discount")), "revenue");
//! let revenue = client.run(&q6).await?;
//! # Ok(()) }
//! ```
//!
//! The client speaks Arrow Flight SQL, so any Flight SQL client (ADBC,
//! JDBC) reaches the same server; the typed request travels as the SQL
//! statement it renders, planned by the server like any other.
//!
//! A compute process with TLS takes an `https://` address, the CA that
//! signed its certificate and a login ([`Client::connect_with`],
//! [`ConnectOptions`]).
//!
//! Transactions: `client.sql("BEGIN")` (or [`Client::begin`]) opens one
//! with Flight SQL's `BeginTransaction`; the statements that follow carry
//! its id; `COMMIT` / `ROLLBACK` end it (`EndTransaction`).

// Library and binary code handles failures; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod builder;

pub use builder::{
    avg, col, count, count_star, lit, lit_date, lit_decimal, max, min, sum, Expr, Request,
};

use arrow::array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult, ActionEndTransactionRequest, Any,
    CommandStatementQuery, EndTransaction, ProstMessageExt,
};
use arrow_flight::{Action, FlightDescriptor, FlightInfo, HandshakeRequest};
use base64::Engine as _;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// What went wrong, by what the caller can do about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The statement is wrong or unsupported (unknown table or column, type
    /// mismatch, syntax).
    #[error("{0}")]
    InvalidInput(String),
    /// Exact arithmetic overflowed (e.g. a SUM past its type).
    #[error("{0}")]
    Overflow(String),
    /// A store or compute could not be reached; retrying later may work.
    #[error("{0}")]
    Unavailable(String),
    /// The statement ran out of time. For a write whose commit may still
    /// apply, the message says its outcome is unknown.
    #[error("{0}")]
    Deadline(String),
    /// The statement was cancelled (by this client, or an operator on the
    /// compute process's console), or its stream was reset on the way.
    #[error("{0}")]
    Cancelled(String),
    /// Another transaction wrote the same row first (snapshot isolation's
    /// first committer wins), or this transaction was rolled back: nothing
    /// of it was written; run it again.
    #[error("{0}")]
    Conflict(String),
    /// No login, or a wrong one (compute with TLS requires one).
    #[error("{0}")]
    Unauthenticated(String),
    /// Logged in, but not allowed to do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// Anything else (a bug on one side or the other).
    #[error("{0}")]
    Internal(String),
}

/// `m` followed by the causes of `e` (a transport error's TLS failure:
/// "invalid peer certificate: UnknownIssuer").
fn with_causes(mut m: String, e: &dyn std::error::Error) -> String {
    let mut src = e.source();
    while let Some(cause) = src {
        let text = cause.to_string();
        if !m.contains(&text) {
            m.push_str(": ");
            m.push_str(&text);
        }
        src = cause.source();
    }
    m
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Self {
        let m = with_causes(s.message().to_string(), &s);
        match s.code() {
            tonic::Code::InvalidArgument | tonic::Code::Unimplemented | tonic::Code::NotFound => {
                Error::InvalidInput(m)
            }
            tonic::Code::OutOfRange => Error::Overflow(m),
            tonic::Code::Unavailable => Error::Unavailable(m),
            tonic::Code::DeadlineExceeded => Error::Deadline(m),
            tonic::Code::Cancelled => Error::Cancelled(m),
            tonic::Code::Aborted => Error::Conflict(m),
            tonic::Code::Unauthenticated => Error::Unauthenticated(m),
            tonic::Code::PermissionDenied => Error::PermissionDenied(m),
            _ => Error::Internal(if m.is_empty() { s.to_string() } else { m }),
        }
    }
}

impl From<FlightError> for Error {
    fn from(e: FlightError) -> Self {
        match e {
            FlightError::Tonic(s) => (*s).into(),
            other => Error::Internal(other.to_string()),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A one-row `result` column: what BEGIN, COMMIT and ROLLBACK answer.
fn status_batch(word: &str) -> Result<Vec<RecordBatch>> {
    use arrow::array::StringArray;
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new(
        "result",
        DataType::Utf8,
        false,
    )]));
    let batch = RecordBatch::try_new(
        schema,
        vec![std::sync::Arc::new(StringArray::from(vec![word]))],
    )
    .map_err(|e| Error::Internal(e.to_string()))?;
    Ok(vec![batch])
}

/// A connection to one compute process, and its session: autocommit (each
/// statement a transaction of its own) until [`Client::begin`] or a
/// `BEGIN` statement opens a transaction, which its statements then run in
/// until `COMMIT` or `ROLLBACK`.
#[derive(Clone)]
pub struct Client {
    flight: FlightServiceClient<InterceptedService<Channel, Token>>,
    /// The open transaction's Flight SQL id.
    txn: Option<bytes::Bytes>,
}

/// How to reach a compute process that has TLS and logins (`Debug`
/// does not show the password).
#[derive(Clone, Default)]
pub struct ConnectOptions {
    /// The CA certificate (PEM) that signed compute's certificate; an
    /// `https://` address needs it.
    pub ca_pem: Option<Vec<u8>>,
    /// Log in as this user (Flight SQL's handshake, basic auth)...
    pub user: Option<String>,
    /// ... with this password.
    pub password: Option<String>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("ca_pem", &self.ca_pem.as_ref().map(|c| c.len()))
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Adds the session's bearer token, if it has one, to every call.
#[derive(Clone)]
pub struct Token(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Token {
    fn call(
        &mut self,
        mut req: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            req.metadata_mut().insert("authorization", t.clone());
        }
        Ok(req)
    }
}

/// Whether `url`'s host is a loopback address (`localhost`, `127.x`,
/// `[::1]`).
fn is_loopback(url: &str) -> bool {
    let host = url
        .split("://")
        .nth(1)
        .unwrap_or(url)
        .split('/')
        .next()
        .unwrap_or_default();
    let host = match host.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Logs in through the handshake; the bearer token compute answered
/// (none when compute needs no login).
async fn login(channel: Channel, user: &str, password: &str) -> Result<Token> {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let mut req = tonic::Request::new(futures::stream::iter([HandshakeRequest::default()]));
    let value = format!("Basic {basic}").parse().map_err(|_| {
        Error::InvalidInput("the user name or password cannot travel in a header".into())
    })?;
    req.metadata_mut().insert("authorization", value);
    let resp = FlightServiceClient::new(channel).handshake(req).await?;
    let token = resp.metadata().get("authorization").cloned();
    let mut stream = resp.into_inner();
    while stream.message().await?.is_some() {}
    Ok(Token(token))
}

/// A statement the session runs itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionStatement {
    Begin,
    Commit,
    Rollback,
}

impl SessionStatement {
    /// `BEGIN [TRANSACTION | WORK]`, `START TRANSACTION`, `COMMIT [WORK |
    /// TRANSACTION]`, `END`, `ROLLBACK [WORK | TRANSACTION]`, `ABORT`, in
    /// any case, with an optional `;`.
    fn parse(sql: &str) -> Option<Self> {
        let words: Vec<String> = sql
            .trim()
            .trim_end_matches(';')
            .split_whitespace()
            .map(|w| w.to_ascii_lowercase())
            .collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        match words.as_slice() {
            ["begin"] | ["begin", "transaction" | "work"] | ["start", "transaction"] => {
                Some(Self::Begin)
            }
            ["commit"] | ["commit", "transaction" | "work"] | ["end"] => Some(Self::Commit),
            ["rollback"] | ["rollback", "transaction" | "work"] | ["abort"] => Some(Self::Rollback),
            _ => None,
        }
    }
}

impl Client {
    /// Connects to `url` (`http://host:port`), without TLS or a login.
    pub async fn connect(url: &str) -> Result<Client> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// Connects to `url`: `https://host:port` uses TLS, trusting
    /// `opts.ca_pem`; with `opts.user`, logs in first.
    pub async fn connect_with(url: &str, opts: &ConnectOptions) -> Result<Client> {
        let mut endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| Error::InvalidInput(format!("bad address '{url}': {e}")))?
            .connect_timeout(std::time::Duration::from_secs(5))
            .tcp_nodelay(true);
        if url.starts_with("https://") {
            let ca = opts.ca_pem.as_ref().ok_or_else(|| {
                Error::InvalidInput(format!(
                    "{url} uses TLS: give the CA certificate that signed compute's (--ca)"
                ))
            })?;
            let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| Error::InvalidInput(format!("TLS for {url}: {e}")))?;
        }
        if opts.user.is_some() && !url.starts_with("https://") && !is_loopback(url) {
            return Err(Error::InvalidInput(format!(
                "refusing to send a password in plaintext to {url}: use https://"
            )));
        }
        let channel = endpoint.connect().await.map_err(|e| {
            let msg = format!("cannot connect to compute at {url}: {e}");
            Error::Unavailable(with_causes(msg, &e))
        })?;
        let token = match &opts.user {
            Some(user) => {
                let password = opts.password.as_deref().unwrap_or_default();
                login(channel.clone(), user, password).await?
            }
            None => Token(None),
        };
        let flight = FlightServiceClient::with_interceptor(channel, token)
            .max_decoding_message_size(quarry_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(quarry_proto::MAX_MESSAGE_BYTES);
        Ok(Client { flight, txn: None })
    }

    /// Runs one SQL statement; queries return their rows, other statements
    /// a small status result. `BEGIN`, `COMMIT` and `ROLLBACK` open and end
    /// the session's transaction ([`Client::begin`]).
    pub async fn sql(&mut self, sql: &str) -> Result<Vec<RecordBatch>> {
        if let Some(s) = SessionStatement::parse(sql) {
            let word = match s {
                SessionStatement::Begin => self.begin().await.map(|_| "BEGIN")?,
                SessionStatement::Commit => self.commit().await.map(|_| "COMMIT")?,
                SessionStatement::Rollback => self.rollback().await.map(|_| "ROLLBACK")?,
            };
            return status_batch(word);
        }
        let desc = self.query(sql);
        self.fetch(desc).await
    }

    /// [`Client::sql`], its answer streamed: the batches come as the
    /// server sends them, so an answer larger than memory can be read
    /// through. A failure partway (the statement's deadline, a store lost)
    /// ends the stream with the error: the batches before it are not the
    /// whole answer.
    pub async fn sql_stream(
        &mut self,
        sql: &str,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        if SessionStatement::parse(sql).is_some() {
            let batches = self.sql(sql).await?;
            return Ok(futures::stream::iter(batches.into_iter().map(Ok)).boxed());
        }
        let desc = self.query(sql);
        self.stream(desc).await
    }

    /// Opens a transaction: the session's statements read one snapshot
    /// (and their own writes) and commit together at [`Client::commit`].
    pub async fn begin(&mut self) -> Result<()> {
        if self.txn.is_some() {
            return Err(Error::InvalidInput(
                "a transaction is already open; COMMIT or ROLLBACK it first".into(),
            ));
        }
        let action = Action {
            r#type: "BeginTransaction".into(),
            body: ActionBeginTransactionRequest {}
                .as_any()
                .encode_to_vec()
                .into(),
        };
        let mut results = self.flight.do_action(action).await?.into_inner();
        let result = results
            .message()
            .await?
            .ok_or_else(|| Error::Internal("BeginTransaction answered nothing".into()))?;
        let begun: ActionBeginTransactionResult = Any::decode(&*result.body)
            .ok()
            .and_then(|any| any.unpack().ok().flatten())
            .ok_or_else(|| Error::Internal("BeginTransaction answered garbage".into()))?;
        self.txn = Some(begun.transaction_id);
        Ok(())
    }

    /// Commits the open transaction. Without one, nothing to do.
    pub async fn commit(&mut self) -> Result<()> {
        self.end(EndTransaction::Commit).await
    }

    /// Rolls the open transaction back. Without one, nothing to do.
    pub async fn rollback(&mut self) -> Result<()> {
        self.end(EndTransaction::Rollback).await
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.txn.is_some()
    }

    async fn end(&mut self, how: EndTransaction) -> Result<()> {
        // The session leaves the transaction whatever the answer: a failed
        // COMMIT rolled it back.
        let Some(id) = self.txn.take() else {
            return Ok(());
        };
        let action = Action {
            r#type: "EndTransaction".into(),
            body: ActionEndTransactionRequest {
                transaction_id: id,
                action: how as i32,
            }
            .as_any()
            .encode_to_vec()
            .into(),
        };
        let mut results = self.flight.do_action(action).await?.into_inner();
        while results.message().await?.is_some() {}
        Ok(())
    }

    /// Runs a typed request (as the SQL it renders, [`Request::to_sql`]).
    pub async fn run(&mut self, request: &Request) -> Result<Vec<RecordBatch>> {
        self.sql(&request.to_sql()).await
    }

    async fn fetch(&mut self, desc: FlightDescriptor) -> Result<Vec<RecordBatch>> {
        self.stream(desc).await?.try_collect().await
    }

    /// The batches of the query `desc` names, from each of its endpoints
    /// in turn, as they arrive.
    async fn stream(
        &mut self,
        desc: FlightDescriptor,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let info: FlightInfo = self.flight.get_flight_info(desc).await?.into_inner();
        let mut streams = Vec::new();
        for ep in info.endpoint {
            let ticket = ep
                .ticket
                .ok_or_else(|| Error::Internal("endpoint without a ticket".into()))?;
            let stream = self.flight.do_get(ticket).await?.into_inner();
            let batches =
                FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
                    .map_err(Error::from);
            streams.push(batches);
        }
        Ok(futures::stream::iter(streams).flatten().boxed())
    }

    /// The descriptor of the query `sql`, in the session's transaction.
    fn query(&self, sql: &str) -> FlightDescriptor {
        let cmd = CommandStatementQuery {
            query: sql.to_string(),
            transaction_id: self.txn.clone(),
        };
        FlightDescriptor::new_cmd(cmd.as_any().encode_to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::SessionStatement as S;

    #[test]
    fn loopback_hosts() {
        for url in [
            "http://127.0.0.1:4000",
            "http://localhost:1",
            "http://[::1]:4000",
        ] {
            assert!(super::is_loopback(url), "{url}");
        }
        for url in ["http://10.0.0.1:4000", "http://db.example.com:4000"] {
            assert!(!super::is_loopback(url), "{url}");
        }
    }

    #[test]
    fn the_session_runs_begin_commit_and_rollback_in_their_usual_spellings() {
        for (sql, want) in [
            ("BEGIN", Some(S::Begin)),
            ("begin transaction;", Some(S::Begin)),
            ("  Start Transaction ", Some(S::Begin)),
            ("COMMIT;", Some(S::Commit)),
            ("commit work", Some(S::Commit)),
            ("END", Some(S::Commit)),
            ("ROLLBACK", Some(S::Rollback)),
            ("abort;", Some(S::Rollback)),
            ("SELECT 1", None),
            ("BEGIN ISOLATION LEVEL SERIALIZABLE", None),
            ("ROLLBACK TO SAVEPOINT a", None),
        ] {
            assert_eq!(S::parse(sql), want, "{sql}");
        }
    }
}
