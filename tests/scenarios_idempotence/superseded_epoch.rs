//! Failover cases, continued: UNKNOWN_PRODUCER_ID from a broker that lost the producer state,
//! batches refused under a superseded epoch, and a close that runs out of time.

use kacrab::error::ProduceError;
use kacrab::testkit::internals::engine::ProducerIdAndEpoch;
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::testkit::sim::{Fault, FaultRule, RecordId, RequestMatch, Sim, MS, SECOND};

use super::{
    acked_offsets, attempts, batch, bumps, log_batches, offsets, p0_batch_at, settle, setup_with,
    started, stretched, tp, PID,
};

#[test]
fn unknown_producer_id_after_an_old_broker_lost_the_producer_state_bumps_and_restarts_at_0() {
    let mut setup = setup_with(&[1], |_| {});
    setup.rules.kafka_version = kacrab::testkit::broker::KafkaBehaviour::Legacy;
    let mut sim = started(setup);
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    // A pre-2.5 broker forgets the producer (retention, or an unclean reload).
    assert!(sim.partition_quiet(&tp(0)));
    assert!(sim.remove_producer_state(&tp(0)));
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::UNKNOWN_PRODUCER_ID)),
            (1, 1, 0, Some(code::NONE)),
        ],
        "the producer bumps its epoch and the batch restarts at sequence 0"
    );
    assert_eq!(bumps(&sim), 1);
    assert_eq!(acked_offsets(&sim, &[a, b].concat()), offsets(0..20));
}

// A pre-2.5 broker with no state for the producer on p0 refuses a non-zero first sequence
// UNKNOWN_PRODUCER_ID and takes 0. A (MAX-9 to MAX, the partition's sequences started there)
// is refused so, but its answer comes late, after its delivery timeout ended it as of unknown
// outcome; B (0-9, past the wrap), sent behind it, is appended and acked right after that
// answer. An answer to an expired batch is bookkeeping only: Java's `Sender.canRetry` refuses a
// batch already done before `TransactionManager.canRetry` runs, so it asks for no bump. Every
// sequence the partition allotted is then acked (B's 9 is right before the next, 10), the mark A's
// expiry left clears, and C follows under the same epoch at 10.
#[test]
fn unknown_producer_id_answering_an_expired_batch_asks_for_no_bump() {
    let mut setup = setup_with(&[1], stretched(SECOND));
    setup.rules.kafka_version = kacrab::testkit::broker::KafkaBehaviour::Legacy;
    let mut sim = started(setup);
    let t0 = sim.now();
    sim.start_sequence_at(&tp(0), i32::MAX - 9);
    sim.add_fault(FaultRule::new(
        RequestMatch::produce()
            .partition(&tp(0))
            .base_sequence(i32::MAX - 9),
        Fault::Delay(30 * SECOND + 500 * MS),
    ));
    let a = batch(&mut sim, &tp(0));
    sim.run_until(t0 + SECOND);
    let b = batch(&mut sim, &tp(0));
    sim.run_until(t0 + 30 * SECOND + 10 * MS);
    for &id in &a {
        assert!(
            matches!(sim.result(id), Some(Err(e)) if e.is_outcome_unknown()),
            "{:?}",
            sim.result(id)
        );
    }
    settle(&mut sim, 5 * SECOND);
    assert_eq!(acked_offsets(&sim, &b), offsets(0..10));
    assert_eq!(bumps(&sim), 0);
    let c = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, i32::MAX - 9, Some(code::UNKNOWN_PRODUCER_ID)),
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 0);
    assert_eq!(acked_offsets(&sim, &c), offsets(10..20));
}

