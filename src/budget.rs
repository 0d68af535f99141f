//! The RAM budget: size parsing, the reservation ledger and the memory floor.
//!
//! `--ram-budget B` caps the peak resident set of the whole process as the kernel reports it
//! (`VmHWM` in `/proc/self/status`). This module owns the bookkeeping that makes that cap hold:
//!
//! - [`parse_size`] / [`format_size`]: `4G` = `4GiB` = 4·2³⁰ bytes, `4GB` = 4·10⁹, plain
//!   numbers are bytes.
//! - [`Ledger`]: hands out RAII [`Reservation`]s per named component (baseline process, prefetch
//!   ring, decode scratch, cache, host-side model). A reservation that would push the sum above
//!   the budget fails with an error that itemises every current reservation; reservations can
//!   grow (fallibly) and shrink (always), so the cache can give memory back when the model grows.
//! - [`Floor`]: the memory a run needs before it caches anything, computed BEFORE any work so a
//!   budget below it fails at start with an itemised message and what to change; every item
//!   carries its formula, and when the trainer's model ([`ModelShare`]) is what does not fit,
//!   the first advice is the `--max-gaussians N` that does.
//! - [`bound_allocator`]: pins glibc so freed large buffers leave the resident set.
//! - [`peak_rss_bytes`] / [`current_rss_bytes`]: the kernel's own figures; [`within_budget`]
//!   is unknown (`None`) when the peak could not be read, never `true`.
//!
//! Invariants: the sum of live reservations never exceeds the ledger's budget; every
//! reservation is released exactly once (on drop).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

/// Budget errors. Messages say what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error(
        "invalid size {input:?}: {msg} (use bytes, or a number with K/M/G/T = powers of 1024 \
         (also KiB/MiB/GiB/TiB) or KB/MB/GB/TB = powers of 1000, e.g. 4G, 512M, 1.5G, 4000000000)"
    )]
    BadSize { input: String, msg: String },
    #[error(
        "RAM budget {} exceeded: {component} asked for {} but only {} of the budget is free; \
         current reservations: {}",
        format_size(*budget), format_size(*requested), format_size(*available), itemise(reserved)
    )]
    OverBudget {
        component: Component,
        requested: u64,
        available: u64,
        budget: u64,
        reserved: Vec<(Component, u64)>,
    },
    #[error("{0}")]
    BelowFloor(Box<Floor>),
}

/// What a reservation or a floor item is for. Typed, so the trainer finds the model's
/// reservation by what it is, not by spelling its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Component {
    /// The process before anything that scales with the data exists.
    Baseline,
    /// Allocator, thread stacks and per-thread arenas.
    RuntimeMargin,
    PrefetchRing,
    DecodeScratch,
    /// Sampler tables and the cache index.
    Bookkeeping,
    /// The trainer's per-view image buffers.
    TrainerImages,
    Evaluation,
    RenderIntersections,
    /// The trainer's model (parameters, gradients, moments, statistics, render buffers).
    Model,
    /// Parameters learned per training view that scale with the views (bilateral grids and
    /// their optimizer state).
    ViewParameters,
    /// Points held while the initial model is built (released to the cache afterwards).
    Initialisation,
    /// What the floor leaves: the byte-budgeted cache.
    Cache,
    /// Scratch memory needed only until a known point (tests, tools).
    Scratch,
}

