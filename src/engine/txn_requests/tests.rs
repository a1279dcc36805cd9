use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::BrokerId;

use super::*;

fn add_response(errors: &[(i32, i16)]) -> AddPartitionsToTxnResponse {
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(vec![
        AddPartitionsToTxnTopicResult::default()
            .with_name(TopicName(str_bytes("t")))
            .with_results_by_partition(
                errors
                    .iter()
                    .map(|&(p, e)| {
                        AddPartitionsToTxnPartitionResult::default()
                            .with_partition_index(p)
                            .with_partition_error_code(e)
                    })
                    .collect(),
            ),
    ])
}

fn tps(n: i32) -> Vec<TopicPartition> {
    (0..n).map(|p| TopicPartition::new("t", p)).collect()
}

#[test]
fn add_partitions_table() {
    assert_eq!(
        classify_add_partitions(&add_response(&[(0, 0), (1, 0)]), &tps(2), true),
        TxnOutcome::Done
    );
    assert_eq!(
        classify_add_partitions(
            &add_response(&[(0, code::CONCURRENT_TRANSACTIONS)]),
            &tps(1),
            true
        ),
        TxnOutcome::Retry { short: true }
    );
    assert_eq!(
        classify_add_partitions(
            &add_response(&[(0, code::CONCURRENT_TRANSACTIONS)]),
            &tps(1),
            false
        ),
        TxnOutcome::Retry { short: false }
    );
    assert_eq!(
        classify_add_partitions(&add_response(&[(0, code::NOT_COORDINATOR)]), &tps(1), true),
        TxnOutcome::LookupCoordinator(CoordinatorType::Transaction)
    );
    assert!(matches!(
        classify_add_partitions(
            &add_response(&[(0, code::INVALID_PRODUCER_EPOCH)]),
            &tps(1),
            true
        ),
        TxnOutcome::Fatal(TransactionError::Fenced(_))
    ));
    assert!(matches!(
        classify_add_partitions(
            &add_response(&[(0, code::INVALID_TXN_STATE)]),
            &tps(1),
            true
        ),
        TxnOutcome::Fatal(TransactionError::Fatal(_))
    ));
    // docs/java-rules.md §9 item 19: one unauthorized topic, the others not attempted → abortable.
    let outcome = classify_add_partitions(
        &add_response(&[
            (0, code::OPERATION_NOT_ATTEMPTED),
            (1, code::TOPIC_AUTHORIZATION_FAILED),
            (2, code::OPERATION_NOT_ATTEMPTED),
        ]),
        &tps(3),
        true,
    );
    assert!(
        matches!(&outcome, TxnOutcome::Abortable(TransactionError::Abortable(m)) if m.to_string().contains("not authorized")),
        "{outcome:?}"
    );
    assert!(matches!(
        classify_add_partitions(&add_response(&[(0, 0)]), &tps(2), true),
        TxnOutcome::Fatal(_)
    ));
}

#[test]
fn end_txn_table() {
    assert_eq!(classify_end_txn(code::NONE, true, true), TxnOutcome::Done);
    assert_eq!(
        classify_end_txn(code::CONCURRENT_TRANSACTIONS, true, true),
        TxnOutcome::Retry { short: false }
    );
    assert_eq!(
        classify_end_txn(code::COORDINATOR_NOT_AVAILABLE, false, true),
        TxnOutcome::LookupCoordinator(CoordinatorType::Transaction)
    );
    assert!(matches!(
        classify_end_txn(code::PRODUCER_FENCED, true, true),
        TxnOutcome::Fatal(TransactionError::Fenced(_))
    ));
    assert!(matches!(
        classify_end_txn(code::TRANSACTION_ABORTABLE, true, true),
        TxnOutcome::Abortable(_)
    ));
    assert!(matches!(
        classify_end_txn(code::TRANSACTION_ABORTABLE, false, true),
        TxnOutcome::Fatal(TransactionError::Fatal(_))
    ));
    assert!(matches!(
        classify_end_txn(code::UNKNOWN_PRODUCER_ID, false, true),
        TxnOutcome::AbortableIfPossible(_)
    ));
    assert!(matches!(
        classify_end_txn(code::INVALID_REQUEST, false, true),
        TxnOutcome::Fatal(_)
    ));
}

