//! The CUDA backend: [`CudaRasterizer`] implements [`Rasterizer`] with the same math as the
//! CPU reference ([`crate::render::cpu`], the oracle), stage for stage:
//! `project_fwd` → intersection count (exclusive scan) → device-memory preflight →
//! depth sort → `emit_keys` in depth order → stable radix sort by tile id → `tile_ranges` →
//! `rasterize_fwd`,
//! and backward `rasterize_bwd` → `project_bwd` (with [`RenderOptions::pose_grad`]:
//! `project_bwd_pose` → `pose_finish`).
//!
//! It runs on the device layer ([`crate::device`]), so the same code drives a real GPU (CUDA)
//! and the host emulation (`GS_CUDA_EMULATE=1`), which executes these kernels in `cargo test`.
//!
//! Modules: [`kernels`] (embedded sources, `-D` constants), [`launch`] (one typed launch per
//! entry point, the only `unsafe` launches), [`sort`] (radix sort driver).
//!
//! Invariants: device buffers live in the rasterizer and only grow (a training loop allocates
//! nothing after its first few iterations); nothing sized by the intersection count is
//! allocated before the preflight has checked it against both
//! [`RenderOptions::max_intersection_bytes`] and the device's free memory; every output the
//! host reads is fully written by a kernel (no reliance on zeroed memory), gradient
//! accumulators are explicitly zeroed before the backward.
//!
//! The pose gradient ([`GaussianGrads::pose`]) is summed without atomics: per block of
//! `project_bwd_pose` in a fixed tree, then over blocks in a fixed order (`pose_finish`), in
//! double, so it is deterministic on either driver and differs from the CPU's chunked f64 sum
//! only by the order of the additions (and by the per-splat gradients it starts from). It
//! lands in the rasterizer's own buffer ([`CudaRasterizer::pose_grad`]) or at an offset of
//! the caller's ([`CudaRasterizer::backward_resident_to`]), so a trainer reads it with its
//! loss scalars in one download.

pub mod error;
pub mod kernels;
pub mod launch;
mod resident;
pub mod sort;

pub use error::CudaError;

use crate::device::{copy_between, Device, DeviceBuffer, Element, TimeMark};
use crate::render::cpu::binning::{TileBins, REPORTED_LARGEST};
use crate::render::cpu::{CameraF, GaussianParams, Splat, SplatGrad};
use crate::render::{
    GaussianGrads, LargeGaussian, Rasterizer, RenderError, RenderOptions, RenderOutput, StageTimes,
};
use crate::scene::camera::Camera;
use crate::scene::gaussians::{Field, Gaussians};
use kernels::POSE_LEN;
use launch::{
    pose_part_len, InvDepthBufs, InvDepthGradBufs, Kernels, ParamBufs, ParamGradBufs, PoseBufs,
    SplatBufs, SplatGradBufs,
};
pub use resident::DeviceGaussians;

/// Device bytes per tile intersection: two u32 key buffers and two u32 id buffers (the sort
/// ping-pongs), plus the sort histogram's share (RADIX u32 counters per SORT_TILE keys, half a
/// byte, counted as one).
pub const BYTES_PER_INTERSECTION: u64 =
    2 * 4 + 2 * 4 + (4 * sort::RADIX as u64).div_ceil(kernels::SORT_TILE as u64);

/// Device memory left untouched by the preflight: the driver needs room for launches, and
/// allocations round up to 2 MiB pages; 256 MiB is ~0.3 % of an 80 GB GPU and still leaves
/// ~90 % of an 8 GB desktop card for the render.
pub const DEVICE_HEADROOM_BYTES: u64 = 256 << 20;

impl From<CudaError> for RenderError {
    fn from(e: CudaError) -> RenderError {
        RenderError::Backend {
            backend: "cuda",
            message: e.to_string(),
        }
    }
}

impl From<crate::device::DeviceError> for RenderError {
    fn from(e: crate::device::DeviceError) -> RenderError {
        CudaError::from(e).into()
    }
}

/// Makes `buf` hold at least `len` elements (reallocating, contents lost, when it is smaller).
/// Downloads `rows` rows of `C` floats straight into `host` (resized; its allocation is
/// reused across calls, so a training loop neither allocates nor copies twice).
fn download_rows<const C: usize>(
    dev: &Device,
    buf: &DeviceBuffer<f32>,
    rows: usize,
    host: &mut Vec<[f32; C]>,
) -> Result<(), CudaError> {
    host.resize(rows, [0.0; C]);
    dev.download(buf, host.as_flattened_mut())?;
    Ok(())
}

/// Ends the current stage (profiling only): see [`Profile`].
fn mark(dev: &Device, profile: &mut Option<Profile>, name: &'static str) -> Result<(), CudaError> {
    match profile {
        None => {}
        Some(Profile::Synced { last, stages }) => {
            dev.synchronize()?;
            let now = std::time::Instant::now();
            if let Some(t) = *last {
                stages.push((name, (now - t).as_secs_f64()));
            }
            *last = Some(now);
        }
        Some(Profile::Queued { marks }) => marks.push((Some(name), dev.mark()?)),
    }
    Ok(())
}

/// Starts a timed region (a forward or a backward; profiling only): the next [`mark`]
/// measures from here. `fresh` (a forward) also drops the previous forward and backward's
/// stages.
fn begin_stages(dev: &Device, profile: &mut Option<Profile>, fresh: bool) -> Result<(), CudaError> {
    match profile {
        None => {}
        Some(Profile::Synced { last, stages }) => {
            if fresh {
                stages.clear();
            }
            *last = Some(std::time::Instant::now());
        }
        Some(Profile::Queued { marks }) => {
            if fresh {
                marks.clear();
            }
            marks.push((None, dev.mark()?));
        }
    }
    Ok(())
}

fn grow<T: Element>(dev: &Device, buf: &mut DeviceBuffer<T>, len: usize) -> Result<(), CudaError> {
    Ok(dev.grow(buf, len)?)
}

/// Grows `buf` to `host` and copies it there.
pub(crate) fn upload<T: Element>(
    dev: &Device,
    host: &[T],
    buf: &mut DeviceBuffer<T>,
) -> Result<(), CudaError> {
    grow(dev, buf, host.len())?;
    dev.upload(host, buf)?;
    Ok(())
}

fn download<T: Element>(
    dev: &Device,
    buf: &DeviceBuffer<T>,
    len: usize,
    host: &mut Vec<T>,
) -> Result<(), CudaError> {
    host.clear();
    host.resize(len, T::default());
    dev.download(buf, host)?;
    Ok(())
}

