//! Cross-check of the reference broker (the judge of kacrab's exactly-once tests) against an
//! independent, battle-tested client: librdkafka 2.12.1's idempotent producer writes while the
//! fault plan drops answers after appending, resets connections (also mid-frame), delays an
//! answer past the client's timeout, injects retriable errors, moves leaders and takes a
//! broker down and up. librdkafka's retries reuse each batch's (producer id, epoch,
//! sequence), so a correct broker de-duplicates them: every acked record must be in the log
//! exactly once, in order per partition. A duplicate here points at the broker first.
//!
//! The faults stay within what librdkafka's idempotent producer handles correctly: no message
//! timeouts (which make it bump the epoch, where its issue #4953 re-sends batches of other
//! partitions under the new epoch) and no errors it treats as fatal (OUT_OF_ORDER_SEQUENCE_NUMBER).
//!
//! The transactional test does the same for the transaction coordinator: librdkafka's
//! transactional producer commits and aborts transactions (with offsets sent to the
//! transaction) through dropped answers, resets, injected retriable coordinator errors, a
//! coordinator move and held markers; its read_committed consumer must then read exactly the
//! committed records, once and in order, and the group's committed offsets must be those of the
//! last committed transaction.
#![cfg(feature = "testkit")]

mod common;

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kacrab::testkit::broker::error_codes::{
    CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR, NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
};
use kacrab::testkit::broker::{BrokerRules, TransactionState};
use kacrab::testkit::server::{ReferenceCluster, ANY_BROKER};
use kafka_protocol::messages::ApiKey;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};

use common::{
    check_acked_offsets, check_exactly_once, idempotent_producer, payload_ids, read_back, send_id,
    Deliveries, IdProducer, Isolation,
};

const TOPIC: &str = "crosscheck";
const PARTITIONS: i32 = 6;
const WAIT: Duration = Duration::from_secs(30);

/// Sends ids in order, round-robin over the partitions, keeping at most `window` unacked.
struct Traffic<'a> {
    producer: &'a IdProducer,
    deliveries: &'a Deliveries,
    next_id: u64,
}

impl Traffic<'_> {
    fn send(&mut self, count: u64) {
        for _ in 0..count {
            let id = self.next_id;
            send_id(
                self.producer,
                TOPIC,
                (id % PARTITIONS as u64) as i32,
                id,
                24,
            );
            self.next_id += 1;
        }
    }

    /// Keeps traffic flowing in chunks (each chunk waits for the previous ones to be mostly
    /// acked) until `done` holds, so faults that wait for requests meet some.
    fn pump_until(&mut self, what: &str, done: impl Fn() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            self.send(300);
            let target = self.next_id as usize - 600;
            self.deliveries
                .wait_until(what, WAIT, |s| s.acked.len() >= target);
        }
        panic!("{what}: traffic never met the fault");
    }

    fn wait_all_acked(&self, what: &str) {
        let sent = self.next_id as usize;
        self.deliveries
            .wait_until(what, WAIT, |s| s.acked.len() + s.failed.len() >= sent);
        let failed = self.deliveries.snapshot().failed;
        assert!(
            failed.is_empty(),
            "{what}: failed deliveries {:?}",
            &failed[..failed.len().min(3)]
        );
    }
}

