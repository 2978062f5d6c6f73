//! The epoch rules of a worker's communicators, as pure state (no I/O, generic over the
//! communicator so it is tested with plain values): at most one SERVING communicator and
//! one PREPARED beside it (make-before-break). A prepared epoch is always newer than the
//! serving one; the engine switches at a safe point of its own choosing (between batches),
//! and only then is the old communicator handed back to be destroyed. A newer placement
//! that arrives before the switch replaces the prepared one (which is handed back too), so
//! no more than two communicators are ever alive per worker, however fast epochs move.

/// A communicator with the epoch it serves.
#[derive(Debug)]
pub struct Staged<C> {
    pub epoch: u64,
    pub comm: C,
}

/// Why an epoch request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EpochRefusal {
    /// A communicator for an epoch not newer than what serves or is prepared.
    #[error("epoch {epoch} is not newer than epoch {current} (serving or prepared)")]
    Stale { epoch: u64, current: u64 },
    /// `switch` with nothing prepared.
    #[error("no communicator prepared to switch to")]
    NothingPrepared,
    /// A collective with no serving communicator.
    #[error("no communicator serves yet (prepare an epoch, then switch)")]
    NothingServing,
    /// The agent placed the worker in a newer epoch while this one was being built: some
    /// of its members will never come (they build the newer one), so the build is dropped
    /// at once instead of waiting out its deadline. Prepare again.
    #[error("epoch {epoch} was superseded by epoch {newer} before it was built")]
    Superseded { epoch: u64, newer: u64 },
}

/// The serving and the prepared communicator.
#[derive(Debug)]
pub struct Epochs<C> {
    serving: Option<Staged<C>>,
    prepared: Option<Staged<C>>,
}

impl<C> Default for Epochs<C> {
    fn default() -> Self {
        Epochs {
            serving: None,
            prepared: None,
        }
    }
}

impl<C> Epochs<C> {
    /// The epoch that serves.
    pub fn serving_epoch(&self) -> Option<u64> {
        self.serving.as_ref().map(|s| s.epoch)
    }

    /// The epoch prepared beside it.
    pub fn prepared_epoch(&self) -> Option<u64> {
        self.prepared.as_ref().map(|s| s.epoch)
    }

    /// The newest epoch known (prepared, else serving).
    pub fn newest(&self) -> Option<u64> {
        self.prepared_epoch().or(self.serving_epoch())
    }

    /// Whether a placement for `epoch` is worth building.
    pub fn wants(&self, epoch: u64) -> bool {
        self.newest().is_none_or(|n| epoch > n)
    }

    /// The serving communicator.
    pub fn serving(&self) -> Result<&C, EpochRefusal> {
        self.serving
            .as_ref()
            .map(|s| &s.comm)
            .ok_or(EpochRefusal::NothingServing)
    }

    /// Checks that `epoch` may be prepared (before the build starts, so a stale placement
    /// never costs a communicator).
    pub fn check(&self, epoch: u64) -> Result<(), EpochRefusal> {
        match self.newest() {
            Some(current) if epoch <= current => Err(EpochRefusal::Stale { epoch, current }),
            _ => Ok(()),
        }
    }

    /// Puts a built communicator beside the serving one. Returns the prepared one it
    /// replaces (to destroy); refuses (handing `comm` back inside the error path is not
    /// needed: [`Self::check`] runs before a build) an epoch that is not newer.
    pub fn prepare(&mut self, epoch: u64, comm: C) -> Result<Option<Staged<C>>, EpochRefusal> {
        if let Some(current) = self.serving_epoch().filter(|c| epoch <= *c) {
            return Err(EpochRefusal::Stale { epoch, current });
        }
        if let Some(current) = self.prepared_epoch().filter(|c| epoch <= *c) {
            return Err(EpochRefusal::Stale { epoch, current });
        }
        Ok(self.prepared.replace(Staged { epoch, comm }))
    }

    /// The safe point: the prepared communicator serves from now on. Returns the new
    /// epoch and the communicator it replaced (to destroy).
    pub fn switch(&mut self) -> Result<(u64, Option<Staged<C>>), EpochRefusal> {
        let next = self.prepared.take().ok_or(EpochRefusal::NothingPrepared)?;
        let epoch = next.epoch;
        Ok((epoch, self.serving.replace(next)))
    }

    /// The prepared communicator, to finish its build before the switch.
    pub fn prepared_mut(&mut self) -> Option<&mut C> {
        self.prepared.as_mut().map(|s| &mut s.comm)
    }

    /// Drops the prepared communicator (its build failed); the serving one stays.
    pub fn discard_prepared(&mut self) -> Option<Staged<C>> {
        self.prepared.take()
    }

    /// Leaves: both communicators are handed back (to destroy).
    pub fn leave(&mut self) -> Vec<Staged<C>> {
        self.prepared
            .take()
            .into_iter()
            .chain(self.serving.take())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prepared_epoch_serves_only_after_the_switch_and_the_old_one_is_handed_back() {
        let mut e = Epochs::default();
        assert_eq!(e.serving().unwrap_err(), EpochRefusal::NothingServing);
        assert!(e.prepare(1, "c1").unwrap().is_none());
        assert_eq!(e.serving().unwrap_err(), EpochRefusal::NothingServing);
        let (epoch, old) = e.switch().unwrap();
        assert_eq!((epoch, old.is_none()), (1, true));
        assert_eq!(*e.serving().unwrap(), "c1");
        e.prepare(2, "c2").unwrap();
        assert_eq!(
            *e.serving().unwrap(),
            "c1",
            "the old epoch serves until the switch"
        );
        assert_eq!((e.serving_epoch(), e.prepared_epoch()), (Some(1), Some(2)));
        let (epoch, old) = e.switch().unwrap();
        assert_eq!(epoch, 2);
        assert_eq!(old.unwrap().comm, "c1");
        assert_eq!(e.switch().unwrap_err(), EpochRefusal::NothingPrepared);
    }

    #[test]
    fn stale_epochs_are_refused_and_a_newer_placement_replaces_the_prepared_one() {
        let mut e = Epochs::default();
        e.prepare(3, "c3").unwrap();
        e.switch().unwrap();
        assert_eq!(
            e.prepare(3, "again").unwrap_err(),
            EpochRefusal::Stale {
                epoch: 3,
                current: 3
            }
        );
        assert!(e.check(2).is_err() && e.check(4).is_ok());
        assert!(!e.wants(3) && e.wants(4));
        e.prepare(4, "c4").unwrap();
        assert!(!e.wants(4));
        let replaced = e.prepare(5, "c5").unwrap().unwrap();
        assert_eq!((replaced.epoch, replaced.comm), (4, "c4"));
        assert!(e.prepare(4, "late").is_err());
        *e.prepared_mut().unwrap() = "c5'";
        assert_eq!(e.discard_prepared().unwrap().comm, "c5'");
        assert_eq!(
            *e.serving().unwrap(),
            "c3",
            "a failed build leaves the old epoch serving"
        );
        e.prepare(5, "c5").unwrap();
        let gone: Vec<u64> = e.leave().iter().map(|s| s.epoch).collect();
        assert_eq!(gone, vec![5, 3]);
        assert_eq!(e.newest(), None);
    }
}
