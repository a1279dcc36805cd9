//! The simulator's judge: what the broker logs hold, what each send was told, and whether the
//! two agree with the promises of [`ProduceError`].
//!
//! Everything is checked incrementally, after every event, in time proportional to what the
//! event changed: new log batches are read once, each completion is judged once, and the
//! oldest unresolved send is the only one whose deadline needs looking at.

use std::collections::{HashMap, VecDeque};

use crate::engine::{Micros, RecordMetadata, TopicPartition};
use crate::error::ProduceError;
use crate::testkit::broker::StoredBatch;

/// A send's identity: its index in send order (one counter for the whole run).
pub type RecordId = u32;

/// What a send was told, as the checker classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pending,
    /// Success at this offset (-1 after a DUPLICATE_SEQUENCE_NUMBER answer).
    Acked(i64),
    /// A definite failure: never in the log.
    Failed,
    /// Outcome unknown: in the log at most once, in order.
    Unknown,
}

#[derive(Debug, Clone)]
struct RecordInfo {
    partition: u32,
    appended_at: Micros,
    verdict: Verdict,
    resolved_at: Option<Micros>,
    /// Offset in the log, -1 while it is not there.
    log_offset: i64,
}

#[derive(Debug, Default, Clone)]
struct PartitionCheck {
    /// Log end offset up to which the log was read.
    read_to: i64,
    /// Highest record id in the log so far (ids must increase along the log).
    last_id: Option<RecordId>,
    /// (producer id) → (epoch, last sequence) of the last batch read, per producer.
    producers: HashMap<i64, (i16, i32)>,
    /// DUPLICATE_SEQUENCE_NUMBER answers seen for this partition.
    duplicate_sequence_answers: u64,
}

/// Counters for the run report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckerStats {
    pub sent: u64,
    pub acked: u64,
    pub failed_definitely: u64,
    pub failed_unknown: u64,
    /// Outcome-unknown sends that are in the log.
    pub unknown_in_log: u64,
    pub log_records: u64,
    pub log_batches: u64,
}

pub struct Checker {
    names: Vec<TopicPartition>,
    records: Vec<RecordInfo>,
    partitions: Vec<PartitionCheck>,
    /// Unresolved sends in send order (resolved ones are popped lazily from the front).
    unresolved: VecDeque<RecordId>,
    /// A send must resolve by `appended_at + resolve_within`.
    resolve_within: Micros,
    stats: CheckerStats,
}

/// Reads the id stored in a record value (its first 8 bytes, little endian).
pub fn record_id_of(value: &[u8]) -> Option<RecordId> {
    let bytes: [u8; 8] = value.get(..8)?.try_into().ok()?;
    RecordId::try_from(u64::from_le_bytes(bytes)).ok()
}

impl Checker {
    /// `partitions`: every partition, by the index the other calls use.
    pub fn new(partitions: Vec<TopicPartition>, resolve_within: Micros) -> Self {
        Checker {
            records: Vec::new(),
            partitions: vec![PartitionCheck::default(); partitions.len()],
            names: partitions,
            unresolved: VecDeque::new(),
            resolve_within,
            stats: CheckerStats::default(),
        }
    }

    pub fn stats(&self) -> &CheckerStats {
        &self.stats
    }

    pub fn verdict(&self, id: RecordId) -> Verdict {
        self.records[id as usize].verdict
    }

    /// Offset of the record in the log, if it is there.
    pub fn log_offset(&self, id: RecordId) -> Option<i64> {
        let offset = self.records[id as usize].log_offset;
        (offset >= 0).then_some(offset)
    }

    pub fn resolved_at(&self, id: RecordId) -> Option<Micros> {
        self.records[id as usize].resolved_at
    }

    pub fn partition_of(&self, id: RecordId) -> usize {
        self.records[id as usize].partition as usize
    }

    pub fn record_count(&self) -> usize {
        self.records.len()
    }

