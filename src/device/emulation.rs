//! The host emulation driver of the device layer: the kernel source of a [`ModuleSource`],
//! unchanged, compiled by the system C++ compiler against `kernels/host/emulation.h` (which
//! documents the execution model: blocks one at a time, each thread a fiber that runs to its
//! next barrier or warp collective in a shuffled order, divergent barriers and collectives
//! reported as errors) and loaded as a shared library.
//!
//! Each module becomes one library, `<cache root>/emu/<name>-<hash>.so`, where the hash covers
//! the source, the header, the flags and the compiler's version, so a changed kernel or
//! compiler never reuses a stale build. The library exports one `gs_emu_launch_<entry>` per
//! entry point, generated here, which unpacks the kernel arguments from the same parameter
//! array `cuLaunchKernel` takes.
//!
//! Device memory is host memory (256-byte aligned, filled with `0xFF` bytes on allocation so
//! reads of unwritten memory surface as NaN / `u32::MAX`), counted against a capacity
//! (`GS_EMU_DEVICE_MEMORY`, default 8 GiB) so allocations beyond it fail like a full GPU.
//! `GS_EMU_SANITIZE=address` compiles the kernels with AddressSanitizer (the process must have
//! the ASan runtime preloaded; host allocations then carry redzones, so an out-of-bounds
//! kernel access aborts with a report).
//!
//! The driver's methods are public so that the CUDA stand-in (`cuda-standin/`, a `libcuda.so`
//! and `libnvrtc.so` built on this emulation) can run the crate's CUDA code path without a
//! GPU. That library is handed kernel arguments the way `cuLaunchKernel` is, as bare `void*`
//! pointers; [`EmuFunction::params`] tells it each parameter's kind and size, generated from
//! the kernel's own signature (`gs_emu_params_<entry>`), so it can copy them at launch time.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{DeviceError, LaunchConfig, ModuleSource};

/// The compatibility header, force-included before every kernel module.
pub const HEADER: &str = include_str!("../../kernels/host/emulation.h");

/// Alignment of emulated device allocations (cudaMalloc guarantees at least 256 bytes).
const ALIGN: usize = 256;

/// Default capacity of the emulated device.
const DEFAULT_CAPACITY: u64 = 8 << 30;

#[repr(C)]
struct EmuLaunchConfig {
    grid: [u32; 3],
    block: [u32; 3],
    seed: u64,
}

type ParamsFn = unsafe extern "C" fn(kinds: *mut u8, sizes: *mut u32, max: usize) -> usize;

type LaunchFn = unsafe extern "C" fn(
    cfg: *const EmuLaunchConfig,
    args: *mut *mut c_void,
    kinds: *const u8,
    nargs: usize,
    err: *mut c_char,
    errlen: usize,
) -> i32;

/// One entry point of a loaded emulation library (keeps the library loaded).
#[derive(Clone)]
pub struct EmuFunction {
    /// Never read: holding it keeps the library (and so `launch`) loaded.
    _lib: Arc<libloading::Library>,
    launch: LaunchFn,
    params: Vec<(u8, u32)>,
}

impl EmuFunction {
    /// The kernel's parameters in order: (kind code, size in bytes). Kind codes are those of
    /// [`super::KernelArg`]: 0 pointer, 1 32-bit integer, 2 64-bit integer, 3 float, 4 double,
    /// 255 a type the device layer cannot pass.
    pub fn params(&self) -> &[(u8, u32)] {
        &self.params
    }
}

