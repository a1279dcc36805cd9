//! `DeliveryFuture`: one record's result, awaitable from async code or waited on from a thread;
//! and `DeliveryHandle`, the engine's side of it. Both point into a completion block
//! ([`completion`](super::completion)); neither is a heap object of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::engine::{Delivery, RecordMetadata, TopicPartition};
use crate::error::ProduceError;

use super::completion::{next_slot, CompletionBlock, Outcome};
use super::shared::{release_sink, MemoryId};

type DeliveryResult = Result<RecordMetadata, ProduceError>;

/// A `send_with_callback` closure, wrapped to build its result from an [`Outcome`].
pub(crate) type Callback = Box<dyn FnOnce(Outcome) + Send>;

/// Wraps an application's callback: it gets the record's result built as its future would
/// have built it; a panic in it is caught, so it cannot stop the shard that runs it.
pub(crate) fn callback(
    topic: Arc<str>,
    partition: i32,
    f: impl FnOnce(DeliveryResult) + Send + 'static,
) -> Callback {
    Box::new(move |outcome: Outcome| {
        let result = result_of(&topic, partition, &outcome);
        if let Err(panic) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || f(result)))
        {
            tracing::error!(
                target: "kacrab::producer",
                thread = std::thread::current().name().unwrap_or("?"),
                topic = &*topic,
                partition,
                panic = %crate::error::panic_message(panic.as_ref()),
                "a delivery callback panicked"
            );
        }
    })
}

fn result_of(topic: &Arc<str>, partition: i32, outcome: &Outcome) -> DeliveryResult {
    match outcome {
        Outcome::Appended { offset, timestamp } => Ok(RecordMetadata {
            topic: topic.clone(),
            partition,
            offset: *offset,
            timestamp: *timestamp,
        }),
        Outcome::Failed(err) => Err((**err).clone()),
        Outcome::DroppedInEngine => Err(ProduceError::OutcomeUnknown {
            topic: topic.clone(),
            partition,
            reason: "the record's shard dropped it without an answer".into(),
        }),
    }
}

/// Resolves to the record's [`RecordMetadata`] or a typed [`ProduceError`].
#[must_use = "a DeliveryFuture reports whether the record was written"]
pub struct DeliveryFuture {
    block: Arc<CompletionBlock>,
    index: u32,
    topic: Arc<str>,
    partition: i32,
    /// A waker of this future is registered with its block.
    registered: bool,
}

impl DeliveryFuture {
    /// A future for a record of `topic` bound for `partition` (-1 while it has none).
    fn new(topic: Arc<str>, partition: i32) -> (DeliveryFuture, Arc<CompletionBlock>, u32) {
        let (block, index) = next_slot();
        (
            DeliveryFuture {
                block: block.clone(),
                index,
                topic,
                partition,
                registered: false,
            },
            block,
            index,
        )
    }

    /// A future that has already failed with `err`.
    pub(crate) fn failed(topic: Arc<str>, err: ProduceError) -> Self {
        let (future, block, index) = DeliveryFuture::new(topic, -1);
        block.complete(index, Outcome::Failed(Box::new(err)));
        future
    }

    fn result(&self, outcome: &Outcome) -> DeliveryResult {
        result_of(&self.topic, self.partition, outcome)
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
            return self.try_result().unwrap_or_else(|| {
                Err(ProduceError::OutcomeUnknown {
                    topic: self.topic.clone(),
                    partition: self.partition,
                    reason: "wait() was called on a shard thread, where it cannot wait, before \
                             the record's result was known"
                        .into(),
                })
            });
        }
        let outcome = self
            .block
            .wait(self.index, None)
            .expect("a wait without a deadline returns a result");
        self.result(outcome)
    }

    /// Blocks up to `timeout`; `None` if the result is not known by then. On a shard thread it
    /// does not block (as [`wait`](Self::wait)), and is [`try_result`](Self::try_result).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<DeliveryResult> {
        if crate::runtime::shard::on_shard_thread() {
            return self.try_result();
        }
        let deadline = Instant::now().checked_add(timeout);
        self.block
            .wait(self.index, deadline)
            .map(|outcome| self.result(outcome))
    }

    /// The result if it is already known (never blocks; asking again gives it again).
    pub fn try_result(&self) -> Option<DeliveryResult> {
        self.block
            .outcome(self.index)
            .map(|outcome| self.result(outcome))
    }
}

impl Future for DeliveryFuture {
    type Output = DeliveryResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(outcome) = self.block.outcome(self.index) {
            return Poll::Ready(self.result(outcome));
        }
        let this = &mut *self;
        if this
            .block
            .register_waker(this.index, cx.waker(), &mut this.registered)
        {
            return Poll::Pending;
        }
        let outcome = this.block.outcome(this.index).expect("written");
        Poll::Ready(this.result(outcome))
    }
}

impl Drop for DeliveryFuture {
    fn drop(&mut self) {
        if self.registered {
            self.block.unregister_waker(self.index);
        }
    }
}

/// The engine's side of a `DeliveryFuture`. Completing it also returns the record's share of
/// `buffer.memory`, through the completing thread's release sink (`shared::release_sink`),
/// so that a shard returns memory once per turn rather than once per record.
///
/// Invariant: every handle completes its slot exactly once. One dropped without an answer
/// (left in a queue when its shard stopped, dropped by a shard that panicked) completes it in
/// `drop` with an error that keeps the promise: `Closed` (not in the log) while the record
/// never reached an engine, `OutcomeUnknown` once it did (an engine may have sent it).
pub(crate) struct DeliveryHandle {
    /// Runs instead of writing the slot, for `send_with_callback`.
    callback: Option<Callback>,
    block: Arc<CompletionBlock>,
    index: u32,
    /// Bytes of `buffer.memory` the record holds, and whose memory they are.
    reserved: u32,
    memory: MemoryId,
    /// The record was handed to the engine of its shard.
    in_engine: bool,
    done: bool,
}

