//! The training loss on a device ([`DeviceLoss`]): `kernels/loss.cu`, the twin of
//! [`super::loss::LossScratch::loss_and_grad`] (0.8·L1 + 0.2·(1 − SSIM) and `∂L/∂image`) and of
//! the trainer's RGB8 → f32 conversion, on either device driver. Everything stays on the device:
//! the gradient goes straight to the rasterizer's resident backward and the loss scalars
//! ([`LOSS_SCALARS`]: loss, L1, SSIM, MSE) land in a small device buffer the caller reads.
//!
//! Parity: the kernels repeat the CPU's operations in the CPU's order (same window values, same
//! zero padding, no contraction), so on the host emulation `∂L/∂image` is bit-identical to the
//! CPU and the scalars differ only by the order of their double sums; on a GPU the same holds
//! (no transcendental functions are involved). Checked by this module's tests on both drivers;
//! on an NVIDIA H200 (CUDA 13.0, 2026-11-28) the loss, exposure, mask, depth and bilateral-grid
//! kernels and the grids' Adam were bit-identical to the CPU where the tests ask for it.
//!
//! The SSIM works on 16×16 pixel tiles with their window's halo in shared memory, so the only
//! scratch in global memory is the 9 coefficient planes between its two kernels (36 bytes per
//! pixel). Invariant: the scratch only grows, so a training loop allocates nothing after its
//! first step.

use std::collections::HashMap;

use crate::device::{
    Device, DeviceBuffer, DeviceError, Function, KernelArg, LaunchConfig, ModuleSource,
};
use crate::metrics::{window_1d, SSIM_C1, SSIM_C2, SSIM_WINDOW};
use crate::shard::DepthScale;
use crate::train::bilagrid::GridShape;

use KernelArg::{F32, F64, U32, U64};

/// Values `loss_and_grad` writes: loss, L1, SSIM and the mean squared error (for the PSNR).
pub const LOSS_SCALARS: usize = 4;

/// Threads per block of the loss kernels (a power of two: the block reductions halve it).
pub const LOSS_BLOCK: u32 = 256;

/// Side of the SSIM kernels' square pixel tiles: one block each, a thread per pixel.
pub const LOSS_TILE: u32 = 16;
const _: () = assert!(LOSS_TILE * LOSS_TILE == LOSS_BLOCK);

const ENTRY_POINTS: [&str; 14] = [
    "rgb8_to_f32",
    "apply_mask",
    "ssim_fwd",
    "loss_grad",
    "loss_finish",
    "exposure_apply",
    "exposure_bwd",
    "exposure_finish",
    "depth_l1",
    "depth_finish",
    "bilagrid_apply",
    "bilagrid_grad",
    "bilagrid_dx",
    "bilagrid_adam",
];

/// Floats of a view's exposure matrix ([`crate::train::exposure`]).
const EXPOSURE_LEN: usize = crate::train::exposure::EXPOSURE_LEN;

/// A C float literal that parses back to exactly `v` (shortest round-trip digits + `f`).
fn c_float(v: f32) -> String {
    let s = format!("{v:?}");
    if s.contains('.') || s.contains('e') {
        format!("{s}f")
    } else {
        format!("{s}.0f")
    }
}

/// `kernels/loss.cu` with its constants: the SSIM window exactly as the CPU rounds it to f32,
/// C1 and C2, the block size; and `common.cuh` spliced in (its block reduction) with the
/// rasterizer's constants that header requires.
pub fn module_source() -> ModuleSource {
    const NAMES: [&str; SSIM_WINDOW] = [
        "GS_SSIM_W0",
        "GS_SSIM_W1",
        "GS_SSIM_W2",
        "GS_SSIM_W3",
        "GS_SSIM_W4",
        "GS_SSIM_W5",
        "GS_SSIM_W6",
        "GS_SSIM_W7",
        "GS_SSIM_W8",
        "GS_SSIM_W9",
        "GS_SSIM_W10",
    ];
    let w = window_1d::<f32>();
    let mut defines = crate::render::cuda::kernels::defines();
    defines.extend(NAMES.iter().zip(w).map(|(n, v)| (*n, c_float(v))));
    defines.push(("GS_SSIM_C1", c_float(SSIM_C1 as f32)));
    defines.push(("GS_SSIM_C2", c_float(SSIM_C2 as f32)));
    defines.push(("GS_LOSS_BLOCK", LOSS_BLOCK.to_string()));
    defines.push(("GS_LOSS_TILE", LOSS_TILE.to_string()));
    ModuleSource {
        name: "loss.cu".into(),
        // loss.cu includes common.cuh alone, an embedded header (a unit test splices it).
        source: crate::render::cuda::kernels::spliced(
            "loss.cu",
            include_str!("../../kernels/loss.cu"),
        )
        .expect("loss.cu includes only embedded headers"),
        entry_points: ENTRY_POINTS.to_vec(),
        defines,
    }
}

/// Why a device loss evaluation failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceLossError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("device loss: `{what}` holds {got} values, the {width}x{height} image needs {need}")]
    Shape {
        what: &'static str,
        got: usize,
        need: usize,
        width: u32,
        height: u32,
    },
}

/// The loss kernels and their scratch planes on one device.
pub struct DeviceLoss {
    dev: Device,
    funcs: HashMap<&'static str, Function>,
    /// 9 coefficient planes, from `ssim_fwd` to `loss_grad`.
    coef: DeviceBuffer<f32>,
    s_part: DeviceBuffer<f64>,
    l1_part: DeviceBuffer<f64>,
    sq_part: DeviceBuffer<f64>,
    /// Per-block partial sums of the exposure gradient (`[12, blocks]`).
    exposure_part: DeviceBuffer<f64>,
    /// Per-block partial sums of the depth L1.
    depth_part: DeviceBuffer<f64>,
    /// The grids' optimizer's per-block total variation sums.
    grid_part: DeviceBuffer<f64>,
}

