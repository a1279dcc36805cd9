//! `ProducerBatch`: the records of one partition sent together, and the protocol facts about
//! its attempts (Java's `ProducerBatch` fields of docs/java-rules.md §1.4).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::protocol::compression::Codec;
use crate::protocol::record_batch::{
    self, Header, RecordBatchBuilder, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD,
};

use super::batch_memory::BatchCharge;
use super::buffer_pool::BufferPool;
use super::compression_ratio::{estimated_bytes_written, CompressionRatioEstimate};
use super::identity::ProducerIdAndEpoch;
use super::Micros;

/// How a batch's records are compressed: the codec, and the topic's ratio estimate that sizes
/// the open batch and learns from each batch once it is compressed.
#[derive(Debug, Clone)]
pub struct BatchCompression {
    pub codec: Codec,
    pub estimate: Arc<CompressionRatioEstimate>,
}

/// The (producer id, epoch, base sequence) written into a batch header at its first drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchStamp {
    pub producer: ProducerIdAndEpoch,
    pub base_sequence: i32,
}

/// A batch's bytes through its life. The CRC is computed once, when the bytes become final:
/// a batch that stops taking records is only sealed, so that its first stamp (at its first
/// drain, usually after it was sealed full) goes into the builder and costs neither a copy nor
/// a second pass over the records. A compressed batch's records are compressed once, when it
/// stops taking records (sealed, or stamped or finished while open).
enum BatchData {
    /// Taking records.
    Open(RecordBatchBuilder),
    /// Taking no more records, records compressed; header and CRC not written yet.
    Sealed(RecordBatchBuilder),
    /// Final bytes, CRC included; shared with the requests that carry them.
    Closed(Bytes),
}

/// The delivery handle of a run of `count` consecutive records of the batch, and what their
/// metadata needs: one record's (the engine's own `append`), or every record an application
/// thread encoded before it handed the batch over (`push_run`).
pub struct PendingRecord<D> {
    pub delivery: D,
    /// The record's create time in a one-record run; `NO_TIMESTAMP` in a longer one, whose
    /// handle knows its records' times.
    pub timestamp: i64,
    pub count: u32,
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

/// Java's `MemoryRecordsBuilder.estimatedBytesWritten`: exact for an uncompressed builder,
/// the header plus the records scaled by the estimated ratio for a compressed one.
fn estimate(compressed: bool, ratio: f32, builder: &RecordBatchBuilder) -> usize {
    if compressed {
        estimated_bytes_written(
            RECORD_BATCH_OVERHEAD,
            builder.uncompressed_records_size(),
            ratio,
        )
    } else {
        builder.size_in_bytes()
    }
}

pub struct ProducerBatch<D> {
    /// Creation order within the engine (flush waits by it).
    pub id: u64,
    data: BatchData,
    /// The records' delivery handles, in record order, by runs.
    pub records: Vec<PendingRecord<D>>,
    pub record_count: i32,
    /// Records covered by a run of `records`.
    in_runs: u32,
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
    compression: Option<BatchCompression>,
    /// The topic's estimate when the batch was created (Java's `setEstimatedCompressionRatio`
    /// in `ProducerBatch`'s constructor): fixed for the batch's life.
    estimated_ratio: f32,
    /// The ratio the records compressed with, once they are (Java's `compressionRatio`).
    observed_ratio: Option<f32>,
    /// The share of `buffer.memory` the buffer takes beyond what its records reserved
    /// (`batch_memory`); given back when the batch is dropped.
    charge: Option<BatchCharge>,
}

impl<D> ProducerBatch<D> {
    /// An uncompressed batch.
    pub fn new(now: Micros, base_timestamp: i64, max_size: usize) -> Self {
        Self::with_compression(now, base_timestamp, max_size, None)
    }

    /// A batch whose records are compressed as `compression` says (`None`: uncompressed).
    /// `max_size` bounds the batch's estimated compressed size.
    pub fn with_compression(
        now: Micros,
        base_timestamp: i64,
        max_size: usize,
        compression: Option<BatchCompression>,
    ) -> Self {
        let buffer = BytesMut::with_capacity(max_size.max(RECORD_BATCH_OVERHEAD));
        Self::with_buffer(buffer, now, base_timestamp, max_size, compression)
    }

