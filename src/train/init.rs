//! Initial Gaussians: from the pack's SfM points, or random points when it has none, and
//! optionally a sky around them.
//!
//! # From points (3DGS `create_from_pcd`)
//! - mean = the point; SH DC = `(c/255 − 0.5) / C0` per channel, higher coefficients 0;
//! - log-scale (all three axes) = `ln √max(d², 1e-7)`, `d²` the mean squared distance to the
//!   3 nearest other points (3DGS's `distCUDA2` from simple-knn, which clamps at 1e-7);
//! - rotation = identity (1, 0, 0, 0); opacity = logit(0.1).
//!
//! The neighbours come from a k-d tree ([`knn_mean_sq_dist`]): an implicit, balanced tree
//! built by median splits on cycling axes over an index permutation (the median of each range
//! is its node; no node storage), queried
//! in parallel; O(N log N), so 1 M points take seconds, not the hours of a quadratic loop.
//! Duplicate points count as neighbours at distance 0 (as in simple-knn), hence the clamp.
//! Measured (by this code when it was an ignored test, now `cargo bench --bench stages -- knn`;
//! crate at opt-level 3, 2 cores shared with other builds, load average ≈ 9): 1 M uniform points in 8.7 s; 100k points initialise in 0.38 s.
//!
//! # Random (no SfM points)
//! 3DGS initialises NeRF-synthetic scenes with 100k points uniform in `[−1.3, 1.3]³` and SH DC
//! uniform in `[0, 1/255)` (`shs = random / 255`, so colours are ≈ 0.5 grey: the colour is
//! learned). Its cameras sit 4.03 from the object they look at, so the box half-side is
//! 4.03 / 3.1 ≈ 1.3. We generalise both parts: the box is centred on the point the cameras
//! look at (the least-squares nearest point to every optical axis) with half-side = the mean
//! camera distance to that point / 3.1. Centring on the camera centroid instead fails for
//! captures that do not surround the object: the instant-ngp fox cameras span an arc whose
//! centroid lies 4.2 units from the fox, so such a box held no part of the scene. When the
//! optical axes are (nearly) parallel, as in forward-facing captures, the look-at point is
//! undefined and the box is centred one extent in front of the centroid along the mean
//! viewing direction.
//!
//! # Sky points (`gs-train --sky-points N`)
//! [`from_pack_with_sky`] appends `N` points after the scene's: a Fibonacci lattice over the
//! sphere about the cameras' centroid of radius [`SKY_RADIUS_PER_EXTENT`] scene extents
//! ([`sky_points`]), light grey, initialised like any point (their kNN scales are their own
//! spacing: the scene is far from them). The scene's points are capped at `cap − N`. What lies
//! beyond the scene then has Gaussians far away to be learned on, instead of being filled in
//! by densification a few extents out, where other views see it as haze. The run's far field
//! ([`sky_far_field`]) keeps densification's scene-unit rules off them (see
//! [`super::densify`]).
//!
//! # A cap on the initial model (`--max-gaussians`)
//! With more SfM points than the cap, [`stratified_subsample`] keeps exactly `cap` of them,
//! spread over the scene rather than the first `cap` in file order (which would cover only the
//! part of the scene the reconstruction happened to list first): points are ordered along a
//! Morton (Z-order) curve over their bounding box, the curve is cut into `cap` runs of equal
//! point count, and one point is drawn from each run with the run's seeded random offset. Each
//! run is a compact piece of space, so every region keeps points in proportion to its density;
//! the draw depends only on the points and the seed. Random initialisations are capped too.
//!
//! # From an existing model (`gs-train --init model.ply|.spz|.splat`)
//! [`from_model`] adapts a trained model (stored values, as [`crate::export::load_model`]
//! reads them; activated PLYs are refused there) to the run, for fine-tuning or continuing
//! someone else's run:
//! - `--max-gaussians`: a model with more Gaussians than the cap is subsampled to exactly the
//!   cap with [`stratified_subsample`] over its means (the same rule, and the same seeded
//!   stream, as SfM points), so the cap means the same whatever the initial model is;
//! - `--sh-degree`: coefficients the model has beyond the run's degree are dropped; bands the
//!   model lacks are zero (as a fresh model's higher bands are), so they are learned;
//! - the SH schedule starts at the model's degree (capped at the run's): the run's
//!   [`super::TrainConfig::initial_sh_degree`], so iteration 1 renders what the model renders.
//!
//! # Memory
//! Points are streamed from the pack chunk by chunk into the output arrays (grown as chunks
//! arrive, never pre-sized from the manifest's count). Beyond the model itself, building it
//! holds at most [`INIT_BYTES_PER_POINT`] per point read ([`plan`] says how many, before any
//! work), all freed once the model exists.

use rayon::prelude::*;

use crate::scene::camera::Camera;

use crate::rng::Rng;
use crate::scene::gaussians::{sh_coeffs, Gaussians, MAX_SH_DEGREE};
use crate::scene::maths::{logit, rgb_to_sh_dc};
use crate::shard::reader::Pack;
use crate::shard::ShardError;

/// Points in 3DGS's random initialisation.
pub const DEFAULT_RANDOM_POINTS: usize = 100_000;

/// 3DGS clamps the mean squared neighbour distance below at this value.
pub const MIN_DIST2: f32 = 1e-7;

/// Opacity of every initial Gaussian.
pub const INITIAL_OPACITY: f32 = 0.1;

/// Neighbours averaged for the initial scale.
const K: usize = 3;

/// Points per k-d tree leaf: small enough that a leaf scan is cheap, large enough that the
/// recursion stays shallow (log2(1M / 8) ≈ 17 levels).
const LEAF: usize = 8;

