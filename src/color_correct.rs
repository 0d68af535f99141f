//! Colour correction of a render to its ground truth before scoring: what gsplat's
//! colour-corrected metrics (`cc_psnr`, `cc_ssim`) score, so that models which learn a per-view
//! appearance (gsplat's bilateral grid, 3DGS's exposure matrices, `gs-train --exposure`) can
//! be compared fairly on held-out views.
//!
//! Such a model renders a held-out view without an appearance of its own (none was learned for
//! it), so the plain scores of that view mix the model's quality with an exposure or white
//! balance it had no way to know. gsplat therefore also scores each render after a global
//! colour fit to the ground truth, which removes that mismatch and little else. This module
//! owns the two fits gsplat offers (`gsplat/color_correct.py`, adapted there from multinerf);
//! [`crate::eval`] scores their output by its usual rules.
//!
//! Images are interleaved RGB, row-major (the layout of [`crate::metrics`]), in [0, 1]: `img`
//! is the render, f32, corrected in place; `reference` the ground truth, f32 or 8-bit
//! ([`Reference`]: a byte `b` reads as `b/255` in f32, the value [`crate::metrics`]'s SSIM
//! gives it, so an 8-bit ground truth needs no float copy and corrects to the same bits as
//! its float conversion).
//!
//! - [`ColorCorrection::Affine`] (gsplat's default, [`correct_affine`]): per channel over the
//!   pixels, the least-squares line `img ≈ a·ref + b`, `a = cov(ref, img) / max(var(ref),
//!   1e-8)` and `b = mean(img) − a·mean(ref)`; then `a = 1` where `|a| < 1e-8` (after `b` is
//!   computed, as gsplat does); the render is mapped back through it:
//!   `clip((img − b) / a, 0, 1)`.
//! - [`ColorCorrection::Quadratic`] (multinerf's `color_correct`, [`correct_quadratic`]): five
//!   rounds of a per-channel least-squares fit of `ref_c` from 10 features of the current
//!   image (the six products `img_c·img_d` with c ≤ d, the three channels, 1). Channel c's fit
//!   keeps a pixel where its value in the original image, in the current image and in the
//!   reference are all unclipped (`0.5/255 ≤ z ≤ 1 − 0.5/255`): saturated pixels say nothing
//!   about the colour mapping. After each round every channel of every pixel becomes
//!   `clip(features · W, 0, 1)`, all from the same features.
//!
//! A `mask` (one byte per pixel, 0 = not scored: a loss mask, as [`crate::eval`] scores
//! masked views) restricts every fit to the scored pixels, so the fit sees exactly what is
//! scored; the correction is still applied to every pixel.
//!
//! # Numerics and invariants
//! Sums are f64, accumulated over fixed-size pixel chunks in parallel and added in chunk order:
//! a correction is a pure function of its inputs, the same bits on every run and thread count
//! (`gs-render` reproducing `gs-train`'s scores exactly relies on it). The quadratic fit
//! solves each least-squares problem through its normal equations in standardised features
//! (each centred and scaled to unit variance over the fitted pixels; the raw 10×10 normal
//! matrix of features in [0, 1] is badly conditioned, the 9×9 correlation matrix is not unless
//! the features are truly dependent) by a Jacobi eigen-decomposition that drops the
//! directions whose eigenvalue is below [`RCOND`] of the largest. For a full-rank system that
//! is the least-squares solution gsplat's `torch.linalg.lstsq` returns; for a rank-deficient
//! one (a flat or grey image, a handful of pixels) it is the minimum-norm solution in the
//! standardised features, which gives the fitted pixels the same values as any least-squares
//! solution (the orthogonal projection; pixels outside the fit may differ from gsplat's).
//! A channel with no pixel to fit gets zero weights, what lstsq returns for an all-zero
//! system (the channel becomes 0), as in gsplat; an affine channel with no pixel to fit (only
//! possible with a mask that excludes everything) is left as it is.
//!
//! For finite inputs the output is finite and in [0, 1]; non-finite inputs are refused.

use std::ops::Range;

use rayon::prelude::*;

/// gsplat's floor on the reference's variance in the affine fit.
pub const AFFINE_VAR_FLOOR: f64 = 1e-8;
/// Below this `|a|` the affine fit's gain is replaced by 1 (gsplat's guard against dividing by
/// almost nothing).
pub const AFFINE_MIN_GAIN: f64 = 1e-8;
/// Rounds of the quadratic fit (multinerf's and gsplat's `num_iters`).
pub const QUADRATIC_ROUNDS: usize = 5;
/// A value is clipped (saturated) below this or above `1 −` this (multinerf's `eps`, half an
/// 8-bit step: of 8-bit values exactly 0 and 255 are clipped).
pub const CLIP_EPS: f64 = 0.5 / 255.0;
/// Eigenvalues of the standardised normal matrix below this fraction of the largest are
/// treated as zero. Rounding leaves truly dependent features at ~1e-15 of the largest; real
/// near-dependence of 8-bit images (a narrow colour range, near-grey colours) stays above
/// ~1e-8, so the cut separates the two with room on both sides.
pub const RCOND: f64 = 1e-10;

