//! The transactional engine against a scripted broker: every request the engine writes is
//! decoded and answered with real Kafka bytes by a small script (one broker, node 1, which is
//! also the coordinator), so each transactional handler is exercised on the wire without a
//! coordinator implementation. Errors are injected per API; answers of one API can be held.
//! The engine's transactional actions are looped back to the same engine, as a one-engine
//! driver does (`engine/transaction.rs`).
#![cfg(feature = "testkit")]

#[path = "engine_transactions/group_metadata.rs"]
mod group_metadata;
#[path = "engine_transactions/init_authorization.rs"]
mod init_authorization;
#[path = "engine_transactions/rig.rs"]
mod rig;
#[path = "engine_transactions/tv2.rs"]
mod tv2;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, ApiKey, EndTxnRequest, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::Decodable;

use kacrab::testkit::internals::engine::{
    Engine, GroupMetadata, OffsetAndMetadata, TopicPartition, TransactionState, TxnAction,
};
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::{ProduceError, RecordMetadata, TransactionError};
use rig::{config, Record, Rig, MS};

fn rejected_code(result: &Option<Result<RecordMetadata, ProduceError>>) -> Option<i16> {
    match result {
        Some(Err(ProduceError::Rejected { code, .. })) => Some(*code),
        _ => None,
    }
}

#[test]
fn init_transactions_finds_the_coordinator_and_sends_the_transaction_timeout() {
    let rig = Rig::ready(Duration::ZERO);
    assert_eq!(rig.count(ApiKey::FindCoordinator), 1);
    assert_eq!(rig.count(ApiKey::InitProducerId), 1);
    assert_eq!(rig.engine.identity().producer_id, 7);
    assert_eq!(rig.engine.identity().epoch, 0);
    // The FindCoordinator key is the transactional id, key type 1.
    assert_eq!(
        rig.find_coordinator_requests(),
        vec![(1, "tx-1".to_string())]
    );
}

#[test]
fn a_partitions_first_batch_waits_for_add_partitions_to_txn() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.held_apis.push(ApiKey::AddPartitionsToTxn);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    let b = rig.send(1);
    rig.run_until(500 * MS, |_| false);
    assert_eq!(rig.count(ApiKey::Produce), 0, "no batch before the add");
    assert_eq!(
        rig.count(ApiKey::AddPartitionsToTxn),
        1,
        "one request for both"
    );
    rig.release(ApiKey::AddPartitionsToTxn);
    assert!(rig.run_until(1_000 * MS, |r| r.result(a).is_some()
        && r.result(b).is_some()));
    assert!(rig.result(a).unwrap().is_ok() && rig.result(b).unwrap().is_ok());
    assert!(
        rig.produce_batches
            .iter()
            .all(|(_, transactional)| *transactional),
        "every batch carries the transactional bit"
    );
    let add = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::AddPartitionsToTxn)
        .unwrap();
    let produce = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::Produce)
        .unwrap();
    assert!(add < produce);
}

#[test]
fn concurrent_transactions_on_add_partitions_is_retried_after_the_short_backoff() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.inject.insert(
        ApiKey::AddPartitionsToTxn,
        VecDeque::from([code::CONCURRENT_TRANSACTIONS; 2]),
    );
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    assert!(rig.result(a).unwrap().is_ok());
    let adds: Vec<u64> = rig
        .log
        .iter()
        .filter(|s| s.api == ApiKey::AddPartitionsToTxn)
        .map(|s| s.at)
        .collect();
    assert_eq!(adds.len(), 3);
    // Nothing was in the transaction yet: 20 ms, not retry.backoff.ms (100 ms).
    assert_eq!(adds[1] - adds[0], 20 * MS);
    assert_eq!(adds[2] - adds[1], 20 * MS);
}

