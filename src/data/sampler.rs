//! The sampler: the deterministic order in which records are delivered.
//!
//! Records are organised in *groups* (a view is a group of one record; a point-cloud sample
//! is a group of its chunks, delivered consecutively in chunk order). Each epoch visits every
//! group once, in a random permutation of the groups (the original 3DGS "camera stack" order):
//! epoch `e` shuffles the group list with `Rng::derived(seed, e)` (Fisher–Yates).
//!
//! Invariants:
//! - The order of epoch `e` depends only on (seed, groups, e): a [`Position`] (epoch, index)
//!   fully determines the future, so a run resumed from a saved position continues the exact
//!   sequence, and any epoch can be computed without replaying earlier ones.
//! - Every record appears exactly once per epoch, so the next use of any record is always in
//!   the current or the next epoch; [`Sampler::next_use`] uses that to answer Belady's question
//!   ("when is this record needed again?") in O(1) from two inverse tables.

use crate::rng::Rng;

/// Where the sequence stands: the `index`-th record of epoch `epoch`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Position {
    pub epoch: u64,
    pub index: u64,
}

/// One scheduled record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    pub position: Position,
    /// Position counted from the start of epoch 0: `epoch · records + index`.
    pub global: u64,
    /// Record id (index into the record source).
    pub record: u32,
    /// The group this record belongs to and its index within the group.
    pub group: u32,
    pub part: u32,
    /// Whether this is the last record of its group (a point-cloud sample is complete).
    pub last_part: bool,
}

#[derive(Clone, Debug)]
struct EpochTable {
    epoch: u64,
    /// Steps of the epoch in delivery order: (record, group, part, last_part).
    order: Vec<(u32, u32, u32, bool)>,
    /// record id → its index in `order`.
    index_of: Vec<u32>,
}

/// Seeded per-epoch permutations over groups of records, with random access to the future.
#[derive(Clone, Debug)]
pub struct Sampler {
    seed: u64,
    /// `groups[g]` = record ids of group `g`, in delivery order.
    groups: Vec<Vec<u32>>,
    records: usize,
    pos: Position,
    /// Tables of the current and the next epoch (the cache looks one epoch ahead).
    tables: [EpochTable; 2],
}

/// Errors constructing a sampler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SamplerError {
    #[error("the sampler has no records to schedule (the pack has no records of this kind/split)")]
    Empty,
    #[error("record {record} appears in more than one group, or record ids are not 0..{records}")]
    NotAPartition { record: u32, records: usize },
    #[error("resume position {position:?} is past the end of epoch (it has {records} records)")]
    BadPosition { position: Position, records: usize },
}

impl Sampler {
    /// One group per record: records `0..n`, e.g. the train views.
    pub fn singletons(seed: u64, n: usize) -> Result<Sampler, SamplerError> {
        Sampler::grouped(seed, (0..n as u32).map(|r| vec![r]).collect())
    }

    /// `groups` must partition the record ids `0..R` (each id in exactly one group).
    pub fn grouped(seed: u64, groups: Vec<Vec<u32>>) -> Result<Sampler, SamplerError> {
        let records: usize = groups.iter().map(Vec::len).sum();
        if records == 0 {
            return Err(SamplerError::Empty);
        }
        let mut seen = vec![false; records];
        for &r in groups.iter().flatten() {
            match seen.get_mut(r as usize) {
                Some(s) if !*s => *s = true,
                _ => return Err(SamplerError::NotAPartition { record: r, records }),
            }
        }
        let groups: Vec<Vec<u32>> = groups.into_iter().filter(|g| !g.is_empty()).collect();
        let t0 = Self::table(seed, &groups, records, 0);
        let t1 = Self::table(seed, &groups, records, 1);
        Ok(Sampler {
            seed,
            groups,
            records,
            pos: Position { epoch: 0, index: 0 },
            tables: [t0, t1],
        })
    }

