//! Transactional scenarios on the deterministic simulator: the transactional engine (shard 0
//! owns the transaction manager), the reference broker behind its in-memory face (its
//! transaction coordinator: FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn and
//! markers), a 1 ms network and a virtual clock.
//!
//! The cluster finalizes `transaction.version=1` (`tv1_setup`): these scenarios pin the
//! transactions V1 protocol (AddPartitionsToTxn, an abort that keeps the epoch unless a batch
//! needs a bump); the simulator's TV2 runs are in `tests/sim_transactions.rs`.
//!
//! Scenarios that script the coordinator's answers one by one are pinned
//! against a scripted broker in `tests/engine_transactions.rs` (a partition's first batch waits
//! for AddPartitionsToTxn, CONCURRENT_TRANSACTIONS retried, NOT_COORDINATOR on EndTxn, commit
//! flushes lingering batches, abort fails unsent batches, fencing on EndTxn, an abortable
//! produce error followed by an abort with an epoch bump, a timed-out commit picked up again).
//!
//! `failed_batch_sequences` holds the scenarios of a batch that fails for good and the
//! sequences it gives back to the later batches of its partition, or does not.
#![cfg(feature = "testkit")]

#[path = "scenarios_transactions/failed_batch_sequences.rs"]
mod failed_batch_sequences;

use kacrab::error::{ProduceError, TransactionError};
use kacrab::testkit::internals::engine::{ProducerIdAndEpoch, TopicPartition, TransactionState};
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::testkit::sim::{Fault, FaultRule, RecordId, RequestMatch, Sim, SimSetup, MS, SECOND};
use kafka_protocol::messages::ApiKey;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("t", partition)
}

/// Two brokers whose cluster finalizes `transaction.version=1`.
fn tv1_setup() -> SimSetup {
    let mut setup = SimSetup::scripted(2);
    setup.rules.transaction_version = 1;
    setup
}

fn transactional(shards: usize) -> Sim {
    let mut setup = tv1_setup();
    setup.engine.transactional_id = Some("tx-sim".to_string());
    setup.shards = shards;
    let mut sim = Sim::new(setup);
    sim.start();
    sim
}

fn init(sim: &mut Sim) -> Result<(), TransactionError> {
    let handle = sim.init_transactions()?;
    let limit = sim.now() + 30 * SECOND;
    sim.wait_txn(handle, limit)
        .expect("init_transactions completed")
}

/// One shard, linger 0 (a record drains as its own batch once its partition is in the
/// transaction), `tune` applied; initialized and inside a transaction.
fn in_transaction(tune: impl FnOnce(&mut SimSetup)) -> Sim {
    let mut setup = tv1_setup();
    setup.engine.transactional_id = Some("tx-sim".to_string());
    setup.engine.linger = 0;
    tune(&mut setup);
    let mut sim = Sim::new(setup);
    sim.start();
    assert_eq!(init(&mut sim), Ok(()));
    sim.begin_transaction().unwrap();
    sim
}

/// Sends one record to `tp` in the transaction and runs until it is acknowledged.
fn acked_in_transaction(sim: &mut Sim, tp: &TopicPartition) -> RecordId {
    let id = sim.send_in_transaction(tp, 0).unwrap();
    let limit = sim.now() + SECOND;
    assert!(sim.run_while_not(limit, |s| s.result(id).is_some()));
    assert!(
        matches!(sim.result(id), Some(Ok(_))),
        "{:?}",
        sim.result(id)
    );
    id
}

/// Runs until every one of `ids` has its result, for at most `within`.
fn run_until_resolved(sim: &mut Sim, ids: &[RecordId], within: u64) {
    let limit = sim.now() + within;
    assert!(
        sim.run_while_not(limit, |s| ids.iter().all(|&id| s.result(id).is_some())),
        "unresolved after {within} us: {:?}",
        ids.iter().map(|&id| sim.result(id)).collect::<Vec<_>>()
    );
}

/// From now on every Produce answer is lost on a connection that stays open: a batch stays on
/// the wire until a timeout ends it with an unknown outcome.
fn lose_every_produce_answer(sim: &mut Sim) {
    sim.add_fault(
        FaultRule::new(
            RequestMatch::api(ApiKey::Produce),
            Fault::DropResponse { close: false },
        )
        .times(usize::MAX),
    );
}

