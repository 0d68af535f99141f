//! Per-view bilateral grids: a learned, spatially varying and tone-dependent colour transform
//! per training view, applied to the render before the loss (gsplat's
//! `--post_processing bilateral_grid`, after Wang et al., "Bilateral Guided Radiance Field
//! Processing", SIGGRAPH 2024).
//!
//! A camera's image signal processor does more than a global exposure: local tone mapping,
//! vignetting, white balance that depends on the brightness of a region. A per-view 3×4 matrix
//! ([`super::exposure`]) absorbs only what is global; a bilateral grid absorbs what varies
//! smoothly over the image and with the pixel's brightness, so the Gaussians need not fit it
//! with view-dependent colour and floaters.
//!
//! # The map
//! Each view `v` has a grid of `X × Y × L` cells (`X` across the image, `Y` down, `L` over
//! the brightness; 16 × 16 × 8 by default), each cell a 3×4 affine colour matrix `M`
//! (row-major, 12 floats; the identity at the start). For a pixel at column `px`, row `py` of
//! a `W × H` render with colour `x`, the grid is sampled at
//!
//! - `gx = (px + ½)/W · (X − 1)`, `gy = (py + ½)/H · (Y − 1)` (the pixel centre; the grid's
//!   corner cells sit on the image's corners),
//! - `gz = clamp(γ, 0, 1) · (L − 1)` with `γ = 0.299·r + 0.587·g + 0.114·b` (BT.601 luma),
//!
//! by trilinear interpolation of the 8 cells around that point, and the loss sees
//! `y_j = Σ_i M[j][i]·x_i + M[j][3]`. This is gsplat's `slice`: `F.grid_sample` with
//! `align_corners=True` and `padding_mode="border"` on the `(12, L, Y, X)` grid, coordinates
//! `(2·xy − 1, 2·γ − 1)`. The guidance `γ` is the render's own colour, so the gradient flows
//! into the render twice: through `M` and through `gz` (where `γ` is clamped, not through `gz`,
//! as PyTorch's border padding does).
//!
//! # The regulariser and the optimizer (gsplat's)
//! - Total variation over every grid, every step: `TV = λ/N · Σ_axes Σ (Δ along the axis)² /
//!   (12 · cells with a neighbour along it)`, summed over all `N` views' grids, `λ = 10`
//!   (gsplat's `total_variation_loss` on the `(N, 12, L, Y, X)` tensor). It is what keeps a
//!   grid smooth where its view gives it no signal.
//! - Adam with β 0.9/0.999 and ε 1e-15, learning rate `2e-3 · (0.01 + 0.99 · min(k, 1000)/1000)
//!   · 0.01^(k / iterations)` at optimizer step `k` (0-based): a linear warm-up over the first
//!   1,000 steps chained with an exponential decay to 1 % over the run (gsplat's `LinearLR` and
//!   `ExponentialLR`).
//! - Every view's grid steps every iteration: the total variation's gradient is dense, and
//!   gsplat steps the whole `(N, …)` tensor with one Adam.
//!
//! # Storage and determinism
//! A view's grid is `L · Y · X` cells in that order (`x` fastest), each its 12 coefficients
//! (cell-major, so the 8 cells a pixel reads are 8 runs of 12 floats). The grid's gradient is
//! summed in f64, over fixed bands of rows each summed in pixel order and then added in band
//! order, so a run is bit-identical whatever the thread count. The step runs per view in
//! parallel; each view's update reads only its own grid. Its device twins are in
//! `kernels/loss.cu` (`bilagrid_apply`, `bilagrid_grad`, `bilagrid_dx`, and `bilagrid_adam`,
//! with which the device engine steps grids it holds: the same operations in the same order).
//!
//! Invariants: `values`, `exp_avg` and `exp_avg_sq` of [`BilateralGrids`] always have the same
//! length, a whole number of grids of [`GridShape::floats`]; a view beyond them has the
//! identity grid and zero moments. A run holds every training view's grid from its first step
//! ([`BilateralGrids::ensure`]), since the total variation sums over all of them.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::adam::{AdamConfig, Coef};

/// Coefficients per cell (a row-major 3×4 affine colour matrix).
pub const COEFFS: usize = 12;

/// The identity cell.
pub const IDENTITY: [f32; COEFFS] = [
    1.0, 0.0, 0.0, 0.0, //
    0.0, 1.0, 0.0, 0.0, //
    0.0, 0.0, 1.0, 0.0,
];

/// BT.601 luma weights: the guidance `γ` (gsplat's `rgb2gray`).
pub const LUMA: [f32; 3] = [0.299, 0.587, 0.114];

