//! The neutral dataset vocabulary: what a dataset is made of, independent of where it came from
//! ([`crate::import`] reads COLMAP, NeRF, Metashape, OpenSfM, Bundler, Meshroom,
//! RealityCapture, PLY, PCD, LAS, E57 and OBJ into these types) and of how it is stored
//! ([`crate::shard`] writes and reads them; [`crate::pack`] joins the two).
//!
//! This is a bottom layer: it depends on nothing but [`crate::scene`] (cameras), so the pack
//! format never needs the importers and the importers never need the pack format.
//!
//! Invariants:
//! - [`Distortion`] is one of two lens models: OpenCV's radial–tangential model or OpenCV's
//!   fisheye (equidistant) model; every supported camera model maps to one of them, the others
//!   are refused by the importer that meets them.
//! - A [`PointSource`] streams: it holds at most one chunk's worth of points plus a fixed-size
//!   read buffer, so a cloud of any size passes through bounded memory. Its error type is its
//!   own ([`PointSource::Error`]): the shard writer reports it unchanged, without knowing it.

use std::convert::Infallible;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::scene::camera::{Camera, Projection};

/// Train/test assignment of a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Test,
}

/// The dataset formats ramsplat reads (`Auto`: tell from the files).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Auto,
    Colmap,
    Nerf,
    /// Agisoft Metashape camera XML (`crate::import::metashape`).
    Metashape,
    /// OpenSfM's `reconstruction.json`, also OpenDroneMap's (`crate::import::opensfm`).
    Opensfm,
    /// Bundler's `bundle.out` with its image list (`crate::import::bundler`).
    Bundler,
    /// Meshroom / AliceVision SfMData (`.sfm`, `.json`; `crate::import::meshroom`).
    #[value(alias = "alicevision")]
    Meshroom,
    /// RealityCapture / RealityScan's per-photo XMP files (`crate::import::realitycapture`).
    #[value(alias = "realityscan")]
    Realitycapture,
    Ply,
    /// PCL's Point Cloud Data (`crate::import::pcd`).
    Pcd,
    /// ASPRS LAS and its LASzip-compressed form LAZ (`crate::import::las`).
    Las,
    /// ASTM E57, the terrestrial laser scanners' format (`crate::import::e57`).
    E57,
    /// Wavefront OBJ meshes, their vertices as a point cloud (`crate::import::obj`).
    Obj,
    /// A format a later ramsplat recorded in a pack's manifest (`source.format`), read back by
    /// this one, which cannot import it: the record is informational, so the pack still
    /// opens. Never chosen on the command line.
    #[serde(other)]
    #[value(skip)]
    Other,
}

impl std::fmt::Display for Format {
    /// The format's usual name, for people (`gs-pack info`).
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(match self {
            Format::Auto => "detected from the files",
            Format::Colmap => "COLMAP",
            Format::Nerf => "NeRF transforms.json",
            Format::Metashape => "Metashape",
            Format::Opensfm => "OpenSfM",
            Format::Bundler => "Bundler",
            Format::Meshroom => "Meshroom / AliceVision",
            Format::Realitycapture => "RealityCapture / RealityScan",
            Format::Ply => "PLY",
            Format::Pcd => "PCD",
            Format::Las => "LAS/LAZ",
            Format::E57 => "E57",
            Format::Obj => "OBJ",
            Format::Other => "a format of a later ramsplat",
        })
    }
}

