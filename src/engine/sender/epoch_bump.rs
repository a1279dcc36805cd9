//! Partition sequencing after the stamp, and the epoch bump: request, resolve, rewrite, adopt.
//! This module is the only place that requests a bump, writes a partition's `rewrite_pending`
//! or `unresolved_sequence`, or re-stamps a batch that already has a stamp; the first stamp is
//! drain's (`stamp_if_needed`, docs/java-rules.md §2.1), after `maybe_update_producer_id_and_epoch`
//! here; split children inherit their parent's.
//!
//! The Java rules this module follows (section of docs/java-rules.md, Java method: function
//! here):
//!
//! - docs/java-rules.md §2.1 step 1, `TransactionManager.maybeUpdateProducerIdAndEpoch`:
//!   `maybe_update_producer_id_and_epoch`;
//! - docs/java-rules.md §2.3 gates 3a and 3b: `bump_gate_open` (gates 2 and 4 are checked in
//!   `head_is_drainable`);
//! - docs/java-rules.md §4.2, `TransactionManager.handleFailedBatch`: `handle_failed_batch`;
//! - docs/java-rules.md §4.4, `TransactionManager.requestIdempotentEpochBumpForPartition`:
//!   `request_bump_for`;
//! - docs/java-rules.md §4.4, `TransactionManager.bumpIdempotentProducerEpoch`:
//!   `EpochCoordinator::request_bump` (`engine/identity.rs`), carried to every shard by the
//!   runtime's ticket ring and adopted in `on_identity`;
//! - docs/java-rules.md §4.4, `TxnPartitionEntry.startSequencesAtBeginning`:
//!   `start_sequences_at_beginning`, applied by `apply_sequence_rewrites`;
//! - docs/java-rules.md §4.4, Java's `clientSideEpochBumpRequired` for the idempotent producer:
//!   `EpochBump`;
//! - docs/java-rules.md §4.6 and §4.7, `TransactionManager.canRetry`: `idempotent_can_retry`;
//! - docs/java-rules.md §4.9, `TransactionManager.markSequenceUnresolved` and
//!   `maybeResolveSequences`: `mark_sequence_unresolved` and `maybe_resolve_sequences`;
//! - docs/java-rules.md §4.10, `TxnPartitionEntry.adjustSequencesDueToFailedBatch`:
//!   `adjust_sequences_due_to_failed_batch`.
//!
//! Deviations from Java, on purpose:
//! - The idempotent bump is producer-wide across shards: each engine only asks
//!   (`Action::RequestEpochBump`, naming the identity it observed the failure under) and adopts
//!   whatever identity is installed; concurrent requests for the same identity make one bump.
//! - A partition's rewrite waits until none of its batches is on the wire or of unknown outcome
//!   (Java rewrites them at once, on the wire or not, and retries the answers to their old
//!   attempts as `sequenceHasBeenReset`, docs/java-rules.md §4.4).
//! - A batch of unknown outcome answered UNKNOWN_PRODUCER_ID with a known log start offset
//!   fails as of unknown outcome (Java bumps and rewrites it, docs/java-rules.md §4.6 cases 3 and
//!   4): it may not be renumbered, and its old stamp is refused for good.
//! - A batch of unknown outcome answered OUT_OF_ORDER_SEQUENCE_NUMBER under an identity the
//!   producer has moved past fails as of unknown outcome (Java retries it until its delivery
//!   timeout, docs/java-rules.md §4.7), for the same reason.
//! - A transactional producer never bumps here: its failures go to the transaction manager,
//!   which bumps through InitProducerId or EndTxn at the abort (docs/java-rules.md §4.5).
//! - Sequence comparisons are wrap-aware (docs/java-rules.md §2.2).
//! - A transactional batch that fails after a later batch of its partition was acked gives
//!   no sequences back (docs/java-rules.md §4.10 would move the batches behind it onto sequences
//!   the broker already holds, where a retry can be taken for a duplicate of an acked batch).

use crate::error::ProduceError;
use crate::protocol::error_code::code;
use crate::protocol::record_batch;

