"""HomeAdam(W), Adam(W)-srf and the paper's baselines as ``torch.optim`` optimizers.

Every step runs the Rust core's fast path in place on the tensors' own memory: one call per
step for every parameter of every group, so that the global HomeAdam decision (Alg. 2) is taken
over the whole model, with the same bits as the Rust crates (``homeadam-core``,
``homeadam-candle``, the MCU firmware). CPU tensors of dtype float32, bfloat16 or float16.

A hyper-parameter left at ``None`` takes the core's default, which each class's docstring
states (read from the core when this module is imported).
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar, Dict, Optional, Tuple

from ._optimizer import OPTIONS_DOC, Betas, Options, Params, _CoreOptimizer, _core_defaults

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack

__all__ = [
    "AdaBelief",
    "Adam",
    "AdamSrf",
    "AdamW",
    "AdamWSrf",
    "HomeAdam",
    "HomeAdamW",
    "Lion",
    "MIAdam",
    "Options",
    "SGD",
    "SWATS",
]

# What each argument is, by its Python name.
_ARGS = {
    "params": "the parameters, or param-group dicts (each may set lr, betas, eps, weight_decay)",
    "lr": "η, the learning rate",
    "betas": "(β1, β2), the moments' decay rates",
    "eps": "ε (the srf and HomeAdam rules: a step is at most η / (2√ε))",
    "weight_decay": "λ",
    "tau": "τ: the home (SGDM) branch where v̂ < τ",
    "switch": '``"global"`` (ρ over the model, Alg. 2), ``"layer"`` (each tensor) or ``"element"`` '
    "(each element, Alg. 3); default \"global\"",
    "rho_over": '``"all"`` (the paper) or ``"active"`` (elements with v > 0): what ρ is the minimum over',
    "home_lr_scale": "η_h / η, the home branch's rate relative to η",
    "tau_calibration": "``(share, every)``: τ set every ``every`` steps so that about ``share`` of the "
    "decisions go home; None: τ as given",
    "momentum": "μ",
    "dampening": "the momentum's dampening",
    "nesterov": "Nesterov momentum",
    "weight_decouple": "decoupled weight decay",
    "fixed_decay": "with ``weight_decouple``: θ ← θ(1 − λ) in place of θ(1 − ηλ)",
    "rectify": "RAdam's rectification",
    "amsgrad": "AMSGrad's running max",
    "kappa": "κ, the multiple-integration rate",
    "switch_step": "the last step of the integrated update",
}

_MOMENTS = "m_t = β1 m + (1 − β1) g, v_t = β2 v + (1 − β2) g², m̂ = m_t / (1 − β1ᵗ), v̂ = v_t / (1 − β2ᵗ)"


def _doc(formula: str, rule: str, args: Tuple[str, ...]) -> str:
    """A class's docstring: its update, each argument with the core's default, the options."""
    defaults = _core_defaults(rule)
    lines = []
    for name in ("params",) + args:
        default = f" (default {defaults[name]!r})" if name in defaults else ""
        lines.append(f"        {name}: {_ARGS[name]}{default}.")
    return f"{formula}\n\n    Args:\n" + "\n".join(lines) + "\n" + OPTIONS_DOC


class _AdamFamily(_CoreOptimizer):
    """An Adam-like rule: lr, betas, eps and (with ``_DECAY``) weight_decay."""

    _RULE: ClassVar[str]
    _DECAY: ClassVar[bool]

    def __init__(
        self,
        params: Params,
        lr: Optional[float] = None,
        betas: Optional[Betas] = None,
        eps: Optional[float] = None,
        weight_decay: Optional[float] = None,
        **options: Unpack[Options],
    ) -> None:
        settings: Dict[str, Any] = dict(lr=lr, betas=betas, eps=eps)
        if self._DECAY:
            settings["weight_decay"] = weight_decay
        elif weight_decay:
            raise ValueError(f"weight_decay: {type(self).__name__} has no weight decay (λ = 0); use its W variant")
        super().__init__(params, self._RULE, settings, options)


class AdamW(_AdamFamily):
    _RULE, _DECAY = "adamw", True
    __doc__ = _doc(
        f"AdamW, as ``torch.optim.AdamW``. {_MOMENTS}; θ ← θ (1 − ηλ) − η m̂ / (√v̂ + ε).",
        "adamw",
        ("lr", "betas", "eps", "weight_decay"),
    )


class Adam(_AdamFamily):
    _RULE, _DECAY = "adam", True
    __doc__ = _doc(
        f"Adam, as ``torch.optim.Adam`` (λ coupled: g ← g + λθ). {_MOMENTS}; θ ← θ − η m̂ / (√v̂ + ε).",
        "adam",
        ("lr", "betas", "eps", "weight_decay"),
    )


class AdamWSrf(_AdamFamily):
    _RULE, _DECAY = "adamw-srf", True
    __doc__ = _doc(
        f"AdamW-srf (Alg. 1 of *HomeAdam*, square-root-free). {_MOMENTS}; θ ← θ (1 − ηλ) − η m̂ / (v̂ + ε).",
        "adamw-srf",
        ("lr", "betas", "eps", "weight_decay"),
    )


class AdamSrf(_AdamFamily):
    _RULE, _DECAY = "adam-srf", False
    __doc__ = _doc(
        f"Adam-srf (Alg. 1 of *HomeAdam*, λ = 0). {_MOMENTS}; θ ← θ − η m̂ / (v̂ + ε).",
        "adam-srf",
        ("lr", "betas", "eps"),
    )


_SWITCHES = {"global": "", "layer": "-layer", "element": "-ew"}


class _HomeFamily(_CoreOptimizer):
    """HomeAdam(W): the Adam family's arguments and the switch's."""

    _DECOUPLED: ClassVar[bool]

    def __init__(
        self,
        params: Params,
        lr: Optional[float] = None,
        betas: Optional[Betas] = None,
        eps: Optional[float] = None,
        weight_decay: Optional[float] = None,
        *,
        tau: Optional[float] = None,
        switch: str = "global",
        rho_over: Optional[str] = None,
        home_lr_scale: Optional[float] = None,
        tau_calibration: Optional[Tuple[float, int]] = None,
        **options: Unpack[Options],
    ) -> None:
        if switch not in _SWITCHES:
            raise ValueError(f"switch={switch!r}: expected 'global', 'layer' or 'element'")
        rule = ("homeadamw" if self._DECOUPLED else "homeadam") + _SWITCHES[switch]
        settings: Dict[str, Any] = dict(lr=lr, betas=betas, eps=eps, tau=tau)
        settings.update(home_lr_scale=home_lr_scale, tau_calibration=tau_calibration)
        if self._DECOUPLED:
            settings["weight_decay"] = weight_decay
        elif weight_decay:
            raise ValueError("weight_decay: HomeAdam has no weight decay (λ = 0, Alg. 2); use HomeAdamW")
        if switch != "element":
            settings["rho_over"] = rho_over
        elif rho_over is not None:
            raise ValueError("rho_over: the element-wise rule decides on each element's v̂, not on ρ")
        super().__init__(params, rule, settings, options)


_HOME = f"""{_MOMENTS};
    θ ← θ (1 − ηλ) − η m̂ / (v̂ + ε) where ρ ≥ τ (the srf branch), θ ← θ (1 − ηλ) − η_h m̂ where
    ρ < τ (home), with ρ = min v̂ over the model, a tensor or one element (``switch``)."""
_HOME_ARGS = ("tau", "switch", "rho_over", "home_lr_scale", "tau_calibration")


class HomeAdamW(_HomeFamily):
    _DECOUPLED = True
    __doc__ = _doc(
        f"HomeAdamW (Alg. 2 and 3 of Huang, Zhang and Chen, *HomeAdam*, arXiv:2603.02649). {_HOME}",
        "homeadamw",
        ("lr", "betas", "eps", "weight_decay") + _HOME_ARGS,
    )


class HomeAdam(_HomeFamily):
    _DECOUPLED = False
    __doc__ = _doc(
        f"HomeAdam (Alg. 2 and 3 of *HomeAdam*, λ = 0). {_HOME}",
        "homeadam",
        ("lr", "betas", "eps") + _HOME_ARGS,
    )


class SGD(_CoreOptimizer):
    __doc__ = _doc(
        """SGD with momentum, as ``torch.optim.SGD``: g ← g + λθ, b ← μ b + (1 − dampening) g
    (b = g at the first step), θ ← θ − η b (Nesterov: θ ← θ − η (g + μ b)).""",
        "sgd",
        ("lr", "momentum", "dampening", "weight_decay", "nesterov"),
    )

    def __init__(
        self,
        params: Params,
        lr: Optional[float] = None,
        momentum: Optional[float] = None,
        dampening: Optional[float] = None,
        weight_decay: Optional[float] = None,
        nesterov: Optional[bool] = None,
        **options: Unpack[Options],
    ) -> None:
        settings = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(params, "sgd", settings, options)


class AdaBelief(_CoreOptimizer):
    __doc__ = _doc(
        """AdaBelief, as ``adabelief-pytorch`` 0.2.1: s_t = β2 s + (1 − β2)(g − m_t)² + ε in place
    of v.""",
        "adabelief",
        ("lr", "betas", "eps", "weight_decay", "weight_decouple", "fixed_decay", "rectify", "amsgrad"),
    )

    def __init__(
        self,
        params: Params,
        lr: Optional[float] = None,
        betas: Optional[Betas] = None,
        eps: Optional[float] = None,
        weight_decay: Optional[float] = None,
        *,
        weight_decouple: Optional[bool] = None,
        fixed_decay: Optional[bool] = None,
        rectify: Optional[bool] = None,
        amsgrad: Optional[bool] = None,
        **options: Unpack[Options],
    ) -> None:
        settings: Dict[str, Any] = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        settings.update(weight_decouple=weight_decouple, rectify=rectify, amsgrad=amsgrad)
        if weight_decouple is not False:
            settings["fixed_decay"] = fixed_decay
        elif fixed_decay:
            raise ValueError("fixed_decay: applies with weight_decouple only")
        super().__init__(params, "adabelief", settings, options)


class SWATS(_CoreOptimizer):
    __doc__ = _doc(
        """SWATS, as ``pytorch-optimizer`` 4.1.0: Adam until the projected SGD rate settles, then
    SGD with momentum at that rate. Refuses a ``process_group``.""",
        "swats",
        ("lr", "betas", "eps", "weight_decay", "nesterov", "weight_decouple"),
    )

    def __init__(
        self,
        params: Params,
        lr: Optional[float] = None,
        betas: Optional[Betas] = None,
        eps: Optional[float] = None,
        weight_decay: Optional[float] = None,
        *,
        nesterov: Optional[bool] = None,
        weight_decouple: Optional[bool] = None,
        **options: Unpack[Options],
    ) -> None:
        settings: Dict[str, Any] = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        settings.update(nesterov=nesterov, weight_decouple=weight_decouple)
        super().__init__(params, "swats", settings, options)


class MIAdam(_CoreOptimizer):
    __doc__ = _doc(
        """MIAdam, as the official ``MIAdam1``: Adam whose steps t ≤ ``switch_step`` follow the
    multiple-integration update with rate κ.""",
        "miadam",
        ("lr", "betas", "eps", "weight_decay", "kappa", "switch_step"),
    )

    def __init__(
        self,
        params: Params,
        lr: Optional[float] = None,
        betas: Optional[Betas] = None,
        eps: Optional[float] = None,
        weight_decay: Optional[float] = None,
        *,
        kappa: Optional[float] = None,
        switch_step: Optional[int] = None,
        **options: Unpack[Options],
    ) -> None:
        settings: Dict[str, Any] = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        settings.update(kappa=kappa, switch_step=switch_step)
        super().__init__(params, "miadam", settings, options)


class Lion(_CoreOptimizer):
    __doc__ = _doc(
        """Lion (Chen et al. 2023), as ``lion-pytorch`` 0.2.5:
    θ ← θ (1 − ηλ) − η sign(β1 m + (1 − β1) g), then m ← β2 m + (1 − β2) g.""",
        "lion",
        ("lr", "betas", "weight_decay"),
    )

    def __init__(
        self,
        params: Params,
        lr: Optional[float] = None,
        betas: Optional[Betas] = None,
        weight_decay: Optional[float] = None,
        **options: Unpack[Options],
    ) -> None:
        super().__init__(params, "lion", dict(lr=lr, betas=betas, weight_decay=weight_decay), options)
