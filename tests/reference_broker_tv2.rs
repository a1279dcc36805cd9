//! Kafka 4's transactions V2 (KIP-890 part 2) in the reference broker's sans-IO core: raw
//! requests at the TV2 versions (Produce v12, EndTxn v5, TxnOffsetCommit v5) against a cluster
//! whose finalized `transaction.version` is 2 (the default), and the TV1 versions against the
//! same cluster. Each test names the Kafka class, and Kafka's own test where there is one,
//! behind its rule.
#![cfg(feature = "testkit")]

use kacrab::testkit::batch::TestBatch;
use kacrab::testkit::broker::error_codes::*;
use kacrab::testkit::broker::{
    offsets_partition_for, BrokerRules, Cluster, EndTxnResult, ProducePartitionResult, StoredBatch,
    TransactionState, TxnOffsetCommitGroup, TxnOffsetCommitInput, CONSUMER_OFFSETS_TOPIC,
    READ_COMMITTED,
};

const NOW: i64 = 1_700_000_000_000;
const TOPIC: &str = "t";
const TXN: &str = "tx";
const GROUP: &str = "g";
const TIMEOUT_MS: i32 = 60_000;
/// The first TV2 versions.
const PRODUCE_V12: i16 = 12;
const END_TXN_V5: i16 = 5;
const TXN_OFFSET_COMMIT_V5: i16 = 5;

fn cluster_at(transaction_version: i16) -> Cluster {
    let rules = BrokerRules {
        transaction_version,
        ..BrokerRules::default()
    };
    let mut cluster = Cluster::new(&[1, 2, 3], rules);
    assert!(cluster.create_topic(TOPIC, &[1, 2]));
    cluster
}

fn cluster() -> Cluster {
    let cluster = cluster_at(BrokerRules::default().transaction_version);
    assert_eq!(
        cluster.finalized_transaction_version().0,
        2,
        "TV2 by default"
    );
    cluster
}

/// A transactional producer: its id, epoch and coordinator.
#[derive(Debug, Clone, Copy)]
struct TxnProducer {
    pid: i64,
    epoch: i16,
    coordinator: i32,
}

fn txn_producer(c: &mut Cluster) -> TxnProducer {
    let coordinator = c.transaction_coordinator(TXN);
    let init = c.init_producer_id_at(coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
    assert_eq!(init.error_code, NONE);
    TxnProducer {
        pid: init.producer_id,
        epoch: init.producer_epoch,
        coordinator,
    }
}

/// A transactional batch of one record to `partition` at Produce `version`, sent to its leader.
fn send_at(
    c: &mut Cluster,
    version: i16,
    partition: i32,
    (pid, epoch): (i64, i16),
    seq: i32,
) -> ProducePartitionResult {
    let mut b = TestBatch::idempotent(pid, epoch, seq, 1);
    b.transactional = true;
    b.base_timestamp = NOW;
    let bytes = b.encode();
    let leader = c.leader(TOPIC, partition).unwrap().0;
    let input = [kacrab::testkit::broker::ProduceInput {
        topic: TOPIC,
        partition,
        records: Some(&bytes),
    }];
    c.produce_request_at_version(leader, version, -1, Some(TXN), &input, NOW)
        .pop()
        .unwrap()
}

fn send_v12(c: &mut Cluster, partition: i32, p: TxnProducer, seq: i32) -> ProducePartitionResult {
    send_at(c, PRODUCE_V12, partition, (p.pid, p.epoch), seq)
}

fn end_v5(c: &mut Cluster, p: TxnProducer, epoch: i16, commit: bool) -> EndTxnResult {
    c.end_txn_at_version(p.coordinator, END_TXN_V5, TXN, p.pid, epoch, commit, NOW)
}

fn state(c: &Cluster) -> TransactionState {
    c.transaction_metadata(TXN).unwrap().state
}

fn markers(c: &Cluster, partition: i32) -> Vec<StoredBatch> {
    c.partition_log(TOPIC, partition)
        .iter()
        .filter(|b| b.control)
        .cloned()
        .collect()
}

/// The control record type of a stored marker: 1 COMMIT, 0 ABORT (`ControlRecordType`).
fn marker_type(marker: &StoredBatch) -> i16 {
    let record = &marker.bytes[61..];
    i16::from_be_bytes([record[7], record[8]])
}

fn ok(producer_id: i64, producer_epoch: i16) -> EndTxnResult {
    EndTxnResult {
        error_code: NONE,
        producer_id,
        producer_epoch,
    }
}

fn error(error_code: i16) -> EndTxnResult {
    EndTxnResult {
        error_code,
        producer_id: -1,
        producer_epoch: -1,
    }
}

// AddPartitionsToTxnManager `produceRequestVersionToTransactionSupportedOperation` (v12+:
// `addPartition`), ReplicaManager `maybeSendPartitionsToTransactionCoordinator`,
// TransactionCoordinator `handleAddPartitionsToTransaction`: a Produce v12 transactional batch
// adds its partition to the transaction, which starts there; v11 only verifies.
#[test]
fn tv2_produce_v12_adds_the_partition_implicitly() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let v11 = send_at(&mut c, 11, 1, (p.pid, p.epoch), 0);
    assert_eq!(
        (v11.error_code, v11.appended),
        (INVALID_TXN_STATE, false),
        "Produce v11 needs AddPartitionsToTxn first"
    );
    assert_eq!(state(&c), TransactionState::Empty);

    let v12 = send_v12(&mut c, 0, p, 0);
    assert_eq!((v12.error_code, v12.appended), (NONE, true));
    let metadata = c.transaction_metadata(TXN).unwrap();
    assert_eq!(metadata.state, TransactionState::Ongoing);
    assert!(metadata.topic_partitions.contains(&(TOPIC.to_string(), 0)));
    assert_eq!(metadata.txn_start_ms, NOW, "the transaction's clock starts");
    assert_eq!(c.last_stable_offset(TOPIC, 0), Some(0), "open transaction");
    assert_eq!(send_v12(&mut c, 0, p, 1).error_code, NONE);
}

