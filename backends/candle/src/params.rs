//! The adapter's bottom layer: what it knows of a variable, and its optimizer state in host
//! memory, whatever the storage type.

use candle_core::Var;
use homeadam_core::{bf16, f16, Dtype, Group, Q8Block};

// The bound the visitors of the states put on a state type: the core's operations and, in a
// build that can place the state in CUDA buffers, the items' bytes.
#[cfg(feature = "cuda")]
pub(crate) use bytes::DeviceBytes as StateType;
#[cfg(not(feature = "cuda"))]
pub(crate) use homeadam_core::StateStorage as StateType;

/// A variable and what the adapter knows of it.
#[derive(Clone, Debug)]
pub(crate) struct Param {
    pub(crate) name: String,
    pub(crate) var: Var,
    pub(crate) group: Group,
}

/// Per-variable optimizer state in the chosen storage type.
#[derive(Clone, Debug)]
pub(crate) enum States {
    F32(Vec<Vec<f32>>),
    BF16(Vec<Vec<bf16>>),
    F16(Vec<Vec<f16>>),
    Q8(Vec<Vec<Q8Block>>),
}

/// Work on the state of every variable, whatever its storage type: the one place that
/// matches on [`States`] for reading. Work that needs no more than the core's operations
/// may bound `S` by [`homeadam_core::StateStorage`] alone.
pub(crate) trait OnStates {
    /// The result.
    type Out;
    /// Does the work on states of type `S`.
    fn on<S: StateType>(self, states: &[Vec<S>]) -> Self::Out;
}

/// [`OnStates`] with the states lent mutably.
pub(crate) trait OnStatesMut {
    /// The result.
    type Out;
    /// Does the work on states of type `S`.
    fn on<S: StateType>(self, states: &mut Vec<Vec<S>>) -> Self::Out;
}

impl States {
    /// Zeroed state of `slots` slots for variables of `numels` elements.
    pub(crate) fn fresh(dtype: Dtype, slots: usize, numels: impl Iterator<Item = usize>) -> States {
        let mut states = match dtype {
            Dtype::F32 => States::F32(Vec::new()),
            Dtype::BF16 => States::BF16(Vec::new()),
            Dtype::F16 => States::F16(Vec::new()),
            Dtype::Q8 => States::Q8(Vec::new()),
        };
        states.push_fresh(slots, numels);
        states
    }

    /// Appends zeroed state of `slots` slots for variables of `numels` elements.
    pub(crate) fn push_fresh(&mut self, slots: usize, numels: impl Iterator<Item = usize>) {
        struct Push<I>(usize, I);
        impl<I: Iterator<Item = usize>> OnStatesMut for Push<I> {
            type Out = ();
            fn on<S: StateType>(self, states: &mut Vec<Vec<S>>) {
                let Push(slots, numels) = self;
                states.extend(numels.map(|n| vec![S::default(); slots * S::slot_len(n)]));
            }
        }
        self.visit_mut(Push(slots, numels));
    }

    /// Runs `work` on the states.
    pub(crate) fn visit<W: OnStates>(&self, work: W) -> W::Out {
        match self {
            States::F32(s) => work.on(s),
            States::BF16(s) => work.on(s),
            States::F16(s) => work.on(s),
            States::Q8(s) => work.on(s),
        }
    }

    /// Runs `work` on the states, lent mutably.
    pub(crate) fn visit_mut<W: OnStatesMut>(&mut self, work: W) -> W::Out {
        match self {
            States::F32(s) => work.on(s),
            States::BF16(s) => work.on(s),
            States::F16(s) => work.on(s),
            States::Q8(s) => work.on(s),
        }
    }
}

/// State items as the CUDA kernels' buffers hold them: the core's state format (the core's
/// own conversions are not public).
#[cfg(feature = "cuda")]
mod bytes {
    use homeadam_core::q8::BLOCK_BYTES;
    use homeadam_core::{bf16, f16, Q8Block, StateStorage, Storage};

    /// A state type whose items go to and from a device buffer as bytes.
    pub(crate) trait DeviceBytes: StateStorage {
        /// Bytes of one item.
        const BYTES: usize;
        /// Writes the item's [`DeviceBytes::BYTES`] bytes to `out`.
        fn write(&self, out: &mut [u8]);
        /// The item from its [`DeviceBytes::BYTES`] bytes.
        fn read(bytes: &[u8]) -> Self;
    }

    /// An element type: its bits, little-endian.
    macro_rules! element_item {
        ($($t:ty),*) => {$(
            impl DeviceBytes for $t {
                const BYTES: usize = <$t as Storage>::DTYPE.size();
                fn write(&self, out: &mut [u8]) {
                    out.copy_from_slice(&self.to_bits32().to_le_bytes()[..Self::BYTES]);
                }
                fn read(bytes: &[u8]) -> Self {
                    let mut word = [0u8; 4];
                    word[..Self::BYTES].copy_from_slice(bytes);
                    <$t>::from_bits32(u32::from_le_bytes(word))
                }
            }
        )*};
    }
    element_item!(f32, bf16, f16);

    impl DeviceBytes for Q8Block {
        const BYTES: usize = BLOCK_BYTES;
        fn write(&self, out: &mut [u8]) {
            out.copy_from_slice(&self.to_bytes());
        }
        fn read(bytes: &[u8]) -> Self {
            Q8Block::from_bytes(bytes)
        }
    }
}
