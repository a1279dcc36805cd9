//! Per-record latency: a send timestamp per in-flight record, taken just before `send`, and a
//! completion timestamp taken by the thread that completes the record (the waker runs on the
//! shard, right after the result is set). Latencies go into a lock-free log-linear histogram.
//!
//! Each in-flight record owns one slot of a ring; the slot holds its send time (+1, so 0 means
//! free). The waker handed to the record's `DeliveryFuture` carries the slot index, reads the
//! send time, records the latency and frees the slot. The sender waits for a slot to be free
//! before reusing it, so the ring bounds nothing that `buffer.memory` does not already bound
//! when it is sized from it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::task::{RawWaker, RawWakerVTable, Waker};
use std::time::Instant;

/// Sub-buckets per power of two: values are kept to within 1/128 (0.8%).
const SUB_BITS: u32 = 7;
const SUB: usize = 1 << SUB_BITS;
/// Values up to 2^42 ns (73 minutes).
const MAX_BITS: u32 = 42;
const BUCKETS: usize = (MAX_BITS - SUB_BITS + 1) as usize * SUB;

/// A concurrent log-linear histogram of nanosecond values.
pub struct Histogram {
    counts: Box<[AtomicU64]>,
    total: AtomicU64,
    sum: AtomicU64,
    max: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            total: AtomicU64::new(0),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }
}

fn bucket_of(v: u64) -> usize {
    let v = v.min((1u64 << MAX_BITS) - 1);
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = exp - SUB_BITS;
    let mantissa = (v >> shift) as usize - SUB; // 0..SUB
    (shift as usize + 1) * SUB + mantissa
}

/// The largest value that falls in bucket `b` (percentiles report the bucket's upper bound).
fn bucket_high(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let shift = (b / SUB - 1) as u32;
    let mantissa = (b % SUB + SUB) as u64;
    ((mantissa + 1) << shift) - 1
}

impl Histogram {
    pub fn record(&self, v: u64) {
        self.counts[bucket_of(v)].fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
        self.max.fetch_max(v, Ordering::Relaxed);
    }

    /// Forgets everything recorded (not concurrently with `record`).
    #[allow(dead_code)] // the peer benchmark's
    pub fn reset(&self) {
        for c in self.counts.iter() {
            c.store(0, Ordering::Relaxed);
        }
        self.total.store(0, Ordering::Relaxed);
        self.sum.store(0, Ordering::Relaxed);
        self.max.store(0, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    pub fn mean(&self) -> f64 {
        let n = self.count();
        if n == 0 {
            0.0
        } else {
            self.sum.load(Ordering::Relaxed) as f64 / n as f64
        }
    }

    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// The value at quantile `q` (0..=1): the upper bound of the bucket holding that rank,
    /// capped at the maximum seen.
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (b, c) in self.counts.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= rank {
                return bucket_high(b).min(self.max());
            }
        }
        self.max()
    }
}

/// Latency of the records completed since the last progress line.
#[derive(Default)]
pub struct Window {
    count: AtomicU64,
    sum: AtomicU64,
    max: AtomicU64,
}

impl Window {
    fn record(&self, v: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
        self.max.fetch_max(v, Ordering::Relaxed);
    }

    /// (count, sum ns, max ns) since the last take.
    pub fn take(&self) -> (u64, u64, u64) {
        (
            self.count.swap(0, Ordering::Relaxed),
            self.sum.swap(0, Ordering::Relaxed),
            self.max.swap(0, Ordering::Relaxed),
        )
    }
}

/// The ring of send times, the histogram and the progress window.
pub struct Tracker {
    epoch: Instant,
    slots: Box<[AtomicU64]>,
    mask: usize,
    pub histogram: Histogram,
    pub window: Window,
}

static TRACKER: OnceLock<Tracker> = OnceLock::new();

impl Tracker {
    /// Installs the process-wide tracker with at least `capacity` slots (rounded up to a power
    /// of two). Call once.
    pub fn install(capacity: usize) -> &'static Tracker {
        let capacity = capacity.max(1024).next_power_of_two();
        let tracker = Tracker {
            epoch: Instant::now(),
            slots: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            mask: capacity - 1,
            histogram: Histogram::default(),
            window: Window::default(),
        };
        if TRACKER.set(tracker).is_err() {
            panic!("latency tracker installed twice");
        }
        TRACKER.get().expect("just set")
    }

    pub fn get() -> &'static Tracker {
        TRACKER.get().expect("latency tracker installed")
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Nanoseconds since the tracker was installed (never 0 after the first nanosecond).
    #[inline]
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Whether slot `seq`'s previous user has completed.
    #[inline]
    pub fn slot_free(&self, seq: u64) -> bool {
        self.slots[seq as usize & self.mask].load(Ordering::Acquire) == 0
    }

    /// Marks record `seq` as sent at `sent` (from [`Tracker::now`]) and returns the waker that
    /// completes it.
    #[inline]
    pub fn start(&self, seq: u64, sent: u64) -> Waker {
        let index = seq as usize & self.mask;
        self.slots[index].store(sent + 1, Ordering::Release);
        // SAFETY: the vtable's functions only read `index` from the data pointer, never
        // dereference it.
        unsafe { Waker::from_raw(RawWaker::new(index as *const (), &VTABLE)) }
    }

    /// Completes the record in `index` now.
    #[inline]
    pub fn complete_index(&self, index: usize) {
        let now = self.now();
        let sent = self.slots[index].swap(0, Ordering::AcqRel);
        if sent != 0 {
            let latency = now.saturating_sub(sent - 1);
            self.histogram.record(latency);
            self.window.record(latency);
        }
    }
}

static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake, forget);

fn clone(data: *const ()) -> RawWaker {
    RawWaker::new(data, &VTABLE)
}

fn wake(data: *const ()) {
    Tracker::get().complete_index(data as usize);
}

fn forget(_: *const ()) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for v in (0..1_000_000u64)
            .step_by(7)
            .chain([1 << 30, (1 << 40) + 12345])
        {
            let b = bucket_of(v);
            assert!(b >= last || v == 0);
            last = b;
            let high = bucket_high(b);
            assert!(high >= v, "{v} -> {b} -> {high}");
            assert!((high - v) as f64 <= v as f64 / 128.0 + 1.0, "{v} {high}");
        }
    }

    #[test]
    fn quantiles() {
        let h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5);
        assert!((500_000..=504_000).contains(&p50), "{p50}");
        assert_eq!(h.quantile(1.0), 1_000_000);
        assert_eq!(h.max(), 1_000_000);
    }
}
