//! Transactional produce (transactional id, partition verification, KIP-890 part 1),
//! transaction markers, the LSO and read_committed, and transactional offsets (TxnOffsetCommit).

use kacrab::testkit::batch::TestBatch;
use kacrab::testkit::broker::error_codes::*;
use kacrab::testkit::broker::{
    offsets_partition_for, BrokerRules, Cluster, ProduceInput, TransactionState,
    TxnOffsetCommitGroup, TxnOffsetCommitInput, CONSUMER_OFFSETS_TOPIC, LATEST_TIMESTAMP,
    READ_COMMITTED, READ_UNCOMMITTED,
};

use super::{
    add_partitions, cluster, end, marker_type_and_coordinator_epoch, markers, produce, producer,
    send, state, transactional_batch, txn_producer, txn_send, TxnProducer, GROUP, NOW, TIMEOUT_MS,
    TOPIC, TXN,
};

/// Data batches (not markers) a read_committed consumer is handed at `offset` on p0.
fn committed_fetch(c: &Cluster, offset: i64) -> kacrab::testkit::broker::FetchPartitionResult {
    c.fetch(1, TOPIC, 0, offset, 1 << 20, READ_COMMITTED, -1)
}

// KafkaApis `handleProduceRequest`: transactional records need a transactional id.
#[test]
fn transactional_batch_without_a_transactional_id_is_authorization_failed() {
    let mut c = cluster();
    let pid = producer(&mut c);
    let result = send(&mut c, &transactional_batch(pid, 0, 0));
    assert_eq!(result.error_code, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
}

// ReplicaManager `handleProduceAppend` + TransactionCoordinator
// `handleVerifyPartitionsInTransaction`: with verification on, a transactional batch for a
// partition never added to the transaction is rejected before the append (Produce v10 and below:
// INVALID_TXN_STATE). With verification off it is accepted and holds the last stable offset (a
// hanging transaction).
#[test]
fn transactional_batch_for_a_partition_not_in_the_transaction() {
    let mut c = cluster();
    let init = c.init_producer_id(Some("tx"), 60_000, -1, -1, NOW);
    let bytes = transactional_batch(init.producer_id, 0, 0);
    let result = c.produce(1, TOPIC, 0, &bytes, -1, Some("tx"), NOW);
    assert_eq!(
        (result.error_code, result.log_start_offset),
        (INVALID_TXN_STATE, -1)
    );
    assert_eq!(
        result.error_message.as_deref(),
        Some("Partition was not added to the transaction")
    );

    let rules = BrokerRules {
        transaction_verification: false,
        ..BrokerRules::default()
    };
    let mut c = Cluster::new(&[1], rules);
    c.create_topic(TOPIC, &[1]);
    let init = c.init_producer_id(Some("tx"), 60_000, -1, -1, NOW);
    let pid = init.producer_id;
    let plain = producer(&mut c);
    assert_eq!(produce(&mut c, plain, 0, 0, 2).error_code, NONE);
    assert_eq!(
        c.produce(
            1,
            TOPIC,
            0,
            &transactional_batch(pid, 0, 0),
            -1,
            Some("tx"),
            NOW
        )
        .error_code,
        NONE
    );
    assert_eq!(produce(&mut c, plain, 0, 2, 1).error_code, NONE);
    assert_eq!(
        c.last_stable_offset(TOPIC, 0),
        Some(2),
        "held at the open transaction"
    );
    assert_eq!(c.high_watermark(TOPIC, 0), Some(4));
    // ProducerAppendInfo `appendDataBatch`: a non-transactional write while the transaction is
    // open.
    assert_eq!(produce(&mut c, pid, 0, 1, 1).error_code, INVALID_TXN_STATE);
    let committed = c.fetch(1, TOPIC, 0, 0, 1 << 20, READ_COMMITTED, -1);
    assert_eq!(committed.aborted_transactions, Some(vec![]));
    assert_eq!(committed.last_stable_offset, 2);
    let uncommitted = c.fetch(1, TOPIC, 0, 0, 1 << 20, READ_UNCOMMITTED, -1);
    assert!(uncommitted.records.len() > committed.records.len());
    assert_eq!(uncommitted.aborted_transactions, None);
}

// ReplicaManager `handleProduceAppend`: transactional batches of one request with two producer ids
// fail every partition, ReplicaManagerTest
// `testExceptionWhenUnverifiedTransactionHasMultipleProducerIds`.
#[test]
fn transactional_batches_of_two_producers_in_one_request_are_invalid_producer_id_mapping() {
    let mut c = cluster();
    let a = transactional_batch(1, 0, 0);
    let b = transactional_batch(2, 0, 0);
    let inputs = [
        ProduceInput {
            topic: TOPIC,
            partition: 0,
            records: Some(&a),
        },
        ProduceInput {
            topic: TOPIC,
            partition: 1,
            records: Some(&b),
        },
    ];
    let results = c.produce_request(1, -1, Some("tx"), &inputs, NOW);
    assert!(results
        .iter()
        .all(|r| r.error_code == INVALID_PRODUCER_ID_MAPPING));
}

// TransactionCoordinator `endTransaction` + TransactionMarkerChannelManager + ProducerStateManager
// `firstUnstableOffset`: the records of an open transaction hold the last stable offset, so
// read_committed sees nothing of them; the COMMIT marker (transactional + control, the producer's
// id and epoch) releases them. ListOffsets(LATEST) under read_committed is the LSO.
#[test]
fn commit_makes_transactional_records_visible_under_read_committed() {
    let mut c = cluster();
    let plain = producer(&mut c);
    assert_eq!(produce(&mut c, plain, 0, 0, 2).error_code, NONE);
    let p = txn_producer(&mut c);
    assert_eq!(add_partitions(&mut c, p, &[0], NOW), vec![NONE]);
    assert_eq!(state(&c), TransactionState::Ongoing);
    assert_eq!(txn_send(&mut c, 0, p.pid, p.epoch, 0, 3).base_offset, 2);
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(2));
    let before = committed_fetch(&c, 0);
    assert_eq!(before.last_stable_offset, 2);
    assert_eq!(
        before.records.len(),
        c.partition_log(TOPIC, 0)[0].bytes.len()
    );
    assert!(
        committed_fetch(&c, 2).records.is_empty(),
        "nothing at the LSO"
    );
    assert_eq!(
        c.list_offsets(1, TOPIC, 0, LATEST_TIMESTAMP, READ_COMMITTED, -1)
            .offset,
        2
    );

    assert_eq!(end(&mut c, p, true), NONE);
    assert_eq!(state(&c), TransactionState::CompleteCommit);
    let m = markers(&c, 0);
    assert_eq!(m.len(), 1);
    assert_eq!(
        (
            m[0].base_offset,
            m[0].producer_id,
            m[0].producer_epoch,
            m[0].transactional
        ),
        (5, p.pid, p.epoch, true)
    );
    assert_eq!(marker_type_and_coordinator_epoch(&m[0]), (1, 0));
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(6));
    let after = committed_fetch(&c, 0);
    assert_eq!(after.aborted_transactions, Some(vec![]));
    assert_eq!(
        after.records.len(),
        c.partition_log(TOPIC, 0)
            .iter()
            .map(|b| b.bytes.len())
            .sum::<usize>()
    );
    assert_eq!(
        c.list_offsets(1, TOPIC, 0, LATEST_TIMESTAMP, READ_COMMITTED, -1)
            .offset,
        6
    );
    // The producer's open transaction on the partition is closed.
    assert_eq!(
        c.producer_state(TOPIC, 0, p.pid)
            .unwrap()
            .current_txn_first_offset,
        None
    );
}

