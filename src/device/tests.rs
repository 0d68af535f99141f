//! The device layer's own checks, on the host emulation always and on CUDA when a GPU is
//! usable (`GS_REQUIRE_GPU=1` makes a missing GPU a failure): copies, the warp collectives,
//! barrier results and atomics of a small test kernel, and the emulation's refusals
//! (divergent barriers, masks naming exited lanes, allocations past the device's capacity).

use super::*;

const TEST_KERNELS: &str = r#"
typedef unsigned int u32;
typedef unsigned long long u64;

// Per thread t of a 64-thread block: out[8t..8t+8) = shfl_down(t,1), shfl_xor(t,3),
// shfl_up(t,2), shfl(t, 5), ballot(t odd), any(t==7), all(t<64), match_any(t/4).
extern "C" __global__ void collectives(u32* out) {
    const u32 t = threadIdx.x;
    u32* o = out + 8 * (blockIdx.x * blockDim.x + t);
    o[0] = __shfl_down_sync(0xffffffffu, t, 1);
    o[1] = __shfl_xor_sync(0xffffffffu, t, 3);
    o[2] = __shfl_up_sync(0xffffffffu, t, 2);
    o[3] = __shfl_sync(0xffffffffu, t, 5);
    o[4] = __ballot_sync(0xffffffffu, t & 1);
    o[5] = __any_sync(0xffffffffu, t == 7);
    o[6] = __all_sync(0xffffffffu, t < 64);
    o[7] = __match_any_sync(0xffffffffu, t / 4);
}

// Shared-memory reversal (needs the barrier), __syncthreads_count/and/or, and atomics.
extern "C" __global__ void barriers(const float* in, float* out, u32* counts, float* sum, u32* mx) {
    __shared__ float s[128];
    const u32 t = threadIdx.x;
    s[t] = in[blockIdx.x * 128 + t];
    __syncthreads();
    out[blockIdx.x * 128 + t] = s[127 - t];
    const int c = __syncthreads_count(t % 3 == 0);
    const int a = __syncthreads_and(t < 1000);
    const int o = __syncthreads_or(t == 5);
    if (t == 0) { counts[3 * blockIdx.x] = c; counts[3 * blockIdx.x + 1] = a; counts[3 * blockIdx.x + 2] = o; }
    atomicAdd(sum, 1.0f);
    atomicMax(mx, blockIdx.x * 1000 + t);
}

// A barrier only some threads reach: divergence (undefined on a GPU, an error here).
extern "C" __global__ void divergent(u32* out) {
    if (threadIdx.x < 16) { __syncthreads(); }
    else { __syncthreads(); }
    out[threadIdx.x] = 1;
}

// A shuffle whose mask names lanes that returned.
extern "C" __global__ void exited_lane(u32* out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, threadIdx.x, 1);
}
"#;

fn source() -> ModuleSource {
    ModuleSource {
        name: "device_tests.cu".into(),
        source: TEST_KERNELS.into(),
        entry_points: vec!["collectives", "barriers", "divergent", "exited_lane"],
        defines: vec![],
    }
}

fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid: (grid, 1, 1),
        block: (block, 1, 1),
    }
}

#[test]
fn warp_collectives_match_cuda_semantics() {
    for dev in test_devices() {
        let m = dev.load_module(&source()).unwrap();
        let out = dev.alloc::<u32>(2 * 64 * 8).unwrap();
        // SAFETY: `collectives(u32*)` writes 8 values per thread of 2 × 64 threads.
        unsafe { dev.launch(m.function("collectives").unwrap(), cfg(2, 64), &[out.arg()]) }
            .unwrap();
        let o = dev.download_vec(&out, 2 * 64 * 8).unwrap();
        for g in 0..128usize {
            let t = (g % 64) as u32;
            let lane = t % 32;
            let base = t - lane;
            let r = &o[8 * g..8 * g + 8];
            let down = if lane + 1 < 32 { t + 1 } else { t };
            let up = if lane >= 2 { t - 2 } else { t };
            let ballot = 0xAAAA_AAAAu32;
            let group = (lane / 4) * 4;
            let matched = 0xFu32 << group;
            assert_eq!(
                r,
                [
                    down,
                    t ^ 3,
                    up,
                    base + 5,
                    ballot,
                    (base == 0) as u32,
                    1,
                    matched
                ],
                "{} thread {g}",
                dev.name()
            );
        }
    }
}

