//! What the runtime knows about its own resources: sockets and tasks alive, why connections
//! ended, and a per-shard report of the engine's counters and its connections. Tests read it
//! to check that faults leave nothing behind; operators can read it to see why a broker is
//! unreachable.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::engine::sender::EngineStats;
use crate::engine::{NodeId, ProducerIdAndEpoch};
use crate::metrics::{ReadSharedGauges, SharedGauges};
use crate::protocol::wire::WireError;

use super::buffer_memory::BufferMemory;

/// Why the runtime closed or lost a broker connection. Every one of these but
/// [`ConnectionError::Tls`] closes that connection only; the engine treats it as a disconnect
/// (requests on it have unknown outcomes) and reconnects after its backoff. A refused TLS
/// handshake stops the producer (`ProduceError::Tls`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// The broker address did not resolve.
    #[error("resolving {address}: {message}")]
    Resolve {
        /// The address, `host:port`.
        address: String,
        /// The resolver's error.
        message: String,
    },
    /// The TCP connect failed or timed out (`socket.connection.setup.timeout.ms`).
    #[error("connecting to {address}: {message}")]
    Connect {
        /// The broker's address as configured or advertised, `host:port` (the addresses it
        /// resolves to are tried in turn, within the setup timeout).
        address: String,
        /// The last error's kind.
        kind: io::ErrorKind,
        /// The last error.
        message: String,
    },
    /// The broker closed the connection between frames.
    #[error("the broker closed the connection")]
    ClosedByPeer,
    /// The connection ended inside a frame: `received` of `expected` bytes had arrived.
    #[error("the connection ended {received} bytes into a {expected}-byte {part}")]
    Truncated {
        /// The part of the frame that was cut.
        part: FramePart,
        /// The part's length, in bytes.
        expected: usize,
        /// The bytes of it that arrived.
        received: usize,
    },
    /// The length prefix was refused before anything was allocated for it (negative, or
    /// above `kacrab.max.response.bytes`).
    #[error("unusable frame: {0}")]
    Frame(WireError),
    /// The engine closed the connection: before it was up, because
    /// `socket.connection.setup.timeout.ms` passed; once up, because a request timed out
    /// (`request.timeout.ms`) or the broker broke the protocol (an answer that does not
    /// decode or does not match the oldest request).
    #[error("closed by the producer {}", if *.established { "(a request timed out or the broker broke the protocol)" } else { "(socket.connection.setup.timeout.ms passed)" })]
    Abandoned {
        /// The connection was up (a request timed out, or the broker broke the protocol);
        /// false: it was still being set up.
        established: bool,
    },
    /// Reading from the socket failed.
    #[error("read failed: {message}")]
    Read {
        /// The error's kind.
        kind: io::ErrorKind,
        /// The error.
        message: String,
    },
    /// Writing to the socket failed.
    #[error("write failed: {message}")]
    Write {
        /// The error's kind.
        kind: io::ErrorKind,
        /// The error.
        message: String,
    },
    /// The TLS handshake was refused: the broker's certificate did not verify (unknown
    /// authority, expired, another host's name), the broker refused the producer's
    /// certificate or its absence, or the two share no TLS version. Unlike the others, the
    /// engine treats this one as fatal: no retry changes it.
    #[error("TLS failed: {reason}")]
    Tls {
        /// What the TLS library refused, and why.
        reason: String,
    },
}

/// Which part of a frame a truncation cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramePart {
    /// The 4-byte length prefix.
    LengthPrefix,
    /// The bytes the prefix announced.
    Body,
}

impl std::fmt::Display for FramePart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FramePart::LengthPrefix => "length prefix",
            FramePart::Body => "frame body",
        })
    }
}

/// One connection failure, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionFailure {
    /// The shard whose connection it was.
    pub shard: usize,
    /// The broker's node id (negative: a bootstrap address).
    pub node: NodeId,
    /// Which of the shard's connections to that node it was: each new one gets the next
    /// number.
    pub generation: u64,
    /// Why the connection failed or ended.
    pub error: ConnectionError,
}

/// One connection of one shard, as the driver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionReport {
    /// The broker's node id (negative: a bootstrap address).
    pub node: NodeId,
    /// Which of the shard's connections to that node this is: each new one gets the next
    /// number.
    pub generation: u64,
    /// The TCP connection is up (false while connecting).
    pub established: bool,
    /// Request frames handed to the connection's writer.
    pub requests_written: u64,
    /// Response frames read from it.
    pub responses_read: u64,
}

