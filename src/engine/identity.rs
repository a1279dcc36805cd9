//! The producer id and epoch, and the one place that decides an idempotent epoch bump.

/// Java's `ProducerIdAndEpoch`. `NONE` is (-1, -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub epoch: i16,
}

impl ProducerIdAndEpoch {
    pub const NONE: ProducerIdAndEpoch = ProducerIdAndEpoch {
        producer_id: -1,
        epoch: -1,
    };

    pub fn new(producer_id: i64, epoch: i16) -> Self {
        ProducerIdAndEpoch { producer_id, epoch }
    }

    pub fn is_valid(self) -> bool {
        self.producer_id > -1
    }
}

/// Decides idempotent epoch bumps for every shard of one producer (KIP-360, Java's
/// `bumpIdempotentProducerEpoch`): bumps are requested with the identity the requester
/// observed, so any number of concurrent requests naming the same identity produce exactly one
/// bump, and a request naming an identity already replaced is ignored.
///
/// Invariant: for one producer id, the epoch only goes up; at `i16::MAX` the id is dropped
/// (`NONE`) and a fresh InitProducerId must be obtained.
#[derive(Debug, Clone)]
pub struct EpochCoordinator {
    current: ProducerIdAndEpoch,
    /// Incremented on every change, so observers can detect one cheaply.
    generation: u64,
}

impl Default for EpochCoordinator {
    fn default() -> Self {
        EpochCoordinator {
            current: ProducerIdAndEpoch::NONE,
            generation: 0,
        }
    }
}

impl EpochCoordinator {
    pub fn current(&self) -> ProducerIdAndEpoch {
        self.current
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Installs the identity returned by InitProducerId. Ignored unless no valid identity is in
    /// force (a late answer to a superseded request must not replace a newer identity).
    pub fn install(&mut self, identity: ProducerIdAndEpoch) -> bool {
        if self.current.is_valid() || !identity.is_valid() {
            return false;
        }
        self.current = identity;
        self.generation += 1;
        true
    }

    /// Installs the identity a transactional InitProducerId returned (the first one, a bump or
    /// a new producer id), replacing `from` only if `from` is still in force: the transaction
    /// coordinator, not this coordinator, decides transactional epochs.
    pub fn replace(&mut self, from: ProducerIdAndEpoch, to: ProducerIdAndEpoch) -> bool {
        if self.current != from || !to.is_valid() || to == from {
            return false;
        }
        self.current = to;
        self.generation += 1;
        true
    }

    /// A bump requested by a shard that observed `observed`. Returns the new identity when this
    /// request caused the bump.
    pub fn request_bump(&mut self, observed: ProducerIdAndEpoch) -> Option<ProducerIdAndEpoch> {
        if observed != self.current || !observed.is_valid() {
            return None;
        }
        self.current = if observed.epoch == i16::MAX {
            ProducerIdAndEpoch::NONE
        } else {
            ProducerIdAndEpoch::new(observed.producer_id, observed.epoch + 1)
        };
        self.generation += 1;
        Some(self.current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_bumps_for_the_same_epoch_bump_once() {
        let mut c = EpochCoordinator::default();
        assert!(c.install(ProducerIdAndEpoch::new(7, 0)));
        let observed = c.current();
        assert_eq!(
            c.request_bump(observed),
            Some(ProducerIdAndEpoch::new(7, 1))
        );
        assert_eq!(c.request_bump(observed), None);
        assert_eq!(c.current(), ProducerIdAndEpoch::new(7, 1));
    }

    #[test]
    fn bump_at_epoch_limit_drops_the_producer_id() {
        let mut c = EpochCoordinator::default();
        c.install(ProducerIdAndEpoch::new(7, i16::MAX));
        assert_eq!(
            c.request_bump(ProducerIdAndEpoch::new(7, i16::MAX)),
            Some(ProducerIdAndEpoch::NONE)
        );
        assert!(c.install(ProducerIdAndEpoch::new(8, 0)));
    }

    #[test]
    fn late_install_does_not_replace_a_newer_identity() {
        let mut c = EpochCoordinator::default();
        c.install(ProducerIdAndEpoch::new(7, 0));
        assert!(!c.install(ProducerIdAndEpoch::new(9, 0)));
    }
}
