//! `gs-pack export`: a pack as a folder other trainers read, so that they (the original 3DGS,
//! gsplat, nerfstudio's splatfacto) train on exactly the data ramsplat trains on, and the
//! importers read it back. Two metadata layouts ([`Layout`]) share the views, masks and depth
//! maps: nerfstudio's `transforms.json` (below; read back by `crate::import::nerf`) and a COLMAP
//! sparse model ([`super::colmap`]; read back by `crate::import::colmap`).
//!
//! # What the folder holds (nerfstudio layout)
//! - `images/<file>.png`: every view's pixels exactly as packed (undistorted, resized; RGB8, or
//!   RGBA8 for views packed with alpha), lossless;
//! - `masks/<file>.png`: the loss mask of views packed with one, 8-bit grey, 0 = excluded and
//!   255 = used (the pack's own values);
//! - `depths/<file>.png`: the inverse-depth plane of views packed with one, 16-bit grey, the
//!   pack's stored values exactly, and `depth_params.json` beside `transforms.json` with each
//!   such view's `{"scale": s, "offset": o}` keyed by `<file>` (3DGS's format), so that
//!   `gs-pack convert FOLDER --depths depths` packs the same planes and scales. A view packed
//!   without depth has neither a map nor an entry, which the importer reads as "no depth"
//!   (`crate::import::nerf`). The sparse planes of a pack converted with `--sfm-depths` are
//!   not written (they are no monocular depth maps); the report counts
//!   them ([`ExportReport::sfm_depth_views_skipped`]);
//! - `transforms.json`: `camera_model: "PINHOLE"`; per frame `file_path`, `w`, `h`, `fl_x`,
//!   `fl_y`, `cx`, `cy` (the pack's ideal intrinsics: no distortion is left to undo),
//!   `transform_matrix` (camera-to-world, OpenGL axes: x right, y up, z back) and `mask_path`
//!   where a mask exists; at the top level nerfstudio's split lists `train_filenames` and
//!   `test_filenames`, and `ply_file_path` when points are written. A fisheye view (packed
//!   with `gs-pack convert --keep-fisheye`: the ideal equidistant fisheye) is nerfstudio's
//!   `OPENCV_FISHEYE` with `k1 k2 k3 k4` = 0 in its frame; `camera_model` is then
//!   `"OPENCV_FISHEYE"` at the top level when every view is a fisheye, else `"PINHOLE"` at the
//!   top level and `"OPENCV_FISHEYE"` in each fisheye view's frame (the importer reads a
//!   frame's keys over the top level's; nerfstudio's own reader takes the top level's only);
//! - `sparse_pc.ply`: binary little-endian, `x y z` float and `red green blue` uchar: the
//!   pack's SfM points (the clouds the trainer initialises from). A pack without SfM points
//!   gets none, unless [`ExportOptions::random_points`] asks for the random points `gs-train`
//!   starts from with that seed (so another trainer can start from the very same points).
//!   `ramsplat_points` in `transforms.json` says which.
//!
//! # Centring the principal point (`--centre-principal-point`)
//! The original 3DGS reads only a camera's focal lengths and renders as if its principal point
//! were the image's centre, so a view whose `cx, cy` lie off centre trains against photos
//! shifted by the offset. [`ExportOptions::centre_principal_point`] crops each view (pixels,
//! mask, depth plane alike) to the largest window whose centre is the half pixel nearest its
//! principal point ([`Crop::centring`]): whole pixels only, nothing resampled, so the crop is
//! lossless and the written `cx, cy` are the pack's minus the window's corner, within 0.25 px of
//! the new centre. The pixels outside the window are not exported.
//!
//! # File names
//! A view's name comes from its dataset (`images/0001.jpg`, `./train/r_0`) and may hold any
//! character, `/` and `..` included. Its file name is the name without a leading `./` or
//! `images/`, with a trailing image extension dropped, every character outside
//! `[A-Za-z0-9._-]` replaced by `_` and leading dots removed (so no name climbs out of the
//! folder or hides), then `.png`; names that collide after this
//! (compared case-insensitively, for case-insensitive file systems) get `-2`, `-3`, … in pack
//! order, which is name order, so the same pack always gives the same names.
//!
//! # Invariants
//! - Nothing exists at the destination until the folder is complete and on disk (every file
//!   and directory fsynced): it is built in a hidden `.NAME.partial-PID` directory beside it
//!   and renamed into place, never over anything (an
//!   existing destination is refused, also one that appears during the export). A failure
//!   removes the partial directory; one left by a killed export is removed by the next export
//!   into the same destination once its process is gone.
//! - Every record is checked against its checksums as it is read, so a damaged pack fails the
//!   export naming the view or point chunk.
//! - Memory: views are exported in parallel, each worker holding one decoded view and its PNG
//!   (about 2 × width × height × 5 bytes at most); points stream through one chunk at a time,
//!   except the random points, which exist only as the 100k-point initial model.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::{json, Value};

