//! The producer's blocking calls made from application code that runs on a shard thread (a
//! delivery callback): each either completes without waiting for a shard or returns a typed
//! error at once, and the shard that runs the callback goes on delivering. Also a panic in a
//! callback: caught, and the shard goes on.
//!
//! A call that would hang is run under a watchdog: the test fails naming the call instead of
//! hanging, and the producer of a failed test is leaked rather than dropped (its drop would
//! wait for the stuck shard).
#![cfg(feature = "testkit")]

mod common;

use std::mem::ManuallyDrop;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{ProduceError, Producer, ProducerRecord, TransactionError};

const TOPIC: &str = "shard-thread-calls";
const PARTITIONS: i32 = 2;
/// Bounds a failure only: a call that returns at once takes milliseconds.
const WATCHDOG: Duration = Duration::from_secs(20);

fn cluster() -> ReferenceCluster {
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic(TOPIC, &[1, 1]);
    cluster
}

fn record(id: u64) -> ProducerRecord {
    ProducerRecord::new(TOPIC, Bytes::from(id.to_be_bytes().to_vec()))
        .with_partition((id % PARTITIONS as u64) as i32)
}

/// Sends one record whose callback runs `call` with a clone of the producer and reports what
/// it returned; fails the test, naming `what`, if the callback does not finish within the
/// watchdog. Afterwards the shard must still deliver: a record sent after it is acknowledged.
fn from_a_callback<T: Send + 'static>(
    producer: &ManuallyDrop<Producer>,
    what: &str,
    call: impl FnOnce(Producer) -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let clone = Producer::clone(producer);
    producer.send_with_callback(record(0), move |result| {
        result.expect("the record that runs the callback is acknowledged");
        let _ = tx.send(call(clone));
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(returned) => returned,
        Err(_) => {
            panic!("{what} called from a delivery callback did not return within {WATCHDOG:?}")
        }
    }
}

fn shard_still_delivers(producer: &Producer) {
    for id in 1..=4 {
        let delivered = producer
            .send(record(id))
            .wait_timeout(WATCHDOG)
            .unwrap_or_else(|| {
                panic!("record {id} sent after the callback did not complete: the shard stopped")
            });
        delivered.expect("acknowledged");
    }
}

fn producer(cluster: &ReferenceCluster, extra: &[(&str, &str)]) -> ManuallyDrop<Producer> {
    ManuallyDrop::new(common::kacrab_producer(&cluster.bootstrap_servers(), extra))
}

#[test]
fn flush_from_a_callback_returns_at_once_and_the_shard_goes_on() {
    let cluster = cluster();
    let producer = producer(&cluster, &[]);
    from_a_callback(&producer, "flush", |p| p.flush());
    shard_still_delivers(&producer);
    ManuallyDrop::into_inner(producer).close(WATCHDOG);
}

#[test]
fn flush_timeout_from_a_callback_returns_false_at_once() {
    let cluster = cluster();
    let producer = producer(&cluster, &[]);
    let (done, took) = from_a_callback(&producer, "flush_timeout", |p| {
        let started = Instant::now();
        (p.flush_timeout(Duration::from_secs(60)), started.elapsed())
    });
    assert!(
        !done,
        "a callback's flush cannot wait for the records of its own shard"
    );
    assert!(
        took < WATCHDOG,
        "flush_timeout(60 s) from a callback waited {took:?}"
    );
    shard_still_delivers(&producer);
    ManuallyDrop::into_inner(producer).close(WATCHDOG);
}

#[test]
fn purge_from_a_callback_returns_at_once_and_the_shard_goes_on() {
    let cluster = cluster();
    let producer = producer(&cluster, &[]);
    from_a_callback(&producer, "purge", |p| p.purge());
    shard_still_delivers(&producer);
    ManuallyDrop::into_inner(producer).close(WATCHDOG);
}

#[test]
fn close_from_a_callback_returns_at_once_and_later_sends_fail_closed() {
    let cluster = cluster();
    let producer = producer(&cluster, &[]);
    let watch = producer.runtime_watch();
    from_a_callback(&producer, "close", |p| p.close(Duration::from_secs(60)));
    let after = producer.send(record(9)).wait_timeout(WATCHDOG);
    assert!(
        matches!(after, Some(Err(ProduceError::Closed))),
        "a send after close: {after:?}"
    );
    assert!(
        watch.wait_until(WATCHDOG, |s| s.shards_running == 0),
        "the shards stop after a close from a callback: {:?}",
        watch.stats()
    );
    ManuallyDrop::into_inner(producer).close(WATCHDOG);
}

