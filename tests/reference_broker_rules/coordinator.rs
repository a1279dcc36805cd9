//! Coordinator requests: InitProducerId (unique producer ids, epoch bumps and fencing, KIP-360),
//! EndTxn and its state table, AddPartitionsToTxn, transaction timeouts, and a transaction
//! coordinator that moves.

use kacrab::testkit::broker::error_codes::*;
use kacrab::testkit::broker::{BrokerRules, Cluster, TransactionState};

use super::{
    add_partitions, cluster, end, marker_type_and_coordinator_epoch, markers, produce, state,
    txn_producer, txn_send, TxnProducer, GROUP, NOW, TIMEOUT_MS, TOPIC, TXN,
};

// TransactionCoordinator `handleInitProducerId`: an idempotent producer always gets a new id at
// epoch 0; ids are never reused, and transactional ids draw from the same counter.
#[test]
fn producer_ids_are_unique_and_never_reused() {
    let mut c = cluster();
    let mut seen = std::collections::HashSet::new();
    for i in 0..100 {
        let init = if i % 10 == 0 {
            c.init_producer_id(Some(&format!("tx-{i}")), 60_000, -1, -1, NOW)
        } else {
            c.init_producer_id(None, 60_000, -1, -1, NOW)
        };
        assert_eq!((init.error_code, init.producer_epoch), (NONE, 0));
        assert!(
            seen.insert(init.producer_id),
            "id {} reused",
            init.producer_id
        );
    }
    // Naming an old id (KIP-360) does not bring it back for an idempotent producer.
    let first = *seen.iter().min().unwrap();
    let again = c.init_producer_id(None, 60_000, first, 0, NOW);
    assert!(seen.insert(again.producer_id));
    assert_eq!(c.producer_ids_issued(), 101);
}

// KafkaApis `handleInitProducerIdRequest`: naming only one of producer id / epoch is
// INVALID_REQUEST; TransactionCoordinator: an empty transactional id is INVALID_REQUEST, a timeout
// above transaction.max.timeout.ms is INVALID_TRANSACTION_TIMEOUT.
#[test]
fn init_producer_id_rejects_malformed_requests() {
    let mut c = cluster();
    assert_eq!(
        c.init_producer_id(None, 60_000, 5, -1, NOW).error_code,
        INVALID_REQUEST
    );
    assert_eq!(
        c.init_producer_id(None, 60_000, -1, 0, NOW).error_code,
        INVALID_REQUEST
    );
    assert_eq!(
        c.init_producer_id(Some(""), 60_000, -1, -1, NOW).error_code,
        INVALID_REQUEST
    );
    assert_eq!(
        c.init_producer_id(Some("tx"), 900_001, -1, -1, NOW)
            .error_code,
        INVALID_TRANSACTION_TIMEOUT
    );
    assert_eq!(
        c.init_producer_id(Some("tx"), 0, -1, -1, NOW).error_code,
        INVALID_TRANSACTION_TIMEOUT
    );
}

// TransactionMetadata `prepareIncrementProducerEpoch`: a second InitProducerId bumps the epoch of
// the same id and the old epoch is fenced on produce; KIP-360 with the current epoch bumps, with
// the last epoch returns the current one, with an older one is PRODUCER_FENCED.
#[test]
fn transactional_init_producer_id_bumps_the_epoch_and_fences_the_old_one() {
    let mut c = cluster();
    let first = c.init_producer_id(Some("tx"), 60_000, -1, -1, NOW);
    assert_eq!((first.error_code, first.producer_epoch), (NONE, 0));
    let pid = first.producer_id;
    assert_eq!(produce(&mut c, pid, 0, 0, 1).error_code, NONE);
    let second = c.init_producer_id(Some("tx"), 60_000, -1, -1, NOW);
    assert_eq!((second.producer_id, second.producer_epoch), (pid, 1));
    assert_eq!(produce(&mut c, pid, 1, 0, 1).error_code, NONE);
    assert_eq!(
        produce(&mut c, pid, 0, 1, 1).error_code,
        INVALID_PRODUCER_EPOCH
    );

    let bumped = c.init_producer_id(Some("tx"), 60_000, pid, 1, NOW);
    assert_eq!((bumped.error_code, bumped.producer_epoch), (NONE, 2));
    let retried = c.init_producer_id(Some("tx"), 60_000, pid, 1, NOW);
    assert_eq!(
        (retried.error_code, retried.producer_epoch),
        (NONE, 2),
        "retry of the bump"
    );
    let fenced = c.init_producer_id(Some("tx"), 60_000, pid, 0, NOW);
    assert_eq!(fenced.error_code, PRODUCER_FENCED);
    let wrong_id = c.init_producer_id(Some("tx"), 60_000, pid + 100, 2, NOW);
    assert_eq!(wrong_id.error_code, PRODUCER_FENCED);
}

