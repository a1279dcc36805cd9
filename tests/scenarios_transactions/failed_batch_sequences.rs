//! A batch that fails for good gives its sequences back (Java's
//! `adjustSequencesDueToFailedBatch`, docs/java-rules.md §4.10): every later batch of the
//! partition and epoch moves down by its record count, wherever it waits, and nothing else moves.

use kacrab::error::{ProduceError, TransactionError};
use kacrab::testkit::internals::engine::TopicPartition;
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::testkit::sim::{Fault, FaultRule, RecordId, RequestMatch, Sim, MS, SECOND};
use kafka_protocol::messages::ApiKey;

use super::{acked_in_transaction, in_transaction, run_until_resolved, tp};

/// Produce attempts carrying `tp`, in write order: (base sequence, answer).
fn attempts(sim: &Sim, tp: &TopicPartition) -> Vec<(i32, Option<i16>)> {
    sim.produce_trace()
        .iter()
        .flat_map(|t| {
            t.batches
                .iter()
                .enumerate()
                .filter(|(_, b)| &b.tp == tp)
                .map(|(i, b)| (b.base_sequence, t.answers.get(i).map(|a| a.0)))
        })
        .collect()
}

/// Produce requests for `tp` carrying a batch at `base_sequence`.
fn at(tp: &TopicPartition, base_sequence: i32) -> RequestMatch {
    RequestMatch::produce()
        .partition(tp)
        .base_sequence(base_sequence)
}

fn assert_acked(sim: &Sim, ids: &[RecordId]) {
    for &id in ids {
        assert!(
            matches!(sim.result(id), Some(Ok(_))),
            "record {id}: {:?}",
            sim.result(id)
        );
    }
}

/// Aborts the transaction; returns the abort's result.
fn abort(sim: &mut Sim) -> Option<Result<(), TransactionError>> {
    let handle = sim.abort_transaction().unwrap();
    let limit = sim.now() + 10 * SECOND;
    sim.wait_txn(handle, limit)
}

// P (sequence 0) is acked. X (1) is appended but answered REQUEST_TIMED_OUT: its outcome is
// unknown and it waits to retry. A (2) is refused for good (INVALID_RECORD), late; B (3) went out
// behind it and is refused out of order, the broker expecting 2. At A's refusal B, on the wire,
// moves down to 2 and its answer is retried there; X, before A, keeps its sequence, under which
// the broker recognises its retry. Every batch but A is appended once, in order.
#[test]
fn a_batch_refused_for_good_moves_the_later_batch_on_the_wire_down_and_leaves_an_earlier_one_of_unknown_outcome_alone(
) {
    let mut sim = in_transaction(|_| {});
    let p = acked_in_transaction(&mut sim, &tp(0));
    // The answers come after all three went out (X's retry would hold A and B back, to go out
    // together behind it).
    sim.add_fault(
        FaultRule::new(
            at(&tp(0), 1),
            Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
        )
        .delayed(30 * MS),
    );
    sim.add_fault(
        FaultRule::new(at(&tp(0), 2), Fault::Inject(code::INVALID_RECORD)).delayed(50 * MS),
    );
    let x = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(10 * MS);
    let a = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(10 * MS);
    let b = sim.send_in_transaction(&tp(0), 0).unwrap();
    run_until_resolved(&mut sim, &[x, a, b], 5 * SECOND);
    assert!(matches!(
        sim.result(a),
        Some(Err(ProduceError::Rejected {
            code: code::INVALID_RECORD,
            ..
        }))
    ));
    assert_acked(&sim, &[p, x, b]);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (0, Some(code::NONE)),
            (1, Some(code::REQUEST_TIMED_OUT)),
            (2, Some(code::INVALID_RECORD)),
            (3, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, Some(code::NONE)),
            (2, Some(code::NONE)),
        ]
    );
    assert_eq!(abort(&mut sim), Some(Ok(())));
    let stats = sim.check_transactions();
    assert_eq!((stats.aborted, stats.visible_records), (1, 0));
}

// P (0) is acked. A (1) is refused before any append (NOT_ENOUGH_REPLICAS), so B (2), sent behind
// it, is refused out of order; both wait to retry, A first. A's retry is refused for good: B,
// waiting in the queue, moves down to 1 and is appended there.
#[test]
fn a_batch_refused_for_good_on_its_retry_moves_the_queued_later_batch_down_to_its_sequence() {
    let mut sim = in_transaction(|_| {});
    let p = acked_in_transaction(&mut sim, &tp(0));
    sim.add_fault(FaultRule::new(
        at(&tp(0), 1),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        at(&tp(0), 1),
        Fault::Inject(code::INVALID_RECORD),
    ));
    let a = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(MS / 2);
    let b = sim.send_in_transaction(&tp(0), 0).unwrap();
    run_until_resolved(&mut sim, &[a, b], 5 * SECOND);
    assert!(matches!(
        sim.result(a),
        Some(Err(ProduceError::Rejected {
            code: code::INVALID_RECORD,
            ..
        }))
    ));
    assert_acked(&sim, &[p, b]);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (0, Some(code::NONE)),
            (1, Some(code::NOT_ENOUGH_REPLICAS)),
            (2, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, Some(code::INVALID_RECORD)),
            (1, Some(code::NONE)),
        ]
    );
    assert_eq!(abort(&mut sim), Some(Ok(())));
}

