//! (in progress)
pub mod cache;
pub mod sampler;
