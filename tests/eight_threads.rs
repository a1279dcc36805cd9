//! Eight threads send to the same four partitions at once through one producer: half one record
//! per call (`send`, `send_with_callback`), half many per call (`send_batch` in chunks of
//! varying sizes, waited on, polled as a future, or with `send_batch_with_callback`), two of
//! them with keyed records the partitioner places. Meanwhile the reference cluster (3 brokers,
//! over TCP) loses answers to appended requests, drops connections and moves leaders.
//!
//! The sending runs in phases: before each, the test schedules that phase's faults; all eight
//! threads then send their share of the phase at once, without waiting for results. Once every
//! thread has sent everything, each collects its records' results. Every test then reads the
//! topic back with librdkafka's consumer and checks that every record was acknowledged, where
//! the partitioner (or the record) said; that every record is in the log exactly once, at the
//! offset it was acknowledged with, and nothing else is; and that each thread's records keep
//! its send order within each partition.
#![cfg(feature = "testkit")]

mod common;

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::error_codes::NOT_LEADER_OR_FOLLOWER;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::{ReferenceCluster, ANY_BROKER};
use kacrab::{BatchDelivery, DeliveryFuture, ProduceError, Producer, ProducerRecord};
use kacrab::{RecordMetadata, TransactionError};
use kafka_protocol::messages::ApiKey;

use common::bounded::{block_on_timeout, within};
use common::{check_acked_offsets, check_exactly_once, payload_ids, read_back, Isolation};

const PARTITIONS: i32 = 4;
const BROKERS: i32 = 3;
const THREADS: u64 = 8;
/// Bound on any one record's or batch's result, and on each transactional call.
const WAIT: Duration = Duration::from_secs(120);
/// Bound on a whole test.
const TEST: Duration = Duration::from_secs(300);

type Outcome = Result<RecordMetadata, ProduceError>;

/// How one thread sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// `send`, one record per call; every future waited on at the end.
    Send,
    /// `send_with_callback`, one record per call.
    Callback,
    /// `send_batch`; every handle waited on (`wait`) at the end.
    Batch,
    /// `send_batch`; every handle polled as a future at the end.
    BatchPolled,
    /// `send_batch_with_callback`.
    BatchCallback,
}

/// The path of each thread: half one record per call, half many.
const PATHS: [Path; THREADS as usize] = [
    Path::Send,
    Path::Callback,
    Path::Send,
    Path::Callback,
    Path::Batch,
    Path::BatchPolled,
    Path::BatchCallback,
    Path::Batch,
];

/// Chunk sizes of the batch paths, taken in turn (each thread starts at its own place).
const CHUNKS: [usize; 9] = [1, 2, 5, 17, 64, 3, 250, 9, 120];

/// Threads whose records carry a key and no partition (the partitioner places them); the
/// others name a partition.
fn keyed(thread: u64) -> bool {
    thread % 4 == 3
}

/// Record `seq` of `thread`: its id (thread in the high half, sequence in the low half).
fn id_of(thread: u64, seq: u64) -> u64 {
    thread << 32 | seq
}

fn thread_of(id: u64) -> u64 {
    id >> 32
}

/// A partition that looks random but is fixed by the id (splitmix64), so that consecutive
/// records of a thread sometimes share a partition and sometimes do not.
fn scattered_partition(id: u64) -> i32 {
    let mut z = id.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) % PARTITIONS as u64) as i32
}

/// Record `id` for `topic`, and the partition it must be acknowledged on. Its value is the id
/// (8 bytes, big-endian) then 8 bytes of filler.
fn record(topic: &str, id: u64) -> (ProducerRecord, i32) {
    let mut value = id.to_be_bytes().to_vec();
    value.extend_from_slice(b"-eight--");
    let record = ProducerRecord::new(topic, Bytes::from(value));
    if keyed(thread_of(id)) {
        let key = id.to_be_bytes();
        let partition = kacrab::partitioner::partition_for_key(&key, PARTITIONS);
        (record.with_key(Bytes::copy_from_slice(&key)), partition)
    } else {
        let partition = scattered_partition(id);
        (record.with_partition(partition), partition)
    }
}

