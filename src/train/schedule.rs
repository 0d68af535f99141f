//! Learning-rate schedules: the exponential (log-linear) decay of 3DGS's `get_expon_lr_func`.
//!
//! `lr(step) = delay(step) · exp((1 − t)·ln(lr_init) + t·ln(lr_final))`, `t = clamp(step /
//! max_steps, 0, 1)`, where the optional delay multiplier is
//! `delay_mult + (1 − delay_mult)·sin(π/2 · clamp(step / delay_steps, 0, 1))` when
//! `delay_steps > 0` and 1 otherwise. The original 3DGS (2024 defaults) builds the position
//! schedule with `lr_delay_steps = 0` (its `lr_delay_mult = 0.01` is therefore inert), so the
//! trainer uses no delay; the field exists so the function is the complete twin of the original.
//! Like the original, a negative step or an all-zero schedule yields 0.

use serde::{Deserialize, Serialize};

/// One exponentially decaying learning rate (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExponentialLr {
    pub lr_init: f64,
    pub lr_final: f64,
    /// 0 disables the delay (the 3DGS default for positions).
    pub delay_steps: u64,
    pub delay_mult: f64,
    pub max_steps: u64,
}

impl ExponentialLr {
    /// A schedule without delay from `lr_init` at step 0 to `lr_final` at `max_steps`.
    pub fn new(lr_init: f64, lr_final: f64, max_steps: u64) -> ExponentialLr {
        ExponentialLr {
            lr_init,
            lr_final,
            delay_steps: 0,
            delay_mult: 1.0,
            max_steps,
        }
    }

    /// The learning rate at `step` (3DGS calls it with the 1-based iteration number).
    pub fn at(&self, step: u64) -> f64 {
        if self.lr_init == 0.0 && self.lr_final == 0.0 {
            return 0.0;
        }
        let delay = if self.delay_steps > 0 {
            let u = (step as f64 / self.delay_steps as f64).clamp(0.0, 1.0);
            self.delay_mult + (1.0 - self.delay_mult) * (0.5 * std::f64::consts::PI * u).sin()
        } else {
            1.0
        };
        let t = if self.max_steps == 0 {
            1.0
        } else {
            (step as f64 / self.max_steps as f64).clamp(0.0, 1.0)
        };
        delay * ((1.0 - t) * self.lr_init.ln() + t * self.lr_final.ln()).exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1e-30)
    }

    #[test]
    fn endpoints_and_log_linear_midpoint() {
        // 3DGS position schedule for a scene of extent 2.5 over 30,000 iterations.
        let extent = 2.5;
        let s = ExponentialLr::new(1.6e-4 * extent, 1.6e-6 * extent, 30_000);
        assert!(close(s.at(0), 4.0e-4));
        assert!(close(s.at(30_000), 4.0e-6));
        // Past the end it stays at the final value.
        assert!(close(s.at(90_000), 4.0e-6));
        // Log-linear: the midpoint is the geometric mean.
        assert!(close(s.at(15_000), (4.0e-4f64 * 4.0e-6).sqrt()));
        // Monotone decreasing.
        assert!(s.at(100) > s.at(101));
    }

    #[test]
    fn delay_multiplier_and_zero_schedule() {
        let mut s = ExponentialLr::new(1.0, 0.01, 100);
        s.delay_steps = 10;
        s.delay_mult = 0.01;
        assert!(close(s.at(0), 0.01));
        // After the delay the plain schedule applies.
        assert!(close(s.at(50), 0.1));
        assert_eq!(ExponentialLr::new(0.0, 0.0, 10).at(3), 0.0);
    }
}
