//! Packs written by program, straight through the pack writer (no dataset files): the tiny
//! pack the fuzz targets mutate, uniform-noise packs (incompressible: the worst case for RAM)
//! for loader tests and benchmarks, and the seed-scale pack (600 views of 1600×1066 + 4M
//! points) the memory promise is measured on. Deterministic for a given seed.

use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

use crate::dataset::{MemPoints, PointChunk, PointSource, Split};
use crate::rng::Rng;
use crate::scene::camera::{Camera, Intrinsics, Pose, Projection};
use crate::shard::writer::{PackWriter, WriteError, WriterOptions};
use crate::shard::{Codec, Manifest, SourceInfo};

/// A pinhole camera with `f = width` px (a ~53° horizontal field of view) and the principal
/// point at the image centre.
pub fn centred_camera(width: u32, height: u32, world_to_camera: Pose) -> Camera {
    Camera {
        width,
        height,
        intrinsics: Intrinsics {
            fx: width as f64,
            fy: width as f64,
            cx: width as f64 / 2.0,
            cy: height as f64 / 2.0,
        },
        world_to_camera,
        projection: Projection::Pinhole,
    }
}

/// The tiny packs' labelled 100-point cloud: point `i` at `(i, 0.5, −1)`, grey `i`, label `i`.
fn tiny_cloud() -> PointChunk {
    PointChunk {
        xyz: (0..100).map(|i| [i as f32, 0.5, -1.0]).collect(),
        rgb: (0..100).map(|i| [i as u8; 3]).collect(),
        labels: Some((0..100).collect()),
        normals: None,
    }
}

/// Writes the smallest interesting pack to `dir`, straight through the pack writer (no
/// dataset files): two 8×6 zstd views one unit apart and a labelled 100-point cloud (point `i`
/// at `(i, 0.5, −1)` with colour `(i, i, i)`). The fuzz targets in `fuzz/` mutate it and tests
/// of pack readers use it.
pub fn write_tiny_pack(dir: &Path) -> Result<Manifest, WriteError> {
    let mut w = PackWriter::create(dir, &WriterOptions::default())?;
    for i in 0..2u32 {
        let camera = centred_camera(
            8,
            6,
            Pose {
                translation: [i as f64, 0.0, 3.0],
                ..Pose::IDENTITY
            },
        );
        let px: Vec<u8> = (0..8 * 6 * 3).map(|k| (k * (i + 3)) as u8).collect();
        w.add_view(&format!("v{i}"), &camera, Split::Train, &px)?;
    }
    w.add_cloud(&mut MemPoints::new("sfm", vec![tiny_cloud()]))
        .map_err(WriteError::from)?;
    w.finish(SourceInfo::generated("ramsplat tiny pack"))
}

/// Writes the tiny pack's cloud and one 5×3 view of every pixel layout (RGB or RGBA, with or
/// without a loss mask, with or without an inverse-depth plane) in every codec: 32 views (under
/// JPEG those with alpha are stored as PNG), the fixture of the shard fuzz target (every decode
/// path of the reader, the PNG and JPEG framing of masks and depth planes included), written as
/// format version 2. Returns the manifest.
pub fn write_layouts_pack(dir: &Path) -> Result<Manifest, WriteError> {
    use crate::shard::writer::encode_view_depth;
    use crate::shard::{DepthScale, PixelLayout};
    let options = WriterOptions {
        codec: Codec::Jpeg,
        ..Default::default()
    };
    let mut w = PackWriter::create(dir, &options)?;
    let (width, height) = (5u32, 3u32);
    let mut i = 0u32;
    for codec in [Codec::Raw, Codec::Zstd, Codec::Png, Codec::Jpeg] {
        for depth in [false, true] {
            for (alpha, mask) in [(false, false), (true, false), (false, true), (true, true)] {
                let layout = PixelLayout { alpha, mask, depth };
                let n = (width * height) as usize;
                let mut bytes: Vec<u8> = (0..layout.pixel_bytes(width, height))
                    .map(|k| (k as u32 * (i + 3)) as u8)
                    .collect();
                if mask {
                    bytes.extend((0..n).map(|k| if k % 3 == 0 { 0 } else { 255 }));
                }
                if depth {
                    bytes.extend(
                        (0..n).flat_map(|k| ((k as u32 * 4099 * (i + 1)) as u16).to_le_bytes()),
                    );
                }
                let camera = centred_camera(
                    width,
                    height,
                    Pose {
                        translation: [i as f64, 0.0, 3.0],
                        ..Pose::IDENTITY
                    },
                );
                let scale = depth.then_some(DepthScale {
                    scale: 1.0 + i as f32,
                    offset: 0.5,
                });
                let v = encode_view_depth(
                    &format!("v{i}"),
                    &camera,
                    Split::Train,
                    &bytes,
                    layout,
                    scale,
                    codec,
                    3,
                )?;
                w.add_encoded_view(v)?;
                i += 1;
            }
        }
    }
    w.add_cloud(&mut MemPoints::new("sfm", vec![tiny_cloud()]))
        .map_err(WriteError::from)?;
    w.finish(SourceInfo::generated("ramsplat layouts pack"))
}