/// Largest number of cells along one axis: the device kernels keep one column of `L` cells
/// per thread, and a grid of more than 64 cells a side has more parameters than pixels to
/// learn them from on any camera.
pub const MAX_CELLS: u32 = 64;

/// Bands of rows over which the grid gradient is summed (in parallel, then in band order).
/// Fixed, so the sum does not depend on the number of threads.
const BANDS: usize = 8;

/// A grid's cells along each axis (gsplat's `bilateral_grid_shape`, `(X, Y, W)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GridShape {
    /// Across the image.
    pub x: u32,
    /// Down the image.
    pub y: u32,
    /// Over the brightness (gsplat's `W`, the guidance axis).
    pub l: u32,
}

impl Default for GridShape {
    fn default() -> Self {
        GridShape { x: 16, y: 16, l: 8 }
    }
}

impl GridShape {
    /// Cells of one grid.
    pub fn cells(&self) -> usize {
        self.x as usize * self.y as usize * self.l as usize
    }

    /// Floats of one grid.
    pub fn floats(&self) -> usize {
        self.cells() * COEFFS
    }

    /// Parses `X,Y,L` (gsplat's order), each 1 to [`MAX_CELLS`].
    pub fn parse(s: &str) -> Result<GridShape, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [x, y, l] = parts[..] else {
            return Err(format!(
                "expected three cell counts X,Y,L (across, down, brightness), e.g. 16,16,8; got {s:?}"
            ));
        };
        let num = |what: &str, v: &str| -> Result<u32, String> {
            v.parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_CELLS).contains(n))
                .ok_or_else(|| {
                    format!("{what} must be a whole number from 1 to {MAX_CELLS}, not {v:?}")
                })
        };
        Ok(GridShape {
            x: num("X (cells across)", x)?,
            y: num("Y (cells down)", y)?,
            l: num("L (brightness cells)", l)?,
        })
    }

    /// A shape out of range, described for the user.
    pub fn invalid(&self) -> Option<String> {
        for (what, n) in [("X", self.x), ("Y", self.y), ("L", self.l)] {
            if !(1..=MAX_CELLS).contains(&n) {
                return Some(format!(
                    "bilateral grid {what} must be from 1 to {MAX_CELLS} cells, not {n}"
                ));
            }
        }
        None
    }
}

impl std::fmt::Display for GridShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}×{}×{}", self.x, self.y, self.l)
    }
}

/// The bilateral grids' settings (gsplat's defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BilagridConfig {
    pub shape: GridShape,
    /// Peak learning rate (gsplat: `2e-3 · √batch`; batch 1).
    pub lr: f64,
    /// Weight of the total variation (gsplat: 10).
    pub tv_weight: f64,
    /// Steps of the linear warm-up from 1 % of `lr` (gsplat: 1,000).
    pub warmup_steps: u64,
    /// Length of the exponential decay to 1 % of `lr`; `None` = the run's iterations (a
    /// `--resume --extend` keeps the original length, as for the other schedules).
    #[serde(default)]
    pub max_steps: Option<u64>,
}

impl Default for BilagridConfig {
    fn default() -> Self {
        BilagridConfig {
            shape: GridShape::default(),
            lr: 2e-3,
            tv_weight: 10.0,
            warmup_steps: 1000,
            max_steps: None,
        }
    }
}

impl BilagridConfig {
    /// The learning rate of the step at 1-based `iteration` of a run of `iterations` (gsplat's
    /// chained `LinearLR(start_factor=0.01, total_iters=warmup)` and
    /// `ExponentialLR(gamma=0.01^(1/max_steps))`, stepped once per iteration after the optimizer).
    pub fn lr_at(&self, iterations: u64, iteration: u64) -> f64 {
        let k = iteration.saturating_sub(1) as f64;
        let warm = if self.warmup_steps == 0 {
            1.0
        } else {
            0.01 + 0.99 * k.min(self.warmup_steps as f64) / self.warmup_steps as f64
        };
        let max = self.max_steps.unwrap_or(iterations).max(1) as f64;
        self.lr * warm * 0.01f64.powf(k / max)
    }

    /// A setting out of range, described for the user.
    pub fn invalid(&self) -> Option<String> {
        if let Some(why) = self.shape.invalid() {
            return Some(why);
        }
        for (name, v) in [
            ("bilateral grid lr", self.lr),
            ("bilateral grid TV weight", self.tv_weight),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Some(format!("{name} must be a finite number ≥ 0, not {v}"));
            }
        }
        None
    }
}

