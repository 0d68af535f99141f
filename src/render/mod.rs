//! Rendering: the [`Rasterizer`] trait every backend implements, its options, outputs,
//! gradients and errors, the CPU reference backend ([`cpu`]), the CUDA backend ([`cuda`]) and
//! expected-depth maps through any backend ([`depth`]).
//!
//! # Contract between `forward` and `backward`
//! A trainer renders a view with [`Rasterizer::forward`], computes `∂L/∂image`, then calls
//! [`Rasterizer::backward`] for the *same* view. Between the two calls the caller must not
//! change the Gaussians (values or count), the camera or the options: the backend keeps the
//! projection, the depth-sorted tile lists and the per-pixel final transmittance / last
//! contributor from `forward` and differentiates exactly that render. Backends check what is
//! cheap to check (count, SH degree, camera, options) and answer
//! [`RenderError::StaleForward`]; changing parameter *values* in between is a caller bug they
//! cannot detect.
//!
//! # Buffers
//! `RenderOutput` and `GaussianGrads` are owned by the caller and reused across iterations;
//! backends resize their `Vec`s in place (capacity only grows), as do the backend's internal
//! buffers, so a training loop does not churn the allocator. Before allocating anything sized
//! by the number of tile intersections a backend counts them and refuses, with
//! [`RenderError::TooManyIntersections`], to exceed [`RenderOptions::max_intersection_bytes`].
//!
//! # Layouts
//! Images are row-major, interleaved RGB (`3·W·H` floats, pixel `(i, j)` at `3·(j·W + i)`),
//! linear colour, nominally in [0, 1] but not clamped. Per-Gaussian outputs are indexed like
//! [`Gaussians`].

pub mod cpu;
pub mod cuda;
pub mod depth;
pub mod significance;

use crate::scene::camera::{Camera, CameraError};
use crate::scene::gaussians::Gaussians;
use crate::scene::real::Real;

pub use cpu::CpuRasterizer;

/// Default cap on per-intersection memory: 1 GiB. At 44 B per intersection (f32 backend) that
/// is ~24 M intersections, about 80 per pixel at 640×480 — 10× what a converged 3DGS scene
/// needs — while staying far below a desktop's RAM. The trainer lowers it from the RAM budget.
pub const DEFAULT_MAX_INTERSECTION_BYTES: u64 = 1 << 30;

/// Per-render settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RenderOptions {
    /// Active SH degree (0..=3); must not exceed the Gaussians' stored degree. Training raises
    /// it every 1000 iterations; coefficients above it neither render nor receive gradients.
    pub sh_degree: u32,
    /// Colour composited behind the Gaussians, `out = C + T·background`.
    pub background: [f32; 3],
    /// Refuse a render whose per-intersection buffers would exceed this many bytes.
    pub max_intersection_bytes: u64,
    /// Antialiased rasterization (Mip-Splatting's 2D filter, gsplat's
    /// `rasterize_mode="antialiased"`): each splat's opacity is multiplied by
    /// `√(det Σ2d / det(Σ2d + 0.3·I))`, so the 0.3 px² low-pass dilation spreads a splat's
    /// energy instead of adding to it. A model trained this way must be rendered this way
    /// (its small splats are brighter than a classic render shows them); off by default, as in
    /// 3DGS and gsplat.
    pub antialiased: bool,
    /// Backward also returns [`GaussianGrads::means2d_abs`], the absolute 2D-mean gradient
    /// AbsGS densifies on (gsplat's `absgrad`). Costs one more pair of floats per tile
    /// intersection (counted by the preflight) and per Gaussian; off by default.
    pub absgrad: bool,
    /// Backward also returns [`GaussianGrads::pose`], the gradient w.r.t. the camera's pose
    /// (camera pose optimisation). Costs a few dozen flops per visible Gaussian and a sum over
    /// them; off by default.
    pub pose_grad: bool,
    /// Forward also renders [`RenderOutput::inv_depth`], the inverse-depth plane of 3DGS's
    /// depth regularization (`Σ wᵢ/zᵢ` with the colour's compositing weights), and backward
    /// takes its gradient after the image's (see [`Rasterizer::backward`]). Costs one more
    /// float per pixel and per tile intersection (counted by the preflight); off by default.
    pub inv_depth: bool,
}

