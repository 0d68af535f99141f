//! NeRF / instant-ngp / Blender-synthetic `transforms*.json` importer.
//!
//! # Accepted inputs
//! - a folder holding `transforms_train.json` and/or `transforms_test.json` (Blender synthetic
//!   layout): train frames get [`Split::Train`], test frames [`Split::Test`].
//!   `transforms_val.json` is **not imported** (a warning says so): the original 3DGS trains on
//!   train and evaluates on test, and adding val frames to either would make results
//!   incomparable with published numbers. When split files exist, a `transforms.json` next to
//!   them is ignored (with a warning) because the split files carry the dataset's intent;
//! - a folder holding `transforms.json` (instant-ngp, nerfstudio): no split is assigned, so
//!   `--test-every` decides, unless the file has nerfstudio's split lists (below);
//! - a `transforms*.json` file itself: its frames, with no split assigned (the user picked the
//!   file, so the pack's hold-out rule decides).
//!
//! # Metadata, per frame (every key may also appear in a frame, overriding the top level)
//! - size `w`, `h`; when absent, read from the image file's header;
//! - focal length `fl_x` / `fl_y` in pixels, or `camera_angle_x` / `camera_angle_y` (full field
//!   of view in radians): `fx = ½·w / tan(½·camera_angle_x)`. `fy` falls back to `fx`
//!   (square pixels). A frame-level key beats a top-level one; at one level `fl_*` beats
//!   `camera_angle_*`. `cx`, `cy` default to `w/2`, `h/2` (the image centre under the
//!   pixel-centre-at-0.5 convention of [`crate::scene::camera`]);
//! - distortion `k1 k2 k3 p1 p2` (OpenCV radial–tangential) or, with `camera_model`
//!   `OPENCV_FISHEYE` (nerfstudio's fisheye captures), `k1 k2 k3 k4` (OpenCV's fisheye model)
//!   → [`Distortion`], undistorted at pack time. Other lens models are refused: `latlong`/
//!   `equirectangular` set to true, `is_fisheye`/`fisheye` without `OPENCV_FISHEYE` (which
//!   model is meant is unknown), a nonzero `k4`/`k5`/`k6` on a radial–tangential lens
//!   (instant-ngp's fisheye k4, or a rational model: ambiguous, never guessed), nonzero
//!   `p1`/`p2` on a fisheye one, nonzero `ftheta_p*`, or a `camera_model` other than these.
//!   Zero-valued placeholders that some writers emit are accepted;
//! - `transform_matrix`: camera-to-world, OpenGL axes (x right, y up, z back), 4×4 (bottom row
//!   `0 0 0 1`) or 3×4. The y and z columns are negated to get OpenCV axes, then the pose is
//!   inverted with [`Pose::from_camera_to_world`]. NaN/Inf (Python's `json` writes bare `NaN`
//!   and `Infinity`, which this importer reads so it can name the frame) and non-rotations
//!   (a scale or shear folded into the matrix) are refused with the frame named.
//! - `file_path`: relative to the JSON file's folder (absolute paths are used as they are).
//!   Blender writes it without an extension (`./train/r_0`); then `.png`, `.jpg`, `.jpeg`
//!   are tried, in that order. The view's name is `file_path` exactly as written.
//! - `gs-pack convert --images DIR` ([`ImportOptions::images`]): each frame's image is the file
//!   name of its `file_path` in `DIR` (relative to the JSON file's folder), nerfstudio's
//!   `images_N` layout; the view keeps its `file_path` as name. A resized copy gets its camera
//!   scaled to the file (`crate::import::image::camera_for_file`), so `fl_x` needs `w`/`h`;
//!   two frames reading one file (same file name in two folders) are an error.
//! - `mask_path` (nerfstudio, per frame; optional): the frame's loss mask, resolved like
//!   `file_path` (0 = the pixel is excluded from the training loss; see
//!   `crate::import::image::prepare_mask`). A frame that names a mask that does not exist is
//!   an error, since training without it would teach what the mask hides.
//!
//! - `gs-pack convert --depths DIR` ([`ImportOptions::depths`], relative to the dataset
//!   folder): each frame's monocular inverse-depth map `DIR/<file_path's file stem>.png`, as
//!   3DGS's Blender reader finds it, with the fits of a `depth_params.json` beside the
//!   transforms file when there is one (see `attach_depths` and [`super::depth`]).
//!   nerfstudio's per-frame `depth_file_path` holds metric depth in millimetres, not inverse
//!   depth: it is never read, and a note says so when frames have it and `--depths` is not
//!   given.
//!
//! # nerfstudio's top-level keys (what `gs-pack export` writes)
//! - `train_filenames` / `test_filenames`: the split, by `file_path` (a leading `./` on either
//!   side is ignored); `val_filenames`: frames skipped with a warning, as `transforms_val.json`
//!   is. With any of the lists, a frame listed in none of them, a name no frame has, and a name
//!   in two lists are errors. The lists apply to a file whose name assigns no split (a Blender
//!   split file's own split wins).
//! - `ply_file_path`: a PLY point cloud relative to the file's folder, imported as the SfM
//!   cloud `"sfm"` (so training starts from it; `crate::import::ply` reads it). A named file
//!   that does not exist is an error.
//!
//! # Invariants of the result
//! - views sorted by name, names unique (a duplicate is an error);
//! - frames whose image file does not exist are listed in `missing_images` (sorted) with a
//!   warning and skipped, or refused under `--strict`; `metadata_only` skips existence checks;
//! - `clouds` is empty and `no_sfm_points` is true, unless a `ply_file_path` names the points.
//!
//! instant-ngp's `scale`/`offset`/`aabb_scale` only affect its own hash-grid placement and are
//! ignored, as in the original 3DGS reader.

use std::borrow::Cow;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::image::image_dimensions;
use super::ply::open_cloud;
use super::{
    depth, file_present, first_names, ImportError, ImportOptions, ImportedScene, Location,
};
use crate::dataset::Split;
use crate::dataset::{DepthSource, Distortion, Format, PointSource, ViewSource};
use crate::scene::camera::{Camera, CameraError, Intrinsics, Pose, Projection};
use crate::shard::DepthScale;

/// Extensions tried, in order, for a `file_path` that names no existing file (Blender's
/// `./train/r_0`). Appended, not substituted: `frame.0001` must become `frame.0001.png`.
const IMAGE_EXTENSIONS: [&str; 6] = ["png", "jpg", "jpeg", "PNG", "JPG", "JPEG"];

/// The `camera_model` value of OpenCV's fisheye model (nerfstudio's and COLMAP's spelling),
/// compared case-insensitively.
const FISHEYE_MODEL: &str = "OPENCV_FISHEYE";

/// `camera_model` values that are pinhole or OpenCV radial–tangential (nerfstudio and COLMAP
/// spellings), compared case-insensitively.
const PINHOLE_MODELS: [&str; 6] = [
    "OPENCV",
    "PINHOLE",
    "SIMPLE_PINHOLE",
    "SIMPLE_RADIAL",
    "RADIAL",
    "PERSPECTIVE",
];

