"""preemptguard: placement policy for GPU clusters that mix standard and preemptible nodes."""

__version__ = "0.1.0"
