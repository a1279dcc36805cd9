//! The cross-shard ticket ring: one bounded ring of control tickets that every shard consumes
//! in one total order, without a lock.
//!
//! Any shard (or application thread) may publish; every shard reads every ticket, in publish
//! order, and applies it to its own replica of the producer-wide state (the epoch in force).
//! Because all replicas apply the same tickets in the same order with the same deterministic
//! rule, they agree without sharing mutable state: two shards that both request a bump from the
//! epoch they observed publish two tickets, the first one bumps every replica and the second
//! names an epoch no replica is on any more, so every replica ignores it. Exactly one bump.
//!
//! Invariants: a slot is rewritten only after every consumer has read it (publish fails with
//! `Full` instead of overwriting); a consumer sees a ticket only after its payload is written
//! (release/acquire on the slot's sequence number).

use crate::engine::ProducerIdAndEpoch;
use crate::sync::{AtomicU64, Ordering};

/// A control ticket. Packed into three words so a slot needs no lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ticket {
    /// InitProducerId returned this identity.
    Install { producer_id: i64, epoch: i16 },
    /// A shard observed this identity and needs the epoch bumped past it (KIP-360).
    Bump { producer_id: i64, epoch: i16 },
    /// A transactional InitProducerId replaced `from` with `to` (the transaction coordinator
    /// decides transactional epochs); ignored where `from` is no longer in force.
    Replace {
        from: ProducerIdAndEpoch,
        to: ProducerIdAndEpoch,
    },
}

impl Ticket {
    /// `a` holds the kind and both epochs, `b` and `c` the producer ids.
    fn pack(self) -> [u64; 3] {
        let (kind, first, second) = match self {
            Ticket::Install { producer_id, epoch } => (
                1u64,
                ProducerIdAndEpoch::new(producer_id, epoch),
                ProducerIdAndEpoch::NONE,
            ),
            Ticket::Bump { producer_id, epoch } => (
                2u64,
                ProducerIdAndEpoch::new(producer_id, epoch),
                ProducerIdAndEpoch::NONE,
            ),
            Ticket::Replace { from, to } => (3u64, from, to),
        };
        [
            kind << 32 | (first.epoch as u16 as u64) << 16 | (second.epoch as u16 as u64),
            first.producer_id as u64,
            second.producer_id as u64,
        ]
    }

    fn unpack([a, b, c]: [u64; 3]) -> Ticket {
        let first = ProducerIdAndEpoch::new(b as i64, (a >> 16 & 0xffff) as u16 as i16);
        let second = ProducerIdAndEpoch::new(c as i64, (a & 0xffff) as u16 as i16);
        match a >> 32 {
            1 => Ticket::Install {
                producer_id: first.producer_id,
                epoch: first.epoch,
            },
            2 => Ticket::Bump {
                producer_id: first.producer_id,
                epoch: first.epoch,
            },
            _ => Ticket::Replace {
                from: first,
                to: second,
            },
        }
    }
}

struct Slot {
    /// `index + 1` once the ticket published at `index` is readable; 0 when never written.
    sequence: AtomicU64,
    words: [AtomicU64; 3],
}

/// The ring is full: some consumer has not read the ticket a publish would overwrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the ticket ring is full")]
pub struct Full;

pub struct TicketRing {
    slots: Box<[Slot]>,
    /// Next index to claim.
    head: AtomicU64,
    /// Next index each consumer will read.
    cursors: Box<[AtomicU64]>,
}

impl TicketRing {
    /// A ring of `capacity` tickets (rounded up to a power of two) read by `consumers` shards.
    pub fn new(capacity: usize, consumers: usize) -> Self {
        let capacity = capacity.max(2).next_power_of_two();
        TicketRing {
            slots: (0..capacity)
                .map(|_| Slot {
                    sequence: AtomicU64::new(0),
                    words: Default::default(),
                })
                .collect(),
            head: AtomicU64::new(0),
            cursors: (0..consumers).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The cursor of the consumer furthest behind; a detached consumer (cursor `u64::MAX`)
    /// holds nothing back.
    fn slowest_cursor(&self) -> u64 {
        self.cursors
            .iter()
            .map(|c| c.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Publishes a ticket; it is ordered after every ticket published before it.
    pub fn publish(&self, ticket: Ticket) -> Result<u64, Full> {
        let capacity = self.slots.len() as u64;
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            if head >= self.slowest_cursor().saturating_add(capacity) {
                return Err(Full);
            }
            match self.head.compare_exchange_weak(
                head,
                head + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => head = actual,
            }
        }
        // This index is ours alone, and every consumer has read the slot's previous ticket.
        let slot = &self.slots[(head % capacity) as usize];
        for (word, value) in slot.words.iter().zip(ticket.pack()) {
            word.store(value, Ordering::Relaxed);
        }
        slot.sequence.store(head + 1, Ordering::Release);
        Ok(head)
    }

    /// The next ticket for `consumer`, if one is readable. Tickets are returned in publish
    /// order; a ticket whose publisher has claimed its index but not finished writing holds back
    /// the ones after it, so the order is total.
    pub fn next(&self, consumer: usize) -> Option<Ticket> {
        let cursor = &self.cursors[consumer];
        let index = cursor.load(Ordering::Relaxed);
        if index == u64::MAX {
            return None; // detached
        }
        let slot = &self.slots[(index % self.slots.len() as u64) as usize];
        if slot.sequence.load(Ordering::Acquire) != index + 1 {
            return None;
        }
        let ticket = Ticket::unpack(slot.words.each_ref().map(|w| w.load(Ordering::Relaxed)));
        cursor.store(index + 1, Ordering::Release);
        Some(ticket)
    }

    /// `consumer` reads no more: publishing stops waiting for it.
    pub fn detach(&self, consumer: usize) {
        self.cursors[consumer].store(u64::MAX, Ordering::Release);
    }

    /// The hold `consumer` keeps on the ring while it reads: publishers wait for it until it
    /// is detached.
    pub fn attach(&self, consumer: usize) -> Attachment<'_> {
        Attachment {
            ring: self,
            consumer,
        }
    }
}

/// A consumer's hold on the ring (a shard holds its own for as long as it runs). Dropping
/// it detaches the consumer, so a shard that ends in any way, a panic unwinding its task
/// included, never holds publishers back.
pub struct Attachment<'a> {
    ring: &'a TicketRing,
    consumer: usize,
}

impl Attachment<'_> {
    /// The consumer reads no more (now, rather than whenever the attachment is dropped).
    pub fn detach(self) {
        drop(self);
    }
}

