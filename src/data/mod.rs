//! The memory-bounded data loader: sampler → byte-budgeted cache → prefetch ring → consumer.
//!
//! - [`sampler`]: seeded per-epoch permutations with a known future (resume from a position).
//! - [`cache`]: byte-budgeted cache of decoded records, Belady (known future) or LRU.
//! - [`prefetch`]: the fixed ring of host buffers filled by worker threads in sampler order.
//! - [`bench`](mod@bench): `gs-pack bench`, the loader alone with a consumer as fast as a trainer could be.
//!
//! The loader is generic over the *record kind* through [`RecordSource`]: a record is anything
//! with a known decoded length that can be decoded into a caller's buffer — a view's RGB8
//! pixels, or one chunk of a point cloud. Records are scheduled in groups (see
//! [`sampler::Sampler::grouped`]): views are groups of one; a point-cloud dataset sample is the
//! group of one cloud's chunks, delivered chunk by chunk, consecutively and in chunk order,
//! each [`prefetch::Delivered`] carrying (group, part, last_part), so a consumer assembles a
//! sample of any size while the ring holds at most `slots` chunks (a chunk of 65,536 points
//! decodes to ≤ 1.8 MiB, so clouds never need a slot of their own size).
//!
//! # Memory
//! [`plan_memory`] computes the [`Floor`] before any work (measured baseline RSS + margins +
//! ring + per-worker scratch), fails with the itemised error if it exceeds the budget, reserves
//! each part in a [`Ledger`] and gives the rest to the cache. Every loader allocation that
//! scales with data is one of: ring slots (fixed), cache entries (bounded by its reservation),
//! the sampler's group list and two epoch tables and the cache index (the bookkeeping item,
//! per record). What the kernel counts without a Rust value owning it is bounded too: a
//! worker's mapped file pages (the record it decodes plus one page-cache folio at each end; the
//! reader releases them with the record, see [`crate::shard::reader`]) and freed buffers
//! (the plan pins glibc to give every buffer of 256 KiB or more back on free,
//! [`crate::budget::bound_allocator`]), so nothing grows with the number of records read.
//! [`expected_hit_rate`] replays the real cache on the known order to say what a share buys.
//!
//! Measured at the seed scale (600 views of 1600×1066 + 4M points, 2.9 GiB decoded, written by
//! [`crate::synth::packs::write_scale_pack`]; `gs-pack bench --epochs 2`, debug build): VmHWM 497 MiB at
//! `--ram-budget 512M`, 1005 MiB at 1G, 2030 MiB at 2G, 15 to 19 MiB under each cap
//! (`tests/loader_memory.rs`, `seed_scale_bench_stays_under_512m_1g_and_2g`).

pub mod bench;
pub mod cache;
pub mod pinned;
pub mod prefetch;
pub mod sampler;
pub mod sources;

#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};

use crate::budget::{
    BudgetError, Component, Floor, FloorInputs, FloorItem, Ledger, ModelShare, Reservation,
};

pub use cache::{Cache, CachePolicy};
pub use prefetch::{
    Delivered, HeapSlots, HostBuffer, Loader, LoaderConfig, LoaderStats, SlotAllocator,
};
pub use sampler::{Position, Sampler, Step};

/// Loader errors. Each names the record (view name / cloud + chunk) where one is involved.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {record}: {source}")]
    Read {
        record: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("loader {thread} panicked while loading {record}: {msg}")]
    Panic {
        thread: String,
        record: String,
        msg: String,
    },
    #[error(transparent)]
    Budget(#[from] BudgetError),
    #[error(transparent)]
    Sampler(#[from] sampler::SamplerError),
    #[error("loader configuration: --workers and --prefetch must be at least 1")]
    NoWorkers,
    #[error("loader configuration: the sampler schedules {sampler} records but the source has {source_len}")]
    SamplerMismatch { sampler: usize, source_len: usize },
    #[error("cannot start loader thread")]
    Spawn(#[source] std::io::Error),
    #[error(
        "the consumer holds all {held} ring slots; drop delivered records before asking for more"
    )]
    AllSlotsHeld { held: usize },
    #[error("cannot allocate a {len}-byte pinned ring slot")]
    PinnedSlot {
        len: usize,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("the pack has no train views to load")]
    NoViews,
    #[error(
        "this process already peaked at {} before the loader started, above --ram-budget {}; \
         run the bench in a fresh process",
        crate::budget::format_size(*peak),
        crate::budget::format_size(*budget)
    )]
    AlreadyOverBudget { peak: u64, budget: u64 },
    #[error("the loader stopped after an earlier error")]
    Stopped,
}

