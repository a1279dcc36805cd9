//! The driver loop: turn after turn (the steps are in `turn`), each followed by a sleep
//! until something is due, until the shard has closed.

use std::time::{Duration, Instant};

use futures_lite::future;

use crate::error::ProduceError;
use crate::metrics::ShardPublisher;
use crate::runtime::connection::ConnectionEvent;
use crate::runtime::identity_replica::IdentityReplica;
use crate::runtime::inbox::ShardInbox;
use crate::runtime::partition_load::LoadPublisher;
use crate::runtime::stats::ShardReport;
use crate::runtime::ticket_ring::Attachment;
use crate::runtime::txn_driver::{ControlReceiver, TxnCommand};

use super::sockets::Connections;
use super::tickets::adopt_tickets;
use super::{Shard, ShardContext, ShardState};

/// The longest a shard sleeps before looking at its work again, even with nothing due.
///
/// glommio 0.9.0 can park an executor while one of its tasks is runnable: `run_task_queues`
/// takes a preemption already pending when it starts (the 100 ms preempt timer expired while
/// the thread was descheduled, as happens on an oversubscribed host) for "nothing to run", and
/// the executor then sleeps until its next I/O completion or timer (fixed in the community
/// fork, glommio/glommio PR #53, not released). A shard without a near timer of its own would
/// sit on queued records until a request timeout. Capping every sleep turns such a stall into
/// a delay of at most this long; an idle shard wakes this often and finds nothing to do.
///
/// The other glommio timer trap, the first sleep of a process taking some 10 ms longer
/// (membarrier registration), only delays; deadlines are recomputed from the clock on every
/// wake, so a late timer never skips one.
const MAX_PARK: Duration = Duration::from_millis(50);

/// What ended the shard's sleep.
pub(super) enum Wake {
    /// The inbox has commands (or a peer nudged this shard to read the ticket ring).
    Inbox,
    Control(Option<TxnCommand>),
    Event(Option<ConnectionEvent>),
    Timer,
}

/// The driver loop: until the shard has closed.
pub(super) async fn drive(
    index: usize,
    state: &mut ShardState,
    inbox: &ShardInbox,
    control: &ControlReceiver,
    ctx: &ShardContext,
    attachment: Attachment<'_>,
) {
    let mut shard = Shard::new(index, state, inbox, control, ctx, attachment);
    loop {
        // 1. What woke us, then everything else already waiting. One clock read serves every
        // record appended in this turn.
        let append_at = shard.now();
        shard.handle_wake();
        shard.take_commands(append_at);
        shard.take_events().await;
        shard.take_batches();
        // 2. The engine and its actions, until it is quiet; then what the turn publishes.
        shard.drive_engine();
        if shard.state.intake.held() {
            // A due open batch waited for its partition's earlier batch, which the engine
            // may just have drained: take it now rather than at the next wake.
            shard.take_batches();
            shard.drive_engine();
        }
        shard.finish_turn();
        if shard.close_due() {
            shard.close();
            return;
        }
        if shard.has_commands() {
            // Commands are waiting: no sleep, but the shard's other tasks (its connections,
            // the application's) run before the next turn.
            glommio::executor().yield_task_queue_now().await;
            continue;
        }
        // 3. Sleep until a command, a connection event or the engine's next deadline.
        shard.park().await;
    }
}

impl<'a> Shard<'a> {
    /// The driver's state at its start, having adopted the identity the ring holds and
    /// published the transactional status.
    fn new(
        index: usize,
        state: &'a mut ShardState,
        inbox: &'a ShardInbox,
        control: &'a ControlReceiver,
        ctx: &'a ShardContext,
        attachment: Attachment<'a>,
    ) -> Shard<'a> {
        let mut replica = IdentityReplica::new(index);
        adopt_tickets(&ctx.tickets, &mut replica, &mut state.engine);
        let connections = Connections::new(index, ctx);
        state.txn.publish_status(&state.engine, ctx);
        Shard {
            index,
            state,
            inbox,
            control,
            ctx,
            attachment,
            clock: inbox.epoch(),
            replica,
            connections,
            pending: None,
            report: ShardReport::default(),
            metrics: ShardPublisher::new(index, ctx.metrics.clone()),
            loads: LoadPublisher::new(ctx.loads.clone()),
        }
    }
}

