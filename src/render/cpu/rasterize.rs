//! `rasterize_fwd` / `rasterize_bwd`: per-tile front-to-back alpha compositing and its
//! back-to-front adjoint, exactly the per-pixel rules of 3DGS:
//!
//! `σ = ½(a·dx² + c·dy²) + b·dx·dy`, `d = mean2d − pixel centre`; skip `σ < 0`;
//! `α = min(0.999, o·e^{−σ})`; skip `α < 1/255`; stop *before* the Gaussian that would make
//! `T·(1−α) < 1e−4`; `C += colour·α·T`; `T ·= 1−α`; output `C + T·background`.
//!
//! # How it is computed (and why the result is exactly 3DGS's)
//! 3DGS runs one thread per pixel walking the tile's whole depth-sorted list. Here each tile
//! keeps its 256 pixels' compositing state and walks the list splat by splat, visiting only the
//! pixels inside that splat's *α-support box*: the bounding box of the ellipse
//! `σ ≤ ln(255·o)`, outside of which `α < 1/255` is guaranteed (half-width
//! `√(2·ln(255·o)·Σ2d_xx)`, padded, see `support`). The ellipse is widened by a bound on the
//! f32 rounding of `σ` ([`clip_cut`]), so no pixel outside it passes even the f32 test; for
//! needles too thin for any bound the whole tile is walked. Pixels outside would skip the
//! splat anyway, so every pixel sees the same splats in the same order with the same
//! arithmetic: images, transmittances, last contributors and gradients are bit-identical to
//! the per-pixel loop (the test-only `reference` module keeps that loop and the tests compare
//! the two).
//!
//! The box is walked four pixels of a row at a time ([`Real::Lanes`]: one SSE vector in
//! `f32`), each pixel a lane taking the rule's steps under a mask, so that a step a pixel
//! skips leaves its state as it was; the backward then adds each pixel's terms to the splat's
//! sums one pixel after another in column order, as the per-pixel loop does. Groups whose
//! pixels have all stopped (forward) or lie behind their last contributor (backward) are not
//! evaluated. Every row of the box is walked whole, not only the span of it the ellipse
//! covers: computing that span took a square root and two divisions per row, and cost more
//! than the lanes it saved (measured in `docs/device-engine.md`, "The per-pixel walks in
//! lanes").
//! The 3σ `radius` would NOT be a valid bound (at 3σ, `α` can still be ≈ 0.011 > 1/255): a
//! splat is binned into the tiles that both its 3σ box and its α-support box meet
//! ([`binning`](super::binning)), so the support box also keeps whole tiles off its list.
//!
//! Parallelism is over tiles: the forward hands each tile the pieces of the output planes it
//! covers (`cut`), the backward its own run of per-intersection gradient slots
//! (`split_tiles`), which are then reduced in intersection order, so results are identical
//! for any number of threads. Tiles, not rows of tiles: a row's time is the sum of its tiles',
//! and rows are few and uneven, so on many threads the busiest row set the pace (measured in
//! `docs/device-engine.md`, "Tiles in parallel").
//!
//! `e^{−σ}` is [`Real::exp_lanes`], not libm's `expf`: a polynomial within an ulp of `e^x`
//! that gives the same bits in vector and scalar form, so the test-only per-pixel loop, which
//! calls the scalar form, still matches bit for bit; the host emulation's kernels use the same
//! polynomial (`kernels/host/emulation.h`), a GPU its own `expf`.
//!
//! With [`AbsMean2dGrad`] the backward also sums, per splat, the absolute value of each
//! pixel's contribution to the 2D-mean gradient (AbsGS's statistic), in slots of its own.
//!
//! With an inverse-depth plane (3DGS's depth regularization) the forward also composites
//! `D = Σ wᵢ/zᵢ` (the same weights `wᵢ = αᵢ·Tᵢ` as the colour, `zᵢ` the splat's camera-space
//! depth, nothing behind the last splat: an empty pixel is at infinite depth) and the backward
//! takes `∂L/∂D` per pixel: the plane is a fourth colour channel whose value per splat is
//! `1/zᵢ` and whose background is 0, so `∂L/∂α` gains that channel's term and each splat gets
//! `∂L/∂(1/zᵢ)` ([`InvDepthGrad`]), which `project_bwd` chains into the mean (and the pose).
//! The colour arithmetic is unchanged, so images and their gradients are the same bits with or
//! without the plane.
//!
//! Backward recovers the transmittance in front of each splat by dividing by `1−α`, starting
//! from the stored final `T`, and walks from the stored last contributor back to the front, as
//! 3DGS does. Where `α` is clamped at 0.999 the gradient is taken as if it were not (3DGS and
//! gsplat do the same); scenes checked by finite differences avoid the clamp.

// Per-channel loops index several arrays in lockstep; explicit indices read best.
#![allow(clippy::needless_range_loop)]

use rayon::prelude::*;

use super::binning::TileBins;
use super::project::TILE_SIZE;
use super::{prefetch, Splat, SplatGrad, PREFETCH_AHEAD};
use crate::scene::lanes::{Lanes, Mask, LANES};
use crate::scene::real::Real;

