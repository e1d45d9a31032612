//! Transactions bound to a connection by a cookie, for clients that run
//! `BEGIN` … `COMMIT` as SQL.
//!
//! Flight SQL's own transactions (`BeginTransaction`, then a
//! `transaction_id` on every statement, then `EndTransaction`) need a
//! client that sends the id. Python ADBC does; the Arrow Flight SQL JDBC
//! driver does not: its `commit()` and `rollback()` are empty stubs and
//! `setAutoCommit(false)` changes nothing on the wire (still so in
//! arrow-java 19.0.0). What that driver does keep is cookies: every
//! connection has a cookie jar (arrow-flight's `ClientCookieMiddleware`),
//! as Flight SQL's session options rely on.
//!
//! So a `BEGIN` that arrives without a transaction id opens a transaction
//! and answers a `set-cookie: quarry_txn=<id>` header; every later call on
//! that connection carries the cookie, and a statement without an id of
//! its own runs in the cookie's transaction. `COMMIT` or `ROLLBACK` ends it
//! and expires the cookie (`Max-Age=0`). The rules for the statements a
//! cookie meets live in `FlightSqlServer::resolve`; this module carries
//! the cookies in and out:
//!
//! * [`CookieLayer`] reads the request's `cookie` headers and runs the call
//!   with them in scope (a task-local, as the login's caller is);
//! * `txn_id` is the id the cookie names, and `set_txn` asks for a
//!   `set-cookie` header on the answer, which the layer adds once the
//!   handler has answered (arrow-flight runs a `DoPut` handler to its end
//!   before it answers, so updates can set it too).
//!
//! A client without a cookie jar (Python ADBC by default, a plain gRPC
//! client) would drop the transaction's cookie, and its next statements
//! would commit on their own while it believes them in a transaction. So
//! a `BEGIN` without an id opens a transaction only for a client that has
//! shown it keeps cookies: every answer to a request without the probe
//! cookie `quarry_jar=1` sets it, and `has_jar` says whether the request
//! sent it back. The JDBC driver's first call on a connection (a
//! handshake, or the prepare of the `BEGIN` itself) earns it; a client
//! without a jar gets the error `BEGIN` always gave it.
//!
//! Caveats: the transaction lives in the compute process that began it,
//! as one begun by `BeginTransaction` does; a second compute process
//! behind a balancer answers "no open transaction". A client that drops
//! its connection with a transaction open leaves it to the idle timeout
//! (`session.rs`), as an ADBC client that never ends one does. The driver
//! cannot reset a pooled connection (its `rollback()` is a stub): a
//! borrower that leaves a `BEGIN` open hands it to the next one, so code
//! that pools connections sends `ROLLBACK` before returning one.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use quarry_coprocessor::codec::key::hex;

/// The cookie's name (lower case: Java's cookie jar keys by lower case).
pub const NAME: &str = "quarry_txn";

/// The probe cookie: a request that carries it comes from a client that
/// keeps cookies.
const JAR: &str = "quarry_jar";

/// What one call brought in and wants sent back.
struct CallCookies {
    /// The transaction id the request's `quarry_txn` cookie names.
    txn: Option<Vec<u8>>,
    /// Whether the request carried the probe cookie.
    jar: bool,
    /// The `set-cookie` value for the answer, if the handler set one.
    set: Mutex<Option<String>>,
}

tokio::task_local! {
    static CALL: Arc<CallCookies>;
}

/// The transaction id the request's cookie names (None without one, or
/// outside a request).
pub fn txn_id() -> Option<Vec<u8>> {
    CALL.try_with(|c| c.txn.clone()).ok().flatten()
}

/// Whether the request came from a client that keeps cookies (it sent
/// the probe cookie back).
pub fn has_jar() -> bool {
    CALL.try_with(|c| c.jar).unwrap_or(false)
}

/// Asks for the answer to set the cookie to `id`, or to expire it (None).
/// Outside a request (a unit test calling a handler) it does nothing.
pub fn set_txn(id: Option<&[u8]>) {
    let value = match id {
        Some(id) => format!("{NAME}={}; Path=/; HttpOnly", hex(id)),
        None => format!("{NAME}=; Max-Age=0; Path=/; HttpOnly"),
    };
    let _ = CALL.try_with(|c| *c.set.lock() = Some(value));
}

/// The bytes of an even-length hex string (None if it is not one).
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// The `quarry_txn` value among a request's `cookie` headers
/// (`a=1; quarry_txn=…`; the last one wins), decoded from hex. An empty
/// value is no cookie; one that is not hex is kept as its bytes, so the
/// transaction lookup refuses it as malformed.
fn from_headers(headers: &http::HeaderMap) -> Option<Vec<u8>> {
    cookie_values(headers, NAME)
        .filter(|value| !value.is_empty())
        .map(|value| unhex(value).unwrap_or_else(|| value.as_bytes().to_vec()))
        .next_back()
}

/// The values of the cookies named `name` in a request's `cookie` headers.
fn cookie_values<'a>(
    headers: &'a http::HeaderMap,
    name: &'a str,
) -> impl DoubleEndedIterator<Item = &'a str> + 'a {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(move |(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, value)| value.trim())
}

/// The layer that gives a call its cookies (`txn_id`, `has_jar`) and sends
/// back the ones to set (`set_txn`, and the probe cookie to a request
/// without it).
#[derive(Clone, Default)]
pub struct CookieLayer;

impl<S> tower::Layer<S> for CookieLayer {
    type Service = CookieService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CookieService { inner }
    }
}

#[derive(Clone)]
pub struct CookieService<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for CookieService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // The ready service serves this request; a clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let call = Arc::new(CallCookies {
            txn: from_headers(req.headers()),
            jar: cookie_values(req.headers(), JAR).next().is_some(),
            set: Mutex::new(None),
        });
        Box::pin(async move {
            let mut response = CALL.scope(call.clone(), inner.call(req)).await?;
            let probe = (!call.jar).then(|| format!("{JAR}=1; Path=/; HttpOnly"));
            let set = call.set.lock().take();
            for value in [probe, set].into_iter().flatten() {
                if let Ok(value) = http::HeaderValue::from_str(&value) {
                    response
                        .headers_mut()
                        .append(http::header::SET_COOKIE, value);
                }
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for v in values {
            h.append(http::header::COOKIE, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_transaction_cookie_is_found_among_others_and_decoded() {
        let id = 0x0123_4567_89ab_cdefu64.to_be_bytes().to_vec();
        assert_eq!(from_headers(&headers(&[])), None);
        assert_eq!(
            from_headers(&headers(&["a=1; quarry_txn=0123456789abcdef; b=2"])),
            Some(id.clone())
        );
        assert_eq!(
            from_headers(&headers(&["a=1", "QUARRY_TXN=0123456789abcdef"])),
            Some(id)
        );
        // An expired (empty) cookie is no cookie; a garbled one is kept,
        // so the lookup refuses it by name.
        assert_eq!(from_headers(&headers(&["quarry_txn="])), None);
        assert_eq!(
            from_headers(&headers(&["quarry_txn=xyz"])),
            Some(b"xyz".to_vec())
        );
        let jar = headers(&["a=1; quarry_jar=1"]);
        assert_eq!(cookie_values(&jar, JAR).collect::<Vec<_>>(), ["1"]);
        assert_eq!(cookie_values(&jar, NAME).next(), None);
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(unhex("00ab10"), Some(vec![0, 0xab, 0x10]));
    }
}
