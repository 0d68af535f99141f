//! `rasterize_fwd` / `rasterize_bwd`: per-tile front-to-back alpha compositing and its
//! back-to-front adjoint, exactly the per-pixel rules of 3DGS (DESIGN.md §4):
//!
//! `σ = ½(a·dx² + c·dy²) + b·dx·dy`, `d = mean2d − pixel centre`; skip `σ < 0`;
//! `α = min(0.999, o·e^{−σ})`; skip `α < 1/255`; stop *before* the Gaussian that would make
//! `T·(1−α) < 1e−4`; `C += colour·α·T`; `T ·= 1−α`; output `C + T·background`.
//!
//! Every pixel of a tile walks that tile's whole depth-sorted list (no per-pixel bounding-box
//! shortcut: the 3σ radius does not bound where `α ≥ 1/255`, and the CUDA twin must match).
//! Parallelism is over rows of tiles (contiguous in the image and in the intersection list);
//! each pixel's arithmetic is sequential and gradients are summed per tile into a
//! per-intersection slot, then reduced in intersection order, so results are bit-identical for
//! any number of threads.
//!
//! Backward recovers the transmittance in front of each Gaussian by dividing by `1−α`,
//! starting from the stored final `T`, and walks from the stored last contributor back to the
//! front, as 3DGS does. Where `α` is clamped at 0.999 the gradient is taken as if it were not
//! (3DGS and gsplat do the same); scenes checked by finite differences avoid the clamp.

// Per-channel loops index several arrays in lockstep; explicit indices read best.
#![allow(clippy::needless_range_loop)]

use rayon::prelude::*;

use super::binning::TileBins;
use super::project::TILE_SIZE;
use super::{Splat, SplatGrad};
use crate::scene::real::Real;

/// Upper clamp on a splat's α (gsplat's value; keeps `1−α` away from 0 for the backward
/// division).
pub const ALPHA_MAX: f64 = 0.999;
/// Splats fainter than one 8-bit level at a pixel are skipped.
pub const ALPHA_MIN: f64 = 1.0 / 255.0;
/// Compositing stops before the transmittance would fall below this.
pub const T_MIN: f64 = 1e-4;
/// Slack added to the σ cut-off `ln(255·o)` of the cheap pre-test that avoids `exp` for pixels
/// far from a splat. The exact `α < 1/255` test still decides; the slack (≫ the few-ulp error
/// of `exp`/`ln`) only guarantees the shortcut never skips a splat the exact test would keep.
pub const SIGMA_CUT_SLACK: f64 = 1e-3;

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
}

fn gather<F: Real>(splats: &[Splat<F>], ids: &[u32], out: &mut Vec<Packed<F>>) {
    out.clear();
    out.extend(ids.iter().map(|&i| {
        let s = &splats[i as usize];
        Packed {
            mx: s.mean2d[0],
            my: s.mean2d[1],
            a: s.conic[0],
            b: s.conic[1],
            c: s.conic[2],
            o: s.opacity,
            sigma_cut: (F::from_f64(255.0) * s.opacity).ln() + F::from_f64(SIGMA_CUT_SLACK),
            color: s.color,
        }
    }));
}

/// `rasterize_fwd`: composites every pixel. `image` is `3·W·H`, `final_t` and `last` are
/// `W·H` (all fully overwritten).
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
) {
    let w = width as usize;
    let ts = TILE_SIZE as usize;
    assert_eq!(image.len(), 3 * w * height as usize);
    assert_eq!(final_t.len(), w * height as usize);
    assert_eq!(last.len(), w * height as usize);
    let alpha_max = F::from_f64(ALPHA_MAX);
    let alpha_min = F::from_f64(ALPHA_MIN);
    let t_min = F::from_f64(T_MIN);
    let half = F::from_f64(0.5);
    image
        .par_chunks_mut(3 * w * ts)
        .zip(final_t.par_chunks_mut(w * ts))
        .zip(last.par_chunks_mut(w * ts))
        .enumerate()
        .for_each(|(ty, ((img, ft), lc))| {
            let rows = ft.len() / w;
            let mut packed = Vec::new();
            for tx in 0..bins.tiles_x as usize {
                gather(
                    splats,
                    bins.tile(ty * bins.tiles_x as usize + tx),
                    &mut packed,
                );
                let x_end = ((tx + 1) * ts).min(w);
                for r in 0..rows {
                    let py = F::from_f64((ty * ts + r) as f64) + half;
                    for x in tx * ts..x_end {
                        let px = F::from_f64(x as f64) + half;
                        let mut t = F::ONE;
                        let mut col = [F::ZERO; 3];
                        let mut last_k = 0u32;
                        for (k, s) in packed.iter().enumerate() {
                            let dx = s.mx - px;
                            let dy = s.my - py;
                            let sigma = half * (s.a * dx * dx + s.c * dy * dy) + s.b * dx * dy;
                            if sigma < F::ZERO || sigma > s.sigma_cut {
                                continue;
                            }
                            let alpha = (s.o * (-sigma).exp()).min(alpha_max);
                            if alpha < alpha_min {
                                continue;
                            }
                            let next_t = t * (F::ONE - alpha);
                            if next_t < t_min {
                                break;
                            }
                            let wgt = alpha * t;
                            for ch in 0..3 {
                                col[ch] += s.color[ch] * wgt;
                            }
                            t = next_t;
                            last_k = k as u32 + 1;
                        }
                        let p = r * w + x;
                        for ch in 0..3 {
                            img[3 * p + ch] = col[ch] + t * background[ch];
                        }
                        ft[p] = t;
                        lc[p] = last_k;
                    }
                }
            }
        });
}