// W (0-9) is acked; then a pre-2.5 broker's retention moves p0's log start to 10, right past W,
// which drops the producer's state with it, and leadership moves to broker 2 unseen by the
// producer. B (10-19) goes to broker 1, whose NOT_LEADER_OR_FOLLOWER under acks=all may
// follow an append, so B's outcome is unknown and B may never be renumbered. Broker 2 has no
// state for the producer and answers every attempt of B under its stamp UNKNOWN_PRODUCER_ID:
// B can never be appended under it. B fails at that answer, as of unknown outcome, instead
// of holding p0's rewrite until its delivery timeout (30 s); the next batch goes out under
// epoch 1 from sequence 0.
#[test]
fn a_batch_of_unknown_outcome_answered_unknown_producer_id_fails_at_once_and_frees_the_rewrite() {
    let mut setup = setup_with(&[1], |_| {});
    setup.rules.kafka_version = kacrab::testkit::broker::KafkaBehaviour::Legacy;
    let mut sim = started(setup);
    let w = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert!(sim.partition_quiet(&tp(0)));
    sim.truncate_partition(&tp(0));
    sim.set_leader(&tp(0), 2);
    let b = batch(&mut sim, &tp(0));
    let limit = sim.now() + 10 * SECOND;
    assert!(
        sim.run_while_not(limit, |sim| b.iter().all(|&id| sim.result(id).is_some())),
        "B is still unresolved 10 s later: {:?}",
        attempts(&sim, &tp(0))
    );
    for &id in &b {
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::OutcomeUnknown { .. }))
            ),
            "{:?}",
            sim.result(id)
        );
    }
    assert_eq!(
        attempts(&sim, &tp(0))[1..3],
        [
            (1, 0, 10, Some(code::NOT_LEADER_OR_FOLLOWER)),
            (2, 0, 10, Some(code::UNKNOWN_PRODUCER_ID)),
        ],
        "B met the moved leader, then the broker without the producer's state"
    );
    let next = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    assert_eq!(
        attempts(&sim, &tp(0)).last().copied(),
        Some((2, 1, 0, Some(code::NONE))),
        "p0 restarts at 0 under the new epoch"
    );
    assert_eq!(acked_offsets(&sim, &[w, next].concat()), offsets(0..20));
    assert_eq!(
        log_batches(&sim, &tp(0)),
        vec![(PID, 1, 0, 10)],
        "retention removed W, and B never reached the log"
    );
}

// W (0-9) is acked; then a pre-2.5 broker's retention moves p0's log start to 10, which drops
// the producer's state with it. D (10-19) is refused UNKNOWN_PRODUCER_ID, which asks for a
// bump; C (20-29), written right behind D, is lost before the broker reads it, and the
// connection stalls until C's request timeout (2 s here), so C's outcome is unknown. The
// rewrite waits for C, and C waits its turn behind D, so D is retried under its old stamp,
// which the broker refuses UNKNOWN_PRODUCER_ID for good. Renumbered, D could land after C, so
// D fails, definitely (no attempt of it landed), instead of holding p0 until its delivery
// timeout (30 s); C then fails as of unknown outcome and the next batch goes out under epoch
// 1 from sequence 0.
#[test]
fn a_refused_batch_ahead_of_one_of_unknown_outcome_answered_unknown_producer_id_under_a_superseded_epoch_fails_at_once(
) {
    let mut setup = setup_with(&[1], |c| c.request_timeout = 2 * SECOND);
    setup.rules.kafka_version = kacrab::testkit::broker::KafkaBehaviour::Legacy;
    let mut sim = started(setup);
    let w = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert!(sim.partition_quiet(&tp(0)));
    sim.truncate_partition(&tp(0));
    sim.add_fault(FaultRule::new(p0_batch_at(20), Fault::DropRequest));
    let d = batch(&mut sim, &tp(0));
    let c = batch(&mut sim, &tp(0));
    let limit = sim.now() + 10 * SECOND;
    assert!(
        sim.run_while_not(limit, |sim| {
            d.iter().chain(&c).all(|&id| sim.result(id).is_some())
        }),
        "D or C is still unresolved 10 s later: {:?}",
        attempts(&sim, &tp(0))
    );
    for &id in &d {
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::Rejected {
                    code: code::UNKNOWN_PRODUCER_ID,
                    ..
                }))
            ),
            "{:?}",
            sim.result(id)
        );
    }
    for &id in &c {
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::OutcomeUnknown { .. }))
            ),
            "{:?}",
            sim.result(id)
        );
    }
    let next = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    assert_eq!(
        attempts(&sim, &tp(0)).last().copied(),
        Some((1, 1, 0, Some(code::NONE))),
        "p0 restarts at 0 under the new epoch"
    );
    assert_eq!(acked_offsets(&sim, &[w, next].concat()), offsets(0..20));
    assert_eq!(
        log_batches(&sim, &tp(0)),
        vec![(PID, 1, 0, 10)],
        "retention removed W, and neither D nor C reached the log"
    );
}

