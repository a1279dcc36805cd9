//! Per-partition producer state: what a partition leader remembers about each idempotent or
//! transactional producer, and the checks a data batch must pass against it.
//!
//! Mirrors Kafka's `ProducerStateManager`, `ProducerStateEntry`, `BatchMetadata` and
//! `ProducerAppendInfo` (storage module, 4.x) in the order
//! `UnifiedLog.analyzeAndValidateProducerState` runs them. Validation works on a copy of the entry;
//! the copy replaces the stored entry only after the log append succeeded, so a rejected batch
//! leaves the state untouched.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::error_codes::*;
use super::transaction_version::TransactionVersion;
use super::KafkaBehaviour;
use crate::testkit::batch::decrement_sequence;

/// Metadata of one appended batch (Kafka `BatchMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// The batch's last sequence number.
    pub last_seq: i32,
    /// The batch's last offset.
    pub last_offset: i64,
    /// `last_offset - first_offset`, which equals `last_seq - first_seq` for a client batch.
    pub offset_delta: i32,
    /// The batch's max timestamp; a duplicate is answered with it as LogAppendTime.
    pub timestamp: i64,
}

impl BatchMetadata {
    /// Derived with wrap-around, as `BatchMetadata.firstSeq` does.
    pub fn first_seq(&self) -> i32 {
        decrement_sequence(self.last_seq, self.offset_delta)
    }

    /// The batch's first offset.
    pub fn first_offset(&self) -> i64 {
        self.last_offset - i64::from(self.offset_delta)
    }
}

/// What a partition remembers about one producer id (Kafka `ProducerStateEntry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerStateEntry {
    /// The producer id.
    pub producer_id: i64,
    /// -1 only for a placeholder that was never stored.
    pub producer_epoch: i16,
    /// Oldest first, at most `BrokerRules::producer_state_window` (Kafka: 5,
    /// `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`).
    batches: VecDeque<BatchMetadata>,
    /// Coordinator epoch of the last transaction marker, -1 until the first marker.
    pub coordinator_epoch: i32,
    /// First offset of the transaction open on this partition, if any.
    pub current_txn_first_offset: Option<i64>,
    /// Max timestamp of the last data batch (or the last marker's time); drives expiry.
    pub last_timestamp: i64,
}

impl ProducerStateEntry {
    fn empty(producer_id: i64) -> Self {
        ProducerStateEntry {
            producer_id,
            producer_epoch: -1,
            batches: VecDeque::new(),
            coordinator_epoch: -1,
            current_txn_first_offset: None,
            last_timestamp: -1,
        }
    }

    /// The retained batches, oldest first.
    pub fn batches(&self) -> impl Iterator<Item = &BatchMetadata> {
        self.batches.iter()
    }

    /// Last sequence written at the current epoch, -1 (`NO_SEQUENCE`) if none is retained.
    pub fn last_seq(&self) -> i32 {
        self.batches.back().map_or(-1, |b| b.last_seq)
    }

    fn first_seq(&self) -> i32 {
        self.batches.front().map_or(-1, |b| b.first_seq())
    }

    /// Kafka `ProducerStateEntry.findDuplicateBatch`: same epoch, and a retained batch with the
    /// same first and the same last sequence. A partial overlap is not a duplicate.
    fn find_duplicate_batch(
        &self,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
    ) -> Option<BatchMetadata> {
        if epoch != self.producer_epoch {
            return None;
        }
        self.batches
            .iter()
            .find(|b| b.first_seq() == first_seq && b.last_seq == last_seq)
            .copied()
    }

    /// Kafka `ProducerStateEntry.maybeUpdateProducerEpoch`: a new epoch forgets the old
    /// epoch's batches.
    fn maybe_update_producer_epoch(&mut self, epoch: i16) {
        if self.producer_epoch != epoch {
            self.batches.clear();
            self.producer_epoch = epoch;
        }
    }

    /// Kafka `ProducerStateEntry.addBatch`.
    fn add_batch(&mut self, epoch: i16, batch: BatchMetadata, window: usize) {
        self.maybe_update_producer_epoch(epoch);
        if self.batches.len() == window {
            self.batches.pop_front();
        }
        self.batches.push_back(batch);
        self.last_timestamp = batch.timestamp;
    }
}

/// The producer-relevant fields of an incoming data batch, with offsets already assigned.
#[derive(Debug, Clone, Copy)]
pub struct IncomingBatch {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub transactional: bool,
}

