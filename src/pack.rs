//! The `gs-pack convert` pipeline: importer → bounded parallel decode/undistort/resize/encode →
//! ordered append to shards → sealed pack.
//!
//! Memory is bounded by the number of workers, never by the dataset: each worker holds one view
//! while preparing it (decoded source image, undistorted and resized copies, encoded payload),
//! and at most `window` encoded views wait for their turn to be appended, because a worker may
//! only start view `i` once view `i − window` has been written. Point clouds stream through in
//! chunks of [`crate::shard::POINTS_PER_CHUNK`].
//!
//! Views are appended in importer order (sorted by name), whatever order the workers finish in,
//! so a pack's bytes depend only on its input and options (apart from the random pack id).
//!
//! A convert that would give a pack nothing to train on is refused before anything is written:
//! every view a test view (`--test-every 1`, or a 1-view dataset under the default
//! `--test-every 8`: pass `--test-every 0`), or every camera at one position (scene extent 0).
//!
//! Under `--codec jpeg` a worker also reads the view's source file and hands it to the writer
//! ([`encode_view_as`]), which keeps its compressed data only if it decodes to exactly the
//! prepared pixels; [`JpegReport`] counts what was kept and what was encoded.
//!
//! `--sfm-depths` (COLMAP, OpenSfM, Bundler) gives each view a *sparse* inverse-depth plane: the
//! inverse depth of the SfM points its image observes, at the pixels where they project through
//! the packed camera ([`crate::import::sfm_depth`]). The observations come from the model's
//! points3D tracks (OpenSfM's tracks.csv, Bundler's view lists), read before the views are prepared into a table of about 24 bytes per point
//! and 4 bytes per observation ([`crate::import::sfm_depth::SfmObservations`]): the one cost of
//! a convert that grows with the dataset rather than with the workers, and only with the
//! option (a model of 1M points observed 5M times holds about 44 MB). The manifest says so
//! (`source.sfm_depths`), and [`SfmDepthReport`] counts the planes and their point pixels.
//!
//! `--points FILE` replaces the dataset's own points with another cloud's
//! ([`import::ImportedScene::replace_points`]). Every convert then
//! reads a sample of the sealed pack's initial points back and says how many its views see
//! ([`points_in_view`], also `gs-pack info`), warning when fewer than half are: a cloud in
//! another coordinate frame would start Gaussians no view can correct.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use crate::dataset::Format;
use crate::dataset::Split;
use crate::import::image::{prepare_view_pixels, Resize};
use crate::import::sfm_depth::sparse_plane;
use crate::import::transform::PointsTransform;
use crate::import::{self, ImportError, ImportOptions};
use crate::shard::writer::{
    encode_view_as, CloudError, EncodedView, PackWriter, WriteError, WriterOptions,
};
use crate::shard::{Codec, Manifest, SourceInfo};

/// The original 3DGS trainer scales any image wider than 1600 px down to 1600 px.
pub const DEFAULT_MAX_WIDTH: u32 = 1600;

/// Options of `gs-pack convert`.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    pub format: Format,
    /// `None` means the 3DGS default, `MaxWidth(DEFAULT_MAX_WIDTH)`, reported when it applies.
    pub resize: Option<Resize>,
    pub codec: Codec,
    /// Quality of the views [`Codec::Jpeg`] encodes rather than keeps as their source JPEG.
    pub jpeg_quality: u8,
    /// Under [`Codec::Jpeg`], store the views that cannot keep their source JPEG with zstd
    /// (`--lossless`).
    pub lossless: bool,
    pub shard_size: u64,
    /// Every `n`-th view (indices 0, n, 2n, … in name order, the 3DGS `llffhold` rule) becomes a
    /// test view, unless the dataset assigns splits itself. 0 disables.
    pub test_every: u32,
    pub force: bool,
    pub strict: bool,
    /// Accept JPEGs with corrupt scan data (packed as the lenient decoder fills them, with a
    /// warning naming each file) instead of failing on the first.
    pub lenient: bool,
    /// Decode/encode threads.
    pub workers: usize,
    /// The images folder, possibly a resized copy (see [`ImportOptions::images`]).
    pub images: Option<PathBuf>,
    /// The monocular inverse-depth maps' folder (see [`ImportOptions::depths`]).
    pub depths: Option<PathBuf>,
    /// A point cloud whose points replace the dataset's own as the ones training starts from
    /// (see [`import::ImportedScene::replace_points`]).
    pub points: Option<PathBuf>,
    /// `--points-transform`: the file of the map that moves the `--points` cloud, or the
    /// clouds of a point-cloud conversion, into the cameras' frame
    /// ([`import::transform`]).
    pub points_transform: Option<PathBuf>,
    /// Apply that map's inverse.
    pub invert_points_transform: bool,
    /// `--sfm-depths`: give each view the sparse inverse-depth plane of the SfM points its
    /// image observes (COLMAP, OpenSfM and Bundler; not with `depths`).
    pub sfm_depths: bool,
    /// `--keep-fisheye`: pack fisheye-lens views as ideal equidistant fisheye views (see
    /// [`ImportOptions::keep_fisheye`]); the manifest records it in each such view's camera
    /// (`"projection": "fisheye"`).
    pub keep_fisheye: bool,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            format: Format::Auto,
            resize: None,
            codec: Codec::Zstd,
            jpeg_quality: crate::shard::writer::DEFAULT_JPEG_QUALITY,
            lossless: false,
            shard_size: crate::shard::writer::DEFAULT_SHARD_SIZE,
            test_every: 8,
            force: false,
            strict: false,
            lenient: false,
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            images: None,
            depths: None,
            points: None,
            points_transform: None,
            invert_points_transform: false,
            sfm_depths: false,
            keep_fisheye: false,
        }
    }
}

