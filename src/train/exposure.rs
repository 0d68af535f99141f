//! Per-view exposure compensation: a learned 3×4 affine colour transform per training view,
//! applied to the render before the loss (the "trained exposure" of the 2024 3DGS code base,
//! its `--train_test_exp`).
//!
//! Photos of one scene rarely share an exposure: auto-exposure, white balance and vignetting
//! change from shot to shot, and a model that must reproduce every photo's colours exactly
//! grows floaters in front of the darker ones. Each view `v` gets a matrix `E_v` (3 rows × 4
//! columns, row-major, identity at the start); the loss sees, per pixel with render colour
//! `x` (a row vector),
//!
//! `y_j = Σ_i x_i·E[i][j] + E[j][3]`
//!
//! (3DGS's `rendered_image.permute(1, 2, 0) @ E[:3, :3] + E[:3, 3]`, so a saved
//! `exposure.json` means the same in both). Its adjoint: `∂L/∂x_i = Σ_j E[i][j]·∂L/∂y_j`,
//! `∂L/∂E[i][j] = Σ_pixels x_i·∂L/∂y_j`, `∂L/∂E[j][3] = Σ_pixels ∂L/∂y_j` (summed in f64 in
//! pixel order, so the host engine is deterministic; the device engine sums per block in a
//! fixed tree, `kernels/loss.cu`).
//!
//! The matrices are optimised by their own Adam, as 3DGS's `exposure_optimizer` is: PyTorch's
//! defaults (β 0.9/0.999, ε 1e-8, not the Gaussians' 1e-15), one step count, and every view's
//! matrix stepped every iteration (the gradient is dense: zero for the views not drawn, so
//! their moments decay and their momentum carries on, exactly as `torch.optim.Adam` does with
//! one `[views, 3, 4]` tensor). The learning rate follows 3DGS's `get_expon_lr_func` with the
//! exposure settings (0.01 → 0.001 over the run, no delay, by default).
//!
//! # The mean matrix stays the identity (unlike 3DGS)
//! Any colour transform common to every view can live in the matrices or in the Gaussians'
//! colours alike: the loss cannot tell them apart, and 3DGS leaves that freedom open. On the
//! fox photos (1/8 size, 3,000 iterations) the matrices then drifted together (+0.18 red,
//! +0.08 green offsets on every view) and the model alone, as a viewer shows it without
//! `exposure.json`, scored 16.3 dB on its training views against 23.3 dB through them. So
//! after every step the matrices are projected back onto "their mean is the identity" (the
//! mean's excess over the identity is subtracted from each): the views keep their
//! differences, and the Gaussians carry the scene at the views' mean exposure, so the saved
//! model renders true colours on its own.
//!
//! Invariants: the three arrays of [`Exposures`] always have equal lengths, and after a step
//! the mean of `values` is the identity (to rounding). A view beyond them has the identity and
//! zero moments; a run holds every view from its first step ([`Exposures::ensure`]), since
//! the mean is over the views held.

use serde::{Deserialize, Serialize};

use super::adam::{AdamConfig, Coef};
use super::schedule::ExponentialLr;

/// Floats of one view's matrix (3 rows × 4 columns, row-major).
pub const EXPOSURE_LEN: usize = 12;

/// One view's matrix.
pub type Exposure = [f32; EXPOSURE_LEN];

/// The identity transform.
pub const IDENTITY: Exposure = [
    1.0, 0.0, 0.0, 0.0, //
    0.0, 1.0, 0.0, 0.0, //
    0.0, 0.0, 1.0, 0.0,
];

/// The exposure optimizer's settings (3DGS's `exposure_lr_*`; its defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExposureConfig {
    pub lr_init: f64,
    pub lr_final: f64,
    /// 0 disables the delay (3DGS's default).
    pub lr_delay_steps: u64,
    pub lr_delay_mult: f64,
    /// Length of the schedule; `None` = the run's iterations (a `--resume --extend` keeps the
    /// original length, as it does for the position schedule).
    #[serde(default)]
    pub max_steps: Option<u64>,
}

impl Default for ExposureConfig {
    fn default() -> Self {
        ExposureConfig {
            lr_init: 0.01,
            lr_final: 0.001,
            lr_delay_steps: 0,
            lr_delay_mult: 0.0,
            max_steps: None,
        }
    }
}

