//! One partition: its leader, its log of stored batches and its producer state.
//!
//! The model has one replica per partition, so an append is committed at once: the high
//! watermark is the log end offset and acks=all needs no waiting (`UnifiedLog.append` followed
//! by `updateHighWatermarkWithLogEndOffset`, with an ISR of one).

use bytes::Bytes;

use super::error_codes::*;
use super::producer_state::{IncomingBatch, ProducerCheck, ProducerStateManager, Verification};
use super::transaction_version::TransactionVersion;
use super::{BrokerRules, ProducePartitionResult};
use crate::testkit::batch::{self, BatchHeader};

/// A batch as the log holds it: the client's bytes with the assigned base offset and the
/// leader epoch written in, plus the header fields checkers want.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBatch {
    /// The offset assigned to its first record.
    pub base_offset: i64,
    /// The offset of its last record.
    pub last_offset: i64,
    /// The producer id it was written with.
    pub producer_id: i64,
    /// The producer epoch it was written with.
    pub producer_epoch: i16,
    /// Its first record's sequence number.
    pub base_sequence: i32,
    /// Its last record's sequence number.
    pub last_sequence: i32,
    /// How many records it holds.
    pub record_count: i32,
    /// Its greatest record timestamp (the append time under LogAppendTime).
    pub max_timestamp: i64,
    /// It belongs to a transaction.
    pub transactional: bool,
    /// It is a transaction marker.
    pub control: bool,
    /// The whole batch as stored (decode its records with
    /// [`decode_records`](crate::testkit::batch::decode_records)).
    pub bytes: Bytes,
}

/// One aborted transaction of a partition (Kafka `AbortedTxn`, the transaction index entry):
/// its data lies in `first_offset..last_offset`, `last_offset` being the ABORT marker's offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The transaction's producer id.
    pub producer_id: i64,
    /// The transaction's first offset in the partition.
    pub first_offset: i64,
    /// The ABORT marker's offset.
    pub last_offset: i64,
    /// The last stable offset once the marker was written.
    pub last_stable_offset: i64,
}

#[derive(Debug)]
pub struct Partition {
    pub(super) leader: i32,
    pub(super) leader_epoch: i32,
    /// The log, with `head` batches at the front already removed by retention: they are
    /// dropped lazily so trimming one batch per append does not shift the whole vector.
    batches: Vec<StoredBatch>,
    head: usize,
    pub(super) log_start_offset: i64,
    pub(super) log_end_offset: i64,
    pub(super) log_bytes: usize,
    pub(super) producers: ProducerStateManager,
    /// Aborted transactions, by increasing marker offset (the transaction index); entries
    /// wholly below the log start are dropped with their batches.
    aborted_txns: Vec<AbortedTxn>,
}

impl Partition {
    pub(super) fn new(leader: i32) -> Self {
        Partition {
            leader,
            leader_epoch: 0,
            batches: Vec::new(),
            head: 0,
            log_start_offset: 0,
            log_end_offset: 0,
            log_bytes: 0,
            producers: ProducerStateManager::default(),
            aborted_txns: Vec::new(),
        }
    }

    /// The batches in the log, oldest first.
    pub(super) fn log(&self) -> &[StoredBatch] {
        &self.batches[self.head..]
    }

    /// One replica: everything appended is replicated, so HW = LEO.
    pub(super) fn high_watermark(&self) -> i64 {
        self.log_end_offset
    }

    /// Kafka `UnifiedLog.lastStableOffset`: the first offset of the oldest open transaction
    /// (clamped to the log start), else the high watermark.
    pub(super) fn last_stable_offset(&self) -> i64 {
        match self.producers.first_unstable_offset() {
            Some(first) => first.max(self.log_start_offset).min(self.high_watermark()),
            None => self.high_watermark(),
        }
    }

