//! Keyless records' partition choice, per calling thread: each thread keeps its own
//! [`StickyPartitioner`] per (producer, topic) in a thread-local list, so that choosing a
//! partition takes no lock and hashes nothing. Java's built-in partitioner shares one choice
//! per topic among all threads behind a lock; here each thread fills its own partition's batch
//! for about `batch.size` bytes and then moves on. Records of one thread stay in send order
//! whatever partition they go to.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::partitioner::StickyPartitioner;

/// Entries a thread keeps; past this the oldest goes (a thread that cycles through more
/// topics than this just starts those topics' choice afresh).
const MAX_ENTRIES: usize = 64;

struct Entry {
    producer: u64,
    topic: Arc<str>,
    state: StickyPartitioner,
}

thread_local! {
    static STICKY: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// A process-unique id for a producer's entries (an address could be reused by the next one).
pub(crate) fn next_producer_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The partition of the next keyless record of `bytes` to `topic` from this thread, and the
/// record counted against it. When the sticky partition switches, `next` chooses the new one
/// from a fresh random value (`None`: uniformly over all partitions).
pub(crate) fn partition(
    producer: u64,
    topic: &Arc<str>,
    partition_count: i32,
    batch_size: usize,
    bytes: usize,
    rng_next: u64,
    next: impl FnOnce(u64) -> Option<i32>,
) -> i32 {
    STICKY.with(|entries| {
        let mut entries = entries.borrow_mut();
        let found = entries.iter().position(|e| {
            e.producer == producer && (Arc::ptr_eq(&e.topic, topic) || e.topic == *topic)
        });
        let index = match found {
            Some(i) => i,
            None => {
                if entries.len() >= MAX_ENTRIES {
                    entries.remove(0);
                }
                entries.push(Entry {
                    producer,
                    topic: topic.clone(),
                    state: StickyPartitioner::new(batch_size.max(1)),
                });
                entries.len() - 1
            }
        };
        let state = &mut entries[index].state;
        let p = state.partition_with(partition_count, &[], rng_next, next);
        state.on_append(bytes);
        p
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_sticks_to_one_partition_for_about_two_batches_then_moves() {
        let producer = next_producer_id();
        let topic: Arc<str> = Arc::from("sticky-a");
        let first = partition(producer, &topic, 1000, 100, 10, 7, |_| None);
        // 2 × batch.size bytes: the first 20 records of 10 bytes stay.
        for i in 1..20 {
            assert_eq!(
                partition(producer, &topic, 1000, 100, 10, i, |_| None),
                first
            );
        }
        let moved =
            (0..20).any(|i| partition(producer, &topic, 1000, 100, 10, i, |_| None) != first);
        assert!(
            moved,
            "a new partition is drawn after 200 bytes (1 in 1000 draws it again)"
        );
    }

    #[test]
    fn threads_and_producers_keep_their_own_choice() {
        const COUNT: i32 = 1 << 20;
        const BATCH: usize = 1 << 30;
        // The draw maps the high bits: seeds that differ there draw apart.
        const SEED_B: u64 = (1 << 62) | 99;
        let fresh = |rng| StickyPartitioner::new(BATCH).partition(COUNT, &[], rng);
        assert_ne!(
            fresh(11),
            fresh(SEED_B),
            "the seeds below draw different partitions"
        );
        let (a, b) = (next_producer_id(), next_producer_id());
        let topic: Arc<str> = Arc::from("sticky-b");
        assert_eq!(
            partition(a, &topic, COUNT, BATCH, 1, 11, |_| None),
            fresh(11)
        );
        // Another producer, and another thread with the same producer, draw afresh.
        assert_eq!(
            partition(b, &topic, COUNT, BATCH, 1, SEED_B, |_| None),
            fresh(SEED_B)
        );
        let other = std::thread::spawn({
            let topic = topic.clone();
            move || partition(a, &topic, COUNT, BATCH, 1, SEED_B, |_| None)
        })
        .join()
        .unwrap();
        assert_eq!(other, fresh(SEED_B));
        // This thread's choice for `a` stuck, also for an equal topic name in a new `Arc`.
        assert_eq!(
            partition(a, &Arc::from("sticky-b"), COUNT, BATCH, 1, SEED_B, |_| None),
            fresh(11)
        );
    }
}
