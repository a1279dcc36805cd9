//! `DeliveryHandle`: the engine's side of a run of a batch's records. Completing it writes the
//! run's outcome into the batch's [`BatchCompletion`], where the records' futures read it, runs
//! the callbacks of its records, and gives back the batch's `buffer.memory`.

use std::sync::Arc;

use crate::engine::{Delivery, RecordMetadata, TopicPartition};
use crate::error::ProduceError;

use super::buffer_memory::{release_sink, MemoryId};
use super::completion::{BatchCompletion, Outcome};

type DeliveryResult = Result<RecordMetadata, ProduceError>;

/// A `send_with_callback` closure, wrapped to build its result from its record's [`Outcome`]
/// and create time.
pub(crate) type Callback = Box<dyn FnOnce(Outcome, i64) + Send>;

/// A record's `send_with_callback` callback, with the record's place and create time.
pub(crate) struct RecordCallback {
    pub index: u32,
    pub timestamp: i64,
    pub callback: Callback,
}

/// The engine's side of a run of a batch's records (the whole batch, or one part of a split
/// batch): completing it writes the run's outcome into the batch's completion once, runs the
/// callbacks of its records, and returns the batch's share of `buffer.memory` through the
/// completing thread's release sink (`buffer_memory::release_sink`), so that a shard returns
/// memory once per turn rather than once per batch.
///
/// Invariant: every handle completes its run exactly once. One dropped without an answer (left
/// in a queue when its shard stopped, dropped by a shard that panicked) completes it in `drop`
/// with an error that keeps the promise: `Closed` (not in the log) while the batch never
/// reached an engine, `OutcomeUnknown` once it did (an engine may have sent it).
pub(crate) struct DeliveryHandle {
    completion: Arc<BatchCompletion>,
    /// The run's first record and length, in the batch.
    first: u32,
    count: u32,
    /// The run is the whole batch (never cut).
    whole: bool,
    /// The callbacks of the run's records, in record order.
    callbacks: Vec<RecordCallback>,
    /// Bytes of `buffer.memory` the run holds, and whose memory they are.
    reserved: usize,
    memory: MemoryId,
    /// The batch was handed to the engine of its shard.
    in_engine: bool,
    done: bool,
}

impl DeliveryHandle {
    /// The handle of all `count` records of a batch, holding `reserved` bytes of
    /// `buffer.memory`.
    pub(crate) fn new(
        completion: Arc<BatchCompletion>,
        count: u32,
        callbacks: Vec<RecordCallback>,
        memory: MemoryId,
        reserved: usize,
    ) -> DeliveryHandle {
        DeliveryHandle {
            completion,
            first: 0,
            count,
            whole: true,
            callbacks,
            reserved,
            memory,
            in_engine: false,
            done: false,
        }
    }

    /// The batch is being handed to the engine of its shard: from here on it may be sent.
    pub(crate) fn entering_engine(&mut self) {
        self.in_engine = true;
    }

    fn finish(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        release_sink::release(self.memory, self.reserved);
        // The futures' outcome first: a callback may read another record's future.
        if self.whole {
            self.completion.complete(outcome.clone());
        } else {
            self.completion
                .complete_part(self.first, self.count, outcome.clone());
        }
        for callback in std::mem::take(&mut self.callbacks) {
            let shifted = outcome.shifted(callback.index - self.first);
            (callback.callback)(shifted, callback.timestamp);
        }
    }
}

impl Delivery for DeliveryHandle {
    fn complete(mut self, result: DeliveryResult) {
        self.finish(match result {
            Ok(metadata) => Outcome::Appended {
                base_offset: metadata.offset,
                log_append_time: metadata.timestamp,
            },
            Err(err) => Outcome::Failed(Box::new(err)),
        });
    }

    fn appended(mut self, _tp: &TopicPartition, offset: i64, timestamp: i64) {
        self.finish(Outcome::Appended {
            base_offset: offset,
            log_append_time: timestamp,
        });
    }

    fn split_off(&mut self, at: u32) -> Self {
        debug_assert!(0 < at && at < self.count);
        let cut = self.first + at;
        let split = self.callbacks.partition_point(|c| c.index < cut);
        let rest = DeliveryHandle {
            completion: self.completion.clone(),
            first: cut,
            count: self.count - at,
            whole: false,
            callbacks: self.callbacks.split_off(split),
            // The batch's reservation stays with its first part.
            reserved: 0,
            memory: self.memory,
            in_engine: self.in_engine,
            done: false,
        };
        self.count = at;
        self.whole = false;
        rest
    }
}

impl Drop for DeliveryHandle {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let outcome = if self.in_engine {
            Outcome::DroppedInEngine
        } else {
            Outcome::Failed(Box::new(ProduceError::Closed))
        };
        self.finish(outcome);
    }
}
