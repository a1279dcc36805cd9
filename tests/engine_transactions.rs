//! The transactional engine against a scripted broker: every request the engine writes is
//! decoded and answered with real Kafka bytes by a small script (one broker, node 1, which is
//! also the coordinator), so each transactional handler is exercised on the wire without a
//! coordinator implementation. Errors are injected per API; answers of one API can be held.
//! The engine's transactional actions are looped back to the same engine, as a one-engine
//! driver does (`engine/transaction.rs`).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey,
    ApiVersionsResponse, BrokerId, EndTxnRequest, EndTxnResponse, FindCoordinatorResponse,
    InitProducerIdRequest, InitProducerIdResponse, MetadataResponse, ProduceRequest,
    ProduceResponse, ProducerId, RequestHeader, ResponseHeader, TopicName, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use kacrab::engine::{
    Action, Delivery, Engine, EngineConfig, GroupMetadata, OffsetAndMetadata, TopicPartition,
    TransactionState, TxnAction, TxnHandle,
};
use kacrab::protocol::error_code::code;
use kacrab::{ProduceError, ProducerConfig, RecordMetadata, TransactionError};

const TOPIC: &str = "t";
const MS: u64 = 1_000;

type Results = Rc<RefCell<HashMap<u32, Result<RecordMetadata, ProduceError>>>>;

struct Record {
    id: u32,
    results: Results,
}

impl Delivery for Record {
    fn complete(self, result: Result<RecordMetadata, ProduceError>) {
        let previous = self.results.borrow_mut().insert(self.id, result);
        assert!(previous.is_none(), "record {} completed twice", self.id);
    }
}

/// One decoded request.
#[derive(Debug, Clone)]
struct Seen {
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: Bytes,
    at: u64,
}

struct Rig {
    /// The owner (engine 0), with the transaction manager.
    engine: Engine<Record>,
    /// Participants (engines 1..), as other shards of the same producer.
    others: Vec<Engine<Record>>,
    /// The flush round in progress and which engines reported it.
    flush: Option<(u64, Vec<bool>)>,
    now: u64,
    results: Results,
    next_id: u32,
    /// Every request written, in order.
    log: Vec<Seen>,
    /// Injected error codes, consumed one per request of the API.
    inject: HashMap<ApiKey, VecDeque<i16>>,
    /// APIs whose answers are held until released.
    held_apis: Vec<ApiKey>,
    held: Vec<(usize, i32, u64, Seen)>,
    /// The scripted coordinator's epoch for the transactional id.
    epoch: i16,
    next_offset: Vec<i64>,
    /// Produce requests answered, per partition, with the transactional bit seen.
    produce_batches: Vec<(i32, bool)>,
    /// Flush rounds each (the only) participant reported.
    completed: Vec<TxnHandle>,
}