    pub fn unresolved(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.verdict == Verdict::Pending)
            .count()
    }

    /// Registers a send; ids must be handed out in order.
    pub fn on_send(&mut self, id: RecordId, partition: usize, now: Micros) {
        assert_eq!(id as usize, self.records.len(), "record ids are dense");
        self.records.push(RecordInfo {
            partition: partition as u32,
            appended_at: now,
            verdict: Verdict::Pending,
            resolved_at: None,
            log_offset: -1,
        });
        self.unresolved.push_back(id);
        self.stats.sent += 1;
    }

    pub fn on_duplicate_sequence_answer(&mut self, partition: usize) {
        self.partitions[partition].duplicate_sequence_answers += 1;
    }

    /// Reads the batches appended to `partition` since the last call. `log` is the whole
    /// retained log (oldest first); `log_end` its end offset.
    pub fn observe_log(&mut self, partition: usize, log: &[StoredBatch], log_end: i64) {
        let read_to = self.partitions[partition].read_to;
        if log_end <= read_to {
            assert_eq!(log_end, read_to, "partition {partition}: the log shrank");
            return;
        }
        // The new batches are at the end; find the first one at or past `read_to`.
        let first_new = log.partition_point(|b| b.base_offset < read_to);
        for batch in &log[first_new..] {
            self.read_batch(partition, batch);
            self.partitions[partition].read_to = batch.last_offset + 1;
        }
        assert_eq!(
            self.partitions[partition].read_to, log_end,
            "partition {partition}: the log end does not follow its last batch"
        );
    }

    fn read_batch(&mut self, partition: usize, batch: &StoredBatch) {
        self.stats.log_batches += 1;
        let check = &mut self.partitions[partition];
        assert_eq!(
            batch.base_offset, check.read_to,
            "partition {partition}: the log has an offset gap"
        );
        if batch.control {
            // A transaction marker: no records of the producer's, no sequence (the
            // transactional view is judged by `txn_checker`).
            return;
        }
        if batch.producer_id >= 0 {
            if let Some(&(epoch, last_seq)) = check.producers.get(&batch.producer_id) {
                assert!(
                    batch.producer_epoch >= epoch,
                    "partition {partition}: producer {} went from epoch {epoch} to {} in the log",
                    batch.producer_id,
                    batch.producer_epoch
                );
                if batch.producer_epoch == epoch {
                    assert_eq!(
                        i64::from(batch.base_sequence),
                        (i64::from(last_seq) + 1) % (1i64 << 31),
                        "partition {partition}: producer {} epoch {epoch} has a sequence gap in the log",
                        batch.producer_id
                    );
                }
            }
            check.producers.insert(
                batch.producer_id,
                (batch.producer_epoch, batch.last_sequence),
            );
        }
        let mut offset = batch.base_offset;
        let mut count = 0;
        for_each_record_value(&batch.bytes, |offset_delta, value| {
            assert_eq!(
                batch.base_offset + i64::from(offset_delta),
                offset,
                "partition {partition}: record offsets are not consecutive"
            );
            let id = record_id_of(value.unwrap_or_default())
                .unwrap_or_else(|| panic!("partition {partition}: a record without an id"));
            self.read_record(partition, id, offset);
            offset += 1;
            count += 1;
        });
        assert_eq!(count, batch.record_count, "record count of a stored batch");
        assert_eq!(
            offset,
            batch.last_offset + 1,
            "last offset of a stored batch"
        );
    }

    fn read_record(&mut self, partition: usize, id: RecordId, offset: i64) {
        self.stats.log_records += 1;
        let record = self
            .records
            .get_mut(id as usize)
            .unwrap_or_else(|| panic!("partition {partition}: record {id} was never sent"));
        assert_eq!(
            record.partition as usize, partition,
            "record {id} was sent to partition {} but is in partition {partition}",
            record.partition
        );
        assert!(
            record.log_offset < 0,
            "partition {partition}: DUPLICATE: record {id} is in the log at offsets {} and {offset}",
            record.log_offset
        );
        let check = &mut self.partitions[partition];
        if let Some(last) = check.last_id {
            assert!(
                id > last,
                "partition {partition}: REORDER: record {id} is in the log at offset {offset} after record {last}, which was sent later"
            );
        }
        check.last_id = Some(id);
        record.log_offset = offset;
        match record.verdict {
            Verdict::Pending => {}
            Verdict::Unknown => self.stats.unknown_in_log += 1,
            Verdict::Failed => panic!(
                "partition {partition}: record {id} failed definitely but is in the log at offset {offset}"
            ),
            Verdict::Acked(acked) => panic!(
                "partition {partition}: record {id} was acknowledged (offset {acked}) before it reached the log at offset {offset}"
            ),
        }
    }

    /// Judges one completion. The log must already be read up to date.
    pub fn on_result(
        &mut self,
        id: RecordId,
        result: &Result<RecordMetadata, ProduceError>,
        now: Micros,
    ) {
        let record = &mut self.records[id as usize];
        assert_eq!(
            record.verdict,
            Verdict::Pending,
            "record {id} completed twice (now {result:?})"
        );
        record.resolved_at = Some(now);
        let partition = record.partition as usize;
        let in_log = (record.log_offset >= 0).then_some(record.log_offset);
        record.verdict = match result {
            Ok(meta) => {
                let tp = &self.names[partition];
                assert!(
                    *meta.topic == *tp.topic && meta.partition == tp.partition,
                    "record {id} sent to {tp}: acknowledged for {}-{}",
                    meta.topic,
                    meta.partition
                );
                let Some(at) = in_log else {
                    panic!(
                        "partition {partition}: record {id} acknowledged at offset {} but it is not in the log",
                        meta.offset
                    );
                };
                if meta.offset == -1 {
                    assert!(
                        self.partitions[partition].duplicate_sequence_answers > 0,
                        "partition {partition}: record {id} acknowledged with offset -1 without a DUPLICATE_SEQUENCE_NUMBER answer"
                    );
                } else {
                    assert_eq!(
                        meta.offset, at,
                        "partition {partition}: record {id} acknowledged at offset {} but it is at offset {at}",
                        meta.offset
                    );
                }
                self.stats.acked += 1;
                Verdict::Acked(meta.offset)
            }
            Err(err) if err.is_outcome_unknown() => {
                self.stats.failed_unknown += 1;
                if in_log.is_some() {
                    self.stats.unknown_in_log += 1;
                }
                Verdict::Unknown
            }
            Err(err) => {
                assert!(
                    in_log.is_none(),
                    "partition {partition}: record {id} failed definitely ({err}) but is in the log at offset {}",
                    in_log.unwrap_or(-1)
                );
                self.stats.failed_definitely += 1;
                Verdict::Failed
            }
        };
    }

    /// Every send resolves within `resolve_within` of its append.
    pub fn check_deadlines(&mut self, now: Micros) {
        while let Some(&id) = self.unresolved.front() {
            let record = &self.records[id as usize];
            if record.verdict != Verdict::Pending {
                self.unresolved.pop_front();
                continue;
            }
            assert!(
                now <= record.appended_at + self.resolve_within,
                "record {id} (partition {}) sent at {} us is still unresolved at {now} us (limit {} us)",
                record.partition,
                record.appended_at,
                self.resolve_within
            );
            break;
        }
    }

    /// Whether every unresolved send of `partition` is still out of the log and newer than
    /// the log's last record: then the producer can only ever append them after everything
    /// the log holds, even if the broker stops checking its sequences.
    pub fn unresolved_all_after_log(&self, partition: usize) -> bool {
        let last = self.partitions[partition].last_id;
        self.unresolved.iter().all(|&id| {
            let r = &self.records[id as usize];
            r.verdict != Verdict::Pending
                || r.partition as usize != partition
                || (r.log_offset < 0 && last.is_none_or(|last| id > last))
        })
    }

    /// The broker forgot the producers of `partition` (expiry): the next batch of each may
    /// start at any sequence (Kafka 2.5+ accepts any sequence from a producer it has no entry
    /// for), so the sequence-gap rule restarts. Order and uniqueness of records still hold.
    pub fn on_producer_state_lost(&mut self, partition: usize) {
        self.partitions[partition].producers.clear();
    }

    /// End of run: nothing is pending.
    pub fn check_all_resolved(&self) {
        if let Some((id, r)) = self
            .records
            .iter()
            .enumerate()
            .find(|(_, r)| r.verdict == Verdict::Pending)
        {
            panic!(
                "record {id} (partition {}, sent at {} us) never resolved",
                r.partition, r.appended_at
            );
        }
    }
}