/// Progress events for a front end.
#[derive(Clone, Debug)]
pub enum Event<'a> {
    /// The importer finished reading metadata.
    Imported {
        views: usize,
        clouds: usize,
        missing: usize,
    },
    /// A warning to show the user once.
    Warning(&'a str),
    /// `done` of `total` views have been written.
    Views { done: usize, total: usize },
    /// A point cloud finished streaming.
    Cloud { name: &'a str, points: u64 },
}

/// What `convert` did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConvertReport {
    pub views: usize,
    pub train_views: usize,
    pub test_views: usize,
    pub points: u64,
    pub missing_images: usize,
    pub bytes_on_disk: u64,
    pub decoded_bytes: u64,
    pub wall_s: f64,
    pub views_per_s: f64,
    /// Decoded megabytes (10^6) of views written per second.
    pub decoded_mb_per_s: f64,
    /// How many of the points training starts from the views see ([`points_in_view`]);
    /// `None` without views or points.
    pub points_in_view: Option<PointsInView>,
    /// How `--codec jpeg` stored the views; `None` under other codecs.
    pub jpeg: Option<JpegReport>,
    /// What `--sfm-depths` packed; `None` without it.
    pub sfm_depths: Option<SfmDepthReport>,
}

/// What `--sfm-depths` packed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SfmDepthReport {
    /// Views that got a sparse plane (the others keep no point: no plane).
    pub views: usize,
    /// Pixels holding a point, over all the planes.
    pub point_pixels: u64,
    /// Observations of the packed views in the model's tracks (each point once per view).
    pub observations: u64,
}

impl SfmDepthReport {
    /// What `gs-pack convert` says of it.
    pub fn describe(&self, views: usize) -> String {
        format!(
            "sparse SfM depths: {} of {views} views carry a plane, {} point pixels in all \
             (from {} observations)",
            self.views, self.point_pixels, self.observations
        )
    }
}

/// How `--codec jpeg` stored a convert's views.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JpegReport {
    /// Views whose source JPEG's compressed data was kept (no loss).
    pub kept: usize,
    /// Views encoded at `quality` (undistorted, resized, rotated, or not from a JPEG).
    pub encoded: usize,
    /// Views that could not keep their source JPEG, stored with zstd (`--lossless`).
    pub zstd: usize,
    /// Views with transparency, stored as PNG.
    pub png: usize,
    pub quality: u8,
}

impl JpegReport {
    /// Counts `view` as stored.
    fn count(&mut self, view: &EncodedView) {
        match (view.codec, view.jpeg) {
            (Codec::Jpeg, Some(j)) if j.quality.is_none() => self.kept += 1,
            (Codec::Jpeg, _) => self.encoded += 1,
            (Codec::Zstd, _) => self.zstd += 1,
            _ => self.png += 1,
        }
    }

