//! Export formats for trained models.
//!
//! Owns [`cameras_json`], the 3DGS `cameras.json` camera list, and [`ply`], the standard 3D Gaussian Splatting PLY layout (the format every 3DGS viewer and
//! the original implementation read and write), in both directions: saving a
//! [`crate::scene::gaussians::Gaussians`] and loading one back for `gs-render`, evaluation and
//! resuming.
//!
//! Invariants: files hold *stored* (pre-activation) values exactly as [`Gaussians`] does, so a
//! save/load round trip is bit-exact; a file is written under a temporary name and renamed into
//! place, so a reader never sees a half-written model; loading parses the file with the crate's
//! one PLY parser ([`crate::import::ply`]) and looks properties up by name.
//!
//! [`Gaussians`]: crate::scene::gaussians::Gaussians

pub mod cameras_json;
pub mod ply;
