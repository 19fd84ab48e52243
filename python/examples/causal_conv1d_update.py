"""GDN decode's conv as the field runs it, against the contract (seed 003,
core's conv), through `kernel_oracle.check_causal_conv1d_update`:

- `torch_update`: transformers' `torch_causal_conv1d_update` (the path
  Qwen3-Next takes without a conv kernel): the state and the new inputs
  concatenated, `F.conv1d(..., groups=dim)` (cuDNN on a GPU), `F.silu`;
- fla's `fla.modules.causal_conv1d.causal_conv1d_update` (Triton), when
  fla-core is installed: one new input per sequence and a cache of
  `d_conv` inputs (`cache[..., 1:]` is the contract's state), so the
  wrapper feeds the `t` inputs one call at a time;
- Dao-AILab causal-conv1d's `causal_conv1d_update(x, conv_state, weight,
  None, "silu")` (CUDA), when the package is installed.

Both update the state in place, so each wrapper runs on a copy of it
(`final_state`). The check compares the final state bit for bit (data
moved, never computed) and every output within `2 B` of core's (`B` a
first-order bound of any f32 evaluation), over ragged channel counts,
`t > d_conv - 1` new inputs, inputs wide enough to reach SiLU's
`exp` overflow, and (LONG) states longer than the window needs
(`state_len >= width - 1`, as causal-conv1d and vLLM allow: the window
reads the trailing `d_conv - 1`; fla's fixed cache refuses those).

Exit status 1 unless every available implementation passes. Run on a
CUDA GPU with torch (and causal-conv1d, optionally):
    python3 python/examples/causal_conv1d_update.py
"""

import sys

import torch
import torch.nn.functional as F

import kernel_oracle as ko

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def torch_update(x, conv_state, weight, out, final_state):
    xs = torch.from_numpy(x).to(DEV)
    state = torch.from_numpy(conv_state).to(DEV)
    w = torch.from_numpy(weight).to(DEV)
    t, p = xs.shape[-1], state.shape[-1]
    cat = torch.cat([state, xs], dim=-1)
    state.copy_(cat[:, :, -p:])
    y = F.silu(F.conv1d(cat, w.unsqueeze(1), None, padding=0, groups=xs.shape[1])[:, :, -t:])
    out[...] = y.cpu().numpy()
    final_state[...] = state.cpu().numpy()


def fla_update(x, conv_state, weight, out, final_state):
    from fla.modules.causal_conv1d import causal_conv1d_update

    if conv_state.shape[-1] != weight.shape[1] - 1:
        raise ko.Refused("fla's cache holds d_conv inputs: no longer state")
    b, dim, t = x.shape
    cache = torch.zeros(b, dim, weight.shape[1], device=DEV)
    cache[:, :, 1:] = torch.from_numpy(conv_state).to(DEV)
    w = torch.from_numpy(weight).to(DEV)
    xs = torch.from_numpy(x).to(DEV)
    for r in range(t):
        y, cache = causal_conv1d_update(xs[:, :, r].contiguous(), cache, weight=w, activation="silu")
        out[:, :, r] = y.cpu().numpy()
    final_state[...] = cache[:, :, 1:].cpu().numpy()


def dao_update(x, conv_state, weight, out, final_state):
    from causal_conv1d import causal_conv1d_update

    state = torch.from_numpy(conv_state).to(DEV)
    y = causal_conv1d_update(torch.from_numpy(x).to(DEV), state, torch.from_numpy(weight).to(DEV), None, "silu")
    out[...] = y.cpu().numpy()
    final_state[...] = state.cpu().numpy()


def main():
    impls = [torch_update]
    for module, impl in (("fla", fla_update), ("causal_conv1d", dao_update)):
        try:
            __import__(module)
            impls.append(impl)
        except ImportError:
            print(f"{module} not installed: {impl.__name__} not checked")
    bad = 0
    for f in impls:
        bad += not ko.check_causal_conv1d_update(f)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