    /// What `gs-pack convert` says of it.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("{} kept as their source JPEG", self.kept)];
        if self.encoded > 0 {
            parts.push(format!(
                "{} encoded at quality {} (undistorted, resized, rotated or not a JPEG)",
                self.encoded, self.quality
            ));
        }
        if self.zstd > 0 {
            parts.push(format!(
                "{} stored with zstd (--lossless; undistorted, resized, rotated or not a JPEG)",
                self.zstd
            ));
        }
        if self.png > 0 {
            parts.push(format!("{} with transparency stored as PNG", self.png));
        }
        parts.join(", ")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("{}: {count} of the listed images are missing (first: {first}); --strict refuses such datasets", path.display())]
    MissingImages {
        path: std::path::PathBuf,
        count: usize,
        first: String,
    },
    #[error(
        "-o {} {relation} the input dataset {}; a pack must not be written over or inside its \
         source: choose an -o outside the dataset",
        output.display(),
        input.display()
    )]
    Overlap {
        input: std::path::PathBuf,
        output: std::path::PathBuf,
        relation: &'static str,
    },
    #[error(
        "with --test-every {test_every} {} a test view, leaving none to train on: pass \
         --test-every 0 (no test views) or a larger N",
        if *views == 1 { "the dataset's only view is".to_owned() } else { format!("all {views} views are") }
    )]
    NoTrainViews { views: usize, test_every: u32 },
    #[error(
        "{}: {} taken from one camera position (scene extent 0), so there is no parallax to \
         reconstruct from; 3D Gaussian Splatting needs views from at least two positions: add \
         views, or check the dataset's camera poses",
        path.display(),
        if *views == 1 { "the dataset's only view was".to_owned() } else { format!("all {views} views were") }
    )]
    OneViewpoint {
        path: std::path::PathBuf,
        views: usize,
    },
    #[error("a worker thread panicked while preparing view {index}; this is a bug in ramsplat, please report it")]
    WorkerPanic { index: usize },
    #[error(
        "--sfm-depths and --depths both give the views an inverse-depth plane, and a pack holds \
         one kind: drop --depths to supervise depth at the SfM points (gsplat's --depth_loss), \
         or drop --sfm-depths to pack the monocular maps (3DGS's -d)"
    )]
    SfmDepthsWithDepths,
    #[error(
        "{}: --sfm-depths needs a COLMAP model, an OpenSfM reconstruction, a Meshroom SfMData \
         file or a Bundler file, whose tracks say which images observe each point; this is {what}, which has no \
         tracks: drop --sfm-depths (or convert the reconstruction in one of those formats)",
        path.display()
    )]
    SfmDepthsNotColmap { path: PathBuf, what: &'static str },
}

/// Refuses an output that is the input, lies inside it, or contains it: `--force` must never be
/// able to replace the source dataset, and a pack inside its own source would be re-imported.
fn check_no_overlap(input: &Path, output: &Path) -> Result<(), PackError> {
    use crate::fsutil::placement;
    let Some(relation) =
        placement(output, input).or_else(|| placement(input, output).map(|_| "contains"))
    else {
        return Ok(());
    };
    Err(PackError::Overlap {
        input: input.to_owned(),
        output: output.to_owned(),
        relation,
    })
}

