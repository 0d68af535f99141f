//! Gaussians as a structure of arrays of *stored* (pre-activation) parameters, and the one
//! list of those arrays ([`Field`]) that every piece of bookkeeping iterates.
//!
//! Stored values are what the optimizer updates and what a 3DGS PLY holds: log-scales (activate
//! with `exp`), logit opacities (activate with the sigmoid) and unnormalised wxyz quaternions
//! (normalise before use). Keeping activation out of storage is what makes it impossible to
//! save "already activated" values by accident (the failure that once turned a resumed run's
//! scales into a 52 GB allocation).
//!
//! # The field table
//! [`Field`] lists the per-Gaussian arrays once, with their names, widths and optimizer
//! groups; [`Gaussians::column`] maps a field to its array. Whatever handles "every array of a
//! Gaussian" loops over [`Field::ALL`] instead of naming arrays: compaction and row gathers
//! ([`Gaussians::retain`], [`Gaussians::append`], [`Gaussians::gather`]) used by densification
//! on parameters and both Adam moments, the Adam update, gradient buffers
//! ([`Gaussians`]`<F>` is also the layout of the rasterizer's parameter gradients), shape
//! checks, checkpoint arrays and device upload/download. A new per-Gaussian attribute is
//! therefore declared here (a struct field, a [`Field`] variant and its arms) and those
//! follow; only the code that gives it values (importers, renderers) names it.
//!
//! Invariant: for every field `f`, `column(f)` holds `len() · f.width(sh_degree)` values.
//! `F` is `f32` for models; gradients use `f64` too (finite-difference checks).

use crate::scene::real::Real;

/// Number of SH coefficients per colour channel for a degree (1, 4, 9, 16).
pub const fn sh_coeffs(degree: u32) -> usize {
    ((degree + 1) * (degree + 1)) as usize
}

/// Highest supported SH degree.
pub const MAX_SH_DEGREE: u32 = 3;

/// The optimizer's parameter groups, in 3DGS's order: each has its own learning rate and Adam
/// step count. A [`Field`] names the group of each of its rows ([`Field::group`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Group {
    Means,
    FeaturesDc,
    FeaturesRest,
    Opacity,
    Scaling,
    Rotation,
}

impl Group {
    pub const ALL: [Group; 6] = [
        Group::Means,
        Group::FeaturesDc,
        Group::FeaturesRest,
        Group::Opacity,
        Group::Scaling,
        Group::Rotation,
    ];

    pub fn index(self) -> usize {
        self as usize
    }
}

/// One per-Gaussian array of [`Gaussians`] (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    Means,
    LogScales,
    Rotations,
    LogitOpacities,
    Sh,
}

impl Field {
    /// Number of fields.
    pub const COUNT: usize = Field::ALL.len();

    /// Every field, in storage (and checkpoint) order.
    pub const ALL: [Field; 5] = [
        Field::Means,
        Field::LogScales,
        Field::Rotations,
        Field::LogitOpacities,
        Field::Sh,
    ];

    /// Position in [`Field::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The array's name: checkpoint array names and error messages use it.
    pub const fn name(self) -> &'static str {
        match self {
            Field::Means => "means",
            Field::LogScales => "log_scales",
            Field::Rotations => "rotations",
            Field::LogitOpacities => "logit_opacities",
            Field::Sh => "sh",
        }
    }

    /// Values per row (the inner dimension of the array's shape; 1 = a flat array).
    pub const fn row_width(self) -> usize {
        match self {
            Field::Means | Field::LogScales | Field::Sh => 3,
            Field::Rotations => 4,
            Field::LogitOpacities => 1,
        }
    }

    /// Rows per Gaussian at a stored SH degree.
    pub const fn rows_per_gaussian(self, sh_degree: u32) -> usize {
        match self {
            Field::Sh => sh_coeffs(sh_degree),
            _ => 1,
        }
    }

    /// Values per Gaussian at a stored SH degree.
    pub const fn width(self, sh_degree: u32) -> usize {
        self.row_width() * self.rows_per_gaussian(sh_degree)
    }

    /// The optimizer group of a Gaussian's row `row` of this field (SH coefficient 0 is the
    /// DC term, `f_dc`; the others are `f_rest`).
    pub const fn group(self, row: usize) -> Group {
        match self {
            Field::Means => Group::Means,
            Field::LogScales => Group::Scaling,
            Field::Rotations => Group::Rotation,
            Field::LogitOpacities => Group::Opacity,
            Field::Sh if row == 0 => Group::FeaturesDc,
            Field::Sh => Group::FeaturesRest,
        }
    }

    /// The array's shape for `n` Gaussians: `[rows]` for flat arrays, else `[rows, width]`.
    pub fn shape(self, n: usize, sh_degree: u32) -> Vec<u64> {
        let rows = (n * self.rows_per_gaussian(sh_degree)) as u64;
        match self.row_width() {
            1 => vec![rows],
            w => vec![rows, w as u64],
        }
    }
}

