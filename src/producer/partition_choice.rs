//! A record's partition, chosen on the sending thread as Java's `KafkaProducer.partition` and
//! `RecordAccumulator.append` choose it: the record's own partition; else the application's
//! [`Partitioner`]; else, for a keyed record unless `partitioner.ignore.keys`, murmur2 of the
//! key; else the calling thread's sticky partition (`sticky`), which, when it switches, draws
//! the next partition from the partitions' load under adaptive partitioning (KIP-794) or
//! uniformly from the available partitions.
//!
//! The per-record path of a keyless record is the sticky lookup alone: the topic's load
//! (`runtime::partition_load`) is read, under its read lock, only when the sticky partition
//! switches, about once per `batch.size` bytes, and the weighted table is rebuilt then into
//! this thread's buffer.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use crate::error::ProduceError;
use crate::partitioner::{partition_for_key, uniform_index, LoadTable, Partitioner, Partitions};
use crate::runtime::partition_load::{PartitionLoads, TopicLoad};

use super::record::ProducerRecord;
use super::sticky;

/// The application's partitioner as the builder holds it.
#[derive(Clone)]
pub(super) struct Custom(pub(super) Arc<dyn Partitioner>);

impl std::fmt::Debug for Custom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Partitioner")
    }
}

thread_local! {
    /// This thread's buffers for the adaptive draw, reused from switch to switch.
    static LOAD_TABLE: RefCell<LoadTable> = RefCell::new(LoadTable::new());
}

/// Chooses partitions for one producer.
pub(super) struct PartitionChoice {
    /// Process-unique: keys this producer's per-thread sticky partitions.
    pub(super) producer: u64,
    pub(super) custom: Option<Custom>,
    pub(super) loads: Arc<PartitionLoads>,
    /// `partitioner.ignore.keys`.
    pub(super) ignore_keys: bool,
    /// `partitioner.adaptive.partitioning.enable`.
    pub(super) adaptive: bool,
    /// `batch.size`: how long a thread sticks to a partition.
    pub(super) batch_size: usize,
}

impl PartitionChoice {
    /// The partition of `record`, a topic of `partition_count` partitions, whose size bound is
    /// `size` bytes; `rng` stirs the sticky choice's random source. An error fails this record
    /// alone.
    pub(super) fn choose(
        &self,
        record: &ProducerRecord,
        partition_count: i32,
        size: usize,
        rng: u64,
    ) -> Result<i32, ProduceError> {
        let invalid = |partition| ProduceError::InvalidPartition {
            topic: record.topic.clone(),
            partition,
            partition_count,
        };
        if let Some(p) = record.partition {
            return if (0..partition_count).contains(&p) {
                Ok(p)
            } else {
                Err(invalid(p))
            };
        }
        if let Some(Custom(custom)) = &self.custom {
            let p = self.ask(custom.as_ref(), record, partition_count)?;
            return if (0..partition_count).contains(&p) {
                Ok(p)
            } else {
                Err(invalid(p))
            };
        }
        if let (Some(key), false) = (&record.key, self.ignore_keys) {
            return Ok(partition_for_key(key, partition_count));
        }
        Ok(sticky::partition(
            self.producer,
            &record.topic,
            partition_count,
            self.batch_size,
            size,
            rng,
            |random| Some(self.next_sticky(&record.topic, partition_count, random)),
        ))
    }

    /// Calls the application's partitioner, isolated from it: a panic fails the record.
    fn ask(
        &self,
        custom: &dyn Partitioner,
        record: &ProducerRecord,
        partition_count: i32,
    ) -> Result<i32, ProduceError> {
        // The topic's load is looked up only if the partitioner asks which are available.
        let load = std::cell::OnceCell::<Arc<TopicLoad>>::new();
        let is_available = |p: i32| {
            load.get_or_init(|| self.loads.topic(&record.topic, partition_count))
                .get(p)
                .is_some_and(|(_, available)| available)
        };
        let partitions = Partitions::new(partition_count, &is_available);
        let asked = std::panic::catch_unwind(AssertUnwindSafe(|| {
            custom.partition(
                &record.topic,
                record.key.as_deref(),
                record.value.as_deref(),
                &partitions,
            )
        }));
        asked.map_err(|panic| {
            let message = crate::panics::panic_message(panic.as_ref());
            tracing::error!(
                target: "kacrab::producer",
                topic = &*record.topic,
                panic = %message,
                "the partitioner panicked"
            );
            ProduceError::PartitionerPanicked {
                topic: record.topic.clone(),
                message,
            }
        })
    }

