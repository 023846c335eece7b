"""A seeded, structure-aware fuzzer of the admission app and the CLI.

- ``corpus``: the starting points (recorded reviews, examples, adversarial pods);
- ``mutators``: what is done to them, case by case from ``(seed, index)``;
- ``oracle``: what must hold for every answer, decided without the webhook's own code;
- ``runner``: sends cases through the WSGI app and the CLI and collects failures;
- ``known``: bugs found and not fixed yet, with their reproducers in ``reproducers/``.

The tests here run a few thousand cases with fixed seeds; ``benchmarks/fuzz.py`` runs long
campaigns and makes any one case again.
"""
