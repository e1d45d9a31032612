//! Transport security: TLS on every gRPC connection, mutual TLS inside the
//! cluster, and the rule that plaintext stays on loopback.
//!
//! Every process reads the same `[security]` section ([`SecurityConfig`]):
//! a CA certificate, this process's certificate and key (PEM files), and
//! optionally the common names a peer's certificate may carry. With it:
//!
//! * a **store** serves TLS and requires a client certificate signed by
//!   the CA (mutual TLS), so only the cluster's own processes (other
//!   stores, compute, an operator holding a cluster certificate) can call
//!   its services: raft, KV, coprocessor, meta (DDL, users) and admin;
//! * **compute** serves Flight SQL over TLS, asking clients for a
//!   certificate without requiring one: clients log in with a password
//!   (`compute/src/auth.rs`), and other compute processes' MPP worker
//!   calls must present the cluster's. It presents its own certificate
//!   when it calls stores and other compute processes;
//! * every outgoing connection inside the cluster is made by
//!   [`endpoint`], which uses `https` and the process's client identity
//!   once [`install_client`] has been called at start-up, and plain
//!   `http` otherwise. One process-wide setting, not a parameter threaded
//!   through every client: a process is either in a secure cluster or not.
//!
//! `cert-allowed-cn` narrows mutual TLS from "signed by our CA" to "signed
//! by our CA and named one of these": the check ([`cn_check_layer`]) runs
//! before any service sees the request and answers PERMISSION_DENIED.
//!
//! Without `[security]`, a process serves plaintext, which is only allowed
//! on a loopback address ([`check_bind`]); `--insecure` (or `insecure =
//! true`) is the explicit opt-out for a private network.
//!
//! Certificates are read once, at start: replacing them needs a restart.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

/// The `[security]` section of the storage and compute configs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct SecurityConfig {
    /// The cluster's CA certificate (PEM): what peers' certificates must
    /// be signed by.
    pub ca_path: String,
    /// This process's certificate (PEM), signed by the CA; its names (SAN)
    /// must include the address others dial.
    pub cert_path: String,
    /// The certificate's private key (PEM).
    pub key_path: String,
    /// If not empty, a peer's certificate must carry one of these common
    /// names: every call to a store, and MPP worker calls to compute
    /// (compute's clients log in with passwords instead).
    pub cert_allowed_cn: Vec<String>,
    /// Serve plaintext on an address other than loopback.
    pub insecure: bool,
}

/// The certificates of a [`SecurityConfig`], read from their files.
#[derive(Clone)]
pub struct Tls {
    ca: Certificate,
    identity: Identity,
    allowed_cn: Arc<Vec<String>>,
}

impl SecurityConfig {
    /// Whether TLS is configured (all three paths given).
    pub fn enabled(&self) -> bool {
        !self.cert_path.is_empty()
    }

    /// Reads the certificates: `None` without TLS, an error naming the
    /// file or key that is missing.
    pub fn load(&self) -> Result<Option<Tls>, String> {
        let given = [&self.ca_path, &self.cert_path, &self.key_path]
            .iter()
            .filter(|p| !p.is_empty())
            .count();
        match given {
            0 if self.cert_allowed_cn.is_empty() => return Ok(None),
            3 => {}
            _ => {
                return Err(
                    "[security] needs all of ca-path, cert-path and key-path, or none of them"
                        .into(),
                )
            }
        }
        let read = |key: &str, path: &str| {
            std::fs::read(path).map_err(|e| format!("[security] {key} '{path}': {e}"))
        };
        let ca = read("ca-path", &self.ca_path)?;
        let cert = read("cert-path", &self.cert_path)?;
        let key = read("key-path", &self.key_path)?;
        Ok(Some(Tls {
            ca: Certificate::from_pem(ca),
            identity: Identity::from_pem(cert, key),
            allowed_cn: Arc::new(self.cert_allowed_cn.clone()),
        }))
    }
}

impl Tls {
    /// The server side: this process's certificate; with
    /// `require_client_cert`, clients must present one signed by the CA.
    pub fn server(&self, require_client_cert: bool) -> ServerTlsConfig {
        let cfg = ServerTlsConfig::new().identity(self.identity.clone());
        match require_client_cert {
            true => cfg.client_ca_root(self.ca.clone()),
            false => cfg,
        }
    }

    /// The server side of a port that serves both clients without a
    /// certificate (they log in with a password) and the cluster's own
    /// processes, which present one: a certificate is asked for but not
    /// required, and one that is presented must be signed by the CA (a
    /// service that needs one checks [`peer_cert_cn`]).
    pub fn server_optional_client_cert(&self) -> ServerTlsConfig {
        self.server(true).client_auth_optional(true)
    }

    /// The client side: trust the CA, present this process's certificate.
    pub fn client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(self.ca.clone())
            .identity(self.identity.clone())
    }

    /// The common names a peer's certificate may carry (empty: any).
    pub fn allowed_cn(&self) -> Vec<String> {
        self.allowed_cn.to_vec()
    }
}