#[test]
fn barriers_shared_memory_and_atomics() {
    for dev in test_devices() {
        let m = dev.load_module(&source()).unwrap();
        let n = 3 * 128;
        let input: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let mut din = dev.alloc::<f32>(n).unwrap();
        dev.upload(&input, &mut din).unwrap();
        let out = dev.alloc::<f32>(n).unwrap();
        let counts = dev.alloc::<u32>(9).unwrap();
        let mut sum = dev.alloc::<f32>(1).unwrap();
        let mut mx = dev.alloc::<u32>(1).unwrap();
        dev.memset_zero(&mut sum, 1).unwrap();
        dev.memset_zero(&mut mx, 1).unwrap();
        let args = [din.arg(), out.arg(), counts.arg(), sum.arg(), mx.arg()];
        // SAFETY: `barriers` indexes 128 floats per block of 3 blocks, 3 counts per block and
        // one float and one u32 of accumulators.
        unsafe { dev.launch(m.function("barriers").unwrap(), cfg(3, 128), &args) }.unwrap();
        let o = dev.download_vec(&out, n).unwrap();
        for b in 0..3 {
            for t in 0..128 {
                assert_eq!(o[b * 128 + t], input[b * 128 + 127 - t], "{}", dev.name());
            }
        }
        assert_eq!(
            dev.download_vec(&counts, 9).unwrap(),
            [43, 1, 1, 43, 1, 1, 43, 1, 1],
            "{}",
            dev.name()
        );
        assert_eq!(
            dev.download_vec(&sum, 1).unwrap(),
            [384.0],
            "{}",
            dev.name()
        );
        assert_eq!(dev.download_vec(&mx, 1).unwrap(), [2127], "{}", dev.name());
    }
}

#[test]
fn emulation_reports_divergence_instead_of_hanging() {
    let dev = Device::emulated().unwrap();
    let m = dev.load_module(&source()).unwrap();
    let out = dev.alloc::<u32>(32).unwrap();
    // SAFETY: both kernels write at most 32 u32s.
    let e = unsafe { dev.launch(m.function("divergent").unwrap(), cfg(1, 32), &[out.arg()]) }
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("divergent") && e.contains("barrier divergence"),
        "{e}"
    );
    // SAFETY: as above.
    let e = unsafe { dev.launch(m.function("exited_lane").unwrap(), cfg(1, 32), &[out.arg()]) }
        .unwrap_err()
        .to_string();
    assert!(e.contains("exited_lane") && e.contains("mask"), "{e}");
}

/// Kernels for the emulation's schedule and its other refusals (emulation only: on a GPU the
/// refused ones hang or are undefined behaviour).
const EMU_KERNELS: &str = r#"
typedef unsigned int u32;

// Each thread logs its index once per round: three rounds of its warp's __syncwarp, then one
// after a block barrier.
extern "C" __global__ void rounds(u32* log, u32* n) {
    for (int k = 0; k < 3; ++k) {
        log[atomicAdd(n, 1u)] = threadIdx.x;
        __syncwarp();
    }
    __syncthreads();
    log[atomicAdd(n, 1u)] = 1000 + threadIdx.x;
}

// The lanes of a warp at two different shuffles.
extern "C" __global__ void warp_divergent(u32* out) {
    u32 v;
    if (threadIdx.x < 5) { v = __shfl_sync(0xffffffffu, threadIdx.x, 0); }
    else { v = __shfl_sync(0xffffffffu, threadIdx.x, 0); }
    out[threadIdx.x] = v;
}

// One lane of each warp at a block barrier, the others at a warp collective.
extern "C" __global__ void deadlock(u32* out) {
    if (threadIdx.x % 32 == 0) { __syncthreads(); }
    else { __syncwarp(); }
    out[threadIdx.x] = 1;
}

// A mask naming exactly the live lanes, but lane 15 reads lane 16, which returned.
extern "C" __global__ void reads_exited_lane(u32* out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_down_sync(0xffffu, threadIdx.x, 1);
}

// 16-byte stores at float offset `at` of each thread's 8 floats: aligned for even `at`s that
// are multiples of 4, misaligned otherwise (a fault on a GPU).
extern "C" __global__ void wide_store(float* out, u32 at) {
    *reinterpret_cast<float4*>(out + 8 * threadIdx.x + at) = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
}
"#;

