//! Image-quality metrics: PSNR and SSIM, plus the analytic SSIM gradient the training loss
//! `0.8·L1 + 0.2·(1 − SSIM)` needs.
//!
//! # Image layout
//! Every function takes interleaved RGB, row-major, top row first: the value of channel `c` at
//! column `i`, row `j` is at `(j·width + i)·3 + c` (the layout of the pack's RGB8 views and of
//! the rasterizer's output). Float images are expected in [0, 1]; nothing is clamped here.
//!
//! # PSNR
//! `10·log10(max² / MSE)` with the MSE over every channel of every pixel (as the original 3DGS
//! `psnr()` does per image). Identical images have MSE 0 and PSNR `+∞`; that is returned as
//! `f64::INFINITY`, never as NaN or a panic. Callers that serialise it must decide how
//! (`serde_json` writes non-finite floats as `null`).
//!
//! # SSIM, and exactly which convention
//! Wang et al. 2004 with the parameters of the original 3DGS `ssim()` (utils/loss_utils.py):
//! an 11×11 Gaussian window with σ = 1.5, built as the outer product of the 1-D window
//! `g(t) = exp(−t²/(2σ²)) / Σ`, `t = −5..=5`; C1 = 0.01², C2 = 0.03² (K1 = 0.01, K2 = 0.03 for a
//! data range of 1). Local statistics are computed per channel with a **zero-padded "same"
//! convolution**: `conv2d(..., padding = window_size // 2, groups = channels)`, so the output
//! has the input's size and pixels near the border average over a window whose out-of-image
//! part counts as black. The SSIM map is then averaged over every pixel and every channel (the
//! mean of the three per-channel means, since every channel has the same pixel count).
//!
//! Why this convention and not pytorch-msssim's ("valid" convolution, no padding, so the map is
//! 10 pixels smaller in each direction): published 3DGS numbers and the 3DGS training loss use
//! the zero-padded one, and the training loss needs a gradient for *every* pixel including the
//! border ones, which "valid" SSIM would leave with weaker (only through fewer windows)
//! supervision. Expect our SSIM to be slightly lower than pytorch-msssim's on the same pair:
//! zero padding lowers the border means and raises the border variances.
//!
//! # Implementation
//! The 2-D window is separable, so every local statistic is a horizontal 11-tap pass followed by
//! a vertical one (22 multiply-adds per pixel instead of 121). The image is cut into bands of
//! rows, one parallel task each, and each band sweeps down its rows once per channel: for every
//! row it takes the horizontal sums of x, y, x², y² and x·y, then their vertical sums at the
//! row (and from them each pixel's S and partial derivatives), then the partials' horizontal
//! sums, then the gradient of the row whose vertical window of partials has just completed.
//! A band therefore holds only the rows its windows reach: two rings of 11 rows (five statistics
//! and three partials per pixel) and a few single rows: about 102 values per pixel of image width
//! (66 without the gradient, which needs no partials), whatever the image's height; the full-image
//! planes a pass-per-statistic design keeps (and streams through memory between passes) never
//! exist. A band also computes the statistics and partials of the rows just outside it (at most 10
//! rows above and below), so bands are at least 64 rows tall. Each tap is applied to a whole row at
//! a time, so the loops vectorize. [`SsimScratch`] keeps the bands' rings between calls so a
//! training loop does not reallocate them every iteration. Every window sum starts at 0 and adds
//! its taps in a fixed order, and the per-pixel S are summed per row and the rows in order, so the
//! mean and the gradient are the same bits on any number of threads.
//!
//! The math is generic over f32/f64 ([`Real`](crate::scene::real::Real)): the public API computes in f32 (like the
//! reference implementation), the tests run the identical code in f64 to check the analytic
//! gradient by finite differences without f32 round-off drowning the differences.
//!
//! # Gradient
//! With per-pixel window statistics `μx = W∗x`, `μy = W∗y`, `Pxx = W∗x²`, `Pyy = W∗y²`,
//! `Pxy = W∗(x·y)` and `σxx = Pxx − μx²`, `σyy = Pyy − μy²`, `σxy = Pxy − μx·μy`:
//!
//! `S = A1·A2 / (B1·B2)`, `A1 = 2μxμy + C1`, `A2 = 2σxy + C2`, `B1 = μx² + μy² + C1`,
//! `B2 = σxx + σyy + C2`. Treating (μx, Pxx, Pxy) as the independent inputs (D = B1·B2):
//! - `∂S/∂μx  = (2μy(A2 − A1) − 2μx·S·(B2 − B1)) / D`
//! - `∂S/∂Pxx = −S / B2`
//! - `∂S/∂Pxy = 2·A1 / D`
//!
//! and with `N = 3·width·height`, by the chain rule through the convolutions,
//! `∂SSIM/∂x(q) = (1/N)·[(Wᵀ∗Gμ)(q) + 2x(q)·(Wᵀ∗Gxx)(q) + y(q)·(Wᵀ∗Gxy)(q)]`. The window is
//! symmetric and zero padding makes the convolution's adjoint the same zero-padded convolution,
//! so `Wᵀ∗ = W∗`. No division by A1 or A2 appears, so the gradient stays finite where S = 0.

use std::ops::{Add, AddAssign, Div, Mul, Sub};

use rayon::prelude::*;

