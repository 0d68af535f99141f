//! The loader iterates a real point-cloud dataset (the labelled mOSD Kinect scans, packed by
//! `gs-pack convert`) as samples, one cloud per sample delivered chunk by chunk, through the
//! same prefetch ring and budgeted cache as views.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use ramsplat::data::cache::{Cache, CachePolicy};
use ramsplat::data::prefetch::{HeapSlots, Loader, LoaderConfig};
use ramsplat::data::sampler::{Position, Sampler};
use ramsplat::data::sources::PackChunks;
use ramsplat::data::RecordSource;
use ramsplat::shard::reader::Pack;
use ramsplat::shard::PointChunkRef;

#[test]
fn labelled_kinect_scans_iterate_as_samples_under_a_budget() {
    let src_dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/mosd_kinect_labeled/ply");
    let tmp = tempfile::tempdir().unwrap();
    let pack_dir = tmp.path().join("mosd.pack");
    let o = Command::new(env!("CARGO_BIN_EXE_gs-pack"))
        .args([
            "convert",
            src_dir.to_str().unwrap(),
            "-o",
            pack_dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pack = Arc::new(Pack::open(&pack_dir).unwrap());
    let names: Vec<String> = pack
        .manifest()
        .clouds
        .iter()
        .map(|c| c.name.clone())
        .collect();
    let source = Arc::new(PackChunks::new(pack.clone(), &|_| true));
    // A cache of one chunk's size: most of each epoch must come from the shards again.
    let cache_bytes = pack.manifest().max_chunk_bytes() as u64;
    let epochs = 2u64;
    let sampler = Sampler::grouped(3, source.groups()).unwrap();
    let config = LoaderConfig {
        workers: 2,
        prefetch: 2,
        start: Position { epoch: 0, index: 0 },
        limit: Some(epochs * source.len() as u64),
    };
    let mut loader = Loader::start(
        source.clone(),
        sampler,
        Cache::with_capacity(CachePolicy::Belady, cache_bytes),
        &HeapSlots,
        &config,
    )
    .unwrap();
    let mut points: HashMap<String, u64> = HashMap::new();
    let mut label_101 = 0u64;
    let mut order = Vec::new();
    while let Some(d) = loader.next() {
        let d = d.unwrap();
        let (cloud, _, layout) = source.chunk(d.record());
        let chunk = PointChunkRef::new(layout, &d).unwrap();
        let name = &names[cloud as usize];
        if order.last() != Some(name) {
            order.push(name.clone());
        }
        *points.entry(name.clone()).or_default() += chunk.len() as u64;
        for i in 0..chunk.len() {
            assert!(chunk.xyz(i).iter().all(|v| v.is_finite()));
            if name == "test63" && chunk.label(i) == Some(101) {
                label_101 += 1;
            }
        }
    }
    // Every cloud is one sample per epoch, its chunks delivered together.
    assert_eq!(order.len() as u64, 3 * epochs, "{order:?}");
    for (name, per_epoch) in [
        ("learn33", 179_131u64),
        ("test45", 173_769),
        ("test63", 182_372),
    ] {
        assert_eq!(points[name], epochs * per_epoch, "{name}");
    }
    assert!(
        label_101 > 0,
        "test63's invalid-point label 101 survives packing and loading"
    );
    assert!(loader.stats().misses > 0);
}
