//! The CUDA driver of the device layer: a real GPU through the CUDA driver API (cudarc), with
//! kernels compiled at run time by NVRTC.
//!
//! [`CudaDriver::probe`] never panics: it checks that the driver and NVRTC libraries can be
//! loaded (`is_culib_present`, before any other cudarc call, because cudarc panics on a missing
//! library), then that the driver sees a GPU, and returns a one-line [`DeviceError`] otherwise.
//!
//! Compiled PTX is cached on disk (`<cache root>/ptx`, see `device::cache_root`) keyed by
//! module, a hash of source + options, architecture, NVRTC version and driver version; entries
//! are written under a unique temporary name and renamed, so a crash never leaves a truncated
//! entry under a valid name, and an entry the driver refuses to load is recompiled and
//! replaced. The cache is only an accelerator: an unusable cache directory means compiling.
//!
//! Memory and launches use the driver API directly (`cuMemAlloc`, `cuMemcpy*Async`,
//! `cuLaunchKernel`) on the context's legacy default stream, so every operation is ordered
//! after the previous one; the context is made current on the calling thread first.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::Ptx;

use super::{DeviceError, LaunchConfig, ModuleSource};

/// Architectures the CI compile test covers (Ampere and Hopper, the project's GPU machines).
pub const CI_ARCHES: [&str; 2] = ["compute_80", "compute_90"];

/// A usable GPU: context, the stream all work goes to, and what the cache key needs.
pub struct CudaDriver {
    pub(super) ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    pub(super) name: String,
    /// Compute capability (major, minor).
    compute_capability: (i32, i32),
    /// `cuDriverGetVersion`, e.g. 13000.
    driver_version: i32,
}

impl CudaDriver {
    /// Finds GPU 0, or says in one line why there is none.
    pub fn probe() -> Result<CudaDriver, DeviceError> {
        CudaDriver::probe_ordinal(0)
    }

    /// GPUs the driver reports (0 without a driver or GPU; never panics).
    pub fn count() -> usize {
        // SAFETY: as in `probe_ordinal`: only tries to dlopen the library.
        if !unsafe { sys::is_culib_present() } || result::init().is_err() {
            return 0;
        }
        CudaContext::device_count().map_or(0, |c| c.max(0) as usize)
    }

