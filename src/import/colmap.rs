//! (in progress) COLMAP sparse models.
use super::{ImportError, ImportOptions, ImportedScene};
use std::path::Path;

/// A COLMAP camera as stored (`cameras.bin/txt`).
#[derive(Clone, Debug, PartialEq)]
pub struct ColmapCamera {
    pub id: u32,
    pub model_id: i32,
    pub width: u64,
    pub height: u64,
    pub params: Vec<f64>,
}

/// A COLMAP image as stored (`images.bin/txt`); 2D observations are not kept.
#[derive(Clone, Debug, PartialEq)]
pub struct ColmapImage {
    pub id: u32,
    /// World-to-camera rotation (w, x, y, z).
    pub qvec: [f64; 4],
    pub tvec: [f64; 3],
    pub camera_id: u32,
    pub name: String,
}

/// A COLMAP 3D point as stored (`points3D.bin/txt`); the track is not kept.
#[derive(Clone, Debug, PartialEq)]
pub struct ColmapPoint {
    pub id: u64,
    pub xyz: [f64; 3],
    pub rgb: [u8; 3],
    pub error: f64,
}

/// Which encoding of a sparse model to read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Binary,
    Text,
}

/// Writes `cameras`, `images` and `points3D` in `encoding` into `dir` (created if needed).
/// Images are written with empty 2D observation lists; points with empty tracks.
pub fn write_model(
    dir: &Path,
    encoding: Encoding,
    cameras: &[ColmapCamera],
    images: &[ColmapImage],
    points: &mut dyn Iterator<Item = ColmapPoint>,
) -> Result<(), ImportError> {
    let _ = (encoding, cameras, images, points);
    Err(ImportError::invalid(dir, "COLMAP writer not built yet"))
}

pub fn import(path: &Path, _options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    Err(ImportError::invalid(path, "colmap importer not built yet"))
}