/// What the threads send: `phases` phases of `per_phase` records each, per thread.
#[derive(Clone, Copy)]
struct Plan {
    phases: u64,
    per_phase: u64,
}

impl Plan {
    fn per_thread(&self) -> u64 {
        self.phases * self.per_phase
    }
}

/// One record's outcome as its thread collected it: (id, partition expected, outcome).
type Collected = (u64, i32, Outcome);

/// The phases' gates: every thread and the test pass `start` before a phase's sends and `end`
/// after them.
struct Gates {
    start: Barrier,
    end: Barrier,
}

/// Thread `thread`'s part: sends its records phase by phase through its path, then collects
/// every result.
fn sender(
    thread: u64,
    producer: Producer,
    topic: &'static str,
    plan: Plan,
    gates: Arc<Gates>,
) -> Vec<Collected> {
    let path = PATHS[thread as usize];
    let (results_tx, results_rx) = mpsc::channel::<(Vec<u64>, Vec<Outcome>)>();
    // Messages `results_rx` must receive: one per callback.
    let mut callbacks = 0usize;
    let mut singles: Vec<(u64, DeliveryFuture)> = Vec::new();
    let mut batches: Vec<(Vec<u64>, BatchDelivery)> = Vec::new();
    let mut expected: HashMap<u64, i32> = HashMap::new();
    let mut chunk = thread as usize;
    for phase in 0..plan.phases {
        gates.start.wait();
        let mut seq = phase * plan.per_phase;
        let phase_end = seq + plan.per_phase;
        while seq < phase_end {
            let n = match path {
                Path::Send | Path::Callback => 1,
                Path::Batch | Path::BatchPolled | Path::BatchCallback => {
                    chunk += 1;
                    (CHUNKS[chunk % CHUNKS.len()] as u64).min(phase_end - seq)
                }
            };
            let ids: Vec<u64> = (seq..seq + n).map(|s| id_of(thread, s)).collect();
            seq += n;
            let records: Vec<ProducerRecord> = ids
                .iter()
                .map(|&id| {
                    let (record, partition) = record(topic, id);
                    expected.insert(id, partition);
                    record
                })
                .collect();
            match path {
                Path::Send => {
                    let record = records.into_iter().next().expect("one record");
                    singles.push((ids[0], producer.send(record)));
                }
                Path::Callback => {
                    let record = records.into_iter().next().expect("one record");
                    let tx = results_tx.clone();
                    producer.send_with_callback(record, move |result| {
                        let _ = tx.send((ids, vec![result]));
                    });
                    callbacks += 1;
                }
                Path::Batch | Path::BatchPolled => {
                    batches.push((ids, producer.send_batch(records)));
                }
                Path::BatchCallback => {
                    let tx = results_tx.clone();
                    producer.send_batch_with_callback(records, move |results| {
                        let _ = tx.send((ids, results));
                    });
                    callbacks += 1;
                }
            }
        }
        gates.end.wait();
    }
    drop(results_tx);

    let mut collected: Vec<(u64, Outcome)> = Vec::new();
    for (id, future) in singles {
        let outcome = future
            .wait_timeout(WAIT)
            .unwrap_or_else(|| panic!("thread {thread}: record {id:#x} unresolved after {WAIT:?}"));
        collected.push((id, outcome));
    }
    for (ids, batch) in batches {
        assert_eq!(
            batch.len(),
            ids.len(),
            "thread {thread}: the handle's length"
        );
        let results = if path == Path::Batch {
            batch.wait()
        } else {
            block_on_timeout(batch, WAIT).unwrap_or_else(|| {
                panic!(
                    "thread {thread}: the batch from record {:#x} unresolved after {WAIT:?}",
                    ids[0]
                )
            })
        };
        assert_eq!(
            results.len(),
            ids.len(),
            "thread {thread}: one result a record"
        );
        collected.extend(ids.into_iter().zip(results));
    }
    for _ in 0..callbacks {
        let (ids, results) = results_rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("thread {thread}: a callback did not run within {WAIT:?}"));
        assert_eq!(
            results.len(),
            ids.len(),
            "thread {thread}: one result a record"
        );
        collected.extend(ids.into_iter().zip(results));
    }
    collected
        .into_iter()
        .map(|(id, outcome)| (id, expected[&id], outcome))
        .collect()
}

