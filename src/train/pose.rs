//! Camera pose optimisation: a learned correction of every training view's camera pose,
//! optimised with the Gaussians (gsplat's `--pose_opt`), and the pose noise that tests it
//! (gsplat's `--pose_noise`).
//!
//! Poses from structure-from-motion are slightly wrong: a few pixels of misregistration
//! between photos teach the model blur and floaters where the views disagree. Each training
//! view `v` gets a correction `δ_v = (u, φ)` (zero at the start) applied in the camera's own
//! frame: its camera-to-world `C` becomes `C·N_v·[Exp(φ) | s·u]`, where `N_v` is the view's
//! injected noise (the identity unless `--pose-noise` is given), `φ` an axis-angle rotation
//! about the camera centre and `s·u` a translation along the camera's axes
//! ([`Pose::perturbed`]). The rasterizer returns the loss gradient in that same frame
//! ([`crate::render::GaussianGrads::pose`], `∂L/∂ε` of `C'·[Exp(ε_φ) | ε_ρ]`), and the
//! parameters' gradient follows exactly: `∂L/∂u = s·Exp(φ)·∂L/∂ε_ρ` and
//! `∂L/∂φ = J_r(φ)ᵀ·∂L/∂ε_φ` ([`rotation_right_jacobian`]).
//!
//! # As gsplat does it
//! - Translations are in gsplat's normalised units: gsplat rescales the world so the cameras
//!   lie about one unit from their centre; here `s` = the scene extent / 1.1 (the cameras'
//!   largest distance from their centre, 3DGS's extent rule), so the learning rate, the weight
//!   decay and the noise mean the same in both.
//! - Its own Adam with PyTorch's defaults (β 0.9/0.999, ε 1e-8) and L2 weight decay
//!   `pose_opt_reg` (1e-6: `g + reg·δ`, as `torch.optim.Adam(weight_decay=…)`), one step
//!   count, and every view's correction stepped every iteration (the gradient is dense, zero
//!   for the views not drawn, as for gsplat's `[views, 9]` embedding). The learning rate
//!   `pose_opt_lr` (1e-5) decays exponentially to 1 % of itself over the run (gsplat's
//!   `ExponentialLR(gamma = 0.01^(1/max_steps))`).
//! - One difference: gsplat parameterises the rotation by the 6D representation (6 numbers,
//!   3 of them without effect on the rotation); here the axis-angle `φ` (3 numbers, exact
//!   gradient through the right Jacobian). Both are the identity at zero and agree to first
//!   order around it.
//! - `--pose-noise σ` perturbs every training camera once at the start by a seeded
//!   `N(0, σ²)` draw per coordinate of `(u, φ)` (gsplat draws its 9D embedding so), so a run
//!   can measure how much of a known error the optimisation removes; unlike gsplat's, the
//!   draw is projected off the motions of the whole capture (see below), which no method can
//!   tell from a moved world. The held-out views keep their poses, as in gsplat: they are
//!   scored from the poses the dataset gives, or (beyond gsplat) from poses aligned to their
//!   images with the model frozen ([`PoseAlignConfig`]).
//!
//! # The corrections do not move the world (unlike gsplat)
//! Moving every camera by one rigid motion or scaling (and the Gaussians with them) leaves
//! every training image unchanged, so the loss cannot pin the frame of the corrections, and
//! gsplat leaves that open. The held-out views keep the dataset's poses, so a shared drift
//! misaligns them with the model. Measured on the fox photos (1/8 size, 3,000 iterations,
//! lr 1e-4, docs/training.md § Camera pose optimisation): without the projection the cameras moved
//! 0.030 units on average and the held-out PSNR was 18.49 dB; with it they moved 0.010 units
//! (the rotations alike, 0.25°) and it was 19.89 dB. So after every step the corrections are
//! projected off the
//! 7 motions of the whole capture (rotation and translation of the world, and scale about the
//! cameras' centroid; to first order, correction `i` of a world rotation `Ω` is
//! `(Rᵢᵀ(Ω × (cᵢ − p))/s, Rᵢᵀ Ω)`, of a translation `T` `(RᵢᵀT/s, 0)`, of a scaling `λ`
//! `(λ·Rᵢᵀ(cᵢ − p)/s, 0)`, with `Rᵢ`, `cᵢ` the camera's rotation and centre before its
//! correction and `p` the centroid): the least-squares fit of those 7 in the stacked
//! corrections is subtracted, so the cameras only move relative to each other and the
//! model stays in the dataset's frame.
//!
//! Invariants: the four arrays of [`CameraPoses`] always have equal lengths; a view beyond
//! them has a zero correction, zero moments and no noise; a run holds every training view
//! from its first step ([`CameraPoses::ensure`]).

