//! Every advertised version of every API against a raw client: each is answered, decodes and
//! carries the request's correlation id; coordinator APIs older than PRODUCER_FENCED (KIP-588)
//! answer a fenced epoch with INVALID_PRODUCER_EPOCH.

use kacrab::testkit::broker::error_codes::INVALID_PRODUCER_ID_MAPPING;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kafka_protocol::messages::{ApiKey, InitProducerIdResponse, ProduceResponse, TopicName};
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::{first_partition, init_request, produce_request, RawClient};

/// The transaction and group-offset APIs at every advertised version, for a transactional id
/// the coordinator does not know: each decodes and answers INVALID_PRODUCER_ID_MAPPING (or, for
/// OffsetFetch, no committed offset).
fn every_version_of_the_transaction_apis_is_answered(client: &mut RawClient, topic: &'static str) {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{
        AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, GroupId, OffsetFetchRequest,
        OffsetFetchResponse, ProducerId, TransactionalId, TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
    };
    let name = || TopicName(StrBytes::from_static_str(topic));
    let txn = || TransactionalId(StrBytes::from_static_str("unknown-txn"));
    let group = || GroupId(StrBytes::from_static_str("group"));
    for version in 0..=3 {
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn())
            .with_v3_and_below_producer_id(ProducerId(1))
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(name())
                .with_partitions(vec![0])]);
        let sent = client.send(ApiKey::AddPartitionsToTxn, version, &request);
        let (id, mut body) = client.receive(ApiKey::AddPartitionsToTxn, version).unwrap();
        let response = AddPartitionsToTxnResponse::decode(&mut body, version).unwrap();
        let code =
            response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
        assert_eq!(
            (id, code),
            (sent, INVALID_PRODUCER_ID_MAPPING),
            "AddPartitionsToTxn v{version}"
        );
    }
    for version in 0..=4 {
        let request = AddOffsetsToTxnRequest::default()
            .with_transactional_id(txn())
            .with_producer_id(ProducerId(1))
            .with_group_id(group());
        let sent = client.send(ApiKey::AddOffsetsToTxn, version, &request);
        let (id, mut body) = client.receive(ApiKey::AddOffsetsToTxn, version).unwrap();
        let response = AddOffsetsToTxnResponse::decode(&mut body, version).unwrap();
        assert_eq!(
            (id, response.error_code),
            (sent, INVALID_PRODUCER_ID_MAPPING),
            "AddOffsetsToTxn v{version}"
        );
    }
    for version in 0..=5 {
        let request = EndTxnRequest::default()
            .with_transactional_id(txn())
            .with_producer_id(ProducerId(1))
            .with_committed(true);
        let sent = client.send(ApiKey::EndTxn, version, &request);
        let (id, mut body) = client.receive(ApiKey::EndTxn, version).unwrap();
        let response = EndTxnResponse::decode(&mut body, version).unwrap();
        assert_eq!(
            (id, response.error_code),
            (sent, INVALID_PRODUCER_ID_MAPPING),
            "EndTxn v{version}"
        );
    }
    for version in 0..=5 {
        let request = TxnOffsetCommitRequest::default()
            .with_transactional_id(txn())
            .with_group_id(group())
            .with_producer_id(ProducerId(1))
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(name())
                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(5)])]);
        let sent = client.send(ApiKey::TxnOffsetCommit, version, &request);
        let (id, mut body) = client.receive(ApiKey::TxnOffsetCommit, version).unwrap();
        let response = TxnOffsetCommitResponse::decode(&mut body, version).unwrap();
        assert_eq!(
            (id, response.topics[0].partitions[0].error_code),
            (sent, INVALID_PRODUCER_ID_MAPPING),
            "TxnOffsetCommit v{version}"
        );
    }
    for version in 1..=7 {
        let request = OffsetFetchRequest::default()
            .with_group_id(group())
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(name())
                .with_partition_indexes(vec![0])]));
        let sent = client.send(ApiKey::OffsetFetch, version, &request);
        let (id, mut body) = client.receive(ApiKey::OffsetFetch, version).unwrap();
        let response = OffsetFetchResponse::decode(&mut body, version).unwrap();
        let partition = &response.topics[0].partitions[0];
        assert_eq!(
            (
                id,
                response.error_code,
                partition.error_code,
                partition.committed_offset
            ),
            (sent, 0, 0, -1),
            "OffsetFetch v{version}"
        );
    }
}