/// A photo's lens: where the ray of an ideal pinhole camera lands in the photo, in normalised
/// camera coordinates `(x, y) = (X/Z, Y/Z)` ([`Distortion::distort`]), or the ray of an ideal
/// equidistant fisheye ([`Distortion::distort_equidistant`]). Photos are resampled to the ideal
/// pinhole at pack time (`crate::import::image::undistort_rect`); under `gs-pack convert
/// --keep-fisheye` a fisheye lens's photo is resampled to the ideal equidistant fisheye
/// instead ([`crate::scene::camera::Projection::Fisheye`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Distortion {
    /// OpenCV's radial–tangential model: with `r² = x² + y²`,
    /// `x_d = x·(1 + k1 r² + k2 r⁴ + k3 r⁶)/(1 + k4 r² + k5 r⁴ + k6 r⁶) + 2 p1 x y + p2 (r² + 2x²)`,
    /// `y_d = y·(same radial factor) + p1 (r² + 2y²) + 2 p2 x y`.
    /// All-zero coefficients mean an ideal pinhole ([`Distortion::NONE`]).
    RadialTangential {
        /// k1..k6 (k4..k6 are the rational model's denominator; zero for all but FULL_OPENCV).
        k: [f64; 6],
        /// p1, p2.
        p: [f64; 2],
    },
    /// The Brown–Conrady model with four radial terms (Agisoft Metashape's frame camera): with
    /// `r² = x² + y²`, the radial factor is `1 + k1 r² + k2 r⁴ + k3 r⁶ + k4 r⁸` (a polynomial:
    /// OpenCV's `k4` is a denominator term instead, so this is not
    /// [`Distortion::RadialTangential`]), the tangential terms are OpenCV's (`p1`, `p2` in
    /// OpenCV's order).
    Brown {
        /// k1..k4.
        k: [f64; 4],
        /// p1, p2 (OpenCV's order).
        p: [f64; 2],
    },
    /// OpenCV's fisheye model (`cv::fisheye`, Kannala–Brandt's equidistant polynomial; COLMAP's
    /// OPENCV_FISHEYE, RADIAL_FISHEYE and SIMPLE_RADIAL_FISHEYE): the ray at angle
    /// `θ = atan(r)` from the optical axis lands at normalised radius
    /// `θ_d = θ·(1 + k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸)` in the ray's direction. Never an ideal
    /// pinhole, even with zero coefficients: the equidistant projection itself is not one.
    Fisheye {
        /// k1..k4.
        k: [f64; 4],
    },
}

impl Default for Distortion {
    fn default() -> Distortion {
        Distortion::NONE
    }
}

impl Distortion {
    /// The ideal pinhole.
    pub const NONE: Distortion = Distortion::RadialTangential {
        k: [0.0; 6],
        p: [0.0; 2],
    };

    /// The Brown–Conrady lens with radial terms `k1..k4` (a polynomial up to `r⁸`) and
    /// tangential terms `p` in OpenCV's order: [`Distortion::RadialTangential`] when `k4` is
    /// zero (the same function, and the lens every other importer gives), else
    /// [`Distortion::Brown`], which holds the `r⁸` term OpenCV's model has not (its `k4`
    /// divides). Metashape and RealityCapture write this lens.
    pub fn brown_polynomial(k: [f64; 4], p: [f64; 2]) -> Distortion {
        let [k1, k2, k3, k4] = k;
        if k4 != 0.0 {
            Distortion::Brown { k, p }
        } else {
            Distortion::RadialTangential {
                k: [k1, k2, k3, 0.0, 0.0, 0.0],
                p,
            }
        }
    }

    /// Whether this is the ideal pinhole (a photo that needs no resampling).
    pub fn is_none(&self) -> bool {
        match self {
            Distortion::RadialTangential { k, p } => k.iter().chain(p).all(|&c| c == 0.0),
            Distortion::Brown { k, p } => k.iter().chain(p).all(|&c| c == 0.0),
            Distortion::Fisheye { .. } => false,
        }
    }

    /// Whether resampling a photo through this lens to an ideal image of `projection` (same
    /// size and intrinsics) is the identity, so the photo is that image exactly: the ideal
    /// pinhole lens ([`Distortion::is_none`]) for a pinhole image, a fisheye lens with zero
    /// coefficients for an equidistant one.
    pub fn is_identity_for(&self, projection: Projection) -> bool {
        match (projection, self) {
            (Projection::Pinhole, _) => self.is_none(),
            (Projection::Fisheye, Distortion::Fisheye { k }) => k.iter().all(|&c| c == 0.0),
            (Projection::Fisheye, _) => false,
        }
    }

    /// Whether every coefficient is a finite number.
    pub fn is_finite(&self) -> bool {
        match self {
            Distortion::RadialTangential { k, p } => k.iter().chain(p).all(|c| c.is_finite()),
            Distortion::Brown { k, p } => k.iter().chain(p).all(|c| c.is_finite()),
            Distortion::Fisheye { k } => k.iter().all(|c| c.is_finite()),
        }
    }

