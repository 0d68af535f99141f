//! Four floats as one value: the rasterizers' per-pixel lanes ([`Real::Lanes`]).
//!
//! The CPU rasterizer walks a splat's rows four pixels at a time, each pixel a lane taking the
//! per-pixel rule's steps (`render::cpu::rasterize`). The compiler does not vectorize those
//! steps by itself (masks, selects and `min` across a group defeat it), so they are written
//! against [`Lanes`]: on x86-64 in `f32` one SSE vector ([`F32x4`], SSE2 being part of the
//! target's baseline), elsewhere and in `f64` four scalars ([`Array4`]).
//!
//! Invariant: every operation gives each lane the bits the same scalar operation gives it
//! (IEEE add, subtract, multiply, divide and negate round alike in both forms; [`Lanes::min`]
//! is `F::min` where its second operand is neither a NaN nor a zero; [`Lanes::exp`] is
//! [`Real::exp_lanes`]),
//! so code written on lanes computes what the scalar per-pixel loop computes, bit for bit
//! (`vector_lanes_equal_scalar_lanes` checks the two forms against each other).

use std::ops::{Add, BitAnd, BitOr, Div, Mul, Neg, Not, Sub};

use super::real::Real;

/// How many values a [`Lanes`] holds.
pub const LANES: usize = 4;

/// Four values of `F` as one; see the module doc for what each operation must give.
pub trait Lanes<F: Real>:
    Copy
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// A lane-wise condition, as the comparisons give it.
    type Mask: Mask;
    /// Every lane `v`.
    fn splat(v: F) -> Self;
    /// The first [`LANES`] values of `from` (panics when it is shorter).
    fn load(from: &[F]) -> Self;
    /// Into the first [`LANES`] values of `to` (panics when it is shorter).
    fn store(self, to: &mut [F]);
    fn to_array(self) -> [F; LANES];
    /// `F::min` of each lane and `other`'s, for an `other` that holds no NaN and no zero (then
    /// a NaN lane gives `other`'s lane, as `F::min` does; the sign of a zero would be
    /// unspecified).
    fn min(self, other: Self) -> Self;
    /// `|x|` of each lane.
    fn abs(self) -> Self;
    /// [`Real::exp_lanes`] of each lane.
    fn exp(self) -> Self;
    /// `self < other`, lane by lane (false where either is a NaN).
    fn lt(self, other: Self) -> Self::Mask;
    /// `self > other`, lane by lane (false where either is a NaN).
    fn gt(self, other: Self) -> Self::Mask;
    /// `yes`'s lane where `mask` holds, else `no`'s.
    fn select(mask: Self::Mask, yes: Self, no: Self) -> Self;
}

/// A condition per lane.
pub trait Mask: Copy + BitAnd<Output = Self> + BitOr<Output = Self> + Not<Output = Self> {
    /// Lane `l` holds where bit `l` of `bits` is set.
    fn from_bits(bits: u32) -> Self;
    /// Bit `l` set where lane `l` holds.
    fn bits(self) -> u32;
    /// Lane `l` holds where `values[l] > k` (the first [`LANES`] entries; values and `k` below
    /// 2³¹).
    fn above(values: &[u32], k: u32) -> Self;
    /// Sets `to[l] = value` where lane `l` holds (the first [`LANES`] entries of `to`).
    fn write_u32(self, value: u32, to: &mut [u32]) {
        let bits = self.bits();
        for (l, slot) in to[..LANES].iter_mut().enumerate() {
            if bits >> l & 1 != 0 {
                *slot = value;
            }
        }
    }
}

/// [`Lanes`] as four scalars: `f64` everywhere, `f32` off x86-64.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Array4<F>(pub [F; LANES]);

/// [`Mask`] of [`Array4`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bools4(pub [bool; LANES]);

impl<F: Real> Array4<F> {
    #[inline(always)]
    fn zip(self, o: Self, f: impl Fn(F, F) -> F) -> Self {
        Array4(std::array::from_fn(|l| f(self.0[l], o.0[l])))
    }

    #[inline(always)]
    fn test(self, o: Self, f: impl Fn(F, F) -> bool) -> Bools4 {
        Bools4(std::array::from_fn(|l| f(self.0[l], o.0[l])))
    }
}

macro_rules! array_op {
    ($trait:ident, $method:ident, $op:tt) => {
        impl<F: Real> $trait for Array4<F> {
            type Output = Self;
            #[inline(always)]
            fn $method(self, o: Self) -> Self {
                self.zip(o, |a, b| a $op b)
            }
        }
    };
}
array_op!(Add, add, +);
array_op!(Sub, sub, -);
array_op!(Mul, mul, *);
array_op!(Div, div, /);

