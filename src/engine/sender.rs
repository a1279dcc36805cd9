//! The engine: Java's `Sender` loop and the idempotent parts of its `TransactionManager`,
//! driven by events and emitting [`Action`]s.
//!
//! One `Engine` owns a set of partitions (one shard's). `poll` is `Sender.runOnce`, keeping
//! Java's order: resolve sequences, adopt epoch bumps, identity and metadata requests, expiry,
//! then drain. Deliberate deviations from Java, each for a stated reason:
//! - a blocked partition is skipped (`continue`), it does not stall the whole node
//!   (docs/java-rules.md §2.3 quirk);
//! - sequence comparisons are wrap-aware (docs/java-rules.md §2.2 quirk);
//! - a batch of unknown outcome is never re-stamped under a new epoch: a partition whose
//!   sequences must be rewritten waits until none of its batches has an attempt of unknown
//!   outcome, wherever it is queued, and retries the batches up to the last such one under
//!   their old stamps (docs/deviations.md);
//! - every expired stamped batch marks the partition unresolved, not only one that was retried
//!   (docs/java-rules.md §4.9 quirk), so the gap is settled by `maybe_resolve_sequences` at once;
//! - at most `max.in.flight.requests.per.connection` batches per partition are stamped and
//!   unfinished, across all connections. That bounds the batches in flight, not the batches
//!   the broker appends while an old attempt is outstanding: acked batches free their places,
//!   so a retry can still fall outside the five-batch de-duplication window. Its answer is then
//!   OUT_OF_ORDER_SEQUENCE_NUMBER, and the batch keeps its unknown outcome (never re-stamped,
//!   never reported as definitely failed).
//!
//! This file is the coordinator: it owns every field, runs `poll` and routes answers and lost
//! requests by API. Three sub-protocols keep their state in a small type of their own, with
//! its states as an enum, its next wakeup and its invariants, which the coordinator asks:
//! `MetadataRefresh` (`metadata_refresh`), `ProducerIdRequest` (`init_producer_id`) and
//! `EpochBump` (`epoch_bump`). The rest lives in child modules, each an `impl Engine` block:
//! `accumulator` (append, flush and close ledger), `drain` (stamping and the drain gates),
//! `produce_request`, `completion` (how a batch ends), `split`, `expiry`, `epoch_bump`
//! (sequencing after the stamp and the epoch bump, with a table of the Java rules),
//! `connections`, `sasl` (authenticating a new connection), `metadata_refresh`, `rebootstrap`,
//! `init_producer_id`, and `txn` (the transactional side).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::protocol::StrBytes;

use crate::error::ProduceError;
use crate::protocol::compression::Codec;
use crate::protocol::error_code::code;
use crate::protocol::wire;

use super::batch::{BatchCompression, ProducerBatch};
use super::batch_memory::{BatchMemory, Unbounded};
use super::buffer_pool::BufferPool;
use super::compression_ratio::CompressionRatioEstimate;
use super::connection::{Connection, ConnectionState, InFlightHeader};
use super::identity::ProducerIdAndEpoch;
use super::metadata::ClusterMetadata;
use super::metrics::EngineMetrics;
use super::partition::{PartitionSlot, TopicPartition};
use super::partition_index::PartitionIndex;
use super::transaction::{TransactionManager, TxnAction};
use super::{Action, Delivery, Micros, NodeId};

mod accumulator;
mod completion;
mod connections;
mod drain;
mod epoch_bump;
use epoch_bump::EpochBump;
mod expiry;
mod init_producer_id;
use init_producer_id::ProducerIdRequest;
mod metadata_refresh;
use metadata_refresh::MetadataRefresh;
mod produce_request;
mod rebootstrap;
mod sasl;
#[cfg(test)]
mod scripted_rig;
mod split;
mod txn;
mod txn_participant;
// Lets the child modules name `super::partition::…` as the code they came from did.
use super::partition;
pub use txn_participant::TxnParticipant;

pub use super::config::EngineConfig;

