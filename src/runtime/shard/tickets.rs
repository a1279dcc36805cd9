//! This shard's side of the ticket ring: publishing the identity changes its engine asks for,
//! and adopting every shard's, in ring order, through its [`IdentityReplica`].

use crate::engine::Engine;
use crate::runtime::delivery_handle::DeliveryHandle;
use crate::runtime::identity_replica::IdentityReplica;
use crate::runtime::ticket_ring::{Ticket, TicketRing};

use super::ShardContext;

impl ShardContext {
    /// Wakes every peer to read the ticket ring.
    pub(super) fn nudge_peers(&self, shard: usize) {
        for (index, peer) in self.inboxes.iter().enumerate() {
            if index != shard {
                // Wakes it only if it sleeps; awake, it reads the ring on every loop.
                peer.nudge();
            }
        }
    }

    /// Publishes `ticket` for every shard, applies what the ring holds to this shard's
    /// replica and engine, and wakes the peers.
    pub(super) fn publish_ticket(
        &self,
        shard: usize,
        replica: &mut IdentityReplica,
        engine: &mut Engine<DeliveryHandle>,
        ticket: Ticket,
    ) {
        if replica.publish(&self.tickets, ticket) {
            self.nudge_peers(shard);
        }
        adopt_tickets(&self.tickets, replica, engine);
    }
}

/// Applies the ring's unread tickets to `replica` and hands a changed identity to the engine,
/// which keeps batches already sent under the old epoch until they resolve.
pub(super) fn adopt_tickets(
    ring: &TicketRing,
    replica: &mut IdentityReplica,
    engine: &mut Engine<DeliveryHandle>,
) {
    if let Some(identity) = replica.catch_up(ring) {
        let old = engine.identity();
        tracing::info!(
            target: "kacrab::epoch",
            shard = replica.shard(),
            old_producer_id = old.producer_id,
            old_epoch = old.epoch,
            producer_id = identity.producer_id,
            epoch = identity.epoch,
            "producer identity adopted"
        );
        engine.on_identity(identity);
    }
}