/// Converts the dataset at `input` into a pack at `output`.
pub fn convert(
    input: &Path,
    output: &Path,
    opts: &ConvertOptions,
    on_event: &(dyn Fn(Event<'_>) + Sync),
) -> Result<ConvertReport, PackError> {
    let started = Instant::now();
    let transform = match &opts.points_transform {
        Some(file) => {
            let t = PointsTransform::from_file(file)?;
            Some(if opts.invert_points_transform {
                t.inverse()
            } else {
                t
            })
        }
        None => None,
    };
    let import_opts = ImportOptions {
        strict: opts.strict,
        metadata_only: false,
        images: opts.images.clone(),
        depths: opts.depths.clone(),
        // A dataset's own points are in its cameras' frame: only a cloud that is the input
        // itself is moved by the transform here (checked below).
        points_transform: transform.clone().filter(|_| opts.points.is_none()),
        keep_fisheye: opts.keep_fisheye,
    };
    if opts.sfm_depths && opts.depths.is_some() {
        return Err(PackError::SfmDepthsWithDepths);
    }
    let mut scene = import::open(input, opts.format, &import_opts)?;
    let sfm = if opts.sfm_depths {
        Some(match scene.format {
            Format::Colmap => import::colmap::read_observations(input, &import_opts, &scene.views)?,
            Format::Opensfm => {
                import::opensfm::read_observations(input, &import_opts, &scene.views)?
            }
            Format::Bundler => {
                import::bundler::read_observations(input, &import_opts, &scene.views)?
            }
            Format::Meshroom => {
                import::meshroom::read_observations(input, &import_opts, &scene.views)?
            }
            other => {
                return Err(PackError::SfmDepthsNotColmap {
                    path: input.to_owned(),
                    what: match other {
                        Format::Nerf => "a transforms.json (NeRF) dataset",
                        Format::Metashape => "a Metashape camera XML",
                        Format::Realitycapture => "a RealityCapture XMP export",
                        _ => "a point cloud",
                    },
                })
            }
        })
    } else {
        None
    };
    if let Some(points) = &opts.points {
        let cloud_opts = ImportOptions {
            points_transform: transform.clone(),
            ..import_opts.clone()
        };
        let cloud = scene.replace_points(points, &cloud_opts)?;
        check_no_overlap(&cloud, output)?;
    } else if transform.is_some() && !scene.views.is_empty() {
        return Err(ImportError::invalid(
            input,
            "--points-transform moves the --points cloud (or a point cloud being converted), \
             but this dataset's own points are already in its cameras' frame; give --points \
             FILE, or drop --points-transform",
        )
        .into());
    }
    if let (Some(t), Some(file)) = (&transform, &opts.points_transform) {
        scene.warnings.push(format!(
            "--points-transform {}{}: the points are moved by {}",
            file.display(),
            if opts.invert_points_transform {
                " (inverted)"
            } else {
                ""
            },
            t.describe()
        ));
    }
    check_no_overlap(input, output)?;
    if let Some(images) = &opts.images {
        // An images folder outside the workspace is source data too.
        check_no_overlap(&scene.root.join(images), output)?;
    }
    if let Some(depths) = &opts.depths {
        check_no_overlap(&scene.root.join(depths), output)?;
    }
    on_event(Event::Imported {
        views: scene.views.len(),
        clouds: scene.clouds.len(),
        missing: scene.missing_images.len(),
    });
    for w in scene.warnings.iter().chain(&scene.random_start_note) {
        on_event(Event::Warning(w));
    }
    if opts.strict && !scene.missing_images.is_empty() {
        return Err(PackError::MissingImages {
            path: input.to_owned(),
            count: scene.missing_images.len(),
            first: scene.missing_images[0].clone(),
        });
    }
    let resize = opts.resize.unwrap_or(Resize::MaxWidth(DEFAULT_MAX_WIDTH));
    if opts.resize.is_none() {
        let wide = scene
            .views
            .iter()
            .filter(|v| v.camera.width > DEFAULT_MAX_WIDTH)
            .count();
        if wide > 0 {
            let msg = format!(
                "{wide} views are wider than {DEFAULT_MAX_WIDTH} px and are scaled down to {DEFAULT_MAX_WIDTH} px \
                 wide (the 3DGS default); pass --max-width or --downscale to choose"
            );
            on_event(Event::Warning(&msg));
        }
    }
    let splits: Vec<Split> = scene
        .views
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.split.unwrap_or(
                if opts.test_every > 0 && i % opts.test_every as usize == 0 {
                    Split::Test
                } else {
                    Split::Train
                },
            )
        })
        .collect();
    if !splits.is_empty() && splits.iter().all(|&s| s == Split::Test) {
        return Err(PackError::NoTrainViews {
            views: splits.len(),
            test_every: opts.test_every,
        });
    }

    if let Some(first) = scene.views.first() {
        let c0 = first.camera.centre();
        if scene.views.iter().all(|v| v.camera.centre() == c0) {
            return Err(PackError::OneViewpoint {
                path: input.to_owned(),
                views: scene.views.len(),
            });
        }
    }

    let writer_opts = WriterOptions {
        shard_size: opts.shard_size,
        codec: opts.codec,
        jpeg_quality: opts.jpeg_quality,
        lossless: opts.lossless,
        force: opts.force,
        ..Default::default()
    };
    let mut jpeg_report = (opts.codec == Codec::Jpeg).then_some(JpegReport {
        quality: opts.jpeg_quality,
        ..Default::default()
    });
    let mut writer = PackWriter::create(output, &writer_opts)?;
    let total = scene.views.len();
    let views = &scene.views;
    let workers = opts.workers.clamp(1, 64).min(total.max(1));
    // Two encoded views per worker may wait for their turn: enough to keep every worker busy
    // when view costs vary, small enough that memory stays a few images per worker.
    let window = 2 * workers;
    let next = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    let written = Mutex::new(0usize);
    let turn = Condvar::new();
    // The view and a warning to show.
    type Prepared = (EncodedView, Option<String>);
    let mut sfm_report = sfm.as_ref().map(|o| SfmDepthReport {
        observations: o.observations(),
        ..Default::default()
    });
    let sfm = sfm.as_ref();
    let (tx, rx) = crossbeam_channel::bounded::<(usize, Result<Prepared, PackError>)>(window);
    let mut decoded_view_bytes = 0u64;

    std::thread::scope(|s| -> Result<(), PackError> {
        for _ in 0..workers {
            let tx = tx.clone();
            let (next, abort, written, turn) = (&next, &abort, &written, &turn);
            let (splits, writer_opts) = (&splits, &writer_opts);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= total || abort.load(Ordering::SeqCst) {
                    break;
                }
                {
                    let mut w = written.lock().unwrap_or_else(|e| e.into_inner());
                    while i >= *w + window && !abort.load(Ordering::SeqCst) {
                        w = turn.wait(w).unwrap_or_else(|e| e.into_inner());
                    }
                }
                if abort.load(Ordering::SeqCst) {
                    break;
                }
                let v = &views[i];
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut p = prepare_view_pixels(v, resize, opts.lenient)?;
                    // Projected through the packed camera: undistorted, cropped and resized.
                    if let Some(plane) = sfm.and_then(|o| sparse_plane(&p.camera, o.points_of(i))) {
                        p.pixels.extend_from_slice(&plane.bytes);
                        p.layout.depth = true;
                        p.depth = Some(plane.scale);
                    }
                    let warning = p.warning;
                    // A source JPEG may be kept as stored (the writer checks that it decodes
                    // to exactly these pixels); one packed as --lenient filled it never is.
                    let source = (opts.codec == Codec::Jpeg && warning.is_none())
                        .then(|| crate::fsutil::read_file(&v.image_path).ok())
                        .flatten()
                        .filter(|b| b.starts_with(&[0xFF, 0xD8]));
                    let encoded = encode_view_as(
                        &v.name,
                        &p.camera,
                        splits[i],
                        &p.pixels,
                        p.layout,
                        p.depth,
                        writer_opts,
                        source.as_deref(),
                    )?;
                    Ok::<_, PackError>((encoded, warning))
                }))
                .unwrap_or(Err(PackError::WorkerPanic { index: i }));
                if tx.send((i, result)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut pending = BTreeMap::new();
        let mut done = 0usize;
        let mut outcome = Ok(());
        for (i, r) in rx.iter() {
            if outcome.is_err() {
                continue; // drain so workers blocked on send can exit
            }
            pending.insert(i, r);
            while let Some(r) = pending.remove(&done) {
                match r.and_then(|(v, warning)| {
                    if let Some(w) = warning {
                        on_event(Event::Warning(&w));
                    }
                    // The writer counted the plane's points (only --sfm-depths makes planes
                    // then: it refuses --depths).
                    if let (Some(report), Some(n)) = (sfm_report.as_mut(), v.depth_pixels) {
                        report.views += 1;
                        report.point_pixels += n;
                    }
                    decoded_view_bytes += v.decoded_len;
                    if let Some(report) = jpeg_report.as_mut() {
                        report.count(&v);
                    }
                    writer.add_encoded_view(v).map_err(PackError::from)
                }) {
                    Ok(()) => {
                        done += 1;
                        *written.lock().unwrap_or_else(|e| e.into_inner()) = done;
                        turn.notify_all();
                        on_event(Event::Views { done, total });
                    }
                    Err(e) => {
                        abort.store(true, Ordering::SeqCst);
                        turn.notify_all();
                        outcome = Err(e);
                        break;
                    }
                }
            }
        }
        outcome
    })?;

    if sfm_report.is_some_and(|r| r.views == 0) {
        on_event(Event::Warning(
            "--sfm-depths: no view keeps any SfM point (none projects into its image in front \
             of its camera), so no view has a depth plane and gs-train has no depth to \
             supervise; check that the model's points and tracks belong to these images",
        ));
    }
    let mut points = 0u64;
    for cloud in scene.clouds.iter_mut() {
        let entry = writer.add_cloud(cloud.as_mut()).map_err(|e| match e {
            CloudError::Write(e) => PackError::Write(e),
            CloudError::Source(e) => PackError::Import(e),
        })?;
        points += entry.points;
        on_event(Event::Cloud {
            name: &entry.name,
            points: entry.points,
        });
    }
    let (max_width, downscale) = match resize {
        Resize::None => (None, None),
        Resize::MaxWidth(w) => (Some(w), None),
        Resize::Downscale(n) => (None, Some(n)),
    };
    let manifest: Manifest = writer.finish(SourceInfo {
        // Absolute, so the record (and `gs-train`'s cfg_args) names the dataset from anywhere.
        path: std::fs::canonicalize(input)
            .unwrap_or_else(|_| input.to_owned())
            .display()
            .to_string(),
        format: scene.format,
        missing_images: std::mem::take(&mut scene.missing_images),
        max_width,
        downscale,
        test_every: Some(opts.test_every),
        images: opts.images.as_ref().map(|d| d.display().to_string()),
        depths: opts.depths.as_ref().map(|d| d.display().to_string()),
        sfm_depths: sfm.is_some(),
        points: opts.points.as_ref().map(|p| p.display().to_string()),
        points_transform: transform.as_ref().map(PointsTransform::rows),
    })?;
    let wall_s = started.elapsed().as_secs_f64();
    // Read back from the sealed pack: the cameras as packed (undistorted, cropped, resized).
    let in_view = crate::shard::reader::Pack::open(output)
        .and_then(|pack| points_in_view(&pack))
        .map_err(WriteError::Shard)?;
    if let Some(w) = in_view.and_then(|v| {
        let what = match &opts.points {
            Some(p) => format!("the points of --points {}", p.display()),
            None => "the dataset's points".to_owned(),
        };
        v.warning(&what, manifest.sfm_clouds().1)
    }) {
        on_event(Event::Warning(&w));
    }
    let test_views = manifest.split_indices(Split::Test).len();
    Ok(ConvertReport {
        views: manifest.views.len(),
        train_views: manifest.views.len() - test_views,
        test_views,
        points,
        missing_images: manifest.source.missing_images.len(),
        bytes_on_disk: manifest.bytes_on_disk(),
        decoded_bytes: manifest.decoded_bytes(),
        wall_s,
        views_per_s: manifest.views.len() as f64 / wall_s.max(1e-9),
        decoded_mb_per_s: decoded_view_bytes as f64 / 1e6 / wall_s.max(1e-9),
        points_in_view: in_view,
        jpeg: jpeg_report,
        sfm_depths: sfm_report,
    })
}

