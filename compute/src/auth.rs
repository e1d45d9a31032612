//! Logins: who may use this compute process, and how they prove it.
//!
//! A compute process with `[security]` (TLS) requires a login; without it
//! (plaintext, which only loopback allows) anyone who can connect is
//! trusted, as a local DuckDB or `tiup playground` is.
//!
//! THE FLIGHT SQL LOGIN
//!
//! Flight SQL clients (ADBC, the JDBC driver, the Rust client library)
//! log in the way the Flight spec describes: a `Handshake` call carrying
//! `authorization: Basic base64(user:password)`. Compute looks the user up
//! in the meta region (`UserDef`: an Argon2id hash, never the password),
//! checks the password, and answers a random bearer token in the
//! `authorization` response header (and in the one handshake message).
//! The client sends `authorization: Bearer <token>` with every later call;
//! [`AuthLayer`] checks it before any service code runs and refuses a
//! missing, unknown or expired token with UNAUTHENTICATED. A wrong user
//! name and a wrong password get the same answer, so a client cannot
//! probe for names.
//!
//! Tokens live in this process's memory: they are valid on the compute
//! process that issued them (Flight SQL's endpoints tell clients to reuse
//! their connection, so they come back here), they are lost on restart
//! (clients log in again), and one unused for [`TOKEN_IDLE`], or older
//! than [`TOKEN_LIFETIME`], expires. A session remembers the password
//! hash it logged in with: DROP USER and ALTER USER end the user's
//! sessions on this process at once (all but the session that changed
//! its own password), and on other compute processes at their next check
//! against meta (a token's user is looked up again every [`RECHECK`]; a
//! different hash, as after a new password or a drop and re-create under
//! the same name, ends the session).
//!
//! Checking a password costs Argon2's work (tens of milliseconds and
//! 19 MiB): at most [`MAX_CONCURRENT_LOGINS`]-per-core logins are checked at
//! once, and one that waits longer than [`LOGIN_QUEUE_WAIT`] for its turn
//! is refused with RESOURCE_EXHAUSTED, so a flood of handshakes, which
//! need no token, costs bounded memory.
//!
//! WHO MAY DO WHAT
//!
//! The caller of a request travels with it: the layer runs the request's
//! handler inside a task-local scope ([`crate::caller`]) that statements and
//! transactions read (a transaction belongs to the user who began it).
//! The scope covers the handler, not a response stream polled after it
//! returned: Flight's DoGet runs its statement before it answers, so
//! nothing that checks the caller runs in a stream. Superusers (made by
//! `quarry playground --secure` and `quarry user add --superuser`) manage
//! users; every user may change their own password and run any other
//! statement. Per-table grants are not built (`docs/security.md`).
//!
//! OTHER COMPUTE PROCESSES
//!
//! The same port serves MPP tasks (`df/mpp/`, the worker service). Those
//! calls come from the cluster's compute processes, not from users: a
//! task carries its plan and its snapshot and reads any table, so no
//! user's token opens it. In a secure cluster the port asks every TLS
//! client for a certificate without requiring one (clients with a
//! password have none), and the worker service admits only callers whose
//! certificate the handshake verified against the cluster's CA, with
//! `cert-allowed-cn` if set: UNAUTHENTICATED without one, PERMISSION_DENIED
//! for a name not listed.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::Engine as _;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use quarry_proto::meta::{PutUserMode, UserDef};

use crate::caller::{caller, current_token, Caller, Login, Scope, SCOPE};
use crate::cluster::Cluster;
use crate::sql::users::UserStatement;
use crate::{Error, Result};

/// A token unused for this long expires.
pub const TOKEN_IDLE: Duration = Duration::from_secs(8 * 3600);
/// A token older than this expires, however often it is used.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Passwords checked at once, per core.
pub const MAX_CONCURRENT_LOGINS: usize = 2;
/// How long a login waits for its turn to be checked.
pub const LOGIN_QUEUE_WAIT: Duration = Duration::from_secs(5);
/// A token's user is looked up in meta again after this long (a user
/// dropped through another compute process loses its sessions here).
pub const RECHECK: Duration = Duration::from_secs(30);
/// The longest password accepted (Argon2 takes any length; this bounds
/// the work one login costs).
const MAX_PASSWORD_BYTES: usize = 1024;
/// The Flight method that needs no token: it is how one is obtained.
const HANDSHAKE_PATH: &str = "/arrow.flight.protocol.FlightService/Handshake";
/// The MPP worker service's methods (`datafusion-distributed`'s
/// `worker.WorkerService`): cluster certificates, not tokens.
const WORKER_PATHS: &str = "/worker.WorkerService/";

