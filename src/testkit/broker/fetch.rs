//! Fetch: a consumer's read of one partition, whole batches up to the high watermark or, under
//! read_committed, the last stable offset, with the aborted transactions that range covers.

use bytes::{Bytes, BytesMut};

use super::error_codes::*;
use super::{Cluster, READ_COMMITTED};

/// One partition's answer to a fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionResult {
    /// The error code (0: none).
    pub error_code: i16,
    /// The partition's high watermark.
    pub high_watermark: i64,
    /// The partition's last stable offset.
    pub last_stable_offset: i64,
    /// The partition's first stored offset.
    pub log_start_offset: i64,
    /// `Some` (possibly empty) for read_committed, `None` for read_uncommitted.
    pub aborted_transactions: Option<Vec<(i64, i64)>>,
    /// Whole stored batches, base offsets written.
    pub records: Bytes,
    /// On NOT_LEADER_OR_FOLLOWER: (leader, leader epoch), for Fetch v12+ (KIP-951).
    pub current_leader: Option<(i32, i32)>,
}

impl FetchPartitionResult {
    /// An error answer: offsets unknown (-1), no records.
    pub fn error(error_code: i16) -> Self {
        FetchPartitionResult {
            error_code,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            aborted_transactions: None,
            records: Bytes::new(),
            current_leader: None,
        }
    }
}

impl Cluster {
    /// A consumer fetch of one partition: whole batches from the one holding `fetch_offset`,
    /// up to the high watermark (read_uncommitted) or the last stable offset (read_committed),
    /// at most `max_bytes` except that the first batch is always returned whole (KIP-74).
    /// `max_bytes == 0` returns offsets only. `current_leader_epoch` is -1 when not given.
    #[allow(clippy::too_many_arguments)]
    pub fn fetch(
        &self,
        broker: i32,
        topic: &str,
        partition: i32,
        fetch_offset: i64,
        max_bytes: usize,
        isolation_level: i8,
        current_leader_epoch: i32,
    ) -> FetchPartitionResult {
        if !self.is_broker_up(broker) {
            return FetchPartitionResult::error(NETWORK_EXCEPTION);
        }
        let p = match self.check_leader(broker, topic, partition, current_leader_epoch) {
            Ok(p) => p,
            Err((code, current_leader)) => {
                return FetchPartitionResult {
                    current_leader,
                    ..FetchPartitionResult::error(code)
                }
            }
        };
        if fetch_offset < p.log_start_offset || fetch_offset > p.log_end_offset {
            return FetchPartitionResult::error(OFFSET_OUT_OF_RANGE);
        }
        let read_committed = isolation_level == READ_COMMITTED;
        let upper_bound = if read_committed {
            p.last_stable_offset()
        } else {
            p.high_watermark()
        };
        let mut records = BytesMut::new();
        // End of the returned data: the aborted list covers exactly what is returned.
        let mut returned_end = fetch_offset;
        if max_bytes > 0 {
            for stored in &p.log()[p.batch_index_for(fetch_offset)..] {
                if stored.base_offset >= upper_bound {
                    break;
                }
                if !records.is_empty() && records.len() + stored.bytes.len() > max_bytes {
                    break;
                }
                records.extend_from_slice(&stored.bytes);
                returned_end = stored.last_offset + 1;
            }
        }
        FetchPartitionResult {
            error_code: NONE,
            high_watermark: p.high_watermark(),
            last_stable_offset: p.last_stable_offset(),
            log_start_offset: p.log_start_offset,
            // `LocalLog.addAbortedTransactions` for read_committed; read_uncommitted carries
            // none at all (null).
            aborted_transactions: read_committed
                .then(|| p.aborted_transactions(fetch_offset, returned_end)),
            records: records.freeze(),
            current_leader: None,
        }
    }
}