/// What the transaction coordinator said about a transactional batch before its append
/// (KIP-890: `UnifiedLog.maybeStartTransactionVerification` and its `VerificationStateEntry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Nothing vouched for it (not transactional, or verification failed to start): a
    /// transactional batch with no transaction open here is INVALID_TXN_STATE.
    Unverified,
    /// Let through: the partition is in the transaction (TV1 verification), its transaction is
    /// already open here, or verification is disabled.
    Verified,
    /// A TV2 producer's partition added by the coordinator on this produce (Produce v12+): the
    /// verification entry supports the epoch bump, so the first write of the epoch must start
    /// at sequence 0 (KAFKA-18202).
    AddedTv2,
}

/// Outcome of validating a batch against the producer state.
#[derive(Debug)]
pub enum ProducerCheck {
    /// A retry of a retained batch: nothing is written, the original metadata is answered.
    Duplicate(BatchMetadata),
    /// Append, then commit this updated entry with [`ProducerStateManager::update`].
    Accept(ProducerStateEntry),
}

/// All producer state of one partition (Kafka `ProducerStateManager`).
#[derive(Debug, Default)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerStateEntry>,
    /// First offset → producer id of every transaction open on the partition (`ongoingTxns`);
    /// the smallest key is the first unstable offset.
    ongoing_txns: BTreeMap<i64, i64>,
}

