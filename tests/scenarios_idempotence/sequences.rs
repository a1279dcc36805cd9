//! Sequences and retries under one epoch (docs/java-rules.md §9 items 1-5, 8 and 11): stamping
//! at drain, the wrap at `i32::MAX`, five in flight through a moved leader, retries of a batch
//! answered after its append, answers that keep the stamp, and the request timeout on the wire.

use kacrab::error::ProduceError;
use kacrab::testkit::batch::TestBatch;
use kacrab::testkit::broker::{BrokerRules, Cluster};
use kacrab::testkit::internals::engine::ProducerIdAndEpoch;
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::testkit::sim::{
    Fault, FaultRule, RecordId, RequestMatch, Sim, Verdict, EPOCH_MS, MS, SECOND,
};
use kafka_protocol::messages::ApiKey;

use super::{
    acked_offsets, assert_rejected_with, attempts, batch, bumps, log_batches, offsets, p0_batch_at,
    request_for, settle, setup_with, started, stretched, tp, PAD, PID,
};

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 item 1
// ---------------------------------------------------------------------------------------------

#[test]
fn batches_appended_before_the_producer_id_is_known_are_stamped_at_drain_from_sequence_0() {
    let mut sim = Sim::new(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        RequestMatch::api(ApiKey::InitProducerId),
        Fault::Hold,
    ));
    sim.start();
    sim.run_for(100 * MS);
    assert!(!sim.engine(0).identity().is_valid());
    let ids: Vec<RecordId> = (0..3).flat_map(|_| batch(&mut sim, &tp(0))).collect();
    sim.run_for(100 * MS);
    assert!(
        sim.produce_trace().is_empty(),
        "nothing may be sent before the producer id is known"
    );

    sim.release_held();
    settle(&mut sim, SECOND);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 0));
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![(1, 0, 0, Some(0)), (1, 0, 10, Some(0)), (1, 0, 20, Some(0))]
    );
    assert_eq!(
        sim.engine(0).partition(&tp(0)).unwrap().entry.next_sequence,
        30
    );
    assert_eq!(acked_offsets(&sim, &ids), offsets(0..30));
}

