//! The RAM budget: size parsing, the reservation ledger and the memory floor.
//!
//! `--ram-budget B` caps the peak resident set of the whole process as the kernel reports it
//! (`VmHWM` in `/proc/self/status`). This module owns the bookkeeping that makes that cap hold:
//!
//! - [`parse_size`] / [`format_size`]: `4G` = `4GiB` = 4·2³⁰ bytes, `4GB` = 4·10⁹, plain
//!   numbers are bytes (DESIGN.md §2).
//! - [`Ledger`]: hands out RAII [`Reservation`]s per named component (baseline process, prefetch
//!   ring, decode scratch, cache, host-side model). A reservation that would push the sum above
//!   the budget fails with an error that itemises every current reservation; reservations can
//!   grow (fallibly) and shrink (always), so the cache can give memory back when the model grows.
//! - [`Floor`]: the memory a run needs before it caches anything, computed BEFORE any work so a
//!   budget below it fails at start with an itemised message and what to change.
//! - [`peak_rss_bytes`] / [`current_rss_bytes`]: the kernel's own figures.
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
        component: String,
        requested: u64,
        available: u64,
        budget: u64,
        reserved: Vec<(String, u64)>,
    },
    #[error("{0}")]
    BelowFloor(Box<Floor>),
}

fn itemise(items: &[(String, u64)]) -> String {
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
    live: BTreeMap<u64, (String, u64)>,
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
    pub fn items(&self) -> Vec<(String, u64)> {
        self.lock().live.values().cloned().collect()
    }

    fn over(&self, st: &LedgerState, component: &str, requested: u64) -> BudgetError {
        BudgetError::OverBudget {
            component: component.to_string(),
            requested,
            available: self.inner.budget - st.reserved,
            budget: self.inner.budget,
            reserved: st.live.values().cloned().collect(),
        }
    }

    /// Reserves `bytes` for `component`, or fails itemising the current reservations.
    pub fn reserve(&self, component: &str, bytes: u64) -> Result<Reservation, BudgetError> {
        let mut st = self.lock();
        if bytes > self.inner.budget - st.reserved {
            return Err(self.over(&st, component, bytes));
        }
        let id = st.next_id;
        st.next_id += 1;
        st.reserved += bytes;
        st.live.insert(id, (component.to_string(), bytes));
        Ok(Reservation {
            ledger: self.clone(),
            id,
            bytes,
        })
    }

    /// Reserves whatever is free (possibly zero) for `component`.
    pub fn reserve_rest(&self, component: &str) -> Reservation {
        let mut st = self.lock();
        let bytes = self.inner.budget - st.reserved;
        let id = st.next_id;
        st.next_id += 1;
        st.reserved += bytes;
        st.live.insert(id, (component.to_string(), bytes));
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

    pub fn component(&self) -> String {
        self.ledger
            .lock()
            .live
            .get(&self.id)
            .map(|(n, _)| n.clone())
            .unwrap_or_default()
    }

    /// Grows or shrinks to `bytes`. Shrinking always succeeds; growing fails (leaving the
    /// reservation unchanged) if the budget has no room.
    pub fn resize(&mut self, bytes: u64) -> Result<(), BudgetError> {
        let mut st = self.ledger.lock();
        if bytes > self.bytes {
            let extra = bytes - self.bytes;
            if extra > self.ledger.inner.budget - st.reserved {
                let name = st
                    .live
                    .get(&self.id)
                    .map(|(n, _)| n.clone())
                    .unwrap_or_default();
                return Err(self.ledger.over(&st, &name, extra));
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
    /// Allocator retention: glibc keeps freed heap below its trim threshold (128 KiB by
    /// default) per arena and rounds chunks; the loader reuses its big buffers, so only small
    /// churn (channels, strings, JSON) is retained. 4 MiB for the main arena.
    pub const ALLOCATOR: u64 = 4 * MIB;
    /// Each extra thread may get its own glibc arena (up to 8 × cores): its first heap touches
    /// at most a few pages for small allocations; 512 KiB per thread is generous.
    pub const ARENA_PER_THREAD: u64 = 512 * KIB;
    /// Loader threads are spawned with this stack size; counting all of it as resident is the
    /// worst case (the kernel maps stack pages only when touched).
    pub const THREAD_STACK: u64 = 512 * KIB;
    /// A zstd decompression context is ~160 KiB (ZSTD_estimateDCtxSize for 1.5.x is ~95 KiB
    /// plus the entropy tables); one per worker, rounded up.
    pub const ZSTD_DCTX: u64 = 256 * KIB;
    /// File-mapping fault-around maps up to 64 KiB (the kernel's default `fault_around_bytes`)
    /// of neighbouring, already-cached pages per fault, outside the record being released;
    /// twice (both ends of a record) per worker.
    pub const FAULT_AROUND_PER_WORKER: u64 = 128 * KIB;
}

/// What a run needs before it caches anything, itemised. Compute it before any work with
/// [`Floor::compute`], then [`Floor::check`] it against the budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Floor {
    pub budget: u64,
    /// (item, bytes, explanation).
    pub items: Vec<(String, u64, String)>,
    /// What the user can change, tailored to the biggest items.
    pub advice: Vec<String>,
}

/// The inputs of the floor.
#[derive(Clone, Debug)]
pub struct FloorInputs {
    /// Process RSS measured at startup after opening the dataset (manifest parsed).
    pub baseline_rss: u64,
    /// Threads the loader starts (its workers; scheduling runs on the consumer thread).
    pub threads: usize,
    pub workers: usize,
    pub ring_slots: usize,
    /// Bytes of one ring slot (the largest decoded record).
    pub slot_bytes: u64,
    /// Largest stored (on-disk) record: a worker's mapped pages of the record it decodes.
    pub max_stored_bytes: u64,
    /// Records the sampler schedules (its per-epoch tables and the cache index scale with it).
    pub records: usize,
    /// Extra fixed components (staging, host-side model share), (name, bytes).
    pub extra: Vec<(String, u64)>,
}

/// Bytes of sampler and cache bookkeeping per record: two epoch orders and two inverse tables
/// of u32 (16 B) plus a cache index entry (hash slot + ordered-set node, ~64 B), rounded up.
pub const BOOKKEEPING_PER_RECORD: u64 = 128;

impl Floor {
    pub fn compute(budget: u64, f: &FloorInputs) -> Floor {
        let threads = f.threads as u64;
        let workers = f.workers as u64;
        let mut items = vec![
            (
                "baseline".to_string(),
                f.baseline_rss,
                "process RSS measured at startup (code, libraries, manifest)".to_string(),
            ),
            (
                "runtime margin".to_string(),
                margin::ALLOCATOR + threads * (margin::ARENA_PER_THREAD + margin::THREAD_STACK),
                format!(
                    "allocator retention, {} thread stacks and arenas",
                    f.threads
                ),
            ),
            (
                "prefetch ring".to_string(),
                f.ring_slots as u64 * f.slot_bytes,
                format!(
                    "{} slots × {} (largest record)",
                    f.ring_slots,
                    format_size(f.slot_bytes)
                ),
            ),
            (
                "decode scratch".to_string(),
                workers
                    * (f.max_stored_bytes + margin::ZSTD_DCTX + margin::FAULT_AROUND_PER_WORKER),
                format!(
                    "{} workers × (mapped record {} + zstd context + fault-around)",
                    f.workers,
                    format_size(f.max_stored_bytes)
                ),
            ),
            (
                "bookkeeping".to_string(),
                f.records as u64 * BOOKKEEPING_PER_RECORD,
                format!("sampler and cache tables for {} records", f.records),
            ),
        ];
        for (name, bytes) in &f.extra {
            items.push((name.clone(), *bytes, String::new()));
        }
        let mut advice = Vec::new();
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
                format_size((workers - 1) * (f.max_stored_bytes + margin::ZSTD_DCTX))
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
        }
    }

    pub fn total(&self) -> u64 {
        self.items.iter().map(|i| i.1).sum()
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
}

impl fmt::Display for Floor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "--ram-budget {} is below the memory floor of {} this run needs before caching anything:",
            format_size(self.budget),
            format_size(self.total())
        )?;
        for (name, bytes, why) in &self.items {
            writeln!(f, "  {name:<16} {:>12}  {why}", format_size(*bytes))?;
        }
        write!(f, "to fit, use {}", self.advice.join("; "))
    }
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
        let a = ledger.reserve("ring", 60).unwrap();
        let mut b = ledger.reserve("cache", 30).unwrap();
        assert_eq!(ledger.reserved(), 90);
        let err = ledger.reserve("model", 20).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("model") && msg.contains("ring 60 B") && msg.contains("cache 30 B"),
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
        let c = ledger.reserve("model", 30).unwrap();
        assert_eq!(ledger.reserved(), 100);
        drop(a);
        assert_eq!(ledger.reserved(), 40);
        assert_eq!(
            ledger.items(),
            vec![("cache".to_string(), 10), ("model".to_string(), 30)]
        );
        drop((b, c));
        assert_eq!(ledger.reserved(), 0);
        let rest = ledger.reserve_rest("cache");
        assert_eq!(rest.bytes(), 100);
        assert_eq!(rest.component(), "cache");
    }

    #[test]
    fn rss_is_read_from_proc() {
        let cur = current_rss_bytes().expect("VmRSS on Linux");
        let peak = peak_rss_bytes().expect("VmHWM on Linux");
        assert!(cur > 0 && peak >= cur);
        {
            // Raise the peak by touching 32 MiB, free it, then reset the peak to the current RSS.
            let big = vec![1u8; 32 << 20];
            assert!(peak_rss_bytes().unwrap() >= big.len() as u64);
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

    fn inputs() -> FloorInputs {
        FloorInputs {
            baseline_rss: 10 * MIB,
            threads: 3,
            workers: 2,
            ring_slots: 6,
            slot_bytes: 6 * MIB,
            max_stored_bytes: 6 * MIB,
            records: 1000,
            extra: vec![],
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
}
