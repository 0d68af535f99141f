//! A stand-in for the CUDA driver (`libcuda.so`) and NVRTC (`libnvrtc.so`) that runs
//! ramsplat's kernels on its host emulation, so that the crate's CUDA code path executes
//! without a GPU: `src/device/cuda.rs`, the CUDA branches of the device layer and of its
//! transfers (page-locked buffers, copy streams, events) and cudarc's bindings, which the
//! emulated device (`GS_CUDA_EMULATE=1`) never reaches.
//!
//! cudarc loads both libraries with `dlopen` by name, so a directory holding this one library
//! under the names `libcuda.so` and `libnvrtc.so`, put first on `LD_LIBRARY_PATH`, makes the
//! stand-in "GPU 0" (`tools/cuda-standin.sh` builds and links it; see `README.md` here).
//!
//! # What it models, and how strictly
//! - **Compilation.** `nvrtcCompileProgram` compiles the source with the host emulation (so a
//!   kernel that does not compile fails here, with the compiler's log as NVRTC's); its "PTX"
//!   is the source itself behind a header naming the module, its `-D` constants and its
//!   `.entry` points. `cuModuleLoadData` refuses anything else (real PTX) as
//!   `CUDA_ERROR_INVALID_PTX`, as a driver refuses PTX newer than itself.
//! - **Contexts.** Every call that needs one fails with `CUDA_ERROR_INVALID_CONTEXT` unless a
//!   context is current on the calling thread, as on a GPU.
//! - **Memory.** Device memory is the emulation's (256-byte aligned, filled with `0xFF`
//!   bytes, counted against `GS_EMU_DEVICE_MEMORY`). Copies and memsets must lie inside one
//!   live allocation; a kernel's pointer arguments must be null or point into a live
//!   allocation of the launching device (a pointer of another device would fault on a GPU
//!   without peer access). Each is checked when the work is queued, and a violation is
//!   reported on stderr and makes the context's error sticky, as a fault does.
//! - **Streams are lazy.** Nothing queued on a stream runs until the host must observe it:
//!   `cuStreamSynchronize`, `cuEventSynchronize`/`cuEventQuery`, `cuCtxSynchronize`, a copy
//!   into pageable host memory (which returns when complete, as CUDA's does), `cuMemFree`
//!   (which synchronises the device), or more than [`QUEUE_DEPTH`] pending operations on one
//!   stream. That is the most hostile schedule a GPU could pick, so a missing
//!   `cuStreamWaitEvent`, a result read before its synchronisation, or a page-locked buffer
//!   overwritten before its copy ran shows up as wrong data in the tests.
//!   Two more schedules (`GS_STANDIN_SCHEDULE`) run one side eagerly, as far as its waits
//!   allow, as soon as work is queued on it, and keep the other lazy:
//!   - `copies-first`: every stream but the legacy default stream (the main queue) is eager,
//!     so a copy that does not wait for the kernels queued before it overwrites their input;
//!   - `kernels-first`: the legacy stream is eager, so a kernel that does not wait for the
//!     copy it reads runs before the copy.
//!
//!   Copies from pageable
//!   memory stage the source when queued (CUDA's rule); copies from and to page-locked memory
//!   (`cuMemHostAlloc`) read and write it when they run. Non-blocking streams order only by
//!   events; blocking ones also with the legacy default stream (the null handle).
//! - **Races.** Two operations on different streams that touch the same allocation, one of
//!   them writing (a kernel counts as writing every allocation its pointers reach), must be
//!   ordered by event waits or host synchronisations; a pair that is not is reported when the
//!   second is queued, whatever the schedule (the `hb` module: vector clocks).
//! - **Errors.** A failed kernel (the emulation's report: a divergent barrier, a bad launch)
//!   or a race is printed on stderr and makes the context's error sticky: every later call on it
//!   returns `CUDA_ERROR_LAUNCH_FAILED`. Freeing page-locked memory that a queued copy still
//!   uses is refused (stricter than CUDA, which synchronises there: the crate promises to wait
//!   for its copies first).
//! - **Devices.** `GS_STANDIN_DEVICES` (default 1) devices, each its own emulated memory, so
//!   the sharded engine's cross-device staging runs through the driver API too.
//!
//! - **Timing events.** `cuEventElapsedTime` measures between two events created without
//!   `CU_EVENT_DISABLE_TIMING` (else `CUDA_ERROR_INVALID_HANDLE`, as the driver) once both
//!   markers have run (else `CUDA_ERROR_NOT_READY`): the host time between the two markers'
//!   execution, which on a lazy stream says nothing about speed, only that the protocol holds.
//!
//! Not modelled: dynamic shared memory, graphs, peer access, unified memory, and
//! every entry point ramsplat does not call (cudarc looks symbols up lazily, so a missing one
//! panics there, naming it).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use ramsplat::device::emulation::{EmuDriver, EmuFunction};
use ramsplat::device::{LaunchConfig, ModuleSource};

mod hb;
mod nvrtc;

type CUresult = c_uint;
type CUdevice = c_int;
type Handle = *mut c_void;
type CUdeviceptr = u64;

const SUCCESS: CUresult = 0;
const INVALID_VALUE: CUresult = 1;
const OUT_OF_MEMORY: CUresult = 2;
const NOT_INITIALIZED: CUresult = 3;
const INVALID_DEVICE: CUresult = 101;
const INVALID_CONTEXT: CUresult = 201;
const INVALID_PTX: CUresult = 218;
const INVALID_HANDLE: CUresult = 400;
const NOT_READY: CUresult = 600;
/// `CU_EVENT_DISABLE_TIMING`.
const EVENT_DISABLE_TIMING: c_uint = 0x2;
const NOT_FOUND: CUresult = 500;
const ILLEGAL_ADDRESS: CUresult = 700;
const LAUNCH_FAILED: CUresult = 719;
const NOT_SUPPORTED: CUresult = 801;

/// The first line of the stand-in's "PTX": the module source for the emulation.
pub(crate) const MODULE_MAGIC: &str = "// ramsplat CUDA stand-in module: emulation source, not PTX";

