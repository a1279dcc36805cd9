//! The reference cluster's TCP face against independent clients: librdkafka's idempotent
//! producer writes, librdkafka's consumer reads back, and a raw client measures throughput.
//! `api_versions` holds the raw client's checks of every advertised version of every API.
#![cfg(feature = "testkit")]

#[path = "reference_cluster_tcp/api_versions.rs"]
mod api_versions;
mod common;

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kacrab::testkit::batch::TestBatch;
use kacrab::testkit::broker::error_codes::{NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT};
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::{ReferenceCluster, ANY_BROKER};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse,
    RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rdkafka::producer::Producer;

use common::{
    check_acked_offsets, check_exactly_once, idempotent_producer, payload_ids, read_back, send_id,
    DeliveryState, Isolation,
};

const PARTITIONS: i32 = 6;
const LEADERS: [i32; 6] = [1, 2, 3, 1, 2, 3];

fn started_cluster(topic: &str) -> ReferenceCluster {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(topic, &LEADERS);
    cluster
}

/// Produces ids `0..count` with record `i` on partition `i % 6`, waits for every delivery
/// report, and returns the ids acked with the (partition, offset) each report gave.
fn produce_ids(cluster: &ReferenceCluster, topic: &str, count: u64) -> DeliveryState {
    let (producer, deliveries) =
        idempotent_producer(&cluster.bootstrap_servers(), &[("batch.size", "16384")]);
    for id in 0..count {
        send_id(&producer, topic, (id % PARTITIONS as u64) as i32, id, 16);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    deliveries.wait_until("every delivery report", Duration::from_secs(30), |s| {
        s.acked.len() + s.failed.len() == count as usize
    });
    let state = deliveries.snapshot();
    assert!(
        state.failed.is_empty(),
        "failed deliveries: {:?}",
        &state.failed[..3.min(state.failed.len())]
    );
    state
}

/// The broker's own view: each partition's log is one producer's batches with contiguous
/// offsets and sequences.
fn assert_logs_contiguous(cluster: &ReferenceCluster, topic: &str) {
    cluster.with_cluster(|c| {
        for partition in 0..PARTITIONS {
            let log = c.partition_log(topic, partition);
            for pair in log.windows(2) {
                assert_eq!(
                    pair[0].last_offset + 1,
                    pair[1].base_offset,
                    "p{partition} offsets"
                );
                assert_eq!(
                    pair[0].producer_id, pair[1].producer_id,
                    "p{partition} one producer"
                );
                assert_eq!(
                    pair[0].last_sequence + 1,
                    pair[1].base_sequence,
                    "p{partition} sequences"
                );
            }
        }
    });
}

// librdkafka 2.12.1's idempotent producer (acks=all) against a 3-broker reference cluster,
// read back by librdkafka's consumer: 50 000 records, each exactly once, in order.
#[test]
fn librdkafka_producer_and_consumer_round_trip_50000_records_exactly_once_in_order() {
    let topic = "round-trip";
    let cluster = started_cluster(topic);
    let count = 50_000;
    let delivered = produce_ids(&cluster, topic, count);
    let acked = delivered.acked;
    assert_eq!(acked.len(), count as usize);

    let records = read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        Isolation::ReadUncommitted,
        Duration::from_secs(30),
    );
    let ids = payload_ids(&records);
    let sent: Vec<u64> = (0..count).collect();
    println!("{}", check_exactly_once(&ids, &acked, &sent));
    check_acked_offsets(&records, &delivered.acked_at);
    for (partition, partition_ids) in ids.iter().enumerate() {
        assert!(partition_ids
            .iter()
            .all(|id| id % PARTITIONS as u64 == partition as u64));
        assert_eq!(records[partition][0].offset, 0);
    }
    assert_logs_contiguous(&cluster, topic);

    let stats = cluster.stats();
    assert_eq!(
        stats.unsupported_closed(),
        0,
        "no request outside the advertised versions"
    );
    assert!(stats.requests(ApiKey::Produce) > 0 && stats.requests(ApiKey::Fetch) > 0);
    assert_eq!(stats.requests(ApiKey::InitProducerId), 1);
    println!(
        "requests: produce {} (versions {:?}), fetch {} (versions {:?}), metadata {:?}, connections {}",
        stats.requests(ApiKey::Produce),
        stats.versions_seen(ApiKey::Produce),
        stats.requests(ApiKey::Fetch),
        stats.versions_seen(ApiKey::Fetch),
        stats.versions_seen(ApiKey::Metadata),
        stats.connections_accepted()
    );
    cluster.shutdown();
    assert_eq!(
        stats.connections_open(),
        0,
        "every connection thread exited"
    );
}