/// The function `<prefix><entry>` of an emulation library.
///
/// # Safety
/// The symbol must have the type `F` (a function pointer type), and the result must not
/// outlive `lib`.
unsafe fn symbol<F: Copy>(
    lib: &libloading::Library,
    prefix: &str,
    src: &ModuleSource,
    entry: &str,
) -> Result<F, DeviceError> {
    let sym = format!("{prefix}{entry}\0");
    // SAFETY: the symbol's type is `F` (this function's contract).
    unsafe { lib.get::<F>(sym.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| DeviceError::NoEntryPoint {
            module: src.name.clone(),
            entry: entry.to_string(),
        })
}

/// The host emulation device.
pub struct EmuDriver {
    compiler: String,
    compiler_version: String,
    sanitize: Option<String>,
    seed: u64,
    launches: AtomicU64,
    /// Launches per entry point, for coverage checks ("every kernel ran").
    per_entry: std::sync::Mutex<HashMap<String, u64>>,
    allocated: AtomicU64,
    capacity: u64,
}

impl EmuDriver {
    /// Finds a C++ compiler (`$CXX`, else `c++`, `g++`, `clang++`).
    pub fn new() -> Result<EmuDriver, DeviceError> {
        let mut candidates: Vec<String> = Vec::new();
        if let Ok(cxx) = std::env::var("CXX") {
            candidates.push(cxx);
        }
        candidates.extend(["c++", "g++", "clang++"].map(String::from));
        let mut found = None;
        for c in &candidates {
            if let Ok(out) = Command::new(c).arg("--version").output() {
                if out.status.success() {
                    let v = String::from_utf8_lossy(&out.stdout);
                    found = Some((c.clone(), v.lines().next().unwrap_or("").to_string()));
                    break;
                }
            }
        }
        let (compiler, compiler_version) = found.ok_or_else(|| DeviceError::NoCompiler {
            tried: candidates.join(", "),
        })?;
        let sanitize = std::env::var("GS_EMU_SANITIZE")
            .ok()
            .filter(|s| !s.is_empty());
        let seed = std::env::var("GS_EMU_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let capacity = std::env::var("GS_EMU_DEVICE_MEMORY")
            .ok()
            .and_then(|s| crate::budget::parse_size(&s).ok())
            .unwrap_or(DEFAULT_CAPACITY);
        Ok(EmuDriver {
            compiler,
            compiler_version,
            sanitize,
            seed,
            launches: AtomicU64::new(0),
            per_entry: std::sync::Mutex::new(HashMap::new()),
            allocated: AtomicU64::new(0),
            capacity,
        })
    }

    /// Launches per entry point since this driver was made.
    pub fn launch_counts(&self) -> HashMap<String, u64> {
        self.per_entry.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// The C++ compiler's version line.
    pub fn compiler_name(&self) -> &str {
        &self.compiler_version
    }

    /// (free, total) bytes of the emulated device.
    pub fn memory(&self) -> (u64, u64) {
        let used = self.allocated.load(Ordering::Relaxed);
        (self.capacity.saturating_sub(used), self.capacity)
    }

    /// `bytes` of emulated device memory (256-byte aligned, filled with `0xFF`); release it
    /// with [`EmuDriver::free`] and the same byte count.
    pub fn alloc(&self, bytes: usize) -> Result<u64, DeviceError> {
        let b = bytes as u64;
        // The layout first: nothing is counted for an allocation that cannot be made.
        let layout = std::alloc::Layout::from_size_align(bytes, ALIGN).map_err(|_| {
            DeviceError::OutOfMemory {
                requested: b,
                free: 0,
                total: self.capacity,
            }
        })?;
        let prev = self.allocated.fetch_add(b, Ordering::Relaxed);
        if prev.saturating_add(b) > self.capacity {
            self.allocated.fetch_sub(b, Ordering::Relaxed);
            return Err(DeviceError::OutOfMemory {
                requested: b,
                free: self.capacity.saturating_sub(prev),
                total: self.capacity,
            });
        }
        // SAFETY: `layout` has a non-zero size (callers allocate at least one element).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            self.allocated.fetch_sub(b, Ordering::Relaxed);
            return Err(DeviceError::OutOfMemory {
                requested: b,
                free: self.capacity.saturating_sub(prev),
                total: self.capacity,
            });
        }
        // SAFETY: `p` is a fresh allocation of `bytes` bytes. The poison makes reads of
        // memory that no kernel or copy wrote visible (NaN floats, all-ones integers).
        unsafe { std::ptr::write_bytes(p, 0xFF, bytes) };
        Ok(p as u64)
    }

    /// Releases an allocation of [`EmuDriver::alloc`].
    ///
    /// # Safety
    /// `addr` must come from `alloc` on this driver with this very `bytes`, be freed once, and
    /// no kernel or copy may use it afterwards.
    pub unsafe fn free(&self, addr: u64, bytes: usize) {
        if let Ok(layout) = std::alloc::Layout::from_size_align(bytes, ALIGN) {
            // SAFETY: `addr` came from `alloc` with this very layout and is freed once (this
            // function's contract; DeviceBuffer keeps the byte count and frees in its drop).
            unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
            self.allocated.fetch_sub(bytes as u64, Ordering::Relaxed);
        }
    }

    fn flags(&self, src: &ModuleSource) -> Vec<String> {
        let mut f: Vec<String> = [
            "-std=c++20",
            "-fPIC",
            "-shared",
            "-pthread",
            // Same rounding as NVRTC with --fmad=false and as Rust: no contraction.
            "-ffp-contract=off",
            "-fno-fast-math",
            "-fno-strict-aliasing",
        ]
        .map(String::from)
        .to_vec();
        match self.sanitize.as_deref() {
            Some(s) => {
                f.push(format!("-fsanitize={s}"));
                f.push("-fno-omit-frame-pointer".into());
                f.push("-O1".into());
                f.push("-g".into());
            }
            None => f.push("-O2".into()),
        }
        for (n, v) in &src.defines {
            f.push(format!("-D{n}={v}"));
        }
        f
    }

    /// The translation unit the compiler sees: header, the module's source (with a `#line` so
    /// diagnostics name the kernel file), and the generated launch wrappers.
    fn translation_unit(src: &ModuleSource) -> String {
        let mut t = String::with_capacity(HEADER.len() + src.source.len() + 1024);
        t.push_str(HEADER);
        t.push_str(&format!("\n#line 1 \"{}\"\n", src.name));
        t.push_str(&src.source);
        t.push_str("\n// ---- generated by src/device/emulation.rs ----\n");
        for e in &src.entry_points {
            t.push_str(&format!(
                "extern \"C\" __attribute__((visibility(\"default\"))) size_t gs_emu_params_{e}(\
                 unsigned char* kinds, unsigned* sizes, size_t max) {{\n\
                 \x20   return gs_emu::describe({e}, kinds, sizes, max);\n}}\n"
            ));
            t.push_str(&format!(
                "extern \"C\" __attribute__((visibility(\"default\"))) int gs_emu_launch_{e}(\
                 const gs_emu::LaunchConfig* c, void** args, const unsigned char* kinds, \
                 size_t nargs, char* err, size_t errlen) {{\n\
                 \x20   return gs_emu::launch(\"{e}\", {e}, c, args, kinds, nargs, err, errlen);\n}}\n"
            ));
        }
        t
    }

    /// Compiles `src` (or finds it in the cache) and loads its entry points.
    pub fn load_module(
        &self,
        src: &ModuleSource,
    ) -> Result<HashMap<&'static str, EmuFunction>, DeviceError> {
        let tu = Self::translation_unit(src);
        let flags = self.flags(src);
        let mut key = tu.clone();
        key.push('\0');
        key.push_str(&self.compiler);
        key.push('\0');
        key.push_str(&self.compiler_version);
        for f in &flags {
            key.push('\0');
            key.push_str(f);
        }
        let hash = xxhash_rust::xxh3::xxh3_64(key.as_bytes());
        let stem = format!(
            "{}-{hash:016x}{}",
            src.name.trim_end_matches(".cu"),
            self.sanitize
                .as_deref()
                .map(|s| format!("-{s}"))
                .unwrap_or_default()
        );
        let dir = super::cache_root()
            .unwrap_or_else(std::env::temp_dir)
            .join("emu");
        let lib_path = dir.join(format!("{stem}.so"));
        if !lib_path.exists() {
            self.compile(src, &tu, &flags, &dir, &stem)?;
        }
        // SAFETY: the library is our own build of kernel code; loading runs only the C++
        // runtime's static initialisers (the header's globals are trivially initialised).
        let lib =
            unsafe { libloading::Library::new(&lib_path) }.map_err(|e| DeviceError::Load {
                path: lib_path.display().to_string(),
                message: e.to_string(),
            })?;
        let lib = Arc::new(lib);
        let mut funcs = HashMap::new();
        for &e in &src.entry_points {
            // SAFETY: `translation_unit` generates `gs_emu_launch_<e>` with exactly the
            // `LaunchFn` signature; the pointer is kept together with the library.
            let f: LaunchFn = unsafe { symbol(&lib, "gs_emu_launch_", src, e) }?;
            // SAFETY: as above, `gs_emu_params_<e>` with exactly the `ParamsFn` signature.
            let describe: ParamsFn = unsafe { symbol(&lib, "gs_emu_params_", src, e) }?;
            let (mut kinds, mut sizes) = ([0u8; 64], [0u32; 64]);
            // SAFETY: both arrays hold `max` = 64 writable entries.
            let n = unsafe { describe(kinds.as_mut_ptr(), sizes.as_mut_ptr(), 64) };
            if n > 64 {
                return Err(DeviceError::Load {
                    path: lib_path.display().to_string(),
                    message: format!("{e} has {n} parameters, more than the 64 supported"),
                });
            }
            let params = kinds[..n]
                .iter()
                .copied()
                .zip(sizes[..n].iter().copied())
                .collect();
            funcs.insert(
                e,
                EmuFunction {
                    _lib: lib.clone(),
                    launch: f,
                    params,
                },
            );
        }
        Ok(funcs)
    }

    fn compile(
        &self,
        src: &ModuleSource,
        tu: &str,
        flags: &[String],
        dir: &Path,
        stem: &str,
    ) -> Result<(), DeviceError> {
        let io = |e: std::io::Error| DeviceError::Load {
            path: dir.display().to_string(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        // Unique per process and call: parallel tests may build the same module at once.
        // The compiler goes by the extension, so the temporaries keep theirs.
        let tmp = crate::fsutil::unique_tmp_path(dir, stem);
        let cpp: PathBuf = tmp.with_extension("cpp");
        let tmp_lib: PathBuf = tmp.with_extension("so");
        std::fs::write(&cpp, tu).map_err(io)?;
        let mut cmd = Command::new(&self.compiler);
        cmd.args(flags).arg("-o").arg(&tmp_lib).arg(&cpp);
        let shown = format!(
            "{} {} -o {} {}",
            self.compiler,
            flags.join(" "),
            tmp_lib.display(),
            cpp.display()
        );
        let out = cmd.output().map_err(|e| DeviceError::HostCompile {
            module: src.name.clone(),
            command: shown.clone(),
            log: e.to_string(),
        });
        let _ = std::fs::remove_file(&cpp);
        let out = out?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&tmp_lib);
            return Err(DeviceError::HostCompile {
                module: src.name.clone(),
                command: shown,
                log: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        crate::fsutil::install(&tmp_lib, &dir.join(format!("{stem}.so"))).map_err(io)
    }

    /// Runs `f` over the grid; returns when every block has finished.
    ///
    /// # Safety
    /// As [`super::Device::launch`]: `params[i]` points to the value of parameter `i`, whose
    /// kind is `kinds[i]`.
    pub unsafe fn launch(
        &self,
        f: &EmuFunction,
        name: &str,
        cfg: LaunchConfig,
        params: &mut [*mut c_void],
        kinds: &[u8],
    ) -> Result<(), DeviceError> {
        debug_assert_eq!(params.len(), kinds.len());
        let n = self.launches.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.per_entry.lock() {
            *m.entry(name.to_string()).or_default() += 1;
        }
        let c = EmuLaunchConfig {
            grid: [cfg.grid.0, cfg.grid.1, cfg.grid.2],
            block: [cfg.block.0, cfg.block.1, cfg.block.2],
            seed: self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        };
        let mut err = vec![0u8; 2048];
        // SAFETY: `f.launch` is a `gs_emu_launch_*` wrapper of a loaded library (kept alive by
        // `f._lib`); it reads `params` only after checking their number and kinds (`kinds`
        // holds one entry per parameter pointer) against the kernel's signature; `err` is a
        // writable buffer of the stated length.
        let rc = unsafe {
            (f.launch)(
                &c,
                params.as_mut_ptr(),
                kinds.as_ptr(),
                kinds.len(),
                err.as_mut_ptr().cast(),
                err.len(),
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let end = err.iter().position(|&b| b == 0).unwrap_or(err.len());
        Err(DeviceError::Kernel {
            kernel: name.to_string(),
            seed: self.seed,
            message: String::from_utf8_lossy(&err[..end]).into_owned(),
        })
    }
}
