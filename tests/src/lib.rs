//! Cross-crate integration tests for the AGX stack.
//!
//! The library part is empty on purpose: the tests live in `tests/tests/`
//! and exercise several crates together (UAPI layouts against the formats
//! the hardware sees, and, as the stack grows, umd -> kmd -> firmware-sim
//! end to end).
#![forbid(unsafe_code)]
