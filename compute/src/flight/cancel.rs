//! `CancelFlightInfo`: a client cancels a query it asked for.
//!
//! Flight's cancel names a query by the `FlightInfo` that GetFlightInfo
//! answered, so every query's ticket carries a cancel key: 64 random bits
//! drawn when the FlightInfo is made. The compute process that made it
//! keeps the key's state here, for [`KEY_TTL`] or as long as the query
//! runs:
//!
//! | state | a cancel | a DoGet of the ticket |
//! |---|---|---|
//! | issued (no DoGet yet) | marks it cancelled: CANCELLED | fails: cancelled before it ran |
//! | running | wakes the query, which fails and drops its plan (and with it its region tasks on the stores): CANCELLED | — |
//! | cancelled | CANCELLED again | fails |
//! | finished | NOT_CANCELLABLE | runs it again (a ticket may be redeemed more than once) |
//! | unknown (made by another compute process, or long ago) | NOT_FOUND | runs it |
//!
//! An autocommit query is running from its GetFlightInfo on (`early.rs`),
//! so a cancel before its DoGet stops it there, and the DoGet fails as
//! one of a key cancelled before it ran.
//!
//! The cancel reaches the query the way the console's does
//! (`crate::activity`): a flag and a wake-up that the query's stream
//! selects on, so it ends whatever the plan waits for, and the stream's
//! error says the client cancelled it. A DoGet that arrives at another
//! compute process (a load balancer between GetFlightInfo and DoGet)
//! cannot be cancelled from the one that issued the ticket; the cancel
//! then answers for what this process knows.
//!
//! A key is kept with the user who asked for it (with logins), and a
//! cancel from another user finds nothing, as if the key were unknown.
//! Keys are 64 bits from a non-cryptographic generator seeded at random
//! per process: they name queries, they do not guard them. Past 4096
//! keys, those expired are swept at most once a second.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_flight::CancelStatus;
use parking_lot::Mutex;
use tonic::Status;

use crate::activity::Cancel;
use crate::Error;

/// How long a finished or never-redeemed key is remembered.
pub const KEY_TTL: Duration = Duration::from_secs(600);
/// Past this many keys, expired ones are swept (at most once a second).
const SWEEP_AT: usize = 4096;
/// Past this many keys, every key not running is forgotten.
const MAX_KEYS: usize = 1 << 20;

enum State {
    Issued,
    /// One signal per DoGet of the ticket running now.
    Running(Vec<Arc<Cancel>>),
    Cancelled,
    Finished,
}

struct Key {
    state: State,
    /// When it was issued or last changed.
    at: Instant,
    /// Who asked for it (None without logins): another user's key is as
    /// good as unknown.
    owner: Option<String>,
}

#[derive(Default)]
struct Keys {
    keys: HashMap<u64, Key>,
    swept: Option<Instant>,
}

/// Every cancel key this process issued and has not forgotten.
#[derive(Default)]
pub struct Cancels {
    keys: Arc<Mutex<Keys>>,
}

fn caller() -> Option<String> {
    crate::caller::caller().map(|c| c.user)
}

impl Cancels {
    /// A new key (never 0: a ticket without one has 0).
    pub fn issue(&self) -> u64 {
        let key = fastrand::u64(1..);
        let mut k = self.keys.lock();
        let due = k
            .swept
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if k.keys.len() >= SWEEP_AT && due {
            k.keys
                .retain(|_, k| matches!(k.state, State::Running(_)) || k.at.elapsed() < KEY_TTL);
            if k.keys.len() >= MAX_KEYS {
                k.keys.retain(|_, k| matches!(k.state, State::Running(_)));
            }
            k.swept = Some(Instant::now());
        }
        k.keys.insert(
            key,
            Key {
                state: State::Issued,
                at: Instant::now(),
                owner: caller(),
            },
        );
        key
    }

    /// The query of `key` starts running; fails if it was cancelled
    /// already. The returned guard is what the query selects on, and marks
    /// the key finished when the last DoGet of it is dropped. Key 0 (a
    /// ticket from before keys) gets a guard no one can cancel.
    pub fn start(&self, key: u64) -> Result<Running, Error> {
        let cancel = Arc::new(Cancel::default());
        if key != 0 {
            let mut keys = self.keys.lock();
            let k = keys.keys.entry(key).or_insert(Key {
                state: State::Issued,
                at: Instant::now(),
                owner: caller(),
            });
            match &mut k.state {
                State::Cancelled => return Err(cancelled_error()),
                State::Running(signals) => signals.push(cancel.clone()),
                State::Issued | State::Finished => k.state = State::Running(vec![cancel.clone()]),
            }
            k.at = Instant::now();
        }
        Ok(Running {
            keys: self.keys.clone(),
            key,
            cancel,
        })
    }

