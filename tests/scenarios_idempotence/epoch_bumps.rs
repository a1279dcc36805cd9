//! Epoch bumps (docs/java-rules.md §9 items 6-7): OUT_OF_ORDER_SEQUENCE_NUMBER on the next batch,
//! the producer id dropped at epoch 32767, InitProducerId refusals, and a retry answered out of
//! order after the producer state was rebuilt from a snapshot.

use kacrab::error::ProduceError;
use kacrab::testkit::internals::engine::ProducerIdAndEpoch;
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::testkit::sim::{Fault, FaultRule, RequestMatch, Sim, EPOCH_MS, MS, SECOND};
use kafka_protocol::messages::ApiKey;

use super::{
    acked_offsets, assert_rejected_with, attempts, batch, bumps, log_batches, offsets, p0_batch_at,
    rewrites, settle, setup_with, started, tp, PID,
};

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 item 6
// ---------------------------------------------------------------------------------------------

#[test]
fn out_of_order_sequence_on_the_next_batch_bumps_locally_renumbers_p0_from_0_and_holds_p1_until_its_old_epoch_batch_completes(
) {
    // p0 and p1 both on broker 1.
    let mut sim = started(setup_with(&[1, 1], |_| {}));
    let init_requests = sim.requests_served(ApiKey::InitProducerId);
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::Inject(code::OUT_OF_ORDER_SEQUENCE_NUMBER),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(1)),
        Fault::Hold,
    ));
    let b = batch(&mut sim, &tp(0)); // p0 10-19: the broker says out of order
    let x = batch(&mut sim, &tp(1)); // p1 0-9 under epoch 0: its answer is held
    sim.run_for(50 * MS);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1), "bumped");
    assert_eq!(
        sim.requests_served(ApiKey::InitProducerId),
        init_requests,
        "an idempotent bump is local"
    );
    let y = batch(&mut sim, &tp(1)); // p1: must wait for x
    sim.run_for(500 * MS);
    assert_eq!(
        attempts(&sim, &tp(1)),
        vec![(1, 0, 0, None)],
        "p1's new batch waits while its epoch-0 batch is in flight"
    );

    sim.release_held();
    settle(&mut sim, 5 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 1, 0, Some(code::NONE)),
        ],
        "p0's batch is re-sent as (epoch 1, base 0)"
    );
    assert_eq!(
        attempts(&sim, &tp(1)),
        vec![(1, 0, 0, Some(code::NONE)), (1, 1, 0, Some(code::NONE))],
        "p1 starts at 0 under the new epoch once its old batch completed"
    );
    assert_eq!(
        log_batches(&sim, &tp(0)),
        vec![(PID, 0, 0, 10), (PID, 1, 0, 10)]
    );
    assert_eq!(acked_offsets(&sim, &[a, b].concat()), offsets(0..20));
    assert_eq!(acked_offsets(&sim, &[x, y].concat()), offsets(0..20));
}

// A partition's first batch is next in line (`TransactionManager.isNextSequence`: nothing acked
// counts as last acked -1), so OUT_OF_ORDER_SEQUENCE_NUMBER on it is the docs/java-rules.md §4.7
// case that bumps, as for any next-in-line batch: the batch is renumbered under epoch 1 from 0, not
// retried under its stamp.
#[test]
fn out_of_order_sequence_on_the_first_batch_of_a_partition_bumps_and_renumbers_it_from_0() {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::Inject(code::OUT_OF_ORDER_SEQUENCE_NUMBER),
    ));
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 1, 0, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 1);
    assert_eq!(rewrites(&sim), 1);
    assert_eq!(acked_offsets(&sim, &a), offsets(0..10));
}