/// gsplat's Adam for the grids (ε 1e-15, as for the Gaussians).
pub const BILAGRID_ADAM: AdamConfig = AdamConfig {
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-15,
    sparse: false,
};

/// Every view's grid and its Adam moments (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct BilateralGrids {
    pub shape: GridShape,
    /// `views × shape.floats()`, view after view.
    pub values: Vec<f32>,
    pub exp_avg: Vec<f32>,
    pub exp_avg_sq: Vec<f32>,
    /// Optimizer steps taken.
    pub steps: u64,
}

impl BilateralGrids {
    /// No views held yet.
    pub fn new(shape: GridShape) -> BilateralGrids {
        BilateralGrids {
            shape,
            values: Vec::new(),
            exp_avg: Vec::new(),
            exp_avg_sq: Vec::new(),
            steps: 0,
        }
    }

    /// Views held.
    pub fn len(&self) -> usize {
        self.values.len() / self.shape.floats()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Grows to `n` views (identity grids, zero moments).
    pub fn ensure(&mut self, n: usize) {
        let floats = self.shape.floats();
        let have = self.len();
        if have < n {
            self.values.reserve_exact((n - have) * floats);
            for _ in have * self.shape.cells()..n * self.shape.cells() {
                self.values.extend_from_slice(&IDENTITY);
            }
            self.exp_avg.resize(n * floats, 0.0);
            self.exp_avg_sq.resize(n * floats, 0.0);
        }
    }

    /// View `slot`'s grid; `None` beyond the views held (the identity: see [`identity_grid`]).
    pub fn grid(&self, slot: usize) -> Option<&[f32]> {
        let f = self.shape.floats();
        self.values.get(slot * f..(slot + 1) * f)
    }

    /// Host bytes of `views` grids with their moments (what [`BilateralGrids::ensure`] holds).
    pub fn bytes(shape: GridShape, views: usize) -> u64 {
        3 * 4 * (shape.floats() * views) as u64
    }

    /// The total variation term over every grid held (see the module doc), in f64 in view
    /// order. Training reads it from [`BilateralGrids::step`]; the tests read it here.
    #[cfg(test)]
    fn tv_loss(&self, weight: f64) -> f64 {
        let n = self.len();
        if n == 0 {
            return 0.0;
        }
        let f = self.shape.floats();
        let per: Vec<f64> = self
            .values
            .par_chunks_exact(f)
            .map(|g| tv_of(self.shape, g, weight / n as f64, None))
            .collect();
        per.iter().sum()
    }

    /// One optimizer step at learning rate `lr`: every grid's gradient is the total
    /// variation's (weight `tv_weight`), plus `grad` (the loss's, summed in f64) on grid `slot`.
    /// Returns the total variation before the step (the term the loss carried).
    pub fn step(&mut self, lr: f64, tv_weight: f64, slot: Option<(usize, &[f64])>) -> f64 {
        if let Some((s, _)) = slot {
            self.ensure(s + 1);
        }
        let n = self.len();
        if n == 0 {
            return 0.0;
        }
        self.steps += 1;
        let coef = Coef::new(&BILAGRID_ADAM, lr, self.steps);
        let (shape, f) = (self.shape, self.shape.floats());
        let c = tv_weight / n as f64;
        let tv: Vec<f64> = self
            .values
            .par_chunks_exact_mut(f)
            .zip(self.exp_avg.par_chunks_exact_mut(f))
            .zip(self.exp_avg_sq.par_chunks_exact_mut(f))
            .enumerate()
            .map_init(
                || vec![0.0f64; f],
                |g, (v, ((p, m), s))| {
                    g.iter_mut().for_each(|x| *x = 0.0);
                    let tv = tv_of(shape, p, c, Some(g));
                    if let Some((_, lg)) = slot.filter(|(sl, _)| *sl == v) {
                        for (a, b) in g.iter_mut().zip(lg) {
                            *a += b;
                        }
                    }
                    for k in 0..f {
                        coef.update(&mut p[k], &mut m[k], &mut s[k], g[k] as f32);
                    }
                    tv
                },
            )
            .collect();
        tv.iter().sum()
    }

    /// Why the arrays cannot be a saved state: lengths disagree or are not whole grids, a value
    /// is not finite, or a second moment is negative.
    pub fn invalid(&self) -> Option<String> {
        if let Some(why) = self.shape.invalid() {
            return Some(why);
        }
        let f = self.shape.floats();
        let n = self.values.len();
        if self.exp_avg.len() != n || self.exp_avg_sq.len() != n || !n.is_multiple_of(f) {
            return Some(format!(
                "the bilateral grid arrays ({n}, {}, {} floats) are not whole grids of {f} \
                 floats of equal length",
                self.exp_avg.len(),
                self.exp_avg_sq.len()
            ));
        }
        for (what, a) in [
            ("bilateral grid", &self.values),
            ("bilateral grid first moment", &self.exp_avg),
            ("bilateral grid second moment", &self.exp_avg_sq),
        ] {
            if let Some(i) = a.iter().position(|x| !x.is_finite()) {
                return Some(format!("the {what} of view {} is not finite", i / f));
            }
        }
        if let Some(i) = self.exp_avg_sq.iter().position(|&x| x < 0.0) {
            return Some(format!(
                "the bilateral grid second moment of view {} is negative (it is a mean of \
                 squares)",
                i / f
            ));
        }
        None
    }
}

/// Host bytes of the scratch a step's grid gradient and optimizer use on `threads` threads:
/// the view's gradient, one per row band ([`backward`]) and one per thread ([`BilateralGrids::step`]),
/// each a grid of f64.
pub fn step_scratch_bytes(shape: GridShape, threads: usize) -> u64 {
    (8 * shape.floats() * (1 + BANDS + threads.max(1))) as u64
}

/// One grid of identity cells.
pub fn identity_grid(shape: GridShape) -> Vec<f32> {
    IDENTITY.repeat(shape.cells())
}

/// The total variation of one grid `g`, times `c` (the weight over the views), and with `grad`
/// its gradient added there. Per axis, the squared differences of neighbours are divided by
/// 12 × the cells that have a neighbour along it (gsplat's `_num_tensor_elems` of the shifted
/// tensor, at least 1).
fn tv_of(shape: GridShape, g: &[f32], c: f64, mut grad: Option<&mut Vec<f64>>) -> f64 {
    let (nx, ny, nl) = (shape.x as usize, shape.y as usize, shape.l as usize);
    let idx = |l: usize, y: usize, x: usize| ((l * ny + y) * nx + x) * COEFFS;
    let mut total = 0.0;
    // Per axis (x, y, l): its length, its stride in cells, and the cells with a neighbour
    // along it.
    let axes = [
        (nx, 1usize, (nx - 1) * ny * nl),
        (ny, nx, nx * (ny - 1) * nl),
        (nl, nx * ny, nx * ny * (nl - 1)),
    ];
    for (axis, &(len, stride, count)) in axes.iter().enumerate() {
        if len < 2 {
            continue;
        }
        let w = c / (COEFFS * count).max(1) as f64;
        let mut sum = 0.0f64;
        for l in 0..nl {
            for y in 0..ny {
                for x in 0..nx {
                    if [x, y, l][axis] + 1 >= len {
                        continue;
                    }
                    let a = idx(l, y, x);
                    let b = a + stride * COEFFS;
                    for k in 0..COEFFS {
                        let d = g[b + k] as f64 - g[a + k] as f64;
                        sum += d * d;
                        if let Some(gr) = grad.as_deref_mut() {
                            gr[b + k] += 2.0 * w * d;
                            gr[a + k] -= 2.0 * w * d;
                        }
                    }
                }
            }
        }
        total += w * sum;
    }
    total
}

/// Where pixel `(px, py)` of a `w × h` image reads the grid: the lower corner cell and the
/// fractions along x and y.
#[inline]
fn xy_coords(
    shape: GridShape,
    w: usize,
    h: usize,
    px: usize,
    py: usize,
) -> [(usize, usize, f32); 2] {
    let along = |p: usize, n: usize, cells: u32| {
        let g = (p as f32 + 0.5) / n as f32 * (cells - 1) as f32;
        let lo = (g.floor() as usize).min(cells as usize - 1);
        let hi = (lo + 1).min(cells as usize - 1);
        (lo, hi, g - lo as f32)
    };
    [along(px, w, shape.x), along(py, h, shape.y)]
}

/// The guidance coordinate of colour `x`: (lower cell, upper cell, fraction, whether the
/// gradient passes, i.e. `γ·(L−1)` strictly inside `(0, L−1)`).
#[inline]
fn z_coord(shape: GridShape, x: &[f32]) -> (usize, usize, f32, bool) {
    let top = (shape.l - 1) as f32;
    let gz = (LUMA[0] * x[0] + LUMA[1] * x[1] + LUMA[2] * x[2]) * top;
    let inside = gz > 0.0 && gz < top;
    let gz = if inside {
        gz
    } else if gz >= top {
        top
    } else {
        0.0
    };
    let lo = (gz.floor() as usize).min(shape.l as usize - 1);
    let hi = (lo + 1).min(shape.l as usize - 1);
    (lo, hi, gz - lo as f32, inside)
}

/// The 8 corners of a pixel's sample: cell offsets (in floats) and trilinear weights, and the
/// derivative of each weight along `gz`.
#[inline]
fn corners(
    shape: GridShape,
    xy: [(usize, usize, f32); 2],
    z: (usize, usize, f32, bool),
) -> [(usize, f32, f32); 8] {
    let (nx, ny) = (shape.x as usize, shape.y as usize);
    let [(x0, x1, tx), (y0, y1, ty)] = xy;
    let (z0, z1, tz, _) = z;
    let mut out = [(0usize, 0.0f32, 0.0f32); 8];
    let mut i = 0;
    for (zc, wz, dz) in [(z0, 1.0 - tz, -1.0f32), (z1, tz, 1.0)] {
        for (yc, wy) in [(y0, 1.0 - ty), (y1, ty)] {
            for (xc, wx) in [(x0, 1.0 - tx), (x1, tx)] {
                out[i] = (
                    ((zc * ny + yc) * nx + xc) * COEFFS,
                    wx * wy * wz,
                    wx * wy * dz,
                );
                i += 1;
            }
        }
    }
    out
}

/// The affine matrix a pixel reads (trilinear in the grid).
#[inline]
fn sample(grid: &[f32], cs: &[(usize, f32, f32); 8]) -> [f32; COEFFS] {
    let mut a = [0.0f32; COEFFS];
    for &(off, w, _) in cs {
        for k in 0..COEFFS {
            a[k] += w * grid[off + k];
        }
    }
    a
}

#[inline]
fn affine(a: &[f32; COEFFS], x: &[f32]) -> [f32; 3] {
    std::array::from_fn(|j| {
        a[4 * j] * x[0] + a[4 * j + 1] * x[1] + a[4 * j + 2] * x[2] + a[4 * j + 3]
    })
}

/// `out` (resized) = `image` (`[h, w, 3]`, row-major) through `grid` (see the module doc).
pub fn apply(
    shape: GridShape,
    grid: &[f32],
    image: &[f32],
    w: usize,
    h: usize,
    out: &mut Vec<f32>,
) {
    // Each pixel's output depends on that pixel alone: the in-place map on a copy.
    out.clear();
    out.extend_from_slice(image);
    apply_in_place(shape, grid, out, w, h);
}

/// `image` (`[h, w, 3]`) through `grid`, in place.
pub fn apply_in_place(shape: GridShape, grid: &[f32], image: &mut [f32], w: usize, h: usize) {
    debug_assert_eq!(grid.len(), shape.floats());
    debug_assert_eq!(image.len(), 3 * w * h);
    image
        .par_chunks_mut(3 * w.max(1))
        .enumerate()
        .for_each(|(py, row)| {
            for px in 0..w {
                let x = &mut row[3 * px..3 * px + 3];
                let cs = corners(shape, xy_coords(shape, w, h, px, py), z_coord(shape, x));
                let y = affine(&sample(grid, &cs), x);
                x.copy_from_slice(&y);
            }
        });
}

/// The adjoint of [`apply`]: `d` holds `∂L/∂y` and becomes `∂L/∂x` (in place); `grad`
/// (resized to the grid's floats) receives `∂L/∂grid`, summed in f64 (see the module doc for
/// the order). `image` is the render `x` the forward read.
pub fn backward(
    shape: GridShape,
    grid: &[f32],
    image: &[f32],
    w: usize,
    h: usize,
    d: &mut [f32],
    grad: &mut Vec<f64>,
) {
    let f = shape.floats();
    grad.clear();
    grad.resize(f, 0.0);
    let rows_per_band = h.div_ceil(BANDS).max(1);
    let row = 3 * w.max(1);
    let parts: Vec<Vec<f64>> = d
        .par_chunks_mut(rows_per_band * row)
        .zip(image.par_chunks(rows_per_band * row))
        .enumerate()
        .map(|(band, (dband, iband))| {
            let mut g = vec![0.0f64; f];
            for (r, (drow, irow)) in dband.chunks_mut(row).zip(iband.chunks(row)).enumerate() {
                let py = band * rows_per_band + r;
                for px in 0..w {
                    let x = &irow[3 * px..3 * px + 3];
                    let dy = [drow[3 * px], drow[3 * px + 1], drow[3 * px + 2]];
                    let z = z_coord(shape, x);
                    let cs = corners(shape, xy_coords(shape, w, h, px, py), z);
                    let a = sample(grid, &cs);
                    // ∂L/∂M of the sampled matrix.
                    let mut da = [0.0f32; COEFFS];
                    for j in 0..3 {
                        da[4 * j] = dy[j] * x[0];
                        da[4 * j + 1] = dy[j] * x[1];
                        da[4 * j + 2] = dy[j] * x[2];
                        da[4 * j + 3] = dy[j];
                    }
                    // Into the cells, and ∂L/∂gz through the weights.
                    let mut dgz = 0.0f32;
                    for &(off, wt, dwz) in &cs {
                        for k in 0..COEFFS {
                            g[off + k] += (wt * da[k]) as f64;
                            dgz += dwz * grid[off + k] * da[k];
                        }
                    }
                    // ∂L/∂x: through the matrix, and through the guidance where it is not
                    // clamped.
                    let dz = if z.3 { dgz * (shape.l - 1) as f32 } else { 0.0 };
                    for i in 0..3 {
                        drow[3 * px + i] =
                            a[i] * dy[0] + a[4 + i] * dy[1] + a[8 + i] * dy[2] + dz * LUMA[i];
                    }
                }
            }
            g
        })
        .collect();
    for p in parts {
        for (a, b) in grad.iter_mut().zip(p) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    const SMALL: GridShape = GridShape { x: 4, y: 3, l: 5 };

    fn random_image(rng: &mut Rng, w: usize, h: usize) -> Vec<f32> {
        // Colours inside (0.05, 0.95): the guidance stays strictly inside the grid.
        (0..3 * w * h)
            .map(|_| 0.05 + 0.9 * rng.next_f32())
            .collect()
    }

    fn random_grid(rng: &mut Rng, shape: GridShape, spread: f32) -> Vec<f32> {
        identity_grid(shape)
            .into_iter()
            .map(|v| v + spread * (rng.next_f32() - 0.5))
            .collect()
    }

    /// L = Σ wts·y in f64.
    fn weighted(shape: GridShape, grid: &[f32], x: &[f32], w: usize, h: usize, wts: &[f32]) -> f64 {
        let mut y = Vec::new();
        apply(shape, grid, x, w, h, &mut y);
        y.iter().zip(wts).map(|(&a, &b)| a as f64 * b as f64).sum()
    }

    #[test]
    fn identity_grids_change_nothing() {
        let mut rng = Rng::new(1);
        let (w, h) = (7, 5);
        let x = random_image(&mut rng, w, h);
        let mut y = Vec::new();
        apply(SMALL, &identity_grid(SMALL), &x, w, h, &mut y);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn a_uniform_grid_is_one_affine_matrix_row_times_colour() {
        // Every cell the same matrix M: y_j = Σ_i M[j][i]·x_i + M[j][3] (gsplat's
        // `affine_mats[..., :3] @ rgb + affine_mats[..., 3]`).
        let m: [f32; COEFFS] = [
            1.1, 0.05, -0.02, 0.03, -0.04, 0.9, 0.01, -0.02, 0.02, 0.03, 1.2, 0.05,
        ];
        let grid = m.repeat(SMALL.cells());
        let x = [0.5f32, 0.25, 0.75];
        let mut y = Vec::new();
        apply(SMALL, &grid, &x, 1, 1, &mut y);
        let want = [
            1.1 * 0.5 + 0.05 * 0.25 - 0.02 * 0.75 + 0.03,
            -0.04 * 0.5 + 0.9 * 0.25 + 0.01 * 0.75 - 0.02,
            0.02 * 0.5 + 0.03 * 0.25 + 1.2 * 0.75 + 0.05,
        ];
        for j in 0..3 {
            assert!(
                (y[j] - want[j]).abs() < 1e-6,
                "{j}: {} vs {}",
                y[j],
                want[j]
            );
        }
    }

    #[test]
    fn pixels_sample_the_grid_at_their_centres_and_luma() {
        // The bias of red is the cell's x index plus 10 × its brightness index: the sampled
        // bias is then (px + ½)/W·(X − 1) + 10·γ·(L − 1), the render's luma γ.
        let shape = GridShape { x: 5, y: 2, l: 3 };
        let mut grid = identity_grid(shape);
        for l in 0..3 {
            for y in 0..2 {
                for x in 0..5 {
                    grid[((l * 2 + y) * 5 + x) * COEFFS + 3] = x as f32 + 10.0 * l as f32;
                }
            }
        }
        let (w, h) = (8, 2);
        let colour = [0.2f32, 0.6, 0.4];
        let image: Vec<f32> = colour.repeat(w * h);
        let mut out = Vec::new();
        apply(shape, &grid, &image, w, h, &mut out);
        let luma = 0.299 * 0.2 + 0.587 * 0.6 + 0.114 * 0.4;
        for py in 0..h {
            for px in 0..w {
                let want = 0.2 + (px as f32 + 0.5) / w as f32 * 4.0 + 10.0 * luma * 2.0;
                let got = out[3 * (py * w + px)];
                assert!((got - want).abs() < 1e-5, "({px},{py}): {got} vs {want}");
            }
        }
        // A colour brighter than white reads the top cells (border padding).
        let bright = [2.0f32, 2.0, 2.0];
        apply(shape, &grid, &bright, 1, 1, &mut out);
        assert!((out[0] - (2.0 + 2.0 + 20.0)).abs() < 1e-5, "{}", out[0]);
    }

    #[test]
    fn backward_matches_finite_differences() {
        let mut rng = Rng::new(7);
        let (w, h) = (6, 4);
        let x = random_image(&mut rng, w, h);
        let grid = random_grid(&mut rng, SMALL, 0.4);
        let wts: Vec<f32> = (0..x.len()).map(|_| rng.next_f32() - 0.5).collect();
        let mut d = wts.clone();
        let mut g = Vec::new();
        backward(SMALL, &grid, &x, w, h, &mut d, &mut g);
        let eps = 1e-3f32;
        // ∂L/∂x, through the matrix and the guidance.
        for i in 0..x.len() {
            let (mut p, mut m) = (x.clone(), x.clone());
            p[i] += eps;
            m[i] -= eps;
            let fd = (weighted(SMALL, &grid, &p, w, h, &wts)
                - weighted(SMALL, &grid, &m, w, h, &wts))
                / (2.0 * eps as f64);
            assert!((fd - d[i] as f64).abs() < 2e-3, "∂x[{i}]: {fd} vs {}", d[i]);
        }
        // ∂L/∂grid (linear in the grid: differences are exact up to rounding).
        let mut checked = 0;
        for k in (0..grid.len()).step_by(7) {
            let (mut p, mut m) = (grid.clone(), grid.clone());
            p[k] += eps;
            m[k] -= eps;
            let fd = (weighted(SMALL, &p, &x, w, h, &wts) - weighted(SMALL, &m, &x, w, h, &wts))
                / (2.0 * eps as f64);
            assert!((fd - g[k]).abs() < 1e-3, "∂grid[{k}]: {fd} vs {}", g[k]);
            checked += (g[k] != 0.0) as usize;
        }
        assert!(
            checked > 20,
            "only {checked} non-zero grid gradients checked"
        );
    }

    #[test]
    fn a_clamped_guidance_passes_no_gradient_through_it() {
        // A white pixel (γ = 1 exactly, the border) and a dark one (γ < 0): only the matrix
        // path carries ∂L/∂x, as PyTorch's border padding has it.
        let mut rng = Rng::new(3);
        let grid = random_grid(&mut rng, SMALL, 0.4);
        for x in [[1.0f32, 1.0, 1.0], [-0.2, -0.1, -0.3]] {
            let mut d = vec![1.0f32, -0.5, 0.25];
            let mut g = Vec::new();
            backward(SMALL, &grid, &x, 1, 1, &mut d, &mut g);
            let cs = corners(SMALL, xy_coords(SMALL, 1, 1, 0, 0), z_coord(SMALL, &x));
            let a = sample(&grid, &cs);
            for i in 0..3 {
                let want = a[i] * 1.0 + a[4 + i] * -0.5 + a[8 + i] * 0.25;
                assert_eq!(d[i], want, "{x:?} channel {i}");
            }
        }
    }

    #[test]
    fn backward_is_the_same_on_any_number_of_threads() {
        let mut rng = Rng::new(11);
        let (w, h) = (33, 29);
        let x = random_image(&mut rng, w, h);
        let grid = random_grid(&mut rng, SMALL, 0.3);
        let wts: Vec<f32> = (0..x.len()).map(|_| rng.next_f32() - 0.5).collect();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut d = wts.clone();
                let mut g = Vec::new();
                backward(SMALL, &grid, &x, w, h, &mut d, &mut g);
                (d, g)
            })
        };
        assert_eq!(run(1), run(3));
    }

