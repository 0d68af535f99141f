//! A sparse truncated signed distance volume fused from depth maps (Curless & Levoy's running
//! average, in blocks allocated only where a depth map saw a surface), and its surface.
//!
//! # Layout
//! Voxel `g = (i, j, k)` is the grid point `g · voxel_size` of the model's frame. Voxels live in
//! blocks of [`BLOCK`]³, allocated when a view's surface point lies within the truncation
//! distance of them and never freed; a block holds per voxel the signed distance over the
//! truncation distance (`tsdf ∈ [−1, 1]`, positive in front of the surface), the number of
//! views averaged into it, and their mean colour: [`BLOCK_BYTES`] each.
//!
//! # Fusion (per view)
//! A voxel whose grid point projects into a pixel with a depth `d` (camera-space z, as
//! [`crate::render::depth`] renders it) and an alpha of at least [`TsdfParams::min_alpha`],
//! with `d` below [`TsdfParams::depth_trunc`], has the signed distance `d − z` along the
//! optical axis (z its own depth); unless it lies more than the truncation distance behind
//! the surface (hidden: nothing is known of it), `min(1, (d − z)/trunc)` and the pixel's
//! colour join its running averages. Only the blocks that the view's own surface points
//! allocate or touch are updated (as Open3D's scalable volume does): space a view sees empty
//! far in front of its surface is not carved.
//!
//! # Invariants
//! - Fusion is deterministic and independent of the thread count: each voxel's averages are
//!   updated in view order, and blocks are allocated in sorted key order per view.
//! - With a limit ([`TsdfVolume::with_limit`]) the blocks never hold more than it: a view whose
//!   new blocks would pass it is refused before any of it is fused.
//! - [`TsdfVolume::mesh`] emits a triangle only inside a cube whose eight voxels were all
//!   observed (weight > 0) and none truncated (`|tsdf| < 1`): zero crossings between voxels
//!   that saw different surfaces, or none, are not surfaces.

use std::collections::HashMap;

use rayon::prelude::*;

use super::cubes::{fan_apex, polygonise, triangulate, EDGES};
use super::Mesh;
use crate::scene::camera::Camera;

/// Voxels per block side.
pub const BLOCK: usize = 8;
const VOXELS: usize = BLOCK * BLOCK * BLOCK;
/// Bytes of one block's voxels (`tsdf`, weight, colour: 5 × f32 each).
pub const BLOCK_BYTES: u64 = (VOXELS * 5 * 4) as u64;

/// The fusion's sizes, in the model's units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TsdfParams {
    /// Grid spacing.
    pub voxel_size: f64,
    /// Truncation distance of the signed distance (several voxels).
    pub sdf_trunc: f64,
    /// Depths beyond this are not fused (the background, the sky).
    pub depth_trunc: f64,
    /// Pixels whose render covers less than this (alpha) are not fused.
    pub min_alpha: f32,
}

/// One view to fuse: its camera, its depth map (camera-space z, NaN where nothing was drawn),
/// the render's alpha and its colour over a black background (premultiplied: the straight
/// colour is `rgb / alpha`), all row-major at the camera's size.
#[derive(Clone, Copy, Debug)]
pub struct FusedView<'a> {
    pub camera: &'a Camera,
    pub depth: &'a [f32],
    pub alpha: &'a [f32],
    pub rgb: &'a [f32],
}

struct Block {
    tsdf: [f32; VOXELS],
    weight: [f32; VOXELS],
    colour: [[f32; 3]; VOXELS],
}

impl Block {
    fn new() -> Box<Block> {
        Box::new(Block {
            tsdf: [0.0; VOXELS],
            weight: [0.0; VOXELS],
            colour: [[0.0; 3]; VOXELS],
        })
    }
}

/// The sparse volume (see the module doc).
pub struct TsdfVolume {
    params: TsdfParams,
    index: HashMap<[i32; 3], usize>,
    keys: Vec<[i32; 3]>,
    blocks: Vec<Box<Block>>,
    views: usize,
    /// [`TsdfVolume::with_limit`]'s bound on the blocks' bytes.
    max_bytes: u64,
}