#[test]
fn dropping_the_last_handle_in_a_callback_closes_without_blocking_the_shard() {
    let cluster = cluster();
    let producer = ManuallyDrop::into_inner(producer(&cluster, &[]));
    let watch = producer.runtime_watch();
    let (tx, rx) = mpsc::channel();
    // The callback holds the only handle once this thread's is gone.
    let last = producer.clone();
    let pending: Vec<_> = (10..20).map(|id| producer.send(record(id))).collect();
    producer.send_with_callback(record(1), move |result| {
        result.expect("acknowledged");
        drop(last);
        let _ = tx.send(());
    });
    drop(producer);
    assert!(
        rx.recv_timeout(WATCHDOG).is_ok(),
        "dropping the last handle in a callback did not return within {WATCHDOG:?}"
    );
    for (i, future) in pending.into_iter().enumerate() {
        let result = future
            .wait_timeout(WATCHDOG)
            .unwrap_or_else(|| panic!("record {i} sent before the drop never completed"));
        result.expect("records sent before the last drop are delivered");
    }
    assert!(
        watch.wait_until(WATCHDOG, |s| s.shards_running == 0),
        "the shards stop after the last handle went in a callback: {:?}",
        watch.stats()
    );
}

/// In a callback, a first large record takes about all of a small `buffer.memory`; a second,
/// sent with `send_second` (whose `max.block.ms` is a minute), finds no room and must fail at
/// once, and the shard goes on.
fn a_send_in_a_callback_finds_no_room(
    what: &str,
    send_second: fn(&Producer, ProducerRecord) -> kacrab::DeliveryFuture,
) {
    let cluster = cluster();
    let producer = producer(
        &cluster,
        &[("buffer.memory", "3000"), ("max.block.ms", "60000")],
    );
    let (result, took) = from_a_callback(&producer, what, move |p| {
        let started = Instant::now();
        let big = ProducerRecord::new(TOPIC, Bytes::from(vec![7u8; 2000])).with_partition(0);
        let first = p.send(big.clone());
        let second = send_second(&p, big);
        let took = started.elapsed();
        drop(first);
        (second.try_result(), took)
    });
    assert!(
        took < WATCHDOG,
        "{what} in a callback waited {took:?} for room"
    );
    assert!(
        matches!(result, Some(Err(ProduceError::BufferExhausted { .. }))),
        "{what} that would wait for room on a shard thread fails at once: {result:?}"
    );
    shard_still_delivers(&producer);
    ManuallyDrop::into_inner(producer).close(WATCHDOG);
}

#[test]
fn a_blocking_send_from_a_callback_never_waits_for_room() {
    a_send_in_a_callback_finds_no_room("send", |p, record| p.send(record));
}

#[test]
fn a_send_async_driven_in_a_callback_never_waits_for_room() {
    a_send_in_a_callback_finds_no_room("send_async", |p, record| {
        futures::executor::block_on(p.send_async(record))
    });
}

#[test]
fn waiting_on_a_future_in_a_callback_returns_at_once_and_the_record_is_still_delivered() {
    let cluster = cluster();
    let producer = producer(&cluster, &[]);
    let (result, waited) = from_a_callback(&producer, "DeliveryFuture::wait", |p| {
        let waited = p.send(record(7)).wait_timeout(Duration::from_secs(60));
        (p.send(record(8)).wait(), waited)
    });
    assert!(
        waited.is_none(),
        "wait_timeout in a callback does not wait: {waited:?}"
    );
    assert!(
        matches!(result, Err(ProduceError::OutcomeUnknown { .. }) | Ok(_)),
        "wait in a callback answers at once, honestly: {result:?}"
    );
    shard_still_delivers(&producer);
    ManuallyDrop::into_inner(producer).close(WATCHDOG);
    let records = common::read_back(
        &cluster.bootstrap_servers(),
        TOPIC,
        PARTITIONS,
        common::Isolation::ReadUncommitted,
        WATCHDOG,
    );
    let ids = common::payload_ids(&records);
    for id in [7, 8] {
        assert!(
            ids.iter().flatten().filter(|&&i| i == id).count() == 1,
            "record {id}, sent in the callback, is in the log once: {ids:?}"
        );
    }
}

#[test]
fn a_transactional_call_from_a_callback_is_refused_at_once() {
    let cluster = cluster();
    let producer = producer(&cluster, &[("transactional.id", "shard-thread-calls")]);
    producer.init_transactions(WATCHDOG).expect("init");
    producer.begin_transaction().expect("begin");
    let refused = from_a_callback(&producer, "commit_transaction", |p| {
        p.commit_transaction(Duration::from_secs(60))
    });
    assert!(
        matches!(
            refused,
            Err(TransactionError::OnShardThread {
                operation: "commit_transaction"
            })
        ),
        "commit_transaction from a callback: {refused:?}"
    );
    producer
        .commit_transaction(WATCHDOG)
        .expect("the transaction is untouched by the refused call and commits");
    ManuallyDrop::into_inner(producer).close(WATCHDOG);
}

#[test]
fn a_panicking_callback_is_caught_and_the_shard_goes_on() {
    let cluster = cluster();
    let producer = producer(&cluster, &[]);
    producer.send_with_callback(record(0), |_| panic!("a callback's own bug"));
    shard_still_delivers(&producer);
    ManuallyDrop::into_inner(producer).close(WATCHDOG);
}