use super::super::batch::{BatchStamp, ProducerBatch};
use super::super::error_class::{classify_produce_error, ProduceErrorClass};
use super::super::identity::ProducerIdAndEpoch;
use super::super::partition::{sequence_is_after, InflightSequence, PartitionSlot};
use super::super::{Action, Delivery};
use super::{Engine, RequestBody};

/// The idempotent epoch bump as this engine sees it: Java's
/// `TransactionManager.clientSideEpochBumpRequired` (set by
/// `requestIdempotentEpochBumpForPartition`), scoped to the identity the bump starts from,
/// since here the bump itself is made for the whole producer by the ticket ring
/// (docs/architecture.md) and adopted in `on_identity`. Event-driven: it has no deadline.
#[derive(Debug, Default)]
pub(super) struct EpochBump {
    state: BumpState,
    /// The identity the last request named: one request per observed identity.
    last_request: Option<ProducerIdAndEpoch>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum BumpState {
    /// No bump is awaited.
    #[default]
    Idle,
    /// A bump was requested from `from`, the identity in force, and has not been adopted yet:
    /// the partitions' sequence rewrites wait for the new identity.
    Awaited { from: ProducerIdAndEpoch },
}

impl EpochBump {
    /// Whether a bump from the identity in force is still awaited.
    pub(super) fn awaited(&self) -> bool {
        self.state != BumpState::Idle
    }

    /// A partition needs a bump from `observed`, the identity its sequences are under, while
    /// `current` is in force. The bump is awaited only when it starts from the identity in
    /// force (a request about an identity already left is covered by the bump that left it).
    /// `true` when the request is to be sent: once per observed identity.
    pub(super) fn request(
        &mut self,
        observed: ProducerIdAndEpoch,
        current: ProducerIdAndEpoch,
    ) -> bool {
        if observed == current {
            self.state = BumpState::Awaited { from: observed };
        }
        if self.last_request == Some(observed) {
            return false;
        }
        self.last_request = Some(observed);
        true
    }

    /// `identity` is now in force: a bump awaited from another identity has come (or was
    /// overtaken by a newer one).
    pub(super) fn on_identity(&mut self, identity: ProducerIdAndEpoch) {
        if let BumpState::Awaited { from } = self.state {
            if from != identity {
                self.state = BumpState::Idle;
            }
        }
    }

    /// A bump is awaited only from the identity in force.
    pub(super) fn assert_invariants(&self, identity: ProducerIdAndEpoch) {
        if let BumpState::Awaited { from } = self.state {
            assert_eq!(from, identity, "a bump is pending from a replaced identity");
        }
    }
}

impl<D: Delivery> Engine<D> {
    /// The identity in force for the whole producer changed (installed or bumped).
    pub fn on_identity(&mut self, identity: ProducerIdAndEpoch) {
        self.identity = identity;
        self.epoch_bump.on_identity(identity);
    }

    /// `TransactionManager.maybeUpdateProducerIdAndEpoch` (docs/java-rules.md §2.1 step 1), the
    /// lazy switch: an unstamped batch about to be stamped moves its partition to the identity in
    /// force, which `startSequencesAtBeginning` does with nothing in flight (gate 3a holds until
    /// then).
    pub(super) fn maybe_update_producer_id_and_epoch(&mut self, slot_index: usize) {
        let identity = self.identity;
        let slot = &mut self.partitions[slot_index];
        if slot.entry.producer_id_and_epoch != identity {
            debug_assert!(!slot.entry.has_inflight_batches());
            // `TransactionManager.maybeUpdateProducerIdAndEpoch` → `startSequencesAtBeginning` with
            // nothing in flight.
            slot.entry.producer_id_and_epoch = identity;
            slot.entry.next_sequence = 0;
            slot.entry.last_acked_sequence = -1;
        }
    }

    /// Gates 3a and 3b (docs/java-rules.md §2.3) for an unstamped head: whether the epoch bump lets
    /// the partition stamp a new batch now.
    pub(super) fn bump_gate_open(&self, slot: &PartitionSlot<D>) -> bool {
        let stale = slot.entry.producer_id_and_epoch != self.identity;
        if stale && slot.entry.has_inflight_batches() {
            return false; // gate 3a
        }
        if slot.unresolved_sequence.is_some() || slot.rewrite_pending {
            return false; // gate 3b
        }
        true
    }