// On a CreateTime topic the broker answers a log append time of -1, and each acknowledged
// record reports the timestamp it was sent with.
#[test]
fn an_acknowledged_record_on_a_create_time_topic_reports_the_timestamp_it_was_sent_with() {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.run_for(1_234 * MS);
    let sent_at = EPOCH_MS + (sim.now() / MS) as i64;
    let ids = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    for &id in &ids {
        match sim.result(id) {
            Some(Ok(meta)) => assert_eq!(meta.timestamp, sent_at, "record {id}"),
            other => panic!("record {id}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 item 2
// ---------------------------------------------------------------------------------------------

#[test]
fn sequences_wrap_from_i32_max_to_0_and_the_broker_accepts_both_sides_of_the_wrap() {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.start_sequence_at(&tp(0), i32::MAX - 1);
    let first = sim.send_many(&tp(0), 3, PAD);
    settle(&mut sim, SECOND);
    assert_eq!(
        sim.engine(0).partition(&tp(0)).unwrap().entry.next_sequence,
        1,
        "MAX-1 + 3 records wraps to 1"
    );
    let second = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![(1, 0, i32::MAX - 1, Some(0)), (1, 0, 1, Some(0))]
    );
    assert_eq!(acked_offsets(&sim, &first), offsets(0..3));
    assert_eq!(acked_offsets(&sim, &second), offsets(3..13));
    assert_eq!(bumps(&sim), 0);

    // A negative base sequence is not a wrap: the broker refuses it (`LogValidator`).
    let mut cluster = Cluster::new(&[1], BrokerRules::default());
    cluster.create_topic("t", &[1]);
    let negative = TestBatch::idempotent(PID, 0, -5, 1).encode();
    let result = cluster.produce(1, "t", 0, &negative, -1, None, 0);
    assert_eq!(result.error_code, code::INVALID_RECORD);
}

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 item 3, and five in flight through a failover
// ---------------------------------------------------------------------------------------------

/// Five batches in flight to broker 1; the leader moves to broker 2 just before the third
/// arrives, so 3, 4 and 5 get NOT_LEADER_OR_FOLLOWER (with broker 2 as the current leader).
fn five_in_flight_and_the_third_hits_a_moved_leader() -> (Sim, Vec<Vec<RecordId>>) {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(
        FaultRule::new(RequestMatch::produce().to_broker(1).skip(2), Fault::None)
            .before(|cluster| cluster.set_leader("t", 0, 2)),
    );
    let batches: Vec<Vec<RecordId>> = (0..5).map(|_| batch(&mut sim, &tp(0))).collect();
    assert!(sim.run_while_not(SECOND, |sim| sim.produce_trace().len() == 5));
    let trace = sim.produce_trace();
    let last_written = trace.iter().map(|t| t.written_at).max().unwrap();
    assert!(
        trace
            .iter()
            .all(|t| t.answered_at.is_none_or(|a| a > last_written)),
        "five requests in flight at once"
    );
    (sim, batches)
}

#[test]
fn third_of_five_in_flight_gets_not_leader_and_batches_3_4_5_retry_in_order_one_at_a_time_without_backoff_or_bump(
) {
    let (mut sim, batches) = five_in_flight_and_the_third_hits_a_moved_leader();
    // New batches appended while 3, 4, 5 wait go after them.
    sim.run_for(2 * MS);
    let later = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);

    let tp0 = tp(0);
    assert_eq!(
        attempts(&sim, &tp0),
        vec![
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::NONE)),
            (1, 0, 20, Some(code::NOT_LEADER_OR_FOLLOWER)),
            (1, 0, 30, Some(code::NOT_LEADER_OR_FOLLOWER)),
            (1, 0, 40, Some(code::NOT_LEADER_OR_FOLLOWER)),
            (2, 0, 20, Some(code::NONE)),
            (2, 0, 30, Some(code::NONE)),
            (2, 0, 40, Some(code::NONE)),
            (2, 0, 50, Some(code::NONE)),
        ]
    );
    // Only the lowest outstanding batch is in flight while retrying.
    for (previous, next) in [(20, 30), (30, 40)] {
        let done = request_for(&sim, &tp0, 0, previous, 1).answered_at.unwrap();
        let sent = request_for(&sim, &tp0, 0, next, 1).written_at;
        assert!(
            sent >= done,
            "base {next} went out at {sent} before base {previous} was answered at {done}"
        );
    }
    // The new batch drains once the retries have left the queue.
    let last_retry = request_for(&sim, &tp0, 0, 40, 1).written_at;
    let new_batch = request_for(&sim, &tp0, 0, 50, 0).written_at;
    assert!(new_batch >= last_retry);
    // The new leader's higher epoch skips the retry backoff (KIP-951).
    let refused = request_for(&sim, &tp0, 0, 20, 0).answered_at.unwrap();
    let retried = request_for(&sim, &tp0, 0, 20, 1).written_at;
    assert!(
        retried - refused < sim.engine(0).config().retry_backoff,
        "the retry waited {} us",
        retried - refused
    );
    assert_eq!(bumps(&sim), 0);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 0));
    for (i, ids) in batches.iter().chain([&later]).enumerate() {
        let start = 10 * i as i64;
        assert_eq!(acked_offsets(&sim, ids), offsets(start..start + 10));
    }
}

#[test]
fn five_in_flight_third_not_leader_retries_3_4_5_in_order_after_a_metadata_refresh_and_the_log_is_gap_free(
) {
    let (mut sim, batches) = five_in_flight_and_the_third_hits_a_moved_leader();
    let metadata_before = sim.requests_served(ApiKey::Metadata);
    settle(&mut sim, 5 * SECOND);
    assert!(
        sim.requests_served(ApiKey::Metadata) > metadata_before,
        "NOT_LEADER_OR_FOLLOWER refreshes metadata"
    );
    let retried: Vec<i32> = attempts(&sim, &tp(0))
        .into_iter()
        .filter(|a| a.0 == 2)
        .map(|a| a.2)
        .collect();
    assert_eq!(retried, vec![20, 30, 40], "re-sent to broker 2 in order");
    let log = log_batches(&sim, &tp(0));
    assert_eq!(
        log,
        (0..5).map(|i| (PID, 0, 10 * i, 10)).collect::<Vec<_>>(),
        "one batch per sequence range, no gap, no duplicate"
    );
    let all: Vec<RecordId> = batches.concat();
    assert_eq!(acked_offsets(&sim, &all), offsets(0..50));
}

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 item 4
// ---------------------------------------------------------------------------------------------

