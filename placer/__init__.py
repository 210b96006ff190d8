"""placer: auto-tuned placement of deep-learning graphs on heterogeneous targets."""

__version__ = "0.1.0"