    #[test]
    fn total_variation_by_hand_and_its_gradient() {
        // 2 × 1 × 1: one neighbour pair along x; one coefficient differs by 0.5.
        let shape = GridShape { x: 2, y: 1, l: 1 };
        let mut grids = BilateralGrids::new(shape);
        grids.ensure(2);
        grids.values[COEFFS + 3] = 0.5; // view 0's second cell, bias of red
                                        // λ/N · d² / (12 · 1 pair) = 10/2 · 0.25 / 12.
        let want = 10.0 / 2.0 * 0.25 / 12.0;
        assert!((grids.tv_loss(10.0) - want).abs() < 1e-12);
        // Its gradient by finite differences, on a random grid of every axis.
        let mut rng = Rng::new(5);
        let g0 = random_grid(&mut rng, SMALL, 0.5);
        let mut grad = vec![0.0f64; SMALL.floats()];
        let tv = tv_of(SMALL, &g0, 3.0, Some(&mut grad));
        assert!(tv > 0.0);
        for k in (0..g0.len()).step_by(5) {
            let (mut p, mut m) = (g0.clone(), g0.clone());
            p[k] += 1e-3;
            m[k] -= 1e-3;
            let fd = (tv_of(SMALL, &p, 3.0, None) - tv_of(SMALL, &m, 3.0, None)) / 2e-3;
            assert!(
                (fd - grad[k]).abs() < 1e-4 * (1.0 + fd.abs()),
                "{k}: {fd} vs {}",
                grad[k]
            );
        }
    }