#[test]
fn init_transactions_gets_a_transactional_id_from_the_coordinator_and_every_shard_adopts_it() {
    let mut sim = transactional(2);
    assert_eq!(init(&mut sim), Ok(()));
    assert_eq!(sim.txn_state(), Some(TransactionState::Ready));
    let identity = sim.identity();
    assert!(identity.is_valid());
    assert_eq!(identity.epoch, 0);
    // The coordinator knows the id under the same identity.
    let meta = sim
        .cluster()
        .transaction_metadata("tx-sim")
        .map(|m| ProducerIdAndEpoch::new(m.producer_id, m.producer_epoch));
    assert_eq!(meta, Some(identity));
    for shard in 0..2 {
        assert_eq!(sim.engine(shard).identity(), identity, "shard {shard}");
    }
    assert!(sim.requests_served(ApiKey::FindCoordinator) >= 1);
    assert_eq!(sim.requests_served(ApiKey::InitProducerId), 1);
}

#[test]
fn a_second_init_transactions_of_the_same_id_bumps_the_epoch() {
    let mut first = transactional(1);
    assert_eq!(init(&mut first), Ok(()));
    // The coordinator fences the old epoch when the id initializes again.
    let r = first
        .cluster()
        .init_producer_id(Some("tx-sim"), 60_000, -1, -1, 0);
    assert_eq!(r.error_code, code::NONE);
    assert_eq!(r.producer_epoch, first.identity().epoch + 1);
}

#[test]
fn coordinator_not_available_on_find_coordinator_is_retried() {
    let mut sim = transactional(1);
    sim.add_fault(
        FaultRule::new(
            RequestMatch::api(ApiKey::FindCoordinator),
            Fault::Inject(code::COORDINATOR_NOT_AVAILABLE),
        )
        .times(2),
    );
    assert_eq!(init(&mut sim), Ok(()));
    assert_eq!(sim.requests_served(ApiKey::FindCoordinator), 3);
    assert_eq!(sim.pending_faults(), 0);
}

#[test]
fn not_coordinator_on_init_producer_id_finds_the_coordinator_again() {
    let mut sim = transactional(1);
    sim.add_fault(FaultRule::new(
        RequestMatch::api(ApiKey::InitProducerId),
        Fault::Inject(code::NOT_COORDINATOR),
    ));
    assert_eq!(init(&mut sim), Ok(()));
    assert_eq!(sim.requests_served(ApiKey::FindCoordinator), 2);
    assert_eq!(sim.requests_served(ApiKey::InitProducerId), 2);
}

#[test]
fn a_fenced_init_producer_id_is_fatal_and_every_later_call_says_so() {
    let mut sim = transactional(1);
    sim.add_fault(FaultRule::new(
        RequestMatch::api(ApiKey::InitProducerId),
        Fault::Inject(code::PRODUCER_FENCED),
    ));
    assert!(matches!(init(&mut sim), Err(TransactionError::Fenced(_))));
    assert_eq!(sim.txn_state(), Some(TransactionState::FatalError));
    assert!(matches!(
        sim.begin_transaction(),
        Err(TransactionError::Fenced(_))
    ));
    assert!(matches!(
        sim.send_in_transaction(&tp(0), 8),
        Err(TransactionError::Fenced(_))
    ));
}

#[test]
fn a_timed_out_init_transactions_called_again_picks_up_its_result() {
    let mut sim = transactional(1);
    sim.add_fault(FaultRule::new(
        RequestMatch::api(ApiKey::InitProducerId),
        Fault::Hold,
    ));
    let handle = sim.init_transactions().unwrap();
    let limit = sim.now() + 2 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), None, "the caller timed out");
    assert!(matches!(
        sim.begin_transaction(),
        Err(TransactionError::PendingOperation {
            pending: "init_transactions",
            ..
        })
    ));
    assert_eq!(sim.init_transactions().unwrap(), handle);
    sim.release_held();
    let limit = sim.now() + 2 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    assert_eq!(sim.requests_served(ApiKey::InitProducerId), 1);
}

