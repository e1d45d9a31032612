//! A connection's startup: the database it names, who it is, and proof.
//!
//! Without logins (a plaintext compute process on loopback, as the
//! insecure playground runs) every user is trusted, as over Flight SQL.
//! With `[security]`, a connection must come over TLS (a plaintext one is
//! refused with 28000 before any password is asked for) and log in with
//! SCRAM-SHA-256 against Quarry's users: compute keeps no password, and
//! meta keeps for each user, beside the Argon2 hash Flight SQL's logins
//! check, PostgreSQL's SCRAM verifier (salt, iteration count, StoredKey,
//! ServerKey), made by `CREATE USER` / `ALTER USER … PASSWORD` from the
//! password as it is set (`auth::scram_verifier`). A user made before
//! verifiers were kept has none and is told to set the password again.
//! Channel binding (SCRAM-SHA-256-PLUS) is offered over TLS. A wrong
//! password or an unknown user is 28P01, the same answer for both.
//!
//! The database name must be `quarry` (or left out): a cluster has one.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::mechanism::AuthMechanismFactory;
use pgwire::api::auth::sasl::scram::{ScramAuth, ScramSecret};
use pgwire::api::auth::{
    protocol_negotiation, save_startup_parameters_to_metadata, AuthDriver, AuthOutcome, AuthSource,
    LoginInfo, Password, ServerParameterProvider, StartupHandler,
};
use pgwire::api::{ClientInfo, ConnectionManager, METADATA_DATABASE, METADATA_USER};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use super::session::PgSession;
use crate::caller::Caller;
use crate::engine::QueryEngine;

/// The one database of a cluster.
pub const DATABASE: &str = "quarry";

/// The parameters a client hears at startup: the session's.
struct Parameters;

impl ServerParameterProvider for Parameters {
    fn server_parameters<C: ClientInfo>(
        &self,
        client: &C,
    ) -> Option<std::collections::HashMap<String, String>> {
        let session = client.session_extensions().get::<Arc<PgSession>>()?;
        Some(session.reported().into_iter().collect())
    }
}

/// Users' SCRAM verifiers, from meta.
struct Verifiers {
    engine: Arc<QueryEngine>,
}

impl Debug for Verifiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifiers")
    }
}

fn login_failed(user: &str) -> PgWireError {
    PgWireError::InvalidPassword(user.to_string())
}

#[async_trait]
impl AuthSource<Caller> for Verifiers {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        // Only verifiers are kept (get_scram_secret).
        Err(login_failed(login.user().unwrap_or_default()))
    }

    async fn get_scram_secret(
        &self,
        login: &LoginInfo,
    ) -> PgWireResult<(ScramSecret, Option<Caller>)> {
        let name = login.user().unwrap_or_default();
        let user = self
            .engine
            .cluster
            .get_user(name)
            .await
            .map_err(super::sqlstate::to_pg)?;
        // An unknown user, or one without a verifier, goes through the
        // same exchange against a stand-in verifier and fails at its end
        // with the same 28P01 as a wrong password: a client cannot tell
        // which names exist.
        let secret = user
            .as_ref()
            .and_then(|u| crate::auth::parse_scram_verifier(&u.scram_verifier));
        let (Some(user), Some(secret)) = (user, secret) else {
            tracing::warn!(
                user = name,
                "postgres login will fail: unknown user, or one made before SCRAM verifiers \
                 were kept (set its password again with ALTER USER … PASSWORD)"
            );
            return Ok((stand_in_verifier(name), None));
        };
        let caller = Caller {
            user: user.name,
            superuser: user.superuser,
        };
        Ok((secret, Some(caller)))
    }
}

/// A verifier no password matches, its salt fixed per name for the life
/// of the process (so repeated tries look like a real user's).
fn stand_in_verifier(name: &str) -> ScramSecret {
    use std::hash::BuildHasher;
    static KEY: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let key = KEY.get_or_init(std::collections::hash_map::RandomState::new);
    let mut salt = Vec::with_capacity(16);
    for part in 0u8..2 {
        salt.extend_from_slice(&key.hash_one((part, name)).to_be_bytes());
    }
    let mut stored_key = vec![0u8; 32];
    let mut server_key = vec![0u8; 32];
    for b in stored_key.iter_mut().chain(server_key.iter_mut()) {
        *b = fastrand::u8(..);
    }
    ScramSecret::Verifier {
        salt,
        iterations: crate::auth::SCRAM_ITERATIONS,
        stored_key,
        server_key,
    }
}

