//! The record an application sends.

use std::sync::Arc;

use bytes::Bytes;

use crate::protocol::record_batch::Header;

/// A record header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    /// The header's key.
    pub key: String,
    /// The header's value (`None`: a null value).
    pub value: Option<Bytes>,
}

/// `headers` as the record encoder takes them (borrowed; no allocation without headers).
pub(crate) fn wire_headers(headers: &[RecordHeader]) -> Vec<Header<'_>> {
    headers
        .iter()
        .map(|h| Header {
            key: h.key.as_str(),
            value: h.value.as_deref(),
        })
        .collect()
}

/// One record to send (Java's `ProducerRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    /// The topic it goes to.
    pub topic: Arc<str>,
    /// An explicit partition, honoured as given.
    pub partition: Option<i32>,
    /// With a key, the partition is murmur2(key) modulo the partition count, as in Java.
    pub key: Option<Bytes>,
    /// The value (`None`: a null value, a tombstone on a compacted topic).
    pub value: Option<Bytes>,
    /// The headers, in order.
    pub headers: Vec<RecordHeader>,
    /// CreateTime in milliseconds; now when unset.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record of `value` for `topic`, with no key, no headers, and its partition and
    /// timestamp left to the producer.
    pub fn new(topic: impl Into<Arc<str>>, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            partition: None,
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
            timestamp: None,
        }
    }

    /// Sets the key (which, with no explicit partition, chooses the partition).
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sends to this partition.
    pub fn with_partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Appends a header.
    pub fn with_header(mut self, key: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push(RecordHeader {
            key: key.into(),
            value,
        });
        self
    }

    /// Sets the create time, in milliseconds since the Unix epoch.
    pub fn with_timestamp(mut self, timestamp_ms: i64) -> Self {
        self.timestamp = Some(timestamp_ms);
        self
    }

    /// A record with a null value (a tombstone).
    pub fn tombstone(topic: impl Into<Arc<str>>, key: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            partition: None,
            key: Some(key.into()),
            value: None,
            headers: Vec::new(),
            timestamp: None,
        }
    }
}
