"""Attacks from the pod network on a running webhook server, and a probe of ordinary reviews
that says whether the server still answers them in time: ``python -m tests.attacks --help``.
"""