impl DeviceLoss {
    /// Compiles (or loads cached) `kernels/loss.cu` on `dev`.
    pub fn new(dev: &Device) -> Result<DeviceLoss, DeviceError> {
        let m = dev.load_module(&module_source())?;
        let mut funcs = HashMap::new();
        for e in ENTRY_POINTS {
            funcs.insert(e, m.function(e)?.clone());
        }
        Ok(DeviceLoss {
            dev: dev.clone(),
            funcs,
            coef: dev.alloc(1)?,
            s_part: dev.alloc(1)?,
            l1_part: dev.alloc(1)?,
            sq_part: dev.alloc(1)?,
            exposure_part: dev.alloc(1)?,
            depth_part: dev.alloc(1)?,
            grid_part: dev.alloc(1)?,
        })
    }

    /// # Safety
    /// As [`Device::launch`]: `args` match the entry point and the buffers hold what it
    /// indexes (the public methods check shapes first).
    unsafe fn go(
        &self,
        name: &'static str,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<(), DeviceError> {
        // SAFETY: forwarded from this function's contract; every name is in ENTRY_POINTS.
        unsafe { self.dev.launch(&self.funcs[name], cfg, args) }
    }

    /// `dst[..n] = src[..n] / 255` (the uploaded RGB8 view as the trainer's f32 target).
    pub fn rgb8_to_f32(
        &self,
        src: &DeviceBuffer<u8>,
        n: usize,
        dst: &mut DeviceBuffer<f32>,
    ) -> Result<(), DeviceLossError> {
        if src.len() < n || dst.len() < n {
            return Err(DeviceLossError::Shape {
                what: "rgb8 source or f32 destination",
                got: src.len().min(dst.len()),
                need: n,
                width: 0,
                height: 0,
            });
        }
        if n == 0 {
            return Ok(());
        }
        let args = [U64(n as u64), src.arg(), dst.arg()];
        // SAFETY: matches rgb8_to_f32 in kernels/loss.cu; both buffers hold n values (checked).
        unsafe {
            self.go(
                "rgb8_to_f32",
                LaunchConfig::linear(n as u64, LOSS_BLOCK)?,
                &args,
            )
        }?;
        Ok(())
    }

    /// Loss of `img` against `target` (both `[H, W, 3]`), writing `∂loss/∂img` into `d_image`
    /// and `[loss, L1, SSIM, MSE]` into `out` ([`LOSS_SCALARS`] doubles), all on the device.
    /// Zeroes the three channels of `plane` (`3 · n_pixels` floats) at every pixel whose byte
    /// of `frame[mask_offset..]` is 0: the device twin of [`super::loss::apply_mask`].
    pub fn apply_mask(
        &self,
        frame: &DeviceBuffer<u8>,
        mask_offset: usize,
        n_pixels: usize,
        plane: &mut DeviceBuffer<f32>,
    ) -> Result<(), DeviceLossError> {
        if frame.len() < mask_offset + n_pixels || plane.len() < 3 * n_pixels {
            return Err(DeviceLossError::Shape {
                what: "mask frame or plane",
                got: frame.len().min(plane.len()),
                need: mask_offset + n_pixels,
                width: 0,
                height: 0,
            });
        }
        if n_pixels == 0 {
            return Ok(());
        }
        let args = [
            U64(n_pixels as u64),
            frame.arg(),
            U64(mask_offset as u64),
            plane.arg(),
        ];
        // SAFETY: the kernel reads `frame[mask_offset..mask_offset + n_pixels]` and writes
        // `plane[..3 · n_pixels]`, both checked against the buffers' lengths above.
        unsafe {
            self.go(
                "apply_mask",
                LaunchConfig::linear(n_pixels as u64, LOSS_BLOCK)?,
                &args,
            )
        }?;
        Ok(())
    }

    /// `out = img` through the exposure `e` (12 floats, row-major 3×4), both `[n_pixels, 3]`:
    /// the device twin of [`crate::train::exposure::apply`].
    pub fn exposure_apply(
        &self,
        img: &DeviceBuffer<f32>,
        e: &DeviceBuffer<f32>,
        n_pixels: usize,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), DeviceLossError> {
        self.check_exposure(img, e, n_pixels, out.len())?;
        if n_pixels == 0 {
            return Ok(());
        }
        let args = [U64(n_pixels as u64), img.arg(), e.arg(), out.arg()];
        // SAFETY: matches exposure_apply in kernels/loss.cu; img and out hold 3·n_pixels
        // values and e 12 (checked above).
        unsafe {
            self.go(
                "exposure_apply",
                LaunchConfig::linear(n_pixels as u64, LOSS_BLOCK)?,
                &args,
            )
        }?;
        Ok(())
    }

    /// The adjoint of [`Self::exposure_apply`]: `d` holds `∂L/∂y` and becomes `∂L/∂img` in
    /// place; `∂L/∂e` (12 doubles) lands in `grad[offset..offset + 12]`. The device twin of
    /// [`crate::train::exposure::backward`] (the same `∂L/∂img` bits; the gradient summed per
    /// block, so it differs from the CPU's pixel-order sum by rounding).
    pub fn exposure_backward(
        &mut self,
        img: &DeviceBuffer<f32>,
        e: &DeviceBuffer<f32>,
        n_pixels: usize,
        d: &mut DeviceBuffer<f32>,
        grad: &mut DeviceBuffer<f64>,
        offset: usize,
    ) -> Result<(), DeviceLossError> {
        self.check_exposure(img, e, n_pixels, d.len())?;
        if grad.len() < offset + EXPOSURE_LEN {
            return Err(DeviceLossError::Shape {
                what: "exposure gradient",
                got: grad.len(),
                need: offset + EXPOSURE_LEN,
                width: 0,
                height: 0,
            });
        }
        let cfg = LaunchConfig::linear(n_pixels.max(1) as u64, LOSS_BLOCK)?;
        let blocks = cfg.grid.0 as usize;
        let dev = self.dev.clone();
        dev.grow(&mut self.exposure_part, EXPOSURE_LEN * blocks)?;
        // SAFETY: the argument lists match exposure_bwd and exposure_finish in
        // kernels/loss.cu; img and d hold 3·n_pixels values, e 12, the partials 12 per block
        // of `cfg` and grad offset + 12 (checked or grown above); exposure_finish runs one
        // block.
        unsafe {
            let args = [
                U64(n_pixels as u64),
                img.arg(),
                e.arg(),
                d.arg(),
                self.exposure_part.arg(),
            ];
            self.go("exposure_bwd", cfg, &args)?;
            let args = [
                U32(blocks as u32),
                self.exposure_part.arg(),
                U64(offset as u64),
                grad.arg(),
            ];
            self.go(
                "exposure_finish",
                LaunchConfig::linear(1, LOSS_BLOCK)?,
                &args,
            )?;
        }
        Ok(())
    }