/// The client address tonic recorded for an incoming request (plaintext
/// or TLS).
fn peer_of<B>(req: &http::Request<B>) -> Option<std::net::SocketAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let ext = req.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(|i| i.remote_addr())
        .or_else(|| {
            ext.get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        })
}

struct Session {
    caller: Caller,
    /// The password hash it logged in with.
    hash: String,
    created: Instant,
    last_used: Instant,
    checked: Instant,
}

pub struct Auth {
    cluster: Arc<Cluster>,
    required: bool,
    /// The common names a worker call's certificate may carry (empty:
    /// any certificate the cluster's CA signed).
    worker_cns: Vec<String>,
    sessions: Mutex<HashMap<String, Session>>,
    /// Turns to check a password ([`MAX_CONCURRENT_LOGINS`] per core).
    logins: tokio::sync::Semaphore,
}

const LOGIN_FAILED: &str = "login failed: unknown user or wrong password";

fn unauthenticated(m: impl Into<String>) -> Error {
    Error::Unauthenticated(m.into())
}

/// An Argon2id hash of `password` (a PHC string with its own salt).
pub fn hash_password(password: &str) -> Result<String> {
    if password.is_empty() || password.len() > MAX_PASSWORD_BYTES {
        return Err(Error::InvalidInput(format!(
            "a password must be 1 to {MAX_PASSWORD_BYTES} bytes long"
        )));
    }
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| Error::Internal(format!("hashing a password: {e}")))
}

/// The SCRAM iteration count of the verifiers Quarry makes (PostgreSQL's
/// default).
pub const SCRAM_ITERATIONS: usize = 4096;

/// PostgreSQL's SCRAM-SHA-256 verifier of `password`, as `pg_authid`
/// keeps it: `SCRAM-SHA-256$<iterations>:<salt>:<StoredKey>:<ServerKey>`
/// (base64). It proves a password without holding it: PostgreSQL
/// clients log in against it (`pg/startup.rs`).
pub fn scram_verifier(password: &str) -> String {
    use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramSecret};
    let mut salt = [0u8; 16];
    OsRng.fill_bytes(&mut salt);
    let salted = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    match ScramSecret::verifier_from_salted_password(salt.to_vec(), salted, SCRAM_ITERATIONS) {
        ScramSecret::Verifier {
            salt,
            iterations,
            stored_key,
            server_key,
        } => format!(
            "SCRAM-SHA-256${iterations}:{}:{}:{}",
            b64(&salt),
            b64(&stored_key),
            b64(&server_key)
        ),
        ScramSecret::SaltedPassword { .. } => String::new(),
    }
}

/// The verifier [`scram_verifier`] wrote, for a SCRAM exchange (None if
/// `text` is not one: empty for users made before verifiers were kept).
pub fn parse_scram_verifier(text: &str) -> Option<pgwire::api::auth::sasl::scram::ScramSecret> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.decode(s).ok();
    let rest = text.strip_prefix("SCRAM-SHA-256$")?;
    let (iterations, keys) = rest.split_once(':')?;
    let mut parts = keys.split(':');
    let (salt, stored, server) = (parts.next()?, parts.next()?, parts.next()?);
    Some(pgwire::api::auth::sasl::scram::ScramSecret::Verifier {
        salt: b64(salt)?,
        iterations: iterations.parse().ok()?,
        stored_key: b64(stored)?,
        server_key: b64(server)?,
    })
}

/// A user's definition with `password`'s Argon2 hash (Flight SQL logins)
/// and SCRAM verifier (PostgreSQL logins), made on a blocking thread
/// (both take tens of milliseconds).
pub async fn user_def(name: &str, password: String, superuser: bool) -> Result<UserDef> {
    let name = name.to_string();
    tokio::task::spawn_blocking(move || {
        Ok(UserDef {
            password_hash: hash_password(&password)?,
            scram_verifier: scram_verifier(&password),
            name,
            superuser,
        })
    })
    .await
    .map_err(|e| Error::Internal(format!("hashing a password: {e}")))?
}

