//! Transactions V2 when something goes wrong: a second producer fences the first, and the
//! coordinator's EndTxn answer is lost or the coordinator moves while a commit is under way.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kacrab::error::ErrorCause;
use kacrab::testkit::broker::TransactionState;
use kacrab::{ProduceError, TransactionError};
use kafka_protocol::messages::ApiKey;

use crate::common::Isolation;
use crate::rig::*;

const NOT_COORDINATOR: i16 = 16;

fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The error says another producer took the transactional id over: the broker's refusal of
/// the old epoch (INVALID_PRODUCER_EPOCH), or the fence the producer holds, as the error it
/// refuses a send with (`Transaction`), fails a record with that was queued in the
/// transaction (`TransactionAbortable`), or holds as fatal (`Fatal`).
fn says_fenced(error: &ProduceError) -> bool {
    let fenced = |cause: &ErrorCause| matches!(cause, ErrorCause::Transaction(e) if matches!(**e, TransactionError::Fenced(_)));
    match error {
        ProduceError::Rejected { name, .. } => name == "INVALID_PRODUCER_EPOCH",
        ProduceError::Transaction(e) => matches!(e, TransactionError::Fenced(_)),
        ProduceError::TransactionAbortable(cause) | ProduceError::Fatal(cause) => fenced(cause),
        _ => false,
    }
}

#[test]
fn tv2_a_fenced_producer_cannot_write_or_commit() {
    let topic = "tv2-fencing";
    let cluster = start_cluster(TV2, &[topic]);
    let first = producer(&cluster, "tv2-fenced", &[]);
    first.init_transactions(CALL).unwrap();
    let (producer_id, first_epoch, _) = coordinator_view(&cluster, "tv2-fenced");
    first.begin_transaction().unwrap();
    expect_acked(send_ids(&first, topic, 0..12), "written before the fence");

    let second = producer(&cluster, "tv2-fenced", &[]);
    second
        .init_transactions(CALL)
        .expect("the second producer takes over (the first's transaction is aborted)");
    let (id, second_epoch, state) = coordinator_view(&cluster, "tv2-fenced");
    assert_eq!(id, producer_id);
    assert!(
        second_epoch > first_epoch + 1,
        "the fence aborted at a bumped epoch and the second producer got a later one: {first_epoch} -> {second_epoch}"
    );
    assert_eq!(
        state,
        TransactionState::Empty,
        "the fence's abort completed and the second producer holds the id"
    );

    // Every partition was written by the first producer: its next records meet the fence's
    // marker, at a later epoch, and are refused with INVALID_PRODUCER_EPOCH (Kafka
    // `ProducerStateManager.checkProducerEpoch`), or fail with the abortable error that the
    // first refusal left.
    for (id, result) in (12..24).zip(wait_all(send_ids(&first, topic, 12..24))) {
        assert!(
            result.as_ref().is_err_and(says_fenced),
            "record {id} sent by the fenced producer: {result:?}"
        );
    }
    // The failed records made the transaction abortable; the commit fails with their error,
    // which says another producer took over (Java's `maybeFailWithError` re-throws
    // InvalidProducerEpochException, KIP-1050).
    let commit = first.commit_transaction(CALL);
    assert!(
        matches!(commit, Err(TransactionError::Fenced(_))),
        "commit of a fenced producer: {commit:?}"
    );
    // Its abort names its epoch, neither the current one nor the one the fence's abort
    // bumped from: the coordinator answers PRODUCER_FENCED (`TransactionCoordinator
    // .endTransaction`), and the producer is fenced for good.
    let abort = first.abort_transaction(CALL);
    assert!(
        matches!(abort, Err(TransactionError::Fenced(_))),
        "abort of a fenced producer: {abort:?}"
    );
    let after = send(&first, topic, 99)
        .wait_timeout(CALL)
        .expect("resolved");
    assert!(
        matches!(
            &after,
            Err(ProduceError::Transaction(_) | ProduceError::Fatal(_))
        ) && after.as_ref().is_err_and(says_fenced),
        "a send after the fence: {after:?}"
    );
    assert_eq!(
        coordinator_view(&cluster, "tv2-fenced"),
        (producer_id, second_epoch, TransactionState::Empty),
        "the fenced producer changed nothing at the coordinator"
    );

    second.begin_transaction().unwrap();
    let sent = send_ids(&second, topic, 100..112);
    second
        .commit_transaction(CALL)
        .expect("commit of the new producer");
    expect_acked(sent, "the new producer's transaction");
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(100..112),
        "nothing the first producer wrote is visible"
    );
    // In every partition: the first producer's transaction, aborted by the fence, then the
    // second's, committed; nothing else.
    for partition in 0..PARTITIONS {
        let logged = logged_transactions(&log_entries(&cluster, topic, partition), producer_id);
        assert_eq!(
            logged
                .iter()
                .map(|t| (t.data_epoch, t.commit))
                .collect::<Vec<_>>(),
            vec![(first_epoch, false), (second_epoch, true)],
            "partition {partition}: {logged:?}"
        );
    }
}

