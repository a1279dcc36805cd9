//! Transactions over TCP against the reference cluster (3 brokers, its transaction
//! coordinator), with a producer of 2 shards. Every test reads the topic back with
//! librdkafka's consumer: under `read_committed` exactly the records of committed transactions
//! are visible, once and in send order per partition; aborted ones never are (and are, with the
//! markers between, under `read_uncommitted`).
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::testkit::server::ANY_BROKER;
use kacrab::{
    DeliveryFuture, GroupMetadata, OffsetAndMetadata, ProduceError, Producer, ProducerRecord,
    TopicPartition, TransactionError,
};
use kafka_protocol::messages::ApiKey;
use rdkafka::Offset;

use common::{check_acked_offsets, payload_ids, read_back, Isolation, ReadRecord};

const PARTITIONS: i32 = 6;
const BROKERS: i32 = 3;
const CALL: Duration = Duration::from_secs(30);
const READ: Duration = Duration::from_secs(30);

const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const CONCURRENT_TRANSACTIONS: i16 = 51;

fn start_cluster(topics: &[&str]) -> ReferenceCluster {
    let cluster = ReferenceCluster::start(BROKERS as usize, BrokerRules::default());
    let leaders: Vec<i32> = (0..PARTITIONS).map(|p| 1 + p % BROKERS).collect();
    for topic in topics {
        cluster.create_topic(topic, &leaders);
    }
    cluster
}

fn producer(
    cluster: &ReferenceCluster,
    transactional_id: &str,
    extra: &[(&str, &str)],
) -> Producer {
    common::transactional_producer(&cluster.bootstrap_servers(), transactional_id, extra)
}

/// Sends record `id` (its payload: the id, big-endian) to `partition`.
fn send(producer: &Producer, topic: &str, partition: i32, id: u64) -> DeliveryFuture {
    let mut payload = id.to_be_bytes().to_vec();
    payload.resize(24, b'.');
    producer.send(ProducerRecord::new(topic, Bytes::from(payload)).with_partition(partition))
}

/// The ids of `ids` per partition, in send order (`partition = id % PARTITIONS`).
fn by_partition(ids: impl IntoIterator<Item = u64>) -> Vec<Vec<u64>> {
    let mut out = vec![Vec::new(); PARTITIONS as usize];
    for id in ids {
        out[(id % PARTITIONS as u64) as usize].push(id);
    }
    out
}

/// One transaction's records, sent across every partition.
fn send_batch(producer: &Producer, topic: &str, ids: std::ops::Range<u64>) -> Vec<DeliveryFuture> {
    ids.map(|id| send(producer, topic, (id % PARTITIONS as u64) as i32, id))
        .collect()
}

fn wait_all(futures: Vec<DeliveryFuture>) -> Vec<Result<kacrab::RecordMetadata, ProduceError>> {
    futures
        .into_iter()
        .map(|f| {
            f.wait_timeout(CALL)
                .expect("every send resolves within the call timeout")
        })
        .collect()
}

fn read_ids(cluster: &ReferenceCluster, topic: &str, isolation: Isolation) -> Vec<Vec<u64>> {
    payload_ids(&read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        isolation,
        READ,
    ))
}

