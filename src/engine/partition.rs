//! Per-partition producer state: Java's `TxnPartitionEntry` plus the partition's deque of
//! batches (the accumulator's share of it) and its routing facts.
//!
//! Ownership: a stamped batch is either in this partition's `deque` (waiting for a retry) or
//! inside one in-flight request; `inflight_batches_by_sequence` records both, so "in flight"
//! here means "stamped and not finally completed", exactly as in Java.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::protocol::record_batch::increment_sequence;

use super::batch::{BatchCompression, ProducerBatch};
use super::identity::ProducerIdAndEpoch;
use super::{Micros, NodeId};

/// A topic and partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: Arc<str>,
    /// The partition's index.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`-`partition`.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// One stamped, not yet finally completed batch, by its sequence range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflightSequence {
    pub producer: ProducerIdAndEpoch,
    pub base_sequence: i32,
    pub record_count: i32,
}

/// Java's `TxnPartitionEntry`.
#[derive(Debug, Clone)]
pub struct TxnPartitionEntry {
    /// The pid/epoch this entry's sequences belong to; may lag the producer's ("stale").
    pub producer_id_and_epoch: ProducerIdAndEpoch,
    /// Base sequence for the next newly stamped batch.
    pub next_sequence: i32,
    /// Last sequence of the highest acked batch, -1 if none.
    pub last_acked_sequence: i32,
    /// Stamped batches not yet finally completed, in sequence order. Stamps are handed out
    /// in increasing (wrapping) order and rewritten in order, so insertion order is sequence
    /// order even across the i32 wrap: comparisons never need to be numeric.
    pub inflight_batches_by_sequence: Vec<InflightSequence>,
    /// Highest last offset of an acked batch, -1 if none (judges UNKNOWN_PRODUCER_ID).
    pub last_acked_offset: i64,
}

impl Default for TxnPartitionEntry {
    fn default() -> Self {
        TxnPartitionEntry {
            producer_id_and_epoch: ProducerIdAndEpoch::NONE,
            next_sequence: 0,
            last_acked_sequence: -1,
            inflight_batches_by_sequence: Vec::new(),
            last_acked_offset: -1,
        }
    }
}

impl TxnPartitionEntry {
    /// `TransactionManager.firstInFlightSequence`: the lowest outstanding base, -1 if none.
    pub fn first_in_flight_sequence(&self) -> i32 {
        self.inflight_batches_by_sequence
            .first()
            .map_or(-1, |b| b.base_sequence)
    }

    pub fn has_inflight_batches(&self) -> bool {
        !self.inflight_batches_by_sequence.is_empty()
    }

    pub fn add_inflight(&mut self, entry: InflightSequence) {
        self.inflight_batches_by_sequence.push(entry);
    }

    /// Where the stamped batch `(producer, base_sequence)` sits in
    /// `inflight_batches_by_sequence`, `None` when it is not listed. A batch is known by its
    /// identity and base sequence together: batches of an older identity may share base
    /// sequences with the current one's. Positions give the partition's order across the
    /// sequence wrap and between identities, where comparing numbers would not.
    pub fn inflight_position(
        &self,
        producer: ProducerIdAndEpoch,
        base_sequence: i32,
    ) -> Option<usize> {
        self.inflight_batches_by_sequence
            .iter()
            .position(|s| s.producer == producer && s.base_sequence == base_sequence)
    }

    pub fn remove_inflight(&mut self, producer: ProducerIdAndEpoch, base_sequence: i32) {
        if let Some(i) = self.inflight_position(producer, base_sequence) {
            self.inflight_batches_by_sequence.remove(i);
        }
    }

    /// `TxnPartitionEntry.maybeUpdateLastAckedSequence`: raised only, so a late duplicate never
    /// lowers it. "Higher" is judged relative to the in-flight order, not numerically, so it holds
    /// across the wrap: a sequence counts as newer when it lies less than 2^30 ahead.
    pub fn maybe_update_last_acked_sequence(&mut self, last_sequence: i32) {
        if self.last_acked_sequence < 0
            || sequence_is_after(last_sequence, self.last_acked_sequence)
        {
            self.last_acked_sequence = last_sequence;
        }
    }

