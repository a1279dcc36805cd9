//! The application side of the record path (Java's `RecordAccumulator.append`): the thread that
//! calls `send` encodes the record into its partition's open batch, under that partition's
//! lock; the partition's shard takes whole batches and stamps producer id, epoch and sequence
//! when it drains them, as Java's sender does.
//!
//! Why here and not on the shard: handing each record to the shard (a command per record into
//! another thread's queue, a result per record back) cost more than the whole engine. Now what
//! crosses to the shard is a batch: one notice when a partition first has a batch the shard
//! does not know of, one wake when a batch fills, one completion object, one `buffer.memory`
//! release. The record's bytes are copied once, into the batch, by the thread that owns them.
//! Other designs were weighed: per-thread open batches handed over whole would leave a thread's
//! last records stranded until it sends again (or need the shard to reach into every thread),
//! and would give records of several threads to one partition no single order until the shard
//! merged them.
//!
//! Measured against the record-per-command path it replaced (`benches/ab.py 5`, `kacrab-perf
//! --num-records 5000000 --record-size 10 --partitions 16 --producer-props linger.ms=5
//! batch.size=16384`, interleaved, medians, 2 CPUs, each with its default shard count):
//! 2.30 M → 4.30 M records/s (1.87×), client CPU 0.636 → 0.342 s per million records, peak RSS
//! 23.2 → 13.2 MiB, p99 8.4 → 5.2 ms. `BENCHMARKS.md` has the peer comparison.
//!
//! Order: a partition's lock orders its appends. Records of one thread to one partition are in
//! send order; records of several threads to one partition are in the order they took the
//! lock, which is the order of the batch, of the log and of the acknowledgements. Closed
//! batches wait in `ready` in that order, and the shard takes them in that order, the open one
//! last. A `flush`, a transaction's barrier or a `close` pushed to a shard's inbox after a
//! record's `send` returned finds that record: the shard takes every queue it knows of, open
//! batches too, before it handles the command (`runtime::intake`), and a queue's notice is in
//! the inbox before its first record's `send` returns.
//!
//! Bound: a new batch's buffer (`batch.size`, or one record's size when larger) is reserved in
//! `buffer.memory` before the batch is opened, outside the partition's lock, as Java's
//! `BufferPool.allocate` does; appends into an open batch reserve nothing more. The shard gives
//! the reservation back once, when the batch completes.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::BytesMut;

use crate::engine::batch::{BatchCompression, ProducerBatch};
use crate::engine::buffer_pool::BufferPool;
use crate::engine::compression_ratio::CompressionRatioEstimate;
use crate::engine::TopicPartition;
use crate::error::ProduceError;
use crate::protocol::compression::Codec;
use crate::protocol::record_batch::Header;
use crate::runtime::buffer_memory::{release_sink, BufferMemory};
use crate::runtime::command::{QueueNotice, ShardCommand};
use crate::runtime::completion::{BatchCompletion, Outcome};
use crate::runtime::delivery_handle::{Callback, RecordCallback};
use crate::runtime::inbox::ShardInbox;
use crate::runtime::partition_queue::{OpenBatch, PartitionQueue, BATCH_MEMORY_OVERHEAD};

/// A topic's partition queues and its compression estimate.
struct TopicQueues {
    topic: Arc<str>,
    partitions: Vec<Arc<PartitionQueue>>,
    compression: Option<BatchCompression>,
}

/// Every partition queue of a producer, and what opening a batch needs.
pub(crate) struct Accumulator {
    /// Tells this producer's entries in a thread's cache from another's.
    id: u64,
    topics: RwLock<HashMap<Arc<str>, Arc<TopicQueues>>>,
    inboxes: Vec<Arc<ShardInbox>>,
    /// The batch buffers for each shard's partitions, shared with its engine (the producer
    /// gives every shard the same pool).
    pools: Vec<Arc<BufferPool>>,
    memory: Arc<BufferMemory>,
    shard_for: fn(&TopicPartition, usize) -> usize,
    /// A batch's size bound: `batch.size`, capped by `max.request.size`.
    batch_size: usize,
    codec: Codec,
}

/// A calling thread's last topic (most threads send to one topic at a time).
struct CachedTopic {
    accumulator: u64,
    queues: Arc<TopicQueues>,
}

thread_local! {
    static LAST_QUEUES: std::cell::RefCell<Option<CachedTopic>> = const { std::cell::RefCell::new(None) };
}

static ACCUMULATORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One record to append, borrowed from the caller.
pub(crate) struct Append<'a> {
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header<'a>],
    /// Its encoded size bound with the batch header (`RECORD_BATCH_OVERHEAD`).
    pub upper_bound: usize,
    pub txn_barrier: u64,
}