/// Bytes held per point read while the initial model is built, beyond the model: position and
/// colour as read (12 + 3 B), the sampling key when subsampling (Morton code 8 B + index 4 B,
/// padded to 16 B) and the kNN index and distance (4 + 4 B): at most 39 B at any moment (see
/// [`from_pack`]), rounded up to 48.
pub const INIT_BYTES_PER_POINT: u64 = 48;

/// What [`from_pack`] will build, known from the manifest before any work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitPlan {
    /// Points read: the SfM points, or the random points drawn.
    pub points: u64,
    /// Gaussians of the initial model (`points` capped at `max_gaussians`).
    pub gaussians: u64,
    /// Random points (the pack has no SfM points).
    pub random: bool,
    /// Sky points added ([`sky_points`]; counted in `gaussians`).
    pub sky: u64,
}

impl InitPlan {
    /// Whether the SfM points are subsampled to the cap.
    pub fn subsampled(&self) -> bool {
        !self.random && self.gaussians - self.sky < self.points
    }
}

/// What [`from_pack`] with these arguments builds (see [`InitPlan`]).
pub fn plan(pack: &Pack, random_points: usize, max_gaussians: usize, sky: usize) -> InitPlan {
    let m = pack.manifest();
    let (_, total) = m.sfm_clouds();
    let scene_cap = max_gaussians.saturating_sub(sky) as u64;
    if m.scene.no_sfm_points || total == 0 {
        let n = (random_points as u64).min(scene_cap);
        InitPlan {
            points: n,
            gaussians: n + sky as u64,
            random: true,
            sky: sky as u64,
        }
    } else {
        InitPlan {
            points: total,
            gaussians: total.min(scene_cap) + sky as u64,
            random: false,
            sky: sky as u64,
        }
    }
}

/// Spreads the low 21 bits of `v` to every third bit (Morton encoding).
fn spread3(v: u64) -> u64 {
    let mut x = v & 0x1f_ffff;
    x = (x | x << 32) & 0x001f_0000_0000_ffff;
    x = (x | x << 16) & 0x001f_0000_ff00_00ff;
    x = (x | x << 8) & 0x100f_00f0_0f00_f00f;
    x = (x | x << 4) & 0x10c3_0c30_c30c_30c3;
    x = (x | x << 2) & 0x1249_2492_4924_9249;
    x
}

/// Indices (ascending) of `n` of the points `xyz`, spread over space: see the module doc.
/// All indices when `n ≥ xyz.len()`. Deterministic for the points and `rng`'s state.
pub fn stratified_subsample(xyz: &[[f32; 3]], n: usize, rng: &mut Rng) -> Vec<u32> {
    let total = xyz.len();
    if n >= total {
        return (0..total as u32).collect();
    }
    let mut lo = [f32::INFINITY; 3];
    let mut hi = [f32::NEG_INFINITY; 3];
    for p in xyz {
        for a in 0..3 {
            lo[a] = lo[a].min(p[a]);
            hi[a] = hi[a].max(p[a]);
        }
    }
    const CELLS: f64 = ((1u64 << 21) - 1) as f64;
    let scale: [f64; 3] = std::array::from_fn(|a| {
        let side = f64::from(hi[a]) - f64::from(lo[a]);
        if side > 0.0 {
            CELLS / side
        } else {
            0.0
        }
    });
    let mut keys: Vec<(u64, u32)> = xyz
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let q = |a: usize| ((f64::from(p[a]) - f64::from(lo[a])) * scale[a]) as u64;
            (
                spread3(q(0)) | spread3(q(1)) << 1 | spread3(q(2)) << 2,
                i as u32,
            )
        })
        .collect();
    keys.sort_unstable();
    let mut picked: Vec<u32> = (0..n)
        .map(|k| {
            // Run k of the curve: [k·T/n, (k+1)·T/n), non-empty since T > n.
            let a = k * total / n;
            let b = (k + 1) * total / n;
            keys[a + rng.below((b - a) as u64) as usize].1
        })
        .collect();
    picked.sort_unstable();
    picked
}

/// Why initialisation failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("reading the point cloud of {pack}: {source}")]
    Read {
        pack: String,
        #[source]
        source: ShardError,
    },
    #[error(
        "cloud {cloud:?} chunk {chunk} of {pack} holds a non-finite point ({point:?}); \
         re-pack the dataset or remove that point"
    )]
    NonFinite {
        pack: String,
        cloud: String,
        chunk: usize,
        point: [f32; 3],
    },
    #[error("SH degree {0} is above the maximum {MAX_SH_DEGREE}")]
    ShDegree(u32),
    #[error("cannot initialise from zero points")]
    NoPoints,
}

/// For each point, the mean squared distance to its `K` = 3 nearest other points (fewer when
/// the cloud is that small; 0 for a single point). Deterministic for any thread count.
pub fn knn_mean_sq_dist(points: &[[f32; 3]]) -> Vec<f32> {
    let mut idx: Vec<u32> = (0..points.len() as u32).collect();
    build(points, &mut idx, 0);
    let tree = Tree { points, idx: &idx };
    (0..points.len())
        .into_par_iter()
        .map(|i| {
            let mut best = Best::new();
            tree.search(0, points.len(), 0, i as u32, points[i], &mut best);
            best.mean()
        })
        .collect()
}

fn build(points: &[[f32; 3]], idx: &mut [u32], depth: usize) {
    if idx.len() <= LEAF {
        return;
    }
    let axis = depth % 3;
    let mid = idx.len() / 2;
    idx.select_nth_unstable_by(mid, |&a, &b| {
        points[a as usize][axis].total_cmp(&points[b as usize][axis])
    });
    // The median stays at `mid` (the node's own point); only the halves beside it recurse,
    // so the split value read back by `search` is this level's median.
    let (lo, hi) = idx.split_at_mut(mid);
    build(points, lo, depth + 1);
    build(points, &mut hi[1..], depth + 1);
}