#[test]
fn not_coordinator_on_end_txn_finds_the_coordinator_again_then_retries() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(100 * MS, |r| r.result(a).is_some());
    rig.inject
        .insert(ApiKey::EndTxn, VecDeque::from([code::NOT_COORDINATOR]));
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    let apis: Vec<ApiKey> = rig
        .log
        .iter()
        .map(|s| s.api)
        .filter(|a| matches!(a, ApiKey::EndTxn | ApiKey::FindCoordinator))
        .collect();
    assert_eq!(
        apis,
        vec![
            ApiKey::FindCoordinator,
            ApiKey::EndTxn,
            ApiKey::FindCoordinator,
            ApiKey::EndTxn
        ]
    );
    assert_eq!(rig.state(), TransactionState::Ready);
}

#[test]
fn commit_flushes_batches_still_in_linger_before_end_txn() {
    let mut rig = Rig::ready(Duration::from_secs(60));
    rig.engine.begin_transaction().unwrap();
    let ids: Vec<u32> = (0..3).map(|p| rig.send(p)).collect();
    rig.run_until(1_000 * MS, |_| false);
    assert_eq!(rig.count(ApiKey::Produce), 0, "linger holds the batches");
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    for id in ids {
        assert!(rig.result(id).unwrap().is_ok());
    }
    let last_produce = rig
        .log
        .iter()
        .rposition(|s| s.api == ApiKey::Produce)
        .unwrap();
    let end = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::EndTxn)
        .unwrap();
    assert!(last_produce < end, "EndTxn after every batch");
    assert!(rig.now < 60_000 * MS, "commit did not wait for linger");
}

#[test]
fn commit_of_an_empty_transaction_sends_no_end_txn() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.count(ApiKey::EndTxn), 0);
    assert_eq!(rig.state(), TransactionState::Ready);
}

#[test]
fn abort_fails_unsent_batches_and_sends_end_txn_abort() {
    let mut rig = Rig::ready(Duration::from_secs(60));
    rig.engine.begin_transaction().unwrap();
    // p0 is added to the transaction, but its batch lingers; p1 and p2 are never added.
    let lingering = rig.send(0);
    rig.run_until(500 * MS, |r| r.count(ApiKey::AddPartitionsToTxn) == 1);
    rig.run_until(500 * MS, |_| false);
    let never_added: Vec<u32> = (1..3).map(|p| rig.send(p)).collect();
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(
        rig.result(lingering),
        Some(Err(ProduceError::TransactionAborted))
    );
    for id in never_added {
        assert_eq!(rig.result(id), Some(Err(ProduceError::TransactionAborted)));
    }
    assert_eq!(rig.count(ApiKey::Produce), 0, "no aborted record was sent");
    assert_eq!(rig.count(ApiKey::AddPartitionsToTxn), 1);
    let end = rig
        .log
        .iter()
        .find(|s| s.api == ApiKey::EndTxn)
        .unwrap()
        .clone();
    let request = EndTxnRequest::decode(&mut end.body.clone(), end.version).unwrap();
    assert!(!request.committed);
    assert_eq!(rig.state(), TransactionState::Ready);
    // A clean abort bumps nothing.
    assert_eq!(rig.engine.identity().epoch, 0);
}

#[test]
fn abort_of_a_transaction_with_nothing_added_sends_no_end_txn() {
    let mut rig = Rig::ready(Duration::from_secs(60));
    rig.engine.begin_transaction().unwrap();
    let unsent: Vec<u32> = (0..3).map(|p| rig.send(p)).collect();
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    for id in unsent {
        assert_eq!(rig.result(id), Some(Err(ProduceError::TransactionAborted)));
    }
    assert_eq!(rig.count(ApiKey::EndTxn), 0);
    assert_eq!(rig.count(ApiKey::Produce), 0);
}

#[test]
fn producer_fenced_on_end_txn_is_fatal() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(100 * MS, |r| r.result(a).is_some());
    rig.inject
        .insert(ApiKey::EndTxn, VecDeque::from([code::PRODUCER_FENCED]));
    let handle = rig.engine.commit_transaction().unwrap();
    assert!(matches!(rig.wait(handle), Err(TransactionError::Fenced(_))));
    assert_eq!(rig.state(), TransactionState::FatalError);
    assert!(matches!(
        rig.engine.begin_transaction(),
        Err(TransactionError::Fenced(_))
    ));
    assert!(matches!(
        rig.engine.abort_transaction(),
        Err(TransactionError::Fenced(_))
    ));
    assert!(
        rig.engine.fatal_error().is_some(),
        "the data plane stops too"
    );
}

