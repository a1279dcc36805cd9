//! The public producer: a builder over Java-named configuration, `send` from any thread, and
//! `flush` / `close`.

pub(crate) mod accumulator;
mod async_wait;
mod close;
pub(crate) mod delivery;
mod on_shard;
mod partition_choice;
pub(crate) mod record;
mod send_async;
mod send_batch;
mod sticky;
mod transaction;
mod try_send_error;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use glommio::{LocalExecutorBuilder, Placement};

use crate::config::{ProducerConfig, ProducerConfigBuilder};
use crate::engine::batch::record_size_upper_bound;
use crate::engine::buffer_pool::BufferPool;
use crate::engine::{EngineConfig, RecordMetadata, TopicPartition};
use crate::error::{Error, ProduceError, RuntimeError};
use crate::metrics::{CallTimes, MetricsBoard, ProducerMetrics};
use crate::partitioner::Partitioner;
use crate::protocol::record_batch::RECORD_BATCH_OVERHEAD;
use crate::runtime::buffer_memory::BufferMemory;
use crate::runtime::command::{CloseDeadline, Countdown, Latch, ShardCommand};
use crate::runtime::completion::Outcome;
use crate::runtime::delivery_handle::Callback;
use crate::runtime::inbox::{ShardInbox, WakePolicy};
use crate::runtime::metadata_snapshot::MetadataSnapshot;
use crate::runtime::partition_load::PartitionLoads;
use crate::runtime::partition_queue::BATCH_MEMORY_OVERHEAD;
use crate::runtime::shard::{run_shard, ShardContext};
use crate::runtime::ticket_ring::TicketRing;
use crate::runtime::txn_driver::{control_queue, ControlSender, TxnStatus, OWNER};
use crate::runtime::{self, RuntimeCounters, RuntimeStats};

pub use delivery::DeliveryFuture;
use delivery::Queued;
pub use on_shard::{ShardTask, ShardTaskError};
pub use record::{ProducerRecord, RecordHeader};
pub use send_batch::BatchDelivery;
pub use try_send_error::TrySendError;

use accumulator::{Accumulator, Append};
use partition_choice::{Custom, PartitionChoice};

/// Room in the identity ticket ring. Tickets are rare (one install, one per bump request) and
/// every shard reads the ring on every loop, so a full ring only delays a ticket (its shard
/// keeps it and publishes it again).
const IDENTITY_TICKETS: usize = 256;
/// The longest `Producer::metrics` waits for the shards to publish their counters.
const METRICS_WAIT: Duration = Duration::from_secs(1);

/// Builds a [`Producer`] from Java property names and values, or typed setters.
#[derive(Debug, Clone, Default)]
pub struct ProducerBuilder {
    config: ProducerConfigBuilder,
    partitioner: Option<Custom>,
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

    /// Sets `bootstrap.servers`: `host:port` pairs, separated by commas.
    pub fn bootstrap_servers(self, servers: impl Into<String>) -> Self {
        self.config(|c| c.bootstrap_servers(servers))
    }

    /// Sets `linger.ms`: how long a batch waits for more records before it is sent.
    pub fn linger(self, linger: Duration) -> Self {
        self.config(|c| c.linger(linger))
    }

    /// Sets `batch.size`: the bytes a batch holds before it is sent without waiting.
    pub fn batch_size(self, bytes: usize) -> Self {
        self.config(|c| c.batch_size(bytes))
    }

    /// Sets `kacrab.shards`: how many shard threads the producer runs.
    pub fn shards(self, shards: usize) -> Self {
        self.config(|c| c.shards(shards))
    }

    /// Installs the OAUTHBEARER token provider for `sasl.mechanism=OAUTHBEARER`: called on a
    /// shard thread for each authentication (each new connection and each
    /// re-authentication), so it must not block for long; return a token fetched ahead of
    /// time. An `Err` fails the producer with [`ProduceError::Authentication`].
    pub fn oauth_token_provider(
        self,
        provider: impl Fn() -> Result<crate::config::OAuthBearerToken, String> + Send + Sync + 'static,
    ) -> Self {
        self.config(|c| c.oauth_token_provider(provider))
    }

