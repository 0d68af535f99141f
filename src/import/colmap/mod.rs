//! COLMAP sparse models: readers for both encodings, a writer, and the importer that turns a
//! COLMAP workspace into an [`ImportedScene`].
//!
//! Owns: the COLMAP camera-model table ([`CAMERA_MODELS`]), the mapping of the pinhole,
//! radial–tangential and fisheye models to [`Camera`] + [`Distortion`], the binary (`binary`) and text
//! (`text`) codecs, and the streaming [`PointsReader`].
//!
//! Invariants:
//! - Parsers never panic and never allocate from a count found in a file: vectors grow as
//!   records are read, observations and tracks are skipped without being buffered (tracks are
//!   read only for `--sfm-depths`, [`read_observations`], one point's at a time, growing as
//!   read), names and kept lines are capped ([`MAX_NAME_BYTES`], `text::MAX_LINE_BYTES`).
//! - Every record a reader returns is checked: known model with the right parameter count,
//!   non-empty size, finite numbers, non-zero quaternion, unique camera ids, unique image ids
//!   and names. [`read_model`] and [`import`] also check that every image's camera exists.
//! - Every error names the file and the byte offset (binary) or line (text) and the record,
//!   and says what to do.
//! - The models that are neither OpenCV's radial–tangential nor its fisheye model (FOV,
//!   THIN_PRISM_FISHEYE, RAD_TAN_THIN_PRISM_FISHEYE) are refused by [`import`], never treated
//!   as pinhole.
//! - COLMAP's pixel convention is ramsplat's (pixel centres at +0.5), so `cx, cy` are used as
//!   they are; `qvec, tvec` are already world-to-camera in OpenCV axes.

mod binary;
mod points;
mod text;

pub use points::{PointsReader, READ_BUFFER_BYTES};

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Cursor, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};

use super::{depth, file_present, ImportError, ImportOptions, ImportedScene, Location};
use crate::dataset::{DepthSource, Distortion, Format, PointSource, ViewSource};
use crate::scene::camera::{Camera, Intrinsics, Pose, Projection};

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

/// One element of a 3D point's track (`points3D.bin/txt`): the image that observes the point
/// and the index of the observation among that image's 2D points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackElement {
    pub image_id: u32,
    pub point2d_idx: u32,
}

/// One 2D observation of an image (`images.bin/txt` POINTS2D), as [`write_model_with_tracks`]
/// writes it: where in the image (COLMAP's pixel coordinates, centres at +0.5) and which 3D
/// point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point2D {
    pub xy: [f64; 2],
    pub point3d_id: u64,
}

/// Which encoding of a sparse model to read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Binary,
    Text,
}

impl Encoding {
    /// File extension of this encoding (`bin` or `txt`).
    pub fn extension(self) -> &'static str {
        match self {
            Encoding::Binary => "bin",
            Encoding::Text => "txt",
        }
    }
}

/// A whole sparse model in memory (tests and small models; [`import`] streams the points).
#[derive(Clone, Debug, PartialEq)]
pub struct ColmapModel {
    pub cameras: Vec<ColmapCamera>,
    pub images: Vec<ColmapImage>,
    pub points: Vec<ColmapPoint>,
}

/// One entry of COLMAP's camera-model table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CameraModel {
    /// The id `cameras.bin` stores.
    pub id: i32,
    /// The name `cameras.txt` stores.
    pub name: &'static str,
    pub num_params: usize,
    /// Whether [`import`] maps it to a pinhole camera + a [`Distortion`] (OpenCV's
    /// radial–tangential or fisheye model).
    pub supported: bool,
}

const fn model(id: i32, name: &'static str, num_params: usize, supported: bool) -> CameraModel {
    CameraModel {
        id,
        name,
        num_params,
        supported,
    }
}

/// COLMAP's camera models (src/colmap/sensor/models.h), in id order.
pub const CAMERA_MODELS: [CameraModel; 12] = [
    model(0, "SIMPLE_PINHOLE", 3, true),
    model(1, "PINHOLE", 4, true),
    model(2, "SIMPLE_RADIAL", 4, true),
    model(3, "RADIAL", 5, true),
    model(4, "OPENCV", 8, true),
    model(5, "OPENCV_FISHEYE", 8, true),
    model(6, "FULL_OPENCV", 12, true),
    model(7, "FOV", 5, false),
    model(8, "SIMPLE_RADIAL_FISHEYE", 4, true),
    model(9, "RADIAL_FISHEYE", 5, true),
    model(10, "THIN_PRISM_FISHEYE", 12, false),
    model(11, "RAD_TAN_THIN_PRISM_FISHEYE", 16, false),
];

/// The model with COLMAP id `id`.
pub fn camera_model_by_id(id: i32) -> Option<&'static CameraModel> {
    CAMERA_MODELS.iter().find(|m| m.id == id)
}

/// The model COLMAP calls `name` (exact, upper case, as `cameras.txt` writes it).
pub fn camera_model_by_name(name: &str) -> Option<&'static CameraModel> {
    CAMERA_MODELS.iter().find(|m| m.name == name)
}