#[test]
fn invalid_producer_epoch_on_produce_is_abortable_and_abort_bumps_the_epoch() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    rig.inject.insert(
        ApiKey::Produce,
        VecDeque::from([code::INVALID_PRODUCER_EPOCH]),
    );
    let a = rig.send(0);
    rig.run_until(1_000 * MS, |r| r.result(a).is_some());
    assert_eq!(
        rejected_code(&rig.result(a)),
        Some(code::INVALID_PRODUCER_EPOCH)
    );
    // Abortable (KIP-588), and reported as the fencing it is: Java re-throws
    // InvalidProducerEpochException from commit and send.
    assert_eq!(rig.state(), TransactionState::AbortableError);
    assert!(matches!(
        rig.engine.commit_transaction(),
        Err(TransactionError::Fenced(_))
    ));
    assert!(matches!(
        rig.engine.txn_check_send(),
        Err(TransactionError::Fenced(_))
    ));
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    // EndTxn(abort), then InitProducerId with the current identity: epoch 0 → 1.
    let tail: Vec<ApiKey> = rig
        .log
        .iter()
        .map(|s| s.api)
        .filter(|a| matches!(a, ApiKey::EndTxn | ApiKey::InitProducerId))
        .collect();
    assert_eq!(
        tail,
        vec![
            ApiKey::InitProducerId,
            ApiKey::EndTxn,
            ApiKey::InitProducerId
        ]
    );
    assert_eq!(
        rig.init_producer_id_requests(),
        vec![(-1, -1), (7, 0)],
        "the bump names the identity it bumps from (KIP-360), so a fenced producer learns it"
    );
    assert_eq!(rig.engine.identity().epoch, 1);
    assert_eq!(rig.state(), TransactionState::Ready);
    // The next transaction runs under the new epoch from sequence 0.
    rig.engine.begin_transaction().unwrap();
    let b = rig.send(0);
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert!(rig.result(b).unwrap().is_ok());
    let slot = rig.engine.partition(&Rig::tp(0)).unwrap();
    assert_eq!(slot.entry.producer_id_and_epoch.epoch, 1);
    assert_eq!(slot.entry.next_sequence, 1);
}

#[test]
fn a_timed_out_commit_called_again_returns_the_same_handle_and_its_result() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(100 * MS, |r| r.result(a).is_some());
    rig.held_apis.push(ApiKey::EndTxn);
    let first = rig.engine.commit_transaction().unwrap();
    rig.run_until(500 * MS, |_| false);
    // The caller gave up waiting; the result is not there yet.
    assert_eq!(rig.engine.txn_result(first), None);
    assert!(matches!(
        rig.engine.abort_transaction(),
        Err(TransactionError::PendingOperation { .. })
    ));
    let again = rig.engine.commit_transaction().unwrap();
    assert_eq!(again, first);
    rig.release(ApiKey::EndTxn);
    assert_eq!(rig.wait(again), Ok(()));
    assert_eq!(rig.count(ApiKey::EndTxn), 1, "no second EndTxn");
}