use crate::dataset::Split;
use crate::export::ply::{write_point_row, write_points_header};
use crate::import::colmap::ColmapPoint;
use crate::scene::camera::{Camera, Intrinsics, Projection};
use crate::scene::maths::sh_dc_to_rgb;
use crate::shard::reader::Pack;
use crate::shard::{PointChunkLayout, PointChunkRef, ShardError};

/// nerfstudio's `camera_model` of OpenCV's fisheye model, written with `k1..k4 = 0` for a
/// fisheye view (the ideal equidistant fisheye).
const FISHEYE_MODEL: &str = "OPENCV_FISHEYE";

/// The folder's metadata layout (its `images/`, `masks/` and `depths/` are the same).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// `transforms.json` and `sparse_pc.ply` (see the module doc).
    #[default]
    Nerfstudio,
    /// A COLMAP sparse model in `sparse/0/` (see [`super::colmap`]).
    Colmap,
}

/// What to export besides the views.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportOptions {
    /// For a pack without SfM points: write the random initial points `gs-train --seed SEED`
    /// starts from, as the folder's points.
    pub random_points: Option<u64>,
    pub layout: Layout,
    /// Crop every view so that its principal point is (within 0.25 px) its image's centre;
    /// see the module doc.
    pub centre_principal_point: bool,
}

/// A window of a view's image: columns `x0 .. x0 + width`, rows `y0 .. y0 + height`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crop {
    pub x0: u32,
    pub y0: u32,
    pub width: u32,
    pub height: u32,
}

impl Crop {
    /// The largest window of `camera`'s image centred on the half pixel nearest its principal
    /// point (pixel centres at +0.5, so `cx = width / 2` is centred and needs no crop), or
    /// `None` when that window is empty: a principal point within a quarter pixel of the
    /// image's border, outside it, or not finite.
    pub fn centring(camera: &Camera) -> Option<Crop> {
        // Along one axis of n pixels: the window [a, b) with a + b = round(2c) (its centre
        // within 0.25 px of c), as wide as fits in [0, n].
        let axis = |c: f64, n: u32| -> Option<(u32, u32)> {
            let twice = (2.0 * c).round();
            if !(twice > 0.0 && twice < 2.0 * n as f64) {
                return None;
            }
            // In (0, 2n), so exact as an integer.
            let (twice, n) = (twice as i64, i64::from(n));
            let a = (twice - n).max(0);
            let b = twice - a;
            // a < b because 0 < twice < 2n; both lie in [0, n].
            Some((a as u32, (b - a) as u32))
        };
        let k = camera.intrinsics;
        let (x0, width) = axis(k.cx, camera.width)?;
        let (y0, height) = axis(k.cy, camera.height)?;
        Some(Crop {
            x0,
            y0,
            width,
            height,
        })
    }

    /// `camera` seeing only this window: the same focal lengths and pose, the principal point
    /// moved by the window's corner.
    pub fn camera(&self, camera: &Camera) -> Camera {
        let k = camera.intrinsics;
        Camera {
            width: self.width,
            height: self.height,
            intrinsics: Intrinsics {
                cx: k.cx - f64::from(self.x0),
                cy: k.cy - f64::from(self.y0),
                ..k
            },
            ..*camera
        }
    }

    /// The window's rows of a row-major plane `stride` pixels wide of `bytes_per_pixel`-byte
    /// pixels.
    fn plane(&self, plane: &[u8], stride: u32, bytes_per_pixel: usize) -> Vec<u8> {
        let row = stride as usize * bytes_per_pixel;
        let (from, len) = (
            self.x0 as usize * bytes_per_pixel,
            self.width as usize * bytes_per_pixel,
        );
        plane
            .chunks_exact(row)
            .skip(self.y0 as usize)
            .take(self.height as usize)
            .flat_map(|r| &r[from..from + len])
            .copied()
            .collect()
    }
}

/// Where `sparse_pc.ply`'s points came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointsSource {
    /// No points were written.
    None,
    /// The pack's SfM points.
    Sfm,
    /// `gs-train`'s random initial points for this seed.
    Random(u64),
}

/// What an export wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportReport {
    pub layout: Layout,
    /// With [`Layout::Colmap`]: cameras written and whether the readers' default split matches.
    pub colmap: Option<super::colmap::ColmapReport>,
    pub views: usize,
    pub train_views: usize,
    pub test_views: usize,
    pub masked_views: usize,
    pub alpha_views: usize,
    /// Views whose depth map was written (0 for a pack of sparse SfM depths).
    pub depth_views: usize,
    /// Views whose sparse SfM depth plane (`gs-pack convert --sfm-depths`) was not written:
    /// such a plane is no monocular depth map.
    pub sfm_depth_views_skipped: usize,
    pub points: u64,
    pub points_source: PointsSource,
    /// With [`ExportOptions::centre_principal_point`]: what the crops did.
    pub centring: Option<CentringReport>,
}

