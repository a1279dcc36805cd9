//! The public producer: a builder over Java-named configuration, `send` from any thread, and
//! `flush` / `close`.

pub(crate) mod delivery;
mod record;
pub(crate) mod shared;
mod transaction;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use glommio::{LocalExecutorBuilder, Placement};

use crate::config::{ProducerConfig, ProducerConfigBuilder};
use crate::engine::batch::record_size_upper_bound;
use crate::engine::{EngineConfig, TopicPartition};
use crate::error::{Error, ProduceError};
use crate::partitioner::{partition_for_key, StickyPartitioner};
use crate::protocol::record_batch::{Header, RECORD_BATCH_OVERHEAD};
use crate::runtime::shard::{run_shard, Latch, OwnedRecord, ShardCommand, ShardContext};
use crate::runtime::ticket_ring::TicketRing;
use crate::runtime::txn_driver::{control_queue, ControlSender, TxnStatus};
use crate::runtime::{self, RuntimeCounters, RuntimeError, RuntimeStats};

pub use delivery::DeliveryFuture;
pub use record::{ProducerRecord, RecordHeader};

use delivery::DeliveryHandle;
use shared::{BufferMemory, MetadataSnapshot};

/// Commands queued per shard before `send` waits (the byte bound is `buffer.memory`).
const SHARD_QUEUE_CAPACITY: usize = 1 << 16;
/// Room in the identity ticket ring. Tickets are rare (one install, one per bump request) and
/// every shard reads the ring on every loop, so a full ring only delays a ticket (its shard
/// keeps it and publishes it again).
const IDENTITY_TICKETS: usize = 256;

/// Builds a [`Producer`] from Java property names and values, or typed setters.
#[derive(Debug, Clone, Default)]
pub struct ProducerBuilder {
    config: ProducerConfigBuilder,
}

impl ProducerBuilder {
    /// Sets a configuration property by its Java name, e.g. `set("linger.ms", "10")`.
    pub fn set(mut self, key: &str, value: impl Into<String>) -> Self {
        self.config = self.config.set(key, value);
        self
    }

    /// Applies typed settings through the configuration builder.
    pub fn config(
        mut self,
        f: impl FnOnce(ProducerConfigBuilder) -> ProducerConfigBuilder,
    ) -> Self {
        self.config = f(self.config);
        self
    }

    pub fn bootstrap_servers(self, servers: impl Into<String>) -> Self {
        self.config(|c| c.bootstrap_servers(servers))
    }

    pub fn linger(self, linger: Duration) -> Self {
        self.config(|c| c.linger(linger))
    }

    pub fn batch_size(self, bytes: usize) -> Self {
        self.config(|c| c.batch_size(bytes))
    }

    pub fn shards(self, shards: usize) -> Self {
        self.config(|c| c.shards(shards))
    }

    /// Validates the configuration, checks io_uring and starts the shards.
    pub fn build(self) -> Result<Producer, Error> {
        let config = self.config.build()?;
        Producer::start(config)
    }
}

struct Inner {
    config: ProducerConfig,
    shards: Vec<flume::Sender<ShardCommand>>,
    metadata: Arc<MetadataSnapshot>,
    memory: Arc<BufferMemory>,
    sticky: Mutex<HashMap<Arc<str>, StickyPartitioner>>,
    joins: Mutex<Vec<glommio::ExecutorJoinHandle<()>>>,
    closed: AtomicBool,
    /// `close` sets `closed` under the write side; `send` and `flush` queue under the read
    /// side after checking it. So every record and flush queued on a shard is ahead of its
    /// `Close` command, and none is left behind in a queue nobody reads.
    open: std::sync::RwLock<()>,
    requested: Mutex<std::collections::HashSet<Arc<str>>>,
    cores: Vec<usize>,
    counters: Arc<RuntimeCounters>,
    /// Each shard's control queue; the owner's takes the transaction calls.
    control: Vec<ControlSender>,
    txn_status: Arc<TxnStatus>,
}

/// A Kafka producer. `Send + Sync`: share it between threads (e.g. in an `Arc`).
pub struct Producer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("shards", &self.inner.shards.len())
            .field("cores", &self.inner.cores)
            .finish()
    }
}

