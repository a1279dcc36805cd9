//! The failover tests' harness: the reference cluster they run against, the ledger of every
//! record sent and its outcome, the read-back check against librdkafka's consumer, and the
//! soak's fault schedule. Shared by `failover.rs` and `failover_sasl_ssl.rs`.
#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kacrab::stats::RuntimeStats;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::internals::protocol::record_batch::RecordBatchHeader;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{DeliveryFuture, ProduceError, Producer, ProducerRecord, RecordMetadata};
use kafka_protocol::messages::ApiKey;

use super::common::{self, read_back_with, Isolation};

pub const PARTITIONS: i32 = 12;
pub const BROKERS: i32 = 3;
pub const PAYLOAD_BYTES: usize = 32;

pub fn leader_of(partition: i32) -> i32 {
    1 + partition % BROKERS
}

pub fn start_cluster(topic: &str) -> ReferenceCluster {
    let cluster = ReferenceCluster::start(BROKERS as usize, BrokerRules::default());
    let leaders: Vec<i32> = (0..PARTITIONS).map(leader_of).collect();
    cluster.create_topic(topic, &leaders);
    cluster
}

pub fn producer(cluster: &ReferenceCluster, extra: &[(&str, &str)]) -> Producer {
    common::kacrab_producer(&cluster.bootstrap_servers(), extra)
}

/// Waits until `condition` holds, re-checking every few milliseconds; false if `timeout`
/// passed first.
pub fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    // A condition variable nothing signals: a bounded wait between checks.
    let (lock, cvar) = (std::sync::Mutex::new(()), std::sync::Condvar::new());
    let mut guard = lock.lock().unwrap();
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        guard = cvar
            .wait_timeout(guard, Duration::from_millis(2))
            .unwrap()
            .0;
    }
}

/// Waits until `condition` holds; panics after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, condition: impl FnMut() -> bool) {
    assert!(
        eventually(timeout, condition),
        "timed out waiting for {what}"
    );
}

/// Waits until `condition` holds of the producer's runtime stats, re-checked on each change
/// the runtime signals; panics after `timeout`.
pub fn wait_for_stats(
    producer: &Producer,
    what: &str,
    timeout: Duration,
    condition: impl FnMut(&RuntimeStats) -> bool,
) {
    assert!(
        producer.wait_for_runtime_stats(timeout, condition),
        "timed out waiting for {what}: {:?}",
        producer.runtime_stats().shards
    );
}

pub type Outcome = Result<RecordMetadata, ProduceError>;

/// Every record sent, by id (its index), with its partition and outcome once known.
pub struct Ledger {
    pub topic: String,
    pub partitions: Vec<i32>,
    pub futures: Vec<Option<DeliveryFuture>>,
    pub outcomes: Vec<Option<Outcome>>,
    /// Ids not known to be resolved, oldest first (pruned by `sweep`).
    pub unresolved: Vec<usize>,
    /// The producer sent through, for the runtime's view when a wait times out.
    pub producer: Option<Producer>,
}

impl Ledger {
    pub fn new(topic: &str) -> Self {
        Ledger {
            topic: topic.to_string(),
            partitions: Vec::new(),
            futures: Vec::new(),
            outcomes: Vec::new(),
            unresolved: Vec::new(),
            producer: None,
        }
    }

    pub fn len(&self) -> usize {
        self.partitions.len()
    }

    /// Sends record `id = len()` to `partition`: its payload is the id, then filler.
    pub fn send(&mut self, producer: &Producer, partition: i32) -> usize {
        let id = self.len();
        let mut payload = (id as u64).to_be_bytes().to_vec();
        payload.resize(PAYLOAD_BYTES, b'.');
        let future = producer.send(
            ProducerRecord::new(self.topic.as_str(), Bytes::from(payload))
                .with_partition(partition),
        );
        self.partitions.push(partition);
        self.futures.push(Some(future));
        self.outcomes.push(None);
        self.unresolved.push(id);
        if self.producer.is_none() {
            self.producer = Some(producer.clone());
        }
        id
    }

    /// Collects every outcome known now; returns how many records are still unresolved.
    pub fn sweep(&mut self) -> usize {
        let mut unresolved = std::mem::take(&mut self.unresolved);
        unresolved.retain(|&id| !self.poll(id));
        self.unresolved = unresolved;
        self.unresolved.len()
    }

    /// Sends one record to each partition, `rounds` times.
    pub fn send_rounds(&mut self, producer: &Producer, rounds: usize) {
        for _ in 0..rounds {
            for partition in 0..PARTITIONS {
                self.send(producer, partition);
            }
        }
    }

