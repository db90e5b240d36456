//! The state byte format's magic and versions (docs/DESIGN.md §10): what the checkpoint code
//! writes and reads, and what its errors name.

/// The first bytes of every saved state.
pub(crate) const MAGIC: &[u8; 8] = b"HOMEADAM";
/// The format version this build writes and reads without a calibrated τ.
pub(crate) const VERSION: u16 = 2;
/// The format version with a calibrated τ's state.
pub(crate) const VERSION_CALIBRATED: u16 = 3;
