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

/// What a take left in a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Left {
    /// Nothing: the queue left the shard's list (its next batch notices the shard again).
    Nothing,
    /// An open batch due at this time (µs on the shard's clock).
    DueAt(u64),
    /// An open batch that is due but held (its partition has a batch still to drain).
    Held,
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

    /// The shard's side: takes every closed batch, and the open one if `take_open` says so or
    /// it is due at `now` (`linger_us` after it was created) and not `held`. A held batch
    /// stays open, so the records sent while its partition waits for the wire join it (the
    /// engine has an earlier batch of the partition still to drain: Java's last batch of a
    /// partition's deque is likewise appendable until a drain takes it).
    pub(crate) fn take(
        &self,
        now: u64,
        linger_us: u64,
        take_open: bool,
        held: bool,
        into: &mut Vec<ClosedBatch>,
    ) -> Left {
        let mut state = self.lock();
        // Closed batches taken now are ahead of the open one in the engine too.
        let held = held || !state.ready.is_empty();
        into.extend(state.ready.drain(..));
        let due = state
            .open
            .as_ref()
            .map(|open| open.batch.created.saturating_add(linger_us));
        let left = match due {
            None => Left::Nothing,
            Some(_) if take_open => Left::Nothing,
            Some(at) if at > now => Left::DueAt(at),
            Some(_) if held => Left::Held,
            Some(_) => Left::Nothing,
        };
        if let (Some(_), Left::Nothing) = (due, &left) {
            let open = state.open.take().expect("an open batch");
            into.push(open.close(self.memory, &self.pool));
        }
        if left == Left::Nothing {
            state.listed = false;
            state.noticed = false;
        }
        left
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::buffer_memory::BufferMemory;
    use bytes::BytesMut;

    fn queue(memory: &BufferMemory) -> PartitionQueue {
        PartitionQueue::new(
            TopicPartition {
                topic: "t".into(),
                partition: 0,
            },
            0,
            memory.id(),
            Arc::new(BufferPool::new(1024, 4096)),
            None,
        )
    }

    /// Appends one record to the queue's open batch, opening one created at `created`.
    fn append(queue: &PartitionQueue, created: u64) {
        let mut state = queue.lock();
        let open = state.open.get_or_insert_with(|| OpenBatch {
            batch: ProducerBatch::with_buffer(
                BytesMut::with_capacity(1024),
                created,
                0,
                1024,
                None,
            ),
            completion: Arc::new(BatchCompletion::new()),
            callbacks: Vec::new(),
            txn_barrier: 0,
            reserved: 0,
        });
        assert!(open.batch.try_append_encoded(0, None, Some(b"v"), &[]));
    }

    fn records(taken: &[ClosedBatch]) -> Vec<i32> {
        taken.iter().map(|c| c.batch.record_count).collect()
    }

    #[test]
    fn a_due_open_batch_is_held_while_its_partition_has_a_batch_to_drain_and_takes_later_records() {
        let memory = BufferMemory::new(1 << 20);
        let queue = queue(&memory);
        let mut taken = Vec::new();
        append(&queue, 100);
        // Due (linger 0), but the engine still has an earlier batch of the partition.
        assert_eq!(queue.take(100, 0, false, true, &mut taken), Left::Held);
        assert!(taken.is_empty());
        append(&queue, 101);
        append(&queue, 102);
        // Drained: the one open batch goes with all three records.
        assert_eq!(queue.take(103, 0, false, false, &mut taken), Left::Nothing);
        assert_eq!(records(&taken), vec![3]);
    }

    #[test]
    fn a_due_open_batch_behind_closed_ones_is_held_and_a_flush_takes_it_regardless() {
        let memory = BufferMemory::new(1 << 20);
        let queue = queue(&memory);
        let mut taken = Vec::new();
        append(&queue, 0);
        {
            let mut state = queue.lock();
            let open = state.open.take().expect("open");
            let closed = open.close(memory.id(), &queue.pool);
            state.ready.push_back(closed);
        }
        append(&queue, 1);
        assert_eq!(queue.take(10, 0, false, false, &mut taken), Left::Held);
        assert_eq!(records(&taken), vec![1], "the closed batch is taken");
        taken.clear();
        assert_eq!(queue.take(10, 0, true, true, &mut taken), Left::Nothing);
        assert_eq!(records(&taken), vec![1], "a flush takes the held batch");
    }

    #[test]
    fn an_open_batch_not_yet_due_is_left_with_its_due_time() {
        let memory = BufferMemory::new(1 << 20);
        let queue = queue(&memory);
        let mut taken = Vec::new();
        append(&queue, 100);
        assert_eq!(
            queue.take(150, 100, false, false, &mut taken),
            Left::DueAt(200)
        );
        assert_eq!(queue.take(200, 100, false, true, &mut taken), Left::Held);
        assert_eq!(
            queue.take(200, 100, false, false, &mut taken),
            Left::Nothing
        );
        assert_eq!(records(&taken), vec![1]);
    }
}
