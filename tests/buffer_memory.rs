//! `buffer.memory` bounds what queued records really cost: with every record stuck (its
//! broker down), a producer accepts records until the buffer is full and its resident memory
//! grows by no more than the buffer plus a constant. One test in its own binary, so that no
//! other test's allocations move the process's resident size while it measures.
#![cfg(feature = "testkit")]

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{Producer, ProducerRecord, TrySendError};

/// The process's resident set, from `/proc/self/status`.
fn resident_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

#[test]
fn a_full_buffer_of_stuck_small_records_costs_no_more_resident_memory_than_buffer_memory_plus_a_constant(
) {
    const BUFFER: usize = 16 << 20;
    const CONSTANT: usize = 16 << 20;
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("stuck", &[1, 1, 1, 1]);
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("buffer.memory", BUFFER.to_string())
        .set("delivery.timeout.ms", "120000")
        .set("request.timeout.ms", "60000")
        .set("linger.ms", "5")
        .set("kacrab.shards", "2")
        .build()
        .expect("producer");
    // Metadata known and connections up, then the only broker goes away.
    producer
        .send(ProducerRecord::new("stuck", Bytes::from_static(b"first")))
        .wait()
        .expect("the first record lands");
    cluster.broker_down(1);
    let before = resident_bytes();
    let value = Bytes::from_static(b"0123456789");
    let mut futures = Vec::new();
    loop {
        let mut record = ProducerRecord::new("stuck", value.clone());
        record.partition = Some((futures.len() % 4) as i32);
        match producer.try_send(record) {
            Ok(future) => futures.push(future),
            Err(TrySendError::BufferFull(_)) => break,
            Err(other) => panic!("{other}"),
        }
    }
    let after = resident_bytes();
    let grown = after.saturating_sub(before);
    eprintln!(
        "{} records accepted, {} bytes buffered, resident set grew {grown} bytes",
        futures.len(),
        producer.buffered_bytes()
    );
    assert!(
        producer.buffered_bytes() <= BUFFER,
        "buffered {} > buffer.memory {BUFFER}",
        producer.buffered_bytes()
    );
    assert!(
        grown <= BUFFER + CONSTANT,
        "{} records of 10 bytes grew the resident set by {grown} bytes, more than buffer.memory \
         ({BUFFER}) plus {CONSTANT}",
        futures.len()
    );
    // Nothing was lost: with the broker back, every accepted record lands.
    cluster.broker_up(1);
    for future in futures {
        future.wait().expect("every accepted record lands");
    }
    producer.close(Duration::from_secs(10));
}