use serde::{Deserialize, Serialize};

use super::schedule::ExponentialLr;
use crate::rng::Rng;
use crate::scene::camera::{Camera, Pose};
use crate::scene::maths::{rotation_exp, rotation_right_jacobian};

/// Numbers of one view's correction: the translation `u` (normalised units, camera axes) and
/// the axis-angle rotation `φ` (radians, camera axes).
pub const POSE_LEN: usize = 6;

/// One view's correction (or noise).
pub type PoseDelta = [f64; POSE_LEN];

/// The scene extent per unit of normalised translation (3DGS's extent is 1.1 × the cameras'
/// largest distance from their centre; gsplat's normalised world puts them about 1 away).
pub const EXTENT_PER_UNIT: f64 = 1.1;

/// The pose optimizer's settings (gsplat's `pose_opt_lr`, `pose_opt_reg`, `pose_noise`; its
/// defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoseConfig {
    /// Whether the corrections are learned (`--pose-opt`); `false` with `noise > 0` trains on
    /// the noisy poses as given (the baseline a pose-noise test compares against).
    pub optimize: bool,
    pub lr: f64,
    /// Adam's L2 weight decay on the corrections.
    pub reg: f64,
    /// Standard deviation of the injected noise per coordinate (0: none).
    pub noise: f64,
    /// Length of the schedule; `None` = the run's iterations (a `--resume --extend` keeps the
    /// original length, as it does for the position schedule).
    #[serde(default)]
    pub max_steps: Option<u64>,
}

impl Default for PoseConfig {
    fn default() -> Self {
        PoseConfig {
            optimize: true,
            lr: 1e-5,
            reg: 1e-6,
            noise: 0.0,
            max_steps: None,
        }
    }
}

impl PoseConfig {
    /// The learning rate of (1-based) iteration `s` in a run of `iterations`: gsplat's
    /// exponential decay to 1 %, stepped after each iteration (so iteration 1 uses `lr`).
    pub fn lr_at(&self, iterations: u64, s: u64) -> f64 {
        let max_steps = self.max_steps.unwrap_or(iterations);
        ExponentialLr::new(self.lr, self.lr * 0.01, max_steps).at(s.saturating_sub(1))
    }

    /// A setting out of range, described for the user.
    pub fn invalid(&self) -> Option<String> {
        for (name, v) in [
            ("pose opt lr", self.lr),
            ("pose opt reg", self.reg),
            ("pose noise", self.noise),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Some(format!("{name} must be a finite number ≥ 0, not {v}"));
            }
        }
        // A rotation noise beyond ~half a turn is no longer a perturbation of the pose.
        if self.noise > 1.0 {
            return Some(format!(
                "pose noise {} is beyond 1 (radians and normalised units): a test perturbation \
                 is a few hundredths",
                self.noise
            ));
        }
        if !self.optimize && self.noise == 0.0 {
            return Some("pose settings without --pose-opt or --pose-noise do nothing".into());
        }
        None
    }
}

/// Test-time pose alignment of held-out views (`gs-train --eval-pose-steps`): before a
/// held-out view is scored, its camera gets a correction of its own, fitted to the view's
/// image with the model frozen (the same loss, Adam and parameterisation as training's;
/// learning rate `lr` decaying to 1 % over the steps), and the best pose the fit visited (by
/// the loss) is scored. A model trained with pose optimisation lives in slightly moved
/// cameras; scoring its held-out views from the dataset's poses measures that move as much
/// as the model (the fair protocol of pose-refining methods, e.g. BARF's).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoseAlignConfig {
    /// Loss evaluations and steps per view.
    pub steps: u32,
    pub lr: f64,
}

impl Default for PoseAlignConfig {
    fn default() -> Self {
        PoseAlignConfig {
            steps: 100,
            lr: 1e-3,
        }
    }
}

impl PoseAlignConfig {
    /// Learning rate of step `k` (0-based).
    pub fn lr_at(&self, k: u32) -> f64 {
        self.lr * 0.01f64.powf(f64::from(k) / f64::from(self.steps.max(1)))
    }