    #[test]
    fn steps_follow_the_gradient_and_leave_untouched_smooth_grids_alone() {
        let cfg = BilagridConfig::default();
        let mut grids = BilateralGrids::new(SMALL);
        grids.ensure(3);
        let mut g = vec![0.0f64; SMALL.floats()];
        g[3] = 1.0; // a positive gradient on one bias of view 1's first cell
        let tv = grids.step(cfg.lr_at(100, 1), cfg.tv_weight, Some((1, &g)));
        assert_eq!(tv, 0.0, "identity grids have no variation");
        assert_eq!(grids.steps, 1);
        let f = SMALL.floats();
        // Adam's first step moves by lr against the gradient's sign.
        assert!(
            (grids.values[f + 3] - -2e-5).abs() < 1e-9,
            "{}",
            grids.values[f + 3]
        );
        // The other views (no gradient, no variation) stay the identity exactly.
        assert_eq!(&grids.values[..f], &identity_grid(SMALL)[..]);
        assert_eq!(&grids.values[2 * f..], &identity_grid(SMALL)[..]);
        // Now view 1 varies, so the total variation pulls its neighbour cells together.
        let before = grids.tv_loss(cfg.tv_weight);
        assert!(before > 0.0);
        for s in 2..50 {
            grids.step(cfg.lr_at(100, s), cfg.tv_weight, None);
        }
        assert!(grids.tv_loss(cfg.tv_weight) < before);
        assert!(grids.invalid().is_none());
    }