impl ConnectionReport {
    /// Requests written and not answered yet (`acks=0` produce requests are never answered).
    pub fn requests_in_flight(&self) -> u64 {
        self.requests_written.saturating_sub(self.responses_read)
    }
}

/// A shard's view, published by the shard whenever it changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardReport {
    /// The shard's engine's counters.
    pub engine: EngineStats,
    /// The identity the shard's engine is on.
    pub identity: Option<ProducerIdAndEpoch>,
    /// Identity tickets (installs, bump requests) the shard has read from the ticket ring,
    /// its own included; every live shard reads the same tickets in the same order.
    pub identity_tickets: u64,
    /// The shard's connections, by node.
    pub connections: Vec<ConnectionReport>,
}

/// A snapshot of the runtime's counters ([`Producer::runtime_stats`]).
///
/// [`Producer::runtime_stats`]: crate::Producer::runtime_stats
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Shard threads whose driver loop is running (each stops after `close`).
    pub shards_running: u64,
    /// Broker sockets currently open, every shard.
    pub sockets_open: u64,
    /// Connect, reader and writer tasks currently alive, every shard.
    pub connection_tasks: u64,
    /// Connections begun (resolve and connect), in all.
    pub connects_started: u64,
    /// Connections whose TCP connect succeeded, in all.
    pub connections_established: u64,
    /// Connections that did not resolve or connect ([`ConnectionError::Resolve`],
    /// [`ConnectionError::Connect`]).
    pub connect_failures: u64,
    /// Connections the broker closed between frames ([`ConnectionError::ClosedByPeer`]).
    pub closed_by_peer: u64,
    /// Connections the engine closed ([`ConnectionError::Abandoned`]).
    pub abandoned: u64,
    /// Connections that ended inside a frame ([`ConnectionError::Truncated`]).
    pub truncated_frames: u64,
    /// Frames refused by their length prefix.
    pub refused_frames: u64,
    /// Reads and writes that failed ([`ConnectionError::Read`], [`ConnectionError::Write`]).
    pub io_errors: u64,
    /// TLS handshakes refused ([`ConnectionError::Tls`]).
    pub tls_failures: u64,
    /// The most recent failures, oldest first (at most [`RECENT_FAILURES`]).
    pub recent_failures: Vec<ConnectionFailure>,
    /// By shard index.
    pub shards: Vec<ShardReport>,
}

impl RuntimeStats {
    /// Open connections of every shard to `node`.
    pub fn connections_to(&self, node: NodeId) -> impl Iterator<Item = (usize, &ConnectionReport)> {
        self.shards.iter().enumerate().flat_map(move |(shard, r)| {
            r.connections
                .iter()
                .filter(move |c| c.node == node)
                .map(move |c| (shard, c))
        })
    }

    /// The engine counters summed over every shard.
    pub fn engine_totals(&self) -> EngineStats {
        let mut total = EngineStats::default();
        for shard in &self.shards {
            let e = &shard.engine;
            total.produce_requests += e.produce_requests;
            total.batches_sent += e.batches_sent;
            total.retries += e.retries;
            total.epoch_bumps_requested += e.epoch_bumps_requested;
            total.sequence_rewrites += e.sequence_rewrites;
            total.disconnects += e.disconnects;
            total.protocol_errors += e.protocol_errors;
            total.rebootstraps += e.rebootstraps;
            total.batches_without_room += e.batches_without_room;
        }
        total
    }
}

/// The runtime's counters, readable after every [`Producer`] handle is gone (say, to see
/// its shards stop). From [`Producer::runtime_watch`].
///
/// [`Producer`]: crate::Producer
/// [`Producer::runtime_watch`]: crate::Producer::runtime_watch
#[derive(Clone)]
pub struct RuntimeWatch(pub(crate) Arc<RuntimeCounters>);

impl std::fmt::Debug for RuntimeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RuntimeWatch").field(&self.stats()).finish()
    }
}

impl RuntimeWatch {
    /// A snapshot of the counters now.
    pub fn stats(&self) -> RuntimeStats {
        self.0.snapshot()
    }