#[test]
fn send_offsets_adds_the_group_then_commits_offsets_to_the_group_coordinator() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    rig.inject.insert(
        ApiKey::TxnOffsetCommit,
        VecDeque::from([code::COORDINATOR_LOAD_IN_PROGRESS]),
    );
    let mut offsets = BTreeMap::new();
    offsets.insert(TopicPartition::new("in", 0), OffsetAndMetadata::new(42));
    let mut group = GroupMetadata::new("g");
    group.generation_id = 3;
    group.member_id = "m".into();
    let handle = rig
        .engine
        .send_offsets_to_transaction(offsets, group)
        .unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.count(ApiKey::AddOffsetsToTxn), 1);
    assert_eq!(rig.count(ApiKey::TxnOffsetCommit), 2, "retried once");
    let commit = rig
        .log
        .iter()
        .find(|s| s.api == ApiKey::TxnOffsetCommit)
        .unwrap()
        .clone();
    let request = TxnOffsetCommitRequest::decode(&mut commit.body.clone(), commit.version).unwrap();
    assert_eq!(request.group_id.0.as_str(), "g");
    assert_eq!(request.generation_id, 3);
    assert_eq!(request.topics[0].partitions[0].committed_offset, 42);
    // The group coordinator was looked up with key type 0.
    assert_eq!(
        rig.find_coordinator_requests(),
        vec![(1, "tx-1".to_string()), (0, "g".to_string())]
    );
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(
        rig.count(ApiKey::EndTxn),
        1,
        "offsets alone start the transaction"
    );
}

#[test]
fn add_partitions_topic_authorization_failure_is_abortable_and_fails_the_batches() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.inject.insert(
        ApiKey::AddPartitionsToTxn,
        VecDeque::from([code::TOPIC_AUTHORIZATION_FAILED]),
    );
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(1_000 * MS, |r| r.result(a).is_some());
    assert!(matches!(
        rig.result(a),
        Some(Err(ProduceError::TransactionAbortable(_)))
    ));
    assert_eq!(rig.state(), TransactionState::AbortableError);
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.count(ApiKey::Produce), 0);
    // Nothing was added: the abort needs no EndTxn.
    assert_eq!(rig.count(ApiKey::EndTxn), 0);
    // The batches failed by the abortable error are not produce failures of their own: the
    // abort keeps the epoch, as Java's does (`abortableError`, no bump).
    assert_eq!(rig.count(ApiKey::InitProducerId), 1);
    assert_eq!(rig.engine.identity().epoch, 0);
    // The refused partition is not carried into the next transaction.
    rig.engine.begin_transaction().unwrap();
    let b = rig.send(1);
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert!(rig.result(b).unwrap().is_ok());
    assert_eq!(rig.add_partitions_requests(), vec![vec![0], vec![1]]);
}

#[test]
fn an_init_producer_id_answer_without_an_error_but_with_an_invalid_identity_is_fatal() {
    for identity in [(7, -1), (-1, 0)] {
        let mut rig = Rig::new(Duration::ZERO);
        rig.init_answer = Some(identity);
        let handle = rig.engine.init_transactions().expect("init");
        let result = rig.wait(handle);
        assert!(
            matches!(result, Err(TransactionError::Fatal(_))),
            "{identity:?}: {result:?}"
        );
        assert_eq!(rig.state(), TransactionState::FatalError, "{identity:?}");
        assert!(!rig.engine.identity().is_valid(), "{identity:?}");
    }
}

#[test]
fn a_fatal_produce_error_makes_the_transaction_fatal_and_every_later_call_says_so() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    rig.inject.insert(
        ApiKey::Produce,
        VecDeque::from([code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED]),
    );
    let a = rig.send(0);
    rig.run_until(1_000 * MS, |r| r.result(a).is_some());
    assert!(matches!(rig.result(a), Some(Err(_))), "{:?}", rig.result(a));
    assert_eq!(rig.state(), TransactionState::FatalError);
    assert!(matches!(
        rig.engine.commit_transaction(),
        Err(TransactionError::Fatal(_))
    ));
    assert!(matches!(
        rig.engine.abort_transaction(),
        Err(TransactionError::Fatal(_))
    ));
    assert!(matches!(
        rig.engine.txn_check_send(),
        Err(TransactionError::Fatal(_))
    ));
}

#[test]
fn a_repeated_request_for_a_partition_already_in_the_transaction_is_answered_at_once() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(1_000 * MS, |r| r.result(a).is_some());
    assert!(rig.result(a).unwrap().is_ok());
    let _ = rig.engine.take_txn_actions();
    rig.engine.txn_add_partitions(&[Rig::tp(0)]);
    let actions = rig.engine.take_txn_actions();
    assert!(
        actions.iter().any(|a| matches!(
            a,
            TxnAction::PartitionsAdded { partitions } if partitions == &vec![Rig::tp(0)]
        )),
        "{actions:?}"
    );
    rig.step();
    assert_eq!(rig.add_partitions_requests(), vec![vec![0]]);
}

