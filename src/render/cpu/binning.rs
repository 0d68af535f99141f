//! `tile_binning`: assigns every visible splat to each 16×16 tile it can reach, after a memory
//! preflight.
//!
//! Which tiles ([`Reach`]): of those its 3σ box `mean ± radius` meets (3DGS's rule), the ones
//! its α-support ellipse reaches. Outside the ellipse `σ ≤ ln(255·o)` a splat has `α < 1/255`
//! and every pixel skips it. The ellipse is the one whose box the CPU rasterizer clips each
//! splat's pixels to (its support box, see [`rasterize`](super::rasterize)): padded, and
//! widened by the bound on the rounding of `σ` at a pixel ([`clip_cut`]), which only
//! needle-like splats notice; the few too thin for any bound keep their 3σ box. A tile the
//! widened ellipse misses holds no pixel the splat reaches, not even by the rasterizers' f32
//! test, so dropping it changes no image, transmittance or gradient, only how many
//! intersections are sorted and walked.
//!
//! Two steps. First the box: per axis the smaller of the radius and the ellipse's padded
//! half-width ([`support`]); both boxes are centred on the mean, so this box's tiles
//! ([`tile_rect`]) are exactly the tiles both meet. Then, per row of tiles, the columns the
//! ellipse reaches within that row's band of pixel rows, which cuts the corners off the box.
//! It matters for faint splats and elongated ones: at opacity 0.01, what an opacity reset
//! leaves, the support half-width is 1.37σ of the axis instead of 3σ of the major axis. For a
//! splat much larger than a tile that is about a fifth of the area.
//!
//! `radius` keeps its meaning (visibility, densification's screen size), so a visible splat
//! may reach no tile. The arithmetic uses only `+ − × ÷ √`, floor, min and max, and the CUDA
//! kernels are compiled without FMA contraction, so `kernels/common.cuh`'s twin gives the same
//! tiles from the same floats (the only difference is `ln` in the σ cut-off against `logf`).
//!
//! Invariants of [`TileBins`] after a successful call: `tile_offsets` has `tiles + 1`
//! non-decreasing entries, tile `t`'s list is `isect_ids[tile_offsets[t]..tile_offsets[t+1]]`,
//! sorted front to back by camera depth with ties broken by Gaussian index (so lists, and
//! therefore images and gradients, are identical run to run and across thread counts). Tiles
//! are numbered row-major (`ty·tiles_x + tx`), so a row of tiles is one contiguous range.

use std::cmp::Ordering;

use rayon::prelude::*;

use super::project::{tile_rect, TILE_SIZE};
use super::rasterize::{
    clip_cut, floor_clamped, sigma_cut, support, SUPPORT_PAD_PX, SUPPORT_PAD_REL,
};
use super::{prefetch, Splat, PREFETCH_AHEAD};
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
    /// Scratch: visible Gaussians in depth order, as [`depth_key`]s (the Gaussian's index in
    /// the low 32 bits), and how many tiles each is binned into.
    order: Vec<u64>,
    counts: Vec<u32>,
    /// Scratch: the tile of every intersection, grouped by Gaussian in depth order.
    pair_tiles: Vec<u32>,
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

/// The tiles a visible splat is binned into (module doc): its tile box's range `rect`
/// (`[x0, x1, y0, y1]`, half-open), and per row of that range the columns its padded α-support
/// ellipse reaches ([`Reach::row`]).
///
/// In `d = mean2d − pixel`, `σ(d) = ½(a·dx² + 2b·dx·dy + c·dy²)` with the conic `(a, b, c)`, and
/// the ellipse is `σ ≤ s` for the cut-off `s`. At a fixed `dy` it spans
/// `dx = (−b·dy ± √(2a·s − det·dy²))/a`, `det = ac − b²`. Over a band of `dy` the right end
/// is largest at `dy = −b·q` and the left end smallest at `dy = b·q`, `q = √(2s/(det·c))`
/// (the ellipse's rightmost and leftmost points), or at the band's edge nearest to them.
#[derive(Clone, Copy, Debug)]
pub struct Reach<F> {
    mx: F,
    my: F,
    a: F,
    b: F,
    det: F,
    /// `2a·s`, inflated by the support padding (as the support box's half-widths are).
    s2: F,
    q: F,
    /// End paddings: the support padding of the half-widths `√(2s·Σxx)`, `√(2s·Σyy)`.
    pad_x: F,
    pad_y: F,
    /// `[x0, x1, y0, y1]`: the tile box's range.
    pub rect: [u32; 4],
    /// False when no clip is trusted ([`clip_cut`]) or an intermediate is not finite (a huge
    /// splat whose conic determinant underflows): every row then keeps the box's columns.
    exact: bool,
}