/// The body of an in-flight request, by API.
enum RequestBody<D> {
    ApiVersions,
    Metadata,
    InitProducerId,
    Produce(Vec<(usize, ProducerBatch<D>)>),
    /// The transaction manager's one in-flight request (`TransactionManager::in_flight`).
    Txn,
    SaslHandshake,
    SaslAuthenticate,
}

/// Counters for tests, the simulator and the perf tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Produce requests sent.
    pub produce_requests: u64,
    /// Batch attempts sent (a retry counts again).
    pub batches_sent: u64,
    /// Batches re-enqueued for another attempt.
    pub retries: u64,
    /// Epoch bumps this engine asked for (KIP-360).
    pub epoch_bumps_requested: u64,
    /// Partitions whose sequences were rewritten after a bump (`startSequencesAtBeginning`).
    pub sequence_rewrites: u64,
    /// Connections lost or closed on an error.
    pub disconnects: u64,
    /// Connections closed for idling past `connections.max.idle.ms` (not in `disconnects`).
    pub idle_disconnects: u64,
    /// Connections closed for an answer that broke the protocol (hostile or broken broker).
    pub protocol_errors: u64,
    /// Times the broker list was replaced by `bootstrap.servers` (KIP-899, KIP-1102).
    pub rebootstraps: u64,
    /// Batches opened with a buffer of one record's size, because `buffer.memory` and its
    /// slack had no room for a whole batch's (`batch_memory`).
    pub batches_without_room: u64,
}

pub struct Engine<D> {
    config: EngineConfig,
    /// Batch buffers of finished batches, for the next ones (`accumulator`, `completion`);
    /// shared with the application threads that open batches for this engine's partitions.
    buffer_pool: Arc<BufferPool>,
    /// Where a new batch charges its buffer's unused capacity (`batch_memory`).
    batch_memory: Arc<dyn BatchMemory>,
    client_id: StrBytes,
    metadata: ClusterMetadata,
    partitions: Vec<PartitionSlot<D>>,
    /// Each partition's index in `partitions`, looked up without hashing the topic's name on
    /// every append (`partition_index`).
    partition_index: PartitionIndex,
    connections: HashMap<NodeId, Connection<RequestBody<D>>>,
    actions: VecDeque<Action>,
    identity: ProducerIdAndEpoch,
    /// The idempotent epoch bump this engine asked for (`epoch_bump`).
    epoch_bump: EpochBump,
    /// The idempotent producer's InitProducerId (`init_producer_id`).
    producer_id_request: ProducerIdRequest,
    /// The metadata refresh (`metadata_refresh`).
    metadata_refresh: MetadataRefresh,
    /// When each topic of `metadata.interest` was last asked for by `request_topic`, for
    /// `metadata.max.idle.ms`: `None` when asked since the last metadata request was built
    /// (`request_topic` carries no time; the next request's time stands for it).
    topic_requested_at: HashMap<Arc<str>, Option<Micros>>,
    /// The error that stopped the engine. Set only by `become_fatal` (the engine's own
    /// errors, reported to the transaction manager there) and `txn_fatal` (the manager's).
    fatal: Option<ProduceError>,
    /// Ids of batches not finally completed, for `flush`: a flush waits for every batch created
    /// before it.
    next_batch_id: u64,
    split_children: HashMap<u64, usize>,
    /// Java's `CompressionRatioEstimator` table: one estimate per topic, shared by the topic's
    /// partition slots (empty when batches are not compressed).
    compression_estimates: HashMap<Arc<str>, Arc<CompressionRatioEstimate>>,
    incomplete_batches: BTreeSet<u64>,
    flushes: usize,
    closing: bool,
    drain_start: usize,
    next_generation: u64,
    stats: EngineStats,
    /// Counters behind Kafka's producer metrics (`crate::metrics`).
    metrics: EngineMetrics,
    /// The transaction manager (the identity-owning engine of a transactional producer).
    tm: Option<TransactionManager>,
    /// This engine's partitions in the current transaction.
    participant: TxnParticipant,
    txn_actions: VecDeque<TxnAction>,
    /// Since when the next transactional request waits for its coordinator's connection.
    txn_wait: Option<(NodeId, Micros)>,
}

