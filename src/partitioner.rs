//! The built-in partitioner: murmur2 for keyed records, sticky for the rest; and the
//! [`Partitioner`] trait an application implements to choose partitions itself.
//!
//! Keyed records must land where the Java client puts them, so that kacrab and Java producers
//! writing the same keys agree on partitions: murmur2 of the serialized key, made positive by
//! masking (not `abs`), modulo the topic's total partition count (`BuiltInPartitioner
//! .partitionForKey`). Records without a key go to a sticky partition that changes once enough
//! bytes went to it (`BuiltInPartitioner.updatePartitionInfo`); with adaptive partitioning
//! (KIP-794) the next sticky partition is drawn from a [`LoadTable`] that favours partitions
//! with shorter queues (`BuiltInPartitioner.updatePartitionLoadStats` and `nextPartition`).

/// An application's own partition choice, installed with
/// [`ProducerBuilder::partitioner`](crate::ProducerBuilder::partitioner) in place of the
/// built-in partitioner (Java's `partitioner.class`, which kacrab refuses: it names a Java
/// class).
///
/// [`partition`](Self::partition) is called on the thread that sends the record, for every
/// record sent without an explicit partition, with the record's topic, key and value and the
/// topic's partitions; it returns the record's partition. Java's
/// `Partitioner.partition(topic, key, keyBytes, value, valueBytes, cluster)` gets the key and
/// value twice (objects and serialized bytes); kacrab takes bytes only, so each comes once,
/// and [`Partitions`] stands for the part of Java's `Cluster` a partitioner uses: the
/// partition count and which partitions have a leader. Java's `configure` is the
/// application's own constructor, its `close` the partitioner's `Drop`; the deprecated
/// `onNewBatch` (KIP-794) is not kept. `partitioner.ignore.keys` and adaptive partitioning
/// apply to the built-in partitioner only, as in Java.
///
/// A partition outside `0..partitions.count()` fails that record alone with
/// [`ProduceError::InvalidPartition`](crate::ProduceError::InvalidPartition); a panic in
/// `partition` is caught and fails that record alone with
/// [`ProduceError::PartitionerPanicked`](crate::ProduceError::PartitionerPanicked). Either
/// way the producer goes on. `partition` runs on the sending thread in the middle of `send`:
/// it should be quick and must not block.
///
/// ```
/// use kacrab::partitioner::{partition_for_key, Partitioner, Partitions};
///
/// /// Records keyed `audit:*` go to partition 0; other keys are hashed over the rest.
/// struct AuditFirst;
///
/// impl Partitioner for AuditFirst {
///     fn partition(
///         &self,
///         _topic: &str,
///         key: Option<&[u8]>,
///         _value: Option<&[u8]>,
///         partitions: &Partitions<'_>,
///     ) -> i32 {
///         match key {
///             Some(k) if k.starts_with(b"audit:") => 0,
///             Some(k) if partitions.count() > 1 => {
///                 1 + partition_for_key(k, partitions.count() - 1)
///             }
///             _ => partitions.available().next().unwrap_or(0),
///         }
///     }
/// }
/// ```
pub trait Partitioner: Send + Sync {
    /// The partition of a record of `topic` with `key` and `value`, in `0..partitions.count()`.
    fn partition(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        partitions: &Partitions<'_>,
    ) -> i32;
}

/// A topic's partitions as a [`Partitioner`] sees them: how many there are, and which are
/// available (have a leader, as far as the producer knows; a partition whose shard has not
/// yet learnt its leader counts as available). The availability is looked up only if asked
/// for.
pub struct Partitions<'a> {
    count: i32,
    is_available: &'a dyn Fn(i32) -> bool,
}

impl<'a> Partitions<'a> {
    /// `count` partitions, `is_available` telling which are available.
    pub(crate) fn new(count: i32, is_available: &'a dyn Fn(i32) -> bool) -> Self {
        Partitions {
            count,
            is_available,
        }
    }

    /// The topic's partition count (available or not): partitions are `0..count()`.
    pub fn count(&self) -> i32 {
        self.count
    }

    /// Whether `partition` is one of the topic's and has a leader.
    pub fn is_available(&self, partition: i32) -> bool {
        (0..self.count).contains(&partition) && (self.is_available)(partition)
    }

    /// The available partitions, in increasing order (Java's
    /// `Cluster.availablePartitionsForTopic`).
    pub fn available(&self) -> impl Iterator<Item = i32> + '_ {
        (0..self.count).filter(|&p| (self.is_available)(p))
    }
}

impl std::fmt::Debug for Partitions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partitions")
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