/// Where an appended record is: its batch's completion and its place in the batch.
pub(crate) struct Appended {
    pub completion: Arc<BatchCompletion>,
    pub index: u32,
}

impl Accumulator {
    pub(crate) fn new(
        inboxes: Vec<Arc<ShardInbox>>,
        pools: Vec<Arc<BufferPool>>,
        memory: Arc<BufferMemory>,
        shard_for: fn(&TopicPartition, usize) -> usize,
        batch_size: usize,
        codec: Codec,
    ) -> Accumulator {
        Accumulator {
            id: ACCUMULATORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            topics: RwLock::default(),
            inboxes,
            pools,
            memory,
            shard_for,
            batch_size,
            codec,
        }
    }

    /// Runs `f` with the queue of `topic`-`partition` (made on first use).
    ///
    /// The calling thread's last topic is taken out of its cache for the call and put back
    /// after, so the common case (the same topic as the thread's last send) moves no reference
    /// count: a count shared with the shard that takes the queue's batches would be a write to
    /// a cache line of another thread per record. A send made inside `f` (a callback that
    /// sends again) finds the cache empty and looks its topic up.
    pub(crate) fn with_queue<R>(
        &self,
        topic: &Arc<str>,
        partition: i32,
        f: impl FnOnce(&Arc<PartitionQueue>) -> R,
    ) -> R {
        let index = partition as usize;
        let cached = LAST_QUEUES
            .with(|last| last.take())
            .filter(|c| {
                c.accumulator == self.id
                    && (Arc::ptr_eq(&c.queues.topic, topic) || *c.queues.topic == **topic)
                    && index < c.queues.partitions.len()
            })
            .unwrap_or_else(|| CachedTopic {
                accumulator: self.id,
                queues: self.topic_queues(topic, index + 1),
            });
        let result = f(&cached.queues.partitions[index]);
        LAST_QUEUES.with(|last| last.replace(Some(cached)));
        result
    }

    /// `topic`'s queues, with at least `partitions` of them.
    fn topic_queues(&self, topic: &Arc<str>, partitions: usize) -> Arc<TopicQueues> {
        if let Some(queues) = self.topics.read().expect("queues lock").get(topic) {
            if queues.partitions.len() >= partitions {
                return queues.clone();
            }
        }
        let mut topics = self.topics.write().expect("queues lock");
        let existing = topics.get(topic).cloned();
        if let Some(queues) = &existing {
            if queues.partitions.len() >= partitions {
                return queues.clone();
            }
        }
        // A topic that grew keeps its queues (and their batches) and gains new ones.
        let mut all: Vec<Arc<PartitionQueue>> = existing
            .as_ref()
            .map(|q| q.partitions.clone())
            .unwrap_or_default();
        let compression = existing
            .as_ref()
            .map(|q| q.compression.clone())
            .unwrap_or_else(|| {
                (self.codec != Codec::None).then(|| BatchCompression {
                    codec: self.codec,
                    estimate: Arc::new(CompressionRatioEstimate::default()),
                })
            });
        for partition in all.len()..partitions {
            let tp = TopicPartition {
                topic: topic.clone(),
                partition: partition as i32,
            };
            let shard = (self.shard_for)(&tp, self.inboxes.len());
            all.push(Arc::new(PartitionQueue::new(
                tp,
                shard,
                self.memory.id(),
                self.pools[shard].clone(),
                compression.clone(),
            )));
        }
        let queues = Arc::new(TopicQueues {
            topic: topic.clone(),
            partitions: all,
            compression,
        });
        topics.insert(topic.clone(), queues.clone());
        queues
    }