#[test]
fn illegal_calls_give_typed_errors() {
    let mut sim = transactional(1);
    assert!(matches!(
        sim.begin_transaction(),
        Err(TransactionError::InvalidState {
            state: "UNINITIALIZED",
            ..
        })
    ));
    assert!(matches!(
        sim.commit_transaction(),
        Err(TransactionError::InvalidState { .. })
    ));
    assert_eq!(init(&mut sim), Ok(()));
    assert!(matches!(
        sim.send_in_transaction(&tp(0), 8),
        Err(TransactionError::InvalidState {
            operation: "send",
            state: "READY"
        })
    ));
    assert!(matches!(
        sim.abort_transaction(),
        Err(TransactionError::InvalidState { state: "READY", .. })
    ));
    sim.begin_transaction().unwrap();
    assert!(matches!(
        sim.begin_transaction(),
        Err(TransactionError::InvalidState {
            state: "IN_TRANSACTION",
            ..
        })
    ));
}

#[test]
fn a_transaction_without_sends_commits_without_end_txn() {
    let mut sim = transactional(2);
    assert_eq!(init(&mut sim), Ok(()));
    sim.begin_transaction().unwrap();
    let handle = sim.commit_transaction().unwrap();
    let limit = sim.now() + SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    assert_eq!(sim.txn_state(), Some(TransactionState::Ready));
    assert_eq!(sim.requests_served(ApiKey::EndTxn), 0);
    let stats = sim.check_transactions();
    assert_eq!(stats.committed, 1);
}

#[test]
fn a_batch_of_unknown_outcome_failing_during_an_abort_makes_the_abort_bump_the_epoch() {
    let mut sim = transactional(1);
    assert_eq!(init(&mut sim), Ok(()));
    let before = sim.identity();
    sim.begin_transaction().unwrap();
    // Every Produce answer is lost on a connection that stays open: the batch is in flight
    // until delivery.timeout.ms ends it with an unknown outcome, after the abort began (and
    // queued its EndTxn without a bump).
    lose_every_produce_answer(&mut sim);
    let id = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(SECOND);
    assert!(
        sim.requests_served(ApiKey::Produce) >= 1,
        "the batch went out"
    );
    let handle = sim.abort_transaction().unwrap();
    let limit = sim.now() + 120 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    assert!(
        matches!(sim.result(id), Some(Err(e)) if e.is_outcome_unknown()),
        "the batch ended with an unknown outcome: {:?}",
        sim.result(id)
    );
    // The abort's result came after the bump, not after EndTxn alone.
    assert_eq!(sim.txn_state(), Some(TransactionState::Ready));
    assert_eq!(sim.identity().producer_id, before.producer_id);
    assert_eq!(sim.identity().epoch, before.epoch + 1);
    assert_eq!(sim.requests_served(ApiKey::InitProducerId), 2);
    sim.begin_transaction()
        .expect("the next transaction begins after the abort");
}

#[test]
fn a_definite_failure_with_a_later_batch_on_the_wire_makes_the_abort_bump_the_epoch() {
    let mut sim = in_transaction(|_| {});
    let before = sim.identity();
    // The partition's first batch (sequence 0) is refused, late; the second (sequence 1) goes
    // out before that answer and is written: the producer has no state on the partition yet,
    // so the broker takes any sequence. The client gives sequence 0 back and moves the second
    // batch down to it, while the broker holds it as 1.
    sim.add_fault(
        FaultRule::new(
            RequestMatch::produce().partition(&tp(0)).base_sequence(0),
            Fault::Inject(code::INVALID_RECORD),
        )
        .delayed(50 * MS),
    );
    let refused = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(10 * MS);
    let written = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(10 * MS);
    // The commit begins before the refusal arrives: a failure while completing sets no bump
    // by itself (Java's `maybeTransitionToErrorState`).
    let commit = sim.commit_transaction().unwrap();
    let limit = sim.now() + 10 * SECOND;
    assert!(matches!(
        sim.wait_txn(commit, limit),
        Some(Err(TransactionError::Abortable(_)))
    ));
    assert!(matches!(sim.result(refused), Some(Err(_))));
    assert!(matches!(sim.result(written), Some(Ok(_))));
    assert_eq!(sim.txn_state(), Some(TransactionState::AbortableError));
    let handle = sim.abort_transaction().unwrap();
    let limit = sim.now() + 10 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    // Without a new epoch the next batch would reuse sequence 1, which the broker answers as a
    // duplicate of the aborted record: acknowledged, never written.
    assert_eq!(sim.identity().epoch, before.epoch + 1);
    sim.begin_transaction().unwrap();
    let next = sim.send_in_transaction(&tp(0), 0).unwrap();
    let handle = sim.commit_transaction().unwrap();
    let limit = sim.now() + 10 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    assert!(matches!(sim.result(next), Some(Ok(_))));
    let stats = sim.check_transactions();
    assert_eq!((stats.committed, stats.aborted), (1, 1));
    assert_eq!(stats.visible_records, 1);
}