    /// The log-append part of a produce (`UnifiedLog.analyzeAndValidateRecords`, `LogValidator`,
    /// then `analyzeAndValidateProducerState`), for a batch that already passed the request-level
    /// checks and whose header parsed. `verification`: see `ProducerStateManager::analyze`.
    pub(super) fn append(
        &mut self,
        records: &[u8],
        header: &BatchHeader,
        rules: &BrokerRules,
        verification: Verification,
        now_ms: i64,
    ) -> ProducePartitionResult {
        if let Err(code) = self.validate_batch(records, header, rules, now_ms) {
            return self.failure(code);
        }
        let first_offset = self.log_end_offset;
        let last_offset = first_offset + i64::from(header.last_offset_delta);
        let mut check = None;
        if header.has_producer_id() {
            let incoming = IncomingBatch {
                producer_id: header.producer_id,
                producer_epoch: header.producer_epoch,
                first_seq: header.base_sequence,
                last_seq: header.last_sequence(),
                first_offset,
                last_offset,
                max_timestamp: header.max_timestamp,
                transactional: header.is_transactional(),
            };
            match self.producers.analyze(
                &incoming,
                rules.kafka_version,
                rules.producer_state_window,
                verification,
            ) {
                // A duplicate answers with the original batch: its base offset, its cached
                // timestamp as LogAppendTime even on a CreateTime topic, and the current log
                // start (`UnifiedLog.append`, duplicate branch).
                Ok(ProducerCheck::Duplicate(original)) => {
                    return ProducePartitionResult {
                        error_code: NONE,
                        base_offset: original.first_offset(),
                        log_append_time_ms: original.timestamp,
                        log_start_offset: self.log_start_offset,
                        error_message: None,
                        current_leader: None,
                        appended: false,
                    }
                }
                Ok(ProducerCheck::Accept(entry)) => check = Some(entry),
                Err(code) => return self.failure(code),
            }
        }

        let mut stored = records[..header.total_len()].to_vec();
        batch::set_base_offset(&mut stored, first_offset);
        batch::set_partition_leader_epoch(&mut stored, self.leader_epoch);
        self.log_bytes += stored.len();
        self.batches.push(StoredBatch {
            base_offset: first_offset,
            last_offset,
            producer_id: header.producer_id,
            producer_epoch: header.producer_epoch,
            base_sequence: header.base_sequence,
            last_sequence: header.last_sequence(),
            record_count: header.record_count,
            max_timestamp: header.max_timestamp,
            transactional: header.is_transactional(),
            control: header.is_control(),
            bytes: Bytes::from(stored),
        });
        self.log_end_offset = last_offset + 1;
        if let Some(entry) = check {
            self.producers.update(entry);
        }
        let result = ProducePartitionResult {
            error_code: NONE,
            base_offset: first_offset,
            // CreateTime topics answer -1 (LogAppendTime topics are not modelled).
            log_append_time_ms: -1,
            log_start_offset: self.log_start_offset,
            error_message: None,
            current_leader: None,
            appended: true,
        };
        if let Some(limit) = rules.retention_bytes_per_partition {
            self.enforce_retention_bytes(limit, rules);
        }
        result
    }