// ProducerAppendInfo `appendEndTxnMarker` + TransactionIndex: an ABORT marker closes the
// transaction and indexes it, so a read_committed fetch lists (producer id, first offset) for the
// range it returns and the consumer drops those records; read_uncommitted carries no list.
#[test]
fn abort_keeps_records_invisible_and_lists_them_as_aborted() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0, 1], NOW);
    assert_eq!(txn_send(&mut c, 0, p.pid, p.epoch, 0, 2).error_code, NONE);
    assert_eq!(end(&mut c, p, false), NONE);
    assert_eq!(state(&c), TransactionState::CompleteAbort);
    // p1 got no data but still gets its marker, with no index entry.
    let m1 = markers(&c, 1);
    assert_eq!(m1.len(), 1);
    assert_eq!(marker_type_and_coordinator_epoch(&m1[0]).0, 0);
    assert!(c.aborted_transactions(TOPIC, 1).is_empty());

    let index = c.aborted_transactions(TOPIC, 0);
    assert_eq!(index.len(), 1);
    assert_eq!(
        (
            index[0].producer_id,
            index[0].first_offset,
            index[0].last_offset
        ),
        (p.pid, 0, 2)
    );
    let fetched = committed_fetch(&c, 0);
    assert_eq!(fetched.last_stable_offset, 3);
    assert_eq!(fetched.aborted_transactions, Some(vec![(p.pid, 0)]));
    assert!(
        !fetched.records.is_empty(),
        "aborted data is returned; the consumer drops it"
    );
    // A fetch past the aborted range lists nothing.
    let plain = producer(&mut c);
    produce(&mut c, plain, 0, 0, 1);
    assert_eq!(committed_fetch(&c, 3).aborted_transactions, Some(vec![]));
    assert_eq!(
        c.fetch(1, TOPIC, 0, 0, 1 << 20, READ_UNCOMMITTED, -1)
            .aborted_transactions,
        None
    );
}

