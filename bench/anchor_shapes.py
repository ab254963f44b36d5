"""The anchor shapes of /work/shared/ANCHORS.md's kernel table, in its order: one list for every script that times
the kernel (bench_kernel.py takes all of them; kernel_ab_time.py, kernel_once.py and kernel_smoke.py a subset by
key). No torch import, so CPU tests and tooling can read it anywhere.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    name: str
    b: int
    h: int
    sq: int
    skv: int
    d: int
    anchor_cudnn: float | None = None  # TFLOPS from ANCHORS.md (another run; compare ratios, not absolutes)
    anchor_fa3: float | None = None
    key: str = ""  # short name for logs and the A/B scripts' JSON (kept stable across sessions)
    h_kv: int | None = None  # key/value heads where fewer than h (grouped-query); None: h

    @property
    def kv_heads(self) -> int:
        return self.h_kv or self.h

    @property
    def flops(self) -> int:
        return 4 * self.b * self.h * self.sq * self.skv * self.d

    def bytes_bf16(self) -> int:
        """q, k, v read once and out written once, bf16."""
        return 2 * self.b * self.d * (2 * self.h * self.sq + 2 * self.kv_heads * self.skv)

    def as_tuple(self) -> tuple[str, int, int, int, int, int]:
        """(key, B, H, Sq, Skv, D): the form the A/B and smoke scripts use."""
        return (self.key, self.b, self.h, self.sq, self.skv, self.d)


SHAPES = [
    Shape("seed 4K", 8, 16, 4096, 4096, 128, 609, 652, key="seed4k"),
    Shape("seed 8K", 4, 16, 8192, 8192, 128, 612, 649, key="seed8k"),
    Shape("seed 16K", 2, 16, 16384, 16384, 128, 600, 659, key="seed16k"),
    Shape("FA-bench 1K", 16, 16, 1024, 1024, 128, 607, 604, key="fa1k_d128"),
    Shape("FA-bench 1K D64", 16, 32, 1024, 1024, 64, 426, 377, key="fa1k_d64"),
    Shape("FA-bench 8K D64", 2, 32, 8192, 8192, 64, 455, 520, key="fa8k_d64"),
    Shape("Wan2.1-1.3B self", 1, 12, 32760, 32760, 128, 569, 681, key="wan13b_self"),
    Shape("Wan2.1 cross 32760x512", 1, 12, 32760, 512, 128, 537, 546, key="wan_cross"),
    Shape("Wan2.1-14B self", 1, 40, 32760, 32760, 128, 573, 671, key="wan14b_self"),
    Shape("HunyuanVideo 720p", 1, 24, 119056, 119056, 128, 569, 665, key="hunyuan_720p"),
    Shape("CogVideoX-5B", 1, 48, 17776, 17776, 64, 417, 528, key="cogvideox_d64"),
    Shape("LTX-Video", 1, 32, 24576, 24576, 64, 465, 530, key="ltx_d64"),
]


def by_key(keys: list[str]) -> list[tuple[str, int, int, int, int, int]]:
    """The (key, B, H, Sq, Skv, D) tuples of the named shapes, in the order given."""
    table = {s.key: s for s in SHAPES}
    unknown = [k for k in keys if k not in table]
    if unknown:
        raise KeyError(f"unknown anchor shape key(s) {unknown}; known: {list(table)}")
    return [table[k].as_tuple() for k in keys]