impl Drop for Attachment<'_> {
    fn drop(&mut self) {
        self.ring.detach(self.consumer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EpochCoordinator;
    use std::sync::Arc;

    fn apply(replica: &mut EpochCoordinator, ticket: Ticket) {
        match ticket {
            Ticket::Install { producer_id, epoch } => {
                replica.install(ProducerIdAndEpoch::new(producer_id, epoch));
            }
            Ticket::Bump { producer_id, epoch } => {
                replica.request_bump(ProducerIdAndEpoch::new(producer_id, epoch));
            }
            Ticket::Replace { from, to } => {
                replica.replace(from, to);
            }
        }
    }

    #[test]
    fn every_kind_of_ticket_reads_back_as_published() {
        let ring = TicketRing::new(8, 1);
        let tickets = [
            Ticket::Install {
                producer_id: i64::MAX,
                epoch: i16::MAX,
            },
            Ticket::Bump {
                producer_id: 0,
                epoch: -1,
            },
            Ticket::Replace {
                from: ProducerIdAndEpoch::new(7, 32766),
                to: ProducerIdAndEpoch::new(8, 0),
            },
            Ticket::Replace {
                from: ProducerIdAndEpoch::NONE,
                to: ProducerIdAndEpoch::new(9, 3),
            },
        ];
        for t in tickets {
            ring.publish(t).unwrap();
        }
        for t in tickets {
            assert_eq!(ring.next(0), Some(t));
        }
        assert_eq!(ring.next(0), None);
    }

    #[test]
    fn tickets_pack_and_unpack() {
        for t in [
            Ticket::Install {
                producer_id: 7,
                epoch: 0,
            },
            Ticket::Bump {
                producer_id: i64::MAX,
                epoch: i16::MAX,
            },
            Ticket::Bump {
                producer_id: -1,
                epoch: -1,
            },
            Ticket::Replace {
                from: ProducerIdAndEpoch::new(i64::MAX, -1),
                to: ProducerIdAndEpoch::new(-1, i16::MAX),
            },
        ] {
            assert_eq!(Ticket::unpack(t.pack()), t);
        }
    }

    #[test]
    fn every_consumer_reads_every_ticket_in_one_order() {
        let ring = TicketRing::new(8, 2);
        for e in 0..5 {
            ring.publish(Ticket::Bump {
                producer_id: 1,
                epoch: e,
            })
            .unwrap();
        }
        for consumer in 0..2 {
            let seen: Vec<_> = std::iter::from_fn(|| ring.next(consumer)).collect();
            assert_eq!(seen.len(), 5);
            assert_eq!(
                seen[4],
                Ticket::Bump {
                    producer_id: 1,
                    epoch: 4
                }
            );
        }
    }

    #[test]
    fn publish_refuses_to_overwrite_an_unread_ticket() {
        let ring = TicketRing::new(4, 2);
        for e in 0..4 {
            ring.publish(Ticket::Bump {
                producer_id: 1,
                epoch: e,
            })
            .unwrap();
        }
        assert_eq!(
            ring.publish(Ticket::Bump {
                producer_id: 1,
                epoch: 9
            }),
            Err(Full)
        );
        while ring.next(0).is_some() {}
        assert_eq!(
            ring.publish(Ticket::Bump {
                producer_id: 1,
                epoch: 9
            }),
            Err(Full)
        );
        assert!(ring.next(1).is_some());
        assert!(ring
            .publish(Ticket::Bump {
                producer_id: 1,
                epoch: 9
            })
            .is_ok());
    }

    #[test]
    fn concurrent_bumps_from_the_same_epoch_bump_every_replica_exactly_once() {
        let ring = Arc::new(TicketRing::new(1024, 2));
        ring.publish(Ticket::Install {
            producer_id: 42,
            epoch: 0,
        })
        .unwrap();
        // Both shards observed (42, 0) and ask for a bump at the same time, many rounds.
        let publishers: Vec<_> = (0..2)
            .map(|_| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        while ring
                            .publish(Ticket::Bump {
                                producer_id: 42,
                                epoch: 0,
                            })
                            .is_err()
                        {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..2)
            .map(|consumer| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    let mut replica = EpochCoordinator::default();
                    let mut read = 0;
                    while read < 201 {
                        match ring.next(consumer) {
                            Some(t) => {
                                apply(&mut replica, t);
                                read += 1;
                            }
                            None => std::thread::yield_now(),
                        }
                    }
                    replica.current()
                })
            })
            .collect();
        for p in publishers {
            p.join().unwrap();
        }
        for c in consumers {
            assert_eq!(c.join().unwrap(), ProducerIdAndEpoch::new(42, 1));
        }
    }

    // A shard's thread that panics never reaches its close path; the ring must not keep
    // waiting for it, or the other shards' tickets (bumps, identities) stop being published
    // once the ring has gone round.
    #[test]
    fn a_consumer_whose_thread_panics_detaches_and_publishers_are_not_held_back() {
        let ring = Arc::new(TicketRing::new(2, 2));
        let reader = ring.clone();
        let outcome = std::thread::spawn(move || {
            let _attachment = reader.attach(1);
            panic!("consumer 1 fails");
        })
        .join();
        assert!(outcome.is_err(), "the consumer's thread panicked");
        for epoch in 0..8 {
            assert_eq!(
                ring.publish(Ticket::Bump {
                    producer_id: 1,
                    epoch
                }),
                Ok(epoch as u64),
                "a consumer that is gone holds publishing back"
            );
            assert!(ring.next(0).is_some());
        }
    }
}

