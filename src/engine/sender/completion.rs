//! How a batch ends: the answer to one partition of a produce request (`Sender.completeBatch`,
//! docs/java-rules.md §3.1), retry or failure (`Sender.canRetry`, `Sender.failBatch`),
//! success, and the bookkeeping every ending goes through (`finish_batch`: failed deliveries,
//! the transaction's failure report, split parents, the flush ledger). The sequence side of a
//! failure is `handle_failed_batch` in `epoch_bump.rs`.

use crate::error::{ErrorCause, ProduceError};
use crate::protocol::error_code;

use super::super::batch::ProducerBatch;
use super::super::error_class::{classify_produce_error, may_have_appended, ProduceErrorClass};
use super::super::{Delivery, Micros, NodeId, RecordMetadata};
use super::{Engine, RequestBody};

impl<D: Delivery> Engine<D> {
    /// Fails every incomplete batch (a forced close). `error` promises the record is not in
    /// the log, so it goes only to batches none of whose attempts may have landed; a queued
    /// batch waiting to retry an attempt of unknown outcome, like one on the wire, fails as
    /// `OutcomeUnknown`.
    pub fn abort_all(&mut self, error: ProduceError) {
        for slot_index in 0..self.partitions.len() {
            self.fail_queued(
                slot_index,
                &error,
                "ended while the retry of an attempt of unknown outcome waited",
            );
        }
        let nodes: Vec<NodeId> = self.connections.keys().copied().collect();
        for node in nodes {
            let conn = self.connections.get_mut(&node).expect("listed");
            let requests: Vec<_> = conn.in_flight.drain(..).collect();
            for (_, body) in requests {
                if let RequestBody::Produce(batches) = body {
                    for (slot_index, batch) in batches {
                        self.partitions[slot_index].on_wire -= 1;
                        let err = self.unknown_outcome_error(slot_index, "producer closed");
                        self.forget_inflight(slot_index, &batch);
                        self.finish_batch(slot_index, batch, Err(err));
                    }
                }
            }
        }
    }

    /// Once the producer is fatal, every queued batch fails with its error, or as of unknown
    /// outcome when an earlier attempt of it may have landed.
    pub(super) fn fail_queued_if_fatal(&mut self) {
        if let Some(err) = self.fatal.clone() {
            for slot_index in 0..self.partitions.len() {
                while let Some(batch) = self.partitions[slot_index].deque.pop_front() {
                    let result = if batch.outcome_unknown {
                        Err(self.unknown_outcome_error(slot_index, &err.to_string()))
                    } else {
                        Err(err.clone())
                    };
                    self.finish_batch(slot_index, batch, result);
                }
            }
        }
    }

    /// Fails every queued batch of a partition with `error`, or as of unknown outcome
    /// (`reason`) when an earlier attempt of it may have landed; each stamped one leaves the
    /// partition's in-flight list, where no batch would own it any more.
    pub(super) fn fail_queued(&mut self, slot_index: usize, error: &ProduceError, reason: &str) {
        while let Some(batch) = self.partitions[slot_index].deque.pop_front() {
            let result = if batch.outcome_unknown {
                Err(self.unknown_outcome_error(slot_index, reason))
            } else {
                Err(error.clone())
            };
            self.forget_inflight(slot_index, &batch);
            self.finish_batch(slot_index, batch, result);
        }
    }

    /// A stamped batch that ends without an answer leaves the partition's in-flight list.
    fn forget_inflight(&mut self, slot_index: usize, batch: &ProducerBatch<D>) {
        if let Some(stamp) = batch.stamp {
            self.partitions[slot_index]
                .entry
                .remove_inflight(stamp.producer, stamp.base_sequence);
        }
    }

    pub(super) fn unknown_outcome_error(&self, slot_index: usize, reason: &str) -> ProduceError {
        let tp = &self.partitions[slot_index].tp;
        ProduceError::OutcomeUnknown {
            topic: tp.topic.clone(),
            partition: tp.partition,
            reason: reason.to_string(),
        }
    }

