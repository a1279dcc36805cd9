//! The scripted broker and the one-owner driver that `engine_transactions.rs` runs the
//! transactional engine against (see that file's doc).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey,
    ApiVersionsResponse, BrokerId, EndTxnRequest, EndTxnResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, InitProducerIdRequest, InitProducerIdResponse, MetadataResponse,
    ProduceRequest, ProduceResponse, ProducerId, RequestHeader, ResponseHeader, TopicName,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use kacrab::testkit::internals::engine::{
    Action, Delivery, Engine, EngineConfig, TopicPartition, TransactionState, TxnAction, TxnHandle,
};
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::{ProduceError, ProducerConfig, RecordMetadata, TransactionError};

pub const TOPIC: &str = "t";
pub const MS: u64 = 1_000;

pub type Results = Rc<RefCell<HashMap<u32, Result<RecordMetadata, ProduceError>>>>;

pub struct Record {
    pub id: u32,
    pub results: Results,
}

impl Delivery for Record {
    fn complete(self, result: Result<RecordMetadata, ProduceError>) {
        let previous = self.results.borrow_mut().insert(self.id, result);
        assert!(previous.is_none(), "record {} completed twice", self.id);
    }
}

/// One decoded request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub body: Bytes,
    pub at: u64,
}

pub struct Rig {
    /// The owner (engine 0), with the transaction manager.
    pub engine: Engine<Record>,
    /// Participants (engines 1..), as other shards of the same producer.
    pub others: Vec<Engine<Record>>,
    /// The flush round in progress and which engines reported it.
    pub flush: Option<(u64, Vec<bool>)>,
    pub now: u64,
    pub results: Results,
    pub next_id: u32,
    /// Every request written, in order.
    pub log: Vec<Seen>,
    /// Injected error codes, consumed one per request of the API.
    pub inject: HashMap<ApiKey, VecDeque<i16>>,
    /// APIs whose answers are held until released.
    pub held_apis: Vec<ApiKey>,
    pub held: Vec<(usize, i32, u64, Seen)>,
    /// The scripted coordinator's epoch for the transactional id.
    pub epoch: i16,
    /// The next successful InitProducerId answers this (producer id, epoch) instead.
    pub init_answer: Option<(i64, i16)>,
    pub next_offset: Vec<i64>,
    /// Produce requests answered, per partition, with the transactional bit seen.
    pub produce_batches: Vec<(i32, bool)>,
    /// Flush rounds each (the only) participant reported.
    pub completed: Vec<TxnHandle>,
    /// Engines whose ApiVersions answers leave out Produce (see `lose_produce_support`).
    pub strip_produce_for: Vec<usize>,
    /// The generation of each engine's latest connection (one broker: one per engine).
    pub generations: HashMap<usize, u64>,
    /// Every `ProduceFailed` routed to the owner: the engine that sent it, and its `fatal`.
    pub produce_failed: Vec<(usize, bool)>,
    /// APIs the broker advertises only up to a lower max version than the script's table
    /// (an older broker); see `ready_with_max_version`.
    pub max_versions: HashMap<ApiKey, i16>,
    /// A Kafka 4.0 broker with `transaction.version=2` finalized (see `tv2.rs`): it speaks
    /// Produce v12, EndTxn v5 and TxnOffsetCommit v5, and EndTxn v5 bumps the epoch.
    pub tv2: bool,
    /// Speaks the V2 versions but does not finalize the feature (`tv2` off).
    pub tv2_versions_only: bool,
    /// The next EndTxn v5 returns this (producer id, epoch) instead of a bump of the epoch.
    pub end_txn_answer: Option<(i64, i16)>,
    /// The epoch the last EndTxn v5 ended (a retry of it names that epoch and gets the
    /// bumped one back, as Kafka 4.0's coordinator answers a retried EndTxn).
    pub ended_epoch: Option<i16>,
    /// Every batch produced: partition, producer id, epoch, base sequence, request version.
    pub produce_stamps: Vec<(i32, i64, i16, i32, i16)>,
    /// Answers computed (the broker acted) but never delivered: see `lose_held`.
    pub lost: usize,
}