#[test]
fn committed_transactions_are_visible_once_in_order_and_aborted_ones_only_to_read_uncommitted() {
    let topic = "txn-visibility";
    let cluster = start_cluster(&[topic]);
    let p = producer(&cluster, "visibility", &[]);
    p.init_transactions(CALL).expect("init_transactions");
    let mut committed = Vec::new();
    let mut aborted_acked = Vec::new();
    let mut acked_at = Vec::new();
    let mut next = 0u64;
    for txn in 0..6 {
        p.begin_transaction().expect("begin_transaction");
        let ids = next..next + 60;
        next += 60;
        let futures = send_batch(&p, topic, ids.clone());
        if txn % 2 == 0 {
            p.commit_transaction(CALL).expect("commit_transaction");
            for (id, result) in ids.zip(wait_all(futures)) {
                let meta = result
                    .unwrap_or_else(|e| panic!("record {id} of a committed transaction: {e}"));
                acked_at.push((id, meta.partition, meta.offset));
                committed.push(id);
            }
        } else {
            // A third of the records are acknowledged before the abort, the rest may fail
            // unsent: both stay out of the read_committed view.
            let mut futures = futures.into_iter();
            let mut results: Vec<_> = futures
                .by_ref()
                .take(20)
                .map(|f| f.wait_timeout(CALL).expect("resolved"))
                .collect();
            assert!(
                results.iter().all(Result::is_ok),
                "acknowledged before the abort"
            );
            p.abort_transaction(CALL).expect("abort_transaction");
            results.extend(wait_all(futures.collect()));
            for (id, result) in ids.zip(results) {
                match result {
                    Ok(meta) => {
                        acked_at.push((id, meta.partition, meta.offset));
                        aborted_acked.push(id);
                    }
                    Err(ProduceError::TransactionAborted) => {}
                    Err(e) => panic!("record {id} of an aborted transaction: {e}"),
                }
            }
        }
    }
    assert!(
        aborted_acked.len() >= 60,
        "the aborted records were written"
    );
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(committed.iter().copied())
    );

    // read_uncommitted sees every written record, in send order, with an offset left between
    // transactions for each marker.
    let mut written: Vec<u64> = committed.iter().chain(&aborted_acked).copied().collect();
    written.sort_unstable();
    let records = read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        Isolation::ReadUncommitted,
        READ,
    );
    assert_eq!(payload_ids(&records), by_partition(written));
    check_acked_offsets(&records, &acked_at);
    for (partition, records) in records.iter().enumerate() {
        check_markers(records);
        // The last transaction's marker ends the log.
        let end = cluster.with_cluster(|c| c.high_watermark(topic, partition as i32));
        assert_eq!(end, Some(records.last().expect("records").offset + 2));
    }
}

/// The transaction a record of the visibility test belongs to.
fn txn_of(record: &ReadRecord) -> i64 {
    let payload = record.payload.as_deref().expect("payload");
    (u64::from_be_bytes(payload[..8].try_into().unwrap()) / 60) as i64
}

/// Between the records of two consecutive transactions on a partition there is one offset,
/// the first one's marker; within a transaction none.
fn check_markers(records: &[ReadRecord]) {
    for pair in records.windows(2) {
        let (a, b) = (txn_of(&pair[0]), txn_of(&pair[1]));
        assert_eq!(
            pair[1].offset - pair[0].offset - 1,
            b - a,
            "partition {}: offsets {} (transaction {a}) and {} (transaction {b})",
            pair[0].partition,
            pair[0].offset,
            pair[1].offset
        );
    }
}

#[test]
fn offsets_sent_in_a_transaction_are_the_groups_committed_offsets_only_after_it_commits() {
    let (input, output) = ("txn-offsets-in", "txn-offsets-out");
    let cluster = start_cluster(&[input, output]);
    let p = producer(&cluster, "offsets", &[]);
    p.init_transactions(CALL).expect("init_transactions");
    let group = GroupMetadata::new("copier");
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

    p.begin_transaction().unwrap();
    let sent = send_batch(&p, output, 0..12);
    p.send_offsets_to_transaction(offsets(10, 20), &group, CALL)
        .expect("send_offsets_to_transaction");
    p.commit_transaction(CALL).expect("commit");
    assert!(wait_all(sent).iter().all(Result::is_ok));
    assert_eq!(
        common::committed_offsets(&cluster.bootstrap_servers(), "copier", input, 2),
        vec![Offset::Offset(10), Offset::Offset(20)]
    );

    p.begin_transaction().unwrap();
    let sent = send_batch(&p, output, 12..24);
    p.send_offsets_to_transaction(offsets(30, 40), &group, CALL)
        .expect("send_offsets_to_transaction");
    p.abort_transaction(CALL).expect("abort");
    wait_all(sent);
    assert_eq!(
        common::committed_offsets(&cluster.bootstrap_servers(), "copier", input, 2),
        vec![Offset::Offset(10), Offset::Offset(20)],
        "an aborted transaction's offsets are not committed"
    );
    assert_eq!(
        read_ids(&cluster, output, Isolation::ReadCommitted),
        by_partition(0..12)
    );
}

