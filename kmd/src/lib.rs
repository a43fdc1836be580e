//! The kernel-mode driver, modelled in userspace.
//!
//! `agx-kmd` is a faithful model of the Asahi Linux `drm/asahi` kernel
//! driver: it owns GEM objects, GPU virtual address spaces and their page
//! tables, syncobjs, queues, the firmware interface, fault recovery and the
//! parameter buffer (the tiled vertex buffer). Clients reach it only through
//! the ioctl UAPI defined in `agx-uapi`, with the same validation and errno
//! values as the real kernel, so a client that works here works on hardware.
//!
//! Status: only the crate exists; the device, memory and ioctl handling
//! arrive with the "kmd part 1" work.
#![forbid(unsafe_code)]
