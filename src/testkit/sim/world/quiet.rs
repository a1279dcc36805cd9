//! Kafka's quieter behaviours as random fault classes, and a count of every fault class a run
//! drew (for the coverage floors of the simulator's tests).
//!
//! None of these is an error a broker announces; each changes what a retry finds:
//! - **Snapshot reload** (`snapshot_reload`): a broker that comes back up, or a replica that
//!   becomes leader after a restart, rebuilds producer state from its snapshot, which holds only
//!   the last batch per producer (Kafka's `ProducerStateManager.writeSnapshot`/`readSnapshot`).
//!   A retry of an older batch that is in the log is then OUT_OF_ORDER_SEQUENCE_NUMBER.
//! - **Expiry with batches in flight** (`expiry_every`, current brokers): Kafka's
//!   `ProducerStateManager.removeExpiredProducers` drops a producer once its last *record*
//!   timestamp is `producer.id.expiration.ms` old, so an application writing old timestamps
//!   loses its state while batches are in flight. With no entry, Kafka 2.5+ accepts any
//!   sequence (`ProducerAppendInfo.checkSequence`, no-entry branch; no UNKNOWN_PRODUCER_ID since
//!   KIP-360), so a later in-flight batch may land first and the earlier one then gets
//!   OUT_OF_ORDER_SEQUENCE_NUMBER. The world expires only when the log's order and uniqueness
//!   stay up to the producer (see [`Sim::expiry_keeps_order`]): a retry of an appended batch
//!   after expiry is appended twice on a real broker too, and a batch older than the log's
//!   last record is appended behind it, and no producer can prevent either.
//! - **Late append** (`late_append`): a Produce request waits in the broker's request queue
//!   (a stuck request handler) for seconds, past `request.timeout.ms`; the client gives up,
//!   closes the connection and retries elsewhere, and the broker appends the old request
//!   anyway when it gets to it (Kafka's `SocketServer` hands requests already read to the
//!   handlers whatever happens to the connection afterwards; only the response is dropped).
//!   Requests behind it on the same connection are not read (the channel is muted while a
//!   request is processed).
//! - **Sequence wrap** (`wrap_span`): every partition's first batch starts within `wrap_span`
//!   of `i32::MAX`, so the wrap to 0 happens among the other faults.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey as WireApiKey, ProduceRequest, RequestHeader};
use kafka_protocol::protocol::Decodable;

use crate::engine::{Micros, TopicPartition};
use crate::protocol::error_code::code;

use super::super::checker::{for_each_record_value, record_id_of, RecordId, Verdict};
use super::super::rng::Rng;
use super::{Chaos, ConnState, Event, Fault, PendingAnswer, Sim, EPOCH_MS, MS};

/// The quiet fault classes a random plan draws (all off by default).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuietFaults {
    /// Probability that a broker coming back up, or a partition's new leader, reloads
    /// producer state from its snapshot.
    pub snapshot_reload: f64,
    /// Mean time between expiries of the producer's state on a random partition.
    pub expiry_every: Option<Micros>,
    /// Probability that a Produce request is held in the broker's queue and appended late.
    pub late_append: f64,
    /// How long a held request waits, uniform in this range.
    pub late_append_delay: (Micros, Micros),
    /// Start every partition's sequence this close (at most) below `i32::MAX`.
    pub wrap_span: Option<u32>,
}

impl QuietFaults {
    pub fn is_off(&self) -> bool {
        *self == QuietFaults::default()
    }

    /// Draws the quiet classes of a random plan from its own stream of `seed`, so the rest of
    /// the plan is what it was without them. Expiry with batches in flight is drawn for
    /// current brokers only: legacy brokers lose state by their own rules (`state_loss_every`).
    pub fn draw(seed: u64, current_broker: bool, request_timeout: Micros) -> Self {
        let mut rng = Rng::new(seed ^ 0x0071_e7fa_d4a3);
        QuietFaults {
            snapshot_reload: if rng.chance(0.5) {
                rng.range(2, 10) as f64 / 10.0
            } else {
                0.0
            },
            expiry_every: (current_broker && rng.chance(0.35)).then(|| rng.range(300, 3_000) * MS),
            late_append: if rng.chance(0.4) {
                0.002 + rng.below(30) as f64 / 1_000.0
            } else {
                0.0
            },
            // From well inside the request timeout to well past it (and past a reconnect).
            late_append_delay: (request_timeout / 4, 3 * request_timeout),
            wrap_span: rng.chance(0.15).then(|| rng.range(1, 400) as u32),
        }
    }
}