/// Calls `f(offset_delta, value)` for every record of a stored v2 batch, reading the record
/// framing independently of the producer's encoder (a compressed batch is decompressed first).
pub fn for_each_record_value(batch: &[u8], mut f: impl FnMut(i32, Option<&[u8]>)) {
    const RECORDS_AT: usize = 61;
    let count = i32::from_be_bytes(batch[57..61].try_into().expect("4 bytes"));
    let codec = (i16::from_be_bytes(batch[21..23].try_into().expect("2 bytes")) & 0x07) as u8;
    let decompressed;
    let mut rest = if codec == crate::protocol::compression::CODEC_NONE {
        &batch[RECORDS_AT..]
    } else {
        decompressed = crate::protocol::compression::decompress(
            codec,
            &batch[RECORDS_AT..],
            crate::protocol::record_batch::DEFAULT_MAX_DECOMPRESSED_BYTES,
        )
        .expect("a stored batch's records decompress");
        &decompressed[..]
    };
    for _ in 0..count {
        let length = read_varint(&mut rest) as usize;
        let (mut body, after) = rest.split_at(length);
        rest = after;
        body = &body[1..]; // attributes
        read_varint(&mut body); // timestamp delta
        let offset_delta = read_varint(&mut body) as i32;
        let key_length = read_varint(&mut body);
        if key_length > 0 {
            body = &body[key_length as usize..];
        }
        let value_length = read_varint(&mut body);
        let value = (value_length >= 0).then(|| &body[..value_length as usize]);
        f(offset_delta, value);
    }
    assert!(rest.is_empty(), "trailing bytes after the last record");
}