#[test]
fn a_batch_of_unknown_outcome_keeps_its_sequence_when_an_earlier_batch_fails_definitely() {
    let mut sim = in_transaction(|_| {});
    let first = RequestMatch::produce().partition(&tp(0)).base_sequence(0);
    // The first batch (sequence 0) is refused late without an append (NOT_ENOUGH_REPLICAS:
    // the ISR was too small before the append), then refused for good on its retry.
    sim.add_fault(
        FaultRule::new(first.clone(), Fault::Inject(code::NOT_ENOUGH_REPLICAS)).delayed(50 * MS),
    );
    sim.add_fault(FaultRule::new(first, Fault::Inject(code::INVALID_RECORD)));
    // The second (sequence 1) goes out meanwhile and is written, but its answer is cut: its
    // outcome is unknown, and it waits behind the first's retry.
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)).base_sequence(1),
        Fault::ResetMidFrame,
    ));
    let refused = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(10 * MS);
    let unknown = sim.send_in_transaction(&tp(0), 0).unwrap();
    let limit = sim.now() + 60 * SECOND;
    assert!(sim.run_while_not(limit, |s| s.result(refused).is_some()
        && s.result(unknown).is_some()));
    assert_eq!(sim.pending_faults(), 0, "every scripted fault was met");
    assert!(matches!(sim.result(refused), Some(Err(e)) if !e.is_outcome_unknown()));
    // Re-stamped to sequence 0, its retry would be refused out of order and the record
    // reported of unknown outcome; under its own sequence the broker recognises it.
    assert!(
        matches!(sim.result(unknown), Some(Ok(_))),
        "the batch of unknown outcome: {:?}",
        sim.result(unknown)
    );
    let handle = sim.abort_transaction().unwrap();
    let limit = sim.now() + 10 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    assert_eq!(sim.txn_state(), Some(TransactionState::Ready));
    let stats = sim.check_transactions();
    assert_eq!((stats.aborted, stats.visible_records), (1, 0));
}

#[test]
fn a_commit_waits_for_every_grandchild_of_a_batch_split_twice() {
    // A topic's max.message.bytes far below batch.size: the transaction's one batch of ten
    // records is refused as too large, split, and its first child split again while its
    // siblings wait. The commit's flush must wait for every one of them before EndTxn.
    let mut setup = tv1_setup();
    setup.engine.transactional_id = Some("tx-sim".to_string());
    setup.rules.max_message_bytes = 150;
    let mut sim = Sim::new(setup);
    sim.start();
    assert_eq!(init(&mut sim), Ok(()));
    sim.begin_transaction().unwrap();
    let ids: Vec<_> = (0..10)
        .map(|_| sim.send_in_transaction(&tp(0), 24).unwrap())
        .collect();
    let handle = sim.commit_transaction().unwrap();
    let limit = sim.now() + 10 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    for &id in &ids {
        assert!(
            matches!(sim.result(id), Some(Ok(_))),
            "record {id}: {:?}",
            sim.result(id)
        );
    }
    let stats = sim.check_transactions();
    assert_eq!((stats.committed, stats.visible_records), (1, 10));
}