/// Whether `password` matches the PHC string `hash`.
pub fn verify_password(password: &str, hash: &str) -> bool {
    if password.len() > MAX_PASSWORD_BYTES {
        return false;
    }
    PasswordHash::new(hash).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// `(user, password)` from `Basic base64(user:password)`; base64 with or
/// without padding (Go's Flight client sends none).
fn basic_credentials(header: &str) -> Result<(String, String)> {
    let (scheme, value) = header.trim().split_once(' ').unwrap_or((header, ""));
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(unauthenticated(
            "the handshake needs 'authorization: Basic base64(user:password)'",
        ));
    }
    let value = value.trim().trim_end_matches('=');
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(value)
        .map_err(|_| unauthenticated("the Basic credentials are not valid base64"))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| unauthenticated("the Basic credentials are not UTF-8"))?;
    let (user, password) = text
        .split_once(':')
        .ok_or_else(|| unauthenticated("the Basic credentials need 'user:password'"))?;
    Ok((user.to_string(), password.to_string()))
}

fn new_token() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    quarry_coprocessor::codec::key::hex(&bytes)
}

impl Session {
    fn expired(&self) -> bool {
        self.last_used.elapsed() >= TOKEN_IDLE || self.created.elapsed() >= TOKEN_LIFETIME
    }
}