#[test]
fn a_second_producer_with_the_same_transactional_id_fences_the_first() {
    let topic = "txn-fencing";
    let cluster = start_cluster(&[topic]);
    let first = producer(&cluster, "fenced", &[]);
    first.init_transactions(CALL).unwrap();
    first.begin_transaction().unwrap();
    for result in wait_all(send_batch(&first, topic, 0..12)) {
        result.expect("written before the fence");
    }

    let second = producer(&cluster, "fenced", &[]);
    second
        .init_transactions(CALL)
        .expect("the second producer takes over (the first's transaction is aborted)");

    // The first producer's next records and its commit fail with the fenced error.
    let late = wait_all(send_batch(&first, topic, 12..24));
    for (id, result) in (12..24).zip(&late) {
        assert!(
            result.is_err(),
            "record {id} sent by the fenced producer was acknowledged"
        );
    }
    let commit = first.commit_transaction(CALL);
    assert!(
        matches!(commit, Err(TransactionError::Fenced(_))),
        "commit of a fenced producer: {commit:?}"
    );
    let after = send(&first, topic, 0, 99)
        .wait_timeout(CALL)
        .expect("resolved");
    assert!(
        matches!(
            after,
            Err(ProduceError::Transaction(TransactionError::Fenced(_)))
                | Err(ProduceError::Fatal(_))
        ),
        "a send after the fence: {after:?}"
    );

    second.begin_transaction().unwrap();
    let sent = send_batch(&second, topic, 100..112);
    second
        .commit_transaction(CALL)
        .expect("commit of the new producer");
    assert!(wait_all(sent).iter().all(Result::is_ok));
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(100..112),
        "nothing the first producer wrote is visible"
    );
}

#[test]
fn a_coordinator_move_and_coordinator_errors_mid_commit_end_in_exactly_one_outcome() {
    let topic = "txn-coordinator-faults";
    let cluster = start_cluster(&[topic]);
    let p = producer(&cluster, "moving", &[("request.timeout.ms", "1500")]);
    p.init_transactions(CALL).unwrap();
    let faults = cluster.faults();
    let mut committed = Vec::new();
    for txn in 0..6u64 {
        p.begin_transaction().unwrap();
        let ids = txn * 40..txn * 40 + 40;
        let futures = send_batch(&p, topic, ids.clone());
        let mut coordinator = cluster.with_cluster(|c| c.transaction_coordinator("moving"));
        if txn >= 1 {
            // The coordinator moves before the commit: the old one answers NOT_COORDINATOR.
            coordinator = 1 + coordinator % BROKERS;
            cluster.with_cluster(|c| c.move_transaction_coordinator("moving", coordinator));
        }
        match txn {
            0 => faults.inject_error(ANY_BROKER, ApiKey::EndTxn, COORDINATOR_NOT_AVAILABLE, 2),
            1 => faults.inject_error(ANY_BROKER, ApiKey::EndTxn, NOT_COORDINATOR, 1),
            2 => faults.inject_error(ANY_BROKER, ApiKey::EndTxn, CONCURRENT_TRANSACTIONS, 3),
            // The commit is done, its answer lost: the retry must not be a second outcome.
            3 => faults.drop_response_after_append(coordinator, ApiKey::EndTxn, 1),
            4 => faults.reset_connection(coordinator, ApiKey::EndTxn, 1, false),
            _ => {}
        }
        p.commit_transaction(CALL)
            .unwrap_or_else(|e| panic!("commit of transaction {txn}: {e}"));
        for (id, result) in ids.zip(wait_all(futures)) {
            result.unwrap_or_else(|e| panic!("record {id}: {e}"));
            committed.push(id);
        }
        assert_eq!(
            faults.pending(),
            0,
            "transaction {txn}: every fault was hit"
        );
    }
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(committed)
    );
    let state = cluster.with_cluster(|c| c.transaction_metadata("moving").map(|m| m.state));
    assert_eq!(
        state,
        Some(kacrab::testkit::broker::TransactionState::CompleteCommit)
    );
}

