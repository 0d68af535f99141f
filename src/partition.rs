//! Block-wise training of scenes too large for one run: `gs-pack partition` cuts a pack into
//! spatial blocks, each a pack of its own that `gs-train` trains under its own budget, and
//! `gs-pack merge` joins the trained blocks into one model.
//!
//! A budget bounds the number of Gaussians one run can hold (parameters, gradients and Adam
//! moments: about 1 KiB each on the CPU engine), so a scene that needs more than that cannot
//! train in one piece however the views are streamed. Large-scene trainers (VastGaussian,
//! CityGaussian, hierarchical 3DGS) train it block by block; this module does the same with
//! packs:
//!
//! - **The ground frame** ([`GroundFrame`]): the scene's up direction is the normal of the
//!   plane the camera centres lie on (a flight at one height, a walk on level ground), unless
//!   the cameras' own up axes agree on a direction more than 30° from it (a forward-facing
//!   capture, its cameras on a wall-like plane); without such a plane, the cameras' mean up
//!   axis (upright photos); or `--up`. The ground axes are the principal directions of the
//!   camera centres on that plane.
//! - **Cores**: the ground is cut into `columns × rows` cells, the columns at quantiles of the
//!   training cameras' positions along the first axis, each column's rows at quantiles of its
//!   own cameras along the second, so every block holds about as many training views. The
//!   outermost cells reach to infinity. Cores are half-open (`min ≤ x < max`) and tile the
//!   plane: every point of the scene belongs to exactly one core.
//! - **Regions**: each core grown by `overlap` of its size on every bounded side (VastGaussian's
//!   20 %), so that a block trains across its borders and its core's edges are not left to
//!   views of one side.
//! - **Views of a block**: those whose camera centre lies in its region, and those that see
//!   its core: at least `min_coverage` of the image looks into the box of the core's SfM points
//!   (its ground cell and their height; VastGaussian's visibility rule, here by casting a 16×16
//!   grid of pixel rays at the box).
//! - **Points of a block**: the SfM points in its region, and every point one of its views
//!   sees (in front of it, inside its image): so that content a selected view shows beyond the
//!   region starts from points rather than from floaters grown to explain it (VastGaussian's
//!   coverage-based point selection). `--block-points region` takes the region's alone.
//! - **Merging** keeps from each block's model the Gaussians whose centre lies in its core:
//!   the cores tile the plane, so every part of the scene comes from the block that trained it
//!   with its own views, and nothing is kept twice.
//!
//! Block packs are written as the packs `gs-pack convert` writes: each view's stored record is
//! copied as it is (checked, not decoded), so a block's views hold the same bytes and its
//! test views are the pack's. `partition.json` beside them records the frame, the cores and
//! each block pack's id, which `gs-pack merge` matches against each run's `report.json`.
//!
//! Invariants: the output folder appears complete or not at all (built under a temporary
//! name beside it and renamed); the source pack is only read; a merge refuses a run that is
//! not one of the partition's blocks, a block given twice, and a partition with a block
//! missing (the merged model would have a hole).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::dataset::{PointChunk, PointSource, Split};
use crate::export::{load_model, ply::LoadOptions, save_model, ModelFormat, ModelIoError};
use crate::scene::camera::Camera;
use crate::scene::gaussians::Gaussians;
use crate::shard::reader::Pack;
use crate::shard::writer::{PackWriter, WriteError, WriterOptions};
use crate::shard::{Checksum, Codec, PointChunkLayout, PointChunkRef, ShardError};

/// The file `gs-pack partition` writes beside the block packs.
pub const PARTITION_FILE: &str = "partition.json";
/// `partition.json`'s `format`.
pub const PARTITION_FORMAT: &str = "ramsplat-partition";
/// `partition.json`'s `version`.
pub const PARTITION_VERSION: u32 = 1;
/// Default `--overlap`: VastGaussian's 20 % of a block's size on each side.
pub const DEFAULT_OVERLAP: f64 = 0.2;
/// Default `--min-coverage`: VastGaussian's 25 % of the image.
pub const DEFAULT_MIN_COVERAGE: f64 = 0.25;
/// Most blocks a partition makes (`columns × rows`).
pub const MAX_BLOCKS: u32 = 1024;
/// Pixel rays cast per image side to measure how much of it looks into a block.
const COVERAGE_GRID: u32 = 16;
/// The cameras' mean up axis must be at least this long (1 when all agree) to be taken as the
/// scene's up; below it the camera centres' plane decides.
const UPRIGHT_AGREEMENT: f64 = 0.4;
/// The camera centres lie on a plane when their smallest spread is at most this fraction of
/// the middle one (variances).
const FLATNESS: f64 = 0.1;
/// The camera centres' plane is the ground only if its normal lies within this angle
/// (radians, 30°) of the cameras' mean up axis, when they have one.
const MAX_TILT: f64 = std::f64::consts::FRAC_PI_6;

/// What `gs-pack partition` is asked for.
#[derive(Clone, Debug)]
pub struct PartitionOptions {
    /// Cells along the first ground axis (the camera centres' widest spread).
    pub columns: u32,
    /// Cells along the second ground axis, within each column.
    pub rows: u32,
    /// How far each core grows into its neighbours, as a fraction of its size.
    pub overlap: f64,
    /// The fraction of an image that must look into a block's core for the view to join it.
    pub min_coverage: f64,
    /// The scene's up direction (any length), instead of finding it from the cameras.
    pub up: Option<[f64; 3]>,
    /// Which SfM points a block takes.
    pub points: BlockPoints,
}

/// Which SfM points a block starts from (`--block-points`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BlockPoints {
    /// Those in its region and every point one of its views sees (VastGaussian's
    /// coverage-based selection): what its views show beyond the region starts from points.
    #[default]
    Seen,
    /// Those in its region only: fewer Gaussians per block; what its views show beyond the
    /// region is left to densification.
    Region,
}

impl PartitionOptions {
    /// `columns × rows` blocks with the default overlap and coverage, up found from the cameras.
    pub fn new(columns: u32, rows: u32) -> PartitionOptions {
        PartitionOptions {
            columns,
            rows,
            overlap: DEFAULT_OVERLAP,
            min_coverage: DEFAULT_MIN_COVERAGE,
            up: None,
            points: BlockPoints::Seen,
        }
    }
}