/// Pending operations one stream may hold before the oldest must run (a GPU's launch queue
/// blocks the host at a depth of this order too).
pub const QUEUE_DEPTH: usize = 1024;

/// Devices without `GS_STANDIN_DEVICES` (the unit tests use three: two for cross-device
/// checks, one whose context they break on purpose).
const DEFAULT_DEVICES: usize = if cfg!(test) { 3 } else { 1 };

/// The version `cuDriverGetVersion` reports: CUDA 13.0, the GPU machines' driver.
const DRIVER_VERSION: c_int = 13000;

/// Handle ranges, so a handle of one kind passed as another is caught.
const CTX_BASE: usize = 0x1000;
const STREAM_BASE: usize = 0x10_0000;
const EVENT_BASE: usize = 0x20_0000;
const MODULE_BASE: usize = 0x30_0000;
const FUNCTION_BASE: usize = 0x40_0000;

/// When queued work runs (`GS_STANDIN_SCHEDULE`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Schedule {
    /// Every stream waits until the host must observe its work.
    Lazy,
    /// Streams other than the legacy default stream run as soon as their waits allow.
    CopiesFirst,
    /// The legacy default stream runs as soon as its waits allow.
    KernelsFirst,
}

thread_local! {
    /// The context current on this thread (its device + 1; 0: none).
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// Host memory a queued copy reads from or writes to when it runs.
enum HostSide {
    /// Pageable source, staged when the copy was queued.
    Staged(Vec<u8>),
    /// Page-locked memory at this address, touched when the copy runs.
    Pinned(usize),
}

enum Op {
    Launch {
        func: EmuFunction,
        name: String,
        cfg: LaunchConfig,
        slots: Vec<u64>,
        kinds: Vec<u8>,
    },
    HtoD {
        dst: CUdeviceptr,
        src: HostSide,
        bytes: usize,
    },
    /// Into page-locked memory (pageable destinations run at once).
    DtoH {
        dst: usize,
        src: CUdeviceptr,
        bytes: usize,
    },
    Memset {
        dst: CUdeviceptr,
        value: u8,
        bytes: usize,
    },
    /// Runs once `stream` has run its operation `seq`.
    Wait { stream: usize, seq: u64 },
    /// Where an event was recorded (`Some`: a timing event, which notes when it ran).
    Marker(Option<usize>),
}

impl Op {
    fn describe(&self) -> String {
        match self {
            Op::Launch { name, .. } => format!("launch {name}"),
            Op::HtoD { dst, src, bytes } => format!(
                "copy {bytes} B to {dst:#x} from {}",
                match src {
                    HostSide::Staged(_) => "staged pageable memory".to_string(),
                    HostSide::Pinned(p) => format!("page-locked {p:#x}"),
                }
            ),
            Op::DtoH { dst, src, bytes } => {
                format!("copy {bytes} B from {src:#x} to page-locked {dst:#x}")
            }
            Op::Memset { dst, bytes, .. } => format!("memset {bytes} B at {dst:#x}"),
            Op::Wait { stream, seq } => format!("wait for {stream:#x}#{seq}"),
            Op::Marker(_) => "event".to_string(),
        }
    }
}

/// Where an event was recorded: the stream, the marker's sequence number, and the stream's
/// happens-before clock there.
struct Recorded {
    stream: usize,
    seq: u64,
    clock: hb::Clock,
}

struct Stream {
    device: usize,
    /// Blocking streams synchronise with the legacy default stream; non-blocking ones do not.
    blocking: bool,
    /// Queued operations with their sequence numbers, oldest first.
    ops: VecDeque<(u64, Op)>,
    next_seq: u64,
}

struct Device {
    emu: EmuDriver,
    /// Primary context retain count.
    retained: u32,
    /// Live allocations: address → bytes.
    allocs: BTreeMap<u64, usize>,
    /// The legacy default stream's handle.
    legacy: usize,
    /// The sticky error, once a kernel or an access has failed.
    error: Option<String>,
}

struct Module {
    device: usize,
    functions: HashMap<String, EmuFunction>,
}

struct State {
    schedule: Schedule,
    /// `GS_STANDIN_TRACE=1`: every queued and executed operation on stderr.
    trace: bool,
    devices: Vec<Device>,
    streams: HashMap<usize, Stream>,
    /// Event → where it was last recorded.
    events: HashMap<usize, Option<Recorded>>,
    /// Events created without `CU_EVENT_DISABLE_TIMING`: the only ones
    /// `cuEventElapsedTime` measures between.
    timed: HashSet<usize>,
    /// Timing event → the sequence number of its marker that ran last, and when. Kept apart
    /// from `events` because an eager schedule runs a marker inside `cuEventRecord`, before
    /// the recording is noted there.
    marker_ran: HashMap<usize, (u64, Instant)>,
    /// Happens-before between streams, for the race check.
    hb: hb::Tracker,
    modules: HashMap<usize, Module>,
    /// Function handle → (module handle, entry name).
    functions: HashMap<usize, (usize, String)>,
    /// Page-locked allocations: address → bytes.
    pinned: BTreeMap<usize, usize>,
    next_handle: usize,
}

static STATE: OnceLock<Result<Mutex<State>, String>> = OnceLock::new();

/// The driver's state, made on first use (`cuInit`).
fn state() -> Result<MutexGuard<'static, State>, CUresult> {
    let s = STATE.get_or_init(|| {
        let count = std::env::var("GS_STANDIN_DEVICES")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(DEFAULT_DEVICES);
        let schedule = match std::env::var("GS_STANDIN_SCHEDULE").as_deref() {
            Ok("copies-first") => Schedule::CopiesFirst,
            Ok("kernels-first") => Schedule::KernelsFirst,
            Ok("lazy") | Err(_) => Schedule::Lazy,
            Ok(other) => {
                return Err(format!(
                    "GS_STANDIN_SCHEDULE={other}: expected lazy, copies-first or kernels-first"
                ))
            }
        };
        let mut devices = Vec::new();
        let mut streams = HashMap::new();
        for d in 0..count {
            let emu = EmuDriver::new().map_err(|e| e.to_string())?;
            let legacy = STREAM_BASE + d;
            streams.insert(
                legacy,
                Stream {
                    device: d,
                    blocking: true,
                    ops: VecDeque::new(),
                    next_seq: 0,
                },
            );
            devices.push(Device {
                emu,
                retained: 0,
                allocs: BTreeMap::new(),
                legacy,
                error: None,
            });
        }
        Ok(Mutex::new(State {
            schedule,
            trace: std::env::var("GS_STANDIN_TRACE").is_ok_and(|v| v == "1"),
            devices,
            streams,
            events: HashMap::new(),
            timed: HashSet::new(),
            marker_ran: HashMap::new(),
            hb: hb::Tracker::default(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            pinned: BTreeMap::new(),
            next_handle: 1024,
        }))
    });
    match s {
        Ok(m) => Ok(m.lock().unwrap_or_else(|p| p.into_inner())),
        Err(e) => {
            eprintln!("cuda stand-in: cannot start the host emulation: {e}");
            Err(NOT_INITIALIZED)
        }
    }
}

fn report(msg: &str) {
    eprintln!("cuda stand-in: {msg}");
}

impl State {
    fn handle(&mut self, base: usize) -> usize {
        self.next_handle += 1;
        base + self.next_handle
    }

    /// The current context's device, if its error is not sticky.
    fn current(&self) -> Result<usize, CUresult> {
        let c = CURRENT.with(Cell::get);
        if c == 0 || c > self.devices.len() || self.devices[c - 1].retained == 0 {
            return Err(INVALID_CONTEXT);
        }
        if self.devices[c - 1].error.is_some() {
            return Err(LAUNCH_FAILED);
        }
        Ok(c - 1)
    }

    /// Marks `device`'s context as failed, with `msg` on stderr.
    fn fail(&mut self, device: usize, msg: String) -> CUresult {
        report(&msg);
        self.devices[device].error.get_or_insert(msg);
        LAUNCH_FAILED
    }

    /// The stream behind `s` on the current device (null and `CU_STREAM_LEGACY`: its legacy
    /// stream).
    fn stream(&self, device: usize, s: Handle) -> Result<usize, CUresult> {
        let h = s as usize;
        if h == 0 || h == 1 {
            return Ok(self.devices[device].legacy);
        }
        match self.streams.get(&h) {
            Some(st) if st.device == device => Ok(h),
            _ => Err(INVALID_HANDLE),
        }
    }

    /// Whether `[addr, addr + bytes)` lies inside one live allocation of `device` (any device
    /// when `None`).
    fn inside(&self, device: Option<usize>, addr: u64, bytes: usize) -> bool {
        let check = |d: &Device| {
            d.allocs
                .range(..=addr)
                .next_back()
                .is_some_and(|(&base, &len)| {
                    addr.checked_add(bytes as u64)
                        .is_some_and(|end| end <= base + len as u64)
                })
        };
        match device {
            Some(d) => check(&self.devices[d]),
            None => self.devices.iter().any(check),
        }
    }

    /// For a copy or memset (`call`, e.g. "cuMemsetD8Async of") on `stream` of `device`: the
    /// stream's handle, after checking that device memory `[addr, addr + bytes)` lies inside
    /// one live allocation and that the host pointer is not null (`host_null`); a fault
    /// otherwise.
    fn device_range(
        &mut self,
        device: usize,
        stream: Handle,
        addr: u64,
        bytes: usize,
        host_null: bool,
        call: &str,
    ) -> Result<usize, CUresult> {
        let h = self.stream(device, stream)?;
        if host_null || !self.inside(None, addr, bytes) {
            return Err(self.fail(
                device,
                format!("{call} {addr:#x} (+{bytes}): not inside one allocation, or a null host pointer"),
            ));
        }
        Ok(h)
    }

    /// The page-locked allocation holding `[p, p + bytes)`, if any.
    fn pinned_at(&self, p: usize, bytes: usize) -> Option<usize> {
        self.pinned
            .range(..=p)
            .next_back()
            .filter(|(&base, &len)| p.checked_add(bytes).is_some_and(|e| e <= base + len))
            .map(|(&base, _)| base)
    }

    /// Queues `op` on stream `s`, after the implicit waits of the legacy stream semantics, and
    /// runs the oldest operations when the queue is full.
    fn enqueue(&mut self, s: usize, op: Op) -> Result<u64, CUresult> {
        let device = self.streams[&s].device;
        let legacy = self.devices[device].legacy;
        let mut waits = Vec::new();
        if s == legacy {
            for (&h, st) in &self.streams {
                if h != s && st.device == device && st.blocking && st.next_seq > 0 {
                    waits.push((h, st.next_seq - 1));
                }
            }
        } else if self.streams[&s].blocking {
            let l = &self.streams[&legacy];
            if l.next_seq > 0 {
                waits.push((legacy, l.next_seq - 1));
            }
        }
        for &(stream, _) in &waits {
            let clock = self.hb.clock(stream);
            self.hb.wait(s, &clock);
        }
        let tick = self.hb.issue(s);
        self.check_races(device, s, tick, &op)?;
        let st = self.streams.get_mut(&s).expect("checked by the caller");
        for (stream, seq) in waits {
            let n = st.next_seq;
            st.next_seq += 1;
            st.ops.push_back((n, Op::Wait { stream, seq }));
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        if self.trace {
            report(&format!("queue {s:#x}#{seq}: {}", op.describe()));
        }
        st.ops.push_back((seq, op));
        while self.streams[&s].ops.len() > QUEUE_DEPTH {
            let first = self.streams[&s].ops[0].0;
            self.run_through(s, first)?;
        }
        let eager = match self.schedule {
            Schedule::Lazy => false,
            Schedule::CopiesFirst => s != legacy,
            Schedule::KernelsFirst => s == legacy,
        };
        if eager {
            self.run_through(s, seq)?;
        }
        Ok(seq)
    }

    /// The allocation holding `addr`, on any device.
    fn base_of(&self, addr: u64) -> Option<u64> {
        self.devices.iter().find_map(|d| {
            d.allocs
                .range(..=addr)
                .next_back()
                .filter(|(&base, &len)| addr <= base + len as u64)
                .map(|(&base, _)| base)
        })
    }

    /// Records `op`'s accesses (tick `tick` of stream `s`) and fails the context on a race
    /// with an unordered earlier access ([`hb`]).
    fn check_races(&mut self, device: usize, s: usize, tick: u64, op: &Op) -> Result<(), CUresult> {
        let accesses: Vec<(u64, bool)> = match op {
            Op::Launch { slots, kinds, .. } => slots
                .iter()
                .zip(kinds)
                .filter(|&(&p, &k)| k == 0 && p != 0)
                .filter_map(|(&p, _)| self.base_of(p))
                .map(|b| (b, true))
                .collect(),
            Op::HtoD { dst, .. } | Op::Memset { dst, .. } => {
                self.base_of(*dst).map(|b| (b, true)).into_iter().collect()
            }
            Op::DtoH { src, .. } => self.base_of(*src).map(|b| (b, false)).into_iter().collect(),
            Op::Wait { .. } | Op::Marker(_) => Vec::new(),
        };
        for (base, write) in accesses {
            if let Err(msg) = self.hb.access(s, tick, base, write, &op.describe()) {
                return Err(self.fail(device, msg));
            }
        }
        Ok(())
    }

    /// The host has waited for every operation queued so far on stream `s`.
    fn host_waited_for(&mut self, s: usize) {
        let clock = self.hb.clock(s);
        self.hb.host_waited(&clock);
    }

    /// Runs every stream of `device` and records that the host waited for them.
    fn sync_device(&mut self, device: usize) -> Result<(), CUresult> {
        let handles: Vec<usize> = self
            .streams
            .iter()
            .filter(|(_, st)| st.device == device)
            .map(|(&h, _)| h)
            .collect();
        for &h in &handles {
            self.run_through(h, u64::MAX)?;
        }
        for h in handles {
            self.host_waited_for(h);
        }
        Ok(())
    }

    /// Runs stream `s` until its operation `seq` has run (and whatever that waits for).
    fn run_through(&mut self, s: usize, seq: u64) -> Result<(), CUresult> {
        loop {
            let Some(st) = self.streams.get_mut(&s) else {
                // Destroyed streams ran to completion first.
                return Ok(());
            };
            let device = st.device;
            match st.ops.front() {
                Some(&(n, _)) if n <= seq => {}
                _ => return Ok(()),
            }
            let (n, op) = st.ops.pop_front().expect("just looked");
            if self.trace {
                report(&format!("run   {s:#x}#{n}: {}", op.describe()));
            }
            if self.devices[device].error.is_some() {
                return Err(LAUNCH_FAILED);
            }
            self.execute(device, n, op)?;
        }
    }

    fn execute(&mut self, device: usize, seq: u64, op: Op) -> Result<(), CUresult> {
        match op {
            Op::Launch {
                func,
                name,
                cfg,
                mut slots,
                kinds,
            } => {
                let mut ptrs: Vec<*mut c_void> =
                    slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
                // SAFETY: `func` is an entry of a module loaded on this device; `ptrs` point
                // to one 8-byte slot per parameter holding the value cuLaunchKernel was given
                // (copied with the parameter's own size), and `kinds` are the kernel's own
                // parameter kinds; every pointer argument was checked to lie in a live
                // allocation of this device when the launch was queued.
                let r = unsafe {
                    self.devices[device]
                        .emu
                        .launch(&func, &name, cfg, &mut ptrs, &kinds)
                };
                if let Err(e) = r {
                    return Err(self.fail(device, format!("kernel {name} failed: {e}")));
                }
            }
            Op::HtoD { dst, src, bytes } => {
                if !self.inside(None, dst, bytes) {
                    return Err(self.fail(
                        device,
                        format!("a queued copy into {dst:#x} (+{bytes}) outlived its allocation"),
                    ));
                }
                let from = match &src {
                    HostSide::Staged(v) => v.as_ptr(),
                    HostSide::Pinned(p) => {
                        if self.pinned_at(*p, bytes).is_none() {
                            return Err(self.fail(
                                device,
                                format!("a queued copy reads page-locked {p:#x} after its free"),
                            ));
                        }
                        *p as *const u8
                    }
                };
                // SAFETY: `dst..dst + bytes` lies in a live device allocation (checked just
                // above); the source is the staged copy or a live page-locked allocation
                // (checked) of at least `bytes` bytes.
                unsafe { std::ptr::copy_nonoverlapping(from, dst as *mut u8, bytes) };
            }
            Op::DtoH { dst, src, bytes } => {
                if !self.inside(None, src, bytes) || self.pinned_at(dst, bytes).is_none() {
                    return Err(self.fail(
                        device,
                        format!(
                            "a queued copy from {src:#x} into page-locked {dst:#x} (+{bytes}) \
                             outlived one of its buffers"
                        ),
                    ));
                }
                // SAFETY: both ranges lie in live allocations (checked just above).
                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes) };
            }
            Op::Memset { dst, value, bytes } => {
                if !self.inside(None, dst, bytes) {
                    return Err(self.fail(
                        device,
                        format!("a queued memset of {dst:#x} (+{bytes}) outlived its allocation"),
                    ));
                }
                // SAFETY: the range lies in a live device allocation (checked just above).
                unsafe { std::ptr::write_bytes(dst as *mut u8, value, bytes) };
            }
            Op::Wait { stream, seq } => self.run_through(stream, seq)?,
            Op::Marker(None) => {}
            Op::Marker(Some(event)) => {
                self.marker_ran.insert(event, (seq, Instant::now()));
            }
        }
        Ok(())
    }

    /// Whether any queued operation touches page-locked `[p, p + bytes)`.
    fn pinned_in_use(&self, p: usize, bytes: usize) -> bool {
        let hit = |a: usize, n: usize| a < p + bytes && p < a + n;
        self.streams
            .values()
            .flat_map(|s| s.ops.iter())
            .any(|(_, op)| match op {
                Op::HtoD {
                    src: HostSide::Pinned(a),
                    bytes: n,
                    ..
                } => hit(*a, *n),
                Op::DtoH { dst, bytes: n, .. } => hit(*dst, *n),
                _ => false,
            })
    }
}

