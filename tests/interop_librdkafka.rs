//! kacrab against librdkafka's mock cluster (an independent broker implementation), read back
//! by librdkafka's consumer (an independent reader).
#![cfg(feature = "testkit")]

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use kacrab::{Producer, ProducerRecord};
use rdkafka::mocking::MockCluster;
use rdkafka::types::RDKafkaApiKey;

mod common;
use common::{read_back, Isolation};

const TOPIC: &str = "interop";

fn mock_with_topic(
    partitions: i32,
) -> MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let mock = MockCluster::new(3).expect("mock cluster");
    mock.create_topic(TOPIC, partitions, 3)
        .expect("create topic");
    for p in 0..partitions {
        mock.partition_leader(TOPIC, p, Some(1 + p % 3))
            .expect("leader");
    }
    mock
}

fn producer(bootstrap: &str) -> Producer {
    Producer::builder()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("kacrab.shards", "2")
        .build()
        .expect("producer")
}

#[test]
fn hundred_thousand_records_from_two_threads_read_back_exactly_once_in_order() {
    let mock = mock_with_topic(6);
    let bootstrap = mock.bootstrap_servers();
    let producer = Arc::new(producer(&bootstrap));
    let per_thread = 50_000u32;
    let mut handles = Vec::new();
    for t in 0..2u32 {
        let producer = producer.clone();
        handles.push(thread::spawn(move || {
            let mut futures = Vec::with_capacity(per_thread as usize);
            for i in 0..per_thread {
                let id = format!("t{t}-{i:06}");
                let record = ProducerRecord::new(TOPIC, Bytes::from(format!("payload-{id}")))
                    .with_key(Bytes::from(id.clone()))
                    .with_header("thread", Some(Bytes::from(t.to_string())))
                    .with_header("empty", None)
                    .with_timestamp(1_700_000_000_000 + i as i64);
                futures.push((id, producer.send(record)));
            }
            futures
                .into_iter()
                .map(|(id, f)| (id, f.wait().expect("delivered")))
                .collect::<Vec<_>>()
        }));
    }
    let acked: Vec<_> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("sender thread"))
        .collect();
    producer.flush();
    let log = read_back(
        &bootstrap,
        TOPIC,
        6,
        Isolation::ReadUncommitted,
        Duration::from_secs(60),
    );
    let mut by_id = HashMap::new();
    for partition in &log {
        for record in partition {
            let key = String::from_utf8(record.key.clone().expect("key")).expect("utf8");
            assert!(
                by_id.insert(key.clone(), record.clone()).is_none(),
                "duplicate record {key} in the log"
            );
        }
    }
    assert_eq!(
        by_id.len(),
        100_000,
        "every record is in the log exactly once"
    );
    for (id, meta) in &acked {
        let record = &by_id[id];
        assert_eq!(record.partition, meta.partition, "{id}: partition");
        assert_eq!(
            record.offset, meta.offset,
            "{id}: acknowledged offset equals the log offset"
        );
        assert_eq!(
            record.payload.as_deref(),
            Some(format!("payload-{id}").as_bytes())
        );
        let thread = &id[1..2];
        assert_eq!(
            record.headers,
            vec![
                ("thread".to_string(), Some(thread.as_bytes().to_vec())),
                ("empty".to_string(), None)
            ]
        );
        let i: i64 = id[3..].parse().unwrap();
        assert_eq!(record.timestamp, 1_700_000_000_000 + i);
        assert_eq!(
            kacrab::partitioner::partition_for_key(id.as_bytes(), 6),
            record.partition,
            "{id}: Java's murmur2 partition"
        );
    }
    // Send order per thread and partition equals log order.
    for partition in &log {
        let mut last: HashMap<char, u32> = HashMap::new();
        for record in partition {
            let key = String::from_utf8(record.key.clone().unwrap()).unwrap();
            let thread = key.chars().nth(1).unwrap();
            let i: u32 = key[3..].parse().unwrap();
            if let Some(prev) = last.insert(thread, i) {
                assert!(
                    i > prev,
                    "partition {}: {key} after t{thread}-{prev}",
                    record.partition
                );
            }
        }
    }
    producer.close(Duration::from_secs(10));
}

