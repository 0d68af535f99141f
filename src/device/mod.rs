//! The device layer: device memory, host↔device copies and kernel launches behind one
//! interface, with two drivers that run the very same kernel source (`kernels/*.cu`):
//!
//! - **CUDA** ([`cuda`]): a real NVIDIA GPU through the driver API (cudarc), kernels compiled at
//!   run time by NVRTC and cached on disk as PTX.
//! - **Host emulation** ([`emulation`]): the kernel source compiled by the system C++ compiler
//!   against `kernels/host/emulation.h` (CUDA's built-ins, barriers, warp collectives and
//!   atomics on the host; its header says exactly what it models and what not), loaded as a
//!   shared library. Selected with `GS_CUDA_EMULATE=1`; slow, for tests and debugging, never
//!   chosen automatically. It makes every kernel execute in `cargo test` on machines with no
//!   GPU, so a GPU only has to confirm what CI already checks.
//!
//! The emulation never reaches the CUDA driver's code ([`cuda`], the CUDA branches here and in
//! the transfers). A third party does: the CUDA stand-in (`cuda-standin/` in the repository),
//! a `libcuda.so` and `libnvrtc.so` built on the emulation that the CUDA driver loads like the
//! real ones, with lazy streams that run queued work in the most hostile order a GPU could
//! pick (`tools/cuda-standin.sh` runs the device tests against it).
//!
//! # Contract
//! - A [`Device`] is cheap to clone (shared handle). All work on it is ordered: one in-order
//!   queue per device (the CUDA legacy stream; the emulation runs each call to completion).
//!   [`Device::upload`] may return before the copy reaches the device, but after the host slice
//!   may be reused; [`Device::download`] returns when the bytes are on the host, so it also
//!   waits for every earlier launch.
//! - [`DeviceBuffer<T>`] owns `len` elements of device memory and frees it on drop. Fresh
//!   memory holds unspecified bytes on CUDA and `0xFF` bytes (NaN, `u32::MAX`) on the
//!   emulation, so a kernel that reads what nothing wrote is caught there. Only [`Element`]
//!   types (plain numbers, every bit pattern valid) can live in device memory.
//! - A [`Module`] is compiled from a [`ModuleSource`]: the complete source text (headers
//!   already spliced in), its entry points and its `-D` constants. Both drivers compile exactly
//!   that text with the same constants and with floating-point contraction off (NVRTC
//!   `--fmad=false`, C++ `-ffp-contract=off`), so the emulation and the GPU round alike.
//! - [`Device::launch`] is `unsafe`: the argument list must match the kernel's parameters in
//!   order and type, and every buffer must hold what the kernel indexes. The typed launch
//!   functions of each kernel user (e.g. `render::cuda::launch`) check shapes and hold the
//!   `unsafe`.
//! - Uploads that overlap computation go from page-locked host memory ([`PinnedHost`]) on a
//!   [`CopyStream`], ordered by events (the rules are in the `transfer` module's doc:
//!   [`Device::upload_async`], [`Device::wait_copies`], [`PinnedHost::wait`]).
//! - The emulated device has a byte capacity (`GS_EMU_DEVICE_MEMORY`, default 8 GiB) and
//!   [`Device::memory`] reports free bytes against it, so memory preflights and budgets behave
//!   as on a GPU.
//!
//! Environment: `GS_CUDA_EMULATE=1` makes [`Device::from_env`] pick the emulation;
//! `GS_EMU_SEED` varies the emulation's thread interleavings; `GS_EMU_SANITIZE=address`
//! builds emulated kernels with AddressSanitizer (the process must preload the ASan runtime);
//! `GS_KERNEL_CACHE` moves the compiled-kernel cache (PTX and emulation libraries).

pub mod cuda;
pub mod emulation;
mod error;
mod timing;
mod transfer;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;

pub use error::DeviceError;
pub use timing::TimeMark;
pub use transfer::{CopyStream, PinnedHost};

