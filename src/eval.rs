//! Scoring renders against ground truth: the one set of rules `gs-train --eval` and
//! `gs-render --pack` share, so "test PSNR/SSIM" means the same number in both tools for the
//! same model and view.
//!
//! The rules are those of the 3DGS evaluation (`render.py` saves 8-bit PNGs, `metrics.py`
//! scores the saved PNGs):
//! - the float render is quantised to 8 bits ([`to_rgb8`]: ×255, rounded half up, clamped);
//! - PSNR is computed on the 8-bit images (peak 255), infinite when they are identical;
//! - SSIM (3DGS's 11×11 Gaussian window, [`crate::metrics`]) on the 8-bit images scaled to
//!   [0, 1], i.e. on exactly what the PNG holds;
//! - a side-by-side image puts the ground truth on the left and the render on the right, and is
//!   named `{view index:05}_{file-name-safe view name without its image extension}.png`.
//!
//! A view with a loss mask ([`Scorer::score_masked`]) is scored on its used pixels: excluded
//! pixels are black in both 8-bit images (as the training loss sees them, and as the
//! side-by-side image shows them), PSNR is the mean squared error over the used pixels only,
//! and SSIM is the mean over the whole zeroed image (windows inside an excluded region score 1,
//! so a large excluded region lifts SSIM toward 1; compare SSIM of masked views with care).
//!
//! Colour-corrected scores ([`Scorer::score_corrected`]; gsplat's `cc_psnr`, `cc_ssim`, for
//! models that learn a per-view appearance) take the same inputs: the 8-bit render the plain
//! score scored and the 8-bit ground truth, both scaled to [0, 1], are fitted
//! ([`crate::color_correct`]; a masked view on its used pixels only), and the corrected render
//! is scored by the rules above (quantised to 8 bits again, as a PNG of it would hold). A
//! correction that is the identity therefore gives exactly the plain score.
//!
//! Invariant: [`Scorer::score`] and [`Scorer::score_corrected`] are pure functions of their
//! inputs (the buffers are scratch), so two callers holding the same render get the same score.

use std::path::{Path, PathBuf};

use crate::color_correct::ColorCorrection;
use crate::metrics::{psnr_from_mse, psnr_u8, MetricsError, Sample, SsimScratch};

/// PSNR and SSIM of one view (see the module doc for the rules).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score {
    /// dB; infinite when the 8-bit render equals the ground truth.
    pub psnr: f64,
    pub ssim: f64,
}

/// Scores renders, reusing its buffers across views.
#[derive(Debug, Default)]
pub struct Scorer {
    ssim: SsimScratch,
    rgb8: Vec<u8>,
    /// The ground truth with a mask applied.
    gt_masked: Vec<u8>,
    /// [`Scorer::score_corrected`]'s render in [0, 1] (corrected in place; the fits read the
    /// 8-bit ground truth as it is), and its corrected render in 8 bits.
    cc_render: Vec<f32>,
    cc_rgb8: Vec<u8>,
}

impl Scorer {
    pub fn new() -> Scorer {
        Scorer::default()
    }

    /// Scores the float RGB `render` (`3·W·H`) against the 8-bit `gt` of the same size.
    pub fn score(
        &mut self,
        render: &[f32],
        gt: &[u8],
        width: usize,
        height: usize,
    ) -> Result<Score, MetricsError> {
        to_rgb8(render, &mut self.rgb8);
        let psnr = psnr_u8(&self.rgb8, gt)?;
        let ssim = self.ssim.ssim_u8(&self.rgb8, gt, width, height)?;
        Ok(Score { psnr, ssim })
    }

    /// [`Scorer::score`] of a view with an optional loss `mask` (one byte per pixel, 0 =
    /// excluded; see the module doc).
    pub fn score_masked(
        &mut self,
        render: &[f32],
        gt: &[u8],
        mask: Option<&[u8]>,
        width: usize,
        height: usize,
    ) -> Result<Score, MetricsError> {
        let Some(mask) = mask else {
            return self.score(render, gt, width, height);
        };
        if mask.len() * 3 != gt.len() || render.len() != gt.len() {
            return Err(MetricsError::LengthMismatch {
                a: mask.len() * 3,
                b: gt.len(),
            });
        }
        to_rgb8(render, &mut self.rgb8);
        self.gt_masked.clear();
        self.gt_masked.extend_from_slice(gt);
        mask_rgb8(&mut self.rgb8, mask);
        mask_rgb8(&mut self.gt_masked, mask);
        let used = mask.iter().filter(|&&m| m != 0).count();
        let sum: u64 = self
            .rgb8
            .iter()
            .zip(&self.gt_masked)
            .map(|(&x, &y)| (x.abs_diff(y) as u64).pow(2))
            .sum();
        // No used pixel: nothing to score (NaN, reported as no PSNR).
        let psnr = if used == 0 {
            f64::NAN
        } else {
            psnr_from_mse(sum as f64 / (3 * used) as f64, 255.0)
        };
        let ssim = self
            .ssim
            .ssim_u8(&self.rgb8, &self.gt_masked, width, height)?;
        Ok(Score { psnr, ssim })
    }