/// How one of the four threads below sends.
#[derive(Clone, Copy, Debug)]
enum SendPath {
    Send,
    TrySend,
    Callback,
    Async,
}

#[test]
fn four_threads_sending_to_the_same_partitions_each_path_leave_every_record_once_in_send_order_at_its_acknowledged_offset(
) {
    const PARTITIONS: i32 = 4;
    const PER_THREAD: u64 = 25_000;
    let mock = mock_with_topic(PARTITIONS);
    let bootstrap = mock.bootstrap_servers();
    // A small buffer, so that try_send meets a full buffer and the others wait for room.
    let producer = Arc::new(
        Producer::builder()
            .set("bootstrap.servers", &bootstrap)
            .set("linger.ms", "1")
            .set("batch.size", "4096")
            .set("buffer.memory", "262144")
            .set("kacrab.shards", "2")
            .build()
            .expect("producer"),
    );
    let paths = [
        SendPath::Send,
        SendPath::TrySend,
        SendPath::Callback,
        SendPath::Async,
    ];
    let threads: Vec<_> = paths
        .iter()
        .enumerate()
        .map(|(t, &path)| {
            let producer = producer.clone();
            thread::spawn(move || {
                let (tx, rx) = std::sync::mpsc::channel();
                let mut futures = Vec::new();
                let mut buffer_full = 0u64;
                for i in 0..PER_THREAD {
                    let id = (t as u64) << 32 | i;
                    let mut record =
                        ProducerRecord::new(TOPIC, Bytes::copy_from_slice(&id.to_be_bytes()));
                    record.partition = Some((i % PARTITIONS as u64) as i32);
                    match path {
                        SendPath::Send => futures.push((id, producer.send(record))),
                        SendPath::TrySend => loop {
                            match producer.try_send(record) {
                                Ok(future) => {
                                    futures.push((id, future));
                                    break;
                                }
                                Err(err) => {
                                    buffer_full += 1;
                                    record = err.into_record();
                                    thread::yield_now();
                                }
                            }
                        },
                        SendPath::Callback => {
                            let tx = tx.clone();
                            producer.send_with_callback(record, move |result| {
                                let _ = tx.send((id, result));
                            });
                        }
                        SendPath::Async => futures.push((
                            id,
                            futures_lite::future::block_on(producer.send_async(record)),
                        )),
                    }
                }
                drop(tx);
                let mut acked: Vec<(u64, kacrab::RecordMetadata)> = futures
                    .into_iter()
                    .map(|(id, f)| (id, f.wait().expect("delivered")))
                    .collect();
                acked.extend(rx.iter().map(|(id, r)| (id, r.expect("delivered"))));
                (path, buffer_full, acked)
            })
        })
        .collect();
    let mut acked_at = Vec::new();
    for thread in threads {
        let (path, buffer_full, acked) = thread.join().expect("sender thread");
        assert_eq!(
            acked.len() as u64,
            PER_THREAD,
            "{path:?}: every record acknowledged"
        );
        if matches!(path, SendPath::TrySend) {
            eprintln!("try_send met a full buffer {buffer_full} times");
        }
        acked_at.extend(acked.into_iter().map(|(id, m)| (id, m.partition, m.offset)));
    }
    let log = read_back(
        &bootstrap,
        TOPIC,
        PARTITIONS,
        Isolation::ReadUncommitted,
        Duration::from_secs(60),
    );
    let ids: Vec<Vec<u64>> = common::payload_ids(&log);
    let mut seen = std::collections::HashSet::new();
    for (partition, ids) in ids.iter().enumerate() {
        let mut last: HashMap<u64, u64> = HashMap::new();
        for &id in ids {
            assert!(seen.insert(id), "record {id:#x} twice in the log");
            let (thread, i) = (id >> 32, id & 0xffff_ffff);
            if let Some(prev) = last.insert(thread, i) {
                assert!(
                    i > prev,
                    "partition {partition}: thread {thread}'s record {i} after its record {prev}"
                );
            }
        }
    }
    assert_eq!(
        seen.len() as u64,
        4 * PER_THREAD,
        "every record is in the log"
    );
    common::check_acked_offsets(&log, &acked_at);
    producer.close(Duration::from_secs(10));
}