/// Kafka's murmur2 (`Utils.murmur2`): MurmurHash2, 32-bit, seed 0x9747b28c, over little-endian
/// 4-byte words with a 1-3 byte tail. Returns the signed value Java returns.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    // Java mixes the length in as an `int`; arrays never exceed that, so the cast is exact.
    let mut h = SEED ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        // Same as Java's fall-through switch: each tail byte goes in at its position.
        for (index, &byte) in tail.iter().enumerate() {
            h ^= u32::from(byte) << (8 * index);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Clears the sign bit (`Utils.toPositive`). Unlike `abs`, it maps `i32::MIN` to 0 rather than
/// overflowing, and it is what Java uses, so it must not be replaced by `abs`.
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// Partition of a keyed record: `to_positive(murmur2(key)) % num_partitions`, over the topic's
/// total partition count (available or not), as Java does.
///
/// # Panics
/// If `num_partitions` is not positive; metadata never reports a topic without partitions.
pub fn partition_for_key(key: &[u8], num_partitions: i32) -> i32 {
    assert!(num_partitions > 0, "topic has {num_partitions} partitions");
    to_positive(murmur2(key)) % num_partitions
}

/// Chooses partitions for records without a key, sticking to one partition so that its batches
/// fill before the next partition is used (Java's `BuiltInPartitioner`). Its own draw is
/// uniform; [`partition_with`](Self::partition_with) takes the caller's draw instead, which is
/// how the producer applies the adaptive [`LoadTable`].
///
/// Protocol, for one topic:
/// 1. [`partition`](Self::partition) returns the partition for the next record.
/// 2. After appending the record there, report its size with [`on_append`](Self::on_append)
///    and, if the append had to start a new batch, call [`on_new_batch`](Self::on_new_batch).
///
/// The partition changes at the next `partition` call once `2 × batch_size` bytes went to it, or
/// once at least `batch_size` bytes went to it and a new batch was started (Java switches
/// after `batch.size` bytes only if all of the partition's batches are full, and after twice that
/// regardless). The new partition is drawn uniformly from the partitions with a leader, or from
/// all partitions if none has one; it may be the same partition again, as in Java.
///
/// Randomness: a xorshift64 state lives inside; `rng_next` from the caller is mixed into it
/// before every draw. A caller with its own entropy passes a fresh value each time; a
/// deterministic test or simulation passes any fixed sequence and gets a reproducible choice.
#[derive(Debug, Clone)]
pub struct StickyPartitioner {
    batch_size: usize,
    /// The sticky partition; `None` until the first draw.
    current: Option<i32>,
    /// Bytes appended to `current` since it was chosen.
    produced_bytes: usize,
    /// Set when a switch rule fired; the draw happens at the next `partition` call.
    switch_pending: bool,
    /// Never 0: xorshift stays at 0 forever once there.
    rng_state: u64,
}

/// Fallback xorshift state, used at start and whenever mixing would leave the state at 0.
const RNG_DEFAULT_STATE: u64 = 0x9e37_79b9_7f4a_7c15;

impl StickyPartitioner {
    /// A partitioner that sticks for about `batch_size` bytes (the producer's `batch.size`).
    pub fn new(batch_size: usize) -> Self {
        Self {
            batch_size,
            current: None,
            produced_bytes: 0,
            switch_pending: false,
            rng_state: RNG_DEFAULT_STATE,
        }
    }

    /// Partition for the next keyless record of a topic with `topic_partition_count`
    /// partitions, of which `available` (partition ids) have a leader.
    ///
    /// # Panics
    /// If `topic_partition_count` is not positive.
    pub fn partition(
        &mut self,
        topic_partition_count: i32,
        available: &[i32],
        rng_next: u64,
    ) -> i32 {
        self.partition_with(topic_partition_count, available, rng_next, |_| None)
    }

    /// [`partition`](Self::partition), with the next sticky partition chosen by `next` when a
    /// switch is due: `next` gets a fresh random value and returns the partition (the adaptive
    /// draw from a [`LoadTable`], which only the caller can build). `None` from `next` falls back
    /// to the uniform draw over `available`.
    ///
    /// # Panics
    /// If `topic_partition_count` is not positive.
    pub fn partition_with(
        &mut self,
        topic_partition_count: i32,
        available: &[i32],
        rng_next: u64,
        next: impl FnOnce(u64) -> Option<i32>,
    ) -> i32 {
        assert!(
            topic_partition_count > 0,
            "topic has {topic_partition_count} partitions"
        );
        match self.current {
            // A partition id beyond the count can only come from metadata for a different
            // topic shape; draw again rather than return it.
            Some(current) if !self.switch_pending && current < topic_partition_count => current,
            _ => {
                let random = self.next_random(rng_next);
                match next(random).filter(|p| (0..topic_partition_count).contains(p)) {
                    Some(partition) => self.switch_to(partition),
                    None => self.draw_uniform(topic_partition_count, available, random),
                }
            }
        }
    }

    /// Reports `bytes` appended to the current partition.
    pub fn on_append(&mut self, bytes: usize) {
        self.produced_bytes = self.produced_bytes.saturating_add(bytes);
        if self.produced_bytes >= self.batch_size.saturating_mul(2) {
            self.switch_pending = true;
        }
    }

    /// Reports that the last append to the current partition started a new batch, i.e. the
    /// earlier ones are full. Switches only if at least `batch_size` bytes went to the partition,
    /// so a partition that inherited a half-full batch still gets a full batch's worth.
    pub fn on_new_batch(&mut self) {
        if self.produced_bytes >= self.batch_size {
            self.switch_pending = true;
        }
    }

    /// The sticky partition, if one was chosen.
    pub fn current_partition(&self) -> Option<i32> {
        self.current
    }

    fn draw_uniform(&mut self, topic_partition_count: i32, available: &[i32], random: u64) -> i32 {
        let partition = if available.is_empty() {
            uniform_index(random, topic_partition_count as usize) as i32
        } else {
            available[uniform_index(random, available.len())]
        };
        self.switch_to(partition)
    }

    fn switch_to(&mut self, partition: i32) -> i32 {
        self.current = Some(partition);
        self.produced_bytes = 0;
        self.switch_pending = false;
        partition
    }

    fn next_random(&mut self, rng_next: u64) -> u64 {
        let mut x = self.rng_state ^ rng_next;
        if x == 0 {
            x = RNG_DEFAULT_STATE;
        }
        // xorshift64 (Marsaglia), shifts 13, 7, 17.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng_state = x;
        x
    }
}

/// Java's `PartitionLoadStats`: the cumulative frequency table of the adaptive partitioner
/// (KIP-794), over the partitions that may be chosen, from which the next sticky partition is
/// drawn with a probability that falls as its queue grows.
///
/// Each partition's weight is `max + 1 - queue`, where `max` is the longest queue among them:
/// the longest queue weighs 1, an empty one `max + 1`. The table holds the running sums, so a
/// uniform draw in `0..total` falls in partition `i`'s span `[table[i-1], table[i])` with
/// probability `weight[i] / total`. For queues `0 3 1` the weights are `4 1 3` and the table
/// `4 5 8` (Java's own example).
///
/// The table is rebuilt only when a sticky partition is switched (about once per `batch.size`
/// bytes), into the same buffers, so a caller keeps one and allocates only when a topic grows.
#[derive(Debug, Clone, Default)]
pub struct LoadTable {
    /// Running sums of the weights; strictly increasing (every weight is at least 1).
    cumulative: Vec<u64>,
    /// The partition of each entry of `cumulative`.
    partitions: Vec<i32>,
}

impl LoadTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds the table from `(partition, queue)` pairs of the partitions that may be chosen
    /// (those with a leader, less those `partitioner.availability.timeout.ms` excludes), for a
    /// topic of `partition_count` partitions. True when the weighted draw applies; false when
    /// the choice should be uniform, as Java's `updatePartitionLoadStats` decides: no partition
    /// may be chosen, the topic has fewer than 2 partitions, or every partition may be chosen
    /// and all their queues are equal.
    pub fn rebuild(
        &mut self,
        queues: impl IntoIterator<Item = (i32, u32)>,
        partition_count: i32,
    ) -> bool {
        self.cumulative.clear();
        self.partitions.clear();
        for (partition, queue) in queues {
            self.partitions.push(partition);
            self.cumulative.push(u64::from(queue));
        }
        let length = self.cumulative.len();
        if length < 1 || partition_count < 2 {
            self.cumulative.clear();
            self.partitions.clear();
            return false;
        }
        let max = self.cumulative.iter().copied().max().unwrap_or(0);
        let all_equal = self.cumulative.iter().all(|&q| q == max);
        if all_equal && length == partition_count as usize {
            self.cumulative.clear();
            self.partitions.clear();
            return false;
        }
        let mut sum = 0u64;
        for entry in &mut self.cumulative {
            sum += max + 1 - *entry;
            *entry = sum;
        }
        true
    }

    /// The partition a uniform 64-bit `random` value draws: the first entry whose running sum
    /// is strictly greater than `random` reduced to `0..total` (Java's `Arrays.binarySearch`
    /// plus one). `None` when the table is empty.
    pub fn pick(&self, random: u64) -> Option<i32> {
        let total = *self.cumulative.last()?;
        let point = ((u128::from(random) * u128::from(total)) >> 64) as u64;
        let index = self.cumulative.partition_point(|&sum| sum <= point);
        self.partitions.get(index).copied()
    }

    /// The running sums, for tests and diagnostics.
    pub fn cumulative(&self) -> &[u64] {
        &self.cumulative
    }
}