// TransactionCoordinator `prepareInitProducerIdTransit` (Ongoing): a second InitProducerId fences
// the open transaction: CONCURRENT_TRANSACTIONS, ABORT markers at epoch + 1, and the retry bumps
// again from CompleteAbort. The old epoch is then INVALID_PRODUCER_EPOCH on produce,
// PRODUCER_FENCED at the coordinator, also for KIP-360; TransactionCoordinatorTest
// `shouldAbortTransactionOnHandleInitPidWhenExistingTransactionInOngoingState`.
#[test]
fn second_init_producer_id_fences_and_aborts_the_open_transaction() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0], NOW);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 2);

    let fence = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
    assert_eq!(
        (fence.error_code, fence.producer_epoch),
        (CONCURRENT_TRANSACTIONS, -1)
    );
    let meta = c.transaction_metadata(TXN).unwrap();
    assert_eq!(
        (meta.state, meta.producer_epoch),
        (TransactionState::CompleteAbort, p.epoch + 1)
    );
    let m = markers(&c, 0);
    assert_eq!((m.len(), m[0].producer_epoch), (1, p.epoch + 1));
    assert_eq!(marker_type_and_coordinator_epoch(&m[0]).0, 0);
    assert_eq!(c.aborted_transactions(TOPIC, 0).len(), 1);
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(3));

    let retry = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
    assert_eq!(
        (retry.error_code, retry.producer_id, retry.producer_epoch),
        (NONE, p.pid, p.epoch + 2)
    );

    // The zombie at the old epoch.
    assert_eq!(
        txn_send(&mut c, 0, p.pid, p.epoch, 2, 1).error_code,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(end(&mut c, p, true), PRODUCER_FENCED);
    assert_eq!(add_partitions(&mut c, p, &[0], NOW), vec![PRODUCER_FENCED]);
    let kip360 = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, p.pid, p.epoch, NOW);
    assert_eq!(kip360.error_code, PRODUCER_FENCED);
}

// TransactionCoordinator `endTransactionWithTV1`: the state table of a retried or wrong EndTxn.
#[test]
fn retried_end_txn_answers_none_and_the_wrong_end_invalid_txn_state() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(
        end(&mut c, p, true),
        INVALID_TXN_STATE,
        "Empty: nothing to end"
    );
    add_partitions(&mut c, p, &[0], NOW);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    let wrong_pid = TxnProducer {
        pid: p.pid + 1,
        ..p
    };
    assert_eq!(end(&mut c, wrong_pid, true), INVALID_PRODUCER_ID_MAPPING);
    let wrong_epoch = TxnProducer {
        epoch: p.epoch + 1,
        ..p
    };
    assert_eq!(end(&mut c, wrong_epoch, true), PRODUCER_FENCED);
    assert_eq!(end(&mut c, p, true), NONE);
    let log_len = c.partition_log(TOPIC, 0).len();
    assert_eq!(end(&mut c, p, true), NONE, "retry of the commit");
    assert_eq!(
        c.partition_log(TOPIC, 0).len(),
        log_len,
        "a retry writes no marker"
    );
    assert_eq!(
        end(&mut c, p, false),
        INVALID_TXN_STATE,
        "abort after a commit"
    );
    assert_eq!(
        c.transaction_metadata(TXN).unwrap().producer_epoch,
        p.epoch,
        "TV1 keeps the epoch"
    );

    add_partitions(&mut c, p, &[0], NOW);
    assert_eq!(end(&mut c, p, false), NONE);
    assert_eq!(end(&mut c, p, false), NONE, "retry of the abort");
    assert_eq!(
        end(&mut c, p, true),
        INVALID_TXN_STATE,
        "commit after an abort"
    );
}