fn emu_source() -> ModuleSource {
    ModuleSource {
        name: "emu_tests.cu".into(),
        source: EMU_KERNELS.into(),
        entry_points: vec![
            "rounds",
            "warp_divergent",
            "deadlock",
            "reads_exited_lane",
            "wide_store",
        ],
        defines: vec![],
    }
}

/// What the header documents: a warp's lanes run in rounds, each lane as far as its next
/// barrier or collective, in an order shuffled per round, and a warp runs until it waits at a
/// block barrier before the next warp runs.
#[test]
fn emulation_runs_each_lane_to_its_next_collective_in_shuffled_rounds() {
    let dev = Device::emulated().unwrap();
    let m = dev.load_module(&emu_source()).unwrap();
    let log = dev.alloc::<u32>(256).unwrap();
    let mut n = dev.alloc::<u32>(1).unwrap();
    dev.memset_zero(&mut n, 1).unwrap();
    // SAFETY: 64 threads log 4 entries each into 256 u32s through one counter.
    unsafe {
        dev.launch(
            m.function("rounds").unwrap(),
            cfg(1, 64),
            &[log.arg(), n.arg()],
        )
    }
    .unwrap();
    assert_eq!(dev.download_vec(&n, 1).unwrap(), [256]);
    let log = dev.download_vec(&log, 256).unwrap();
    let rounds: Vec<&[u32]> = log.chunks(32).collect();
    let warp_of = |r: &[u32]| (r[0] % 1000) / 32;
    for (k, r) in rounds.iter().enumerate() {
        let w = warp_of(r);
        let mut sorted = r.to_vec();
        sorted.sort_unstable();
        let offset = if k < 6 { 0 } else { 1000 };
        let want: Vec<u32> = (0..32).map(|t| offset + 32 * w + t).collect();
        assert_eq!(
            sorted, want,
            "round {k} is not one run of each lane of a warp: {r:?}"
        );
    }
    // The three __syncwarp rounds of a warp follow each other, then the other warp's.
    assert_eq!(
        [0, 1, 2].map(|k| warp_of(rounds[k])),
        [warp_of(rounds[0]); 3]
    );
    assert_eq!(
        [3, 4, 5].map(|k| warp_of(rounds[k])),
        [1 - warp_of(rounds[0]); 3]
    );
    assert_ne!(warp_of(rounds[6]), warp_of(rounds[7]));
    for k in 1..3 {
        assert_ne!(rounds[k], rounds[k - 1], "round {k} is not shuffled anew");
    }
}

#[test]
fn emulation_reports_warp_divergence_deadlock_and_shuffles_of_exited_lanes() {
    let dev = Device::emulated().unwrap();
    let m = dev.load_module(&emu_source()).unwrap();
    let out = dev.alloc::<u32>(64).unwrap();
    let run = |name: &str| {
        // SAFETY: each kernel writes at most one u32 per thread of the 64-thread block.
        unsafe { dev.launch(m.function(name).unwrap(), cfg(1, 64), &[out.arg()]) }
            .unwrap_err()
            .to_string()
    };
    let e = run("warp_divergent");
    assert!(
        e.contains("warp 0 diverged: lane 0 waits at a collective on line")
            && e.contains("lane 5 on line"),
        "{e}"
    );
    let e = run("deadlock");
    assert!(
        e.contains("deadlock: 2 of 64 live threads wait at __syncthreads"),
        "{e}"
    );
    let e = run("reads_exited_lane");
    assert!(
        e.contains("warp 0: shuffle on line") && e.contains("reads lane 16, which is not live"),
        "{e}"
    );
}

