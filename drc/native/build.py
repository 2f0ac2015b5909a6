"""Build the compiled hot path (drc.native) with mypyc: ``python -m drc.native.build [--force]``.

Idempotent: when drc/native/compiled/manifest.json says the build is complete and made from
the sources as they are now, it does nothing. Otherwise it compiles :data:`drc.native.MODULES`
into a fresh directory beside drc/native/compiled/ (C sources and objects in a temporary
directory) and moves it into place, so a failed or interrupted build never leaves a half
build that loads. Needs mypy with mypyc (the ``native`` extra: mypy[mypyc], which brings
setuptools), a C compiler and the interpreter's headers (Debian: gcc, python3-dev).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.machinery
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from drc.native import COMPILED, GROUP, MANIFEST, MODULES, ROOT, built_files, digest, source_path


def dependencies(modules: tuple[str, ...] = MODULES) -> list[str]:
    """The compiled modules and the drc modules they import (a change to one makes the build
    stale: mypyc compiled against its types)."""
    found = set(modules)
    for module in modules:
        for node in ast.walk(ast.parse(source_path(module).read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name.startswith("drc.") and _exists(name):
                    found.add(name)
    return sorted(found)


def _exists(module: str) -> bool:
    path = source_path(module)
    return path.is_file()


def build(force: bool = False, quiet: bool = False) -> bool:
    """Build unless the build is fresh (or ``force``); True if it built."""
    files, reason = built_files()
    if files is not None and not force:
        print(f"drc.native: compiled modules up to date ({reason})")
        return False
    began = time.monotonic()
    sources = {name: source_path(name) for name in dependencies()}
    hashes = {name: digest(path) for name, path in sources.items()}  # before compiling
    COMPILED.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="compiled.", dir=COMPILED.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="drc-native-") as scratch:
            _compile(Path(scratch), staging, quiet)
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        manifest: dict[str, Any] = {
            "suffix": suffix,
            "mypyc": _mypy_version(),
            "python": sys.version.split()[0],
            "modules": {name: name.replace(".", "/") + suffix for name in MODULES},
            "shared": {"name": f"{GROUP}__mypyc", "file": f"{GROUP}__mypyc{suffix}"},
            "sources": {name: path.relative_to(ROOT).as_posix() for name, path in sources.items()},
            "sha256": hashes,
        }
        for file in [*manifest["modules"].values(), manifest["shared"]["file"]]:
            if not (staging / file).is_file():
                raise RuntimeError(f"mypyc built no {file}")
        (staging / MANIFEST.name).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        _replace(staging, COMPILED)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"drc.native: compiled {len(MODULES)} modules in {time.monotonic() - began:.0f} s")
    return True


def _compile(scratch: Path, out: Path, quiet: bool) -> None:
    from mypyc.build import mypycify
    from setuptools import Distribution

    # mypy reads its configuration from the working directory: the checkout's pyproject.toml
    # (an installed package has none; the flags below are all the build needs).
    previous = os.getcwd()
    os.chdir(ROOT.parent)
    try:
        paths = [str(source_path(name)) for name in MODULES]
        # Type errors mypyc stops at go to stdout: never silenced.
        extensions = mypycify(
            [*paths, "--ignore-missing-imports"],
            opt_level="3",
            group_name=GROUP,
            target_dir=str(scratch / "c"),
        )
        with _silenced(quiet):
            dist = Distribution({"name": "drc-native", "ext_modules": extensions})
            command = dist.get_command_obj("build_ext")
            command.build_lib = str(out)  # type: ignore[attr-defined]
            command.build_temp = str(scratch / "obj")  # type: ignore[attr-defined]
            command.inplace = False  # type: ignore[attr-defined]
            dist.run_command("build_ext")
    finally:
        os.chdir(previous)


@contextlib.contextmanager
def _silenced(quiet: bool) -> Iterator[None]:
    """Send setuptools' lines (the gcc commands) to /dev/null when ``quiet``; gcc's errors go
    to stderr, and a failed build raises."""
    if not quiet:
        yield
        return
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        saved = os.dup(1)
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def _replace(staging: Path, target: Path) -> None:
    """Put ``staging`` where ``target`` is: processes that loaded the old files keep them."""
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _mypy_version() -> str:
    from mypy.version import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drc.native.build", description=__doc__)
    parser.add_argument("--force", action="store_true", help="build even if up to date")
    parser.add_argument("--quiet", action="store_true", help="no compiler output (errors stay)")
    args = parser.parse_args(argv)
    build(force=args.force, quiet=args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