    /// Cancels the query of `key`: what the client is told.
    pub fn cancel(&self, key: u64) -> Result<CancelStatus, Status> {
        let mut keys = self.keys.lock();
        let caller = caller();
        let Some(k) = keys
            .keys
            .get_mut(&key)
            .filter(|k| k.owner.is_none() || k.owner == caller)
        else {
            return Err(Status::not_found(format!(
                "no query with this FlightInfo is known to this compute process (it was made by \
                 another one, or more than {} s ago)",
                KEY_TTL.as_secs()
            )));
        };
        match &k.state {
            State::Issued | State::Cancelled => {}
            State::Running(signals) => signals.iter().for_each(|s| s.cancel()),
            State::Finished => return Ok(CancelStatus::NotCancellable),
        }
        k.state = State::Cancelled;
        k.at = Instant::now();
        Ok(CancelStatus::Cancelled)
    }
}

/// What a query cancelled by its client fails with.
pub fn cancelled_error() -> Error {
    Error::Cancelled("the query was cancelled by its client (CancelFlightInfo)".into())
}

/// A running query's place in [`Cancels`], moved into its stream.
pub struct Running {
    keys: Arc<Mutex<Keys>>,
    key: u64,
    cancel: Arc<Cancel>,
}

impl Running {
    /// The signal the query selects on.
    pub fn signal(&self) -> Arc<Cancel> {
        self.cancel.clone()
    }
}

impl Drop for Running {
    /// Leaves the key's running DoGets; the last one marks it finished,
    /// unless it was cancelled.
    fn drop(&mut self) {
        if self.key == 0 {
            return;
        }
        let mut keys = self.keys.lock();
        let Some(k) = keys.keys.get_mut(&self.key) else {
            return;
        };
        if let State::Running(signals) = &mut k.state {
            signals.retain(|s| !Arc::ptr_eq(s, &self.cancel));
            if signals.is_empty() {
                k.state = State::Finished;
                k.at = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_cancelled_before_it_runs_while_it_runs_and_not_after() {
        let c = Cancels::default();
        // Before the DoGet: the DoGet then fails.
        let k = c.issue();
        assert_eq!(c.cancel(k).unwrap(), CancelStatus::Cancelled);
        let e = c.start(k).err().expect("a cancelled ticket does not run");
        assert!(e.to_string().contains("cancelled by its client"), "{e}");
        assert_eq!(c.cancel(k).unwrap(), CancelStatus::Cancelled);
        // While it runs: the signal is set.
        let k = c.issue();
        let running = c.start(k).unwrap();
        let signal = running.signal();
        assert!(!signal.is_set());
        assert_eq!(c.cancel(k).unwrap(), CancelStatus::Cancelled);
        assert!(signal.is_set());
        drop(running);
        assert_eq!(c.cancel(k).unwrap(), CancelStatus::Cancelled);
        // After it finished: too late.
        let k = c.issue();
        drop(c.start(k).unwrap());
        assert_eq!(c.cancel(k).unwrap(), CancelStatus::NotCancellable);
        // Unknown keys.
        let e = c.cancel(12345).unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        // Key 0: runs, cannot be cancelled.
        let r = c.start(0).unwrap();
        assert!(!r.signal().is_set());
        // Two DoGets of one ticket: a cancel reaches both; it is finished
        // only when both are.
        let k = c.issue();
        let (a, b) = (c.start(k).unwrap(), c.start(k).unwrap());
        drop(a);
        let signal = b.signal();
        assert_eq!(c.cancel(k).unwrap(), CancelStatus::Cancelled);
        assert!(signal.is_set());
        let k = c.issue();
        let (a, b) = (c.start(k).unwrap(), c.start(k).unwrap());
        drop(a);
        assert_eq!(
            c.cancel(k).unwrap(),
            CancelStatus::Cancelled,
            "b still runs"
        );
        drop(b);
    }
}