    /// Collects the outcome of `id` if it is known now.
    pub fn poll(&mut self, id: usize) -> bool {
        if self.outcomes[id].is_none() {
            if let Some(outcome) = self.futures[id].as_ref().and_then(|f| f.try_result()) {
                self.outcomes[id] = Some(outcome);
                self.futures[id] = None;
            }
        }
        self.outcomes[id].is_some()
    }

    pub fn is_resolved(&mut self, id: usize) -> bool {
        self.poll(id)
    }

    /// Waits until every record selected by `select` has an outcome.
    pub fn wait_for(&mut self, what: &str, timeout: Duration, select: impl Fn(usize, i32) -> bool) {
        let deadline = Instant::now() + timeout;
        for id in self.unresolved.clone() {
            if !select(id, self.partitions[id]) || self.poll(id) {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let outcome = self.futures[id]
                .as_ref()
                .expect("unresolved has a future")
                .wait_timeout(left);
            match outcome {
                Some(outcome) => {
                    self.outcomes[id] = Some(outcome);
                    self.futures[id] = None;
                }
                None => panic!(
                    "timed out waiting for {what}: record {id} (partition {}) unresolved; {:?}",
                    self.partitions[id],
                    self.producer.as_ref().map(Producer::runtime_stats)
                ),
            }
        }
        self.sweep();
    }

    pub fn wait_all(&mut self, timeout: Duration) {
        self.wait_for("every record", timeout, |_, _| true);
    }

    pub fn outcome(&self, id: usize) -> Option<&Outcome> {
        self.outcomes[id].as_ref()
    }
}

/// What a verified run amounted to.
#[derive(Debug, Default)]
pub struct Verdict {
    pub read: usize,
    pub acked: usize,
    pub failed_definitely: usize,
    pub outcome_unknown: usize,
    pub outcome_unknown_in_log: usize,
}

/// Reads the topic back with librdkafka's consumer and checks it against the ledger, record
/// by record. Panics on the first violation.
pub fn verify(cluster: &ReferenceCluster, ledger: &Ledger) -> Verdict {
    verify_read_by(&Reader::plaintext(cluster), ledger)
}

/// Where and how librdkafka's consumer reads the log back.
pub struct Reader {
    pub bootstrap: String,
    /// Consumer settings (`security.protocol`, `sasl.*`, ...).
    pub settings: Vec<(&'static str, String)>,
}

impl Reader {
    /// The cluster's listeners, without TLS or SASL.
    pub fn plaintext(cluster: &ReferenceCluster) -> Reader {
        Reader {
            bootstrap: cluster.bootstrap_servers(),
            settings: Vec::new(),
        }
    }
}

/// [`verify`] with the log read by `reader`.
pub fn verify_read_by(reader: &Reader, ledger: &Ledger) -> Verdict {
    let settings: Vec<(&str, &str)> = reader
        .settings
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .collect();
    let log = read_back_with(
        &reader.bootstrap,
        &ledger.topic,
        PARTITIONS,
        Isolation::ReadUncommitted,
        Duration::from_secs(120),
        &settings,
    );
    let mut found: HashMap<usize, (i32, i64)> = HashMap::new();
    let mut verdict = Verdict::default();
    for (partition, records) in log.iter().enumerate() {
        let mut last: Option<usize> = None;
        for record in records {
            let payload = record.payload.as_deref().expect("payload");
            let id = u64::from_be_bytes(payload[..8].try_into().unwrap()) as usize;
            assert!(
                id < ledger.len(),
                "p{partition}: record {id} was never sent"
            );
            assert_eq!(
                ledger.partitions[id], partition as i32,
                "record {id} in the wrong partition"
            );
            if let Some(previous) = found.insert(id, (partition as i32, record.offset)) {
                panic!(
                    "record {id} duplicated: offsets {} and {}",
                    previous.1, record.offset
                );
            }
            if let Some(last) = last {
                assert!(
                    id > last,
                    "p{partition}: record {id} after {last}: not in send order"
                );
            }
            last = Some(id);
            verdict.read += 1;
        }
    }
    for id in 0..ledger.len() {
        match ledger.outcome(id) {
            None => panic!("record {id} never resolved"),
            Some(Ok(meta)) => {
                let at = found.get(&id).unwrap_or_else(|| {
                    panic!(
                        "record {id} acknowledged at offset {} but lost",
                        meta.offset
                    )
                });
                assert_eq!(
                    *at,
                    (meta.partition, meta.offset),
                    "record {id}: acknowledged (partition, offset) differs from the log"
                );
                verdict.acked += 1;
            }
            Some(Err(err)) if err.is_outcome_unknown() => {
                verdict.outcome_unknown += 1;
                verdict.outcome_unknown_in_log += usize::from(found.contains_key(&id));
            }
            Some(Err(err)) => {
                assert!(
                    !found.contains_key(&id),
                    "record {id} failed definitely ({err}) but is in the log"
                );
                verdict.failed_definitely += 1;
            }
        }
    }
    verdict
}

/// The (producer id, epoch) pairs the broker holds batches of, every partition.
/// The compression codecs (attribute bits) of every batch in `topic`'s logs.
pub fn log_codecs(cluster: &ReferenceCluster, topic: &str) -> BTreeSet<u8> {
    cluster.with_cluster(|c| {
        (0..PARTITIONS)
            .flat_map(|p| {
                c.partition_log(topic, p)
                    .iter()
                    .map(|b| RecordBatchHeader::parse(&b.bytes).unwrap().compression())
                    .collect::<Vec<_>>()
            })
            .collect()
    })
}

pub fn log_epochs(cluster: &ReferenceCluster, topic: &str) -> BTreeSet<(i64, i16)> {
    cluster.with_cluster(|c| {
        (0..PARTITIONS)
            .flat_map(|p| {
                c.partition_log(topic, p)
                    .iter()
                    .map(|b| (b.producer_id, b.producer_epoch))
                    .collect::<Vec<_>>()
            })
            .collect()
    })
}

/// The broker's own view: within each partition, the batches of one (producer id, epoch)
/// have contiguous sequences from where that epoch started, and offsets are contiguous.
pub fn assert_broker_logs_contiguous(cluster: &ReferenceCluster, topic: &str) {
    cluster.with_cluster(|c| {
        for partition in 0..PARTITIONS {
            let log = c.partition_log(topic, partition);
            for pair in log.windows(2) {
                assert_eq!(
                    pair[0].last_offset + 1,
                    pair[1].base_offset,
                    "p{partition}: offsets"
                );
                if (pair[0].producer_id, pair[0].producer_epoch)
                    == (pair[1].producer_id, pair[1].producer_epoch)
                {
                    assert_eq!(
                        pair[0].last_sequence + 1,
                        pair[1].base_sequence,
                        "p{partition}: sequences within epoch {}",
                        pair[0].producer_epoch
                    );
                } else {
                    assert_eq!(
                        pair[1].base_sequence, 0,
                        "p{partition}: a new epoch starts at sequence 0"
                    );
                }
            }
        }
    });
}

/// Sockets and tasks back to steady: each shard holds at most one connection per broker,
/// every socket the client holds is one the broker counts open, and two tasks (reader and
/// writer) run per socket.
pub fn assert_steady(cluster: &ReferenceCluster, producer: &Producer) -> RuntimeStats {
    let mut stats = producer.runtime_stats();
    wait_until(
        "connections back to steady",
        Duration::from_secs(30),
        || {
            stats = producer.runtime_stats();
            let one_per_node = stats.shards.iter().all(|s| {
                let nodes: BTreeSet<i32> = s.connections.iter().map(|c| c.node).collect();
                nodes.len() == s.connections.len() && s.connections.iter().all(|c| c.established)
            });
            one_per_node
                && stats.sockets_open == cluster.stats().connections_open()
                && stats.connection_tasks == 2 * stats.sockets_open
        },
    );
    stats
}

/// After close: the client holds no socket and no task, and the broker sees every
/// connection closed.
pub fn assert_closed_cleanly(cluster: &ReferenceCluster, producer: &Producer) {
    producer.close(Duration::from_secs(10));
    let stats = producer.runtime_stats();
    assert_eq!(stats.sockets_open, 0, "sockets left open after close");
    assert_eq!(stats.connection_tasks, 0, "tasks left alive after close");
    assert_eq!(producer.buffered_bytes(), 0);
    assert!(
        cluster
            .stats()
            .wait_for_connections_open(0, Duration::from_secs(10)),
        "timed out waiting for the broker to see every connection closed"
    );
}

pub fn warm_up(ledger: &mut Ledger, producer: &Producer) {
    ledger.send_rounds(producer, 5);
    ledger.wait_all(Duration::from_secs(30));
    for id in 0..ledger.len() {
        assert!(
            matches!(ledger.outcome(id), Some(Ok(_))),
            "warm-up record {id}: {:?}",
            ledger.outcome(id)
        );
    }
}

/// xorshift64*: the soak's faults are reproducible from `KACRAB_SOAK_SEED`.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The producer settings of the soak: a short request timeout, so that delayed answers time
/// out, and a small buffer, so that the sender feels back-pressure.
pub const SOAK_SETTINGS: [(&str, &str); 3] = [
    ("request.timeout.ms", "1500"),
    ("delivery.timeout.ms", "60000"),
    ("buffer.memory", "8388608"),
];

pub fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The fault schedule of the soak: one fault per tick, drawn from every kind the reference
/// cluster has. At most one broker is down at a time, for a few ticks.
pub struct FaultMaker {
    pub rng: Rng,
    pub topic: String,
    pub down: Option<(i32, u64)>,
    pub applied: std::collections::BTreeMap<&'static str, u64>,
}

impl FaultMaker {
    pub fn apply(&mut self, cluster: &ReferenceCluster, tick: u64) {
        use kacrab::testkit::broker::error_codes::*;
        if let Some((broker, until)) = self.down {
            if tick >= until {
                cluster.broker_up(broker);
                self.down = None;
                self.count("broker up");
            }
        }
        let broker = 1 + self.rng.below(BROKERS as u64) as i32;
        let faults = cluster.faults();
        let kind = match self.rng.below(100) {
            0..=14 => {
                faults.drop_response_after_append(broker, ApiKey::Produce, 1);
                "drop answer after append"
            }
            15..=24 => {
                let mid_frame = self.rng.below(2) == 0;
                faults.reset_connection(broker, ApiKey::Produce, 1, mid_frame);
                if mid_frame {
                    "reset mid-frame"
                } else {
                    "reset"
                }
            }
            25..=29 => {
                faults.reset_connection(broker, ApiKey::Metadata, 1, false);
                "reset on metadata"
            }
            30..=44 => {
                // Some beyond request.timeout.ms (1500 ms): the engine times them out.
                let delay = Duration::from_millis(20 + self.rng.below(2500));
                faults.delay_response(broker, ApiKey::Produce, 1, delay);
                if delay > Duration::from_millis(1500) {
                    "delay beyond request timeout"
                } else {
                    "delay"
                }
            }
            45..=64 => {
                let errors = [
                    NOT_LEADER_OR_FOLLOWER,
                    NOT_ENOUGH_REPLICAS,
                    REQUEST_TIMED_OUT,
                    LEADER_NOT_AVAILABLE,
                    UNKNOWN_LEADER_EPOCH,
                    CORRUPT_MESSAGE,
                ];
                let error = errors[self.rng.below(errors.len() as u64) as usize];
                faults.inject_error(
                    broker,
                    ApiKey::Produce,
                    error,
                    1 + self.rng.below(3) as usize,
                );
                "retriable error"
            }
            65..=67 => {
                // Not retriable: the batches of that request fail; definitely unless an
                // earlier attempt's outcome was unknown.
                faults.inject_error(broker, ApiKey::Produce, INVALID_RECORD, 1);
                "non-retriable error"
            }
            68..=72 => {
                faults.inject_error(broker, ApiKey::Metadata, LEADER_NOT_AVAILABLE, 1);
                "metadata error"
            }
            73..=89 => {
                let partition = self.rng.below(PARTITIONS as u64) as i32;
                let (current, _) = cluster
                    .with_cluster(|c| c.leader(&self.topic, partition))
                    .expect("partition");
                let to = 1 + (current + self.rng.below(2) as i32) % BROKERS;
                cluster.set_leader(&self.topic, partition, to);
                "leader move"
            }
            _ => {
                if self.down.is_some() {
                    return self.apply(cluster, tick);
                }
                cluster.broker_down(broker);
                self.down = Some((broker, tick + 3 + self.rng.below(8)));
                "broker down"
            }
        };
        self.count(kind);
    }

