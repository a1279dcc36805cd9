//! The simulated world: producer engines (one per shard), the reference broker behind its
//! in-memory face, the network between them, and a virtual clock, all in one thread.
//!
//! Nothing here reads a clock or sleeps: time is the `at` of the event being handled, and the
//! next event is whichever is due first (ties in the order they were scheduled). So a run is a
//! pure function of its setup and seed.
//!
//! The network: every engine connection is a pair of FIFO pipes to one broker. Requests reach
//! the broker in write order and are served on arrival; answers come back in request order
//! (Kafka's per-connection guarantee), each after its own latency, so answers on different
//! connections interleave freely. Faults ([`Fault`]) act on one request at its arrival at the
//! broker.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::sync::MutexGuard;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey as WireApiKey, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::Decodable;

use crate::engine::{
    Action, Delivery, Engine, EngineConfig, EpochCoordinator, Micros, NodeId, ProducerIdAndEpoch,
    RecordMetadata, TopicPartition,
};
use crate::error::ProduceError;
use crate::protocol::error_code::code;
use crate::protocol::record_batch::{Header, RECORD_BATCH_OVERHEAD};
use crate::testkit::batch::BatchHeader;
use crate::testkit::broker::{BrokerRules, Cluster};
use crate::testkit::server::connection::{answer_request, finish_frame, parse_request, Early};
use crate::testkit::server::handlers::Reply;
use crate::testkit::server::{Listener, Shared};

use super::checker::{Checker, RecordId, Verdict};
use super::rng::Rng;
use crate::engine::batch_memory::{batch_slack, BatchMemory};

mod checks;
mod cluster;
mod events;
mod faults;
mod idle;
mod network;
mod quiet;
mod txn;
pub use faults::{Chaos, Fault, FaultRule, RequestMatch};
pub use idle::IdleLimits;
pub use quiet::{FaultCounts, QuietFaults};
pub use txn::{TxnWorld, OWNER};

/// Wall-clock milliseconds of virtual time zero, for record timestamps and the broker's clock.
pub const EPOCH_MS: i64 = 1_700_000_000_000;

/// Filler for record values after their id.
static PAD: [u8; 256] = {
    let mut pad = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        pad[i] = (i as u8).wrapping_mul(31);
        i += 1;
    }
    pad
};

pub const MS: Micros = 1_000;
pub const SECOND: Micros = 1_000_000;

/// One batch of a traced Produce request, as written on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedBatch {
    pub tp: TopicPartition,
    pub producer: ProducerIdAndEpoch,
    pub base_sequence: i32,
    pub record_count: i32,
    /// Id of the batch's first record.
    pub first_record: RecordId,
}

/// One Produce request's life, recorded when tracing is on.
#[derive(Debug, Clone)]
pub struct ProduceTrace {
    pub engine: usize,
    pub broker: i32,
    pub connection: u64,
    pub version: i16,
    /// The request's `timeout_ms`: how long the broker may wait for replication.
    pub timeout_ms: i32,
    pub written_at: Micros,
    pub served_at: Option<Micros>,
    pub fault: Option<Fault>,
    /// When the engine read the answer.
    pub answered_at: Option<Micros>,
    pub batches: Vec<TracedBatch>,
    /// Per batch, in request order: (error code, base offset) as the engine read them.
    pub answers: Vec<(i16, i64)>,
}

/// One record's delivery handle inside the simulator.
pub struct SimDelivery {
    id: RecordId,
    sink: Rc<RefCell<Vec<Completion>>>,
}

type Completion = (RecordId, Result<RecordMetadata, ProduceError>);

impl Delivery for SimDelivery {
    fn complete(self, result: Result<RecordMetadata, ProduceError>) {
        self.sink.borrow_mut().push((self.id, result));
    }
}

