//! Where the shards publish their counters and `Producer::metrics` reads them.
//!
//! Each shard counts into plain integers it alone owns (its engine's [`EngineMetrics`] and its
//! own [`ShardCounters`]) and copies them into its slot here now and then
//! ([`ShardPublisher`]): every [`PUBLISH_INTERVAL`], when `Producer::metrics` asks (a command
//! through its inbox), and as it stops. A reader locks each slot in turn and sums. So the
//! per-record path touches nothing shared, and a shard takes its own slot's lock a few times a
//! second.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::engine::metrics::EngineMetrics;

use super::{ProducerMetrics, ShardMetrics};

/// How often a shard publishes its counters unasked (for shard 0's facade snapshots; a
/// `Producer::metrics` call asks every shard to publish first).
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(100);

/// How often shard 0 hands a snapshot to the `metrics` facade.
pub const FACADE_INTERVAL: Duration = Duration::from_secs(1);

/// A shard's own counters: where its thread's time went and what it was handed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardCounters {
    /// Nanoseconds the shard's loop ran (everything but parking).
    pub busy_ns: u64,
    /// Nanoseconds the shard was parked waiting for a command, an event or a timer.
    pub parked_ns: u64,
    /// Times the shard parked.
    pub parks: u64,
    /// Identity tickets read from the ticket ring (its own included).
    pub ring_tickets: u64,
    /// Times the shard took a non-empty inbox from the application threads.
    pub handoffs: u64,
    /// Commands those hand-offs carried (records, flushes, barriers...).
    pub handoff_commands: u64,
    /// The most commands one hand-off carried.
    pub handoff_depth_max: u64,
}

/// Nanoseconds application threads spent in the producer's blocking calls (Java's
/// `txn-*-time-ns-total` and `flush-time-ns-total`), counted once per call.
#[derive(Debug, Default)]
pub(crate) struct CallTimes {
    pub init: AtomicU64,
    pub begin: AtomicU64,
    pub send_offsets: AtomicU64,
    pub commit: AtomicU64,
    pub abort: AtomicU64,
    pub flush: AtomicU64,
}

impl CallTimes {
    /// Adds the time since `started` to `counter`.
    pub(crate) fn add(counter: &AtomicU64, started: Instant) {
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        counter.fetch_add(ns, Ordering::Relaxed);
    }
}

/// One shard's published counters.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardSlot {
    pub engine: EngineMetrics,
    pub shard: ShardCounters,
}

/// What a snapshot reads, as it is taken, from counters kept outside the shards' slots:
/// `buffer.memory` and the runtime's connection counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SharedGauges {
    pub buffer_total_bytes: u64,
    pub buffer_available_bytes: u64,
    pub bufferpool_wait_time_ns_total: u64,
    pub buffer_exhausted_total: u64,
    pub waiting_threads: u64,
    pub connection_count: u64,
    pub connection_creation_total: u64,
    pub connection_close_total: u64,
}

/// Reads the [`SharedGauges`]. A function, given by whoever builds the board, because the
/// counters it reads belong to the runtime, which publishes into this board and so sits above
/// it.
pub(crate) type ReadSharedGauges = Box<dyn Fn() -> SharedGauges + Send + Sync>;

/// Every shard's published counters, and what the producer counts outside the shards.
pub(crate) struct MetricsBoard {
    pub client_id: String,
    pub started: Instant,
    shared: ReadSharedGauges,
    pub calls: CallTimes,
    shards: Vec<Mutex<ShardSlot>>,
}

impl MetricsBoard {
    pub(crate) fn new(client_id: String, shared: ReadSharedGauges, shards: usize) -> Self {
        MetricsBoard {
            client_id,
            started: Instant::now(),
            shared,
            calls: CallTimes::default(),
            shards: (0..shards).map(|_| Mutex::default()).collect(),
        }
    }

    fn publish(&self, shard: usize, engine: &EngineMetrics, counters: ShardCounters) {
        if let Some(slot) = self.shards.get(shard) {
            let mut slot = slot.lock().expect("metrics lock");
            slot.engine.clone_from(engine);
            slot.shard = counters;
        }
    }