/// Imports a NeRF-style dataset; see the module doc for what `path` may be.
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    let mut warnings = Vec::new();
    let (root, files) = transforms_files(path, &mut warnings)?;
    let mut views = Vec::new();
    let mut missing = Vec::new();
    let mut frames_total = 0usize;
    let mut clouds: Vec<Box<dyn PointSource<Error = ImportError>>> = Vec::new();
    let mut depth_file_paths = 0;
    for (file, split) in &files {
        let read = read_transforms(file, *split, options, &mut views, &mut missing)?;
        frames_total += read.frames;
        depth_file_paths += read.depth_file_paths;
        if read.val_skipped > 0 {
            warnings.push(format!(
                "{}: {} frames listed in \"val_filenames\" were not imported: like the original \
                 3DGS, ramsplat trains on the train split and evaluates on the test split",
                file.display(),
                read.val_skipped
            ));
        }
        if let Some(ply) = read.points {
            if !clouds.is_empty() {
                return Err(ImportError::invalid(
                    file,
                    "a second \"ply_file_path\": the split files name different point clouds; \
                     keep it in one of them",
                ));
            }
            clouds.push(open_cloud(&ply, "sfm", options, &mut warnings)?);
        }
    }

    if options.images.is_some() {
        // Flattened to file names, two frames may land on one file (Blender's train/r_0 and
        // test/r_0): that would train and test on the same image under two names.
        let mut seen = std::collections::HashMap::new();
        for v in &views {
            if let Some(other) = seen.insert(&v.image_path, &v.name) {
                return Err(ImportError::invalid(
                    &v.image_path,
                    format!(
                        "frames '{other}' and '{}' both read this file: --images takes each \
                         file_path's file name in the folder (nerfstudio's images_N layout), and \
                         these two share theirs; use a dataset whose file names are unique, or \
                         drop --images",
                        v.name
                    ),
                ));
            }
        }
    }
    if depth_file_paths > 0 && options.depths.is_none() {
        warnings.push(format!(
            "{depth_file_paths} frames have nerfstudio's \"depth_file_path\" (metric depth in \
             millimetres); it is not used: --depths DIR takes 3DGS-style monocular inverse-depth \
             maps (Depth Anything V2) for depth regularization"
        ));
    }
    if let Some(dir) = &options.depths {
        if !options.metadata_only {
            attach_depths(&root, dir, &mut views, &mut warnings)?;
        }
    }
    views.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = views.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(ImportError::invalid(
            &root,
            format!(
                "two frames use the same file_path '{}' ({} and {}); every image may appear only once. \
                 Remove the duplicate frame",
                w[0].name,
                w[0].image_path.display(),
                w[1].image_path.display()
            ),
        ));
    }
    missing.sort();
    if !missing.is_empty() {
        let list = first_names(&missing);
        if options.strict {
            return Err(ImportError::invalid(
                &root,
                format!(
                    "{} of {frames_total} frames reference image files that do not exist ({list}); \
                     restore the images, or drop --strict to skip those frames",
                    missing.len()
                ),
            ));
        }
        warnings.push(format!(
            "{} of {frames_total} frames reference image files that do not exist and were skipped ({list}); \
             pass --strict to make this an error",
            missing.len()
        ));
    }
    if views.is_empty() {
        return Err(ImportError::invalid(
            &root,
            format!(
                "no usable frame: {frames_total} frames listed, none with an existing image file; \
                 check that file_path entries are relative to the transforms file's folder"
            ),
        ));
    }
    let no_sfm_points = clouds.is_empty();
    let random_start_note = no_sfm_points.then(|| {
        "NeRF datasets have no SfM points: training will start from random points, which \
         converges more slowly than from an SfM point cloud (--points FILE gives it one)"
            .to_owned()
    });
    Ok(ImportedScene {
        format: Format::Nerf,
        root,
        views,
        clouds,
        no_sfm_points,
        missing_images: missing,
        warnings,
        random_start_note,
    })
}

/// `--depths DIR` (relative to the dataset root `root`, or absolute): each view's map is
/// `DIR/<file_path's file stem>.png`, as 3DGS's Blender reader names it. Without a
/// `depth_params.json` in `root` the maps are taken as they are ([`DepthScale::IDENTITY`], as
/// 3DGS does); with one, each map needs its entry (same key) and fits follow the reliability
/// rule of [`super::depth`], except that a view with neither an entry nor a map has no depth
/// (what `gs-pack export` writes for a view packed without one). A missing map otherwise, or a
/// map without its entry, is an error naming the frame.
fn attach_depths(
    root: &Path,
    dir: &Path,
    views: &mut [ViewSource],
    warnings: &mut Vec<String>,
) -> Result<(), ImportError> {
    let dir = depth::depths_dir(root, dir)?;
    let params_path = root.join(depth::DEPTH_PARAMS_FILE);
    let params = if file_present(&params_path)? {
        Some(depth::DepthParams::read(&params_path)?)
    } else {
        None
    };
    let mut unreliable = 0usize;
    for v in views.iter_mut() {
        let Some(key) = Path::new(&v.name).file_stem().map(|s| s.to_string_lossy()) else {
            return Err(ImportError::invalid(
                &v.image_path,
                format!("frame '{}': its file_path names no file", v.name),
            ));
        };
        let path = depth::depth_file(&dir, &key);
        let scale = match &params {
            None => Some(DepthScale::IDENTITY),
            Some(params) => match params.fit(&key) {
                None if !path.exists() => continue,
                None => {
                    return Err(ImportError::invalid(
                        &params.path,
                        format!(
                            "frame '{}' has the depth map {} but no entry {key:?}; add its fit \
                             (3DGS's utils/make_depth_scale.py), or remove the map to train the \
                             view without depth",
                            v.name,
                            path.display()
                        ),
                    ))
                }
                Some(depth::Fit::Unreliable) => {
                    unreliable += 1;
                    None
                }
                Some(depth::Fit::Reliable(scale)) => Some(scale),
            },
        };
        let path = depth::existing_depth_file(&v.name, path)?;
        v.depth = scale.map(|scale| DepthSource { path, scale });
    }
    if let (Some(params), true) = (&params, unreliable > 0) {
        warnings.push(depth::unreliable_note(unreliable, views.len(), params));
    }
    Ok(())
}

/// Transforms files to read, each with the split it assigns.
type SplitFiles = Vec<(PathBuf, Option<Split>)>;

/// The dataset root and the transforms files to read.
fn transforms_files(
    path: &Path,
    warnings: &mut Vec<String>,
) -> Result<(PathBuf, SplitFiles), ImportError> {
    if path.is_file() {
        let root = path.parent().map(Path::to_owned).unwrap_or_default();
        return Ok((root, vec![(path.to_owned(), None)]));
    }
    if !path.is_dir() {
        return Err(super::no_dataset_at(path));
    }
    let train = path.join("transforms_train.json");
    let test = path.join("transforms_test.json");
    let val = path.join("transforms_val.json");
    let single = path.join("transforms.json");
    let mut files = Vec::new();
    if file_present(&train)? {
        files.push((train, Some(Split::Train)));
    }
    if file_present(&test)? {
        files.push((test, Some(Split::Test)));
    }
    if files.is_empty() {
        if file_present(&single)? {
            files.push((single, None));
        } else {
            return Err(ImportError::invalid(
                path,
                "no transforms.json, transforms_train.json or transforms_test.json in this folder; \
                 point at the folder that holds them (or at a transforms*.json file)",
            ));
        }
    } else {
        if val.is_file() {
            warnings.push(format!(
                "{} was not imported: like the original 3DGS, ramsplat trains on the train split \
                 and evaluates on the test split",
                val.display()
            ));
        }
        if single.is_file() {
            warnings.push(format!(
                "{} was ignored because transforms_train/test.json exist; pass the file itself to \
                 import it instead",
                single.display()
            ));
        }
    }
    Ok((path.to_owned(), files))
}

/// Python's `json` module writes non-finite floats as the bare tokens `NaN`, `Infinity` and
/// `-Infinity`, which are not JSON. Quoting them (outside strings) lets the file parse so the
/// pose check can name the frame instead of failing on a bare line number. Only quotes are
/// inserted, so serde_json's line numbers still match the file.
fn quote_non_finite_literals(text: &str) -> Cow<'_, str> {
    if !text.contains("NaN") && !text.contains("Infinity") {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 64);
    let mut in_string = false;
    let mut escaped = false;
    let mut start = 0; // start of the not-yet-copied run
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        // Outside strings, letters only occur in true/false/null, so these prefixes can only
        // be the non-finite tokens.
        let token = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|t| bytes[i..].starts_with(t.as_bytes()));
        if let Some(t) = token {
            out.push_str(&text[start..i]);
            out.push('"');
            out.push_str(t);
            out.push('"');
            i += t.len();
            start = i;
            continue;
        }
        i += 1;
    }
    out.push_str(&text[start..]);
    Cow::Owned(out)
}

/// A JSON number, or one of the quoted non-finite tokens produced by
/// [`quote_non_finite_literals`].
fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// Key lookup with per-frame overrides of the top-level values.
struct Layers<'a> {
    frame: &'a Map<String, Value>,
    top: &'a Map<String, Value>,
}

