//! The idempotent producer's scenarios (docs/java-rules.md §9 items 1-8 and 11-15,
//! and failover cases), each scripted on the deterministic simulator: the engine,
//! the reference broker behind its in-memory face, a 1 ms network and a virtual clock. The
//! simulator's checker runs after every event in every test (no duplicate, no reorder, acks at
//! their offsets, definite failures never in the log), on top of each test's own assertions.
//!
//! Unless a test says otherwise: three brokers, topic `t` with p0 led by broker 1, linger 0,
//! `batch.size` that holds exactly ten of the test's records, max.in.flight 5.
#![cfg(feature = "testkit")]

use kacrab::config::Codec;
use kacrab::error::ProduceError;
use kacrab::testkit::batch::TestBatch;
use kacrab::testkit::broker::{BrokerRules, Cluster};
use kacrab::testkit::internals::engine::{EngineConfig, ProducerIdAndEpoch, TopicPartition};
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::testkit::internals::protocol::record_batch::{RecordBatchBuilder, RecordBatchHeader};
use kacrab::testkit::sim::{
    Fault, FaultRule, ProduceTrace, RecordId, RequestMatch, Sim, SimSetup, Verdict, EPOCH_MS, MS,
    SECOND,
};
use kafka_protocol::messages::ApiKey;

/// Value bytes after each record's 8-byte id.
const PAD: usize = 24;
const RECORDS_PER_BATCH: usize = 10;
/// The producer id the reference broker hands out first in these tests.
const PID: i64 = 7;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("t", partition)
}

/// `batch.size` that takes exactly `n` of the tests' records.
fn batch_size_for(n: usize) -> usize {
    let value = vec![0u8; 8 + PAD];
    let mut builder = RecordBatchBuilder::new(1024, 0);
    for _ in 0..n {
        builder.append(0, None, Some(&value), &[]);
    }
    builder.size_in_bytes()
}

fn setup_with(leaders: &[i32], tune: impl FnOnce(&mut EngineConfig)) -> SimSetup {
    let mut setup = SimSetup::scripted(leaders.len());
    setup.topics = vec![("t".to_string(), leaders.to_vec())];
    setup.rules = BrokerRules {
        first_producer_id: PID,
        ..BrokerRules::default()
    };
    setup.engine.linger = 0;
    setup.engine.batch_size = batch_size_for(RECORDS_PER_BATCH);
    tune(&mut setup.engine);
    setup
}

/// Starts the engines and runs until the producer id and every leader are known.
fn started(setup: SimSetup) -> Sim {
    let mut sim = Sim::new(setup);
    sim.start();
    let partitions = sim.partitions().to_vec();
    assert!(
        sim.run_while_not(SECOND, |sim| {
            sim.engine(0).identity().is_valid()
                && partitions.iter().all(|tp| {
                    sim.engine_for(tp)
                        .metadata()
                        .leader(&tp.topic, tp.partition)
                        .is_some_and(|l| l.leader.is_some())
                })
        }),
        "the producer did not start"
    );
    sim
}

/// Sends one batch of ten records to `tp` and returns their ids.
fn batch(sim: &mut Sim, tp: &TopicPartition) -> Vec<RecordId> {
    sim.send_many(tp, RECORDS_PER_BATCH, PAD)
}

fn settle(sim: &mut Sim, within: u64) {
    let limit = sim.now() + within;
    assert!(sim.run_until_settled(limit), "not settled in {within} us");
    sim.check_end();
}

/// Offsets the records were acknowledged at (panics on anything but success).
fn acked_offsets(sim: &Sim, ids: &[RecordId]) -> Vec<i64> {
    ids.iter()
        .map(|&id| match sim.result(id) {
            Some(Ok(meta)) => meta.offset,
            other => panic!("record {id}: expected success, got {other:?}"),
        })
        .collect()
}

fn offsets(range: std::ops::Range<i64>) -> Vec<i64> {
    range.collect()
}

/// Produce requests carrying `tp`, in write order: (broker, epoch, base sequence, answer).
fn attempts(sim: &Sim, tp: &TopicPartition) -> Vec<(i32, i16, i32, Option<i16>)> {
    sim.produce_trace()
        .iter()
        .flat_map(|t| {
            t.batches
                .iter()
                .enumerate()
                .filter(|(_, b)| &b.tp == tp)
                .map(|(i, b)| {
                    (
                        t.broker,
                        b.producer.epoch,
                        b.base_sequence,
                        t.answers.get(i).map(|a| a.0),
                    )
                })
        })
        .collect()
}

