//! A minimal floating-point abstraction so that the reference math (SH, projection,
//! rasterization and their gradients) is written once and runs in `f32` for training and in
//! `f64` for finite-difference verification.
//!
//! Invariant: the implementations for `f32` and `f64` forward to the inherent std methods, so
//! the `f32` instantiation computes exactly what hand-written `f32` code would; the one
//! exception is [`Real::exp_lanes`], whose `f32` form is [`exp_lanes_f32`] (the rasterizers'
//! `e^{−σ}`, written so that it vectorizes).

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

use super::lanes::{Array4, Lanes};

/// The float operations the renderer needs; implemented for `f32` and `f64` only.
pub trait Real:
    Copy
    + Debug
    + Default
    + PartialOrd
    + Send
    + Sync
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
{
    const ZERO: Self;
    const ONE: Self;
    /// Size in bytes (used by memory preflights).
    const BYTES: usize;
    fn from_f64(v: f64) -> Self;
    fn from_f32(v: f32) -> Self;
    fn to_f64(self) -> f64;
    fn to_f32(self) -> f32;
    fn exp(self) -> Self;
    /// `e^x` for the rasterizers' per-pixel lanes: in `f32` [`exp_lanes_f32`] (within 1 ulp
    /// of `e^x` where measured, branch-free, with a four-lane form in [`Real::Lanes`]), in
    /// `f64` the std `exp` (finite differences want its accuracy).
    fn exp_lanes(self) -> Self;
    /// Four values as one, for the rasterizers' per-pixel lanes: in `f32` on x86-64 one SSE
    /// vector, otherwise four scalars; each lane gets the bits the scalar operation gives it
    /// (see [`super::lanes`]).
    type Lanes: Lanes<Self>;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    /// The angle of `(x = other, y = self)`, as `f64::atan2`.
    fn atan2(self, other: Self) -> Self;
    fn ceil(self) -> Self;
    fn floor(self) -> Self;
    fn abs(self) -> Self;
    fn is_finite(self) -> bool;
    /// `max` with std semantics (a NaN operand yields the other operand).
    fn max(self, other: Self) -> Self;
    /// `min` with std semantics (a NaN operand yields the other operand).
    fn min(self, other: Self) -> Self;
}