#[test]
fn librdkafka_idempotent_producer_comes_out_exactly_once_under_faults() {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(TOPIC, &[1, 2, 3, 1, 2, 3]);
    let (producer, deliveries) = idempotent_producer(
        &cluster.bootstrap_servers(),
        &[
            ("linger.ms", "2"),
            ("batch.size", "16384"),
            // The client's own request timeout (librdkafka caps produce timeouts with it): a
            // delayed answer beyond it makes the client give up on the request and retry.
            ("socket.timeout.ms", "1000"),
            ("retry.backoff.ms", "10"),
            ("retry.backoff.max.ms", "100"),
            ("reconnect.backoff.ms", "10"),
            ("reconnect.backoff.max.ms", "100"),
            ("message.timeout.ms", "120000"),
        ],
    );
    let mut traffic = Traffic {
        producer: &producer,
        deliveries: &deliveries,
        next_id: 0,
    };
    let faults = cluster.faults();
    let consumed = || faults.pending() == 0;

    traffic.send(2_000);
    traffic.wait_all_acked("warm-up");

    faults.drop_response_after_append(ANY_BROKER, ApiKey::Produce, 3);
    traffic.pump_until("answers dropped after append", consumed);
    traffic.wait_all_acked("after dropped answers");

    faults.reset_connection(ANY_BROKER, ApiKey::Produce, 2, false);
    traffic.pump_until("connection resets", consumed);
    faults.reset_connection(ANY_BROKER, ApiKey::Produce, 2, true);
    traffic.pump_until("mid-frame resets", consumed);
    traffic.wait_all_acked("after resets");

    faults.inject_error(ANY_BROKER, ApiKey::Produce, NOT_LEADER_OR_FOLLOWER, 3);
    faults.inject_error(ANY_BROKER, ApiKey::Produce, REQUEST_TIMED_OUT, 3);
    faults.inject_error(ANY_BROKER, ApiKey::Produce, NOT_ENOUGH_REPLICAS, 2);
    traffic.pump_until("injected retriable errors", consumed);
    traffic.wait_all_acked("after injected errors");

    faults.delay_response(1, ApiKey::Produce, 1, Duration::from_millis(2_500));
    traffic.pump_until("a delayed answer", consumed);
    traffic.wait_all_acked("after the delayed answer");

    // Leaders move while records are in flight.
    traffic.send(3_000);
    cluster.set_leader(TOPIC, 0, 2);
    cluster.set_leader(TOPIC, 4, 3);
    traffic.send(3_000);
    traffic.wait_all_acked("after leader moves");

    // An answer held past the client's timeout on broker 3 while its partitions move to
    // broker 1: the client's retry of the appended batch reaches the new leader, which holds
    // the same producer state (the model's state moves with leadership, as replicas build it
    // by replication) and answers it as a duplicate.
    let duplicates_before = cluster.with_cluster(|c| c.duplicates_answered());
    faults.delay_response(3, ApiKey::Produce, 1, Duration::from_millis(2_500));
    traffic.send(3_000);
    assert!(
        faults.wait_until_consumed(WAIT),
        "no produce request reached broker 3"
    );
    for partition in [2, 4, 5] {
        cluster.set_leader(TOPIC, partition, 1);
    }
    traffic.wait_all_acked("after moving broker 3's partitions away");
    let duplicates_after = cluster.with_cluster(|c| c.duplicates_answered());
    assert!(
        duplicates_after > duplicates_before,
        "the retry reached the new leader as a duplicate"
    );

    // Broker 2 (leader of partitions 0 and 1 now) goes down with requests in flight; the
    // other partitions carry on; then it comes back on the same port.
    traffic.send(3_000);
    cluster.broker_down(2);
    let led_by_2: HashSet<i32> = cluster.with_cluster(|c| {
        (0..PARTITIONS)
            .filter(|&p| c.leader(TOPIC, p).unwrap().0 == 2)
            .collect()
    });
    assert_eq!(led_by_2, HashSet::from([0, 1]));
    traffic.send(3_000);
    let others = (0..traffic.next_id)
        .filter(|id| !led_by_2.contains(&((id % PARTITIONS as u64) as i32)))
        .count();
    deliveries.wait_until("partitions on live brokers", WAIT, |s| {
        s.acked
            .iter()
            .filter(|id| !led_by_2.contains(&((**id % PARTITIONS as u64) as i32)))
            .count()
            >= others
    });
    cluster.broker_up(2);
    traffic.wait_all_acked("after broker 2 came back");

    traffic.send(2_000);
    producer.flush(WAIT).expect("flush");
    traffic.wait_all_acked("the last records");

    let delivered = deliveries.snapshot();
    let acked = delivered.acked;
    let sent: Vec<u64> = (0..traffic.next_id).collect();
    assert_eq!(acked.len(), sent.len());
    let records = read_back(
        &cluster.bootstrap_servers(),
        TOPIC,
        PARTITIONS,
        Isolation::ReadUncommitted,
        WAIT,
    );
    let ids = payload_ids(&records);
    println!("{}", check_exactly_once(&ids, &acked, &sent));
    check_acked_offsets(&records, &delivered.acked_at);

    // The broker side of the same claim: per partition, offsets are contiguous and each batch
    // continues its producer's sequence (or starts a higher epoch at 0).
    let (duplicates, producer_ids) = cluster.with_cluster(|c| {
        for partition in 0..PARTITIONS {
            for pair in c.partition_log(TOPIC, partition).windows(2) {
                let (a, b) = (&pair[0], &pair[1]);
                assert_eq!(a.last_offset + 1, b.base_offset);
                assert!(
                    (a.producer_epoch == b.producer_epoch
                        && a.last_sequence + 1 == b.base_sequence)
                        || (b.producer_epoch > a.producer_epoch && b.base_sequence == 0),
                    "p{partition}: batch {:?} after {:?}",
                    (b.producer_epoch, b.base_sequence),
                    (a.producer_epoch, a.last_sequence)
                );
            }
        }
        (c.duplicates_answered(), c.producer_ids_issued())
    });
    let stats = cluster.stats();
    println!(
        "faults applied {}, produce requests {}, connections {}, duplicate batches answered {duplicates}, producer ids issued {producer_ids}",
        faults.applied(),
        stats.requests(ApiKey::Produce),
        stats.connections_accepted()
    );
    assert_eq!(stats.unsupported_closed(), 0);
    assert!(
        duplicates > 0,
        "the faults made librdkafka retry batches that had landed"
    );
}