/// Longest image name accepted in `images.bin`. Names are relative paths: Linux caps a path at
/// PATH_MAX = 4096 bytes and Windows long paths at 32,767 UTF-16 units (≤ 3 bytes each in
/// UTF-8, under 96 KiB); 64 KiB covers every real name and bounds the bytes read while looking
/// for a NUL that a corrupt file may never have.
pub const MAX_NAME_BYTES: usize = 64 * 1024;

/// Checks a camera record on its own (model, parameter count, size, finite parameters).
fn check_camera(c: &ColmapCamera) -> Result<(), String> {
    let Some(m) = camera_model_by_id(c.model_id) else {
        return Err(format!(
            "camera {} has unknown camera model id {}",
            c.id, c.model_id
        ));
    };
    if c.params.len() != m.num_params {
        return Err(format!(
            "camera {} ({}) has {} parameters, but that model takes {}",
            c.id,
            m.name,
            c.params.len(),
            m.num_params
        ));
    }
    if c.width == 0 || c.height == 0 {
        return Err(format!(
            "camera {} has an empty image size {}x{}; fix the camera or re-export the model",
            c.id, c.width, c.height
        ));
    }
    if let Some(i) = c.params.iter().position(|p| !p.is_finite()) {
        return Err(format!(
            "camera {} ({}) parameter {} is {}; the model is corrupt: re-run or re-export it",
            c.id, m.name, i, c.params[i]
        ));
    }
    Ok(())
}

/// Checks an image record on its own (finite pose, non-zero quaternion, a usable name).
fn check_image(i: &ColmapImage) -> Result<(), String> {
    if i.qvec.iter().chain(&i.tvec).any(|v| !v.is_finite()) {
        return Err(format!(
            "image {} ({:?}) has a pose that is not finite (q = {:?}, t = {:?}); the model is \
             corrupt: re-run the reconstruction or remove the image",
            i.id, i.name, i.qvec, i.tvec
        ));
    }
    let [w, x, y, z] = i.qvec;
    // The same norm `Pose::from_quaternion_wxyz` divides by.
    if (w * w + x * x + y * y + z * z).sqrt() == 0.0 {
        return Err(format!(
            "image {} ({:?}) has a zero quaternion, which is no rotation; the model is corrupt: \
             re-run the reconstruction or remove the image",
            i.id, i.name
        ));
    }
    if i.name.is_empty() || i.name.contains('\0') {
        return Err(format!(
            "image {} has an empty name or one containing NUL; names are image file paths",
            i.id
        ));
    }
    Ok(())
}

/// Checks a point record on its own (finite position and error).
fn check_point(p: &ColmapPoint) -> Result<(), String> {
    if p.xyz.iter().any(|v| !v.is_finite()) || !p.error.is_finite() {
        return Err(format!(
            "point {} has non-finite values (xyz = {:?}, error = {}); the model is corrupt: \
             re-export it or delete points3D to start from random points",
            p.id, p.xyz, p.error
        ));
    }
    Ok(())
}

impl ColmapCamera {
    /// This camera's entry in [`CAMERA_MODELS`].
    pub fn model(&self) -> Option<&'static CameraModel> {
        camera_model_by_id(self.model_id)
    }

    /// Intrinsics and lens ([`Distortion`]: OpenCV's radial–tangential or fisheye model) of a
    /// supported model; for any other model, a message naming the camera and model and saying
    /// how to undistort the images first.
    pub fn pinhole(&self) -> Result<(Intrinsics, Distortion), String> {
        let Some(m) = self.model() else {
            return Err(format!(
                "camera {} has unknown COLMAP camera model id {}",
                self.id, self.model_id
            ));
        };
        if !m.supported {
            return Err(format!(
                "camera {} uses COLMAP camera model {} (id {}), which ramsplat cannot undistort; \
                 run `colmap image_undistorter --image_path IMAGES --input_path SPARSE \
                 --output_path UNDISTORTED` and pack UNDISTORTED (its cameras are PINHOLE)",
                self.id, m.name, m.id
            ));
        }
        if self.params.len() != m.num_params {
            return Err(format!(
                "camera {} ({}) has {} parameters, but that model takes {}",
                self.id,
                m.name,
                self.params.len(),
                m.num_params
            ));
        }
        let p = &self.params;
        let radial_tangential = |k: &[f64], tangential: [f64; 2]| {
            let mut ks = [0.0; 6];
            ks[..k.len()].copy_from_slice(k);
            Distortion::RadialTangential {
                k: ks,
                p: tangential,
            }
        };
        let fisheye = |k: &[f64]| {
            let mut ks = [0.0; 4];
            ks[..k.len()].copy_from_slice(k);
            Distortion::Fisheye { k: ks }
        };
        let ((fx, fy, cx, cy), d) = match m.id {
            // SIMPLE_PINHOLE f, cx, cy
            0 => ((p[0], p[0], p[1], p[2]), Distortion::NONE),
            // PINHOLE fx, fy, cx, cy
            1 => ((p[0], p[1], p[2], p[3]), Distortion::NONE),
            // SIMPLE_RADIAL f, cx, cy, k
            2 => (
                (p[0], p[0], p[1], p[2]),
                radial_tangential(&p[3..4], [0.0; 2]),
            ),
            // RADIAL f, cx, cy, k1, k2
            3 => (
                (p[0], p[0], p[1], p[2]),
                radial_tangential(&p[3..5], [0.0; 2]),
            ),
            // OPENCV fx, fy, cx, cy, k1, k2, p1, p2
            4 => (
                (p[0], p[1], p[2], p[3]),
                radial_tangential(&p[4..6], [p[6], p[7]]),
            ),
            // OPENCV_FISHEYE fx, fy, cx, cy, k1, k2, k3, k4
            5 => ((p[0], p[1], p[2], p[3]), fisheye(&p[4..8])),
            // FULL_OPENCV fx, fy, cx, cy, k1, k2, p1, p2, k3, k4, k5, k6
            6 => (
                (p[0], p[1], p[2], p[3]),
                radial_tangential(&[p[4], p[5], p[8], p[9], p[10], p[11]], [p[6], p[7]]),
            ),
            // SIMPLE_RADIAL_FISHEYE f, cx, cy, k
            8 => ((p[0], p[0], p[1], p[2]), fisheye(&p[3..4])),
            // RADIAL_FISHEYE f, cx, cy, k1, k2
            9 => ((p[0], p[0], p[1], p[2]), fisheye(&p[3..5])),
            _ => unreachable!("CAMERA_MODELS marks only ids 0-6, 8 and 9 supported"),
        };
        Ok((Intrinsics { fx, fy, cx, cy }, d))
    }
}