/// A cluster of three brokers with `topic`'s four partitions led by brokers 1, 2, 3, 1.
fn start_cluster(topic: &str) -> ReferenceCluster {
    let cluster = ReferenceCluster::start(BROKERS as usize, BrokerRules::default());
    let leaders: Vec<i32> = (0..PARTITIONS).map(|p| 1 + p % BROKERS).collect();
    cluster.create_topic(topic, &leaders);
    cluster
}

/// Runs the eight senders over `plan`; before each phase, `before_phase(phase)` schedules the
/// phase's faults, and after each phase's sends `after_phase(phase)` runs (a transaction's
/// commit). Returns what every thread collected, by thread.
fn run_eight_threads(
    producer: &Producer,
    topic: &'static str,
    plan: Plan,
    mut before_phase: impl FnMut(u64),
    mut after_phase: impl FnMut(u64),
) -> Vec<Vec<Collected>> {
    let gates = Arc::new(Gates {
        start: Barrier::new(THREADS as usize + 1),
        end: Barrier::new(THREADS as usize + 1),
    });
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let producer = producer.clone();
            let gates = gates.clone();
            thread::Builder::new()
                .name(format!("sender-{t}"))
                .spawn(move || sender(t, producer, topic, plan, gates))
                .expect("spawn a sender")
        })
        .collect();
    for phase in 0..plan.phases {
        before_phase(phase);
        gates.start.wait();
        gates.end.wait();
        after_phase(phase);
    }
    threads
        .into_iter()
        .map(|t| t.join().expect("sender thread"))
        .collect()
}

/// Sends one record to each partition from the test's thread (ids of a ninth sender,
/// `THREADS`) and waits for each: the producer is known to every partition's leader before any
/// fault. (A broker that has no state for a producer on a partition accepts its first batch
/// at any sequence, as Kafka does; a fault that refused a producer's very first batch to a
/// partition while a later one was appended would leave the first never appendable.)
fn warm_up(producer: &Producer, topic: &str) -> Vec<Collected> {
    let futures: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            let id = id_of(THREADS, p as u64);
            let mut value = id.to_be_bytes().to_vec();
            value.extend_from_slice(b"-warmup-");
            let record = ProducerRecord::new(topic, Bytes::from(value)).with_partition(p);
            (id, p, producer.send(record))
        })
        .collect();
    futures
        .into_iter()
        .map(|(id, p, future)| {
            let outcome = future
                .wait_timeout(WAIT)
                .unwrap_or_else(|| panic!("warm-up record {id:#x} unresolved after {WAIT:?}"));
            assert!(outcome.is_ok(), "warm-up record {id:#x}: {outcome:?}");
            (id, p, outcome)
        })
        .collect()
}

