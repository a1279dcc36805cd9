//! Shared helpers for tests against the reference cluster: read a topic back with librdkafka's
//! consumer (an independent reader), and check what was read for exactly-once delivery.
#![allow(dead_code)]

pub mod bounded;
pub mod config;
pub mod forwarder;
pub mod logs;
#[cfg(feature = "testkit")]
pub mod stuck_buffer;
pub mod temp_file;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

/// Consumer isolation level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    ReadCommitted,
    ReadUncommitted,
}

/// One record as the consumer delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: i64,
}

/// Reads every partition of `topic` from the beginning up to its end (librdkafka's partition
/// EOF), with a consumer that assigns partitions itself: `group.id` is set only because
/// librdkafka's `assign()` needs one; nothing is committed. Records come back per partition,
/// ordered by offset. The consumer checks every batch's CRC32C (`check.crcs`), and any error it
/// reports fails the read: the log is read after the faults stopped, so a healthy cluster owes
/// the reader no errors. Panics if some partition has not reached its end within `timeout`.
pub fn read_back(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    isolation: Isolation,
    timeout: Duration,
) -> Vec<Vec<ReadRecord>> {
    read_back_with(bootstrap, topic, partitions, isolation, timeout, &[])
}

/// [`read_back`] with more consumer settings (`security.protocol`, `sasl.*`, ...).
pub fn read_back_with(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    isolation: Isolation,
    timeout: Duration,
    extra: &[(&str, &str)],
) -> Vec<Vec<ReadRecord>> {
    static READERS: AtomicU64 = AtomicU64::new(0);
    let group = format!(
        "read-back-{}-{}",
        std::process::id(),
        READERS.fetch_add(1, Ordering::Relaxed)
    );
    let mut config = ClientConfig::new();
    for (key, value) in extra {
        config.set(*key, *value);
    }
    let consumer: BaseConsumer = config
        .set("bootstrap.servers", bootstrap)
        .set("group.id", &group)
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "50")
        .set("check.crcs", "true")
        .set(
            "isolation.level",
            match isolation {
                Isolation::ReadCommitted => "read_committed",
                Isolation::ReadUncommitted => "read_uncommitted",
            },
        )
        .create()
        .expect("create the read-back consumer");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .expect("add partition");
    }
    consumer.assign(&assignment).expect("assign");

    let mut records: Vec<Vec<ReadRecord>> = (0..partitions).map(|_| Vec::new()).collect();
    let mut at_end = vec![false; partitions as usize];
    let deadline = Instant::now() + timeout;
    while at_end.iter().any(|end| !end) {
        assert!(
            Instant::now() < deadline,
            "read-back of {topic} timed out; at end: {at_end:?}; read: {:?}",
            records.iter().map(Vec::len).collect::<Vec<_>>()
        );
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => {
                let partition = message.partition();
                at_end[partition as usize] = false;
                records[partition as usize].push(ReadRecord {
                    partition,
                    offset: message.offset(),
                    key: message.key().map(<[u8]>::to_vec),
                    payload: message.payload().map(<[u8]>::to_vec),
                    headers: message
                        .headers()
                        .map(|headers| {
                            headers
                                .iter()
                                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                                .collect()
                        })
                        .unwrap_or_default(),
                    timestamp: message.timestamp().to_millis().unwrap_or(-1),
                });
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => at_end[partition as usize] = true,
            Some(Err(error)) => panic!("read-back of {topic}: the consumer reported {error}"),
        }
    }
    for partition in &records {
        assert!(
            partition.windows(2).all(|w| w[0].offset < w[1].offset),
            "offsets not increasing"
        );
    }
    records
}

/// The ids of records whose payload is an 8-byte big-endian id, per partition, in log order.
pub fn payload_ids(records: &[Vec<ReadRecord>]) -> Vec<Vec<u64>> {
    records
        .iter()
        .map(|partition| {
            partition
                .iter()
                .map(|r| {
                    let payload = r.payload.as_deref().expect("payload");
                    u64::from_be_bytes(payload[..8].try_into().expect("8-byte id"))
                })
                .collect()
        })
        .collect()
}