/// Model checks of the ring (built with `--cfg loom`, see `crate::sync`): publishers racing
/// for indices and for room in a ring smaller than what they publish, against consumers
/// reading, in every interleaving up to a bound on preemptions. Nobody spins: a publish that
/// finds the ring full gives up, and each consumer reads a fixed number of times while the
/// others run and drains the rest once they are done.
#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;

    /// A ticket whose three words all carry `n`: one read with words of two publishes shows.
    fn ticket(n: i64) -> Ticket {
        let id = ProducerIdAndEpoch::new(n, n as i16);
        Ticket::Replace { from: id, to: id }
    }

    /// The `n` of a ticket read whole (`n` is never 0, the words of a slot never written).
    fn whole(t: Ticket) -> i64 {
        match t {
            Ticket::Replace { from, to }
                if from == to && from.epoch as i64 == from.producer_id && from.producer_id > 0 =>
            {
                from.producer_id
            }
            other => panic!("a half-written ticket: {other:?}"),
        }
    }

    /// What `consumer` reads in `tries` calls.
    fn read(ring: &TicketRing, consumer: usize, tries: usize) -> Vec<i64> {
        (0..tries)
            .filter_map(|_| ring.next(consumer).map(whole))
            .collect()
    }

    /// Three tickets from two publishers through a ring of two slots, read by two consumers:
    /// published tickets take the indices 0, 1, 2... in turn (a publish refused as full takes
    /// none), and each consumer reads every published ticket once, whole, in index order, so
    /// both in one order and each publisher's in its publish order. A slot rewritten before
    /// both consumers read it would show as a ticket missed, read twice or read torn.
    #[test]
    fn loom_consumers_read_every_ticket_whole_and_in_one_order() {
        crate::sync::check(|| {
            let ring = Arc::new(TicketRing::new(2, 2));
            let first = {
                let ring = ring.clone();
                thread::spawn(move || [(1, ring.publish(ticket(1))), (2, ring.publish(ticket(2)))])
            };
            let second = {
                let ring = ring.clone();
                thread::spawn(move || (3, ring.publish(ticket(3))))
            };
            let other = {
                let ring = ring.clone();
                thread::spawn(move || read(&ring, 1, 2))
            };
            let mut seen = [read(&ring, 0, 2), other.join().unwrap()];
            let [one, two] = first.join().unwrap();
            let three = second.join().unwrap();
            for (consumer, seen) in seen.iter_mut().enumerate() {
                seen.extend(read(&ring, consumer, 3));
            }
            if let (Ok(a), Ok(b)) = (one.1, two.1) {
                assert!(a < b, "a publisher's tickets in its order");
            }
            let mut by_index = vec![0; 3];
            let mut published = 0;
            for (n, index) in [one, two, three] {
                if let Ok(index) = index {
                    by_index[index as usize] = n;
                    published += 1;
                }
            }
            by_index.truncate(published);
            assert!(!by_index.contains(&0), "indices taken in turn");
            assert!(published >= 2, "two tickets always fit");
            assert_eq!(seen[0], by_index, "consumer 0 reads in index order");
            assert_eq!(seen[1], by_index, "consumer 1 too");
        });
    }
}