    /// Installs the application's own [`Partitioner`] in place of the built-in one: it
    /// chooses the partition of every record sent without one (Java's `partitioner.class`).
    pub fn partitioner(mut self, partitioner: impl Partitioner + 'static) -> Self {
        self.partitioner = Some(Custom(Arc::new(partitioner)));
        self
    }

    /// Validates the configuration, checks io_uring and starts the shards.
    pub fn build(self) -> Result<Producer, Error> {
        let config = self.config.build()?;
        Producer::start(config, self.partitioner)
    }
}

struct Inner {
    config: ProducerConfig,
    inboxes: Vec<Arc<ShardInbox>>,
    /// Every partition's open and closed batches, filled by the sending threads.
    accumulator: Accumulator,
    metadata: Arc<MetadataSnapshot>,
    memory: Arc<BufferMemory>,
    /// How a record's partition is chosen.
    partition_choice: PartitionChoice,
    joins: Mutex<Vec<glommio::ExecutorJoinHandle<()>>>,
    /// Set first thing by `close`: sends are refused from then on. A send that checked it
    /// just before is still safe: a shard's inbox refuses pushes behind its `Close`, so no
    /// record is left in a queue nobody reads.
    closed: AtomicBool,
    /// Counted down by each shard as it stops (closed, or dead): the producer is closed when
    /// it reaches zero. Every `close` call waits on it, not only the first.
    stopped: Arc<Latch>,
    /// When the closing shards give up (`close`).
    close_by: Arc<CloseDeadline>,
    requested: Mutex<std::collections::HashSet<Arc<str>>>,
    cores: Vec<usize>,
    counters: Arc<RuntimeCounters>,
    /// Where the shards publish their metrics (`Producer::metrics`).
    pub(crate) metrics: Arc<MetricsBoard>,
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
            .field("shards", &self.inner.inboxes.len())
            .field("cores", &self.inner.cores)
            .finish()
    }
}

impl Producer {
    /// A builder with every configuration key at its default.
    pub fn builder() -> ProducerBuilder {
        ProducerBuilder::default()
    }