/// Side of the SSIM window in pixels (3DGS `window_size`).
pub const SSIM_WINDOW: usize = 11;
/// Standard deviation of the SSIM window in pixels.
pub const SSIM_SIGMA: f64 = 1.5;
/// SSIM luminance constant `(K1·L)²` with K1 = 0.01 and data range L = 1.
pub const SSIM_C1: f64 = 0.01 * 0.01;
/// SSIM contrast constant `(K2·L)²` with K2 = 0.03 and data range L = 1.
pub const SSIM_C2: f64 = 0.03 * 0.03;
/// Half the window: taps run over `−RADIUS..=RADIUS`.
const RADIUS: usize = SSIM_WINDOW / 2;

/// Why a metric could not be computed. These are caller mistakes (wrong buffer sizes), reported
/// as errors rather than panics because image sizes can come from files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    #[error(
        "the two images have different sizes ({a} vs {b} values); render at the ground truth's resolution"
    )]
    LengthMismatch { a: usize, b: usize },
    #[error("an RGB image of {width}x{height} needs {expected} values but the buffer holds {len}")]
    BadShape {
        width: usize,
        height: usize,
        expected: usize,
        len: usize,
    },
    #[error("cannot compute a metric over an empty image ({width}x{height})")]
    Empty { width: usize, height: usize },
    /// The colour correction before a colour-corrected score refused its inputs.
    #[error("cannot colour-correct the render: {0}")]
    ColorCorrect(#[from] crate::color_correct::ColorCorrectError),
}

/// PSNR in dB between two float images whose values span `[0, max]` (use `max = 1.0` for
/// images in [0, 1]). `+∞` for identical images.
pub fn psnr(a: &[f32], b: &[f32], max: f32) -> Result<f64, MetricsError> {
    check_same_len(a.len(), b.len())?;
    // Per-chunk sums added in chunk order: the same bits on any number of threads (rayon's
    // `sum` adds in an order that depends on how the work was split).
    let sums: Vec<f64> = a
        .par_chunks(PSNR_CHUNK)
        .zip(b.par_chunks(PSNR_CHUNK))
        .map(|(a, b)| {
            a.iter()
                .zip(b)
                .map(|(&x, &y)| {
                    let d = x as f64 - y as f64;
                    d * d
                })
                .sum::<f64>()
        })
        .collect();
    let sum: f64 = sums.iter().sum();
    Ok(psnr_from_mse(sum / a.len() as f64, max as f64))
}

/// Values per parallel task of [`psnr`].
const PSNR_CHUNK: usize = 16 * 1024;

/// PSNR in dB between two 8-bit images (max 255). Equals [`psnr`] of the images divided by 255
/// with `max = 1`.
pub fn psnr_u8(a: &[u8], b: &[u8]) -> Result<f64, MetricsError> {
    check_same_len(a.len(), b.len())?;
    let sum: u64 = a
        .par_iter()
        .zip(b.par_iter())
        .map(|(&x, &y)| {
            let d = x.abs_diff(y) as u64;
            d * d
        })
        .sum();
    Ok(psnr_from_mse(sum as f64 / a.len() as f64, 255.0))
}

/// PSNR in dB of a mean squared error `mse` for signals of peak `max` (∞ for 0).
pub fn psnr_from_mse(mse: f64, max: f64) -> f64 {
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (max * max / mse).log10()
    }
}

fn check_same_len(a: usize, b: usize) -> Result<(), MetricsError> {
    if a != b {
        return Err(MetricsError::LengthMismatch { a, b });
    }
    if a == 0 {
        return Err(MetricsError::Empty {
            width: 0,
            height: 0,
        });
    }
    Ok(())
}

fn check_shape(len: usize, width: usize, height: usize) -> Result<(), MetricsError> {
    if width == 0 || height == 0 {
        return Err(MetricsError::Empty { width, height });
    }
    let expected = width
        .checked_mul(height)
        .and_then(|p| p.checked_mul(3))
        .unwrap_or(usize::MAX);
    if len != expected {
        return Err(MetricsError::BadShape {
            width,
            height,
            expected,
            len,
        });
    }
    Ok(())
}

/// Mean SSIM of two RGB f32 images (see the module doc for the exact convention).
pub fn ssim(a: &[f32], b: &[f32], width: usize, height: usize) -> Result<f64, MetricsError> {
    SsimScratch::new().ssim(a, b, width, height)
}

/// Mean SSIM of `img` against `target` and its gradient with respect to `img` (same layout).
pub fn ssim_and_grad(
    img: &[f32],
    target: &[f32],
    width: usize,
    height: usize,
) -> Result<(f64, Vec<f32>), MetricsError> {
    let mut grad = vec![0.0; img.len()];
    let s = SsimScratch::new().ssim_and_grad_into(img, target, width, height, &mut grad)?;
    Ok((s, grad))
}

/// Mean SSIM of two RGB8 images, each value converted to [0, 1] as `v as f32 / 255.0` (the
/// same bits as [`ssim`] of the converted images).
pub fn ssim_u8(a: &[u8], b: &[u8], width: usize, height: usize) -> Result<f64, MetricsError> {
    SsimScratch::new().ssim_u8(a, b, width, height)
}

/// Reusable scratch for SSIM: per band of rows, about 102 f32 values per pixel of image
/// width (see the module doc); grows only when a larger image arrives.
#[derive(Debug, Default)]
pub struct SsimScratch {
    inner: Workspace<f32>,
}

impl SsimScratch {
    pub fn new() -> SsimScratch {
        SsimScratch::default()
    }

    /// Mean SSIM of `a` against `b`.
    pub fn ssim(
        &mut self,
        a: &[f32],
        b: &[f32],
        width: usize,
        height: usize,
    ) -> Result<f64, MetricsError> {
        self.inner.run(a, b, width, height, None)
    }

