//! Training with the model split over several devices ([`ShardedEngine`]): each device holds
//! one shard (a run of consecutive rows: parameters, both Adam moments, densification
//! statistics), so a model that outgrows one GPU's memory trains on several, as in Grendel
//! and gsplat's distributed mode (Gaussians spread over GPUs, each image rendered by one).
//!
//! # A step
//! 1. The staged view goes to one device, the *view device* (round robin over the devices,
//!    so each renders and holds intersections for one view in K).
//! 2. Every device projects its shard for the view's camera
//!    ([`CudaRasterizer::project_resident`]): 2D means, conics, colours, opacities, depths,
//!    radii, tile counts — 48 bytes per Gaussian.
//! 3. The view device gathers every shard's splats, in row order, and rasterizes them as one
//!    model ([`CudaRasterizer::rasterize_gathered`]); the loss and `∂L/∂image` follow there.
//! 4. `rasterize_bwd` on the view device gives each splat's gradient
//!    ([`CudaRasterizer::backward_gathered`]); each shard takes its rows back (36 bytes per
//!    Gaussian, 44 with absgrad) and runs `project_bwd` into its own parameter gradients
//!    ([`CudaRasterizer::project_backward_from`]).
//! 5. Statistics and Adam run on every device on its own rows, as in [`DeviceEngine`].
//!
//! With [`RenderOptions::pose_grad`] each shard's `project_bwd` also sums its Gaussians' share
//! of the camera's pose gradient ([`CudaRasterizer::pose_grad`], 48 bytes read per shard); the
//! step's pose gradient is their sum in shard order (deterministic; the one-device engine's up
//! to the order of the additions).
//!
//! # Exactly the one-device algorithm
//! Shards hold consecutive rows, so the gathered splats are the whole model's in its own
//! order: the view device sorts and rasterizes exactly what one device would, and everything
//! else is per-Gaussian. A sharded run therefore follows the one-device run step for step (the
//! rasterizer's atomically accumulated gradients aside), which the tests check: same view
//! order, same learning rates, same densification decisions. What it buys is memory: each
//! device holds `1/K` of the model (1,312 bytes per Gaussian at SH degree 3) plus its view
//! rasterizer's buffers for the whole model's splats (their depth sort and gradients too:
//! [`super::device_engine::DEVICE_RENDER_BYTES_PER_GAUSSIAN`], 140 bytes per Gaussian) and
//! the intersections of its own views.
//!
//! # What crosses between devices
//! Per step: the splats of every shard to the view device and their gradients back (through
//! host memory in bounded chunks, [`crate::device::copy_between`]; no peer copies yet), the
//! loss scalars from the view device. The devices work in turn, not at once: the step is as
//! fast as one device's plus the copies (memory scaling, not throughput scaling).
//!
//! # Densification
//! The strategy decides on the host from the concatenated statistics, as for one device; a
//! [`RowPlan`] (keep, clone, split, append, relocate) of the whole model is applied on the
//! devices into balanced consecutive shards of the new row count
//! ([`ShardedEngine::apply_rows`]): each device gathers the new rows whose sources it holds,
//! and the few whose source lives elsewhere (appended copies, relocations, rows that move to
//! a neighbour to keep the shards balanced) are gathered there, copied over in chunks and
//! scattered into place, one field of one tensor at a time on every device before the next.
//! The model never goes through the host, and the device memory an edit needs is the
//! one-device edit's (one field's new rows beside the model) plus one chunk of that field.
//!
//! MCMC's regularisers are means over the whole model (each shard scales its gradients by
//! the total count, the loss sums every shard's sums) and its noise keys each row's normals
//! by the model row (`first` of `mcmc_noise`), so they are the one-device values.

use crate::device::{copy_between, Device};
use crate::render::cuda::kernels::POSE_LEN;
use crate::render::cuda::{CudaError, CudaRasterizer};
use crate::render::RenderOptions;
use crate::scene::camera::Camera;

