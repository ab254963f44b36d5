"""Application recipes: build diffusers video pipelines offline (real configs, random or local weights)."""
from .wan import (DEFAULT_NEGATIVE_PROMPT, PRESETS, PipelineError, Preset, build_pipeline, decode_latents,
                  denoise, flow_shift_for, initial_latents, make_scheduler, prompt_pair, text_embeddings,
                  token_count, transformer_inputs, validate_size, write_video, check_video_writer)

__all__ = ["DEFAULT_NEGATIVE_PROMPT", "PRESETS", "PipelineError", "Preset", "build_pipeline", "decode_latents",
           "denoise", "flow_shift_for", "initial_latents", "make_scheduler", "prompt_pair", "text_embeddings",
           "token_count", "transformer_inputs", "validate_size", "write_video", "check_video_writer"]