    /// Mean SSIM of two RGB8 images (see [`ssim_u8`]), read as they are: no float copy.
    pub fn ssim_u8(
        &mut self,
        a: &[u8],
        b: &[u8],
        width: usize,
        height: usize,
    ) -> Result<f64, MetricsError> {
        check_same_len(a.len(), b.len())?;
        self.inner.run(a, b, width, height, None)
    }

    /// Mean SSIM of `img` against `target`; writes `∂SSIM/∂img` into `grad` (same length).
    pub fn ssim_and_grad_into(
        &mut self,
        img: &[f32],
        target: &[f32],
        width: usize,
        height: usize,
        grad: &mut [f32],
    ) -> Result<f64, MetricsError> {
        check_same_len(img.len(), grad.len())?;
        self.inner.run(img, target, width, height, Some(grad))
    }
}

/// The float types the SSIM core runs in.
pub(crate) trait Real:
    Copy
    + Send
    + Sync
    + Default
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + AddAssign
{
    fn of(v: f64) -> Self;
    fn f64(self) -> f64;
}

impl Real for f32 {
    fn of(v: f64) -> f32 {
        v as f32
    }
    fn f64(self) -> f64 {
        self as f64
    }
}

impl Real for f64 {
    fn of(v: f64) -> f64 {
        v
    }
    fn f64(self) -> f64 {
        self
    }
}

/// An image value as the SSIM core reads it: a float as it is, an 8-bit value scaled to
/// [0, 1] (divided by 255 in f32, as [`ssim_u8`] documents), so 8-bit images are scored
/// without a float copy of either.
pub(crate) trait Sample<T>: Copy + Sync {
    fn value(self) -> T;
}

impl<T: Real> Sample<T> for T {
    #[inline(always)]
    fn value(self) -> T {
        self
    }
}

impl Sample<f32> for u8 {
    #[inline(always)]
    fn value(self) -> f32 {
        self as f32 / 255.0
    }
}

/// The normalised 1-D SSIM window, `g(t) ∝ exp(−t²/(2σ²))` for `t = −5..=5`, computed in f64
/// (as 3DGS does with Python floats) and rounded once to `T`.
pub(crate) fn window_1d<T: Real>() -> [T; SSIM_WINDOW] {
    let mut w = [0.0f64; SSIM_WINDOW];
    for (k, v) in w.iter_mut().enumerate() {
        let t = k as f64 - RADIUS as f64;
        *v = (-t * t / (2.0 * SSIM_SIGMA * SSIM_SIGMA)).exp();
    }
    let sum: f64 = w.iter().sum();
    w.map(|v| T::of(v / sum))
}

/// Output rows of a band at the least. A band also computes the statistics of the `2·RADIUS`
/// rows above and below it and the partials of the `RADIUS` rows either side (its halo), so
/// shorter bands would spend a larger share of their work on halos.
const MIN_BAND_ROWS: usize = 64;

/// The scratch of [`Workspace::run`], kept between calls: a [`Band`] per band of image rows
/// and the per-row sums of S.
#[derive(Debug, Default)]
pub(crate) struct Workspace<T> {
    bands: Vec<Band<T>>,
    /// Per image row and channel (at `3·row + channel`), the sum of the row's S, so that the
    /// mean adds them in row order on any number of threads.
    row_sums: Vec<f64>,
}

/// Horizontal sums per row in [`Band::stats`]: x, y, x², y², x·y.
const STATS: usize = 5;
/// Per-pixel partial derivatives per row in [`Band::partials`]: μx, Pxx, Pxy.
const PARTIALS: usize = 3;

/// The scratch of one band of rows: what the windows around its current row reach, and no
/// more. Each ring holds [`SSIM_WINDOW`] image rows, row `q` in slot `q % SSIM_WINDOW`.
#[derive(Debug, Default)]
struct Band<T> {
    /// Ring of the horizontal window sums of each row's five statistics (five rows of `width`
    /// per slot).
    stats: Vec<T>,
    /// Ring of the horizontal window sums of each row's three partial derivatives
    /// (`∂S/∂μx`, `∂S/∂Pxx`, `∂S/∂Pxy`; three rows of `width` per slot).
    partials: Vec<T>,
    /// The five statistics of the row being summed horizontally, zero-padded.
    stats_row: Padded<T>,
    /// The three partial derivatives of the row being summed horizontally, zero-padded.
    partials_row: Padded<T>,
    /// Vertical window sums at one row: five quantities, or the first three.
    sums: Vec<T>,
    /// The S of the row's pixels, before they are added up.
    s_row: Vec<T>,
}

/// What every band of one call shares: the images, their size and the constants.
struct Pass<'a, A, T> {
    a: &'a [A],
    b: &'a [A],
    width: usize,
    height: usize,
    win: [T; SSIM_WINDOW],
    c1: T,
    c2: T,
    two: T,
    /// The gradient's scale 1/N: the SSIM is a mean over N = 3·width·height values.
    inv_n: T,
}

impl<'a, A: Sample<T>, T: Real> Pass<'a, A, T> {
    /// The pixels of image row `j` of `a` and `b`, each as its three channels.
    fn pixels(&self, j: usize) -> impl Iterator<Item = (&'a [A], &'a [A])> + use<'a, A, T> {
        let row = |img: &'a [A]| img[3 * self.width * j..][..3 * self.width].chunks_exact(3);
        row(self.a).zip(row(self.b))
    }
}