// The rewrite starts the partition over under the new epoch with nothing acked, so the
// renumbered batch is next in line again. Its refusal answers the attempt that carried the new
// stamp (the rewrite waited until none of the partition's batches was on the wire), not one
// from before the rewrite: refused out of order once more, it bumps once more and is
// renumbered from 0 under the epoch after.
#[test]
fn a_renumbered_batch_answered_out_of_order_again_bumps_again_and_is_renumbered_under_the_next_epoch(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::Inject(code::OUT_OF_ORDER_SEQUENCE_NUMBER),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::Inject(code::OUT_OF_ORDER_SEQUENCE_NUMBER),
    ));
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 1, 0, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 2, 0, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 2);
    assert_eq!(rewrites(&sim), 2);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 2));
    assert_eq!(acked_offsets(&sim, &[a, b].concat()), offsets(0..20));
}

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 item 7
// ---------------------------------------------------------------------------------------------

#[test]
fn a_bump_at_epoch_32767_drops_the_producer_id_and_nothing_drains_until_a_fresh_init_producer_id_returns(
) {
    let mut sim = Sim::new(setup_with(&[1], |_| {}));
    let exhausted = ProducerIdAndEpoch::new(500, i16::MAX);
    sim.install_identity(exhausted);
    sim.start();
    sim.run_for(100 * MS);
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    // A non-retriable error bumps the epoch for p0; at 32767 that means a new producer id.
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)),
        Fault::Inject(code::INVALID_RECORD),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::api(ApiKey::InitProducerId),
        Fault::Hold,
    ));
    let init_requests = sim.requests_served(ApiKey::InitProducerId);
    let b = batch(&mut sim, &tp(0));
    sim.run_for(50 * MS);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::NONE);
    assert_eq!(sim.engine(0).identity(), ProducerIdAndEpoch::NONE);
    assert_eq!(
        sim.requests_served(ApiKey::InitProducerId),
        init_requests + 1
    );
    let c = batch(&mut sim, &tp(0));
    let requests = sim.produce_trace().len();
    sim.run_for(SECOND);
    assert_eq!(
        sim.produce_trace().len(),
        requests,
        "nothing drains without a producer id"
    );

    sim.release_held();
    settle(&mut sim, 5 * SECOND);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 0));
    let last = sim.produce_trace().last().unwrap();
    assert_eq!(
        (last.batches[0].producer, last.batches[0].base_sequence),
        (ProducerIdAndEpoch::new(PID, 0), 0)
    );
    assert_eq!(acked_offsets(&sim, &a), offsets(0..10));
    for id in b {
        assert!(matches!(
            sim.result(id),
            Some(Err(ProduceError::Rejected {
                code: code::INVALID_RECORD,
                ..
            }))
        ));
    }
    assert_eq!(acked_offsets(&sim, &c), offsets(10..20));
}

// The same drop of the producer id, then InitProducerId refused once (CLUSTER_AUTHORIZATION_FAILED,
// docs/java-rules.md §5.2 / §9 item 18: the queued batches fail and the producer stays
// uninitialized). One of them, on p1, is waiting to retry an attempt whose answer was lost after
// the append: it is in the log, so it must not be reported as a definite failure, and its stamp
// must not stay behind in p1's in-flight list, where it would block every later batch of p1 (a
// stamp of the dropped producer id that no batch owns any more).
#[test]
fn init_producer_id_refused_after_the_id_was_dropped_neither_misreports_a_batch_of_unknown_outcome_nor_wedges_its_partition(
) {
    let mut sim = Sim::new(setup_with(&[1, 2], |_| {}));
    sim.install_identity(ProducerIdAndEpoch::new(500, i16::MAX));
    sim.start();
    sim.run_for(100 * MS);
    let a0 = batch(&mut sim, &tp(0));
    let a1 = batch(&mut sim, &tp(1));
    settle(&mut sim, SECOND);
    sim.add_fault(
        FaultRule::new(
            RequestMatch::produce().partition(&tp(1)),
            Fault::DropResponse { close: true },
        )
        .times(1),
    );
    sim.add_fault(
        FaultRule::new(
            RequestMatch::produce().partition(&tp(0)),
            Fault::Inject(code::INVALID_RECORD),
        )
        .times(1),
    );
    sim.add_fault(
        FaultRule::new(
            RequestMatch::api(ApiKey::InitProducerId),
            Fault::Inject(code::CLUSTER_AUTHORIZATION_FAILED),
        )
        .times(1),
    );
    let x = batch(&mut sim, &tp(1));
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    for id in &b {
        assert!(
            matches!(sim.result(*id), Some(Err(_))),
            "the refused batch: {:?}",
            sim.result(*id)
        );
    }
    for id in &x {
        assert!(
            matches!(
                sim.result(*id),
                Some(Ok(_)) | Some(Err(ProduceError::OutcomeUnknown { .. }))
            ),
            "a record whose attempt was appended: {:?}",
            sim.result(*id)
        );
    }
    // p1 goes on under a new producer id.
    let y = batch(&mut sim, &tp(1));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 0));
    assert_eq!(acked_offsets(&sim, &a0), offsets(0..10));
    assert_eq!(acked_offsets(&sim, &a1), offsets(0..10));
    assert_eq!(acked_offsets(&sim, &y), offsets(20..30));
}

