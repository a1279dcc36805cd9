//! Kafka 4's transactions V2 (KIP-890 part 2) on the reference cluster's TCP face: what a
//! TV2 client negotiates (ApiVersions' `transaction.version` feature) and reads on the wire
//! (EndTxn v5's producer id and epoch, Produce v12's implicit add and its wait for markers,
//! AddPartitionsToTxn v5 batches). The rules themselves are tested on the sans-IO core in
//! `reference_broker_tv2.rs`.
#![cfg(feature = "testkit")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kacrab::testkit::batch::TestBatch;
use kacrab::testkit::broker::error_codes::*;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, EndTxnRequest, EndTxnResponse,
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
    RequestHeader, ResponseHeader, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// Sends one request on `stream` and decodes its answer.
fn call<R: Decodable>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    request: &impl Encodable,
) -> R {
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("tv2")))
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    stream.write_all(&frame).unwrap();
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).unwrap();
    let mut answer = vec![0u8; i32::from_be_bytes(length) as usize];
    stream.read_exact(&mut answer).unwrap();
    let mut answer = Bytes::from(answer);
    let header = ResponseHeader::decode(&mut answer, api.response_header_version(version)).unwrap();
    assert_eq!(header.correlation_id, 7);
    R::decode(&mut answer, version).unwrap()
}

fn connect(cluster: &ReferenceCluster, broker: i32) -> TcpStream {
    let stream = TcpStream::connect(cluster.broker_address(broker)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

fn max_version(response: &ApiVersionsResponse, api: ApiKey) -> i16 {
    response
        .api_keys
        .iter()
        .find(|k| k.api_key == api as i16)
        .map(|k| k.max_version)
        .unwrap()
}

// ApiVersionsResponse (KIP-584 features): `transaction.version` is supported at 0..=2 and
// finalized at the cluster's level with the finalized-features epoch; a cluster at level 0
// finalizes nothing but still advertises Produce v12, EndTxn v5 and TxnOffsetCommit v5, as
// Kafka 4.0 does (clients choose the TV2 versions from the finalized level).
#[test]
fn api_versions_advertise_the_finalized_transaction_version() {
    for level in [2, 0] {
        let rules = BrokerRules {
            transaction_version: level,
            ..BrokerRules::default()
        };
        let cluster = ReferenceCluster::start(1, rules);
        let mut stream = connect(&cluster, 1);
        let response: ApiVersionsResponse = call(
            &mut stream,
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("tv2"))
                .with_client_software_version(StrBytes::from_static_str("1")),
        );
        let supported = &response.supported_features[0];
        assert_eq!(
            (
                supported.name.as_str(),
                supported.min_version,
                supported.max_version
            ),
            ("transaction.version", 0, 2)
        );
        if level == 2 {
            let finalized = &response.finalized_features[0];
            assert_eq!(
                (
                    finalized.name.as_str(),
                    finalized.min_version_level,
                    finalized.max_version_level
                ),
                ("transaction.version", 2, 2)
            );
            assert!(response.finalized_features_epoch >= 0);
        } else {
            assert!(response.finalized_features.is_empty(), "level 0");
        }
        assert_eq!(max_version(&response, ApiKey::Produce), 12);
        assert_eq!(max_version(&response, ApiKey::EndTxn), 5);
        assert_eq!(max_version(&response, ApiKey::TxnOffsetCommit), 5);
    }
}

// ReplicaManager `maybeRetryOnConcurrentTransactions`: over TCP a Produce v12 that meets
// the previous transaction's markers still unwritten is held for the broker's short
// retry and, with the markers still held, answered CONCURRENT_TRANSACTIONS with nothing
// written; once the markers are out the same request is appended.
#[test]
fn tv2_produce_over_the_wire_waits_then_answers_concurrent_transactions() {
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("w", &[1, 1]);
    let (pid, epoch) = cluster.with_cluster(|c| {
        let init = c.init_producer_id(Some("c"), 60_000, -1, -1, 0);
        c.add_partitions_to_txn(
            1,
            "c",
            init.producer_id,
            init.producer_epoch,
            &[("w".to_string(), 0)],
            0,
        );
        c.hold_transaction_markers(true);
        let end = c.end_txn_at_version(1, 5, "c", init.producer_id, init.producer_epoch, false, 0);
        assert_eq!(end.error_code, NONE);
        (end.producer_id, end.producer_epoch)
    });
    let mut batch = TestBatch::idempotent(pid, epoch, 0, 1);
    batch.transactional = true;
    let request = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("c"))))
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("w")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(1)
                .with_records(Some(Bytes::from(batch.encode())))])]);
    let mut stream = connect(&cluster, 1);
    let busy: ProduceResponse = call(&mut stream, ApiKey::Produce, 12, &request);
    assert_eq!(
        busy.responses[0].partition_responses[0].error_code,
        CONCURRENT_TRANSACTIONS
    );
    assert!(cluster.with_cluster(|c| c.partition_log("w", 1).is_empty()));
    cluster.with_cluster(|c| c.release_transaction_markers(0));
    let written: ProduceResponse = call(&mut stream, ApiKey::Produce, 12, &request);
    assert_eq!(written.responses[0].partition_responses[0].error_code, NONE);
}

