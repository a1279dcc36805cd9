//! A scripted driver for engine tests about connections and metadata: connects succeed or are
//! refused as each test says, and answers are written by hand. Time is the rig's `now`.

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

pub const MS: Micros = 1000;
pub const SECOND: Micros = 1000 * MS;

pub struct Quiet;

impl crate::engine::Delivery for Quiet {
    fn complete(self, _: Result<RecordMetadata, ProduceError>) {}
}

/// A request the engine wrote on a connection.
pub struct Written {
    pub node: NodeId,
    pub api: i16,
    pub version: i16,
    pub correlation_id: i32,
}

pub struct Rig {
    pub engine: Engine<Quiet>,
    pub now: Micros,
    pub generations: HashMap<NodeId, u64>,
    /// Every `Action::Connect`, in order: node and address.
    pub connects: Vec<(NodeId, String)>,
    pub disconnects: Vec<NodeId>,
    pub written: Vec<Written>,
}

impl Rig {
    /// A producer bootstrapped from `boot:9092` with one record for `t`-0 waiting.
    pub fn new(settings: &[(&str, &str)]) -> Rig {
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

    pub fn poll(&mut self) {
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

    pub fn advance(&mut self, by: Micros) {
        self.now += by;
        self.poll();
    }

    pub fn connected(&mut self, node: NodeId) {
        self.engine
            .on_connected(self.now, node, self.generations[&node]);
        self.poll();
    }

    /// The connection to `node` failed or was lost.
    pub fn lost(&mut self, node: NodeId) {
        self.engine
            .on_disconnected(self.now, node, self.generations[&node]);
        self.poll();
    }

    pub fn last_connect(&self) -> (NodeId, &str) {
        let (node, address) = self.connects.last().expect("a connect");
        (*node, address)
    }

    /// The pending Metadata refresh, on whichever node it was written (the least loaded).
    pub fn refresh(&self) -> &Written {
        self.written
            .iter()
            .find(|w| w.api == ApiKey::Metadata.code())
            .expect("a refresh")
    }

    /// Removes and returns the first request of `api` written on `node`.
    pub fn take(&mut self, node: NodeId, api: ApiKey) -> Written {
        let index = self
            .written
            .iter()
            .position(|w| w.node == node && w.api == api.code())
            .unwrap_or_else(|| panic!("no {api:?} written on node {node}"));
        self.written.remove(index)
    }

    pub fn answer(&mut self, request: &Written, body: &impl Encodable) {
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
    pub fn negotiate(&mut self, node: NodeId, metadata_max: i16) {
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
    pub fn metadata(&mut self, node: NodeId, id: i32, host: &str, error_code: i16) {
        let request = self.take(node, ApiKey::Metadata);
        let response = metadata_answer(&[(id, host)], id).with_error_code(error_code);
        self.answer(&request, &response);
    }

    /// Bootstraps from `boot:9092` into a cluster of one broker, 1 at `old1:9092`, and starts
    /// connecting to it.
    pub fn start(&mut self, metadata_max: i16) {
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
    pub fn old_cluster_gone(&mut self) {
        // Later than the metadata backoff after the last answer, so a refresh is due at once.
        self.now += SECOND;
        self.lost(-1);
        self.lost(1);
    }

    pub fn rebootstraps(&self) -> u64 {
        self.engine.stats().rebootstraps
    }
}

/// A Metadata answer listing `brokers` (id and host, port 9092), with `t`-0 led by `leader` at
/// leader epoch 0.
pub fn metadata_answer(brokers: &[(i32, &str)], leader: i32) -> MetadataResponse {
    MetadataResponse::default()
        .with_brokers(
            brokers
                .iter()
                .map(|&(id, host)| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(id))
                        .with_host(StrBytes::from_string(host.to_string()))
                        .with_port(9092)
                })
                .collect(),
        )
        .with_topics(vec![MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
            .with_partitions(vec![MetadataResponsePartition::default()
                .with_partition_index(0)
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(0)])])
}