#[test]
fn a_commit_that_timed_out_goes_on_and_the_same_call_again_takes_its_result() {
    let topic = "txn-timeout";
    let cluster = start_cluster(&[topic]);
    let p = producer(&cluster, "slow", &[]);
    p.init_transactions(CALL).unwrap();
    p.begin_transaction().unwrap();
    let futures = send_batch(&p, topic, 0..12);
    let coordinator = cluster.with_cluster(|c| c.transaction_coordinator("slow"));
    cluster
        .faults()
        .delay_response(coordinator, ApiKey::EndTxn, 1, Duration::from_secs(2));
    let first = p.commit_transaction(Duration::from_millis(200));
    assert!(
        matches!(
            first,
            Err(TransactionError::Timeout {
                operation: "commit_transaction",
                ..
            })
        ),
        "{first:?}"
    );
    let other = p.begin_transaction();
    assert!(
        matches!(other, Err(TransactionError::PendingOperation { .. })),
        "another call while the commit is pending: {other:?}"
    );
    p.commit_transaction(CALL)
        .expect("the same call again takes the commit's result");
    assert!(wait_all(futures).iter().all(Result::is_ok));
    // The next transaction goes through as usual.
    p.begin_transaction().unwrap();
    let futures = send_batch(&p, topic, 12..24);
    p.commit_transaction(CALL).unwrap();
    assert!(wait_all(futures).iter().all(Result::is_ok));
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(0..24)
    );
}

#[test]
fn calls_in_a_wrong_state_are_typed_errors_and_change_nothing() {
    let topic = "txn-states";
    let cluster = start_cluster(&[topic]);
    let p = producer(&cluster, "states", &[]);
    let early = send(&p, topic, 0, 0).wait_timeout(CALL).expect("resolved");
    assert!(
        matches!(
            early,
            Err(ProduceError::Transaction(TransactionError::InvalidState {
                operation: "send",
                ..
            }))
        ),
        "send before init_transactions: {early:?}"
    );
    assert!(matches!(
        p.begin_transaction(),
        Err(TransactionError::InvalidState { .. })
    ));
    p.init_transactions(CALL).unwrap();
    assert!(matches!(
        p.commit_transaction(CALL),
        Err(TransactionError::InvalidState { .. })
    ));
    p.begin_transaction().unwrap();
    assert!(matches!(
        p.begin_transaction(),
        Err(TransactionError::InvalidState { .. })
    ));
    let sent = send_batch(&p, topic, 0..6);
    p.commit_transaction(CALL).unwrap();
    assert!(wait_all(sent).iter().all(Result::is_ok));

    let plain = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .build()
        .unwrap();
    assert_eq!(
        plain.begin_transaction(),
        Err(TransactionError::NotTransactional)
    );
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(0..6)
    );
}

