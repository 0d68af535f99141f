//! Procedural datasets: real image files plus COLMAP or NeRF metadata and a point cloud, for
//! tests (importer/packer round trips), benchmarks (thousands of large views) and the trainer's
//! demo. This module owns `gs-pack synth` (its [`SynthArgs`] and [`run`]); the scene itself,
//! its renderer and cameras are in [`scene`] ([`SynthScene`]), usable without any files.
//!
//! # Output layout (`-o DIR`)
//! - `DIR/images/00000.png` … (or `.jpg`, quality 95): 5-digit zero-padded view index (more
//!   digits past 99,999 views), RGB8, `W × H`.
//! - `--format colmap`: `DIR/sparse/0/{cameras,images,points3D}.txt` written by
//!   [`crate::import::colmap::write_model`]: one PINHOLE camera (id 1, params `fx fy cx cy`)
//!   shared by all images; image `i` has id `i + 1`, world-to-camera `qvec`/`tvec`, name
//!   `00000.png` (relative to `images/`); points have ids `1..=P`, reprojection error 0.
//!   Observations are real and consistent: an image lists as its 2D points (`X Y POINT3D_ID`,
//!   the exact projection, in point order) the points it observes, i.e. that lie in front of
//!   it, project inside it and are not occluded ([`observation`]), and each point's track lists
//!   those `(IMAGE_ID, POINT2D_IDX)`, so `gs-pack convert --sfm-depths` has tracks to read.
//! - `--format nerf`: `DIR/transforms.json` with `camera_angle_x fl_x fl_y cx cy w h` and per
//!   frame `file_path` (`images/00000.png`) and `transform_matrix` (camera-to-world, OpenGL axes:
//!   the OpenCV camera-to-world rotation with its y and z columns negated), plus — when
//!   `--points > 0` — `DIR/points3d.ply` (binary little-endian, `float x y z`, `uchar red green
//!   blue`), also named by the top-level key `ply_file_path` (the nerfstudio spelling), which
//!   the NeRF importer reads as the SfM points.
//! - `--camera-model fisheye`: every camera is the ideal equidistant fisheye
//!   ([`Projection::Fisheye`]) seeing 150° across its image diagonal
//!   ([`scene::FISHEYE_DIAGONAL_FOV_DEG`]: focal length `½·√(W² + H²)/(75° in radians)`, so
//!   at 4:3 120° × 90° through the centre, well inside
//!   [`crate::scene::camera::FISHEYE_MAX_THETA`], so every pixel has a ray), rendered by ray
//!   casting through [`Camera::pixel_ray`] (a pixel without a ray would be black, with no
//!   depth; none has one at this field). COLMAP's camera is then OPENCV_FISHEYE (model id 5,
//!   params `fx fy cx cy k1 k2 k3 k4` with `k = 0`), `transforms.json` has nerfstudio's
//!   `"camera_model": "OPENCV_FISHEYE"` with `k1 k2 k3 k4` = 0 and no `camera_angle_x` (a
//!   pinhole's). Observations and depths follow the projection: a point's 2D observation is
//!   [`Camera::project`], a pixel's depth the camera-space `z` of the first surface along its
//!   ray. `gs-pack convert DIR --keep-fisheye` packs these images as fisheye views exactly
//!   (the lens is the identity); without `--keep-fisheye` they are resampled to pinhole views.
//! - `--layout aerial` (default `orbit`): the scene is [`SynthScene::aerial`]`(seed, views)`,
//!   a square area of side `2.5·√views` units with ~0.12 objects per unit², flown over on a
//!   lawnmower grid at a fixed height looking 30° off nadir (see [`scene`]): each view sees a
//!   small part of it, so no view frames every object (the orbit layout's promise). Files,
//!   formats and options are the same; `--points` samples the whole square (half on the
//!   ground, half on the objects, as for orbit). The report names the area and objects.
//! - `--depths`: `DIR/depths/00000.png` … (the image's stem), 16-bit grey: each view's exact
//!   inverse depth ([`SynthScene::inverse_depth`]: `1/z` of the first surface along the pixel's
//!   centre ray, camera-space `z`; 0 for sky) mapped affinely onto 0..=65535 over that view's
//!   own range, as a monocular estimator's relative output is, and the fits that map it back
//!   (`value / 65536 · scale + offset`, [`depth_quantiser`]) in 3DGS's `depth_params.json`,
//!   keyed by the image stem: `DIR/sparse/0/depth_params.json` (COLMAP) or
//!   `DIR/depth_params.json` beside `transforms.json` (NeRF). So `gs-pack convert DIR
//!   --depths depths` packs every view's true inverse depth to within half a 16-bit step of
//!   its range.
//!
//! # Invariants
//! - Deterministic: the same arguments (layout included) give byte-identical files (rendering is a pure function
//!   of the pixel; encoders are deterministic; metadata is written in view order after all
//!   images, whatever order the workers finish in).
//! - Bounded memory: each worker holds one RGB8 frame at a time, and the number of workers is
//!   capped so frames in flight stay under [`IN_FLIGHT_BYTES`]; points are streamed into the
//!   metadata writers, never collected. The one exception is COLMAP's observations (24 bytes
//!   each), held because `images.txt` lists them before `points3D.txt` lists the points: the
//!   points are streamed twice (once to find which views observe each, once to write them
//!   with their tracks). Only with `--tracks`; without it the model has none.
//! - Every file appears complete or not at all: written through [`crate::fsutil`] (hidden
//!   temporary name in the same directory, fsync, rename into place when complete); a failed
//!   write (a full disk) removes its temporary file, so no `.tmp` image is left behind.
//! - An existing non-empty `DIR` is refused unless `--force`, and `--force` only replaces a
//!   previous synth run: a directory synth made carries the marker file [`SYNTH_MARKER`]
//!   (written before anything else, so a killed run's directory has it too), and a non-empty
//!   directory without it is refused even with `--force`. A real dataset's `sparse/0/*.bin` or
//!   `transforms.json` are exactly the names synth writes, so no name could tell them apart:
//!   `--force` into a COLMAP workspace used to delete its reconstruction. In a marked directory
//!   the files a previous synth run would have written (images named like ours, `sparse/0/*`,
//!   `transforms.json`, `points3d.ply`) are removed first, so a COLMAP run followed by a NeRF
//!   run into the same directory does not leave a stale `sparse/` that format detection would
//!   pick up. Other files are left alone. `depth_params.json` and `depths/<digits>.png` count
//!   as ours.

//!
//! # Measured throughput
//! Measured by a former ignored test (its render-only part is now `cargo bench --bench stages
//! -- synth`) built with `CARGO_PROFILE_DEV_OPT_LEVEL=3` (all code at opt-level 3; a full release build was not made
//! on the shared machine), 2 cores shared with ~10 other busy processes (load average ≈ 11),
//! seed 0, PNG, median of 3 runs, render + encode + write:
//! - 320×240: 9.9 views/s (64 views); 1920×1080: 0.80 views/s (8 views); 1080p JPEG: 0.61.
//! - Full 2×2 supersampling instead of adaptive: 4.9 and 0.25 views/s; 1 sample per pixel:
//!   21 and 0.86 views/s. Adaptive antialiasing costs ~10% over one sample per pixel at 1080p.
//!
//! These are lower bounds for an unloaded machine: a fair share of 2 cores was far from 2.
//!
//! `--layout aerial` (release build, 2 cores shared, load average ≈ 3.4, `/usr/bin/time -v`):
//! `--views 256 --width 480 --height 360 --points 400000 --seed 1` (a 40 × 40 area, 192
//! objects) took 18.9 s wall, 17.9 s user, 9.7 MB peak RSS; with `--tracks` 26.9 s, 69 MB.
//! Every pixel sees a surface (orbit views are half sky), so a view costs ~2.5× an orbit view
//! of the same size: the same command with the orbit layout took 7.7 s.

pub mod e57;
pub mod las;
pub mod noise;
pub mod packs;
pub mod scene;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use image::ImageEncoder;

use crate::import::colmap::{self, ColmapCamera, ColmapImage, ColmapPoint, Encoding, TrackElement};
use crate::import::ImportError;
use crate::rng::Rng;
use crate::scene::camera::{Camera, Projection};

pub use scene::{rotation_to_quaternion_wxyz, Surface, SurfaceSample, SynthScene};