/// Features of a pixel besides the constant 1: six products, three channels.
const FEATURES: usize = 9;
/// Pixels per chunk of the parallel sums (fixed, so the summation order is too).
const CHUNK: usize = 4096;
/// A feature whose variance over the fitted pixels is below this is constant (the bias
/// carries it). 8-bit images vary by at least (1/255)² / pixels, far above it; a constant
/// feature's computed variance is rounding, ~1e-32.
const CONSTANT_VARIANCE: f64 = 1e-20;
/// Jacobi sweeps at most (a 9×9 matrix converges in well under 10).
const JACOBI_SWEEPS: usize = 50;

const CLIP_LO: f32 = CLIP_EPS as f32;
const CLIP_HI: f32 = (1.0 - CLIP_EPS) as f32;

/// A ground truth the fits read: interleaved RGB values in [0, 1], f32 or 8-bit.
pub trait Reference: Sync {
    /// How many values (3 per pixel).
    fn len(&self) -> usize;
    /// Whether it holds no value.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Value `i` in [0, 1] (an 8-bit `b` as `b/255` in f32).
    fn at(&self, i: usize) -> f32;
    /// The index of the first value that is not finite, if any.
    fn first_non_finite(&self) -> Option<usize>;
}

impl Reference for [f32] {
    fn len(&self) -> usize {
        <[f32]>::len(self)
    }
    fn at(&self, i: usize) -> f32 {
        self[i]
    }
    fn first_non_finite(&self) -> Option<usize> {
        self.iter().position(|v| !v.is_finite())
    }
}

impl Reference for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn at(&self, i: usize) -> f32 {
        crate::metrics::Sample::<f32>::value(self[i])
    }
    fn first_non_finite(&self) -> Option<usize> {
        None
    }
}

/// Which colour correction precedes the colour-corrected scores (`--color-correct-metric`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ColorCorrection {
    /// Per-channel gain and offset (gsplat's default).
    Affine,
    /// Five rounds of a per-channel quadratic fit over unclipped pixels (multinerf's).
    Quadratic,
}

impl ColorCorrection {
    /// `"affine"` or `"quadratic"`: gsplat's `--color_correct_method` values.
    pub fn name(self) -> &'static str {
        match self {
            ColorCorrection::Affine => "affine",
            ColorCorrection::Quadratic => "quadratic",
        }
    }

    /// Corrects `img` in place toward `reference` ([`correct_affine`] or
    /// [`correct_quadratic`]).
    pub fn apply<R: Reference + ?Sized>(
        self,
        img: &mut [f32],
        reference: &R,
        mask: Option<&[u8]>,
    ) -> Result<(), ColorCorrectError> {
        match self {
            ColorCorrection::Affine => correct_affine(img, reference, mask).map(|_| ()),
            ColorCorrection::Quadratic => correct_quadratic(img, reference, mask),
        }
    }
}

/// Inputs a correction cannot use (caller mistakes: sizes come from files, so these are
/// errors, not panics).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ColorCorrectError {
    #[error("an interleaved RGB image holds 3 values per pixel, but this one holds {len} values")]
    NotRgb { len: usize },
    #[error(
        "the render holds {image} values and the ground truth {reference}; colour-correct a \
         render at the ground truth's resolution"
    )]
    SizeMismatch { image: usize, reference: usize },
    #[error("the mask holds {mask} bytes for {pixels} pixels (one byte per pixel)")]
    MaskSize { mask: usize, pixels: usize },
    #[error("value {index} of the {which} is not a finite number")]
    NotFinite { which: &'static str, index: usize },
}

/// One channel's affine fit `img ≈ gain·ref + offset` (the gain after the `|a| < 1e-8` guard).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AffineFit {
    pub gain: f64,
    pub offset: f64,
}

