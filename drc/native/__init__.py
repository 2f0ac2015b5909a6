"""The compiled hot path: mypyc builds of a few pure modules, chosen at import by one setting.

    DRC_COMPILED=auto   (default, or unset) the compiled modules when they were built from
                        exactly the sources beside them, else the pure Python ones
    DRC_COMPILED=on     the compiled modules; ``import drc`` raises ImportError when they are
                        missing or stale (1, true and yes mean on too)
    DRC_COMPILED=off    the pure Python modules (0, false and no too)

What is compiled is :data:`MODULES`, the binlog decoder, the record codec and the apply side
from the filter chain to the statements' text: the same .py files that run as pure Python.
``python -m drc.native.build`` (run by ``make setup``) compiles them with mypyc into
:data:`COMPILED` (drc/native/compiled/, never in git): an extension per module, under the
module's own name, the shared library they call into, and ``manifest.json``, which names each
file and holds the sha256 of every source it was built from (the compiled modules and the drc
modules they import). Nothing is built next to a .py file, so nothing shadows it: a compiled
module is loaded instead of its source only through the finder :func:`install` puts first on
``sys.meta_path`` (drc/__init__ calls it), so one process holds either the compiled or the pure
modules, never a mix of the two (the same setting in a child process, such as a Spark executor,
which inherits the environment, picks the same).

A source edited after the build makes the build stale: under ``auto`` the pure modules run
(:data:`STATE` says why) until ``make setup`` builds again; under ``on`` import fails. So a
compiled module never runs code its .py no longer says.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

# The modules compiled, in one mypyc group (calls between them are native calls).
MODULES = (
    "drc.replicator.binlog.columns",
    "drc.replicator.binlog.values",
    "drc.replicator.binlog.rows",
    "drc.replicator.binlog.events",
    "drc.core.value_codec",
    "drc.core.codec",
    "drc.replicator.binlog.rowpack",  # the one-pass prototype (docs/compiled.md)
    # the apply side: records' row changes -> filter chain -> writes -> statements
    "drc.apply.stages",
    "drc.apply.engine",
    "drc.apply.plan",
    "drc.apply.shapes",
    "drc.mysql.sql",
)
GROUP = "drc_native"  # mypyc's shared library is the top-level module drc_native__mypyc
SETTING = "DRC_COMPILED"
ROOT = Path(__file__).resolve().parents[1]  # the drc package directory
COMPILED = Path(__file__).resolve().parent / "compiled"
MANIFEST = COMPILED / "manifest.json"
_ON, _OFF = frozenset({"on", "1", "true", "yes"}), frozenset({"off", "0", "false", "no"})


@dataclass(frozen=True)
class State:
    """What :func:`install` chose: ``compiled`` True when :data:`MODULES` load compiled."""

    setting: str  # auto, on or off
    compiled: bool
    reason: str  # why (for a status line)


STATE = State("auto", False, "not installed")


def source_path(module: str) -> Path:
    """The .py file of a drc module (a package's __init__.py)."""
    parts = module.split(".")[1:]
    path = ROOT.joinpath(*parts)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def setting(environ: Mapping[str, str] = os.environ) -> str:
    """The setting's value as auto, on or off; ValueError for anything else."""
    value = environ.get(SETTING, "auto").strip().lower() or "auto"
    if value in _ON:
        return "on"
    if value in _OFF:
        return "off"
    if value == "auto":
        return value
    raise ValueError(f"{SETTING}={environ[SETTING]!r}: use auto, on or off")


def built_files(manifest: Path = MANIFEST) -> tuple[dict[str, Path] | None, str]:
    """The compiled extension of each module and of the shared library, by module name, if the
    build in ``manifest``'s directory is complete and fresh; else None and why not."""
    try:
        built = json.loads(manifest.read_text())
    except FileNotFoundError:
        return None, "not built (make setup builds it)"
    except (OSError, ValueError) as exc:
        return None, f"unreadable {manifest}: {exc}"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    if built.get("suffix") != suffix:
        return None, f"built for {built.get('suffix')}, this interpreter loads {suffix}"
    if sorted(built.get("modules", {})) != sorted(MODULES):
        return None, "built for another module list"
    for name, relative in built["sources"].items():
        path = ROOT / relative
        if not path.is_file() or digest(path) != built["sha256"][name]:
            return None, f"stale: {relative} changed since the build (make setup builds it)"
    files = {name: manifest.parent / file for name, file in built["modules"].items()}
    files[built["shared"]["name"]] = manifest.parent / built["shared"]["file"]
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        return None, f"incomplete: {', '.join(missing)} missing"
    return files, f"built by mypyc {built.get('mypyc', '?')}"


class CompiledFinder:
    """A ``sys.meta_path`` finder of the compiled extension of each module it knows (and only
    those; not an importlib.abc.MetaPathFinder subclass: importing importlib.abc costs ~10 ms)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(fullname, file)


def install(environ: Mapping[str, str] = os.environ) -> State:
    """Choose compiled or pure per the setting, once, before any of :data:`MODULES` is
    imported (drc/__init__ calls it); sets and returns :data:`STATE`."""
    global STATE
    if any(isinstance(finder, CompiledFinder) for finder in sys.meta_path):
        return STATE
    chosen = setting(environ)
    if chosen == "off":
        STATE = State(chosen, False, f"{SETTING}=off")
        return STATE
    loaded = [name for name in MODULES if name in sys.modules]
    files, reason = built_files()
    if files is not None and loaded:
        files, reason = None, f"{', '.join(loaded)} imported before drc.native.install"
    if files is None:
        if chosen == "on":
            raise ImportError(f"{SETTING}=on but the compiled modules cannot load: {reason}")
        STATE = State(chosen, False, reason)
        return STATE
    sys.meta_path.insert(0, CompiledFinder(files))
    STATE = State(chosen, True, reason)
    return STATE


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from a compiled extension."""
    return isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader)
