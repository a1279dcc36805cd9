//! The partitions' load as the calling threads' partitioner reads it: per topic, each
//! partition's queue and whether it may be chosen, written by the shard that owns the
//! partition and read by a calling thread only when its sticky partition switches (about once
//! per `batch.size` bytes) or when an application's `Partitioner` asks which partitions are
//! available.
//!
//! Java computes these numbers in `RecordAccumulator.partitionReady` on the sender thread and
//! hands them to the topic's `BuiltInPartitioner.updatePartitionLoadStats`; here a partition's
//! numbers live on the shard that owns it, so each shard publishes its own partitions
//! ([`LoadPublisher`], at the end of a turn, at most once per [`PUBLISH_INTERVAL_US`]) into one
//! word per partition. A shard that parks right after a turn whose publish was held back
//! publishes at its next turn, at most the driver's longest park (50 ms) later.
//! A word is written only when it changed, so a steady partition costs its reader no cache
//! miss. Readers see each word atomically but not a topic's words at one instant; a table
//! drawn from them is as fresh as Java's, which also reads queues without a common lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::engine::{Delivery, Engine};

/// The bit of a partition's word that marks it unavailable (no leader known to its shard, or a
/// leader past `partitioner.availability.timeout.ms`); the other bits hold its queue.
const UNAVAILABLE: u32 = 1 << 31;
/// The largest queue a word holds; longer queues are reported as this.
const MAX_QUEUE: u32 = UNAVAILABLE - 1;

/// How often a shard publishes its partitions' load: often enough that a switch every
/// `batch.size` bytes sees queues that are about one batch old, rare enough that a shard with
/// many partitions does not walk them on every turn.
pub(crate) const PUBLISH_INTERVAL_US: u64 = 1_000;

/// One topic's partitions: one word each.
pub(crate) struct TopicLoad {
    words: Box<[AtomicU32]>,
}

impl TopicLoad {
    fn new(partition_count: usize) -> TopicLoad {
        TopicLoad {
            // Until its shard says otherwise a partition is available with an empty queue:
            // the topic's metadata gave it, so it has a leader as far as anyone knows.
            words: (0..partition_count).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// The number of partitions.
    pub(crate) fn len(&self) -> usize {
        self.words.len()
    }

    /// Sets `partition`'s word, if it is in the topic and changed.
    pub(crate) fn store(&self, partition: i32, queue: usize, available: bool) {
        let Some(word) = usize::try_from(partition)
            .ok()
            .and_then(|p| self.words.get(p))
        else {
            return;
        };
        let queue = u32::try_from(queue).unwrap_or(MAX_QUEUE).min(MAX_QUEUE);
        let value = if available {
            queue
        } else {
            queue | UNAVAILABLE
        };
        if word.load(Ordering::Relaxed) != value {
            word.store(value, Ordering::Relaxed);
        }
    }

    /// `partition`'s queue and availability (`None` outside the topic).
    pub(crate) fn get(&self, partition: i32) -> Option<(u32, bool)> {
        let word = self
            .words
            .get(usize::try_from(partition).ok()?)?
            .load(Ordering::Relaxed);
        Some((word & MAX_QUEUE, word & UNAVAILABLE == 0))
    }

    /// The available partitions with their queues, in partition order.
    pub(crate) fn available(&self) -> impl Iterator<Item = (i32, u32)> + '_ {
        (0..self.words.len() as i32).filter_map(|p| match self.get(p) {
            Some((queue, true)) => Some((p, queue)),
            _ => None,
        })
    }
}

/// Every topic's [`TopicLoad`], shared by the shards and the calling threads.
#[derive(Default)]
pub(crate) struct PartitionLoads {
    topics: RwLock<HashMap<Arc<str>, Arc<TopicLoad>>>,
    /// Bumped whenever a topic's entry is added or replaced, so a shard knows its cached
    /// entries may be stale.
    generation: AtomicU64,
}

impl PartitionLoads {
    /// `topic`'s load for `partition_count` partitions: the entry in place, or a new one when
    /// there is none or the topic's partition count changed (its partitions start available
    /// with empty queues until their shards publish). Takes the read lock; the write lock only
    /// to add or replace.
    pub(crate) fn topic(&self, topic: &Arc<str>, partition_count: i32) -> Arc<TopicLoad> {
        let count = usize::try_from(partition_count).unwrap_or(0);
        if let Some(load) = self.topics.read().expect("load lock").get(topic) {
            if load.len() == count {
                return load.clone();
            }
        }
        let mut topics = self.topics.write().expect("load lock");
        let load = topics
            .entry(topic.clone())
            .or_insert_with(|| Arc::new(TopicLoad::new(count)));
        if load.len() != count {
            *load = Arc::new(TopicLoad::new(count));
        }
        self.generation.fetch_add(1, Ordering::Release);
        load.clone()
    }

