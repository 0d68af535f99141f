//! The COLMAP layout of `gs-pack export --format colmap`: a pack's cameras, poses, split and
//! points as the sparse model COLMAP's `image_undistorter` leaves behind, which the original
//! 3DGS (`train.py -s DIR`), gsplat's `simple_trainer.py` (`--data_dir DIR`), nerfstudio and
//! most other trainers read. The folder's views, masks and depth maps are written by
//! [`super::nerfstudio::export`], which calls [`write_sparse`] for the metadata.
//!
//! # What `sparse/0/` holds
//! - `cameras.bin`: one `PINHOLE` camera (`fx fy cx cy`, the pack's intrinsics exactly: the
//!   pack's pixels are already undistorted; with `--centre-principal-point`, those of the
//!   view's centring crop) per distinct size, intrinsics and projection, numbered from 1 in
//!   view order. 3DGS refuses any other model for training, so a pinhole view gets no other.
//!   A fisheye view (`gs-pack convert --keep-fisheye`: the ideal equidistant fisheye) gets an
//!   `OPENCV_FISHEYE` camera (`fx fy cx cy k1 k2 k3 k4` with `k = 0`), which gsplat reads as
//!   its `fisheye` camera model and `gs-pack convert --keep-fisheye` packs as the same
//!   fisheye view (without the flag, as a pinhole view of its centre).
//! - `images.bin`: one image per view, ids from 1 in pack order, the world-to-camera rotation
//!   as COLMAP's `qvec` (w, x, y, z) and `tvec` (OpenCV axes, as the pack stores poses), named
//!   by its file in `images/` (`<stem>.png`), with no 2D observations.
//! - `points3D.bin`: the pack's SfM points (or, with `--random-points SEED`, the random
//!   initial points `gs-train --seed SEED` starts from), ids from 1, no tracks, error 0. 3DGS
//!   initialises from this file; an empty one is written when there are no points (3DGS then
//!   has nothing to start from, and says so).
//! - `test.txt`: the names of the pack's test views, one per line: 3DGS reads it when its
//!   `llffhold` is 0; its default (every 8th image by sorted name with `--eval`, like gsplat's
//!   `test_every 8` and `gs-pack convert --test-every 8`) is reported against the pack's split
//!   by [`ColmapReport::every_8th_matches`].
//! - `depth_params.json`: for packs with depth maps (not the sparse planes of
//!   `--sfm-depths`, which are not exported), each view's `{"scale", "offset"}` keyed
//!   by its file stem, where 3DGS's `-d depths` looks for it (the maps are in `depths/`). A
//!   view packed without depth gets an empty map and scale 0, an unreliable fit for both 3DGS
//!   and `gs-pack convert` (which then pack or train it without the depth term), since both
//!   want a map and an entry for every image. Masks likewise: once one view has a mask, every
//!   view gets one in `masks/` (one that excludes nothing where the pack has none).
//!
//! Binary files (COLMAP's own output format) hold every f64 exactly, so `gs-pack convert` of
//! the folder packs the same cameras and poses (`tests/export_nerfstudio.rs`).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};

use super::cameras_json::CameraEntry;
use super::nerfstudio::ExportError;
use crate::dataset::Split;
use crate::import::colmap::{write_model, ColmapCamera, ColmapImage, ColmapPoint, Encoding};
use crate::scene::camera::{Camera, Projection};
use crate::scene::maths::rotation_to_quaternion_wxyz;
use crate::shard::Manifest;

/// COLMAP's model id of `PINHOLE` (`fx, fy, cx, cy`).
const PINHOLE: i32 = 1;
/// COLMAP's model id of `OPENCV_FISHEYE` (`fx, fy, cx, cy, k1, k2, k3, k4`).
const OPENCV_FISHEYE: i32 = 5;

/// What [`write_sparse`] wrote besides the points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColmapReport {
    /// Distinct cameras in `cameras.bin`.
    pub cameras: usize,
    /// Of those, the `OPENCV_FISHEYE` cameras of fisheye views (the rest are `PINHOLE`).
    pub fisheye_cameras: usize,
    /// Whether the readers' default split (every 8th image by sorted file name is a test view)
    /// gives the pack's split; when not, `test.txt` holds the pack's.
    pub every_8th_matches: bool,
    /// The largest distance, in pixels along either axis, of a view's principal point from its
    /// image's centre. 3DGS's reader takes only the focal lengths from a `PINHOLE` camera and
    /// renders as if the principal point were centred, so an offset shifts its renders
    /// against the photos by that much (gsplat and nerfstudio read `cx`, `cy`).
    pub max_principal_offset_px: f64,
}

