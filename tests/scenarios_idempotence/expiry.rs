//! Expiry and unresolved sequences (docs/java-rules.md §9 items 13-15): batches that run out of
//! retries or expire, the unresolved mark they leave, and when the partition bumps for it.

use kacrab::error::ProduceError;
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::testkit::sim::{Fault, FaultRule, RecordId, RequestMatch, Sim, Verdict, MS, SECOND};

use super::{
    acked_offsets, attempts, batch, bumps, offsets, p0_batch_at, settle, setup_with, started,
    stretched, tp,
};

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 items 13-15
// ---------------------------------------------------------------------------------------------

// With no retries, A (0-9), answered REQUEST_TIMED_OUT after the broker appended it, fails at
// once as of unknown outcome. The producer cannot know whether 0-9 are in the log, so the
// partition's next sequence is unresolved (docs/java-rules.md §4.9); with nothing after A acked it
// stays so, and the partition moves to a new epoch: B goes out under epoch 1 from 0, never as 10-19
// under epoch 0, whose acceptance would hang on A's unknown outcome.
#[test]
fn a_batch_of_unknown_outcome_failed_when_its_retries_ran_out_leaves_its_sequences_unresolved_and_the_partition_bumps(
) {
    let mut sim = started(setup_with(&[1], |c| c.retries = 0));
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    for &id in &a {
        assert!(
            matches!(sim.result(id), Some(Err(e)) if e.is_outcome_unknown()),
            "{:?}",
            sim.result(id)
        );
    }
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::REQUEST_TIMED_OUT)),
            (1, 1, 0, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 1);
    assert_eq!(acked_offsets(&sim, &b), offsets(10..20));
}

// With retries = 1, A (0-9) is refused before any append (NOT_ENOUGH_REPLICAS) on both its
// attempts and fails for good when its retries run out. Java's `Sender` fails it with
// `adjustSequenceNumbers = false`, and `TransactionManager.handleFailedBatch` then neither bumps
// the epoch nor marks the partition unresolved (only an OUT_OF_ORDER_SEQUENCE_NUMBER or
// UNKNOWN_PRODUCER_ID failure bumps regardless). B (10-19), sent next, goes out under the same
// epoch, and the broker, with no state for the producer on p0, appends it.
#[test]
fn a_batch_refused_until_its_retries_run_out_fails_definitely_and_moves_no_epoch() {
    let mut sim = started(setup_with(&[1], |c| c.retries = 1));
    sim.add_fault(
        FaultRule::new(
            RequestMatch::produce().partition(&tp(0)),
            Fault::Inject(code::NOT_ENOUGH_REPLICAS),
        )
        .times(2),
    );
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    for &id in &a {
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::Rejected {
                    code: code::NOT_ENOUGH_REPLICAS,
                    ..
                }))
            ),
            "{:?}",
            sim.result(id)
        );
    }
    assert_eq!(
        sim.engine(0).partition(&tp(0)).unwrap().unresolved_sequence,
        None
    );
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 0, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 10, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 0);
    assert_eq!(acked_offsets(&sim, &b), offsets(0..10));
}

#[test]
fn a_retried_batch_expires_then_the_later_batch_acks_and_the_unresolved_mark_clears_without_a_bump()
{
    let mut sim = started(setup_with(&[1], stretched(40 * SECOND)));
    let t0 = sim.now();
    // A (0-9) is appended but answered REQUEST_TIMED_OUT at 2 s, then waits 40 s to retry.
    // B (10-19), sent at 1 s behind it, is appended and answered at 30.5 s.
    sim.add_fault(
        FaultRule::new(
            p0_batch_at(0),
            Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
        )
        .delayed(2 * SECOND),
    );
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::Delay(29 * SECOND + 500 * MS),
    ));
    let a = batch(&mut sim, &tp(0));
    sim.run_until(t0 + SECOND);
    let b = batch(&mut sim, &tp(0));
    sim.run_until(t0 + 25 * SECOND);
    let c = batch(&mut sim, &tp(0));
    sim.run_until(t0 + 30 * SECOND + 10 * MS);
    // A expired while waiting to retry; its first attempt may have landed (it did).
    for &id in &a {
        assert!(matches!(
            sim.result(id),
            Some(Err(ProduceError::OutcomeUnknown { .. }))
        ));
    }
    let slot = sim.engine(0).partition(&tp(0)).unwrap();
    assert_eq!(slot.unresolved_sequence, Some(10), "p0 is unresolved at 10");
    assert_eq!(attempts(&sim, &tp(0)).len(), 2, "new batches are held");

    settle(&mut sim, 10 * SECOND);
    assert_eq!(bumps(&sim), 0, "20 - 19 == 1: every sequence was acked");
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::REQUEST_TIMED_OUT)),
            (1, 0, 10, Some(code::NONE)),
            (1, 0, 20, Some(code::NONE)),
        ],
        "C goes out at the same epoch after B's ack"
    );
    for &id in &a {
        assert_eq!(sim.verdict(id), Verdict::Unknown);
        assert!(sim.checker().log_offset(id).is_some());
    }
    assert_eq!(acked_offsets(&sim, &b), offsets(10..20));
    assert_eq!(acked_offsets(&sim, &c), offsets(20..30));
}