    /// Waits until `condition` holds of [`stats`](Self::stats), checked again whenever the
    /// counters change; false if `timeout` passed first.
    pub fn wait_until(
        &self,
        timeout: Duration,
        condition: impl FnMut(&RuntimeStats) -> bool,
    ) -> bool {
        self.0.wait_until(timeout, condition)
    }
}

/// How a metrics snapshot reads `memory` and the connection counts of `counters`.
pub(crate) fn shared_gauges(
    memory: Arc<BufferMemory>,
    counters: Arc<RuntimeCounters>,
) -> ReadSharedGauges {
    Box::new(move || {
        let (connection_count, connection_creation_total, connection_close_total) =
            counters.connection_counts();
        SharedGauges {
            buffer_total_bytes: memory.limit() as u64,
            buffer_available_bytes: memory.limit().saturating_sub(memory.used()) as u64,
            bufferpool_wait_time_ns_total: memory.wait_ns(),
            buffer_exhausted_total: memory.exhausted(),
            waiting_threads: memory.waiting_threads(),
            connection_count,
            connection_creation_total,
            connection_close_total,
        }
    })
}

/// How many failures [`RuntimeStats::recent_failures`] keeps.
pub const RECENT_FAILURES: usize = 32;

/// The live counters behind [`RuntimeStats`], shared by every shard.
pub(crate) struct RuntimeCounters {
    shards_running: AtomicU64,
    sockets_open: AtomicU64,
    connection_tasks: AtomicU64,
    connects_started: AtomicU64,
    connections_established: AtomicU64,
    connect_failures: AtomicU64,
    closed_by_peer: AtomicU64,
    abandoned: AtomicU64,
    truncated_frames: AtomicU64,
    refused_frames: AtomicU64,
    io_errors: AtomicU64,
    tls_failures: AtomicU64,
    recent_failures: Mutex<VecDeque<ConnectionFailure>>,
    shards: Vec<Mutex<ShardReport>>,
    /// Raised on every change a snapshot could show, for [`wait_until`](Self::wait_until).
    generation: AtomicU64,
    /// Threads in `wait_until`: a change takes the lock and wakes them only when there are
    /// any, so the shards' hot path pays one atomic load otherwise.
    waiters: AtomicUsize,
    wake: (Mutex<()>, Condvar),
}

impl RuntimeCounters {
    pub(crate) fn new(shards: usize) -> Arc<RuntimeCounters> {
        Arc::new(RuntimeCounters {
            shards_running: AtomicU64::new(0),
            sockets_open: AtomicU64::new(0),
            connection_tasks: AtomicU64::new(0),
            connects_started: AtomicU64::new(0),
            connections_established: AtomicU64::new(0),
            connect_failures: AtomicU64::new(0),
            closed_by_peer: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            truncated_frames: AtomicU64::new(0),
            refused_frames: AtomicU64::new(0),
            io_errors: AtomicU64::new(0),
            tls_failures: AtomicU64::new(0),
            recent_failures: Mutex::new(VecDeque::with_capacity(RECENT_FAILURES)),
            shards: (0..shards).map(|_| Mutex::default()).collect(),
            generation: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            wake: (Mutex::new(()), Condvar::new()),
        })
    }