/// Something the loader can schedule and decode: views, point chunks, or a test mock.
/// Records are numbered `0..len()`.
pub trait RecordSource: Send + Sync {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of record `record` once decoded.
    fn decoded_len(&self, record: u32) -> usize;
    /// Bytes of record `record` as stored (what a worker maps while decoding it).
    fn stored_len(&self, record: u32) -> u64;
    /// Decodes record `record` into `out` (exactly `decoded_len` bytes).
    fn read_into(&self, record: u32, out: &mut [u8]) -> Result<(), LoadError>;
    /// Bytes [`RecordSource::read_into`] allocates besides `out` while it decodes `record`
    /// (the memory plan reserves the largest for each worker); default 0.
    fn decode_scratch(&self, _record: u32) -> usize {
        0
    }
    /// What [`RecordSource::decode_scratch`] holds, for the memory plan.
    fn decode_scratch_what(&self) -> &'static str {
        "decoding scratch"
    }
    /// Human name for messages ("view 'IMG_3.jpg' (#3)").
    fn describe(&self, record: u32) -> String;
    /// Scheduling groups (see the module doc); default: one group per record.
    fn groups(&self) -> Vec<Vec<u32>> {
        (0..self.len() as u32).map(|r| vec![r]).collect()
    }
}

/// Records held in memory: the "everything in RAM" baseline of the loader benchmark, and unit
/// tests. Record `i` decodes to `records[i]`; `groups` replaces the one-record groups.
#[derive(Debug, Default)]
pub struct MemSource {
    pub records: Vec<Vec<u8>>,
    pub groups: Option<Vec<Vec<u32>>>,
}

impl MemSource {
    pub fn new(records: Vec<Vec<u8>>) -> MemSource {
        MemSource {
            records,
            groups: None,
        }
    }
}

impl RecordSource for MemSource {
    fn len(&self) -> usize {
        self.records.len()
    }
    fn decoded_len(&self, record: u32) -> usize {
        self.records[record as usize].len()
    }
    fn stored_len(&self, record: u32) -> u64 {
        self.records[record as usize].len() as u64
    }
    fn read_into(&self, record: u32, out: &mut [u8]) -> Result<(), LoadError> {
        out.copy_from_slice(&self.records[record as usize]);
        Ok(())
    }
    fn describe(&self, record: u32) -> String {
        format!("in-memory record #{record}")
    }
    fn groups(&self) -> Vec<Vec<u32>> {
        self.groups
            .clone()
            .unwrap_or_else(|| (0..self.len() as u32).map(|r| vec![r]).collect())
    }
}

/// A [`MemSource`] with fault injection, for the loader's tests: `fail_on` / `panic_on` make
/// one record fail or panic, `delay` scrambles completion order, `reads` counts decodes.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct FaultySource {
    pub inner: MemSource,
    pub fail_on: Option<u32>,
    pub panic_on: Option<u32>,
    /// Sleep this long per read, scaled by (record % 3).
    pub delay: std::time::Duration,
    pub reads: AtomicU64,
}

#[cfg(test)]
impl FaultySource {
    pub fn new(records: Vec<Vec<u8>>) -> FaultySource {
        FaultySource {
            inner: MemSource::new(records),
            ..FaultySource::default()
        }
    }
}

#[cfg(test)]
impl RecordSource for FaultySource {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn decoded_len(&self, record: u32) -> usize {
        self.inner.decoded_len(record)
    }
    fn stored_len(&self, record: u32) -> u64 {
        self.inner.stored_len(record)
    }
    fn read_into(&self, record: u32, out: &mut [u8]) -> Result<(), LoadError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay * (record % 3));
        }
        if self.fail_on == Some(record) {
            return Err(LoadError::Read {
                record: self.describe(record),
                source: "injected failure".into(),
            });
        }
        if self.panic_on == Some(record) {
            panic!("injected panic on record {record}");
        }
        self.inner.read_into(record, out)
    }
    fn describe(&self, record: u32) -> String {
        self.inner.describe(record)
    }
    fn groups(&self) -> Vec<Vec<u32>> {
        self.inner.groups()
    }
}

