//! The NVRTC half of the stand-in: a "compilation" that checks the source with the host
//! emulation's compiler and returns, in place of PTX, a module text the driver half loads:
//!
//! ```text
//! // ramsplat CUDA stand-in module: emulation source, not PTX
//! // name: rasterize_fwd.cu
//! // define: TILE=16
//! .entry rasterize_fwd
//! // source:
//! <the source, verbatim>
//! ```
//!
//! Options are checked as NVRTC would: the architecture must be named, and an option NVRTC
//! does not know is refused (`NVRTC_ERROR_INVALID_OPTION`) with the option in the log.

use std::collections::HashSet;
use std::ffi::{c_char, c_int, CStr};
use std::sync::{Mutex, OnceLock};

use ramsplat::device::emulation::EmuDriver;
use ramsplat::device::ModuleSource;

use crate::MODULE_MAGIC;

type NvrtcResult = c_int;
const NVRTC_SUCCESS: NvrtcResult = 0;
const NVRTC_ERROR_INVALID_INPUT: NvrtcResult = 3;
const NVRTC_ERROR_INVALID_PROGRAM: NvrtcResult = 4;
const NVRTC_ERROR_INVALID_OPTION: NvrtcResult = 5;
const NVRTC_ERROR_COMPILATION: NvrtcResult = 6;
const NVRTC_ERROR_INTERNAL_ERROR: NvrtcResult = 11;

/// One program: what `nvrtcCreateProgram` was given and what compiling it left.
pub struct Program {
    source: String,
    name: String,
    /// The module text, NUL-terminated, once compiled.
    ptx: Option<Vec<u8>>,
    /// The log, NUL-terminated.
    log: Vec<u8>,
}

/// `&'static str`s for the names a [`ModuleSource`] holds (one copy per distinct name).
pub(crate) fn intern(s: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut set = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(&n) = set.get(s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(n);
    n
}

/// The kernels a source defines: every line that starts (after `extern "C"`) with
/// `__global__`, named by the last identifier before its `(` (after a `__launch_bounds__(…)`),
/// which may begin the next line.
fn entry_points(source: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    let lines: Vec<&str> = source.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let l = line.trim_start();
        let l = l.strip_prefix("extern \"C\"").map_or(l, str::trim_start);
        let Some(mut rest) = l.strip_prefix("__global__") else {
            continue;
        };
        if let Some(at) = rest.find("__launch_bounds__") {
            let after = &rest[at..];
            match after.find(')') {
                Some(close) => rest = &after[close + 1..],
                None => continue,
            }
        }
        // A name (and its `(`) not on this line is at the start of the next.
        let joined;
        if !rest.contains('(') {
            joined = format!("{rest} {}", lines.get(i + 1).copied().unwrap_or(""));
            rest = &joined;
        }
        let Some(head) = rest.split('(').next() else {
            continue;
        };
        if let Some(name) = head.split_whitespace().last() {
            if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                out.push(intern(name));
            }
        }
    }
    out
}

fn program(p: *mut Program) -> Option<&'static mut Program> {
    // SAFETY: program handles are `Box<Program>` pointers from `nvrtcCreateProgram`, valid
    // until `nvrtcDestroyProgram` (NVRTC's contract: the caller does not use a destroyed
    // program nor one program from two threads at once).
    unsafe { p.as_mut() }
}

