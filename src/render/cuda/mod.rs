//! The CUDA backend (in progress; see kernels.rs).

pub mod error;
pub mod kernels;

pub use error::CudaError;