#[test]
fn transaction_calls_on_a_non_owner_or_in_wrong_states_are_typed_errors() {
    let mut rig = Rig::new(Duration::ZERO);
    assert!(matches!(
        rig.engine.begin_transaction(),
        Err(TransactionError::InvalidState {
            state: "UNINITIALIZED",
            ..
        })
    ));
    let mut other = config(Duration::ZERO);
    other.owns_identity = false;
    let mut participant: Engine<Record> = Engine::new(other);
    assert_eq!(
        participant.init_transactions(),
        Err(TransactionError::NotTransactional)
    );
    let handle = rig.engine.init_transactions().unwrap();
    assert_eq!(rig.engine.init_transactions().unwrap(), handle);
    assert_eq!(rig.wait(handle), Ok(()));
    assert!(matches!(
        rig.engine.init_transactions(),
        Err(TransactionError::InvalidState { state: "READY", .. })
    ));
    assert!(matches!(
        rig.engine.abort_transaction(),
        Err(TransactionError::InvalidState { .. })
    ));
}

#[test]
fn a_participant_engines_partitions_are_added_by_the_owner_and_end_txn_waits_for_its_flush() {
    let mut rig = Rig::ready_with(Duration::from_secs(60), 1);
    rig.held_apis.push(ApiKey::AddPartitionsToTxn);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send_on(0, 0);
    let b = rig.send_on(1, 1);
    rig.run_until(200 * MS, |_| false);
    // The participant asked the owner, which sent one AddPartitionsToTxn for both.
    assert_eq!(rig.count(ApiKey::AddPartitionsToTxn), 1);
    assert_eq!(rig.add_partitions_requests(), vec![vec![0, 1]]);
    assert!(rig.others[0].txn_participant().requested.len() == 1);
    rig.release(ApiKey::AddPartitionsToTxn);
    assert_eq!(rig.others[0].txn_participant().added.len(), 1);
    // Both batches linger; the commit flushes both engines before EndTxn.
    assert_eq!(rig.count(ApiKey::Produce), 0);
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert!(rig.result(a).unwrap().is_ok());
    assert!(rig.result(b).unwrap().is_ok());
    let last_produce = rig
        .log
        .iter()
        .rposition(|s| s.api == ApiKey::Produce)
        .unwrap();
    let end = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::EndTxn)
        .unwrap();
    assert!(
        last_produce < end,
        "EndTxn after the participant's batch too"
    );
    assert!(
        rig.others[0].txn_participant().added.is_empty(),
        "Ended reached it"
    );
}

#[test]
fn a_participants_produce_error_makes_the_owner_abortable_and_the_abort_reaches_its_unsent_batches()
{
    let mut rig = Rig::ready_with(Duration::ZERO, 1);
    rig.engine.begin_transaction().unwrap();
    rig.inject
        .insert(ApiKey::Produce, VecDeque::from([code::INVALID_RECORD]));
    let b = rig.send_on(1, 1);
    rig.run_until(1_000 * MS, |r| r.result(b).is_some());
    assert_eq!(rejected_code(&rig.result(b)), Some(code::INVALID_RECORD));
    assert_eq!(rig.state(), TransactionState::AbortableError);
    assert!(matches!(
        rig.engine.commit_transaction(),
        Err(TransactionError::Abortable(_))
    ));
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    // The abort bumped the epoch on every engine.
    assert_eq!(rig.engine.identity().epoch, 1);
    assert_eq!(rig.others[0].identity().epoch, 1);
    assert_eq!(rig.state(), TransactionState::Ready);
    // The participant's partition is clean for the next transaction.
    rig.engine.begin_transaction().unwrap();
    let c = rig.send_on(1, 1);
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert!(rig.result(c).unwrap().is_ok());
    let slot = rig.others[0].partition(&Rig::tp(1)).unwrap();
    assert_eq!(slot.entry.producer_id_and_epoch.epoch, 1);
}

