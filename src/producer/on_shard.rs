//! Thread-per-core all the way: an application task that runs on a shard's own executor and
//! sends to the partitions that shard owns.
//!
//! A record sent from any thread is encoded by that thread into its partition's open batch
//! (`accumulator`); what crosses to the shard is a notice or a wake per batch. A task spawned
//! on the shard that owns the partition ([`Producer::spawn_on_shard`], [`Producer::shard_of`])
//! takes the partition's lock uncontended, and its notices and wakes go to its own executor:
//! nothing crosses a thread at all. The task shares its thread with the shard's driver loop,
//! which runs whenever the task awaits, so a task that sends without ever awaiting holds its
//! shard up exactly as a long delivery callback does.
//!
//! The rules of a shard thread apply to the task as to a callback (README, "Threads"): calls
//! that would wait for a shard do not wait. One exception: [`Producer::send_async`] awaited in
//! such a task waits for `buffer.memory` and metadata as it does elsewhere, since awaiting lets
//! the shard run and free what the task waits for.

use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use futures_lite::FutureExt;

use crate::engine::TopicPartition;
use crate::runtime;
use crate::runtime::command::{ShardCommand, ShardSpawn};

use super::{shard_for, Producer};

/// Why a task spawned on a shard gave no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardTaskError {
    /// No such shard: the producer has `shards` of them.
    #[error("shard {shard} does not exist; the producer has {shards} shards")]
    NoSuchShard {
        /// The shard asked for.
        shard: usize,
        /// How many shards the producer has.
        shards: usize,
    },
    /// The shard stopped (the producer closed, or the shard died) before the task finished, or
    /// before it started.
    #[error("the shard stopped before the task finished")]
    Stopped,
    /// The task panicked; the shard goes on.
    #[error("the task panicked: {0}")]
    Panicked(String),
    /// [`ShardTask::join`] was called on a shard thread before the task finished: waiting
    /// there could wait for the very shard the caller holds up. Await the task instead.
    #[error("join() was called on a shard thread before the task finished; await it instead")]
    WouldBlock,
}

type TaskResult<T> = Result<T, ShardTaskError>;

enum TaskState<T> {
    Running(Option<Waker>),
    Done(TaskResult<T>),
    Taken,
}

struct TaskSlot<T> {
    state: Mutex<TaskState<T>>,
    done: Condvar,
}

impl<T> TaskSlot<T> {
    fn finish(&self, result: TaskResult<T>) {
        let waker = {
            let mut state = self.state.lock().expect("shard task lock");
            match std::mem::replace(&mut *state, TaskState::Done(result)) {
                TaskState::Running(waker) => waker,
                // Finished already: keep the first result.
                earlier => {
                    *state = earlier;
                    None
                }
            }
        };
        self.done.notify_all();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// Answers the task's handle with `Stopped` if the task is dropped before it finished (its
/// shard stopped) or never started.
struct FinishOnDrop<T>(Arc<TaskSlot<T>>);

impl<T> Drop for FinishOnDrop<T> {
    fn drop(&mut self) {
        self.0.finish(Err(ShardTaskError::Stopped));
    }
}

/// The handle of a task spawned with [`Producer::spawn_on_shard`]: its result, awaited or
/// waited for with [`join`](Self::join).
#[must_use = "a ShardTask gives the task's result"]
pub struct ShardTask<T> {
    slot: Arc<TaskSlot<T>>,
}

impl<T> ShardTask<T> {
    /// Blocks the calling thread until the task has finished. On a shard thread it does not
    /// block: a task not finished yet is [`ShardTaskError::WouldBlock`].
    pub fn join(self) -> TaskResult<T> {
        let mut state = self.slot.state.lock().expect("shard task lock");
        loop {
            match std::mem::replace(&mut *state, TaskState::Taken) {
                TaskState::Done(result) => return result,
                running @ TaskState::Running(_) => {
                    *state = running;
                    if runtime::shard::on_shard_thread() {
                        return Err(ShardTaskError::WouldBlock);
                    }
                    state = self.slot.done.wait(state).expect("shard task lock");
                }
                TaskState::Taken => unreachable!("a handle takes its result once"),
            }
        }
    }
}

impl<T> Future for ShardTask<T> {
    type Output = TaskResult<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.slot.state.lock().expect("shard task lock");
        match std::mem::replace(&mut *state, TaskState::Taken) {
            TaskState::Done(result) => Poll::Ready(result),
            TaskState::Running(_) => {
                *state = TaskState::Running(Some(cx.waker().clone()));
                Poll::Pending
            }
            TaskState::Taken => panic!("a ShardTask polled after it completed"),
        }
    }
}

/// Polls an application's task with the shard thread marked as running one
/// (`runtime::shard::in_application_task`).
struct MarkedPoll<F>(Pin<Box<F>>);

impl<F: Future> Future for MarkedPoll<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        runtime::shard::as_application_task(|| self.0.as_mut().poll(cx))
    }
}

impl Producer {
    /// The number of shards.
    pub fn shard_count(&self) -> usize {
        self.inner.inboxes.len()
    }

    /// The shard that owns `topic`-`partition`: stable for the producer's life. A task on that
    /// shard ([`spawn_on_shard`](Self::spawn_on_shard)) sends to the partition with no
    /// cross-thread step.
    pub fn shard_of(&self, topic: &str, partition: i32) -> usize {
        shard_for(&TopicPartition::new(topic, partition), self.shard_count())
    }

    /// Runs `task()` as a task on shard `shard`'s executor, on its thread, beside its driver
    /// loop; `task` is called there, so its future need not be `Send`. The handle gives the
    /// future's output; a panic in it is caught (the shard goes on) and reported as
    /// [`ShardTaskError::Panicked`]. The task is dropped when the shard stops; its handle
    /// then gives [`ShardTaskError::Stopped`].
    pub fn spawn_on_shard<F, Fut, T>(&self, shard: usize, task: F) -> ShardTask<T>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let slot = Arc::new(TaskSlot {
            state: Mutex::new(TaskState::Running(None)),
            done: Condvar::new(),
        });
        let handle = ShardTask { slot: slot.clone() };
        let Some(inbox) = self.inner.inboxes.get(shard) else {
            slot.finish(Err(ShardTaskError::NoSuchShard {
                shard,
                shards: self.shard_count(),
            }));
            return handle;
        };
        let guard = FinishOnDrop(slot);
        let spawn = ShardSpawn::new(move || {
            let done = Rc::new(Cell::new(false));
            let finished = done.clone();
            let abandoned = guard.0.clone();
            let task = glommio::spawn_local(async move {
                let run = MarkedPoll(Box::pin(async move { task().await }));
                let result = AssertUnwindSafe(run).catch_unwind().await.map_err(|panic| {
                    ShardTaskError::Panicked(crate::panics::panic_message(panic.as_ref()))
                });
                finished.set(true);
                guard.0.finish(result);
            });
            runtime::shard::keep_application_task(runtime::shard::ApplicationTask {
                done,
                abandon: Box::new(move || abandoned.finish(Err(ShardTaskError::Stopped))),
                task,
            });
        });
        // A refused command (the shard's inbox closed) drops the guard: `Stopped`.
        let _ = inbox.push(ShardCommand::Spawn(spawn));
        handle
    }
}