/// Values per Gaussian over every field: P = 11 + 3·(degree + 1)² (59 at degree 3).
pub fn floats_per_gaussian(sh_degree: u32) -> usize {
    Field::ALL.iter().map(|f| f.width(sh_degree)).sum()
}

/// A per-Gaussian array seen as a flat run of values, whatever its row type, so that the
/// field table's users need no per-type code.
pub trait Column<F> {
    fn flat(&self) -> &[F];
    fn flat_mut(&mut self) -> &mut [F];
    /// Resizes to `len` values (a multiple of the row width), filling with `value`.
    fn resize_flat(&mut self, len: usize, value: F);
    /// Appends `values` (a multiple of the row width), growing capacity exactly: a model's
    /// bytes are budgeted, so no doubling.
    fn extend_flat(&mut self, values: &[F]);
}

impl<F: Copy> Column<F> for Vec<F> {
    fn flat(&self) -> &[F] {
        self
    }
    fn flat_mut(&mut self) -> &mut [F] {
        self
    }
    fn resize_flat(&mut self, len: usize, value: F) {
        self.resize(len, value);
    }
    fn extend_flat(&mut self, values: &[F]) {
        self.reserve_exact(values.len());
        self.extend_from_slice(values);
    }
}

impl<F: Copy, const K: usize> Column<F> for Vec<[F; K]> {
    fn flat(&self) -> &[F] {
        self.as_flattened()
    }
    fn flat_mut(&mut self) -> &mut [F] {
        self.as_flattened_mut()
    }
    fn resize_flat(&mut self, len: usize, value: F) {
        assert_eq!(
            len % K,
            0,
            "length {len} is not a whole number of rows of {K}"
        );
        self.resize(len / K, [value; K]);
    }
    fn extend_flat(&mut self, values: &[F]) {
        assert_eq!(values.len() % K, 0, "values are not whole rows of {K}");
        self.reserve_exact(values.len() / K);
        self.extend(
            values
                .chunks_exact(K)
                .map(|c| std::array::from_fn(|k| c[k])),
        );
    }
}

/// Stored parameters of a set of Gaussians (see the module doc); also the layout of their
/// gradients and of Adam's moments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gaussians<F = f32> {
    pub means: Vec<[F; 3]>,
    /// Natural log of the per-axis standard deviations.
    pub log_scales: Vec<[F; 3]>,
    /// (w, x, y, z), not necessarily normalised.
    pub rotations: Vec<[F; 4]>,
    /// Logit of the opacity.
    pub logit_opacities: Vec<F>,
    /// Degree of the stored SH coefficients (0..=3).
    pub sh_degree: u32,
    /// `len() · sh_coeffs(sh_degree)` RGB triples; Gaussian `i`'s coefficient `k` is at
    /// `i · sh_coeffs(sh_degree) + k`. Coefficient 0 is the DC term.
    pub sh: Vec<[F; 3]>,
}

/// A field whose array length disagrees with the Gaussian count (a bug; reported, not a
/// panic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeMismatch {
    pub field: Field,
    pub got: usize,
    pub expected: usize,
}

/// Log-scale above which a splat may be skipped in single precision: σ = e^30 ≈ 1.1e13 scene
/// units; seen through a focal length of 1000 px from 0.01 units (the near plane) its `Σ2d`
/// reaches 1e42 px², past `f32::MAX`. Trained models stay far below (3DGS scales are a few
/// scene units at most).
pub const LOG_SCALE_F32_LIMIT: f32 = 30.0;

impl<F: Real> Gaussians<F> {
    /// No Gaussians, SH degree `sh_degree`.
    pub fn empty(sh_degree: u32) -> Self {
        Gaussians {
            means: Vec::new(),
            log_scales: Vec::new(),
            rotations: Vec::new(),
            logit_opacities: Vec::new(),
            sh_degree,
            sh: Vec::new(),
        }
    }