#[test]
fn a_send_racing_commit_is_either_in_the_committed_transaction_or_refused_and_the_producer_stays_usable(
) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let topic = "txn-send-racing-commit";
    let cluster = start_cluster(&[topic]);
    // A record stranded outside every transaction would stall the next commit for
    // delivery.timeout.ms and then fail it: keep that short so the test fails fast.
    let p = producer(
        &cluster,
        "racing",
        &[
            ("request.timeout.ms", "2000"),
            ("delivery.timeout.ms", "4000"),
        ],
    );
    p.init_transactions(CALL).unwrap();
    const COMMITS: usize = 30;
    // An upper bound on the ids, far above what the commits take.
    const RECORDS: u64 = 1_000_000;
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (p, sent, stop) = (p.clone(), sent.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut futures: Vec<(u64, DeliveryFuture)> = Vec::new();
            for id in 0..RECORDS {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                futures.push((id, send(&p, topic, (id % PARTITIONS as u64) as i32, id)));
                sent.store(id + 1, Ordering::Release);
            }
            futures
        })
    };
    for commit in 0..COMMITS {
        p.begin_transaction().expect("begin_transaction");
        // Let the sender get some records into this transaction, then commit while it keeps
        // sending.
        let target = sent.load(Ordering::Acquire) + 50;
        while sent.load(Ordering::Acquire) < target {
            std::thread::yield_now();
        }
        p.commit_transaction(CALL)
            .unwrap_or_else(|e| panic!("commit {commit} racing the sender: {e}"));
    }
    stop.store(true, Ordering::Release);
    let futures = sender.join().expect("sender thread");
    let (mut acked, mut refused) = (Vec::new(), 0);
    for (id, future) in futures {
        match future.wait_timeout(CALL).expect("every send resolves") {
            Ok(_) => acked.push(id),
            // Refused by the transaction manager (no transaction, or its commit began):
            // never written.
            Err(ProduceError::Transaction(
                TransactionError::InvalidState {
                    operation: "send", ..
                }
                | TransactionError::PendingOperation {
                    operation: "send", ..
                },
            )) => refused += 1,
            Err(e) => panic!("record {id}: neither acknowledged nor refused: {e}"),
        }
    }
    assert!(!acked.is_empty(), "records were written");
    // The producer is usable: the next transaction commits.
    p.begin_transaction().expect("begin after the race");
    let last = send_batch(&p, topic, RECORDS..RECORDS + 12);
    p.commit_transaction(CALL).expect("commit after the race");
    for result in wait_all(last) {
        result.expect("record of the last transaction");
    }
    acked.extend(RECORDS..RECORDS + 12);
    eprintln!(
        "{COMMITS} commits, {} acknowledged, {refused} refused",
        acked.len()
    );
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(acked),
        "exactly the acknowledged records are committed, once each"
    );
}

#[test]
fn a_send_right_after_send_offsets_to_transaction_returns_is_not_refused() {
    let (input, output) = ("txn-offsets-then-send-in", "txn-offsets-then-send-out");
    let cluster = start_cluster(&[input, output]);
    let p = producer(&cluster, "offsets-then-send", &[]);
    p.init_transactions(CALL).unwrap();
    let group = GroupMetadata::new("offsets-then-send");
    let mut committed = Vec::new();
    for round in 0..40u64 {
        p.begin_transaction().unwrap();
        // Half the rounds with an empty map (the call completes on the spot), half with one
        // offset (AddOffsetsToTxn and TxnOffsetCommit first).
        let offsets: Vec<(TopicPartition, OffsetAndMetadata)> = if round % 2 == 0 {
            Vec::new()
        } else {
            vec![(
                TopicPartition {
                    topic: input.into(),
                    partition: 0,
                },
                OffsetAndMetadata::new(round as i64),
            )]
        };
        p.send_offsets_to_transaction(offsets, &group, CALL)
            .expect("send_offsets_to_transaction");
        let result = send(&p, output, (round % PARTITIONS as u64) as i32, round)
            .wait_timeout(CALL)
            .expect("resolved");
        result.unwrap_or_else(|e| panic!("round {round}: a send right after send_offsets: {e}"));
        p.commit_transaction(CALL).expect("commit");
        committed.push(round);
    }
    assert_eq!(
        read_ids(&cluster, output, Isolation::ReadCommitted),
        by_partition(committed)
    );
}

#[test]
fn close_aborts_an_open_transaction_and_its_records_stay_invisible() {
    let topic = "txn-close-open";
    let cluster = start_cluster(&[topic]);
    let p = producer(&cluster, "closing", &[]);
    p.init_transactions(CALL).unwrap();
    p.begin_transaction().unwrap();
    let committed = send_batch(&p, topic, 0..12);
    p.commit_transaction(CALL).unwrap();
    assert!(wait_all(committed).iter().all(Result::is_ok));
    p.begin_transaction().unwrap();
    let open = send_batch(&p, topic, 12..24);
    // Half acknowledged (written in the open transaction), the rest maybe not sent yet.
    for result in wait_all(open.into_iter().take(6).collect()) {
        result.expect("written in the open transaction");
    }
    p.close(CALL);
    let state = cluster.with_cluster(|c| c.transaction_metadata("closing").map(|m| m.state));
    assert_eq!(
        state,
        Some(kacrab::testkit::broker::TransactionState::CompleteAbort),
        "close ended the open transaction with an abort"
    );
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(0..12),
        "nothing of the open transaction is visible"
    );
    let uncommitted = read_ids(&cluster, topic, Isolation::ReadUncommitted);
    assert!(
        uncommitted.iter().flatten().any(|&id| id >= 12),
        "the aborted records were written (the abort, not a lost send, hides them)"
    );
}

