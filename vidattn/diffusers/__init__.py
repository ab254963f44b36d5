"""diffusers integration: vidattn processors per model family and `apply` / `restore` for pipelines."""
from ._requirements import check_diffusers as _check_diffusers

_check_diffusers()  # an installed diffusers too old, or failing to import, is an ImportError that names the fix
from .apply import (PROCESSORS, ROUTES, ApplyHandle, apply, register_backend_route, register_module,  # noqa: F401
                    register_processor, register_stock, register_stock_module, restore)
from .wan import WanAttnProcessor
from .cogvideox import CogVideoXAttnProcessor, FusedCogVideoXAttnProcessor
from .ltx import LTXVideoAttnProcessor
from .mochi import MochiAttnProcessor
from .allegro import AllegroAttnProcessor

__all__ = ["apply", "restore", "register_processor", "register_backend_route", "ApplyHandle", "PROCESSORS", "ROUTES",
           "WanAttnProcessor"]
__all__ += ["CogVideoXAttnProcessor", "FusedCogVideoXAttnProcessor"]
__all__ += ["LTXVideoAttnProcessor"]
__all__ += ["MochiAttnProcessor"]
__all__ += ["AllegroAttnProcessor"]
from .hunyuan_video import HunyuanVideoAttnProcessor; __all__ += ["HunyuanVideoAttnProcessor"]  # noqa: E402,E702
from .hunyuan_video15 import HunyuanVideo15AttnProcessor; __all__ += ["HunyuanVideo15AttnProcessor"]  # noqa: E402,E702
from .skyreels_v2 import SkyReelsV2AttnProcessor; __all__ += ["SkyReelsV2AttnProcessor"]  # noqa: E402,E702
from .ltx2 import LTX2AudioVideoAttnProcessor, LTX2PerturbedAttnProcessor  # noqa: E402
from .easyanimate import EasyAnimateAttnProcessor  # noqa: E402
from .cosmos import Cosmos25AttnProcessor, CosmosAttnProcessor  # noqa: E402
from .anyflow_far import AnyFlowCausalAttnProcessor  # noqa: E402
from .latte import LatteAttnProcessor  # noqa: E402
from .wan_animate_2 import WanAnimate2AttnProcessor  # noqa: E402
from .kandinsky6_sr import Kandinsky6SRAttnProcessor  # noqa: E402
from . import sana_wm  # noqa: E402,F401  (SANA-WM's softmax modules: module routes)
from . import backend_routes  # noqa: E402,F401  (the families routed to the "vidattn" backend)
__all__ += ["LTX2AudioVideoAttnProcessor", "LTX2PerturbedAttnProcessor", "EasyAnimateAttnProcessor",
            "CosmosAttnProcessor", "Cosmos25AttnProcessor", "AnyFlowCausalAttnProcessor", "LatteAttnProcessor",
            "WanAnimate2AttnProcessor", "Kandinsky6SRAttnProcessor"]
# Registers the "vidattn" diffusers attention backend (model.set_attention_backend("vidattn")) on import.
from .backend import BACKEND_NAME, register_backend, unregister_backend; __all__ += ["BACKEND_NAME", "register_backend", "unregister_backend"]  # noqa: E402,E501,E702
