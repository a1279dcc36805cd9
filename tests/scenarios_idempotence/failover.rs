//! Failover cases: lost answers, leaders that move or die, and epoch bumps while a batch of
//! unknown outcome is in flight or queued, which is never re-stamped.

use kacrab::error::ProduceError;
use kacrab::testkit::internals::engine::ProducerIdAndEpoch;
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::testkit::sim::{Fault, FaultRule, RequestMatch, Verdict, MS, SECOND};

use super::{
    acked_offsets, assert_rejected_with, attempts, batch, bumps, log_batches, offsets, p0_batch_at,
    settle, setup_with, started, stretched, tp, PID,
};

// ---------------------------------------------------------------------------------------------
// Failover cases
// ---------------------------------------------------------------------------------------------

#[test]
fn a_lost_answer_to_an_appended_batch_is_retried_under_its_stamp_deduplicated_and_acked_at_the_original_offset(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)),
        Fault::DropResponse { close: true },
    ));
    let a = batch(&mut sim, &tp(0));
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    let tried = attempts(&sim, &tp(0));
    assert_eq!(tried[0], (1, 0, 0, None), "the answer was lost");
    assert!(tried[1..].contains(&(1, 0, 0, Some(code::NONE))));
    assert_eq!(
        sim.cluster().duplicates_answered(),
        1,
        "the retry was a duplicate"
    );
    assert_eq!(
        log_batches(&sim, &tp(0)),
        vec![(PID, 0, 0, 10), (PID, 0, 10, 10)]
    );
    assert_eq!(acked_offsets(&sim, &[a, b].concat()), offsets(0..20));
    assert_eq!(bumps(&sim), 0);
}

// An idle producer (nothing queued, nothing in flight) loses its connection to p0's leader,
// broker 1, which is down; a second later the controller moves p0 to broker 2. The next
// record's connect to broker 1 is refused. Java's NetworkClient asks for a metadata update on
// every disconnect and failed connect, so the record learns the new leader and is acked long
// before its delivery timeout, instead of waiting for `metadata.max.age.ms` (300 s) while the
// connects keep failing.
#[test]
fn a_record_sent_after_its_idle_leader_died_is_refreshed_to_the_new_leader_before_it_times_out() {
    let mut sim = started(setup_with(&[1], |c| {
        c.delivery_timeout = 30 * SECOND;
        c.metadata_max_age = 300 * SECOND;
    }));
    let first = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert!(sim.all_idle(), "the producer is idle before the failure");
    sim.broker_down(1);
    sim.run_for(SECOND);
    sim.set_leader(&tp(0), 2);
    sim.run_for(SECOND);
    let next = batch(&mut sim, &tp(0));
    settle(&mut sim, 60 * SECOND);
    assert_eq!(acked_offsets(&sim, &[first, next].concat()), offsets(0..20));
    assert_eq!(
        attempts(&sim, &tp(0)).last().copied(),
        Some((2, 0, 10, Some(code::NONE))),
        "the record went to the new leader"
    );
}

#[test]
fn a_retried_batch_that_expires_bumps_only_after_the_partition_has_nothing_in_flight_and_the_broker_sees_the_new_epoch_from_0(
) {
    let mut sim = started(setup_with(&[1], stretched(40 * SECOND)));
    let z = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    let t0 = sim.now();
    // A (10-19) is refused; its answer comes at 15 s and it waits 40 s to retry, so it
    // expires in the queue at 30 s. B (20-29), sent at 10 s, is still on the wire then: its
    // answer would only come at 45 s, and it expires at 40 s.
    sim.add_fault(
        FaultRule::new(p0_batch_at(10), Fault::Inject(code::NOT_ENOUGH_REPLICAS))
            .delayed(15 * SECOND),
    );
    sim.add_fault(FaultRule::new(p0_batch_at(20), Fault::Delay(35 * SECOND)));
    let a = batch(&mut sim, &tp(0));
    sim.run_until(t0 + 10 * SECOND);
    let b = batch(&mut sim, &tp(0));
    sim.run_until(t0 + 30 * SECOND + 10 * MS);
    for &id in &a {
        assert!(matches!(
            sim.result(id),
            Some(Err(ProduceError::TimedOut { .. }))
        ));
    }
    assert_eq!(
        sim.engine(0).partition(&tp(0)).unwrap().unresolved_sequence,
        Some(20)
    );
    let c = batch(&mut sim, &tp(0));
    sim.run_until(t0 + 40 * SECOND - MS);
    assert_eq!(bumps(&sim), 0, "B is still in flight");
    assert_eq!(attempts(&sim, &tp(0)).len(), 3, "C is held");
    sim.run_until(t0 + 40 * SECOND + 10 * MS);
    assert_eq!(bumps(&sim), 1, "B expired: nothing is in flight");
    for &id in &b {
        assert_eq!(sim.verdict(id), Verdict::Unknown);
    }
    settle(&mut sim, 30 * SECOND);
    assert_eq!(bumps(&sim), 1);
    assert_eq!(
        attempts(&sim, &tp(0)).last().copied(),
        Some((1, 1, 0, Some(code::NONE))),
        "C goes out as (epoch 1, base 0)"
    );
    assert_eq!(acked_offsets(&sim, &z), offsets(0..10));
    assert_eq!(acked_offsets(&sim, &c), offsets(10..20));
}

