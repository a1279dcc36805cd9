//! `BatchMemory`: the part of `buffer.memory` that batch buffers take beyond the records in
//! them (Java's `BufferPool` charges a whole `batch.size` buffer per batch).
//!
//! A calling thread reserves each record's encoded size bound (plus its own overhead) before
//! queueing it. A batch buffer has `batch.size` bytes of capacity, and a reused one keeps every
//! page of it resident, so a batch holding fewer bytes than its capacity (one record in a
//! lingering batch, or records that each take more than half of `batch.size`) costs more than
//! its records reserved. The engine charges that difference to the same count when it opens a
//! batch, so `buffer.memory` counts every byte of every live batch buffer, and callers wait
//! while batches hold it, as Java's callers wait for a free buffer.
//!
//! The engine never waits (its thread drains the requests that free memory), so a batch's
//! charge may use a slack of an eighth of `buffer.memory` above it that callers never use: the
//! open batch of each busy partition normally fits there while callers keep the count at the
//! limit. When even the slack is full, the batch gets a buffer of exactly its first record's
//! size, which needs no charge and takes no other record (it is sent at once): memory stays
//! bounded by `buffer.memory` and its slack, at the price of smaller batches until completions
//! free room.
//!
//! Invariants (for every batch with a charge):
//! - while the batch is open, its charge is its buffer's capacity minus its first record's
//!   reserved bound;
//! - once it stops taking records, the charge shrinks to its buffer's capacity minus the bytes
//!   written (every record reserved at least its own encoded size, the first one also the
//!   batch header);
//! - the charge is given back exactly once, when the batch is dropped.

use std::sync::Arc;

/// Where the engine takes and gives back the batch part of `buffer.memory`.
pub trait BatchMemory: Send + Sync {
    /// Takes `bytes` if the count stays within `buffer.memory` plus [`batch_slack`] of it;
    /// never waits.
    fn try_charge(&self, bytes: usize) -> bool;

    /// Gives back `bytes` charged before.
    fn release(&self, bytes: usize);
}

/// No limit: every charge succeeds and nothing is counted (an engine driven without a
/// producer's `buffer.memory`, as in unit tests).
pub struct Unbounded;

impl BatchMemory for Unbounded {
    fn try_charge(&self, _bytes: usize) -> bool {
        true
    }

    fn release(&self, _bytes: usize) {}
}

/// The room above `buffer.memory` that only batch charges use: an eighth of it.
pub fn batch_slack(buffer_memory: usize) -> usize {
    buffer_memory / 8
}

/// What one batch holds of its `BatchMemory`; given back when dropped.
pub struct BatchCharge {
    memory: Arc<dyn BatchMemory>,
    bytes: usize,
}

impl BatchCharge {
    /// Charges `bytes` to `memory`, or `None` if they do not fit now.
    pub fn try_take(memory: &Arc<dyn BatchMemory>, bytes: usize) -> Option<Self> {
        memory.try_charge(bytes).then(|| BatchCharge {
            memory: memory.clone(),
            bytes,
        })
    }

    /// Shrinks the charge to `keep` bytes (never grows it).
    pub fn shrink_to(&mut self, keep: usize) {
        if keep < self.bytes {
            self.memory.release(self.bytes - keep);
            self.bytes = keep;
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for BatchCharge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.memory.release(self.bytes);
        }
    }
}

/// `buffer.memory` as a count with a ceiling, as the producer's is: for tests of the engine.
#[cfg(test)]
pub(crate) struct CountedMemory {
    pub used: std::sync::atomic::AtomicUsize,
    pub ceiling: usize,
}

#[cfg(test)]
impl CountedMemory {
    pub fn with_ceiling(ceiling: usize) -> Self {
        CountedMemory {
            used: Default::default(),
            ceiling,
        }
    }

    pub fn used(&self) -> usize {
        self.used.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
impl BatchMemory for CountedMemory {
    fn try_charge(&self, bytes: usize) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if self.used.load(Relaxed) + bytes > self.ceiling {
            return false;
        }
        self.used.fetch_add(bytes, Relaxed);
        true
    }

    fn release(&self, bytes: usize) {
        self.used
            .fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_is_refused_past_the_ceiling_shrinks_and_is_given_back_once_when_dropped() {
        let counted = Arc::new(CountedMemory::with_ceiling(1000));
        let memory: Arc<dyn BatchMemory> = counted.clone();
        let mut charge = BatchCharge::try_take(&memory, 800).expect("fits");
        assert!(
            BatchCharge::try_take(&memory, 300).is_none(),
            "past the ceiling"
        );
        charge.shrink_to(900);
        assert_eq!(charge.bytes(), 800, "a shrink never grows");
        charge.shrink_to(100);
        assert_eq!(counted.used(), 100);
        drop(charge);
        assert_eq!(counted.used(), 0);
    }
}