#[test]
fn init_producer_id_and_add_offsets_tables() {
    assert_eq!(
        classify_init_producer_id(code::NOT_COORDINATOR),
        TxnOutcome::LookupCoordinator(CoordinatorType::Transaction)
    );
    assert_eq!(
        classify_init_producer_id(code::COORDINATOR_LOAD_IN_PROGRESS),
        TxnOutcome::Retry { short: false }
    );
    assert!(matches!(
        classify_init_producer_id(code::INVALID_PRODUCER_EPOCH),
        TxnOutcome::Fatal(TransactionError::Fenced(_))
    ));
    assert!(matches!(
        classify_init_producer_id(code::INVALID_TRANSACTION_TIMEOUT),
        TxnOutcome::Fatal(TransactionError::Fatal(_))
    ));
    assert!(matches!(
        classify_add_offsets(code::GROUP_AUTHORIZATION_FAILED),
        TxnOutcome::Abortable(_)
    ));
    assert!(matches!(
        classify_add_offsets(code::INVALID_TXN_STATE),
        TxnOutcome::Fatal(TransactionError::Fatal(_))
    ));
}

#[test]
fn txn_offset_commit_keeps_retriable_partitions_pending_and_stops_on_errors() {
    let response = |errors: &[(i32, i16)]| {
        TxnOffsetCommitResponse::default().with_topics(vec![TxnOffsetCommitResponseTopic::default(
        )
        .with_name(TopicName(str_bytes("t")))
        .with_partitions(
            errors
                .iter()
                .map(|&(p, e)| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(e)
                })
                .collect(),
        )])
    };
    let out = classify_txn_offset_commit(&response(&[
        (0, code::NONE),
        (1, code::COORDINATOR_LOAD_IN_PROGRESS),
        (2, code::NOT_COORDINATOR),
    ]));
    assert_eq!(out.committed, vec![TopicPartition::new("t", 0)]);
    assert_eq!(out.outcome, TxnOutcome::Done);
    assert!(out.lookup);
    let out = classify_txn_offset_commit(&response(&[(0, code::ILLEGAL_GENERATION)]));
    assert!(matches!(out.outcome, TxnOutcome::Abortable(_)));
    let out = classify_txn_offset_commit(&response(&[(0, code::PRODUCER_FENCED)]));
    assert!(matches!(
        out.outcome,
        TxnOutcome::Fatal(TransactionError::Fenced(_))
    ));
}

fn is_fenced(outcome: &TxnOutcome) -> bool {
    matches!(outcome, TxnOutcome::Fatal(TransactionError::Fenced(_)))
}

fn is_fatal(outcome: &TxnOutcome) -> bool {
    matches!(outcome, TxnOutcome::Fatal(TransactionError::Fatal(_)))
}

fn is_abortable(outcome: &TxnOutcome) -> bool {
    matches!(
        outcome,
        TxnOutcome::Abortable(TransactionError::Abortable(_))
    )
}

fn is_abortable_if_possible(outcome: &TxnOutcome) -> bool {
    matches!(
        outcome,
        TxnOutcome::AbortableIfPossible(TransactionError::Abortable(_))
    )
}

const LOOKUP: TxnOutcome = TxnOutcome::LookupCoordinator(CoordinatorType::Transaction);
const RETRY: TxnOutcome = TxnOutcome::Retry { short: false };

#[test]
fn only_kafkas_retriable_exceptions_are_retriable() {
    for error in [
        code::CORRUPT_MESSAGE,
        code::UNKNOWN_TOPIC_OR_PARTITION,
        code::LEADER_NOT_AVAILABLE,
        code::NOT_LEADER_OR_FOLLOWER,
        code::REQUEST_TIMED_OUT,
        code::NETWORK_EXCEPTION,
        code::COORDINATOR_LOAD_IN_PROGRESS,
        code::COORDINATOR_NOT_AVAILABLE,
        code::NOT_COORDINATOR,
        code::NOT_ENOUGH_REPLICAS,
        code::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        code::CONCURRENT_TRANSACTIONS,
        code::KAFKA_STORAGE_ERROR,
        code::FENCED_LEADER_EPOCH,
        code::UNKNOWN_LEADER_EPOCH,
        code::UNSTABLE_OFFSET_COMMIT,
        code::THROTTLING_QUOTA_EXCEEDED,
    ] {
        assert!(is_retriable(error), "{}", error_code::name(error));
    }
    for error in [
        code::NONE,
        code::UNKNOWN_SERVER_ERROR,
        code::INVALID_PRODUCER_EPOCH,
        code::PRODUCER_FENCED,
        code::INVALID_TXN_STATE,
        code::TRANSACTION_ABORTABLE,
        code::UNKNOWN_PRODUCER_ID,
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ] {
        assert!(!is_retriable(error), "{}", error_code::name(error));
    }
}

