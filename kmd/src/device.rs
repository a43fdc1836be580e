//! The simulated GPU system and its DRM device.
//!
//! [`System::new`] assembles what a machine with an AGX GPU has: RAM (the
//! SoC's unified memory), the kernel driver's device state, and (once the
//! firmware interface exists) the firmware and GPU. It hands out DRM files
//! ([`File`]), each the equivalent of an open `/dev/dri/renderD128`.
//! Everything that needs a GPU (the umd's in-process backend, the shim,
//! tools and tests) builds one of these.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use agx_uapi::asahi::GemFlags;

use crate::export::Exports;
use crate::file::File;
use crate::firmware::FirmwareLink;
use crate::gem::{GemObject, VmKey, MMAP_OFFSET_SHIFT};

/// GEM object ids (mmap windows) are below this: `id << 40` stays below
/// 2^63, a positive `off_t`.
const MAX_OBJECT_ID: u64 = 1 << (63 - MMAP_OFFSET_SHIFT);
use crate::mem::{AllocError, PagePool, PhysRange, Ram};
use crate::sched::Scheduler;
use crate::sync::SyncEvents;
use crate::tvb::GrowthPolicy;

/// The name of the memfds backing GEM objects (and so of PRIME fds): a
/// descriptor with this name is a buffer another simulated device can
/// import.
pub const GEM_MEMFD_NAME: &str = "agx-gem";

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
    /// RAM pages allocated (objects, kernel pages, the dummy page).
    pub ram_pages: u64,
    /// Kernel pages in use (page tables).
    pub kernel_pages: u64,
}

/// How to build a system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemConfig {
    /// Simulated RAM.
    pub ram_bytes: u64,
    /// How queues grow their parameter buffers.
    pub tvb_policy: GrowthPolicy,
    /// Blocks (128 KiB each) a queue's parameter buffer starts with.
    pub tvb_initial_blocks: u64,
    /// The firmware's watchdog: a GPU command running longer is stopped
    /// and its submission fails with `ETIMEDOUT`.
    pub command_timeout_ms: u32,
    /// Host threads the simulated GPU runs threadgroups on (results do
    /// not depend on it).
    pub gpu_threads: usize,
}

impl Default for SystemConfig {
    fn default() -> SystemConfig {
        SystemConfig {
            ram_bytes: 8 << 30,
            tvb_policy: GrowthPolicy::default(),
            tvb_initial_blocks: crate::tvb::INITIAL_BLOCKS,
            command_timeout_ms: crate::firmware::COMMAND_TIMEOUT_MS,
            gpu_threads: std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(4),
        }
    }
}

/// The device state shared by all files.
#[derive(Debug)]
pub struct Device {
    pub(crate) ram: Ram,
    pub(crate) pool: Arc<PagePool>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) dummy_page: Arc<PhysRange>,
    pub(crate) events: Arc<SyncEvents>,
    pub(crate) exports: Exports,
    firmware: Arc<FirmwareLink>,
    pub(crate) scheduler: Arc<Scheduler>,
    next_object_id: AtomicU64,
    next_file_id: AtomicU64,
    /// Objects by mmap offset, for mmap on the DRM file.
    objects: Mutex<HashMap<u64, Weak<GemObject>>>,
    /// Where every submission is recorded, if capturing
    /// ([`System::capture_to`], or the `AGX_KMD_CAPTURE` environment
    /// variable naming a file).
    pub(crate) capture:
        Mutex<Option<agx_uapi::capture::CaptureWriter<std::io::BufWriter<std::fs::File>>>>,
}

impl Device {
    pub(crate) fn create_object(
        &self,
        size_bytes: u64,
        flags: GemFlags,
        private_vm: Option<VmKey>,
    ) -> Result<Arc<GemObject>, AllocError> {
        let memory = self.ram.allocate(size_bytes, GEM_MEMFD_NAME)?;
        self.register(memory, flags, private_vm)
    }

    /// Makes a GEM object of memory another device exported.
    pub(crate) fn adopt_object(
        &self,
        fd: std::os::fd::OwnedFd,
    ) -> Result<Arc<GemObject>, AllocError> {
        let memory = self.ram.adopt(fd)?;
        self.register(memory, GemFlags::empty(), None)
    }