impl<T: Real> Workspace<T> {
    /// Computes mean SSIM and, when `grad` is given, its gradient w.r.t. `a`.
    ///
    /// The image is cut into bands of rows, one parallel task each ([`Band::run`]). Every
    /// window sum starts at 0 and adds its taps in order, with the out-of-image taps reading
    /// zeros (which leaves a sum that started at +0 unchanged), and a band computes the rows
    /// of its halo exactly as their own band does, so the result does not depend on the number
    /// of bands or threads.
    pub(crate) fn run<A: Sample<T>>(
        &mut self,
        a: &[A],
        b: &[A],
        width: usize,
        height: usize,
        grad: Option<&mut [T]>,
    ) -> Result<f64, MetricsError> {
        check_shape(a.len(), width, height)?;
        check_shape(b.len(), width, height)?;
        let n = width * height;
        // One band per thread, unless that makes them shorter than MIN_BAND_ROWS.
        let band_rows = height
            .div_ceil(rayon::current_num_threads())
            .max(MIN_BAND_ROWS);
        let bands = height.div_ceil(band_rows);
        self.bands.resize_with(bands, Band::default);
        for band in &mut self.bands {
            band.prepare(width, grad.is_some());
        }
        self.row_sums.clear();
        self.row_sums.resize(3 * height, 0.0);
        let pass = Pass {
            a,
            b,
            width,
            height,
            win: window_1d(),
            c1: T::of(SSIM_C1),
            c2: T::of(SSIM_C2),
            two: T::of(2.0),
            inv_n: T::of(1.0 / (3 * n) as f64),
        };
        let grads: Vec<Option<&mut [T]>> = match grad {
            Some(g) => {
                debug_assert_eq!(g.len(), 3 * n);
                g.chunks_mut(3 * width * band_rows).map(Some).collect()
            }
            None => (0..bands).map(|_| None).collect(),
        };
        self.bands
            .par_iter_mut()
            .zip(self.row_sums.par_chunks_mut(3 * band_rows))
            .zip(grads)
            .enumerate()
            .for_each(|(k, ((band, sums), grad))| {
                let first = k * band_rows;
                band.run(&pass, first..(first + band_rows).min(height), sums, grad);
            });
        let mut total = 0.0f64;
        for c in 0..3 {
            total += self.row_sums.iter().skip(c).step_by(3).sum::<f64>();
        }
        Ok(total / (3 * n) as f64)
    }
}

#[cfg(test)]
impl<T> Workspace<T> {
    /// Bytes the bands hold (the per-row sums of S, 24 B per image row, left out).
    fn band_bytes(&self) -> usize {
        let values = |b: &Band<T>| {
            b.stats.capacity()
                + b.partials.capacity()
                + b.stats_row.values.capacity()
                + b.partials_row.values.capacity()
                + b.sums.capacity()
                + b.s_row.capacity()
        };
        self.bands.iter().map(values).sum::<usize>() * std::mem::size_of::<T>()
    }
}

impl<T: Real> Band<T> {
    /// Sizes the rings and rows for images `width` wide; the partials' only for a gradient.
    fn prepare(&mut self, width: usize, grad: bool) {
        self.stats.resize(SSIM_WINDOW * STATS * width, T::default());
        self.stats_row.reset(STATS, width);
        self.sums.resize(STATS * width, T::default());
        self.s_row.resize(width, T::default());
        if grad {
            self.partials
                .resize(SSIM_WINDOW * PARTIALS * width, T::default());
            self.partials_row.reset(PARTIALS, width);
        }
    }