/// Runs `f` on the state with the current device, converting the result.
fn with_current(f: impl FnOnce(&mut State, usize) -> Result<(), CUresult>) -> CUresult {
    let mut st = match state() {
        Ok(s) => s,
        Err(e) => return e,
    };
    match st.current() {
        Ok(d) => match f(&mut st, d) {
            Ok(()) => SUCCESS,
            Err(e) => e,
        },
        Err(e) => e,
    }
}

// ---- initialisation and devices --------------------------------------------------------------

#[no_mangle]
pub extern "C" fn cuInit(_flags: c_uint) -> CUresult {
    match state() {
        Ok(_) => SUCCESS,
        Err(e) => e,
    }
}

/// # Safety
/// `v` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CUresult {
    if v.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: non-null and writable (the caller's contract).
    unsafe { *v = DRIVER_VERSION };
    SUCCESS
}

/// # Safety
/// `count` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    if count.is_null() {
        return INVALID_VALUE;
    }
    match state() {
        Ok(s) => {
            // SAFETY: non-null and writable (the caller's contract).
            unsafe { *count = s.devices.len() as c_int };
            SUCCESS
        }
        Err(e) => e,
    }
}

/// # Safety
/// `dev` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut CUdevice, ordinal: c_int) -> CUresult {
    let n = match state() {
        Ok(s) => s.devices.len(),
        Err(e) => return e,
    };
    if dev.is_null() || ordinal < 0 || ordinal as usize >= n {
        return INVALID_DEVICE;
    }
    // SAFETY: non-null and writable (the caller's contract).
    unsafe { *dev = ordinal };
    SUCCESS
}