/// Upper clamp on a splat's α (gsplat's value; keeps `1−α` away from 0 for the backward
/// division).
pub const ALPHA_MAX: f64 = 0.999;
/// Splats fainter than one 8-bit level at a pixel are skipped.
pub const ALPHA_MIN: f64 = 1.0 / 255.0;
/// Compositing stops before the transmittance would fall below this.
pub const T_MIN: f64 = 1e-4;
/// Slack added to the σ cut-off `ln(255·o)` of the cheap pre-tests (per pixel, and the support
/// box) that avoid `exp` where a splat cannot reach `α ≥ 1/255`. The exact `α < 1/255` test
/// still decides; the slack (≫ the few-ulp error of `exp`/`ln`) only guarantees the shortcuts
/// never skip a splat the exact test would keep.
pub const SIGMA_CUT_SLACK: f64 = 1e-3;
/// Relative padding of the support box half-widths: covers the rounding of `Σ2d` recomputed
/// from the conic in f32 (relative error ~1e-6) with three orders of magnitude to spare.
pub const SUPPORT_PAD_REL: f64 = 1e-3;
/// Absolute padding of the support box in pixels (same purpose, for tiny boxes).
pub const SUPPORT_PAD_PX: f64 = 1e-2;
/// How far the f32 value of `σ` at a pixel can fall below the exact one, relative to
/// `σ·ac/det` (conic `(a, b, c)`, `det = ac − b²`). The rasterizers evaluate
/// `½(a·dx·dx + c·dy·dy) + b·dx·dy` in f32 from offsets `dx`, `dy` that are themselves rounded:
/// each squared term carries 6 roundings of at most ε relative to it (2 from its offset, 2
/// products, the inner and the outer sum), the cross term 5, so the error is at most
/// `3ε·(a·dx² + c·dy²) + 5ε·|b·dx·dy| ≤ 5.5ε·(a·dx² + c·dy²)` to first order; and
/// `a·dx² + c·dy² ≤ 4σ·ac/det` (the largest eigenvalue of `conic⁻¹·diag(a, c)` is below its trace
/// `2ac/det`). So `σ_f32 ≥ σ·(1 − k)`, `k = 22ε·ac/det`; 24ε covers the second-order terms.
/// `ac/det` is about a quarter of the splat's aspect ratio (long over short variance): it
/// matters only for needles.
pub const SIGMA_ROUNDING: f64 = 24.0 * f32::EPSILON as f64;
/// The largest `k = SIGMA_ROUNDING·ac/det` a clip to the ellipse trusts ([`clip_cut`]). Past
/// it (`ac/det` above ~175,000: a needle thousands of pixels long and about a pixel wide) the
/// f32 `σ` is too inexact to bound usefully, and the clips keep their whole box.
pub const SIGMA_ROUNDING_MAX: f64 = 0.5;

const TS: usize = TILE_SIZE as usize;
const TILE_PIXELS: usize = TS * TS;

#[derive(Clone, Copy, Default)]
struct Packed<F> {
    mx: F,
    my: F,
    a: F,
    b: F,
    c: F,
    o: F,
    sigma_cut: F,
    color: [F; 3],
    /// `1/z`: the splat's value in the inverse-depth plane.
    inv_z: F,
    /// Tile-local pixel ranges `[x0, x1) × [y0, y1)` of the α-support box.
    x0: u8,
    x1: u8,
    y0: u8,
    y1: u8,
}

/// `(⌈first⌉, ⌊last⌋)` of the two values clamped to `[lo − 1, hi + 1]` (`lo ≥ 0`; a NaN
/// clamps to `lo − 1`), exactly, for callers that then clamp to `[lo, hi]`: both functions are
/// monotone, so the clamp first changes none of their results. Without `ceilf`/`floorf`,
/// library calls on baseline x86-64 that took 6 % of a profile here (this runs per tile and
/// splat, and ran per row of a splat while the walks clipped rows to spans): the clamped value shifted by 2 is positive, where
/// truncation floors; the shift may round up to the next integer, so each result is then
/// corrected against the unshifted value.
#[inline(always)]
fn ceil_floor<F: Real>(first: F, last: F, lo: i32, hi: i32) -> (i32, i32) {
    let f = near_floor(first, lo, hi);
    let ceil_first = f + i32::from(F::from_f64(f64::from(f)) < first);
    (ceil_first, floor_clamped(last, lo, hi))
}

/// `⌊v⌋` of `v` clamped to `[lo − 1, hi + 1]` (`lo ≥ 0`; a NaN gives `lo − 1`), exactly, as
/// [`ceil_floor`] gives it; also for `project::tile_rect` and binning's rows of tiles.
#[inline(always)]
pub(super) fn floor_clamped<F: Real>(v: F, lo: i32, hi: i32) -> i32 {
    let f = near_floor(v, lo, hi);
    f - i32::from(F::from_f64(f64::from(f)) > v)
}

/// `⌊v⌋` or `⌊v⌋ + 1` of `v` clamped to `[lo − 1, hi + 1]` (see [`ceil_floor`]).
#[inline(always)]
fn near_floor<F: Real>(v: F, lo: i32, hi: i32) -> i32 {
    let (min, max) = (
        F::from_f64(f64::from(lo - 1)),
        F::from_f64(f64::from(hi + 1)),
    );
    (v.max(min).min(max) + F::from_f64(2.0)).to_f64() as i32 - 2
}

/// Tile-local half-open pixel range `[lo, hi)` (within `0..len`) of pixel centres
/// `origin + i + 0.5` with `|m − centre| ≤ ext`.
#[inline]
fn range<F: Real>(m: F, ext: F, origin: usize, len: usize) -> (u8, u8) {
    let half = F::from_f64(0.5);
    let o = F::from_f64(origin as f64);
    let (first, last) = (m - ext - half - o, m + ext - half - o);
    let len = len as i32;
    let (ceil_first, floor_last) = ceil_floor(first, last, 0, len);
    let (lo, hi) = (ceil_first.clamp(0, len), (floor_last + 1).clamp(0, len));
    (lo as u8, hi.max(lo) as u8)
}

