//! The storage process's one error type.
//!
//! `Region` errors are data for the caller (it refreshes routes and
//! retries); `InvalidInput` is the client's fault; `Unavailable` names a
//! peer that could not be reached; `Engine` and `Internal` are failures of
//! this process. Services map each variant to a response field or a tonic
//! status exactly once, at the server boundary.

use quarry_proto::meta::RegionError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("region error: {}", .0.message)]
    Region(Box<RegionError>),
    #[error("{0}")]
    InvalidInput(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("storage engine: {0}")]
    Engine(String),
    #[error("internal error (likely a bug): {0}")]
    Internal(String),
}

impl From<rocksdb::Error> for Error {
    fn from(e: rocksdb::Error) -> Self {
        Error::Engine(e.into_string())
    }
}

impl From<prost::DecodeError> for Error {
    fn from(e: prost::DecodeError) -> Self {
        Error::Internal(format!("corrupt stored protobuf: {e}"))
    }
}

impl From<quarry_coprocessor::Error> for Error {
    fn from(e: quarry_coprocessor::Error) -> Self {
        use quarry_coprocessor::Error as C;
        match e {
            C::InvalidInput(m) | C::Overflow(m) => Error::InvalidInput(m),
            C::Deadline(m) | C::ResourceExhausted(m) => Error::Unavailable(m),
            C::Internal(m) => Error::Internal(m),
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        match e {
            Error::Region(r) => tonic::Status::unavailable(format!("region error: {}", r.message)),
            Error::InvalidInput(m) => tonic::Status::invalid_argument(m),
            Error::Unavailable(m) => tonic::Status::unavailable(m),
            Error::Engine(m) => tonic::Status::internal(format!("storage engine: {m}")),
            Error::Internal(m) => tonic::Status::internal(m),
        }
    }
}

impl Error {
    pub fn region(e: RegionError) -> Self {
        Error::Region(Box::new(e))
    }
}