pub const DEFAULT_VIEWS: usize = 32;
pub const DEFAULT_WIDTH: u32 = 320;
pub const DEFAULT_HEIGHT: u32 = 240;
pub const DEFAULT_POINTS: u64 = 20_000;
/// Largest accepted image side: 16384 is 4× a 4K width; one RGB8 frame of 16384² is 805 MB,
/// and JPEG cannot exceed 65,535 anyway.
pub const MAX_SIDE: u32 = 16_384;
/// Cap on the bytes of frames and render scratch (8 B/px in all) in flight across all workers:
/// 256 MiB admits four 4K workers (66 MB each) or sixteen 1080p workers (16.6 MB each), enough to
/// keep cores busy while one encodes and others render, while a 16K frame still gets its one
/// worker.
pub const IN_FLIGHT_BYTES: u64 = 256 << 20;
/// JPEG quality for `--image-format jpg`: 95 is visually lossless for these smooth images while
/// still ~5–10× smaller than PNG, i.e. realistic for benchmark datasets.
pub const JPEG_QUALITY: u8 = 95;
/// The random stream (see [`Rng::derived`]) from which `run` samples the point cloud, separate
/// from the scene's own streams so the cloud does not perturb the scene.
pub const POINTS_STREAM: u64 = 4;
/// COLMAP's model id of PINHOLE (params `fx fy cx cy`).
const PINHOLE_MODEL_ID: i32 = 1;
/// COLMAP's model id of OPENCV_FISHEYE (params `fx fy cx cy k1 k2 k3 k4`).
const OPENCV_FISHEYE_MODEL_ID: i32 = 5;

/// Which cameras to render (`--camera-model`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CameraModel {
    /// Ideal pinhole cameras, 55° across horizontally.
    #[default]
    Pinhole,
    /// Ideal equidistant fisheye cameras, 150° across the diagonal
    /// ([`scene::FISHEYE_DIAGONAL_FOV_DEG`]), written as OpenCV's fisheye model with zero
    /// coefficients.
    Fisheye,
}

impl CameraModel {
    /// The projection of the cameras rendered.
    pub fn projection(self) -> Projection {
        match self {
            CameraModel::Pinhole => Projection::Pinhole,
            CameraModel::Fisheye => Projection::Fisheye,
        }
    }
}

/// Which scene and flight (`--layout`); see [`scene::Layout`] and the module doc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SceneLayout {
    /// A few objects on a ground disc, every camera orbiting the centre and framing every
    /// object.
    #[default]
    Orbit,
    /// A square area that grows with the views (side 2.5·√views), objects scattered over it,
    /// cameras flown over it on a lawnmower grid looking down 30° off nadir: each view sees a
    /// small part of the area.
    Aerial,
}

/// Which metadata to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SynthFormat {
    Colmap,
    Nerf,
}

/// Which image files to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    /// Lossless: exact ground truth for tests.
    Png,
    /// Quality 95: realistic sizes and decode cost for benchmarks.
    #[value(alias = "jpeg")]
    Jpg,
}

impl ImageFormat {
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Jpg => "jpg",
        }
    }
}

/// `gs-pack synth` arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct SynthArgs {
    /// Output dataset directory (created; must be empty or absent unless --force, and --force
    /// only replaces an earlier `gs-pack synth` run's files).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Number of views (cameras and images).
    #[arg(long, default_value_t = DEFAULT_VIEWS)]
    pub views: usize,
    /// Image width in pixels.
    #[arg(long, default_value_t = DEFAULT_WIDTH)]
    pub width: u32,
    /// Image height in pixels.
    #[arg(long, default_value_t = DEFAULT_HEIGHT)]
    pub height: u32,
    /// Number of surface points to write (COLMAP points3D / NeRF points3d.ply); 0 = none.
    #[arg(long, default_value_t = DEFAULT_POINTS)]
    pub points: u64,
    /// Metadata format.
    #[arg(long, value_enum, default_value_t = SynthFormat::Colmap)]
    pub format: SynthFormat,
    /// Scene seed: the same seed and arguments give byte-identical files.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Image file format: png (lossless, exact) or jpg (quality 95, realistic for benchmarks).
    #[arg(long = "image-format", value_enum, default_value_t = ImageFormat::Png)]
    pub image_format: ImageFormat,
    /// Write into a non-empty output directory that a previous synth run made, replacing the
    /// files it wrote (any other directory is refused).
    #[arg(long)]
    pub force: bool,
    /// Also write each view's exact inverse-depth map as a monocular estimator's relative
    /// output (`depths/<image stem>.png`, 16-bit) and its fit (`depth_params.json`), the files
    /// `gs-pack convert --depths depths` reads.
    #[arg(long)]
    pub depths: bool,
    /// Also write the COLMAP model's observations and tracks: which views see each point
    /// (in front, in frame and not hidden behind other surfaces), what `gs-pack convert
    /// --sfm-depths` reads. Every point is traced towards every camera, and each observation
    /// is held (24 bytes) until the model is written; without it the model has no tracks, as
    /// before (large benchmark scenes stay quick). COLMAP format only.
    #[arg(long)]
    pub tracks: bool,
    /// Camera model: pinhole (55° across horizontally), or fisheye (the ideal equidistant
    /// fisheye, 150° across the diagonal), written as COLMAP's OPENCV_FISHEYE / nerfstudio's
    /// OPENCV_FISHEYE with k1..k4 = 0, which `gs-pack convert --keep-fisheye` packs as
    /// fisheye views pixel for pixel.
    #[arg(long = "camera-model", value_enum, default_value_t = CameraModel::Pinhole)]
    pub camera_model: CameraModel,
    /// Scene layout: orbit (a few objects, cameras orbiting them, every view sees every
    /// object) or aerial (a wide area growing with --views, flown over on a grid at a fixed
    /// height, each view seeing a small part of it: a large scene for block-wise training).
    #[arg(long, value_enum, default_value_t = SceneLayout::Orbit)]
    pub layout: SceneLayout,
}

impl SynthArgs {
    /// The command-line defaults with the given output directory.
    pub fn new(output: impl Into<PathBuf>) -> SynthArgs {
        SynthArgs {
            output: output.into(),
            views: DEFAULT_VIEWS,
            width: DEFAULT_WIDTH,
            height: DEFAULT_HEIGHT,
            points: DEFAULT_POINTS,
            format: SynthFormat::Colmap,
            seed: 0,
            image_format: ImageFormat::Png,
            force: false,
            depths: false,
            tracks: false,
            camera_model: CameraModel::Pinhole,
            layout: SceneLayout::Orbit,
        }
    }

    /// The scene these arguments render.
    pub fn scene(&self) -> SynthScene {
        match self.layout {
            SceneLayout::Orbit => SynthScene::new(self.seed),
            SceneLayout::Aerial => SynthScene::aerial(self.seed, self.views),
        }
    }
}

/// What [`run`] wrote.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SynthReport {
    pub output: PathBuf,
    pub format: SynthFormat,
    pub image_format: ImageFormat,
    pub camera_model: CameraModel,
    pub layout: SceneLayout,
    /// Objects in the scene (besides the ground).
    pub objects: usize,
    /// Area of the ground (the orbit disc, or the aerial square of side `ground_side`).
    pub ground_area: f64,
    /// The aerial layout's ground square side; absent for orbit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ground_side: Option<f64>,
    pub views: usize,
    pub width: u32,
    pub height: u32,
    pub points: u64,
    pub images_dir: PathBuf,
    /// Bytes of the image files alone.
    pub image_bytes: u64,
    /// Bytes of every file written (images + metadata + points).
    pub bytes_written: u64,
    /// The metadata and point files, in the order written.
    pub metadata_files: Vec<PathBuf>,
    /// With `--depths`: the depth maps' folder and the `depth_params.json` written.
    pub depth_files: Option<(PathBuf, PathBuf)>,
}

