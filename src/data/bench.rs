//! `gs-pack bench`: the loader alone, under a RAM budget, with a consumer as fast as a trainer
//! could be, reading the pack through the same [`super::sources::PackViews`] the trainer uses.
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
use super::sources::PackViews;
use super::{plan_memory, CachePolicy, LoadError, PlanExtras, RecordSource};
use crate::budget::{current_rss_bytes, peak_rss_bytes, within_budget};
use crate::dataset::Split;
use crate::shard::reader::Pack;

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
        return Err(LoadError::NoViews);
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
        return Err(LoadError::AlreadyOverBudget {
            peak,
            budget: opts.ram_budget,
        });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::sources::PackChunks;
    use crate::synth::packs::{write_noise_pack, write_scale_pack};

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
            images: None,
            depths: None,
            sfm_depths: false,
            points: None,
            points_transform: None,
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
