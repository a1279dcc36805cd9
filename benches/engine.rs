//! The sans-IO engine's hot path, driven directly with real Kafka bytes and no sockets:
//! accumulator append, drain (stamping, request encoding) per batch, and Produce response
//! handling per batch; and a closed batch's trip from its hand-over to a loopback socket.
//!
//! A scripted broker answers ApiVersions, Metadata and InitProducerId once, then every
//! Produce request with NONE for each partition. Run with `cargo bench --bench engine`
//! (`-- --quick` for a fast pass).

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, MetadataResponse, ProduceRequest, ProduceResponse,
    ProducerId, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use kacrab::testkit::internals::engine::{Action, Delivery, Engine, EngineConfig, TopicPartition};
use kacrab::testkit::internals::protocol::wire::Frame;
use kacrab::{ProduceError, ProducerConfig, RecordMetadata};

const TOPIC: &str = "bench";
const BASE_TIMESTAMP: i64 = 1_700_000_000_000;

/// Completes nothing: the bench measures the engine, not the application's futures.
struct NoDelivery;

impl Delivery for NoDelivery {
    fn complete(self, result: Result<RecordMetadata, ProduceError>) {
        if let Err(e) = result {
            panic!("a record failed: {e}");
        }
    }
}

/// Answers one request frame (length prefix included) the way a healthy broker would.
struct ScriptedBroker {
    partitions: i32,
    next_offset: Vec<i64>,
}

impl ScriptedBroker {
    fn answer(&mut self, frame: &Bytes) -> Bytes {
        let mut buf = frame.slice(4..);
        let api = ApiKey::try_from((&buf[..2]).get_i16()).expect("known api");
        let version = (&buf[2..4]).get_i16();
        let header = RequestHeader::decode(&mut buf, api.request_header_version(version))
            .expect("request header");
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(header.correlation_id)
            .encode(&mut out, api.response_header_version(version))
            .expect("response header");
        match api {
            ApiKey::ApiVersions => {
                let keys = [(0, 3, 11), (3, 1, 12), (18, 0, 3), (22, 0, 4)]
                    .into_iter()
                    .map(|(k, min, max)| {
                        ApiVersion::default()
                            .with_api_key(k)
                            .with_min_version(min)
                            .with_max_version(max)
                    })
                    .collect();
                ApiVersionsResponse::default()
                    .with_api_keys(keys)
                    .encode(&mut out, version)
            }
            ApiKey::Metadata => {
                let partitions = (0..self.partitions)
                    .map(|p| {
                        MetadataResponsePartition::default()
                            .with_partition_index(p)
                            .with_leader_id(BrokerId(1))
                            .with_replica_nodes(vec![BrokerId(1)])
                            .with_isr_nodes(vec![BrokerId(1)])
                    })
                    .collect();
                MetadataResponse::default()
                    .with_brokers(vec![MetadataResponseBroker::default()
                        .with_node_id(BrokerId(1))
                        .with_host(StrBytes::from_static_str("broker"))
                        .with_port(9092)])
                    .with_controller_id(BrokerId(1))
                    .with_topics(vec![MetadataResponseTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_static_str(TOPIC))))
                        .with_partitions(partitions)])
                    .encode(&mut out, version)
            }
            ApiKey::InitProducerId => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(4242))
                .with_producer_epoch(0)
                .encode(&mut out, version),
            ApiKey::Produce => {
                let request = ProduceRequest::decode(&mut buf, version).expect("produce");
                let responses = request
                    .topic_data
                    .iter()
                    .map(|t| {
                        let partitions = t
                            .partition_data
                            .iter()
                            .map(|p| {
                                let records = p.records.as_ref().expect("records");
                                let count = i32::from_be_bytes(
                                    records[57..61].try_into().expect("record count"),
                                ) as i64;
                                let offset = &mut self.next_offset[p.index as usize];
                                let base = *offset;
                                *offset += count;
                                PartitionProduceResponse::default()
                                    .with_index(p.index)
                                    .with_base_offset(base)
                                    .with_log_append_time_ms(-1)
                            })
                            .collect();
                        TopicProduceResponse::default()
                            .with_name(t.name.clone())
                            .with_partition_responses(partitions)
                    })
                    .collect();
                ProduceResponse::default()
                    .with_responses(responses)
                    .encode(&mut out, version)
            }
            other => panic!("unexpected {other:?}"),
        }
        .expect("encode response");
        out.freeze()
    }
}