fn check_device(dev: CUdevice) -> Result<usize, CUresult> {
    let s = state()?;
    if dev < 0 || dev as usize >= s.devices.len() {
        return Err(INVALID_DEVICE);
    }
    Ok(dev as usize)
}

/// # Safety
/// `name` must be writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    if let Err(e) = check_device(dev) {
        return e;
    }
    if name.is_null() || len <= 0 {
        return INVALID_VALUE;
    }
    let text = format!("ramsplat CUDA stand-in {dev} (host emulation)");
    let n = text.len().min(len as usize - 1);
    // SAFETY: `name` is writable for `len` > n bytes (the caller's contract).
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), name.cast::<u8>(), n);
        *name.add(n) = 0;
    }
    SUCCESS
}

/// # Safety
/// `value` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attrib: c_uint,
    dev: CUdevice,
) -> CUresult {
    if let Err(e) = check_device(dev) {
        return e;
    }
    if value.is_null() {
        return INVALID_VALUE;
    }
    // The values of an H100 (compute capability 9.0) for what the crate and cudarc ask.
    let v = match attrib {
        1 => 1024,      // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,  // MAX_BLOCK_DIM_X, _Y
        4 => 64,        // MAX_BLOCK_DIM_Z
        5 => i32::MAX,  // MAX_GRID_DIM_X
        6 | 7 => 65535, // MAX_GRID_DIM_Y, _Z
        8 => 49152,     // MAX_SHARED_MEMORY_PER_BLOCK
        10 => 32,       // WARP_SIZE
        16 => 132,      // MULTIPROCESSOR_COUNT
        75 => 9,        // COMPUTE_CAPABILITY_MAJOR
        76 => 0,        // COMPUTE_CAPABILITY_MINOR
        115 => 0,       // MEMORY_POOLS_SUPPORTED: no stream-ordered allocator here
        _ => {
            report(&format!("cuDeviceGetAttribute({attrib}) is not modelled"));
            return INVALID_VALUE;
        }
    };
    // SAFETY: non-null and writable (the caller's contract).
    unsafe { *value = v };
    SUCCESS
}

