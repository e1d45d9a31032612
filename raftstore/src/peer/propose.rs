//! Proposals: how a leader puts a command into the raft log, and how the
//! proposer hears back.
//!
//! Every proposal, a data command or a membership change, goes through one
//! piece of bookkeeping (`Peer::propose_entry`): a peer that is not the
//! leader refuses at once with NotLeader; raft-rs may refuse a proposal
//! with an error, or drop it without one (a leadership transfer is under
//! way), which shows as a log that did not grow; otherwise the proposal is
//! queued with the index and term its entry got and the instant it was
//! proposed. Data commands (writes, splits, log compaction) are `RaftCmd`s
//! carrying the region epoch the proposer saw, checked again at apply;
//! membership changes are raft-rs `ConfChange` entries whose context names
//! the peer added or removed.
//!
//! ANSWERS: when an entry applies, `Peer::take_proposal` settles the
//! proposals queued up to it. The one at that index and term gets the
//! outcome of applying its entry ([`Callback::finish`]); those before it,
//! or at that index under another term, were overtaken by a leader change
//! and get StaleCommand: their outcome is unknown to the proposer (the
//! entry may still apply under a later leader). An applied proposal of the
//! current leader also renews its lease from the instant it was proposed:
//! a quorum followed the leader after then. A leader that steps down fails
//! every queued proposal with StaleCommand.

use std::sync::Arc;
use std::time::Instant;

use prost::Message as _;
use quarry_proto::kv::Op;
use quarry_proto::meta::{Peer as PeerMeta, Region, RegionEpoch, RegionError};
use quarry_proto::raft::{
    raft_cmd::Cmd, txn_write::Step, ChangePeerContext, KvWrite, RaftCmd, SplitRequest, TxnWrite,
};
use raft::eraftpb::{ConfChange, ConfChangeType};
use raft::RawNode;
use tokio::sync::oneshot;

use super::{region_error, Peer};
use crate::concurrency::{ConcurrencyManager, MemoryLocks};
use crate::engine::Engine;
use crate::peer_storage::PeerStorage;
use crate::{region, Error, Result};

/// What a finished proposal reports.
pub enum Callback {
    Write(oneshot::Sender<Result<()>>),
    /// A transaction's step; a one-phase commit holds its memory locks
    /// until it is answered (`concurrency.rs`).
    Txn(
        oneshot::Sender<Result<TxnDone>>,
        TxnDone,
        Option<MemoryLocks>,
    ),
    Split(oneshot::Sender<Result<(Region, Region)>>),
    ChangePeer(oneshot::Sender<Result<Region>>),
    None,
}

/// What applying a command produced, for its callback.
pub enum Outcome {
    Done,
    Split(Region, Region),
    Region(Region),
}

impl Callback {
    /// Answers the proposer with the outcome of applying its entry.
    pub fn finish(self, r: Result<Outcome>) {
        match (self, r) {
            (Callback::Write(c), Ok(_)) => drop(c.send(Ok(()))),
            (Callback::Txn(c, done, _locks), Ok(_)) => drop(c.send(Ok(done))),
            (Callback::Split(c), Ok(Outcome::Split(l, r))) => drop(c.send(Ok((l, r)))),
            (Callback::ChangePeer(c), Ok(Outcome::Region(r))) => drop(c.send(Ok(r))),
            (Callback::None, _) => {}
            (cb, Ok(_)) => cb.fail(Error::Internal(
                "a command finished with the wrong outcome".into(),
            )),
            (cb, Err(e)) => cb.fail(e),
        }
    }

    pub fn fail(self, e: Error) {
        match self {
            Callback::Write(c) => drop(c.send(Err(e))),
            Callback::Txn(c, _, _) => drop(c.send(Err(e))),
            Callback::Split(c) => drop(c.send(Err(e))),
            Callback::ChangePeer(c) => drop(c.send(Err(e))),
            Callback::None => {}
        }
    }
}