    /// `TransactionManager.requestIdempotentEpochBumpForPartition`. The request names the identity
    /// the partition's sequences are under, the one the failure was observed with, not the engine's
    /// current one: when another shard has bumped meanwhile and this engine already adopted the
    /// result, that bump covers this partition too, and naming the newer identity would make a
    /// second bump for the same failure (concurrent requests for the same epoch produce one bump:
    /// docs/architecture.md, the ticket ring). Such a late request is still made, once per observed
    /// identity, and the ticket ring's rule discards it, so whether two shards' requests collide
    /// does not depend on which answer arrived first; the partition is then only rewritten.
    fn request_bump_for(&mut self, slot_index: usize) {
        // A transactional producer bumps only through InitProducerId at the abort
        // (docs/java-rules.md §4.5); its failures reach the transaction manager instead.
        if !self.config.idempotent || self.config.transactional_id.is_some() {
            return;
        }
        self.partitions[slot_index].rewrite_pending = true;
        let observed = match self.partitions[slot_index].entry.producer_id_and_epoch {
            stamped if stamped.is_valid() => stamped,
            _ => self.identity,
        };
        if !observed.is_valid() {
            return;
        }
        if self.epoch_bump.request(observed, self.identity) {
            self.stats.epoch_bumps_requested += 1;
            self.actions
                .push_back(Action::RequestEpochBump { observed });
        }
    }

    /// `TransactionManager.maybeResolveSequences`: settle unresolved partitions that have nothing
    /// in flight.
    pub(super) fn maybe_resolve_sequences(&mut self) {
        for slot_index in 0..self.partitions.len() {
            let slot = &mut self.partitions[slot_index];
            if slot.unresolved_sequence.is_none() || slot.entry.has_inflight_batches() {
                continue;
            }
            let all_acked = slot.entry.is_next_sequence(slot.entry.next_sequence);
            slot.unresolved_sequence = None;
            if !all_acked && self.config.transactional_id.is_some() {
                // `transitionToAbortableErrorOrFatalError`: only an abort with an epoch bump
                // brings the sequences back in line.
                let tp = slot.tp.clone();
                self.txn_report_failure(
                    &ProduceError::OutcomeUnknown {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                        reason: "a batch of unknown outcome left a sequence gap".to_string(),
                    },
                    false,
                );
            } else if !all_acked {
                // The expired batch's sequences can be neither reused nor skipped: abandon the
                // sequence space by moving to a new epoch.
                self.request_bump_for(slot_index);
            }
        }
    }

