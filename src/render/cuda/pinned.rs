//! Page-locked ring slots for the loader ([`PinnedSlots`]), so a CUDA consumer can upload a
//! delivered view with an asynchronous DMA instead of the driver's staged copy.
//!
//! Memory kind: plain page-locked memory (`cuMemHostAlloc` flags 0), not write-combined.
//! Write-combined memory is fast for streaming host writes but uncached for host *reads*, and
//! the loader's writers read what they write: the zstd and PNG decoders copy matches from
//! earlier output, and the consumer's CPU fallback reads the slot. Cached pinned memory costs
//! nothing extra for the DMA.
//!
//! Ordering: cudarc records an event on a [`PinnedHostSlice`] whenever a copy is queued from
//! it; [`HostBuffer::prepare`] waits on that event, and the loader's workers call it before
//! writing a slot, so a slot whose upload is still in flight is never overwritten (the "slot
//! returns to the ring only when its copy has completed" rule, enforced where it matters).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use cudarc::driver::{CudaContext, PinnedHostSlice};

use crate::data::{HostBuffer, LoadError, SlotAllocator};
use crate::device::DeviceError;

/// Allocates ring slots as page-locked host memory of one CUDA context.
#[derive(Clone, Debug)]
pub struct PinnedSlots {
    ctx: Arc<CudaContext>,
}

impl PinnedSlots {
    pub fn new(ctx: Arc<CudaContext>) -> PinnedSlots {
        PinnedSlots { ctx }
    }
}

/// One page-locked slot; `ptr` is the allocation's base, valid for `len` bytes while `mem`
/// lives.
#[derive(Debug)]
pub struct PinnedBuf {
    mem: PinnedHostSlice<u8>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: `ptr` points into `mem`, which cudarc declares Send + Sync (page-locked host memory
// is not tied to a thread); the buffer is only reached through `&self` / `&mut self`, so Rust's
// borrow rules govern the aliasing of the bytes exactly as for a Vec.
unsafe impl Send for PinnedBuf {}

impl PinnedBuf {
    /// The cudarc allocation, for `CudaStream::memcpy_htod` (which records its event).
    pub fn pinned(&self) -> &PinnedHostSlice<u8> {
        &self.mem
    }
}

impl Deref for PinnedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is the base of `mem`'s allocation of `len` bytes (checked non-null and
        // aligned by cudarc), initialised at allocation (zero-filled), alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for PinnedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` guarantees no other reference into the bytes.
        // Queued DMAs are the one reader Rust does not see: writers call `prepare` first.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl HostBuffer for PinnedBuf {
    fn prepare(&mut self) -> Result<(), LoadError> {
        // Waits for the last copy queued from this buffer (its recorded event).
        self.mem
            .as_mut_ptr()
            .map(|_| ())
            .map_err(|e| LoadError::Read {
                record: "a pinned ring slot".into(),
                source: Box::new(DeviceError::driver("cuEventSynchronize", e)),
            })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl SlotAllocator for PinnedSlots {
    fn allocate(&self, len: usize) -> Result<Box<dyn HostBuffer>, LoadError> {
        let fail = |e| {
            LoadError::Config(format!(
                "cannot allocate a {len}-byte pinned ring slot: {e}"
            ))
        };
        // SAFETY: u8 has no invalid bit patterns; the bytes are zero-filled below before any
        // read.
        let mut mem = unsafe { self.ctx.alloc_pinned_with_flags::<u8>(len.max(1), 0) }
            .map_err(|e| fail(DeviceError::driver("cuMemHostAlloc", e)))?;
        let ptr = mem
            .as_mut_ptr()
            .map_err(|e| fail(DeviceError::driver("cuEventSynchronize", e)))?;
        // SAFETY: `ptr` is the base of a fresh allocation of at least `len` bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(Box::new(PinnedBuf { mem, ptr, len }))
    }

    fn pinned(&self) -> bool {
        true
    }
}