    #[test]
    fn the_learning_rate_warms_up_then_decays_as_gsplat_chains_them() {
        let cfg = BilagridConfig::default();
        let at = |s| cfg.lr_at(30_000, s);
        assert!((at(1) - 2e-5).abs() < 1e-18);
        // Step 501 is the 500th after the first: halfway up, times the decay so far.
        let decay = |k: f64| 0.01f64.powf(k / 30_000.0);
        assert!((at(501) - 2e-3 * 0.505 * decay(500.0)).abs() < 1e-15);
        assert!((at(1001) - 2e-3 * decay(1000.0)).abs() < 1e-15);
        assert!((at(30_001) - 2e-5).abs() < 1e-15);
    }

    #[test]
    fn shapes_parse_and_refuse() {
        assert_eq!(GridShape::parse("16,16,8"), Ok(GridShape::default()));
        assert_eq!(
            GridShape::parse(" 8, 4 ,2"),
            Ok(GridShape { x: 8, y: 4, l: 2 })
        );
        for bad in ["16,16", "0,16,8", "16,16,65", "a,b,c", "16,16,8,1"] {
            assert!(GridShape::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn saved_states_are_checked() {
        let mut grids = BilateralGrids::new(SMALL);
        grids.ensure(2);
        assert!(grids.invalid().is_none());
        grids.exp_avg_sq[5] = -1.0;
        assert!(grids.invalid().unwrap().contains("negative"));
        grids.exp_avg_sq[5] = 0.0;
        grids.values[SMALL.floats() + 1] = f32::NAN;
        assert!(grids.invalid().unwrap().contains("view 1"));
        grids.values.pop();
        assert!(grids.invalid().unwrap().contains("whole grids"));
    }
}