/// Why a partition or a merge failed. Each names the file, run or block and what to do.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error(
        "--blocks {columns}x{rows}: give between 1 and {MAX_BLOCKS} blocks, at least 2 in all"
    )]
    BadBlocks { columns: u32, rows: u32 },
    #[error("--overlap {0}: give a fraction in [0, 1] (0.2 is VastGaussian's)")]
    BadOverlap(f64),
    #[error("--min-coverage {0}: give a fraction in [0, 1] (0.25 is VastGaussian's)")]
    BadCoverage(f64),
    #[error("--up {0:?}: give a direction that is finite and not zero")]
    BadUp([f64; 3]),
    #[error(
        "{pack}: {train} training view(s) cannot make {blocks} blocks with a view each; give \
         fewer --blocks"
    )]
    TooFewViews {
        pack: PathBuf,
        train: usize,
        blocks: u32,
    },
    #[error(
        "{pack}: cannot tell the scene's up direction: {why}; give it with --up X,Y,Z (in the \
         pack's world frame, e.g. --up 0,0,1)"
    )]
    NoUp { pack: PathBuf, why: String },
    #[error(
        "{pack}: block {block} holds no training view (several cameras share one position on \
         the ground); give fewer --blocks"
    )]
    EmptyBlock { pack: PathBuf, block: String },
    #[error(
        "{path} already exists and is not an empty folder; partition writes a new folder: \
         remove it or give another -o (nothing was written)"
    )]
    Exists { path: PathBuf },
    #[error("-o {path} {placement} the pack {pack}, which is never written to; give another -o")]
    InsidePack {
        path: PathBuf,
        placement: &'static str,
        pack: PathBuf,
    },
    #[error("reading the pack {pack}")]
    Read {
        pack: PathBuf,
        #[source]
        source: ShardError,
    },
    #[error("writing the block pack {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: Box<WriteError>,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a partition file ({why}); give the folder gs-pack partition wrote")]
    BadPartitionFile { path: PathBuf, why: String },
    #[error(
        "{run}: no report.json ({why}); give the output folders of gs-train runs on the block \
         packs (a run writes its report when it ends, also when stopped with Ctrl-C)"
    )]
    NoReport { run: PathBuf, why: String },
    #[error(
        "{run} trained the pack {pack} (id {pack_id}), which is none of the blocks of {partition} \
         ({blocks}); give one run per block of that partition"
    )]
    UnknownRun {
        run: PathBuf,
        pack: String,
        pack_id: String,
        partition: PathBuf,
        blocks: String,
    },
    #[error("{first} and {second} both trained block {block}; give one run per block")]
    DuplicateBlock {
        block: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "no run given for block(s) {missing} of {partition}: the merged model would have a \
         hole there; train them (gs-train BLOCK_PACK -o RUN) and give every run"
    )]
    MissingBlocks { missing: String, partition: PathBuf },
    #[error("{run}: its report lists no model written; the run saved no model to merge")]
    NoModel { run: PathBuf },
    #[error("reading the model {path}")]
    Model {
        path: PathBuf,
        #[source]
        source: Box<ModelIoError>,
    },
    #[error(
        "{path} renders {this}, the model of block {first_block} {first}: blocks trained \
         alike merge; retrain the block with the same rasterize mode and 3D filter"
    )]
    MixedModes {
        path: PathBuf,
        this: String,
        first_block: String,
        first: String,
    },
    #[error("{path}: {why}; give another output name (ply, spz, splat or compressed.ply)")]
    BadOutput { path: PathBuf, why: String },
    #[error("writing the merged model {path}")]
    Save {
        path: PathBuf,
        #[source]
        source: Box<ModelIoError>,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PartitionError + '_ {
    move |source| PartitionError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The frame blocks are cut in: `origin` (the camera centres' mean), the unit `up` and the
/// unit ground axes `u` (the centres' widest spread on the ground) and `v = up × u`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroundFrame {
    pub origin: [f64; 3],
    pub up: [f64; 3],
    pub u: [f64; 3],
    pub v: [f64; 3],
}

impl GroundFrame {
    /// `(u, v, h)`: a world point's ground coordinates and height.
    pub fn coords(&self, p: [f64; 3]) -> [f64; 3] {
        let d = sub(p, self.origin);
        [dot(d, self.u), dot(d, self.v), dot(d, self.up)]
    }

    /// A world direction in the frame's axes.
    fn direction(&self, d: [f64; 3]) -> [f64; 3] {
        [dot(d, self.u), dot(d, self.v), dot(d, self.up)]
    }
}

/// An interval of one ground axis, unbounded where a side is `None` (null in JSON); half-open
/// (`min ≤ x < max`) so that neighbouring cores never share a point.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub min: Option<f64>,
    pub max: Option<f64>,
}

impl Interval {
    pub fn contains(&self, x: f64) -> bool {
        self.min.is_none_or(|m| x >= m) && self.max.is_none_or(|m| x < m)
    }

    /// The interval grown by `by` on each bounded side.
    fn grown(&self, by: f64) -> Interval {
        Interval {
            min: self.min.map(|m| m - by),
            max: self.max.map(|m| m + by),
        }
    }

    /// The length of the interval within `[lo, hi]` (the extent of the cameras), for sizing
    /// an unbounded side's neighbour.
    fn finite_len(&self, lo: f64, hi: f64) -> f64 {
        (self.max.unwrap_or(hi).min(hi) - self.min.unwrap_or(lo).max(lo)).max(0.0)
    }
}

/// A rectangle of the ground: `u × v`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub u: Interval,
    pub v: Interval,
}

impl Cell {
    pub fn contains(&self, uv: [f64; 2]) -> bool {
        self.u.contains(uv[0]) && self.v.contains(uv[1])
    }
}

/// One block as `partition.json` records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockEntry {
    /// `block-C-R`: the block pack's folder name.
    pub name: String,
    pub column: u32,
    pub row: u32,
    /// The cell whose Gaussians the merge keeps from this block.
    pub core: Cell,
    /// The core grown by the overlap: where the block's cameras and points are taken from.
    pub region: Cell,
    pub train_views: usize,
    pub test_views: usize,
    /// Views taken because they see the core, not because their camera is in the region.
    pub seeing_views: usize,
    pub points: u64,
    /// The block pack's id (`manifest.json`'s, and `report.json`'s of a run on it).
    pub pack_id: Checksum,
}

/// `partition.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartitionFile {
    pub format: String,
    pub version: u32,
    /// The partitioned pack, as given.
    pub pack: String,
    pub pack_id: Checksum,
    pub columns: u32,
    pub rows: u32,
    pub overlap: f64,
    pub min_coverage: f64,
    /// Which SfM points the blocks took (absent: `seen`).
    #[serde(default)]
    pub points: BlockPoints,
    pub frame: GroundFrame,
    /// How the up direction was found: `cameras` (their up axes), `camera plane` or `given`.
    pub up_from: String,
    pub blocks: Vec<BlockEntry>,
}

/// One block of a [`Plan`].
#[derive(Clone, Debug)]
pub struct BlockPlan {
    pub name: String,
    pub column: u32,
    pub row: u32,
    pub core: Cell,
    pub region: Cell,
    /// The pack's views the block takes, in pack order.
    pub views: Vec<usize>,
    pub train_views: usize,
    pub test_views: usize,
    pub seeing_views: usize,
    /// SfM points the block takes.
    pub points: u64,
    /// SfM points in the core.
    pub core_points: u64,
    /// The `(u, v, h)` box of the core's points, which views must see to join.
    pub core_box: Option<[[f64; 3]; 2]>,
}

