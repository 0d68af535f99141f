//! The prefetch ring: worker threads decode records, in sampler order, into a fixed set of
//! host buffers that the consumer borrows read-only.
//!
//! ```text
//!  scheduler (no thread of its own: runs under a mutex wherever a slot becomes free — at
//!      │       start, and in Delivered::drop on the consumer's side) — per free slot:
//!      │       cache hit, pageable slots → lend the cached bytes ───────────────────┐
//!      │       cache hit, pinned slots   → job "copy these cached bytes"            │
//!      │       cache miss → Cache::admit decides, job "decode"                      │
//!      ▼                                                                            │
//!  N worker threads ── hit: copy cache → slot; miss: RecordSource::read_into(slot)  │
//!                      (+ copy into the admitted cache buffer)                      │
//!      ▼ done channel (any order) ◄─────────────────────────────────────────────────┘
//!  consumer (Loader::next) ── reorders by global position, hands out Delivered (Deref<[u8]>);
//!                             dropping a Delivered frees its slot and schedules the next step
//! ```
//!
//! Invariants:
//! - The ring is `prefetch + 2` slots of exactly the largest record's size, allocated and
//!   touched once at start (so they are resident and counted from the first moment, and the
//!   loop never page-faults or allocates them again). Every scheduled step owns one slot until
//!   its [`Delivered`] drops, so at most `slots` steps are in flight or held.
//! - Delivery order equals the sampler order exactly, whatever the number of workers: the
//!   consumer holds completed slots in a reorder map keyed by global position (bounded by the
//!   ring size) until their turn.
//! - Scheduling needs no thread: a step is scheduled exactly when a slot is free, and slots
//!   become free only when a [`Delivered`] drops (or at start), so the scheduler runs right
//!   there, under its mutex, in microseconds (sampler step, cache lookup, a channel send). An
//!   earlier design had a dispatcher thread wake up for every freed slot; on this VM each
//!   cross-thread wake-up costs tens of µs (measured: one channel ping-pong per view slowed an
//!   in-RAM consumer from 3314 to 3007 views/s, medians of 5), which with a warm cache was
//!   most of the loader's overhead.
//! - Cache hits depend on what the slots are ([`SlotAllocator::pinned`]):
//!   - pageable slots (the CPU trainer, the bench): the scheduler *lends* the cache's immutable
//!     buffer (`Arc<Vec<u8>>`) straight to the consumer, through the done channel and reorder
//!     map, with no copy and no other thread involved, so with a warm cache a step costs
//!     about what indexing a decoded in-RAM dataset costs. The step still holds its ring slot
//!     (unused): the ring bounds in-flight work and the held-slot accounting exactly as for a
//!     decode. A lent entry is "busy" while the consumer holds it: eviction skips it (so the
//!     cache never exceeds its bytes; it just cannot drop that entry for a step or two), and it
//!     is immutable, so no consumer can alter the dataset through it.
//!   - pinned slots (the CUDA trainer): a worker copies the cached bytes into the slot (one
//!     memcpy of the view, 6.2 MB at 1080p) so the upload is an async DMA from pinned memory;
//!     copies run on the workers in parallel, and the entry is busy only for the copy.
//!
//!   Measured on the fox photos (48 × 5.9 MiB, budget = floor + 110 % of the data, 30–50
//!   epochs, medians of 7–11 interleaved runs on the 2-core VM): copying every hit on the
//!   workers ran at 1502 views/s after epoch 1; lending at 2899; lending without the dispatcher
//!   thread: see `benches/loader.rs` and the README for the current figures against the
//!   in-RAM baseline.
//! - Shutdown never deadlocks: dropping the [`Loader`] stops the scheduler and closes the job
//!   channel; workers finish their current record and exit, and `Drop` joins them. Delivered
//!   slots may outlive the loader (dropping one then just frees it). Ctrl-C with the default
//!   SIGINT disposition ends the process (nothing to join); a binary that catches it should
//!   stop its consumer loop and drop the `Loader`, which is this same path.
//! - A worker error or panic (caught with `catch_unwind`) reaches the consumer as an `Err`,
//!   after which the loader is stopped. The consumer never waits on a step that no thread
//!   will complete: every scheduled step is either already in the done channel (lent) or
//!   queued to live workers, which always answer (a result or the caught panic).