fn config(linger: Duration) -> EngineConfig {
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
    fn new(linger: Duration) -> Rig {
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
            next_offset: vec![0; 3],
            produce_batches: Vec::new(),
            completed: Vec::new(),
        }
    }

    /// A rig after a successful `init_transactions`, with `participants` more engines.
    fn ready_with(linger: Duration, participants: usize) -> Rig {
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

    fn engines(&self) -> usize {
        1 + self.others.len()
    }

    fn eng(&mut self, i: usize) -> &mut Engine<Record> {
        if i == 0 {
            &mut self.engine
        } else {
            &mut self.others[i - 1]
        }
    }

    /// A rig after a successful `init_transactions`.
    fn ready(linger: Duration) -> Rig {
        let mut rig = Rig::new(linger);
        let handle = rig.engine.init_transactions().expect("init");
        assert_eq!(rig.wait(handle), Ok(()));
        assert_eq!(rig.state(), TransactionState::Ready);
        rig
    }

    fn state(&self) -> TransactionState {
        self.engine.transaction_manager().expect("owner").state()
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new(TOPIC, p)
    }

    fn send(&mut self, p: i32) -> u32 {
        self.send_on(0, p)
    }

    /// Appends on engine `i` (the application checks with the owner first).
    fn send_on(&mut self, i: usize, p: i32) -> u32 {
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

    fn result(&self, id: u32) -> Option<Result<RecordMetadata, ProduceError>> {
        self.results.borrow().get(&id).cloned()
    }

    fn count(&self, api: ApiKey) -> usize {
        self.log.iter().filter(|s| s.api == api).count()
    }

    /// One poll of every engine; actions carried out (transactional ones routed as a driver
    /// does); answers produced for everything written.
    fn step(&mut self) {
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
                        } => self.eng(i).on_connected(now, node, generation),
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
    fn route(&mut self, from: usize, action: TxnAction) {
        let n = self.engines();
        match action {
            TxnAction::AddPartitions { partitions } => self.engine.txn_add_partitions(&partitions),
            TxnAction::PartitionsAdded { partitions } => {
                for i in 0..n {
                    self.eng(i).txn_partitions_added(&partitions);
                }
            }
            TxnAction::ProduceFailed {
                error,
                needs_bump,
                fatal,
            } => self.engine.txn_produce_failed(&error, needs_bump, fatal),
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

    fn on_write(&mut self, from: usize, node: i32, generation: u64, frame: Bytes) {
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
        let answer = self.answer(&seen);
        let now = self.now;
        self.eng(from).on_frame(now, node, generation, answer);
    }

    fn release(&mut self, api: ApiKey) {
        self.held_apis.retain(|a| *a != api);
        let held = std::mem::take(&mut self.held);
        for (from, node, generation, seen) in held {
            if seen.api == api {
                let answer = self.answer(&seen);
                let now = self.now;
                self.eng(from).on_frame(now, node, generation, answer);
            } else {
                self.held.push((from, node, generation, seen));
            }
        }
        self.step();
    }

    fn injected(&mut self, api: ApiKey) -> i16 {
        self.inject
            .get_mut(&api)
            .and_then(VecDeque::pop_front)
            .unwrap_or(code::NONE)
    }

    fn answer(&mut self, seen: &Seen) -> Bytes {
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
                let keys = [
                    (0, 3, 11),
                    (3, 1, 12),
                    (10, 0, 3),
                    (18, 0, 3),
                    (22, 0, 4),
                    (24, 0, 3),
                    (25, 0, 3),
                    (26, 0, 3),
                    (28, 0, 3),
                ]
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
                    self.epoch += 1;
                    r = r
                        .with_producer_id(ProducerId(7))
                        .with_producer_epoch(self.epoch);
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
                assert_eq!(request.producer_epoch, self.epoch);
                EndTxnResponse::default()
                    .with_error_code(error)
                    .encode(&mut out, version)
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

    /// Runs the clock forward, polling, until `done` holds or `limit` passes.
    fn run_until(&mut self, limit: u64, mut done: impl FnMut(&mut Rig) -> bool) -> bool {
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
    fn wait(&mut self, handle: TxnHandle) -> Result<(), TransactionError> {
        let mut result = None;
        self.run_until(30_000 * MS, |rig| {
            result = rig.engine.txn_result(handle);
            result.is_some()
        });
        result.expect("the call completed")
    }
}

fn rejected_code(result: &Option<Result<RecordMetadata, ProduceError>>) -> Option<i16> {
    match result {
        Some(Err(ProduceError::Rejected { code, .. })) => Some(*code),
        _ => None,
    }
}

#[test]
fn init_transactions_finds_the_coordinator_and_sends_the_transaction_timeout() {
    let rig = Rig::ready(Duration::ZERO);
    assert_eq!(rig.count(ApiKey::FindCoordinator), 1);
    assert_eq!(rig.count(ApiKey::InitProducerId), 1);
    assert_eq!(rig.engine.identity().producer_id, 7);
    assert_eq!(rig.engine.identity().epoch, 0);
    // The FindCoordinator key is the transactional id, key type 1.
    let find = rig
        .log
        .iter()
        .find(|s| s.api == ApiKey::FindCoordinator)
        .unwrap()
        .clone();
    let request = kafka_protocol::messages::FindCoordinatorRequest::decode(
        &mut find.body.clone(),
        find.version,
    )
    .unwrap();
    assert_eq!(request.key.as_str(), "tx-1");
    assert_eq!(request.key_type, 1);
}

#[test]
fn a_partitions_first_batch_waits_for_add_partitions_to_txn() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.held_apis.push(ApiKey::AddPartitionsToTxn);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    let b = rig.send(1);
    rig.run_until(500 * MS, |_| false);
    assert_eq!(rig.count(ApiKey::Produce), 0, "no batch before the add");
    assert_eq!(
        rig.count(ApiKey::AddPartitionsToTxn),
        1,
        "one request for both"
    );
    rig.release(ApiKey::AddPartitionsToTxn);
    assert!(rig.run_until(1_000 * MS, |r| r.result(a).is_some()
        && r.result(b).is_some()));
    assert!(rig.result(a).unwrap().is_ok() && rig.result(b).unwrap().is_ok());
    assert!(
        rig.produce_batches
            .iter()
            .all(|(_, transactional)| *transactional),
        "every batch carries the transactional bit"
    );
    let add = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::AddPartitionsToTxn)
        .unwrap();
    let produce = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::Produce)
        .unwrap();
    assert!(add < produce);
}

#[test]
fn concurrent_transactions_on_add_partitions_is_retried_after_the_short_backoff() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.inject.insert(
        ApiKey::AddPartitionsToTxn,
        VecDeque::from([code::CONCURRENT_TRANSACTIONS; 2]),
    );
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    assert!(rig.result(a).unwrap().is_ok());
    let adds: Vec<u64> = rig
        .log
        .iter()
        .filter(|s| s.api == ApiKey::AddPartitionsToTxn)
        .map(|s| s.at)
        .collect();
    assert_eq!(adds.len(), 3);
    // Nothing was in the transaction yet: 20 ms, not retry.backoff.ms (100 ms).
    assert_eq!(adds[1] - adds[0], 20 * MS);
    assert_eq!(adds[2] - adds[1], 20 * MS);
}

#[test]
fn not_coordinator_on_end_txn_finds_the_coordinator_again_then_retries() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(100 * MS, |r| r.result(a).is_some());
    rig.inject
        .insert(ApiKey::EndTxn, VecDeque::from([code::NOT_COORDINATOR]));
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    let apis: Vec<ApiKey> = rig
        .log
        .iter()
        .map(|s| s.api)
        .filter(|a| matches!(a, ApiKey::EndTxn | ApiKey::FindCoordinator))
        .collect();
    assert_eq!(
        apis,
        vec![
            ApiKey::FindCoordinator,
            ApiKey::EndTxn,
            ApiKey::FindCoordinator,
            ApiKey::EndTxn
        ]
    );
    assert_eq!(rig.state(), TransactionState::Ready);
}

