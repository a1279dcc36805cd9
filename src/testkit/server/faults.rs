//! Scripted faults for the TCP face, driven by a test while traffic runs.
//!
//! Each fault applies to the next `n` requests that match its broker and API key, in the
//! order the faults were added; a request takes at most one fault. A fault counts as applied
//! once the request it hit has had its effect: processed (for a drop or a delay: appended, its
//! answer now withheld), answered with the injected error, or cut off by the reset. A test
//! waits for that with [`FaultPlan::wait_until_consumed`] rather than sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;

/// Matches every broker.
pub const ANY_BROKER: i32 = -1;

/// What happens to a request a fault matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Process the request (append), then close the connection without answering.
    DropResponseAfterAppend,
    /// Close the connection before processing; `mid_frame` first writes half a response
    /// frame, so the client sees a torn frame.
    ResetConnection {
        /// Write half a response frame before closing.
        mid_frame: bool,
    },
    /// Process the request, then hold its answer (and everything after it on the connection,
    /// since answers stay in order).
    DelayResponse(Duration),
    /// Answer with this error code without processing: every partition for Produce, Fetch and
    /// ListOffsets, every topic for Metadata, the top-level code elsewhere.
    InjectError(i16),
    /// Process the request (append), then answer with this error code as `InjectError` does,
    /// as Kafka's `DelayedProduce` ends an appended request: NOT_LEADER_OR_FOLLOWER when the
    /// leader lost leadership while waiting for the replicas, KAFKA_STORAGE_ERROR when its log
    /// directory went offline, REQUEST_TIMED_OUT or NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    AppendThenAnswer(i16),
}

#[derive(Debug)]
struct FaultRule {
    broker: i32,
    api_key: i16,
    remaining: usize,
    action: FaultAction,
}

#[derive(Debug, Default)]
struct Pending {
    rules: Vec<FaultRule>,
    /// Faults taken by a request whose effect is not complete yet.
    in_progress: usize,
}

/// The set of pending faults; thread-safe, shared by every connection.
#[derive(Debug, Default)]
pub struct FaultPlan {
    pending: Mutex<Pending>,
    /// Signalled each time a fault completes (and on `clear`).
    completed: Condvar,
    applied: AtomicU64,
}

/// A fault a request took; dropping it marks the fault applied.
#[derive(Debug)]
pub(crate) struct TakenFault<'a> {
    plan: &'a FaultPlan,
    pub action: FaultAction,
}

impl Drop for TakenFault<'_> {
    fn drop(&mut self) {
        self.plan.pending.lock().unwrap().in_progress -= 1;
        self.plan.applied.fetch_add(1, Ordering::Relaxed);
        self.plan.completed.notify_all();
    }
}

impl FaultPlan {
    /// Applies `action` to the next `n` requests of `api` that `broker` (or any, with
    /// [`ANY_BROKER`]) reads.
    pub fn add(&self, broker: i32, api: ApiKey, n: usize, action: FaultAction) {
        if n == 0 {
            return;
        }
        self.pending.lock().unwrap().rules.push(FaultRule {
            broker,
            api_key: api as i16,
            remaining: n,
            action,
        });
    }

    /// [`add`](Self::add) of [`FaultAction::DropResponseAfterAppend`].
    pub fn drop_response_after_append(&self, broker: i32, api: ApiKey, n: usize) {
        self.add(broker, api, n, FaultAction::DropResponseAfterAppend);
    }

    /// [`add`](Self::add) of [`FaultAction::ResetConnection`].
    pub fn reset_connection(&self, broker: i32, api: ApiKey, n: usize, mid_frame: bool) {
        self.add(broker, api, n, FaultAction::ResetConnection { mid_frame });
    }

    /// [`add`](Self::add) of [`FaultAction::DelayResponse`].
    pub fn delay_response(&self, broker: i32, api: ApiKey, n: usize, delay: Duration) {
        self.add(broker, api, n, FaultAction::DelayResponse(delay));
    }

    /// [`add`](Self::add) of [`FaultAction::InjectError`].
    pub fn inject_error(&self, broker: i32, api: ApiKey, error_code: i16, n: usize) {
        self.add(broker, api, n, FaultAction::InjectError(error_code));
    }

    /// [`add`](Self::add) of [`FaultAction::AppendThenAnswer`].
    pub fn append_then_answer(&self, broker: i32, api: ApiKey, error_code: i16, n: usize) {
        self.add(broker, api, n, FaultAction::AppendThenAnswer(error_code));
    }

    /// Requests the plan still waits to hit or to finish with.
    pub fn pending(&self) -> usize {
        let pending = self.pending.lock().unwrap();
        pending.rules.iter().map(|r| r.remaining).sum::<usize>() + pending.in_progress
    }

    /// Requests a fault was applied to so far.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// Waits until every fault added so far has been applied; false if `timeout` passed first.
    pub fn wait_until_consumed(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut pending = self.pending.lock().unwrap();
        while !pending.rules.is_empty() || pending.in_progress > 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            pending = self
                .completed
                .wait_timeout(pending, deadline - now)
                .unwrap()
                .0;
        }
        true
    }

    /// Drops every fault not yet taken.
    pub fn clear(&self) {
        self.pending.lock().unwrap().rules.clear();
        self.completed.notify_all();
    }

    /// Takes the fault for a request arriving at `broker` with `api_key`, if any.
    pub(crate) fn take(&self, broker: i32, api_key: i16) -> Option<TakenFault<'_>> {
        let mut pending = self.pending.lock().unwrap();
        let index = pending
            .rules
            .iter()
            .position(|r| r.api_key == api_key && (r.broker == ANY_BROKER || r.broker == broker))?;
        let rule = &mut pending.rules[index];
        rule.remaining -= 1;
        let action = rule.action;
        if rule.remaining == 0 {
            pending.rules.remove(index);
        }
        pending.in_progress += 1;
        Some(TakenFault { plan: self, action })
    }
}