macro_rules! impl_real {
    ($t:ty, $exp_lanes:expr, $lanes:ty) => {
        impl Real for $t {
            type Lanes = $lanes;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const BYTES: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn exp_lanes(self) -> Self {
                $exp_lanes(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn atan2(self, other: Self) -> Self {
                <$t>::atan2(self, other)
            }
            #[inline(always)]
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                <$t>::max(self, other)
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                <$t>::min(self, other)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
impl_real!(f32, exp_lanes_f32, super::lanes::F32x4);
#[cfg(not(target_arch = "x86_64"))]
impl_real!(f32, exp_lanes_f32, Array4<f32>);
impl_real!(f64, f64::exp, Array4<f64>);

/// ln 2 = `LN2_HI + LN2_LO`; `LN2_HI` has 9 significant bits, so `n·LN2_HI` is exact for
/// `|n| < 2¹⁵`.
const LN2_HI: f32 = 355.0 / 512.0;
const LN2_LO: f32 = -2.121_944_4e-4;
/// `1.5·2²³`: adding it rounds to an integer, which the low bits of the sum then hold.
const ROUND: f32 = 12_582_912.0;
/// Cephes' minimax coefficients of `(e^r − 1 − r)/r²` on `|r| ≤ ½ln 2`, rounded to f32,
/// highest degree first.
const EXP_P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_6e-1,
    0.5,
];
/// The clamp of the argument: `e^x` stays a normal float.
const EXP_LO: f32 = -87.3;
const EXP_HI: f32 = 88.3;

/// `e^x` in `f32` without a branch or a library call (libm's `expf` is a call per pixel, and was
/// 13 % of a training profile); [`Real::Lanes`]' `exp` computes four at once, with the same bits.
///
/// `x` is clamped to `[−87.3, 88.3]`, where `e^x` is a normal float (a NaN stays NaN); then
/// `x = n·ln 2 + r`, `n` the nearest integer to `x·log₂e` (by the round-to-nearest of adding
/// `1.5·2²³`), `r` from a two-part `ln 2` whose high part times `n` is exact, so `|r| ≤ ½ln 2`
/// up to rounding; `e^r = 1 + r + r²·P(r)` with `P` Cephes' degree-5 minimax fit of
/// `(e^r − 1 − r)/r²`; and `2ⁿ` is built in the exponent bits. Error, measured over every
/// `f32` of `[−16, 16]` and 10⁷ random ones of the whole clamp range against `f64::exp`: at
/// most 1 ulp (`exp_lanes_is_within_an_ulp_everywhere`), where glibc's `expf` is within about
/// half an ulp.
#[inline(always)]
pub fn exp_lanes_f32(x: f32) -> f32 {
    // Comparisons, not `max`/`min`: a NaN compares false and stays.
    let x = if x < EXP_LO { EXP_LO } else { x };
    let x = if x > EXP_HI { EXP_HI } else { x };
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = EXP_P[0];
    for c in &EXP_P[1..] {
        p = p * r + *c;
    }
    let e_r = p * (r * r) + r + 1.0;
    // The low bits of `shifted` hold n (−126 ≤ n ≤ 127 after the clamp); 2ⁿ's biased
    // exponent is n + 127, in 1..=254: a normal float.
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let two_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    e_r * two_n
}

/// [`exp_lanes_f32`] of each lane of an SSE vector: the same operations in the same order, so
/// every lane has the bits the scalar form gives (`exp_lanes_vector_equals_scalar`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn exp_lanes_m128(v: std::arch::x86_64::__m128) -> std::arch::x86_64::__m128 {
    use std::arch::x86_64::*;
    // SAFETY: SSE and SSE2 belong to the x86-64 baseline: every CPU this build runs on has
    // them, and these intrinsics read only their register operands.
    unsafe {
        let select = |m, a, b| _mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b));
        let lo = _mm_set1_ps(EXP_LO);
        let v = select(_mm_cmplt_ps(v, lo), lo, v);
        let hi = _mm_set1_ps(EXP_HI);
        let v = select(_mm_cmpgt_ps(v, hi), hi, v);
        let round = _mm_set1_ps(ROUND);
        let shifted = _mm_add_ps(_mm_mul_ps(v, _mm_set1_ps(std::f32::consts::LOG2_E)), round);
        let n = _mm_sub_ps(shifted, round);
        let r = _mm_sub_ps(
            _mm_sub_ps(v, _mm_mul_ps(n, _mm_set1_ps(LN2_HI))),
            _mm_mul_ps(n, _mm_set1_ps(LN2_LO)),
        );
        let mut p = _mm_set1_ps(EXP_P[0]);
        for c in &EXP_P[1..] {
            p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(*c));
        }
        let e_r = _mm_add_ps(
            _mm_add_ps(_mm_mul_ps(p, _mm_mul_ps(r, r)), r),
            _mm_set1_ps(1.0),
        );
        let n_bits = _mm_sub_epi32(
            _mm_castps_si128(shifted),
            _mm_set1_epi32(ROUND.to_bits() as i32),
        );
        let two_n = _mm_castsi128_ps(_mm_slli_epi32::<23>(_mm_add_epi32(
            n_bits,
            _mm_set1_epi32(127),
        )));
        _mm_mul_ps(e_r, two_n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector form gives every lane the scalar form's bits: over every 61st `f32` of the
    /// whole line, NaNs and infinities included.
    #[test]
    fn exp_lanes_vector_equals_scalar() {
        let values: Vec<f32> = (0..=u32::MAX)
            .step_by(61)
            .map(f32::from_bits)
            .chain([
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                0.0,
                -0.0,
                EXP_LO,
                EXP_HI,
            ])
            .collect();
        for x in values.chunks_exact(4) {
            let x: [f32; 4] = x.try_into().unwrap();
            let got = <f32 as Real>::Lanes::load(&x)
                .exp()
                .to_array()
                .map(f32::to_bits);
            let want = x.map(|v| exp_lanes_f32(v).to_bits());
            assert_eq!(got, want, "{x:?}");
        }
    }

    /// Distance in ulps between `got` and `want` rounded to the nearest `f32`.
    fn ulps(got: f32, want: f64) -> u32 {
        let w = want as f32;
        // Both positive here: bit patterns of positive floats are ordered like the values.
        got.to_bits().abs_diff(w.to_bits())
    }

    /// `exp_lanes_f32` is within one ulp of `e^x` (f64, rounded to f32) over every 61st `f32`
    /// of `[−16, 16]` (the rasterizers use `[−5.6, 0]`; every one of them with `--ignored`,
    /// which took 27 s in release) and a million random ones of the whole clamp range; NaN
    /// stays NaN; the clamp's ends are finite and normal.
    #[test]
    fn exp_lanes_is_within_an_ulp() {
        exp_lanes_error(61, 1_000_000);
    }

    #[test]
    #[ignore = "every f32 of [−16, 16]: 27 s in release"]
    fn exp_lanes_is_within_an_ulp_everywhere() {
        exp_lanes_error(1, 10_000_000);
    }

    fn exp_lanes_error(stride: usize, random: usize) {
        let mut worst = (0u32, 0.0f32);
        let mut check = |x: f32| {
            let u = ulps(exp_lanes_f32(x), (x as f64).exp());
            if u > worst.0 {
                worst = (u, x);
            }
        };
        // Every f32 of [−16, 16]: the positive half and its negation.
        let top = 16.0f32.to_bits();
        for bits in (0..=top).step_by(stride) {
            let x = f32::from_bits(bits);
            check(x);
            check(-x);
        }
        let mut rng = crate::rng::Rng::new(3);
        for _ in 0..random {
            check(-87.3 + 175.6 * rng.next_f32());
        }
        println!(
            "MEASURED exp_lanes_f32: at most {} ulp (x = {})",
            worst.0, worst.1
        );
        assert!(worst.0 <= 1, "{} ulp at x = {}", worst.0, worst.1);
        assert!(exp_lanes_f32(f32::NAN).is_nan());
        for x in [f32::NEG_INFINITY, -1e30, -87.3] {
            let v = exp_lanes_f32(x);
            assert!(v.is_normal() && v < 1e-37, "{x}: {v}");
        }
        for x in [f32::INFINITY, 1e30, 88.3] {
            let v = exp_lanes_f32(x);
            assert!(v.is_normal() && v > 1e38, "{x}: {v}");
        }
        assert_eq!(exp_lanes_f32(0.0), 1.0);
    }
}