    /// Finds GPU `ordinal`, or says in one line why there is none.
    pub fn probe_ordinal(ordinal: usize) -> Result<CudaDriver, DeviceError> {
        // SAFETY: `is_culib_present` only tries to dlopen candidate names and closes them
        // again; it has no precondition and calls nothing in the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(DeviceError::NoDriver);
        }
        nvrtc_available()?;
        result::init().map_err(|e| DeviceError::driver("cuInit", e))?;
        let count =
            CudaContext::device_count().map_err(|e| DeviceError::driver("cuDeviceGetCount", e))?;
        if count < 1 {
            return Err(DeviceError::NoDevice);
        }
        if ordinal >= count as usize {
            return Err(DeviceError::TooFewDevices {
                wanted: ordinal + 1,
                found: count as usize,
            });
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| DeviceError::driver("cuCtxCreate", e))?;
        let name = ctx
            .name()
            .map_err(|e| DeviceError::driver("cuDeviceGetName", e))?;
        let compute_capability = ctx
            .compute_capability()
            .map_err(|e| DeviceError::driver("cuDeviceGetAttribute", e))?;
        let mut driver_version: std::ffi::c_int = 0;
        // SAFETY: the driver library is loaded (checked above) and `driver_version` is a
        // valid, writable c_int for the duration of the call.
        let rc = unsafe { sys::cuDriverGetVersion(&mut driver_version) };
        rc.result()
            .map_err(|e| DeviceError::driver("cuDriverGetVersion", e))?;
        let stream = ctx.default_stream();
        Ok(CudaDriver {
            ctx,
            stream,
            name,
            compute_capability,
            driver_version,
        })
    }

    /// The NVRTC virtual architecture for this GPU, e.g. `compute_90`.
    pub fn arch(&self) -> String {
        let (ma, mi) = self.compute_capability;
        format!("compute_{ma}{mi}")
    }

    fn bind(&self) -> Result<(), DeviceError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| DeviceError::driver("cuCtxSetCurrent", e))
    }

    pub(super) fn memory(&self) -> Result<(u64, u64), DeviceError> {
        let (free, total) = self
            .ctx
            .mem_get_info()
            .map_err(|e| DeviceError::driver("cuMemGetInfo", e))?;
        Ok((free as u64, total as u64))
    }

    pub(super) fn alloc(&self, bytes: usize) -> Result<u64, DeviceError> {
        self.bind()?;
        // SAFETY: the context is current on this thread; the returned pointer is owned by the
        // caller's DeviceBuffer, which frees it exactly once.
        unsafe { result::malloc_sync(bytes) }.map_err(|e| DeviceError::driver("cuMemAlloc", e))
    }

    pub(super) fn free(&self, addr: u64) {
        if self.bind().is_ok() {
            // SAFETY: `addr` came from `alloc` on this context and is freed once (DeviceBuffer's
            // drop). Work queued on the legacy stream that still uses it completes first:
            // cuMemFree synchronises with the device. An error here cannot be reported from a
            // drop; the memory is then reclaimed with the context.
            let _ = unsafe { result::free_sync(addr) };
        }
    }

    /// # Safety
    /// `dst` must hold `bytes` bytes of this context's memory; `src` must be readable for
    /// `bytes` bytes. From pageable memory the call returns once the source has been staged,
    /// so the host slice may be reused right after.
    pub(super) unsafe fn htod(
        &self,
        dst: u64,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        // SAFETY: forwarded from the caller; on the main queue, whose order every later
        // operation follows.
        unsafe { self.htod_on(self.stream.cu_stream(), dst, src, bytes) }
    }

    /// # Safety
    /// `src` must hold `bytes` bytes of this context's memory; `dst` must be writable for
    /// `bytes` bytes.
    pub(super) unsafe fn dtoh(
        &self,
        dst: *mut u8,
        src: u64,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        self.bind()?;
        // SAFETY: `dst` is writable for `bytes` bytes (the caller's contract).
        let host = unsafe { std::slice::from_raw_parts_mut(dst, bytes) };
        // SAFETY: `src` holds `bytes` bytes of this context (the caller's contract); the stream
        // is synchronised before returning, so the host bytes are complete and no longer
        // written when the slice goes back to the caller.
        unsafe { result::memcpy_dtoh_async(host, src, self.stream.cu_stream()) }
            .map_err(|e| DeviceError::driver("cuMemcpyDtoHAsync", e))?;
        self.synchronize()
    }

    /// # Safety
    /// `dst` must hold `bytes` bytes of this context's memory.
    pub(super) unsafe fn memset_zero(&self, dst: u64, bytes: usize) -> Result<(), DeviceError> {
        self.bind()?;
        // SAFETY: forwarded from the caller.
        unsafe { result::memset_d8_async(dst, 0, bytes, self.stream.cu_stream()) }
            .map_err(|e| DeviceError::driver("cuMemsetD8Async", e))
    }

    pub(super) fn synchronize(&self) -> Result<(), DeviceError> {
        self.bind()?;
        self.stream
            .synchronize()
            .map_err(|e| DeviceError::driver("cuStreamSynchronize", e))
    }

    /// # Safety
    /// As [`super::Device::launch`]; `params` point to the argument values.
    pub(super) unsafe fn launch(
        &self,
        f: &CudaFunction,
        name: &str,
        cfg: LaunchConfig,
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<(), DeviceError> {
        self.bind()?;
        let (g, b) = (cfg.grid, cfg.block);
        // SAFETY: forwarded from the caller's contract (argument list matches the kernel,
        // buffers large enough); the function belongs to this context.
        unsafe { result::launch_kernel(f.cu_function(), g, b, 0, self.stream.cu_stream(), params) }
            .map_err(|e| DeviceError::Launch {
                kernel: name.to_string(),
                message: format!("{e:?}"),
            })
    }

    /// Page-locked host memory (`cuMemHostAlloc`, flags 0: cached, not write-combined, since
    /// the loader's decoders read back what they write).
    pub(super) fn alloc_pinned(&self, bytes: usize) -> Result<*mut u8, DeviceError> {
        self.bind()?;
        // SAFETY: the context is current; the pointer is owned by the caller's PinnedHost,
        // which frees it exactly once with `free_pinned`.
        unsafe { result::malloc_host(bytes, 0) }
            .map(|p| p.cast::<u8>())
            .map_err(|e| DeviceError::driver("cuMemHostAlloc", e))
    }

    pub(super) fn free_pinned(&self, p: *mut u8) {
        if self.bind().is_ok() {
            // SAFETY: `p` came from `alloc_pinned` on this context and is freed once; the
            // caller waited for the last copy from it.
            let _ = unsafe { result::free_host(p.cast()) };
        }
    }

    /// A stream that does not synchronise implicitly with the legacy default stream (the main
    /// queue), so copies on it overlap kernels; ordering is by events only.
    pub(super) fn create_stream(&self) -> Result<sys::CUstream, DeviceError> {
        self.bind()?;
        result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| DeviceError::driver("cuStreamCreate", e))
    }

    pub(super) fn destroy_stream(&self, s: sys::CUstream) {
        if self.bind().is_ok() {
            // SAFETY: `s` came from `create_stream` and is destroyed once (CopyStream's drop);
            // work still queued on it completes first (cuStreamDestroy semantics).
            let _ = unsafe { result::stream::destroy(s) };
        }
    }

    /// Records a fresh event on `stream` (null: the main queue).
    pub(super) fn record(&self, stream: sys::CUstream) -> Result<sys::CUevent, DeviceError> {
        self.record_with(stream, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
    }

    /// Records a fresh timing event on the main queue (the only kind
    /// [`Self::elapsed_ms`] measures between).
    pub(super) fn record_timed(&self) -> Result<sys::CUevent, DeviceError> {
        self.record_with(std::ptr::null_mut(), sys::CUevent_flags::CU_EVENT_DEFAULT)
    }

    /// Milliseconds between two timing events of the main queue, `start` recorded first;
    /// waits for `end`.
    pub(super) fn elapsed_ms(
        &self,
        start: sys::CUevent,
        end: sys::CUevent,
    ) -> Result<f32, DeviceError> {
        self.event_synchronize(end)?;
        // SAFETY: both are live timing events of this context (`record_timed`), recorded on
        // the main queue, `end` completed (just waited for) and so `start` before it.
        unsafe { result::event::elapsed(start, end) }
            .map_err(|e| DeviceError::driver("cuEventElapsedTime", e))
    }

    fn record_with(
        &self,
        stream: sys::CUstream,
        flags: sys::CUevent_flags,
    ) -> Result<sys::CUevent, DeviceError> {
        self.bind()?;
        let ev =
            result::event::create(flags).map_err(|e| DeviceError::driver("cuEventCreate", e))?;
        let main = self.stream.cu_stream();
        let target = if stream.is_null() { main } else { stream };
        // SAFETY: `ev` was just created on this context; `target` is a live stream of it.
        if let Err(e) = unsafe { result::event::record(ev, target) } {
            self.destroy_event(ev);
            return Err(DeviceError::driver("cuEventRecord", e));
        }
        Ok(ev)
    }

    /// Makes `stream` (null: the main queue) wait for `ev` on the device.
    pub(super) fn stream_wait(
        &self,
        stream: sys::CUstream,
        ev: sys::CUevent,
    ) -> Result<(), DeviceError> {
        self.bind()?;
        let target = if stream.is_null() {
            self.stream.cu_stream()
        } else {
            stream
        };
        // SAFETY: both handles are live objects of this context.
        unsafe {
            result::stream::wait_event(target, ev, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        }
        .map_err(|e| DeviceError::driver("cuStreamWaitEvent", e))
    }

    pub(super) fn event_synchronize(&self, ev: sys::CUevent) -> Result<(), DeviceError> {
        self.bind()?;
        // SAFETY: `ev` is a live event of this context.
        unsafe { result::event::synchronize(ev) }
            .map_err(|e| DeviceError::driver("cuEventSynchronize", e))
    }

    pub(super) fn destroy_event(&self, ev: sys::CUevent) {
        if self.bind().is_ok() {
            // SAFETY: `ev` is destroyed once; a stream still waiting on it keeps what it
            // needs (cuEventDestroy releases the resources when the wait completes).
            let _ = unsafe { result::event::destroy(ev) };
        }
    }

    /// # Safety
    /// `dst` must hold `bytes` bytes of this context's memory; `src` must be readable for
    /// `bytes` bytes and, when it is page-locked (the copy is then truly asynchronous), not
    /// written until the copy has completed (an event recorded after it).
    pub(super) unsafe fn htod_on(
        &self,
        stream: sys::CUstream,
        dst: u64,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        self.bind()?;
        // SAFETY: `src` is readable for `bytes` bytes (the caller's contract).
        let host = unsafe { std::slice::from_raw_parts(src, bytes) };
        // SAFETY: the caller's contract: `dst` holds `bytes` bytes, `src` stays untouched
        // until the copy completes.
        unsafe { result::memcpy_htod_async(dst, host, stream) }
            .map_err(|e| DeviceError::driver("cuMemcpyHtoDAsync", e))
    }

    /// The module's entry points, from the disk cache when an entry exists and loads, else
    /// compiled, loaded and cached.
    pub(super) fn load_module(
        &self,
        src: &ModuleSource,
    ) -> Result<HashMap<&'static str, CudaFunction>, DeviceError> {
        let arch = self.arch();
        let nvrtc = nvrtc_version()?;
        let hash = source_hash(src, &arch, nvrtc);
        let file = format!(
            "{}-{arch}-nvrtc{}.{}-drv{}-{hash:016x}.ptx",
            src.name.trim_end_matches(".cu"),
            nvrtc.0,
            nvrtc.1,
            self.driver_version
        );
        let dir = super::cache_root().map(|d| d.join("ptx"));
        let mut module = None;
        if let Some(dir) = &dir {
            if let Ok(ptx) = crate::fsutil::read_file_to_string(&dir.join(&file)) {
                if ptx.contains(".entry") {
                    module = self.ctx.load_module(Ptx::from_src(ptx)).ok();
                }
            }
        }
        let module = match module {
            Some(m) => m,
            None => {
                let ptx = compile_ptx(src, &arch)?;
                let m = self
                    .ctx
                    .load_module(Ptx::from_src(ptx.clone()))
                    .map_err(|e| load_error(e, nvrtc, self.driver_version))?;
                if let Some(dir) = dir {
                    // Best effort: a read-only home must not stop rendering.
                    let _ = crate::fsutil::write_cache_entry(&dir, &file, ptx.as_bytes());
                }
                m
            }
        };
        let mut funcs = HashMap::new();
        for &e in &src.entry_points {
            let f = module
                .load_function(e)
                .map_err(|err| DeviceError::driver("cuModuleGetFunction", err))?;
            funcs.insert(e, f);
        }
        Ok(funcs)
    }
}