#[test]
fn abort_waits_for_a_batch_in_flight_before_end_txn() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    rig.held_apis.push(ApiKey::Produce);
    let in_flight = rig.send(0);
    rig.run_until(200 * MS, |r| r.count(ApiKey::Produce) == 1);
    let handle = rig.engine.abort_transaction().unwrap();
    rig.run_until(2_000 * MS, |_| false);
    assert_eq!(
        rig.count(ApiKey::EndTxn),
        0,
        "EndTxn waits for the batch on the wire"
    );
    assert_eq!(rig.engine.txn_result(handle), None);
    rig.release(ApiKey::Produce);
    assert_eq!(rig.wait(handle), Ok(()));
    // The stamped batch finished on its own (acked); the abort marker then hides it.
    assert!(rig.result(in_flight).unwrap().is_ok());
    let produce = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::Produce)
        .unwrap();
    let end = rig
        .log
        .iter()
        .position(|s| s.api == ApiKey::EndTxn)
        .unwrap();
    assert!(produce < end);
}

#[test]
fn transaction_abortable_on_end_txn_abort_is_fatal() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(200 * MS, |r| r.result(a).is_some());
    rig.inject.insert(
        ApiKey::EndTxn,
        VecDeque::from([code::TRANSACTION_ABORTABLE]),
    );
    let handle = rig.engine.abort_transaction().unwrap();
    assert!(matches!(rig.wait(handle), Err(TransactionError::Fatal(_))));
    assert_eq!(rig.state(), TransactionState::FatalError);
}

#[test]
fn invalid_producer_epoch_from_the_coordinator_is_fenced_not_abortable() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.inject.insert(
        ApiKey::AddPartitionsToTxn,
        VecDeque::from([code::INVALID_PRODUCER_EPOCH]),
    );
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    rig.run_until(1_000 * MS, |r| r.result(a).is_some());
    assert_eq!(rig.state(), TransactionState::FatalError);
    assert!(matches!(
        rig.engine.transaction_manager().unwrap().last_error(),
        Some(TransactionError::Fenced(_))
    ));
    assert!(matches!(rig.result(a), Some(Err(ProduceError::Fatal(_)))));
    assert_eq!(rig.count(ApiKey::Produce), 0);
}

/// The commit's result, or `None` while it has none after 30 s of virtual time.
fn commit_outcome(rig: &mut Rig) -> Option<Result<(), TransactionError>> {
    let handle = match rig.engine.commit_transaction() {
        Ok(handle) => handle,
        Err(err) => return Some(Err(err)),
    };
    let mut result = None;
    rig.run_until(30_000 * MS, |r| {
        result = r.engine.txn_result(handle);
        result.is_some()
    });
    result
}

/// How many EndTxn requests asked to commit.
fn end_txn_commits(rig: &Rig) -> usize {
    rig.log
        .iter()
        .filter(|s| s.api == ApiKey::EndTxn)
        .filter(|s| {
            EndTxnRequest::decode(&mut s.body.clone(), s.version)
                .unwrap()
                .committed
        })
        .count()
}