/// What `--centre-principal-point` did to the views.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CentringReport {
    /// Views whose window is smaller than their image (the others were centred already).
    pub cropped_views: usize,
    /// The smallest share of its pixels a view kept (1 when none was cropped).
    pub least_kept: f64,
    /// The largest distance, in pixels along either axis, of a written principal point from
    /// its image's centre (at most 0.25).
    pub max_offset_px: f64,
}

impl CentringReport {
    fn new(m: &crate::shard::Manifest, cameras: &[Camera]) -> CentringReport {
        let mut r = CentringReport {
            cropped_views: 0,
            least_kept: 1.0,
            max_offset_px: super::cameras_json::CameraEntry::max_principal_point_offset(cameras),
        };
        for (v, c) in m.views.iter().zip(cameras) {
            let area = |c: &Camera| c.width as f64 * c.height as f64;
            if (c.width, c.height) != (v.camera.width, v.camera.height) {
                r.cropped_views += 1;
                r.least_kept = r.least_kept.min(area(c) / area(&v.camera));
            }
        }
        r
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{}: already exists; export into a new folder (nothing was written)", path.display())]
    Exists { path: PathBuf },
    #[error(
        "{}: is inside the pack {}; export somewhere else (a pack is immutable)",
        path.display(),
        pack.display()
    )]
    InsidePack { path: PathBuf, pack: PathBuf },
    #[error("{}: appeared while the export ran; the export was discarded", path.display())]
    Raced { path: PathBuf },
    #[error("reading the pack {}", pack.display())]
    Read {
        pack: PathBuf,
        #[source]
        source: ShardError,
    },
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: cannot encode the PNG: {message}", path.display())]
    Png { path: PathBuf, message: String },
    #[error(
        "--random-points: the pack has SfM points, which are exported as they are; drop \
         --random-points"
    )]
    RandomWithSfm,
    #[error("building the random initial points")]
    Init(#[source] Box<crate::train::run::RunError>),
    #[error(
        "view {view:?}: its principal point ({cx}, {cy}) lies on or outside the border of its \
         {width}x{height} image, so no window of it is centred there; export without \
         --centre-principal-point (nothing was written)"
    )]
    NoCentredWindow {
        view: String,
        cx: f64,
        cy: f64,
        width: u32,
        height: u32,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The file name (without `.png`) each view gets; see the module doc.
pub fn file_stems<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut taken = std::collections::HashSet::new();
    let mut out = Vec::new();
    for name in names {
        // Every file goes to images/ anyway: a NeRF dataset's own `./images/` prefix would
        // only be repeated.
        let name = name.trim_start_matches("./");
        let name = name.strip_prefix("images/").unwrap_or(name);
        let mut base = name;
        if let Some((stem, ext)) = name.rsplit_once('.') {
            if ["png", "jpg", "jpeg"].contains(&ext.to_ascii_lowercase().as_str()) {
                base = stem;
            }
        }
        let clean: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let clean = clean.trim_start_matches('.');
        let clean = if clean.is_empty() { "view" } else { clean };
        let mut stem = clean.to_string();
        let mut k = 2;
        while !taken.insert(stem.to_ascii_lowercase()) {
            stem = format!("{clean}-{k}");
            k += 1;
        }
        out.push(stem);
    }
    out
}

/// Removes the partial directory unless the export completed.
struct Partial(Option<PathBuf>);

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_dir_all(p);
        }
    }
}