fn open_buffered(path: &Path) -> Result<BufReader<File>, ImportError> {
    let f = crate::fsutil::open_file(path).map_err(|e| ImportError::io(path, e))?;
    Ok(BufReader::with_capacity(READ_BUFFER_BYTES, f))
}

/// Reads a `cameras.bin` / `cameras.txt`.
pub fn read_cameras(path: &Path, encoding: Encoding) -> Result<Vec<ColmapCamera>, ImportError> {
    let r = open_buffered(path)?;
    match encoding {
        Encoding::Binary => binary::read_cameras(r, path),
        Encoding::Text => text::read_cameras(r, path),
    }
}

/// Reads an `images.bin` / `images.txt` (2D observations are skipped).
pub fn read_images(path: &Path, encoding: Encoding) -> Result<Vec<ColmapImage>, ImportError> {
    let r = open_buffered(path)?;
    match encoding {
        Encoding::Binary => binary::read_images(r, path),
        Encoding::Text => text::read_images(r, path),
    }
}

/// Parses `cameras.bin/txt` bytes held in memory (fuzzing, tests); errors name `<memory>`.
pub fn parse_cameras_bytes(
    data: &[u8],
    encoding: Encoding,
) -> Result<Vec<ColmapCamera>, ImportError> {
    let path = Path::new("<memory>/cameras");
    match encoding {
        Encoding::Binary => binary::read_cameras(data, path),
        Encoding::Text => text::read_cameras(data, path),
    }
}

/// Parses `images.bin/txt` bytes held in memory (fuzzing, tests).
pub fn parse_images_bytes(
    data: &[u8],
    encoding: Encoding,
) -> Result<Vec<ColmapImage>, ImportError> {
    let path = Path::new("<memory>/images");
    match encoding {
        Encoding::Binary => binary::read_images(data, path),
        Encoding::Text => text::read_images(data, path),
    }
}

/// Parses `points3D.bin/txt` bytes held in memory through [`PointsReader`] (fuzzing, tests).
pub fn parse_points_bytes(
    data: &[u8],
    encoding: Encoding,
) -> Result<Vec<ColmapPoint>, ImportError> {
    let mut r =
        PointsReader::from_reader(Cursor::new(data.to_vec()), "<memory>/points3D", encoding)?;
    let mut out = Vec::new();
    while let Some(p) = r.next_point()? {
        out.push(p);
    }
    Ok(out)
}

/// Parses `points3D.bin/txt` bytes held in memory with their tracks (fuzzing, tests): each
/// point and its track elements.
pub fn parse_tracks_bytes(
    data: &[u8],
    encoding: Encoding,
) -> Result<Vec<(ColmapPoint, Vec<TrackElement>)>, ImportError> {
    let mut r = PointsReader::from_reader_opts(
        Cursor::new(data.to_vec()),
        "<memory>/points3D",
        encoding,
        true,
    )?;
    let mut out = Vec::new();
    while let Some(p) = r.next_point()? {
        out.push((p, r.track().to_vec()));
    }
    Ok(out)
}

/// The points file [`import`] reads beside a model in `encoding`: that encoding's, else the
/// other one's; `None` when there is neither, an error when one is something other than a file.
fn points_file(
    model_dir: &Path,
    encoding: Encoding,
) -> Result<Option<(PathBuf, Encoding)>, ImportError> {
    let other = match encoding {
        Encoding::Binary => Encoding::Text,
        Encoding::Text => Encoding::Binary,
    };
    for e in [encoding, other] {
        let p = model_dir.join(format!("points3D.{}", e.extension()));
        if file_present(&p)? {
            return Ok(Some((p, e)));
        }
    }
    Ok(None)
}