    /// `TxnPartitionEntry.startSequencesAtBeginning` (`start_sequences_at_beginning`) for the
    /// partitions that asked for a bump, once the new identity is in force and none of their
    /// batches is on the wire or of unknown outcome.
    pub(super) fn apply_sequence_rewrites(&mut self) {
        if !self.identity.is_valid() || self.epoch_bump.awaited() {
            return;
        }
        let mut unplaceable = Vec::new();
        for (slot_index, slot) in self.partitions.iter_mut().enumerate() {
            if !slot.rewrite_pending {
                continue;
            }
            if slot.entry.producer_id_and_epoch == self.identity {
                // Already on the current identity (adopted lazily): nothing to rewrite.
                slot.rewrite_pending = false;
                continue;
            }
            // Any queued batch of unknown outcome blocks the rewrite, not only the lowest
            // one: a broker with no state for the producer on the partition (a new producer
            // id, expired state) takes any first sequence, so a later batch can be in the log
            // while an earlier one is not. Renumbering the later one would append it twice,
            // and renumbering the earlier one would append it after it. The partition first
            // settles those batches under their old stamps (`head_is_drainable` lets the
            // batches up to the last of them go out so).
            let blocked = slot.on_wire > 0 || slot.has_queued_outcome_unknown();
            if blocked {
                continue;
            }
            // A queued batch whose sequences lie at or before the last acked sequence was
            // overtaken: a later batch of the partition is in the log (a broker with no state
            // for the producer accepts any first sequence). None of its attempts landed, and
            // renumbering it under the new epoch would append it after records sent later, so
            // it fails instead. (None is of unknown outcome: those blocked the rewrite above.)
            let last_acked = slot.entry.last_acked_sequence;
            while let Some(front) = slot.deque.front() {
                let overtaken = match front.last_sequence() {
                    Some(last) => {
                        last_acked >= 0 && super::partition::sequence_at_or_after(last_acked, last)
                    }
                    None => false,
                };
                if !overtaken {
                    break;
                }
                let batch = slot.deque.pop_front().expect("front checked");
                let stamp = batch.stamp.expect("stamped");
                slot.entry
                    .remove_inflight(stamp.producer, stamp.base_sequence);
                unplaceable.push((slot_index, batch));
            }
            start_sequences_at_beginning(slot, self.identity);
            self.stats.sequence_rewrites += 1;
        }
        for (slot_index, batch) in unplaceable {
            let tp = &self.partitions[slot_index].tp;
            let err = ProduceError::rejected(
                &tp.topic,
                tp.partition,
                code::OUT_OF_ORDER_SEQUENCE_NUMBER,
                Some(
                    "a batch sent after this one was appended first; this one cannot be \
                     appended in order"
                        .to_string(),
                ),
            );
            self.finish_batch(slot_index, batch, Err(err));
        }
    }

    /// `TransactionManager.canRetry` for OUT_OF_ORDER_SEQUENCE_NUMBER (docs/java-rules.md §4.7) and
    /// UNKNOWN_PRODUCER_ID (docs/java-rules.md §4.6), idempotent producer. Requests a bump where
    /// Java does; the retry itself happens later.
    pub(super) fn idempotent_can_retry(
        &mut self,
        slot_index: usize,
        batch: &ProducerBatch<D>,
        class: ProduceErrorClass,
        log_start_offset: i64,
    ) -> bool {
        if !self.config.idempotent || batch.expired {
            return false;
        }
        let Some(stamp) = batch.stamp else {
            return false;
        };
        if self.refused_for_good_under_a_left_identity(slot_index, batch, class, log_start_offset) {
            return false;
        }
        if stamp.producer != self.partitions[slot_index].entry.producer_id_and_epoch {
            // An answer about an identity this partition already left: just retry; the
            // retry goes out under its own stamp or after the rewrite.
            return true;
        }
        match class {
            ProduceErrorClass::UnknownProducerId => {
                self.can_retry_unknown_producer_id(slot_index, batch, log_start_offset)
            }
            _ => self.can_retry_out_of_order(slot_index, batch, stamp),
        }
    }