impl ExposureConfig {
    /// The learning-rate schedule of a run of `iterations`.
    pub fn schedule(&self, iterations: u64) -> ExponentialLr {
        ExponentialLr {
            lr_init: self.lr_init,
            lr_final: self.lr_final,
            delay_steps: self.lr_delay_steps,
            delay_mult: self.lr_delay_mult,
            max_steps: self.max_steps.unwrap_or(iterations),
        }
    }

    /// A setting out of range, described for the user.
    pub fn invalid(&self) -> Option<String> {
        for (name, v) in [
            ("exposure lr init", self.lr_init),
            ("exposure lr final", self.lr_final),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Some(format!("{name} must be a finite number ≥ 0, not {v}"));
            }
        }
        if !(self.lr_delay_mult.is_finite() && (0.0..=1.0).contains(&self.lr_delay_mult)) {
            return Some(format!(
                "exposure lr delay mult must be in [0, 1], not {}",
                self.lr_delay_mult
            ));
        }
        // The schedule interpolates logarithms: one zero end with a non-zero other would make
        // every rate but the ends 0 or NaN.
        if (self.lr_init == 0.0) != (self.lr_final == 0.0) {
            return Some(format!(
                "exposure lr init and final must both be 0 or both be > 0 (got {} and {})",
                self.lr_init, self.lr_final
            ));
        }
        None
    }
}

/// PyTorch's Adam defaults, which 3DGS's exposure optimizer keeps.
pub const EXPOSURE_ADAM: AdamConfig = AdamConfig {
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    sparse: false,
};

/// Every view's matrix and its Adam moments (see the module doc).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exposures {
    pub values: Vec<Exposure>,
    pub exp_avg: Vec<Exposure>,
    pub exp_avg_sq: Vec<Exposure>,
    /// Optimizer steps taken.
    pub steps: u64,
}

impl Exposures {
    /// View `slot`'s matrix (the identity for a view not stepped yet).
    pub fn get(&self, slot: usize) -> Exposure {
        self.values.get(slot).copied().unwrap_or(IDENTITY)
    }

    /// Views held (every later one is the identity).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Grows to `n` views (identity, zero moments).
    pub fn ensure(&mut self, n: usize) {
        if self.values.len() < n {
            self.values.resize(n, IDENTITY);
            self.exp_avg.resize(n, [0.0; EXPOSURE_LEN]);
            self.exp_avg_sq.resize(n, [0.0; EXPOSURE_LEN]);
        }
    }

    /// One Adam step at learning rate `lr` with `grad` the gradient of view `slot`'s matrix
    /// (every other view's is zero), then the projection onto a mean of identity (see the
    /// module doc).
    pub fn step(&mut self, lr: f64, slot: usize, grad: &[f64; EXPOSURE_LEN]) {
        self.ensure(slot + 1);
        self.steps += 1;
        let coef = Coef::new(&EXPOSURE_ADAM, lr, self.steps);
        for (v, ((p, m), s)) in self
            .values
            .iter_mut()
            .zip(self.exp_avg.iter_mut())
            .zip(self.exp_avg_sq.iter_mut())
            .enumerate()
        {
            for k in 0..EXPOSURE_LEN {
                let g = if v == slot { grad[k] as f32 } else { 0.0 };
                coef.update(&mut p[k], &mut m[k], &mut s[k], g);
            }
        }
        self.center();
    }

    /// Subtracts the mean matrix's excess over the identity from every matrix (summed in f64
    /// in view order: deterministic).
    fn center(&mut self) {
        let n = self.values.len() as f64;
        let mut mean = [0.0f64; EXPOSURE_LEN];
        for e in &self.values {
            for (m, &x) in mean.iter_mut().zip(e) {
                *m += x as f64;
            }
        }
        let excess: [f32; EXPOSURE_LEN] =
            std::array::from_fn(|k| (mean[k] / n - IDENTITY[k] as f64) as f32);
        for e in &mut self.values {
            for (x, d) in e.iter_mut().zip(excess) {
                *x -= d;
            }
        }
    }