pub struct Startup {
    engine: Arc<QueryEngine>,
    driver: AuthDriver<Arc<Parameters>, Caller>,
    /// SCRAM when logins are required.
    scram: Option<ScramAuth<Caller>>,
}

impl Startup {
    pub fn new(
        engine: Arc<QueryEngine>,
        manager: Arc<ConnectionManager>,
        tls_cert_pem: Option<&[u8]>,
    ) -> PgWireResult<Self> {
        let scram = match engine.auth().required() {
            false => None,
            true => {
                let mut scram = ScramAuth::new(Arc::new(Verifiers {
                    engine: engine.clone(),
                }) as Arc<dyn AuthSource<Caller>>);
                scram.set_iterations(crate::auth::SCRAM_ITERATIONS);
                if let Some(pem) = tls_cert_pem {
                    scram.configure_certificate(pem)?;
                }
                Some(scram)
            }
        };
        Ok(Startup {
            engine,
            driver: AuthDriver::new(Arc::new(Parameters)).with_connection_manager(manager),
            scram,
        })
    }

    /// Gives the connection its session (before the parameters are sent).
    fn open_session<C: ClientInfo>(&self, client: &C, caller: Option<Caller>) {
        let session = PgSession::new(
            self.engine.clone(),
            caller,
            client.socket_addr(),
            client.metadata(),
        );
        client.session_extensions().insert(Arc::new(session));
    }
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                let user = client.metadata().get(METADATA_USER).cloned();
                let Some(user) = user.filter(|u| !u.is_empty()) else {
                    return Err(fatal(
                        "28000",
                        "no PostgreSQL user name specified in startup packet",
                    ));
                };
                let database = client.metadata().get(METADATA_DATABASE).cloned();
                if let Some(db) = database.filter(|d| d != DATABASE && d != &user) {
                    return Err(fatal(
                        "3D000",
                        &format!("database \"{db}\" does not exist: a Quarry cluster has one, \"{DATABASE}\""),
                    ));
                }
                let Some(scram) = &self.scram else {
                    // Trusted: no logins on this process; the user is who
                    // it says (a superuser, as every Flight SQL client is).
                    let caller = Caller {
                        user,
                        superuser: true,
                    };
                    self.open_session(client, Some(caller));
                    return self.driver.complete_authentication(client, None).await;
                };
                if !client.is_secure() {
                    return Err(fatal(
                        "28000",
                        "this compute process requires TLS: connect with sslmode=require (or \
                         verify-full) and log in with a password",
                    ));
                }
                match self
                    .driver
                    .begin_authentication(client, scram.create())
                    .await?
                {
                    AuthOutcome::InProgress => Ok(()),
                    AuthOutcome::Authenticated { .. } => Err(fatal(
                        "28000",
                        "a login finished before any password was given",
                    )),
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                match self.driver.advance_authentication(client, message).await {
                    Ok(AuthOutcome::InProgress) => Ok(()),
                    Ok(AuthOutcome::Authenticated {
                        identity,
                        final_message,
                    }) => {
                        tracing::info!(
                            user = identity.as_ref().map(|c| c.user.as_str()),
                            "postgres login"
                        );
                        self.open_session(client, identity);
                        self.driver
                            .complete_authentication(client, final_message)
                            .await
                    }
                    Err(e) => {
                        if matches!(
                            e,
                            PgWireError::InvalidPassword(_) | PgWireError::InvalidScramMessage(_)
                        ) {
                            crate::metrics::login_failed();
                        }
                        Err(e)
                    }
                }
            }
            _ => Ok(()),
        }
    }
}

/// PostgreSQL's words for a failed login, naming the user (pgwire's
/// names none); the same for a wrong password and an unknown user.
pub struct LoginErrors;

impl pgwire::api::ErrorHandler for LoginErrors {
    fn on_error<C: ClientInfo>(&self, client: &C, error: &mut PgWireError) {
        if matches!(error, PgWireError::InvalidPassword(_)) {
            let user = client
                .metadata()
                .get(METADATA_USER)
                .cloned()
                .unwrap_or_default();
            *error = fatal(
                "28P01",
                &format!("password authentication failed for user \"{user}\""),
            );
        }
    }
}

/// A startup error that ends the connection.
fn fatal(code: &str, message: &str) -> PgWireError {
    PgWireError::UserError(Box::new(pgwire::error::ErrorInfo::new(
        "FATAL".into(),
        code.into(),
        message.into(),
    )))
}
