//! One file per rule; each states its formula in the paper's symbols.

pub(crate) mod adabelief;
pub(crate) mod adam;
pub(crate) mod homeadam;
pub(crate) mod miadam;
pub(crate) mod sgd;
pub(crate) mod srf;
pub(crate) mod swats;
