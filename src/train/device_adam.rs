//! Adam on a device ([`DeviceAdam`]): `kernels/adam.cu`, the twin of
//! [`super::adam::AdamState::step`] for device-resident parameters, moments and gradients (the
//! layout of [`DeviceGaussians`] and the rasterizer's [`ParamGradBufs`]). The per-group
//! scalars come from [`Coef::new`], the CPU's own code, and the kernel repeats the CPU's
//! operations in order, so a step is bit-identical on both drivers (checked by the tests here).
//!
//! Invariants: the moments have the model's shapes (checked before every step, as the CPU
//! does); step counts are per group and advance only for the groups in the mask.

use std::collections::HashMap;

use super::adam::{AdamConfig, Coef, Group, GroupMask, LearningRates};
use crate::device::{
    Device, DeviceBuffer, DeviceError, Function, KernelArg, LaunchConfig, ModuleSource,
};
use crate::render::cuda::launch::ParamGradBufs;
use crate::render::cuda::DeviceGaussians;
use crate::scene::gaussians::Field;

use KernelArg::{F32, U32, U64};

/// Threads per block of the Adam kernels.
const BLOCK: u32 = 256;

/// `kernels/adam.cu` (it needs no constants).
pub fn module_source() -> ModuleSource {
    ModuleSource {
        name: "adam.cu".into(),
        source: include_str!("../../kernels/adam.cu").into(),
        entry_points: vec!["adam_step", "adam_step_sh"],
        defines: vec![],
    }
}

/// Why a device Adam step was refused.
#[derive(Debug, thiserror::Error)]
pub enum DeviceAdamError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("device Adam: `{what}` holds {got} values, the model of {n} Gaussians needs {need}")]
    Shape {
        what: String,
        got: usize,
        need: usize,
        n: usize,
    },
}

/// The Adam kernels on one device.
pub struct DeviceAdam {
    dev: Device,
    funcs: HashMap<&'static str, Function>,
}

fn coef_args(c: &Coef) -> [KernelArg; 5] {
    [
        F32(c.b1),
        F32(c.b2),
        F32(c.step_size),
        F32(c.bias2_sqrt),
        F32(c.eps),
    ]
}

impl DeviceAdam {
    pub fn new(dev: &Device) -> Result<DeviceAdam, DeviceError> {
        let m = dev.load_module(&module_source())?;
        let mut funcs = HashMap::new();
        for e in ["adam_step", "adam_step_sh"] {
            funcs.insert(e, m.function(e)?.clone());
        }
        Ok(DeviceAdam {
            dev: dev.clone(),
            funcs,
        })
    }

