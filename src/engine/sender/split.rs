//! Splitting a batch the broker refused as too large (MESSAGE_TOO_LARGE with more than one
//! record, `Sender.completeBatch` → `RecordAccumulator.splitAndReenqueue`): the records are
//! re-batched to fit, the children inherit consecutive sequences under the parent's producer id and
//! epoch (`ProducerBatch.assignProducerStateToBatches`), and the parent ends when its last child
//! does.

use crate::protocol::error_code::code;
use crate::protocol::record_batch::{self, Header};

use super::super::batch::{BatchStamp, PendingRecord, ProducerBatch};
use super::super::partition::InflightSequence;
use super::super::Delivery;
use super::Engine;

impl<D: Delivery> Engine<D> {
    /// `RecordAccumulator.splitAndReenqueue`: MESSAGE_TOO_LARGE for a multi-record batch. The
    /// children keep the parent's pid/epoch and consecutive sequences; they are not a new attempt.
    pub(super) fn split_and_reenqueue(&mut self, slot_index: usize, mut batch: ProducerBatch<D>) {
        // The batch is this engine's own: its records decompress to what it appended, which
        // the builder keeps below i32::MAX bytes.
        let decoded =
            match record_batch::decode_records_with_limit(&batch.bytes(), i32::MAX as usize) {
                Ok(records) => records,
                Err(_) => {
                    return self.fail_batch(slot_index, batch, code::MESSAGE_TOO_LARGE, None, true);
                }
            };
        let records = std::mem::take(&mut batch.records);
        let half = (batch.size_in_bytes() / 2).max(1);
        let stamp = batch.stamp;
        // Java's `ProducerBatch.split`: the topic's estimate becomes the parent's ratio, at
        // least 1, so the children are sized as if their records did not compress.
        let compression = batch.compression().cloned();
        if let (Some(compression), Some(ratio)) = (&compression, batch.compression_ratio()) {
            compression.estimate.set(ratio.max(1.0));
        }
        let mut children: Vec<ProducerBatch<D>> = Vec::new();
        let mut runs = RunCursor::new(records);
        for (i, record) in decoded.iter().enumerate() {
            let headers: Vec<Header<'_>> = record
                .headers
                .iter()
                .map(|(k, v)| Header {
                    key: k.as_str(),
                    value: v.as_deref(),
                })
                .collect();
            let (key, value) = (record.key.as_deref(), record.value.as_deref());
            let fits = children.last_mut().is_some_and(|child| {
                child.try_append_encoded(record.timestamp, key, value, &headers)
            });
            if fits {
                continue;
            }
            if let Some(full) = children.last_mut() {
                runs.hand_to(full);
            }
            let mut child = ProducerBatch::with_compression(
                batch.created,
                record.timestamp,
                half,
                compression.clone(),
            );
            child.last_attempt = batch.last_attempt;
            child.outcome_unknown = batch.outcome_unknown;
            let appended = child.try_append_encoded(record.timestamp, key, value, &headers);
            debug_assert!(appended, "an empty batch takes record {i}");
            children.push(child);
        }
        if let Some(last) = children.last_mut() {
            runs.hand_to(last);
        }
        if let Some(stamp) = stamp {
            self.assign_producer_state_to_batches(slot_index, stamp, &mut children);
        }
        // Every child keeps the parent's id, so a flush waiting for the parent waits for all
        // of them (a fresh id would sort after flush tokens taken since the parent was
        // created). The id stays incomplete while `split_children` counts a live batch under
        // it: a first split counts its children; a child that splits again is replaced by its
        // own children, so the count grows by their number less the one it stood for, and
        // its siblings still waiting stay counted.
        let children_count = children.len();
        match self.split_children.get_mut(&batch.id) {
            Some(left) => *left += children_count - 1,
            None => {
                self.split_children.insert(batch.id, children_count);
            }
        }
        for child in &mut children {
            child.id = batch.id;
        }
        for child in children.into_iter().rev() {
            if child.stamp.is_some() {
                self.partitions[slot_index].reenqueue_in_sequence_order(child);
            } else {
                self.partitions[slot_index].deque.push_front(child);
            }
        }
        self.recycle(batch);
    }

    /// `ProducerBatch.assignProducerStateToBatches`: the children of a batch stamped `parent`
    /// take consecutive sequences from its base under its identity, and replace it in its
    /// partition's in-flight list, in its place.
    fn assign_producer_state_to_batches(
        &mut self,
        slot_index: usize,
        parent: BatchStamp,
        children: &mut [ProducerBatch<D>],
    ) {
        let transactional = self.is_transactional();
        let mut base = parent.base_sequence;
        let mut entries = Vec::new();
        for child in children {
            child.set_stamp(
                BatchStamp {
                    producer: parent.producer,
                    base_sequence: base,
                },
                transactional,
            );
            child.reopened = false;
            entries.push(InflightSequence {
                producer: parent.producer,
                base_sequence: base,
                record_count: child.record_count,
            });
            base = record_batch::increment_sequence(base, child.record_count);
        }
        let entry = &mut self.partitions[slot_index].entry;
        if let Some(position) = entry.inflight_position(parent.producer, parent.base_sequence) {
            entry
                .inflight_batches_by_sequence
                .splice(position..=position, entries);
        }
    }
}

/// The parent's delivery runs, handed out in record order to the children that now hold their
/// records; a run that spans two children is cut where the first ends (`Delivery::split_off`).
struct RunCursor<D> {
    runs: std::collections::VecDeque<PendingRecord<D>>,
}

impl<D: Delivery> RunCursor<D> {
    fn new(runs: Vec<PendingRecord<D>>) -> Self {
        RunCursor { runs: runs.into() }
    }

    /// Gives `child` the runs of the records it took that no run covers yet.
    fn hand_to(&mut self, child: &mut ProducerBatch<D>) {
        let mut wanted = child.records_without_run();
        while wanted > 0 {
            let Some(mut run) = self.runs.pop_front() else {
                return;
            };
            if run.count > wanted {
                let rest = run.delivery.split_off(wanted);
                self.runs.push_front(PendingRecord {
                    delivery: rest,
                    timestamp: run.timestamp,
                    count: run.count - wanted,
                });
                run.count = wanted;
            }
            wanted -= run.count;
            child.push_run_of(run);
        }
    }
}