use std::collections::{BTreeMap, HashMap};
use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::cache::{Cache, CacheStats, Lookup};
use super::sampler::{Position, Sampler, Step};
use super::{LoadError, RecordSource};
use crate::budget::margin::THREAD_STACK;
use crate::shard::PAGE;

/// A host buffer a ring slot owns. On CPU: page-aligned heap memory ([`HeapSlots`]); a CUDA
/// trainer supplies pinned memory so it can upload slots asynchronously.
pub trait HostBuffer: Send + Deref<Target = [u8]> + DerefMut {
    /// Called by a worker before it writes the buffer: waits until the memory may be
    /// overwritten (a pinned slot whose upload to the device is still in flight).
    fn prepare(&mut self) -> Result<(), LoadError> {
        Ok(())
    }
    /// For consumers that know the concrete type (a CUDA trainer reaching the pinned
    /// allocation to queue an upload).
    fn as_any(&self) -> &dyn std::any::Any;
    /// [`HostBuffer::as_any`], mutable (queuing an upload marks a pinned buffer busy).
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

/// Makes ring slots. Called once per slot at loader start.
pub trait SlotAllocator: Send + Sync {
    fn allocate(&self, len: usize) -> Result<Box<dyn HostBuffer>, LoadError>;
    /// Whether the slots are special memory (page-locked for DMA) that the consumer needs its
    /// bytes in. Then cache hits are copied into a slot; otherwise they are lent zero-copy.
    fn pinned(&self) -> bool {
        false
    }
}

/// Page-aligned heap buffers for the CPU path.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeapSlots;

/// `len` bytes starting at the first page boundary of an owned `Vec` (over-allocated by one
/// page, never resized, so the start never moves; no unsafe needed).
#[derive(Debug)]
pub struct AlignedBuf {
    raw: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        let page = PAGE as usize;
        let mut raw = vec![0u8; len + page];
        let offset = (page - raw.as_ptr() as usize % page) % page;
        // Touch every page now: calloc'd memory is mapped lazily, and the floor assumes the
        // ring is resident from the start (no page faults inside the loop either).
        raw.fill(0);
        AlignedBuf { raw, offset, len }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.offset..self.offset + self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.offset..self.offset + self.len]
    }
}

impl HostBuffer for AlignedBuf {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl SlotAllocator for HeapSlots {
    fn allocate(&self, len: usize) -> Result<Box<dyn HostBuffer>, LoadError> {
        Ok(Box::new(AlignedBuf::new(len)))
    }
}

/// How the loader runs.
#[derive(Clone, Debug)]
pub struct LoaderConfig {
    /// Decoding threads (≥ 1).
    pub workers: usize,
    /// Records decoded ahead of the consumer (≥ 1); the ring has `prefetch + 2` slots.
    pub prefetch: usize,
    /// Where the sequence starts (resume).
    pub start: Position,
    /// Stop after this many records (`None`: run until dropped).
    pub limit: Option<u64>,
}

impl LoaderConfig {
    pub fn slots(&self) -> usize {
        self.prefetch + 2
    }
}

/// Consumer-side counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct LoaderStats {
    pub delivered: u64,
    pub bytes: u64,
    /// Deliveries served from the cache / decoded from the pack.
    pub hits: u64,
    pub misses: u64,
    /// Time the consumer spent blocked in [`Loader::next`] waiting for data.
    pub stall_seconds: f64,
    /// Wall time since the loader started.
    pub elapsed_seconds: f64,
}

impl LoaderStats {
    pub fn hit_rate(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 {
            0.0
        } else {
            self.hits as f64 / n as f64
        }
    }

    pub fn stall_fraction(&self) -> f64 {
        if self.elapsed_seconds > 0.0 {
            (self.stall_seconds / self.elapsed_seconds).min(1.0)
        } else {
            0.0
        }
    }
}

struct Slot {
    buf: Box<dyn HostBuffer>,
}

