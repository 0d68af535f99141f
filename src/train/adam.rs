//! Adam with per-group learning rates, as PyTorch's `torch.optim.Adam` computes it (the
//! optimizer of the original 3DGS), over the parameter groups of [`Gaussians`].
//!
//! # Update (per scalar, step count `t` starting at 1)
//! `m ← β1·m + (1 − β1)·g`, `v ← β2·v + (1 − β2)·g²`,
//! `p ← p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + ε)` — exactly PyTorch's order of
//! operations for the non-`amsgrad`, non-fused path, so a hand computation with those formulas
//! reproduces it.
//!
//! # Invariants
//! - The moments are stored as two [`Gaussians`] values (`exp_avg`, `exp_avg_sq`) with the
//!   same SoA shapes as the model: every array has the model's length, `sh` has
//!   `len · sh_coeffs(sh_degree)` entries. Densification edits model and moments together
//!   (see [`super::densify::Model`]), so the shapes can never drift apart.
//! - One step count per group, as PyTorch keeps `state["step"]` per parameter tensor; 3DGS
//!   replaces the moments of densified/pruned tensors but keeps their step count, so new
//!   Gaussians start with zero moments and the group's current bias correction.
//! - Every update is element-wise, so the result does not depend on the rayon thread count.
//! - Sparse Adam ([`AdamConfig::sparse`], 3DGS's `--optimizer_type sparse_adam`, gsplat's
//!   `visible_adam`): a step updates only the Gaussians the step's view sees (`radii > 0`);
//!   the others keep their parameters *and* moments, so their momentum neither decays nor
//!   moves them while out of view. As in both of those optimizers (their `adamUpdate` /
//!   `selective_adam_update` kernels), the update has no bias correction:
//!   `p ← p − lr · m / (√v + ε)`, i.e. the scalars of [`Coef`] with `1 − β1ᵗ = 1 − β2ᵗ = 1`.
//!   Step counts still advance per group (they are only read by the dense update).
//! - The update walks the field table ([`Field::ALL`]): each field's rows name their group
//!   ([`Field::group`]), so a new per-Gaussian attribute is optimised without code here. SH
//!   coefficient 0 (DC) is the `f_dc` group, coefficients 1.. are `f_rest`; they share the
//!   `sh` array but have separate learning rates and step counts.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::render::GaussianGrads;
use crate::scene::gaussians::{Field, Gaussians};

pub use crate::scene::gaussians::Group;

/// Adam hyper-parameters shared by every group.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamConfig {
    pub beta1: f64,
    pub beta2: f64,
    /// 3DGS passes `eps = 1e-15` (PyTorch's default is 1e-8): with tiny gradients this makes
    /// the update ≈ `lr·sign(m)`.
    pub eps: f64,
    /// Sparse Adam (see the module doc): only the Gaussians the step's view sees are updated,
    /// without bias correction. Left out of the saved configuration when off, so runs and
    /// checkpoints from before it existed compare equal.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sparse: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-15,
            sparse: false,
        }
    }
}

/// Learning rate of each group for one step.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LearningRates {
    pub means: f64,
    pub f_dc: f64,
    pub f_rest: f64,
    pub opacity: f64,
    pub scaling: f64,
    pub rotation: f64,
}

impl LearningRates {
    pub fn get(&self, g: Group) -> f64 {
        match g {
            Group::Means => self.means,
            Group::FeaturesDc => self.f_dc,
            Group::FeaturesRest => self.f_rest,
            Group::Opacity => self.opacity,
            Group::Scaling => self.scaling,
            Group::Rotation => self.rotation,
        }
    }
}

/// Which groups a step updates (3DGS skips groups whose tensors densification just replaced,
/// because their `.grad` is `None`; see the trainer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupMask(pub [bool; 6]);

impl GroupMask {
    pub const ALL: GroupMask = GroupMask([true; 6]);
    pub const NONE: GroupMask = GroupMask([false; 6]);

    pub fn with(mut self, g: Group, on: bool) -> GroupMask {
        self.0[g.index()] = on;
        self
    }