    /// The radially symmetric part of the lens (the tangential terms dropped): the mapping of
    /// radii whose fold-over point `crate::import::image::valid_radius` looks for.
    pub fn radial_only(&self) -> Distortion {
        match *self {
            Distortion::RadialTangential { k, .. } => {
                Distortion::RadialTangential { k, p: [0.0, 0.0] }
            }
            Distortion::Brown { k, .. } => Distortion::Brown { k, p: [0.0, 0.0] },
            fisheye @ Distortion::Fisheye { .. } => fisheye,
        }
    }

    /// The normalised radius at which the ray at angle `theta` (radians) from the optical axis
    /// lands, by the lens's radial part: a fisheye's `θ_d(θ)` (defined past 90°, as wide-angle
    /// lenses see), a radial–tangential lens's `distort(tan θ, 0)` (`None` from 90° on, behind
    /// the pinhole).
    pub fn ray_radius(&self, theta: f64) -> Option<f64> {
        match self {
            Distortion::Fisheye { k } => Some(fisheye_theta_d(k, theta)),
            Distortion::RadialTangential { .. } | Distortion::Brown { .. }
                if theta < std::f64::consts::FRAC_PI_2 =>
            {
                Some(self.radial_only().distort(theta.tan(), 0.0).0)
            }
            Distortion::RadialTangential { .. } | Distortion::Brown { .. } => None,
        }
    }

    /// Maps an undistorted normalised point to its distorted position.
    pub fn distort(&self, x: f64, y: f64) -> (f64, f64) {
        match *self {
            Distortion::RadialTangential { k, p } => {
                let [k1, k2, k3, k4, k5, k6] = k;
                let [p1, p2] = p;
                let r2 = x * x + y * y;
                let radial = (1.0 + r2 * (k1 + r2 * (k2 + r2 * k3)))
                    / (1.0 + r2 * (k4 + r2 * (k5 + r2 * k6)));
                (
                    x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x),
                    y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y,
                )
            }
            Distortion::Brown { k, p } => {
                let [k1, k2, k3, k4] = k;
                let [p1, p2] = p;
                let r2 = x * x + y * y;
                let radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * (k3 + r2 * k4)));
                (
                    x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x),
                    y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y,
                )
            }
            Distortion::Fisheye { k } => {
                let r = x.hypot(y);
                // θ_d / r → 1 as r → 0 (OpenCV and COLMAP use the same cut-off).
                if r <= f64::EPSILON {
                    return (x, y);
                }
                let scale = fisheye_theta_d(&k, r.atan()) / r;
                (x * scale, y * scale)
            }
        }
    }
}

impl Distortion {
    /// Where the ray of an ideal equidistant fisheye image lands in the photo: `(a, b)` is the
    /// fisheye image point in normalised coordinates, `((u − cx)/fx, (v − cy)/fy)`, i.e. the ray
    /// at angle `θ = √(a² + b²)` from the optical axis in the direction of `(a, b)`
    /// ([`Projection::Fisheye`]); the result is the photo's normalised point, as
    /// [`Distortion::distort`]'s. A fisheye lens maps it to radius `θ_d(θ)` (defined past 90°;
    /// with zero coefficients the point is returned unchanged, bit for bit); a pinhole-type
    /// lens sees the ray at the pinhole point `tan θ · (a, b)/θ`, and no ray from 90° on
    /// (`None`).
    pub fn distort_equidistant(&self, a: f64, b: f64) -> Option<(f64, f64)> {
        let theta = a.hypot(b);
        match *self {
            Distortion::Fisheye { k } => {
                let s = fisheye_factor(&k, theta);
                Some((a * s, b * s))
            }
            Distortion::RadialTangential { .. } | Distortion::Brown { .. } => {
                if theta.is_nan() || theta >= std::f64::consts::FRAC_PI_2 {
                    return None;
                }
                let s = if theta > 0.0 {
                    theta.tan() / theta
                } else {
                    1.0
                };
                Some(self.distort(a * s, b * s))
            }
        }
    }
}

/// OpenCV's fisheye polynomial `θ_d = θ·(1 + k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸)`.
fn fisheye_theta_d(k: &[f64; 4], theta: f64) -> f64 {
    theta * fisheye_factor(k, theta)
}

/// `θ_d/θ = 1 + k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸`: exactly 1 for zero coefficients.
fn fisheye_factor(k: &[f64; 4], theta: f64) -> f64 {
    let t2 = theta * theta;
    1.0 + t2 * (k[0] + t2 * (k[1] + t2 * (k[2] + t2 * k[3])))
}

