"""The ``preemptguard`` command line."""