    /// Why the settings cannot run, naming the setting.
    pub fn invalid(&self) -> Option<String> {
        if self.steps == 0 {
            return Some("eval pose steps must be at least 1".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Some(format!(
                "eval pose lr must be a positive number, not {}",
                self.lr
            ));
        }
        None
    }
}

/// What [`crate::train::Trainer::align_pose`] found for one view.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoseAlignment {
    /// The best camera the fit visited (the given one when no step lowered the loss).
    pub camera: Camera,
    /// The loss at the given pose and at [`Self::camera`].
    pub loss_given: f64,
    pub loss_aligned: f64,
    /// How far the camera moved: rotation (degrees) and centre (scene units).
    pub moved_deg: f64,
    pub moved_units: f64,
}

/// PyTorch's Adam defaults, which gsplat's pose optimizer keeps.
const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f64 = 1e-8;

/// Every training view's correction, its Adam moments and its injected noise (module doc).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CameraPoses {
    /// Learned corrections `(u, φ)`.
    pub values: Vec<PoseDelta>,
    pub exp_avg: Vec<PoseDelta>,
    pub exp_avg_sq: Vec<PoseDelta>,
    /// Injected noise `(u, φ)` (zeros without `--pose-noise`).
    pub noise: Vec<PoseDelta>,
    /// Optimizer steps taken.
    pub steps: u64,
}

/// `N_v·[Exp(φ) | s·u]` as one camera-frame move: the noise first, then the correction.
fn moved(pose: &Pose, unit: f64, noise: &PoseDelta, value: &PoseDelta) -> Pose {
    let step = |p: Pose, d: &PoseDelta| {
        // A zero move keeps the pose's bits (no round trip through the camera-to-world form).
        if d.iter().all(|&x| x == 0.0) {
            p
        } else {
            p.perturbed([unit * d[0], unit * d[1], unit * d[2], d[3], d[4], d[5]])
        }
    };
    step(step(*pose, noise), value)
}

impl CameraPoses {
    /// Views held (every later one has no correction and no noise).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Grows to `n` views (zero corrections and moments). With `noise > 0`, the new views'
    /// noise is drawn from `rng` in view order (so a run's noise depends on its seed alone).
    pub fn ensure(&mut self, n: usize, noise: f64, rng: &mut Rng) {
        if self.values.len() < n {
            let from = self.values.len();
            self.values.resize(n, [0.0; POSE_LEN]);
            self.exp_avg.resize(n, [0.0; POSE_LEN]);
            self.exp_avg_sq.resize(n, [0.0; POSE_LEN]);
            self.noise.resize(n, [0.0; POSE_LEN]);
            if noise > 0.0 {
                for d in &mut self.noise[from..] {
                    *d = std::array::from_fn(|_| noise * rng.normal());
                }
            }
        }
    }

    /// The camera view `slot` is trained from: `camera` moved by the view's noise and then its
    /// correction, translations scaled by `unit` (the scene extent / [`EXTENT_PER_UNIT`]).
    pub fn camera(&self, slot: usize, camera: &Camera, unit: f64) -> Camera {
        let zero = [0.0; POSE_LEN];
        let noise = self.noise.get(slot).unwrap_or(&zero);
        let value = self.values.get(slot).unwrap_or(&zero);
        Camera {
            world_to_camera: moved(&camera.world_to_camera, unit, noise, value),
            ..*camera
        }
    }

    /// The gradient of view `slot`'s parameters `(u, φ)` from the rasterizer's camera-frame
    /// pose gradient `local` (module doc).
    pub fn parameter_grad(&self, slot: usize, local: &[f64; 6], unit: f64) -> PoseDelta {
        let v = self.values.get(slot).copied().unwrap_or([0.0; POSE_LEN]);
        let phi = [v[3], v[4], v[5]];
        let r = rotation_exp(phi);
        let jr = rotation_right_jacobian(phi);
        let mut g = [0.0; POSE_LEN];
        for a in 0..3 {
            g[a] = unit * (0..3).map(|k| r[a][k] * local[k]).sum::<f64>();
            g[3 + a] = (0..3).map(|k| jr[k][a] * local[3 + k]).sum::<f64>();
        }
        g
    }