/// The traced request that carried `tp` at `base` under `epoch`, the `nth` time (0-based).
fn request_for<'a>(
    sim: &'a Sim,
    tp: &TopicPartition,
    epoch: i16,
    base: i32,
    nth: usize,
) -> &'a ProduceTrace {
    sim.produce_trace()
        .iter()
        .filter(|t| {
            t.batches
                .iter()
                .any(|b| &b.tp == tp && b.producer.epoch == epoch && b.base_sequence == base)
        })
        .nth(nth)
        .unwrap_or_else(|| panic!("no attempt {nth} of {tp} epoch {epoch} base {base}"))
}

/// (producer id, epoch, base sequence, record count) of every batch in `tp`'s log.
fn log_batches(sim: &Sim, tp: &TopicPartition) -> Vec<(i64, i16, i32, i32)> {
    sim.cluster()
        .partition_log(&tp.topic, tp.partition)
        .iter()
        .map(|b| {
            (
                b.producer_id,
                b.producer_epoch,
                b.base_sequence,
                b.record_count,
            )
        })
        .collect()
}

/// Every record of `ids` failed definitely with the broker's `error`: not in the log.
fn assert_rejected_with(sim: &Sim, ids: &[RecordId], error: i16, why: &str) {
    for &id in ids {
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::Rejected { code, .. })) if *code == error
            ),
            "{why}: record {id}: {:?}",
            sim.result(id)
        );
    }
}

fn bumps(sim: &Sim) -> u64 {
    (0..sim.shard_count())
        .map(|s| sim.engine(s).stats().epoch_bumps_requested)
        .sum()
}

fn rewrites(sim: &Sim) -> u64 {
    (0..sim.shard_count())
        .map(|s| sim.engine(s).stats().sequence_rewrites)
        .sum()
}

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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
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
            RequestMatch::produce().partition(&tp(0)).base_sequence(0),
            Fault::AppendThenAnswer(error),
        ));
        sim.add_fault(FaultRule::new(
            RequestMatch::produce().partition(&tp(0)).base_sequence(10),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
        Fault::Inject(code::OUT_OF_ORDER_SEQUENCE_NUMBER),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
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
// docs/java-rules.md §9 item 12
// ---------------------------------------------------------------------------------------------

#[test]
fn message_too_large_splits_a_batch_at_base_100_into_children_with_its_sequences_and_flush_waits_for_them(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    let mut earlier = Vec::new();
    for _ in 0..10 {
        earlier.extend(batch(&mut sim, &tp(0)));
        settle(&mut sim, SECOND);
    }
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(100),
        Fault::Inject(code::MESSAGE_TOO_LARGE),
    ));
    // The first child (also at base 100) is held so the state can be looked at.
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(100),
        Fault::Hold,
    ));
    let big = batch(&mut sim, &tp(0));
    let flush = sim.begin_flush(0);
    sim.run_for(50 * MS);

    let slot = sim.engine(0).partition(&tp(0)).unwrap();
    let children: Vec<(i32, i32)> = slot
        .entry
        .inflight_batches_by_sequence
        .iter()
        .map(|s| {
            assert_eq!(s.producer, ProducerIdAndEpoch::new(PID, 0));
            (s.base_sequence, s.record_count)
        })
        .collect();
    assert!(children.len() >= 2, "split into {children:?}");
    let mut next = 100;
    for &(base, count) in &children {
        assert_eq!(base, next, "consecutive bases from 100");
        next += count;
    }
    assert_eq!(next, 110);
    assert_eq!(
        slot.entry.next_sequence, 110,
        "a split takes no new sequences"
    );
    let queued = slot.deque.front().expect("children wait in the deque");
    assert_eq!(queued.base_sequence(), Some(children[1].0));
    assert_eq!(queued.attempts, 0, "a split is not an attempt");
    assert!(!sim.flush_done(flush), "flush waits for the children");

    sim.release_held();
    settle(&mut sim, 5 * SECOND);
    assert!(sim.flush_done(flush));
    assert_eq!(acked_offsets(&sim, &earlier), offsets(0..100));
    assert_eq!(acked_offsets(&sim, &big), offsets(100..110));
    assert_eq!(bumps(&sim), 0);
}

