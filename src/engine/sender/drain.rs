//! Drain (`RecordAccumulator.drain`, docs/java-rules.md §2): for each ready connection, take
//! at most one head batch per partition, round-robin, while the request fits
//! `max.request.size`; a head goes out only past its backoff (docs/java-rules.md §3.5) and the
//! gates of docs/java-rules.md §2.3 (gate 1 in `drain`, the bump's gates 3a and 3b in
//! `epoch_bump.rs`, the others in `head_is_drainable`), and an unstamped batch is stamped at its
//! first drain (docs/java-rules.md §2.1).

use crate::protocol::api::ApiKey;
use crate::protocol::record_batch;

use super::super::batch::{BatchStamp, ProducerBatch};
use super::super::partition::{InflightSequence, PartitionSlot};
use super::super::{Delivery, Micros, NodeId, TopicPartition};
use super::{exponential_backoff, Engine};

impl<D: Delivery> Engine<D> {
    pub(super) fn backoff_for(&self, attempts: u32) -> Micros {
        exponential_backoff(
            self.config.retry_backoff,
            self.config.retry_backoff_max,
            attempts,
        )
    }

    /// Whether the partition's head batch may go out now: past its backoff, and through gates
    /// 2 to 4 (gate 1 is checked in `drain`). An unstamped head must also be ready
    /// (`batch_ready`) unless `node_ready`: its broker is being drained because another of its
    /// partitions is ready, and then every head goes, as Java's `drainBatchesForOneNode` polls
    /// the first batch of each partition of a ready node whatever its fill or linger.
    fn head_is_drainable(&self, slot: &PartitionSlot<D>, now: Micros, node_ready: bool) -> bool {
        let Some(head) = slot.deque.front() else {
            return false;
        };
        if head.attempts > 0
            && !head.backoff_skip
            && now < head.last_attempt + self.backoff_for(head.attempts)
        {
            return false;
        }
        if !self.config.idempotent {
            return head.stamp.is_some() || node_ready || self.batch_ready(slot, now);
        }
        if !self.identity.is_valid() {
            return false; // gate 2: no producer id
        }
        match head.stamp {
            Some(stamp) => {
                // Gate 4: while retrying, only the lowest outstanding batch is in flight.
                if stamp.base_sequence != slot.entry.first_in_flight_sequence()
                    || Some(stamp.producer)
                        != slot
                            .entry
                            .inflight_batches_by_sequence
                            .first()
                            .map(|s| s.producer)
                {
                    return false;
                }
                // A batch waiting for its sequence rewrite does not go out under the old
                // stamp, unless an earlier attempt's outcome is unknown: that one is only ever
                // retried under its original stamp. Nor does a batch queued ahead of one of
                // unknown outcome: the rewrite waits for that one, and that one waits its turn
                // behind this head, so this head is retried under its old stamp too, where the
                // broker can only append it before the later batch.
                !slot.rewrite_pending || head.outcome_unknown || slot.has_queued_outcome_unknown()
            }
            None => {
                if !self.bump_gate_open(slot) {
                    return false; // gates 3a, 3b
                }
                if slot.entry.inflight_batches_by_sequence.len() >= self.config.max_in_flight {
                    return false;
                }
                node_ready || self.batch_ready(slot, now)
            }
        }
    }

    /// Whether `node` is ready (Java's `RecordAccumulator.ready`): one of the partitions it
    /// leads has a head that may go out on its own (full, lingered, retried, or the producer
    /// flushing or closing), past gate 1.
    fn node_has_ready_head(&self, node: NodeId, now: Micros) -> bool {
        self.partitions
            .iter()
            .enumerate()
            .any(|(slot_index, slot)| {
                slot.leader == Some(node)
                    && self.head_is_drainable(slot, now, false)
                    && (slot.deque.front().is_some_and(|b| b.stamp.is_some())
                        || self.txn_send_allowed(slot_index))
            })
    }

    /// The brokers a drain now would send to: connected, below
    /// `max.in.flight.requests.per.connection`, and ready (`node_has_ready_head`). A drain takes
    /// the head of every partition they lead, so a caller holding records of those partitions
    /// outside the engine (the runtime's open batches) may hand them over first to go along.
    pub fn drain_ready_nodes(&self, now: Micros) -> Vec<NodeId> {
        self.connections
            .values()
            .filter(|c| c.is_ready() && c.produce_in_flight() < self.config.max_in_flight)
            .map(|c| c.node)
            .filter(|&node| self.node_has_ready_head(node, now))
            .collect()
    }