    /// One Adam step (weight decay `reg`) at learning rate `lr` with `grad` the gradient of
    /// view `slot`'s parameters (every other view's is zero: see the module doc).
    pub fn step(&mut self, lr: f64, reg: f64, slot: usize, grad: &PoseDelta) {
        self.steps += 1;
        let t = self.steps.min(i32::MAX as u64) as i32;
        let step_size = lr / (1.0 - BETA1.powi(t));
        let bias2_sqrt = (1.0 - BETA2.powi(t)).sqrt();
        for (v, ((p, m), s)) in self
            .values
            .iter_mut()
            .zip(self.exp_avg.iter_mut())
            .zip(self.exp_avg_sq.iter_mut())
            .enumerate()
        {
            for k in 0..POSE_LEN {
                let g = if v == slot { grad[k] } else { 0.0 } + reg * p[k];
                m[k] = BETA1 * m[k] + (1.0 - BETA1) * g;
                s[k] = BETA2 * s[k] + (1.0 - BETA2) * g * g;
                p[k] -= step_size * m[k] / (s[k].sqrt() / bias2_sqrt + EPS);
            }
        }
    }

    /// Projects the injected noise off the 7 motions of the whole capture, as a run projects
    /// the corrections after every step ([`CaptureMotions`]): noise moves the cameras relative
    /// to each
    /// other, the error the corrections can undo. (A motion of the whole capture is the world
    /// moved: nothing in the images can tell it, and the corrections are kept from making one.)
    pub fn remove_noise_gauge(&mut self, cameras: &[Camera], unit: f64) {
        let n = self.len().min(cameras.len());
        CaptureMotions::new(&cameras[..n], &vec![[0.0; POSE_LEN]; n], unit)
            .remove_from(&mut self.noise);
    }

    /// Why the arrays cannot be a saved state: lengths differ, a value is not finite, or a
    /// second moment is negative.
    pub fn invalid(&self) -> Option<String> {
        let n = self.values.len();
        let lens = [self.exp_avg.len(), self.exp_avg_sq.len(), self.noise.len()];
        if lens.iter().any(|&l| l != n) {
            return Some(format!(
                "the pose arrays disagree in length ({n}, {}, {}, {})",
                lens[0], lens[1], lens[2]
            ));
        }
        for (what, rows) in [
            ("pose", &self.values),
            ("pose exp_avg", &self.exp_avg),
            ("pose exp_avg_sq", &self.exp_avg_sq),
            ("pose noise", &self.noise),
        ] {
            if let Some(v) = rows.iter().position(|r| r.iter().any(|x| !x.is_finite())) {
                return Some(format!("{what} of view {v} is not finite"));
            }
        }
        if let Some(v) = self
            .exp_avg_sq
            .iter()
            .position(|r| r.iter().any(|&x| x < 0.0))
        {
            return Some(format!("pose exp_avg_sq of view {v} is negative"));
        }
        None
    }

    /// For each `(slot, given camera)`: how far its trained pose is from the pose it was
    /// given, and from the true pose when noise was injected (see [`PoseSummary`]).
    pub fn summary(&self, views: &[(usize, Camera)], unit: f64) -> PoseSummary {
        let mut s = PoseSummary::default();
        let zero = [0.0; POSE_LEN];
        for (slot, cam) in views {
            let given = &cam.world_to_camera;
            let noise = self.noise.get(*slot).unwrap_or(&zero);
            let noisy = moved(given, unit, noise, &zero);
            let trained = self.camera(*slot, cam, unit).world_to_camera;
            let (rot, trans) = pose_distance(&noisy, &trained);
            s.correction_deg.push(rot);
            s.correction_units.push(trans);
            let (rot, trans) = pose_distance(given, &noisy);
            s.noise_deg.push(rot);
            s.noise_units.push(trans);
            let (rot, trans) = pose_distance(given, &trained);
            s.error_deg.push(rot);
            s.error_units.push(trans);
        }
        s
    }
}

/// Motions of the whole capture: world rotation, translation and scale.
const MOTIONS: usize = 7;

/// The 7 motions of the whole capture written as corrections of each held view (module doc),
/// and their normal matrix: fixed for a run (they depend on the dataset's cameras, the noise
/// and the scene unit only), so a run builds them once.
#[derive(Clone, Debug, Default)]
pub struct CaptureMotions {
    /// Per view, the correction each motion makes of it.
    columns: Vec<[PoseDelta; MOTIONS]>,
    /// `AᵀA` of the stacked columns.
    normal: [[f64; MOTIONS]; MOTIONS],
}