/// How a transaction's step went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TxnDone {
    /// Committed in one phase at this timestamp (0: a plain step).
    pub one_pc_commit_ts: u64,
    /// One phase was asked for, but this leader has not yet raised max_ts
    /// to an oracle timestamp in this term: the step went as a plain
    /// prewrite, and the asker should sync (`concurrency.rs`).
    pub unsynced_term: Option<u64>,
}

/// A proposal waiting for its entry to apply.
pub struct Proposal {
    pub index: u64,
    pub term: u64,
    pub cb: Callback,
    pub proposed_at: Instant,
}

/// The answer to a proposal overtaken by a leader change.
pub fn stale_command(region_id: u64) -> Error {
    Error::region(RegionError {
        message: format!(
            "region {region_id}: the proposal was overtaken by a leader change; its outcome is unknown"
        ),
        stale_command: Some(quarry_proto::meta::StaleCommand {}),
        ..Default::default()
    })
}

impl<E: Engine> Peer<E> {
    /// Proposes a write; `cb` is answered once it is applied. Keys outside
    /// the region are refused before anything is proposed.
    pub(crate) fn propose_write(
        &mut self,
        epoch: Option<RegionEpoch>,
        write: KvWrite,
        cb: oneshot::Sender<Result<()>>,
        now: Instant,
    ) {
        let r = self.region();
        if let Some(k) = write
            .puts
            .iter()
            .map(|p| &p.key)
            .chain(&write.deletes)
            .find(|k| !region::contains(r, k))
        {
            let e = Error::region(region::key_not_in_region(k, r));
            drop(cb.send(Err(e)));
            return;
        }
        self.propose_cmd(epoch, Cmd::Write(write), Callback::Write(cb), now);
    }

    /// Proposes a transaction's step (`txn.rs` checks its keys at apply).
    /// A prewrite asking for one phase (`try_one_pc`) commits in one when
    /// this leader may pick its commit_ts (see `concurrency.rs`).
    pub(crate) fn propose_txn(
        &mut self,
        epoch: Option<RegionEpoch>,
        mut txn: TxnWrite,
        cm: &Arc<ConcurrencyManager>,
        cb: oneshot::Sender<Result<TxnDone>>,
        now: Instant,
    ) {
        let mut done = TxnDone::default();
        let mut locks = None;
        if let Some(Step::Prewrite(p)) = txn.step.as_mut() {
            p.one_pc_commit_ts = 0;
            // A column table's update or delete needs its lock (`txn.rs`).
            let allowed = !p.packed || p.mutations.iter().all(|m| m.op() == Op::Insert);
            if p.try_one_pc && allowed && self.is_leader() {
                if self.one_pc_term == self.term() {
                    let keys = p.mutations.iter().map(|m| m.key.clone()).collect();
                    let (held, commit_ts) = cm.lock_keys(keys, p.start_ts);
                    if p.max_one_pc_commit_ts == 0 || commit_ts <= p.max_one_pc_commit_ts {
                        p.one_pc_commit_ts = commit_ts;
                        done.one_pc_commit_ts = commit_ts;
                        locks = Some(held);
                    }
                    // Otherwise `held` goes: two phases, as usual.
                } else {
                    done.unsynced_term = Some(self.term());
                }
            }
        }
        self.propose_cmd(epoch, Cmd::Txn(txn), Callback::Txn(cb, done, locks), now);
    }

    /// Notes that max_ts was raised to an oracle timestamp taken after
    /// this peer led in `term`: it may commit in one phase in that term.
    pub(crate) fn synced_max_ts(&mut self, term: u64) {
        if self.is_leader() && self.term() == term {
            self.one_pc_term = term;
        }
    }

    /// Proposes splitting the region; `cb` gets both halves once applied.
    pub(crate) fn propose_split(
        &mut self,
        epoch: Option<RegionEpoch>,
        split: SplitRequest,
        cb: oneshot::Sender<Result<(Region, Region)>>,
        now: Instant,
    ) {
        self.propose_cmd(epoch, Cmd::Split(split), Callback::Split(cb), now);
    }