// Advertised ranges forced down. ApiVersions v3 is answered UNSUPPORTED_VERSION in a v0 body
// (Kafka's `RequestContext` serializes an unsupported ApiVersions answer as v0); librdkafka
// parses it as v3, cannot read the range, and retries at v0, exactly as against a real
// broker. It then never exceeds the advertised Produce, Fetch, Metadata and ListOffsets
// ranges: nothing is sent outside them (that would close the connection and be counted).
#[test]
fn librdkafka_negotiates_forced_down_api_versions() {
    let topic = "forced-down";
    let cluster = started_cluster(topic);
    cluster.set_api_versions(None, ApiKey::ApiVersions, Some((0, 2)));
    cluster.set_api_versions(None, ApiKey::Produce, Some((3, 7)));
    cluster.set_api_versions(None, ApiKey::Fetch, Some((4, 11)));
    cluster.set_api_versions(None, ApiKey::Metadata, Some((1, 8)));
    cluster.set_api_versions(None, ApiKey::ListOffsets, Some((1, 5)));

    let count = 3_000;
    let delivered = produce_ids(&cluster, topic, count);
    let records = read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        Isolation::ReadCommitted,
        Duration::from_secs(30),
    );
    let sent: Vec<u64> = (0..count).collect();
    println!(
        "{}",
        check_exactly_once(&payload_ids(&records), &delivered.acked, &sent)
    );
    check_acked_offsets(&records, &delivered.acked_at);

    let stats = cluster.stats();
    assert_eq!(stats.unsupported_closed(), 0);
    let api_versions = stats.versions_seen(ApiKey::ApiVersions);
    assert_eq!(api_versions, vec![0, 3]);
    assert!(
        stats.requests_at_version(ApiKey::ApiVersions, 0)
            >= stats.requests_at_version(ApiKey::ApiVersions, 3)
    );
    assert_eq!(stats.versions_seen(ApiKey::Produce), vec![7]);
    assert_eq!(stats.versions_seen(ApiKey::Fetch), vec![11]);
    assert_eq!(stats.versions_seen(ApiKey::Metadata).last(), Some(&8));
    assert!(stats
        .versions_seen(ApiKey::ListOffsets)
        .iter()
        .all(|v| *v <= 5));
}

// A request for an API the broker does not advertise closes the connection and is counted.
#[test]
fn request_outside_the_advertised_versions_closes_the_connection() {
    let cluster = started_cluster("unsupported");
    cluster.set_api_versions(Some(1), ApiKey::InitProducerId, None);
    let mut stream = TcpStream::connect(cluster.broker_address(1)).unwrap();
    write_request(&mut stream, ApiKey::InitProducerId, 4, 1, &init_request());
    let mut byte = [0u8; 1];
    assert_eq!(
        stream.read(&mut byte).unwrap_or(0),
        0,
        "closed without an answer"
    );
    assert_eq!(cluster.stats().unsupported_closed(), 1);
    // Broker 2 still advertises it.
    let mut stream = TcpStream::connect(cluster.broker_address(2)).unwrap();
    write_request(&mut stream, ApiKey::InitProducerId, 4, 2, &init_request());
    let (correlation_id, mut body) = read_response(&mut stream, ApiKey::InitProducerId, 4);
    let response = InitProducerIdResponse::decode(&mut body, 4).unwrap();
    assert_eq!(
        (correlation_id, response.error_code, response.producer_epoch),
        (2, 0, 0)
    );
}