#[test]
fn request_timed_out_after_append_while_the_next_batch_acks_is_retried_as_a_duplicate_and_last_acked_stays_19(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    let first = batch(&mut sim, &tp(0));
    let second = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::REQUEST_TIMED_OUT)),
            (1, 0, 10, Some(code::NONE)),
            (1, 0, 0, Some(code::NONE)),
        ]
    );
    assert_eq!(sim.cluster().duplicates_answered(), 1);
    assert_eq!(
        acked_offsets(&sim, &first),
        offsets(0..10),
        "the original offsets"
    );
    assert_eq!(acked_offsets(&sim, &second), offsets(10..20));
    let entry = &sim.engine(0).partition(&tp(0)).unwrap().entry;
    assert_eq!(
        entry.last_acked_sequence, 19,
        "a late duplicate never lowers it"
    );
    assert_eq!(bumps(&sim), 0);
}

// A leader that appended a batch and then lost leadership (or its log directory) while waiting
// for the replicas answers NOT_LEADER_OR_FOLLOWER (or KAFKA_STORAGE_ERROR): the batch may be in
// the log. Its retry keeps its stamp, so the broker recognises it as a duplicate, even when an
// epoch bump for the partition comes meanwhile.
#[test]
fn not_leader_or_follower_or_storage_error_after_the_append_is_retried_under_its_stamp_and_acked_once(
) {
    for error in [code::NOT_LEADER_OR_FOLLOWER, code::KAFKA_STORAGE_ERROR] {
        let mut sim = started(setup_with(&[1], |_| {}));
        // X (0-9) is appended, then answered `error`. Y (10-19), behind it on the connection,
        // is refused for good, which bumps the epoch for p0 while X waits for its retry.
        sim.add_fault(FaultRule::new(
            p0_batch_at(0),
            Fault::AppendThenAnswer(error),
        ));
        sim.add_fault(FaultRule::new(
            p0_batch_at(10),
            Fault::Inject(code::INVALID_RECORD),
        ));
        let x = batch(&mut sim, &tp(0));
        let y = batch(&mut sim, &tp(0));
        settle(&mut sim, 5 * SECOND);
        let z = batch(&mut sim, &tp(0));
        settle(&mut sim, 5 * SECOND);
        let tried = attempts(&sim, &tp(0));
        assert_eq!(tried[0], (1, 0, 0, Some(error)));
        assert!(
            tried.contains(&(1, 0, 0, Some(code::NONE))),
            "X is retried under (epoch 0, base 0): {tried:?}"
        );
        assert_eq!(sim.cluster().duplicates_answered(), 1, "{tried:?}");
        assert_eq!(acked_offsets(&sim, &x), offsets(0..10), "X once");
        for &id in &y {
            assert_eq!(sim.verdict(id), Verdict::Failed);
        }
        assert_eq!(acked_offsets(&sim, &z), offsets(10..20));
        assert_eq!(
            log_batches(&sim, &tp(0)),
            vec![(PID, 0, 0, 10), (PID, 1, 0, 10)]
        );
    }
}

#[test]
fn a_batch_answered_not_leader_or_follower_after_the_append_that_expires_is_outcome_unknown_never_timed_out(
) {
    let mut sim = started(setup_with(&[1], stretched(40 * SECOND)));
    // X (0-9) is appended, then answered NOT_LEADER_OR_FOLLOWER; it waits 40 s for its retry
    // and expires in the queue at 30 s.
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::AppendThenAnswer(code::NOT_LEADER_OR_FOLLOWER),
    ));
    let x = batch(&mut sim, &tp(0));
    settle(&mut sim, 40 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![(1, 0, 0, Some(code::NOT_LEADER_OR_FOLLOWER))]
    );
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
    let next = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(acked_offsets(&sim, &next), offsets(10..20));
}

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 item 5
// ---------------------------------------------------------------------------------------------

#[test]
fn out_of_order_sequence_on_a_batch_that_is_not_next_is_retried_at_the_same_epoch_without_a_bump() {
    let mut sim = started(setup_with(&[1], |_| {}));
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    // Batch 10-19 is refused without an append; 20-29 then has a gap before it.
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    let b = batch(&mut sim, &tp(0));
    let c = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 20, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
            (1, 0, 10, Some(code::NONE)),
            (1, 0, 20, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 0);
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 0));
    let all = [a, b, c].concat();
    assert_eq!(acked_offsets(&sim, &all), offsets(0..30));
}