/// Whether the NVRTC shared library can be loaded. Must be checked before any cudarc NVRTC
/// call: cudarc panics (instead of returning an error) when the library is missing.
pub fn nvrtc_available() -> Result<(), DeviceError> {
    // SAFETY: `is_culib_present` only tries `dlopen` on candidate library names and drops the
    // handles; it calls no function from the library and has no precondition.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(DeviceError::NoNvrtc)
    }
}

/// NVRTC's (major, minor) version. Checks [`nvrtc_available`] first.
pub fn nvrtc_version() -> Result<(i32, i32), DeviceError> {
    nvrtc_available()?;
    let (mut major, mut minor): (std::ffi::c_int, std::ffi::c_int) = (0, 0);
    // SAFETY: the library is loaded (checked above); both pointers are valid, writable c_ints
    // for the duration of the call.
    let rc = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    rc.result().map_err(|e| DeviceError::Compile {
        module: "(nvrtcVersion)".into(),
        arch: String::new(),
        status: format!("{e:?}"),
        log: String::new(),
    })?;
    Ok((major, minor))
}

/// Why `cuModuleLoadData` refused a module NVRTC `nvrtc` compiled, on a driver of CUDA
/// version `driver` (`cuDriverGetVersion`'s 1000·major + 10·minor). PTX carries the ISA version
/// of the NVRTC that wrote it, and a driver loads no newer ISA than its own CUDA version: the
/// usual cause is an NVRTC wheel newer than the driver, which gets its own error saying so.
fn load_error(e: cudarc::driver::DriverError, nvrtc: (i32, i32), driver: i32) -> DeviceError {
    if e.0 == sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION {
        DeviceError::PtxTooNew {
            nvrtc: format!("{}.{}", nvrtc.0, nvrtc.1),
            driver: format!("{}.{}", driver / 1000, driver % 1000 / 10),
        }
    } else {
        DeviceError::driver("cuModuleLoadData", e)
    }
}