fn init_request() -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000)
}

fn write_request(
    stream: &mut impl Write,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    request: &impl Encodable,
) {
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("raw")))
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    // One write per frame, so Nagle's algorithm never holds half a request back.
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    stream.write_all(&frame).unwrap();
}

fn read_response(stream: &mut impl Read, api: ApiKey, version: i16) -> (i32, Bytes) {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(length) as usize];
    stream.read_exact(&mut body).unwrap();
    let mut body = Bytes::from(body);
    let header = ResponseHeader::decode(&mut body, api.response_header_version(version)).unwrap();
    (header.correlation_id, body)
}

// Throughput of the produce path with a raw pipelined client on one connection: requests of
// six 16 KiB batches (one per partition, 150 records of 100 bytes each), five in flight,
// acks=all, for two seconds. The client stamps each batch's sequence and CRC itself and runs
// on the same cores as the broker, so the figure is a floor for the broker. Retention keeps
// 4 MiB per partition so the run measures the path, not page faults of an ever-growing log.
// Prints MB/s; asserts only that every batch was accepted. Use `--release` for real numbers.
#[test]
fn tcp_face_produce_throughput() {
    let rules = BrokerRules {
        retention_bytes_per_partition: Some(4 << 20),
        ..BrokerRules::default()
    };
    let cluster = ReferenceCluster::start(3, rules);
    cluster.create_topic("bench", &[1; 6]);
    let stream = TcpStream::connect(cluster.broker_address(1)).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = BufWriter::with_capacity(1 << 20, stream);

    write_request(&mut writer, ApiKey::InitProducerId, 4, 0, &init_request());
    writer.flush().unwrap();
    let (_, mut body) = read_response(&mut reader, ApiKey::InitProducerId, 4);
    let pid = InitProducerIdResponse::decode(&mut body, 4)
        .unwrap()
        .producer_id
        .0;

    let records_per_batch = 150usize;
    let mut template = TestBatch::idempotent(pid, 0, 0, records_per_batch);
    template.records = (0..records_per_batch)
        .map(|_| (None, Some(vec![b'r'; 100])))
        .collect();
    let template = template.encode();
    let batch_bytes = template.len();
    let version = 9;
    let in_flight = 5;
    let duration = Duration::from_secs(2);
    let mut next_seq = [0i32; 6];
    let mut request = |correlation_id: i32| -> Vec<u8> {
        let partitions = (0..6)
            .map(|p| {
                let mut batch = template.clone();
                batch[53..57].copy_from_slice(&next_seq[p].to_be_bytes());
                let crc = crc32c::crc32c(&batch[21..]);
                batch[17..21].copy_from_slice(&crc.to_be_bytes());
                next_seq[p] += records_per_batch as i32;
                PartitionProduceData::default()
                    .with_index(p as i32)
                    .with_records(Some(Bytes::from(batch)))
            })
            .collect();
        let request = ProduceRequest::default()
            .with_transactional_id(None)
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("bench")))
                .with_partition_data(partitions)]);
        let mut frame = Vec::new();
        write_request(
            &mut frame,
            ApiKey::Produce,
            version,
            correlation_id,
            &request,
        );
        frame
    };

    let started = Instant::now();
    let (mut sent, mut answered) = (0usize, 0usize);
    loop {
        while sent - answered < in_flight && started.elapsed() < duration {
            writer.write_all(&request(sent as i32)).unwrap();
            sent += 1;
        }
        writer.flush().unwrap();
        if answered == sent {
            break;
        }
        let (correlation_id, mut body) = read_response(&mut reader, ApiKey::Produce, version);
        assert_eq!(
            correlation_id as usize, answered,
            "answers in request order"
        );
        let response = ProduceResponse::decode(&mut body, version).unwrap();
        for p in &response.responses[0].partition_responses {
            assert_eq!(p.error_code, 0, "partition {}", p.index);
        }
        answered += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let bytes = answered * 6 * batch_bytes;
    println!(
        "tcp face produce: {:.0} MB/s, {:.0} batches/s, {:.2} M records/s ({answered} requests of 6 x {batch_bytes} B in {elapsed:.2} s)",
        bytes as f64 / elapsed / 1e6,
        (answered * 6) as f64 / elapsed,
        (answered * 6 * records_per_batch) as f64 / elapsed / 1e6,
    );
    let written: i64 =
        cluster.with_cluster(|c| (0..6).map(|p| c.high_watermark("bench", p).unwrap()).sum());
    assert_eq!(written as usize, answered * 6 * records_per_batch);
    assert!(cluster.with_cluster(|c| c.log_bytes()) <= 6 * (4 << 20));
}

