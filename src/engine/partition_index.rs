//! Where a partition's slot is: found by its topic's table, then by the partition number as
//! an index into it.
//!
//! Why not one map keyed by topic and partition: every append looks its partition up, and a
//! map keyed by `(topic, partition)` hashes the topic's name every time (SipHash over its
//! bytes) whenever consecutive records go to different partitions, as keyed records do. Here
//! the topic is compared with the previous append's (the same `Arc<str>` from one sender is a
//! pointer comparison) and the partition indexes a vector, so a name is hashed only when the
//! topic changes.
//!
//! Invariant: slots are never removed, so an index handed out stays valid; a topic's table
//! never holds more entries than one past its highest partition seen (bounded by
//! [`MAX_DENSE_PARTITION`]; partitions beyond it, which no Kafka topic has, go to a map).

use std::collections::HashMap;
use std::sync::Arc;

use super::partition::TopicPartition;

/// The highest partition number kept in a topic's table; above it, `sparse` holds the slot.
pub const MAX_DENSE_PARTITION: i32 = 1 << 16;

/// No slot for this partition yet.
const NONE: usize = usize::MAX;

#[derive(Debug, Default)]
pub struct PartitionIndex {
    /// Each topic's slots by partition number (`NONE` where there is none).
    tables: Vec<(Arc<str>, Vec<usize>)>,
    /// A topic's position in `tables`.
    by_topic: HashMap<Arc<str>, usize>,
    /// The table the last lookup used.
    last_table: Option<usize>,
    /// The partition and slot the last lookup found, in `last_table`: consecutive appends
    /// mostly go to one partition (a sticky partitioner's batch, a burst of one key).
    last_slot: Option<(i32, usize)>,
    /// Partitions outside `0..=MAX_DENSE_PARTITION`.
    sparse: HashMap<TopicPartition, usize>,
}

impl PartitionIndex {
    /// The slot of `tp`, if it has one.
    pub fn get(&mut self, tp: &TopicPartition) -> Option<usize> {
        if let (Some((partition, slot)), Some(t)) = (self.last_slot, self.last_table) {
            // `Arc<str>` equality checks the pointer before the bytes.
            if partition == tp.partition && self.tables[t].0 == tp.topic {
                return Some(slot);
            }
        }
        let Some(dense) = dense(tp.partition) else {
            return self.sparse.get(tp).copied();
        };
        let table = self.table_of(&tp.topic)?;
        let slot = self.slot_at(table, dense)?;
        self.last_slot = Some((tp.partition, slot));
        Some(slot)
    }

    /// The slot of `tp` without moving the last-table shortcut (for readers holding `&self`).
    pub fn peek(&self, tp: &TopicPartition) -> Option<usize> {
        let Some(dense) = dense(tp.partition) else {
            return self.sparse.get(tp).copied();
        };
        let table = *self.by_topic.get(&tp.topic)?;
        self.slot_at(table, dense)
    }

    /// The slot at partition `dense` of table `table`, if one was inserted there.
    fn slot_at(&self, table: usize, dense: usize) -> Option<usize> {
        self.tables[table]
            .1
            .get(dense)
            .copied()
            .filter(|&slot| slot != NONE)
    }

    /// Records that `tp` lives in `slot`.
    pub fn insert(&mut self, tp: &TopicPartition, slot: usize) {
        debug_assert_ne!(slot, NONE, "a slot index, not the empty marker");
        self.last_slot = None;
        let Some(dense) = dense(tp.partition) else {
            self.sparse.insert(tp.clone(), slot);
            return;
        };
        let table = match self.table_of(&tp.topic) {
            Some(t) => t,
            None => {
                self.tables.push((tp.topic.clone(), Vec::new()));
                let t = self.tables.len() - 1;
                self.by_topic.insert(tp.topic.clone(), t);
                self.last_table = Some(t);
                t
            }
        };
        let slots = &mut self.tables[table].1;
        if slots.len() <= dense {
            slots.resize(dense + 1, NONE);
        }
        slots[dense] = slot;
    }

    fn table_of(&mut self, topic: &Arc<str>) -> Option<usize> {
        if let Some(t) = self.last_table {
            // `Arc<str>` equality checks the pointer before the bytes.
            if self.tables[t].0 == *topic {
                return Some(t);
            }
        }
        let t = *self.by_topic.get(topic)?;
        self.last_table = Some(t);
        self.last_slot = None;
        Some(t)
    }
}

fn dense(partition: i32) -> Option<usize> {
    (0..=MAX_DENSE_PARTITION)
        .contains(&partition)
        .then_some(partition as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_found_by_topic_and_partition_and_nothing_else() {
        let mut index = PartitionIndex::default();
        let a0 = TopicPartition::new("a", 0);
        let a5 = TopicPartition::new("a", 5);
        let b5 = TopicPartition::new("b", 5);
        index.insert(&a5, 0);
        index.insert(&b5, 1);
        index.insert(&a0, 2);
        assert_eq!(index.get(&a5), Some(0));
        assert_eq!(index.get(&b5), Some(1));
        assert_eq!(index.get(&a0), Some(2));
        // Same names in other `Arc`s: found by content.
        assert_eq!(index.get(&TopicPartition::new("b", 5)), Some(1));
        assert_eq!(index.peek(&TopicPartition::new("a", 0)), Some(2));
        // Holes in a table, partitions past its end, unknown topics.
        assert_eq!(index.get(&TopicPartition::new("a", 3)), None);
        assert_eq!(index.get(&TopicPartition::new("a", 6)), None);
        assert_eq!(index.get(&TopicPartition::new("c", 0)), None);
        assert_eq!(index.peek(&TopicPartition::new("b", 0)), None);
        // The last lookup's shortcut never answers for another partition or topic.
        assert_eq!(index.get(&a5), Some(0));
        index.insert(&TopicPartition::new("a", 3), 4);
        assert_eq!(index.get(&TopicPartition::new("a", 3)), Some(4));
        assert_eq!(index.get(&a5), Some(0));
        assert_eq!(index.get(&TopicPartition::new("b", 5)), Some(1));
        assert_eq!(index.get(&TopicPartition::new("b", 3)), None);
    }

    #[test]
    fn partitions_outside_the_dense_range_are_kept_too() {
        let mut index = PartitionIndex::default();
        let high = TopicPartition::new("a", MAX_DENSE_PARTITION + 1);
        let negative = TopicPartition::new("a", -1);
        index.insert(&high, 7);
        index.insert(&negative, 8);
        assert_eq!(index.get(&high), Some(7));
        assert_eq!(index.get(&negative), Some(8));
        assert_eq!(index.peek(&high), Some(7));
        // The topic's table was not grown for them.
        assert!(index.tables.is_empty());
        let edge = TopicPartition::new("a", MAX_DENSE_PARTITION);
        index.insert(&edge, 9);
        assert_eq!(index.get(&edge), Some(9));
        assert_eq!(index.tables[0].1.len(), MAX_DENSE_PARTITION as usize + 1);
        assert_eq!(index.sparse.len(), 2);
    }

    #[test]
    fn a_topic_of_thousands_of_partitions_is_indexed_by_number_not_hashed() {
        let mut index = PartitionIndex::default();
        for p in [4_000, 0, 1] {
            index.insert(&TopicPartition::new("wide", p), p as usize);
        }
        assert!(index.sparse.is_empty(), "every partition is in the table");
        assert_eq!(index.tables[0].1.len(), 4_001);
        assert_eq!(index.get(&TopicPartition::new("wide", 4_000)), Some(4_000));
    }
}
