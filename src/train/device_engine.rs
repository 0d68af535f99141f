//! The device engine ([`DeviceEngine`]): the training step with the model on a device, on
//! either driver of [`crate::device`] (a CUDA GPU, or the host emulation that runs the same
//! kernels in CI). [`super::Trainer`] drives it through the same step as the host engine; this
//! module owns what lives on the device and the order of the launches.
//!
//! # What stays on the device for the whole run
//! Parameters, both Adam moments ([`DeviceGaussians`] each) and the per-group Adam step
//! counts' device twins, the densification statistics (`grad_accum`, `denom`, `max_radii`),
//! the uploaded view, its f32 target, `∂L/∂image` and the loss scalars. The rasterizer keeps
//! its own per-Gaussian and intersection buffers. Nothing of the model crosses the bus in a
//! regular step; the host reads the four loss scalars (32 bytes) once per step, which is also
//! where divergence is detected. The view's exposure gradient and, with
//! [`RenderOptions::pose_grad`], the camera's pose gradient are written after them into the
//! same small buffer ([`POSE_OFFSET`]), so that one read brings them too.
//!
//! # A step (the host engine's order, see [`super::trainer`])
//! 1. the view: from a page-locked ring slot by an asynchronous copy on the copy stream, the
//!    compute queue waiting for it on the device (rules in `src/device/transfer.rs`), or from
//!    pageable memory by a plain copy; then `rgb8_to_f32`;
//! 2. `forward_resident`, the loss kernels (`∂L/∂image` + scalars), `backward_resident`;
//!    with MCMC ([`super::mcmc`]), or the default strategy's `--opacity-reg`/`--scale-reg`,
//!    then `mcmc_regularize` (`kernels/mcmc.cu`), which adds the regularisers' gradients and
//!    returns their loss term (per-block sums, 16 bytes per 256 Gaussians read back);
//! 3. `densify_accumulate` (`kernels/densify.cu`, the twin of the host statistics) while the
//!    strategy collects;
//! 4. at the strategy's refine iterations only (every 100 iterations by default): the
//!    statistics and the parameters the rules read come to the host (56 of the model's 708
//!    bytes per Gaussian at SH degree 3), the strategy's own code decides
//!    ([`super::densify::DefaultStrategy::plan_densify`]: a [`RowPlan`] of which rows to keep,
//!    copy and split, and the split children's new means and scales, drawn from the host RNG),
//!    and `gather_rows` / `set_rows3` / `reset_opacity` (`kernels/densify.cu`) apply it to
//!    parameters, both moments and statistics together. A strategy without a plan gets the
//!    whole model on the host instead;
//! 5. Adam on the device with the host's per-group coefficients (bit-identical update rule);
//! 6. MCMC only: at its refine iterations the means, log-scales and opacities (28 bytes per
//!    Gaussian) come to the host, the strategy plans relocation and growth there
//!    ([`super::densify::DensifyStrategy::after_step_edit`]) and [`DeviceEngine::apply_rows`]
//!    applies them (opacity replacements by `set_rows1`, new rows' moments zero, growth
//!    enlarging the buffers); then every step `mcmc_noise` moves the means with the step's
//!    seed.
//!
//! # Parity with the host engine
//! Every kernel repeats the CPU's operations in order; the only differences are the
//! rasterizer's atomically accumulated gradients (≤ 1e-5 relative) and the order of the loss
//! sums. Training therefore follows the same trajectory statistically, not bitwise (tested:
//! `tests/train_cli.rs`). All randomness (background, split samples, MCMC's relocation and
//! growth draws and its per-step noise seed) comes from the trainer's host RNG in the same
//! order on both engines; MCMC's noise normals are a function of that seed, the row and the
//! axis ([`super::mcmc::counter_normal`]), the same on both.
//!
//! # Memory
//! [`device_bytes`] itemises what the engine allocates (model, per-view, intersections) with
//! the formulas the `--vram-budget` plan prints; buffers only grow, so steady-state steps
//! allocate nothing. An MCMC run is planned at its cap from the start; its only extra device
//! memory is the regulariser's block sums (16 bytes per 256 Gaussians, not itemised) and the
//! kernels' module; relocation and growth gather like a densification (the plan's copy).

use serde::{Deserialize, Serialize};

use super::filter3d;
use crate::device::{
    CopyStream, Device, DeviceBuffer, DeviceError, Function, KernelArg, LaunchConfig, ModuleSource,
    PinnedHost, TimeMark,
};
use crate::render::cpu::project::NEAR_PLANE;
use crate::render::cuda::kernels::POSE_LEN;
use crate::render::cuda::{CudaError, CudaRasterizer, DeviceGaussians, PoseTarget};
use crate::render::{RenderError, RenderOptions, StageTimes};
use crate::scene::camera::Camera;
use crate::scene::gaussians::Field;
use crate::scene::maths::logit;
use crate::shard::DepthScale;

use super::adam::Coef;
use super::adam::{AdamConfig, GroupMask, LearningRates};
use super::bilagrid::{BilateralGrids, GridShape, BILAGRID_ADAM};
use super::densify::{model_bytes, DensifyStats, Model, RefineInputs, RowPlan, RowValues};
use super::device_adam::{DeviceAdam, DeviceAdamError};
use super::device_loss::{DeviceLoss, DeviceLossError, LOSS_SCALARS};
use super::device_mcmc::{DeviceMcmc, DeviceMcmcError};
use super::exposure::{Exposure, EXPOSURE_LEN};
use super::mcmc::{NoiseStep, Regularizer};
use crate::scene::gaussians::Gaussians;

/// Threads per block of the statistics kernel.
const BLOCK: u32 = 256;

/// Where the pose gradient sits in a view's device scalars: after the loss scalars and the
/// exposure gradient (whose slot it skips when the view has no exposure), so the step's one
/// read covers all three.
pub const POSE_OFFSET: usize = LOSS_SCALARS + EXPOSURE_LEN;

/// Where the unweighted depth L1 ([`super::depth`]) sits in a view's device scalars: after the
/// pose gradient.
pub const DEPTH_OFFSET: usize = POSE_OFFSET + POSE_LEN;

/// A `src` entry of a [`RowIndex`] that leaves its row alone (`gather_rows` in
/// `kernels/densify.cu` skips it): the row comes from another device.
pub(crate) const SKIP_ROW: u32 = u32::MAX;

/// The three row tensors a model edit rewrites: the parameters and both Adam moments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowTensor {
    Params,
    ExpAvg,
    ExpAvgSq,
}

impl RowTensor {
    pub(crate) const ALL: [RowTensor; 3] =
        [RowTensor::Params, RowTensor::ExpAvg, RowTensor::ExpAvgSq];

    /// Whether a fresh row (a new Gaussian) starts at zero here (the moments) rather than as a
    /// copy of its source row (the parameters).
    fn zeroes_fresh(self) -> bool {
        self != RowTensor::Params
    }
}

/// A row plan's sources on one device, uploaded once for every field's gather
/// ([`DeviceEngine::row_index`]): output row `r` comes from this device's row `src[r]`, or
/// from elsewhere where that is [`SKIP_ROW`]; `fresh[r]` marks a new Gaussian.
pub(crate) struct RowIndex {
    rows: usize,
    src: DeviceBuffer<u32>,
    fresh: DeviceBuffer<u8>,
}

impl RowIndex {
    /// Output rows.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }
}

/// Destination rows of a scatter on one device ([`DeviceEngine::row_dests`]), uploaded once
/// for every field, with their largest value kept so that each scatter checks it against its
/// output's rows.
pub(crate) struct RowDests {
    count: usize,
    max: u32,
    dst: DeviceBuffer<u32>,
}

/// `kernels/densify.cu`.
pub fn module_source() -> ModuleSource {
    ModuleSource {
        name: "densify.cu".into(),
        source: include_str!("../../kernels/densify.cu").into(),
        entry_points: vec![
            "densify_accumulate",
            "gather_rows",
            "set_rows3",
            "set_rows1",
            "reset_opacity",
            "scatter_rows",
            "filter3d_rates",
            "filter3d_finish",
            "reset_opacity_filtered",
        ],
        defines: vec![],
    }
}

/// Why the device engine failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceEngineError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Cuda(#[from] CudaError),
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Loss(#[from] DeviceLossError),
    #[error(transparent)]
    Adam(#[from] DeviceAdamError),
    #[error(transparent)]
    Mcmc(#[from] DeviceMcmcError),
    /// A depth loss on a view staged without its inverse-depth plane (a bug of the caller).
    #[error("a depth loss needs the staged view's inverse-depth plane; it was staged without")]
    NoDepthPlane,
    /// A grid gradient asked of a view staged without a grid (a bug of the caller).
    #[error(
        "no bilateral grid where one was needed: the staged view was not seen through one, or \
         the grids are not resident on this engine"
    )]
    NoGrid,
    /// The 3D filter asked for without what it needs (a bug of the caller).
    #[error("3D filter: {0}")]
    Filter(String),
    /// A staged frame whose length does not fit the view (a bug of the caller).
    #[error(
        "a staged frame holds {got} bytes, the view needs {want} (mask: {masked}, depth plane: \
         {depth})"
    )]
    FrameSize {
        got: usize,
        want: usize,
        masked: bool,
        depth: bool,
    },
}

/// A view as the loader delivered it: pageable bytes, or the first `len` bytes of a
/// page-locked ring slot (uploaded asynchronously; the slot stays busy until the copy ends).
pub enum Frame<'a> {
    Host(&'a [u8]),
    Pinned(&'a mut PinnedHost, usize),
}

impl<'a> Frame<'a> {
    /// The view's bytes on the host.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Frame::Host(b) => b,
            Frame::Pinned(p, len) => &p[..*len],
        }
    }

    /// The first `len` bytes of the frame (at most its length).
    pub fn truncated(self, len: usize) -> Frame<'a> {
        match self {
            Frame::Host(b) => Frame::Host(&b[..len.min(b.len())]),
            Frame::Pinned(p, n) => Frame::Pinned(p, len.min(n)),
        }
    }
}

/// The loss scalars of one step, read back from the device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepScalars {
    pub loss: f64,
    pub l1: f64,
    pub ssim: f64,
    /// Mean squared error of the render (for the view's PSNR).
    pub mse: f64,
    /// `∂L/∂E` of the view's exposure matrix, when the loss saw the render through one.
    pub exposure_grad: Option<[f64; EXPOSURE_LEN]>,
    /// `∂L/∂(ρ, φ)` of the camera's pose ([`crate::render::GaussianGrads::pose`]), when the
    /// step's options asked for it ([`crate::render::RenderOptions::pose_grad`]). Summed on the
    /// device in a fixed order: deterministic, equal to the host rasterizer's up to the order
    /// of the sums (and of the per-splat gradients' float atomics).
    pub pose_grad: Option<[f64; POSE_LEN]>,
    /// The unweighted depth L1 ([`super::depth`]), when the step had a depth target; its
    /// weighted value is not in `loss` (the caller adds it).
    pub depth_l1: Option<f64>,
    /// Tile intersections of the step's render (what the sort and the rasterizer walk).
    pub intersections: u64,
}

/// A step's depth loss ([`super::depth`]): how the staged view's stored inverse-depth plane
/// becomes its target (the view is staged with its plane, see [`DeviceEngine::stage_view`])
/// and this step's weight.
#[derive(Clone, Copy, Debug)]
pub struct DepthLoss {
    pub scale: DepthScale,
    pub weight: f64,
    /// What the mean runs over: the view's pixels for a dense map, its points for SfM depths
    /// ([`super::depth::DepthConfig::divisor`]).
    pub divisor: usize,
    /// Compare the render's inverse depth divided by its accumulated opacity (held constant)
    /// with the target: SfM points ([`super::depth`]).
    pub normalized: bool,
}

/// Device bytes per pixel of the largest view: RGB8 upload and its loss mask (4), target,
/// render and `∂L/∂image` (12 each), the SSIM's coefficient planes (9 planes of f32 = 36),
/// final transmittance and last contributor (8), rounded up to 85 for the per-tile ranges and
/// the loss partials (about 0.15 bytes per pixel together).
pub const DEVICE_BYTES_PER_PIXEL: u64 = 85;

/// Device bytes per pixel that exposure compensation adds: the render through the view's
/// exposure (12) and the exposure gradient's per-block partials (12 doubles per 256 pixels),
/// rounded up.
pub const DEVICE_EXPOSURE_BYTES_PER_PIXEL: u64 = 13;

/// Device bytes per pixel that depth regularization adds: the inverse-depth plane and its
/// gradient (4 each), the view's stored plane staged with its pixels (2: the target is made
/// from it in the loss kernel) and the depth loss's per-block partials (one double per 256
/// pixels), rounded up.
pub const DEVICE_DEPTH_BYTES_PER_PIXEL: u64 = 11;

/// Device bytes per pixel of the largest view, with or without exposure compensation and
/// depth regularization.
pub fn device_bytes_per_pixel(exposure: bool, depth: bool) -> u64 {
    DEVICE_BYTES_PER_PIXEL
        + if exposure {
            DEVICE_EXPOSURE_BYTES_PER_PIXEL
        } else {
            0
        }
        + if depth {
            DEVICE_DEPTH_BYTES_PER_PIXEL
        } else {
            0
        }
}

/// Device bytes per tile intersection: 32-bit keys and 32-bit ids, double-buffered by the sort,
/// and the sort histogram's share (the CUDA rasterizer's own count).
pub const DEVICE_BYTES_PER_INTERSECTION: u64 = crate::render::cuda::BYTES_PER_INTERSECTION;