#[test]
fn when_every_batch_expires_the_partition_bumps_once_nothing_is_in_flight_and_restarts_at_0() {
    let mut sim = started(setup_with(&[1], stretched(40 * SECOND)));
    let t0 = sim.now();
    // A (0-9) is refused without an append and waits 40 s to retry; B (10-19) is lost on
    // the way, and the connection stays silent until the 60 s request timeout.
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(p0_batch_at(10), Fault::DropRequest));
    let a = batch(&mut sim, &tp(0));
    let b = batch(&mut sim, &tp(0));
    sim.run_until(t0 + 30 * SECOND - MS);
    assert_eq!(bumps(&sim), 0, "nothing expired yet");
    sim.run_until(t0 + 30 * SECOND + 20 * MS);
    for &id in &a {
        assert!(
            matches!(sim.result(id), Some(Err(ProduceError::TimedOut { .. }))),
            "A never landed: a definite timeout"
        );
    }
    for &id in &b {
        assert_eq!(sim.verdict(id), Verdict::Unknown, "B expired on the wire");
    }
    assert_eq!(bumps(&sim), 1, "nothing is in flight: 20 - (-1) != 1");
    sim.run_until(t0 + 45 * SECOND);
    let c = batch(&mut sim, &tp(0));
    settle(&mut sim, 30 * SECOND);
    assert_eq!(bumps(&sim), 1);
    assert_eq!(
        attempts(&sim, &tp(0)).last().copied(),
        Some((1, 1, 0, Some(code::NONE))),
        "the broker sees the new epoch from sequence 0"
    );
    assert_eq!(acked_offsets(&sim, &c), offsets(0..10));
}

#[test]
fn out_of_order_sequence_right_after_an_unresolved_gap_bumps_at_once_and_retries_that_batch_from_0()
{
    let mut sim = started(setup_with(&[1], stretched(10 * SECOND)));
    let z = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    let t0 = sim.now();
    // A (10-19) is refused without an append, and the answer takes 26 s; B (20-29), sent at
    // 25 s behind it, is out of order. A expires at 30 s while waiting to retry: p0 is
    // unresolved at 20, and B's retry at 36 s is out of order again.
    sim.add_fault(
        FaultRule::new(p0_batch_at(10), Fault::Inject(code::NOT_ENOUGH_REPLICAS))
            .delayed(26 * SECOND),
    );
    let a = batch(&mut sim, &tp(0));
    sim.run_until(t0 + 25 * SECOND);
    let b = batch(&mut sim, &tp(0));
    sim.run_until(t0 + 30 * SECOND + 10 * MS);
    assert_eq!(
        sim.engine(0).partition(&tp(0)).unwrap().unresolved_sequence,
        Some(20)
    );
    assert_eq!(bumps(&sim), 0);
    settle(&mut sim, 30 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 20, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 0, 20, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 1, 0, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 1);
    for &id in &a {
        assert!(matches!(
            sim.result(id),
            Some(Err(ProduceError::TimedOut { .. }))
        ));
    }
    assert_eq!(acked_offsets(&sim, &z), offsets(0..10));
    assert_eq!(acked_offsets(&sim, &b), offsets(10..20));
}