/// `gs-pack convert --sfm-depths`: the SfM points each of `views` (the views [`import`] gave
/// for the same `path` and `options`, matched by image name) observes, from the tracks in the
/// model's `points3D` file. A point enters the table once, when some view observes it; a view
/// lists it once however often its track names that view's image. A track element naming an
/// image that `images.bin/txt` does not register is an error naming the points file, the
/// point and the image; one naming a registered image whose file is missing (a skipped view)
/// is ignored. A model whose points carry no track element at all is refused (it has no
/// tracks), as is one without a points file. Memory: 24 bytes per point kept and 4 per
/// observation, plus one point's track at a time.
pub fn read_observations(
    path: &Path,
    options: &ImportOptions,
    views: &[ViewSource],
) -> Result<super::sfm_depth::SfmObservations, ImportError> {
    let layout = locate(path, options.images.as_deref())?;
    let ext = layout.encoding.extension();
    let images_path = layout.model_dir.join(format!("images.{ext}"));
    let images = read_images(&images_path, layout.encoding)?;
    let view_of_name: HashMap<&str, usize> = views
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name.as_str(), i))
        .collect();
    // Image id → the view it became (None: registered, but its file is missing).
    let view_of_id: HashMap<u32, Option<usize>> = images
        .iter()
        .map(|img| (img.id, view_of_name.get(img.name.as_str()).copied()))
        .collect();
    let Some((points_path, encoding)) = points_file(&layout.model_dir, layout.encoding)? else {
        return Err(ImportError::invalid(
            &layout.model_dir,
            "no points3D.bin or points3D.txt here: --sfm-depths supervises depth at the SfM \
             points each image observes, and the model has none; drop --sfm-depths, or convert \
             the model with its points3D file",
        ));
    };
    let mut reader = PointsReader::open_tracks(&points_path, encoding)?;
    let mut obs = super::sfm_depth::SfmObservations {
        xyz: Vec::new(),
        views: vec![Vec::new(); views.len()],
        track_elements: 0,
    };
    while let Some(p) = reader.next_point()? {
        let index = match u32::try_from(obs.xyz.len()) {
            Ok(i) if i < u32::MAX => i,
            _ => {
                return Err(ImportError::parse(
                    &points_path,
                    reader.location(),
                    format!(
                        "point {}: more than {} points are observed by the packed views, beyond \
                         what --sfm-depths indexes; drop --sfm-depths",
                        p.id,
                        u32::MAX - 1
                    ),
                ))
            }
        };
        let mut observed = false;
        for e in reader.track() {
            obs.track_elements += 1;
            match view_of_id.get(&e.image_id) {
                None => {
                    return Err(ImportError::parse(
                        &points_path,
                        reader.location(),
                        format!(
                            "point {}: its track names image {}, which {} does not register; the \
                             model is inconsistent: re-export points3D together with the images \
                             (COLMAP `model_converter`), or drop --sfm-depths",
                            p.id,
                            e.image_id,
                            images_path.display()
                        ),
                    ))
                }
                Some(None) => {}
                Some(Some(v)) => {
                    let list = &mut obs.views[*v];
                    if list.last() != Some(&index) {
                        list.push(index);
                    }
                    observed = true;
                }
            }
        }
        if observed {
            obs.xyz.push(p.xyz);
        }
    }
    if obs.track_elements == 0 {
        return Err(ImportError::invalid(
            &points_path,
            "the model has no tracks: no point lists the images that observe it, and \
             --sfm-depths needs them to know where each image sees a point (a model written \
             without tracks, such as by `gs-pack export` or a converter that drops them, \
             cannot give SfM depths); convert the original COLMAP model, or drop --sfm-depths",
        ));
    }
    Ok(obs)
}

/// Checks that every image's camera exists; `images_path` labels the error.
fn check_camera_refs(
    images_path: &Path,
    cameras: &[ColmapCamera],
    images: &[ColmapImage],
) -> Result<(), ImportError> {
    let ids: std::collections::HashSet<u32> = cameras.iter().map(|c| c.id).collect();
    for (k, img) in images.iter().enumerate() {
        if !ids.contains(&img.camera_id) {
            let mut ids: Vec<u32> = ids.into_iter().collect();
            ids.sort_unstable();
            let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
            return Err(ImportError::parse(
                images_path,
                Location::Record(k as u64),
                format!(
                    "image {} ({:?}) refers to camera {}, which the cameras file does not define \
                     (it defines {}); the model is inconsistent: re-export cameras and images \
                     together",
                    img.id,
                    img.name,
                    img.camera_id,
                    if ids.is_empty() {
                        "none".to_owned()
                    } else {
                        ids.join(", ")
                    }
                ),
            ));
        }
    }
    Ok(())
}

/// Reads a whole model from `dir` (`cameras`, `images`, `points3D` in `encoding`), checking
/// camera references and point-id uniqueness. Holds every point: for tests and small models.
pub fn read_model(dir: &Path, encoding: Encoding) -> Result<ColmapModel, ImportError> {
    let ext = encoding.extension();
    let cameras = read_cameras(&dir.join(format!("cameras.{ext}")), encoding)?;
    let images_path = dir.join(format!("images.{ext}"));
    let images = read_images(&images_path, encoding)?;
    check_camera_refs(&images_path, &cameras, &images)?;
    let points_path = dir.join(format!("points3D.{ext}"));
    let mut reader = PointsReader::open(&points_path, encoding)?;
    let mut points = Vec::new();
    let mut seen = std::collections::HashSet::new();
    while let Some(p) = reader.next_point()? {
        if !seen.insert(p.id) {
            return Err(ImportError::parse(
                &points_path,
                Location::Record(points.len() as u64),
                format!(
                    "point id {} appears twice; point ids must be unique (re-export the model)",
                    p.id
                ),
            ));
        }
        points.push(p);
    }
    Ok(ColmapModel {
        cameras,
        images,
        points,
    })
}