/// Why a view cannot be fused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TsdfError {
    #[error(
        "a {width}x{height} view came with {depth} depths, {alpha} alphas and {rgb} colour \
         values (expected {pixels}, {pixels} and {})", 3 * pixels
    )]
    Shape {
        width: u32,
        height: u32,
        pixels: usize,
        depth: usize,
        alpha: usize,
        rgb: usize,
    },
    #[error(
        "the volume would grow to {} with the next view ({views} fused so far), beyond its \
         limit of {}; pass a voxel size of at least {suggested:.4e} (now {voxel_size:.4e}; the \
         volume shrinks as the voxel's square) or a larger limit",
        crate::budget::format_size(*bytes),
        crate::budget::format_size(*limit)
    )]
    Budget {
        bytes: u64,
        limit: u64,
        views: usize,
        voxel_size: f64,
        suggested: f64,
    },
    #[error(
        "voxel size {voxel_size}, truncation {sdf_trunc} and depth cut-off {depth_trunc} must \
         be positive and finite, the truncation at least one voxel"
    )]
    Params {
        voxel_size: f64,
        sdf_trunc: f64,
        depth_trunc: f64,
    },
}

impl TsdfVolume {
    pub fn new(params: TsdfParams) -> Result<TsdfVolume, TsdfError> {
        let TsdfParams {
            voxel_size,
            sdf_trunc,
            depth_trunc,
            ..
        } = params;
        let ok = |x: f64| x.is_finite() && x > 0.0;
        if !(ok(voxel_size) && ok(sdf_trunc) && ok(depth_trunc)) || sdf_trunc < voxel_size {
            return Err(TsdfError::Params {
                voxel_size,
                sdf_trunc,
                depth_trunc,
            });
        }
        Ok(TsdfVolume {
            params,
            index: HashMap::new(),
            keys: Vec::new(),
            blocks: Vec::new(),
            views: 0,
            max_bytes: u64::MAX,
        })
    }

    /// Makes [`TsdfVolume::integrate`] refuse a view whose new blocks would take the volume's
    /// blocks past `max_bytes` ([`TsdfError::Budget`], nothing of that view fused).
    pub fn with_limit(mut self, max_bytes: u64) -> TsdfVolume {
        self.max_bytes = max_bytes;
        self
    }

    /// Allocated blocks.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes the allocated blocks hold (the index beside them is a few % more).
    pub fn bytes(&self) -> u64 {
        self.blocks.len() as u64 * BLOCK_BYTES
    }

    /// Views fused so far.
    pub fn views(&self) -> usize {
        self.views
    }

    /// Fuses one view (see the module doc).
    pub fn integrate(&mut self, view: &FusedView) -> Result<(), TsdfError> {
        let cam = view.camera;
        let pixels = cam.width as usize * cam.height as usize;
        if view.depth.len() != pixels || view.alpha.len() != pixels || view.rgb.len() != 3 * pixels
        {
            return Err(TsdfError::Shape {
                width: cam.width,
                height: cam.height,
                pixels,
                depth: view.depth.len(),
                alpha: view.alpha.len(),
                rgb: view.rgb.len(),
            });
        }
        let touched = self.allocate(view)?;
        let mut live = vec![false; self.blocks.len()];
        for &b in &touched {
            live[b] = true;
        }
        let params = self.params;
        let keys = &self.keys;
        let pose = cam.world_to_camera;
        self.blocks
            .par_iter_mut()
            .enumerate()
            .filter(|(b, _)| live[*b])
            .for_each(|(b, block)| {
                let origin = keys[b].map(|k| k as i64 * BLOCK as i64);
                for (((tsdf, weight), colour), offset) in block
                    .tsdf
                    .iter_mut()
                    .zip(block.weight.iter_mut())
                    .zip(block.colour.iter_mut())
                    .zip(offsets())
                {
                    let g = [0, 1, 2].map(|a| (origin[a] + offset[a]) as f64 * params.voxel_size);
                    let c = pose.transform(g);
                    let Some([u, w]) = cam.project_camera_point(c) else {
                        continue;
                    };
                    if !(u >= 0.0 && w >= 0.0) {
                        continue;
                    }
                    let (px, py) = (u as u64, w as u64);
                    if px >= u64::from(cam.width) || py >= u64::from(cam.height) {
                        continue;
                    }
                    let p = py as usize * cam.width as usize + px as usize;
                    let Some(d) = surface_depth(&params, view, p) else {
                        continue;
                    };
                    let sdf = d - c[2];
                    if sdf < -params.sdf_trunc {
                        continue;
                    }
                    let t = (sdf / params.sdf_trunc).min(1.0) as f32;
                    let a = view.alpha[p];
                    let rgb = [0, 1, 2].map(|k| (view.rgb[3 * p + k] / a).clamp(0.0, 1.0));
                    let w0 = *weight;
                    let w1 = w0 + 1.0;
                    *tsdf = (*tsdf * w0 + t) / w1;
                    for k in 0..3 {
                        colour[k] = (colour[k] * w0 + rgb[k]) / w1;
                    }
                    *weight = w1;
                }
            });
        self.views += 1;
        Ok(())
    }