#[test]
fn api_versions_forced_down_by_the_broker_is_negotiated() {
    let mock = mock_with_topic(3);
    // Produce limited to v3..=v7 and Metadata to v1..=v4: kacrab must pick inside both.
    mock.apiversion(RDKafkaApiKey::Produce, Some(3), Some(7))
        .unwrap();
    mock.apiversion(RDKafkaApiKey::Metadata, Some(1), Some(4))
        .unwrap();
    let bootstrap = mock.bootstrap_servers();
    let producer = producer(&bootstrap);
    let futures: Vec<_> = (0..300)
        .map(|i| {
            producer.send(
                ProducerRecord::new(TOPIC, Bytes::from(format!("v{i}"))).with_partition(i % 3),
            )
        })
        .collect();
    for f in futures {
        f.wait().expect("delivered over negotiated versions");
    }
    let log = read_back(
        &bootstrap,
        TOPIC,
        3,
        Isolation::ReadUncommitted,
        Duration::from_secs(30),
    );
    assert_eq!(log.iter().map(Vec::len).sum::<usize>(), 300);
    producer.close(Duration::from_secs(5));
}

#[test]
fn a_broker_without_init_producer_id_gives_a_typed_error_naming_the_api() {
    let mock = mock_with_topic(1);
    mock.apiversion(RDKafkaApiKey::InitProducerId, None, None)
        .unwrap();
    let producer = Producer::builder()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("delivery.timeout.ms", "5000")
        .set("request.timeout.ms", "2000")
        .set("kacrab.shards", "1")
        .build()
        .expect("producer");
    let err = producer
        .send(ProducerRecord::new(TOPIC, Bytes::from_static(b"x")))
        .wait()
        .expect_err("idempotence needs InitProducerId");
    let text = err.to_string();
    assert!(text.contains("InitProducerId"), "{text}");
    producer.close(Duration::from_secs(2));
}

/// Records sent with an 8-byte id payload, and their outcomes once waited for.
struct Sent {
    partitions: Vec<i32>,
    futures: Vec<Option<kacrab::DeliveryFuture>>,
    outcomes: Vec<Option<Result<kacrab::RecordMetadata, kacrab::ProduceError>>>,
}

impl Sent {
    fn new() -> Self {
        Sent {
            partitions: Vec::new(),
            futures: Vec::new(),
            outcomes: Vec::new(),
        }
    }

    fn send(&mut self, producer: &Producer, topic: &str, partition: i32) {
        let id = self.partitions.len() as u64;
        let future = producer.send(
            ProducerRecord::new(topic, Bytes::from(id.to_be_bytes().to_vec()))
                .with_partition(partition),
        );
        self.partitions.push(partition);
        self.futures.push(Some(future));
        self.outcomes.push(None);
    }

    /// Waits for every record whose partition `select` picks; panics after `timeout`.
    fn wait(&mut self, timeout: Duration, select: impl Fn(i32) -> bool) {
        let deadline = std::time::Instant::now() + timeout;
        for id in 0..self.partitions.len() {
            if !select(self.partitions[id]) {
                continue;
            }
            if let Some(future) = self.futures[id].take() {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let outcome = future
                    .wait_timeout(left)
                    .unwrap_or_else(|| panic!("record {id} unresolved"));
                self.outcomes[id] = Some(outcome);
            }
        }
    }

