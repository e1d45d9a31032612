//! Compute's one error type, by what the caller does next.

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The statement is wrong or unsupported: unknown table or column, type
    /// mismatch, a construct Quarry does not run. The user's to fix.
    #[error("{0}")]
    InvalidInput(String),
    /// Exact arithmetic left its type's range.
    #[error("{0}")]
    Overflow(String),
    /// A store (or the meta region) could not answer in time; names it.
    #[error("{0}")]
    Unavailable(String),
    /// The query ran out of time.
    #[error("{0}")]
    Deadline(String),
    /// The query was cancelled (by its client or an operator); nothing
    /// more of it runs.
    #[error("{0}")]
    Cancelled(String),
    #[error("{0}")]
    ResourceExhausted(String),
    /// A bug.
    #[error("internal error (likely a bug): {0}")]
    Internal(String),
    /// Another transaction wrote the same row first (snapshot isolation's
    /// first committer wins): nothing was written; run it again.
    #[error("{0}")]
    Conflict(String),
    /// No login, or a wrong one: log in (again).
    #[error("{0}")]
    Unauthenticated(String),
    /// Logged in, but not allowed to do this.
    #[error("{0}")]
    PermissionDenied(String),
}

impl Error {
    /// The category's name, for metrics: what a client does about it.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidInput(_) => "invalid_input",
            Error::Overflow(_) => "overflow",
            Error::Unavailable(_) => "unavailable",
            Error::Deadline(_) => "deadline",
            Error::Cancelled(_) => "cancelled",
            Error::ResourceExhausted(_) => "resource_exhausted",
            Error::Internal(_) => "internal",
            Error::Conflict(_) => "conflict",
            Error::Unauthenticated(_) => "unauthenticated",
            Error::PermissionDenied(_) => "permission_denied",
        }
    }

    /// The same error, its message followed by `context` (what became of
    /// the work around it).
    pub fn with_context(self, context: &str) -> Error {
        self.map_message(|m| format!("{m}; {context}"))
    }

    /// The same error, its message rewritten by `f`.
    pub fn map_message(self, f: impl FnOnce(String) -> String) -> Error {
        match self {
            Error::InvalidInput(m) => Error::InvalidInput(f(m)),
            Error::Overflow(m) => Error::Overflow(f(m)),
            Error::Unavailable(m) => Error::Unavailable(f(m)),
            Error::Deadline(m) => Error::Deadline(f(m)),
            Error::Cancelled(m) => Error::Cancelled(f(m)),
            Error::ResourceExhausted(m) => Error::ResourceExhausted(f(m)),
            Error::Internal(m) => Error::Internal(f(m)),
            Error::Conflict(m) => Error::Conflict(f(m)),
            Error::Unauthenticated(m) => Error::Unauthenticated(f(m)),
            Error::PermissionDenied(m) => Error::PermissionDenied(f(m)),
        }
    }
}

#[macro_export]
macro_rules! plan_err {
    ($($arg:tt)*) => { $crate::Error::InvalidInput(format!($($arg)*)) };
}

impl From<quarry_coprocessor::Error> for Error {
    fn from(e: quarry_coprocessor::Error) -> Self {
        use quarry_coprocessor::Error as C;
        match e {
            C::InvalidInput(m) => Error::InvalidInput(m),
            C::Overflow(m) => Error::Overflow(m),
            C::Deadline(m) => Error::Deadline(m),
            C::ResourceExhausted(m) => Error::ResourceExhausted(m),
            C::Internal(m) => Error::Internal(m),
            e @ C::Locked(_) => Error::Unavailable(e.to_string()),
        }
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(e: arrow::error::ArrowError) -> Self {
        quarry_coprocessor::Error::from(e).into()
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidInput(m) => tonic::Status::invalid_argument(m),
            Error::Overflow(m) => tonic::Status::out_of_range(m),
            Error::Unavailable(m) => tonic::Status::unavailable(m),
            Error::Deadline(m) => tonic::Status::deadline_exceeded(m),
            Error::Cancelled(m) => tonic::Status::cancelled(m),
            Error::ResourceExhausted(m) => tonic::Status::resource_exhausted(m),
            Error::Internal(m) => tonic::Status::internal(m),
            Error::Conflict(m) => tonic::Status::aborted(m),
            Error::Unauthenticated(m) => tonic::Status::unauthenticated(m),
            Error::PermissionDenied(m) => tonic::Status::permission_denied(m),
        }
    }
}

/// A status message with its underlying causes ("tcp connect error:
/// Connection refused (os error 111)").
pub fn status_detail(status: &tonic::Status) -> String {
    let mut msg = status.message().to_string();
    let mut src = std::error::Error::source(status);
    while let Some(e) = src {
        let text = e.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        src = e.source();
    }
    msg
}
