//! The async send: [`Producer::send_async`] waits for room in `buffer.memory` or for a topic's
//! metadata on the wait lists and deadline timer of `async_wait`, without blocking the
//! calling thread, then sends as `try_send` does.

use std::time::Instant;

use crate::error::ProduceError;
use crate::protocol::record_batch::RECORD_BATCH_OVERHEAD;

use super::{
    async_wait, record_size_upper_bound_of, DeliveryFuture, Producer, ProducerRecord, TrySendError,
    RECORD_MEMORY_OVERHEAD,
};

impl Producer {
    /// Sends one record, waiting for room in `buffer.memory` or for the topic's metadata (up
    /// to `max.block.ms` in all) without blocking the calling thread: for async services (tokio
    /// or any other executor). The future it returns resolves like [`send`](Self::send)'s. A
    /// `close` wakes it, and it resolves to a future failed with `Closed`. Polled on a shard
    /// thread it does not wait, as `send` does not there.
    pub async fn send_async(&self, mut record: ProducerRecord) -> DeliveryFuture {
        let deadline = Instant::now() + self.max_block();
        let started = Instant::now();
        loop {
            let (returned, list): (ProducerRecord, &async_wait::WaitList) = match self
                .try_send(record)
            {
                Ok(future) => return future,
                Err(TrySendError::BufferFull(r)) => (*r, &self.inner.memory.async_waiters),
                Err(TrySendError::MetadataPending(r)) => (*r, &self.inner.metadata.async_waiters),
            };
            record = returned;
            let mut timer = async_wait::Deadline::new(deadline);
            if timer.passed() {
                let err = match self.inner.metadata.topic_partition_count(&record.topic) {
                    Some(_) => {
                        self.inner.memory.exhausted_once();
                        ProduceError::BufferExhausted {
                            buffer_memory: self.inner.config.buffer_memory,
                            waited: started.elapsed(),
                        }
                    }
                    None => ProduceError::MetadataTimeout {
                        topic: record.topic.clone(),
                        waited: started.elapsed(),
                        last_error: self
                            .inner
                            .metadata
                            .get(&record.topic)
                            .map(|i| crate::protocol::error_code::name(i.error_code)),
                    },
                };
                // A record of an open transaction: it must not commit without it, as when
                // `send` refuses one (`refused_in_transaction`).
                if self.inner.config.transactional_id.is_some() {
                    if let Ok(token) = self.inner.txn_status.check_send() {
                        self.refused_in_transaction(&err, token);
                    }
                }
                return DeliveryFuture::failed(record.topic, err);
            }
            let size = RECORD_BATCH_OVERHEAD
                + record_size_upper_bound_of(&record)
                + RECORD_MEMORY_OVERHEAD;
            let memory = &self.inner.memory;
            let metadata = &self.inner.metadata;
            let topic = record.topic.clone();
            let changed = async_wait::Changed {
                list,
                ready: move || {
                    metadata.fatal().is_some()
                        || match metadata.topic_partition_count(&topic) {
                            Some(_) => memory.used() + size <= memory.limit(),
                            None => false,
                        }
                },
                registered: false,
            };
            let waiting_for_room = std::ptr::eq(list, &memory.async_waiters);
            let wait_started = Instant::now();
            futures_lite::future::or(changed, &mut timer).await;
            if waiting_for_room {
                memory.add_wait(wait_started.elapsed());
            }
        }
    }
}
