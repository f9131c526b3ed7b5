"""spyre_arch: the architect's tools for the simulated Spyre card, without PyTorch.

Sweeps of the hardware config (`spyre-sweep`, `spyre_arch.sweep`) and plots of what a run did
(`spyre-plot`, `spyre_arch.plot_cli`), built on the simulator's own report files: the config
(`$SPYRE_CONFIG`), the stats (`$SPYRE_STATS`) and the Chrome/Perfetto trace (`$SPYRE_TRACE`); and
`spyre-sim model` (`spyre_arch.model`): a HuggingFace LLM's inference on the card without weights.
Nothing here imports torch but `spyre_arch.model_run`, the child process that runs the model; a
workload that a sweep runs may.
"""

from __future__ import annotations

from spyre_arch.stats import flatten_stats, load_json, memory_roof, peak_flops

__all__ = ["flatten_stats", "load_json", "memory_roof", "peak_flops"]