/// Plain numeric types that may live in device memory: `Copy`, no padding, every bit pattern
/// a valid value (so fresh or poisoned device memory can be read back safely).
pub trait Element: Copy + Default + Send + Sync + 'static + private::Sealed {}
impl Element for f32 {}
impl Element for f64 {}
impl Element for u32 {}
impl Element for u64 {}
impl Element for i32 {}
impl Element for u8 {}
mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
    impl Sealed for i32 {}
    impl Sealed for u8 {}
}

/// One kernel parameter, by value. Device pointers come from [`DeviceBuffer::arg`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    Ptr(u64),
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl KernelArg {
    /// The kind code the host emulation checks against the kernel's parameter types
    /// (`ArgKind` in `kernels/host/emulation.h`, same order).
    fn kind(&self) -> u8 {
        match self {
            KernelArg::Ptr(_) => 0,
            KernelArg::U32(_) => 1,
            KernelArg::U64(_) => 2,
            KernelArg::F32(_) => 3,
            KernelArg::F64(_) => 4,
        }
    }
}

/// Grid and block shape of a launch (x, y, z).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
}

impl LaunchConfig {
    /// One thread per element: `ceil(n / block)` blocks of `block` threads (at least one
    /// block, so a kernel that also writes a fixed entry, like a scan's total, still runs).
    /// Refuses more blocks than CUDA's grid.x limit (2³¹ − 1).
    pub fn linear(n: u64, block: u32) -> Result<LaunchConfig, DeviceError> {
        let blocks = n.div_ceil(block.max(1) as u64).max(1);
        let blocks = u32::try_from(blocks)
            .ok()
            .filter(|&b| b <= i32::MAX as u32)
            .ok_or(DeviceError::Launch {
                kernel: "(grid)".into(),
                message: format!("{blocks} blocks of {block} threads exceed CUDA's grid limit"),
            })?;
        Ok(LaunchConfig {
            grid: (blocks, 1, 1),
            block: (block, 1, 1),
        })
    }
}

/// The lib's unit tests run every device check on the host emulation and, when one is usable,
/// on a GPU (`GS_REQUIRE_GPU=1` makes a missing GPU a failure).
#[cfg(test)]
pub(crate) fn test_devices() -> Vec<Device> {
    let mut v = vec![Device::emulated().expect("the host emulation needs a C++ compiler")];
    match Device::cuda() {
        Ok(d) => v.push(d),
        Err(e) => assert!(
            !std::env::var("GS_REQUIRE_GPU").is_ok_and(|v| v == "1"),
            "GS_REQUIRE_GPU=1 but no usable GPU: {e}"
        ),
    }
    v
}

