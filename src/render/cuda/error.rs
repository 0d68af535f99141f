//! Errors of the CUDA rasterizer: every one is a value with a one-line message that says what
//! to do, never a panic, so `--backend auto` can fall back to the CPU and print why.

use crate::device::DeviceError;

/// Why the CUDA rasterizer is unavailable or one of its operations failed.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// The device layer failed (no GPU, no compiler, a driver call, a kernel).
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("device buffer `{what}` holds {got} elements, the launch needs {need}")]
    Shape {
        what: &'static str,
        got: usize,
        need: usize,
    },
    #[error("kernel source {file}, line {line}: {message}")]
    Source {
        file: String,
        line: usize,
        message: String,
    },
    #[error("no per-splat gradients: run a backward after the forward first")]
    NoBackward,
}
