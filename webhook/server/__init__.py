"""The admission server: the hooks and Flask over granian and TLS, with its runtime
(certificates, policy reload, namespace cache, metrics, logs, bounded work for large
reviews)."""