enum Work {
    /// Copy these cached bytes into the slot (pinned slots only; pageable ones are lent).
    Hit(Arc<Vec<u8>>),
    /// Decode the record; fill the admitted cache buffer too, if any.
    Decode { admit: Option<Vec<u8>> },
}

struct Job {
    step: Step,
    slot: Slot,
    len: usize,
    work: Work,
}

/// Where a completed step's bytes are.
enum Bytes {
    /// The first `len` bytes of the step's slot (a decode, or a hit copied into pinned memory).
    InSlot { len: usize, from_cache: bool },
    /// A cache entry lent as is; the step's slot is held but unused.
    Lent(Arc<Vec<u8>>),
}

struct Done {
    step: Step,
    result: Result<(Slot, Bytes), LoadError>,
}

/// Steps waiting for a record a worker is decoding into the cache right now (found
/// [`Lookup::Pending`]), with their slots. Lock order: scheduler → cache → followers; a step is
/// registered while the cache lock shows the entry pending, and the worker takes the list
/// while the cache lock makes it ready, so no follower is ever left behind.
type Followers = Mutex<HashMap<u32, Vec<(Step, Slot)>>>;

/// Turns free slots into scheduled steps (see the module doc). Shared by the [`Loader`] and
/// every [`Delivered`], behind a mutex; it never blocks while holding it (unbounded channels).
struct Scheduler {
    sampler: Sampler,
    source: Arc<dyn RecordSource>,
    cache: Arc<Mutex<Cache>>,
    /// Global position at which scheduling stops (`limit`), if any.
    end_global: Option<u64>,
    /// Slots not owned by any step.
    free: Vec<Slot>,
    /// `None` once the loader stopped (dropped or failed): freed slots are then just kept.
    jobs: Option<Sender<Job>>,
    /// Set when hits are lent (pageable slots): where lent steps go.
    lent: Option<Sender<Done>>,
    followers: Arc<Followers>,
}

impl Scheduler {
    /// Returns `slot` to the ring and schedules steps while slots are free.
    fn release(&mut self, slot: Slot) {
        self.free.push(slot);
        self.pump();
    }

    fn pump(&mut self) {
        while !self.free.is_empty() {
            let Some(jobs) = &self.jobs else { return };
            let at = self.sampler.position();
            let global = at.epoch * self.sampler.records() as u64 + at.index;
            if self.end_global.is_some_and(|e| global >= e) {
                return;
            }
            let slot = self.free.pop().expect("checked non-empty");
            let step = self.sampler.next();
            let len = self.source.decoded_len(step.record);
            let next_use = self.sampler.next_use(step.record, step.global);
            let work = {
                let mut c = lock(&self.cache);
                match c.lookup(step.record, next_use) {
                    Lookup::Ready(bytes) => Work::Hit(bytes),
                    Lookup::Pending => {
                        // Served by the worker that completes the record (see `worker`).
                        lock_followers(&self.followers)
                            .entry(step.record)
                            .or_default()
                            .push((step, slot));
                        continue;
                    }
                    Lookup::Absent => Work::Decode {
                        admit: c.admit(step.record, len, next_use),
                    },
                }
            };
            let sent = match (work, &self.lent) {
                (Work::Hit(bytes), Some(lent)) => lent
                    .send(Done {
                        step,
                        result: Ok((slot, Bytes::Lent(bytes))),
                    })
                    .is_ok(),
                (work, _) => jobs
                    .send(Job {
                        step,
                        slot,
                        len,
                        work,
                    })
                    .is_ok(),
            };
            if !sent {
                // The other end is gone: the loader is shutting down.
                self.stop();
                return;
            }
        }
    }

    /// Schedules nothing more and closes the job channel (workers drain it and exit).
    fn stop(&mut self) {
        self.jobs = None;
        self.lent = None;
    }
}

fn lock_followers(f: &Followers) -> MutexGuard<'_, HashMap<u32, Vec<(Step, Slot)>>> {
    f.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_scheduler(s: &Mutex<Scheduler>) -> MutexGuard<'_, Scheduler> {
    // The scheduler's methods leave it consistent between statements that can panic.
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// A filled ring slot lent to the consumer: read-only bytes plus where they sit in the
/// sequence. Dropping it returns the slot to the ring (and schedules the next step).
pub struct Delivered {
    slot: Option<Slot>,
    /// Set when the bytes are a lent cache entry instead of the slot's contents.
    lent: Option<Arc<Vec<u8>>>,
    len: usize,
    step: Step,
    from_cache: bool,
    scheduler: Arc<Mutex<Scheduler>>,
    held: Arc<AtomicUsize>,
}