/// Checks what the writer needs so that the files it writes read back as they were given.
fn check_writable(
    dir: &Path,
    encoding: Encoding,
    cameras: &[ColmapCamera],
    images: &[ColmapImage],
) -> Result<(), ImportError> {
    for c in cameras {
        let Some(m) = c.model() else {
            return Err(ImportError::invalid(
                dir,
                format!(
                    "cannot write camera {}: unknown COLMAP camera model id {}",
                    c.id, c.model_id
                ),
            ));
        };
        if c.params.len() != m.num_params {
            return Err(ImportError::invalid(
                dir,
                format!(
                    "cannot write camera {} ({}): {} parameters given, the model takes {}",
                    c.id,
                    m.name,
                    c.params.len(),
                    m.num_params
                ),
            ));
        }
    }
    for i in images {
        let text_bad = encoding == Encoding::Text
            && (i.name.contains(['\n', '\r']) || i.name.trim() != i.name);
        if i.name.is_empty() || i.name.contains('\0') || i.name.len() > MAX_NAME_BYTES || text_bad {
            return Err(ImportError::invalid(
                dir,
                format!(
                    "cannot write image {}: its name {:?} is empty, too long, or holds characters \
                     this encoding cannot store (NUL; in text also line breaks and leading or \
                     trailing spaces)",
                    i.id, i.name
                ),
            ));
        }
    }
    Ok(())
}

/// Writes `cameras`, `images` and `points3D` in `encoding` into `dir` (created if needed).
/// Images are written with empty 2D observation lists; points with empty tracks
/// ([`write_model_with_tracks`] writes both). Text files get
/// COLMAP's standard comment headers and floats in shortest round-trip form (exact round
/// trips); binary files have COLMAP's exact layout. The points are streamed: the binary count
/// is patched in afterwards, the text body is spooled to a temporary file in `dir` so the
/// `# Number of points` header can come first.
pub fn write_model(
    dir: &Path,
    encoding: Encoding,
    cameras: &[ColmapCamera],
    images: &[ColmapImage],
    points: &mut dyn Iterator<Item = ColmapPoint>,
) -> Result<(), ImportError> {
    write_model_with_tracks(
        dir,
        encoding,
        cameras,
        images,
        &[],
        &mut points.map(|p| (p, Vec::new())),
    )
}

/// [`write_model`] with observations: image `k` gets the 2D points `observations[k]` (none when
/// `observations` is shorter), and each point its track. The caller keeps the two consistent
/// (a track element `(image, idx)` of point `p` is `observations` of that image at `idx`, whose
/// `point3d_id` is `p`'s id); with none, the files are byte for byte [`write_model`]'s.
pub fn write_model_with_tracks(
    dir: &Path,
    encoding: Encoding,
    cameras: &[ColmapCamera],
    images: &[ColmapImage],
    observations: &[Vec<Point2D>],
    points: &mut dyn Iterator<Item = (ColmapPoint, Vec<TrackElement>)>,
) -> Result<(), ImportError> {
    check_writable(dir, encoding, cameras, images)?;
    std::fs::create_dir_all(dir).map_err(|e| ImportError::io(dir, e))?;
    let ext = encoding.extension();
    let create = |name: &str| -> Result<(PathBuf, BufWriter<File>), ImportError> {
        let path = dir.join(format!("{name}.{ext}"));
        let f = File::create(&path).map_err(|e| ImportError::io(&path, e))?;
        Ok((path, BufWriter::new(f)))
    };
    let finish = |path: &Path, w: BufWriter<File>| -> Result<File, ImportError> {
        w.into_inner()
            .map_err(|e| ImportError::io(path, e.into_error()))
    };

    let (path, mut w) = create("cameras")?;
    match encoding {
        Encoding::Binary => binary::write_cameras(&mut w, cameras),
        Encoding::Text => text::write_cameras(&mut w, cameras),
    }
    .map_err(|e| ImportError::io(&path, e))?;
    finish(&path, w)?;

    let (path, mut w) = create("images")?;
    match encoding {
        Encoding::Binary => binary::write_images(&mut w, images, observations),
        Encoding::Text => text::write_images(&mut w, images, observations),
    }
    .map_err(|e| ImportError::io(&path, e))?;
    finish(&path, w)?;

    let (path, mut w) = create("points3D")?;
    match encoding {
        Encoding::Binary => {
            let io_err = |e| ImportError::io(&path, e);
            // Placeholder count, patched once the iterator is drained.
            w.write_all(&0u64.to_le_bytes()).map_err(io_err)?;
            let mut n = 0u64;
            for (p, track) in points {
                binary::write_point(&mut w, &p, &track).map_err(io_err)?;
                n += 1;
            }
            let mut f = finish(&path, w)?;
            f.seek(SeekFrom::Start(0)).map_err(io_err)?;
            f.write_all(&n.to_le_bytes()).map_err(io_err)?;
        }
        Encoding::Text => {
            let body_path = dir.join("points3D.txt.body.tmp");
            let result = write_text_points(&path, w, &body_path, points);
            // Best effort: the spool file is ours and useless whatever happened.
            let _ = std::fs::remove_file(&body_path);
            result?;
        }
    }
    Ok(())
}

