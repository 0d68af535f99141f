//! Page-locked ring slots for the loader ([`PinnedSlots`]), so a CUDA consumer can upload a
//! delivered view with an asynchronous DMA ([`crate::device::Device::upload_async`]) instead of
//! the driver's staged copy from pageable memory.
//!
//! The memory is the device layer's [`PinnedHost`] (plain page-locked memory, not
//! write-combined: the zstd and PNG decoders read back what they write, and write-combined
//! memory is uncached for host reads). Ordering: a slot whose upload is still in flight must not
//! be overwritten; the loader's workers call [`HostBuffer::prepare`] before writing a slot, and
//! for a pinned slot that waits for the completion event of its last queued copy. On the host
//! emulation the memory is ordinary and copies complete at once, so the same code runs in tests.

use super::{HostBuffer, LoadError, SlotAllocator};
use crate::device::{Device, PinnedHost};

/// Allocates ring slots as page-locked host memory of one device.
#[derive(Clone, Debug)]
pub struct PinnedSlots {
    dev: Device,
}

impl PinnedSlots {
    pub fn new(dev: Device) -> PinnedSlots {
        PinnedSlots { dev }
    }
}

impl HostBuffer for PinnedHost {
    fn prepare(&mut self) -> Result<(), LoadError> {
        self.wait().map_err(|e| LoadError::Read {
            record: "a pinned ring slot".into(),
            source: Box::new(e),
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl SlotAllocator for PinnedSlots {
    fn allocate(&self, len: usize) -> Result<Box<dyn HostBuffer>, LoadError> {
        let slot = self
            .dev
            .alloc_pinned(len)
            .map_err(|e| LoadError::PinnedSlot {
                len,
                source: Box::new(e),
            })?;
        Ok(Box::new(slot))
    }

    fn pinned(&self) -> bool {
        true
    }
}