    /// The deviations of `idempotent_can_retry` for a batch stamped under an identity the
    /// producer has moved past: whether its refusal means it can never be appended in order,
    /// so it fails now instead of being retried (definitely, or as of unknown outcome when an
    /// earlier attempt may have landed).
    fn refused_for_good_under_a_left_identity(
        &self,
        slot_index: usize,
        batch: &ProducerBatch<D>,
        class: ProduceErrorClass,
        log_start_offset: i64,
    ) -> bool {
        let Some(stamp) = batch.stamp else {
            return false;
        };
        if stamp.producer == self.identity {
            return false;
        }
        let refused_under_its_stamp = match class {
            ProduceErrorClass::OutOfOrderSequence => true,
            // With no log start offset the broker did not know the partition yet
            // (docs/java-rules.md §4.6 case 1): a retry may be answered otherwise.
            ProduceErrorClass::UnknownProducerId => log_start_offset != -1,
            _ => false,
        };
        if !batch.outcome_unknown {
            // Refused under a stamp the producer has moved past, with a batch of unknown outcome
            // queued after it in the partition's order. Under its old stamp the broker will not
            // take it in order (a batch sent after it is in the log, as on a fresh partition, or
            // the broker has no state for the producer and takes no non-zero sequence), and it
            // holds that later batch back (gate 4 sends only the first in flight); renumbered,
            // it can go out only once the later batch settled (`apply_sequence_rewrites` waits
            // for it), so it could land after it. Invariant: no batch is appended after one sent
            // later. No attempt of it landed: it fails definitely, as `apply_sequence_rewrites`
            // fails an overtaken batch.
            //
            // A batch of unknown outcome queued before it does not count: the broker may simply
            // not have that one yet, which explains the refusal. That one is retried first,
            // under its own stamp (gate 4), and this one after it: the rules of
            // `idempotent_can_retry`, Java's `TransactionManager.canRetry` (docs/java-rules.md
            // §4.7), retry it.
            return refused_under_its_stamp
                && self.partitions[slot_index]
                    .has_queued_outcome_unknown_after(stamp.producer, stamp.base_sequence);
        }
        // The producer has moved past this batch's identity, and the broker has not got this
        // batch's predecessor under it. The batch may not be re-stamped (an earlier attempt's
        // outcome is unknown), and retried under its old stamp it keeps the partition's rewrite
        // waiting while every attempt is answered out of order, until its delivery timeout. It
        // fails now, as of unknown outcome. A deviation: Java's `TransactionManager.canRetry`
        // retries every out-of-order batch of the idempotent producer (docs/java-rules.md §4.7)
        // until its delivery timeout. Unlike the definite case above, no batch of unknown
        // outcome can be queued ahead of it to explain the refusal: its outcome became unknown
        // at an earlier attempt, so this answer is to a retry, which gate 4 sent only as the
        // partition's first in flight, and nothing is stamped ahead of that.
        class == ProduceErrorClass::OutOfOrderSequence
    }

    /// `TransactionManager.canRetry` for UNKNOWN_PRODUCER_ID (docs/java-rules.md §4.6), for a
    /// batch stamped under its partition's identity.
    fn can_retry_unknown_producer_id(
        &mut self,
        slot_index: usize,
        batch: &ProducerBatch<D>,
        log_start_offset: i64,
    ) -> bool {
        if log_start_offset == -1 || batch.reopened {
            return true;
        }
        if self.is_transactional() {
            // docs/java-rules.md §4.6 case 5: the batch fails and the transaction must
            // abort. (The retention case, restarting the partition at 0 under the same
            // epoch, is not taken: a Kafka 4 broker no longer answers UNKNOWN_PRODUCER_ID.)
            return false;
        }
        if batch.outcome_unknown {
            // The leader has no state for the producer on the partition (a pre-2.5
            // broker whose retention or reload dropped it), so it refuses this stamp's
            // non-zero sequence every time, and nothing the producer sends can bring
            // the state back under this epoch. The batch may not be renumbered (an
            // earlier attempt may be in the log), so Java's bump-and-rewrite is not
            // open to it, and retried under its old stamp it would hold the
            // partition's rewrite, and every batch behind it, until its delivery
            // timeout. It fails now, as of unknown outcome; the failure asks for the
            // bump (`handle_failed_batch`).
            return false;
        }
        self.request_bump_for(slot_index);
        true
    }

    /// `TransactionManager.canRetry` for OUT_OF_ORDER_SEQUENCE_NUMBER (docs/java-rules.md §4.7),
    /// for a batch stamped (`stamp`) under its partition's identity.
    fn can_retry_out_of_order(
        &mut self,
        slot_index: usize,
        batch: &ProducerBatch<D>,
        stamp: BatchStamp,
    ) -> bool {
        if self.is_overtaken(slot_index, batch) {
            // It can never be in sequence again under this epoch, and renumbered it
            // would land after records sent later: it fails now, as
            // `apply_sequence_rewrites` fails an overtaken batch, rather than being
            // answered out of order until its delivery timeout.
            return false;
        }
        let slot = &self.partitions[slot_index];
        let unresolved = slot.unresolved_sequence;
        if unresolved.is_none()
            && (batch.reopened || !slot.entry.is_next_sequence(stamp.base_sequence))
        {
            return true;
        }
        if self.is_transactional() {
            // docs/java-rules.md §4.7 case 3: next in line, the transaction must abort.
            return false;
        }
        if unresolved.is_none() || unresolved == Some(stamp.base_sequence) {
            self.request_bump_for(slot_index);
        }
        true
    }