    /// The 8-bit render the last [`Scorer::score`] scored (what a PNG of it holds).
    pub fn rgb8(&self) -> &[u8] {
        &self.rgb8
    }

    /// The colour-corrected score of the 8-bit `render` (the one the plain score scored:
    /// [`Scorer::rgb8`] after [`Scorer::score_masked`], or a PNG of it) against the 8-bit `gt`,
    /// with an optional loss `mask` as [`Scorer::score_masked`] takes it: `method` fits the
    /// render to the ground truth over the scored pixels, and the corrected render is scored
    /// by the module's rules (see the module doc). [`Scorer::rgb8`] is left as it was.
    pub fn score_corrected(
        &mut self,
        method: ColorCorrection,
        render: &[u8],
        gt: &[u8],
        mask: Option<&[u8]>,
        width: usize,
        height: usize,
    ) -> Result<Score, MetricsError> {
        if render.len() != gt.len() {
            return Err(MetricsError::LengthMismatch {
                a: render.len(),
                b: gt.len(),
            });
        }
        unit(render, &mut self.cc_render);
        method.apply(&mut self.cc_render, gt, mask)?;
        // Scored by score_masked itself (one rule set), its 8-bit render buffer lent to the
        // corrected render meanwhile so that `rgb8()` keeps the plain one.
        let plain = std::mem::take(&mut self.rgb8);
        let corrected = std::mem::take(&mut self.cc_render);
        let score = self.score_masked(&corrected, gt, mask, width, height);
        self.cc_render = corrected;
        self.cc_rgb8 = std::mem::replace(&mut self.rgb8, plain);
        score
    }

    /// The 8-bit corrected render the last [`Scorer::score_corrected`] scored.
    pub fn corrected_rgb8(&self) -> &[u8] {
        &self.cc_rgb8
    }
}

/// `rgb8` in [0, 1], converted as the SSIM reads 8-bit images.
fn unit(rgb8: &[u8], out: &mut Vec<f32>) {
    out.clear();
    out.extend(rgb8.iter().map(|&b| Sample::<f32>::value(b)));
}

/// Blackens every pixel of interleaved RGB8 `rgb` whose `mask` byte is 0.
pub fn mask_rgb8(rgb: &mut [u8], mask: &[u8]) {
    for (p, &m) in rgb.chunks_exact_mut(3).zip(mask) {
        if m == 0 {
            p.fill(0);
        }
    }
}

/// Float colour to 8 bits: ×255, rounded half up, clamped (what 3DGS's image saving does).
pub fn to_rgb8(image: &[f32], out: &mut Vec<u8>) {
    out.clear();
    out.extend(
        image
            .iter()
            .map(|&v| (v * 255.0 + 0.5).clamp(0.0, 255.0) as u8),
    );
}

/// Ground truth (left) and render (right), both RGB8 `w × h`, as one `2w × h` image.
pub fn side_by_side(gt: &[u8], render: &[u8], w: usize, h: usize) -> Vec<u8> {
    let mut side = Vec::with_capacity(2 * gt.len());
    for j in 0..h {
        side.extend_from_slice(&gt[j * w * 3..(j + 1) * w * 3]);
        side.extend_from_slice(&render[j * w * 3..(j + 1) * w * 3]);
    }
    side
}

/// File name of view `index`'s side-by-side image: "images/IMG_01.jpg" (view 3) →
/// "00003_images_IMG_01.png"; "00000.png" → "00000_00000.png" (never `.png.png`).
pub fn view_file_name(index: usize, name: &str) -> String {
    format!("{index:05}_{}.png", safe_stem(name))
}