impl<D: Delivery> Engine<D> {
    pub fn new(config: EngineConfig) -> Self {
        let metadata = ClusterMetadata::new(&config.bootstrap_servers);
        let tm = match (&config.transactional_id, config.owns_identity) {
            (Some(id), true) => Some(TransactionManager::new(
                id.clone(),
                config.transaction_timeout_ms,
            )),
            _ => None,
        };
        // Idle buffers are outside `buffer.memory`'s count (a charge held by an idle buffer
        // could keep a blocked caller waiting with nothing in flight to free it), so their
        // bound is part of the producer's memory bound (`tuning/README.md`).
        let buffer_pool = Arc::new(BufferPool::new(
            config.batch_size.min(config.max_request_size),
            config.buffer_pool_idle,
        ));
        Engine {
            buffer_pool,
            batch_memory: Arc::new(Unbounded),
            tm,
            participant: TxnParticipant::default(),
            txn_actions: VecDeque::new(),
            txn_wait: None,
            client_id: StrBytes::from_string(config.client_id.clone()),
            config,
            metadata,
            partitions: Vec::new(),
            partition_index: PartitionIndex::default(),
            connections: HashMap::new(),
            actions: VecDeque::new(),
            identity: ProducerIdAndEpoch::NONE,
            epoch_bump: EpochBump::default(),
            producer_id_request: ProducerIdRequest::Idle,
            metadata_refresh: MetadataRefresh::new(),
            topic_requested_at: HashMap::new(),
            fatal: None,
            next_batch_id: 0,
            split_children: HashMap::new(),
            compression_estimates: HashMap::new(),
            incomplete_batches: BTreeSet::new(),
            flushes: 0,
            closing: false,
            drain_start: 0,
            next_generation: 1,
            stats: EngineStats::default(),
            metrics: EngineMetrics::default(),
        }
    }

    /// Charges each new batch's unused buffer capacity to `memory` (the producer's
    /// `buffer.memory`) instead of to nothing.
    /// Uses `pool` for batch buffers: the pool the application threads that fill this engine's
    /// batches take their buffers from (`append_batch`).
    pub fn with_buffer_pool(mut self, pool: Arc<BufferPool>) -> Self {
        self.buffer_pool = pool;
        self
    }

    pub fn with_batch_memory(mut self, memory: Arc<dyn BatchMemory>) -> Self {
        self.batch_memory = memory;
        self
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Batch buffers reused from finished batches and buffers allocated, since the engine
    /// started.
    pub fn buffer_pool_counts(&self) -> (u64, u64) {
        self.buffer_pool.counts()
    }

    /// The pool this engine's finished batches give their buffers back to, for the threads
    /// that open batches for its partitions ([`append_batch`](Self::append_batch)).
    pub fn buffer_pool(&self) -> &Arc<BufferPool> {
        &self.buffer_pool
    }

    /// The counters behind Kafka's producer metrics.
    pub fn metrics(&self) -> &EngineMetrics {
        &self.metrics
    }

    pub fn identity(&self) -> ProducerIdAndEpoch {
        self.identity
    }

    pub fn fatal_error(&self) -> Option<&ProduceError> {
        self.fatal.as_ref()
    }

    /// The engine stops on an error of its own (a broker lacks an API it needs, a refused
    /// authentication or TLS handshake, a fatal produce error...). Every such path comes here
    /// so that the transaction manager always learns it: Java's
    /// `maybeTransitionToErrorState` makes these FATAL_ERROR. The engine's batches then fail
    /// with this error and are not reported one by one (`txn_report_failure` skips a `Fatal`
    /// that is not flagged fatal); without this report a participant would report its flush
    /// done and the owner would commit without them. The first error stays and is reported
    /// once; a later one changes nothing, as an engine already stopped by the manager
    /// (`txn_fatal`) has nothing to tell it.
    pub(super) fn become_fatal(&mut self, err: ProduceError) {
        if self.fatal.is_some() {
            return;
        }
        self.txn_report_failure(&err, true);
        self.fatal = Some(err);
    }

    pub fn metadata(&self) -> &ClusterMetadata {
        &self.metadata
    }

    /// The actions emitted since the last call.
    pub fn take_actions(&mut self) -> impl Iterator<Item = Action> + '_ {
        self.actions.drain(..)
    }

    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    // ----------------------------------------------------------------------------------------
    // Events from the network side
    // ----------------------------------------------------------------------------------------