fn write_text_points(
    path: &Path,
    mut w: BufWriter<File>,
    body_path: &Path,
    points: &mut dyn Iterator<Item = (ColmapPoint, Vec<TrackElement>)>,
) -> Result<(), ImportError> {
    let body_err = |e| ImportError::io(body_path, e);
    let spool = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(body_path)
        .map_err(body_err)?;
    let mut body = BufWriter::new(spool);
    let (mut n, mut elements) = (0u64, 0u64);
    for (p, track) in points {
        text::write_point(&mut body, &p, &track).map_err(body_err)?;
        n += 1;
        elements += track.len() as u64;
    }
    let mut body = body.into_inner().map_err(|e| body_err(e.into_error()))?;
    body.seek(SeekFrom::Start(0)).map_err(body_err)?;
    let io_err = |e| ImportError::io(path, e);
    text::write_points_header(&mut w, n, elements).map_err(io_err)?;
    io::copy(&mut body, &mut w).map_err(io_err)?;
    w.flush().map_err(io_err)?;
    Ok(())
}

/// Where [`import`] found a model.
struct Layout {
    root: PathBuf,
    model_dir: PathBuf,
    encoding: Encoding,
    images_dir: PathBuf,
    /// `masks/` beside `images/`, when it exists.
    masks_dir: Option<PathBuf>,
}