/// gsplat's `color_correct_affine` (see the module doc), in place; returns the per-channel fit.
pub fn correct_affine<R: Reference + ?Sized>(
    img: &mut [f32],
    reference: &R,
    mask: Option<&[u8]>,
) -> Result<[AffineFit; 3], ColorCorrectError> {
    let pixels = check(img, reference, mask)?;
    let used = |p: usize| mask.is_none_or(|m| m[p] != 0);
    let (img_r, ref_r) = (&*img, reference);
    // [count, Σ img (3), Σ ref (3)]
    let sums = chunked_sums::<7>(pixels, |range, acc| {
        for p in range.filter(|&p| used(p)) {
            acc[0] += 1.0;
            for c in 0..3 {
                acc[1 + c] += img_r[3 * p + c] as f64;
                acc[4 + c] += ref_r.at(3 * p + c) as f64;
            }
        }
    });
    let n = sums[0];
    let mut fits = [AffineFit {
        gain: 1.0,
        offset: 0.0,
    }; 3];
    if n == 0.0 {
        return Ok(fits);
    }
    let mean_img: [f64; 3] = std::array::from_fn(|c| sums[1 + c] / n);
    let mean_ref: [f64; 3] = std::array::from_fn(|c| sums[4 + c] / n);
    // Centred second moments (mathematically gsplat's mean(ref·img) − mean(ref)·mean(img),
    // without its cancellation): [Σ (ref − r̄)² (3), Σ (ref − r̄)(img − ī) (3)].
    let moments = chunked_sums::<6>(pixels, |range, acc| {
        for p in range.filter(|&p| used(p)) {
            for c in 0..3 {
                let r = ref_r.at(3 * p + c) as f64 - mean_ref[c];
                let i = img_r[3 * p + c] as f64 - mean_img[c];
                acc[c] += r * r;
                acc[3 + c] += r * i;
            }
        }
    });
    for (c, fit) in fits.iter_mut().enumerate() {
        let var_ref = (moments[c] / n).max(AFFINE_VAR_FLOOR);
        let a = (moments[3 + c] / n) / var_ref;
        let b = mean_img[c] - a * mean_ref[c];
        *fit = AffineFit {
            gain: if a.abs() < AFFINE_MIN_GAIN { 1.0 } else { a },
            offset: b,
        };
    }
    img.par_chunks_mut(3).for_each(|px| {
        for (v, fit) in px.iter_mut().zip(&fits) {
            *v = ((*v as f64 - fit.offset) / fit.gain).clamp(0.0, 1.0) as f32;
        }
    });
    Ok(fits)
}

/// multinerf's `color_correct` as gsplat's `color_correct_quadratic` (5 rounds, eps 0.5/255;
/// see the module doc), in place.
pub fn correct_quadratic<R: Reference + ?Sized>(
    img: &mut [f32],
    reference: &R,
    mask: Option<&[u8]>,
) -> Result<(), ColorCorrectError> {
    let pixels = check(img, reference, mask)?;
    // Bit c: channel c of the original image is unclipped.
    let unclipped0: Vec<u8> = img
        .chunks_exact(3)
        .map(|px| (0..3).fold(0u8, |bits, c| bits | (u8::from(unclipped(px[c])) << c)))
        .collect();
    for _ in 0..QUADRATIC_ROUNDS {
        let current = &*img;
        let keep = |p: usize, c: usize| {
            mask.is_none_or(|m| m[p] != 0)
                && unclipped0[p] >> c & 1 == 1
                && unclipped(current[3 * p + c])
                && unclipped(reference.at(3 * p + c))
        };
        // Per channel c at 11·c: [count, Σ features (9), Σ ref_c].
        let first = chunked_sums::<33>(pixels, |range, acc| {
            for p in range {
                let f = features(current, p);
                for c in (0..3).filter(|&c| keep(p, c)) {
                    let o = 11 * c;
                    acc[o] += 1.0;
                    for (a, v) in acc[o + 1..o + 1 + FEATURES].iter_mut().zip(&f) {
                        *a += v;
                    }
                    acc[o + 10] += reference.at(3 * p + c) as f64;
                }
            }
        });
        let count: [f64; 3] = std::array::from_fn(|c| first[11 * c]);
        let mean_f: [[f64; FEATURES]; 3] = std::array::from_fn(|c| {
            std::array::from_fn(|j| first[11 * c + 1 + j] / count[c].max(1.0))
        });
        let mean_b: [f64; 3] = std::array::from_fn(|c| first[11 * c + 10] / count[c].max(1.0));
        // Per channel c at 54·c: the centred products Σ f̃_j·f̃_k (j ≤ k, 45) and Σ f̃_j·b̃ (9).
        let second = chunked_sums::<162>(pixels, |range, acc| {
            for p in range {
                let f = features(current, p);
                for c in (0..3).filter(|&c| keep(p, c)) {
                    let d: [f64; FEATURES] = std::array::from_fn(|j| f[j] - mean_f[c][j]);
                    let db = reference.at(3 * p + c) as f64 - mean_b[c];
                    let o = 54 * c;
                    for (a, (j, k)) in acc[o..o + 45].iter_mut().zip(upper_pairs()) {
                        *a += d[j] * d[k];
                    }
                    for (a, dj) in acc[o + 45..o + 54].iter_mut().zip(&d) {
                        *a += dj * db;
                    }
                }
            }
        });
        let weights: [[f64; FEATURES + 1]; 3] = std::array::from_fn(|c| {
            let o = 54 * c;
            let mut cov = [[0.0; FEATURES]; FEATURES];
            for ((j, k), &v) in upper_pairs().zip(&second[o..o + 45]) {
                cov[j][k] = v;
                cov[k][j] = v;
            }
            let r: [f64; FEATURES] = std::array::from_fn(|j| second[o + 45 + j]);
            solve_standardised(count[c], &mean_f[c], mean_b[c], &cov, &r)
        });
        img.par_chunks_mut(3).for_each(|px| {
            let f = features(px, 0);
            for (v, w) in px.iter_mut().zip(&weights) {
                let y = w[FEATURES]
                    + w[..FEATURES]
                        .iter()
                        .zip(&f)
                        .map(|(a, b)| a * b)
                        .sum::<f64>();
                *v = y.clamp(0.0, 1.0) as f32;
            }
        });
    }
    Ok(())
}