impl<F: Real> Neg for Array4<F> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Array4(self.0.map(|v| -v))
    }
}

impl<F: Real> Lanes<F> for Array4<F> {
    type Mask = Bools4;
    #[inline(always)]
    fn splat(v: F) -> Self {
        Array4([v; LANES])
    }
    #[inline(always)]
    fn load(from: &[F]) -> Self {
        Array4(from[..LANES].try_into().expect("four lanes"))
    }
    #[inline(always)]
    fn store(self, to: &mut [F]) {
        to[..LANES].copy_from_slice(&self.0);
    }
    #[inline(always)]
    fn to_array(self) -> [F; LANES] {
        self.0
    }
    #[inline(always)]
    fn min(self, other: Self) -> Self {
        self.zip(other, F::min)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        Array4(self.0.map(F::abs))
    }
    #[inline(always)]
    fn exp(self) -> Self {
        Array4(self.0.map(F::exp_lanes))
    }
    #[inline(always)]
    fn lt(self, other: Self) -> Bools4 {
        self.test(other, |a, b| a < b)
    }
    #[inline(always)]
    fn gt(self, other: Self) -> Bools4 {
        self.test(other, |a, b| a > b)
    }
    #[inline(always)]
    fn select(mask: Bools4, yes: Self, no: Self) -> Self {
        Array4(std::array::from_fn(|l| {
            if mask.0[l] {
                yes.0[l]
            } else {
                no.0[l]
            }
        }))
    }
}

impl BitAnd for Bools4 {
    type Output = Self;
    #[inline(always)]
    fn bitand(self, o: Self) -> Self {
        Bools4(std::array::from_fn(|l| self.0[l] & o.0[l]))
    }
}

impl BitOr for Bools4 {
    type Output = Self;
    #[inline(always)]
    fn bitor(self, o: Self) -> Self {
        Bools4(std::array::from_fn(|l| self.0[l] | o.0[l]))
    }
}

impl Not for Bools4 {
    type Output = Self;
    #[inline(always)]
    fn not(self) -> Self {
        Bools4(self.0.map(|b| !b))
    }
}

impl Mask for Bools4 {
    #[inline(always)]
    fn from_bits(bits: u32) -> Self {
        Bools4(std::array::from_fn(|l| bits >> l & 1 != 0))
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        (0..LANES).fold(0, |m, l| m | u32::from(self.0[l]) << l)
    }
    #[inline(always)]
    fn above(values: &[u32], k: u32) -> Self {
        let values = &values[..LANES];
        Bools4(std::array::from_fn(|l| values[l] > k))
    }
}

#[cfg(target_arch = "x86_64")]
pub use sse::{F32x4, M32x4};

/// The `f32` lanes on x86-64: SSE2 intrinsics, which every x86-64 CPU has (the target's
/// baseline features include them, so these calls need no run-time check).
#[cfg(target_arch = "x86_64")]
mod sse {
    use std::arch::x86_64::*;
    use std::ops::{Add, BitAnd, BitOr, Div, Mul, Neg, Not, Sub};

    use super::{Lanes, Mask, LANES};
    use crate::scene::real::exp_lanes_m128;

    /// Four `f32` in one SSE register.
    #[derive(Clone, Copy, Debug)]
    pub struct F32x4(__m128);

    /// [`Mask`] of [`F32x4`]: each lane all ones or all zeros, as SSE's comparisons give.
    #[derive(Clone, Copy, Debug)]
    pub struct M32x4(__m128);

    macro_rules! sse_op {
        ($trait:ident, $method:ident, $intrinsic:ident) => {
            impl $trait for F32x4 {
                type Output = Self;
                #[inline(always)]
                fn $method(self, o: Self) -> Self {
                    // SAFETY: SSE is in the x86-64 baseline (module doc); the intrinsic reads
                    // only its register operands.
                    F32x4(unsafe { $intrinsic(self.0, o.0) })
                }
            }
        };
    }
    sse_op!(Add, add, _mm_add_ps);
    sse_op!(Sub, sub, _mm_sub_ps);
    sse_op!(Mul, mul, _mm_mul_ps);
    sse_op!(Div, div, _mm_div_ps);

    impl Neg for F32x4 {
        type Output = Self;
        #[inline(always)]
        fn neg(self) -> Self {
            // SAFETY: as for `sse_op`. Flipping the sign bit is what scalar negation does,
            // NaNs and zeros included.
            F32x4(unsafe { _mm_xor_ps(self.0, _mm_set1_ps(-0.0)) })
        }
    }