/// Why `synth` failed. Every variant names the path involved.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("{}: output directory is not empty; pass --force to overwrite a previous synth run there, or choose another -o", path.display())]
    OutputNotEmpty { path: PathBuf },
    #[error(
        "{}: not a previous gs-pack synth run (it has no {SYNTH_MARKER} marker), so --force \
         leaves it alone: its files could be a real dataset's; choose an empty or new -o",
        path.display()
    )]
    NotSynthOutput { path: PathBuf },
    #[error("invalid synth arguments: {msg}")]
    InvalidArgs { msg: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: encoding view {view} failed: {source}", path.display())]
    Encode {
        path: PathBuf,
        view: usize,
        #[source]
        source: image::ImageError,
    },
    #[error("{}: writing transforms.json failed: {source}", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("writing the COLMAP model failed: {0}")]
    Colmap(#[source] ImportError),
    #[error("view {view}: generated camera is invalid (a bug in synth): {source}")]
    Camera {
        view: usize,
        #[source]
        source: crate::scene::camera::CameraError,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SynthError + '_ {
    move |source| SynthError::Io {
        path: path.to_owned(),
        source,
    }
}

fn validate(args: &SynthArgs) -> Result<(), SynthError> {
    let bad = |msg: String| Err(SynthError::InvalidArgs { msg });
    if args.views == 0 {
        return bad("--views must be at least 1".into());
    }
    for (name, v) in [("--width", args.width), ("--height", args.height)] {
        if v == 0 || v > MAX_SIDE {
            return bad(format!("{name} {v} is outside 1..={MAX_SIDE}"));
        }
    }
    if args.tracks && args.format != SynthFormat::Colmap {
        return bad(
            "--tracks writes a COLMAP model's observations; transforms.json has none: use \
             --format colmap, or drop --tracks"
                .into(),
        );
    }
    Ok(())
}

/// Name of view `i`'s image file (relative to `images/`).
pub fn image_name(i: usize, format: ImageFormat) -> String {
    format!("{i:05}.{}", format.extension())
}

fn is_our_image_name(name: &str) -> bool {
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return false;
    };
    stem.len() >= 5 && stem.bytes().all(|b| b.is_ascii_digit()) && (ext == "png" || ext == "jpg")
}

/// `.NAME.tmp` (older runs) or `.NAME.tmp-PID` ([`crate::fsutil::tmp_path`]).
fn is_our_temp_name(name: &str) -> bool {
    name.starts_with('.')
        && (name.ends_with(".tmp")
            || name
                .rsplit_once(".tmp-")
                .is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())))
}

/// The file that marks a directory as synth's own (see the module doc): only a directory that
/// has it is cleared by `--force`.
pub const SYNTH_MARKER: &str = ".gs-synth";

/// Creates `dir` or checks it is empty; under `force`, removes what an earlier run wrote in a
/// directory it marked. Marks `dir` before anything is written into it.
fn prepare_output(dir: &Path, force: bool) -> Result<(), SynthError> {
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                if !force {
                    return Err(SynthError::OutputNotEmpty {
                        path: dir.to_owned(),
                    });
                }
                if !dir.join(SYNTH_MARKER).is_file() {
                    return Err(SynthError::NotSynthOutput {
                        path: dir.to_owned(),
                    });
                }
                remove_previous_outputs(dir)?;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(dir)(e)),
    }
    fs::create_dir_all(dir.join("images")).map_err(io_err(dir))?;
    let marker = dir.join(SYNTH_MARKER);
    crate::fsutil::write_atomic(
        &marker,
        b"written by gs-pack synth: `gs-pack synth --force` may replace its files here\n",
    )
    .map_err(io_err(&marker))
}

fn remove_if_exists(path: &Path) -> Result<(), SynthError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(path)(e)),
        _ => Ok(()),
    }
}

fn remove_previous_outputs(dir: &Path) -> Result<(), SynthError> {
    for f in ["transforms.json", "points3d.ply", "depth_params.json"] {
        remove_if_exists(&dir.join(f))?;
    }
    remove_if_exists(&dir.join("sparse").join("0").join("depth_params.json"))?;
    let depths = dir.join("depths");
    if depths.is_dir() {
        for e in fs::read_dir(&depths).map_err(io_err(&depths))? {
            let e = e.map_err(io_err(&depths))?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            let stem = name.strip_suffix(".png").unwrap_or("");
            if (!stem.is_empty() && stem.bytes().all(|b| b.is_ascii_digit()))
                || is_our_temp_name(&name)
            {
                remove_if_exists(&e.path())?;
            }
        }
    }
    // Leftover temporary files of an earlier, killed run.
    for e in fs::read_dir(dir).map_err(io_err(dir))? {
        let e = e.map_err(io_err(dir))?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if (name.starts_with(".transforms.json.tmp") || name.starts_with(".points3d.ply.tmp"))
            && is_our_temp_name(&name)
        {
            remove_if_exists(&e.path())?;
        }
    }
    let sparse = dir.join("sparse").join("0");
    for stem in ["cameras", "images", "points3D"] {
        for ext in ["txt", "bin"] {
            remove_if_exists(&sparse.join(format!("{stem}.{ext}")))?;
        }
    }
    let staging = dir.join("sparse").join(".0.tmp");
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(io_err(&staging))?;
    }
    let images = dir.join("images");
    if images.is_dir() {
        for e in fs::read_dir(&images).map_err(io_err(&images))? {
            let e = e.map_err(io_err(&images))?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            if is_our_image_name(&name) || is_our_temp_name(&name) {
                remove_if_exists(&e.path())?;
            }
        }
    }
    Ok(())
}

/// Encodes `rgb` to `path` atomically ([`crate::fsutil::write_atomic_with`]: hidden temporary
/// name, fsync, rename; the temporary file is removed on any error, a full disk included);
/// returns the file size.
fn write_image(
    path: &Path,
    view: usize,
    rgb: &[u8],
    width: u32,
    height: u32,
    format: ImageFormat,
) -> Result<u64, SynthError> {
    let mut encode_err = None;
    let written = crate::fsutil::write_atomic_with(path, &mut |w| {
        let encoded = match format {
            ImageFormat::Png => image::codecs::png::PngEncoder::new_with_quality(
                &mut *w,
                image::codecs::png::CompressionType::Fast,
                image::codecs::png::FilterType::Adaptive,
            )
            .write_image(rgb, width, height, image::ExtendedColorType::Rgb8),
            ImageFormat::Jpg => {
                image::codecs::jpeg::JpegEncoder::new_with_quality(&mut *w, JPEG_QUALITY)
                    .write_image(rgb, width, height, image::ExtendedColorType::Rgb8)
            }
        };
        encoded.map_err(|e| {
            let io = match &e {
                image::ImageError::IoError(io) => std::io::Error::new(io.kind(), io.to_string()),
                _ => std::io::Error::other("encoding failed"),
            };
            encode_err = Some(e);
            io
        })
    });
    match (written, encode_err) {
        (Ok(()), _) => file_len(path),
        // An I/O error inside the encoder (a full disk) is reported as I/O, naming the file.
        (Err(e), Some(image::ImageError::IoError(_))) | (Err(e), None) => Err(io_err(path)(e)),
        (Err(_), Some(source)) => Err(SynthError::Encode {
            path: path.to_owned(),
            view,
            source,
        }),
    }
}

