"""vidattn: exact attention for video diffusion transformers on NVIDIA Hopper.

    import vidattn
    vidattn.apply(pipe)                      # every transformer of a diffusers video pipeline (README: families)
    out = vidattn.attention(q, k, v)         # (B, S, H, D) in, same out
    vidattn.explain(q, k, v)                 # None when the kernel runs, else why SDPA runs instead

The diffusers integration (`apply`, `restore`, the per-family processors such as `WanAttnProcessor`) is
imported on first use, so `import vidattn` does not import diffusers.
"""
from ._ext import build
from .ops import DIFFUSERS_SPEC as _DIFFUSERS_SPEC, VidattnFallbackWarning, attention, explain, kernel_available
from .precision import PrecisionPolicy, use_precision
from .rotary import rope, rope_explain

__version__ = "0.1.0"

_DIFFUSERS_NAMES = (
    "apply", "restore", "register_processor", "ApplyHandle",
    "WanAttnProcessor", "SkyReelsV2AttnProcessor", "HunyuanVideoAttnProcessor", "HunyuanVideo15AttnProcessor",
    "CogVideoXAttnProcessor", "FusedCogVideoXAttnProcessor", "LTXVideoAttnProcessor", "MochiAttnProcessor",
    "AllegroAttnProcessor", "LTX2AudioVideoAttnProcessor", "LTX2PerturbedAttnProcessor", "EasyAnimateAttnProcessor",
    "CosmosAttnProcessor", "Cosmos25AttnProcessor", "AnyFlowCausalAttnProcessor", "LatteAttnProcessor", "WanAnimate2AttnProcessor",
    "Kandinsky6SRAttnProcessor",
    "register_backend", "unregister_backend", "register_backend_route", "register_stock", "register_module",
)

# `from vidattn import *` takes the diffusers integration only where diffusers is there to import (else it would
# raise ImportError over names the caller may not want).
__all__ = ["attention", "explain", "kernel_available", "use_precision", "PrecisionPolicy", "build", "rope", "rope_explain",
           "VidattnFallbackWarning", *(_DIFFUSERS_NAMES if _DIFFUSERS_SPEC is not None else ())]


def __getattr__(name):
    if name in _DIFFUSERS_NAMES:
        from . import diffusers as _integration

        return getattr(_integration, name)
    raise AttributeError(f"module 'vidattn' has no attribute {name!r}")