impl<F: Real> Reach<F> {
    /// `None` for a culled splat, one whose ellipse is empty (`α < 1/255` everywhere) or one
    /// whose box misses the grid.
    #[inline]
    pub fn of(s: &Splat<F>, tiles_x: u32, tiles_y: u32) -> Option<Reach<F>> {
        if s.radius == 0 {
            return None;
        }
        let cut = sigma_cut(s.opacity);
        if cut < F::ZERO {
            return None;
        }
        let [a, b, c] = s.conic;
        let det = a * c - b * b;
        // Widened by the rounding bound of σ at a pixel, or no clip trusted (the 3σ box).
        let clip = clip_cut(s.conic, cut);
        let cut = clip.unwrap_or(cut);
        let r = F::from_f64(s.radius as f64);
        // A half-width that overflows (NaN or ∞) leaves the radius: `min` ignores a NaN.
        let (ex, ey) = match clip {
            Some(_) => support(s.conic, cut)?,
            None => (r, r),
        };
        let rect = tile_rect(s.mean2d, [r.min(ex), r.min(ey)], tiles_x, tiles_y);
        if rect[0] >= rect[1] || rect[2] >= rect[3] {
            return None;
        }
        let two_s = F::from_f64(2.0) * cut / det;
        let (hx, hy) = ((two_s * c).sqrt(), (two_s * a).sqrt());
        let pad_rel = F::from_f64(SUPPORT_PAD_REL);
        let pad = F::from_f64(SUPPORT_PAD_PX);
        let s2 = F::from_f64(2.0 * (1.0 + SUPPORT_PAD_REL)) * a * cut;
        let q = hx / c;
        let (pad_x, pad_y) = (hx * pad_rel + pad, hy * pad_rel + pad);
        let exact = clip.is_some()
            && [s2, q, pad_x, pad_y, det].iter().all(|v| v.is_finite())
            && det > F::ZERO
            && a > F::ZERO
            && c > F::ZERO;
        Some(Reach {
            mx: s.mean2d[0],
            my: s.mean2d[1],
            a,
            b,
            det,
            s2,
            q,
            pad_x,
            pad_y,
            rect,
            exact,
        })
    }

