//! Rebootstrapping (KIP-899, KIP-1102; Java's `metadata.recovery.strategy=rebootstrap`): when
//! the brokers of the last Metadata answer cannot be reached, or no answer came for
//! `metadata.recovery.rebootstrap.trigger.ms`, or a broker answers REBOOTSTRAP_REQUIRED, the
//! broker list is replaced by `bootstrap.servers` and metadata is fetched from one of them.
//!
//! Java's three triggers, as `NetworkClient` applies them:
//! - `DefaultMetadataUpdater.maybeUpdate`: a metadata refresh is due and no node is available
//!   (none ready, none connecting, every one in its reconnect backoff). Connections are left
//!   as they are.
//! - `handleRebootstrap`, KIP-1102: metadata has been wanted for longer than the trigger with
//!   no answer carrying brokers. Every connection to a node of the current list is closed
//!   first; requests on them end as on any disconnect.
//! - `handleSuccessfulResponse`: an answer whose top-level error is REBOOTSTRAP_REQUIRED
//!   (Metadata v13 and later) forces the second path at once.
//!
//! With `metadata.recovery.strategy=none` (`EngineConfig::rebootstrap_trigger` is `None`) none
//! of this happens. The engine never resolves names: the driver resolves an address on every
//! `Action::Connect`, so a bootstrap name that now leads elsewhere is followed.

use super::super::connection::ConnectionState;
use super::super::{Action, Delivery, Micros};
use super::Engine;

impl<D: Delivery> Engine<D> {
    /// Java's `LeastLoadedNode.hasNodeAvailableOrConnectionReady`, over the nodes of the
    /// current list: one has a ready connection, one is connecting, or one may be connected
    /// now (never tried, or its reconnect backoff is over).
    pub(super) fn any_node_available(&self, now: Micros) -> bool {
        self.metadata
            .nodes
            .keys()
            .any(|node| match self.connections.get(node).map(|c| &c.state) {
                None => true,
                Some(ConnectionState::Idle { retry_at }) => *retry_at <= now,
                Some(_) => true,
            })
    }

    /// The first trigger: called when a refresh is due and no connection is ready.
    pub(super) fn maybe_rebootstrap_unreachable(&mut self, now: Micros) {
        if self.config.rebootstrap_trigger.is_none()
            || !self.metadata.bootstrapped
            || self.any_node_available(now)
        {
            // Nothing to do, or the bootstrap list is already in force: replacing it with
            // itself changes nothing (its addresses are resolved on every connect anyway).
            return;
        }
        tracing::warn!(
            target: "kacrab::metadata",
            "every known broker is unreachable; rebootstrapping from bootstrap.servers"
        );
        self.rebootstrap(now);
    }

    /// The second and third triggers (Java's `handleRebootstrap`).
    pub(super) fn maybe_rebootstrap_on_trigger(&mut self, now: Micros) {
        let Some(trigger) = self.config.rebootstrap_trigger else {
            self.metadata_refresh.take_rebootstrap_required();
            return;
        };
        let timed_out = self.metadata_refresh.attempt_timed_out(now, trigger);
        if !timed_out && !self.metadata_refresh.rebootstrap_required() {
            return;
        }
        let required_by_broker = self.metadata_refresh.take_rebootstrap_required();
        tracing::warn!(
            target: "kacrab::metadata",
            required_by_broker,
            "no usable metadata; closing connections and rebootstrapping from bootstrap.servers"
        );
        let mut open: Vec<(i32, u64)> = self
            .metadata
            .nodes
            .keys()
            .filter_map(|node| self.connections.get(node))
            .filter(|c| !matches!(c.state, ConnectionState::Idle { .. }))
            .map(|c| (c.node, c.generation))
            .collect();
        open.sort_unstable();
        for (node, generation) in open {
            self.actions
                .push_back(Action::Disconnect { node, generation });
            self.on_disconnected(now, node, generation);
        }
        self.rebootstrap(now);
    }

    /// Java's `DefaultMetadataUpdater.rebootstrap`: the bootstrap list replaces the brokers,
    /// metadata is wanted at once, and the trigger's clock starts again.
    fn rebootstrap(&mut self, now: Micros) {
        self.metadata.rebootstrap(&self.config.bootstrap_servers);
        self.metadata_refresh.rebootstrapped(now);
        self.stats.rebootstraps += 1;
    }
}

#[cfg(test)]
mod tests;