use super::adam::{AdamConfig, GroupMask, LearningRates};
use super::bilagrid::GridShape;
use super::densify::{DensifyStats, Model, RowPlan, RowValues};
use super::device_engine::{
    DepthLoss, DeviceEngine, DeviceEngineError, Frame, RefineHost, ResidentEngine, RowDests,
    RowIndex, RowTensor, StepScalars, SKIP_ROW,
};
use super::exposure::Exposure;
use super::mcmc::{NoiseStep, Regularizer};
use crate::scene::gaussians::{Field, Gaussians};

/// The model split over devices (see the module doc).
pub struct ShardedEngine {
    /// Shard `d` on device `d`: the model's rows after those of shards `0..d`.
    shards: Vec<DeviceEngine>,
    /// The rasterizer that renders views on device `d`.
    views: Vec<CudaRasterizer>,
    /// The device the staged view renders on.
    view: usize,
    /// Views staged so far (the round robin's position).
    staged: u64,
    /// The last [`Self::render`]'s image, on the host.
    image: Vec<f32>,
}

impl ShardedEngine {
    /// An engine over `devices` (at least one) with an empty model.
    pub fn new(devices: Vec<Device>) -> Result<ShardedEngine, DeviceEngineError> {
        if devices.is_empty() {
            return Err(CudaError::Shape {
                what: "devices",
                got: 0,
                need: 1,
            }
            .into());
        }
        let mut shards = Vec::with_capacity(devices.len());
        let mut views = Vec::with_capacity(devices.len());
        for dev in devices {
            views.push(CudaRasterizer::on(dev.clone())?);
            shards.push(DeviceEngine::new(dev)?);
        }
        Ok(ShardedEngine {
            shards,
            views,
            view: 0,
            staged: 0,
            image: Vec::new(),
        })
    }

    /// Gaussians per shard, in row order.
    pub fn shard_lens(&self) -> Vec<usize> {
        self.shards.iter().map(DeviceEngine::len).collect()
    }
}

impl ResidentEngine for ShardedEngine {
    /// The first device (where page-locked views are allocated, see [`Self::stage_view`]).
    fn device(&self) -> &Device {
        self.shards[0].device()
    }

    /// Devices the model is spread over.
    fn devices(&self) -> Vec<Device> {
        self.shards.iter().map(|s| s.device().clone()).collect()
    }

    /// Gaussians in the whole model.
    fn len(&self) -> usize {
        self.shards.iter().map(DeviceEngine::len).sum()
    }

    /// Splits `model` into balanced consecutive shards (sizes differ by at most one) and
    /// uploads each to its device.
    fn upload_model(&mut self, model: &Model) -> Result<(), DeviceEngineError> {
        model.check_shapes().map_err(|e| CudaError::Shape {
            what: "model arrays",
            got: e.got,
            need: e.expected,
        })?;
        let k = self.shards.len();
        let n = model.len();
        let mut start = 0;
        for (d, shard) in self.shards.iter_mut().enumerate() {
            let len = n / k + usize::from(d < n % k);
            shard.upload_model(&rows(model, start, start + len))?;
            start += len;
        }
        Ok(())
    }

    /// The whole model on the host: the shards in row order, each written straight into its
    /// rows of one allocation (downloading parts and concatenating them would hold up to twice
    /// the model at once, past what the host memory plan counts).
    fn download_model(&self) -> Result<Model, DeviceEngineError> {
        let first = self.shards.first().expect("at least one shard");
        let n = self.shards.iter().map(DeviceEngine::len).sum();
        let mut model = Model::new(Gaussians::zeros(n, first.sh_degree()));
        let mut row0 = 0;
        for shard in &self.shards {
            shard.download_model_into(&mut model, row0)?;
            row0 += shard.len();
        }
        // Every shard takes the same Adam steps: the first one's counts are the model's.
        model.adam.steps = first.adam_steps();
        Ok(model)
    }

