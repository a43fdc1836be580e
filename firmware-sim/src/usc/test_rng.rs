//! A small pseudo-random word source for the crate's unit tests:
//! Marsaglia's xorshift64, the same sequence for a seed on every run, so
//! that a failing case can be replayed. It lives with the shader core, the
//! lowest layer, so that every module may use it.

/// The words xorshift64 produces from `seed` (not zero), one per call.
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
