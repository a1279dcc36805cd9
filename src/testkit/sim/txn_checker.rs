//! The transactional judge: what a `read_committed` consumer would see in each partition, and
//! whether it agrees with what the client reported for each transaction.
//!
//! The view is computed from the broker's raw log independently of the broker's own LSO
//! bookkeeping: per producer id, transactional data batches are held until a control batch
//! (a marker) ends them: COMMIT makes them visible, ABORT drops them; data still held at the
//! end is beyond the last stable offset and invisible (Kafka's `LogSegment` / `Fetcher` rules
//! for transaction markers and the last stable offset). The rules checked, per run:
//! - a committed transaction's records are all in the view, exactly once, in send order, and
//!   each was acknowledged;
//! - an aborted transaction's records are never in the view;
//! - a transaction whose outcome the client could not know (fenced, fatal) is atomic: all of
//!   its records are in the view, or none;
//! - every record in the view belongs to a committed or unknown transaction;
//! - the broker's LSO is never above the first offset still held open;
//! - no record of an ended transaction lands after its marker (`check_no_write_after_marker`):
//!   a transactional data batch of a producer id never follows, on a partition, a marker of
//!   that producer id at a higher epoch. Under transactions V2 (KIP-890 part 2) every end
//!   writes its markers at the bumped epoch, so the ended transaction's late (zombie) write is
//!   exactly such a batch; under TV1 only fence and timeout markers carry a higher epoch,
//!   and the rule still holds for them;
//! - each group's committed offset of a partition is the one sent in the last committed
//!   transaction that sent one for it (or none), or, after a transaction of unknown outcome
//!   that sent one, that transaction's offset: offsets commit and abort with their records
//!   (`check_committed_offsets`).

use std::collections::{BTreeMap, HashMap};

use crate::engine::TopicPartition;
use crate::testkit::broker::StoredBatch;

use super::checker::{for_each_record_value, record_id_of, Checker, RecordId, Verdict};

/// What the client reported for a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnVerdict {
    /// Still running (no commit or abort result yet).
    Open,
    Committed,
    Aborted,
    /// The producer went fatal (fenced, ...) before the outcome was known.
    Unknown,
}

/// One transaction as the application ran it.
#[derive(Debug, Clone)]
pub struct SimTxn {
    pub records: Vec<RecordId>,
    /// (group, partition, offset) sent with `send_offsets_to_transaction`, in call order.
    pub offsets: Vec<(String, TopicPartition, i64)>,
    pub verdict: TxnVerdict,
}

/// Counters for the run report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnStats {
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    pub visible_records: u64,
    pub aborted_records_in_log: u64,
    pub markers: u64,
    /// Group partitions whose committed offset was checked at the end of the run.
    pub offsets_checked: u64,
}

/// Kafka's control record key: version (i16), type (i16: 0 ABORT, 1 COMMIT).
pub fn control_type(batch: &StoredBatch) -> Option<i16> {
    const RECORDS_AT: usize = 61;
    let bytes = &batch.bytes[..];
    let mut rest = bytes.get(RECORDS_AT..)?;
    let _length = read_varint(&mut rest)?;
    rest = rest.get(1..)?; // attributes
    read_varint(&mut rest)?; // timestamp delta
    read_varint(&mut rest)?; // offset delta
    let key_length = read_varint(&mut rest)?;
    if key_length < 4 {
        return None;
    }
    let key = rest.get(..key_length as usize)?;
    Some(i16::from_be_bytes([key[2], key[3]]))
}

fn read_varint(buf: &mut &[u8]) -> Option<i64> {
    let mut raw = 0u64;
    let mut shift = 0;
    loop {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift >= 70 {
            return None;
        }
    }
    Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// The read_committed view of one partition: visible record ids in log order, plus the
/// first offset still held by an open transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionView {
    pub visible: Vec<RecordId>,
    pub aborted: Vec<RecordId>,
    pub first_open_offset: Option<i64>,
    pub markers: u64,
}