    /// Puts `frame` on the next view device (round robin) as the target of the next loss.
    /// A page-locked frame goes asynchronously to the first device, the one that allocated it;
    /// to another device it is copied as pageable memory (correct for any context).
    fn stage_view(
        &mut self,
        frame: Frame<'_>,
        rgb_len: usize,
        masked: bool,
        depth_plane: bool,
        exposure: Option<&Exposure>,
    ) -> Result<(), DeviceEngineError> {
        let view = (self.staged % self.shards.len() as u64) as usize;
        self.staged += 1;
        self.view = view;
        let frame = match frame {
            Frame::Pinned(slot, len) if view != 0 => Frame::Host(&slot[..len]),
            f => f,
        };
        self.shards[view].stage_view(frame, rgb_len, masked, depth_plane, exposure)
    }

    /// The staged view's grid goes to its view device.
    fn stage_grid(&mut self, shape: GridShape, grid: &[f32]) -> Result<(), DeviceEngineError> {
        self.shards[self.view].stage_grid(shape, grid)
    }

    fn grid_grad_into(&self, out: &mut Vec<f64>) -> Result<(), DeviceEngineError> {
        self.shards[self.view].grid_grad_into(out)
    }

    /// Forward, loss and backward of the staged view over every shard (the module doc's step
    /// 2–4); returns the loss scalars, with `pose_grad` the sum of the shards' pose gradients
    /// in shard order. Each shard's gradients, radii and (with absgrad) absolute 2D-mean
    /// gradients stay on its device for the statistics and Adam.
    fn forward_backward(
        &mut self,
        camera: &Camera,
        options: &RenderOptions,
        lambda_dssim: f32,
        depth: Option<DepthLoss>,
    ) -> Result<StepScalars, DeviceEngineError> {
        for shard in &mut self.shards {
            let (raster, params) = shard.raster_and_params();
            raster.project_resident(params, camera, options)?;
        }
        let v = self.view;
        let owners: Vec<&CudaRasterizer> = self.shards.iter().map(DeviceEngine::raster).collect();
        let intersections = self.views[v].rasterize_gathered(&owners, camera, options)?;
        self.shards[v].loss_on(self.views[v].image_mut(), camera, lambda_dssim)?;
        if let Some(d) = depth {
            self.shards[v].depth_loss_on(&mut self.views[v], camera, d)?;
        }
        self.views[v].backward_gathered(camera, options, self.shards[v].d_image())?;
        let mut offset = 0;
        for shard in &mut self.shards {
            let (raster, params) = shard.raster_and_params();
            let n = params.n;
            raster.project_backward_from(&self.views[v], offset, params, camera, options)?;
            offset += n;
        }
        // The shards' shares, read once every shard's backward is queued, added in shard order.
        let mut pose = options.pose_grad.then_some([0.0f64; POSE_LEN]);
        if let Some(sum) = &mut pose {
            for shard in &self.shards {
                let part = shard.raster().pose_grad()?.ok_or(CudaError::NoBackward)?;
                for (a, p) in sum.iter_mut().zip(part) {
                    *a += p;
                }
            }
        }
        Ok(StepScalars {
            pose_grad: pose,
            intersections,
            ..self.shards[v].step_scalars()?
        })
    }

    /// MCMC's regularisers over the whole model: each shard adds its gradients (means over
    /// all Gaussians), the loss term sums every shard's sums.
    fn regularize(&mut self, reg: Regularizer) -> Result<f64, DeviceEngineError> {
        let total = self.len();
        if total == 0 {
            return Ok(0.0);
        }
        let (mut sum_o, mut sum_s) = (0.0, 0.0);
        for shard in &mut self.shards {
            let (o, s) = shard.regularize_shard(reg, total)?;
            sum_o += o;
            sum_s += s;
        }
        Ok(reg.loss(sum_o, sum_s, total))
    }

    /// [`DeviceEngine::accumulate_stats`] on every shard.
    fn accumulate_stats(
        &mut self,
        width: u32,
        height: u32,
        absgrad: bool,
    ) -> Result<(), DeviceEngineError> {
        for shard in &mut self.shards {
            shard.accumulate_stats(width, height, absgrad)?;
        }
        Ok(())
    }