/// The name outputs give the mode ([`RenderOptions::antialiased`]): `"antialiased"` or
/// `"classic"`, gsplat's `rasterize_mode` values.
pub fn rasterize_mode_name(antialiased: bool) -> &'static str {
    if antialiased {
        "antialiased"
    } else {
        "classic"
    }
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            sh_degree: 3,
            background: [0.0; 3],
            max_intersection_bytes: DEFAULT_MAX_INTERSECTION_BYTES,
            antialiased: false,
            absgrad: false,
            pose_grad: false,
            inv_depth: false,
        }
    }
}

/// What a forward pass produces. `F` is `f32` for the trait; the CPU backend also runs in `f64`
/// for gradient checks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RenderOutput<F = f32> {
    pub width: u32,
    pub height: u32,
    /// `3·W·H` interleaved RGB, background included.
    pub image: Vec<F>,
    /// `W·H` accumulated opacity, `1 − final_transmittance`.
    pub alpha: Vec<F>,
    /// `W·H` transmittance left after the last Gaussian that contributed.
    pub final_transmittance: Vec<F>,
    /// `W·H`: number of entries of the pixel's tile list processed up to and including the
    /// last one that contributed (0 = nothing contributed). Backward starts there.
    pub last_contributor: Vec<u32>,
    /// Per Gaussian: screen-space radius in pixels, `ceil(3·√λ_max)`; 0 = culled / off-screen.
    pub radii: Vec<u32>,
    /// Per Gaussian: projected mean in pixels (pixel centres at +0.5). Meaningful where
    /// `radii > 0`.
    pub means2d: Vec<[F; 2]>,
    /// Per Gaussian: camera-space z. Meaningful where `radii > 0`.
    pub depths: Vec<F>,
    /// Total (Gaussian, tile) pairs of this render.
    pub num_intersections: u64,
    /// With [`RenderOptions::inv_depth`]: `W·H` inverse depth `Σ wᵢ/zᵢ` (camera-space `zᵢ` of
    /// each splat's centre, the colour's weights `wᵢ = αᵢ·Tᵢ`; 0 where nothing was drawn: no
    /// background term). Empty otherwise.
    pub inv_depth: Vec<F>,
}

/// Gradients of the loss w.r.t. the stored (pre-activation) parameters, laid out like
/// [`Gaussians`] (the same field table, so the optimizer pairs each field with its gradient),
/// plus the screen-space mean gradient that densification accumulates. Overwritten (not
/// accumulated) by each backward call. Derefs to the parameter gradients: `grads.means`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GaussianGrads<F = f32> {
    /// `∂L/∂` each stored parameter, at the stored SH degree; coefficients above the active
    /// degree get zero.
    pub params: Gaussians<F>,
    /// `∂L/∂mean2d` in pixel units (multiply by (W/2, H/2) for 3DGS's NDC-unit threshold).
    pub means2d: Vec<[F; 2]>,
    /// With [`RenderOptions::absgrad`]: per Gaussian, `Σ_pixels |∂L_pixel/∂mean2d|`
    /// componentwise, in pixel units like `means2d` (where the signed per-pixel pulls of a
    /// large splat cancel in `means2d`, they add up here). Empty otherwise.
    pub means2d_abs: Vec<[F; 2]>,
    /// With [`RenderOptions::pose_grad`]: `∂L/∂(ρ, φ)`, the gradient w.r.t. moving the camera
    /// in its own frame ([`Pose::perturbed`](crate::scene::camera::Pose::perturbed) at 0):
    /// `ρ` a translation along the camera's axes in scene units, `φ` an axis-angle rotation
    /// about its centre, in camera axes. Summed over Gaussians in f64 in a fixed order, so it
    /// is deterministic. `None` otherwise.
    pub pose: Option<[f64; 6]>,
}

impl<F: Real> GaussianGrads<F> {
    /// Resizes every array for `n` Gaussians at stored SH degree `sh_degree` and zeroes it.
    pub fn reset(&mut self, n: usize, sh_degree: u32) {
        self.params.resize_zeroed(n, sh_degree);
        self.means2d.clear();
        self.means2d.resize(n, [F::ZERO; 2]);
    }
}

impl<F> std::ops::Deref for GaussianGrads<F> {
    type Target = Gaussians<F>;
    fn deref(&self) -> &Gaussians<F> {
        &self.params
    }
}

impl<F> std::ops::DerefMut for GaussianGrads<F> {
    fn deref_mut(&mut self) -> &mut Gaussians<F> {
        &mut self.params
    }
}