/// Pixel count of a valid `img`/`reference`/`mask` triple.
fn check<R: Reference + ?Sized>(
    img: &[f32],
    reference: &R,
    mask: Option<&[u8]>,
) -> Result<usize, ColorCorrectError> {
    if !img.len().is_multiple_of(3) {
        return Err(ColorCorrectError::NotRgb { len: img.len() });
    }
    if img.len() != reference.len() {
        return Err(ColorCorrectError::SizeMismatch {
            image: img.len(),
            reference: reference.len(),
        });
    }
    let pixels = img.len() / 3;
    if let Some(m) = mask.filter(|m| m.len() != pixels) {
        return Err(ColorCorrectError::MaskSize {
            mask: m.len(),
            pixels,
        });
    }
    if let Some(index) = img.iter().position(|v| !v.is_finite()) {
        return Err(ColorCorrectError::NotFinite {
            which: "render",
            index,
        });
    }
    if let Some(index) = reference.first_non_finite() {
        return Err(ColorCorrectError::NotFinite {
            which: "ground truth",
            index,
        });
    }
    Ok(pixels)
}

/// multinerf's `is_unclipped`: `eps ≤ z ≤ 1 − eps`, compared in f32 as gsplat compares its
/// f32 images.
fn unclipped(z: f32) -> bool {
    (CLIP_LO..=CLIP_HI).contains(&z)
}

/// The quadratic fit's features of pixel `p` of `img`, without the constant: `x0², x0·x1,
/// x0·x2, x1², x1·x2, x2², x0, x1, x2` (multinerf's column order).
fn features(img: &[f32], p: usize) -> [f64; FEATURES] {
    let x = [0, 1, 2].map(|c| img[3 * p + c] as f64);
    [
        x[0] * x[0],
        x[0] * x[1],
        x[0] * x[2],
        x[1] * x[1],
        x[1] * x[2],
        x[2] * x[2],
        x[0],
        x[1],
        x[2],
    ]
}

/// The index pairs `(j, k)`, `j ≤ k`, of the upper triangle of the features' products, row by
/// row (45 of them).
fn upper_pairs() -> impl Iterator<Item = (usize, usize)> {
    (0..FEATURES).flat_map(|j| (j..FEATURES).map(move |k| (j, k)))
}

/// Sums of `N` values over `pixels` pixels: `body` adds chunk `range`'s contribution into its
/// accumulator; chunks run in parallel and their sums are added in chunk order (see the module
/// doc: the result does not depend on scheduling).
fn chunked_sums<const N: usize>(
    pixels: usize,
    body: impl Fn(Range<usize>, &mut [f64; N]) + Sync,
) -> [f64; N] {
    let parts: Vec<[f64; N]> = (0..pixels.div_ceil(CHUNK))
        .into_par_iter()
        .map(|k| {
            let mut acc = [0.0; N];
            body(k * CHUNK..((k + 1) * CHUNK).min(pixels), &mut acc);
            acc
        })
        .collect();
    let mut total = [0.0; N];
    for part in &parts {
        for (t, v) in total.iter_mut().zip(part) {
            *t += v;
        }
    }
    total
}