    /// A complete response frame (length prefix removed) arrived on a connection.
    pub fn on_frame(&mut self, now: Micros, node: NodeId, generation: u64, body: Bytes) {
        let Some(conn) = self.connections.get_mut(&node) else {
            return;
        };
        if conn.generation != generation {
            return;
        }
        self.metrics.response_received(node, body.len() as u64);
        let correlation_id = match wire::response_correlation_id(&body) {
            Ok(id) => id,
            Err(_) => return self.protocol_violation(now, node, generation),
        };
        let matches_front = conn
            .in_flight
            .front()
            .is_some_and(|(h, _)| h.correlation_id == correlation_id);
        if !matches_front {
            // Kafka answers in order on one connection; anything else is a broken peer.
            return self.protocol_violation(now, node, generation);
        }
        let (header, request) = conn.in_flight.pop_front().expect("front checked");
        conn.last_activity = now;
        let result = match request {
            RequestBody::ApiVersions => self.handle_api_versions(now, node, header, body),
            RequestBody::Metadata => self.handle_metadata(now, header, body),
            RequestBody::InitProducerId => self.handle_init_producer_id(now, header, body),
            RequestBody::Produce(batches) => self.handle_produce(now, node, header, body, batches),
            RequestBody::Txn => self.handle_txn_response(now, header, body),
            RequestBody::SaslHandshake => self.handle_sasl_handshake(now, node, header, body),
            RequestBody::SaslAuthenticate => self.handle_sasl_authenticate(now, node, header, body),
        };
        if result.is_err() {
            self.protocol_violation(now, node, generation);
        }
    }

    // ----------------------------------------------------------------------------------------
    // The loop
    // ----------------------------------------------------------------------------------------

    /// One pass of the sender loop (Java's `Sender.runOnce`, in its order).
    pub fn poll(&mut self, now: Micros) {
        self.maybe_resolve_sequences();
        self.fail_queued_if_fatal();
        self.maybe_handle_txn_authorization_error();
        self.txn_participant_poll();
        self.apply_sequence_rewrites();
        self.check_connection_timeouts(now);
        self.maybe_init_producer_id(now);
        self.maybe_send_txn_request(now);
        self.maybe_rebootstrap_on_trigger(now);
        self.maybe_refresh_metadata(now);
        self.expire_batches(now);
        // Expiry (and a timed-out connection above) can leave an unresolved partition with
        // nothing in flight; settle it now rather than at some later, unrelated event, or the
        // batches it holds back can expire waiting.
        self.maybe_resolve_sequences();
        if self.fatal.is_none() {
            self.drain(now);
        }
        self.connect_to_needed_leaders(now);
        self.txn_participant_poll();
    }

    /// The earliest time `poll` has something to do, if any (the driver's timer).
    pub fn next_wakeup(&self, now: Micros) -> Option<Micros> {
        // Only future deadlines count: whatever was due by `now` was tried in the last poll,
        // and if it could not proceed it waits for an event (a response, a connection), not
        // for time. Reporting a past deadline would make the driver spin.
        let mut next: Option<Micros> = None;
        let mut consider = |t: Micros| {
            if t > now {
                next = Some(next.map_or(t, |n: Micros| n.min(t)));
            }
        };
        for slot in &self.partitions {
            for batch in &slot.deque {
                consider(batch.created + self.config.delivery_timeout);
            }
            if let Some(head) = slot.deque.front() {
                if head.attempts > 0 {
                    consider(head.last_attempt + self.backoff_for(head.attempts));
                } else if head.stamp.is_none() {
                    consider(head.created + self.config.linger);
                }
            }
        }
        for conn in self.connections.values() {
            match conn.state {
                ConnectionState::Idle { retry_at } => consider(retry_at),
                ConnectionState::Connecting { since } => {
                    consider(since + self.config.connection_setup_timeout)
                }
                ConnectionState::Ready => {
                    if let Some(at) = conn.session_reauthenticate_at {
                        consider(at);
                    }
                    if let Some(at) = self.idle_deadline(conn) {
                        consider(at);
                    }
                }
                _ => {}
            }
            if let Some((header, _)) = conn.in_flight.front() {
                consider(header.sent_at + self.config.request_timeout);
            }
            // Batches on the wire expire at their delivery timeout too, not at the next event
            // after it (which could be as late as the request timeout).
            for (_, body) in &conn.in_flight {
                if let RequestBody::Produce(batches) = body {
                    for (_, batch) in batches.iter().filter(|(_, b)| !b.expired) {
                        consider(batch.created + self.config.delivery_timeout);
                    }
                }
            }
        }
        if let Some(at) = self.metadata_refresh.next_wakeup(
            now,
            self.config.metadata_max_age,
            self.config.rebootstrap_trigger,
        ) {
            consider(at);
        }
        if self.config.owns_identity
            && self.config.idempotent
            && !self.is_transactional()
            && !self.identity.is_valid()
        {
            if let Some(at) = self.producer_id_request.next_wakeup(now) {
                consider(at);
            }
        }
        for t in self.txn_next_wakeups().into_iter().flatten() {
            consider(t.max(now));
        }
        next
    }

