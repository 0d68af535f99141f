//! `gs-pack bench`: the loader alone, under a RAM budget, with a consumer as fast as a trainer
//! could be; plus the pack-backed [`RecordSource`]s the trainer uses.
//!
//! The consumer hashes every delivered byte with xxh3 (≈ 10+ GB/s per core, on the order of
//! a memcpy, the least a trainer does with a view: upload it to the device), so the work is
//! real and the result is checkable: the report carries
//! - `content_sum`: wrapping sum of xxh3(view bytes) over deliveries, independent of order; for
//!   E whole epochs it equals E × Σ xxh3(decoded view) of the pack ("bytes delivered equal
//!   bytes packed");
//! - `sequence_sum`: wrapping sum of xxh3(global position, record, xxh3(bytes)): order-sensitive
//!   and additive, so a run stopped at position k and resumed from k sums to the uninterrupted
//!   run's value.
//!
//! Order of operations (the floor is known before any work): measure the process RSS (pack
//! already open), compute and check the floor ([`super::plan_memory`]), give the rest to the
//! cache, start the loader, consume, read the kernel's VmHWM.

use std::sync::Arc;
use std::time::Instant;

use xxhash_rust::xxh3::xxh3_64;

use super::cache::Cache;
use super::prefetch::{HeapSlots, Loader, LoaderConfig};
use super::sampler::{Position, Sampler};
use super::{plan_memory, CachePolicy, LoadError, PlanExtras, RecordSource};
use crate::budget::{current_rss_bytes, peak_rss_bytes, within_budget};
use crate::dataset::Split;
use crate::shard::reader::Pack;

/// The train views of a pack, numbered 0..n in pack order (record r = the r-th train view).
pub struct PackViews {
    pack: Arc<Pack>,
    views: Vec<usize>,
}

impl PackViews {
    /// Views of `split`; `None` for all views.
    pub fn new(pack: Arc<Pack>, split: Option<Split>) -> PackViews {
        let views = match split {
            Some(s) => pack.manifest().split_indices(s),
            None => (0..pack.manifest().views.len()).collect(),
        };
        PackViews { pack, views }
    }

    /// Pack view index of record `record`.
    pub fn view_index(&self, record: u32) -> usize {
        self.views[record as usize]
    }
}

impl RecordSource for PackViews {
    fn len(&self) -> usize {
        self.views.len()
    }
    fn decoded_len(&self, record: u32) -> usize {
        self.pack.manifest().views[self.view_index(record)].decoded_len()
    }
    fn stored_len(&self, record: u32) -> u64 {
        self.pack.manifest().views[self.view_index(record)]
            .record
            .stored_len
    }
    fn read_into(&self, record: u32, out: &mut [u8]) -> Result<(), LoadError> {
        self.pack
            .read_view_into(self.view_index(record), out)
            .map_err(|e| LoadError::Read {
                record: self.describe(record),
                source: Box::new(e),
            })
    }
    fn describe(&self, record: u32) -> String {
        let i = self.view_index(record);
        format!(
            "view {i} {:?} of {}",
            self.pack.manifest().views[i].name,
            self.pack.dir().display()
        )
    }
}

/// Every chunk of every point cloud, grouped by cloud: a sample is one cloud, delivered chunk by
/// chunk in order (see the [`super`] module doc). Record r = the r-th chunk in pack order.
pub struct PackChunks {
    pack: Arc<Pack>,
    /// (cloud, chunk) of each record.
    chunks: Vec<(u32, u32)>,
}

impl PackChunks {
    /// Chunks of the clouds selected by `clouds` (e.g. all; or only "sfm").
    pub fn new(pack: Arc<Pack>, clouds: &dyn Fn(&crate::shard::CloudEntry) -> bool) -> PackChunks {
        let chunks = pack
            .manifest()
            .clouds
            .iter()
            .enumerate()
            .filter(|(_, c)| clouds(c))
            .flat_map(|(ci, c)| (0..c.chunks.len() as u32).map(move |k| (ci as u32, k)))
            .collect();
        PackChunks { pack, chunks }
    }

