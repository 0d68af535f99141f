//! Asynchronous uploads from page-locked host memory on a copy stream, so the next view goes
//! host → device while the current step computes.
//!
//! Ordering rules (what makes the overlap safe), enforced here with events:
//! 1. An upload into a device buffer starts only after every kernel queued before it on the
//!    main queue (one of them may still read the buffer's previous contents).
//! 2. The main queue reads an upload's destination only after [`Device::wait_copies`], which
//!    makes it wait, on the device, for every copy queued so far on that stream.
//! 3. The host writes a [`PinnedHost`] buffer only after [`PinnedHost::wait`] (the last copy
//!    from it has completed): the DMA engine reads the memory asynchronously.
//!
//! On the host emulation every copy completes before `upload_async` returns, so the rules
//! hold trivially and the same calling code runs unchanged (pinned memory is ordinary memory
//! there).

use std::ops::{Deref, DerefMut};

use super::{Device, DeviceBuffer, DeviceError, Driver};

/// Page-locked host memory of a device (ordinary aligned memory on the emulation). Readable
/// and writable as a byte slice; writers call [`PinnedHost::wait`] first.
pub struct PinnedHost {
    dev: Device,
    ptr: *mut u8,
    len: usize,
    /// The completion event of the last copy queued from this buffer (CUDA only).
    pending: Option<cudarc::driver::sys::CUevent>,
}

// SAFETY: the allocation is plain host memory owned by this value (not tied to a thread); the
// bytes are reached only through `&self`/`&mut self`, so Rust's borrow rules govern their
// aliasing as for a Vec; the CUDA event handle may be used from any thread of the context
// (the driver binds the context on every call).
unsafe impl Send for PinnedHost {}

impl PinnedHost {
    /// Blocks until the last copy queued from this buffer has completed, so it may be
    /// overwritten.
    pub fn wait(&mut self) -> Result<(), DeviceError> {
        if let Some(ev) = self.pending.take() {
            if let Driver::Cuda(d) = self.dev.driver() {
                let r = d.event_synchronize(ev);
                d.destroy_event(ev);
                r?;
            }
        }
        Ok(())
    }

    /// Whether a copy from this buffer may still be in flight.
    pub fn busy(&self) -> bool {
        self.pending.is_some()
    }
}

impl Deref for PinnedHost {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is the base of an allocation of `len` bytes (zero-filled at
        // allocation, so initialised), alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for PinnedHost {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` excludes every other Rust reference. A queued
        // DMA is the one reader Rust does not see: writers call `wait` first (rule 3).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        // The DMA may still read the memory: wait before freeing it.
        let _ = self.wait();
        match self.dev.driver() {
            Driver::Cuda(d) => d.free_pinned(self.ptr),
            Driver::Emulated(_) => {
                if let Ok(layout) = std::alloc::Layout::from_size_align(self.len.max(1), 4096) {
                    // SAFETY: `ptr` came from `alloc_zeroed` with this layout, freed once.
                    unsafe { std::alloc::dealloc(self.ptr, layout) };
                }
            }
        }
    }
}

impl std::fmt::Debug for PinnedHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedHost[{} bytes, busy {}]", self.len, self.busy())
    }
}

/// A second queue for uploads (a non-blocking CUDA stream; nothing on the emulation).
pub struct CopyStream {
    dev: Device,
    raw: cudarc::driver::sys::CUstream,
}

// SAFETY: a CUDA stream handle may be used from any thread of its context (the driver binds
// the context on every call); on the emulation the handle is null and unused.
unsafe impl Send for CopyStream {}
// SAFETY: as above; every operation on the handle goes through the thread-safe driver API.
unsafe impl Sync for CopyStream {}

impl Drop for CopyStream {
    fn drop(&mut self) {
        if let Driver::Cuda(d) = self.dev.driver() {
            d.destroy_stream(self.raw);
        }
    }
}

