//! The gRPC services of a storage process. Each is a thin shell over
//! [`crate::node::Node`] or [`crate::meta::Meta`] that maps errors exactly
//! once: region errors into response fields, the rest into tonic statuses.

pub mod admin;
pub mod coprocessor;
pub mod kv;
pub mod meta;
pub mod raft;

use quarry_proto::kv::KeyError;
use quarry_proto::meta::RegionError;

use crate::Error;

/// Splits an error into the (region_error, error) response fields.
pub fn error_fields(e: Error) -> (Option<RegionError>, Option<KeyError>) {
    use quarry_proto::kv::key_error::Code;
    match e {
        Error::Region(r) => (Some(*r), None),
        Error::Key(k) => (None, Some(*k)),
        Error::InvalidInput(m) => (
            None,
            Some(KeyError {
                code: Code::InvalidInput as i32,
                message: m,
                ..Default::default()
            }),
        ),
        Error::Unavailable(m) => (
            None,
            Some(KeyError {
                code: Code::Unavailable as i32,
                message: m,
                ..Default::default()
            }),
        ),
        other => (
            None,
            Some(KeyError {
                code: Code::Internal as i32,
                message: other.to_string(),
                ..Default::default()
            }),
        ),
    }
}
