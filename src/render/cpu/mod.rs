//! The CPU reference rasterizer: the oracle the CUDA backend is checked against, stage by
//! stage. Stages are plain functions named like the CUDA kernels:
//! [`project_fwd`] → [`tile_binning`] → [`rasterize_fwd`], and backward
//! [`rasterize_bwd`] → [`project_bwd`].
//!
//! All math is generic over [`Real`], so the same code runs in `f32` (training, the
//! [`Rasterizer`] impl) and in `f64` (finite-difference gradient checks, see `gradcheck`).
//! [`CpuRasterizer`] owns every intermediate buffer and reuses it across renders (resize in
//! place, capacity only grows). Results are deterministic for any thread count.

pub mod binning;
pub mod project;
pub mod rasterize;

#[cfg(test)]
mod gradcheck;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

pub use binning::{tile_binning, TileBins};
pub use project::{project_bwd, project_fwd, tile_rect};
pub use rasterize::{rasterize_bwd, rasterize_fwd, AbsMean2dGrad, InvDepthGrad};

use crate::render::{
    GaussianGrads, Rasterizer, RenderError, RenderOptions, RenderOutput, StageTimes,
};
use crate::scene::camera::{Camera, Projection};
use crate::scene::gaussians::{sh_coeffs, Gaussians, MAX_SH_DEGREE};
use crate::scene::real::Real;
use std::time::Instant;

/// How many entries ahead the passes that read splats in an order of their own (binning's
/// depth order, the rasterizer's tile lists) ask for them ([`prefetch`]).
const PREFETCH_AHEAD: usize = 8;

/// Asks the CPU to start loading the cache lines of `v` (a hint, nothing where there is no
/// such instruction). The passes that read splats in depth or tile-list order reach them at
/// random, and their loop bodies are long: each would otherwise wait out a miss before the
/// next one could start (binning's per-splat pass took 4× longer in depth order than in
/// index order).
#[inline(always)]
fn prefetch<T>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let first = v as *const T as *const i8;
        let last = first.wrapping_add(std::mem::size_of::<T>().saturating_sub(1));
        // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 CPU has (it is in the target's
        // baseline features), and it never faults or reads into the program: any address is
        // allowed, and these are inside one live value.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(first);
            _mm_prefetch::<_MM_HINT_T0>(last);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// One projected Gaussian (output of [`project_fwd`]). `radius == 0` means culled.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Splat<F> {
    /// Pixel coordinates, centres at +0.5.
    pub mean2d: [F; 2],
    /// Inverse of the dilated 2D covariance as (a, b, c): `[[a, b], [b, c]]`.
    pub conic: [F; 3],
    /// Activated opacity in (0, 1), times the antialiasing compensation in that mode
    /// ([`project::aa_compensation`]): what the rasterizer multiplies `exp(−σ)` by.
    pub opacity: F,
    /// `max(SH + 0.5, 0)`.
    pub color: [F; 3],
    /// Camera-space z.
    pub depth: F,
    pub radius: u32,
}

/// Gradient w.r.t. one splat's screen-space quantities (the `rasterize_bwd` → `project_bwd`
/// interface). `conic` is w.r.t. (a, b, c) of `σ = ½a·dx² + b·dx·dy + ½c·dy²` (`b` counted
/// once, not per matrix entry).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SplatGrad<F> {
    pub mean2d: [F; 2],
    pub conic: [F; 3],
    pub color: [F; 3],
    pub opacity: F,
}

impl<F: Real> SplatGrad<F> {
    #[inline]
    fn add(&mut self, o: &SplatGrad<F>) {
        for k in 0..2 {
            self.mean2d[k] += o.mean2d[k];
        }
        for k in 0..3 {
            self.conic[k] += o.conic[k];
            self.color[k] += o.color[k];
        }
        self.opacity += o.opacity;
    }
}

