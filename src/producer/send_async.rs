//! The async send: [`Producer::send_async`] waits for room in `buffer.memory` or for a topic's
//! metadata on the runtime's wait lists (`runtime::waiters`) and the deadline timer of
//! `async_wait`, without blocking the calling thread, then sends as `try_send` does.

use std::time::Instant;

use crate::error::ProduceError;
use crate::protocol::record_batch::RECORD_BATCH_OVERHEAD;
use crate::runtime::waiters::{RoomWait, TopicWait};

use super::{
    async_wait, record_size_upper_bound_of, DeliveryFuture, Producer, ProducerRecord, TrySendError,
};

impl Producer {
    /// Sends one record, waiting for room in `buffer.memory` or for the topic's metadata (up
    /// to `max.block.ms` in all) without blocking the calling thread: for async services (tokio
    /// or any other executor). The future it returns resolves like [`send`](Self::send)'s. A
    /// `close` wakes it, and it resolves to a future failed with `Closed`. Polled on a shard
    /// thread it does not wait, as `send` does not there.
    pub async fn send_async(&self, mut record: ProducerRecord) -> DeliveryFuture {
        let started = Instant::now();
        // One deadline, and one timer entry, for the whole call however often it waits.
        // On a shard thread it waits only inside an application's task, whose await lets the
        // shard run (`on_shard`); a callback has nothing to await.
        let max_block = if crate::runtime::shard::in_application_task() {
            self.inner.config.max_block
        } else {
            self.max_block()
        };
        let mut timer = async_wait::Deadline::new(started + max_block);
        loop {
            let waiting_for_room = match self.try_send(record) {
                Ok(future) => return future,
                Err(TrySendError::BufferFull(r)) => {
                    record = *r;
                    true
                }
                Err(TrySendError::MetadataPending(r)) => {
                    record = *r;
                    false
                }
            };
            if timer.passed() {
                return self.gave_up(record, waiting_for_room, started);
            }
            let memory = &self.inner.memory;
            let metadata = &self.inner.metadata;
            // Each wait looks for what it lacks, or for the end of the producer's hope: a
            // close or a fatal error (the next `try_send` then fails the record with it).
            let ended = move || memory.is_closed() || metadata.fatal().is_some();
            if waiting_for_room {
                // Room for a new batch of the record (`accumulator`).
                let bytes = self
                    .inner
                    .accumulator
                    .batch_reservation(RECORD_BATCH_OVERHEAD + record_size_upper_bound_of(&record));
                let room = RoomWait {
                    waiters: &memory.async_waiters,
                    bytes,
                    ready: move || ended() || memory.used() + bytes <= memory.limit(),
                    id: None,
                };
                let wait_started = Instant::now();
                futures_lite::future::or(room, &mut timer).await;
                memory.add_wait(wait_started.elapsed());
            } else {
                let topic = record.topic.clone();
                let known = TopicWait {
                    waiters: &metadata.async_waiters,
                    topic: record.topic.clone(),
                    ready: move || ended() || metadata.topic_partition_count(&topic).is_some(),
                    id: None,
                };
                futures_lite::future::or(known, &mut timer).await;
            }
        }
    }

    /// `send_async` waited `max.block.ms` for room (`waiting_for_room`) or metadata: the
    /// record fails with the error of what it lacked.
    fn gave_up(
        &self,
        record: ProducerRecord,
        waiting_for_room: bool,
        started: Instant,
    ) -> DeliveryFuture {
        let err = if waiting_for_room {
            self.inner.memory.exhausted_once();
            ProduceError::BufferExhausted {
                buffer_memory: self.inner.config.buffer_memory,
                waited: started.elapsed(),
            }
        } else {
            ProduceError::MetadataTimeout {
                topic: record.topic.clone(),
                waited: started.elapsed(),
                last_error: self
                    .inner
                    .metadata
                    .get(&record.topic)
                    .map(|i| crate::protocol::error_code::name(i.error_code)),
            }
        };
        // A record of an open transaction: it must not commit without it, as when `send`
        // refuses one (`refused_in_transaction`).
        if self.inner.config.transactional_id.is_some() {
            if let Ok(token) = self.inner.txn_status.check_send() {
                self.refused_in_transaction(&err, token);
            }
        }
        DeliveryFuture::failed(record.topic, err)
    }
}
