//! Transactions V2 (KIP-890 part 2) against the scripted broker set to a Kafka 4.0 broker
//! that finalized `transaction.version=2` (`Rig::tv2`): which protocol the producer chooses,
//! and what V2 changes on the wire (no AddPartitionsToTxn, no AddOffsetsToTxn, Produce v12,
//! TxnOffsetCommit v5, EndTxn v5 whose bumped epoch the producer adopts).

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, EndTxnRequest};
use kafka_protocol::protocol::Decodable;

use kacrab::testkit::internals::engine::transaction_version::TransactionVersion;
use kacrab::testkit::internals::engine::{
    Engine, GroupMetadata, OffsetAndMetadata, TopicPartition, TransactionState,
};
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::{ProduceError, TransactionError};

use super::rig::{config, Rig, MS};

/// A rig against a TV2 broker (or one set up by `setup`) after `init_transactions`, with
/// `participants` more engines.
fn ready(participants: usize, setup: impl FnOnce(&mut Rig)) -> Rig {
    let mut rig = Rig::new(Duration::ZERO);
    rig.tv2 = true;
    for _ in 0..participants {
        let mut c = config(Duration::ZERO);
        c.owns_identity = false;
        let mut e = Engine::new(c);
        e.request_topic(super::rig::TOPIC);
        rig.others.push(e);
    }
    setup(&mut rig);
    let handle = rig.engine.init_transactions().expect("init");
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.state(), TransactionState::Ready);
    rig
}

/// Begins a transaction, sends one record to each of `partitions` (on engine 0), waits for
/// them, and commits (or aborts).
fn one_transaction(rig: &mut Rig, partitions: &[i32], commit: bool) {
    rig.engine.begin_transaction().unwrap();
    let ids: Vec<u32> = partitions.iter().map(|&p| rig.send(p)).collect();
    assert!(rig.run_until(2_000 * MS, |r| ids.iter().all(|id| r.result(*id).is_some())));
    for id in ids {
        assert!(rig.result(id).unwrap().is_ok(), "{:?}", rig.result(id));
    }
    let handle = if commit {
        rig.engine.commit_transaction().unwrap()
    } else {
        rig.engine.abort_transaction().unwrap()
    };
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.state(), TransactionState::Ready);
}

/// The (producer id, epoch) each EndTxn request named.
fn end_txn_identities(rig: &Rig) -> Vec<(i64, i16)> {
    rig.log
        .iter()
        .filter(|s| s.api == ApiKey::EndTxn)
        .map(|s| {
            let r = EndTxnRequest::decode(&mut s.body.clone(), s.version).unwrap();
            (r.producer_id.0, r.producer_epoch)
        })
        .collect()
}

#[test]
fn tv2_first_write_of_a_partition_sends_no_add_partitions_to_txn() {
    let mut rig = ready(0, |_| {});
    assert!(rig.engine.txn_transaction_v2(), "the feature is finalized");
    one_transaction(&mut rig, &[0, 1], true);
    assert_eq!(rig.count(ApiKey::AddPartitionsToTxn), 0);
    assert_eq!(rig.versions(ApiKey::Produce), vec![12]);
    assert!(rig.produce_batches.iter().all(|(_, txn)| *txn));
    assert_eq!(rig.versions(ApiKey::EndTxn), vec![5]);
}

#[test]
fn tv2_participants_drain_their_first_batch_at_produce_v12_without_an_add() {
    let mut rig = ready(1, |_| {});
    rig.engine.begin_transaction().unwrap();
    let a = rig.send_on(1, 2);
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    assert!(rig.result(a).unwrap().is_ok());
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.count(ApiKey::AddPartitionsToTxn), 0);
    assert_eq!(rig.versions(ApiKey::Produce), vec![12]);
    // The participant adopted the epoch the commit's EndTxn returned.
    assert_eq!(rig.others[0].identity(), rig.engine.identity());
    assert_eq!(rig.engine.identity().epoch, 1);
}