impl Producer {
    pub fn builder() -> ProducerBuilder {
        ProducerBuilder::default()
    }

    fn start(config: ProducerConfig) -> Result<Producer, Error> {
        runtime::io_uring_preflight()?;
        let online = runtime::online_cores();
        let cores: Vec<usize> = match (&config.cores, config.shards) {
            (Some(cores), _) => {
                for &cpu in cores {
                    if !online.contains(&cpu) {
                        return Err(RuntimeError::CoreNotOnline {
                            cpu,
                            online: online.clone(),
                        }
                        .into());
                    }
                }
                cores.clone()
            }
            (None, Some(n)) => (0..n).map(|i| online[i % online.len()]).collect(),
            (None, None) => online.clone(),
        };
        let shard_count = cores.len().max(1);
        let mut senders = Vec::with_capacity(shard_count);
        let mut receivers = Vec::with_capacity(shard_count);
        let mut control = Vec::with_capacity(shard_count);
        for _ in 0..shard_count {
            let (tx, rx) = flume::bounded(SHARD_QUEUE_CAPACITY);
            let (control_tx, control_rx) = control_queue();
            senders.push(tx);
            receivers.push((rx, control_rx));
            control.push(control_tx);
        }
        let txn_status = Arc::new(TxnStatus::default());
        let metadata = Arc::new(MetadataSnapshot::default());
        let tickets = Arc::new(TicketRing::new(IDENTITY_TICKETS, shard_count));
        let counters = RuntimeCounters::new(shard_count);
        let ctx = Arc::new(ShardContext {
            metadata: metadata.clone(),
            tickets,
            peers: senders.clone(),
            control: control.clone(),
            txn_status: txn_status.clone(),
            max_frame: config.max_response_size,
            connection_setup_timeout: config.socket_connection_setup_timeout,
            counters: counters.clone(),
        });
        let mut joins = Vec::with_capacity(shard_count);
        for (index, (rx, control_rx)) in receivers.into_iter().enumerate() {
            let engine_config = EngineConfig::from_producer_config(&config, index == 0);
            let ctx = ctx.clone();
            let mut builder = LocalExecutorBuilder::new(Placement::Fixed(cores[index]))
                .name(&format!("kacrab-shard-{index}"))
                .io_memory(config.io_memory);
            if let Some(spin) = config.spin_before_park {
                builder = builder.spin_before_park(spin);
            }
            let join =
                builder
                    .spawn(move || async move {
                        run_shard(index, engine_config, rx, control_rx, ctx).await
                    })
                    .map_err(|e| RuntimeError::ShardStart {
                        shard: index,
                        reason: e.to_string(),
                    })?;
            joins.push(join);
        }
        Ok(Producer {
            inner: Arc::new(Inner {
                memory: Arc::new(BufferMemory::new(config.buffer_memory)),
                config,
                shards: senders,
                metadata,
                sticky: Mutex::new(HashMap::new()),
                joins: Mutex::new(joins),
                closed: AtomicBool::new(false),
                open: std::sync::RwLock::new(()),
                requested: Mutex::new(Default::default()),
                cores,
                counters,
                control,
                txn_status,
            }),
        })
    }

    /// The configuration in force (after Java's post-processing).
    pub fn config(&self) -> &ProducerConfig {
        &self.inner.config
    }

    /// The CPU each shard is pinned to, by shard index.
    pub fn shard_cores(&self) -> &[usize] {
        &self.inner.cores
    }

    /// Bytes of records accepted and not yet completed (bounded by `buffer.memory`).
    pub fn buffered_bytes(&self) -> usize {
        self.inner.memory.used()
    }

    /// The runtime's sockets, tasks, connection failures and per-shard engine counters.
    pub fn runtime_stats(&self) -> RuntimeStats {
        self.inner.counters.snapshot()
    }

    /// The runtime's counters, still readable after every handle of this producer is gone.
    pub fn runtime_watch(&self) -> runtime::RuntimeWatch {
        runtime::RuntimeWatch(self.inner.counters.clone())
    }

