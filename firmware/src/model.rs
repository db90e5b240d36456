//! Softmax regression on the 64 pixels / 16: logits = W x + b, cross-entropy loss.

use homeadam_mcu::Sample;

/// Pixels per image.
pub const FEATURES: usize = 64;
/// Classes.
pub const CLASSES: usize = 10;
/// Parameters: W (class-major), then b.
pub const PARAMS: usize = CLASSES * FEATURES + CLASSES;

fn logits(params: &[f32; PARAMS], s: &Sample<FEATURES>) -> [f32; CLASSES] {
    core::array::from_fn(|c| {
        let w = &params[c * FEATURES..(c + 1) * FEATURES];
        let dot = w
            .iter()
            .zip(&s.features)
            .fold(0.0f32, |a, (w, &x)| a + w * (x as f32 / 16.0));
        dot + params[CLASSES * FEATURES + c]
    })
}

/// The predicted class.
pub fn predict(params: &[f32; PARAMS], s: &Sample<FEATURES>) -> usize {
    let z = logits(params, s);
    (0..CLASSES).fold(0, |best, c| if z[c] > z[best] { c } else { best })
}

/// Adds the gradient of the mean loss over a batch of `batch` samples for `s` to `grad`.
pub fn accumulate_grad(params: &[f32; PARAMS], s: &Sample<FEATURES>, batch: usize, grad: &mut [f32; PARAMS]) {
    let z = logits(params, s);
    let top = z.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let e: [f32; CLASSES] = core::array::from_fn(|c| libm::expf(z[c] - top));
    let sum: f32 = e.iter().sum();
    for c in 0..CLASSES {
        let d = (e[c] / sum - (c == s.label as usize) as u8 as f32) / batch as f32;
        let row = &mut grad[c * FEATURES..(c + 1) * FEATURES];
        for (g, &x) in row.iter_mut().zip(&s.features) {
            *g += d * (x as f32 / 16.0);
        }
        grad[CLASSES * FEATURES + c] += d;
    }
}