/// One view of a dataset as found on disk.
#[derive(Clone, Debug)]
pub struct ViewSource {
    /// Name as the dataset spells it (relative image path); unique within a scene.
    pub name: String,
    /// Where the image file is.
    pub image_path: PathBuf,
    /// The camera of the image file at its native resolution, before undistortion. Its
    /// `projection` is the ideal image the photo is resampled to at pack time: the pinhole,
    /// except for a view whose lens is [`Distortion::Fisheye`] imported under
    /// `ImportOptions::keep_fisheye` (`gs-pack convert --keep-fisheye`), which is resampled
    /// to the ideal equidistant fisheye.
    pub camera: Camera,
    pub distortion: Distortion,
    /// A split the dataset itself assigns (NeRF `transforms_test.json`); `None` leaves it to
    /// `--test-every`.
    pub split: Option<Split>,
    /// The view's loss mask (0 = exclude the pixel from the training loss), when the dataset
    /// has one (COLMAP `masks/`, NeRF `mask_path`); see `crate::import::image::prepare_mask`.
    pub mask_path: Option<PathBuf>,
    /// The view's monocular inverse-depth map and the fit that maps its values to the
    /// training target (`gs-pack convert --depths`); see `crate::import::depth`.
    pub depth: Option<DepthSource>,
}

/// Where a view's inverse-depth map is and how its values become the training target.
#[derive(Clone, Debug, PartialEq)]
pub struct DepthSource {
    /// An 8- or 16-bit PNG (grey, or colour whose blue channel is read, as 3DGS's OpenCV
    /// loader reads channel 0 of BGR); value `v` means `v / 65536`.
    pub path: PathBuf,
    pub scale: crate::shard::DepthScale,
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

    /// Whether every present attribute array has one entry per point.
    pub fn is_consistent(&self) -> bool {
        let n = self.len();
        self.rgb.len() == n
            && self.labels.as_ref().is_none_or(|l| l.len() == n)
            && self.normals.as_ref().is_none_or(|v| v.len() == n)
    }

    /// Removes and returns the first `n` points (all of them if fewer).
    fn split_front(&mut self, n: usize) -> PointChunk {
        let n = n.min(self.len());
        let rest_xyz = self.xyz.split_off(n);
        let rest_rgb = self.rgb.split_off(n);
        let rest_labels = self.labels.as_mut().map(|l| l.split_off(n));
        let rest_normals = self.normals.as_mut().map(|v| v.split_off(n));
        PointChunk {
            xyz: std::mem::replace(&mut self.xyz, rest_xyz),
            rgb: std::mem::replace(&mut self.rgb, rest_rgb),
            labels: std::mem::replace(&mut self.labels, rest_labels),
            normals: std::mem::replace(&mut self.normals, rest_normals),
        }
    }
}

/// A streamed point cloud. Implementations hold at most one chunk's worth of points plus a
/// fixed-size read buffer.
pub trait PointSource: Send {
    /// What reading the source can fail with (an importer's parse error; nothing for points
    /// already in memory).
    type Error: std::error::Error + Send + Sync + 'static;
    /// Name of the cloud within the pack ("sfm" for SfM points, the file stem for PLY scans).
    fn name(&self) -> &str;
    /// Number of points the source declares (PLY header, points3D count), if known up front.
    fn declared_len(&self) -> Option<u64>;
    /// Whether chunks will carry labels / normals (constant for the whole source).
    fn has_labels(&self) -> bool;
    fn has_normals(&self) -> bool;
    /// The next at most `max_points` points; `Ok(None)` at the end. A source that ends before
    /// its declared length returns an error naming the file and the record.
    fn next_chunk(&mut self, max_points: usize) -> Result<Option<PointChunk>, Self::Error>;
}

/// Points already in memory (generated scenes, the demo, tests), handed out in chunks of at
/// most the requested size, never merged across the given chunks.
#[derive(Clone, Debug)]
pub struct MemPoints {
    name: String,
    chunks: std::collections::VecDeque<PointChunk>,
    declared: u64,
    labels: bool,
    normals: bool,
}