/// A Gaussian reported by [`RenderError::TooManyIntersections`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LargeGaussian {
    pub index: u32,
    pub radius_px: u32,
}

fn fmt_large(g: &[LargeGaussian]) -> String {
    g.iter()
        .map(|g| format!("#{} (radius {} px)", g.index, g.radius_px))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a render was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RenderError {
    #[error("invalid camera: {0}")]
    Camera(#[from] CameraError),
    #[error(
        "Gaussians are inconsistent: `{field}` has {got} entries, expected {expected} \
         (stored SH degree {sh_degree}); the model was built or loaded incorrectly"
    )]
    InconsistentGaussians {
        field: &'static str,
        got: usize,
        expected: usize,
        sh_degree: u32,
    },
    #[error(
        "active SH degree {requested} exceeds the stored degree {stored} (max 3); \
         lower RenderOptions::sh_degree"
    )]
    ShDegree { requested: u32, stored: u32 },
    #[error(
        "render needs {bytes} bytes for {count} tile intersections, above the limit of {limit} \
         bytes; largest Gaussians on screen: {}. Lower the resolution, prune oversized \
         Gaussians (the model may hold activated scales), or raise the RAM budget",
        fmt_large(.largest)
    )]
    TooManyIntersections {
        bytes: u64,
        count: u64,
        limit: u64,
        largest: Vec<LargeGaussian>,
    },
    #[error("`{what}` has {got} values, expected {expected}")]
    BadShape {
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error(
        "render needs {bytes} bytes of GPU memory for {count} tile intersections but only \
         {free} bytes are free; largest Gaussians on screen: {}. Lower the resolution, prune \
         oversized Gaussians, free GPU memory, or use --backend cpu",
        fmt_large(.largest)
    )]
    DeviceMemory {
        bytes: u64,
        count: u64,
        free: u64,
        largest: Vec<LargeGaussian>,
    },
    #[error("{backend} backend: {message}")]
    Backend {
        backend: &'static str,
        message: String,
    },
    #[error(
        "backward called without a matching forward (the Gaussian count, camera or options \
         changed since the last forward, or forward failed); call forward for this view first"
    )]
    StaleForward,
}

/// Milliseconds one forward and its backward spent in each stage of the pipeline, for
/// profiles: `project`, `binning` (the tile lists; on a GPU the depth sort, the key emission,
/// the tile sort and the ranges) and `rasterize` are the forward's; `rasterize_bwd` and
/// `project_bwd` the backward's.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StageTimes {
    pub project: f64,
    pub binning: f64,
    pub rasterize: f64,
    pub rasterize_bwd: f64,
    pub project_bwd: f64,
}

impl StageTimes {
    /// Adds `ms` to the stage the pipeline step `name` belongs to (the names the backends
    /// time their steps by); nothing for a step of no stage (a host copy).
    pub fn add(&mut self, name: &str, ms: f64) {
        let stage = match name {
            "project" => &mut self.project,
            "binning" | "depth sort + scan" | "emit keys" | "sort + ranges" => &mut self.binning,
            "rasterize fwd" => &mut self.rasterize,
            "rasterize bwd" => &mut self.rasterize_bwd,
            "project bwd" => &mut self.project_bwd,
            _ => return,
        };
        *stage += ms;
    }

    /// The names and values, in the step's order.
    pub fn entries(&self) -> [(&'static str, f64); 5] {
        [
            ("project", self.project),
            ("binning", self.binning),
            ("rasterize", self.rasterize),
            ("rasterize_bwd", self.rasterize_bwd),
            ("project_bwd", self.project_bwd),
        ]
    }
}

/// A rendering backend. See the module doc for the forward/backward contract.
pub trait Rasterizer {
    /// Short backend name for logs ("cpu", "cuda").
    fn name(&self) -> &'static str;

    /// Turns the timing of each forward's and backward's stages on or off (off when made):
    /// for profiles, read by [`Self::stage_times`]. A backend that cannot time its stages
    /// ignores it.
    fn set_stage_timing(&mut self, _on: bool) {}

    /// The stages of the last forward and its backward while timing was on
    /// ([`Self::set_stage_timing`]); `None` when they were not timed.
    fn stage_times(&self) -> Option<StageTimes> {
        None
    }