impl Layers<'_> {
    /// The number under `key` at one level; an error message if it is not a number.
    fn at(level: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
        match level.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => as_number(v)
                .map(Some)
                .ok_or_else(|| format!("\"{key}\" must be a number, found {v}")),
        }
    }

    /// Frame value, else top-level value.
    fn num(&self, key: &str) -> Result<Option<f64>, String> {
        Ok(match Self::at(self.frame, key)? {
            Some(v) => Some(v),
            None => Self::at(self.top, key)?,
        })
    }

    /// Whether `key` is present and true at either level (frame wins).
    fn flag(&self, key: &str) -> bool {
        let truthy =
            |v: &Value| v.as_bool().unwrap_or(false) || v.as_f64().is_some_and(|x| x != 0.0);
        match self.frame.get(key) {
            Some(v) => truthy(v),
            None => self.top.get(key).is_some_and(truthy),
        }
    }

    fn string(&self, key: &str) -> Option<&str> {
        self.frame
            .get(key)
            .or_else(|| self.top.get(key))
            .and_then(Value::as_str)
    }

    /// Focal length along one axis: at the frame level then the top level, `fl_*` beats
    /// `camera_angle_*` (converted with the image side `side`).
    fn focal(&self, fl_key: &str, angle_key: &str, side: u32) -> Result<Option<f64>, String> {
        for level in [self.frame, self.top] {
            if let Some(f) = Self::at(level, fl_key)? {
                return Ok(Some(f));
            }
            if let Some(a) = Self::at(level, angle_key)? {
                if !(a > 0.0 && a < std::f64::consts::PI) {
                    return Err(format!(
                        "\"{angle_key}\" = {a} is not a field of view in (0, π) radians"
                    ));
                }
                return Ok(Some(0.5 * side as f64 / (0.5 * a).tan()));
            }
        }
        Ok(None)
    }
}

/// An image size from JSON: a positive integer (written as `1080` or `1080.0`).
fn dimension(key: &str, v: f64) -> Result<u32, String> {
    if v.is_finite() && v >= 1.0 && v <= u32::MAX as f64 && v.fract() == 0.0 {
        Ok(v as u32)
    } else {
        Err(format!(
            "\"{key}\" = {v} is not a positive whole number of pixels"
        ))
    }
}

/// The lens models a transforms file can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LensModel {
    /// Pinhole or OpenCV radial–tangential: `k1 k2 k3 p1 p2`.
    RadialTangential,
    /// `camera_model` `OPENCV_FISHEYE` (nerfstudio): OpenCV's fisheye model, `k1 k2 k3 k4`.
    Fisheye,
}

/// The lens model the keys name; refuses the models ramsplat cannot undistort and
/// coefficients the model does not have (ambiguous, never guessed).
fn lens_model(l: &Layers<'_>) -> Result<LensModel, String> {
    let model = match l.string("camera_model") {
        Some(m) if m.eq_ignore_ascii_case(FISHEYE_MODEL) => LensModel::Fisheye,
        Some(m) if !PINHOLE_MODELS.iter().any(|p| p.eq_ignore_ascii_case(m)) => {
            return Err(format!(
                "camera_model \"{m}\" is not supported: ramsplat undistorts pinhole, OpenCV \
                 (k1 k2 k3 p1 p2) and OPENCV_FISHEYE (k1 k2 k3 k4) lenses only. Undistort the \
                 images first (e.g. COLMAP image_undistorter) and write a pinhole transforms file"
            ));
        }
        _ => LensModel::RadialTangential,
    };
    for key in ["latlong", "equirectangular"] {
        if l.flag(key) {
            return Err(format!(
                "\"{key}\" is set: panoramic cameras are not supported. Undistort the images to \
                 a pinhole model first"
            ));
        }
    }
    if model == LensModel::RadialTangential {
        for key in ["is_fisheye", "fisheye"] {
            if l.flag(key) {
                return Err(format!(
                    "\"{key}\" is set without \"camera_model\": \"{FISHEYE_MODEL}\", which \
                     leaves the lens model unknown. If the coefficients are OpenCV's fisheye \
                     model (k1 k2 k3 k4), add that camera_model; otherwise undistort the images \
                     to a pinhole model first"
                ));
            }
        }
    }
    // Coefficients of models ramsplat does not undistort (the rational model's denominator,
    // an f-theta lens), and those of the other model this one lacks.
    const NEITHER: [&str; 7] = [
        "k5",
        "k6",
        "ftheta_p0",
        "ftheta_p1",
        "ftheta_p2",
        "ftheta_p3",
        "ftheta_p4",
    ];
    let (kept, lacks): (&str, &[&str]) = match model {
        LensModel::RadialTangential => ("OpenCV k1 k2 k3 p1 p2", &["k4"]),
        LensModel::Fisheye => ("OPENCV_FISHEYE's k1 k2 k3 k4", &["p1", "p2"]),
    };
    for key in lacks.iter().chain(&NEITHER) {
        if let Some(v) = l.num(key)? {
            if v != 0.0 {
                return Err(format!(
                    "\"{key}\" = {v}: this lens model is not supported, only {kept}. Undistort \
                     the images to a pinhole model first"
                ));
            }
        }
    }
    Ok(model)
}

/// Reads `transform_matrix` (camera-to-world, OpenGL axes) into a world-to-camera pose with
/// OpenCV axes. `Err(Ok(msg))` is a malformed matrix; `Err(Err(_))` a camera error (non-finite
/// values), reported as [`ImportError::Camera`].
fn read_pose(v: Option<&Value>) -> Result<Pose, Result<String, CameraError>> {
    let rows = v
        .and_then(Value::as_array)
        .ok_or_else(|| Ok("\"transform_matrix\" is missing or not an array of rows".to_owned()))?;
    if rows.len() != 3 && rows.len() != 4 {
        return Err(Ok(format!(
            "\"transform_matrix\" has {} rows; expected 4 (or 3)",
            rows.len()
        )));
    }
    let mut m = [[0.0f64; 4]; 4];
    m[3] = [0.0, 0.0, 0.0, 1.0];
    for (r, row) in rows.iter().enumerate() {
        let vals = row.as_array().filter(|a| a.len() == 4).ok_or_else(|| {
            Ok(format!(
                "\"transform_matrix\" row {r} is not an array of 4 numbers"
            ))
        })?;
        for (c, x) in vals.iter().enumerate() {
            m[r][c] = as_number(x).ok_or_else(|| {
                Ok(format!(
                    "\"transform_matrix\"[{r}][{c}] is not a number: {x}"
                ))
            })?;
        }
    }
    if m.iter().flatten().any(|x| !x.is_finite()) {
        return Err(Err(CameraError::NonFinitePose));
    }
    // A rigid transform's bottom row is exactly 0 0 0 1; JSON writers print it verbatim, so
    // 1e-9 only absorbs printing noise.
    let bottom = m[3];
    if bottom[..3].iter().any(|x| x.abs() > 1e-9) || (bottom[3] - 1.0).abs() > 1e-9 {
        return Err(Ok(format!(
            "\"transform_matrix\" bottom row is {bottom:?}, not [0, 0, 0, 1]: not a rigid camera-to-world transform"
        )));
    }
    // OpenGL camera axes (y up, z back) → OpenCV (y down, z forward): negate columns 1 and 2.
    let rotation_c2w = [
        [m[0][0], -m[0][1], -m[0][2]],
        [m[1][0], -m[1][1], -m[1][2]],
        [m[2][0], -m[2][1], -m[2][2]],
    ];
    Ok(Pose::from_camera_to_world(
        rotation_c2w,
        [m[0][3], m[1][3], m[2][3]],
    ))
}

/// The image file a `file_path` names, and whether it exists (an error when something other
/// than a file is there).
fn resolve_image(base: &Path, file_path: &str) -> Result<(PathBuf, bool), ImportError> {
    let direct = base.join(file_path);
    if file_present(&direct)? {
        return Ok((direct, true));
    }
    for ext in IMAGE_EXTENSIONS {
        let mut s: OsString = direct.clone().into_os_string();
        s.push(".");
        s.push(ext);
        let p = PathBuf::from(s);
        if file_present(&p)? {
            return Ok((p, true));
        }
    }
    Ok((direct, false))
}

/// Parses one transforms file, appending its views and missing image names. Returns how many
/// frames it lists.
/// What one transforms file added beyond its views.
struct TransformsRead {
    /// Frames the file lists.
    frames: usize,
    /// Frames skipped because `val_filenames` lists them.
    val_skipped: usize,
    /// Its `ply_file_path`, resolved.
    points: Option<PathBuf>,
    /// Frames with nerfstudio's `depth_file_path` (metric depth, not read).
    depth_file_paths: usize,
}

/// A `file_path` as the split lists are matched against it: without a leading `./`.
fn split_key(name: &str) -> &str {
    name.trim_start_matches("./")
}