impl ProducerStateManager {
    pub fn entry(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Kafka `ProducerStateManager.firstUnstableOffset` (one replica: every completed
    /// transaction's marker is at once below the high watermark, so only open ones count).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing_txns.keys().next().copied()
    }

    /// Kafka `UnifiedLog.hasOngoingTransaction` (4.0+ compares the epoch too).
    fn has_ongoing_transaction(&self, producer_id: i64, epoch: i16) -> bool {
        self.producers
            .get(&producer_id)
            .is_some_and(|e| e.current_txn_first_offset.is_some() && e.producer_epoch == epoch)
    }

    /// Validates one client data batch, in the order of
    /// `UnifiedLog.analyzeAndValidateProducerState`: duplicate check first, then the
    /// transactional guard, then `ProducerAppendInfo.checkProducerEpoch` and `checkSequence`,
    /// then the transactional flag check of `ProducerAppendInfo.appendDataBatch`.
    ///
    /// `verification` says whether the transaction coordinator vouched for this transactional
    /// batch (KIP-890 verification, the TV2 implicit add, or verification disabled). Errors
    /// are Kafka error codes.
    pub fn analyze(
        &self,
        batch: &IncomingBatch,
        behaviour: KafkaBehaviour,
        window: usize,
        verification: Verification,
    ) -> Result<ProducerCheck, i16> {
        let current = self.producers.get(&batch.producer_id);
        if let Some(duplicate) = current.and_then(|e| {
            e.find_duplicate_batch(batch.producer_epoch, batch.first_seq, batch.last_seq)
        }) {
            return Ok(ProducerCheck::Duplicate(duplicate));
        }

        if batch.transactional
            && !self.has_ongoing_transaction(batch.producer_id, batch.producer_epoch)
        {
            // KAFKA-18042 (4.1, also on 3.9/4.0 maintenance): a stale epoch is rejected before
            // the verification guard, so a zombie sees the recoverable error.
            if current.is_some_and(|e| batch.producer_epoch < e.producer_epoch) {
                return Err(INVALID_PRODUCER_EPOCH);
            }
            if verification == Verification::Unverified {
                return Err(INVALID_TXN_STATE);
            }
        }

        let mut updated = current
            .cloned()
            .unwrap_or_else(|| ProducerStateEntry::empty(batch.producer_id));
        check_producer_epoch(&updated, batch.producer_epoch)?;
        // `ProducerAppendInfo.checkSequence`, first rule (KAFKA-18202): a TV2 verification
        // entry and no batch retained for the producer (none at all, or only a marker's epoch
        // left) mean this is the epoch's first write, which must start at 0, even where an
        // unknown producer could otherwise start anywhere.
        if verification == Verification::AddedTv2
            && updated.batches.is_empty()
            && batch.first_seq != 0
        {
            return Err(OUT_OF_ORDER_SEQUENCE_NUMBER);
        }
        check_sequence(&updated, batch, behaviour)?;

        updated.add_batch(
            batch.producer_epoch,
            BatchMetadata {
                last_seq: batch.last_seq,
                last_offset: batch.last_offset,
                offset_delta: (batch.last_offset - batch.first_offset) as i32,
                timestamp: batch.max_timestamp,
            },
            window,
        );
        match (updated.current_txn_first_offset, batch.transactional) {
            // A non-transactional write while this producer's transaction is open.
            (Some(_), false) => return Err(INVALID_TXN_STATE),
            (None, true) => updated.current_txn_first_offset = Some(batch.first_offset),
            _ => {}
        }
        Ok(ProducerCheck::Accept(updated))
    }

    /// Commits an entry returned by [`analyze`](Self::analyze) once its batch is in the log
    /// (Kafka `ProducerStateManager.update`).
    pub fn update(&mut self, entry: ProducerStateEntry) {
        if let Some(first_offset) = entry.current_txn_first_offset {
            let started = self
                .producers
                .get(&entry.producer_id)
                .is_none_or(|old| old.current_txn_first_offset.is_none());
            if started {
                self.ongoing_txns.insert(first_offset, entry.producer_id);
            }
        }
        self.producers.insert(entry.producer_id, entry);
    }

    /// Kafka `ProducerAppendInfo.appendEndTxnMarker`, the checks: a TV0/TV1 marker may not
    /// carry an epoch below the producer's (equal is allowed); a TV2 marker must carry one
    /// above it, since every TV2 end bumps the epoch (KIP-1228, KAFKA-19446, Kafka 4.2; before
    /// it the TV1 rule applied to every marker, which the coordinator's bumped epoch passes
    /// as well); and a marker from an older coordinator epoch is a zombie coordinator's. No
    /// sequence check, no verification.
    pub fn check_end_txn_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        version: TransactionVersion,
    ) -> Result<(), i16> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        let stale = match version {
            TransactionVersion::Tv1 => producer_epoch < entry.producer_epoch,
            TransactionVersion::Tv2 => producer_epoch <= entry.producer_epoch,
        };
        if stale {
            return Err(INVALID_PRODUCER_EPOCH);
        }
        if entry.coordinator_epoch > coordinator_epoch {
            return Err(TRANSACTION_COORDINATOR_FENCED);
        }
        Ok(())
    }

    /// Kafka `ProducerAppendInfo.appendEndTxnMarker`, the effect, once the marker passed
    /// [`check_end_txn_marker`](Self::check_end_txn_marker) and is in the log: the entry takes
    /// the marker's epoch (forgetting the old epoch's batches if it rose), coordinator epoch and
    /// time, and its open transaction closes. Returns the first offset of the transaction it
    /// closed, `None` if the producer had none open here (a marker for a partition that got
    /// no data still occupies an offset).
    pub fn complete_txn(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        timestamp: i64,
    ) -> Option<i64> {
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerStateEntry::empty(producer_id));
        entry.maybe_update_producer_epoch(producer_epoch);
        entry.coordinator_epoch = coordinator_epoch;
        entry.last_timestamp = timestamp;
        let first_offset = entry.current_txn_first_offset.take()?;
        self.ongoing_txns.remove(&first_offset);
        Some(first_offset)
    }

    /// Retention or DeleteRecords moved the log start offset. Since 2.5 (KAFKA-7190) Kafka
    /// keeps producer state across it; brokers before 2.5 dropped every producer whose last
    /// batch lay below the new log start (`ProducerStateManager.truncateHead`), which is what
    /// made their producers see UNKNOWN_PRODUCER_ID.
    pub fn on_log_start_offset_incremented(
        &mut self,
        log_start_offset: i64,
        behaviour: KafkaBehaviour,
    ) {
        if behaviour == KafkaBehaviour::Current {
            return;
        }
        let evicted: Vec<i64> = self
            .producers
            .values()
            .filter(|e| {
                e.batches
                    .back()
                    .is_none_or(|b| b.last_offset < log_start_offset)
            })
            .map(|e| e.producer_id)
            .collect();
        for producer_id in evicted {
            self.producers.remove(&producer_id);
            self.ongoing_txns.retain(|_, pid| *pid != producer_id);
        }
    }

    /// Kafka `ProducerStateManager.removeExpiredProducers`: an entry with no open transaction
    /// whose last timestamp is at least `expiration_ms` old goes. The timestamp is a record
    /// timestamp, so a producer writing old timestamps expires early, as in Kafka.
    pub fn remove_expired_producers(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some() || now_ms - e.last_timestamp < expiration_ms
        });
        before - self.producers.len()
    }

    /// Rebuilds the state as a broker does when it loads the snapshot written at the log end
    /// (clean shutdown, restart, or a follower becoming leader after one): Kafka's
    /// `ProducerStateManager.writeSnapshot` stores per producer only the last batch's
    /// `lastSequence`, `lastOffset`, `offsetDelta` and timestamp (with the epoch, coordinator
    /// epoch and open transaction), and `readSnapshot` rebuilds each entry with that one
    /// `BatchMetadata`. So the de-duplication window shrinks from five batches to one until
    /// new batches arrive. `loadFromSnapshot` skips entries that `isProducerExpired` at load
    /// time. Returns how many entries lost retained batches or were dropped.
    pub fn reload_from_snapshot(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let mut changed = 0;
        self.producers.retain(|_, e| {
            let expired =
                e.current_txn_first_offset.is_none() && now_ms - e.last_timestamp >= expiration_ms;
            if expired {
                changed += 1;
                return false;
            }
            if e.batches.len() > 1 {
                changed += 1;
                let last = e.batches.pop_back().expect("more than one");
                e.batches.clear();
                e.batches.push_back(last);
            }
            true
        });
        // `loadProducerEntry`: the open transactions come back from the entries.
        self.ongoing_txns = self
            .producers
            .values()
            .filter_map(|e| e.current_txn_first_offset.map(|o| (o, e.producer_id)))
            .collect();
        changed
    }

    /// Forgets one producer, as an unclean reload from an old snapshot would.
    pub fn remove(&mut self, producer_id: i64) -> bool {
        self.ongoing_txns.retain(|_, pid| *pid != producer_id);
        self.producers.remove(&producer_id).is_some()
    }
}