impl Delivered {
    /// Sampler step: record id, epoch/index position, global position, group/part.
    pub fn step(&self) -> Step {
        self.step
    }

    pub fn record(&self) -> u32 {
        self.step.record
    }

    pub fn position(&self) -> Position {
        self.step.position
    }

    pub fn from_cache(&self) -> bool {
        self.from_cache
    }

    /// The ring slot holding the bytes, or `None` when they are a lent cache entry (pageable
    /// slots only; with pinned slots every delivery is in its slot).
    pub fn host_buffer(&self) -> Option<&dyn HostBuffer> {
        match (&self.lent, &self.slot) {
            (None, Some(slot)) => Some(&*slot.buf),
            _ => None,
        }
    }

    /// The ring slot and the view's length in it, mutably, when the bytes are in the slot
    /// (for a consumer that queues an asynchronous upload from page-locked memory: the slot's
    /// next writer waits for that copy, see [`HostBuffer::prepare`]).
    pub fn slot_mut(&mut self) -> Option<(&mut dyn HostBuffer, usize)> {
        match (&self.lent, &mut self.slot) {
            (None, Some(slot)) => Some((&mut *slot.buf, self.len)),
            _ => None,
        }
    }
}

impl Deref for Delivered {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if let Some(lent) = &self.lent {
            return lent;
        }
        let slot = self.slot.as_ref().expect("slot present until drop");
        &slot.buf[..self.len]
    }
}

impl Drop for Delivered {
    fn drop(&mut self) {
        // Release a lent cache entry before the slot: the step the slot schedules next may
        // need that entry to be evictable.
        self.lent.take();
        self.held.fetch_sub(1, Ordering::AcqRel);
        if let Some(slot) = self.slot.take() {
            lock_scheduler(&self.scheduler).release(slot);
        }
    }
}

fn lock(cache: &Mutex<Cache>) -> MutexGuard<'_, Cache> {
    // Cache methods do not panic midway through an update in practice; if a thread did panic
    // while holding the lock, its counters are still consistent enough to keep serving.
    cache.lock().unwrap_or_else(|e| e.into_inner())
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// The running loader; see the module doc. Not `Clone`; one consumer.
pub struct Loader {
    done_rx: Receiver<Done>,
    scheduler: Arc<Mutex<Scheduler>>,
    threads: Vec<JoinHandle<()>>,
    reorder: BTreeMap<u64, Done>,
    next_global: u64,
    end_global: Option<u64>,
    slots: usize,
    held: Arc<AtomicUsize>,
    cache: Arc<Mutex<Cache>>,
    stats: LoaderStats,
    started: Instant,
    stall: Duration,
    failed: bool,
}