/// Java's `TransactionManager.maybeTransitionToErrorState` makes an
/// UnsupportedVersionException (as ClusterAuthorization, TransactionalIdAuthorization and
/// ProducerFenced) fatal; `Sender.runOnce` then fails every batch and `commitTransaction`
/// throws. A participant whose broker's ApiVersions answer lacks Produce turns fatal on its
/// own and fails its queued batch: the owner's transaction manager must learn it. Otherwise
/// the participant, with nothing left, reports its flush done and EndTxn(commit) commits the
/// transaction without that record.
#[test]
fn a_participants_own_fatal_error_fails_the_commit() {
    let mut rig = Rig::ready_with(Duration::from_secs(60), 1);
    rig.engine.begin_transaction().unwrap();
    // The linger holds both records unsent until the commit's flush.
    let a = rig.send_on(0, 0);
    let b = rig.send_on(1, 1);
    rig.run_until(200 * MS, |_| false);
    assert_eq!(
        rig.others[0].txn_participant().added.len(),
        1,
        "the participant's partition is in the transaction"
    );
    rig.lose_produce_support(1);
    assert!(rig.run_until(1_000 * MS, |r| r.result(b).is_some()));
    assert!(matches!(rig.result(b), Some(Err(ProduceError::Fatal(_)))));
    assert!(rig.others[0].fatal_error().is_some());
    // Reported once, by the engine that stopped; its failed batch adds no report.
    assert_eq!(rig.produce_failed, vec![(1, true)]);
    let commit = commit_outcome(&mut rig);
    assert!(
        matches!(commit, Some(Err(TransactionError::Fatal(_)))),
        "the commit must fail with the participant's fatal error: {commit:?}"
    );
    assert_eq!(rig.state(), TransactionState::FatalError);
    assert_eq!(end_txn_commits(&rig), 0, "no EndTxn(commit) was sent");
    // The fatal manager fails the owner's batch too: nothing of the transaction is acked.
    rig.run_until(1_000 * MS, |r| r.result(a).is_some());
    assert!(matches!(rig.result(a), Some(Err(ProduceError::Fatal(_)))));
}

/// The same rule for the owner's own engine: it reports its fatal error to its own
/// transaction manager, and the commit fails at once instead of waiting for a flush that an
/// engine which sends nothing more can never finish.
#[test]
fn the_owners_own_fatal_error_fails_the_commit() {
    let mut rig = Rig::ready_with(Duration::from_secs(60), 1);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send_on(0, 0);
    let b = rig.send_on(1, 1);
    rig.run_until(200 * MS, |_| false);
    rig.lose_produce_support(0);
    assert!(rig.run_until(1_000 * MS, |r| r.result(a).is_some()));
    assert!(matches!(rig.result(a), Some(Err(ProduceError::Fatal(_)))));
    assert_eq!(rig.produce_failed, vec![(0, true)], "reported once");
    let commit = commit_outcome(&mut rig);
    assert!(
        matches!(commit, Some(Err(TransactionError::Fatal(_)))),
        "the commit must fail with the owner's fatal error: {commit:?}"
    );
    assert_eq!(rig.state(), TransactionState::FatalError);
    assert_eq!(end_txn_commits(&rig), 0, "no EndTxn(commit) was sent");
    rig.run_until(1_000 * MS, |r| r.result(b).is_some());
    assert!(matches!(rig.result(b), Some(Err(ProduceError::Fatal(_)))));
}

/// A refused TLS handshake stops a participant as a refused authentication does: reported
/// once, however often the refusal is seen, and the commit fails. Its failed records carry
/// the TLS error and add no report of their own.
#[test]
fn a_participants_refused_tls_handshake_is_reported_once_and_fails_the_commit() {
    let mut rig = Rig::ready_with(Duration::from_secs(60), 1);
    rig.engine.begin_transaction().unwrap();
    let b = rig.send_on(1, 1);
    let c = rig.send_on(1, 2);
    rig.run_until(200 * MS, |_| false);
    let generation = rig.generations[&1];
    let now = rig.now;
    for _ in 0..2 {
        rig.others[0].on_tls_refused(now, 1, generation, "certificate refused".into());
    }
    assert!(rig.run_until(1_000 * MS, |r| r.result(b).is_some()
        && r.result(c).is_some()));
    assert!(matches!(rig.result(b), Some(Err(ProduceError::Tls { .. }))));
    assert!(matches!(rig.result(c), Some(Err(ProduceError::Tls { .. }))));
    assert_eq!(rig.produce_failed, vec![(1, true)]);
    let commit = commit_outcome(&mut rig);
    assert!(
        matches!(commit, Some(Err(TransactionError::Fatal(_)))),
        "{commit:?}"
    );
    assert_eq!(end_txn_commits(&rig), 0, "no EndTxn(commit) was sent");
}
