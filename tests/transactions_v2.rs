//! Transactions V2 (KIP-890 part 2) end to end: a transactional producer of 2 shards over TCP
//! against the reference cluster (3 brokers, its transaction coordinator) whose finalized
//! `transaction.version` is 2, as a cluster created by Kafka 4.0 has it. Every rule is checked
//! from outside the producer: the requests that reached the cluster (by API key and version),
//! the coordinator's metadata, each partition's batches and markers (their epochs and
//! sequences), and the topic read back by librdkafka's consumer under `read_committed` and
//! `read_uncommitted`.
//!
//! `transactions_v2/faults.rs` holds fencing and a coordinator that moves during EndTxn;
//! `transactions_v2/versions.rs` a cluster at level 1 and `kacrab.transaction.version=1`.
#![cfg(feature = "testkit")]

mod common;
#[path = "transactions_v2/faults.rs"]
mod faults;
#[path = "transactions_v2/rig.rs"]
mod rig;
#[path = "transactions_v2/versions.rs"]
mod versions;

use kacrab::testkit::broker::TransactionState;
use kacrab::{GroupMetadata, OffsetAndMetadata, ProduceError, TopicPartition};
use kafka_protocol::messages::ApiKey;
use rdkafka::Offset;

use common::{payload_ids, read_back, Isolation};
use rig::*;

#[test]
fn tv2_first_write_of_a_partition_sends_no_add_partitions_to_txn() {
    let topic = "tv2-implicit-add";
    let cluster = start_cluster(TV2, &[topic]);
    let p = producer(&cluster, "implicit-add", &[]);
    p.init_transactions(CALL).expect("init_transactions");
    p.begin_transaction().expect("begin_transaction");
    // Partitions 0, 1 and 2 only, every record acknowledged while the transaction is open.
    let ids: Vec<u64> = (0..36).filter(|&id| partition_of(id) < 3).collect();
    expect_acked(
        ids.iter().map(|&id| send(&p, topic, id)).collect(),
        "open transaction",
    );

    let stats = cluster.stats();
    assert_eq!(
        stats.requests(ApiKey::AddPartitionsToTxn),
        0,
        "no AddPartitionsToTxn reached the cluster"
    );
    assert_eq!(
        stats.versions_seen(ApiKey::Produce),
        vec![12],
        "every Produce is v12, which adds its partition"
    );
    let (_, _, state) = coordinator_view(&cluster, "implicit-add");
    assert_eq!(state, TransactionState::Ongoing);
    assert_eq!(
        partitions_in_transaction(&cluster, "implicit-add"),
        (0..3).map(|p| (topic.to_string(), p)).collect::<Vec<_>>(),
        "the coordinator holds exactly the partitions written to"
    );
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(None),
        "nothing is visible before the commit"
    );

    p.commit_transaction(CALL).expect("commit_transaction");
    assert_eq!(stats.requests(ApiKey::AddPartitionsToTxn), 0);
    assert_eq!(stats.versions_seen(ApiKey::EndTxn), vec![5]);
    let (_, _, state) = coordinator_view(&cluster, "implicit-add");
    assert_eq!(state, TransactionState::CompleteCommit);
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(ids),
        "the committed records are visible, once and in order"
    );
}

#[test]
fn tv2_offsets_commit_without_add_offsets_to_txn() {
    let (input, output) = ("tv2-offsets-in", "tv2-offsets-out");
    let cluster = start_cluster(TV2, &[input, output]);
    let p = producer(&cluster, "tv2-offsets", &[]);
    p.init_transactions(CALL).expect("init_transactions");
    let group = GroupMetadata::new("tv2-copier");
    let offsets = |a: i64, b: i64| {
        [(0, a), (1, b)].map(|(partition, offset)| {
            (
                TopicPartition {
                    topic: input.into(),
                    partition,
                },
                OffsetAndMetadata::new(offset),
            )
        })
    };
    let broker_offsets = || {
        cluster.with_cluster(|c| {
            (0..2)
                .map(|p| c.committed_offset("tv2-copier", input, p))
                .collect::<Vec<_>>()
        })
    };

    // Records and offsets, committed.
    p.begin_transaction().unwrap();
    let sent = send_ids(&p, output, 0..12);
    p.send_offsets_to_transaction(offsets(10, 20), &group, CALL)
        .expect("send_offsets_to_transaction");
    assert_eq!(
        broker_offsets(),
        vec![None, None],
        "the offsets are pending in the open transaction"
    );
    p.commit_transaction(CALL).expect("commit");
    expect_acked(sent, "committed transaction");
    assert_eq!(
        common::committed_offsets(&cluster.bootstrap_servers(), "tv2-copier", input, 2),
        vec![Offset::Offset(10), Offset::Offset(20)]
    );

    // Records and offsets, aborted: the offsets stay those of the first transaction.
    p.begin_transaction().unwrap();
    let sent = send_ids(&p, output, 12..24);
    p.send_offsets_to_transaction(offsets(30, 40), &group, CALL)
        .expect("send_offsets_to_transaction");
    p.abort_transaction(CALL).expect("abort");
    wait_all(sent);
    assert_eq!(
        common::committed_offsets(&cluster.bootstrap_servers(), "tv2-copier", input, 2),
        vec![Offset::Offset(10), Offset::Offset(20)],
        "an aborted transaction's offsets are not committed"
    );

    // Offsets alone: the TxnOffsetCommit starts the transaction, which commits.
    p.begin_transaction().unwrap();
    p.send_offsets_to_transaction(offsets(50, 60), &group, CALL)
        .expect("send_offsets_to_transaction");
    p.commit_transaction(CALL).expect("commit of offsets alone");
    assert_eq!(
        common::committed_offsets(&cluster.bootstrap_servers(), "tv2-copier", input, 2),
        vec![Offset::Offset(50), Offset::Offset(60)]
    );

    let stats = cluster.stats();
    assert_eq!(
        stats.requests(ApiKey::AddOffsetsToTxn),
        0,
        "no AddOffsetsToTxn reached the cluster"
    );
    assert_eq!(stats.requests(ApiKey::AddPartitionsToTxn), 0);
    assert_eq!(
        stats.versions_seen(ApiKey::TxnOffsetCommit),
        vec![5],
        "TxnOffsetCommit v5 adds the group"
    );
    assert_eq!(
        stats.requests(ApiKey::TxnOffsetCommit),
        3,
        "one TxnOffsetCommit per transaction"
    );
    assert_eq!(
        read_ids(&cluster, output, Isolation::ReadCommitted),
        by_partition(0..12)
    );
}