/// Renders and writes every view with a bounded set of workers; calls `progress` on this thread.
fn write_images(
    scene: &SynthScene,
    cameras: &[Camera],
    images_dir: &Path,
    format: ImageFormat,
    progress: &dyn Fn(u64, u64),
) -> Result<u64, SynthError> {
    let n = cameras.len();
    let (w, h) = (cameras[0].width, cameras[0].height);
    let frame_bytes = w as u64 * h as u64 * 3;
    // Per worker: its frame plus the renderer's scratch (see `SynthScene::render_into`).
    let worker_bytes = frame_bytes + w as u64 * h as u64 * scene::RENDER_SCRATCH_BYTES_PER_PIXEL;
    let workers = (IN_FLIGHT_BYTES / worker_bytes)
        .clamp(1, rayon::current_num_threads() as u64)
        .min(n as u64) as usize;
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = crossbeam_channel::unbounded::<(usize, Result<u64, SynthError>)>();
    let mut first_err: Option<(usize, SynthError)> = None;
    let mut total_bytes = 0u64;
    std::thread::scope(|s| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            s.spawn(move || {
                // One frame buffer per worker, reused for every view it renders.
                let mut frame = vec![0u8; frame_bytes as usize];
                loop {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    scene.render_into(&cameras[i], &mut frame);
                    let path = images_dir.join(image_name(i, format));
                    let r = write_image(&path, i, &frame, w, h, format);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if tx.send((i, r)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut done = 0u64;
        for (i, r) in rx {
            match r {
                Ok(bytes) => {
                    total_bytes += bytes;
                    done += 1;
                    progress(done, n as u64);
                }
                // Report the lowest failing view, so the message does not depend on timing.
                Err(e) => {
                    if first_err.as_ref().is_none_or(|(j, _)| i < *j) {
                        first_err = Some((i, e));
                    }
                }
            }
        }
    });
    match first_err {
        Some((_, e)) => Err(e),
        None => Ok(total_bytes),
    }
}

/// Streams `n` surface points of `scene` (deterministic in the scene seed).
fn point_stream(scene: &SynthScene, n: u64) -> impl Iterator<Item = SurfaceSample> + '_ {
    let mut rng = Rng::derived(scene.seed(), POINTS_STREAM);
    (0..n).map(move |_| scene.sample_surface(&mut rng))
}

/// A point is observed by a view only when the view's ray towards it first meets the scene
/// within this fraction of the point's distance (the point is not occluded).
pub const OBSERVATION_TOLERANCE: f64 = 0.01;

/// Points whose observations [`observations`] finds in one parallel batch.
const OBSERVATION_BATCH: usize = 4096;

/// Where `camera` observes the surface point `p`: its pixel coordinates (COLMAP's and
/// ramsplat's convention, pixel centres at +0.5) by the camera's projection
/// ([`Camera::project`]), when `p` lies in front of the camera, projects inside the image
/// (`0 ≤ u < W`, `0 ≤ v < H`) and is not occluded: the camera's ray towards it first meets the
/// scene within [`OBSERVATION_TOLERANCE`] of its distance, i.e. its depth agrees with the
/// scene's exact depth along that ray.
pub fn observation(scene: &SynthScene, camera: &Camera, p: [f64; 3]) -> Option<[f64; 2]> {
    let [u, v] = camera.project(p)?;
    if !((0.0..camera.width as f64).contains(&u) && (0.0..camera.height as f64).contains(&v)) {
        return None;
    }
    let o = camera.centre();
    let d = [p[0] - o[0], p[1] - o[1], p[2] - o[2]];
    let dist = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
    let hit = scene.trace(o, d.map(|c| c / dist))?;
    ((hit.t - dist).abs() <= OBSERVATION_TOLERANCE * dist).then_some([u, v])
}

/// Every image's 2D observations of the first `n` points of [`point_stream`] (ids from 1), in
/// point order ([`observation`]). Held whole (24 bytes per observation): `images.txt` lists
/// them before `points3D.txt` lists the points.
fn observations(scene: &SynthScene, cameras: &[Camera], n: u64) -> Vec<Vec<colmap::Point2D>> {
    use rayon::prelude::*;
    let mut out = vec![Vec::new(); cameras.len()];
    let mut stream = point_stream(scene, n).map(|s| s.position).enumerate();
    loop {
        let batch: Vec<(usize, [f64; 3])> = stream.by_ref().take(OBSERVATION_BATCH).collect();
        if batch.is_empty() {
            return out;
        }
        let seen: Vec<Vec<(usize, [f64; 2])>> = batch
            .par_iter()
            .map(|&(_, p)| {
                cameras
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| observation(scene, c, p).map(|xy| (i, xy)))
                    .collect()
            })
            .collect();
        for ((j, _), views) in batch.iter().zip(seen) {
            for (i, xy) in views {
                out[i].push(colmap::Point2D {
                    xy,
                    point3d_id: *j as u64 + 1,
                });
            }
        }
    }
}

fn file_len(path: &Path) -> Result<u64, SynthError> {
    Ok(fs::metadata(path).map_err(io_err(path))?.len())
}

fn write_colmap(
    dir: &Path,
    scene: &SynthScene,
    cameras: &[Camera],
    args: &SynthArgs,
) -> Result<Vec<PathBuf>, SynthError> {
    let k = cameras[0].intrinsics;
    let (model_id, params) = match args.camera_model {
        CameraModel::Pinhole => (PINHOLE_MODEL_ID, vec![k.fx, k.fy, k.cx, k.cy]),
        // The ideal equidistant fisheye: OpenCV's fisheye model with k1..k4 = 0.
        CameraModel::Fisheye => (
            OPENCV_FISHEYE_MODEL_ID,
            vec![k.fx, k.fy, k.cx, k.cy, 0.0, 0.0, 0.0, 0.0],
        ),
    };
    let camera = ColmapCamera {
        id: 1,
        model_id,
        width: args.width as u64,
        height: args.height as u64,
        params,
    };
    let images: Vec<ColmapImage> = cameras
        .iter()
        .enumerate()
        .map(|(i, c)| ColmapImage {
            // COLMAP ids are u32 and start at 1; `views` fits because a u32 overflow would take
            // 4 billion image files.
            id: i as u32 + 1,
            qvec: rotation_to_quaternion_wxyz(&c.world_to_camera.rotation),
            tvec: c.world_to_camera.translation,
            camera_id: 1,
            name: image_name(i, args.image_format),
        })
        .collect();
    let observations = match args.tracks {
        true => observations(scene, cameras, args.points),
        false => vec![Vec::new(); cameras.len()],
    };
    // The points again (the stream is deterministic), each with its track: the images whose
    // next observation is this point, in image order; an image's observations are in point
    // order, so one cursor per image finds each observation's index.
    let mut next = vec![0usize; cameras.len()];
    let mut points = point_stream(scene, args.points).enumerate().map(|(j, s)| {
        let id = j as u64 + 1;
        let mut track = Vec::new();
        // Without --tracks there is nothing to look up (views × points checks otherwise).
        if args.tracks {
            for (i, obs) in observations.iter().enumerate() {
                if obs.get(next[i]).is_some_and(|o| o.point3d_id == id) {
                    track.push(TrackElement {
                        image_id: i as u32 + 1,
                        point2d_idx: next[i] as u32,
                    });
                    next[i] += 1;
                }
            }
        }
        let point = ColmapPoint {
            id,
            xyz: s.position,
            rgb: s.rgb,
            error: 0.0,
        };
        (point, track)
    });
    let sparse = dir.join("sparse");
    let staging = sparse.join(".0.tmp");
    let final_dir = sparse.join("0");
    fs::create_dir_all(&staging).map_err(io_err(&staging))?;
    fs::create_dir_all(&final_dir).map_err(io_err(&final_dir))?;
    colmap::write_model_with_tracks(
        &staging,
        Encoding::Text,
        &[camera],
        &images,
        &observations,
        &mut points,
    )
    .map_err(SynthError::Colmap)?;
    let mut written = Vec::new();
    let mut entries: Vec<_> = fs::read_dir(&staging)
        .map_err(io_err(&staging))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io_err(&staging))?;
    entries.sort();
    for from in entries {
        let to = final_dir.join(from.file_name().unwrap_or_default());
        crate::fsutil::install(&from, &to).map_err(io_err(&to))?;
        written.push(to);
    }
    fs::remove_dir(&staging).map_err(io_err(&staging))?;
    Ok(written)
}

/// One frame of `transforms.json`.
#[derive(serde::Serialize)]
struct NerfFrame {
    file_path: String,
    transform_matrix: [[f64; 4]; 4],
}

#[derive(serde::Serialize)]
struct NerfTransforms {
    /// nerfstudio's lens model: `OPENCV_FISHEYE` for fisheye cameras; absent (pinhole) else.
    #[serde(skip_serializing_if = "Option::is_none")]
    camera_model: Option<&'static str>,
    /// The pinhole field of view; absent for a fisheye, whose `fl_x` is no pinhole's.
    #[serde(skip_serializing_if = "Option::is_none")]
    camera_angle_x: Option<f64>,
    fl_x: f64,
    fl_y: f64,
    cx: f64,
    cy: f64,
    w: u32,
    h: u32,
    /// OpenCV's fisheye coefficients `k1..k4`, all 0 (the ideal equidistant fisheye); absent
    /// for a pinhole.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    fisheye_k: Option<FisheyeCoefficients>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ply_file_path: Option<String>,
    frames: Vec<NerfFrame>,
}

/// nerfstudio's `k1 k2 k3 k4` keys of an `OPENCV_FISHEYE` camera.
#[derive(serde::Serialize)]
struct FisheyeCoefficients {
    k1: f64,
    k2: f64,
    k3: f64,
    k4: f64,
}

fn write_ply(path: &Path, scene: &SynthScene, n: u64) -> Result<(), SynthError> {
    use crate::export::ply::{write_point_row, write_points_header};
    let comment = format!("ramsplat synth seed {}", scene.seed());
    crate::fsutil::write_atomic_with(path, &mut |w| {
        write_points_header(w, n, &comment)?;
        for s in point_stream(scene, n) {
            write_point_row(w, s.position.map(|v| v as f32), s.rgb)?;
        }
        Ok(())
    })
    .map_err(io_err(path))
}