/// File-name-safe form of a view name without its image extension, ready for a `.png` suffix
/// ("images/IMG_01.jpg" → "images_IMG_01", "00000.png" → "00000").
pub fn safe_stem(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let stem = [".png", ".jpg", ".jpeg"]
        .iter()
        .find(|ext| lower.len() > ext.len() && lower.ends_with(*ext))
        .map_or(name, |ext| &name[..name.len() - ext.len()]);
    stem.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A PNG that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct PngError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Writes an RGB8 PNG atomically ([`crate::fsutil::write_atomic_with`]).
pub fn write_png(path: &Path, rgb: &[u8], width: u32, height: u32) -> Result<(), PngError> {
    use image::ImageEncoder;
    crate::fsutil::write_atomic_with(path, &mut |w| {
        image::codecs::png::PngEncoder::new(w)
            .write_image(rgb, width, height, image::ExtendedColorType::Rgb8)
            .map_err(std::io::Error::other)
    })
    .map_err(|source| PngError {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_what_the_png_holds() {
        let (w, h) = (12, 9);
        let gt: Vec<u8> = (0..w * h * 3).map(|i| (i * 7 % 256) as u8).collect();
        // A render off by less than half a step everywhere quantises to the ground truth.
        let near: Vec<f32> = gt.iter().map(|&b| (b as f32 + 0.3) / 255.0).collect();
        let mut s = Scorer::new();
        let score = s.score(&near, &gt, w, h).unwrap();
        assert!(score.psnr.is_infinite() && (score.ssim - 1.0).abs() < 1e-12);
        assert_eq!(s.rgb8(), &gt[..]);
        // Out-of-range values clamp; half steps round up.
        let mut out = vec![];
        to_rgb8(&[-0.2, 1.7, 0.5 / 255.0, 0.49 / 255.0], &mut out);
        assert_eq!(out, [0, 255, 1, 0]);
    }

    /// With nothing to correct the colour-corrected score is the plain one; with a render that
    /// is an affine image of the truth it is far higher; a masked view is fitted and scored on
    /// its used pixels only, whatever the excluded ones hold.
    #[test]
    fn corrected_scores_fit_what_is_scored() {
        let (w, h) = (24, 16);
        let gt: Vec<u8> = (0..w * h * 3)
            .map(|i| (40 + (i * 37 + i / 7 * 11) % 170) as u8)
            .collect();
        // A render off by a few steps here and there: plain PSNR finite.
        let render: Vec<f32> = gt
            .iter()
            .enumerate()
            .map(|(i, &b)| (b as f32 + if i % 5 == 0 { 3.0 } else { 0.0 }) / 255.0)
            .collect();
        let mut s = Scorer::new();
        let plain = s.score(&render, &gt, w, h).unwrap();
        let render8 = s.rgb8().to_vec();
        // img = ref: both fits are the identity.
        for method in [ColorCorrection::Affine, ColorCorrection::Quadratic] {
            let same = s.score_corrected(method, &gt, &gt, None, w, h).unwrap();
            assert!(same.psnr.is_infinite() && (same.ssim - 1.0).abs() < 1e-12);
            assert_eq!(s.corrected_rgb8(), &gt[..]);
            assert_eq!(s.rgb8(), &render8[..], "the plain render is kept");
        }
        // The render at 0.4× the truth + 130/255, per 8-bit value.
        let dim: Vec<u8> = gt
            .iter()
            .map(|&b| (0.4 * b as f32 + 130.0).round() as u8)
            .collect();
        let dim_f: Vec<f32> = dim.iter().map(|&b| b as f32 / 255.0).collect();
        let dark = s.score(&dim_f, &gt, w, h).unwrap();
        let cc = s
            .score_corrected(ColorCorrection::Affine, &dim, &gt, None, w, h)
            .unwrap();
        assert!(dark.psnr < 15.0 && cc.psnr > 45.0, "{dark:?} → {cc:?}");
        assert!(cc.ssim > 0.99 && plain.psnr.is_finite());
        // Masked: the excluded pixels (left third) hold garbage in the render; the fit ignores
        // them and the score excludes them, so it is the score of the used pixels alone.
        let mask: Vec<u8> = (0..w * h).map(|p| u8::from(p % w >= w / 3)).collect();
        let mut garbage = dim.clone();
        for (p, px) in garbage.chunks_exact_mut(3).enumerate() {
            if mask[p] == 0 {
                px.copy_from_slice(&[255, 0, 255]);
            }
        }
        let a = s
            .score_corrected(ColorCorrection::Affine, &garbage, &gt, Some(&mask), w, h)
            .unwrap();
        let b = s
            .score_corrected(ColorCorrection::Affine, &dim, &gt, Some(&mask), w, h)
            .unwrap();
        assert_eq!(a, b);
        assert!(a.psnr > 45.0, "{a:?}");
        assert!(matches!(
            s.score_corrected(ColorCorrection::Affine, &dim, &gt[3..], None, w, h),
            Err(MetricsError::LengthMismatch { .. })
        ));
        assert!(matches!(
            s.score_corrected(
                ColorCorrection::Quadratic,
                &dim,
                &gt,
                Some(&mask[1..]),
                w,
                h
            ),
            Err(MetricsError::ColorCorrect(_))
        ));
    }

    #[test]
    fn side_by_side_png_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let (w, h) = (3usize, 2usize);
        let gt: Vec<u8> = (0..w * h * 3).map(|i| i as u8).collect();
        let render = vec![200u8; w * h * 3];
        let side = side_by_side(&gt, &render, w, h);
        let path = dir.path().join("s.png");
        write_png(&path, &side, 2 * w as u32, h as u32).unwrap();
        let back = image::open(&path).unwrap().to_rgb8();
        assert_eq!(back.dimensions(), (6, 2));
        assert_eq!(&back.as_raw()[..9], &gt[..9]);
        assert_eq!(&back.as_raw()[9..18], &render[..9]);
    }

    #[test]
    fn file_names_are_safe_and_never_doubled() {
        assert_eq!(
            view_file_name(3, "images/IMG_01.jpg"),
            "00003_images_IMG_01.png"
        );
        assert_eq!(view_file_name(0, "00000.png"), "00000_00000.png");
        assert_eq!(view_file_name(12, "a b.JPEG"), "00012_a_b.png");
        assert_eq!(view_file_name(1, "v.tiff"), "00001_v.tiff.png");
    }
}
