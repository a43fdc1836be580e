//! Memory: simulated RAM and the GPU page tables that map it.

pub mod backing;
pub mod pagetable;
pub mod phys;
pub mod va;

pub use backing::{DescriptorGone, DeviceFd, Placement};
pub use pagetable::{PagePool, PageTables, PoolPage};
pub use phys::{AllocError, PhysRange, Ram, RAM_BASE};
pub use va::VaAllocator;