/// The σ cut-off `ln(255·o) + SIGMA_CUT_SLACK` of the cheap pre-tests for a splat of opacity
/// `o`: negative when no pixel can reach `α ≥ 1/255`.
#[inline]
pub fn sigma_cut<F: Real>(opacity: F) -> F {
    (F::from_f64(255.0) * opacity).ln() + F::from_f64(SIGMA_CUT_SLACK)
}

/// The cut-off of every clip to the α-support ellipse (the rasterizer's support box, binning's
/// tiles) for a splat with this conic and σ cut-off `cut ≥ 0`: `cut/(1 − k)`,
/// `k = SIGMA_ROUNDING·ac/det`, outside which no pixel's f32 `σ` can pass `cut`
/// ([`SIGMA_ROUNDING`]; the clips' own f32 rounding, `det`'s at most ~3ε·ac/det relative, is
/// well inside that margin). `None` when `k` is not below [`SIGMA_ROUNDING_MAX`] or not finite
/// (a degenerate conic included): then no clip is trusted and the whole box is kept.
#[inline]
pub fn clip_cut<F: Real>(conic: [F; 3], cut: F) -> Option<F> {
    let [a, b, c] = conic;
    let k = F::from_f64(SIGMA_ROUNDING) * (a * c / (a * c - b * b));
    // Both comparisons are false for a NaN.
    (k >= F::ZERO && k < F::from_f64(SIGMA_ROUNDING_MAX)).then(|| cut / (F::ONE - k))
}

/// Half-widths (x, y) of the box outside which `α < 1/255` for a splat with this conic and
/// σ cut-off; `None` when no pixel can reach `α ≥ 1/255` (`sigma_cut < 0`).
#[inline]
pub fn support<F: Real>(conic: [F; 3], sigma_cut: F) -> Option<(F, F)> {
    if sigma_cut < F::ZERO {
        return None;
    }
    let [a, b, c] = conic;
    let det = a * c - b * b;
    // Σ2d = conic⁻¹: Σxx = c/det, Σyy = a/det.
    let two_s = F::from_f64(2.0) * sigma_cut / det;
    let pad_rel = F::from_f64(1.0 + SUPPORT_PAD_REL);
    let pad = F::from_f64(SUPPORT_PAD_PX);
    Some((
        (two_s * c).sqrt() * pad_rel + pad,
        (two_s * a).sqrt() * pad_rel + pad,
    ))
}

/// The x coordinates of the pixel centres of the tile columns starting at `x_lo`.
#[inline]
fn pixel_centres<F: Real>(x_lo: usize) -> [F; TS] {
    std::array::from_fn(|lx| F::from_f64((x_lo + lx) as f64) + F::from_f64(0.5))
}

/// The groups of [`LANES`] pixels of a tile row that meet splat `s`'s box columns `[x0, x1)`,
/// each as its first column and the bits `l` of its pixels `base + l` inside the box.
#[inline(always)]
fn groups<F>(s: &Packed<F>) -> impl Iterator<Item = (usize, u32)> {
    let (x0, x1) = (s.x0 as usize, s.x1 as usize);
    (x0 / LANES * LANES..x1).step_by(LANES).map(move |base| {
        let lo = x0.saturating_sub(base);
        let hi = (x1 - base).min(LANES);
        (base, ((1u32 << hi) - 1) & !((1u32 << lo) - 1))
    })
}

/// The condition per lane of `F`'s lanes.
type MaskOf<F> = <<F as Real>::Lanes as Lanes<F>>::Mask;

/// One group of a splat's row: the offsets `dx = mx − centre` of its pixels and `σ` at each;
/// `inside` does not hold where `σ < 0` or `σ > σ_cut`, where `α = o·e^{−σ}` would fail the
/// `1/255` test (a NaN `σ` is inside, as in the per-pixel rule). The walks test `inside`
/// before they evaluate `e^{−σ}` ([`Group::gauss`]): the groups in the box's corners need no
/// `exp`, and the test's branch does not wait for one.
struct Group<F: Real> {
    dx: F::Lanes,
    sigma: F::Lanes,
    inside: MaskOf<F>,
}

impl<F: Real> Group<F> {
    /// `e^{−σ}` at each pixel.
    #[inline(always)]
    fn gauss(&self) -> F::Lanes {
        (-self.sigma).exp()
    }
}

#[inline(always)]
fn group<F: Real>(s: &Packed<F>, dy: F, centres: &[F; TS], base: usize) -> Group<F> {
    let v = <F::Lanes as Lanes<F>>::splat;
    let dx = v(s.mx) - F::Lanes::load(&centres[base..]);
    // `½(a·dx² + c·dy²) + b·dx·dy` as the per-pixel rule writes it, its row terms once.
    let sigma = v(F::from_f64(0.5)) * (v(s.a) * dx * dx + v(s.c * dy * dy)) + v(s.b) * dx * v(dy);
    Group {
        dx,
        sigma,
        inside: !(sigma.lt(v(F::ZERO)) | sigma.gt(v(s.sigma_cut))),
    }
}