/// What a partition will write: the frame and every block's views and points.
#[derive(Clone, Debug)]
pub struct Plan {
    pub frame: GroundFrame,
    pub up_from: &'static str,
    pub blocks: Vec<BlockPlan>,
    /// The pack's views and SfM points.
    pub views: usize,
    pub train_views: usize,
    pub points: u64,
}

fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}
fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}
fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}
fn unit(a: [f64; 3]) -> Option<[f64; 3]> {
    let n = dot(a, a).sqrt();
    (n > 0.0 && n.is_finite()).then(|| a.map(|c| c / n))
}

/// Eigenvalues (descending) and unit eigenvectors (`vectors[k]` for `values[k]`) of a
/// symmetric 3×3 matrix, by cyclic Jacobi rotations (converges to machine precision in a
/// handful of sweeps for 3×3).
fn symmetric_eigen(mut a: [[f64; 3]; 3]) -> ([f64; 3], [[f64; 3]; 3]) {
    let mut v = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    for _ in 0..32 {
        let off = a[0][1].abs() + a[0][2].abs() + a[1][2].abs();
        let scale = a[0][0].abs() + a[1][1].abs() + a[2][2].abs();
        if off <= 1e-15 * scale || off == 0.0 {
            break;
        }
        for (p, q) in [(0, 1), (0, 2), (1, 2)] {
            if a[p][q] == 0.0 {
                continue;
            }
            let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
            let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
            let t = if theta == 0.0 { 1.0 } else { t };
            let c = 1.0 / (t * t + 1.0).sqrt();
            let s = t * c;
            // A ← Jᵀ·A·J with J the rotation in the (p, q) plane; V ← V·J.
            for row in a.iter_mut() {
                let (akp, akq) = (row[p], row[q]);
                row[p] = c * akp - s * akq;
                row[q] = s * akp + c * akq;
            }
            let (ap, aq) = (a[p], a[q]);
            for k in 0..3 {
                a[p][k] = c * ap[k] - s * aq[k];
                a[q][k] = s * ap[k] + c * aq[k];
            }
            for row in v.iter_mut() {
                let (vp, vq) = (row[p], row[q]);
                row[p] = c * vp - s * vq;
                row[q] = s * vp + c * vq;
            }
        }
    }
    let mut order = [0usize, 1, 2];
    order.sort_by(|&i, &j| a[j][j].total_cmp(&a[i][i]));
    let values = order.map(|i| a[i][i]);
    let vectors = order.map(|i| [v[0][i], v[1][i], v[2][i]]);
    (values, vectors)
}

/// The frame of `cameras` (see the module doc); `up` given, or found. Returns the frame and
/// how up was found.
pub fn ground_frame(
    cameras: &[Camera],
    up: Option<[f64; 3]>,
) -> Result<(GroundFrame, &'static str), String> {
    let n = cameras.len() as f64;
    let centres: Vec<[f64; 3]> = cameras.iter().map(Camera::centre).collect();
    let mut origin = [0.0; 3];
    for c in &centres {
        for k in 0..3 {
            origin[k] += c[k] / n;
        }
    }
    let mut cov = [[0.0; 3]; 3];
    for c in &centres {
        let d = sub(*c, origin);
        for i in 0..3 {
            for j in 0..3 {
                cov[i][j] += d[i] * d[j] / n;
            }
        }
    }
    // Row 1 of a world-to-camera rotation is the camera's y axis (down) in the world; row 2
    // its viewing direction.
    let mut mean_up = [0.0; 3];
    let mut mean_forward = [0.0; 3];
    for cam in cameras {
        let r = cam.world_to_camera.rotation;
        for k in 0..3 {
            mean_up[k] -= r[1][k] / n;
            mean_forward[k] += r[2][k] / n;
        }
    }
    let upright = dot(mean_up, mean_up).sqrt();
    let (up, from) = match up {
        Some(u) => (unit(u).ok_or("the given direction is zero")?, "given"),
        None => {
            let (values, vectors) = symmetric_eigen(cov);
            let flat = values[1] > 0.0 && values[2] <= FLATNESS * values[1];
            // The plane's normal, on the side the cameras' up axes lean to, or, when those
            // cancel (a drone's photos look down, their up axes every way along the ground),
            // on the side the cameras look away from.
            let normal = vectors[2];
            let lean = if upright >= UPRIGHT_AGREEMENT {
                dot(mean_up, normal)
            } else {
                -dot(mean_forward, normal)
            };
            let normal = if lean < 0.0 {
                normal.map(|c| -c)
            } else {
                normal
            };
            let mean_up = unit(mean_up);
            // A plane the cameras stand upright on is the ground: exact where the up axes
            // only average to it (a flight's headings, a handheld's tilt). One they stand
            // across is not (a forward-facing capture's cameras on a wall-like plane).
            let across = mean_up.is_some_and(|m| dot(m, normal) < MAX_TILT.cos());
            match (flat, upright >= UPRIGHT_AGREEMENT) {
                (true, false) => (normal, "camera plane"),
                (true, true) if !across => (normal, "camera plane"),
                (_, true) => (mean_up.expect("long enough"), "cameras"),
                (false, false) => {
                    return Err(format!(
                        "the cameras' up axes disagree (their mean is {upright:.2} long, \
                         {UPRIGHT_AGREEMENT} needed) and their centres do not lie on a plane"
                    ))
                }
            }
        }
    };
    // Any basis of the ground plane, then its principal axis of the centres.
    let least = (0..3)
        .min_by(|&i, &j| up[i].abs().total_cmp(&up[j].abs()))
        .expect("three axes");
    let mut a = [0.0; 3];
    a[least] = 1.0;
    let e1 = unit(sub(a, up.map(|c| c * up[least]))).expect("not parallel to up");
    let e2 = cross(up, e1);
    let (mut sxx, mut syy, mut sxy) = (0.0, 0.0, 0.0);
    for c in &centres {
        let d = sub(*c, origin);
        let (x, y) = (dot(d, e1), dot(d, e2));
        sxx += x * x;
        syy += y * y;
        sxy += x * y;
    }
    let angle = 0.5 * (2.0 * sxy).atan2(sxx - syy);
    let mut u = [0.0; 3];
    for k in 0..3 {
        u[k] = angle.cos() * e1[k] + angle.sin() * e2[k];
    }
    // An eigenvector's sign is arbitrary: make its largest component positive, so the same
    // pack always gives the same frame.
    let big = (0..3)
        .max_by(|&i, &j| u[i].abs().total_cmp(&u[j].abs()))
        .expect("three axes");
    if u[big] < 0.0 {
        u = u.map(|c| -c);
    }
    let v = cross(up, u);
    Ok((GroundFrame { origin, up, u, v }, from))
}