// ---------------------------------------------------------------------------------------------
// Producer state rebuilt from a snapshot (one batch per producer)
// ---------------------------------------------------------------------------------------------

/// Seq 0-9 is appended but answered REQUEST_TIMED_OUT; 10-19 is acked; then the leader reloads
/// its producer state from a snapshot, which keeps only 10-19 (Kafka's `writeSnapshot`), so
/// the retry of 0-9 is OUT_OF_ORDER_SEQUENCE_NUMBER although it is in the log. The batch may
/// never be reported as failed definitely, and nothing is written twice.
#[test]
fn a_retry_answered_out_of_order_after_a_snapshot_reload_is_never_failed_definitely() {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(
        FaultRule::new(p0_batch_at(0), Fault::None).before(|cluster| {
            cluster.reload_producer_state_from_snapshot("t", 0, EPOCH_MS);
        }),
    );
    let first = batch(&mut sim, &tp(0));
    let second = batch(&mut sim, &tp(0));
    settle(&mut sim, 40 * SECOND);
    let tried = attempts(&sim, &tp(0));
    assert_eq!(
        tried[..3],
        [
            (1, 0, 0, Some(code::REQUEST_TIMED_OUT)),
            (1, 0, 10, Some(code::NONE)),
            (1, 0, 0, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
        ]
    );
    // As Java's `TransactionManager.canRetry` does for a batch that is not next in line: retried at
    // the same stamp (never re-stamped, it may be in the log) until its delivery timeout.
    assert!(tried[3..]
        .iter()
        .all(|&a| a == (1, 0, 0, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER))));
    assert_eq!(acked_offsets(&sim, &second), offsets(10..20));
    for &id in &first {
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::OutcomeUnknown { .. }))
            ),
            "record {id} is in the log: {:?}",
            sim.result(id)
        );
    }
    assert_eq!(log_batches(&sim, &tp(0)).len(), 2, "nothing written twice");
    assert_eq!(bumps(&sim), 0);
}

