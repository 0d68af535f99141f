//! Importers: turn the datasets people have into a format-neutral description that
//! [`crate::pack`] writes into shards.
//!
//! An importer reads *metadata* eagerly (cameras, poses, image paths: small) and *bulk data*
//! lazily: images are decoded one at a time by the pack pipeline through [`image`], and point
//! clouds are streamed in bounded chunks through [`PointSource`], so importing a multi-GB PLY or
//! a points3D.bin of millions of points never holds the whole cloud.
//!
//! Invariants of an [`ImportedScene`] returned by [`open`]:
//! - every [`ViewSource::camera`] passed [`crate::scene::camera::Camera::validate`] and describes the image file at its
//!   native resolution *before* undistortion;
//! - [`ViewSource::distortion`] is OpenCV's radial–tangential model (COLMAP SIMPLE_RADIAL,
//!   RADIAL, OPENCV, FULL_OPENCV and NeRF `k1 k2 k3 p1 p2` map to it) or OpenCV's fisheye model
//!   (COLMAP OPENCV_FISHEYE, RADIAL_FISHEYE, SIMPLE_RADIAL_FISHEYE and nerfstudio's
//!   `OPENCV_FISHEYE`; Metashape's frame and fisheye sensors map to the two, see
//!   [`metashape`], and so do OpenSfM's cameras, see [`opensfm`], Meshroom's, see
//!   [`meshroom`], Bundler's, see [`bundler`], and RealityCapture's, see [`realitycapture`]);
//!   other models are refused at import time with a message, never silently
//!   treated as pinhole. A photo becomes a pinhole image of its size and intrinsics, cropped
//!   where the lens leaves it empty (`image::covered_rect`); a fisheye's periphery does not
//!   fit in it. Under [`ImportOptions::keep_fisheye`] a fisheye lens's photo becomes the ideal
//!   equidistant fisheye image of its size and intrinsics instead: every such view's
//!   [`ViewSource::camera`] has `projection` [`Projection::Fisheye`], every other view's
//!   (and every view's without the option) is [`Projection::Pinhole`]. [`open`] adds a
//!   warning per camera whose pinhole image keeps less than the photo shows, and a note per
//!   fisheye camera, saying how much is kept;
//! - views are in a stable order (sorted by image name), so packs are reproducible;
//! - a view has a [`ViewSource::depth`] only under [`ImportOptions::depths`], with an existing
//!   map and a reliable fit ([`depth`]); a view whose fit is unreliable has none, and a
//!   warning counts such views.

pub mod bundler;
pub mod colmap;
pub mod depth;
pub mod e57;
pub mod image;
mod input;
pub mod las;
pub mod meshroom;
pub mod metashape;
pub mod nerf;
pub mod obj;
pub mod opensfm;
pub mod pcd;
pub mod ply;
pub mod realitycapture;
pub mod sfm_depth;
pub mod transform;

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use crate::dataset::{Distortion, Format, PointSource, ViewSource};
use crate::scene::camera::{CameraError, Projection, FISHEYE_MAX_THETA};

/// Importer options shared by every format.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Refuse (instead of skipping with a warning) frames whose image file is missing.
    pub strict: bool,
    /// Parse metadata only and do not require image files to exist (parser tests, `info` of a
    /// sparse model without its images).
    pub metadata_only: bool,
    /// The images folder: COLMAP, instead of `images/` beside the model (a relative path is
    /// taken from the workspace root); NeRF, the folder holding each `file_path`'s file name
    /// (nerfstudio's `images_N` layout, relative to the transforms file); Metashape, the folder
    /// of the photos (relative to the XML's folder); OpenSfM, the folder of the shots' images
    /// (relative to the dataset root); Meshroom, the folder of the views' image file names
    /// (relative to the SfMData file's folder); Bundler, the folder of the listed images' file
    /// names (relative to the list's folder); RealityCapture, the folder of the photos of the
    /// XMP files' stems (relative to the XMP folder). It may hold a resized copy of the images
    /// the poses were estimated on (Mip-NeRF 360's `images_4`): each view's camera is scaled to
    /// its file's size (see `crate::import::image::camera_for_file`; RealityCapture's
    /// calibration is relative to the photo's size anyway). A
    /// PLY, PCD or LAS point cloud refuses it.
    pub images: Option<PathBuf>,
    /// `gs-pack convert --depths DIR`: the folder of monocular inverse-depth maps (relative to
    /// the dataset root, or absolute), one `<image name without extension>.png` per image, as
    /// 3DGS's `-d` reads them (see [`depth`]). `None`: no depth planes.
    pub depths: Option<PathBuf>,
    /// `gs-pack convert --points-transform FILE`: the map the PLY, PCD and LAS readers apply to
    /// every position (in `f64`, before rounding to the pack's `f32`) and normal they deliver
    /// ([`transform`]). Set only for the clouds it is meant for: the `--points` cloud, or the
    /// clouds of a point-cloud conversion, never a dataset's own points.
    pub points_transform: Option<transform::PointsTransform>,
    /// `gs-pack convert --keep-fisheye`: a view whose lens is OpenCV's fisheye model is packed
    /// as the ideal equidistant fisheye image of its photo's size and intrinsics (the lens's
    /// `k1..k4` removed; [`crate::scene::camera::Projection::Fisheye`]) instead of as a pinhole
    /// image; [`open`] sets such a view's [`ViewSource::camera`] projection. Views of other
    /// lenses are unaffected.
    pub keep_fisheye: bool,
}

