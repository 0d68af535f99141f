//! The 3DGS-MCMC strategy's per-step work on a device ([`DeviceMcmc`]): `kernels/mcmc.cu`, the
//! twins of [`McmcStrategy::regularize`](super::mcmc::McmcStrategy) (the L1 regularisers'
//! gradients and loss term) and [`McmcStrategy::add_noise`](super::mcmc::McmcStrategy::add_noise)
//! for device-resident parameters and gradients (the layouts of [`DeviceGaussians`] and the
//! rasterizer's [`ParamGradBufs`]). Relocation and growth are row edits the device engine
//! applies with its densification kernels (`DeviceEngine::apply_rows`).
//!
//! Invariants: the kernels repeat the CPU's operations in order, so on the host emulation the
//! gradients and the noise match the CPU's bit for bit and the loss term up to the order of its
//! f64 sums (blocks of 256, then block order); on a GPU `expf`, `logf` and `cosf` may differ
//! by an ulp or two. Buffers are checked against the model's shape before every launch.

use super::mcmc::{NoiseStep, Regularizer, NOISE_K, NOISE_T};
use crate::device::ModuleSource;
use crate::device::{Device, DeviceBuffer, DeviceError, Function, KernelArg, LaunchConfig};
use crate::render::cuda::launch::ParamGradBufs;
use crate::render::cuda::DeviceGaussians;
use crate::scene::gaussians::Field;

use KernelArg::{F32, U64};

/// Threads per block of the MCMC kernels (`GS_MCMC_BLOCK` in `kernels/mcmc.cu`).
const BLOCK: u32 = 256;

/// `kernels/mcmc.cu` (it needs no constants).
pub fn module_source() -> ModuleSource {
    ModuleSource {
        name: "mcmc.cu".into(),
        source: include_str!("../../kernels/mcmc.cu").into(),
        entry_points: vec!["mcmc_regularize", "mcmc_noise"],
        defines: vec![],
    }
}

/// Why a device MCMC kernel was refused.
#[derive(Debug, thiserror::Error)]
pub enum DeviceMcmcError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("device MCMC: `{what}` holds {got} values, the model of {n} Gaussians needs {need}")]
    Shape {
        what: String,
        got: usize,
        need: usize,
        n: usize,
    },
}

/// The MCMC kernels on one device, with the regulariser's per-block partial sums.
pub struct DeviceMcmc {
    dev: Device,
    regularize: Function,
    noise: Function,
    /// `[2, blocks]`: the opacity sums, then the scale sums, one per block.
    partials: DeviceBuffer<f64>,
    partials_host: Vec<f64>,
}

/// Fails unless every `(what, buffer length, needed)` holds enough values.
fn check(n: usize, items: &[(&str, usize, usize)]) -> Result<(), DeviceMcmcError> {
    for &(what, got, need) in items {
        if got < need {
            return Err(DeviceMcmcError::Shape {
                what: what.to_owned(),
                got,
                need,
                n,
            });
        }
    }
    Ok(())
}

impl DeviceMcmc {
    pub fn new(dev: &Device) -> Result<DeviceMcmc, DeviceError> {
        let m = dev.load_module(&module_source())?;
        Ok(DeviceMcmc {
            regularize: m.function("mcmc_regularize")?.clone(),
            noise: m.function("mcmc_noise")?.clone(),
            partials: dev.alloc(2)?,
            partials_host: Vec::new(),
            dev: dev.clone(),
        })
    }

    /// Adds the regularisers' gradients to `grads` and returns their loss term (0 for an
    /// empty model, as on the host).
    pub fn regularize(
        &mut self,
        reg: Regularizer,
        params: &DeviceGaussians,
        grads: &mut ParamGradBufs,
    ) -> Result<f64, DeviceMcmcError> {
        let n = params.n;
        if n == 0 {
            return Ok(0.0);
        }
        let (sum_o, sum_s) = self.regularize_shard(reg, params, grads, n)?;
        Ok(reg.loss(sum_o, sum_s, n))
    }

