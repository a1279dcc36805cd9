//! The three rebootstrap triggers against a scripted driver: connects succeed or are refused
//! as each test says, and answers are written by hand. Time is the rig's `now`.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiVersionsResponse, BrokerId, MetadataResponse, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::engine::{Action, Engine, EngineConfig, Micros, NodeId, RecordMetadata, TopicPartition};
use crate::error::ProduceError;
use crate::protocol::api::ApiKey;
use crate::protocol::error_code::code;
use crate::ProducerConfig;

const MS: Micros = 1000;
const SECOND: Micros = 1000 * MS;

struct Quiet;

impl crate::engine::Delivery for Quiet {
    fn complete(self, _: Result<RecordMetadata, ProduceError>) {}
}

/// A request the engine wrote on a connection.
struct Written {
    node: NodeId,
    api: i16,
    version: i16,
    correlation_id: i32,
}

struct Rig {
    engine: Engine<Quiet>,
    now: Micros,
    generations: HashMap<NodeId, u64>,
    /// Every `Action::Connect`, in order: node and address.
    connects: Vec<(NodeId, String)>,
    disconnects: Vec<NodeId>,
    written: Vec<Written>,
}

impl Rig {
    /// A producer bootstrapped from `boot:9092` with one record for `t`-0 waiting.
    fn new(settings: &[(&str, &str)]) -> Rig {
        let mut builder = ProducerConfig::builder()
            .bootstrap_servers("boot:9092")
            .enable_idempotence(false)
            .set("linger.ms", "0");
        for (key, value) in settings {
            builder = builder.set(key, *value);
        }
        let config = builder.build().expect("config");
        let mut engine = Engine::new(EngineConfig::from_producer_config(&config, true));
        engine.append(
            0,
            &TopicPartition::new("t", 0),
            0,
            None,
            Some(b"v"),
            &[],
            Quiet,
        );
        Rig {
            engine,
            now: 1,
            generations: HashMap::new(),
            connects: Vec::new(),
            disconnects: Vec::new(),
            written: Vec::new(),
        }
    }

    fn poll(&mut self) {
        self.engine.poll(self.now);
        let actions: Vec<Action> = self.engine.take_actions().collect();
        for action in actions {
            match action {
                Action::Connect {
                    node,
                    generation,
                    address,
                } => {
                    self.generations.insert(node, generation);
                    self.connects.push((node, address));
                }
                Action::Write { node, frame, .. } => {
                    let bytes = frame.to_bytes();
                    self.written.push(Written {
                        node,
                        api: i16::from_be_bytes([bytes[4], bytes[5]]),
                        version: i16::from_be_bytes([bytes[6], bytes[7]]),
                        correlation_id: i32::from_be_bytes([
                            bytes[8], bytes[9], bytes[10], bytes[11],
                        ]),
                    });
                }
                Action::Disconnect { node, .. } => self.disconnects.push(node),
                _ => {}
            }
        }
    }

    fn advance(&mut self, by: Micros) {
        self.now += by;
        self.poll();
    }

    fn connected(&mut self, node: NodeId) {
        self.engine
            .on_connected(self.now, node, self.generations[&node]);
        self.poll();
    }

    /// The connection to `node` failed or was lost.
    fn lost(&mut self, node: NodeId) {
        self.engine
            .on_disconnected(self.now, node, self.generations[&node]);
        self.poll();
    }

    fn last_connect(&self) -> (NodeId, &str) {
        let (node, address) = self.connects.last().expect("a connect");
        (*node, address)
    }

    /// Removes and returns the first request of `api` written on `node`.
    fn take(&mut self, node: NodeId, api: ApiKey) -> Written {
        let index = self
            .written
            .iter()
            .position(|w| w.node == node && w.api == api.code())
            .unwrap_or_else(|| panic!("no {api:?} written on node {node}"));
        self.written.remove(index)
    }