pub fn config(linger: Duration) -> EngineConfig {
    let config = ProducerConfig::builder()
        .bootstrap_servers("broker:9092")
        .transactional_id("tx-1")
        .linger(linger)
        .build()
        .expect("config");
    let mut engine = EngineConfig::from_producer_config(&config, true);
    engine.retry_backoff = 100 * MS;
    engine
}

impl Rig {
    pub fn new(linger: Duration) -> Rig {
        let mut engine = Engine::new(config(linger));
        engine.request_topic(TOPIC);
        Rig {
            engine,
            others: Vec::new(),
            flush: None,
            now: 1,
            results: Rc::default(),
            next_id: 0,
            log: Vec::new(),
            inject: HashMap::new(),
            held_apis: Vec::new(),
            held: Vec::new(),
            epoch: -1,
            init_answer: None,
            next_offset: vec![0; 3],
            produce_batches: Vec::new(),
            completed: Vec::new(),
            strip_produce_for: Vec::new(),
            generations: HashMap::new(),
            produce_failed: Vec::new(),
            max_versions: HashMap::new(),
            tv2: false,
            tv2_versions_only: false,
            end_txn_answer: None,
            ended_epoch: None,
            produce_stamps: Vec::new(),
            lost: 0,
        }
    }

    /// A rig after a successful `init_transactions`, with `participants` more engines.
    pub fn ready_with(linger: Duration, participants: usize) -> Rig {
        let mut rig = Rig::new(linger);
        for _ in 0..participants {
            let mut c = config(linger);
            c.owns_identity = false;
            let mut e = Engine::new(c);
            e.request_topic(TOPIC);
            rig.others.push(e);
        }
        let handle = rig.engine.init_transactions().expect("init");
        assert_eq!(rig.wait(handle), Ok(()));
        for e in &rig.others {
            assert_eq!(
                e.identity(),
                rig.engine.identity(),
                "identity reached every engine"
            );
        }
        rig
    }

    pub fn engines(&self) -> usize {
        1 + self.others.len()
    }

    pub fn eng(&mut self, i: usize) -> &mut Engine<Record> {
        if i == 0 {
            &mut self.engine
        } else {
            &mut self.others[i - 1]
        }
    }

    /// A rig after a successful `init_transactions`.
    pub fn ready(linger: Duration) -> Rig {
        let mut rig = Rig::new(linger);
        let handle = rig.engine.init_transactions().expect("init");
        assert_eq!(rig.wait(handle), Ok(()));
        assert_eq!(rig.state(), TransactionState::Ready);
        rig
    }

    /// A rig after a successful `init_transactions` against a broker that advertises `api`
    /// only up to version `max`. The cap is in place before the first connection, so every
    /// ApiVersions answer carries it.
    pub fn ready_with_max_version(linger: Duration, api: ApiKey, max: i16) -> Rig {
        let mut rig = Rig::new(linger);
        rig.max_versions.insert(api, max);
        let handle = rig.engine.init_transactions().expect("init");
        assert_eq!(rig.wait(handle), Ok(()));
        assert_eq!(rig.state(), TransactionState::Ready);
        rig
    }

    pub fn state(&self) -> TransactionState {
        self.engine.transaction_manager().expect("owner").state()
    }

    pub fn tp(p: i32) -> TopicPartition {
        TopicPartition::new(TOPIC, p)
    }

    pub fn send(&mut self, p: i32) -> u32 {
        self.send_on(0, p)
    }

    /// Appends on engine `i` (the application checks with the owner first).
    pub fn send_on(&mut self, i: usize, p: i32) -> u32 {
        self.engine.txn_check_send().expect("send allowed");
        let id = self.next_id;
        self.next_id += 1;
        let record = Record {
            id,
            results: Rc::clone(&self.results),
        };
        let now = self.now;
        self.eng(i).append(
            now,
            &Rig::tp(p),
            1_700_000_000_000,
            None,
            Some(&id.to_le_bytes()),
            &[],
            record,
        );
        id
    }