/// Checks exactly-once, in-order delivery: every id in `acked` is present exactly once,
/// nothing appears twice, and each partition's ids increase in log order (the producer sent
/// them in increasing order per partition). `sent` bounds what may appear at all (ids that
/// were sent but whose outcome is unknown may be present at most once). Returns a summary
/// line, or panics describing the first violation.
pub fn check_exactly_once(ids: &[Vec<u64>], acked: &[u64], sent: &[u64]) -> String {
    let mut seen: HashMap<u64, (usize, usize)> = HashMap::new();
    for (partition, partition_ids) in ids.iter().enumerate() {
        for (index, &id) in partition_ids.iter().enumerate() {
            if let Some((p, i)) = seen.insert(id, (partition, index)) {
                panic!("duplicate id {id}: partition {p} position {i} and partition {partition} position {index}");
            }
        }
        if let Some(w) = partition_ids.windows(2).find(|w| w[0] >= w[1]) {
            panic!(
                "partition {partition} out of order: {} before {}",
                w[0], w[1]
            );
        }
    }
    let sent: std::collections::HashSet<u64> = sent.iter().copied().collect();
    if let Some(id) = seen.keys().find(|id| !sent.contains(id)) {
        panic!("id {id} was never sent");
    }
    let missing: Vec<u64> = acked
        .iter()
        .copied()
        .filter(|id| !seen.contains_key(id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} acked ids missing, first {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    format!(
        "{} records read over {} partitions, {} acked, none duplicated, all in order",
        seen.len(),
        ids.len(),
        acked.len()
    )
}

/// Reads `topic` back through `bootstrap` with librdkafka (`extra`: consumer settings) and
/// checks that ids `0..count` are there, each once, in order per partition, and nothing else.
pub fn assert_read_back_exactly_once(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    count: u64,
    extra: &[(&str, &str)],
) {
    let records = read_back_with(
        bootstrap,
        topic,
        partitions,
        Isolation::ReadUncommitted,
        Duration::from_secs(60),
        extra,
    );
    assert_ids_exactly_once(&records, count);
}

/// Checks that `records` (as read back) hold ids `0..count`, each once, in order per
/// partition, and nothing else.
pub fn assert_ids_exactly_once(records: &[Vec<ReadRecord>], count: u64) {
    let ids = payload_ids(records);
    let sent: Vec<u64> = (0..count).collect();
    // Panics on a duplicate, a gap or a reordering; every id was acknowledged.
    let verdict = check_exactly_once(&ids, &sent, &sent);
    assert!(
        verdict.starts_with(&format!("{count} records read")),
        "{verdict}"
    );
}

/// Checks that each acknowledged `(id, partition, offset)` is where the log holds that id:
/// an acknowledgement's offset is a promise about the log, not only the id's presence.
pub fn check_acked_offsets(records: &[Vec<ReadRecord>], acked_at: &[(u64, i32, i64)]) {
    let mut at: HashMap<(i32, i64), u64> = HashMap::new();
    for record in records.iter().flatten() {
        let payload = record.payload.as_deref().expect("payload");
        let id = u64::from_be_bytes(payload[..8].try_into().expect("8-byte id"));
        at.insert((record.partition, record.offset), id);
    }
    for &(id, partition, offset) in acked_at {
        assert_eq!(
            at.get(&(partition, offset)),
            Some(&id),
            "record {id} was acknowledged at partition {partition} offset {offset}, where the log holds another record or none"
        );
    }
}

/// Delivery reports of a librdkafka producer whose records carry 8-byte ids.
#[derive(Debug, Default)]
pub struct Deliveries {
    state: std::sync::Mutex<DeliveryState>,
    changed: std::sync::Condvar,
}

#[derive(Debug, Default, Clone)]
pub struct DeliveryState {
    pub acked: Vec<u64>,
    /// Where each acknowledged id was written, as the delivery report said: (id, partition,
    /// offset), in the order of `acked`.
    pub acked_at: Vec<(u64, i32, i64)>,
    pub failed: Vec<(u64, String)>,
}

impl Deliveries {
    pub fn snapshot(&self) -> DeliveryState {
        self.state.lock().unwrap().clone()
    }

    pub fn acked_count(&self) -> usize {
        self.state.lock().unwrap().acked.len()
    }

    /// Waits, woken by each delivery report, until `condition` holds; panics after `timeout`.
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        condition: impl Fn(&DeliveryState) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock().unwrap();
        while !condition(&state) {
            let now = Instant::now();
            assert!(
                now < deadline,
                "timed out waiting for {what}: {} acked, {} failed, first failures {:?}",
                state.acked.len(),
                state.failed.len(),
                &state.failed[..state.failed.len().min(3)]
            );
            state = self.changed.wait_timeout(state, deadline - now).unwrap().0;
        }
    }

    fn record(&self, update: impl FnOnce(&mut DeliveryState)) {
        update(&mut self.state.lock().unwrap());
        self.changed.notify_all();
    }
}

/// Producer context recording each record's outcome by id.
pub struct TrackingContext(pub std::sync::Arc<Deliveries>);

impl rdkafka::ClientContext for TrackingContext {}

impl rdkafka::producer::ProducerContext for TrackingContext {
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, id: Box<u64>) {
        match result {
            Ok(message) => self.0.record(|s| {
                s.acked.push(*id);
                s.acked_at
                    .push((*id, message.partition(), message.offset()));
            }),
            Err((error, _)) => self.0.record(|s| s.failed.push((*id, error.to_string()))),
        }
    }
}