/// How often each fault class happened in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub drop_request: u64,
    pub reset_before_processing: u64,
    pub drop_response: u64,
    pub reset_mid_frame: u64,
    pub delay: u64,
    pub inject_retriable: u64,
    pub inject_fatal: u64,
    pub append_then_answer: u64,
    /// NOT_LEADER_OR_FOLLOWER or KAFKA_STORAGE_ERROR after the append (`Chaos::leader_lost_after_append`).
    pub leader_lost_after_append: u64,
    pub coordinator_not_available: u64,
    /// Requests in transit when the client closed, served anyway (`Chaos::late_serve`).
    pub late_serve: u64,
    pub snapshot_reloads: u64,
    pub expiries_in_flight: u64,
    pub late_appends: u64,
    pub wrap_starts: u64,
    /// Connections the broker closed for idleness (`idle`).
    pub idle_closes: u64,
    /// Requests that arrived after the broker's idle close of their connection, unread.
    pub idle_crossings: u64,
}

impl FaultCounts {
    pub fn add(&mut self, other: &FaultCounts) {
        for (mine, theirs) in self.fields_mut().into_iter().zip(other.classes()) {
            *mine += theirs.1;
        }
    }

    /// Every class by name, for reports and floors.
    pub fn classes(&self) -> [(&'static str, u64); 17] {
        [
            ("drop_request", self.drop_request),
            ("reset_before_processing", self.reset_before_processing),
            ("drop_response", self.drop_response),
            ("reset_mid_frame", self.reset_mid_frame),
            ("delay", self.delay),
            ("inject_retriable", self.inject_retriable),
            ("inject_fatal", self.inject_fatal),
            ("append_then_answer", self.append_then_answer),
            ("leader_lost_after_append", self.leader_lost_after_append),
            ("coordinator_not_available", self.coordinator_not_available),
            ("late_serve", self.late_serve),
            ("snapshot_reloads", self.snapshot_reloads),
            ("expiries_in_flight", self.expiries_in_flight),
            ("late_appends", self.late_appends),
            ("wrap_starts", self.wrap_starts),
            ("idle_closes", self.idle_closes),
            ("idle_crossings", self.idle_crossings),
        ]
    }

    fn fields_mut(&mut self) -> [&mut u64; 17] {
        [
            &mut self.drop_request,
            &mut self.reset_before_processing,
            &mut self.drop_response,
            &mut self.reset_mid_frame,
            &mut self.delay,
            &mut self.inject_retriable,
            &mut self.inject_fatal,
            &mut self.append_then_answer,
            &mut self.leader_lost_after_append,
            &mut self.coordinator_not_available,
            &mut self.late_serve,
            &mut self.snapshot_reloads,
            &mut self.expiries_in_flight,
            &mut self.late_appends,
            &mut self.wrap_starts,
            &mut self.idle_closes,
            &mut self.idle_crossings,
        ]
    }

    /// Counts one fault picked for a request.
    pub(super) fn count(&mut self, fault: Fault, chaos: Option<&Chaos>) {
        let field = match fault {
            Fault::None | Fault::Hold => return,
            Fault::DropRequest => &mut self.drop_request,
            Fault::ResetBeforeProcessing => &mut self.reset_before_processing,
            Fault::DropResponse { .. } => &mut self.drop_response,
            Fault::ResetMidFrame => &mut self.reset_mid_frame,
            Fault::Delay(_) => &mut self.delay,
            Fault::Inject(code::COORDINATOR_NOT_AVAILABLE) => &mut self.coordinator_not_available,
            Fault::Inject(error) if chaos.is_some_and(|c| c.fatal_to_batch.contains(&error)) => {
                &mut self.inject_fatal
            }
            Fault::Inject(_) => &mut self.inject_retriable,
            Fault::AppendThenAnswer(error)
                if chaos.is_some_and(|c| c.leader_lost_after_append.contains(&error)) =>
            {
                &mut self.leader_lost_after_append
            }
            Fault::AppendThenAnswer(_) => &mut self.append_then_answer,
        };
        *field += 1;
    }
}

/// A Produce request waiting in a broker's queue.
struct HeldRequest {
    token: u64,
    conn: u64,
    broker: i32,
    /// The broker's restart count when it read the request: a restart loses the queue.
    broker_life: u64,
    frame: Bytes,
    trace: Option<usize>,
}

/// The world's side of the quiet faults.
#[derive(Default)]
pub(super) struct QuietWorld {
    faults: QuietFaults,
    rng: Option<Rng>,
    pub(super) counts: FaultCounts,
    held: Vec<HeldRequest>,
    next_token: u64,
    /// Times each broker went down (a restart empties its request queue).
    broker_lives: std::collections::HashMap<i32, u64>,
}

impl QuietWorld {
    fn rng(&mut self) -> &mut Rng {
        self.rng.as_mut().expect("quiet faults are set")
    }
}

impl Sim {
    /// Turns the quiet fault classes on (they act only while chaos is on). With `wrap_span`,
    /// runs until every engine has a producer id and starts each partition's sequence near
    /// `i32::MAX`; call it before the first send.
    pub fn set_quiet_faults(&mut self, faults: QuietFaults) {
        let mut rng = Rng::new(self.setup.seed ^ 0x0071_e7fa_0175);
        if faults.is_off() {
            return;
        }
        let first_expiry = faults.expiry_every.map(|mean| exp_gap(&mut rng, mean));
        self.quiet.faults = faults.clone();
        self.quiet.rng = Some(rng);
        if let Some(at) = first_expiry {
            self.schedule_expiry_tick(self.now + at);
        }
        if let Some(span) = faults.wrap_span {
            self.start_near_the_wrap(span);
        }
    }