const TXN_TOPIC: &str = "crosscheck-txn";
const SOURCE_TOPIC: &str = "crosscheck-source";
const SOURCE_PARTITIONS: i32 = 3;
const TRANSACTIONAL_ID: &str = "crosscheck-txn-producer";
const GROUP: &str = "crosscheck-txn-group";
const RECORDS_PER_TXN: u64 = 60;

/// Calls a librdkafka transaction API again while it reports a retriable error, as its
/// documentation asks of applications; any other error fails the test.
fn retrying(what: &str, mut call: impl FnMut() -> KafkaResult<()>) {
    for _ in 0..20 {
        match call() {
            Ok(()) => return,
            Err(KafkaError::Transaction(e)) if e.is_retriable() => {}
            Err(e) => panic!("{what}: {e}"),
        }
    }
    panic!("{what}: still retriable after 20 attempts");
}

fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The offsets transaction `index` sends to the transaction: distinct per transaction and
/// partition, so the group's committed offsets name the transaction that committed them.
fn source_offsets(index: u64) -> Vec<(i32, i64)> {
    (0..SOURCE_PARTITIONS)
        .map(|p| (p, (index as i64 + 1) * 1000 + i64::from(p)))
        .collect()
}

/// What one transaction meets and how it ends.
struct Step {
    faults: &'static [(ApiKey, Fault)],
    commit: bool,
}

#[derive(Clone, Copy)]
enum Fault {
    Drop(usize),
    Reset { n: usize, mid_frame: bool },
    Inject(i16),
}

