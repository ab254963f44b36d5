"""Build the kernel library ahead of time: `python3 -m vidattn.build [--force] [--verbose]`.

The library is otherwise built on the first kernel call (vidattn/_ext.py). Building here first keeps that call
fast, shows the compiler's progress, and lets a cluster job build once before starting many ranks (which would
also build only once: they wait on a lock). Prints where the library is and how long the build took.
"""
from __future__ import annotations

import argparse
import sys
import time
import types


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m vidattn.build", description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when the cache holds a library for "
                        "these sources")
    parser.add_argument("--verbose", action="store_true", help="print the nvcc command and its output")
    args = parser.parse_args(argv)

    from . import _ext

    t0 = time.perf_counter()
    try:
        path = _ext.build(verbose=args.verbose, force=args.force)
    except RuntimeError as exc:
        print(f"vidattn.build: {exc}", file=sys.stderr)
        return 1
    dt = time.perf_counter() - t0
    try:
        _ext.open_library(path)
    except (OSError, RuntimeError) as exc:
        print(f"vidattn.build: built {path}, but it does not load: {exc}", file=sys.stderr)
        return 1
    print(f"kernel library: {path}")
    if _ext.last_build_seconds is None:
        print(f"already built for these sources (found in the cache in {dt:.1f} s)")
    else:
        print(f"built in {_ext.last_build_seconds:.1f} s")
    return 0


class _CallableModule(types.ModuleType):
    """`vidattn.build` is both this module (`python3 -m vidattn.build`) and the function `vidattn.build()`: once
    anything imports the module, the package attribute names the module, so calling it must still build."""

    def __call__(self, verbose: bool = False, force: bool = False):
        from . import _ext

        return _ext.build(verbose=verbose, force=force)


sys.modules[__name__].__class__ = _CallableModule


if __name__ == "__main__":
    sys.exit(main())