    /// `Sender.completeBatch` for one partition response.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn complete_batch(
        &mut self,
        now: Micros,
        slot_index: usize,
        batch: ProducerBatch<D>,
        error: i16,
        base_offset: i64,
        log_append_time: i64,
        log_start_offset: i64,
        message: Option<String>,
    ) {
        let class = classify_produce_error(error);
        match class {
            ProduceErrorClass::Success => {
                self.complete_success(slot_index, batch, base_offset, log_append_time)
            }
            ProduceErrorClass::DuplicateSequence => {
                self.complete_success(slot_index, batch, -1, log_append_time)
            }
            ProduceErrorClass::MessageTooLarge if batch.record_count > 1 && !batch.expired => {
                self.split_and_reenqueue(slot_index, batch)
            }
            ProduceErrorClass::OutOfOrderSequence | ProduceErrorClass::UnknownProducerId => {
                // This attempt was not appended, but that says nothing about an earlier
                // attempt of unknown outcome: it may have landed and since left the broker's
                // five-batch window (later batches of the partition were acked meanwhile), or
                // it may still be travelling and land after this answer. Such a batch keeps
                // its unknown outcome, so it is never re-stamped and never reported as
                // definitely failed.
                let retry = self.idempotent_can_retry(slot_index, &batch, class, log_start_offset);
                if retry {
                    self.retry_or_fail(now, slot_index, batch, error, false, message)
                } else {
                    let adjust_sequences = !self.is_overtaken(slot_index, &batch);
                    self.fail_batch(slot_index, batch, error, message, adjust_sequences)
                }
            }
            ProduceErrorClass::Retriable | ProduceErrorClass::RetriableRefreshMetadata => {
                let may_have_appended = may_have_appended(error, self.config.acks);
                self.retry_or_fail(now, slot_index, batch, error, may_have_appended, message)
            }
            ProduceErrorClass::Fatal => {
                let tp = &self.partitions[slot_index].tp;
                let err = ProduceError::Fatal(ErrorCause::Produce {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    code: error,
                });
                self.become_fatal(err);
                self.fail_batch(slot_index, batch, error, message, false)
            }
            ProduceErrorClass::MessageTooLarge
            | ProduceErrorClass::InvalidProducerEpoch
            | ProduceErrorClass::TransactionAbortable
            | ProduceErrorClass::NonRetriable => {
                self.fail_batch(slot_index, batch, error, message, true)
            }
        }
    }

    /// Retry if `Sender.canRetry` allows, else fail the batch.
    pub(super) fn retry_or_fail(
        &mut self,
        now: Micros,
        slot_index: usize,
        mut batch: ProducerBatch<D>,
        error: i16,
        may_have_appended: bool,
        message: Option<String>,
    ) {
        if may_have_appended {
            batch.outcome_unknown = true;
        }
        if matches!(
            classify_produce_error(error),
            ProduceErrorClass::RetriableRefreshMetadata
        ) {
            self.invalidate_leader(slot_index);
        }
        if batch.expired {
            // Its deliveries were completed at expiry; only the bookkeeping remains.
            self.drop_expired(slot_index, batch);
            return;
        }
        let within_timeout = now < batch.created + self.config.delivery_timeout;
        let attempts_left = (batch.attempts as i64) < self.config.retries as i64;
        if within_timeout && attempts_left && self.fatal.is_none() {
            let tp = &self.partitions[slot_index].tp;
            tracing::warn!(
                target: "kacrab::producer",
                topic = &*tp.topic,
                partition = tp.partition,
                error = %error_code::name(error),
                attempt = batch.attempts + 1,
                records = batch.record_count,
                outcome_unknown = batch.outcome_unknown,
                "retrying batch"
            );
            self.metrics
                .records_retried(slot_index, batch.record_count as u64);
            batch.attempts += 1;
            batch.in_retry = true;
            batch.last_attempt = now;
            batch.backoff_skip = false;
            self.partitions[slot_index].reenqueue_in_sequence_order(batch);
        } else {
            self.fail_batch(slot_index, batch, error, message, attempts_left);
        }
    }

    /// `TransactionManager.handleFailedBatch` + completion with the error.
    pub(super) fn fail_batch(
        &mut self,
        slot_index: usize,
        batch: ProducerBatch<D>,
        error: i16,
        message: Option<String>,
        adjust_sequences: bool,
    ) {
        if batch.expired {
            self.drop_expired(slot_index, batch);
            return;
        }
        let tp = self.partitions[slot_index].tp.clone();
        let err = if batch.outcome_unknown {
            self.unknown_outcome_error(
                slot_index,
                &format!(
                    "failed with {} after an attempt of unknown outcome",
                    error_code::name(error)
                ),
            )
        } else {
            ProduceError::rejected(&tp.topic, tp.partition, error, message)
        };
        self.handle_failed_batch(slot_index, &batch, error, adjust_sequences);
        self.finish_batch(slot_index, batch, Err(err));
    }

    fn drop_expired(&mut self, slot_index: usize, batch: ProducerBatch<D>) {
        if let Some(stamp) = batch.stamp {
            self.partitions[slot_index]
                .entry
                .remove_inflight(stamp.producer, stamp.base_sequence);
        }
        self.finish_batch(slot_index, batch, Err(ProduceError::Closed));
    }

    /// `TransactionManager.handleCompletedBatch` + completion.
    pub(super) fn complete_success(
        &mut self,
        slot_index: usize,
        batch: ProducerBatch<D>,
        base_offset: i64,
        log_append_time: i64,
    ) {
        if let (Some(stamp), Some(last)) = (batch.stamp, batch.last_sequence()) {
            let entry = &mut self.partitions[slot_index].entry;
            entry.remove_inflight(stamp.producer, stamp.base_sequence);
            // Only answers about the identity the entry is on move its counters: a late answer
            // from before a rewrite must not raise the new epoch's last acked sequence.
            if stamp.producer == entry.producer_id_and_epoch {
                entry.maybe_update_last_acked_sequence(last);
                if base_offset >= 0 {
                    entry.last_acked_offset = entry
                        .last_acked_offset
                        .max(base_offset + batch.record_count as i64 - 1);
                }
            }
        }
        if batch.expired {
            self.finish_batch(slot_index, batch, Err(ProduceError::Closed));
            return;
        }
        let tp = self.partitions[slot_index].tp.clone();
        let mut batch = batch;
        let records = std::mem::take(&mut batch.records);
        // Each run's first record's place in the batch.
        let mut first = 0i64;
        for record in records {
            let offset = if base_offset >= 0 {
                base_offset + first
            } else {
                -1
            };
            let timestamp = if log_append_time >= 0 {
                log_append_time
            } else {
                record.timestamp
            };
            first += record.count as i64;
            record.delivery.appended(&tp, offset, timestamp);
        }
        self.finish_batch(slot_index, batch, Err(ProduceError::Closed));
    }

    /// Final completion of a batch: any deliveries left get `result`; its id leaves the
    /// incomplete set.
    pub(super) fn finish_batch(
        &mut self,
        slot_index: usize,
        mut batch: ProducerBatch<D>,
        result: Result<RecordMetadata, ProduceError>,
    ) {
        if let Err(err) = result {
            let records = batch.pending_record_count();
            if records > 0 {
                // The error's text states what it promises about the log.
                tracing::warn!(
                    target: "kacrab::producer",
                    records,
                    error = %err,
                    "batch failed"
                );
                self.txn_report_failure(&err, false);
                self.metrics.records_failed(slot_index, records as u64);
            }
            for record in std::mem::take(&mut batch.records) {
                record.delivery.complete(Err(err.clone()));
            }
        }
        // Split children share their parent's id; it is complete when the last one is.
        if let Some(left) = self.split_children.get_mut(&batch.id) {
            *left -= 1;
            if *left > 0 {
                self.recycle(batch);
                return;
            }
            self.split_children.remove(&batch.id);
        }
        self.incomplete_batches.remove(&batch.id);
        self.recycle(batch);
    }

    /// Gives a finished batch's buffer to the pool (when no request holds its bytes any more).
    pub(super) fn recycle(&mut self, batch: ProducerBatch<D>) {
        if let Some(buffer) = batch.into_buffer() {
            self.buffer_pool.deallocate(buffer);
        }
    }
}
