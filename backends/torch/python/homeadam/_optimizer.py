"""The ``torch.optim.Optimizer`` every rule of ``homeadam.torch`` is: the options they share,
the checks of the tensors handed to the core, param groups, state, the step."""

from __future__ import annotations

import functools
import math
import numbers
import os
import sys
from itertools import chain
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

if sys.version_info >= (3, 11):
    from typing import TypedDict, Unpack
else:
    from typing_extensions import TypedDict, Unpack

import torch
from torch.optim import Optimizer

from . import _native


# The core's dtype names (`homeadam_core::Dtype`) of PyTorch's dtypes, and the buffer dtype of
# each state dtype (q8 blocks are bytes).
_PARAM_DTYPES: Dict[torch.dtype, str] = {
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
}
_STATE_DTYPES: Dict[str, torch.dtype] = {name: dtype for dtype, name in _PARAM_DTYPES.items()}
_STATE_DTYPES["q8"] = torch.uint8

# The devices whose tensors this build steps: CUDA with homeadam-cuda's kernels where the
# native module was built with them.
_CUDA = bool(_native.CUDA_BUILT)
_DEVICES = ("cpu", "cuda") if _CUDA else ("cpu",)

StateDtype = Union[torch.dtype, str]
Params = Union[Iterable[torch.Tensor], Iterable[Dict[str, Any]]]
Closure = Optional[Callable[[], Any]]
Betas = Tuple[float, float]


class Options(TypedDict, total=False):
    """The keyword-only options every optimizer of ``homeadam.torch`` takes (``OPTIONS`` holds
    their defaults)."""

    state_dtype: StateDtype
    rounding: str
    seed: int
    finite_check: str
    allow_f16_state: bool
    threads: int
    max_grad_norm: Optional[float]
    process_group: Optional[Any]


OPTIONS: Options = {
    "state_dtype": torch.float32,
    "rounding": "nearest",
    "seed": 0,
    "finite_check": "skip_step",
    "allow_f16_state": False,
    "threads": 1,
    "max_grad_norm": None,
    "process_group": None,
}

OPTIONS_DOC = """
    Keyword-only, for every optimizer of ``homeadam.torch`` (``Options``):
        state_dtype: the state's storage: ``torch.float32`` (default), ``torch.bfloat16``,
            ``torch.float16`` (first moments only unless ``allow_f16_state``) or ``"q8"``
            (8-bit blocks of 256 with a scale: 2.03 bytes per parameter for two moments).
        rounding: ``"nearest"`` (default) or ``"stochastic"`` for bfloat16 / float16 parameters.
        seed: the seed of stochastic rounding (0).
        finite_check: ``"skip_step"`` (default): a non-finite gradient anywhere skips the step;
            ``"trust"``: the gradients are not checked first (one read less).
        allow_f16_state: allow float16 for a second moment (False).
        threads: threads per step, the same bits for any count (1).
        max_grad_norm: clip to this exact ‖g‖₂ through the step's gradient scale (None: no
            clipping).
        process_group: a ``torch.distributed`` group over which the model's parameters are
            sharded: the skip, the norm and the global decision are the whole model's (None).

    ``state[p]`` holds ``"state"``, the buffer the core steps, and each of its slots as a view
    (``"m"``, ``"v"``…; for ``"q8"``, ``"m_codes"`` and ``"m_scales"``…). ``last_report`` is the
    core's report of the last step (``rho``, ``home_elements``, ``skipped``, ``grad_norm``…).
"""

# The keys a param group may set for itself (the core's `Group`); every other hyper-parameter
# is the optimizer's, one value for every group.
_GROUP_KEYS = ("lr", "betas", "eps", "weight_decay")