// ---- contexts --------------------------------------------------------------------------------

/// # Safety
/// `ctx` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut Handle, dev: CUdevice) -> CUresult {
    let d = match check_device(dev) {
        Ok(d) => d,
        Err(e) => return e,
    };
    if ctx.is_null() {
        return INVALID_VALUE;
    }
    match state() {
        Ok(mut s) => {
            s.devices[d].retained += 1;
            // SAFETY: non-null and writable (the caller's contract).
            unsafe { *ctx = (CTX_BASE + d) as Handle };
            SUCCESS
        }
        Err(e) => e,
    }
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    let d = match check_device(dev) {
        Ok(d) => d,
        Err(e) => return e,
    };
    let mut s = match state() {
        Ok(s) => s,
        Err(e) => return e,
    };
    if s.devices[d].retained == 0 {
        return INVALID_CONTEXT;
    }
    s.devices[d].retained -= 1;
    if s.devices[d].retained == 0 {
        // The context goes, and with it its memory, its queued work and its error. Memory
        // still allocated then was leaked by the program (every DeviceBuffer frees its own):
        // said on stderr, which tools/cuda-standin.sh treats as a failure.
        let device = &mut s.devices[d];
        let leaked = std::mem::take(&mut device.allocs);
        if !leaked.is_empty() && device.error.is_none() {
            report(&format!(
                "device {d}: {} allocations ({} bytes) still live when its context was \
                 released: leaked",
                leaked.len(),
                leaked.values().sum::<usize>()
            ));
        }
        for (&addr, &bytes) in &leaked {
            // SAFETY: each came from this device's `alloc` with `bytes` (the map, now
            // emptied, so each is freed once); the context's queued work is dropped below
            // and never runs.
            unsafe { device.emu.free(addr, bytes) };
        }
        device.error = None;
        for addr in leaked.keys() {
            s.hb.forget(*addr);
        }
        for st in s.streams.values_mut().filter(|st| st.device == d) {
            st.ops.clear();
        }
    }
    SUCCESS
}

fn ctx_device(ctx: Handle) -> Option<usize> {
    (ctx as usize).checked_sub(CTX_BASE)
}

