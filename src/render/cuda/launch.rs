//! Typed launches: one function per kernel entry point. Each checks the shapes of its device
//! buffers against the element counts it is given (buffers are reused across renders, so their
//! capacity may exceed the count, never fall short), skips empty launches, and holds the only
//! `unsafe` — the launch itself — with the invariant that makes it sound.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::device::CudaDevice;
use super::kernels::{Kernel, CAM_LEN, ELEMENT_BLOCK, SCAN_BLOCK, SCAN_ITEMS, SORT_BLOCK};
use super::CudaError;
use crate::render::cpu::project::TILE_SIZE;

/// Every entry point, loaded from the compiled modules.
pub struct Kernels {
    stream: Arc<CudaStream>,
    funcs: HashMap<&'static str, CudaFunction>,
}

fn check(what: &'static str, got: usize, need: usize) -> Result<(), CudaError> {
    if got < need {
        return Err(CudaError::Shape { what, got, need });
    }
    Ok(())
}

fn grid_1d(n: u64, block: u32) -> Result<LaunchConfig, CudaError> {
    let blocks = n.div_ceil(block as u64);
    // 2³¹−1 is CUDA's grid.x limit.
    let blocks = u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or(CudaError::Shape {
            what: "grid (too many blocks)",
            got: blocks as usize,
            need: i32::MAX as usize,
        })?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// Gaussian parameters on the device ([N, …] like `Gaussians`).
pub struct ParamBufs<'a> {
    pub means: &'a CudaSlice<f32>,
    pub log_scales: &'a CudaSlice<f32>,
    pub rotations: &'a CudaSlice<f32>,
    pub logit_opacities: &'a CudaSlice<f32>,
    pub sh: &'a CudaSlice<f32>,
    pub coeffs: u32,
    pub degree: u32,
}

/// Projected splats on the device.
pub struct SplatBufs<'a> {
    pub means2d: &'a CudaSlice<f32>,
    pub conics: &'a CudaSlice<f32>,
    pub opacities: &'a CudaSlice<f32>,
    pub colors: &'a CudaSlice<f32>,
}

impl Kernels {
    /// Compiles (or loads from the cache) and loads every module.
    pub fn load(dev: &CudaDevice) -> Result<Kernels, CudaError> {
        let mut funcs = HashMap::new();
        for k in Kernel::ALL {
            let module = dev.load_module(k)?;
            for &e in k.entry_points() {
                let f = module
                    .load_function(e)
                    .map_err(|err| CudaError::driver("cuModuleGetFunction", err))?;
                funcs.insert(e, f);
            }
        }
        Ok(Kernels {
            stream: dev.stream.clone(),
            funcs,
        })
    }

    fn f(&self, name: &'static str) -> &CudaFunction {
        // Every entry point of Kernel::ALL is inserted by `load`; the names below are the
        // same literals as in `Kernel::entry_points`, checked by the unit test there.
        &self.funcs[name]
    }

    #[allow(clippy::too_many_arguments)]
    pub fn project_fwd(
        &self,
        n: u32,
        p: &ParamBufs<'_>,
        cam: &CudaSlice<f32>,
        tiles_x: u32,
        tiles_y: u32,
        means2d: &mut CudaSlice<f32>,
        conics: &mut CudaSlice<f32>,
        opacities: &mut CudaSlice<f32>,
        colors: &mut CudaSlice<f32>,
        depths: &mut CudaSlice<f32>,
        radii: &mut CudaSlice<u32>,
        tiles_touched: &mut CudaSlice<u64>,
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
        let cfg = grid_1d(n as u64, ELEMENT_BLOCK)?;
        let mut b = self.stream.launch_builder(self.f("project_fwd"));
        b.arg(&n)
            .arg(p.means)
            .arg(p.log_scales)
            .arg(p.rotations)
            .arg(p.logit_opacities)
            .arg(p.sh)
            .arg(&p.coeffs)
            .arg(&p.degree)
            .arg(cam)
            .arg(&tiles_x)
            .arg(&tiles_y)
            .arg(means2d)
            .arg(conics)
            .arg(opacities)
            .arg(colors)
            .arg(depths)
            .arg(radii)
            .arg(tiles_touched);
        // SAFETY: the argument list matches `project_fwd` in kernels/project_fwd.cu in order
        // and type; every buffer holds at least the elements the kernel indexes for `n`
        // (checked above), and cudarc orders the launch after prior writes on this stream.
        unsafe { b.launch(cfg) }.map_err(|e| CudaError::driver("launch project_fwd", e))?;
        Ok(())
    }