// A (0-9) is refused MESSAGE_TOO_LARGE, but the answer comes after A's delivery timeout ended
// it on the wire. A batch already done is not split (Java's `Sender.completeBatch` splits only a
// batch that is not done): A's records were completed at its expiry, and the answer only ends
// its bookkeeping, so a flush waiting for A completes.
#[test]
fn a_batch_answered_message_too_large_after_it_expired_is_not_split_and_a_flush_waiting_for_it_completes(
) {
    let mut sim = started(setup_with(&[1], stretched(SECOND)));
    let t0 = sim.now();
    sim.add_fault(
        FaultRule::new(
            RequestMatch::produce().partition(&tp(0)),
            Fault::Inject(code::MESSAGE_TOO_LARGE),
        )
        .delayed(31 * SECOND),
    );
    let a = batch(&mut sim, &tp(0));
    let flush = sim.begin_flush(0);
    sim.run_until(t0 + 30 * SECOND + 10 * MS);
    for &id in &a {
        assert!(
            matches!(sim.result(id), Some(Err(e)) if e.is_outcome_unknown()),
            "{:?}",
            sim.result(id)
        );
    }
    assert!(!sim.flush_done(flush), "A's answer is still due");
    sim.run_until(t0 + 32 * SECOND);
    assert!(sim.flush_done(flush));
    settle(&mut sim, SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![(1, 0, 0, Some(code::MESSAGE_TOO_LARGE))]
    );
}

// A (0-9) is refused NOT_ENOUGH_REPLICAS and waits for its retry, still the first in-flight
// entry, when B (10-19), sent right behind it, is refused MESSAGE_TOO_LARGE. B's children take
// the place of B's entry, not of A's (the first entry of the same producer): A's retry then
// still finds A, and both land once, in order.
#[test]
fn a_batch_split_behind_an_earlier_batch_waiting_to_retry_takes_the_place_of_its_own_entry_only() {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
        Fault::Inject(code::MESSAGE_TOO_LARGE),
    ));
    let a = batch(&mut sim, &tp(0));
    let b = batch(&mut sim, &tp(0));
    sim.run_for(20 * MS);
    let slot = sim.engine(0).partition(&tp(0)).unwrap();
    let bases: Vec<i32> = slot
        .entry
        .inflight_batches_by_sequence
        .iter()
        .map(|s| s.base_sequence)
        .collect();
    assert_eq!(bases.first(), Some(&0), "A keeps its entry: {bases:?}");
    assert!(
        bases.len() >= 3 && bases[1] == 10,
        "B's children follow A: {bases:?}"
    );
    settle(&mut sim, 5 * SECOND);
    assert_eq!(acked_offsets(&sim, &a), offsets(0..10));
    assert_eq!(acked_offsets(&sim, &b), offsets(10..20));
    assert_eq!(bumps(&sim), 0);
    // A's second attempt is the one retry; a split child's first attempt is not a retry.
    assert_eq!(sim.engine(0).stats().retries, 1);
}

#[test]
fn a_split_child_that_splits_again_does_not_end_its_parent_early() {
    // A topic's max.message.bytes below a quarter of batch.size: the ten-record batch splits
    // into children of 4, 4 and 2 records, and the first child, still above the limit, splits
    // again while its two siblings wait behind it. A flush taken after the batch is done only
    // once every one of its records has its answer.
    let mut setup = setup_with(&[1], |_| {});
    setup.rules.max_message_bytes = batch_size_for(2);
    let mut sim = started(setup);
    let ids = batch(&mut sim, &tp(0));
    let flush = sim.begin_flush(0);
    let limit = sim.now() + 5 * SECOND;
    while !sim.flush_done(flush) {
        assert!(sim.now() < limit && sim.step(), "the flush never ended");
    }
    let unresolved: Vec<RecordId> = ids
        .iter()
        .copied()
        .filter(|&id| sim.result(id).is_none())
        .collect();
    assert!(
        unresolved.is_empty(),
        "the flush ended with records {unresolved:?} unanswered"
    );
    let too_large_at_0 = attempts(&sim, &tp(0))
        .iter()
        .filter(|a| a.2 == 0 && a.3 == Some(code::MESSAGE_TOO_LARGE))
        .count();
    assert_eq!(
        too_large_at_0, 2,
        "the batch and its first child were both too large"
    );
    settle(&mut sim, 5 * SECOND);
    assert_eq!(acked_offsets(&sim, &ids), offsets(0..10));
    assert_eq!(bumps(&sim), 0);
}