/// The ledger after planning: fixed parts reserved, the rest available to the cache.
#[derive(Debug)]
pub struct MemoryPlan {
    pub floor: Floor,
    pub ledger: Ledger,
    /// Reservations of the floor's items (held for the run).
    pub fixed: Vec<Reservation>,
    /// The cache's share: everything the floor leaves.
    pub cache: Reservation,
}

impl MemoryPlan {
    /// Removes and returns the reservation of the floor item of `component` (e.g. the model's,
    /// which the trainer then resizes).
    pub fn take(&mut self, component: Component) -> Option<Reservation> {
        let i = self.fixed.iter().position(|r| r.component() == component)?;
        Some(self.fixed.remove(i))
    }

    /// Releases the floor item of `component` (memory that was needed only until now, e.g.
    /// the initialisation scratch, already freed) and gives its bytes to the cache; returns
    /// them.
    pub fn release_to_cache(&mut self, component: Component) -> u64 {
        let Some(r) = self.take(component) else {
            return 0;
        };
        let bytes = r.bytes();
        drop(r);
        self.cache
            .resize(self.cache.bytes() + bytes)
            .expect("the bytes just released are free");
        bytes
    }
}

/// What a plan holds besides the loader's own parts.
#[derive(Clone, Debug, Default)]
pub struct PlanExtras {
    /// Fixed components.
    pub items: Vec<FloorItem>,
    /// Threads started after the baseline besides the loader's workers (a compute pool).
    pub threads: usize,
    /// The trainer's model.
    pub model: Option<ModelShare>,
}

/// The floor of loading `source` with `config` under `budget`, not yet checked.
pub fn floor_of(
    budget: u64,
    source: &dyn RecordSource,
    config: &LoaderConfig,
    baseline_rss: u64,
    extras: PlanExtras,
) -> Floor {
    let n = source.len() as u32;
    let slot_bytes = (0..n).map(|r| source.decoded_len(r)).max().unwrap_or(0) as u64;
    let max_stored = (0..n).map(|r| source.stored_len(r)).max().unwrap_or(0);
    let max_scratch = (0..n).map(|r| source.decode_scratch(r)).max().unwrap_or(0);
    let inputs = FloorInputs {
        baseline_rss,
        // The workers; scheduling runs on the consumer thread (already in the baseline).
        threads: config.workers + extras.threads,
        workers: config.workers,
        ring_slots: config.slots(),
        slot_bytes,
        max_stored_bytes: max_stored,
        max_decode_scratch: max_scratch as u64,
        decode_scratch_what: source.decode_scratch_what().to_owned(),
        records: source.len(),
        extra: extras.items,
        model: extras.model,
    };
    Floor::compute(budget, &inputs)
}

/// Computes the floor for `source` under `budget` (before any work), fails with the itemised
/// [`BudgetError::BelowFloor`] if it does not fit, and reserves the parts. `baseline_rss` is
/// the process RSS measured before anything that scales with the data exists (after the
/// dataset is opened); `extras` are the other fixed components (staging, model). Also pins the
/// allocator ([`crate::budget::bound_allocator`]) so freed buffers leave the resident set.
pub fn plan_memory(
    budget: u64,
    source: &dyn RecordSource,
    config: &LoaderConfig,
    baseline_rss: u64,
    extras: PlanExtras,
) -> Result<MemoryPlan, LoadError> {
    let floor = floor_of(budget, source, config, baseline_rss, extras);
    floor.check()?;
    crate::budget::bound_allocator();
    let ledger = Ledger::new(budget);
    let fixed = floor
        .items
        .iter()
        .map(|i| ledger.reserve(i.component, i.bytes))
        .collect::<Result<Vec<_>, _>>()?;
    let cache = ledger.reserve_rest(Component::Cache);
    Ok(MemoryPlan {
        floor,
        ledger,
        fixed,
        cache,
    })
}

