"""The placement engine: pure functions from an object, a policy and a context to a Decision.

No I/O here: no HTTP, no files, no cluster, no clock. Everything else drives it.
"""

from webhook.engine.evaluation import evaluate

__all__ = ["evaluate"]