fn compiler() -> Result<&'static EmuDriver, String> {
    static EMU: OnceLock<Result<EmuDriver, String>> = OnceLock::new();
    EMU.get_or_init(|| EmuDriver::new().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// # Safety
/// `major` and `minor` must be writable.
#[no_mangle]
pub unsafe extern "C" fn nvrtcVersion(major: *mut c_int, minor: *mut c_int) -> NvrtcResult {
    if major.is_null() || minor.is_null() {
        return NVRTC_ERROR_INVALID_INPUT;
    }
    // SAFETY: non-null and writable (the caller's contract).
    unsafe {
        *major = 13;
        *minor = 0;
    }
    NVRTC_SUCCESS
}

/// # Safety
/// `src` (and `name` when not null) must be NUL-terminated; `prog` writable. Headers are not
/// supported (the crate passes none).
#[no_mangle]
pub unsafe extern "C" fn nvrtcCreateProgram(
    prog: *mut *mut Program,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    _headers: *const *const c_char,
    _include_names: *const *const c_char,
) -> NvrtcResult {
    if prog.is_null() || src.is_null() || num_headers != 0 {
        return NVRTC_ERROR_INVALID_INPUT;
    }
    // SAFETY: NUL-terminated (the caller's contract).
    let source = unsafe { CStr::from_ptr(src) }
        .to_string_lossy()
        .into_owned();
    let name = if name.is_null() {
        "default_program".to_string()
    } else {
        // SAFETY: NUL-terminated (the caller's contract).
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    };
    let p = Box::new(Program {
        source,
        name,
        ptx: None,
        log: vec![0],
    });
    // SAFETY: non-null and writable (the caller's contract).
    unsafe { *prog = Box::into_raw(p) };
    NVRTC_SUCCESS
}

/// # Safety
/// `prog` must be writable and hold a program of `nvrtcCreateProgram` (or null).
#[no_mangle]
pub unsafe extern "C" fn nvrtcDestroyProgram(prog: *mut *mut Program) -> NvrtcResult {
    if prog.is_null() {
        return NVRTC_ERROR_INVALID_INPUT;
    }
    // SAFETY: readable and writable (the caller's contract).
    let p = unsafe { *prog };
    if !p.is_null() {
        // SAFETY: made by `Box::into_raw` in nvrtcCreateProgram and destroyed once (the
        // handle is cleared below).
        drop(unsafe { Box::from_raw(p) });
    }
    // SAFETY: as above.
    unsafe { *prog = std::ptr::null_mut() };
    NVRTC_SUCCESS
}

/// # Safety
/// `options` must hold `n` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn nvrtcCompileProgram(
    prog: *mut Program,
    n: c_int,
    options: *const *const c_char,
) -> NvrtcResult {
    let Some(p) = program(prog) else {
        return NVRTC_ERROR_INVALID_PROGRAM;
    };
    let mut defines = Vec::new();
    let mut arch = None;
    let mut log = String::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `options` holds `n` NUL-terminated strings (the caller's contract).
        let o = unsafe { CStr::from_ptr(*options.add(i)) }
            .to_string_lossy()
            .into_owned();
        if let Some(a) = o
            .strip_prefix("--gpu-architecture=")
            .or(o.strip_prefix("-arch="))
        {
            arch = Some(a.to_string());
        } else if let Some(d) = o.strip_prefix("-D") {
            let (k, v) = d.split_once('=').unwrap_or((d, "1"));
            defines.push((intern(k), v.to_string()));
        } else if !matches!(
            o.as_str(),
            "--std=c++17" | "--std=c++20" | "-default-device" | "--fmad=false" | "--fmad=true"
        ) {
            log.push_str(&format!("nvrtc: error: unrecognized option {o}\n"));
        }
    }
    if !log.is_empty() {
        p.log = log.into_bytes();
        p.log.push(0);
        return NVRTC_ERROR_INVALID_OPTION;
    }
    if arch
        .as_deref()
        .is_none_or(|a| !a.starts_with("compute_") && !a.starts_with("sm_"))
    {
        p.log = b"nvrtc: error: no virtual architecture named (--gpu-architecture)\n\0".to_vec();
        return NVRTC_ERROR_INVALID_OPTION;
    }
    let src = ModuleSource {
        name: p.name.clone(),
        source: p.source.clone(),
        entry_points: entry_points(&p.source),
        defines,
    };
    let emu = match compiler() {
        Ok(e) => e,
        Err(e) => {
            p.log = format!("cuda stand-in: no host compiler: {e}\n\0").into_bytes();
            return NVRTC_ERROR_INTERNAL_ERROR;
        }
    };
    if let Err(e) = emu.load_module(&src) {
        p.log = format!("{e}\n\0").into_bytes();
        return NVRTC_ERROR_COMPILATION;
    }
    let mut text = format!("{MODULE_MAGIC}\n// name: {}\n", src.name);
    for (k, v) in &src.defines {
        text.push_str(&format!("// define: {k}={v}\n"));
    }
    for e in &src.entry_points {
        text.push_str(&format!(".entry {e}\n"));
    }
    text.push_str("// source:\n");
    text.push_str(&src.source);
    let mut bytes = text.into_bytes();
    bytes.push(0);
    p.ptx = Some(bytes);
    p.log = vec![0];
    NVRTC_SUCCESS
}