#[test]
fn commit_flushes_batches_still_in_linger_before_end_txn() {
    let mut rig = Rig::ready(Duration::from_secs(60));
    rig.engine.begin_transaction().unwrap();
    let ids: Vec<u32> = (0..3).map(|p| rig.send(p)).collect();
    rig.run_until(1_000 * MS, |_| false);
    assert_eq!(rig.count(ApiKey::Produce), 0, "linger holds the batches");
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    for id in ids {
        assert!(rig.result(id).unwrap().is_ok());
    }
    let last_produce = rig
        .log
        .iter()
        .rposition(|s| s.api == ApiKey::Produce)
        .unwrap();
    let end = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::EndTxn)
        .unwrap();
    assert!(last_produce < end, "EndTxn after every batch");
    assert!(rig.now < 60_000 * MS, "commit did not wait for linger");
}

#[test]
fn commit_of_an_empty_transaction_sends_no_end_txn() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.count(ApiKey::EndTxn), 0);
    assert_eq!(rig.state(), TransactionState::Ready);
}

#[test]
fn abort_fails_unsent_batches_and_sends_end_txn_abort() {
    let mut rig = Rig::ready(Duration::from_secs(60));
    rig.engine.begin_transaction().unwrap();
    // p0 is added to the transaction, but its batch lingers; p1 and p2 are never added.
    let lingering = rig.send(0);
    rig.run_until(500 * MS, |r| r.count(ApiKey::AddPartitionsToTxn) == 1);
    rig.run_until(500 * MS, |_| false);
    let never_added: Vec<u32> = (1..3).map(|p| rig.send(p)).collect();
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(
        rig.result(lingering),
        Some(Err(ProduceError::TransactionAborted))
    );
    for id in never_added {
        assert_eq!(rig.result(id), Some(Err(ProduceError::TransactionAborted)));
    }
    assert_eq!(rig.count(ApiKey::Produce), 0, "no aborted record was sent");
    assert_eq!(rig.count(ApiKey::AddPartitionsToTxn), 1);
    let end = rig
        .log
        .iter()
        .find(|s| s.api == ApiKey::EndTxn)
        .unwrap()
        .clone();
    let request = EndTxnRequest::decode(&mut end.body.clone(), end.version).unwrap();
    assert!(!request.committed);
    assert_eq!(rig.state(), TransactionState::Ready);
    // A clean abort bumps nothing.
    assert_eq!(rig.engine.identity().epoch, 0);
}