    /// The columns `[lo, hi)` (within the box's) of tile row `ty` (within the box's) whose
    /// pixels the padded ellipse can reach: the band of pixel rows `[16·ty, 16·ty + 16]`,
    /// widened by the padding, against the ellipse's extent in x over that band.
    #[inline]
    pub fn row(&self, ty: u32) -> (u32, u32) {
        let [x0, x1, ..] = self.rect;
        if !self.exact {
            return (x0, x1);
        }
        let ts = F::from_f64(TILE_SIZE as f64);
        let band_lo = F::from_f64((ty * TILE_SIZE) as f64);
        let dy_lo = (self.my - (band_lo + ts)) - self.pad_y;
        let dy_hi = (self.my - band_lo) + self.pad_y;
        let clamp = |v: F| v.max(dy_lo).min(dy_hi);
        let reach_at = |dy: F| self.s2 - self.det * dy * dy;
        if reach_at(clamp(F::ZERO)) < F::ZERO {
            return (x0, x0);
        }
        let bq = self.b * self.q;
        let y1 = clamp(-bq);
        let dx_hi = (-self.b * y1 + reach_at(y1).max(F::ZERO).sqrt()) / self.a;
        let y2 = clamp(bq);
        let dx_lo = (-self.b * y2 - reach_at(y2).max(F::ZERO).sqrt()) / self.a;
        let px_lo = (self.mx - dx_hi) - self.pad_x;
        let px_hi = (self.mx - dx_lo) + self.pad_x;
        // A NaN (an overflow inside) must keep the row, never drop it.
        if px_lo
            .partial_cmp(&px_hi)
            .is_none_or(|o| o == Ordering::Greater)
        {
            return (x0, x1);
        }
        // Floors without `floorf` (a library call on baseline x86-64), exact.
        let (x0, x1) = (x0 as i32, x1 as i32);
        let lo = floor_clamped(px_lo / ts, x0, x1).clamp(x0, x1);
        let hi = (floor_clamped(px_hi / ts, x0, x1) + 1).clamp(lo, x1);
        (lo as u32, hi as u32)
    }

    /// How many tiles the splat is binned into.
    #[inline]
    pub fn count(&self) -> u64 {
        (self.rect[2]..self.rect[3])
            .map(|ty| {
                let (lo, hi) = self.row(ty);
                (hi - lo) as u64
            })
            .sum()
    }

    /// Calls `f(tile)` for every tile the splat is binned into, row by row (`tile` row-major).
    #[inline]
    pub fn for_each_tile(&self, tiles_x: u32, mut f: impl FnMut(usize)) {
        for ty in self.rect[2]..self.rect[3] {
            let (lo, hi) = self.row(ty);
            let row = (ty * tiles_x) as usize;
            for tx in lo..hi {
                f(row + tx as usize);
            }
        }
    }
}

/// Gaussians per parallel work item of [`tile_binning`].
const CHUNK: usize = 1024;

/// The sort key of Gaussian `index` at camera depth `depth`: the depth rounded to f32 in the
/// high 32 bits (mapped so that the integers order as the floats do, −0 as +0), the index in
/// the low 32. Integer keys sort in place without reading the splats at every comparison
/// (which the splats' random order made the costly part of the sort). Exact for f32 depths:
/// the keys order as (depth, index). Rounding to f32 is monotone, so f64 depths come out
/// ordered but for runs that round to the same f32, which [`refine_depth_order`] sorts.
#[inline]
fn depth_key<F: Real>(depth: F, index: u32) -> u64 {
    // Adding +0 turns −0 into +0, which the comparison of depths holds equal.
    let bits = ((depth.to_f64() as f32) + 0.0).to_bits();
    let ordered = if bits >> 31 == 1 {
        !bits
    } else {
        bits | 1 << 31
    };
    (u64::from(ordered) << 32) | u64::from(index)
}

/// Sorts each run of `order` (keys of [`depth_key`], sorted) whose depths share an f32 by
/// (depth, index) in `F`: the order of [`bins_by_rect`]'s comparison, for f64 depths too. With
/// f32 depths a run's depths are equal and its keys already in index order: nothing moves.
fn refine_depth_order<F: Real>(splats: &[Splat<F>], order: &mut [u64]) {
    let depth = |key: u64| splats[key as u32 as usize].depth;
    for run in order.chunk_by_mut(|a, b| a >> 32 == b >> 32) {
        if run.len() > 1 {
            run.sort_unstable_by(|&a, &b| {
                depth(a)
                    .partial_cmp(&depth(b))
                    .unwrap_or(Ordering::Equal)
                    .then((a as u32).cmp(&(b as u32)))
            });
        }
    }
}