impl CaptureMotions {
    /// The motions of the cameras `cameras[i]` moved by `noise[i]` (their poses before the
    /// corrections), translations in `unit`s.
    #[allow(clippy::needless_range_loop)] // small matrices read best with explicit indices
    pub fn new(cameras: &[Camera], noise: &[PoseDelta], unit: f64) -> CaptureMotions {
        let n = cameras.len().min(noise.len());
        let zero = [0.0; POSE_LEN];
        // Each view's base pose: camera-to-world rotation and centre after the noise.
        let bases: Vec<([[f64; 3]; 3], [f64; 3])> = (0..n)
            .map(|i| {
                let p = moved(&cameras[i].world_to_camera, unit, &noise[i], &zero);
                (transpose3(&p.rotation), p.centre())
            })
            .collect();
        let mut p = [0.0; 3];
        for (_, c) in &bases {
            for k in 0..3 {
                p[k] += c[k] / n as f64;
            }
        }
        // Motion g as a correction of the view with base (r, c).
        let column = |g: usize, (r, c): &([[f64; 3]; 3], [f64; 3])| -> PoseDelta {
            let rel = [c[0] - p[0], c[1] - p[1], c[2] - p[2]];
            let rt = |v: [f64; 3]| -> [f64; 3] {
                std::array::from_fn(|a| (0..3).map(|k| r[k][a] * v[k]).sum::<f64>())
            };
            let e = |k: usize| -> [f64; 3] { std::array::from_fn(|a| f64::from(u8::from(a == k))) };
            let (u, phi) = match g {
                0..=2 => {
                    let w = e(g);
                    let cross = [
                        w[1] * rel[2] - w[2] * rel[1],
                        w[2] * rel[0] - w[0] * rel[2],
                        w[0] * rel[1] - w[1] * rel[0],
                    ];
                    (rt(cross), rt(w))
                }
                3..=5 => (rt(e(g - 3)), [0.0; 3]),
                _ => (rt(rel), [0.0; 3]),
            };
            [
                u[0] / unit,
                u[1] / unit,
                u[2] / unit,
                phi[0],
                phi[1],
                phi[2],
            ]
        };
        let columns: Vec<[PoseDelta; MOTIONS]> = bases
            .iter()
            .map(|b| std::array::from_fn(|g| column(g, b)))
            .collect();
        let mut normal = [[0.0f64; MOTIONS]; MOTIONS];
        for c in &columns {
            for a in 0..MOTIONS {
                for b in 0..MOTIONS {
                    normal[a][b] += (0..POSE_LEN).map(|k| c[a][k] * c[b][k]).sum::<f64>();
                }
            }
        }
        CaptureMotions { columns, normal }
    }

    /// Views they cover.
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// Subtracts from `rows` (row `i` of view `i`; rows beyond [`Self::len`] are left alone)
    /// their least-squares fit in the motions. Motions the cameras cannot express (e.g. scale
    /// with every camera at one point, or anything with one view) are left out of the fit.
    #[allow(clippy::needless_range_loop)] // small matrices read best with explicit indices
    pub fn remove_from(&self, rows: &mut [PoseDelta]) {
        let mut atv = [0.0f64; MOTIONS];
        for (c, v) in self.columns.iter().zip(rows.iter()) {
            for a in 0..MOTIONS {
                atv[a] += (0..POSE_LEN).map(|k| c[a][k] * v[k]).sum::<f64>();
            }
        }
        let x = solve_least_squares(self.normal, atv);
        for (c, v) in self.columns.iter().zip(rows.iter_mut()) {
            for k in 0..POSE_LEN {
                v[k] -= (0..MOTIONS).map(|g| x[g] * c[g][k]).sum::<f64>();
            }
        }
    }
}

fn transpose3(m: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    std::array::from_fn(|r| std::array::from_fn(|c| m[c][r]))
}

