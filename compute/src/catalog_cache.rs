//! The catalog (every table's and view's definition) kept between
//! statements, checked by a version that rides on the timestamp.
//!
//! WHY
//!
//! Planning needs the catalog, and reading it from the meta leader was one
//! round trip before every query was planned: 0.5–0.9 ms of an indexed
//! lookup's ~6 ms through ADBC (`docs/performance.md`), on the critical
//! path, and the same again for `SELECT 1`. TiDB keeps its information
//! schema in each server and checks a schema version instead of reading
//! the schema per statement; this is that, checked per query rather than
//! leased.
//!
//! HOW IT STAYS RIGHT
//!
//! The meta region keeps a catalog version (`keys::CATALOG_VERSION` on
//! the stores): a token every write to a table's or view's definition
//! replaces in the same write. `ListTables` answers it with the catalog
//! (read before the definitions, so the token is never newer than what it
//! came with), and `GetTimestamps` answers it as of its timestamps (read
//! after they were taken). So:
//!
//! - An autocommit query is planned over the kept catalog
//!   (`SqlSession::plan_kept`) and remembers the version it was planned
//!   at. If the kept catalog was not confirmed in the last
//!   [`CONFIRMED_FOR`] (below), a timestamp is asked for as planning
//!   starts and its version checked when planning ends, so the columns
//!   announced to the client are those of the current definitions; a
//!   catalog confirmed that recently is used without a meta call.
//! - Its snapshot timestamp comes with the version as of that timestamp
//!   (`tso::Stamp`), at no extra cost: the query asks for the timestamp
//!   anyway. Equal versions mean the plan read the catalog of its own
//!   snapshot — every definition any DDL committed before the snapshot —
//!   which is more than reading the catalog per statement gave (that read
//!   came before the snapshot, and a DDL could land between).
//! - Equal versions confirm the kept catalog, as of the moment the
//!   timestamp was asked for (not when its answer was handled, which can
//!   be after a long planning): under steady traffic every query confirms
//!   it for the next.
//! - Different versions (a DDL landed since the catalog was kept) drop
//!   the kept catalog and plan the query again over a fresh one with a
//!   fresh snapshot, as a statement planned before did. If the answer's
//!   columns came out different from those already announced to the
//!   client, the query fails with a conflict that says to run it again
//!   (TiDB's "information schema is changed"). Only a DDL on another
//!   compute process racing the query can do that: ALTER TABLE and
//!   CREATE OR REPLACE VIEW, the statements that change a definition's
//!   columns, return [`DDL_SETTLE`] after their write, longer than a
//!   confirmation lasts, so a query sent after such a statement returned
//!   finds every kept catalog unconfirmed and checks it before it
//!   announces anything. DROP TABLE and DROP VIEW wait as long, so a
//!   CREATE of the same name with other columns comes after every
//!   confirmation of the old definition has lapsed (a catalog confirmed
//!   since the DROP lacks the name: the query fails to plan over it and
//!   is planned over a fresh one). (Whatever the timing, a stale plan
//!   never reads: the snapshot's version check stops it, and the plan
//!   made again after a stale one is checked the same way.)
//! - A statement this process runs that changes definitions drops the
//!   kept catalog when it returns (`Cluster::meta_ddl`), so a session sees
//!   its own DDL at once, whether or not the version check would have.
//!   A catalog read that began before such a drop is not kept after it
//!   ([`CatalogCache::keep`] checks a generation).
//! - A query that fails to plan over a kept catalog (a table created on
//!   another compute process since) is planned again over a fresh one
//!   before its error is believed.
//!
//! Statements inside a transaction, writes and DDL read the catalog per
//! statement as before: their snapshot is not a fresh timestamp that
//! could carry the check.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use quarry_proto::meta::ListTablesResponse;

/// How long a kept catalog, once read or confirmed by a timestamp's
/// version, is used without a check before planning.
pub const CONFIRMED_FOR: Duration = Duration::from_millis(50);

/// How long ALTER TABLE, CREATE OR REPLACE VIEW, DROP TABLE and DROP VIEW
/// wait after their write before they return: past [`CONFIRMED_FOR`],
/// with room for a timestamp asked for just before the write to have
/// been answered just after it.
pub const DDL_SETTLE: Duration = Duration::from_millis(250);

