//! kacrab: a thread-per-core io_uring Kafka producer that writes records exactly once and in
//! order per partition, across retries, reconnects, broker failovers and lost responses.

pub mod config;
pub mod partitioner;
pub mod protocol;

#[cfg(feature = "testkit")]
pub mod testkit;