impl MemPoints {
    /// A source named `name` streaming `chunks` in order. Attribute presence comes from the
    /// first chunk; a later chunk that differs is the writer's to refuse.
    pub fn new(name: &str, chunks: Vec<PointChunk>) -> MemPoints {
        let first = chunks.first();
        MemPoints {
            name: name.to_owned(),
            declared: chunks.iter().map(|c| c.len() as u64).sum(),
            labels: first.is_some_and(|c| c.labels.is_some()),
            normals: first.is_some_and(|c| c.normals.is_some()),
            chunks: chunks.into(),
        }
    }
}

impl PointSource for MemPoints {
    type Error = Infallible;

    fn name(&self) -> &str {
        &self.name
    }

    fn declared_len(&self) -> Option<u64> {
        Some(self.declared)
    }

    fn has_labels(&self) -> bool {
        self.labels
    }

    fn has_normals(&self) -> bool {
        self.normals
    }

    fn next_chunk(&mut self, max_points: usize) -> Result<Option<PointChunk>, Infallible> {
        let Some(front) = self.chunks.front_mut() else {
            return Ok(None);
        };
        if front.len() <= max_points.max(1) {
            return Ok(self.chunks.pop_front());
        }
        Ok(Some(front.split_front(max_points.max(1))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Brown model is OpenCV's radial–tangential one with a polynomial r⁸ term: equal to
    /// it without that term, and that term adds `k4·r⁸` of the radius.
    #[test]
    fn brown_adds_a_polynomial_r8_term_to_opencvs_model() {
        let (k, p) = ([0.1, -0.05, 0.02], [0.003, -0.002]);
        let rt = Distortion::RadialTangential {
            k: [k[0], k[1], k[2], 0.0, 0.0, 0.0],
            p,
        };
        let brown = |k4: f64| Distortion::Brown {
            k: [k[0], k[1], k[2], k4],
            p,
        };
        for (x, y) in [(0.3, -0.2), (-0.7, 0.45), (0.0, 0.9)] {
            assert_eq!(brown(0.0).distort(x, y), rt.distort(x, y));
            let r8 = (x * x + y * y).powi(4);
            let ((bx, by), (ox, oy)) = (brown(-0.076).distort(x, y), rt.distort(x, y));
            assert!((bx - (ox - 0.076 * r8 * x)).abs() < 1e-15, "{bx} {ox}");
            assert!((by - (oy - 0.076 * r8 * y)).abs() < 1e-15, "{by} {oy}");
        }
        assert!(Distortion::Brown {
            k: [0.0; 4],
            p: [0.0; 2]
        }
        .is_none());
        assert!(!brown(0.0).is_none());
        assert!(!brown(1e-3).is_none() && brown(1e-3).is_finite());
        assert!(!brown(f64::NAN).is_finite());
        assert_eq!(
            brown(0.5).radial_only(),
            Distortion::Brown {
                k: [k[0], k[1], k[2], 0.5],
                p: [0.0; 2]
            }
        );
        assert_eq!(brown(0.5).ray_radius(std::f64::consts::FRAC_PI_2), None);
    }

    #[test]
    fn distortion_zero_is_identity() {
        assert!(Distortion::NONE.is_none());
        assert_eq!(Distortion::NONE.distort(0.3, -0.2), (0.3, -0.2));
    }

    #[test]
    fn distortion_matches_opencv_formula() {
        let d = Distortion::RadialTangential {
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

    #[test]
    fn fisheye_matches_the_equidistant_formula() {
        let d = Distortion::Fisheye {
            k: [0.05, -0.01, 0.002, -0.0003],
        };
        // Never the ideal pinhole, even without coefficients.
        assert!(!d.is_none() && !Distortion::Fisheye { k: [0.0; 4] }.is_none());
        let (x, y) = (0.6, -0.8); // r = 1: θ = π/4
        let t = std::f64::consts::FRAC_PI_4;
        let theta_d = t
            * (1.0 + 0.05 * t.powi(2) - 0.01 * t.powi(4) + 0.002 * t.powi(6) - 0.0003 * t.powi(8));
        let (gx, gy) = d.distort(x, y);
        assert!((gx - 0.6 * theta_d).abs() < 1e-15 && (gy + 0.8 * theta_d).abs() < 1e-15);
        // The optical axis is fixed, and near it the lens is the identity to first order.
        assert_eq!(d.distort(0.0, 0.0), (0.0, 0.0));
        let (sx, _) = d.distort(1e-6, 0.0);
        assert!((sx - 1e-6).abs() < 1e-17, "{sx}");
        // A pure equidistant lens: the ray at 60° lands at radius π/3.
        let (ex, _) = Distortion::Fisheye { k: [0.0; 4] }.distort(3f64.sqrt(), 0.0);
        assert!((ex - std::f64::consts::FRAC_PI_3).abs() < 1e-15);
    }

    /// The ray of an ideal equidistant image point `(a, b)` (θ = |(a, b)|) lands where the lens
    /// sends that ray: a fisheye lens at radius θ_d(θ) (past 90° too), agreeing with
    /// `distort` of the same ray's pinhole point; a pinhole-type lens at its pinhole point
    /// `tan θ · (a, b)/θ`, distorted, and nowhere from 90° on.
    #[test]
    fn equidistant_image_points_land_where_the_lens_sends_their_ray() {
        use crate::scene::camera::Projection;
        let k = [0.05, -0.01, 0.002, -0.0003];
        let fish = Distortion::Fisheye { k };
        let (a, b) = (0.6, -0.8); // θ = 1 rad
        let theta_d = 1.0 + 0.05 - 0.01 + 0.002 - 0.0003;
        let (x, y) = fish.distort_equidistant(a, b).unwrap();
        assert!((x - a * theta_d).abs() < 1e-15 && (y - b * theta_d).abs() < 1e-15);
        let t = 1.0f64.tan();
        let (px, py) = fish.distort(a * t, b * t);
        assert!((x - px).abs() < 1e-12 && (y - py).abs() < 1e-12);
        // Defined past 90°: 100° off the axis.
        let wide = 100f64.to_radians();
        assert!(fish.distort_equidistant(wide, 0.0).unwrap().0 > wide);
        // Zero coefficients: the point itself, bit for bit.
        let ideal = Distortion::Fisheye { k: [0.0; 4] };
        for (a, b) in [(0.3, -1.2), (1e-9, 0.0), (0.0, 0.0), (1.4, 0.7)] {
            assert_eq!(ideal.distort_equidistant(a, b), Some((a, b)));
        }
        // A pinhole-type lens.
        let rt = Distortion::RadialTangential {
            k: [0.1, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.001, 0.0],
        };
        let (x, y) = rt.distort_equidistant(a, b).unwrap();
        assert_eq!((x, y), rt.distort(a * t, b * t));
        let (x, _) = Distortion::NONE.distort_equidistant(0.5, 0.0).unwrap();
        assert!((x - 0.5f64.tan()).abs() < 1e-15);
        assert_eq!(
            Distortion::NONE.distort_equidistant(0.0, 0.0),
            Some((0.0, 0.0))
        );
        assert_eq!(Distortion::NONE.distort_equidistant(0.0, 1.6), None);
        assert_eq!(rt.distort_equidistant(f64::NAN, 0.0), None);
        // Which lenses need no resampling for which image.
        assert!(Distortion::NONE.is_identity_for(Projection::Pinhole));
        assert!(!Distortion::NONE.is_identity_for(Projection::Fisheye));
        assert!(ideal.is_identity_for(Projection::Fisheye));
        assert!(!ideal.is_identity_for(Projection::Pinhole));
        assert!(!fish.is_identity_for(Projection::Fisheye));
        assert!(!rt.is_identity_for(Projection::Pinhole));
    }

    #[test]
    fn mem_points_splits_chunks_at_the_requested_size_and_keeps_attributes_aligned() {
        let chunk = |n: usize, base: i32| PointChunk {
            xyz: (0..n).map(|i| [i as f32 + base as f32, 0.0, 0.0]).collect(),
            rgb: vec![[1, 2, 3]; n],
            labels: Some((0..n as i32).map(|i| i + base).collect()),
            normals: None,
        };
        let mut s = MemPoints::new("sfm", vec![chunk(5, 0), chunk(2, 100)]);
        assert_eq!(s.declared_len(), Some(7));
        assert!(s.has_labels() && !s.has_normals());
        let mut got = vec![];
        while let Some(c) = s.next_chunk(3).unwrap() {
            assert!(c.is_consistent());
            got.push(c.labels.unwrap());
        }
        assert_eq!(got, vec![vec![0, 1, 2], vec![3, 4], vec![100, 101]]);
    }
}