/// Gathers tile `(tx, ty)`'s splats with their support boxes clipped to the tile.
fn gather<F: Real>(
    splats: &[Splat<F>],
    ids: &[u32],
    origin: (usize, usize),
    size: (usize, usize),
    out: &mut Vec<Packed<F>>,
) {
    out.clear();
    out.extend(ids.iter().enumerate().map(|(k, &i)| {
        if let Some(&ahead) = ids.get(k + PREFETCH_AHEAD) {
            prefetch(&splats[ahead as usize]);
        }
        let s = &splats[i as usize];
        let sigma_cut = sigma_cut(s.opacity);
        // The box, from the clips' cut-off: widened for the f32 test's rounding; or none
        // trusted, the whole tile; or nothing to draw.
        let empty = ((0, 0), (0, 0));
        let ((x0, x1), (y0, y1)) =
            match (sigma_cut >= F::ZERO).then(|| clip_cut(s.conic, sigma_cut)) {
                None => empty,
                Some(None) => ((0, size.0 as u8), (0, size.1 as u8)),
                Some(Some(cut)) => support(s.conic, cut).map_or(empty, |(ex, ey)| {
                    (
                        range(s.mean2d[0], ex, origin.0, size.0),
                        range(s.mean2d[1], ey, origin.1, size.1),
                    )
                }),
            };
        Packed {
            mx: s.mean2d[0],
            my: s.mean2d[1],
            a: s.conic[0],
            b: s.conic[1],
            c: s.conic[2],
            o: s.opacity,
            sigma_cut,
            color: s.color,
            inv_z: F::ONE / s.depth,
            x0,
            x1,
            y0,
            y1,
        }
    }));
}

/// `plane`'s lines (of `line` elements) cut every `piece` elements into `tiles` columns: tile
/// `tx` gets piece `tx` of each line, at the line's index in the row of tiles; lines the plane
/// lacks (below the image, or every line of an absent plane) stay empty. The pieces are
/// disjoint, so the tiles of a row can be written in parallel.
fn cut<T>(plane: &mut [T], line: usize, piece: usize, tiles: usize) -> Vec<[&mut [T]; TS]> {
    let mut out: Vec<[&mut [T]; TS]> = (0..tiles)
        .map(|_| std::array::from_fn(|_| <&mut [T]>::default()))
        .collect();
    for (ly, l) in plane.chunks_mut(line).enumerate() {
        for (tile, p) in out.iter_mut().zip(l.chunks_mut(piece)) {
            tile[ly] = p;
        }
    }
    out
}

/// A tile's pixels in the forward walk, one array per quantity (a group's pixels adjacent).
struct Composited<F> {
    t: [F; TILE_PIXELS],
    col: [[F; TILE_PIXELS]; 3],
    dep: [F; TILE_PIXELS],
    last_k: [u32; TILE_PIXELS],
}

/// Composites a tile's splats (`packed`, in list order) over its `active` pixels (the tile at
/// `(x_lo, y_lo)`, whose splats' boxes are clipped to its pixels). A splat is visited in the
/// groups of [`LANES`] pixels its box's rows meet; in a group every pixel takes the rule's
/// steps as a lane, the steps it skips leaving its state as it was, so each pixel gets the same
/// arithmetic in the same order as in the per-pixel loop. Groups whose pixels have all stopped
/// are not visited.
#[inline(always)]
fn composite<F: Real>(
    packed: &[Packed<F>],
    x_lo: usize,
    y_lo: usize,
    mut active: usize,
    with_depth: bool,
) -> Composited<F> {
    let v = <F::Lanes as Lanes<F>>::splat;
    let (alpha_max, alpha_min, t_min) = (
        v(F::from_f64(ALPHA_MAX)),
        v(F::from_f64(ALPHA_MIN)),
        v(F::from_f64(T_MIN)),
    );
    let one = v(F::ONE);
    let half = F::from_f64(0.5);
    let centres = pixel_centres(x_lo);
    let mut st = Composited {
        t: [F::ONE; TILE_PIXELS],
        col: [[F::ZERO; TILE_PIXELS]; 3],
        dep: [F::ZERO; TILE_PIXELS],
        last_k: [0; TILE_PIXELS],
    };
    // Bit `lx` of row `ly`: the pixel has stopped.
    let mut done = [0u16; TS];
    for (k, s) in packed.iter().enumerate() {
        if active == 0 {
            break;
        }
        let number = k as u32 + 1;
        let (o, color, inv_z) = (v(s.o), s.color.map(v), v(s.inv_z));
        for ly in s.y0 as usize..s.y1 as usize {
            let dy = s.my - (F::from_f64((y_lo + ly) as f64) + half);
            for (base, in_box) in groups(s) {
                let live = in_box & !(u32::from(done[ly]) >> base);
                if live == 0 {
                    continue;
                }
                let gr = group(s, dy, &centres, base);
                let live = live & gr.inside.bits();
                if live == 0 {
                    continue;
                }
                let p = ly * TS + base;
                let alpha = (o * gr.gauss()).min(alpha_max);
                let t = F::Lanes::load(&st.t[p..]);
                let next_t = t * (one - alpha);
                let pass = MaskOf::<F>::from_bits(live) & !alpha.lt(alpha_min);
                let stop = pass & next_t.lt(t_min);
                let draw = pass & !stop;
                let wgt = alpha * t;
                for ch in 0..3 {
                    let c = F::Lanes::load(&st.col[ch][p..]);
                    F::Lanes::select(draw, c + color[ch] * wgt, c).store(&mut st.col[ch][p..]);
                }
                if with_depth {
                    let d = F::Lanes::load(&st.dep[p..]);
                    F::Lanes::select(draw, d + inv_z * wgt, d).store(&mut st.dep[p..]);
                }
                F::Lanes::select(draw, next_t, t).store(&mut st.t[p..]);
                draw.write_u32(number, &mut st.last_k[p..]);
                let stopped = stop.bits();
                done[ly] |= (stopped << base) as u16;
                active -= stopped.count_ones() as usize;
            }
        }
    }
    st
}