/// An engine connected to the scripted broker, with metadata and a producer id.
struct Rig {
    engine: Engine<NoDelivery>,
    broker: ScriptedBroker,
    now: u64,
    tps: Vec<TopicPartition>,
    /// Produce frames written and not yet answered: (node, generation, frame).
    written: Vec<(i32, u64, Frame)>,
}

impl Rig {
    fn new(partitions: i32, batch_size: usize, max_in_flight: usize) -> Rig {
        let config = ProducerConfig::builder()
            .bootstrap_servers("broker:9092")
            .batch_size(batch_size)
            .linger(Duration::ZERO)
            .max_in_flight_requests_per_connection(max_in_flight)
            .max_request_size(64 << 20)
            .build()
            .expect("config");
        let mut rig = Rig {
            engine: Engine::new(EngineConfig::from_producer_config(&config, true)),
            broker: ScriptedBroker {
                partitions,
                next_offset: vec![0; partitions as usize],
            },
            now: 1,
            tps: (0..partitions)
                .map(|p| TopicPartition::new(TOPIC, p))
                .collect(),
            written: Vec::new(),
        };
        rig.engine.request_topic(TOPIC);
        // Bring it up: connect, negotiate, metadata, producer id.
        for _ in 0..20 {
            rig.step();
            rig.answer_all();
            if rig.engine.identity().is_valid()
                && rig.engine.metadata().partition_count(TOPIC).is_some()
            {
                break;
            }
        }
        assert!(
            rig.engine.identity().is_valid(),
            "engine did not initialise"
        );
        // Connect to the partitions' leader and send one round of batches.
        for _ in 0..20 {
            rig.append_records(1, b"warm-up");
            rig.step();
            rig.answer_all();
            rig.step();
            let quiet = rig.written.is_empty();
            rig.answer_all();
            if quiet && rig.engine.stats().produce_requests > 0 {
                break;
            }
        }
        assert!(
            rig.engine.stats().produce_requests > 0,
            "no produce went out"
        );
        rig
    }

    /// One poll, carrying out its actions; Produce frames are kept in `written`.
    fn step(&mut self) {
        self.now += 1;
        self.engine.poll(self.now);
        let actions: Vec<Action> = self.engine.take_actions().collect();
        for action in actions {
            match action {
                Action::Connect {
                    node, generation, ..
                } => self.engine.on_connected(self.now, node, generation),
                Action::Write {
                    node,
                    generation,
                    frame,
                } => self.written.push((node, generation, frame)),
                Action::Disconnect { .. } => panic!("unexpected disconnect"),
                Action::ProducerIdAssigned(identity) => self.engine.on_identity(identity),
                Action::TopicMetadata { .. } | Action::RequestEpochBump { .. } => {}
            }
        }
    }

    /// Builds the answers to everything written.
    fn answers(&mut self) -> Vec<(i32, u64, Bytes)> {
        std::mem::take(&mut self.written)
            .into_iter()
            .map(|(node, generation, frame)| {
                (node, generation, self.broker.answer(&frame.to_bytes()))
            })
            .collect()
    }

    fn answer_all(&mut self) {
        for (node, generation, body) in self.answers() {
            self.engine.on_frame(self.now, node, generation, body);
        }
    }

    /// `per_partition` records to every partition: all of one partition's, then the next's.
    fn append_records(&mut self, per_partition: usize, value: &[u8]) {
        for p in 0..self.tps.len() {
            for i in 0..per_partition {
                self.append_one(p, i, value);
            }
        }
    }

    /// `per_partition` records to every partition, each record to a different partition from
    /// the one before (keyed traffic: consecutive records rarely share a partition).
    fn append_interleaved(&mut self, per_partition: usize, value: &[u8]) {
        for i in 0..per_partition {
            for p in 0..self.tps.len() {
                self.append_one(p, i, value);
            }
        }
    }