    fn table(seed: u64, groups: &[Vec<u32>], records: usize, epoch: u64) -> EpochTable {
        let mut perm: Vec<u32> = (0..groups.len() as u32).collect();
        Rng::derived(seed, epoch).shuffle(&mut perm);
        let mut order = Vec::with_capacity(records);
        let mut index_of = vec![0u32; records];
        for g in perm {
            let members = &groups[g as usize];
            for (part, &r) in members.iter().enumerate() {
                index_of[r as usize] = order.len() as u32;
                order.push((r, g, part as u32, part + 1 == members.len()));
            }
        }
        EpochTable {
            epoch,
            order,
            index_of,
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Records per epoch.
    pub fn records(&self) -> usize {
        self.records
    }

    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// The position of the next record [`Sampler::next`] returns.
    pub fn position(&self) -> Position {
        self.pos
    }

    /// Moves to `position` (resume). Index must be below the records per epoch.
    pub fn seek(&mut self, position: Position) -> Result<(), SamplerError> {
        if position.index >= self.records as u64 {
            return Err(SamplerError::BadPosition {
                position,
                records: self.records,
            });
        }
        self.pos = position;
        self.ensure_tables(position.epoch);
        Ok(())
    }

    fn ensure_tables(&mut self, epoch: u64) {
        if self.tables[0].epoch == epoch {
            return;
        }
        if self.tables[1].epoch == epoch {
            self.tables.swap(0, 1);
            // The old current epoch is done: replace it with the epoch after the new current.
            self.tables[1] = Self::table(self.seed, &self.groups, self.records, epoch + 1);
        } else {
            self.tables[0] = Self::table(self.seed, &self.groups, self.records, epoch);
            self.tables[1] = Self::table(self.seed, &self.groups, self.records, epoch + 1);
        }
    }

    fn global(&self, p: Position) -> u64 {
        p.epoch * self.records as u64 + p.index
    }

    fn step_at(&self, p: Position) -> Step {
        let t = if self.tables[0].epoch == p.epoch {
            &self.tables[0]
        } else {
            debug_assert_eq!(self.tables[1].epoch, p.epoch);
            &self.tables[1]
        };
        let (record, group, part, last_part) = t.order[p.index as usize];
        Step {
            position: p,
            global: self.global(p),
            record,
            group,
            part,
            last_part,
        }
    }

    fn advance(&self, p: Position) -> Position {
        if p.index + 1 == self.records as u64 {
            Position {
                epoch: p.epoch + 1,
                index: 0,
            }
        } else {
            Position {
                epoch: p.epoch,
                index: p.index + 1,
            }
        }
    }

    /// The record at the current position; advances. The sequence is infinite (epochs go on).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Step {
        let step = self.step_at(self.pos);
        self.pos = self.advance(self.pos);
        self.ensure_tables(self.pos.epoch);
        step
    }

    /// The next `k` steps without advancing (bounded by the rest of this epoch and the next,
    /// the future the sampler keeps tables for).
    pub fn peek(&self, k: usize) -> Vec<Step> {
        let mut out = Vec::with_capacity(k.min(2 * self.records));
        let mut p = self.pos;
        while out.len() < k && p.epoch <= self.pos.epoch + 1 {
            out.push(self.step_at(p));
            p = self.advance(p);
        }
        out
    }

    /// The global position at which `record` is next needed strictly after global position
    /// `after` (which must lie in the current epoch or later within the sampler's tables).
    /// Every record occurs once per epoch, so the answer is in this epoch or the next.
    pub fn next_use(&self, record: u32, after: u64) -> u64 {
        let n = self.records as u64;
        let epoch = after / n;
        let idx_in = |t: &EpochTable| t.epoch * n + t.index_of[record as usize] as u64;
        let cur = self.tables.iter().find(|t| t.epoch == epoch);
        let next = self.tables.iter().find(|t| t.epoch == epoch + 1);
        match (cur, next) {
            (Some(c), _) if idx_in(c) > after => idx_in(c),
            (_, Some(nx)) => idx_in(nx),
            // Outside the tables (should not happen for positions near the cursor): the
            // record is certainly used again, no later than the end of the epoch after next.
            _ => (epoch + 2) * n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(s: &mut Sampler, k: usize) -> Vec<u32> {
        (0..k).map(|_| s.next().record).collect()
    }

    #[test]
    fn each_epoch_is_a_permutation_and_epochs_differ() {
        let mut s = Sampler::singletons(42, 50).unwrap();
        let e0 = take(&mut s, 50);
        let e1 = take(&mut s, 50);
        for e in [&e0, &e1] {
            let mut sorted = e.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        }
        assert_ne!(e0, e1);
        assert_ne!(e0, (0..50).collect::<Vec<_>>());
        assert_eq!(s.position(), Position { epoch: 2, index: 0 });
    }

    #[test]
    fn same_seed_same_sequence_other_seed_differs() {
        let a = take(&mut Sampler::singletons(7, 30).unwrap(), 200);
        let b = take(&mut Sampler::singletons(7, 30).unwrap(), 200);
        let c = take(&mut Sampler::singletons(8, 30).unwrap(), 200);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn resume_continues_the_same_sequence() {
        let full = take(&mut Sampler::singletons(3, 17).unwrap(), 17 * 5);
        for stop in [0usize, 1, 16, 17, 40, 84] {
            let mut first = Sampler::singletons(3, 17).unwrap();
            let head = take(&mut first, stop);
            let saved = first.position();
            let mut resumed = Sampler::singletons(3, 17).unwrap();
            resumed.seek(saved).unwrap();
            let tail = take(&mut resumed, 17 * 5 - stop);
            assert_eq!([head, tail].concat(), full, "stop at {stop}");
        }
        let mut s = Sampler::singletons(3, 17).unwrap();
        assert!(s
            .seek(Position {
                epoch: 0,
                index: 17
            })
            .is_err());
    }

    #[test]
    fn peek_shows_the_future_without_advancing() {
        let mut s = Sampler::singletons(5, 10).unwrap();
        s.next();
        let future: Vec<u32> = s.peek(15).iter().map(|st| st.record).collect();
        assert_eq!(future.len(), 15);
        assert_eq!(take(&mut s, 15), future);
        assert!(s.peek(100).len() <= 20, "peek stops after the next epoch");
    }

    #[test]
    fn next_use_matches_a_brute_force_scan() {
        let n = 12;
        let mut s = Sampler::singletons(9, n).unwrap();
        let seq = take(&mut Sampler::singletons(9, n).unwrap(), n * 4);
        for (t, _) in seq.iter().enumerate().take(n * 2) {
            let now = s.next();
            assert_eq!(now.global, t as u64);
            for r in 0..n as u32 {
                let brute = (t + 1..).find(|&u| seq[u] == r).unwrap() as u64;
                assert_eq!(s.next_use(r, t as u64), brute, "record {r} after {t}");
            }
        }
    }

    #[test]
    fn groups_stay_together_in_part_order() {
        let groups = vec![vec![0, 1, 2], vec![3], vec![4, 5]];
        let mut s = Sampler::grouped(1, groups.clone()).unwrap();
        for _ in 0..3 {
            let mut seen = Vec::new();
            while seen.len() < 6 {
                let st = s.next();
                assert_eq!(st.record, groups[st.group as usize][st.part as usize]);
                assert_eq!(
                    st.last_part,
                    st.part as usize + 1 == groups[st.group as usize].len()
                );
                seen.push(st);
            }
            // Parts of a group are consecutive and in order.
            for w in seen.windows(2) {
                if !w[0].last_part {
                    assert_eq!((w[1].group, w[1].part), (w[0].group, w[0].part + 1));
                }
            }
        }
        assert_eq!(
            Sampler::grouped(1, vec![vec![0], vec![0]]).unwrap_err(),
            SamplerError::NotAPartition {
                record: 0,
                records: 2
            }
        );
        assert_eq!(
            Sampler::grouped(1, vec![]).unwrap_err(),
            SamplerError::Empty
        );
    }
}
