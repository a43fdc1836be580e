//! Cross-crate integration tests for the AGX stack, and the scenes they
//! share with the parameter-buffer policy benchmark.
//!
//! The tests live in `tests/tests/` and exercise several crates together
//! (UAPI layouts against the formats the hardware sees; umd -> kmd ->
//! firmware-sim end to end). [`scene`] builds the parameter-buffer
//! scenes: dense geometry with a chosen number of varyings, drawn through
//! the userspace driver.
#![forbid(unsafe_code)]

pub mod scene;