    /// Overtaken: a batch sent after this one was appended first (a broker with no state for
    /// the producer takes any first sequence, Kafka's `ProducerAppendInfo.checkSequence`) and
    /// acknowledged past this one's sequences, and no attempt of this one landed. Its
    /// sequences are spent: they must not be given back to the batches behind it
    /// (docs/java-rules.md §4.10), whose numbers the broker has already seen.
    pub(super) fn is_overtaken(&self, slot_index: usize, batch: &ProducerBatch<D>) -> bool {
        let Some(stamp) = batch.stamp else {
            return false;
        };
        let entry = &self.partitions[slot_index].entry;
        !batch.outcome_unknown
            && stamp.producer == entry.producer_id_and_epoch
            && entry.last_acked_sequence >= 0
            && !sequence_is_after(stamp.base_sequence, entry.last_acked_sequence)
    }

    /// `TransactionManager.handleFailedBatch` (docs/java-rules.md §4.2), the sequence side of a
    /// failed batch: it leaves the in-flight list, and then its sequences are given back
    /// (transactional, definite failure, docs/java-rules.md §4.10), marked unresolved (unknown
    /// outcome, docs/java-rules.md §4.9), or abandoned with an epoch bump (idempotent,
    /// docs/java-rules.md §4.4).
    pub(super) fn handle_failed_batch(
        &mut self,
        slot_index: usize,
        batch: &ProducerBatch<D>,
        error: i16,
        adjust_sequences: bool,
    ) {
        if let Some(stamp) = batch.stamp {
            self.partitions[slot_index]
                .entry
                .remove_inflight(stamp.producer, stamp.base_sequence);
            let class = classify_produce_error(error);
            let oosn = matches!(
                class,
                ProduceErrorClass::OutOfOrderSequence | ProduceErrorClass::UnknownProducerId
            );
            if self.config.transactional_id.is_some() {
                // `TransactionManager.handleFailedBatch`, transactional: a definite failure gives
                // its sequences back (docs/java-rules.md §4.10); an unknown outcome leaves a gap to
                // resolve.
                let same =
                    stamp.producer == self.partitions[slot_index].entry.producer_id_and_epoch;
                if batch.outcome_unknown && same {
                    let last = batch.last_sequence().expect("stamped");
                    mark_sequence_unresolved(&mut self.partitions[slot_index], last);
                } else if adjust_sequences && same && self.fatal.is_none() {
                    self.adjust_sequences_due_to_failed_batch(
                        slot_index,
                        stamp,
                        batch.record_count,
                    );
                }
            } else if self.fatal.is_none() && (oosn || adjust_sequences) {
                self.request_bump_for(slot_index);
            } else if batch.outcome_unknown
                && stamp.producer == self.partitions[slot_index].entry.producer_id_and_epoch
            {
                let last = batch.last_sequence().expect("stamped");
                mark_sequence_unresolved(&mut self.partitions[slot_index], last);
            }
        }
    }

