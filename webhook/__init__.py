"""preemptguard: placement policy for GPU clusters that mix standard and preemptible nodes."""

from webhook.native import refuse_stale_engine

__version__ = "0.1.0"

# Before anything imports the engine: never run compiled modules older than their sources.
refuse_stale_engine()