    /// Allocates the blocks within the truncation distance of the view's surface points and
    /// returns the indices of all blocks so touched (sorted, unique); allocates nothing when
    /// the new blocks would take the volume past its limit.
    fn allocate(&mut self, view: &FusedView) -> Result<Vec<usize>, TsdfError> {
        let cam = view.camera;
        let (w, h) = (cam.width as usize, cam.height as usize);
        let to_world = cam.world_to_camera;
        let r = to_world.rotation;
        let t = to_world.translation;
        let block_size = self.params.voxel_size * BLOCK as f64;
        let reach = self.params.sdf_trunc;
        let params = self.params;
        let mut keys: Vec<[i32; 3]> = (0..h)
            .into_par_iter()
            .flat_map_iter(|y| {
                let mut row: Vec<[i32; 3]> = Vec::new();
                for x in 0..w {
                    let p = y * w + x;
                    let Some(d) = surface_depth(&params, view, p) else {
                        continue;
                    };
                    let Some(ray) = cam.pixel_ray(x as f64 + 0.5, y as f64 + 0.5) else {
                        continue;
                    };
                    if ray[2] <= 0.0 {
                        continue;
                    }
                    let s = d / ray[2];
                    let c = [ray[0] * s - t[0], ray[1] * s - t[1], ray[2] * s - t[2]];
                    // World point: Rᵀ (c − t).
                    let pw: [f64; 3] =
                        std::array::from_fn(|i| r[0][i] * c[0] + r[1][i] * c[1] + r[2][i] * c[2]);
                    let lo = pw.map(|k| ((k - reach) / block_size).floor());
                    let hi = pw.map(|k| ((k + reach) / block_size).floor());
                    if lo
                        .iter()
                        .chain(&hi)
                        .any(|k| k.abs() > f64::from(i32::MAX / 2))
                    {
                        continue;
                    }
                    for bz in lo[2] as i32..=hi[2] as i32 {
                        for by in lo[1] as i32..=hi[1] as i32 {
                            for bx in lo[0] as i32..=hi[0] as i32 {
                                let key = [bx, by, bz];
                                if row.last() != Some(&key) {
                                    row.push(key);
                                }
                            }
                        }
                    }
                }
                row.sort_unstable();
                row.dedup();
                row
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let new = keys.iter().filter(|k| !self.index.contains_key(*k)).count();
        let wanted = self.blocks.len() + new;
        if wanted as u64 * BLOCK_BYTES > self.max_bytes {
            // The volume's size goes as the inverse square of the voxel (blocks cover
            // surfaces): this voxel would have held what is allocated so far.
            let scale = (wanted as f64 * BLOCK_BYTES as f64 / self.max_bytes as f64).sqrt();
            return Err(TsdfError::Budget {
                bytes: wanted as u64 * BLOCK_BYTES,
                limit: self.max_bytes,
                views: self.views,
                voxel_size: self.params.voxel_size,
                suggested: self.params.voxel_size * scale,
            });
        }
        Ok(keys
            .into_iter()
            .map(|key| {
                *self.index.entry(key).or_insert_with(|| {
                    self.keys.push(key);
                    self.blocks.push(Block::new());
                    self.blocks.len() - 1
                })
            })
            .collect())
    }

    /// The fused surface: marching cubes over every cube of observed, untruncated voxels (see
    /// the module doc), vertices shared between cubes and blocks, each coloured by the mean
    /// colour of its edge's voxels.
    pub fn mesh(&self) -> Mesh {
        let mut order: Vec<usize> = (0..self.blocks.len()).collect();
        order.sort_unstable_by_key(|&b| self.keys[b]);
        let parts: Vec<Part> = order
            .par_iter()
            .map(|&b| self.block_surface(self.keys[b]))
            .collect();
        let mut mesh = Mesh::default();
        let mut ids: HashMap<EdgeKey, u32> = HashMap::new();
        for part in parts {
            let local: Vec<u32> = part
                .vertices
                .iter()
                .map(|(key, position, colour)| {
                    *ids.entry(*key).or_insert_with(|| {
                        mesh.positions.push(*position);
                        mesh.colours
                            .push(colour.map(|c| (c * 255.0).round().clamp(0.0, 255.0) as u8));
                        (mesh.positions.len() - 1) as u32
                    })
                })
                .collect();
            mesh.triangles
                .extend(part.triangles.iter().map(|t| t.map(|v| local[v as usize])));
        }
        mesh
    }

    /// The triangles of the cubes whose lowest corner lies in block `key` (their other corners
    /// may lie in the blocks after it along each axis).
    fn block_surface(&self, key: [i32; 3]) -> Part {
        const N: usize = BLOCK + 1;
        let origin = key.map(|k| i64::from(k) * BLOCK as i64);
        // The block's voxels and one layer of its +x, +y, +z neighbours' (absent blocks read as
        // unobserved voxels).
        let near: [Option<&Block>; 8] = std::array::from_fn(|n| {
            let key = [0, 1, 2].map(|a| key[a] + (n as i32 >> a & 1));
            self.index.get(&key).map(|&i| &*self.blocks[i])
        });
        let mut grid = vec![(0.0f32, 0.0f32, [0.0f32; 3]); N * N * N];
        for z in 0..N {
            for y in 0..N {
                for x in 0..N {
                    let (bx, by, bz) = (x / BLOCK, y / BLOCK, z / BLOCK);
                    if let Some(b) = near[bx | by << 1 | bz << 2] {
                        let v = x % BLOCK + BLOCK * (y % BLOCK + BLOCK * (z % BLOCK));
                        grid[x + N * (y + N * z)] = (b.tsdf[v], b.weight[v], b.colour[v]);
                    }
                }
            }
        }
        let mut part = Part::default();
        let mut local: HashMap<EdgeKey, u32> = HashMap::new();
        for z in 0..BLOCK {
            for y in 0..BLOCK {
                for x in 0..BLOCK {
                    let corner = |c: u8| {
                        let (dx, dy, dz) = (c & 1, c >> 1 & 1, c >> 2 & 1);
                        (
                            x + dx as usize,
                            y + dy as usize,
                            z + dz as usize,
                            grid[(x + dx as usize)
                                + N * ((y + dy as usize) + N * (z + dz as usize))],
                        )
                    };
                    let values: [f32; 8] = std::array::from_fn(|c| corner(c as u8).3 .0);
                    let usable = (0..8).all(|c| {
                        let (_, _, _, (t, w, _)) = corner(c);
                        w > 0.0 && t.abs() < 1.0
                    });
                    if !usable {
                        continue;
                    }
                    let cube = [
                        origin[0] + x as i64,
                        origin[1] + y as i64,
                        origin[2] + z as i64,
                    ];
                    polygonise(&values, |ring| {
                        let mut ids = [0u32; 13];
                        for (slot, &e) in ids.iter_mut().zip(ring) {
                            let (p, q) = EDGES[e as usize];
                            let (px, py, pz, (vp, _, cp)) = corner(p);
                            let (_, _, _, (vq, _, cq)) = corner(q);
                            let lower = [
                                origin[0] + px as i64,
                                origin[1] + py as i64,
                                origin[2] + pz as i64,
                            ];
                            let key = (lower, e / 4);
                            *slot = *local.entry(key).or_insert_with(|| {
                                let s = vp / (vp - vq);
                                let mut position = lower.map(|k| k as f64);
                                position[usize::from(e / 4)] += f64::from(s);
                                let position =
                                    position.map(|k| (k * self.params.voxel_size) as f32);
                                let colour: [f32; 3] =
                                    std::array::from_fn(|k| cp[k] + s * (cq[k] - cp[k]));
                                part.vertices.push((key, position, colour));
                                (part.vertices.len() - 1) as u32
                            });
                        }
                        let apex = fan_apex(ring);
                        if apex.is_none() {
                            // The loop's own centre: the mean of its vertices, keyed by the
                            // cube and the loop's first edge (loops share no edge).
                            let n = ring.len() as f32;
                            let (mut position, mut colour) = ([0.0f32; 3], [0.0f32; 3]);
                            for &i in &ids[..ring.len()] {
                                let (_, p, c) = &part.vertices[i as usize];
                                for k in 0..3 {
                                    position[k] += p[k] / n;
                                    colour[k] += c[k] / n;
                                }
                            }
                            part.vertices.push(((cube, 3 + ring[0]), position, colour));
                            ids[ring.len()] = (part.vertices.len() - 1) as u32;
                        }
                        triangulate(ring, apex, |t| part.triangles.push(t.map(|k| ids[k])));
                    });
                }
            }
        }
        part
    }
}

/// A mesh vertex's identity: the lower voxel of its edge and the edge's axis (0–2), or a
/// loop's centre: its cube's lowest voxel and 3 + the loop's first edge.
type EdgeKey = ([i64; 3], u8);

/// One block's share of the surface, before its vertices are merged with its neighbours'.
#[derive(Default)]
struct Part {
    /// Key, position, colour (linear in `[0, 1]`).
    vertices: Vec<(EdgeKey, [f32; 3], [f32; 3])>,
    triangles: Vec<[u32; 3]>,
}

/// The depth of pixel `p` when it holds a surface to fuse: a finite depth in
/// `(0, depth_trunc]` under an alpha of at least `min_alpha`.
fn surface_depth(params: &TsdfParams, view: &FusedView, p: usize) -> Option<f64> {
    let d = view.depth[p];
    (view.alpha[p] >= params.min_alpha
        && d.is_finite()
        && d > 0.0
        && f64::from(d) <= params.depth_trunc)
        .then_some(f64::from(d))
}

/// The voxel offsets inside a block, in storage order (x fastest).
fn offsets() -> impl Iterator<Item = [i64; 3]> {
    (0..VOXELS).map(|v| {
        let b = BLOCK as i64;
        let v = v as i64;
        [v % b, v / b % b, v / (b * b)]
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::rng::Rng;
    use std::collections::HashMap;

    pub(crate) fn params(voxel_size: f64) -> TsdfParams {
        TsdfParams {
            voxel_size,
            sdf_trunc: 4.0 * voxel_size,
            depth_trunc: 100.0,
            min_alpha: 0.5,
        }
    }

    impl TsdfVolume {
        /// A volume whose blocks `0..n` along each axis hold `f(g)` at voxel `g`, observed once.
        fn filled(params: TsdfParams, n: i32, f: impl Fn([i64; 3]) -> f32) -> TsdfVolume {
            let mut v = TsdfVolume::new(params).unwrap();
            for z in 0..n {
                for y in 0..n {
                    for x in 0..n {
                        let key = [x, y, z];
                        let mut block = Block::new();
                        for (i, o) in offsets().enumerate() {
                            let g = [0, 1, 2].map(|a| i64::from(key[a]) * BLOCK as i64 + o[a]);
                            block.tsdf[i] = f(g);
                            block.weight[i] = 1.0;
                            block.colour[i] = [0.25, 0.5, 0.75];
                        }
                        v.index.insert(key, v.blocks.len());
                        v.keys.push(key);
                        v.blocks.push(block);
                    }
                }
            }
            v
        }
    }

    /// A `width`×`height` pinhole camera at the origin looking down +z, focal length `f`,
    /// centred.
    fn camera_at_origin(width: u32, height: u32, f: f64) -> Camera {
        Camera {
            width,
            height,
            intrinsics: crate::scene::camera::Intrinsics {
                fx: f,
                fy: f,
                cx: f64::from(width) / 2.0,
                cy: f64::from(height) / 2.0,
            },
            world_to_camera: crate::scene::camera::Pose::IDENTITY,
            projection: Default::default(),
        }
    }

    /// Every edge of the mesh is walked exactly once each way (closed, consistently wound), and
    /// no triangle repeats a vertex.
    pub(crate) fn assert_closed(mesh: &Mesh) {
        let mut directed: HashMap<(u32, u32), u32> = HashMap::new();
        for t in &mesh.triangles {
            assert!(t[0] != t[1] && t[1] != t[2] && t[0] != t[2], "{t:?}");
            for k in 0..3 {
                *directed.entry((t[k], t[(k + 1) % 3])).or_default() += 1;
            }
        }
        for (&(a, b), &n) in &directed {
            assert_eq!(n, 1, "edge {a}→{b} walked {n} times");
            assert_eq!(directed.get(&(b, a)), Some(&1), "edge {a}→{b} has no twin");
        }
    }

    /// Signed volume enclosed (divergence theorem), positive when normals point out.
    pub(crate) fn enclosed_volume(mesh: &Mesh) -> f64 {
        mesh.triangles
            .iter()
            .map(|t| {
                let [a, b, c] = t.map(|v| mesh.positions[v as usize].map(f64::from));
                (a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0])
                    + a[2] * (b[0] * c[1] - b[1] * c[0]))
                    / 6.0
            })
            .sum()
    }

    #[test]
    fn random_fields_mesh_closed_and_consistently_wound() {
        // Noise inside a 24³ grid, positive on its faces: a tangle of pieces with every
        // ambiguous face configuration, which must still close up across cubes and blocks.
        for seed in 0..4 {
            let mut rng = Rng::new(seed);
            let values: Vec<f32> = (0..24 * 24 * 24)
                .map(|_| rng.uniform(-0.9, 0.9) as f32)
                .collect();
            let v = TsdfVolume::filled(params(0.1), 3, |g| {
                if g.iter().any(|&k| k == 0 || k >= 22) {
                    0.5
                } else {
                    values[(g[0] + 24 * (g[1] + 24 * g[2])) as usize]
                }
            });
            let mesh = v.mesh();
            assert!(mesh.triangles.len() > 1000, "{}", mesh.triangles.len());
            assert_closed(&mesh);
            assert!(mesh
                .positions
                .iter()
                .all(|p| p.iter().all(|k| k.is_finite())));
            // Loop centres average their vertices' colours: 127.5 may round either way.
            let close = |c: [u8; 3]| {
                c.iter()
                    .zip([64, 128, 191])
                    .all(|(&a, b)| a.abs_diff(b) <= 1)
            };
            assert!(mesh.colours.iter().all(|&c| close(c)));
        }
    }

    #[test]
    fn a_sphere_s_distance_field_meshes_a_closed_outward_sphere() {
        let (voxel, r, c) = (0.05, 0.6, [1.0, 1.1, 0.9]);
        let p = params(voxel);
        let v = TsdfVolume::filled(p, 5, |g| {
            let x = g.map(|k| k as f64 * voxel);
            let d = ((x[0] - c[0]).powi(2) + (x[1] - c[1]).powi(2) + (x[2] - c[2]).powi(2)).sqrt();
            ((d - r) / p.sdf_trunc).clamp(-1.0, 1.0) as f32
        });
        let mesh = v.mesh();
        assert_closed(&mesh);
        // One sphere: V − E + F = 2.
        let edges = mesh.triangles.len() * 3 / 2;
        let euler = mesh.positions.len() as i64 - edges as i64 + mesh.triangles.len() as i64;
        assert_eq!(euler, 2);
        for p in &mesh.positions {
            let d = ((f64::from(p[0]) - c[0]).powi(2)
                + (f64::from(p[1]) - c[1]).powi(2)
                + (f64::from(p[2]) - c[2]).powi(2))
            .sqrt();
            // Linear interpolation of a distance field along a grid edge: off by the chord's
            // sag, a small fraction of a voxel.
            assert!((d - r).abs() < 0.02 * voxel, "vertex at distance {d}");
        }
        let vol = enclosed_volume(&mesh);
        let exact = 4.0 / 3.0 * std::f64::consts::PI * r * r * r;
        assert!((vol / exact - 1.0).abs() < 0.01, "{vol} vs {exact}");
    }

    #[test]
    fn truncated_and_unobserved_voxels_make_no_surface() {
        // A jump from +1 (truncated) to −0.5, and a sign change next to an unobserved voxel.
        let v = TsdfVolume::filled(params(0.1), 2, |g| if g[0] < 5 { 1.0 } else { -0.5 });
        assert!(v.mesh().is_empty());
        let mut v = TsdfVolume::filled(params(0.1), 2, |g| if g[0] < 5 { 0.5 } else { -0.5 });
        assert!(!v.mesh().is_empty());
        for b in &mut v.blocks {
            for (i, o) in offsets().enumerate() {
                if o[0] == 5 {
                    b.weight[i] = 0.0;
                }
            }
        }
        assert!(v.mesh().is_empty());
    }

    #[test]
    fn bad_sizes_and_shapes_are_refused() {
        for (voxel, trunc, depth) in [(0.0, 1.0, 1.0), (0.1, 0.05, 1.0), (0.1, 0.5, f64::NAN)] {
            let p = TsdfParams {
                voxel_size: voxel,
                sdf_trunc: trunc,
                depth_trunc: depth,
                min_alpha: 0.5,
            };
            assert!(matches!(TsdfVolume::new(p), Err(TsdfError::Params { .. })));
        }
        let mut v = TsdfVolume::new(params(0.1)).unwrap();
        let camera = camera_at_origin(4, 2, 2.0);
        let e = v
            .integrate(&FusedView {
                camera: &camera,
                depth: &[1.0; 8],
                alpha: &[1.0; 8],
                rgb: &[0.0; 8],
            })
            .unwrap_err();
        assert!(
            matches!(
                e,
                TsdfError::Shape {
                    rgb: 8,
                    pixels: 8,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(v.blocks(), 0);
    }

    #[test]
    fn a_view_past_the_limit_is_refused_whole_with_a_voxel_that_fits() {
        // A wall 1 in front of a 16×16 camera with f = 8: 2×2 units of it, in 0.05 voxels.
        let camera = camera_at_origin(16, 16, 8.0);
        let view = FusedView {
            camera: &camera,
            depth: &[1.0; 256],
            alpha: &[1.0; 256],
            rgb: &[0.5; 768],
        };
        let mut free = TsdfVolume::new(params(0.05)).unwrap();
        free.integrate(&view).unwrap();
        let need = free.bytes();
        assert!(free.blocks() > 4);
        let mut tight = TsdfVolume::new(params(0.05)).unwrap().with_limit(need - 1);
        let e = tight.integrate(&view).unwrap_err();
        let TsdfError::Budget { suggested, .. } = e else {
            panic!("{e}");
        };
        assert_eq!(
            (tight.blocks(), tight.views()),
            (0, 0),
            "nothing of the view fused"
        );
        assert!(suggested > 0.05 && suggested < 0.051, "{suggested}");
        let mut exact = TsdfVolume::new(params(0.05)).unwrap().with_limit(need);
        exact.integrate(&view).unwrap();
        assert_eq!(exact.bytes(), need);
    }
}