#[test]
fn tv1_cluster_keeps_add_partitions_to_txn() {
    let mut rig = Rig::ready(Duration::ZERO);
    assert!(!rig.engine.txn_transaction_v2());
    one_transaction(&mut rig, &[0], true);
    assert_eq!(rig.count(ApiKey::AddPartitionsToTxn), 1);
    assert_eq!(rig.versions(ApiKey::Produce), vec![11]);
    assert_eq!(rig.versions(ApiKey::EndTxn), vec![3]);
    assert_eq!(rig.engine.identity().epoch, 0, "a V1 commit bumps nothing");
}

#[test]
fn tv2_versions_without_the_finalized_feature_keep_tv1() {
    let mut rig = Rig::new(Duration::ZERO);
    rig.tv2_versions_only = true;
    let handle = rig.engine.init_transactions().expect("init");
    assert_eq!(rig.wait(handle), Ok(()));
    one_transaction(&mut rig, &[0], true);
    assert_eq!(rig.count(ApiKey::AddPartitionsToTxn), 1);
    assert_eq!(
        rig.versions(ApiKey::Produce),
        vec![11],
        "capped for a V1 transaction"
    );
    assert_eq!(
        rig.versions(ApiKey::EndTxn),
        vec![4],
        "capped for a V1 transaction"
    );
}

#[test]
fn transaction_version_key_forces_tv1_on_a_tv2_cluster() {
    let mut rig = ready(0, |r| {
        r.engine.set_transaction_version(TransactionVersion::V1)
    });
    assert!(!rig.engine.txn_transaction_v2());
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    let offsets = BTreeMap::from([(TopicPartition::new("in", 0), OffsetAndMetadata::new(5))]);
    let sent = rig
        .engine
        .send_offsets_to_transaction(offsets, GroupMetadata::new("g"))
        .unwrap();
    assert_eq!(rig.wait(sent), Ok(()));
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.count(ApiKey::AddPartitionsToTxn), 1);
    assert_eq!(rig.count(ApiKey::AddOffsetsToTxn), 1);
    assert_eq!(rig.versions(ApiKey::Produce), vec![11]);
    assert_eq!(rig.versions(ApiKey::TxnOffsetCommit), vec![4]);
    assert_eq!(rig.versions(ApiKey::EndTxn), vec![4]);
    assert_eq!(rig.engine.identity().epoch, 0);
}

#[test]
fn transaction_version_key_forces_tv2_and_init_fails_fatally_on_a_tv1_cluster() {
    let mut rig = Rig::new(Duration::ZERO);
    rig.engine.set_transaction_version(TransactionVersion::V2);
    let handle = rig.engine.init_transactions().expect("init");
    let err = rig.wait(handle).unwrap_err();
    assert!(matches!(err, TransactionError::Fatal(_)), "{err:?}");
    assert!(
        err.to_string().contains("kacrab.transaction.version"),
        "{err}"
    );
    assert_eq!(rig.state(), TransactionState::FatalError);
    assert!(
        !rig.engine.identity().is_valid(),
        "nothing installed: {:?}",
        rig.engine.identity()
    );
}

#[test]
fn tv2_offsets_go_straight_to_txn_offset_commit_v5() {
    let mut rig = ready(0, |_| {});
    rig.engine.begin_transaction().unwrap();
    let offsets = BTreeMap::from([(TopicPartition::new("in", 0), OffsetAndMetadata::new(43))]);
    let sent = rig
        .engine
        .send_offsets_to_transaction(offsets, GroupMetadata::new("copier"))
        .unwrap();
    assert_eq!(rig.wait(sent), Ok(()));
    assert_eq!(rig.count(ApiKey::AddOffsetsToTxn), 0);
    assert_eq!(rig.versions(ApiKey::TxnOffsetCommit), vec![5]);
    // The group coordinator was looked up by the group's id (key type 0).
    assert!(rig
        .find_coordinator_requests()
        .contains(&(0, "copier".to_string())));
    // Offsets alone start the transaction: the commit sends EndTxn.
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.versions(ApiKey::EndTxn), vec![5]);
}