    /// Why the arrays cannot be a saved state: lengths differ, a value is not finite, or a
    /// second moment is negative.
    pub fn invalid(&self) -> Option<String> {
        let n = self.values.len();
        if self.exp_avg.len() != n || self.exp_avg_sq.len() != n {
            return Some(format!(
                "the exposure arrays disagree in length ({n}, {}, {})",
                self.exp_avg.len(),
                self.exp_avg_sq.len()
            ));
        }
        for (what, rows) in [
            ("exposure", &self.values),
            ("exposure first moment", &self.exp_avg),
            ("exposure second moment", &self.exp_avg_sq),
        ] {
            if let Some(v) = rows.iter().position(|r| r.iter().any(|x| !x.is_finite())) {
                return Some(format!("the {what} of view {v} is not finite"));
            }
        }
        if let Some(v) = self
            .exp_avg_sq
            .iter()
            .position(|r| r.iter().any(|&x| x < 0.0))
        {
            return Some(format!(
                "the exposure second moment of view {v} is negative (it is a mean of squares)"
            ));
        }
        None
    }
}

/// One pixel `x` through `e` (see the module doc; the device kernel's operation order).
#[inline]
fn pixel(e: &Exposure, x: &[f32]) -> [f32; 3] {
    std::array::from_fn(|j| x[0] * e[j] + x[1] * e[4 + j] + x[2] * e[8 + j] + e[4 * j + 3])
}

/// `out` (resized) = `image` (`[H, W, 3]`) through `e`.
pub fn apply(e: &Exposure, image: &[f32], out: &mut Vec<f32>) {
    out.clear();
    out.reserve(image.len());
    for x in image.chunks_exact(3) {
        out.extend_from_slice(&pixel(e, x));
    }
}

/// `image` through `e`, in place.
pub fn apply_in_place(e: &Exposure, image: &mut [f32]) {
    for x in image.chunks_exact_mut(3) {
        let y = pixel(e, x);
        x.copy_from_slice(&y);
    }
}

/// The adjoint of [`apply`]: `d` holds `∂L/∂y` and becomes `∂L/∂x` (in place); returns
/// `∂L/∂E`, summed in f64 in pixel order. `image` is the render `x` the forward read.
pub fn backward(e: &Exposure, image: &[f32], d: &mut [f32]) -> [f64; EXPOSURE_LEN] {
    let mut g = [0.0f64; EXPOSURE_LEN];
    for (x, dy) in image.chunks_exact(3).zip(d.chunks_exact_mut(3)) {
        let dyv = [dy[0], dy[1], dy[2]];
        for j in 0..3 {
            let dj = dyv[j] as f64;
            g[j] += x[0] as f64 * dj;
            g[4 + j] += x[1] as f64 * dj;
            g[8 + j] += x[2] as f64 * dj;
            g[4 * j + 3] += dj;
        }
        for i in 0..3 {
            dy[i] = e[4 * i] * dyv[0] + e[4 * i + 1] * dyv[1] + e[4 * i + 2] * dyv[2];
        }
    }
    g
}

/// The keys of `exposure.json` for views named `view_names` (in slot order): 3DGS's image
/// names (the file stems, [`crate::export::cameras_json::img_name`]) when they are unique,
/// else the whole view names (Blender's `train/r_0` and `test/r_0` share the stem `r_0`,
/// and 3DGS would then give both one matrix). Readers look a view up by its stem first, then
/// by its name.
pub fn view_keys(view_names: &[String]) -> Vec<String> {
    let stems: Vec<String> = view_names
        .iter()
        .map(|n| crate::export::cameras_json::img_name(n))
        .collect();
    let unique: std::collections::HashSet<&String> = stems.iter().collect();
    if unique.len() == stems.len() {
        stems
    } else {
        view_names.to_vec()
    }
}

/// `exposure.json` as 3DGS writes it: an object from each view's key ([`view_keys`]) to its
/// 3×4 matrix as a list of rows, for every view in `names` order (`names[slot]`; a view never
/// stepped has the identity).
pub fn to_json(names: &[String], exposures: &Exposures) -> String {
    let mut s = String::from("{");
    for (slot, name) in names.iter().enumerate() {
        let e = exposures.get(slot);
        let row = |r: usize| {
            let vals: Vec<String> = (0..4).map(|c| json_f32(e[4 * r + c])).collect();
            format!("[{}]", vals.join(", "))
        };
        let key = serde_json::to_string(name).expect("a string serialises");
        s.push_str(if slot == 0 { "\n  " } else { ",\n  " });
        s.push_str(&format!("{key}: [{}, {}, {}]", row(0), row(1), row(2)));
    }
    s.push_str("\n}\n");
    s
}