/// # Safety
/// `ctx` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut Handle) -> CUresult {
    if ctx.is_null() {
        return INVALID_VALUE;
    }
    let c = CURRENT.with(Cell::get);
    let h = if c == 0 {
        std::ptr::null_mut()
    } else {
        (CTX_BASE + c - 1) as Handle
    };
    // SAFETY: non-null and writable (the caller's contract).
    unsafe { *ctx = h };
    SUCCESS
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: Handle) -> CUresult {
    if ctx.is_null() {
        CURRENT.with(|c| c.set(0));
        return SUCCESS;
    }
    let s = match state() {
        Ok(s) => s,
        Err(e) => return e,
    };
    match ctx_device(ctx) {
        Some(d) if d < s.devices.len() && s.devices[d].retained > 0 => {
            CURRENT.with(|c| c.set(d + 1));
            SUCCESS
        }
        _ => INVALID_CONTEXT,
    }
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    with_current(|s, d| s.sync_device(d))
}

// ---- memory ----------------------------------------------------------------------------------

/// # Safety
/// Both pointers must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    if free.is_null() || total.is_null() {
        return INVALID_VALUE;
    }
    with_current(|s, d| {
        let (f, t) = s.devices[d].emu.memory();
        // SAFETY: non-null and writable (the caller's contract).
        unsafe {
            *free = f as usize;
            *total = t as usize;
        }
        Ok(())
    })
}

/// # Safety
/// `dptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    if dptr.is_null() || bytes == 0 {
        return INVALID_VALUE;
    }
    with_current(|s, d| {
        let a = s.devices[d].emu.alloc(bytes).map_err(|_| OUT_OF_MEMORY)?;
        s.devices[d].allocs.insert(a, bytes);
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { *dptr = a };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    with_current(|s, d| {
        let owner = (0..s.devices.len()).find(|&o| s.devices[o].allocs.contains_key(&dptr));
        let Some(o) = owner else {
            report(&format!(
                "cuMemFree of {dptr:#x}, which is no live allocation"
            ));
            return Err(INVALID_VALUE);
        };
        // cuMemFree synchronises: queued work that uses the memory runs first.
        s.sync_device(d)?;
        if o != d {
            s.sync_device(o)?;
        }
        s.hb.forget(dptr);
        let bytes = s.devices[o].allocs.remove(&dptr).expect("found above");
        // SAFETY: `dptr` came from this device's `alloc` with `bytes` (the map), is removed
        // from the map so it is freed once, and no queued work is left that could use it.
        unsafe { s.devices[o].emu.free(dptr, bytes) };
        Ok(())
    })
}

/// # Safety
/// `p` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    p: *mut *mut c_void,
    bytes: usize,
    _flags: c_uint,
) -> CUresult {
    if p.is_null() || bytes == 0 {
        return INVALID_VALUE;
    }
    with_current(|s, _| {
        let layout = std::alloc::Layout::from_size_align(bytes, 4096).map_err(|_| INVALID_VALUE)?;
        // SAFETY: the layout has a non-zero size.
        let a = unsafe { std::alloc::alloc_zeroed(layout) };
        if a.is_null() {
            return Err(OUT_OF_MEMORY);
        }
        s.pinned.insert(a as usize, bytes);
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { *p = a.cast() };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    with_current(|s, _| {
        let a = p as usize;
        let Some(&bytes) = s.pinned.get(&a) else {
            report(&format!(
                "cuMemFreeHost of {a:#x}, which is no page-locked allocation"
            ));
            return Err(INVALID_VALUE);
        };
        if s.pinned_in_use(a, bytes) {
            report(&format!(
                "cuMemFreeHost of {a:#x} while a queued copy still uses it: wait for the \
                 copy's event first"
            ));
            return Err(INVALID_VALUE);
        }
        s.pinned.remove(&a);
        let layout = std::alloc::Layout::from_size_align(bytes, 4096).expect("made so above");
        // SAFETY: allocated by cuMemHostAlloc with this layout, removed from the map so it is
        // freed once, and no queued copy uses it (checked above).
        unsafe { std::alloc::dealloc(a as *mut u8, layout) };
        Ok(())
    })
}

/// # Safety
/// `src` must be readable for `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    with_current(|s, d| {
        let h = s.device_range(
            d,
            stream,
            dst,
            bytes,
            src.is_null(),
            "cuMemcpyHtoDAsync into",
        )?;
        let side = match s.pinned_at(src as usize, bytes) {
            Some(_) => HostSide::Pinned(src as usize),
            None => {
                // SAFETY: readable for `bytes` bytes (the caller's contract).
                let v = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), bytes) };
                HostSide::Staged(v.to_vec())
            }
        };
        s.enqueue(
            h,
            Op::HtoD {
                dst,
                src: side,
                bytes,
            },
        )?;
        Ok(())
    })
}

/// # Safety
/// `dst` must be writable for `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    with_current(|s, d| {
        let h = s.device_range(
            d,
            stream,
            src,
            bytes,
            dst.is_null(),
            "cuMemcpyDtoHAsync from",
        )?;
        if s.pinned_at(dst as usize, bytes).is_some() {
            s.enqueue(
                h,
                Op::DtoH {
                    dst: dst as usize,
                    src,
                    bytes,
                },
            )?;
            return Ok(());
        }
        // Into pageable memory the copy returns once complete: everything before it runs.
        let seq = s.enqueue(h, Op::Marker(None))?;
        s.run_through(h, seq)?;
        s.host_waited_for(h);
        // SAFETY: `src..src + bytes` lies in a live allocation (checked above), whose queued
        // writers have run; `dst` is writable for `bytes` bytes (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.cast::<u8>(), bytes) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    value: u8,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    with_current(|s, d| {
        let h = s.device_range(d, stream, dst, bytes, false, "cuMemsetD8Async of")?;
        s.enqueue(h, Op::Memset { dst, value, bytes })?;
        Ok(())
    })
}

// ---- streams and events ----------------------------------------------------------------------