// ProducerAppendInfo `checkSequence` (KAFKA-18202), UnifiedLogTest
// `testNonZeroSequenceOnFirstAppendNonZeroEpoch`: the TV2 verification entry makes the first
// transactional write of an epoch start at sequence 0, where a TV1 write of an unknown producer
// may start anywhere.
#[test]
fn tv2_first_transactional_write_must_start_at_sequence_zero() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let late = send_v12(&mut c, 0, p, 3);
    assert_eq!(
        (late.error_code, late.appended),
        (OUT_OF_ORDER_SEQUENCE_NUMBER, false)
    );
    assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);

    // TV1 (Produce v11 after AddPartitionsToTxn) on a partition the producer never wrote.
    let added = c.add_partitions_to_txn(
        p.coordinator,
        TXN,
        p.pid,
        p.epoch,
        &[(TOPIC.to_string(), 1)],
        NOW,
    );
    assert_eq!(added, vec![NONE]);
    assert_eq!(send_at(&mut c, 11, 1, (p.pid, p.epoch), 3).error_code, NONE);
}

// TransactionCoordinator `endTransaction` and TransactionMetadata `prepareAbortOrCommit` /
// `prepareComplete` (TV2): the commit bumps the epoch; the markers carry the bumped epoch; the
// answer carries the producer id and the new epoch; `lastProducerEpoch` keeps the old one.
#[test]
fn tv2_end_txn_commit_bumps_the_epoch_and_returns_it() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);
    assert_eq!(end_v5(&mut c, p, p.epoch, true), ok(p.pid, p.epoch + 1));
    let metadata = c.transaction_metadata(TXN).unwrap();
    assert_eq!(metadata.state, TransactionState::CompleteCommit);
    assert_eq!(
        (metadata.producer_epoch, metadata.last_producer_epoch),
        (p.epoch + 1, p.epoch)
    );
    let marker = &markers(&c, 0)[0];
    assert_eq!(
        (
            marker_type(marker),
            marker.producer_id,
            marker.producer_epoch
        ),
        (1, p.pid, p.epoch + 1)
    );
    let read = c.fetch(1, TOPIC, 0, 0, 1 << 20, READ_COMMITTED, -1);
    assert_eq!(read.last_stable_offset, 2, "committed up to the marker");
}