// Every advertised version of every API is answered, decodes, and carries the request's
// correlation id: the encoder refuses fields a version lacks, so this catches a handler that
// sets one (the connection would close instead).
#[test]
fn every_advertised_version_of_every_api_is_answered() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{
        ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse,
        FindCoordinatorRequest, FindCoordinatorResponse, ListOffsetsRequest, ListOffsetsResponse,
        MetadataRequest, MetadataResponse,
    };
    let topic = "versions";
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(topic, &[1]);
    let topic_id = cluster.with_cluster(|c| c.topic_metadata(topic).unwrap().topic_id);
    let mut client = RawClient::connect(&cluster, 1);
    let pid = client.init_producer_id();
    let name = || TopicName(StrBytes::from_static_str(topic));

    for version in 0..=3 {
        let request = if version >= 3 {
            ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("raw"))
                .with_client_software_version(StrBytes::from_static_str("1"))
        } else {
            ApiVersionsRequest::default()
        };
        let sent = client.send(ApiKey::ApiVersions, version, &request);
        let (id, mut body) = client.receive(ApiKey::ApiVersions, version).unwrap();
        let response = ApiVersionsResponse::decode(&mut body, version).unwrap();
        assert_eq!(
            (id, response.error_code, response.api_keys.len()),
            (sent, 0, 12),
            "ApiVersions v{version}"
        );
    }
    for version in 0..=12 {
        let request = MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(name())),
        ]));
        let sent = client.send(ApiKey::Metadata, version, &request);
        let (id, mut body) = client.receive(ApiKey::Metadata, version).unwrap();
        let response = MetadataResponse::decode(&mut body, version).unwrap();
        assert_eq!(
            (id, response.topics[0].error_code),
            (sent, 0),
            "Metadata v{version}"
        );
    }
    for (seq, version) in (3..=12).enumerate() {
        let request = produce_request(topic, pid, seq as i32, 1, -1);
        let sent = client.send(ApiKey::Produce, version, &request);
        let (id, mut body) = client.receive(ApiKey::Produce, version).unwrap();
        let response = ProduceResponse::decode(&mut body, version).unwrap();
        assert_eq!(
            (id, first_partition(&response).0),
            (sent, 0),
            "Produce v{version}"
        );
    }
    for version in 4..=16 {
        let fetch_topic = FetchTopic::default().with_partitions(vec![FetchPartition::default()
            .with_fetch_offset(0)
            .with_partition_max_bytes(1 << 20)]);
        let fetch_topic = if version >= 13 {
            fetch_topic.with_topic_id(uuid::Uuid::from_u128(topic_id))
        } else {
            fetch_topic.with_topic(name())
        };
        let request = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_topics(vec![fetch_topic]);
        let sent = client.send(ApiKey::Fetch, version, &request);
        let (id, mut body) = client.receive(ApiKey::Fetch, version).unwrap();
        let response = FetchResponse::decode(&mut body, version).unwrap();
        let partition = &response.responses[0].partitions[0];
        assert_eq!(
            (id, partition.error_code, partition.high_watermark),
            (sent, 0, 10),
            "Fetch v{version}"
        );
        assert!(!partition.records.as_ref().unwrap().is_empty());
    }
    for version in 1..=7 {
        let request = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name())
                .with_partitions(vec![
                    ListOffsetsPartition::default().with_timestamp(-1)
                ])]);
        let sent = client.send(ApiKey::ListOffsets, version, &request);
        let (id, mut body) = client.receive(ApiKey::ListOffsets, version).unwrap();
        let response = ListOffsetsResponse::decode(&mut body, version).unwrap();
        let partition = &response.topics[0].partitions[0];
        assert_eq!(
            (id, partition.error_code, partition.offset),
            (sent, 0, 10),
            "ListOffsets v{version}"
        );
    }
    for version in 0..=5 {
        let sent = client.send(ApiKey::InitProducerId, version, &init_request());
        let (id, mut body) = client.receive(ApiKey::InitProducerId, version).unwrap();
        let response = InitProducerIdResponse::decode(&mut body, version).unwrap();
        assert_eq!(
            (id, response.error_code),
            (sent, 0),
            "InitProducerId v{version}"
        );
    }
    for version in 0..=4 {
        let request = if version >= 4 {
            FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(vec![StrBytes::from_static_str("txn")])
        } else if version >= 1 {
            FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_key(StrBytes::from_static_str("txn"))
        } else {
            FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("group"))
        };
        let sent = client.send(ApiKey::FindCoordinator, version, &request);
        let (id, mut body) = client.receive(ApiKey::FindCoordinator, version).unwrap();
        let response = FindCoordinatorResponse::decode(&mut body, version).unwrap();
        let (error_code, node_id) = match response.coordinators.first() {
            Some(c) if version >= 4 => (c.error_code, c.node_id.0),
            _ => (response.error_code, response.node_id.0),
        };
        assert_eq!(
            (id, error_code, node_id),
            (sent, 0, 1),
            "FindCoordinator v{version}"
        );
    }
    every_version_of_the_transaction_apis_is_answered(&mut client, topic);
    assert_eq!(cluster.stats().unsupported_closed(), 0);
}