/// Whether `dir` holds a cameras file; an error when one of those names is something other than
/// a file (a named pipe, a device) rather than a folder to look past.
fn has_model_files(dir: &Path) -> Result<bool, ImportError> {
    for f in ["cameras.bin", "cameras.txt"] {
        let p = dir.join(f);
        if !p.is_dir() && file_present(&p)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Finds the model and the images folder; see [`import`] for the rules.
fn locate(path: &Path, images: Option<&Path>) -> Result<Layout, ImportError> {
    let path = std::fs::canonicalize(path).map_err(|e| ImportError::io(path, e))?;
    let candidates = [
        path.join("sparse").join("0"),
        path.join("sparse"),
        path.join("0"),
        path.clone(),
    ];
    let mut found = None;
    for d in &candidates {
        if has_model_files(d)? {
            found = Some(d.clone());
            break;
        }
    }
    let Some(model_dir) = found else {
        return Err(ImportError::invalid(
            &path,
            "no COLMAP model here: looked for cameras.bin/.txt in sparse/0/, sparse/, 0/ and the \
             folder itself; pass the workspace root (the folder holding sparse/ and images/) or \
             the model folder",
        ));
    };
    let both = |ext: &str| -> Result<bool, ImportError> {
        let present = |stem: &str| {
            let p = model_dir.join(format!("{stem}.{ext}"));
            Ok(!p.is_dir() && file_present(&p)?)
        };
        Ok(present("cameras")? && present("images")?)
    };
    let encoding = if both("bin")? {
        Encoding::Binary
    } else if both("txt")? {
        Encoding::Text
    } else {
        return Err(ImportError::invalid(
            &model_dir,
            "found a cameras file but no images file of the same encoding (need cameras.bin + \
             images.bin or cameras.txt + images.txt); re-export the model with COLMAP \
             `model_converter`",
        ));
    };
    let name_is = |p: &Path, n: &str| p.file_name().is_some_and(|f| f == n);
    let parent_or_self = |p: &Path| p.parent().map_or(p.to_path_buf(), Path::to_path_buf);
    let root = if model_dir == candidates[0] || model_dir == candidates[1] {
        // `<path>/sparse/0` or `<path>/sparse`: the folder we were given is the workspace root.
        path.clone()
    } else if model_dir == candidates[2] {
        // `<path>/0`: `<path>` is normally `X/sparse`, whose workspace root is `X`.
        if name_is(&path, "sparse") {
            parent_or_self(&path)
        } else {
            path.clone()
        }
    } else if name_is(&model_dir, "sparse") {
        parent_or_self(&model_dir)
    } else if model_dir.parent().is_some_and(|p| name_is(p, "sparse")) {
        parent_or_self(&parent_or_self(&model_dir))
    } else {
        model_dir.clone()
    };
    let images_dir = match images {
        None => root.join("images"),
        Some(dir) => {
            // `Path::join` keeps an absolute `dir` as it is.
            let d = root.join(dir);
            if !d.is_dir() {
                return Err(ImportError::invalid(
                    &d,
                    format!(
                        "--images {}: no such folder in the workspace {} (a relative --images \
                         is taken from the workspace root, the folder holding sparse/)",
                        dir.display(),
                        root.display()
                    ),
                ));
            }
            d
        }
    };
    let masks_dir = Some(root.join("masks")).filter(|d| d.is_dir());
    Ok(Layout {
        root,
        model_dir,
        encoding,
        images_dir,
        masks_dir,
    })
}

/// Whether a COLMAP image name is a plain relative path (no root, no `..`), so joining it to
/// the images folder stays inside that folder.
fn is_plain_relative(name: &str) -> bool {
    Path::new(name)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// Where the mask of image `name` may be, in order: COLMAP's convention (`name` + `.png`),
/// the image's stem + `.png` (nerfstudio and most segmentation tools), the same file name.
pub(crate) fn mask_candidates(masks_dir: &Path, name: &str) -> [PathBuf; 3] {
    let same = masks_dir.join(name);
    let mut colmap = same.clone().into_os_string();
    colmap.push(".png");
    [PathBuf::from(colmap), same.with_extension("png"), same]
}

/// The mask file of image `name` in `masks_dir` ([`mask_candidates`]), if any; an error when
/// a candidate is something other than a file.
pub(crate) fn find_mask(masks_dir: &Path, name: &str) -> Result<Option<PathBuf>, ImportError> {
    for p in mask_candidates(masks_dir, name) {
        if file_present(&p)? {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// Imports a COLMAP workspace.
///
/// `path` may be:
/// - a workspace root holding `sparse/0/` (COLMAP's layout) or `sparse/` (the original 3DGS
///   layout) — the first that holds a model wins — with the images in `<root>/images/`;
/// - a `sparse/` folder holding `0/` (treated as `sparse/0` passed directly);
/// - a model folder itself (holding `cameras.{bin,txt}`). Its workspace root is then found by
///   name: `X/sparse/N` → `X`, `X/sparse` → `X`, anything else → the folder itself; the images
///   are in `<root>/images/`.
///
/// When a model folder holds both encodings, the binary one is read (COLMAP writes .bin by
/// default, and it is exact where .txt may be rounded). `points3D` is read in the same encoding,
/// or the other one when only that exists; without any, the scene has `no_sfm_points = true`
/// and a warning says so.
///
/// `options.images` replaces `<root>/images/` (relative to the root, or absolute); its files
/// may be a resized copy of the model's images (`images_4`), each view's camera then scaled to
/// its file ([`crate::import::image::camera_for_file`]).
///
/// A `masks/` folder beside `images/` holds a loss mask per image, found as `masks/<name>.png`
/// (COLMAP's naming), the stem + `.png`, or the same file name, in that order (see
/// `crate::import::image::prepare_mask` for what a mask means); when it exists every
/// registered image must have one.
///
/// `options.depths` (`--depths DIR`, relative to the root or absolute) gives each image the
/// depth map `DIR/<name without extension>.png` and its fit from `depth_params.json` beside
/// the model (required, as in 3DGS); a missing map or entry is an error naming the image, and
/// a view whose fit is unreliable is imported without depth (see [`super::depth`]).
///
/// Views are sorted by image name (a relative path, possibly with subfolders). Image files that
/// do not exist are listed in `missing_images` and skipped with a warning, or refused under
/// `options.strict`; `options.metadata_only` skips the existence check.
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    let layout = locate(path, options.images.as_deref())?;
    let ext = layout.encoding.extension();
    let cameras_path = layout.model_dir.join(format!("cameras.{ext}"));
    let images_path = layout.model_dir.join(format!("images.{ext}"));
    let cameras = read_cameras(&cameras_path, layout.encoding)?;
    let mut images = read_images(&images_path, layout.encoding)?;
    check_camera_refs(&images_path, &cameras, &images)?;
    if images.is_empty() {
        return Err(ImportError::invalid(
            &images_path,
            "the model registers no images, so there is nothing to train on; re-run the \
             reconstruction (COLMAP mapper) until it registers images",
        ));
    }
    let mut warnings = Vec::new();
    if layout.model_dir.file_name().is_some_and(|n| n == "0")
        && layout.model_dir.with_file_name("1").is_dir()
    {
        warnings.push(format!(
            "{} holds several models; importing {} only (pass another model folder to use it)",
            layout
                .model_dir
                .parent()
                .unwrap_or(&layout.model_dir)
                .display(),
            layout.model_dir.display()
        ));
    }

    // `--depths`: the maps' folder and the fits 3DGS's make_depth_scale.py writes beside the
    // model (3DGS reads `sparse/0/depth_params.json` and refuses depths without it).
    let depths = match &options.depths {
        None => None,
        Some(dir) => {
            let dir = depth::depths_dir(&layout.root, dir)?;
            let params_path = layout.model_dir.join(depth::DEPTH_PARAMS_FILE);
            if !file_present(&params_path)? {
                return Err(ImportError::invalid(
                    &params_path,
                    format!(
                        "no such file: --depths needs the per-image fits of the depth maps to the \
                         SfM points, as 3DGS does; make it with 3DGS's `python \
                         utils/make_depth_scale.py --base_dir {} --depths_dir {}`",
                        layout.root.display(),
                        dir.display()
                    ),
                ));
            }
            Some((dir, depth::DepthParams::read(&params_path)?))
        }
    };
    let mut unreliable_depths = 0usize;

    images.sort_by(|a, b| a.name.cmp(&b.name));
    let by_id: HashMap<u32, &ColmapCamera> = cameras.iter().map(|c| (c.id, c)).collect();
    let mut views = Vec::with_capacity(images.len());
    let mut missing = Vec::new();
    for img in &images {
        let what = format!("image {} ({})", img.id, img.name);
        if !is_plain_relative(&img.name) {
            return Err(ImportError::invalid(
                &images_path,
                format!(
                    "{what}: the name must be a relative path inside the images folder (no leading \
                     '/', no '..'); fix the name in the model"
                ),
            ));
        }
        // check_camera_refs already refused missing cameras; this keeps the code panic-free.
        let Some(cam) = by_id.get(&img.camera_id) else {
            return Err(ImportError::invalid(
                &images_path,
                format!(
                    "{what} refers to camera {}, which does not exist",
                    img.camera_id
                ),
            ));
        };
        let (intrinsics, distortion) = cam
            .pinhole()
            .map_err(|m| ImportError::invalid(&cameras_path, format!("{m} (used by {what})")))?;
        let (Ok(width), Ok(height)) = (u32::try_from(cam.width), u32::try_from(cam.height)) else {
            return Err(ImportError::invalid(
                &cameras_path,
                format!(
                    "camera {} has size {}x{}, beyond the 2^32-1 pixels per side ramsplat supports",
                    cam.id, cam.width, cam.height
                ),
            ));
        };
        let pose = Pose::from_quaternion_wxyz(img.qvec, img.tvec).map_err(|source| {
            ImportError::Camera {
                path: images_path.clone(),
                what: what.clone(),
                source,
            }
        })?;
        let camera = Camera {
            width,
            height,
            intrinsics,
            world_to_camera: pose,
            projection: Projection::Pinhole,
        };
        camera.validate().map_err(|source| ImportError::Camera {
            path: images_path.clone(),
            what: format!("{what} with camera {}", cam.id),
            source,
        })?;
        let image_path = layout.images_dir.join(&img.name);
        if !options.metadata_only && !file_present(&image_path)? {
            missing.push(img.name.clone());
            continue;
        }
        let mask_path = match &layout.masks_dir {
            None => None,
            Some(dir) => match find_mask(dir, &img.name)? {
                Some(p) => Some(p),
                None if options.metadata_only => None,
                None => {
                    let [a, b, c] = mask_candidates(dir, &img.name);
                    return Err(ImportError::invalid(
                        dir,
                        format!(
                            "{what} has no mask: looked for {}, {} and {}; when masks/ exists \
                             every registered image needs one (add it, or move masks/ away to \
                             train on every pixel)",
                            a.display(),
                            b.display(),
                            c.display()
                        ),
                    ));
                }
            },
        };
        // 3DGS keys maps and fits by the image name without its extension.
        let depth = match &depths {
            None => None,
            Some((dir, params)) => {
                let key = depth::strip_extension(&img.name);
                let path = depth::existing_depth_file(&img.name, depth::depth_file(dir, key))?;
                match params.fit(key) {
                    None => {
                        return Err(ImportError::invalid(
                            &params.path,
                            format!(
                                "{what} has no entry {key:?} (its depth map is {}); every \
                                 registered image needs one: regenerate the file with 3DGS's \
                                 utils/make_depth_scale.py",
                                path.display()
                            ),
                        ))
                    }
                    Some(depth::Fit::Unreliable) => {
                        unreliable_depths += 1;
                        None
                    }
                    Some(depth::Fit::Reliable(scale)) => Some(DepthSource { path, scale }),
                }
            }
        };
        // A chosen images folder may hold a resized copy: the camera follows the file.
        let camera = super::camera_for_images(options, camera, &image_path, &img.name)?;
        views.push(ViewSource {
            name: img.name.clone(),
            image_path,
            camera,
            distortion,
            split: None,
            mask_path,
            depth,
        });
    }
    if let Some((_, params)) = &depths {
        if unreliable_depths > 0 {
            warnings.push(depth::unreliable_note(
                unreliable_depths,
                views.len(),
                params,
            ));
        }
    }
    if !missing.is_empty() {
        let first: Vec<&str> = missing.iter().take(5).map(String::as_str).collect();
        let summary = format!(
            "{} of the {} images the model registers are missing from {} (first: {})",
            missing.len(),
            images.len(),
            layout.images_dir.display(),
            first.join(", ")
        );
        if options.strict {
            return Err(ImportError::invalid(
                &layout.images_dir,
                format!("{summary}; copy them there, or drop --strict to skip them"),
            ));
        }
        if views.is_empty() {
            return Err(ImportError::invalid(
                &layout.images_dir,
                format!(
                    "{summary}, so no view remains; put the images in {} (the folder next to \
                     sparse/)",
                    layout.images_dir.display()
                ),
            ));
        }
        warnings.push(format!("{summary}; they were skipped"));
    }

    let mut clouds: Vec<Box<dyn PointSource<Error = ImportError>>> = Vec::new();
    let points = points_file(&layout.model_dir, layout.encoding)?;
    // Why training would start from random points, when it would.
    let random_start_note = match points {
        Some((p, e)) => {
            let reader = PointsReader::open(&p, e)?;
            if reader.declared_len() == Some(0) {
                Some(format!("{} holds no points", p.display()))
            } else {
                clouds.push(Box::new(reader));
                None
            }
        }
        None => Some(format!(
            "no points3D.bin or points3D.txt in {}",
            layout.model_dir.display()
        )),
    }
    .map(|why| {
        format!(
            "{why}; training will start from random points (--points FILE gives it a point cloud)"
        )
    });
    let no_sfm_points = clouds.is_empty();
    Ok(ImportedScene {
        format: Format::Colmap,
        root: layout.root,
        views,
        clouds,
        no_sfm_points,
        missing_images: missing,
        warnings,
        random_start_note,
    })
}

#[cfg(test)]
mod tests;