    /// Fault classes drawn so far.
    pub fn fault_counts(&self) -> &FaultCounts {
        &self.quiet.counts
    }

    fn quiet_active(&self) -> bool {
        self.chaos.is_some() && self.quiet.rng.is_some()
    }

    fn start_near_the_wrap(&mut self, span: u32) {
        self.start();
        let limit = self.now + 60 * super::SECOND;
        let ready = self.run_while_not(limit, |sim| {
            sim.shards.iter().all(|s| s.engine.identity().is_valid())
        });
        if !ready {
            return;
        }
        for tp in self.partitions.clone() {
            let below = self.quiet.rng().below(u64::from(span)) as i32;
            self.start_sequence_at(&tp, i32::MAX - below);
        }
        self.quiet.counts.wrap_starts += 1;
    }

    /// `broker` came back up: with `snapshot_reload`, it restarted and every partition it
    /// leads loads producer state from its snapshot.
    pub(super) fn quiet_on_broker_up(&mut self, broker: i32) {
        if !self.quiet_active() {
            return;
        }
        let p = self.quiet.faults.snapshot_reload;
        if self.quiet.rng().chance(p) {
            let now_ms = self.now_ms();
            self.shared
                .cluster()
                .reload_broker_producer_state(broker, now_ms);
            self.quiet.counts.snapshot_reloads += 1;
        }
    }

    pub(super) fn quiet_on_broker_down(&mut self, broker: i32) {
        *self.quiet.broker_lives.entry(broker).or_default() += 1;
    }

    /// `tp` has a new leader: with `snapshot_reload`, the new leader had restarted and
    /// rebuilt its state from a snapshot rather than by replication.
    pub(super) fn quiet_on_leader_move(&mut self, tp: &TopicPartition) {
        if !self.quiet_active() {
            return;
        }
        let p = self.quiet.faults.snapshot_reload;
        if self.quiet.rng().chance(p) {
            let now_ms = self.now_ms();
            self.shared.cluster().reload_producer_state_from_snapshot(
                &tp.topic,
                tp.partition,
                now_ms,
            );
            self.quiet.counts.snapshot_reloads += 1;
        }
    }

    /// A request in transit when the client closed was served anyway.
    pub(super) fn quiet_on_late_serve(&mut self) {
        self.quiet.counts.late_serve += 1;
    }

    /// With `late_append`, holds a Produce request that reached an open connection in the
    /// broker's queue and serves it later; the connection reads nothing more meanwhile.
    /// Returns whether it was held.
    pub(super) fn quiet_hold_request(
        &mut self,
        conn: u64,
        broker: i32,
        frame: &Bytes,
        trace: Option<usize>,
    ) -> bool {
        if !self.quiet_active() || self.quiet.faults.late_append <= 0.0 {
            return false;
        }
        let p = self.quiet.faults.late_append;
        if !self.quiet.rng().chance(p) {
            return false;
        }
        let (lo, hi) = self.quiet.faults.late_append_delay;
        let delay = self.quiet.rng().range(lo, hi);
        let token = self.quiet.next_token;
        self.quiet.next_token += 1;
        let broker_life = self.quiet.broker_lives.get(&broker).copied().unwrap_or(0);
        let c = self.conns.get_mut(&conn).expect("known");
        c.state = ConnState::Stalled;
        // Counted as in transit so the connection is remembered until the request is served.
        c.in_transit += 1;
        self.quiet.held.push(HeldRequest {
            token,
            conn,
            broker,
            broker_life,
            frame: frame.clone(),
            trace,
        });
        self.at(self.now + delay, move |sim| sim.serve_held_request(token));
        true
    }