/// A 16-byte store must be 16-byte aligned, as on a GPU (which faults); an aligned one lands.
#[test]
fn emulation_refuses_misaligned_wide_stores() {
    let dev = Device::emulated().unwrap();
    let m = dev.load_module(&emu_source()).unwrap();
    let mut out = dev.alloc::<f32>(8 * 32 + 8).unwrap();
    dev.memset_zero(&mut out, 8 * 32 + 8).unwrap();
    let run = |at: u32| {
        // SAFETY: 32 threads store 4 floats each at 8·t + at ≤ 8·31 + 4 + 3 < 8·32 + 8.
        unsafe {
            dev.launch(
                m.function("wide_store").unwrap(),
                cfg(1, 32),
                &[out.arg(), KernelArg::U32(at)],
            )
        }
    };
    run(4).unwrap();
    let v = dev.download_vec(&out, 16).unwrap();
    assert_eq!(&v[4..8], &[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(&v[12..16], &[1.0, 2.0, 3.0, 4.0]);
    let e = run(2).unwrap_err().to_string();
    assert!(
        e.contains("wide_store") && e.contains("misaligned 16-byte access"),
        "{e}"
    );
}

#[test]
fn emulated_memory_is_poisoned_counted_and_capped() {
    let dev = Device::emulated().unwrap();
    let (free0, total) = dev.memory().unwrap();
    let b = dev.alloc::<f32>(1000).unwrap();
    assert!(dev
        .download_vec(&b, 1000)
        .unwrap()
        .iter()
        .all(|v| v.is_nan()));
    let (free1, _) = dev.memory().unwrap();
    assert_eq!(free0 - free1, 4000);
    let e = dev.alloc::<u8>(total as usize + 1).unwrap_err().to_string();
    assert!(
        e.contains("refused") && e.contains("GS_EMU_DEVICE_MEMORY"),
        "{e}"
    );
    drop(b);
    assert_eq!(dev.memory().unwrap().0, free0);
}

/// The layer counts what live buffers hold and the peak, on every driver: a refused
/// allocation counts nothing, a grown buffer never holds its old and new sizes at once (only a
/// one-element stand-in while it changes), pinned host memory is not device memory, and
/// `reset_peak` starts over from what is live.
#[test]
fn usage_counts_live_buffers_and_their_peak() {
    for dev in test_devices() {
        let base = dev.usage();
        assert_eq!(base.live, 0, "{dev:?}: a fresh device holds nothing");
        let mut a = dev.alloc::<f32>(1000).unwrap();
        let b = dev.alloc::<u8>(0).unwrap();
        assert_eq!(
            dev.usage().live,
            4001,
            "{dev:?}: an empty buffer holds one element"
        );
        let (_, total) = dev.memory().unwrap();
        assert!(dev.alloc::<u8>(total as usize + 1).is_err());
        assert_eq!(
            dev.usage().live,
            4001,
            "{dev:?}: a refused allocation counts nothing"
        );
        let _pinned = dev.alloc_pinned(1 << 20).unwrap();
        assert_eq!(
            dev.usage().live,
            4001,
            "{dev:?}: pinned host memory is not counted"
        );
        dev.grow(&mut a, 3000).unwrap();
        assert_eq!(dev.usage().live, 12001);
        assert_eq!(
            dev.usage().peak,
            12005,
            "{dev:?}: 12000 + 1 + the 4-byte stand-in during the grow, not 4000 + 12000"
        );
        // A grow the device refuses leaves an empty buffer, never a dangling one.
        let (_, total) = dev.memory().unwrap();
        let mut c = dev.alloc::<u8>(100).unwrap();
        assert!(dev.grow(&mut c, total as usize + 1).is_err());
        assert_eq!((c.len(), c.num_bytes()), (0, 1));
        drop(c);
        drop(b);
        dev.reset_peak();
        assert_eq!(
            dev.usage(),
            MemoryUsage {
                live: 12000,
                peak: 12000
            }
        );
        drop(a);
        assert_eq!(dev.usage().live, 0);
        let clone = dev.clone();
        let _c = clone.alloc::<u64>(10).unwrap();
        assert_eq!(dev.usage().live, 80, "{dev:?}: clones share one account");
    }
}

/// The emulation checks a launch's argument list against the kernel's signature (number and
/// kind of each parameter), which a GPU takes on trust. Emulation only: on a GPU these
/// launches would be undefined behaviour.
#[test]
fn emulation_refuses_argument_lists_that_do_not_match_the_signature() {
    let dev = Device::emulated().unwrap();
    let m = dev.load_module(&source()).unwrap();
    let f = m.function("collectives").unwrap();
    let out = dev.alloc::<u32>(8 * 32).unwrap();
    let cfg = cfg(1, 32);
    // SAFETY: the emulation checks the list before the kernel runs (what this test shows).
    let none = unsafe { dev.launch(f, cfg, &[]) }.unwrap_err().to_string();
    assert!(
        none.contains("collectives takes 1 parameters but the launch passed 0 arguments"),
        "{none}"
    );
    // SAFETY: as above.
    let kind = unsafe { dev.launch(f, cfg, &[KernelArg::U64(0)]) }
        .unwrap_err()
        .to_string();
    assert!(
        kind.contains("parameter 0 is a pointer but the launch passed a 64-bit integer"),
        "{kind}"
    );
    // SAFETY: as above.
    let extra = unsafe { dev.launch(f, cfg, &[out.arg(), KernelArg::F32(1.0)]) }
        .unwrap_err()
        .to_string();
    assert!(extra.contains("takes 1 parameters"), "{extra}");
    // The right list runs.
    // SAFETY: `out` holds 8 values per thread of the one 32-thread block.
    unsafe { dev.launch(f, cfg, &[out.arg()]) }.unwrap();
}

#[test]
fn copies_are_bounds_checked() {
    let dev = Device::emulated().unwrap();
    let mut b = dev.alloc::<u32>(4).unwrap();
    assert!(dev.upload(&[1, 2, 3, 4, 5], &mut b).is_err());
    let mut five = [0u32; 5];
    assert!(dev.download(&b, &mut five).is_err());
    dev.upload(&[7, 8], &mut b).unwrap();
    assert_eq!(dev.download_vec(&b, 2).unwrap(), [7, 8]);
    let other = Device::emulated().unwrap();
    assert!(
        other.upload(&[1], &mut b).is_err(),
        "a buffer of another device"
    );
}

const OOB_KERNEL: &str = r#"
extern "C" __global__ void oob(unsigned* out) { out[threadIdx.x] = threadIdx.x; }
"#;

/// The AddressSanitizer runtime of the C++ compiler the emulation uses, if it has one.
#[test]
fn copies_between_devices_land_at_their_offsets() {
    // Two independent devices of each kind (two emulated ones; on a GPU two handles to it,
    // which still take the staged path), in chunks smaller than the copy.
    let mut pairs = vec![(Device::emulated().unwrap(), Device::emulated().unwrap())];
    if let Some(gpu) = test_devices().into_iter().find(|d| !d.is_emulated()) {
        pairs.push((gpu.clone(), Device::emulated().unwrap()));
        pairs.push((Device::emulated().unwrap(), gpu));
    }
    for (a, b) in pairs {
        let host: Vec<u32> = (0..1000).map(|i| i * 7 + 1).collect();
        let mut src = a.alloc::<u32>(1000).unwrap();
        a.upload(&host, &mut src).unwrap();
        let mut dst = b.alloc::<u32>(600).unwrap();
        b.memset_zero(&mut dst, 600).unwrap();
        let mut staging = Vec::new();
        copy_chunked(&src, 100, &mut dst, 50, 500, &mut staging, 64).unwrap();
        copy_between(&src, 0, &mut dst, 0, 3, &mut staging).unwrap();
        let got = b.download_vec(&dst, 600).unwrap();
        assert_eq!(&got[..3], &host[..3]);
        assert!(got[3..50].iter().all(|&v| v == 0));
        assert_eq!(&got[50..550], &host[100..600]);
        assert!(got[550..].iter().all(|&v| v == 0));
        assert!(
            staging.len() <= 64,
            "staging held {} elements",
            staging.len()
        );
        // Out of either buffer: refused, nothing copied.
        let e = copy_between(&src, 600, &mut dst, 0, 401, &mut staging).unwrap_err();
        assert!(
            e.to_string().contains("600..1001 from a buffer of 1000"),
            "{e}"
        );
        let e = copy_between(&src, 0, &mut dst, 300, 301, &mut staging).unwrap_err();
        assert!(
            e.to_string().contains("300..601 into a buffer of 600"),
            "{e}"
        );
        assert_eq!(b.download_vec(&dst, 600).unwrap(), got);
    }
}

fn asan_runtime() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = std::process::Command::new(cxx)
        .arg("-print-file-name=libasan.so")
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    std::path::Path::new(&p).is_absolute().then_some(p)
}

/// Run as a child process by the test below: writes one element past a 32-element buffer.
#[test]
fn asan_child_writes_out_of_bounds() {
    if std::env::var("GS_EMU_ASAN_CHILD").is_err() {
        return; // only meaningful inside the sanitized child process
    }
    let dev = Device::emulated().unwrap();
    let src = ModuleSource {
        name: "oob.cu".into(),
        source: OOB_KERNEL.into(),
        entry_points: vec!["oob"],
        defines: vec![],
    };
    let m = dev.load_module(&src).unwrap();
    let out = dev.alloc::<u32>(32).unwrap();
    // SAFETY: deliberately violated (33 threads, 32 elements): the point of the test is that
    // the AddressSanitizer build aborts the process before the write lands.
    unsafe { dev.launch(m.function("oob").unwrap(), cfg(1, 33), &[out.arg()]) }.unwrap();
}

/// `GS_EMU_SANITIZE=address` builds kernels with AddressSanitizer: an out-of-bounds kernel
/// write into an emulated device buffer aborts with a heap-buffer-overflow report. Runs this
/// test binary again as a child with the ASan runtime preloaded (skipped when the compiler
/// ships no ASan runtime).
#[test]
fn asan_build_catches_out_of_bounds_kernel_writes() {
    if std::env::var("GS_EMU_ASAN_CHILD").is_ok() {
        return;
    }
    let Some(asan) = asan_runtime() else {
        eprintln!("SKIP: the C++ compiler has no AddressSanitizer runtime");
        return;
    };
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "device::tests::asan_child_writes_out_of_bounds",
            "--exact",
            "--nocapture",
        ])
        .env("GS_EMU_ASAN_CHILD", "1")
        .env("GS_EMU_SANITIZE", "address")
        .env("LD_PRELOAD", &asan)
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the out-of-bounds write went unnoticed:\n{err}"
    );
    assert!(
        err.contains("AddressSanitizer: heap-buffer-overflow") && err.contains("oob"),
        "{err}"
    );
}