/// Sends transaction `k`'s twelve records (two per partition) and waits for them.
fn write_transaction(p: &kacrab::Producer, topic: &str, k: u64) {
    expect_acked(send_ids(p, topic, 12 * k..12 * k + 12), "transaction");
}

#[test]
fn tv2_coordinator_moves_during_end_txn_and_the_commit_completes_once() {
    let topic = "tv2-moving";
    let cluster = start_cluster(TV2, &[topic]);
    let p = producer(&cluster, "tv2-moving", &[("request.timeout.ms", "3000")]);
    p.init_transactions(CALL).unwrap();
    let (producer_id, first_epoch, _) = coordinator_view(&cluster, "tv2-moving");
    let faults = cluster.faults();
    let stats = cluster.stats();
    let coordinator = || cluster.with_cluster(|c| c.transaction_coordinator("tv2-moving"));

    // 0: the commit is done and its answer lost. The retry names the epoch before the bump
    // the commit made, and is answered with the bumped one.
    p.begin_transaction().unwrap();
    write_transaction(&p, topic, 0);
    faults.drop_response_after_append(coordinator(), ApiKey::EndTxn, 1);
    p.commit_transaction(CALL)
        .expect("commit after a lost answer");
    assert_eq!(faults.pending(), 0, "the answer was dropped");

    // 1: the coordinator answers NOT_COORDINATOR; the commit goes to the one it finds.
    p.begin_transaction().unwrap();
    write_transaction(&p, topic, 1);
    faults.inject_error(coordinator(), ApiKey::EndTxn, NOT_COORDINATOR, 1);
    p.commit_transaction(CALL)
        .expect("commit after NOT_COORDINATOR");
    assert_eq!(faults.pending(), 0, "NOT_COORDINATOR was answered");

    // 2: the commit is prepared (markers held, so it stays PrepareCommit), its answer lost,
    // and then the coordinator moves to another broker. No retry can succeed before the
    // markers are released, which happens after the move: the commit completes through the
    // new coordinator.
    p.begin_transaction().unwrap();
    write_transaction(&p, topic, 2);
    let old = coordinator();
    let new = 1 + old % BROKERS;
    cluster.with_cluster(|c| c.hold_transaction_markers(true));
    faults.drop_response_after_append(old, ApiKey::EndTxn, 1);
    let started = p.commit_transaction(Duration::ZERO);
    assert!(
        matches!(started, Err(TransactionError::Timeout { .. })),
        "{started:?}"
    );
    assert!(
        cluster.wait_until(CALL, |c| c
            .transaction_metadata("tv2-moving")
            .is_some_and(|m| m.state == TransactionState::PrepareCommit)),
        "the commit was prepared"
    );
    assert!(faults.wait_until_consumed(CALL), "the answer was dropped");
    let new_before = stats.requests_on(new, ApiKey::EndTxn);
    cluster.with_cluster(|c| {
        c.move_transaction_coordinator("tv2-moving", new);
        c.hold_transaction_markers(false);
        assert_eq!(c.release_transaction_markers(wall_clock_ms()), 1);
    });
    p.commit_transaction(CALL)
        .expect("the commit completes through the new coordinator");
    assert!(
        stats.requests_on(new, ApiKey::EndTxn) > new_before,
        "the retried EndTxn reached the new coordinator"
    );

    // 3: the next transaction works, at the epoch the last commit returned.
    p.begin_transaction().unwrap();
    write_transaction(&p, topic, 3);
    p.commit_transaction(CALL).expect("the next commit");

    let (id, epoch, state) = coordinator_view(&cluster, "tv2-moving");
    assert_eq!(id, producer_id);
    assert_eq!(
        epoch,
        first_epoch + 4,
        "one bump per transaction, none more"
    );
    assert_eq!(state, TransactionState::CompleteCommit);
    // Each transaction committed exactly once: one COMMIT marker per transaction and
    // partition, at the epoch its commit made; the next one's data at that epoch from
    // sequence 0.
    let expected: Vec<LoggedTransaction> = (0..4)
        .map(|k| LoggedTransaction {
            data_epoch: first_epoch + k,
            first_sequence: 0,
            last_sequence: 1,
            marker_epoch: first_epoch + k + 1,
            commit: true,
        })
        .collect();
    for partition in 0..PARTITIONS {
        assert_eq!(
            logged_transactions(&log_entries(&cluster, topic, partition), producer_id),
            expected,
            "partition {partition}"
        );
    }
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(0..48)
    );
}

