//! The prefetch ring: worker threads decode records, in sampler order, into a fixed set of
//! host buffers that the consumer borrows read-only.
//!
//! ```text
//!  dispatcher thread ── walks the Sampler; per step: take a free slot, then
//!      │                  cache hit  → job "copy these cached bytes" → workers
//!      │                  cache miss → Cache::admit decides, job "decode" → workers
//!      ▼
//!  N worker threads ── hit: copy cache → slot; miss: RecordSource::read_into(slot)
//!                      (+ copy into the admitted cache buffer)
//!      ▼ done channel (any order)
//!  consumer (Loader::next) ── reorders by global position, hands out Delivered (Deref<[u8]>);
//!                             dropping a Delivered returns its slot to the dispatcher
//! ```
//!
//! Invariants:
//! - The ring is `prefetch + 2` slots of exactly the largest record's size, allocated and
//!   touched once at start (so they are resident and counted from the first moment, and the
//!   loop never page-faults or allocates them again). `prefetch` slots can be in flight while
//!   the consumer holds one and one is on its way back.
//! - Delivery order equals the sampler order exactly, whatever the number of workers: the
//!   consumer holds completed slots in a reorder map keyed by global position (bounded by the
//!   ring size) until their turn.
//! - Cache hits are served by a worker copying the cached bytes into a slot (one memcpy of the
//!   view, e.g. 6.2 MB at 1080p) rather than by lending the cache's buffer to the consumer:
//!   the consumer then only ever sees ring slots (the memory a CUDA trainer pins for async
//!   uploads; pinning the pageable cache would be expensive), and a cache entry is pinned
//!   ("busy") only for the duration of that copy, never for as long as a trainer holds a view,
//!   so eviction is never blocked for long and the cache never exceeds its bytes. Copies run on
//!   the workers, in parallel, not on the dispatcher: with a warm cache the copy is the whole
//!   cost of a step, and a single-threaded copy capped the throughput (measured: 100 views/s
//!   vs 120 from RAM at 1080p on the loaded 2-core machine before the change).
//! - Shutdown never deadlocks: dropping the [`Loader`] closes a shutdown channel the dispatcher
//!   selects on, the dispatcher's exit closes the job channel, workers finish their current
//!   record and exit, and `Drop` joins them. Delivered slots may outlive the loader. Ctrl-C
//!   with the default SIGINT disposition ends the process (nothing to join); a binary that
//!   catches it should stop its consumer loop and drop the `Loader`, which is this same path.
//! - A worker error or panic (caught with `catch_unwind`) reaches the consumer as an `Err`,
//!   after which the loader is stopped; a dead dispatcher or workers surface as an error too.
//!   The consumer can never wait on a slot that no thread will fill.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};

use super::cache::{Cache, CacheStats};
use super::sampler::{Position, Sampler, Step};
use super::{LoadError, RecordSource};
use crate::budget::margin::THREAD_STACK;
use crate::shard::PAGE;

/// A host buffer a ring slot owns. On CPU: page-aligned heap memory ([`HeapSlots`]); a CUDA
/// trainer supplies pinned memory so it can upload slots asynchronously.
pub trait HostBuffer: Send + Deref<Target = [u8]> + DerefMut {}

/// Makes ring slots. Called once per slot at loader start.
pub trait SlotAllocator: Send + Sync {
    fn allocate(&self, len: usize) -> Result<Box<dyn HostBuffer>, LoadError>;
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

impl HostBuffer for AlignedBuf {}

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
    /// Copy these cached bytes into the slot.
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

struct Done {
    step: Step,
    result: Result<(Slot, usize, bool), LoadError>,
}

/// A filled ring slot lent to the consumer: read-only bytes plus where they sit in the
/// sequence. Dropping it returns the slot to the ring.
pub struct Delivered {
    slot: Option<Slot>,
    len: usize,
    step: Step,
    from_cache: bool,
    free_tx: Sender<Slot>,
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
}

impl Deref for Delivered {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let slot = self.slot.as_ref().expect("slot present until drop");
        &slot.buf[..self.len]
    }
}