    pub fn has(&self, g: Group) -> bool {
        self.0[g.index()]
    }
}

/// Adam's state: first and second moments shaped like the model, and step counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AdamState {
    pub exp_avg: Gaussians,
    pub exp_avg_sq: Gaussians,
    /// Steps taken per group ([`Group`] order).
    pub steps: [u64; 6],
}

/// Per-step scalars of one group, precomputed once (the device Adam takes the same values).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Coef {
    pub b1: f32,
    pub b2: f32,
    /// lr / (1 − β1ᵗ)
    pub step_size: f32,
    /// √(1 − β2ᵗ)
    pub bias2_sqrt: f32,
    pub eps: f32,
}

impl Coef {
    /// The scalars of step `t` (1-based) at learning rate `lr` (sparse Adam: no bias
    /// correction, whatever `t`).
    pub fn new(cfg: &AdamConfig, lr: f64, t: u64) -> Coef {
        if cfg.sparse {
            return Coef {
                b1: cfg.beta1 as f32,
                b2: cfg.beta2 as f32,
                step_size: lr as f32,
                bias2_sqrt: 1.0,
                eps: cfg.eps as f32,
            };
        }
        let t = t.min(i32::MAX as u64) as i32;
        Coef {
            b1: cfg.beta1 as f32,
            b2: cfg.beta2 as f32,
            step_size: (lr / (1.0 - cfg.beta1.powi(t))) as f32,
            bias2_sqrt: (1.0 - cfg.beta2.powi(t)).sqrt() as f32,
            eps: cfg.eps as f32,
        }
    }

    #[inline]
    pub(crate) fn update(&self, p: &mut f32, m: &mut f32, v: &mut f32, g: f32) {
        *m = self.b1 * *m + (1.0 - self.b1) * g;
        *v = self.b2 * *v + (1.0 - self.b2) * g * g;
        let denom = v.sqrt() / self.bias2_sqrt + self.eps;
        *p -= self.step_size * (*m / denom);
    }
}

/// Why a step was refused (shapes disagree: a caller bug, reported instead of a panic).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("Adam: `{what}.{field}` has {got} values, the model needs {expected}")]
pub struct ShapeError {
    /// Which array set: `exp_avg`, `exp_avg_sq` or `grads`.
    pub what: &'static str,
    /// The field ([`Field::name`]).
    pub field: &'static str,
    pub got: usize,
    pub expected: usize,
}

/// Items per rayon task: large enough that scheduling costs nothing next to the arithmetic.
const CHUNK: usize = 4096;

/// `p ← Adam(p, m, v, g)` element-wise with one coefficient set (zipped iterators: no bounds
/// checks, so the loop vectorises).
#[inline]
fn update_run(c: &Coef, p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32]) {
    for (((p, m), v), g) in p.iter_mut().zip(m).zip(v).zip(g) {
        c.update(p, m, v, *g);
    }
}

/// One field's Adam update: `p`, `m`, `v`, `g` hold whole Gaussians of `coefs.len()` rows of
/// `row_width` values each, and row `r` of every Gaussian uses `coefs[r]` (`None`: the group
/// is masked, the values stay). With `visible` (one radius per Gaussian), only Gaussians of
/// nonzero radius are updated.
fn update_field(
    coefs: &[Option<Coef>],
    row_width: usize,
    visible: Option<&[u32]>,
    p: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
) {
    let per = coefs.len() * row_width;
    // Consecutive rows sharing a coefficient form one run (SH: the DC row, then the rest).
    let mut runs: Vec<(usize, usize, Option<Coef>)> = Vec::new();
    for (r, c) in coefs.iter().enumerate() {
        match runs.last_mut() {
            Some(last) if last.2 == *c => last.1 += row_width,
            _ => runs.push((r * row_width, row_width, *c)),
        }
    }
    // Whole Gaussians per task, so a value's row is its position within the Gaussian.
    let per_task = (CHUNK / per).max(1);
    let chunk = per * per_task;
    p.par_chunks_mut(chunk)
        .zip(m.par_chunks_mut(chunk))
        .zip(v.par_chunks_mut(chunk))
        .zip(g.par_chunks(chunk))
        .enumerate()
        .for_each(|(task, (((p, m), v), g))| {
            let first = task * per_task;
            let visible = visible.map(|r| &r[first..first + p.len() / per]);
            if let ([(_, _, Some(c))], None) = (&runs[..], visible) {
                // One coefficient for the whole field: one flat run over the chunk.
                return update_run(c, p, m, v, g);
            }
            for (i, base) in (0..p.len()).step_by(per).enumerate() {
                if visible.is_some_and(|r| r[i] == 0) {
                    continue;
                }
                for &(at, len, c) in &runs {
                    let Some(c) = c else { continue };
                    let r = base + at..base + at + len;
                    update_run(
                        &c,
                        &mut p[r.clone()],
                        &mut m[r.clone()],
                        &mut v[r.clone()],
                        &g[r],
                    );
                }
            }
        });
}

