"""The admission server: Flask over gunicorn and TLS, with its runtime (certificates, policy
reload, namespace cache, metrics, logs, bounded work for large reviews)."""
