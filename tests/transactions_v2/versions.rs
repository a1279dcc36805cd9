//! Transactions V1 where V2 is not chosen: a cluster whose finalized `transaction.version` is
//! 1 (a Kafka 3.x cluster, or a 4.x one that never raised the feature), and
//! `kacrab.transaction.version=1` on a cluster at level 2 (a 4.x coordinator still serves V1
//! transactions, `TransactionVersion` per request version).

use kacrab::testkit::broker::TransactionState;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{GroupMetadata, OffsetAndMetadata, TopicPartition};
use kafka_protocol::messages::ApiKey;

use crate::common::Isolation;
use crate::rig::*;

/// Commit (with offsets), abort, commit over every partition and checks that they went the
/// V1 way: AddPartitionsToTxn and AddOffsetsToTxn, Produce ≤ v11, EndTxn and TxnOffsetCommit
/// ≤ v4, one epoch for every transaction (a V1 EndTxn bumps nothing) with the sequences
/// going on across transactions; and exactly the committed records visible, once.
fn transactions_go_the_v1_way(cluster: &ReferenceCluster, extra: &[(&str, &str)]) {
    let (input, output) = ("v1-in", "v1-out");
    let p = producer(cluster, "v1", extra);
    p.init_transactions(CALL).expect("init_transactions");
    let (producer_id, epoch, _) = coordinator_view(cluster, "v1");
    let group = GroupMetadata::new("v1-copier");
    let ends = [true, false, true];
    for (k, &commit) in ends.iter().enumerate() {
        p.begin_transaction().unwrap();
        let from = 12 * k as u64;
        expect_acked(send_ids(&p, output, from..from + 12), "transaction");
        let offsets = [(
            TopicPartition {
                topic: input.into(),
                partition: 0,
            },
            OffsetAndMetadata::new(10 * (k as i64 + 1)),
        )];
        p.send_offsets_to_transaction(offsets, &group, CALL)
            .expect("send_offsets_to_transaction");
        if commit {
            p.commit_transaction(CALL).expect("commit");
        } else {
            p.abort_transaction(CALL).expect("abort");
        }
        let (id, after, state) = coordinator_view(cluster, "v1");
        assert_eq!(
            (id, after),
            (producer_id, epoch),
            "transaction {k}: a V1 end keeps the producer id and epoch"
        );
        let ended = if commit {
            TransactionState::CompleteCommit
        } else {
            TransactionState::CompleteAbort
        };
        assert_eq!(state, ended);
    }

    let stats = cluster.stats();
    assert!(
        stats.requests(ApiKey::AddPartitionsToTxn) >= ends.len() as u64,
        "AddPartitionsToTxn adds each transaction's partitions: {}",
        stats.requests(ApiKey::AddPartitionsToTxn)
    );
    assert_eq!(
        stats.requests(ApiKey::AddOffsetsToTxn),
        ends.len() as u64,
        "one AddOffsetsToTxn per transaction"
    );
    for (api, highest) in [
        (ApiKey::Produce, 11),
        (ApiKey::EndTxn, 4),
        (ApiKey::TxnOffsetCommit, 4),
        (ApiKey::AddPartitionsToTxn, 3),
    ] {
        let seen = stats.versions_seen(api);
        assert!(
            !seen.is_empty() && seen.iter().all(|&v| v <= highest),
            "{api:?} versions {seen:?}, V1 caps at {highest}"
        );
    }
    // Every transaction at the one epoch, markers too, the sequences going on.
    let expected: Vec<LoggedTransaction> = ends
        .iter()
        .enumerate()
        .map(|(k, &commit)| LoggedTransaction {
            data_epoch: epoch,
            first_sequence: 2 * k as i32,
            last_sequence: 2 * k as i32 + 1,
            marker_epoch: epoch,
            commit,
        })
        .collect();
    for partition in 0..PARTITIONS {
        assert_eq!(
            logged_transactions(&log_entries(cluster, output, partition), producer_id),
            expected,
            "partition {partition}"
        );
    }
    assert_eq!(
        cluster.with_cluster(|c| c.committed_offset("v1-copier", input, 0)),
        Some(30),
        "the last committed transaction's offset, not the aborted one's"
    );
    assert_eq!(
        read_ids(cluster, output, Isolation::ReadCommitted),
        by_partition((0..12).chain(24..36))
    );
}

#[test]
fn tv1_cluster_keeps_add_partitions_to_txn() {
    let cluster = start_cluster(TV1, &["v1-in", "v1-out"]);
    transactions_go_the_v1_way(&cluster, &[]);
}

#[test]
fn transaction_version_key_forces_tv1_on_a_tv2_cluster() {
    let cluster = start_cluster(TV2, &["v1-in", "v1-out"]);
    transactions_go_the_v1_way(&cluster, &[("kacrab.transaction.version", "1")]);
}

// `kacrab.transaction.version=2` speaks V2 whatever the cluster finalized; the brokers serve
// each request by its version (`TransactionVersion.transactionVersionForEndTxn`), so a
// level-1 cluster that speaks Produce v12, EndTxn v5 and TxnOffsetCommit v5 runs it.
#[test]
fn transaction_version_key_forces_tv2_on_a_tv1_cluster() {
    let topic = "forced-v2";
    let cluster = start_cluster(TV1, &[topic]);
    let p = producer(
        &cluster,
        "forced-v2",
        &[("kacrab.transaction.version", "2")],
    );
    p.init_transactions(CALL).expect("init_transactions");
    let (producer_id, epoch, _) = coordinator_view(&cluster, "forced-v2");
    for k in 0..2u64 {
        p.begin_transaction().unwrap();
        expect_acked(send_ids(&p, topic, 12 * k..12 * k + 12), "transaction");
        p.commit_transaction(CALL).expect("commit");
    }
    let stats = cluster.stats();
    assert_eq!(stats.requests(ApiKey::AddPartitionsToTxn), 0);
    assert_eq!(stats.versions_seen(ApiKey::Produce), vec![12]);
    assert_eq!(stats.versions_seen(ApiKey::EndTxn), vec![5]);
    assert_eq!(
        coordinator_view(&cluster, "forced-v2"),
        (producer_id, epoch + 2, TransactionState::CompleteCommit),
        "each V2 commit bumped the epoch"
    );
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(0..24)
    );
}
