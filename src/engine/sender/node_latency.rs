//! What the adaptive partitioner (KIP-794) learns from the engine: each partition's queue, and
//! whether its leader is taking batches.
//!
//! Java's `RecordAccumulator` keeps a `NodeLatencyStats` per node: `readyTimeMs`, the last
//! time the node had a batch ready to send, and `drainTimeMs`, the last time it also could
//! take one (`Sender.sendProducerData` calls `updateNodeLatencyStats` with `canDrain` false
//! when `NetworkClient.ready` refuses the node: not connected, or
//! `max.in.flight.requests.per.connection` requests in flight). A node whose ready time runs
//! ahead of its drain time by more than `partitioner.availability.timeout.ms` has had batches
//! waiting that it would not take: `RecordAccumulator.partitionReady` leaves its partitions out
//! of the partitioner's load statistics, so no new sticky partition is drawn there. Its
//! batches still wait for it; once one is drained both times meet again and its partitions
//! come back. Nothing is kept while the timeout is 0 (off), as in Java.
//!
//! The queue a partition reports is the number of batches the engine holds for it and has not
//! sent (Java's `dequeSize`); the batch the application threads are filling is not counted.

use crate::engine::TopicPartition;

use super::super::{Delivery, Micros, NodeId};
use super::Engine;

/// Java's `RecordAccumulator.NodeLatencyStats`, in the engine's microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeLatency {
    /// The last time the node had a batch ready to send.
    pub ready: Micros,
    /// The last time the node had a batch ready and could take it.
    pub drain: Micros,
}

/// One partition as the partitioner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLoad<'a> {
    /// The partition.
    pub tp: &'a TopicPartition,
    /// Batches the engine holds for it, not yet sent.
    pub queue: usize,
    /// It has a leader, and that leader has not been kept from draining longer than
    /// `partitioner.availability.timeout.ms`.
    pub available: bool,
}

impl<D: Delivery> Engine<D> {
    /// Java's `updateNodeLatencyStats` for every node that leads a partition with a batch
    /// ready now; called by `drain` before it drains. A node can drain when its connection is
    /// ready and has room for another request, the test `drain` applies.
    pub(super) fn update_node_latency(&mut self, now: Micros) {
        if self.config.partition_availability_timeout == 0 {
            return;
        }
        for slot in &self.partitions {
            let Some(node) = slot.leader else { continue };
            let Some(head) = slot.deque.front() else {
                continue;
            };
            let backing_off = head.attempts > 0
                && !head.backoff_skip
                && now < head.last_attempt + self.backoff_for(head.attempts);
            if backing_off || (head.stamp.is_none() && !self.batch_ready(slot, now)) {
                continue;
            }
            let can_drain = self
                .connections
                .get(&node)
                .is_some_and(|c| c.is_ready() && c.produce_in_flight() < self.config.max_in_flight);
            let stats = self.node_latency.entry(node).or_insert(NodeLatency {
                ready: now,
                drain: now,
            });
            // Drain time first, as Java writes it, though nothing reads it concurrently here.
            if can_drain {
                stats.drain = now;
            }
            stats.ready = now;
        }
    }

    /// Whether `node` has been kept from draining its ready batches longer than
    /// `partitioner.availability.timeout.ms` (never while that is 0).
    pub fn node_unavailable(&self, node: NodeId) -> bool {
        let timeout = self.config.partition_availability_timeout;
        timeout > 0
            && self
                .node_latency
                .get(&node)
                .is_some_and(|s| s.ready.saturating_sub(s.drain) > timeout)
    }

    /// Every partition this engine holds, with its queue and availability, for the
    /// partitioner's load statistics (`RecordAccumulator.partitionReady`).
    pub fn partition_loads(&self) -> impl Iterator<Item = PartitionLoad<'_>> + '_ {
        self.partitions.iter().map(|slot| PartitionLoad {
            tp: &slot.tp,
            queue: slot.deque.len(),
            available: slot.leader.is_some_and(|node| !self.node_unavailable(node)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::scripted_rig::{Rig, MS, SECOND};

    /// `t`-0 as the partitioner sees it: (queue, available).
    fn t0(rig: &Rig) -> (usize, bool) {
        let load = rig.engine.partition_loads().next().expect("t-0");
        (load.queue, load.available)
    }

    #[test]
    fn a_leader_that_cannot_take_ready_batches_past_the_timeout_makes_its_partitions_unavailable() {
        let mut rig = Rig::new(&[("partitioner.availability.timeout.ms", "100")]);
        // Broker 1 leads t-0 and is being connected to: the batch is ready, not drainable.
        rig.start(12);
        assert_eq!(t0(&rig), (1, true));
        rig.advance(100 * MS);
        assert_eq!(t0(&rig), (1, true), "100 ms is not past the timeout");
        rig.advance(MS);
        assert_eq!(t0(&rig), (1, false), "ready 101 ms without a drain");
        // The connection comes up: the batch drains, the node is taking batches again.
        rig.negotiate(1, 12);
        assert_eq!(t0(&rig), (0, true));
    }

    #[test]
    fn without_the_timeout_a_stuck_leader_keeps_its_partitions_available() {
        let mut rig = Rig::new(&[]);
        rig.start(12);
        rig.advance(10 * SECOND);
        assert_eq!(t0(&rig), (1, true));
        assert!(
            rig.engine.node_latency.is_empty(),
            "nothing is kept when off"
        );
    }

    #[test]
    fn adaptive_partitioning_off_turns_the_timeout_off_as_java_ignores_it() {
        let mut rig = Rig::new(&[
            ("partitioner.availability.timeout.ms", "100"),
            ("partitioner.adaptive.partitioning.enable", "false"),
        ]);
        rig.start(12);
        rig.advance(10 * SECOND);
        assert_eq!(t0(&rig), (1, true));
    }
}
