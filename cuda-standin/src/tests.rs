//! The stand-in's own rules, through its C entry points: laziness, staging, waits, contexts,
//! bounds, sticky errors, and what NVRTC and the module loader refuse. The crate's tests run
//! the rest (its whole CUDA path) against the built library (`tools/cuda-standin.sh`).
//!
//! The process has three devices (`DEFAULT_DEVICES` under test). Tests run in parallel
//! threads, each with its own current context; only
//! `faults_and_races_are_sticky_until_the_context_goes` breaks a context, and it alone uses
//! device 2.

use super::*;
use crate::nvrtc::*;
use std::ffi::CString;

const KERNEL: &str = r#"
extern "C" __global__ void add_one(unsigned long long n, const float* in, float* out) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + 1.0f;
}
"#;

fn ok(r: CUresult) {
    assert_eq!(r, SUCCESS, "{:?}", error_text(r).0);
}

/// Makes `device`'s primary context current on this thread.
fn bind(device: c_int) {
    ok(cuInit(0));
    let mut ctx: Handle = std::ptr::null_mut();
    // SAFETY: `ctx` is writable.
    ok(unsafe { cuDevicePrimaryCtxRetain(&mut ctx, device) });
    ok(cuCtxSetCurrent(ctx));
}

/// The stand-in's module text for `src`, through the NVRTC entry points.
fn compile(src: &str, options: &[&str]) -> Result<String, (c_int, String)> {
    let src = CString::new(src).unwrap();
    let name = CString::new("standin_test.cu").unwrap();
    let opts: Vec<CString> = options.iter().map(|o| CString::new(*o).unwrap()).collect();
    let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: *mut Program = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings; `prog` writable.
    let r = unsafe {
        nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0);
    // SAFETY: a live program; `ptrs` holds that many NUL-terminated options.
    let r = unsafe { nvrtcCompileProgram(prog, ptrs.len() as c_int, ptrs.as_ptr()) };
    let out = if r == 0 {
        let mut n = 0usize;
        // SAFETY: a compiled program; the buffer is as long as the size reported.
        unsafe {
            assert_eq!(nvrtcGetPTXSize(prog, &mut n), 0);
            let mut buf = vec![0u8; n];
            assert_eq!(nvrtcGetPTX(prog, buf.as_mut_ptr().cast()), 0);
            Ok(CStr::from_bytes_with_nul(&buf)
                .unwrap()
                .to_string_lossy()
                .into_owned())
        }
    } else {
        let mut n = 0usize;
        // SAFETY: a live program; the buffer is as long as the size reported.
        unsafe {
            assert_eq!(nvrtcGetProgramLogSize(prog, &mut n), 0);
            let mut buf = vec![0u8; n];
            assert_eq!(nvrtcGetProgramLog(prog, buf.as_mut_ptr().cast()), 0);
            Err((
                r,
                CStr::from_bytes_with_nul(&buf)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            ))
        }
    };
    // SAFETY: destroyed once.
    unsafe { nvrtcDestroyProgram(&mut prog) };
    out
}

/// `add_one` loaded on the current context.
fn add_one() -> Handle {
    let ptx = compile(KERNEL, &["--gpu-architecture=compute_90", "--fmad=false"]).unwrap();
    assert!(ptx.contains(".entry add_one"), "{ptx}");
    let image = CString::new(ptx).unwrap();
    let (mut m, mut f): (Handle, Handle) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: a NUL-terminated module text; writable handles.
    unsafe {
        ok(cuModuleLoadData(&mut m, image.as_ptr().cast()));
        ok(cuModuleGetFunction(&mut f, m, c"add_one".as_ptr()));
    }
    f
}

fn alloc(bytes: usize) -> CUdeviceptr {
    let mut p = 0;
    // SAFETY: `p` is writable.
    ok(unsafe { cuMemAlloc_v2(&mut p, bytes) });
    p
}

fn upload(dst: CUdeviceptr, v: &[f32], stream: Handle) {
    // SAFETY: `v` is readable for its byte length.
    ok(unsafe { cuMemcpyHtoDAsync_v2(dst, v.as_ptr().cast(), std::mem::size_of_val(v), stream) });
}

fn download(src: CUdeviceptr, n: usize) -> Vec<f32> {
    let mut v = vec![0f32; n];
    // SAFETY: `v` is writable for its byte length; pageable, so the call returns complete.
    ok(unsafe { cuMemcpyDtoHAsync_v2(v.as_mut_ptr().cast(), src, n * 4, std::ptr::null_mut()) });
    v
}