    fn answer(&mut self, request: &Written, body: &impl Encodable) {
        let api = kafka_protocol::messages::ApiKey::try_from(request.api).unwrap();
        let header_version = if request.api == ApiKey::ApiVersions.code() {
            0
        } else {
            api.response_header_version(request.version)
        };
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(request.correlation_id)
            .encode(&mut out, header_version)
            .unwrap();
        body.encode(&mut out, request.version).unwrap();
        let generation = self.generations[&request.node];
        self.engine
            .on_frame(self.now, request.node, generation, Bytes::from(out));
        self.poll();
    }

    /// Connects `node` and answers its ApiVersions, offering Metadata up to `metadata_max`.
    fn negotiate(&mut self, node: NodeId, metadata_max: i16) {
        self.connected(node);
        let request = self.take(node, ApiKey::ApiVersions);
        let ranges = [
            (ApiKey::Produce, 3, 11),
            (ApiKey::Metadata, 1, metadata_max),
            (ApiKey::ApiVersions, 0, 3),
        ];
        let response = ApiVersionsResponse::default().with_api_keys(
            ranges
                .iter()
                .map(|&(api, min, max)| {
                    ApiVersion::default()
                        .with_api_key(api.code())
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect(),
        );
        self.answer(&request, &response);
    }

    /// Answers the Metadata request on `node`: one broker `id` at `host`:9092 leading `t`-0.
    fn metadata(&mut self, node: NodeId, id: i32, host: &str, error_code: i16) {
        let request = self.take(node, ApiKey::Metadata);
        let response = MetadataResponse::default()
            .with_error_code(error_code)
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(id))
                .with_host(StrBytes::from_string(host.to_string()))
                .with_port(9092)])
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
                .with_partitions(vec![MetadataResponsePartition::default()
                    .with_partition_index(0)
                    .with_leader_id(BrokerId(id))
                    .with_leader_epoch(0)])]);
        self.answer(&request, &response);
    }

    /// Bootstraps from `boot:9092` into a cluster of one broker, 1 at `old1:9092`, and starts
    /// connecting to it.
    fn start(&mut self, metadata_max: i16) {
        self.poll();
        assert_eq!(self.last_connect(), (-1, "boot:9092"));
        self.negotiate(-1, metadata_max);
        self.metadata(-1, 1, "old1", code::NONE);
        assert_eq!(
            self.last_connect(),
            (1, "old1:9092"),
            "{:?}",
            self.engine.stats()
        );
    }

    /// Every broker of the old cluster is gone: the bootstrap connection is lost and broker 1
    /// refuses connections.
    fn old_cluster_gone(&mut self) {
        // Later than the metadata backoff after the last answer, so a refresh is due at once.
        self.now += SECOND;
        self.lost(-1);
        self.lost(1);
    }

    fn rebootstraps(&self) -> u64 {
        self.engine.stats().rebootstraps
    }
}

#[test]
fn when_every_known_broker_refuses_connections_the_bootstrap_address_is_connected_again() {
    let mut rig = Rig::new(&[("metadata.recovery.strategy", "rebootstrap")]);
    rig.start(12);
    rig.old_cluster_gone();
    assert_eq!(rig.rebootstraps(), 1);
    // Past every reconnect backoff: the bootstrap address, not the old broker, is tried.
    rig.advance(2 * SECOND);
    assert_eq!(rig.last_connect(), (-1, "boot:9092"));
    // It now leads to a new cluster, whose broker 7 gets the record.
    rig.negotiate(-1, 12);
    rig.metadata(-1, 7, "new7", code::NONE);
    assert_eq!(rig.last_connect(), (7, "new7:9092"));
    rig.negotiate(7, 12);
    rig.take(7, ApiKey::Produce);
    assert!(
        !rig.connects.iter().skip(2).any(|(node, _)| *node == 1),
        "the old broker was tried again: {:?}",
        rig.connects
    );
}

#[test]
fn under_none_the_known_brokers_are_retried_and_the_bootstrap_address_is_not() {
    let mut rig = Rig::new(&[("metadata.recovery.strategy", "none")]);
    rig.start(12);
    rig.old_cluster_gone();
    for _ in 0..5 {
        rig.advance(2 * SECOND);
        assert_eq!(rig.last_connect(), (1, "old1:9092"));
        rig.lost(1);
    }
    assert_eq!(rig.rebootstraps(), 0);
    assert_eq!(
        rig.connects.iter().filter(|(node, _)| *node == -1).count(),
        1,
        "{:?}",
        rig.connects
    );
}

