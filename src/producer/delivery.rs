//! `DeliveryFuture`: one record's result, awaitable from async code or waited on from a thread.
//! It points into its batch's [`BatchCompletion`], which the shard writes once for the whole
//! batch through the batch's `DeliveryHandle` (`runtime::delivery_handle`); the future knows
//! its record's place in the batch and its create time, so the shard completes a batch without
//! touching any record.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::engine::RecordMetadata;
use crate::error::ProduceError;
use crate::runtime::completion::{BatchCompletion, Outcome};
use crate::runtime::delivery_handle::Callback;

type DeliveryResult = Result<RecordMetadata, ProduceError>;

/// Wraps an application's callback: it gets the record's result built as its future would
/// have built it; a panic in it is caught, so it cannot stop the shard that runs it.
pub(crate) fn callback(
    topic: Arc<str>,
    partition: i32,
    f: impl FnOnce(DeliveryResult) + Send + 'static,
) -> Callback {
    Box::new(move |outcome: Outcome, timestamp: i64| {
        let result = result_of(&topic, partition, timestamp, &outcome);
        if let Err(panic) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || f(result)))
        {
            tracing::error!(
                target: "kacrab::producer",
                thread = std::thread::current().name().unwrap_or("?"),
                topic = &*topic,
                partition,
                panic = %crate::panics::panic_message(panic.as_ref()),
                "a delivery callback panicked"
            );
        }
    })
}

/// A record's result from its outcome (already shifted to the record's place) and its own
/// create time.
pub(crate) fn result_of(
    topic: &Arc<str>,
    partition: i32,
    timestamp: i64,
    outcome: &Outcome,
) -> DeliveryResult {
    match outcome {
        Outcome::Appended {
            base_offset,
            log_append_time,
        } => Ok(RecordMetadata {
            topic: topic.clone(),
            partition,
            offset: *base_offset,
            timestamp: if *log_append_time >= 0 {
                *log_append_time
            } else {
                timestamp
            },
        }),
        Outcome::Failed(err) => Err((**err).clone()),
        Outcome::DroppedInEngine => Err(ProduceError::OutcomeUnknown {
            topic: topic.clone(),
            partition,
            reason: "the record's shard dropped it without an answer".into(),
        }),
    }
}

/// What `wait` gives on a shard thread for a record whose result is not known yet: it cannot
/// wait there (the shard running the caller may be the one that must complete the record).
pub(crate) fn unknown_on_shard(topic: &Arc<str>, partition: i32) -> ProduceError {
    ProduceError::OutcomeUnknown {
        topic: topic.clone(),
        partition,
        reason: "wait() was called on a shard thread, where it cannot wait, before the \
                 record's result was known"
            .into(),
    }
}

/// A record the accumulator took: where its result will be written (its batch's completion and
/// its place in the batch) and what the result is built from. [`DeliveryFuture`] is one made
/// awaitable; a batch send keeps the parts without the topic (`producer::send_batch`).
pub(crate) struct Queued {
    pub(crate) completion: Arc<BatchCompletion>,
    pub(crate) index: u32,
    pub(crate) timestamp: i64,
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
}

impl From<Queued> for DeliveryFuture {
    fn from(queued: Queued) -> DeliveryFuture {
        DeliveryFuture::new(
            queued.completion,
            queued.index,
            queued.timestamp,
            queued.topic,
            queued.partition,
        )
    }
}

/// Resolves to the record's [`RecordMetadata`] or a typed [`ProduceError`].
#[must_use = "a DeliveryFuture reports whether the record was written"]
pub struct DeliveryFuture {
    completion: Arc<BatchCompletion>,
    /// The record's place in its batch.
    index: u32,
    /// Its create time (the broker's log-append time replaces it where the topic uses that).
    timestamp: i64,
    topic: Arc<str>,
    partition: i32,
    /// A waker of this future is registered with its batch's completion.
    registered: bool,
}

impl DeliveryFuture {
    /// The future of record `index` of the batch `completion` belongs to.
    pub(crate) fn new(
        completion: Arc<BatchCompletion>,
        index: u32,
        timestamp: i64,
        topic: Arc<str>,
        partition: i32,
    ) -> DeliveryFuture {
        DeliveryFuture {
            completion,
            index,
            timestamp,
            topic,
            partition,
            registered: false,
        }
    }

