//! The DRM device: what the driver holds for one GPU, shared by all its
//! open files.
//!
//! [`Device::new`] is the driver's probe: given the machine's RAM and a
//! [`Coprocessor`] (the GPU's firmware processor), it sets up the kernel
//! page pool, the firmware's address space and
//! boot block, and the scheduler, then boots the firmware. Each
//! `File::open` is an open of its render node.
//! The kmd never knows what is behind the coprocessor: the composition
//! crate (`agx-sim`) plugs in the simulated firmware and GPU, and a kmd
//! test can plug in a scripted firmware.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use agx_uapi::asahi::GemFlags;

use agx_capture::CaptureWriter;
use agx_fwif::coprocessor::Coprocessor;

use crate::export::Exports;
use crate::firmware::FirmwareLink;
use crate::gem::{
    Charge, ClientAccount, FileMemory, GemError, GemObject, VmKey, MMAP_OFFSET_SHIFT,
};

use crate::mem::{AllocError, DeviceFd, PagePool, PhysRange, Ram};
use crate::sched::Scheduler;
use crate::stats::{Counters, Stats};
use crate::sync::SyncEvents;
use crate::tvb::GrowthPolicy;

/// GEM object ids (mmap windows) are below this: `id << 40` stays below
/// 2^63, a positive `off_t`.
const MAX_OBJECT_ID: u64 = 1 << (63 - MMAP_OFFSET_SHIFT);

/// The name of the memfds backing GEM objects (and so of PRIME fds): a
/// descriptor with this name is a buffer another simulated device can
/// import.
pub const GEM_MEMFD_NAME: &str = "agx-gem";

/// The name of a slab's memfd (small private objects of one file): not a
/// buffer another device may import.
pub const GEM_SLAB_MEMFD_NAME: &str = "agx-gem-slab";

/// A file the device writes (a capture), through a [`DeviceFd`]: each
/// write first checks that the descriptor still names the file, so a
/// client that closed it gets `EBADF` in the log, not its other files
/// overwritten.
#[derive(Debug)]
pub(crate) struct KeptFile(DeviceFd);

impl std::io::Write for KeptFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(rustix::io::write(self.0.get()?, buf)?)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How to build the kernel side of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceConfig {
    /// How queues grow their parameter buffers.
    pub tvb_policy: GrowthPolicy,
    /// Blocks (128 KiB each) a queue's parameter buffer starts with.
    pub tvb_initial_blocks: u64,
    /// The firmware watchdog's budget: the GPU work one submission may
    /// do (work units, see `Documentation/gpu.md`) before it is stopped,
    /// its remaining commands cancelled, and its fence fails with
    /// `ETIMEDOUT`.
    pub work_budget_units: u64,
    /// The watchdog's last resort: host time one command may run,
    /// whatever its work.
    pub command_timeout_ms: u32,
    /// The GEM memory one client process's files may create (or import)
    /// together; past it, GEM_CREATE fails with `ENOMEM`. No limit by
    /// default, as Linux without a memory cgroup.
    pub client_memory_limit_bytes: u64,
    /// Whether the device keeps a descriptor of every object's memfd, not
    /// only of the exportable ones, so that a CPU mapping can be handed to
    /// another process as a descriptor ([`crate::File::mmap_descriptor`]):
    /// what a device serving clients in other processes needs.
    pub keep_object_descriptors: bool,
    /// The objects with a host descriptor of the device's own (each
    /// exportable or imported object's memfd) one client process's files
    /// may hold together; past it, GEM_CREATE and PRIME import fail with
    /// `ENOMEM`, so one client cannot take every descriptor of the device
    /// from the others. No limit by default.
    pub client_descriptor_limit: u64,
    /// The objects with a host descriptor of the device's own that all
    /// clients' files may hold together; past it, GEM_CREATE and PRIME
    /// import fail with `ENOMEM`, so that the device keeps descriptors for
    /// its files, call channels and slabs whatever the clients hold. No
    /// limit by default.
    pub device_descriptor_limit: u64,
}

impl Default for DeviceConfig {
    fn default() -> DeviceConfig {
        DeviceConfig {
            tvb_policy: GrowthPolicy::default(),
            tvb_initial_blocks: crate::tvb::INITIAL_BLOCKS,
            work_budget_units: crate::firmware::WORK_BUDGET_UNITS,
            command_timeout_ms: crate::firmware::COMMAND_TIMEOUT_MS,
            client_memory_limit_bytes: u64::MAX,
            keep_object_descriptors: false,
            client_descriptor_limit: u64::MAX,
            device_descriptor_limit: u64::MAX,
        }
    }
}

/// The name of the platform device the driver is bound to (the M1's GPU
/// node, `gpu@206400000`): the bus id SET_VERSION gives the master.
pub const PLATFORM_DEVICE_NAME: &str = "206400000.gpu";