    /// In-place exclusive scan of `n` u64s, using `tmp` (one buffer per level) as scratch.
    pub fn scan_u64(
        &self,
        data: &mut CudaSlice<u64>,
        n: u64,
        tmp: &mut Vec<CudaSlice<u64>>,
    ) -> Result<(), CudaError> {
        self.scan(data, n, tmp, "scan_block_u64", "scan_add_u64")
    }

    /// In-place exclusive scan of `n` u32s.
    pub fn scan_u32(
        &self,
        data: &mut CudaSlice<u32>,
        n: u64,
        tmp: &mut Vec<CudaSlice<u32>>,
    ) -> Result<(), CudaError> {
        self.scan(data, n, tmp, "scan_block_u32", "scan_add_u32")
    }

    fn scan<T>(
        &self,
        data: &mut CudaSlice<T>,
        n: u64,
        tmp: &mut Vec<CudaSlice<T>>,
        block_fn: &'static str,
        add_fn: &'static str,
    ) -> Result<(), CudaError>
    where
        T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
    {
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
        while tmp.len() < sizes.len() {
            tmp.push(
                self.stream
                    .alloc_zeros::<T>(1)
                    .map_err(|e| CudaError::driver("cuMemAlloc", e))?,
            );
        }
        for (k, &s) in sizes.iter().enumerate() {
            let need = s.div_ceil(tile) as usize;
            if tmp[k].len() < need {
                tmp[k] = self
                    .stream
                    .alloc_zeros::<T>(need)
                    .map_err(|e| CudaError::driver("cuMemAlloc", e))?;
            }
        }
        for (k, &s) in sizes.iter().enumerate() {
            let cfg = LaunchConfig {
                block_dim: (SCAN_BLOCK, 1, 1),
                ..grid_1d(s, SCAN_BLOCK * SCAN_ITEMS)?
            };
            let (lo, hi) = tmp.split_at_mut(k);
            let sums = &mut hi[0];
            let mut b = self.stream.launch_builder(self.f(block_fn));
            if k == 0 {
                b.arg(&mut *data);
            } else {
                b.arg(&mut lo[k - 1]);
            }
            b.arg(sums).arg(&s);
            // SAFETY: (data, block_sums, n) matches scan_block_* in kernels/scan.cu; the data
            // buffer holds ≥ s elements and block_sums ≥ ceil(s / tile) (ensured above).
            unsafe { b.launch(cfg) }.map_err(|e| CudaError::driver("launch scan_block", e))?;
        }
        for k in (0..sizes.len().saturating_sub(1)).rev() {
            let s = sizes[k];
            let cfg = grid_1d(s, ELEMENT_BLOCK)?;
            let (lo, hi) = tmp.split_at_mut(k);
            let offs = &hi[0];
            let mut b = self.stream.launch_builder(self.f(add_fn));
            if k == 0 {
                b.arg(&mut *data);
            } else {
                b.arg(&mut lo[k - 1]);
            }
            b.arg(offs).arg(&s);
            // SAFETY: (data, block_offsets, n) matches scan_add_* in kernels/scan.cu; the
            // offsets buffer holds ceil(s / tile) scanned sums (the level above, done first).
            unsafe { b.launch(cfg) }.map_err(|e| CudaError::driver("launch scan_add", e))?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn emit_keys(
        &self,
        n: u32,
        means2d: &CudaSlice<f32>,
        radii: &CudaSlice<u32>,
        depths: &CudaSlice<f32>,
        offsets: &CudaSlice<u64>,
        tiles_x: u32,
        tiles_y: u32,
        m: u64,
        keys: &mut CudaSlice<u64>,
        ids: &mut CudaSlice<u32>,
    ) -> Result<(), CudaError> {
        if n == 0 || m == 0 {
            return Ok(());
        }
        let nu = n as usize;
        check("means2d [N,2]", means2d.len(), 2 * nu)?;
        check("radii [N]", radii.len(), nu)?;
        check("depths [N]", depths.len(), nu)?;
        check("offsets [N+1]", offsets.len(), nu + 1)?;
        check("keys [M]", keys.len(), m as usize)?;
        check("ids [M]", ids.len(), m as usize)?;
        let cfg = grid_1d(n as u64, ELEMENT_BLOCK)?;
        let mut b = self.stream.launch_builder(self.f("emit_keys"));
        b.arg(&n)
            .arg(means2d)
            .arg(radii)
            .arg(depths)
            .arg(offsets)
            .arg(&tiles_x)
            .arg(&tiles_y)
            .arg(keys)
            .arg(ids);
        // SAFETY: matches emit_keys in kernels/tile_binning.cu; offsets is the exclusive scan
        // of the tile counts project_fwd wrote, whose total m the key buffers hold (checked).
        unsafe { b.launch(cfg) }.map_err(|e| CudaError::driver("launch emit_keys", e))?;
        Ok(())
    }

    pub fn tile_ranges(
        &self,
        m: u64,
        keys: &CudaSlice<u64>,
        num_tiles: usize,
        ranges: &mut CudaSlice<u32>,
    ) -> Result<(), CudaError> {
        if m == 0 {
            return Ok(());
        }
        check("keys [M]", keys.len(), m as usize)?;
        check("ranges [T,2]", ranges.len(), 2 * num_tiles)?;
        let cfg = grid_1d(m, ELEMENT_BLOCK)?;
        let mut b = self.stream.launch_builder(self.f("tile_ranges"));
        b.arg(&m).arg(keys).arg(ranges);
        // SAFETY: matches tile_ranges in kernels/tile_binning.cu; every key's tile id is
        // < num_tiles (emit_keys clamps rects to the grid), so ranges[2·tile+1] is in bounds.
        unsafe { b.launch(cfg) }.map_err(|e| CudaError::driver("launch tile_ranges", e))?;
        Ok(())
    }

    pub fn radix_histogram(
        &self,
        m: u64,
        keys: &CudaSlice<u64>,
        shift: u32,
        hist: &mut CudaSlice<u32>,
    ) -> Result<(), CudaError> {
        if m == 0 {
            return Ok(());
        }
        let cfg = grid_1d(m, SORT_BLOCK)?;
        check("keys [M]", keys.len(), m as usize)?;
        check(
            "hist [RADIX, blocks]",
            hist.len(),
            cfg.grid_dim.0 as usize * super::sort::RADIX,
        )?;
        let mut b = self.stream.launch_builder(self.f("radix_histogram"));
        b.arg(&m).arg(keys).arg(&shift).arg(hist);
        // SAFETY: matches radix_histogram in kernels/sort.cu; hist holds RADIX·gridDim.x
        // counters (checked) and the grid covers exactly ceil(m / SORT_BLOCK) blocks.
        unsafe { b.launch(cfg) }.map_err(|e| CudaError::driver("launch radix_histogram", e))?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn radix_scatter(
        &self,
        m: u64,
        keys_in: &CudaSlice<u64>,
        vals_in: &CudaSlice<u32>,
        shift: u32,
        hist: &CudaSlice<u32>,
        keys_out: &mut CudaSlice<u64>,
        vals_out: &mut CudaSlice<u32>,
    ) -> Result<(), CudaError> {
        if m == 0 {
            return Ok(());
        }
        let cfg = grid_1d(m, SORT_BLOCK)?;
        let mu = m as usize;
        check("keys_in [M]", keys_in.len(), mu)?;
        check("vals_in [M]", vals_in.len(), mu)?;
        check("keys_out [M]", keys_out.len(), mu)?;
        check("vals_out [M]", vals_out.len(), mu)?;
        check(
            "hist [RADIX, blocks]",
            hist.len(),
            cfg.grid_dim.0 as usize * super::sort::RADIX,
        )?;
        let mut b = self.stream.launch_builder(self.f("radix_scatter"));
        b.arg(&m)
            .arg(keys_in)
            .arg(vals_in)
            .arg(&shift)
            .arg(hist)
            .arg(keys_out)
            .arg(vals_out);
        // SAFETY: matches radix_scatter in kernels/sort.cu; hist is the exclusive scan of this
        // pass's histogram over the same keys and grid, so every output position is < m.
        unsafe { b.launch(cfg) }.map_err(|e| CudaError::driver("launch radix_scatter", e))?;
        Ok(())
    }

    fn tile_grid(width: u32, height: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (width.div_ceil(TILE_SIZE), height.div_ceil(TILE_SIZE), 1),
            block_dim: (TILE_SIZE, TILE_SIZE, 1),
            shared_mem_bytes: 0,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn rasterize_fwd(
        &self,
        n: usize,
        m: usize,
        ranges: &CudaSlice<u32>,
        ids: &CudaSlice<u32>,
        s: &SplatBufs<'_>,
        width: u32,
        height: u32,
        bg: [f32; 3],
        image: &mut CudaSlice<f32>,
        final_t: &mut CudaSlice<f32>,
        last: &mut CudaSlice<u32>,
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
        let tiles_x = width.div_ceil(TILE_SIZE);
        let mut b = self.stream.launch_builder(self.f("rasterize_fwd"));
        b.arg(ranges)
            .arg(ids)
            .arg(s.means2d)
            .arg(s.conics)
            .arg(s.opacities)
            .arg(s.colors)
            .arg(&width)
            .arg(&height)
            .arg(&tiles_x)
            .arg(&bg[0])
            .arg(&bg[1])
            .arg(&bg[2])
            .arg(image)
            .arg(final_t)
            .arg(last);
        // SAFETY: matches rasterize_fwd in kernels/rasterize_fwd.cu; the grid is one block per
        // tile of a W×H image (ranges holds every tile), ranges index into ids (< m) and ids
        // are Gaussian indices < n; outputs hold W·H pixels (all checked above).
        unsafe { b.launch(Self::tile_grid(width, height)) }
            .map_err(|e| CudaError::driver("launch rasterize_fwd", e))?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn rasterize_bwd(
        &self,
        n: usize,
        m: usize,
        ranges: &CudaSlice<u32>,
        ids: &CudaSlice<u32>,
        s: &SplatBufs<'_>,
        width: u32,
        height: u32,
        bg: [f32; 3],
        final_t: &CudaSlice<f32>,
        last: &CudaSlice<u32>,
        d_image: &CudaSlice<f32>,
        v: &mut SplatGradBufs,
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
        let tiles_x = width.div_ceil(TILE_SIZE);
        let mut b = self.stream.launch_builder(self.f("rasterize_bwd"));
        b.arg(ranges)
            .arg(ids)
            .arg(s.means2d)
            .arg(s.conics)
            .arg(s.opacities)
            .arg(s.colors)
            .arg(&width)
            .arg(&height)
            .arg(&tiles_x)
            .arg(&bg[0])
            .arg(&bg[1])
            .arg(&bg[2])
            .arg(final_t)
            .arg(last)
            .arg(d_image)
            .arg(&mut v.means2d)
            .arg(&mut v.conics)
            .arg(&mut v.colors)
            .arg(&mut v.opacities);
        // SAFETY: matches rasterize_bwd in kernels/rasterize_bwd.cu; same grid and index
        // bounds as rasterize_fwd, gradient accumulators hold N entries (checked).
        unsafe { b.launch(Self::tile_grid(width, height)) }
            .map_err(|e| CudaError::driver("launch rasterize_bwd", e))?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn project_bwd(
        &self,
        n: u32,
        p: &ParamBufs<'_>,
        cam: &CudaSlice<f32>,
        radii: &CudaSlice<u32>,
        conics: &CudaSlice<f32>,
        opacities: &CudaSlice<f32>,
        v: &SplatGradBufs,
        g: &mut ParamGradBufs,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        let nu = n as usize;
        let k = p.coeffs as usize;
        check("means [N,3]", p.means.len(), 3 * nu)?;
        check("log_scales [N,3]", p.log_scales.len(), 3 * nu)?;
        check("rotations [N,4]", p.rotations.len(), 4 * nu)?;
        check("sh [N,K,3]", p.sh.len(), 3 * nu * k)?;
        check("cam", cam.len(), CAM_LEN)?;
        check("radii [N]", radii.len(), nu)?;
        check("conics [N,3]", conics.len(), 3 * nu)?;
        check("opacities [N]", opacities.len(), nu)?;
        check("v_means2d [N,2]", v.means2d.len(), 2 * nu)?;
        check("v_conics [N,3]", v.conics.len(), 3 * nu)?;
        check("v_colors [N,3]", v.colors.len(), 3 * nu)?;
        check("v_opacities [N]", v.opacities.len(), nu)?;
        check("g_means [N,3]", g.means.len(), 3 * nu)?;
        check("g_log_scales [N,3]", g.log_scales.len(), 3 * nu)?;
        check("g_rotations [N,4]", g.rotations.len(), 4 * nu)?;
        check("g_logit_opacities [N]", g.logit_opacities.len(), nu)?;
        check("g_sh [N,K,3]", g.sh.len(), 3 * nu * k)?;
        check("g_means2d [N,2]", g.means2d.len(), 2 * nu)?;
        let cfg = grid_1d(n as u64, ELEMENT_BLOCK)?;
        let mut b = self.stream.launch_builder(self.f("project_bwd"));
        b.arg(&n)
            .arg(p.means)
            .arg(p.log_scales)
            .arg(p.rotations)
            .arg(p.sh)
            .arg(&p.coeffs)
            .arg(&p.degree)
            .arg(cam)
            .arg(radii)
            .arg(conics)
            .arg(opacities)
            .arg(&v.means2d)
            .arg(&v.conics)
            .arg(&v.colors)
            .arg(&v.opacities)
            .arg(&mut g.means)
            .arg(&mut g.log_scales)
            .arg(&mut g.rotations)
            .arg(&mut g.logit_opacities)
            .arg(&mut g.sh)
            .arg(&mut g.means2d);
        // SAFETY: matches project_bwd in kernels/project_bwd.cu; every buffer holds the N (and
        // N·K) elements the kernel indexes (checked above).
        unsafe { b.launch(cfg) }.map_err(|e| CudaError::driver("launch project_bwd", e))?;
        Ok(())
    }
}

/// Per-splat gradient accumulators (rasterize_bwd → project_bwd).
pub struct SplatGradBufs {
    pub means2d: CudaSlice<f32>,
    pub conics: CudaSlice<f32>,
    pub colors: CudaSlice<f32>,
    pub opacities: CudaSlice<f32>,
}

/// Gradients w.r.t. the stored parameters (project_bwd outputs).
pub struct ParamGradBufs {
    pub means: CudaSlice<f32>,
    pub log_scales: CudaSlice<f32>,
    pub rotations: CudaSlice<f32>,
    pub logit_opacities: CudaSlice<f32>,
    pub sh: CudaSlice<f32>,
    pub means2d: CudaSlice<f32>,
}
