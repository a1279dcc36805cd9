//! The delivery timeout (`delivery.timeout.ms`, docs/java-rules.md §4.9):
//! batches past it fail, on the wire (`Sender.getExpiredInflightBatches`) or queued
//! (`RecordAccumulator.expiredBatches`), with an error that keeps the promise of what may be in the
//! log; a stamped one under its partition's identity marks the partition's sequences unresolved
//! (`mark_sequence_unresolved`).

use std::time::Duration;

use crate::error::ProduceError;

use super::super::batch::ProducerBatch;
use super::super::{Delivery, Micros};
use super::epoch_bump::mark_sequence_unresolved;
use super::{Engine, RequestBody};

impl<D: Delivery> Engine<D> {
    /// Fails batches past `delivery.timeout.ms` (`Sender.getExpiredInflightBatches`,
    /// `RecordAccumulator.expiredBatches`).
    pub(super) fn expire_batches(&mut self, now: Micros) {
        let timeout = self.config.delivery_timeout;
        for slot_index in 0..self.partitions.len() {
            loop {
                let slot = &mut self.partitions[slot_index];
                let Some(position) = slot.deque.iter().position(|b| now >= b.created + timeout)
                else {
                    break;
                };
                let batch = slot.deque.remove(position).expect("position is valid");
                let result = Err(self.expiry_error(slot_index, &batch));
                if let (Some(stamp), Some(last)) = (batch.stamp, batch.last_sequence()) {
                    let slot = &mut self.partitions[slot_index];
                    slot.entry
                        .remove_inflight(stamp.producer, stamp.base_sequence);
                    // Its sequences leave a gap whether or not it was ever retried (a split
                    // child or a rewritten batch expires without an attempt of its own).
                    if stamp.producer == slot.entry.producer_id_and_epoch {
                        mark_sequence_unresolved(slot, last);
                    }
                }
                self.finish_batch(slot_index, batch, result);
            }
        }
        // Batches whose attempt is on the wire: complete their deliveries now; the batch stays
        // in its request for bookkeeping until the answer or the disconnect.
        let mut expired_on_wire = Vec::new();
        for conn in self.connections.values_mut() {
            for (_, body) in conn.in_flight.iter_mut() {
                if let RequestBody::Produce(batches) = body {
                    for (slot_index, batch) in batches.iter_mut() {
                        if !batch.expired && now >= batch.created + timeout {
                            batch.expired = true;
                            let records = std::mem::take(&mut batch.records);
                            expired_on_wire.push((
                                *slot_index,
                                batch.stamp,
                                batch.last_sequence(),
                                records,
                            ));
                        }
                    }
                }
            }
        }
        for (slot_index, stamp, last, records) in expired_on_wire {
            let err = self.unknown_outcome_error(
                slot_index,
                &format!(
                    "delivery.timeout.ms ({:?}) passed while an attempt was in flight",
                    Duration::from_micros(timeout)
                ),
            );
            if !records.is_empty() {
                self.txn_report_failure(&err, false);
                let count: u32 = records.iter().map(|run| run.count).sum();
                self.metrics.records_failed(slot_index, count as u64);
            }
            for record in records {
                record.delivery.complete(Err(err.clone()));
            }
            let slot = &mut self.partitions[slot_index];
            if let (Some(stamp), Some(last)) = (stamp, last) {
                slot.entry
                    .remove_inflight(stamp.producer, stamp.base_sequence);
                if stamp.producer == slot.entry.producer_id_and_epoch {
                    mark_sequence_unresolved(slot, last);
                }
            }
        }
    }

    fn expiry_error(&self, slot_index: usize, batch: &ProducerBatch<D>) -> ProduceError {
        let tp = &self.partitions[slot_index].tp;
        if batch.outcome_unknown {
            self.unknown_outcome_error(
                slot_index,
                &format!(
                    "delivery.timeout.ms ({:?}) passed after an attempt of unknown outcome",
                    Duration::from_micros(self.config.delivery_timeout)
                ),
            )
        } else {
            ProduceError::TimedOut {
                topic: tp.topic.clone(),
                partition: tp.partition,
                timeout: Duration::from_micros(self.config.delivery_timeout),
            }
        }
    }
}