// TransactionMetadata `prepareAbortOrCommit` (TV2): an abort bumps the epoch too, and the abort
// markers carry it.
#[test]
fn tv2_end_txn_abort_bumps_the_epoch_and_writes_abort_markers_at_it() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);
    assert_eq!(send_v12(&mut c, 1, p, 0).error_code, NONE);
    assert_eq!(end_v5(&mut c, p, p.epoch, false), ok(p.pid, p.epoch + 1));
    assert_eq!(state(&c), TransactionState::CompleteAbort);
    for partition in [0, 1] {
        let m = markers(&c, partition);
        assert_eq!(m.len(), 1, "p{partition}");
        assert_eq!(
            (marker_type(&m[0]), m[0].producer_epoch),
            (0, p.epoch + 1),
            "p{partition}"
        );
    }
    assert_eq!(c.aborted_transactions(TOPIC, 0).len(), 1);
}

// TransactionCoordinator `endTransaction` (TV2 `retryOnEpochBump`), TransactionCoordinatorTest
// `testEndTxnWhenStatusIsCompleteCommitAndResultIsCommitInV2`,
// `shouldReturnInvalidTxnRequestOnEndTxnV2IfNotEndTxnV2Retry`: a retry of the end at the
// previous epoch is answered NONE with the stored (new) epoch and writes nothing; the other end
// at that epoch is INVALID_TXN_STATE; the same end at the new epoch is not a retry
// (INVALID_TXN_STATE); any other epoch is PRODUCER_FENCED. While the markers are still being
// written every end of this producer id is CONCURRENT_TRANSACTIONS, whatever its epoch or
// result (the pending transition is checked first, KAFKA-18464).
#[test]
fn tv2_end_txn_retry_at_the_previous_epoch_answers_the_new_epoch() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);
    c.hold_transaction_markers(true);
    assert_eq!(end_v5(&mut c, p, 0, true), ok(p.pid, 1));
    assert_eq!(state(&c), TransactionState::PrepareCommit);
    assert_eq!(end_v5(&mut c, p, 0, true), error(CONCURRENT_TRANSACTIONS));
    assert_eq!(end_v5(&mut c, p, 0, false), error(CONCURRENT_TRANSACTIONS));
    assert_eq!(end_v5(&mut c, p, 1, true), error(CONCURRENT_TRANSACTIONS));
    assert_eq!(end_v5(&mut c, p, 3, true), error(CONCURRENT_TRANSACTIONS));
    c.release_transaction_markers(NOW);

    let log_end = c.high_watermark(TOPIC, 0);
    assert_eq!(end_v5(&mut c, p, 0, true), ok(p.pid, 1), "retry");
    assert_eq!(c.high_watermark(TOPIC, 0), log_end, "no second marker");
    assert_eq!(end_v5(&mut c, p, 0, false), error(INVALID_TXN_STATE));
    assert_eq!(end_v5(&mut c, p, 1, true), error(INVALID_TXN_STATE));
    assert_eq!(end_v5(&mut c, p, 3, true), error(PRODUCER_FENCED));
    assert_eq!(state(&c), TransactionState::CompleteCommit);
}

// TransactionCoordinator `endTransaction` (KAFKA-18464, Kafka 4.0): a transaction whose
// markers are still being written has a pending transition (PrepareCommit/PrepareAbort pending
// CompleteCommit/CompleteAbort), and that is answered CONCURRENT_TRANSACTIONS before the TV2
// epoch check. A producer that adopted the bumped epoch and ends its next transaction (an abort
// with nothing written yet, or a commit) before the markers are out is told to retry, not
// fenced; once they are written the same request ends the next transaction.
#[test]
fn tv2_end_txn_of_the_next_transaction_while_the_previous_writes_markers_is_concurrent_transactions(
) {
    for (first_commit, next_commit) in [(false, false), (true, false), (true, true)] {
        let mut c = cluster();
        let p = txn_producer(&mut c);
        assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);
        c.hold_transaction_markers(true);
        let end = end_v5(&mut c, p, p.epoch, first_commit);
        assert_eq!(end, ok(p.pid, p.epoch + 1));
        let next = TxnProducer {
            epoch: end.producer_epoch,
            ..p
        };
        let case = format!("{first_commit} then {next_commit}");
        assert_eq!(
            end_v5(&mut c, next, next.epoch, next_commit),
            error(CONCURRENT_TRANSACTIONS),
            "{case}"
        );
        assert!(c.transaction_is_completing(TXN), "{case}");
        c.release_transaction_markers(NOW);
        if next_commit {
            assert_eq!(send_v12(&mut c, 1, next, 0).error_code, NONE, "{case}");
        }
        assert_eq!(
            end_v5(&mut c, next, next.epoch, next_commit),
            ok(p.pid, next.epoch + 1),
            "{case}"
        );
    }
}

