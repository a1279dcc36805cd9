//! `DeliveryFuture`: one record's result, awaitable from async code or waited on from a thread.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::engine::{Delivery, RecordMetadata, TopicPartition};
use crate::error::ProduceError;

use super::shared::BufferMemory;

type DeliveryResult = Result<RecordMetadata, ProduceError>;

#[derive(Default)]
struct Slot {
    result: Option<DeliveryResult>,
    waker: Option<Waker>,
    /// A thread is blocked in `wait`/`wait_timeout`. Completion only signals the condvar then:
    /// an unconditional `notify_all` is a futex syscall per record on the shard thread.
    waiting: bool,
}

#[derive(Default)]
struct DeliveryState {
    slot: Mutex<Slot>,
    ready: Condvar,
}

/// Resolves to the record's [`RecordMetadata`] or a typed [`ProduceError`].
#[must_use = "a DeliveryFuture reports whether the record was written"]
pub struct DeliveryFuture {
    state: Arc<DeliveryState>,
}

impl DeliveryFuture {
    pub(crate) fn failed(err: ProduceError) -> Self {
        let state = Arc::new(DeliveryState::default());
        state.slot.lock().expect("delivery lock").result = Some(Err(err));
        DeliveryFuture { state }
    }

    /// Blocks the calling thread until the result is known.
    pub fn wait(self) -> DeliveryResult {
        let mut slot = self.state.slot.lock().expect("delivery lock");
        loop {
            if let Some(result) = slot.result.take() {
                return result;
            }
            slot.waiting = true;
            slot = self.state.ready.wait(slot).expect("delivery lock");
        }
    }

    /// Blocks up to `timeout`; `None` if the result is not known by then.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<DeliveryResult> {
        let mut slot = self.state.slot.lock().expect("delivery lock");
        slot.waiting = true;
        let (mut slot, _) = self
            .state
            .ready
            .wait_timeout_while(slot, timeout, |s| s.result.is_none())
            .expect("delivery lock");
        slot.result.take()
    }

    /// The result if it is already known.
    pub fn try_result(&self) -> Option<DeliveryResult> {
        self.state.slot.lock().expect("delivery lock").result.take()
    }
}

impl Future for DeliveryFuture {
    type Output = DeliveryResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.state.slot.lock().expect("delivery lock");
        match slot.result.take() {
            Some(result) => Poll::Ready(result),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// The engine's side of a `DeliveryFuture`; completing it also returns the record's share of
/// `buffer.memory`.
///
/// Invariant: every handle completes its future exactly once. One dropped without an answer
/// (left in a queue when its shard stopped, dropped by a shard that panicked) completes it in
/// `drop` with an error that keeps the promise: `Closed` (not in the log) while the record
/// never reached an engine, `OutcomeUnknown` once it did (an engine may have sent it).
pub(crate) struct DeliveryHandle {
    state: Arc<DeliveryState>,
    memory: Arc<BufferMemory>,
    reserved: usize,
    /// The record's partition, once the record was handed to an engine.
    in_engine: Option<(Arc<str>, i32)>,
    done: bool,
}

impl DeliveryHandle {
    pub(crate) fn new(
        memory: Arc<BufferMemory>,
        reserved: usize,
    ) -> (DeliveryHandle, DeliveryFuture) {
        let state = Arc::new(DeliveryState::default());
        (
            DeliveryHandle {
                state: state.clone(),
                memory,
                reserved,
                in_engine: None,
                done: false,
            },
            DeliveryFuture { state },
        )
    }

    /// The record is being handed to the engine of its shard: from here on it may be sent.
    pub(crate) fn entering_engine(&mut self, tp: &TopicPartition) {
        self.in_engine = Some((tp.topic.clone(), tp.partition));
    }

    fn finish(&mut self, result: DeliveryResult) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        self.memory.release(self.reserved);
        let (waker, waiting) = {
            let mut slot = self.state.slot.lock().expect("delivery lock");
            slot.result = Some(result);
            (slot.waker.take(), slot.waiting)
        };
        if waiting {
            self.state.ready.notify_all();
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Delivery for DeliveryHandle {
    fn complete(mut self, result: DeliveryResult) {
        self.finish(result);
    }
}

impl Drop for DeliveryHandle {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let error = match self.in_engine.take() {
            Some((topic, partition)) => ProduceError::OutcomeUnknown {
                topic,
                partition,
                reason: "the record's shard dropped it without an answer".into(),
            },
            None => ProduceError::Closed,
        };
        self.finish(Err(error));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_dropped_before_its_record_reached_the_engine_resolves_closed_and_returns_its_memory(
    ) {
        let memory = Arc::new(BufferMemory::new(1000));
        memory
            .reserve(100, std::time::Instant::now())
            .expect("room");
        let (handle, future) = DeliveryHandle::new(memory.clone(), 100);
        drop(handle);
        assert_eq!(future.try_result(), Some(Err(ProduceError::Closed)));
        assert_eq!(memory.used(), 0);
    }

    #[test]
    fn a_handle_dropped_after_its_record_reached_the_engine_resolves_outcome_unknown() {
        let memory = Arc::new(BufferMemory::new(1000));
        memory
            .reserve(100, std::time::Instant::now())
            .expect("room");
        let (mut handle, future) = DeliveryHandle::new(memory.clone(), 100);
        handle.entering_engine(&TopicPartition::new("t", 2));
        drop(handle);
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
        let memory = Arc::new(BufferMemory::new(1000));
        memory
            .reserve(300, std::time::Instant::now())
            .expect("room");
        let (handle, future) = DeliveryHandle::new(memory.clone(), 100);
        handle.complete(Err(ProduceError::TransactionAborted));
        assert_eq!(
            future.try_result(),
            Some(Err(ProduceError::TransactionAborted))
        );
        assert_eq!(memory.used(), 200);
    }
}
