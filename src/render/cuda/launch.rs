//! Typed launches: one function per kernel entry point, written once for both device drivers
//! (CUDA and the host emulation). Each checks the shapes of its device buffers against the
//! element counts it is given (buffers are reused across renders, so their capacity may exceed
//! the count, never fall short), skips empty launches, and holds the only `unsafe` — the launch
//! itself — with the invariant that makes it sound.

use std::collections::HashMap;

use super::kernels::{
    Kernel, CAM_LEN, ELEMENT_BLOCK, POSE_LEN, SCAN_BLOCK, SCAN_ITEMS, SORT_BLOCK, SORT_TILE,
};
use super::CudaError;
use super::DeviceGaussians;
use crate::device::{Device, DeviceBuffer, Element, Function, KernelArg, LaunchConfig};
use crate::render::cpu::project::TILE_SIZE;
use crate::scene::gaussians::Field;

use KernelArg::{F32, U32, U64};

/// Every entry point, loaded from the compiled modules.
pub struct Kernels {
    dev: Device,
    funcs: HashMap<&'static str, Function>,
}

fn check(what: &'static str, got: usize, need: usize) -> Result<(), CudaError> {
    if got < need {
        return Err(CudaError::Shape { what, got, need });
    }
    Ok(())
}

fn grid_1d(n: u64, block: u32) -> Result<LaunchConfig, CudaError> {
    Ok(LaunchConfig::linear(n, block)?)
}

/// The radix sort's grid over `m` keys: one block of SORT_BLOCK threads per SORT_TILE keys.
fn sort_grid(m: u64) -> Result<LaunchConfig, CudaError> {
    let tiles = LaunchConfig::linear(m, SORT_TILE)?;
    Ok(LaunchConfig {
        block: (SORT_BLOCK, 1, 1),
        ..tiles
    })
}

/// Gaussian parameters on the device ([N, …] like `Gaussians`).
pub struct ParamBufs<'a> {
    pub means: &'a DeviceBuffer<f32>,
    pub log_scales: &'a DeviceBuffer<f32>,
    pub rotations: &'a DeviceBuffer<f32>,
    pub logit_opacities: &'a DeviceBuffer<f32>,
    pub sh: &'a DeviceBuffer<f32>,
    pub coeffs: u32,
    pub degree: u32,
    /// Mip-Splatting's 3D filter, a standard deviation per Gaussian (`[N]`), when the model is
    /// rendered through one ([`crate::scene::filter3d`]).
    pub filter_3d: Option<&'a DeviceBuffer<f32>>,
}

impl ParamBufs<'_> {
    /// The filter's argument (a null pointer for none), checked to hold `n` values.
    fn filter_arg(&self, n: usize) -> Result<KernelArg, CudaError> {
        match self.filter_3d {
            Some(f) => {
                check("filter_3d [N]", f.len(), n)?;
                Ok(f.arg())
            }
            None => Ok(KernelArg::Ptr(0)),
        }
    }
}

/// Where [`Kernels::project_bwd`] puts the pose gradient: the per-block partials (scratch of
/// [`pose_part_len`] doubles) and the [`POSE_LEN`] sums, at `out[offset..offset + POSE_LEN]`.
/// `out` must belong to the launching device (checked).
pub struct PoseBufs<'a> {
    pub part: &'a mut DeviceBuffer<f64>,
    pub out: &'a mut DeviceBuffer<f64>,
    pub offset: usize,
}

/// Doubles of per-block pose partials that `project_bwd` writes for `n` Gaussians: one per
/// pose component and block of [`ELEMENT_BLOCK`] (at least one block).
pub fn pose_part_len(n: usize) -> usize {
    POSE_LEN * n.div_ceil(ELEMENT_BLOCK as usize).max(1)
}

/// Projected splats on the device.
pub struct SplatBufs<'a> {
    pub means2d: &'a DeviceBuffer<f32>,
    pub conics: &'a DeviceBuffer<f32>,
    pub opacities: &'a DeviceBuffer<f32>,
    pub colors: &'a DeviceBuffer<f32>,
}