// ProducerStateManager `firstUnstableOffset`: the LSO is the first offset of the oldest open
// transaction, and moves to the next open one when the first completes.
#[test]
fn open_transaction_holds_the_last_stable_offset_until_its_marker() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0], NOW);
    let other = c.init_producer_id_at(
        c.transaction_coordinator("other"),
        Some("other"),
        TIMEOUT_MS,
        -1,
        -1,
        NOW,
    );
    let other_coordinator = c.transaction_coordinator("other");
    let added = c.add_partitions_to_txn(
        other_coordinator,
        "other",
        other.producer_id,
        0,
        &[(TOPIC.to_string(), 0)],
        NOW,
    );
    assert_eq!(added, vec![NONE]);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    let mut b = TestBatch::idempotent(other.producer_id, 0, 0, 1);
    b.transactional = true;
    assert_eq!(
        c.produce(1, TOPIC, 0, &b.encode(), -1, Some("other"), NOW)
            .base_offset,
        1
    );
    let plain = producer(&mut c);
    produce(&mut c, plain, 0, 0, 1);
    assert_eq!(
        (c.last_stable_offset(TOPIC, 0), c.high_watermark(TOPIC, 0)),
        (Some(0), Some(3))
    );
    assert_eq!(end(&mut c, p, true), NONE);
    assert_eq!(
        c.last_stable_offset(TOPIC, 0),
        Some(1),
        "held by the other transaction"
    );
    assert_eq!(
        c.end_txn(other_coordinator, "other", other.producer_id, 0, true, NOW),
        NONE
    );
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(5));
}

