//! The pack-backed [`RecordSource`]s: what the trainer (and `gs-pack bench`) loads views and
//! point chunks through. A record is numbered in the source's own order; each source maps its
//! records to pack views or chunks and reads them through the pack's checksummed reader, so a
//! consumer never holds a handle into the pack.

use std::sync::Arc;

use super::{LoadError, RecordSource};
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
    fn decode_scratch(&self, record: u32) -> usize {
        self.pack.decode_scratch(self.view_index(record))
    }
    fn decode_scratch_what(&self) -> &'static str {
        let jpeg = self
            .views
            .iter()
            .any(|&i| self.pack.manifest().views[i].jpeg.is_some());
        match (jpeg, self.pack.resize().is_none()) {
            (true, true) => "JPEG decoder's scratch",
            (true, false) => "JPEG decoder's scratch and stored-size view to resample",
            (false, _) => "stored-size view to resample",
        }
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