/// One channel's least-squares weights (9 features, then the constant) from the `n` fitted
/// rows' feature means, target mean, centred feature products `cov` and centred
/// feature-target products `r`: the minimum-norm solution in standardised features (see the
/// module doc). `n = 0`: all zero.
fn solve_standardised(
    n: f64,
    mean_f: &[f64; FEATURES],
    mean_b: f64,
    cov: &[[f64; FEATURES]; FEATURES],
    r: &[f64; FEATURES],
) -> [f64; FEATURES + 1] {
    let mut w = [0.0; FEATURES + 1];
    if n == 0.0 {
        return w;
    }
    // Constant features are left to the constant term.
    let active: Vec<usize> = (0..FEATURES)
        .filter(|&j| cov[j][j] > n * CONSTANT_VARIANCE)
        .collect();
    let m = active.len();
    let scale: Vec<f64> = active.iter().map(|&j| cov[j][j].sqrt()).collect();
    let mut corr = [[0.0; FEATURES]; FEATURES];
    let mut rhs = [0.0; FEATURES];
    for (x, &j) in active.iter().enumerate() {
        rhs[x] = r[j] / scale[x];
        for (y, &k) in active.iter().enumerate() {
            corr[x][y] = cov[j][k] / (scale[x] * scale[y]);
        }
    }
    let (lambda, v) = symmetric_eigen(&mut corr, m);
    let largest = lambda[..m].iter().fold(0.0f64, |a, &b| a.max(b));
    let mut ws = [0.0; FEATURES];
    for k in (0..m).filter(|&k| lambda[k] > largest * RCOND) {
        let coef = (0..m).map(|x| v[x][k] * rhs[x]).sum::<f64>() / lambda[k];
        for x in 0..m {
            ws[x] += coef * v[x][k];
        }
    }
    let mut bias = mean_b;
    for (x, &j) in active.iter().enumerate() {
        w[j] = ws[x] / scale[x];
        bias -= w[j] * mean_f[j];
    }
    w[FEATURES] = bias;
    w
}