fn write_nerf(
    dir: &Path,
    scene: &SynthScene,
    cameras: &[Camera],
    args: &SynthArgs,
) -> Result<Vec<PathBuf>, SynthError> {
    let mut written = Vec::new();
    let ply_name = "points3d.ply";
    if args.points > 0 {
        let ply = dir.join(ply_name);
        write_ply(&ply, scene, args.points)?;
        written.push(ply);
    }
    let k = cameras[0].intrinsics;
    let fisheye = args.camera_model == CameraModel::Fisheye;
    let transforms = NerfTransforms {
        camera_model: fisheye.then_some("OPENCV_FISHEYE"),
        camera_angle_x: (!fisheye).then(|| cameras[0].fov().0),
        fisheye_k: fisheye.then_some(FisheyeCoefficients {
            k1: 0.0,
            k2: 0.0,
            k3: 0.0,
            k4: 0.0,
        }),
        fl_x: k.fx,
        fl_y: k.fy,
        cx: k.cx,
        cy: k.cy,
        w: args.width,
        h: args.height,
        ply_file_path: (args.points > 0).then(|| ply_name.to_owned()),
        frames: cameras
            .iter()
            .enumerate()
            .map(|(i, c)| NerfFrame {
                file_path: format!("images/{}", image_name(i, args.image_format)),
                transform_matrix: c.opengl_camera_to_world(),
            })
            .collect(),
    };
    let path = dir.join("transforms.json");
    let mut json = serde_json::to_vec_pretty(&transforms).map_err(|source| SynthError::Json {
        path: path.clone(),
        source,
    })?;
    json.push(b'\n');
    crate::fsutil::write_atomic(&path, &json).map_err(io_err(&path))?;
    written.push(path);
    Ok(written)
}

/// Generates the dataset described by `args`; calls `progress(done, total)` after each view.
pub fn run(args: &SynthArgs, progress: &dyn Fn(u64, u64)) -> Result<SynthReport, SynthError> {
    validate(args)?;
    prepare_output(&args.output, args.force)?;
    let scene = args.scene();
    let cameras = scene.cameras_with(
        args.views,
        args.width,
        args.height,
        args.camera_model.projection(),
    );
    for (view, c) in cameras.iter().enumerate() {
        c.validate()
            .map_err(|source| SynthError::Camera { view, source })?;
    }
    let images_dir = args.output.join("images");
    let image_bytes = write_images(&scene, &cameras, &images_dir, args.image_format, progress)?;
    let metadata_files = match args.format {
        SynthFormat::Colmap => write_colmap(&args.output, &scene, &cameras, args)?,
        SynthFormat::Nerf => write_nerf(&args.output, &scene, &cameras, args)?,
    };
    let mut bytes_written = image_bytes;
    for f in &metadata_files {
        bytes_written += file_len(f)?;
    }
    let depth_files = if args.depths {
        let params = match args.format {
            SynthFormat::Colmap => args.output.join("sparse").join("0"),
            SynthFormat::Nerf => args.output.clone(),
        }
        .join(crate::import::depth::DEPTH_PARAMS_FILE);
        let dir = args.output.join("depths");
        bytes_written += write_depths(&scene, &cameras, &dir, &params, args.image_format)?;
        Some((dir, params))
    } else {
        None
    };
    Ok(SynthReport {
        output: args.output.clone(),
        format: args.format,
        image_format: args.image_format,
        camera_model: args.camera_model,
        layout: args.layout,
        objects: scene.object_count(),
        ground_area: scene.ground_area(),
        ground_side: scene.ground_side(),
        views: args.views,
        width: args.width,
        height: args.height,
        points: args.points,
        images_dir,
        image_bytes,
        bytes_written,
        metadata_files,
        depth_files,
    })
}

/// The per-view affine map of a true inverse-depth range `[lo, hi]` onto 0..=65535, as a
/// monocular estimator's relative output: `raw = round((inv − lo) / (hi − lo) · 65535)`, and
/// the 3DGS fit that maps it back, `raw / 65536 · scale + offset` with
/// `scale = (hi − lo) · 65536 / 65535`, `offset = lo`. A constant view (`hi == lo`) stores 0
/// everywhere with `scale` as if its range were `hi` (any positive scale recovers `lo`).
pub fn depth_quantiser(lo: f64, hi: f64) -> (impl Fn(f64) -> u16, crate::shard::DepthScale) {
    let range = hi - lo;
    let quantise = move |inv: f64| {
        if range > 0.0 {
            ((inv - lo) / range * 65535.0 + 0.5).clamp(0.0, 65535.0) as u16
        } else {
            0
        }
    };
    let span = if range > 0.0 {
        range
    } else if hi > 0.0 {
        hi
    } else {
        1.0
    };
    let fit = crate::shard::DepthScale {
        scale: (span * 65536.0 / 65535.0) as f32,
        offset: lo as f32,
    };
    (quantise, fit)
}