    /// [`DeviceEngine::refine_inputs`] of the whole model (the shards' concatenated).
    fn refine_inputs(&self) -> Result<RefineHost, DeviceEngineError> {
        let mut parts = self.shards.iter().map(DeviceEngine::refine_inputs);
        let mut all = parts.next().expect("at least one shard")?;
        for part in parts {
            let p = part?;
            append_stats(&mut all.stats, p.stats);
            all.means.extend(p.means);
            all.log_scales.extend(p.log_scales);
            all.rotations.extend(p.rotations);
            all.logit_opacities.extend(p.logit_opacities);
        }
        Ok(all)
    }

    /// Applies a [`RowPlan`] of the whole model on the devices, into balanced shards of the
    /// new row count: each device gathers the new rows whose sources it holds
    /// (`gather_rows`); rows whose source lives on another device are gathered there in chunks
    /// of [`ROW_CHUNK`], copied over and put in place (`scatter_rows`). One field of one tensor
    /// at a time: every device builds its new buffer of the field, and only then do the old
    /// ones go (a later device may still need rows of an earlier one's old buffer). The shards
    /// stay consecutive, so the result is [`DeviceEngine::apply_rows`]'s, row for row; nothing
    /// of the model goes through the host but the chunks in flight.
    fn apply_rows(&mut self, plan: &RowPlan) -> Result<(), DeviceEngineError> {
        let n = self.len();
        let shape =
            |what, got, need| -> DeviceEngineError { CudaError::Shape { what, got, need }.into() };
        if let Some(&bad) = plan.src.iter().find(|&&i| i as usize >= n) {
            return Err(shape("row plan source", n, bad as usize + 1));
        }
        let total = plan.src.len();
        if plan.fresh.len() != total {
            return Err(shape("row plan fresh flags", plan.fresh.len(), total));
        }
        if let Some(bad) = plan.replace.iter().find(|v| v.row as usize >= total) {
            return Err(shape("row plan replacement", total, bad.row as usize + 1));
        }
        let k = self.shards.len();
        // Old shard d holds model rows starts[d]..starts[d + 1].
        let mut starts = vec![0u32];
        for shard in &self.shards {
            starts.push(starts.last().unwrap() + shard.len() as u32);
        }
        let owner = |row: u32| starts.partition_point(|&s| s <= row) - 1;
        let lens: Vec<usize> = (0..k)
            .map(|e| total / k + usize::from(e < total % k))
            .collect();
        // Every index an edit needs, uploaded once for all fields: per device its new rows'
        // local sources, and per chunk of rows held elsewhere the sources there and the rows
        // here they land in.
        let mut local = Vec::with_capacity(k);
        let mut moves = Vec::new();
        let mut first = 0usize;
        for (e, &len) in lens.iter().enumerate() {
            let (src, fresh) = (
                &plan.src[first..first + len],
                &plan.fresh[first..first + len],
            );
            let here: Vec<u32> = src
                .iter()
                .map(|&s| {
                    if owner(s) == e {
                        s - starts[e]
                    } else {
                        SKIP_ROW
                    }
                })
                .collect();
            local.push(self.shards[e].row_index(&here, fresh)?);
            for d in (0..k).filter(|&d| d != e) {
                let at: Vec<u32> = (0..len as u32)
                    .filter(|&r| owner(src[r as usize]) == d)
                    .collect();
                for chunk in at.chunks(ROW_CHUNK) {
                    let from: Vec<u32> =
                        chunk.iter().map(|&r| src[r as usize] - starts[d]).collect();
                    let flags: Vec<bool> = chunk.iter().map(|&r| fresh[r as usize]).collect();
                    moves.push(Move {
                        to_device: e,
                        from_device: d,
                        from: self.shards[d].row_index(&from, &flags)?,
                        to: self.shards[e].row_dests(chunk)?,
                    });
                }
            }
            first += len;
        }
        let mut staging = Vec::new();
        for t in RowTensor::ALL {
            for f in Field::ALL {
                let mut built = Vec::with_capacity(k);
                for (e, index) in local.iter().enumerate() {
                    let mut out = self.shards[e].alloc_field(f, index.rows())?;
                    self.shards[e].gather_field(t, f, index, &mut out)?;
                    for m in moves.iter().filter(|m| m.to_device == e) {
                        let count = m.from.rows();
                        let sender = &self.shards[m.from_device];
                        let mut sent = sender.alloc_field(f, count)?;
                        sender.gather_field(t, f, &m.from, &mut sent)?;
                        let mut received = self.shards[e].alloc_field(f, count)?;
                        copy_between(&sent, 0, &mut received, 0, sent.len(), &mut staging)?;
                        self.shards[e].scatter_field(f, &received, &m.to, &mut out)?;
                    }
                    built.push(out);
                }
                // Every device's new buffer of this field is complete: only now may the old
                // ones go.
                for (shard, out) in self.shards.iter_mut().zip(built) {
                    shard.install_field(t, f, out);
                }
            }
        }
        let mut first = 0u32;
        for (shard, len) in self.shards.iter_mut().zip(&lens) {
            let end = first + *len as u32;
            let replace: Vec<RowValues> = plan
                .replace
                .iter()
                .filter(|v| (first..end).contains(&v.row))
                .map(|v| RowValues {
                    row: v.row - first,
                    ..*v
                })
                .collect();
            shard.finish_rows(*len, &replace)?;
            first = end;
        }
        Ok(())
    }