/// Distance from the cameras' centroid, in scene extents, beyond which [`points_in_view`]
/// counts a point as unseen: a scene reaches some way past its cameras, not a hundredfold,
/// while a cloud in other units or coordinates lies far beyond.
pub const NEAR_EXTENTS: f64 = 100.0;

/// Points [`points_in_view`] tests at most: enough to give the fraction to about a percent,
/// few enough that `gs-pack info` stays instant on a cloud of millions.
pub const IN_VIEW_SAMPLE: u64 = 10_000;

/// Point chunks [`points_in_view`] reads at most, spread over the cloud.
const IN_VIEW_CHUNKS: usize = 16;

/// How many of a pack's initial points its views see: a sample of the points training starts
/// from ([`Manifest::sfm_clouds`]), and how many of them lie within [`NEAR_EXTENTS`] scene
/// extents of the cameras' centroid, in front of at least one view (beyond the rasterizer's
/// near plane) and inside its image. A dataset's SfM points are seen by construction (each
/// was triangulated from the photos); a cloud mostly outside every view is in another
/// coordinate frame (behind the cameras, in other units, or georeferenced: offset by
/// kilometres, which the distance limit catches where the offset happens to lie along a
/// view), or mostly out of the photos' reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PointsInView {
    /// Points tested (every k-th point of up to 16 chunks spread over the cloud).
    pub sampled: u64,
    /// Of those, the points some view sees.
    pub seen: u64,
}

