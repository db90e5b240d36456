#!/usr/bin/env python3
"""The peer of `homeadam bench-train`: the same networks, batch and steps in eager PyTorch.

    python3 host/benches/torch_train.py --experiment cifar10-vgg16 --device cuda \
        [--steps 20] [--warmup 5] [--batch-size B] [--small] [--json FILE]

The networks are the host's (host/src/models/): VGG16 of the preset's variant with its CIFAR
head and Kaiming-normal convolutions, ResNet34 with the host's stem (7x7/2 conv, BN, ReLU,
3x3/2 max-pool with padding 1, as torchvision), the post-norm Transformer LM of
pytorch/examples with a causal mask; same layer sizes and initialisation schemes, same batch
and sequence length (read from the preset in host/presets/), same synthetic data shapes. The
optimizer is `torch.optim.AdamW(fused=True)` (fused on CUDA only) with the preset's adamw
entry. f32 throughout, TF32 off for matmuls and cuDNN. A step: the minibatch copied from host
memory to the device, the forward pass with the cross-entropy loss and (for a classification)
the count of correct predictions, the backward pass, the optimizer step; phases timed by CUDA
events on the GPU, by the wall clock on the CPU; on the GPU also each phase's time on the host
(from its first call to its return). The output and the JSON keys are bench-train's.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRESETS = {
    "cifar10-vgg16": "cifar10_vgg16",
    "tinyimagenet-resnet34": "tinyimagenet_resnet34",
    "wikitext2-transformer": "wikitext2_transformer",
    "wikitext103-transformer": "wikitext103_transformer",
}
# The vocabularies of bench-train's synthetic corpora (host/src/train/bench.rs).
VOCAB = {"wikitext2-transformer": 33_278, "wikitext103-transformer": 267_735}
SMALL_VOCAB = 2_000
VGG16 = [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0]


def scaled(c, width):
    return max(1, round(c * width))


class Vgg(nn.Module):
    def __init__(self, variant, width, classes=10):
        super().__init__()
        layers, inp = [], 3
        for c in VGG16:
            if c == 0:
                layers.append(nn.MaxPool2d(2))
                continue
            out = scaled(c, width)
            conv = nn.Conv2d(inp, out, 3, padding=1)
            if variant == "plain":
                nn.init.normal_(conv.weight, 0.0, math.sqrt(2.0 / (9 * out)))
                nn.init.zeros_(conv.bias)
                layers += [conv, nn.ReLU(inplace=True)]
            else:
                layers += [conv, nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            inp = out
        self.features = nn.Sequential(*layers)
        if variant == "plain":
            hidden = scaled(512, width)
            self.classifier = nn.Sequential(
                nn.Dropout(0.5), nn.Linear(inp, hidden), nn.ReLU(inplace=True),
                nn.Dropout(0.5), nn.Linear(hidden, hidden), nn.ReLU(inplace=True),
                nn.Linear(hidden, classes))
        else:
            self.classifier = nn.Linear(inp, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def kaiming_conv(inp, out, kernel, stride):
    conv = nn.Conv2d(inp, out, kernel, stride=stride, padding=kernel // 2, bias=False)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return conv


class BasicBlock(nn.Module):
    def __init__(self, inp, out, stride):
        super().__init__()
        self.conv1, self.bn1 = kaiming_conv(inp, out, 3, stride), nn.BatchNorm2d(out)
        self.conv2, self.bn2 = kaiming_conv(out, out, 3, 1), nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inp != out:
            self.downsample = nn.Sequential(kaiming_conv(inp, out, 1, stride), nn.BatchNorm2d(out))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (x if self.downsample is None else self.downsample(x)))


class ResNet34(nn.Module):
    def __init__(self, width, classes=200):
        super().__init__()
        stem = scaled(64, width)
        self.conv1, self.bn1 = kaiming_conv(3, stem, 7, 2), nn.BatchNorm2d(stem)
        blocks, inp = [], stem
        for stage, (depth, c) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512])):
            out = scaled(c, width)
            for b in range(depth):
                blocks.append(BasicBlock(inp, out, 2 if stage > 0 and b == 0 else 1))
                inp = out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(inp, classes)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        return self.fc(self.blocks(h).mean((2, 3)))


class TransformerLm(nn.Module):
    def __init__(self, vocab, d_model, heads, layers, d_ff, dropout):
        super().__init__()
        self.d_model = d_model
        self.encoder = nn.Embedding(vocab, d_model)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        layer = nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout, batch_first=True)
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(d_model, vocab)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        self.pe = {}

    def positional_encoding(self, t, device):
        if (t, device) not in self.pe:
            pos = torch.arange(t, dtype=torch.float64).unsqueeze(1)
            i = torch.arange(0, self.d_model, 2, dtype=torch.float64)
            angle = pos / torch.pow(10000.0, i / self.d_model)
            pe = torch.zeros(t, self.d_model, dtype=torch.float64)
            pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
            mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
            self.pe[(t, device)] = (pe.float().to(device), mask.to(device))
        return self.pe[(t, device)]

    def forward(self, x):
        pe, mask = self.positional_encoding(x.shape[1], x.device)
        h = self.drop(self.encoder(x) * math.sqrt(self.d_model) + pe)
        return self.decoder(self.layers(h, mask=mask, is_causal=True))


def transformer_config(experiment, small):
    if small:
        return dict(vocab=SMALL_VOCAB, d_model=64, heads=4, layers=2, d_ff=128, dropout=0.1)
    if experiment == "wikitext2-transformer":
        return dict(vocab=VOCAB[experiment], d_model=768, heads=8, layers=8, d_ff=1024, dropout=0.1)
    return dict(vocab=VOCAB[experiment], d_model=768, heads=8, layers=24, d_ff=2048, dropout=0.15)


def build(experiment, preset, small, batch, batches, generator):
    """The network and `batches` synthetic minibatches in host memory (pinned on CUDA)."""
    width = 1 / 16 if small else 1.0
    protocol = preset["protocol"]
    if experiment in VOCAB:
        c = transformer_config(experiment, small)
        bptt = protocol["sequence_length"]["value"]
        ids = torch.randint(c["vocab"], (batches, batch, bptt + 1), generator=generator)
        data = [(b[:, :-1].contiguous(), b[:, 1:].contiguous()) for b in ids]
        return TransformerLm(**c), data, "tokens"
    if experiment == "cifar10-vgg16":
        model, shape, classes = Vgg(protocol["vgg"]["value"], width), (3, 32, 32), 10
    else:
        model, shape, classes = ResNet34(width), (3, 64, 64), 200
    data = [(torch.randn((batch,) + shape, generator=generator),
             torch.randint(classes, (batch,), generator=generator)) for _ in range(batches)]
    return model, data, "images"


class Clock:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def seconds(self, a, b):
        if not self.cuda:
            return b - a
        b.synchronize()
        return a.elapsed_time(b) / 1e3


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--experiment", required=True, choices=sorted(PRESETS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--small", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0 or (a.batch_size is not None and a.batch_size < 1):
        p.error("--steps and --batch-size must be positive, --warmup not negative")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device(a.device)
    with open(os.path.join(ROOT, "host", "presets", PRESETS[a.experiment] + ".json")) as f:
        preset = json.load(f)
    batch = a.batch_size or preset["batch_size"]
    torch.manual_seed(a.seed)
    generator = torch.Generator().manual_seed(a.seed)
    model, data, unit = build(a.experiment, preset, a.small, batch, a.warmup + a.steps, generator)
    model = model.to(device).train()
    if device.type == "cuda":
        data = [(x.pin_memory(), y.pin_memory()) for x, y in data]
    h = preset["optimizers"]["adamw"]
    opt = torch.optim.AdamW(model.parameters(), lr=h["lr"], betas=tuple(h["betas"]), eps=h["eps"],
                            weight_decay=h["weight_decay"], fused=device.type == "cuda")
    clock = Clock(device)
    phases = dict(data=0.0, forward=0.0, backward=0.0, optimizer=0.0)
    host = dict(phases)
    start = time.perf_counter()
    for i, (x, y) in enumerate(data):
        if i == a.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        h0, t0 = time.perf_counter(), clock.mark()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        h1, t1 = time.perf_counter(), clock.mark()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        # bench-train counts a classification's correct predictions as training does; the
        # count stays on the device, unread.
        correct = (logits.argmax(-1) == y).sum() if unit == "images" else None
        h2, t2 = time.perf_counter(), clock.mark()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        h3, t3 = time.perf_counter(), clock.mark()
        opt.step()
        h4, t4 = time.perf_counter(), clock.mark()
        if i >= a.warmup:
            for k, (u, v), (hu, hv) in zip(phases, [(t0, t1), (t1, t2), (t2, t3), (t3, t4)],
                                           [(h0, h1), (h1, h2), (h2, h3), (h3, h4)]):
                phases[k] += clock.seconds(u, v)
                host[k] += hv - hu
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    units = y.numel()
    result = dict(
        implementation="pytorch " + torch.__version__, experiment=a.experiment,
        device=str(device), optimizer="adamw", batch_size=batch, unit=unit, units_per_step=units,
        parameters=sum(q.numel() for q in model.parameters()), steps=a.steps, seconds=seconds,
        throughput=units * a.steps / seconds, phases=phases, host_phases=host,
        threads=torch.get_num_threads())
    total = max(sum(phases.values()), 1e-300)
    print(f"{a.experiment} on {device} (PyTorch {torch.__version__}, {result['threads']} threads), "
          f"{batch} per step, "
          f"{result['parameters']} parameters, adamw: {result['throughput']:.0f} {unit}/s "
          f"({1e3 * seconds / a.steps:.2f} ms/step)")
    print("per step: " + ", ".join(f"{k} {1e3 * v / a.steps:.1f} ms ({100 * v / total:.0f} %)"
                                   for k, v in phases.items()))
    if device.type == "cuda":
        print("on the host per step: " + ", ".join(f"{k} {1e3 * v / a.steps:.2f} ms" for k, v in host.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