/// The device state shared by all files.
#[derive(Debug)]
pub struct Device {
    pub(crate) ram: Ram,
    pub(crate) pool: Arc<PagePool>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) events: Arc<SyncEvents>,
    pub(crate) exports: Exports,
    firmware: Arc<FirmwareLink>,
    pub(crate) scheduler: Arc<Scheduler>,
    next_object_id: AtomicU64,
    next_file_id: AtomicU64,
    /// Objects by mmap offset, for mmap on the DRM file.
    objects: Mutex<HashMap<u64, Weak<GemObject>>>,
    /// Objects by GEM_FLINK name (an entry whose object has no handle
    /// left is dead, and removed when names are next handed out).
    pub(crate) flink_names: Mutex<std::collections::BTreeMap<u32, Weak<GemObject>>>,
    /// DRM master on the primary node.
    pub(crate) masters: crate::auth::Masters,
    /// Each client process's account, by process id, while a file it
    /// opened lives.
    clients: Mutex<HashMap<u32, Weak<ClientAccount>>>,
    /// The device descriptors all clients' objects hold.
    object_descriptors: Arc<crate::gem::DeviceDescriptors>,
    /// Where every submission is recorded, if capturing
    /// ([`Device::capture_to`], or the `AGX_KMD_CAPTURE` environment
    /// variable naming a file).
    pub(crate) capture: Mutex<Option<CaptureWriter<std::io::BufWriter<KeptFile>>>>,
    config: DeviceConfig,
}

