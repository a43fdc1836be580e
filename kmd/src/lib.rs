//! The kernel-mode driver, modelled in userspace.
//!
//! `agx-kmd` is a faithful model of the Asahi Linux `drm/asahi` kernel
//! driver: it owns GEM objects, GPU virtual address spaces and their page
//! tables, syncobjs, queues, the firmware interface, fault recovery and the
//! parameter buffer (the tiled vertex buffer). Clients reach it only through
//! the ioctl UAPI defined in `agx-uapi` ([`File::ioctl`]), with the same
//! validation and errno values as the real kernel, so a client that works
//! here works on hardware.
//!
//! Status: the device ([`Device`]), simulated RAM, GEM objects, VMs with
//! UAT page tables and VM_BIND, GEM_BIND_OBJECT, GET_PARAMS/GET_TIME, binary
//! and timeline syncobjs with their fds and sync files, PRIME and a shared
//! buffer's fences (the dma-buf sync-file ioctls), the DRM core
//! VERSION/GET_CAP/GEM_CLOSE, queues and SUBMIT through the firmware
//! interface ([`sched`]), and the parameter buffer are in place.
//!
//! The kmd talks to the GPU's firmware only through the contract in
//! `agx-fwif` (boot on an init block, a doorbell, an interrupt, shared
//! memory), so it builds and tests without the GPU model; `agx-sim`
//! composes it with the simulated firmware and GPU into a machine.
//!
//! `unsafe` code is confined to three modules: `mem::backing` (mapping
//! memfds), `uaccess` (copying from and to user pointers) and `sync_file`
//! (asking the host kernel about its sync files).
#![deny(unsafe_code)]

pub mod auth;
pub mod device;
pub mod dma_buf;
pub mod errno;
pub mod export;
pub mod file;
pub mod firmware;
pub mod fwcmd;
pub mod gem;
pub mod mem;
pub mod params;
pub mod queue;
pub mod sched;
pub mod stats;
pub mod submit;
pub mod sync;
pub mod sync_file;
pub mod tvb;
pub mod uaccess;
pub mod vm;

pub use device::{Device, DeviceConfig};
pub use errno::Errno;
pub use file::File;
pub use stats::Stats;