    /// Something a snapshot shows changed.
    ///
    /// Invariant (no lost wake-up): the generation is raised before `waiters` is read, and a
    /// waiter counts itself before it reads the generation, so with sequentially consistent
    /// order either the waiter sees the new generation or this sees the waiter; the wake is
    /// sent under the lock the waiter re-checks the generation under.
    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.wake.0.lock().expect("stats lock");
            self.wake.1.notify_all();
        }
    }

    /// Waits until `condition` holds of a snapshot, taken again after each change; false if
    /// `timeout` passed first.
    pub(crate) fn wait_until(
        &self,
        timeout: Duration,
        mut condition: impl FnMut(&RuntimeStats) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let held = 'check: loop {
            let seen = self.generation.load(Ordering::SeqCst);
            if condition(&self.snapshot()) {
                break true;
            }
            let mut guard = self.wake.0.lock().expect("stats lock");
            while self.generation.load(Ordering::SeqCst) == seen {
                let now = Instant::now();
                if now >= deadline {
                    break 'check false;
                }
                guard = self
                    .wake
                    .1
                    .wait_timeout(guard, deadline - now)
                    .expect("stats lock")
                    .0;
            }
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        held
    }

    pub(crate) fn snapshot(&self) -> RuntimeStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RuntimeStats {
            shards_running: load(&self.shards_running),
            sockets_open: load(&self.sockets_open),
            connection_tasks: load(&self.connection_tasks),
            connects_started: load(&self.connects_started),
            connections_established: load(&self.connections_established),
            connect_failures: load(&self.connect_failures),
            closed_by_peer: load(&self.closed_by_peer),
            abandoned: load(&self.abandoned),
            truncated_frames: load(&self.truncated_frames),
            refused_frames: load(&self.refused_frames),
            io_errors: load(&self.io_errors),
            tls_failures: load(&self.tls_failures),
            recent_failures: self
                .recent_failures
                .lock()
                .expect("stats lock")
                .iter()
                .cloned()
                .collect(),
            shards: self
                .shards
                .iter()
                .map(|s| s.lock().expect("stats lock").clone())
                .collect(),
        }
    }

    /// Sockets open now, connections established and connections lost or closed, in all
    /// (`connection-count`, `connection-creation-total`, `connection-close-total`).
    pub(crate) fn connection_counts(&self) -> (u64, u64, u64) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let closed = load(&self.closed_by_peer)
            + load(&self.abandoned)
            + load(&self.truncated_frames)
            + load(&self.refused_frames)
            + load(&self.io_errors)
            // Refused after the TCP connection was established.
            + load(&self.tls_failures);
        (
            load(&self.sockets_open),
            load(&self.connections_established),
            closed,
        )
    }

    pub(crate) fn connect_started(&self) {
        self.connects_started.fetch_add(1, Ordering::Relaxed);
        self.changed();
    }

    pub(crate) fn connection_established(&self) {
        self.connections_established.fetch_add(1, Ordering::Relaxed);
        self.changed();
    }

    pub(crate) fn record_failure(&self, failure: ConnectionFailure) {
        let counter = match &failure.error {
            ConnectionError::Resolve { .. } | ConnectionError::Connect { .. } => {
                &self.connect_failures
            }
            ConnectionError::ClosedByPeer => &self.closed_by_peer,
            ConnectionError::Abandoned { .. } => &self.abandoned,
            ConnectionError::Truncated { .. } => &self.truncated_frames,
            ConnectionError::Frame(_) => &self.refused_frames,
            ConnectionError::Read { .. } | ConnectionError::Write { .. } => &self.io_errors,
            ConnectionError::Tls { .. } => &self.tls_failures,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut recent = self.recent_failures.lock().expect("stats lock");
        if recent.len() == RECENT_FAILURES {
            recent.pop_front();
        }
        recent.push_back(failure);
        drop(recent);
        self.changed();
    }

    pub(crate) fn publish_shard(&self, shard: usize, report: &ShardReport) {
        if let Some(slot) = self.shards.get(shard) {
            let mut slot = slot.lock().expect("stats lock");
            if *slot != *report {
                *slot = report.clone();
                drop(slot);
                self.changed();
            }
        }
    }

    /// Counts a task alive until the guard drops (with the future that owns it).
    pub(crate) fn task_guard(self: &Arc<Self>) -> LiveGuard {
        LiveGuard::new(self.clone(), |c| &c.connection_tasks)
    }

    /// Counts a shard running until the guard drops (when its driver returns or unwinds).
    pub(crate) fn shard_guard(self: &Arc<Self>) -> LiveGuard {
        LiveGuard::new(self.clone(), |c| &c.shards_running)
    }

    /// Counts a socket open until the guard drops (with the socket it sits beside).
    pub(crate) fn socket_guard(self: &Arc<Self>) -> LiveGuard {
        LiveGuard::new(self.clone(), |c| &c.sockets_open)
    }
}

/// Increments a gauge on creation and decrements it on drop.
pub(crate) struct LiveGuard {
    counters: Arc<RuntimeCounters>,
    gauge: fn(&RuntimeCounters) -> &AtomicU64,
}

impl LiveGuard {
    fn new(counters: Arc<RuntimeCounters>, gauge: fn(&RuntimeCounters) -> &AtomicU64) -> Self {
        gauge(&counters).fetch_add(1, Ordering::Relaxed);
        counters.changed();
        LiveGuard { counters, gauge }
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        (self.gauge)(&self.counters).fetch_sub(1, Ordering::Relaxed);
        self.counters.changed();
    }
}