/// Borrowed stored (pre-activation) Gaussian parameters in precision `F`; same layout as
/// [`Gaussians`].
#[derive(Clone, Copy, Debug)]
pub struct GaussianParams<'a, F> {
    pub means: &'a [[F; 3]],
    pub log_scales: &'a [[F; 3]],
    pub rotations: &'a [[F; 4]],
    pub logit_opacities: &'a [F],
    pub sh_degree: u32,
    pub sh: &'a [[F; 3]],
    /// Mip-Splatting's 3D smoothing filter, one standard deviation per Gaussian (scene units,
    /// ≥ 0), when the model is rendered through it ([`crate::scene::filter3d`]): each scale
    /// becomes `√(s² + f²)` and the opacity is multiplied by `∏ s/√(s² + f²)`.
    pub filter_3d: Option<&'a [F]>,
}

impl<'a> GaussianParams<'a, f32> {
    pub fn from_gaussians(g: &'a Gaussians) -> Self {
        GaussianParams {
            means: &g.means,
            log_scales: &g.log_scales,
            rotations: &g.rotations,
            logit_opacities: &g.logit_opacities,
            sh_degree: g.sh_degree,
            sh: &g.sh,
            filter_3d: None,
        }
    }
}

impl<F> GaussianParams<'_, F> {
    pub fn len(&self) -> usize {
        self.means.len()
    }

    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }

    /// SH coefficients per Gaussian at the stored degree.
    pub fn coeffs(&self) -> usize {
        sh_coeffs(self.sh_degree)
    }

    /// Checks the array lengths agree and the active degree is available.
    pub fn validate(&self, active_degree: u32) -> Result<(), RenderError> {
        let n = self.len();
        if self.sh_degree > MAX_SH_DEGREE || active_degree > self.sh_degree {
            return Err(RenderError::ShDegree {
                requested: active_degree,
                stored: self.sh_degree,
            });
        }
        let checks = [
            ("log_scales", self.log_scales.len(), n),
            ("rotations", self.rotations.len(), n),
            ("logit_opacities", self.logit_opacities.len(), n),
            ("sh", self.sh.len(), n * self.coeffs()),
            ("filter_3d", self.filter_3d.map_or(n, <[F]>::len), n),
        ];
        for (field, got, expected) in checks {
            if got != expected {
                return Err(RenderError::InconsistentGaussians {
                    field,
                    got,
                    expected,
                    sh_degree: self.sh_degree,
                });
            }
        }
        if n > u32::MAX as usize {
            return Err(RenderError::BadShape {
                what: "Gaussian count (indices are u32)",
                got: n,
                expected: u32::MAX as usize,
            });
        }
        Ok(())
    }
}

/// A camera converted once per view to the renderer's precision, with derived limits.
#[derive(Clone, Copy, Debug)]
pub struct CameraF<F> {
    pub width: u32,
    pub height: u32,
    pub tiles_x: u32,
    pub tiles_y: u32,
    pub fx: F,
    pub fy: F,
    pub cx: F,
    pub cy: F,
    /// World-to-camera rotation `W` (row-major) and translation.
    pub rot: [[F; 3]; 3],
    pub trans: [F; 3],
    /// Camera centre in world coordinates.
    pub centre: [F; 3],
    /// Jacobian clamp limits on x/z: `[−lim_x_neg, lim_x_pos]`, likewise y (pinhole only).
    pub lim_x_neg: F,
    pub lim_x_pos: F,
    pub lim_y_neg: F,
    pub lim_y_pos: F,
    /// The equidistant fisheye projection ([`Projection::Fisheye`]) instead of the pinhole.
    pub fisheye: bool,
}