// TransactionCoordinator `endTransaction` (TV2): an abort with nothing added is allowed from
// Empty, CompleteCommit and CompleteAbort (TransactionMetadata `allowedEmptyAbort`); it bumps
// the epoch and has no marker to write. A commit with nothing added stays INVALID_TXN_STATE.
#[test]
fn tv2_end_txn_abort_with_nothing_added_bumps_the_epoch_without_markers() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(end_v5(&mut c, p, 0, true), error(INVALID_TXN_STATE));
    c.hold_transaction_markers(true);
    assert_eq!(end_v5(&mut c, p, 0, false), ok(p.pid, 1));
    assert_eq!(
        state(&c),
        TransactionState::CompleteAbort,
        "nothing to hold"
    );
    assert_eq!(
        end_v5(&mut c, p, 1, false),
        ok(p.pid, 2),
        "from CompleteAbort"
    );
    assert!(markers(&c, 0).is_empty() && markers(&c, 1).is_empty());
}

// TransactionCoordinator `endTransaction` on an exhausted epoch, TransactionMetadata
// `prepareComplete`, TransactionCoordinatorTest
// `shouldReturnOkOnEndTxnV2IfEndTxnV2RetryEpochOverflow`: the end at epoch 32766 moves the
// transactional id to a new producer id at epoch 0, which the answer already carries; the
// markers carry 32767 on the old id; a retry naming the old id at 32766 is answered with the
// new id.
#[test]
fn tv2_end_txn_on_an_exhausted_epoch_moves_to_a_new_producer_id() {
    let mut c = cluster();
    let mut p = txn_producer(&mut c);
    while p.epoch < i16::MAX - 1 {
        p = txn_producer(&mut c);
    }
    let old_pid = p.pid;
    assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);
    let end = end_v5(&mut c, p, p.epoch, true);
    assert_eq!((end.error_code, end.producer_epoch), (NONE, 0));
    assert_ne!(end.producer_id, old_pid);
    let marker = &markers(&c, 0)[0];
    assert_eq!(
        (marker.producer_id, marker.producer_epoch),
        (old_pid, i16::MAX)
    );
    let metadata = c.transaction_metadata(TXN).unwrap();
    assert_eq!(
        (
            metadata.producer_id,
            metadata.producer_epoch,
            metadata.prev_producer_id
        ),
        (end.producer_id, 0, old_pid)
    );
    assert_eq!(end_v5(&mut c, p, i16::MAX - 1, true), end, "overflow retry");
    let next = TxnProducer {
        pid: end.producer_id,
        epoch: 0,
        coordinator: p.coordinator,
    };
    assert_eq!(send_v12(&mut c, 0, next, 0).error_code, NONE);
}

// UnifiedLog `maybeStartTransactionVerification` (early stale-epoch check, KAFKA-18042),
// UnifiedLogTest `testStaleProducerEpochReturnsRecoverableErrorForTV2Clients`: once the marker
// at the bumped epoch is on the partition, a late write of the ended transaction is
// INVALID_PRODUCER_EPOCH, not INVALID_TXN_STATE; on a partition without the marker the
// coordinator's PRODUCER_FENCED reaches the producer as INVALID_PRODUCER_EPOCH too.
#[test]
fn tv2_produce_of_a_fenced_epoch_is_refused() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);
    assert_eq!(c.abort_timed_out_transactions(NOW + 120_000), 1);
    let log_end = c.high_watermark(TOPIC, 0);
    let late = send_v12(&mut c, 0, p, 1);
    assert_eq!(
        (late.error_code, late.log_start_offset),
        (INVALID_PRODUCER_EPOCH, -1)
    );
    let elsewhere = send_v12(&mut c, 1, p, 0);
    assert_eq!(elsewhere.error_code, INVALID_PRODUCER_EPOCH);
    assert_eq!(c.high_watermark(TOPIC, 0), log_end, "nothing written");
    assert!(c.partition_log(TOPIC, 1).is_empty());
}

