//! The storage process's one error type.
//!
//! `Region` errors are data for the caller (it refreshes routes and
//! retries); `InvalidInput` is the client's fault; `Unavailable` names a
//! peer that could not be reached; `Engine` and `Internal` are failures of
//! this process. Services map each variant to a response field or a tonic
//! status exactly once, at the server boundary.
//!
//! DETERMINISM: applying a committed entry must reach the same result on
//! every replica. An error that follows from the entry and the replicated
//! state alone (a stale epoch, a duplicate key, malformed input) is the
//! command's answer: it is rejected everywhere alike and the replica moves
//! on. So is a command whose replicated bytes cannot be executed at all
//! (`BadCommand`): every replica holds the same bytes. Any other error (the engine failed to read, a stored value did not
//! decode, a bug) belongs to this replica only; answering it and moving on
//! would skip a write the other replicas applied, so apply stops the store
//! instead ([`Error::is_deterministic`], `apply.rs`).

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
    /// A committed command that cannot be executed as written (it does not
    /// decode, or names no peer). Every replica holds the same bytes and
    /// refuses it alike, so it is answered and apply moves on.
    #[error("bad raft command: {0}")]
    BadCommand(String),
    #[error("internal error (likely a bug): {0}")]
    Internal(String),
    /// A transaction's step refused by what is stored (a lock, a newer
    /// version, an existing row): the key error the client acts on.
    #[error("{}", .0.message)]
    Key(Box<quarry_proto::kv::KeyError>),
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
            e @ C::Locked(_) => Error::Internal(e.to_string()),
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
            Error::BadCommand(m) => tonic::Status::internal(format!("bad raft command: {m}")),
            Error::Internal(m) => tonic::Status::internal(m),
            Error::Key(k) => tonic::Status::failed_precondition(k.message),
        }
    }
}

impl Error {
    pub fn region(e: RegionError) -> Self {
        Error::Region(Box::new(e))
    }

    /// Whether every replica applying the same entry over the same
    /// replicated state meets this error too (see the module docs). Region
    /// errors and invalid input are decided from the command and the data;
    /// engine, internal and availability errors come from this process.
    pub fn is_deterministic(&self) -> bool {
        match self {
            Error::Region(_) | Error::InvalidInput(_) | Error::BadCommand(_) | Error::Key(_) => {
                true
            }
            Error::Unavailable(_) | Error::Engine(_) | Error::Internal(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_decided_by_the_command_and_the_data_are_deterministic() {
        assert!(Error::region(crate::region::not_found(1)).is_deterministic());
        assert!(Error::InvalidInput("duplicate key".into()).is_deterministic());
        assert!(Error::BadCommand("empty raft command".into()).is_deterministic());
        assert!(!Error::Engine("read failed".into()).is_deterministic());
        assert!(!Error::Internal("corrupt stored protobuf".into()).is_deterministic());
        assert!(!Error::Unavailable("peer down".into()).is_deterministic());
    }
}