/// # Safety
/// `stream` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut Handle, flags: c_uint) -> CUresult {
    if stream.is_null() || flags > 1 {
        return INVALID_VALUE;
    }
    with_current(|s, d| {
        let h = s.handle(STREAM_BASE);
        s.streams.insert(
            h,
            Stream {
                device: d,
                blocking: flags == 0,
                ops: VecDeque::new(),
                next_seq: 0,
            },
        );
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { *stream = h as Handle };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(stream: Handle) -> CUresult {
    with_current(|s, d| {
        let h = s.stream(d, stream)?;
        if h == s.devices[d].legacy {
            return Err(INVALID_HANDLE);
        }
        // Work still queued completes first (the resources go when it has).
        s.run_through(h, u64::MAX)?;
        s.streams.remove(&h);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuStreamSynchronize(stream: Handle) -> CUresult {
    with_current(|s, d| {
        let h = s.stream(d, stream)?;
        s.run_through(h, u64::MAX)?;
        s.host_waited_for(h);
        Ok(())
    })
}

/// # Safety
/// `event` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut Handle, flags: c_uint) -> CUresult {
    if event.is_null() {
        return INVALID_VALUE;
    }
    with_current(|s, _| {
        let h = s.handle(EVENT_BASE);
        s.events.insert(h, None);
        if flags & EVENT_DISABLE_TIMING == 0 {
            s.timed.insert(h);
        }
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { *event = h as Handle };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuEventRecord(event: Handle, stream: Handle) -> CUresult {
    with_current(|s, d| {
        let h = s.stream(d, stream)?;
        if !s.events.contains_key(&(event as usize)) {
            return Err(INVALID_HANDLE);
        }
        let timed = s.timed.contains(&(event as usize));
        let seq = s.enqueue(h, Op::Marker(timed.then_some(event as usize)))?;
        let clock = s.hb.clock(h);
        s.events.insert(
            event as usize,
            Some(Recorded {
                stream: h,
                seq,
                clock,
            }),
        );
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuStreamWaitEvent(stream: Handle, event: Handle, _flags: c_uint) -> CUresult {
    with_current(|s, d| {
        let h = s.stream(d, stream)?;
        let (stream, seq, clock) = match s.events.get(&(event as usize)) {
            None => return Err(INVALID_HANDLE),
            // An event never recorded is complete.
            Some(None) => return Ok(()),
            Some(Some(r)) => (r.stream, r.seq, r.clock.clone()),
        };
        s.hb.wait(h, &clock);
        s.enqueue(h, Op::Wait { stream, seq })?;
        Ok(())
    })
}

fn event_wait(event: Handle) -> CUresult {
    with_current(|s, _| {
        let (stream, seq, clock) = match s.events.get(&(event as usize)) {
            None => return Err(INVALID_HANDLE),
            Some(None) => return Ok(()),
            Some(Some(r)) => (r.stream, r.seq, r.clock.clone()),
        };
        s.run_through(stream, seq)?;
        s.hb.host_waited(&clock);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuEventSynchronize(event: Handle) -> CUresult {
    event_wait(event)
}

/// Runs the work before the event, then reports it complete: a lazy stream polled in a loop
/// must still make progress.
#[no_mangle]
pub extern "C" fn cuEventQuery(event: Handle) -> CUresult {
    event_wait(event)
}

/// Milliseconds between two completed timing events, as the driver: `CUDA_ERROR_INVALID_HANDLE`
/// for an event created with `CU_EVENT_DISABLE_TIMING` or never recorded,
/// `CUDA_ERROR_NOT_READY` while either has not run (nothing is run here to complete it).
///
/// # Safety
/// `ms` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut f32,
    start: Handle,
    end: Handle,
) -> CUresult {
    if ms.is_null() {
        return INVALID_VALUE;
    }
    with_current(|s, _| {
        let ran_at = |e: Handle| -> Result<Option<Instant>, CUresult> {
            if !s.timed.contains(&(e as usize)) {
                return Err(INVALID_HANDLE);
            }
            match s.events.get(&(e as usize)) {
                // Complete when the marker of its latest recording has run.
                Some(Some(r)) => Ok(s
                    .marker_ran
                    .get(&(e as usize))
                    .filter(|(seq, _)| *seq == r.seq)
                    .map(|(_, at)| *at)),
                _ => Err(INVALID_HANDLE),
            }
        };
        let (Some(a), Some(b)) = (ran_at(start)?, ran_at(end)?) else {
            return Err(NOT_READY);
        };
        let signed = if b >= a {
            b.duration_since(a).as_secs_f64()
        } else {
            -a.duration_since(b).as_secs_f64()
        };
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { *ms = (signed * 1e3) as f32 };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(event: Handle) -> CUresult {
    // Allowed without a current context check of the error: destroying is cleanup.
    let mut s = match state() {
        Ok(s) => s,
        Err(e) => return e,
    };
    s.timed.remove(&(event as usize));
    s.marker_ran.remove(&(event as usize));
    match s.events.remove(&(event as usize)) {
        Some(_) => SUCCESS,
        None => INVALID_HANDLE,
    }
}

// ---- modules and launches --------------------------------------------------------------------

/// Parses the stand-in's module text (see [`nvrtc`]) back into what the emulation compiles.
fn parse_module(text: &str) -> Option<ModuleSource> {
    let mut lines = text.splitn(2, '\n');
    if lines.next()? != MODULE_MAGIC {
        return None;
    }
    let mut rest = lines.next()?;
    let mut name = None;
    let mut defines = Vec::new();
    let mut entry_points = Vec::new();
    loop {
        let (line, tail) = rest.split_once('\n')?;
        rest = tail;
        if let Some(n) = line.strip_prefix("// name: ") {
            name = Some(n.to_string());
        } else if let Some(d) = line.strip_prefix("// define: ") {
            let (k, v) = d.split_once('=')?;
            defines.push((nvrtc::intern(k), v.to_string()));
        } else if let Some(e) = line.strip_prefix(".entry ") {
            entry_points.push(nvrtc::intern(e));
        } else if line == "// source:" {
            break;
        } else {
            return None;
        }
    }
    Some(ModuleSource {
        name: name?,
        source: rest.to_string(),
        entry_points,
        defines,
    })
}

/// # Safety
/// `image` must be a NUL-terminated module text; `module` writable.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> CUresult {
    if module.is_null() || image.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: NUL-terminated (the caller's contract).
    let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_string_lossy();
    let Some(src) = parse_module(&text) else {
        return INVALID_PTX;
    };
    with_current(|s, d| {
        let funcs = s.devices[d].emu.load_module(&src).map_err(|e| {
            report(&format!("cannot load {}: {e}", src.name));
            INVALID_PTX
        })?;
        let h = s.handle(MODULE_BASE);
        s.modules.insert(
            h,
            Module {
                device: d,
                functions: funcs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            },
        );
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { *module = h as Handle };
        Ok(())
    })
}

/// # Safety
/// `name` must be NUL-terminated; `func` writable.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    func: *mut Handle,
    module: Handle,
    name: *const c_char,
) -> CUresult {
    if func.is_null() || name.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: NUL-terminated (the caller's contract).
    let name = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    with_current(|s, _| {
        let m = s.modules.get(&(module as usize)).ok_or(INVALID_HANDLE)?;
        if !m.functions.contains_key(&name) {
            return Err(NOT_FOUND);
        }
        let h = s.handle(FUNCTION_BASE);
        s.functions.insert(h, (module as usize, name));
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { *func = h as Handle };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(module: Handle) -> CUresult {
    let mut s = match state() {
        Ok(s) => s,
        Err(e) => return e,
    };
    // Queued launches keep their function (and its library) alive on their own.
    match s.modules.remove(&(module as usize)) {
        Some(_) => {
            s.functions.retain(|_, (m, _)| *m != module as usize);
            SUCCESS
        }
        None => INVALID_HANDLE,
    }
}

/// # Safety
/// `params` must hold one pointer per kernel parameter, each readable for the parameter's
/// size (cuLaunchKernel's contract).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: Handle,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared_bytes: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    with_current(|s, d| {
        let h = s.stream(d, stream)?;
        let (module, name) = s
            .functions
            .get(&(f as usize))
            .cloned()
            .ok_or(INVALID_HANDLE)?;
        let m = s.modules.get(&module).ok_or(INVALID_HANDLE)?;
        if m.device != d {
            return Err(INVALID_HANDLE);
        }
        let func = m.functions[&name].clone();
        if !extra.is_null() || shared_bytes != 0 {
            report(&format!(
                "{name}: `extra` and dynamic shared memory are not modelled"
            ));
            return Err(NOT_SUPPORTED);
        }
        let threads = bx as u64 * by as u64 * bz as u64;
        if gx == 0
            || gy == 0
            || gz == 0
            || threads == 0
            || threads > 1024
            || bx > 1024
            || by > 1024
            || bz > 64
            || gy > 65535
            || gz > 65535
            || gx > i32::MAX as c_uint
        {
            report(&format!(
                "{name}: launch grid ({gx}, {gy}, {gz}) × block ({bx}, {by}, {bz}) exceeds \
                 the device's limits"
            ));
            return Err(INVALID_VALUE);
        }
        let n = func.params().len();
        if n > 0 && params.is_null() {
            return Err(INVALID_VALUE);
        }
        let mut slots = Vec::with_capacity(n);
        let mut kinds = Vec::with_capacity(n);
        for (i, &(kind, size)) in func.params().iter().enumerate() {
            // SAFETY: `params` holds one readable pointer per parameter, each to a value of
            // the parameter's size (cuLaunchKernel's contract, the caller's).
            let p = unsafe { *params.add(i) }.cast::<u8>();
            let mut slot = 0u64;
            let size = (size as usize).min(8);
            // SAFETY: as above; `slot` has 8 ≥ size bytes.
            unsafe { std::ptr::copy_nonoverlapping(p, (&mut slot as *mut u64).cast::<u8>(), size) };
            if kind == 0 && slot != 0 && !s.inside(Some(d), slot, 0) {
                let msg = format!(
                    "kernel {name}: pointer argument {i} ({slot:#x}) is in no live allocation \
                     of device {d} (a GPU would fault: illegal address)"
                );
                report(&msg);
                s.devices[d].error.get_or_insert(msg);
                return Err(ILLEGAL_ADDRESS);
            }
            slots.push(slot);
            kinds.push(kind);
        }
        s.enqueue(
            h,
            Op::Launch {
                func,
                name,
                cfg: LaunchConfig {
                    grid: (gx, gy, gz),
                    block: (bx, by, bz),
                },
                slots,
                kinds,
            },
        )?;
        Ok(())
    })
}

// ---- error strings ---------------------------------------------------------------------------

fn error_text(e: CUresult) -> (&'static CStr, &'static CStr) {
    match e {
        SUCCESS => (c"CUDA_SUCCESS", c"no error"),
        INVALID_VALUE => (c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
        OUT_OF_MEMORY => (c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
        NOT_INITIALIZED => (c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
        INVALID_DEVICE => (c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
        INVALID_CONTEXT => (c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
        INVALID_PTX => (c"CUDA_ERROR_INVALID_PTX", c"a PTX JIT compilation failed"),
        INVALID_HANDLE => (c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
        NOT_FOUND => (c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
        ILLEGAL_ADDRESS => (
            c"CUDA_ERROR_ILLEGAL_ADDRESS",
            c"an illegal memory access was encountered",
        ),
        LAUNCH_FAILED => (c"CUDA_ERROR_LAUNCH_FAILED", c"unspecified launch failure"),
        NOT_SUPPORTED => (c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
        _ => (c"CUDA_ERROR_UNKNOWN", c"unknown error"),
    }
}

/// # Safety
/// `s` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(e: CUresult, s: *mut *const c_char) -> CUresult {
    if s.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: non-null and writable (the caller's contract); the string is static.
    unsafe { *s = error_text(e).0.as_ptr() };
    SUCCESS
}

/// # Safety
/// `s` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(e: CUresult, s: *mut *const c_char) -> CUresult {
    if s.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: non-null and writable (the caller's contract); the string is static.
    unsafe { *s = error_text(e).1.as_ptr() };
    SUCCESS
}

#[cfg(test)]
mod tests;