/// Writes `sparse/0/` into `root` for the views of `m` (seen by `cameras`, with file stems
/// `stems`, both in pack order) and `points`; see the module doc.
pub fn write_sparse(
    root: &Path,
    m: &Manifest,
    cameras_of_views: &[Camera],
    stems: &[String],
    points: &mut dyn Iterator<Item = ColmapPoint>,
) -> Result<ColmapReport, ExportError> {
    let dir = root.join("sparse").join("0");
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ExportError::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let mut cameras: Vec<ColmapCamera> = Vec::new();
    let mut images = Vec::with_capacity(m.views.len());
    for (i, (camera, stem)) in cameras_of_views.iter().zip(stems).enumerate() {
        let k = camera.intrinsics;
        let (model_id, params) = match camera.projection {
            Projection::Pinhole => (PINHOLE, vec![k.fx, k.fy, k.cx, k.cy]),
            // The ideal equidistant fisheye is OpenCV's fisheye model with k1..k4 = 0.
            Projection::Fisheye => (
                OPENCV_FISHEYE,
                vec![k.fx, k.fy, k.cx, k.cy, 0.0, 0.0, 0.0, 0.0],
            ),
        };
        let (w, h) = (camera.width as u64, camera.height as u64);
        let id = match cameras
            .iter()
            .find(|c| (c.model_id, c.width, c.height, &c.params) == (model_id, w, h, &params))
        {
            Some(c) => c.id,
            None => {
                let id = cameras.len() as u32 + 1;
                cameras.push(ColmapCamera {
                    id,
                    model_id,
                    width: w,
                    height: h,
                    params,
                });
                id
            }
        };
        let pose = &camera.world_to_camera;
        images.push(ColmapImage {
            // A pack's view count is far below u32::MAX (each view is a file).
            id: i as u32 + 1,
            qvec: rotation_to_quaternion_wxyz(&pose.rotation),
            tvec: pose.translation,
            camera_id: id,
            name: format!("{stem}.png"),
        });
    }
    write_model(&dir, Encoding::Binary, &cameras, &images, points).map_err(|e| {
        ExportError::Io {
            path: dir.clone(),
            source: std::io::Error::other(e.to_string()),
        }
    })?;
    for name in ["cameras.bin", "images.bin", "points3D.bin"] {
        let path = dir.join(name);
        File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(io(&path))?;
    }

    let test: Vec<&str> = m
        .views
        .iter()
        .zip(&images)
        .filter(|(v, _)| v.split == Split::Test)
        .map(|(_, i)| i.name.as_str())
        .collect();
    let mut sorted: Vec<&str> = images.iter().map(|i| i.name.as_str()).collect();
    sorted.sort_unstable();
    let mut every_8th: Vec<&str> = sorted.iter().copied().step_by(8).collect();
    let mut pack_test = test.clone();
    every_8th.sort_unstable();
    pack_test.sort_unstable();
    let path = dir.join("test.txt");
    let text: String = test.iter().map(|n| format!("{n}\n")).collect();
    write_synced(&path, text.as_bytes()).map_err(io(&path))?;

    if super::nerfstudio::exports_depths(m) {
        // 3DGS's depth_params.json, keyed by the image name without its extension; f32 values
        // print as the shortest decimal that reads back as the same f32.
        // A view without depth has an empty map and scale 0: both 3DGS and `gs-pack convert`
        // take a scale below 0.2× the median for an unreliable fit and leave the view out of
        // the depth term (3DGS needs an entry and a map for every image).
        let params: serde_json::Map<String, Value> = m
            .views
            .iter()
            .zip(stems)
            .map(|(v, stem)| {
                let (scale, offset) = v.depth.map_or((0.0, 0.0), |d| (d.scale, d.offset));
                (stem.clone(), json!({"scale": scale, "offset": offset}))
            })
            .collect();
        let path = dir.join(crate::import::depth::DEPTH_PARAMS_FILE);
        let text = serde_json::to_string_pretty(&params).expect("JSON values serialise");
        write_synced(&path, text.as_bytes()).map_err(io(&path))?;
    }
    crate::fsutil::sync_dir(&dir).map_err(io(&dir))?;
    crate::fsutil::sync_dir(&root.join("sparse")).map_err(io(&root.join("sparse")))?;
    Ok(ColmapReport {
        cameras: cameras.len(),
        fisheye_cameras: cameras
            .iter()
            .filter(|c| c.model_id == OPENCV_FISHEYE)
            .count(),
        every_8th_matches: every_8th == pack_test,
        max_principal_offset_px: CameraEntry::max_principal_point_offset(cameras_of_views),
    })
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