#[test]
fn abort_of_a_transaction_with_nothing_added_sends_no_end_txn() {
    let mut rig = Rig::ready(Duration::from_secs(60));
    rig.engine.begin_transaction().unwrap();
    let unsent: Vec<u32> = (0..3).map(|p| rig.send(p)).collect();
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    for id in unsent {
        assert_eq!(rig.result(id), Some(Err(ProduceError::TransactionAborted)));
    }
    assert_eq!(rig.count(ApiKey::EndTxn), 0);
    assert_eq!(rig.count(ApiKey::Produce), 0);
}

#[test]
fn producer_fenced_on_end_txn_is_fatal() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(100 * MS, |r| r.result(a).is_some());
    rig.inject
        .insert(ApiKey::EndTxn, VecDeque::from([code::PRODUCER_FENCED]));
    let handle = rig.engine.commit_transaction().unwrap();
    assert!(matches!(rig.wait(handle), Err(TransactionError::Fenced(_))));
    assert_eq!(rig.state(), TransactionState::FatalError);
    assert!(matches!(
        rig.engine.begin_transaction(),
        Err(TransactionError::Fenced(_))
    ));
    assert!(matches!(
        rig.engine.abort_transaction(),
        Err(TransactionError::Fenced(_))
    ));
    assert!(
        rig.engine.fatal_error().is_some(),
        "the data plane stops too"
    );
}

#[test]
fn invalid_producer_epoch_on_produce_is_abortable_and_abort_bumps_the_epoch() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    rig.inject.insert(
        ApiKey::Produce,
        VecDeque::from([code::INVALID_PRODUCER_EPOCH]),
    );
    let a = rig.send(0);
    rig.run_until(1_000 * MS, |r| r.result(a).is_some());
    assert_eq!(
        rejected_code(&rig.result(a)),
        Some(code::INVALID_PRODUCER_EPOCH)
    );
    // Abortable (KIP-588), and reported as the fencing it is: Java re-throws
    // InvalidProducerEpochException from commit and send.
    assert_eq!(rig.state(), TransactionState::AbortableError);
    assert!(matches!(
        rig.engine.commit_transaction(),
        Err(TransactionError::Fenced(_))
    ));
    assert!(matches!(
        rig.engine.txn_check_send(),
        Err(TransactionError::Fenced(_))
    ));
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    // EndTxn(abort), then InitProducerId with the current identity: epoch 0 → 1.
    let tail: Vec<ApiKey> = rig
        .log
        .iter()
        .map(|s| s.api)
        .filter(|a| matches!(a, ApiKey::EndTxn | ApiKey::InitProducerId))
        .collect();
    assert_eq!(
        tail,
        vec![
            ApiKey::InitProducerId,
            ApiKey::EndTxn,
            ApiKey::InitProducerId
        ]
    );
    assert_eq!(rig.engine.identity().epoch, 1);
    assert_eq!(rig.state(), TransactionState::Ready);
    // The next transaction runs under the new epoch from sequence 0.
    rig.engine.begin_transaction().unwrap();
    let b = rig.send(0);
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert!(rig.result(b).unwrap().is_ok());
    let slot = rig.engine.partition(&Rig::tp(0)).unwrap();
    assert_eq!(slot.entry.producer_id_and_epoch.epoch, 1);
    assert_eq!(slot.entry.next_sequence, 1);
}

#[test]
fn a_timed_out_commit_called_again_returns_the_same_handle_and_its_result() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(100 * MS, |r| r.result(a).is_some());
    rig.held_apis.push(ApiKey::EndTxn);
    let first = rig.engine.commit_transaction().unwrap();
    rig.run_until(500 * MS, |_| false);
    // The caller gave up waiting; the result is not there yet.
    assert_eq!(rig.engine.txn_result(first), None);
    assert!(matches!(
        rig.engine.abort_transaction(),
        Err(TransactionError::PendingOperation { .. })
    ));
    let again = rig.engine.commit_transaction().unwrap();
    assert_eq!(again, first);
    rig.release(ApiKey::EndTxn);
    assert_eq!(rig.wait(again), Ok(()));
    assert_eq!(rig.count(ApiKey::EndTxn), 1, "no second EndTxn");
}