    /// The S of image rows `rows`, each channel's row sum into `sums` (at `3·(row −
    /// rows.start) + channel`), and with `grad` (those rows of the interleaved image) the
    /// gradient. Per channel, one sweep down the rows, four steps per row `j`:
    /// 1. the horizontal sums of the five statistics of every row the window at `j` reaches;
    /// 2. their vertical sums at `j`, and from them each pixel's S and partial derivatives;
    /// 3. the horizontal sums of the partials;
    /// 4. the gradient of every row whose window of partials is now complete (the window is
    ///    symmetric and zero padding makes the convolution its own adjoint).
    ///
    /// For the gradient the sweep starts `RADIUS` rows above the band and ends `RADIUS` rows
    /// below it: those rows' partials are in the band's rows' windows.
    fn run<A: Sample<T>>(
        &mut self,
        pass: &Pass<A, T>,
        rows: std::ops::Range<usize>,
        sums: &mut [f64],
        mut grad: Option<&mut [T]>,
    ) {
        let Band {
            stats,
            partials,
            stats_row,
            partials_row,
            sums: window_sums,
            s_row,
        } = self;
        let (w, h) = (pass.width, pass.height);
        let (win, c1, c2, two) = (&pass.win, pass.c1, pass.c2, pass.two);
        let want_grad = grad.is_some();
        let swept = if want_grad {
            rows.start.saturating_sub(RADIUS)..(rows.end + RADIUS).min(h)
        } else {
            rows.clone()
        };
        for c in 0..3 {
            let mut next_stats = swept.start.saturating_sub(RADIUS);
            let mut next_grad = rows.start;
            for j in swept.clone() {
                // 1.
                while next_stats <= (j + RADIUS).min(h - 1) {
                    let q = next_stats;
                    let [x, y, xx, yy, xy] = stats_row.interior_mut();
                    let outs = x.iter_mut().zip(y).zip(xx).zip(yy).zip(xy);
                    for (((((x, y), xx), yy), xy), (pa, pb)) in outs.zip(pass.pixels(q)) {
                        let (xv, yv) = (pa[c].value(), pb[c].value());
                        *x = xv;
                        *y = yv;
                        *xx = xv * xv;
                        *yy = yv * yv;
                        *xy = xv * yv;
                    }
                    stats_row.blur_into(ring_slot(stats, STATS * w, q), win);
                    next_stats += 1;
                }
                // 2.
                vertical_into(stats, STATS * w, h, j, win, window_sums);
                let q = |k: usize| &window_sums[k * w..][..w];
                let (m_x, m_y, p_xx, p_yy, p_xy) = (q(0), q(1), q(2), q(3), q(4));
                let s_row = &mut s_row[..w];
                // S and the partials elementwise (the divisions vectorize), then S's row sum.
                if want_grad {
                    let [g_m, g_xx, g_xy] = partials_row.interior_mut();
                    let (g_m, g_xx, g_xy) = (&mut g_m[..w], &mut g_xx[..w], &mut g_xy[..w]);
                    for i in 0..w {
                        let (mx, my) = (m_x[i], m_y[i]);
                        let t = Terms::at(mx, my, p_xx[i], p_yy[i], p_xy[i], c1, c2);
                        let s = t.a1 * t.a2 / t.d;
                        s_row[i] = s;
                        g_m[i] = (two * my * (t.a2 - t.a1) - two * mx * s * (t.b2 - t.b1)) / t.d;
                        g_xx[i] = T::default() - s / t.b2;
                        g_xy[i] = two * t.a1 / t.d;
                    }
                } else {
                    for i in 0..w {
                        let t = Terms::at(m_x[i], m_y[i], p_xx[i], p_yy[i], p_xy[i], c1, c2);
                        s_row[i] = t.a1 * t.a2 / t.d;
                    }
                }
                let row_sum = s_row.iter().fold(0.0f64, |sum, &s| sum + s.f64());
                if rows.contains(&j) {
                    sums[3 * (j - rows.start) + c] = row_sum;
                }
                let Some(grad) = grad.as_deref_mut() else {
                    continue;
                };
                // 3.
                partials_row.blur_into(ring_slot(partials, PARTIALS * w, j), win);
                // 4.
                while next_grad < rows.end && (next_grad + RADIUS).min(h - 1) <= j {
                    let g = next_grad;
                    let s = &mut window_sums[..PARTIALS * w];
                    vertical_into(partials, PARTIALS * w, h, g, win, s);
                    let (s_m, rest) = s.split_at(w);
                    let (s_xx, s_xy) = rest.split_at(w);
                    let out = grad[3 * w * (g - rows.start)..][..3 * w].chunks_exact_mut(3);
                    let sums = s_m.iter().zip(s_xx).zip(s_xy);
                    for ((out, (pa, pb)), ((&s_m, &s_xx), &s_xy)) in
                        out.zip(pass.pixels(g)).zip(sums)
                    {
                        let (x, y) = (pa[c].value(), pb[c].value());
                        out[c] = pass.inv_n * (s_m + two * x * s_xx + y * s_xy);
                    }
                    next_grad += 1;
                }
            }
        }
    }
}

/// The terms of S at one pixel (the module doc's names) from its window statistics.
struct Terms<T> {
    a1: T,
    a2: T,
    b1: T,
    b2: T,
    /// `b1 · b2`.
    d: T,
}

impl<T: Real> Terms<T> {
    #[inline(always)]
    fn at(m_x: T, m_y: T, p_xx: T, p_yy: T, p_xy: T, c1: T, c2: T) -> Terms<T> {
        let two = T::of(2.0);
        let sxx = p_xx - m_x * m_x;
        let syy = p_yy - m_y * m_y;
        let sxy = p_xy - m_x * m_y;
        let b1 = m_x * m_x + m_y * m_y + c1;
        let b2 = sxx + syy + c2;
        Terms {
            a1: two * m_x * m_y + c1,
            a2: two * sxy + c2,
            b1,
            b2,
            d: b1 * b2,
        }
    }
}

/// Slot `q % SSIM_WINDOW` of a ring of `stride`-long slots.
fn ring_slot<T>(ring: &mut [T], stride: usize, q: usize) -> &mut [T] {
    &mut ring[q % SSIM_WINDOW * stride..][..stride]
}

/// One image row of `K` quantities with [`RADIUS`] zeros at either end, for the horizontal
/// window sums.
#[derive(Debug, Default)]
struct Padded<T> {
    values: Vec<T>,
    width: usize,
}

impl<T: Real> Padded<T> {
    /// `k` quantities of rows `width` wide, all zeros.
    fn reset(&mut self, k: usize, width: usize) {
        self.values.clear();
        self.values.resize(k * (width + 2 * RADIUS), T::default());
        self.width = width;
    }

    /// The `K` quantities' pixels (the padding is left at zero).
    fn interior_mut<const K: usize>(&mut self) -> [&mut [T]; K] {
        let stride = self.width + 2 * RADIUS;
        debug_assert_eq!(K * stride, self.values.len());
        let mut rows = self
            .values
            .chunks_mut(stride)
            .map(|r| &mut r[RADIUS..RADIUS + self.width]);
        std::array::from_fn(|_| rows.next().expect("K rows"))
    }

    /// `out` (`K` rows of `width`) = the window sums of every quantity: each output starts at
    /// 0 and adds its taps in order, a tap at a time over the whole row so the loop
    /// vectorizes.
    fn blur_into(&self, out: &mut [T], win: &[T; SSIM_WINDOW]) {
        let stride = self.width + 2 * RADIUS;
        for (src, dst) in self.values.chunks(stride).zip(out.chunks_mut(self.width)) {
            // The first tap is added to 0 as it is written (no separate pass of zeros).
            for (o, &v) in dst.iter_mut().zip(&src[..self.width]) {
                *o = T::default() + win[0] * v;
            }
            for (t, &wt) in win.iter().enumerate().skip(1) {
                for (o, &v) in dst.iter_mut().zip(&src[t..t + self.width]) {
                    *o += wt * v;
                }
            }
        }
    }
}