// Java's `KafkaProducer.doSend` hands every `ApiException` that `send` fails a record with
// (RecordTooLargeException, a metadata TimeoutException, BufferExhaustedException) to
// `TransactionManager.maybeTransitionToErrorState`: the transaction becomes abortable, and
// `commitTransaction` fails. Here those records resolve their future with the error, which an
// application may never look at; so the transaction must not commit without them either.
#[test]
fn a_record_that_send_refuses_inside_a_transaction_makes_the_commit_fail() {
    let topic = "txn-send-refused";
    let cluster = start_cluster(&[topic]);
    let p = producer(&cluster, "send-refused", &[]);
    p.init_transactions(CALL).unwrap();
    // Refused before any partition is chosen (`max.request.size`), and with a partition the
    // topic does not have.
    type IsItsError = fn(&ProduceError) -> bool;
    let refusals: [(ProducerRecord, IsItsError); 2] = [
        (
            ProducerRecord::new(topic, Bytes::from(vec![b'x'; 2 * 1024 * 1024])),
            |e| matches!(e, ProduceError::RecordTooLarge { .. }),
        ),
        (
            ProducerRecord::new(topic, Bytes::from_static(b"nowhere")).with_partition(PARTITIONS),
            |e| matches!(e, ProduceError::InvalidPartition { .. }),
        ),
    ];
    let mut id = 0;
    for (refused, is_its_error) in refusals {
        p.begin_transaction().unwrap();
        let before = send_batch(&p, topic, id..id + 6);
        let err = p.send(refused).wait().expect_err("refused by send");
        assert!(is_its_error(&err), "{err:?}");
        let after = send_batch(&p, topic, id + 6..id + 12);
        let commit = p.commit_transaction(CALL);
        assert!(
            matches!(commit, Err(TransactionError::Abortable(_))),
            "the transaction must not commit without the refused record: {commit:?}"
        );
        p.abort_transaction(CALL)
            .expect("an abortable transaction aborts");
        // Each either failed or was written and is hidden by the abort (read back below).
        wait_all(before);
        wait_all(after);
        id += 12;
    }
    // The producer goes on: the next transaction commits.
    p.begin_transaction().unwrap();
    let committed = send_batch(&p, topic, id..id + 6);
    p.commit_transaction(CALL).unwrap();
    assert!(wait_all(committed).iter().all(Result::is_ok));
    p.close(CALL);
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(id..id + 6),
        "only the last transaction is visible"
    );
}

// The same for `send_async`, which waits for metadata and room without blocking its thread
// and gives up at `max.block.ms` with its own error: a record it gave up on inside a
// transaction makes the commit fail too.
#[test]
fn a_record_send_async_gives_up_on_inside_a_transaction_makes_the_commit_fail() {
    let topic = "txn-send-async-gave-up";
    let cluster = start_cluster(&[topic]);
    let p = producer(&cluster, "send-async-gave-up", &[("max.block.ms", "200")]);
    p.init_transactions(CALL).unwrap();
    p.begin_transaction().unwrap();
    let sent = send_batch(&p, topic, 0..6);
    // A topic the cluster does not have: its metadata never comes.
    let gave_up = futures_lite::future::block_on(p.send_async(ProducerRecord::new(
        "txn-no-such-topic",
        Bytes::from_static(b"x"),
    )))
    .wait();
    assert!(
        matches!(gave_up, Err(ProduceError::MetadataTimeout { .. })),
        "{gave_up:?}"
    );
    let commit = p.commit_transaction(CALL);
    assert!(
        matches!(commit, Err(TransactionError::Abortable(_))),
        "the transaction must not commit without the record send_async gave up on: {commit:?}"
    );
    p.abort_transaction(CALL)
        .expect("an abortable transaction aborts");
    // Acknowledged while send_async waited: written, and hidden by the abort.
    wait_all(sent);
    p.close(CALL);
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(0..0),
        "nothing of the aborted transaction is visible"
    );
}