/// The cache hit rate the loader will reach over `steps` deliveries from `start`: the real
/// [`Cache`] and [`Sampler`] run on the known order with `capacity` bytes, every record
/// counted at the cost of the largest one (exact for packs of one view size), nothing decoded.
pub fn expected_hit_rate(
    source: &dyn RecordSource,
    policy: CachePolicy,
    capacity: u64,
    seed: u64,
    start: Position,
    steps: u64,
) -> Result<f64, LoadError> {
    let n = source.len() as u32;
    let largest = (0..n).map(|r| source.decoded_len(r)).max().unwrap_or(0);
    let per_record = cache::entry_cost(largest);
    let fits = capacity.checked_div(per_record).unwrap_or(0);
    let mut sampler = Sampler::grouped(seed, source.groups())?;
    sampler.seek(start)?;
    // One byte per record, room for `fits` of them: the same decisions as the real sizes.
    let mut sim = Cache::with_capacity(policy, fits * cache::entry_cost(1));
    let mut out = [0u8; 1];
    for _ in 0..steps {
        let step = sampler.next();
        let nu = sampler.next_use(step.record, step.global);
        if sim.serve_into(step.record, nu, &mut out).is_none() {
            if let Some(buf) = sim.admit(step.record, 1, nu) {
                sim.complete(step.record, buf);
            }
        }
    }
    Ok(sim.stats().hit_rate())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn records(n: usize, len: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| (0..len).map(|j| (i * 31 + j * 7) as u8).collect())
            .collect()
    }

    fn config(workers: usize, prefetch: usize, limit: u64) -> LoaderConfig {
        LoaderConfig {
            workers,
            prefetch,
            start: Position { epoch: 0, index: 0 },
            limit: Some(limit),
        }
    }

    /// (record, position, bytes, from_cache) of one delivery.
    type Got = (u32, Position, Vec<u8>, bool);

    fn run(
        source: Arc<FaultySource>,
        cache: Cache,
        cfg: &LoaderConfig,
        seed: u64,
    ) -> (Vec<Got>, LoaderStats) {
        let sampler = Sampler::grouped(seed, source.groups()).unwrap();
        let mut loader = Loader::start(source, sampler, cache, &HeapSlots, cfg).unwrap();
        let mut out = Vec::new();
        while let Some(d) = loader.next() {
            let d = d.unwrap();
            out.push((d.record(), d.position(), d.to_vec(), d.from_cache()));
        }
        (out, loader.stats())
    }

    #[test]
    fn delivers_sampler_order_and_exact_bytes_with_many_workers() {
        let recs = records(23, 1000);
        let mut src = FaultySource::new(recs.clone());
        src.delay = Duration::from_micros(300);
        let src = Arc::new(src);
        let expect: Vec<u32> = {
            let mut s = Sampler::singletons(11, 23).unwrap();
            (0..23 * 3).map(|_| s.next().record).collect()
        };
        for workers in [1, 2, 4] {
            let cache = Cache::with_capacity(CachePolicy::Belady, 8 * cache::entry_cost(1000));
            let (got, stats) = run(src.clone(), cache, &config(workers, 3, 23 * 3), 11);
            assert_eq!(
                got.iter().map(|g| g.0).collect::<Vec<_>>(),
                expect,
                "{workers} workers"
            );
            for (rec, _, bytes, _) in &got {
                assert_eq!(bytes, &recs[*rec as usize]);
            }
            assert_eq!(stats.delivered, 69);
            assert_eq!(stats.bytes, 69_000);
            assert_eq!(stats.hits + stats.misses, 69);
            assert!(
                stats.hits > 0,
                "a cache of 8 of 23 records hits after the first epoch"
            );
        }
    }

    #[test]
    fn resume_continues_the_sequence() {
        let src = Arc::new(FaultySource::new(records(10, 64)));
        let cache = || Cache::with_capacity(CachePolicy::Belady, 0);
        let (full, _) = run(src.clone(), cache(), &config(2, 2, 40), 5);
        let (head, _) = run(src.clone(), cache(), &config(2, 2, 17), 5);
        let resume = LoaderConfig {
            start: head
                .last()
                .map(|h| Position {
                    epoch: h.1.epoch + (h.1.index + 1) / 10,
                    index: (h.1.index + 1) % 10,
                })
                .unwrap(),
            ..config(2, 2, 23)
        };
        let (tail, _) = run(src, cache(), &resume, 5);
        let joined: Vec<u32> = head.iter().chain(&tail).map(|x| x.0).collect();
        assert_eq!(joined, full.iter().map(|x| x.0).collect::<Vec<_>>());
    }

    #[test]
    fn worker_failure_and_panic_reach_the_consumer() {
        for panic in [false, true] {
            let mut src = FaultySource::new(records(8, 32));
            if panic {
                src.panic_on = Some(5);
            } else {
                src.fail_on = Some(5);
            }
            let src = Arc::new(src);
            let sampler = Sampler::singletons(1, 8).unwrap();
            let mut loader = Loader::start(
                src,
                sampler,
                Cache::with_capacity(CachePolicy::Lru, 0),
                &HeapSlots,
                &config(2, 2, 100),
            )
            .unwrap();
            let mut err = None;
            for _ in 0..20 {
                match loader.next() {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        err = Some(e);
                        break;
                    }
                    None => break,
                }
            }
            let e = err.expect("the failure surfaces as an error, not a hang or silent end");
            let msg = e.to_string();
            assert!(msg.contains("record #5"), "{msg}");
            if panic {
                assert!(
                    matches!(e, LoadError::Panic { .. }) && msg.contains("injected panic"),
                    "{msg}"
                );
            }
            assert!(matches!(loader.next(), Some(Err(LoadError::Stopped))));
        }
    }

    #[test]
    fn drop_mid_run_and_outliving_slots_do_not_deadlock() {
        let src = Arc::new(FaultySource::new(records(16, 4096)));
        let sampler = Sampler::singletons(2, 16).unwrap();
        let cfg = LoaderConfig {
            limit: None,
            ..config(3, 4, 0)
        };
        let mut loader = Loader::start(
            src,
            sampler,
            Cache::with_capacity(CachePolicy::Belady, 0),
            &HeapSlots,
            &cfg,
        )
        .unwrap();
        let kept = loader.next().unwrap().unwrap();
        let _second = loader.next().unwrap().unwrap();
        drop(loader); // joins threads while two slots are still held
        assert_eq!(kept.len(), 4096);
    }

    #[test]
    fn holding_every_slot_is_an_error_not_a_hang() {
        let src = Arc::new(FaultySource::new(records(16, 16)));
        let sampler = Sampler::singletons(2, 16).unwrap();
        let cfg = config(1, 1, 100);
        let mut loader = Loader::start(
            src,
            sampler,
            Cache::with_capacity(CachePolicy::Belady, 0),
            &HeapSlots,
            &cfg,
        )
        .unwrap();
        let held: Vec<_> = (0..3).map(|_| loader.next().unwrap().unwrap()).collect();
        assert!(matches!(
            loader.next(),
            Some(Err(LoadError::AllSlotsHeld { .. }))
        ));
        drop(held);
        assert!(loader.next().unwrap().is_ok());
    }

    #[test]
    fn grouped_point_samples_arrive_chunk_by_chunk() {
        let mut src = FaultySource::new(records(7, 100));
        src.inner.groups = Some(vec![vec![0, 1, 2], vec![3, 4], vec![5], vec![6]]);
        let src = Arc::new(src);
        let (got, _) = run(
            src,
            Cache::with_capacity(CachePolicy::Belady, 0),
            &config(3, 2, 14),
            4,
        );
        let recs: Vec<u32> = got.iter().map(|g| g.0).collect();
        // Chunks of a cloud are consecutive and in order within each epoch.
        for epoch in recs.chunks(7) {
            let p0 = epoch.iter().position(|&r| r == 0).unwrap();
            assert_eq!(&epoch[p0..p0 + 3], &[0, 1, 2]);
            let p3 = epoch.iter().position(|&r| r == 3).unwrap();
            assert_eq!(&epoch[p3..p3 + 2], &[3, 4]);
        }
    }

    #[test]
    fn cache_hits_skip_decoding() {
        let src = Arc::new(FaultySource::new(records(10, 256)));
        // Room for everything: after epoch 0 every record is a hit.
        let cache = Cache::with_capacity(CachePolicy::Belady, 10 * cache::entry_cost(256));
        let (got, stats) = run(src.clone(), cache, &config(2, 2, 50), 9);
        // Every miss is one decode and every hit none; each record is decoded exactly once,
        // even one that recurs across the epoch boundary while its first decode is still in
        // flight (the later step waits for that decode instead of repeating it).
        assert_eq!(src.reads.load(Ordering::Relaxed), stats.misses);
        assert_eq!(stats.misses, 10, "{stats:?}");
        assert_eq!(stats.hits, 40, "{stats:?}");
        assert!(got[10..].iter().all(|g| g.3));
    }

    #[test]
    fn hits_are_lent_from_pageable_slots_and_copied_into_pinned_ones() {
        let recs = records(6, 4096);
        let src = Arc::new(FaultySource::new(recs.clone()));
        // The CUDA trainer's slots, page-locked memory of a device (here the host emulation's).
        let pinned_slots = pinned::PinnedSlots::new(crate::device::Device::emulated().unwrap());
        for pinned in [false, true] {
            let cache = Cache::with_capacity(CachePolicy::Belady, 6 * cache::entry_cost(4096));
            let sampler = Sampler::singletons(3, 6).unwrap();
            let alloc: &dyn SlotAllocator = if pinned { &pinned_slots } else { &HeapSlots };
            let mut loader =
                Loader::start(src.clone(), sampler, cache, alloc, &config(2, 2, 6 * 4)).unwrap();
            // Address of each delivery's bytes, by record; and every slot's address (a miss is
            // always decoded into its slot).
            let mut at: std::collections::HashMap<u32, Vec<(usize, bool)>> = Default::default();
            let mut slot_addrs = std::collections::HashSet::new();
            while let Some(d) = loader.next() {
                let d = d.unwrap();
                assert_eq!(&d[..], &recs[d.record() as usize][..]);
                if !d.from_cache() {
                    slot_addrs.insert(d.as_ptr() as usize);
                }
                at.entry(d.record())
                    .or_default()
                    .push((d.as_ptr() as usize, d.from_cache()));
            }
            // Everything hits after epoch 0 (a record recurring while its first decode is in
            // flight waits for it), and each record was decoded once.
            assert_eq!(loader.stats().hits, 6 * 3);
            assert_eq!(src.reads.load(Ordering::Relaxed), 6 * (1 + pinned as u64));
            for (record, uses) in &at {
                let hits: Vec<usize> = uses.iter().filter(|u| u.1).map(|u| u.0).collect();
                if pinned {
                    // Copied into ring slots: every hit lies in one of the slots.
                    assert!(
                        hits.iter().all(|a| slot_addrs.contains(a)),
                        "record {record}: a hit outside the pinned ring"
                    );
                } else {
                    // Lent: every hit is the same cache buffer, never a slot.
                    assert!(hits.windows(2).all(|w| w[0] == w[1]), "record {record}");
                    assert!(!slot_addrs.contains(&hits[0]), "record {record}");
                }
            }
        }
    }

    #[test]
    fn a_record_recurring_while_it_is_decoded_waits_instead_of_decoding_again() {
        // 3 records and a 6-slot ring: the next epoch's steps are scheduled while the same
        // records are still being decoded (slow, scrambled reads), so most of epoch 1 arrives
        // through the followers path.
        let recs = records(3, 2048);
        let pinned_slots = pinned::PinnedSlots::new(crate::device::Device::emulated().unwrap());
        for pinned in [false, true] {
            let mut src = FaultySource::new(recs.clone());
            src.delay = Duration::from_millis(3);
            let src = Arc::new(src);
            let cache = Cache::with_capacity(CachePolicy::Belady, 3 * cache::entry_cost(2048));
            let sampler = Sampler::singletons(4, 3).unwrap();
            let alloc: &dyn SlotAllocator = if pinned { &pinned_slots } else { &HeapSlots };
            let mut loader =
                Loader::start(src.clone(), sampler, cache, alloc, &config(2, 4, 3 * 5)).unwrap();
            let mut order = Vec::new();
            while let Some(d) = loader.next() {
                let d = d.unwrap();
                assert_eq!(&d[..], &recs[d.record() as usize][..]);
                order.push(d.record());
            }
            let mut s = Sampler::singletons(4, 3).unwrap();
            let expect: Vec<u32> = (0..15).map(|_| s.next().record).collect();
            assert_eq!(order, expect, "pinned {pinned}");
            assert_eq!(src.reads.load(Ordering::Relaxed), 3, "pinned {pinned}");
            assert_eq!(loader.stats().hits, 12);
        }
    }

    #[test]
    fn a_lent_entry_held_by_the_consumer_is_never_evicted_or_altered() {
        // Room for 2 of 5 records: every epoch evicts, but never the entry the consumer holds.
        let recs = records(5, 8192);
        let src = Arc::new(FaultySource::new(recs.clone()));
        let cap = 2 * cache::entry_cost(8192);
        let cache = Cache::with_capacity(CachePolicy::Lru, cap);
        let sampler = Sampler::singletons(8, 5).unwrap();
        let mut loader =
            Loader::start(src, sampler, cache, &HeapSlots, &config(2, 2, 5 * 40)).unwrap();
        let mut held = None;
        while let Some(d) = loader.next() {
            let d = d.unwrap();
            if held.is_none() && d.from_cache() {
                held = Some(d);
                continue;
            }
            let (used, capacity) = loader.cache_usage();
            assert!(used <= capacity && capacity == cap, "{used} > {capacity}");
        }
        let held = held.expect("a 2-of-5 LRU cache hits sometimes in 40 epochs");
        assert_eq!(&held[..], &recs[held.record() as usize][..]);
        assert!(loader.cache_stats().evicted > 0);
    }

    #[test]
    fn plan_refuses_a_budget_below_the_floor_and_gives_the_rest_to_the_cache() {
        let src = FaultySource::new(records(4, 1 << 20));
        let cfg = config(2, 2, 0);
        let err = plan_memory(8 << 20, &src, &cfg, 4 << 20, PlanExtras::default()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("below the memory floor") && msg.contains("prefetch ring"),
            "{msg}"
        );
        let plan = plan_memory(64 << 20, &src, &cfg, 4 << 20, PlanExtras::default()).unwrap();
        assert_eq!(plan.cache.bytes(), (64 << 20) - plan.floor.total());
        assert_eq!(plan.ledger.available(), 0);
    }
    #[test]
    fn expected_hit_rate_matches_the_loader() {
        let src = Arc::new(FaultySource::new(records(20, 1000)));
        for cached in [0u64, 5, 8, 20] {
            let capacity = cached * cache::entry_cost(1000);
            let expected = expected_hit_rate(
                &*src,
                CachePolicy::Belady,
                capacity,
                6,
                Position { epoch: 0, index: 0 },
                100,
            )
            .unwrap();
            let cache = Cache::with_capacity(CachePolicy::Belady, capacity);
            let (_, stats) = run(src.clone(), cache, &config(2, 2, 100), 6);
            assert!(
                (expected - stats.hit_rate()).abs() <= 0.05,
                "{cached} cached: expected {expected}, loader {}",
                stats.hit_rate()
            );
            if cached == 0 {
                assert_eq!(expected, 0.0);
            }
            if cached == 20 {
                assert_eq!(expected, 0.8, "everything after the first epoch hits");
            }
        }
    }

    #[test]
    fn released_items_go_to_the_cache() {
        let src = FaultySource::new(records(4, 1 << 20));
        let cfg = config(1, 1, 0);
        let extras = PlanExtras {
            items: vec![FloorItem::new(Component::Scratch, 3 << 20, "test")],
            ..PlanExtras::default()
        };
        let mut plan = plan_memory(64 << 20, &src, &cfg, 4 << 20, extras).unwrap();
        let before = plan.cache.bytes();
        assert_eq!(plan.release_to_cache(Component::Scratch), 3 << 20);
        assert_eq!(plan.cache.bytes(), before + (3 << 20));
        assert_eq!(
            plan.release_to_cache(Component::Scratch),
            0,
            "released once"
        );
        assert_eq!(plan.ledger.available(), 0);
    }
}