/// A minimal blocking Kafka client for one connection.
struct RawClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    next_correlation_id: i32,
}

impl RawClient {
    fn connect(cluster: &ReferenceCluster, broker: i32) -> RawClient {
        let stream = TcpStream::connect(cluster.broker_address(broker)).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        RawClient {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            next_correlation_id: 0,
        }
    }

    fn send(&mut self, api: ApiKey, version: i16, request: &impl Encodable) -> i32 {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        write_request(&mut self.writer, api, version, correlation_id, request);
        correlation_id
    }

    /// The next answer, or `None` if the broker closed the connection.
    fn receive(&mut self, api: ApiKey, version: i16) -> Option<(i32, Bytes)> {
        let mut length = [0u8; 4];
        self.reader.read_exact(&mut length).ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(length) as usize];
        self.reader.read_exact(&mut body).ok()?;
        let mut body = Bytes::from(body);
        let header =
            ResponseHeader::decode(&mut body, api.response_header_version(version)).unwrap();
        Some((header.correlation_id, body))
    }

    fn produce(&mut self, request: &ProduceRequest) -> Option<ProduceResponse> {
        let sent = self.send(ApiKey::Produce, 9, request);
        let (correlation_id, mut body) = self.receive(ApiKey::Produce, 9)?;
        assert_eq!(correlation_id, sent);
        Some(ProduceResponse::decode(&mut body, 9).unwrap())
    }

    fn init_producer_id(&mut self) -> i64 {
        self.send(ApiKey::InitProducerId, 4, &init_request());
        let (_, mut body) = self.receive(ApiKey::InitProducerId, 4).unwrap();
        InitProducerIdResponse::decode(&mut body, 4)
            .unwrap()
            .producer_id
            .0
    }
}

/// A Produce request of one idempotent batch to partition 0 of `topic`.
fn produce_request(
    topic: &'static str,
    pid: i64,
    seq: i32,
    count: usize,
    acks: i16,
) -> ProduceRequest {
    ProduceRequest::default()
        .with_transactional_id(None)
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(
                    TestBatch::idempotent(pid, 0, seq, count).encode(),
                )))])])
}

