//! Importers: turn the datasets people have into a format-neutral description that
//! [`crate::pack`] writes into shards.
//!
//! An importer reads *metadata* eagerly (cameras, poses, image paths: small) and *bulk data*
//! lazily: images are decoded one at a time by the pack pipeline through [`image`], and point
//! clouds are streamed in bounded chunks through [`PointSource`], so importing a multi-GB PLY or
//! a points3D.bin of millions of points never holds the whole cloud.
//!
//! Invariants of an [`ImportedScene`] returned by [`open`]:
//! - every [`ViewSource::camera`] passed [`Camera::validate`] and describes the image file at its
//!   native resolution *before* undistortion;
//! - [`ViewSource::distortion`] is in OpenCV's radial–tangential form (COLMAP SIMPLE_RADIAL,
//!   RADIAL, OPENCV, FULL_OPENCV and NeRF `k1 k2 p1 p2` all map to it); fisheye and other models
//!   are refused at import time with a message, never silently treated as pinhole;
//! - views are in a stable order (sorted by image name), so packs are reproducible.

pub mod colmap;
pub mod image;
pub mod nerf;
pub mod ply;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::scene::camera::{Camera, CameraError};
use crate::shard::Split;

/// Which importer to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Auto,
    Colmap,
    Nerf,
    Ply,
}

/// Importer options shared by every format.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Refuse (instead of skipping with a warning) frames whose image file is missing.
    pub strict: bool,
    /// Parse metadata only and do not require image files to exist (parser tests, `info` of a
    /// sparse model without its images).
    pub metadata_only: bool,
}

/// OpenCV radial–tangential distortion in normalised camera coordinates:
/// with `r² = x² + y²`,
/// `x_d = x·(1 + k1 r² + k2 r⁴ + k3 r⁶)/(1 + k4 r² + k5 r⁴ + k6 r⁶) + 2 p1 x y + p2 (r² + 2x²)`,
/// `y_d = y·(same radial factor) + p1 (r² + 2y²) + 2 p2 x y`.
/// All-zero coefficients mean an ideal pinhole.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Distortion {
    /// k1..k6 (k4..k6 are the rational model's denominator; zero for all but FULL_OPENCV).
    pub k: [f64; 6],
    /// p1, p2.
    pub p: [f64; 2],
}

impl Distortion {
    pub const NONE: Distortion = Distortion {
        k: [0.0; 6],
        p: [0.0; 2],
    };

    pub fn is_none(&self) -> bool {
        self.k.iter().chain(&self.p).all(|&c| c == 0.0)
    }

    /// Maps an undistorted normalised point to its distorted position.
    pub fn distort(&self, x: f64, y: f64) -> (f64, f64) {
        let [k1, k2, k3, k4, k5, k6] = self.k;
        let [p1, p2] = self.p;
        let r2 = x * x + y * y;
        let radial = (1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1.0 + r2 * (k4 + r2 * (k5 + r2 * k6)));
        (
            x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x),
            y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y,
        )
    }
}

/// One view of a dataset as found on disk.
#[derive(Clone, Debug)]
pub struct ViewSource {
    /// Name as the dataset spells it (relative image path); unique within a scene.
    pub name: String,
    /// Where the image file is.
    pub image_path: PathBuf,
    /// The camera of the image file at its native resolution, before undistortion.
    pub camera: Camera,
    pub distortion: Distortion,
    /// A split the dataset itself assigns (NeRF `transforms_test.json`); `None` leaves it to
    /// `--test-every`.
    pub split: Option<Split>,
}

/// A chunk of streamed points. All present vectors have the same length.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PointChunk {
    pub xyz: Vec<[f32; 3]>,
    pub rgb: Vec<[u8; 3]>,
    /// Per-point integer labels (instance/semantic ids), when the source has them.
    pub labels: Option<Vec<i32>>,
    pub normals: Option<Vec<[f32; 3]>>,
}

impl PointChunk {
    pub fn len(&self) -> usize {
        self.xyz.len()
    }

    pub fn is_empty(&self) -> bool {
        self.xyz.is_empty()
    }
}

/// A streamed point cloud. Implementations hold at most one chunk's worth of points plus a
/// fixed-size read buffer.
pub trait PointSource: Send {
    /// Name of the cloud within the pack ("sfm" for SfM points, the file stem for PLY scans).
    fn name(&self) -> &str;
    /// Number of points the source declares (PLY header, points3D count), if known up front.
    fn declared_len(&self) -> Option<u64>;
    /// Whether chunks will carry labels / normals (constant for the whole source).
    fn has_labels(&self) -> bool;
    fn has_normals(&self) -> bool;
    /// The next at most `max_points` points; `Ok(None)` at the end. A source that ends before
    /// its declared length returns an error naming the file and the record.
    fn next_chunk(&mut self, max_points: usize) -> Result<Option<PointChunk>, ImportError>;
}

/// What an importer found.
pub struct ImportedScene {
    pub format: Format,
    pub root: PathBuf,
    pub views: Vec<ViewSource>,
    /// Point clouds, streamed when the pack pipeline reaches them.
    pub clouds: Vec<Box<dyn PointSource>>,
    /// True when the dataset has no SfM points at all (NeRF): training then starts from random
    /// points. Recorded in the manifest.
    pub no_sfm_points: bool,
    /// Frames listed by the metadata whose image file does not exist (skipped; refused under
    /// `--strict`).
    pub missing_images: Vec<String>,
    /// Human-readable notes for the user (printed by `gs-pack convert`).
    pub warnings: Vec<String>,
}