impl<F: Real> CameraF<F> {
    /// Validates `cam` and converts it (limits computed in f64, then rounded once).
    pub fn new(cam: &Camera) -> Result<Self, RenderError> {
        cam.validate()?;
        let k = cam.intrinsics;
        let (w, h) = (cam.width as f64, cam.height as f64);
        let m = project::JACOBIAN_CLAMP_MARGIN;
        let tan_x = w / (2.0 * k.fx);
        let tan_y = h / (2.0 * k.fy);
        let f = F::from_f64;
        let p = &cam.world_to_camera;
        Ok(CameraF {
            width: cam.width,
            height: cam.height,
            tiles_x: binning::tiles_for(cam.width),
            tiles_y: binning::tiles_for(cam.height),
            fx: f(k.fx),
            fy: f(k.fy),
            cx: f(k.cx),
            cy: f(k.cy),
            rot: p.rotation.map(|r| r.map(f)),
            trans: p.translation.map(f),
            centre: cam.centre().map(f),
            lim_x_neg: f(k.cx / k.fx + m * tan_x),
            lim_x_pos: f((w - k.cx) / k.fx + m * tan_x),
            lim_y_neg: f(k.cy / k.fy + m * tan_y),
            lim_y_pos: f((h - k.cy) / k.fy + m * tan_y),
            fisheye: cam.projection == Projection::Fisheye,
        })
    }
}

/// The CPU reference backend. `CpuRasterizer<f32>` implements [`Rasterizer`];
/// `CpuRasterizer<f64>` runs the same code for verification via [`CpuRasterizer::render`] and
/// [`CpuRasterizer::render_backward`].
#[derive(Debug, Default)]
pub struct CpuRasterizer<F: Real = f32> {
    splats: Vec<Splat<F>>,
    bins: TileBins,
    final_t: Vec<F>,
    last: Vec<u32>,
    isect_grads: Vec<SplatGrad<F>>,
    splat_grads: Vec<SplatGrad<F>>,
    /// Filled only by backwards with [`RenderOptions::absgrad`].
    abs: AbsMean2dGrad<F>,
    /// Filled only by backwards with [`RenderOptions::inv_depth`].
    inv_depth: InvDepthGrad<F>,
    fingerprint: Option<super::ForwardFingerprint>,
    /// The stages of the last forward and backward, while they are timed
    /// ([`Rasterizer::set_stage_timing`]).
    timing: Option<StageTimes>,
    /// The 3D filter [`Rasterizer::set_filter_3d`] set (the f32 rasterizer's renders).
    filter_3d: Option<Vec<f32>>,
}

impl<F: Real> CpuRasterizer<F> {
    pub fn new() -> Self {
        CpuRasterizer {
            splats: Vec::new(),
            bins: TileBins::default(),
            final_t: Vec::new(),
            last: Vec::new(),
            isect_grads: Vec::new(),
            splat_grads: Vec::new(),
            abs: AbsMean2dGrad::default(),
            inv_depth: InvDepthGrad::default(),
            fingerprint: None,
            timing: None,
            filter_3d: None,
        }
    }

    /// Adds the time since `clock` to `stage` and restarts it, while stages are timed.
    fn lap(&mut self, clock: &mut Option<Instant>, stage: &'static str) {
        if let (Some(t), Some(times)) = (clock.as_mut(), self.timing.as_mut()) {
            let now = Instant::now();
            times.add(stage, 1e3 * (now - *t).as_secs_f64());
            *t = now;
        }
    }

    /// Bytes this backend allocates per tile intersection: the u32 id, binning's u32 tile
    /// scratch, and the backward's per-intersection gradient slot.
    pub const BYTES_PER_INTERSECTION: u64 =
        (2 * std::mem::size_of::<u32>() + std::mem::size_of::<SplatGrad<F>>()) as u64;

    /// [`Self::BYTES_PER_INTERSECTION`] plus, with [`RenderOptions::absgrad`], the absolute
    /// 2D-mean gradient's slot and, with [`RenderOptions::inv_depth`], the inverse depth's:
    /// what the preflight of a render with `options` counts.
    pub fn bytes_per_intersection(options: &RenderOptions) -> u64 {
        let abs = if options.absgrad {
            std::mem::size_of::<[F; 2]>() as u64
        } else {
            0
        };
        let depth = if options.inv_depth {
            std::mem::size_of::<F>() as u64
        } else {
            0
        };
        Self::BYTES_PER_INTERSECTION + abs + depth
    }

    /// The projected splats of the last forward.
    pub fn splats(&self) -> &[Splat<F>] {
        &self.splats
    }

    /// The tile lists of the last forward.
    pub fn bins(&self) -> &TileBins {
        &self.bins
    }