/// The camera of a view whose image file is `path`: `camera` itself, or scaled to the file when
/// `options.images` chose a folder that may hold a resized copy
/// ([`image::camera_for_file`]; not checked under `metadata_only`, which reads no image).
fn camera_for_images(
    options: &ImportOptions,
    camera: crate::scene::camera::Camera,
    path: &Path,
    view: &str,
) -> Result<crate::scene::camera::Camera, ImportError> {
    match &options.images {
        Some(_) if !options.metadata_only => image::camera_for_file(&camera, path, view),
        _ => Ok(camera),
    }
}

/// How many [`decoding`] calls are running, on any thread.
static DECODING: AtomicUsize = AtomicUsize::new(0);

/// The crates whose decoders [`decoding`] runs (as their source paths name them): the LAZ
/// decompressor, and the E57 reader with its XML parser.
const DECODER_CRATES: [&str; 3] = ["/laz-", "/e57-", "/roxmltree-"];

/// Runs `f` (a call into a third-party decoder: `laz`, `e57`) catching a panic, which damaged
/// data can raise from the decoder's internal assertions (on this thread, or on a rayon worker
/// of the parallel LAZ decoder, whose panic rayon carries back here); the caller reports it as
/// damage at that point. The panic hook installed once here stays silent for a panic raised
/// inside one of [`DECODER_CRATES`] while a decode runs (the error that follows says what
/// happened) and defers to the previous hook for every other panic.
pub(crate) fn decoding<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    static QUIET_HOOK: Once = Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_decoder = info.location().is_some_and(|l| {
                let file = l.file().replace('\\', "/");
                DECODER_CRATES.iter().any(|c| file.contains(c))
            });
            if !(in_decoder && DECODING.load(Ordering::SeqCst) > 0) {
                previous(info);
            }
        }));
    });
    DECODING.fetch_add(1, Ordering::SeqCst);
    let r = catch_unwind(AssertUnwindSafe(f));
    DECODING.fetch_sub(1, Ordering::SeqCst);
    r
}

/// `n` with thousands separators ("1,234,567"), for counts in messages.
pub(crate) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `--depths` refused for `file`, of a format (`what`: "OpenSfM datasets") whose images have
/// no depth maps ramsplat knows how to find.
fn refuse_depths(options: &ImportOptions, file: &Path, what: &str) -> Result<(), ImportError> {
    match &options.depths {
        Some(dir) => Err(ImportError::invalid(
            file,
            format!(
                "--depths {} is not supported for {what}; drop --depths",
                dir.display()
            ),
        )),
        None => Ok(()),
    }
}

/// A serde_json error while reading `file`, which `tool` wrote, as an import error naming the
/// line.
fn json_error(file: &Path, e: &serde_json::Error, tool: &str) -> ImportError {
    use serde_json::error::Category;
    let hint = match e.classify() {
        Category::Io => return ImportError::io(file, std::io::Error::other(e.to_string())),
        Category::Eof => "the file ends early (cut short while copying?)".to_owned(),
        Category::Syntax => "not valid JSON".to_owned(),
        Category::Data => format!("not what {tool} writes"),
    };
    // serde_json's message ends with " at line L column C", which the location repeats.
    let text = e.to_string();
    let text = text.split(" at line ").next().unwrap_or(&text);
    ImportError::parse(
        file,
        Location::Line(e.line() as u64),
        format!("{hint}: {text} (column {})", e.column()),
    )
}

/// The folder holding `file` (`.` for a bare file name).
fn folder_of(file: &Path) -> PathBuf {
    file.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_owned()
}