    /// Whether `base_sequence` is the next one the broker expects
    /// (`TransactionManager.isNextSequence`).
    pub fn is_next_sequence(&self, base_sequence: i32) -> bool {
        increment_sequence(self.last_acked_sequence, 1) == base_sequence
            || (self.last_acked_sequence == -1 && base_sequence == 0)
    }
}

/// Serial-number comparison on the wrapping 31-bit sequence space (RFC 1982 style).
pub fn sequence_is_after(a: i32, b: i32) -> bool {
    let distance = (a as i64 - b as i64).rem_euclid(1i64 << 31);
    distance != 0 && distance < (1i64 << 30)
}

/// `a` is `b` or lies less than 2^30 after it, on the wrapping sequence space.
pub fn sequence_at_or_after(a: i32, b: i32) -> bool {
    a == b || sequence_is_after(a, b)
}

/// Everything the engine keeps for one partition it owns.
pub struct PartitionSlot<D> {
    pub tp: TopicPartition,
    pub entry: TxnPartitionEntry,
    /// Retried batches in ascending sequence order, then unstamped batches (Java's deque).
    pub deque: VecDeque<ProducerBatch<D>>,
    pub leader: Option<NodeId>,
    pub leader_epoch: i32,
    /// `partitionsWithUnresolvedSequences`: the first sequence after an expired batch.
    pub unresolved_sequence: Option<i32>,
    /// Requested a bump for this partition (`partitionsToRewriteSequences`); its sequences are
    /// rewritten once the new identity is in force and nothing of unknown outcome is in flight.
    pub rewrite_pending: bool,
    /// Stamped batches of this partition currently inside an in-flight request.
    pub on_wire: usize,
    /// The codec and the topic's compression ratio estimate for new batches; `None` when
    /// batches are not compressed.
    pub compression: Option<BatchCompression>,
    /// When a record was last appended here, for `metadata.max.idle.ms`.
    pub last_append: Micros,
}

impl<D> PartitionSlot<D> {
    pub fn new(tp: TopicPartition) -> Self {
        PartitionSlot {
            tp,
            entry: TxnPartitionEntry::default(),
            deque: VecDeque::new(),
            leader: None,
            leader_epoch: -1,
            unresolved_sequence: None,
            rewrite_pending: false,
            on_wire: 0,
            compression: None,
            last_append: 0,
        }
    }

    /// Whether a queued stamped batch had an attempt of unknown outcome: it may be in the log
    /// under its stamp, so it is only ever retried under it.
    pub fn has_queued_outcome_unknown(&self) -> bool {
        self.deque
            .iter()
            .any(|b| b.stamp.is_some() && b.outcome_unknown)
    }

    /// Whether a queued stamped batch of unknown outcome comes after the stamped batch
    /// `(producer, base_sequence)` in the partition's order: the in-flight list's, which is
    /// the order the batches were stamped in and the one the deque keeps. Positions, not
    /// sequence numbers, decide, so the answer holds across the wrap and between batches of
    /// different identities. A batch missing from the list has no place in it, and every
    /// queued batch of unknown outcome counts as after it.
    pub fn has_queued_outcome_unknown_after(
        &self,
        producer: ProducerIdAndEpoch,
        base_sequence: i32,
    ) -> bool {
        let mine = self.entry.inflight_position(producer, base_sequence);
        self.deque.iter().any(|queued| {
            queued.outcome_unknown
                && queued.stamp.is_some_and(|q| {
                    match (
                        mine,
                        self.entry.inflight_position(q.producer, q.base_sequence),
                    ) {
                        (Some(mine), Some(theirs)) => theirs > mine,
                        _ => true,
                    }
                })
        })
    }

