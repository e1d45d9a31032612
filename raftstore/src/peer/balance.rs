//! Leadership transfers, and the preferred leader that spreads leaders
//! over stores.
//!
//! Each region prefers the peer `peers[region_id % n]`. Placement rotates
//! stores per region, so preferring that peer spreads leaders evenly with
//! no placement driver: a new region's preferred peer campaigns first, and
//! with `balance-leaders` a leader checks every five election timeouts and
//! hands over to the preferred peer once that peer has the whole log and
//! has been heard from recently.
//!
//! Every transfer, asked for or balancing, first revokes the leader's
//! published lease ([`crate::local_read`]): the target may be elected at
//! once, inside the lease, and from then on reads here could be stale.
//! (While the transfer is pending the peer's own lease check refuses too,
//! [`Peer::lease_valid`].)

use quarry_proto::meta::Peer as PeerMeta;

use super::Peer;
use crate::engine::Engine;
use crate::local_read::LocalReader;

impl<E: Engine> Peer<E> {
    /// The peer this region prefers as leader: spreads leaders over stores.
    pub fn preferred_leader(&self) -> Option<PeerMeta> {
        let peers = &self.region().peers;
        (!peers.is_empty()).then(|| peers[(self.region_id() as usize) % peers.len()])
    }

    /// Hands leadership to peer `to`, revoking the published lease first.
    pub(crate) fn transfer_leader(&mut self, to: u64, local: &LocalReader) {
        // Stop local lease reads before the target can win.
        local.revoke(self.region_id());
        self.raft.transfer_leader(to);
    }

    /// Hands leadership to the preferred peer if it is caught up and
    /// active. Called on the leader, before the tick (see the store's
    /// tick: a tick that ends an election timeout clears `recent_active`).
    pub(crate) fn maybe_transfer_to_preferred(&mut self, local: &LocalReader) {
        let Some(pref) = self.preferred_leader() else {
            return;
        };
        if pref.id == self.peer_id() {
            return;
        }
        let last = self.last_index();
        let caught_up = self
            .raft
            .raft
            .prs()
            .get(pref.id)
            .is_some_and(|p| p.matched == last && p.recent_active);
        if caught_up {
            tracing::info!(
                region = self.region_id(),
                to = pref.id,
                "handing leadership to the preferred peer"
            );
            self.transfer_leader(pref.id, local);
        }
    }
}