/// Maps a uniform 64-bit value to `0..n` by multiply-and-shift: no division, and the bias is
/// below n / 2^64.
pub(crate) fn uniform_index(random: u64, n: usize) -> usize {
    ((u128::from(random) * n as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_java_vectors() {
        // Utils.murmur2 results from Kafka's UtilsTest.testMurmur2.
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107), // the byte array {'a', 'b', 'c'}
        ];
        for &(data, expected) in cases {
            assert_eq!(
                murmur2(data),
                expected,
                "murmur2({:?})",
                String::from_utf8_lossy(data)
            );
        }
    }

    #[test]
    fn murmur2_covers_every_tail_length() {
        // Lengths 0..8 exercise the empty input and tails of 0 to 3 bytes after 0 or 1 words;
        // the hashes must differ and be stable.
        let data = b"abcdefgh";
        let hashes: Vec<i32> = (0..=data.len()).map(|len| murmur2(&data[..len])).collect();
        for (i, a) in hashes.iter().enumerate() {
            for b in &hashes[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(murmur2(b""), murmur2(b""));
    }

    #[test]
    fn to_positive_masks_the_sign_bit() {
        assert_eq!(to_positive(0), 0);
        assert_eq!(to_positive(5), 5);
        assert_eq!(to_positive(-1), i32::MAX);
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(i32::MAX), i32::MAX);
        assert_eq!(to_positive(-790_332_482), 1_357_151_166);
    }

    #[test]
    fn partition_for_key_matches_java() {
        // to_positive(-790332482) = 1357151166.
        assert_eq!(partition_for_key(b"foobar", 10), 6);
        assert_eq!(partition_for_key(b"foobar", 7), 1_357_151_166 % 7);
        assert_eq!(partition_for_key(b"foobar", 1), 0);
        for partitions in 1..64 {
            let partition = partition_for_key(b"21", partitions);
            assert!((0..partitions).contains(&partition));
        }
    }

    #[test]
    #[should_panic(expected = "0 partitions")]
    fn partition_for_key_rejects_zero_partitions() {
        partition_for_key(b"k", 0);
    }

    #[test]
    fn sticks_until_twice_the_batch_size() {
        let mut sticky = StickyPartitioner::new(100);
        let first = sticky.partition(1000, &[], 1);
        for _ in 0..19 {
            sticky.on_append(10);
            assert_eq!(sticky.partition(1000, &[], 2), first);
        }
        sticky.on_append(10); // 200 bytes: 2 × batch_size
        let second = sticky.partition(1000, &[], 3);
        assert_eq!(sticky.current_partition(), Some(second));
        // With 1000 partitions, a repeat of the same partition under this fixed seed would be a
        // coincidence; the draw is deterministic, so this does not flake.
        assert_ne!(second, first);
        // The byte count restarts with the new partition.
        sticky.on_append(199);
        assert_eq!(sticky.partition(1000, &[], 4), second);
    }

    #[test]
    fn new_batch_switches_only_after_a_batch_worth_of_bytes() {
        let mut sticky = StickyPartitioner::new(100);
        let first = sticky.partition(1000, &[], 1);
        sticky.on_append(50);
        sticky.on_new_batch();
        assert_eq!(sticky.partition(1000, &[], 2), first);
        sticky.on_append(50);
        sticky.on_new_batch();
        assert_ne!(sticky.partition(1000, &[], 3), first);
    }

    #[test]
    fn draws_only_available_partitions() {
        let available = [3, 7, 11];
        let mut sticky = StickyPartitioner::new(0);
        let mut seen = [0u32; 12];
        for step in 0..3000u64 {
            let partition = sticky.partition(12, &available, step);
            assert!(available.contains(&partition), "drew {partition}");
            seen[partition as usize] += 1;
            // batch_size 0: every append switches.
            sticky.on_append(1);
        }
        for &partition in &available {
            let count = seen[partition as usize];
            assert!(
                (800..1200).contains(&count),
                "partition {partition}: {count}"
            );
        }
    }

    #[test]
    fn draws_all_partitions_when_none_is_available() {
        let mut sticky = StickyPartitioner::new(0);
        let mut seen = [0u32; 8];
        for _ in 0..8000 {
            let partition = sticky.partition(8, &[], 0);
            seen[partition as usize] += 1;
            sticky.on_append(1);
        }
        assert!(
            seen.iter().all(|&count| (800..1200).contains(&count)),
            "{seen:?}"
        );
    }

    #[test]
    fn same_inputs_give_the_same_choices() {
        let run = || {
            let mut sticky = StickyPartitioner::new(10);
            (0..100u64)
                .map(|step| {
                    let partition = sticky.partition(16, &[], step.wrapping_mul(0x1234_5678));
                    sticky.on_append(7);
                    partition
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn caller_entropy_that_cancels_the_state_does_not_stall_the_rng() {
        let mut sticky = StickyPartitioner::new(0);
        let state = sticky.rng_state;
        sticky.partition(4, &[], state);
        assert_ne!(sticky.rng_state, 0);
    }

    #[test]
    fn load_table_weighs_each_partition_max_plus_one_minus_its_queue() {
        // Java's example in `updatePartitionLoadStats`: queues 0 3 1 give the table 4 5 8.
        let mut table = LoadTable::new();
        assert!(table.rebuild([(0, 0), (1, 3), (2, 1)], 3));
        assert_eq!(table.cumulative(), &[4, 5, 8]);
        // Draws 0..4 of 8 go to partition 0, 4 to partition 1, 5..8 to partition 2: a random
        // value `r` maps to the point `r * 8 / 2^64`.
        let at = |point: u64| table.pick(point << 61).unwrap();
        let picks: Vec<i32> = (0..8).map(at).collect();
        assert_eq!(picks, [0, 0, 0, 0, 1, 2, 2, 2]);
        assert_eq!(table.pick(u64::MAX), Some(2));
    }

    #[test]
    fn load_table_is_uniform_when_every_partition_is_available_with_equal_queues() {
        let mut table = LoadTable::new();
        assert!(!table.rebuild([(0, 2), (1, 2), (2, 2)], 3));
        assert_eq!(table.pick(7), None);
        // Equal queues but a partition left out (no leader, or past the availability
        // timeout): still weighted, so the left-out partition is never drawn.
        assert!(table.rebuild([(0, 2), (2, 2)], 3));
        assert_eq!(table.cumulative(), &[1, 2]);
        assert!((0..64u64).all(|i| table.pick(i << 58) != Some(1)));
        // Nothing may be chosen, or a topic of one partition: uniform.
        assert!(!table.rebuild([], 3));
        assert!(!table.rebuild([(0, 5)], 1));
    }

    #[test]
    fn load_table_draws_in_proportion_to_the_weights() {
        let mut table = LoadTable::new();
        // Weights 9 1 9 1 (queues 0 8 0 8): the long queues get 1 draw in 20 each.
        assert!(table.rebuild([(0, 0), (1, 8), (2, 0), (3, 8)], 4));
        let mut seen = [0u32; 4];
        // Evenly spaced values over the whole range (rounded up, so that the i-th lands at
        // point i * 20 / n or just above): the counts are exact.
        let n = 2000u128;
        for i in 0..n {
            let random = (i << 64).div_ceil(n) as u64;
            seen[table.pick(random).unwrap() as usize] += 1;
        }
        assert_eq!(seen, [900, 100, 900, 100]);
    }

    #[test]
    fn adaptive_switch_takes_the_callers_choice_and_falls_back_to_uniform() {
        let mut sticky = StickyPartitioner::new(10);
        assert_eq!(sticky.partition_with(8, &[], 1, |_| Some(5)), 5);
        // Sticky until a switch is due: `next` is not asked.
        sticky.on_append(5);
        assert_eq!(sticky.partition_with(8, &[], 2, |_| unreachable!()), 5);
        sticky.on_append(15);
        // An answer out of range, or none, falls back to the uniform draw over `available`.
        assert_eq!(sticky.partition_with(8, &[3], 3, |_| Some(8)), 3);
        sticky.on_append(20);
        assert_eq!(sticky.partition_with(8, &[6], 4, |_| None), 6);
    }

    #[test]
    fn a_shrunken_partition_count_forces_a_new_draw() {
        let mut sticky = StickyPartitioner::new(1 << 20);
        assert_eq!(sticky.partition(100, &[5], 9), 5);
        let partition = sticky.partition(3, &[0, 1, 2], 9);
        assert!((0..3).contains(&partition));
    }
}