impl Auth {
    /// Logins for a process that requires them or not; with them, MPP
    /// worker calls need a certificate of the cluster's CA, and with
    /// `worker_cns` one of those common names.
    pub fn new(cluster: Arc<Cluster>, required: bool, worker_cns: Vec<String>) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Auth {
            cluster,
            required,
            worker_cns,
            sessions: Mutex::new(HashMap::new()),
            logins: tokio::sync::Semaphore::new(MAX_CONCURRENT_LOGINS * cores),
        }
    }

    /// Whether requests need a login.
    pub fn required(&self) -> bool {
        self.required
    }

    /// Checks the handshake's Basic credentials; a new bearer token.
    pub async fn login(&self, authorization: Option<&str>) -> Result<(String, Caller)> {
        let header = authorization.ok_or_else(|| {
            unauthenticated("a login is required: send 'authorization: Basic base64(user:password)' with the handshake")
        })?;
        let (name, password) = basic_credentials(header)?;
        let user = self.cluster.get_user(&name).await?;
        let _turn = tokio::time::timeout(LOGIN_QUEUE_WAIT, self.logins.acquire())
            .await
            .map_err(|_| {
                Error::ResourceExhausted(format!(
                    "too many logins at once: none could be checked within {LOGIN_QUEUE_WAIT:?}; retry"
                ))
            })?
            .map_err(|e| Error::Internal(format!("the login queue: {e}")))?;
        // The hash is checked even for an unknown user, so both cost the
        // same time.
        let hash = user.as_ref().map(|u| u.password_hash.clone());
        let ok = tokio::task::spawn_blocking(move || {
            verify_password(&password, &hash.unwrap_or_else(dummy_hash))
        })
        .await
        .map_err(|e| Error::Internal(format!("checking a password: {e}")))?;
        let user = match (ok, user) {
            (true, Some(u)) => u,
            _ => {
                crate::metrics::login_failed();
                tracing::warn!(user = name, "login failed");
                return Err(unauthenticated(LOGIN_FAILED));
            }
        };
        let caller = Caller {
            user: user.name,
            superuser: user.superuser,
        };
        let token = new_token();
        let now = Instant::now();
        let mut sessions = self.sessions.lock();
        sessions.retain(|_, s| !s.expired());
        sessions.insert(
            token.clone(),
            Session {
                caller: caller.clone(),
                hash: user.password_hash,
                created: now,
                last_used: now,
                checked: now,
            },
        );
        Ok((token, caller))
    }

    /// The caller a `Bearer` token stands for.
    async fn check(&self, authorization: Option<&str>) -> Result<Login> {
        let token = authorization
            .and_then(|h| {
                let (scheme, token) = h.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .ok_or_else(|| {
                unauthenticated(
                    "this compute process requires a login: log in with a user name and \
                     password (Flight SQL handshake), then send 'authorization: Bearer <token>'",
                )
            })?;
        let expired = || unauthenticated("the session token is unknown or expired: log in again");
        let (caller, hash, recheck) = {
            let mut sessions = self.sessions.lock();
            let s = sessions.get_mut(token).ok_or_else(expired)?;
            if s.expired() {
                sessions.remove(token);
                return Err(expired());
            }
            s.last_used = Instant::now();
            (
                s.caller.clone(),
                s.hash.clone(),
                s.checked.elapsed() >= RECHECK,
            )
        };
        let scope = |caller: Caller| Login {
            caller,
            token: token.to_string(),
        };
        if !recheck {
            return Ok(scope(caller));
        }
        match self.cluster.get_user(&caller.user).await? {
            // The same user, with the password this session logged in with.
            Some(u) if u.password_hash == hash => {
                let caller = Caller {
                    superuser: u.superuser,
                    ..caller
                };
                if let Some(s) = self.sessions.lock().get_mut(token) {
                    s.checked = Instant::now();
                    s.caller = caller.clone();
                }
                Ok(scope(caller))
            }
            _ => {
                self.sessions.lock().remove(token);
                Err(expired())
            }
        }
    }

    /// Ends the sessions of `user` on this process, but `keep`, which now
    /// stands for the password hash `hash`.
    fn forget_user(&self, user: &str, keep: Option<(&str, &str)>) {
        let mut sessions = self.sessions.lock();
        sessions.retain(|token, s| {
            s.caller.user != user || keep.is_some_and(|(t, _)| t == token.as_str())
        });
        if let Some((token, hash)) = keep {
            if let Some(s) = sessions.get_mut(token) {
                s.hash = hash.to_string();
            }
        }
    }

    /// Refuses `what` unless the request's caller is a superuser (anyone
    /// without logins).
    pub fn require_superuser(&self, what: &str) -> Result<()> {
        let caller = caller();
        if !self.required || caller.as_ref().is_some_and(|c| c.superuser) {
            return Ok(());
        }
        Err(Error::PermissionDenied(format!(
            "only a superuser may run {what} (logged in as {})",
            caller.as_ref().map_or("nobody", |c| c.user.as_str())
        )))
    }

    /// Runs a user statement for the request's caller.
    pub async fn execute(&self, stmt: UserStatement) -> Result<Vec<(String, bool)>> {
        let caller = caller();
        // Without logins everyone is trusted (plaintext on loopback).
        let superuser = !self.required || caller.as_ref().is_some_and(|c| c.superuser);
        let denied = |what: &str| {
            Err(Error::PermissionDenied(format!(
                "only a superuser may {what} (logged in as {})",
                caller.as_ref().map_or("nobody", |c| c.user.as_str())
            )))
        };
        match stmt {
            UserStatement::Create {
                name,
                password,
                if_not_exists,
            } => {
                if !superuser {
                    return denied("create users");
                }
                let user = user_def(&name, password.0, false).await?;
                match self.cluster.put_user(user, PutUserMode::Create).await {
                    Err(Error::InvalidInput(m))
                        if if_not_exists && m.contains("already exists") => {}
                    r => r?,
                }
                Ok(vec![])
            }
            UserStatement::Alter {
                name,
                password,
                if_exists,
            } => {
                let own = caller.as_ref().is_some_and(|c| c.user == name);
                if !superuser && !own {
                    return denied("change another user's password");
                }
                let Some(mut user) = self.cluster.get_user(&name).await? else {
                    return match if_exists {
                        true => Ok(vec![]),
                        false => Err(Error::InvalidInput(format!("user {name} does not exist"))),
                    };
                };
                let made = user_def(&name, password.0, user.superuser).await?;
                user.password_hash = made.password_hash;
                user.scram_verifier = made.scram_verifier;
                let hash = user.password_hash.clone();
                self.cluster.put_user(user, PutUserMode::Alter).await?;
                // Sessions that logged in with the old password end; the
                // one that changed its own password goes on.
                let token = current_token().filter(|_| own);
                self.forget_user(&name, token.as_deref().map(|t| (t, hash.as_str())));
                Ok(vec![])
            }
            UserStatement::Drop { name, if_exists } => {
                if !superuser {
                    return denied("drop users");
                }
                if caller.as_ref().is_some_and(|c| c.user == name) {
                    return Err(Error::InvalidInput(format!(
                        "user {name} is logged in here and cannot drop itself"
                    )));
                }
                self.cluster.drop_user(&name, if_exists).await?;
                self.forget_user(&name, None);
                Ok(vec![])
            }
            UserStatement::Show => {
                if !superuser {
                    return denied("list users");
                }
                let mut users = self.cluster.list_users().await?;
                users.sort_by(|a, b| a.name.cmp(&b.name));
                Ok(users.into_iter().map(|u| (u.name, u.superuser)).collect())
            }
        }
    }

    /// The layer that admits requests to the Flight service.
    pub fn layer(self: &Arc<Self>) -> AuthLayer {
        AuthLayer { auth: self.clone() }
    }
}

/// [`hash_password`] on a blocking thread (it takes tens of ms).
pub async fn hash_off_thread(password: String) -> Result<String> {
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|e| Error::Internal(format!("hashing a password: {e}")))?
}

