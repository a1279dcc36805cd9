//! ListOffsets: the offset for a timestamp, or for one of the special targets (earliest,
//! latest, the largest timestamp), as `UnifiedLog.fetchOffsetByTimestamp` finds it.

use super::error_codes::*;
use super::{Cluster, READ_COMMITTED};
use crate::testkit::batch::{self, BatchHeader};

/// One partition's answer to ListOffsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListOffsetsResult {
    /// The error code (0: none).
    pub error_code: i16,
    /// The offset found (-1: none).
    pub offset: i64,
    /// The timestamp of the record at `offset` (-1 for the special timestamps but
    /// [`MAX_TIMESTAMP`]).
    pub timestamp: i64,
    /// The leader epoch.
    pub leader_epoch: i32,
}

/// `ListOffsets` special timestamp: the log start offset.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// `ListOffsets` special timestamp: the end offset (the high watermark, or the last stable
/// offset for read_committed).
pub const LATEST_TIMESTAMP: i64 = -1;
/// `ListOffsets` special timestamp: the record with the greatest timestamp (KIP-734).
pub const MAX_TIMESTAMP: i64 = -3;

impl Cluster {
    /// ListOffsets of one partition (`UnifiedLog.fetchOffsetByTimestamp`): -2 earliest, -1
    /// latest (the last stable offset under read_committed), -3 the record with the largest
    /// timestamp, otherwise the first record with a timestamp at or after the target.
    pub fn list_offsets(
        &self,
        broker: i32,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation_level: i8,
        current_leader_epoch: i32,
    ) -> ListOffsetsResult {
        let failed = |error_code| ListOffsetsResult {
            error_code,
            offset: -1,
            timestamp: -1,
            leader_epoch: -1,
        };
        if !self.is_broker_up(broker) {
            return failed(NETWORK_EXCEPTION);
        }
        let p = match self.check_leader(broker, topic, partition, current_leader_epoch) {
            Ok(p) => p,
            Err((code, _)) => return failed(code),
        };
        let found = |offset: i64, timestamp: i64| ListOffsetsResult {
            error_code: NONE,
            offset,
            timestamp,
            leader_epoch: p.leader_epoch,
        };
        match timestamp {
            EARLIEST_TIMESTAMP => found(p.log_start_offset, -1),
            LATEST_TIMESTAMP if isolation_level == READ_COMMITTED => {
                found(p.last_stable_offset(), -1)
            }
            LATEST_TIMESTAMP => found(p.high_watermark(), -1),
            MAX_TIMESTAMP => {
                let best = p
                    .log()
                    .iter()
                    .filter(|b| b.max_timestamp >= 0)
                    .max_by_key(|b| (b.max_timestamp, std::cmp::Reverse(b.base_offset)));
                match best {
                    Some(b) => {
                        let header = BatchHeader::parse(&b.bytes).expect("stored batches parse");
                        let offset = batch::offset_of_timestamp(&b.bytes, &header, b.max_timestamp)
                            .unwrap_or(b.base_offset);
                        found(offset, b.max_timestamp)
                    }
                    None => found(-1, -1),
                }
            }
            target if target >= 0 => {
                let hit = p
                    .log()
                    .iter()
                    .filter(|b| b.max_timestamp >= target)
                    .find_map(|b| {
                        let header = BatchHeader::parse(&b.bytes).ok()?;
                        let offset = batch::offset_of_timestamp(&b.bytes, &header, target)?;
                        Some((
                            offset.max(p.log_start_offset),
                            header.base_timestamp.max(target),
                        ))
                    });
                match hit {
                    Some((offset, ts)) => found(offset, ts),
                    None => found(-1, -1),
                }
            }
            _ => failed(UNSUPPORTED_VERSION),
        }
    }
}
