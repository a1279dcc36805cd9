//! `ProducerBatch`: the records of one partition sent together, and the protocol facts about
//! its attempts (Java's `ProducerBatch` fields of §1.4).

use bytes::{Bytes, BytesMut};

use crate::protocol::record_batch::{self, Header, RecordBatchBuilder};

use super::identity::ProducerIdAndEpoch;
use super::Micros;

/// The (producer id, epoch, base sequence) written into a batch header at its first drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchStamp {
    pub producer: ProducerIdAndEpoch,
    pub base_sequence: i32,
}

/// A batch's bytes through its life. The CRC is computed once, when the bytes become final:
/// a batch that stops taking records is only sealed, so that its first stamp (at its first
/// drain, usually after it was sealed full) goes into the builder and costs neither a copy nor
/// a second pass over the records.
enum BatchData {
    /// Taking records.
    Open(RecordBatchBuilder),
    /// Taking no more records; header and CRC not written yet.
    Sealed(RecordBatchBuilder),
    /// Final bytes, CRC included; shared with the requests that carry them.
    Closed(Bytes),
}

/// One record's delivery handle and what its metadata needs.
pub struct PendingRecord<D> {
    pub delivery: D,
    pub timestamp: i64,
}

/// Upper bound of one record's encoded size in a v2 batch (Java's
/// `AbstractRecords.estimateSizeInBytesUpperBound`): every varint at its maximum width.
pub fn record_size_upper_bound(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> usize {
    // length(5) + attributes(1) + timestamp delta(10) + offset delta(5) + key length(5)
    // + value length(5) + header count(5)
    let mut size = 36 + key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
    for h in headers {
        size += 10 + h.key.len() + h.value.map_or(0, <[u8]>::len);
    }
    size
}

pub struct ProducerBatch<D> {
    /// Creation order within the engine (flush waits by it).
    pub id: u64,
    data: BatchData,
    pub records: Vec<PendingRecord<D>>,
    pub record_count: i32,
    /// Time of the first append: origin of linger and of the delivery timeout.
    pub created: Micros,
    /// Last re-enqueue time, else `created`.
    pub last_attempt: Micros,
    /// Incremented on every re-enqueue (a split is not an attempt).
    pub attempts: u32,
    /// Set on the first re-enqueue (Java's `inRetry`).
    pub in_retry: bool,
    pub stamp: Option<BatchStamp>,
    /// Set when the sequences were rewritten after the last attempt went out: the header differs
    /// from what is on the wire (Java's `sequenceHasBeenReset`). Cleared when an attempt goes
    /// out.
    pub reopened: bool,
    /// An attempt was sent and its answer never came (disconnect, request timeout) or it may
    /// have been appended (an error the broker may answer after the append, see
    /// `error_class::may_have_appended`). Such a batch is only ever retried under its original
    /// stamp.
    pub outcome_unknown: bool,
    /// Delivery handles were already completed by expiry; the batch only lives on for sequence
    /// bookkeeping until its outstanding attempt answers.
    pub expired: bool,
    /// Leader epoch seen when `attempts` last changed leader (KIP-951 backoff skip).
    pub leader_epoch_at_retry: Option<i32>,
    pub backoff_skip: bool,
    pub max_size: usize,
}

impl<D> ProducerBatch<D> {
    pub fn new(now: Micros, base_timestamp: i64, max_size: usize) -> Self {
        ProducerBatch {
            id: 0,
            data: BatchData::Open(RecordBatchBuilder::new(max_size, base_timestamp)),
            records: Vec::new(),
            record_count: 0,
            created: now,
            last_attempt: now,
            attempts: 0,
            in_retry: false,
            stamp: None,
            reopened: false,
            outcome_unknown: false,
            expired: false,
            leader_epoch_at_retry: None,
            backoff_skip: false,
            max_size,
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(self.data, BatchData::Open(_))
    }

    pub fn size_in_bytes(&self) -> usize {
        match &self.data {
            BatchData::Open(b) | BatchData::Sealed(b) => b.size_in_bytes(),
            BatchData::Closed(bytes) => bytes.len(),
        }
    }

    /// Appends if the record fits in `max_size` (an empty batch always takes one record).
    /// Returns the delivery back when it does not fit or the batch is closed.
    pub fn try_append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
        delivery: D,
    ) -> Result<(), D> {
        let BatchData::Open(builder) = &mut self.data else {
            return Err(delivery);
        };
        let size = builder.measure(timestamp, key, value, headers);
        if !builder.is_empty() && builder.size_in_bytes() + size.total() > self.max_size {
            return Err(delivery);
        }
        builder.append_measured(size, timestamp, key, value, headers);
        self.records.push(PendingRecord {
            delivery,
            timestamp,
        });
        self.record_count += 1;
        Ok(())
    }

    /// Whether another record is unlikely to fit: the readiness test of `RA.batchReady`.
    pub fn is_full(&self) -> bool {
        match &self.data {
            BatchData::Open(b) => b.size_in_bytes() + 16 >= self.max_size,
            BatchData::Sealed(_) | BatchData::Closed(_) => true,
        }
    }

    /// Stops the batch taking records. Its bytes become final at its first stamp or at
    /// [`finish`](Self::finish). Idempotent.
    pub fn close(&mut self) {
        if let BatchData::Open(_) = self.data {
            let BatchData::Open(builder) =
                std::mem::replace(&mut self.data, BatchData::Closed(Bytes::new()))
            else {
                unreachable!()
            };
            self.data = BatchData::Sealed(builder);
        }
    }

    /// Closes the batch and makes its bytes final as they are (header and CRC written), for a
    /// batch sent without a stamp. Idempotent.
    pub fn finish(&mut self) {
        if let BatchData::Closed(_) = self.data {
            return;
        }
        let (BatchData::Open(builder) | BatchData::Sealed(builder)) =
            std::mem::replace(&mut self.data, BatchData::Closed(Bytes::new()))
        else {
            unreachable!("not closed")
        };
        self.data = BatchData::Closed(builder.close().freeze());
    }

    /// Writes `stamp` into the batch header (first drain, or a sequence rewrite) and closes the
    /// batch: a batch whose bytes are not final yet takes it into the builder, before its one
    /// CRC; final bytes are copied and checksummed again.
    pub fn set_stamp(&mut self, stamp: BatchStamp, is_transactional: bool) {
        match std::mem::replace(&mut self.data, BatchData::Closed(Bytes::new())) {
            BatchData::Open(mut builder) | BatchData::Sealed(mut builder) => {
                builder.set_producer_state(
                    stamp.producer.producer_id,
                    stamp.producer.epoch,
                    stamp.base_sequence,
                    is_transactional,
                );
                self.data = BatchData::Closed(builder.close().freeze());
            }
            BatchData::Closed(bytes) => {
                // A rewrite is rare (only after an epoch bump); a copy keeps `Bytes` immutable
                // for any request still holding the previous attempt.
                let mut buf = BytesMut::from(&bytes[..]);
                record_batch::write_producer_state(
                    &mut buf,
                    stamp.producer.producer_id,
                    stamp.producer.epoch,
                    stamp.base_sequence,
                    is_transactional,
                );
                self.data = BatchData::Closed(buf.freeze());
            }
        }
        if self.stamp.is_some() {
            self.reopened = true;
        }
        self.stamp = Some(stamp);
    }

    /// The final bytes of a stamped or finished batch (cheap clone).
    pub fn bytes(&self) -> Bytes {
        match &self.data {
            BatchData::Closed(bytes) => bytes.clone(),
            BatchData::Open(_) | BatchData::Sealed(_) => {
                panic!("bytes() on a batch neither stamped nor finished")
            }
        }
    }

    pub fn base_sequence(&self) -> Option<i32> {
        self.stamp.map(|s| s.base_sequence)
    }

    /// Last sequence, computed with Kafka's wrap rule.
    pub fn last_sequence(&self) -> Option<i32> {
        self.stamp
            .map(|s| record_batch::increment_sequence(s.base_sequence, self.record_count - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record_batch::RecordBatchHeader;

    fn stamp(producer_id: i64, epoch: i16, base_sequence: i32) -> BatchStamp {
        BatchStamp {
            producer: ProducerIdAndEpoch::new(producer_id, epoch),
            base_sequence,
        }
    }

    /// A batch of three records, sealed (full) or still open.
    fn batch(sealed: bool) -> ProducerBatch<()> {
        let mut b = ProducerBatch::new(0, 10, 1024);
        for i in 0..3 {
            b.try_append(10 + i, Some(b"k"), Some(b"value"), &[], ())
                .unwrap();
        }
        if sealed {
            b.close();
        }
        b
    }

    #[test]
    fn a_first_stamp_gives_the_bytes_of_a_stamp_written_on_the_finished_batch() {
        for sealed in [false, true] {
            for transactional in [false, true] {
                let mut finished = batch(sealed);
                finished.finish();
                let mut expected = BytesMut::from(&finished.bytes()[..]);
                record_batch::write_producer_state(&mut expected, 42, 3, 17, transactional);

                let mut stamped = batch(sealed);
                stamped.set_stamp(stamp(42, 3, 17), transactional);
                assert_eq!(stamped.bytes(), expected.freeze());
                assert!(!stamped.reopened);
                assert_eq!(stamped.last_sequence(), Some(19));
            }
        }
    }

    #[test]
    fn a_restamp_leaves_the_bytes_of_the_earlier_attempt_alone() {
        let mut b = batch(true);
        b.set_stamp(stamp(42, 3, 17), true);
        let sent = b.bytes();
        let sent_copy = sent.to_vec();
        b.set_stamp(stamp(42, 4, 0), false);
        assert!(b.reopened);
        assert_eq!(
            &sent[..],
            &sent_copy[..],
            "an attempt's bytes changed under it"
        );
        let header = RecordBatchHeader::parse(&b.bytes()).unwrap();
        assert_eq!(
            (
                header.producer_id,
                header.producer_epoch,
                header.base_sequence
            ),
            (42, 4, 0)
        );
        assert!(!header.is_transactional());
    }

    #[test]
    fn a_sealed_batch_takes_no_records_and_keeps_its_size() {
        let mut b = batch(false);
        let size = b.size_in_bytes();
        b.close();
        assert!(!b.is_open() && b.is_full());
        assert_eq!(b.try_append(20, None, Some(b"v"), &[], ()), Err(()));
        assert_eq!(b.size_in_bytes(), size);
        b.finish();
        assert_eq!(b.bytes().len(), size);
        assert_eq!(b.record_count, 3);
    }
}
