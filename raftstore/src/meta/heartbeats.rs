//! What heartbeats tell the meta leader, kept in its memory only, as PD
//! keeps store heartbeats: which stores are alive and which regions they
//! lead, the oldest read each compute process holds (GC holds), and which
//! compute processes serve MPP tasks. None of it goes through raft: a new
//! meta leader starts empty and relearns it within a heartbeat's TTL, and
//! until then answers conservatively (every store live, no GC safe point,
//! the compute list only after [`COMPUTE_LIST_SETTLE`]).

use std::time::{Duration, Instant};

use prost::Message;
use quarry_proto::meta::Store as StoreInfo;

use super::Meta;
use crate::engine::Engine;
use crate::{keys, Error, Result};

/// A store not heard from for this long is considered down.
pub const STORE_DOWN_AFTER: Duration = Duration::from_secs(10);

pub(super) struct Liveness {
    pub(super) last_seen: Instant,
    pub(super) leaders: Vec<u64>,
}

/// The longest a GC hold may last without being renewed; a new meta leader
/// knows every hold after leading this long.
pub const MAX_GC_HOLD_TTL: Duration = Duration::from_secs(5);

/// How long a new meta leader waits before it lists compute processes:
/// they heartbeat once a second (`compute/src/df/mpp/workers.rs`), so after
/// this long each live one has been heard from, with a retry to spare. A
/// list call waits at most this long, and only right after an election. A
/// compute process heartbeats at a fixed rate, so one such wait delays its
/// next heartbeat to 1.5 s after the last (plus round trips), inside its
/// 3 s TTL: the wait drops no one.
pub const COMPUTE_LIST_SETTLE: Duration = Duration::from_millis(1500);

impl<E: Engine> Meta<E> {
    /// Records that `s` is alive and which regions it leads.
    pub fn heartbeat(&self, s: StoreInfo, leaders: Vec<u64>) {
        self.live.lock().insert(
            s.id,
            Liveness {
                last_seen: Instant::now(),
                leaders,
            },
        );
    }

    pub async fn store_heartbeat(&self, s: StoreInfo, leaders: Vec<u64>) -> Result<()> {
        let region = self.leader().await?;
        if self.get::<StoreInfo>(&keys::store_key(s.id))?.as_ref() != Some(&s) {
            self.propose(
                &region,
                vec![(keys::store_key(s.id), s.encode_to_vec())],
                vec![],
            )
            .await?;
        }
        self.heartbeat(s, leaders);
        Ok(())
    }

    /// Called by the worker each round: whether this store leads the meta
    /// region now.
    pub fn note_leadership(&self, leading: bool) {
        let mut since = self.leading_since.lock();
        match (leading, since.is_some()) {
            (true, false) => *since = Some(Instant::now()),
            (false, true) => {
                *since = None;
                self.live.lock().clear();
                self.gc_holds.lock().clear();
                self.computes.lock().clear();
                self.pending_seen.lock().clear();
            }
            _ => {}
        }
    }

    /// Records (or with `min_read_ts` 0 releases) `holder`'s oldest running
    /// read, for `ttl`.
    pub async fn hold_gc(&self, holder: String, min_read_ts: u64, ttl: Duration) -> Result<()> {
        if holder.is_empty() || ttl.is_zero() || ttl > MAX_GC_HOLD_TTL {
            return Err(Error::InvalidInput(format!(
                "a GC hold needs a holder and a TTL of at most {MAX_GC_HOLD_TTL:?}"
            )));
        }
        self.leader().await?;
        let mut holds = self.gc_holds.lock();
        if min_read_ts == 0 {
            holds.remove(&holder);
        } else {
            holds.insert(holder, (min_read_ts, Instant::now() + ttl));
        }
        Ok(())
    }

    /// Records that compute process `id` serves MPP tasks at `addr`, for
    /// `ttl` (at most [`MAX_GC_HOLD_TTL`]).
    pub async fn compute_heartbeat(&self, id: String, addr: String, ttl: Duration) -> Result<()> {
        if id.is_empty() || addr.is_empty() || ttl.is_zero() || ttl > MAX_GC_HOLD_TTL {
            return Err(Error::InvalidInput(format!(
                "a compute heartbeat needs an id, an address and a TTL of at most \
                 {MAX_GC_HOLD_TTL:?}"
            )));
        }
        self.leader().await?;
        let now = Instant::now();
        self.computes.lock().insert(id, (addr, now, now + ttl));
        Ok(())
    }

    /// The compute processes heard from within their TTL: (id, address,
    /// time since last heard), sorted by id.
    ///
    /// A store that has just become the meta leader starts with an empty
    /// list (the list lives in the leader's memory), so it answers only
    /// once it has led for [`COMPUTE_LIST_SETTLE`], time for every live
    /// process's next heartbeat to reach it. Before, `quarry status` right
    /// after a meta leader change (a leader balance at start-up is enough)
    /// listed no compute process at all.
    pub async fn computes(&self) -> Result<Vec<(String, String, Duration)>> {
        self.leader().await?;
        // Leading since now at the latest (the duties loop notes it once a
        // round, and a round may be long): the wait is one settle at most.
        let unnoted = self.leading_since.lock().is_none();
        if unnoted {
            self.note_leadership(true);
        }
        let led = self.leading_for();
        if led < COMPUTE_LIST_SETTLE {
            tokio::time::sleep(COMPUTE_LIST_SETTLE - led).await;
            self.leader().await?;
        }
        let now = Instant::now();
        let mut computes = self.computes.lock();
        computes.retain(|_, (_, _, until)| *until > now);
        let mut out: Vec<_> = computes
            .iter()
            .map(|(id, (addr, seen, _))| (id.clone(), addr.clone(), seen.elapsed()))
            .collect();
        out.sort();
        Ok(out)
    }

    /// The oldest read any compute process holds (0: none), or None while
    /// this leader may not have heard from every holder yet.
    pub fn gc_hold(&self) -> Option<u64> {
        if self.leading_for() < MAX_GC_HOLD_TTL {
            return None;
        }
        let now = Instant::now();
        let mut holds = self.gc_holds.lock();
        holds.retain(|_, (_, until)| *until > now);
        Some(holds.values().map(|(ts, _)| *ts).min().unwrap_or(0))
    }

    /// How long this store has led the meta region.
    pub(super) fn leading_for(&self) -> Duration {
        self.leading_since
            .lock()
            .map_or(Duration::ZERO, |s| s.elapsed())
    }

    /// Stores heard from recently (all registered stores for a while after
    /// this store became the meta leader, while heartbeats come in).
    pub fn live_stores(&self, all: &[StoreInfo]) -> Vec<StoreInfo> {
        if self.leading_for() < STORE_DOWN_AFTER {
            return all.to_vec();
        }
        let live = self.live.lock();
        all.iter()
            .filter(|s| {
                live.get(&s.id)
                    .is_some_and(|l| l.last_seen.elapsed() < STORE_DOWN_AFTER)
            })
            .cloned()
            .collect()
    }
}
