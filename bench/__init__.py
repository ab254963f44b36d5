"""Benchmark helpers shared by the user's benchmarks (scripts/) and the developer's probes (dev/probes/): the anchor
shapes, the order of interleaved timing rounds, a torch-free git commit rule, and the inputs and error bound the GPU
tests and the accuracy probes share. It sits below both, so neither imports the other for these. bench/results/ holds
the committed results (bench/results/INDEX.md says which file backs which figure)."""
