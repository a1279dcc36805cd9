//! Filling `buffer.memory` with records that cannot leave (their only broker is down), and
//! measuring what that costs the process in resident memory.

use std::time::Duration;

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{DeliveryFuture, Producer, ProducerRecord, TrySendError};

/// The process's resident set, from `/proc/self/status`.
pub fn resident_bytes() -> usize {
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

/// A producer whose records are stuck, after it filled `buffer.memory`.
pub struct StuckBuffer {
    pub cluster: ReferenceCluster,
    pub producer: Producer,
    pub futures: Vec<DeliveryFuture>,
    /// Resident bytes the accepted records added to the producer: the growth of the process's
    /// resident set less the test's own vector of futures.
    pub grown: usize,
    /// `buffered_bytes` once the shards had taken every accepted record.
    pub buffered: usize,
}

/// Sends `record_size`-byte records over four partitions with `try_send` until the buffer is
/// full, with the only broker down, and measures the resident set once the shards have
/// appended every record they accepted.
pub fn fill(buffer_memory: usize, batch_size: usize, record_size: usize) -> StuckBuffer {
    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("stuck", &[1, 1, 1, 1]);
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("buffer.memory", buffer_memory.to_string())
        .set("batch.size", batch_size.to_string())
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
    // One value and one topic name shared by every record: what grows is the producer's and
    // the futures', and the futures' vector is taken out below.
    let value = Bytes::from(vec![b'v'; record_size]);
    let topic: std::sync::Arc<str> = "stuck".into();
    let mut futures = Vec::new();
    loop {
        let mut record = ProducerRecord::new(topic.clone(), value.clone());
        record.partition = Some((futures.len() % 4) as i32);
        match producer.try_send(record) {
            Ok(future) => futures.push(future),
            Err(TrySendError::BufferFull(_)) => break,
            Err(other) => panic!("{other}"),
        }
    }
    // A metrics snapshot goes through every shard's inbox behind the records: once it is
    // back, every accepted record is in a batch.
    producer.metrics();
    // The futures are the application's (Java's `Future`s are not in `buffer.memory` either):
    // their vector, at most its capacity, is not the producer's growth.
    let futures_bytes = futures.capacity() * std::mem::size_of::<DeliveryFuture>();
    let grown = resident_bytes()
        .saturating_sub(before)
        .saturating_sub(futures_bytes);
    let buffered = producer.buffered_bytes();
    eprintln!(
        "{} records of {record_size} bytes accepted, {buffered} bytes buffered, resident set \
         grew {grown} bytes beyond the futures' {futures_bytes}",
        futures.len(),
    );
    StuckBuffer {
        cluster,
        producer,
        futures,
        grown,
        buffered,
    }
}

impl StuckBuffer {
    /// Nothing was lost: with the broker back, every accepted record lands.
    pub fn all_land(self) {
        self.cluster.broker_up(1);
        for future in self.futures {
            future.wait().expect("every accepted record lands");
        }
        self.producer.close(Duration::from_secs(10));
    }
}