/// What the device engine allocates, itemised (the `--vram-budget` plan).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceBytes {
    /// Parameters, gradients, both moments, statistics, the rasterizer's per-Gaussian
    /// buffers and what a densification holds beside them: [`device_bytes_per_gaussian`] each, for
    /// the whole model on one device or one shard (⌈N / devices⌉ rows) when split.
    pub model: u64,
    /// A split model only: the view rasterizer's copy of every shard's splats and their
    /// gradients, [`DEVICE_RENDER_BYTES_PER_GAUSSIAN`] × N (see [`super::sharded`]).
    pub gathered: u64,
    /// [`device_bytes_per_pixel`] × the largest view's pixels (and the plan adds the staged
    /// bilateral grid and its gradient, 12 B per grid float, when the run learns grids).
    pub views: u64,
    /// The intersection buffers: the per-render cap the rasterizer's preflight enforces.
    pub intersections: u64,
    /// A split model only: the pieces a model edit moves between devices, one being gathered
    /// for another device and one arriving from one ([`edit_chunk_bytes`]).
    pub edit_chunks: u64,
}

impl DeviceBytes {
    pub fn fixed(&self) -> u64 {
        self.views + self.intersections + self.edit_chunks
    }

    pub fn total(&self) -> u64 {
        self.model + self.gathered + self.fixed()
    }
}

/// The CUDA rasterizer's per-Gaussian buffers (`render::cuda`): projection outputs (2D mean
/// 8, conic 12, opacity 4, colour 12, depth 4, radius 4: 44 B), binning (tiles touched 8, the
/// depth sort's keys and ids, double-buffered, 24, scanned counts 8: 40 B), the backward's
/// accumulators (36 B, 8 more for the absolute 2D-mean gradient with `absgrad` and 4 more for
/// the inverse depth's with depth regularization), the depth sort's histogram (256 counters
/// per 256 keys: 4 B), the scan's partials (under 1 B) and, with `pose_grad`, the pose
/// gradient's per-block partials (6 doubles per 256 Gaussians: under 0.2 B): 137 B, rounded
/// up to 140.
pub const DEVICE_RENDER_BYTES_PER_GAUSSIAN: u64 = 140;

/// Device bytes per Gaussian: the host model's items ([`model_bytes`], with the device
/// rasterizer's buffers, [`DEVICE_RENDER_BYTES_PER_GAUSSIAN`], in place of the CPU's) plus what
/// a model edit holds beside them ([`edit_bytes_per_gaussian`]), so a densification at the
/// planned count still fits.
pub fn device_bytes_per_gaussian(sh_degree: u32) -> u64 {
    // The host's gather scratch is the device edit's own item here.
    model_bytes(1, sh_degree)
        - super::densify::RENDER_BYTES_PER_GAUSSIAN
        - super::densify::gather_scratch_bytes(sh_degree)
        + DEVICE_RENDER_BYTES_PER_GAUSSIAN
        + edit_bytes_per_gaussian(sh_degree)
}

/// Device bytes per Gaussian that a model edit ([`DeviceEngine::apply_rows`]) holds beside the
/// model: the widest field's new rows (the 48 floats of the SH coefficients at degree 3), since
/// the edit replaces one field at a time, and the plan's row indices (a u32 source and a fresh
/// flag per row; on a split model also, for a row whose source is on another device, its
/// source and flag there and its destination here: at most 14 bytes, counted as 16). A second
/// copy of the parameters and both moments would be 12 bytes per float of a Gaussian (708 B at
/// degree 3, against 208 here).
pub fn edit_bytes_per_gaussian(sh_degree: u32) -> u64 {
    widest_field_bytes(sh_degree) + 16
}

/// Bytes of one Gaussian's widest field (the SH coefficients' 48 floats at degree 3, the
/// rotation's 4 at degree 0): what a model edit holds per row of new rows.
fn widest_field_bytes(sh_degree: u32) -> u64 {
    let widest = Field::ALL
        .iter()
        .map(|f| f.width(sh_degree))
        .max()
        .unwrap_or(0) as u64;
    4 * widest
}

/// Device bytes a sharded model edit holds on each device beside [`edit_bytes_per_gaussian`]:
/// two pieces of [`super::sharded::ROW_CHUNK`] rows of the widest field, the one it gathers
/// for another device and the one it receives (6.3 MB at degree 3). Independent of the model's
/// size; nothing on one device.
pub fn edit_chunk_bytes(sh_degree: u32) -> u64 {
    2 * super::sharded::ROW_CHUNK as u64 * widest_field_bytes(sh_degree)
}

/// Checks that every replacement of a row plan names one of its `rows` output rows.
fn check_replace(replace: &[RowValues], rows: usize) -> Result<(), DeviceEngineError> {
    match replace.iter().find(|v| v.row as usize >= rows) {
        Some(bad) => Err(CudaError::Shape {
            what: "row plan replacement",
            got: rows,
            need: bad.row as usize + 1,
        }
        .into()),
        None => Ok(()),
    }
}

/// [`DeviceBytes`] on each device for `n` Gaussians at `sh_degree` split over `devices`
/// devices (1: the whole model on one), views of at most `max_pixels` (with `exposure`
/// compensation and `depth` regularization or not) and an intersection cap of
/// `max_intersection_bytes`.
#[allow(clippy::too_many_arguments)]
pub fn device_bytes(
    n: usize,
    devices: usize,
    sh_degree: u32,
    max_pixels: u64,
    exposure: bool,
    depth: bool,
    max_intersection_bytes: u64,
) -> DeviceBytes {
    let devices = devices.max(1);
    DeviceBytes {
        model: n.div_ceil(devices) as u64 * device_bytes_per_gaussian(sh_degree),
        gathered: if devices > 1 {
            n as u64 * DEVICE_RENDER_BYTES_PER_GAUSSIAN
        } else {
            0
        },
        views: device_bytes_per_pixel(exposure, depth) * max_pixels,
        intersections: max_intersection_bytes,
        edit_chunks: if devices > 1 {
            edit_chunk_bytes(sh_degree)
        } else {
            0
        },
    }
}

/// [`RefineInputs`] downloaded from the device (owned).
pub struct RefineHost {
    pub sh_degree: u32,
    pub stats: DensifyStats,
    pub means: Vec<[f32; 3]>,
    pub log_scales: Vec<[f32; 3]>,
    pub rotations: Vec<[f32; 4]>,
    pub logit_opacities: Vec<f32>,
}

impl RefineHost {
    pub fn inputs(&self) -> RefineInputs<'_> {
        RefineInputs {
            sh_degree: self.sh_degree,
            grad_accum: &self.stats.grad_accum,
            denom: &self.stats.denom,
            max_radii: &self.stats.max_radii,
            means: &self.means,
            log_scales: &self.log_scales,
            rotations: &self.rotations,
            logit_opacities: &self.logit_opacities,
        }
    }
}

/// The device side of a training run (see the module doc).
pub struct DeviceEngine {
    dev: Device,
    raster: CudaRasterizer,
    adam: DeviceAdam,
    accumulate: Function,
    gather: Function,
    set_rows: Function,
    set_rows1: Function,
    reset: Function,
    scatter: Function,
    /// Mip-Splatting's 3D filter ([`crate::scene::filter3d`]): its kernels, the training
    /// cameras it is set from ([`DeviceEngine::set_filter_cameras`]; none until given) and the
    /// lowest sampling rate's bits of the last [`DeviceEngine::filter_rates`]. The filter itself
    /// lives in the rasterizer, which renders through it ([`CudaRasterizer::filter_3d_buffer`]).
    filter_rates_fn: Function,
    filter_finish_fn: Function,
    reset_filtered: Function,
    filter_cameras: Option<(DeviceBuffer<f32>, u32)>,
    filter_lowest: DeviceBuffer<u32>,
    /// The MCMC kernels, loaded on first use (only MCMC runs need them).
    mcmc: Option<DeviceMcmc>,
    copies: CopyStream,
    params: DeviceGaussians,
    exp_avg: DeviceGaussians,
    exp_avg_sq: DeviceGaussians,
    /// Adam steps per group (the host's `AdamState::steps`, kept here while training).
    adam_steps: [u64; 6],
    grad_accum: DeviceBuffer<f32>,
    denom: DeviceBuffer<u32>,
    max_radii: DeviceBuffer<u32>,
    view: ViewLoss,
    image: Vec<f32>,
    /// While a step is profiled ([`ResidentEngine::profile_start`]): a mark in the queue after
    /// each of its phases.
    marks: Option<Vec<(Phase, TimeMark)>>,
}

/// The parts of a device step a profile times, in the order the step runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Start,
    /// The view's copy to the device and its conversion (and mask).
    Upload,
    /// Projection, binning and the forward rasterization.
    Render,
    /// The loss and `∂L/∂image` (with depth, exposure and grids where the run has them).
    Loss,
    /// The backward rasterization and projection.
    Backward,
    /// Everything up to the densification statistics' update: the host's read of the loss
    /// scalars and its work between (the queue idles there), then the update.
    Stats,
    /// The Adam step (and, from the previous mark, what the host did before it).
    Optimizer,
}

/// Queue time of each part of one profiled step on the device, in milliseconds: each phase
/// runs from the previous phase's end, so the parts add up to `step` (time the queue waited for
/// the host included, as CUDA events measure it). Phases a step does not run are 0.
///
/// The render and the backward are also split into the rasterizer's stages
/// ([`Self::stages`], [`StageTimes`]): `project`, `binning` and `rasterize` add up to `render`
/// on the device engine, to a little less on the host engine (whose render also copies its
/// outputs); `rasterize_bwd` and `project_bwd` likewise to `backward`. They are 0 where the
/// rasterizer does not time its stages, and in reports written before they existed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTimes {
    pub upload: f64,
    pub render: f64,
    pub loss: f64,
    pub backward: f64,
    pub stats: f64,
    pub optimizer: f64,
    pub step: f64,
    /// Beside the parts in the JSON (0 in reports written before they existed).
    #[serde(flatten)]
    pub stages: StageTimes,
}