/// Boundaries cutting `values` into `parts` groups of (nearly) equal counts: `parts − 1`
/// increasing cut values, each halfway between the neighbours it separates.
fn quantile_cuts(values: &mut [f64], parts: u32) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    (1..parts as usize)
        .map(|i| {
            let k = (i * n).div_ceil(parts as usize).clamp(1, n - 1);
            0.5 * (values[k - 1] + values[k])
        })
        .collect()
}

fn interval(cuts: &[f64], i: usize) -> Interval {
    Interval {
        min: i.checked_sub(1).map(|j| cuts[j]),
        max: cuts.get(i).copied(),
    }
}

/// The fraction of `camera`'s image whose pixel rays hit the box `b` (ground coordinates) in
/// front of the camera.
fn coverage(frame: &GroundFrame, camera: &Camera, b: &[[f64; 3]; 2]) -> f64 {
    let r = camera.world_to_camera.rotation;
    let origin = frame.coords(camera.centre());
    let mut hits = 0u32;
    for j in 0..COVERAGE_GRID {
        for i in 0..COVERAGE_GRID {
            let px = (i as f64 + 0.5) / COVERAGE_GRID as f64 * camera.width as f64;
            let py = (j as f64 + 0.5) / COVERAGE_GRID as f64 * camera.height as f64;
            let Some(d) = camera.pixel_ray(px, py) else {
                continue;
            };
            // Camera axes to the world: the rotation's transpose.
            let world = [
                r[0][0] * d[0] + r[1][0] * d[1] + r[2][0] * d[2],
                r[0][1] * d[0] + r[1][1] * d[1] + r[2][1] * d[2],
                r[0][2] * d[0] + r[1][2] * d[1] + r[2][2] * d[2],
            ];
            let d = frame.direction(world);
            let (mut t0, mut t1) = (0.0f64, f64::INFINITY);
            for k in 0..3 {
                if d[k].abs() < 1e-300 {
                    if origin[k] < b[0][k] || origin[k] > b[1][k] {
                        t1 = -1.0;
                    }
                    continue;
                }
                let (a, c) = ((b[0][k] - origin[k]) / d[k], (b[1][k] - origin[k]) / d[k]);
                t0 = t0.max(a.min(c));
                t1 = t1.min(a.max(c));
            }
            if t0 <= t1 {
                hits += 1;
            }
        }
    }
    hits as f64 / (COVERAGE_GRID * COVERAGE_GRID) as f64
}

/// Whether `camera` sees world point `p`: in front of it and inside its image.
fn sees(camera: &Camera, p: [f64; 3]) -> bool {
    camera.project(p).is_some_and(|[x, y]| {
        (0.0..camera.width as f64).contains(&x) && (0.0..camera.height as f64).contains(&y)
    })
}