pub fn read_committed(log: &[StoredBatch]) -> PartitionView {
    let mut view = PartitionView::default();
    // producer id → (first offset, records) of its open transaction on this partition.
    let mut open: HashMap<i64, (i64, Vec<RecordId>)> = HashMap::new();
    for batch in log {
        if batch.control {
            view.markers += 1;
            let held = open.remove(&batch.producer_id);
            match (control_type(batch), held) {
                (Some(1), Some((_, records))) => view.visible.extend(records),
                (Some(0), Some((_, records))) => view.aborted.extend(records),
                (Some(0 | 1), None) => {}
                (other, _) => panic!(
                    "a control batch at offset {} has an unknown type {other:?}",
                    batch.base_offset
                ),
            }
            continue;
        }
        let mut ids = Vec::new();
        for_each_record_value(&batch.bytes, |_, value| {
            ids.push(
                value
                    .and_then(record_id_of)
                    .expect("a record without an id"),
            );
        });
        if batch.transactional {
            open.entry(batch.producer_id)
                .or_insert_with(|| (batch.base_offset, Vec::new()))
                .1
                .extend(ids);
        } else {
            view.visible.extend(ids);
        }
    }
    view.first_open_offset = open.values().map(|(first, _)| *first).min();
    view
}

/// Checks every rule of the module docs. `logs` are the partitions' whole logs with each one's
/// LSO, in the checker's partition order.
pub fn check_transactions(
    partitions: &[TopicPartition],
    logs: &[(&[StoredBatch], i64)],
    txns: &[SimTxn],
    checker: &Checker,
) -> TxnStats {
    let mut stats = TxnStats::default();
    let mut txn_of: HashMap<RecordId, usize> = HashMap::new();
    for (t, txn) in txns.iter().enumerate() {
        for &id in &txn.records {
            txn_of.insert(id, t);
        }
    }
    let mut visible: HashMap<RecordId, usize> = HashMap::new();
    for (p, (log, lso)) in logs.iter().enumerate() {
        let tp = &partitions[p];
        check_no_write_after_marker(tp, log);
        let view = read_committed(log);
        stats.markers += view.markers;
        stats.aborted_records_in_log += view.aborted.len() as u64;
        if let Some(first_open) = view.first_open_offset {
            assert!(
                *lso <= first_open,
                "{tp}: LSO {lso} is above the first offset {first_open} of an open transaction"
            );
        }
        let mut last: Option<RecordId> = None;
        for &id in &view.visible {
            assert!(
                visible.insert(id, p).is_none(),
                "{tp}: record {id} is visible twice under read_committed"
            );
            if let Some(last) = last {
                assert!(
                    id > last,
                    "{tp}: read_committed shows record {id} after record {last}, sent later"
                );
            }
            last = Some(id);
            let t = *txn_of
                .get(&id)
                .unwrap_or_else(|| panic!("{tp}: visible record {id} belongs to no transaction"));
            assert!(
                matches!(txns[t].verdict, TxnVerdict::Committed | TxnVerdict::Unknown),
                "{tp}: record {id} of transaction {t} ({:?}) is visible under read_committed",
                txns[t].verdict
            );
        }
        stats.visible_records += view.visible.len() as u64;
    }
    for (t, txn) in txns.iter().enumerate() {
        let shown = txn
            .records
            .iter()
            .filter(|id| visible.contains_key(id))
            .count();
        match txn.verdict {
            TxnVerdict::Committed => {
                stats.committed += 1;
                for &id in &txn.records {
                    assert!(
                        visible.contains_key(&id),
                        "record {id} of committed transaction {t} is not visible under read_committed"
                    );
                    assert!(
                        matches!(checker.verdict(id), Verdict::Acked(_)),
                        "record {id} of committed transaction {t} was not acknowledged: {:?}",
                        checker.verdict(id)
                    );
                }
            }
            TxnVerdict::Aborted => {
                stats.aborted += 1;
                assert_eq!(
                    shown, 0,
                    "aborted transaction {t} has {shown} records visible under read_committed"
                );
            }
            TxnVerdict::Unknown | TxnVerdict::Open => {
                stats.unknown += 1;
                assert!(
                    shown == 0 || shown == txn.records.len(),
                    "transaction {t} of unknown outcome is partly visible: {shown} of {} records",
                    txn.records.len()
                );
            }
        }
    }
    stats
}

