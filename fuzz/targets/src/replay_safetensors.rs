//! Any bytes → `ReplayInput::parse` (the `--input` file of `homeadam replay`): Ok or an error
//! with a message, never a panic. An input that parses, written back as safetensors, parses
//! to the same tensors (in name order, which is how safetensors writes them).

use homeadam_replay::{output_bytes, ReplayInput, ReplayOutput};

/// Parses `data` as a replay input and, if it parses, writes it back and parses that; panics
/// where the two differ.
pub fn replay_safetensors(data: &[u8]) {
    let input = match ReplayInput::parse(data) {
        Ok(input) => input,
        Err(e) => {
            let _ = format!("{e:#}");
            return;
        }
    };
    let mut tensors = Vec::new();
    for t in &input.tensors {
        let mut grad_shape = vec![input.steps];
        grad_shape.extend(&t.shape);
        tensors.push((format!("param.{}", t.name), t.shape.clone(), t.param.clone()));
        tensors.push((format!("grad.{}", t.name), grad_shape, t.grads.clone()));
    }
    let written = ReplayOutput {
        tensors,
        reports: Vec::new(),
    };
    let bytes = output_bytes(&written).expect("a parsed input serializes");
    let again = ReplayInput::parse(&bytes).expect("a written input parses");
    assert_eq!(again.steps, input.steps);
    assert_eq!(
        bits(&again),
        bits(&input),
        "parse(write(input)) differs from input"
    );
}

/// A tensor's name, shape, and the bits of θ₀ and of the gradients.
type TensorBits = (String, Vec<usize>, Vec<u32>, Vec<u32>);

/// The tensors of `input`, sorted by name.
fn bits(input: &ReplayInput) -> Vec<TensorBits> {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect();
    let mut tensors: Vec<TensorBits> = input
        .tensors
        .iter()
        .map(|t| (t.name.clone(), t.shape.clone(), bits(&t.param), bits(&t.grads)))
        .collect();
    tensors.sort();
    tensors
}