/// Eigen-decomposition of the symmetric leading `m × m` block of `a` by cyclic Jacobi
/// rotations: returns the eigenvalues and the eigenvectors as the columns of the second array
/// (`a` is left diagonalised). Accurate to rounding of the matrix's norm; always finite for
/// a finite matrix.
fn symmetric_eigen(
    a: &mut [[f64; FEATURES]; FEATURES],
    m: usize,
) -> ([f64; FEATURES], [[f64; FEATURES]; FEATURES]) {
    let mut v = [[0.0; FEATURES]; FEATURES];
    for (i, row) in v.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    for _ in 0..JACOBI_SWEEPS {
        let (mut off, mut diag) = (0.0, 0.0);
        for (p, row) in a.iter().enumerate().take(m) {
            diag += row[p] * row[p];
            off += row[p + 1..m].iter().map(|v| v * v).sum::<f64>();
        }
        if off <= diag * 1e-32 {
            break;
        }
        for p in 0..m {
            for q in p + 1..m {
                let apq = a[p][q];
                if apq == 0.0 {
                    continue;
                }
                // The rotation by angle φ, t = tan φ (the smaller root), that zeroes a[p][q].
                let theta = (a[q][q] - a[p][p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + theta.hypot(1.0));
                let c = 1.0 / t.hypot(1.0);
                let s = t * c;
                for row in a.iter_mut().take(m) {
                    let (kp, kq) = (row[p], row[q]);
                    row[p] = c * kp - s * kq;
                    row[q] = s * kp + c * kq;
                }
                let (upper, lower) = a.split_at_mut(q);
                for (pk, qk) in upper[p].iter_mut().zip(lower[0].iter_mut()).take(m) {
                    (*pk, *qk) = (c * *pk - s * *qk, s * *pk + c * *qk);
                }
                a[p][q] = 0.0;
                a[q][p] = 0.0;
                for row in v.iter_mut().take(m) {
                    let (kp, kq) = (row[p], row[q]);
                    row[p] = c * kp - s * kq;
                    row[q] = s * kp + c * kq;
                }
            }
        }
    }
    (std::array::from_fn(|i| a[i][i]), v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// `pixels` random RGB values in [lo, hi].
    fn random_image(rng: &mut Rng, pixels: usize, lo: f64, hi: f64) -> Vec<f32> {
        (0..3 * pixels)
            .map(|_| rng.uniform(lo, hi) as f32)
            .collect()
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (*x as f64 - *y as f64).abs())
            .fold(0.0, f64::max)
    }

    fn psnr(a: &[f32], b: &[f32]) -> f64 {
        crate::metrics::psnr(a, b, 1.0).unwrap()
    }

    /// The render is the truth through a per-channel gain and offset (one gain negative),
    /// inside [0, 1] so nothing clips: the fit finds them and the correction returns the truth.
    #[test]
    fn affine_undoes_a_gain_and_offset_per_channel() {
        let mut rng = Rng::new(11);
        let truth = random_image(&mut rng, 5000, 0.0, 1.0);
        let (gain, offset) = ([0.6, -0.8, 0.9], [0.25, 0.9, 0.05]);
        let render: Vec<f32> = truth
            .iter()
            .enumerate()
            .map(|(i, &t)| (gain[i % 3] * t as f64 + offset[i % 3]) as f32)
            .collect();
        let mut corrected = render.clone();
        let fits = correct_affine(&mut corrected, &truth[..], None).unwrap();
        for c in 0..3 {
            assert!((fits[c].gain - gain[c]).abs() < 1e-6, "{fits:?}");
            assert!((fits[c].offset - offset[c]).abs() < 1e-6, "{fits:?}");
        }
        let d = max_diff(&corrected, &truth);
        assert!(d < 1e-6, "{d}");
        let (plain, cc) = (psnr(&render, &truth), psnr(&corrected, &truth));
        assert!(plain < 12.0 && cc > 110.0, "{plain} dB → {cc} dB");
    }

    /// Four fitted pixels and a fifth outside the mask, by hand. Channel 0: ref 0.1, 0.3, 0.5,
    /// 0.7 (mean 0.4, variance 0.05), img 0.2, 0.3, 0.6, 0.5 (mean 0.4); covariance
    /// (0.06 + 0.01 + 0.02 + 0.03)/4 = 0.03, so a = 0.6, b = 0.4 − 0.24 = 0.16 and the
    /// corrected values are (img − 0.16)/0.6 = 1/15, 7/30, 11/15, 17/30; the masked pixel's
    /// img 1 maps to 1.4, clipped to 1. Channel 1: img = 1 − ref, so a = −1, b = 1 and the
    /// correction returns the reference. Channel 2: a constant reference (variance floored at
    /// 1e-8, covariance 0, so a = 0 → 1 and b = mean(img) = 0.5): img − 0.5, clipped.
    #[test]
    fn affine_hand_computed() {
        let reference = [
            0.1f32, 0.1, 0.5, 0.3, 0.3, 0.5, 0.5, 0.5, 0.5, 0.7, 0.7, 0.5, 0.9, 0.0, 0.5,
        ];
        let mut img = [
            0.2f32, 0.9, 0.2, 0.3, 0.7, 0.4, 0.6, 0.5, 0.6, 0.5, 0.3, 0.8, 1.0, 0.0, 0.0,
        ];
        let mask = [1u8, 1, 1, 1, 0];
        let fits = correct_affine(&mut img, &reference[..], Some(&mask)).unwrap();
        assert!((fits[0].gain - 0.6).abs() < 1e-6 && (fits[0].offset - 0.16).abs() < 1e-6);
        assert!((fits[1].gain + 1.0).abs() < 1e-6 && (fits[1].offset - 1.0).abs() < 1e-6);
        assert_eq!(fits[2].gain, 1.0);
        assert!((fits[2].offset - 0.5).abs() < 1e-6, "{fits:?}");
        let want = [
            1.0 / 15.0,
            0.1,
            0.0,
            7.0 / 30.0,
            0.3,
            0.0,
            11.0 / 15.0,
            0.5,
            0.1,
            17.0 / 30.0,
            0.7,
            0.3,
            1.0,
            1.0,
            0.0,
        ];
        for (k, (&g, &w)) in img.iter().zip(&want).enumerate() {
            assert!((g as f64 - w).abs() < 1e-6, "value {k}: {g} vs {w}");
        }
    }

    /// ref_c = q_c(img): channel 0 and 1 quadratic in their own channel, channel 2 with a
    /// cross term; inside (eps, 1 − eps) for img in [0.05, 0.95].
    fn quadratic_map(x: &[f32]) -> [f32; 3] {
        let [a, b, c] = [0, 1, 2].map(|k| x[k] as f64);
        [
            0.5 * a * a + 0.3 * a + 0.1,
            -0.4 * b * b + 0.9 * b + 0.05,
            0.2 + 0.3 * a * b + 0.25 * c * c + 0.1 * c,
        ]
        .map(|v| v as f32)
    }

    fn mapped(img: &[f32]) -> Vec<f32> {
        img.chunks_exact(3).flat_map(quadratic_map).collect()
    }

    #[test]
    fn quadratic_undoes_a_quadratic_map() {
        let mut rng = Rng::new(13);
        let img = random_image(&mut rng, 6000, 0.05, 0.95);
        let reference = mapped(&img);
        let mut corrected = img.clone();
        correct_quadratic(&mut corrected, &reference[..], None).unwrap();
        assert!(psnr(&img, &reference) < 30.0);
        let d = max_diff(&corrected, &reference);
        assert!(d < 1e-6, "{d}");
        // The affine fit cannot: the map is not a line.
        let mut affine = img.clone();
        correct_affine(&mut affine, &reference[..], None).unwrap();
        assert!(max_diff(&affine, &reference) > 1e-3);
    }

    /// Pixels clipped in the original image (channel 0 at exactly 0 or 1) or in the reference
    /// (channel 1 at exactly 1) get arbitrary references here; the fit leaves them out of that
    /// channel, so it still finds the map exactly, and applies it to them too.
    #[test]
    fn quadratic_fits_only_unclipped_pixels() {
        let mut rng = Rng::new(14);
        let mut img = random_image(&mut rng, 3000, 0.05, 0.95);
        for p in (0..3000).step_by(7) {
            img[3 * p] = if p % 2 == 0 { 0.0 } else { 1.0 };
        }
        let mut reference = mapped(&img);
        let want = reference.clone();
        for p in (0..3000).step_by(7) {
            reference[3 * p] = 0.5;
        }
        for p in (3..3000).step_by(11) {
            reference[3 * p + 1] = 1.0;
        }
        let mut corrected = img.clone();
        correct_quadratic(&mut corrected, &reference[..], None).unwrap();
        let d = max_diff(&corrected, &want);
        assert!(d < 1e-6, "{d}");
        // A loss mask leaves pixels out of every channel's fit the same way.
        let mut reference = mapped(&img);
        let mut mask = vec![1u8; 3000];
        for p in (0..3000).step_by(5) {
            mask[p] = 0;
            reference[3 * p..3 * p + 3].copy_from_slice(&[0.9, 0.1, 0.5]);
        }
        let mut corrected = img.clone();
        correct_quadratic(&mut corrected, &reference[..], Some(&mask)).unwrap();
        assert!(max_diff(&corrected, &want) < 1e-6);
        // Without the mask the garbage pulls the fit away.
        let mut unmasked = img.clone();
        correct_quadratic(&mut unmasked, &reference[..], None).unwrap();
        assert!(max_diff(&unmasked, &want) > 1e-2);
    }

    /// An 8-bit ground truth corrects to the same bits as its float conversion (the copy
    /// [`crate::eval::Scorer::score_corrected`] no longer makes), both methods, with a mask.
    #[test]
    fn an_8_bit_reference_corrects_like_its_float_conversion() {
        let mut rng = Rng::new(31);
        let pixels = 5000;
        let truth8: Vec<u8> = (0..3 * pixels).map(|_| rng.below(256) as u8).collect();
        let truth: Vec<f32> = truth8
            .iter()
            .map(|&b| crate::metrics::Sample::<f32>::value(b))
            .collect();
        let render = random_image(&mut rng, pixels, -0.05, 1.05);
        let mask: Vec<u8> = (0..pixels).map(|p| u8::from(p % 7 != 0)).collect();
        for method in [ColorCorrection::Affine, ColorCorrection::Quadratic] {
            for mask in [None, Some(&mask[..])] {
                let (mut a, mut b) = (render.clone(), render.clone());
                method.apply(&mut a, &truth[..], mask).unwrap();
                method.apply(&mut b, &truth8[..], mask).unwrap();
                let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{method:?}, mask {}", mask.is_some());
            }
        }
    }

    #[test]
    fn identity_leaves_the_image_unchanged() {
        let mut rng = Rng::new(15);
        let img = random_image(&mut rng, 2000, 0.0, 1.0);
        let mut a = img.clone();
        let fits = correct_affine(&mut a, &img[..], None).unwrap();
        assert_eq!(
            fits,
            [AffineFit {
                gain: 1.0,
                offset: 0.0
            }; 3]
        );
        assert_eq!(a, img);
        let mut q = img.clone();
        correct_quadratic(&mut q, &img[..], None).unwrap();
        assert!(max_diff(&q, &img) < 1e-6);
    }

    /// Rank-deficient systems give finite output: a grey image (its three channels equal:
    /// 6 of 9 features repeat) still fits a quadratic of its value exactly; a flat image maps to
    /// the mean of its reference; an all-clipped image has nothing to fit (zero weights: black,
    /// as gsplat's lstsq gives); a mask that excludes everything leaves affine alone.
    #[test]
    fn degenerate_images_stay_finite() {
        let mut rng = Rng::new(16);
        let grey: Vec<f32> = (0..1000)
            .flat_map(|_| [rng.uniform(0.05, 0.95) as f32; 3])
            .collect();
        let reference: Vec<f32> = grey
            .iter()
            .map(|&x| (0.6 * (x as f64).powi(2) + 0.2 * x as f64 + 0.1) as f32)
            .collect();
        let mut q = grey.clone();
        correct_quadratic(&mut q, &reference[..], None).unwrap();
        assert!(
            max_diff(&q, &reference) < 1e-6,
            "{}",
            max_diff(&q, &reference)
        );

        let truth = random_image(&mut rng, 1000, 0.2, 0.8);
        let mean: [f64; 3] = std::array::from_fn(|c| {
            truth
                .iter()
                .skip(c)
                .step_by(3)
                .map(|&v| v as f64)
                .sum::<f64>()
                / 1000.0
        });
        let flat = vec![0.5f32; 3000];
        let mut q = flat.clone();
        correct_quadratic(&mut q, &truth[..], None).unwrap();
        for (i, v) in q.iter().enumerate() {
            assert!((*v as f64 - mean[i % 3]).abs() < 1e-6, "{v} vs {mean:?}");
        }
        type Case = (&'static str, Vec<f32>, Vec<f32>, Option<Vec<u8>>);
        let cases: [Case; 5] = [
            ("flat render", flat.clone(), truth.clone(), None),
            ("flat truth", truth.clone(), flat.clone(), None),
            ("black render", vec![0.0; 3000], truth.clone(), None),
            ("white render", vec![1.0; 3000], truth.clone(), None),
            ("nothing scored", truth.clone(), flat, Some(vec![0u8; 1000])),
        ];
        for (what, img, reference, mask) in cases {
            for method in [ColorCorrection::Affine, ColorCorrection::Quadratic] {
                let mut out = img.clone();
                method
                    .apply(&mut out, &reference[..], mask.as_deref())
                    .unwrap();
                assert!(
                    out.iter().all(|v| (0.0..=1.0).contains(v)),
                    "{what}, {}: {:?}",
                    method.name(),
                    &out[..6]
                );
            }
        }
        let mut black = vec![0.0f32; 3000];
        correct_quadratic(&mut black, &truth[..], None).unwrap();
        assert!(black.iter().all(|&v| v == 0.0));
        let mut kept = truth.clone();
        correct_affine(&mut kept, &grey[..], Some(&vec![0u8; 1000])).unwrap();
        assert_eq!(kept, truth);
        // Fewer pixels than features: finite, and the fitted pixels reproduced.
        let few = random_image(&mut rng, 4, 0.1, 0.9);
        let few_ref = random_image(&mut rng, 4, 0.1, 0.9);
        let mut q = few.clone();
        correct_quadratic(&mut q, &few_ref[..], None).unwrap();
        assert!(max_diff(&q, &few_ref) < 1e-5, "{q:?} vs {few_ref:?}");
    }

    #[test]
    fn bad_inputs_are_errors() {
        let mut img = vec![0.5f32; 12];
        assert_eq!(
            correct_affine(&mut img, &[0.5; 9][..], None),
            Err(ColorCorrectError::SizeMismatch {
                image: 12,
                reference: 9
            })
        );
        assert_eq!(
            correct_quadratic(&mut [0.5; 4], &[0.5; 4][..], None),
            Err(ColorCorrectError::NotRgb { len: 4 })
        );
        assert_eq!(
            ColorCorrection::Quadratic.apply(&mut img, &[0.5; 12][..], Some(&[1, 1, 1])),
            Err(ColorCorrectError::MaskSize { mask: 3, pixels: 4 })
        );
        let mut bad = [0.5f32, f32::NAN, 0.5];
        let e = ColorCorrection::Affine
            .apply(&mut bad, &[0.5; 3][..], None)
            .unwrap_err();
        assert_eq!(
            e,
            ColorCorrectError::NotFinite {
                which: "render",
                index: 1
            }
        );
        assert!(e.to_string().contains("value 1 of the render"), "{e}");
        // An empty image is nothing to correct.
        correct_quadratic(&mut [], &[0f32; 0][..], None).unwrap();
    }

    #[test]
    fn the_result_does_not_depend_on_threads() {
        let mut rng = Rng::new(17);
        // More pixels than a chunk, so the sums are split.
        let img = random_image(&mut rng, 3 * CHUNK + 17, 0.0, 1.0);
        let reference: Vec<f32> = img
            .iter()
            .map(|&v| (0.8 * v as f64 + 0.1 * rng.next_f64()) as f32)
            .collect();
        let run = |method: ColorCorrection| {
            let mut out = img.clone();
            method.apply(&mut out, &reference[..], None).unwrap();
            out
        };
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        for method in [ColorCorrection::Affine, ColorCorrection::Quadratic] {
            assert_eq!(
                run(method),
                one.install(|| run(method)),
                "{}",
                method.name()
            );
        }
    }

    #[test]
    fn jacobi_diagonalises_a_symmetric_matrix() {
        let mut rng = Rng::new(18);
        for m in [1usize, 2, 5, 9] {
            let mut a = [[0.0; FEATURES]; FEATURES];
            for (i, j) in (0..m).flat_map(|i| (i..m).map(move |j| (i, j))) {
                let v = rng.uniform(-1.0, 1.0);
                a[i][j] = v;
                a[j][i] = v;
            }
            let original = a;
            let (lambda, v) = symmetric_eigen(&mut a, m);
            for (i, j) in (0..m).flat_map(|i| (0..m).map(move |j| (i, j))) {
                let back: f64 = (0..m).map(|k| v[i][k] * lambda[k] * v[j][k]).sum();
                assert!((back - original[i][j]).abs() < 1e-12, "{m}: {i},{j}");
                let dot: f64 = (0..m).map(|k| v[k][i] * v[k][j]).sum();
                assert!((dot - f64::from(u8::from(i == j))).abs() < 1e-12);
            }
        }
    }
}