#[test]
fn an_error_outcome_names_the_api_and_the_kafka_error() {
    let fatal = TransactionError::Fatal(ErrorCause::Response {
        request: "EndTxn",
        code: code::INVALID_TXN_STATE,
    });
    assert_eq!(
        classify_end_txn(code::INVALID_TXN_STATE, true, true),
        TxnOutcome::Fatal(fatal.clone())
    );
    assert_eq!(
        fatal.to_string(),
        "transaction manager is in a fatal error state: EndTxn failed: INVALID_TXN_STATE"
    );
    let fenced = TransactionError::Fenced(ErrorCause::Response {
        request: "AddOffsetsToTxn",
        code: code::PRODUCER_FENCED,
    });
    assert_eq!(
        classify_add_offsets(code::PRODUCER_FENCED),
        TxnOutcome::Fatal(fenced.clone())
    );
    assert_eq!(
        fenced.to_string(),
        "producer fenced: AddOffsetsToTxn failed: PRODUCER_FENCED"
    );
    let abortable = TransactionError::Abortable(ErrorCause::Response {
        request: "InitProducerId",
        code: code::TRANSACTION_ABORTABLE,
    });
    assert_eq!(
        classify_init_producer_id(code::TRANSACTION_ABORTABLE),
        TxnOutcome::Abortable(abortable.clone())
    );
    assert_eq!(
        abortable.to_string(),
        "the transaction must be aborted: InitProducerId failed: TRANSACTION_ABORTABLE"
    );
}

#[test]
fn find_coordinator_follows_javas_handler_error_by_error() {
    let answer = |error: i16, node: i32, port: i32| {
        FindCoordinatorResponse::default()
            .with_error_code(error)
            .with_node_id(BrokerId(node))
            .with_host(str_bytes("b0"))
            .with_port(port)
    };
    let v4 = |error: i16, node: i32, port: i32| {
        FindCoordinatorResponse::default().with_coordinators(vec![Coordinator::default()
            .with_error_code(error)
            .with_node_id(BrokerId(node))
            .with_host(str_bytes("b1"))
            .with_port(port)])
    };
    // Node 0 and port 1 are valid; a negative node or a port of 0 or below is not.
    assert_eq!(
        classify_find_coordinator(3, &answer(code::NONE, 0, 1)),
        Ok(FoundCoordinator {
            node: 0,
            host: "b0".into(),
            port: 1
        })
    );
    assert_eq!(
        classify_find_coordinator(4, &v4(code::NONE, 3, 9092)),
        Ok(FoundCoordinator {
            node: 3,
            host: "b1".into(),
            port: 9092
        })
    );
    for (node, port) in [(-1, 9092), (2, 0), (2, -1), (-1, 0)] {
        let outcome = classify_find_coordinator(3, &answer(code::NONE, node, port));
        assert!(
            matches!(&outcome, Err(TxnOutcome::Fatal(TransactionError::Fatal(m))) if m.to_string().contains("invalid node")),
            "{node}:{port} {outcome:?}"
        );
    }
    assert_eq!(
        classify_find_coordinator(4, &v4(code::COORDINATOR_LOAD_IN_PROGRESS, -1, 0)),
        Err(RETRY)
    );
    for error in [
        code::GROUP_AUTHORIZATION_FAILED,
        code::TRANSACTION_ABORTABLE,
    ] {
        let outcome = classify_find_coordinator(3, &answer(error, -1, 0));
        assert!(matches!(&outcome, Err(o) if is_abortable(o)), "{outcome:?}");
    }
    for error in [
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        code::INVALID_REQUEST,
    ] {
        let outcome = classify_find_coordinator(3, &answer(error, -1, 0));
        assert!(matches!(&outcome, Err(o) if is_fatal(o)), "{outcome:?}");
    }
}

