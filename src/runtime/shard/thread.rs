//! What a shard's thread knows of itself: that it is a shard's (where waiting for a shard
//! could wait for itself), and the application's tasks it runs (`Producer::spawn_on_shard`),
//! which the shard answers as abandoned if it stops before they finish.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use glommio::Task;

thread_local! {
    /// Set on a shard's thread: code there (a delivery callback) must not wait for a shard.
    static ON_SHARD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a shard's, for the rest of its life.
pub(super) fn mark_shard_thread() {
    ON_SHARD.with(|on| on.set(true));
}

/// True on a shard's thread, where waiting for a shard could wait for itself.
pub(crate) fn on_shard_thread() -> bool {
    ON_SHARD.with(|on| on.get())
}

thread_local! {
    /// Set while an application's task (`Producer::spawn_on_shard`) is being polled.
    static IN_APPLICATION_TASK: Cell<bool> = const { Cell::new(false) };
}

/// Runs `poll` marked as the poll of an application's task on this shard.
pub(crate) fn as_application_task<R>(poll: impl FnOnce() -> R) -> R {
    let outer = IN_APPLICATION_TASK.with(|on| on.replace(true));
    let result = poll();
    IN_APPLICATION_TASK.with(|on| on.set(outer));
    result
}

/// True while an application's task is polled on a shard: an await there lets the shard run,
/// so an async wait for room or metadata may wait (a blocking one still may not).
pub(crate) fn in_application_task() -> bool {
    IN_APPLICATION_TASK.with(|on| on.get())
}

/// An application's task on this shard (`Producer::spawn_on_shard`): its handle, whether it
/// finished, and what answers its caller if the shard stops first.
pub(crate) struct ApplicationTask {
    pub done: Rc<Cell<bool>>,
    pub abandon: Box<dyn FnOnce()>,
    pub task: Task<()>,
}

thread_local! {
    /// The application's tasks on this shard, until they finish or the shard stops.
    static APPLICATION_TASKS: RefCell<Vec<ApplicationTask>> = const { RefCell::new(Vec::new()) };
}

/// Keeps `task` until it finishes or the shard stops (finished ones are let go here).
pub(crate) fn keep_application_task(task: ApplicationTask) {
    APPLICATION_TASKS.with(|tasks| {
        let mut tasks = tasks.borrow_mut();
        tasks.retain(|t| !t.done.get());
        tasks.push(task);
    });
}

/// The shard is stopping: every application task not finished is answered as abandoned and
/// cancelled. Its future may never be dropped by a stopped executor (a task asleep on a timer
/// is held only by the timer), so its caller is answered here rather than by the drop.
pub(super) fn abandon_application_tasks() {
    let tasks = APPLICATION_TASKS.with(|tasks| std::mem::take(&mut *tasks.borrow_mut()));
    for task in tasks {
        if !task.done.get() {
            (task.abandon)();
        }
        drop(task.task);
    }
}