/// What to say of the cameras whose image file is missing (`missing`, sorted here), of
/// `listed` (`what` names them: "aligned cameras", "shots"; the images were looked for in
/// `place`): nothing when none is, a warning that they were skipped, or under `strict` the
/// error naming `file`.
fn missing_images_note(
    file: &Path,
    missing: &mut [String],
    listed: usize,
    what: &str,
    place: &Path,
    strict: bool,
) -> Result<Option<String>, ImportError> {
    if missing.is_empty() {
        return Ok(None);
    }
    missing.sort();
    let list = first_names(missing);
    let n = missing.len();
    let place = place.display();
    if strict {
        return Err(ImportError::invalid(
            file,
            format!(
                "{n} of {listed} {what} have no image file in {place} ({list}); restore the \
                 images or pass --images DIR, or drop --strict to skip them"
            ),
        ));
    }
    Ok(Some(format!(
        "{n} of {listed} {what} have no image file in {place} and were skipped ({list}); pass \
         --strict to make this an error"
    )))
}

/// "first: a, b, c, d, e, …" for the first few of `names` (missing files, skipped cameras).
fn first_names(names: &[String]) -> String {
    const LIST_FIRST: usize = 5;
    let mut s = names[..names.len().min(LIST_FIRST)].join(", ");
    if names.len() > LIST_FIRST {
        s.push_str(", …");
    }
    format!("first: {s}")
}

/// Points an importer reads into memory with its other metadata (OpenSfM's, Meshroom's and
/// Bundler's files hold them between the cameras and the end): already what the pack takes,
/// 15 bytes each (position as f32, colour as u8), in chunks none of which is empty.
#[derive(Default)]
pub(crate) struct ParsedPoints(Vec<crate::dataset::PointChunk>);

impl ParsedPoints {
    /// Points per chunk as they are read (the pack takes them in chunks of its own size).
    const CHUNK: usize = 1 << 16;

    /// Appends a point; its colour (0–255, as the file stores it) is rounded and clamped.
    pub(crate) fn push(&mut self, xyz: [f32; 3], rgb: [f64; 3]) {
        if self.0.last().is_none_or(|c| c.len() == Self::CHUNK) {
            self.0.push(crate::dataset::PointChunk::default());
        }
        let chunk = self.0.last_mut().expect("pushed above");
        chunk.xyz.push(xyz);
        chunk
            .rgb
            .push(rgb.map(|v| v.round().clamp(0.0, 255.0) as u8));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The points as the cloud `name` of a scene.
    pub(crate) fn into_cloud(self, name: &str) -> Box<dyn PointSource<Error = ImportError>> {
        Box::new(ParsedCloud(crate::dataset::MemPoints::new(name, self.0)))
    }
}

/// [`ParsedPoints`] as a source with the importers' error type: they have none left to raise.
struct ParsedCloud(crate::dataset::MemPoints);

impl PointSource for ParsedCloud {
    type Error = ImportError;

    fn name(&self) -> &str {
        self.0.name()
    }

    fn declared_len(&self) -> Option<u64> {
        self.0.declared_len()
    }

    fn has_labels(&self) -> bool {
        self.0.has_labels()
    }

    fn has_normals(&self) -> bool {
        self.0.has_normals()
    }

