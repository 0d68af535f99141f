//! A counting global allocator for the hostile-input tests (`tests/pcd_hostile.rs`,
//! `tests/model_files_hostile.rs`): what reading a damaged file allocated, on the reading
//! thread. A test binary includes it with `#[path = "common/heap.rs"] mod heap;` and installs
//! it with `#[global_allocator] static ALLOCATOR: heap::Counting = heap::Counting;` (it is not
//! part of `common`, which every test binary includes).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};

/// The system allocator, recording on each thread, while that thread's recording is on, the
/// largest single allocation and the peak of bytes allocated and not yet freed.
pub struct Counting;

thread_local! {
    static RECORDING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(grow: isize, size: usize) {
    // `try_with`: the allocator also runs while thread-locals are being torn down.
    let _ = RECORDING.try_with(|r| {
        if r.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
            let _ = LIVE.try_with(|l| {
                l.set(l.get() + grow);
                let _ = PEAK.try_with(|p| p.set(p.get().max(l.get())));
            });
        }
    });
}

// SAFETY: every method forwards to `System` with the caller's layout and pointer unchanged, so
// `System`'s guarantees are ours; the bookkeeping touches only const-initialised thread-locals
// (no allocation, no re-entry).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize, layout.size());
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize, layout.size());
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize, new_size);
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize), 0);
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// What a measured run allocated.
#[derive(Debug)]
pub struct Heap {
    /// The largest single allocation.
    pub largest: usize,
    /// The peak of bytes allocated and not yet freed.
    pub peak: isize,
}

/// Runs `f` with this thread's allocations recorded; returns its result (or the panic's
/// message) and what it allocated.
pub fn measured<T>(f: impl FnOnce() -> T) -> (Result<T, String>, Heap) {
    LARGEST.with(|l| l.set(0));
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    RECORDING.with(|r| r.set(true));
    let out = panic::catch_unwind(AssertUnwindSafe(f));
    RECORDING.with(|r| r.set(false));
    let out = out.map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    });
    let heap = Heap {
        largest: LARGEST.with(|l| l.get()),
        peak: PEAK.with(|p| p.get()),
    };
    (out, heap)
}