fn first_partition(response: &ProduceResponse) -> (i16, i64) {
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn log_end(cluster: &ReferenceCluster, topic: &str) -> i64 {
    cluster.with_cluster(|c| c.high_watermark(topic, 0).unwrap())
}

// The fault plan, request by request: an answer dropped after the append (the retry is then a
// duplicate answered with the original offset), a reset before processing (nothing written),
// a reset that first writes half a frame, an injected error (nothing written), a delay.
#[test]
fn fault_plan_acts_on_the_next_matching_requests_only() {
    let topic = "faults";
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(topic, &[1]);
    let faults = cluster.faults();
    let mut client = RawClient::connect(&cluster, 1);
    let pid = client.init_producer_id();

    // A fault for another broker or another API does not match.
    faults.inject_error(2, ApiKey::Produce, REQUEST_TIMED_OUT, 1);
    faults.inject_error(1, ApiKey::Fetch, REQUEST_TIMED_OUT, 1);
    assert_eq!(
        first_partition(
            &client
                .produce(&produce_request(topic, pid, 0, 2, -1))
                .unwrap()
        ),
        (0, 0)
    );
    faults.clear();

    faults.drop_response_after_append(1, ApiKey::Produce, 1);
    let retry = produce_request(topic, pid, 2, 3, -1);
    assert!(client.produce(&retry).is_none(), "closed without an answer");
    assert_eq!(log_end(&cluster, topic), 5, "appended before the drop");
    let mut client = RawClient::connect(&cluster, 1);
    assert_eq!(
        first_partition(&client.produce(&retry).unwrap()),
        (0, 2),
        "duplicate: original offset"
    );
    assert_eq!(log_end(&cluster, topic), 5);

    faults.reset_connection(1, ApiKey::Produce, 1, false);
    let next = produce_request(topic, pid, 5, 1, -1);
    assert!(client.produce(&next).is_none());
    assert_eq!(log_end(&cluster, topic), 5, "reset before processing");

    faults.reset_connection(1, ApiKey::Produce, 1, true);
    let mut client = RawClient::connect(&cluster, 1);
    client.send(ApiKey::Produce, 9, &next);
    let mut torn = Vec::new();
    client.reader.read_to_end(&mut torn).unwrap();
    let promised = i32::from_be_bytes(torn[..4].try_into().unwrap()) as usize;
    assert!(
        torn.len() > 4 && torn.len() < 4 + promised,
        "half a frame, then EOF"
    );
    assert_eq!(log_end(&cluster, topic), 5);

    faults.inject_error(ANY_BROKER, ApiKey::Produce, REQUEST_TIMED_OUT, 1);
    let mut client = RawClient::connect(&cluster, 1);
    assert_eq!(
        first_partition(&client.produce(&next).unwrap()),
        (REQUEST_TIMED_OUT, -1)
    );
    assert_eq!(
        log_end(&cluster, topic),
        5,
        "injected errors append nothing"
    );

    let delay = Duration::from_millis(300);
    faults.delay_response(1, ApiKey::Produce, 1, delay);
    let started = Instant::now();
    assert_eq!(first_partition(&client.produce(&next).unwrap()), (0, 5));
    assert!(started.elapsed() >= delay);
    assert_eq!(faults.pending(), 0);
    assert_eq!(
        faults.applied(),
        5,
        "the two faults that matched nothing were cleared"
    );
}

// A leader that appended a batch and then lost leadership while waiting for the replicas
// answers NOT_LEADER_OR_FOLLOWER: the batch is in the log, and its retry is a duplicate
// answered with the original offset.
#[test]
fn append_then_answer_writes_the_batch_and_answers_the_error() {
    let topic = "append-then-answer";
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(topic, &[1]);
    let faults = cluster.faults();
    let mut client = RawClient::connect(&cluster, 1);
    let pid = client.init_producer_id();
    faults.append_then_answer(1, ApiKey::Produce, NOT_LEADER_OR_FOLLOWER, 1);
    let request = produce_request(topic, pid, 0, 3, -1);
    assert_eq!(
        first_partition(&client.produce(&request).unwrap()),
        (NOT_LEADER_OR_FOLLOWER, -1)
    );
    assert_eq!(log_end(&cluster, topic), 3, "appended before the answer");
    assert_eq!(faults.pending(), 0);
    assert_eq!(
        first_partition(&client.produce(&request).unwrap()),
        (0, 0),
        "the retry is a duplicate: original offset"
    );
    assert_eq!(log_end(&cluster, topic), 3);
}

// acks=0: appended, never answered; the next answer on the connection is the next request's.
#[test]
fn produce_with_acks_zero_gets_no_answer() {
    let topic = "acks0";
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(topic, &[1]);
    let mut client = RawClient::connect(&cluster, 1);
    let pid = client.init_producer_id();
    client.send(ApiKey::Produce, 9, &produce_request(topic, pid, 0, 4, 0));
    let metadata = client.send(
        ApiKey::Metadata,
        12,
        &kafka_protocol::messages::MetadataRequest::default(),
    );
    let (correlation_id, _) = client.receive(ApiKey::Metadata, 12).unwrap();
    assert_eq!(correlation_id, metadata);
    assert_eq!(log_end(&cluster, topic), 4);
}

// Metadata names every broker with its port, each partition's leader and leader epoch, and
// answers UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist.
#[test]
fn metadata_lists_brokers_leaders_and_unknown_topics() {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    let cluster = started_cluster("known");
    cluster.set_leader("known", 5, 1);
    let mut client = RawClient::connect(&cluster, 2);
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("known")))),
        MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("unknown")))),
    ]));
    client.send(ApiKey::Metadata, 12, &request);
    let (_, mut body) = client.receive(ApiKey::Metadata, 12).unwrap();
    let response = MetadataResponse::decode(&mut body, 12).unwrap();
    assert_eq!(response.brokers.len(), 3);
    for broker in &response.brokers {
        assert_eq!(
            broker.port as u16,
            cluster.broker_address(broker.node_id.0).port()
        );
    }
    let known = &response.topics[0];
    assert_eq!(known.error_code, 0);
    assert!(!known.topic_id.is_nil());
    let leaders: Vec<(i32, i32)> = known
        .partitions
        .iter()
        .map(|p| (p.leader_id.0, p.leader_epoch))
        .collect();
    assert_eq!(
        leaders,
        vec![(1, 0), (2, 0), (3, 0), (1, 0), (2, 0), (1, 1)]
    );
    assert_eq!(known.partitions[0].isr_nodes.len(), 3);
    assert_eq!(response.topics[1].error_code, 3);
}

