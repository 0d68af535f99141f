//! (in progress)
pub mod ply;