/// Writes every view's inverse-depth map (`SynthScene::inverse_depth`, quantised per view by
/// [`depth_quantiser`] over its own range, sky included as 0) as a 16-bit grey PNG
/// `dir/<image stem>.png`, and their fits to `params` keyed by image stem (the name without
/// its extension, as 3DGS keys them). Returns the bytes written.
fn write_depths(
    scene: &SynthScene,
    cameras: &[Camera],
    dir: &Path,
    params: &Path,
    format: ImageFormat,
) -> Result<u64, SynthError> {
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mut fits = serde_json::Map::new();
    let mut bytes = 0u64;
    for (i, c) in cameras.iter().enumerate() {
        let inv = scene.inverse_depth(c);
        let lo = inv.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = inv.iter().copied().fold(0.0, f64::max);
        let (quantise, fit) = depth_quantiser(lo, hi);
        // The PNG encoder takes 16-bit samples in native byte order.
        let ne: Vec<u8> = inv
            .iter()
            .flat_map(|&v| quantise(v).to_ne_bytes())
            .collect();
        let name = image_name(i, format);
        let stem = Path::new(&name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or(name.clone());
        let path = dir.join(format!("{stem}.png"));
        let mut encode_err = None;
        crate::fsutil::write_atomic_with(&path, &mut |w| {
            image::codecs::png::PngEncoder::new(&mut *w)
                .write_image(&ne, c.width, c.height, image::ExtendedColorType::L16)
                .map_err(|e| {
                    let io = std::io::Error::other(e.to_string());
                    encode_err = Some(e);
                    io
                })
        })
        .map_err(|e| match encode_err.take() {
            Some(source) => SynthError::Encode {
                path: path.clone(),
                view: i,
                source,
            },
            None => io_err(&path)(e),
        })?;
        bytes += file_len(&path)?;
        fits.insert(
            stem,
            serde_json::json!({"scale": fit.scale, "offset": fit.offset}),
        );
    }
    let mut json = serde_json::to_vec_pretty(&fits).map_err(|source| SynthError::Json {
        path: params.to_owned(),
        source,
    })?;
    json.push(b'\n');
    if let Some(parent) = params.parent() {
        fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    crate::fsutil::write_atomic(params, &json).map_err(io_err(params))?;
    Ok(bytes + json.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn tiny(dir: &Path, format: SynthFormat) -> SynthArgs {
        SynthArgs {
            views: 6,
            width: 40,
            height: 30,
            points: 200,
            format,
            ..SynthArgs::new(dir)
        }
    }

    /// Every file under `dir` (relative path → bytes), sorted; not synth's marker, which is no
    /// part of the dataset (nor of `bytes_written`) and the same for every seed.
    fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p != dir.join(SYNTH_MARKER) {
                    out.push((
                        p.strip_prefix(dir).unwrap().to_owned(),
                        fs::read(&p).unwrap(),
                    ));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn nerf_dataset_is_complete_parseable_and_consistent() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("ds");
        let args = tiny(&out, SynthFormat::Nerf);
        let calls = Cell::new(Vec::new());
        let report = run(&args, &|d, t| {
            let mut v = calls.take();
            v.push((d, t));
            calls.set(v);
        })
        .unwrap();
        assert_eq!(calls.take(), (1..=6).map(|d| (d, 6)).collect::<Vec<_>>());
        assert_eq!(report.views, 6);

        // Images decode at the right size and are what the scene renders.
        let scene = SynthScene::new(args.seed);
        let mut image_bytes = 0;
        for i in 0..6 {
            let path = out.join("images").join(image_name(i, ImageFormat::Png));
            image_bytes += fs::metadata(&path).unwrap().len();
            let img = image::open(&path).unwrap().to_rgb8();
            assert_eq!(img.dimensions(), (40, 30));
            assert_eq!(img.as_raw(), &scene.render(&scene.camera(i, 6, 40, 30)));
        }
        assert_eq!(report.image_bytes, image_bytes);

        // transforms.json has every field, and its matrices are the cameras in OpenGL axes.
        let json: serde_json::Value =
            serde_json::from_slice(&fs::read(out.join("transforms.json")).unwrap()).unwrap();
        for key in ["fl_x", "fl_y", "cx", "cy", "camera_angle_x"] {
            assert!(json[key].as_f64().unwrap() > 0.0, "{key}");
        }
        assert_eq!(
            (json["w"].as_u64(), json["h"].as_u64()),
            (Some(40), Some(30))
        );
        assert_eq!(json["cx"].as_f64(), Some(20.0));
        assert_eq!(json["ply_file_path"].as_str(), Some("points3d.ply"));
        let fx = json["fl_x"].as_f64().unwrap();
        let angle = json["camera_angle_x"].as_f64().unwrap();
        assert!((2.0 * (20.0 / fx).atan() - angle).abs() < 1e-12);
        let frames = json["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 6);
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(
                f["file_path"].as_str().unwrap(),
                format!("images/{i:05}.png")
            );
            let m: [[f64; 4]; 4] = serde_json::from_value(f["transform_matrix"].clone()).unwrap();
            // Undo the OpenGL flip and compare with the camera.
            let c2w = [
                [m[0][0], -m[0][1], -m[0][2]],
                [m[1][0], -m[1][1], -m[1][2]],
                [m[2][0], -m[2][1], -m[2][2]],
            ];
            let pose =
                crate::scene::camera::Pose::from_camera_to_world(c2w, [m[0][3], m[1][3], m[2][3]]);
            let cam = scene.camera(i, 6, 40, 30);
            for a in 0..3 {
                assert!((pose.translation[a] - cam.world_to_camera.translation[a]).abs() < 1e-9);
                for b in 0..3 {
                    assert!(
                        (pose.rotation[a][b] - cam.world_to_camera.rotation[a][b]).abs() < 1e-12
                    );
                }
            }
            // OpenGL camera looks down −z: the world bounds centre is in front.
            let (centre, _) = scene.bounds();
            let to = [
                centre[0] - m[0][3],
                centre[1] - m[1][3],
                centre[2] - m[2][3],
            ];
            assert!(to[0] * m[0][2] + to[1] * m[1][2] + to[2] * m[2][2] < 0.0);
        }

        // The PLY holds exactly the sampled points.
        let ply = fs::read(out.join("points3d.ply")).unwrap();
        let end = b"end_header\n";
        let at = ply.windows(end.len()).position(|w| w == end).unwrap() + end.len();
        let header = std::str::from_utf8(&ply[..at]).unwrap();
        assert!(
            header.contains("format binary_little_endian 1.0\n")
                && header.contains("element vertex 200\n")
        );
        assert_eq!(ply.len() - at, 200 * 15, "3 floats + 3 bytes per point");
        let first: Vec<f32> = (0..3)
            .map(|k| f32::from_le_bytes(ply[at + 4 * k..at + 4 * k + 4].try_into().unwrap()))
            .collect();
        let want = point_stream(&scene, 1).next().unwrap();
        assert_eq!(first, want.position.map(|v| v as f32).to_vec());
        assert_eq!(&ply[at + 12..at + 15], &want.rgb);

        let total: u64 = snapshot(&out).iter().map(|(_, b)| b.len() as u64).sum();
        assert_eq!(report.bytes_written, total);
        assert!(!snapshot(&out)
            .iter()
            .any(|(p, _)| p.to_string_lossy().contains(".tmp")));
    }

    /// `synth --depths` then `convert --depths depths`: every packed target is the scene's
    /// true inverse depth at the pixel's centre ray, evaluated here independently (the hit
    /// point through `Pose::transform`, checked to project back onto the pixel), within half
    /// a quantisation step of the view's range (`scale / 65536 / 2`) plus a few f32 ulps of
    /// the target (`DepthScale::target` runs in f32). Downscaled by 2, a packed value is the
    /// mean of four stored ones, each within half a step, rounded once more: within a step
    /// of the mean of the four truths. Fisheye datasets (`--camera-model fisheye`) converted
    /// with `--keep-fisheye` alike, the depth being camera-space `z` along each pixel's
    /// equidistant ray; at full size their packed pixels are the rendered images exactly (an
    /// ideal equidistant lens is copied, not resampled).
    #[test]
    fn depth_maps_pack_to_the_scene_inverse_depth() {
        use crate::pack::{convert, ConvertOptions};
        use crate::shard::reader::Pack;
        let tmp = tempfile::tempdir().unwrap();
        use SceneLayout::{Aerial, Orbit};
        for (format, downscale, model, layout) in [
            (SynthFormat::Colmap, 1u32, CameraModel::Pinhole, Orbit),
            (SynthFormat::Nerf, 1, CameraModel::Pinhole, Orbit),
            (SynthFormat::Colmap, 2, CameraModel::Pinhole, Orbit),
            (SynthFormat::Colmap, 1, CameraModel::Fisheye, Orbit),
            (SynthFormat::Nerf, 1, CameraModel::Fisheye, Orbit),
            (SynthFormat::Nerf, 2, CameraModel::Fisheye, Orbit),
            (SynthFormat::Colmap, 2, CameraModel::Pinhole, Aerial),
            (SynthFormat::Nerf, 1, CameraModel::Fisheye, Aerial),
        ] {
            let out = tmp
                .path()
                .join(format!("{format:?}-{downscale}-{model:?}-{layout:?}"));
            let args = SynthArgs {
                depths: true,
                points: 50,
                camera_model: model,
                layout,
                ..tiny(&out, format)
            };
            let report = run(&args, &|_, _| {}).unwrap();
            let (dir, params) = report.depth_files.clone().unwrap();
            assert_eq!(dir, out.join("depths"));
            assert!(params.is_file() && dir.join("00005.png").is_file());
            let pack_dir = tmp
                .path()
                .join(format!("{format:?}-{downscale}-{model:?}-{layout:?}.pack"));
            let opts = ConvertOptions {
                resize: Some(crate::import::image::Resize::Downscale(downscale)),
                depths: Some(PathBuf::from("depths")),
                test_every: 0,
                workers: 1,
                keep_fisheye: model == CameraModel::Fisheye,
                ..Default::default()
            };
            let warnings = std::sync::Mutex::new(Vec::new());
            convert(&out, &pack_dir, &opts, &|e| {
                if let crate::pack::Event::Warning(w) = e {
                    warnings.lock().unwrap().push(w.to_owned());
                }
            })
            .unwrap();
            let warnings = warnings.into_inner().unwrap();
            assert!(
                !warnings.iter().any(|w| w.contains("unreliable")),
                "{warnings:?}"
            );
            let pack = Pack::open(&pack_dir).unwrap();
            let m = pack.manifest();
            assert_eq!(m.views.len(), 6);
            let scene = args.scene();
            for (i, v) in m.views.iter().enumerate() {
                let d = v.depth.expect("every synth view has a depth plane");
                let mut bytes = vec![0u8; v.decoded_len()];
                pack.read_view_into(i, &mut bytes).unwrap();
                let planes = v.layout().planes(&bytes, v.width(), v.height()).unwrap();
                let mut targets = Vec::new();
                d.targets_into(planes.depth.unwrap(), &mut targets);
                let full = scene.camera_with(i, 6, 40, 30, model.projection());
                assert_eq!(v.camera.projection, model.projection());
                assert_eq!((v.width(), v.height()), (40 / downscale, 30 / downscale));
                if downscale == 1 {
                    assert_eq!(v.camera.intrinsics, full.intrinsics);
                    assert!(
                        planes.pixels == scene.render(&full),
                        "{format:?} {model:?} view {i}: the packed pixels are the render"
                    );
                }
                let truth = |x: u32, y: u32| -> f64 {
                    let (o, dir) = scene::pixel_ray(&full, x as f64 + 0.5, y as f64 + 0.5).unwrap();
                    match scene.trace(o, dir) {
                        None => 0.0,
                        Some(hit) => {
                            let p = full.project(hit.point).unwrap();
                            assert!((p[0] - x as f64 - 0.5).abs() < 1e-6);
                            assert!((p[1] - y as f64 - 0.5).abs() < 1e-6);
                            1.0 / full.world_to_camera.transform(hit.point)[2]
                        }
                    }
                };
                let step = d.scale as f64 / 65536.0;
                let n = downscale;
                let mut sky = 0;
                for y in 0..v.height() {
                    for x in 0..v.width() {
                        let mut want = 0.0;
                        let mut sees_sky = false;
                        for (a, b) in (0..n).flat_map(|a| (0..n).map(move |b| (a, b))) {
                            let t = truth(n * x + a, n * y + b);
                            sees_sky |= t == 0.0;
                            want += t / (n * n) as f64;
                        }
                        // Sky is stored as 0, which reads as "no depth"; a downscaled pixel
                        // that covers any sky is no depth too (never half a depth).
                        if sees_sky {
                            want = 0.0;
                        }
                        sky += usize::from(want == 0.0);
                        let got = targets[(y * v.width() + x) as usize] as f64;
                        if want == 0.0 {
                            assert!(got.is_nan(), "view {i} ({x}, {y}): sky reads {got}");
                            continue;
                        }
                        let tol = if n == 1 { 0.5 } else { 1.0 } * step * 1.001
                            + 4.0 * f32::EPSILON as f64 * want.abs();
                        assert!(
                            (got - want).abs() <= tol,
                            "{format:?} {model:?} /{n} view {i} ({x}, {y}): {got} vs {want} \
                             (step {step})"
                        );
                    }
                }
                // The orbit views see the ground, the objects and the sky; aerial views look
                // down (the sky only past the ground's edge or a fisheye's horizon).
                assert!(
                    (sky > 0 || layout == Aerial) && sky < (v.width() * v.height()) as usize,
                    "view {i}"
                );
            }
        }
    }

    #[test]
    fn colmap_dataset_round_trips_through_the_importer() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("ds");
        let args = tiny(&out, SynthFormat::Colmap);
        let report = run(&args, &|_, _| {}).unwrap();
        let names: Vec<String> = ["cameras.txt", "images.txt", "points3D.txt"]
            .map(String::from)
            .to_vec();
        let got: Vec<String> = report
            .metadata_files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(got, names);
        assert!(!out.join("sparse/.0.tmp").exists());
        assert_eq!(
            crate::import::detect(&out).unwrap(),
            crate::dataset::Format::Colmap
        );

        let mut imported = colmap::import(&out, &crate::import::ImportOptions::default()).unwrap();
        assert!(imported.missing_images.is_empty());
        let scene = SynthScene::new(args.seed);
        assert_eq!(imported.views.len(), 6);
        for (i, v) in imported.views.iter().enumerate() {
            let want = scene.camera(i, 6, 40, 30);
            assert_eq!(v.name, image_name(i, ImageFormat::Png));
            assert!(v.image_path.is_file());
            assert!(v.distortion.is_none());
            let got = v.camera;
            assert_eq!((got.width, got.height), (40, 30));
            assert_eq!(got.intrinsics, want.intrinsics);
            for a in 0..3 {
                assert!(
                    (got.world_to_camera.translation[a] - want.world_to_camera.translation[a])
                        .abs()
                        < 1e-9
                );
                for b in 0..3 {
                    let (g, w) = (
                        got.world_to_camera.rotation[a][b],
                        want.world_to_camera.rotation[a][b],
                    );
                    assert!((g - w).abs() < 1e-9, "view {i}");
                }
            }
        }
        // The SfM cloud streams back exactly the sampled points.
        assert_eq!(imported.clouds.len(), 1);
        let cloud = &mut imported.clouds[0];
        let mut xyz = Vec::new();
        let mut rgb = Vec::new();
        while let Some(chunk) = cloud.next_chunk(64).unwrap() {
            xyz.extend(chunk.xyz);
            rgb.extend(chunk.rgb);
        }
        let want: Vec<SurfaceSample> = point_stream(&scene, 200).collect();
        assert_eq!(xyz.len(), 200);
        for (k, s) in want.iter().enumerate() {
            assert_eq!(rgb[k], s.rgb);
            assert!((0..3).all(|a| (xyz[k][a] - s.position[a] as f32).abs() < 1e-6));
        }
    }

    /// The COLMAP model's observations are real: every track element points at an image's
    /// 2D point that names the point back and lies at its exact projection, every 2D point
    /// is in exactly one track, and a point is observed exactly when it is in front of the
    /// view, inside it and not occluded (checked with `visible_from`, whose tolerance is far
    /// tighter than the writer's 1 %: a few grazing points differ, never a visible one).
    /// Alike for fisheye cameras, whose observations are the equidistant projection (written
    /// out here: `θ = atan2(r, z)`, `u = fx·θ·x/r + cx`).
    #[test]
    fn colmap_observations_are_consistent_and_visible() {
        for layout in [SceneLayout::Orbit, SceneLayout::Aerial] {
            for model in [CameraModel::Pinhole, CameraModel::Fisheye] {
                observations_are_consistent_and_visible(model, layout);
            }
        }
    }

    fn observations_are_consistent_and_visible(model: CameraModel, layout: SceneLayout) {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("ds");
        let args = SynthArgs {
            tracks: true,
            camera_model: model,
            layout,
            ..tiny(&out, SynthFormat::Colmap)
        };
        run(&args, &|_, _| {}).unwrap();
        let sparse = out.join("sparse/0");
        let points = std::fs::read(sparse.join("points3D.txt")).unwrap();
        let points = colmap::parse_tracks_bytes(&points, Encoding::Text).unwrap();
        // images.txt: each image line, then its observation line of X Y POINT3D_ID triples.
        let images = std::fs::read_to_string(sparse.join("images.txt")).unwrap();
        let lines: Vec<&str> = images.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines.len(), 2 * args.views);
        let obs: Vec<Vec<(f64, f64, u64)>> = lines
            .chunks(2)
            .map(|pair| {
                let v: Vec<&str> = pair[1].split_whitespace().collect();
                v.chunks(3)
                    .map(|t| {
                        (
                            t[0].parse().unwrap(),
                            t[1].parse().unwrap(),
                            t[2].parse().unwrap(),
                        )
                    })
                    .collect()
            })
            .collect();
        let scene = args.scene();
        let cameras = scene.cameras_with(args.views, args.width, args.height, model.projection());
        // (z, u, v) of a world point in camera `c`, by the camera's projection.
        let project = |c: &Camera, p: [f64; 3]| {
            let [cx, cy, cz] = c.world_to_camera.transform(p);
            let k = c.intrinsics;
            let s = match model {
                CameraModel::Pinhole => 1.0 / cz,
                CameraModel::Fisheye => {
                    let r = cx.hypot(cy);
                    r.atan2(cz) / r
                }
            };
            (cz, k.fx * cx * s + k.cx, k.fy * cy * s + k.cy)
        };
        let mut used = vec![vec![false; 0]; args.views];
        for (i, o) in obs.iter().enumerate() {
            used[i] = vec![false; o.len()];
        }
        let (mut elements, mut occluded, mut disagree) = (0usize, 0usize, 0usize);
        for (p, track) in &points {
            let mut seen_by = vec![false; args.views];
            for e in track {
                let i = e.image_id as usize - 1;
                let (x, y, id) = obs[i][e.point2d_idx as usize];
                assert_eq!(id, p.id);
                assert!(!std::mem::replace(
                    &mut used[i][e.point2d_idx as usize],
                    true
                ));
                assert!(
                    !std::mem::replace(&mut seen_by[i], true),
                    "one element per image"
                );
                let (cz, u, v) = project(&cameras[i], p.xyz);
                assert!(cz > 0.0);
                assert!((x - u).abs() < 1e-9, "{model:?}: {x} vs {u}");
                assert!((y - v).abs() < 1e-9, "{model:?}: {y} vs {v}");
                assert!((0.0..40.0).contains(&x) && (0.0..30.0).contains(&y));
                elements += 1;
            }
            for (i, c) in cameras.iter().enumerate() {
                let (cz, u, v) = project(c, p.xyz);
                let in_frame = cz > 0.0 && (0.0..40.0).contains(&u) && (0.0..30.0).contains(&v);
                let visible = in_frame && scene.visible_from(p.xyz, c.centre());
                occluded += usize::from(in_frame && !visible);
                // A point visible to 1e-6 is always observed; one the writer's 1 % tolerance
                // lets through (a ray grazing the surface near it) rarely.
                assert!(
                    !visible || seen_by[i],
                    "point {} hidden from view {i}",
                    p.id
                );
                disagree += usize::from(visible != seen_by[i]);
            }
        }
        let total: usize = obs.iter().map(Vec::len).sum();
        assert_eq!(elements, total, "every 2D point is in a track");
        assert!(used.iter().flatten().all(|&u| u));
        assert!(total > 100, "{total} observations of 200 points in 6 views");
        assert!(
            occluded > 0,
            "some points in frame are hidden, and not observed"
        );
        assert!(disagree * 20 <= total, "{disagree} of {total}");
    }

    #[test]
    fn same_seed_gives_identical_files_and_other_seeds_differ() {
        let tmp = tempfile::tempdir().unwrap();
        let mut args = tiny(&tmp.path().join("a"), SynthFormat::Nerf);
        args.image_format = ImageFormat::Jpg;
        run(&args, &|_, _| {}).unwrap();
        let a = snapshot(&args.output);
        args.output = tmp.path().join("b");
        run(&args, &|_, _| {}).unwrap();
        assert_eq!(a, snapshot(&args.output));
        args.output = tmp.path().join("c");
        args.seed = 1;
        run(&args, &|_, _| {}).unwrap();
        let c = snapshot(&args.output);
        assert_eq!(a.len(), c.len());
        assert!(a
            .iter()
            .zip(&c)
            .all(|((pa, ba), (pc, bc))| pa == pc && ba != bc));
        let img = image::open(args.output.join("images/00005.jpg")).unwrap();
        assert_eq!((img.width(), img.height()), (40, 30));
    }

    /// `--layout aerial` is as deterministic as orbit, with every optional file (tracks,
    /// depths, fisheye), and is a different scene from orbit's for the same seed; the report
    /// describes the area.
    #[test]
    fn aerial_layout_gives_identical_files_for_the_same_arguments() {
        let tmp = tempfile::tempdir().unwrap();
        for (i, model) in [CameraModel::Pinhole, CameraModel::Fisheye]
            .into_iter()
            .enumerate()
        {
            let mut args = SynthArgs {
                layout: SceneLayout::Aerial,
                camera_model: model,
                tracks: true,
                depths: true,
                views: 12,
                ..tiny(&tmp.path().join(format!("a{i}")), SynthFormat::Colmap)
            };
            let report = run(&args, &|_, _| {}).unwrap();
            assert_eq!(report.layout, SceneLayout::Aerial);
            let side = report.ground_side.unwrap();
            assert!((side - scene::AERIAL_SPACING * 12f64.sqrt()).abs() < 1e-12);
            assert!((report.ground_area - side * side).abs() < 1e-9);
            assert_eq!(report.objects, args.scene().object_count());
            let a = snapshot(&args.output);
            args.output = tmp.path().join(format!("b{i}"));
            run(&args, &|_, _| {}).unwrap();
            assert_eq!(a, snapshot(&args.output));
            args.output = tmp.path().join(format!("c{i}"));
            args.layout = SceneLayout::Orbit;
            let report = run(&args, &|_, _| {}).unwrap();
            assert_eq!(
                (report.layout, report.ground_side),
                (SceneLayout::Orbit, None)
            );
            let c = snapshot(&args.output);
            assert_eq!(a.len(), c.len());
            assert_ne!(a[0], c[0], "aerial images are not orbit's");
        }
    }

    #[test]
    fn non_empty_output_is_refused_without_force_and_cleaned_with_it() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().to_owned();
        // An earlier (bigger, COLMAP) run, and a file of the user's beside it.
        let mut earlier = tiny(&out, SynthFormat::Colmap);
        earlier.views = 100;
        earlier.width = 8;
        earlier.height = 8;
        run(&earlier, &|_, _| {}).unwrap();
        assert!(out.join("images/00099.png").exists() && out.join(SYNTH_MARKER).is_file());
        fs::write(out.join("notes.txt"), "keep me").unwrap();
        let mut args = tiny(&out, SynthFormat::Nerf);
        let err = run(&args, &|_, _| {}).unwrap_err();
        assert!(matches!(err, SynthError::OutputNotEmpty { .. }));
        assert!(
            err.to_string().contains("--force")
                && err.to_string().contains(&out.display().to_string())
        );
        fs::write(out.join("images/mine.png"), "user file").unwrap();
        args.force = true;
        run(&args, &|_, _| {}).unwrap();
        assert!(!out.join("sparse/0/cameras.txt").exists());
        assert!(!out.join("images/00099.png").exists());
        assert!(out.join("images/mine.png").exists() && out.join("notes.txt").exists());
        assert_eq!(
            crate::import::detect(&out).unwrap(),
            crate::dataset::Format::Nerf
        );
    }

    /// `--force` never clears a directory synth did not make: a COLMAP workspace's model and
    /// photos (the very names synth writes) survive it byte for byte, and so does a pack.
    #[test]
    fn force_leaves_a_directory_synth_did_not_make_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("workspace");
        fs::create_dir_all(out.join("sparse/0")).unwrap();
        fs::create_dir_all(out.join("images")).unwrap();
        for (name, bytes) in [
            ("sparse/0/cameras.bin", &b"the user's cameras"[..]),
            ("sparse/0/images.bin", b"the user's images"),
            ("sparse/0/points3D.bin", b"the user's points"),
            ("images/00000.png", b"the user's photo"),
            ("transforms.json", b"{}"),
        ] {
            fs::write(out.join(name), bytes).unwrap();
        }
        let before = snapshot(&out);
        let mut args = tiny(&out, SynthFormat::Colmap);
        args.force = true;
        let err = run(&args, &|_, _| {}).unwrap_err();
        assert!(matches!(err, SynthError::NotSynthOutput { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(&out.display().to_string()) && msg.contains(SYNTH_MARKER),
            "{msg}"
        );
        assert_eq!(snapshot(&out), before);
    }

    #[test]
    fn bad_arguments_and_paths_give_typed_errors() {
        let tmp = tempfile::tempdir().unwrap();
        for f in [
            |a: &mut SynthArgs| a.views = 0,
            |a: &mut SynthArgs| a.width = 0,
            |a: &mut SynthArgs| a.height = MAX_SIDE + 1,
            // transforms.json has no observations to write.
            |a: &mut SynthArgs| a.tracks = true,
        ] {
            let mut args = tiny(&tmp.path().join("x"), SynthFormat::Nerf);
            f(&mut args);
            assert!(matches!(
                run(&args, &|_, _| {}),
                Err(SynthError::InvalidArgs { .. })
            ));
        }
        // Output path below a regular file.
        let file = tmp.path().join("file");
        fs::write(&file, "x").unwrap();
        let err = run(&tiny(&file.join("sub"), SynthFormat::Nerf), &|_, _| {}).unwrap_err();
        assert!(matches!(err, SynthError::Io { .. }), "{err}");
        assert!(err.to_string().contains("file"), "{err}");
    }

    #[test]
    fn view_count_one_and_zero_points_work() {
        let tmp = tempfile::tempdir().unwrap();
        let args = SynthArgs {
            views: 1,
            points: 0,
            ..tiny(&tmp.path().join("one"), SynthFormat::Nerf)
        };
        let report = run(&args, &|_, _| {}).unwrap();
        assert_eq!(
            report.metadata_files,
            vec![args.output.join("transforms.json")]
        );
        assert!(!args.output.join("points3d.ply").exists());
    }

    #[test]
    fn cli_flags_parse_with_documented_defaults() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            synth: SynthArgs,
        }
        let cli = Cli::try_parse_from(["synth", "-o", "d"]).unwrap();
        let d = SynthArgs::new("d");
        let s = cli.synth;
        assert_eq!(s.layout, SceneLayout::Orbit);
        assert_eq!(
            (
                s.views,
                s.width,
                s.height,
                s.points,
                s.format,
                s.seed,
                s.image_format,
                s.force
            ),
            (
                d.views,
                d.width,
                d.height,
                d.points,
                d.format,
                d.seed,
                d.image_format,
                d.force
            )
        );
        let cli = Cli::try_parse_from([
            "synth",
            "--output",
            "d",
            "--views",
            "3",
            "--width",
            "7",
            "--height",
            "5",
            "--points",
            "0",
            "--format",
            "nerf",
            "--seed",
            "9",
            "--image-format",
            "jpeg",
            "--force",
            "--layout",
            "aerial",
        ])
        .unwrap();
        let s = cli.synth;
        assert_eq!(
            (s.views, s.width, s.height, s.points, s.seed),
            (3, 7, 5, 0, 9)
        );
        assert_eq!(
            (s.format, s.image_format, s.force, s.layout),
            (
                SynthFormat::Nerf,
                ImageFormat::Jpg,
                true,
                SceneLayout::Aerial
            )
        );
    }
}