const SUM_KERNEL: &str = r#"
// out[iter] = Σ in[0..n) (one block; grid-stride over the bytes, then a shared reduction).
extern "C" __global__ void sum_bytes(const unsigned char* in, unsigned n, unsigned* out, unsigned iter) {
    __shared__ unsigned part[256];
    unsigned s = 0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) s += in[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned off = 128; off > 0; off >>= 1) {
        if (threadIdx.x < off) part[threadIdx.x] += part[threadIdx.x + off];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[iter] = part[0];
}
"#;

/// Uploads on a copy stream overlap the main queue yet obey the three ordering rules: one
/// pinned buffer and one device buffer reused for 48 rounds, each round's sum matches its own
/// pattern (a copy overtaking the kernel that reads the previous round, or a host write over
/// an in-flight copy, would mix rounds).
#[test]
fn async_uploads_from_pinned_memory_are_ordered() {
    for dev in test_devices() {
        let src = ModuleSource {
            name: "sum_bytes.cu".into(),
            source: SUM_KERNEL.into(),
            entry_points: vec!["sum_bytes"],
            defines: vec![],
        };
        let m = dev.load_module(&src).unwrap();
        let f = m.function("sum_bytes").unwrap();
        let n: usize = 4 << 20;
        let rounds = 48u32;
        let mut host = dev.alloc_pinned(n).unwrap();
        let mut dst = dev.alloc::<u8>(n).unwrap();
        let out = dev.alloc::<u32>(rounds as usize).unwrap();
        let copy = dev.copy_stream().unwrap();
        let mut want = Vec::new();
        for r in 0..rounds {
            host.wait().unwrap();
            // Every round's sum differs (by n per round): a kernel reading another round's
            // bytes, or a copy of bytes the host has since overwritten, gives a wrong sum.
            for (i, b) in host.iter_mut().enumerate() {
                *b = (i % 7) as u8 + r as u8;
            }
            want.push(host.iter().map(|&b| b as u32).sum::<u32>());
            dev.upload_async(&copy, &mut host, n, &mut dst).unwrap();
            dev.wait_copies(&copy).unwrap();
            let args = [
                dst.arg(),
                KernelArg::U32(n as u32),
                out.arg(),
                KernelArg::U32(r),
            ];
            // SAFETY: `sum_bytes` reads n bytes of `dst` and writes out[r] < rounds.
            unsafe { dev.launch(f, cfg(1, 256), &args) }.unwrap();
        }
        assert_eq!(
            dev.download_vec(&out, rounds as usize).unwrap(),
            want,
            "{}",
            dev.name()
        );
        host.wait().unwrap();
        assert!(!host.busy());
    }
}
