//! Peer lifecycle: how this store's peers come into being and go.
//!
//! A peer is created
//!
//! * with its region ([`RaftStore::create_peer`]): every peer of a new
//!   region starts from the same initial log and state
//!   ([`PeerStorage::create`]), so they agree without a snapshot, and the
//!   region's preferred peer campaigns first;
//! * by a split, when its entry applies (the right half's peer: see the
//!   store's `on_exec_result`);
//! * empty, when a raft message arrives for a region this store does not
//!   hold: a replica being added. Only messages a leader or candidate sends
//!   create one, never for a peer a tombstone says was removed (or an
//!   older one), and never over keys an initialized peer here holds; it
//!   stays uninitialized until the leader's snapshot fills it.
//!
//! A peer is destroyed ([`RaftStore::destroy_peer`]) when a membership
//! change removes it or an admin asks: what waits on it fails with
//! RegionNotFound, its data and raft state go in one synced write
//! ([`PeerStorage::destroy`]), and the tombstone it leaves is remembered.
//!
//! The admin asks ([`StoreMsg::CreatePeer`], [`StoreMsg::DestroyPeer`])
//! come in bursts: a CREATE or DROP TABLE of thousands of regions sends
//! dozens at a time to every store. They are staged as they arrive, in
//! memory at once and on disk into one [`LifeBatch`], and the loop writes
//! the batch with one sync after each drain of its messages
//! ([`RaftStore::write_life`]), before it ticks or handles a Ready, and
//! answers each only then. One sync per peer held a store's loop for
//! seconds per thousand peers, and every region's reads and writes
//! waited behind it. A new peer has nothing on disk it could read (its
//! log starts empty at the initial index), so living in memory for the
//! rest of a drain before its state is written is safe; a crash before
//! the write answers nothing, and the caller retries.
//!
//! [`StoreMsg::CreatePeer`]: crate::store::StoreMsg::CreatePeer
//! [`StoreMsg::DestroyPeer`]: crate::store::StoreMsg::DestroyPeer

use quarry_coprocessor::storage::KeyRangeRef;
use quarry_proto::meta::Region;
use quarry_proto::raft::RaftMessage;
use raft::eraftpb::{Message as RaftMsg, MessageType};
use tokio::sync::oneshot;

use super::RaftStore;
use crate::engine::{Engine, WriteBatch};
use crate::peer::Peer;
use crate::peer_storage::PeerStorage;
use crate::transport::Transport;
use crate::{region, Error, Result};

impl<E: Engine, T: Transport> RaftStore<E, T> {
    /// Creates an empty peer for a message about a region this store does
    /// not hold yet (a replica being added): the leader will send a snapshot.
    pub(super) fn maybe_create_peer(&mut self, m: &RaftMessage, msg: &RaftMsg) -> bool {
        let creates = matches!(
            msg.get_msg_type(),
            MessageType::MsgRequestVote
                | MessageType::MsgRequestPreVote
                | MessageType::MsgAppend
                | MessageType::MsgHeartbeat
                | MessageType::MsgSnapshot
        );
        let to = m.to_peer.unwrap_or_default();
        if !creates
            || self
                .tombstones
                .get(&m.region_id)
                .is_some_and(|&t| to.id <= t)
        {
            return false;
        }
        // Never two initialized peers over the same keys.
        let wanted = KeyRangeRef::new(&m.start_key, &m.end_key);
        if self
            .peers
            .values()
            .any(|p| p.is_initialized() && KeyRangeRef::of_region(p.region()).overlaps(wanted))
        {
            return false;
        }
        let region = Region {
            id: m.region_id,
            start_key: m.start_key.clone(),
            end_key: m.end_key.clone(),
            epoch: None,
            peers: vec![],
        };
        let storage = PeerStorage::uninitialized(self.engine.clone(), region, to);
        match Peer::new(storage, &self.logger) {
            Ok(p) => {
                tracing::info!(
                    region = m.region_id,
                    peer = to.id,
                    "created a peer to receive a snapshot"
                );
                self.peers.insert(m.region_id, p);
                true
            }
            Err(e) => {
                tracing::warn!(region = m.region_id, "cannot create a peer: {e}");
                false
            }
        }
    }