impl Kernels {
    /// Compiles (or loads from the cache) and loads every module.
    pub fn load(dev: &Device) -> Result<Kernels, CudaError> {
        let mut funcs = HashMap::new();
        for k in Kernel::ALL {
            let module = dev.load_module(&k.module_source()?)?;
            for &e in k.entry_points() {
                funcs.insert(e, module.function(e)?.clone());
            }
        }
        Ok(Kernels {
            dev: dev.clone(),
            funcs,
        })
    }

    /// Launches entry point `name`.
    ///
    /// # Safety
    /// As [`Device::launch`]: `args` match the kernel's parameters and every buffer holds what
    /// the kernel indexes (each typed launch below checks its shapes first).
    unsafe fn go(
        &self,
        name: &'static str,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<(), CudaError> {
        // Every entry point of Kernel::ALL is inserted by `load`; the names used below are
        // the same literals as in `Kernel::entry_points`, checked by the unit test there.
        let f = &self.funcs[name];
        // SAFETY: forwarded from this function's contract.
        unsafe { self.dev.launch(f, cfg, args) }?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn project_fwd(
        &self,
        n: u32,
        p: &ParamBufs<'_>,
        cam: &DeviceBuffer<f32>,
        tiles_x: u32,
        tiles_y: u32,
        antialiased: bool,
        means2d: &mut DeviceBuffer<f32>,
        conics: &mut DeviceBuffer<f32>,
        opacities: &mut DeviceBuffer<f32>,
        colors: &mut DeviceBuffer<f32>,
        depths: &mut DeviceBuffer<f32>,
        radii: &mut DeviceBuffer<u32>,
        tiles_touched: &mut DeviceBuffer<u64>,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        let nu = n as usize;
        check("means [N,3]", p.means.len(), 3 * nu)?;
        check("log_scales [N,3]", p.log_scales.len(), 3 * nu)?;
        check("rotations [N,4]", p.rotations.len(), 4 * nu)?;
        check("logit_opacities [N]", p.logit_opacities.len(), nu)?;
        check("sh [N,K,3]", p.sh.len(), 3 * nu * p.coeffs as usize)?;
        check("cam", cam.len(), CAM_LEN)?;
        check("means2d [N,2]", means2d.len(), 2 * nu)?;
        check("conics [N,3]", conics.len(), 3 * nu)?;
        check("opacities [N]", opacities.len(), nu)?;
        check("colors [N,3]", colors.len(), 3 * nu)?;
        check("depths [N]", depths.len(), nu)?;
        check("radii [N]", radii.len(), nu)?;
        check("tiles_touched [N+1]", tiles_touched.len(), nu + 1)?;
        let filter = p.filter_arg(nu)?;
        let cfg = grid_1d(n as u64, ELEMENT_BLOCK)?;
        let args = [
            U32(n),
            p.means.arg(),
            p.log_scales.arg(),
            p.rotations.arg(),
            p.logit_opacities.arg(),
            p.sh.arg(),
            U32(p.coeffs),
            U32(p.degree),
            cam.arg(),
            U32(tiles_x),
            U32(tiles_y),
            U32(antialiased.into()),
            filter,
            means2d.arg(),
            conics.arg(),
            opacities.arg(),
            colors.arg(),
            depths.arg(),
            radii.arg(),
            tiles_touched.arg(),
        ];
        // SAFETY: the argument list matches `project_fwd` in kernels/project_fwd.cu in order
        // and type; every buffer holds at least the elements the kernel indexes for `n`
        // (checked above; the filter, when not null, too), and the device orders the launch
        // after prior work.
        unsafe { self.go("project_fwd", cfg, &args) }?;
        Ok(())
    }

    /// In-place exclusive scan of `n` u64s, using `tmp` (one buffer per level) as scratch.
    pub fn scan_u64(
        &self,
        data: &mut DeviceBuffer<u64>,
        n: u64,
        tmp: &mut Vec<DeviceBuffer<u64>>,
    ) -> Result<(), CudaError> {
        self.scan(data, n, tmp, "scan_block_u64", "scan_add_u64")
    }

    /// In-place exclusive scan of `n` u32s.
    pub fn scan_u32(
        &self,
        data: &mut DeviceBuffer<u32>,
        n: u64,
        tmp: &mut Vec<DeviceBuffer<u32>>,
    ) -> Result<(), CudaError> {
        self.scan(data, n, tmp, "scan_block_u32", "scan_add_u32")
    }

    fn scan<T: Element>(
        &self,
        data: &mut DeviceBuffer<T>,
        n: u64,
        tmp: &mut Vec<DeviceBuffer<T>>,
        block_fn: &'static str,
        add_fn: &'static str,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        check("scan data", data.len(), n as usize)?;
        let tile = (SCAN_BLOCK * SCAN_ITEMS) as u64;
        // Level sizes: n, ceil(n/tile), … down to one block.
        let mut sizes = vec![n];
        while *sizes.last().unwrap_or(&1) > tile {
            let s = sizes[sizes.len() - 1].div_ceil(tile);
            sizes.push(s);
        }
        // tmp[k] receives the block sums of level k.
        for (k, &s) in sizes.iter().enumerate() {
            let need = s.div_ceil(tile) as usize;
            if tmp.len() <= k {
                tmp.push(self.dev.alloc::<T>(need)?);
            } else if tmp[k].len() < need {
                tmp[k] = self.dev.alloc::<T>(need)?;
            }
        }
        // Level k scans `data` (k = 0) or the block sums of level k − 1.
        let level = |k: usize, tmp: &[DeviceBuffer<T>]| {
            if k == 0 {
                data.arg()
            } else {
                tmp[k - 1].arg()
            }
        };
        for (k, &s) in sizes.iter().enumerate() {
            let cfg = LaunchConfig {
                block: (SCAN_BLOCK, 1, 1),
                ..grid_1d(s, SCAN_BLOCK * SCAN_ITEMS)?
            };
            let args = [level(k, tmp), tmp[k].arg(), U64(s)];
            // SAFETY: (data, block_sums, n) matches scan_block_* in kernels/scan.cu; the data
            // buffer holds ≥ s elements and block_sums ≥ ceil(s / tile) (ensured above).
            unsafe { self.go(block_fn, cfg, &args) }?;
        }
        for k in (0..sizes.len().saturating_sub(1)).rev() {
            let s = sizes[k];
            let cfg = grid_1d(s, ELEMENT_BLOCK)?;
            let args = [level(k, tmp), tmp[k].arg(), U64(s)];
            // SAFETY: (data, block_offsets, n) matches scan_add_* in kernels/scan.cu; the
            // offsets buffer holds ceil(s / tile) scanned sums (the level above, done first).
            unsafe { self.go(add_fn, cfg, &args) }?;
        }
        Ok(())
    }

    pub fn depth_keys(
        &self,
        n: u32,
        depths: &DeviceBuffer<f32>,
        radii: &DeviceBuffer<u32>,
        keys: &mut DeviceBuffer<u32>,
        ids: &mut DeviceBuffer<u32>,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        let nu = n as usize;
        check("depths [N]", depths.len(), nu)?;
        check("radii [N]", radii.len(), nu)?;
        check("depth keys [N]", keys.len(), nu)?;
        check("depth ids [N]", ids.len(), nu)?;
        let cfg = grid_1d(n as u64, ELEMENT_BLOCK)?;
        let args = [U32(n), depths.arg(), radii.arg(), keys.arg(), ids.arg()];
        // SAFETY: matches depth_keys in kernels/tile_binning.cu; every buffer holds N
        // elements (checked above).
        unsafe { self.go("depth_keys", cfg, &args) }?;
        Ok(())
    }

    pub fn gather_counts(
        &self,
        n: u32,
        order: &DeviceBuffer<u32>,
        tiles_touched: &DeviceBuffer<u64>,
        counts: &mut DeviceBuffer<u64>,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        let nu = n as usize;
        check("order [N]", order.len(), nu)?;
        check("tiles_touched [N]", tiles_touched.len(), nu)?;
        check("counts [N+1]", counts.len(), nu + 1)?;
        let cfg = grid_1d(n as u64, ELEMENT_BLOCK)?;
        let args = [U32(n), order.arg(), tiles_touched.arg(), counts.arg()];
        // SAFETY: matches gather_counts in kernels/tile_binning.cu; `order` is a permutation of
        // 0..N (the depth sort of depth_keys' indices), so every read is in bounds.
        unsafe { self.go("gather_counts", cfg, &args) }?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn emit_keys(
        &self,
        n: u32,
        order: &DeviceBuffer<u32>,
        means2d: &DeviceBuffer<f32>,
        conics: &DeviceBuffer<f32>,
        opacities: &DeviceBuffer<f32>,
        radii: &DeviceBuffer<u32>,
        offsets: &DeviceBuffer<u64>,
        tiles_x: u32,
        tiles_y: u32,
        m: u64,
        keys: &mut DeviceBuffer<u32>,
        ids: &mut DeviceBuffer<u32>,
    ) -> Result<(), CudaError> {
        if n == 0 || m == 0 {
            return Ok(());
        }
        let nu = n as usize;
        check("order [N]", order.len(), nu)?;
        check("means2d [N,2]", means2d.len(), 2 * nu)?;
        check("conics [N,3]", conics.len(), 3 * nu)?;
        check("opacities [N]", opacities.len(), nu)?;
        check("radii [N]", radii.len(), nu)?;
        check("offsets [N+1]", offsets.len(), nu + 1)?;
        check("keys [M]", keys.len(), m as usize)?;
        check("ids [M]", ids.len(), m as usize)?;
        let cfg = grid_1d(n as u64, ELEMENT_BLOCK)?;
        let args = [
            U32(n),
            order.arg(),
            means2d.arg(),
            conics.arg(),
            opacities.arg(),
            radii.arg(),
            offsets.arg(),
            U32(tiles_x),
            U32(tiles_y),
            keys.arg(),
            ids.arg(),
        ];
        // SAFETY: matches emit_keys in kernels/tile_binning.cu; `order` is a permutation of
        // 0..N and offsets the exclusive scan, in that order, of tile counts, whose total m
        // the key buffers hold (checked); the kernel writes Gaussian k's keys only within
        // [offsets[k], offsets[k + 1]).
        unsafe { self.go("emit_keys", cfg, &args) }?;
        Ok(())
    }

    pub fn tile_ranges(
        &self,
        m: u64,
        keys: &DeviceBuffer<u32>,
        num_tiles: usize,
        ranges: &mut DeviceBuffer<u32>,
    ) -> Result<(), CudaError> {
        if m == 0 {
            return Ok(());
        }
        check("keys [M]", keys.len(), m as usize)?;
        check("ranges [T,2]", ranges.len(), 2 * num_tiles)?;
        let cfg = grid_1d(m, ELEMENT_BLOCK)?;
        let args = [U64(m), keys.arg(), ranges.arg()];
        // SAFETY: matches tile_ranges in kernels/tile_binning.cu; every key's tile id is
        // < num_tiles (emit_keys clamps rects to the grid), so ranges[2·tile+1] is in bounds.
        unsafe { self.go("tile_ranges", cfg, &args) }?;
        Ok(())
    }

    pub fn radix_histogram(
        &self,
        m: u64,
        keys: &DeviceBuffer<u32>,
        shift: u32,
        hist: &mut DeviceBuffer<u32>,
    ) -> Result<(), CudaError> {
        if m == 0 {
            return Ok(());
        }
        let cfg = sort_grid(m)?;
        check("keys [M]", keys.len(), m as usize)?;
        check(
            "hist [RADIX, blocks]",
            hist.len(),
            cfg.grid.0 as usize * super::sort::RADIX,
        )?;
        let args = [U64(m), keys.arg(), U32(shift), hist.arg()];
        // SAFETY: matches radix_histogram in kernels/sort.cu; hist holds RADIX·gridDim.x
        // counters (checked) and the grid covers exactly ceil(m / SORT_TILE) blocks.
        unsafe { self.go("radix_histogram", cfg, &args) }?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn radix_scatter(
        &self,
        m: u64,
        keys_in: &DeviceBuffer<u32>,
        vals_in: &DeviceBuffer<u32>,
        shift: u32,
        hist: &DeviceBuffer<u32>,
        keys_out: &mut DeviceBuffer<u32>,
        vals_out: &mut DeviceBuffer<u32>,
    ) -> Result<(), CudaError> {
        if m == 0 {
            return Ok(());
        }
        let cfg = sort_grid(m)?;
        let mu = m as usize;
        check("keys_in [M]", keys_in.len(), mu)?;
        check("vals_in [M]", vals_in.len(), mu)?;
        check("keys_out [M]", keys_out.len(), mu)?;
        check("vals_out [M]", vals_out.len(), mu)?;
        check(
            "hist [RADIX, blocks]",
            hist.len(),
            cfg.grid.0 as usize * super::sort::RADIX,
        )?;
        let args = [
            U64(m),
            keys_in.arg(),
            vals_in.arg(),
            U32(shift),
            hist.arg(),
            keys_out.arg(),
            vals_out.arg(),
        ];
        // SAFETY: matches radix_scatter in kernels/sort.cu; hist is the exclusive scan of this
        // pass's histogram over the same keys and grid, so every output position is < m.
        unsafe { self.go("radix_scatter", cfg, &args) }?;
        Ok(())
    }

    fn tile_grid(width: u32, height: u32) -> LaunchConfig {
        LaunchConfig {
            grid: (width.div_ceil(TILE_SIZE), height.div_ceil(TILE_SIZE), 1),
            block: (TILE_SIZE, TILE_SIZE, 1),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn rasterize_fwd(
        &self,
        n: usize,
        m: usize,
        ranges: &DeviceBuffer<u32>,
        ids: &DeviceBuffer<u32>,
        s: &SplatBufs<'_>,
        width: u32,
        height: u32,
        bg: [f32; 3],
        image: &mut DeviceBuffer<f32>,
        final_t: &mut DeviceBuffer<f32>,
        last: &mut DeviceBuffer<u32>,
        inv_depth: Option<InvDepthBufs<'_>>,
    ) -> Result<(), CudaError> {
        let npix = width as usize * height as usize;
        if npix == 0 {
            return Ok(());
        }
        let tiles = (width.div_ceil(TILE_SIZE) * height.div_ceil(TILE_SIZE)) as usize;
        check("ranges [T,2]", ranges.len(), 2 * tiles)?;
        check("ids [M]", ids.len(), m)?;
        check("means2d [N,2]", s.means2d.len(), 2 * n)?;
        check("conics [N,3]", s.conics.len(), 3 * n)?;
        check("opacities [N]", s.opacities.len(), n)?;
        check("colors [N,3]", s.colors.len(), 3 * n)?;
        check("image [H,W,3]", image.len(), 3 * npix)?;
        check("final_t [H,W]", final_t.len(), npix)?;
        check("last [H,W]", last.len(), npix)?;
        if let Some(d) = &inv_depth {
            check("depths [N]", d.depths.len(), n)?;
            check("inv_depth [H,W]", d.plane.len(), npix)?;
        }
        // Without the plane the kernel reads neither pointer: any buffer stands in.
        let (with_depth, depths, plane) = match &inv_depth {
            Some(d) => (1, d.depths.arg(), d.plane.arg()),
            None => (0, final_t.arg(), final_t.arg()),
        };
        let tiles_x = width.div_ceil(TILE_SIZE);
        let args = [
            ranges.arg(),
            ids.arg(),
            s.means2d.arg(),
            s.conics.arg(),
            s.opacities.arg(),
            s.colors.arg(),
            U32(width),
            U32(height),
            U32(tiles_x),
            F32(bg[0]),
            F32(bg[1]),
            F32(bg[2]),
            image.arg(),
            final_t.arg(),
            last.arg(),
            U32(with_depth),
            depths,
            plane,
        ];
        // SAFETY: matches rasterize_fwd in kernels/rasterize_fwd.cu; the grid is one block per
        // tile of a W×H image (ranges holds every tile), ranges index into ids (< m) and ids
        // are Gaussian indices < n; outputs hold W·H pixels, and with the inverse-depth plane
        // depths N entries and the plane W·H (all checked above).
        unsafe { self.go("rasterize_fwd", Self::tile_grid(width, height), &args) }?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn rasterize_bwd(
        &self,
        n: usize,
        m: usize,
        ranges: &DeviceBuffer<u32>,
        ids: &DeviceBuffer<u32>,
        s: &SplatBufs<'_>,
        width: u32,
        height: u32,
        bg: [f32; 3],
        final_t: &DeviceBuffer<f32>,
        last: &DeviceBuffer<u32>,
        d_image: &DeviceBuffer<f32>,
        absgrad: bool,
        v: &mut SplatGradBufs,
        inv_depth: Option<InvDepthGradBufs<'_>>,
    ) -> Result<(), CudaError> {
        let npix = width as usize * height as usize;
        if npix == 0 || n == 0 {
            return Ok(());
        }
        let tiles = (width.div_ceil(TILE_SIZE) * height.div_ceil(TILE_SIZE)) as usize;
        check("ranges [T,2]", ranges.len(), 2 * tiles)?;
        check("ids [M]", ids.len(), m)?;
        check("means2d [N,2]", s.means2d.len(), 2 * n)?;
        check("conics [N,3]", s.conics.len(), 3 * n)?;
        check("opacities [N]", s.opacities.len(), n)?;
        check("colors [N,3]", s.colors.len(), 3 * n)?;
        check("final_t [H,W]", final_t.len(), npix)?;
        check("last [H,W]", last.len(), npix)?;
        check("d_image [H,W,3]", d_image.len(), 3 * npix)?;
        check("v_means2d [N,2]", v.means2d.len(), 2 * n)?;
        check("v_conics [N,3]", v.conics.len(), 3 * n)?;
        check("v_colors [N,3]", v.colors.len(), 3 * n)?;
        check("v_opacities [N]", v.opacities.len(), n)?;
        if absgrad {
            check("v_means2d_abs [N,2]", v.means2d_abs.len(), 2 * n)?;
        }
        if let Some(d) = &inv_depth {
            check("depths [N]", d.depths.len(), n)?;
            check("d_inv_depth [H,W]", d.d_plane.len(), npix)?;
            check("v_inv_depths [N]", v.inv_depths.len(), n)?;
        }
        // Without the plane the kernel reads none of these pointers: any buffer stands in.
        let (with_depth, depths, d_plane) = match &inv_depth {
            Some(d) => (1, d.depths.arg(), d.d_plane.arg()),
            None => (0, final_t.arg(), final_t.arg()),
        };
        let tiles_x = width.div_ceil(TILE_SIZE);
        let args = [
            ranges.arg(),
            ids.arg(),
            s.means2d.arg(),
            s.conics.arg(),
            s.opacities.arg(),
            s.colors.arg(),
            U32(width),
            U32(height),
            U32(tiles_x),
            F32(bg[0]),
            F32(bg[1]),
            F32(bg[2]),
            final_t.arg(),
            last.arg(),
            d_image.arg(),
            v.means2d.arg(),
            v.conics.arg(),
            v.colors.arg(),
            v.opacities.arg(),
            U32(absgrad.into()),
            v.means2d_abs.arg(),
            U32(with_depth),
            depths,
            d_plane,
            v.inv_depths.arg(),
        ];
        // SAFETY: matches rasterize_bwd in kernels/rasterize_bwd.cu; same grid and index
        // bounds as rasterize_fwd, gradient accumulators hold N entries (checked; the
        // absolute one only when `absgrad`, the inverse depth's and its inputs only with the
        // plane: the only cases the kernel touches them).
        unsafe { self.go("rasterize_bwd", Self::tile_grid(width, height), &args) }?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn project_bwd(
        &self,
        n: u32,
        p: &ParamBufs<'_>,
        cam: &DeviceBuffer<f32>,
        fisheye: bool,
        antialiased: bool,
        radii: &DeviceBuffer<u32>,
        conics: &DeviceBuffer<f32>,
        v: &SplatGradBufs,
        with_depth: bool,
        g: &mut ParamGradBufs,
        pose: Option<PoseBufs<'_>>,
    ) -> Result<(), CudaError> {
        if n == 0 {
            // No Gaussian, no launch; the pose gradient is still written (zeros).
            return match pose {
                Some(p) => self.pose_finish(0, p),
                None => Ok(()),
            };
        }
        let nu = n as usize;
        let k = p.coeffs as usize;
        check("means [N,3]", p.means.len(), 3 * nu)?;
        check("log_scales [N,3]", p.log_scales.len(), 3 * nu)?;
        check("rotations [N,4]", p.rotations.len(), 4 * nu)?;
        check("logit_opacities [N]", p.logit_opacities.len(), nu)?;
        check("sh [N,K,3]", p.sh.len(), 3 * nu * k)?;
        check("cam", cam.len(), CAM_LEN)?;
        check("radii [N]", radii.len(), nu)?;
        check("conics [N,3]", conics.len(), 3 * nu)?;
        check("v_means2d [N,2]", v.means2d.len(), 2 * nu)?;
        check("v_conics [N,3]", v.conics.len(), 3 * nu)?;
        check("v_colors [N,3]", v.colors.len(), 3 * nu)?;
        check("v_opacities [N]", v.opacities.len(), nu)?;
        if with_depth {
            check("v_inv_depths [N]", v.inv_depths.len(), nu)?;
        }
        check("g_means [N,3]", g.buffer(Field::Means).len(), 3 * nu)?;
        check(
            "g_log_scales [N,3]",
            g.buffer(Field::LogScales).len(),
            3 * nu,
        )?;
        check(
            "g_rotations [N,4]",
            g.buffer(Field::Rotations).len(),
            4 * nu,
        )?;
        check(
            "g_logit_opacities [N]",
            g.buffer(Field::LogitOpacities).len(),
            nu,
        )?;
        check("g_sh [N,K,3]", g.buffer(Field::Sh).len(), 3 * nu * k)?;
        check("g_means2d [N,2]", g.means2d.len(), 2 * nu)?;
        let filter = p.filter_arg(nu)?;
        let cfg = grid_1d(n as u64, ELEMENT_BLOCK)?;
        let blocks = cfg.grid.0 as usize;
        if let Some(pb) = &pose {
            // Before the launch: a bad target fails with neither kernel run.
            self.check_pose(pb, blocks)?;
        }
        let mut args = vec![
            U32(n),
            p.means.arg(),
            p.log_scales.arg(),
            p.rotations.arg(),
            p.logit_opacities.arg(),
            p.sh.arg(),
            U32(p.coeffs),
            U32(p.degree),
            cam.arg(),
            U32(antialiased.into()),
            filter,
            radii.arg(),
            conics.arg(),
            v.means2d.arg(),
            v.conics.arg(),
            v.colors.arg(),
            v.opacities.arg(),
            g.buffer(Field::Means).arg(),
            g.buffer(Field::LogScales).arg(),
            g.buffer(Field::Rotations).arg(),
            g.buffer(Field::LogitOpacities).arg(),
            g.buffer(Field::Sh).arg(),
            g.means2d.arg(),
            U32(with_depth.into()),
            v.inv_depths.arg(),
        ];
        // The pose path is its own entry point (more registers than the plain kernel), and
        // each has a fisheye twin (`fisheye` must be the camera buffer's projection).
        let entry = match (&pose, fisheye) {
            (Some(pb), f) => {
                args.push(pb.part.arg());
                if f {
                    "project_bwd_pose_fisheye"
                } else {
                    "project_bwd_pose"
                }
            }
            (None, true) => "project_bwd_fisheye",
            (None, false) => "project_bwd",
        };
        // SAFETY: matches project_bwd and project_bwd_fisheye (or, with the pose partials
        // appended, project_bwd_pose and its fisheye twin) in kernels/project_bwd.cu; every buffer holds the N (and N·K) elements the kernel
        // indexes (checked above; v_inv_depths is read only `with_depth`, when checked; the
        // filter, when not null, holds N values), and the pose partials the 6 · gridDim.x
        // doubles its blocks
        // write (checked; `cfg` is the grid).
        unsafe { self.go(entry, cfg, &args) }?;
        match pose {
            Some(pb) => self.pose_finish(blocks, pb),
            None => Ok(()),
        }
    }

    /// The pose buffers hold `blocks` blocks of partials and the sums at `offset`, and the
    /// sums' buffer (the caller's) belongs to this device.
    fn check_pose(&self, p: &PoseBufs<'_>, blocks: usize) -> Result<(), CudaError> {
        check("pose partials [6, blocks]", p.part.len(), POSE_LEN * blocks)?;
        check("pose sums", p.out.len(), p.offset + POSE_LEN)?;
        self.dev.check_owner(p.out.dev())?;
        self.dev.check_owner(p.part.dev())?;
        Ok(())
    }

    /// `pose_finish`: the sums of `blocks` blocks of pose partials into
    /// `out[offset..offset + POSE_LEN]` (zeros for no blocks).
    fn pose_finish(&self, blocks: usize, p: PoseBufs<'_>) -> Result<(), CudaError> {
        self.check_pose(&p, blocks)?;
        let blocks = u32::try_from(blocks).map_err(|_| CudaError::Shape {
            what: "pose partial blocks",
            got: blocks,
            need: u32::MAX as usize,
        })?;
        let cfg = LaunchConfig {
            grid: (1, 1, 1),
            block: (ELEMENT_BLOCK, 1, 1),
        };
        let args = [U32(blocks), p.part.arg(), U64(p.offset as u64), p.out.arg()];
        // SAFETY: matches pose_finish in kernels/project_bwd.cu, one block of ELEMENT_BLOCK
        // threads (the size its block_sum assumes); it reads 6 · blocks partials and writes
        // out[offset..offset + 6], both checked above, and `out` is a buffer of this device.
        unsafe { self.go("pose_finish", cfg, &args) }?;
        Ok(())
    }
}

/// Per-splat gradient accumulators (rasterize_bwd → project_bwd).
pub struct SplatGradBufs {
    pub means2d: DeviceBuffer<f32>,
    pub conics: DeviceBuffer<f32>,
    pub colors: DeviceBuffer<f32>,
    pub opacities: DeviceBuffer<f32>,
    /// The absolute 2D-mean gradient ([`crate::render::GaussianGrads::means2d_abs`]): sized
    /// and written only by backwards with `absgrad`.
    pub means2d_abs: DeviceBuffer<f32>,
    /// `∂L/∂(1/z)` per splat through the inverse-depth plane: sized and written only by
    /// backwards with [`crate::render::RenderOptions::inv_depth`].
    pub inv_depths: DeviceBuffer<f32>,
}

/// The inverse-depth plane of a forward: the splats' camera-space depths (`[N]`) in, the plane
/// (`[H, W]`) out.
pub struct InvDepthBufs<'a> {
    pub depths: &'a DeviceBuffer<f32>,
    pub plane: &'a mut DeviceBuffer<f32>,
}

/// The inverse-depth plane's backward inputs: the depths (`[N]`) and `∂L/∂D` (`[H, W]`).
pub struct InvDepthGradBufs<'a> {
    pub depths: &'a DeviceBuffer<f32>,
    pub d_plane: &'a DeviceBuffer<f32>,
}

/// Gradients w.r.t. the stored parameters (project_bwd outputs) in the layout of the
/// parameters, [`DeviceGaussians`] (so the device optimizer pairs each field with its
/// gradient through the field table), plus the screen-space mean gradient. Derefs to the
/// parameter gradients: `grads.means`.
pub struct ParamGradBufs {
    pub params: DeviceGaussians,
    pub means2d: DeviceBuffer<f32>,
}

impl std::ops::Deref for ParamGradBufs {
    type Target = DeviceGaussians;
    fn deref(&self) -> &DeviceGaussians {
        &self.params
    }
}

impl std::ops::DerefMut for ParamGradBufs {
    fn deref_mut(&mut self) -> &mut DeviceGaussians {
        &mut self.params
    }
}