impl Drop for Delivered {
    fn drop(&mut self) {
        self.held.fetch_sub(1, Ordering::AcqRel);
        if let Some(slot) = self.slot.take() {
            // The loader may be gone; then the slot is simply freed.
            let _ = self.free_tx.send(slot);
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
    free_tx: Sender<Slot>,
    shutdown_tx: Option<Sender<()>>,
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
    /// Allocates the ring (`config.slots()` × the largest record) and starts the threads.
    /// `sampler` is moved to `config.start`.
    pub fn start(
        source: Arc<dyn RecordSource>,
        mut sampler: Sampler,
        cache: Cache,
        allocator: &dyn SlotAllocator,
        config: &LoaderConfig,
    ) -> Result<Loader, LoadError> {
        if config.workers == 0 || config.prefetch == 0 {
            return Err(LoadError::Config(
                "--workers and --prefetch must be at least 1".into(),
            ));
        }
        if sampler.records() != source.len() {
            return Err(LoadError::Config(format!(
                "sampler schedules {} records but the source has {}",
                sampler.records(),
                source.len()
            )));
        }
        sampler.seek(config.start)?;
        let slot_len = (0..source.len() as u32)
            .map(|r| source.decoded_len(r))
            .max()
            .unwrap_or(0);
        let (free_tx, free_rx) = unbounded::<Slot>();
        for _ in 0..config.slots() {
            free_tx
                .send(Slot {
                    buf: allocator.allocate(slot_len)?,
                })
                .expect("receiver alive");
        }
        let start_global = config.start.epoch * sampler.records() as u64 + config.start.index;
        let end_global = config.limit.map(|l| start_global + l);
        let cache = Arc::new(Mutex::new(cache));
        let (done_tx, done_rx) = unbounded::<Done>();
        let (job_tx, job_rx) = unbounded::<Job>();
        let (shutdown_tx, shutdown_rx) = crossbeam_channel::bounded::<()>(0);
        let mut threads = Vec::new();
        for w in 0..config.workers {
            let (job_rx, done_tx, cache, source) = (
                job_rx.clone(),
                done_tx.clone(),
                cache.clone(),
                source.clone(),
            );
            let handle = std::thread::Builder::new()
                .name(format!("ramsplat-load-{w}"))
                .stack_size(THREAD_STACK as usize)
                .spawn(move || worker(w, &*source, &cache, job_rx, done_tx))
                .map_err(|e| LoadError::Config(format!("cannot start loader thread: {e}")))?;
            threads.push(handle);
        }
        drop(job_rx);
        let dispatcher = {
            let (cache, source) = (cache.clone(), source.clone());
            std::thread::Builder::new()
                .name("ramsplat-dispatch".into())
                .stack_size(THREAD_STACK as usize)
                .spawn(move || {
                    let run = catch_unwind(AssertUnwindSafe(|| {
                        dispatcher(
                            &mut sampler,
                            &*source,
                            &cache,
                            end_global,
                            free_rx,
                            shutdown_rx,
                            job_tx,
                        )
                    }));
                    if let Err(p) = run {
                        let _ = done_tx.send(Done {
                            step: Step {
                                position: Position { epoch: 0, index: 0 },
                                global: u64::MAX,
                                record: 0,
                                group: 0,
                                part: 0,
                                last_part: true,
                            },
                            result: Err(LoadError::Panic {
                                thread: "dispatcher".into(),
                                record: "-".into(),
                                msg: panic_message(&*p),
                            }),
                        });
                    }
                })
                .map_err(|e| LoadError::Config(format!("cannot start loader thread: {e}")))?
        };
        threads.push(dispatcher);
        Ok(Loader {
            done_rx,
            free_tx,
            shutdown_tx: Some(shutdown_tx),
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
            return Some(Err(LoadError::Config(format!(
                "the consumer holds all {held} ring slots; drop delivered records before asking for more"
            ))));
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
                        self.failed = true;
                        return Some(Err(e));
                    }
                    self.reorder.insert(done.step.global, done);
                }
                Err(_) => {
                    self.failed = true;
                    return Some(Err(LoadError::Panic {
                        thread: "loader".into(),
                        record: format!("position {}", self.next_global),
                        msg: "all loader threads exited before delivering it".into(),
                    }));
                }
            }
        }
    }

    fn deliver(&mut self, done: Done) -> Result<Delivered, LoadError> {
        let (slot, len, from_cache) = done.result?;
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
            len,
            step: done.step,
            from_cache,
            free_tx: self.free_tx.clone(),
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

    /// Shrinks the cache (e.g. the host-side model grew); returns its new capacity.
    pub fn shrink_cache(&self, bytes: u64) -> u64 {
        lock(&self.cache).shrink_to(bytes)
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Closing the shutdown channel wakes the dispatcher wherever it waits for a slot.
        self.shutdown_tx.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn dispatcher(
    sampler: &mut Sampler,
    source: &dyn RecordSource,
    cache: &Mutex<Cache>,
    end_global: Option<u64>,
    free_rx: Receiver<Slot>,
    shutdown_rx: Receiver<()>,
    job_tx: Sender<Job>,
) {
    loop {
        if end_global.is_some_and(|e| {
            sampler.position().epoch * sampler.records() as u64 + sampler.position().index >= e
        }) {
            return;
        }
        let slot = select! {
            recv(free_rx) -> s => match s { Ok(s) => s, Err(_) => return },
            recv(shutdown_rx) -> _ => return,
        };
        let step = sampler.next();
        let len = source.decoded_len(step.record);
        let next_use = sampler.next_use(step.record, step.global);
        let work = {
            let mut c = lock(cache);
            match c.serve(step.record, next_use) {
                Some(bytes) => Work::Hit(bytes),
                None => Work::Decode {
                    admit: c.admit(step.record, len, next_use),
                },
            }
        };
        if job_tx
            .send(Job {
                step,
                slot,
                len,
                work,
            })
            .is_err()
        {
            return;
        }
    }
}

fn worker(
    id: usize,
    source: &dyn RecordSource,
    cache: &Mutex<Cache>,
    jobs: Receiver<Job>,
    done: Sender<Done>,
) {
    while let Ok(job) = jobs.recv() {
        let Job {
            step,
            mut slot,
            len,
            work,
        } = job;
        let from_cache = matches!(work, Work::Hit(_));
        let run = catch_unwind(AssertUnwindSafe(
            || -> Result<Option<Vec<u8>>, LoadError> {
                let out = &mut slot.buf[..len];
                match work {
                    Work::Hit(bytes) => {
                        out.copy_from_slice(&bytes);
                        Ok(None)
                    }
                    Work::Decode { admit } => {
                        source.read_into(step.record, out)?;
                        Ok(admit.map(|mut b| {
                            b.copy_from_slice(out);
                            b
                        }))
                    }
                }
            },
        ));
        let result = match run {
            Ok(Ok(filled)) => {
                if let Some(b) = filled {
                    lock(cache).complete(step.record, b);
                }
                Ok((slot, len, from_cache))
            }
            Ok(Err(e)) => {
                lock(cache).abort(step.record);
                Err(e)
            }
            Err(p) => {
                lock(cache).abort(step.record);
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
    }
}