/// The solution of the normal equations `M·x = b` (`M` symmetric positive semi-definite) by
/// Gauss–Jordan elimination with full pivoting on the diagonal; directions whose pivot is below
/// `1e-9` of the largest diagonal entry (motions the data cannot express) get 0.
#[allow(clippy::needless_range_loop)] // row operations on one array: explicit indices
fn solve_least_squares<const G: usize>(mut m: [[f64; G]; G], mut b: [f64; G]) -> [f64; G] {
    let scale = (0..G).map(|k| m[k][k]).fold(0.0f64, f64::max);
    let mut x = [0.0; G];
    if !(scale > 0.0 && scale.is_finite()) {
        return x;
    }
    let mut done = [false; G];
    let mut order = Vec::with_capacity(G);
    for _ in 0..G {
        // The largest remaining diagonal pivot.
        let Some(k) = (0..G)
            .filter(|&k| !done[k])
            .max_by(|&a, &c| m[a][a].total_cmp(&m[c][c]))
        else {
            break;
        };
        if m[k][k] <= 1e-9 * scale {
            break;
        }
        done[k] = true;
        order.push(k);
        let piv = m[k][k];
        for r in 0..G {
            if r != k && m[r][k] != 0.0 {
                let f = m[r][k] / piv;
                for c in 0..G {
                    m[r][c] -= f * m[k][c];
                }
                b[r] -= f * b[k];
            }
        }
    }
    for k in order {
        x[k] = b[k] / m[k][k];
    }
    x
}

/// The rotation angle (degrees) and centre distance (scene units) between two poses.
pub fn pose_distance(a: &Pose, b: &Pose) -> (f64, f64) {
    // M = Ra·Rbᵀ: trace M = 1 + 2·cos θ, and its antisymmetric part has norm 2·sin θ (atan2
    // of the two is exact near 0, where acos of the trace alone loses half the digits).
    let m: [[f64; 3]; 3] = std::array::from_fn(|r| {
        std::array::from_fn(|c| (0..3).map(|k| a.rotation[r][k] * b.rotation[c][k]).sum())
    });
    let cos = (m[0][0] + m[1][1] + m[2][2] - 1.0) / 2.0;
    let axial = [m[2][1] - m[1][2], m[0][2] - m[2][0], m[1][0] - m[0][1]];
    let sin = (axial[0].powi(2) + axial[1].powi(2) + axial[2].powi(2)).sqrt() / 2.0;
    let angle = sin.atan2(cos).to_degrees();
    let (ca, cb) = (a.centre(), b.centre());
    let d = ((ca[0] - cb[0]).powi(2) + (ca[1] - cb[1]).powi(2) + (ca[2] - cb[2]).powi(2)).sqrt();
    (angle, d)
}

/// Per training view: how far training moved its pose (`correction`), how far the injected
/// noise had moved it (`noise`), and how far its trained pose is from the given one
/// (`error`; with noise injected, the error left after the correction).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoseSummary {
    pub correction_deg: Vec<f64>,
    pub correction_units: Vec<f64>,
    pub noise_deg: Vec<f64>,
    pub noise_units: Vec<f64>,
    pub error_deg: Vec<f64>,
    pub error_units: Vec<f64>,
}