    /// [`DeviceEngine::reset_opacity`] on every shard.
    fn reset_opacity(&mut self, max_opacity: f32) -> Result<(), DeviceEngineError> {
        for shard in &mut self.shards {
            shard.reset_opacity(max_opacity)?;
        }
        Ok(())
    }

    fn set_filter_cameras(&mut self, rows: &[f32]) -> Result<(), DeviceEngineError> {
        for shard in &mut self.shards {
            shard.set_filter_cameras(rows)?;
        }
        Ok(())
    }

    /// Every shard's rates, then their filters with the lowest rate of the whole model: the
    /// one-device filter.
    fn refresh_filter(&mut self) -> Result<(), DeviceEngineError> {
        let mut lowest = f32::INFINITY;
        for shard in &mut self.shards {
            shard.filter_rates()?;
        }
        for shard in &self.shards {
            lowest = lowest.min(shard.filter_lowest()?);
        }
        for shard in &mut self.shards {
            shard.set_filter_lowest(lowest)?;
            shard.filter_finish()?;
        }
        Ok(())
    }

    /// [`DeviceEngine::reset_opacity_through`] on every shard.
    fn reset_opacity_through(&mut self, max_opacity: f32) -> Result<(), DeviceEngineError> {
        for shard in &mut self.shards {
            shard.reset_opacity_through(max_opacity)?;
        }
        Ok(())
    }

    /// Every shard's filter, in shard order: the model's rows.
    fn append_filter(&self, out: &mut Vec<f32>) -> Result<(), DeviceEngineError> {
        for shard in &self.shards {
            ResidentEngine::append_filter(shard, out)?;
        }
        Ok(())
    }

    /// One Adam step of every shard from its gradients of the last backward.
    fn adam_step(
        &mut self,
        cfg: &AdamConfig,
        lr: &LearningRates,
        mask: GroupMask,
    ) -> Result<(), DeviceEngineError> {
        for shard in &mut self.shards {
            shard.adam_step(cfg, lr, mask)?;
        }
        Ok(())
    }

    /// [`DeviceEngine::row_values`] of the whole model.
    fn row_values(&self) -> Result<Model, DeviceEngineError> {
        let mut parts = self.shards.iter().map(DeviceEngine::row_values);
        let mut all = parts.next().expect("at least one shard")?.gaussians;
        for part in parts {
            all.append(&part?.gaussians);
        }
        Ok(Model::new(all))
    }

    /// MCMC's noise on every shard, each row's normals keyed by its model row (as on one
    /// device).
    fn add_noise(&mut self, noise: NoiseStep) -> Result<(), DeviceEngineError> {
        let mut first = 0u64;
        for shard in &mut self.shards {
            let n = shard.len() as u64;
            shard.add_noise_from(noise, first)?;
            first += n;
        }
        Ok(())
    }