    /// Waits until `condition` holds of [`runtime_stats`](Self::runtime_stats), checked
    /// again whenever the runtime's counters change (no polling); false if `timeout` passed
    /// first. For readiness checks: say, every shard connected.
    pub fn wait_for_runtime_stats(
        &self,
        timeout: Duration,
        condition: impl FnMut(&RuntimeStats) -> bool,
    ) -> bool {
        self.inner.counters.wait_until(timeout, condition)
    }

    /// The shard that owns a partition: stable for the producer's life.
    fn shard_for(&self, tp: &TopicPartition) -> usize {
        let mut hash: u32 = 0x811c9dc5;
        for b in tp.topic.as_bytes() {
            hash = (hash ^ *b as u32).wrapping_mul(0x01000193);
        }
        (hash as usize).wrapping_add(tp.partition as usize) % self.inner.shards.len()
    }

    /// Sends one record. Never blocks longer than `max.block.ms` (metadata for a new topic,
    /// or room in `buffer.memory`). The future resolves when the record is acknowledged or
    /// has failed; a record that cannot be sent at all resolves at once with its error.
    pub fn send(&self, record: ProducerRecord) -> DeliveryFuture {
        match self.try_send(record) {
            Ok(future) => future,
            Err(err) => DeliveryFuture::failed(err),
        }
    }