impl Loader {
    /// Allocates the ring (`config.slots()` × the largest record), starts the workers and
    /// schedules the first `slots` steps. `sampler` is moved to `config.start`.
    pub fn start(
        source: Arc<dyn RecordSource>,
        mut sampler: Sampler,
        cache: Cache,
        allocator: &dyn SlotAllocator,
        config: &LoaderConfig,
    ) -> Result<Loader, LoadError> {
        if config.workers == 0 || config.prefetch == 0 {
            return Err(LoadError::NoWorkers);
        }
        if sampler.records() != source.len() {
            return Err(LoadError::SamplerMismatch {
                sampler: sampler.records(),
                source_len: source.len(),
            });
        }
        sampler.seek(config.start)?;
        let slot_len = (0..source.len() as u32)
            .map(|r| source.decoded_len(r))
            .max()
            .unwrap_or(0);
        let free = (0..config.slots())
            .map(|_| {
                Ok(Slot {
                    buf: allocator.allocate(slot_len)?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        let start_global = config.start.epoch * sampler.records() as u64 + config.start.index;
        let end_global = config.limit.map(|l| start_global + l);
        let cache = Arc::new(Mutex::new(cache));
        let (done_tx, done_rx) = unbounded::<Done>();
        let (job_tx, job_rx) = unbounded::<Job>();
        let mut threads = Vec::new();
        let lend = !allocator.pinned();
        let followers = Arc::new(Followers::default());
        for w in 0..config.workers {
            let shared = WorkerShared {
                source: source.clone(),
                cache: cache.clone(),
                followers: followers.clone(),
                lend,
            };
            let (job_rx, done_tx) = (job_rx.clone(), done_tx.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("ramsplat-load-{w}"))
                .stack_size(THREAD_STACK as usize)
                .spawn(move || worker(w, &shared, job_rx, done_tx));
            match spawned {
                Ok(handle) => threads.push(handle),
                Err(e) => {
                    // Dropping job_tx below ends the workers already started; join them.
                    drop(job_tx);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(LoadError::Spawn(e));
                }
            }
        }
        let scheduler = Arc::new(Mutex::new(Scheduler {
            sampler,
            source,
            cache: cache.clone(),
            end_global,
            free,
            jobs: Some(job_tx),
            lent: lend.then_some(done_tx),
            followers,
        }));
        lock_scheduler(&scheduler).pump();
        Ok(Loader {
            done_rx,
            scheduler,
            threads,
            reorder: BTreeMap::new(),
            next_global: start_global,
            end_global,
            slots: config.slots(),
            held: Arc::new(AtomicUsize::new(0)),
            cache,
            stats: LoaderStats::default(),
            started: Instant::now(),
            stall: Duration::ZERO,
            failed: false,
        })
    }

    /// The next record in sampler order: `None` after `limit` records, `Some(Err)` if a worker
    /// failed or panicked (the loader is then stopped and keeps returning an error).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Result<Delivered, LoadError>> {
        if self.failed {
            return Some(Err(LoadError::Stopped));
        }
        if self.end_global.is_some_and(|e| self.next_global >= e) {
            return None;
        }
        let held = self.held.load(Ordering::Acquire);
        if held >= self.slots {
            return Some(Err(LoadError::AllSlotsHeld { held }));
        }
        loop {
            if let Some(done) = self.reorder.remove(&self.next_global) {
                return Some(self.deliver(done));
            }
            let t0 = Instant::now();
            let got = self.done_rx.recv();
            self.stall += t0.elapsed();
            match got {
                Ok(done) => {
                    if let Err(e) = done.result {
                        self.fail();
                        return Some(Err(e));
                    }
                    self.reorder.insert(done.step.global, done);
                }
                Err(_) => {
                    // Unreachable while the scheduler holds a sender; kept as an error, not
                    // a hang, should that ever change.
                    self.fail();
                    return Some(Err(LoadError::Panic {
                        thread: "loader".into(),
                        record: format!("position {}", self.next_global),
                        msg: "all loader threads exited before delivering it".into(),
                    }));
                }
            }
        }
    }

    fn fail(&mut self) {
        self.failed = true;
        lock_scheduler(&self.scheduler).stop();
    }

    fn deliver(&mut self, done: Done) -> Result<Delivered, LoadError> {
        let (slot, bytes) = done.result?;
        let (len, from_cache, lent) = match bytes {
            Bytes::InSlot { len, from_cache } => (len, from_cache, None),
            Bytes::Lent(b) => (b.len(), true, Some(b)),
        };
        self.next_global += 1;
        self.stats.delivered += 1;
        self.stats.bytes += len as u64;
        if from_cache {
            self.stats.hits += 1;
        } else {
            self.stats.misses += 1;
        }
        self.held.fetch_add(1, Ordering::AcqRel);
        Ok(Delivered {
            slot: Some(slot),
            lent,
            len,
            step: done.step,
            from_cache,
            scheduler: self.scheduler.clone(),
            held: self.held.clone(),
        })
    }

    /// Position of the next record [`Loader::next`] will return (save it to resume).
    pub fn position(&self, records_per_epoch: usize) -> Position {
        let n = records_per_epoch as u64;
        Position {
            epoch: self.next_global / n,
            index: self.next_global % n,
        }
    }

    pub fn stats(&self) -> LoaderStats {
        LoaderStats {
            stall_seconds: self.stall.as_secs_f64(),
            elapsed_seconds: self.started.elapsed().as_secs_f64(),
            ..self.stats
        }
    }

    pub fn cache_stats(&self) -> CacheStats {
        lock(&self.cache).stats()
    }

    /// (bytes held, capacity) of the cache now.
    pub fn cache_usage(&self) -> (u64, u64) {
        let c = lock(&self.cache);
        (c.used(), c.capacity())
    }

    /// Shrinks the cache (e.g. the host-side model grew); returns its new capacity.
    pub fn shrink_cache(&self, bytes: u64) -> u64 {
        lock(&self.cache).shrink_to(bytes)
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Closing the job channel ends the workers after their current record. Delivered
        // records still held keep the scheduler alive, but it schedules nothing more.
        lock_scheduler(&self.scheduler).stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// What every worker shares.
struct WorkerShared {
    source: Arc<dyn RecordSource>,
    cache: Arc<Mutex<Cache>>,
    followers: Arc<Followers>,
    /// Hits are lent (pageable slots) rather than copied into the slot.
    lend: bool,
}

fn worker(id: usize, shared: &WorkerShared, jobs: Receiver<Job>, done: Sender<Done>) {
    let WorkerShared {
        source,
        cache,
        followers,
        lend,
    } = shared;
    while let Ok(job) = jobs.recv() {
        let Job {
            step,
            mut slot,
            len,
            work,
        } = job;
        let from_cache = matches!(work, Work::Hit(_));
        // Workers only ever *write* slots (never read one back): an admitted record is decoded
        // into its cache buffer and then copied out, so slots may be memory that is slow or
        // unsafe to read from the host (pinned, in flight to the device).
        let run = catch_unwind(AssertUnwindSafe(
            || -> Result<Option<Vec<u8>>, LoadError> {
                slot.buf.prepare()?;
                let out = &mut slot.buf[..len];
                match work {
                    Work::Hit(bytes) => {
                        out.copy_from_slice(&bytes);
                        Ok(None)
                    }
                    Work::Decode { admit: Some(mut b) } => {
                        source.read_into(step.record, &mut b)?;
                        out.copy_from_slice(&b);
                        Ok(Some(b))
                    }
                    Work::Decode { admit: None } => {
                        source.read_into(step.record, out)?;
                        Ok(None)
                    }
                }
            },
        ));
        let mut waiting = Vec::new();
        let result = match run {
            Ok(Ok(filled)) => {
                if let Some(b) = filled {
                    let mut c = lock(cache);
                    if let Some(ready) = c.complete(step.record, b) {
                        let list = lock_followers(followers).remove(&step.record);
                        waiting = list
                            .into_iter()
                            .flatten()
                            .map(|f| (f, ready.clone()))
                            .collect();
                    }
                }
                Ok((slot, Bytes::InSlot { len, from_cache }))
            }
            Ok(Err(e)) => {
                let mut c = lock(cache);
                c.abort(step.record);
                // The loader stops at this error; the followers' slots are simply freed.
                lock_followers(followers).remove(&step.record);
                Err(e)
            }
            Err(p) => {
                let mut c = lock(cache);
                c.abort(step.record);
                lock_followers(followers).remove(&step.record);
                Err(LoadError::Panic {
                    thread: format!("worker {id}"),
                    record: source.describe(step.record),
                    msg: panic_message(&*p),
                })
            }
        };
        if done.send(Done { step, result }).is_err() {
            return;
        }
        // Steps that asked for this record while it was being decoded: served from the entry
        // just completed (the handle keeps it from eviction until they are done with it).
        for ((step, mut slot), ready) in waiting {
            let result = if *lend {
                Ok((slot, Bytes::Lent(ready)))
            } else {
                slot.buf.prepare().map(|()| {
                    slot.buf[..ready.len()].copy_from_slice(&ready);
                    (
                        slot,
                        Bytes::InSlot {
                            len: ready.len(),
                            from_cache: true,
                        },
                    )
                })
            };
            if done.send(Done { step, result }).is_err() {
                return;
            }
        }
    }
}