/// How the world is built.
#[derive(Debug, Clone)]
pub struct SimSetup {
    pub seed: u64,
    pub brokers: Vec<i32>,
    /// Topics with the leader of each partition.
    pub topics: Vec<(String, Vec<i32>)>,
    pub rules: BrokerRules,
    /// The engine configuration of every shard (`bootstrap_servers` and `owns_identity` are
    /// filled in; shard 0 owns the identity).
    pub engine: EngineConfig,
    pub shards: usize,
    /// One-way network latency, uniform in this range.
    pub latency: (Micros, Micros),
    /// How long other shards take to adopt a new identity.
    pub identity_delay: (Micros, Micros),
    /// A send must resolve within `delivery_timeout + resolve_slack` of its append.
    pub resolve_slack: Micros,
    /// Record every Produce request and answer ([`Sim::produce_trace`]).
    pub trace: bool,
    /// `buffer.memory`: the application does not append while this many payload bytes are
    /// unresolved (it blocks, as `send` does).
    pub buffer_memory: usize,
}

/// The engine configuration the simulator runs with by default: Java defaults scaled to
/// virtual time.
pub fn default_engine_config() -> EngineConfig {
    EngineConfig {
        client_id: "kacrab-sim".to_string(),
        bootstrap_servers: Vec::new(),
        acks: -1,
        idempotent: true,
        transactional_id: None,
        transaction_timeout_ms: 60_000,
        linger: 5 * MS,
        batch_size: 16_384,
        buffer_memory: 32 << 20,
        max_in_flight: 5,
        delivery_timeout: 30 * SECOND,
        request_timeout: 5 * SECOND,
        retries: i32::MAX,
        retry_backoff: 100 * MS,
        retry_backoff_max: SECOND,
        reconnect_backoff: 50 * MS,
        reconnect_backoff_max: SECOND,
        connection_setup_timeout: 10 * SECOND,
        // Never, as for `metadata_max_idle`: the recorded seeds' runs stay as they were.
        connections_max_idle: None,
        max_request_size: 1_048_576,
        metadata_max_age: 300 * SECOND,
        // Never: as for `rebootstrap_trigger`, the recorded seeds' runs stay as they were.
        metadata_max_idle: Micros::MAX,
        // The simulated brokers keep their addresses for the whole run: there is nothing to
        // rebootstrap to, and the recorded seeds' runs stay as they were.
        rebootstrap_trigger: None,
        compression: crate::protocol::compression::Codec::None,
        buffer_pool_idle: 4 << 20,
        owns_identity: true,
        sasl: None,
        partition_availability_timeout: 0,
    }
}