impl fmt::Debug for ImportedScene {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportedScene")
            .field("format", &self.format)
            .field("root", &self.root)
            .field("views", &self.views.len())
            .field("clouds", &self.clouds.iter().map(|c| c.name().to_owned()).collect::<Vec<_>>())
            .field("no_sfm_points", &self.no_sfm_points)
            .field("missing_images", &self.missing_images.len())
            .finish()
    }
}

/// Where in a file something went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// 1-based line of a text file.
    Line(u64),
    /// 0-based record (camera, image, point, vertex, frame) of a file.
    Record(u64),
    /// Byte offset into a binary file.
    Byte(u64),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Line(n) => write!(f, "line {n}"),
            Location::Record(n) => write!(f, "record {n}"),
            Location::Byte(n) => write!(f, "byte {n}"),
        }
    }
}

/// Import failures. Every variant names the file; messages end with what the user can do.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {at}: {msg}", path.display())]
    Parse {
        path: PathBuf,
        at: Location,
        msg: String,
    },
    #[error("{}: {msg}", path.display())]
    Invalid { path: PathBuf, msg: String },
    #[error("{}: {what}: invalid camera: {source}", path.display())]
    Camera {
        path: PathBuf,
        /// Which record: "camera 3", "image 17 (IMG_0017.jpg)", "frame 12".
        what: String,
        #[source]
        source: CameraError,
    },
    #[error("{}: cannot tell which dataset format this is ({msg}); pass --format colmap|nerf|ply", path.display())]
    UnknownFormat { path: PathBuf, msg: String },
}

impl ImportError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> ImportError {
        ImportError::Io {
            path: path.into(),
            source,
        }
    }

    pub fn parse(path: impl Into<PathBuf>, at: Location, msg: impl Into<String>) -> ImportError {
        ImportError::Parse {
            path: path.into(),
            at,
            msg: msg.into(),
        }
    }

    pub fn invalid(path: impl Into<PathBuf>, msg: impl Into<String>) -> ImportError {
        ImportError::Invalid {
            path: path.into(),
            msg: msg.into(),
        }
    }
}

/// Guesses the format of `path`: a `.ply` file or a folder of them is `ply`; a folder with
/// `transforms*.json` (or such a file itself) is `nerf`; a folder with `sparse/0/`, `sparse/`
/// or `cameras.{bin,txt}` is `colmap`.
pub fn detect(path: &Path) -> Result<Format, ImportError> {
    if path.is_file() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        return if ext.eq_ignore_ascii_case("ply") {
            Ok(Format::Ply)
        } else if ext.eq_ignore_ascii_case("json") && name.starts_with("transforms") {
            Ok(Format::Nerf)
        } else {
            Err(ImportError::UnknownFormat {
                path: path.to_owned(),
                msg: "a file that is neither .ply nor transforms*.json".into(),
            })
        };
    }
    if !path.is_dir() {
        return Err(ImportError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        ));
    }
    let has = |rel: &str| path.join(rel).exists();
    if has("sparse/0/cameras.bin")
        || has("sparse/0/cameras.txt")
        || has("sparse/cameras.bin")
        || has("sparse/cameras.txt")
        || has("cameras.bin")
        || has("cameras.txt")
    {
        return Ok(Format::Colmap);
    }
    if has("transforms.json") || has("transforms_train.json") {
        return Ok(Format::Nerf);
    }
    let entries = std::fs::read_dir(path).map_err(|e| ImportError::io(path, e))?;
    let mut plys = 0;
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()).is_some_and(|x| x.eq_ignore_ascii_case("ply")) {
            plys += 1;
        }
    }
    if plys > 0 {
        return Ok(Format::Ply);
    }
    Err(ImportError::UnknownFormat {
        path: path.to_owned(),
        msg: "found no sparse/ or cameras.bin/txt (COLMAP), no transforms.json (NeRF) and no .ply files".into(),
    })
}

/// Opens a dataset with the given (or detected) importer.
pub fn open(path: &Path, format: Format, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    let format = match format {
        Format::Auto => detect(path)?,
        f => f,
    };
    match format {
        Format::Colmap => colmap::import(path, options),
        Format::Nerf => nerf::import(path, options),
        Format::Ply => ply::import(path, options),
        Format::Auto => unreachable!("resolved above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distortion_zero_is_identity() {
        assert!(Distortion::NONE.is_none());
        assert_eq!(Distortion::NONE.distort(0.3, -0.2), (0.3, -0.2));
    }

    #[test]
    fn distortion_matches_opencv_formula() {
        let d = Distortion {
            k: [0.1, 0.01, 0.0, 0.0, 0.0, 0.0],
            p: [0.001, 0.002],
        };
        let (x, y) = (0.2, -0.1);
        let r2: f64 = 0.05;
        let radial = 1.0 + 0.1 * r2 + 0.01 * r2 * r2;
        let want_x = x * radial + 2.0 * 0.001 * x * y + 0.002 * (r2 + 2.0 * x * x);
        let want_y = y * radial + 0.001 * (r2 + 2.0 * y * y) + 2.0 * 0.002 * x * y;
        let (gx, gy) = d.distort(x, y);
        assert!((gx - want_x).abs() < 1e-15 && (gy - want_y).abs() < 1e-15);
    }
}