// The partition's only batch is refused before any append (NOT_ENOUGH_REPLICAS) on every
// attempt; the abort begins while it waits for its next retry, and its delivery timeout passes
// during the abort: it fails as timed out, definitely not in the log. A failure while the
// abort completes asks for no bump by itself (`TransactionManager.maybeTransitionToErrorState`),
// but its sequences leave a gap no later batch of the epoch can cross, so settling the partition
// (`TransactionManager.maybeResolveSequences`) makes the abort bump the epoch, and the next
// transaction's batch is written.
#[test]
fn a_batch_that_times_out_without_an_append_during_an_abort_leaves_a_sequence_gap_and_the_abort_bumps_the_epoch(
) {
    let mut sim = in_transaction(|_| {});
    let before = sim.identity();
    sim.add_fault(
        FaultRule::new(
            RequestMatch::produce().partition(&tp(0)).base_sequence(0),
            Fault::Inject(code::NOT_ENOUGH_REPLICAS),
        )
        .times(usize::MAX),
    );
    let timed_out = sim.send_in_transaction(&tp(0), 0).unwrap();
    sim.run_for(SECOND);
    assert!(
        sim.requests_served(ApiKey::Produce) >= 1,
        "the batch went out"
    );
    let handle = sim.abort_transaction().unwrap();
    let limit = sim.now() + 120 * SECOND;
    assert!(sim.run_while_not(limit, |s| s.result(timed_out).is_some()));
    assert!(
        matches!(
            sim.result(timed_out),
            Some(Err(ProduceError::TimedOut { .. }))
        ),
        "the batch timed out, never appended: {:?}",
        sim.result(timed_out)
    );
    sim.clear_faults();
    let limit = sim.now() + 10 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    assert_eq!(sim.identity().producer_id, before.producer_id);
    assert_eq!(sim.identity().epoch, before.epoch + 1, "the abort bumped");
    sim.begin_transaction().unwrap();
    let next = sim.send_in_transaction(&tp(0), 0).unwrap();
    let handle = sim.commit_transaction().unwrap();
    let limit = sim.now() + 10 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    assert!(matches!(sim.result(next), Some(Ok(_))));
    let stats = sim.check_transactions();
    assert_eq!((stats.committed, stats.aborted), (1, 1));
    assert_eq!(stats.visible_records, 1);
}

#[test]
fn a_commit_waiting_for_an_unreachable_coordinator_finds_the_moved_coordinator_after_the_request_timeout(
) {
    let mut sim = in_transaction(|_| {});
    let coordinator = sim.cluster().transaction_coordinator("tx-sim");
    let partition = (0..2)
        .map(tp)
        .find(|p| sim.leader(p) != coordinator)
        .expect("a partition led by another broker");
    acked_in_transaction(&mut sim, &partition);
    let elsewhere = [1, 2, 3]
        .into_iter()
        .find(|&b| b != coordinator)
        .expect("another broker");
    // The coordinator's machine stops answering: a connection attempt to it hangs until the
    // engine's 10 s connection setup timeout, so only the 5 s request timeout of the wait
    // (`Sender.awaitNodeReady`) sends the producer to look for the coordinator again.
    sim.broker_unreachable(coordinator);
    sim.move_transaction_coordinator(elsewhere);
    // The reset reaches the producer before the commit: no EndTxn is lost on the way.
    sim.run_for(10 * MS);
    let finds = sim.requests_served(ApiKey::FindCoordinator);
    let started = sim.now();
    let handle = sim.commit_transaction().unwrap();
    // The engine's own timer must cover the wait: in a shard nothing else may wake it.
    sim.run_for(SECOND);
    let deadline = started + 5 * SECOND + 10 * MS;
    let wakeup = sim.engine(0).next_wakeup(sim.now());
    assert!(
        wakeup.is_some_and(|at| at <= deadline),
        "waiting for the coordinator's connection, the next wakeup is {wakeup:?}, past the \
         request timeout at {deadline}"
    );
    assert_eq!(
        sim.wait_txn(handle, started + 8 * SECOND),
        Some(Ok(())),
        "the commit waited past the request timeout for a coordinator that does not answer"
    );
    assert!(
        sim.now() >= started + 5 * SECOND,
        "looked up again before the request timeout: after {} us",
        sim.now() - started
    );
    assert_eq!(sim.requests_served(ApiKey::FindCoordinator), finds + 1);
    assert_eq!(sim.requests_served(ApiKey::EndTxn), 1);
}