    /// [`with_compression`](Self::with_compression) writing into `buffer` (from the engine's
    /// `BufferPool`; its contents are discarded).
    pub fn with_buffer(
        buffer: BytesMut,
        now: Micros,
        base_timestamp: i64,
        max_size: usize,
        compression: Option<BatchCompression>,
    ) -> Self {
        let compression = compression.filter(|c| c.codec != Codec::None);
        let (codec, estimated_ratio) = compression
            .as_ref()
            .map_or((Codec::None, 1.0), |c| (c.codec, c.estimate.estimation()));
        ProducerBatch {
            id: 0,
            data: BatchData::Open(RecordBatchBuilder::with_buffer(
                buffer,
                base_timestamp,
                codec,
            )),
            records: Vec::new(),
            record_count: 0,
            in_runs: 0,
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
            compression,
            estimated_ratio,
            observed_ratio: None,
            charge: None,
        }
    }

    /// Makes the batch hold `charge` for its buffer's unused capacity (see `batch_memory`).
    pub fn set_charge(&mut self, charge: BatchCharge) {
        self.charge = Some(charge);
    }

    /// The bytes of `buffer.memory` the batch holds beyond its records' own reservations.
    pub fn charged_bytes(&self) -> usize {
        self.charge.as_ref().map_or(0, BatchCharge::bytes)
    }

    pub fn is_open(&self) -> bool {
        matches!(self.data, BatchData::Open(_))
    }

    /// The batch's size on the wire: exact once it stopped taking records; while open, Java's
    /// `estimatedSizeInBytes` (the records so far, scaled by the compression estimate for a
    /// compressed batch).
    pub fn size_in_bytes(&self) -> usize {
        match &self.data {
            BatchData::Open(b) => self.estimated_bytes_written(b),
            BatchData::Sealed(b) => b.size_in_bytes(),
            BatchData::Closed(bytes) => bytes.len(),
        }
    }

    /// Java's `MemoryRecordsBuilder.estimatedBytesWritten` of the open builder.
    fn estimated_bytes_written(&self, builder: &RecordBatchBuilder) -> usize {
        estimate(self.compression.is_some(), self.estimated_ratio, builder)
    }

    /// The compression the batch was created with, for batches split from it.
    pub fn compression(&self) -> Option<&BatchCompression> {
        self.compression.as_ref()
    }

    /// The ratio the records compressed with; `None` while open and for an uncompressed batch.
    pub fn compression_ratio(&self) -> Option<f32> {
        self.observed_ratio
    }

    /// Compresses the builder's records (once) and feeds the observed ratio to the topic's
    /// estimate, as Java's `ProducerBatch.close` does.
    fn compress(&mut self, builder: &mut RecordBatchBuilder) {
        self.compress_pooled(builder, None);
    }

