//! The brokers' clock: the instant a SASL session's end and a connection's idle time
//! (`idle.rs`) are compared with.
//!
//! It runs with real time unless a test freezes it ([`ReferenceCluster::freeze_clock`]), as
//! Kafka's own broker tests swap `SystemTime` for `MockTime`: then it moves only when the test
//! advances it ([`ReferenceCluster::advance_clock`]), so an expiry happens at an advance the
//! test chose and never because the machine stalled. Requests take no time on a frozen clock.
//!
//! [`ReferenceCluster::freeze_clock`]: super::ReferenceCluster::freeze_clock
//! [`ReferenceCluster::advance_clock`]: super::ReferenceCluster::advance_clock

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(crate) struct BrokerClock {
    /// `None`: real time. `Some(t)`: frozen at `t`, which only `advance` moves, forward. An
    /// instant read on real time before the freeze is never after the frozen one, so an end
    /// computed before the freeze keeps its order with the instants read after it.
    frozen: Mutex<Option<Instant>>,
}

impl BrokerClock {
    pub(crate) fn now(&self) -> Instant {
        self.frozen().unwrap_or_else(Instant::now)
    }

    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen().is_some()
    }

    /// Stops the clock at the current instant; a clock already frozen stays where it is.
    pub(crate) fn freeze(&self) {
        self.frozen_mut().get_or_insert_with(Instant::now);
    }

    /// Moves a frozen clock forward by `by` and returns the new instant.
    ///
    /// # Panics
    /// If the clock runs with real time: only a frozen clock can be advanced.
    pub(crate) fn advance(&self, by: Duration) -> Instant {
        let mut frozen = self.frozen_mut();
        let now = frozen.expect("only a frozen clock is advanced") + by;
        *frozen = Some(now);
        now
    }

    fn frozen(&self) -> Option<Instant> {
        *self.frozen_mut()
    }

    fn frozen_mut(&self) -> MutexGuard<'_, Option<Instant>> {
        // A guard is never held across anything that can panic.
        self.frozen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
