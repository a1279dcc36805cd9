//! A shard's replica of the producer-wide identity, kept in step with every other shard's
//! through the [`TicketRing`].
//!
//! No shard decides the identity alone and none reads another's: each publishes what it
//! learned (an InitProducerId answer) or needs (a KIP-360 epoch bump past the epoch it
//! observed) as a ticket, and every replica, its own included, applies every ticket in the
//! ring's one order with [`EpochCoordinator`]'s deterministic rules. Two shards that ask for a
//! bump of the same epoch therefore cause exactly one bump everywhere: the second ticket names
//! an epoch no replica is on any more.
//!
//! Invariants: a ticket the ring refused (full) is kept and published again before any later
//! one, so this shard's tickets keep their order; identical unpublished tickets are kept once,
//! which bounds the backlog by the distinct identities the shard has seen.

use std::collections::VecDeque;

use crate::engine::{EpochCoordinator, ProducerIdAndEpoch};

use super::ticket_ring::{Ticket, TicketRing};

pub(crate) struct IdentityReplica {
    consumer: usize,
    replica: EpochCoordinator,
    unpublished: VecDeque<Ticket>,
    /// Tickets this replica has applied, its own included.
    applied: u64,
}

impl IdentityReplica {
    /// The shard this replica belongs to (its consumer index in the ring).
    pub(crate) fn shard(&self) -> usize {
        self.consumer
    }

    pub(crate) fn new(consumer: usize) -> Self {
        IdentityReplica {
            consumer,
            replica: EpochCoordinator::default(),
            unpublished: VecDeque::new(),
            applied: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn current(&self) -> ProducerIdAndEpoch {
        self.replica.current()
    }

    pub(crate) fn applied(&self) -> u64 {
        self.applied
    }

    /// Queues `ticket` behind any this shard could not publish yet, then publishes as many as
    /// the ring takes. Returns whether anything reached the ring (peers should be told).
    pub(crate) fn publish(&mut self, ring: &TicketRing, ticket: Ticket) -> bool {
        if !self.unpublished.contains(&ticket) {
            self.unpublished.push_back(ticket);
        }
        self.flush(ring)
    }

    /// Publishes what the ring refused earlier. Returns whether anything reached the ring.
    pub(crate) fn flush(&mut self, ring: &TicketRing) -> bool {
        let mut published = false;
        while let Some(&ticket) = self.unpublished.front() {
            if ring.publish(ticket).is_err() {
                break;
            }
            self.unpublished.pop_front();
            published = true;
        }
        published
    }

    /// Applies every ticket readable for this shard, in ring order. Returns the identity in
    /// force when it changed.
    pub(crate) fn catch_up(&mut self, ring: &TicketRing) -> Option<ProducerIdAndEpoch> {
        let before = self.replica.generation();
        while let Some(ticket) = ring.next(self.consumer) {
            self.applied += 1;
            match ticket {
                Ticket::Install { producer_id, epoch } => {
                    self.replica
                        .install(ProducerIdAndEpoch::new(producer_id, epoch));
                }
                Ticket::Bump { producer_id, epoch } => {
                    self.replica
                        .request_bump(ProducerIdAndEpoch::new(producer_id, epoch));
                }
                Ticket::Replace { from, to } => {
                    self.replica.replace(from, to);
                }
            }
        }
        (self.replica.generation() != before).then(|| self.replica.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZERO: ProducerIdAndEpoch = ProducerIdAndEpoch {
        producer_id: 42,
        epoch: 0,
    };

    fn bump_of(observed: ProducerIdAndEpoch) -> Ticket {
        Ticket::Bump {
            producer_id: observed.producer_id,
            epoch: observed.epoch,
        }
    }

    #[test]
    fn two_shards_bumping_the_epoch_they_both_observed_agree_on_one_bump() {
        let ring = TicketRing::new(8, 2);
        let mut a = IdentityReplica::new(0);
        let mut b = IdentityReplica::new(1);
        a.publish(
            &ring,
            Ticket::Install {
                producer_id: 42,
                epoch: 0,
            },
        );
        assert_eq!(a.catch_up(&ring), Some(ZERO));
        assert_eq!(b.catch_up(&ring), Some(ZERO));
        assert!(a.publish(&ring, bump_of(ZERO)));
        assert!(b.publish(&ring, bump_of(ZERO)));
        let bumped = ProducerIdAndEpoch::new(42, 1);
        assert_eq!(a.catch_up(&ring), Some(bumped));
        assert_eq!(b.catch_up(&ring), Some(bumped));
        assert_eq!((a.applied(), b.applied()), (3, 3));
    }

    #[test]
    fn a_ticket_refused_by_a_full_ring_is_published_once_room_is_made() {
        let ring = TicketRing::new(2, 2);
        let mut fast = IdentityReplica::new(0);
        let mut slow = IdentityReplica::new(1);
        fast.publish(
            &ring,
            Ticket::Install {
                producer_id: 42,
                epoch: 0,
            },
        );
        fast.catch_up(&ring);
        assert!(fast.publish(&ring, bump_of(ZERO)));
        fast.catch_up(&ring);
        let one = ProducerIdAndEpoch::new(42, 1);
        // The slow shard has read nothing: the ring is full and this ticket waits.
        assert!(!fast.publish(&ring, bump_of(one)));
        assert!(!fast.publish(&ring, bump_of(one)), "kept once");
        assert_eq!(fast.current(), one);
        assert_eq!(slow.catch_up(&ring), Some(one));
        assert!(fast.flush(&ring));
        assert!(!fast.flush(&ring), "nothing left to publish");
        let two = ProducerIdAndEpoch::new(42, 2);
        assert_eq!(fast.catch_up(&ring), Some(two));
        assert_eq!(slow.catch_up(&ring), Some(two));
    }

    #[test]
    fn a_late_install_does_not_replace_the_identity_in_force() {
        let ring = TicketRing::new(8, 1);
        let mut r = IdentityReplica::new(0);
        r.publish(
            &ring,
            Ticket::Install {
                producer_id: 42,
                epoch: 0,
            },
        );
        r.publish(
            &ring,
            Ticket::Install {
                producer_id: 43,
                epoch: 0,
            },
        );
        assert_eq!(r.catch_up(&ring), Some(ZERO));
        assert_eq!(r.current(), ZERO);
    }
}
