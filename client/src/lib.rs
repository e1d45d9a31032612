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
use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt};
use arrow_flight::{FlightDescriptor, FlightInfo};
use futures::TryStreamExt;
use prost::Message;
use tonic::transport::{Channel, Endpoint};

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
    /// The query ran out of time.
    #[error("{0}")]
    Deadline(String),
    /// Anything else (a bug on one side or the other).
    #[error("{0}")]
    Internal(String),
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Self {
        let m = s.message().to_string();
        match s.code() {
            tonic::Code::InvalidArgument | tonic::Code::Unimplemented | tonic::Code::NotFound => {
                Error::InvalidInput(m)
            }
            tonic::Code::OutOfRange => Error::Overflow(m),
            tonic::Code::Unavailable => Error::Unavailable(m),
            tonic::Code::DeadlineExceeded => Error::Deadline(m),
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

/// A connection to one compute process.
#[derive(Clone)]
pub struct Client {
    flight: FlightServiceClient<Channel>,
}

impl Client {
    /// Connects to `url` (`http://host:port`).
    pub async fn connect(url: &str) -> Result<Client> {
        let endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| Error::InvalidInput(format!("bad address '{url}': {e}")))?
            .connect_timeout(std::time::Duration::from_secs(5))
            .tcp_nodelay(true);
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| Error::Unavailable(format!("cannot connect to compute at {url}: {e}")))?;
        let flight = FlightServiceClient::new(channel)
            .max_decoding_message_size(quarry_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(quarry_proto::MAX_MESSAGE_BYTES);
        Ok(Client { flight })
    }

    /// Runs one SQL statement; queries return their rows, other statements
    /// a small status result.
    pub async fn sql(&mut self, sql: &str) -> Result<Vec<RecordBatch>> {
        let cmd = CommandStatementQuery {
            query: sql.to_string(),
            transaction_id: None,
        };
        let desc = FlightDescriptor::new_cmd(cmd.as_any().encode_to_vec());
        self.fetch(desc).await
    }

    /// Runs a typed request (as the SQL it renders, [`Request::to_sql`]).
    pub async fn run(&mut self, request: &Request) -> Result<Vec<RecordBatch>> {
        self.sql(&request.to_sql()).await
    }

    async fn fetch(&mut self, desc: FlightDescriptor) -> Result<Vec<RecordBatch>> {
        let info: FlightInfo = self.flight.get_flight_info(desc).await?.into_inner();
        let mut out = Vec::new();
        for ep in info.endpoint {
            let ticket = ep
                .ticket
                .ok_or_else(|| Error::Internal("endpoint without a ticket".into()))?;
            let stream = self.flight.do_get(ticket).await?.into_inner();
            let batches: Vec<RecordBatch> =
                FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
                    .try_collect()
                    .await?;
            out.extend(batches);
        }
        Ok(out)
    }
}
