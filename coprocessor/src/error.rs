//! The coprocessor's one error type.
//!
//! Variants are chosen by what the caller does next, not by where the error
//! came from: `InvalidInput` and `Overflow` are the user's to fix (never
//! retried), `Deadline` and `ResourceExhausted` may succeed later or with a
//! bigger budget, `Internal` is a bug. Region errors are not here: the
//! coprocessor runs on a snapshot the store already validated, and the store
//! reports region errors as data in the response.

use quarry_proto::coprocessor::{other_error::Code, OtherError};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The request is wrong: unknown column, type mismatch, unsupported
    /// construct, malformed data. Retrying cannot help.
    #[error("{0}")]
    InvalidInput(String),
    /// Exact arithmetic left its type's range (SUM, +, *, casts). Never
    /// wrapped, never rounded away.
    #[error("{0}")]
    Overflow(String),
    /// The request ran past its deadline; the scan was stopped.
    #[error("{0}")]
    Deadline(String),
    /// A bound (memory, queue length) was hit; a retry later may succeed.
    #[error("{0}")]
    ResourceExhausted(String),
    /// A bug: a state the code believes impossible.
    #[error("internal error (likely a bug): {0}")]
    Internal(String),
    /// The scan met the lock of a transaction that may commit below its
    /// snapshot: the caller resolves the lock and asks again.
    #[error("a row is locked by the transaction that started at {}", .0.start_ts)]
    Locked(Box<quarry_proto::kv::LockInfo>),
}

/// Builds an [`Error::InvalidInput`] with `format!` arguments.
#[macro_export]
macro_rules! invalid_input {
    ($($arg:tt)*) => { $crate::Error::InvalidInput(format!($($arg)*)) };
}

/// Builds an [`Error::Internal`] with `format!` arguments.
#[macro_export]
macro_rules! internal {
    ($($arg:tt)*) => { $crate::Error::Internal(format!($($arg)*)) };
}

/// Builds an [`Error::Overflow`] with `format!` arguments.
#[macro_export]
macro_rules! overflow {
    ($($arg:tt)*) => { $crate::Error::Overflow(format!($($arg)*)) };
}

impl Error {
    /// The wire form, for `CopResponse.other_error`.
    pub fn to_proto(&self) -> OtherError {
        let (code, message) = match self {
            Error::InvalidInput(m) => (Code::InvalidInput, m.clone()),
            Error::Overflow(m) => (Code::Overflow, m.clone()),
            Error::Deadline(m) => (Code::DeadlineExceeded, m.clone()),
            Error::ResourceExhausted(m) => (Code::ResourceExhausted, m.clone()),
            Error::Internal(m) => (Code::Internal, m.clone()),
            // Travels in `CopResponse.locked`; this is for a caller that
            // has nowhere else to put it.
            e @ Error::Locked(_) => (Code::Internal, e.to_string()),
        };
        OtherError {
            code: code as i32,
            message,
        }
    }

    /// The inverse of [`Error::to_proto`].
    pub fn from_proto(e: &OtherError) -> Error {
        let m = e.message.clone();
        match Code::try_from(e.code).unwrap_or(Code::Internal) {
            Code::InvalidInput => Error::InvalidInput(m),
            Code::Overflow => Error::Overflow(m),
            Code::DeadlineExceeded => Error::Deadline(m),
            Code::ResourceExhausted => Error::ResourceExhausted(m),
            Code::Internal => Error::Internal(m),
        }
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(e: arrow::error::ArrowError) -> Self {
        use arrow::error::ArrowError as A;
        match e {
            A::ArithmeticOverflow(m) => Error::Overflow(format!("arithmetic overflow: {m}")),
            A::DivideByZero => Error::InvalidInput("division by zero".into()),
            A::CastError(m) => Error::InvalidInput(format!("cannot cast: {m}")),
            A::InvalidArgumentError(m) if m.contains("overflow") || m.contains("Overflow") => {
                Error::Overflow(m)
            }
            A::ComputeError(m) if m.contains("verflow") => Error::Overflow(m),
            A::ParseError(m) => Error::InvalidInput(m),
            other => Error::Internal(format!("arrow: {other}")),
        }
    }
}