    /// Renders `camera` with the whole model on the first device; the image on the host.
    fn render(
        &mut self,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<&mut [f32], DeviceEngineError> {
        for shard in &mut self.shards {
            let (raster, params) = shard.raster_and_params();
            raster.project_resident(params, camera, options)?;
        }
        let owners: Vec<&CudaRasterizer> = self.shards.iter().map(DeviceEngine::raster).collect();
        self.views[0].rasterize_gathered(&owners, camera, options)?;
        let n = 3 * camera.width as usize * camera.height as usize;
        self.image.resize(n, 0.0);
        self.shards[0]
            .device()
            .download(self.views[0].image(), &mut self.image)?;
        Ok(&mut self.image)
    }

    /// Loads the MCMC kernels on every device (see [`DeviceEngine::load_mcmc`]).
    fn load_mcmc(&mut self) -> Result<(), DeviceEngineError> {
        self.shards.iter_mut().try_for_each(DeviceEngine::load_mcmc)
    }

    /// Whether every device has the MCMC kernels loaded.
    fn mcmc_loaded(&self) -> bool {
        self.shards.iter().all(DeviceEngine::mcmc_loaded)
    }
}

/// Rows `start..end` of `model` (parameters, moments, statistics; the step counts).
fn rows(model: &Model, start: usize, end: usize) -> Model {
    let src: Vec<u32> = (start as u32..end as u32).collect();
    let mut part = Model::new(model.gaussians.gather(&src, None));
    part.adam.exp_avg = model.adam.exp_avg.gather(&src, None);
    part.adam.exp_avg_sq = model.adam.exp_avg_sq.gather(&src, None);
    part.adam.steps = model.adam.steps;
    part.stats = DensifyStats {
        grad_accum: model.stats.grad_accum[start..end].to_vec(),
        denom: model.stats.denom[start..end].to_vec(),
        max_radii: model.stats.max_radii[start..end].to_vec(),
    };
    part
}

/// Rows per cross-device piece of [`ShardedEngine::apply_rows`]: 16,384 rows of the widest
/// field (the SH coefficients, 48 floats at degree 3) are 3.1 MB, the extra device memory an
/// edit holds on each side (the plan's [`super::device_engine::edit_chunk_bytes`]).
pub const ROW_CHUNK: usize = 1 << 14;

/// Rows of a sharded edit whose source lives on another device: gathered there by `from`,
/// copied over, and scattered into the rows `to` (on the receiving device) of its new shard.
struct Move {
    to_device: usize,
    from_device: usize,
    from: RowIndex,
    to: RowDests,
}

/// Appends `part`'s statistics to `stats`.
fn append_stats(stats: &mut DensifyStats, part: DensifyStats) {
    stats.grad_accum.extend(part.grad_accum);
    stats.denom.extend(part.denom);
    stats.max_radii.extend(part.max_radii);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::RenderError;
    use crate::rng::Rng;
    use crate::scene::camera::Projection;
    use crate::scene::camera::{Intrinsics, Pose};
    use crate::scene::gaussians::{Field, Gaussians};
    use crate::train::densify::RowValues;

    fn emulated(k: usize) -> Vec<Device> {
        (0..k).map(|_| Device::emulated().unwrap()).collect()
    }

    fn camera() -> Camera {
        Camera {
            width: 48,
            height: 32,
            intrinsics: Intrinsics {
                fx: 40.0,
                fy: 40.0,
                cx: 24.0,
                cy: 16.0,
            },
            world_to_camera: Pose::IDENTITY,
            projection: Projection::Pinhole,
        }
    }

    /// `n` Gaussians in front of [`camera`], with distinct moments and statistics.
    fn model(n: usize, seed: u64) -> Model {
        let mut rng = Rng::new(seed);
        let mut g = Gaussians::zeros(n, 1);
        for i in 0..n {
            g.means[i] = [
                rng.uniform(-1.2, 1.2) as f32,
                rng.uniform(-0.8, 0.8) as f32,
                rng.uniform(2.0, 5.0) as f32,
            ];
            g.log_scales[i] = [0, 1, 2].map(|_| rng.uniform(-3.5, -1.5) as f32);
            g.rotations[i] = [0, 1, 2, 3].map(|_| rng.normal() as f32);
            g.logit_opacities[i] = rng.uniform(-1.0, 3.0) as f32;
        }
        g.sh.iter_mut()
            .for_each(|c| *c = [0, 1, 2].map(|_| rng.normal() as f32 * 0.5));
        let mut m = Model::new(g);
        m.adam.steps = [7, 7, 7, 7, 7, 3];
        for f in Field::ALL {
            m.adam.exp_avg.field_mut(f).fill_with(|| rng.next_f32());
            m.adam.exp_avg_sq.field_mut(f).fill_with(|| rng.next_f32());
        }
        for i in 0..n {
            m.stats.grad_accum[i] = i as f32 * 0.5;
            m.stats.denom[i] = i as u32 + 1;
            m.stats.max_radii[i] = 3 * i as u32;
        }
        m
    }

    fn options() -> RenderOptions {
        RenderOptions {
            sh_degree: 1,
            ..RenderOptions::default()
        }
    }

    /// Shards are consecutive, balanced (sizes differ by at most one, empty ones when the
    /// model is smaller than the device count) and come back exactly.
    #[test]
    fn shards_are_balanced_and_round_trip_exactly() {
        let mut e = ShardedEngine::new(emulated(3)).unwrap();
        for (n, lens) in [(7, vec![3, 2, 2]), (1, vec![1, 0, 0]), (0, vec![0, 0, 0])] {
            let m = model(n, n as u64);
            e.upload_model(&m).unwrap();
            assert_eq!(e.shard_lens(), lens);
            assert_eq!(e.len(), n);
            assert!(e.download_model().unwrap() == m, "{n} Gaussians");
            let inputs = e.refine_inputs().unwrap();
            assert_eq!(inputs.stats, m.stats);
            assert_eq!(inputs.means, m.gaussians.means);
            assert_eq!(inputs.logit_opacities, m.gaussians.logit_opacities);
            assert_eq!(e.row_values().unwrap().gaussians.means, m.gaussians.means);
        }
    }

    /// The sharded render gathers the one-device splats in their order: the image is the
    /// one-device image bit for bit, with or without an empty shard.
    #[test]
    fn sharded_render_is_the_one_device_render() {
        let (cam, opts) = (camera(), options());
        for (devices, n) in [(3, 300), (4, 3)] {
            let m = model(n, 11);
            let mut one = DeviceEngine::new(Device::emulated().unwrap()).unwrap();
            one.upload_model(&m).unwrap();
            let want = one.render(&cam, &opts).unwrap().to_vec();
            assert!(want.iter().any(|&v| v > 0.05), "the scene is visible");
            let mut many = ShardedEngine::new(emulated(devices)).unwrap();
            many.upload_model(&m).unwrap();
            assert_eq!(many.render(&cam, &opts).unwrap(), &want[..]);
        }
    }

    /// A row plan of the whole model (keep, drop, copy, replace values, append fresh rows,
    /// rows whose source is on another device) gives the host's result in balanced shards;
    /// an out-of-range plan is refused and changes nothing.
    #[test]
    fn row_plans_apply_to_the_whole_model() {
        let m = model(10, 3);
        let mut e = ShardedEngine::new(emulated(3)).unwrap();
        e.upload_model(&m).unwrap();
        let plan = RowPlan {
            src: vec![0, 2, 3, 5, 6, 7, 9, 9, 1, 8, 4, 4],
            fresh: vec![
                false, false, false, false, false, false, false, true, false, false, false, true,
            ],
            replace: vec![RowValues {
                row: 11,
                mean: [0.5, 0.25, 3.0],
                log_scale: [-2.0; 3],
                logit_opacity: Some(-1.5),
            }],
        };
        let mut want = m.clone();
        want.apply_rows(&plan);
        e.apply_rows(&plan).unwrap();
        assert_eq!(e.shard_lens(), vec![4, 4, 4]);
        assert!(e.download_model().unwrap() == want);
        let bad = RowPlan {
            src: vec![0, 12],
            fresh: vec![false; 2],
            replace: Vec::new(),
        };
        let err = e.apply_rows(&bad).unwrap_err().to_string();
        assert!(err.contains("row plan source"), "{err}");
        assert!(e.download_model().unwrap() == want);
    }

    /// Every row crossing devices, more of them than one chunk: the order of a model of
    /// 2 × 20,000 rows reversed, with every third row fresh.
    #[test]
    fn row_plans_move_rows_across_devices_in_chunks() {
        let n = 40_000;
        let mut g = Gaussians::zeros(n, 0);
        for f in Field::ALL {
            let v = g.field_mut(f);
            let len = v.len();
            v.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = (i * 7 % len) as f32);
        }
        let mut m = Model::new(g);
        for f in Field::ALL {
            m.adam.exp_avg.field_mut(f).fill(1.5);
            m.adam.exp_avg_sq.field_mut(f).fill(2.5);
        }
        let mut e = ShardedEngine::new(emulated(2)).unwrap();
        e.upload_model(&m).unwrap();
        let plan = RowPlan {
            src: (0..n as u32).rev().collect(),
            fresh: (0..n).map(|i| i % 3 == 0).collect(),
            replace: Vec::new(),
        };
        assert!(n / 2 > ROW_CHUNK, "more than one chunk per device");
        let mut want = m.clone();
        want.apply_rows(&plan);
        let devices = e.devices();
        let held: Vec<u64> = devices
            .iter()
            .map(|d| {
                d.reset_peak();
                d.usage().live
            })
            .collect();
        e.apply_rows(&plan).unwrap();
        assert_eq!(e.shard_lens(), vec![n / 2, n / 2]);
        assert!(e.download_model().unwrap() == want);
        // Each device held at most one field's new rows and one chunk of it on each side
        // beside its shard (degree 0: the widest field is the rotations' 4 floats).
        for (d, held) in devices.iter().zip(held) {
            let used = d.usage();
            let bound = held.max(used.live)
                + (n / 2) as u64 * super::super::device_engine::edit_bytes_per_gaussian(0)
                + super::super::device_engine::edit_chunk_bytes(0);
            assert!(
                used.peak <= bound,
                "{}: peak {} B, bound {bound} B (held {held} B before, {} B after)",
                d.name(),
                used.peak,
                used.live
            );
        }
    }