impl AdamState {
    /// Zero moments and step counts for `g`.
    pub fn new(g: &Gaussians) -> AdamState {
        AdamState {
            exp_avg: Gaussians::zeros_like(g),
            exp_avg_sq: Gaussians::zeros_like(g),
            steps: [0; 6],
        }
    }

    /// Checks moments and `grads` against the model's shapes.
    pub fn check_shapes(
        &self,
        g: &Gaussians,
        grads: Option<&GaussianGrads>,
    ) -> Result<(), ShapeError> {
        let n = g.len();
        let arrays = [("exp_avg", &self.exp_avg), ("exp_avg_sq", &self.exp_avg_sq)]
            .into_iter()
            .chain(grads.map(|gr| ("grads", &gr.params)));
        for (what, a) in arrays {
            let wrong_degree = a.sh_degree != g.sh_degree;
            if let Some(bad) = a.shape_mismatch(n).filter(|_| !wrong_degree) {
                return Err(ShapeError {
                    what,
                    field: bad.field.name(),
                    got: bad.got,
                    expected: bad.expected,
                });
            }
            if wrong_degree {
                return Err(ShapeError {
                    what,
                    field: "sh",
                    got: a.sh.len(),
                    expected: g.sh.len(),
                });
            }
        }
        Ok(())
    }