    /// `TxnPartitionEntry.adjustSequencesDueToFailedBatch` (docs/java-rules.md §4.10): a definitely
    /// failed batch's sequences are given back, and every later batch of the partition moves down
    /// by its record count, so the remaining batches stay contiguous for the broker until the
    /// abort; unless the failed batch was overtaken (see the invariant below).
    fn adjust_sequences_due_to_failed_batch(
        &mut self,
        slot_index: usize,
        stamp: BatchStamp,
        record_count: i32,
    ) {
        let entry = &self.partitions[slot_index].entry;
        if stamp.producer != entry.producer_id_and_epoch {
            return;
        }
        // Invariant: no batch is moved onto sequences at or below the partition's last acked
        // one, whichever failure brought us here. The broker recognises a duplicate by epoch
        // and first and last sequence (Kafka's `ProducerStateEntry.findDuplicateBatch`): a
        // batch moved onto an acked batch's exact range is answered with that batch's offset
        // and reported written while it is not in the log, and one moved anywhere else at or
        // below it is refused out of order for good. The batches that move start at or after
        // the failed batch's end and land at or after its base, so the failed base decides:
        // above the last acked sequence, nothing moves at or below it; at or below it (the
        // failed batch was overtaken: a later batch was appended first, as a broker with no
        // state for the producer takes any first sequence), the batch after the last acked
        // one, and `next_sequence`, would move down onto acked sequences. Then the failed
        // batch's sequences are spent, as in `apply_sequence_rewrites`, and nothing moves: the
        // later batches already follow the acked ones, so client and broker still agree.
        let last_acked = entry.last_acked_sequence;
        if last_acked >= 0 && !sequence_is_after(stamp.base_sequence, last_acked) {
            return;
        }
        if entry
            .inflight_batches_by_sequence
            .iter()
            .any(|s| stamped_after(s.producer, s.base_sequence, stamp))
        {
            self.participant.sequences_diverged = true;
        }
        // A later batch of unknown outcome may be in the log under its current sequence, so it
        // is never re-stamped (its retry would be answered as a duplicate of another batch and
        // acknowledged at that batch's offset), and moving only the others would break their
        // contiguity: nothing moves. The later batches meet the gap (retried until their
        // delivery timeout; the transaction is abortable anyway) and the abort bumps the epoch.
        if self.has_later_batch_of_unknown_outcome(slot_index, stamp) {
            self.participant.sequences_diverged = true;
            return;
        }
        self.move_later_batches_down(slot_index, stamp, record_count);
    }

    /// Whether a batch of `slot_index` stamped after `failed` (same identity), queued or on the
    /// wire, is of unknown outcome.
    fn has_later_batch_of_unknown_outcome(&self, slot_index: usize, failed: BatchStamp) -> bool {
        let later_unknown = |b: &ProducerBatch<D>| {
            b.outcome_unknown
                && b.stamp
                    .is_some_and(|s| stamped_after(s.producer, s.base_sequence, failed))
        };
        self.partitions[slot_index].deque.iter().any(later_unknown)
            || self.connections.values().any(|conn| {
                conn.in_flight.iter().any(|(_, body)| match body {
                    RequestBody::Produce(batches) => batches
                        .iter()
                        .any(|(i, b)| *i == slot_index && later_unknown(b)),
                    _ => false,
                })
            })
    }