    /// Forward pass in precision `F` (see [`Rasterizer::forward`]).
    pub fn render(
        &mut self,
        params: &GaussianParams<'_, F>,
        camera: &Camera,
        options: &RenderOptions,
        out: &mut RenderOutput<F>,
    ) -> Result<(), RenderError> {
        self.fingerprint = None;
        params.validate(options.sh_degree)?;
        let cam = CameraF::<F>::new(camera)?;
        // A forward starts the stages of a new forward and backward.
        let mut clock = self.timing.is_some().then(Instant::now);
        if let Some(t) = &mut self.timing {
            *t = StageTimes::default();
        }
        project_fwd(
            params,
            &cam,
            options.sh_degree,
            options.antialiased,
            &mut self.splats,
        );
        self.lap(&mut clock, "project");
        let count = tile_binning(
            &self.splats,
            cam.tiles_x,
            cam.tiles_y,
            Self::bytes_per_intersection(options),
            options.max_intersection_bytes,
            &mut self.bins,
        )?;
        self.lap(&mut clock, "binning");
        let npix = camera.width as usize * camera.height as usize;
        out.width = camera.width;
        out.height = camera.height;
        out.image.clear();
        out.image.resize(3 * npix, F::ZERO);
        self.final_t.clear();
        self.final_t.resize(npix, F::ZERO);
        self.last.clear();
        self.last.resize(npix, 0);
        let bg = options.background.map(F::from_f32);
        out.inv_depth.clear();
        if options.inv_depth {
            out.inv_depth.resize(npix, F::ZERO);
        }
        rasterize_fwd(
            &self.splats,
            &self.bins,
            camera.width,
            camera.height,
            bg,
            &mut out.image,
            &mut self.final_t,
            &mut self.last,
            options.inv_depth.then_some(&mut out.inv_depth[..]),
        );
        self.lap(&mut clock, "rasterize fwd");
        out.final_transmittance.clear();
        out.final_transmittance.extend_from_slice(&self.final_t);
        out.alpha.clear();
        out.alpha.extend(self.final_t.iter().map(|&t| F::ONE - t));
        out.last_contributor.clear();
        out.last_contributor.extend_from_slice(&self.last);
        out.radii.clear();
        out.radii.extend(self.splats.iter().map(|s| s.radius));
        out.means2d.clear();
        out.means2d.extend(self.splats.iter().map(|s| s.mean2d));
        out.depths.clear();
        out.depths.extend(self.splats.iter().map(|s| s.depth));
        out.num_intersections = count;
        self.fingerprint = Some(super::ForwardFingerprint::new(
            params.len(),
            params.sh_degree,
            camera,
            options,
        ));
        Ok(())
    }

    /// Backward pass in precision `F` (see [`Rasterizer::backward`]).
    pub fn render_backward(
        &mut self,
        params: &GaussianParams<'_, F>,
        camera: &Camera,
        options: &RenderOptions,
        d_image: &[F],
        grads: &mut GaussianGrads<F>,
    ) -> Result<(), RenderError> {
        super::ForwardFingerprint::new(params.len(), params.sh_degree, camera, options)
            .check(self.fingerprint.as_ref())?;
        params.validate(options.sh_degree)?;
        let npix = camera.width as usize * camera.height as usize;
        let planes = if options.inv_depth { 4 } else { 3 };
        if d_image.len() != planes * npix {
            return Err(RenderError::BadShape {
                what: "d_image",
                got: d_image.len(),
                expected: planes * npix,
            });
        }
        let (d_image, d_inv_depth) = d_image.split_at(3 * npix);
        let cam = CameraF::<F>::new(camera)?;
        let mut clock = self.timing.is_some().then(Instant::now);
        rasterize_bwd(
            &self.splats,
            &self.bins,
            camera.width,
            camera.height,
            options.background.map(F::from_f32),
            &self.final_t,
            &self.last,
            d_image,
            &mut self.isect_grads,
            &mut self.splat_grads,
            options.absgrad.then_some(&mut self.abs),
            options
                .inv_depth
                .then_some((d_inv_depth, &mut self.inv_depth)),
        );
        self.lap(&mut clock, "rasterize bwd");
        grads.pose = project_bwd(
            params,
            &cam,
            options.sh_degree,
            options.antialiased,
            options.pose_grad,
            &self.splats,
            &self.splat_grads,
            options.inv_depth.then_some(&self.inv_depth.splat[..]),
            grads,
        );
        self.lap(&mut clock, "project bwd");
        grads.means2d_abs.clear();
        if options.absgrad {
            // Culled splats have no intersections, so their sums are already zero.
            grads.means2d_abs.extend_from_slice(&self.abs.splat);
        }
        Ok(())
    }
}

