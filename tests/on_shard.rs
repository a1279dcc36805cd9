//! Thread-per-core all the way: application tasks run on the shards themselves
//! (`Producer::spawn_on_shard`) and send to the partitions their shard owns
//! (`Producer::shard_of`). What they send lands exactly once and in order, read back by
//! librdkafka; a task's panic is its own (the shard goes on); a task that cannot run or is cut
//! short says so; and the rules of a shard thread hold inside one.
#![cfg(feature = "testkit")]

mod common;

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{ProducerRecord, ShardTaskError};

use common::bounded::within;
use common::{check_acked_offsets, payload_ids, read_back, Isolation};

const TOPIC: &str = "on-shard";
const PARTITIONS: i32 = 6;
const TEST: Duration = Duration::from_secs(120);

fn cluster() -> ReferenceCluster {
    let cluster = ReferenceCluster::start(3, BrokerRules::default());
    let leaders: Vec<i32> = (0..PARTITIONS).map(|p| 1 + p % 3).collect();
    cluster.create_topic(TOPIC, &leaders);
    cluster
}

fn record(partition: i32, id: u64) -> ProducerRecord {
    ProducerRecord::new(TOPIC, Bytes::from(id.to_be_bytes().to_vec())).with_partition(partition)
}

// Two shards, each running a task that sends 2,000 records to each partition it owns with
// `send_async` and awaits them: every record is acknowledged on the shard that owns its
// partition, and librdkafka reads each partition back with exactly those records, in the
// order sent, at the acknowledged offsets.
#[test]
fn tasks_on_the_owning_shards_send_their_partitions_records_exactly_once_in_order() {
    within(TEST, || {
        let cluster = cluster();
        let producer =
            common::kacrab_producer(&cluster.bootstrap_servers(), &[("kacrab.shards", "2")]);
        let per_partition = 2_000u64;
        let owned: Vec<Vec<i32>> = (0..producer.shard_count())
            .map(|shard| {
                (0..PARTITIONS)
                    .filter(|&p| producer.shard_of(TOPIC, p) == shard)
                    .collect()
            })
            .collect();
        assert!(
            owned.iter().all(|parts| !parts.is_empty()),
            "each shard owns a partition: {owned:?}"
        );
        let tasks: Vec<_> = owned
            .iter()
            .enumerate()
            .map(|(shard, parts)| {
                let (producer, parts) = (producer.clone(), parts.clone());
                producer.clone().spawn_on_shard(shard, move || async move {
                    let mut futures = Vec::new();
                    for seq in 0..per_partition {
                        for &p in &parts {
                            let id = p as u64 * 1_000_000 + seq;
                            futures.push((id, producer.send_async(record(p, id)).await));
                        }
                    }
                    let mut acked = Vec::new();
                    for (id, future) in futures {
                        let meta = future.await.expect("acknowledged");
                        acked.push((id, meta.partition, meta.offset));
                    }
                    acked
                })
            })
            .collect();
        let mut acked = Vec::new();
        for task in tasks {
            acked.extend(task.join().expect("the task finishes"));
        }
        assert_eq!(acked.len() as u64, per_partition * PARTITIONS as u64);
        let log = read_back(
            &cluster.bootstrap_servers(),
            TOPIC,
            PARTITIONS,
            Isolation::ReadUncommitted,
            Duration::from_secs(30),
        );
        let ids = payload_ids(&log);
        for (p, ids) in ids.iter().enumerate() {
            let expected: Vec<u64> = (0..per_partition)
                .map(|seq| p as u64 * 1_000_000 + seq)
                .collect();
            assert_eq!(ids, &expected, "partition {p}: every record once, in order");
        }
        check_acked_offsets(&log, &acked);
        producer.close(Duration::from_secs(10));
    });
}

// A task that panics gives `Panicked` with its message; the shard it ran on goes on, and a
// record sent through it afterwards lands.
#[test]
fn a_task_that_panics_reports_its_panic_and_its_shard_goes_on() {
    within(TEST, || {
        let cluster = cluster();
        let producer =
            common::kacrab_producer(&cluster.bootstrap_servers(), &[("kacrab.shards", "1")]);
        let task = producer.spawn_on_shard(0, || async { panic!("the application's own bug") });
        match task.join() {
            Err(ShardTaskError::Panicked(message)) => {
                assert!(message.contains("the application's own bug"), "{message}")
            }
            other => panic!("expected Panicked, got {:?}", other.map(|_: ()| ())),
        }
        let landed = producer.send(record(0, 7)).wait();
        assert!(landed.is_ok(), "the shard still sends: {landed:?}");
        producer.close(Duration::from_secs(10));
    });
}

// A shard that does not exist, and a shard that has stopped, run nothing and say so; a task
// still waiting when its producer closes is cut short with `Stopped`.
#[test]
fn a_task_that_cannot_run_or_is_cut_short_says_why() {
    within(TEST, || {
        let cluster = cluster();
        let producer =
            common::kacrab_producer(&cluster.bootstrap_servers(), &[("kacrab.shards", "1")]);
        assert_eq!(
            producer.spawn_on_shard(5, || async {}).join(),
            Err(ShardTaskError::NoSuchShard {
                shard: 5,
                shards: 1
            })
        );
        // Never finishes: only the shard's stop ends it.
        let waiting = producer.spawn_on_shard(0, std::future::pending::<()>);
        producer.close(Duration::from_secs(10));
        assert_eq!(waiting.join(), Err(ShardTaskError::Stopped));
        assert_eq!(
            producer.spawn_on_shard(0, || async {}).join(),
            Err(ShardTaskError::Stopped)
        );
    });
}

// Inside a task the shard thread's rules hold: joining another task that has not finished
// does not block (it would wait for the shard the task holds up), a blocking `send` does not
// wait for room, and `flush` returns at once; awaiting works.
#[test]
fn inside_a_task_joining_does_not_block_and_awaiting_does() {
    within(TEST, || {
        let cluster = cluster();
        let producer =
            common::kacrab_producer(&cluster.bootstrap_servers(), &[("kacrab.shards", "1")]);
        let inner_producer = producer.clone();
        let outer = producer.spawn_on_shard(0, move || async move {
            // Neither task can start before this one awaits: they share its thread.
            let answer = inner_producer.spawn_on_shard(0, || async { 41 });
            let joined = inner_producer
                .spawn_on_shard(0, std::future::pending::<()>)
                .join();
            inner_producer.flush();
            let awaited = answer.await;
            (joined, awaited)
        });
        let (joined, awaited) = outer.join().expect("the outer task finishes");
        assert_eq!(joined, Err(ShardTaskError::WouldBlock));
        assert_eq!(awaited, Ok(41));
        producer.close(Duration::from_secs(10));
    });
}