impl Component {
    /// How plans and errors name it.
    pub fn name(self) -> &'static str {
        match self {
            Component::Baseline => "baseline",
            Component::RuntimeMargin => "runtime margin",
            Component::PrefetchRing => "prefetch ring",
            Component::DecodeScratch => "decode scratch",
            Component::Bookkeeping => "bookkeeping",
            Component::TrainerImages => "trainer images",
            Component::Evaluation => "evaluation",
            Component::RenderIntersections => "render intersections",
            Component::Model => "model",
            Component::ViewParameters => "view parameters",
            Component::Initialisation => "initialisation",
            Component::Cache => "cache",
            Component::Scratch => "scratch",
        }
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One item of a [`Floor`]: what it is, its bytes, and the formula they come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FloorItem {
    pub component: Component,
    pub bytes: u64,
    pub formula: String,
}

impl FloorItem {
    pub fn new(component: Component, bytes: u64, formula: impl Into<String>) -> FloorItem {
        FloorItem {
            component,
            bytes,
            formula: formula.into(),
        }
    }
}

fn itemise(items: &[(Component, u64)]) -> String {
    if items.is_empty() {
        return "none".to_string();
    }
    items
        .iter()
        .map(|(name, bytes)| format!("{name} {}", format_size(*bytes)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses a byte size: `4G` = `4GiB` = 4·2³⁰, `4GB` = 4·10⁹, `512M`, `1.5G`, `123` (bytes).
/// Suffixes are case-insensitive; a trailing `B` alone means bytes. Fractions are allowed with
/// a unit and rounded down to whole bytes.
pub fn parse_size(input: &str) -> Result<u64, BudgetError> {
    let bad = |msg: &str| BudgetError::BadSize {
        input: input.to_string(),
        msg: msg.to_string(),
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(bad("no number"));
    }
    let unit = unit.trim().to_ascii_lowercase();
    let mult: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kib" => KIB,
        "m" | "mib" => MIB,
        "g" | "gib" => GIB,
        "t" | "tib" => TIB,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(bad("unknown unit")),
    };
    if num.contains('.') {
        if mult == 1 {
            return Err(bad("a byte count must be a whole number"));
        }
        let v: f64 = num.parse().map_err(|_| bad("not a number"))?;
        let bytes = v * mult as f64;
        // 2^64 as f64; anything at or above does not fit a u64.
        if !bytes.is_finite() || bytes >= 18_446_744_073_709_551_616.0 {
            return Err(bad("too large"));
        }
        Ok(bytes as u64)
    } else {
        let v: u64 = num.parse().map_err(|_| bad("not a number"))?;
        v.checked_mul(mult).ok_or_else(|| bad("too large"))
    }
}

/// Formats bytes for humans with binary units and 3 significant-ish digits ("1.50 GiB").
pub fn format_size(bytes: u64) -> String {
    let units = [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")];
    for (scale, name) in units {
        if bytes >= scale {
            return format!("{:.2} {name}", bytes as f64 / scale as f64);
        }
    }
    format!("{bytes} B")
}

fn status_field_kib(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_field(&text, field)
}

/// Reads a `Name:   1234 kB` line of a `/proc/<pid>/status` text and returns bytes.
pub fn parse_status_field(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * KIB)
    })
}

/// Peak resident set of this process (`VmHWM`), in bytes; `None` where /proc is unavailable.
pub fn peak_rss_bytes() -> Option<u64> {
    status_field_kib("VmHWM")
}

/// Resets this process's `VmHWM` to its current RSS (writes `5` to `/proc/self/clear_refs`,
/// Linux ≥ 4.0), so one process can measure the peaks of successive phases (benchmarks).
/// Returns whether the kernel accepted it.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Current resident set of this process (`VmRSS`), in bytes.
pub fn current_rss_bytes() -> Option<u64> {
    status_field_kib("VmRSS")
}

#[derive(Debug)]
struct LedgerState {
    next_id: u64,
    /// id → (component, bytes).
    live: BTreeMap<u64, (Component, u64)>,
    reserved: u64,
}

#[derive(Debug)]
struct LedgerInner {
    budget: u64,
    state: Mutex<LedgerState>,
}

/// Hands out reservations whose sum never exceeds the budget. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct Ledger {
    inner: Arc<LedgerInner>,
}