    pub fn count(&mut self, kind: &'static str) {
        *self.applied.entry(kind).or_default() += 1;
    }

    pub fn heal(&mut self, cluster: &ReferenceCluster) {
        if let Some((broker, _)) = self.down.take() {
            cluster.broker_up(broker);
        }
        cluster.faults().clear();
    }
}

/// The soak: `records` records over `secs` seconds to every partition of `topic` through
/// `producer`, with one fault about every 100 ms drawn from `seed`; then, healed, every
/// record is checked against the log as `reader` reads it.
pub fn soak(
    cluster: std::sync::Arc<ReferenceCluster>,
    topic: &str,
    producer: Producer,
    reader: &Reader,
    secs: u64,
    records: usize,
    seed: u64,
) {
    let ticks = (secs * 10).max(1);
    let per_tick = records.div_ceil(ticks as usize);
    println!("soak: {secs} s, {records} records, seed {seed:#x}");
    let mut ledger = Ledger::new(topic);
    warm_up(&mut ledger, &producer);

    let tick = std::sync::Arc::new((std::sync::Mutex::new(0u64), std::sync::Condvar::new()));
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let injector = {
        let cluster = cluster.clone();
        let tick = tick.clone();
        let mut maker = FaultMaker {
            rng: Rng(seed),
            topic: topic.to_string(),
            down: None,
            applied: Default::default(),
        };
        std::thread::spawn(move || {
            let mut n = 0u64;
            // One fault per ~100 ms until told to stop.
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stop_rx.recv_timeout(Duration::from_millis(100))
            {
                maker.apply(&cluster, n);
                n += 1;
                *tick.0.lock().unwrap() = n;
                tick.1.notify_all();
            }
            maker.heal(&cluster);
            maker.applied
        })
    };

    let started = Instant::now();
    let mut rng = Rng(seed.rotate_left(17) | 1);
    let base = ledger.len();
    for t in 0..ticks {
        {
            // Keep records spread over the fault schedule: this tick's share goes out once
            // the injector has reached it.
            let (lock, cvar) = &*tick;
            let guard = lock.lock().unwrap();
            let (guard, timeout) = cvar
                .wait_timeout_while(guard, Duration::from_secs(10), |n| *n < t)
                .unwrap();
            assert!(
                !timeout.timed_out(),
                "the fault injector stalled at {}",
                *guard
            );
        }
        let goal = (base + records).min(ledger.len() + per_tick);
        while ledger.len() < goal {
            ledger.send(&producer, rng.below(PARTITIONS as u64) as i32);
        }
        ledger.sweep();
        if ledger.len() >= base + records {
            break;
        }
    }
    let sending = started.elapsed();
    stop_tx.send(()).unwrap();
    let applied = injector.join().expect("fault injector");
    assert!(cluster
        .faults()
        .wait_until_consumed(Duration::from_secs(10)));
    let unresolved_at_heal = ledger.sweep();
    ledger.wait_all(Duration::from_secs(90));
    let settled = started.elapsed();

    let mut failures: std::collections::BTreeMap<String, usize> = Default::default();
    for id in 0..ledger.len() {
        if let Some(Err(err)) = ledger.outcome(id) {
            let kind = format!("{err:?}");
            let kind = kind.split([' ', '{', '(']).next().unwrap_or("").to_string();
            *failures.entry(kind).or_default() += 1;
        }
    }
    let verdict = verify_read_by(reader, &ledger);
    assert_eq!(
        verdict.acked + verdict.failed_definitely + verdict.outcome_unknown,
        ledger.len(),
        "sent = acknowledged + failed"
    );
    // A completed record's bytes come back at the end of its shard's turn: a flush returns
    // after that.
    assert!(producer.flush_timeout(Duration::from_secs(30)), "flushed");
    assert_eq!(producer.buffered_bytes(), 0, "buffer.memory fully returned");
    let steady = assert_steady(&cluster, &producer);
    let engine = steady.engine_totals();
    println!(
        "soak: {} records sent in {sending:?} ({unresolved_at_heal} unresolved when the faults \
         stopped, all resolved after {settled:?})",
        ledger.len()
    );
    println!("faults applied: {applied:?}");
    println!("{verdict:?}; failures by type: {failures:?}");
    println!(
        "engine: {} produce requests, {} batches, {} retries, {} epoch bumps requested, {} \
         sequence rewrites, {} disconnects, {} protocol errors",
        engine.produce_requests,
        engine.batches_sent,
        engine.retries,
        engine.epoch_bumps_requested,
        engine.sequence_rewrites,
        engine.disconnects,
        engine.protocol_errors
    );
    println!(
        "runtime: {} connects ({} failed), closed by peer {}, abandoned {}, truncated {}, \
         refused frames {}, io errors {}; now {} sockets, {} tasks; broker: {} duplicates \
         answered, {} connections open",
        steady.connects_started,
        steady.connect_failures,
        steady.closed_by_peer,
        steady.abandoned,
        steady.truncated_frames,
        steady.refused_frames,
        steady.io_errors,
        steady.sockets_open,
        steady.connection_tasks,
        cluster.with_cluster(|c| c.duplicates_answered()),
        cluster.stats().connections_open()
    );
    assert_closed_cleanly(&cluster, &producer);
}