impl PointsInView {
    /// Below this fraction `gs-pack convert` warns: most of the points would start Gaussians
    /// no training view can correct.
    pub const WARN_BELOW: f64 = 0.5;

    pub fn fraction(&self) -> f64 {
        self.seen as f64 / self.sampled.max(1) as f64
    }

    /// The warning `gs-pack convert` gives when too few points are seen, naming where the
    /// points came from (`what`); `None` when enough are.
    pub fn warning(&self, what: &str, total: u64) -> Option<String> {
        if self.fraction() >= Self::WARN_BELOW {
            return None;
        }
        let share = if self.seen == 0 {
            "none".to_owned()
        } else {
            format!("only {:.1} %", 100.0 * self.fraction())
        };
        Some(format!(
            "{share} of {what} (a sample of {} of its {total} points) lie in front of a view, \
             inside its image and near the cameras: training starts Gaussians there that no \
             view sees. Is the cloud in the cameras' coordinate frame? (COLMAP's \
             dense/fused.ply is; export Metashape's points from the cameras' chunk in its local \
             coordinates; register a laser scan to the cameras first)",
            self.sampled
        ))
    }
}

/// Whether `p` lies in front of `camera` (beyond the rasterizer's near plane) and projects
/// inside its image, by the camera's projection ([`Camera::project_camera_point`]).
///
/// [`Camera::project_camera_point`]: crate::scene::camera::Camera::project_camera_point
fn sees(camera: &crate::scene::camera::Camera, p: [f64; 3]) -> bool {
    let t = camera.world_to_camera.transform(p);
    if t[2] <= crate::render::cpu::project::NEAR_PLANE {
        return false;
    }
    camera.project_camera_point(t).is_some_and(|[u, v]| {
        (0.0..camera.width as f64).contains(&u) && (0.0..camera.height as f64).contains(&v)
    })
}