struct Tree<'a> {
    points: &'a [[f32; 3]],
    idx: &'a [u32],
}

/// The K smallest squared distances so far, ascending.
struct Best {
    d: [f32; K],
    n: usize,
}

impl Best {
    fn new() -> Best {
        Best {
            d: [f32::INFINITY; K],
            n: 0,
        }
    }

    fn worst(&self) -> f32 {
        if self.n < K {
            f32::INFINITY
        } else {
            self.d[K - 1]
        }
    }

    fn push(&mut self, d: f32) {
        if d >= self.worst() {
            return;
        }
        let mut j = self.n.min(K - 1);
        self.d[j] = d;
        while j > 0 && self.d[j - 1] > self.d[j] {
            self.d.swap(j - 1, j);
            j -= 1;
        }
        self.n = (self.n + 1).min(K);
    }

    fn mean(&self) -> f32 {
        if self.n == 0 {
            0.0
        } else {
            self.d[..self.n].iter().sum::<f32>() / self.n as f32
        }
    }
}

fn dist2(a: [f32; 3], b: [f32; 3]) -> f32 {
    let (x, y, z) = (a[0] - b[0], a[1] - b[1], a[2] - b[2]);
    x * x + y * y + z * z
}

impl Tree<'_> {
    /// Searches `idx[start..end]`, built at `depth`, for neighbours of `q` (point `me`).
    fn search(
        &self,
        start: usize,
        end: usize,
        depth: usize,
        me: u32,
        q: [f32; 3],
        best: &mut Best,
    ) {
        if end - start <= LEAF {
            for &j in &self.idx[start..end] {
                if j != me {
                    best.push(dist2(q, self.points[j as usize]));
                }
            }
            return;
        }
        let axis = depth % 3;
        let mid = start + (end - start) / 2;
        let node = self.idx[mid];
        let split = self.points[node as usize][axis];
        if node != me {
            best.push(dist2(q, self.points[node as usize]));
        }
        let diff = q[axis] - split;
        // [start, mid) holds coordinates ≤ split, (mid, end) ≥ split.
        let (near, far) = if diff < 0.0 {
            ((start, mid), (mid + 1, end))
        } else {
            ((mid + 1, end), (start, mid))
        };
        self.search(near.0, near.1, depth + 1, me, q, best);
        if diff * diff < best.worst() {
            self.search(far.0, far.1, depth + 1, me, q, best);
        }
    }
}

/// Gaussians at `xyz` with colours `rgb` (see the module doc), storing SH degree `sh_degree`.
pub fn from_points(
    xyz: &[[f32; 3]],
    rgb: &[[u8; 3]],
    sh_degree: u32,
) -> Result<Gaussians, InitError> {
    if sh_degree > MAX_SH_DEGREE {
        return Err(InitError::ShDegree(sh_degree));
    }
    if xyz.is_empty() {
        return Err(InitError::NoPoints);
    }
    assert_eq!(xyz.len(), rgb.len(), "one colour per point");
    let d2 = knn_mean_sq_dist(xyz);
    let k = sh_coeffs(sh_degree);
    let mut sh = vec![[0.0f32; 3]; xyz.len() * k];
    for (i, c) in rgb.iter().enumerate() {
        sh[i * k] = c.map(|v| rgb_to_sh_dc(v as f32 / 255.0));
    }
    Ok(Gaussians {
        means: xyz.to_vec(),
        log_scales: d2
            .iter()
            .map(|&d| [d.max(MIN_DIST2).sqrt().ln(); 3])
            .collect(),
        rotations: vec![[1.0, 0.0, 0.0, 0.0]; xyz.len()],
        logit_opacities: vec![logit(INITIAL_OPACITY); xyz.len()],
        sh_degree,
        sh,
    })
}

/// `n` random Gaussians in the box `centre ± half_side` (see the module doc), kNN scales.
pub fn random_in_box(
    n: usize,
    centre: [f64; 3],
    half_side: f64,
    sh_degree: u32,
    rng: &mut Rng,
) -> Result<Gaussians, InitError> {
    let xyz: Vec<[f32; 3]> = (0..n)
        .map(|_| {
            std::array::from_fn(|a| {
                rng.uniform(centre[a] - half_side, centre[a] + half_side) as f32
            })
        })
        .collect();
    let mut g = from_points(&xyz, &vec![[0; 3]; n], sh_degree)?;
    let k = sh_coeffs(sh_degree);
    for i in 0..n {
        g.sh[i * k] = std::array::from_fn(|_| rng.next_f32() / 255.0);
    }
    Ok(g)
}

/// Ratio of camera distance to box half-side on NeRF-synthetic scenes (4.03 / 1.3).
const CAMERA_DISTANCE_PER_HALF_SIDE: f64 = 3.1;

/// The sky sphere's radius in scene extents (`gs-train --sky-points`; module doc).
pub const SKY_RADIUS_PER_EXTENT: f64 = 10.0;
/// The sky points' colour before training: a light grey (each learns its own).
const SKY_GREY: u8 = 200;

/// The sky of a scene whose cameras have centroid `centre` and extent `extent`: the sphere
/// about `centre` of radius [`SKY_RADIUS_PER_EXTENT`] × `extent` (centre, radius).
pub fn sky_sphere(centre: [f64; 3], extent: f64) -> ([f64; 3], f64) {
    (centre, SKY_RADIUS_PER_EXTENT * extent)
}

