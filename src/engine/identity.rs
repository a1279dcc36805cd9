//! The producer id and epoch, and the one place that decides an idempotent epoch bump.

/// Java's `ProducerIdAndEpoch`. `NONE` is (-1, -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerIdAndEpoch {
    /// The producer id the broker assigned (-1: none).
    pub producer_id: i64,
    /// Its epoch (-1: none).
    pub epoch: i16,
}

impl ProducerIdAndEpoch {
    /// No producer id yet.
    pub const NONE: ProducerIdAndEpoch = ProducerIdAndEpoch {
        producer_id: -1,
        epoch: -1,
    };

    /// `producer_id` at `epoch`.
    pub fn new(producer_id: i64, epoch: i16) -> Self {
        ProducerIdAndEpoch { producer_id, epoch }
    }

    /// A producer id was assigned (Java's `isValid`).
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

    #[test]
    fn none_is_invalid_and_every_non_negative_producer_id_is_valid() {
        assert_eq!(ProducerIdAndEpoch::NONE, ProducerIdAndEpoch::new(-1, -1));
        assert!(!ProducerIdAndEpoch::NONE.is_valid());
        assert!(!ProducerIdAndEpoch::new(-2, 0).is_valid());
        assert!(ProducerIdAndEpoch::new(0, 0).is_valid());
        assert!(ProducerIdAndEpoch::new(1, 0).is_valid());
        assert!(ProducerIdAndEpoch::new(i64::MAX, 5).is_valid());
        assert_eq!(
            EpochCoordinator::default().current(),
            ProducerIdAndEpoch::NONE
        );
    }

    #[test]
    fn install_takes_only_a_valid_identity_and_only_when_none_is_in_force() {
        let mut c = EpochCoordinator::default();
        assert!(!c.install(ProducerIdAndEpoch::NONE));
        assert_eq!(c.current(), ProducerIdAndEpoch::NONE);
        assert_eq!(c.generation(), 0);
        assert!(c.install(ProducerIdAndEpoch::new(7, 3)));
        assert_eq!(c.current(), ProducerIdAndEpoch::new(7, 3));
        assert_eq!(c.generation(), 1);
        // A second valid identity (a late answer) and an invalid one are both refused.
        assert!(!c.install(ProducerIdAndEpoch::new(9, 0)));
        assert!(!c.install(ProducerIdAndEpoch::NONE));
        assert_eq!(c.current(), ProducerIdAndEpoch::new(7, 3));
        assert_eq!(c.generation(), 1);
    }

    #[test]
    fn every_change_of_identity_raises_the_generation_by_one_and_a_refusal_does_not() {
        let mut c = EpochCoordinator::default();
        assert_eq!(c.generation(), 0);
        assert!(c.install(ProducerIdAndEpoch::new(7, 0)));
        assert_eq!(c.generation(), 1);
        assert!(c.request_bump(ProducerIdAndEpoch::new(7, 0)).is_some());
        assert_eq!(c.generation(), 2);
        assert!(c.request_bump(ProducerIdAndEpoch::new(7, 0)).is_none());
        assert_eq!(c.generation(), 2);
        assert!(c.replace(ProducerIdAndEpoch::new(7, 1), ProducerIdAndEpoch::new(8, 0)));
        assert_eq!(c.generation(), 3);
        assert!(!c.replace(ProducerIdAndEpoch::new(7, 1), ProducerIdAndEpoch::new(9, 0)));
        assert_eq!(c.generation(), 3);
    }

    #[test]
    fn replace_needs_the_identity_in_force_and_a_different_valid_one() {
        let mut c = EpochCoordinator::default();
        let first = ProducerIdAndEpoch::new(7, 0);
        // From NONE to the first identity of a transactional producer.
        assert!(c.replace(ProducerIdAndEpoch::NONE, first));
        assert_eq!(c.current(), first);
        // `from` no longer in force.
        assert!(!c.replace(ProducerIdAndEpoch::NONE, ProducerIdAndEpoch::new(9, 0)));
        // To an invalid identity.
        assert!(!c.replace(first, ProducerIdAndEpoch::NONE));
        // To itself: nothing changes.
        assert!(!c.replace(first, first));
        assert_eq!(c.current(), first);
        assert_eq!(c.generation(), 1);
        // A coordinator bump.
        let bumped = ProducerIdAndEpoch::new(7, 1);
        assert!(c.replace(first, bumped));
        assert_eq!(c.current(), bumped);
        assert_eq!(c.generation(), 2);
    }

    #[test]
    fn a_bump_raises_the_epoch_by_one_and_only_from_a_valid_identity_in_force() {
        let mut c = EpochCoordinator::default();
        // Nothing in force: a request naming NONE does not bump.
        assert_eq!(c.request_bump(ProducerIdAndEpoch::NONE), None);
        assert_eq!(c.current(), ProducerIdAndEpoch::NONE);
        assert_eq!(c.generation(), 0);
        assert!(c.install(ProducerIdAndEpoch::new(7, 4)));
        // A request naming another identity is ignored.
        assert_eq!(c.request_bump(ProducerIdAndEpoch::new(7, 3)), None);
        assert_eq!(c.request_bump(ProducerIdAndEpoch::new(8, 4)), None);
        assert_eq!(c.current(), ProducerIdAndEpoch::new(7, 4));
        assert_eq!(
            c.request_bump(ProducerIdAndEpoch::new(7, 4)),
            Some(ProducerIdAndEpoch::new(7, 5))
        );
        assert_eq!(c.current(), ProducerIdAndEpoch::new(7, 5));
    }
}