    /// The depth loss of [`crate::train::depth::l1_and_grad`] on the device, against the
    /// targets `scale` makes of the stored inverse-depth plane at `frame[depth_offset..]` (a
    /// little-endian u16 per pixel, [`DepthScale::targets_into`] on the host): `d_out[..n] =
    /// weight·sign(render − target)/divisor` (0 where the plane holds no depth and on pixels
    /// the mask at `frame[mask_offset..]` excludes, when `mask_offset` is given) and the
    /// unweighted `Σ|render − target|/divisor` into `scalars[offset]` (`divisor`: the pixels,
    /// or a sparse plane's points, [`crate::train::depth::DepthConfig::divisor`]). With
    /// `final_t` (SfM points) the compared value is `render/A`, `A = 1 − final_t` held
    /// constant (gradient `weight·sign/(A·divisor)`), pixels with `A` below
    /// [`crate::train::depth::MIN_COVER`] left out. The same per-pixel bits as the CPU; the
    /// mean differs from it by the order of its double sum.
    #[allow(clippy::too_many_arguments)]
    pub fn depth_l1(
        &mut self,
        render: &DeviceBuffer<f32>,
        final_t: Option<&DeviceBuffer<f32>>,
        frame: &DeviceBuffer<u8>,
        mask_offset: Option<usize>,
        depth_offset: usize,
        scale: DepthScale,
        n_pixels: usize,
        divisor: usize,
        weight: f64,
        d_out: &mut DeviceBuffer<f32>,
        scalars: &mut DeviceBuffer<f64>,
        offset: usize,
    ) -> Result<(), DeviceLossError> {
        let mask_need = mask_offset.map_or(0, |o| o + n_pixels);
        for (what, got, need) in [
            ("depth render", render.len(), n_pixels),
            (
                "depth final transmittance",
                final_t.map_or(n_pixels, |t| t.len()),
                n_pixels,
            ),
            (
                "depth plane frame",
                frame.len(),
                depth_offset + 2 * n_pixels,
            ),
            ("depth gradient", d_out.len(), n_pixels),
            ("depth mask frame", frame.len(), mask_need),
            ("depth scalar", scalars.len(), offset + 1),
        ] {
            if got < need {
                return Err(DeviceLossError::Shape {
                    what,
                    got,
                    need,
                    width: 0,
                    height: 0,
                });
            }
        }
        if n_pixels == 0 {
            return Ok(());
        }
        if divisor == 0 {
            return Err(DeviceLossError::Shape {
                what: "depth mean's divisor",
                got: 0,
                need: 1,
                width: 0,
                height: 0,
            });
        }
        let cfg = LaunchConfig::linear(n_pixels as u64, LOSS_BLOCK)?;
        let blocks = cfg.grid.0 as usize;
        let dev = self.dev.clone();
        dev.grow(&mut self.depth_part, blocks)?;
        let step = (weight / divisor as f64) as f32;
        // SAFETY: the argument lists match depth_l1 and depth_finish in kernels/loss.cu;
        // render, final_t (when given; render stands in, unread, otherwise) and d_out hold
        // n_pixels values, the frame the depth plane's 2·n_pixels bytes
        // from depth_offset and the mask's bytes when masked (the only case it is read), the
        // partials one per block of `cfg` and the scalars offset + 1 (checked or grown
        // above); depth_finish runs one block.
        unsafe {
            let args = [
                U64(n_pixels as u64),
                render.arg(),
                // Not read unless normalized; any buffer of the right kind stands in.
                final_t.unwrap_or(render).arg(),
                U32(final_t.is_some().into()),
                F32(crate::train::depth::MIN_COVER),
                frame.arg(),
                U32(mask_offset.is_some().into()),
                U64(mask_offset.unwrap_or(0) as u64),
                U64(depth_offset as u64),
                F32(scale.scale),
                F32(scale.offset),
                F32(step),
                d_out.arg(),
                self.depth_part.arg(),
            ];
            self.go("depth_l1", cfg, &args)?;
            let args = [
                U32(blocks as u32),
                self.depth_part.arg(),
                U64(divisor as u64),
                U64(offset as u64),
                scalars.arg(),
            ];
            self.go("depth_finish", LaunchConfig::linear(1, LOSS_BLOCK)?, &args)?;
        }
        Ok(())
    }