impl PhaseTimes {
    /// The names and values, in the step's order (`step` last).
    pub fn entries(&self) -> [(&'static str, f64); 7] {
        [
            ("upload", self.upload),
            ("render", self.render),
            ("loss", self.loss),
            ("backward", self.backward),
            ("stats", self.stats),
            ("optimizer", self.optimizer),
            ("step", self.step),
        ]
    }

    /// Each part's median over `samples` (0 for none): a profile's summary.
    pub fn median(samples: &[PhaseTimes]) -> PhaseTimes {
        let med = |f: fn(&PhaseTimes) -> f64| {
            let mut v: Vec<f64> = samples.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            match v.len() {
                0 => 0.0,
                n if n % 2 == 1 => v[n / 2],
                n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
            }
        };
        PhaseTimes {
            upload: med(|p| p.upload),
            render: med(|p| p.render),
            loss: med(|p| p.loss),
            backward: med(|p| p.backward),
            stats: med(|p| p.stats),
            optimizer: med(|p| p.optimizer),
            step: med(|p| p.step),
            stages: StageTimes {
                project: med(|p| p.stages.project),
                binning: med(|p| p.stages.binning),
                rasterize: med(|p| p.stages.rasterize),
                rasterize_bwd: med(|p| p.stages.rasterize_bwd),
                project_bwd: med(|p| p.stages.project_bwd),
            },
        }
    }
}

/// The staged view and its loss: the target, its mask, `∂L/∂image` and the loss scalars.
struct ViewLoss {
    dev: Device,
    loss: DeviceLoss,
    rgb8: DeviceBuffer<u8>,
    /// Where the staged view's loss mask starts in `rgb8`, when it has one.
    mask: Option<usize>,
    /// Where the staged view's inverse-depth plane starts in `rgb8`, when it was staged with
    /// one.
    depth_plane: Option<usize>,
    target: DeviceBuffer<f32>,
    d_image: DeviceBuffer<f32>,
    scalars: DeviceBuffer<f64>,
    /// The staged view's exposure matrix (12 floats) and the render through it.
    exposure: DeviceBuffer<f32>,
    exposed: DeviceBuffer<f32>,
    /// Whether the staged view is seen through its exposure; then `∂L/∂E` follows the loss
    /// scalars in `scalars` (one read per step either way).
    exposure_used: bool,
    /// The staged view's bilateral grid ([`super::bilagrid`]; its render through the grid
    /// goes to `exposed`) and the grid's gradient of the last loss.
    grid: DeviceBuffer<f32>,
    grid_grad: DeviceBuffer<f64>,
    /// The staged grid's shape, when the staged view is seen through one (cleared by every
    /// [`DeviceEngine::stage_view`], set by [`DeviceEngine::stage_grid`] or
    /// [`DeviceEngine::stage_grid_slot`]).
    grid_shape: Option<GridShape>,
    /// With resident grids, the staged view's slot in them (its grid is read there, not from
    /// `grid`).
    grid_slot: Option<usize>,
    /// Every training view's grid and its optimizer state, when the trainer made them resident
    /// ([`DeviceEngine::upload_grids`]).
    grids: Option<ResidentGrids>,
    /// Whether the last backward wrote the pose gradient at [`POSE_OFFSET`] of `scalars`
    /// (cleared by every loss, set by [`DeviceEngine::forward_backward`]).
    pose_used: bool,
    /// Whether the last loss had a depth term (then the depth L1 is at [`DEPTH_OFFSET`] of
    /// `scalars`; cleared by every loss).
    depth_used: bool,
}

/// Every training view's bilateral grid and its Adam moments on the device, so the grids'
/// optimizer ([`super::bilagrid`]: the total variation's gradient is dense, every grid steps
/// every iteration) runs there rather than over host memory. `values` and `next` swap at each
/// step (a float's update reads its neighbours' old values).
struct ResidentGrids {
    shape: GridShape,
    views: usize,
    values: DeviceBuffer<f32>,
    next: DeviceBuffer<f32>,
    m: DeviceBuffer<f32>,
    v: DeviceBuffer<f32>,
    /// The last step's total variation.
    tv: DeviceBuffer<f64>,
}

/// Device bytes of `views` resident grids of `shape` ([`DeviceEngine::upload_grids`]): the
/// grids twice (the step writes the other copy) and both moments, 16 B per float.
pub fn resident_grid_bytes(shape: GridShape, views: usize) -> u64 {
    16 * (shape.floats() * views) as u64
}

/// Doubles of a view's device scalars: loss scalars, exposure gradient, pose gradient, depth
/// L1.
const SCALARS_LEN: usize = DEPTH_OFFSET + 1;

impl ViewLoss {
    fn scalars(&self) -> Result<StepScalars, DeviceEngineError> {
        let mut s = [0.0f64; SCALARS_LEN];
        let n = match (self.depth_used, self.pose_used, self.exposure_used) {
            (true, _, _) => SCALARS_LEN,
            (false, true, _) => DEPTH_OFFSET,
            (false, false, true) => LOSS_SCALARS + EXPOSURE_LEN,
            (false, false, false) => LOSS_SCALARS,
        };
        self.dev.download(&self.scalars, &mut s[..n])?;
        let exposure_grad = self
            .exposure_used
            .then(|| std::array::from_fn(|k| s[LOSS_SCALARS + k]));
        let pose_grad = self
            .pose_used
            .then(|| std::array::from_fn(|k| s[POSE_OFFSET + k]));
        Ok(StepScalars {
            loss: s[0],
            l1: s[1],
            ssim: s[2],
            mse: s[3],
            exposure_grad,
            pose_grad,
            depth_l1: self.depth_used.then_some(s[DEPTH_OFFSET]),
            intersections: 0,
        })
    }
}

/// The depth loss ([`super::depth`]) of `raster`'s last inverse-depth plane against the
/// target `depth.scale` makes of the staged view's stored plane, on the staged view's pixels
/// (its loss mask too): `∂L/∂D` into the rasterizer's buffer for its next backward, the
/// unweighted L1 into the view's scalars. Call after [`staged_loss`] (which clears the flag).
fn staged_depth_loss(
    v: &mut ViewLoss,
    raster: &mut CudaRasterizer,
    camera: &Camera,
    depth: DepthLoss,
) -> Result<(), DeviceEngineError> {
    let npix = camera.width as usize * camera.height as usize;
    let at = v.depth_plane.ok_or(DeviceEngineError::NoDepthPlane)?;
    let (plane, final_t, d_plane) = raster.inv_depth_and_grad(npix)?;
    v.loss.depth_l1(
        plane,
        depth.normalized.then_some(final_t),
        &v.rgb8,
        v.mask,
        at,
        depth.scale,
        npix,
        depth.divisor,
        depth.weight,
        d_plane,
        &mut v.scalars,
        DEPTH_OFFSET,
    )?;
    v.depth_used = true;
    Ok(())
}

/// Loss and `∂L/∂image` of `image` (through the staged view's exposure, when it has one: see
/// [`super::exposure`]) against the staged view. A masked view's excluded pixels are zeroed in
/// the image the loss sees before the loss and in its gradient after it; the exposure's
/// adjoint then turns that gradient into `∂L/∂image` in place and sums `∂L/∂E`.
fn staged_loss(
    v: &mut ViewLoss,
    image: &mut DeviceBuffer<f32>,
    camera: &Camera,
    lambda_dssim: f32,
) -> Result<(), DeviceEngineError> {
    let npix = camera.width as usize * camera.height as usize;
    // A new loss: any pose gradient or depth L1 in the scalars is the previous step's.
    v.pose_used = false;
    v.depth_used = false;
    v.dev.grow(&mut v.d_image, 3 * npix)?;
    // The staged grid: the view's slot of the resident grids, or the one staged from the host.
    let (grid, grid_at) = match (&v.grids, v.grid_slot, v.grid_shape) {
        (Some(r), Some(slot), Some(shape)) => (&r.values, slot * shape.floats()),
        _ => (&v.grid, 0),
    };
    let seen = match (v.exposure_used, v.grid_shape) {
        (true, _) => {
            v.dev.grow(&mut v.exposed, 3 * npix)?;
            v.loss
                .exposure_apply(image, &v.exposure, npix, &mut v.exposed)?;
            &mut v.exposed
        }
        (false, Some(shape)) => {
            v.dev.grow(&mut v.exposed, 3 * npix)?;
            v.loss.bilagrid_apply(
                image,
                grid,
                grid_at,
                shape,
                camera.width,
                camera.height,
                &mut v.exposed,
            )?;
            &mut v.exposed
        }
        (false, None) => image,
    };
    if let Some(offset) = v.mask {
        v.loss.apply_mask(&v.rgb8, offset, npix, seen)?;
    }
    v.loss.loss_and_grad(
        seen,
        &v.target,
        camera.width,
        camera.height,
        lambda_dssim,
        &mut v.d_image,
        &mut v.scalars,
    )?;
    if let Some(offset) = v.mask {
        v.loss.apply_mask(&v.rgb8, offset, npix, &mut v.d_image)?;
    }
    if v.exposure_used {
        v.loss.exposure_backward(
            image,
            &v.exposure,
            npix,
            &mut v.d_image,
            &mut v.scalars,
            LOSS_SCALARS,
        )?;
    }
    if let Some(shape) = v.grid_shape {
        v.loss.bilagrid_backward(
            image,
            grid,
            grid_at,
            shape,
            camera.width,
            camera.height,
            &mut v.d_image,
            &mut v.grid_grad,
        )?;
    }
    Ok(())
}

impl DeviceEngine {
    /// An engine on `dev` with an empty model ([`Self::upload_model`] gives it one).
    pub fn new(dev: Device) -> Result<DeviceEngine, DeviceEngineError> {
        let m = dev.load_module(&module_source())?;
        let f = |name: &str| m.function(name).cloned();
        let (accumulate, gather, set_rows, set_rows1, reset, scatter) = (
            f("densify_accumulate")?,
            f("gather_rows")?,
            f("set_rows3")?,
            f("set_rows1")?,
            f("reset_opacity")?,
            f("scatter_rows")?,
        );
        let (filter_rates_fn, filter_finish_fn, reset_filtered) = (
            f("filter3d_rates")?,
            f("filter3d_finish")?,
            f("reset_opacity_filtered")?,
        );
        Ok(DeviceEngine {
            filter_rates_fn,
            filter_finish_fn,
            reset_filtered,
            filter_cameras: None,
            filter_lowest: dev.alloc(1)?,
            raster: CudaRasterizer::on(dev.clone())?,
            adam: DeviceAdam::new(&dev)?,
            accumulate,
            gather,
            set_rows,
            set_rows1,
            reset,
            scatter,
            mcmc: None,
            copies: dev.copy_stream()?,
            params: DeviceGaussians::new(&dev)?,
            exp_avg: DeviceGaussians::new(&dev)?,
            exp_avg_sq: DeviceGaussians::new(&dev)?,
            adam_steps: [0; 6],
            grad_accum: dev.alloc(1)?,
            denom: dev.alloc(1)?,
            max_radii: dev.alloc(1)?,
            view: ViewLoss {
                dev: dev.clone(),
                loss: DeviceLoss::new(&dev)?,
                rgb8: dev.alloc(1)?,
                mask: None,
                depth_plane: None,
                target: dev.alloc(1)?,
                d_image: dev.alloc(1)?,
                scalars: dev.alloc(SCALARS_LEN)?,
                exposure: dev.alloc(EXPOSURE_LEN)?,
                exposed: dev.alloc(1)?,
                exposure_used: false,
                grid: dev.alloc(1)?,
                grid_grad: dev.alloc(1)?,
                grid_shape: None,
                grid_slot: None,
                grids: None,
                pose_used: false,
                depth_used: false,
            },
            image: Vec::new(),
            marks: None,
            dev,
        })
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Gaussians on the device.
    pub fn len(&self) -> usize {
        self.params.n
    }

    pub fn is_empty(&self) -> bool {
        self.params.n == 0
    }

    /// SH degree of the device model's colour coefficients.
    pub fn sh_degree(&self) -> u32 {
        self.params.sh_degree
    }

    /// Replaces the device model with `model` (parameters, moments, step counts, statistics).
    pub fn upload_model(&mut self, model: &Model) -> Result<(), DeviceEngineError> {
        let dev = &self.dev;
        self.params.upload(dev, &model.gaussians)?;
        self.exp_avg.upload(dev, &model.adam.exp_avg)?;
        self.exp_avg_sq.upload(dev, &model.adam.exp_avg_sq)?;
        self.adam_steps = model.adam.steps;
        let n = model.len().max(1);
        dev.grow(&mut self.grad_accum, n)?;
        dev.grow(&mut self.denom, n)?;
        dev.grow(&mut self.max_radii, n)?;
        dev.upload(&model.stats.grad_accum, &mut self.grad_accum)?;
        dev.upload(&model.stats.denom, &mut self.denom)?;
        dev.upload(&model.stats.max_radii, &mut self.max_radii)?;
        Ok(())
    }

    /// The device model on the host, in the one representation both engines share.
    pub fn download_model(&self) -> Result<Model, DeviceEngineError> {
        let mut model = Model::new(Gaussians::zeros(self.params.n, self.params.sh_degree));
        self.download_model_into(&mut model, 0)?;
        model.adam.steps = self.adam_steps;
        Ok(model)
    }

    /// Writes the device model into rows `row0..row0 + self.len()` of `dst` (allocated for
    /// the whole model, same SH degree): the sharded engine assembles its shards in the one
    /// host allocation the memory plan counts, with no second copy. Rows only: the Adam step
    /// counts (one per parameter group, not per row) are the caller's to set.
    pub fn download_model_into(
        &self,
        dst: &mut Model,
        row0: usize,
    ) -> Result<(), DeviceEngineError> {
        let dev = &self.dev;
        let rows = row0..row0 + self.params.n;
        if rows.end > dst.len() {
            return Err(CudaError::Shape {
                what: "host model (rows)",
                got: dst.len(),
                need: rows.end,
            }
            .into());
        }
        let stats = &mut dst.stats;
        dev.download(&self.grad_accum, &mut stats.grad_accum[rows.clone()])?;
        dev.download(&self.denom, &mut stats.denom[rows.clone()])?;
        dev.download(&self.max_radii, &mut stats.max_radii[rows])?;
        self.params.download_into(dev, &mut dst.gaussians, row0)?;
        self.exp_avg
            .download_into(dev, &mut dst.adam.exp_avg, row0)?;
        self.exp_avg_sq
            .download_into(dev, &mut dst.adam.exp_avg_sq, row0)?;
        Ok(())
    }

    /// The Adam step counts (part of the state the host reports without a download).
    pub fn adam_steps(&self) -> [u64; 6] {
        self.adam_steps
    }

    /// Puts `frame` on the device as the f32 target of the next loss: its first `rgb_len`
    /// bytes are RGB8; with `masked`, one mask byte per pixel follows (0 = excluded from the
    /// loss, see [`super::loss`]), stays on the device for [`Self::forward_backward`], and
    /// zeroes the target's excluded pixels here; with `depth_plane`, the view's stored
    /// inverse-depth plane follows (two bytes per pixel, as packed), from which the step's
    /// [`DepthLoss`] makes its target on the device. With `exposure`, the loss sees the render
    /// through that matrix ([`super::exposure`]); it is uploaded now, before any launch of
    /// the step.
    pub fn stage_view(
        &mut self,
        frame: Frame<'_>,
        rgb_len: usize,
        masked: bool,
        depth_plane: bool,
        exposure: Option<&Exposure>,
    ) -> Result<(), DeviceEngineError> {
        let dev = self.dev.clone();
        let len = frame.bytes().len();
        let npix = rgb_len / 3;
        let colour = if masked { 4 * npix } else { rgb_len };
        let want = colour + if depth_plane { 2 * npix } else { 0 };
        if len != want || !rgb_len.is_multiple_of(3) {
            return Err(DeviceEngineError::FrameSize {
                got: len,
                want,
                masked,
                depth: depth_plane,
            });
        }
        let v = &mut self.view;
        dev.grow(&mut v.rgb8, len)?;
        dev.grow(&mut v.target, rgb_len)?;
        match frame {
            Frame::Host(bytes) => dev.upload(bytes, &mut v.rgb8)?,
            Frame::Pinned(slot, len) => {
                // The copy waits for the launches already queued (one may still read the
                // previous view); the compute queue waits for the copy before converting it.
                dev.upload_async(&self.copies, slot, len, &mut v.rgb8)?;
                dev.wait_copies(&self.copies)?;
            }
        }
        v.loss.rgb8_to_f32(&v.rgb8, rgb_len, &mut v.target)?;
        v.mask = masked.then_some(rgb_len);
        v.depth_plane = depth_plane.then_some(colour);
        v.exposure_used = exposure.is_some();
        v.grid_shape = None;
        v.grid_slot = None;
        if let Some(e) = exposure {
            dev.upload(e, &mut v.exposure)?;
        }
        if masked {
            v.loss
                .apply_mask(&v.rgb8, rgb_len, rgb_len / 3, &mut v.target)?;
        }
        self.note(Phase::Upload)
    }

    /// Marks the end of `phase` in the queue, while a step is profiled.
    fn note(&mut self, phase: Phase) -> Result<(), DeviceEngineError> {
        if let Some(marks) = &mut self.marks {
            marks.push((phase, self.dev.mark()?));
        }
        Ok(())
    }

    /// Starts profiling the step about to run (see [`PhaseTimes`]).
    pub fn profile_start(&mut self) -> Result<(), DeviceEngineError> {
        self.marks = Some(vec![(Phase::Start, self.dev.mark()?)]);
        self.raster.set_queue_profiling(true);
        Ok(())
    }

    /// The profiled step's phases, waiting for its last mark; `None` when no step was
    /// profiled. Stops profiling.
    pub fn profile_finish(&mut self) -> Result<Option<PhaseTimes>, DeviceEngineError> {
        let Some(mut marks) = self.marks.take() else {
            return Ok(None);
        };
        // What the step queued after Adam (MCMC's noise, the grids' step) counts with it.
        marks.push((Phase::Optimizer, self.dev.mark()?));
        let mut t = PhaseTimes::default();
        for pair in marks.windows(2) {
            let ms = pair[1].1.ms_since(&pair[0].1)?;
            match pair[1].0 {
                Phase::Start => {}
                Phase::Upload => t.upload += ms,
                Phase::Render => t.render += ms,
                Phase::Loss => t.loss += ms,
                Phase::Backward => t.backward += ms,
                Phase::Stats => t.stats += ms,
                Phase::Optimizer => t.optimizer += ms,
            }
        }
        if let (Some(first), Some(last)) = (marks.first(), marks.last()) {
            t.step = last.1.ms_since(&first.1)?;
        }
        let stages = self.raster.queue_stages();
        self.raster.set_queue_profiling(false);
        for (name, ms) in stages? {
            t.stages.add(name, ms);
        }
        Ok(Some(t))
    }

    /// Sees the staged view ([`Self::stage_view`], which clears this) through `grid`, a
    /// bilateral grid of `shape` ([`super::bilagrid`]): uploaded now, before any launch of the
    /// step. The loss then leaves `∂L/∂grid` on the device for [`Self::grid_grad_into`].
    pub fn stage_grid(&mut self, shape: GridShape, grid: &[f32]) -> Result<(), DeviceEngineError> {
        let v = &mut self.view;
        if grid.len() != shape.floats() {
            return Err(CudaError::Shape {
                what: "bilateral grid",
                got: grid.len(),
                need: shape.floats(),
            }
            .into());
        }
        self.dev.grow(&mut v.grid, grid.len())?;
        self.dev.upload(grid, &mut v.grid)?;
        v.grid_shape = Some(shape);
        Ok(())
    }

    /// Makes `grids` resident (replacing any): every grid, both moments, and the room the
    /// optimizer's step writes into ([`resident_grid_bytes`]). The trainer then stages views
    /// by slot ([`Self::stage_grid_slot`]) and steps them here ([`Self::grid_step`]).
    pub fn upload_grids(&mut self, grids: &BilateralGrids) -> Result<(), DeviceEngineError> {
        let dev = self.dev.clone();
        let n = grids.values.len().max(1);
        let mut r = match self.view.grids.take() {
            Some(r) => r,
            None => ResidentGrids {
                shape: grids.shape,
                views: 0,
                values: dev.alloc(1)?,
                next: dev.alloc(1)?,
                m: dev.alloc(1)?,
                v: dev.alloc(1)?,
                tv: dev.alloc(1)?,
            },
        };
        for b in [&mut r.values, &mut r.next, &mut r.m, &mut r.v] {
            dev.grow(b, n)?;
        }
        dev.upload(&grids.values, &mut r.values)?;
        dev.upload(&grids.exp_avg, &mut r.m)?;
        dev.upload(&grids.exp_avg_sq, &mut r.v)?;
        r.shape = grids.shape;
        r.views = grids.len();
        self.view.grids = Some(r);
        Ok(())
    }

    /// The resident grids and their moments into `grids` (which holds as many views of the same
    /// shape: the trainer's host copy). The step count stays the caller's.
    pub fn download_grids_into(&self, grids: &mut BilateralGrids) -> Result<(), DeviceEngineError> {
        let r = self.view.grids.as_ref().ok_or(DeviceEngineError::NoGrid)?;
        if r.shape != grids.shape || r.views != grids.len() {
            return Err(CudaError::Shape {
                what: "host bilateral grids (views)",
                got: grids.len(),
                need: r.views,
            }
            .into());
        }
        self.dev.download(&r.values, &mut grids.values)?;
        self.dev.download(&r.m, &mut grids.exp_avg)?;
        self.dev.download(&r.v, &mut grids.exp_avg_sq)?;
        Ok(())
    }

    /// Sees the staged view through its slot of the resident grids (as [`Self::stage_grid`]
    /// does with a grid from the host).
    pub fn stage_grid_slot(&mut self, slot: usize) -> Result<(), DeviceEngineError> {
        let r = self.view.grids.as_ref().ok_or(DeviceEngineError::NoGrid)?;
        if slot >= r.views {
            return Err(CudaError::Shape {
                what: "resident bilateral grids (views)",
                got: r.views,
                need: slot + 1,
            }
            .into());
        }
        self.view.grid_shape = Some(r.shape);
        self.view.grid_slot = Some(slot);
        Ok(())
    }

    /// One optimizer step of every resident grid at learning rate `lr` (Adam step `t`,
    /// 1-based), with the last loss's grid gradient on its staged slot when `with_grad`:
    /// [`BilateralGrids::step`] on the device. Returns the total variation before the step.
    pub fn grid_step(
        &mut self,
        lr: f64,
        tv_weight: f64,
        t: u64,
        with_grad: bool,
    ) -> Result<f64, DeviceEngineError> {
        let v = &mut self.view;
        let r = v.grids.as_mut().ok_or(DeviceEngineError::NoGrid)?;
        let coef = Coef::new(&BILAGRID_ADAM, lr, t);
        let slot = match (with_grad, v.grid_slot) {
            (true, Some(s)) => Some((s, &v.grid_grad)),
            (true, None) => return Err(DeviceEngineError::NoGrid),
            (false, _) => None,
        };
        v.loss.bilagrid_adam(
            r.shape,
            r.views,
            &r.values,
            &mut r.next,
            &mut r.m,
            &mut r.v,
            slot,
            tv_weight,
            &coef,
            &mut r.tv,
        )?;
        std::mem::swap(&mut r.values, &mut r.next);
        let mut tv = [0.0f64];
        self.dev.download(&r.tv, &mut tv)?;
        Ok(tv[0])
    }

    /// `∂L/∂grid` of the last loss of a view staged with a grid, into `out` (resized to the
    /// grid's floats).
    pub fn grid_grad_into(&self, out: &mut Vec<f64>) -> Result<(), DeviceEngineError> {
        let shape = self.view.grid_shape.ok_or(DeviceEngineError::NoGrid)?;
        out.resize(shape.floats(), 0.0);
        self.dev.download(&self.view.grid_grad, out)?;
        Ok(())
    }

    /// Forward, loss and backward of the staged view; returns the loss scalars (the one read
    /// per step), with [`RenderOptions::pose_grad`] the pose gradient among them. The
    /// gradients stay on the device for [`Self::accumulate_stats`] and [`Self::adam_step`]. A
    /// masked view's excluded pixels are zeroed in the render before the loss and in
    /// `∂L/∂image` after it.
    pub fn forward_backward(
        &mut self,
        camera: &Camera,
        options: &RenderOptions,
        lambda_dssim: f32,
        depth: Option<DepthLoss>,
    ) -> Result<StepScalars, DeviceEngineError> {
        let intersections = self
            .raster
            .forward_resident(&self.params, camera, options)?;
        self.note(Phase::Render)?;
        let image = self.raster.image_mut();
        staged_loss(&mut self.view, image, camera, lambda_dssim)?;
        if let Some(d) = depth {
            staged_depth_loss(&mut self.view, &mut self.raster, camera, d)?;
        }
        self.note(Phase::Loss)?;
        let v = &mut self.view;
        let pose = options.pose_grad.then_some(PoseTarget {
            buf: &mut v.scalars,
            offset: POSE_OFFSET,
        });
        self.raster
            .backward_resident_to(&self.params, camera, options, &v.d_image, pose)?;
        v.pose_used = options.pose_grad;
        self.note(Phase::Backward)?;
        Ok(StepScalars {
            intersections,
            ..self.view.scalars()?
        })
    }

    /// The loss of `image` (a render of `camera` on this engine's device, e.g. a sharded
    /// render's) against the staged view, with `∂L/∂image` into this engine's buffer
    /// ([`Self::d_image`]); the scalars are read by [`Self::step_scalars`].
    pub(crate) fn loss_on(
        &mut self,
        image: &mut DeviceBuffer<f32>,
        camera: &Camera,
        lambda_dssim: f32,
    ) -> Result<(), DeviceEngineError> {
        staged_loss(&mut self.view, image, camera, lambda_dssim)
    }

    /// The depth loss of `raster`'s last inverse-depth plane (a sharded render's) against the
    /// staged view (see [`staged_depth_loss`]); after [`Self::loss_on`].
    pub(crate) fn depth_loss_on(
        &mut self,
        raster: &mut CudaRasterizer,
        camera: &Camera,
        depth: DepthLoss,
    ) -> Result<(), DeviceEngineError> {
        staged_depth_loss(&mut self.view, raster, camera, depth)
    }

    /// `∂L/∂image` of the last loss.
    pub(crate) fn d_image(&self) -> &DeviceBuffer<f32> {
        &self.view.d_image
    }

    /// The scalars of the last loss (a download: waits for the queue).
    pub(crate) fn step_scalars(&self) -> Result<StepScalars, DeviceEngineError> {
        self.view.scalars()
    }

    /// The projecting rasterizer of this engine's model and the model (sharded rendering).
    pub(crate) fn raster_and_params(&mut self) -> (&mut CudaRasterizer, &DeviceGaussians) {
        (&mut self.raster, &self.params)
    }

    pub(crate) fn raster(&self) -> &CudaRasterizer {
        &self.raster
    }

    /// Adds the last backward's view to the densification statistics (`kernels/densify.cu`):
    /// its 2D-mean gradient, or with `absgrad` its absolute 2D-mean gradient (that backward
    /// must have had [`crate::render::RenderOptions::absgrad`]).
    pub fn accumulate_stats(
        &mut self,
        width: u32,
        height: u32,
        absgrad: bool,
    ) -> Result<(), DeviceEngineError> {
        let grad = if absgrad {
            self.raster.means2d_abs()
        } else {
            &self.raster.grads().means2d
        };
        self.accumulate_from(width, height, self.raster.radii(), grad)?;
        self.note(Phase::Stats)
    }

    /// The statistics update from explicit radii (`[N]`) and 2D-mean gradients (`[N, 2]`).
    fn accumulate_from(
        &self,
        width: u32,
        height: u32,
        radii: &DeviceBuffer<u32>,
        means2d_grad: &DeviceBuffer<f32>,
    ) -> Result<(), DeviceEngineError> {
        let n = self.params.n;
        if n == 0 {
            return Ok(());
        }
        for (what, got, need) in [
            ("radii", radii.len(), n),
            ("means2d gradient", means2d_grad.len(), 2 * n),
            ("grad_accum", self.grad_accum.len(), n),
            ("denom", self.denom.len(), n),
            ("max_radii", self.max_radii.len(), n),
        ] {
            if got < need {
                return Err(CudaError::Shape { what, got, need }.into());
            }
        }
        let args = [
            KernelArg::U64(n as u64),
            KernelArg::F32(width as f32 * 0.5),
            KernelArg::F32(height as f32 * 0.5),
            radii.arg(),
            means2d_grad.arg(),
            self.grad_accum.arg(),
            self.denom.arg(),
            self.max_radii.arg(),
        ];
        // SAFETY: the argument list matches densify_accumulate in kernels/densify.cu; every
        // buffer holds the values the N threads index (checked above). The statistics buffers
        // are this engine's own; the kernel writes nothing else.
        unsafe {
            self.dev.launch(
                &self.accumulate,
                LaunchConfig::linear(n as u64, BLOCK)?,
                &args,
            )
        }?;
        Ok(())
    }

    /// What a densification decides from ([`RefineInputs`]): the statistics, means,
    /// log-scales, rotations and opacities (56 bytes per Gaussian, against the whole model's
    /// 708 at SH degree 3).
    pub fn refine_inputs(&self) -> Result<RefineHost, DeviceEngineError> {
        let dev = &self.dev;
        let n = self.params.n;
        let mut h = RefineHost {
            sh_degree: self.params.sh_degree,
            stats: DensifyStats::zeros(n),
            means: vec![[0.0; 3]; n],
            log_scales: vec![[0.0; 3]; n],
            rotations: vec![[0.0; 4]; n],
            logit_opacities: vec![0.0; n],
        };
        dev.download(&self.grad_accum, &mut h.stats.grad_accum)?;
        dev.download(&self.denom, &mut h.stats.denom)?;
        dev.download(&self.max_radii, &mut h.stats.max_radii)?;
        dev.download(self.params.buffer(Field::Means), h.means.as_flattened_mut())?;
        dev.download(
            self.params.buffer(Field::LogScales),
            h.log_scales.as_flattened_mut(),
        )?;
        dev.download(
            self.params.buffer(Field::Rotations),
            h.rotations.as_flattened_mut(),
        )?;
        dev.download(
            self.params.buffer(Field::LogitOpacities),
            &mut h.logit_opacities,
        )?;
        Ok(h)
    }

    /// Applies a densification's [`RowPlan`] on the device (`gather_rows`, `set_rows3`,
    /// `set_rows1` for opacity replacements): the twin of [`Model::apply_rows`], bit-identical
    /// (copies only; the new values come from the host). A plan that appends rows (MCMC growth)
    /// grows the model.
    ///
    /// One field of one tensor at a time: each is gathered into a new buffer of the plan's row
    /// count, which then replaces the old one. So the edit holds at most one field's new rows
    /// beside the model ([`edit_bytes_per_gaussian`]), not a second copy of it. The plan is
    /// checked before anything changes; a device failure midway (which the memory plan rules
    /// out) leaves the model half-edited, and the trainer stops without saving it.
    pub fn apply_rows(&mut self, plan: &RowPlan) -> Result<(), DeviceEngineError> {
        let index = self.row_index(&plan.src, &plan.fresh)?;
        let rows = index.rows();
        check_replace(&plan.replace, rows)?;
        for t in RowTensor::ALL {
            for f in Field::ALL {
                let mut out = self.alloc_field(f, rows)?;
                self.gather_field(t, f, &index, &mut out)?;
                self.install_field(t, f, out);
            }
        }
        self.finish_rows(rows, &plan.replace)
    }

    /// Uploads a row plan's `src` and `fresh` (see [`RowIndex`]), after checking them against
    /// this device's rows.
    pub(crate) fn row_index(
        &self,
        src: &[u32],
        fresh: &[bool],
    ) -> Result<RowIndex, DeviceEngineError> {
        let bad =
            |what, got, need| -> DeviceEngineError { CudaError::Shape { what, got, need }.into() };
        let rows = src.len();
        if fresh.len() != rows {
            return Err(bad("row plan fresh flags", fresh.len(), rows));
        }
        if let Some(&i) = src
            .iter()
            .find(|&&i| i != SKIP_ROW && i as usize >= self.params.n)
        {
            return Err(bad("row plan source", self.params.n, i as usize + 1));
        }
        let fresh: Vec<u8> = fresh.iter().map(|&f| f as u8).collect();
        let mut src_d = self.dev.alloc::<u32>(rows.max(1))?;
        self.dev.upload(src, &mut src_d)?;
        let mut fresh_d = self.dev.alloc::<u8>(rows.max(1))?;
        self.dev.upload(&fresh, &mut fresh_d)?;
        Ok(RowIndex {
            rows,
            src: src_d,
            fresh: fresh_d,
        })
    }

    /// A buffer for `rows` rows of field `f` at this model's degree, contents unspecified.
    pub(crate) fn alloc_field(
        &self,
        f: Field,
        rows: usize,
    ) -> Result<DeviceBuffer<f32>, DeviceEngineError> {
        Ok(self
            .dev
            .alloc((rows * f.width(self.params.sh_degree)).max(1))?)
    }

    fn tensor(&self, t: RowTensor) -> &DeviceGaussians {
        match t {
            RowTensor::Params => &self.params,
            RowTensor::ExpAvg => &self.exp_avg,
            RowTensor::ExpAvgSq => &self.exp_avg_sq,
        }
    }

    fn tensor_mut(&mut self, t: RowTensor) -> &mut DeviceGaussians {
        match t {
            RowTensor::Params => &mut self.params,
            RowTensor::ExpAvg => &mut self.exp_avg,
            RowTensor::ExpAvgSq => &mut self.exp_avg_sq,
        }
    }

    /// Row `r` of `out` ← row `src[r]` of field `f` of tensor `t` (zero for a fresh row of a
    /// moment), for every row of `index` whose source is not [`SKIP_ROW`] (those rows are left
    /// as they are). `out` lives on this device and holds `index.rows()` rows of the field.
    pub(crate) fn gather_field(
        &self,
        t: RowTensor,
        f: Field,
        index: &RowIndex,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), DeviceEngineError> {
        let width = f.width(self.params.sh_degree);
        let total = index.rows * width;
        if total == 0 {
            return Ok(());
        }
        if out.len() < total {
            return Err(CudaError::Shape {
                what: "gathered rows",
                got: out.len() / width,
                need: index.rows,
            }
            .into());
        }
        let args = [
            KernelArg::U64(index.rows as u64),
            KernelArg::U32(width as u32),
            index.src.arg(),
            index.fresh.arg(),
            KernelArg::U32(t.zeroes_fresh() as u32),
            self.tensor(t).buffer(f).arg(),
            out.arg(),
        ];
        // SAFETY: matches gather_rows in kernels/densify.cu; `src` and `fresh` hold `rows`
        // values, every src entry is SKIP_ROW (not read) or below this model's row count
        // (checked by `row_index`, and the model's rows do not change before `finish_rows`),
        // the input holds the model's rows × width floats and `out` rows × width (checked).
        unsafe {
            self.dev.launch(
                &self.gather,
                LaunchConfig::linear(total as u64, BLOCK)?,
                &args,
            )
        }?;
        Ok(())
    }

    /// Uploads the destination rows of a scatter (see [`RowDests`]).
    pub(crate) fn row_dests(&self, dst: &[u32]) -> Result<RowDests, DeviceEngineError> {
        let mut d = self.dev.alloc::<u32>(dst.len().max(1))?;
        self.dev.upload(dst, &mut d)?;
        Ok(RowDests {
            count: dst.len(),
            max: dst.iter().copied().max().unwrap_or(0),
            dst: d,
        })
    }

    /// Row `dst[k]` of `out` ← row `k` of `from`, for every destination `k` (field `f`: rows
    /// gathered on another device and copied here). All three live on this device.
    pub(crate) fn scatter_field(
        &self,
        f: Field,
        from: &DeviceBuffer<f32>,
        dests: &RowDests,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), DeviceEngineError> {
        let width = f.width(self.params.sh_degree);
        let total = dests.count * width;
        if total == 0 {
            return Ok(());
        }
        let shape =
            |what, got, need| -> DeviceEngineError { CudaError::Shape { what, got, need }.into() };
        if from.len() < total {
            return Err(shape("scattered rows", from.len() / width, dests.count));
        }
        if dests.max as usize >= out.len() / width {
            return Err(shape(
                "scatter destination",
                out.len() / width,
                dests.max as usize + 1,
            ));
        }
        let args = [
            KernelArg::U64(dests.count as u64),
            KernelArg::U32(width as u32),
            dests.dst.arg(),
            from.arg(),
            out.arg(),
        ];
        // SAFETY: matches scatter_rows in kernels/densify.cu; `dst` holds `count` rows, each
        // at most `max`, which is below `out`'s rows of `width` floats, and `from` holds
        // count × width floats (all checked above).
        unsafe {
            self.dev.launch(
                &self.scatter,
                LaunchConfig::linear(total as u64, BLOCK)?,
                &args,
            )
        }?;
        Ok(())
    }

    /// Makes `buf` field `f` of tensor `t` (freeing the old buffer). The model keeps its row
    /// count until [`Self::finish_rows`], so the other fields' gathers still read old rows.
    pub(crate) fn install_field(&mut self, t: RowTensor, f: Field, buf: DeviceBuffer<f32>) {
        *self.tensor_mut(t).buffer_mut(f) = buf;
    }

    /// The end of every model edit, once every field holds `n_rows` new rows: records the row
    /// count, applies `replace` (row indices of the new rows, checked by [`check_replace`]
    /// beforehand) and zeroes the statistics.
    pub(crate) fn finish_rows(
        &mut self,
        n_rows: usize,
        replace: &[RowValues],
    ) -> Result<(), DeviceEngineError> {
        for t in RowTensor::ALL {
            self.tensor_mut(t).n = n_rows;
        }
        let dev = self.dev.clone();
        let params = &mut self.params;
        if !replace.is_empty() {
            check_replace(replace, n_rows)?;
            let count = replace.len();
            let at: Vec<u32> = replace.iter().map(|v| v.row).collect();
            let mut at_d = dev.alloc::<u32>(count)?;
            dev.upload(&at, &mut at_d)?;
            let mut values = dev.alloc::<f32>(3 * count)?;
            for (field, out) in [
                (0, params.buffer(Field::Means)),
                (1, params.buffer(Field::LogScales)),
            ] {
                let host: Vec<f32> = replace
                    .iter()
                    .flat_map(|v| if field == 0 { v.mean } else { v.log_scale })
                    .collect();
                dev.upload(&host, &mut values)?;
                let args = [
                    KernelArg::U64(count as u64),
                    at_d.arg(),
                    values.arg(),
                    out.arg(),
                ];
                // SAFETY: matches set_rows3 in kernels/densify.cu; `at` and `values` hold
                // `count` rows, each below the row count (checked), and `out` holds rows × 3
                // floats.
                unsafe {
                    dev.launch(
                        &self.set_rows,
                        LaunchConfig::linear(3 * count as u64, BLOCK)?,
                        &args,
                    )
                }?;
            }
            // Opacity replacements (MCMC's corrected copies): only the rows that carry one.
            let (at_o, values_o): (Vec<u32>, Vec<f32>) = replace
                .iter()
                .filter_map(|v| v.logit_opacity.map(|o| (v.row, o)))
                .unzip();
            if !at_o.is_empty() {
                let count = at_o.len();
                let mut at_d = dev.alloc::<u32>(count)?;
                dev.upload(&at_o, &mut at_d)?;
                let mut values = dev.alloc::<f32>(count)?;
                dev.upload(&values_o, &mut values)?;
                let args = [
                    KernelArg::U64(count as u64),
                    at_d.arg(),
                    values.arg(),
                    params.buffer_mut(Field::LogitOpacities).arg(),
                ];
                // SAFETY: matches set_rows1 in kernels/densify.cu; `at` and `values` hold
                // `count` entries, each row below the row count (checked with the others
                // above), and the opacities hold that many floats.
                unsafe {
                    dev.launch(
                        &self.set_rows1,
                        LaunchConfig::linear(count as u64, BLOCK)?,
                        &args,
                    )
                }?;
            }
        }
        let n = n_rows.max(1);
        dev.grow(&mut self.grad_accum, n)?;
        dev.grow(&mut self.denom, n)?;
        dev.grow(&mut self.max_radii, n)?;
        dev.memset_zero(&mut self.grad_accum, n)?;
        dev.memset_zero(&mut self.denom, n)?;
        dev.memset_zero(&mut self.max_radii, n)?;
        Ok(())
    }

    /// What an MCMC relocation and growth plan from: a host model at SH degree 0 holding the
    /// device model's means, log-scales and opacities (28 bytes per Gaussian); its rotations,
    /// SH, moments and statistics are zero placeholders the plans never read.
    pub fn row_values(&self) -> Result<Model, DeviceEngineError> {
        let dev = &self.dev;
        let n = self.params.n;
        let mut g = Gaussians::zeros(n, 0);
        dev.download(self.params.buffer(Field::Means), g.means.as_flattened_mut())?;
        dev.download(
            self.params.buffer(Field::LogScales),
            g.log_scales.as_flattened_mut(),
        )?;
        dev.download(
            self.params.buffer(Field::LogitOpacities),
            &mut g.logit_opacities,
        )?;
        Ok(Model::new(g))
    }

    /// Adds the L1 regularisers' gradients to the last backward's and returns their loss term
    /// (`kernels/mcmc.cu`, twin of [`super::densify::DensifyStrategy::regularize`]).
    pub fn regularize(&mut self, reg: Regularizer) -> Result<f64, DeviceEngineError> {
        let mcmc = loaded(&mut self.mcmc, &self.dev)?;
        Ok(mcmc.regularize(reg, &self.params, self.raster.grads_mut())?)
    }

    /// Adds a step's MCMC noise to the means (`kernels/mcmc.cu`, twin of
    /// [`super::mcmc::McmcStrategy::add_noise`]).
    pub fn add_noise(&mut self, noise: NoiseStep) -> Result<(), DeviceEngineError> {
        self.add_noise_from(noise, 0)
    }

    /// [`Self::add_noise`] of a shard whose row 0 is row `first` of the model.
    pub(crate) fn add_noise_from(
        &mut self,
        noise: NoiseStep,
        first: u64,
    ) -> Result<(), DeviceEngineError> {
        let mcmc = loaded(&mut self.mcmc, &self.dev)?;
        Ok(mcmc.add_noise(noise, &mut self.params, first)?)
    }

    /// [`Self::regularize`] of a shard of a model of `total` Gaussians: the shard's sums of
    /// opacities and scales (see [`DeviceMcmc::regularize_shard`]).
    pub(crate) fn regularize_shard(
        &mut self,
        reg: Regularizer,
        total: usize,
    ) -> Result<(f64, f64), DeviceEngineError> {
        let mcmc = loaded(&mut self.mcmc, &self.dev)?;
        Ok(mcmc.regularize_shard(reg, &self.params, self.raster.grads_mut(), total)?)
    }

    /// The training cameras the 3D filter is set from ([`filter3d::camera_rows`]).
    pub fn set_filter_cameras(&mut self, rows: &[f32]) -> Result<(), DeviceEngineError> {
        let count = rows.len() / filter3d::CAMERA_ROW;
        let mut buf = self.dev.alloc::<f32>(rows.len().max(1))?;
        self.dev.upload(rows, &mut buf)?;
        self.filter_cameras = Some((buf, count as u32));
        Ok(())
    }

    /// The 3D filter's first step on this device (twin of [`filter3d::sampling_rate`]): each
    /// Gaussian's highest sampling rate into the rasterizer's filter buffer, and the lowest
    /// positive one (∞ when no camera sees any Gaussian) on the device, where
    /// [`Self::filter_finish`] reads it ([`Self::filter_lowest`] brings it to the host, for a
    /// model split over devices).
    pub fn filter_rates(&mut self) -> Result<(), DeviceEngineError> {
        let n = self.params.n;
        let (cams, count) = match &self.filter_cameras {
            Some((b, c)) => (b, *c),
            None => {
                return Err(DeviceEngineError::Filter(
                    "the 3D filter's cameras were not given (set_filter_cameras)".into(),
                ))
            }
        };
        let inf = [f32::INFINITY.to_bits()];
        self.dev.upload(&inf, &mut self.filter_lowest)?;
        let rates = self.raster.filter_3d_buffer(n)?;
        // No camera (`count` 0): every rate 0, every filter 0 after the finish.
        if n > 0 {
            let args = [
                KernelArg::U64(n as u64),
                self.params.buffer(Field::Means).arg(),
                cams.arg(),
                KernelArg::U32(count),
                KernelArg::F32(NEAR_PLANE as f32),
                KernelArg::F32(filter3d::FRUSTUM_MARGIN as f32),
                rates.arg(),
                self.filter_lowest.arg(),
            ];
            // SAFETY: matches filter3d_rates in kernels/densify.cu; the means hold n rows, the
            // camera buffer `count` rows of CAMERA_ROW floats (uploaded from whole rows), the
            // rates buffer n values (grown by filter_3d_buffer) and the lowest rate one u32.
            unsafe {
                self.dev.launch(
                    &self.filter_rates_fn,
                    LaunchConfig::linear(n as u64, BLOCK)?,
                    &args,
                )
            }?;
        }
        Ok(())
    }

    /// The lowest rate of the last [`Self::filter_rates`] (waits for the device).
    pub fn filter_lowest(&self) -> Result<f32, DeviceEngineError> {
        let mut lowest = [0u32];
        self.dev.download(&self.filter_lowest, &mut lowest)?;
        Ok(f32::from_bits(lowest[0]))
    }

    /// Replaces the lowest rate [`Self::filter_finish`] reads (the lowest over every shard).
    pub fn set_filter_lowest(&mut self, lowest: f32) -> Result<(), DeviceEngineError> {
        self.dev
            .upload(&[lowest.to_bits()], &mut self.filter_lowest)?;
        Ok(())
    }

    /// The 3D filter's second step (twin of [`filter3d::finish`]): the rates in the
    /// rasterizer's filter buffer become filters, the unseen Gaussians' at the lowest rate on
    /// the device.
    pub fn filter_finish(&mut self) -> Result<(), DeviceEngineError> {
        let n = self.params.n;
        if n == 0 {
            return Ok(());
        }
        let rates = self.raster.filter_3d_buffer(n)?;
        let args = [
            KernelArg::U64(n as u64),
            KernelArg::F32(filter3d::filter_numerator()),
            self.filter_lowest.arg(),
            rates.arg(),
        ];
        // SAFETY: matches filter3d_finish in kernels/densify.cu; the lowest rate's buffer
        // holds one u32 and the rates' n values.
        unsafe {
            self.dev.launch(
                &self.filter_finish_fn,
                LaunchConfig::linear(n as u64, BLOCK)?,
                &args,
            )
        }?;
        Ok(())
    }

    /// [`Model::reset_opacity_through`] on the device, through the filter the rasterizer holds
    /// (which must be the current rows': set after the last edit).
    pub fn reset_opacity_through(&mut self, max_opacity: f32) -> Result<(), DeviceEngineError> {
        let n = self.params.n;
        if n == 0 {
            return Ok(());
        }
        let filter = self.raster.filter_3d_buffer(n)?;
        let args = [
            KernelArg::U64(n as u64),
            KernelArg::F32(max_opacity),
            self.params.buffer(Field::LogScales).arg(),
            filter.arg(),
            self.params.buffer(Field::LogitOpacities).arg(),
            self.exp_avg.buffer(Field::LogitOpacities).arg(),
            self.exp_avg_sq.buffer(Field::LogitOpacities).arg(),
        ];
        // SAFETY: matches reset_opacity_filtered in kernels/densify.cu; the log-scales hold n
        // rows of 3, the filter n values (grown above), the opacities and both moments' n.
        unsafe {
            self.dev.launch(
                &self.reset_filtered,
                LaunchConfig::linear(n as u64, BLOCK)?,
                &args,
            )
        }?;
        Ok(())
    }

    /// Opacity ← min(opacity, `max_opacity`) with the opacity moments zeroed, on the device
    /// (twin of [`Model::reset_opacity`]).
    pub fn reset_opacity(&mut self, max_opacity: f32) -> Result<(), DeviceEngineError> {
        let n = self.params.n;
        if n == 0 {
            return Ok(());
        }
        let args = [
            KernelArg::U64(n as u64),
            KernelArg::F32(max_opacity),
            KernelArg::F32(logit(max_opacity)),
            self.params.buffer(Field::LogitOpacities).arg(),
            self.exp_avg.buffer(Field::LogitOpacities).arg(),
            self.exp_avg_sq.buffer(Field::LogitOpacities).arg(),
        ];
        // SAFETY: matches reset_opacity in kernels/densify.cu; the opacities and both moments'
        // opacities hold n values (DeviceGaussians of the model's shape).
        unsafe {
            self.dev
                .launch(&self.reset, LaunchConfig::linear(n as u64, BLOCK)?, &args)
        }?;
        Ok(())
    }

    /// One Adam step of the groups in `mask` from the last backward's gradients.
    pub fn adam_step(
        &mut self,
        cfg: &AdamConfig,
        lr: &LearningRates,
        mask: GroupMask,
    ) -> Result<(), DeviceEngineError> {
        self.adam.step(
            cfg,
            lr,
            mask,
            &mut self.adam_steps,
            &mut self.params,
            &mut self.exp_avg,
            &mut self.exp_avg_sq,
            self.raster.grads(),
            Some(self.raster.radii()),
        )?;
        self.note(Phase::Optimizer)
    }

    /// Renders `camera` with the device model and returns the image (`[H, W, 3]`, host).
    pub fn render(
        &mut self,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<&mut [f32], DeviceEngineError> {
        self.raster
            .forward_resident(&self.params, camera, options)?;
        let n = 3 * camera.width as usize * camera.height as usize;
        self.image.resize(n, 0.0);
        self.dev.download(self.raster.image(), &mut self.image)?;
        Ok(&mut self.image)
    }
}

impl DeviceEngine {
    /// Loads the MCMC kernels now rather than at their first use. A run calls this before it
    /// measures its baseline memory: compiling a module (NVRTC, on a GPU without a cached
    /// entry) takes host memory for a moment, which mid-run would land on top of a full budget.
    pub fn load_mcmc(&mut self) -> Result<(), DeviceEngineError> {
        loaded(&mut self.mcmc, &self.dev).map(|_| ())
    }

    /// Whether the MCMC kernels are loaded.
    pub fn mcmc_loaded(&self) -> bool {
        self.mcmc.is_some()
    }
}

/// What the trainer drives when the model is resident on devices: one ([`DeviceEngine`]) or
/// several ([`super::sharded::ShardedEngine`]). Every method is the [`DeviceEngine`] method of
/// the same name, over the whole model; row indices (row plans, statistics) are the model's.
pub trait ResidentEngine {
    /// The device views are staged from (page-locked ring slots belong to it).
    fn device(&self) -> &Device;
    /// Every device the model lives on.
    fn devices(&self) -> Vec<Device> {
        vec![self.device().clone()]
    }
    /// Gaussians in the model.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn upload_model(&mut self, model: &Model) -> Result<(), DeviceEngineError>;
    fn download_model(&self) -> Result<Model, DeviceEngineError>;
    fn stage_view(
        &mut self,
        frame: Frame<'_>,
        rgb_len: usize,
        masked: bool,
        depth_plane: bool,
        exposure: Option<&Exposure>,
    ) -> Result<(), DeviceEngineError>;
    fn stage_grid(&mut self, shape: GridShape, grid: &[f32]) -> Result<(), DeviceEngineError>;
    fn grid_grad_into(&self, out: &mut Vec<f64>) -> Result<(), DeviceEngineError>;
    /// Makes the grids resident and returns true, or returns false where the engine leaves
    /// them to the host's optimizer (the sharded engine).
    fn upload_grids(&mut self, _grids: &BilateralGrids) -> Result<bool, DeviceEngineError> {
        Ok(false)
    }
    fn download_grids_into(&self, _grids: &mut BilateralGrids) -> Result<(), DeviceEngineError> {
        Err(DeviceEngineError::NoGrid)
    }
    fn stage_grid_slot(&mut self, _slot: usize) -> Result<(), DeviceEngineError> {
        Err(DeviceEngineError::NoGrid)
    }
    fn grid_step(
        &mut self,
        _lr: f64,
        _tv_weight: f64,
        _t: u64,
        _with_grad: bool,
    ) -> Result<f64, DeviceEngineError> {
        Err(DeviceEngineError::NoGrid)
    }
    fn forward_backward(
        &mut self,
        camera: &Camera,
        options: &RenderOptions,
        lambda_dssim: f32,
        depth: Option<DepthLoss>,
    ) -> Result<StepScalars, DeviceEngineError>;
    fn regularize(&mut self, reg: Regularizer) -> Result<f64, DeviceEngineError>;
    fn accumulate_stats(
        &mut self,
        width: u32,
        height: u32,
        absgrad: bool,
    ) -> Result<(), DeviceEngineError>;
    fn refine_inputs(&self) -> Result<RefineHost, DeviceEngineError>;
    fn apply_rows(&mut self, plan: &RowPlan) -> Result<(), DeviceEngineError>;
    fn reset_opacity(&mut self, max_opacity: f32) -> Result<(), DeviceEngineError>;
    /// The training cameras of the 3D filter ([`DeviceEngine::set_filter_cameras`]).
    fn set_filter_cameras(&mut self, rows: &[f32]) -> Result<(), DeviceEngineError>;
    /// Sets the 3D filter of the current model, which every render then goes through
    /// ([`DeviceEngine::filter_rates`], [`DeviceEngine::filter_finish`]).
    fn refresh_filter(&mut self) -> Result<(), DeviceEngineError>;
    /// [`DeviceEngine::reset_opacity_through`] of the whole model.
    fn reset_opacity_through(&mut self, max_opacity: f32) -> Result<(), DeviceEngineError>;
    /// Appends the filter the last [`Self::refresh_filter`] set, one value per Gaussian in row
    /// order, to `out` (for a saved model's folded values).
    fn append_filter(&self, out: &mut Vec<f32>) -> Result<(), DeviceEngineError>;
    fn adam_step(
        &mut self,
        cfg: &AdamConfig,
        lr: &LearningRates,
        mask: GroupMask,
    ) -> Result<(), DeviceEngineError>;
    fn row_values(&self) -> Result<Model, DeviceEngineError>;
    fn add_noise(&mut self, noise: NoiseStep) -> Result<(), DeviceEngineError>;
    /// Renders `camera`; the image (`[H, W, 3]`) on the host.
    fn render(
        &mut self,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<&mut [f32], DeviceEngineError>;
    fn load_mcmc(&mut self) -> Result<(), DeviceEngineError>;
    fn mcmc_loaded(&self) -> bool;
    /// Starts timing the step about to run on the device's queue ([`PhaseTimes`]); false
    /// where the engine does not profile (several devices: their queues overlap).
    fn profile_start(&mut self) -> Result<bool, DeviceEngineError> {
        Ok(false)
    }
    /// The profiled step's phases (see [`DeviceEngine::profile_finish`]).
    fn profile_finish(&mut self) -> Result<Option<PhaseTimes>, DeviceEngineError> {
        Ok(None)
    }
}

impl ResidentEngine for DeviceEngine {
    fn device(&self) -> &Device {
        DeviceEngine::device(self)
    }
    fn len(&self) -> usize {
        DeviceEngine::len(self)
    }
    fn upload_model(&mut self, model: &Model) -> Result<(), DeviceEngineError> {
        DeviceEngine::upload_model(self, model)
    }
    fn download_model(&self) -> Result<Model, DeviceEngineError> {
        DeviceEngine::download_model(self)
    }
    fn stage_view(
        &mut self,
        frame: Frame<'_>,
        rgb_len: usize,
        masked: bool,
        depth_plane: bool,
        exposure: Option<&Exposure>,
    ) -> Result<(), DeviceEngineError> {
        DeviceEngine::stage_view(self, frame, rgb_len, masked, depth_plane, exposure)
    }
    fn stage_grid(&mut self, shape: GridShape, grid: &[f32]) -> Result<(), DeviceEngineError> {
        DeviceEngine::stage_grid(self, shape, grid)
    }
    fn grid_grad_into(&self, out: &mut Vec<f64>) -> Result<(), DeviceEngineError> {
        DeviceEngine::grid_grad_into(self, out)
    }
    fn upload_grids(&mut self, grids: &BilateralGrids) -> Result<bool, DeviceEngineError> {
        DeviceEngine::upload_grids(self, grids).map(|()| true)
    }
    fn download_grids_into(&self, grids: &mut BilateralGrids) -> Result<(), DeviceEngineError> {
        DeviceEngine::download_grids_into(self, grids)
    }
    fn stage_grid_slot(&mut self, slot: usize) -> Result<(), DeviceEngineError> {
        DeviceEngine::stage_grid_slot(self, slot)
    }
    fn grid_step(
        &mut self,
        lr: f64,
        tv_weight: f64,
        t: u64,
        with_grad: bool,
    ) -> Result<f64, DeviceEngineError> {
        DeviceEngine::grid_step(self, lr, tv_weight, t, with_grad)
    }
    fn forward_backward(
        &mut self,
        camera: &Camera,
        options: &RenderOptions,
        lambda_dssim: f32,
        depth: Option<DepthLoss>,
    ) -> Result<StepScalars, DeviceEngineError> {
        DeviceEngine::forward_backward(self, camera, options, lambda_dssim, depth)
    }
    fn regularize(&mut self, reg: Regularizer) -> Result<f64, DeviceEngineError> {
        DeviceEngine::regularize(self, reg)
    }
    fn accumulate_stats(
        &mut self,
        width: u32,
        height: u32,
        absgrad: bool,
    ) -> Result<(), DeviceEngineError> {
        DeviceEngine::accumulate_stats(self, width, height, absgrad)
    }
    fn refine_inputs(&self) -> Result<RefineHost, DeviceEngineError> {
        DeviceEngine::refine_inputs(self)
    }
    fn apply_rows(&mut self, plan: &RowPlan) -> Result<(), DeviceEngineError> {
        DeviceEngine::apply_rows(self, plan)
    }
    fn reset_opacity(&mut self, max_opacity: f32) -> Result<(), DeviceEngineError> {
        DeviceEngine::reset_opacity(self, max_opacity)
    }
    fn set_filter_cameras(&mut self, rows: &[f32]) -> Result<(), DeviceEngineError> {
        DeviceEngine::set_filter_cameras(self, rows)
    }
    fn refresh_filter(&mut self) -> Result<(), DeviceEngineError> {
        // Both steps in the queue: nothing waits for the host.
        self.filter_rates()?;
        self.filter_finish()
    }
    fn reset_opacity_through(&mut self, max_opacity: f32) -> Result<(), DeviceEngineError> {
        DeviceEngine::reset_opacity_through(self, max_opacity)
    }
    fn append_filter(&self, out: &mut Vec<f32>) -> Result<(), DeviceEngineError> {
        let n = self.params.n;
        let buf = match self.raster.filter_3d() {
            Some((buf, len)) if len == n => buf,
            _ => {
                return Err(DeviceEngineError::Filter(
                    "no filter of the current model was set (refresh_filter)".into(),
                ))
            }
        };
        let start = out.len();
        out.resize(start + n, 0.0);
        self.dev.download(buf, &mut out[start..])?;
        Ok(())
    }
    fn adam_step(
        &mut self,
        cfg: &AdamConfig,
        lr: &LearningRates,
        mask: GroupMask,
    ) -> Result<(), DeviceEngineError> {
        DeviceEngine::adam_step(self, cfg, lr, mask)
    }
    fn row_values(&self) -> Result<Model, DeviceEngineError> {
        DeviceEngine::row_values(self)
    }
    fn add_noise(&mut self, noise: NoiseStep) -> Result<(), DeviceEngineError> {
        DeviceEngine::add_noise(self, noise)
    }
    fn render(
        &mut self,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<&mut [f32], DeviceEngineError> {
        DeviceEngine::render(self, camera, options)
    }
    fn load_mcmc(&mut self) -> Result<(), DeviceEngineError> {
        DeviceEngine::load_mcmc(self)
    }
    fn mcmc_loaded(&self) -> bool {
        DeviceEngine::mcmc_loaded(self)
    }
    fn profile_start(&mut self) -> Result<bool, DeviceEngineError> {
        DeviceEngine::profile_start(self)?;
        Ok(true)
    }
    fn profile_finish(&mut self) -> Result<Option<PhaseTimes>, DeviceEngineError> {
        DeviceEngine::profile_finish(self)
    }
}

/// The MCMC kernels of `slot`, loaded on `dev` at first use (only MCMC runs need them).
fn loaded<'a>(
    slot: &'a mut Option<DeviceMcmc>,
    dev: &Device,
) -> Result<&'a mut DeviceMcmc, DeviceEngineError> {
    Ok(match slot {
        Some(m) => m,
        None => slot.insert(DeviceMcmc::new(dev)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::scene::camera::Projection;
    use crate::scene::gaussians::Gaussians;
    use crate::train::densify::{DefaultStrategy, ViewStats, RENDER_BYTES_PER_GAUSSIAN};

    fn model(n: usize, rng: &mut Rng) -> Model {
        let mut g = Gaussians::zeros(n, 1);
        for f in Field::ALL {
            g.field_mut(f).fill_with(|| rng.next_f32());
        }
        let mut m = Model::new(g);
        m.adam.steps = [1, 2, 3, 4, 5, 6];
        for i in 0..n {
            m.adam.exp_avg.means[i] = [i as f32; 3];
            m.adam.exp_avg_sq.sh[4 * i + 3] = [0.5 + i as f32; 3];
            m.stats.grad_accum[i] = i as f32 * 0.25;
            m.stats.denom[i] = i as u32;
            m.stats.max_radii[i] = 2 * i as u32;
        }
        m
    }

    /// `download_model_into` writes exactly its rows of a larger model (what the sharded
    /// engine assembles its shards with) and refuses a model too small or of another degree.
    #[test]
    fn a_download_fills_its_rows_of_a_larger_model_only() {
        let dev = Device::emulated().unwrap();
        let mut e = DeviceEngine::new(dev).unwrap();
        let mut rng = Rng::new(5);
        let m = model(7, &mut rng);
        e.upload_model(&m).unwrap();
        let mut big = model(12, &mut rng);
        big.adam.steps = [9; 6];
        let before = big.clone();
        e.download_model_into(&mut big, 3).unwrap();
        let rows = |m: &Model, r: std::ops::Range<usize>| {
            let src: Vec<u32> = (r.start as u32..r.end as u32).collect();
            (
                m.gaussians.gather(&src, None),
                m.adam.exp_avg.gather(&src, None),
                m.adam.exp_avg_sq.gather(&src, None),
                m.stats.grad_accum[r.clone()].to_vec(),
                m.stats.denom[r.clone()].to_vec(),
                m.stats.max_radii[r].to_vec(),
            )
        };
        assert_eq!(
            rows(&big, 3..10),
            rows(&m, 0..7),
            "rows 3..10 are the device's"
        );
        assert_eq!(
            rows(&big, 0..3),
            rows(&before, 0..3),
            "rows before untouched"
        );
        assert_eq!(
            rows(&big, 10..12),
            rows(&before, 10..12),
            "rows after untouched"
        );
        assert_eq!(big.adam.steps, before.adam.steps, "rows only");
        let mut small = model(9, &mut rng);
        assert!(matches!(
            e.download_model_into(&mut small, 3),
            Err(DeviceEngineError::Cuda(CudaError::Shape { need: 10, .. }))
        ));
        let mut other = Model::new(Gaussians::zeros(12, 2));
        assert!(matches!(
            e.download_model_into(&mut other, 0),
            Err(DeviceEngineError::Cuda(CudaError::Shape { .. }))
        ));
    }

    #[test]
    fn the_model_round_trips_through_the_device() {
        for dev in crate::device::test_devices() {
            let mut e = DeviceEngine::new(dev.clone()).unwrap();
            let mut rng = Rng::new(3);
            // Larger, then smaller (buffers only grow; the count is what matters).
            for n in [37, 5, 0] {
                let m = model(n, &mut rng);
                e.upload_model(&m).unwrap();
                assert_eq!(e.len(), n);
                assert_eq!(e.download_model().unwrap(), m, "{} n={n}", dev.name());
            }
        }
    }

    #[test]
    fn statistics_kernel_matches_the_host_strategy() {
        for dev in crate::device::test_devices() {
            let mut rng = Rng::new(5);
            let n = 300;
            let mut m = model(n, &mut rng);
            let radii: Vec<u32> = (0..n as u32)
                .map(|i| if i % 3 == 0 { 0 } else { i % 41 })
                .collect();
            let grads: Vec<[f32; 2]> = (0..n)
                .map(|_| [rng.normal() as f32 * 1e-3, rng.normal() as f32 * 1e-3])
                .collect();
            let mut e = DeviceEngine::new(dev.clone()).unwrap();
            e.upload_model(&m).unwrap();
            let mut d_radii = dev.alloc::<u32>(n).unwrap();
            dev.upload(&radii, &mut d_radii).unwrap();
            let mut d_grads = dev.alloc::<f32>(2 * n).unwrap();
            dev.upload(grads.as_flattened(), &mut d_grads).unwrap();
            e.accumulate_from(61, 47, &d_radii, &d_grads).unwrap();
            e.accumulate_from(61, 47, &d_radii, &d_grads).unwrap();
            let view = ViewStats {
                width: 61,
                height: 47,
                radii: &radii,
                means2d_grad: &grads,
            };
            DefaultStrategy::add_view(&mut m, &view);
            DefaultStrategy::add_view(&mut m, &view);
            let got = e.download_model().unwrap();
            assert_eq!(
                got.stats,
                m.stats,
                "{}: bit-identical statistics",
                dev.name()
            );
        }
    }

    /// A refinement (clone, split, prune, then an opacity reset) planned once and applied by
    /// the host ([`Model::apply_rows`], [`Model::reset_opacity`]) and by the device kernels:
    /// the same model, bit for bit (parameters, both moments, statistics).
    #[test]
    fn refinement_kernels_match_the_host_edit() {
        use crate::train::densify::{
            DefaultStrategy, DensifyConfig, DensifyStrategy, ModelMemory, RefineContext,
        };
        for dev in crate::device::test_devices() {
            let mut rng = Rng::new(11);
            let n = 400;
            let mut m = model(n, &mut rng);
            for i in 0..n {
                // Large and small Gaussians, some transparent, gradients around the threshold,
                // screen radii around the prune limit.
                let s = if i % 2 == 0 { -1.0 } else { -6.0 };
                m.gaussians.log_scales[i] = [s, s + 0.1 * rng.next_f32(), s];
                m.gaussians.logit_opacities[i] = rng.uniform(-7.0, 3.0) as f32;
                m.stats.grad_accum[i] = rng.next_f32() * 8e-4;
                m.stats.denom[i] = 1 + (i % 3) as u32;
                m.stats.max_radii[i] = (i % 30) as u32;
                m.adam.exp_avg.logit_opacities[i] = -0.25;
                m.adam.exp_avg_sq.logit_opacities[i] = 0.5;
            }
            let mut e = DeviceEngine::new(dev.clone()).unwrap();
            e.upload_model(&m).unwrap();
            let mut strategy = DefaultStrategy::new(DensifyConfig {
                max_gaussians: 500,
                ..DensifyConfig::default()
            });
            let mut memory = ModelMemory::default();
            let mut draws = Rng::new(4);
            let mut ctx = RefineContext {
                // A densify and reset iteration past the first reset (prunes large ones).
                iteration: 6000,
                extent: 3.0,
                white_background: false,
                rng: &mut draws,
                memory: &mut memory,
                make_room: &mut |_| 0,
                filter_cameras: None,
            };
            let host_inputs = e.refine_inputs().unwrap();
            assert_eq!(host_inputs.stats, m.stats);
            let edit = strategy
                .refine_plan(&host_inputs.inputs(), &mut ctx)
                .unwrap();
            let rows = edit.rows.as_ref().unwrap();
            let o = &edit.outcome;
            assert!(o.cloned > 0 && o.split > 0 && o.pruned > 0, "{o:?}");
            assert!(o.opacity_reset && o.growth_stopped.is_some(), "{o:?}");
            assert_eq!(
                rows.src.len(),
                500 - o.pruned,
                "capped at 500 before pruning"
            );
            m.apply_rows(rows);
            m.reset_opacity(edit.reset_opacity.unwrap());
            dev.reset_peak();
            let held = dev.usage().live;
            e.apply_rows(rows).unwrap();
            // One field's new rows at a time beside the model (and the plan's index), never a
            // second copy of it: the memory plan's edit item bounds the peak.
            let used = dev.usage();
            let edit_bytes = rows.src.len() as u64 * edit_bytes_per_gaussian(1);
            assert!(
                used.peak <= held.max(used.live) + edit_bytes,
                "{}: the edit peaked at {} B, holding {held} B before and {} B after; plan \
                 {edit_bytes} B beside the model",
                dev.name(),
                used.peak,
                used.live
            );
            e.reset_opacity(edit.reset_opacity.unwrap()).unwrap();
            let got = e.download_model().unwrap();
            assert_eq!(got.len(), m.len());
            assert!(
                got == m,
                "{}: the device edit differs from the host's",
                dev.name()
            );
        }
    }

    /// Mip-Splatting's 3D filter set by the device kernels equals `filter3d::compute` bit for
    /// bit (the same f32 operations; unseen Gaussians at the lowest rate seen), and the opacity
    /// reset through it equals [`Model::reset_opacity_through`].
    #[test]
    fn filter_kernels_match_the_host() {
        use crate::scene::camera::{Intrinsics, Pose};
        let cams: Vec<Camera> = (0..5)
            .map(|k| {
                let a = k as f64 * 0.7;
                let centre = [4.0 * a.sin(), 0.3 * k as f64, -4.0 * a.cos()];
                // Looking at the origin.
                let f = [-centre[0], -centre[1], -centre[2]];
                let n = (f[0] * f[0] + f[1] * f[1] + f[2] * f[2]).sqrt();
                let z = f.map(|v| v / n);
                let x = [z[2], 0.0, -z[0]];
                let xn = (x[0] * x[0] + x[2] * x[2]).sqrt();
                let x = x.map(|v| v / xn);
                let y = [
                    z[1] * x[2] - z[2] * x[1],
                    z[2] * x[0] - z[0] * x[2],
                    z[0] * x[1] - z[1] * x[0],
                ];
                let c2w = [[x[0], y[0], z[0]], [x[1], y[1], z[1]], [x[2], y[2], z[2]]];
                Camera {
                    width: 64 + 16 * k,
                    height: 48,
                    intrinsics: Intrinsics {
                        fx: 60.0 + 10.0 * k as f64,
                        fy: 62.0,
                        cx: 30.0,
                        cy: 25.0,
                    },
                    world_to_camera: Pose::from_camera_to_world(c2w, centre),
                    // The last two are equidistant fisheyes.
                    projection: if k >= 3 {
                        Projection::Fisheye
                    } else {
                        Projection::Pinhole
                    },
                }
            })
            .collect();
        let rows = filter3d::camera_rows(&cams);
        for dev in crate::device::test_devices() {
            let mut rng = Rng::new(21);
            let n = 500;
            let mut m = model(n, &mut rng);
            for i in 0..n {
                // Most near the origin (seen), some far off (unseen), one behind everything.
                let spread = if i % 7 == 0 { 40.0 } else { 1.5 };
                m.gaussians.means[i] = [0; 3].map(|_| rng.uniform(-spread, spread) as f32);
                let s = rng.uniform(-6.0, -1.0) as f32;
                m.gaussians.log_scales[i] = [s, s + 0.5, s - 0.5];
                m.gaussians.logit_opacities[i] = rng.uniform(-6.0, 6.0) as f32;
                m.adam.exp_avg.logit_opacities[i] = 0.5;
            }
            let mut e = DeviceEngine::new(dev.clone()).unwrap();
            e.upload_model(&m).unwrap();
            e.set_filter_cameras(&rows).unwrap();
            ResidentEngine::refresh_filter(&mut e).unwrap();
            let mut want = Vec::new();
            filter3d::compute(&m.gaussians.means, &rows, &mut want);
            let mut got = vec![0.0f32; n];
            dev.download(e.raster.filter_3d_buffer(n).unwrap(), &mut got)
                .unwrap();
            let differ = (0..n)
                .filter(|&i| got[i].to_bits() != want[i].to_bits())
                .count();
            assert_eq!(differ, 0, "{}: {differ} of {n} filters differ", dev.name());
            let seen = (0..n)
                .filter(|&i| filter3d::sampling_rate(m.gaussians.means[i], &rows) > 0.0)
                .count();
            assert!(
                seen > n / 2 && seen < n,
                "{seen} of {n} seen: both kinds tested"
            );
            m.reset_opacity_through(0.01, &want);
            e.reset_opacity_through(0.01).unwrap();
            let back = e.download_model().unwrap();
            let max_diff = back
                .gaussians
                .logit_opacities
                .iter()
                .zip(&m.gaussians.logit_opacities)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            // In double on both sides; libm's and the device's exp/log may differ by an ulp.
            assert!(
                max_diff <= 1e-5,
                "{}: opacities differ by {max_diff}",
                dev.name()
            );
            assert_eq!(
                back.adam,
                m.adam,
                "{}: the opacity moments zeroed",
                dev.name()
            );
        }
    }

    /// MCMC's relocation and growth, planned on the host from [`DeviceEngine::row_values`] and
    /// applied by the device's row kernels (opacity replacements by `set_rows1`, fresh rows'
    /// moments zeroed, appended rows growing the buffers): the host edit, bit for bit.
    #[test]
    fn mcmc_row_plans_match_the_host_edit() {
        use crate::train::densify::{DensifyStrategy, ModelMemory, RefineContext};
        use crate::train::mcmc::{McmcConfig, McmcStrategy};
        for dev in crate::device::test_devices() {
            let mut rng = Rng::new(13);
            let n = 300;
            let mut m = model(n, &mut rng);
            for i in 0..n {
                // A third dead (≤ 0.005), the rest spread over (0.01, 0.95).
                m.gaussians.logit_opacities[i] = if i % 3 == 0 {
                    -7.0
                } else {
                    rng.uniform(-4.5, 3.0) as f32
                };
            }
            let mut e = DeviceEngine::new(dev.clone()).unwrap();
            e.upload_model(&m).unwrap();
            let mut strategy = McmcStrategy::new(McmcConfig {
                refine_start_iter: 5,
                refine_every: 10,
                ..McmcConfig::with_cap(330)
            });
            let mut rows = e.row_values().unwrap();
            assert_eq!(rows.gaussians.means, m.gaussians.means);
            assert_eq!(rows.gaussians.log_scales, m.gaussians.log_scales);
            assert_eq!(rows.gaussians.logit_opacities, m.gaussians.logit_opacities);
            let mut memory = ModelMemory::default();
            let mut draws = Rng::new(4);
            let mut ctx = RefineContext {
                iteration: 10,
                extent: 3.0,
                white_background: false,
                rng: &mut draws,
                memory: &mut memory,
                make_room: &mut |_| 0,
                filter_cameras: None,
            };
            assert!(strategy.plans_rows_after_step(10, false));
            let edit = strategy.after_step_edit(&mut rows, &mut ctx, 1e-4, false);
            assert_eq!(edit.outcome.relocated, 100);
            assert_eq!(edit.outcome.added, 15, "300 · 1.05 = 315");
            assert_eq!(edit.rows.len(), 2);
            for plan in &edit.rows {
                m.apply_rows(plan);
                e.apply_rows(plan).unwrap();
            }
            let got = e.download_model().unwrap();
            assert_eq!(got.len(), 315);
            assert!(
                got == m,
                "{}: the device edit differs from the host's",
                dev.name()
            );
        }
    }

    /// `n` Gaussians at SH degree 2 in front of a rotated 56×40 camera (most on screen, a few
    /// behind it), and that camera: a scene where every pose component matters.
    fn pose_scene(n: usize, seed: u64) -> (Gaussians, Camera) {
        use crate::scene::camera::{Intrinsics, Pose};
        let pose = Pose::from_quaternion_wxyz([0.97, 0.12, -0.18, 0.06], [0.3, -0.2, 0.4]).unwrap();
        let cam = Camera {
            width: 56,
            height: 40,
            intrinsics: Intrinsics {
                fx: 50.0,
                fy: 50.0,
                cx: 29.5,
                cy: 19.25,
            },
            world_to_camera: pose,
            projection: Projection::Pinhole,
        };
        let mut rng = Rng::new(seed);
        let mut g = Gaussians::zeros(n, 2);
        let (r, t) = (pose.rotation, pose.translation);
        for i in 0..n {
            let z = if i % 17 == 0 {
                rng.uniform(-2.0, -0.1)
            } else {
                rng.uniform(1.5, 5.0)
            };
            let p = [rng.uniform(-0.6, 0.6) * z, rng.uniform(-0.4, 0.4) * z, z];
            // camera → world: Wᵀ·(p − w).
            let d = [p[0] - t[0], p[1] - t[1], p[2] - t[2]];
            g.means[i] =
                [0, 1, 2].map(|c| (r[0][c] * d[0] + r[1][c] * d[1] + r[2][c] * d[2]) as f32);
            g.log_scales[i] = [0, 1, 2].map(|_| rng.uniform(-3.5, -1.8) as f32);
            g.rotations[i] = [0, 1, 2, 3].map(|_| rng.normal() as f32);
            g.logit_opacities[i] = rng.uniform(-1.0, 3.0) as f32;
        }
        g.sh.iter_mut()
            .for_each(|c| *c = [0, 1, 2].map(|_| rng.normal() as f32 * 0.4));
        (g, cam)
    }

    /// The largest error of `got` against `want`, relative to the largest translation (ρ) or
    /// rotation (φ) component of `want` (their units differ).
    fn pose_error(got: &[f64; 6], want: &[f64; 6]) -> f64 {
        let mut worst = 0.0f64;
        for part in [0..3, 3..6] {
            let scale = want[part.clone()]
                .iter()
                .fold(0.0f64, |m, v| m.max(v.abs()));
            assert!(scale > 1e-3, "pose gradient {want:?}: too small to test");
            for k in part {
                worst = worst.max((got[k] - want[k]).abs() / scale);
            }
        }
        worst
    }

    /// The pose gradient of a device step ([`StepScalars::pose_grad`], read with the loss
    /// scalars) is the host rasterizer's for the same step: the host engine's loss (through
    /// the view's exposure when it has one) and its `∂L/∂image`, then the CPU backward with
    /// `pose_grad`. A step without the flag reads none (after one that had it), and an empty
    /// model's is zero, not the previous step's.
    #[test]
    fn step_pose_gradient_matches_the_host_rasterizer() {
        use crate::render::{CpuRasterizer, GaussianGrads, Rasterizer, RenderOutput};
        use crate::train::exposure;
        use crate::train::loss::LossScratch;
        let (g, cam) = pose_scene(1500, 17);
        let (w, h) = (cam.width as usize, cam.height as usize);
        let bytes: Vec<u8> = (0..3 * w * h).map(|i| (i * 37 % 251) as u8).collect();
        let target: Vec<f32> = bytes.iter().map(|&v| v as f32 * (1.0 / 255.0)).collect();
        let mut e = exposure::IDENTITY;
        e[0] = 1.1;
        e[5] = 0.9;
        e[1] = 0.05;
        e[3] = -0.02;
        e[11] = 0.03;
        for dev in crate::device::test_devices() {
            let mut engine = DeviceEngine::new(dev.clone()).unwrap();
            engine.upload_model(&Model::new(g.clone())).unwrap();
            for (antialiased, exposure) in [(false, None), (false, Some(e)), (true, Some(e))] {
                let opts = RenderOptions {
                    sh_degree: 2,
                    background: [0.1, 0.3, 0.2],
                    antialiased,
                    pose_grad: true,
                    ..RenderOptions::default()
                };
                let mut cpu = CpuRasterizer::<f32>::new();
                let mut out = RenderOutput::default();
                cpu.forward(&g, &cam, &opts, &mut out).unwrap();
                let mut seen = out.image.clone();
                if let Some(e) = &exposure {
                    exposure::apply(e, &out.image, &mut seen);
                }
                let mut d_image = Vec::new();
                let v = LossScratch::new()
                    .loss_and_grad(&seen, &target, w, h, 0.2, &mut d_image)
                    .unwrap();
                if let Some(e) = &exposure {
                    exposure::backward(e, &out.image, &mut d_image);
                }
                let mut grads = GaussianGrads::default();
                cpu.backward(&g, &cam, &opts, &d_image, &mut grads).unwrap();
                let want = grads.pose.expect("the CPU backward's pose gradient");

                engine
                    .stage_view(
                        Frame::Host(&bytes),
                        bytes.len(),
                        false,
                        false,
                        exposure.as_ref(),
                    )
                    .unwrap();
                let s = engine.forward_backward(&cam, &opts, 0.2, None).unwrap();
                assert!(
                    (s.loss - v.loss).abs() <= 1e-6 * v.loss,
                    "{} vs {}",
                    s.loss,
                    v.loss
                );
                assert_eq!(s.exposure_grad.is_some(), exposure.is_some());
                let got = s.pose_grad.expect("pose_grad asks for the pose gradient");
                let err = pose_error(&got, &want);
                eprintln!(
                    "MEASURED device step pose gradient {} aa={antialiased} exposure={}: \
                     max error {err:.2e} of scale",
                    dev.name(),
                    exposure.is_some()
                );
                // Measured: ≤ 3.7e-7 on the emulation, ≤ 6.7e-7 on an H100 (2026-11-26) and
                // ≤ 6.6e-7 on an H200 (2026-11-28) (the per-splat gradients' float atomics and
                // the order of the double sums).
                assert!(
                    err <= 1e-4,
                    "{}: device {got:?} vs host {want:?}",
                    dev.name()
                );

                // The same step without the flag: no pose gradient, the same loss.
                let plain = RenderOptions {
                    pose_grad: false,
                    ..opts
                };
                engine
                    .stage_view(
                        Frame::Host(&bytes),
                        bytes.len(),
                        false,
                        false,
                        exposure.as_ref(),
                    )
                    .unwrap();
                let s2 = engine.forward_backward(&cam, &plain, 0.2, None).unwrap();
                assert_eq!(s2.pose_grad, None);
                assert_eq!(s2.loss, s.loss);
            }
            // No Gaussians: a zero gradient, not the previous step's sums.
            let opts = RenderOptions {
                sh_degree: 2,
                pose_grad: true,
                ..RenderOptions::default()
            };
            engine
                .stage_view(Frame::Host(&bytes), bytes.len(), false, false, None)
                .unwrap();
            assert!(engine
                .forward_backward(&cam, &opts, 0.2, None)
                .unwrap()
                .pose_grad
                .is_some());
            engine
                .upload_model(&Model::new(Gaussians::zeros(0, 2)))
                .unwrap();
            engine
                .stage_view(Frame::Host(&bytes), bytes.len(), false, false, None)
                .unwrap();
            let s = engine.forward_backward(&cam, &opts, 0.2, None).unwrap();
            assert_eq!(s.pose_grad, Some([0.0; 6]), "{}", dev.name());
        }
    }

    #[test]
    fn device_bytes_itemise_the_plan() {
        let b = device_bytes(1000, 1, 3, 640 * 480, false, false, 1 << 20);
        // SH 3: P = 59 floats. Parameters 4P, gradients 4(P + 2), moments 8P (952 B),
        // statistics 12, the device rasterizer's buffers 140, a densification's one field of
        // new rows (the SH coefficients' 48 floats) and its indices 208.
        assert_eq!(b.model, 1000 * (952 + 12 + 140 + 208));
        assert_eq!(
            b.model,
            1000 * (model_bytes(1, 3) - RENDER_BYTES_PER_GAUSSIAN - 192 + 140 + 4 * 48 + 16)
        );
        assert_eq!(
            edit_bytes_per_gaussian(0),
            4 * 4 + 16,
            "degree 0: the rotations"
        );
        assert_eq!(b.views, 85 * 640 * 480);
        assert_eq!(b.total(), b.model + b.views + (1 << 20));
        // Exposure compensation and depth regularization add their planes per pixel.
        let d = device_bytes(1000, 1, 3, 640 * 480, true, true, 1 << 20);
        assert_eq!(d.views, (85 + 13 + 11) * 640 * 480);
        assert_eq!(d.model, b.model);
        assert_eq!(b.edit_chunks, 0, "one device moves no rows between devices");
        // Split over two: half the model each, every shard's splats for the view, and the
        // edit's two pieces of 16,384 rows of the SH coefficients.
        let s = device_bytes(1000, 2, 3, 640 * 480, false, false, 1 << 20);
        assert_eq!(s.model, b.model / 2);
        assert_eq!(s.gathered, 1000 * 140);
        assert_eq!(s.edit_chunks, 2 * 16_384 * 4 * 48);
        assert_eq!(
            s.total(),
            s.model + s.gathered + s.views + (1 << 20) + s.edit_chunks
        );
    }
}