#[test]
fn a_batch_that_times_out_on_the_wire_inside_the_transaction_makes_it_abortable_and_the_abort_bumps_the_epoch(
) {
    // The request timeout outlasts the delivery timeout, so the one attempt is still on the
    // wire when delivery.timeout.ms ends the batch (no retry goes out).
    let mut sim = in_transaction(|setup| setup.engine.request_timeout = 40 * SECOND);
    let before = sim.identity();
    // Every Produce answer is lost on a connection that stays open.
    lose_every_produce_answer(&mut sim);
    let id = sim.send_in_transaction(&tp(0), 0).unwrap();
    let limit = sim.now() + 60 * SECOND;
    assert!(sim.run_while_not(limit, |s| s.result(id).is_some()));
    assert_eq!(
        sim.requests_served(ApiKey::Produce),
        1,
        "one attempt, on the wire"
    );
    assert!(
        matches!(sim.result(id), Some(Err(e)) if e.is_outcome_unknown()),
        "{:?}",
        sim.result(id)
    );
    assert_eq!(
        sim.engine(0).metrics().records_failed,
        1,
        "counted in record-error-total"
    );
    // The owner learned it: the transaction cannot commit a record that may be half in it.
    assert_eq!(sim.txn_state(), Some(TransactionState::AbortableError));
    assert!(matches!(
        sim.commit_transaction(),
        Err(TransactionError::Abortable(_))
    ));
    sim.clear_faults();
    // The abort waits for the attempt's request to end (its 40 s request timeout).
    let handle = sim.abort_transaction().unwrap();
    let limit = sim.now() + 60 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    assert_eq!(sim.identity().producer_id, before.producer_id);
    assert_eq!(
        sim.identity().epoch,
        before.epoch + 1,
        "an unknown outcome needs the bump"
    );
}

/// An AddPartitionsToTxn meets `fault`, and its retry cannot reach the coordinator before
/// delivery.timeout.ms ends the batch: the transaction goes abortable without the producer
/// knowing whether the coordinator holds it. The abort must end it either way, bump the epoch
/// (a batch failed), and leave the producer able to commit the next transaction.
fn abort_after_an_add_partitions_to_txn_of_unknown_outcome(fault: Fault) {
    let mut sim = in_transaction(|_| {});
    let before = sim.identity();
    let coordinator = sim.cluster().transaction_coordinator("tx-sim");
    let partition = (0..2)
        .map(tp)
        .find(|p| sim.leader(p) != coordinator)
        .expect("a partition led by another broker");
    sim.add_fault(FaultRule::new(
        RequestMatch::api(ApiKey::AddPartitionsToTxn),
        fault,
    ));
    let id = sim.send_in_transaction(&partition, 0).unwrap();
    let limit = sim.now() + SECOND;
    assert!(sim.run_while_not(limit, |s| s.pending_faults() == 0));
    // The coordinator is up, and FindCoordinator names it, but every connection attempt to it
    // hangs.
    sim.cut_off_from(coordinator, true);
    run_until_resolved(&mut sim, &[id], 40 * SECOND);
    assert!(
        matches!(sim.result(id), Some(Err(_))),
        "{:?}",
        sim.result(id)
    );
    assert_eq!(sim.txn_state(), Some(TransactionState::AbortableError));
    sim.cut_off_from(coordinator, false);
    let handle = sim.abort_transaction().unwrap();
    let limit = sim.now() + 30 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
    assert_eq!(
        sim.requests_served(ApiKey::EndTxn),
        1,
        "the abort ends whatever the coordinator may hold"
    );
    assert_eq!(sim.identity().producer_id, before.producer_id);
    assert_eq!(
        sim.identity().epoch,
        before.epoch + 1,
        "a failed batch needs the bump"
    );
    sim.begin_transaction().unwrap();
    acked_in_transaction(&mut sim, &partition);
    let handle = sim.commit_transaction().unwrap();
    let limit = sim.now() + 10 * SECOND;
    assert_eq!(sim.wait_txn(handle, limit), Some(Ok(())));
}

/// The coordinator added the partition (the transaction is ongoing there) and its answer was
/// lost with the connection. InitProducerId alone would meet that ongoing transaction, and
/// Kafka's coordinator fences the epoch then (`prepareFenceProducerEpoch`): the producer
/// would be fatal.
#[test]
fn an_abort_after_the_answer_to_add_partitions_to_txn_was_lost_ends_the_coordinators_transaction_and_is_not_fenced(
) {
    abort_after_an_add_partitions_to_txn_of_unknown_outcome(Fault::DropResponse { close: true });
}

/// The connection was reset before the coordinator read the request: no transaction is
/// ongoing there, and the producer cannot tell this case from the one above.
#[test]
fn an_abort_after_add_partitions_to_txn_was_lost_unread_is_not_fatal() {
    abort_after_an_add_partitions_to_txn_of_unknown_outcome(Fault::ResetBeforeProcessing);
}