#[test]
fn send_offsets_adds_the_group_then_commits_offsets_to_the_group_coordinator() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    rig.inject.insert(
        ApiKey::TxnOffsetCommit,
        VecDeque::from([code::COORDINATOR_LOAD_IN_PROGRESS]),
    );
    let mut offsets = BTreeMap::new();
    offsets.insert(TopicPartition::new("in", 0), OffsetAndMetadata::new(42));
    let mut group = GroupMetadata::new("g");
    group.generation_id = 3;
    group.member_id = "m".into();
    let handle = rig
        .engine
        .send_offsets_to_transaction(offsets, group)
        .unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.count(ApiKey::AddOffsetsToTxn), 1);
    assert_eq!(rig.count(ApiKey::TxnOffsetCommit), 2, "retried once");
    let commit = rig
        .log
        .iter()
        .find(|s| s.api == ApiKey::TxnOffsetCommit)
        .unwrap()
        .clone();
    let request = TxnOffsetCommitRequest::decode(&mut commit.body.clone(), commit.version).unwrap();
    assert_eq!(request.group_id.0.as_str(), "g");
    assert_eq!(request.generation_id, 3);
    assert_eq!(request.topics[0].partitions[0].committed_offset, 42);
    // The group coordinator was looked up with key type 0.
    let finds: Vec<i8> = rig
        .log
        .iter()
        .filter(|s| s.api == ApiKey::FindCoordinator)
        .map(|s| {
            kafka_protocol::messages::FindCoordinatorRequest::decode(&mut s.body.clone(), s.version)
                .unwrap()
                .key_type
        })
        .collect();
    assert_eq!(finds, vec![1, 0]);
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(
        rig.count(ApiKey::EndTxn),
        1,
        "offsets alone start the transaction"
    );
}

#[test]
fn add_partitions_topic_authorization_failure_is_abortable_and_fails_the_batches() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.inject.insert(
        ApiKey::AddPartitionsToTxn,
        VecDeque::from([code::TOPIC_AUTHORIZATION_FAILED]),
    );
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(1_000 * MS, |r| r.result(a).is_some());
    assert!(matches!(
        rig.result(a),
        Some(Err(ProduceError::TransactionAbortable(_)))
    ));
    assert_eq!(rig.state(), TransactionState::AbortableError);
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.count(ApiKey::Produce), 0);
    // Nothing was added: the abort needs no EndTxn.
    assert_eq!(rig.count(ApiKey::EndTxn), 0);
}

#[test]
fn transaction_calls_on_a_non_owner_or_in_wrong_states_are_typed_errors() {
    let mut rig = Rig::new(Duration::ZERO);
    assert!(matches!(
        rig.engine.begin_transaction(),
        Err(TransactionError::InvalidState {
            state: "UNINITIALIZED",
            ..
        })
    ));
    let mut other = config(Duration::ZERO);
    other.owns_identity = false;
    let mut participant: Engine<Record> = Engine::new(other);
    assert_eq!(
        participant.init_transactions(),
        Err(TransactionError::NotTransactional)
    );
    let handle = rig.engine.init_transactions().unwrap();
    assert_eq!(rig.engine.init_transactions().unwrap(), handle);
    assert_eq!(rig.wait(handle), Ok(()));
    assert!(matches!(
        rig.engine.init_transactions(),
        Err(TransactionError::InvalidState { state: "READY", .. })
    ));
    assert!(matches!(
        rig.engine.abort_transaction(),
        Err(TransactionError::InvalidState { .. })
    ));
}

#[test]
fn a_participant_engines_partitions_are_added_by_the_owner_and_end_txn_waits_for_its_flush() {
    let mut rig = Rig::ready_with(Duration::from_secs(60), 1);
    rig.held_apis.push(ApiKey::AddPartitionsToTxn);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send_on(0, 0);
    let b = rig.send_on(1, 1);
    rig.run_until(200 * MS, |_| false);
    // The participant asked the owner, which sent one AddPartitionsToTxn for both.
    assert_eq!(rig.count(ApiKey::AddPartitionsToTxn), 1);
    let add = rig
        .log
        .iter()
        .find(|s| s.api == ApiKey::AddPartitionsToTxn)
        .unwrap()
        .clone();
    let request = AddPartitionsToTxnRequest::decode(&mut add.body.clone(), add.version).unwrap();
    assert_eq!(request.v3_and_below_topics[0].partitions, vec![0, 1]);
    assert!(rig.others[0].txn_participant().requested.len() == 1);
    rig.release(ApiKey::AddPartitionsToTxn);
    assert_eq!(rig.others[0].txn_participant().added.len(), 1);
    // Both batches linger; the commit flushes both engines before EndTxn.
    assert_eq!(rig.count(ApiKey::Produce), 0);
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert!(rig.result(a).unwrap().is_ok());
    assert!(rig.result(b).unwrap().is_ok());
    let last_produce = rig
        .log
        .iter()
        .rposition(|s| s.api == ApiKey::Produce)
        .unwrap();
    let end = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::EndTxn)
        .unwrap();
    assert!(
        last_produce < end,
        "EndTxn after the participant's batch too"
    );
    assert!(
        rig.others[0].txn_participant().added.is_empty(),
        "Ended reached it"
    );
}

