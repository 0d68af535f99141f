//! `tile_binning`: assigns every visible splat to each 16×16 tile it can reach, after a memory
//! preflight.
//!
//! Which tiles: those that both its 3σ box `mean ± radius` (3DGS's rule) and its α-support box
//! meet ([`binned_rect`]). The support box is the padded bounding box of the ellipse outside
//! which `α < 1/255` ([`support`]), the box the CPU rasterizer already clips each splat's
//! pixels to; every pixel of a tile it misses would skip the splat anyway, so dropping those
//! tiles changes no image, transmittance or gradient, only how many intersections are sorted
//! and walked. It matters for faint and for elongated splats: at opacity 0.01 (what an opacity
//! reset leaves) the support half-width is 1.37σ of the axis instead of 3σ of the major axis,
//! about a fifth of the area of a splat much larger than a tile. Both boxes are centred on the mean, so the tiles both meet are
//! those of the box with the smaller half-width per axis ([`tile_rect`]). `radius` keeps its
//! meaning (visibility, densification's screen size): a visible splat may reach no tile.
//!
//! Invariants of [`TileBins`] after a successful call: `tile_offsets` has `tiles + 1`
//! non-decreasing entries, tile `t`'s list is `isect_ids[tile_offsets[t]..tile_offsets[t+1]]`,
//! sorted front to back by camera depth with ties broken by Gaussian index (so lists, and
//! therefore images and gradients, are identical run to run and across thread counts). Tiles
//! are numbered row-major (`ty·tiles_x + tx`), so a row of tiles is one contiguous range.

use rayon::prelude::*;

use super::project::tile_rect;
use super::rasterize::{sigma_cut, support};
use super::Splat;
use crate::render::{LargeGaussian, RenderError};
use crate::scene::real::Real;

/// How many of the largest Gaussians a [`RenderError::TooManyIntersections`] names.
pub const REPORTED_LARGEST: usize = 5;

/// Depth-sorted per-tile Gaussian lists, reused across renders.
#[derive(Clone, Debug, Default)]
pub struct TileBins {
    pub tiles_x: u32,
    pub tiles_y: u32,
    /// `tiles + 1` prefix offsets into `isect_ids`.
    pub tile_offsets: Vec<usize>,
    /// Gaussian index of every (tile, Gaussian) intersection, grouped by tile.
    pub isect_ids: Vec<u32>,
    /// Scratch: visible Gaussians in depth order.
    order: Vec<u32>,
    /// Scratch: per-tile fill cursors.
    cursor: Vec<usize>,
}

impl TileBins {
    pub fn num_tiles(&self) -> usize {
        self.tiles_x as usize * self.tiles_y as usize
    }

    /// The depth-sorted list of tile `t`.
    pub fn tile(&self, t: usize) -> &[u32] {
        &self.isect_ids[self.tile_offsets[t]..self.tile_offsets[t + 1]]
    }

    pub fn num_intersections(&self) -> usize {
        self.isect_ids.len()
    }
}

/// Number of tiles along an image side of `px` pixels.
pub fn tiles_for(px: u32) -> u32 {
    px.div_ceil(super::project::TILE_SIZE)
}

/// Half-widths `[rx, ry]` of the box whose tiles a visible splat is binned into: per axis, the
/// smaller of its 3σ `radius` and its α-support half-width (module doc); `None` when no pixel
/// can reach `α ≥ 1/255`. A support half-width that overflows (a huge splat whose conic
/// determinant underflows) is NaN or infinite, and `min` then keeps the radius.
#[inline]
pub fn tile_box<F: Real>(s: &Splat<F>) -> Option<[F; 2]> {
    let r = F::from_f64(s.radius as f64);
    let (ex, ey) = support(s.conic, sigma_cut(s.opacity))?;
    Some([r.min(ex), r.min(ey)])
}

/// The half-open tile range `[x0, x1) × [y0, y1)` a splat is binned into (empty for a culled
/// splat or one that reaches no pixel).
#[inline]
pub fn binned_rect<F: Real>(s: &Splat<F>, tiles_x: u32, tiles_y: u32) -> [u32; 4] {
    if s.radius == 0 {
        return [0; 4];
    }
    match tile_box(s) {
        Some(half) => tile_rect(s.mean2d, half, tiles_x, tiles_y),
        None => [0; 4],
    }
}

