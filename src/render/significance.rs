//! Each Gaussian's significance to a set of views, and keeping the highest-ranked ones
//! (`gs-render --convert OUT --prune-to N`, which ranks by opacity, or by significance with
//! `--prune-views PACK`).
//!
//! The significance of Gaussian `i` is the sum, over every pixel of every view, of its
//! compositing weight `wᵢ = αᵢ·Tᵢ` there: how much of the rendered colour it makes. This is
//! Mini-Splatting's importance score ("Mini-Splatting: Representing Scenes with a Constrained
//! Number of Gaussians", Fang and Wang 2024). A Gaussian no view sees, or one hidden behind
//! opaque ones everywhere it projects, scores 0 however opaque it is, which an opacity
//! threshold cannot tell; a small opaque one scores less than a large one of the same opacity.
//!
//! The weights come from the CPU rasterizer's own backward pass: the colour gradient of a
//! splat under `∂L/∂pixel = 1` in one channel is `Σ wᵢ` over the pixels it reaches, with the
//! forward's exact α rule (the 1/255 cut-off, the α cap, the early stop), so the score counts
//! what a render draws and nothing else. Only the cameras are needed, not the images.
//!
//! [`keep_highest`] then picks the `n` largest scores, ties to the lower index, so a pruned
//! model is the same from run to run and thread count to thread count (the per-view sums are
//! the rasterizer's deterministic reductions, accumulated in f64 in view order).

use super::cpu::CpuRasterizer;
use super::{RenderError, RenderOptions, RenderOutput};
use crate::scene::camera::Camera;
use crate::scene::gaussians::Gaussians;

/// Accumulates [`Gaussians`]' significance (module doc) over the views it is given.
#[derive(Debug)]
pub struct Significance {
    raster: CpuRasterizer<f32>,
    out: RenderOutput,
    /// `∂L/∂image`: 1 in the red channel, 0 in the others.
    unit: Vec<f32>,
    sums: Vec<f64>,
    views: usize,
}

impl Significance {
    /// Scores for `n` Gaussians, all 0.
    pub fn new(n: usize) -> Self {
        Significance {
            raster: CpuRasterizer::new(),
            out: RenderOutput::default(),
            unit: Vec::new(),
            sums: vec![0.0; n],
            views: 0,
        }
    }