/// The far field of a run with a sky ([`super::densify::DensifyConfig::far_field`]): beyond
/// half the sky's radius, five extents from the cameras' centroid, where every sky point lies
/// and of the scene only what is that far (distant landmarks, which the same rules suit).
pub fn sky_far_field(centre: [f64; 3], extent: f64) -> super::densify::FarField {
    let (centre, radius) = sky_sphere(centre, extent);
    super::densify::FarField {
        centre,
        radius: 0.5 * radius,
    }
}

/// `n` points spread evenly over the sphere of radius `radius` about `centre`: a Fibonacci
/// lattice (point `i` at height `1 − (2i + 1)/n`, turned by the golden angle from the last),
/// so every direction from the scene has sky the same distance away. Deterministic.
pub fn sky_points(centre: [f64; 3], radius: f64, n: usize) -> Vec<[f32; 3]> {
    let golden = std::f64::consts::PI * (3.0 - 5f64.sqrt());
    (0..n)
        .map(|i| {
            let z = 1.0 - (2 * i + 1) as f64 / n as f64;
            let r = (1.0 - z * z).max(0.0).sqrt();
            let (sin, cos) = (golden * i as f64).sin_cos();
            let d = [r * cos, r * sin, z];
            std::array::from_fn(|k| (centre[k] + radius * d[k]) as f32)
        })
        .collect()
}

/// The random box of a scene (see the module doc): (centre, half-side).
pub fn random_box(pack: &Pack) -> ([f64; 3], f64) {
    let cams: Vec<Camera> = pack.manifest().views.iter().map(|v| v.camera).collect();
    let s = &pack.manifest().scene;
    random_box_for(&cams, s.camera_centroid, s.extent)
}

/// [`random_box`] from cameras, their centroid and the scene extent.
pub fn random_box_for(cams: &[Camera], centroid: [f64; 3], extent: f64) -> ([f64; 3], f64) {
    if cams.is_empty() {
        return (centroid, extent / 3.3);
    }
    // Σ (I − d dᵀ) x = Σ (I − d dᵀ) c: the point nearest (least squares) to every optical axis.
    let mut a = [[0.0f64; 3]; 3];
    let mut b = [0.0f64; 3];
    let mut mean_dir = [0.0f64; 3];
    let n = cams.len() as f64;
    for cam in cams {
        let c = cam.centre();
        // Camera z (forward, OpenCV) in world coordinates is the third row of R.
        let d = cam.world_to_camera.rotation[2];
        for i in 0..3 {
            mean_dir[i] += d[i] / n;
            for j in 0..3 {
                let p = f64::from(u8::from(i == j)) - d[i] * d[j];
                a[i][j] += p / n;
                b[i] += p * c[j] / n;
            }
        }
    }
    let det = a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
        - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
        + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
    // The eigenvalues of the averaged projector lie in [0, 1] and sum to 2; det < 1e-4 means
    // one of them is tiny: the axes are nearly parallel and the intersection is undefined.
    let centre = if det > 1e-4 {
        let inv_det = 1.0 / det;
        let cof = |r0: usize, r1: usize, c0: usize, c1: usize| {
            a[r0][c0] * a[r1][c1] - a[r0][c1] * a[r1][c0]
        };
        let inv = [
            [cof(1, 2, 1, 2), -cof(0, 2, 1, 2), cof(0, 1, 1, 2)],
            [-cof(1, 2, 0, 2), cof(0, 2, 0, 2), -cof(0, 1, 0, 2)],
            [cof(1, 2, 0, 1), -cof(0, 2, 0, 1), cof(0, 1, 0, 1)],
        ];
        std::array::from_fn(|i| inv_det * (inv[i][0] * b[0] + inv[i][1] * b[1] + inv[i][2] * b[2]))
    } else {
        let len = (mean_dir[0].powi(2) + mean_dir[1].powi(2) + mean_dir[2].powi(2))
            .sqrt()
            .max(1e-12);
        std::array::from_fn(|i| centroid[i] + extent / 1.1 * mean_dir[i] / len)
    };
    let mean_dist = cams
        .iter()
        .map(|cam| {
            let c = cam.centre();
            ((c[0] - centre[0]).powi(2) + (c[1] - centre[1]).powi(2) + (c[2] - centre[2]).powi(2))
                .sqrt()
        })
        .sum::<f64>()
        / n;
    let half = mean_dist / CAMERA_DISTANCE_PER_HALF_SIDE;
    if centre.iter().all(|v| v.is_finite()) && half.is_finite() && half > 0.0 {
        (centre, half)
    } else {
        (centroid, extent / 3.3)
    }
}

/// Initial Gaussians for `pack`: its SfM points (the cloud named "sfm", or every cloud when
/// none has that name), or `random_points` random ones when it has none; at most
/// `max_gaussians` of either (SfM points by [`stratified_subsample`]). [`plan`] says what this
/// builds before any work.
pub fn from_pack(
    pack: &Pack,
    sh_degree: u32,
    random_points: usize,
    max_gaussians: usize,
    rng: &mut Rng,
) -> Result<Gaussians, InitError> {
    from_pack_with_sky(pack, sh_degree, random_points, max_gaussians, 0, rng)
}

