//! The interface between the kernel-mode driver (`agx-kmd`) and the GPU
//! firmware (played by `agx-firmware-sim`).
//!
//! On Apple AGX GPUs the kernel never programs the GPU directly: it writes
//! structures into memory the firmware can see (an init structure, rings with
//! read/write pointers, per-queue work queues of command objects, event
//! stamps) and rings a mailbox doorbell. The firmware answers through an
//! event ring. Both halves of that contract live here, once, with fixed
//! layouts and compile-time size checks, so the kmd and the simulator cannot
//! drift apart.
//!
//! The rings are in [`ring`], the structures in [`messages`]; the kmd's
//! scheduler writes them and the simulated firmware serves them
//! (`Documentation/firmware-interface.md`). How the kmd boots the firmware
//! and how the two signal each other is [`coprocessor`]; the kinds of
//! address that cross between them are `agx_hw::addr`; memory as the firmware
//! sees it is [`view`].
#![forbid(unsafe_code)]

pub mod coprocessor;
pub mod messages;
pub mod ring;
pub mod view;