// W (0-9) is acked. L (10-19) is refused definitely (INVALID_RECORD), which bumps the epoch;
// H (20-29), written right behind L under epoch 0, is lost before the broker reads it; the
// connection stalls until H's request timeout (2 s here), so H's outcome is unknown. Retried under
// its old stamp, H can never append (the broker's last sequence under epoch 0 is 9) and is answered
// OUT_OF_ORDER_SEQUENCE_NUMBER every time. H fails at the first such answer, as of unknown outcome,
// instead of holding p0's rewrite until its delivery timeout; the next batch goes out under epoch 1
// from sequence 0.
#[test]
fn a_batch_of_unknown_outcome_refused_out_of_order_under_a_superseded_epoch_fails_at_once_and_frees_the_rewrite(
) {
    let mut sim = started(setup_with(&[1], |c| c.request_timeout = 2 * SECOND));
    let w = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::Inject(code::INVALID_RECORD),
    ));
    sim.add_fault(FaultRule::new(p0_batch_at(20), Fault::DropRequest));
    let l = batch(&mut sim, &tp(0));
    let h = batch(&mut sim, &tp(0));
    // Well within the delivery timeout (120 s), which would otherwise end H.
    let limit = sim.now() + 10 * SECOND;
    assert!(
        sim.run_while_not(limit, |sim| h.iter().all(|&id| sim.result(id).is_some())),
        "H is still unresolved 10 s later"
    );
    for &id in &l {
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::Rejected {
                    code: code::INVALID_RECORD,
                    ..
                }))
            ),
            "{:?}",
            sim.result(id)
        );
    }
    for &id in &h {
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::OutcomeUnknown { .. }))
            ),
            "{:?}",
            sim.result(id)
        );
    }
    let h_attempts: Vec<_> = attempts(&sim, &tp(0))
        .into_iter()
        .filter(|a| a.1 == 0 && a.2 == 20)
        .collect();
    assert_eq!(
        h_attempts.last().map(|a| a.3),
        Some(Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
        "{h_attempts:?}"
    );
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    let next = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)).last().copied(),
        Some((1, 1, 0, Some(code::NONE))),
        "p0 restarts at 0 under the new epoch"
    );
    assert_eq!(acked_offsets(&sim, &[w, next].concat()), offsets(0..20));
}

// p0's B (10-19) is refused out of order and bumps the epoch; p1's X (0-9), sent under epoch 0
// before the bump, is refused out of order too, after it. No attempt of X landed and nothing
// of unknown outcome waits on p1, so X is not failed for the superseded stamp: it is
// renumbered under epoch 1 from 0 with p1's rewrite and appended. The one bump covers both.
#[test]
fn a_batch_refused_out_of_order_under_a_superseded_epoch_with_nothing_of_unknown_outcome_queued_is_renumbered_not_failed(
) {
    let mut sim = started(setup_with(&[1, 1], |_| {}));
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::Inject(code::OUT_OF_ORDER_SEQUENCE_NUMBER),
    ));
    sim.add_fault(
        FaultRule::new(
            RequestMatch::produce().partition(&tp(1)).base_sequence(0),
            Fault::Inject(code::OUT_OF_ORDER_SEQUENCE_NUMBER),
        )
        .delayed(50 * MS),
    );
    let b = batch(&mut sim, &tp(0));
    let x = batch(&mut sim, &tp(1));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(1)),
        vec![
            (1, 0, 0, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 1, 0, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 1);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    assert_eq!(acked_offsets(&sim, &[a, b].concat()), offsets(0..20));
    assert_eq!(acked_offsets(&sim, &x), offsets(0..10));
}