    /// `topic`'s load if a caller made one.
    pub(crate) fn existing(&self, topic: &str) -> Option<Arc<TopicLoad>> {
        self.topics.read().expect("load lock").get(topic).cloned()
    }
}

/// A shard's side: publishes its engine's partitions into the shared [`PartitionLoads`].
pub(crate) struct LoadPublisher {
    loads: Arc<PartitionLoads>,
    /// The entry of each of the engine's partitions, by its index in the engine's list (which
    /// only grows); `None` when no caller made one yet.
    entries: Vec<Option<Arc<TopicLoad>>>,
    /// The `PartitionLoads` generation `entries` were looked up at.
    generation: u64,
    /// When the last publish was, on the shard's clock (µs).
    last: Option<u64>,
}

impl LoadPublisher {
    pub(crate) fn new(loads: Arc<PartitionLoads>) -> LoadPublisher {
        LoadPublisher {
            loads,
            entries: Vec::new(),
            generation: u64::MAX,
            last: None,
        }
    }

    /// Publishes every partition of `engine`, unless the last publish was less than
    /// [`PUBLISH_INTERVAL_US`] ago.
    pub(crate) fn publish<D: Delivery>(&mut self, engine: &Engine<D>, now: u64) {
        if self
            .last
            .is_some_and(|last| now.saturating_sub(last) < PUBLISH_INTERVAL_US)
        {
            return;
        }
        self.last = Some(now);
        let generation = self.loads.generation.load(Ordering::Acquire);
        if generation != self.generation {
            self.generation = generation;
            self.entries.clear();
        }
        for (index, load) in engine.partition_loads().enumerate() {
            // A caller that makes an entry bumps the generation, which cleared `entries`:
            // a partition is looked up again only then, or when it is new.
            if index == self.entries.len() {
                self.entries.push(self.loads.existing(&load.tp.topic));
            }
            if let Some(entry) = &self.entries[index] {
                entry.store(load.tp.partition, load.queue, load.available);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{EngineConfig, RecordMetadata, TopicPartition};
    use crate::error::ProduceError;

    struct Quiet;

    impl Delivery for Quiet {
        fn complete(self, _: Result<RecordMetadata, ProduceError>) {}
    }

    /// An engine holding one unsent record for `t`-1 (no metadata yet: no leader).
    fn engine() -> Engine<Quiet> {
        let config = crate::ProducerConfig::builder()
            .bootstrap_servers("boot:9092")
            .build()
            .expect("config");
        let mut engine = Engine::new(EngineConfig::from_producer_config(&config, true));
        let tp = TopicPartition::new("t", 1);
        engine.append(0, &tp, 0, None, Some(b"v"), &[], Quiet);
        engine
    }

    #[test]
    fn a_shard_publishes_its_partitions_once_a_caller_made_the_topic_and_at_most_each_interval() {
        let loads = Arc::new(PartitionLoads::default());
        let mut publisher = LoadPublisher::new(loads.clone());
        let engine = engine();
        // No caller switched on `t` yet: nothing to publish into.
        publisher.publish(&engine, 0);
        assert!(loads.existing("t").is_none());
        let topic: Arc<str> = Arc::from("t");
        let load = loads.topic(&topic, 3);
        // Within the interval: held back.
        publisher.publish(&engine, PUBLISH_INTERVAL_US - 1);
        assert_eq!(load.get(1), Some((0, true)));
        // Once the interval is over: the record's batch is queued on a partition without a
        // known leader.
        publisher.publish(&engine, PUBLISH_INTERVAL_US);
        assert_eq!(load.get(1), Some((1, false)));
        assert_eq!(load.get(0), Some((0, true)), "a partition no shard holds");
    }

    #[test]
    fn a_word_holds_the_queue_and_the_availability() {
        let load = TopicLoad::new(3);
        assert_eq!(load.get(1), Some((0, true)), "available and empty at first");
        load.store(1, 7, false);
        load.store(2, usize::MAX, true);
        assert_eq!(load.get(1), Some((7, false)));
        assert_eq!(load.get(2), Some((MAX_QUEUE, true)), "a queue saturates");
        assert_eq!(load.get(3), None);
        load.store(3, 1, true); // outside the topic: ignored
        assert_eq!(
            load.available().collect::<Vec<_>>(),
            [(0, 0), (2, MAX_QUEUE)]
        );
    }

    #[test]
    fn a_changed_partition_count_replaces_the_topic_entry_and_bumps_the_generation() {
        let loads = PartitionLoads::default();
        let topic: Arc<str> = Arc::from("t");
        let first = loads.topic(&topic, 2);
        let generation = loads.generation.load(Ordering::Acquire);
        assert!(Arc::ptr_eq(&first, &loads.topic(&topic, 2)));
        assert_eq!(loads.generation.load(Ordering::Acquire), generation);
        let grown = loads.topic(&topic, 4);
        assert_eq!(grown.len(), 4);
        assert!(loads.generation.load(Ordering::Acquire) > generation);
        assert!(Arc::ptr_eq(&grown, &loads.existing("t").unwrap()));
    }
}