/// [`PointsInView`] of `pack` (see there); `None` for a pack without views or without points.
/// Reads at most 16 point chunks (65,536 points each at most), so it is cheap on any pack.
pub fn points_in_view(
    pack: &crate::shard::reader::Pack,
) -> Result<Option<PointsInView>, crate::shard::ShardError> {
    let m = pack.manifest();
    let (clouds, total) = m.sfm_clouds();
    if m.views.is_empty() || m.scene.no_sfm_points || total == 0 {
        return Ok(None);
    }
    let chunks: Vec<(usize, usize)> = clouds
        .iter()
        .flat_map(|&c| (0..m.clouds[c].chunks.len()).map(move |k| (c, k)))
        .collect();
    let picked: Vec<(usize, usize)> = if chunks.len() <= IN_VIEW_CHUNKS {
        chunks
    } else {
        (0..IN_VIEW_CHUNKS)
            .map(|i| chunks[i * chunks.len() / IN_VIEW_CHUNKS])
            .collect()
    };
    let in_picked: u64 = picked
        .iter()
        .map(|&(c, k)| u64::from(m.clouds[c].chunks[k].points))
        .sum();
    let stride = in_picked.div_ceil(IN_VIEW_SAMPLE).max(1);
    let cameras: Vec<&crate::scene::camera::Camera> = m.views.iter().map(|v| &v.camera).collect();
    // A pack written without cameras apart (extent 0) has no scale to judge distance by.
    let near = |p: [f64; 3]| {
        let c = m.scene.camera_centroid;
        let d = [0, 1, 2].map(|k| p[k] - c[k]);
        m.scene.extent == 0.0
            || (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt() <= NEAR_EXTENTS * m.scene.extent
    };
    let (mut sampled, mut seen, mut index) = (0u64, 0u64, 0u64);
    let mut buf = Vec::new();
    for (c, k) in picked {
        let cloud = &m.clouds[c];
        let layout = crate::shard::PointChunkLayout::new(
            cloud.chunks[k].points as usize,
            cloud.has_labels,
            cloud.has_normals,
        );
        buf.resize(layout.total, 0u8);
        pack.read_chunk_into(c, k, &mut buf)?;
        let chunk = crate::shard::PointChunkRef::new(layout, &buf).expect("sized above");
        for i in 0..chunk.len() {
            if index % stride == 0 {
                let p = chunk.xyz(i).map(f64::from);
                sampled += 1;
                seen += u64::from(near(p) && cameras.iter().any(|cam| sees(cam, p)));
            }
            index += 1;
        }
    }
    Ok(Some(PointsInView { sampled, seen }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::camera::Pose;
    use crate::synth::packs::{centred_camera, write_tiny_pack};

    #[test]
    fn a_point_is_seen_in_front_of_a_view_and_inside_its_image() {
        // At the origin looking down +z, 8×6 pixels, fx = 8: the image spans x/z in
        // [−0.5, 0.5), y/z in [−0.375, 0.375).
        let cam = centred_camera(8, 6, Pose::IDENTITY);
        let near = crate::render::cpu::project::NEAR_PLANE;
        assert!(sees(&cam, [0.0, 0.0, 5.0]));
        assert!(sees(&cam, [-2.5, -1.875, 5.0]), "the first pixel's corner");
        assert!(!sees(&cam, [2.5, 0.0, 5.0]), "the right edge is outside");
        assert!(!sees(&cam, [0.0, 1.875, 5.0]), "the bottom edge is outside");
        assert!(!sees(&cam, [0.0, 0.0, -5.0]), "behind");
        assert!(!sees(&cam, [0.0, 0.0, near]), "on the near plane");
        assert!(
            sees(&cam, [0.0, 0.0, 1e9]),
            "any depth: distance is judged apart"
        );
    }

    #[test]
    fn a_fisheye_view_sees_by_its_own_projection() {
        // The same 8×6 view as a fisheye: fx = 8 puts the right edge 4 px = 0.5 rad (28.6°)
        // off the axis, against the pinhole's atan(0.5) = 26.6°.
        let pin = centred_camera(8, 6, Pose::IDENTITY);
        let fish = crate::scene::camera::Camera {
            projection: crate::scene::camera::Projection::Fisheye,
            ..pin
        };
        let at = |deg: f64| [5.0 * deg.to_radians().tan(), 0.0, 5.0];
        assert!(sees(&pin, at(26.0)) && sees(&fish, at(26.0)));
        assert!(!sees(&pin, at(27.5)) && sees(&fish, at(27.5)));
        assert!(!sees(&pin, at(29.0)) && !sees(&fish, at(29.0)));
        assert!(!sees(&fish, [0.0, 0.0, -5.0]), "behind");
    }

    #[test]
    fn points_in_view_counts_the_points_some_view_sees() {
        // The tiny pack: views at x = 0 and x = 1 (world-to-camera translations), 3 units
        // from the plane of the points (i, 0.5, −1); only point 0 projects inside view 0.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("tiny.pack");
        write_tiny_pack(&dir).unwrap();
        let pack = crate::shard::reader::Pack::open(&dir).unwrap();
        let v = points_in_view(&pack).unwrap().unwrap();
        assert_eq!(
            v,
            PointsInView {
                sampled: 100,
                seen: 1
            }
        );
        assert_eq!(v.fraction(), 0.01);
        let w = v.warning("the dataset's points", 100).unwrap();
        assert!(w.starts_with("only 1.0 % of the dataset's points (a sample of 100 of its 100"));
        assert_eq!(
            PointsInView {
                sampled: 10,
                seen: 5
            }
            .warning("x", 10),
            None
        );
        assert!(PointsInView {
            sampled: 10,
            seen: 0
        }
        .warning("x", 10)
        .unwrap()
        .starts_with("none of x"));
    }

    #[test]
    fn points_in_view_samples_every_kth_point_of_16_chunks_spread_over_the_cloud() {
        use crate::dataset::{MemPoints, PointChunk, Split};
        use crate::shard::writer::{PackWriter, WriterOptions};
        use crate::shard::{SourceInfo, POINTS_PER_CHUNK};
        // Two views 3 units behind the origin, one unit apart (extent 0.55); a cloud of 17
        // chunks, the even ones at the origin (seen), the odd ones 1,000 units away along the
        // views' axis (in view, far beyond the cameras): half of every sample is seen.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        let mut w = PackWriter::create(&dir, &WriterOptions::default()).unwrap();
        for i in 0..2u32 {
            let pose = Pose {
                translation: [i as f64, 0.0, 3.0],
                ..Pose::IDENTITY
            };
            w.add_view(
                &format!("v{i}"),
                &centred_camera(8, 6, pose),
                Split::Train,
                &[0; 144],
            )
            .unwrap();
        }
        let chunks: Vec<PointChunk> = (0..17)
            .map(|k| PointChunk {
                xyz: vec![[0.0, 0.0, if k % 2 == 0 { 0.0 } else { 1000.0 }]; POINTS_PER_CHUNK],
                rgb: vec![[9; 3]; POINTS_PER_CHUNK],
                labels: None,
                normals: None,
            })
            .collect();
        w.add_cloud(&mut MemPoints::new("sfm", chunks)).unwrap();
        w.finish(SourceInfo::generated("test")).unwrap();
        let pack = crate::shard::reader::Pack::open(&dir).unwrap();
        assert_eq!(pack.manifest().clouds[0].chunks.len(), 17);
        let v = points_in_view(&pack).unwrap().unwrap();
        // 16 of the 17 chunks (0..=15), every 105th point of them.
        let read = 16 * POINTS_PER_CHUNK as u64;
        let stride = read.div_ceil(IN_VIEW_SAMPLE);
        assert_eq!(stride, 105);
        assert_eq!(v.sampled, read.div_ceil(stride));
        assert!(v.sampled <= IN_VIEW_SAMPLE);
        let seen = (0..read)
            .step_by(stride as usize)
            .filter(|i| (i / POINTS_PER_CHUNK as u64).is_multiple_of(2))
            .count() as u64;
        assert_eq!(v.seen, seen);
        assert!((v.fraction() - 0.5).abs() < 0.01, "{v:?}");
    }
}