pub type IdProducer = rdkafka::producer::ThreadedProducer<TrackingContext>;

/// An idempotent librdkafka producer (acks=all) with delivery tracking; `extra` overrides.
pub fn idempotent_producer(
    bootstrap: &str,
    extra: &[(&str, &str)],
) -> (IdProducer, std::sync::Arc<Deliveries>) {
    let deliveries = std::sync::Arc::new(Deliveries::default());
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5");
    for (key, value) in extra {
        config.set(*key, *value);
    }
    let producer = config
        .create_with_context(TrackingContext(std::sync::Arc::clone(&deliveries)))
        .expect("create the producer");
    (producer, deliveries)
}

/// Sends record `id` to `partition`, its payload the id followed by `filler` bytes, waiting
/// for queue space if librdkafka's queue is full.
pub fn send_id(producer: &IdProducer, topic: &str, partition: i32, id: u64, filler: usize) {
    let mut payload = id.to_be_bytes().to_vec();
    payload.resize(8 + filler, b'x');
    let mut record =
        rdkafka::producer::BaseRecord::<(), [u8], Box<u64>>::with_opaque_to(topic, Box::new(id))
            .partition(partition)
            .payload(&payload[..]);
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((
                KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                back,
            )) => {
                record = back;
                producer.poll(Duration::from_millis(5));
            }
            Err((error, _)) => panic!("send {id}: {error}"),
        }
    }
}

/// A kacrab producer for the reference cluster tests: 2 shards, small batches (so a burst
/// spreads over many requests), short reconnect backoff; `extra` adds or overrides settings.
pub fn kacrab_producer(bootstrap: &str, extra: &[(&str, &str)]) -> kacrab::Producer {
    let mut builder = kacrab::Producer::builder()
        .set("bootstrap.servers", bootstrap)
        .set("kacrab.shards", "2")
        .set("linger.ms", "5")
        .set("batch.size", "2048")
        .set("reconnect.backoff.max.ms", "200");
    for (key, value) in extra {
        builder = builder.set(key, *value);
    }
    builder.build().expect("producer")
}