    /// (cloud, chunk) of record `record` and the layout of its decoded bytes.
    pub fn chunk(&self, record: u32) -> (u32, u32, crate::shard::PointChunkLayout) {
        let (c, k) = self.chunks[record as usize];
        let cloud = &self.pack.manifest().clouds[c as usize];
        let layout = crate::shard::PointChunkLayout::new(
            cloud.chunks[k as usize].points as usize,
            cloud.has_labels,
            cloud.has_normals,
        );
        (c, k, layout)
    }

    fn entry(&self, record: u32) -> &crate::shard::ChunkEntry {
        let (c, k) = self.chunks[record as usize];
        &self.pack.manifest().clouds[c as usize].chunks[k as usize]
    }
}

impl RecordSource for PackChunks {
    fn len(&self) -> usize {
        self.chunks.len()
    }
    fn decoded_len(&self, record: u32) -> usize {
        self.entry(record).record.decoded_len as usize
    }
    fn stored_len(&self, record: u32) -> u64 {
        self.entry(record).record.stored_len
    }
    fn read_into(&self, record: u32, out: &mut [u8]) -> Result<(), LoadError> {
        let (c, k) = self.chunks[record as usize];
        self.pack
            .read_chunk_into(c as usize, k as usize, out)
            .map(|_| ())
            .map_err(|e| LoadError::Read {
                record: self.describe(record),
                source: Box::new(e),
            })
    }
    fn describe(&self, record: u32) -> String {
        let (c, k) = self.chunks[record as usize];
        format!(
            "cloud {:?} chunk {k} of {}",
            self.pack.manifest().clouds[c as usize].name,
            self.pack.dir().display()
        )
    }
    fn groups(&self) -> Vec<Vec<u32>> {
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for (r, &(c, _)) in self.chunks.iter().enumerate() {
            match groups.last_mut() {
                Some(g) if self.chunks[g[0] as usize].0 == c => g.push(r as u32),
                _ => groups.push(vec![r as u32]),
            }
        }
        groups
    }
}

/// `gs-pack bench` options.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub ram_budget: u64,
    pub epochs: u64,
    pub workers: usize,
    /// Records decoded ahead (ring = prefetch + 2 slots).
    pub prefetch: usize,
    pub seed: u64,
    pub policy: CachePolicy,
    /// Resume position (default: the start).
    pub start: Position,
    /// Stop after this many views instead of at the end of `epochs` (stop/resume tests).
    pub limit: Option<u64>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            ram_budget: 1 << 30,
            epochs: 3,
            // The 2-core reference machine: two decoders keep a trainer fed (see README).
            workers: 2,
            // Enough to hide one slow record behind the others at 2 workers.
            prefetch: 4,
            seed: 0,
            policy: CachePolicy::Belady,
            start: Position { epoch: 0, index: 0 },
            limit: None,
        }
    }
}

/// The bench's one JSON line.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    pub views: u64,
    pub epochs: u64,
    pub views_per_s: f64,
    /// Throughput after the first epoch (the cache warm); `None` with fewer than 2 epochs.
    pub views_per_s_after_first_epoch: Option<f64>,
    pub hit_rate: f64,
    pub stall_fraction: f64,
    pub stall_seconds: f64,
    pub elapsed_seconds: f64,
    pub ram_budget_bytes: u64,
    /// Kernel's VmHWM at the end of the run; `null` where it cannot be read (not Linux).
    pub peak_rss_bytes: Option<u64>,
    /// `null` when the peak is unknown: the cap is never claimed without the kernel's figure.
    pub within_budget: Option<bool>,
    pub floor_bytes: u64,
    pub baseline_rss_bytes: u64,
    pub cache_bytes: u64,
    pub dataset_views: usize,
    pub dataset_decoded_bytes: u64,
    pub bytes: u64,
    /// Process `VmRSS` after each completed epoch (a leak shows as a rising sequence).
    pub rss_after_epoch: Vec<u64>,
    pub workers: usize,
    pub prefetch: usize,
    pub seed: u64,
    pub policy: CachePolicy,
    pub start: Position,
    /// Where the next run would resume.
    pub end: Position,
    /// See the module doc; 16 hex digits.
    pub content_sum: String,
    pub sequence_sum: String,
}