/// `rasterize_fwd`: composites every pixel. `image` is `3·W·H`, `final_t` and `last` are
/// `W·H`, and so is `inv_depth`, when given: the inverse-depth plane `Σ wᵢ/zᵢ` (all fully
/// overwritten).
#[allow(clippy::too_many_arguments)]
pub fn rasterize_fwd<F: Real>(
    splats: &[Splat<F>],
    bins: &TileBins,
    width: u32,
    height: u32,
    background: [F; 3],
    image: &mut [F],
    final_t: &mut [F],
    last: &mut [u32],
    inv_depth: Option<&mut [F]>,
) {
    let w = width as usize;
    assert_eq!(image.len(), 3 * w * height as usize);
    assert_eq!(final_t.len(), w * height as usize);
    assert_eq!(last.len(), w * height as usize);
    let with_depth = inv_depth.is_some();
    // Without the plane every row of tiles gets an empty slice (zip stops at the shortest).
    let depth_rows: Vec<&mut [F]> = match inv_depth {
        Some(d) => {
            assert_eq!(d.len(), w * height as usize);
            d.chunks_mut(w * TS).collect()
        }
        None => (0..final_t.len().div_ceil(w * TS))
            .map(|_| <&mut [F]>::default())
            .collect(),
    };
    let tiles_x = bins.tiles_x as usize;
    image
        .par_chunks_mut(3 * w * TS)
        .zip(final_t.par_chunks_mut(w * TS))
        .zip(last.par_chunks_mut(w * TS))
        .zip(depth_rows)
        .enumerate()
        .for_each(|(ty, (((img, ft), lc), dep_out))| {
            let rows = ft.len() / w;
            cut(img, 3 * w, 3 * TS, tiles_x)
                .into_par_iter()
                .zip(cut(ft, w, TS, tiles_x))
                .zip(cut(lc, w, TS, tiles_x))
                .zip(cut(dep_out, w, TS, tiles_x))
                .enumerate()
                .for_each_init(Vec::new, |packed, (tx, (((img, ft), lc), dep_out))| {
                    let x_lo = tx * TS;
                    let cols = (w - x_lo).min(TS);
                    gather(
                        splats,
                        bins.tile(ty * tiles_x + tx),
                        (x_lo, ty * TS),
                        (cols, rows),
                        packed,
                    );
                    let st = composite(packed, x_lo, ty * TS, rows * cols, with_depth);
                    for ly in 0..rows {
                        for lx in 0..cols {
                            let p = ly * TS + lx;
                            for ch in 0..3 {
                                img[ly][3 * lx + ch] = st.col[ch][p] + st.t[p] * background[ch];
                            }
                            ft[ly][lx] = st.t[p];
                            lc[ly][lx] = st.last_k[p];
                            if with_depth {
                                dep_out[ly][lx] = st.dep[p];
                            }
                        }
                    }
                });
        });
}

/// A tile's pixels in the backward walk, one array per quantity (a group's pixels adjacent):
/// the transmittance in front of the current splat, the final one, the number of splats
/// composited, `∂L/∂pixel` and its dot product with the background, the colour of everything
/// behind the current splat and the last splat's α and colour; and the same for the
/// inverse-depth channel (`∂L/∂D`, the value behind, the last `1/z`).
struct Adjoint<F> {
    t: [F; TILE_PIXELS],
    t_final: [F; TILE_PIXELS],
    n_last: [u32; TILE_PIXELS],
    dpix: [[F; TILE_PIXELS]; 3],
    d_bg: [F; TILE_PIXELS],
    acc: [[F; TILE_PIXELS]; 3],
    last_alpha: [F; TILE_PIXELS],
    last_color: [[F; TILE_PIXELS]; 3],
    ddep: [F; TILE_PIXELS],
    acc_dep: [F; TILE_PIXELS],
    last_inv_z: [F; TILE_PIXELS],
}

impl<F: Real> Adjoint<F> {
    fn new() -> Box<Self> {
        let zeros = [F::ZERO; TILE_PIXELS];
        Box::new(Adjoint {
            t: zeros,
            t_final: zeros,
            n_last: [0; TILE_PIXELS],
            dpix: [zeros; 3],
            d_bg: zeros,
            acc: [zeros; 3],
            last_alpha: zeros,
            last_color: [zeros; 3],
            ddep: zeros,
            acc_dep: zeros,
            last_inv_z: zeros,
        })
    }
}

/// Where one splat's gradient of a tile goes: its slot, and its AbsGS and inverse-depth slots
/// when those are computed.
struct Slots<'a, F> {
    grad: &'a mut SplatGrad<F>,
    abs: Option<&'a mut [F; 2]>,
    inv_z: Option<&'a mut F>,
}

