//! Consumer-group offsets as the group coordinator keeps them: committed offsets per group,
//! and the transactional offsets of each producer that wait for its transaction's marker.
//!
//! Mirrors Kafka's `OffsetMetadataManager` (`commitTransactionalOffset`,
//! `replayEndTransactionMarker`, `fetchOffsets`) without a `__consumer_offsets` log: a
//! TxnOffsetCommit goes straight into `pending`, and the coordinator's marker for the group's
//! offsets partition moves it into `committed` (COMMIT) or drops it (ABORT). Groups have no
//! members in this model: offsets are all it remembers.

use std::collections::{BTreeMap, HashMap};

use super::error_codes::*;

/// Kafka's internal offsets topic; transactions name its partitions like any other.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// `offsets.topic.num.partitions` default.
pub const OFFSETS_TOPIC_NUM_PARTITIONS: i32 = 50;
/// `offset.metadata.max.bytes` default.
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;

/// The `__consumer_offsets` partition of a group (`GroupCoordinatorService.partitionFor`):
/// the absolute value of Java's `String.hashCode` of the id, modulo the partition count.
/// Java hashes UTF-16 code units; ids outside the BMP hash as their surrogate pairs.
pub fn offsets_partition_for(group_id: &str) -> i32 {
    let hash = group_id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    // Kafka `Utils.abs`: `Integer.MIN_VALUE` maps to 0.
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % OFFSETS_TOPIC_NUM_PARTITIONS
}

/// One committed (or pending) offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

#[derive(Debug, Default)]
struct Group {
    committed: BTreeMap<(String, i32), OffsetAndMetadata>,
    /// Producer id → offsets it committed in its open transaction
    /// (`pendingTransactionalOffsets`).
    pending: BTreeMap<i64, BTreeMap<(String, i32), OffsetAndMetadata>>,
}

/// Every group's offsets.
#[derive(Debug, Default)]
pub struct GroupOffsets {
    groups: HashMap<String, Group>,
}

impl GroupOffsets {
    /// A transactional offset commit of `producer_id` that passed every check: invisible to
    /// OffsetFetch until the marker. A later commit of the same partition in the same
    /// transaction replaces the earlier one.
    pub fn commit_transactional_offset(
        &mut self,
        group_id: &str,
        producer_id: i64,
        topic: &str,
        partition: i32,
        offset: OffsetAndMetadata,
    ) {
        self.groups
            .entry(group_id.to_string())
            .or_default()
            .pending
            .entry(producer_id)
            .or_default()
            .insert((topic.to_string(), partition), offset);
    }

    /// `replayEndTransactionMarker` for the marker of `producer_id` on offsets partition
    /// `offsets_partition`: COMMIT makes the pending offsets of every group on that partition
    /// committed, ABORT drops them. A producer with nothing pending is ignored. Returns how
    /// many offsets were committed or dropped.
    pub fn complete_transaction(
        &mut self,
        producer_id: i64,
        offsets_partition: i32,
        commit: bool,
    ) -> usize {
        let mut touched = 0;
        for (group_id, group) in &mut self.groups {
            if offsets_partition_for(group_id) != offsets_partition {
                continue;
            }
            let Some(pending) = group.pending.remove(&producer_id) else {
                continue;
            };
            touched += pending.len();
            if commit {
                // Every commit in the model is transactional, so the pending offset is always
                // the newest record of its partition (Kafka keeps a newer plain commit).
                group.committed.extend(pending);
            }
        }
        touched
    }

    /// Whether some producer has a pending transactional offset for the partition
    /// (`OffsetFetch` with `requireStable` answers UNSTABLE_OFFSET_COMMIT then).
    pub fn has_pending(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        let key = (topic.to_string(), partition);
        self.groups
            .get(group_id)
            .is_some_and(|g| g.pending.values().any(|p| p.contains_key(&key)))
    }

    pub fn committed(
        &self,
        group_id: &str,
        topic: &str,
        partition: i32,
    ) -> Option<&OffsetAndMetadata> {
        self.groups
            .get(group_id)?
            .committed
            .get(&(topic.to_string(), partition))
    }

    /// Every committed partition of a group, ordered.
    pub fn committed_partitions(&self, group_id: &str) -> Vec<(String, i32)> {
        self.groups
            .get(group_id)
            .map(|g| g.committed.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// One partition of an OffsetFetch (`fetchOffsets`): the committed offset (-1 if none),
    /// or UNSTABLE_OFFSET_COMMIT with `require_stable` while a transaction holds a pending one.
    pub fn fetch_offset(
        &self,
        group_id: &str,
        topic: &str,
        partition: i32,
        require_stable: bool,
    ) -> Result<Option<&OffsetAndMetadata>, i16> {
        if require_stable && self.has_pending(group_id, topic, partition) {
            return Err(UNSTABLE_OFFSET_COMMIT);
        }
        Ok(self.committed(group_id, topic, partition))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_partition_follows_java_string_hash_code() {
        // "" hashes to 0; "a" to 97; "group" to 98629247 (Java `"group".hashCode()`).
        assert_eq!(offsets_partition_for(""), 0);
        assert_eq!(offsets_partition_for("a"), 97 % 50);
        assert_eq!(offsets_partition_for("group"), 98_629_247 % 50);
        // "polygenelubricants" hashes to Integer.MIN_VALUE, which Kafka's abs maps to 0.
        assert_eq!(offsets_partition_for("polygenelubricants"), 0);
    }

    #[test]
    fn pending_offsets_become_committed_on_commit_and_vanish_on_abort() {
        let mut g = GroupOffsets::default();
        let at = |offset| OffsetAndMetadata {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
        };
        let part = offsets_partition_for("g");
        g.commit_transactional_offset("g", 7, "t", 0, at(10));
        assert_eq!(
            g.fetch_offset("g", "t", 0, true),
            Err(UNSTABLE_OFFSET_COMMIT)
        );
        assert_eq!(g.fetch_offset("g", "t", 0, false), Ok(None));
        assert_eq!(g.complete_transaction(7, (part + 1) % 50, true), 0);
        assert_eq!(g.complete_transaction(7, part, true), 1);
        assert_eq!(g.fetch_offset("g", "t", 0, true), Ok(Some(&at(10))));
        g.commit_transactional_offset("g", 7, "t", 0, at(20));
        assert_eq!(g.complete_transaction(7, part, false), 1);
        assert_eq!(g.committed("g", "t", 0), Some(&at(10)));
    }
}