    /// `RecordAccumulator.insertInSequenceOrder`: the deque stays "retries ascending, then
    /// unsequenced".
    pub fn reenqueue_in_sequence_order(&mut self, batch: ProducerBatch<D>) {
        let position = batch
            .stamp
            .and_then(|st| self.entry.inflight_position(st.producer, st.base_sequence));
        // Index of the first deque element that comes later in sequence order (or is
        // unstamped).
        let insert_at = self
            .deque
            .iter()
            .position(|queued| match (queued.stamp, position) {
                (None, _) => true,
                (Some(q), Some(mine)) => self
                    .entry
                    .inflight_position(q.producer, q.base_sequence)
                    .is_none_or(|theirs| theirs > mine),
                (Some(_), None) => false,
            })
            .unwrap_or(self.deque.len());
        self.deque.insert(insert_at, batch);
    }

    /// Checks the invariants that tie the deque, the in-flight set and the sequence counters
    /// together. Run after every event in tests and the simulator.
    pub fn assert_invariants(&self) {
        let entry = &self.entry;
        let mut seen_unstamped = false;
        let mut previous: Option<usize> = None;
        for batch in &self.deque {
            match batch.stamp {
                None => seen_unstamped = true,
                Some(stamp) => {
                    assert!(
                        !seen_unstamped,
                        "{}: a stamped batch sits behind an unstamped one",
                        self.tp
                    );
                    let index = entry
                        .inflight_position(stamp.producer, stamp.base_sequence)
                        .unwrap_or_else(|| {
                            panic!(
                                "{}: queued stamped batch {:?} is not tracked in flight",
                                self.tp, stamp
                            )
                        });
                    if let Some(p) = previous {
                        assert!(index > p, "{}: retries are out of sequence order", self.tp);
                    }
                    previous = Some(index);
                }
            }
        }
        // In-flight batches of one identity are in ascending sequence order and do not
        // overlap. Gaps are legitimate while they last: a batch acked out of order
        // (docs/java-rules.md §9 item 4), failed definitely or expired leaves one until its
        // partition is rewritten or resolved.
        for pair in entry.inflight_batches_by_sequence.windows(2) {
            if pair[0].producer == pair[1].producer {
                assert!(
                    sequence_at_or_after(
                        pair[1].base_sequence,
                        increment_sequence(pair[0].base_sequence, pair[0].record_count)
                    ),
                    "{}: in-flight sequences overlap or are out of order: {:?} then {:?}",
                    self.tp,
                    pair[0],
                    pair[1]
                );
            }
        }
        if let Some(last) = entry.inflight_batches_by_sequence.last() {
            if last.producer == entry.producer_id_and_epoch {
                assert!(
                    sequence_at_or_after(
                        entry.next_sequence,
                        increment_sequence(last.base_sequence, last.record_count)
                    ),
                    "{}: next_sequence {} is below the end of the last stamped batch {:?}",
                    self.tp,
                    entry.next_sequence,
                    last
                );
            }
        }
        assert!(
            entry.next_sequence >= 0,
            "{}: negative next_sequence",
            self.tp
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_comparison_holds_across_the_wrap() {
        assert!(sequence_is_after(1, i32::MAX));
        assert!(sequence_is_after(10, 9));
        assert!(!sequence_is_after(9, 10));
        assert!(!sequence_is_after(i32::MAX, 1));
    }

    #[test]
    fn next_sequence_wraps() {
        let entry = TxnPartitionEntry {
            last_acked_sequence: i32::MAX,
            ..Default::default()
        };
        assert!(entry.is_next_sequence(0));
    }

    fn pid(epoch: i16) -> ProducerIdAndEpoch {
        ProducerIdAndEpoch::new(7, epoch)
    }

    fn inflight(producer: ProducerIdAndEpoch, base_sequence: i32) -> InflightSequence {
        InflightSequence {
            producer,
            base_sequence,
            record_count: 5,
        }
    }

    /// A closed batch of five records stamped at `base_sequence`, or unstamped.
    fn batch(stamp: Option<(ProducerIdAndEpoch, i32)>) -> ProducerBatch<()> {
        let mut b = ProducerBatch::new(0, 0, 1024);
        for _ in 0..5 {
            b.try_append(0, None, Some(b"v"), &[], ()).unwrap();
        }
        match stamp {
            Some((producer, base_sequence)) => b.set_stamp(
                crate::engine::batch::BatchStamp {
                    producer,
                    base_sequence,
                },
                false,
            ),
            None => b.close(),
        }
        b
    }

    /// A partition with batches at 0, 5 and 10 of one identity stamped, next sequence 15.
    fn slot_with_three_stamped() -> PartitionSlot<()> {
        let mut slot = PartitionSlot::new(TopicPartition::new("t", 0));
        slot.entry.producer_id_and_epoch = pid(0);
        slot.entry.next_sequence = 15;
        for base in [0, 5, 10] {
            slot.entry.add_inflight(inflight(pid(0), base));
        }
        slot
    }

    fn queued_bases(slot: &PartitionSlot<()>) -> Vec<Option<i32>> {
        slot.deque.iter().map(|b| b.base_sequence()).collect()
    }

    #[test]
    fn a_topic_partition_displays_as_topic_dash_partition() {
        assert_eq!(TopicPartition::new("orders", 3).to_string(), "orders-3");
    }

    #[test]
    fn the_first_in_flight_sequence_is_the_oldest_stamped_base_or_minus_one() {
        let mut entry = TxnPartitionEntry::default();
        assert_eq!(entry.first_in_flight_sequence(), -1);
        assert!(!entry.has_inflight_batches());
        entry.add_inflight(inflight(pid(0), 5));
        entry.add_inflight(inflight(pid(0), 10));
        assert_eq!(entry.first_in_flight_sequence(), 5);
        assert!(entry.has_inflight_batches());
    }

    #[test]
    fn a_batch_is_found_in_flight_by_its_identity_and_base_together() {
        let mut entry = TxnPartitionEntry::default();
        entry.add_inflight(inflight(pid(1), 0));
        entry.add_inflight(inflight(pid(1), 5));
        entry.add_inflight(inflight(pid(2), 0));
        assert_eq!(entry.inflight_position(pid(1), 0), Some(0));
        assert_eq!(entry.inflight_position(pid(1), 5), Some(1));
        assert_eq!(entry.inflight_position(pid(2), 0), Some(2));
        assert_eq!(entry.inflight_position(pid(2), 5), None);
        assert_eq!(entry.inflight_position(pid(1), 3), None);
    }

    #[test]
    fn remove_inflight_removes_only_the_batch_of_that_identity_and_base() {
        let mut entry = TxnPartitionEntry::default();
        entry.add_inflight(inflight(pid(0), 0));
        entry.add_inflight(inflight(pid(0), 5));
        entry.add_inflight(inflight(pid(1), 0));
        // Unknown base, unknown identity: nothing leaves.
        entry.remove_inflight(pid(0), 99);
        entry.remove_inflight(pid(2), 0);
        assert_eq!(entry.inflight_batches_by_sequence.len(), 3);
        entry.remove_inflight(pid(1), 0);
        assert_eq!(
            entry.inflight_batches_by_sequence,
            vec![inflight(pid(0), 0), inflight(pid(0), 5)]
        );
        entry.remove_inflight(pid(0), 5);
        assert_eq!(
            entry.inflight_batches_by_sequence,
            vec![inflight(pid(0), 0)]
        );
        entry.remove_inflight(pid(0), 0);
        assert!(!entry.has_inflight_batches());
    }

    #[test]
    fn the_last_acked_sequence_only_rises_and_the_first_ack_always_sets_it() {
        let mut entry = TxnPartitionEntry::default();
        // The first ack sets it whatever its value (nothing to compare with).
        entry.maybe_update_last_acked_sequence((1 << 30) + 5);
        assert_eq!(entry.last_acked_sequence, (1 << 30) + 5);

        let mut entry = TxnPartitionEntry::default();
        entry.maybe_update_last_acked_sequence(4);
        assert_eq!(entry.last_acked_sequence, 4);
        // A late answer for an older batch does not lower it.
        entry.maybe_update_last_acked_sequence(2);
        assert_eq!(entry.last_acked_sequence, 4);
        entry.maybe_update_last_acked_sequence(9);
        assert_eq!(entry.last_acked_sequence, 9);

        // At 0, a late answer for the batch that ended just before the wrap stays below it.
        let mut entry = TxnPartitionEntry {
            last_acked_sequence: 0,
            ..Default::default()
        };
        entry.maybe_update_last_acked_sequence(i32::MAX);
        assert_eq!(entry.last_acked_sequence, 0);
        entry.maybe_update_last_acked_sequence(3);
        assert_eq!(entry.last_acked_sequence, 3);
    }

    #[test]
    fn the_next_sequence_is_the_one_after_the_last_acked() {
        let at = |last_acked_sequence| TxnPartitionEntry {
            last_acked_sequence,
            ..Default::default()
        };
        // Nothing acked: only 0 is next.
        assert!(at(-1).is_next_sequence(0));
        assert!(!at(-1).is_next_sequence(1));
        assert!(!at(-1).is_next_sequence(3));
        assert!(at(1).is_next_sequence(2));
        assert!(!at(1).is_next_sequence(0));
        assert!(at(4).is_next_sequence(5));
        assert!(!at(4).is_next_sequence(4));
        assert!(!at(4).is_next_sequence(0));
        assert!(!at(4).is_next_sequence(6));
    }

    #[test]
    fn a_sequence_is_after_another_only_when_less_than_half_the_space_ahead() {
        assert!(!sequence_is_after(7, 7));
        assert!(sequence_is_after((1 << 30) - 1, 0));
        assert!(!sequence_is_after(1 << 30, 0));
        assert!(sequence_is_after(0, i32::MAX - ((1 << 30) - 2)));
        assert!(!sequence_is_after(0, i32::MAX - ((1 << 30) - 1)));
    }

    #[test]
    fn at_or_after_is_equal_or_after_across_the_wrap() {
        assert!(sequence_at_or_after(5, 5));
        assert!(sequence_at_or_after(6, 5));
        assert!(!sequence_at_or_after(4, 5));
        assert!(sequence_at_or_after(0, i32::MAX));
        assert!(!sequence_at_or_after(i32::MAX, 0));
    }

    #[test]
    fn only_a_queued_stamped_batch_of_unknown_outcome_counts_as_queued_outcome_unknown() {
        let mut slot = slot_with_three_stamped();
        assert!(!slot.has_queued_outcome_unknown());
        slot.deque.push_back(batch(Some((pid(0), 0))));
        let mut unstamped = batch(None);
        unstamped.outcome_unknown = true;
        slot.deque.push_back(unstamped);
        assert!(!slot.has_queued_outcome_unknown());
        slot.deque[0].outcome_unknown = true;
        assert!(slot.has_queued_outcome_unknown());
    }

    #[test]
    fn a_queued_batch_of_unknown_outcome_counts_only_when_it_comes_after_the_batch() {
        let mut slot = slot_with_three_stamped();
        slot.deque.push_back(batch(Some((pid(0), 0))));
        slot.deque.push_back(batch(Some((pid(0), 10))));
        slot.deque[0].outcome_unknown = true;
        // 0 is before 5: it does not count for 5, nor for itself.
        assert!(!slot.has_queued_outcome_unknown_after(pid(0), 5));
        assert!(!slot.has_queued_outcome_unknown_after(pid(0), 0));
        slot.deque[1].outcome_unknown = true;
        assert!(slot.has_queued_outcome_unknown_after(pid(0), 5));
        assert!(!slot.has_queued_outcome_unknown_after(pid(0), 10));
        // A batch not in flight has no place in the order: anything counts.
        assert!(slot.has_queued_outcome_unknown_after(pid(1), 5));

        // Across the wrap the in-flight order decides, not the numbers.
        let mut slot = PartitionSlot::new(TopicPartition::new("t", 0));
        slot.entry.producer_id_and_epoch = pid(0);
        let before_wrap = i32::MAX - 4;
        slot.entry.add_inflight(inflight(pid(0), before_wrap));
        slot.entry.add_inflight(inflight(pid(0), 0));
        slot.entry.next_sequence = 5;
        slot.deque.push_back(batch(Some((pid(0), 0))));
        slot.deque[0].outcome_unknown = true;
        slot.assert_invariants();
        assert!(slot.has_queued_outcome_unknown_after(pid(0), before_wrap));
        assert!(!slot.has_queued_outcome_unknown_after(pid(0), 0));
    }

    #[test]
    fn a_retried_batch_goes_back_between_its_sequence_neighbours_and_before_unstamped_ones() {
        let mut slot = slot_with_three_stamped();
        slot.deque.push_back(batch(Some((pid(0), 0))));
        slot.deque.push_back(batch(Some((pid(0), 10))));
        slot.deque.push_back(batch(None));
        slot.reenqueue_in_sequence_order(batch(Some((pid(0), 5))));
        assert_eq!(queued_bases(&slot), vec![Some(0), Some(5), Some(10), None]);
        slot.assert_invariants();

        let mut slot = slot_with_three_stamped();
        slot.deque.push_back(batch(Some((pid(0), 0))));
        slot.deque.push_back(batch(Some((pid(0), 5))));
        slot.deque.push_back(batch(None));
        slot.reenqueue_in_sequence_order(batch(Some((pid(0), 10))));
        assert_eq!(queued_bases(&slot), vec![Some(0), Some(5), Some(10), None]);
        slot.assert_invariants();

        let mut slot = slot_with_three_stamped();
        slot.deque.push_back(batch(Some((pid(0), 5))));
        slot.reenqueue_in_sequence_order(batch(Some((pid(0), 0))));
        assert_eq!(queued_bases(&slot), vec![Some(0), Some(5)]);
    }

    #[test]
    fn invariants_hold_for_retries_in_order_and_batches_of_two_identities() {
        let mut slot = slot_with_three_stamped();
        // An older identity's batches may share sequence numbers with the current one's.
        slot.entry
            .inflight_batches_by_sequence
            .insert(0, inflight(pid(1), 5));
        slot.entry
            .inflight_batches_by_sequence
            .insert(0, inflight(pid(1), 0));
        slot.entry.producer_id_and_epoch = pid(1);
        slot.entry.next_sequence = 0;
        slot.deque.push_back(batch(Some((pid(0), 0))));
        slot.deque.push_back(batch(Some((pid(0), 10))));
        slot.deque.push_back(batch(None));
        slot.assert_invariants();
    }

    #[test]
    #[should_panic(expected = "sits behind an unstamped one")]
    fn invariants_refuse_a_stamped_batch_behind_an_unstamped_one() {
        let mut slot = slot_with_three_stamped();
        slot.deque.push_back(batch(None));
        slot.deque.push_back(batch(Some((pid(0), 0))));
        slot.assert_invariants();
    }

    #[test]
    #[should_panic(expected = "is not tracked in flight")]
    fn invariants_refuse_a_queued_stamped_batch_not_in_flight() {
        let mut slot = slot_with_three_stamped();
        slot.deque.push_back(batch(Some((pid(1), 0))));
        slot.assert_invariants();
    }

    #[test]
    #[should_panic(expected = "retries are out of sequence order")]
    fn invariants_refuse_retries_out_of_sequence_order() {
        let mut slot = slot_with_three_stamped();
        slot.deque.push_back(batch(Some((pid(0), 5))));
        slot.deque.push_back(batch(Some((pid(0), 0))));
        slot.assert_invariants();
    }

    #[test]
    #[should_panic(expected = "overlap or are out of order")]
    fn invariants_refuse_overlapping_in_flight_sequences() {
        let mut slot = slot_with_three_stamped();
        slot.entry.inflight_batches_by_sequence[1].base_sequence = 3;
        slot.assert_invariants();
    }

    #[test]
    #[should_panic(expected = "is below the end of the last stamped batch")]
    fn invariants_refuse_a_next_sequence_inside_the_last_stamped_batch() {
        let mut slot = slot_with_three_stamped();
        slot.entry.next_sequence = 12;
        slot.assert_invariants();
    }

    #[test]
    #[should_panic(expected = "negative next_sequence")]
    fn invariants_refuse_a_negative_next_sequence() {
        let mut slot = PartitionSlot::<()>::new(TopicPartition::new("t", 0));
        slot.entry.next_sequence = -3;
        slot.assert_invariants();
    }
}