    pub fn result(&self, id: u32) -> Option<Result<RecordMetadata, ProduceError>> {
        self.results.borrow().get(&id).cloned()
    }

    /// The (producer id, epoch) each InitProducerId request named, in order.
    pub fn init_producer_id_requests(&self) -> Vec<(i64, i16)> {
        self.log
            .iter()
            .filter(|s| s.api == ApiKey::InitProducerId)
            .map(|s| {
                let r = InitProducerIdRequest::decode(&mut s.body.clone(), s.version).unwrap();
                (r.producer_id.0, r.producer_epoch)
            })
            .collect()
    }

    /// The (key type, key) each FindCoordinator request asked for, in order.
    pub fn find_coordinator_requests(&self) -> Vec<(i8, String)> {
        self.log
            .iter()
            .filter(|s| s.api == ApiKey::FindCoordinator)
            .map(|s| {
                let r = FindCoordinatorRequest::decode(&mut s.body.clone(), s.version).unwrap();
                (r.key_type, r.key.to_string())
            })
            .collect()
    }

    /// The partitions each AddPartitionsToTxn request named, in order.
    pub fn add_partitions_requests(&self) -> Vec<Vec<i32>> {
        self.log
            .iter()
            .filter(|s| s.api == ApiKey::AddPartitionsToTxn)
            .map(|s| {
                let r = AddPartitionsToTxnRequest::decode(&mut s.body.clone(), s.version).unwrap();
                r.v3_and_below_topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().copied())
                    .collect()
            })
            .collect()
    }

    pub fn count(&self, api: ApiKey) -> usize {
        self.log.iter().filter(|s| s.api == api).count()
    }

    /// One poll of every engine; actions carried out (transactional ones routed as a driver
    /// does); answers produced for everything written.
    pub fn step(&mut self) {
        let now = self.now;
        for i in 0..self.engines() {
            self.eng(i).poll(now);
        }
        loop {
            let mut any = false;
            for i in 0..self.engines() {
                let actions: Vec<Action> = self.eng(i).take_actions().collect();
                let txn: Vec<TxnAction> = self.eng(i).take_txn_actions();
                any |= !actions.is_empty() || !txn.is_empty();
                for action in actions {
                    match action {
                        Action::Connect {
                            node, generation, ..
                        } => {
                            self.generations.insert(i, generation);
                            self.eng(i).on_connected(now, node, generation)
                        }
                        Action::Write {
                            node,
                            generation,
                            frame,
                        } => self.on_write(i, node, generation, frame.to_bytes()),
                        Action::Disconnect { .. } => {}
                        Action::ProducerIdAssigned(_) | Action::RequestEpochBump { .. } => {
                            panic!("a transactional engine asked for an idempotent identity")
                        }
                        Action::TopicMetadata { .. } => {}
                    }
                }
                for action in txn {
                    self.route(i, action);
                }
            }
            if !any {
                break;
            }
            for i in 0..self.engines() {
                self.eng(i).poll(now);
            }
        }
        for i in 0..self.engines() {
            self.eng(i).assert_invariants();
        }
    }

    /// The driver's routing (`engine/transaction.rs`): engine 0 owns the transaction manager.
    pub fn route(&mut self, from: usize, action: TxnAction) {
        let n = self.engines();
        match action {
            TxnAction::AddPartitions { partitions } => self.engine.txn_add_partitions(&partitions),
            TxnAction::PartitionsAdded { partitions } => {
                let transaction_v2 = self.engine.txn_transaction_v2();
                for i in 0..n {
                    self.eng(i).txn_set_transaction_v2(transaction_v2);
                    self.eng(i).txn_partitions_added(&partitions);
                }
            }
            TxnAction::ProduceFailed {
                error,
                needs_bump,
                fatal,
            } => {
                self.produce_failed.push((from, fatal));
                self.engine.txn_produce_failed(&error, needs_bump, fatal)
            }
            TxnAction::Abortable { error } => {
                for i in 0..n {
                    self.eng(i).txn_abortable(error.clone());
                }
            }
            TxnAction::Flush { round, abort } => {
                self.flush = Some((round, vec![false; n]));
                for i in 0..n {
                    self.eng(i).txn_flush(round, abort);
                }
            }
            TxnAction::Flushed { round } => {
                if let Some((r, done)) = &mut self.flush {
                    if *r == round {
                        done[from] = true;
                        if done.iter().all(|d| *d) {
                            self.flush = None;
                            self.engine.txn_all_flushed(round);
                        }
                    }
                }
            }
            TxnAction::Ended => {
                for i in 0..n {
                    self.eng(i).txn_ended();
                }
            }
            TxnAction::IdentityReplaced { to, .. } => {
                for i in 0..n {
                    self.eng(i).on_identity(to);
                }
            }
            TxnAction::Fatal { error } => {
                for i in 0..n {
                    self.eng(i).txn_fatal(error.clone());
                }
            }
            TxnAction::Completed { handle } => self.completed.push(handle),
        }
    }

    pub fn on_write(&mut self, from: usize, node: i32, generation: u64, frame: Bytes) {
        let mut buf = frame.slice(4..);
        let api = ApiKey::try_from((&buf[..2]).get_i16()).expect("known api");
        let version = (&buf[2..4]).get_i16();
        let header = RequestHeader::decode(&mut buf, api.request_header_version(version))
            .expect("request header");
        let seen = Seen {
            api,
            version,
            correlation_id: header.correlation_id,
            body: buf,
            at: self.now,
        };
        self.log.push(seen.clone());
        if self.held_apis.contains(&api) {
            self.held.push((from, node, generation, seen));
            return;
        }
        let answer = self.answer(from, &seen);
        let now = self.now;
        self.eng(from).on_frame(now, node, generation, answer);
    }

    /// The broker acts on every held request of `api` (its state moves) but its answers are
    /// lost, and engine `from`'s connection drops.
    pub fn lose_held(&mut self, api: ApiKey, from: usize) {
        self.held_apis.retain(|a| *a != api);
        for (i, _, _, seen) in std::mem::take(&mut self.held) {
            assert_eq!(seen.api, api);
            self.answer(i, &seen);
            self.lost += 1;
        }
        let generation = self.generations[&from];
        let now = self.now;
        self.eng(from).on_disconnected(now, 1, generation);
        self.step();
    }

    /// The versions of every request of `api` written, in order.
    pub fn versions(&self, api: ApiKey) -> Vec<i16> {
        self.log
            .iter()
            .filter(|s| s.api == api)
            .map(|s| s.version)
            .collect()
    }

    pub fn release(&mut self, api: ApiKey) {
        self.held_apis.retain(|a| *a != api);
        let held = std::mem::take(&mut self.held);
        for (from, node, generation, seen) in held {
            if seen.api == api {
                let answer = self.answer(from, &seen);
                let now = self.now;
                self.eng(from).on_frame(now, node, generation, answer);
            } else {
                self.held.push((from, node, generation, seen));
            }
        }
        self.step();
    }

    pub fn injected(&mut self, api: ApiKey) -> i16 {
        self.inject
            .get_mut(&api)
            .and_then(VecDeque::pop_front)
            .unwrap_or(code::NONE)
    }

    /// The broker's answer to `seen`, written by engine `from`.
    pub fn answer(&mut self, from: usize, seen: &Seen) -> Bytes {
        let version = seen.version;
        let mut body = seen.body.clone();
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(seen.correlation_id)
            .encode(&mut out, seen.api.response_header_version(version))
            .expect("response header");
        let error = self.injected(seen.api);
        let str = |s: &str| StrBytes::from_string(s.to_string());
        match seen.api {
            ApiKey::ApiVersions => {
                let v2 = self.tv2 || self.tv2_versions_only;
                let (produce, end_txn, offsets) = if v2 { (12, 5, 5) } else { (11, 3, 3) };
                let keys = [
                    (0, 3, produce),
                    (3, 1, 12),
                    (10, 0, 3),
                    (18, 0, 3),
                    (22, 0, 4),
                    (24, 0, 3),
                    (25, 0, 3),
                    (26, 0, end_txn),
                    (28, 0, offsets),
                ]
                .into_iter()
                .filter(|(k, ..)| *k != 0 || !self.strip_produce_for.contains(&from))
                .map(|(k, min, max)| {
                    let max = ApiKey::try_from(k)
                        .ok()
                        .and_then(|api| self.max_versions.get(&api))
                        .map_or(max, |cap| max.min(*cap));
                    ApiVersion::default()
                        .with_api_key(k)
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect();
                let mut r = ApiVersionsResponse::default().with_api_keys(keys);
                if self.tv2 {
                    r = r
                        .with_finalized_features_epoch(1)
                        .with_finalized_features(vec![FinalizedFeatureKey::default()
                            .with_name(str("transaction.version"))
                            .with_max_version_level(2)
                            .with_min_version_level(2)]);
                }
                r.encode(&mut out, version)
            }
            ApiKey::Metadata => {
                let partitions = (0..3)
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
                        .with_host(str("broker"))
                        .with_port(9092)])
                    .with_topics(vec![MetadataResponseTopic::default()
                        .with_name(Some(TopicName(str(TOPIC))))
                        .with_partitions(partitions)])
                    .encode(&mut out, version)
            }
            ApiKey::FindCoordinator => {
                let mut r = FindCoordinatorResponse::default().with_error_code(error);
                if error == code::NONE {
                    r = r
                        .with_node_id(BrokerId(1))
                        .with_host(str("broker"))
                        .with_port(9092);
                }
                r.encode(&mut out, version)
            }
            ApiKey::InitProducerId => {
                let request = InitProducerIdRequest::decode(&mut body, version).expect("init");
                assert_eq!(request.transaction_timeout_ms, 60_000);
                assert_eq!(
                    request.transactional_id.as_ref().map(|t| t.0.to_string()),
                    Some("tx-1".to_string())
                );
                let mut r = InitProducerIdResponse::default().with_error_code(error);
                if error == code::NONE {
                    if request.producer_id.0 >= 0 {
                        assert_eq!(
                            (request.producer_id.0, request.producer_epoch),
                            (7, self.epoch),
                            "a bump names the current identity"
                        );
                    }
                    if let Some((producer_id, epoch)) = self.init_answer.take() {
                        r = r
                            .with_producer_id(ProducerId(producer_id))
                            .with_producer_epoch(epoch);
                    } else {
                        self.epoch += 1;
                        r = r
                            .with_producer_id(ProducerId(7))
                            .with_producer_epoch(self.epoch);
                    }
                } else {
                    r = r.with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
                }
                r.encode(&mut out, version)
            }
            ApiKey::AddPartitionsToTxn => {
                let request =
                    AddPartitionsToTxnRequest::decode(&mut body, version).expect("add partitions");
                assert_eq!(request.v3_and_below_producer_epoch, self.epoch);
                let topics = request
                    .v3_and_below_topics
                    .iter()
                    .map(|t| {
                        AddPartitionsToTxnTopicResult::default()
                            .with_name(t.name.clone())
                            .with_results_by_partition(
                                t.partitions
                                    .iter()
                                    .map(|&p| {
                                        AddPartitionsToTxnPartitionResult::default()
                                            .with_partition_index(p)
                                            .with_partition_error_code(error)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                AddPartitionsToTxnResponse::default()
                    .with_results_by_topic_v3_and_below(topics)
                    .encode(&mut out, version)
            }
            ApiKey::AddOffsetsToTxn => AddOffsetsToTxnResponse::default()
                .with_error_code(error)
                .encode(&mut out, version),
            ApiKey::TxnOffsetCommit => {
                let request =
                    TxnOffsetCommitRequest::decode(&mut body, version).expect("offset commit");
                let topics = request
                    .topics
                    .iter()
                    .map(|t| {
                        TxnOffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        TxnOffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(error)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                TxnOffsetCommitResponse::default()
                    .with_topics(topics)
                    .encode(&mut out, version)
            }
            ApiKey::EndTxn => {
                let request = EndTxnRequest::decode(&mut body, version).expect("end txn");
                let mut r = EndTxnResponse::default().with_error_code(error);
                if version >= 5 && error == code::NONE {
                    if self.ended_epoch == Some(request.producer_epoch) {
                        // A retry of the EndTxn that already ended this epoch.
                        r = r
                            .with_producer_id(ProducerId(7))
                            .with_producer_epoch(self.epoch);
                    } else {
                        assert_eq!(request.producer_epoch, self.epoch);
                        self.ended_epoch = Some(self.epoch);
                        let (producer_id, epoch) =
                            self.end_txn_answer.take().unwrap_or((7, self.epoch + 1));
                        self.epoch = epoch;
                        r = r
                            .with_producer_id(ProducerId(producer_id))
                            .with_producer_epoch(epoch);
                    }
                } else {
                    assert_eq!(request.producer_epoch, self.epoch);
                }
                r.encode(&mut out, version)
            }
            ApiKey::Produce => {
                let request = ProduceRequest::decode(&mut body, version).expect("produce");
                let responses = request
                    .topic_data
                    .iter()
                    .map(|t| {
                        let partitions = t
                            .partition_data
                            .iter()
                            .map(|p| {
                                let records = p.records.as_ref().expect("records");
                                let attributes = i16::from_be_bytes([records[21], records[22]]);
                                let count = i32::from_be_bytes(records[57..61].try_into().unwrap());
                                self.produce_batches.push((p.index, attributes & 0x10 != 0));
                                self.produce_stamps.push((
                                    p.index,
                                    i64::from_be_bytes(records[43..51].try_into().unwrap()),
                                    i16::from_be_bytes(records[51..53].try_into().unwrap()),
                                    i32::from_be_bytes(records[53..57].try_into().unwrap()),
                                    version,
                                ));
                                let mut r = PartitionProduceResponse::default().with_index(p.index);
                                if error == code::NONE {
                                    let offset = &mut self.next_offset[p.index as usize];
                                    r = r.with_base_offset(*offset);
                                    *offset += i64::from(count);
                                } else {
                                    r = r.with_error_code(error).with_base_offset(-1);
                                }
                                r.with_log_append_time_ms(-1)
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
        out.freeze().slice(0..)
    }

    /// Engine `i`'s connection drops, and the broker it reconnects to answers ApiVersions
    /// without Produce: the engine cannot send its batches and turns fatal on its own
    /// (`connections.rs`, Java's UnsupportedVersionException).
    pub fn lose_produce_support(&mut self, i: usize) {
        self.strip_produce_for.push(i);
        let generation = self.generations[&i];
        let now = self.now;
        self.eng(i).on_disconnected(now, 1, generation);
    }

    /// Runs the clock forward, polling, until `done` holds or `limit` passes.
    pub fn run_until(&mut self, limit: u64, mut done: impl FnMut(&mut Rig) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            self.step();
            if done(self) {
                return true;
            }
            if self.now >= end {
                return false;
            }
            let now = self.now;
            let next = (0..self.engines())
                .filter_map(|i| self.eng(i).next_wakeup(now))
                .min()
                .unwrap_or(self.now + 10 * MS);
            self.now = next.min(end).max(self.now + 1);
        }
    }

    /// Waits for a call's result (30 s of virtual time at most).
    pub fn wait(&mut self, handle: TxnHandle) -> Result<(), TransactionError> {
        let mut result = None;
        self.run_until(30_000 * MS, |rig| {
            result = rig.engine.txn_result(handle);
            result.is_some()
        });
        result.expect("the call completed")
    }
}