    fn try_send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProduceError> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(ProduceError::Closed);
        }
        if let Some(err) = inner.metadata.fatal() {
            return Err(err);
        }
        let txn_barrier = if inner.config.transactional_id.is_some() {
            inner
                .txn_status
                .check_send()
                .map_err(ProduceError::Transaction)?
        } else {
            0
        };
        let deadline = Instant::now() + inner.config.max_block;
        let headers: Vec<Header<'_>> = record
            .headers
            .iter()
            .map(|h| Header {
                key: h.key.as_str(),
                value: h.value.as_deref(),
            })
            .collect();
        let size = RECORD_BATCH_OVERHEAD
            + record_size_upper_bound(record.key.as_deref(), record.value.as_deref(), &headers);
        drop(headers);
        if size > inner.config.max_request_size {
            return Err(ProduceError::RecordTooLarge {
                size,
                limit: inner.config.max_request_size,
                key: "max.request.size",
            });
        }
        if size > inner.config.buffer_memory {
            return Err(ProduceError::RecordTooLarge {
                size,
                limit: inner.config.buffer_memory,
                key: "buffer.memory",
            });
        }
        let info = self.topic_info(&record.topic, deadline)?;
        let partition = match record.partition {
            Some(p) if p < 0 || p >= info => {
                return Err(ProduceError::InvalidPartition {
                    topic: record.topic.clone(),
                    partition: p,
                    partition_count: info,
                })
            }
            Some(p) => p,
            None => match (&record.key, inner.config.partitioner_ignore_keys) {
                (Some(key), false) => partition_for_key(key, info),
                _ => {
                    let mut sticky = inner.sticky.lock().expect("sticky lock");
                    let state = sticky
                        .entry(record.topic.clone())
                        .or_insert_with(|| StickyPartitioner::new(inner.config.batch_size.max(1)));
                    let p = state.partition(info, &[], seed());
                    state.on_append(size);
                    p
                }
            },
        };
        inner.memory.reserve(size, deadline)?;
        let (delivery, future) = DeliveryHandle::new(inner.memory.clone(), size);
        let timestamp = record.timestamp.unwrap_or_else(now_millis);
        let tp = TopicPartition {
            topic: record.topic,
            partition,
        };
        let shard = self.shard_for(&tp);
        let command = ShardCommand::Append(Box::new(OwnedRecord {
            tp,
            timestamp,
            key: record.key,
            value: record.value,
            headers: record
                .headers
                .into_iter()
                .map(|h| (h.key, h.value))
                .collect(),
            delivery,
            txn_barrier,
        }));
        let wait = deadline.saturating_duration_since(Instant::now());
        let _open = inner.open.read().expect("open lock");
        if inner.closed.load(Ordering::Acquire) {
            // The command's delivery handle completes the record with `Closed` as it drops.
            return Err(ProduceError::Closed);
        }
        if let Err(e) = inner.shards[shard].send_timeout(command, wait) {
            let err = match e {
                flume::SendTimeoutError::Timeout(_) => ProduceError::BufferExhausted {
                    buffer_memory: inner.config.buffer_memory,
                    waited: inner.config.max_block,
                },
                flume::SendTimeoutError::Disconnected(_) => ProduceError::Closed,
            };
            // The command (and its delivery handle) came back: complete it so the memory is
            // returned, and hand the caller the error.
            let returned = match e {
                flume::SendTimeoutError::Timeout(c) | flume::SendTimeoutError::Disconnected(c) => c,
            };
            if let ShardCommand::Append(record) = returned {
                crate::engine::Delivery::complete(record.delivery, Err(err.clone()));
            }
            return Err(err);
        }
        Ok(future)
    }

    /// The partition count of `topic`, waiting for metadata up to `deadline`.
    fn topic_info(&self, topic: &Arc<str>, deadline: Instant) -> Result<i32, ProduceError> {
        if let Some(info) = self
            .inner
            .metadata
            .get(topic)
            .filter(|i| i.partition_count > 0)
        {
            return Ok(info.partition_count);
        }
        let first_ask = self
            .inner
            .requested
            .lock()
            .expect("requested lock")
            .insert(topic.clone());
        if first_ask || self.inner.metadata.get(topic).is_none() {
            let _ = self.inner.shards[0].send(ShardCommand::RequestTopic(topic.clone()));
        }
        let started = Instant::now();
        self.inner
            .metadata
            .wait_for(topic, deadline)
            .map(|i| i.partition_count)
            .map_err(|last| match self.inner.metadata.fatal() {
                Some(err) => err,
                None => ProduceError::MetadataTimeout {
                    topic: topic.clone(),
                    waited: started.elapsed(),
                    last_error: last.map(crate::protocol::error_code::name),
                },
            })
    }

    /// Sends everything queued now and waits until every record sent before this call has
    /// completed (successfully or not).
    pub fn flush(&self) {
        let latch = Latch::new(self.inner.shards.len());
        let _open = self.inner.open.read().expect("open lock");
        if self.inner.closed.load(Ordering::Acquire) {
            // `close` completes every record.
            return;
        }
        for shard in &self.inner.shards {
            if shard.send(ShardCommand::Flush(latch.clone())).is_err() {
                latch.count_down();
            }
        }
        latch.wait(None);
    }

    /// Aborts a transaction still open (a commit under way completes), flushes, then stops
    /// the shards, all within `timeout`. Records still incomplete then fail with
    /// `ProduceError::Closed`, or `OutcomeUnknown` when an attempt of theirs may have landed
    /// (on the wire, or answered ambiguously and waiting for its retry). Dropping the last
    /// handle of a producer closes it with `delivery.timeout.ms`.
    pub fn close(&self, timeout: Duration) {
        self.inner.close(timeout);
    }
}

impl Inner {
    /// Once per producer: by `close`, or by the drop of the last handle.
    fn close(&self, timeout: Duration) {
        {
            let _no_sends = self.open.write().expect("open lock");
            if self.closed.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        let deadline = Instant::now() + timeout;
        self.end_open_transaction(timeout);
        let latch = Latch::new(self.shards.len());
        for shard in &self.shards {
            if shard
                .send(ShardCommand::Close {
                    deadline,
                    done: latch.clone(),
                })
                .is_err()
            {
                latch.count_down();
            }
        }
        latch.wait(None);
        for join in self.joins.lock().expect("joins lock").drain(..) {
            let _ = join.join();
        }
    }
}

/// The last `Producer` handle is gone (an `Arc` drops its value exactly once, however many
/// clones are dropped at the same time): flush within `delivery.timeout.ms` and stop the
/// shards, which hold no handle of their own and so never see the producer go.
impl Drop for Inner {
    fn drop(&mut self) {
        self.close(self.config.delivery_timeout);
    }
}

impl Clone for Producer {
    fn clone(&self) -> Self {
        Producer {
            inner: self.inner.clone(),
        }
    }
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9e3779b97f4a7c15)
        | 1
}