    fn next_chunk(
        &mut self,
        max_points: usize,
    ) -> Result<Option<crate::dataset::PointChunk>, ImportError> {
        match self.0.next_chunk(max_points) {
            Ok(c) => Ok(c),
            Err(never) => match never {},
        }
    }
}

/// What an importer found.
pub struct ImportedScene {
    pub format: Format,
    pub root: PathBuf,
    pub views: Vec<ViewSource>,
    /// Point clouds, streamed when the pack pipeline reaches them.
    pub clouds: Vec<Box<dyn PointSource<Error = ImportError>>>,
    /// True when the dataset has no SfM points at all (NeRF): training then starts from random
    /// points. Recorded in the manifest.
    pub no_sfm_points: bool,
    /// Frames listed by the metadata whose image file does not exist (skipped; refused under
    /// `--strict`).
    pub missing_images: Vec<String>,
    /// Human-readable notes for the user (printed by `gs-pack convert`).
    pub warnings: Vec<String>,
    /// Why training would start from random points (the dataset has none) and how to give it
    /// some, for the user; printed by `gs-pack convert` unless `--points` gives points
    /// ([`ImportedScene::replace_points`] drops it).
    pub random_start_note: Option<String>,
}

impl ImportedScene {
    /// `gs-pack convert --points FILE`: the initial points of this dataset's cameras come from
    /// `given` (a PLY, PCD, LAS, LAZ or E57 point cloud: a dense reconstruction such as COLMAP's
    /// `dense/fused.ply`, a registered laser scan or depth-camera frame), which replaces the dataset's own points (SfM points, a
    /// transforms.json's `ply_file_path`) as the cloud named "sfm". `given` is relative to the
    /// dataset root, like `--images` and `--depths`, or absolute. The header is checked now;
    /// the points stream when the pack pipeline pulls them. Adds a note saying what was
    /// replaced; returns the cloud's path.
    pub fn replace_points(
        &mut self,
        given: &Path,
        options: &ImportOptions,
    ) -> Result<PathBuf, ImportError> {
        if self.views.is_empty() {
            return Err(ImportError::invalid(
                &self.root,
                format!(
                    "--points {} gives a dataset's cameras their initial points, but this is a \
                     point cloud without views; convert the cloud itself, or drop --points",
                    given.display()
                ),
            ));
        }
        let path = points_path(&self.root, given)?;
        let mut warnings = Vec::new();
        let cloud = open_point_file(&path, "sfm", options, &mut warnings)?;
        let replaced: u64 = self.clouds.iter().filter_map(|c| c.declared_len()).sum();
        let count = cloud
            .declared_len()
            .map_or("its points".to_owned(), |n| format!("its {n} points"));
        let note = if self.clouds.is_empty() {
            format!(
                "--points {}: training starts from {count} (the dataset has no points of its own)",
                path.display()
            )
        } else {
            format!(
                "--points {}: {count} replace the dataset's {replaced} SfM points as the points \
                 training starts from",
                path.display()
            )
        };
        self.clouds = vec![cloud];
        self.no_sfm_points = false;
        self.random_start_note = None;
        self.warnings.extend(warnings);
        self.warnings.push(note);
        Ok(path)
    }
}

/// The `--points` file: relative to the dataset root (like `--images`), or absolute; it must
/// be a file. When it is missing there but the same relative path names a file from the
/// working directory, the error says so (the likely slip).
pub fn points_path(root: &Path, given: &Path) -> Result<PathBuf, ImportError> {
    let path = root.join(given);
    if !path.is_dir() && file_present(&path)? {
        return Ok(path);
    }
    let hint = if given.is_relative() && given.is_file() {
        format!(
            "; {} exists from the working directory, but --points is read relative to the \
             dataset root {} (like --images): give it from there, or as an absolute path",
            given.display(),
            root.display()
        )
    } else if given.is_relative() {
        format!(
            "; --points is read relative to the dataset root {} (like --images), or give an \
             absolute path",
            root.display()
        )
    } else {
        String::new()
    };
    let what = if path.exists() {
        "is not a file"
    } else {
        "does not exist"
    };
    Err(ImportError::invalid(
        &path,
        format!("the --points cloud {what}{hint}"),
    ))
}

/// How a point-cloud importer opens one file as the cloud `name` (`ply::open_cloud`,
/// `pcd::open_cloud`, `las::open_cloud`).
type OpenCloud = fn(
    &Path,
    &str,
    &ImportOptions,
    &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError>;

/// The point-cloud importers' shared entry: one file, or a folder of the files with one of the
/// extensions `exts` (any case, sorted by file name), each opened by `open` as the cloud named
/// by its file stem, which must be unique. A scene of clouds and no views.
fn import_cloud_files(
    path: &Path,
    exts: &[&str],
    format: Format,
    options: &ImportOptions,
    open: OpenCloud,
) -> Result<ImportedScene, ImportError> {
    let files = if path.is_dir() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| ImportError::io(path, e))? {
            let p = entry.map_err(|e| ImportError::io(path, e))?.path();
            // A directory named like a cloud is skipped; a pipe or device so named is an error.
            if p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| exts.iter().any(|e| x.eq_ignore_ascii_case(e)))
                && !p.is_dir()
                && file_present(&p)?
            {
                files.push(p);
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(ImportError::invalid(
                path,
                format!("the folder holds no .{} files", exts.join(" or .")),
            ));
        }
        files
    } else {
        vec![path.to_owned()]
    };
    let mut clouds: Vec<Box<dyn PointSource<Error = ImportError>>> =
        Vec::with_capacity(files.len());
    let mut names: Vec<String> = Vec::with_capacity(files.len());
    let mut warnings = Vec::new();
    for file in &files {
        let name = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(i) = names.iter().position(|n| *n == name) {
            return Err(ImportError::invalid(
                file,
                format!(
                    "cloud name `{name}` (the file stem) is also used by {}; rename one of them",
                    files[i].display()
                ),
            ));
        }
        clouds.push(open(file, &name, options, &mut warnings)?);
        names.push(name);
    }
    Ok(ImportedScene {
        format,
        root: path.to_owned(),
        views: Vec::new(),
        clouds,
        no_sfm_points: false,
        missing_images: Vec::new(),
        warnings,
        random_start_note: None,
    })
}