impl PoseSummary {
    /// `(mean, max)` of a column.
    pub fn mean_max(v: &[f64]) -> (f64, f64) {
        if v.is_empty() {
            return (0.0, 0.0);
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        (mean, v.iter().copied().fold(0.0, f64::max))
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // parameter k of several arrays at once
mod tests {
    use super::*;
    use crate::scene::camera::Intrinsics;
    use crate::scene::camera::Projection;

    fn camera() -> Camera {
        Camera {
            width: 32,
            height: 24,
            intrinsics: Intrinsics {
                fx: 30.0,
                fy: 30.0,
                cx: 16.0,
                cy: 12.0,
            },
            world_to_camera: Pose::from_quaternion_wxyz([0.9, 0.1, -0.3, 0.2], [0.4, -0.2, 3.0])
                .unwrap(),
            projection: Projection::Pinhole,
        }
    }

    /// The parameters' gradient is the chain rule of the camera-frame gradient through
    /// `camera()`: checked against central differences of a smooth function of the camera,
    /// away from zero (so the right Jacobian and the rotation of `u` matter).
    #[test]
    fn parameter_grad_is_the_chain_rule_of_the_local_gradient() {
        let cam = camera();
        let unit = 2.5;
        let mut poses = CameraPoses::default();
        poses.ensure(2, 0.05, &mut Rng::new(3));
        poses.values[1] = [0.03, -0.02, 0.05, 0.2, -0.1, 0.15];
        // f(camera) = a·(world_to_camera entries): smooth in the pose.
        let a: Vec<f64> = (0..12).map(|k| (k as f64 * 0.7).sin()).collect();
        let f = |c: &Camera| {
            let p = c.world_to_camera;
            let flat: Vec<f64> = p
                .rotation
                .iter()
                .flatten()
                .chain(&p.translation)
                .copied()
                .collect();
            flat.iter().zip(&a).map(|(x, y)| x * y).sum::<f64>()
        };
        let h = 1e-6;
        // The camera-frame gradient of f at the trained camera, by differences.
        let trained = poses.camera(1, &cam, unit);
        let local: [f64; 6] = std::array::from_fn(|k| {
            let mut d = [0.0; 6];
            d[k] = h;
            let plus = Camera {
                world_to_camera: trained.world_to_camera.perturbed(d),
                ..trained
            };
            d[k] = -h;
            let minus = Camera {
                world_to_camera: trained.world_to_camera.perturbed(d),
                ..trained
            };
            (f(&plus) - f(&minus)) / (2.0 * h)
        });
        let analytic = poses.parameter_grad(1, &local, unit);
        for k in 0..POSE_LEN {
            let mut p = poses.clone();
            p.values[1][k] += h;
            let plus = f(&p.camera(1, &cam, unit));
            p.values[1][k] -= 2.0 * h;
            let minus = f(&p.camera(1, &cam, unit));
            let fd = (plus - minus) / (2.0 * h);
            assert!(
                (fd - analytic[k]).abs() < 1e-7 * (1.0 + fd.abs()),
                "parameter {k}: finite difference {fd} vs {}",
                analytic[k]
            );
        }
    }

    /// Adam as `torch.optim.Adam(lr, weight_decay=reg)` steps a `[views, 6]` tensor with a
    /// gradient in one row: the first step moves that row by `lr` against the sign of its
    /// gradient; the other rows (zero gradient, zero value) stay at zero.
    #[test]
    fn adam_steps_every_view_like_torch() {
        let mut p = CameraPoses::default();
        p.ensure(3, 0.0, &mut Rng::new(1));
        let g = [1.0, -2.0, 0.5, 1e-3, -1e-3, 4.0];
        p.step(1e-3, 1e-6, 1, &g);
        for k in 0..POSE_LEN {
            // lr·g/(|g| + ε): within ε/|g| of lr.
            assert!(
                (p.values[1][k] + 1e-3 * g[k].signum()).abs() < 1e-3 * 1e-8 / g[k].abs() + 1e-15
            );
            assert_eq!(p.values[0][k], 0.0);
            assert_eq!(p.values[2][k], 0.0);
        }
        // Second step with no gradient for view 1: its momentum carries it on.
        let before = p.values[1];
        p.step(1e-3, 1e-6, 0, &[0.0; 6]);
        for k in 0..POSE_LEN {
            assert!((p.values[1][k] - before[k]) * g[k] < 0.0);
        }
        assert_eq!(p.steps, 2);
        assert_eq!(p.invalid(), None);
    }

    #[test]
    fn noise_is_seeded_and_moves_only_noisy_runs() {
        let cam = camera();
        let mut a = CameraPoses::default();
        a.ensure(4, 0.02, &mut Rng::new(9));
        let mut b = CameraPoses::default();
        b.ensure(2, 0.02, &mut Rng::new(9));
        b.ensure(4, 0.02, &mut Rng::new(0));
        assert_eq!(a.noise[..2], b.noise[..2]);
        let s = a.summary(&[(0, cam), (1, cam), (2, cam), (3, cam)], 1.0);
        assert!(s.noise_deg.iter().all(|&d| d > 0.0 && d < 10.0));
        // No correction yet: the error is the noise.
        assert_eq!(s.error_deg, s.noise_deg);
        assert!(s.correction_deg.iter().all(|&d| d < 1e-6));
        let mut quiet = CameraPoses::default();
        quiet.ensure(2, 0.0, &mut Rng::new(9));
        assert_eq!(quiet.camera(1, &cam, 1.0), cam);
    }

    /// Corrections that are one motion of the whole capture (a world rotation, translation
    /// and scaling, to first order) are removed entirely; a correction of one camera relative
    /// to the others mostly stays, and removing twice changes nothing more.
    #[test]
    fn remove_gauge_takes_out_the_motions_of_the_whole_capture() {
        let mut rng = Rng::new(12);
        let cams: Vec<Camera> = (0..9)
            .map(|_| {
                let q = [0; 4].map(|_| rng.normal());
                let t = [0; 3].map(|_| rng.uniform(-2.0, 2.0));
                Camera {
                    world_to_camera: Pose::from_quaternion_wxyz(q, t).unwrap(),
                    ..camera()
                }
            })
            .collect();
        let unit = 1.7;
        let mut poses = CameraPoses::default();
        poses.ensure(cams.len(), 0.01, &mut Rng::new(2));
        // A small world motion: rotation Ω about the centroid p, translation T, scale λ.
        let (omega, t, lambda) = ([0.01, -0.02, 0.015], [0.03, 0.01, -0.02], 0.02);
        let zero = [0.0; POSE_LEN];
        let bases: Vec<Pose> = (0..cams.len())
            .map(|i| moved(&cams[i].world_to_camera, unit, &poses.noise[i], &zero))
            .collect();
        let mut p = [0.0; 3];
        for b in &bases {
            let c = b.centre();
            for k in 0..3 {
                p[k] += c[k] / bases.len() as f64;
            }
        }
        for (i, b) in bases.iter().enumerate() {
            let r = transpose3(&b.rotation);
            let c = b.centre();
            let rel = [c[0] - p[0], c[1] - p[1], c[2] - p[2]];
            let world = [
                omega[1] * rel[2] - omega[2] * rel[1] + t[0] + lambda * rel[0],
                omega[2] * rel[0] - omega[0] * rel[2] + t[1] + lambda * rel[1],
                omega[0] * rel[1] - omega[1] * rel[0] + t[2] + lambda * rel[2],
            ];
            for a in 0..3 {
                poses.values[i][a] = (0..3).map(|k| r[k][a] * world[k]).sum::<f64>() / unit;
                poses.values[i][3 + a] = (0..3).map(|k| r[k][a] * omega[k]).sum::<f64>();
            }
        }
        let motions = CaptureMotions::new(&cams, &poses.noise, unit);
        motions.remove_from(&mut poses.values);
        let left = poses
            .values
            .iter()
            .flatten()
            .fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(left < 1e-12, "a whole-capture motion left {left}");
        // One camera's own correction: most of it stays; a second projection is a no-op.
        poses.values[4] = [0.02, -0.01, 0.03, 0.01, 0.02, -0.015];
        motions.remove_from(&mut poses.values);
        let kept = poses.values[4];
        let norm = |d: &PoseDelta| d.iter().map(|v| v * v).sum::<f64>().sqrt();
        assert!(norm(&kept) > 0.7 * norm(&[0.02, -0.01, 0.03, 0.01, 0.02, -0.015]));
        let once = poses.values.clone();
        motions.remove_from(&mut poses.values);
        for (a, b) in once.iter().flatten().zip(poses.values.iter().flatten()) {
            assert!((a - b).abs() < 1e-15, "{a} vs {b}");
        }
        // One view: every correction is a motion of the whole capture.
        let mut single = CameraPoses::default();
        single.ensure(1, 0.0, &mut Rng::new(1));
        single.values[0] = [0.1, 0.2, 0.3, 0.01, 0.02, 0.03];
        CaptureMotions::new(&cams[..1], &single.noise, unit).remove_from(&mut single.values);
        assert!(
            single.values[0].iter().all(|v| v.abs() < 1e-12),
            "{:?}",
            single.values
        );
    }

    #[test]
    fn settings_out_of_range_are_named() {
        let bad = |f: fn(&mut PoseConfig)| {
            let mut c = PoseConfig::default();
            f(&mut c);
            c.invalid().expect("refused")
        };
        assert!(bad(|c| c.lr = -1.0).contains("pose opt lr"));
        assert!(bad(|c| c.reg = f64::NAN).contains("pose opt reg"));
        assert!(bad(|c| c.noise = 2.0).contains("pose noise"));
        assert_eq!(PoseConfig::default().invalid(), None);
        let c = PoseConfig::default();
        assert!((c.lr_at(100, 1) - 1e-5).abs() < 1e-18);
        assert!((c.lr_at(100, 101) - 1e-7).abs() < 1e-18);
    }
}
