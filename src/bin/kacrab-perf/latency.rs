//! Per-record latency: a send timestamp per record, taken just before `send`, and a completion
//! timestamp taken by the thread that completes the record (the waker runs on the shard, right
//! after the result is set). Latencies go into a lock-free log-linear histogram.
//!
//! The send time travels in the waker itself (its data word), as librdkafka's delivery opaque
//! carries it in the peer benchmark: completing a record touches no memory the sending thread
//! writes. The histogram is striped by recording thread, so two shards completing records at
//! once do not contend for one set of counters; readers sum the stripes. Without both, the
//! harness's own cache-line traffic between cores was charged to the client it measures.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::task::{RawWaker, RawWakerVTable, Waker};
use std::time::Instant;

/// Sub-buckets per power of two: values are kept to within 1/128 (0.8%).
const SUB_BITS: u32 = 7;
const SUB: usize = 1 << SUB_BITS;
/// Values up to 2^42 ns (73 minutes).
const MAX_BITS: u32 = 42;
const BUCKETS: usize = (MAX_BITS - SUB_BITS + 1) as usize * SUB;
/// Recording threads get stripes round-robin; past this many, threads share stripes (still
/// correct: every counter is atomic).
const STRIPES: usize = 16;

/// One thread's counters. Aligned so that two stripes never share a cache line.
#[repr(align(128))]
struct Stripe {
    counts: Box<[AtomicU64]>,
    total: AtomicU64,
    sum: AtomicU64,
    max: AtomicU64,
    /// Since the last progress line (`Tracker::take_window`).
    window_count: AtomicU64,
    window_sum: AtomicU64,
    window_max: AtomicU64,
}

impl Stripe {
    fn record(&self, v: u64) {
        self.counts[bucket_of(v)].fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
        self.max.fetch_max(v, Ordering::Relaxed);
    }

    fn record_window(&self, v: u64) {
        self.window_count.fetch_add(1, Ordering::Relaxed);
        self.window_sum.fetch_add(v, Ordering::Relaxed);
        self.window_max.fetch_max(v, Ordering::Relaxed);
    }

    fn new() -> Stripe {
        Stripe {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            total: AtomicU64::new(0),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
            window_count: AtomicU64::new(0),
            window_sum: AtomicU64::new(0),
            window_max: AtomicU64::new(0),
        }
    }
}

/// A concurrent log-linear histogram of nanosecond values, striped by recording thread.
pub struct Histogram {
    stripes: [OnceLock<Box<Stripe>>; STRIPES],
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            stripes: std::array::from_fn(|_| OnceLock::new()),
        }
    }
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe index, taken on its first record.
    static STRIPE: Cell<Option<usize>> = const { Cell::new(None) };
}

fn stripe_index() -> usize {
    STRIPE.with(|s| match s.get() {
        Some(i) => i,
        None => {
            let i = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
            s.set(Some(i));
            i
        }
    })
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
    fn stripe(&self) -> &Stripe {
        self.stripes[stripe_index()].get_or_init(|| Box::new(Stripe::new()))
    }

    fn each(&self) -> impl Iterator<Item = &Stripe> {
        self.stripes.iter().filter_map(|s| s.get().map(|s| &**s))
    }

    #[allow(dead_code)] // the peer benchmark's (its other clients record without a window)
    pub fn record(&self, v: u64) {
        self.stripe().record(v);
    }

    /// Records `v` in the histogram and in the progress window (one stripe lookup).
    fn record_windowed(&self, v: u64) {
        let s = self.stripe();
        s.record(v);
        s.record_window(v);
    }

    /// Forgets everything recorded (not concurrently with `record`).
    #[allow(dead_code)] // the peer benchmark's
    pub fn reset(&self) {
        for s in self.each() {
            for c in s.counts.iter() {
                c.store(0, Ordering::Relaxed);
            }
            for c in [&s.total, &s.sum, &s.max] {
                c.store(0, Ordering::Relaxed);
            }
            for c in [&s.window_count, &s.window_sum, &s.window_max] {
                c.store(0, Ordering::Relaxed);
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.each().map(|s| s.total.load(Ordering::Relaxed)).sum()
    }

    pub fn mean(&self) -> f64 {
        let n = self.count();
        if n == 0 {
            0.0
        } else {
            let sum: u64 = self.each().map(|s| s.sum.load(Ordering::Relaxed)).sum();
            sum as f64 / n as f64
        }
    }

    pub fn max(&self) -> u64 {
        self.each()
            .map(|s| s.max.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
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
        for b in 0..BUCKETS {
            seen += self
                .each()
                .map(|s| s.counts[b].load(Ordering::Relaxed))
                .sum::<u64>();
            if seen >= rank {
                return bucket_high(b).min(self.max());
            }
        }
        self.max()
    }

    /// (count, sum ns, max ns) recorded through the window since the last take.
    fn take_window(&self) -> (u64, u64, u64) {
        self.each().fold((0, 0, 0), |(n, sum, max), s| {
            (
                n + s.window_count.swap(0, Ordering::Relaxed),
                sum + s.window_sum.swap(0, Ordering::Relaxed),
                max.max(s.window_max.swap(0, Ordering::Relaxed)),
            )
        })
    }
}

/// The histogram, and the clock that send and completion times are read from.
pub struct Tracker {
    epoch: Instant,
    pub histogram: Histogram,
}

static TRACKER: OnceLock<Tracker> = OnceLock::new();

impl Tracker {
    /// Installs the process-wide tracker. Call once.
    pub fn install() -> &'static Tracker {
        let tracker = Tracker {
            epoch: Instant::now(),
            histogram: Histogram::default(),
        };
        if TRACKER.set(tracker).is_err() {
            panic!("latency tracker installed twice");
        }
        TRACKER.get().expect("just set")
    }

    pub fn get() -> &'static Tracker {
        TRACKER.get().expect("latency tracker installed")
    }

    /// Nanoseconds since the tracker was installed.
    #[inline]
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The waker that completes a record sent at `sent` (from [`Tracker::now`]). Each waker
    /// handed to a record's future is woken at most once (`CompletionBlock` takes it out of
    /// its slot to wake it), so each record is recorded once.
    #[inline]
    pub fn start(&self, sent: u64) -> Waker {
        // SAFETY: the data word is the send time; the vtable's functions only read it as an
        // integer, never dereference it.
        unsafe { Waker::from_raw(RawWaker::new(sent as usize as *const (), &VTABLE)) }
    }

    /// Completes a record sent at `sent` now.
    #[inline]
    pub fn complete(&self, sent: u64) {
        let latency = self.now().saturating_sub(sent);
        self.histogram.record_windowed(latency);
    }

    /// (count, sum ns, max ns) of the records completed since the last take.
    pub fn take_window(&self) -> (u64, u64, u64) {
        self.histogram.take_window()
    }
}

static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake, forget);

fn clone(data: *const ()) -> RawWaker {
    RawWaker::new(data, &VTABLE)
}

fn wake(data: *const ()) {
    Tracker::get().complete(data as usize as u64);
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