impl SimSetup {
    /// Three brokers, one topic `t` with `partitions` partitions led round-robin, one shard,
    /// fixed 1 ms latency, tracing on: the base of the scripted scenarios.
    pub fn scripted(partitions: usize) -> Self {
        SimSetup {
            seed: 0,
            brokers: vec![1, 2, 3],
            topics: vec![(
                "t".to_string(),
                (0..partitions).map(|i| (i % 3) as i32 + 1).collect(),
            )],
            rules: BrokerRules::default(),
            engine: default_engine_config(),
            shards: 1,
            latency: (MS, MS),
            identity_delay: (0, 0),
            resolve_slack: 0,
            trace: true,
            buffer_memory: 32 << 20,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    Connecting,
    Open,
    /// A dead path: answers already sent still arrive; nothing written after the stall does.
    Stalled,
    ClosedByClient,
    ClosedByBroker,
}

struct PendingAnswer {
    /// `None` while held.
    ready_at: Option<Micros>,
    body: Bytes,
    trace: Option<usize>,
    /// Close the connection once this (torn) answer is read.
    then_close: bool,
}

struct SimConn {
    engine: usize,
    node: NodeId,
    generation: u64,
    broker: i32,
    state: ConnState,
    last_arrival: Micros,
    answers: VecDeque<PendingAnswer>,
    /// Requests written and not yet arrived.
    in_transit: usize,
    /// When the broker last read or wrote on it (`idle`).
    last_activity: Micros,
    /// An `Event::IdleCheck` for it is scheduled.
    idle_check_pending: bool,
    /// The broker closed it for idleness.
    idle_closed: bool,
}

impl SimConn {
    fn is_closed(&self) -> bool {
        matches!(
            self.state,
            ConnState::ClosedByClient | ConnState::ClosedByBroker
        )
    }
}

type Script = Box<dyn FnOnce(&mut Sim)>;

enum Event {
    Wake(usize),
    Connected(u64),
    ConnectFailed(u64),
    Request {
        conn: u64,
        frame: Bytes,
        trace: Option<usize>,
    },
    Deliver(u64),
    /// The engine learns the connection is gone.
    Closed {
        conn: u64,
        shard: usize,
        node: NodeId,
        generation: u64,
    },
    Identity(usize),
    /// The broker looks whether a connection has been idle past its limit (`idle`).
    IdleCheck(u64),
    /// Let a shard run (after the driver handed it a transactional command).
    Drive(usize),
    Script(Script),
}

struct Entry {
    at: Micros,
    seq: u64,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: the earliest (at, seq) must compare greatest.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

struct Shard {
    engine: Engine<SimDelivery>,
    wake_at: Option<Micros>,
    /// Unresolved payload bytes (encoded upper bound) and records of this shard.
    outstanding_upper: usize,
    outstanding_records: usize,
    last_identity: ProducerIdAndEpoch,
}

/// The simulated world. See the module docs.
pub struct Sim {
    now: Micros,
    rng: Rng,
    setup: SimSetup,
    shared: Shared,
    addresses: HashMap<String, i32>,
    shards: Vec<Shard>,
    coordinator: EpochCoordinator,
    partitions: Vec<TopicPartition>,
    partition_index: HashMap<TopicPartition, usize>,
    shard_of: Vec<usize>,
    conns: HashMap<u64, SimConn>,
    next_conn: u64,
    current_conn: HashMap<(usize, NodeId), u64>,
    events: BinaryHeap<Entry>,
    next_seq: u64,
    checker: Checker,
    completions: Rc<RefCell<Vec<Completion>>>,
    results: Vec<Option<Result<RecordMetadata, ProduceError>>>,
    record_sizes: Vec<(u32, u32)>,
    /// `buffer.memory` as the application and the engines share it.
    memory: Arc<SimMemory>,
    rules: Vec<FaultRule>,
    chaos: Option<Chaos>,
    trace: Option<Vec<ProduceTrace>>,
    /// Read Produce answers at the broker side (for DUPLICATE_SEQUENCE_NUMBER accounting).
    watch_answers: bool,
    max_epoch: HashMap<i64, i16>,
    closed_flag: AtomicBool,
    events_handled: u64,
    broker_down_until: HashMap<i32, Micros>,
    /// Down brokers whose address no longer answers: connection attempts hang.
    unreachable: HashSet<i32>,
    flush_tokens: Vec<(usize, u64)>,
    log_bytes_seen: usize,
    txn: TxnWorld,
    quiet: quiet::QuietWorld,
    /// The brokers' `connections.max.idle.ms` (`idle`).
    broker_idle_limit: Option<Micros>,
}

fn broker_address(id: i32) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, id as u8), 9092))
}

