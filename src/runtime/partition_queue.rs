//! One partition's batches between the application threads that fill them (the producer's
//! accumulator, `producer::accumulator`, which describes the whole path) and the shard that
//! sends them: the open batch, the closed ones waiting in order, and whether the shard knows
//! of the queue. The accumulator appends under the queue's lock; the shard takes batches from
//! it ([`PartitionQueue::take`]) and, when it stops, fails what is left
//! ([`PartitionQueue::shut`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::engine::batch::{BatchCompression, ProducerBatch};
use crate::engine::buffer_pool::BufferPool;
use crate::engine::TopicPartition;
use crate::error::ProduceError;

use super::buffer_memory::MemoryId;
use super::completion::BatchCompletion;
use super::delivery_handle::{DeliveryHandle, RecordCallback};

/// What an open batch costs beyond its buffer, counted in `buffer.memory` with it: the batch's
/// bookkeeping, its completion object and its place in the queues.
pub(crate) const BATCH_MEMORY_OVERHEAD: usize = 512;

/// One partition's batches between the threads that fill them and the shard that sends them.
pub(crate) struct PartitionQueue {
    pub tp: TopicPartition,
    /// The shard that owns the partition.
    pub shard: usize,
    /// The `buffer.memory` its batches reserve from.
    memory: MemoryId,
    /// Its shard's batch buffers (a compressed batch takes a second one as it closes).
    pool: Arc<BufferPool>,
    /// How its batches are compressed: the codec and its topic's ratio estimate (`None`:
    /// uncompressed).
    pub compression: Option<BatchCompression>,
    state: Mutex<QueueState>,
}

/// A batch that stopped taking records, with the transaction barrier its records were checked
/// under (`TxnStatus::check_send`; 0 without a transactional id).
pub(crate) struct ClosedBatch {
    pub batch: ProducerBatch<DeliveryHandle>,
    pub txn_barrier: u64,
}

/// The batch appends go into: filled by the application threads under the queue's lock.
pub(crate) struct OpenBatch {
    pub batch: ProducerBatch<DeliveryHandle>,
    /// Where its records' futures find their results.
    pub completion: Arc<BatchCompletion>,
    /// The `send_with_callback` callbacks of its records, in record order.
    pub callbacks: Vec<RecordCallback>,
    /// The transaction barrier its records were checked under.
    pub txn_barrier: u64,
    /// Bytes of `buffer.memory` the batch holds.
    pub reserved: usize,
}

impl OpenBatch {
    /// Closes the batch: it takes no more records, and its delivery handle holds its
    /// completion, its callbacks and its share of `memory`.
    pub(crate) fn close(mut self, memory: MemoryId, pool: &BufferPool) -> ClosedBatch {
        self.batch.close_pooled(Some(pool));
        let count = self.batch.records_without_run();
        self.batch.push_run(DeliveryHandle::new(
            self.completion,
            count,
            self.callbacks,
            memory,
            self.reserved,
        ));
        ClosedBatch {
            batch: self.batch,
            txn_barrier: self.txn_barrier,
        }
    }
}

/// A queue's batches and flags, under its lock.
#[derive(Default)]
pub(crate) struct QueueState {
    /// Closed batches the shard has not taken yet, oldest first.
    pub ready: VecDeque<ClosedBatch>,
    pub open: Option<OpenBatch>,
    /// The shard knows of this queue: its notice is in the shard's inbox, or the queue is on
    /// the shard's list. Raised by the append that pushes the notice, lowered by the shard when
    /// it takes the last batch and drops the queue from its list.
    pub noticed: bool,
    /// On the shard's list (the shard's alone to change).
    listed: bool,
    /// The shard stopped: appends fail with this.
    pub shut: Option<ProduceError>,
}

impl PartitionQueue {
    /// The empty queue of `tp`, owned by `shard`, whose batches reserve from `memory`, take
    /// their buffers from `pool` and are compressed as `compression` says.
    pub(crate) fn new(
        tp: TopicPartition,
        shard: usize,
        memory: MemoryId,
        pool: Arc<BufferPool>,
        compression: Option<BatchCompression>,
    ) -> PartitionQueue {
        PartitionQueue {
            tp,
            shard,
            memory,
            pool,
            compression,
            state: Mutex::default(),
        }
    }

    /// The queue's lock: every append takes it (`producer::accumulator`), and the shard takes
    /// it to list, take and shut the queue.
    pub(crate) fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().expect("partition queue lock")
    }

    /// The shard's side: puts the queue on its list; false if it was on it already.
    pub(crate) fn list(&self) -> bool {
        !std::mem::replace(&mut self.lock().listed, true)
    }

    /// The shard's side: takes every closed batch, and the open one if it is due at `now`
    /// (`linger_us` after it was created) or `take_open` says so. Returns when the open batch
    /// left behind is due (µs on the shard's clock); `None`: nothing is left, and the queue
    /// left the shard's list (its next batch notices the shard again).
    pub(crate) fn take(
        &self,
        now: u64,
        linger_us: u64,
        take_open: bool,
        into: &mut Vec<ClosedBatch>,
    ) -> Option<u64> {
        let mut state = self.lock();
        into.extend(state.ready.drain(..));
        let due = state
            .open
            .as_ref()
            .map(|open| open.batch.created.saturating_add(linger_us));
        let open_due = match due {
            Some(at) if take_open || at <= now => {
                let open = state.open.take().expect("an open batch");
                into.push(open.close(self.memory, &self.pool));
                None
            }
            other => other,
        };
        if open_due.is_none() {
            state.listed = false;
            state.noticed = false;
        }
        open_due
    }

    /// The shard stopped or will never take from this queue again: every batch in it, and
    /// every later append, fails with `error` (none of them reached an engine, so none is in
    /// the log).
    pub(crate) fn shut(&self, error: ProduceError) {
        let batches = {
            let mut state = self.lock();
            state.shut.get_or_insert(error.clone());
            state.listed = false;
            let mut batches: Vec<ClosedBatch> = state.ready.drain(..).collect();
            if let Some(open) = state.open.take() {
                batches.push(open.close(self.memory, &self.pool));
            }
            batches
        };
        for closed in batches {
            fail_batch(closed.batch, &error);
        }
    }
}

/// Completes every run of a batch that never reached an engine with `error`.
pub(crate) fn fail_batch(mut batch: ProducerBatch<DeliveryHandle>, error: &ProduceError) {
    use crate::engine::Delivery;
    for run in std::mem::take(&mut batch.records) {
        run.delivery.complete(Err(error.clone()));
    }
}