// ProducerStateManagerTest `testOutOfSequenceAfterControlRecordEpochBump`: after a TV2 marker
// the producer continues at the bumped epoch from sequence 0; a sequence past 0 is out of order
// and the old epoch is refused.
#[test]
fn tv2_next_transaction_starts_at_the_bumped_epoch_and_sequence_zero() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);
    assert_eq!(send_v12(&mut c, 0, p, 1).error_code, NONE);
    let end = end_v5(&mut c, p, p.epoch, true);
    let next = TxnProducer {
        epoch: end.producer_epoch,
        ..p
    };
    assert_eq!(
        send_v12(&mut c, 0, next, 2).error_code,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    assert_eq!(send_v12(&mut c, 0, p, 2).error_code, INVALID_PRODUCER_EPOCH);
    assert_eq!(send_v12(&mut c, 0, next, 0).error_code, NONE);
    assert_eq!(state(&c), TransactionState::Ongoing);
}

// ReplicaManager `handleProduceAppend` (`maybeRetryOnConcurrentTransactions`), ReplicaManagerTest
// `testTransactionAddPartitionRetry`: while the previous transaction's markers are being written
// the implicit add is CONCURRENT_TRANSACTIONS (the core answers at once; the TCP face first
// waits up to 100 ms for the markers), and nothing is written.
#[test]
fn tv2_produce_while_the_previous_end_writes_markers_is_concurrent_transactions() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);
    c.hold_transaction_markers(true);
    let end = end_v5(&mut c, p, p.epoch, true);
    let next = TxnProducer {
        epoch: end.producer_epoch,
        ..p
    };
    assert!(c.transaction_is_completing(TXN));
    let busy = send_v12(&mut c, 1, next, 0);
    assert_eq!(
        (busy.error_code, busy.appended),
        (CONCURRENT_TRANSACTIONS, false)
    );
    assert!(c.partition_log(TOPIC, 1).is_empty());
    c.release_transaction_markers(NOW);
    assert!(!c.transaction_is_completing(TXN));
    assert_eq!(send_v12(&mut c, 1, next, 0).error_code, NONE);
}

// TransactionCoordinator `abortTimedOutTransactions` with the cluster's transaction version and
// `endTransaction` (TV2 epoch fence): the timeout aborts at E+1 keeping E as
// `lastProducerEpoch`, so the TV2 producer's own EndTxn(abort, E) is a retry answered with E+1
// and the producer carries on. On a TV1 cluster the same abort leaves -1 as the last epoch and
// a TV1 producer's EndTxn(abort, E) is PRODUCER_FENCED (TransactionCoordinatorTest
// `shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch`).
#[test]
fn tv2_timed_out_transaction_lets_its_producer_retry_the_abort() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);
    assert_eq!(c.abort_timed_out_transactions(NOW + 120_000), 1);
    let metadata = c.transaction_metadata(TXN).unwrap();
    assert_eq!(
        (metadata.producer_epoch, metadata.last_producer_epoch),
        (1, 0)
    );
    assert_eq!(markers(&c, 0)[0].producer_epoch, 1);
    assert_eq!(end_v5(&mut c, p, 0, false), ok(p.pid, 1));
    assert_eq!(end_v5(&mut c, p, 0, true), error(INVALID_TXN_STATE));
    let next = TxnProducer { epoch: 1, ..p };
    assert_eq!(send_v12(&mut c, 0, next, 0).error_code, NONE);

    let mut c = cluster_at(0);
    let p = txn_producer(&mut c);
    c.add_partitions_to_txn(
        p.coordinator,
        TXN,
        p.pid,
        p.epoch,
        &[(TOPIC.to_string(), 0)],
        NOW,
    );
    assert_eq!(send_at(&mut c, 11, 0, (p.pid, p.epoch), 0).error_code, NONE);
    assert_eq!(c.abort_timed_out_transactions(NOW + 120_000), 1);
    let metadata = c.transaction_metadata(TXN).unwrap();
    assert_eq!(
        (metadata.producer_epoch, metadata.last_producer_epoch),
        (1, -1)
    );
    assert_eq!(
        c.end_txn_at_version(p.coordinator, 4, TXN, p.pid, 0, false, NOW),
        error(PRODUCER_FENCED)
    );
}

