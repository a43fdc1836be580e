//! What the device holds and what its clients used: live-object counters
//! and their snapshot, and each file's GPU time per engine.
//!
//! Every kind of kernel object (file, GEM object, VM, syncobj) counts
//! itself in and out here, so tests and tools can check for leaks the way
//! one reads `/sys/kernel/debug/dri/*/` on a real system.

use std::sync::atomic::AtomicU64;

/// Live-object counters, for leak checks.
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) files: AtomicU64,
    pub(crate) gem_objects: AtomicU64,
    pub(crate) vms: AtomicU64,
    pub(crate) syncobjs: AtomicU64,
}

/// A snapshot of what the device holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Open DRM files.
    pub files: u64,
    /// Live GEM objects (in any file, mapped or exported).
    pub gem_objects: u64,
    /// Live VMs.
    pub vms: u64,
    /// Live syncobjs.
    pub syncobjs: u64,
    /// RAM pages allocated (objects and kernel pages, VMs' dummy pages among them).
    pub ram_pages: u64,
    /// Kernel pages in use (page tables).
    pub kernel_pages: u64,
}

/// GPU time one DRM file's work took, per engine: what its fdinfo reports
/// as `drm-engine-<name>`.
#[derive(Debug, Default)]
pub struct EngineUsage {
    busy_ns: [AtomicU64; 3],
}

impl EngineUsage {
    /// The engines, in the firmware's pipe order, by their fdinfo names.
    pub const ENGINES: [&'static str; 3] = ["vertex", "fragment", "compute"];

    pub(crate) fn add(&self, engine: usize, ns: u64) {
        if let Some(total) = self.busy_ns.get(engine) {
            total.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// GPU time so far per engine (in [`EngineUsage::ENGINES`] order), in ns.
    pub fn busy_ns(&self) -> [u64; 3] {
        self.busy_ns
            .each_ref()
            .map(|t| t.load(std::sync::atomic::Ordering::Relaxed))
    }
}