    /// `n` Gaussians with every value zero (moments, gradients, a buffer to fill).
    pub fn zeros(n: usize, sh_degree: u32) -> Self {
        let mut g = Self::empty(sh_degree);
        g.resize_zeroed(n, sh_degree);
        g
    }

    /// Zeros shaped like `other`.
    pub fn zeros_like<G: Real>(other: &Gaussians<G>) -> Self {
        Self::zeros(other.len(), other.sh_degree)
    }

    /// Makes this `n` Gaussians of degree `sh_degree` with every value zero, reusing capacity.
    pub fn resize_zeroed(&mut self, n: usize, sh_degree: u32) {
        self.sh_degree = sh_degree;
        for f in Field::ALL {
            let c = self.column_mut(f);
            c.resize_flat(0, F::ZERO);
            c.resize_flat(n * f.width(sh_degree), F::ZERO);
        }
    }

    /// The array of `field`.
    pub fn column(&self, field: Field) -> &dyn Column<F> {
        match field {
            Field::Means => &self.means,
            Field::LogScales => &self.log_scales,
            Field::Rotations => &self.rotations,
            Field::LogitOpacities => &self.logit_opacities,
            Field::Sh => &self.sh,
        }
    }

    /// The array of `field`, mutably.
    pub fn column_mut(&mut self, field: Field) -> &mut dyn Column<F> {
        match field {
            Field::Means => &mut self.means,
            Field::LogScales => &mut self.log_scales,
            Field::Rotations => &mut self.rotations,
            Field::LogitOpacities => &mut self.logit_opacities,
            Field::Sh => &mut self.sh,
        }
    }

    /// The values of `field`, flat (`len() · field.width(sh_degree)`).
    pub fn field(&self, field: Field) -> &[F] {
        self.column(field).flat()
    }

    /// The values of `field`, flat and mutable.
    pub fn field_mut(&mut self, field: Field) -> &mut [F] {
        self.column_mut(field).flat_mut()
    }

    pub fn len(&self) -> usize {
        self.means.len()
    }

    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }

    /// The first field whose length is not `n` Gaussians' worth at this SH degree.
    pub fn shape_mismatch(&self, n: usize) -> Option<ShapeMismatch> {
        Field::ALL.into_iter().find_map(|field| {
            let (got, expected) = (self.field(field).len(), n * field.width(self.sh_degree));
            (got != expected).then_some(ShapeMismatch {
                field,
                got,
                expected,
            })
        })
    }

    /// Keeps the Gaussians where `keep[i]`, in order, compacting every field in place.
    pub fn retain(&mut self, keep: &[bool]) {
        let deg = self.sh_degree;
        for f in Field::ALL {
            let stride = f.width(deg);
            let c = self.column_mut(f);
            let v = c.flat_mut();
            let mut w = 0;
            for (i, &k) in keep.iter().enumerate() {
                if k {
                    if w != i {
                        v.copy_within(i * stride..(i + 1) * stride, w * stride);
                    }
                    w += 1;
                }
            }
            c.resize_flat(w * stride, F::ZERO);
        }
    }

    /// Appends `new` (same SH degree), growing every field's capacity exactly.
    pub fn append(&mut self, new: &Gaussians<F>) {
        assert_eq!(new.sh_degree, self.sh_degree, "append SH degree");
        for f in Field::ALL {
            self.column_mut(f).extend_flat(new.field(f));
        }
    }

    /// Changes the stored SH degree: higher coefficients are dropped, missing ones are zero.
    pub fn set_sh_degree(&mut self, sh_degree: u32) {
        let (k_in, k_out) = (sh_coeffs(self.sh_degree), sh_coeffs(sh_degree));
        if k_in != k_out {
            let mut sh = Vec::with_capacity(self.len() * k_out);
            for coeffs in self.sh.chunks_exact(k_in) {
                sh.extend((0..k_out).map(|k| coeffs.get(k).copied().unwrap_or([F::ZERO; 3])));
            }
            self.sh = sh;
        }
        self.sh_degree = sh_degree;
    }

    /// [`Gaussians::gather`] in place, one field at a time: each field's new array replaces
    /// the old as soon as it is built, so the edit holds one field twice at most (the SH
    /// coefficients', [`sh_coeffs`] × 3 values per Gaussian), not a second model beside the
    /// first. The result is the same.
    pub fn gather_in_place(&mut self, src: &[u32], zero: Option<&[bool]>) {
        // Destructured, so a new field cannot be left out; each old array goes at its
        // assignment, before the next field's new one is allocated.
        let Gaussians {
            means,
            log_scales,
            rotations,
            logit_opacities,
            sh_degree,
            sh,
        } = self;
        let z = F::ZERO;
        *means = gather_rows(means, 1, src, zero, [z; 3]);
        *log_scales = gather_rows(log_scales, 1, src, zero, [z; 3]);
        *rotations = gather_rows(rotations, 1, src, zero, [z; 4]);
        *logit_opacities = gather_rows(logit_opacities, 1, src, zero, z);
        *sh = gather_rows(sh, sh_coeffs(*sh_degree), src, zero, [z; 3]);
    }

    /// Row `r` of the result is Gaussian `src[r]`, or zeros where `zero` says so (fresh
    /// Adam moments of relocated or new Gaussians).
    pub fn gather(&self, src: &[u32], zero: Option<&[bool]>) -> Gaussians<F> {
        let z = F::ZERO;
        Gaussians {
            means: gather_rows(&self.means, 1, src, zero, [z; 3]),
            log_scales: gather_rows(&self.log_scales, 1, src, zero, [z; 3]),
            rotations: gather_rows(&self.rotations, 1, src, zero, [z; 4]),
            logit_opacities: gather_rows(&self.logit_opacities, 1, src, zero, z),
            sh_degree: self.sh_degree,
            sh: gather_rows(&self.sh, sh_coeffs(self.sh_degree), src, zero, [z; 3]),
        }
    }
}