// OffsetMetadataManager `commitTransactionalOffset`, `replayEndTransactionMarker`, `fetchOffsets`:
// offsets of a TxnOffsetCommit are pending (UNSTABLE_OFFSET_COMMIT with requireStable, the old
// offset without) until the COMMIT marker reaches the group's offsets partition; ABORT drops them.
// Without AddOffsetsToTxn the commit is not in the transaction.
#[test]
fn txn_offset_commit_is_visible_after_commit_and_not_after_abort() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let group_coordinator = c.group_coordinator(GROUP);
    let offsets = |offset| {
        vec![TxnOffsetCommitInput {
            topic: TOPIC.to_string(),
            partition: 0,
            offset,
            leader_epoch: -1,
            metadata: Some("m".to_string()),
        }]
    };
    let group = |p: TxnProducer| TxnOffsetCommitGroup {
        transactional_id: TXN,
        group_id: GROUP,
        producer_id: p.pid,
        producer_epoch: p.epoch,
        generation_id: -1,
    };
    let fetch = |c: &Cluster, stable| {
        let wanted = [(TOPIC.to_string(), 0)];
        let r = c
            .offset_fetch(group_coordinator, GROUP, Some(&wanted), stable)
            .unwrap();
        (r[0].error_code, r[0].offset)
    };

    assert_eq!(
        c.txn_offset_commit(group_coordinator, group(p), &offsets(7)),
        vec![TRANSACTION_ABORTABLE],
        "the offsets partition was not added"
    );
    assert_eq!(
        c.add_offsets_to_txn(p.coordinator, TXN, p.pid, p.epoch, GROUP, NOW),
        NONE
    );
    let offsets_partition = (
        CONSUMER_OFFSETS_TOPIC.to_string(),
        offsets_partition_for(GROUP),
    );
    assert!(c
        .transaction_metadata(TXN)
        .unwrap()
        .topic_partitions
        .contains(&offsets_partition));
    let other_epoch = TxnProducer {
        epoch: p.epoch + 1,
        ..p
    };
    assert_eq!(
        c.txn_offset_commit(group_coordinator, group(other_epoch), &offsets(7)),
        vec![INVALID_PRODUCER_EPOCH]
    );
    let generation = TxnOffsetCommitGroup {
        generation_id: 3,
        ..group(p)
    };
    assert_eq!(
        c.txn_offset_commit(group_coordinator, generation, &offsets(7)),
        vec![ILLEGAL_GENERATION]
    );
    assert_eq!(
        c.txn_offset_commit(group_coordinator, group(p), &offsets(7)),
        vec![NONE]
    );
    assert_eq!(fetch(&c, true), (UNSTABLE_OFFSET_COMMIT, -1));
    assert_eq!(fetch(&c, false), (NONE, -1));
    assert_eq!(end(&mut c, p, true), NONE);
    assert_eq!(fetch(&c, true), (NONE, 7));
    assert_eq!(c.committed_offset(GROUP, TOPIC, 0), Some(7));

    c.add_offsets_to_txn(p.coordinator, TXN, p.pid, p.epoch, GROUP, NOW);
    assert_eq!(
        c.txn_offset_commit(group_coordinator, group(p), &offsets(9)),
        vec![NONE]
    );
    assert_eq!(end(&mut c, p, false), NONE);
    assert_eq!(fetch(&c, true), (NONE, 7), "aborted offsets vanish");

    let other = c
        .broker_ids()
        .into_iter()
        .find(|&b| b != group_coordinator)
        .unwrap();
    assert_eq!(
        c.offset_fetch(other, GROUP, None, false),
        Err(NOT_COORDINATOR)
    );
    assert_eq!(
        c.txn_offset_commit(other, group(p), &offsets(9)),
        vec![NOT_COORDINATOR]
    );
}

// KIP-890 part 1 (TransactionCoordinator `handleVerifyPartitionsInTransaction`): each transaction
// must add its partitions again; a transactional batch to a partition of the previous transaction,
// after its commit, is INVALID_TXN_STATE (Produce v10 and below). Once added, TV1 sequences simply
// continue after the same-epoch marker.
#[test]
fn produce_to_a_partition_not_added_to_this_transaction_is_rejected() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0], NOW);
    assert_eq!(txn_send(&mut c, 0, p.pid, p.epoch, 0, 2).error_code, NONE);
    assert_eq!(end(&mut c, p, true), NONE);
    let rejected = txn_send(&mut c, 0, p.pid, p.epoch, 2, 1);
    assert_eq!(rejected.error_code, INVALID_TXN_STATE);
    assert_eq!(
        rejected.error_message.as_deref(),
        Some("Partition was not added to the transaction")
    );
    add_partitions(&mut c, p, &[0], NOW);
    assert_eq!(txn_send(&mut c, 0, p.pid, p.epoch, 2, 1).error_code, NONE);
}