#[test]
fn tv2_commit_adopts_the_epoch_end_txn_returns() {
    let mut rig = ready(0, |_| {});
    assert_eq!(rig.engine.identity().epoch, 0);
    one_transaction(&mut rig, &[0], true);
    assert_eq!(end_txn_identities(&rig), vec![(7, 0)]);
    assert_eq!(rig.engine.identity().epoch, 1);
    one_transaction(&mut rig, &[0], true);
    assert_eq!(end_txn_identities(&rig), vec![(7, 0), (7, 1)]);
    assert_eq!(rig.engine.identity().epoch, 2);
    assert_eq!(
        rig.count(ApiKey::InitProducerId),
        1,
        "the coordinator bumps, not the client"
    );
    // Each transaction's batch was stamped with the epoch in force, from sequence 0.
    let stamps: Vec<(i16, i32)> = rig.produce_stamps.iter().map(|s| (s.2, s.3)).collect();
    assert_eq!(stamps, vec![(0, 0), (1, 0)]);
}

#[test]
fn tv2_abort_adopts_the_epoch_and_restarts_sequences_at_zero() {
    let mut rig = ready(0, |_| {});
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    let b = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(b).is_some()));
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(
        rig.engine.identity().epoch,
        1,
        "the abort's EndTxn bumped the epoch"
    );
    one_transaction(&mut rig, &[0], false);
    assert_eq!(rig.engine.identity().epoch, 2);
    one_transaction(&mut rig, &[0], true);
    let stamps: Vec<(i32, i16, i32)> = rig.produce_stamps.iter().map(|s| (s.0, s.2, s.3)).collect();
    assert_eq!(stamps, vec![(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 2, 0)]);
    assert_eq!(rig.count(ApiKey::InitProducerId), 1);
}

#[test]
fn tv2_epoch_overflow_at_end_txn_adopts_the_new_producer_id_at_epoch_zero() {
    let mut rig = ready(0, |_| {});
    rig.end_txn_answer = Some((8, 0));
    one_transaction(&mut rig, &[1], true);
    let identity = rig.engine.identity();
    assert_eq!((identity.producer_id, identity.epoch), (8, 0));
    one_transaction(&mut rig, &[1], true);
    let last = *rig.produce_stamps.last().unwrap();
    assert_eq!((last.1, last.2, last.3), (8, 0, 0));
    assert_eq!(end_txn_identities(&rig).last(), Some(&(8, 0)));
}

#[test]
fn tv2_coordinator_moves_during_end_txn_and_the_retry_adopts_the_bumped_epoch() {
    let mut rig = ready(0, |_| {});
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    rig.held_apis.push(ApiKey::EndTxn);
    let handle = rig.engine.commit_transaction().unwrap();
    rig.run_until(500 * MS, |r| !r.held.is_empty());
    // The coordinator completes the commit and bumps the epoch; its answer is lost with the
    // connection. The producer finds the coordinator again and retries under the old epoch.
    let finds = rig.count(ApiKey::FindCoordinator);
    rig.lose_held(ApiKey::EndTxn, 0);
    assert_eq!(rig.wait(handle), Ok(()));
    assert_eq!(rig.lost, 1);
    assert_eq!(end_txn_identities(&rig), vec![(7, 0), (7, 0)]);
    assert!(rig.count(ApiKey::FindCoordinator) > finds);
    assert_eq!(
        rig.engine.identity().epoch,
        1,
        "the retry's answer carried the bump"
    );
    one_transaction(&mut rig, &[0], true);
    assert_eq!(end_txn_identities(&rig).last(), Some(&(7, 1)));
}

#[test]
fn tv2_produce_of_an_old_epoch_is_abortable_and_the_abort_needs_no_client_bump() {
    let mut rig = ready(0, |_| {});
    rig.engine.begin_transaction().unwrap();
    rig.inject
        .entry(ApiKey::Produce)
        .or_default()
        .push_back(code::INVALID_PRODUCER_EPOCH);
    let a = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    assert!(matches!(
        rig.result(a),
        Some(Err(ProduceError::Rejected { code: c, .. })) if c == code::INVALID_PRODUCER_EPOCH
    ));
    assert_eq!(rig.state(), TransactionState::AbortableError);
    let handle = rig.engine.abort_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    // Under V1 this abort ends with InitProducerId(7, 0) (KIP-360); under V2 the EndTxn v5
    // brings the new epoch.
    assert_eq!(rig.count(ApiKey::InitProducerId), 1);
    assert_eq!(rig.engine.identity().epoch, 1);
    one_transaction(&mut rig, &[0], true);
}