/// Splat `s`'s share of the backward walk over one group of a row (first column `base`, its
/// pixels in the tile's state from `p`; `live`: those the splat lies in front of the last
/// contributor of): each pixel takes the per-pixel rule's steps as a lane, the steps it skips
/// leaving its state as it was; its terms are then added to the splat's slots pixel by pixel
/// in column order, a skipped pixel's as `+0`, which changes no sum (a sum that starts at `+0`
/// is never `−0`), so every slot gets the per-pixel loop's bits.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn adjoint_group<F: Real>(
    s: &Packed<F>,
    dy: F,
    centres: &[F; TS],
    p: usize,
    base: usize,
    live: u32,
    st: &mut Adjoint<F>,
    slots: &mut Slots<'_, F>,
) {
    let v = <F::Lanes as Lanes<F>>::splat;
    let load = |from: &[F]| F::Lanes::load(from);
    let (zero, one, half) = (v(F::ZERO), v(F::ONE), v(F::from_f64(0.5)));
    let gr = group(s, dy, centres, base);
    let live = live & gr.inside.bits();
    if live == 0 {
        return;
    }
    let (dx, dyv, gauss) = (gr.dx, v(dy), gr.gauss());
    let alpha = (v(s.o) * gauss).min(v(F::from_f64(ALPHA_MAX)));
    let on = MaskOf::<F>::from_bits(live) & !alpha.lt(v(F::from_f64(ALPHA_MIN)));
    let keep = |new, old| F::Lanes::select(on, new, old);
    let one_minus = one - alpha;
    let t_behind = load(&st.t[p..]);
    let t = t_behind / one_minus;
    let wgt = alpha * t;
    let last_alpha = load(&st.last_alpha[p..]);
    let mut d_alpha = zero;
    let mut d_color = [zero; 3];
    for ch in 0..3 {
        // Colour of everything behind this splat, seen through it.
        let (last_color, acc_behind) = (load(&st.last_color[ch][p..]), load(&st.acc[ch][p..]));
        let acc = last_alpha * last_color + (one - last_alpha) * acc_behind;
        let dpix = load(&st.dpix[ch][p..]);
        d_alpha = d_alpha + (v(s.color[ch]) - acc) * dpix;
        d_color[ch] = wgt * dpix;
        keep(acc, acc_behind).store(&mut st.acc[ch][p..]);
        keep(v(s.color[ch]), last_color).store(&mut st.last_color[ch][p..]);
    }
    let mut d_inv_z = zero;
    if slots.inv_z.is_some() {
        // The inverse-depth channel: value 1/z, background 0.
        let (last_inv_z, acc_behind) = (load(&st.last_inv_z[p..]), load(&st.acc_dep[p..]));
        let acc = last_alpha * last_inv_z + (one - last_alpha) * acc_behind;
        let ddep = load(&st.ddep[p..]);
        d_alpha = d_alpha + (v(s.inv_z) - acc) * ddep;
        d_inv_z = wgt * ddep;
        keep(acc, acc_behind).store(&mut st.acc_dep[p..]);
        keep(v(s.inv_z), last_inv_z).store(&mut st.last_inv_z[p..]);
    }
    keep(alpha, last_alpha).store(&mut st.last_alpha[p..]);
    keep(t, t_behind).store(&mut st.t[p..]);
    d_alpha = d_alpha * t;
    d_alpha = d_alpha + -(load(&st.t_final[p..]) / one_minus) * load(&st.d_bg[p..]);
    // α = o·G, G = e^{−σ}: ∂L/∂σ = −o·G·∂L/∂α.
    let d_sigma = v(-s.o) * gauss * d_alpha;
    let d_mean = [
        d_sigma * (v(s.a) * dx + v(s.b * dy)),
        d_sigma * (v(s.c * dy) + v(s.b) * dx),
    ];
    let d_conic = [
        d_sigma * half * dx * dx,
        d_sigma * dx * dyv,
        d_sigma * half * dyv * dyv,
    ];
    // In column order, a skipped pixel's terms as +0.
    let sum = |acc: &mut F, term: F::Lanes| {
        for x in F::Lanes::select(on, term, zero).to_array() {
            *acc += x;
        }
    };
    let g = &mut *slots.grad;
    for ch in 0..3 {
        sum(&mut g.color[ch], d_color[ch]);
    }
    for c in 0..2 {
        sum(&mut g.mean2d[c], d_mean[c]);
    }
    for c in 0..3 {
        sum(&mut g.conic[c], d_conic[c]);
    }
    sum(&mut g.opacity, gauss * d_alpha);
    if let Some(a) = slots.abs.as_deref_mut() {
        sum(&mut a[0], d_mean[0].abs());
        sum(&mut a[1], d_mean[1].abs());
    }
    if let Some(d) = slots.inv_z.as_deref_mut() {
        sum(d, d_inv_z);
    }
}

/// The absolute 2D-mean gradient of AbsGS ("AbsGS: Recovering Fine Details for 3D Gaussian
/// Splatting", Ye et al. 2024; gsplat's `absgrad`): per splat, the sum over pixels of
/// `|∂L_pixel/∂mean2d|`, componentwise, next to the ordinary gradient (the sum of the signed
/// per-pixel terms, in which opposite pulls on a large splat cancel). Same slots and reduction
/// order as the gradients, so it is deterministic too.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AbsMean2dGrad<F> {
    /// Per intersection (resized to the intersection count).
    pub isect: Vec<[F; 2]>,
    /// Per splat, reduced in intersection order (resized to `splats.len()`, overwritten).
    pub splat: Vec<[F; 2]>,
}

/// `∂L/∂(1/zᵢ)` of every splat through the inverse-depth plane (see the module doc). Same slots
/// and reduction order as the gradients, so it is deterministic too.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InvDepthGrad<F> {
    /// Per intersection (resized to the intersection count).
    pub isect: Vec<F>,
    /// Per splat, reduced in intersection order (resized to `splats.len()`, overwritten).
    pub splat: Vec<F>,
}

/// `slots` (one per intersection) cut at tile boundaries: each tile's list is contiguous in the
/// intersection list, so each tile gets its own slice to write in parallel. The cut costs
/// 16 B per tile, beside the 8 B of each tile's offset in [`TileBins`].
pub(super) fn split_tiles<'a, T>(bins: &TileBins, mut rest: &'a mut [T]) -> Vec<&'a mut [T]> {
    bins.tile_offsets
        .windows(2)
        .map(|o| {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(o[1] - o[0]);
            rest = tail;
            head
        })
        .collect()
}