/// Rows `src` of `v` (rows of `w` values), or `z` for the rows `zero` marks.
fn gather_rows<T: Copy>(v: &[T], w: usize, src: &[u32], zero: Option<&[bool]>, z: T) -> Vec<T> {
    let mut out = Vec::with_capacity(src.len() * w);
    for (r, &i) in src.iter().enumerate() {
        if zero.is_some_and(|m| m[r]) {
            out.extend(std::iter::repeat_n(z, w));
        } else {
            let i = i as usize;
            out.extend_from_slice(&v[i * w..(i + 1) * w]);
        }
    }
    out
}

impl Gaussians<f32> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three Gaussians at degree 1 whose values encode (field, Gaussian, position).
    fn numbered() -> Gaussians {
        let mut g = Gaussians::zeros(3, 1);
        for (fi, f) in Field::ALL.into_iter().enumerate() {
            let w = f.width(1);
            for (j, v) in g.field_mut(f).iter_mut().enumerate() {
                *v = (100 * fi + 10 * (j / w) + j % w) as f32;
            }
        }
        g
    }

    #[test]
    fn widths_cover_the_stored_parameters() {
        assert_eq!(floats_per_gaussian(0), 14);
        assert_eq!(floats_per_gaussian(3), 59);
        let g = Gaussians::<f32>::zeros(5, 2);
        assert_eq!(g.sh.len(), 5 * 9);
        assert_eq!(g.shape_mismatch(5), None);
        assert_eq!(Field::Sh.shape(5, 2), vec![45, 3]);
        assert_eq!(Field::LogitOpacities.shape(5, 2), vec![5]);
    }

    #[test]
    fn retain_append_and_gather_move_whole_gaussians() {
        let g = numbered();
        let mut kept = g.clone();
        kept.retain(&[true, false, true]);
        assert_eq!(kept, g.gather(&[0, 2], None));
        assert_eq!(kept.sh[4], g.sh[2 * 4], "SH rows move with their Gaussian");
        let mut both = kept.clone();
        both.append(&g.gather(&[1], None));
        assert_eq!(both, g.gather(&[0, 2, 1], None));
        let fresh = g.gather(&[2, 2], Some(&[false, true]));
        assert_eq!(fresh.logit_opacities, vec![g.logit_opacities[2], 0.0]);
        assert!(fresh.sh[4..].iter().all(|c| *c == [0.0; 3]));
        assert_eq!(fresh.shape_mismatch(2), None);
    }

    #[test]
    fn a_short_field_is_named() {
        let mut g = numbered();
        g.rotations.pop();
        assert_eq!(
            g.shape_mismatch(3),
            Some(ShapeMismatch {
                field: Field::Rotations,
                got: 8,
                expected: 12
            })
        );
    }

    #[test]
    fn groups_split_sh_into_dc_and_rest() {
        assert_eq!(Field::Sh.group(0), Group::FeaturesDc);
        assert_eq!(Field::Sh.group(3), Group::FeaturesRest);
        assert_eq!(Field::LogScales.group(0), Group::Scaling);
    }
}