    /// A future that has already failed with `err`.
    pub(crate) fn failed(topic: Arc<str>, err: ProduceError) -> Self {
        let completion = Arc::new(BatchCompletion::done(Outcome::Failed(Box::new(err))));
        DeliveryFuture::new(completion, 0, -1, topic, -1)
    }

    fn result(&self, outcome: &Outcome) -> DeliveryResult {
        result_of(&self.topic, self.partition, self.timestamp, outcome)
    }

    /// Blocks the calling thread until the result is known.
    ///
    /// On a shard thread (in a delivery callback) it does not block: the record may be one
    /// that the shard running the callback must complete. A result not known yet is then
    /// [`ProduceError::OutcomeUnknown`], whose promise holds (the record is in the log at most
    /// once, or not at all; it may still be written). Read the result from another thread, or
    /// give the record a callback of its own.
    pub fn wait(self) -> DeliveryResult {
        if crate::runtime::shard::on_shard_thread() {
            return self
                .try_result()
                .unwrap_or_else(|| Err(unknown_on_shard(&self.topic, self.partition)));
        }
        let outcome = self
            .completion
            .wait(self.index, None)
            .expect("a wait without a deadline returns a result");
        self.result(&outcome)
    }

    /// Blocks up to `timeout`; `None` if the result is not known by then. On a shard thread it
    /// does not block (as [`wait`](Self::wait)), and is [`try_result`](Self::try_result).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<DeliveryResult> {
        if crate::runtime::shard::on_shard_thread() {
            return self.try_result();
        }
        let deadline = Instant::now().checked_add(timeout);
        self.completion
            .wait(self.index, deadline)
            .map(|outcome| self.result(&outcome))
    }

    /// The result if it is already known (never blocks; asking again gives it again).
    pub fn try_result(&self) -> Option<DeliveryResult> {
        self.completion
            .outcome(self.index)
            .map(|outcome| self.result(&outcome))
    }
}

impl Future for DeliveryFuture {
    type Output = DeliveryResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        match this.completion.poll_outcome(this.index, cx) {
            Poll::Ready(outcome) => Poll::Ready(this.result(&outcome)),
            Poll::Pending => {
                this.registered = true;
                Poll::Pending
            }
        }
    }
}