/// What a driver compiles: the full source text, its entry points and `-D` constants.
#[derive(Clone, Debug)]
pub struct ModuleSource {
    /// File-like name for logs and caches, e.g. `rasterize_fwd.cu`.
    pub name: String,
    /// The complete source (no `#include` of anything but what the driver provides).
    pub source: String,
    pub entry_points: Vec<&'static str>,
    pub defines: Vec<(&'static str, String)>,
}

/// A device: a GPU through CUDA, or the host emulation. Cheap to clone.
#[derive(Clone)]
pub struct Device(Arc<Shared>);

/// What every clone of a [`Device`] shares: the driver and the layer's own byte accounting.
struct Shared {
    driver: Driver,
    usage: Usage,
}

/// Bytes of device memory held by live [`DeviceBuffer`]s of one device, and their peak.
///
/// This counts what the program allocated through the layer (the figure PyTorch reports as
/// `max_memory_allocated`), not the driver's own reservations (context, module images, the
/// allocator's rounding), which `nvidia-smi` adds on top.
#[derive(Default)]
struct Usage {
    live: std::sync::atomic::AtomicU64,
    peak: std::sync::atomic::AtomicU64,
}

impl Usage {
    fn add(&self, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let live = self.live.fetch_add(bytes, Relaxed) + bytes;
        self.peak.fetch_max(live, Relaxed);
    }
    fn sub(&self, bytes: u64) {
        self.live
            .fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Bytes of device memory the program holds through the layer (see [`Device::usage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Held by live buffers now.
    pub live: u64,
    /// The most ever held at once since the device was opened (or since
    /// [`Device::reset_peak`]).
    pub peak: u64,
}

enum Driver {
    Cuda(cuda::CudaDriver),
    Emulated(emulation::EmuDriver),
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.name())
    }
}

/// Whether `GS_CUDA_EMULATE=1` is set.
pub fn emulation_requested() -> bool {
    std::env::var("GS_CUDA_EMULATE").is_ok_and(|v| v == "1")
}

impl Device {
    /// The host emulation when `GS_CUDA_EMULATE=1`, otherwise GPU 0 through CUDA.
    pub fn from_env() -> Result<Device, DeviceError> {
        if emulation_requested() {
            Device::emulated()
        } else {
            Device::cuda()
        }
    }

    /// GPU 0 through CUDA; a one-line error (never a panic) without a usable GPU.
    pub fn cuda() -> Result<Device, DeviceError> {
        Ok(Device::wrap(Driver::Cuda(cuda::CudaDriver::probe()?)))
    }

    /// GPU `ordinal` through CUDA (a one-line error without it).
    pub fn cuda_ordinal(ordinal: usize) -> Result<Device, DeviceError> {
        Ok(Device::wrap(Driver::Cuda(cuda::CudaDriver::probe_ordinal(
            ordinal,
        )?)))
    }

    /// `count` devices for a run that spreads its model over several (at least one): `count`
    /// independent emulated devices under `GS_CUDA_EMULATE=1` (each with its own
    /// `GS_EMU_DEVICE_MEMORY` capacity), else GPUs `0..count`.
    pub fn open_many(count: usize) -> Result<Vec<Device>, DeviceError> {
        let count = count.max(1);
        if emulation_requested() {
            return (0..count).map(|_| Device::emulated()).collect();
        }
        let found = cuda::CudaDriver::count();
        if found > 0 && found < count {
            return Err(DeviceError::TooFewDevices {
                wanted: count,
                found,
            });
        }
        (0..count).map(Device::cuda_ordinal).collect()
    }

    /// The host emulation (needs a C++20 compiler).
    pub fn emulated() -> Result<Device, DeviceError> {
        Ok(Device::wrap(Driver::Emulated(emulation::EmuDriver::new()?)))
    }

    fn wrap(driver: Driver) -> Device {
        Device(Arc::new(Shared {
            driver,
            usage: Usage::default(),
        }))
    }

    fn driver(&self) -> &Driver {
        &self.0.driver
    }

    /// Device memory held through this layer: live buffers and their peak. Page-locked host
    /// memory ([`PinnedHost`]) is host memory and not counted.
    pub fn usage(&self) -> MemoryUsage {
        use std::sync::atomic::Ordering::Relaxed;
        MemoryUsage {
            live: self.0.usage.live.load(Relaxed),
            peak: self.0.usage.peak.load(Relaxed),
        }
    }

    /// Starts a new peak from what is held now (e.g. to measure one phase of a run).
    pub fn reset_peak(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.0
            .usage
            .peak
            .store(self.0.usage.live.load(Relaxed), Relaxed);
    }

    pub fn is_emulated(&self) -> bool {
        matches!(self.driver(), Driver::Emulated(_))
    }

    /// The GPU's name, or "host emulation (compiler)".
    pub fn name(&self) -> String {
        match self.driver() {
            Driver::Cuda(d) => d.name.clone(),
            Driver::Emulated(d) => format!("host emulation ({})", d.compiler_name()),
        }
    }

    /// The compile target: `compute_XY` on CUDA, `host` on the emulation.
    pub fn arch(&self) -> String {
        match self.driver() {
            Driver::Cuda(d) => d.arch(),
            Driver::Emulated(_) => "host".to_string(),
        }
    }

    /// The CUDA context, for what the layer does not wrap yet (page-locked host memory).
    pub fn cuda_context(&self) -> Option<Arc<cudarc::driver::CudaContext>> {
        match self.driver() {
            Driver::Cuda(d) => Some(d.ctx.clone()),
            Driver::Emulated(_) => None,
        }
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> Result<(u64, u64), DeviceError> {
        match self.driver() {
            Driver::Cuda(d) => d.memory(),
            Driver::Emulated(d) => Ok(d.memory()),
        }
    }

    /// `len` elements of device memory (at least one element is allocated, so every buffer has
    /// a valid address). The contents are unspecified (see the module doc).
    pub fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>, DeviceError> {
        let bytes = byte_len::<T>(len.max(1))?;
        let addr = match self.driver() {
            Driver::Cuda(d) => d.alloc(bytes)?,
            Driver::Emulated(d) => d.alloc(bytes)?,
        };
        self.0.usage.add(bytes as u64);
        Ok(DeviceBuffer {
            dev: self.clone(),
            addr,
            len,
            bytes,
            _t: PhantomData,
        })
    }

    /// Makes `buf` hold at least `len` elements: reallocated (contents lost) when smaller,
    /// untouched otherwise. Buffers that only grow are how a render or training loop stops
    /// allocating after its first steps.
    ///
    /// The old memory is freed before the new is taken, so a growing buffer never holds both
    /// sizes at once (the memory plans count each buffer once). On failure `buf` is left
    /// empty: length 0, one element allocated, like every buffer.
    pub fn grow<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        len: usize,
    ) -> Result<(), DeviceError> {
        if buf.len < len {
            // The assignment drops the old buffer once the one-element stand-in exists.
            *buf = self.alloc(0)?;
            *buf = self.alloc(len)?;
        }
        Ok(())
    }

    /// Copies `src` into the first `src.len()` elements of `dst`.
    pub fn upload<T: Element>(
        &self,
        src: &[T],
        dst: &mut DeviceBuffer<T>,
    ) -> Result<(), DeviceError> {
        self.upload_at(src, dst, 0)
    }

    /// Copies `src` into elements `offset..offset + src.len()` of `dst`.
    pub fn upload_at<T: Element>(
        &self,
        src: &[T],
        dst: &mut DeviceBuffer<T>,
        offset: usize,
    ) -> Result<(), DeviceError> {
        self.check_owner(dst.dev())?;
        if offset
            .checked_add(src.len())
            .is_none_or(|end| end > dst.len)
        {
            return Err(DeviceError::Copy {
                message: format!(
                    "upload of elements {offset}..{} into a buffer of {}",
                    offset.saturating_add(src.len()),
                    dst.len
                ),
            });
        }
        if src.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::size_of_val(src);
        let addr = dst.addr + (offset * std::mem::size_of::<T>()) as u64;
        // SAFETY: `dst` holds at least `offset + src.len()` elements (checked above) and
        // belongs to this device; `src` is a live slice of `bytes` bytes.
        unsafe {
            match self.driver() {
                Driver::Cuda(d) => d.htod(addr, src.as_ptr().cast(), bytes),
                Driver::Emulated(_) => {
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr().cast::<u8>(),
                        addr as *mut u8,
                        bytes,
                    );
                    Ok(())
                }
            }
        }
    }

    /// Copies the first `dst.len()` elements of `src` to the host; returns when they are there
    /// (after every earlier launch on this device).
    pub fn download<T: Element>(
        &self,
        src: &DeviceBuffer<T>,
        dst: &mut [T],
    ) -> Result<(), DeviceError> {
        self.download_from(src, 0, dst)
    }

    /// Copies elements `offset..offset + dst.len()` of `src` to the host, as [`Self::download`].
    pub fn download_from<T: Element>(
        &self,
        src: &DeviceBuffer<T>,
        offset: usize,
        dst: &mut [T],
    ) -> Result<(), DeviceError> {
        self.check_owner(src.dev())?;
        if offset
            .checked_add(dst.len())
            .is_none_or(|end| end > src.len)
        {
            return Err(DeviceError::Copy {
                message: format!(
                    "download of elements {offset}..{} from a buffer of {}",
                    offset.saturating_add(dst.len()),
                    src.len
                ),
            });
        }
        if dst.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::size_of_val(dst);
        let addr = src.addr + (offset * std::mem::size_of::<T>()) as u64;
        // SAFETY: `src` holds at least `offset + dst.len()` elements (checked above); `dst` is
        // a live, writable slice of `bytes` bytes of an `Element` type, for which any bytes
        // are a valid value.
        unsafe {
            match self.driver() {
                Driver::Cuda(d) => d.dtoh(dst.as_mut_ptr().cast(), addr, bytes),
                Driver::Emulated(_) => {
                    std::ptr::copy_nonoverlapping(
                        addr as *const u8,
                        dst.as_mut_ptr().cast::<u8>(),
                        bytes,
                    );
                    Ok(())
                }
            }
        }
    }

    /// Convenience: downloads `len` elements into a fresh vector.
    pub fn download_vec<T: Element>(
        &self,
        src: &DeviceBuffer<T>,
        len: usize,
    ) -> Result<Vec<T>, DeviceError> {
        let mut v = vec![T::default(); len];
        self.download(src, &mut v)?;
        Ok(v)
    }

    /// Sets the first `len` elements of `buf` to zero bytes.
    pub fn memset_zero<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        len: usize,
    ) -> Result<(), DeviceError> {
        self.check_owner(buf.dev())?;
        if len > buf.len {
            return Err(DeviceError::Copy {
                message: format!("memset of {len} elements in a buffer of {}", buf.len),
            });
        }
        let bytes = len * std::mem::size_of::<T>();
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: `buf` holds at least `bytes` bytes (checked above).
        unsafe {
            match self.driver() {
                Driver::Cuda(d) => d.memset_zero(buf.addr, bytes),
                Driver::Emulated(_) => {
                    std::ptr::write_bytes(buf.addr as *mut u8, 0, bytes);
                    Ok(())
                }
            }
        }
    }

    /// Compiles (or loads from the cache) `src` and resolves every entry point.
    pub fn load_module(&self, src: &ModuleSource) -> Result<Module, DeviceError> {
        let funcs = match self.driver() {
            Driver::Cuda(d) => d
                .load_module(src)?
                .into_iter()
                .map(|(k, f)| (k, Function(FunctionImpl::Cuda(f), k)))
                .collect(),
            Driver::Emulated(d) => d
                .load_module(src)?
                .into_iter()
                .map(|(k, f)| (k, Function(FunctionImpl::Emulated(f), k)))
                .collect(),
        };
        Ok(Module {
            name: src.name.clone(),
            funcs,
        })
    }

    /// Launches `f` on this device.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list in order and type (pointers as
    /// [`KernelArg::Ptr`] of buffers of this device), and every buffer must hold every element
    /// the kernel indexes for this launch shape. `f` must come from a module of this device.
    /// The host emulation refuses a list whose length or kinds (pointer, 32/64-bit integer,
    /// float, double) differ from the kernel's parameters, naming the first mismatch; a GPU
    /// cannot tell, so the tests on the emulation are what enforce the first half of this.
    pub unsafe fn launch(
        &self,
        f: &Function,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<(), DeviceError> {
        let (g, b) = (cfg.grid, cfg.block);
        if g.0 == 0 || g.1 == 0 || g.2 == 0 || b.0 == 0 || b.1 == 0 || b.2 == 0 {
            return Err(DeviceError::Launch {
                kernel: f.1.to_string(),
                message: format!("empty grid {g:?} or block {b:?}"),
            });
        }
        // Every argument is stored in its own 8-byte slot; the kernel reads sizeof(param)
        // bytes from the slot's start (little-endian), as cuLaunchKernel does.
        let mut slots: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                KernelArg::Ptr(p) => p,
                KernelArg::U64(v) => v,
                KernelArg::U32(v) => v as u64,
                KernelArg::F32(v) => v.to_bits() as u64,
                KernelArg::F64(v) => v.to_bits(),
            })
            .collect();
        let mut ptrs: Vec<*mut std::ffi::c_void> =
            slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
        match (self.driver(), &f.0) {
            // SAFETY: forwarded from this function's contract; `ptrs` point into `slots`, which
            // live until the call returns.
            (Driver::Cuda(d), FunctionImpl::Cuda(func)) => unsafe {
                d.launch(func, f.1, cfg, &mut ptrs)
            },
            // SAFETY: as above; the emulation also checks the argument list against the
            // kernel's signature, so a wrong list fails there instead of corrupting silently.
            (Driver::Emulated(d), FunctionImpl::Emulated(func)) => unsafe {
                let kinds: Vec<u8> = args.iter().map(KernelArg::kind).collect();
                d.launch(func, f.1, cfg, &mut ptrs, &kinds)
            },
            _ => Err(DeviceError::Launch {
                kernel: f.1.to_string(),
                message: "the function belongs to a module of another driver".into(),
            }),
        }
    }

    /// On the emulation: how many times each entry point has been launched on this device
    /// (for tests that must execute every kernel); `None` on CUDA.
    pub fn launch_counts(&self) -> Option<HashMap<String, u64>> {
        match self.driver() {
            Driver::Cuda(_) => None,
            Driver::Emulated(d) => Some(d.launch_counts()),
        }
    }

    /// Waits for every queued operation.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        match self.driver() {
            Driver::Cuda(d) => d.synchronize(),
            Driver::Emulated(_) => Ok(()),
        }
    }

    /// `Ok` when `other` is this device: a buffer of another device must reach no copy or
    /// launch here.
    pub(crate) fn check_owner(&self, other: &Device) -> Result<(), DeviceError> {
        if Arc::ptr_eq(&self.0, &other.0) {
            Ok(())
        } else {
            Err(DeviceError::Copy {
                message: "the buffer belongs to another device".into(),
            })
        }
    }

    fn free(&self, addr: u64, bytes: usize) {
        match self.driver() {
            Driver::Cuda(d) => d.free(addr),
            // SAFETY: `free` is called only from DeviceBuffer's drop, with the address and
            // byte count of that buffer's allocation, once.
            Driver::Emulated(d) => unsafe { d.free(addr, bytes) },
        }
        self.0.usage.sub(bytes as u64);
    }
}

/// Host bytes a [`copy_between`] stages at a time: a copy of any size holds at most this much
/// host memory (what a memory-budgeted run can afford), and the chunks amortise each driver
/// call's fixed cost.
pub const STAGING_CHUNK_BYTES: usize = 4 << 20;

/// Copies elements `src_offset..src_offset + len` of `src` into `dst` from `dst_offset`, where
/// the two buffers may live on different devices: through host memory in chunks of at most
/// [`STAGING_CHUNK_BYTES`] (`staging` is the reused host buffer). Returns when the bytes are
/// in `dst`'s device queue (ordered after its earlier work, before its later work).
///
/// Every pair of devices takes the same path, so the emulation tests the one GPUs run. A peer
/// copy (`cuMemcpyPeer`, NVLink) would skip the host; staging is what every driver and
/// topology supports, and what this layer does for now.
pub fn copy_between<T: Element>(
    src: &DeviceBuffer<T>,
    src_offset: usize,
    dst: &mut DeviceBuffer<T>,
    dst_offset: usize,
    len: usize,
    staging: &mut Vec<T>,
) -> Result<(), DeviceError> {
    let out_of = |what: &str, offset: usize, buf_len: usize| DeviceError::Copy {
        message: format!(
            "copy of elements {offset}..{} {what} a buffer of {buf_len}",
            offset.saturating_add(len)
        ),
    };
    if src_offset.checked_add(len).is_none_or(|e| e > src.len) {
        return Err(out_of("from", src_offset, src.len));
    }
    if dst_offset.checked_add(len).is_none_or(|e| e > dst.len) {
        return Err(out_of("into", dst_offset, dst.len));
    }
    if len == 0 {
        return Ok(());
    }
    let chunk = (STAGING_CHUNK_BYTES / std::mem::size_of::<T>()).max(1);
    copy_chunked(src, src_offset, dst, dst_offset, len, staging, chunk)
}

/// [`copy_between`] with `chunk` elements per staged piece (bounds already checked).
fn copy_chunked<T: Element>(
    src: &DeviceBuffer<T>,
    src_offset: usize,
    dst: &mut DeviceBuffer<T>,
    dst_offset: usize,
    len: usize,
    staging: &mut Vec<T>,
    chunk: usize,
) -> Result<(), DeviceError> {
    let mut done = 0;
    while done < len {
        let n = chunk.min(len - done);
        staging.resize(n, T::default());
        src.dev
            .download_from(src, src_offset + done, &mut staging[..n])?;
        let dev = dst.dev.clone();
        dev.upload_at(&staging[..n], dst, dst_offset + done)?;
        done += n;
    }
    Ok(())
}

fn byte_len<T>(len: usize) -> Result<usize, DeviceError> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or(DeviceError::OutOfMemory {
            requested: u64::MAX,
            free: 0,
            total: 0,
        })
}

/// `len` elements of device memory; freed on drop.
pub struct DeviceBuffer<T: Element> {
    dev: Device,
    addr: u64,
    len: usize,
    bytes: usize,
    _t: PhantomData<T>,
}

impl<T: Element> DeviceBuffer<T> {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes allocated (at least one element's worth).
    pub fn num_bytes(&self) -> usize {
        self.bytes
    }
    /// The buffer's device address as a kernel argument.
    pub fn arg(&self) -> KernelArg {
        KernelArg::Ptr(self.addr)
    }
    /// The same address offset by `offset` elements (for a kernel that works on a suffix).
    pub fn arg_at(&self, offset: usize) -> KernelArg {
        debug_assert!(offset <= self.len);
        KernelArg::Ptr(self.addr + (offset * std::mem::size_of::<T>()) as u64)
    }
    pub fn dev(&self) -> &Device {
        &self.dev
    }
}

impl<T: Element> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        self.dev.free(self.addr, self.bytes);
    }
}

impl<T: Element> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>[{}]",
            std::any::type_name::<T>(),
            self.len
        )
    }
}

/// A kernel entry point of a loaded module (keeps its module loaded).
#[derive(Clone)]
pub struct Function(FunctionImpl, &'static str);

#[derive(Clone)]
enum FunctionImpl {
    Cuda(cudarc::driver::CudaFunction),
    Emulated(emulation::EmuFunction),
}

impl Function {
    pub fn name(&self) -> &'static str {
        self.1
    }
}

/// A compiled module's entry points by name.
pub struct Module {
    name: String,
    funcs: HashMap<&'static str, Function>,
}

impl Module {
    pub fn function(&self, entry: &str) -> Result<&Function, DeviceError> {
        self.funcs
            .get(entry)
            .ok_or_else(|| DeviceError::NoEntryPoint {
                module: self.name.clone(),
                entry: entry.to_string(),
            })
    }
}

/// Where compiled kernels are cached: `$GS_KERNEL_CACHE`, else `$XDG_CACHE_HOME/ramsplat`,
/// else `~/.cache/ramsplat`; `None` when none is known (then nothing is cached).
pub(crate) fn cache_root() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("GS_KERNEL_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("ramsplat"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/ramsplat"))
}

#[cfg(test)]
mod tests;