// p0: P (0) is acked; p1: Q0 (0) and Q1 (1) are acked. Y (p1, 2) is appended but answered
// REQUEST_TIMED_OUT; its retry is on the wire, to be answered late NOT_ENOUGH_REPLICAS, when A
// (p0, 1) is refused for good. B (p0, 2), behind A, moves down to 1. Y belongs to another
// partition's sequence space: it neither holds p0's batches where they are (as a later batch of
// p0 of unknown outcome would) nor moves, and its next retry, under its own sequence, is
// recognised by the broker.
#[test]
fn a_batch_refused_for_good_moves_nothing_of_another_partition_and_is_not_held_by_its_batch_of_unknown_outcome(
) {
    let mut sim = in_transaction(|_| {});
    let p = acked_in_transaction(&mut sim, &tp(0));
    let q0 = acked_in_transaction(&mut sim, &tp(1));
    let q1 = acked_in_transaction(&mut sim, &tp(1));
    assert_ne!(sim.leader(&tp(0)), sim.leader(&tp(1)), "two connections");
    sim.add_fault(FaultRule::new(
        at(&tp(1), 2),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(
        FaultRule::new(at(&tp(1), 2), Fault::Inject(code::NOT_ENOUGH_REPLICAS)).delayed(300 * MS),
    );
    sim.add_fault(
        FaultRule::new(at(&tp(0), 1), Fault::Inject(code::INVALID_RECORD)).delayed(50 * MS),
    );
    let y = sim.send_in_transaction(&tp(1), 0).unwrap();
    // Y's answer comes at once; its retry goes out after the 100 ms backoff.
    sim.run_for(150 * MS);
    assert_eq!(attempts(&sim, &tp(1)).len(), 4, "Y's retry is on the wire");
    let a = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(10 * MS);
    let b = sim.send_in_transaction(&tp(0), 0).unwrap();
    run_until_resolved(&mut sim, &[y, a, b], 5 * SECOND);
    assert!(matches!(
        sim.result(a),
        Some(Err(ProduceError::Rejected {
            code: code::INVALID_RECORD,
            ..
        }))
    ));
    assert_acked(&sim, &[p, q0, q1, y, b]);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (0, Some(code::NONE)),
            (1, Some(code::INVALID_RECORD)),
            (2, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, Some(code::NONE)),
        ]
    );
    assert_eq!(
        attempts(&sim, &tp(1)),
        vec![
            (0, Some(code::NONE)),
            (1, Some(code::NONE)),
            (2, Some(code::REQUEST_TIMED_OUT)),
            (2, Some(code::NOT_ENOUGH_REPLICAS)),
            (2, Some(code::NONE)),
        ]
    );
    assert_eq!(abort(&mut sim), Some(Ok(())));
    let stats = sim.check_transactions();
    assert_eq!((stats.aborted, stats.visible_records), (1, 0));
}

// X (0) is refused before any append (NOT_ENOUGH_REPLICAS) and waits to retry; A (1), behind it,
// is refused for good while the commit flushes. A gives sequence 1 back and no batch lies after
// it, so client and broker still agree on every sequence: a failure while completing asks for no
// bump by itself (Java's `maybeTransitionToErrorState`), and none is needed. The abort keeps the
// epoch, and the next transaction's batch takes sequence 1 after X's 0.
#[test]
fn a_batch_refused_for_good_with_only_earlier_batches_in_flight_lets_the_abort_keep_the_epoch() {
    let mut sim = in_transaction(|_| {});
    let before = sim.identity();
    sim.add_fault(
        FaultRule::new(at(&tp(0), 0), Fault::Inject(code::NOT_ENOUGH_REPLICAS)).delayed(50 * MS),
    );
    sim.add_fault(FaultRule::new(
        at(&tp(0), 1),
        Fault::Inject(code::INVALID_RECORD),
    ));
    let x = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(10 * MS);
    let a = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(10 * MS);
    let commit = sim.commit_transaction().unwrap();
    let limit = sim.now() + 10 * SECOND;
    assert!(matches!(
        sim.wait_txn(commit, limit),
        Some(Err(TransactionError::Abortable(_)))
    ));
    assert_acked(&sim, &[x]);
    assert!(matches!(
        sim.result(a),
        Some(Err(ProduceError::Rejected {
            code: code::INVALID_RECORD,
            ..
        }))
    ));
    assert_eq!(abort(&mut sim), Some(Ok(())));
    assert_eq!(sim.identity(), before, "the abort kept the epoch");
    assert_eq!(sim.requests_served(ApiKey::InitProducerId), 1);
    sim.begin_transaction().unwrap();
    let next = sim.send_in_transaction(&tp(0), 0).unwrap();
    let handle = sim.commit_transaction().unwrap();
    let limit = sim.now() + 10 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    assert_acked(&sim, &[next]);
    assert_eq!(attempts(&sim, &tp(0)).last(), Some(&(1, Some(code::NONE))));
    let stats = sim.check_transactions();
    assert_eq!((stats.committed, stats.aborted), (1, 1));
    assert_eq!(stats.visible_records, 1);
}