/// The camera buffer of `kernels/common.cuh`, from the CPU reference's conversion so limits
/// round identically.
pub fn camera_buffer(c: &CameraF<f32>) -> [f32; kernels::CAM_LEN] {
    let mut b = [0.0f32; kernels::CAM_LEN];
    for r in 0..3 {
        b[3 * r..3 * r + 3].copy_from_slice(&c.rot[r]);
    }
    b[9..12].copy_from_slice(&c.trans);
    b[12..15].copy_from_slice(&c.centre);
    b[15] = c.fx;
    b[16] = c.fy;
    b[17] = c.cx;
    b[18] = c.cy;
    b[19] = c.lim_x_neg;
    b[20] = c.lim_x_pos;
    b[21] = c.lim_y_neg;
    b[22] = c.lim_y_pos;
    b[23] = if c.fisheye { 1.0 } else { 0.0 };
    b
}

struct Bufs {
    cam: DeviceBuffer<f32>,
    /// Whether `cam` holds a fisheye camera (which `project_bwd` entry point to launch).
    cam_fisheye: bool,
    means2d: DeviceBuffer<f32>,
    conics: DeviceBuffer<f32>,
    opacities: DeviceBuffer<f32>,
    colors: DeviceBuffer<f32>,
    depths: DeviceBuffer<f32>,
    radii: DeviceBuffer<u32>,
    /// Tiles each Gaussian is binned into (by index), from project_fwd
    /// (cpu::binning::Reach).
    tiles_touched: DeviceBuffer<u64>,
    /// The per-Gaussian depth sort (ping-pong) and the tile counts in depth order (scanned).
    dkeys: [DeviceBuffer<u32>; 2],
    dids: [DeviceBuffer<u32>; 2],
    counts: DeviceBuffer<u64>,
    scan64: Vec<DeviceBuffer<u64>>,
    scan32: Vec<DeviceBuffer<u32>>,
    keys: [DeviceBuffer<u32>; 2],
    ids: [DeviceBuffer<u32>; 2],
    hist: DeviceBuffer<u32>,
    ranges: DeviceBuffer<u32>,
    image: DeviceBuffer<f32>,
    final_t: DeviceBuffer<f32>,
    last: DeviceBuffer<u32>,
    d_image: DeviceBuffer<f32>,
    /// With [`RenderOptions::inv_depth`]: the inverse-depth plane and its gradient `[H, W]`.
    inv_depth: DeviceBuffer<f32>,
    d_inv_depth: DeviceBuffer<f32>,
    v: SplatGradBufs,
    g: ParamGradBufs,
    /// The pose gradient's per-block partials ([`launch::pose_part_len`]) and, when the
    /// caller names no buffer of its own, its [`POSE_LEN`] sums.
    pose_part: DeviceBuffer<f64>,
    pose: DeviceBuffer<f64>,
}

/// Where a backward with [`RenderOptions::pose_grad`] writes the pose gradient: [`POSE_LEN`]
/// doubles at `buf[offset..]`, a buffer of the rasterizer's device (a trainer's loss scalars,
/// so one download reads both).
pub struct PoseTarget<'a> {
    pub buf: &'a mut DeviceBuffer<f64>,
    pub offset: usize,
}

impl Bufs {
    fn new(dev: &Device) -> Result<Bufs, CudaError> {
        let f = || dev.alloc::<f32>(1);
        let u = || dev.alloc::<u32>(1);
        let w = || dev.alloc::<u64>(1);
        Ok(Bufs {
            cam: f()?,
            cam_fisheye: false,
            means2d: f()?,
            conics: f()?,
            opacities: f()?,
            colors: f()?,
            depths: f()?,
            radii: u()?,
            tiles_touched: w()?,
            dkeys: [u()?, u()?],
            dids: [u()?, u()?],
            counts: w()?,
            scan64: Vec::new(),
            scan32: Vec::new(),
            keys: [u()?, u()?],
            ids: [u()?, u()?],
            hist: u()?,
            ranges: u()?,
            image: f()?,
            final_t: f()?,
            last: u()?,
            d_image: f()?,
            inv_depth: f()?,
            d_inv_depth: f()?,
            v: SplatGradBufs {
                means2d: f()?,
                conics: f()?,
                colors: f()?,
                opacities: f()?,
                means2d_abs: f()?,
                inv_depths: f()?,
            },
            g: ParamGradBufs {
                params: DeviceGaussians::new(dev)?,
                means2d: f()?,
            },
            pose_part: dev.alloc::<f64>(1)?,
            pose: dev.alloc::<f64>(POSE_LEN)?,
        })
    }

    /// Room for `n` splats: the projection's outputs (`tiles_touched` has one more entry).
    fn grow_splats(&mut self, dev: &Device, n: usize) -> Result<(), CudaError> {
        grow(dev, &mut self.means2d, 2 * n)?;
        grow(dev, &mut self.conics, 3 * n)?;
        grow(dev, &mut self.opacities, n)?;
        grow(dev, &mut self.colors, 3 * n)?;
        grow(dev, &mut self.depths, n)?;
        grow(dev, &mut self.radii, n)?;
        grow(dev, &mut self.tiles_touched, n + 1)
    }

    /// Whether the intersection-sized buffers already hold `m` intersections (so a render of
    /// `m` grows none of them).
    fn holds_intersections(&self, m: u64) -> bool {
        let m = m as usize;
        self.keys.iter().all(|k| k.len() >= m)
            && self.ids.iter().all(|i| i.len() >= m)
            && self.hist.len() >= sort::hist_len(m as u64)
    }

    /// Bytes currently held by the intersection-sized buffers (reusable by the next render).
    fn intersection_bytes(&self) -> u64 {
        (self.keys[0].num_bytes()
            + self.keys[1].num_bytes()
            + self.ids[0].num_bytes()
            + self.ids[1].num_bytes()
            + self.hist.num_bytes()) as u64
    }
}

/// The CUDA backend (see the module doc).
pub struct CudaRasterizer {
    dev: Device,
    k: Kernels,
    b: Bufs,
    /// The parameters of the host API's last forward (uploaded there, reused by its backward).
    host_params: Option<DeviceGaussians>,
    /// Intersections of the last forward, and which sort buffer holds the sorted ids.
    m: u64,
    sorted: usize,
    fingerprint: Option<super::ForwardFingerprint>,
    /// Gaussians covered by the per-splat gradient buffers: set by a backward, cleared by
    /// every forward (a later forward may hold more Gaussians than the buffers).
    grads_n: Option<usize>,
    /// What the splat buffers hold the projection of (Gaussians, degree, camera, options),
    /// when they hold one projection (not a gathered set): a sharded render's shard state.
    projected: Option<super::ForwardFingerprint>,
    /// Splats of the last [`Self::backward_gathered`] whose gradients the `v` buffers hold.
    gathered_grads: Option<usize>,
    /// Whether the last backward wrote the pose gradient into this rasterizer's own buffer
    /// ([`Self::pose_grad`]); cleared by every forward.
    pose_ready: bool,
    /// Host staging of copies between devices (sharded rendering), reused.
    staging: Staging,
    /// Per-stage wall times of the last forward + backward, when profiling is on.
    profile: Option<Profile>,
    /// Mip-Splatting's 3D filter every render goes through while set
    /// ([`Rasterizer::set_filter_3d`], [`Self::filter_3d_buffer`]): the buffer and the
    /// Gaussians it holds a value for.
    filter_3d: Option<(DeviceBuffer<f32>, usize)>,
}