/// A zigzag varint (up to 64 bits).
fn read_varint(buf: &mut &[u8]) -> i64 {
    let mut raw = 0u64;
    let mut shift = 0;
    loop {
        let byte = buf[0];
        *buf = &buf[1..];
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        assert!(shift < 70, "varint too long");
    }
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::testkit::batch::TestBatch;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    /// A stored batch at `base_offset` holding the records `ids` (sequence = offset).
    fn stored(base_offset: i64, epoch: i16, ids: &[RecordId]) -> StoredBatch {
        let mut batch = TestBatch::idempotent(1, epoch, base_offset as i32, 0);
        batch.records = ids
            .iter()
            .map(|&id| (None, Some(u64::from(id).to_le_bytes().to_vec())))
            .collect();
        let count = ids.len() as i32;
        StoredBatch {
            base_offset,
            last_offset: base_offset + i64::from(count) - 1,
            producer_id: 1,
            producer_epoch: epoch,
            base_sequence: base_offset as i32,
            last_sequence: base_offset as i32 + count - 1,
            record_count: count,
            max_timestamp: 0,
            transactional: false,
            control: false,
            bytes: Bytes::from(batch.encode()),
        }
    }

    fn checker_with_sends(n: RecordId) -> Checker {
        let mut checker = Checker::new(vec![tp(0), tp(1)], 1_000);
        for id in 0..n {
            checker.on_send(id, 0, 0);
        }
        checker
    }

    fn ack(offset: i64) -> Result<RecordMetadata, ProduceError> {
        Ok(RecordMetadata {
            topic: Arc::from("t"),
            partition: 0,
            offset,
            timestamp: 0,
        })
    }

    fn timed_out() -> Result<RecordMetadata, ProduceError> {
        Err(ProduceError::TimedOut {
            topic: Arc::from("t"),
            partition: 0,
            timeout: std::time::Duration::from_secs(1),
        })
    }

    fn unknown() -> Result<RecordMetadata, ProduceError> {
        Err(ProduceError::OutcomeUnknown {
            topic: Arc::from("t"),
            partition: 0,
            reason: "test".to_string(),
        })
    }

    #[test]
    fn a_clean_log_and_matching_acks_pass() {
        let mut c = checker_with_sends(3);
        let log = vec![stored(0, 0, &[0, 1]), stored(2, 0, &[2])];
        c.observe_log(0, &log, 3);
        for id in 0..3 {
            c.on_result(id, &ack(i64::from(id)), 10);
        }
        c.check_deadlines(10);
        c.check_all_resolved();
        assert_eq!(c.stats().log_records, 3);
    }

    #[test]
    #[should_panic(expected = "DUPLICATE")]
    fn a_record_twice_in_the_log_is_a_duplicate() {
        let mut c = checker_with_sends(2);
        let log = vec![stored(0, 0, &[0, 1]), stored(2, 1, &[1])];
        c.observe_log(0, &log, 3);
    }

    #[test]
    #[should_panic(expected = "REORDER")]
    fn a_record_after_a_later_one_is_a_reorder() {
        let mut c = checker_with_sends(2);
        let log = vec![stored(0, 0, &[1]), stored(1, 1, &[0])];
        c.observe_log(0, &log, 2);
    }

    #[test]
    #[should_panic(expected = "failed definitely")]
    fn a_definitely_failed_record_may_never_reach_the_log() {
        let mut c = checker_with_sends(1);
        c.on_result(0, &timed_out(), 5);
        c.observe_log(0, &[stored(0, 0, &[0])], 1);
    }

    #[test]
    #[should_panic(expected = "acknowledged at offset 3 but it is at offset 0")]
    fn an_ack_must_name_the_record_offset() {
        let mut c = checker_with_sends(1);
        c.observe_log(0, &[stored(0, 0, &[0])], 1);
        c.on_result(0, &ack(3), 5);
    }

    #[test]
    #[should_panic(expected = "without a DUPLICATE_SEQUENCE_NUMBER answer")]
    fn offset_minus_1_needs_a_duplicate_sequence_answer() {
        let mut c = checker_with_sends(1);
        c.observe_log(0, &[stored(0, 0, &[0])], 1);
        c.on_result(0, &ack(-1), 5);
    }

    #[test]
    fn offset_minus_1_after_a_duplicate_sequence_answer_passes() {
        let mut c = checker_with_sends(1);
        c.observe_log(0, &[stored(0, 0, &[0])], 1);
        c.on_duplicate_sequence_answer(0);
        c.on_result(0, &ack(-1), 5);
    }

    #[test]
    #[should_panic(expected = "not in the log")]
    fn an_ack_for_a_record_not_in_the_log_fails() {
        let mut c = checker_with_sends(1);
        c.on_result(0, &ack(0), 5);
    }

    #[test]
    fn an_unknown_outcome_may_land_later_once_and_in_order() {
        let mut c = checker_with_sends(2);
        c.on_result(0, &unknown(), 5);
        c.observe_log(0, &[stored(0, 0, &[0]), stored(1, 0, &[1])], 2);
        c.on_result(1, &ack(1), 6);
        assert_eq!(c.stats().unknown_in_log, 1);
    }

    #[test]
    #[should_panic(expected = "still unresolved")]
    fn a_send_past_its_deadline_fails_the_run() {
        let mut c = checker_with_sends(1);
        c.check_deadlines(1_001);
    }

    #[test]
    #[should_panic(expected = "went from epoch 1 to 0")]
    fn epochs_never_go_down_in_the_log() {
        let mut c = checker_with_sends(2);
        c.observe_log(0, &[stored(0, 1, &[0]), stored(1, 0, &[1])], 2);
    }
}