    /// [`Self::regularize`] of one shard of a model of `total` Gaussians (the regularisers
    /// are means over the whole model): adds the shard's gradients and returns its sums of
    /// opacities and of scales, for [`Regularizer::loss`] over all shards.
    pub fn regularize_shard(
        &mut self,
        reg: Regularizer,
        params: &DeviceGaussians,
        grads: &mut ParamGradBufs,
        total: usize,
    ) -> Result<(f64, f64), DeviceMcmcError> {
        let n = params.n;
        if n == 0 {
            return Ok((0.0, 0.0));
        }
        check(
            n,
            &[
                (
                    "logit_opacities",
                    params.buffer(Field::LogitOpacities).len(),
                    n,
                ),
                ("log_scales", params.buffer(Field::LogScales).len(), 3 * n),
                (
                    "grads.logit_opacities",
                    grads.buffer(Field::LogitOpacities).len(),
                    n,
                ),
                (
                    "grads.log_scales",
                    grads.buffer(Field::LogScales).len(),
                    3 * n,
                ),
            ],
        )?;
        let blocks = n.div_ceil(BLOCK as usize);
        self.dev.grow(&mut self.partials, 2 * blocks)?;
        let (d_o, d_s) = reg.factors(total);
        let args = [
            U64(n as u64),
            F32(d_o),
            F32(d_s),
            params.buffer(Field::LogitOpacities).arg(),
            params.buffer(Field::LogScales).arg(),
            grads.buffer(Field::LogitOpacities).arg(),
            grads.buffer(Field::LogScales).arg(),
            self.partials.arg(),
            self.partials.arg_at(blocks),
        ];
        // SAFETY: the argument list matches mcmc_regularize in kernels/mcmc.cu; the parameters
        // and gradients hold n and 3n values (checked above), the partials 2 × blocks doubles
        // (grown above), and the launch has exactly `blocks` blocks of BLOCK threads, the block
        // size the kernel's shared reduction is written for.
        unsafe {
            self.dev.launch(
                &self.regularize,
                LaunchConfig::linear(n as u64, BLOCK)?,
                &args,
            )
        }?;
        self.partials_host.resize(2 * blocks, 0.0);
        self.dev.download(&self.partials, &mut self.partials_host)?;
        let sum_o: f64 = self.partials_host[..blocks].iter().sum();
        let sum_s: f64 = self.partials_host[blocks..].iter().sum();
        Ok((sum_o, sum_s))
    }