impl CpuRasterizer<f32> {
    /// Renders `camera` and runs the rasterizer's backward under `d_image` (no projection
    /// backward), leaving each splat's screen-space colour gradient in
    /// [`Self::splat_colour_grads`]: under `∂L/∂pixel = 1` in one channel that is the sum of
    /// its compositing weights over the pixels (`super::significance`). `options` must ask for
    /// no inverse depth (`d_image` is the three colour planes).
    pub fn blend_weights(
        &mut self,
        gaussians: &Gaussians,
        camera: &Camera,
        options: &RenderOptions,
        out: &mut RenderOutput,
        d_image: &[f32],
    ) -> Result<(), RenderError> {
        assert!(
            !options.inv_depth,
            "blend weights take the colour planes only"
        );
        // Checked before the forward, which costs as much as the backward.
        let npix = camera.width as usize * camera.height as usize;
        if d_image.len() != 3 * npix {
            return Err(RenderError::BadShape {
                what: "d_image",
                got: d_image.len(),
                expected: 3 * npix,
            });
        }
        self.forward(gaussians, camera, options, out)?;
        rasterize_bwd(
            &self.splats,
            &self.bins,
            camera.width,
            camera.height,
            options.background,
            &self.final_t,
            &self.last,
            d_image,
            &mut self.isect_grads,
            &mut self.splat_grads,
            None,
            None,
        );
        Ok(())
    }

    /// Each splat's colour gradient from the last [`Self::blend_weights`], indexed like the
    /// Gaussians (culled ones 0).
    pub fn splat_colour_grads(&self) -> impl Iterator<Item = [f32; 3]> + '_ {
        self.splat_grads.iter().map(|g| g.color)
    }
}

impl Rasterizer for CpuRasterizer<f32> {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn set_stage_timing(&mut self, on: bool) {
        self.timing = on.then(StageTimes::default);
    }

    fn stage_times(&self) -> Option<StageTimes> {
        self.timing
    }

    fn set_filter_3d(&mut self, filter: Option<&[f32]>) -> Result<(), RenderError> {
        match (filter, &mut self.filter_3d) {
            (Some(f), Some(mine)) => {
                mine.clear();
                mine.extend_from_slice(f);
            }
            (f, mine) => *mine = f.map(<[f32]>::to_vec),
        }
        Ok(())
    }

    fn forward(
        &mut self,
        gaussians: &Gaussians,
        camera: &Camera,
        options: &RenderOptions,
        out: &mut RenderOutput,
    ) -> Result<(), RenderError> {
        // Lent to the render and given back, so it can borrow it beside `&mut self`.
        let filter = self.filter_3d.take();
        let params = GaussianParams {
            filter_3d: filter.as_deref(),
            ..GaussianParams::from_gaussians(gaussians)
        };
        let result = self.render(&params, camera, options, out);
        self.filter_3d = filter;
        result
    }

    fn backward(
        &mut self,
        gaussians: &Gaussians,
        camera: &Camera,
        options: &RenderOptions,
        d_image: &[f32],
        grads: &mut GaussianGrads,
    ) -> Result<(), RenderError> {
        let filter = self.filter_3d.take();
        let params = GaussianParams {
            filter_3d: filter.as_deref(),
            ..GaussianParams::from_gaussians(gaussians)
        };
        let result = self.render_backward(&params, camera, options, d_image, grads);
        self.filter_3d = filter;
        result
    }
}