impl BenchReport {
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("report serialises")
    }
}

/// Runs the loader over the train views of `pack`; `progress(done, total)` after each view.
pub fn run_bench(
    pack: Arc<Pack>,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<BenchReport, LoadError> {
    let source: Arc<dyn RecordSource> = Arc::new(PackViews::new(pack, Some(Split::Train)));
    run_bench_source(source, opts, progress)
}

/// [`run_bench`] over any record source (benchmarks compare sources with it).
pub fn run_bench_source(
    source: Arc<dyn RecordSource>,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<BenchReport, LoadError> {
    let config = LoaderConfig {
        workers: opts.workers,
        prefetch: opts.prefetch,
        start: opts.start,
        limit: None,
    };
    let n = source.len() as u64;
    if n == 0 {
        return Err(LoadError::Config(
            "the pack has no train views to load".into(),
        ));
    }
    let total_end = opts.epochs * n;
    let start_global = opts.start.epoch * n + opts.start.index;
    let mut todo = total_end.saturating_sub(start_global);
    if let Some(l) = opts.limit {
        todo = todo.min(l);
    }
    let config = LoaderConfig {
        limit: Some(todo),
        ..config
    };
    let baseline = current_rss_bytes().unwrap_or(0);
    let plan = plan_memory(
        opts.ram_budget,
        &*source,
        &config,
        baseline,
        PlanExtras::default(),
    )?;
    // VmHWM only rises: a process that already peaked above the budget (e.g. it built the pack
    // first) cannot prove the cap, so say so instead of reporting a misleading peak.
    if let Some(peak) = peak_rss_bytes().filter(|&p| p > opts.ram_budget) {
        return Err(LoadError::Config(format!(
            "this process already peaked at {} before the loader started, above --ram-budget {}; \
             run the bench in a fresh process",
            crate::budget::format_size(peak),
            crate::budget::format_size(opts.ram_budget)
        )));
    }
    let floor_bytes = plan.floor.total();
    let cache_bytes = plan.cache.bytes();
    let dataset_decoded_bytes: u64 = (0..n as u32).map(|r| source.decoded_len(r) as u64).sum();
    let cache = Cache::new(opts.policy, plan.cache);
    let sampler = Sampler::grouped(opts.seed, source.groups())?;
    let started = Instant::now();
    let mut loader = Loader::start(source, sampler, cache, &HeapSlots, &config)?;
    let (mut content, mut sequence) = (0u64, 0u64);
    let mut done = 0u64;
    let mut first_epoch_end: Option<(Instant, u64)> = None;
    let mut rss_after_epoch = Vec::new();
    while let Some(d) = loader.next() {
        let d = d?;
        let h = xxh3_64(&d);
        content = content.wrapping_add(h);
        let mut key = [0u8; 20];
        key[..8].copy_from_slice(&d.step().global.to_le_bytes());
        key[8..12].copy_from_slice(&d.record().to_le_bytes());
        key[12..].copy_from_slice(&h.to_le_bytes());
        sequence = sequence.wrapping_add(xxh3_64(&key));
        done += 1;
        if first_epoch_end.is_none()
            && d.position().index + 1 == n
            && d.position().epoch == opts.start.epoch
        {
            first_epoch_end = Some((Instant::now(), done));
        }
        if d.position().index + 1 == n {
            rss_after_epoch.push(current_rss_bytes().unwrap_or(0));
        }
        drop(d);
        progress(done, todo);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let stats = loader.stats();
    let end = loader.position(n as usize);
    drop(loader);
    let peak = peak_rss_bytes();
    let after_first = first_epoch_end.and_then(|(t, k)| {
        let secs = t.elapsed().as_secs_f64();
        (done > k && secs > 0.0).then(|| (done - k) as f64 / secs)
    });
    drop(plan.fixed);
    Ok(BenchReport {
        views: stats.delivered,
        epochs: opts.epochs,
        views_per_s: if elapsed > 0.0 {
            stats.delivered as f64 / elapsed
        } else {
            0.0
        },
        views_per_s_after_first_epoch: after_first,
        hit_rate: stats.hit_rate(),
        stall_fraction: stats.stall_fraction(),
        stall_seconds: stats.stall_seconds,
        elapsed_seconds: elapsed,
        ram_budget_bytes: opts.ram_budget,
        peak_rss_bytes: peak,
        within_budget: within_budget(peak, opts.ram_budget),
        floor_bytes,
        baseline_rss_bytes: baseline,
        cache_bytes,
        dataset_views: n as usize,
        dataset_decoded_bytes,
        bytes: stats.bytes,
        rss_after_epoch,
        workers: opts.workers,
        prefetch: opts.prefetch,
        seed: opts.seed,
        policy: opts.policy,
        start: opts.start,
        end,
        content_sum: format!("{content:016x}"),
        sequence_sum: format!("{sequence:016x}"),
    })
}

/// Writes a synthetic pack of `views` train views of `width × height` uniform-noise pixels
/// (incompressible, so raw and zstd sizes are equal: the worst case for RAM). Returns the
/// wrapping sum of xxh3 of each decoded view (what one epoch's `content_sum` must equal).
pub fn write_noise_pack(
    dir: &std::path::Path,
    views: usize,
    width: u32,
    height: u32,
    codec: crate::shard::Codec,
    seed: u64,
) -> Result<u64, crate::shard::writer::WriteError> {
    use crate::scene::camera::{Camera, Intrinsics, Pose};
    let options = crate::shard::writer::WriterOptions {
        codec,
        force: true,
        ..Default::default()
    };
    let mut w = crate::shard::writer::PackWriter::create(dir, &options)?;
    let mut rng = crate::rng::Rng::new(seed);
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    let mut sum = 0u64;
    for i in 0..views {
        for chunk in pixels.chunks_mut(8) {
            let r = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        sum = sum.wrapping_add(xxh3_64(&pixels));
        let camera = Camera {
            width,
            height,
            intrinsics: Intrinsics {
                fx: width as f64,
                fy: width as f64,
                cx: width as f64 / 2.0,
                cy: height as f64 / 2.0,
            },
            world_to_camera: Pose {
                translation: [i as f64 * 0.1, 0.0, 4.0],
                ..Pose::IDENTITY
            },
        };
        w.add_view(&format!("noise_{i:05}.png"), &camera, Split::Train, &pixels)?;
    }
    w.finish(crate::shard::SourceInfo::generated("synthetic noise"))?;
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
    dir: &std::path::Path,
    views: usize,
    width: u32,
    height: u32,
    points: u64,
    seed: u64,
) -> Result<(), crate::shard::writer::WriteError> {
    use crate::dataset::{PointChunk, PointSource};
    use crate::scene::camera::{Camera, Intrinsics, Pose};
    /// Generated while written: 4M points never sit in memory at once.
    struct Cloud {
        left: u64,
        rng: crate::rng::Rng,
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
    let options = crate::shard::writer::WriterOptions {
        codec: crate::shard::Codec::Zstd,
        force: true,
        ..Default::default()
    };
    let mut w = crate::shard::writer::PackWriter::create(dir, &options)?;
    let mut rng = crate::rng::Rng::new(seed);
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
        let camera = Camera {
            width,
            height,
            intrinsics: Intrinsics {
                fx: width as f64,
                fy: width as f64,
                cx: width as f64 / 2.0,
                cy: height as f64 / 2.0,
            },
            world_to_camera: Pose {
                rotation,
                translation,
            },
        };
        w.add_view(&format!("scale_{i:05}.png"), &camera, Split::Train, &pixels)?;
    }
    if points > 0 {
        w.add_cloud(&mut Cloud {
            left: points,
            rng: crate::rng::Rng::derived(seed, 1),
        })?;
    }
    w.finish(crate::shard::SourceInfo::generated("synthetic scale pack"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(budget: u64, epochs: u64) -> BenchOptions {
        BenchOptions {
            ram_budget: budget,
            epochs,
            workers: 2,
            prefetch: 2,
            seed: 17,
            ..Default::default()
        }
    }

    #[test]
    fn bench_delivers_packed_bytes_in_a_reproducible_resumable_order() {
        // The bench reads the process-wide peak RSS: run alone in a child process.
        if !crate::budget::in_child_process(
            "data::bench::tests::bench_delivers_packed_bytes_in_a_reproducible_resumable_order",
        ) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pack");
        let one_epoch = write_noise_pack(&path, 12, 64, 48, crate::shard::Codec::Zstd, 3).unwrap();
        let pack = Arc::new(Pack::open(&path).unwrap());
        let budget = 512 << 20;
        let a = run_bench(pack.clone(), &opts(budget, 4), &mut |_, _| {}).unwrap();
        assert_eq!(a.views, 48);
        assert_eq!(a.bytes, 48 * 64 * 48 * 3);
        assert_eq!(a.content_sum, format!("{:016x}", one_epoch.wrapping_mul(4)));
        assert_eq!(a.within_budget, Some(true), "{a:?}");
        assert!(a.hit_rate > 0.7, "the whole dataset fits the cache: {a:?}");
        let b = run_bench(pack.clone(), &opts(budget, 4), &mut |_, _| {}).unwrap();
        assert_eq!(a.sequence_sum, b.sequence_sum);
        let mut other = opts(budget, 4);
        other.seed = 18;
        let c = run_bench(pack.clone(), &other, &mut |_, _| {}).unwrap();
        assert_ne!(a.sequence_sum, c.sequence_sum);
        assert_eq!(a.content_sum, c.content_sum);
        // Stop after 19 views, resume from the reported position.
        let mut head_opts = opts(budget, 4);
        head_opts.limit = Some(19);
        let head = run_bench(pack.clone(), &head_opts, &mut |_, _| {}).unwrap();
        assert_eq!(head.end, Position { epoch: 1, index: 7 });
        let mut tail_opts = opts(budget, 4);
        tail_opts.start = head.end;
        let tail = run_bench(pack, &tail_opts, &mut |_, _| {}).unwrap();
        assert_eq!(head.views + tail.views, 48);
        let sum = u64::from_str_radix(&head.sequence_sum, 16)
            .unwrap()
            .wrapping_add(u64::from_str_radix(&tail.sequence_sum, 16).unwrap());
        assert_eq!(format!("{sum:016x}"), a.sequence_sum);
    }

    #[test]
    fn bench_below_floor_is_the_itemised_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pack");
        write_noise_pack(&path, 4, 256, 256, crate::shard::Codec::Raw, 1).unwrap();
        let pack = Arc::new(Pack::open(&path).unwrap());
        let e = run_bench(pack, &opts(1 << 20, 1), &mut |_, _| {}).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("below the memory floor")
                && msg.contains("baseline")
                && msg.contains("--prefetch"),
            "{msg}"
        );
    }

    #[test]
    fn pack_chunks_group_by_cloud() {
        use crate::dataset::{MemPoints, PointChunk};
        let cloud = |n: usize, name: &str| {
            let chunk = PointChunk {
                xyz: vec![[1.0, 2.0, 3.0]; n],
                rgb: vec![[9, 8, 7]; n],
                labels: Some(vec![5; n]),
                normals: None,
            };
            MemPoints::new(name, vec![chunk])
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pack");
        let mut w = crate::shard::writer::PackWriter::create(&path, &Default::default()).unwrap();
        let per = crate::shard::POINTS_PER_CHUNK;
        w.add_cloud(&mut cloud(per * 2 + 10, "a")).unwrap();
        w.add_cloud(&mut cloud(100, "b")).unwrap();
        w.finish(crate::shard::SourceInfo {
            path: "t".into(),
            format: crate::dataset::Format::Ply,
            missing_images: vec![],
            max_width: None,
            downscale: None,
            test_every: None,
        })
        .unwrap();
        let pack = Arc::new(Pack::open(&path).unwrap());
        let src = Arc::new(PackChunks::new(pack, &|_| true));
        assert_eq!(src.len(), 4);
        assert_eq!(src.groups(), vec![vec![0, 1, 2], vec![3]]);
        let sampler = Sampler::grouped(1, src.groups()).unwrap();
        let cfg = LoaderConfig {
            workers: 2,
            prefetch: 2,
            start: Position { epoch: 0, index: 0 },
            limit: Some(8),
        };
        let mut loader = Loader::start(
            src.clone(),
            sampler,
            Cache::with_capacity(CachePolicy::Belady, 0),
            &HeapSlots,
            &cfg,
        )
        .unwrap();
        let mut points = 0;
        while let Some(d) = loader.next() {
            let d = d.unwrap();
            let (_, _, layout) = src.chunk(d.record());
            let chunk = crate::shard::PointChunkRef::new(layout, &d).unwrap();
            points += chunk.len();
            assert_eq!(chunk.xyz(0), [1.0, 2.0, 3.0]);
            assert_eq!(chunk.label(chunk.len() - 1), Some(5));
        }
        assert_eq!(points, 2 * (per * 2 + 110));
    }
    #[test]
    fn reading_a_pack_leaves_no_file_pages_mapped() {
        // RSS is process-wide: measure alone in a child process.
        if !crate::budget::in_child_process(
            "data::bench::tests::reading_a_pack_leaves_no_file_pages_mapped",
        ) {
            return;
        }
        // 400 records of 3 pages: a read fault maps the page cache's whole large folio (or the
        // fault-around window), spanning many neighbours, which stayed mapped before the
        // reader released those windows too (2.7 MB of this 4.9 MB pack after one pass).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pack");
        write_noise_pack(&path, 400, 64, 48, crate::shard::Codec::Raw, 2).unwrap();
        let pack = Arc::new(Pack::open(&path).unwrap());
        let views = PackViews::new(pack, None);
        let mut buf = vec![0u8; views.decoded_len(0)];
        let file_rss = || {
            let text = std::fs::read_to_string("/proc/self/status").unwrap();
            crate::budget::parse_status_field(&text, "RssFile").unwrap()
        };
        views.read_into(0, &mut buf).unwrap();
        let before = file_rss();
        for pass in 0..2 {
            for r in 0..views.len() as u32 {
                views.read_into(r, &mut buf).unwrap();
            }
            let grown = file_rss().saturating_sub(before);
            assert!(
                grown < 256 << 10,
                "pass {pass}: {grown} B of file pages still mapped after reading a pack of {} B",
                400 * 3 * 4096
            );
        }
    }
    #[test]
    #[ignore = "writes GBs: RAMSPLAT_SCALE_PACK=DIR [RAMSPLAT_SCALE=views,width,height,points]"]
    fn write_the_scale_pack() {
        let dir = std::env::var("RAMSPLAT_SCALE_PACK").expect("RAMSPLAT_SCALE_PACK=DIR");
        let scale = std::env::var("RAMSPLAT_SCALE").unwrap_or("600,1600,1066,4000000".into());
        let v: Vec<u64> = scale.split(',').map(|x| x.parse().unwrap()).collect();
        write_scale_pack(
            std::path::Path::new(&dir),
            v[0] as usize,
            v[1] as u32,
            v[2] as u32,
            v[3],
            0,
        )
        .unwrap();
        let pack = Pack::open(std::path::Path::new(&dir)).unwrap();
        assert_eq!(pack.manifest().views.len(), v[0] as usize);
        assert_eq!(pack.manifest().clouds[0].points, v[3]);
    }

    #[test]
    fn the_scale_pack_trains_and_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pack");
        write_scale_pack(&path, 6, 40, 30, 70_000, 1).unwrap();
        let pack = Arc::new(Pack::open(&path).unwrap());
        let m = pack.manifest();
        assert_eq!((m.views.len(), m.clouds[0].points), (6, 70_000));
        assert!(!m.scene.no_sfm_points);
        let views = PackViews::new(pack, None);
        let mut buf = vec![0u8; views.decoded_len(5)];
        views.read_into(5, &mut buf).unwrap();
    }
}