impl Drop for DeliveryFuture {
    fn drop(&mut self) {
        if self.registered {
            self.completion.unregister_waker(self.index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Delivery, TopicPartition};
    use crate::runtime::buffer_memory::{release_sink, BufferMemory};
    use crate::runtime::delivery_handle::{DeliveryHandle, RecordCallback};

    fn reserved(memory: &BufferMemory, bytes: usize) {
        memory
            .reserve(bytes, std::time::Instant::now)
            .expect("room");
    }

    /// A handle of `count` records and the futures of its records (create times 1000 + i).
    fn batch(
        topic: &str,
        partition: i32,
        count: u32,
        memory: &BufferMemory,
        reserved: usize,
    ) -> (DeliveryHandle, Vec<DeliveryFuture>) {
        let completion = Arc::new(BatchCompletion::new());
        let futures = (0..count)
            .map(|i| {
                DeliveryFuture::new(
                    completion.clone(),
                    i,
                    1000 + i as i64,
                    topic.into(),
                    partition,
                )
            })
            .collect();
        let handle = DeliveryHandle::new(completion, count, Vec::new(), memory.id(), reserved);
        (handle, futures)
    }

    #[test]
    fn a_handle_dropped_before_its_batch_reached_the_engine_resolves_closed_and_returns_its_memory()
    {
        let memory = BufferMemory::new(1000);
        reserved(&memory, 100);
        let (handle, futures) = batch("t", 2, 3, &memory, 100);
        drop(handle);
        release_sink::flush_to(&memory);
        for future in &futures {
            assert_eq!(future.try_result(), Some(Err(ProduceError::Closed)));
        }
        assert_eq!(memory.used(), 0);
    }

    #[test]
    fn a_handle_dropped_after_its_batch_reached_the_engine_resolves_outcome_unknown() {
        let memory = BufferMemory::new(1000);
        reserved(&memory, 100);
        let (mut handle, futures) = batch("t", 2, 2, &memory, 100);
        handle.entering_engine();
        drop(handle);
        release_sink::flush_to(&memory);
        assert!(
            matches!(
                futures[1].try_result(),
                Some(Err(ProduceError::OutcomeUnknown { partition: 2, .. }))
            ),
            "a record an engine held may be in the log"
        );
        assert_eq!(memory.used(), 0);
    }

    #[test]
    fn a_completed_handle_resolves_once_and_returns_its_memory_once() {
        let memory = BufferMemory::new(1000);
        reserved(&memory, 300);
        let (handle, futures) = batch("t", 0, 1, &memory, 100);
        handle.complete(Err(ProduceError::TransactionAborted));
        release_sink::flush_to(&memory);
        assert_eq!(
            futures[0].try_result(),
            Some(Err(ProduceError::TransactionAborted))
        );
        assert_eq!(memory.used(), 200);
    }

    #[test]
    fn memory_released_on_a_thread_goes_back_to_the_producer_it_came_from() {
        // Producer A's batch completes on this thread (a shard of A), then a batch of
        // producer B that B's closed inbox refused is dropped here (sent from A's callback),
        // and B's memory is given back.
        let a = BufferMemory::new(1000);
        let b = BufferMemory::new(1000);
        reserved(&a, 300);
        reserved(&b, 200);
        let (a_handle, _a_futures) = batch("a", 0, 1, &a, 300);
        a_handle.complete(Err(ProduceError::Purged));
        let (b_handle, _b_futures) = batch("b", 0, 1, &b, 200);
        drop(b_handle);
        release_sink::flush_to(&b);
        assert_eq!(b.used(), 0, "B gets back its own bytes, and only those");
        assert_eq!(a.used(), 300, "A's bytes stay A's, to be given back to A");
        release_sink::flush_to(&a);
        assert_eq!(a.used(), 0);
    }

    #[test]
    fn each_record_of_an_appended_batch_resolves_at_its_offset_with_its_own_create_time() {
        let memory = BufferMemory::new(1);
        let (handle, futures) = batch("orders", 3, 3, &memory, 0);
        handle.appended(&TopicPartition::new("orders", 3), 41, -1);
        let results: Vec<_> = futures
            .into_iter()
            .map(|f| {
                let m = f.wait().expect("appended");
                (m.partition, m.offset, m.timestamp)
            })
            .collect();
        assert_eq!(results, vec![(3, 41, 1000), (3, 42, 1001), (3, 43, 1002)]);
    }

    #[test]
    fn a_log_append_time_replaces_every_records_create_time() {
        let memory = BufferMemory::new(1);
        let (handle, futures) = batch("t", 0, 2, &memory, 0);
        handle.appended(&TopicPartition::new("t", 0), 7, 55_555);
        assert_eq!(futures[1].try_result().unwrap().unwrap().timestamp, 55_555);
    }

    #[test]
    fn a_cut_run_resolves_each_part_with_its_own_outcome_and_callbacks() {
        let memory = BufferMemory::new(1000);
        reserved(&memory, 100);
        let completion = Arc::new(BatchCompletion::new());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let callbacks = (0..4)
            .map(|i| {
                let seen = seen.clone();
                RecordCallback {
                    index: i,
                    timestamp: 1000 + i as i64,
                    callback: callback("t".into(), 0, move |r| {
                        seen.lock().unwrap().push((i, r.map(|m| m.offset)));
                    }),
                }
            })
            .collect();
        let mut first = DeliveryHandle::new(completion.clone(), 4, callbacks, memory.id(), 100);
        let rest = first.split_off(1);
        rest.appended(&TopicPartition::new("t", 0), 20, -1);
        first.complete(Err(ProduceError::Purged));
        release_sink::flush_to(&memory);
        let mut seen = seen.lock().unwrap().clone();
        seen.sort_by_key(|(i, _)| *i);
        assert_eq!(
            seen,
            vec![
                (0, Err(ProduceError::Purged)),
                (1, Ok(20)),
                (2, Ok(21)),
                (3, Ok(22))
            ]
        );
        assert_eq!(memory.used(), 0, "the batch's memory comes back once");
    }

    #[test]
    fn an_awaited_future_is_woken_by_a_completion_on_another_thread() {
        let memory = BufferMemory::new(1);
        let (handle, mut futures) = batch("t", 0, 1, &memory, 0);
        let mut future = futures.pop().unwrap();
        // Registered as pending before the completion exists.
        assert!(
            futures_lite::future::block_on(futures_lite::future::poll_once(&mut future)).is_none()
        );
        let completer = std::thread::spawn(move || {
            handle.appended(&TopicPartition::new("t", 0), 9, -1);
        });
        let metadata = futures_lite::future::block_on(future).expect("appended");
        assert_eq!(metadata.offset, 9);
        completer.join().expect("completer");
    }
}