    /// Proposes a command of this region, to be checked at apply against
    /// `epoch`.
    pub(crate) fn propose_cmd(
        &mut self,
        epoch: Option<RegionEpoch>,
        cmd: Cmd,
        cb: Callback,
        now: Instant,
    ) {
        let data = RaftCmd {
            region_id: self.region_id(),
            epoch,
            cmd: Some(cmd),
        }
        .encode_to_vec();
        self.propose_entry(cb, now, "proposal dropped", "proposal dropped", |raft| {
            raft.propose(vec![], data)
        });
    }

    /// Proposes adding `target` to the region, or removing it; `cb` gets
    /// the region as it is once the change has applied.
    pub(crate) fn propose_change_peer(
        &mut self,
        target: PeerMeta,
        remove: bool,
        cb: oneshot::Sender<Result<Region>>,
        now: Instant,
    ) {
        let mut cc = ConfChange::default();
        cc.set_change_type(if remove {
            ConfChangeType::RemoveNode
        } else {
            ConfChangeType::AddNode
        });
        cc.node_id = target.id;
        cc.context = ChangePeerContext {
            peer: Some(target),
            remove,
        }
        .encode_to_vec()
        .into();
        self.propose_entry(
            Callback::ChangePeer(cb),
            now,
            "membership change refused",
            "membership change dropped (another is pending)",
            |raft| raft.propose_conf_change(vec![], cc),
        );
    }

    /// The one piece of proposal bookkeeping (see the module docs): `f`
    /// hands the entry to raft; `refused` prefixes raft's error, `dropped`
    /// answers a proposal raft dropped without one.
    fn propose_entry(
        &mut self,
        cb: Callback,
        now: Instant,
        refused: &str,
        dropped: &str,
        f: impl FnOnce(&mut RawNode<PeerStorage<E>>) -> raft::Result<()>,
    ) {
        if !self.is_leader() {
            cb.fail(self.not_leader());
            return;
        }
        let before = self.last_index();
        if let Err(e) = f(&mut self.raft) {
            cb.fail(region_error(format!("{refused}: {e}")));
            return;
        }
        let index = self.last_index();
        if index == before {
            cb.fail(region_error(dropped.into()));
            return;
        }
        crate::metrics::RAFT_PROPOSALS.inc();
        self.proposals.push_back(Proposal {
            index,
            term: self.term(),
            cb,
            proposed_at: now,
        });
    }

    /// Settles the proposals an applied entry decides: earlier ones were
    /// overtaken, a matching one is done. Returns the matching proposal,
    /// for the caller to answer with the outcome of applying it.
    pub(crate) fn take_proposal(&mut self, index: u64, term: u64) -> Option<Proposal> {
        while let Some(p) = self.proposals.pop_front() {
            if p.index > index {
                self.proposals.push_front(p);
                return None;
            }
            if p.index == index && p.term == term {
                crate::metrics::RAFT_COMMIT.observe(p.proposed_at.elapsed().as_secs_f64());
                if self.is_leader() {
                    self.renew_lease(p.proposed_at);
                }
                return Some(p);
            }
            p.cb.fail(stale_command(self.region_id()));
        }
        None
    }

    /// Fails every queued proposal with `e()`.
    pub(super) fn fail_proposals(&mut self, e: impl Fn() -> Error) {
        for p in std::mem::take(&mut self.proposals) {
            p.cb.fail(e());
        }
    }

    /// Fails every queued proposal with StaleCommand as the leader steps
    /// down, but keeps the memory locks of one-phase commits until this
    /// peer applies past their entries (`concurrency.rs`): an entry may
    /// still commit under the next leader.
    pub(super) fn step_down_proposals(&mut self) {
        let region_id = self.region_id();
        for p in std::mem::take(&mut self.proposals) {
            let cb = match p.cb {
                Callback::Txn(c, done, Some(locks)) => {
                    self.unsettled_locks.push((p.index, locks));
                    Callback::Txn(c, done, None)
                }
                cb => cb,
            };
            cb.fail(stale_command(region_id));
        }
    }

    /// Releases the memory locks of entries at or below `applied`.
    pub(crate) fn release_settled_locks(&mut self, applied: u64) {
        if !self.unsettled_locks.is_empty() {
            self.unsettled_locks.retain(|(index, _)| *index > applied);
        }
    }
}