    /// Whether record `id` has an outcome already (collecting it if so).
    fn resolved(&mut self, id: usize) -> bool {
        if self.outcomes[id].is_none() {
            if let Some(outcome) = self.futures[id].as_ref().and_then(|f| f.try_result()) {
                self.outcomes[id] = Some(outcome);
                self.futures[id] = None;
            }
        }
        self.outcomes[id].is_some()
    }

    /// Every record acknowledged, and in the log exactly once at its acknowledged offset,
    /// in send order per partition.
    fn verify(&self, bootstrap: &str, topic: &str, partitions: i32) {
        let log = read_back(
            bootstrap,
            topic,
            partitions,
            Isolation::ReadUncommitted,
            Duration::from_secs(60),
        );
        let mut at: HashMap<u64, (i32, i64)> = HashMap::new();
        for partition in &log {
            let mut last = None;
            for record in partition {
                let id =
                    u64::from_be_bytes(record.payload.as_deref().unwrap()[..8].try_into().unwrap());
                assert!(
                    at.insert(id, (record.partition, record.offset)).is_none(),
                    "record {id} duplicated"
                );
                assert!(
                    last.is_none_or(|l| l < id),
                    "p{}: {id} out of order",
                    record.partition
                );
                last = Some(id);
            }
        }
        assert_eq!(at.len(), self.partitions.len(), "every record in the log");
        for (id, outcome) in self.outcomes.iter().enumerate() {
            let meta = outcome
                .as_ref()
                .expect("waited for")
                .as_ref()
                .unwrap_or_else(|e| panic!("record {id} failed: {e}"));
            assert_eq!(
                at[&(id as u64)],
                (meta.partition, meta.offset),
                "record {id}"
            );
        }
    }
}

// Leaders move and the mock answers produce requests with retriable errors (applied before
// the append, so nothing unanswered is ever appended: the mock does not de-duplicate a
// non-transactional producer's retries) while records flow to every partition. Every record
// ends up once in the log at its acknowledged offset, in order.
//
// One request in flight per connection: the mock checks no sequence for a non-transactional
// producer, so with pipelining it would append a batch sent behind one it refused, where a
// Kafka broker answers OUT_OF_ORDER_SEQUENCE_NUMBER (tests/failover.rs covers pipelining
// against the reference broker, which does check).
#[test]
fn leader_moves_and_errors_before_the_append_leave_every_record_once_in_order() {
    use rdkafka::types::RDKafkaRespErr as E;
    let mock = mock_with_topic(6);
    let bootstrap = mock.bootstrap_servers();
    let producer = Producer::builder()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "5")
        .set("kacrab.shards", "2")
        .set("max.in.flight.requests.per.connection", "1")
        .build()
        .expect("producer");
    let mut sent = Sent::new();
    let errors = [
        E::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        E::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        E::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        E::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
    ];
    for step in 0..24 {
        for _ in 0..50 {
            for p in 0..6 {
                sent.send(&producer, TOPIC, p);
            }
        }
        if step % 2 == 0 {
            let partition = (step / 2) % 6;
            mock.partition_leader(TOPIC, partition, Some(1 + (partition + step / 2 + 1) % 3))
                .expect("move leader");
        } else {
            mock.request_errors(RDKafkaApiKey::Produce, &errors[..1 + step as usize % 4]);
        }
    }
    sent.wait(Duration::from_secs(60), |_| true);
    sent.verify(&bootstrap, TOPIC, 6);
    producer.close(Duration::from_secs(10));
}