/// W (0-9) acked; D (10-19) refused NOT_ENOUGH_REPLICAS (no append), then with each code of
/// `d_retries` in turn; H (20-29) right behind D, answered REQUEST_TIMED_OUT after the broker
/// read it (its outcome is unknown; the broker refused it, as 10-19 were missing). Returns the
/// ids of W, D and H once everything settled.
fn next_batch_refused_ahead_of_one_of_unknown_outcome(
    sim: &mut Sim,
    d_retries: &[i16],
) -> [Vec<RecordId>; 3] {
    let w = batch(sim, &tp(0));
    settle(sim, SECOND);
    let d_match = p0_batch_at(10);
    sim.add_fault(FaultRule::new(
        d_match.clone(),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    for &error in d_retries {
        sim.add_fault(FaultRule::new(d_match.clone(), Fault::Inject(error)));
    }
    sim.add_fault(FaultRule::new(
        p0_batch_at(20),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    let d = batch(sim, &tp(0));
    let h = batch(sim, &tp(0));
    settle(sim, 10 * SECOND);
    assert_eq!(sim.pending_faults(), 0, "every scripted fault was met");
    [w, d, h]
}

// D is refused out of order while it is next in line and H, behind it, waits with an unknown
// outcome: both under the epoch in force. That is docs/java-rules.md §4.7's bump, not a refusal for
// good: D is retried under its own stamp ahead of H (H may be in the log under its stamp, so the
// rewrite waits for it) and appended, and H after it.
#[test]
fn out_of_order_on_the_next_batch_ahead_of_one_of_unknown_outcome_under_the_current_epoch_bumps_and_retries_it(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    let [w, d, h] = next_batch_refused_ahead_of_one_of_unknown_outcome(
        &mut sim,
        &[code::OUT_OF_ORDER_SEQUENCE_NUMBER],
    );
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 20, Some(code::REQUEST_TIMED_OUT)),
            (1, 0, 10, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 0, 10, Some(code::NONE)),
            (1, 0, 20, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 1);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    assert_eq!(acked_offsets(&sim, &[w, d, h].concat()), offsets(0..30));
}

// As above, but after the bump D's retry under its old stamp is answered UNKNOWN_PRODUCER_ID
// with no log start offset: the broker did not know the partition yet (docs/java-rules.md §4.6 case
// 1), which says nothing about D's stamp, so D is retried again rather than failed, and appended.
#[test]
fn unknown_producer_id_without_a_log_start_offset_under_a_superseded_epoch_ahead_of_one_of_unknown_outcome_is_retried(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    let [w, d, h] = next_batch_refused_ahead_of_one_of_unknown_outcome(
        &mut sim,
        &[
            code::OUT_OF_ORDER_SEQUENCE_NUMBER,
            code::UNKNOWN_PRODUCER_ID,
        ],
    );
    assert_eq!(
        attempts(&sim, &tp(0))[3..],
        [
            (1, 0, 10, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 0, 10, Some(code::UNKNOWN_PRODUCER_ID)),
            (1, 0, 10, Some(code::NONE)),
            (1, 0, 20, Some(code::NONE)),
        ]
    );
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    assert_eq!(acked_offsets(&sim, &[w, d, h].concat()), offsets(0..30));
}

#[test]
fn a_close_that_runs_out_of_time_reports_a_queued_batch_of_unknown_outcome_as_outcome_unknown_not_closed(
) {
    // X (0-9) is appended but its answer is lost with the connection; it waits 10 s for its
    // retry. Y, behind it, was never sent. The close's time runs out meanwhile.
    let mut sim = started(setup_with(&[1], |c| {
        c.retry_backoff = 10 * SECOND;
        c.retry_backoff_max = 10 * SECOND;
    }));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)),
        Fault::DropResponse { close: true },
    ));
    let x = batch(&mut sim, &tp(0));
    sim.run_for(500 * MS);
    let y = batch(&mut sim, &tp(0));
    sim.run_for(500 * MS);
    let slot = sim.engine(0).partition(&tp(0)).unwrap();
    assert!(
        slot.deque.front().is_some_and(|b| b.outcome_unknown),
        "X waits for its retry"
    );
    sim.close_now(0);
    for &id in &x {
        assert_eq!(sim.checker().log_offset(id), Some(i64::from(id - x[0])));
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::OutcomeUnknown { .. }))
            ),
            "X is in the log: {:?}",
            sim.result(id)
        );
    }
    for &id in &y {
        assert!(
            matches!(sim.result(id), Some(Err(ProduceError::Closed))),
            "Y was never sent: {:?}",
            sim.result(id)
        );
    }
    assert!(sim.engine(0).is_idle());
}

// X (0-9) is on the wire, its answer held, when the close's time runs out: X ends as of unknown
// outcome, and the partition keeps nothing of it, neither counted on the wire nor in flight.
#[test]
fn a_close_that_runs_out_of_time_with_a_batch_on_the_wire_leaves_nothing_of_it_in_flight() {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)),
        Fault::Hold,
    ));
    let x = batch(&mut sim, &tp(0));
    sim.run_for(50 * MS);
    assert_eq!(sim.engine(0).partition(&tp(0)).unwrap().on_wire, 1);
    sim.close_now(0);
    for &id in &x {
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::OutcomeUnknown { .. }))
            ),
            "{:?}",
            sim.result(id)
        );
    }
    let slot = sim.engine(0).partition(&tp(0)).unwrap();
    assert_eq!(slot.on_wire, 0);
    assert!(!slot.entry.has_inflight_batches());
    assert!(sim.partition_quiet(&tp(0)));
    assert!(sim.engine(0).is_idle());
}