/// Bins every visible splat (`radius > 0`) into every tile of `rect(splat)` (`[x0, x1, y0,
/// y1]`; `None`: no tile), each tile's list front to back by (depth, index) as
/// [`tile_binning`] orders its own. No preflight: for comparing binning rules, such as 3DGS's
/// 3σ box in the tests and the rules `benches/render.rs` counts.
pub fn bins_by_rect<F: Real>(
    splats: &[Splat<F>],
    tiles_x: u32,
    tiles_y: u32,
    rect: impl Fn(&Splat<F>) -> Option<[u32; 4]>,
) -> TileBins {
    let mut order: Vec<u32> = (0..splats.len() as u32)
        .filter(|&i| splats[i as usize].radius > 0)
        .collect();
    // A visible splat's depth is finite (projection culls the rest).
    order.sort_by(|&a, &b| {
        let (da, db) = (splats[a as usize].depth, splats[b as usize].depth);
        da.partial_cmp(&db)
            .unwrap_or(Ordering::Equal)
            .then(a.cmp(&b))
    });
    let mut lists = vec![Vec::new(); (tiles_x * tiles_y) as usize];
    for &i in &order {
        let Some([x0, x1, y0, y1]) = rect(&splats[i as usize]) else {
            continue;
        };
        for ty in y0..y1 {
            for tx in x0..x1 {
                lists[(ty * tiles_x + tx) as usize].push(i);
            }
        }
    }
    let mut bins = TileBins::default();
    (bins.tiles_x, bins.tiles_y) = (tiles_x, tiles_y);
    bins.tile_offsets.push(0);
    for list in lists {
        bins.isect_ids.extend_from_slice(&list);
        bins.tile_offsets.push(bins.isect_ids.len());
    }
    bins
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
    // Visible Gaussians front to back by (depth, index): unique keys, so the unstable sort is
    // deterministic. Kept depths are finite (project_fwd culls the rest).
    bins.order.clear();
    bins.order.extend(
        (0..splats.len() as u32)
            .filter(|&i| splats[i as usize].radius > 0)
            .map(|i| depth_key(splats[i as usize].depth, i)),
    );
    bins.order.par_sort_unstable();
    refine_depth_order(splats, &mut bins.order);
    let id = |key: u64| key as u32;
    // Tiles per visible Gaussian in that order, in parallel (the ellipse arithmetic is the
    // costly part of binning); a u32 holds any one Gaussian's count (at most the tiles).
    let reach = |i: u32| Reach::of(&splats[i as usize], tiles_x, tiles_y);
    let order = &bins.order;
    (0..order.len())
        .into_par_iter()
        .with_min_len(CHUNK)
        .map(|k| {
            if let Some(&ahead) = order.get(k + PREFETCH_AHEAD) {
                prefetch(&splats[id(ahead) as usize]);
            }
            reach(id(order[k])).map_or(0, |r| r.count() as u32)
        })
        .collect_into_vec(&mut bins.counts);
    let count: u64 = bins.counts.par_iter().map(|&c| c as u64).sum();
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

    // Every visible Gaussian's tiles, in depth order, into `pair_tiles`: each chunk of CHUNK
    // Gaussians fills its own contiguous range, in parallel. `Reach` is recomputed rather than
    // kept from the count (~60 B per Gaussian the memory plan would have to hold; it is cheap
    // next to the writes, and the same floats give the same tiles).
    bins.pair_tiles.clear();
    bins.pair_tiles.resize(count as usize, 0);
    let mut ranges = Vec::with_capacity(bins.counts.len().div_ceil(CHUNK));
    let mut rest = &mut bins.pair_tiles[..];
    for chunk in bins.counts.chunks(CHUNK) {
        let len = chunk.iter().map(|&c| c as usize).sum();
        let (head, tail) = rest.split_at_mut(len);
        ranges.push(head);
        rest = tail;
    }
    ranges
        .into_par_iter()
        .zip(bins.order.par_chunks(CHUNK))
        .for_each(|(out, ids)| {
            let mut k = 0;
            for r in ids.iter().enumerate().filter_map(|(j, &key)| {
                if let Some(&ahead) = ids.get(j + PREFETCH_AHEAD) {
                    prefetch(&splats[id(ahead) as usize]);
                }
                reach(id(key))
            }) {
                r.for_each_tile(tiles_x, |t| {
                    out[k] = t as u32;
                    k += 1;
                });
            }
            debug_assert_eq!(k, out.len(), "a Gaussian's tiles differ from its count");
        });

    // Counting sort by tile, scattering in depth order: each tile's list comes out sorted.
    bins.cursor.clear();
    bins.cursor.resize(ntiles + 1, 0);
    for &t in &bins.pair_tiles {
        bins.cursor[t as usize + 1] += 1;
    }
    for t in 0..ntiles {
        bins.cursor[t + 1] += bins.cursor[t];
    }
    bins.tile_offsets.clear();
    bins.tile_offsets.extend_from_slice(&bins.cursor);
    bins.isect_ids.clear();
    bins.isect_ids.resize(count as usize, 0);
    let mut tiles = bins.pair_tiles.iter();
    for (&key, &c) in bins.order.iter().zip(&bins.counts) {
        let i = id(key);
        for &t in tiles.by_ref().take(c as usize) {
            let slot = &mut bins.cursor[t as usize];
            bins.isect_ids[*slot] = i;
            *slot += 1;
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Splats on one tile at `depths` (index = position), in a shuffled order of indices.
    fn one_tile<F: Real>(depths: &[f64]) -> Vec<Splat<F>> {
        depths
            .iter()
            .map(|&d| Splat {
                mean2d: [F::from_f64(8.0); 2],
                conic: [F::ONE, F::ZERO, F::ONE],
                opacity: F::from_f64(0.5),
                color: [F::ZERO; 3],
                depth: F::from_f64(d),
                radius: 3,
            })
            .collect()
    }

    /// The integer sort keys give the comparison's order, (depth, index): for f32 depths
    /// directly, for f64 depths that round to the same f32 after the runs are refined, with
    /// equal depths in index order.
    #[test]
    fn tile_lists_are_in_depth_then_index_order() {
        let mut rng = Rng::new(3);
        // Depths 1 + k·1e-12 all round to 1.0f32; some repeat exactly; some are far apart.
        let mut depths: Vec<f64> = (0..40).map(|k| 1.0 + (k % 17) as f64 * 1e-12).collect();
        depths.extend((0..40).map(|_| rng.uniform(0.5, 3.0)));
        for i in (1..depths.len()).rev() {
            let j = (rng.next_f32() as f64 * (i + 1) as f64) as usize % (i + 1);
            depths.swap(i, j);
        }
        let expected = |ds: &[f64]| {
            let mut ids: Vec<u32> = (0..ds.len() as u32).collect();
            ids.sort_by(|&a, &b| {
                ds[a as usize]
                    .partial_cmp(&ds[b as usize])
                    .unwrap()
                    .then(a.cmp(&b))
            });
            ids
        };
        let mut bins = TileBins::default();
        let s64 = one_tile::<f64>(&depths);
        tile_binning(&s64, 1, 1, 8, u64::MAX, &mut bins).unwrap();
        assert_eq!(bins.tile(0), &expected(&depths)[..]);
        // In f32 the near-ties are ties: index order among them.
        let s32 = one_tile::<f32>(&depths);
        let d32: Vec<f64> = s32.iter().map(|s| s.depth as f64).collect();
        tile_binning(&s32, 1, 1, 8, u64::MAX, &mut bins).unwrap();
        assert_eq!(bins.tile(0), &expected(&d32)[..]);
        assert_ne!(expected(&d32), expected(&depths), "the scene has f32 ties");
        // Keys order as the floats do across signs and magnitudes, −0 as +0.
        let key = |d: f32| depth_key(d, 0) >> 32;
        let floats = [-3.0f32, -1e-30, -0.0, 0.0, 1e-30, 0.5, 2.0, f32::MAX];
        for w in floats.windows(2) {
            assert!(key(w[0]) <= key(w[1]), "{w:?}");
            assert_eq!(key(w[0]) == key(w[1]), w[0] == w[1], "{w:?}");
        }
    }
}