/// [`from_pack`] with `sky` sky points after the scene's ([`sky_points`] on the pack's
/// [`sky_sphere`]): the scene's points are capped at `max_gaussians − sky`.
pub fn from_pack_with_sky(
    pack: &Pack,
    sh_degree: u32,
    random_points: usize,
    max_gaussians: usize,
    sky: usize,
    rng: &mut Rng,
) -> Result<Gaussians, InitError> {
    let mut g = scene_from_pack(
        pack,
        sh_degree,
        random_points,
        max_gaussians.saturating_sub(sky),
        rng,
    )?;
    if sky > 0 {
        let s = &pack.manifest().scene;
        let (centre, radius) = sky_sphere(s.camera_centroid, s.extent);
        let xyz = sky_points(centre, radius, sky);
        g.append(&from_points(&xyz, &vec![[SKY_GREY; 3]; sky], sh_degree)?);
    }
    Ok(g)
}

/// The scene's part of [`from_pack_with_sky`].
fn scene_from_pack(
    pack: &Pack,
    sh_degree: u32,
    random_points: usize,
    max_gaussians: usize,
    rng: &mut Rng,
) -> Result<Gaussians, InitError> {
    let m = pack.manifest();
    let (clouds, total) = m.sfm_clouds();
    if m.scene.no_sfm_points || total == 0 {
        let (centre, half) = random_box(pack);
        return random_in_box(
            random_points.min(max_gaussians),
            centre,
            half,
            sh_degree,
            rng,
        );
    }
    let name = pack.dir().display().to_string();
    let mut xyz = Vec::new();
    let mut rgb = Vec::new();
    let mut buf = Vec::new();
    for c in clouds {
        let cloud = &m.clouds[c];
        for k in 0..cloud.chunks.len() {
            let layout = crate::shard::PointChunkLayout::new(
                cloud.chunks[k].points as usize,
                cloud.has_labels,
                cloud.has_normals,
            );
            buf.resize(layout.total, 0u8);
            pack.read_chunk_into(c, k, &mut buf)
                .map_err(|source| InitError::Read {
                    pack: name.clone(),
                    source,
                })?;
            let chunk = crate::shard::PointChunkRef::new(layout, &buf).expect("sized above");
            for i in 0..chunk.len() {
                let p = chunk.xyz(i);
                if !p.iter().all(|v| v.is_finite()) {
                    return Err(InitError::NonFinite {
                        pack: name,
                        cloud: cloud.name.clone(),
                        chunk: k,
                        point: p,
                    });
                }
                xyz.push(p);
                rgb.push(chunk.rgb(i));
            }
        }
    }
    drop(buf);
    if max_gaussians < xyz.len() {
        // Held at once: the points (15 B each) and the keys (16 B), then the points and the
        // kept ones; the full arrays are freed before the model is built.
        let keep = stratified_subsample(&xyz, max_gaussians, rng);
        let sub_xyz: Vec<[f32; 3]> = keep.iter().map(|&i| xyz[i as usize]).collect();
        let sub_rgb: Vec<[u8; 3]> = keep.iter().map(|&i| rgb[i as usize]).collect();
        drop((xyz, rgb, keep));
        return from_points(&sub_xyz, &sub_rgb, sh_degree);
    }
    from_points(&xyz, &rgb, sh_degree)
}

/// What [`from_model`] did to a model read from a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelInit {
    /// Gaussians in the file.
    pub file_gaussians: u64,
    /// Gaussians kept (`file_gaussians` capped at `max_gaussians`).
    pub gaussians: u64,
    /// SH degree stored in the file.
    pub file_sh_degree: u32,
    /// The run's SH degree (the model is converted to it).
    pub sh_degree: u32,
}

impl ModelInit {
    /// One line for the user: what the initial model is and what was changed.
    pub fn line(&self, path: &std::path::Path) -> String {
        let mut s = format!(
            "initial model: {} Gaussians from {}",
            self.gaussians,
            path.display()
        );
        if self.gaussians < self.file_gaussians {
            s += &format!(
                " (of its {}: --max-gaussians {} keeps them spread over the scene by stratified \
                 sampling)",
                self.file_gaussians, self.gaussians
            );
        }
        if self.file_sh_degree > self.sh_degree {
            s += &format!(
                "; its SH degree {} is cut to the run's {} (higher bands dropped)",
                self.file_sh_degree, self.sh_degree
            );
        } else if self.file_sh_degree < self.sh_degree {
            s += &format!(
                "; its SH degree {} is raised to the run's {} (new bands start at 0)",
                self.file_sh_degree, self.sh_degree
            );
        }
        s
    }
}