#[test]
fn tv2_produce_of_a_fenced_epoch_is_fatal() {
    let mut rig = ready(0, |_| {});
    rig.engine.begin_transaction().unwrap();
    rig.inject
        .entry(ApiKey::Produce)
        .or_default()
        .push_back(code::PRODUCER_FENCED);
    let a = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    rig.run_until(100 * MS, |_| false);
    assert_eq!(rig.state(), TransactionState::FatalError);
    assert!(rig.engine.commit_transaction().is_err());
}

#[test]
fn a_cluster_that_finalizes_tv2_between_transactions_bumps_the_epoch_and_the_next_is_tv2() {
    let mut rig = Rig::ready(Duration::ZERO);
    rig.engine.begin_transaction().unwrap();
    let a = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    // The cluster finalizes transaction.version=2; the owner hears it on a new connection.
    rig.tv2 = true;
    let answered = rig.count(ApiKey::ApiVersions);
    let generation = rig.generations[&0];
    let now = rig.now;
    rig.engine.on_disconnected(now, 1, generation);
    // Another record of the same transaction brings the connection back up.
    let b = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(b).is_some()));
    assert_eq!(rig.count(ApiKey::ApiVersions), answered + 1);
    assert!(
        !rig.engine.txn_transaction_v2(),
        "not in the middle of a transaction"
    );
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
    // The V1 transaction ended with EndTxn v4, then the client bumped the epoch (Java's
    // `maybeUpdateTransactionV2Enabled(false)` on an upgrade).
    assert_eq!(rig.versions(ApiKey::EndTxn), vec![4]);
    assert_eq!(rig.init_producer_id_requests(), vec![(-1, -1), (7, 0)]);
    assert!(rig.engine.txn_transaction_v2());
    assert_eq!(rig.engine.identity().epoch, 1);
    one_transaction(&mut rig, &[1], true);
    assert_eq!(
        rig.count(ApiKey::AddPartitionsToTxn),
        1,
        "only the V1 transaction's"
    );
    assert_eq!(rig.versions(ApiKey::Produce), vec![11, 11, 12]);
    assert_eq!(rig.versions(ApiKey::EndTxn), vec![4, 5]);
}

#[test]
fn tv2_batch_for_a_broker_without_produce_v12_is_a_typed_fatal_error() {
    let mut rig = ready(0, |_| {});
    rig.engine.begin_transaction().unwrap();
    // The leader comes back as a broker that speaks Produce up to v11 only.
    rig.max_versions.insert(ApiKey::Produce, 11);
    let generation = rig.generations[&0];
    let now = rig.now;
    rig.engine.on_disconnected(now, 1, generation);
    let a = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    match rig.result(a) {
        Some(Err(ProduceError::Fatal(cause))) => {
            let text = cause.to_string();
            assert!(
                text.contains("Produce up to v11") && text.contains("v12"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        rig.count(ApiKey::Produce),
        0,
        "nothing sent at v11 under V2"
    );
    assert_eq!(rig.state(), TransactionState::FatalError);
}

#[test]
fn tv2_concurrent_transactions_on_produce_v12_is_retried() {
    // The broker's implicit add meets the previous transaction still completing.
    let mut rig = ready(0, |_| {});
    rig.engine.begin_transaction().unwrap();
    rig.inject
        .entry(ApiKey::Produce)
        .or_default()
        .push_back(code::CONCURRENT_TRANSACTIONS);
    let a = rig.send(0);
    assert!(rig.run_until(2_000 * MS, |r| r.result(a).is_some()));
    assert!(rig.result(a).unwrap().is_ok(), "{:?}", rig.result(a));
    assert_eq!(rig.versions(ApiKey::Produce), vec![12, 12]);
    assert_eq!(rig.state(), TransactionState::InTransaction);
    let handle = rig.engine.commit_transaction().unwrap();
    assert_eq!(rig.wait(handle), Ok(()));
}