def _core_defaults(rule: str) -> Dict[str, Any]:
    """The hyper-parameters ``rule`` reads, with the core's defaults, under their Python names
    (a real knob's text always has a point or an exponent, a count's none)."""
    out: Dict[str, Any] = {}
    for name, text in _native.defaults(rule):
        value: Any
        if text in ("true", "false"):
            value = text == "true"
        else:
            try:
                value = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    value = text
        out[name] = value
    if "beta1" in out:
        out["betas"] = (float(out.pop("beta1")), float(out.pop("beta2")))
    elif "beta2" in out:
        out.pop("beta2")
    share, every = out.pop("tau.home_share", None), out.pop("tau.every", None)
    if share is not None:
        out["tau_calibration"] = None if (share, every) == (0.0, 0) else (share, every)
    return out


def _knob_text(value: Any) -> str:
    """``value`` as ``Knob``'s text: a flag, a whole number, a real (any number, NumPy's and 0-d
    tensors included, as its shortest round-trip text) or a name."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if not isinstance(value, str) and hasattr(value, "__float__"):
        return repr(float(value))
    return str(value)


def _core_knobs(settings: Dict[str, Any]) -> List[Tuple[str, str]]:
    """``settings`` (Python names) as the core's ``(knob, text)`` pairs."""
    knobs: List[Tuple[str, str]] = []
    for key, value in settings.items():
        if key == "betas":
            beta1, beta2 = value
            knobs += [("beta1", _knob_text(beta1)), ("beta2", _knob_text(beta2))]
        elif key == "tau_calibration":
            share, every = value if value is not None else (0.0, 0)
            knobs += [("tau.home_share", _knob_text(share)), ("tau.every", _knob_text(int(every)))]
        else:
            knobs.append((key, _knob_text(value)))
    return knobs


@functools.lru_cache(maxsize=None)
def _nvrtc_library() -> str:
    """The NVRTC of PyTorch's CUDA version that PyTorch's wheels installed (``nvidia/cu13/lib``,
    ``nvidia/cuda_nvrtc/lib``…), else its soname for the loader's search (a CUDA toolkit on
    ``LD_LIBRARY_PATH`` or in the loader's cache)."""
    name = f"libnvrtc.so.{(torch.version.cuda or '12').split('.')[0]}"
    try:
        import nvidia
    except ImportError:
        return name
    for root in nvidia.__path__:
        for package in sorted(os.listdir(root)):
            path = os.path.join(root, package, "lib", name)
            if os.path.isfile(path):
                return path
    return name


def _collective_device(group: Any) -> torch.device:
    """Where a collective's tensors must be for ``group``: NCCL's on the current CUDA device."""
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _state_dtype_name(state_dtype: StateDtype) -> str:
    if isinstance(state_dtype, str) and state_dtype in _STATE_DTYPES:
        return state_dtype
    if isinstance(state_dtype, torch.dtype) and state_dtype in _PARAM_DTYPES:
        return _PARAM_DTYPES[state_dtype]
    raise ValueError(
        f"state_dtype={state_dtype!r}: expected torch.float32, torch.bfloat16, torch.float16 or 'q8'"
    )