/// Kafka `ProducerAppendInfo.checkProducerEpoch` for data batches. Since 2.7 (KIP-588) the
/// produce path answers INVALID_PRODUCER_EPOCH, never PRODUCER_FENCED; before 2.7 the same
/// code 47 came from `ProducerFencedException`, so both behaviours agree.
fn check_producer_epoch(entry: &ProducerStateEntry, epoch: i16) -> Result<(), i16> {
    if epoch < entry.producer_epoch {
        return Err(INVALID_PRODUCER_EPOCH);
    }
    Ok(())
}

/// Kafka `ProducerAppendInfo.checkSequence` (CLIENT origin). The KIP-890 verification-entry
/// rules (TV2 sequence 0, lowest verified sequence) are not modelled yet.
fn check_sequence(
    entry: &ProducerStateEntry,
    batch: &IncomingBatch,
    behaviour: KafkaBehaviour,
) -> Result<(), i16> {
    let no_entry = entry.producer_epoch == -1;
    if batch.producer_epoch != entry.producer_epoch {
        // A new epoch (or an unknown producer) must start at 0, unless the partition has no
        // entry at all, in which case current Kafka accepts any sequence (state expired or
        // lost). Brokers 1.0-2.4 answered UNKNOWN_PRODUCER_ID there (KAFKA-5793, removed by
        // KIP-360 in 2.5).
        if batch.first_seq != 0 {
            if !no_entry {
                return Err(OUT_OF_ORDER_SEQUENCE_NUMBER);
            }
            if behaviour == KafkaBehaviour::Legacy {
                return Err(UNKNOWN_PRODUCER_ID);
            }
        }
        return Ok(());
    }
    let last_seq = entry.last_seq();
    if behaviour == KafkaBehaviour::Legacy {
        // 2.1-2.4 (KAFKA-7298): same epoch but no retained batch (only a marker left), so
        // the next sequence is unknown.
        if last_seq == -1 && batch.first_seq != 0 {
            return Err(UNKNOWN_PRODUCER_ID);
        }
        // 1.0-1.1 `ProducerAppendInfo.isDuplicate`: a retry older than every retained batch
        // was answered DUPLICATE_SEQUENCE_NUMBER; 2.0 (KAFKA-6683) made it out of order.
        let first_retained = entry.first_seq();
        if last_seq != -1
            && batch.last_seq != 0
            && first_retained != i32::MAX
            && batch.last_seq < first_retained
        {
            return Err(DUPLICATE_SEQUENCE_NUMBER);
        }
    }
    if !(no_entry || in_sequence(last_seq, batch.first_seq)) {
        return Err(OUT_OF_ORDER_SEQUENCE_NUMBER);
    }
    Ok(())
}