// TransactionCoordinator: while the markers of an ended transaction are being written
// (PrepareCommit), the next AddPartitionsToTxn, a retried EndTxn and InitProducerId get
// CONCURRENT_TRANSACTIONS, the other end INVALID_TXN_STATE, verification of a produce
// NOT_ENOUGH_REPLICAS; the LSO stays held until the markers land; TransactionCoordinatorTest
// `shouldRespondWithConcurrentTransactionsOnAddPartitionsWhenStateIsPrepareCommit`.
#[test]
fn concurrent_transactions_while_markers_are_pending() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0], NOW);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    c.hold_transaction_markers(true);
    assert_eq!(
        end(&mut c, p, true),
        NONE,
        "answered once PrepareCommit is recorded"
    );
    assert_eq!(state(&c), TransactionState::PrepareCommit);
    assert_eq!(c.held_transaction_markers(), 1);
    assert!(markers(&c, 0).is_empty());
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(0));

    assert_eq!(
        add_partitions(&mut c, p, &[1], NOW),
        vec![CONCURRENT_TRANSACTIONS]
    );
    assert_eq!(end(&mut c, p, true), CONCURRENT_TRANSACTIONS);
    assert_eq!(end(&mut c, p, false), INVALID_TXN_STATE);
    let init = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
    assert_eq!(init.error_code, CONCURRENT_TRANSACTIONS);
    let verified = txn_send(&mut c, 1, p.pid, p.epoch, 0, 1);
    assert_eq!(verified.error_code, NOT_ENOUGH_REPLICAS);

    assert_eq!(c.release_transaction_markers(NOW), 1);
    assert_eq!(state(&c), TransactionState::CompleteCommit);
    assert_eq!(markers(&c, 0).len(), 1);
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(2));
    assert_eq!(add_partitions(&mut c, p, &[1], NOW), vec![NONE]);
}

// TransactionCoordinator `abortTimedOutTransactions` (TV1): a transaction open longer than its
// timeout is fenced (epoch + 1, `lastProducerEpoch` -1) and aborted with markers at the new epoch;
// its producer is fenced for good, also for KIP-360; TransactionCoordinatorTest
// `shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch`. The abort is the coordinator's, so
// it follows the cluster's finalized transaction version: TV1 here (TV2 in
// reference_broker_tv2.rs).
#[test]
fn timed_out_transaction_is_aborted_and_its_producer_fenced() {
    let rules = BrokerRules {
        transaction_version: 1,
        ..BrokerRules::default()
    };
    let mut c = Cluster::new(&[1, 2, 3], rules);
    assert!(c.create_topic(TOPIC, &[1, 2]));
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0], NOW);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    let deadline = NOW + i64::from(TIMEOUT_MS);
    assert_eq!(
        c.abort_timed_out_transactions(deadline),
        0,
        "not yet: start + timeout < now"
    );
    assert_eq!(c.abort_timed_out_transactions(deadline + 1), 1);
    let meta = c.transaction_metadata(TXN).unwrap();
    assert_eq!(
        (meta.state, meta.producer_epoch, meta.last_producer_epoch),
        (TransactionState::CompleteAbort, p.epoch + 1, -1)
    );
    let m = markers(&c, 0);
    assert_eq!((m.len(), m[0].producer_epoch), (1, p.epoch + 1));
    assert_eq!(c.aborted_transactions(TOPIC, 0).len(), 1);
    assert_eq!(
        c.abort_timed_out_transactions(deadline + 2),
        0,
        "nothing open any more"
    );

    assert_eq!(end(&mut c, p, false), PRODUCER_FENCED);
    assert_eq!(
        txn_send(&mut c, 0, p.pid, p.epoch, 1, 1).error_code,
        INVALID_PRODUCER_EPOCH
    );
    let kip360 = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, p.pid, p.epoch, NOW);
    assert_eq!(kip360.error_code, PRODUCER_FENCED);
    let fresh = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
    assert_eq!(
        (fresh.error_code, fresh.producer_epoch),
        (NONE, p.epoch + 2)
    );
}

// The timeout clock starts when the transaction does (its first AddPartitionsToTxn), not at
// InitProducerId, and an idle producer with no transaction is never aborted.
#[test]
fn transaction_timeout_counts_from_the_first_added_partition() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(
        c.abort_timed_out_transactions(NOW + 10 * i64::from(TIMEOUT_MS)),
        0
    );
    let start = NOW + 5 * i64::from(TIMEOUT_MS);
    add_partitions(&mut c, p, &[0], start);
    assert_eq!(
        c.abort_timed_out_transactions(start + i64::from(TIMEOUT_MS)),
        0
    );
    assert_eq!(
        c.abort_timed_out_transactions(start + i64::from(TIMEOUT_MS) + 1),
        1
    );
}