    /// Sums every shard's published counters into one snapshot.
    pub(crate) fn snapshot(&self) -> ProducerMetrics {
        let elapsed = self.started.elapsed();
        let mut engine = EngineMetrics::default();
        let mut shards = Vec::with_capacity(self.shards.len());
        for (index, slot) in self.shards.iter().enumerate() {
            let slot = slot.lock().expect("metrics lock");
            engine.merge(&slot.engine);
            shards.push(ShardMetrics {
                shard: index,
                counters: slot.shard,
            });
        }
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let shared = (self.shared)();
        ProducerMetrics::build(
            self.client_id.clone(),
            elapsed,
            engine,
            shards,
            super::ProducerCounters {
                buffer_total_bytes: shared.buffer_total_bytes,
                buffer_available_bytes: shared.buffer_available_bytes,
                bufferpool_wait_time_ns_total: shared.bufferpool_wait_time_ns_total,
                buffer_exhausted_total: shared.buffer_exhausted_total,
                waiting_threads: shared.waiting_threads,
                connection_count: shared.connection_count,
                connection_creation_total: shared.connection_creation_total,
                connection_close_total: shared.connection_close_total,
                txn_init_time_ns_total: load(&self.calls.init),
                txn_begin_time_ns_total: load(&self.calls.begin),
                txn_send_offsets_time_ns_total: load(&self.calls.send_offsets),
                txn_commit_time_ns_total: load(&self.calls.commit),
                txn_abort_time_ns_total: load(&self.calls.abort),
                flush_time_ns_total: load(&self.calls.flush),
            },
        )
    }
}

/// A shard's side: its own counters and when it last published them.
pub(crate) struct ShardPublisher {
    shard: usize,
    board: Arc<MetricsBoard>,
    pub counters: ShardCounters,
    /// Start of the current busy stretch.
    busy_since: Instant,
    last_publish: Instant,
    last_facade: Instant,
}

impl ShardPublisher {
    pub(crate) fn new(shard: usize, board: Arc<MetricsBoard>) -> Self {
        let now = Instant::now();
        ShardPublisher {
            shard,
            board,
            counters: ShardCounters::default(),
            busy_since: now,
            last_publish: now,
            last_facade: now,
        }
    }

    /// The inbox handed over `commands` commands.
    pub(crate) fn handoff(&mut self, commands: usize) {
        if commands > 0 {
            let commands = commands as u64;
            self.counters.handoffs += 1;
            self.counters.handoff_commands += commands;
            self.counters.handoff_depth_max = self.counters.handoff_depth_max.max(commands);
        }
    }

    /// The shard is about to park; returns when it started, for [`unparked`](Self::unparked).
    pub(crate) fn parking(&mut self) -> Instant {
        let now = Instant::now();
        self.counters.busy_ns += nanos(now - self.busy_since);
        now
    }

    pub(crate) fn unparked(&mut self, since: Instant) {
        let now = Instant::now();
        self.counters.parked_ns += nanos(now - since);
        self.counters.parks += 1;
        self.busy_since = now;
    }

    /// Publishes when [`PUBLISH_INTERVAL`] has passed since the last time, or at once with
    /// `force` (asked by `Producer::metrics`, the shard stopping). Shard 0 also hands a
    /// producer-wide snapshot to the `metrics` facade every [`FACADE_INTERVAL`].
    pub(crate) fn maybe_publish(&mut self, engine: &EngineMetrics, ring_tickets: u64, force: bool) {
        let now = Instant::now();
        if !force && now - self.last_publish < PUBLISH_INTERVAL {
            return;
        }
        self.counters.busy_ns += nanos(now - self.busy_since);
        self.busy_since = now;
        self.counters.ring_tickets = ring_tickets;
        self.board.publish(self.shard, engine, self.counters);
        self.last_publish = now;
        if self.shard == 0 && now - self.last_facade >= FACADE_INTERVAL {
            self.last_facade = now;
            self.board.snapshot().publish();
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