    /// [`compress`](Self::compress), into a buffer from `pool` when there is one, to which the
    /// buffer of the uncompressed records goes back: compressed batches reuse buffers too.
    fn compress_pooled(&mut self, builder: &mut RecordBatchBuilder, pool: Option<&BufferPool>) {
        let Some(compression) = &self.compression else {
            return;
        };
        if builder.compression_ratio().is_some() {
            return;
        }
        match pool {
            Some(pool) => {
                if let Some(old) = builder.compress_into(pool.allocate(pool.buffer_size())) {
                    pool.deallocate(old);
                }
            }
            None => builder.compress(),
        }
        if let Some(ratio) = builder.compression_ratio() {
            compression.estimate.update(ratio);
            self.observed_ratio = Some(ratio);
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
        if !self.try_append_encoded(timestamp, key, value, headers) {
            return Err(delivery);
        }
        self.records.push(PendingRecord {
            delivery,
            timestamp,
            count: 1,
        });
        self.in_runs += 1;
        Ok(())
    }

    /// Appends a record whose delivery handle comes later, with its run's
    /// ([`push_run`](Self::push_run)), if it fits in `max_size` (an empty batch always takes
    /// one record). False when it does not fit or the batch is closed.
    pub fn try_append_encoded(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> bool {
        let compressed = self.compression.is_some();
        let BatchData::Open(builder) = &mut self.data else {
            return false;
        };
        let size = builder.measure(timestamp, key, value, headers);
        // Java's `MemoryRecordsBuilder.hasRoomFor`: the estimate so far plus the new record
        // uncompressed (conservatively, its own compression is not counted).
        if !builder.is_empty()
            && estimate(compressed, self.estimated_ratio, builder) + size.total() > self.max_size
        {
            return false;
        }
        builder.append_measured(size, timestamp, key, value, headers);
        self.record_count += 1;
        true
    }

    /// Records appended by [`try_append_encoded`](Self::try_append_encoded) that no run covers
    /// yet.
    pub fn records_without_run(&self) -> u32 {
        self.record_count as u32 - self.in_runs
    }

    /// `delivery` is the handle of every record appended since the last run: one run of them.
    pub fn push_run(&mut self, delivery: D) {
        let count = self.records_without_run();
        self.records.push(PendingRecord {
            delivery,
            timestamp: NO_TIMESTAMP,
            count,
        });
        self.in_runs += count;
    }

    /// Takes `run` (from a batch this one was split from) as the handle of its next
    /// `run.count` records without one.
    pub fn push_run_of(&mut self, run: PendingRecord<D>) {
        debug_assert!(run.count <= self.records_without_run());
        self.in_runs += run.count;
        self.records.push(run);
    }

    /// Records whose handles the batch still holds (none once they were completed).
    pub fn pending_record_count(&self) -> usize {
        self.records.iter().map(|run| run.count as usize).sum()
    }

    /// The batch stopped taking records: its charge shrinks to the capacity its records leave
    /// unused (every record reserved at least its encoded size, and the first one the header).
    fn settle_charge(&mut self, builder: &RecordBatchBuilder) {
        if let Some(charge) = &mut self.charge {
            charge.shrink_to(builder.capacity().saturating_sub(builder.size_in_bytes()));
        }
    }

    /// Whether another record is unlikely to fit: the readiness test of
    /// `RecordAccumulator.batchReady`.
    pub fn is_full(&self) -> bool {
        match &self.data {
            BatchData::Open(b) => self.estimated_bytes_written(b) + 16 >= self.max_size,
            BatchData::Sealed(_) | BatchData::Closed(_) => true,
        }
    }

    /// Stops the batch taking records. Its bytes become final at its first stamp or at
    /// [`finish`](Self::finish). Idempotent.
    pub fn close(&mut self) {
        self.close_pooled(None);
    }

    /// [`close`](Self::close), compressing (if the batch is compressed) into a buffer from
    /// `pool`, to which the uncompressed records' buffer goes back.
    pub fn close_pooled(&mut self, pool: Option<&BufferPool>) {
        if let BatchData::Open(_) = self.data {
            let BatchData::Open(mut builder) =
                std::mem::replace(&mut self.data, BatchData::Closed(Bytes::new()))
            else {
                unreachable!()
            };
            self.compress_pooled(&mut builder, pool);
            self.settle_charge(&builder);
            self.data = BatchData::Sealed(builder);
        }
    }

    /// Closes the batch and makes its bytes final as they are (header and CRC written), for a
    /// batch sent without a stamp. Idempotent.
    pub fn finish(&mut self) {
        if let BatchData::Closed(_) = self.data {
            return;
        }
        let (BatchData::Open(mut builder) | BatchData::Sealed(mut builder)) =
            std::mem::replace(&mut self.data, BatchData::Closed(Bytes::new()))
        else {
            unreachable!("not closed")
        };
        self.compress(&mut builder);
        self.settle_charge(&builder);
        self.data = BatchData::Closed(builder.close().freeze());
    }

    /// Writes `stamp` into the batch header (first drain, or a sequence rewrite) and closes the
    /// batch: a batch whose bytes are not final yet takes it into the builder, before its one
    /// CRC; final bytes are copied and checksummed again.
    pub fn set_stamp(&mut self, stamp: BatchStamp, is_transactional: bool) {
        match std::mem::replace(&mut self.data, BatchData::Closed(Bytes::new())) {
            BatchData::Open(mut builder) | BatchData::Sealed(mut builder) => {
                self.compress(&mut builder);
                self.settle_charge(&builder);
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
                // for any request still holding the previous attempt. Only header fields and
                // the CRC change: compressed records are not compressed again.
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

    /// The batch's buffer, for the next batch, once nothing else refers to its bytes: a request
    /// that still holds them (being written, or kept by a test broker) keeps it, and it is freed
    /// when the last holder lets go.
    pub fn into_buffer(self) -> Option<BytesMut> {
        match self.data {
            BatchData::Open(builder) | BatchData::Sealed(builder) => Some(builder.into_buffer()),
            BatchData::Closed(bytes) => bytes.try_into_mut().ok(),
        }
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

    /// A zstd batch of three redundant records, sealed or still open, and its topic's estimate.
    fn compressed_batch(sealed: bool) -> (ProducerBatch<()>, Arc<CompressionRatioEstimate>) {
        let estimate = Arc::new(CompressionRatioEstimate::default());
        let compression = BatchCompression {
            codec: Codec::Zstd { level: 3 },
            estimate: estimate.clone(),
        };
        let mut b = ProducerBatch::with_compression(0, 10, 4096, Some(compression));
        for i in 0..3 {
            b.try_append(10 + i, Some(b"k"), Some(&[b'v'; 300]), &[], ())
                .unwrap();
        }
        if sealed {
            b.close();
        }
        (b, estimate)
    }

    #[test]
    fn a_compressed_batch_is_compressed_once_and_teaches_its_topic_the_ratio() {
        for sealed in [false, true] {
            let (mut b, estimate) = compressed_batch(sealed);
            assert_eq!(b.compression_ratio().is_some(), sealed);
            b.set_stamp(stamp(42, 3, 17), false);
            let ratio = b
                .compression_ratio()
                .expect("compressed by the stamp at the latest");
            assert!(ratio < 0.5, "{ratio}");
            // One update, a better ratio than 1.0: one improving step.
            assert_eq!(estimate.estimation(), 1.0 - 0.005);
            let bytes = b.bytes();
            assert_eq!(bytes.len(), b.size_in_bytes());
            let header = RecordBatchHeader::parse(&bytes).unwrap();
            assert_eq!(header.compression(), 4);
            assert_eq!(header.base_sequence, 17);
            assert_eq!(record_batch::decode_records(&bytes).unwrap().len(), 3);
        }
    }

    #[test]
    fn a_restamped_compressed_batch_keeps_its_compressed_records() {
        let (mut b, estimate) = compressed_batch(true);
        b.set_stamp(stamp(42, 3, 17), true);
        let sent = b.bytes();
        b.set_stamp(stamp(42, 4, 0), false);
        let restamped = b.bytes();
        assert_eq!(sent[61..], restamped[61..], "records recompressed");
        assert_eq!(
            estimate.estimation(),
            1.0 - 0.005,
            "the ratio is learnt once"
        );
        let header = RecordBatchHeader::parse(&restamped).unwrap();
        assert_eq!((header.producer_epoch, header.base_sequence), (4, 0));
        assert_eq!(header.compression(), 4);
    }

    #[test]
    fn an_open_compressed_batch_is_sized_by_the_estimate() {
        let (b, estimate) = compressed_batch(false);
        let BatchData::Open(builder) = &b.data else {
            panic!("open")
        };
        let uncompressed = builder.uncompressed_records_size();
        assert_eq!(
            b.size_in_bytes(),
            RECORD_BATCH_OVERHEAD + (uncompressed as f32 * 1.0 * 1.05) as usize
        );
        // A batch created after the estimate moved uses the new one; this one keeps its own.
        estimate.set(0.5);
        assert_eq!(
            b.size_in_bytes(),
            RECORD_BATCH_OVERHEAD + (uncompressed as f32 * 1.05) as usize
        );
    }

    // Java's `estimateSizeInBytesUpperBound`: every varint at its widest (5 bytes for a length,
    // 10 for the timestamp delta), so the bound holds whatever the record's position in its
    // batch.
    #[test]
    fn a_records_upper_bound_counts_every_varint_at_its_widest_and_holds_for_the_record() {
        let headers = [
            Header {
                key: "ab",
                value: Some(b"wxyz"),
            },
            Header {
                key: "c",
                value: None,
            },
        ];
        let bound = record_size_upper_bound(Some(b"key"), Some(b"value"), &headers);
        assert_eq!(bound, 36 + 3 + 5 + (10 + 2 + 4) + (10 + 1));
        assert_eq!(record_size_upper_bound(None, None, &[]), 36);
        let mut b = ProducerBatch::new(0, 10, 1024);
        let empty = b.size_in_bytes();
        b.try_append(10, Some(b"key"), Some(b"value"), &headers, ())
            .unwrap();
        let encoded = b.size_in_bytes() - empty;
        assert!(encoded <= bound, "{encoded} > {bound}");
    }

    // `RecordAccumulator.batchReady`'s fullness: an open batch is full when 16 more bytes would not
    // fit.
    #[test]
    fn an_open_batch_is_full_once_within_16_bytes_of_batch_size() {
        const MAX: usize = 200;
        let mut b = ProducerBatch::new(0, 10, MAX);
        assert!(!b.is_full(), "an empty batch");
        let mut appended = 0;
        while b.try_append(10, None, Some(b"v"), &[], ()).is_ok() {
            appended += 1;
            assert_eq!(
                b.is_full(),
                b.size_in_bytes() + 16 >= MAX,
                "after {appended} records, {} bytes",
                b.size_in_bytes()
            );
        }
        // The last records brought it within 16 bytes of MAX, where `is_full` turns.
        let size = b.size_in_bytes();
        assert!(size <= MAX && size + 16 >= MAX, "{size} bytes of {MAX}");
        assert!(b.is_full());
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
