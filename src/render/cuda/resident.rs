//! [`DeviceGaussians`]: Gaussian parameters resident on a device, in the layout of
//! [`Gaussians`] (row-major `[N, 3]` means and log-scales, `[N, 4]` quaternions, `[N]` logit
//! opacities, `[N, K, 3]` SH coefficients with K = (stored degree + 1)²). The rasterizer's
//! `forward_resident`/`backward_resident` read them in place, so a device trainer keeps its
//! model on the device for the whole run.
//!
//! Invariant: every buffer holds at least the elements `n` and `sh_degree` imply (buffers may
//! be larger: they only grow, so a model that shrinks after pruning reuses them).

use crate::device::{Device, DeviceBuffer};
use crate::render::RenderError;
use crate::scene::gaussians::{sh_coeffs, Field, Gaussians, MAX_SH_DEGREE};

use super::CudaError;

/// Gaussian parameters on a device (see the module doc).
pub struct DeviceGaussians {
    /// Number of Gaussians.
    pub n: usize,
    /// Stored SH degree.
    pub sh_degree: u32,
    /// One buffer per [`Field`], in [`Field::ALL`] order ([`DeviceGaussians::buffer`]).
    buffers: [DeviceBuffer<f32>; Field::COUNT],
}

impl DeviceGaussians {
    /// An empty model (no Gaussians, degree 0) on `dev`.
    pub fn new(dev: &Device) -> Result<DeviceGaussians, CudaError> {
        let mut buffers = Vec::with_capacity(Field::COUNT);
        for _ in Field::ALL {
            buffers.push(dev.alloc(1)?);
        }
        Ok(DeviceGaussians {
            n: 0,
            sh_degree: 0,
            buffers: buffers
                .try_into()
                .unwrap_or_else(|_| unreachable!("one per field")),
        })
    }

    /// SH coefficients per Gaussian, (stored degree + 1)².
    pub fn coeffs(&self) -> usize {
        sh_coeffs(self.sh_degree)
    }

    /// The buffer of `field` (the field table of [`crate::scene::gaussians`]).
    pub fn buffer(&self, field: Field) -> &DeviceBuffer<f32> {
        &self.buffers[field.index()]
    }

    /// The buffer of `field`, mutably.
    pub fn buffer_mut(&mut self, field: Field) -> &mut DeviceBuffer<f32> {
        &mut self.buffers[field.index()]
    }

    /// Makes room for `n` Gaussians at `sh_degree` (every buffer grows to at least its
    /// field's values; contents are unspecified) and records the shape.
    pub fn grow_to(&mut self, dev: &Device, n: usize, sh_degree: u32) -> Result<(), CudaError> {
        for f in Field::ALL {
            dev.grow(self.buffer_mut(f), (n * f.width(sh_degree)).max(1))?;
        }
        self.n = n;
        self.sh_degree = sh_degree;
        Ok(())
    }

    /// Copies `g` to the device, growing the buffers when needed.
    pub fn upload(&mut self, dev: &Device, g: &Gaussians) -> Result<(), CudaError> {
        for f in Field::ALL {
            super::upload(dev, g.field(f), self.buffer_mut(f))?;
        }
        self.n = g.len();
        self.sh_degree = g.sh_degree;
        Ok(())
    }

    /// The parameters back on the host.
    pub fn download(&self, dev: &Device) -> Result<Gaussians, CudaError> {
        let mut g = Gaussians::zeros(self.n, self.sh_degree);
        self.download_into(dev, &mut g, 0)?;
        Ok(g)
    }

    /// Writes the parameters into rows `row0..row0 + self.len()` of `dst` (same SH degree,
    /// enough rows): a model split over several devices is assembled in one host allocation.
    pub fn download_into(
        &self,
        dev: &Device,
        dst: &mut Gaussians,
        row0: usize,
    ) -> Result<(), CudaError> {
        if dst.sh_degree != self.sh_degree {
            return Err(CudaError::Shape {
                what: "host parameters (SH coefficients per Gaussian)",
                got: crate::scene::gaussians::sh_coeffs(dst.sh_degree),
                need: crate::scene::gaussians::sh_coeffs(self.sh_degree),
            });
        }
        if row0 + self.n > dst.len() {
            return Err(CudaError::Shape {
                what: "host parameters (rows)",
                got: dst.len(),
                need: row0 + self.n,
            });
        }
        for f in Field::ALL {
            let w = f.width(self.sh_degree);
            let rows = &mut dst.field_mut(f)[row0 * w..(row0 + self.n) * w];
            dev.download(self.buffer(f), rows)?;
        }
        Ok(())
    }

    /// The render-time checks of `GaussianParams::validate` that apply on the device: the
    /// active degree within the stored one, every buffer large enough, indices fit in u32.
    pub(super) fn validate(&self, active_degree: u32) -> Result<(), RenderError> {
        if self.sh_degree > MAX_SH_DEGREE || active_degree > self.sh_degree {
            return Err(RenderError::ShDegree {
                requested: active_degree,
                stored: self.sh_degree,
            });
        }
        let n = self.n;
        for f in Field::ALL {
            let (got, expected) = (self.buffer(f).len(), n * f.width(self.sh_degree));
            if got < expected {
                return Err(RenderError::BadShape {
                    what: f.name(),
                    got,
                    expected,
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