/// The two-expiries scenarios' common run, from `t0`: A1 (10-19) and A2 (20-29) sent at once,
/// C (30-39) at 25 s; just after both expire at 30 s the partition is unresolved at 30, where C
/// starts, with no bump yet; then it settles.
fn a1_a2_expire_behind_c(sim: &mut Sim, t0: u64) -> (Vec<RecordId>, Vec<RecordId>, Vec<RecordId>) {
    let a1 = batch(sim, &tp(0));
    let a2 = batch(sim, &tp(0));
    sim.run_until(t0 + 25 * SECOND);
    let c = batch(sim, &tp(0));
    sim.run_until(t0 + 30 * SECOND + 10 * MS);
    assert_eq!(
        sim.engine(0).partition(&tp(0)).unwrap().unresolved_sequence,
        Some(30)
    );
    assert_eq!(bumps(sim), 0);
    settle(sim, 30 * SECOND);
    (a1, a2, c)
}

#[test]
fn two_batches_expiring_in_turn_leave_the_partition_unresolved_after_the_later_and_out_of_order_right_after_it_bumps(
) {
    let mut sim = started(setup_with(&[1], stretched(10 * SECOND)));
    let z = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    let t0 = sim.now();
    // A1 (10-19) and A2 (20-29) are refused without an append, their answers taking 26 s; C
    // (30-39), sent at 25 s behind them, is out of order. Both expire at 30 s while waiting to
    // retry, A1 first: p0 is unresolved at 30, where C starts, not at 20, and C's retry at
    // 36 s, out of order again, bumps at once.
    for base in [10, 20] {
        sim.add_fault(
            FaultRule::new(
                RequestMatch::produce()
                    .partition(&tp(0))
                    .base_sequence(base),
                Fault::Inject(code::NOT_ENOUGH_REPLICAS),
            )
            .delayed(26 * SECOND),
        );
    }
    let (a1, a2, c) = a1_a2_expire_behind_c(&mut sim, t0);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 20, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 30, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 0, 30, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 1, 0, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 1);
    for &id in a1.iter().chain(&a2) {
        assert!(matches!(
            sim.result(id),
            Some(Err(ProduceError::TimedOut { .. }))
        ));
    }
    assert_eq!(acked_offsets(&sim, &z), offsets(0..10));
    assert_eq!(acked_offsets(&sim, &c), offsets(10..20));
}

// As above, but A1 and A2 expire in the same instant with A1's retry on the wire and A2 waiting
// behind it: the queued one is failed first, so the marks come in descending order. The
// partition stays unresolved at the higher, 30, where C starts (Java's `markSequenceUnresolved`
// keeps the maximum), and C's retry, out of order again, bumps at once and is renumbered.
#[test]
fn two_batches_expiring_at_once_the_later_queued_and_the_earlier_on_the_wire_leave_the_partition_unresolved_after_the_later(
) {
    let mut sim = started(setup_with(&[1], stretched(2 * SECOND)));
    let z = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    let t0 = sim.now();
    let at = |base| {
        RequestMatch::produce()
            .partition(&tp(0))
            .base_sequence(base)
    };
    // A1 (10-19) and A2 (20-29) are refused without an append, their answers taking 26 s; C
    // (30-39), sent at 25 s behind them, is out of order. A1's retry goes out at 28 s and is
    // answered at 33 s, after both expired at 30 s.
    sim.add_fault(
        FaultRule::new(at(10), Fault::Inject(code::NOT_ENOUGH_REPLICAS)).delayed(26 * SECOND),
    );
    sim.add_fault(
        FaultRule::new(at(20), Fault::Inject(code::NOT_ENOUGH_REPLICAS)).delayed(26 * SECOND),
    );
    sim.add_fault(
        FaultRule::new(at(10), Fault::Inject(code::NOT_ENOUGH_REPLICAS)).delayed(5 * SECOND),
    );
    let (a1, a2, c) = a1_a2_expire_behind_c(&mut sim, t0);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 20, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 30, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 0, 10, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 30, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 1, 0, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 1);
    // A1 expired with an attempt in flight, A2 while it waited.
    for &id in &a1 {
        assert!(
            matches!(sim.result(id), Some(Err(e)) if e.is_outcome_unknown()),
            "{:?}",
            sim.result(id)
        );
    }
    for &id in &a2 {
        assert!(
            matches!(sim.result(id), Some(Err(ProduceError::TimedOut { .. }))),
            "{:?}",
            sim.result(id)
        );
    }
    assert_eq!(acked_offsets(&sim, &z), offsets(0..10));
    assert_eq!(acked_offsets(&sim, &c), offsets(10..20));
}