    fn register(
        &self,
        memory: Arc<PhysRange>,
        flags: GemFlags,
        private_vm: Option<VmKey>,
    ) -> Result<Arc<GemObject>, AllocError> {
        let mut objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        objects.retain(|_, weak| weak.strong_count() > 0);
        // The next id whose mmap window no live object holds: ids count up
        // and wrap below MAX_OBJECT_ID (offsets stay positive as off_t),
        // so two live objects never share an offset.
        let live = objects.len() as u64;
        let mut id = None;
        for _ in 0..=live {
            let candidate = self.next_object_id.fetch_add(1, Ordering::Relaxed) % MAX_OBJECT_ID;
            if candidate != 0 && !objects.contains_key(&(candidate << MMAP_OFFSET_SHIFT)) {
                id = Some(candidate);
                break;
            }
        }
        let id = id.ok_or_else(|| AllocError::Host("every GEM mmap offset is in use".into()))?;
        let object = Arc::new(GemObject::new(
            id,
            flags,
            private_vm,
            memory,
            Arc::clone(&self.counters),
        ));
        objects.insert(object.mmap_offset(), Arc::downgrade(&object));
        drop(objects);
        if private_vm.is_none() {
            // Failing to stat our own memfd cannot happen; an object that
            // could not be registered only cannot be re-imported.
            let _ = self.exports.register_object(&object);
        }
        Ok(object)
    }

    /// The live object at mmap offset `offset` (exactly its start).
    pub fn object_at_mmap_offset(&self, offset: u64) -> Option<Arc<GemObject>> {
        let objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        objects
            .get(&(offset >> MMAP_OFFSET_SHIFT << MMAP_OFFSET_SHIFT))
            .and_then(Weak::upgrade)
    }

    pub(crate) fn next_file_id(&self) -> u64 {
        self.next_file_id.fetch_add(1, Ordering::Relaxed)
    }

    /// What the device holds now.
    pub fn stats(&self) -> Stats {
        Stats {
            files: self.counters.files.load(Ordering::Relaxed),
            gem_objects: self.counters.gem_objects.load(Ordering::Relaxed),
            vms: self.counters.vms.load(Ordering::Relaxed),
            syncobjs: self.counters.syncobjs.load(Ordering::Relaxed),
            ram_pages: self.ram.allocated_pages(),
            kernel_pages: self.pool.pages_in_use(),
        }
    }

    /// The RAM.
    pub fn ram(&self) -> &Ram {
        &self.ram
    }

    /// The firmware and the structures shared with it.
    pub fn firmware(&self) -> &Arc<FirmwareLink> {
        &self.firmware
    }

    /// The GPU scheduler.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.scheduler
    }

    /// The export registry.
    pub fn exports(&self) -> &Exports {
        &self.exports
    }

    /// The device-wide change notifier fences and syncobjs use.
    pub fn sync_events(&self) -> &Arc<SyncEvents> {
        &self.events
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.scheduler.shutdown();
    }
}

/// A simulated machine with an AGX GPU.
#[derive(Debug, Clone)]
pub struct System {
    device: Arc<Device>,
}

impl System {
    /// Builds a system.
    pub fn new(config: SystemConfig) -> Result<System, AllocError> {
        let ram = Ram::new(config.ram_bytes);
        let pool = Arc::new(PagePool::new(ram.clone()));
        let dummy_page = ram.allocate(agx_hw::uat::PAGE_BYTES, "agx-dummy-page")?;
        let events = Arc::new(SyncEvents::default());
        let firmware = Arc::new(FirmwareLink::boot(
            Arc::clone(&pool),
            Some(Arc::clone(&events)),
            config.command_timeout_ms,
            config.gpu_threads,
        )?);
        let scheduler = Scheduler::start(
            Arc::clone(&firmware),
            ram.clone(),
            Arc::clone(&events),
            config.tvb_policy,
            config.tvb_initial_blocks,
        );
        Ok(System {
            device: Arc::new(Device {
                ram,
                pool,
                counters: Arc::new(Counters::default()),
                dummy_page,
                events,
                exports: Exports::default(),
                firmware,
                scheduler,
                next_object_id: AtomicU64::new(1),
                next_file_id: AtomicU64::new(1),
                objects: Mutex::new(HashMap::new()),
                capture: Mutex::new(None),
            }),
        }
        .with_capture_from_env())
    }

    fn with_capture_from_env(self) -> System {
        if let Some(path) = std::env::var_os("AGX_KMD_CAPTURE") {
            if let Err(e) = self.capture_to(std::path::Path::new(&path)) {
                tracing::error!(%e, path = ?path, "cannot start the capture");
            }
        }
        self
    }

    /// Records every submission from now on (with the device parameters
    /// and the memory each can reach) into a capture file at `path`
    /// (`Documentation/capture-format.md`).
    pub fn capture_to(&self, path: &std::path::Path) -> std::io::Result<()> {
        let file = std::fs::File::create(path)?;
        let mut writer = agx_uapi::capture::CaptureWriter::new(std::io::BufWriter::new(file))?;
        writer.params(&crate::params::params_global())?;
        *self
            .device
            .capture
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(writer);
        Ok(())
    }

    /// Stops capturing (and closes the file).
    pub fn stop_capture(&self) {
        *self
            .device
            .capture
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Opens a DRM file (a render node).
    pub fn open(&self) -> File {
        File::new(Arc::clone(&self.device))
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// What the device holds now.
    pub fn stats(&self) -> Stats {
        self.device.stats()
    }
}