impl Ledger {
    pub fn new(budget: u64) -> Ledger {
        Ledger {
            inner: Arc::new(LedgerInner {
                budget,
                state: Mutex::new(LedgerState {
                    next_id: 0,
                    live: BTreeMap::new(),
                    reserved: 0,
                }),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LedgerState> {
        // The state is a plain map updated atomically under the lock; a panic elsewhere while
        // holding it cannot leave it half-updated, so a poisoned lock is still consistent.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn budget(&self) -> u64 {
        self.inner.budget
    }

    pub fn reserved(&self) -> u64 {
        self.lock().reserved
    }

    pub fn available(&self) -> u64 {
        self.inner.budget - self.reserved()
    }

    /// Live reservations as (component, bytes), in reservation order.
    pub fn items(&self) -> Vec<(Component, u64)> {
        self.lock().live.values().cloned().collect()
    }

    fn over(&self, st: &LedgerState, component: Component, requested: u64) -> BudgetError {
        BudgetError::OverBudget {
            component,
            requested,
            available: self.inner.budget - st.reserved,
            budget: self.inner.budget,
            reserved: st.live.values().cloned().collect(),
        }
    }

    /// Reserves `bytes` for `component`, or fails itemising the current reservations.
    pub fn reserve(&self, component: Component, bytes: u64) -> Result<Reservation, BudgetError> {
        let mut st = self.lock();
        if bytes > self.inner.budget - st.reserved {
            return Err(self.over(&st, component, bytes));
        }
        let id = st.next_id;
        st.next_id += 1;
        st.reserved += bytes;
        st.live.insert(id, (component, bytes));
        Ok(Reservation {
            ledger: self.clone(),
            id,
            bytes,
        })
    }

    /// Reserves whatever is free (possibly zero) for `component`.
    pub fn reserve_rest(&self, component: Component) -> Reservation {
        let mut st = self.lock();
        let bytes = self.inner.budget - st.reserved;
        let id = st.next_id;
        st.next_id += 1;
        st.reserved += bytes;
        st.live.insert(id, (component, bytes));
        Reservation {
            ledger: self.clone(),
            id,
            bytes,
        }
    }
}

/// A live reservation; dropping it returns its bytes to the ledger.
#[derive(Debug)]
pub struct Reservation {
    ledger: Ledger,
    id: u64,
    bytes: u64,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn component(&self) -> Component {
        self.ledger
            .lock()
            .live
            .get(&self.id)
            .map(|(c, _)| *c)
            .expect("a live reservation is in its ledger")
    }

    /// Grows or shrinks to `bytes`. Shrinking always succeeds; growing fails (leaving the
    /// reservation unchanged) if the budget has no room.
    pub fn resize(&mut self, bytes: u64) -> Result<(), BudgetError> {
        let mut st = self.ledger.lock();
        if bytes > self.bytes {
            let extra = bytes - self.bytes;
            if extra > self.ledger.inner.budget - st.reserved {
                let component = st
                    .live
                    .get(&self.id)
                    .map(|(c, _)| *c)
                    .expect("a live reservation is in its ledger");
                return Err(self.ledger.over(&st, component, extra));
            }
            st.reserved += extra;
        } else {
            st.reserved -= self.bytes - bytes;
        }
        if let Some(entry) = st.live.get_mut(&self.id) {
            entry.1 = bytes;
        }
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut st = self.ledger.lock();
        st.reserved -= self.bytes;
        st.live.remove(&self.id);
    }
}

/// Fixed runtime overheads counted in the floor on top of the measured startup RSS. Each is a
/// deliberate over-estimate of memory that the kernel counts but no Rust value owns.
pub mod margin {
    use super::{KIB, MIB};
    /// Allocator retention: glibc keeps freed heap below its trim threshold per arena and
    /// rounds chunks. [`super::bound_allocator`] makes every allocation of at least
    /// [`super::MMAP_THRESHOLD`] a mapping of its own, returned to the kernel when freed, so only
    /// small churn (channels, strings, JSON, Vec growth below the threshold) is retained.
    /// 4 MiB for the main arena.
    pub const ALLOCATOR: u64 = 4 * MIB;
    /// Each extra thread may get its own glibc arena (up to 8 × cores): its first heap touches
    /// at most a few pages for small allocations, and chunks up to [`super::MMAP_THRESHOLD`]
    /// freed there may be retained: 512 KiB + 2 × the threshold per thread.
    pub const ARENA_PER_THREAD: u64 = 512 * KIB + 2 * super::MMAP_THRESHOLD;
    /// Loader threads are spawned with this stack size; counting all of it as resident is the
    /// worst case (the kernel maps stack pages only when touched).
    pub const THREAD_STACK: u64 = 512 * KIB;
    /// A zstd decompression context is ~160 KiB (ZSTD_estimateDCtxSize for 1.5.x is ~95 KiB
    /// plus the entropy tables); one per worker, rounded up.
    pub const ZSTD_DCTX: u64 = 256 * KIB;
    /// A read fault on a file mapping also maps neighbouring cached pages: a fault-around
    /// window or a whole large folio, at most [`crate::shard::reader::FAULT_AROUND`] (2 MiB);
    /// the reader releases those windows with each record, so what stays mapped per worker is
    /// the record in flight plus one window at each end.
    pub const FAULT_AROUND_PER_WORKER: u64 = 2 * crate::shard::reader::FAULT_AROUND;
}

/// Allocations of at least this many bytes get a mapping of their own (see
/// [`bound_allocator`]).
pub const MMAP_THRESHOLD: u64 = 256 * KIB;

/// Pins glibc's allocator so freed large buffers leave the resident set: every allocation of
/// at least [`MMAP_THRESHOLD`] is served by its own `mmap` and unmapped on free. By default
/// glibc raises that threshold to the size of the last freed mapped chunk (up to 32 MiB), after
/// which view-sized buffers (MiBs) come from the heap, where a freed one is kept resident and
/// fragments: memory no ledger item owns, growing with the number of differently sized records.
/// Idempotent; process-wide; a no-op on other platforms. Returns whether it took effect.
pub fn bound_allocator() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *DONE.get_or_init(|| {
            // SAFETY: mallopt only changes glibc's allocation thresholds; it is thread-safe (it
            // takes the arena locks) and any value is valid for these parameters. Setting the
            // thresholds explicitly also disables their dynamic adjustment.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int) == 1
                    && libc::mallopt(libc::M_TRIM_THRESHOLD, (2 * MMAP_THRESHOLD) as libc::c_int)
                        == 1
            }
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// `Some(peak ≤ budget)`, or `None` when the peak could not be measured: a report never
/// claims the budget held without the kernel's figure.
pub fn within_budget(peak: Option<u64>, budget: u64) -> Option<bool> {
    peak.map(|p| p <= budget)
}

/// What a run needs before it caches anything, itemised. Compute it before any work with
/// [`Floor::compute`], then [`Floor::check`] it against the budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Floor {
    pub budget: u64,
    /// Every item says how its bytes are made up.
    pub items: Vec<FloorItem>,
    /// What the user can change, tailored to the biggest items.
    pub advice: Vec<String>,
    /// The model's share, when the run trains one (sizes the `--max-gaussians` advice).
    pub model: Option<ModelShare>,
}

/// The trainer's model in the floor: the item `--max-gaussians` controls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelShare {
    /// Gaussians the model starts with (after any `--max-gaussians` cap).
    pub gaussians: u64,
    /// Gaussians before the cap (SfM points, random points or the checkpoint's model).
    pub uncapped: u64,
    /// Host bytes per Gaussian while training.
    pub bytes_per_gaussian: u64,
    /// How `bytes_per_gaussian` is made up, for the plan.
    pub formula: String,
    /// Points read to build the initial model (0 on resume): they are held, with their
    /// sampling keys and kNN tables, while the model is built; the cache gets them afterwards.
    pub init_points: u64,
    pub init_bytes_per_point: u64,
}

/// The inputs of the floor.
#[derive(Clone, Debug)]
pub struct FloorInputs {
    /// Process RSS measured at startup after opening the dataset (manifest parsed) and before
    /// anything that scales with the data (model, cache, ring) is allocated.
    pub baseline_rss: u64,
    /// Threads started after the baseline was measured: the loader's workers, plus the
    /// trainer's compute pool (scheduling runs on the consumer thread, already in the baseline).
    pub threads: usize,
    pub workers: usize,
    pub ring_slots: usize,
    /// Bytes of one ring slot (the largest decoded record).
    pub slot_bytes: u64,
    /// Largest stored (on-disk) record: a worker's mapped pages of the record it decodes.
    pub max_stored_bytes: u64,
    /// Largest heap a worker allocates besides the ring slot while decoding a record: the JPEG
    /// decoder's scratch of a view stored as JPEG, and a view read at a run's resolution
    /// decoded whole at its stored size, then resampled
    /// (`crate::shard::reader::Pack::decode_scratch`); 0 otherwise.
    pub max_decode_scratch: u64,
    /// What `max_decode_scratch` holds, for the plan ("JPEG decoder", …).
    pub decode_scratch_what: String,
    /// Records the sampler schedules (its per-epoch tables and the cache index scale with it).
    pub records: usize,
    /// Extra fixed components.
    pub extra: Vec<FloorItem>,
    /// The model, when a trainer runs.
    pub model: Option<ModelShare>,
}

/// Bytes of sampler and cache bookkeeping per record, counted from the structures:
/// the sampler's group list (a `Vec` header 24 B + its heap chunk ≥ 32 B, held twice while the
/// sampler is built), two epoch tables (a 16 B step + a 4 B inverse entry each, 40 B), and a
/// cache entry (hash-map slot ≈ 40 B, ordered-set node ≈ 32 B, the `Arc` of the buffer 48 B):
/// 112 + 40 + 120 = 272, rounded up to 320.
pub const BOOKKEEPING_PER_RECORD: u64 = 320;

/// The `--max-gaussians` advice leaves `budget / ADVICE_SLACK_DIVISOR` unplanned, so that the
/// advised count still fits a re-run whose measured baseline is slightly larger.
pub const ADVICE_SLACK_DIVISOR: u64 = 32;

/// Rounds `n` down to two significant digits (1,234,567 → 1,200,000), so an advised count
/// is readable and leaves a little room.
fn round_down_2sig(n: u64) -> u64 {
    let mut scale = 1;
    while n / scale >= 100 {
        scale *= 10;
    }
    n / scale * scale
}

impl Floor {
    pub fn compute(budget: u64, f: &FloorInputs) -> Floor {
        let threads = f.threads as u64;
        let workers = f.workers as u64;
        let per_thread = margin::ARENA_PER_THREAD + margin::THREAD_STACK;
        let per_worker = f.max_stored_bytes
            + margin::ZSTD_DCTX
            + margin::FAULT_AROUND_PER_WORKER
            + f.max_decode_scratch;
        let mut items = vec![
            FloorItem::new(
                Component::Baseline,
                f.baseline_rss,
                "process RSS measured before the model, ring and cache exist (code, libraries, \
                 manifest)"
                    .to_string(),
            ),
            FloorItem::new(
                Component::RuntimeMargin,
                margin::ALLOCATOR + threads * per_thread,
                format!(
                    "allocator {} + {} threads × (arena {} + stack {})",
                    format_size(margin::ALLOCATOR),
                    f.threads,
                    format_size(margin::ARENA_PER_THREAD),
                    format_size(margin::THREAD_STACK)
                ),
            ),
            FloorItem::new(
                Component::PrefetchRing,
                f.ring_slots as u64 * f.slot_bytes,
                format!(
                    "{} slots × {} (largest record)",
                    f.ring_slots,
                    format_size(f.slot_bytes)
                ),
            ),
            FloorItem::new(
                Component::DecodeScratch,
                workers * per_worker,
                format!(
                    "{} workers × (mapped record {} + zstd context {} + fault-around {}{})",
                    f.workers,
                    format_size(f.max_stored_bytes),
                    format_size(margin::ZSTD_DCTX),
                    format_size(margin::FAULT_AROUND_PER_WORKER),
                    if f.max_decode_scratch > 0 {
                        format!(
                            " + {} {}",
                            f.decode_scratch_what,
                            format_size(f.max_decode_scratch)
                        )
                    } else {
                        String::new()
                    }
                ),
            ),
            FloorItem::new(
                Component::Bookkeeping,
                f.records as u64 * BOOKKEEPING_PER_RECORD,
                format!(
                    "{} records × {BOOKKEEPING_PER_RECORD} B (sampler tables, cache index)",
                    f.records
                ),
            ),
        ];
        items.extend(f.extra.iter().cloned());
        if let Some(m) = &f.model {
            items.push(FloorItem::new(
                Component::Model,
                m.gaussians * m.bytes_per_gaussian,
                format!(
                    "{} Gaussians × {} B ({}); grows with densification, taking from the cache",
                    m.gaussians, m.bytes_per_gaussian, m.formula
                ),
            ));
            if m.init_points > 0 {
                items.push(FloorItem::new(
                    Component::Initialisation,
                    m.init_points * m.init_bytes_per_point,
                    format!(
                        "{} points read × {} B (position, colour, sampling key, kNN tables) \
                         while the initial model is built; the cache gets it back afterwards",
                        m.init_points, m.init_bytes_per_point
                    ),
                ));
            }
        }
        let total: u64 = items.iter().map(|i| i.bytes).sum();
        let mut advice = Vec::new();
        if let Some(m) = &f.model {
            let model_bytes = m.gaussians * m.bytes_per_gaussian;
            let others = total - model_bytes;
            // Leave 1/32 of the budget over: the baseline is measured anew by each run and
            // varies by a little, which must not make the advised count fail next time.
            let slack = budget / ADVICE_SLACK_DIVISOR;
            if total > budget && others + slack < budget && m.bytes_per_gaussian > 0 {
                let fit = round_down_2sig((budget - others - slack) / m.bytes_per_gaussian);
                if fit > 0 && fit < m.gaussians {
                    let cache = budget - others - fit * m.bytes_per_gaussian;
                    advice.push(format!(
                        "--max-gaussians {fit}: the model ({} Gaussians, {}) is {:.0}% of \
                         the floor; capped at {fit} it takes {} (the {} initial Gaussians are \
                         subsampled to {fit}, spread over the scene, and densification never \
                         grows past it, so fine detail may be lost) and the cache gets {}",
                        m.gaussians,
                        format_size(model_bytes),
                        100.0 * model_bytes as f64 / total as f64,
                        format_size(fit * m.bytes_per_gaussian),
                        m.uncapped,
                        format_size(cache)
                    ));
                    // Or keep the detail: blocks of the scene, each within this budget.
                    let blocks = m.gaussians.div_ceil(fit).max(2);
                    let columns = (blocks as f64).sqrt().ceil() as u64;
                    advice.push(format!(
                        "or keep every Gaussian by training the scene in blocks, each under \
                         this budget: gs-pack partition PACK --blocks {columns}x{} -o BLOCKS, \
                         gs-train on each block (its --dry-run says whether it fits), then \
                         gs-pack merge (for scenes each view sees only part of: aerial, street, \
                         building-scale captures)",
                        blocks.div_ceil(columns)
                    ));
                }
            }
        }
        if f.ring_slots > 3 {
            advice.push(format!(
                "fewer prefetch slots (--prefetch {} saves {})",
                1,
                format_size((f.ring_slots as u64 - 3) * f.slot_bytes)
            ));
        }
        if f.workers > 1 {
            advice.push(format!(
                "fewer workers (--workers 1 saves {})",
                format_size((workers - 1) * (per_worker + per_thread))
            ));
        }
        advice.push(format!(
            "smaller views (re-pack with a smaller --max-width; the largest view is {})",
            format_size(f.slot_bytes)
        ));
        advice.push("or a larger --ram-budget".to_string());
        Floor {
            budget,
            items,
            advice,
            model: f.model.clone(),
        }
    }

    pub fn total(&self) -> u64 {
        self.items.iter().map(|i| i.bytes).sum()
    }

    /// Bytes of the item of `component` (0 if absent).
    pub fn item(&self, component: Component) -> u64 {
        self.items
            .iter()
            .filter(|i| i.component == component)
            .map(|i| i.bytes)
            .sum()
    }

    /// `Ok(bytes left for the cache)` or the itemised [`BudgetError::BelowFloor`].
    pub fn check(&self) -> Result<u64, BudgetError> {
        let total = self.total();
        if total > self.budget {
            Err(BudgetError::BelowFloor(Box::new(self.clone())))
        } else {
            Ok(self.budget - total)
        }
    }

    /// One line per item: name, bytes, formula.
    pub fn table(&self) -> String {
        self.items
            .iter()
            .map(|i| {
                let name = i.component.name();
                format!("  {name:<21} {:>12}  {}", format_size(i.bytes), i.formula)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl fmt::Display for Floor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "--ram-budget {} is below the memory floor of {} this run needs before caching anything:",
            format_size(self.budget),
            format_size(self.total())
        )?;
        writeln!(f, "{}", self.table())?;
        write!(f, "to fit, use {}", self.advice.join("; "))
    }
}

/// Test helper for checks that read or reset the process-wide peak RSS: in the test process it
/// re-runs the test `name` alone in a child process (so no concurrently running test disturbs
/// the figures) and checks that it passed; returns `true` only in that child, which then runs
/// the body.
#[cfg(test)]
pub(crate) fn in_child_process(name: &str) -> bool {
    const CHILD: &str = "RAMSPLAT_RSS_TEST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--include-ignored"])
        .env(CHILD, "1")
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} in a child process:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_size("4G").unwrap(), 4 << 30);
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("4gib").unwrap(), 4 << 30);
        assert_eq!(parse_size("4GB").unwrap(), 4_000_000_000);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("123").unwrap(), 123);
        assert_eq!(parse_size(" 64 K ").unwrap(), 64 << 10);
        assert_eq!(parse_size("7B").unwrap(), 7);
        assert_eq!(parse_size("2T").unwrap(), 2 << 40);
    }

    #[test]
    fn junk_sizes_are_errors() {
        for junk in [
            "",
            "G",
            "abc",
            "4X",
            "1.5",
            "-1G",
            "1.2.3G",
            "99999999999999999999",
            "20000000000T",
        ] {
            let e = parse_size(junk).unwrap_err();
            assert!(matches!(e, BudgetError::BadSize { .. }), "{junk}: {e}");
            assert!(
                e.to_string().contains("4G"),
                "message shows an example: {e}"
            );
        }
    }

    #[test]
    fn format_size_uses_binary_units() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
    }

    #[test]
    fn ledger_never_exceeds_budget_and_itemises() {
        let ledger = Ledger::new(100);
        let a = ledger.reserve(Component::PrefetchRing, 60).unwrap();
        let mut b = ledger.reserve(Component::Cache, 30).unwrap();
        assert_eq!(ledger.reserved(), 90);
        let err = ledger.reserve(Component::Model, 20).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("model")
                && msg.contains("prefetch ring 60 B")
                && msg.contains("cache 30 B"),
            "{msg}"
        );
        assert!(b.resize(41).is_err());
        assert_eq!(
            b.bytes(),
            30,
            "a failed grow leaves the reservation unchanged"
        );
        b.resize(40).unwrap();
        assert_eq!(ledger.available(), 0);
        b.resize(10).unwrap();
        let c = ledger.reserve(Component::Model, 30).unwrap();
        assert_eq!(ledger.reserved(), 100);
        drop(a);
        assert_eq!(ledger.reserved(), 40);
        assert_eq!(
            ledger.items(),
            vec![(Component::Cache, 10), (Component::Model, 30)]
        );
        drop((b, c));
        assert_eq!(ledger.reserved(), 0);
        let rest = ledger.reserve_rest(Component::Cache);
        assert_eq!(rest.bytes(), 100);
        assert_eq!(rest.component(), Component::Cache);
    }

    #[test]
    fn rss_is_read_from_proc() {
        // VmHWM and its reset are process-wide: measure in a child running only this test.
        if !in_child_process("budget::tests::rss_is_read_from_proc") {
            return;
        }
        let cur = current_rss_bytes().expect("VmRSS on Linux");
        let peak = peak_rss_bytes().expect("VmHWM on Linux");
        assert!(cur > 0 && peak >= cur);
        {
            // Raise the peak by touching 32 MiB (through black_box, so no optimiser removes
            // the writes), free it, then reset the peak to the current RSS.
            let mut big = std::hint::black_box(vec![0u8; 32 << 20]);
            for page in big.chunks_mut(4096) {
                page[0] = 1;
            }
            std::hint::black_box(&big);
            assert!(peak_rss_bytes().unwrap() >= cur + big.len() as u64 / 2);
        }
        if reset_peak_rss() {
            let after = peak_rss_bytes().unwrap();
            assert!(after < cur + (16 << 20), "reset peak {after} vs rss {cur}");
        }
        let text = "Name:\tx\nVmHWM:\t    1652 kB\nVmRSS:\t  12 kB\n";
        assert_eq!(parse_status_field(text, "VmHWM"), Some(1652 * 1024));
        assert_eq!(parse_status_field(text, "VmRSS"), Some(12 * 1024));
        assert_eq!(parse_status_field(text, "VmSwap"), None);
    }

    #[test]
    fn an_unmeasured_peak_is_never_within_budget() {
        assert_eq!(within_budget(None, u64::MAX), None);
        assert_eq!(within_budget(Some(5), 5), Some(true));
        assert_eq!(within_budget(Some(6), 5), Some(false));
    }

    #[test]
    fn freed_large_buffers_leave_the_resident_set() {
        if !in_child_process("budget::tests::freed_large_buffers_leave_the_resident_set") {
            return;
        }
        if !bound_allocator() {
            return; // not glibc: nothing to check
        }
        // Buffers of two sizes allocated and freed alternately: with glibc's default dynamic
        // threshold the second round comes from the heap and stays resident after free.
        let before = current_rss_bytes().unwrap();
        for round in 0..4 {
            // Decreasing sizes: each is below the default threshold raised by the one before.
            let len = (4 << 20) - round * (512 << 10);
            let mut v = std::hint::black_box(vec![0u8; len]);
            for page in v.chunks_mut(4096) {
                page[0] = 1;
            }
            std::hint::black_box(&v);
        }
        let after = current_rss_bytes().unwrap();
        assert!(
            after < before + (1 << 20),
            "{after} B resident after freeing, {before} B before"
        );
    }

    fn inputs() -> FloorInputs {
        FloorInputs {
            baseline_rss: 10 * MIB,
            threads: 3,
            workers: 2,
            ring_slots: 6,
            slot_bytes: 6 * MIB,
            max_stored_bytes: 6 * MIB,
            max_decode_scratch: 0,
            decode_scratch_what: String::new(),
            records: 1000,
            extra: vec![],
            model: None,
        }
    }

    #[test]
    fn floor_itemises_and_advises() {
        let f = Floor::compute(64 * MIB, &inputs());
        let expected = 10 * MIB
            + margin::ALLOCATOR
            + 3 * (margin::ARENA_PER_THREAD + margin::THREAD_STACK)
            + 36 * MIB
            + 2 * (6 * MIB + margin::ZSTD_DCTX + margin::FAULT_AROUND_PER_WORKER)
            + 1000 * BOOKKEEPING_PER_RECORD;
        assert_eq!(f.total(), expected);
        let err = f.check().unwrap_err();
        let msg = err.to_string();
        for needle in [
            "prefetch ring",
            "6 slots",
            "decode scratch",
            "--prefetch",
            "--workers 1",
            "--max-width",
        ] {
            assert!(msg.contains(needle), "missing {needle:?} in:\n{msg}");
        }
        let ok = Floor::compute(expected + 5, &inputs());
        assert_eq!(ok.check().unwrap(), 5);
    }
    #[test]
    fn a_model_too_large_is_refused_naming_a_max_gaussians_that_fits() {
        let mut f = inputs();
        f.model = Some(ModelShare {
            gaussians: 4_000_000,
            uncapped: 4_000_000,
            bytes_per_gaussian: 1092,
            formula: "test".into(),
            init_points: 4_000_000,
            init_bytes_per_point: 48,
        });
        let budget = 2 << 30;
        let floor = Floor::compute(budget, &f);
        assert_eq!(floor.item(Component::Model), 4_000_000 * 1092);
        assert_eq!(floor.item(Component::Initialisation), 4_000_000 * 48);
        let msg = floor.check().unwrap_err().to_string();
        let n: u64 = msg
            .split("--max-gaussians ")
            .nth(1)
            .and_then(|t| t.split(':').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no --max-gaussians N in:\n{msg}"));
        assert!(n > 0 && n < 4_000_000, "{n}");
        assert!(
            msg.find("--max-gaussians").unwrap() < msg.find("--prefetch").unwrap(),
            "the model advice comes first:\n{msg}"
        );
        // Then the blocks that keep every Gaussian, enough of them for n each.
        let blocks = msg
            .split("gs-pack partition PACK --blocks ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.split_once('x'))
            .map(|(c, r)| c.parse::<u64>().unwrap() * r.parse::<u64>().unwrap())
            .unwrap_or_else(|| panic!("no partition advice in:\n{msg}"));
        assert!(
            blocks * n >= 4_000_000 && blocks <= 4,
            "{blocks} blocks of {n}"
        );
        // The advised count fits with the slack to spare, and is not far below what fits.
        let others = floor.total() - floor.item(Component::Model);
        let exact = (budget - others) / 1092;
        let mut g = f.clone();
        g.model.as_mut().unwrap().gaussians = n;
        let left = Floor::compute(budget, &g)
            .check()
            .expect("the advised count fits");
        assert!(left >= budget / ADVICE_SLACK_DIVISOR, "{left}");
        assert!(
            n <= exact && n as f64 >= 0.85 * exact as f64,
            "{n} of {exact}"
        );
        // Every item carries its formula.
        assert!(
            floor.items.iter().all(|i| !i.formula.is_empty()),
            "{floor:?}"
        );
        // When the model is small, no such advice.
        let mut small = f.clone();
        small.model.as_mut().unwrap().gaussians = 10;
        small.model.as_mut().unwrap().init_points = 0;
        let msg = Floor::compute(1 << 20, &small)
            .check()
            .unwrap_err()
            .to_string();
        assert!(!msg.contains("--max-gaussians"), "{msg}");
    }

    #[test]
    fn bookkeeping_scales_with_the_records() {
        let mut f = inputs();
        let small = Floor::compute(u64::MAX, &f).total();
        f.records = 1_000_000;
        let large = Floor::compute(u64::MAX, &f).total();
        assert_eq!(large - small, 999_000 * BOOKKEEPING_PER_RECORD);
        assert_eq!(round_down_2sig(1_234_567), 1_200_000);
        assert_eq!(round_down_2sig(99), 99);
        assert_eq!(round_down_2sig(0), 0);
    }
}