    /// Appends `record` to `queue`'s open batch, opening a new one (and reserving its buffer
    /// in `buffer.memory` through `reserve`, which may wait) when there is none, it has no
    /// room, or it belongs to another transaction barrier. `reserve` is called at most once,
    /// never under the partition's lock. When it fails, the record's callback comes back with
    /// the error, not run.
    pub(crate) fn append<E>(
        &self,
        queue: &Arc<PartitionQueue>,
        record: &Append<'_>,
        callback: Option<Callback>,
        reserve: impl FnOnce(usize) -> Result<(), E>,
    ) -> Result<Appended, (E, Option<Callback>)> {
        let mut callback = callback;
        let mut reserve = Some(reserve);
        // A buffer reserved for a new batch, while the lock was let go.
        let mut fresh: Option<(BytesMut, usize)> = None;
        let pool = &self.pools[queue.shard];
        let inbox = &self.inboxes[queue.shard];
        loop {
            let mut state = queue.lock();
            if let Some(err) = &state.shut {
                let err = err.clone();
                drop(state);
                self.give_back(pool, fresh);
                let outcome = Outcome::Failed(Box::new(err));
                if let Some(callback) = callback.take() {
                    callback(outcome.clone(), record.timestamp);
                }
                let completion = Arc::new(BatchCompletion::done(outcome));
                return Ok(Appended {
                    completion,
                    index: 0,
                });
            }
            if let Some(open) = state.open.as_mut() {
                if open.txn_barrier == record.txn_barrier
                    && open.batch.try_append_encoded(
                        record.timestamp,
                        record.key,
                        record.value,
                        record.headers,
                    )
                {
                    let appended = Appended {
                        completion: open.completion.clone(),
                        index: open.batch.record_count as u32 - 1,
                    };
                    push_callback(open, &mut callback, appended.index, record.timestamp);
                    let full = open.batch.is_full();
                    if full {
                        let open = state.open.take().expect("open");
                        state.ready.push_back(open.close(self.memory.id(), pool));
                    }
                    drop(state);
                    if full {
                        inbox.nudge();
                    }
                    self.give_back(pool, fresh);
                    return Ok(appended);
                }
            }
            let Some((buffer, reserved)) = fresh.take() else {
                drop(state);
                let capacity = self.batch_size.max(record.upper_bound);
                let buffer = pool.allocate(capacity);
                // Capped by the whole of `buffer.memory`, which a lone record always fits in
                // (`send` checks), so that a `batch.size` above it still lets batches open.
                let reserved = (buffer.capacity() + BATCH_MEMORY_OVERHEAD).min(self.memory.limit());
                if let Err(err) = (reserve.take().expect("reserved once"))(reserved) {
                    pool.deallocate(buffer);
                    return Err((err, callback));
                }
                fresh = Some((buffer, reserved));
                continue;
            };
            // A batch that could not take the record closes; the shard is told below.
            let closed_one = match state.open.take() {
                Some(open) => {
                    state.ready.push_back(open.close(self.memory.id(), pool));
                    true
                }
                None => false,
            };
            let created = inbox.epoch().elapsed().as_micros() as u64;
            let max_size = self.batch_size.max(record.upper_bound);
            let compression = queue.compression.clone();
            let mut batch = ProducerBatch::with_buffer(
                buffer,
                created,
                record.timestamp,
                max_size,
                compression,
            );
            let took = batch.try_append_encoded(
                record.timestamp,
                record.key,
                record.value,
                record.headers,
            );
            debug_assert!(took, "an empty batch takes one record");
            let mut open = OpenBatch {
                batch,
                completion: Arc::new(BatchCompletion::new()),
                callbacks: Vec::new(),
                txn_barrier: record.txn_barrier,
                reserved,
            };
            let appended = Appended {
                completion: open.completion.clone(),
                index: 0,
            };
            push_callback(&mut open, &mut callback, 0, record.timestamp);
            let full = open.batch.is_full();
            if full {
                state.ready.push_back(open.close(self.memory.id(), pool));
            } else {
                state.open = Some(open);
            }
            let wake_now = closed_one || full;
            if !std::mem::replace(&mut state.noticed, true) {
                // Under the partition's lock, so that the notice is in the inbox before any
                // later command that must find this batch.
                let notice = ShardCommand::Queue(QueueNotice::new(queue.clone()));
                if let Err(refused) = inbox.push_notice(notice, wake_now) {
                    // The shard has closed its inbox: nothing here will be taken.
                    state.noticed = false;
                    drop(state);
                    drop(refused);
                    queue.shut(ProduceError::Closed);
                    release_sink::flush_to(&self.memory);
                    return Ok(appended);
                }
            } else if wake_now {
                drop(state);
                inbox.nudge();
            }
            return Ok(appended);
        }
    }

    /// About what opening a batch for a record of `upper_bound` bytes reserves: a pooled
    /// buffer may be up to twice `batch.size`, and then reserves its capacity.
    pub(crate) fn batch_reservation(&self, upper_bound: usize) -> usize {
        (self.batch_size.max(upper_bound) + BATCH_MEMORY_OVERHEAD).min(self.memory.limit())
    }

    /// Gives back a buffer reserved for a batch that was not opened.
    fn give_back(&self, pool: &BufferPool, fresh: Option<(BytesMut, usize)>) {
        if let Some((buffer, reserved)) = fresh {
            pool.deallocate(buffer);
            self.memory.release(reserved);
        }
    }
}

fn push_callback(
    open: &mut OpenBatch,
    callback: &mut Option<Callback>,
    index: u32,
    timestamp: i64,
) {
    if let Some(callback) = callback.take() {
        open.callbacks.push(RecordCallback {
            index,
            timestamp,
            callback,
        });
    }
}