/// Counts intersections (summing in `u64`, no allocation).
pub fn count_intersections<F: Real>(splats: &[Splat<F>], tiles_x: u32, tiles_y: u32) -> u64 {
    splats
        .par_iter()
        .with_min_len(4096)
        .map(|s| {
            let [x0, x1, y0, y1] = binned_rect(s, tiles_x, tiles_y);
            (x1 - x0) as u64 * (y1 - y0) as u64
        })
        .sum()
}

/// `tile_binning`: preflight, then fill `bins`. `bytes_per_intersection` is what the caller
/// will allocate per intersection in total (ids plus any backward scratch); the render is
/// refused when `count · bytes_per_intersection > limit`, before anything that size exists.
pub fn tile_binning<F: Real>(
    splats: &[Splat<F>],
    tiles_x: u32,
    tiles_y: u32,
    bytes_per_intersection: u64,
    limit: u64,
    bins: &mut TileBins,
) -> Result<u64, RenderError> {
    bins.tiles_x = tiles_x;
    bins.tiles_y = tiles_y;
    let count = count_intersections(splats, tiles_x, tiles_y);
    let bytes = count.saturating_mul(bytes_per_intersection);
    if bytes > limit || usize::try_from(count).is_err() || count > u32::MAX as u64 {
        let mut largest: Vec<LargeGaussian> = Vec::with_capacity(REPORTED_LARGEST + 1);
        for (i, s) in splats.iter().enumerate() {
            if s.radius == 0 {
                continue;
            }
            let g = LargeGaussian {
                index: i as u32,
                radius_px: s.radius,
            };
            let pos = largest
                .iter()
                .position(|l| l.radius_px < g.radius_px)
                .unwrap_or(largest.len());
            if pos < REPORTED_LARGEST {
                largest.insert(pos, g);
                largest.truncate(REPORTED_LARGEST);
            }
        }
        return Err(RenderError::TooManyIntersections {
            bytes,
            count,
            limit,
            largest,
        });
    }
    let ntiles = bins.num_tiles();

    // Visible Gaussians front to back; (depth, index) keys are unique, so the unstable sort is
    // deterministic. Kept depths are finite (project_fwd culls the rest).
    bins.order.clear();
    bins.order
        .extend((0..splats.len() as u32).filter(|&i| splats[i as usize].radius > 0));
    bins.order.par_sort_unstable_by(|&a, &b| {
        let (da, db) = (splats[a as usize].depth, splats[b as usize].depth);
        da.partial_cmp(&db)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });

    // Counting sort by tile, scattering in depth order: each tile's list comes out sorted.
    bins.cursor.clear();
    bins.cursor.resize(ntiles + 1, 0);
    let rect = |s: &Splat<F>| binned_rect(s, tiles_x, tiles_y);
    for &i in &bins.order {
        let [x0, x1, y0, y1] = rect(&splats[i as usize]);
        for ty in y0..y1 {
            let row = (ty * tiles_x) as usize;
            for tx in x0..x1 {
                bins.cursor[row + tx as usize + 1] += 1;
            }
        }
    }
    for t in 0..ntiles {
        bins.cursor[t + 1] += bins.cursor[t];
    }
    bins.tile_offsets.clear();
    bins.tile_offsets.extend_from_slice(&bins.cursor);
    debug_assert_eq!(bins.tile_offsets[ntiles] as u64, count);
    bins.isect_ids.clear();
    bins.isect_ids.resize(count as usize, 0);
    for &i in &bins.order {
        let [x0, x1, y0, y1] = rect(&splats[i as usize]);
        for ty in y0..y1 {
            let row = (ty * tiles_x) as usize;
            for tx in x0..x1 {
                let c = &mut bins.cursor[row + tx as usize];
                bins.isect_ids[*c] = i;
                *c += 1;
            }
        }
    }
    Ok(count)
}