/// Producer-wide epoch bump while p0 still has batches in flight under epoch 0 (max in flight
/// 5, p0 led by broker 1, p1 by broker 2):
/// - W (p0 0-9) is acked under epoch 0;
/// - Y (p1 0) is refused INVALID_RECORD: a definite failure, so the producer bumps to epoch 1
///   (docs/java-rules.md §4.2); p0 keeps epoch 0 until nothing of it is in flight (gate 3a);
/// - X (p0 10-19) is answered REQUEST_TIMED_OUT without being appended: its outcome is unknown
///   and it waits for its retry backoff, queued under its epoch-0 stamp;
/// - B (p0 20-29), on the wire beside X, is refused OUT_OF_ORDER_SEQUENCE_NUMBER (10-19 are
///   missing); the answer arrives 50 ms late, after the bump, while X is still queued.
///
/// Java's `TransactionManager.canRetry` (docs/java-rules.md §4.7 case 1) retries B without a bump:
/// no sequence is unresolved and B is not next in line (last acked 9, base 20). The first-in-flight
/// gate sends it only after X, whose retry lands at 10-19, and B then lands at 20-29 under its own
/// stamp. B may not be failed because a batch of unknown outcome is queued AHEAD of it: only one
/// queued BEHIND it (a later sequence) could be overtaken by B renumbered under the new epoch.
#[test]
fn an_out_of_order_batch_behind_an_earlier_batch_of_unknown_outcome_is_retried_not_failed() {
    let mut sim = started(setup_with(&[1, 2], |_| {}));
    let w = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(1)).base_sequence(0),
        Fault::Inject(code::INVALID_RECORD),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::Inject(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(FaultRule::new(p0_batch_at(20), Fault::Delay(50 * MS)));
    let y = batch(&mut sim, &tp(1));
    let x = batch(&mut sim, &tp(0));
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, 10 * SECOND);
    assert_rejected_with(&sim, &y, code::INVALID_RECORD, "Y");
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    let tried = attempts(&sim, &tp(0));
    assert_eq!(
        tried[..3],
        [
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::REQUEST_TIMED_OUT)),
            (1, 0, 20, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
        ]
    );
    assert_eq!(acked_offsets(&sim, &w), offsets(0..10));
    assert_eq!(
        acked_offsets(&sim, &x),
        offsets(10..20),
        "X retried under its stamp"
    );
    assert_eq!(
        acked_offsets(&sim, &b),
        offsets(20..30),
        "B retried after X under its stamp, not failed: {tried:?}"
    );
}

// InitProducerId answers an idempotent producer may get (docs/java-rules.md §5.2):
// CLUSTER_AUTHORIZATION_FAILED fails the batches waiting for an id and the producer asks again by
// itself (docs/java-rules.md §9 item 18), so a later batch lands; PRODUCER_FENCED (as
// UNSUPPORTED_VERSION and INVALID_PRODUCER_ID_MAPPING) stops the producer, and every batch fails
// with that error.
#[test]
fn init_producer_id_refused_for_authorization_fails_the_waiting_batches_and_asks_again_but_fenced_is_fatal(
) {
    let mut sim = Sim::new(setup_with(&[1], |_| {}));
    sim.add_fault(
        FaultRule::new(
            RequestMatch::api(ApiKey::InitProducerId),
            Fault::Inject(code::CLUSTER_AUTHORIZATION_FAILED),
        )
        .times(1),
    );
    let waiting = batch(&mut sim, &tp(0));
    sim.start();
    settle(&mut sim, 5 * SECOND);
    for id in &waiting {
        assert!(
            matches!(sim.result(*id), Some(Err(ProduceError::Fatal(m))) if m.to_string().contains("CLUSTER_AUTHORIZATION_FAILED")),
            "a batch waiting for the refused id: {:?}",
            sim.result(*id)
        );
    }
    assert!(sim.engine(0).fatal_error().is_none(), "not fatal");
    let later = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(acked_offsets(&sim, &later), offsets(0..10));

    let mut sim = Sim::new(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        RequestMatch::api(ApiKey::InitProducerId),
        Fault::Inject(code::PRODUCER_FENCED),
    ));
    let waiting = batch(&mut sim, &tp(0));
    sim.start();
    settle(&mut sim, 5 * SECOND);
    assert!(
        sim.engine(0).fatal_error().is_some(),
        "a fenced InitProducerId stops the producer"
    );
    for id in &waiting {
        assert!(
            matches!(sim.result(*id), Some(Err(ProduceError::Fatal(m))) if m.to_string().contains("PRODUCER_FENCED")),
            "{:?}",
            sim.result(*id)
        );
    }
}
