//! Shared helpers: typed ioctl calls, and a device booted on a scripted
//! firmware (the kmd's tests need no GPU model).
#![allow(dead_code, unreachable_pub)]

pub mod ioctl;
pub mod scripted;

use std::sync::Arc;

pub use agx_kmd::{Device, DeviceConfig};
pub use ioctl::*;

/// RAM the test devices get.
pub const RAM_BYTES: u64 = 2 << 30;

/// A device with 2 GiB of RAM whose firmware is scripted (boots, then
/// does only what a test tells it).
pub fn system() -> TestDevice {
    TestDevice(scripted::boot(RAM_BYTES, DeviceConfig::default()).0)
}

/// A device the tests open files on.
pub struct TestDevice(pub Arc<Device>);

impl TestDevice {
    /// Opens a DRM file on it.
    pub fn open(&self) -> agx_kmd::File {
        agx_kmd::File::open(&self.0)
    }

    /// Opens a DRM file on it for client process `tgid` (not this one).
    #[allow(dead_code)] // Not every test binary opens files for others.
    pub fn open_for_process(&self, tgid: u32) -> agx_kmd::File {
        let caller = agx_kmd::auth::Caller {
            tgid,
            tid: tgid,
            cap_sys_admin: false,
        };
        agx_kmd::File::open_node_as(&self.0, agx_kmd::auth::NodeKind::Render, caller)
    }
}

impl std::ops::Deref for TestDevice {
    type Target = Device;

    fn deref(&self) -> &Device {
        &self.0
    }
}