    /// One step of the groups in `mask` (advancing `steps`, one count per [`Group`]), updating
    /// `params` and the moments `m`, `v` in place from `grads`. Under [`AdamConfig::sparse`],
    /// `radii` (this step's per-Gaussian screen radii, required then) leaves Gaussians of radius
    /// 0 as they are.
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &self,
        cfg: &AdamConfig,
        lr: &LearningRates,
        mask: GroupMask,
        steps: &mut [u64; 6],
        params: &mut DeviceGaussians,
        m: &mut DeviceGaussians,
        v: &mut DeviceGaussians,
        grads: &ParamGradBufs,
        radii: Option<&DeviceBuffer<u32>>,
    ) -> Result<(), DeviceAdamError> {
        let n = params.n;
        let need = |what: String, got: usize, need: usize| {
            if got < need {
                Err(DeviceAdamError::Shape { what, got, need, n })
            } else {
                Ok(())
            }
        };
        // The visibility the kernels read: the radii buffer under sparse Adam (at least one
        // value per Gaussian), a null pointer (every Gaussian) otherwise.
        let visible = if cfg.sparse {
            let r = radii.map_or(0, DeviceBuffer::len);
            need("radii".to_owned(), r, n)?;
            radii.map_or(KernelArg::Ptr(0), DeviceBuffer::arg)
        } else {
            KernelArg::Ptr(0)
        };
        for (name, mo) in [("exp_avg", &*m), ("exp_avg_sq", &*v)] {
            if mo.n != n || mo.sh_degree != params.sh_degree {
                return Err(DeviceAdamError::Shape {
                    what: name.to_owned(),
                    got: mo.n,
                    need: n,
                    n,
                });
            }
        }
        for f in Field::ALL {
            let buf = grads.buffer(f);
            need(
                format!("grads.{}", f.name()),
                buf.len(),
                n * f.width(params.sh_degree),
            )?;
        }
        let mut coef = [None; 6];
        for g in Group::ALL {
            if mask.has(g) {
                steps[g.index()] += 1;
                coef[g.index()] = Some(Coef::new(cfg, lr.get(g), steps[g.index()]));
            }
        }
        if n == 0 {
            return Ok(());
        }
        // The moments are DeviceGaussians of the model's shape (checked above), so every
        // buffer below holds the values its launch indexes.
        let off = Coef {
            b1: 0.0,
            b2: 0.0,
            step_size: 0.0,
            bias2_sqrt: 1.0,
            eps: 0.0,
        };
        for f in Field::ALL {
            let (p, mm, vv, g) = (params.buffer(f), m.buffer(f), v.buffer(f), grads.buffer(f));
            let len = n * f.width(params.sh_degree);
            let rows = f.rows_per_gaussian(params.sh_degree);
            if rows == 1 {
                let Some(c) = coef[f.group(0).index()] else {
                    continue;
                };
                let mut args = vec![
                    U64(len as u64),
                    p.arg(),
                    mm.arg(),
                    vv.arg(),
                    g.arg(),
                    visible,
                    U64(f.width(params.sh_degree) as u64),
                ];
                args.extend(coef_args(&c));
                // SAFETY: matches adam_step in kernels/adam.cu; parameters, moments (the
                // model's shape, checked) and gradients (checked) hold `len` values each, and
                // `visible` is null or holds at least `len / width = n` radii (checked).
                unsafe {
                    self.dev.launch(
                        &self.funcs["adam_step"],
                        LaunchConfig::linear(len as u64, BLOCK)?,
                        &args,
                    )
                }?;
                continue;
            }
            // Several rows per Gaussian: the first row's group and the others' (SH: f_dc and
            // f_rest), as adam_step_sh splits them.
            assert_eq!(f.row_width(), 3, "adam_step_sh updates rows of 3 values");
            assert!(
                (2..rows).all(|r| f.group(r) == f.group(1)),
                "adam_step_sh takes one group for rows 1.."
            );
            let (first, rest) = (coef[f.group(0).index()], coef[f.group(1).index()]);
            if first.is_none() && rest.is_none() {
                continue;
            }
            let mut args = vec![
                U64(len as u64),
                U32(rows as u32),
                p.arg(),
                mm.arg(),
                vv.arg(),
                g.arg(),
                visible,
                U32(first.is_some() as u32),
            ];
            args.extend(coef_args(&first.unwrap_or(off)));
            args.push(U32(rest.is_some() as u32));
            args.extend(coef_args(&rest.unwrap_or(off)));
            // SAFETY: matches adam_step_sh in kernels/adam.cu; the parameters, moments and
            // gradients hold N·rows·3 values (checked above), `visible` null or N radii.
            unsafe {
                self.dev.launch(
                    &self.funcs["adam_step_sh"],
                    LaunchConfig::linear(len as u64, BLOCK)?,
                    &args,
                )
            }?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::GaussianGrads;
    use crate::rng::Rng;
    use crate::scene::gaussians::Gaussians;
    use crate::train::adam::AdamState;

    /// Every value of every field uniform in [−s, s].
    fn random(n: usize, degree: u32, r: &mut Rng, s: f64) -> Gaussians {
        let mut g = Gaussians::zeros(n, degree);
        for f in Field::ALL {
            for v in g.field_mut(f) {
                *v = r.uniform(-s, s) as f32;
            }
        }
        g
    }

    /// Three steps with changing learning rates and masks (f_rest skipped once, everything
    /// but means once), dense and sparse (a random third of the Gaussians hidden each step;
    /// the dense update is given the radii too and must ignore them): parameters, moments and
    /// step counts equal the CPU's bit for bit (on the emulation, and on an NVIDIA H200 with
    /// CUDA 13.0, 2026-11-28, sparse included).
    #[test]
    fn steps_equal_the_cpu_adam() {
        for dev in crate::device::test_devices() {
            for sparse in [false, true] {
                let adam = DeviceAdam::new(&dev).unwrap();
                let mut r = Rng::new(4);
                let n = 1000;
                let mut host = random(n, 2, &mut r, 1.0);
                let mut cpu = AdamState::new(&host);
                let mut dp = DeviceGaussians::new(&dev).unwrap();
                dp.upload(&dev, &host).unwrap();
                let mut dm = DeviceGaussians::new(&dev).unwrap();
                dm.upload(&dev, &cpu.exp_avg).unwrap();
                let mut dv = DeviceGaussians::new(&dev).unwrap();
                dv.upload(&dev, &cpu.exp_avg_sq).unwrap();
                let mut steps = [0u64; 6];
                let cfg = AdamConfig {
                    sparse,
                    ..AdamConfig::default()
                };
                let masks = [
                    GroupMask::ALL,
                    GroupMask::ALL.with(Group::FeaturesRest, false),
                    GroupMask::NONE.with(Group::Means, true),
                ];
                let mut d_radii = dev.alloc::<u32>(n).unwrap();
                for (s, mask) in masks.into_iter().enumerate() {
                    let gr = random(n, 2, &mut r, 1e-3);
                    let grads = GaussianGrads {
                        params: gr.clone(),
                        means2d: vec![[0.0; 2]; n],
                        means2d_abs: Vec::new(),
                        pose: None,
                    };
                    let lr = LearningRates {
                        means: 1.6e-4 / (s + 1) as f64,
                        f_dc: 2.5e-3,
                        f_rest: 2.5e-3 / 20.0,
                        opacity: 0.025,
                        scaling: 5e-3,
                        rotation: 1e-3,
                    };
                    let radii: Vec<u32> = (0..n).map(|_| r.below(3) as u32 * 5).collect();
                    dev.upload(&radii, &mut d_radii).unwrap();
                    cpu.step(&cfg, &lr, mask, &mut host, &grads, Some(&radii))
                        .unwrap();
                    // The gradients on the device, in the rasterizer's buffers' layout.
                    let mut dg = DeviceGaussians::new(&dev).unwrap();
                    dg.upload(&dev, &gr).unwrap();
                    let pg = ParamGradBufs {
                        params: dg,
                        means2d: dev.alloc(2 * n).unwrap(),
                    };
                    let (p, m, v) = (&mut dp, &mut dm, &mut dv);
                    adam.step(&cfg, &lr, mask, &mut steps, p, m, v, &pg, Some(&d_radii))
                        .unwrap();
                }
                let what = format!("{} (sparse: {sparse})", dev.name());
                assert_eq!(steps, cpu.steps);
                assert_eq!(dp.download(&dev).unwrap(), host, "{what}: parameters");
                assert_eq!(dm.download(&dev).unwrap(), cpu.exp_avg, "{what}: exp_avg");
                assert_eq!(
                    dv.download(&dev).unwrap(),
                    cpu.exp_avg_sq,
                    "{what}: exp_avg_sq"
                );
            }
        }
    }

    /// Sparse Adam needs the step's radii, one per Gaussian.
    #[test]
    fn sparse_without_radii_is_refused() {
        for dev in crate::device::test_devices() {
            let adam = DeviceAdam::new(&dev).unwrap();
            let mut r = Rng::new(5);
            let n = 10;
            let host = random(n, 0, &mut r, 1.0);
            let mut dp = DeviceGaussians::new(&dev).unwrap();
            dp.upload(&dev, &host).unwrap();
            let zeros = Gaussians::zeros(n, 0);
            let mut dm = DeviceGaussians::new(&dev).unwrap();
            dm.upload(&dev, &zeros).unwrap();
            let mut dv = DeviceGaussians::new(&dev).unwrap();
            dv.upload(&dev, &zeros).unwrap();
            let mut dg = DeviceGaussians::new(&dev).unwrap();
            dg.upload(&dev, &host).unwrap();
            let pg = ParamGradBufs {
                params: dg,
                means2d: dev.alloc(2 * n).unwrap(),
            };
            let cfg = AdamConfig {
                sparse: true,
                ..AdamConfig::default()
            };
            let short = dev.alloc::<u32>(n - 1).unwrap();
            let lr = LearningRates {
                means: 1e-3,
                f_dc: 1e-3,
                f_rest: 1e-3,
                opacity: 1e-3,
                scaling: 1e-3,
                rotation: 1e-3,
            };
            for radii in [None, Some(&short)] {
                let mut steps = [0; 6];
                let e = adam
                    .step(
                        &cfg,
                        &lr,
                        GroupMask::ALL,
                        &mut steps,
                        &mut dp,
                        &mut dm,
                        &mut dv,
                        &pg,
                        radii,
                    )
                    .unwrap_err();
                assert!(e.to_string().contains("radii"), "{e}");
            }
        }
    }
}