/// The full NVRTC option list for `arch` (e.g. `"compute_80"`). The architecture is always
/// explicit: NVRTC's default changes between releases. `-default-device` spares writing
/// `__device__` on the helpers. `--fmad=false`: NVRTC would otherwise contract `a·b + c` into
/// fused multiply-adds, which neither Rust nor the host emulation does, so depths, screen
/// positions, radii and σ would round differently from the CPU oracle and flip the discrete
/// decisions (radius ceil, α ≥ 1/255, T ≥ 1e-4) that the parity tests compare exactly.
pub fn compile_options(src: &ModuleSource, arch: &str) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
        "--fmad=false".to_string(),
    ];
    for (n, v) in &src.defines {
        o.push(format!("-D{n}={v}"));
    }
    o
}

/// Compiles `src` for `arch` to PTX text. On failure the error carries NVRTC's log verbatim.
/// Checks [`nvrtc_available`] first, so it never panics for a missing library.
pub fn compile_ptx(src: &ModuleSource, arch: &str) -> Result<String, DeviceError> {
    nvrtc_available()?;
    let opts = cudarc::nvrtc::CompileOptions {
        options: compile_options(src, arch),
        name: Some(src.name.clone()),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(&src.source, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(cudarc::nvrtc::CompileError::CompileError { nvrtc, log, .. }) => {
            Err(DeviceError::Compile {
                module: src.name.clone(),
                arch: arch.to_string(),
                status: format!("{nvrtc:?}"),
                log: log.to_string_lossy().into_owned(),
            })
        }
        Err(e) => Err(DeviceError::Compile {
            module: src.name.clone(),
            arch: arch.to_string(),
            status: format!("{e:?}"),
            log: String::new(),
        }),
    }
}

/// Hash of everything that determines a module's PTX: source, options and the NVRTC version.
pub fn source_hash(src: &ModuleSource, arch: &str, nvrtc: (i32, i32)) -> u64 {
    let mut h = format!("nvrtc {}.{}\0", nvrtc.0, nvrtc.1);
    h.push_str(&src.source);
    for o in compile_options(src, arch) {
        h.push('\0');
        h.push_str(&o);
    }
    xxhash_rust::xxh3::xxh3_64(h.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver that refuses PTX for its version gets the error that names both versions and
    /// the fix. (Other refusals keep the driver's own message, which only a machine with the
    /// driver library can format.)
    #[test]
    fn a_driver_older_than_nvrtc_is_named() {
        let too_new =
            || cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
        let e = load_error(too_new(), (13, 1), 13000);
        assert!(
            matches!(&e, DeviceError::PtxTooNew { nvrtc, driver } if nvrtc == "13.1" && driver == "13.0"),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("NVRTC 13.1")
                && text.contains("CUDA 13.0 at most")
                && text.contains("nvrtc-setup.sh"),
            "{text}"
        );
        let text = load_error(too_new(), (12, 9), 12080).to_string();
        assert!(text.contains("CUDA 12.8 at most"), "{text}");
    }
}