/// The shortest decimal that reads back as `v` (finite values only are stored).
fn json_f32(v: f32) -> String {
    let s = format!("{v:?}");
    if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// Parses an `exposure.json` (3DGS's or ours): image name → matrix.
pub fn from_json(text: &str) -> Result<Vec<(String, Exposure)>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let obj = v
        .as_object()
        .ok_or("expected an object from image names to 3×4 matrices")?;
    let mut out = Vec::with_capacity(obj.len());
    for (name, m) in obj {
        let rows = m
            .as_array()
            .filter(|r| r.len() == 3)
            .ok_or_else(|| format!("{name:?}: expected a list of 3 rows of 4 numbers"))?;
        let mut e = [0.0f32; EXPOSURE_LEN];
        for (r, row) in rows.iter().enumerate() {
            let row = row
                .as_array()
                .filter(|c| c.len() == 4)
                .ok_or_else(|| format!("{name:?}: row {r} is not a list of 4 numbers"))?;
            for (c, x) in row.iter().enumerate() {
                // Finite in single precision, as it is applied: 1e300 would be infinity.
                let x = x
                    .as_f64()
                    .map(|x| x as f32)
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| {
                        format!("{name:?}: row {r} column {c} is not a finite f32 number")
                    })?;
                e[4 * r + c] = x;
            }
        }
        out.push((name.clone(), e));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_image(n: usize) -> Vec<f32> {
        (0..3 * n)
            .map(|i| ((i * 37 % 101) as f32) / 101.0)
            .collect()
    }

    fn sample_exposure() -> Exposure {
        [
            1.1, 0.05, -0.02, 0.03, //
            -0.04, 0.9, 0.01, -0.02, //
            0.02, 0.03, 1.2, 0.05,
        ]
    }

    /// L = Σ w·y for fixed weights w: ∂L/∂y = w.
    fn weighted(e: &Exposure, x: &[f32], w: &[f32]) -> f64 {
        let mut y = Vec::new();
        apply(e, x, &mut y);
        y.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum()
    }

    #[test]
    fn identity_changes_nothing_and_the_map_is_3dgs_row_vector_times_matrix() {
        let x = sample_image(5);
        let mut y = Vec::new();
        apply(&IDENTITY, &x, &mut y);
        assert_eq!(x, y);
        // One pixel by hand: y_j = Σ_i x_i E[i][j] + E[j][3].
        let e = sample_exposure();
        apply(&e, &[0.5, 0.25, 1.0], &mut y);
        let want = [
            0.5 * 1.1 + 0.25 * -0.04 + 1.0 * 0.02 + 0.03,
            0.5 * 0.05 + 0.25 * 0.9 + 1.0 * 0.03 - 0.02,
            0.5 * -0.02 + 0.25 * 0.01 + 1.0 * 1.2 + 0.05,
        ];
        for j in 0..3 {
            assert!(
                (y[j] as f64 - want[j]).abs() < 1e-6,
                "{j}: {} vs {}",
                y[j],
                want[j]
            );
        }
        let mut z = vec![0.5, 0.25, 1.0];
        apply_in_place(&e, &mut z);
        assert_eq!(z, y);
    }

    #[test]
    fn backward_matches_finite_differences() {
        let n = 7;
        let x = sample_image(n);
        let w: Vec<f32> = (0..3 * n)
            .map(|i| ((i * 13 % 7) as f32 - 3.0) / 5.0)
            .collect();
        let e = sample_exposure();
        let mut d = w.clone();
        let g = backward(&e, &x, &mut d);
        let h = 1e-2f32;
        for k in 0..EXPOSURE_LEN {
            let (mut ep, mut em) = (e, e);
            ep[k] += h;
            em[k] -= h;
            let fd = (weighted(&ep, &x, &w) - weighted(&em, &x, &w)) / (2.0 * h as f64);
            assert!(
                (fd - g[k]).abs() < 1e-3 * (1.0 + g[k].abs()),
                "E[{k}]: {fd} vs {}",
                g[k]
            );
        }
        for p in 0..3 * n {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[p] += h;
            xm[p] -= h;
            let fd = (weighted(&e, &xp, &w) - weighted(&e, &xm, &w)) / (2.0 * h as f64);
            assert!((fd - d[p] as f64).abs() < 1e-3, "x[{p}]: {fd} vs {}", d[p]);
        }
    }

    #[test]
    fn steps_keep_the_mean_at_the_identity_and_views_apart() {
        let mut ex = Exposures::default();
        ex.ensure(3);
        for s in 0..6usize {
            let g: [f64; 12] = std::array::from_fn(|k| ((s * 12 + k) as f64 - 30.0) / 17.0);
            ex.step(0.01 / (1 + s) as f64, s % 3, &g);
            for k in 0..EXPOSURE_LEN {
                let mean: f32 = ex.values.iter().map(|e| e[k]).sum::<f32>() / 3.0;
                assert!(
                    (mean - IDENTITY[k]).abs() < 1e-6,
                    "step {s}, entry {k}: {mean}"
                );
            }
        }
        assert_ne!(
            ex.values[0], ex.values[1],
            "the views keep their differences"
        );
        // A view not drawn this step still moves with its momentum (PyTorch's dense Adam).
        let before = ex.values[0];
        ex.step(0.01, 2, &[0.0; 12]);
        assert_ne!(before, ex.values[0]);
        assert_eq!(ex.invalid(), None);
        // One view alone has nothing to compensate: it stays the identity.
        let mut one = Exposures::default();
        one.step(0.01, 0, &[1.0; 12]);
        assert_eq!(one.values, vec![IDENTITY]);
    }

    #[test]
    fn json_round_trips_in_the_3dgs_layout() {
        let mut ex = Exposures::default();
        ex.ensure(1);
        ex.values[0] = sample_exposure();
        let names = vec!["0001".to_string(), "a \"quoted\" name".to_string()];
        let text = to_json(&names, &ex);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["0001"][0][3].as_f64().unwrap() as f32, 0.03);
        assert_eq!(v["0001"][2][2].as_f64().unwrap() as f32, 1.2);
        assert_eq!(v["a \"quoted\" name"][1][1].as_f64().unwrap(), 1.0);
        let back = from_json(&text).unwrap();
        let get = |n: &str| back.iter().find(|(k, _)| k == n).unwrap().1;
        assert_eq!(get("0001"), sample_exposure());
        assert_eq!(get("a \"quoted\" name"), IDENTITY);
        assert!(from_json("{\"x\": [[1,2,3]]}")
            .unwrap_err()
            .contains("3 rows"));
        assert!(from_json("[]").is_err());
        // Finite in f64 but not in f32: refused, not read as infinity.
        let e = from_json("{\"x\": [[1e300,0,0,0],[0,1,0,0],[0,0,1,0]]}").unwrap_err();
        assert!(
            e.contains("row 0 column 0 is not a finite f32 number"),
            "{e}"
        );
    }

    #[test]
    fn keys_are_stems_unless_two_views_share_one() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            view_keys(&names(&["images/0001.jpg", "images/0002.jpg"])),
            names(&["0001", "0002"])
        );
        let blender = names(&["train/r_0.png", "test/r_0.png"]);
        assert_eq!(view_keys(&blender), blender);
    }

    #[test]
    fn settings_out_of_range_are_named() {
        let ok = ExposureConfig::default();
        assert_eq!(ok.invalid(), None);
        let s = ok.schedule(30_000);
        assert!((s.at(0) - 0.01).abs() < 1e-15 && (s.at(30_000) - 0.001).abs() < 1e-15);
        let bad = ExposureConfig {
            lr_init: 0.0,
            ..ok.clone()
        };
        assert!(bad.invalid().unwrap().contains("both be 0"));
        let bad = ExposureConfig {
            lr_delay_mult: 2.0,
            ..ok
        };
        assert!(bad.invalid().unwrap().contains("delay mult"));
    }
}