    /// The next sticky partition of `topic` for the draw `random` (Java's
    /// `BuiltInPartitioner.nextPartition`): weighted by the partitions' queues when adaptive
    /// partitioning applies, else uniform over the available partitions, else over all.
    fn next_sticky(&self, topic: &Arc<str>, partition_count: i32, random: u64) -> i32 {
        let load = self.loads.topic(topic, partition_count);
        if self.adaptive {
            let weighted = LOAD_TABLE.with(|table| {
                let mut table = table.borrow_mut();
                if table.rebuild(load.available(), partition_count) {
                    table.pick(random)
                } else {
                    None
                }
            });
            if let Some(partition) = weighted {
                return partition;
            }
        }
        uniform_available(&load, partition_count, random)
    }
}

/// A partition drawn uniformly by `random` from `load`'s available partitions, or from all
/// `partition_count` if none is available (Java's `nextPartition` without load statistics).
fn uniform_available(load: &TopicLoad, partition_count: i32, random: u64) -> i32 {
    let available = load.available().count();
    if available == 0 {
        return uniform_index(random, partition_count as usize) as i32;
    }
    let nth = uniform_index(random, available);
    load.available()
        .nth(nth)
        .map(|(partition, _)| partition)
        .expect("the count just taken")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(custom: Option<Custom>, ignore_keys: bool, adaptive: bool) -> PartitionChoice {
        PartitionChoice {
            producer: sticky::next_producer_id(),
            custom,
            loads: Arc::new(PartitionLoads::default()),
            ignore_keys,
            adaptive,
            // Every record of more than one byte switches: each choice is a fresh draw.
            batch_size: 1,
        }
    }

    /// Records per partition of `n` keyless records to `topic` (4 partitions).
    fn spread(choice: &PartitionChoice, topic: &str, n: u64) -> [u32; 4] {
        let record = ProducerRecord::new(topic, &b"v"[..]);
        let mut seen = [0u32; 4];
        for i in 0..n {
            let p = choice
                .choose(&record, 4, 2, i.wrapping_mul(0x9e37_79b9))
                .unwrap();
            seen[p as usize] += 1;
        }
        seen
    }

    #[test]
    fn ignore_keys_partitions_keyed_records_as_keyless_ones() {
        let keyed = |choice: &PartitionChoice, topic: &str| {
            let mut partitions: Vec<i32> = (0..50)
                .map(|i| {
                    let record = ProducerRecord::new(topic, &b"v"[..]).with_key(format!("k{i}"));
                    choice.choose(&record, 16, 2, 1).unwrap()
                })
                .collect();
            partitions.dedup();
            partitions
        };
        let hashed = keyed(&choice(None, false, true), "keys-hashed");
        let expected: Vec<i32> = (0..50)
            .map(|i| partition_for_key(format!("k{i}").as_bytes(), 16))
            .collect::<Vec<_>>();
        let mut expected_dedup = expected.clone();
        expected_dedup.dedup();
        assert_eq!(hashed, expected_dedup, "keys are hashed by default");
        // Ignored keys: the sticky choice, which with a large batch.size stays on one.
        let mut ignoring = choice(None, true, true);
        ignoring.batch_size = 1 << 30;
        assert_eq!(keyed(&ignoring, "keys-ignored").len(), 1);
    }

    #[test]
    fn adaptive_draw_skips_unavailable_partitions_and_favours_short_queues() {
        let choice = choice(None, false, true);
        let topic: Arc<str> = Arc::from("adaptive");
        let load = choice.loads.topic(&topic, 4);
        load.store(0, 0, false);
        load.store(1, 9, true);
        // Weights: partition 1 weighs 9 + 1 - 9 = 1, partitions 2 and 3 weigh 10 each.
        let seen = spread(&choice, "adaptive", 2100);
        assert_eq!(seen[0], 0, "{seen:?}");
        // Expected 100 of 2100 for partition 1, 1000 for each of the others; the draws are a
        // fixed sequence, and these bounds are over 8 standard deviations wide.
        assert!(seen[1] < 200, "{seen:?}");
        assert!(seen[2] > 850 && seen[3] > 850, "{seen:?}");
    }

    #[test]
    fn without_adaptive_the_draw_is_uniform_over_available_partitions() {
        let choice = choice(None, false, false);
        let topic: Arc<str> = Arc::from("uniform");
        let load = choice.loads.topic(&topic, 4);
        load.store(0, 0, false);
        load.store(1, 9, true);
        let seen = spread(&choice, "uniform", 3000);
        assert_eq!(seen[0], 0, "{seen:?}");
        assert!(
            seen[1..].iter().all(|&n| (800..1200).contains(&n)),
            "{seen:?}"
        );
    }

    struct Fixed(i32);

    impl Partitioner for Fixed {
        fn partition(
            &self,
            _: &str,
            _: Option<&[u8]>,
            _: Option<&[u8]>,
            _: &Partitions<'_>,
        ) -> i32 {
            self.0
        }
    }

    #[test]
    fn a_custom_partition_out_of_range_fails_the_record_with_invalid_partition() {
        let record = ProducerRecord::new("custom", &b"v"[..]);
        for bad in [-1, 4, i32::MAX] {
            let choice = choice(Some(Custom(Arc::new(Fixed(bad)))), false, true);
            match choice.choose(&record, 4, 2, 1) {
                Err(ProduceError::InvalidPartition {
                    partition,
                    partition_count: 4,
                    ..
                }) => assert_eq!(partition, bad),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let choice = choice(Some(Custom(Arc::new(Fixed(3)))), false, true);
        assert_eq!(choice.choose(&record, 4, 2, 1), Ok(3));
        // An explicit partition is the record's own: the partitioner is not asked.
        assert_eq!(choice.choose(&record.with_partition(1), 4, 2, 1), Ok(1));
    }

    struct Panics;

    impl Partitioner for Panics {
        fn partition(
            &self,
            _: &str,
            _: Option<&[u8]>,
            _: Option<&[u8]>,
            _: &Partitions<'_>,
        ) -> i32 {
            panic!("no partition for you")
        }
    }

    #[test]
    fn a_panicking_custom_partitioner_fails_the_record_with_its_message() {
        let choice = choice(Some(Custom(Arc::new(Panics))), false, true);
        let record = ProducerRecord::new("custom", &b"v"[..]);
        for _ in 0..2 {
            match choice.choose(&record, 4, 2, 1) {
                Err(ProduceError::PartitionerPanicked { topic, message }) => {
                    assert_eq!(&*topic, "custom");
                    assert_eq!(message, "no partition for you");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// Answers the first available partition after the key's first byte, and records what it
    /// was shown.
    struct NextAvailable(std::sync::Mutex<Vec<(i32, Vec<i32>)>>);

    impl Partitioner for NextAvailable {
        fn partition(
            &self,
            _: &str,
            key: Option<&[u8]>,
            _: Option<&[u8]>,
            partitions: &Partitions<'_>,
        ) -> i32 {
            let available: Vec<i32> = partitions.available().collect();
            self.0
                .lock()
                .unwrap()
                .push((partitions.count(), available.clone()));
            let from = i32::from(key.unwrap()[0]);
            available.into_iter().find(|&p| p >= from).unwrap_or(-1)
        }
    }

    #[test]
    fn a_custom_partitioner_sees_the_count_and_the_available_partitions() {
        let custom = Arc::new(NextAvailable(Default::default()));
        let choice = choice(Some(Custom(custom.clone())), false, true);
        let topic: Arc<str> = Arc::from("custom-view");
        choice.loads.topic(&topic, 5).store(1, 3, false);
        let record = |k: u8| ProducerRecord::new(topic.clone(), &b"v"[..]).with_key(vec![k]);
        assert_eq!(choice.choose(&record(1), 5, 2, 1), Ok(2));
        assert_eq!(choice.choose(&record(0), 5, 2, 1), Ok(0));
        let seen = custom.0.lock().unwrap().clone();
        assert_eq!(seen, vec![(5, vec![0, 2, 3, 4]); 2]);
    }
}