const STEPS: &[Step] = &[
    Step {
        faults: &[],
        commit: true,
    },
    Step {
        faults: &[(ApiKey::Produce, Fault::Drop(2))],
        commit: true,
    },
    Step {
        faults: &[
            (
                ApiKey::Produce,
                Fault::Reset {
                    n: 1,
                    mid_frame: false,
                },
            ),
            (
                ApiKey::Produce,
                Fault::Reset {
                    n: 1,
                    mid_frame: true,
                },
            ),
        ],
        commit: false,
    },
    Step {
        faults: &[
            (
                ApiKey::AddPartitionsToTxn,
                Fault::Inject(COORDINATOR_LOAD_IN_PROGRESS),
            ),
            (
                ApiKey::AddPartitionsToTxn,
                Fault::Inject(CONCURRENT_TRANSACTIONS),
            ),
        ],
        commit: true,
    },
    // The commit is written, its answer lost: the retried EndTxn finds CompleteCommit → NONE.
    Step {
        faults: &[(ApiKey::EndTxn, Fault::Drop(1))],
        commit: true,
    },
    Step {
        faults: &[
            (
                ApiKey::AddOffsetsToTxn,
                Fault::Inject(COORDINATOR_NOT_AVAILABLE),
            ),
            (ApiKey::EndTxn, Fault::Inject(NOT_COORDINATOR)),
        ],
        commit: false,
    },
    Step {
        faults: &[
            (
                ApiKey::TxnOffsetCommit,
                Fault::Inject(COORDINATOR_LOAD_IN_PROGRESS),
            ),
            (ApiKey::AddPartitionsToTxn, Fault::Drop(1)),
        ],
        commit: true,
    },
    // The abort is written, its answer lost: the retry finds CompleteAbort → NONE.
    Step {
        faults: &[(ApiKey::EndTxn, Fault::Drop(1))],
        commit: false,
    },
    Step {
        faults: &[(ApiKey::TxnOffsetCommit, Fault::Drop(1))],
        commit: true,
    },
    Step {
        faults: &[],
        commit: true,
    },
];

/// Index of the transaction before which the coordinator moves to another broker.
const MOVE_BEFORE: usize = 6;
/// Index of the transaction whose markers are held while the next one starts.
const HOLD_AT: usize = 8;