/// `rasterize_bwd`: from `d_image` (`3·W·H`) and the forward's `final_t` / `last`, writes the
/// per-splat gradient of every intersection into `isect_grads` (resized to the intersection
/// count) and reduces them into `splat_grads` (resized to `splats.len()`, overwritten); with
/// `abs`, also the absolute 2D-mean gradient ([`AbsMean2dGrad`]); with `depth`, `∂L/∂D` of the
/// inverse-depth plane (`W·H`) in, its share of every gradient added and `∂L/∂(1/zᵢ)` out
/// ([`InvDepthGrad`]).
#[allow(clippy::too_many_arguments)]
pub fn rasterize_bwd<F: Real>(
    splats: &[Splat<F>],
    bins: &TileBins,
    width: u32,
    height: u32,
    background: [F; 3],
    final_t: &[F],
    last: &[u32],
    d_image: &[F],
    isect_grads: &mut Vec<SplatGrad<F>>,
    splat_grads: &mut Vec<SplatGrad<F>>,
    mut abs: Option<&mut AbsMean2dGrad<F>>,
    mut depth: Option<(&[F], &mut InvDepthGrad<F>)>,
) {
    let w = width as usize;
    let h = height as usize;
    assert_eq!(d_image.len(), 3 * w * h);
    let d_dep: Option<&[F]> = depth.as_ref().map(|(d, _)| *d);
    if let Some(d) = d_dep {
        assert_eq!(d.len(), w * h);
    }
    isect_grads.clear();
    isect_grads.resize(bins.num_intersections(), SplatGrad::default());
    let half = F::from_f64(0.5);
    let tiles_x = bins.tiles_x as usize;

    let tile_grads = split_tiles(bins, isect_grads);
    let tile_abs: Vec<Option<&mut [[F; 2]]>> = match abs.as_deref_mut() {
        Some(a) => {
            a.isect.clear();
            a.isect.resize(bins.num_intersections(), [F::ZERO; 2]);
            split_tiles(bins, &mut a.isect)
                .into_iter()
                .map(Some)
                .collect()
        }
        None => (0..tile_grads.len()).map(|_| None).collect(),
    };
    let tile_dep: Vec<Option<&mut [F]>> = match depth.as_mut() {
        Some((_, g)) => {
            g.isect.clear();
            g.isect.resize(bins.num_intersections(), F::ZERO);
            split_tiles(bins, &mut g.isect)
                .into_iter()
                .map(Some)
                .collect()
        }
        None => (0..tile_grads.len()).map(|_| None).collect(),
    };

    tile_grads
        .into_par_iter()
        .zip(tile_abs)
        .zip(tile_dep)
        .enumerate()
        .for_each_init(
            // Per job, reused tile after tile: the tile's splats, and its pixels' states (18 KiB
            // in f32: only the tile's own pixels are set, and the walks reach no others).
            || (Vec::new(), Adjoint::<F>::new()),
            |(packed, st), (t_idx, ((tile_grads, mut tile_abs), mut tile_dep))| {
                if tile_grads.is_empty() {
                    return;
                }
                let (tx, ty) = (t_idx % tiles_x, t_idx / tiles_x);
                let (x_lo, y_lo) = (tx * TS, ty * TS);
                let (cols, rows) = ((w - x_lo).min(TS), (h - y_lo).min(TS));
                let centres = pixel_centres(x_lo);
                let mut max_last = 0usize;
                for ly in 0..rows {
                    for lx in 0..cols {
                        let q = (y_lo + ly) * w + x_lo + lx;
                        let p = ly * TS + lx;
                        let dpix = [d_image[3 * q], d_image[3 * q + 1], d_image[3 * q + 2]];
                        st.t[p] = final_t[q];
                        st.t_final[p] = final_t[q];
                        st.n_last[p] = last[q];
                        st.d_bg[p] = background[0] * dpix[0]
                            + background[1] * dpix[1]
                            + background[2] * dpix[2];
                        st.ddep[p] = d_dep.map_or(F::ZERO, |d| d[q]);
                        st.last_alpha[p] = F::ZERO;
                        st.acc_dep[p] = F::ZERO;
                        st.last_inv_z[p] = F::ZERO;
                        for ch in 0..3 {
                            st.dpix[ch][p] = dpix[ch];
                            st.acc[ch][p] = F::ZERO;
                            st.last_color[ch][p] = F::ZERO;
                        }
                        max_last = max_last.max(last[q] as usize);
                    }
                }
                if max_last == 0 {
                    return;
                }
                gather(
                    splats,
                    &bins.tile(t_idx)[..max_last],
                    (x_lo, y_lo),
                    (cols, rows),
                    packed,
                );
                for k in (0..max_last).rev() {
                    let s = &packed[k];
                    let mut slots = Slots {
                        grad: &mut tile_grads[k],
                        abs: tile_abs.as_deref_mut().map(|a| &mut a[k]),
                        inv_z: tile_dep.as_deref_mut().map(|d| &mut d[k]),
                    };
                    for ly in s.y0 as usize..s.y1 as usize {
                        let dy = s.my - (F::from_f64((y_lo + ly) as f64) + half);
                        for (base, in_box) in groups(s) {
                            let p0 = ly * TS + base;
                            // Pixels the splat lies in front of their last contributor.
                            let live =
                                MaskOf::<F>::above(&st.n_last[p0..], k as u32).bits() & in_box;
                            if live != 0 {
                                adjoint_group(s, dy, &centres, p0, base, live, st, &mut slots);
                            }
                        }
                    }
                }
            },
        );

    splat_grads.clear();
    splat_grads.resize(splats.len(), SplatGrad::default());
    for (&id, g) in bins.isect_ids.iter().zip(isect_grads.iter()) {
        splat_grads[id as usize].add(g);
    }
    if let Some(a) = abs {
        a.splat.clear();
        a.splat.resize(splats.len(), [F::ZERO; 2]);
        for (&id, v) in bins.isect_ids.iter().zip(a.isect.iter()) {
            let sum = &mut a.splat[id as usize];
            sum[0] += v[0];
            sum[1] += v[1];
        }
    }
    if let Some((_, g)) = depth {
        g.splat.clear();
        g.splat.resize(splats.len(), F::ZERO);
        for (&id, v) in bins.isect_ids.iter().zip(g.isect.iter()) {
            g.splat[id as usize] += *v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// `ceil_floor` (and so `floor_clamped`, its second half) gives its callers' ranges
    /// `[⌈first⌉, ⌊last⌋ + 1]` clamped to `[lo, hi]` exactly: at integers, just beside them
    /// (where the shift by 2 rounds), far outside the clamp, in f32 and f64; a NaN gives the
    /// empty range at `lo`.
    #[test]
    fn ceil_floor_is_exact() {
        fn check<F: Real>(values: &[f64]) {
            for &v in values {
                let v = F::from_f64(v);
                for (lo, hi) in [(0, 16), (3, 9)] {
                    let (c, f) = ceil_floor(v, v, lo, hi);
                    let got = (c.clamp(lo, hi), (f + 1).clamp(lo, hi));
                    let x = v.to_f64();
                    let want = if x.is_nan() {
                        (lo, lo)
                    } else {
                        let clamp = |y: f64| y.clamp(f64::from(lo), f64::from(hi)) as i32;
                        (clamp(x.ceil()), clamp(x.floor() + 1.0))
                    };
                    assert_eq!(got, want, "{v:?} in [{lo}, {hi}]");
                }
            }
        }
        let mut values = vec![-1e9, -2.0, -1.0, -0.5, -0.0, 0.0, 0.25, 1e9, f64::NAN];
        for n in -2..=18 {
            let n = f64::from(n);
            values.extend([n, n + 0.5, n - 1e-7, n + 1e-7, n - 1e-15, n + 1e-15]);
            values.extend([f64::from(f32::from_bits(
                (n as f32).to_bits().wrapping_sub(1),
            ))]);
            values.extend([f64::from(f32::from_bits(
                (n as f32).to_bits().wrapping_add(1),
            ))]);
        }
        let mut rng = Rng::new(9);
        values.extend((0..10_000).map(|_| rng.uniform(-4.0, 20.0)));
        check::<f32>(&values);
        check::<f64>(&values);
    }

    /// The support box only skips work: every pixel where a splat passes the per-pixel σ test
    /// in f32 lies inside it. Needles are where that can fail: their f32 `σ` (and `det`) round
    /// far from the exact values, so a pixel just outside the exact ellipse can pass. Dilated
    /// covariances as projection makes them (long axis variance up to 10⁶ px², the short one
    /// down to the 0.3 px² dilation), crossing a 2×2-tile window; the test is the rasterizers'
    /// own ([`group`]), at every pixel of the window.
    #[test]
    fn the_box_covers_every_pixel_the_f32_test_accepts() {
        let mut rng = Rng::new(5);
        let (mut accepted, mut untrusted, mut widened) = (0usize, 0usize, 0usize);
        for _ in 0..100_000 {
            let th = rng.next_f32() as f64 * std::f64::consts::PI;
            let l1 = 10f64.powf(6.0 * rng.next_f32() as f64);
            let l2 = l1 / 10f64.powf(2.0 + 6.0 * rng.next_f32() as f64);
            let (c, s) = (th.cos(), th.sin());
            let sxx = l1 * c * c + l2 * s * s + 0.3;
            let syy = l1 * s * s + l2 * c * c + 0.3;
            let sxy = (l1 - l2) * c * s;
            let det = sxx * syy - sxy * sxy;
            let conic = [(syy / det) as f32, (-sxy / det) as f32, (sxx / det) as f32];
            let reach = (3.0 * l1.sqrt()) as f32;
            let splat = Splat::<f32> {
                mean2d: [
                    16.0 + reach * (2.0 * rng.next_f32() - 1.0),
                    16.0 + reach * (2.0 * rng.next_f32() - 1.0),
                ],
                conic,
                opacity: 0.01 + 0.99 * rng.next_f32(),
                color: [0.5; 3],
                depth: 1.0,
                radius: 1,
            };
            match clip_cut(conic, sigma_cut(splat.opacity)) {
                None => untrusted += 1,
                Some(cut) if cut > sigma_cut(splat.opacity) * 1.01 => widened += 1,
                Some(_) => {}
            }
            for (tx, ty) in [(0usize, 0usize), (1, 0), (0, 1), (1, 1)] {
                let mut packed = Vec::new();
                gather(&[splat], &[0], (tx * TS, ty * TS), (TS, TS), &mut packed);
                let p = &packed[0];
                let centres = pixel_centres::<f32>(tx * TS);
                for ly in 0..TS {
                    let dy = p.my - ((ty * TS + ly) as f32 + 0.5);
                    for base in (0..TS).step_by(LANES) {
                        let inside = group(p, dy, &centres, base).inside.bits();
                        for lx in (base..base + LANES).filter(|lx| inside >> (lx - base) & 1 != 0) {
                            accepted += 1;
                            assert!(
                                (p.y0..p.y1).contains(&(ly as u8))
                                    && (p.x0..p.x1).contains(&(lx as u8)),
                                "conic {conic:?}, mean {:?}, opacity {}: pixel ({}, {}) passes \
                                 (cut {}) outside the box ({}..{} × {}..{})",
                                splat.mean2d,
                                splat.opacity,
                                tx * TS + lx,
                                ty * TS + ly,
                                p.sigma_cut,
                                p.x0,
                                p.x1,
                                p.y0,
                                p.y1,
                            );
                        }
                    }
                }
            }
        }
        println!("MEASURED {accepted} pixels accepted; {widened} clips widened >1 %, {untrusted} untrusted");
        assert!(accepted > 1_000_000, "{accepted}");
        // Both regimes of the clip ran: widened by the rounding bound, and none trusted.
        assert!(widened > 1000 && untrusted > 1000, "{widened}, {untrusted}");
    }
}