impl Sim {
    pub fn new(setup: SimSetup) -> Sim {
        let mut cluster = Cluster::new(&setup.brokers, setup.rules.clone());
        let mut partitions = Vec::new();
        for (name, leaders) in &setup.topics {
            assert!(cluster.create_topic(name, leaders), "topic {name} twice");
            for p in 0..leaders.len() {
                partitions.push(TopicPartition::new(name.as_str(), p as i32));
            }
        }
        let addrs: Vec<(i32, SocketAddr)> = setup
            .brokers
            .iter()
            .map(|&id| (id, broker_address(id)))
            .collect();
        let addresses = addrs.iter().map(|(id, a)| (a.to_string(), *id)).collect();
        let shared = Shared::in_memory(cluster, &addrs);
        let shard_count = setup.shards.max(1);
        let memory = Arc::new(SimMemory {
            limit: setup.buffer_memory,
            records: AtomicUsize::new(0),
            batches: AtomicUsize::new(0),
        });
        let shards = (0..shard_count)
            .map(|i| {
                let mut config = setup.engine.clone();
                config.bootstrap_servers = addrs.iter().map(|(_, a)| a.to_string()).collect();
                config.owns_identity = i == 0;
                config.client_id = format!("{}-{i}", config.client_id);
                Shard {
                    engine: Engine::new(config).with_batch_memory(memory.clone()),
                    wake_at: None,
                    outstanding_upper: 0,
                    outstanding_records: 0,
                    last_identity: ProducerIdAndEpoch::NONE,
                }
            })
            .collect();
        let shard_of = (0..partitions.len()).map(|i| i % shard_count).collect();
        let partition_index = partitions
            .iter()
            .enumerate()
            .map(|(i, tp)| (tp.clone(), i))
            .collect();
        let resolve_within = setup.engine.delivery_timeout + setup.resolve_slack;
        let watch_answers = setup.trace
            || setup.rules.kafka_version == crate::testkit::broker::KafkaBehaviour::Legacy;
        Sim {
            now: 0,
            rng: Rng::new(setup.seed ^ 0x005e_ed0f_5eed),
            trace: setup.trace.then(Vec::new),
            watch_answers,
            checker: Checker::new(partitions.clone(), resolve_within),
            shared,
            addresses,
            shards,
            coordinator: EpochCoordinator::default(),
            partitions,
            partition_index,
            shard_of,
            conns: HashMap::new(),
            next_conn: 1,
            current_conn: HashMap::new(),
            events: BinaryHeap::new(),
            next_seq: 0,
            completions: Rc::new(RefCell::new(Vec::new())),
            results: Vec::new(),
            record_sizes: Vec::new(),
            memory,
            rules: Vec::new(),
            chaos: None,
            max_epoch: HashMap::new(),
            closed_flag: AtomicBool::new(false),
            events_handled: 0,
            broker_down_until: HashMap::new(),
            unreachable: HashSet::new(),
            flush_tokens: Vec::new(),
            log_bytes_seen: 0,
            txn: TxnWorld::default(),
            quiet: quiet::QuietWorld::default(),
            broker_idle_limit: None,
            setup,
        }
    }

    // ----------------------------------------------------------------------------------------
    // Accessors
    // ----------------------------------------------------------------------------------------

    pub fn now(&self) -> Micros {
        self.now
    }