// A broker taken down refuses connections and drops the open ones; it comes back on the same
// port, and every connection thread is gone once the cluster shuts down.
#[test]
fn broker_down_refuses_connections_and_broker_up_reopens_the_same_port() {
    let cluster = started_cluster("down-up");
    let mut client = RawClient::connect(&cluster, 2);
    let pid = client.init_producer_id();
    assert!(pid >= 0);
    cluster.broker_down(2);
    assert!(
        client.receive(ApiKey::Metadata, 12).is_none(),
        "open connection closed"
    );
    assert!(
        TcpStream::connect(cluster.broker_address(2)).is_err(),
        "new connections refused"
    );
    assert!(
        TcpStream::connect(cluster.broker_address(1)).is_ok(),
        "other brokers unaffected"
    );
    cluster.broker_up(2);
    let mut client = RawClient::connect(&cluster, 2);
    assert!(client.init_producer_id() > pid);
    cluster.shutdown();
    assert_eq!(cluster.stats().connections_open(), 0);
}

// `broker_down` marks the broker down before it closes the broker's connections. A request
// served in between must not be answered: a real broker that dies answers nothing, and the
// model's NETWORK_EXCEPTION (the lost connection, as the simulator reads it) is not an error
// code a Produce response carries. librdkafka fails a record answered with it.
#[test]
fn a_request_reaching_a_broker_marked_down_is_not_answered_but_its_connection_closed() {
    let topic = "down-mid-request";
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(topic, &[1]);
    let mut client = RawClient::connect(&cluster, 1);
    let pid = client.init_producer_id();
    cluster.with_cluster(|c| c.set_broker_up(1, false));
    client.send(ApiKey::Produce, 9, &produce_request(topic, pid, 0, 4, 1));
    let mut first = [0u8; 1];
    match client.reader.read(&mut first) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the connection closed without an answer, got {other:?}"),
    }
    assert_eq!(log_end(&cluster, topic), 0);
}