    fn serve_held_request(&mut self, token: u64) {
        let Some(i) = self.quiet.held.iter().position(|h| h.token == token) else {
            return;
        };
        let held = self.quiet.held.swap_remove(i);
        let alive = self
            .quiet
            .broker_lives
            .get(&held.broker)
            .copied()
            .unwrap_or(0)
            == held.broker_life
            && self.shared.cluster().is_broker_up(held.broker);
        if let Some(c) = self.conns.get_mut(&held.conn) {
            c.in_transit -= 1;
        }
        if alive {
            let answer = self.serve(held.broker, held.frame.slice(4..), None, held.trace);
            self.observe_logs();
            self.quiet.counts.late_appends += 1;
            let latency = self.latency();
            if let (Some(answer), Some(c)) = (answer, self.conns.get_mut(&held.conn)) {
                // The client may still be waiting (a delay under its request timeout).
                if matches!(c.state, ConnState::Open | ConnState::Stalled) {
                    let was_empty = c.answers.is_empty();
                    c.answers.push_back(PendingAnswer {
                        ready_at: Some(self.now + latency),
                        body: answer,
                        trace: held.trace,
                        then_close: false,
                    });
                    if was_empty {
                        self.schedule(self.now + latency, Event::Deliver(held.conn));
                    }
                }
            }
        }
        self.forget_if_done(held.conn);
    }

    /// Whether a request held in a broker's queue carries a batch for `tp`.
    pub(super) fn quiet_holds_request_for(&self, tp: &TopicPartition) -> bool {
        self.quiet
            .held
            .iter()
            .any(|h| !first_records(&h.frame, tp).is_empty())
    }

    fn schedule_expiry_tick(&mut self, at: Micros) {
        self.at(at, |sim| sim.expiry_tick());
    }

    fn expiry_tick(&mut self) {
        if !self.quiet_active() {
            return;
        }
        let mean = self.quiet.faults.expiry_every.expect("planned");
        let n = self.partitions.len() as u64;
        let i = self.quiet.rng().below(n) as usize;
        let tp = self.partitions[i].clone();
        if self.expiry_keeps_order(i, &tp) && self.remove_producer_state(&tp) {
            self.checker.on_producer_state_lost(i);
            self.quiet.counts.expiries_in_flight += 1;
        }
        let gap = exp_gap(self.quiet.rng(), mean);
        self.schedule_expiry_tick(self.now + gap);
    }

    /// Whether dropping the producer's state on `tp` now leaves the log's order and uniqueness
    /// up to the producer: every unresolved record of `tp` is out of the log and newer than
    /// the log's last record (the engine sends only unresolved batches), and every `tp` batch
    /// on its way to a broker (in transit on any connection, or held in a queue) is
    /// unresolved. Otherwise a real broker could append a batch twice, or behind a newer one,
    /// after the expiry, and no producer can prevent it: with no entry any sequence and any
    /// epoch is accepted, where the entry would have refused it. Batches stamped and not yet
    /// appended may be anywhere: on the wire, in a retry backoff, queued behind a bump.
    pub fn expiry_keeps_order(&mut self, partition: usize, tp: &TopicPartition) -> bool {
        self.observe_logs();
        if !self.checker.unresolved_all_after_log(partition) {
            return false;
        }
        let checker = &self.checker;
        let pending = |id: RecordId| checker.verdict(id) == Verdict::Pending;
        let travelling = self.events.iter().filter_map(|e| match &e.event {
            Event::Request { frame, .. } => Some(frame),
            _ => None,
        });
        let held = self.quiet.held.iter().map(|h| &h.frame);
        travelling
            .chain(held)
            .all(|frame| first_records(frame, tp).into_iter().all(pending))
    }

    fn now_ms(&self) -> i64 {
        EPOCH_MS + (self.now / MS) as i64
    }
}

/// The first record id of every batch for `tp` in a Produce request frame (length prefix
/// included).
fn first_records(frame: &Bytes, tp: &TopicPartition) -> Vec<RecordId> {
    let mut body = frame.slice(4..);
    let api = i16::from_be_bytes([body[0], body[1]]);
    if api != WireApiKey::Produce as i16 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([body[2], body[3]]);
    RequestHeader::decode(
        &mut body,
        WireApiKey::Produce.request_header_version(version),
    )
    .expect("the engine's request header decodes");
    let request = ProduceRequest::decode(&mut body, version).expect("the engine's request decodes");
    let mut ids = Vec::new();
    for topic in request
        .topic_data
        .iter()
        .filter(|t| t.name.0.as_str() == &*tp.topic)
    {
        for p in topic
            .partition_data
            .iter()
            .filter(|p| p.index == tp.partition)
        {
            let records = p.records.as_ref().expect("a batch");
            let mut first = None;
            for_each_record_value(records, |_, value| {
                if first.is_none() {
                    first = value.and_then(record_id_of);
                }
            });
            ids.push(first.expect("a record"));
        }
    }
    ids
}

/// Exponentially distributed gap with mean `mean` (at least 1 us).
fn exp_gap(rng: &mut Rng, mean: Micros) -> Micros {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    ((-(1.0 - u).ln()) * mean as f64).max(1.0) as Micros
}