    // ----------------------------------------------------------------------------------------
    // Requests lost with their connection, partitions, checks
    // ----------------------------------------------------------------------------------------

    fn fail_request_on_disconnect(
        &mut self,
        now: Micros,
        header: InFlightHeader,
        body: RequestBody<D>,
    ) {
        match body {
            RequestBody::ApiVersions
            | RequestBody::SaslHandshake
            | RequestBody::SaslAuthenticate => {}
            RequestBody::Metadata => self.metadata_refresh.lost(),
            RequestBody::InitProducerId => {
                self.producer_id_request =
                    ProducerIdRequest::RetryAt(now + self.config.retry_backoff);
            }
            RequestBody::Txn => self.txn_request_lost(now),
            RequestBody::Produce(batches) => {
                let _ = header;
                for (slot_index, batch) in batches {
                    self.partitions[slot_index].on_wire -= 1;
                    // NETWORK_EXCEPTION: retriable, refresh metadata; the attempt may have
                    // been appended, so the outcome is unknown.
                    self.retry_or_fail(now, slot_index, batch, code::NETWORK_EXCEPTION, true, None);
                }
            }
        }
    }

    fn slot_index(&mut self, tp: &TopicPartition) -> usize {
        if let Some(i) = self.partition_index.get(tp) {
            return i;
        }
        let mut slot = PartitionSlot::new(tp.clone());
        if self.config.compression != Codec::None {
            let estimate = self
                .compression_estimates
                .entry(tp.topic.clone())
                .or_default()
                .clone();
            slot.compression = Some(BatchCompression {
                codec: self.config.compression,
                estimate,
            });
        }
        if let Some(leader) = self.metadata.leader(&tp.topic, tp.partition) {
            slot.leader = leader.leader;
            slot.leader_epoch = leader.leader_epoch;
        } else {
            self.request_topic(&tp.topic);
        }
        self.partitions.push(slot);
        let i = self.partitions.len() - 1;
        self.metrics.add_slot(i, &tp.topic);
        self.partition_index.insert(tp, i);
        i
    }