#[test]
fn a_bump_while_another_partition_has_a_batch_of_unknown_outcome_retries_that_batch_under_its_old_stamp_and_holds_its_new_batches(
) {
    // p0 on broker 1, p1 on broker 2. p1's second batch lands but its answer is lost with
    // the connection, while p0 triggers a bump.
    let mut sim = started(setup_with(&[1, 2], |_| {}));
    let a = batch(&mut sim, &tp(0));
    let x0 = batch(&mut sim, &tp(1));
    settle(&mut sim, SECOND);
    // p1's next batch (10-19) is appended, its answer is held, then the connection drops.
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(1)),
        Fault::Hold,
    ));
    let x = batch(&mut sim, &tp(1));
    sim.run_for(10 * MS);
    // p0's next batch is refused for good: the producer bumps its epoch for p0.
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)),
        Fault::Inject(code::TOPIC_AUTHORIZATION_FAILED),
    ));
    let b = batch(&mut sim, &tp(0));
    sim.run_for(50 * MS);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    let y = batch(&mut sim, &tp(1));
    sim.run_for(50 * MS);
    // Now the held answer is lost with its connection: x's outcome is unknown.
    sim.broker_down(2);
    sim.run_for(200 * MS);
    sim.broker_up(2);
    settle(&mut sim, 10 * SECOND);

    let p1 = attempts(&sim, &tp(1));
    assert_eq!(p1[0], (2, 0, 0, Some(code::NONE)));
    assert_eq!(p1[1], (2, 0, 10, None), "x's first answer was lost");
    assert!(
        p1[2..].contains(&(2, 0, 10, Some(code::NONE))),
        "x is retried under its old stamp and answered as a duplicate: {p1:?}"
    );
    let x_done = p1
        .iter()
        .position(|&a| a == (2, 0, 10, Some(code::NONE)))
        .unwrap();
    assert!(
        p1[..x_done].iter().all(|a| a.1 == 0),
        "p1's new batch waits for x: {p1:?}"
    );
    assert_eq!(p1.last().copied(), Some((2, 1, 0, Some(code::NONE))));
    assert_eq!(
        log_batches(&sim, &tp(1)),
        vec![(PID, 0, 0, 10), (PID, 0, 10, 10), (PID, 1, 0, 10)],
        "no duplicate anywhere"
    );
    assert_eq!(acked_offsets(&sim, &[x0, x, y].concat()), offsets(0..30));
    assert_eq!(acked_offsets(&sim, &a), offsets(0..10));
    for &id in &b {
        assert!(matches!(
            sim.result(id),
            Some(Err(ProduceError::Rejected {
                code: code::TOPIC_AUTHORIZATION_FAILED,
                ..
            }))
        ));
    }
}