    fn start(config: ProducerConfig, partitioner: Option<Custom>) -> Result<Producer, Error> {
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
            (None, None) => runtime::default_shard_cores(),
        };
        let shard_count = cores.len().max(1);
        runtime::io_uring_preflight(shard_count, config.io_memory)?;
        let wake = WakePolicy {
            linger_us: config.linger.as_micros().try_into().unwrap_or(u64::MAX),
        };
        let inboxes: Vec<Arc<ShardInbox>> = (0..shard_count)
            .map(|_| Arc::new(ShardInbox::new(wake)))
            .collect();
        let mut receivers = Vec::with_capacity(shard_count);
        let mut control = Vec::with_capacity(shard_count);
        for inbox in &inboxes {
            let (control_tx, control_rx) = control_queue();
            receivers.push((inbox.clone(), control_rx));
            control.push(control_tx);
        }
        let memory = Arc::new(BufferMemory::new(config.buffer_memory));
        let txn_status = Arc::new(TxnStatus::default());
        let metadata = Arc::new(MetadataSnapshot::default());
        let loads = Arc::new(PartitionLoads::default());
        // As in Java, an application's partitioner turns adaptive partitioning off, and with
        // it `partitioner.availability.timeout.ms`.
        let adaptive = config.partitioner_adaptive && partitioner.is_none();
        let partition_choice = PartitionChoice {
            producer: sticky::next_producer_id(),
            custom: partitioner,
            loads: loads.clone(),
            ignore_keys: config.partitioner_ignore_keys,
            adaptive,
            batch_size: config.batch_size,
        };
        let stopped = Latch::new(shard_count);
        let close_by = Arc::new(CloseDeadline::default());
        let tickets = Arc::new(TicketRing::new(IDENTITY_TICKETS, shard_count));
        let counters = RuntimeCounters::new(shard_count);
        let metrics = Arc::new(MetricsBoard::new(
            config.client_id.clone(),
            runtime::shared_gauges(memory.clone(), counters.clone()),
            shard_count,
        ));
        let ctx = Arc::new(ShardContext {
            metadata: metadata.clone(),
            loads: loads.clone(),
            tickets,
            inboxes: inboxes.clone(),
            memory: memory.clone(),
            control: control.clone(),
            txn_status: txn_status.clone(),
            max_frame: config.max_response_size,
            connection_setup_timeout: config.socket_connection_setup_timeout,
            tls: config.tls.as_ref().map(|tls| tls.client_config()),
            counters: counters.clone(),
            metrics: metrics.clone(),
            stopped: stopped.clone(),
            close_by: close_by.clone(),
            transaction_version: config.transaction_version,
        });
        let engine_configs: Vec<EngineConfig> = (0..shard_count)
            .map(|index| {
                let mut engine = EngineConfig::for_shard(&config, index, shard_count);
                if !adaptive {
                    engine.partition_availability_timeout = 0;
                }
                engine
            })
            .collect();
        // One pool of batch buffers for every shard: a buffer any shard's batch gave back
        // serves the next batch of any partition. Idle buffers are outside `buffer.memory`'s
        // count; the pool keeps one only while the batches and every idle buffer fit in
        // `buffer.memory`, so that at the bound they are not memory on top of it, whatever the
        // shard count (`tuning/README.md`; `BufferMemory::idle_fits`).
        let batch_buffer_size = config.batch_size.min(config.max_request_size);
        let pool = {
            let memory = memory.clone();
            Arc::new(
                BufferPool::new(batch_buffer_size, config.buffer_memory)
                    .with_room(move |idle| memory.idle_fits(idle)),
            )
        };
        let pools: Vec<Arc<BufferPool>> = vec![pool; shard_count];
        let accumulator = Accumulator::new(
            inboxes.clone(),
            pools.clone(),
            memory.clone(),
            shard_for,
            batch_buffer_size,
            config.compression_codec(),
        );
        let mut joins = Vec::with_capacity(shard_count);
        for (index, ((rx, control_rx), engine_config)) in
            receivers.into_iter().zip(engine_configs).enumerate()
        {
            let pool = pools[index].clone();
            let ctx = ctx.clone();
            let mut builder = LocalExecutorBuilder::new(Placement::Fixed(cores[index]))
                .name(&format!("kacrab-shard-{index}"))
                .io_memory(config.io_memory);
            if let Some(spin) = config.spin_before_park {
                builder = builder.spin_before_park(spin);
            }
            let join = builder
                .spawn(move || async move {
                    run_shard(index, engine_config, pool, rx, control_rx, ctx).await
                })
                .map_err(|e| RuntimeError::ShardStart {
                    shard: index,
                    reason: e.to_string(),
                })?;
            joins.push(join);
        }
        Ok(Producer {
            inner: Arc::new(Inner {
                memory,
                config,
                inboxes,
                accumulator,
                metadata,
                partition_choice,
                joins: Mutex::new(joins),
                closed: AtomicBool::new(false),
                stopped,
                close_by,
                requested: Mutex::new(Default::default()),
                cores,
                counters,
                metrics,
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

    /// Bytes of `buffer.memory` in use: records accepted and not yet given back, and the
    /// capacity their batch buffers leave unused (bounded by `buffer.memory` plus an eighth of
    /// it, which only batches use).
    ///
    /// A batch's bytes are given back at the end of the shard turn that completed it, just
    /// after its records' futures complete (Java's `Sender.completeBatch` likewise completes a
    /// batch before it deallocates it): a completed future does not mean its bytes are free
    /// yet. Once [`flush`](Self::flush) returns on a producer that is not closing, the records
    /// it waited for hold none.
    pub fn buffered_bytes(&self) -> usize {
        self.inner.memory.used()
    }

    /// The runtime's sockets, tasks, connection failures and per-shard engine counters.
    pub fn runtime_stats(&self) -> RuntimeStats {
        self.inner.counters.snapshot()
    }

    /// A snapshot of the producer's metrics under Kafka's names, summed over every shard
    /// (see [`crate::metrics`] for what each counts, and how fresh it is). Also hands the
    /// snapshot to the `metrics` crate facade.
    pub fn metrics(&self) -> ProducerMetrics {
        // Every running shard publishes its counters first, so the snapshot is current. Not
        // from a shard's own thread (a delivery callback): that shard cannot answer while
        // it runs the callback, and the slots are at most `PUBLISH_INTERVAL` old anyway.
        if !runtime::shard::on_shard_thread() {
            // A closed inbox: that shard published its last counters as it stopped.
            let latch = self.inner.to_every_shard(ShardCommand::PublishMetrics);
            // Bounded: a shard stuck in a long turn only makes the snapshot older.
            latch.wait(Some(METRICS_WAIT));
        }
        let snapshot = self.inner.metrics.snapshot();
        snapshot.publish();
        snapshot
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

    /// Sends one record. Never blocks longer than `max.block.ms` in all, from the call to its
    /// return: the wait for a new topic's metadata and the wait for room in `buffer.memory`
    /// share that budget, as in Java. The future resolves when the record is acknowledged or
    /// has failed; a record that cannot be sent at all resolves at once with its error.
    ///
    /// On a shard thread (in a delivery callback) it never waits: `max.block.ms` counts as 0
    /// there, so a record without room or metadata fails at once with
    /// [`ProduceError::BufferExhausted`] or [`ProduceError::MetadataTimeout`]. Room there is
    /// freed by shards, perhaps the very one the callback holds up. A `close` wakes every send
    /// waiting for room or metadata, which then fails with [`ProduceError::Closed`].
    pub fn send(&self, record: ProducerRecord) -> DeliveryFuture {
        match self.send_record(record, Block::UpTo(self.max_block()), None) {
            Ok(queued) => queued.into(),
            Err(Refused::Failed(topic, err)) => DeliveryFuture::failed(topic, err),
            Err(Refused::WouldBlock(..)) => unreachable!("a blocking send waits"),
        }
    }

    /// Sends one record without ever blocking: when `buffer.memory` has no room for it, or
    /// its topic's metadata is not known yet, the record comes back in
    /// [`TrySendError`] and nothing was queued. Other failures resolve the future, as with
    /// [`send`](Self::send).
    pub fn try_send(&self, record: ProducerRecord) -> Result<DeliveryFuture, TrySendError> {
        match self.send_record(record, Block::Never, None) {
            Ok(queued) => Ok(queued.into()),
            Err(Refused::Failed(topic, err)) => Ok(DeliveryFuture::failed(topic, err)),
            Err(Refused::WouldBlock(record, why)) => Err(match why {
                WouldBlock::BufferFull => TrySendError::BufferFull(record),
                WouldBlock::MetadataPending => TrySendError::MetadataPending(record),
            }),
        }
    }

    /// Sends one record, as [`send`](Self::send), and runs `callback` with its result instead
    /// of returning a future: on the shard thread that completes it (keep it short, and do not
    /// block in it: the shard's other records wait), or on the calling thread, before this
    /// returns, when the record fails before it is queued. A panic in the callback is caught
    /// and logged. What the callback may call on a producer is in the README's "Threads"
    /// section: each call either completes without waiting for a shard or fails at once.
    pub fn send_with_callback(
        &self,
        record: ProducerRecord,
        callback: impl FnOnce(Result<RecordMetadata, ProduceError>) + Send + 'static,
    ) {
        let mut callback = Some(callback);
        let make = |topic: &Arc<str>, partition: i32, callback: &mut Option<_>| {
            delivery::callback(topic.clone(), partition, callback.take().expect("once"))
        };
        let block = Block::UpTo(self.max_block());
        let topic = record.topic.clone();
        match self.send_record(record, block, Some(&mut |t, p| make(t, p, &mut callback))) {
            Ok(_) => {}
            Err(Refused::Failed(_, err)) => {
                if let Some(callback) = callback.take() {
                    delivery::callback(topic, -1, callback)(Outcome::Failed(Box::new(err)), -1);
                }
            }
            Err(Refused::WouldBlock(..)) => unreachable!("a blocking send waits"),
        }
    }

    /// How long a send made now may wait for metadata and room: `max.block.ms`, or nothing on
    /// a shard thread, where waiting could wait for the shard that runs the caller.
    pub(crate) fn max_block(&self) -> Duration {
        if runtime::shard::on_shard_thread() {
            Duration::ZERO
        } else {
            self.inner.config.max_block
        }
    }

    fn send_record(
        &self,
        record: ProducerRecord,
        block: Block,
        callback: Option<MakeCallback<'_>>,
    ) -> Result<Queued, Refused> {
        let inner = &self.inner;
        let fail = |record: &ProducerRecord, err| Refused::Failed(record.topic.clone(), err);
        if inner.closed.load(Ordering::Acquire) {
            return Err(fail(&record, ProduceError::Closed));
        }
        if let Some(err) = inner.metadata.fatal() {
            return Err(fail(&record, err));
        }
        let txn_barrier = if inner.config.transactional_id.is_some() {
            match inner.txn_status.check_send() {
                Ok(barrier) => barrier,
                Err(err) => return Err(fail(&record, ProduceError::Transaction(err))),
            }
        } else {
            0
        };
        // A record refused from here on is one of the transaction checked under `txn_barrier`.
        let refuse = |record: &ProducerRecord, err: ProduceError| {
            self.refused_in_transaction(&err, txn_barrier);
            fail(record, err)
        };
        // The deadline is computed only on a path that waits (one clock read per send
        // otherwise: the timestamp), and once: the metadata wait and the wait for room share
        // one `max.block.ms` (Java subtracts the first from the second).
        let first_wait = std::cell::Cell::new(None::<Instant>);
        let deadline = |block: &Block| {
            let at = first_wait.get().unwrap_or_else(|| match block {
                Block::UpTo(max_block) => Instant::now() + *max_block,
                Block::Never => Instant::now(),
            });
            first_wait.set(Some(at));
            at
        };
        // The record's encoded size bound with a batch header: what a batch of it alone takes.
        let size = RECORD_BATCH_OVERHEAD + record_size_upper_bound_of(&record);
        if size > inner.config.max_request_size {
            return Err(refuse(
                &record,
                ProduceError::RecordTooLarge {
                    size,
                    limit: inner.config.max_request_size,
                    key: "max.request.size",
                },
            ));
        }
        // A batch of it alone, with its bookkeeping, must fit in `buffer.memory`.
        if size + BATCH_MEMORY_OVERHEAD > inner.config.buffer_memory {
            return Err(refuse(
                &record,
                ProduceError::RecordTooLarge {
                    size: size + BATCH_MEMORY_OVERHEAD,
                    limit: inner.config.buffer_memory,
                    key: "buffer.memory",
                },
            ));
        }
        let partition_count = match self.partition_count(&record.topic, &block, deadline) {
            Ok(count) => count,
            Err(None) => {
                return Err(Refused::WouldBlock(
                    Box::new(record),
                    WouldBlock::MetadataPending,
                ))
            }
            Err(Some(err)) => return Err(refuse(&record, err)),
        };
        let timestamp = record.timestamp.unwrap_or_else(now_millis);
        // The partitioner keeps its own xorshift state; the timestamp only stirs it.
        let partition = match inner.partition_choice.choose(
            &record,
            partition_count,
            size,
            timestamp as u64 | 1,
        ) {
            Ok(partition) => partition,
            Err(err) => return Err(refuse(&record, err)),
        };
        let headers = record::wire_headers(&record.headers);
        let append = Append {
            timestamp,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &headers,
            upper_bound: size,
            txn_barrier,
        };
        let callback = callback.map(|make| make(&record.topic, partition));
        // Room is reserved per batch, when one is opened (`accumulator`).
        let reserve = |bytes: usize| match block {
            Block::Never if !inner.memory.try_reserve(bytes) => Err(None),
            Block::Never => Ok(()),
            Block::UpTo(_) => inner
                .memory
                .reserve(bytes, || deadline(&block))
                .map_err(Some),
        };
        let appended = inner
            .accumulator
            .with_queue(&record.topic, partition, |queue| {
                inner.accumulator.append(queue, &append, callback, reserve)
            });
        match appended {
            Ok(appended) => Ok(Queued {
                completion: appended.completion,
                index: appended.index,
                timestamp,
                topic: record.topic,
                partition,
            }),
            Err((None, _)) => Err(Refused::WouldBlock(
                Box::new(record),
                WouldBlock::BufferFull,
            )),
            Err((Some(err), callback)) => {
                // The application's callback was wrapped for the batch: it runs here, on the
                // calling thread, as for any record that fails before it is queued.
                if let Some(callback) = callback {
                    callback(Outcome::Failed(Box::new(err.clone())), timestamp);
                }
                Err(refuse(&record, err))
            }
        }
    }

    /// `send` refused a record of the transaction checked under `txn_barrier` (a transactional
    /// producer): the owner is told, through shard 0's data queue, and the transaction becomes
    /// abortable (`Engine::txn_send_refused`), as Java's `doSend` does with an `ApiException`.
    /// The error reaches the application only through the record's future, which it may never
    /// read; a commit must not succeed without the record. Not for errors that already end the
    /// transaction's hope (a closed or fatal producer) or that say it was not open for sends.
    fn refused_in_transaction(&self, err: &ProduceError, txn_barrier: u64) {
        if self.inner.config.transactional_id.is_none()
            || matches!(
                err,
                ProduceError::Closed | ProduceError::Fatal(_) | ProduceError::Transaction(_)
            )
        {
            return;
        }
        // A closed inbox: the producer is closing, and its transaction will not commit.
        let _ = self.inner.inboxes[OWNER].push(ShardCommand::SendRefused {
            error: Box::new(err.clone()),
            txn_barrier,
        });
    }

    /// The partition count of `topic`: known, or waited for as `block` allows. `Err(None)`:
    /// not known and not to be waited for.
    fn partition_count(
        &self,
        topic: &Arc<str>,
        block: &Block,
        deadline: impl Fn(&Block) -> Instant,
    ) -> Result<i32, Option<ProduceError>> {
        if let Some(count) = self.inner.metadata.topic_partition_count(topic) {
            return Ok(count);
        }
        self.request_topic(topic);
        match block {
            Block::Never => Err(None),
            Block::UpTo(_) => self.topic_info(topic, deadline(block)).map_err(Some),
        }
    }

    /// Asks shard 0 for `topic`'s metadata, once per topic (and again while it has none).
    fn request_topic(&self, topic: &Arc<str>) {
        let first_ask = self
            .inner
            .requested
            .lock()
            .expect("requested lock")
            .insert(topic.clone());
        if first_ask || self.inner.metadata.get(topic).is_none() {
            let _ = self.inner.inboxes[0].push(ShardCommand::RequestTopic(topic.clone()));
        }
    }

    /// The partition count of `topic`, waiting for metadata up to `deadline` (already asked
    /// for).
    fn topic_info(&self, topic: &Arc<str>, deadline: Instant) -> Result<i32, ProduceError> {
        let started = Instant::now();
        self.inner
            .metadata
            .wait_for(topic, deadline)
            .map(|i| i.partition_count)
            .map_err(|last| match self.inner.metadata.fatal() {
                _ if self.inner.closed.load(Ordering::Acquire) => ProduceError::Closed,
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
    ///
    /// On a shard thread (in a delivery callback) it sends everything queued now and returns
    /// at once: it cannot wait for records that the shard running the callback must complete
    /// (Java refuses `flush` in a callback for the same reason).
    pub fn flush(&self) {
        self.flush_until(None);
    }

    /// [`flush`](Self::flush), waiting at most `timeout`: true when every record sent before
    /// the call has completed, false if some had not by then (they go on, and complete later).
    /// On a shard thread it returns false at once, as [`flush`](Self::flush) returns there.
    pub fn flush_timeout(&self, timeout: Duration) -> bool {
        self.flush_until(Some(timeout))
    }

    fn flush_until(&self, timeout: Option<Duration>) -> bool {
        let started = Instant::now();
        let done = self.flush_all(timeout);
        CallTimes::add(&self.inner.metrics.calls.flush, started);
        done
    }

    fn flush_all(&self, timeout: Option<Duration>) -> bool {
        let latch = self.inner.to_every_shard(ShardCommand::Flush);
        !runtime::shard::on_shard_thread() && latch.wait(timeout)
    }

    /// Fails every record sent before this call that no attempt has carried to a broker yet
    /// (still lingering in its batch, or waiting for a connection or metadata) with
    /// [`ProduceError::Purged`], whose promise is that the record is not in the log, and
    /// returns once every shard has done so. Records of which an attempt was sent are left to
    /// complete as usual: they may be in the log. In a transaction a purged record, like any
    /// failed one, makes the transaction abortable. A `send` still blocked on metadata or
    /// `buffer.memory` when this is called is not covered.
    ///
    /// On a shard thread (in a delivery callback) it asks every shard to purge and returns at
    /// once; each shard purges when it next takes its commands, after the callback.
    pub fn purge(&self) {
        let latch = self.inner.to_every_shard(ShardCommand::Purge);
        if !runtime::shard::on_shard_thread() {
            latch.wait(None);
        }
    }
}

#[cfg(feature = "testkit")]
impl Producer {
    /// Queues a command that makes `shard` panic when it handles it, in its driver loop or in
    /// a task it spawns (`in_task`); false when that shard's inbox is closed.
    pub(crate) fn inject_shard_panic(&self, shard: usize, in_task: bool) -> bool {
        self.inner.inboxes[shard]
            .push(ShardCommand::Panic { in_task })
            .is_ok()
    }

    /// Each partition of `topic` as the partitioner last saw it published: (queue, available).
    pub(crate) fn partition_load(&self, topic: &str) -> Option<Vec<(u32, bool)>> {
        let load = self.inner.partition_choice.loads.existing(topic)?;
        Some((0..load.len() as i32).filter_map(|p| load.get(p)).collect())
    }
}

impl Inner {
    /// Pushes `command(latch)` to every shard and returns the latch, which each shard counts
    /// down when done with it (a closed inbox at once: `close` completes every record).
    fn to_every_shard(&self, command: impl Fn(Countdown) -> ShardCommand) -> Arc<Latch> {
        let latch = Latch::new(self.inboxes.len());
        for inbox in &self.inboxes {
            // A refused command is dropped here, and its count with it.
            let _ = inbox.push(command(latch.share()));
        }
        latch
    }
}

/// Builds a record's callback once its partition is known (`send_with_callback`).
type MakeCallback<'a> = &'a mut dyn FnMut(&Arc<str>, i32) -> Callback;

/// How long a send may wait for metadata or memory.
enum Block {
    UpTo(Duration),
    Never,
}

/// Why a send did not queue its record.
enum Refused {
    /// Resolve the future with this error.
    Failed(Arc<str>, ProduceError),
    /// A non-blocking send would have had to wait: give the record back.
    WouldBlock(Box<ProducerRecord>, WouldBlock),
}

enum WouldBlock {
    BufferFull,
    MetadataPending,
}

/// The shard of `shards` that owns a partition: stable for the producer's life.
fn shard_for(tp: &TopicPartition, shards: usize) -> usize {
    let mut hash: u32 = 0x811c9dc5;
    for b in tp.topic.as_bytes() {
        hash = (hash ^ *b as u32).wrapping_mul(0x01000193);
    }
    (hash as usize).wrapping_add(tp.partition as usize) % shards
}

/// The bound on a record's encoded size, as `buffer.memory` and `max.request.size` count it.
fn record_size_upper_bound_of(record: &ProducerRecord) -> usize {
    let headers = record::wire_headers(&record.headers);
    record_size_upper_bound(record.key.as_deref(), record.value.as_deref(), &headers)
}

impl Clone for Producer {
    fn clone(&self) -> Self {
        Producer {
            inner: self.inner.clone(),
        }
    }
}

/// `send_async`'s future can be spawned on a multi-threaded executor (tokio's `spawn`): checked
/// at compile time.
#[allow(dead_code)]
fn send_async_is_send(
    producer: &Producer,
    record: ProducerRecord,
) -> impl std::future::Future<Output = DeliveryFuture> + Send + '_ {
    producer.send_async(record)
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