/// Calls `f` with every chunk of the pack's SfM clouds, in order.
fn for_each_sfm_chunk(
    pack: &Pack,
    mut f: impl FnMut(usize, PointChunkRef<'_>),
) -> Result<(), ShardError> {
    let m = pack.manifest();
    let (clouds, _) = m.sfm_clouds();
    let mut buf = Vec::new();
    for c in clouds {
        let cloud = &m.clouds[c];
        for (k, ch) in cloud.chunks.iter().enumerate() {
            let layout =
                PointChunkLayout::new(ch.points as usize, cloud.has_labels, cloud.has_normals);
            buf.resize(layout.total, 0u8);
            pack.read_chunk_into(c, k, &mut buf)?;
            f(c, PointChunkRef::new(layout, &buf).expect("sized above"));
        }
    }
    Ok(())
}

impl Plan {
    /// Plans the partition of `pack` (opened as stored, not resized).
    pub fn new(pack: &Pack, options: &PartitionOptions) -> Result<Plan, PartitionError> {
        let dir = pack.dir().to_owned();
        let (columns, rows) = (options.columns, options.rows);
        let blocks = columns as u64 * rows as u64;
        if columns == 0 || rows == 0 || blocks < 2 || blocks > MAX_BLOCKS as u64 {
            return Err(PartitionError::BadBlocks { columns, rows });
        }
        if !(0.0..=1.0).contains(&options.overlap) {
            return Err(PartitionError::BadOverlap(options.overlap));
        }
        if !(0.0..=1.0).contains(&options.min_coverage) {
            return Err(PartitionError::BadCoverage(options.min_coverage));
        }
        if let Some(u) = options.up {
            if !u.iter().all(|c| c.is_finite()) || u == [0.0; 3] {
                return Err(PartitionError::BadUp(u));
            }
        }
        let m = pack.manifest();
        let cameras: Vec<Camera> = (0..m.views.len())
            .map(|i| pack.stored_view(i).expect("in range").camera)
            .collect();
        let train: Vec<usize> = m.split_indices(Split::Train);
        if train.len() < blocks as usize {
            return Err(PartitionError::TooFewViews {
                pack: dir,
                train: train.len(),
                blocks: blocks as u32,
            });
        }
        let train_cameras: Vec<Camera> = train.iter().map(|&i| cameras[i]).collect();
        let (frame, up_from) =
            ground_frame(&train_cameras, options.up).map_err(|why| PartitionError::NoUp {
                pack: dir.clone(),
                why,
            })?;
        let ground: Vec<[f64; 2]> = cameras
            .iter()
            .map(|c| {
                let g = frame.coords(c.centre());
                [g[0], g[1]]
            })
            .collect();
        // Columns at quantiles of the training cameras along u, then rows within each column.
        let mut us: Vec<f64> = train.iter().map(|&i| ground[i][0]).collect();
        let (u_lo, u_hi) = extent(&us);
        let column_cuts = quantile_cuts(&mut us, columns);
        let mut plans = Vec::with_capacity(blocks as usize);
        for c in 0..columns as usize {
            let cu = interval(&column_cuts, c);
            let mut vs: Vec<f64> = train
                .iter()
                .filter(|&&i| cu.contains(ground[i][0]))
                .map(|&i| ground[i][1])
                .collect();
            if vs.len() < rows as usize {
                return Err(PartitionError::EmptyBlock {
                    pack: dir,
                    block: format!("block-{c}-{}", vs.len()),
                });
            }
            let (v_lo, v_hi) = extent(&vs);
            let row_cuts = quantile_cuts(&mut vs, rows);
            for r in 0..rows as usize {
                let core = Cell {
                    u: cu,
                    v: interval(&row_cuts, r),
                };
                let region = Cell {
                    u: cu.grown(options.overlap * cu.finite_len(u_lo, u_hi)),
                    v: core
                        .v
                        .grown(options.overlap * core.v.finite_len(v_lo, v_hi)),
                };
                plans.push(BlockPlan {
                    name: format!("block-{c}-{r}"),
                    column: c as u32,
                    row: r as u32,
                    core,
                    region,
                    views: Vec::new(),
                    train_views: 0,
                    test_views: 0,
                    seeing_views: 0,
                    points: 0,
                    core_points: 0,
                    core_box: None,
                });
            }
        }
        // Each core's point box: one pass over the points.
        let mut points = 0u64;
        for_each_sfm_chunk(pack, |_, chunk| {
            for i in 0..chunk.len() {
                let g = frame.coords(chunk.xyz(i).map(f64::from));
                points += 1;
                let Some(b) = plans.iter_mut().find(|b| b.core.contains([g[0], g[1]])) else {
                    continue;
                };
                b.core_points += 1;
                let bx = b.core_box.get_or_insert([g, g]);
                for k in 0..3 {
                    bx[0][k] = bx[0][k].min(g[k]);
                    bx[1][k] = bx[1][k].max(g[k]);
                }
            }
        })
        .map_err(|source| PartitionError::Read {
            pack: dir.clone(),
            source,
        })?;
        // Views: by position, or by what they see of the core.
        for b in &mut plans {
            for (i, cam) in cameras.iter().enumerate() {
                let by_position = b.region.contains(ground[i]);
                let seeing = !by_position
                    && options.min_coverage < 1.0
                    && b.core_box.is_some_and(|bx| {
                        coverage(&frame, cam, &bx) >= options.min_coverage.max(1e-9)
                    });
                if by_position || seeing {
                    b.views.push(i);
                    b.seeing_views += usize::from(seeing);
                    match m.views[i].split {
                        Split::Train => b.train_views += 1,
                        Split::Test => b.test_views += 1,
                    }
                }
            }
            if b.train_views == 0 {
                return Err(PartitionError::EmptyBlock {
                    pack: dir,
                    block: b.name.clone(),
                });
            }
        }
        // Points each block takes: one more pass.
        let selectors: Vec<PointSelector> = plans
            .iter()
            .map(|b| PointSelector::new(frame, b, &cameras, options.points))
            .collect();
        for_each_sfm_chunk(pack, |_, chunk| {
            let xyz: Vec<[f32; 3]> = (0..chunk.len()).map(|i| chunk.xyz(i)).collect();
            for (b, s) in plans.iter_mut().zip(&selectors) {
                b.points += xyz.par_iter().filter(|&&p| s.takes(p)).count() as u64;
            }
        })
        .map_err(|source| PartitionError::Read {
            pack: dir.clone(),
            source,
        })?;
        Ok(Plan {
            frame,
            up_from,
            blocks: plans,
            views: m.views.len(),
            train_views: train.len(),
            points,
        })
    }
}

fn extent(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// Which SfM points a block takes: those in its region, and (with [`BlockPoints::Seen`]) those
/// one of its views sees.
#[derive(Clone)]
struct PointSelector {
    frame: GroundFrame,
    region: Cell,
    cameras: Vec<Camera>,
}

impl PointSelector {
    fn new(
        frame: GroundFrame,
        block: &BlockPlan,
        cameras: &[Camera],
        points: BlockPoints,
    ) -> PointSelector {
        PointSelector {
            frame,
            region: block.region,
            cameras: match points {
                BlockPoints::Seen => block.views.iter().map(|&i| cameras[i]).collect(),
                BlockPoints::Region => Vec::new(),
            },
        }
    }

    fn takes(&self, p: [f32; 3]) -> bool {
        let p = p.map(f64::from);
        let g = self.frame.coords(p);
        self.region.contains([g[0], g[1]]) || self.cameras.iter().any(|c| sees(c, p))
    }
}

/// A pack's SfM cloud streamed through a [`PointSelector`].
struct SelectedCloud<'a> {
    pack: &'a Pack,
    cloud: usize,
    next: usize,
    selector: &'a PointSelector,
    buf: Vec<u8>,
}

impl PointSource for SelectedCloud<'_> {
    type Error = ShardError;

    fn name(&self) -> &str {
        &self.pack.manifest().clouds[self.cloud].name
    }

    fn declared_len(&self) -> Option<u64> {
        None
    }

    fn has_labels(&self) -> bool {
        self.pack.manifest().clouds[self.cloud].has_labels
    }

    fn has_normals(&self) -> bool {
        self.pack.manifest().clouds[self.cloud].has_normals
    }

    fn next_chunk(&mut self, max_points: usize) -> Result<Option<PointChunk>, ShardError> {
        let cloud = &self.pack.manifest().clouds[self.cloud];
        let Some(ch) = cloud.chunks.get(self.next) else {
            return Ok(None);
        };
        let layout = PointChunkLayout::new(ch.points as usize, cloud.has_labels, cloud.has_normals);
        self.buf.resize(layout.total, 0);
        self.pack
            .read_chunk_into(self.cloud, self.next, &mut self.buf)?;
        self.next += 1;
        let chunk = PointChunkRef::new(layout, &self.buf)
            .expect("sized above")
            .to_chunk();
        let keep: Vec<bool> = chunk
            .xyz
            .par_iter()
            .map(|&p| self.selector.takes(p))
            .collect();
        // A pack's chunks hold at most the writer's chunk size, which is what it asks for.
        debug_assert!(chunk.len() <= max_points.max(crate::shard::POINTS_PER_CHUNK));
        let out = select(chunk, &keep);
        Ok(Some(out))
    }
}

/// The points of `chunk` whose `keep` is true.
fn select(chunk: PointChunk, keep: &[bool]) -> PointChunk {
    fn pick<T: Copy>(v: &[T], keep: &[bool]) -> Vec<T> {
        v.iter()
            .zip(keep)
            .filter(|(_, &k)| k)
            .map(|(x, _)| *x)
            .collect()
    }
    PointChunk {
        xyz: pick(&chunk.xyz, keep),
        rgb: pick(&chunk.rgb, keep),
        labels: chunk.labels.as_deref().map(|l| pick(l, keep)),
        normals: chunk.normals.as_deref().map(|n| pick(n, keep)),
    }
}