    /// Adds every Gaussian's compositing weights over the pixels of `camera`'s render with
    /// `options` (its SH degree, rasterization mode and intersection cap; colours, the
    /// background and the optional outputs do not change the weights).
    pub fn add_view(
        &mut self,
        gaussians: &Gaussians,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<(), RenderError> {
        assert_eq!(
            gaussians.len(),
            self.sums.len(),
            "scores made for another model"
        );
        let options = RenderOptions {
            absgrad: false,
            pose_grad: false,
            inv_depth: false,
            ..*options
        };
        let npix = camera.width as usize * camera.height as usize;
        if self.unit.len() != 3 * npix {
            self.unit.clear();
            self.unit.resize(3 * npix, 0.0);
            self.unit.iter_mut().step_by(3).for_each(|v| *v = 1.0);
        }
        self.raster
            .blend_weights(gaussians, camera, &options, &mut self.out, &self.unit)?;
        for (s, w) in self.sums.iter_mut().zip(self.raster.splat_colour_grads()) {
            *s += f64::from(w[0]);
        }
        self.views += 1;
        Ok(())
    }

    /// How many views were added.
    pub fn views(&self) -> usize {
        self.views
    }

    /// The scores so far, indexed like the Gaussians.
    pub fn scores(&self) -> &[f64] {
        &self.sums
    }
}

/// Which of the Gaussians scored `scores` (significance, or any other ranking such as the
/// opacity's logit) to keep so that `n` remain (all of them when `n ≥ scores.len()`): the `n`
/// largest scores, a tie going to the lower index.
pub fn keep_highest(scores: &[f64], n: usize) -> Vec<bool> {
    let mut keep = vec![n >= scores.len(); scores.len()];
    if n == 0 || n >= scores.len() {
        return keep;
    }
    // Descending score, then ascending index: a total order (scores are finite sums of
    // non-negative weights; `total_cmp` orders any stray NaN too).
    let mut order: Vec<u32> = (0..scores.len() as u32).collect();
    order.select_nth_unstable_by(n - 1, |&a, &b| {
        scores[b as usize]
            .total_cmp(&scores[a as usize])
            .then(a.cmp(&b))
    });
    for &i in &order[..n] {
        keep[i as usize] = true;
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::Rasterizer;
    use crate::scene::camera::{Intrinsics, Pose, Projection};

    /// Two Gaussians on the axis of a camera looking down +z: a small opaque one in front and a
    /// large one behind it, and a third far to the side, outside the view.
    fn scene() -> (Gaussians, Camera) {
        let mut g = Gaussians::zeros(3, 0);
        g.means = vec![[0.0, 0.0, 2.0], [0.0, 0.0, 4.0], [50.0, 0.0, 4.0]];
        g.log_scales = vec![[-3.0; 3], [-1.0; 3], [-1.0; 3]];
        g.rotations = vec![[1.0, 0.0, 0.0, 0.0]; 3];
        g.logit_opacities = vec![4.0, 4.0, 4.0];
        let camera = Camera {
            width: 64,
            height: 48,
            intrinsics: Intrinsics {
                fx: 60.0,
                fy: 60.0,
                cx: 32.0,
                cy: 24.0,
            },
            world_to_camera: Pose::IDENTITY,
            projection: Projection::Pinhole,
        };
        (g, camera)
    }

    /// The score is the sum of the forward's compositing weights: checked against weights
    /// recomputed from the forward's own outputs, `Σᵢ wᵢ = 1 − T_final` at every pixel.
    #[test]
    fn scores_sum_to_the_rendered_coverage() {
        let (g, camera) = scene();
        let options = RenderOptions {
            sh_degree: 0,
            ..RenderOptions::default()
        };
        let mut s = Significance::new(g.len());
        s.add_view(&g, &camera, &options).unwrap();
        let mut out = RenderOutput::default();
        let mut raster = CpuRasterizer::<f32>::new();
        raster.forward(&g, &camera, &options, &mut out).unwrap();
        let coverage: f64 = out.alpha.iter().map(|&a| f64::from(a)).sum();
        let total: f64 = s.scores().iter().sum();
        assert!(
            (total - coverage).abs() <= 1e-4 * coverage,
            "Σ scores {total} against the coverage {coverage}"
        );
        assert!(s.scores()[0] > 0.0 && s.scores()[1] > 0.0);
        assert_eq!(s.scores()[2], 0.0, "a Gaussian outside the view scores 0");
        assert_eq!(s.views(), 1);
    }

    /// Hiding: the large Gaussian behind scores less once an opaque one covers its centre, and
    /// a second view adds its own weights.
    #[test]
    fn occlusion_lowers_and_views_add() {
        let (mut g, camera) = scene();
        g.retain(&[true, true, false]);
        let options = RenderOptions {
            sh_degree: 0,
            ..RenderOptions::default()
        };
        let alone = {
            let mut h = g.clone();
            h.logit_opacities[0] = -20.0;
            let mut s = Significance::new(2);
            s.add_view(&h, &camera, &options).unwrap();
            s.scores()[1]
        };
        let mut s = Significance::new(2);
        s.add_view(&g, &camera, &options).unwrap();
        let hidden = s.scores()[1];
        assert!(
            hidden < alone,
            "{hidden} behind an opaque one, {alone} alone"
        );
        s.add_view(&g, &camera, &options).unwrap();
        assert_eq!(s.scores()[1], 2.0 * hidden);
    }

    #[test]
    fn keeps_the_largest_with_ties_to_the_lower_index() {
        let scores = [0.5, 2.0, 0.5, 0.0, 3.0, 0.5];
        let kept = |n| {
            keep_highest(&scores, n)
                .iter()
                .enumerate()
                .filter_map(|(i, &k)| k.then_some(i))
                .collect::<Vec<_>>()
        };
        assert_eq!(kept(0), Vec::<usize>::new());
        assert_eq!(kept(1), [4]);
        assert_eq!(kept(3), [0, 1, 4]);
        assert_eq!(kept(4), [0, 1, 2, 4]);
        assert_eq!(kept(6), [0, 1, 2, 3, 4, 5]);
        assert_eq!(kept(9), [0, 1, 2, 3, 4, 5]);
    }
}
