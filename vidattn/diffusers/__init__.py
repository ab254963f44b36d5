"""diffusers integration: vidattn processors per model family and `apply` / `restore` for pipelines."""
from .apply import PROCESSORS, ApplyHandle, apply, register_processor, restore
from .wan import WanAttnProcessor

__all__ = ["apply", "restore", "register_processor", "ApplyHandle", "PROCESSORS", "WanAttnProcessor"]