#[test]
fn librdkafka_transactional_producer_commits_exactly_the_committed_records_under_faults() {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(TXN_TOPIC, &[1, 2, 3, 1, 2, 3]);
    cluster.create_topic(SOURCE_TOPIC, &[1, 2, 3]);
    let bootstrap = cluster.bootstrap_servers();
    let (producer, deliveries) = idempotent_producer(
        &bootstrap,
        &[
            ("transactional.id", TRANSACTIONAL_ID),
            ("transaction.timeout.ms", "60000"),
            ("message.timeout.ms", "60000"),
            ("linger.ms", "2"),
            ("retry.backoff.ms", "10"),
            ("retry.backoff.max.ms", "100"),
            ("reconnect.backoff.ms", "10"),
            ("reconnect.backoff.max.ms", "100"),
        ],
    );
    // Only for its group metadata (group id, no generation): it never joins the group.
    let group_consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("create the group consumer");
    let group_metadata = group_consumer.group_metadata().expect("group metadata");
    let faults = cluster.faults();

    retrying("init_transactions", || producer.init_transactions(WAIT));
    let mut next_id = 0u64;
    let mut committed_ids: Vec<u64> = Vec::new();
    let mut aborted_ids: Vec<u64> = Vec::new();
    let mut last_committed_offsets = None;
    let mut held_end_txn_seen = false;
    for (index, step) in STEPS.iter().enumerate() {
        if index == MOVE_BEFORE {
            let moved_to = cluster.with_cluster(|c| {
                let old = c.transaction_coordinator(TRANSACTIONAL_ID);
                let new = c.broker_ids().into_iter().find(|&b| b != old).unwrap();
                c.move_transaction_coordinator(TRANSACTIONAL_ID, new);
                new
            });
            println!("transaction {index}: coordinator moved to broker {moved_to}");
        }
        for &(api, fault) in step.faults {
            match fault {
                Fault::Drop(n) => faults.drop_response_after_append(ANY_BROKER, api, n),
                Fault::Reset { n, mid_frame } => {
                    faults.reset_connection(ANY_BROKER, api, n, mid_frame)
                }
                Fault::Inject(code) => faults.inject_error(ANY_BROKER, api, code, 1),
            }
        }
        let add_partitions_before = cluster.stats().requests(ApiKey::AddPartitionsToTxn);
        producer.begin_transaction().expect("begin_transaction");
        let ids: Vec<u64> = (next_id..next_id + RECORDS_PER_TXN).collect();
        next_id += RECORDS_PER_TXN;
        for &id in &ids {
            send_id(
                &producer,
                TXN_TOPIC,
                (id % PARTITIONS as u64) as i32,
                id,
                24,
            );
        }
        if held_end_txn_seen {
            // The previous transaction's markers are held, so its state is PrepareCommit and
            // this transaction's AddPartitionsToTxn gets CONCURRENT_TRANSACTIONS, which
            // librdkafka retries. Two more requests prove a retry; then the markers land.
            assert!(
                cluster.stats().wait_for_requests(
                    ApiKey::AddPartitionsToTxn,
                    add_partitions_before + 2,
                    WAIT
                ),
                "timed out waiting for AddPartitionsToTxn retried during PrepareCommit"
            );
            let state = cluster.with_cluster(|c| {
                let state = c.transaction_metadata(TRANSACTIONAL_ID).unwrap().state;
                c.hold_transaction_markers(false);
                assert_eq!(c.release_transaction_markers(wall_clock_ms()), 1);
                state
            });
            assert_eq!(state, TransactionState::PrepareCommit);
            held_end_txn_seen = false;
        }
        let mut offsets = TopicPartitionList::new();
        let sent_offsets = source_offsets(index as u64);
        for &(partition, offset) in &sent_offsets {
            offsets
                .add_partition_offset(SOURCE_TOPIC, partition, Offset::Offset(offset))
                .unwrap();
        }
        retrying("send_offsets_to_transaction", || {
            producer.send_offsets_to_transaction(&offsets, &group_metadata, WAIT)
        });
        // Every record is acked before the transaction ends, so aborted records are in the log
        // too (read_uncommitted must see them).
        producer.flush(WAIT).expect("flush");
        if index == HOLD_AT {
            cluster.with_cluster(|c| c.hold_transaction_markers(true));
            held_end_txn_seen = true;
        }
        if step.commit {
            retrying("commit_transaction", || producer.commit_transaction(WAIT));
            committed_ids.extend(&ids);
            last_committed_offsets = Some(sent_offsets);
        } else {
            retrying("abort_transaction", || producer.abort_transaction(WAIT));
            aborted_ids.extend(&ids);
        }
        assert_eq!(
            faults.pending(),
            0,
            "transaction {index} met every fault it was given"
        );
    }
    assert!(!held_end_txn_seen, "the held markers were released");
    let delivered = deliveries.snapshot();
    let failed = delivered.failed;
    assert!(
        failed.is_empty(),
        "failed deliveries {:?}",
        &failed[..failed.len().min(3)]
    );

    // The independent reader: librdkafka's consumer filters aborted records with the broker's
    // aborted-transaction lists and stops at the last stable offset.
    let committed = read_back(
        &bootstrap,
        TXN_TOPIC,
        PARTITIONS,
        Isolation::ReadCommitted,
        WAIT,
    );
    let committed_read = payload_ids(&committed);
    println!(
        "read_committed: {}",
        check_exactly_once(&committed_read, &committed_ids, &committed_ids)
    );
    let all_ids: Vec<u64> = (0..next_id).collect();
    let uncommitted = read_back(
        &bootstrap,
        TXN_TOPIC,
        PARTITIONS,
        Isolation::ReadUncommitted,
        WAIT,
    );
    let uncommitted_read = payload_ids(&uncommitted);
    println!(
        "read_uncommitted: {}",
        check_exactly_once(&uncommitted_read, &all_ids, &all_ids)
    );
    check_acked_offsets(&uncommitted, &delivered.acked_at);
    assert!(!aborted_ids.is_empty());

    let mut wanted = TopicPartitionList::new();
    for partition in 0..SOURCE_PARTITIONS {
        wanted.add_partition(SOURCE_TOPIC, partition);
    }
    let fetched = group_consumer
        .committed_offsets(wanted, WAIT)
        .expect("committed offsets");
    let fetched: Vec<(i32, i64)> = fetched
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => (e.partition(), o),
            other => panic!("partition {}: {other:?}", e.partition()),
        })
        .collect();
    assert_eq!(Some(fetched), last_committed_offsets);

    let (rejected, aborted_entries, state) = cluster.with_cluster(|c| {
        let aborted: usize = (0..PARTITIONS)
            .map(|p| c.aborted_transactions(TXN_TOPIC, p).len())
            .sum();
        (
            c.markers_rejected(),
            aborted,
            c.transaction_metadata(TRANSACTIONAL_ID).unwrap().state,
        )
    });
    assert_eq!(rejected, 0, "no marker was refused");
    let aborts = STEPS.iter().filter(|s| !s.commit).count();
    assert_eq!(
        aborted_entries,
        aborts * PARTITIONS as usize,
        "one index entry per aborted transaction and partition"
    );
    assert_eq!(state, TransactionState::CompleteCommit);
    let stats = cluster.stats();
    println!(
        "faults applied {}, EndTxn requests {}, AddPartitionsToTxn requests {}, TxnOffsetCommit requests {}",
        faults.applied(),
        stats.requests(ApiKey::EndTxn),
        stats.requests(ApiKey::AddPartitionsToTxn),
        stats.requests(ApiKey::TxnOffsetCommit),
    );
    assert_eq!(stats.unsupported_closed(), 0);
}

