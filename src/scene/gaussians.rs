//! Gaussians as a structure of arrays of *stored* (pre-activation) parameters.
//!
//! Stored values are what the optimizer updates and what a 3DGS PLY holds: log-scales (activate
//! with `exp`), logit opacities (activate with the sigmoid) and unnormalised wxyz quaternions
//! (normalise before use). Keeping activation out of storage is what makes it impossible to
//! save "already activated" values by accident (the failure that once turned a resumed run's
//! scales into a 52 GB allocation).
//!
//! Invariant: every array has `len()` entries, `sh` has `len() · sh_coeffs(sh_degree)`.

/// Number of SH coefficients per colour channel for a degree (1, 4, 9, 16).
pub const fn sh_coeffs(degree: u32) -> usize {
    ((degree + 1) * (degree + 1)) as usize
}

/// Highest supported SH degree.
pub const MAX_SH_DEGREE: u32 = 3;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gaussians {
    pub means: Vec<[f32; 3]>,
    /// Natural log of the per-axis standard deviations.
    pub log_scales: Vec<[f32; 3]>,
    /// (w, x, y, z), not necessarily normalised.
    pub rotations: Vec<[f32; 4]>,
    /// Logit of the opacity.
    pub logit_opacities: Vec<f32>,
    /// Degree of the stored SH coefficients (0..=3).
    pub sh_degree: u32,
    /// `len() · sh_coeffs(sh_degree)` RGB triples; Gaussian `i`'s coefficient `k` is at
    /// `i · sh_coeffs(sh_degree) + k`. Coefficient 0 is the DC term.
    pub sh: Vec<[f32; 3]>,
}

/// Log-scale above which a splat may be skipped in single precision: σ = e^30 ≈ 1.1e13 scene
/// units; seen through a focal length of 1000 px from 0.01 units (the near plane) its `Σ2d`
/// reaches 1e42 px², past `f32::MAX`. Trained models stay far below (3DGS scales are a few
/// scene units at most).
pub const LOG_SCALE_F32_LIMIT: f32 = 30.0;

impl Gaussians {
    pub fn len(&self) -> usize {
        self.means.len()
    }

    /// The Gaussians whose largest log-scale exceeds [`LOG_SCALE_F32_LIMIT`]: how many, and
    /// the first one's index. Single-precision rasterizers (the CPU engine's f32 and the CUDA
    /// kernels) draw huge splats exactly as float64 does while the projected covariance `Σ2d`
    /// is finite in f32; past that (`σ·f/z` above ~1.8e19 px) the splat is skipped, where a
    /// float64 renderer would draw it over the whole image. Renderers report these.
    pub fn beyond_f32_range(&self) -> Option<(usize, usize)> {
        let mut found = self
            .log_scales
            .iter()
            .enumerate()
            .filter(|(_, s)| s.iter().any(|&v| v > LOG_SCALE_F32_LIMIT));
        let (first, _) = found.next()?;
        Some((1 + found.count(), first))
    }

    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }
}