    impl Lanes<f32> for F32x4 {
        type Mask = M32x4;
        #[inline(always)]
        fn splat(v: f32) -> Self {
            // SAFETY: as for `sse_op`.
            F32x4(unsafe { _mm_set1_ps(v) })
        }
        #[inline(always)]
        fn load(from: &[f32]) -> Self {
            let from = &from[..LANES];
            // SAFETY: `from` holds four readable f32s (the slice above panics otherwise), and
            // `loadu` has no alignment requirement.
            F32x4(unsafe { _mm_loadu_ps(from.as_ptr()) })
        }
        #[inline(always)]
        fn store(self, to: &mut [f32]) {
            let to = &mut to[..LANES];
            // SAFETY: `to` holds four writable f32s, and `storeu` has no alignment requirement.
            unsafe { _mm_storeu_ps(to.as_mut_ptr(), self.0) }
        }
        #[inline(always)]
        fn to_array(self) -> [f32; LANES] {
            let mut out = [0.0; LANES];
            self.store(&mut out);
            out
        }
        #[inline(always)]
        fn min(self, other: Self) -> Self {
            // SAFETY: as for `sse_op`. `minps` gives its second operand where either is a NaN
            // (or both are zeros): `other`'s lane, which is `f32::min`'s answer when only
            // `self`'s is a NaN.
            F32x4(unsafe { _mm_min_ps(self.0, other.0) })
        }
        #[inline(always)]
        fn abs(self) -> Self {
            // SAFETY: as for `sse_op`. Clearing the sign bit is `f32::abs`.
            F32x4(unsafe { _mm_andnot_ps(_mm_set1_ps(-0.0), self.0) })
        }
        #[inline(always)]
        fn exp(self) -> Self {
            F32x4(exp_lanes_m128(self.0))
        }
        #[inline(always)]
        fn lt(self, other: Self) -> M32x4 {
            // SAFETY: as for `sse_op`; an ordered comparison, false for NaNs.
            M32x4(unsafe { _mm_cmplt_ps(self.0, other.0) })
        }
        #[inline(always)]
        fn gt(self, other: Self) -> M32x4 {
            // SAFETY: as for `sse_op`; an ordered comparison, false for NaNs.
            M32x4(unsafe { _mm_cmpgt_ps(self.0, other.0) })
        }
        #[inline(always)]
        fn select(mask: M32x4, yes: Self, no: Self) -> Self {
            // SAFETY: as for `sse_op`. Each mask lane is all ones or all zeros.
            F32x4(unsafe { _mm_or_ps(_mm_and_ps(mask.0, yes.0), _mm_andnot_ps(mask.0, no.0)) })
        }
    }

    impl BitAnd for M32x4 {
        type Output = Self;
        #[inline(always)]
        fn bitand(self, o: Self) -> Self {
            // SAFETY: as for `sse_op`.
            M32x4(unsafe { _mm_and_ps(self.0, o.0) })
        }
    }

    impl BitOr for M32x4 {
        type Output = Self;
        #[inline(always)]
        fn bitor(self, o: Self) -> Self {
            // SAFETY: as for `sse_op`.
            M32x4(unsafe { _mm_or_ps(self.0, o.0) })
        }
    }

    impl Not for M32x4 {
        type Output = Self;
        #[inline(always)]
        fn not(self) -> Self {
            // SAFETY: as for `sse_op`.
            M32x4(unsafe { _mm_xor_ps(self.0, _mm_castsi128_ps(_mm_set1_epi32(-1))) })
        }
    }