/// No record of an ended transaction after its marker: every transactional data batch's epoch
/// is at least the epoch of every earlier marker of its producer id on the partition. A
/// batch below it belongs to a transaction that marker ended (TV2: the marker's epoch is the
/// transaction's plus one) or to a fenced one, and would sit after the marker with no marker
/// of its own to end it: a hanging transaction holding the last stable offset.
pub fn check_no_write_after_marker(tp: &TopicPartition, log: &[StoredBatch]) {
    // Producer id → (epoch, offset) of its latest marker so far.
    let mut ended: HashMap<i64, (i16, i64)> = HashMap::new();
    for batch in log {
        if batch.control {
            ended.insert(batch.producer_id, (batch.producer_epoch, batch.base_offset));
            continue;
        }
        if !batch.transactional {
            continue;
        }
        if let Some(&(marker_epoch, marker_offset)) = ended.get(&batch.producer_id) {
            assert!(
                batch.producer_epoch >= marker_epoch,
                "{tp}: a transactional write of producer {} at epoch {} landed at offset {} after                  the marker at offset {marker_offset} that ended its transaction (epoch                  {marker_epoch})",
                batch.producer_id,
                batch.producer_epoch,
                batch.base_offset
            );
        }
    }
}

/// Checks each group's committed offsets against the transactions that sent them, in the
/// order the application ran them: a committed transaction's offset replaces the value, an
/// aborted one's never does, and one of unknown outcome may have done either. Every offset a
/// transaction sent is in `SimTxn::offsets` once the call was accepted, so a transaction whose
/// `TxnOffsetCommit` never reached the coordinator cannot have committed (a failed call makes
/// the transaction abortable). `committed` reads the coordinator's committed offset. Returns how
/// many group partitions were checked.
pub fn check_committed_offsets(
    txns: &[SimTxn],
    committed: impl Fn(&str, &TopicPartition) -> Option<i64>,
) -> u64 {
    // (group, partition) → every value the committed offset may hold now.
    let mut allowed: BTreeMap<(String, TopicPartition), Vec<Option<i64>>> = BTreeMap::new();
    for txn in txns {
        // A transaction's last offset for a partition is the one it commits.
        let mut sent: BTreeMap<(String, TopicPartition), i64> = BTreeMap::new();
        for (group, tp, offset) in &txn.offsets {
            sent.insert((group.clone(), tp.clone()), *offset);
        }
        for (key, offset) in sent {
            let values = allowed.entry(key).or_insert_with(|| vec![None]);
            match txn.verdict {
                TxnVerdict::Committed => *values = vec![Some(offset)],
                TxnVerdict::Aborted => {}
                TxnVerdict::Unknown | TxnVerdict::Open => values.push(Some(offset)),
            }
        }
    }
    for ((group, tp), values) in &allowed {
        let found = committed(group, tp);
        assert!(
            values.contains(&found),
            "group {group} has committed offset {found:?} for {tp}; the transactions allow only {values:?}"
        );
    }
    allowed.len() as u64
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, Bytes, BytesMut};

    use super::*;
    use crate::testkit::batch::TestBatch;

    fn data(base_offset: i64, pid: i64, ids: &[RecordId]) -> StoredBatch {
        // Sequences follow the record ids (each test sends its records in id order).
        let seq = ids[0] as i32;
        let mut batch = TestBatch::idempotent(pid, 0, seq, 0);
        batch.records = ids
            .iter()
            .map(|&id| (None, Some(u64::from(id).to_le_bytes().to_vec())))
            .collect();
        let count = ids.len() as i32;
        StoredBatch {
            base_offset,
            last_offset: base_offset + i64::from(count) - 1,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: seq,
            last_sequence: seq + count - 1,
            record_count: count,
            max_timestamp: 0,
            transactional: true,
            control: false,
            bytes: Bytes::from(batch.encode()),
        }
    }

    /// A control batch: 61 header bytes (contents irrelevant here) and one record whose key
    /// is (version 0, type).
    fn marker(offset: i64, pid: i64, commit: bool) -> StoredBatch {
        let mut bytes = BytesMut::from(&[0u8; 61][..]);
        let mut record = BytesMut::new();
        record.put_u8(0); // attributes
        record.put_u8(0); // timestamp delta 0
        record.put_u8(0); // offset delta 0
        record.put_u8(8); // key length 4, zigzag
        record.put_i16(0);
        record.put_i16(i16::from(commit));
        record.put_u8(12); // value length 6
        record.put_slice(&[0; 6]);
        record.put_u8(0); // no headers
        bytes.put_u8((record.len() * 2) as u8);
        bytes.put_slice(&record);
        StoredBatch {
            base_offset: offset,
            last_offset: offset,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: -1,
            last_sequence: -1,
            record_count: 1,
            max_timestamp: 0,
            transactional: true,
            control: true,
            bytes: bytes.freeze(),
        }
    }

    fn txn(records: &[RecordId], verdict: TxnVerdict) -> SimTxn {
        SimTxn {
            records: records.to_vec(),
            offsets: Vec::new(),
            verdict,
        }
    }

    #[test]
    fn commit_shows_and_abort_hides_and_open_holds_the_lso() {
        let log = vec![
            data(0, 1, &[0, 1]),
            marker(2, 1, true),
            data(3, 1, &[2]),
            marker(4, 1, false),
            data(5, 1, &[3]),
        ];
        let view = read_committed(&log);
        assert_eq!(view.visible, vec![0, 1]);
        assert_eq!(view.aborted, vec![2]);
        assert_eq!(view.first_open_offset, Some(5));
        assert_eq!(view.markers, 2);
    }

    /// A checker that saw `ids` sent and read `log`; with `ack`, every record in the log was
    /// acknowledged at its offset.
    fn checker_with(ids: RecordId, log: &[StoredBatch], ack: bool) -> Checker {
        let tp = TopicPartition::new("t", 0);
        let mut checker = Checker::new(vec![tp], 1_000_000);
        for id in 0..ids {
            checker.on_send(id, 0, 0);
        }
        let end = log.last().map_or(0, |b| b.last_offset + 1);
        checker.observe_log(0, log, end);
        if ack {
            for batch in log.iter().filter(|b| !b.control) {
                let mut offset = batch.base_offset;
                for_each_record_value(&batch.bytes, |_, value| {
                    let id = value.and_then(record_id_of).unwrap();
                    checker.on_result(
                        id,
                        &Ok(crate::engine::RecordMetadata {
                            topic: "t".into(),
                            partition: 0,
                            offset,
                            timestamp: 0,
                        }),
                        0,
                    );
                    offset += 1;
                });
            }
        }
        checker
    }

    #[test]
    #[should_panic(expected = "of transaction 0 (Aborted) is visible under read_committed")]
    fn an_aborted_transaction_that_is_visible_fails() {
        let log = vec![data(0, 1, &[0]), marker(1, 1, true)];
        let tp = [TopicPartition::new("t", 0)];
        check_transactions(
            &tp,
            &[(&log, 2)],
            &[txn(&[0], TxnVerdict::Aborted)],
            &checker_with(1, &log, false),
        );
    }

    #[test]
    #[should_panic(expected = "of committed transaction 0 is not visible")]
    fn a_committed_transaction_that_was_aborted_in_the_log_fails() {
        let log = vec![data(0, 1, &[0]), marker(1, 1, false)];
        let tp = [TopicPartition::new("t", 0)];
        check_transactions(
            &tp,
            &[(&log, 2)],
            &[txn(&[0], TxnVerdict::Committed)],
            &checker_with(1, &log, false),
        );
    }

    #[test]
    #[should_panic(expected = "partly visible")]
    fn an_unknown_transaction_must_be_atomic() {
        let log = vec![data(0, 1, &[0]), marker(1, 1, true), data(2, 1, &[1])];
        let tp = [TopicPartition::new("t", 0)];
        check_transactions(
            &tp,
            &[(&log, 2)],
            &[txn(&[0, 1], TxnVerdict::Unknown)],
            &checker_with(2, &log, false),
        );
    }

    #[test]
    #[should_panic(expected = "LSO 3 is above the first offset 2")]
    fn an_lso_past_an_open_transaction_fails() {
        let log = vec![data(0, 1, &[0]), marker(1, 1, true), data(2, 1, &[1])];
        let tp = [TopicPartition::new("t", 0)];
        check_transactions(
            &tp,
            &[(&log, 3)],
            &[
                txn(&[0], TxnVerdict::Committed),
                txn(&[1], TxnVerdict::Unknown),
            ],
            &checker_with(2, &log, true),
        );
    }

    fn with_offsets(verdict: TxnVerdict, offsets: &[(i32, i64)]) -> SimTxn {
        let mut t = txn(&[], verdict);
        t.offsets = offsets
            .iter()
            .map(|&(p, o)| ("g".to_string(), TopicPartition::new("in", p), o))
            .collect();
        t
    }

    fn store(values: &[(i32, i64)]) -> impl Fn(&str, &TopicPartition) -> Option<i64> + '_ {
        move |group, tp| {
            assert_eq!(group, "g");
            values
                .iter()
                .find(|(p, _)| *p == tp.partition)
                .map(|&(_, o)| o)
        }
    }

    #[test]
    fn the_last_committed_offset_stands_and_an_aborted_one_never_replaces_it() {
        let txns = [
            with_offsets(TxnVerdict::Committed, &[(0, 5), (1, 7)]),
            with_offsets(TxnVerdict::Committed, &[(0, 9), (0, 10)]),
            with_offsets(TxnVerdict::Aborted, &[(0, 20), (1, 21)]),
        ];
        assert_eq!(check_committed_offsets(&txns, store(&[(0, 10), (1, 7)])), 2);
    }

    #[test]
    #[should_panic(expected = "committed offset Some(20) for in-0")]
    fn an_aborted_transactions_offset_that_was_committed_fails() {
        let txns = [
            with_offsets(TxnVerdict::Committed, &[(0, 5)]),
            with_offsets(TxnVerdict::Aborted, &[(0, 20)]),
        ];
        check_committed_offsets(&txns, store(&[(0, 20)]));
    }

    #[test]
    #[should_panic(expected = "committed offset None for in-0")]
    fn a_committed_transactions_offset_that_is_missing_fails() {
        let txns = [with_offsets(TxnVerdict::Committed, &[(0, 5)])];
        check_committed_offsets(&txns, store(&[]));
    }

    #[test]
    fn a_transaction_of_unknown_outcome_may_have_committed_its_offset_or_not() {
        let txns = [
            with_offsets(TxnVerdict::Committed, &[(0, 5)]),
            with_offsets(TxnVerdict::Unknown, &[(0, 8)]),
        ];
        check_committed_offsets(&txns, store(&[(0, 5)]));
        check_committed_offsets(&txns, store(&[(0, 8)]));
    }

    #[test]
    fn a_clean_committed_and_aborted_run_passes() {
        let log = vec![
            data(0, 1, &[0]),
            marker(1, 1, true),
            data(2, 1, &[1]),
            marker(3, 1, false),
        ];
        let tp = [TopicPartition::new("t", 0)];
        let stats = check_transactions(
            &tp,
            &[(&log, 4)],
            &[
                txn(&[0], TxnVerdict::Committed),
                txn(&[1], TxnVerdict::Aborted),
            ],
            &checker_with(2, &log, true),
        );
        assert_eq!(stats.committed, 1);
        assert_eq!(stats.aborted, 1);
        assert_eq!(stats.visible_records, 1);
        assert_eq!(stats.aborted_records_in_log, 1);
    }

    /// `batch` at `epoch` (the helpers write epoch 0).
    fn at_epoch(mut batch: StoredBatch, epoch: i16) -> StoredBatch {
        batch.producer_epoch = epoch;
        batch
    }

    #[test]
    #[should_panic(expected = "a transactional write of producer 1 at epoch 0 landed at offset 2")]
    fn a_write_of_an_ended_transaction_after_its_tv2_marker_fails() {
        let log = vec![
            data(0, 1, &[0]),
            at_epoch(marker(1, 1, true), 1),
            data(2, 1, &[1]),
        ];
        check_no_write_after_marker(&TopicPartition::new("t", 0), &log);
    }

    #[test]
    fn the_next_transaction_after_a_marker_passes_under_tv1_and_tv2() {
        let tp = TopicPartition::new("t", 0);
        // TV1: the marker keeps the epoch and the next transaction writes at it.
        let tv1 = vec![data(0, 1, &[0]), marker(1, 1, true), data(2, 1, &[1])];
        check_no_write_after_marker(&tp, &tv1);
        // TV2: the marker carries the bumped epoch, and so does the next transaction; another
        // producer's older epoch is not this marker's business.
        let tv2 = vec![
            data(0, 1, &[0]),
            at_epoch(marker(1, 1, false), 1),
            at_epoch(data(2, 1, &[1]), 1),
            data(3, 2, &[2]),
        ];
        check_no_write_after_marker(&tp, &tv2);
    }
}