// P (0) is acked. With retries = 1, A (1) is refused before any append (NOT_ENOUGH_REPLICAS) on
// both its attempts and fails when its retries run out; B (2), behind it, is refused out of
// order. Java's `Sender` fails a batch whose retries ran out with `adjustSequenceNumbers = false`,
// and `TransactionManager.handleFailedBatch` then gives no sequence back: B keeps 2 and, refused
// again, fails when its own retries run out (the transaction aborts anyway).
#[test]
fn a_batch_whose_retries_ran_out_gives_no_sequence_back_and_the_later_batch_keeps_its_own() {
    let mut sim = in_transaction(|setup| setup.engine.retries = 1);
    let p = acked_in_transaction(&mut sim, &tp(0));
    sim.add_fault(FaultRule::new(at(&tp(0), 1), Fault::Inject(code::NOT_ENOUGH_REPLICAS)).times(2));
    let a = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(MS / 2);
    let b = sim.send_in_transaction(&tp(0), 0).unwrap();
    run_until_resolved(&mut sim, &[a, b], 5 * SECOND);
    assert_acked(&sim, &[p]);
    assert!(matches!(
        sim.result(a),
        Some(Err(ProduceError::Rejected {
            code: code::NOT_ENOUGH_REPLICAS,
            ..
        }))
    ));
    assert!(matches!(
        sim.result(b),
        Some(Err(ProduceError::Rejected {
            code: code::OUT_OF_ORDER_SEQUENCE_NUMBER,
            ..
        }))
    ));
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (0, Some(code::NONE)),
            (1, Some(code::NOT_ENOUGH_REPLICAS)),
            (2, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, Some(code::NOT_ENOUGH_REPLICAS)),
            (2, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
        ]
    );
    assert_eq!(abort(&mut sim), Some(Ok(())));
}

/// Every batch of p0 holds one record. The broker has no state for the producer on p0 yet, so
/// it takes any first sequence (Kafka's `ProducerAppendInfo.checkSequence`):
/// - F (0) is refused NOT_ENOUGH_REPLICAS before the append; its answer arrives 50 ms late;
/// - L (1) is appended as the producer's first batch there (offset 0) and acked: last acked 1;
/// - M (2) is refused NOT_ENOUGH_REPLICAS and queued for retry;
/// - F's retry is refused for good (INVALID_RECORD).
///
/// `TxnPartitionEntry.adjustSequencesDueToFailedBatch` (docs/java-rules.md §4.10) would give F's
/// sequence back and move M from 2 down to 1: L's exact range under the same epoch. The broker
/// recognises a duplicate by epoch and first and last sequence (Kafka's
/// `ProducerStateEntry.findDuplicateBatch`), so M's retry would be answered with L's offset and M
/// reported written while it is not in the log. F was overtaken (its sequence is at or below the
/// last acked one): its sequences are spent and nothing moves, so M's retry keeps sequence 2 and
/// lands after L.
#[test]
fn a_failed_batch_never_moves_a_queued_batch_onto_an_acked_batchs_sequences() {
    let mut sim = in_transaction(|_| {});
    sim.add_fault(
        FaultRule::new(at(&tp(0), 0), Fault::Inject(code::NOT_ENOUGH_REPLICAS)).delayed(50 * MS),
    );
    sim.add_fault(FaultRule::new(
        at(&tp(0), 0),
        Fault::Inject(code::INVALID_RECORD),
    ));
    sim.add_fault(FaultRule::new(
        at(&tp(0), 2),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    let f = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(10 * MS);
    let l = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(10 * MS);
    let m = sim.send_in_transaction(&tp(0), 0).unwrap();
    run_until_resolved(&mut sim, &[f, l, m], 5 * SECOND);
    assert!(
        matches!(
            sim.result(f),
            Some(Err(ProduceError::Rejected {
                code: code::INVALID_RECORD,
                ..
            }))
        ),
        "F: {:?}",
        sim.result(f)
    );
    let offset = |id| match sim.result(id) {
        Some(Ok(meta)) => meta.offset,
        other => panic!("record {id}: expected success, got {other:?}"),
    };
    assert_eq!(offset(l), 0, "L");
    assert_eq!(offset(m), 1, "M lands after L, not as a duplicate of it");
    let tried = attempts(&sim, &tp(0));
    assert_eq!(
        tried.iter().filter(|&&(base, _)| base == 1).count(),
        1,
        "nothing but L is ever sent at sequence 1: {tried:?}"
    );
}