    impl Mask for M32x4 {
        #[inline(always)]
        fn from_bits(bits: u32) -> Self {
            // SAFETY: as for `sse_op`. Lane `l` compares bit `l` alone with itself.
            M32x4(unsafe {
                let lane_bits = _mm_setr_epi32(1, 2, 4, 8);
                let picked = _mm_and_si128(_mm_set1_epi32(bits as i32), lane_bits);
                _mm_castsi128_ps(_mm_cmpeq_epi32(picked, lane_bits))
            })
        }
        #[inline(always)]
        fn bits(self) -> u32 {
            // SAFETY: as for `sse_op`.
            unsafe { _mm_movemask_ps(self.0) as u32 }
        }
        #[inline(always)]
        fn above(values: &[u32], k: u32) -> Self {
            let values = &values[..LANES];
            // SAFETY: as for `sse_op`; `values` holds four readable u32s (the slice above
            // panics otherwise), and `loadu` has no alignment requirement. Below 2³¹ the
            // signed comparison orders them as unsigned ones.
            M32x4(unsafe {
                let v = _mm_loadu_si128(values.as_ptr() as *const __m128i);
                _mm_castsi128_ps(_mm_cmpgt_epi32(v, _mm_set1_epi32(k as i32)))
            })
        }
        #[inline(always)]
        fn write_u32(self, value: u32, to: &mut [u32]) {
            let to = &mut to[..LANES];
            // SAFETY: as for `sse_op`; `to` holds four readable and writable u32s (the slice
            // above panics otherwise), and `loadu`/`storeu` have no alignment requirement.
            unsafe {
                let at = to.as_mut_ptr() as *mut __m128i;
                let mask = _mm_castps_si128(self.0);
                let old = _mm_loadu_si128(at);
                let new = _mm_or_si128(
                    _mm_and_si128(mask, _mm_set1_epi32(value as i32)),
                    _mm_andnot_si128(mask, old),
                );
                _mm_storeu_si128(at, new);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Every operation of the f32 lanes gives the bits of the scalar lanes, on values that
    /// include NaNs, infinities, signed zeros and subnormals, for every mask.
    #[test]
    fn vector_lanes_equal_scalar_lanes() {
        type V = <f32 as Real>::Lanes;
        type A = Array4<f32>;
        fn same(v: V, a: A, what: &str) {
            assert_eq!(
                v.to_array().map(f32::to_bits),
                a.0.map(f32::to_bits),
                "{what}: {:?} against {:?}",
                v.to_array(),
                a.0
            );
        }
        let special = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1e-40,
            -1e-40,
            f32::MAX,
            0.999,
            1.0 / 255.0,
        ];
        let mut rng = Rng::new(3);
        let mut draw = || {
            if rng.next_f32() < 0.3 {
                special[(rng.next_f32() * special.len() as f32) as usize % special.len()]
            } else {
                (rng.next_f32() - 0.5) * 10f32.powf(8.0 * rng.next_f32() - 4.0)
            }
        };
        for _ in 0..20_000 {
            let x: [f32; LANES] = std::array::from_fn(|_| draw());
            let y: [f32; LANES] = std::array::from_fn(|_| draw());
            let (vx, vy, ax, ay) = (V::load(&x), V::load(&y), A::load(&x), A::load(&y));
            same(vx + vy, ax + ay, "add");
            same(vx - vy, ax - ay, "sub");
            same(vx * vy, ax * ay, "mul");
            same(vx / vy, ax / ay, "div");
            same(-vx, -ax, "neg");
            same(vx.abs(), ax.abs(), "abs");
            same(vx.exp(), ax.exp(), "exp");
            let no_nan = y.map(|v| if v.is_nan() || v == 0.0 { 0.5 } else { v });
            same(vx.min(V::load(&no_nan)), ax.min(A::load(&no_nan)), "min");
            assert_eq!(vx.lt(vy).bits(), ax.lt(ay).bits(), "lt {x:?} {y:?}");
            assert_eq!(vx.gt(vy).bits(), ax.gt(ay).bits(), "gt {x:?} {y:?}");
        }
        for bits in 0..16u32 {
            let (vm, am) = (
                <V as Lanes<f32>>::Mask::from_bits(bits),
                Bools4::from_bits(bits),
            );
            assert_eq!((vm.bits(), am.bits()), (bits, bits));
            assert_eq!((!vm).bits(), !bits & 15);
            let other = <V as Lanes<f32>>::Mask::from_bits(0b0110);
            assert_eq!((vm & other).bits(), bits & 0b0110);
            assert_eq!((vm | other).bits(), bits | 0b0110);
            let (x, y) = ([1.0f32, 2.0, 3.0, 4.0], [-1.0f32, -2.0, -3.0, -4.0]);
            same(
                V::select(vm, V::load(&x), V::load(&y)),
                A::select(am, A::load(&x), A::load(&y)),
                "select",
            );
            let values = [bits, 3, 16 - bits, 0x7fff_fff0 + bits];
            for k in [0, 2, 3, 8, 0x7fff_fff4] {
                assert_eq!(
                    <V as Lanes<f32>>::Mask::above(&values, k).bits(),
                    Bools4::above(&values, k).bits(),
                    "above {values:?} {k}"
                );
            }
            let (mut vu, mut au) = ([7u32, 8, 9, 10, 11], [7u32, 8, 9, 10, 11]);
            vm.write_u32(99, &mut vu);
            am.write_u32(99, &mut au);
            assert_eq!(vu, au, "write_u32 {bits:04b}");
            assert_eq!(vu[4], 11, "write_u32 wrote past its four lanes");
        }
    }
}