/// Removes the temporary folder of an unfinished partition.
struct Staging {
    path: PathBuf,
    done: bool,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Writes `plan`'s block packs and `partition.json` into the new folder `out`, calling
/// `progress(block, blocks)` before each block.
pub fn write(
    pack: &Pack,
    plan: &Plan,
    options: &PartitionOptions,
    out: &Path,
    progress: &dyn Fn(usize, usize),
) -> Result<PartitionFile, PartitionError> {
    let dir = pack.dir().to_owned();
    if let Some(placement) = crate::fsutil::placement(out, &dir) {
        return Err(PartitionError::InsidePack {
            path: out.to_owned(),
            placement,
            pack: dir,
        });
    }
    let fill_empty = match fs::symlink_metadata(out) {
        Ok(m) if m.is_dir() && fs::read_dir(out).map_err(io(out))?.next().is_none() => true,
        Ok(_) => {
            return Err(PartitionError::Exists {
                path: out.to_owned(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(io(out)(e)),
    };
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = out.file_name().ok_or_else(|| PartitionError::Io {
        path: out.to_owned(),
        source: std::io::Error::other("the output has no folder name"),
    })?;
    fs::create_dir_all(&parent).map_err(io(&parent))?;
    let mut staging = Staging {
        path: parent.join(format!(
            ".{}.partial-{}",
            name.to_string_lossy(),
            std::process::id()
        )),
        done: false,
    };
    // A killed run's folder (its process gone) is removed, as the pack writer does; the same
    // process id can only mean a dead run's leftovers.
    crate::shard::writer::remove_stale_partials(&parent, &name.to_string_lossy());
    if fs::symlink_metadata(&staging.path).is_ok() {
        fs::remove_dir_all(&staging.path).map_err(io(&staging.path))?;
    }
    fs::create_dir(&staging.path).map_err(io(&staging.path))?;
    let m = pack.manifest();
    // Records are copied as they are: a pack holding JPEG views needs the format that has them.
    let writer_options = WriterOptions {
        codec: if m.views.iter().any(|v| v.codec == Codec::Jpeg) {
            Codec::Jpeg
        } else {
            Codec::Zstd
        },
        ..WriterOptions::default()
    };
    let cameras: Vec<Camera> = m.views.iter().map(|v| v.camera).collect();
    let (clouds, _) = m.sfm_clouds();
    let mut entries = Vec::with_capacity(plan.blocks.len());
    for (k, b) in plan.blocks.iter().enumerate() {
        progress(k, plan.blocks.len());
        let path = staging.path.join(&b.name);
        let write_err = |source: WriteError| PartitionError::Write {
            path: out.join(&b.name),
            source: Box::new(source),
        };
        let mut w = PackWriter::create(&path, &writer_options).map_err(write_err)?;
        for &i in &b.views {
            let v = pack
                .encoded_view(i)
                .map_err(|source| PartitionError::Read {
                    pack: dir.clone(),
                    source,
                })?;
            w.add_encoded_view(v).map_err(write_err)?;
        }
        let selector = PointSelector::new(plan.frame, b, &cameras, options.points);
        let mut points = 0;
        for &c in &clouds {
            let mut source = SelectedCloud {
                pack,
                cloud: c,
                next: 0,
                selector: &selector,
                buf: Vec::new(),
            };
            match w.add_cloud(&mut source) {
                Ok(entry) => points += entry.points,
                Err(crate::shard::writer::CloudError::Source(source)) => {
                    return Err(PartitionError::Read {
                        pack: dir.clone(),
                        source,
                    })
                }
                Err(crate::shard::writer::CloudError::Write(e)) => return Err(write_err(e)),
            }
        }
        let manifest = w.finish(m.source.clone()).map_err(write_err)?;
        entries.push(BlockEntry {
            name: b.name.clone(),
            column: b.column,
            row: b.row,
            core: b.core,
            region: b.region,
            train_views: b.train_views,
            test_views: b.test_views,
            seeing_views: b.seeing_views,
            points,
            pack_id: manifest.pack_id,
        });
    }
    let file = PartitionFile {
        format: PARTITION_FORMAT.into(),
        version: PARTITION_VERSION,
        pack: dir.display().to_string(),
        pack_id: m.pack_id,
        columns: options.columns,
        rows: options.rows,
        overlap: options.overlap,
        min_coverage: options.min_coverage,
        points: options.points,
        frame: plan.frame,
        up_from: plan.up_from.into(),
        blocks: entries,
    };
    let json_path = staging.path.join(PARTITION_FILE);
    let json = serde_json::to_vec_pretty(&file).expect("a partition serialises");
    crate::fsutil::write_atomic(&json_path, &json).map_err(io(&json_path))?;
    if fill_empty {
        // Empty when checked; if something was put there since, the rename below refuses.
        let _ = fs::remove_dir(out);
    }
    crate::fsutil::rename_noreplace(&staging.path, out).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists
            || e.raw_os_error() == Some(libc::ENOTEMPTY)
        {
            PartitionError::Exists {
                path: out.to_owned(),
            }
        } else {
            io(out)(e)
        }
    })?;
    staging.done = true;
    Ok(file)
}

/// Reads `DIR/partition.json`.
pub fn read_partition(dir: &Path) -> Result<PartitionFile, PartitionError> {
    let path = dir.join(PARTITION_FILE);
    let bad = |why: String| PartitionError::BadPartitionFile {
        path: path.clone(),
        why,
    };
    let text = crate::fsutil::read_file_to_string(&path).map_err(|e| bad(e.to_string()))?;
    let file: PartitionFile = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if file.format != PARTITION_FORMAT {
        return Err(bad(format!("its format is {:?}", file.format)));
    }
    if file.version != PARTITION_VERSION {
        return Err(bad(format!(
            "version {}; this build reads version {PARTITION_VERSION}",
            file.version
        )));
    }
    if file.blocks.is_empty() {
        return Err(bad("it lists no block".into()));
    }
    Ok(file)
}

/// What `gs-pack merge` needs of a run's `report.json`.
#[derive(Deserialize)]
struct RunReport {
    pack: String,
    pack_id: String,
    point_clouds: Vec<String>,
    #[serde(default)]
    interrupted: bool,
    iterations: u64,
}

/// One block's share of a merge.
#[derive(Clone, Debug)]
pub struct MergedBlock {
    pub name: String,
    pub model: PathBuf,
    pub iterations: u64,
    pub interrupted: bool,
    /// Gaussians in the block's model, and those whose centre lies in its core.
    pub gaussians: usize,
    pub kept: usize,
}

/// What a merge wrote.
#[derive(Clone, Debug)]
pub struct MergeReport {
    pub blocks: Vec<MergedBlock>,
    pub gaussians: usize,
    pub sh_degree: u32,
    /// SH degrees of blocks above the lowest, dropped to it.
    pub sh_cut: bool,
}

/// Merges the runs of a partition's blocks (`gs-train` output folders) into one model at
/// `out` (format by its name; see [`ModelFormat::from_path`]), keeping from each block the
/// Gaussians whose centre lies in its core. Holds the merged model and one block's model.
pub fn merge(
    partition_dir: &Path,
    runs: &[PathBuf],
    out: &Path,
) -> Result<MergeReport, PartitionError> {
    let partition = read_partition(partition_dir)?;
    let format = ModelFormat::from_path(out).ok_or_else(|| PartitionError::BadOutput {
        path: out.to_owned(),
        why: "its name says no model format".into(),
    })?;
    if fs::metadata(out).is_ok_and(|m| m.is_dir()) {
        return Err(PartitionError::BadOutput {
            path: out.to_owned(),
            why: "a folder".into(),
        });
    }
    let by_id: HashMap<String, usize> = partition
        .blocks
        .iter()
        .enumerate()
        .map(|(k, b)| (b.pack_id.to_string(), k))
        .collect();
    let mut chosen: Vec<Option<(PathBuf, RunReport)>> =
        (0..partition.blocks.len()).map(|_| None).collect();
    for run in runs {
        let report_path = run.join(crate::train::report::REPORT_FILE);
        let text = crate::fsutil::read_file_to_string(&report_path).map_err(|e| {
            PartitionError::NoReport {
                run: run.clone(),
                why: e.to_string(),
            }
        })?;
        let report: RunReport =
            serde_json::from_str(&text).map_err(|e| PartitionError::NoReport {
                run: run.clone(),
                why: format!("{}: {e}", report_path.display()),
            })?;
        let Some(&k) = by_id.get(&report.pack_id) else {
            return Err(PartitionError::UnknownRun {
                run: run.clone(),
                pack: report.pack,
                pack_id: report.pack_id,
                partition: partition_dir.to_owned(),
                blocks: partition
                    .blocks
                    .iter()
                    .map(|b| b.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        if let Some((first, _)) = &chosen[k] {
            return Err(PartitionError::DuplicateBlock {
                block: partition.blocks[k].name.clone(),
                first: first.clone(),
                second: run.clone(),
            });
        }
        chosen[k] = Some((run.clone(), report));
    }
    let missing: Vec<&str> = partition
        .blocks
        .iter()
        .zip(&chosen)
        .filter(|(_, c)| c.is_none())
        .map(|(b, _)| b.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(PartitionError::MissingBlocks {
            missing: missing.join(", "),
            partition: partition_dir.to_owned(),
        });
    }
    let mut models = Vec::with_capacity(chosen.len());
    for (run, report) in chosen.into_iter().flatten() {
        let rel = report
            .point_clouds
            .last()
            .ok_or_else(|| PartitionError::NoModel { run: run.clone() })?;
        let model = run.join(rel);
        if crate::fsutil::placement(out, &model) == Some("is") {
            return Err(PartitionError::BadOutput {
                path: out.to_owned(),
                why: "it is one of the models to merge".into(),
            });
        }
        models.push((model, report));
    }
    let mut merged: Option<Gaussians> = None;
    let mut first_mode: Option<(String, (bool, bool))> = None;
    let mut blocks = Vec::with_capacity(models.len());
    let mut sh_cut = false;
    for (b, (model, report)) in partition.blocks.iter().zip(models) {
        let (mut g, info) = load_model(&model, &LoadOptions::default()).map_err(|source| {
            PartitionError::Model {
                path: model.clone(),
                source: Box::new(source),
            }
        })?;
        let mode = (info.antialiased, info.folded_filter_3d);
        match &first_mode {
            None => first_mode = Some((b.name.clone(), mode)),
            Some((first_block, first)) if *first != mode => {
                return Err(PartitionError::MixedModes {
                    path: model,
                    this: describe_mode(mode),
                    first_block: first_block.clone(),
                    first: describe_mode(*first),
                })
            }
            Some(_) => {}
        }
        let total = g.len();
        let keep: Vec<bool> = g
            .means
            .iter()
            .map(|p| {
                let c = partition.frame.coords(p.map(f64::from));
                b.core.contains([c[0], c[1]])
            })
            .collect();
        g.retain(&keep);
        blocks.push(MergedBlock {
            name: b.name.clone(),
            model,
            iterations: report.iterations,
            interrupted: report.interrupted,
            gaussians: total,
            kept: g.len(),
        });
        merged = Some(match merged.take() {
            None => g,
            Some(mut m) => {
                // Blocks trained to different SH degrees meet at the lowest.
                if g.sh_degree != m.sh_degree {
                    sh_cut = true;
                    let d = g.sh_degree.min(m.sh_degree);
                    g.set_sh_degree(d);
                    m.set_sh_degree(d);
                }
                m.append(&g);
                m
            }
        });
    }
    let merged = merged.expect("a partition has blocks");
    let (_, (antialiased, folded)) = first_mode.expect("a partition has blocks");
    let info = crate::export::ModelInfo::with_mode(antialiased).with_folded_filter(folded);
    save_model(out, &merged, format, info).map_err(|source| PartitionError::Save {
        path: out.to_owned(),
        source: Box::new(source),
    })?;
    Ok(MergeReport {
        gaussians: merged.len(),
        sh_degree: merged.sh_degree,
        blocks,
        sh_cut,
    })
}

/// A model's rendering mode in words: rasterization, and a folded 3D filter.
fn describe_mode((antialiased, folded): (bool, bool)) -> String {
    format!(
        "{}{}",
        crate::render::rasterize_mode_name(antialiased),
        if folded {
            " with a 3D filter folded in"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::scene::camera::{Intrinsics, Pose};

    /// A 64×48 pinhole camera at `centre` looking along `forward` with `down` its image's y.
    fn camera(centre: [f64; 3], forward: [f64; 3], down: [f64; 3]) -> Camera {
        let z = unit(forward).unwrap();
        let x = unit(cross(down, z)).unwrap();
        let y = cross(z, x);
        Camera {
            width: 64,
            height: 48,
            intrinsics: Intrinsics {
                fx: 60.0,
                fy: 60.0,
                cx: 32.0,
                cy: 24.0,
            },
            // Camera-to-world columns x, y, z.
            world_to_camera: Pose::from_camera_to_world(
                [[x[0], y[0], z[0]], [x[1], y[1], z[1]], [x[2], y[2], z[2]]],
                centre,
            ),
            projection: Default::default(),
        }
    }

    #[test]
    fn symmetric_eigen_diagonalises() {
        let mut rng = Rng::new(7);
        for _ in 0..200 {
            let mut a = [[0.0; 3]; 3];
            for (i, j) in [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)] {
                let x = rng.next_f64() * 2.0 - 1.0;
                a[i][j] = x;
                a[j][i] = x;
            }
            let (values, vectors) = symmetric_eigen(a);
            assert!(values[0] >= values[1] && values[1] >= values[2]);
            for k in 0..3 {
                let v = vectors[k];
                assert!((dot(v, v) - 1.0).abs() < 1e-12);
                for i in 0..3 {
                    let av = dot(a[i], v);
                    assert!((av - values[k] * v[i]).abs() < 1e-10, "{a:?}");
                }
            }
        }
    }

    #[test]
    fn upright_cameras_give_their_up_and_the_widest_spread_as_u() {
        // A street: cameras along world x at 1.5 m, looking along ±y, image y = −z.
        let cams: Vec<Camera> = (0..20)
            .map(|i| {
                let side = if i % 2 == 0 { 1.0 } else { -1.0 };
                camera(
                    [i as f64, 0.3 * side, 1.5 + 0.3 * (i as f64).sin()],
                    [0.1, side, 0.0],
                    [0.0, 0.0, -1.0],
                )
            })
            .collect();
        let (f, from) = ground_frame(&cams, None).unwrap();
        assert_eq!(from, "cameras");
        assert!(dot(f.up, [0.0, 0.0, 1.0]) > 0.999, "{f:?}");
        assert!(dot(f.u, [1.0, 0.0, 0.0]) > 0.999, "{f:?}");
        assert!((dot(cross(f.u, f.v), f.up) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_drone_flight_gives_the_plane_of_its_cameras() {
        // Nadir cameras over a grid on a plane tilted about x, their image y pointing every
        // way: the up axes cancel, the centres' plane decides.
        let tilt = 0.3f64;
        let up = [0.0, -tilt.sin(), tilt.cos()];
        let mut cams = Vec::new();
        for i in 0..6 {
            for j in 0..4 {
                let (a, b) = (i as f64 * 10.0, j as f64 * 10.0);
                let centre = [a, b * tilt.cos(), b * tilt.sin() + 50.0 / tilt.cos()];
                let heading = (i * 4 + j) as f64 * 1.3;
                let down = [
                    heading.cos(),
                    heading.sin() * tilt.cos(),
                    heading.sin() * tilt.sin(),
                ];
                cams.push(camera(centre, up.map(|c| -c), down));
            }
        }
        let (f, from) = ground_frame(&cams, None).unwrap();
        assert_eq!(from, "camera plane");
        assert!(dot(f.up, up) > 0.999, "{f:?}");
        assert!(dot(f.u, [1.0, 0.0, 0.0]) > 0.999, "{f:?}");
        // Given, it wins.
        let (g, from) = ground_frame(&cams, Some([0.0, 0.0, 3.0])).unwrap();
        assert_eq!(from, "given");
        assert_eq!(g.up, [0.0, 0.0, 1.0]);
        // Looking down 30° off nadir with headings that leave their up axes leaning 2° off:
        // the plane is exact.
        let mut cams = Vec::new();
        for i in 0..8 {
            for j in 0..6 {
                let heading = [0.0, 0.5, 1.0, 1.6][(i + j) % 4] * std::f64::consts::PI;
                let (c, s) = (heading.cos(), heading.sin());
                let forward = [0.5 * c, 0.5 * s, -(0.75f64).sqrt()];
                let down = [-(0.75f64).sqrt() * c, -(0.75f64).sqrt() * s, -0.5];
                cams.push(camera([i as f64, j as f64, 6.0], forward, down));
            }
        }
        let (f, from) = ground_frame(&cams, None).unwrap();
        assert_eq!(from, "camera plane");
        assert!(dot(f.up, [0.0, 0.0, 1.0]) > 1.0 - 1e-12, "{f:?}");
    }

    #[test]
    fn a_forward_facing_capture_keeps_its_cameras_up() {
        // Upright cameras on a small vertical plane, all looking along +y (an LLFF capture):
        // the plane's normal is horizontal, the cameras' up is the scene's.
        let cams: Vec<Camera> = (0..20)
            .map(|i| {
                let (a, b) = ((i % 5) as f64 * 0.1, (i / 5) as f64 * 0.1);
                camera([a, 0.0, b], [0.0, 1.0, 0.0], [0.0, 0.0, -1.0])
            })
            .collect();
        let (f, from) = ground_frame(&cams, None).unwrap();
        assert_eq!(from, "cameras");
        assert!(dot(f.up, [0.0, 0.0, 1.0]) > 1.0 - 1e-12, "{f:?}");
    }

    #[test]
    fn cameras_that_agree_on_nothing_are_refused() {
        // Up axes every way and centres filling a ball: no ground to find.
        let mut rng = Rng::new(3);
        let cams: Vec<Camera> = (0..40)
            .map(|i| {
                let c = [0, 1, 2].map(|_| rng.next_f64() * 10.0);
                let a = i as f64 * 2.1;
                camera(
                    c,
                    [a.cos(), a.sin(), 0.3],
                    [a.sin(), -a.cos(), (a * 0.7).sin()],
                )
            })
            .collect();
        let err = ground_frame(&cams, None).unwrap_err();
        assert!(err.contains("do not lie on a plane"), "{err}");
    }

    #[test]
    fn quantile_cuts_balance_the_counts_and_cores_tile_the_plane() {
        let mut rng = Rng::new(11);
        let mut xs: Vec<f64> = (0..103).map(|_| rng.next_f64().powi(3) * 50.0).collect();
        let cuts = quantile_cuts(&mut xs.clone(), 4);
        assert_eq!(cuts.len(), 3);
        let counts: Vec<usize> = (0..4)
            .map(|i| {
                xs.iter()
                    .filter(|&&x| interval(&cuts, i).contains(x))
                    .count()
            })
            .collect();
        assert_eq!(counts.iter().sum::<usize>(), 103);
        assert!(counts.iter().all(|&c| (25..=27).contains(&c)), "{counts:?}");
        // Every value, cut values included, lies in exactly one interval.
        xs.extend(cuts.iter().copied());
        for x in xs {
            let n = (0..4).filter(|&i| interval(&cuts, i).contains(x)).count();
            assert_eq!(n, 1, "{x}");
        }
        let grown = interval(&cuts, 0).grown(2.0);
        assert_eq!(grown.min, None);
        assert_eq!(grown.max, Some(cuts[0] + 2.0));
    }

    #[test]
    fn coverage_counts_the_rays_that_reach_the_box() {
        let frame = GroundFrame {
            origin: [0.0; 3],
            up: [0.0, 0.0, 1.0],
            u: [1.0, 0.0, 0.0],
            v: [0.0, 1.0, 0.0],
        };
        let b = [[-1.0, -1.0, 0.0], [1.0, 1.0, 0.5]];
        // Straight down from 1 m: the box fills the image.
        let near = camera([0.0, 0.0, 1.5], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]);
        assert_eq!(coverage(&frame, &near, &b), 1.0);
        // From 10 m up, the box spans 12 px of 64 and 12 of 48: a sixteenth of the image.
        let far = camera([0.0, 0.0, 10.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]);
        let c = coverage(&frame, &far, &b);
        assert!((c - 1.0 / 16.0).abs() < 0.03, "{c}");
        // Looking away, nothing: rays behind the camera do not count.
        let away = camera([0.0, 0.0, 1.5], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]);
        assert_eq!(coverage(&frame, &away, &b), 0.0);
        // Half the image: the box's edge under the principal point.
        let half = camera([1.0, 0.0, 1.5], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]);
        assert!((coverage(&frame, &half, &b) - 0.5).abs() < 1e-12);
    }
}