/// Opens a point-cloud file as the cloud `name`, by its extension (`.ply`, `.pcd`, `.las`,
/// `.laz` or `.e57`, any case).
/// Its header is checked now; its points stream when the pack pipeline pulls them.
pub fn open_point_file(
    path: &Path,
    name: &str,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext.eq_ignore_ascii_case("ply") {
        ply::open_cloud(path, name, options, warnings)
    } else if ext.eq_ignore_ascii_case("pcd") {
        pcd::open_cloud(path, name, options, warnings)
    } else if is_las(ext) {
        las::open_cloud(path, name, options, warnings)
    } else if ext.eq_ignore_ascii_case("e57") {
        e57::open_cloud(path, name, options, warnings)
    } else if ext.eq_ignore_ascii_case("obj") {
        obj::open_cloud(path, name, options, warnings)
    } else {
        Err(ImportError::invalid(
            path,
            "not a point cloud file this reads: give a .ply, .pcd, .las, .laz, .e57 or .obj \
             (mesh vertices) file",
        ))
    }
}

impl fmt::Debug for ImportedScene {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportedScene")
            .field("format", &self.format)
            .field("root", &self.root)
            .field("views", &self.views.len())
            .field(
                "clouds",
                &self
                    .clouds
                    .iter()
                    .map(|c| c.name().to_owned())
                    .collect::<Vec<_>>(),
            )
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
    #[error("{}: cannot tell which dataset format this is ({msg}); pass --format colmap|nerf|metashape|opensfm|meshroom|bundler|realitycapture|ply|pcd|las|e57|obj", path.display())]
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

/// Whether the regular file `path` is there: `false` when nothing is (a dangling symlink
/// included), an error naming what is there when it is something else. The importers' probes
/// for optional and listed files go through this, so that a directory or a named pipe where a
/// file belongs is reported as what it is instead of being taken for an absent file (and, say,
/// an image silently skipped as missing).
pub(crate) fn file_present(path: &Path) -> Result<bool, ImportError> {
    crate::fsutil::file_exists(path).map_err(|e| ImportError::io(path, e))
}

/// The error for a dataset path that is neither a file nor a folder: nothing there, or what is
/// there instead (a named pipe, a device).
pub(crate) fn no_dataset_at(path: &Path) -> ImportError {
    let what = match std::fs::metadata(path) {
        Ok(meta) => format!(
            "{}, not a dataset folder or file",
            crate::fsutil::not_a_file(&meta).unwrap_or("a file")
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "no such file or directory".into(),
        Err(e) => e.to_string(),
    };
    ImportError::io(
        path,
        std::io::Error::new(std::io::ErrorKind::NotFound, what),
    )
}

/// Whether `ext` is a LAS file's extension (`las`, or `laz` when compressed; any case).
fn is_las(ext: &str) -> bool {
    ext.eq_ignore_ascii_case("las") || ext.eq_ignore_ascii_case("laz")
}

/// Guesses the format of `path`: a `.ply` file or a folder of them is `ply`; a `.pcd` file or a
/// folder of them is `pcd`; a `.las` or `.laz` file or a folder of them is `las`; an `.e57`
/// file or a folder of them is `e57` (a folder holding two of these kinds is refused:
/// `--format ply|pcd|las|e57` chooses); a
/// folder with `transforms*.json` (or such a file itself) is `nerf`; a folder with `sparse/0/`,
/// `sparse/` or `cameras.{bin,txt}` is `colmap`; an `.xml` file, or a folder with `cameras.xml`
/// (and none of the above), is `metashape`; a `reconstruction*.json` file, or a folder with
/// `reconstruction.json` or `opensfm/reconstruction.json` (and none of the above), is
/// `opensfm`; an `.out` file, or a folder with `bundle.out` or `bundle/bundle.out` (and none
/// of the above), is `bundler`; an `.xmp` file, or a folder holding `.xmp` files (and none of
/// the above), is `realitycapture` (checked before the point-cloud files, which may be the
/// cloud exported with them).
pub fn detect(path: &Path) -> Result<Format, ImportError> {
    if path.is_file() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        return if ext.eq_ignore_ascii_case("ply") {
            Ok(Format::Ply)
        } else if ext.eq_ignore_ascii_case("pcd") {
            Ok(Format::Pcd)
        } else if is_las(ext) {
            Ok(Format::Las)
        } else if ext.eq_ignore_ascii_case("e57") {
            Ok(Format::E57)
        } else if ext.eq_ignore_ascii_case("obj") {
            Ok(Format::Obj)
        } else if ext.eq_ignore_ascii_case("json") && name.starts_with("transforms") {
            Ok(Format::Nerf)
        } else if ext.eq_ignore_ascii_case("json") && name.starts_with("reconstruction") {
            Ok(Format::Opensfm)
        } else if ext.eq_ignore_ascii_case("sfm")
            || (ext.eq_ignore_ascii_case("json")
                && (name.starts_with("sfm") || name.starts_with("cameras")))
        {
            Ok(Format::Meshroom)
        } else if ext.eq_ignore_ascii_case("out") {
            Ok(Format::Bundler)
        } else if ext.eq_ignore_ascii_case("xml") {
            Ok(Format::Metashape)
        } else if ext.eq_ignore_ascii_case("xmp") {
            // The importer names the folder to pass instead.
            Ok(Format::Realitycapture)
        } else {
            Err(ImportError::UnknownFormat {
                path: path.to_owned(),
                msg: "a file that is neither .ply, .pcd, .las, .laz, .e57, .obj, \
                      transforms*.json, reconstruction*.json (OpenSfM), a Meshroom .sfm (or \
                      sfm*.json, cameras*.json), a Bundler .out, a Metashape .xml nor a \
                      RealityCapture .xmp; pass --format for another name"
                    .into(),
            })
        };
    }
    if !path.is_dir() {
        return Err(no_dataset_at(path));
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
    if has(metashape::CAMERAS_FILE) {
        return Ok(Format::Metashape);
    }
    if has(opensfm::RECONSTRUCTION_FILE)
        || path
            .join(opensfm::ODM_FOLDER)
            .join(opensfm::RECONSTRUCTION_FILE)
            .exists()
    {
        return Ok(Format::Opensfm);
    }
    if meshroom::SFM_FILES.iter().any(|f| has(f)) || has("sfm.abc") {
        return Ok(Format::Meshroom);
    }
    if has(bundler::BUNDLE_FILE) || path.join("bundle").join(bundler::BUNDLE_FILE).exists() {
        return Ok(Format::Bundler);
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| ImportError::io(path, e))?
        .flatten()
        .map(|e| e.path())
        .collect();
    // RealityCapture writes its XMP files beside the photos; a point cloud exported with
    // them is then given with --points.
    if entries.iter().any(|p| {
        p.extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| x.eq_ignore_ascii_case("xmp"))
            && p.file_name().and_then(|n| n.to_str()) != Some(realitycapture::COMMON_XMP)
    }) {
        return Ok(Format::Realitycapture);
    }
    // (format, what its files are called, how many the folder holds)
    let mut kinds = [
        (Format::Ply, ".ply", 0),
        (Format::Pcd, ".pcd", 0),
        (Format::Las, ".las/.laz", 0),
        (Format::E57, ".e57", 0),
        (Format::Obj, ".obj", 0),
    ];
    for p in &entries {
        let kind = match p.extension().and_then(|x| x.to_str()) {
            Some(x) if x.eq_ignore_ascii_case("ply") => 0,
            Some(x) if x.eq_ignore_ascii_case("pcd") => 1,
            Some(x) if is_las(x) => 2,
            Some(x) if x.eq_ignore_ascii_case("e57") => 3,
            Some(x) if x.eq_ignore_ascii_case("obj") => 4,
            _ => continue,
        };
        kinds[kind].2 += 1;
    }
    let present: Vec<_> = kinds.iter().filter(|k| k.2 > 0).collect();
    if present.len() > 1 {
        let list: Vec<String> = present
            .iter()
            .map(|(_, ext, n)| format!("{ext} ({n})"))
            .collect();
        return Err(ImportError::invalid(
            path,
            format!(
                "the folder holds {} point clouds, so which to pack is unclear; pass --format \
                 ply, pcd, las, e57 or obj (only those files are then read)",
                list.join(" and ")
            ),
        ));
    }
    if let Some((format, ..)) = present.first() {
        return Ok(*format);
    }
    Err(ImportError::UnknownFormat {
        path: path.to_owned(),
        msg: "found no sparse/ or cameras.bin/txt (COLMAP), no transforms.json (NeRF), no cameras.xml (Metashape), no reconstruction.json or opensfm/reconstruction.json (OpenSfM, OpenDroneMap), no sfm.json, sfm.sfm or cameras.sfm (Meshroom), no bundle.out or bundle/bundle.out (Bundler), no .xmp files (RealityCapture) and no .ply, .pcd, .las, .laz, .e57 or .obj files".into(),
    })
}

/// Opens a dataset with the given (or detected) importer.
pub fn open(
    path: &Path,
    format: Format,
    options: &ImportOptions,
) -> Result<ImportedScene, ImportError> {
    let format = match format {
        Format::Auto => detect(path)?,
        f => f,
    };
    let cloud = match format {
        // With its article, for the messages below.
        Format::Ply => Some("a PLY"),
        Format::Pcd => Some("a PCD"),
        Format::Las => Some("a LAS"),
        Format::E57 => Some("an E57"),
        _ => None,
    };
    if let (Some(dir), Some(cloud)) = (&options.images, cloud) {
        return Err(ImportError::invalid(
            path,
            format!(
                "--images {} chooses the images folder of a COLMAP or NeRF dataset, but this is \
                 {cloud} point cloud, which has no images; drop --images",
                dir.display()
            ),
        ));
    }
    if let (Some(dir), Some(cloud)) = (&options.depths, cloud) {
        return Err(ImportError::invalid(
            path,
            format!(
                "--depths {} chooses the depth maps of a COLMAP or NeRF dataset's images, but \
                 this is {cloud} point cloud, which has no images; drop --depths",
                dir.display()
            ),
        ));
    }
    let mut scene = match format {
        Format::Colmap => colmap::import(path, options),
        Format::Nerf => nerf::import(path, options),
        Format::Metashape => metashape::import(path, options),
        Format::Opensfm => opensfm::import(path, options),
        Format::Bundler => bundler::import(path, options),
        Format::Meshroom => meshroom::import(path, options),
        Format::Realitycapture => realitycapture::import(path, options),
        Format::Ply => ply::import(path, options),
        Format::Pcd => pcd::import(path, options),
        Format::Las => las::import(path, options),
        Format::E57 => e57::import(path, options),
        Format::Obj => obj::import(path, options),
        Format::Other => Err(ImportError::invalid(
            path,
            "the dataset format is not one this ramsplat imports",
        )),
        Format::Auto => unreachable!("resolved above"),
    }?;
    // Importers describe the photo; the ideal image it becomes is chosen here, once.
    for v in &mut scene.views {
        v.camera.projection =
            if options.keep_fisheye && matches!(v.distortion, Distortion::Fisheye { .. }) {
                Projection::Fisheye
            } else {
                Projection::Pinhole
            };
    }
    scene.warnings.extend(lens_notes(&scene.views));
    Ok(scene)
}

/// Cameras a lens warning describes one by one; the rest are counted.
const LENS_NOTES: usize = 3;

/// Whether a fisheye camera's image reaches past [`FISHEYE_MAX_THETA`] off the axis (at a
/// corner): pixels there have no content.
fn reaches_past_max_theta(c: &crate::scene::camera::Camera) -> bool {
    let k = c.intrinsics;
    let (w, h) = (f64::from(c.width), f64::from(c.height));
    [(0.0, 0.0), (w, 0.0), (0.0, h), (w, h)]
        .iter()
        .any(|&(u, v)| ((u - k.cx) / k.fx).hypot((v - k.cy) / k.fy) > FISHEYE_MAX_THETA)
}

/// One warning per distinct camera (size, intrinsics, lens and projection) whose ideal image
/// a pack keeps less of than the photo shows, or that is a fisheye lens (the first
/// [`LENS_NOTES`], then a count): a fisheye lens (how much of its field of view the pinhole,
/// or under `--keep-fisheye` the equidistant fisheye, image keeps), or a lens that leaves the
/// undistorted image's edges empty (the crop, see [`image::covered_rect`]). The trade-off is
/// the pack's, so the user is told before training on it.
fn lens_notes(views: &[ViewSource]) -> Vec<String> {
    // (views using it, the first view's index, its kept window) per distinct camera (size,
    // intrinsics, lens and projection; the pose is not part of it), in view order.
    let mut cameras: Vec<(usize, usize, image::PixelRect)> = Vec::new();
    let same_camera = |a: &ViewSource, b: &ViewSource| {
        (
            a.camera.width,
            a.camera.height,
            a.camera.intrinsics,
            a.camera.projection,
            a.distortion,
        ) == (
            b.camera.width,
            b.camera.height,
            b.camera.intrinsics,
            b.camera.projection,
            b.distortion,
        )
    };
    for (index, v) in views.iter().enumerate() {
        match cameras
            .iter_mut()
            .find(|(_, first, _)| same_camera(&views[*first], v))
        {
            Some((n, ..)) => *n += 1,
            None => {
                let c = &v.camera;
                let kept = image::covered_rect(
                    c.width,
                    c.height,
                    &c.intrinsics,
                    &v.distortion,
                    c.projection,
                );
                cameras.push((1, index, kept));
            }
        }
    }
    // A window left empty (the lens sends nothing into the photo) fails packing, naming the
    // view; no note for it.
    cameras.retain(|&(_, first, kept)| {
        let v = &views[first];
        !kept.is_empty()
            && (matches!(v.distortion, Distortion::Fisheye { .. })
                || kept != image::PixelRect::full(v.camera.width, v.camera.height))
    });
    let mut notes: Vec<String> = cameras
        .iter()
        .take(LENS_NOTES)
        .map(|&(n, first, kept)| {
            let v = &views[first];
            let c = &v.camera;
            let views = if n == 1 {
                format!("view {}", v.name)
            } else {
                format!("{n} views (the first: {})", v.name)
            };
            let crop = (kept != image::PixelRect::full(c.width, c.height)).then(|| {
                let what = match c.projection {
                    Projection::Pinhole => "undistorted",
                    Projection::Fisheye => "equidistant",
                };
                format!(
                    "the {what} image's edges would show pixels outside the photo{}, so it is \
                     cropped to {}x{} of {}x{} ({:.1} % of its pixels; COLMAP's \
                     image_undistorter crops alike)",
                    if c.projection.is_pinhole() || !reaches_past_max_theta(c) {
                        ""
                    } else {
                        " or rays the renderers do not draw (90° or more off the axis)"
                    },
                    kept.width(),
                    kept.height(),
                    c.width,
                    c.height,
                    100.0 * f64::from(kept.width()) * f64::from(kept.height())
                        / (f64::from(c.width) * f64::from(c.height))
                )
            });
            match v.distortion {
                Distortion::Fisheye { .. } => {
                    let fov = image::field_of_view(
                        c.width,
                        c.height,
                        &c.intrinsics,
                        &v.distortion,
                        c.projection,
                        kept,
                    );
                    let photo = match fov.photo {
                        [Some(h), Some(w)] => format!("of the photo's {h:.0}°×{w:.0}°"),
                        _ => "of the photo (whose edges lie past the lens model's fold-over)"
                            .to_owned(),
                    };
                    match c.projection {
                        Projection::Pinhole => format!(
                            "{views}: a fisheye lens, resampled to a pinhole image of the same \
                             focal length, which keeps {:.0}°×{:.0}° {photo} through the centre \
                             at full resolution (a pinhole image cannot hold a wide \
                             periphery){}; to keep more, pass --keep-fisheye (fisheye views, \
                             which gs-train and gs-render draw natively), or undistort the \
                             photos to a wider pinhole first (e.g. COLMAP image_undistorter) \
                             and pack those",
                            fov.kept[0],
                            fov.kept[1],
                            crop.map(|c| format!("; {c}")).unwrap_or_default()
                        ),
                        Projection::Fisheye => format!(
                            "{views}: a fisheye lens, kept as a fisheye view (--keep-fisheye): \
                             resampled to the ideal equidistant fisheye image of the same \
                             focal length (the lens's k1..k4 removed), which keeps \
                             {:.0}°×{:.0}° {photo} through the centre{}",
                            fov.kept[0],
                            fov.kept[1],
                            crop.map(|c| format!("; {c}")).unwrap_or_default()
                        ),
                    }
                }
                Distortion::RadialTangential { .. } | Distortion::Brown { .. } => {
                    format!("{views}: {}", crop.unwrap_or_default())
                }
            }
        })
        .collect();
    if cameras.len() > LENS_NOTES {
        notes.push(format!(
            "{} more cameras keep less than their photos show, alike (a fisheye periphery or \
             cropped edges), or are kept as fisheye views",
            cameras.len() - LENS_NOTES
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::camera::{Camera, Intrinsics, Pose};

    fn fisheye_view(name: &str, f: f64, projection: Projection) -> ViewSource {
        ViewSource {
            name: name.into(),
            image_path: PathBuf::from(name),
            camera: Camera {
                width: 64,
                height: 48,
                intrinsics: Intrinsics {
                    fx: f,
                    fy: f,
                    cx: 32.0,
                    cy: 24.0,
                },
                world_to_camera: Pose::IDENTITY,
                projection,
            },
            distortion: Distortion::Fisheye { k: [0.0; 4] },
            split: None,
            mask_path: None,
            depth: None,
        }
    }

    /// A fisheye camera's note says how it is packed and what it keeps: a pinhole image keeps
    /// less than the photo; an equidistant one of an ideal lens keeps all of it, unless its
    /// corners lie past FISHEYE_MAX_THETA, which crops them (and the note says why).
    #[test]
    fn lens_notes_say_what_a_fisheye_view_keeps() {
        // f = 32/(π/3): the left and right edges 60° off the axis; corners 75°.
        let f = 32.0 / std::f64::consts::FRAC_PI_3;
        let notes = lens_notes(&[fisheye_view("a", f, Projection::Pinhole)]);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].starts_with("view a: a fisheye lens, resampled to a pinhole image")
                && notes[0].contains("pass --keep-fisheye"),
            "{notes:?}"
        );
        let notes = lens_notes(&[
            fisheye_view("b", f, Projection::Fisheye),
            fisheye_view("c", f, Projection::Fisheye),
        ]);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].starts_with("2 views (the first: b): a fisheye lens, kept as a fisheye view")
                && notes[0].contains("which keeps 120°×90° of the photo's 120°×90°")
                && !notes[0].contains("cropped"),
            "{notes:?}"
        );
        // At a third of that focal length the corners are 225° off the axis.
        let notes = lens_notes(&[fisheye_view("d", f / 3.0, Projection::Fisheye)]);
        assert!(
            notes[0].contains("the equidistant image's edges would show pixels outside the photo or rays the renderers do not draw (90° or more off the axis), so it is cropped to"),
            "{notes:?}"
        );
    }
}
