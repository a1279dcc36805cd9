//! kacrab against a fake broker that misbehaves on purpose: a plain std `TcpListener` in this
//! test answers every API the producer speaks properly (encoded with `kafka-protocol`), and
//! answers a scripted request with a 2 GiB frame length, garbage, a truncated frame, an
//! undecodable body, a count of billions of elements or an answer to a request never made.
//! Each time the connection must close with a typed error, the producer must reconnect and
//! retry, and a later well-behaved answer must succeed. Nothing may panic, and nothing may
//! allocate what a length prefix or a count claims: a counting allocator records the largest
//! single allocation of the process.
//!
//! `malformed_answers` holds the broken frames and bodies, `huge_counts` the answers whose count
//! claims billions of elements; the fake broker and the connect that never completes are here.

#[path = "hostile_broker/huge_counts.rs"]
mod huge_counts;
#[path = "hostile_broker/malformed_answers.rs"]
mod malformed_answers;

use std::alloc::System;
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kacrab::stats::{ConnectionError, RuntimeStats};
use kacrab::{Producer, ProducerRecord};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey,
    ApiVersionsResponse, BrokerId, EndTxnResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    InitProducerIdResponse, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
    ProducerId, RequestHeader, ResponseHeader, SaslAuthenticateResponse, SaslHandshakeResponse,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tracking_allocator::{AllocationGroupId, AllocationRegistry, AllocationTracker, Allocator};

/// Records the largest single allocation the process makes, fed by `tracking-allocator`'s
/// hooks (a `realloc` reaches it as the new allocation).
struct LargestAllocation;

static LARGEST_ALLOCATION: AtomicUsize = AtomicUsize::new(0);

impl AllocationTracker for LargestAllocation {
    fn allocated(&self, _addr: usize, object_size: usize, _wrapped: usize, _: AllocationGroupId) {
        LARGEST_ALLOCATION.fetch_max(object_size, Ordering::Relaxed);
    }

    fn deallocated(
        &self,
        _: usize,
        _: usize,
        _: usize,
        _: AllocationGroupId,
        _: AllocationGroupId,
    ) {
    }
}

#[global_allocator]
static GLOBAL: Allocator<System> = Allocator::system();

/// Installs the tracker once per process; every test calls it before it drives traffic.
fn track_allocations() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        AllocationRegistry::set_global_tracker(LargestAllocation)
            .expect("no other tracker is installed");
        AllocationRegistry::enable_tracking();
    });
}

const TOPIC: &str = "hostile";

/// What the fake broker does instead of answering one request.
#[derive(Debug, Clone)]
enum Act {
    /// A length prefix claiming this many bytes, then silence (the connection stays open).
    Claim(u32),
    /// These bytes instead of an answer, then silence.
    Garbage(Vec<u8>),
    /// A length prefix claiming `claim` bytes, `send` bytes of body, then the connection
    /// closes.
    Truncated { claim: u32, send: usize },
    /// A well-framed answer with the right correlation id and a body that does not decode:
    /// its first array claims one element, whose first string claims more bytes than follow.
    Undecodable,
    /// A well-framed answer cut after `at` bytes of the proper body, then a count claiming
    /// some two (plain `INT32` count) or four (compact varint count) billion elements, then a
    /// few bytes.
    HugeCount { at: usize },
    /// A well-formed answer carrying a correlation id no request had.
    WrongCorrelation,
}

/// The fake broker: node 1, one topic with one partition it leads.
struct FakeBroker {
    port: u16,
    /// Acts to play, per API key, one per request in arrival order.
    script: Arc<Mutex<HashMap<i16, VecDeque<Act>>>>,
    connections: Arc<AtomicUsize>,
    /// Produce requests answered properly.
    produced: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

impl FakeBroker {
    fn start(script: Vec<(ApiKey, Act)>) -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let mut acts: HashMap<i16, VecDeque<Act>> = HashMap::new();
        for (api, act) in script {
            acts.entry(api as i16).or_default().push_back(act);
        }
        let script = Arc::new(Mutex::new(acts));
        let connections = Arc::new(AtomicUsize::new(0));
        let produced = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let (script, connections, produced, stop) = (
                script.clone(),
                connections.clone(),
                produced.clone(),
                stop.clone(),
            );
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let (script, produced, stop) = (script.clone(), produced.clone(), stop.clone());
                    std::thread::spawn(move || serve(stream, port, &script, &produced, &stop));
                }
            })
        };
        FakeBroker {
            port,
            script,
            connections,
            produced,
            stop,
            acceptor: Some(acceptor),
        }
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn script_done(&self) -> bool {
        self.script.lock().unwrap().values().all(VecDeque::is_empty)
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn read_request(stream: &mut TcpStream) -> Option<Bytes> {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).ok()?;
    let length = usize::try_from(i32::from_be_bytes(length)).ok()?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    Some(Bytes::from(body))
}