#[test]
fn a_bump_for_a_partition_never_re_stamps_its_batch_of_unknown_outcome_and_the_retry_is_deduplicated(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    // X (0-9) is appended but answered REQUEST_TIMED_OUT: its outcome is unknown. Y (10-19),
    // behind it on the connection, is refused for good, which bumps the epoch for p0 while X
    // waits for its retry.
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::Inject(code::INVALID_RECORD),
    ));
    let x = batch(&mut sim, &tp(0));
    let y = batch(&mut sim, &tp(0));
    sim.run_for(20 * MS);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1), "bumped");
    let z = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::REQUEST_TIMED_OUT)),
            (1, 0, 10, Some(code::INVALID_RECORD)),
            (1, 0, 0, Some(code::NONE)),
            (1, 1, 0, Some(code::NONE)),
        ],
        "X keeps (epoch 0, base 0); only then does p0 move to epoch 1"
    );
    assert_eq!(sim.cluster().duplicates_answered(), 1);
    assert_eq!(
        acked_offsets(&sim, &x),
        offsets(0..10),
        "X once, at its offsets"
    );
    for &id in &y {
        assert_eq!(sim.verdict(id), Verdict::Failed);
    }
    assert_eq!(acked_offsets(&sim, &z), offsets(10..20));
    assert_eq!(
        log_batches(&sim, &tp(0)),
        vec![(PID, 0, 0, 10), (PID, 1, 0, 10)]
    );
}

#[test]
fn a_batch_whose_landed_attempt_left_the_broker_window_stays_outcome_unknown_when_its_retry_is_out_of_order(
) {
    let mut sim = started(setup_with(&[1], |c| c.metadata_max_age = SECOND));
    let t0 = sim.now();
    // X (0-9) is appended by broker 1, but its answer never comes back.
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).to_broker(1),
        Fault::Hold,
    ));
    let x = batch(&mut sim, &tp(0));
    sim.run_for(10 * MS);
    // Leadership moves; the next metadata refresh sends new batches to broker 2, where six of
    // them are acked: X is no longer among the last five batches the broker remembers.
    sim.set_leader(&tp(0), 2);
    sim.run_until(t0 + 1_100 * MS);
    let mut later = Vec::new();
    for _ in 0..6 {
        later.extend(batch(&mut sim, &tp(0)));
        sim.run_for(20 * MS);
    }
    settle(&mut sim, 40 * SECOND);
    let retries: Vec<_> = attempts(&sim, &tp(0))
        .into_iter()
        .filter(|a| a.0 == 2 && a.2 == 0)
        .collect();
    assert!(
        !retries.is_empty()
            && retries
                .iter()
                .all(|a| a.3 == Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
        "X's retries are refused as out of order: {retries:?}"
    );
    for &id in &x {
        assert_eq!(sim.checker().log_offset(id), Some(i64::from(id - x[0])));
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::OutcomeUnknown { .. }))
            ),
            "X is in the log: it may not be reported as definitely failed: {:?}",
            sim.result(id)
        );
    }
    assert_eq!(acked_offsets(&sim, &later), offsets(10..70));
}

#[test]
fn a_batch_overtaken_on_a_fresh_partition_fails_at_the_bump_instead_of_landing_after_later_records()
{
    let mut sim = started(setup_with(&[1], |_| {}));
    // The broker has no state for the producer on p0, so it takes any first sequence. A
    // (0-9) is refused without an append, B (10-19) is appended first, and C (20-29) is
    // refused for good, which bumps the epoch for p0.
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(20),
        Fault::Inject(code::INVALID_RECORD),
    ));
    let a = batch(&mut sim, &tp(0));
    let b = batch(&mut sim, &tp(0));
    let c = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    let d = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    // Renumbering A under the new epoch would append it after B, which was sent later.
    assert_rejected_with(
        &sim,
        &a,
        code::OUT_OF_ORDER_SEQUENCE_NUMBER,
        "A cannot be placed in order any more",
    );
    assert_eq!(acked_offsets(&sim, &b), offsets(0..10));
    for &id in &c {
        assert_eq!(sim.verdict(id), Verdict::Failed);
    }
    assert_eq!(acked_offsets(&sim, &d), offsets(10..20));
    assert_eq!(
        log_batches(&sim, &tp(0)),
        vec![(PID, 0, 10, 10), (PID, 1, 0, 10)]
    );
}

