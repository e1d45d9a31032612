//! Session settings (`SET statement_timeout`), and the deadline a
//! statement runs under.
//!
//! SESSIONS: Flight SQL has no session id every client sends, so a
//! session here is what every client does keep: its connection. ADBC, the
//! JDBC driver, the client library and `quarry sql` each hold one HTTP/2
//! connection per connection object, and the server knows it by the
//! client's address (`caller::session_key`; with logins, the token too).
//! A setting lasts while the connection is used: it is forgotten after
//! [`IDLE`] without a statement, and when more than [`MAX_SESSIONS`]
//! connections have settings the longest idle goes first. A client that
//! pools connections may run a statement on another connection than the
//! one it SET on, as with PostgreSQL behind a pooler.
//!
//! The deadline a statement runs under is `statement_deadline.rs`'s.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::{plan_err, Result};

/// A setting is forgotten after this long without a statement.
pub const IDLE: Duration = Duration::from_secs(8 * 3600);
/// The most sessions with settings kept.
pub const MAX_SESSIONS: usize = 65_536;

struct Entry {
    statement_timeout: Duration,
    /// `SET mpp` (None: compute's `mpp`).
    mpp: Option<crate::config::MppMode>,
    last_used: Instant,
}

/// The settings of every session that changed one.
pub struct SessionSettings {
    default_timeout: Duration,
    sessions: Mutex<HashMap<String, Entry>>,
}

impl SessionSettings {
    pub fn new(default_timeout: Duration) -> Self {
        SessionSettings {
            default_timeout,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// The statement timeout of the request being served's session.
    pub fn statement_timeout(&self) -> Duration {
        let Some(key) = crate::caller::session_key() else {
            return self.default_timeout;
        };
        let mut sessions = self.sessions.lock();
        match sessions.get_mut(&key) {
            Some(e) if e.last_used.elapsed() < IDLE => {
                e.last_used = Instant::now();
                e.statement_timeout
            }
            Some(_) => {
                sessions.remove(&key);
                self.default_timeout
            }
            None => self.default_timeout,
        }
    }

    /// The MPP mode the request being served's session SET (None: it set
    /// none).
    pub fn mpp(&self) -> Option<crate::config::MppMode> {
        let key = crate::caller::session_key()?;
        let sessions = self.sessions.lock();
        sessions
            .get(&key)
            .filter(|e| e.last_used.elapsed() < IDLE)
            .and_then(|e| e.mpp)
    }

    /// Sets the MPP mode of the request being served's session (`None`:
    /// back to compute's).
    pub fn set_mpp(&self, mode: Option<crate::config::MppMode>) -> Result<()> {
        self.update(|e| e.mpp = mode)
    }

    /// Forgets the settings of the session `key` (a connection that
    /// ended).
    pub fn forget(&self, key: &str) {
        self.sessions.lock().remove(key);
    }

    /// Sets the statement timeout of the request being served's session
    /// (`None`: back to the default).
    pub fn set_statement_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        let default = self.default_timeout;
        self.update(|e| e.statement_timeout = timeout.unwrap_or(default))
    }

    /// Changes the request being served's session's settings with `f`
    /// (a session whose settings are all the defaults is forgotten).
    fn update(&self, f: impl FnOnce(&mut Entry)) -> Result<()> {
        let Some(key) = crate::caller::session_key() else {
            return Err(plan_err!(
                "SET needs a client connection to belong to, and this request has none"
            ));
        };
        let mut sessions = self.sessions.lock();
        if !sessions.contains_key(&key) && sessions.len() >= MAX_SESSIONS {
            sessions.retain(|_, e| e.last_used.elapsed() < IDLE);
            if sessions.len() >= MAX_SESSIONS {
                if let Some(oldest) = sessions
                    .iter()
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(k, _)| k.clone())
                {
                    sessions.remove(&oldest);
                }
            }
        }
        let entry = sessions.entry(key.clone()).or_insert_with(|| Entry {
            statement_timeout: self.default_timeout,
            mpp: None,
            last_used: Instant::now(),
        });
        f(entry);
        entry.last_used = Instant::now();
        if entry.statement_timeout == self.default_timeout && entry.mpp.is_none() {
            sessions.remove(&key);
        }
        Ok(())
    }
}