    /// Appends a transaction marker written by the coordinator (origin COORDINATOR, so none of
    /// the client checks apply), after `ProducerAppendInfo.appendEndTxnMarker`'s epoch checks.
    /// An ABORT that closes an open transaction adds an index entry (`UnifiedLog
    /// .updateProducers`, `TransactionIndex.append`). Returns the marker's offset.
    pub(super) fn append_end_txn_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        version: TransactionVersion,
        now_ms: i64,
    ) -> Result<i64, i16> {
        self.producers.check_end_txn_marker(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            version,
        )?;
        let offset = self.log_end_offset;
        let mut stored = batch::encode_end_txn_marker(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            now_ms,
        );
        batch::set_base_offset(&mut stored, offset);
        batch::set_partition_leader_epoch(&mut stored, self.leader_epoch);
        self.log_bytes += stored.len();
        self.batches.push(StoredBatch {
            base_offset: offset,
            last_offset: offset,
            producer_id,
            producer_epoch,
            base_sequence: -1,
            last_sequence: -1,
            record_count: 1,
            max_timestamp: now_ms,
            transactional: true,
            control: true,
            bytes: Bytes::from(stored),
        });
        self.log_end_offset = offset + 1;
        let closed =
            self.producers
                .complete_txn(producer_id, producer_epoch, coordinator_epoch, now_ms);
        if let (Some(first_offset), false) = (closed, commit) {
            self.aborted_txns.push(AbortedTxn {
                producer_id,
                first_offset,
                last_offset: offset,
                last_stable_offset: self.last_stable_offset(),
            });
        }
        Ok(offset)
    }

    /// Kafka `TransactionIndex.collectAbortedTxns`: every aborted transaction whose range
    /// `[first_offset, last_offset]` overlaps `[fetch_offset, upper_bound)`, as
    /// (producer id, first offset).
    pub(super) fn aborted_transactions(
        &self,
        fetch_offset: i64,
        upper_bound: i64,
    ) -> Vec<(i64, i64)> {
        self.aborted_txns
            .iter()
            .filter(|t| t.last_offset >= fetch_offset && t.first_offset < upper_bound)
            .map(|t| (t.producer_id, t.first_offset))
            .collect()
    }

    /// The aborted-transaction index, oldest first.
    pub(super) fn aborted_txns(&self) -> &[AbortedTxn] {
        &self.aborted_txns
    }

    /// Batch checks of `UnifiedLog.analyzeAndValidateRecords` and `LogValidator.validateBatch`,
    /// in Kafka's order. Works on the header only: no per-record work on the produce path, so
    /// per-record checks (compacted keys, each record's timestamp) are approximated from the
    /// header's timestamps.
    fn validate_batch(
        &self,
        records: &[u8],
        header: &BatchHeader,
        rules: &BrokerRules,
        now_ms: i64,
    ) -> Result<(), i16> {
        if header.base_offset != 0 {
            return Err(INVALID_RECORD);
        }
        if header.total_len() > rules.max_message_bytes {
            return Err(MESSAGE_TOO_LARGE);
        }
        if !batch::crc_matches(records, header) {
            return Err(CORRUPT_MESSAGE);
        }
        let count_from_offsets = i64::from(header.last_offset_delta) + 1;
        if count_from_offsets <= 0 || i64::from(header.record_count) != count_from_offsets {
            return Err(INVALID_RECORD);
        }
        if header.is_control() {
            // "Clients are not allowed to write control records".
            return Err(INVALID_RECORD);
        }
        if header.has_producer_id() && header.base_sequence < 0 {
            return Err(INVALID_RECORD);
        }
        // `LogValidator` then iterates the records (uncompressed path); a count that is not the
        // number of records fails there.
        if !batch::records_match_count(records, header) {
            return Err(INVALID_RECORD);
        }
        // A client-set LogAppendTime batch on a CreateTime topic, or a timestamp past
        // message.timestamp.after.max.ms (-1 means "no timestamp" and is exempt).
        if header.is_log_append_time() {
            return Err(INVALID_TIMESTAMP);
        }
        if let Some(after_max_ms) = rules.message_timestamp_after_max_ms {
            if header.max_timestamp != -1
                && header.max_timestamp > now_ms.saturating_add(after_max_ms)
            {
                return Err(INVALID_TIMESTAMP);
            }
        }
        Ok(())
    }

    /// An error raised inside the log append; which of them carry the log start offset follows
    /// `ReplicaManager.appendToLocalLog`: size and CRC failures do not, producer-state and
    /// record-validation failures do.
    fn failure(&self, code: i16) -> ProducePartitionResult {
        let log_start_offset = match code {
            MESSAGE_TOO_LARGE | CORRUPT_MESSAGE => -1,
            _ => self.log_start_offset,
        };
        ProducePartitionResult {
            log_start_offset,
            ..ProducePartitionResult::error(code)
        }
    }

    fn enforce_retention_bytes(&mut self, limit: usize, rules: &BrokerRules) {
        let log = self.log();
        let mut drop = 0;
        let mut bytes = self.log_bytes;
        while bytes > limit && drop + 1 < log.len() {
            bytes -= log[drop].bytes.len();
            drop += 1;
        }
        if drop > 0 {
            let new_start = log[drop].base_offset;
            self.truncate_log_start(new_start, rules);
        }
    }

    /// Moves the log start offset forward (retention, DeleteRecords): drops every batch
    /// entirely below it. The offset may fall inside a batch, as with DeleteRecords.
    pub(super) fn truncate_log_start(&mut self, new_log_start_offset: i64, rules: &BrokerRules) {
        let new_start = new_log_start_offset.min(self.high_watermark());
        if new_start <= self.log_start_offset {
            return;
        }
        let removed = self.batch_index_for(new_start);
        for batch in &mut self.batches[self.head..self.head + removed] {
            self.log_bytes -= batch.bytes.len();
            batch.bytes = Bytes::new();
        }
        self.head += removed;
        if self.head * 2 > self.batches.len() {
            self.batches.drain(..self.head);
            self.head = 0;
        }
        self.log_start_offset = new_start;
        self.aborted_txns.retain(|t| t.last_offset >= new_start);
        self.producers
            .on_log_start_offset_incremented(new_start, rules.kafka_version);
    }

    /// Index in [`log`](Self::log) of the batch holding `offset`, or of the first batch
    /// after it.
    pub(super) fn batch_index_for(&self, offset: i64) -> usize {
        self.log().partition_point(|b| b.last_offset < offset)
    }
}