// The broker has no state for the producer on p0, so it takes any first sequence. A (0-9) is
// refused without an append, B (10-19) is appended first but answered REQUEST_TIMED_OUT, so its
// outcome is unknown, and C (20-29) is refused for good, which bumps the epoch for p0. B may be
// in the log ahead of A: renumbering A and B under the new epoch would append A after B and B
// a second time. A fails instead (it never reached the log), B is retried under its own stamp
// and found in the log, and p0 then restarts at 0 under the new epoch.
#[test]
fn a_batch_of_unknown_outcome_behind_a_refused_batch_on_a_fresh_partition_is_never_renumbered_and_the_refused_one_fails(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(20),
        Fault::Inject(code::INVALID_RECORD),
    ));
    let a = batch(&mut sim, &tp(0));
    let b = batch(&mut sim, &tp(0));
    let c = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    let d = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    for &id in &a {
        assert!(
            matches!(sim.result(id), Some(Err(ProduceError::Rejected { .. }))),
            "A cannot be placed in order any more: {:?}",
            sim.result(id)
        );
    }
    assert_eq!(acked_offsets(&sim, &b), offsets(0..10));
    for &id in &c {
        assert_eq!(sim.verdict(id), Verdict::Failed);
    }
    assert_eq!(acked_offsets(&sim, &d), offsets(10..20));
    assert_eq!(
        log_batches(&sim, &tp(0)),
        vec![(PID, 0, 10, 10), (PID, 1, 0, 10)]
    );
}

// The broker has no state for the producer on p0. Z (0-9) is refused without an append, A
// (10-19) is appended first but answered REQUEST_TIMED_OUT, B (20-29) is acked behind it and C
// (30-39) is refused for good, which bumps the epoch for p0. Z and A both lie before the last
// acked sequence, but only Z is known not to be in the log: A may be (it is), so it is never
// reported as definitely failed. It goes out under its own stamp and is found in the log.
#[test]
fn a_batch_of_unknown_outcome_before_the_last_acked_sequence_is_not_failed_as_overtaken_at_the_bump(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(30),
        Fault::Inject(code::INVALID_RECORD),
    ));
    let z = batch(&mut sim, &tp(0));
    let a = batch(&mut sim, &tp(0));
    let b = batch(&mut sim, &tp(0));
    let c = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    let d = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    for &id in &z {
        assert_eq!(sim.verdict(id), Verdict::Failed);
    }
    assert_eq!(acked_offsets(&sim, &a), offsets(0..10));
    assert_eq!(acked_offsets(&sim, &b), offsets(10..20));
    for &id in &c {
        assert_eq!(sim.verdict(id), Verdict::Failed);
    }
    assert_eq!(acked_offsets(&sim, &d), offsets(20..30));
    assert_eq!(
        log_batches(&sim, &tp(0)),
        vec![(PID, 0, 10, 10), (PID, 0, 20, 10), (PID, 1, 0, 10)]
    );
}

#[test]
fn a_bump_never_re_stamps_a_batch_of_unknown_outcome_queued_behind_the_head_and_it_is_appended_once(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    // The broker has no state for the producer on p0, so it takes any first sequence. A
    // (0-9) is refused without an append. B (10-19) is appended first, but answered
    // REQUEST_TIMED_OUT: its outcome is unknown. C (20-29) is refused for good, which bumps
    // the epoch for p0 while A and B wait for their retries, A at the head of the queue.
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(20),
        Fault::Inject(code::INVALID_RECORD),
    ));
    let a = batch(&mut sim, &tp(0));
    let b = batch(&mut sim, &tp(0));
    let c = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    let d = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    let tried = attempts(&sim, &tp(0));
    assert!(
        tried.iter().all(|t| t.1 == 0 || t.2 != 10),
        "B was sent under the new epoch: {tried:?}"
    );
    // B is in the log once, at the offsets of its first append; A, refused every time, can no
    // longer be placed before it and fails definitely.
    assert_eq!(acked_offsets(&sim, &b), offsets(0..10));
    for &id in &a {
        assert_eq!(sim.verdict(id), Verdict::Failed, "{:?}", sim.result(id));
    }
    for &id in &c {
        assert_eq!(sim.verdict(id), Verdict::Failed);
    }
    assert_eq!(acked_offsets(&sim, &d), offsets(10..20));
    assert_eq!(
        log_batches(&sim, &tp(0)),
        vec![(PID, 0, 10, 10), (PID, 1, 0, 10)]
    );
}