    /// The broker that leads `tp`, as the engine's metadata has it.
    pub fn leader_of(&self, tp: &TopicPartition) -> Option<NodeId> {
        self.partition(tp).and_then(|slot| slot.leader)
    }

    pub(super) fn drain(&mut self, now: Micros) {
        let count = self.partitions.len();
        if count == 0 {
            return;
        }
        self.update_node_latency(now);
        let mut nodes: Vec<NodeId> = self
            .connections
            .values()
            .filter(|c| c.is_ready() && c.produce_in_flight() < self.config.max_in_flight)
            .map(|c| c.node)
            .collect();
        nodes.sort_unstable();
        let start = self.drain_start % count;
        self.drain_start = self.drain_start.wrapping_add(1);
        for node in nodes {
            loop {
                let conn = &self.connections[&node];
                if conn.produce_in_flight() >= self.config.max_in_flight {
                    break;
                }
                // A request goes to a ready broker only, and then carries every partition's
                // head it may (docs/java-rules.md §2.5).
                if !self.node_has_ready_head(node, now) {
                    break;
                }
                let version = match conn.versions.version(ApiKey::Produce) {
                    Ok(v) => v,
                    Err(_) => break,
                };
                let mut batches: Vec<(usize, ProducerBatch<D>)> = Vec::new();
                let mut size = 0usize;
                for k in 0..count {
                    let slot_index = (start + k) % count;
                    let slot = &self.partitions[slot_index];
                    if slot.leader != Some(node) || !self.head_is_drainable(slot, now, true) {
                        continue;
                    }
                    if slot.deque.front().is_some_and(|b| b.stamp.is_none())
                        && !self.txn_send_allowed(slot_index)
                    {
                        continue; // gate 1: not (yet) in the transaction
                    }
                    // The transaction's protocol decides the version (checked at the request's
                    // first batch, so a broker that leads nothing drainable is never refused).
                    if batches.is_empty() && self.produce_version(node, version).is_none() {
                        return;
                    }
                    let slot = &self.partitions[slot_index];
                    let head_size = slot.deque.front().expect("drainable").size_in_bytes();
                    if !batches.is_empty() && size + head_size > self.config.max_request_size {
                        break;
                    }
                    let mut batch = self.partitions[slot_index]
                        .deque
                        .pop_front()
                        .expect("drainable");
                    self.stamp_if_needed(slot_index, &mut batch);
                    // This attempt carries the batch's current stamp, so an answer to it is
                    // about that stamp, not about one from before a rewrite (Java's
                    // `ProducerBatch.close` at drain clears `reopened`). A re-stamp while the
                    // attempt is on the wire (`adjust_sequences_due_to_failed_batch`) sets it
                    // again.
                    batch.reopened = false;
                    self.partitions[slot_index].on_wire += 1;
                    if batch.attempts > 0 {
                        self.stats.retries += 1;
                    }
                    size += batch.size_in_bytes();
                    batches.push((slot_index, batch));
                }
                if batches.is_empty() {
                    break;
                }
                let version = self
                    .produce_version(node, version)
                    .expect("checked at the first batch");
                self.send_produce(now, node, version, batches);
            }
        }
    }

    /// Stamps an unstamped batch at its first drain (docs/java-rules.md §2.1), after the lazy
    /// switch to the current identity.
    fn stamp_if_needed(&mut self, slot_index: usize, batch: &mut ProducerBatch<D>) {
        if batch.stamp.is_some() || !self.config.idempotent {
            batch.finish();
            return;
        }
        self.maybe_update_producer_id_and_epoch(slot_index);
        let identity = self.identity;
        let slot = &mut self.partitions[slot_index];
        let base_sequence = slot.entry.next_sequence;
        batch.set_stamp(
            BatchStamp {
                producer: identity,
                base_sequence,
            },
            self.config.transactional_id.is_some(),
        );
        slot.entry.next_sequence =
            record_batch::increment_sequence(base_sequence, batch.record_count);
        slot.entry.add_inflight(InflightSequence {
            producer: identity,
            base_sequence,
            record_count: batch.record_count,
        });
    }
}
