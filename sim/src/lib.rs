//! A simulated machine with an AGX GPU.
//!
//! The kernel driver model (`agx-kmd`) is written against the firmware
//! contract in `agx-fwif` and knows nothing of what is behind it; the
//! simulated firmware and GPU (`agx-firmware-sim`) serve that contract
//! over the machine's physical memory. This crate is the one place that
//! puts them together: [`System::new`] builds RAM, the simulated
//! coprocessor on it, and the kmd's device, and hands out DRM files
//! ([`System::open`]), each the equivalent of an open
//! `/dev/dri/renderD128`. Everything that wants a GPU without one (the
//! userspace driver's simulated device, the LD_PRELOAD shim, the tools
//! and the tests) builds one of these.
#![forbid(unsafe_code)]

pub mod log;

use std::sync::Arc;

use agx_firmware_sim::firmware::SimulatedCoprocessor;
pub use agx_firmware_sim::probe::{
    GroupStart, PixelEvent, ShaderProbe, Stage, StencilTest, TracedLane,
};
pub use agx_firmware_sim::usc::trace::{LaneCounts, LaneTrace, NamedValue, TraceStep};
pub use agx_firmware_sim::usc::{ShaderEngine, SimdGroup, LANES};
/// The kmd model, for what lies deeper than a file (GEM objects, the
/// scheduler, parameter-buffer statistics).
pub use agx_kmd as kmd;
pub use agx_kmd::device::ProbeError;
pub use agx_kmd::file::NodeKind;
pub use agx_kmd::mem::AllocError;
use agx_kmd::mem::Ram;
pub use agx_kmd::tvb::GrowthPolicy;
pub use agx_kmd::{Device, DeviceConfig, File, Stats};

/// How to build a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemConfig {
    /// Simulated RAM.
    pub ram_bytes: u64,
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
    /// The GEM memory one client process may create or import over all
    /// the DRM files it opened (4 GiB by default: half the default RAM,
    /// so one client cannot starve the others; kernel memory is not
    /// charged); past it, GEM_CREATE fails with `ENOMEM`.
    pub client_memory_limit_bytes: u64,
    /// Host threads the simulated GPU runs threadgroups on (results do
    /// not depend on it).
    pub gpu_threads: usize,
    /// Whether CPU mappings of objects can be handed to other processes
    /// as descriptors (a device process serving clients; see
    /// `DeviceConfig::keep_object_descriptors`).
    pub keep_object_descriptors: bool,
    /// The objects with a device descriptor (exportable or imported ones)
    /// one client process may hold over all the DRM files it opened
    /// (`DeviceConfig::client_descriptor_limit`): no
    /// limit by default; the device process sets a quarter of its
    /// descriptor limit.
    pub client_descriptor_limit: u64,
    /// The objects with a device descriptor all clients may hold together
    /// (`DeviceConfig::device_descriptor_limit`): no limit by default;
    /// the device process sets three quarters of its descriptor limit.
    pub device_descriptor_limit: u64,
    /// What runs the shader core's programs: the compiled engine (the
    /// default) or the interpreter (the reference).
    pub shader_engine: ShaderEngine,
}

impl Default for SystemConfig {
    fn default() -> SystemConfig {
        let kmd = DeviceConfig::default();
        SystemConfig {
            ram_bytes: 8 << 30,
            tvb_policy: kmd.tvb_policy,
            tvb_initial_blocks: kmd.tvb_initial_blocks,
            work_budget_units: kmd.work_budget_units,
            command_timeout_ms: kmd.command_timeout_ms,
            client_memory_limit_bytes: 4 << 30,
            gpu_threads: std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(4),
            keep_object_descriptors: false,
            client_descriptor_limit: kmd.client_descriptor_limit,
            device_descriptor_limit: kmd.device_descriptor_limit,
            shader_engine: ShaderEngine::default(),
        }
    }
}

/// An `AGX_*` variable that does not hold what it should.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is not {expected}")]
pub struct ConfigError {
    /// The variable.
    pub variable: &'static str,
    /// What it held.
    pub value: String,
    /// What it should hold.
    pub expected: &'static str,
}