/// A hash of no password anyone knows, checked for unknown users so
/// they take as long as known ones.
fn dummy_hash() -> String {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY
        .get_or_init(|| hash_password(&new_token()).unwrap_or_default())
        .clone()
}

/// Admits a request: the handshake always (it is how a token is
/// obtained), an MPP worker call with a cluster certificate, everything
/// else with a valid token when logins are required, run with its caller
/// in scope ([`crate::caller`]).
#[derive(Clone)]
pub struct AuthLayer {
    auth: Arc<Auth>,
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            auth: self.auth.clone(),
        }
    }
}

#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    auth: Arc<Auth>,
}

impl<S, B> tower::Service<http::Request<B>> for AuthService<S>
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
    type Future = BoxFuture<'static, std::result::Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let auth = self.auth.clone();
        // The ready service serves this request; a clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let peer = peer_of(&req);
            let path = req.uri().path();
            let login = if !auth.required || path == HANDSHAKE_PATH {
                None
            } else if path.starts_with(WORKER_PATHS) {
                // Another compute process: its certificate, no login.
                if let Err(refused) = worker_caller(&req, &auth.worker_cns) {
                    return Ok(refused.into_http());
                }
                None
            } else {
                let header = req
                    .headers()
                    .get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok());
                match auth.check(header).await {
                    Ok(login) => Some(login),
                    Err(e) => return Ok(tonic::Status::from(e).into_http()),
                }
            };
            let scope = Scope {
                login,
                peer,
                session: None,
                settings: None,
            };
            SCOPE.scope(scope, inner.call(req)).await
        })
    }
}

/// Whether an MPP worker call comes from one of the cluster's processes:
/// a client certificate the TLS handshake verified against the cluster's
/// CA (the port asks for one, `server.rs`), named as `allowed` says.
fn worker_caller<B>(
    req: &http::Request<B>,
    allowed: &[String],
) -> std::result::Result<(), tonic::Status> {
    use quarry_proto::security::{check_cn, peer_cert_cn, PeerCert};
    match peer_cert_cn(req) {
        PeerCert::Verified(cn) => check_cn(allowed, cn.as_deref()),
        PeerCert::None => Err(tonic::Status::unauthenticated(
            "MPP worker calls need a client certificate signed by the cluster's CA \
             (they come from other compute processes; a login does not open them)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_hash_and_verify() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("correct horse ", &h));
        assert!(!verify_password("x", "not a hash"));
        assert!(hash_password("").is_err());
        // Two hashes of one password differ (their salts do).
        assert_ne!(h, hash_password("correct horse").unwrap());
        // The stand-in hash for unknown users parses.
        assert!(PasswordHash::new(&dummy_hash()).is_ok());
    }

    #[test]
    fn basic_credentials_with_or_without_padding() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let padded = format!("Basic {}", b64("root:pa:ss"));
        assert_eq!(
            basic_credentials(&padded).unwrap(),
            ("root".into(), "pa:ss".into())
        );
        let raw = format!("basic {}", b64("ab:c").trim_end_matches('='));
        assert_eq!(basic_credentials(&raw).unwrap(), ("ab".into(), "c".into()));
        let e = basic_credentials("Bearer xyz").unwrap_err().to_string();
        assert!(e.contains("needs 'authorization: Basic"), "{e}");
        assert!(basic_credentials(&format!("Basic {}", b64("nocolon"))).is_err());
    }

    #[test]
    fn tokens_are_long_and_distinct() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
