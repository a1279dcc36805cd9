//! The accumulator's side of the engine (Java's `RecordAccumulator`): appending a record to its
//! partition's open batch, readiness of an unstamped head (`RecordAccumulator.batchReady`), and the
//! ledger of incomplete batches behind `flush` and `close`.

use bytes::BytesMut;

use crate::error::ProduceError;
use crate::protocol::record_batch::{self, Header};

use super::super::batch::{record_size_upper_bound, ProducerBatch};
use super::super::batch_memory::BatchCharge;
use super::super::partition::{PartitionSlot, TopicPartition};
use super::super::{Delivery, Micros};
use super::Engine;

impl<D: Delivery> Engine<D> {
    /// Appends one record to its partition's open batch (Java's `RecordAccumulator.append`).
    /// Size limits are checked by the caller before the record is queued.
    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &mut self,
        now: Micros,
        tp: &TopicPartition,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
        delivery: D,
    ) {
        if let Some(err) = &self.fatal {
            delivery.complete(Err(err.clone()));
            self.metrics.record_failed_in(&tp.topic);
            return;
        }
        if self.closing {
            self.metrics.record_failed_in(&tp.topic);
            delivery.complete(Err(ProduceError::Closed));
            return;
        }
        let slot_index = self.slot_index(tp);
        self.partitions[slot_index].last_append = now;
        self.txn_on_append(slot_index);
        let delivery = {
            let slot = &mut self.partitions[slot_index];
            match slot.deque.back_mut() {
                Some(batch) if batch.is_open() => {
                    match batch.try_append(timestamp, key, value, headers, delivery) {
                        Ok(()) => return,
                        Err(d) => {
                            batch.close();
                            d
                        }
                    }
                }
                _ => delivery,
            }
        };
        let upper_bound =
            record_batch::RECORD_BATCH_OVERHEAD + record_size_upper_bound(key, value, headers);
        let max_size = self
            .config
            .batch_size
            .min(self.config.max_request_size)
            .max(upper_bound);
        let compression = self.partitions[slot_index].compression.clone();
        // The buffer's capacity beyond this record's reservation is charged to `buffer.memory`
        // (`batch_memory`). When that does not fit, the batch gets a buffer of just this
        // record's size and is closed after it: it takes no other record and is sent at once.
        let buffer = self.buffer_pool.allocate(max_size);
        let unused = buffer.capacity().saturating_sub(upper_bound);
        let mut charge = None;
        let buffer = if unused == 0 {
            buffer
        } else if let Some(taken) = BatchCharge::try_take(&self.batch_memory, unused) {
            charge = Some(taken);
            buffer
        } else {
            self.buffer_pool.deallocate(buffer);
            BytesMut::with_capacity(upper_bound)
        };
        let without_room = unused > 0 && charge.is_none();
        let mut batch = ProducerBatch::with_buffer(buffer, now, timestamp, max_size, compression);
        if let Some(charge) = charge {
            batch.set_charge(charge);
        }
        if batch
            .try_append(timestamp, key, value, headers, delivery)
            .is_err()
        {
            unreachable!("an empty batch takes one record")
        }
        if without_room {
            batch.close();
            self.stats.batches_without_room += 1;
        }
        batch.id = self.next_batch_id;
        self.next_batch_id += 1;
        self.incomplete_batches.insert(batch.id);
        self.partitions[slot_index].deque.push_back(batch);
    }

    /// Takes a batch an application thread filled (Java's accumulator, whose callers encode
    /// into their partition's open batch): it joins the back of its partition's queue, behind
    /// every batch handed over before it, and is stamped at drain as any batch is. The batch
    /// must have stopped taking records, and every record must be in a run
    /// (`ProducerBatch::push_run`). Fails it at once when the producer is fatal or closing.
    pub fn append_batch(&mut self, now: Micros, tp: &TopicPartition, mut batch: ProducerBatch<D>) {
        debug_assert!(!batch.is_open() && batch.records_without_run() == 0);
        let refusal = match &self.fatal {
            Some(err) => Some(err.clone()),
            None if self.closing => Some(ProduceError::Closed),
            None => None,
        };
        if let Some(err) = refusal {
            self.metrics
                .records_failed_in(&tp.topic, batch.record_count as u64);
            for run in std::mem::take(&mut batch.records) {
                run.delivery.complete(Err(err.clone()));
            }
            self.recycle(batch);
            return;
        }
        let slot_index = self.slot_index(tp);
        self.partitions[slot_index].last_append = now;
        self.txn_on_append(slot_index);
        let slot = &mut self.partitions[slot_index];
        // A batch the engine opened itself (`append`) for this partition is older: it closes.
        if let Some(open) = slot.deque.back_mut().filter(|b| b.is_open()) {
            open.close();
        }
        batch.id = self.next_batch_id;
        self.next_batch_id += 1;
        self.incomplete_batches.insert(batch.id);
        self.partitions[slot_index].deque.push_back(batch);
    }

    /// Starts a flush: every batch is ready at once. Returns a token that `flush_done` accepts
    /// once every batch created before it has completed.
    pub fn begin_flush(&mut self) -> u64 {
        self.flushes += 1;
        self.next_batch_id
    }

    /// True when every batch created before `token` has completed; ends that flush.
    pub fn flush_done(&mut self, token: u64) -> bool {
        let done = self
            .incomplete_batches
            .first()
            .is_none_or(|&oldest| oldest >= token);
        if done {
            self.flushes = self.flushes.saturating_sub(1);
        }
        done
    }

    /// Fails every record that no attempt has carried yet (`Producer::purge`) with
    /// `ProduceError::Purged`, and returns how many. Only each partition's unsent tail goes:
    /// batches behind the last one that has a sequence, has been sent, or is a split child
    /// (whose parent's sequences it will fill). None of these ever took a sequence number,
    /// so the partition's next sequence and its in-flight list are untouched and no gap
    /// opens; a batch that has been on the wire stays, because it may be in the log.
    pub fn purge_unsent(&mut self) -> usize {
        let mut purged = 0;
        for slot_index in 0..self.partitions.len() {
            loop {
                let unsent = match self.partitions[slot_index].deque.back() {
                    Some(batch) => {
                        batch.stamp.is_none()
                            && batch.attempts == 0
                            && !batch.outcome_unknown
                            && !batch.expired
                            && !self.split_children.contains_key(&batch.id)
                    }
                    None => false,
                };
                if !unsent {
                    break;
                }
                let batch = self.partitions[slot_index]
                    .deque
                    .pop_back()
                    .expect("checked above");
                purged += batch.pending_record_count();
                self.finish_batch(slot_index, batch, Err(ProduceError::Purged));
            }
        }
        purged
    }

    /// Close: send everything now; refuse new records.
    pub fn begin_close(&mut self) {
        self.closing = true;
    }

    /// True when no batch is queued or in flight.
    pub fn is_idle(&self) -> bool {
        self.incomplete_batches.is_empty()
    }

    /// True when `tp` has a batch waiting to be drained (not on the wire). In Java's
    /// accumulator the last batch of such a partition's deque is still open: later records
    /// join it until a drain takes it. The runtime, whose open batches live outside the
    /// engine, keeps a due open batch appendable while this holds (`runtime::intake`).
    pub fn has_undrained(&self, tp: &TopicPartition) -> bool {
        self.partition(tp)
            .is_some_and(|slot| !slot.deque.is_empty())
    }

    /// `RecordAccumulator.batchReady` for an unstamped head.
    pub(super) fn batch_ready(&self, slot: &PartitionSlot<D>, now: Micros) -> bool {
        let Some(head) = slot.deque.front() else {
            return false;
        };
        slot.deque.len() > 1
            || head.is_full()
            || now >= head.created + self.config.linger
            || self.flushes > 0
            || self.closing
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::engine::{Engine, EngineConfig, RecordMetadata, TopicPartition};
    use crate::error::ProduceError;
    use crate::ProducerConfig;

    /// A delivery that remembers which record it was.
    struct Tagged(u32);

    impl super::Delivery for Tagged {
        fn complete(self, result: Result<RecordMetadata, ProduceError>) {
            panic!("record {} completed unsent: {result:?}", self.0);
        }
    }

    #[test]
    fn appends_that_switch_partition_land_in_their_own_partition() {
        let config = ProducerConfig::builder()
            .bootstrap_servers("broker:9092")
            .build()
            .unwrap();
        let mut engine: Engine<Tagged> =
            Engine::new(EngineConfig::from_producer_config(&config, true));
        // The same topic names behind different pointers, partitions that differ only by
        // number, and runs of one partition between switches.
        let a0 = TopicPartition::new("a", 0);
        let a0_again = TopicPartition::new(Arc::<str>::from(String::from("a")), 0);
        let a1 = TopicPartition::new("a", 1);
        let b0 = TopicPartition::new("b", 0);
        let order = [&a0, &a0, &a1, &b0, &a0_again, &b0, &b0, &a1, &a0];
        for (i, tp) in order.iter().enumerate() {
            engine.append(0, tp, 0, None, Some(b"v"), &[], Tagged(i as u32));
        }
        let tags = |tp: &TopicPartition| -> Vec<u32> {
            engine
                .partition(tp)
                .unwrap()
                .deque
                .iter()
                .flat_map(|b| b.records.iter().map(|r| r.delivery.0))
                .collect()
        };
        assert_eq!(tags(&a0), [0, 1, 4, 8]);
        assert_eq!(tags(&a1), [2, 7]);
        assert_eq!(tags(&b0), [3, 5, 6]);
    }

    /// Record values that compress to about half: 60 pseudo-random bytes, then 60 zeros.
    fn half_compressible_values(count: usize) -> Vec<Vec<u8>> {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        (0..count)
            .map(|_| {
                let mut value = vec![0u8; 120];
                for byte in &mut value[..60] {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    *byte = (state >> 56) as u8;
                }
                value
            })
            .collect()
    }

    /// Sealed batches' sizes on the wire, in order, with their records' uncompressed sizes.
    fn sealed_sizes(engine: &Engine<Tagged>, tp: &TopicPartition) -> Vec<usize> {
        engine
            .partition(tp)
            .unwrap()
            .deque
            .iter()
            .filter(|b| !b.is_open())
            .map(|b| b.size_in_bytes())
            .collect()
    }

    #[test]
    fn compressed_batches_fill_towards_batch_size_as_the_ratio_estimate_learns() {
        for codec in ["gzip", "snappy", "lz4", "zstd"] {
            let config = ProducerConfig::builder()
                .bootstrap_servers("broker:9092")
                .set("compression.type", codec)
                .build()
                .unwrap();
            let batch_size = config.batch_size;
            let mut engine: Engine<Tagged> =
                Engine::new(EngineConfig::from_producer_config(&config, true));
            let a = TopicPartition::new("a", 0);
            // Enough for the estimate to walk from 1.0 down to the ratio in 0.005 steps.
            for (i, value) in half_compressible_values(40_000).iter().enumerate() {
                engine.append(0, &a, 0, None, Some(value), &[], Tagged(i as u32));
            }
            let sizes = sealed_sizes(&engine, &a);
            assert!(sizes.len() > 100, "{codec}: {} batches", sizes.len());
            // The first batch was sized as if nothing compressed: about half empty.
            assert!(
                sizes[0] < batch_size * 3 / 4,
                "{codec}: first batch {} bytes",
                sizes[0]
            );
            // Once the estimate has learnt the ratio, batches come out close to batch.size
            // (the estimate swings 0.05 up after a batch that compressed worse than it, so
            // about 87% at this ratio) and not over it.
            let last = &sizes[sizes.len() - 20..];
            for &size in last {
                assert!(
                    size >= batch_size * 80 / 100 && size <= batch_size,
                    "{codec}: a late batch of {size} bytes (batch.size {batch_size}): {last:?}"
                );
            }

            // The estimate is per topic: a new topic starts again from 1.0.
            let b = TopicPartition::new("b", 0);
            let values = half_compressible_values(400);
            for (i, value) in values.iter().enumerate() {
                engine.append(0, &b, 0, None, Some(value), &[], Tagged(i as u32));
            }
            let first_b = sealed_sizes(&engine, &b)[0];
            assert!(
                first_b < batch_size * 3 / 4,
                "{codec}: topic b's first batch {first_b} bytes"
            );
        }
    }

    use crate::engine::batch_memory::CountedMemory;

    /// A delivery whose completion does not matter here.
    struct Quiet;

    impl super::Delivery for Quiet {
        fn complete(self, _result: Result<RecordMetadata, ProduceError>) {}
    }

    fn engine_with_ceiling(ceiling: usize) -> (Engine<Quiet>, Arc<CountedMemory>) {
        let config = ProducerConfig::builder()
            .bootstrap_servers("broker:9092")
            .build()
            .unwrap();
        let memory = Arc::new(CountedMemory::with_ceiling(ceiling));
        let engine = Engine::new(EngineConfig::from_producer_config(&config, true))
            .with_batch_memory(memory.clone());
        (engine, memory)
    }

    #[test]
    fn a_batch_charges_the_capacity_its_records_leave_unused_until_it_is_dropped() {
        let (mut engine, memory) = engine_with_ceiling(usize::MAX);
        let batch_size = engine.config().batch_size;
        let a = TopicPartition::new("a", 0);
        let value = [7u8; 1000];
        engine.append(0, &a, 0, None, Some(&value), &[], Quiet);
        let bound = crate::protocol::record_batch::RECORD_BATCH_OVERHEAD
            + crate::engine::batch::record_size_upper_bound(None, Some(&value), &[]);
        assert_eq!(
            memory.used(),
            batch_size - bound,
            "open: all but one record"
        );
        // Records that fill the batch do not add to the charge; the next batch charges its own.
        for _ in 0..20 {
            engine.append(0, &a, 0, None, Some(&value), &[], Quiet);
        }
        let batches: Vec<_> = engine.partition(&a).unwrap().deque.iter().collect();
        assert_eq!(batches.len(), 2);
        assert!(!batches[0].is_open());
        let first_unused = batch_size - batches[0].size_in_bytes();
        assert_eq!(
            batches[0].charged_bytes(),
            first_unused,
            "closed: the unused tail only"
        );
        assert_eq!(batches[1].charged_bytes(), batch_size - bound);
        assert_eq!(memory.used(), first_unused + batch_size - bound);
        assert_eq!(engine.purge_unsent(), 21);
        assert_eq!(memory.used(), 0, "given back when the batches went");
    }

    #[test]
    fn with_no_room_for_a_batch_a_record_gets_a_buffer_of_its_own_size_and_nothing_else() {
        let (mut engine, memory) = engine_with_ceiling(100);
        let a = TopicPartition::new("a", 0);
        let value = [7u8; 1000];
        for _ in 0..3 {
            engine.append(0, &a, 0, None, Some(&value), &[], Quiet);
        }
        let bound = crate::protocol::record_batch::RECORD_BATCH_OVERHEAD
            + crate::engine::batch::record_size_upper_bound(None, Some(&value), &[]);
        let slot = engine.partition(&a).unwrap();
        assert_eq!(slot.deque.len(), 3, "one record per batch");
        for batch in &slot.deque {
            assert_eq!(batch.record_count, 1);
            assert_eq!(batch.charged_bytes(), 0);
            assert!(batch.is_full(), "sent without waiting for linger");
            assert!(batch.size_in_bytes() <= bound);
        }
        assert_eq!(engine.stats().batches_without_room, 3);
        assert_eq!(memory.used(), 0);
    }
}