    /// Moves `params`' means by the step's noise; `first` is the model row of `params`' row
    /// 0 (0 unless `params` is a shard), which keys each row's normals.
    pub fn add_noise(
        &self,
        noise: NoiseStep,
        params: &mut DeviceGaussians,
        first: u64,
    ) -> Result<(), DeviceMcmcError> {
        let n = params.n;
        if n == 0 {
            return Ok(());
        }
        check(
            n,
            &[
                ("means", params.buffer(Field::Means).len(), 3 * n),
                ("log_scales", params.buffer(Field::LogScales).len(), 3 * n),
                ("rotations", params.buffer(Field::Rotations).len(), 4 * n),
                (
                    "logit_opacities",
                    params.buffer(Field::LogitOpacities).len(),
                    n,
                ),
            ],
        )?;
        let args = [
            U64(n as u64),
            U64(first),
            U64(noise.seed),
            F32(noise.scale),
            F32(NOISE_K),
            F32(NOISE_T),
            params.buffer(Field::Means).arg(),
            params.buffer(Field::LogScales).arg(),
            params.buffer(Field::Rotations).arg(),
            params.buffer(Field::LogitOpacities).arg(),
        ];
        // SAFETY: the argument list matches mcmc_noise in kernels/mcmc.cu; the means,
        // log-scales, rotations and opacities hold 3n, 3n, 4n and n values (checked above) and
        // thread i writes only row i's mean.
        unsafe {
            self.dev
                .launch(&self.noise, LaunchConfig::linear(n as u64, BLOCK)?, &args)
        }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::GaussianGrads;
    use crate::rng::Rng;
    use crate::scene::gaussians::Gaussians;
    use crate::train::densify::DensifyStrategy;
    use crate::train::mcmc::{McmcConfig, McmcStrategy};

    /// `n` Gaussians with random values in every field, some nearly transparent.
    fn gaussians(n: usize, rng: &mut Rng) -> Gaussians {
        let mut g = Gaussians::zeros(n, 1);
        for f in Field::ALL {
            g.field_mut(f).fill_with(|| rng.uniform(-1.0, 1.0) as f32);
        }
        for i in 0..n {
            g.log_scales[i] = std::array::from_fn(|_| rng.uniform(-5.0, 0.0) as f32);
            g.logit_opacities[i] = rng.uniform(-8.0, 4.0) as f32;
        }
        // A zero quaternion: the identity rotation on both sides.
        g.rotations[0] = [0.0; 4];
        g
    }

    /// Largest |want − got| over |before| + |want − before|: the error of a kernel that adds a
    /// term to `before`, relative to the magnitudes it adds. (Relative to the sum itself the
    /// measure is ill-conditioned where the term cancels `before`: on an NVIDIA H200 a 2-ulp
    /// `expf` difference showed as 1.7e-6 of such a sum.)
    fn worst_rel(before: &[f32], want: &[f32], got: &[f32]) -> f32 {
        before
            .iter()
            .zip(want)
            .zip(got)
            .map(|((b, w), g)| (w - g).abs() / (b.abs() + (w - b).abs()).max(1e-30))
            .fold(0.0, f32::max)
    }

    /// The regulariser kernel adds the host's gradients (bit for bit on the emulation) and
    /// returns the host's loss term up to the order of its f64 sums.
    #[test]
    fn regulariser_kernel_matches_the_host_strategy() {
        for dev in crate::device::test_devices() {
            let mut rng = Rng::new(21);
            // Three blocks, the last partial.
            let n = 700;
            let g = gaussians(n, &mut rng);
            let strategy = McmcStrategy::new(McmcConfig {
                opacity_reg: 0.3,
                scale_reg: 0.2,
                ..McmcConfig::with_cap(n)
            });
            let mut host = GaussianGrads::default();
            host.reset(n, 1);
            for f in Field::ALL {
                host.params
                    .field_mut(f)
                    .fill_with(|| rng.normal() as f32 * 1e-3);
            }
            let mut grads = ParamGradBufs {
                params: DeviceGaussians::new(&dev).unwrap(),
                means2d: dev.alloc(1).unwrap(),
            };
            grads.params.upload(&dev, &host.params).unwrap();
            let mut params = DeviceGaussians::new(&dev).unwrap();
            params.upload(&dev, &g).unwrap();
            let before = host.params.clone();
            let want = strategy.regularize(&g, &mut host);
            let mut k = DeviceMcmc::new(&dev).unwrap();
            let got = k
                .regularize(strategy.regularizer(), &params, &mut grads)
                .unwrap();
            // The emulation differs only in the order of the f64 sums (measured: equal here);
            // a GPU's expf may also differ by an ulp or two per term.
            let tol = if dev.is_emulated() { 1e-12 } else { 1e-6 };
            assert!(
                (got - want).abs() <= tol * want.abs(),
                "{}: loss {got} vs {want}",
                dev.name()
            );
            let got = grads.params.download(&dev).unwrap();
            if dev.is_emulated() {
                assert!(got == host.params, "bit-identical gradients");
            } else {
                // Measured on an NVIDIA H200 (2026-11-26, and again 2026-11-28): ≤ 2.0e-7
                // (logit opacities), 1.4e-7 (log-scales); the fields the regulariser does not touch are equal.
                for f in Field::ALL {
                    let w = worst_rel(before.field(f), host.params.field(f), got.field(f));
                    println!("MEASURED regulariser {}: {} {w:e}", dev.name(), f.name());
                    assert!(w <= 1e-6, "{}: {} {w:e}", dev.name(), f.name());
                }
            }
            // An empty model: no term, nothing launched.
            params.n = 0;
            let zero = k
                .regularize(strategy.regularizer(), &params, &mut grads)
                .unwrap();
            assert_eq!(zero, 0.0);
        }
    }

    /// The noise kernel moves the means as the host's `add_noise` does from the same step
    /// seed (bit for bit on the emulation) and leaves every other field alone.
    #[test]
    fn noise_kernel_matches_the_host_strategy() {
        for dev in crate::device::test_devices() {
            let mut rng = Rng::new(8);
            let n = 600;
            let mut g = gaussians(n, &mut rng);
            let strategy = McmcStrategy::new(McmcConfig::with_cap(n));
            let noise = strategy.noise_step(1e-4, &mut rng);
            let mut params = DeviceGaussians::new(&dev).unwrap();
            params.upload(&dev, &g).unwrap();
            let k = DeviceMcmc::new(&dev).unwrap();
            k.add_noise(noise, &mut params, 0).unwrap();
            let before = g.clone();
            strategy.add_noise(&mut g, noise);
            let moved = (0..n).filter(|&i| g.means[i] != before.means[i]).count();
            assert!(moved > n / 10, "only {moved} of {n} moved");
            let got = params.download(&dev).unwrap();
            if dev.is_emulated() {
                assert!(got == g, "bit-identical noise");
            } else {
                // Compare the displacements (the means themselves hide their rounding).
                let d = |x: &Gaussians| -> Vec<f32> {
                    (0..3 * n)
                        .map(|j| x.means[j / 3][j % 3] - before.means[j / 3][j % 3])
                        .collect()
                };
                let (dh, dd) = (d(&g), d(&got));
                let scale = dh.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let err = dh
                    .iter()
                    .zip(&dd)
                    .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                assert!(err <= 1e-4 * scale, "{}: {err:e} of {scale:e}", dev.name());
                for f in [Field::LogScales, Field::Rotations, Field::LogitOpacities] {
                    assert_eq!(got.field(f), g.field(f));
                }
            }
        }
    }
}
