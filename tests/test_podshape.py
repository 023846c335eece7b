"""The pod-shape check every review runs agrees with the walk that names the bad field."""

from __future__ import annotations

import random
from typing import Any

import pytest

from webhook.engine import podshape
from webhook.engine.findings import Code
from webhook.engine.placement import REQUIRED
from webhook.engine.podshape import POD_TEMPLATE, STRINGS, shape_problem
from webhook.loading import jsondoc

# Values of every JSON type, and of the types YAML adds (floats, booleans).
ODD_VALUES: list[Any] = [None, True, 0, 1.5, "x", [], {}, ["x"], {"k": "v"}, [None], {"k": 1}]


def _value(shape: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value of ``shape``, with a value of another type in some places."""
    if rng.random() < 0.08:
        return rng.choice(ODD_VALUES)
    if shape is str:
        return rng.choice(["a", "In", "NoSchedule", ""])
    if shape is int:
        return rng.choice([0, 30, 300])
    if shape is STRINGS:
        return {f"k{i}": rng.choice(["v", "v", 1, None]) for i in range(rng.randrange(3))}
    if isinstance(shape, list):
        return [_value(shape[0], rng, depth + 1) for _ in range(rng.randrange(3))]
    return {
        key: _value(inner, rng, depth + 1) for key, inner in shape.items() if rng.random() < 0.7
    }


@pytest.mark.parametrize("seed", range(4))
def test_the_quick_check_and_the_named_walk_agree(seed: int) -> None:
    rng = random.Random(seed)
    outcomes = {True: 0, False: 0}
    for _ in range(2500):
        value = _value(POD_TEMPLATE, rng)
        valid = podshape._VALID(value)
        assert valid == (podshape._check(value, POD_TEMPLATE) is None), value
        outcomes[valid] += 1
    # Both answers are exercised, or the agreement says nothing.
    assert min(outcomes.values()) > 250, outcomes


def test_a_wrong_type_deep_in_a_term_is_named_with_its_path() -> None:
    pod = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "k", "operator": "In", "values": ["a"]}]},
                            {"matchExpressions": [{"key": "k", "operator": "In", "values": [1]}]},
                        ]
                    }
                }
            }
        }
    }
    problem = shape_problem(pod, "spec.template")
    assert problem is not None
    assert problem.code is Code.WRONG_TYPE
    path = (
        f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[1].matchExpressions[0].values[0]"
    )
    assert problem.path == path
    assert problem.message.startswith(f"spec.template.{path} must be a string, not the number 1")


def test_a_number_too_long_to_read_is_named_as_such() -> None:
    """Not as the marker string the decoder leaves in its place (a value too deep to read is
    cut far below any field the engine reads, so only a number can stand in one)."""
    body = b'{"spec": {"containers": [], "terminationGracePeriodSeconds": ' + b"9" * 5_000 + b"}}"
    problem = shape_problem(jsondoc.loads(body), "")
    assert problem is not None
    assert problem.message.startswith(
        "spec.terminationGracePeriodSeconds must be a whole number, "
        "not a number of more than 4300 digits;"
    ), problem.message