fn launch_add_one(
    f: Handle,
    n: usize,
    input: CUdeviceptr,
    out: CUdeviceptr,
    stream: Handle,
) -> CUresult {
    let mut n64 = n as u64;
    let (mut a, mut b) = (input, out);
    let mut params: [*mut c_void; 3] = [
        (&mut n64 as *mut u64).cast(),
        (&mut a as *mut u64).cast(),
        (&mut b as *mut u64).cast(),
    ];
    // SAFETY: three parameters, each pointing to a value of the kernel's parameter size.
    unsafe {
        cuLaunchKernel(
            f,
            1,
            1,
            1,
            64,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

fn new_stream() -> Handle {
    let mut s: Handle = std::ptr::null_mut();
    // SAFETY: `s` is writable. Flag 1: non-blocking.
    ok(unsafe { cuStreamCreate(&mut s, 1) });
    s
}

fn record(stream: Handle) -> Handle {
    let mut e: Handle = std::ptr::null_mut();
    // SAFETY: `e` is writable.
    ok(unsafe { cuEventCreate(&mut e, 2) });
    ok(cuEventRecord(e, stream));
    e
}

#[test]
fn copies_run_when_the_host_must_see_them_and_read_pinned_memory_then() {
    bind(0);
    let n = 64;
    let dev = alloc(n * 4);
    let copy = new_stream();
    let mut pinned: *mut c_void = std::ptr::null_mut();
    // SAFETY: `pinned` is writable.
    ok(unsafe { cuMemHostAlloc(&mut pinned, n * 4, 0) });
    // SAFETY: `pinned` holds n floats, written only by this thread.
    let host = unsafe { std::slice::from_raw_parts_mut(pinned.cast::<f32>(), n) };
    host.fill(1.0);
    upload(dev, host, copy);
    // Overwritten before the copy was waited for: the copy has not run yet, so it reads this.
    host.fill(2.0);
    ok(cuStreamSynchronize(copy));
    assert!(download(dev, n).iter().all(|&x| x == 2.0));

    // From pageable memory the source is staged when the copy is queued.
    let mut pageable = vec![3.0f32; n];
    upload(dev, &pageable, copy);
    pageable.fill(4.0);
    ok(cuStreamSynchronize(copy));
    assert!(download(dev, n).iter().all(|&x| x == 3.0));

    // Freeing page-locked memory a queued copy still reads is refused, then allowed.
    host.fill(5.0);
    upload(dev, host, copy);
    assert_eq!(cuMemFreeHost(pinned), INVALID_VALUE);
    ok(cuStreamSynchronize(copy));
    ok(cuMemFreeHost(pinned));
    ok(cuStreamDestroy_v2(copy));
    ok(cuMemFree_v2(dev));
}

#[test]
fn a_kernel_after_an_event_wait_sees_the_copy_on_another_stream() {
    bind(0);
    let f = add_one();
    let n = 48;
    let (input, out) = (alloc(n * 4), alloc(n * 4));
    let copy = new_stream();
    upload(input, &vec![10.0f32; n], copy);
    let done = record(copy);
    ok(cuStreamWaitEvent(std::ptr::null_mut(), done, 0));
    ok(launch_add_one(f, n, input, out, std::ptr::null_mut()));
    assert!(download(out, n).iter().all(|&x| x == 11.0));
    // The next copy into the kernel's input waits for the kernel: ordered, no race.
    let before = record(std::ptr::null_mut());
    ok(cuStreamWaitEvent(copy, before, 0));
    upload(input, &vec![20.0f32; n], copy);
    ok(cuStreamSynchronize(copy));
    ok(launch_add_one(f, n, input, out, std::ptr::null_mut()));
    assert!(download(out, n).iter().all(|&x| x == 21.0));
    for e in [done, before] {
        ok(cuEventDestroy_v2(e));
    }
    ok(cuStreamDestroy_v2(copy));
}

/// Elapsed time only between two timing events, once both have run (the driver's rules).
#[test]
fn elapsed_time_needs_timing_events_that_ran() {
    bind(1);
    let stream = new_stream();
    let timed = |stream: Handle| {
        let mut e: Handle = std::ptr::null_mut();
        // SAFETY: `e` is writable. Flag 0: a timing event.
        ok(unsafe { cuEventCreate(&mut e, 0) });
        ok(cuEventRecord(e, stream));
        e
    };
    let (a, b) = (timed(stream), timed(stream));
    let untimed = record(stream);
    let mut ms = -1.0f32;
    // SAFETY: `ms` is writable.
    let elapsed = |x: Handle, y: Handle, ms: &mut f32| unsafe { cuEventElapsedTime_v2(ms, x, y) };
    // Lazy: nothing has run yet.
    assert_eq!(elapsed(a, b, &mut ms), NOT_READY);
    ok(cuEventSynchronize(untimed));
    ok(elapsed(a, b, &mut ms));
    assert!(ms >= 0.0, "{ms}");
    assert_eq!(elapsed(a, untimed, &mut ms), INVALID_HANDLE);
    let mut fresh: Handle = std::ptr::null_mut();
    // SAFETY: `fresh` is writable.
    ok(unsafe { cuEventCreate(&mut fresh, 0) });
    assert_eq!(elapsed(a, fresh, &mut ms), INVALID_HANDLE, "never recorded");
    for e in [a, b, untimed, fresh] {
        ok(cuEventDestroy_v2(e));
    }
    ok(cuStreamDestroy_v2(stream));
}

#[test]
fn calls_need_a_current_context() {
    bind(1);
    std::thread::spawn(|| {
        let mut p = 0;
        // SAFETY: `p` is writable.
        assert_eq!(unsafe { cuMemAlloc_v2(&mut p, 256) }, INVALID_CONTEXT);
        assert_eq!(cuCtxSynchronize(), INVALID_CONTEXT);
    })
    .join()
    .unwrap();
}

#[test]
fn launches_outside_the_devices_limits_are_refused() {
    bind(1);
    let f = add_one();
    let buf = alloc(256);
    let mut n = 1u64;
    let (mut a, mut b) = (buf, buf);
    let mut params: [*mut c_void; 3] = [
        (&mut n as *mut u64).cast(),
        (&mut a as *mut u64).cast(),
        (&mut b as *mut u64).cast(),
    ];
    for (grid, block) in [
        ((1, 1, 1), (2048, 1, 1)),
        ((1, 1, 1), (1, 1, 65)),
        ((0, 1, 1), (32, 1, 1)),
    ] {
        // SAFETY: three valid parameters; the shape is refused before anything runs.
        let r = unsafe {
            cuLaunchKernel(
                f,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                0,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(r, INVALID_VALUE, "{grid:?} {block:?}");
    }
    ok(cuCtxSynchronize());
}

#[test]
fn faults_and_races_are_sticky_until_the_context_goes() {
    bind(2);
    let f = add_one();
    let own = alloc(256);
    // A pointer of device 0 passed to a kernel on device 2.
    let other = std::thread::spawn(|| {
        bind(0);
        alloc(256)
    })
    .join()
    .unwrap();
    assert_eq!(
        launch_add_one(f, 4, other, own, std::ptr::null_mut()),
        ILLEGAL_ADDRESS
    );
    // Every later call on the context fails, as after a fault on a GPU.
    assert_eq!(cuCtxSynchronize(), LAUNCH_FAILED);
    let mut p = 0;
    // SAFETY: `p` is writable.
    assert_eq!(unsafe { cuMemAlloc_v2(&mut p, 256) }, LAUNCH_FAILED);
    // Until the primary context is released and made again.
    ok(cuDevicePrimaryCtxRelease_v2(2));
    bind(2);
    ok(cuCtxSynchronize());
    // A copy that runs past its allocation is a fault too.
    let small = alloc(16);
    let v = [0f32; 8];
    // SAFETY: `v` is readable for 32 bytes; the destination holds only 16.
    let r = unsafe { cuMemcpyHtoDAsync_v2(small, v.as_ptr().cast(), 32, std::ptr::null_mut()) };
    assert_eq!(r, LAUNCH_FAILED);
    ok(cuDevicePrimaryCtxRelease_v2(2));
    bind(2);
    ok(cuCtxSynchronize());
    // A race: a kernel on the main queue reads what a copy on another stream writes, with no
    // event wait between them. Reported when the kernel is queued, whatever the schedule.
    let f = add_one();
    let (input, out) = (alloc(64), alloc(64));
    let copy = new_stream();
    upload(input, &[1.0f32; 16], copy);
    assert_eq!(
        launch_add_one(f, 16, input, out, std::ptr::null_mut()),
        LAUNCH_FAILED
    );
    assert_eq!(cuCtxSynchronize(), LAUNCH_FAILED);
    ok(cuDevicePrimaryCtxRelease_v2(2));
    bind(2);
    ok(cuCtxSynchronize());
}

#[test]
fn nvrtc_refuses_unknown_options_and_the_loader_refuses_real_ptx() {
    bind(1);
    let (code, log) = compile(
        KERNEL,
        &["--gpu-architecture=compute_90", "--use_fast_math"],
    )
    .unwrap_err();
    assert_eq!(code, 5);
    assert!(log.contains("--use_fast_math"), "{log}");
    let (code, _) = compile(KERNEL, &[]).unwrap_err();
    assert_eq!(code, 5, "no architecture named");
    let (code, log) = compile(
        "__global__ void broken( {",
        &["--gpu-architecture=compute_90"],
    )
    .unwrap_err();
    assert_eq!(code, 6);
    assert!(log.contains("error"), "{log}");
    let ptx =
        c".version 8.8\n.target sm_90\n.address_size 64\n.visible .entry add_one()\n{\n ret;\n}\n";
    let mut m: Handle = std::ptr::null_mut();
    // SAFETY: a NUL-terminated image; `m` writable.
    assert_eq!(
        unsafe { cuModuleLoadData(&mut m, ptx.as_ptr().cast()) },
        INVALID_PTX
    );
}
