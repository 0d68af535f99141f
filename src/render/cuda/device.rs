//! Device probe and the on-disk PTX cache.
//!
//! [`probe`] never panics: it checks that the driver and NVRTC libraries can be loaded
//! (`is_culib_present`, before any other cudarc call, because cudarc panics on a missing
//! library), then that the driver sees a GPU, and returns a one-line [`CudaError`] otherwise,
//! which `--backend auto` prints before falling back to the CPU.
//!
//! Compiled PTX is cached on disk keyed by kernel, source+options hash, architecture, NVRTC
//! version and driver version (`$GS_KERNEL_CACHE`, else `$XDG_CACHE_HOME/ramsplat/ptx`, else
//! `~/.cache/ramsplat/ptx`); files are written to a temp name and renamed, so a crash never
//! leaves a truncated entry under a valid name. The cache is only an accelerator: an
//! unreadable or unwritable cache directory falls back to compiling.

use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;

use super::kernels::{self, Kernel};
use super::CudaError;

/// A usable GPU: context, the stream all work goes to, and what the cache key needs.
#[derive(Debug, Clone)]
pub struct CudaDevice {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: i32,
}

/// Finds GPU 0, or says in one line why there is none.
pub fn probe() -> Result<CudaDevice, CudaError> {
    // SAFETY: `is_culib_present` only tries to dlopen candidate names and closes them again;
    // it has no precondition and calls nothing in the library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CudaError::NoDriver);
    }
    kernels::nvrtc_available()?;
    cudarc::driver::result::init().map_err(|e| CudaError::driver("cuInit", e))?;
    let count =
        CudaContext::device_count().map_err(|e| CudaError::driver("cuDeviceGetCount", e))?;
    if count < 1 {
        return Err(CudaError::NoDevice);
    }
    let ctx = CudaContext::new(0).map_err(|e| CudaError::driver("cuCtxCreate", e))?;
    let name = ctx
        .name()
        .map_err(|e| CudaError::driver("cuDeviceGetName", e))?;
    let compute_capability = ctx
        .compute_capability()
        .map_err(|e| CudaError::driver("cuDeviceGetAttribute", e))?;
    let mut driver_version: std::ffi::c_int = 0;
    // SAFETY: the driver library is loaded (checked above) and `driver_version` is a valid,
    // writable c_int for the duration of the call.
    let rc = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) };
    rc.result()
        .map_err(|e| CudaError::driver("cuDriverGetVersion", e))?;
    let stream = ctx.default_stream();
    Ok(CudaDevice {
        ctx,
        stream,
        name,
        compute_capability,
        driver_version,
    })
}

impl CudaDevice {
    /// The NVRTC virtual architecture for this GPU, e.g. `compute_90`.
    pub fn arch(&self) -> String {
        let (ma, mi) = self.compute_capability;
        format!("compute_{ma}{mi}")
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize), CudaError> {
        self.ctx
            .mem_get_info()
            .map_err(|e| CudaError::driver("cuMemGetInfo", e))
    }

    /// The loaded module of `kernel` on this device, from the disk cache when an entry exists
    /// and loads, else compiled, loaded and cached. A cached entry that the driver refuses
    /// (truncated by a full disk, written by another driver, hand-edited) is recompiled and
    /// replaced, never trusted twice.
    pub fn load_module(&self, kernel: Kernel) -> Result<Arc<CudaModule>, CudaError> {
        let arch = self.arch();
        let nvrtc = kernels::nvrtc_version()?;
        let hash = kernels::source_hash(kernel, &arch, nvrtc)?;
        let file = format!(
            "{}-{arch}-nvrtc{}.{}-drv{}-{hash:016x}.ptx",
            kernel.file_name().trim_end_matches(".cu"),
            nvrtc.0,
            nvrtc.1,
            self.driver_version
        );
        let dir = cache_dir();
        if let Some(dir) = &dir {
            if let Ok(ptx) = std::fs::read_to_string(dir.join(&file)) {
                if ptx.contains(".entry") {
                    if let Ok(m) = self.ctx.load_module(Ptx::from_src(ptx)) {
                        return Ok(m);
                    }
                }
            }
        }
        let ptx = kernels::compile(kernel, &arch)?;
        let module = self
            .ctx
            .load_module(Ptx::from_src(ptx.clone()))
            .map_err(|e| CudaError::driver("cuModuleLoadData", e))?;
        if let Some(dir) = dir {
            // Best effort: a read-only home must not stop rendering.
            let _ = write_atomically(&dir, &file, &ptx);
        }
        Ok(module)
    }
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("GS_KERNEL_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("ramsplat/ptx"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/ramsplat/ptx"))
}

fn write_atomically(dir: &std::path::Path, file: &str, text: &str) -> std::io::Result<()> {
    // Unique per process *and* per call: parity tests compile the same kernels from several
    // threads of one process at once, and two writers must never share a temp file.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{file}.{}-{seq}.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, dir.join(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_never_panics() {
        // On a machine without a driver this is an error value with a one-line message; on a
        // GPU machine it is a device. Either way, no panic.
        match probe() {
            Ok(d) => assert!(d.arch().starts_with("compute_")),
            Err(e) => {
                assert!(!e.to_string().contains('\n'), "{e}");
                assert!(
                    !std::env::var("GS_REQUIRE_GPU").is_ok_and(|v| v == "1"),
                    "GS_REQUIRE_GPU=1 but no usable GPU: {e}"
                );
            }
        }
    }

    #[test]
    fn cache_writes_atomically() {
        let dir = tempfile::tempdir().unwrap();
        write_atomically(dir.path(), "a.ptx", ".entry x").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.ptx")).unwrap(),
            ".entry x"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "temp file left behind");
    }
}
