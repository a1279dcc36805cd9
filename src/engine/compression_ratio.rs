//! Java's `CompressionRatioEstimator`: per topic (and the producer's one codec), the ratio of a
//! compressed batch's size to its records' uncompressed size, so an open batch can be filled
//! to `batch.size` after compression rather than before.
//!
//! Java keeps one table per JVM; kacrab keeps one per engine (per shard): each shard learns the
//! ratio of the batches it builds.

use std::sync::atomic::{AtomicU32, Ordering};

/// Java's `MemoryRecordsBuilder.COMPRESSION_RATE_ESTIMATION_FACTOR`: the estimate is inflated by
/// 5% so that a batch filled to its limit rarely compresses past it.
pub const COMPRESSION_RATE_ESTIMATION_FACTOR: f32 = 1.05;
/// `CompressionRatioEstimator.COMPRESSION_RATIO_IMPROVING_STEP`: a batch that compressed better
/// than the estimate lowers it by this much.
pub const COMPRESSION_RATIO_IMPROVING_STEP: f32 = 0.005;
/// `COMPRESSION_RATIO_DETERIORATE_STEP`: a batch that compressed worse raises the estimate by at
/// least this much, at once to the observed ratio if that is higher.
pub const COMPRESSION_RATIO_DETERIORATE_STEP: f32 = 0.05;
/// `CompressionType.rate`, the starting estimate: 1.0 for every codec.
pub const INITIAL_COMPRESSION_RATIO: f32 = 1.0;

/// The estimate for one topic. Shared by the topic's partitions and batches of one engine; the
/// atomic only makes it `Send` (one shard reads and writes it).
#[derive(Debug)]
pub struct CompressionRatioEstimate {
    ratio_bits: AtomicU32,
}

impl Default for CompressionRatioEstimate {
    fn default() -> Self {
        Self {
            ratio_bits: AtomicU32::new(INITIAL_COMPRESSION_RATIO.to_bits()),
        }
    }
}

impl CompressionRatioEstimate {
    /// `CompressionRatioEstimator.estimation`.
    pub fn estimation(&self) -> f32 {
        f32::from_bits(self.ratio_bits.load(Ordering::Relaxed))
    }

    /// `CompressionRatioEstimator.setEstimation` (Java's split sets it to at least 1).
    pub fn set(&self, ratio: f32) {
        self.ratio_bits.store(ratio.to_bits(), Ordering::Relaxed);
    }

    /// `CompressionRatioEstimator.updateEstimation`, after a batch compressed with `observed`:
    /// worse than estimated raises the estimate by at least the deteriorate step, better lowers
    /// it by the improving step. Returns the new estimate.
    pub fn update(&self, observed: f32) -> f32 {
        let current = self.estimation();
        let next = if observed > current {
            (current + COMPRESSION_RATIO_DETERIORATE_STEP).max(observed)
        } else if observed < current {
            current - COMPRESSION_RATIO_IMPROVING_STEP
        } else {
            current
        };
        self.set(next);
        next
    }
}

/// Java's `MemoryRecordsBuilder.estimatedBytesWritten` for a compressed batch: the header plus
/// the uncompressed records scaled by the estimate and the 5% factor.
pub fn estimated_bytes_written(header: usize, uncompressed_records: usize, ratio: f32) -> usize {
    header + (uncompressed_records as f32 * ratio * COMPRESSION_RATE_ESTIMATION_FACTOR) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_follows_javas_steps() {
        let e = CompressionRatioEstimate::default();
        assert_eq!(e.estimation(), 1.0);
        // Better than estimated: down by 0.005 per batch, not to the observed ratio.
        assert_eq!(e.update(0.2), 1.0 - 0.005);
        assert_eq!(e.update(0.2), 1.0 - 0.005 - 0.005);
        // Worse: at least the deteriorate step...
        let before = e.estimation();
        assert_eq!(e.update(before + 0.01), before + 0.05);
        // ... and at once to a ratio further up.
        assert_eq!(e.update(3.0), 3.0);
        // Equal: unchanged.
        assert_eq!(e.update(3.0), 3.0);
    }

    #[test]
    fn estimated_bytes_written_inflates_by_five_percent() {
        assert_eq!(estimated_bytes_written(61, 10_000, 0.5), 61 + 5_250);
        assert_eq!(estimated_bytes_written(61, 0, 0.5), 61);
    }
}