impl Device {
    /// How the device was built.
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// The account of client process `tgid`: the one its live files
    /// charge, or a new one (a process id reused after the last file of
    /// the process that had it went starts afresh).
    pub(crate) fn client_account(&self, tgid: u32) -> Arc<ClientAccount> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(account) = clients.get(&tgid).and_then(Weak::upgrade) {
            return account;
        }
        // Dead entries go when the table reaches a power of two.
        if clients.len().is_power_of_two() {
            clients.retain(|_, weak| weak.strong_count() > 0);
        }
        let account = Arc::new(ClientAccount::new(
            self.config.client_memory_limit_bytes,
            self.config.client_descriptor_limit,
            Arc::clone(&self.object_descriptors),
        ));
        clients.insert(tgid, Arc::downgrade(&account));
        account
    }

    /// A new object of `size_bytes` (rounded up to pages), charged to
    /// `account`.
    pub(crate) fn create_object(
        &self,
        size_bytes: u64,
        flags: GemFlags,
        private_vm: Option<VmKey>,
        account: &Arc<FileMemory>,
    ) -> Result<Arc<GemObject>, GemError> {
        let charge = account.account().charge(Ram::pages_for(size_bytes))?;
        // An object that may be exported has a memfd of its own (a PRIME
        // fd is a duplicate of it), which the device keeps. A private one
        // is cut from its file's slab (CPU mappings hold the slab's memfd,
        // which only that file's objects share), or has a memfd of its own
        // when large; the device keeps the descriptor only when mappings
        // are handed out as descriptors.
        let memory = match private_vm {
            None => self.ram.allocate_object(size_bytes, GEM_MEMFD_NAME, true)?,
            Some(_) => self.ram.allocate_in_slab(
                &account.slabs,
                size_bytes,
                GEM_SLAB_MEMFD_NAME,
                self.config.keep_object_descriptors,
            )?,
        };
        let descriptor = self.charge_descriptor(&memory, account)?;
        Ok(self.register(memory, flags, private_vm, charge, descriptor)?)
    }

    /// The device descriptor `memory` costs `account`, if it keeps one.
    fn charge_descriptor(
        &self,
        memory: &PhysRange,
        account: &Arc<FileMemory>,
    ) -> Result<Option<crate::gem::DescriptorCharge>, GemError> {
        if !memory.is_exportable() {
            return Ok(None);
        }
        account
            .account()
            .charge_descriptor()
            .map(Some)
            .inspect_err(|error| {
                tracing::warn!(%error, "GEM object refused: the client's device descriptors are used up");
            })
    }

    /// Makes a GEM object of memory another device exported, charged to
    /// `account`.
    pub(crate) fn adopt_object(
        &self,
        fd: std::os::fd::OwnedFd,
        account: &Arc<FileMemory>,
    ) -> Result<Arc<GemObject>, GemError> {
        let memory = self.ram.adopt(fd)?;
        let charge = account.account().charge(memory.len_bytes())?;
        let descriptor = self.charge_descriptor(&memory, account)?;
        Ok(self.register(memory, GemFlags::empty(), None, charge, descriptor)?)
    }

    fn register(
        &self,
        memory: Arc<PhysRange>,
        flags: GemFlags,
        private_vm: Option<VmKey>,
        charge: Charge,
        descriptor: Option<crate::gem::DescriptorCharge>,
    ) -> Result<Arc<GemObject>, AllocError> {
        let mut objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        // Dead entries go when the table reaches a power of two: a sweep
        // costs no more than the creations since the last one.
        if objects.len().is_power_of_two() {
            objects.retain(|_, weak| weak.strong_count() > 0);
        }
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
            charge,
            descriptor,
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

    /// Whether the memfd `identity` is one of this device's objects' own
    /// (whatever handed it out: a PRIME export, or a CPU mapping a device
    /// process handed to a client as a descriptor).
    pub(crate) fn owns_memfd(&self, identity: crate::mem::backing::Inode) -> bool {
        let objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        objects
            .values()
            .filter_map(Weak::upgrade)
            .any(|object| object.memory().memfd_identity() == Some(identity))
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

/// Why the device could not be probed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Memory for the firmware's structures.
    #[error(transparent)]
    Memory(#[from] AllocError),
    /// The configured initial parameter-buffer size is outside what a
    /// queue can start with.
    #[error("a parameter buffer of {blocks} blocks: the initial size must be {min}..={max} blocks of 128 KiB")]
    InitialBlocks {
        /// What was configured.
        blocks: u64,
        /// [`crate::tvb::MIN_INITIAL_BLOCKS`].
        min: u64,
        /// [`crate::tvb::MAX_BLOCKS`].
        max: u64,
    },
    /// `AGX_KMD_CAPTURE` names a file that cannot be created.
    #[error("cannot start the capture AGX_KMD_CAPTURE asks for at {path:?}: {source}")]
    Capture {
        /// The path.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Device {
    /// Probes the device: takes `ram` as the machine's memory, boots the
    /// firmware of `coprocessor` on structures laid out in it, and starts
    /// the scheduler. Submissions are captured from the start if the
    /// `AGX_KMD_CAPTURE` environment variable names a file; if that file
    /// cannot be created, the probe fails.
    pub fn new(
        ram: Ram,
        config: DeviceConfig,
        coprocessor: &dyn Coprocessor,
    ) -> Result<Arc<Device>, ProbeError> {
        let blocks = config.tvb_initial_blocks;
        if !(crate::tvb::MIN_INITIAL_BLOCKS..=crate::tvb::MAX_BLOCKS).contains(&blocks) {
            let error = ProbeError::InitialBlocks {
                blocks,
                min: crate::tvb::MIN_INITIAL_BLOCKS,
                max: crate::tvb::MAX_BLOCKS,
            };
            tracing::error!(%error, "probe refused");
            return Err(error);
        }
        let pool = Arc::new(PagePool::new(ram.clone()));
        let events = Arc::new(SyncEvents::default());
        let firmware = Arc::new(FirmwareLink::boot(
            Arc::clone(&pool),
            coprocessor,
            Some(Arc::clone(&events)),
            config.command_timeout_ms,
            config.work_budget_units,
        )?);
        let scheduler = Scheduler::start(
            Arc::clone(&firmware),
            ram.clone(),
            Arc::clone(&events),
            config.tvb_policy,
            config.tvb_initial_blocks,
        );
        let device = Arc::new(Device {
            ram,
            pool,
            counters: Arc::new(Counters::default()),
            events,
            exports: Exports::default(),
            firmware,
            scheduler,
            next_object_id: AtomicU64::new(1),
            next_file_id: AtomicU64::new(1),
            flink_names: Mutex::default(),
            masters: crate::auth::Masters::default(),
            objects: Mutex::new(HashMap::new()),
            clients: Mutex::new(HashMap::new()),
            object_descriptors: Arc::new(crate::gem::DeviceDescriptors::new(
                config.device_descriptor_limit,
            )),
            capture: Mutex::new(None),
            config,
        });
        if let Some(path) = std::env::var_os("AGX_KMD_CAPTURE") {
            // Asked for and impossible: the probe fails (as a driver whose
            // module parameter is wrong), rather than run uncaptured.
            if let Err(source) = device.capture_to(std::path::Path::new(&path)) {
                let error = ProbeError::Capture {
                    path: path.into(),
                    source,
                };
                tracing::error!(%error, "device probe failed");
                return Err(error);
            }
        }
        Ok(device)
    }

    /// Records every submission from now on (with the device parameters
    /// and the memory each can reach) into a capture file at `path`
    /// (`Documentation/capture-format.md`).
    pub fn capture_to(&self, path: &std::path::Path) -> std::io::Result<()> {
        let file = KeptFile(DeviceFd::keep(std::fs::File::create(path)?.into())?);
        let mut writer = CaptureWriter::new(std::io::BufWriter::new(file))?;
        writer.params(&crate::params::params_global())?;
        *self.capture.lock().unwrap_or_else(|e| e.into_inner()) = Some(writer);
        Ok(())
    }

    /// Stops capturing (and closes the file).
    pub fn stop_capture(&self) {
        *self.capture.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}