impl Shard<'_> {
    /// Microseconds on the inbox's clock.
    pub(super) fn now(&self) -> u64 {
        self.clock.elapsed().as_micros() as u64
    }

    /// Handles what ended the last sleep: a control command or a connection event that the
    /// wake took off its queue. A wake by the inbox or the timer carries nothing: the turn
    /// looks at everything anyway.
    fn handle_wake(&mut self) {
        match self.pending.take() {
            Some(Wake::Control(Some(cmd))) => self.handle_control(cmd),
            Some(Wake::Event(Some(event))) => {
                let now = self.now();
                self.connections
                    .on_event(&mut self.state.engine, self.ctx, event, now);
            }
            _ => {}
        }
    }

    /// Whether commands taken from the inbox are left for the next turn.
    fn has_commands(&self) -> bool {
        !self.state.local.is_empty()
    }

    /// Sleeps until a command, a connection event or the engine's next deadline, and never
    /// longer than [`MAX_PARK`]; what woke the shard is kept for the next turn.
    async fn park(&mut self) {
        let t = self.now();
        let wakeup = match (
            self.state.engine.next_wakeup(t),
            self.state.intake.next_due(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep_for = sleep_for(t, wakeup);
        let timer = async move {
            if let Some(duration) = sleep_for {
                glommio::timer::sleep(duration).await;
            }
            Wake::Timer
        };
        let until = t + sleep_for.map_or(0, |d| d.as_micros() as u64);
        let inbox = self.inbox;
        let command = async {
            inbox.parked(until).await;
            Wake::Inbox
        };
        let control = self.control;
        let control_command = async { Wake::Control(control.recv().await) };
        let connections = &self.connections;
        let event = async { Wake::Event(connections.next_event().await) };
        let parked_at = self.metrics.parking();
        self.pending = Some(
            future::or(
                control_command,
                future::or(command, future::or(event, timer)),
            )
            .await,
        );
        self.metrics.unparked(parked_at);
    }

    /// A close is being carried out and may finish: the engine and the intake hold nothing
    /// more, or the close deadline has passed.
    fn close_due(&self) -> bool {
        if !self.state.closing {
            return false;
        }
        // Set before any `Close` is pushed.
        let deadline = self.ctx.close_by.get();
        (self.state.engine.is_idle() && self.state.intake.is_empty())
            || deadline.is_none_or(|at| Instant::now() >= at)
    }

    /// Finishes a close: whatever is left fails with `Closed`, the sockets close, the last
    /// report and metrics are published, and the shard reads the ring no more.
    fn close(mut self) {
        let state = &mut *self.state;
        state.intake.shut_all(&ProduceError::Closed);
        state.engine.abort_all(ProduceError::Closed);
        state.flushes.clear();
        // Close every socket and cancel every task before saying we are done.
        self.connections.close_all();
        self.publish_report();
        self.metrics
            .maybe_publish(self.state.engine.metrics(), self.replica.applied(), true);
        // Publishers must not wait for a reader that is gone.
        self.attachment.detach();
        self.state.txn.close();
        // Nothing is queued behind `Close` (the inbox refuses pushes after it); whatever is
        // left is answered rather than left in a queue nobody reads. A record's handle
        // completes it with `Closed` as it drops, a latch counts down. `Stopping` then gives
        // back the memory and reports the shard stopped.
        self.state.local.extend(self.inbox.close());
        self.state.local.clear();
    }
}

/// How long a shard sleeps at `now` (microseconds) whose earliest deadline is `wakeup`: until
/// then, never longer than [`MAX_PARK`], and not at all (`None`) when it is due already.
fn sleep_for(now: u64, wakeup: Option<u64>) -> Option<Duration> {
    match wakeup {
        Some(at) if at > now => Some(Duration::from_micros(at - now).min(MAX_PARK)),
        Some(_) => None,
        None => Some(MAX_PARK),
    }
}

#[cfg(test)]
mod tests {
    use super::{sleep_for, MAX_PARK};
    use std::time::Duration;

    #[test]
    fn a_shard_sleeps_until_its_deadline_and_never_longer_than_max_park() {
        assert_eq!(
            sleep_for(1_000, Some(1_500)),
            Some(Duration::from_micros(500))
        );
        assert_eq!(sleep_for(1_000, Some(1_000_000_000)), Some(MAX_PARK));
        assert_eq!(sleep_for(1_000, None), Some(MAX_PARK));
    }

    #[test]
    fn a_shard_with_a_deadline_due_does_not_sleep() {
        assert_eq!(sleep_for(1_000, Some(1_000)), None);
        assert_eq!(sleep_for(1_000, Some(10)), None);
    }
}