    /// `out = img` through `grid` (a bilateral grid of `shape`), both `[height, width, 3]`:
    /// the device twin of [`crate::train::bilagrid::apply`] (the same bits on the emulation).
    /// The grid is read from `grid[grid_at..]` (a view's slot of resident grids).
    #[allow(clippy::too_many_arguments)]
    pub fn bilagrid_apply(
        &self,
        img: &DeviceBuffer<f32>,
        grid: &DeviceBuffer<f32>,
        grid_at: usize,
        shape: GridShape,
        width: u32,
        height: u32,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<(), DeviceLossError> {
        let n_pixels = self.check_grid(img, grid, grid_at, shape, width, height, out.len())?;
        if n_pixels == 0 {
            return Ok(());
        }
        let args = [
            U32(width),
            U32(height),
            U32(shape.x),
            U32(shape.y),
            U32(shape.l),
            img.arg(),
            grid.arg_at(grid_at),
            out.arg(),
        ];
        // SAFETY: matches bilagrid_apply in kernels/loss.cu; img and out hold 3·width·height
        // values and grid the shape's floats from grid_at (checked above).
        unsafe {
            self.go(
                "bilagrid_apply",
                LaunchConfig::linear(n_pixels as u64, LOSS_BLOCK)?,
                &args,
            )
        }?;
        Ok(())
    }

    /// The adjoint of [`Self::bilagrid_apply`]: `d` holds `∂L/∂y` and becomes `∂L/∂img` in
    /// place; `∂L/∂grid` (the shape's floats, f64) is written to `grad` (grown to fit). The
    /// device twin of [`crate::train::bilagrid::backward`]: the same `∂L/∂img` bits on the
    /// emulation; the grid gradient summed per cell in another fixed order (deterministic,
    /// equal to the CPU's up to rounding).
    #[allow(clippy::too_many_arguments)]
    pub fn bilagrid_backward(
        &self,
        img: &DeviceBuffer<f32>,
        grid: &DeviceBuffer<f32>,
        grid_at: usize,
        shape: GridShape,
        width: u32,
        height: u32,
        d: &mut DeviceBuffer<f32>,
        grad: &mut DeviceBuffer<f64>,
    ) -> Result<(), DeviceLossError> {
        let n_pixels = self.check_grid(img, grid, grid_at, shape, width, height, d.len())?;
        self.dev.grow(grad, shape.floats())?;
        let dims = [
            U32(width),
            U32(height),
            U32(shape.x),
            U32(shape.y),
            U32(shape.l),
        ];
        // SAFETY: the argument lists match bilagrid_grad and bilagrid_dx in kernels/loss.cu;
        // img and d hold 3·width·height values, grid (from grid_at) and grad the shape's
        // floats (checked or grown above); bilagrid_grad runs one block per cell and writes every cell, and reads
        // d before bilagrid_dx (queued after it on the same stream) overwrites it.
        unsafe {
            let mut args = dims.to_vec();
            args.extend([img.arg(), d.arg(), grad.arg()]);
            let cells = LaunchConfig {
                grid: (shape.cells() as u32, 1, 1),
                block: (LOSS_BLOCK, 1, 1),
            };
            self.go("bilagrid_grad", cells, &args)?;
            if n_pixels > 0 {
                let mut args = dims.to_vec();
                args.extend([img.arg(), grid.arg_at(grid_at), d.arg()]);
                self.go(
                    "bilagrid_dx",
                    LaunchConfig::linear(n_pixels as u64, LOSS_BLOCK)?,
                    &args,
                )?;
            }
        }
        Ok(())
    }

    /// One optimizer step of `views` grids of `shape` held in `values` (their Adam moments in
    /// `m`, `v`): the device twin of [`crate::train::bilagrid::BilateralGrids::step`] (the same
    /// bits on the emulation). The stepped grids go to `next` (the caller swaps the two);
    /// `slot`: the view whose loss gradient (the shape's floats, f64) joins its total
    /// variation's. The total variation before the step lands in `tv[0]`.
    #[allow(clippy::too_many_arguments)]
    pub fn bilagrid_adam(
        &mut self,
        shape: GridShape,
        views: usize,
        values: &DeviceBuffer<f32>,
        next: &mut DeviceBuffer<f32>,
        m: &mut DeviceBuffer<f32>,
        v: &mut DeviceBuffer<f32>,
        slot: Option<(usize, &DeviceBuffer<f64>)>,
        tv_weight: f64,
        coef: &crate::train::adam::Coef,
        tv: &mut DeviceBuffer<f64>,
    ) -> Result<(), DeviceLossError> {
        let n = views * shape.floats();
        let short = |what, got| DeviceLossError::Shape {
            what,
            got,
            need: n,
            width: 0,
            height: 0,
        };
        for (what, got) in [
            ("bilateral grids", values.len()),
            ("bilateral grids (next)", next.len()),
            ("bilateral grid moments", m.len().min(v.len())),
        ] {
            if got < n || shape.invalid().is_some() {
                return Err(short(what, got));
            }
        }
        if let Some((s, g)) = slot {
            if s >= views || g.len() < shape.floats() {
                return Err(short("bilateral grid gradient (view or length)", g.len()));
            }
        }
        if views == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig::linear(n as u64, LOSS_BLOCK)?;
        let blocks = cfg.grid.0 as usize;
        let dev = self.dev.clone();
        dev.grow(&mut self.grid_part, blocks)?;
        dev.grow(tv, 1)?;
        // Any f64 buffer stands in for an absent gradient: it is read only on view `slot`.
        let (slot_id, grad) = match slot {
            Some((s, g)) => (s as u32, g),
            None => (u32::MAX, &self.grid_part),
        };
        // SAFETY: the argument lists match bilagrid_adam and depth_finish in kernels/loss.cu;
        // values, next, m and v hold views·floats values, the gradient (read on view `slot`
        // only, which exists) the shape's floats, the partials one per block of `cfg`, tv one
        // value (checked or grown above); depth_finish runs one block and, over 1 "pixel",
        // writes the partials' sum.
        unsafe {
            let args = [
                U64(n as u64),
                U32(shape.x),
                U32(shape.y),
                U32(shape.l),
                values.arg(),
                next.arg(),
                m.arg(),
                v.arg(),
                U32(slot_id),
                grad.arg(),
                F64(tv_weight / views as f64),
                F32(coef.b1),
                F32(coef.b2),
                F32(coef.step_size),
                F32(coef.bias2_sqrt),
                F32(coef.eps),
                self.grid_part.arg(),
            ];
            self.go("bilagrid_adam", cfg, &args)?;
            let args = [
                U32(blocks as u32),
                self.grid_part.arg(),
                U64(1),
                U64(0),
                tv.arg(),
            ];
            self.go("depth_finish", LaunchConfig::linear(1, LOSS_BLOCK)?, &args)?;
        }
        Ok(())
    }

    /// Checks a grid kernel's buffers; returns the pixels.
    #[allow(clippy::too_many_arguments)]
    fn check_grid(
        &self,
        img: &DeviceBuffer<f32>,
        grid: &DeviceBuffer<f32>,
        grid_at: usize,
        shape: GridShape,
        width: u32,
        height: u32,
        out_len: usize,
    ) -> Result<usize, DeviceLossError> {
        let n_pixels = width as usize * height as usize;
        if shape.invalid().is_some() {
            return Err(DeviceLossError::Shape {
                what: "bilateral grid shape (1 to 64 cells a side)",
                got: shape.cells(),
                need: shape.cells(),
                width,
                height,
            });
        }
        for (what, got, need) in [
            ("bilateral grid image", img.len(), 3 * n_pixels),
            ("bilateral grid output", out_len, 3 * n_pixels),
            (
                "bilateral grid",
                grid.len().saturating_sub(grid_at),
                shape.floats(),
            ),
        ] {
            if got < need || n_pixels > u32::MAX as usize / 3 {
                return Err(DeviceLossError::Shape {
                    what,
                    got,
                    need,
                    width,
                    height,
                });
            }
        }
        Ok(n_pixels)
    }

    fn check_exposure(
        &self,
        img: &DeviceBuffer<f32>,
        e: &DeviceBuffer<f32>,
        n_pixels: usize,
        out_len: usize,
    ) -> Result<(), DeviceLossError> {
        for (what, got, need) in [
            ("exposure image", img.len(), 3 * n_pixels),
            ("exposure output", out_len, 3 * n_pixels),
            ("exposure matrix", e.len(), EXPOSURE_LEN),
        ] {
            if got < need || n_pixels > u32::MAX as usize / 3 {
                return Err(DeviceLossError::Shape {
                    what,
                    got,
                    need,
                    width: 0,
                    height: 0,
                });
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn loss_and_grad(
        &mut self,
        img: &DeviceBuffer<f32>,
        target: &DeviceBuffer<f32>,
        width: u32,
        height: u32,
        lambda_dssim: f32,
        d_image: &mut DeviceBuffer<f32>,
        out: &mut DeviceBuffer<f64>,
    ) -> Result<(), DeviceLossError> {
        let npix = width as usize * height as usize;
        let n = 3 * npix;
        for (what, got, need) in [
            ("img", img.len(), n),
            ("target", target.len(), n),
            ("d_image", d_image.len(), n),
            ("out", out.len(), LOSS_SCALARS),
        ] {
            if got < need || npix == 0 || npix > u32::MAX as usize / 3 {
                return Err(DeviceLossError::Shape {
                    what,
                    got,
                    need,
                    width,
                    height,
                });
            }
        }
        let dev = self.dev.clone();
        let tiles_x = width.div_ceil(LOSS_TILE);
        let tiles = tiles_x as u64 * height.div_ceil(LOSS_TILE) as u64;
        let cfg = LaunchConfig::linear(tiles * LOSS_BLOCK as u64, LOSS_BLOCK)?;
        let blocks = cfg.grid.0 as usize;
        dev.grow(&mut self.coef, 9 * npix)?;
        dev.grow(&mut self.s_part, blocks)?;
        dev.grow(&mut self.l1_part, blocks)?;
        dev.grow(&mut self.sq_part, blocks)?;
        // The CPU's scalars, rounded the CPU's way (see LossScratch::loss_and_grad and the SSIM
        // gradient scale in metrics.rs).
        let w1 = (1.0 - lambda_dssim) / n as f32;
        let inv_n = (1.0 / n as f64) as f32;
        let (w, h, tx) = (U32(width), U32(height), U32(tiles_x));
        let coef = self.coef.arg();
        // SAFETY: (all three launches) the argument lists match kernels/loss.cu; img, target
        // and d_image hold 3·W·H values, coef 9 planes of W·H, the partials one value per
        // block of `cfg`, which has one block of LOSS_TILE² threads per tile of the image (all
        // checked or grown above); loss_finish runs one block.
        unsafe {
            let args = [w, h, tx, img.arg(), target.arg(), coef, self.s_part.arg()];
            self.go("ssim_fwd", cfg, &args)?;
            let args = [
                w,
                h,
                tx,
                coef,
                img.arg(),
                target.arg(),
                F32(w1),
                F32(lambda_dssim),
                F32(inv_n),
                d_image.arg(),
                self.l1_part.arg(),
                self.sq_part.arg(),
            ];
            self.go("loss_grad", cfg, &args)?;
            let args = [
                U32(blocks as u32),
                self.s_part.arg(),
                self.l1_part.arg(),
                self.sq_part.arg(),
                U64(n as u64),
                F64(lambda_dssim as f64),
                out.arg(),
            ];
            self.go("loss_finish", LaunchConfig::linear(1, LOSS_BLOCK)?, &args)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::train::loss::LossScratch;

    /// `apply_mask` on the device is its CPU twin, bit for bit, with the mask at an offset
    /// inside the staged frame as the trainer stages it (RGB8, then the mask).
    #[test]
    fn mask_kernel_matches_the_cpu() {
        for dev in crate::device::test_devices() {
            let dl = DeviceLoss::new(&dev).unwrap();
            let mut rng = Rng::new(23);
            for npix in [1usize, 255, 256, 1000] {
                let rgb: Vec<u8> = (0..3 * npix)
                    .map(|_| (rng.next_u64() % 256) as u8)
                    .collect();
                let mask: Vec<u8> = (0..npix)
                    .map(|_| if rng.next_f32() < 0.4 { 0 } else { 255 })
                    .collect();
                let frame = [rgb.as_slice(), &mask].concat();
                let plane: Vec<f32> = (0..3 * npix).map(|_| rng.next_f32()).collect();
                let mut want = plane.clone();
                crate::train::loss::apply_mask(&mut want, &mask);
                let mut df = dev.alloc::<u8>(frame.len()).unwrap();
                dev.upload(&frame, &mut df).unwrap();
                let mut dp = dev.alloc::<f32>(3 * npix).unwrap();
                dev.upload(&plane, &mut dp).unwrap();
                dl.apply_mask(&df, 3 * npix, npix, &mut dp).unwrap();
                let got = dev.download_vec(&dp, 3 * npix).unwrap();
                assert_eq!(got, want, "{} {npix} pixels", dev.name());
                // A frame too short for the mask is refused, not read past.
                assert!(dl.apply_mask(&df, 3 * npix + 1, npix, &mut dp).is_err());
            }
        }
    }

    /// The exposure kernels are their CPU twins: the image and `∂L/∂x` bit for bit, the
    /// matrix gradient to the rounding of its differently ordered double sums.
    #[test]
    fn exposure_kernels_match_the_cpu() {
        use crate::train::exposure::{apply, backward};
        for dev in crate::device::test_devices() {
            let mut dl = DeviceLoss::new(&dev).unwrap();
            let mut rng = Rng::new(29);
            for npix in [1usize, 255, 256, 1000] {
                let img: Vec<f32> = (0..3 * npix).map(|_| rng.next_f32()).collect();
                let dy: Vec<f32> = (0..3 * npix).map(|_| rng.next_f32() - 0.5).collect();
                let e: [f32; 12] = std::array::from_fn(|k| {
                    let id = if k % 5 == 0 { 1.0 } else { 0.0 };
                    id + (rng.next_f32() - 0.5) * 0.2
                });
                let mut want_y = Vec::new();
                apply(&e, &img, &mut want_y);
                let mut want_dx = dy.clone();
                let want_g = backward(&e, &img, &mut want_dx);

                let mut di = dev.alloc::<f32>(3 * npix).unwrap();
                dev.upload(&img, &mut di).unwrap();
                let mut de = dev.alloc::<f32>(12).unwrap();
                dev.upload(&e, &mut de).unwrap();
                let mut dout = dev.alloc::<f32>(3 * npix).unwrap();
                dl.exposure_apply(&di, &de, npix, &mut dout).unwrap();
                assert_eq!(dev.download_vec(&dout, 3 * npix).unwrap(), want_y);
                let mut dd = dev.alloc::<f32>(3 * npix).unwrap();
                dev.upload(&dy, &mut dd).unwrap();
                // After 4 values, as the trainer puts it after the loss scalars.
                let mut dg = dev.alloc::<f64>(16).unwrap();
                dl.exposure_backward(&di, &de, npix, &mut dd, &mut dg, 4)
                    .unwrap();
                assert_eq!(dev.download_vec(&dd, 3 * npix).unwrap(), want_dx);
                let got_g = dev.download_vec(&dg, 16).unwrap()[4..].to_vec();
                for k in 0..12 {
                    let tol = 1e-12 * (1.0 + want_g[k].abs()) * npix as f64;
                    assert!(
                        (got_g[k] - want_g[k]).abs() <= tol,
                        "{} {npix} px, E[{k}]: {} vs {}",
                        dev.name(),
                        got_g[k],
                        want_g[k]
                    );
                }
                // A matrix buffer too short is refused, not read past.
                let short = dev.alloc::<f32>(11).unwrap();
                assert!(dl.exposure_apply(&di, &short, npix, &mut dout).is_err());
            }
        }
    }

    /// On the emulation the grid's image and `∂L/∂img` are bit-identical to the CPU's and its
    /// gradient equal up to the rounding of its sums; on a GPU (no contraction either) the
    /// same. Sizes cover one-cell axes, images smaller than the grid, colours outside [0, 1]
    /// (the guidance clamped) and more pixels than a block.
    #[test]
    fn bilagrid_kernels_match_the_cpu() {
        use crate::train::bilagrid::{apply, backward, identity_grid, GridShape};
        for dev in crate::device::test_devices() {
            let dl = DeviceLoss::new(&dev).unwrap();
            let mut rng = Rng::new(31);
            for (shape, w, h) in [
                (GridShape { x: 4, y: 3, l: 5 }, 7u32, 5u32),
                (GridShape { x: 16, y: 16, l: 8 }, 40, 23),
                (GridShape { x: 1, y: 2, l: 1 }, 9, 4),
                (GridShape { x: 6, y: 5, l: 4 }, 3, 2),
            ] {
                let npix = (w * h) as usize;
                let img: Vec<f32> = (0..3 * npix).map(|_| 1.2 * rng.next_f32() - 0.1).collect();
                let dy: Vec<f32> = (0..3 * npix).map(|_| rng.next_f32() - 0.5).collect();
                let grid: Vec<f32> = identity_grid(shape)
                    .into_iter()
                    .map(|v| v + 0.3 * (rng.next_f32() - 0.5))
                    .collect();
                let (wu, hu) = (w as usize, h as usize);
                let mut want_y = Vec::new();
                apply(shape, &grid, &img, wu, hu, &mut want_y);
                let mut want_dx = dy.clone();
                let mut want_g = Vec::new();
                backward(shape, &grid, &img, wu, hu, &mut want_dx, &mut want_g);

                let upload = |v: &[f32]| {
                    let mut b = dev.alloc::<f32>(v.len()).unwrap();
                    dev.upload(v, &mut b).unwrap();
                    b
                };
                let (di, dg) = (upload(&img), upload(&grid));
                let mut dout = dev.alloc::<f32>(3 * npix).unwrap();
                dl.bilagrid_apply(&di, &dg, 0, shape, w, h, &mut dout)
                    .unwrap();
                assert_eq!(dev.download_vec(&dout, 3 * npix).unwrap(), want_y);
                let mut dd = upload(&dy);
                let mut dgrad = dev.alloc::<f64>(1).unwrap();
                dl.bilagrid_backward(&di, &dg, 0, shape, w, h, &mut dd, &mut dgrad)
                    .unwrap();
                assert_eq!(dev.download_vec(&dd, 3 * npix).unwrap(), want_dx);
                let got_g = dev.download_vec(&dgrad, shape.floats()).unwrap();
                let mut nonzero = 0;
                for (k, (g, want)) in got_g.iter().zip(&want_g).enumerate() {
                    let tol = 1e-12 * (1.0 + want.abs()) * npix as f64;
                    assert!(
                        (g - want).abs() <= tol,
                        "{} {shape} {w}x{h}, grid[{k}]: {g} vs {want}",
                        dev.name()
                    );
                    nonzero += (*want != 0.0) as usize;
                }
                assert!(nonzero > 0, "{shape} {w}x{h}: no gradient reached the grid");
                // A grid buffer too short is refused, not read past.
                let short = dev.alloc::<f32>(shape.floats() - 1).unwrap();
                assert!(dl
                    .bilagrid_apply(&di, &short, 0, shape, w, h, &mut dout)
                    .is_err());
            }
        }
    }

    /// The grids' optimizer step on the device is the host's to the bit (values and moments;
    /// the total variation's sum equal up to its order), with and without a loss gradient.
    #[test]
    fn bilagrid_adam_matches_the_cpu() {
        use crate::train::adam::Coef;
        use crate::train::bilagrid::{BilateralGrids, GridShape, BILAGRID_ADAM};
        for dev in crate::device::test_devices() {
            let mut dl = DeviceLoss::new(&dev).unwrap();
            let mut rng = Rng::new(37);
            for (shape, views) in [
                (GridShape { x: 4, y: 3, l: 5 }, 3usize),
                (GridShape { x: 1, y: 2, l: 1 }, 2),
            ] {
                let mut host = BilateralGrids::new(shape);
                host.ensure(views);
                for x in host.values.iter_mut() {
                    *x += 0.2 * (rng.next_f32() - 0.5);
                }
                let f = shape.floats();
                let grad: Vec<f64> = (0..f).map(|_| rng.next_f32() as f64 - 0.5).collect();
                let up = |v: &[f32]| {
                    let mut b = dev.alloc::<f32>(v.len()).unwrap();
                    dev.upload(v, &mut b).unwrap();
                    b
                };
                let mut values = up(&host.values);
                let mut next = dev.alloc::<f32>(views * f).unwrap();
                let (mut m, mut v) = (up(&host.exp_avg), up(&host.exp_avg_sq));
                let mut dgrad = dev.alloc::<f64>(f).unwrap();
                dev.upload(&grad, &mut dgrad).unwrap();
                let mut tv = dev.alloc::<f64>(1).unwrap();
                for (t, slot) in [(1u64, Some(1usize)), (2, None), (3, Some(views - 1))] {
                    let lr = 1e-2 / t as f64;
                    let want_tv = host.step(lr, 10.0, slot.map(|s| (s, &grad[..])));
                    let coef = Coef::new(&BILAGRID_ADAM, lr, t);
                    dl.bilagrid_adam(
                        shape,
                        views,
                        &values,
                        &mut next,
                        &mut m,
                        &mut v,
                        slot.map(|s| (s, &dgrad)),
                        10.0,
                        &coef,
                        &mut tv,
                    )
                    .unwrap();
                    std::mem::swap(&mut values, &mut next);
                    let n = views * f;
                    assert_eq!(
                        dev.download_vec(&values, n).unwrap(),
                        host.values,
                        "{shape} t{t}"
                    );
                    assert_eq!(dev.download_vec(&m, n).unwrap(), host.exp_avg);
                    assert_eq!(dev.download_vec(&v, n).unwrap(), host.exp_avg_sq);
                    let got_tv = dev.download_vec(&tv, 1).unwrap()[0];
                    assert!(
                        (got_tv - want_tv).abs() <= 1e-12 * (1.0 + want_tv.abs()),
                        "{} {shape} t{t}: TV {got_tv} vs {want_tv}",
                        dev.name()
                    );
                }
                // A slot beyond the views is refused, not read past.
                assert!(dl
                    .bilagrid_adam(
                        shape,
                        views,
                        &values,
                        &mut next,
                        &mut m,
                        &mut v,
                        Some((views, &dgrad)),
                        10.0,
                        &Coef::new(&BILAGRID_ADAM, 1e-3, 4),
                        &mut tv,
                    )
                    .is_err());
            }
        }
    }

    #[test]
    fn loss_and_gradient_match_the_cpu() {
        for dev in crate::device::test_devices() {
            let mut dl = DeviceLoss::new(&dev).unwrap();
            let mut rng = Rng::new(17);
            // One pixel, narrower than the window both ways, exactly one 16×16 tile, a tile
            // and one more column and row, not multiples of anything, and more pixels than one
            // block; identical images (L1 0, SSIM 1) once.
            for (w, h, same) in [
                (1, 1, false),
                (7, 3, false),
                (16, 16, false),
                (17, 33, false),
                (37, 29, false),
                (120, 45, true),
                (200, 90, false),
            ] {
                let n = 3 * w * h;
                let x: Vec<f32> = (0..n).map(|_| rng.next_f32()).collect();
                let y: Vec<f32> = if same {
                    x.clone()
                } else {
                    (0..n).map(|_| rng.next_f32()).collect()
                };
                let mut want_d = Vec::new();
                let want = LossScratch::new()
                    .loss_and_grad(&x, &y, w, h, 0.2, &mut want_d)
                    .unwrap();
                let (mut dx, mut dy) = (dev.alloc::<f32>(n).unwrap(), dev.alloc::<f32>(n).unwrap());
                dev.upload(&x, &mut dx).unwrap();
                dev.upload(&y, &mut dy).unwrap();
                let mut dd = dev.alloc::<f32>(n).unwrap();
                let mut out = dev.alloc::<f64>(LOSS_SCALARS).unwrap();
                dl.loss_and_grad(&dx, &dy, w as u32, h as u32, 0.2, &mut dd, &mut out)
                    .unwrap();
                let got_d = dev.download_vec(&dd, n).unwrap();
                let got = dev.download_vec(&out, LOSS_SCALARS).unwrap();
                let mse = x
                    .iter()
                    .zip(&y)
                    .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
                    .sum::<f64>()
                    / n as f64;
                let label = format!("{} {w}x{h}", dev.name());
                // Same operations in the same order: bit-identical gradients.
                let worst = got_d
                    .iter()
                    .zip(&want_d)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert_eq!(worst, 0.0, "{label}: ∂L/∂image differs by up to {worst}");
                let want = [want.loss, want.l1, want.ssim, mse];
                for (k, (a, b)) in got.iter().zip(want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                        "{label}: scalar {k}: {a} vs {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn rgb8_conversion_matches_the_trainer() {
        for dev in crate::device::test_devices() {
            let dl = DeviceLoss::new(&dev).unwrap();
            let bytes: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
            let mut src = dev.alloc::<u8>(bytes.len()).unwrap();
            dev.upload(&bytes, &mut src).unwrap();
            let mut dst = dev.alloc::<f32>(bytes.len()).unwrap();
            dl.rgb8_to_f32(&src, bytes.len(), &mut dst).unwrap();
            let got = dev.download_vec(&dst, bytes.len()).unwrap();
            let want: Vec<f32> = bytes.iter().map(|&v| v as f32 * (1.0 / 255.0)).collect();
            assert_eq!(got, want, "{}", dev.name());
        }
    }

    /// `loss.cu` shares `common.cuh`'s block reduction: the module source has it spliced in
    /// (no `#include` left for a driver to resolve) and every constant that header requires.
    #[test]
    fn module_source_splices_the_common_header() {
        let m = module_source();
        assert!(!m
            .source
            .lines()
            .any(|l| l.trim_start().starts_with("#include")));
        assert!(m.source.contains("GS_COMMON_CUH") && m.source.contains("block_sum"));
        for (name, _) in crate::render::cuda::kernels::defines() {
            assert!(m.defines.iter().any(|(n, _)| *n == name), "{name}");
        }
    }

    /// The depth kernels are [`crate::train::depth::l1_and_grad`] on the targets
    /// [`DepthScale::targets_into`] makes of the staged plane: `∂L/∂D` bit for bit (with and
    /// without a mask at its offset in the staged frame, with pixels where D = T and pixels
    /// without depth), the mean to the rounding of its differently ordered double sum.
    #[test]
    fn depth_kernels_match_the_cpu() {
        let scale = DepthScale {
            scale: 1.7,
            offset: -0.05,
        };
        for dev in crate::device::test_devices() {
            let mut dl = DeviceLoss::new(&dev).unwrap();
            let mut rng = Rng::new(31);
            for npix in [1usize, 255, 257, 3000] {
                let raw: Vec<u16> = (0..npix)
                    .map(|k| match k % 13 {
                        // "No depth" pixels: excluded.
                        3 => DepthScale::NO_DEPTH,
                        _ => 1 + rng.below(65535) as u16,
                    })
                    .collect();
                let plane: Vec<u8> = raw.iter().flat_map(|v| v.to_le_bytes()).collect();
                let mut target = Vec::new();
                scale.targets_into(&plane, &mut target);
                let mut render: Vec<f32> = (0..npix).map(|_| 1.7 * rng.next_f32()).collect();
                for k in (0..npix).step_by(7) {
                    render[k] = target[k];
                }
                let mask: Vec<u8> = (0..npix)
                    .map(|_| if rng.next_f32() < 0.3 { 0 } else { 255 })
                    .collect();
                let rgb = vec![9u8; 3 * npix];
                let frame = [rgb.as_slice(), &mask, &plane].concat();
                let mut df = dev.alloc::<u8>(frame.len()).unwrap();
                dev.upload(&frame, &mut df).unwrap();
                let mut dr = dev.alloc::<f32>(npix).unwrap();
                dev.upload(&render, &mut dr).unwrap();
                let mut dd = dev.alloc::<f32>(npix).unwrap();
                let mut scalars = dev.alloc::<f64>(3).unwrap();
                let depth_at = 4 * npix;
                // The final transmittance of a render: opaque, half covered, and empty pixels
                // (below the cover a normalized depth needs).
                let final_t: Vec<f32> = (0..npix)
                    .map(|k| match k % 5 {
                        0 => 1.0,
                        1 => 0.999,
                        _ => 0.9 * rng.next_f32(),
                    })
                    .collect();
                let cover: Vec<f32> = final_t.iter().map(|&t| 1.0 - t).collect();
                let mut dt = dev.alloc::<f32>(npix).unwrap();
                dev.upload(&final_t, &mut dt).unwrap();
                // A sparse plane's mean runs over its points instead of its pixels, and
                // compares the render normalized by its cover.
                let points = raw.iter().filter(|&&r| r != DepthScale::NO_DEPTH).count();
                for (masked, divisor, normalized) in [
                    (false, npix, false),
                    (true, npix, false),
                    (true, points.max(1), false),
                    (true, points.max(1), true),
                    (false, points.max(1), true),
                ] {
                    let m = masked.then_some(&mask[..]);
                    let mut want = vec![0.0f32; npix];
                    let pure = crate::train::depth::l1_and_grad(
                        &render,
                        normalized.then_some(&cover[..]),
                        &target,
                        m,
                        0.7,
                        divisor,
                        &mut want,
                    );
                    let offset = masked.then_some(3 * npix);
                    dl.depth_l1(
                        &dr,
                        normalized.then_some(&dt),
                        &df,
                        offset,
                        depth_at,
                        scale,
                        npix,
                        divisor,
                        0.7,
                        &mut dd,
                        &mut scalars,
                        2,
                    )
                    .unwrap();
                    let got = dev.download_vec(&dd, npix).unwrap();
                    assert_eq!(
                        got,
                        want,
                        "{} {npix} pixels, mask {masked}, divisor {divisor}, normalized \
                         {normalized}",
                        dev.name()
                    );
                    if normalized && npix > 1 {
                        // Uncovered pixels pass nothing; covered ones carry 1/A.
                        assert!((0..npix).step_by(5).all(|k| want[k] == 0.0));
                        assert!((0..npix).any(|k| want[k].abs() > 0.7 / divisor as f32 * 1.05));
                    }
                    let s = dev.download_vec(&scalars, 3).unwrap();
                    assert!(
                        (s[2] - pure).abs() <= 1e-12 * pure.max(1.0),
                        "{}: depth L1 {} vs CPU {pure}",
                        dev.name(),
                        s[2]
                    );
                    // (One pixel: it is one where D = T, the zero-gradient case.)
                    assert!(npix == 1 || pure > 0.05, "{pure}: too small to test");
                    assert!(npix == 1 || want.iter().any(|&d| d > 0.0));
                    assert!(npix == 1 || want.iter().any(|&d| d < 0.0));
                }
                // A frame too short for the mask or for the plane is refused, not read past.
                for (mask_at, depth_at) in [
                    (Some(3 * npix + 2 * npix + 1), depth_at),
                    (None, depth_at + 1),
                ] {
                    assert!(dl
                        .depth_l1(
                            &dr,
                            None,
                            &df,
                            mask_at,
                            depth_at,
                            scale,
                            npix,
                            npix,
                            0.7,
                            &mut dd,
                            &mut scalars,
                            2
                        )
                        .is_err());
                }
            }
        }
    }

    #[test]
    fn wrong_shapes_are_errors() {
        let dev = Device::emulated().unwrap();
        let mut dl = DeviceLoss::new(&dev).unwrap();
        let small = dev.alloc::<f32>(10).unwrap();
        let mut d = dev.alloc::<f32>(10).unwrap();
        let mut out = dev.alloc::<f64>(LOSS_SCALARS).unwrap();
        let e = dl
            .loss_and_grad(&small, &small, 4, 4, 0.2, &mut d, &mut out)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("img") && e.contains("4x4") && e.contains("48"),
            "{e}"
        );
    }
}