    /// Runs every stateful type's invariant checks (tests and the simulator call this after
    /// every event).
    pub fn assert_invariants(&self) {
        self.txn_assert_invariants();
        for slot in &self.partitions {
            slot.assert_invariants();
        }
        // Every stamped, unfinished batch is in exactly one place: its partition's deque
        // (waiting for a retry) or one in-flight request. `inflight_batches_by_sequence` lists
        // exactly those, so it neither leaks entries nor loses track of a live batch. A batch
        // that expired on the wire stays in its request for bookkeeping only and is no longer
        // listed.
        let mut on_wire = vec![0usize; self.partitions.len()];
        let mut live_on_wire = vec![0usize; self.partitions.len()];
        let mut metadata_in_flight = Vec::new();
        let mut producer_id_in_flight = Vec::new();
        for conn in self.connections.values() {
            assert!(
                conn.produce_in_flight() <= self.config.max_in_flight,
                "more produce requests in flight than max.in.flight.requests.per.connection"
            );
            for (_, body) in &conn.in_flight {
                match body {
                    RequestBody::Metadata => metadata_in_flight.push(conn.node),
                    RequestBody::InitProducerId => producer_id_in_flight.push(conn.node),
                    _ => {}
                }
                if let RequestBody::Produce(batches) = body {
                    for (slot_index, batch) in batches {
                        on_wire[*slot_index] += 1;
                        assert!(batch.stamp.is_some() || !self.config.idempotent);
                        if let (Some(stamp), false, true) =
                            (batch.stamp, batch.expired, self.config.idempotent)
                        {
                            let slot = &self.partitions[*slot_index];
                            assert!(
                                slot.entry
                                    .inflight_position(stamp.producer, stamp.base_sequence)
                                    .is_some(),
                                "{}: batch {stamp:?} on the wire is not tracked in flight",
                                slot.tp
                            );
                            live_on_wire[*slot_index] += 1;
                        }
                    }
                }
            }
        }
        for (i, slot) in self.partitions.iter().enumerate() {
            assert_eq!(
                slot.on_wire, on_wire[i],
                "{}: on-wire count drifted",
                slot.tp
            );
            if !self.config.idempotent {
                continue;
            }
            // Queued stamped batches are checked to be tracked by the slot itself.
            let live = live_on_wire[i] + slot.deque.iter().filter(|b| b.stamp.is_some()).count();
            assert_eq!(
                live,
                slot.entry.inflight_batches_by_sequence.len(),
                "{}: {live} live stamped batches but {} tracked in flight",
                slot.tp,
                slot.entry.inflight_batches_by_sequence.len()
            );
        }
        // A forced close (`abort_all`) drops every request unanswered, and a fatal error can
        // stop one that failed to encode: the sub-protocols may then wait for answers that
        // will not come, which no longer matters.
        let stopped = self.closing || self.fatal.is_some();
        self.metadata_refresh
            .assert_invariants(&metadata_in_flight, stopped);
        self.producer_id_request
            .assert_invariants(&producer_id_in_flight, stopped);
        self.epoch_bump.assert_invariants(self.identity);
    }

    /// Test hook: `tp`'s next batch starts at `sequence` under the identity in force, as if the
    /// records before it had been acked. The only way to reach the sequence wrap at `i32::MAX`
    /// without sending 2^31 records (docs/java-rules.md §9 item 2).
    #[cfg(feature = "testkit")]
    pub fn start_sequence_at(&mut self, tp: &TopicPartition, sequence: i32) {
        assert!(self.identity.is_valid(), "no producer id in force");
        let identity = self.identity;
        let slot_index = self.slot_index(tp);
        let entry = &mut self.partitions[slot_index].entry;
        assert!(!entry.has_inflight_batches(), "{tp} has batches in flight");
        entry.producer_id_and_epoch = identity;
        entry.next_sequence = sequence;
        entry.last_acked_sequence = if sequence == 0 { -1 } else { sequence - 1 };
    }

    /// Per-partition state, for tests and the simulator's checker.
    pub fn partition(&self, tp: &TopicPartition) -> Option<&PartitionSlot<D>> {
        self.partition_index.peek(tp).map(|i| &self.partitions[i])
    }
}

/// The earliest of `times` after `now`. Deadlines at or before `now` do not count: what was
/// due by then was tried in the last poll, and a wakeup for it would make the driver spin.
fn earliest_after(now: Micros, times: impl IntoIterator<Item = Option<Micros>>) -> Option<Micros> {
    times.into_iter().flatten().filter(|&t| t > now).min()
}

/// Java's `ExponentialBackoff` without jitter (the engine is deterministic; the driver may add
/// jitter through its clock): `base × 2^(attempts−1)`, capped at `max`; fixed `max` when
/// `base > max`.
pub fn exponential_backoff(base: Micros, max: Micros, attempts: u32) -> Micros {
    if base >= max {
        return max;
    }
    let exponent = attempts.saturating_sub(1).min(32);
    base.saturating_mul(1u64 << exponent).min(max)
}