fn frame(header: ResponseHeader, header_version: i16, body: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    header.encode(&mut out, header_version).unwrap();
    body(&mut out);
    let length = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&length.to_be_bytes());
    out.to_vec()
}

/// Serves one connection until it closes (or the broker stops).
fn serve(
    mut stream: TcpStream,
    port: u16,
    script: &Mutex<HashMap<i16, VecDeque<Act>>>,
    produced: &AtomicUsize,
    stop: &AtomicBool,
) {
    let _ = stream.set_nodelay(true);
    while let Some(mut request) = read_request(&mut stream) {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let api_key = i16::from_be_bytes([request[0], request[1]]);
        let version = i16::from_be_bytes([request[2], request[3]]);
        let api = ApiKey::try_from(api_key).expect("known api");
        let header = RequestHeader::decode(&mut request, api.request_header_version(version))
            .expect("request header");
        let correlation_id = header.correlation_id;
        let response_header = ResponseHeader::default().with_correlation_id(correlation_id);
        let header_version = api.response_header_version(version);
        let act = script
            .lock()
            .unwrap()
            .get_mut(&api_key)
            .and_then(VecDeque::pop_front);
        let answer = match act {
            None => answer(api, version, correlation_id, &mut request, port, produced),
            Some(Act::Claim(claim)) => {
                let _ = stream.write_all(&claim.to_be_bytes());
                return hold_until_closed(stream);
            }
            Some(Act::Garbage(bytes)) => {
                let _ = stream.write_all(&bytes);
                return hold_until_closed(stream);
            }
            Some(Act::Truncated { claim, send }) => {
                let mut out = claim.to_be_bytes().to_vec();
                out.extend(std::iter::repeat_n(0x5a, send));
                let _ = stream.write_all(&out);
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
            Some(Act::Undecodable) => frame(response_header, header_version, |out| {
                // As a compact array (flexible versions): one element, then a compact string
                // of 4 bytes with none following; as a plain array, a count of 0x0205ffff
                // elements with none following. Either way the decoder runs out of bytes.
                out.put_slice(&[0x02, 0x05, 0xff, 0xff]);
            }),
            Some(Act::HugeCount { at }) => {
                let proper = answer(api, version, correlation_id, &mut request, port, produced);
                // The proper frame: length, header, body; the body starts after the header.
                let body_start = 4 + if header_version >= 1 { 5 } else { 4 };
                let flexible = header_version >= 1 || (api == ApiKey::ApiVersions && version >= 3);
                frame(response_header, header_version, |out| {
                    out.put_slice(&proper[body_start..body_start + at]);
                    if flexible {
                        out.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
                    } else {
                        out.put_i32(i32::MAX);
                    }
                    out.put_slice(&[0x00, 0x00, 0x00]);
                })
            }
            Some(Act::WrongCorrelation) => {
                let mut proper = answer(api, version, correlation_id, &mut request, port, produced);
                proper[4..8].copy_from_slice(&(correlation_id ^ 0x5555).to_be_bytes());
                proper
            }
        };
        if stream.write_all(&answer).is_err() {
            return;
        }
    }
}

/// Keeps the connection open, reading and discarding, until the client closes it.
fn hold_until_closed(mut stream: TcpStream) {
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

/// A proper answer to `api` at `version`.
fn answer(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    request: &mut Bytes,
    port: u16,
    produced: &AtomicUsize,
) -> Vec<u8> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = api.response_header_version(version);
    match api {
        ApiKey::ApiVersions => {
            let ranges = [
                (ApiKey::Produce, 3, 9),
                (ApiKey::Metadata, 1, 12),
                (ApiKey::ApiVersions, 0, 3),
                (ApiKey::InitProducerId, 0, 4),
                (ApiKey::FindCoordinator, 0, 4),
                (ApiKey::AddPartitionsToTxn, 0, 3),
                (ApiKey::AddOffsetsToTxn, 0, 3),
                (ApiKey::TxnOffsetCommit, 0, 3),
                (ApiKey::EndTxn, 0, 3),
                // A producer on SASL_PLAINTEXT authenticates with PLAIN; this broker accepts
                // any credentials.
                (ApiKey::SaslHandshake, 1, 1),
                (ApiKey::SaslAuthenticate, 0, 2),
            ];
            let response = ApiVersionsResponse::default().with_api_keys(
                ranges
                    .iter()
                    .map(|&(api, min, max)| {
                        ApiVersion::default()
                            .with_api_key(api as i16)
                            .with_min_version(min)
                            .with_max_version(max)
                    })
                    .collect(),
            );
            // ApiVersions answers always carry a v0 header.
            frame(header, 0, |out| response.encode(out, version).unwrap())
        }
        ApiKey::SaslHandshake => {
            let response = SaslHandshakeResponse::default()
                .with_mechanisms(vec![StrBytes::from_static_str("PLAIN")]);
            frame(header, header_version, |out| {
                response.encode(out, version).unwrap()
            })
        }
        ApiKey::SaslAuthenticate => {
            let response = SaslAuthenticateResponse::default();
            frame(header, header_version, |out| {
                response.encode(out, version).unwrap()
            })
        }
        ApiKey::Metadata => {
            let requested = MetadataRequest::decode(request, version).expect("metadata request");
            let topics = requested
                .topics
                .unwrap_or_default()
                .into_iter()
                .filter_map(|t| t.name)
                .map(|name| {
                    let known = name.0.as_str() == TOPIC;
                    let topic = MetadataResponseTopic::default().with_name(Some(name));
                    if known {
                        topic.with_partitions(vec![MetadataResponsePartition::default()
                            .with_partition_index(0)
                            .with_leader_id(BrokerId(1))
                            .with_leader_epoch(0)
                            .with_replica_nodes(vec![BrokerId(1)])
                            .with_isr_nodes(vec![BrokerId(1)])])
                    } else {
                        topic.with_error_code(3) // UNKNOWN_TOPIC_OR_PARTITION
                    }
                })
                .collect();
            let response = MetadataResponse::default()
                .with_brokers(vec![MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                    .with_port(i32::from(port))])
                .with_controller_id(BrokerId(1))
                .with_topics(topics);
            frame(header, header_version, |out| {
                response.encode(out, version).unwrap()
            })
        }
        ApiKey::InitProducerId => {
            let response = InitProducerIdResponse::default()
                .with_producer_id(ProducerId(4242))
                .with_producer_epoch(0);
            frame(header, header_version, |out| {
                response.encode(out, version).unwrap()
            })
        }
        ApiKey::Produce => {
            let produce = ProduceRequest::decode(request, version).expect("produce request");
            let responses = produce
                .topic_data
                .iter()
                .map(|topic| {
                    TopicProduceResponse::default()
                        .with_name(topic.name.clone())
                        .with_partition_responses(
                            topic
                                .partition_data
                                .iter()
                                .map(|p| {
                                    let offset = produced.fetch_add(1, Ordering::SeqCst) as i64;
                                    PartitionProduceResponse::default()
                                        .with_index(p.index)
                                        .with_base_offset(offset)
                                        .with_log_append_time_ms(-1)
                                })
                                .collect(),
                        )
                })
                .collect();
            let response = ProduceResponse::default().with_responses(responses);
            frame(header, header_version, |out| {
                response.encode(out, version).unwrap()
            })
        }
        ApiKey::FindCoordinator => {
            let requested =
                FindCoordinatorRequest::decode(request, version).expect("find coordinator request");
            let host = StrBytes::from_static_str("127.0.0.1");
            let response = if version >= 4 {
                FindCoordinatorResponse::default().with_coordinators(
                    requested
                        .coordinator_keys
                        .into_iter()
                        .map(|key| {
                            Coordinator::default()
                                .with_key(key)
                                .with_node_id(BrokerId(1))
                                .with_host(host.clone())
                                .with_port(i32::from(port))
                        })
                        .collect(),
                )
            } else {
                FindCoordinatorResponse::default()
                    .with_node_id(BrokerId(1))
                    .with_host(host)
                    .with_port(i32::from(port))
            };
            frame(header, header_version, |out| {
                response.encode(out, version).unwrap()
            })
        }
        ApiKey::AddPartitionsToTxn => {
            let requested = AddPartitionsToTxnRequest::decode(request, version)
                .expect("add partitions request");
            let response = AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(
                    requested
                        .v3_and_below_topics
                        .into_iter()
                        .map(|topic| {
                            AddPartitionsToTxnTopicResult::default()
                                .with_name(topic.name)
                                .with_results_by_partition(
                                    topic
                                        .partitions
                                        .into_iter()
                                        .map(|p| {
                                            AddPartitionsToTxnPartitionResult::default()
                                                .with_partition_index(p)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            frame(header, header_version, |out| {
                response.encode(out, version).unwrap()
            })
        }
        ApiKey::TxnOffsetCommit => {
            let requested = TxnOffsetCommitRequest::decode(request, version)
                .expect("txn offset commit request");
            let response = TxnOffsetCommitResponse::default().with_topics(
                requested
                    .topics
                    .into_iter()
                    .map(|topic| {
                        TxnOffsetCommitResponseTopic::default()
                            .with_name(topic.name)
                            .with_partitions(
                                topic
                                    .partitions
                                    .into_iter()
                                    .map(|p| {
                                        TxnOffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
            frame(header, header_version, |out| {
                response.encode(out, version).unwrap()
            })
        }
        ApiKey::AddOffsetsToTxn => frame(header, header_version, |out| {
            AddOffsetsToTxnResponse::default()
                .encode(out, version)
                .unwrap()
        }),
        ApiKey::EndTxn => frame(header, header_version, |out| {
            EndTxnResponse::default().encode(out, version).unwrap()
        }),
        other => panic!("the producer sent {other:?}, which this broker does not advertise"),
    }
}

/// Sends one record through a producer bootstrapped from `broker` and expects it
/// acknowledged; returns the runtime's view afterwards.
fn send_through(broker: &FakeBroker, extra: &[(&str, &str)]) -> RuntimeStats {
    track_allocations();
    let mut builder = Producer::builder()
        .set("bootstrap.servers", broker.bootstrap())
        .set("kacrab.shards", "1")
        .set("linger.ms", "0")
        .set("reconnect.backoff.ms", "10")
        .set("reconnect.backoff.max.ms", "50")
        .set("request.timeout.ms", "3000")
        .set("delivery.timeout.ms", "30000");
    for (key, value) in extra {
        builder = builder.set(key, *value);
    }
    let producer = builder.build().expect("producer");
    let outcome = producer
        .send(ProducerRecord::new(TOPIC, Bytes::from_static(b"survives")).with_partition(0))
        .wait_timeout(Duration::from_secs(30))
        .expect("the record resolves");
    let meta = outcome.expect("acknowledged after the hostile answer");
    assert_eq!(meta.partition, 0);
    assert!(broker.script_done(), "every hostile act was played");
    assert!(
        broker.connections.load(Ordering::SeqCst) >= 2,
        "the producer reconnected"
    );
    assert!(broker.produced.load(Ordering::SeqCst) >= 1);
    let stats = producer.runtime_stats();
    producer.close(Duration::from_secs(5));
    let closed = producer.runtime_stats();
    assert_eq!((closed.sockets_open, closed.connection_tasks), (0, 0));
    stats
}

/// A listener that never completes another TCP handshake: its accept queue (backlog 0) is
/// full with connections nobody accepts, so the kernel drops further SYNs and a connect hangs
/// until the client gives up.
struct Blackhole {
    port: u16,
    _listener: socket2::Socket,
    _filling: Vec<TcpStream>,
}

impl Blackhole {
    fn start() -> Blackhole {
        use socket2::{Domain, Socket, Type};
        let listener = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        let any_port = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        listener.bind(&any_port.into()).expect("bind");
        listener.listen(0).expect("listen");
        let addr = listener
            .local_addr()
            .expect("local address")
            .as_socket()
            .expect("an inet address");
        let mut filling = Vec::new();
        while let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            filling.push(stream);
            assert!(filling.len() < 64, "the accept queue never filled");
        }
        Blackhole {
            port: addr.port(),
            _listener: listener,
            _filling: filling,
        }
    }
}

// The only bootstrap server never completes the TCP handshake. Each attempt ends at
// socket.connection.setup.timeout.ms (a glommio timer, in the connect or in the engine) with
// a typed error, the next one follows the reconnect backoff, and the send fails with a
// metadata timeout after max.block.ms instead of hanging.
#[test]
fn a_connect_that_never_completes_times_out_and_is_retried() {
    let blackhole = Blackhole::start();
    let producer = Producer::builder()
        .set("bootstrap.servers", format!("127.0.0.1:{}", blackhole.port))
        .set("kacrab.shards", "1")
        .set("socket.connection.setup.timeout.ms", "200")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "50")
        .set("max.block.ms", "2000")
        .build()
        .expect("producer");
    let err = producer
        .send(ProducerRecord::new(TOPIC, Bytes::from_static(b"never")))
        .wait()
        .expect_err("no broker ever answers");
    assert!(
        matches!(err, kacrab::ProduceError::MetadataTimeout { .. }),
        "{err}"
    );
    let stats = producer.runtime_stats();
    let timed_out = stats
        .recent_failures
        .iter()
        .filter(|f| {
            matches!(
                &f.error,
                ConnectionError::Connect {
                    kind: std::io::ErrorKind::TimedOut,
                    ..
                } | ConnectionError::Abandoned { established: false }
            )
        })
        .count();
    assert!(
        timed_out >= 2,
        "connect attempts timed out and were retried: {stats:?}"
    );
    assert_eq!(stats.connections_established, 0);
    producer.close(Duration::from_secs(5));
    let closed = producer.runtime_stats();
    assert_eq!((closed.sockets_open, closed.connection_tasks), (0, 0));
}