    /// The stages refuse what they were not prepared for: a shard that did not project this
    /// camera, a backward before the gathered backward.
    #[test]
    fn stages_refuse_stale_inputs() {
        let (cam, opts) = (camera(), options());
        let devs = emulated(2);
        let m = model(20, 5);
        let mut a = DeviceEngine::new(devs[0].clone()).unwrap();
        let mut b = DeviceEngine::new(devs[1].clone()).unwrap();
        a.upload_model(&rows(&m, 0, 10)).unwrap();
        b.upload_model(&rows(&m, 10, 20)).unwrap();
        let mut view = CudaRasterizer::on(devs[0].clone()).unwrap();
        {
            let (r, p) = a.raster_and_params();
            r.project_resident(p, &cam, &opts).unwrap();
        }
        // b has not projected: refused.
        let stale = view.rasterize_gathered(&[a.raster(), b.raster()], &cam, &opts);
        assert!(matches!(stale, Err(RenderError::StaleForward)), "{stale:?}");
        {
            let (r, p) = b.raster_and_params();
            r.project_resident(p, &cam, &opts).unwrap();
        }
        // Another camera than the projections': refused.
        let mut moved = cam;
        moved.intrinsics.fx = 41.0;
        let stale = view.rasterize_gathered(&[a.raster(), b.raster()], &moved, &opts);
        assert!(matches!(stale, Err(RenderError::StaleForward)), "{stale:?}");
        view.rasterize_gathered(&[a.raster(), b.raster()], &cam, &opts)
            .unwrap();
        // No gathered backward yet: the shard's backward is refused.
        let (r, p) = a.raster_and_params();
        let stale = r.project_backward_from(&view, 0, p, &cam, &opts);
        assert!(matches!(stale, Err(RenderError::StaleForward)));
    }
}