static CLIENT_TLS: OnceLock<ClientTlsConfig> = OnceLock::new();

/// Makes every connection [`endpoint`] builds from now on use TLS with
/// `tls` (the process's identity). Called once, at start-up: the first
/// call wins (a process is in one cluster).
pub fn install_client(tls: ClientTlsConfig) {
    let _ = CLIENT_TLS.set(tls);
}

/// An endpoint for `addr` (`host:port`) inside the cluster: `https` with
/// the installed client identity, or `http`.
pub fn endpoint(addr: &str) -> Result<Endpoint, String> {
    let bad = |e: &dyn std::fmt::Display| format!("bad address '{addr}': {e}");
    match CLIENT_TLS.get() {
        Some(tls) => Endpoint::from_shared(format!("https://{addr}"))
            .map_err(|e| bad(&e))?
            .tls_config(tls.clone())
            .map_err(|e| bad(&e)),
        None => Endpoint::from_shared(format!("http://{addr}")).map_err(|e| bad(&e)),
    }
}

/// Refuses to serve plaintext on `local` unless it is a loopback address
/// or the operator said `insecure`.
pub fn check_bind(local: SocketAddr, tls: bool, insecure: bool) -> Result<(), String> {
    if tls || insecure || local.ip().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "refusing to serve plaintext on {local}, which is not a loopback address: \
         configure [security] ca-path, cert-path and key-path, or pass --insecure"
    ))
}

/// The common name of a DER certificate's subject, if it has one.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// What a request's caller proved with its TLS client certificate.
#[derive(Debug, PartialEq, Eq)]
pub enum PeerCert {
    /// No certificate (or not a TLS connection).
    None,
    /// A certificate the TLS handshake verified against the CA, with its
    /// common name if it has one.
    Verified(Option<String>),
}

/// The client certificate of `req`'s connection. A server configured
/// with the CA as client root ([`Tls::server`] or
/// [`Tls::server_optional_client_cert`]) has verified it in the handshake.
pub fn peer_cert_cn<B>(req: &http::Request<B>) -> PeerCert {
    let certs = req
        .extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()
        .and_then(|i| i.peer_certs());
    match certs.as_ref().and_then(|c| c.first()) {
        Some(cert) => PeerCert::Verified(common_name(cert)),
        None => PeerCert::None,
    }
}

/// Whether `cn` passes `allowed` (empty: any certificate of the CA):
/// PERMISSION_DENIED names the CN that is not allowed.
pub fn check_cn(allowed: &[String], cn: Option<&str>) -> Result<(), tonic::Status> {
    if allowed.is_empty() {
        return Ok(());
    }
    match cn {
        Some(cn) if allowed.iter().any(|a| a == cn) => Ok(()),
        Some(cn) => Err(tonic::Status::permission_denied(format!(
            "certificate CN '{cn}' is not in this server's cert-allowed-cn"
        ))),
        None => Err(tonic::Status::permission_denied(
            "a client certificate with a common name is required (cert-allowed-cn)",
        )),
    }
}

/// Checks the client certificate's common name of every request against
/// `allowed` (nothing is checked when it is empty): PERMISSION_DENIED
/// names the CN that is not allowed.
pub fn cn_check_layer<B>(
    allowed: Vec<String>,
) -> tower::filter::FilterLayer<
    impl Fn(http::Request<B>) -> Result<http::Request<B>, tonic::Status> + Clone + Send + Sync,
> {
    let check = move |req: http::Request<B>| {
        if allowed.is_empty() {
            return Ok(req);
        }
        let cn = match peer_cert_cn(&req) {
            PeerCert::Verified(cn) => cn,
            PeerCert::None => None,
        };
        check_cn(&allowed, cn.as_deref()).map(|()| req)
    };
    tower::filter::FilterLayer::new(check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_stays_on_loopback() {
        let lo: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:4000".parse().unwrap();
        assert!(check_bind(lo, false, false).is_ok());
        assert!(check_bind(any, true, false).is_ok());
        assert!(check_bind(any, false, true).is_ok());
        let e = check_bind(any, false, false).unwrap_err();
        assert!(
            e.contains("refusing to serve plaintext on 0.0.0.0:4000"),
            "{e}"
        );
        assert!(e.contains("--insecure"), "{e}");
    }

    #[test]
    fn half_a_config_is_refused() {
        let cfg = SecurityConfig {
            cert_path: "/x.pem".into(),
            ..Default::default()
        };
        let e = cfg.load().err().unwrap();
        assert!(
            e.contains("needs all of ca-path, cert-path and key-path"),
            "{e}"
        );
        let cfg = SecurityConfig {
            ca_path: "/nonexistent/ca.pem".into(),
            cert_path: "/nonexistent/c.pem".into(),
            key_path: "/nonexistent/c.key".into(),
            ..Default::default()
        };
        let e = cfg.load().err().unwrap();
        assert!(e.contains("ca-path '/nonexistent/ca.pem'"), "{e}");
        assert!(SecurityConfig::default().load().unwrap().is_none());
    }
}