    pub fn setup(&self) -> &SimSetup {
        &self.setup
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    pub fn partitions(&self) -> &[TopicPartition] {
        &self.partitions
    }

    pub fn engine(&self, shard: usize) -> &Engine<SimDelivery> {
        &self.shards[shard].engine
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The engine that owns `tp`.
    pub fn engine_for(&self, tp: &TopicPartition) -> &Engine<SimDelivery> {
        &self.shards[self.shard_of[self.partition_index[tp]]].engine
    }

    pub fn shard_of(&self, tp: &TopicPartition) -> usize {
        self.shard_of[self.partition_index[tp]]
    }

    pub fn identity(&self) -> ProducerIdAndEpoch {
        self.coordinator.current()
    }

    pub fn cluster(&self) -> MutexGuard<'_, Cluster> {
        self.shared.cluster()
    }

    pub fn checker(&self) -> &Checker {
        &self.checker
    }

    pub fn result(&self, id: RecordId) -> Option<&Result<RecordMetadata, ProduceError>> {
        self.results.get(id as usize).and_then(Option::as_ref)
    }

    pub fn verdict(&self, id: RecordId) -> Verdict {
        self.checker.verdict(id)
    }

    pub fn produce_trace(&self) -> &[ProduceTrace] {
        self.trace.as_deref().unwrap_or(&[])
    }

    pub fn events_handled(&self) -> u64 {
        self.events_handled
    }

    /// Payload bytes of records sent and not resolved.
    pub fn outstanding_bytes(&self) -> usize {
        self.memory.records.load(Relaxed)
    }

    /// Bytes the engines' batches hold of `buffer.memory` beyond their records.
    pub fn batch_charged_bytes(&self) -> usize {
        self.memory.batches.load(Relaxed)
    }

    pub fn has_room_for(&self, bytes: usize) -> bool {
        self.memory.used() + bytes <= self.setup.buffer_memory
    }

    /// Records sent so far.
    pub fn sent(&self) -> usize {
        self.results.len()
    }

    pub fn all_resolved(&self) -> bool {
        self.shards.iter().all(|s| s.outstanding_records == 0)
    }

    /// Every engine has nothing queued or in flight.
    pub fn all_idle(&self) -> bool {
        self.shards.iter().all(|s| s.engine.is_idle())
    }

    // ----------------------------------------------------------------------------------------
    // Control
    // ----------------------------------------------------------------------------------------

    /// Lets every engine ask for the metadata of every topic and start connecting (otherwise
    /// an engine starts at its first append).
    pub fn start(&mut self) {
        let topics: Vec<String> = self.setup.topics.iter().map(|(t, _)| t.clone()).collect();
        for shard in 0..self.shards.len() {
            for topic in &topics {
                self.shards[shard].engine.request_topic(topic);
            }
            self.drive(shard);
        }
    }

    /// Makes `tp`'s next batch start at `sequence` ([`Engine::start_sequence_at`]).
    pub fn start_sequence_at(&mut self, tp: &TopicPartition, sequence: i32) {
        let shard = self.shard_of(tp);
        self.shards[shard].engine.start_sequence_at(tp, sequence);
    }

    /// Requests the broker face served, by API (every attempt counts).
    pub fn requests_served(&self, api: WireApiKey) -> u64 {
        self.shared.stats().requests(api)
    }

    /// Installs an identity before the engines ask for one (scripted scenarios).
    pub fn install_identity(&mut self, identity: ProducerIdAndEpoch) {
        assert!(
            self.coordinator.install(identity),
            "an identity is in force"
        );
        self.note_identity();
        for shard in 0..self.shards.len() {
            self.adopt_identity(shard);
        }
    }

    pub fn set_chaos(&mut self, chaos: Option<Chaos>) {
        self.chaos = chaos;
    }

    pub fn chaos(&self) -> Option<&Chaos> {
        self.chaos.as_ref()
    }

    /// Adds a scripted fault. Matching on partition or sequence reads the requests, which
    /// needs [`SimSetup::trace`].
    pub fn add_fault(&mut self, rule: FaultRule) {
        assert!(
            self.trace.is_some()
                || (rule.matcher.partition.is_none() && rule.matcher.base_sequence.is_none()),
            "matching on partition or sequence needs SimSetup::trace"
        );
        self.rules.push(rule);
    }

    /// Scripted faults not yet used up.
    pub fn pending_faults(&self) -> usize {
        self.rules.iter().map(|r| r.times).sum()
    }

    /// Decode every Produce answer at the broker side (needed to allow offset -1 after a
    /// DUPLICATE_SEQUENCE_NUMBER answer).
    pub fn watch_produce_answers(&mut self, on: bool) {
        self.watch_answers = on;
    }

    pub fn clear_faults(&mut self) {
        self.rules.clear();
    }

    /// Runs `f` at virtual time `at` (or now, if that has passed).
    pub fn at(&mut self, at: Micros, f: impl FnOnce(&mut Sim) + 'static) {
        let at = at.max(self.now);
        self.schedule(at, Event::Script(Box::new(f)));
    }

    /// Starts a flush on the engine owning `tp`; see [`flush_done`](Self::flush_done).
    pub fn begin_flush(&mut self, shard: usize) -> usize {
        let token = self.shards[shard].engine.begin_flush();
        self.flush_tokens.push((shard, token));
        self.drive(shard);
        self.flush_tokens.len() - 1
    }

    /// A close whose time ran out, as the runtime ends one at its deadline: the shard refuses
    /// new records and fails every batch still incomplete (`Engine::abort_all`).
    pub fn close_now(&mut self, shard: usize) {
        let engine = &mut self.shards[shard].engine;
        engine.begin_close();
        engine.abort_all(ProduceError::Closed);
        self.drive(shard);
    }

    pub fn flush_done(&mut self, flush: usize) -> bool {
        let (shard, token) = self.flush_tokens[flush];
        self.shards[shard].engine.flush_done(token)
    }

    // ----------------------------------------------------------------------------------------
    // Sending
    // ----------------------------------------------------------------------------------------

    /// Appends one record to `tp` now. Its value starts with its id; `pad` more bytes follow.
    pub fn send(&mut self, tp: &TopicPartition, key: Option<&[u8]>, pad: usize) -> RecordId {
        let id = self.append_one(tp, key, pad, &[]);
        let shard = self.shard_of(tp);
        self.drive(shard);
        id
    }

    /// Appends `count` records to `tp` at once (they share a batch while it has room), then
    /// lets the engine run.
    pub fn send_many(&mut self, tp: &TopicPartition, count: usize, pad: usize) -> Vec<RecordId> {
        let ids = (0..count)
            .map(|_| self.append_one(tp, None, pad, &[]))
            .collect();
        let shard = self.shard_of(tp);
        self.drive(shard);
        ids
    }

    /// Appends one record with headers, without running the engine.
    pub fn append_with_headers(
        &mut self,
        tp: &TopicPartition,
        key: Option<&[u8]>,
        pad: usize,
        headers: &[Header<'_>],
    ) -> RecordId {
        self.append_one(tp, key, pad, headers)
    }

    /// Lets the engine owning `tp` run (after appends without it).
    pub fn kick(&mut self, tp: &TopicPartition) {
        let shard = self.shard_of(tp);
        self.drive(shard);
    }

    fn append_one(
        &mut self,
        tp: &TopicPartition,
        key: Option<&[u8]>,
        pad: usize,
        headers: &[Header<'_>],
    ) -> RecordId {
        let partition = self.partition_index[tp];
        let shard = self.shard_of[partition];
        let id = self.results.len() as RecordId;
        let mut value = Vec::with_capacity(8 + pad);
        value.extend_from_slice(&u64::from(id).to_le_bytes());
        let mut left = pad;
        while left > 0 {
            let n = left.min(PAD.len());
            value.extend_from_slice(&PAD[..n]);
            left -= n;
        }
        let payload = value.len() + key.map_or(0, <[u8]>::len);
        let upper = crate::engine::batch::record_size_upper_bound(key, Some(&value), headers);
        self.results.push(None);
        self.record_sizes.push((payload as u32, upper as u32));
        self.memory.records.fetch_add(payload, Relaxed);
        let s = &mut self.shards[shard];
        s.outstanding_upper += upper;
        s.outstanding_records += 1;
        self.checker.on_send(id, partition, self.now);
        let delivery = SimDelivery {
            id,
            sink: Rc::clone(&self.completions),
        };
        let timestamp = EPOCH_MS + (self.now / MS) as i64;
        self.shards[shard].engine.append(
            self.now,
            tp,
            timestamp,
            key,
            Some(&value),
            headers,
            delivery,
        );
        id
    }
}

/// Whether a Produce request frame (length prefix included) carries a batch for `tp`.
fn produce_request_carries(frame: &Bytes, tp: &TopicPartition) -> bool {
    let mut body = frame.slice(4..);
    let api = i16::from_be_bytes([body[0], body[1]]);
    if api != WireApiKey::Produce as i16 {
        return false;
    }
    let version = i16::from_be_bytes([body[2], body[3]]);
    if RequestHeader::decode(
        &mut body,
        WireApiKey::Produce.request_header_version(version),
    )
    .is_err()
    {
        return true;
    }
    let Ok(request) = ProduceRequest::decode(&mut body, version) else {
        return true;
    };
    request.topic_data.iter().any(|t| {
        t.name.0.as_str() == &*tp.topic && t.partition_data.iter().any(|p| p.index == tp.partition)
    })
}

/// `buffer.memory` in the simulator: the payload of unresolved records (the application waits
/// while it is full, as `send` does) and what the engines' batches charge beyond them, with the
/// producer's slack for batches (`engine::batch_memory`).
struct SimMemory {
    limit: usize,
    records: AtomicUsize,
    batches: AtomicUsize,
}

impl SimMemory {
    fn used(&self) -> usize {
        self.records.load(Relaxed) + self.batches.load(Relaxed)
    }
}

impl BatchMemory for SimMemory {
    fn try_charge(&self, bytes: usize) -> bool {
        if self.used() + bytes > self.limit + batch_slack(self.limit) {
            return false;
        }
        self.batches.fetch_add(bytes, Relaxed);
        true
    }

    fn release(&self, bytes: usize) {
        self.batches.fetch_sub(bytes, Relaxed);
    }
}