impl Device {
    /// `len` bytes of page-locked host memory, zero-filled.
    pub fn alloc_pinned(&self, len: usize) -> Result<PinnedHost, DeviceError> {
        let ptr = match self.driver() {
            Driver::Cuda(d) => {
                let p = d.alloc_pinned(len.max(1))?;
                // SAFETY: `p` is a fresh allocation of at least `len` bytes.
                unsafe { std::ptr::write_bytes(p, 0, len) };
                p
            }
            Driver::Emulated(_) => {
                let layout =
                    std::alloc::Layout::from_size_align(len.max(1), 4096).map_err(|_| {
                        DeviceError::OutOfMemory {
                            requested: len as u64,
                            free: 0,
                            total: 0,
                        }
                    })?;
                // SAFETY: `layout` has a non-zero size.
                let p = unsafe { std::alloc::alloc_zeroed(layout) };
                if p.is_null() {
                    return Err(DeviceError::OutOfMemory {
                        requested: len as u64,
                        free: 0,
                        total: 0,
                    });
                }
                p
            }
        };
        Ok(PinnedHost {
            dev: self.clone(),
            ptr,
            len,
            pending: None,
        })
    }

    /// A queue for [`Device::upload_async`].
    pub fn copy_stream(&self) -> Result<CopyStream, DeviceError> {
        let raw = match self.driver() {
            Driver::Cuda(d) => d.create_stream()?,
            Driver::Emulated(_) => std::ptr::null_mut(),
        };
        Ok(CopyStream {
            dev: self.clone(),
            raw,
        })
    }

    /// Queues a copy of `src[..len]` into the first `len` bytes of `dst` on `stream`, after
    /// every operation queued so far on the main queue (rule 1 of the module doc). Returns
    /// without waiting; `src` is busy until the copy completes (rule 3), and the main queue
    /// must [`Device::wait_copies`] before reading `dst` (rule 2).
    pub fn upload_async(
        &self,
        stream: &CopyStream,
        src: &mut PinnedHost,
        len: usize,
        dst: &mut DeviceBuffer<u8>,
    ) -> Result<(), DeviceError> {
        self.check_owner(dst.dev())?;
        self.check_owner(&src.dev)?;
        self.check_owner(&stream.dev)?;
        if len > src.len || len > dst.len() {
            return Err(DeviceError::Copy {
                message: format!(
                    "async upload of {len} bytes from {} pinned bytes into {} device bytes",
                    src.len,
                    dst.len()
                ),
            });
        }
        match self.driver() {
            Driver::Cuda(d) => {
                // Rule 1: the copy stream waits for what the main queue holds now.
                let before = d.record(std::ptr::null_mut())?;
                let waited = d.stream_wait(stream.raw, before);
                d.destroy_event(before);
                waited?;
                // SAFETY: `dst` holds ≥ len bytes and `src` ≥ len page-locked bytes (checked
                // above); `src` is marked busy below, so writers wait for this copy.
                unsafe { d.htod_on(stream.raw, dst.addr, src.ptr, len) }?;
                let done = d.record(stream.raw)?;
                if let Some(old) = src.pending.replace(done) {
                    // An earlier copy from this buffer completed before this one (same stream).
                    d.destroy_event(old);
                }
                Ok(())
            }
            Driver::Emulated(_) => {
                // SAFETY: both regions hold ≥ len bytes (checked above) and do not overlap
                // (device buffers and pinned buffers are separate allocations).
                unsafe { std::ptr::copy_nonoverlapping(src.ptr, dst.addr as *mut u8, len) };
                Ok(())
            }
        }
    }

    /// Makes the main queue wait (on the device, without blocking the host) for every copy
    /// queued so far on `stream` (rule 2).
    pub fn wait_copies(&self, stream: &CopyStream) -> Result<(), DeviceError> {
        self.check_owner(&stream.dev)?;
        if let Driver::Cuda(d) = self.driver() {
            let ev = d.record(stream.raw)?;
            let r = d.stream_wait(std::ptr::null_mut(), ev);
            d.destroy_event(ev);
            r?;
        }
        Ok(())
    }
}
