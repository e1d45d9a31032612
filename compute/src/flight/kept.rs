//! What a GetFlightInfo keeps for a later DoGet of the same SQL.
//!
//! Flight SQL splits a query in two calls: GetFlightInfo answers with a
//! schema and a ticket, and a DoGet with the ticket fetches the rows,
//! maybe never, maybe at another compute process. Two things are kept
//! in between, under a number the ticket carries:
//!
//! - a plan made by GetFlightInfo, so the DoGet does not plan it again
//!   (`PendingPlans` in `mod.rs`, under a plan handle);
//! - the schema a started query's FlightInfo announced, so a DoGet too
//!   late to take that query checks its new plan against it
//!   (`early.rs`, under the cancel key).
//!
//! Both follow the same rules, kept here once:
//!
//! - **Only the same SQL takes it.** A ticket is the client's to send
//!   and may carry another statement's number; what was kept for one SQL
//!   stays kept when a ticket of another SQL names it.
//! - **Taken once.** A DoGet takes what it finds (a second DoGet of the
//!   ticket plans again).
//! - **Bounded in time and count.** What no DoGet takes within the time
//!   limit goes at the next `put`; past the count limit the oldest goes,
//!   so a client that only asks for schemas cannot grow the process.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Values kept by number for a later request of the same SQL, for at
/// most `ttl` and at most `cap` of them.
pub(super) struct KeptForSql<V> {
    ttl: Duration,
    cap: usize,
    /// number → (kept at, the SQL, the value)
    kept: Mutex<HashMap<u64, (Instant, String, V)>>,
}

impl<V> KeptForSql<V> {
    pub(super) fn new(ttl: Duration, cap: usize) -> Self {
        KeptForSql {
            ttl,
            cap,
            kept: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps `value` for `sql` under `key` (replacing what was there);
    /// those past the time limit go first, then the oldest past the
    /// count limit.
    pub(super) fn put(&self, key: u64, sql: &str, value: V) {
        self.put_at(key, sql, value, Instant::now());
    }

    fn put_at(&self, key: u64, sql: &str, value: V, at: Instant) {
        let mut kept = self.kept.lock();
        kept.retain(|_, (t, ..)| t.elapsed() < self.ttl);
        if kept.len() >= self.cap && !kept.contains_key(&key) {
            let oldest = kept.iter().min_by_key(|(_, (t, ..))| *t).map(|(k, _)| *k);
            if let Some(k) = oldest {
                kept.remove(&k);
            }
        }
        kept.insert(key, (at, sql.to_string(), value));
    }

    /// Takes what is kept under `key` for `sql` if it was kept less than
    /// `age` ago (and within the time limit); one that is older goes.
    /// What was kept for another SQL stays.
    pub(super) fn take(&self, key: u64, sql: &str, age: Duration) -> Option<V> {
        let mut kept = self.kept.lock();
        if kept.get(&key).is_none_or(|(_, s, _)| s != sql) {
            return None;
        }
        let (at, _, value) = kept.remove(&key)?;
        (at.elapsed() < age.min(self.ttl)).then_some(value)
    }

    /// Drops what is kept under `key`, whatever its SQL.
    pub(super) fn remove(&self, key: u64) {
        self.kept.lock().remove(&key);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.kept.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    #[test]
    fn only_the_same_sql_takes_it_and_only_once() {
        let kept = KeptForSql::new(TTL, 4);
        kept.put(1, "SELECT 1", 'a');
        assert_eq!(kept.take(2, "SELECT 1", TTL), None, "another number");
        assert_eq!(kept.take(1, "SELECT 2", TTL), None, "another SQL");
        assert_eq!(kept.take(1, "SELECT 1", TTL), Some('a'), "kept for its SQL");
        assert_eq!(kept.take(1, "SELECT 1", TTL), None, "taken once");
    }

    #[test]
    fn what_is_too_old_goes_and_is_not_taken() {
        let kept = KeptForSql::new(TTL, 4);
        let old = Instant::now() - Duration::from_secs(2);
        kept.put_at(1, "q", 'a', old);
        // Younger than the time limit, older than the age asked for.
        assert_eq!(kept.take(1, "q", Duration::from_secs(1)), None);
        assert_eq!(kept.len(), 0, "the old one went");
        kept.put_at(2, "q", 'b', old);
        assert_eq!(kept.take(2, "q", TTL), Some('b'));

        // Past the time limit: not taken, and gone at the next put.
        kept.put_at(3, "q", 'c', Instant::now() - TTL);
        assert_eq!(kept.take(3, "q", TTL), None);
        kept.put_at(4, "q", 'd', Instant::now() - TTL);
        kept.put(5, "q", 'e');
        assert_eq!(kept.len(), 1, "the expired one went at the put");
    }

    #[test]
    fn past_the_count_limit_the_oldest_goes() {
        let kept = KeptForSql::new(TTL, 3);
        let now = Instant::now();
        kept.put_at(1, "q", 1, now - Duration::from_secs(3));
        kept.put_at(2, "q", 2, now - Duration::from_secs(1));
        kept.put_at(3, "q", 3, now - Duration::from_secs(2));
        // Replacing one that is there drops nothing.
        kept.put_at(3, "q", 30, now - Duration::from_secs(2));
        assert_eq!(kept.len(), 3);
        kept.put(4, "q", 4);
        assert_eq!(kept.len(), 3);
        assert_eq!(kept.take(1, "q", TTL), None, "the oldest went");
        for (key, value) in [(2, 2), (3, 30), (4, 4)] {
            assert_eq!(kept.take(key, "q", TTL), Some(value));
        }
        kept.put(5, "q", 5);
        kept.remove(5);
        assert_eq!(kept.take(5, "q", TTL), None, "removed");
    }
}