    /// Renders every later forward and backward through Mip-Splatting's 3D smoothing filter,
    /// one standard deviation per Gaussian (`None`: no filter, the default;
    /// [`crate::scene::filter3d`]). A render whose model has another count of Gaussians is
    /// refused ([`RenderError::InconsistentGaussians`]) until the filter is set again.
    fn set_filter_3d(&mut self, filter: Option<&[f32]>) -> Result<(), RenderError>;

    /// Renders `gaussians` from `camera` into `out` (resized in place).
    fn forward(
        &mut self,
        gaussians: &Gaussians,
        camera: &Camera,
        options: &RenderOptions,
        out: &mut RenderOutput,
    ) -> Result<(), RenderError>;

    /// Back-propagates `d_image` (`∂L/∂image`, same layout as `RenderOutput::image`; with
    /// [`RenderOptions::inv_depth`] followed by `∂L/∂inv_depth`, `W·H` more) through the last
    /// `forward`, which must have used the same `gaussians`, `camera` and `options`.
    /// Overwrites `grads` (resized in place).
    fn backward(
        &mut self,
        gaussians: &Gaussians,
        camera: &Camera,
        options: &RenderOptions,
        d_image: &[f32],
        grads: &mut GaussianGrads,
    ) -> Result<(), RenderError>;
}

/// Which rasterizer backend a binary should use (`--backend`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// CUDA when a usable GPU is found, otherwise the CPU (saying why in one line).
    Auto,
    Cpu,
    Cuda,
}

impl Backend {
    /// The device this backend runs on, the one rule every factory (rasterizer here, training
    /// engine in [`crate::train`]) follows: `Cpu` → `None`; `Cuda` → the device
    /// [`crate::device::Device::from_env`] picks (the host emulation under
    /// `GS_CUDA_EMULATE=1`), or its error with the advice to use the CPU; `Auto` → a real GPU
    /// probed without panicking (never the emulation), else `None` with the reason told through
    /// `note`. `prepare` builds what runs on the device (a probe that fails there counts as no
    /// usable GPU for `Auto`).
    pub fn select<T, E: std::fmt::Display>(
        self,
        prepare: impl Fn(crate::device::Device) -> Result<T, E>,
        note: &mut dyn FnMut(&str),
    ) -> Result<Option<T>, String> {
        use crate::device::Device;
        match self {
            Backend::Cpu => Ok(None),
            Backend::Cuda => Device::from_env()
                .map_err(|e| e.to_string())
                .and_then(|d| prepare(d).map_err(|e| e.to_string()))
                .map(Some)
                .map_err(|e| format!("{e}; use --backend cpu (or auto)")),
            Backend::Auto => {
                match Device::cuda()
                    .map_err(|e| e.to_string())
                    .and_then(|d| prepare(d).map_err(|e| e.to_string()))
                {
                    Ok(t) => Ok(Some(t)),
                    Err(e) => {
                        note(&format!(
                            "CUDA backend unavailable ({e}); using the CPU backend"
                        ));
                        Ok(None)
                    }
                }
            }
        }
    }
}

/// Creates the rasterizer for `backend` ([`Backend::select`]: the CPU reference, or the CUDA
/// rasterizer on the selected device).
pub fn make_rasterizer(
    backend: Backend,
    note: &mut dyn FnMut(&str),
) -> Result<Box<dyn Rasterizer>, RenderError> {
    match backend.select(cuda::CudaRasterizer::on, note) {
        Ok(Some(r)) => Ok(Box::new(r)),
        Ok(None) => Ok(Box::new(cpu::CpuRasterizer::new())),
        Err(message) => Err(RenderError::Backend {
            backend: "cuda",
            message,
        }),
    }
}

/// What a backend's last successful `forward` rendered; `backward` checks it (the contract in
/// the module doc). Shared by every backend so the contract is enforced the same way.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ForwardFingerprint {
    n: usize,
    stored_degree: u32,
    camera: Camera,
    options: RenderOptions,
}

impl ForwardFingerprint {
    pub(crate) fn new(
        n: usize,
        stored_degree: u32,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Self {
        ForwardFingerprint {
            n,
            stored_degree,
            camera: *camera,
            options: *options,
        }
    }

    /// `Ok` when `last` (the fingerprint of the last forward) equals `self`.
    pub(crate) fn check(&self, last: Option<&ForwardFingerprint>) -> Result<(), RenderError> {
        if last == Some(self) {
            Ok(())
        } else {
            Err(RenderError::StaleForward)
        }
    }
}