// Java's `Sender.run`, at close, keeps aborting while `hasOngoingTransaction()`, which holds
// in ABORTABLE_ERROR too: a commit under way when `close` is called that then fails
// abortably is followed by an abort, so the transaction does not stay open at its coordinator
// (holding its partitions' last stable offset until `transaction.timeout.ms`).
#[test]
fn close_aborts_the_transaction_when_the_commit_under_way_fails_abortably() {
    let topic = "txn-close-commit-fails";
    let cluster = start_cluster(&[topic]);
    let p = producer(&cluster, "close-commit-fails", &[]);
    p.init_transactions(CALL).unwrap();
    p.begin_transaction().unwrap();
    let futures = send_batch(&p, topic, 0..12);
    const TRANSACTION_ABORTABLE: i16 = 120;
    cluster
        .faults()
        .inject_error(ANY_BROKER, ApiKey::EndTxn, TRANSACTION_ABORTABLE, 1);
    // The commit goes on after its call returns; `close` finds it under way.
    let started = p.commit_transaction(Duration::ZERO);
    assert!(
        matches!(started, Err(TransactionError::Timeout { .. })),
        "{started:?}"
    );
    p.close(CALL);
    let state = cluster.with_cluster(|c| {
        c.transaction_metadata("close-commit-fails")
            .map(|m| m.state)
    });
    assert_eq!(
        state,
        Some(kacrab::testkit::broker::TransactionState::CompleteAbort),
        "close aborted the transaction its failed commit left open"
    );
    // The commit flushed them before its EndTxn failed: written, in the aborted transaction.
    assert!(wait_all(futures).iter().all(Result::is_ok));
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(0..0),
        "nothing of the aborted transaction is visible"
    );
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadUncommitted),
        by_partition(0..12)
    );
}

/// InitProducerId refused for authorization (docs/java-rules.md §5.2, §0 step 3):
/// `init_transactions` fails with the error and the producer is uninitialized again, refusing
/// transactions and records, until `init_transactions`, called again, succeeds.
#[test]
fn init_transactions_refused_for_authorization_can_be_called_again() {
    const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
    let topic = "txn-init-unauthorized";
    let cluster = start_cluster(&[topic]);
    let p = producer(&cluster, "unauthorized", &[]);
    cluster.faults().inject_error(
        ANY_BROKER,
        ApiKey::InitProducerId,
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        1,
    );
    let first = p.init_transactions(CALL);
    assert!(
        matches!(&first, Err(TransactionError::Abortable(m)) if m.to_string().contains("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")),
        "{first:?}"
    );
    assert_eq!(cluster.faults().pending(), 0, "the fault was hit");
    assert!(matches!(
        p.begin_transaction(),
        Err(TransactionError::InvalidState {
            state: "UNINITIALIZED",
            ..
        })
    ));
    let early = send(&p, topic, 0, 0).wait_timeout(CALL).expect("resolved");
    assert!(
        matches!(
            early,
            Err(ProduceError::Transaction(TransactionError::InvalidState {
                operation: "send",
                state: "UNINITIALIZED",
            }))
        ),
        "send after the refused init_transactions: {early:?}"
    );
    p.init_transactions(CALL)
        .expect("init_transactions called again");
    p.begin_transaction().unwrap();
    let sent = send_batch(&p, topic, 0..6);
    p.commit_transaction(CALL).unwrap();
    assert!(wait_all(sent).iter().all(Result::is_ok));
    assert_eq!(
        read_ids(&cluster, topic, Isolation::ReadCommitted),
        by_partition(0..6)
    );
}