/// # Safety
/// `size` must be writable.
#[no_mangle]
pub unsafe extern "C" fn nvrtcGetPTXSize(prog: *mut Program, size: *mut usize) -> NvrtcResult {
    let Some(ptx) = program(prog).and_then(|p| p.ptx.as_ref()) else {
        return NVRTC_ERROR_INVALID_PROGRAM;
    };
    if size.is_null() {
        return NVRTC_ERROR_INVALID_INPUT;
    }
    // SAFETY: non-null and writable (the caller's contract).
    unsafe { *size = ptx.len() };
    NVRTC_SUCCESS
}

/// # Safety
/// `out` must be writable for the size `nvrtcGetPTXSize` reported.
#[no_mangle]
pub unsafe extern "C" fn nvrtcGetPTX(prog: *mut Program, out: *mut c_char) -> NvrtcResult {
    let Some(ptx) = program(prog).and_then(|p| p.ptx.as_ref()) else {
        return NVRTC_ERROR_INVALID_PROGRAM;
    };
    if out.is_null() {
        return NVRTC_ERROR_INVALID_INPUT;
    }
    // SAFETY: `out` is writable for `ptx.len()` bytes (the caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(ptx.as_ptr(), out.cast::<u8>(), ptx.len()) };
    NVRTC_SUCCESS
}

/// # Safety
/// `size` must be writable.
#[no_mangle]
pub unsafe extern "C" fn nvrtcGetProgramLogSize(
    prog: *mut Program,
    size: *mut usize,
) -> NvrtcResult {
    let Some(p) = program(prog) else {
        return NVRTC_ERROR_INVALID_PROGRAM;
    };
    if size.is_null() {
        return NVRTC_ERROR_INVALID_INPUT;
    }
    // SAFETY: non-null and writable (the caller's contract).
    unsafe { *size = p.log.len() };
    NVRTC_SUCCESS
}

/// # Safety
/// `out` must be writable for the size `nvrtcGetProgramLogSize` reported.
#[no_mangle]
pub unsafe extern "C" fn nvrtcGetProgramLog(prog: *mut Program, out: *mut c_char) -> NvrtcResult {
    let Some(p) = program(prog) else {
        return NVRTC_ERROR_INVALID_PROGRAM;
    };
    if out.is_null() {
        return NVRTC_ERROR_INVALID_INPUT;
    }
    // SAFETY: `out` is writable for `log.len()` bytes (the caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(p.log.as_ptr(), out.cast::<u8>(), p.log.len()) };
    NVRTC_SUCCESS
}

#[no_mangle]
pub extern "C" fn nvrtcGetErrorString(r: NvrtcResult) -> *const c_char {
    match r {
        NVRTC_SUCCESS => c"NVRTC_SUCCESS",
        NVRTC_ERROR_INVALID_INPUT => c"NVRTC_ERROR_INVALID_INPUT",
        NVRTC_ERROR_INVALID_PROGRAM => c"NVRTC_ERROR_INVALID_PROGRAM",
        NVRTC_ERROR_INVALID_OPTION => c"NVRTC_ERROR_INVALID_OPTION",
        NVRTC_ERROR_COMPILATION => c"NVRTC_ERROR_COMPILATION",
        _ => c"NVRTC_ERROR_INTERNAL_ERROR",
    }
    .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_points_are_the_global_functions() {
        let src = "// a __global__ in a comment\nextern \"C\" __global__ void a_b(\n  int x) {}\n\
                   __global__ void c(int) {}\n__device__ void d() {}\n\
                   extern \"C\" __global__ void __launch_bounds__(GS_BLOCK) e(int) {}\n\
                   extern \"C\" __global__ void __launch_bounds__(GS_BLOCK, 3)\n    f(int) {}\n\
                   __global__ void g(int) {}\n\
                   extern \"C\" __global__ void __launch_bounds__(GS_BLOCK) h(int) {}\n";
        assert_eq!(entry_points(src), vec!["a_b", "c", "e", "f", "g", "h"]);
    }
}