    /// Creates this store's peer of a new region (all peers start alike),
    /// written at once.
    pub fn create_peer(&mut self, region: Region) -> Result<()> {
        let mut batch = LifeBatch::default();
        self.stage_create(region, &mut batch)?;
        self.finish_life(batch)
    }

    /// Removes this store's peer of `region_id` and its data, written at
    /// once.
    pub fn destroy_peer(&mut self, region_id: u64) -> Result<()> {
        let mut batch = LifeBatch::default();
        self.stage_destroy(region_id, &mut batch)?;
        self.finish_life(batch)
    }

    /// Stages an admin's create or destroy (`op`) into this drain's batch;
    /// `cb` is answered once the batch is written.
    pub(super) fn stage_life(
        &mut self,
        cb: oneshot::Sender<Result<()>>,
        op: impl FnOnce(&mut Self, &mut LifeBatch) -> Result<()>,
    ) {
        let mut batch = std::mem::take(&mut self.life);
        let result = op(self, &mut batch);
        batch.answers.push((cb, result));
        self.life = batch;
    }

    /// Writes the peers this drain created and destroyed in one synced
    /// write, then answers their callers. An error stops the loop (memory
    /// is ahead of the disk); nobody was answered.
    pub fn write_life(&mut self) -> Result<()> {
        let batch = std::mem::take(&mut self.life);
        self.finish_life(batch)
    }

    fn finish_life(&self, batch: LifeBatch) -> Result<()> {
        if !batch.wb.is_empty() {
            self.engine.write(&batch.wb, true)?;
        }
        for (start, end) in &batch.reclaim {
            self.engine.reclaim_range(start, end);
        }
        for (cb, result) in batch.answers {
            let _ = cb.send(result);
        }
        Ok(())
    }

    /// This store's peer of a new region, in memory now and into `batch`.
    pub(super) fn stage_create(&mut self, region: Region, batch: &mut LifeBatch) -> Result<()> {
        let me = region
            .peers
            .iter()
            .find(|p| p.store_id == self.store_id)
            .copied()
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "region {} has no peer on store {}",
                    region.id, self.store_id
                ))
            })?;
        if let Some(p) = self.peers.get(&region.id) {
            if p.is_initialized() {
                let cur = p.region();
                if cur.start_key == region.start_key && cur.end_key == region.end_key {
                    return Ok(());
                }
                return Err(Error::InvalidInput(format!(
                    "region {} already exists with another range",
                    region.id
                )));
            }
            self.peers.remove(&region.id);
        }
        let storage = PeerStorage::create(self.engine.clone(), region.clone(), me, &mut batch.wb);
        let mut peer = Peer::new(storage, &self.logger)?;
        if peer.preferred_leader().map(|p| p.id) == Some(me.id) {
            peer.campaign_after(1);
        }
        self.peers.insert(region.id, peer);
        Ok(())
    }

    /// The removal of this store's peer of `region_id`, in memory now and
    /// into `batch`.
    pub(super) fn stage_destroy(&mut self, region_id: u64, batch: &mut LifeBatch) -> Result<()> {
        let Some(peer) = self.peers.get(&region_id) else {
            return Ok(());
        };
        // On an error nothing is staged, and the peer stays.
        peer.storage().destroy(&mut batch.wb)?;
        let mut peer = self.peers.remove(&region_id).expect("looked up");
        peer.fail_all(|| Error::region(region::not_found(region_id)));
        if peer.is_initialized() {
            let r = peer.region();
            batch
                .reclaim
                .push((r.start_key.clone(), crate::keys::concrete_end(&r.end_key)));
        }
        self.tombstones.insert(region_id, peer.peer_id());
        tracing::info!(region = region_id, peer = peer.peer_id(), "destroyed peer");
        Ok(())
    }
}

/// Peers created and destroyed since the loop last wrote them: one write
/// batch, the ranges to reclaim after it, and the callers to answer.
#[derive(Default)]
pub(crate) struct LifeBatch {
    wb: WriteBatch,
    reclaim: Vec<(Vec<u8>, Vec<u8>)>,
    answers: Vec<(oneshot::Sender<Result<()>>, Result<()>)>,
}