/// How far a catalog handed to a planner can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Read from the meta leader for this statement.
    Read,
    /// Kept, and read or confirmed within [`CONFIRMED_FOR`].
    Confirmed,
    /// Kept, and not confirmed since: to be checked.
    Unconfirmed,
}

/// A process's kept catalog.
#[derive(Default)]
pub struct CatalogCache {
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    catalog: Option<Arc<ListTablesResponse>>,
    /// When it was read, or last found current.
    confirmed: Option<Instant>,
    /// Bumped by every [`CatalogCache::forget`]: a read that started
    /// under an older generation is not kept.
    generation: u64,
}

impl CatalogCache {
    /// The kept catalog, if any, and whether it was confirmed within
    /// [`CONFIRMED_FOR`].
    pub fn get(&self) -> Option<(Arc<ListTablesResponse>, bool)> {
        let k = self.inner.lock();
        let recent = k.confirmed.is_some_and(|t| t.elapsed() < CONFIRMED_FOR);
        k.catalog.clone().map(|c| (c, recent))
    }

    /// Records that the catalog's version was `version` when a request
    /// sent at `asked` was answered: the kept catalog, if it has that
    /// version, is confirmed as of `asked` (not of the answer's handling,
    /// which may come much later: after a query's planning).
    pub fn confirm(&self, version: u64, asked: Instant) {
        let mut k = self.inner.lock();
        if k.catalog
            .as_ref()
            .is_some_and(|c| c.catalog_version == version)
            && k.confirmed.is_none_or(|c| c < asked)
        {
            k.confirmed = Some(asked);
        }
    }

    /// The generation to hand back to [`CatalogCache::keep`] with a
    /// catalog read that starts now.
    pub fn generation(&self) -> u64 {
        self.inner.lock().generation
    }

    /// Keeps `catalog`, read from the meta leader by a request sent at
    /// `asked`, after [`CatalogCache::generation`] answered `generation`,
    /// unless a definition changed here since, or what is kept was
    /// confirmed by a later request (two reads answered out of order: the
    /// versions are tokens, not counters, so only the times order them).
    pub fn keep(&self, generation: u64, catalog: Arc<ListTablesResponse>, asked: Instant) {
        let mut k = self.inner.lock();
        if k.generation == generation && k.confirmed.is_none_or(|c| c <= asked) {
            k.catalog = Some(catalog);
            k.confirmed = Some(asked);
        }
    }

    /// Drops the kept catalog: this process changed a definition.
    pub fn forget(&self) {
        let mut k = self.inner.lock();
        k.catalog = None;
        k.confirmed = None;
        k.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(version: u64) -> Arc<ListTablesResponse> {
        Arc::new(ListTablesResponse {
            catalog_version: version,
            ..Default::default()
        })
    }

    #[test]
    fn a_read_that_began_before_a_forget_is_not_kept() {
        let c = CatalogCache::default();
        assert!(c.get().is_none());
        let g = c.generation();
        let asked = Instant::now();
        c.keep(g, catalog(7), asked);
        let (kept, recent) = c.get().unwrap();
        assert_eq!(kept.catalog_version, 7);
        assert!(recent, "a catalog just read is confirmed");

        let before = c.generation();
        c.forget();
        assert!(c.get().is_none());
        c.keep(before, catalog(8), Instant::now());
        assert!(c.get().is_none(), "a stale read must not come back");
        let later = Instant::now();
        c.keep(c.generation(), catalog(9), later);
        assert_eq!(c.get().unwrap().0.catalog_version, 9);
        // A read sent earlier and answered later does not replace it.
        c.keep(c.generation(), catalog(10), asked);
        assert_eq!(c.get().unwrap().0.catalog_version, 9);
    }

    #[test]
    fn a_confirmation_lapses_and_only_its_own_version_renews_it() {
        let c = CatalogCache::default();
        c.keep(c.generation(), catalog(3), Instant::now());
        let asked = Instant::now();
        std::thread::sleep(CONFIRMED_FOR + Duration::from_millis(10));
        assert!(!c.get().unwrap().1, "confirmed too long ago");
        c.confirm(3, asked);
        assert!(
            !c.get().unwrap().1,
            "an answer to a request sent too long ago confirms nothing"
        );
        c.confirm(4, Instant::now());
        assert!(!c.get().unwrap().1, "another version confirms nothing");
        c.confirm(3, Instant::now());
        assert!(c.get().unwrap().1);
        assert!(DDL_SETTLE > CONFIRMED_FOR);
    }
}