    /// Record `i` of partition `self.tps[p]`.
    fn append_one(&mut self, p: usize, i: usize, value: &[u8]) {
        self.engine.append(
            self.now,
            &self.tps[p],
            BASE_TIMESTAMP + i as i64,
            None,
            Some(value),
            &[],
            NoDelivery,
        );
    }
}

/// Workloads: records per batch and value size, over `PARTITIONS` partitions per request.
const WORKLOADS: [(&str, usize, usize); 2] = [("1000x10B", 1000, 10), ("16x1KiB", 16, 1024)];
const PARTITIONS: i32 = 16;

fn bench_append(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_append");
    for (name, per_batch, value_len) in WORKLOADS {
        let value = vec![0x5a; value_len];
        let mut rig = Rig::new(1, 1 << 20, 5);
        group.throughput(Throughput::Elements(per_batch as u64));
        // One batch's worth of appends into one partition; the batch is then drained and
        // answered outside the timed part so the accumulator does not grow.
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    rig.append_records(per_batch, black_box(&value));
                    total += start.elapsed();
                    rig.step();
                    rig.answer_all();
                }
                total
            })
        });
    }
    // The same 1,000 records per batch, over 16 partitions, each record to another partition
    // than the one before: the partition lookup, not the last-partition shortcut, is timed.
    let value = [0x5a; 10];
    let mut rig = Rig::new(PARTITIONS, 1 << 20, 5);
    group.throughput(Throughput::Elements(1000 * PARTITIONS as u64));
    group.bench_function("1000x10B_16_partitions_interleaved", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                rig.append_interleaved(1000, black_box(&value));
                total += start.elapsed();
                rig.step();
                rig.answer_all();
            }
            total
        })
    });
    group.finish();
}

fn bench_drain_and_response(c: &mut Criterion) {
    let mut drain = c.benchmark_group("engine_drain");
    for (name, per_batch, value_len) in WORKLOADS {
        let value = vec![0x5a; value_len];
        let mut rig = Rig::new(PARTITIONS, 1 << 20, 5);
        drain.throughput(Throughput::Elements(PARTITIONS as u64));
        // One poll that stamps 16 ready batches (CRC included) and encodes them into one
        // Produce request, per batch.
        drain.bench_function(format!("{name}_16_partitions"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    rig.append_records(per_batch, &value);
                    let start = Instant::now();
                    rig.step();
                    total += start.elapsed();
                    if rig.written.is_empty() {
                        let slot = rig.engine.partition(&rig.tps[0]).unwrap();
                        panic!("stats {:?} deque {} inflight {} leader {:?} on_wire {} unresolved {:?} rewrite {}", rig.engine.stats(), slot.deque.len(), slot.entry.inflight_batches_by_sequence.len(), slot.leader, slot.on_wire, slot.unresolved_sequence, slot.rewrite_pending);
                    }
                    assert_eq!(rig.written.len(), 1, "one request for all partitions: {:?}", rig.written.iter().map(|w| (w.0, w.2.len(), i16::from_be_bytes([w.2.to_bytes()[4], w.2.to_bytes()[5]]))).collect::<Vec<_>>());
                    rig.answer_all();
                }
                total
            })
        });
    }
    drain.finish();

    let mut response = c.benchmark_group("engine_produce_response");
    for (name, per_batch, value_len) in WORKLOADS {
        let value = vec![0x5a; value_len];
        let mut rig = Rig::new(PARTITIONS, 1 << 20, 5);
        response.throughput(Throughput::Elements(PARTITIONS as u64));
        // `on_frame` for a Produce response acknowledging 16 batches: decode, sequence
        // bookkeeping, completing every record's delivery.
        response.bench_function(format!("{name}_16_partitions"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    rig.append_records(per_batch, &value);
                    rig.step();
                    let answers = rig.answers();
                    let now = rig.now;
                    let start = Instant::now();
                    for (node, generation, body) in answers {
                        rig.engine.on_frame(now, node, generation, body);
                    }
                    total += start.elapsed();
                }
                total
            })
        });
    }
    response.finish();
}