// A broker goes down while nothing is in flight and records keep coming for every partition:
// those of the live brokers complete while the dead broker's wait (no failure, no timeout);
// when it comes back they complete too, each once, in order.
#[test]
fn a_broker_down_holds_only_its_own_partitions() {
    let mock = mock_with_topic(6);
    let bootstrap = mock.bootstrap_servers();
    let producer = producer(&bootstrap);
    let mut sent = Sent::new();
    for p in 0..6 {
        sent.send(&producer, TOPIC, p);
    }
    sent.wait(Duration::from_secs(30), |_| true);
    mock.broker_down(2).expect("broker down");
    let first = sent.partitions.len();
    for _ in 0..200 {
        for p in 0..6 {
            sent.send(&producer, TOPIC, p);
        }
    }
    let on_2 = |p: i32| 1 + p % 3 == 2;
    sent.wait(Duration::from_secs(60), |p| !on_2(p));
    for id in first..sent.partitions.len() {
        if on_2(sent.partitions[id]) {
            assert!(
                !sent.resolved(id),
                "record {id} for the dead broker resolved"
            );
        }
    }
    mock.broker_up(2).expect("broker up");
    sent.wait(Duration::from_secs(60), |_| true);
    sent.verify(&bootstrap, TOPIC, 6);
    producer.close(Duration::from_secs(10));
}

/// The mock has a transaction coordinator but no markers and no transaction state: it shows that
/// init, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, produce and EndTxn interoperate, and
/// that a committed transaction's records are each in the log once, in order.
#[test]
fn a_committed_transaction_interoperates_with_librdkafkas_mock_coordinator() {
    let mock = mock_with_topic(3);
    let bootstrap = mock.bootstrap_servers();
    let producer = Producer::builder()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "5")
        .set("kacrab.shards", "2")
        .set("transactional.id", "interop-txn")
        .build()
        .expect("producer");
    let call = Duration::from_secs(30);
    producer.init_transactions(call).expect("init_transactions");
    producer.begin_transaction().expect("begin_transaction");
    let futures: Vec<_> = (0..300)
        .map(|i| {
            producer.send(
                ProducerRecord::new(TOPIC, Bytes::from(format!("t{i:04}"))).with_partition(i % 3),
            )
        })
        .collect();
    producer
        .send_offsets_to_transaction(
            [(
                // The mock answers UNKNOWN_TOPIC_OR_PARTITION (retriable) for a topic it lacks.
                kacrab::TopicPartition {
                    topic: TOPIC.into(),
                    partition: 0,
                },
                kacrab::OffsetAndMetadata::new(42),
            )],
            &kacrab::GroupMetadata::new("interop-group"),
            call,
        )
        .expect("send_offsets_to_transaction");
    producer
        .commit_transaction(call)
        .expect("commit_transaction");
    for f in futures {
        f.wait().expect("a committed record is acknowledged");
    }
    let log = read_back(
        &bootstrap,
        TOPIC,
        3,
        Isolation::ReadUncommitted,
        Duration::from_secs(30),
    );
    for (partition, records) in log.iter().enumerate() {
        let values: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8(r.payload.clone().unwrap()).unwrap())
            .collect();
        let expected: Vec<String> = (0..300)
            .filter(|i| i % 3 == partition as i32)
            .map(|i| format!("t{i:04}"))
            .collect();
        assert_eq!(values, expected, "partition {partition}");
    }
    producer.close(Duration::from_secs(5));
}

/// The records of [`a_topic_in_one_codec`]: keyed and not, with headers, values from
/// redundant to incompressible and one over 64 KiB (past every codec's block size).
fn codec_records() -> Vec<(Option<Vec<u8>>, Vec<u8>, i64)> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    (0..3_000u32)
        .map(|i| {
            let len = if i == 1_500 {
                100_000
            } else {
                (i as usize * 7) % 300
            };
            let value: Vec<u8> = (0..len)
                .map(|j| {
                    if i % 4 == 0 {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state as u8
                    } else {
                        b"kacrab compresses "[j % 18]
                    }
                })
                .collect();
            let key = (i % 3 != 0).then(|| format!("key-{i}").into_bytes());
            (key, value, 1_700_000_000_000 + i64::from(i))
        })
        .collect()
}