/// A transactional librdkafka producer for `transactional_id`, initialised.
fn initialised_txn_producer(
    bootstrap: &str,
    transactional_id: &str,
    timeout_ms: &str,
) -> (IdProducer, std::sync::Arc<common::Deliveries>) {
    let (producer, deliveries) = idempotent_producer(
        bootstrap,
        &[
            ("transactional.id", transactional_id),
            ("transaction.timeout.ms", timeout_ms),
            ("message.timeout.ms", timeout_ms),
            ("linger.ms", "2"),
            ("retry.backoff.ms", "10"),
            ("retry.backoff.max.ms", "100"),
        ],
    );
    retrying("init_transactions", || producer.init_transactions(WAIT));
    (producer, deliveries)
}

/// Sends `ids` round-robin over the partitions of `topic` and waits until every one is acked.
fn send_acked(producer: &IdProducer, deliveries: &common::Deliveries, topic: &str, ids: &[u64]) {
    let before = deliveries.acked_count();
    for &id in ids {
        send_id(producer, topic, (id % PARTITIONS as u64) as i32, id, 24);
    }
    producer.flush(WAIT).expect("flush");
    deliveries.wait_until("acks", WAIT, |s| s.acked.len() >= before + ids.len());
}

// TransactionCoordinator `prepareInitProducerIdTransit` against librdkafka: a second producer with
// the same transactional id fences the first while its transaction is open. The broker aborts the
// open transaction (markers at epoch + 1) and answers CONCURRENT_TRANSACTIONS, which librdkafka
// retries into a second bump; the first producer's commit then fails fatally. Only the second
// producer's transaction is visible under read_committed.
#[test]
fn librdkafka_second_transactional_producer_fences_the_first_and_its_transaction_is_aborted() {
    const TOPIC_FENCE: &str = "crosscheck-fence";
    const ID: &str = "crosscheck-fenced";
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(TOPIC_FENCE, &[1, 2, 3, 1, 2, 3]);
    let bootstrap = cluster.bootstrap_servers();

    let (zombie, zombie_deliveries) = initialised_txn_producer(&bootstrap, ID, "60000");
    zombie.begin_transaction().expect("begin");
    let zombie_ids: Vec<u64> = (0..60).collect();
    send_acked(&zombie, &zombie_deliveries, TOPIC_FENCE, &zombie_ids);
    let inits_before = cluster.stats().requests(ApiKey::InitProducerId);

    let (fresh, fresh_deliveries) = initialised_txn_producer(&bootstrap, ID, "60000");
    let (state, epoch) = cluster.with_cluster(|c| {
        let m = c.transaction_metadata(ID).unwrap();
        (m.state, m.producer_epoch)
    });
    assert_eq!(
        (state, epoch),
        (TransactionState::Empty, 2),
        "fence at 1, bump to 2"
    );
    assert!(
        cluster.stats().requests(ApiKey::InitProducerId) >= inits_before + 2,
        "the CONCURRENT_TRANSACTIONS answer was retried"
    );

    let refused = zombie.commit_transaction(WAIT);
    match &refused {
        Err(KafkaError::Transaction(e)) => {
            assert!(e.is_fatal(), "a fenced producer is fatal: {e}")
        }
        other => panic!("the fenced producer's commit: {other:?}"),
    }

    fresh.begin_transaction().expect("begin");
    let fresh_ids: Vec<u64> = (60..120).collect();
    send_acked(&fresh, &fresh_deliveries, TOPIC_FENCE, &fresh_ids);
    retrying("commit_transaction", || fresh.commit_transaction(WAIT));

    let committed = read_back(
        &bootstrap,
        TOPIC_FENCE,
        PARTITIONS,
        Isolation::ReadCommitted,
        WAIT,
    );
    println!(
        "read_committed: {}",
        check_exactly_once(&payload_ids(&committed), &fresh_ids, &fresh_ids)
    );
    let all: Vec<u64> = (0..120).collect();
    let uncommitted = read_back(
        &bootstrap,
        TOPIC_FENCE,
        PARTITIONS,
        Isolation::ReadUncommitted,
        WAIT,
    );
    println!(
        "read_uncommitted: {}",
        check_exactly_once(&payload_ids(&uncommitted), &all, &all)
    );
    cluster.with_cluster(|c| {
        for p in 0..PARTITIONS {
            let aborted = c.aborted_transactions(TOPIC_FENCE, p);
            assert_eq!(aborted.len(), 1, "p{p}: the zombie's transaction");
        }
        assert_eq!(c.markers_rejected(), 0);
    });
}