#[test]
fn tv2_each_commit_and_abort_bumps_the_epoch() {
    let topic = "tv2-epochs";
    let cluster = start_cluster(TV2, &[topic]);
    let p = producer(&cluster, "tv2-epochs", &[]);
    p.init_transactions(CALL).expect("init_transactions");
    let (producer_id, first_epoch, _) = coordinator_view(&cluster, "tv2-epochs");
    let ends = [true, false, true, false, false, true];
    for (k, &commit) in ends.iter().enumerate() {
        p.begin_transaction().unwrap();
        // Two records per partition, acknowledged before the end: the aborted ones are in
        // the log too.
        let from = 12 * k as u64;
        expect_acked(send_ids(&p, topic, from..from + 12), "transaction");
        if commit {
            p.commit_transaction(CALL).expect("commit");
        } else {
            p.abort_transaction(CALL).expect("abort");
        }
        let (id, epoch, state) = coordinator_view(&cluster, "tv2-epochs");
        assert_eq!(id, producer_id, "transaction {k}: the producer id stays");
        assert_eq!(
            epoch,
            first_epoch + k as i16 + 1,
            "transaction {k}: its end bumped the epoch"
        );
        let ended = if commit {
            TransactionState::CompleteCommit
        } else {
            TransactionState::CompleteAbort
        };
        assert_eq!(state, ended, "transaction {k}");
    }

    // In every partition: transaction k's data at epoch first+k from sequence 0 (the bumped
    // epoch starts the sequences again), its marker at the bumped epoch first+k+1.
    let expected: Vec<LoggedTransaction> = ends
        .iter()
        .enumerate()
        .map(|(k, &commit)| LoggedTransaction {
            data_epoch: first_epoch + k as i16,
            first_sequence: 0,
            last_sequence: 1,
            marker_epoch: first_epoch + k as i16 + 1,
            commit,
        })
        .collect();
    let last_epoch = first_epoch + ends.len() as i16;
    for partition in 0..PARTITIONS {
        assert_eq!(
            logged_transactions(&log_entries(&cluster, topic, partition), producer_id),
            expected,
            "partition {partition}"
        );
        let state_epoch = cluster.with_cluster(|c| {
            c.producer_state(topic, partition, producer_id)
                .map(|s| s.producer_epoch)
        });
        assert_eq!(state_epoch, Some(last_epoch), "partition {partition}");
    }
    let committed = ends
        .iter()
        .enumerate()
        .filter(|(_, &commit)| commit)
        .flat_map(|(k, _)| 12 * k as u64..12 * k as u64 + 12);
    let mut committed: Vec<u64> = committed.collect();
    committed.sort_unstable();
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(committed)
    );
}

#[test]
fn tv2_aborted_records_are_hidden_and_committed_visible_under_read_committed_for_librdkafka() {
    let topic = "tv2-visibility";
    let cluster = start_cluster(TV2, &[topic]);
    let p = producer(&cluster, "tv2-visibility", &[]);
    p.init_transactions(CALL).expect("init_transactions");
    let (producer_id, _, _) = coordinator_view(&cluster, "tv2-visibility");
    let ends = [true, false, false, true, false, true, true, false];
    let (mut committed, mut written) = (Vec::new(), Vec::new());
    for (k, &commit) in ends.iter().enumerate() {
        p.begin_transaction().expect("begin_transaction");
        let ids = 60 * k as u64..60 * k as u64 + 60;
        let mut futures = send_ids(&p, topic, ids.clone()).into_iter();
        // The first 20 (every partition) acknowledged while the transaction is open.
        let mut results = wait_all(futures.by_ref().take(20).collect());
        if commit {
            p.commit_transaction(CALL).expect("commit_transaction");
        } else {
            p.abort_transaction(CALL).expect("abort_transaction");
        }
        results.extend(wait_all(futures.collect()));
        for (id, result) in ids.zip(results) {
            match result {
                Ok(_) => {
                    written.push(id);
                    if commit {
                        committed.push(id);
                    }
                }
                // Refused unsent by the abort: never in the log.
                Err(ProduceError::TransactionAborted) if !commit => {}
                Err(e) => panic!("record {id} of transaction {k}: {e}"),
            }
        }
    }
    assert_eq!(cluster.stats().requests(ApiKey::AddPartitionsToTxn), 0);
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(committed),
        "read_committed: exactly the committed records, in order, once"
    );
    let records = read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        Isolation::ReadUncommitted,
        READ,
    );
    assert_eq!(
        payload_ids(&records),
        by_partition(written),
        "read_uncommitted: every written record"
    );
    // Each partition holds every transaction, closed by the marker of its end.
    for partition in 0..PARTITIONS {
        let logged = logged_transactions(&log_entries(&cluster, topic, partition), producer_id);
        assert_eq!(
            logged.iter().map(|t| t.commit).collect::<Vec<_>>(),
            ends,
            "partition {partition}"
        );
    }
}