/// nerfstudio's split lists (`train_filenames`, `val_filenames`, `test_filenames`): each
/// listed `file_path` with its split (`None`: validation, not imported). `Ok(None)` when the
/// file has none of them.
fn split_lists(
    file: &Path,
    top: &Map<String, Value>,
) -> Result<Option<std::collections::HashMap<String, Option<Split>>>, ImportError> {
    let mut lists = std::collections::HashMap::new();
    let mut any = false;
    for (key, split) in [
        ("train_filenames", Some(Split::Train)),
        ("val_filenames", None),
        ("test_filenames", Some(Split::Test)),
    ] {
        let Some(v) = top.get(key) else { continue };
        any = true;
        let names = v.as_array().ok_or_else(|| {
            ImportError::invalid(file, format!("\"{key}\" is not an array of file names"))
        })?;
        for n in names {
            let n = n.as_str().ok_or_else(|| {
                ImportError::invalid(file, format!("\"{key}\" holds a non-string: {n}"))
            })?;
            if let Some(other) = lists.insert(split_key(n).to_owned(), split) {
                if other != split {
                    return Err(ImportError::invalid(
                        file,
                        format!("{n} is listed in two of the split lists; keep it in one"),
                    ));
                }
            }
        }
    }
    Ok(any.then_some(lists))
}