#[test]
fn a_participants_produce_error_makes_the_owner_abortable_and_the_abort_reaches_its_unsent_batches()
{
    let mut rig = Rig::ready_with(Duration::ZERO, 1);
    rig.engine.begin_transaction().unwrap();
    rig.inject
        .insert(ApiKey::Produce, VecDeque::from([code::INVALID_RECORD]));
    let b = rig.send_on(1, 1);
    rig.run_until(1_000 * MS, |r| r.result(b).is_some());
    assert_eq!(rejected_code(&rig.result(b)), Some(code::INVALID_RECORD));
    assert_eq!(rig.state(), TransactionState::AbortableError);
    assert!(matches!(
        rig.engine.commit_transaction(),
        Err(TransactionError::Abortable(_))
    ));
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    // The abort bumped the epoch on every engine.
    assert_eq!(rig.engine.identity().epoch, 1);
    assert_eq!(rig.others[0].identity().epoch, 1);
    assert_eq!(rig.state(), TransactionState::Ready);
    // The participant's partition is clean for the next transaction.
    rig.engine.begin_transaction().unwrap();
    let c = rig.send_on(1, 1);
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert!(rig.result(c).unwrap().is_ok());
    let slot = rig.others[0].partition(&Rig::tp(1)).unwrap();
    assert_eq!(slot.entry.producer_id_and_epoch.epoch, 1);
}

#[test]
fn abort_waits_for_a_batch_in_flight_before_end_txn() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    rig.held_apis.push(ApiKey::Produce);
    let in_flight = rig.send(0);
    rig.run_until(200 * MS, |r| r.count(ApiKey::Produce) == 1);
    let handle = rig.engine.abort_transaction().unwrap();
    rig.run_until(2_000 * MS, |_| false);
    assert_eq!(
        rig.count(ApiKey::EndTxn),
        0,
        "EndTxn waits for the batch on the wire"
    );
    assert_eq!(rig.engine.txn_result(handle), None);
    rig.release(ApiKey::Produce);
    assert_eq!(rig.wait(handle), Ok(()));
    // The stamped batch finished on its own (acked); the abort marker then hides it.
    assert!(rig.result(in_flight).unwrap().is_ok());
    let produce = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::Produce)
        .unwrap();
    let end = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::EndTxn)
        .unwrap();
    assert!(produce < end);
}

#[test]
fn transaction_abortable_on_end_txn_abort_is_fatal() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(200 * MS, |r| r.result(a).is_some());
    rig.inject.insert(
        ApiKey::EndTxn,
        VecDeque::from([code::TRANSACTION_ABORTABLE]),
    );
    let handle = rig.engine.abort_transaction().unwrap();
    assert!(matches!(rig.wait(handle), Err(TransactionError::Fatal(_))));
    assert_eq!(rig.state(), TransactionState::FatalError);
}

#[test]
fn invalid_producer_epoch_from_the_coordinator_is_fenced_not_abortable() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.inject.insert(
        ApiKey::AddPartitionsToTxn,
        VecDeque::from([code::INVALID_PRODUCER_EPOCH]),
    );
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(1_000 * MS, |r| r.result(a).is_some());
    assert_eq!(rig.state(), TransactionState::FatalError);
    assert!(matches!(
        rig.engine.transaction_manager().unwrap().last_error(),
        Some(TransactionError::Fenced(_))
    ));
    assert!(matches!(rig.result(a), Some(Err(ProduceError::Fatal(_)))));
    assert_eq!(rig.count(ApiKey::Produce), 0);
}
