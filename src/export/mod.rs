//! Export formats for trained models, and [`nerfstudio`], a pack's views, cameras, split and
//! points as a nerfstudio-style folder (`gs-pack export`) for other trainers.
//!
//! Owns [`cameras_json`], the 3DGS `cameras.json` camera list, [`spz`] and [`splat`] (the
//! compressed and web-viewer model formats, read and written), and [`ply`], the standard 3D Gaussian Splatting PLY layout (the format every 3DGS viewer and
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
pub mod nerfstudio;
pub mod ply;
pub mod splat;
pub mod spz;

use std::path::Path;

use crate::scene::gaussians::Gaussians;

/// The model formats a trained model can be written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelFormat {
    Ply,
    Spz,
    Splat,
}

impl ModelFormat {
    /// The format a file name's extension selects (`.ply`, `.spz`, `.splat`).
    pub fn from_path(path: &Path) -> Option<ModelFormat> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        ModelFormat::from_name(&ext)
    }

    /// `ply`, `spz` or `splat`.
    pub fn from_name(name: &str) -> Option<ModelFormat> {
        match name {
            "ply" => Some(ModelFormat::Ply),
            "spz" => Some(ModelFormat::Spz),
            "splat" => Some(ModelFormat::Splat),
            _ => None,
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            ModelFormat::Ply => "ply",
            ModelFormat::Spz => "spz",
            ModelFormat::Splat => "splat",
        }
    }
}

/// Why a model could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ModelIoError {
    #[error(transparent)]
    Ply(#[from] ply::GaussianPlyError),
    #[error(transparent)]
    Spz(#[from] spz::SpzError),
    #[error(transparent)]
    Splat(#[from] splat::SplatError),
    #[error("{}: unknown model format (expected .ply, .spz or .splat)", path.display())]
    UnknownFormat { path: std::path::PathBuf },
}

/// Loads a model in the format its extension names (PLY with `ply_options`).
pub fn load_model(path: &Path, ply_options: &ply::LoadOptions) -> Result<Gaussians, ModelIoError> {
    match ModelFormat::from_path(path) {
        Some(ModelFormat::Ply) => Ok(ply::load(path, ply_options)?),
        Some(ModelFormat::Spz) => Ok(spz::load(path)?),
        Some(ModelFormat::Splat) => Ok(splat::load(path)?),
        None => Err(ModelIoError::UnknownFormat {
            path: path.to_owned(),
        }),
    }
}

/// Saves a model in `format` (binary PLY for [`ModelFormat::Ply`]).
pub fn save_model(path: &Path, g: &Gaussians, format: ModelFormat) -> Result<(), ModelIoError> {
    match format {
        ModelFormat::Ply => Ok(ply::save(path, g, ply::PlyEncoding::BinaryLittleEndian)?),
        ModelFormat::Spz => Ok(spz::save(path, g)?),
        ModelFormat::Splat => Ok(splat::save(path, g)?),
    }
}

/// The checks [`ply::save`] makes (consistent lengths, finite values), for every format.
pub(crate) fn validate_model(g: &Gaussians) -> Result<(), String> {
    ply::validate_for_save(g)
}

/// Writes `bytes` to `path` atomically ([`crate::fsutil::write_atomic`]), so a reader never
/// sees a partial file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::fsutil::write_atomic(path, bytes)
}
