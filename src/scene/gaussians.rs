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

impl Gaussians {
    pub fn len(&self) -> usize {
        self.means.len()
    }

    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }
}