// TransactionStateManager `getAndMaybeAddTransactionState`: after the coordinator moves, the old
// broker answers NOT_COORDINATOR to every transaction API and the new one serves the same state;
// markers carry the new coordinator epoch.
#[test]
fn moved_transaction_coordinator_leaves_not_coordinator_behind() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let old = p.coordinator;
    let new = c.broker_ids().into_iter().find(|&b| b != old).unwrap();
    c.move_transaction_coordinator(TXN, new);
    assert_eq!(c.transaction_coordinator(TXN), new);
    assert_eq!(c.coordinator_epoch(), 1);
    assert_eq!(
        c.init_producer_id_at(old, Some(TXN), TIMEOUT_MS, -1, -1, NOW)
            .error_code,
        NOT_COORDINATOR
    );
    assert_eq!(add_partitions(&mut c, p, &[0], NOW), vec![NOT_COORDINATOR]);
    assert_eq!(
        c.add_offsets_to_txn(old, TXN, p.pid, p.epoch, GROUP, NOW),
        NOT_COORDINATOR
    );
    let moved = TxnProducer {
        coordinator: new,
        ..p
    };
    assert_eq!(add_partitions(&mut c, moved, &[0], NOW), vec![NONE]);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    assert_eq!(end(&mut c, p, true), NOT_COORDINATOR);
    assert_eq!(end(&mut c, moved, true), NONE);
    assert_eq!(
        marker_type_and_coordinator_epoch(&markers(&c, 0)[0]),
        (1, 1)
    );
    assert_eq!(
        c.producer_state(TOPIC, 0, p.pid).unwrap().coordinator_epoch,
        1
    );
    // An idempotent producer may still ask any broker.
    assert_eq!(
        c.init_producer_id_at(old, None, TIMEOUT_MS, -1, -1, NOW)
            .error_code,
        NONE
    );
}

// TransactionCoordinator `onElection` and TransactionMarkerChannelManager
// `removeMarkersForTxnTopicPartition`: a coordinator that moves while an ended transaction's
// markers are unwritten (PrepareCommit) leaves them to the new coordinator, which writes them under
// its own coordinator epoch; the transaction completes and the next one can start at the new
// coordinator.
#[test]
fn a_coordinator_moving_in_the_middle_of_end_txn_leaves_the_markers_to_the_new_one() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    add_partitions(&mut c, p, &[0, 1], NOW);
    txn_send(&mut c, 0, p.pid, p.epoch, 0, 1);
    c.hold_transaction_markers(true);
    assert_eq!(end(&mut c, p, true), NONE);
    assert_eq!(state(&c), TransactionState::PrepareCommit);

    let new = c
        .broker_ids()
        .into_iter()
        .find(|&b| b != p.coordinator)
        .unwrap();
    c.move_transaction_coordinator(TXN, new);
    let moved = TxnProducer {
        coordinator: new,
        ..p
    };
    assert_eq!(
        end(&mut c, moved, true),
        CONCURRENT_TRANSACTIONS,
        "the new coordinator loaded the prepared transaction"
    );
    assert_eq!(c.release_transaction_markers(NOW), 1);
    assert_eq!(state(&c), TransactionState::CompleteCommit);
    for partition in [0, 1] {
        let m = markers(&c, partition);
        assert_eq!(m.len(), 1, "p{partition}: one marker");
        assert_eq!(
            marker_type_and_coordinator_epoch(&m[0]),
            (1, 1),
            "p{partition}: a COMMIT under the new coordinator epoch"
        );
    }
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(2));
    assert_eq!(add_partitions(&mut c, moved, &[0], NOW), vec![NONE]);
}

// KafkaApis `handleAddPartitionsToTransactionRequest`: an unknown partition fails, the others are
// OPERATION_NOT_ATTEMPTED and nothing is added. TransactionCoordinator: an unknown transactional id
// or another producer id is INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED.
#[test]
fn add_partitions_to_txn_rejects_unknown_partitions_and_other_producers() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let partitions = [(TOPIC.to_string(), 0), (TOPIC.to_string(), 9)];
    assert_eq!(
        c.add_partitions_to_txn(p.coordinator, TXN, p.pid, p.epoch, &partitions, NOW),
        vec![OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION]
    );
    assert_eq!(state(&c), TransactionState::Empty);
    assert_eq!(
        add_partitions(
            &mut c,
            TxnProducer {
                pid: p.pid + 1,
                ..p
            },
            &[0],
            NOW
        ),
        vec![INVALID_PRODUCER_ID_MAPPING]
    );
    assert_eq!(
        add_partitions(
            &mut c,
            TxnProducer {
                epoch: p.epoch + 1,
                ..p
            },
            &[0],
            NOW
        ),
        vec![PRODUCER_FENCED]
    );
    let unknown = c.transaction_coordinator("nobody");
    assert_eq!(
        c.add_partitions_to_txn(unknown, "nobody", p.pid, p.epoch, &partitions[..1], NOW),
        vec![INVALID_PRODUCER_ID_MAPPING]
    );
}
