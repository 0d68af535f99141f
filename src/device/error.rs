//! Errors of the device layer: every one is a value with a one-line message (compile logs
//! excepted) that says what to do, never a panic, so `--backend auto` can fall back to the CPU
//! and print why.

/// Why a device is unavailable or a device operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error(
        "NVRTC (libnvrtc.so) not found: install the CUDA 13.0 toolkit, or run \
         `tools/nvrtc-setup.sh DIR` and add DIR/lib to LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    #[error("CUDA driver (libcuda.so) not found: no NVIDIA driver on this machine")]
    NoDriver,
    #[error("the CUDA driver reports no GPU")]
    NoDevice,
    #[error(
        "{wanted} GPUs requested but the CUDA driver reports {found} (CUDA_VISIBLE_DEVICES \
         decides which are visible): ask for at most {found}"
    )]
    TooFewDevices { wanted: usize, found: usize },
    #[error("CUDA driver call `{op}` failed: {message}")]
    Driver { op: &'static str, message: String },
    #[error(
        "the NVIDIA driver cannot load the kernels NVRTC {nvrtc} compiled: the driver supports \
         CUDA {driver} at most, and PTX from a newer NVRTC needs a newer driver. Put the NVRTC \
         of CUDA {driver} or older first on LD_LIBRARY_PATH (`tools/nvrtc-setup.sh DIR` \
         fetches 13.0, for drivers 580 and up), or update the driver"
    )]
    PtxTooNew { nvrtc: String, driver: String },
    #[error("NVRTC failed to compile {module} for {arch} ({status}); compile log:\n{log}")]
    Compile {
        module: String,
        arch: String,
        status: String,
        log: String,
    },
    #[error(
        "host emulation needs a C++20 compiler and none was found (tried {tried}); install \
         g++ or clang++, or name one in $CXX"
    )]
    NoCompiler { tried: String },
    #[error("host emulation: `{command}` failed to compile {module}; compiler output:\n{log}")]
    HostCompile {
        module: String,
        command: String,
        log: String,
    },
    #[error("host emulation: cannot load {path}: {message}")]
    Load { path: String, message: String },
    #[error("module {module} has no entry point `{entry}`")]
    NoEntryPoint { module: String, entry: String },
    #[error("kernel {kernel} failed on the host emulation (GS_EMU_SEED={seed}): {message}")]
    Kernel {
        kernel: String,
        seed: u64,
        message: String,
    },
    #[error(
        "device allocation of {requested} bytes refused: {free} bytes free of {total} \
         (emulated device; set GS_EMU_DEVICE_MEMORY to change its size)"
    )]
    OutOfMemory {
        requested: u64,
        free: u64,
        total: u64,
    },
    #[error("invalid launch of {kernel}: {message}")]
    Launch { kernel: String, message: String },
    #[error("device copy: {message}")]
    Copy { message: String },
    #[error("device timing: {message}")]
    Timing { message: String },
}

impl DeviceError {
    /// Wraps a cudarc driver error with the operation that failed.
    pub fn driver(op: &'static str, e: cudarc::driver::DriverError) -> DeviceError {
        DeviceError::Driver {
            op,
            message: format!("{e:?}"),
        }
    }
}