/// A closed batch's trip to the socket: 16 batches as the sending threads hand them over
/// (encoded, closed, one delivery run each: `ProducerBatch::try_append_encoded`, `push_run`),
/// taken by the engine (`Engine::append_batch`), stamped and encoded into one Produce request
/// by a poll, and written to a loopback TCP socket with one vectored write of the request's
/// segments, as a shard's writer does. Filling the batches and answering the request are
/// outside the timed part.
fn bench_closed_batch_trip(c: &mut Criterion) {
    use std::io::{IoSlice, Read, Write};
    use std::net::{TcpListener, TcpStream};

    use kacrab::testkit::internals::engine::batch::ProducerBatch;

    let listener = TcpListener::bind("127.0.0.1:0").expect("loopback");
    let mut socket = TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
    socket.set_nodelay(true).expect("nodelay");
    let (mut peer, _) = listener.accept().expect("accept");
    // Reads and discards everything written, so the socket never fills.
    std::thread::spawn(move || {
        let mut sink = vec![0u8; 1 << 20];
        while matches!(peer.read(&mut sink), Ok(n) if n > 0) {}
    });
    let mut group = c.benchmark_group("closed_batch_trip");
    for (name, per_batch, value_len) in WORKLOADS {
        let value = vec![0x5a; value_len];
        let mut rig = Rig::new(PARTITIONS, 1 << 20, 5);
        group.throughput(Throughput::Elements(PARTITIONS as u64));
        group.bench_function(format!("{name}_16_partitions"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let batches: Vec<ProducerBatch<NoDelivery>> = (0..PARTITIONS)
                        .map(|_| {
                            let mut batch = ProducerBatch::new(rig.now, BASE_TIMESTAMP, 1 << 20);
                            for i in 0..per_batch {
                                let ts = BASE_TIMESTAMP + i as i64;
                                assert!(batch.try_append_encoded(ts, None, Some(&value), &[]));
                            }
                            batch.close();
                            batch.push_run(NoDelivery);
                            batch
                        })
                        .collect();
                    let start = Instant::now();
                    for (p, batch) in batches.into_iter().enumerate() {
                        let tp = rig.tps[p].clone();
                        rig.engine.append_batch(rig.now, &tp, batch);
                    }
                    rig.step();
                    assert_eq!(rig.written.len(), 1, "one request for all partitions");
                    let frame = &rig.written[0].2;
                    let slices: Vec<IoSlice<'_>> =
                        frame.segments().iter().map(|s| IoSlice::new(s)).collect();
                    let mut left = frame.len();
                    let mut written = socket.write_vectored(&slices).expect("write");
                    // A short write finishes with the plain copy: rare on loopback.
                    if written < left {
                        let bytes = frame.to_bytes();
                        socket.write_all(&bytes[written..]).expect("write");
                        written = left;
                    }
                    left -= written;
                    total += start.elapsed();
                    assert_eq!(left, 0);
                    rig.answer_all();
                }
                total
            })
        });
    }
    group.finish();
}

fn bench_response_decode(c: &mut Criterion) {
    // The decoding share of response handling, alone.
    let mut group = c.benchmark_group("produce_response_decode");
    let mut rig = Rig::new(PARTITIONS, 1 << 20, 5);
    rig.append_records(10, b"0123456789");
    rig.step();
    let (_, _, body) = rig.answers().pop().expect("one answer");
    group.throughput(Throughput::Elements(PARTITIONS as u64));
    group.bench_function("16_partitions_v11", |b| {
        b.iter_batched(
            || body.clone(),
            |mut buf| {
                ResponseHeader::decode(&mut buf, ApiKey::Produce.response_header_version(11))
                    .expect("header");
                ProduceResponse::decode(&mut buf, 11).expect("decode")
            },
            BatchSize::SmallInput,
        )
    });
    // The same body through kacrab's bounded decoder, the one the engine uses.
    group.bench_function("16_partitions_v11_kacrab", |b| {
        b.iter_batched(
            || body.clone(),
            |buf| {
                kacrab::testkit::internals::protocol::wire::decode_response::<ProduceResponse>(
                    kacrab::testkit::internals::protocol::api::ApiKey::Produce,
                    11,
                    buf,
                )
                .expect("decode")
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_append, bench_drain_and_response, bench_closed_batch_trip, bench_response_decode
}
criterion_main!(benches);
