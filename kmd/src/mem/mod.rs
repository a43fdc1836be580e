//! Memory: simulated RAM and the GPU page tables that map it.

pub mod backing;
pub mod pagetable;
pub mod phys;

pub use backing::Backing;
pub use pagetable::{PagePool, PageTables};
pub use phys::{AllocError, PhysRange, Ram, RAM_BASE};
