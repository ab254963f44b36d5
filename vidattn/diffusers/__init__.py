"""diffusers integration: vidattn processors per model family and `apply` / `restore` for pipelines."""
from .apply import PROCESSORS, ApplyHandle, apply, register_processor, restore
from .wan import WanAttnProcessor
from .cogvideox import CogVideoXAttnProcessor, FusedCogVideoXAttnProcessor
from .ltx import LTXVideoAttnProcessor
from .mochi import MochiAttnProcessor
from .allegro import AllegroAttnProcessor

__all__ = ["apply", "restore", "register_processor", "ApplyHandle", "PROCESSORS", "WanAttnProcessor"]
__all__ += ["CogVideoXAttnProcessor", "FusedCogVideoXAttnProcessor"]
__all__ += ["LTXVideoAttnProcessor"]
__all__ += ["MochiAttnProcessor"]
__all__ += ["AllegroAttnProcessor"]
from .hunyuan_video import HunyuanVideoAttnProcessor; __all__ += ["HunyuanVideoAttnProcessor"]  # noqa: E402,E702
from .hunyuan_video15 import HunyuanVideo15AttnProcessor; __all__ += ["HunyuanVideo15AttnProcessor"]  # noqa: E402,E702
from .skyreels_v2 import SkyReelsV2AttnProcessor; __all__ += ["SkyReelsV2AttnProcessor"]  # noqa: E402,E702
# Registers the "vidattn" diffusers attention backend (model.set_attention_backend("vidattn")) on import.
from .backend import BACKEND_NAME, register_backend, unregister_backend; __all__ += ["BACKEND_NAME", "register_backend", "unregister_backend"]  # noqa: E402,E501,E702