/// A broker with no state for a producer id accepts any first sequence from it (Kafka's
/// `ProducerAppendInfo.checkSequence`, no-entry branch): A (0-9) is refused before its append,
/// B (10-19) sent after it is appended first, and A can then never be in sequence again.
#[test]
fn a_batch_overtaken_on_a_fresh_partition_fails_at_its_first_out_of_order_answer_instead_of_at_its_timeout(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    let a = batch(&mut sim, &tp(0));
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NOT_ENOUGH_REPLICAS)),
            (1, 0, 10, Some(code::NONE)),
            (1, 0, 0, Some(code::OUT_OF_ORDER_SEQUENCE_NUMBER)),
        ]
    );
    assert_rejected_with(
        &sim,
        &a,
        code::OUT_OF_ORDER_SEQUENCE_NUMBER,
        "A never reached the log and cannot be placed in order",
    );
    assert_eq!(acked_offsets(&sim, &b), offsets(0..10));
    // The partition goes on under a new epoch, from sequence 0.
    let c = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(acked_offsets(&sim, &c), offsets(10..20));
    assert_eq!(
        log_batches(&sim, &tp(0)),
        vec![(PID, 0, 10, 10), (PID, 1, 0, 10)]
    );
}

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 item 8
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_producer_id_with_log_start_offset_minus_1_is_retried_with_the_same_stamp_and_no_bump() {
    let mut sim = started(setup_with(&[1], |_| {}));
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    // An injected error carries log_start_offset -1: the broker did not know yet.
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)),
        Fault::Inject(code::UNKNOWN_PRODUCER_ID),
    ));
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, 5 * SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![
            (1, 0, 0, Some(code::NONE)),
            (1, 0, 10, Some(code::UNKNOWN_PRODUCER_ID)),
            (1, 0, 10, Some(code::NONE)),
        ]
    );
    assert_eq!(bumps(&sim), 0);
    assert_eq!(acked_offsets(&sim, &[a, b].concat()), offsets(0..20));
}

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 item 11
// ---------------------------------------------------------------------------------------------

#[test]
fn duplicate_sequence_number_succeeds_with_offset_minus_1_raises_last_acked_sequence_and_keeps_last_acked_offset(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    // The batch is in the log, and the broker answers as a pre-2.0 broker did for a retry
    // older than its retained batches.
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)),
        Fault::AppendThenAnswer(code::DUPLICATE_SEQUENCE_NUMBER),
    ));
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(acked_offsets(&sim, &a), offsets(0..10));
    assert_eq!(acked_offsets(&sim, &b), vec![-1; 10]);
    for &id in &b {
        assert_eq!(
            sim.checker().log_offset(id),
            Some(10 + i64::from(id - b[0]))
        );
    }
    let entry = &sim.engine(0).partition(&tp(0)).unwrap().entry;
    assert_eq!(entry.last_acked_sequence, 19);
    assert_eq!(entry.last_acked_offset, 9);
}

// ---------------------------------------------------------------------------------------------
// Configuration edges
// ---------------------------------------------------------------------------------------------

/// The `timeout_ms` of every produce request written for `tp` after the producer started
/// with `request_timeout`.
fn produce_timeouts_with(request_timeout: u64) -> Vec<i32> {
    let mut sim = started(setup_with(&[1], |c| {
        c.request_timeout = request_timeout;
        c.delivery_timeout = c.delivery_timeout.max(request_timeout);
    }));
    let ids = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(acked_offsets(&sim, &ids), offsets(0..10));
    sim.produce_trace().iter().map(|t| t.timeout_ms).collect()
}

// A produce request's `timeout_ms` is an i32 of milliseconds: a request timeout of an hour is
// 3,600,000 there, not the microseconds truncated to 32 bits (a negative timeout, which a
// broker's purgatory expires at once).
#[test]
fn a_request_timeout_of_an_hour_is_sent_as_3_600_000_ms() {
    assert_eq!(produce_timeouts_with(3_600 * SECOND), vec![3_600_000]);
}

// The largest `request.timeout.ms` (i32::MAX ms, about 24.8 days) is sent as it is, and an
// engine timeout beyond what the field holds is clamped to it.
#[test]
fn a_request_timeout_beyond_i32_milliseconds_is_clamped_to_i32_max() {
    assert_eq!(
        produce_timeouts_with(i32::MAX as u64 * 1_000),
        vec![i32::MAX]
    );
    assert_eq!(produce_timeouts_with(u64::MAX / 4), vec![i32::MAX]);
}