/// Produces [`codec_records`] with `compression.type=codec` to `bootstrap` (partition `i % 3`)
/// and reads the topic back with librdkafka's consumer, which decompresses every batch: every
/// record must come back byte for byte, at its acknowledged offset, in send order.
fn a_topic_in_one_codec(bootstrap: &str, topic: &str, codec: &str) {
    let producer = Producer::builder()
        .set("bootstrap.servers", bootstrap)
        .set("compression.type", codec)
        .set("linger.ms", "5")
        .set("kacrab.shards", "2")
        .build()
        .expect("producer");
    let records = codec_records();
    let futures: Vec<_> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value, timestamp))| {
            let mut record = ProducerRecord::new(topic, Bytes::from(value.clone()))
                .with_header("index", Some(Bytes::from(i.to_string())))
                .with_header("none", None)
                .with_timestamp(*timestamp);
            if let Some(key) = key {
                record = record.with_key(Bytes::from(key.clone()));
            }
            record.partition = Some((i % 3) as i32);
            producer.send(record)
        })
        .collect();
    let acked: Vec<_> = futures
        .into_iter()
        .map(|f| f.wait().expect("delivered"))
        .collect();
    producer.close(Duration::from_secs(10));
    let log = read_back(
        bootstrap,
        topic,
        3,
        Isolation::ReadUncommitted,
        Duration::from_secs(60),
    );
    assert_eq!(
        log.iter().map(Vec::len).sum::<usize>(),
        records.len(),
        "{codec}: every record read back once"
    );
    let mut next = [0usize; 3];
    for (i, ((key, value, timestamp), meta)) in records.iter().zip(&acked).enumerate() {
        let partition = (i % 3) as i32;
        assert_eq!(meta.partition, partition);
        let read = &log[partition as usize][next[partition as usize]];
        next[partition as usize] += 1;
        assert_eq!(read.offset, meta.offset, "{codec}: record {i}'s offset");
        assert_eq!(&read.key, key, "{codec}: record {i}'s key");
        assert_eq!(
            read.payload.as_deref().unwrap_or_default(),
            &value[..],
            "{codec}: record {i}'s value"
        );
        assert_eq!(
            read.timestamp, *timestamp,
            "{codec}: record {i}'s timestamp"
        );
        assert_eq!(
            read.headers,
            vec![
                ("index".to_string(), Some(i.to_string().into_bytes())),
                ("none".to_string(), None)
            ],
            "{codec}: record {i}'s headers"
        );
    }
}

#[test]
fn every_codec_produced_to_the_reference_cluster_reads_back_byte_for_byte_with_librdkafka() {
    use kacrab::testkit::broker::BrokerRules;
    use kacrab::testkit::internals::protocol::record_batch::RecordBatchHeader;
    use kacrab::testkit::server::ReferenceCluster;

    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    for (codec, id) in [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)] {
        let topic = format!("codec-{codec}");
        cluster.create_topic(&topic, &[1, 2, 3]);
        a_topic_in_one_codec(&cluster.bootstrap_servers(), &topic, codec);
        // The broker keeps the producer's batches as they came: compressed, in this codec.
        let codecs: Vec<u8> = cluster.with_cluster(|c| {
            (0..3)
                .flat_map(|p| {
                    c.partition_log(&topic, p)
                        .iter()
                        .map(|b| RecordBatchHeader::parse(&b.bytes).unwrap().compression())
                        .collect::<Vec<_>>()
                })
                .collect()
        });
        assert!(!codecs.is_empty());
        assert!(codecs.iter().all(|&c| c == id), "{codec}: {codecs:?}");
    }
}

#[test]
fn every_codec_produced_to_librdkafkas_mock_cluster_reads_back_byte_for_byte() {
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let mock = MockCluster::new(3).expect("mock cluster");
        let topic = format!("codec-{codec}");
        mock.create_topic(&topic, 3, 3).expect("create topic");
        a_topic_in_one_codec(&mock.bootstrap_servers(), &topic, codec);
    }
}