#[test]
fn init_producer_id_follows_javas_handler_error_by_error() {
    assert_eq!(classify_init_producer_id(code::NONE), TxnOutcome::Done);
    assert_eq!(classify_init_producer_id(code::NOT_COORDINATOR), LOOKUP);
    assert_eq!(
        classify_init_producer_id(code::COORDINATOR_NOT_AVAILABLE),
        LOOKUP
    );
    assert_eq!(
        classify_init_producer_id(code::CONCURRENT_TRANSACTIONS),
        RETRY
    );
    for error in [
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        code::CLUSTER_AUTHORIZATION_FAILED,
        code::TRANSACTION_ABORTABLE,
    ] {
        assert!(is_abortable(&classify_init_producer_id(error)), "{error}");
    }
    for error in [code::INVALID_PRODUCER_EPOCH, code::PRODUCER_FENCED] {
        assert!(is_fenced(&classify_init_producer_id(error)), "{error}");
    }
    assert!(is_fatal(&classify_init_producer_id(
        code::UNKNOWN_SERVER_ERROR
    )));
}

#[test]
fn add_partitions_follows_javas_handler_error_by_error() {
    let one = |error: i16| classify_add_partitions(&add_response(&[(0, error)]), &tps(1), false);
    assert_eq!(one(code::COORDINATOR_NOT_AVAILABLE), LOOKUP);
    assert_eq!(one(code::COORDINATOR_LOAD_IN_PROGRESS), RETRY);
    assert_eq!(one(code::UNKNOWN_TOPIC_OR_PARTITION), RETRY);
    assert!(is_fenced(&one(code::PRODUCER_FENCED)));
    for error in [
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        code::INVALID_TXN_STATE,
        code::INVALID_PRODUCER_ID_MAPPING,
    ] {
        assert!(is_fatal(&one(error)), "{error}");
    }
    assert!(is_abortable_if_possible(&one(code::UNKNOWN_PRODUCER_ID)));
    assert!(is_abortable(&one(code::TRANSACTION_ABORTABLE)));
    // Any other partition error is abortable after the whole answer was read.
    let outcome = one(code::INVALID_REQUEST);
    assert!(
        matches!(&outcome, TxnOutcome::Abortable(TransactionError::Abortable(m)) if m.to_string().contains("could not add partitions")),
        "{outcome:?}"
    );
}

#[test]
fn add_partitions_stops_at_the_first_error_that_decides() {
    // TRANSACTION_ABORTABLE decides at once: a later partition's fencing is not read.
    let outcome = classify_add_partitions(
        &add_response(&[(0, code::TRANSACTION_ABORTABLE), (1, code::PRODUCER_FENCED)]),
        &tps(2),
        false,
    );
    assert!(is_abortable(&outcome), "{outcome:?}");
    // A partition error that does not decide lets a later one decide.
    let outcome = classify_add_partitions(
        &add_response(&[(0, code::INVALID_REQUEST), (1, code::PRODUCER_FENCED)]),
        &tps(2),
        false,
    );
    assert!(is_fenced(&outcome), "{outcome:?}");
}

#[test]
fn add_offsets_follows_javas_handler_error_by_error() {
    assert_eq!(classify_add_offsets(code::NONE), TxnOutcome::Done);
    assert_eq!(
        classify_add_offsets(code::COORDINATOR_NOT_AVAILABLE),
        LOOKUP
    );
    assert_eq!(classify_add_offsets(code::NOT_COORDINATOR), LOOKUP);
    assert_eq!(classify_add_offsets(code::CONCURRENT_TRANSACTIONS), RETRY);
    assert!(is_abortable_if_possible(&classify_add_offsets(
        code::UNKNOWN_PRODUCER_ID
    )));
    for error in [code::INVALID_PRODUCER_EPOCH, code::PRODUCER_FENCED] {
        assert!(is_fenced(&classify_add_offsets(error)), "{error}");
    }
    for error in [
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        code::INVALID_TXN_STATE,
        code::INVALID_PRODUCER_ID_MAPPING,
        code::UNKNOWN_SERVER_ERROR,
    ] {
        assert!(is_fatal(&classify_add_offsets(error)), "{error}");
    }
    for error in [
        code::GROUP_AUTHORIZATION_FAILED,
        code::TRANSACTION_ABORTABLE,
    ] {
        assert!(is_abortable(&classify_add_offsets(error)), "{error}");
    }
}