#[test]
fn no_metadata_answer_for_the_trigger_interval_closes_the_connections_and_rebootstraps() {
    let mut rig = Rig::new(&[
        ("metadata.recovery.strategy", "rebootstrap"),
        ("metadata.recovery.rebootstrap.trigger.ms", "10000"),
    ]);
    rig.start(12);
    rig.negotiate(1, 12);
    rig.take(1, ApiKey::Produce);
    // Later than the metadata backoff after the last answer, so a refresh is due at once.
    rig.now += SECOND;
    // The bootstrap connection goes; the refresh it calls for goes to broker 1, which never
    // answers (request.timeout.ms is 30 s, longer than the trigger).
    rig.lost(-1);
    let asked_at = rig.now;
    rig.take(1, ApiKey::Metadata);
    let trigger_at = asked_at + 10 * SECOND + 1;
    let wakeup = rig.engine.next_wakeup(rig.now).expect("a wakeup");
    assert!(
        wakeup <= trigger_at,
        "wakes at {wakeup}, trigger at {trigger_at}"
    );
    rig.now = trigger_at - 1;
    rig.poll();
    assert_eq!(
        rig.rebootstraps(),
        0,
        "the trigger fires strictly after its interval"
    );
    assert!(rig.disconnects.is_empty());
    rig.now = trigger_at;
    rig.poll();
    assert_eq!(rig.rebootstraps(), 1);
    assert_eq!(rig.disconnects, vec![1]);
    rig.advance(2 * SECOND);
    assert_eq!(rig.last_connect(), (-1, "boot:9092"));
}

#[test]
fn a_rebootstrap_required_answer_at_metadata_v13_rebootstraps_at_once() {
    let mut rig = Rig::new(&[("metadata.recovery.strategy", "rebootstrap")]);
    rig.start(13);
    rig.negotiate(1, 13);
    rig.take(1, ApiKey::Produce);
    // The next refresh is answered REBOOTSTRAP_REQUIRED; the broker it names is not taken.
    rig.engine.request_topic("u");
    rig.poll();
    let refresh = rig
        .written
        .iter()
        .find(|w| w.api == ApiKey::Metadata.code())
        .expect("a refresh");
    assert_eq!(refresh.version, 13);
    let node = refresh.node;
    rig.metadata(node, 9, "elsewhere", code::REBOOTSTRAP_REQUIRED);
    assert_eq!(rig.rebootstraps(), 1);
    assert!(rig.disconnects.contains(&1), "{:?}", rig.disconnects);
    assert!(!rig.connects.iter().any(|(n, _)| *n == 9));
    // The bootstrap connection is still up (it is not a broker of the list that was
    // dropped), so fresh metadata is asked of it at once.
    rig.metadata(-1, 7, "new7", code::NONE);
    assert_eq!(rig.last_connect(), (7, "new7:9092"));
}

#[test]
fn under_none_a_rebootstrap_required_answer_is_applied_as_any_answer() {
    let mut rig = Rig::new(&[("metadata.recovery.strategy", "none")]);
    rig.start(13);
    rig.negotiate(1, 13);
    rig.take(1, ApiKey::Produce);
    rig.engine.request_topic("u");
    rig.poll();
    let node = rig
        .written
        .iter()
        .find(|w| w.api == ApiKey::Metadata.code())
        .expect("a refresh")
        .node;
    rig.metadata(node, 9, "elsewhere", code::REBOOTSTRAP_REQUIRED);
    assert_eq!(rig.rebootstraps(), 0);
    assert!(rig.disconnects.is_empty(), "{:?}", rig.disconnects);
    assert_eq!(
        rig.engine.metadata().nodes.get(&9).map(String::as_str),
        Some("elsewhere:9092")
    );
}
