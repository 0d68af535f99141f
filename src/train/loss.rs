//! The 3DGS photometric loss `(1 − λ)·L1 + λ·(1 − SSIM)` with λ = 0.2, and its gradient with
//! respect to the rendered image.
//!
//! Images are interleaved RGB f32 in [0, 1] (the rasterizer's layout). With `N = 3·W·H`:
//! `L1 = Σ|x − y| / N`, so `∂L1/∂x = sign(x − y) / N` (0 where x = y, like PyTorch's
//! `abs` backward); the SSIM term's gradient comes from
//! [`SsimScratch::ssim_and_grad_into`]. [`LossScratch`] keeps the SSIM's scratch and gradient
//! buffer between calls; the caller owns `d_image`, resized in place (capacity only grows),
//! so a training loop allocates nothing per step.
//!
//! A view with a loss mask (see `crate::shard::VIEW_FLAG_MASK`) is trained by nerfstudio's
//! rule: [`apply_mask`] zeroes the excluded pixels of both the render and the target before
//! the loss, and of `∂L/∂image` after it (the chain rule through the mask), so an excluded
//! pixel adds nothing to L1 or to the gradients and SSIM windows that straddle a mask edge see
//! black on both sides. The means stay over all `3·W·H` values (Adam is indifferent to the
//! scale), which keeps the loss kernels identical for masked and unmasked views.

use rayon::prelude::*;

use crate::metrics::{MetricsError, SsimScratch};

/// Weight of the D-SSIM term (3DGS `lambda_dssim`).
pub const DEFAULT_LAMBDA_DSSIM: f32 = 0.2;

/// Values of one loss evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LossValue {
    pub loss: f64,
    pub l1: f64,
    pub ssim: f64,
}

/// Reusable buffers for [`LossScratch::loss_and_grad`].
#[derive(Debug, Default)]
pub struct LossScratch {
    ssim: SsimScratch,
    ssim_grad: Vec<f32>,
    /// Per-chunk L1 partial sums (reused).
    partials: Vec<f64>,
}

/// Pixels per rayon task for the element-wise passes.
const CHUNK: usize = 16 * 1024;

impl LossScratch {
    pub fn new() -> LossScratch {
        LossScratch::default()
    }

    /// Loss of `img` against `target` (both `3·width·height`), writing `∂loss/∂img` into
    /// `d_image` (resized to match).
    pub fn loss_and_grad(
        &mut self,
        img: &[f32],
        target: &[f32],
        width: usize,
        height: usize,
        lambda_dssim: f32,
        d_image: &mut Vec<f32>,
    ) -> Result<LossValue, MetricsError> {
        if img.len() != target.len() {
            return Err(MetricsError::LengthMismatch {
                a: img.len(),
                b: target.len(),
            });
        }
        self.ssim_grad.resize(img.len(), 0.0);
        let ssim = self
            .ssim
            .ssim_and_grad_into(img, target, width, height, &mut self.ssim_grad)?;
        d_image.resize(img.len(), 0.0);
        let n = img.len() as f32;
        let w1 = (1.0 - lambda_dssim) / n;
        let ws = lambda_dssim;
        // Per-chunk partial sums in f64, added in chunk order: deterministic for any thread
        // count.
        d_image
            .par_chunks_mut(CHUNK)
            .zip(img.par_chunks(CHUNK))
            .zip(target.par_chunks(CHUNK))
            .zip(self.ssim_grad.par_chunks(CHUNK))
            .map(|(((d, x), y), gs)| {
                let mut s = 0.0f64;
                for i in 0..d.len() {
                    let diff = x[i] - y[i];
                    s += diff.abs() as f64;
                    let sign = if diff > 0.0 {
                        1.0
                    } else if diff < 0.0 {
                        -1.0
                    } else {
                        0.0
                    };
                    d[i] = w1 * sign - ws * gs[i];
                }
                s
            })
            .collect_into_vec(&mut self.partials);
        let l1_sum: f64 = self.partials.iter().sum();
        let l1 = l1_sum / img.len() as f64;
        let lam = lambda_dssim as f64;
        Ok(LossValue {
            loss: (1.0 - lam) * l1 + lam * (1.0 - ssim),
            l1,
            ssim,
        })
    }
}