#[test]
fn an_abort_sent_after_an_add_lost_its_answer_takes_invalid_txn_state_as_nothing_to_abort() {
    assert_eq!(
        classify_end_txn(code::INVALID_TXN_STATE, false, false),
        TxnOutcome::Done
    );
    // Only that: a commit, or an abort of a transaction the coordinator confirmed, is fatal.
    assert!(is_fatal(&classify_end_txn(
        code::INVALID_TXN_STATE,
        true,
        false
    )));
    assert!(is_fatal(&classify_end_txn(
        code::INVALID_TXN_STATE,
        false,
        true
    )));
    // Every other answer reads as it does for a started transaction.
    for error in [
        code::NONE,
        code::NOT_COORDINATOR,
        code::CONCURRENT_TRANSACTIONS,
        code::PRODUCER_FENCED,
        code::INVALID_PRODUCER_EPOCH,
        code::TRANSACTION_ABORTABLE,
        code::UNKNOWN_PRODUCER_ID,
        code::INVALID_PRODUCER_ID_MAPPING,
    ] {
        assert_eq!(
            classify_end_txn(error, false, false),
            classify_end_txn(error, false, true),
            "{error}"
        );
    }
}

#[test]
fn end_txn_follows_javas_handler_error_by_error() {
    for commit in [true, false] {
        assert_eq!(
            classify_end_txn(code::NOT_COORDINATOR, commit, true),
            LOOKUP
        );
        assert_eq!(
            classify_end_txn(code::REQUEST_TIMED_OUT, commit, true),
            RETRY
        );
        assert!(is_fenced(&classify_end_txn(
            code::INVALID_PRODUCER_EPOCH,
            commit,
            true
        )));
        for error in [
            code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            code::INVALID_TXN_STATE,
            code::INVALID_PRODUCER_ID_MAPPING,
            code::UNKNOWN_SERVER_ERROR,
        ] {
            assert!(is_fatal(&classify_end_txn(error, commit, true)), "{error}");
        }
    }
    assert!(is_abortable_if_possible(&classify_end_txn(
        code::UNKNOWN_PRODUCER_ID,
        true,
        true
    )));
}

#[test]
fn find_coordinator_carries_its_key_in_the_layout_of_its_version() {
    let v3 = find_coordinator_request(3, CoordinatorType::Group, "g");
    assert_eq!(v3.key_type, CoordinatorType::Group as i8);
    assert_eq!(v3.key.as_str(), "g");
    assert!(v3.coordinator_keys.is_empty());
    let v4 = find_coordinator_request(4, CoordinatorType::Transaction, "tx");
    assert_eq!(v4.key_type, CoordinatorType::Transaction as i8);
    assert_eq!(
        v4.coordinator_keys
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>(),
        vec!["tx"]
    );
}

/// The identity every request of the transaction carries.
fn transaction_identity() -> ProducerIdAndEpoch {
    ProducerIdAndEpoch::new(7, 3)
}

#[test]
fn init_producer_id_carries_the_identity_to_bump_or_none() {
    let identity = transaction_identity();
    let init = init_producer_id_request("tx", 60_000, None);
    assert_eq!(init.transactional_id.as_ref().unwrap().0.as_str(), "tx");
    assert_eq!(init.transaction_timeout_ms, 60_000);
    assert_eq!((init.producer_id.0, init.producer_epoch), (-1, -1));
    let bump = init_producer_id_request("tx", 60_000, Some(identity));
    assert_eq!((bump.producer_id.0, bump.producer_epoch), (7, 3));
}

#[test]
fn add_partitions_and_add_offsets_carry_the_transactional_id_the_identity_and_their_payload() {
    let identity = transaction_identity();
    let add = add_partitions_request(
        "tx",
        identity,
        &[
            TopicPartition::new("b", 1),
            TopicPartition::new("a", 0),
            TopicPartition::new("b", 0),
        ],
    );
    assert_eq!(add.v3_and_below_transactional_id.0.as_str(), "tx");
    assert_eq!(
        (
            add.v3_and_below_producer_id.0,
            add.v3_and_below_producer_epoch
        ),
        (7, 3)
    );
    let topics: Vec<(&str, Vec<i32>)> = add
        .v3_and_below_topics
        .iter()
        .map(|t| (t.name.0.as_str(), t.partitions.clone()))
        .collect();
    assert_eq!(topics, vec![("a", vec![0]), ("b", vec![1, 0])]);

    let offsets = add_offsets_request("tx", identity, "g");
    assert_eq!(offsets.transactional_id.0.as_str(), "tx");
    assert_eq!((offsets.producer_id.0, offsets.producer_epoch), (7, 3));
    assert_eq!(offsets.group_id.0.as_str(), "g");
}

