//! The userspace driver.
//!
//! `agx-umd` builds command buffers for AGX GPUs: render passes with their
//! tilebuffer load/store programs (`bg`, `eot`, `partial_bg`,
//! `partial_eot`) generated in AGX machine code, the depth/stencil
//! load/store (ZLS) configuration that keeps partial renders correct, and
//! compute dispatches. It talks to the kernel only through the asahi UAPI
//! (the crate-private `kernel::Kernel`: ioctl bytes, mmap, sync-file status), so the same
//! code drives a real Asahi Linux kernel ([`Device::open`]) and the
//! simulated device ([`Device::open_simulated`]).
//!
//! The pieces, in the manner of a graphics HAL: [`Device`] (with its GPU
//! VM and address-space layout), [`Buffer`] and [`alloc::Arena`]
//! (allocator), [`Image`], [`Shader`] (executable), [`GraphicsPipeline`],
//! [`CommandBuffer`] with [`RenderPass`], [`Queue`] and [`Semaphore`].
#![deny(unsafe_code)]

pub mod alloc;
pub mod cmd;
pub mod device;
pub mod error;
pub mod heap;
pub mod image;
pub mod kernel;
pub mod pass;
pub mod program;
pub mod queue;
pub mod scratch;
#[cfg(feature = "sim")]
pub mod sim;
mod sys;

pub use cmd::{
    Blend, ColourOutput, Command, CommandBuffer, CullMode, DepthState, GraphicsPipeline,
    GraphicsPipelineDesc, Interpolation, RecordStats, RenderPass, StencilState, Topology, Varying,
    VertexAttribute, VertexFormat, VertexLayout,
};
pub use device::{Buffer, BufferDesc, Device, MemoryType, Region};
pub use error::Error;
pub use heap::{DescriptorIndex, DescriptorSet, ImageHeap, SamplerHeap, SamplerIndex};
pub use image::{DepthImage, Format, Image, StencilImage};
pub use kernel::Errno;
pub use pass::{
    ColourAttachment, DepthAttachment, LoadOp, PassDebug, RenderPassDesc, StencilPlane, StoreOp,
};
pub use program::{Bindings, ProgramCache, Shader};
pub use queue::{Queue, Semaphore, Submission};
pub use sys::returned_fd;
