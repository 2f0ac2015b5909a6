"""What the equivalence scripts (native_corpus, native_apply) share: each is run in a child
process with DRC_COMPILED on and off, and prints one digest of everything its workload gave."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from typing import Any

from drc import native


def attempt(work: Callable[..., Any]) -> Any:
    """The work's result, or its failure as text: a failure is an output compared too."""
    try:
        return work()
    except Exception as exc:  # noqa: BLE001 - the failure is the output compared
        return f"{type(exc).__name__}: {exc}"


def report(outputs: Callable[[], list[Any]]) -> None:
    """Print the outputs' digest and whether the compiled modules ran (``--show``: each
    output, to find where two runs differ)."""
    if "--show" in sys.argv:
        for item in outputs():
            print(repr(item))
        return
    text = repr(outputs()).encode()
    state = native.STATE
    print(json.dumps({"compiled": state.compiled, "digest": hashlib.sha256(text).hexdigest()}))
