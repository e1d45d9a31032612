//! Who sent the request being served, and the session it belongs to: a
//! task-local scope that a front end opens around each request's handler
//! (`auth.rs`'s layer for Flight SQL, a connection's loop for PostgreSQL)
//! and that everything below reads — statements and transactions (a
//! transaction belongs to the user who began it), session settings (kept
//! under [`session_key`]), the running-query list.
//!
//! It is a leaf: it imports nothing of the crate, so the planner and the
//! session layer can ask who is calling without importing the front ends'
//! login checks (`auth.rs`), which sit above them.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
    pub superuser: bool,
}

/// A logged-in request: who sent it, and with which token.
#[derive(Clone)]
pub(crate) struct Login {
    pub(crate) caller: Caller,
    pub(crate) token: String,
}

/// The request being served: its login (None without logins) and the
/// client connection it came on.
#[derive(Clone)]
pub(crate) struct Scope {
    pub(crate) login: Option<Login>,
    pub(crate) peer: Option<std::net::SocketAddr>,
    /// The session's own key, where the front end has sessions of its
    /// own (a PostgreSQL connection); else the peer (and token) stand
    /// for it.
    pub(crate) session: Option<String>,
    /// The session's settings by name (lower case), where the front end
    /// keeps them (a PostgreSQL connection's `SET`s over its defaults):
    /// what `current_setting()` answers in its statements.
    pub(crate) settings: Option<Arc<BTreeMap<String, String>>>,
}

/// Runs `f` as a request of `caller` (None: no logins) from `peer`, in
/// the session `session` (a PostgreSQL connection's id: its settings are
/// kept under it), whose settings are `settings`.
pub async fn in_scope<F: std::future::Future>(
    caller: Option<Caller>,
    session: String,
    peer: std::net::SocketAddr,
    settings: Arc<BTreeMap<String, String>>,
    f: F,
) -> F::Output {
    let scope = Scope {
        login: caller.map(|caller| Login {
            caller,
            token: session.clone(),
        }),
        peer: Some(peer),
        session: Some(session),
        settings: Some(settings),
    };
    SCOPE.scope(scope, f).await
}

tokio::task_local! {
    pub(crate) static SCOPE: Scope;
}

/// The scope of the request being served (None outside one), for work
/// it starts in a task of its own ([`within`]).
pub(crate) fn current() -> Option<Scope> {
    SCOPE.try_with(Scope::clone).ok()
}

/// Runs `f` in `scope`, as part of the request it was taken from (a
/// spawned task does not inherit a task-local).
pub(crate) async fn within<F: std::future::Future>(scope: Option<Scope>, f: F) -> F::Output {
    match scope {
        Some(scope) => SCOPE.scope(scope, f).await,
        None => f.await,
    }
}

/// The logged-in caller of the request being served (None without
/// logins, or outside a request).
pub fn caller() -> Option<Caller> {
    SCOPE
        .try_with(|s| s.login.as_ref().map(|l| l.caller.clone()))
        .ok()
        .flatten()
}

pub(crate) fn current_token() -> Option<String> {
    SCOPE
        .try_with(|s| s.login.as_ref().map(|l| l.token.clone()))
        .ok()
        .flatten()
}

/// The settings of the request's session, where its front end keeps
/// them (None: Flight SQL's, outside a request).
pub fn session_settings() -> Option<Arc<BTreeMap<String, String>>> {
    SCOPE.try_with(|s| s.settings.clone()).ok().flatten()
}

/// The session of the request being served, for its settings
/// (`session_settings.rs`): the client connection (its address, as the
/// server sees it), and with logins the token too, so that a connection
/// reused by another login does not inherit settings. None outside a
/// request, or when the transport gave no address.
pub fn session_key() -> Option<String> {
    SCOPE
        .try_with(|s| {
            if let Some(session) = &s.session {
                return Some(session.clone());
            }
            let peer = s.peer?;
            Some(match &s.login {
                Some(l) => format!("{peer}/{}", l.token),
                None => peer.to_string(),
            })
        })
        .ok()
        .flatten()
}