/// Checks what the senders collected against the log read back with librdkafka: every record
/// acknowledged on its partition, in the log once at its acknowledged offset, each sender's
/// records in its send order within each partition, and nothing else in the log. `collected`
/// holds the eight threads' results by thread, then the warm-up's if there was one.
fn verify(
    cluster: &ReferenceCluster,
    topic: &str,
    isolation: Isolation,
    plan: Plan,
    collected: &[Vec<Collected>],
) {
    let sent = |sender: usize| -> Vec<u64> {
        let count = if sender < THREADS as usize {
            plan.per_thread()
        } else {
            PARTITIONS as u64
        };
        (0..count).map(|s| id_of(sender as u64, s)).collect()
    };
    let what = |sender: usize| match PATHS.get(sender) {
        Some(path) => format!("thread {sender} ({path:?})"),
        None => "warm-up".to_string(),
    };
    let mut acked_at = Vec::new();
    let mut acked: Vec<Vec<u64>> = vec![Vec::new(); collected.len()];
    for (sender, outcomes) in collected.iter().enumerate() {
        assert_eq!(
            outcomes.len(),
            sent(sender).len(),
            "{}: a result for every record",
            what(sender)
        );
        let failed: Vec<_> = outcomes
            .iter()
            .filter(|(_, _, outcome)| outcome.is_err())
            .collect();
        assert!(
            failed.is_empty(),
            "{}: {} records failed, first {:?}",
            what(sender),
            failed.len(),
            &failed[..failed.len().min(3)]
        );
        for (id, partition, outcome) in outcomes {
            let meta = outcome.as_ref().expect("acknowledged");
            assert_eq!(&*meta.topic, topic, "record {id:#x}: topic");
            assert_eq!(
                meta.partition,
                *partition,
                "{}: record {id:#x} acknowledged on another partition",
                what(sender)
            );
            acked_at.push((*id, meta.partition, meta.offset));
            acked[sender].push(*id);
        }
    }

    let log = read_back(
        &cluster.bootstrap_servers(),
        topic,
        PARTITIONS,
        isolation,
        Duration::from_secs(60),
    );
    let ids = payload_ids(&log);
    let read: usize = ids.iter().map(Vec::len).sum();
    let mut of_senders = 0;
    for (sender, acked) in acked.iter().enumerate() {
        // The sender's records in each partition, in log order: each once, in send order.
        let own: Vec<Vec<u64>> = ids
            .iter()
            .map(|partition| {
                partition
                    .iter()
                    .copied()
                    .filter(|&id| thread_of(id) == sender as u64)
                    .collect()
            })
            .collect();
        of_senders += own.iter().map(Vec::len).sum::<usize>();
        let verdict = check_exactly_once(&own, acked, &sent(sender));
        println!("{}: {verdict}", what(sender));
    }
    assert_eq!(of_senders, read, "the log holds records of no other sender");
    let expected: usize = (0..collected.len()).map(|sender| sent(sender).len()).sum();
    assert_eq!(read, expected, "the log holds every record once");
    check_acked_offsets(&log, &acked_at);
}

#[test]
fn eight_threads_through_send_and_send_batch_under_lost_responses_and_dropped_connections_keep_each_threads_order_and_land_exactly_once(
) {
    within(TEST, || {
        const TOPIC: &str = "eight-lost-responses";
        let plan = Plan {
            phases: 6,
            per_phase: 500,
        };
        let cluster = Arc::new(start_cluster(TOPIC));
        let producer = common::kacrab_producer(&cluster.bootstrap_servers(), &[]);
        let warm = warm_up(&producer, TOPIC);
        // Answers lost after the append (the connection closes with them) and connections
        // reset before a request is read, on whichever broker gets the next produce request.
        let mut dropped_after_append = 0;
        let faults = cluster.clone();
        let schedule = |phase: u64| {
            let plan = faults.faults();
            match phase {
                0 | 4 => {
                    plan.drop_response_after_append(ANY_BROKER, ApiKey::Produce, 2);
                    dropped_after_append += 2;
                }
                1 => plan.reset_connection(ANY_BROKER, ApiKey::Produce, 1, false),
                2 => {
                    plan.drop_response_after_append(ANY_BROKER, ApiKey::Produce, 1);
                    plan.reset_connection(ANY_BROKER, ApiKey::Produce, 1, true);
                    dropped_after_append += 1;
                }
                3 => {
                    plan.delay_response(ANY_BROKER, ApiKey::Produce, 1, Duration::from_millis(300))
                }
                _ => {}
            }
        };
        let hit = |phase: u64| {
            assert!(
                cluster.faults().wait_until_consumed(WAIT),
                "phase {phase}: a fault was never hit"
            );
        };
        let mut collected = run_eight_threads(&producer, TOPIC, plan, schedule, hit);
        collected.push(warm);
        verify(
            &cluster,
            TOPIC,
            Isolation::ReadUncommitted,
            plan,
            &collected,
        );
        let duplicates = cluster.with_cluster(|c| c.duplicates_answered());
        println!("duplicates answered: {duplicates}");
        assert!(
            duplicates >= dropped_after_append,
            "each request whose answer was lost after the append was retried and recognised \
             as a duplicate: {duplicates} duplicates for {dropped_after_append} lost answers"
        );
        producer.close(Duration::from_secs(10));
        assert_eq!(producer.buffered_bytes(), 0);
    });
}