    /// Moves every batch of `slot_index` stamped after `failed` (same identity), and the
    /// partition's next sequence, down by `record_count`: in the in-flight list, in the deque,
    /// and on the wire (a batch that expired there is no longer tracked and keeps its stamp).
    fn move_later_batches_down(
        &mut self,
        slot_index: usize,
        failed: BatchStamp,
        record_count: i32,
    ) {
        let transactional = self.is_transactional();
        let moved = |s: BatchStamp| BatchStamp {
            producer: s.producer,
            base_sequence: wrap_sub(s.base_sequence, record_count),
        };
        let slot = &mut self.partitions[slot_index];
        slot.entry.next_sequence = wrap_sub(slot.entry.next_sequence, record_count);
        for s in slot.entry.inflight_batches_by_sequence.iter_mut() {
            if stamped_after(s.producer, s.base_sequence, failed) {
                s.base_sequence = wrap_sub(s.base_sequence, record_count);
            }
        }
        for batch in slot.deque.iter_mut() {
            if let Some(s) = batch
                .stamp
                .filter(|s| stamped_after(s.producer, s.base_sequence, failed))
            {
                batch.set_stamp(moved(s), transactional);
            }
        }
        for conn in self.connections.values_mut() {
            for (_, body) in conn.in_flight.iter_mut() {
                let RequestBody::Produce(batches) = body else {
                    continue;
                };
                for (i, batch) in batches.iter_mut() {
                    if *i != slot_index || batch.expired {
                        continue;
                    }
                    if let Some(s) = batch
                        .stamp
                        .filter(|s| stamped_after(s.producer, s.base_sequence, failed))
                    {
                        batch.set_stamp(moved(s), transactional);
                    }
                }
            }
        }
    }
}

/// Whether the batch stamped `(producer, base_sequence)` comes after `failed` under the same
/// identity.
fn stamped_after(producer: ProducerIdAndEpoch, base_sequence: i32, failed: BatchStamp) -> bool {
    producer == failed.producer && sequence_is_after(base_sequence, failed.base_sequence)
}

/// `TxnPartitionEntry.startSequencesAtBeginning` (docs/java-rules.md §4.4): the partition's
/// stamped batches, all queued, none of unknown outcome, are renumbered from 0 under
/// `identity` in their order, and its unresolved and rewrite marks go.
fn start_sequences_at_beginning<D>(slot: &mut PartitionSlot<D>, identity: ProducerIdAndEpoch) {
    let mut next = 0i32;
    let mut inflight = Vec::new();
    for batch in slot.deque.iter_mut() {
        if batch.stamp.is_none() {
            break;
        }
        // No attempt of it may have landed (the rewrite waited for every batch of
        // unknown outcome): the new stamp is this batch's only one that counts.
        debug_assert!(
            !batch.outcome_unknown,
            "re-stamping a batch that may have landed"
        );
        batch.set_stamp(
            BatchStamp {
                producer: identity,
                base_sequence: next,
            },
            false,
        );
        inflight.push(InflightSequence {
            producer: identity,
            base_sequence: next,
            record_count: batch.record_count,
        });
        next = record_batch::increment_sequence(next, batch.record_count);
    }
    slot.entry.inflight_batches_by_sequence = inflight;
    slot.entry.next_sequence = next;
    slot.entry.last_acked_sequence = -1;
    slot.entry.producer_id_and_epoch = identity;
    slot.unresolved_sequence = None;
    slot.rewrite_pending = false;
}

/// `TransactionManager.markSequenceUnresolved`: keep the max of the old mark and `last + 1`.
pub(super) fn mark_sequence_unresolved<D>(slot: &mut PartitionSlot<D>, last_sequence: i32) {
    let next = record_batch::increment_sequence(last_sequence, 1);
    slot.unresolved_sequence = Some(match slot.unresolved_sequence {
        Some(old) if super::partition::sequence_is_after(old, next) => old,
        _ => next,
    });
}

/// `a - b` on the 31-bit sequence circle.
fn wrap_sub(a: i32, b: i32) -> i32 {
    let r = (i64::from(a) - i64::from(b)).rem_euclid(1i64 << 31);
    let r = r as i32;
    debug_assert_eq!(record_batch::increment_sequence(r, b), a);
    r
}

#[cfg(test)]
mod tests {
    use super::EpochBump;
    use crate::engine::identity::ProducerIdAndEpoch;

    fn pid(epoch: i16) -> ProducerIdAndEpoch {
        ProducerIdAndEpoch::new(7, epoch)
    }

    #[test]
    fn a_bump_is_requested_once_per_observed_identity() {
        let mut bump = EpochBump::default();
        assert!(bump.request(pid(0), pid(0)));
        assert!(
            !bump.request(pid(0), pid(0)),
            "one request for the same identity"
        );
        assert!(bump.awaited());
        bump.on_identity(pid(1));
        assert!(!bump.awaited(), "the bump came");
        assert!(bump.request(pid(1), pid(1)));
    }

    #[test]
    fn a_late_request_about_an_identity_already_left_is_sent_but_not_awaited() {
        let mut bump = EpochBump::default();
        assert!(bump.request(pid(0), pid(1)));
        assert!(!bump.awaited());
        bump.assert_invariants(pid(1));
    }

    #[test]
    fn a_bump_stays_awaited_while_its_identity_is_in_force() {
        let mut bump = EpochBump::default();
        bump.request(pid(3), pid(3));
        bump.on_identity(pid(3));
        assert!(bump.awaited());
        bump.assert_invariants(pid(3));
    }

    #[test]
    #[should_panic(expected = "pending from a replaced identity")]
    fn invariants_refuse_a_bump_awaited_from_a_replaced_identity() {
        let mut bump = EpochBump::default();
        bump.request(pid(0), pid(0));
        bump.assert_invariants(pid(1));
    }
}