// At level 2 the coordinator's own abort of a timed-out transaction bumps the epoch and keeps
// the old one as `lastProducerEpoch` (`TransactionStateManager.timedOutTransactions`,
// `prepareAbortOrCommit`): the producer's records meet INVALID_PRODUCER_EPOCH, and its own
// abort at the old epoch is a retry of that abort, answered with the bumped epoch
// (`TransactionCoordinator.endTransaction`, `retryOnEpochBump`), so it goes on without a new
// InitProducerId.
#[test]
fn tv2_after_the_coordinators_timeout_abort_the_producers_abort_adopts_the_bumped_epoch() {
    let topic = "tv2-timed-out";
    let cluster = start_cluster(TV2, &[topic]);
    let p = producer(&cluster, "tv2-timed-out", &[]);
    p.init_transactions(CALL).unwrap();
    let (producer_id, first_epoch, _) = coordinator_view(&cluster, "tv2-timed-out");
    p.begin_transaction().unwrap();
    write_transaction(&p, topic, 0);
    let aborted =
        cluster.with_cluster(|c| c.abort_timed_out_transactions(wall_clock_ms() + 3_600_000));
    assert_eq!(aborted, 1, "the coordinator aborted the open transaction");
    assert_eq!(
        coordinator_view(&cluster, "tv2-timed-out"),
        (
            producer_id,
            first_epoch + 1,
            TransactionState::CompleteAbort
        )
    );

    for (id, result) in (12..24).zip(wait_all(send_ids(&p, topic, 12..24))) {
        assert!(
            result.is_err(),
            "record {id} after the timeout abort: {result:?}"
        );
    }
    let commit = p.commit_transaction(CALL);
    assert!(
        commit.is_err(),
        "a commit after the timeout abort: {commit:?}"
    );
    p.abort_transaction(CALL)
        .expect("the producer's abort is a retry of the coordinator's");
    assert_eq!(
        coordinator_view(&cluster, "tv2-timed-out"),
        (
            producer_id,
            first_epoch + 1,
            TransactionState::CompleteAbort
        ),
        "the retried abort wrote nothing and bumped nothing"
    );
    assert_eq!(
        cluster.stats().requests(ApiKey::InitProducerId),
        1,
        "no InitProducerId after init_transactions"
    );

    p.begin_transaction().unwrap();
    write_transaction(&p, topic, 1);
    p.commit_transaction(CALL)
        .expect("the next transaction commits");
    assert_eq!(
        coordinator_view(&cluster, "tv2-timed-out"),
        (
            producer_id,
            first_epoch + 2,
            TransactionState::CompleteCommit
        )
    );
    let expected = vec![
        LoggedTransaction {
            data_epoch: first_epoch,
            first_sequence: 0,
            last_sequence: 1,
            marker_epoch: first_epoch + 1,
            commit: false,
        },
        LoggedTransaction {
            data_epoch: first_epoch + 1,
            first_sequence: 0,
            last_sequence: 1,
            marker_epoch: first_epoch + 2,
            commit: true,
        },
    ];
    for partition in 0..PARTITIONS {
        assert_eq!(
            logged_transactions(&log_entries(&cluster, topic, partition), producer_id),
            expected,
            "partition {partition}"
        );
    }
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(12..24)
    );
}