/// Exports `pack` to a new folder `dest` (see the module doc).
pub fn export(
    pack: &Pack,
    dest: &Path,
    options: &ExportOptions,
) -> Result<ExportReport, ExportError> {
    let pack_dir = pack.dir().to_owned();
    if fs::symlink_metadata(dest).is_ok() {
        return Err(ExportError::Exists {
            path: dest.to_owned(),
        });
    }
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(io(&parent))?;
    let file_name = dest.file_name().ok_or_else(|| ExportError::Io {
        path: dest.to_owned(),
        source: std::io::Error::other("the destination has no folder name"),
    })?;
    if let (Ok(p), Ok(d)) = (pack_dir.canonicalize(), parent.canonicalize()) {
        if d.starts_with(&p) {
            return Err(ExportError::InsidePack {
                path: dest.to_owned(),
                pack: pack_dir,
            });
        }
    }
    let m = pack.manifest();
    // Each view's window and the camera written for it: all checked before anything is.
    let mut crops = Vec::with_capacity(m.views.len());
    for v in &m.views {
        crops.push(match options.centre_principal_point {
            false => None,
            true => {
                Some(
                    Crop::centring(&v.camera).ok_or_else(|| ExportError::NoCentredWindow {
                        view: v.name.clone(),
                        cx: v.camera.intrinsics.cx,
                        cy: v.camera.intrinsics.cy,
                        width: v.camera.width,
                        height: v.camera.height,
                    })?,
                )
            }
        });
    }
    let cameras: Vec<Camera> = m
        .views
        .iter()
        .zip(&crops)
        .map(|(v, c)| c.map_or(v.camera, |c| c.camera(&v.camera)))
        .collect();
    let centring = options
        .centre_principal_point
        .then(|| CentringReport::new(m, &cameras));
    let (clouds, sfm_points) = m.sfm_clouds();
    let has_sfm = !m.scene.no_sfm_points && sfm_points > 0;
    if has_sfm && options.random_points.is_some() {
        return Err(ExportError::RandomWithSfm);
    }

    let tmp = parent.join(format!(
        ".{}.partial-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    crate::shard::writer::remove_stale_partials(&parent, &file_name.to_string_lossy());
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    fs::create_dir(&tmp).map_err(io(&tmp))?;
    let partial = Partial(Some(tmp.clone()));
    let images = tmp.join("images");
    fs::create_dir(&images).map_err(io(&images))?;
    let masks = tmp.join("masks");
    let any_mask = m.views.iter().any(|v| v.mask);
    if any_mask {
        fs::create_dir(&masks).map_err(io(&masks))?;
    }
    let depths = tmp.join("depths");
    if exports_depths(m) {
        fs::create_dir(&depths).map_err(io(&depths))?;
    }

    let stems = file_stems(m.views.iter().map(|v| v.name.as_str()));
    let read_err = |source| ExportError::Read {
        pack: pack_dir.clone(),
        source,
    };
    (0..m.views.len())
        .into_par_iter()
        .try_for_each(|i| -> Result<(), ExportError> {
            let v = &m.views[i];
            let (w, h) = (v.camera.width, v.camera.height);
            let layout = v.layout();
            let mut bytes = vec![0u8; layout.len(w, h)];
            pack.read_view_into(i, &mut bytes).map_err(read_err)?;
            let mut planes = layout
                .planes(&bytes, w, h)
                .expect("the buffer has the layout's length");
            let cropped;
            let (w, h) = match crops[i] {
                None => (w, h),
                Some(c) => {
                    let colour = if layout.alpha { 4 } else { 3 };
                    cropped = (
                        c.plane(planes.pixels, w, colour),
                        planes.mask.map(|p| c.plane(p, w, 1)),
                        planes.depth.map(|p| c.plane(p, w, 2)),
                    );
                    planes.pixels = &cropped.0;
                    planes.mask = cropped.1.as_deref();
                    planes.depth = cropped.2.as_deref();
                    (c.width, c.height)
                }
            };
            let (colour, mask) = (planes.pixels, planes.mask);
            let colour_type = if layout.alpha {
                image::ExtendedColorType::Rgba8
            } else {
                image::ExtendedColorType::Rgb8
            };
            write_png(
                &images.join(format!("{}.png", stems[i])),
                colour,
                w,
                h,
                colour_type,
            )?;
            // COLMAP's masks/ convention wants a mask for every image once the folder exists:
            // a view without one gets one that excludes nothing (which a re-import drops).
            let all_used;
            let mask = match mask {
                None if options.layout == Layout::Colmap && any_mask => {
                    all_used = vec![255u8; w as usize * h as usize];
                    Some(&all_used[..])
                }
                m => m,
            };
            if let Some(mask) = mask {
                write_png(
                    &masks.join(format!("{}.png", stems[i])),
                    mask,
                    w,
                    h,
                    image::ExtendedColorType::L8,
                )?;
            }
            // Likewise a depth map per image: a view without one gets an empty map (0 = no
            // depth) and, in depth_params.json, scale 0, which 3DGS and `gs-pack convert`
            // both read as an unreliable fit, so the view trains without the depth term.
            let no_depth;
            let depth = match planes.depth.filter(|_| exports_depths(m)) {
                None if options.layout == Layout::Colmap && exports_depths(m) => {
                    no_depth = vec![0u8; 2 * w as usize * h as usize];
                    Some(&no_depth[..])
                }
                d => d,
            };
            if let Some(depth) = depth {
                // The PNG encoder takes 16-bit samples in native byte order.
                let ne: Vec<u8> = depth
                    .chunks_exact(2)
                    .flat_map(|b| u16::from_le_bytes([b[0], b[1]]).to_ne_bytes())
                    .collect();
                write_png(
                    &depths.join(format!("{}.png", stems[i])),
                    &ne,
                    w,
                    h,
                    image::ExtendedColorType::L16,
                )?;
            }
            Ok(())
        })?;

    let random = match options.random_points {
        Some(seed) if !has_sfm => {
            let g = crate::train::run::initial_gaussians(pack, 0, usize::MAX, seed)
                .map_err(|e| ExportError::Init(Box::new(e)))?;
            let rgb: Vec<[u8; 3]> =
                g.sh.iter()
                    .map(|sh| {
                        std::array::from_fn(|c| {
                            (sh_dc_to_rgb(sh[c]).clamp(0.0, 1.0) * 255.0).round() as u8
                        })
                    })
                    .collect();
            Some((seed, g.means, rgb))
        }
        _ => None,
    };
    let points_source = match (&random, has_sfm) {
        (_, true) => PointsSource::Sfm,
        (Some((seed, _, _)), false) => PointsSource::Random(*seed),
        (None, false) => PointsSource::None,
    };
    if options.layout == Layout::Colmap {
        let mut sfm = SfmPoints::new(pack, if has_sfm { &clouds[..] } else { &[] });
        let mut rows = random.iter().flat_map(|(_, xyz, rgb)| xyz.iter().zip(rgb));
        let mut random_points = (1u64..).zip(&mut rows).map(|(id, (p, c))| ColmapPoint {
            id,
            xyz: p.map(f64::from),
            rgb: *c,
            error: 0.0,
        });
        let points: &mut dyn Iterator<Item = ColmapPoint> = if has_sfm {
            &mut sfm
        } else {
            &mut random_points
        };
        let report = super::colmap::write_sparse(&tmp, m, &cameras, &stems, points)?;
        if let Some(e) = sfm.error.take() {
            return Err(read_err(e));
        }
        let written = if has_sfm {
            sfm.next_id - 1
        } else {
            random.as_ref().map_or(0, |r| r.1.len() as u64)
        };
        install(&tmp, dest, &parent, partial)?;
        let mut r = export_report(m, written, points_source, Some(report));
        r.centring = centring;
        return Ok(r);
    }
    let ply = tmp.join("sparse_pc.ply");
    let points = match (&random, has_sfm) {
        (_, true) => write_sfm_points(pack, &clouds, sfm_points, &ply).map_err(|e| match e {
            PointsError::Read(source) => read_err(source),
            PointsError::Io(source) => ExportError::Io {
                path: ply.clone(),
                source,
            },
        })?,
        (Some((_, xyz, rgb)), false) => {
            write_points(&ply, xyz.len() as u64, |w| {
                for (p, c) in xyz.iter().zip(rgb) {
                    write_point_row(w, *p, *c)?;
                }
                Ok(())
            })
            .map_err(io(&ply))?;
            xyz.len() as u64
        }
        (None, false) => 0,
    };

    let mut frames = Vec::with_capacity(m.views.len());
    let (mut train, mut test) = (Vec::new(), Vec::new());
    let all_fisheye =
        !cameras.is_empty() && cameras.iter().all(|c| c.projection == Projection::Fisheye);
    for ((v, camera), stem) in m.views.iter().zip(&cameras).zip(&stems) {
        let file_path = format!("images/{stem}.png");
        let k = camera.intrinsics;
        let mut frame = json!({
            "file_path": file_path,
            "w": camera.width,
            "h": camera.height,
            "fl_x": k.fx,
            "fl_y": k.fy,
            "cx": k.cx,
            "cy": k.cy,
            "transform_matrix": camera.opengl_camera_to_world(),
        });
        if camera.projection == Projection::Fisheye {
            for k in ["k1", "k2", "k3", "k4"] {
                frame[k] = Value::from(0.0);
            }
            if !all_fisheye {
                frame["camera_model"] = Value::from(FISHEYE_MODEL);
            }
        }
        if v.mask {
            frame["mask_path"] = Value::from(format!("masks/{stem}.png"));
        }
        frames.push(frame);
        match v.split {
            Split::Train => train.push(file_path),
            Split::Test => test.push(file_path),
        }
    }
    let mut doc = json!({
        "camera_model": if all_fisheye { FISHEYE_MODEL } else { "PINHOLE" },
        "ramsplat_pack_id": m.pack_id,
        "train_filenames": train,
        "test_filenames": test,
        "frames": frames,
    });
    match points_source {
        PointsSource::None => {}
        PointsSource::Sfm => {
            doc["ply_file_path"] = "sparse_pc.ply".into();
            doc["ramsplat_points"] = "sfm".into();
        }
        PointsSource::Random(seed) => {
            doc["ply_file_path"] = "sparse_pc.ply".into();
            doc["ramsplat_points"] = format!("random (gs-train --seed {seed})").into();
        }
    }
    if exports_depths(m) {
        // 3DGS's depth_params.json: f32 values print as the shortest decimal that reads back
        // as the same f32, so the re-imported scales are the packed ones exactly.
        let params: serde_json::Map<String, Value> = m
            .views
            .iter()
            .zip(&stems)
            .filter_map(|(v, stem)| {
                v.depth
                    .map(|d| (stem.clone(), json!({"scale": d.scale, "offset": d.offset})))
            })
            .collect();
        let path = tmp.join(crate::import::depth::DEPTH_PARAMS_FILE);
        let text = serde_json::to_string_pretty(&params).expect("JSON values serialise");
        let mut f = File::create(&path).map_err(io(&path))?;
        f.write_all(text.as_bytes()).map_err(io(&path))?;
        f.sync_all().map_err(io(&path))?;
    }
    let json_path = tmp.join("transforms.json");
    let text = serde_json::to_string_pretty(&doc).expect("JSON values serialise");
    let mut f = File::create(&json_path).map_err(io(&json_path))?;
    f.write_all(text.as_bytes()).map_err(io(&json_path))?;
    f.sync_all().map_err(io(&json_path))?;
    install(&tmp, dest, &parent, partial)?;
    let mut r = export_report(m, points, points_source, None);
    r.centring = centring;
    Ok(r)
}

/// Whether the views' inverse-depth planes are written as depth maps (`depths/`,
/// `depth_params.json`): those of monocular maps are; the sparse planes of a pack converted
/// with `--sfm-depths` are not. They hold a value only at the SfM points' pixels, and 3DGS's
/// `-d` (or `gs-pack convert --depths`) would read them as dense maps whose empty pixels are
/// "no depth" under a fit made for dense maps; gsplat's `--depth_loss` computes the same
/// supervision from a COLMAP model's tracks itself, which the export does not write.
pub(super) fn exports_depths(m: &crate::shard::Manifest) -> bool {
    m.has_depths() && !m.source.sfm_depths
}

/// The report of an export of `m` that wrote `points` points.
fn export_report(
    m: &crate::shard::Manifest,
    points: u64,
    points_source: PointsSource,
    colmap: Option<super::colmap::ColmapReport>,
) -> ExportReport {
    let count =
        |f: &dyn Fn(&crate::shard::ViewEntry) -> bool| m.views.iter().filter(|v| f(v)).count();
    ExportReport {
        layout: if colmap.is_some() {
            Layout::Colmap
        } else {
            Layout::Nerfstudio
        },
        colmap,
        views: m.views.len(),
        train_views: count(&|v| v.split == Split::Train),
        test_views: count(&|v| v.split == Split::Test),
        masked_views: count(&|v| v.mask),
        alpha_views: count(&|v| v.alpha),
        depth_views: count(&|v| v.depth.is_some() && exports_depths(m)),
        sfm_depth_views_skipped: count(&|v| v.depth.is_some() && !exports_depths(m)),
        points,
        points_source,
        centring: None,
    }
}

/// Puts the complete folder `tmp` at `dest`: every file and directory entry is on disk before
/// the folder appears under its name, which it takes only if nothing is there.
fn install(
    tmp: &Path,
    dest: &Path,
    parent: &Path,
    mut partial: Partial,
) -> Result<(), ExportError> {
    for d in ["images", "masks", "depths", ""] {
        let d = tmp.join(d);
        if d.exists() {
            crate::fsutil::sync_dir(&d).map_err(io(&d))?;
        }
    }
    match crate::fsutil::rename_noreplace(tmp, dest) {
        Ok(()) => {}
        Err(e)
            if e.kind() == std::io::ErrorKind::AlreadyExists
                || e.raw_os_error() == Some(libc::ENOTEMPTY) =>
        {
            return Err(ExportError::Raced {
                path: dest.to_owned(),
            })
        }
        Err(e) => return Err(io(dest)(e)),
    }
    partial.0 = None;
    let _ = crate::fsutil::sync_dir(parent);
    Ok(())
}

fn write_png(
    path: &Path,
    bytes: &[u8],
    w: u32,
    h: u32,
    colour: image::ExtendedColorType,
) -> Result<(), ExportError> {
    use image::ImageEncoder;
    let file = File::create(path).map_err(io(path))?;
    let mut out = BufWriter::new(file);
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(bytes, w, h, colour)
        .map_err(|e| ExportError::Png {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    out.flush().map_err(io(path))?;
    out.get_ref().sync_all().map_err(io(path))
}

/// The SfM points of `clouds` as COLMAP points (ids from 1), one chunk in memory at a time; a
/// chunk that cannot be read ends the stream and is kept in `error`.
struct SfmPoints<'a> {
    pack: &'a Pack,
    clouds: &'a [usize],
    /// Position: cloud (index into `clouds`), chunk, point within the chunk.
    at: (usize, usize, usize),
    buf: Vec<u8>,
    layout: Option<PointChunkLayout>,
    next_id: u64,
    error: Option<ShardError>,
}

impl<'a> SfmPoints<'a> {
    fn new(pack: &'a Pack, clouds: &'a [usize]) -> Self {
        SfmPoints {
            pack,
            clouds,
            at: (0, 0, 0),
            buf: Vec::new(),
            layout: None,
            next_id: 1,
            error: None,
        }
    }
}

impl Iterator for SfmPoints<'_> {
    type Item = ColmapPoint;

    fn next(&mut self) -> Option<ColmapPoint> {
        let m = self.pack.manifest();
        loop {
            if self.error.is_some() {
                return None;
            }
            let (c, k, i) = self.at;
            let cloud = &m.clouds[*self.clouds.get(c)?];
            let Some(ch) = cloud.chunks.get(k) else {
                self.at = (c + 1, 0, 0);
                continue;
            };
            let layout = match self.layout {
                Some(l) => l,
                None => {
                    let l = PointChunkLayout::new(
                        ch.points as usize,
                        cloud.has_labels,
                        cloud.has_normals,
                    );
                    self.buf.resize(l.total, 0);
                    if let Err(e) = self.pack.read_chunk_into(self.clouds[c], k, &mut self.buf) {
                        self.error = Some(e);
                        return None;
                    }
                    self.layout = Some(l);
                    l
                }
            };
            let chunk = PointChunkRef::new(layout, &self.buf).expect("sized above");
            if i >= chunk.len() {
                self.at = (c, k + 1, 0);
                self.layout = None;
                continue;
            }
            self.at.2 += 1;
            let id = self.next_id;
            self.next_id += 1;
            return Some(ColmapPoint {
                id,
                xyz: chunk.xyz(i).map(f64::from),
                rgb: chunk.rgb(i),
                error: 0.0,
            });
        }
    }
}

enum PointsError {
    Read(ShardError),
    Io(std::io::Error),
}

/// `sparse_pc.ply` from the SfM clouds, one chunk at a time; returns the points written.
fn write_sfm_points(
    pack: &Pack,
    clouds: &[usize],
    total: u64,
    path: &Path,
) -> Result<u64, PointsError> {
    let m = pack.manifest();
    let mut read = None;
    let mut written = 0u64;
    write_points(path, total, |w| {
        let mut buf = Vec::new();
        for &c in clouds {
            let cloud = &m.clouds[c];
            for (k, ch) in cloud.chunks.iter().enumerate() {
                let layout =
                    PointChunkLayout::new(ch.points as usize, cloud.has_labels, cloud.has_normals);
                buf.resize(layout.total, 0u8);
                if let Err(e) = pack.read_chunk_into(c, k, &mut buf) {
                    read = Some(e);
                    return Err(std::io::Error::other("a point chunk could not be read"));
                }
                let chunk = PointChunkRef::new(layout, &buf).expect("sized above");
                for i in 0..chunk.len() {
                    write_point_row(w, chunk.xyz(i), chunk.rgb(i))?;
                    written += 1;
                }
            }
        }
        Ok(())
    })
    .map_err(|e| match read.take() {
        Some(r) => PointsError::Read(r),
        None => PointsError::Io(e),
    })?;
    Ok(written)
}

/// `sparse_pc.ply`: `n` points whose rows `rows` writes, fsynced.
fn write_points(
    path: &Path,
    n: u64,
    rows: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut w = BufWriter::new(File::create(path)?);
    write_points_header(&mut w, n, "written by ramsplat gs-pack export")?;
    rows(&mut w)?;
    w.flush()?;
    w.get_ref().sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::camera::Projection;
    use crate::scene::camera::{Camera, Intrinsics, Pose};

    #[test]
    fn file_names_are_safe_unique_and_stable() {
        let names = [
            "images/0001.jpg",
            "../../etc/passwd",
            ".hidden",
            "./images/0001.JPG",
            "IMAGES/0001.png",
            "a b/ç.png",
            "",
            "x.tiff",
        ];
        let stems = file_stems(names);
        assert_eq!(
            stems,
            [
                "0001",
                "_.._etc_passwd",
                "hidden",
                "0001-2",
                "IMAGES_0001",
                "a_b__",
                "view",
                "x.tiff"
            ]
        );
        for s in &stems {
            assert!(!s.starts_with('.') && !s.contains('/'), "{s}");
        }
    }

    fn camera(width: u32, height: u32, cx: f64, cy: f64) -> Camera {
        Camera {
            width,
            height,
            intrinsics: Intrinsics {
                fx: 800.0,
                fy: 790.0,
                cx,
                cy,
            },
            world_to_camera: Pose::IDENTITY,
            projection: Projection::Pinhole,
        }
    }

    #[test]
    fn the_centring_window_is_the_largest_centred_on_the_nearest_half_pixel() {
        let window = |w, h, cx, cy| Crop::centring(&camera(w, h, cx, cy));
        // Centred already: the whole image.
        assert_eq!(
            window(1080, 1920, 540.0, 960.0),
            Some(Crop {
                x0: 0,
                y0: 0,
                width: 1080,
                height: 1920
            })
        );
        // The fox photos' cx: 2·554.6 rounds to 1109, so columns 29..1080 (centre 554.5);
        // cy 0.2 px below centre rounds to the centre (2·960.2 → 1920).
        let c = window(1080, 1920, 554.6, 960.2).unwrap();
        assert_eq!(
            c,
            Crop {
                x0: 29,
                y0: 0,
                width: 1051,
                height: 1920
            }
        );
        let k = c.camera(&camera(1080, 1920, 554.6, 960.2));
        assert_eq!((k.width, k.height), (1051, 1920));
        assert!((k.intrinsics.cx - 525.6).abs() < 1e-12);
        assert_eq!(k.intrinsics.cy, 960.2);
        assert_eq!((k.intrinsics.fx, k.intrinsics.fy), (800.0, 790.0));
        // Near the left and top edges: the window starts at 0 and ends at twice the centre
        // (an odd width when the centre is a half pixel).
        assert_eq!(
            window(1080, 720, 100.3, 10.74),
            Some(Crop {
                x0: 0,
                y0: 0,
                width: 201,
                height: 21
            })
        );
        // Near the right and bottom edges.
        assert_eq!(
            window(640, 480, 639.5, 479.4),
            Some(Crop {
                x0: 639,
                y0: 479,
                width: 1,
                height: 1
            })
        );
        assert_eq!(
            window(640, 480, 0.3, 240.0).map(|c| c.width),
            Some(1),
            "a third of a pixel in: the first column"
        );
        // Within a quarter pixel of a border, beyond it or not a number: no window.
        for (cx, cy) in [
            (0.2, 240.0),
            (639.8, 240.0),
            (320.0, -5.0),
            (320.0, 480.25),
            (700.0, 240.0),
            (f64::NAN, 240.0),
            (320.0, f64::INFINITY),
        ] {
            assert_eq!(window(640, 480, cx, cy), None, "({cx}, {cy})");
        }
        // Every written principal point is within 0.25 px of its window's centre.
        for i in 0..400 {
            let (w, cx) = (97 + i % 13, 0.3 + i as f64 * 0.2417);
            let cam = camera(w, 50, cx.min(w as f64 - 0.3), 25.0);
            let c = Crop::centring(&cam).unwrap();
            let k = c.camera(&cam).intrinsics;
            assert!(
                (k.cx - c.width as f64 / 2.0).abs() <= 0.25 + 1e-9,
                "{cam:?} → {c:?}"
            );
            assert!(c.x0 + c.width <= w);
        }
    }

    #[test]
    fn a_crop_takes_the_window_of_every_plane() {
        let c = Crop {
            x0: 1,
            y0: 1,
            width: 2,
            height: 2,
        };
        // 4×3, two bytes per pixel: pixel (x, y) holds [10y + x, 100 + 10y + x].
        let plane: Vec<u8> = (0..3u8)
            .flat_map(|y| (0..4u8).flat_map(move |x| [10 * y + x, 100 + 10 * y + x]))
            .collect();
        assert_eq!(c.plane(&plane, 4, 2), [11, 111, 12, 112, 21, 121, 22, 122]);
    }

    #[test]
    fn camera_to_world_inverts_the_pose_in_opengl_axes() {
        let pose = Pose::from_quaternion_wxyz([0.9, 0.1, -0.3, 0.2], [0.5, -1.0, 2.0]).unwrap();
        let cam = Camera {
            width: 64,
            height: 48,
            intrinsics: Intrinsics {
                fx: 50.0,
                fy: 51.0,
                cx: 32.0,
                cy: 24.0,
            },
            world_to_camera: pose,
            projection: Projection::Pinhole,
        };
        let m = cam.opengl_camera_to_world();
        // A point 2 units in front of the camera (OpenCV +z) is at OpenGL (0, 0, −2).
        let p = pose.transform([0.3, -0.2, 1.0]);
        let world = std::array::from_fn::<f64, 3, _>(|i| {
            m[i][0] * p[0] - m[i][1] * p[1] - m[i][2] * p[2] + m[i][3]
        });
        for (a, b) in world.iter().zip([0.3, -0.2, 1.0]) {
            assert!((a - b).abs() < 1e-12, "{world:?}");
        }
        assert_eq!(m[3], [0.0, 0.0, 0.0, 1.0]);
    }
}