// AddPartitionsToTxn v5 (what brokers send the coordinator): a batch of transactions,
// one result each, `verifyOnly` checking and the other adding.
#[test]
fn add_partitions_to_txn_v5_answers_each_transaction_of_the_batch() {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("w", &[1, 1]);
    let init = cluster.with_cluster(|c| c.init_producer_id(Some("a"), 60_000, -1, -1, 0));
    let transaction = |verify_only| {
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_static_str("a")))
            .with_producer_id(ProducerId(init.producer_id))
            .with_producer_epoch(init.producer_epoch)
            .with_verify_only(verify_only)
            .with_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("w")))
                .with_partitions(vec![1])])
    };
    let mut stream = connect(&cluster, 1);
    let codes = |response: AddPartitionsToTxnResponse| -> Vec<i16> {
        response
            .results_by_transaction
            .iter()
            .map(|r| r.topic_results[0].results_by_partition[0].partition_error_code)
            .collect()
    };
    let verify: AddPartitionsToTxnResponse = call(
        &mut stream,
        ApiKey::AddPartitionsToTxn,
        5,
        &AddPartitionsToTxnRequest::default().with_transactions(vec![transaction(true)]),
    );
    assert_eq!(codes(verify), vec![TRANSACTION_ABORTABLE]);
    let add_then_verify: AddPartitionsToTxnResponse = call(
        &mut stream,
        ApiKey::AddPartitionsToTxn,
        5,
        &AddPartitionsToTxnRequest::default()
            .with_transactions(vec![transaction(false), transaction(true)]),
    );
    assert_eq!(codes(add_then_verify), vec![NONE, NONE]);
}

// The TV2 round trip on the wire: InitProducerId, Produce v12 of a partition never added,
// EndTxn v5 whose answer carries the producer id and the bumped epoch.
#[test]
fn tv2_transaction_over_the_wire_answers_the_bumped_epoch() {
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("w", &[1]);
    let mut stream = connect(&cluster, 1);
    let txn = || Some(TransactionalId(StrBytes::from_static_str("wire-txn")));
    let init: InitProducerIdResponse = call(
        &mut stream,
        ApiKey::InitProducerId,
        5,
        &InitProducerIdRequest::default()
            .with_transactional_id(txn())
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    );
    assert_eq!(init.error_code, NONE);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    let mut batch = TestBatch::idempotent(pid, epoch, 0, 2);
    batch.transactional = true;
    let produce: ProduceResponse = call(
        &mut stream,
        ApiKey::Produce,
        12,
        &ProduceRequest::default()
            .with_transactional_id(txn())
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("w")))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(Bytes::from(batch.encode())))])]),
    );
    assert_eq!(produce.responses[0].partition_responses[0].error_code, NONE);
    let end: EndTxnResponse = call(
        &mut stream,
        ApiKey::EndTxn,
        5,
        &EndTxnRequest::default()
            .with_transactional_id(txn().unwrap())
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(true),
    );
    assert_eq!(
        (end.error_code, end.producer_id.0, end.producer_epoch),
        (NONE, pid, epoch + 1)
    );
    let marker_epoch = cluster.with_cluster(|c| {
        c.partition_log("w", 0)
            .iter()
            .find(|b| b.control)
            .map(|b| b.producer_epoch)
    });
    assert_eq!(marker_epoch, Some(epoch + 1));
}