/// The model `g` adapted to a run of `sh_degree` capped at `max_gaussians` (see the module
/// doc); `rng` draws the subsample.
pub fn from_model(
    g: Gaussians,
    sh_degree: u32,
    max_gaussians: usize,
    rng: &mut Rng,
) -> Result<(Gaussians, ModelInit), InitError> {
    if sh_degree > MAX_SH_DEGREE {
        return Err(InitError::ShDegree(sh_degree));
    }
    if g.is_empty() {
        return Err(InitError::NoPoints);
    }
    let report = ModelInit {
        file_gaussians: g.len() as u64,
        gaussians: g.len().min(max_gaussians) as u64,
        file_sh_degree: g.sh_degree,
        sh_degree,
    };
    let keep: Vec<u32> = stratified_subsample(&g.means, max_gaussians, rng);
    let mut out = g.gather(&keep, None);
    out.set_sh_degree(sh_degree);
    Ok((out, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::camera::Projection;

    fn model(n: usize, sh_degree: u32) -> Gaussians {
        let k = sh_coeffs(sh_degree);
        Gaussians {
            means: (0..n)
                .map(|i| [i as f32, (i * i % 7) as f32, 0.5])
                .collect(),
            log_scales: (0..n).map(|i| [-(i as f32), -1.0, -2.0]).collect(),
            rotations: (0..n).map(|i| [1.0, i as f32, 0.0, 0.0]).collect(),
            logit_opacities: (0..n).map(|i| i as f32 - 3.0).collect(),
            sh_degree,
            sh: (0..n * k).map(|j| [j as f32, -(j as f32), 0.25]).collect(),
        }
    }

    #[test]
    fn from_model_converts_sh_degree_and_caps() {
        let g = model(10, 1);
        // Same degree, no cap: unchanged.
        let (same, r) = from_model(g.clone(), 1, 100, &mut Rng::new(1)).unwrap();
        assert_eq!(same, g);
        assert_eq!((r.file_gaussians, r.gaussians), (10, 10));
        // Raised: the model's 4 coefficients, then zeros.
        let (up, r) = from_model(g.clone(), 3, 100, &mut Rng::new(1)).unwrap();
        assert_eq!((r.file_sh_degree, r.sh_degree), (1, 3));
        assert_eq!(up.sh.len(), 10 * 16);
        for i in 0..10 {
            assert_eq!(&up.sh[i * 16..i * 16 + 4], &g.sh[i * 4..i * 4 + 4]);
            assert!(up.sh[i * 16 + 4..(i + 1) * 16]
                .iter()
                .all(|c| *c == [0.0; 3]));
        }
        // Lowered: only the DC terms.
        let (down, _) = from_model(g.clone(), 0, 100, &mut Rng::new(1)).unwrap();
        assert_eq!(down.sh, (0..10).map(|i| g.sh[i * 4]).collect::<Vec<_>>());
        // Capped: exactly the cap, each kept Gaussian whole, the draw the stratified one.
        let (cap, r) = from_model(g.clone(), 1, 4, &mut Rng::new(7)).unwrap();
        assert_eq!((r.file_gaussians, r.gaussians, cap.len()), (10, 4, 4));
        let keep = stratified_subsample(&g.means, 4, &mut Rng::new(7));
        for (j, &i) in keep.iter().enumerate() {
            let i = i as usize;
            assert_eq!(cap.means[j], g.means[i]);
            assert_eq!(cap.logit_opacities[j], g.logit_opacities[i]);
            assert_eq!(&cap.sh[j * 4..j * 4 + 4], &g.sh[i * 4..i * 4 + 4]);
        }
        assert!(r
            .line(std::path::Path::new("m.ply"))
            .contains("--max-gaussians 4"));
        assert!(matches!(
            from_model(Gaussians::default(), 0, 4, &mut Rng::new(7)),
            Err(InitError::NoPoints)
        ));
    }
    use crate::scene::sh::SH_C0;

    fn brute(points: &[[f32; 3]]) -> Vec<f32> {
        points
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let mut d: Vec<f32> = points
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, &q)| dist2(p, q))
                    .collect();
                d.sort_by(f32::total_cmp);
                let k = d.len().min(K);
                if k == 0 {
                    0.0
                } else {
                    d[..k].iter().sum::<f32>() / k as f32
                }
            })
            .collect()
    }

    #[test]
    fn kdtree_matches_brute_force() {
        let mut rng = Rng::new(5);
        // Clustered + duplicated points stress the pruning and ties.
        let mut pts: Vec<[f32; 3]> = (0..700)
            .map(|i| {
                let c = (i % 4) as f32 * 3.0;
                [
                    c + rng.next_f32(),
                    rng.next_f32() * 0.1,
                    rng.next_f32() * 5.0,
                ]
            })
            .collect();
        pts.extend_from_within(..20);
        let fast = knn_mean_sq_dist(&pts);
        let slow = brute(&pts);
        for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
            assert!((a - b).abs() <= 1e-6 * b.max(1e-6), "point {i}: {a} vs {b}");
        }
        for n in 1..5 {
            assert_eq!(knn_mean_sq_dist(&pts[..n]), brute(&pts[..n]));
        }
    }

    #[test]
    fn point_init_follows_3dgs() {
        // Unit grid spacing: the 3 nearest neighbours are at distance 1.
        let mut xyz = vec![];
        for x in 0..4 {
            for y in 0..4 {
                for z in 0..4 {
                    xyz.push([x as f32, y as f32, z as f32]);
                }
            }
        }
        let rgb = vec![[255, 0, 128]; xyz.len()];
        let g = from_points(&xyz, &rgb, 2).unwrap();
        assert_eq!(g.sh.len(), 64 * 9);
        assert_eq!(g.log_scales[21], [0.0; 3], "ln √1 = 0");
        let c0 = SH_C0 as f32;
        assert!((g.sh[0][0] - 0.5 / c0).abs() < 1e-6);
        assert!((g.sh[0][1] + 0.5 / c0).abs() < 1e-6);
        assert_eq!(g.sh[1], [0.0; 3]);
        assert!((1.0 / (1.0 + (-g.logit_opacities[0]).exp()) - 0.1).abs() < 1e-6);
        assert_eq!(g.rotations[5], [1.0, 0.0, 0.0, 0.0]);
        // Duplicates clamp at 1e-7.
        let g = from_points(&[[1.0; 3]; 4], &[[0; 3]; 4], 0).unwrap();
        assert!((g.log_scales[0][0] - MIN_DIST2.sqrt().ln()).abs() < 1e-6);
        assert!(matches!(from_points(&[], &[], 0), Err(InitError::NoPoints)));
    }

    #[test]
    fn random_init_stays_in_the_box() {
        let mut rng = Rng::new(1);
        let g = random_in_box(2000, [1.0, 2.0, 3.0], 0.5, 1, &mut rng).unwrap();
        assert_eq!(g.len(), 2000);
        for m in &g.means {
            for a in 0..3 {
                let c = [1.0, 2.0, 3.0][a];
                assert!((c - 0.5..c + 0.5).contains(&m[a]));
            }
        }
        let k = sh_coeffs(1);
        assert!(g
            .sh
            .chunks(k)
            .all(|c| c[0].iter().all(|v| (0.0..1.0 / 255.0).contains(v))));
    }

    #[test]
    fn from_pack_streams_sfm_points_or_falls_back_to_random() {
        let dir = tempfile::tempdir().unwrap();
        let with = dir.path().join("with");
        crate::synth::packs::write_tiny_pack(&with).unwrap();
        let pack = Pack::open(&with).unwrap();
        let g = from_pack(&pack, 1, 50, usize::MAX, &mut Rng::new(0)).unwrap();
        // The seed cloud: 100 points (i, 0.5, −1) with colour (i, i, i); neighbours 1 apart.
        assert_eq!(g.len(), 100);
        assert_eq!(g.means[7], [7.0, 0.5, -1.0]);
        let c0 = SH_C0 as f32;
        assert!((g.sh[7 * 4][0] - (7.0 / 255.0 - 0.5) / c0).abs() < 1e-6);
        // Interior point: neighbours at distances 1, 1, 2 → mean d² = 2.
        assert!((g.log_scales[50][0] - 2.0f32.sqrt().ln()).abs() < 1e-6);

        let without = dir.path().join("without");
        crate::synth::packs::write_noise_pack(&without, 3, 8, 6, crate::shard::Codec::Raw, 1)
            .unwrap();
        let pack = Pack::open(&without).unwrap();
        assert!(pack.manifest().scene.no_sfm_points);
        let g = from_pack(&pack, 0, 300, usize::MAX, &mut Rng::new(0)).unwrap();
        assert_eq!(g.len(), 300);
        let (centre, half) = random_box(&pack);
        assert!(g
            .means
            .iter()
            .all(|m| (0..3).all(|a| (m[a] as f64 - centre[a]).abs() <= half + 1e-6)));
    }

    #[test]
    fn random_box_is_centred_where_the_cameras_look() {
        use crate::scene::camera::{Intrinsics, Pose};
        let k = Intrinsics {
            fx: 100.0,
            fy: 100.0,
            cx: 50.0,
            cy: 50.0,
        };
        let target = [1.0, -2.0, 0.5];
        // Cameras on a 90° arc of radius 4.03 around `target`, all looking at it: the
        // centroid of such an arc is far from the target, the box must not be.
        let cams: Vec<Camera> = (0..7)
            .map(|i| {
                let a = i as f64 / 6.0 * std::f64::consts::FRAC_PI_2;
                let c = [
                    target[0] + 4.03 * a.cos(),
                    target[1] + 4.03 * a.sin(),
                    target[2],
                ];
                let f = [target[0] - c[0], target[1] - c[1], target[2] - c[2]].map(|v| v / 4.03);
                let up = [0.0, 0.0, 1.0];
                // x = f × up (right), y = f × x (down): a right-handed OpenCV frame.
                let x = [
                    f[1] * up[2] - f[2] * up[1],
                    f[2] * up[0] - f[0] * up[2],
                    f[0] * up[1] - f[1] * up[0],
                ];
                let y = [
                    f[1] * x[2] - f[2] * x[1],
                    f[2] * x[0] - f[0] * x[2],
                    f[0] * x[1] - f[1] * x[0],
                ];
                let r = [x, y, f];
                let t =
                    std::array::from_fn(|i| -(r[i][0] * c[0] + r[i][1] * c[1] + r[i][2] * c[2]));
                let cam = Camera {
                    width: 100,
                    height: 100,
                    intrinsics: k,
                    world_to_camera: Pose {
                        rotation: r,
                        translation: t,
                    },
                    projection: Projection::Pinhole,
                };
                cam.validate().unwrap();
                cam
            })
            .collect();
        let n = cams.len() as f64;
        let centroid: [f64; 3] =
            std::array::from_fn(|a| cams.iter().map(|c| c.centre()[a]).sum::<f64>() / n);
        let (centre, half) = random_box_for(&cams, centroid, 4.0);
        for a in 0..3 {
            assert!((centre[a] - target[a]).abs() < 1e-9, "{centre:?}");
        }
        assert!((half - 1.3).abs() < 1e-9, "{half}");
        // Parallel axes (forward-facing): in front of the centroid, not at it.
        let fwd: Vec<Camera> = (0..3)
            .map(|i| Camera {
                width: 100,
                height: 100,
                intrinsics: k,
                world_to_camera: Pose {
                    translation: [i as f64, 0.0, 0.0],
                    ..Pose::IDENTITY
                },
                projection: Projection::Pinhole,
            })
            .collect();
        let (c2, _) = random_box_for(&fwd, [-1.0, 0.0, 0.0], 1.1);
        assert!(
            (c2[2] - 1.0).abs() < 1e-9 && (c2[0] + 1.0).abs() < 1e-9,
            "{c2:?}"
        );
    }

    #[test]
    fn subsampling_is_seeded_exact_and_covers_the_scene() {
        // A 20³ grid listed x-major: the first 800 points would all have x < 2.
        let mut xyz = vec![];
        for x in 0..20 {
            for y in 0..20 {
                for z in 0..20 {
                    xyz.push([x as f32, y as f32, z as f32]);
                }
            }
        }
        let a = stratified_subsample(&xyz, 800, &mut Rng::new(3));
        assert_eq!(a.len(), 800);
        assert!(a.windows(2).all(|w| w[0] < w[1]), "ascending, no repeats");
        assert_eq!(a, stratified_subsample(&xyz, 800, &mut Rng::new(3)));
        assert_ne!(a, stratified_subsample(&xyz, 800, &mut Rng::new(4)));
        // Every octant of the cube keeps its share (100 of 1000 points each), within a run.
        let mut octants = [0usize; 8];
        for &i in &a {
            let p = xyz[i as usize];
            let o = (p[0] >= 10.0) as usize
                | ((p[1] >= 10.0) as usize) << 1
                | ((p[2] >= 10.0) as usize) << 2;
            octants[o] += 1;
        }
        assert!(
            octants.iter().all(|&c| (99..=101).contains(&c)),
            "{octants:?}"
        );
        // Every x slab of width 4 is represented in proportion (160 ± 20).
        let mut slabs = [0usize; 5];
        for &i in &a {
            slabs[xyz[i as usize][0] as usize / 4] += 1;
        }
        assert!(slabs.iter().all(|&c| (140..=180).contains(&c)), "{slabs:?}");
        assert_eq!(
            stratified_subsample(&xyz[..5], 9, &mut Rng::new(0)),
            vec![0, 1, 2, 3, 4]
        );
        // Degenerate extents (all points on a line or one spot) still give exactly n.
        let line: Vec<[f32; 3]> = (0..50).map(|i| [i as f32, 0.0, 0.0]).collect();
        assert_eq!(stratified_subsample(&line, 7, &mut Rng::new(1)).len(), 7);
        let spot = vec![[1.0f32; 3]; 50];
        assert_eq!(stratified_subsample(&spot, 7, &mut Rng::new(1)).len(), 7);
    }

    #[test]
    fn max_gaussians_caps_the_initial_model_as_planned() {
        let dir = tempfile::tempdir().unwrap();
        let with = dir.path().join("with");
        crate::synth::packs::write_tiny_pack(&with).unwrap();
        let pack = Pack::open(&with).unwrap();
        let p = plan(&pack, 50, 30, 0);
        assert_eq!(
            p,
            InitPlan {
                points: 100,
                gaussians: 30,
                random: false,
                sky: 0
            }
        );
        assert!(p.subsampled());
        let g = from_pack(&pack, 0, 50, 30, &mut Rng::new(9)).unwrap();
        assert_eq!(g.len(), 30);
        // The seed cloud lies on a line x = 0..99: the kept points span it.
        let xs: Vec<f32> = g.means.iter().map(|m| m[0]).collect();
        assert!(
            xs.iter().any(|&x| x < 10.0) && xs.iter().any(|&x| x >= 90.0),
            "{xs:?}"
        );
        let again = from_pack(&pack, 0, 50, 30, &mut Rng::new(9)).unwrap();
        assert_eq!(g.means, again.means);
        assert!(!plan(&pack, 50, 1000, 0).subsampled());

        let without = dir.path().join("without");
        crate::synth::packs::write_noise_pack(&without, 3, 8, 6, crate::shard::Codec::Raw, 1)
            .unwrap();
        let pack = Pack::open(&without).unwrap();
        let p = plan(&pack, 300, 120, 0);
        assert!(p.random && p.gaussians == 120 && !p.subsampled());
        assert_eq!(
            from_pack(&pack, 0, 300, 120, &mut Rng::new(0))
                .unwrap()
                .len(),
            120
        );
    }

    /// Sky points lie on the sky sphere, evenly (every octant holds its share), after the
    /// scene's points, which the cap leaves room for; their scales come from their own
    /// spacing, and the far field holds them.
    #[test]
    fn sky_points_surround_the_scene_after_its_points() {
        let (centre, radius) = sky_sphere([1.0, -2.0, 3.0], 4.0);
        assert_eq!(radius, 40.0);
        let pts = sky_points(centre, radius, 4000);
        let mut octants = [0usize; 8];
        for p in &pts {
            let d: [f64; 3] = std::array::from_fn(|k| f64::from(p[k]) - centre[k]);
            let r = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
            assert!((r - radius).abs() < 1e-4 * radius, "{r}");
            octants[usize::from(d[0] > 0.0)
                | usize::from(d[1] > 0.0) << 1
                | usize::from(d[2] > 0.0) << 2] += 1;
        }
        assert!(octants.iter().all(|&c| c.abs_diff(500) < 15), "{octants:?}");
        assert_eq!(sky_points(centre, radius, 3), sky_points(centre, radius, 3));

        let dir = tempfile::tempdir().unwrap();
        crate::synth::packs::write_tiny_pack(dir.path()).unwrap();
        let pack = Pack::open(dir.path()).unwrap();
        let p = plan(&pack, 50, 60, 40);
        assert_eq!((p.points, p.gaussians, p.sky), (100, 60, 40));
        assert!(p.subsampled());
        let g = from_pack_with_sky(&pack, 1, 50, 60, 40, &mut Rng::new(9)).unwrap();
        assert_eq!(g.len(), 60);
        let scene = from_pack(&pack, 1, 50, 20, &mut Rng::new(9)).unwrap();
        assert_eq!(
            g.means[..20],
            scene.means[..],
            "the scene's points come first"
        );
        let s = &pack.manifest().scene;
        let far = sky_far_field(s.camera_centroid, s.extent);
        assert!(g.means[20..].iter().all(|&m| far.contains(m)));
        // 40 points on a sphere of radius 10 extents: spaced about 2.8 extents apart.
        let spacing = (4.0 * std::f64::consts::PI / 40.0).sqrt() * 10.0 * s.extent;
        for ls in &g.log_scales[20..] {
            let scale = f64::from(ls[0].exp());
            assert!(
                scale > 0.3 * spacing && scale < 1.5 * spacing,
                "{scale} vs {spacing}"
            );
        }
        assert!(g.sh[20 * 4..]
            .chunks(4)
            .all(|c| c[0] == [rgb_to_sh_dc(200.0 / 255.0); 3]));
    }
}
