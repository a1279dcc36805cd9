//! `BufferPool`: the batch buffers of one shard, reused (Java's `BufferPool`, which keeps freed
//! `batch.size` buffers on a free list).
//!
//! A batch buffer is allocated with `batch.size` bytes of capacity. Without reuse, every batch
//! costs an allocation and, for large batches, fresh pages that the kernel maps and zeroes as the
//! records are written: at `batch.size=1048576` that page-fault work is a large share of the
//! client's CPU. A completed batch gives its buffer back here, and the next batch takes it.
//!
//! Invariants:
//! - every pooled buffer is empty and has at least `buffer_size` bytes of capacity and at most
//!   twice that (a larger one, from a record bigger than `batch.size`, is freed, not kept);
//! - the pool holds at most `max_idle` buffers (`idle_bytes` worth). It only ever holds
//!   buffers that were in use at the same time before, so it never raises the peak number of
//!   buffers the engine had, and it bounds what an engine keeps after a burst;
//! - with a room check ([`BufferPool::with_room`]), a buffer is kept only while the check
//!   says the idle buffers fit beside what is in use: the producer's one passes while
//!   `buffer.memory`'s count (less what finished batches are about to give back:
//!   `BufferMemory::idle_fits`) plus this pool's idle bytes stays within `buffer.memory`, so that,
//!   as in Java's `BufferPool` (whose free list is part of `totalMemory`), idle buffers are not
//!   memory on top of the bound when the producer is at it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::BytesMut;
use crossbeam::queue::SegQueue;

/// Says whether the pool may hold this many idle bytes (see [`BufferPool::with_room`]).
pub type RoomCheck = Box<dyn Fn(usize) -> bool + Send + Sync>;

/// Shared by the engines that give finished batches' buffers back and the application threads
/// that open batches, which take them. The free list is a lock-free queue that grows as buffers
/// come back (no slot is allocated for a buffer that never idles): one push per finished
/// batch, one pop per new batch, no lock.
pub struct BufferPool {
    buffer_size: usize,
    free: SegQueue<BytesMut>,
    /// Buffers on the free list or about to be pushed: taken before a push (so two threads
    /// returning buffers at once never pass the bound together), given back after a pop.
    idle: AtomicUsize,
    max_idle: usize,
    /// Whether idle buffers of this many bytes in all still fit (`with_room`).
    room: Option<RoomCheck>,
    /// Buffers taken from the free list, and buffers allocated; for tests and benchmarks.
    reused: AtomicU64,
    allocated: AtomicU64,
}

impl BufferPool {
    /// A pool of buffers of `buffer_size` bytes that keeps at most `idle_bytes` of them idle
    /// (at least one buffer, so that a producer with one busy partition reuses its buffer).
    pub fn new(buffer_size: usize, idle_bytes: usize) -> Self {
        let buffer_size = buffer_size.max(1);
        BufferPool {
            buffer_size,
            free: SegQueue::new(),
            idle: AtomicUsize::new(0),
            max_idle: (idle_bytes / buffer_size).max(1),
            room: None,
            reused: AtomicU64::new(0),
            allocated: AtomicU64::new(0),
        }
    }

    /// The pool keeps a returned buffer only if `room` accepts the idle bytes it would then
    /// hold; otherwise the buffer is freed.
    pub fn with_room(mut self, room: impl Fn(usize) -> bool + Send + Sync + 'static) -> Self {
        self.room = Some(Box::new(room));
        self
    }

    /// The size of the buffers the pool keeps.
    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    /// An empty buffer with at least `capacity` bytes: a pooled one if `capacity` is the pool's
    /// size or less, else a fresh allocation.
    pub fn allocate(&self, capacity: usize) -> BytesMut {
        if capacity <= self.buffer_size {
            if let Some(buf) = self.free.pop() {
                self.idle.fetch_sub(1, Ordering::AcqRel);
                self.reused.fetch_add(1, Ordering::Relaxed);
                return buf;
            }
        }
        self.allocated.fetch_add(1, Ordering::Relaxed);
        // A small request still gets a full-size buffer, so that it can come back to the pool.
        BytesMut::with_capacity(capacity.max(self.buffer_size))
    }

