//! Shared test helpers: reading a topic back with librdkafka's consumer, an independent reader.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    ReadCommitted,
    ReadUncommitted,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: i64,
}

/// Reads every partition of `topic` from the beginning to its end, with librdkafka's consumer.
/// Returns one vector per partition, in offset order.
pub fn read_back(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    isolation: Isolation,
    timeout: Duration,
) -> Vec<Vec<ReadRecord>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        .set(
            "isolation.level",
            match isolation {
                Isolation::ReadCommitted => "read_committed",
                Isolation::ReadUncommitted => "read_uncommitted",
            },
        )
        .create()
        .expect("librdkafka consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .expect("assignment");
    }
    consumer.assign(&assignment).expect("assign");
    let mut out: Vec<Vec<ReadRecord>> = vec![Vec::new(); partitions as usize];
    let mut at_eof = vec![false; partitions as usize];
    let deadline = Instant::now() + timeout;
    while at_eof.iter().any(|e| !e) {
        assert!(Instant::now() < deadline, "read back timed out; eof: {at_eof:?}");
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                let p = m.partition() as usize;
                at_eof[p] = false;
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                            .collect()
                    })
                    .unwrap_or_default();
                out[p].push(ReadRecord {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    payload: m.payload().map(<[u8]>::to_vec),
                    headers,
                    timestamp: m.timestamp().to_millis().unwrap_or(-1),
                });
            }
            Some(Err(KafkaError::PartitionEOF(p))) => at_eof[p as usize] = true,
            Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::UnknownTopicOrPartition))) => {}
            Some(Err(e)) => panic!("consumer error: {e}"),
        }
    }
    out
}
