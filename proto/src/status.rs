//! Two status rules every Quarry gRPC server keeps: a request that does
//! not decode is the client's fault (INVALID_ARGUMENT), not a bug
//! (INTERNAL); and a request past the service's message size limit
//! (`max-message-mb`) is RESOURCE_EXHAUSTED, not OUT_OF_RANGE as tonic
//! answers it ("Error, decoded message length too large: found N bytes,
//! the limit is: M bytes", which the caller keeps as the message).
//!
//! Two decoders run before any Quarry code sees a request, and both call a
//! bad one INTERNAL: tonic answers a message that fails to decode
//! (malformed protobuf, a string field that is not UTF-8, nesting past
//! prost's fixed limit of 100 levels) with "failed to decode Protobuf
//! message: …", and arrow-flight answers a Flight SQL command whose `Any`
//! does not decode with `ParseError("Unable to decode Any value: …")`.
//! [`decode_errors_are_invalid`] rewrites the status of such responses as
//! they leave the server. A request refused before its handler runs gets a
//! trailers-only response, whose status travels in the headers, which is
//! where the rewrite looks; a status that ends a stream already under way
//! is left as it is (no decoder refuses there).

/// What tonic's and arrow-flight's decode errors begin with.
const DECODE_ERRORS: [&str; 2] = [
    "failed to decode Protobuf message",
    "ParseError(\"Unable to decode Any value",
];

/// `resp` with INTERNAL replaced by INVALID_ARGUMENT when its message is
/// a decode error (for `tower::util::MapResponseLayer`).
pub fn decode_errors_are_invalid<B>(mut resp: http::Response<B>) -> http::Response<B> {
    let headers = resp.headers_mut();
    let internal = headers
        .get("grpc-status")
        .is_some_and(|s| s.as_bytes() == b"13");
    let decode = headers.get("grpc-message").is_some_and(|m| {
        let m = percent_decoded(m.as_bytes());
        DECODE_ERRORS.iter().any(|p| m.starts_with(p))
    });
    if internal && decode {
        headers.insert("grpc-status", http::HeaderValue::from_static("3"));
    }
    let out_of_range = headers
        .get("grpc-status")
        .is_some_and(|s| s.as_bytes() == b"11");
    let too_large = headers
        .get("grpc-message")
        .is_some_and(|m| percent_decoded(m.as_bytes()).starts_with(TOO_LARGE));
    if out_of_range && too_large {
        headers.insert("grpc-status", http::HeaderValue::from_static("8"));
    }
    resp
}

/// What tonic's refusal of a message past the size limit begins with.
const TOO_LARGE: &str = "Error, decoded message length too large";

/// The layer that applies [`decode_errors_are_invalid`] to a server.
pub fn layer<B>() -> tower::util::MapResponseLayer<fn(http::Response<B>) -> http::Response<B>> {
    tower::util::MapResponseLayer::new(decode_errors_are_invalid::<B>)
}

/// gRPC's percent-encoding of `grpc-message` undone.
fn percent_decoded(b: &[u8]) -> String {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: &str, message: &str) -> http::Response<()> {
        let mut r = http::Response::new(());
        r.headers_mut()
            .insert("grpc-status", http::HeaderValue::from_str(status).unwrap());
        r.headers_mut().insert(
            "grpc-message",
            http::HeaderValue::from_str(message).unwrap(),
        );
        r
    }

    fn status_of(r: http::Response<()>) -> String {
        let r = decode_errors_are_invalid(r);
        r.headers()["grpc-status"].to_str().unwrap().to_string()
    }

    #[test]
    fn only_internal_decode_errors_become_invalid_argument() {
        let tonic = "failed%20to%20decode%20Protobuf%20message:%20invalid%20wire%20type";
        let flight = "ParseError(%22Unable%20to%20decode%20Any%20value:%20x%22)";
        assert_eq!(status_of(response("13", tonic)), "3");
        assert_eq!(status_of(response("13", flight)), "3");
        assert_eq!(status_of(response("13", "internal%20error")), "13");
        assert_eq!(status_of(response("14", tonic)), "14");
    }

    #[test]
    fn messages_past_the_size_limit_are_resource_exhausted() {
        let m = "Error,%20decoded%20message%20length%20too%20large:%20found%205%20bytes";
        assert_eq!(status_of(response("11", m)), "8");
        assert_eq!(status_of(response("11", "out%20of%20range")), "11");
    }
}
