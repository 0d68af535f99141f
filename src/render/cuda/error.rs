//! Errors of the CUDA backend: every one is a value with a one-line message that says what to
//! do, never a panic, so `--backend auto` can fall back to the CPU and print why.

/// Why the CUDA backend is unavailable or a CUDA operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error(
        "NVRTC (libnvrtc.so) not found: install the CUDA 13.0 toolkit, or run \
         `tools/nvrtc-setup.sh DIR` and add DIR/lib to LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    #[error("CUDA driver (libcuda.so) not found: no NVIDIA driver on this machine")]
    NoDriver,
    #[error("the CUDA driver reports no GPU")]
    NoDevice,
    #[error("CUDA driver call `{op}` failed: {message}")]
    Driver { op: &'static str, message: String },
    #[error("device buffer `{what}` holds {got} elements, the launch needs {need}")]
    Shape {
        what: &'static str,
        got: usize,
        need: usize,
    },
    #[error("no per-splat gradients: run a backward after the forward first")]
    NoBackward,
    #[error("kernel source {file}, line {line}: {message}")]
    Source {
        file: String,
        line: usize,
        message: String,
    },
    #[error("NVRTC failed to compile {kernel} for {arch} ({status}); compile log:\n{log}")]
    Compile {
        kernel: &'static str,
        arch: String,
        status: String,
        log: String,
    },
}

impl CudaError {
    /// Wraps a cudarc driver error with the operation that failed.
    pub fn driver(op: &'static str, e: cudarc::driver::DriverError) -> CudaError {
        CudaError::Driver {
            op,
            message: format!("{e:?}"),
        }
    }
}