// TransactionCoordinator `handleInitProducerId` (Ongoing: `prepareFenceProducerEpoch`, then
// `endTransaction` with the cluster's transaction version) and TransactionMetadata
// `prepareIncrementProducerEpoch`: a new instance fences the open transaction with abort
// markers at E+1 and is told CONCURRENT_TRANSACTIONS. On a TV2 cluster E stays the last epoch,
// so a KIP-360 InitProducerId naming (P, E) is taken for a retry of a bump and answered E+1
// without a write; on a TV1 cluster the last epoch is -1 and that request is PRODUCER_FENCED.
#[test]
fn tv2_init_producer_id_fences_an_open_transaction_keeping_the_fenced_epoch_as_last() {
    for level in [2, 1] {
        let mut c = cluster_at(level);
        let p = txn_producer(&mut c);
        assert_eq!(send_v12(&mut c, 0, p, 0).error_code, NONE);
        let fence = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
        assert_eq!(fence.error_code, CONCURRENT_TRANSACTIONS, "level {level}");
        let m = markers(&c, 0);
        assert_eq!((marker_type(&m[0]), m[0].producer_epoch), (0, 1));
        let last_epoch = c.transaction_metadata(TXN).unwrap().last_producer_epoch;
        let retry = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, p.pid, 0, NOW);
        if level == 2 {
            assert_eq!(last_epoch, 0);
            assert_eq!((retry.error_code, retry.producer_epoch), (NONE, 1));
        } else {
            assert_eq!(last_epoch, -1);
            assert_eq!(retry.error_code, PRODUCER_FENCED);
        }
        let next = c.init_producer_id_at(p.coordinator, Some(TXN), TIMEOUT_MS, -1, -1, NOW);
        assert_eq!((next.error_code, next.producer_epoch), (NONE, 2));
    }
}

// AddPartitionsToTxnManager `txnOffsetCommitRequestVersionToTransactionSupportedOperation`
// (v5+: `addPartition`), GroupCoordinatorService `commitTransactionalOffsets`: TxnOffsetCommit
// v5 adds the group's `__consumer_offsets` partition itself, where v4 needs AddOffsetsToTxn; a
// fenced epoch reaches the client as INVALID_PRODUCER_EPOCH (CoordinatorOperationExceptionHelper).
#[test]
fn tv2_txn_offset_commit_v5_adds_the_group_implicitly() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let group_coordinator = c.group_coordinator(GROUP);
    let offsets = [TxnOffsetCommitInput {
        topic: TOPIC.to_string(),
        partition: 0,
        offset: 7,
        leader_epoch: -1,
        metadata: Some("m".to_string()),
    }];
    let group = |epoch| TxnOffsetCommitGroup {
        transactional_id: TXN,
        group_id: GROUP,
        producer_id: p.pid,
        producer_epoch: epoch,
        generation_id: -1,
    };
    let commit_at = |c: &mut Cluster, version, epoch| {
        c.txn_offset_commit_at_version(group_coordinator, version, group(epoch), &offsets, NOW)
    };
    assert_eq!(commit_at(&mut c, 4, 0), vec![TRANSACTION_ABORTABLE]);
    assert_eq!(commit_at(&mut c, 5, 3), vec![INVALID_PRODUCER_EPOCH]);
    assert_eq!(commit_at(&mut c, TXN_OFFSET_COMMIT_V5, 0), vec![NONE]);
    let offsets_partition = (
        CONSUMER_OFFSETS_TOPIC.to_string(),
        offsets_partition_for(GROUP),
    );
    let metadata = c.transaction_metadata(TXN).unwrap();
    assert_eq!(metadata.state, TransactionState::Ongoing);
    assert!(metadata.topic_partitions.contains(&offsets_partition));
    assert_eq!(c.committed_offset(GROUP, TOPIC, 0), None, "pending");
    assert_eq!(end_v5(&mut c, p, 0, true), ok(p.pid, 1));
    assert_eq!(c.committed_offset(GROUP, TOPIC, 0), Some(7));
}