fn env_number<T: std::str::FromStr>(
    variable: &'static str,
    expected: &'static str,
) -> Result<Option<T>, ConfigError> {
    match std::env::var(variable) {
        Ok(value) => value.trim().parse().map(Some).map_err(|_| ConfigError {
            variable,
            value,
            expected,
        }),
        Err(_) => Ok(None),
    }
}

fn nonzero<T: PartialEq + Default + ToString>(
    variable: &'static str,
    value: T,
    expected: &'static str,
) -> Result<T, ConfigError> {
    if value == T::default() {
        return Err(ConfigError {
            variable,
            value: value.to_string(),
            expected,
        });
    }
    Ok(value)
}

/// What `AGX_TVB_INITIAL_BLOCKS` takes, as its error says it.
const INITIAL_BLOCKS_EXPECTED: &str = "a number of 128 KiB blocks from 8 to 6579";

impl SystemConfig {
    /// `self` with what the environment overrides, one variable per
    /// field: `AGX_RAM_BYTES`, `AGX_TVB_POLICY` (`asahi`, `demand` or
    /// `sync`), `AGX_TVB_INITIAL_BLOCKS`, `AGX_WORK_BUDGET_UNITS` (the
    /// watchdog's work budget per submission), `AGX_COMMAND_TIMEOUT_MS`
    /// (its host-time last resort), `AGX_CLIENT_MEMORY_LIMIT_BYTES` (the GEM
    /// memory one file may hold), `AGX_GPU_THREADS` and `AGX_SHADER_ENGINE`
    /// (`interpreter` or `compiled`). A variable that is
    /// set but does not parse (or is zero where zero is meaningless) is an
    /// error naming it.
    pub fn with_env(self) -> Result<SystemConfig, ConfigError> {
        let mut config = self;
        if let Some(bytes) = env_number("AGX_RAM_BYTES", "a non-zero number of bytes")? {
            config.ram_bytes = nonzero("AGX_RAM_BYTES", bytes, "a non-zero number of bytes")?;
        }
        if let Ok(value) = std::env::var("AGX_TVB_POLICY") {
            config.tvb_policy = value.trim().parse().map_err(|_| ConfigError {
                variable: "AGX_TVB_POLICY",
                value,
                expected: "one of asahi, demand, sync",
            })?;
        }
        const BLOCKS: &str = INITIAL_BLOCKS_EXPECTED;
        if let Some(blocks) = env_number("AGX_TVB_INITIAL_BLOCKS", BLOCKS)? {
            if !(agx_kmd::tvb::MIN_INITIAL_BLOCKS..=agx_kmd::tvb::MAX_BLOCKS).contains(&blocks) {
                return Err(ConfigError {
                    variable: "AGX_TVB_INITIAL_BLOCKS",
                    value: blocks.to_string(),
                    expected: BLOCKS,
                });
            }
            config.tvb_initial_blocks = blocks;
        }
        if let Some(units) = env_number("AGX_WORK_BUDGET_UNITS", "a non-zero number of work units")?
        {
            config.work_budget_units = nonzero(
                "AGX_WORK_BUDGET_UNITS",
                units,
                "a non-zero number of work units",
            )?;
        }
        if let Some(ms) = env_number("AGX_COMMAND_TIMEOUT_MS", "a number of milliseconds")? {
            config.command_timeout_ms = ms;
        }
        if let Some(bytes) = env_number("AGX_CLIENT_MEMORY_LIMIT_BYTES", "a number of bytes")? {
            config.client_memory_limit_bytes = bytes;
        }
        if let Some(count) = env_number(
            "AGX_CLIENT_DESCRIPTOR_LIMIT",
            "a number of device descriptors",
        )? {
            config.client_descriptor_limit = count;
        }
        const THREADS: &str = "a number of threads from 1 to 1024";
        if let Some(threads) = env_number::<usize>("AGX_GPU_THREADS", THREADS)? {
            if !(1..=1024).contains(&threads) {
                return Err(ConfigError {
                    variable: "AGX_GPU_THREADS",
                    value: threads.to_string(),
                    expected: THREADS,
                });
            }
            config.gpu_threads = threads;
        }
        if let Ok(value) = std::env::var("AGX_SHADER_ENGINE") {
            config.shader_engine = value.trim().parse().map_err(|()| ConfigError {
                variable: "AGX_SHADER_ENGINE",
                value,
                expected: "one of interpreter, compiled",
            })?;
        }
        Ok(config)
    }