/// A consumer group member's metadata, and offset 42 with its leader epoch and metadata for
/// `t`-2.
fn member_and_offsets() -> (GroupMetadata, BTreeMap<TopicPartition, OffsetAndMetadata>) {
    let group = GroupMetadata {
        group_id: "g".into(),
        generation_id: 5,
        member_id: "m".into(),
        group_instance_id: Some("i".into()),
    };
    let mut committed = BTreeMap::new();
    committed.insert(
        TopicPartition::new("t", 2),
        OffsetAndMetadata {
            offset: 42,
            leader_epoch: 4,
            metadata: Some("md".into()),
        },
    );
    (group, committed)
}

#[test]
fn txn_offset_commit_carries_the_offsets_and_the_group_metadata_its_version_has() {
    let identity = transaction_identity();
    let (group, committed) = member_and_offsets();
    for version in [2, 3] {
        // Below v3 only a group known by its id alone can be committed (see below).
        let sent = if version >= 3 {
            group.clone()
        } else {
            GroupMetadata::new("g")
        };
        let commit = txn_offset_commit_request(version, "tx", identity, &sent, &committed).unwrap();
        assert_eq!(commit.transactional_id.0.as_str(), "tx");
        assert_eq!(commit.group_id.0.as_str(), "g");
        assert_eq!((commit.producer_id.0, commit.producer_epoch), (7, 3));
        let [topic] = commit.topics.as_slice() else {
            panic!("{:?}", commit.topics)
        };
        assert_eq!(topic.name.0.as_str(), "t");
        let [p] = topic.partitions.as_slice() else {
            panic!("{:?}", topic.partitions)
        };
        assert_eq!(
            (
                p.partition_index,
                p.committed_offset,
                p.committed_leader_epoch
            ),
            (2, 42, 4)
        );
        assert_eq!(p.committed_metadata.as_deref(), Some("md"));
        // The group's generation and member only exist from v3 on (KIP-447).
        if version >= 3 {
            assert_eq!(commit.generation_id, 5);
            assert_eq!(commit.member_id.as_str(), "m");
            assert_eq!(commit.group_instance_id.as_deref(), Some("i"));
        } else {
            assert_eq!(commit.generation_id, -1);
            assert_eq!(commit.group_instance_id, None);
        }
    }
}

#[test]
fn txn_offset_commit_refuses_a_members_metadata_below_version_3() {
    let identity = transaction_identity();
    let (group, committed) = member_and_offsets();
    // A member's metadata cannot go below v3 (Java's `Builder.build` refuses): each field
    // alone counts, and the refusal is fatal.
    for version in 0..3 {
        let mut generation = GroupMetadata::new("g");
        generation.generation_id = 5;
        let mut member = GroupMetadata::new("g");
        member.member_id = "m".into();
        let mut instance = GroupMetadata::new("g");
        instance.group_instance_id = Some("i".into());
        for g in [&group, &generation, &member, &instance] {
            let refused = txn_offset_commit_request(version, "tx", identity, g, &committed);
            assert!(
                matches!(&refused, Err(TransactionError::Fatal(m))
                    if m.to_string().contains(&format!("up to version {version};"))),
                "{g:?} at v{version}: {refused:?}"
            );
        }
    }
}

#[test]
fn end_txn_carries_the_identity_and_whether_it_commits() {
    let identity = transaction_identity();
    for commit in [true, false] {
        let end = end_txn_request("tx", identity, commit);
        assert_eq!(end.transactional_id.0.as_str(), "tx");
        assert_eq!((end.producer_id.0, end.producer_epoch), (7, 3));
        assert_eq!(end.committed, commit);
    }
}

#[test]
fn find_coordinator_needs_exactly_one_valid_coordinator() {
    let ok = FindCoordinatorResponse::default()
        .with_node_id(BrokerId(2))
        .with_host(str_bytes("10.0.0.2"))
        .with_port(9092);
    assert_eq!(
        classify_find_coordinator(3, &ok),
        Ok(FoundCoordinator {
            node: 2,
            host: "10.0.0.2".into(),
            port: 9092
        })
    );
    let busy = FindCoordinatorResponse::default()
        .with_error_code(code::COORDINATOR_NOT_AVAILABLE)
        .with_node_id(BrokerId(-1));
    assert_eq!(
        classify_find_coordinator(3, &busy),
        Err(TxnOutcome::Retry { short: false })
    );
    let two = FindCoordinatorResponse::default()
        .with_coordinators(vec![Coordinator::default(), Coordinator::default()]);
    assert!(matches!(
        classify_find_coordinator(4, &two),
        Err(TxnOutcome::Fatal(_))
    ));
}