// TransactionVersion `transactionVersionForEndTxn` and the produce version mapping: the
// broker picks the protocol per request, so a TV1 client (Produce v11, AddPartitionsToTxn v3,
// EndTxn v4) on a TV2 cluster is verified as before (KIP-890 part 1) and ends its transactions
// without an epoch bump, its markers at its own epoch.
#[test]
fn tv1_client_on_a_tv2_cluster_is_still_verified() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let unverified = send_at(&mut c, 11, 0, (p.pid, p.epoch), 0);
    assert_eq!(unverified.error_code, INVALID_TXN_STATE);
    let added = c.add_partitions_to_txn(
        p.coordinator,
        TXN,
        p.pid,
        p.epoch,
        &[(TOPIC.to_string(), 0)],
        NOW,
    );
    assert_eq!(added, vec![NONE]);
    assert_eq!(send_at(&mut c, 11, 0, (p.pid, p.epoch), 0).error_code, NONE);
    let end = c.end_txn_at_version(p.coordinator, 4, TXN, p.pid, p.epoch, true, NOW);
    assert_eq!(end, ok(-1, -1), "TV1 answers carry no producer id or epoch");
    let metadata = c.transaction_metadata(TXN).unwrap();
    assert_eq!(
        (metadata.state, metadata.producer_epoch),
        (TransactionState::CompleteCommit, p.epoch)
    );
    assert_eq!(markers(&c, 0)[0].producer_epoch, p.epoch);
    // The next TV1 transaction continues the sequence at the same epoch.
    c.add_partitions_to_txn(
        p.coordinator,
        TXN,
        p.pid,
        p.epoch,
        &[(TOPIC.to_string(), 0)],
        NOW,
    );
    assert_eq!(send_at(&mut c, 11, 0, (p.pid, p.epoch), 1).error_code, NONE);
}

// TransactionCoordinator `handleVerifyPartitionsInTransaction` (AddPartitionsToTxn v4+ with
// `verifyOnly`, what a leader asks before a TV1 transactional append): per partition NONE or
// TRANSACTION_ABORTABLE, a fenced epoch PRODUCER_FENCED for all, and nothing is added.
#[test]
fn add_partitions_to_txn_verify_only_checks_without_adding() {
    let mut c = cluster();
    let p = txn_producer(&mut c);
    let both = [(TOPIC.to_string(), 0), (TOPIC.to_string(), 1)];
    c.add_partitions_to_txn(p.coordinator, TXN, p.pid, p.epoch, &both[..1], NOW);
    assert_eq!(
        c.verify_partitions_in_txn(p.coordinator, TXN, p.pid, p.epoch, &both),
        vec![NONE, TRANSACTION_ABORTABLE]
    );
    assert_eq!(
        c.verify_partitions_in_txn(p.coordinator, TXN, p.pid, p.epoch + 1, &both),
        vec![PRODUCER_FENCED; 2]
    );
    let metadata = c.transaction_metadata(TXN).unwrap();
    assert!(!metadata.topic_partitions.contains(&both[1]), "not added");
    let unknown = [(TOPIC.to_string(), 0), ("nope".to_string(), 0)];
    assert_eq!(
        c.verify_partitions_in_txn(p.coordinator, TXN, p.pid, p.epoch, &unknown),
        vec![OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION]
    );
}

// ApiVersionsResponse `finalizedFeatures` / `finalizedFeaturesEpoch`: the finalized level and
// an epoch that rises when the level changes (`kafka-features.sh upgrade`).
#[test]
fn finalized_transaction_version_changes_raise_the_features_epoch() {
    let mut c = cluster_at(0);
    let (level, epoch) = c.finalized_transaction_version();
    assert_eq!(level, 0);
    c.set_transaction_version(2);
    assert_eq!(c.finalized_transaction_version(), (2, epoch + 1));
}