class _CoreOptimizer(Optimizer):
    """A ``torch.optim.Optimizer`` whose step is the core's: see the subclasses."""

    _step_supports_amp_scaling = True

    def __init__(self, params: Params, rule: str, settings: Dict[str, Any], options: Options) -> None:
        """``settings``: the rule's hyper-parameters under their Python names, None for the
        core's default; ``options``: any of :class:`Options`."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"{type(self).__name__} got an unexpected keyword argument {unknown[0]!r}")
        o: Options = {**OPTIONS, **options}
        state_dtype, threads = o["state_dtype"], o["threads"]
        max_grad_norm, process_group = o["max_grad_norm"], o["process_group"]
        core_defaults = _core_defaults(rule)
        settings = {k: core_defaults[k] if v is None and k in core_defaults else v for k, v in settings.items()}
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads={threads!r}: expected an int >= 1")
        if max_grad_norm is not None and not (math.isfinite(max_grad_norm) and max_grad_norm > 0):
            raise ValueError(f"max_grad_norm={max_grad_norm!r}: expected a finite float > 0, or None")
        if process_group is not None and rule == "swats":
            raise ValueError(
                "process_group: SWATS cannot step a sharded model (its switch test reads every tensor's "
                "dot products in the model's order)"
            )
        self.max_grad_norm = max_grad_norm
        self.process_group = process_group
        self._rule = rule
        self._state_dtype = _state_dtype_name(state_dtype)
        self._finite_check = o["finite_check"]
        self._allow_f16_state = o["allow_f16_state"]
        self.threads = threads
        defaults = dict(settings, rounding=o["rounding"], seed=o["seed"])
        self._settings = list(defaults)
        self._native = self._make_core(defaults)
        self._group_keys = [k for k in _GROUP_KEYS if k in defaults]
        self.last_report: Optional[Dict[str, Any]] = None
        # The stream of the last CUDA step, held while the native module's model launches on it.
        self._cuda_stream: Optional[Any] = None
        super().__init__(params, defaults)

    def _make_core(self, settings: Dict[str, Any]) -> _native.Core:
        return _native.Core(
            self._rule, _core_knobs(settings), self._finite_check, self._state_dtype, self._allow_f16_state
        )

    # -- groups -------------------------------------------------------------------------------

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        super().add_param_group(param_group)
        try:
            self._check_group(self.param_groups[-1])
        except ValueError:
            self.param_groups.pop()
            raise

    def _check_group(self, group: Dict[str, Any]) -> None:
        """Refuses a group the core cannot step, naming the hyper-parameter."""
        unknown = sorted(set(group) - set(self.defaults) - {"params"})
        if unknown:
            raise ValueError(f"{type(self).__name__} has no hyper-parameter {unknown[0]!r}")
        self._check_hyper(group)
        self._native.check_group(self._group_args(group, group["lr"]))
        devices = {p.device for p in group["params"]}
        for p in group["params"]:
            self._check_param(p)
        if len(devices) > 1:
            raise ValueError(f"a param group holds tensors on {sorted(map(str, devices))}: expected one device")

    def _check_hyper(self, group: Dict[str, Any]) -> None:
        """The optimizer's hyper-parameters unchanged in ``group``, its lr a float >= 0: what a
        step checks again, as schedulers and users write into groups."""
        for key in self._settings:
            value = self.defaults[key]
            if key not in self._group_keys and group[key] != value:
                raise ValueError(
                    f"{key}={group[key]!r} in a param group, {value!r} in the optimizer: {key} is "
                    f"the optimizer's, one value for every group"
                )
        lr = group["lr"]
        if isinstance(lr, torch.Tensor) or not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0):
            raise ValueError(f"lr={lr!r}: expected a finite float >= 0")

    def _group_args(self, group: Dict[str, Any], base_lr: float) -> Tuple[Any, ...]:
        """The core's group of ``group`` at η = ``base_lr``, which is at least the group's lr (so
        0 only where the group's is too)."""
        lr = float(group["lr"])
        lr_scale = 1.0 if lr == base_lr else lr / base_lr
        decay, weight_decay = True, None
        if "weight_decay" in self._group_keys:
            wd = float(group["weight_decay"])
            decay = wd != 0.0 or self.defaults["weight_decay"] == 0.0
            weight_decay = None if wd == self.defaults["weight_decay"] or wd == 0.0 else wd
        eps = None
        if "eps" in self._group_keys and float(group["eps"]) != self.defaults["eps"]:
            eps = float(group["eps"])
        beta1 = beta2 = None
        if "betas" in self._group_keys:
            (b1, b2), (d1, d2) = group["betas"], self.defaults["betas"]
            beta1 = None if float(b1) == d1 else float(b1)
            beta2 = None if float(b2) == d2 else float(b2)
        return (lr_scale, decay, weight_decay, eps, beta1, beta2)

    @staticmethod
    def _check_param(p: torch.Tensor) -> None:
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"a parameter of type {type(p).__name__}: expected a torch.Tensor")
        if p.dtype not in _PARAM_DTYPES:
            raise ValueError(f"a parameter of dtype {p.dtype}: expected float32, bfloat16 or float16")
        if p.layout != torch.strided:
            raise ValueError(f"a parameter of layout {p.layout}: expected a dense (strided) tensor")
        if p.device.type not in _DEVICES:
            raise ValueError(
                f"a parameter on {p.device}: this build of homeadam.torch steps "
                f"{' and '.join(d.upper() for d in _DEVICES)} tensors"
            )
        if not p.is_contiguous():
            raise ValueError("a non-contiguous parameter: make it contiguous (param.data = param.data.contiguous())")

    # -- state --------------------------------------------------------------------------------

    def _new_buffer(self, p: torch.Tensor) -> torch.Tensor:
        dtype = _STATE_DTYPES[self._state_dtype]
        return torch.zeros(self._native.state_bytes(p.numel()) // dtype.itemsize, dtype=dtype, device=p.device)

    def _state_of(self, p: torch.Tensor, buffer: Optional[torch.Tensor] = None, swats_lambda: float = 0.0) -> Dict[str, Any]:
        """``self.state[p]``: the state buffer the core steps, its slots as views, SWATS's Λ."""
        state: Dict[str, Any] = self.state[p]
        if buffer is None and "state" in state:
            return state
        buffer = self._new_buffer(p) if buffer is None else buffer
        state.clear()
        state["state"] = buffer
        names = self._native.state_names()
        if self._state_dtype == "q8":
            # A block is its f32 scale, then its codes (`homeadam_core::Q8Block`).
            blocks = buffer.view(len(names), -1, _native.Q8_BLOCK_BYTES) if names else buffer
            scale = torch.float32.itemsize
            for k, name in enumerate(names):
                state[f"{name}_scales"] = blocks[k, :, :scale].view(torch.float32).squeeze(-1)
                state[f"{name}_codes"] = blocks[k, :, scale:]
        else:
            n = p.numel()
            for k, name in enumerate(names):
                state[name] = buffer[k * n : (k + 1) * n].view_as(p)
        if self._rule == "swats":
            state["swats_lambda"] = swats_lambda
        return state

    def state_dict(self) -> Dict[str, Any]:
        """``torch.optim.Optimizer.state_dict()`` with each parameter's ``"state"`` buffer (and
        SWATS's Λ) but not its views, plus ``"homeadam"``: the step counter and the
        optimizer-wide state, as the core's checkpoint of no tensors (a ``uint8`` tensor)."""
        out = super().state_dict()
        kept = ("state", "swats_lambda")
        out["state"] = {k: {key: v[key] for key in kept if key in v} for k, v in out["state"].items()}
        out["homeadam"] = torch.frombuffer(bytearray(self._native.save_header()), dtype=torch.uint8)
        return out

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads what :meth:`state_dict` returned (hyper-parameters included, as torch's
        optimizers do); the state keeps its saved dtype, which must be this optimizer's."""
        header = state_dict.get("homeadam")
        if not isinstance(header, torch.Tensor):
            raise ValueError("not a state_dict of homeadam.torch: it has no 'homeadam' entry")
        saved_state = state_dict["state"]
        saved_ids = list(chain.from_iterable(g["params"] for g in state_dict["param_groups"]))
        buffer_dtype = _STATE_DTYPES[self._state_dtype]
        for saved in saved_state.values():
            buffer = saved.get("state")
            if not isinstance(buffer, torch.Tensor) or buffer.dtype != buffer_dtype:
                found = buffer.dtype if isinstance(buffer, torch.Tensor) else None
                raise ValueError(
                    f"the saved state is of dtype {found}; this optimizer keeps {self._state_dtype} "
                    f"(state_dtype={self._state_dtype!r})"
                )
        params = list(chain.from_iterable(g["params"] for g in self.param_groups))
        buffers = {}
        for saved_id, p in zip(saved_ids, params):
            saved = saved_state.get(saved_id)
            if saved is not None:
                # On the parameter's device, as torch.optim moves state on loading.
                buffer = saved["state"].detach().to(p.device, copy=True).contiguous()
                if buffer.nbytes != self._native.state_bytes(p.numel()):
                    raise ValueError(f"the saved state of a parameter of {p.numel()} elements has the wrong size")
                buffers[p] = (buffer, float(saved.get("swats_lambda", 0.0)))
        saved_groups = state_dict["param_groups"]
        missing = [k for k in self._settings if saved_groups and k not in saved_groups[0]]
        if missing:
            raise ValueError(f"the state dict was saved by another optimizer: its groups have no {missing[0]!r}")
        # The optimizer-wide hyper-parameters come with the state, as a group's do in torch.
        wide = {k: saved_groups[0][k] for k in self._settings if k not in self._group_keys and saved_groups}
        native = self._make_core(dict({k: self.defaults[k] for k in self._settings}, **wide))
        native.load_header(bytes(header.tolist()))
        old = (self.param_groups, dict(self.defaults), self._native, self.state)
        super().load_state_dict(state_dict)
        self.defaults.update(wide)
        self._native = native
        try:
            for group in self.param_groups:
                self._check_group(group)
        except ValueError:
            self.param_groups, self.defaults, self._native, self.state = old
            raise
        self.state.clear()
        for p, (buffer, swats_lambda) in buffers.items():
            self._state_of(p, buffer, swats_lambda)

    # -- export to the Rust crates --------------------------------------------------------------

    def _params_in_order(self) -> List[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def _host_state(self) -> Tuple[List[Dict[str, Any]], List[torch.Tensor], List[Tuple[int, int, int, float]]]:
        """Every parameter's state, its buffer in host memory (a copy for a device's) and the
        core's arguments for those host buffers."""
        params = self._params_in_order()
        states = [self._state_of(p) for p in params]
        host = [state["state"].cpu() for state in states]
        args = [
            (p.numel(), buffer.data_ptr(), buffer.nbytes, float(state.get("swats_lambda", 0.0)))
            for p, state, buffer in zip(params, states, host)
        ]
        return states, host, args

    def export_state(self) -> bytes:
        """The state of every parameter (in param-group order) and the optimizer-wide state, in
        the core's checkpoint format (docs/DESIGN.md): what ``Optimizer::load_state`` of the
        Rust crates and the MCU firmware read, for the same tensors in the same order."""
        return bytes(self._native.export_state(self._host_state()[2]))

    def import_state(self, data: bytes) -> None:
        """Loads a checkpoint in the core's format (from :meth:`export_state`, ``homeadam-candle``
        or the firmware) into every parameter's state, in param-group order. Nothing changes on
        an error."""
        states, host, args = self._host_state()
        lambdas = self._native.import_state(bytes(data), args)
        for state, buffer in zip(states, host):
            if buffer is not state["state"]:
                state["state"].copy_(buffer)
        if self._rule == "swats":
            for p, lam in zip(self._params_in_order(), lambdas):
                self.state[p]["swats_lambda"] = lam

    # -- the step -----------------------------------------------------------------------------

    @property
    def step_count(self) -> int:
        """Steps taken (skipped steps do not count)."""
        return int(self._native.step_count)

    @torch.no_grad()
    def step(self, closure: Closure = None) -> Any:
        """One step over every parameter with a gradient; ``closure`` re-evaluates the loss.

        Under ``torch.amp.GradScaler`` the gradients are unscaled inside the step, and a step
        with a non-finite gradient is skipped (``last_report["skipped"]``). With
        ``max_grad_norm`` the step clips by the exact ‖g‖₂ (``last_report["grad_norm"]``)
        through its gradient scale, without writing the gradients. With ``process_group``, the
        non-finite skip, the norm and the global rule's ρ are taken over every process's
        parameters (two all-reduces and an all-gather per step, one more all-gather with
        clipping).

        CUDA parameters (all on one device, of one dtype) step on
        ``torch.cuda.current_stream()``, one launch per pass over every tensor. The host waits
        for the stream where the step needs a device value: once at the end of every step (the
        status read back: whether it was skipped, ρ, the telemetry; t advances only on a
        step that was not skipped), once more mid-step where a calibrated τ is set, once for
        the norm with ``max_grad_norm``, and under GradScaler once to read the scale (and
        ``found_inf`` with ``finite_check="trust"``)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._check_hyper(group)
        base_lr = max((float(g["lr"]) for g in self.param_groups), default=0.0)
        self._native.set_lr(base_lr)
        groups: List[Tuple[Any, ...]] = []
        tensors: List[Tuple[Any, ...]] = []
        stepped: List[torch.Tensor] = []
        device: Optional[int] = None  # the stepped parameters' `get_device()`: -1 is the CPU
        for index, group in enumerate(self.param_groups):
            groups.append(self._group_args(group, base_lr))
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if p.dtype not in _PARAM_DTYPES or not (p.is_cpu or (_CUDA and p.is_cuda)) or not p.is_contiguous():
                    self._check_param(p)
                where = p.get_device()
                if device is None:
                    device = where
                elif where != device:
                    raise ValueError(
                        f"parameters on {stepped[0].device} and {p.device}: one optimizer steps one device "
                        f"(its decisions read every tensor)"
                    )
                self._check_grad(p, grad)
                state = self._state_of(p)
                buffer = state["state"]
                if buffer.get_device() != where:
                    raise ValueError(
                        f"the state of a parameter on {p.device} is on {buffer.device}: the parameter moved "
                        f"after its first step (load a state dict to move the state with it)"
                    )
                stepped.append(p)
                tensors.append(
                    (
                        p.data_ptr(),
                        grad.data_ptr(),
                        buffer.data_ptr(),
                        p.numel(),
                        buffer.nbytes,
                        _PARAM_DTYPES[p.dtype],
                        index,
                        float(state.get("swats_lambda", 0.0)),
                    )
                )
        on_cuda = device is not None and device >= 0
        grad_scale = getattr(self, "grad_scale", None)
        found_inf = getattr(self, "found_inf", None)
        # Sharded, a skip must be every process's: the core's check of the gradients decides, as
        # it does on CUDA under its own check (found_inf would cost a wait for the stream).
        checked = self.process_group is not None or (on_cuda and self._finite_check == "skip_step")
        if found_inf is not None and not checked and float(found_inf) != 0.0:
            self.last_report = {"step": self.step_count, "skipped": True}
            return loss
        scale = 1.0 if grad_scale is None else float(grad_scale)
        if device is not None and on_cuda:
            report, lambdas = self._cuda_step(torch.device("cuda", device), tensors, groups, scale)
        else:
            grad_norm, scale = self._clip(lambda: self._grad_norm(tensors), scale)
            reduce = self._reduce_check if self.process_group is not None else None
            report, lambdas = self._native.step(tensors, groups, scale, self.threads, reduce)
            if grad_norm is not None:
                report["grad_norm"] = grad_norm
        if self._rule == "swats":
            for p, lam in zip(stepped, lambdas):
                self.state[p]["swats_lambda"] = lam
        self.last_report = report
        return loss

    def _clip(self, norm_of: Callable[[], float], scale: float) -> Tuple[Optional[float], float]:
        """‖g‖₂ (unscaled; None without ``max_grad_norm``) and the step's gradient scale: ``scale``,
        or ‖g‖₂ / c (the scaled norm ``norm_of()``: AMP's scale is inside it) where ‖g‖₂ > c =
        ``max_grad_norm``, which clips without writing g."""
        if self.max_grad_norm is None:
            return None, scale
        norm = norm_of()
        grad_norm = norm / scale
        if math.isfinite(grad_norm) and grad_norm > self.max_grad_norm:
            scale = norm / self.max_grad_norm
        return grad_norm, scale

    def _cuda_step(
        self, device: torch.device, tensors: List[Tuple[Any, ...]], groups: List[Tuple[Any, ...]], scale: float
    ) -> Tuple[Dict[str, Any], List[float]]:
        """The step of CUDA parameters on ``device``: homeadam-cuda's kernels on PyTorch's
        current stream, in the device's primary context."""
        if self.process_group is not None:
            import torch.distributed as dist

            if dist.get_world_size(self.process_group) > 1:
                raise ValueError(
                    "process_group: CUDA parameters sharded across processes are not stepped yet "
                    "(homeadam-cuda takes its decisions on one device); one process is"
                )
        stream = torch.cuda.current_stream(device)
        with torch.cuda.device(device):
            self._native.cuda_bind(tensors, groups, device.index, stream.cuda_stream, _nvrtc_library())
            self._cuda_stream = stream
            grad_norm, scale = self._clip(self._native.cuda_grad_norm, scale)
            report, lambdas = self._native.cuda_step(scale)
        if grad_norm is not None:
            report["grad_norm"] = grad_norm
        return report, lambdas

    def _grad_norm(self, tensors: List[Tuple[Any, ...]]) -> float:
        """‖g‖₂ over the step's gradients (every process's), exact and in any order."""
        words = _native.grad_squares([(t[1], t[3], t[5]) for t in tensors])
        if self.process_group is None:
            return float(_native.norm_of([words]))
        import torch.distributed as dist

        local = torch.tensor(words, dtype=torch.int64, device=_collective_device(self.process_group))
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(self.process_group))]
        dist.all_gather(parts, local, group=self.process_group)
        return float(_native.norm_of([p.tolist() for p in parts]))

    def _reduce_check(
        self, finite: bool, rho: float, rho_active: float, counts: List[int], tensors: int
    ) -> Tuple[Any, ...]:
        """Every process's check of its gradients, combined (and, min, min, sum), and the number
        of tensors on the processes of lower rank: the model's tensors are every rank's, in
        rank order, which keys their random draws (stochastic rounding, q8)."""
        import torch.distributed as dist

        group = self.process_group
        device = _collective_device(group)
        mins = torch.tensor([1.0 if finite else 0.0, rho, rho_active], dtype=torch.float32, device=device)
        dist.all_reduce(mins, op=dist.ReduceOp.MIN, group=group)
        sums = torch.tensor(counts, dtype=torch.int64, device=device)
        dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
        sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size(group))]
        dist.all_gather(sizes, torch.tensor([tensors], dtype=torch.int64, device=device), group=group)
        first = sum(int(s.item()) for s in sizes[: dist.get_rank(group)])
        return bool(mins[0].item() > 0), float(mins[1].item()), float(mins[2].item()), sums.tolist(), first

    @staticmethod
    def _check_grad(p: torch.Tensor, grad: torch.Tensor) -> None:
        if grad.is_sparse or grad.layout != torch.strided:
            raise ValueError("a sparse gradient: homeadam.torch steps dense gradients only")
        if grad.dtype != p.dtype or grad.shape != p.shape:
            raise ValueError(
                f"a gradient of dtype {grad.dtype} and shape {tuple(grad.shape)} for a parameter of "
                f"dtype {p.dtype} and shape {tuple(p.shape)}"
            )
        if grad.device != p.device:
            raise ValueError(f"a gradient on {grad.device} for a parameter on {p.device}")
        if not grad.is_contiguous():
            raise ValueError("a non-contiguous gradient: expected a contiguous one")