#[test]
fn eight_threads_through_send_and_send_batch_while_leaders_move_and_brokers_refuse_keep_each_threads_order_and_land_exactly_once(
) {
    within(TEST, || {
        const TOPIC: &str = "eight-leader-moves";
        let plan = Plan {
            phases: 6,
            per_phase: 500,
        };
        let cluster = Arc::new(start_cluster(TOPIC));
        // A buffer of a fraction of a phase's records: sends and batches wait for room while
        // the retries hold it.
        let producer =
            common::kacrab_producer(&cluster.bootstrap_servers(), &[("buffer.memory", "262144")]);
        let warm = warm_up(&producer, TOPIC);
        let faults = cluster.clone();
        let mut leaders: Vec<i32> = (0..PARTITIONS).map(|p| 1 + p % BROKERS).collect();
        // Before each phase one partition moves to the next broker while the previous phase's
        // records may be in flight to its old leader; and the next produce request is refused
        // as sent to a broker that is not the leader, or its answer is lost after the append.
        let schedule = |phase: u64| {
            let partition = (phase % PARTITIONS as u64) as usize;
            leaders[partition] = 1 + leaders[partition] % BROKERS;
            faults.set_leader(TOPIC, partition as i32, leaders[partition]);
            if phase % 2 == 0 {
                faults.faults().inject_error(
                    ANY_BROKER,
                    ApiKey::Produce,
                    NOT_LEADER_OR_FOLLOWER,
                    1,
                );
            } else {
                faults
                    .faults()
                    .drop_response_after_append(ANY_BROKER, ApiKey::Produce, 1);
            }
        };
        let hit = |phase: u64| {
            assert!(
                cluster.faults().wait_until_consumed(WAIT),
                "phase {phase}: a fault was never hit"
            );
        };
        let mut collected = run_eight_threads(&producer, TOPIC, plan, schedule, hit);
        collected.push(warm);
        verify(
            &cluster,
            TOPIC,
            Isolation::ReadUncommitted,
            plan,
            &collected,
        );
        let waited = producer.metrics().bufferpool_wait_time_ns_total;
        println!("senders waited {waited} ns for room in buffer.memory");
        assert!(waited > 0, "the senders waited for room in buffer.memory");
        producer.close(Duration::from_secs(10));
        assert_eq!(producer.buffered_bytes(), 0);
    });
}

#[test]
fn eight_threads_sending_in_transactions_under_lost_responses_commit_every_record_once_in_each_threads_order(
) {
    within(TEST, || {
        const TOPIC: &str = "eight-transactions";
        // One transaction a phase.
        let plan = Plan {
            phases: 3,
            per_phase: 1000,
        };
        let cluster = Arc::new(start_cluster(TOPIC));
        let producer = common::kacrab_producer(
            &cluster.bootstrap_servers(),
            &[("transactional.id", "eight-threads")],
        );
        producer.init_transactions(WAIT).expect("init_transactions");
        let faults = cluster.clone();
        let begin = |phase: u64| {
            producer
                .begin_transaction()
                .unwrap_or_else(|e| panic!("begin transaction {phase}: {e}"));
            faults
                .faults()
                .drop_response_after_append(ANY_BROKER, ApiKey::Produce, 1);
        };
        let commit = |phase: u64| {
            let committed: Result<(), TransactionError> = producer.commit_transaction(WAIT);
            committed.unwrap_or_else(|e| panic!("commit transaction {phase}: {e}"));
            assert!(
                cluster.faults().wait_until_consumed(WAIT),
                "transaction {phase}: the lost answer was never hit"
            );
        };
        let collected = run_eight_threads(&producer, TOPIC, plan, begin, commit);
        verify(&cluster, TOPIC, Isolation::ReadCommitted, plan, &collected);
        let duplicates = cluster.with_cluster(|c| c.duplicates_answered());
        println!("duplicates answered: {duplicates}");
        assert!(
            duplicates >= plan.phases,
            "each lost answer's request was retried and recognised as a duplicate: \
             {duplicates} duplicates for {} lost answers",
            plan.phases
        );
        producer.close(Duration::from_secs(10));
        assert_eq!(producer.buffered_bytes(), 0);
    });
}