    /// One Adam step of the groups in `mask` with learning rates `lr`. `radii`, the step's
    /// per-Gaussian screen radii, is read under [`AdamConfig::sparse`] (and required then): a
    /// Gaussian of radius 0 is not updated.
    pub fn step(
        &mut self,
        cfg: &AdamConfig,
        lr: &LearningRates,
        mask: GroupMask,
        params: &mut Gaussians,
        grads: &GaussianGrads,
        radii: Option<&[u32]>,
    ) -> Result<(), ShapeError> {
        self.check_shapes(params, Some(grads))?;
        let visible = if cfg.sparse {
            let got = radii.map_or(0, <[u32]>::len);
            if got != params.len() {
                return Err(ShapeError {
                    what: "visibility",
                    field: "radii",
                    got,
                    expected: params.len(),
                });
            }
            radii
        } else {
            None
        };
        let mut coef = [None; 6];
        for g in Group::ALL {
            if mask.has(g) {
                self.steps[g.index()] += 1;
                coef[g.index()] = Some(Coef::new(cfg, lr.get(g), self.steps[g.index()]));
            }
        }
        let deg = params.sh_degree;
        for f in Field::ALL {
            let coefs: Vec<Option<Coef>> = (0..f.rows_per_gaussian(deg))
                .map(|r| coef[f.group(r).index()])
                .collect();
            if coefs.iter().all(Option::is_none) || params.is_empty() {
                continue;
            }
            update_field(
                &coefs,
                f.row_width(),
                visible,
                params.field_mut(f),
                self.exp_avg.field_mut(f),
                self.exp_avg_sq.field_mut(f),
                grads.field(f),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sh_degree: u32) -> Gaussians {
        let mut g = Gaussians::zeros(1, sh_degree);
        g.means[0] = [1.0, 2.0, 3.0];
        g.log_scales[0] = [-1.0; 3];
        g.rotations[0] = [1.0, 0.0, 0.0, 0.0];
        g.logit_opacities[0] = 0.5;
        g.sh.fill([0.25; 3]);
        g
    }

    fn grads_for(g: &Gaussians, v: f32) -> GaussianGrads {
        let mut gr = GaussianGrads::default();
        gr.reset(g.len(), g.sh_degree);
        gr.means[0] = [v, -v, 0.0];
        gr.log_scales[0] = [v; 3];
        gr.rotations[0] = [v; 4];
        gr.logit_opacities[0] = v;
        for c in gr.sh.iter_mut() {
            *c = [v; 3];
        }
        gr
    }

    fn lrs() -> LearningRates {
        LearningRates {
            means: 1e-3,
            f_dc: 2e-3,
            f_rest: 3e-3,
            opacity: 4e-3,
            scaling: 5e-3,
            rotation: 6e-3,
        }
    }

    #[test]
    fn matches_hand_computed_updates() {
        let cfg = AdamConfig {
            eps: 1e-8,
            ..AdamConfig::default()
        };
        let mut p = one(1);
        let mut st = AdamState::new(&p);
        // Step 1 with g = 0.5: m = 0.05, v = 0.00025; m̂ = 0.5, v̂ = 0.25 → update = lr·0.5/(0.5+ε).
        {
            let gr = grads_for(&p, 0.5);
            st.step(&cfg, &lrs(), GroupMask::ALL, &mut p, &gr, None)
        }
        .unwrap();
        let step1 = |lr: f64| (lr * 0.5 / (0.5 + 1e-8)) as f32;
        assert!((p.means[0][0] - (1.0 - step1(1e-3))).abs() < 1e-7);
        assert!((p.means[0][1] - (2.0 + step1(1e-3))).abs() < 1e-7);
        assert_eq!(p.means[0][2], 3.0, "zero gradient, zero moments: no move");
        assert!((p.logit_opacities[0] - (0.5 - step1(4e-3))).abs() < 1e-7);
        assert!(
            (p.sh[0][0] - (0.25 - step1(2e-3))).abs() < 1e-7,
            "DC uses f_dc"
        );
        assert!(
            (p.sh[1][2] - (0.25 - step1(3e-3))).abs() < 1e-7,
            "rest uses f_rest"
        );
        // f32 arithmetic: 0.1·0.5 carries ~1e-8 of rounding.
        assert!((st.exp_avg.means[0][0] - 0.05).abs() < 1e-7);
        // (1 − β2) in f32 is 0.0010000467: relative error 5e-5.
        assert!((st.exp_avg_sq.means[0][0] - 0.00025).abs() < 1e-4 * 0.00025);
        // Step 2 with g = −1, computed in f64 from the formulas in the module doc.
        let before = p.log_scales[0][0] as f64;
        {
            let gr = grads_for(&p, -1.0);
            st.step(&cfg, &lrs(), GroupMask::ALL, &mut p, &gr, None)
        }
        .unwrap();
        let m = 0.9 * 0.05 - 0.1;
        let v: f64 = 0.999 * 0.00025 + 0.001 * 1.0;
        let denom = v.sqrt() / (1.0 - 0.999f64.powi(2)).sqrt() + 1e-8;
        let want = before - 5e-3 / (1.0 - 0.81) * m / denom;
        assert!(
            (p.log_scales[0][0] as f64 - want).abs() < 1e-6,
            "{} vs {want}",
            p.log_scales[0][0]
        );
        assert_eq!(st.steps, [2; 6]);
    }

    #[test]
    fn masked_groups_do_not_move_or_count() {
        let cfg = AdamConfig::default();
        let mut p = one(0);
        let mut st = AdamState::new(&p);
        let mask = GroupMask::ALL.with(Group::Opacity, false);
        {
            let gr = grads_for(&p, 1.0);
            st.step(&cfg, &lrs(), mask, &mut p, &gr, None)
        }
        .unwrap();
        assert_eq!(p.logit_opacities[0], 0.5);
        assert_eq!(st.exp_avg.logit_opacities[0], 0.0);
        assert_eq!(st.steps[Group::Opacity as usize], 0);
        assert_eq!(st.steps[Group::Means as usize], 1);
        // With eps = 1e-15 the first step moves by ≈ lr.
        assert!((p.means[0][0] - (1.0 - 1e-3)).abs() < 1e-6);
    }

    /// Sparse Adam: a Gaussian of radius 0 keeps parameters and moments bit for bit; a
    /// visible one steps by `lr·m/(√v + ε)` (no bias correction), across enough Gaussians that
    /// the rayon tasks split the field (visibility must follow each task's offset).
    #[test]
    fn sparse_steps_only_the_visible_without_bias_correction() {
        let cfg = AdamConfig {
            eps: 1e-8,
            sparse: true,
            ..AdamConfig::default()
        };
        let n = 3 * CHUNK + 5;
        let mut p = Gaussians::zeros(n, 2);
        let mut gr = GaussianGrads::default();
        gr.reset(n, 2);
        let mut rng = crate::rng::Rng::new(4);
        for f in Field::ALL {
            p.field_mut(f).fill_with(|| rng.uniform(-1.0, 1.0) as f32);
            gr.field_mut(f).fill_with(|| rng.uniform(-1.0, 1.0) as f32);
        }
        // Random, so that no task's visibility repeats another's.
        let mut radii: Vec<u32> = (0..n).map(|_| rng.below(3) as u32).collect();
        radii[1] = 7;
        let before = p.clone();
        let mut st = AdamState::new(&p);
        st.step(&cfg, &lrs(), GroupMask::ALL, &mut p, &gr, Some(&radii))
            .unwrap();
        let (b1, b2) = (0.9f32, 0.999f32);
        for f in Field::ALL {
            let per = f.width(2);
            for i in 0..n * per {
                let (row, j) = (i / per, i % per);
                let (p0, g, p1) = (before.field(f)[i], gr.field(f)[i], p.field(f)[i]);
                let (m, v) = (st.exp_avg.field(f)[i], st.exp_avg_sq.field(f)[i]);
                if radii[row] == 0 {
                    assert_eq!((p1, m, v), (p0, 0.0, 0.0), "{} of hidden {row}", f.name());
                    continue;
                }
                let want_m = b1 * 0.0 + (1.0 - b1) * g;
                let want_v = b2 * 0.0 + (1.0 - b2) * g * g;
                let lr = lrs().get(f.group(j / f.row_width())) as f32;
                let want_p = p0 - lr * (want_m / (want_v.sqrt() / 1.0 + 1e-8));
                assert_eq!(
                    (p1, m, v),
                    (want_p, want_m, want_v),
                    "{} of {row}",
                    f.name()
                );
            }
        }
        // The first step of the bias-corrected update moves by ≈ lr; this one by ≈ 3.16·lr
        // (m/√v = 0.1/√0.001 for any g), as 3DGS's and gsplat's sparse updates do.
        let moved = (p.means[1][0] - before.means[1][0]).abs() as f64;
        assert!(
            (moved / 1e-3 - 0.1 / 0.001f64.sqrt()).abs() < 1e-3,
            "{moved}"
        );
        assert_eq!(st.steps, [1; 6]);
        // Sparse Adam without the step's radii (or with another model's) is refused.
        for bad in [None, Some(&radii[1..])] {
            let e = st
                .step(&cfg, &lrs(), GroupMask::ALL, &mut p, &gr, bad)
                .unwrap_err();
            assert_eq!((e.what, e.field, e.expected), ("visibility", "radii", n));
        }
    }

    #[test]
    fn shape_mismatch_is_an_error() {
        let mut p = one(0);
        let mut st = AdamState::new(&p);
        let mut gr = grads_for(&p, 1.0);
        gr.means.push([0.0; 3]);
        let e = st
            .step(
                &AdamConfig::default(),
                &lrs(),
                GroupMask::ALL,
                &mut p,
                &gr,
                None,
            )
            .unwrap_err();
        assert_eq!((e.what, e.field), ("grads", "means"));
    }
}