/// `rasterize_bwd`: from `d_image` (`3·W·H`) and the forward's `final_t` / `last`, writes the
/// per-splat gradient of every intersection into `isect_grads` (resized to the intersection
/// count) and reduces them into `splat_grads` (resized to `splats.len()`, overwritten).
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
) {
    let w = width as usize;
    let ts = TILE_SIZE as usize;
    assert_eq!(d_image.len(), 3 * w * height as usize);
    isect_grads.clear();
    isect_grads.resize(bins.num_intersections(), SplatGrad::default());
    let alpha_max = F::from_f64(ALPHA_MAX);
    let alpha_min = F::from_f64(ALPHA_MIN);
    let half = F::from_f64(0.5);
    let tiles_x = bins.tiles_x as usize;

    // Split the per-intersection slots at tile-row boundaries (rows are contiguous).
    let mut row_slices: Vec<&mut [SplatGrad<F>]> = Vec::with_capacity(bins.tiles_y as usize);
    let mut rest: &mut [SplatGrad<F>] = isect_grads;
    for ty in 0..bins.tiles_y as usize {
        let n = bins.tile_offsets[(ty + 1) * tiles_x] - bins.tile_offsets[ty * tiles_x];
        let (head, tail) = rest.split_at_mut(n);
        row_slices.push(head);
        rest = tail;
    }

    row_slices
        .into_par_iter()
        .enumerate()
        .for_each(|(ty, row_grads)| {
            let row_base = bins.tile_offsets[ty * tiles_x];
            let y0 = ty * ts;
            let y_end = ((ty + 1) * ts).min(height as usize);
            let mut packed = Vec::new();
            for tx in 0..tiles_x {
                let t_idx = ty * tiles_x + tx;
                let (lo, hi) = (bins.tile_offsets[t_idx], bins.tile_offsets[t_idx + 1]);
                if lo == hi {
                    continue;
                }
                gather(splats, bins.tile(t_idx), &mut packed);
                let tile_grads = &mut row_grads[lo - row_base..hi - row_base];
                let x_end = ((tx + 1) * ts).min(w);
                for y in y0..y_end {
                    let py = F::from_f64(y as f64) + half;
                    for x in tx * ts..x_end {
                        let p = y * w + x;
                        let n_last = last[p] as usize;
                        if n_last == 0 {
                            continue;
                        }
                        let px = F::from_f64(x as f64) + half;
                        let t_final = final_t[p];
                        let dpix = [d_image[3 * p], d_image[3 * p + 1], d_image[3 * p + 2]];
                        let d_bg = background[0] * dpix[0]
                            + background[1] * dpix[1]
                            + background[2] * dpix[2];
                        let mut t = t_final;
                        let mut acc = [F::ZERO; 3];
                        let mut last_alpha = F::ZERO;
                        let mut last_color = [F::ZERO; 3];
                        for k in (0..n_last).rev() {
                            let s = &packed[k];
                            let dx = s.mx - px;
                            let dy = s.my - py;
                            let sigma = half * (s.a * dx * dx + s.c * dy * dy) + s.b * dx * dy;
                            if sigma < F::ZERO || sigma > s.sigma_cut {
                                continue;
                            }
                            let gauss = (-sigma).exp();
                            let alpha = (s.o * gauss).min(alpha_max);
                            if alpha < alpha_min {
                                continue;
                            }
                            let one_minus = F::ONE - alpha;
                            t /= one_minus;
                            let wgt = alpha * t;
                            let g = &mut tile_grads[k];
                            let mut d_alpha = F::ZERO;
                            for ch in 0..3 {
                                // Colour of everything behind this splat, as seen through it.
                                acc[ch] =
                                    last_alpha * last_color[ch] + (F::ONE - last_alpha) * acc[ch];
                                d_alpha += (s.color[ch] - acc[ch]) * dpix[ch];
                                g.color[ch] += wgt * dpix[ch];
                            }
                            last_color = s.color;
                            last_alpha = alpha;
                            d_alpha *= t;
                            d_alpha += -(t_final / one_minus) * d_bg;
                            // α = o·G, G = e^{−σ}: ∂L/∂σ = −o·G·∂L/∂α.
                            let d_sigma = -s.o * gauss * d_alpha;
                            g.mean2d[0] += d_sigma * (s.a * dx + s.b * dy);
                            g.mean2d[1] += d_sigma * (s.c * dy + s.b * dx);
                            g.conic[0] += d_sigma * half * dx * dx;
                            g.conic[1] += d_sigma * dx * dy;
                            g.conic[2] += d_sigma * half * dy * dy;
                            g.opacity += gauss * d_alpha;
                        }
                    }
                }
            }
        });

    splat_grads.clear();
    splat_grads.resize(splats.len(), SplatGrad::default());
    for (&id, g) in bins.isect_ids.iter().zip(isect_grads.iter()) {
        splat_grads[id as usize].add(g);
    }
}