/// The 3D filter a render of `n` Gaussians goes through: none, or `filter`'s buffer when it
/// holds `n` values (else the render is refused).
fn filter_for(
    filter: &Option<(DeviceBuffer<f32>, usize)>,
    n: usize,
    sh_degree: u32,
) -> Result<Option<&DeviceBuffer<f32>>, RenderError> {
    match filter {
        None => Ok(None),
        Some((buf, len)) if *len == n => Ok(Some(buf)),
        Some((_, len)) => Err(RenderError::InconsistentGaussians {
            field: "filter_3d",
            got: *len,
            expected: n,
            sh_degree,
        }),
    }
}

/// Reused host buffers of [`crate::device::copy_between`], one per element type.
#[derive(Default)]
struct Staging {
    f: Vec<f32>,
    u: Vec<u32>,
    w: Vec<u64>,
}

/// Per-stage timing of a forward and its backward, off by default. The stages are the
/// pipeline's: projection, depth sort, key emission, tile sort, rasterization, and back.
#[derive(Debug)]
enum Profile {
    /// For benchmarks ([`CudaRasterizer::set_profiling`]): the device is synchronised at
    /// every mark, so each stage's host-measured time includes exactly its own device work
    /// (the synchronisations cost the overlap of launches with work).
    Synced {
        last: Option<std::time::Instant>,
        stages: Vec<(&'static str, f64)>,
    },
    /// For training profiles ([`CudaRasterizer::set_queue_profiling`]): a mark in the queue at
    /// every stage's end and at each region's start (`None`), nothing waits; read once the
    /// step is done ([`CudaRasterizer::queue_stages`]).
    Queued {
        marks: Vec<(Option<&'static str>, TimeMark)>,
    },
}

impl CudaRasterizer {
    /// On the device [`Device::from_env`] picks: the host emulation under
    /// `GS_CUDA_EMULATE=1`, else GPU 0. Errors, never panics, without a usable device.
    pub fn new() -> Result<CudaRasterizer, CudaError> {
        CudaRasterizer::on(Device::from_env()?)
    }

    /// On GPU 0 only, never the emulation (what `--backend auto` probes).
    pub fn gpu() -> Result<CudaRasterizer, CudaError> {
        CudaRasterizer::on(Device::cuda()?)
    }

    /// On `dev`: compiles (or loads cached) kernels.
    pub fn on(dev: Device) -> Result<CudaRasterizer, CudaError> {
        let k = Kernels::load(&dev)?;
        let b = Bufs::new(&dev)?;
        Ok(CudaRasterizer {
            dev,
            k,
            b,
            host_params: None,
            m: 0,
            sorted: 0,
            fingerprint: None,
            grads_n: None,
            projected: None,
            gathered_grads: None,
            pose_ready: false,
            staging: Staging::default(),
            profile: None,
            filter_3d: None,
        })
    }

    /// The 3D filter every render goes through, when one is set: its buffer and the Gaussians
    /// it holds a value for.
    pub fn filter_3d(&self) -> Option<(&DeviceBuffer<f32>, usize)> {
        self.filter_3d.as_ref().map(|(b, n)| (b, *n))
    }

    /// The buffer of the 3D filter for `n` Gaussians (grown to hold them), which every render
    /// goes through from now on: for a caller that computes the filter on this device
    /// (the device engine). [`Rasterizer::set_filter_3d`] with `None` removes it.
    pub fn filter_3d_buffer(&mut self, n: usize) -> Result<&mut DeviceBuffer<f32>, CudaError> {
        let mut buf = match self.filter_3d.take() {
            Some((b, _)) => b,
            None => self.dev.alloc::<f32>(n.max(1))?,
        };
        grow(&self.dev, &mut buf, n.max(1))?;
        Ok(&mut self.filter_3d.insert((buf, n)).0)
    }

    /// Turns synchronised per-stage timing on or off (see [`Self::stage_times`]): for
    /// benchmarks, since every stage waits for the device.
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(|| Profile::Synced {
            last: None,
            stages: Vec::new(),
        });
    }

    /// Seconds per stage of the last forward and backward (empty unless
    /// [`Self::set_profiling`] is on), in the order the stages ran.
    pub fn stage_times(&self) -> &[(&'static str, f64)] {
        match &self.profile {
            Some(Profile::Synced { stages, .. }) => stages,
            _ => &[],
        }
    }

    /// Turns queue-timed per-stage timing on or off (see [`Self::queue_stages`]): marks in
    /// the device's queue, nothing waits, so a profiled training step runs as an unprofiled
    /// one does.
    pub fn set_queue_profiling(&mut self, on: bool) {
        self.profile = on.then(|| Profile::Queued { marks: Vec::new() });
    }

    /// Milliseconds of queue time per stage of the last forward and backward (empty unless
    /// [`Self::set_queue_profiling`] is on), in the order the stages ran; waits for the last
    /// stage to end.
    pub fn queue_stages(&self) -> Result<Vec<(&'static str, f64)>, CudaError> {
        let Some(Profile::Queued { marks }) = &self.profile else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for pair in marks.windows(2) {
            if let ((_, a), (Some(name), b)) = (&pair[0], &pair[1]) {
                out.push((*name, b.ms_since(a)?));
            }
        }
        Ok(out)
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Largest on-screen Gaussians by radius (for the preflight error).
    fn largest(&self, n: usize) -> Result<Vec<LargeGaussian>, CudaError> {
        let mut radii = Vec::new();
        download(&self.dev, &self.b.radii, n, &mut radii)?;
        let mut l: Vec<LargeGaussian> = radii
            .iter()
            .enumerate()
            .filter(|(_, &r)| r > 0)
            .map(|(i, &r)| LargeGaussian {
                index: i as u32,
                radius_px: r,
            })
            .collect();
        l.sort_by(|a, b| b.radius_px.cmp(&a.radius_px).then(a.index.cmp(&b.index)));
        l.truncate(REPORTED_LARGEST);
        Ok(l)
    }

    /// Forward from device-resident parameters; the outputs stay on the device
    /// ([`Self::image`]). Returns the number of tile intersections. The trainer's path: no
    /// host round trip.
    pub fn forward_resident(
        &mut self,
        g: &DeviceGaussians,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<u64, RenderError> {
        self.begin_forward()?;
        g.validate(options.sh_degree)?;
        self.forward_core(g, camera, options)
    }

    fn begin_forward(&mut self) -> Result<(), CudaError> {
        self.fingerprint = None;
        self.grads_n = None;
        self.projected = None;
        self.gathered_grads = None;
        self.pose_ready = false;
        begin_stages(&self.dev, &mut self.profile, true)
    }

    fn forward_core(
        &mut self,
        g: &DeviceGaussians,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<u64, RenderError> {
        let cam = CameraF::<f32>::new(camera)?;
        self.project_stage(g, &cam, options)?;
        self.projected = Some(super::ForwardFingerprint::new(
            g.n,
            g.sh_degree,
            camera,
            options,
        ));
        self.raster_stage(g.n, g.sh_degree, camera, &cam, options)
    }

    /// `project_fwd` of `g` into this rasterizer's splat buffers (and its camera buffer).
    fn project_stage(
        &mut self,
        g: &DeviceGaussians,
        cam: &CameraF<f32>,
        options: &RenderOptions,
    ) -> Result<(), RenderError> {
        let n = g.n;
        let s = self.dev.clone();
        let coeffs = g.coeffs() as u32;
        let b = &mut self.b;
        upload(&s, &camera_buffer(cam), &mut b.cam)?;
        b.cam_fisheye = cam.fisheye;
        b.grow_splats(&s, n)?;
        {
            let Bufs {
                cam: cam_buf,
                means2d,
                conics,
                opacities,
                colors,
                depths,
                radii,
                tiles_touched,
                ..
            } = b;
            let p = ParamBufs {
                means: g.buffer(Field::Means),
                log_scales: g.buffer(Field::LogScales),
                rotations: g.buffer(Field::Rotations),
                logit_opacities: g.buffer(Field::LogitOpacities),
                sh: g.buffer(Field::Sh),
                coeffs,
                degree: options.sh_degree,
                filter_3d: filter_for(&self.filter_3d, n, g.sh_degree)?,
            };
            self.k.project_fwd(
                n as u32,
                &p,
                cam_buf,
                cam.tiles_x,
                cam.tiles_y,
                options.antialiased,
                means2d,
                conics,
                opacities,
                colors,
                depths,
                radii,
                tiles_touched,
            )?;
        }
        mark(&s, &mut self.profile, "project")?;
        Ok(())
    }

    /// Everything after the projection, from the `n` splats in this rasterizer's buffers:
    /// depth order, intersection count, preflight, keys, sort, tile ranges, `rasterize_fwd`.
    /// `sh_degree` is the stored degree of the Gaussians the splats came from (fingerprint).
    fn raster_stage(
        &mut self,
        n: usize,
        sh_degree: u32,
        camera: &Camera,
        cam: &CameraF<f32>,
        options: &RenderOptions,
    ) -> Result<u64, RenderError> {
        let s = self.dev.clone();
        let b = &mut self.b;
        // Depth order of the Gaussians (see kernels/tile_binning.cu), then the exclusive scan
        // of their tile counts in that order: entry N becomes the total.
        for i in 0..2 {
            grow(&s, &mut b.dkeys[i], n)?;
            grow(&s, &mut b.dids[i], n)?;
        }
        grow(&s, &mut b.counts, n + 1)?;
        grow(&s, &mut b.hist, sort::hist_len(n as u64))?;
        let (dk0, _) = b.dkeys.split_at_mut(1);
        let (di0, _) = b.dids.split_at_mut(1);
        self.k
            .depth_keys(n as u32, &b.depths, &b.radii, &mut dk0[0], &mut di0[0])?;
        let dsorted = sort::sort_pairs(
            &self.k,
            n as u64,
            0,
            32,
            &mut b.dkeys,
            &mut b.dids,
            &mut b.hist,
            &mut b.scan32,
        )?;
        self.k
            .gather_counts(n as u32, &b.dids[dsorted], &b.tiles_touched, &mut b.counts)?;
        let m = if n == 0 {
            0
        } else {
            self.k
                .scan_u64(&mut b.counts, n as u64 + 1, &mut b.scan64)?;
            let mut total = [0u64];
            s.download_from(&b.counts, n, &mut total)?;
            total[0]
        };
        mark(&s, &mut self.profile, "depth sort + scan")?;

        // Preflight: the configured cap and the device's free memory (plus what our own
        // intersection buffers already hold, which the render would reuse).
        let bytes = m.saturating_mul(BYTES_PER_INTERSECTION);
        let over_cap = bytes > options.max_intersection_bytes || m > u32::MAX as u64;
        if over_cap {
            return Err(RenderError::TooManyIntersections {
                bytes,
                count: m,
                limit: options.max_intersection_bytes,
                largest: self.largest(n)?,
            });
        }
        // A render that fits the buffers already held allocates nothing for its intersections,
        // so the driver is only asked when they must grow: a training step would otherwise ask
        // every time, and the query costs microseconds on most systems, milliseconds on some.
        if !self.b.holds_intersections(m) {
            let (free, _) = self.dev.memory()?;
            let usable = (free + self.b.intersection_bytes()).saturating_sub(DEVICE_HEADROOM_BYTES);
            if bytes > usable {
                return Err(RenderError::DeviceMemory {
                    bytes,
                    count: m,
                    free,
                    largest: self.largest(n)?,
                });
            }
        }

        let b = &mut self.b;
        let mu = m as usize;
        let ntiles = (cam.tiles_x * cam.tiles_y) as usize;
        for i in 0..2 {
            grow(&s, &mut b.keys[i], mu)?;
            grow(&s, &mut b.ids[i], mu)?;
        }
        grow(&s, &mut b.hist, sort::hist_len(m))?;
        grow(&s, &mut b.ranges, 2 * ntiles)?;
        let (k0, _) = b.keys.split_at_mut(1);
        let (i0, _) = b.ids.split_at_mut(1);
        self.k.emit_keys(
            n as u32,
            &b.dids[dsorted],
            &b.means2d,
            &b.conics,
            &b.opacities,
            &b.radii,
            &b.counts,
            cam.tiles_x,
            cam.tiles_y,
            m,
            &mut k0[0],
            &mut i0[0],
        )?;
        mark(&s, &mut self.profile, "emit keys")?;
        // Pairs are emitted in depth order: a stable sort by tile id alone finishes the order.
        let sorted = sort::sort_pairs(
            &self.k,
            m,
            0,
            sort::tile_bits(ntiles),
            &mut b.keys,
            &mut b.ids,
            &mut b.hist,
            &mut b.scan32,
        )?;
        s.memset_zero(&mut b.ranges, 2 * ntiles)?;
        self.k
            .tile_ranges(m, &b.keys[sorted], ntiles, &mut b.ranges)?;
        mark(&s, &mut self.profile, "sort + ranges")?;

        let npix = camera.width as usize * camera.height as usize;
        grow(&s, &mut b.image, 3 * npix)?;
        grow(&s, &mut b.final_t, npix)?;
        grow(&s, &mut b.last, npix)?;
        if options.inv_depth {
            grow(&s, &mut b.inv_depth, npix)?;
        }
        let splats = SplatBufs {
            means2d: &b.means2d,
            conics: &b.conics,
            opacities: &b.opacities,
            colors: &b.colors,
        };
        self.k.rasterize_fwd(
            n,
            mu,
            &b.ranges,
            &b.ids[sorted],
            &splats,
            camera.width,
            camera.height,
            options.background,
            &mut b.image,
            &mut b.final_t,
            &mut b.last,
            options.inv_depth.then_some(InvDepthBufs {
                depths: &b.depths,
                plane: &mut b.inv_depth,
            }),
        )?;
        mark(&s, &mut self.profile, "rasterize fwd")?;
        self.m = m;
        self.sorted = sorted;
        self.fingerprint = Some(super::ForwardFingerprint::new(
            n, sh_degree, camera, options,
        ));
        Ok(m)
    }

    fn forward_impl(
        &mut self,
        gaussians: &Gaussians,
        camera: &Camera,
        options: &RenderOptions,
        out: &mut RenderOutput,
    ) -> Result<(), RenderError> {
        self.begin_forward()?;
        GaussianParams::from_gaussians(gaussians).validate(options.sh_degree)?;
        let mut params = match self.host_params.take() {
            Some(p) => p,
            None => DeviceGaussians::new(&self.dev)?,
        };
        let r = params.upload(&self.dev, gaussians).and_then(|()| {
            mark(&self.dev, &mut self.profile, "fwd upload")?;
            Ok(())
        });
        let r = r
            .map_err(RenderError::from)
            .and_then(|()| self.forward_core(&params, camera, options));
        self.host_params = Some(params);
        let m = r?;
        let s = self.dev.clone();
        let b = &self.b;
        let n = gaussians.len();
        let npix = camera.width as usize * camera.height as usize;
        out.width = camera.width;
        out.height = camera.height;
        download(&s, &b.image, 3 * npix, &mut out.image)?;
        download(&s, &b.final_t, npix, &mut out.final_transmittance)?;
        download(&s, &b.last, npix, &mut out.last_contributor)?;
        out.alpha.clear();
        out.alpha
            .extend(out.final_transmittance.iter().map(|&t| 1.0 - t));
        download(&s, &b.radii, n, &mut out.radii)?;
        download_rows(&s, &b.means2d, n, &mut out.means2d)?;
        download(&s, &b.depths, n, &mut out.depths)?;
        out.inv_depth.clear();
        if options.inv_depth {
            download(&s, &b.inv_depth, npix, &mut out.inv_depth)?;
        }
        out.num_intersections = m;
        mark(&s, &mut self.profile, "fwd download")?;
        Ok(())
    }

    /// Backward of the last [`Self::forward_resident`] from a device-resident `∂L/∂image`
    /// ([H, W, 3]); the parameter gradients stay on the device ([`Self::grads`]), and with
    /// [`RenderOptions::pose_grad`] the pose gradient too ([`Self::pose_grad`]).
    pub fn backward_resident(
        &mut self,
        g: &DeviceGaussians,
        camera: &Camera,
        options: &RenderOptions,
        d_image: &DeviceBuffer<f32>,
    ) -> Result<&ParamGradBufs, RenderError> {
        self.backward_resident_to(g, camera, options, d_image, None)
    }

    /// [`Self::backward_resident`], with the pose gradient (when [`RenderOptions::pose_grad`]
    /// asks for it) written to `pose` instead of this rasterizer's own buffer, when given:
    /// the caller reads it with its other device scalars, no download of its own.
    pub fn backward_resident_to(
        &mut self,
        g: &DeviceGaussians,
        camera: &Camera,
        options: &RenderOptions,
        d_image: &DeviceBuffer<f32>,
        pose: Option<PoseTarget<'_>>,
    ) -> Result<&ParamGradBufs, RenderError> {
        super::ForwardFingerprint::new(g.n, g.sh_degree, camera, options)
            .check(self.fingerprint.as_ref())?;
        g.validate(options.sh_degree)?;
        begin_stages(&self.dev, &mut self.profile, false)?;
        self.backward_core(g, camera, options, Some(d_image), pose)?;
        Ok(&self.b.g)
    }

    /// The pose gradient `∂L/∂(ρ, φ)` of the last backward ([`GaussianGrads::pose`]): `None`
    /// unless that backward had [`RenderOptions::pose_grad`] and no [`PoseTarget`]. After a
    /// sharded backward ([`Self::project_backward_from`]) it is the shard's share, the sum
    /// over its Gaussians. A download of 48 bytes (waits for the queue).
    pub fn pose_grad(&self) -> Result<Option<[f64; POSE_LEN]>, CudaError> {
        if !self.pose_ready {
            return Ok(None);
        }
        let mut p = [0.0f64; POSE_LEN];
        self.dev.download_from(&self.b.pose, 0, &mut p)?;
        Ok(Some(p))
    }

    /// Sharded rendering, stage 1, on the device holding `g` (one shard of a model split over
    /// devices, see [`crate::train::sharded`]): projects `g` for `camera` into this
    /// rasterizer, where the view's rasterizer gathers it ([`Self::rasterize_gathered`]) and
    /// the shard's backward finds it ([`Self::project_backward_from`]).
    pub fn project_resident(
        &mut self,
        g: &DeviceGaussians,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<(), RenderError> {
        self.begin_forward()?;
        g.validate(options.sh_degree)?;
        let cam = CameraF::<f32>::new(camera)?;
        self.project_stage(g, &cam, options)?;
        self.projected = Some(super::ForwardFingerprint::new(
            g.n,
            g.sh_degree,
            camera,
            options,
        ));
        Ok(())
    }

    /// Sharded rendering, stage 2, on the device that renders `camera`: copies the projected
    /// splats of every shard (`shards` in model order, each just projected for this camera
    /// and these options) into this rasterizer one after another, and rasterizes them as one
    /// model. With the shards holding consecutive rows of a model, the splats are those of
    /// the whole model in its own order, so the image is the one-device render's, bit for
    /// bit (same kernels, same inputs). Returns the number of tile intersections.
    pub fn rasterize_gathered(
        &mut self,
        shards: &[&CudaRasterizer],
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<u64, RenderError> {
        self.begin_forward()?;
        let cam = CameraF::<f32>::new(camera)?;
        let mut degree = None;
        let mut n = 0usize;
        for shard in shards {
            let fp = shard
                .projected
                .as_ref()
                .filter(|fp| fp.camera == *camera && fp.options == *options)
                .ok_or(RenderError::StaleForward)?;
            if degree.is_some_and(|d| d != fp.stored_degree) {
                return Err(RenderError::StaleForward);
            }
            degree = Some(fp.stored_degree);
            n += fp.n;
        }
        let s = self.dev.clone();
        let b = &mut self.b;
        upload(&s, &camera_buffer(&cam), &mut b.cam)?;
        b.cam_fisheye = cam.fisheye;
        b.grow_splats(&s, n)?;
        let st = &mut self.staging;
        let mut at = 0;
        for shard in shards {
            let (sb, k) = (&shard.b, shard.projected.as_ref().map_or(0, |fp| fp.n));
            for (width, from, to) in [
                (2, &sb.means2d, &mut b.means2d),
                (3, &sb.conics, &mut b.conics),
                (1, &sb.opacities, &mut b.opacities),
                (3, &sb.colors, &mut b.colors),
                (1, &sb.depths, &mut b.depths),
            ] {
                copy_between(from, 0, to, width * at, width * k, &mut st.f)?;
            }
            copy_between(&sb.radii, 0, &mut b.radii, at, k, &mut st.u)?;
            copy_between(&sb.tiles_touched, 0, &mut b.tiles_touched, at, k, &mut st.w)?;
            at += k;
        }
        mark(&s, &mut self.profile, "gather splats")?;
        self.raster_stage(n, degree.unwrap_or(0), camera, &cam, options)
    }

    /// Sharded backward, stage 1, on the view's device: `rasterize_bwd` of the last
    /// [`Self::rasterize_gathered`] from `d_image` (`[H, W, 3]`); the splat gradients stay
    /// here for each shard's [`Self::project_backward_from`].
    pub fn backward_gathered(
        &mut self,
        camera: &Camera,
        options: &RenderOptions,
        d_image: &DeviceBuffer<f32>,
    ) -> Result<(), RenderError> {
        let n = self
            .fingerprint
            .as_ref()
            .filter(|fp| fp.camera == *camera && fp.options == *options)
            .ok_or(RenderError::StaleForward)?
            .n;
        begin_stages(&self.dev, &mut self.profile, false)?;
        self.raster_backward(n, camera, options, Some(d_image))?;
        self.gathered_grads = Some(n);
        Ok(())
    }

    /// Sharded backward, stage 2, on the device holding `g`: copies the shard's splat
    /// gradients (rows `offset..offset + g.n` of `view`'s last [`Self::backward_gathered`])
    /// and runs `project_bwd` against this rasterizer's projection of `g`. The parameter
    /// gradients ([`Self::grads`]), radii ([`Self::radii`]) and, with absgrad,
    /// [`Self::means2d_abs`] are then `g`'s for the view, as after a one-device backward; with
    /// [`RenderOptions::pose_grad`], [`Self::pose_grad`] is `g`'s share of the view's pose
    /// gradient (the shards' shares sum to it).
    pub fn project_backward_from(
        &mut self,
        view: &CudaRasterizer,
        offset: usize,
        g: &DeviceGaussians,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<&ParamGradBufs, RenderError> {
        super::ForwardFingerprint::new(g.n, g.sh_degree, camera, options)
            .check(self.projected.as_ref())?;
        let view_ok = view.fingerprint.as_ref().is_some_and(|fp| {
            fp.camera == *camera
                && fp.options == *options
                && view.gathered_grads == Some(fp.n)
                && offset + g.n <= fp.n
        });
        if !view_ok {
            return Err(RenderError::StaleForward);
        }
        g.validate(options.sh_degree)?;
        let n = g.n;
        let s = self.dev.clone();
        let (b, st) = (&mut self.b, &mut self.staging);
        let mut fields = vec![
            (2, &view.b.v.means2d, &mut b.v.means2d),
            (3, &view.b.v.conics, &mut b.v.conics),
            (3, &view.b.v.colors, &mut b.v.colors),
            (1, &view.b.v.opacities, &mut b.v.opacities),
        ];
        if options.absgrad {
            fields.push((2, &view.b.v.means2d_abs, &mut b.v.means2d_abs));
        }
        if options.inv_depth {
            fields.push((1, &view.b.v.inv_depths, &mut b.v.inv_depths));
        }
        for (width, from, to) in fields {
            grow(&s, to, width * n)?;
            copy_between(from, width * offset, to, 0, width * n, &mut st.f)?;
        }
        mark(&s, &mut self.profile, "scatter splat grads")?;
        self.project_backward(g, options, None)?;
        Ok(&self.b.g)
    }

    /// `d_image`: `None` = the rasterizer's own `d_image` buffer (the host path uploads there).
    /// `pose`: where a pose gradient goes (`None` = this rasterizer's own buffer).
    fn backward_core(
        &mut self,
        g: &DeviceGaussians,
        camera: &Camera,
        options: &RenderOptions,
        d_image: Option<&DeviceBuffer<f32>>,
        pose: Option<PoseTarget<'_>>,
    ) -> Result<(), RenderError> {
        self.raster_backward(g.n, camera, options, d_image)?;
        self.project_backward(g, options, pose)
    }

    /// `rasterize_bwd` of the last raster stage (`n` splats) into this rasterizer's `v`
    /// buffers (zeroed first).
    fn raster_backward(
        &mut self,
        n: usize,
        camera: &Camera,
        options: &RenderOptions,
        d_image: Option<&DeviceBuffer<f32>>,
    ) -> Result<(), RenderError> {
        let npix = camera.width as usize * camera.height as usize;
        let s = self.dev.clone();
        let b = &mut self.b;
        let d_image = d_image.unwrap_or(&b.d_image);
        if d_image.len() < 3 * npix {
            return Err(RenderError::BadShape {
                what: "d_image",
                got: d_image.len(),
                expected: 3 * npix,
            });
        }
        for (buf, len) in [
            (&mut b.v.means2d, 2 * n),
            (&mut b.v.conics, 3 * n),
            (&mut b.v.colors, 3 * n),
            (&mut b.v.opacities, n),
        ] {
            grow(&s, buf, len)?;
            s.memset_zero(buf, len)?;
        }
        if options.absgrad {
            grow(&s, &mut b.v.means2d_abs, 2 * n)?;
            s.memset_zero(&mut b.v.means2d_abs, 2 * n)?;
        }
        if options.inv_depth {
            grow(&s, &mut b.v.inv_depths, n)?;
            s.memset_zero(&mut b.v.inv_depths, n)?;
            if b.d_inv_depth.len() < npix {
                return Err(RenderError::BadShape {
                    what: "d_inv_depth",
                    got: b.d_inv_depth.len(),
                    expected: npix,
                });
            }
        }
        let splats = SplatBufs {
            means2d: &b.means2d,
            conics: &b.conics,
            opacities: &b.opacities,
            colors: &b.colors,
        };
        self.k.rasterize_bwd(
            n,
            self.m as usize,
            &b.ranges,
            &b.ids[self.sorted],
            &splats,
            camera.width,
            camera.height,
            options.background,
            &b.final_t,
            &b.last,
            d_image,
            options.absgrad,
            &mut b.v,
            options.inv_depth.then_some(InvDepthGradBufs {
                depths: &b.depths,
                d_plane: &b.d_inv_depth,
            }),
        )?;
        mark(&s, &mut self.profile, "rasterize bwd")?;
        Ok(())
    }

    /// `project_bwd` of `g` from the splat gradients in this rasterizer's `v` buffers and the
    /// projection in its splat buffers (this rasterizer's last projection of `g`); with
    /// [`RenderOptions::pose_grad`] the pose gradient into `pose`, or this rasterizer's own
    /// buffer when that is `None`.
    fn project_backward(
        &mut self,
        g: &DeviceGaussians,
        options: &RenderOptions,
        pose: Option<PoseTarget<'_>>,
    ) -> Result<(), RenderError> {
        let n = g.n;
        let coeffs = g.coeffs();
        let s = self.dev.clone();
        let b = &mut self.b;
        // No clearing: project_bwd writes every element of every parameter gradient once
        // (kernels/project_bwd.cu). The parity tests would see a miss: they reuse these
        // buffers dirty from larger scenes, and fresh emulated memory reads as NaN.
        b.g.params.grow_to(&s, n, g.sh_degree)?;
        grow(&s, &mut b.g.means2d, 2 * n)?;
        self.pose_ready = false;
        let own = pose.is_none();
        let pose = if options.pose_grad {
            grow(&s, &mut b.pose_part, pose_part_len(n))?;
            Some(match pose {
                Some(t) => PoseBufs {
                    part: &mut b.pose_part,
                    out: t.buf,
                    offset: t.offset,
                },
                None => PoseBufs {
                    part: &mut b.pose_part,
                    out: &mut b.pose,
                    offset: 0,
                },
            })
        } else {
            None
        };
        let p = ParamBufs {
            means: g.buffer(Field::Means),
            log_scales: g.buffer(Field::LogScales),
            rotations: g.buffer(Field::Rotations),
            logit_opacities: g.buffer(Field::LogitOpacities),
            sh: g.buffer(Field::Sh),
            coeffs: coeffs as u32,
            degree: options.sh_degree,
            filter_3d: filter_for(&self.filter_3d, n, g.sh_degree)?,
        };
        self.k.project_bwd(
            n as u32,
            &p,
            &b.cam,
            b.cam_fisheye,
            options.antialiased,
            &b.radii,
            &b.conics,
            &b.v,
            options.inv_depth,
            &mut b.g,
            pose,
        )?;
        mark(&s, &mut self.profile, "project bwd")?;
        self.grads_n = Some(n);
        self.pose_ready = options.pose_grad && own;
        Ok(())
    }

    fn backward_impl(
        &mut self,
        gaussians: &Gaussians,
        camera: &Camera,
        options: &RenderOptions,
        d_image: &[f32],
        grads: &mut GaussianGrads,
    ) -> Result<(), RenderError> {
        super::ForwardFingerprint::new(gaussians.len(), gaussians.sh_degree, camera, options)
            .check(self.fingerprint.as_ref())?;
        GaussianParams::from_gaussians(gaussians).validate(options.sh_degree)?;
        let npix = camera.width as usize * camera.height as usize;
        let planes = if options.inv_depth { 4 } else { 3 };
        if d_image.len() != planes * npix {
            return Err(RenderError::BadShape {
                what: "d_image",
                got: d_image.len(),
                expected: planes * npix,
            });
        }
        let s = self.dev.clone();
        begin_stages(&self.dev, &mut self.profile, false)?;
        let (d_image, d_inv_depth) = d_image.split_at(3 * npix);
        upload(&s, d_image, &mut self.b.d_image)?;
        if options.inv_depth {
            upload(&s, d_inv_depth, &mut self.b.d_inv_depth)?;
        }
        mark(&s, &mut self.profile, "bwd upload")?;
        // The forward uploaded these parameters (the fingerprint check above ties them).
        let params = self.host_params.take().ok_or(RenderError::StaleForward)?;
        let r = self.backward_core(&params, camera, options, None, None);
        self.host_params = Some(params);
        r?;
        let n = gaussians.len();
        let b = &self.b;
        grads.reset(n, gaussians.sh_degree);
        for f in Field::ALL {
            s.download(b.g.buffer(f), grads.field_mut(f))?;
        }
        download_rows(&s, &b.g.means2d, n, &mut grads.means2d)?;
        grads.means2d_abs.clear();
        if options.absgrad {
            download_rows(&s, &b.v.means2d_abs, n, &mut grads.means2d_abs)?;
        }
        // Some exactly with `pose_grad` (the backward above wrote it to the own buffer).
        grads.pose = self.pose_grad()?;
        mark(&s, &mut self.profile, "bwd download")?;
        Ok(())
    }

    /// The rendered image of the last forward, [H, W, 3], on the device.
    pub fn image(&self) -> &DeviceBuffer<f32> {
        &self.b.image
    }

    /// [`Self::image`], writable: a trainer edits it before the loss (a loss mask). The
    /// backward does not read it, so edits change nothing but what the loss sees.
    pub fn image_mut(&mut self) -> &mut DeviceBuffer<f32> {
        &mut self.b.image
    }

    /// The inverse-depth plane of the last forward (`[H, W]`), on the device: meaningful only
    /// when it had [`RenderOptions::inv_depth`].
    pub fn inv_depth(&self) -> &DeviceBuffer<f32> {
        &self.b.inv_depth
    }

    /// The inverse-depth plane and the final transmittance of the last forward, and where the
    /// next backward with [`RenderOptions::inv_depth`] reads `∂L/∂D` (all `[H, W]`; the last
    /// grown to `npix` values): a trainer's depth loss reads the first two and writes the
    /// third, on the device.
    #[allow(clippy::type_complexity)] // three planes, named in the doc
    pub fn inv_depth_and_grad(
        &mut self,
        npix: usize,
    ) -> Result<
        (
            &DeviceBuffer<f32>,
            &DeviceBuffer<f32>,
            &mut DeviceBuffer<f32>,
        ),
        CudaError,
    > {
        grow(&self.dev, &mut self.b.d_inv_depth, npix)?;
        Ok((&self.b.inv_depth, &self.b.final_t, &mut self.b.d_inv_depth))
    }

    /// The screen radii of the last forward (`[N]`, 0 = not drawn), on the device.
    pub fn radii(&self) -> &DeviceBuffer<u32> {
        &self.b.radii
    }

    /// The absolute 2D-mean gradient of the last backward (`[N, 2]`, pixel units), on the
    /// device: meaningful only when that backward had [`RenderOptions::absgrad`].
    pub fn means2d_abs(&self) -> &DeviceBuffer<f32> {
        &self.b.v.means2d_abs
    }

    /// The parameter gradients of the last backward, on the device.
    pub fn grads(&self) -> &ParamGradBufs {
        &self.b.g
    }

    /// The parameter gradients of the last backward, for terms added before the optimizer
    /// (the MCMC regularisers).
    pub fn grads_mut(&mut self) -> &mut ParamGradBufs {
        &mut self.b.g
    }

    /// The projected splats of the last forward (for stage-by-stage parity checks).
    pub fn splats(&self) -> Result<Vec<Splat<f32>>, CudaError> {
        let n = self.fingerprint.as_ref().map_or(0, |f| f.n);
        let s = &self.dev;
        let (mut m2, mut co, mut op, mut cl, mut de, mut ra) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        download(s, &self.b.means2d, 2 * n, &mut m2)?;
        download(s, &self.b.conics, 3 * n, &mut co)?;
        download(s, &self.b.opacities, n, &mut op)?;
        download(s, &self.b.colors, 3 * n, &mut cl)?;
        download(s, &self.b.depths, n, &mut de)?;
        download(s, &self.b.radii, n, &mut ra)?;
        Ok((0..n)
            .map(|i| Splat {
                mean2d: [m2[2 * i], m2[2 * i + 1]],
                conic: [co[3 * i], co[3 * i + 1], co[3 * i + 2]],
                opacity: op[i],
                color: [cl[3 * i], cl[3 * i + 1], cl[3 * i + 2]],
                depth: de[i],
                radius: ra[i],
            })
            .collect())
    }

    /// The sorted tile lists of the last forward, in the CPU's [`TileBins`] layout.
    pub fn bins(&self) -> Result<TileBins, CudaError> {
        let Some(f) = &self.fingerprint else {
            return Ok(TileBins::default());
        };
        let tx = f
            .camera
            .width
            .div_ceil(crate::render::cpu::project::TILE_SIZE);
        let ty = f
            .camera
            .height
            .div_ceil(crate::render::cpu::project::TILE_SIZE);
        let nt = (tx * ty) as usize;
        let s = &self.dev;
        let mut ranges = Vec::new();
        download(s, &self.b.ranges, 2 * nt, &mut ranges)?;
        let mut bins = TileBins::default();
        bins.tiles_x = tx;
        bins.tiles_y = ty;
        download(
            s,
            &self.b.ids[self.sorted],
            self.m as usize,
            &mut bins.isect_ids,
        )?;
        // Empty tiles have [0, 0); offsets are the end of the previous non-empty tile.
        bins.tile_offsets.push(0);
        let mut end = 0usize;
        for t in 0..nt {
            if ranges[2 * t + 1] > ranges[2 * t] {
                end = ranges[2 * t + 1] as usize;
            }
            bins.tile_offsets.push(end);
        }
        Ok(bins)
    }

    /// The per-splat gradients of the last backward (rasterize_bwd's output); an error when
    /// no backward ran since the last forward.
    pub fn splat_grads(&self) -> Result<Vec<SplatGrad<f32>>, CudaError> {
        let n = self.grads_n.ok_or(CudaError::NoBackward)?;
        let s = &self.dev;
        let (mut m2, mut co, mut cl, mut op) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        download(s, &self.b.v.means2d, 2 * n, &mut m2)?;
        download(s, &self.b.v.conics, 3 * n, &mut co)?;
        download(s, &self.b.v.colors, 3 * n, &mut cl)?;
        download(s, &self.b.v.opacities, n, &mut op)?;
        Ok((0..n)
            .map(|i| SplatGrad {
                mean2d: [m2[2 * i], m2[2 * i + 1]],
                conic: [co[3 * i], co[3 * i + 1], co[3 * i + 2]],
                color: [cl[3 * i], cl[3 * i + 1], cl[3 * i + 2]],
                opacity: op[i],
            })
            .collect())
    }

    /// Sorts key/value pairs on the device with the renderer's radix sort (low `bits` bits),
    /// for checking the sort against a CPU stable sort.
    pub fn sort_pairs(
        &mut self,
        keys: &[u32],
        vals: &[u32],
        bits: u32,
    ) -> Result<(Vec<u32>, Vec<u32>), CudaError> {
        assert_eq!(
            keys.len(),
            vals.len(),
            "sort_pairs: keys and values differ in length"
        );
        let s = self.dev.clone();
        let m = keys.len();
        let b = &mut self.b;
        upload(&s, keys, &mut b.keys[0])?;
        upload(&s, vals, &mut b.ids[0])?;
        grow(&s, &mut b.keys[1], m)?;
        grow(&s, &mut b.ids[1], m)?;
        grow(&s, &mut b.hist, sort::hist_len(m as u64))?;
        let r = sort::sort_pairs(
            &self.k,
            m as u64,
            0,
            bits,
            &mut b.keys,
            &mut b.ids,
            &mut b.hist,
            &mut b.scan32,
        )?;
        let (mut k, mut v) = (Vec::new(), Vec::new());
        download(&s, &b.keys[r], m, &mut k)?;
        download(&s, &b.ids[r], m, &mut v)?;
        self.fingerprint = None; // the render buffers were overwritten
        self.grads_n = None;
        Ok((k, v))
    }
}

impl Rasterizer for CudaRasterizer {
    fn name(&self) -> &'static str {
        "cuda"
    }

    /// Synchronised timing ([`CudaRasterizer::set_profiling`]): the host engine's steps wait
    /// for the device anyway, at every copy.
    fn set_stage_timing(&mut self, on: bool) {
        self.set_profiling(on);
    }

    /// The host copies between the stages belong to none.
    fn stage_times(&self) -> Option<StageTimes> {
        let Some(Profile::Synced { stages, .. }) = &self.profile else {
            return None;
        };
        let mut t = StageTimes::default();
        for &(name, s) in stages {
            t.add(name, 1e3 * s);
        }
        Some(t)
    }

    fn set_filter_3d(&mut self, filter: Option<&[f32]>) -> Result<(), RenderError> {
        match filter {
            Some(f) => {
                let dev = self.dev.clone();
                upload(&dev, f, self.filter_3d_buffer(f.len())?)?;
            }
            None => self.filter_3d = None,
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
        let r = self.forward_impl(gaussians, camera, options, out);
        if r.is_err() {
            self.fingerprint = None;
        }
        r
    }

    fn backward(
        &mut self,
        gaussians: &Gaussians,
        camera: &Camera,
        options: &RenderOptions,
        d_image: &[f32],
        grads: &mut GaussianGrads,
    ) -> Result<(), RenderError> {
        self.backward_impl(gaussians, camera, options, d_image, grads)
    }
}