    /// Takes a buffer back once nothing else refers to its bytes. A buffer of the wrong size, or
    /// one more than the idle bound, is freed.
    pub fn deallocate(&self, mut buf: BytesMut) {
        let capacity = buf.capacity();
        if capacity < self.buffer_size || capacity > self.buffer_size.saturating_mul(2) {
            return;
        }
        // A full free list drops the buffer: the bound on idle memory.
        let Ok(before) = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_idle).then_some(n + 1)
            })
        else {
            return;
        };
        if let Some(room) = &self.room {
            if !room((before + 1).saturating_mul(capacity)) {
                self.idle.fetch_sub(1, Ordering::AcqRel);
                return;
            }
        }
        buf.clear();
        self.free.push(buf);
    }

    /// Buffers currently idle in the pool.
    pub fn idle(&self) -> usize {
        self.free.len()
    }

    /// How many buffers were reused and how many were allocated since the pool was made.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.reused.load(Ordering::Relaxed),
            self.allocated.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn a_returned_buffer_is_freed_not_kept_when_the_room_check_refuses_its_bytes() {
        let in_use = Arc::new(AtomicUsize::new(0));
        let limit = 10_000;
        let pool = BufferPool::new(1000, 1 << 20).with_room({
            let in_use = in_use.clone();
            move |idle| in_use.load(Ordering::Relaxed) + idle <= limit
        });
        pool.deallocate(BytesMut::with_capacity(1000));
        assert_eq!(pool.idle(), 1, "room for it: kept");
        in_use.store(8_500, Ordering::Relaxed);
        pool.deallocate(BytesMut::with_capacity(1000));
        assert_eq!(
            pool.idle(),
            1,
            "8,500 in use and 2,000 idle pass 10,000: freed"
        );
        in_use.store(8_000, Ordering::Relaxed);
        pool.deallocate(BytesMut::with_capacity(1000));
        assert_eq!(pool.idle(), 2, "8,000 and 2,000 fit: kept");
    }

    #[test]
    fn a_returned_buffer_is_reused_for_the_next_batch_without_a_new_allocation() {
        let pool = BufferPool::new(1024, 1 << 20);
        let mut buf = pool.allocate(1024);
        buf.extend_from_slice(&[7; 1000]);
        let ptr = buf.as_ptr();
        pool.deallocate(buf);
        let again = pool.allocate(1024);
        assert_eq!(again.as_ptr(), ptr, "the same allocation comes back");
        assert!(again.is_empty() && again.capacity() >= 1024);
        assert_eq!(pool.counts(), (1, 1));
    }

    #[test]
    fn a_buffer_that_went_through_bytes_comes_back_with_its_capacity() {
        // A batch's buffer is frozen into `Bytes` when its bytes become final, and given back by
        // `Bytes::try_into_mut` once its requests are gone: the capacity must survive that.
        let pool = BufferPool::new(4096, 1 << 20);
        let mut buf = pool.allocate(4096);
        buf.extend_from_slice(&[1; 100]);
        let ptr = buf.as_ptr();
        let frozen = buf.freeze();
        let back = frozen.try_into_mut().expect("unique");
        pool.deallocate(back);
        assert_eq!(pool.idle(), 1, "kept: capacity {}", 4096);
        assert_eq!(pool.allocate(4096).as_ptr(), ptr);
    }

    #[test]
    fn the_pool_keeps_no_more_idle_buffers_than_its_byte_bound() {
        let pool = BufferPool::new(1000, 3500);
        let bufs: Vec<_> = (0..10).map(|_| pool.allocate(1000)).collect();
        for b in bufs {
            pool.deallocate(b);
        }
        assert_eq!(pool.idle(), 3);
    }

    #[test]
    fn threads_returning_buffers_at_once_keep_the_idle_bound_together() {
        let pool = Arc::new(BufferPool::new(1000, 5500));
        let returners: Vec<_> = (0..4)
            .map(|_| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        pool.deallocate(BytesMut::with_capacity(1000));
                    }
                })
            })
            .collect();
        for r in returners {
            r.join().expect("returner");
        }
        assert_eq!(pool.idle(), 5, "5,500 bytes hold five buffers of 1,000");
    }

    #[test]
    fn oversized_and_undersized_buffers_are_freed_not_pooled() {
        let pool = BufferPool::new(1000, 1 << 20);
        let big = pool.allocate(5000);
        assert!(big.capacity() >= 5000);
        pool.deallocate(big);
        pool.deallocate(BytesMut::with_capacity(10));
        assert_eq!(pool.idle(), 0);
        // A request above the pool's size never gets a pooled buffer that is too small.
        pool.deallocate(BytesMut::with_capacity(1000));
        assert!(pool.allocate(1500).capacity() >= 1500);
        assert_eq!(pool.idle(), 1);
    }
}