// TransactionCoordinator `abortTimedOutTransactions` against librdkafka: a transaction left open
// past `transaction.timeout.ms` is aborted by the coordinator's timer (epoch + 1), and under TV1
// the producer is fenced for good: its commit fails fatally and none of its records is visible
// under read_committed.
#[test]
fn librdkafka_transaction_open_past_its_timeout_is_aborted_by_the_coordinator() {
    const TOPIC_TIMEOUT: &str = "crosscheck-timeout";
    const ID: &str = "crosscheck-timed-out";
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    cluster.create_topic(TOPIC_TIMEOUT, &[1, 2, 3, 1, 2, 3]);
    let bootstrap = cluster.bootstrap_servers();
    let (producer, deliveries) = initialised_txn_producer(&bootstrap, ID, "1500");
    producer.begin_transaction().expect("begin");
    let ids: Vec<u64> = (0..60).collect();
    send_acked(&producer, &deliveries, TOPIC_TIMEOUT, &ids);
    let epoch_before = cluster.with_cluster(|c| c.transaction_metadata(ID).unwrap().producer_epoch);

    assert!(
        cluster.wait_until(WAIT, |c| {
            c.transaction_metadata(ID).unwrap().state == TransactionState::CompleteAbort
        }),
        "timed out waiting for the coordinator's timer to abort the transaction"
    );
    let epoch_after = cluster.with_cluster(|c| c.transaction_metadata(ID).unwrap().producer_epoch);
    assert_eq!(epoch_after, epoch_before + 1);

    match producer.commit_transaction(WAIT) {
        Err(KafkaError::Transaction(e)) => {
            assert!(e.is_fatal(), "a timed-out TV1 producer is fenced: {e}")
        }
        other => panic!("the timed-out producer's commit: {other:?}"),
    }
    let committed = read_back(
        &bootstrap,
        TOPIC_TIMEOUT,
        PARTITIONS,
        Isolation::ReadCommitted,
        WAIT,
    );
    assert!(
        committed.iter().all(Vec::is_empty),
        "nothing of an aborted transaction is visible"
    );
    let uncommitted = read_back(
        &bootstrap,
        TOPIC_TIMEOUT,
        PARTITIONS,
        Isolation::ReadUncommitted,
        WAIT,
    );
    println!(
        "read_uncommitted: {}",
        check_exactly_once(&payload_ids(&uncommitted), &ids, &ids)
    );
}
