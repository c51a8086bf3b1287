"""Registry-driven checks (tests/registry.py): every public function,
method and constructor is registered; each registered call agrees with its
float64 oracle; and each argument replaced by a wrong value gives a
TypeError/ValueError/IndexError (or a named MemoryError) with a message,
never another exception."""
import re
import sys
import os

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import registry  # noqa: E402

NAMES = [e[0] for e in registry.REGISTRY]
BAD_VALUES = [None, "a", 1.5, -3, 2**70, np.ones((3, 5), np.float32), np.array(["x"]),
              [[1, 2], [3]], float("nan")]
ALLOWED = (TypeError, ValueError, IndexError)


def test_every_public_callable_is_registered():
    missing = registry.public_names() - registry.registered_names()
    assert missing == set()


def test_registry_names_are_unique():
    assert len(NAMES) == len(set(NAMES))


@pytest.mark.parametrize("entry", registry.REGISTRY, ids=NAMES)
def test_registered_call_matches_its_oracle(entry):
    name, fn, args, kwargs, oracle = entry
    res = fn(*args, **kwargs)
    if oracle is not None:
        oracle(res)


@pytest.mark.parametrize("entry", registry.ERROR_CALLS, ids=[e[0] for e in registry.ERROR_CALLS])
def test_registered_error_call_raises_with_a_message(entry):
    name, fn, args, kwargs = entry
    with pytest.raises(ALLOWED) as e:
        fn(*args, **kwargs)
    assert len(str(e.value)) > 10


@pytest.mark.parametrize("entry", registry.REGISTRY, ids=NAMES)
def test_each_argument_wrong_is_a_clear_error(entry):
    name, fn, args, kwargs, _ = entry
    if name.startswith(("set_num_threads", "get_num_threads")):
        return
    slots = [("arg", i) for i in range(len(args))] + [("kw", k) for k in kwargs]
    for kind, key in slots:
        for bad in BAD_VALUES:
            a, kw = list(args), dict(kwargs)
            if kind == "arg":
                a[key] = bad
            else:
                kw[key] = bad
            try:
                fn(*a, **kw)
            except MemoryError as e:
                assert re.match(r"^[\w\[\]'., ]+: .* would need \d+ bytes", str(e)), (
                    f"{name} with {kind} {key}={bad!r}: unnamed MemoryError {e}")
            except ALLOWED as e:
                assert str(e).strip(), f"{name} with {kind} {key}={bad!r}: empty message"
            except Exception as e:  # noqa: BLE001 - the finding
                pytest.fail(f"{name} with {kind} {key}={bad!r}: {type(e).__name__}: {e}")