/// Zeroes the three channels of every pixel of `rgb` (interleaved RGB) whose `mask` byte is 0;
/// see the module doc. `mask` holds one byte per pixel.
pub fn apply_mask(rgb: &mut [f32], mask: &[u8]) {
    debug_assert_eq!(rgb.len(), 3 * mask.len());
    rgb.par_chunks_mut(3 * CHUNK)
        .zip(mask.par_chunks(CHUNK))
        .for_each(|(px, m)| {
            for (p, &keep) in px.chunks_exact_mut(3).zip(m) {
                if keep == 0 {
                    p.fill(0.0);
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn image(w: usize, h: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed);
        (0..w * h * 3).map(|_| r.next_f32()).collect()
    }

    #[test]
    fn identical_images_have_zero_loss() {
        let a = image(16, 12, 1);
        let mut s = LossScratch::new();
        let mut d = Vec::new();
        let v = s.loss_and_grad(&a, &a, 16, 12, 0.2, &mut d).unwrap();
        assert!(v.loss.abs() < 1e-6 && v.l1 == 0.0 && (v.ssim - 1.0).abs() < 1e-6);
        assert_eq!(d.len(), a.len());
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let (w, h) = (13, 11);
        let x = image(w, h, 2);
        let y = image(w, h, 3);
        let mut s = LossScratch::new();
        let mut d = Vec::new();
        let base = s.loss_and_grad(&x, &y, w, h, 0.2, &mut d).unwrap();
        let l1_direct: f64 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).abs() as f64)
            .sum::<f64>()
            / x.len() as f64;
        assert!((base.l1 - l1_direct).abs() < 1e-9);
        // Central differences on a few pixels; step 1e-3 keeps |x − y| from crossing 0 for
        // these random values (checked below) so L1 is smooth there. The f32 SSIM limits the
        // agreement to ~1e-3 relative.
        let mut dd = Vec::new();
        for &q in &[0usize, 7, 150, 3 * w * h - 1] {
            let eps = 1e-3f32;
            assert!((x[q] - y[q]).abs() > 2.0 * eps);
            let mut xp = x.clone();
            xp[q] += eps;
            let lp = s.loss_and_grad(&xp, &y, w, h, 0.2, &mut dd).unwrap().loss;
            xp[q] -= 2.0 * eps;
            let lm = s.loss_and_grad(&xp, &y, w, h, 0.2, &mut dd).unwrap().loss;
            let fd = (lp - lm) / (2.0 * eps as f64);
            let an = d[q] as f64;
            assert!(
                (fd - an).abs() <= 2e-3 * an.abs() + 1e-7,
                "pixel {q}: fd {fd} analytic {an}"
            );
        }
    }

    /// The masked loss (module doc): excluded pixels of render or target change nothing, get
    /// zero gradient, and the used pixels' gradients are those of the zeroed images.
    #[test]
    fn masked_pixels_add_nothing_and_get_no_gradient() {
        let (w, h) = (23, 17);
        let x = image(w, h, 4);
        let y = image(w, h, 5);
        let mask: Vec<u8> = (0..w * h)
            .map(|i| if (i % w) < 9 && i / w > 4 { 0 } else { 255 })
            .collect();
        let masked_loss = |x: &[f32], y: &[f32], d: &mut Vec<f32>| {
            let (mut x, mut y) = (x.to_vec(), y.to_vec());
            apply_mask(&mut x, &mask);
            apply_mask(&mut y, &mask);
            let v = LossScratch::new()
                .loss_and_grad(&x, &y, w, h, 0.2, d)
                .unwrap();
            apply_mask(d, &mask);
            v
        };
        let mut d = Vec::new();
        let base = masked_loss(&x, &y, &mut d);
        // Excluded pixels: zero gradient; used ones: not all zero.
        for (p, &m) in mask.iter().enumerate() {
            let g = &d[3 * p..3 * p + 3];
            if m == 0 {
                assert!(g.iter().all(|&v| v == 0.0), "pixel {p}: {g:?}");
            }
        }
        assert!(d.iter().any(|&v| v != 0.0));
        // Anything under the mask, in render or target, leaves loss and gradient unchanged.
        let (mut x2, mut y2) = (x.clone(), y.clone());
        for (p, &m) in mask.iter().enumerate() {
            if m == 0 {
                x2[3 * p..3 * p + 3].fill(1.0);
                y2[3 * p..3 * p + 3].copy_from_slice(&[1.0, 0.0, 1.0]);
            }
        }
        let mut d2 = Vec::new();
        let other = masked_loss(&x2, &y2, &mut d2);
        assert_eq!(base, other);
        assert_eq!(d, d2);
        // An all-used mask is the plain loss.
        let mut plain = Vec::new();
        let v = LossScratch::new()
            .loss_and_grad(&x, &y, w, h, 0.2, &mut plain)
            .unwrap();
        let mut all = (x.clone(), y.clone());
        apply_mask(&mut all.0, &vec![255; w * h]);
        apply_mask(&mut all.1, &vec![1; w * h]);
        assert_eq!((all.0, all.1), (x, y));
        assert!(v.l1 > base.l1);
    }

    #[test]
    fn mismatched_sizes_are_errors() {
        let mut s = LossScratch::new();
        let mut d = Vec::new();
        assert!(s
            .loss_and_grad(&[0.0; 6], &[0.0; 9], 1, 2, 0.2, &mut d)
            .is_err());
    }
}