// `KafkaApis`: coordinator APIs older than PRODUCER_FENCED (KIP-588) get INVALID_PRODUCER_EPOCH
// for a fenced epoch: EndTxn and AddPartitionsToTxn below v2, InitProducerId below v4.
#[test]
fn fenced_epoch_is_invalid_producer_epoch_for_old_versions_of_coordinator_apis() {
    use kacrab::testkit::broker::error_codes::{INVALID_PRODUCER_EPOCH, PRODUCER_FENCED};
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse,
        TransactionalId,
    };
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("fenced", &[1]);
    let mut client = RawClient::connect(&cluster, 1);
    let txn = || TransactionalId(StrBytes::from_static_str("tx"));
    let init = init_request().with_transactional_id(Some(txn()));
    client.send(ApiKey::InitProducerId, 4, &init);
    let (_, mut body) = client.receive(ApiKey::InitProducerId, 4).unwrap();
    let first = InitProducerIdResponse::decode(&mut body, 4).unwrap();
    assert_eq!((first.error_code, first.producer_epoch), (0, 0));
    // A KIP-360 bump from an epoch that is neither current nor last is fenced.
    for (version, expected) in [(3, INVALID_PRODUCER_EPOCH), (4, PRODUCER_FENCED)] {
        let stale = init
            .clone()
            .with_producer_id(first.producer_id)
            .with_producer_epoch(5);
        client.send(ApiKey::InitProducerId, version, &stale);
        let (_, mut body) = client.receive(ApiKey::InitProducerId, version).unwrap();
        let response = InitProducerIdResponse::decode(&mut body, version).unwrap();
        assert_eq!(response.error_code, expected, "InitProducerId v{version}");
    }
    for (version, expected) in [(1, INVALID_PRODUCER_EPOCH), (2, PRODUCER_FENCED)] {
        let request = EndTxnRequest::default()
            .with_transactional_id(txn())
            .with_producer_id(first.producer_id)
            .with_producer_epoch(5)
            .with_committed(true);
        client.send(ApiKey::EndTxn, version, &request);
        let (_, mut body) = client.receive(ApiKey::EndTxn, version).unwrap();
        let response = EndTxnResponse::decode(&mut body, version).unwrap();
        assert_eq!(response.error_code, expected, "EndTxn v{version}");

        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn())
            .with_v3_and_below_producer_id(first.producer_id)
            .with_v3_and_below_producer_epoch(5)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("fenced")))
                .with_partitions(vec![0])]);
        client.send(ApiKey::AddPartitionsToTxn, version, &request);
        let (_, mut body) = client.receive(ApiKey::AddPartitionsToTxn, version).unwrap();
        let response = AddPartitionsToTxnResponse::decode(&mut body, version).unwrap();
        let code =
            response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
        assert_eq!(code, expected, "AddPartitionsToTxn v{version}");
    }
}