/// `sums` = the vertical window sums at image row `j` of the first `sums.len()` values of the
/// rows in `ring` (row `q` in slot `q % SSIM_WINDOW`, `stride` values per slot): each starts
/// at 0 and adds the rows inside the image in order (the zero padding's rows add nothing).
fn vertical_into<T: Real>(
    ring: &[T],
    stride: usize,
    height: usize,
    j: usize,
    win: &[T; SSIM_WINDOW],
    sums: &mut [T],
) {
    let lo = j.saturating_sub(RADIUS);
    let hi = (j + RADIUS).min(height - 1);
    let k = sums.len();
    let src = |q: usize| &ring[q % SSIM_WINDOW * stride..][..k];
    // The first row is added to 0 as it is written (no separate pass of zeros).
    let wt = win[lo + RADIUS - j];
    for (o, &v) in sums.iter_mut().zip(src(lo)) {
        *o = T::default() + wt * v;
    }
    for q in lo + 1..=hi {
        let wt = win[q + RADIUS - j];
        for (o, &v) in sums.iter_mut().zip(src(q)) {
            *o += wt * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn random_image(rng: &mut Rng, w: usize, h: usize) -> Vec<f64> {
        (0..w * h * 3).map(|_| rng.next_f64()).collect()
    }

    /// SSIM by the definition: a direct 2-D 11×11 window sum with explicit zero padding.
    fn naive_ssim(a: &[f64], b: &[f64], w: usize, h: usize) -> f64 {
        let g = window_1d::<f64>();
        let px = |img: &[f64], i: isize, j: isize, c: usize| -> f64 {
            if i < 0 || j < 0 || i >= w as isize || j >= h as isize {
                0.0
            } else {
                img[(j as usize * w + i as usize) * 3 + c]
            }
        };
        let mut total = 0.0;
        for c in 0..3 {
            for j in 0..h as isize {
                for i in 0..w as isize {
                    let (mut mx, mut my, mut xx, mut yy, mut xy) = (0.0, 0.0, 0.0, 0.0, 0.0);
                    for dj in -5..=5isize {
                        for di in -5..=5isize {
                            let wt = g[(di + 5) as usize] * g[(dj + 5) as usize];
                            let x = px(a, i + di, j + dj, c);
                            let y = px(b, i + di, j + dj, c);
                            mx += wt * x;
                            my += wt * y;
                            xx += wt * x * x;
                            yy += wt * y * y;
                            xy += wt * x * y;
                        }
                    }
                    let (sxx, syy, sxy) = (xx - mx * mx, yy - my * my, xy - mx * my);
                    total += (2.0 * mx * my + SSIM_C1) * (2.0 * sxy + SSIM_C2)
                        / ((mx * mx + my * my + SSIM_C1) * (sxx + syy + SSIM_C2));
                }
            }
        }
        total / (3 * w * h) as f64
    }

    fn ssim64(a: &[f64], b: &[f64], w: usize, h: usize) -> f64 {
        Workspace::<f64>::default().run(a, b, w, h, None).unwrap()
    }

    #[test]
    fn window_is_normalised_and_symmetric() {
        let g = window_1d::<f64>();
        assert!((g.iter().sum::<f64>() - 1.0).abs() < 1e-15);
        for t in 0..SSIM_WINDOW {
            assert_eq!(g[t], g[SSIM_WINDOW - 1 - t]);
        }
        // Ratio of neighbouring taps at the centre is exp(−1/(2σ²)) = exp(−1/4.5).
        assert!((g[6] / g[5] - (-1.0f64 / 4.5).exp()).abs() < 1e-15);
    }

    #[test]
    fn identical_images_give_ssim_one_and_infinite_psnr() {
        let mut rng = Rng::new(1);
        let a: Vec<f32> = (0..20 * 14 * 3).map(|_| rng.next_f32()).collect();
        let s = ssim(&a, &a, 20, 14).unwrap();
        assert!((s - 1.0).abs() < 1e-6, "{s}");
        assert_eq!(psnr(&a, &a, 1.0).unwrap(), f64::INFINITY);
        let u: Vec<u8> = a.iter().map(|v| (v * 255.0) as u8).collect();
        assert_eq!(psnr_u8(&u, &u).unwrap(), f64::INFINITY);
        assert!((ssim_u8(&u, &u, 20, 14).unwrap() - 1.0).abs() < 1e-6);
        // Identical images have zero gradient: SSIM is at its maximum.
        let (_, g) = ssim_and_grad(&a, &a, 20, 14).unwrap();
        assert!(g.iter().all(|v| v.abs() < 1e-6));
    }

    #[test]
    fn psnr_hand_computed() {
        // Every value off by 0.1: MSE = 0.01, PSNR = 10·log10(1/0.01) = 20 dB.
        let a = vec![0.5f32; 12];
        let b = vec![0.6f32; 12];
        assert!((psnr(&a, &b, 1.0).unwrap() - 20.0).abs() < 1e-5);
        // One of four values off by 255: MSE = 255²/4, PSNR = 10·log10(4) ≈ 6.0206 dB.
        let u = [0u8, 0, 0, 0];
        let v = [255u8, 0, 0, 0];
        assert!((psnr_u8(&u, &v).unwrap() - 10.0 * 4f64.log10()).abs() < 1e-12);
        // The u8 and float forms agree.
        let uf: Vec<f32> = u.iter().map(|&x| x as f32 / 255.0).collect();
        let vf: Vec<f32> = v.iter().map(|&x| x as f32 / 255.0).collect();
        assert!((psnr(&uf, &vf, 1.0).unwrap() - psnr_u8(&u, &v).unwrap()).abs() < 1e-9);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let a = vec![0.0f32; 12];
        let b = vec![0.0f32; 9];
        assert_eq!(
            psnr(&a, &b, 1.0),
            Err(MetricsError::LengthMismatch { a: 12, b: 9 })
        );
        assert!(matches!(
            ssim(&a, &a, 3, 2),
            Err(MetricsError::BadShape { .. })
        ));
        assert!(matches!(
            ssim(&[], &[], 0, 0),
            Err(MetricsError::Empty { .. })
        ));
        assert!(matches!(
            psnr(&[], &[], 1.0),
            Err(MetricsError::Empty { .. })
        ));
        let mut g = vec![0.0f32; 3];
        assert!(SsimScratch::new()
            .ssim_and_grad_into(&a, &a, 2, 2, &mut g)
            .is_err());
    }

    /// Two constant images a and b. With zero padding the local statistics at a pixel whose
    /// window keeps weight k inside the image are μx = a·k, Pxx = a²·k (so σxx = a²k(1−k)),
    /// μy = b·k, σyy = b²k(1−k), σxy = ab·k(1−k), where k = kx(i)·ky(j) is the product of
    /// the 1-D window mass inside the image. Away from the border k = 1 and
    /// S = (2ab + C1)/(a² + b² + C1), the textbook luminance term.
    #[test]
    fn constant_images_closed_form() {
        let (w, h) = (30usize, 24usize);
        let (a, b) = (0.6f64, 0.4f64);
        let g = window_1d::<f64>();
        let inside = |i: usize, n: usize| -> f64 {
            (0..SSIM_WINDOW)
                .filter(|&t| {
                    let q = i as isize + t as isize - RADIUS as isize;
                    q >= 0 && q < n as isize
                })
                .map(|t| g[t])
                .sum()
        };
        let mut want = 0.0;
        for j in 0..h {
            for i in 0..w {
                let k = inside(i, w) * inside(j, h);
                let v = k * (1.0 - k);
                want += (2.0 * a * b * k * k + SSIM_C1) * (2.0 * a * b * v + SSIM_C2)
                    / (((a * a + b * b) * k * k + SSIM_C1) * ((a * a + b * b) * v + SSIM_C2));
            }
        }
        want /= (w * h) as f64;
        let ia = vec![a; w * h * 3];
        let ib = vec![b; w * h * 3];
        assert!((ssim64(&ia, &ib, w, h) - want).abs() < 1e-12);
        // The f32 public path agrees to f32 precision: σ = P − μ² cancels to ~0.36·6e-8 in
        // f32 and is divided by C2 = 9e-4, so ~3e-5 per pixel (measured 3.8e-5 here): 1e-4.
        let fa = vec![a as f32; w * h * 3];
        let fb = vec![b as f32; w * h * 3];
        let got = ssim(&fa, &fb, w, h).unwrap();
        assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    }

    #[test]
    fn separable_matches_naive_double_loop() {
        let mut rng = Rng::new(5);
        // Odd, non-square, smaller than the window in one direction: every border case.
        for (w, h) in [(13usize, 9usize), (7, 16), (1, 1), (24, 20)] {
            let a = random_image(&mut rng, w, h);
            let b = random_image(&mut rng, w, h);
            let fast = ssim64(&a, &b, w, h);
            let slow = naive_ssim(&a, &b, w, h);
            assert!((fast - slow).abs() < 1e-12, "{w}x{h}: {fast} vs {slow}");
            let fa: Vec<f32> = a.iter().map(|&v| v as f32).collect();
            let fb: Vec<f32> = b.iter().map(|&v| v as f32).collect();
            // f32 sums of ~121 products of values ≤ 1 lose ~1e-6 relative; the variance
            // differences are scaled by 1/C2 ≈ 1.1e3, so 1e-4 is a safe bound.
            let f = ssim(&fa, &fb, w, h).unwrap();
            assert!((f - slow).abs() < 1e-4, "{w}x{h}: f32 {f} vs {slow}");
        }
    }

    #[test]
    fn gradient_matches_central_differences() {
        let mut rng = Rng::new(9);
        let (w, h) = (14usize, 12usize);
        let x = random_image(&mut rng, w, h);
        // A target correlated with x so every SSIM term is exercised (not just noise).
        let y: Vec<f64> = x.iter().map(|&v| 0.7 * v + 0.3 * rng.next_f64()).collect();
        let mut grad = vec![0.0f64; x.len()];
        let s = Workspace::<f64>::default()
            .run(&x, &y, w, h, Some(&mut grad))
            .unwrap();
        assert!((s - naive_ssim(&x, &y, w, h)).abs() < 1e-12);
        // Step 1e-5: SSIM is a smooth rational function, the central-difference truncation
        // error is O(h²·|S'''|) ≈ 1e-10·(1/N) and round-off ≈ 1e-16/1e-5 = 1e-11; gradients
        // here are ~1e-4..1e-2, so 1e-8 absolute plus 1e-5 relative is tight but safe.
        let step = 1e-5;
        let mut xp = x.clone();
        let mut max_err: f64 = 0.0;
        for k in 0..x.len() {
            xp[k] = x[k] + step;
            let sp = ssim64(&xp, &y, w, h);
            xp[k] = x[k] - step;
            let sm = ssim64(&xp, &y, w, h);
            xp[k] = x[k];
            let fd = (sp - sm) / (2.0 * step);
            let err = (fd - grad[k]).abs();
            assert!(
                err < 1e-8 + 1e-5 * fd.abs(),
                "value {k}: analytic {} vs fd {fd}",
                grad[k]
            );
            max_err = max_err.max(err);
        }
        // The f32 public path gives the same gradient to f32 precision.
        let fx: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let fy: Vec<f32> = y.iter().map(|&v| v as f32).collect();
        let (fs, fg) = ssim_and_grad(&fx, &fy, w, h).unwrap();
        assert!((fs - s).abs() < 1e-4);
        let gmax = grad.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (a, b) in fg.iter().zip(&grad) {
            // Same 1/C2 amplification argument as the forward check: 1e-3 of the largest
            // gradient entry.
            assert!((*a as f64 - b).abs() < 1e-3 * gmax, "{a} vs {b}");
        }
    }

    /// The mean and the gradient are the same bits on any number of threads: every window sum
    /// adds its taps in a fixed order, and the per-pixel S are summed per row, rows in order.
    /// Checked in f64, where the order of the additions shows in the last bits.
    #[test]
    fn same_bits_on_any_number_of_threads() {
        let mut rng = Rng::new(4);
        let (w, h) = (203usize, 130usize);
        let a = random_image(&mut rng, w, h);
        let b: Vec<f64> = a.iter().map(|&v| 0.8 * v + 0.2 * rng.next_f64()).collect();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("thread pool");
            let mut g = vec![0.0f64; a.len()];
            let s = pool.install(|| {
                Workspace::<f64>::default()
                    .run(&a, &b, w, h, Some(&mut g))
                    .expect("same sizes")
            });
            (
                s.to_bits(),
                g.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            )
        };
        let one = run(1);
        for threads in [2, 3, 8] {
            assert!(run(threads) == one, "{threads} threads differ from one");
        }
    }

    /// The scratch is rows, not image planes: per band of at least 64 rows, 102 f32 per pixel
    /// of width and 80 more, so at most about 13 B per pixel, for images 65 rows tall (two
    /// bands), whatever the thread count; at 1080p a few hundredths of a byte per band.
    #[test]
    fn scratch_is_rows_not_planes() {
        let mut rng = Rng::new(8);
        for threads in [1, 2, 8, 64] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("thread pool");
            for (w, h) in [(320usize, 65usize), (320, 240), (1920, 1080)] {
                let a: Vec<f32> = (0..3 * w * h).map(|_| rng.next_f32()).collect();
                let mut g = vec![0.0f32; a.len()];
                let mut ws = Workspace::<f32>::default();
                pool.install(|| ws.run(&a, &a, w, h, Some(&mut g)).expect("same sizes"));
                let bands = h.div_ceil(h.div_ceil(threads).max(MIN_BAND_ROWS));
                assert_eq!(ws.band_bytes(), bands * 4 * (102 * w + 80), "{w}x{h}");
                let per_pixel = ws.band_bytes() as f64 / (w * h) as f64;
                assert!(
                    per_pixel <= 13.0,
                    "{threads} threads, {w}x{h}: {per_pixel} B"
                );
            }
        }
    }

    /// 8-bit images are read as they are, with the same bits as SSIM of their float copies.
    #[test]
    fn u8_images_score_as_their_float_copies() {
        let mut rng = Rng::new(12);
        let (w, h) = (97usize, 70usize);
        let a: Vec<u8> = (0..3 * w * h)
            .map(|_| (rng.next_f32() * 255.0) as u8)
            .collect();
        let b: Vec<u8> = a
            .iter()
            .map(|&v| v.saturating_add((rng.next_f32() * 20.0) as u8))
            .collect();
        let unit = |img: &[u8]| img.iter().map(|&v| v as f32 / 255.0).collect::<Vec<_>>();
        let want = ssim(&unit(&a), &unit(&b), w, h).unwrap();
        assert_eq!(ssim_u8(&a, &b, w, h).unwrap().to_bits(), want.to_bits());
        assert!(want < 1.0);
    }

    /// PSNR too: its f64 sum of squared differences is added in a fixed order.
    #[test]
    fn psnr_same_bits_on_any_number_of_threads() {
        let mut rng = Rng::new(6);
        let a: Vec<f32> = (0..300_000).map(|_| rng.next_f32()).collect();
        let b: Vec<f32> = a.iter().map(|&v| 0.9 * v + 0.1 * rng.next_f32()).collect();
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("thread pool")
                .install(|| psnr(&a, &b, 1.0).expect("same sizes").to_bits())
        };
        let one = run(1);
        for threads in [2, 3, 8] {
            assert_eq!(run(threads), one, "{threads} threads differ from one");
        }
    }

    #[test]
    fn scratch_is_reusable_across_sizes() {
        let mut rng = Rng::new(2);
        let mut scratch = SsimScratch::new();
        for (w, h) in [(20usize, 10usize), (5, 5), (32, 17)] {
            let a: Vec<f32> = (0..w * h * 3).map(|_| rng.next_f32()).collect();
            let b: Vec<f32> = (0..w * h * 3).map(|_| rng.next_f32()).collect();
            let fresh = ssim(&a, &b, w, h).unwrap();
            assert_eq!(scratch.ssim(&a, &b, w, h).unwrap(), fresh);
        }
    }
}
