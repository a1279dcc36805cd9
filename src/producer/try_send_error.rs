//! [`TrySendError`]: a record `try_send` gave back, and why.

use super::ProducerRecord;

/// A record [`Producer::try_send`](super::Producer::try_send) did not queue, given back unchanged.
#[derive(Debug)]
pub enum TrySendError {
    /// `buffer.memory` has no room for it now.
    BufferFull(Box<ProducerRecord>),
    /// Its topic's partition count is not known yet (it has been asked for).
    MetadataPending(Box<ProducerRecord>),
}

impl TrySendError {
    /// The record, to send again later.
    pub fn into_record(self) -> ProducerRecord {
        match self {
            TrySendError::BufferFull(record) | TrySendError::MetadataPending(record) => *record,
        }
    }
}

impl std::fmt::Display for TrySendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrySendError::BufferFull(r) => write!(
                f,
                "buffer.memory has no room for a record of {} now; nothing was queued",
                r.topic
            ),
            TrySendError::MetadataPending(r) => write!(
                f,
                "the partition count of {} is not known yet; nothing was queued",
                r.topic
            ),
        }
    }
}

impl std::error::Error for TrySendError {}