/// Writes a synthetic pack of `views` train views of `width × height` uniform-noise pixels
/// (incompressible, so raw and zstd sizes are equal: the worst case for RAM). Returns the
/// wrapping sum of xxh3 of each decoded view (what one epoch's `content_sum` must equal).
pub fn write_noise_pack(
    dir: &Path,
    views: usize,
    width: u32,
    height: u32,
    codec: Codec,
    seed: u64,
) -> Result<u64, WriteError> {
    let options = WriterOptions {
        codec,
        force: true,
        ..Default::default()
    };
    let mut w = PackWriter::create(dir, &options)?;
    let mut rng = Rng::new(seed);
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    let mut sum = 0u64;
    for i in 0..views {
        for chunk in pixels.chunks_mut(8) {
            let r = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        sum = sum.wrapping_add(xxh3_64(&pixels));
        let camera = centred_camera(
            width,
            height,
            Pose {
                translation: [i as f64 * 0.1, 0.0, 4.0],
                ..Pose::IDENTITY
            },
        );
        w.add_view(&format!("noise_{i:05}.png"), &camera, Split::Train, &pixels)?;
    }
    w.finish(SourceInfo::generated("synthetic noise"))?;
    Ok(sum)
}

/// Writes a pack at a given scale for memory checks of the loader and the trainer: `views`
/// train views of `width × height` uniform noise (incompressible: stored ≈ decoded, the worst
/// case for RAM) from cameras on a circle of radius 4 around the origin, all looking at it, and
/// an SfM cloud "sfm" of `points` coloured points on a unit sphere and a ground plane
/// (streamed, never held). `gs-pack bench` and `gs-train` run on it like on a converted
/// dataset; `RAMSPLAT_SCALE_PACK=DIR cargo test --release --lib write_the_scale_pack --
/// --ignored` writes the seed scale (600 views of 1600×1066, 4M points).
pub fn write_scale_pack(
    dir: &Path,
    views: usize,
    width: u32,
    height: u32,
    points: u64,
    seed: u64,
) -> Result<(), WriteError> {
    /// Generated while written: 4M points never sit in memory at once.
    struct Cloud {
        left: u64,
        rng: Rng,
    }
    impl PointSource for Cloud {
        type Error = std::convert::Infallible;
        fn name(&self) -> &str {
            "sfm"
        }
        fn declared_len(&self) -> Option<u64> {
            None
        }
        fn has_labels(&self) -> bool {
            false
        }
        fn has_normals(&self) -> bool {
            false
        }
        fn next_chunk(&mut self, max: usize) -> Result<Option<PointChunk>, Self::Error> {
            let n = self.left.min(max as u64) as usize;
            if n == 0 {
                return Ok(None);
            }
            self.left -= n as u64;
            let rng = &mut self.rng;
            let xyz = (0..n)
                .map(|_| {
                    if rng.next_f32() < 0.7 {
                        // Unit sphere (normalised Gaussian vector).
                        let v: [f64; 3] = std::array::from_fn(|_| rng.normal());
                        let l = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt().max(1e-9);
                        v.map(|c| (c / l) as f32)
                    } else {
                        [
                            rng.uniform(-2.5, 2.5) as f32,
                            rng.uniform(-2.5, 2.5) as f32,
                            -1.0,
                        ]
                    }
                })
                .collect();
            let rgb = (0..n)
                .map(|_| std::array::from_fn(|_| (rng.next_u64() & 0xff) as u8))
                .collect();
            Ok(Some(PointChunk {
                xyz,
                rgb,
                labels: None,
                normals: None,
            }))
        }
    }
    let options = WriterOptions {
        codec: Codec::Zstd,
        force: true,
        ..Default::default()
    };
    let mut w = PackWriter::create(dir, &options)?;
    let mut rng = Rng::new(seed);
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    for i in 0..views {
        for chunk in pixels.chunks_mut(8) {
            let r = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        // On a circle of radius 4 in z = 0.5, looking at the origin (OpenCV axes).
        let a = i as f64 / views as f64 * std::f64::consts::TAU;
        let c = [4.0 * a.cos(), 4.0 * a.sin(), 0.5];
        let l = (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt();
        let f = c.map(|v| -v / l);
        let up = [0.0, 0.0, 1.0];
        let cross = |u: [f64; 3], v: [f64; 3]| {
            [
                u[1] * v[2] - u[2] * v[1],
                u[2] * v[0] - u[0] * v[2],
                u[0] * v[1] - u[1] * v[0],
            ]
        };
        let x = cross(f, up);
        let xl = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
        let x = x.map(|v| v / xl);
        let y = cross(f, x);
        let rotation = [x, y, f];
        let translation = std::array::from_fn(|r| {
            -(rotation[r][0] * c[0] + rotation[r][1] * c[1] + rotation[r][2] * c[2])
        });
        let camera = centred_camera(
            width,
            height,
            Pose {
                rotation,
                translation,
            },
        );
        w.add_view(&format!("scale_{i:05}.png"), &camera, Split::Train, &pixels)?;
    }
    if points > 0 {
        w.add_cloud(&mut Cloud {
            left: points,
            rng: Rng::derived(seed, 1),
        })?;
    }
    w.finish(SourceInfo::generated("synthetic scale pack"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::reader::Pack;

    #[test]
    fn the_layouts_pack_reads_back_every_view() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pack");
        let m = write_layouts_pack(&path).unwrap();
        assert_eq!((m.views.len(), m.version), (32, 2));
        let pack = Pack::open(&path).unwrap();
        pack.verify(&|_, _| {}).unwrap();
        for (i, v) in m.views.iter().enumerate() {
            let layout = v.layout();
            assert_eq!(
                (layout.alpha, layout.mask, layout.depth),
                (i % 4 % 2 == 1, i % 4 >= 2, i % 8 >= 4)
            );
            assert_eq!(
                v.depth.map(|d| d.scale),
                layout.depth.then_some(1.0 + i as f32)
            );
            let want_codec = match i / 8 {
                0 => Codec::Raw,
                1 => Codec::Zstd,
                3 if !layout.alpha => Codec::Jpeg,
                _ => Codec::Png,
            };
            assert_eq!(v.codec, want_codec, "view {i}");
            let mut out = vec![0u8; v.decoded_len()];
            pack.read_view_into(i, &mut out).unwrap();
            let planes = layout.planes(&out, v.width(), v.height()).unwrap();
            if let Some(mask) = planes.mask {
                assert_eq!(mask[0], 0);
                assert_eq!(mask[1], 255);
            }
            if let Some(depth) = planes.depth {
                let want = (4099 * (i as u32 + 1)) as u16;
                assert_eq!(u16::from_le_bytes([depth[2], depth[3]]), want, "view {i}");
            }
        }
    }
}