/// The committed offsets of `group` for `topic`'s partitions `0..partitions`, as librdkafka's
/// OffsetFetch reads them.
pub fn committed_offsets(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<Offset> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition(topic, partition);
    }
    let committed = consumer
        .committed_offsets(list, Duration::from_secs(10))
        .expect("committed offsets");
    (0..partitions)
        .map(|p| {
            committed
                .find_partition(topic, p)
                .expect("partition")
                .offset()
        })
        .collect()
}

/// A transactional [`kacrab_producer`] with `transactional_id` (`extra` adds or overrides
/// settings).
pub fn transactional_producer(
    bootstrap: &str,
    transactional_id: &str,
    extra: &[(&str, &str)],
) -> kacrab::Producer {
    let mut settings = vec![("transactional.id", transactional_id)];
    settings.extend_from_slice(extra);
    kacrab_producer(bootstrap, &settings)
}

/// Sends `make(id)` for ids `0..count` and returns each one's error. Every record is expected
/// to fail; one acknowledged panics, with `why` they should all have failed.
pub fn send_expecting_failures(
    producer: &kacrab::Producer,
    count: u64,
    make: impl Fn(u64) -> kacrab::ProducerRecord,
    why: &str,
) -> Vec<kacrab::ProduceError> {
    let deliveries: Vec<_> = (0..count).map(|id| producer.send(make(id))).collect();
    deliveries
        .into_iter()
        .map(|delivery| {
            match delivery
                .wait_timeout(Duration::from_secs(30))
                .expect("the record resolves")
            {
                Ok(meta) => panic!("a record was acknowledged {why}: {meta:?}"),
                Err(e) => e,
            }
        })
        .collect()
}

#[cfg(feature = "testkit")]
/// Produces ids in rounds of 30 on `topic`'s `partitions` (id modulo), each round
/// acknowledged, until `renewed()` has grown by `renewals` since the first round (SASL
/// sessions ended and new ones began), failing at a 60 s deadline; returns how many ids were
/// sent and how many connections the cluster had accepted after the first round. Between rounds it waits for `cluster`'s next SaslHandshake or 200 ms, whichever comes
/// first, so that the run spans several sessions with a bounded number of records.
pub fn produce_across_sessions(
    cluster: &kacrab::testkit::server::ReferenceCluster,
    producer: &kacrab::Producer,
    topic: &str,
    partitions: i32,
    renewed: &dyn Fn() -> u64,
    renewals: u64,
) -> SessionsRun {
    use kafka_protocol::messages::ApiKey;
    let per_round = 30;
    let send_round = |from: u64| {
        let deliveries: Vec<_> = (from..from + per_round)
            .map(|id| {
                producer.send(
                    kacrab::ProducerRecord::new(
                        topic,
                        bytes::Bytes::copy_from_slice(&id.to_be_bytes()),
                    )
                    .with_partition((id % partitions as u64) as i32),
                )
            })
            .collect();
        for (id, delivery) in (from..).zip(deliveries) {
            delivery
                .wait_timeout(Duration::from_secs(30))
                .expect("the record resolves")
                .unwrap_or_else(|e| panic!("record {id} failed: {e}"));
        }
    };
    send_round(0);
    let connections_after_first_round = cluster.stats().connections_accepted();
    let mut sent = per_round;
    let wanted = renewed() + renewals;
    let deadline = Instant::now() + Duration::from_secs(60);
    while renewed() < wanted {
        assert!(
            Instant::now() < deadline,
            "{} of {renewals} session renewals in 60 s",
            renewals + renewed() - wanted
        );
        send_round(sent);
        sent += per_round;
        let handshakes = cluster.stats().requests(ApiKey::SaslHandshake);
        cluster.stats().wait_for_requests(
            ApiKey::SaslHandshake,
            handshakes + 1,
            Duration::from_millis(200),
        );
    }
    // One more round on the newest sessions.
    send_round(sent);
    SessionsRun {
        sent: sent + per_round,
        connections_after_first_round,
    }
}

/// What [`produce_across_sessions`] did.
pub struct SessionsRun {
    /// Ids `0..sent` were sent and acknowledged.
    pub sent: u64,
    pub connections_after_first_round: u64,
}