fn read_transforms(
    file: &Path,
    split: Option<Split>,
    options: &ImportOptions,
    views: &mut Vec<ViewSource>,
    missing: &mut Vec<String>,
) -> Result<TransformsRead, ImportError> {
    let text = crate::fsutil::read_file_to_string(file).map_err(|e| ImportError::io(file, e))?;
    let text = quote_non_finite_literals(&text);
    let doc: Value = serde_json::from_str(&text).map_err(|e| {
        ImportError::parse(
            file,
            Location::Line(e.line() as u64),
            format!("not valid JSON ({e}); fix the file or re-export it"),
        )
    })?;
    drop(text);
    let top = doc.as_object().ok_or_else(|| {
        ImportError::invalid(
            file,
            "the top level is not a JSON object; is this a transforms file?",
        )
    })?;
    let frames = top.get("frames").and_then(Value::as_array).ok_or_else(|| {
        ImportError::invalid(file, "no \"frames\" array; is this a NeRF transforms file?")
    })?;
    let base = file.parent().unwrap_or(Path::new("."));
    let empty = Map::new();
    lens_model(&Layers { frame: &empty, top }).map_err(|msg| ImportError::invalid(file, msg))?;
    // A split from the file's own name (Blender's transforms_test.json) is the dataset's
    // intent already; the lists decide only for a file that has none.
    let lists = match split {
        Some(_) => None,
        None => split_lists(file, top)?,
    };
    let mut listed_seen = std::collections::HashSet::new();
    let mut val_skipped = 0;
    let mut depth_file_paths = 0;
    let points = match top.get("ply_file_path") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) => {
            let path = base.join(p);
            if file_present(&path)? {
                Some(path)
            } else if options.metadata_only {
                // No cloud to stream; a metadata-only import checks no file's existence.
                None
            } else {
                return Err(ImportError::invalid(
                    file,
                    format!(
                        "its \"ply_file_path\" {} does not exist; restore the point cloud, or \
                         remove \"ply_file_path\" to start from random points",
                        path.display()
                    ),
                ));
            }
        }
        Some(_) => {
            return Err(ImportError::invalid(
                file,
                "\"ply_file_path\" is not a string",
            ))
        }
    };

    for (i, fv) in frames.iter().enumerate() {
        let at = Location::Record(i as u64);
        let frame = fv
            .as_object()
            .ok_or_else(|| ImportError::parse(file, at, "frame is not a JSON object"))?;
        let name = frame
            .get("file_path")
            .and_then(Value::as_str)
            .ok_or_else(|| ImportError::parse(file, at, "frame has no \"file_path\" string"))?
            .to_owned();
        let frame_err =
            |msg: String| ImportError::parse(file, at, format!("frame '{name}': {msg}"));
        let what = format!("frame {i} ({name})");
        let split = match &lists {
            None => split,
            Some(lists) => match lists.get(split_key(&name)) {
                Some(Some(s)) => {
                    listed_seen.insert(split_key(&name).to_owned());
                    Some(*s)
                }
                Some(None) => {
                    listed_seen.insert(split_key(&name).to_owned());
                    val_skipped += 1;
                    continue;
                }
                None => {
                    return Err(frame_err(
                        "it is in none of \"train_filenames\", \"val_filenames\" and \
                         \"test_filenames\"; add it to one, or remove the lists to split by \
                         --test-every"
                            .to_owned(),
                    ))
                }
            },
        };
        let l = Layers { frame, top };
        let lens = lens_model(&l).map_err(frame_err)?;
        depth_file_paths += usize::from(frame.contains_key("depth_file_path"));

        let pose = read_pose(frame.get("transform_matrix")).map_err(|e| match e {
            Ok(msg) => frame_err(msg),
            Err(source) => ImportError::Camera {
                path: file.to_owned(),
                what: what.clone(),
                source,
            },
        })?;

        // `--images DIR`: nerfstudio's images_N layout, the file name of `file_path` in DIR
        // (relative to this file's folder); the name and the split stay the frame's own.
        let (image_path, exists) = match &options.images {
            None => resolve_image(base, &name)?,
            Some(dir) => match Path::new(&name).file_name() {
                Some(f) => resolve_image(&base.join(dir), &f.to_string_lossy())?,
                None => return Err(frame_err("its file_path names no file".to_owned())),
            },
        };
        if !exists && !options.metadata_only {
            missing.push(name);
            continue;
        }
        // nerfstudio's per-frame loss mask, relative to this file like `file_path`. A named
        // mask that is missing is an error: training without it would silently teach the
        // pixels it was made to hide.
        let mask_path = match frame.get("mask_path") {
            None | Some(Value::Null) => None,
            Some(Value::String(m)) => {
                let (path, exists) = resolve_image(base, m)?;
                if !exists && !options.metadata_only {
                    return Err(frame_err(format!(
                        "its \"mask_path\" {} does not exist; restore the mask, or remove \
                         \"mask_path\" from the frame to train on every pixel",
                        path.display()
                    )));
                }
                Some(path)
            }
            Some(_) => return Err(frame_err("\"mask_path\" is not a string".to_owned())),
        };

        let (width, height) = match (l.num("w").map_err(frame_err)?, l.num("h").map_err(frame_err)?) {
            (Some(w), Some(h)) => (
                dimension("w", w).map_err(frame_err)?,
                dimension("h", h).map_err(frame_err)?,
            ),
            // A focal length in pixels is for the resolution "w"/"h" name; a resized copy's
            // size is not it.
            _ if options.images.is_some() && l.num("fl_x").map_err(frame_err)?.is_some() => {
                return Err(frame_err(
                    "\"fl_x\" is in pixels of a resolution \"w\"/\"h\" do not give, so it \
                     cannot be scaled to the --images copy; add \"w\" and \"h\" (the size the \
                     focal length was estimated at)"
                        .to_owned(),
                ))
            }
            _ => image_dimensions(&image_path).map_err(|e| {
                frame_err(format!(
                    "\"w\"/\"h\" are not given and the image size cannot be read ({e}); add \"w\" and \"h\""
                ))
            })?,
        };
        let fx = l
            .focal("fl_x", "camera_angle_x", width)
            .map_err(frame_err)?
            .ok_or_else(|| {
                frame_err("no focal length: add \"fl_x\" or \"camera_angle_x\"".to_owned())
            })?;
        let fy = l
            .focal("fl_y", "camera_angle_y", height)
            .map_err(frame_err)?
            .unwrap_or(fx);
        let cx = l
            .num("cx")
            .map_err(frame_err)?
            .unwrap_or(width as f64 / 2.0);
        let cy = l
            .num("cy")
            .map_err(frame_err)?
            .unwrap_or(height as f64 / 2.0);
        let coeff = |key: &str| l.num(key).map(|v| v.unwrap_or(0.0)).map_err(frame_err);
        let distortion = match lens {
            LensModel::RadialTangential => Distortion::RadialTangential {
                k: [coeff("k1")?, coeff("k2")?, coeff("k3")?, 0.0, 0.0, 0.0],
                p: [coeff("p1")?, coeff("p2")?],
            },
            LensModel::Fisheye => Distortion::Fisheye {
                k: [coeff("k1")?, coeff("k2")?, coeff("k3")?, coeff("k4")?],
            },
        };
        if !distortion.is_finite() {
            return Err(frame_err(format!(
                "distortion coefficients are not finite: {distortion:?}"
            )));
        }
        let camera = Camera {
            width,
            height,
            intrinsics: Intrinsics { fx, fy, cx, cy },
            world_to_camera: pose,
            projection: Projection::Pinhole,
        };
        camera.validate().map_err(|source| ImportError::Camera {
            path: file.to_owned(),
            what,
            source,
        })?;
        let camera = super::camera_for_images(options, camera, &image_path, &name)?;
        views.push(ViewSource {
            name,
            image_path,
            camera,
            distortion,
            split,
            mask_path,
            depth: None,
        });
    }
    if let Some(lists) = &lists {
        let mut unknown: Vec<&String> =
            lists.keys().filter(|n| !listed_seen.contains(*n)).collect();
        if !unknown.is_empty() {
            unknown.sort();
            return Err(ImportError::invalid(
                file,
                format!(
                    "the split lists name {} file(s) no frame has (first: {}); fix the lists or \
                     add the frames",
                    unknown.len(),
                    unknown[0]
                ),
            ));
        }
    }
    Ok(TransformsRead {
        frames: frames.len(),
        val_skipped,
        points,
        depth_file_paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::image::{prepare_view, Resize};
    use serde_json::json;

    const FOX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/fox");

    /// The 17 frames of the fox transforms.json whose images are not in the dataset (SOURCE.md).
    const FOX_MISSING: [&str; 17] = [
        "0005", "0016", "0017", "0024", "0032", "0051", "0068", "0071", "0075", "0083", "0087",
        "0088", "0093", "0099", "0104", "0106", "0113",
    ];

    fn write_json(dir: &Path, name: &str, v: &Value) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_string_pretty(v).unwrap()).unwrap();
        p
    }

    fn write_png(path: &Path, w: u32, h: u32) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 7]))
            .save(path)
            .unwrap();
    }

    /// A camera-to-world matrix (OpenGL axes) for a camera at `c`, yawed by `yaw` about world y.
    fn c2w(yaw: f64, c: [f64; 3]) -> Value {
        let (s, co) = yaw.sin_cos();
        json!([
            [co, 0.0, s, c[0]],
            [0.0, 1.0, 0.0, c[1]],
            [-s, 0.0, co, c[2]],
            [0.0, 0.0, 0.0, 1.0]
        ])
    }

    fn import_dir(dir: &Path) -> Result<ImportedScene, ImportError> {
        import(dir, &ImportOptions::default())
    }

    #[test]
    fn fox_frames_intrinsics_and_missing_images() {
        let scene = import(Path::new(FOX), &ImportOptions::default()).unwrap();
        assert_eq!(scene.format, Format::Nerf);
        assert_eq!(scene.views.len(), 50);
        assert_eq!(scene.missing_images.len(), 17);
        let want: Vec<String> = FOX_MISSING
            .iter()
            .map(|n| format!("images/{n}.jpg"))
            .collect();
        assert_eq!(scene.missing_images, want);
        assert!(scene.no_sfm_points && scene.clouds.is_empty());
        assert!(
            scene.warnings.iter().any(|w| w.contains("17 of 67")),
            "{:?}",
            scene.warnings
        );
        assert!(scene
            .random_start_note
            .as_ref()
            .is_some_and(|w| w.contains("random points")));
        let names: Vec<&str> = scene.views.iter().map(|v| v.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(names[0], "images/0001.jpg");
        for v in &scene.views {
            assert!(v.image_path.is_file());
            assert_eq!(v.split, None);
            assert_eq!((v.camera.width, v.camera.height), (1080, 1920));
            assert_eq!(
                v.camera.intrinsics,
                Intrinsics {
                    fx: 1375.52,
                    fy: 1374.49,
                    cx: 554.558,
                    cy: 965.268
                }
            );
            assert_eq!(
                v.distortion,
                Distortion::RadialTangential {
                    k: [0.0578421, -0.0805099, 0.0, 0.0, 0.0, 0.0],
                    p: [-0.000980296, 0.00015575]
                }
            );
        }
        // metadata_only keeps every listed frame; strict refuses the missing ones.
        let meta = import(
            Path::new(FOX),
            &ImportOptions {
                metadata_only: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!((meta.views.len(), meta.missing_images.len()), (67, 0));
        let err = import(
            Path::new(FOX),
            &ImportOptions {
                strict: true,
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("17 of 67") && err.contains("images/0005.jpg") && err.contains("--strict"),
            "{err}"
        );
        // The transforms file itself is accepted as the path too.
        let direct = import_dir(&Path::new(FOX).join("transforms.json")).unwrap();
        assert_eq!(direct.views.len(), 50);
    }

    #[test]
    fn fox_pose_is_converted_to_opencv() {
        let scene = import(Path::new(FOX), &ImportOptions::default()).unwrap();
        let v = &scene.views[0];
        // Frame 0001 of transforms.json, camera-to-world in OpenGL axes.
        let m = [
            [
                0.8926439112348871,
                0.08799600283226543,
                0.4420900262071262,
                3.168359405609479,
            ],
            [
                0.4464189982715247,
                -0.03675452191179031,
                -0.8940689141475064,
                -5.4794898611466945,
            ],
            [
                -0.062425682580756266,
                0.995442519072023,
                -0.07209178487538156,
                -0.9791660699008925,
            ],
        ];
        // The file's rotation is orthonormal only to ~1e-8 (printed digits), so inverting it
        // and back costs up to ~1e-7 per coordinate at this scale: 1e-6 tolerances below.
        let c = v.camera.centre();
        for r in 0..3 {
            assert!((c[r] - m[r][3]).abs() < 1e-6, "{c:?}");
        }
        // A point 2 units along the OpenGL viewing direction (−z column) is in front of the
        // camera, on the optical axis: it projects to the principal point.
        let ahead = [0, 1, 2].map(|r| m[r][3] - 2.0 * m[r][2]);
        let [x, y, z] = v.camera.world_to_camera.transform(ahead);
        assert!(
            (z - 2.0).abs() < 1e-6 && x.abs() < 1e-6 && y.abs() < 1e-6,
            "{x} {y} {z}"
        );
        // 1e-6 in camera units at depth 2 is < 1e-3 px with fx ≈ 1375.
        let [u, px_v] = v.camera.project(ahead).unwrap();
        assert!((u - 554.558).abs() < 1e-3 && (px_v - 965.268).abs() < 1e-3);
        // OpenGL "up" (y column) is OpenCV −y: a point above the axis lands in the upper half.
        let up = [0, 1, 2].map(|r| ahead[r] + 0.1 * m[r][1]);
        assert!(v.camera.project(up).unwrap()[1] < 965.268);
        let right = [0, 1, 2].map(|r| ahead[r] + 0.1 * m[r][0]);
        assert!(v.camera.project(right).unwrap()[0] > 554.558);
        // Behind the camera (the +z column in OpenGL) does not project.
        let behind = [0, 1, 2].map(|r| m[r][3] + 2.0 * m[r][2]);
        assert_eq!(v.camera.project(behind), None);
    }

    #[test]
    fn synthetic_pose_conversion() {
        let dir = tempfile::tempdir().unwrap();
        write_png(&dir.path().join("a.png"), 40, 20);
        // Identity camera-to-world in OpenGL: at the origin looking down world −z, y up.
        write_json(
            dir.path(),
            "transforms.json",
            &json!({"fl_x": 20.0, "w": 40, "h": 20,
                    "frames": [{"file_path": "a.png", "transform_matrix": c2w(0.0, [0.0, 0.0, 0.0])}]}),
        );
        let scene = import_dir(dir.path()).unwrap();
        let cam = scene.views[0].camera;
        assert_eq!(cam.intrinsics.fy, 20.0); // fy defaults to fx
        assert_eq!((cam.intrinsics.cx, cam.intrinsics.cy), (20.0, 10.0)); // image centre
        assert_eq!(
            cam.world_to_camera.transform([0.0, 0.0, -5.0]),
            [0.0, 0.0, 5.0]
        );
        assert_eq!(cam.project([0.0, 0.0, -5.0]), Some([20.0, 10.0]));
        // World +x is image right, world +y (up) is image up.
        assert_eq!(cam.project([1.0, 0.0, -5.0]), Some([24.0, 10.0]));
        assert_eq!(cam.project([0.0, 1.0, -5.0]), Some([20.0, 6.0]));
        assert_eq!(cam.project([0.0, 0.0, 5.0]), None);
    }

    #[test]
    fn opencv_fisheye_frames_get_a_fisheye_lens() {
        let dir = tempfile::tempdir().unwrap();
        write_png(&dir.path().join("a.png"), 40, 20);
        write_png(&dir.path().join("b.png"), 40, 20);
        // nerfstudio's fisheye layout: the model and k1..k4 at the top level (its zero p1/p2
        // placeholders and instant-ngp's flag agree with it); a frame overrides one coefficient.
        write_json(
            dir.path(),
            "transforms.json",
            &json!({"camera_model": "OPENCV_FISHEYE", "fl_x": 20.0, "w": 40, "h": 20,
            "k1": 0.05, "k2": -0.01, "k3": 0.002, "k4": -0.0003, "p1": 0.0, "p2": 0.0,
            "is_fisheye": true,
            "frames": [
                {"file_path": "a.png", "transform_matrix": c2w(0.0, [0.0; 3])},
                {"file_path": "b.png", "k4": 0.001, "transform_matrix": c2w(0.3, [1.0, 0.0, 0.0])}
            ]}),
        );
        let scene = import_dir(dir.path()).unwrap();
        assert_eq!(
            scene.views[0].distortion,
            Distortion::Fisheye {
                k: [0.05, -0.01, 0.002, -0.0003]
            }
        );
        assert_eq!(
            scene.views[1].distortion,
            Distortion::Fisheye {
                k: [0.05, -0.01, 0.002, 0.001]
            }
        );
        // A frame can name the model too; a fisheye model without its name stays refused.
        write_json(
            dir.path(),
            "transforms.json",
            &json!({"fl_x": 20.0, "w": 40, "h": 20, "frames": [
                {"file_path": "a.png", "camera_model": "opencv_fisheye", "k1": 0.1,
                 "transform_matrix": c2w(0.0, [0.0; 3])},
                {"file_path": "b.png", "transform_matrix": c2w(0.3, [1.0, 0.0, 0.0])}
            ]}),
        );
        let scene = import_dir(dir.path()).unwrap();
        assert_eq!(
            scene.views[0].distortion,
            Distortion::Fisheye {
                k: [0.1, 0.0, 0.0, 0.0]
            }
        );
        assert!(scene.views[1].distortion.is_none());
        write_json(
            dir.path(),
            "transforms.json",
            &json!({"fl_x": 20.0, "w": 40, "h": 20, "is_fisheye": true, "frames": [
                {"file_path": "a.png", "transform_matrix": c2w(0.0, [0.0; 3])}
            ]}),
        );
        let err = import_dir(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("is_fisheye") && err.contains("OPENCV_FISHEYE"),
            "{err}"
        );
    }

    #[test]
    fn camera_angle_and_per_frame_overrides() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["a", "b", "c"] {
            write_png(&dir.path().join(format!("{n}.png")), 80, 60);
        }
        let angle: f64 = 0.6911112070083618; // Blender lego
        write_json(
            dir.path(),
            "transforms.json",
            &json!({
                "camera_angle_x": angle, "k1": 0.01,
                "frames": [
                    // No w/h anywhere: read from the PNG header.
                    {"file_path": "a.png", "transform_matrix": c2w(0.1, [1.0, 2.0, 3.0])},
                    // Every intrinsic overridden per frame.
                    {"file_path": "b.png", "fl_x": 100.0, "fl_y": 90.0, "cx": 41.0, "cy": 29.5,
                     "w": 80, "h": 60.0, "k1": 0.0, "k2": 0.02, "p1": 0.001, "p2": -0.002, "k3": 0.003,
                     "transform_matrix": c2w(0.2, [0.0, 0.0, 4.0])},
                    // A per-frame camera_angle_y only.
                    {"file_path": "c.png", "camera_angle_y": 1.0,
                     "transform_matrix": c2w(0.3, [0.0, 0.0, 4.0])}
                ]
            }),
        );
        let scene = import_dir(dir.path()).unwrap();
        let [a, b, c] = [&scene.views[0], &scene.views[1], &scene.views[2]];
        let fx = 0.5 * 80.0 / (0.5 * angle).tan();
        assert!((a.camera.intrinsics.fx - fx).abs() < 1e-12);
        assert_eq!(a.camera.intrinsics.fy, a.camera.intrinsics.fx);
        assert_eq!((a.camera.width, a.camera.height), (80, 60));
        assert_eq!(
            (a.camera.intrinsics.cx, a.camera.intrinsics.cy),
            (40.0, 30.0)
        );
        assert_eq!(
            a.distortion,
            Distortion::RadialTangential {
                k: [0.01, 0.0, 0.0, 0.0, 0.0, 0.0],
                p: [0.0; 2]
            }
        );
        assert_eq!(
            b.camera.intrinsics,
            Intrinsics {
                fx: 100.0,
                fy: 90.0,
                cx: 41.0,
                cy: 29.5
            }
        );
        assert_eq!(
            b.distortion,
            Distortion::RadialTangential {
                k: [0.0, 0.02, 0.003, 0.0, 0.0, 0.0],
                p: [0.001, -0.002]
            }
        );
        assert!((c.camera.intrinsics.fx - fx).abs() < 1e-12);
        assert!((c.camera.intrinsics.fy - 0.5 * 60.0 / 0.5f64.tan()).abs() < 1e-12);
        // Centres come from the matrices.
        let cb = b.camera.centre();
        assert!((cb[2] - 4.0).abs() < 1e-12);
    }

    /// `--depths`: maps by file stem; without depth_params.json the identity fit; with it each
    /// map needs its entry, and a frame with neither is imported without depth (what `gs-pack
    /// export` writes for a view packed without one); an entry without its map, or a map
    /// without its entry, is an error naming the frame and the file.
    #[test]
    fn depth_maps_are_found_by_stem_with_optional_params() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["a", "b", "c"] {
            write_png(&dir.path().join(format!("images/{n}.png")), 8, 6);
        }
        std::fs::create_dir_all(dir.path().join("d")).unwrap();
        for n in ["a", "b"] {
            image::GrayImage::from_pixel(8, 6, image::Luma([9]))
                .save(dir.path().join(format!("d/{n}.png")))
                .unwrap();
        }
        write_json(
            dir.path(),
            "transforms.json",
            &json!({
                "fl_x": 10.0, "w": 8, "h": 6,
                "frames": (["a", "b", "c"].iter().enumerate().map(|(i, n)| json!({
                    "file_path": format!("images/{n}.png"),
                    "transform_matrix": c2w(0.1 * i as f64, [0.0, 0.0, 4.0]),
                })).collect::<Vec<_>>())
            }),
        );
        let import = || {
            import(
                dir.path(),
                &ImportOptions {
                    depths: Some(PathBuf::from("d")),
                    ..Default::default()
                },
            )
        };
        // No params: every frame needs its map; c has none.
        let e = import().unwrap_err().to_string();
        assert!(
            e.contains("d/c.png") && e.contains("view 'images/c.png' has no depth map"),
            "{e}"
        );
        image::GrayImage::from_pixel(8, 6, image::Luma([9]))
            .save(dir.path().join("d/c.png"))
            .unwrap();
        let scene = import().unwrap();
        assert!(scene
            .views
            .iter()
            .all(|v| v.depth.as_ref().map(|d| d.scale) == Some(DepthScale::IDENTITY)));
        assert_eq!(
            scene.views[1].depth.as_ref().unwrap().path,
            dir.path().join("d").join("b.png")
        );
        // With params: c has neither entry nor (after removal) map → no depth.
        std::fs::remove_file(dir.path().join("d/c.png")).unwrap();
        std::fs::write(
            dir.path().join("depth_params.json"),
            r#"{"a": {"scale": 2.0, "offset": 0.5}, "b": {"scale": 1.0, "offset": 0}}"#,
        )
        .unwrap();
        let scene = import().unwrap();
        let scales: Vec<_> = scene
            .views
            .iter()
            .map(|v| v.depth.as_ref().map(|d| d.scale))
            .collect();
        assert_eq!(
            scales,
            [
                Some(DepthScale {
                    scale: 2.0,
                    offset: 0.5
                }),
                Some(DepthScale::IDENTITY),
                None
            ]
        );
        // A map without its entry.
        image::GrayImage::from_pixel(8, 6, image::Luma([9]))
            .save(dir.path().join("d/c.png"))
            .unwrap();
        let e = import().unwrap_err().to_string();
        assert!(
            e.contains("depth_params.json") && e.contains("'images/c.png' has the depth map"),
            "{e}"
        );
        // An entry without its map.
        std::fs::remove_file(dir.path().join("d/c.png")).unwrap();
        std::fs::remove_file(dir.path().join("d/b.png")).unwrap();
        let e = import().unwrap_err().to_string();
        assert!(
            e.contains("d/b.png") && e.contains("'images/b.png' has no depth map"),
            "{e}"
        );
    }

    /// nerfstudio's per-frame `mask_path`, relative to the transforms file like `file_path`:
    /// kept on the view; a missing or non-string one is an error naming the frame.
    #[test]
    fn mask_paths_are_read_per_frame() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["a", "b"] {
            write_png(&dir.path().join(format!("images/{n}.png")), 8, 6);
        }
        std::fs::create_dir_all(dir.path().join("masks")).unwrap();
        image::GrayImage::from_fn(8, 6, |x, _| image::Luma([if x < 2 { 0 } else { 255 }]))
            .save(dir.path().join("masks/a.png"))
            .unwrap();
        let frames = |mask_b: Value| {
            json!({
                "fl_x": 10.0, "w": 8, "h": 6,
                "frames": [
                    {"file_path": "images/a.png", "mask_path": "masks/a.png",
                     "transform_matrix": c2w(0.1, [0.0, 0.0, 4.0])},
                    {"file_path": "images/b.png", "mask_path": mask_b,
                     "transform_matrix": c2w(0.2, [0.0, 0.0, 4.0])}
                ]
            })
        };
        write_json(dir.path(), "transforms.json", &frames(Value::Null));
        let scene = import_dir(dir.path()).unwrap();
        assert_eq!(
            scene.views[0].mask_path.as_deref(),
            Some(dir.path().join("masks/a.png").as_path())
        );
        assert_eq!(scene.views[1].mask_path, None);
        write_json(dir.path(), "transforms.json", &frames(json!("masks/b.png")));
        let e = import_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("images/b.png") && e.contains("masks/b.png") && e.contains("does not exist"),
            "{e}"
        );
        write_json(dir.path(), "transforms.json", &frames(json!(3)));
        let e = import_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("\"mask_path\" is not a string"), "{e}");
        // Packed, frame a carries its mask: the two left columns excluded.
        let p = crate::import::image::prepare_view_pixels(&scene.views[0], Resize::None, false)
            .unwrap();
        assert!(p.layout.mask);
        let mask = &p.pixels[8 * 6 * 3..];
        assert_eq!(mask.iter().filter(|&&m| m == 0).count(), 12);
    }

    /// nerfstudio's split lists assign the split (a leading `./` on either side is ignored),
    /// validation frames are skipped with a warning, and `ply_file_path` becomes the "sfm"
    /// cloud; a frame in no list, a list naming no frame, a file in two lists and a missing
    /// point cloud are errors naming what to fix.
    #[test]
    fn nerfstudio_split_lists_and_point_cloud() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for i in 0..4 {
            write_png(&d.join(format!("images/{i}.png")), 8, 8);
        }
        let ply = "ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\n\
                   property float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\n\
                   end_header\n0 0 0 10 20 30\n1 2 3 40 50 60\n";
        std::fs::write(d.join("pc.ply"), ply).unwrap();
        let frames: Vec<Value> = (0..4)
            .map(|i| json!({"file_path": format!("images/{i}.png"), "transform_matrix": c2w(i as f64, [0.0, 0.0, 4.0])}))
            .collect();
        let doc = |extra: Value| {
            let mut v = json!({"camera_angle_x": 0.7, "frames": frames.clone()});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            v
        };
        write_json(
            d,
            "transforms.json",
            &doc(json!({
                "train_filenames": ["images/0.png", "./images/2.png"],
                "val_filenames": ["images/1.png"],
                "test_filenames": ["images/3.png"],
                "ply_file_path": "pc.ply",
            })),
        );
        let mut scene = import_dir(d).unwrap();
        let got: Vec<(&str, Option<Split>)> = scene
            .views
            .iter()
            .map(|v| (v.name.as_str(), v.split))
            .collect();
        assert_eq!(
            got,
            [
                ("images/0.png", Some(Split::Train)),
                ("images/2.png", Some(Split::Train)),
                ("images/3.png", Some(Split::Test)),
            ]
        );
        assert!(scene
            .warnings
            .iter()
            .any(|w| w.contains("1 frames listed in \"val_filenames\" were not imported")));
        assert!(!scene.no_sfm_points);
        assert_eq!(scene.clouds.len(), 1);
        assert_eq!(scene.clouds[0].name(), "sfm");
        let chunk = scene.clouds[0].next_chunk(10).unwrap().unwrap();
        assert_eq!(chunk.xyz, [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]);
        assert_eq!(chunk.rgb, [[10, 20, 30], [40, 50, 60]]);

        let refused = |extra: Value, needle: &str| {
            write_json(d, "transforms.json", &doc(extra));
            let e = import_dir(d).unwrap_err().to_string();
            assert!(e.contains(needle), "missing {needle:?} in {e}");
        };
        refused(
            json!({"train_filenames": ["images/0.png", "images/1.png", "images/2.png"]}),
            "frame 'images/3.png': it is in none of",
        );
        refused(
            json!({"train_filenames": ["images/0.png", "images/1.png", "images/2.png",
                   "images/3.png", "images/9.png"]}),
            "name 1 file(s) no frame has (first: images/9.png)",
        );
        refused(
            json!({"train_filenames": ["images/0.png", "images/1.png", "images/2.png",
                   "images/3.png"], "test_filenames": ["images/3.png"]}),
            "images/3.png is listed in two of the split lists",
        );
        refused(json!({"ply_file_path": "gone.ply"}), "\"ply_file_path\" ");
        refused(
            json!({"ply_file_path": 3}),
            "\"ply_file_path\" is not a string",
        );
    }

    #[test]
    fn blender_split_files_and_extensionless_paths() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write_png(&d.join("train/r_0.png"), 16, 16);
        write_png(&d.join("train/r_1.png"), 16, 16);
        write_png(&d.join("test/r_0.png"), 16, 16);
        // A JPEG without the extension in file_path.
        image::RgbImage::new(16, 16)
            .save(d.join("test/r_1.jpg"))
            .unwrap();
        write_png(&d.join("val/r_0.png"), 16, 16);
        let frames = |split: &str, n: usize| {
            let f: Vec<Value> = (0..n)
                .map(|i| json!({"file_path": format!("./{split}/r_{i}"), "transform_matrix": c2w(i as f64, [0.0, 0.0, 4.0])}))
                .collect();
            json!({"camera_angle_x": 0.7, "frames": f})
        };
        write_json(d, "transforms_train.json", &frames("train", 2));
        write_json(d, "transforms_test.json", &frames("test", 2));
        write_json(d, "transforms_val.json", &frames("val", 1));
        let scene = import_dir(d).unwrap();
        let got: Vec<(&str, Option<Split>)> = scene
            .views
            .iter()
            .map(|v| (v.name.as_str(), v.split))
            .collect();
        assert_eq!(
            got,
            [
                ("./test/r_0", Some(Split::Test)),
                ("./test/r_1", Some(Split::Test)),
                ("./train/r_0", Some(Split::Train)),
                ("./train/r_1", Some(Split::Train)),
            ]
        );
        assert!(scene.views[0].image_path.ends_with("test/r_0.png"));
        assert!(scene.views[1].image_path.ends_with("test/r_1.jpg"));
        assert!(scene
            .warnings
            .iter()
            .any(|w| w.contains("transforms_val.json") && w.contains("not imported")));
        assert_eq!(
            (scene.views[0].camera.width, scene.views[0].camera.height),
            (16, 16)
        );
        // A split file passed directly carries no split.
        let one = import_dir(&d.join("transforms_test.json")).unwrap();
        assert_eq!(one.views.len(), 2);
        assert!(one.views.iter().all(|v| v.split.is_none()));
        // A missing extension-less image is reported under its file_path.
        std::fs::remove_file(d.join("train/r_1.png")).unwrap();
        let scene = import_dir(d).unwrap();
        assert_eq!(scene.missing_images, ["./train/r_1"]);
        assert_eq!(scene.views.len(), 3);
    }

    fn one_frame(dir: &Path, matrix: &str) -> Result<ImportedScene, ImportError> {
        write_png(&dir.join("a.png"), 8, 8);
        // Written by hand: Python's json module writes bare NaN / Infinity tokens.
        let text = format!(
            "{{\"fl_x\": 8, \"w\": 8, \"h\": 8, \"frames\": [\n  {{\"file_path\": \"a.png\", \"note\": \"NaN in a string\", \"transform_matrix\": {matrix}}}\n]}}"
        );
        std::fs::write(dir.join("transforms.json"), text).unwrap();
        import_dir(dir)
    }

    #[test]
    fn bad_poses_name_the_frame() {
        let dir = tempfile::tempdir().unwrap();
        for bad in [
            "[[1,0,0,NaN],[0,1,0,0],[0,0,1,0],[0,0,0,1]]",
            "[[1,0,0,0],[0,1,0,-Infinity],[0,0,1,0],[0,0,0,1]]",
            "[[Infinity,0,0,0],[0,1,0,0],[0,0,1,0]]",
        ] {
            let err = one_frame(dir.path(), bad).unwrap_err();
            assert!(
                matches!(&err, ImportError::Camera { what, source: CameraError::NonFinitePose, .. } if what == "frame 0 (a.png)"),
                "{err}"
            );
        }
        // A scale folded into the rotation, and a shear.
        for bad in [
            "[[2,0,0,0],[0,2,0,0],[0,0,2,0],[0,0,0,1]]",
            "[[1,0.3,0,0],[0,1,0,0],[0,0,1,0]]",
        ] {
            let err = one_frame(dir.path(), bad).unwrap_err();
            assert!(
                matches!(&err, ImportError::Camera { what, source: CameraError::NotRotation { .. }, .. } if what == "frame 0 (a.png)"),
                "{err}"
            );
            assert!(
                err.to_string().contains("transforms.json") && err.to_string().contains("frame 0")
            );
        }
        // Shapes and the projective bottom row.
        for (bad, needle) in [
            ("[[1,0,0,0],[0,1,0,0]]", "2 rows"),
            ("[[1,0,0],[0,1,0],[0,0,1]]", "row 0"),
            ("[[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,1,1]]", "bottom row"),
            ("\"identity\"", "transform_matrix"),
        ] {
            let err = one_frame(dir.path(), bad).unwrap_err();
            assert!(
                matches!(
                    &err,
                    ImportError::Parse {
                        at: Location::Record(0),
                        ..
                    }
                ) && err.to_string().contains(needle),
                "{err}"
            );
        }
        // A valid 3×4 matrix is accepted, and NaN inside strings is left alone.
        let ok = one_frame(dir.path(), "[[1,0,0,0],[0,1,0,0],[0,0,1,0]]").unwrap();
        assert_eq!(ok.views.len(), 1);
    }

    #[test]
    fn malformed_files_and_unsupported_lenses() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write_png(&d.join("a.png"), 8, 8);
        std::fs::write(
            d.join("transforms.json"),
            "{\n \"fl_x\": 8,\n \"frames\": [\n  {\"file_path\": }\n]}",
        )
        .unwrap();
        let err = import_dir(d).unwrap_err();
        assert!(
            matches!(
                err,
                ImportError::Parse {
                    at: Location::Line(4),
                    ..
                }
            ),
            "{err}"
        );

        let frame = json!({"file_path": "a.png", "transform_matrix": c2w(0.0, [0.0; 3])});
        let cases = [
            (
                json!({"fl_x": 8, "is_fisheye": true, "frames": [frame]}),
                "is_fisheye",
            ),
            (json!({"fl_x": 8, "k4": 0.01, "frames": [frame]}), "k4"),
            (
                json!({"fl_x": 8, "camera_model": "FISHEYE624", "frames": [frame]}),
                "FISHEYE624",
            ),
            (
                json!({"fl_x": 8, "camera_model": "OPENCV_FISHEYE", "p1": 0.01, "frames": [frame]}),
                "OPENCV_FISHEYE's k1 k2 k3 k4",
            ),
            (
                json!({"fl_x": 8, "camera_model": "OPENCV_FISHEYE", "latlong": true, "frames": [frame]}),
                "latlong",
            ),
            (
                json!({"fl_x": 8, "frames": [{"file_path": "a.png", "k4": 0.2, "transform_matrix": c2w(0.0, [0.0; 3])}]}),
                "k4",
            ),
            (json!({"frames": [frame]}), "no focal length"),
            (
                json!({"fl_x": "eight", "frames": [frame]}),
                "must be a number",
            ),
            (
                json!({"fl_x": 8, "w": 8.5, "h": 8, "frames": [frame]}),
                "whole number",
            ),
            (
                json!({"camera_angle_x": 4.0, "frames": [frame]}),
                "field of view",
            ),
            (
                json!({"fl_x": 8, "frames": [{"transform_matrix": c2w(0.0, [0.0; 3])}]}),
                "file_path",
            ),
            (json!({"fl_x": 8}), "frames"),
            (
                json!({"fl_x": 8, "frames": [frame, frame]}),
                "same file_path",
            ),
            (json!({"fl_x": -8, "frames": [frame]}), "focal"),
        ];
        for (doc, needle) in cases {
            write_json(d, "transforms.json", &doc);
            let err = import_dir(d).unwrap_err().to_string();
            assert!(err.contains(needle), "{doc}: {err}");
        }
        // Zero-valued placeholders of other models are accepted.
        write_json(
            d,
            "transforms.json",
            &json!({"fl_x": 8, "k4": 0.0, "is_fisheye": false, "camera_model": "OPENCV", "frames": [frame]}),
        );
        assert_eq!(import_dir(d).unwrap().views.len(), 1);
        // An empty folder and a folder whose frames all lack images.
        let empty = tempfile::tempdir().unwrap();
        assert!(import_dir(empty.path())
            .unwrap_err()
            .to_string()
            .contains("transforms.json"));
        write_json(
            empty.path(),
            "transforms.json",
            &json!({"fl_x": 8, "frames": [{"file_path": "gone.png", "transform_matrix": c2w(0.0, [0.0; 3])}]}),
        );
        assert!(import_dir(empty.path())
            .unwrap_err()
            .to_string()
            .contains("no usable frame"));
    }

    #[test]
    fn corrupt_and_wrongly_sized_images_fail_in_prepare_view() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(
            d.join("garbage.jpg"),
            b"\x00\x01not a jpeg, just some garbage bytes\xff\xfe",
        )
        .unwrap();
        write_png(&d.join("small.png"), 32, 24);
        write_json(
            d,
            "transforms.json",
            &json!({"fl_x": 60, "w": 64, "h": 48, "frames": [
                {"file_path": "garbage.jpg", "transform_matrix": c2w(0.0, [0.0; 3])},
                {"file_path": "small.png", "transform_matrix": c2w(0.0, [0.0; 3])}
            ]}),
        );
        let scene = import_dir(d).unwrap();
        let err = prepare_view(&scene.views[0], Resize::None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("garbage.jpg") && err.contains("cannot decode"),
            "{err}"
        );
        let err = prepare_view(&scene.views[1], Resize::None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("small.png") && err.contains("32x24") && err.contains("64x48"),
            "{err}"
        );
        assert!(err.contains("resized after SfM"), "{err}");
    }

    #[test]
    fn fox_view_prepared_through_the_importer() {
        let scene = import(Path::new(FOX), &ImportOptions::default()).unwrap();
        let view = &scene.views[0];
        let (cam, img) = prepare_view(view, Resize::Downscale(8)).unwrap();
        // The undistorted 1080×1920 image cropped to the 1067×1902 its rays fill (see
        // `image::covered_rect`), then shrunk 8×.
        assert_eq!((img.width, img.height), (133, 238));
        assert_eq!((cam.width, cam.height), (133, 238));
        let (sx, sy) = (133.0 / 1067.0, 238.0 / 1902.0);
        let k = view.camera.intrinsics;
        assert!(
            (cam.intrinsics.fx - k.fx * sx).abs() < 1e-9
                && (cam.intrinsics.cy - (k.cy - 11.0) * sy).abs() < 1e-9
        );
        assert_eq!(cam.world_to_camera, view.camera.world_to_camera);
        // The packed camera sees the same scene point at the same place of the window.
        // p = centre + Rᵀ·(0.3, −0.2, 2): 2 units in front of the camera, off-axis.
        let r = view.camera.world_to_camera.rotation;
        let c = view.camera.centre();
        let p = [0, 1, 2].map(|i| c[i] + 0.3 * r[0][i] - 0.2 * r[1][i] + 2.0 * r[2][i]);
        let a = view.camera.project(p).unwrap();
        let b = cam.project(p).unwrap();
        assert!(
            ((a[0] - 6.0) * sx - b[0]).abs() < 1e-9 && ((a[1] - 11.0) * sy - b[1]).abs() < 1e-9
        );
        // Camera-space (0.3, −0.2, 2) up to the file's ~1e-8 non-orthonormality (< 1e-3 px).
        assert!((a[0] - (k.fx * 0.15 + k.cx)).abs() < 1e-3, "{a:?}");
        assert!((a[1] - (k.cy - k.fy * 0.1)).abs() < 1e-3, "{a:?}");
    }

    #[test]
    fn non_finite_quoting_keeps_strings_and_lines() {
        let src = "{\"a\": NaN,\n \"b\": \"NaN \\\" Infinity\", \"c\": [-Infinity, Infinity]}";
        let q = quote_non_finite_literals(src);
        assert_eq!(q, "{\"a\": \"NaN\",\n \"b\": \"NaN \\\" Infinity\", \"c\": [\"-Infinity\", \"Infinity\"]}");
        assert!(matches!(
            quote_non_finite_literals("{\"a\": 1}"),
            Cow::Borrowed(_)
        ));
    }
}