/// Kafka `ProducerAppendInfo.inSequence`: next = last + 1 computed in 64 bits, or the wrap
/// from `i32::MAX` to 0 (and only to 0).
fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    i64::from(next_seq) == i64::from(last_seq) + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TV1: TransactionVersion = TransactionVersion::Tv1;
    const TV2: TransactionVersion = TransactionVersion::Tv2;

    fn open_txn(manager: &mut ProducerStateManager, epoch: i16, first_offset: i64) {
        let batch = IncomingBatch {
            producer_id: 7,
            producer_epoch: epoch,
            first_seq: 0,
            last_seq: 0,
            first_offset,
            last_offset: first_offset,
            max_timestamp: 0,
            transactional: true,
        };
        match manager.analyze(&batch, KafkaBehaviour::Current, 5, Verification::Verified) {
            Ok(ProducerCheck::Accept(entry)) => manager.update(entry),
            other => panic!("{other:?}"),
        }
    }

    // ProducerAppendInfo `appendEndTxnMarker` (TV1): a marker below the producer's epoch is
    // INVALID_PRODUCER_EPOCH, the same epoch passes; a marker of an older coordinator epoch is
    // TRANSACTION_COORDINATOR_FENCED (UnifiedLogTest `testZombieCoordinatorFenced`).
    #[test]
    fn marker_with_an_older_producer_or_coordinator_epoch_is_refused() {
        let mut m = ProducerStateManager::default();
        open_txn(&mut m, 3, 10);
        assert_eq!(
            m.check_end_txn_marker(7, 2, 0, TV1),
            Err(INVALID_PRODUCER_EPOCH)
        );
        assert_eq!(m.check_end_txn_marker(7, 3, 0, TV1), Ok(()));
        assert_eq!(m.complete_txn(7, 3, 2, 0), Some(10));
        assert_eq!(m.first_unstable_offset(), None);
        assert_eq!(
            m.check_end_txn_marker(7, 3, 1, TV1),
            Err(TRANSACTION_COORDINATOR_FENCED)
        );
        assert_eq!(m.check_end_txn_marker(7, 3, 2, TV1), Ok(()));
        // A marker for an unknown producer passes and closes nothing.
        assert_eq!(m.check_end_txn_marker(8, 0, 0, TV1), Ok(()));
        assert_eq!(m.complete_txn(8, 0, 0, 0), None);
    }

    // ProducerAppendInfo `appendEndTxnMarker`: a marker with a higher epoch (a fence) forgets the
    // old epoch's batches, so the next data must start the new epoch at sequence 0.
    #[test]
    fn marker_with_a_higher_epoch_forgets_the_old_epochs_batches() {
        let mut m = ProducerStateManager::default();
        open_txn(&mut m, 3, 10);
        assert_eq!(m.complete_txn(7, 4, 0, 0), Some(10));
        let entry = m.entry(7).unwrap();
        assert_eq!((entry.producer_epoch, entry.last_seq()), (4, -1));
    }

    // ProducerAppendInfo `appendEndTxnMarker` with KIP-1228 (UnifiedLogTest
    // `testEndTxnWithFencedProducerEpoch`, `testTV2MarkerWithBumpedEpochSucceeds`): a TV2
    // marker at the transaction's own epoch is refused, one at the bumped epoch passes.
    #[test]
    fn tv2_marker_must_carry_an_epoch_above_the_producers() {
        let mut m = ProducerStateManager::default();
        open_txn(&mut m, 5, 10);
        assert_eq!(
            m.check_end_txn_marker(7, 5, 0, TV2),
            Err(INVALID_PRODUCER_EPOCH)
        );
        assert_eq!(m.check_end_txn_marker(7, 6, 0, TV2), Ok(()));
        assert_eq!(m.check_end_txn_marker(7, 5, 0, TV1), Ok(()));
    }

    // ProducerAppendInfo `checkSequence` (KAFKA-18202), UnifiedLogTest
    // `testNonZeroSequenceOnFirstAppendNonZeroEpoch`: with a TV2 verification entry, an
    // unknown producer may not start its epoch past 0, which TV1 allows.
    #[test]
    fn tv2_first_write_of_an_epoch_must_start_at_sequence_zero() {
        let m = ProducerStateManager::default();
        let batch = |first_seq| IncomingBatch {
            producer_id: 7,
            producer_epoch: 1,
            first_seq,
            last_seq: first_seq,
            first_offset: 0,
            last_offset: 0,
            max_timestamp: 0,
            transactional: true,
        };
        let analyze = |seq, v| m.analyze(&batch(seq), KafkaBehaviour::Current, 5, v).err();
        assert_eq!(
            analyze(3, Verification::AddedTv2),
            Some(OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(analyze(0, Verification::AddedTv2), None);
        assert_eq!(analyze(3, Verification::Verified), None);
    }
}
