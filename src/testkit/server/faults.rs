//! Scripted faults for the TCP face, driven by a test while traffic runs.
//!
//! Each fault applies to the next `n` requests that match its broker and API key, in the
//! order the faults were added; a request takes at most one fault. Faults are consumed as
//! requests arrive, so a test waits for [`FaultPlan::pending`] to reach zero (with a deadline)
//! rather than sleeping.

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
    ResetConnection { mid_frame: bool },
    /// Process the request, then hold its answer (and everything after it on the connection,
    /// since answers stay in order).
    DelayResponse(Duration),
    /// Answer with this error code without processing: every partition for Produce, Fetch and
    /// ListOffsets, every topic for Metadata, the top-level code elsewhere.
    InjectError(i16),
}

#[derive(Debug)]
struct FaultRule {
    broker: i32,
    api_key: i16,
    remaining: usize,
    action: FaultAction,
}

/// The set of pending faults; thread-safe, shared by every connection.
#[derive(Debug, Default)]
pub struct FaultPlan {
    rules: Mutex<Vec<FaultRule>>,
    /// Signalled each time a fault is taken.
    taken: Condvar,
    applied: AtomicU64,
}

impl FaultPlan {
    pub fn add(&self, broker: i32, api: ApiKey, n: usize, action: FaultAction) {
        if n == 0 {
            return;
        }
        self.rules.lock().unwrap().push(FaultRule {
            broker,
            api_key: api as i16,
            remaining: n,
            action,
        });
    }

    pub fn drop_response_after_append(&self, broker: i32, api: ApiKey, n: usize) {
        self.add(broker, api, n, FaultAction::DropResponseAfterAppend);
    }

    pub fn reset_connection(&self, broker: i32, api: ApiKey, n: usize, mid_frame: bool) {
        self.add(broker, api, n, FaultAction::ResetConnection { mid_frame });
    }

    pub fn delay_response(&self, broker: i32, api: ApiKey, n: usize, delay: Duration) {
        self.add(broker, api, n, FaultAction::DelayResponse(delay));
    }

    pub fn inject_error(&self, broker: i32, api: ApiKey, error_code: i16, n: usize) {
        self.add(broker, api, n, FaultAction::InjectError(error_code));
    }

    /// Requests the plan still waits to hit.
    pub fn pending(&self) -> usize {
        self.rules.lock().unwrap().iter().map(|r| r.remaining).sum()
    }

    /// Requests a fault was applied to so far.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// Waits until every pending fault has been applied; false if `timeout` passed first.
    pub fn wait_until_consumed(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut rules = self.rules.lock().unwrap();
        while !rules.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            rules = self.taken.wait_timeout(rules, deadline - now).unwrap().0;
        }
        true
    }

    /// Drops every pending fault.
    pub fn clear(&self) {
        self.rules.lock().unwrap().clear();
        self.taken.notify_all();
    }

    /// Takes the fault for a request arriving at `broker` with `api_key`, if any.
    pub(crate) fn take(&self, broker: i32, api_key: i16) -> Option<FaultAction> {
        let mut rules = self.rules.lock().unwrap();
        let index = rules
            .iter()
            .position(|r| r.api_key == api_key && (r.broker == ANY_BROKER || r.broker == broker))?;
        let rule = &mut rules[index];
        rule.remaining -= 1;
        let action = rule.action;
        if rule.remaining == 0 {
            rules.remove(index);
        }
        self.applied.fetch_add(1, Ordering::Relaxed);
        self.taken.notify_all();
        Some(action)
    }
}