impl DeliveryHandle {
    /// A handle and its future for a record of `topic`-`partition` holding `reserved` bytes of
    /// `buffer.memory`.
    pub(crate) fn new(
        topic: Arc<str>,
        partition: i32,
        memory: MemoryId,
        reserved: usize,
    ) -> (DeliveryHandle, DeliveryFuture) {
        let (future, block, index) = DeliveryFuture::new(topic, partition);
        (
            DeliveryHandle {
                callback: None,
                block,
                index,
                reserved: u32::try_from(reserved).expect("a record's reservation fits in u32"),
                memory,
                in_engine: false,
                done: false,
            },
            future,
        )
    }

    /// The record is being handed to the engine of its shard: from here on it may be sent.
    pub(crate) fn entering_engine(&mut self) {
        self.in_engine = true;
    }

    fn finish(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        release_sink::release(self.memory, self.reserved as usize);
        match self.callback.take() {
            Some(callback) => callback(outcome),
            None => self.block.complete(self.index, outcome),
        }
    }

    /// Has `callback` run with the result (on the completing thread, a shard's) instead of
    /// resolving the future.
    pub(crate) fn with_callback(mut self, callback: Callback) -> Self {
        self.callback = Some(callback);
        self
    }
}

impl Delivery for DeliveryHandle {
    fn complete(mut self, result: DeliveryResult) {
        self.finish(match result {
            Ok(metadata) => Outcome::Appended {
                offset: metadata.offset,
                timestamp: metadata.timestamp,
            },
            Err(err) => Outcome::Failed(Box::new(err)),
        });
    }

    fn appended(mut self, _tp: &TopicPartition, offset: i64, timestamp: i64) {
        self.finish(Outcome::Appended { offset, timestamp });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer::shared::BufferMemory;

    fn reserved(memory: &BufferMemory, bytes: usize) {
        memory
            .reserve(bytes, std::time::Instant::now)
            .expect("room");
    }

    #[test]
    fn a_handle_dropped_before_its_record_reached_the_engine_resolves_closed_and_returns_its_memory(
    ) {
        let memory = BufferMemory::new(1000);
        reserved(&memory, 100);
        let (handle, future) = DeliveryHandle::new("t".into(), 2, memory.id(), 100);
        drop(handle);
        release_sink::flush_to(&memory);
        assert_eq!(future.try_result(), Some(Err(ProduceError::Closed)));
        assert_eq!(memory.used(), 0);
    }

    #[test]
    fn a_handle_dropped_after_its_record_reached_the_engine_resolves_outcome_unknown() {
        let memory = BufferMemory::new(1000);
        reserved(&memory, 100);
        let (mut handle, future) = DeliveryHandle::new("t".into(), 2, memory.id(), 100);
        handle.entering_engine();
        drop(handle);
        release_sink::flush_to(&memory);
        assert!(
            matches!(
                future.try_result(),
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
        let (handle, future) = DeliveryHandle::new("t".into(), 0, memory.id(), 100);
        handle.complete(Err(ProduceError::TransactionAborted));
        release_sink::flush_to(&memory);
        assert_eq!(
            future.try_result(),
            Some(Err(ProduceError::TransactionAborted))
        );
        assert_eq!(memory.used(), 200);
    }

    #[test]
    fn memory_released_on_a_thread_goes_back_to_the_producer_it_came_from() {
        // Producer A's record completes on this thread (a shard of A), then a record of
        // producer B that B's closed inbox refused is dropped here (sent from A's callback),
        // and B's memory is given back.
        let a = BufferMemory::new(1000);
        let b = BufferMemory::new(1000);
        reserved(&a, 300);
        reserved(&b, 200);
        let (a_handle, _a_future) = DeliveryHandle::new("a".into(), 0, a.id(), 300);
        a_handle.complete(Err(ProduceError::Purged));
        let (b_handle, _b_future) = DeliveryHandle::new("b".into(), 0, b.id(), 200);
        drop(b_handle);
        release_sink::flush_to(&b);
        assert_eq!(b.used(), 0, "B gets back its own bytes, and only those");
        assert_eq!(a.used(), 300, "A's bytes stay A's, to be given back to A");
        release_sink::flush_to(&a);
        assert_eq!(a.used(), 0);
    }

    #[test]
    fn an_appended_record_resolves_with_its_futures_topic_and_partition() {
        let (handle, future) =
            DeliveryHandle::new("orders".into(), 3, BufferMemory::new(1).id(), 0);
        handle.appended(&TopicPartition::new("orders", 3), 41, 1_700);
        let metadata = future.wait().expect("appended");
        assert_eq!(
            (
                &*metadata.topic,
                metadata.partition,
                metadata.offset,
                metadata.timestamp
            ),
            ("orders", 3, 41, 1_700)
        );
    }

    #[test]
    fn an_awaited_future_is_woken_by_a_completion_on_another_thread() {
        let (handle, mut future) = DeliveryHandle::new("t".into(), 0, BufferMemory::new(1).id(), 0);
        // Registered as pending before the completion exists.
        assert!(
            futures_lite::future::block_on(futures_lite::future::poll_once(&mut future)).is_none()
        );
        let completer = std::thread::spawn(move || {
            handle.appended(&TopicPartition::new("t", 0), 9, 0);
        });
        let metadata = futures_lite::future::block_on(future).expect("appended");
        assert_eq!(metadata.offset, 9);
        completer.join().expect("completer");
    }
}
