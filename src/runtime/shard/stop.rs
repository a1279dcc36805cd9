//! How a shard that stops answers everything that waits on it: [`die`] after its driver loop
//! panicked, and [`Stopping`], which runs however the shard's future ends.

use std::panic::AssertUnwindSafe;

use crate::error::{ProduceError, TransactionError};
use crate::runtime::buffer_memory::release_sink;
use crate::runtime::inbox::ShardInbox;

use super::thread::abandon_application_tasks;
use super::{ShardContext, ShardState};

/// The shard's driver loop panicked (a bug of kacrab's own: application code that runs here
/// is isolated where it is called). Everything that waits on this shard is answered, so that
/// nothing hangs and no promise is broken: the producer becomes fatal with an error naming
/// the shard, later sends fail at once, each record completes as the engine knows it (never
/// sent: the error; an attempt may have landed: `OutcomeUnknown`), the queued commands and
/// every latch are answered, the transactional calls fail, and `buffer.memory` comes back.
/// The other shards go on with their records.
pub(super) fn die(
    shard: usize,
    state: &mut ShardState,
    inbox: &ShardInbox,
    ctx: &ShardContext,
    panic: &(dyn std::any::Any + Send),
) {
    let message = crate::error::panic_message(panic);
    tracing::error!(target: "kacrab::producer", shard, panic = %message, "shard stopped: it panicked");
    let error = ProduceError::ShardPanicked { shard, message };
    ctx.metadata.publish_fatal(error.clone());
    // The engine may have been left mid-change by the panic. Should failing its records panic
    // too, the engine is dropped with them, and each record still in it completes as of
    // unknown outcome (`DeliveryHandle`'s drop), which is as honest, only less precise.
    let engine = &mut state.engine;
    let failed = std::panic::catch_unwind(AssertUnwindSafe(|| engine.abort_all(error.clone())));
    if failed.is_err() {
        tracing::error!(target: "kacrab::producer", shard, "failing the dead shard's records panicked too");
    }
    state.intake.shut_all(&error);
    state.local.extend(inbox.close());
    // A notice shuts its queue as it drops (its batches never reached the engine: `Closed`);
    // any other command's latch counts down.
    state.local.clear();
    state.flushes.clear();
    state.metric_requests.clear();
    state
        .txn
        .fail_calls(TransactionError::Fatal(crate::error::ErrorCause::Record(
            Box::new(error),
        )));
}

/// Dropped last as the shard's future ends, whichever way: closed, dead of a panic [`die`]
/// answered, or dropped while unwinding from a panic that nothing here caught (the executor
/// dropping its tasks as its thread unwinds). It closes the inbox and answers what is still
/// queued there (a record as not in the log, any latch counted down), gives back the memory its
/// completions freed, and only then counts the producer's `stopped` latch down. One dropped by
/// an unwinding also makes the producer fatal, so that later sends fail at once; the records
/// its engine held have completed as of unknown outcome as they dropped before it.
pub(super) struct Stopping<'a> {
    pub(super) shard: usize,
    pub(super) inbox: &'a ShardInbox,
    pub(super) ctx: &'a ShardContext,
}

impl Drop for Stopping<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(target: "kacrab::producer", shard = self.shard, "shard stopped: a task of it panicked");
            self.ctx
                .metadata
                .publish_fatal(ProduceError::ShardPanicked {
                    shard: self.shard,
                    message: "a task of the shard panicked (its message is in the log)".into(),
                });
        }
        drop(self.inbox.close());
        abandon_application_tasks();
        release_sink::flush_to(&self.ctx.memory);
        self.ctx.stopped.count_down();
    }
}