#[test]
fn a_compressed_batch_refused_as_too_large_splits_into_compressed_children_that_land_exactly_once()
{
    for codec in [
        Codec::Gzip { level: -1 },
        Codec::Snappy,
        Codec::Lz4 { level: 9 },
        Codec::Zstd { level: 3 },
    ] {
        let mut sim = started(setup_with(&[1], |engine| engine.compression = codec));
        // Known to the broker first, so the split batch's children are the next sequences it
        // expects (a fresh producer's first batch may start anywhere).
        let mut earlier = Vec::new();
        for _ in 0..10 {
            earlier.extend(batch(&mut sim, &tp(0)));
            settle(&mut sim, SECOND);
        }
        sim.add_fault(FaultRule::new(
            RequestMatch::produce().partition(&tp(0)).base_sequence(100),
            Fault::Inject(code::MESSAGE_TOO_LARGE),
        ));
        let ids = batch(&mut sim, &tp(0));
        settle(&mut sim, 5 * SECOND);
        assert_eq!(acked_offsets(&sim, &earlier), offsets(0..100), "{codec:?}");
        assert_eq!(acked_offsets(&sim, &ids), offsets(100..110), "{codec:?}");
        let attempts = attempts(&sim, &tp(0));
        let too_large: Vec<_> = attempts
            .iter()
            .filter(|a| a.3 == Some(code::MESSAGE_TOO_LARGE))
            .collect();
        assert_eq!(too_large, [&(1, 0, 100, Some(code::MESSAGE_TOO_LARGE))]);
        // The refused batch's records are in the log once (the checker of `settle` reads every
        // stored batch), in children compressed with the producer's codec.
        let log: Vec<(u8, i32)> = sim
            .cluster()
            .partition_log("t", 0)
            .iter()
            .filter(|b| b.base_offset >= 100)
            .map(|b| {
                let header = RecordBatchHeader::parse(&b.bytes).unwrap();
                (header.compression(), header.record_count)
            })
            .collect();
        assert!(log.len() >= 2, "{codec:?}: {log:?}");
        assert!(
            log.iter().all(|&(c, _)| c == codec.id()),
            "{codec:?}: {log:?}"
        );
        assert_eq!(log.iter().map(|&(_, n)| n).sum::<i32>(), 10);
        assert!(log.len() >= 2, "{codec:?}: the batch was split: {log:?}");
        assert_eq!(bumps(&sim), 0);
    }
}

#[test]
fn message_too_large_on_a_single_record_batch_fails_it_definitely_and_bumps_the_epoch_for_p0() {
    let mut sim = started(setup_with(&[1], |_| {}));
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)),
        Fault::Inject(code::MESSAGE_TOO_LARGE),
    ));
    let single = sim.send(&tp(0), None, PAD);
    settle(&mut sim, SECOND);
    assert!(matches!(
        sim.result(single),
        Some(Err(ProduceError::Rejected {
            code: code::MESSAGE_TOO_LARGE,
            ..
        }))
    ));
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)).last().copied(),
        Some((1, 1, 0, Some(code::NONE))),
        "p0 restarts at 0 under the new epoch"
    );
    assert_eq!(acked_offsets(&sim, &[a, b].concat()), offsets(0..20));
}

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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
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

/// Timeouts stretched so one batch's retry and another's answer can be placed around the
/// delivery timeout: delivery 30 s, request 60 s.
fn stretched(backoff: u64) -> impl FnOnce(&mut EngineConfig) {
    move |c| {
        c.delivery_timeout = 30 * SECOND;
        c.request_timeout = 60 * SECOND;
        c.retry_backoff = backoff;
        c.retry_backoff_max = backoff;
    }
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
            RequestMatch::produce().partition(&tp(0)).base_sequence(0),
            Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
        )
        .delayed(2 * SECOND),
    );
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
        Fault::DropRequest,
    ));
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
        FaultRule::new(
            RequestMatch::produce().partition(&tp(0)).base_sequence(10),
            Fault::Inject(code::NOT_ENOUGH_REPLICAS),
        )
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
        FaultRule::new(
            RequestMatch::produce().partition(&tp(0)).base_sequence(10),
            Fault::Inject(code::NOT_ENOUGH_REPLICAS),
        )
        .delayed(15 * SECOND),
    );
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(20),
        Fault::Delay(35 * SECOND),
    ));
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(20),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(20),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(30),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(20),
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
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(20),
        Fault::DropRequest,
    ));
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
        Fault::Inject(code::INVALID_RECORD),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(20),
        Fault::DropRequest,
    ));
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
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
    let d_match = RequestMatch::produce().partition(&tp(0)).base_sequence(10);
    sim.add_fault(FaultRule::new(
        d_match.clone(),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    for &error in d_retries {
        sim.add_fault(FaultRule::new(d_match.clone(), Fault::Inject(error)));
    }
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(20),
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(0),
        Fault::AppendThenAnswer(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(
        FaultRule::new(
            RequestMatch::produce().partition(&tp(0)).base_sequence(0),
            Fault::None,
        )
        .before(|cluster| {
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
        RequestMatch::produce().partition(&tp(0)).base_sequence(10),
        Fault::Inject(code::REQUEST_TIMED_OUT),
    ));
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(20),
        Fault::Delay(50 * MS),
    ));
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