    /// The kmd's part of it.
    pub fn device_config(&self) -> DeviceConfig {
        DeviceConfig {
            tvb_policy: self.tvb_policy,
            tvb_initial_blocks: self.tvb_initial_blocks,
            work_budget_units: self.work_budget_units,
            command_timeout_ms: self.command_timeout_ms,
            client_memory_limit_bytes: self.client_memory_limit_bytes,
            keep_object_descriptors: self.keep_object_descriptors,
            client_descriptor_limit: self.client_descriptor_limit,
            device_descriptor_limit: self.device_descriptor_limit,
        }
    }
}

/// A simulated machine: RAM, the GPU's coprocessor and GPU, and the
/// kernel driver bound to them. Cheap to clone; the machine lives while a
/// clone or an open file does.
#[derive(Debug, Clone)]
pub struct System {
    device: Arc<Device>,
}

impl System {
    /// Builds a machine and probes the driver on it.
    pub fn new(config: SystemConfig) -> Result<System, ProbeError> {
        System::with_probe(config, None)
    }

    /// Builds a machine whose GPU asks the debugger's `probe` which lanes
    /// of its SIMD-groups to trace (`agx-debug`): the groups it picks run
    /// in the interpreter, whatever `config.shader_engine` says.
    pub fn with_probe(
        config: SystemConfig,
        probe: Option<Arc<dyn ShaderProbe>>,
    ) -> Result<System, ProbeError> {
        let ram = Ram::new(config.ram_bytes)?;
        let coprocessor = SimulatedCoprocessor::new(Arc::new(ram.clone()), config.gpu_threads)
            .with_shader_engine(config.shader_engine)
            .with_probe(probe);
        let device = Device::new(ram, config.device_config(), &coprocessor)?;
        Ok(System { device })
    }

    /// Opens a DRM file (a render node).
    pub fn open(&self) -> File {
        File::open(&self.device)
    }

    /// Opens a DRM file through `node` (the card node or the render node).
    pub fn open_node(&self, node: NodeKind) -> File {
        File::open_node(&self.device, node)
    }

    /// Opens a DRM file through `node` for `caller` (a process other
    /// than this one, which a device process serves).
    pub fn open_node_as(&self, node: NodeKind, caller: agx_kmd::auth::Caller) -> File {
        File::open_node_as(&self.device, node, caller)
    }

    /// The kmd's device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// What the device holds now.
    pub fn stats(&self) -> Stats {
        self.device.stats()
    }

    /// Records every submission from now on into a capture file at `path`
    /// (`Documentation/capture-format.md`).
    pub fn capture_to(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.device.capture_to(path)
    }

    /// Stops capturing (and closes the file).
    pub fn stop_capture(&self) {
        self.device.stop_capture();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_initial_parameter_buffer_outside_its_range_is_refused_naming_the_range() {
        // The range the environment variable's error states is the kmd's.
        assert!(INITIAL_BLOCKS_EXPECTED.ends_with(&format!(
            "from {} to {}",
            agx_kmd::tvb::MIN_INITIAL_BLOCKS,
            agx_kmd::tvb::MAX_BLOCKS
        )));
        for blocks in [0, 1, 7, 6580] {
            let config = SystemConfig {
                ram_bytes: 256 << 20,
                tvb_initial_blocks: blocks,
                ..SystemConfig::default()
            };
            match System::new(config) {
                Err(ProbeError::InitialBlocks {
                    blocks: b,
                    min,
                    max,
                }) => {
                    assert_eq!((b, min, max), (blocks, 8, 6579));
                }
                other => panic!("{blocks} blocks: {other:?}"),
            }
        }
        let config = SystemConfig {
            ram_bytes: 256 << 20,
            tvb_initial_blocks: 8,
            ..SystemConfig::default()
        };
        assert!(System::new(config).is_ok());
    }
}
