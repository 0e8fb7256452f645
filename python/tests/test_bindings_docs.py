"""Docs and stubs stay true: docs/PYTHON.md's Python blocks run, every binding has a
docstring, and the hand-written stub names exactly what the extension defines."""

import ast
import os
import pathlib
import pydoc
import re
import subprocess
import sys

import pytest

import gearbox
from gearbox import _gearbox

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLASSES = ["Runtime", "Snapshot", "Plan", "Variant", "Pool", "FleetFingerprint", "FleetStore",
           "InProcessFleetStore", "RedisFleetStore", "FleetArtifactStore", "FleetArtifact",
           "ObtainedArtifact"]
FUNCTIONS = ["replay", "plan_gears", "convert_trace", "emit_server_config", "open_fleet_store",
             "fleet_key_prefix", "fleet_sha256_hex"]


def python_blocks(markdown):
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def extension_dir():
    return str(pathlib.Path(_gearbox.__file__).resolve().parent.parent)


def run_blocks(path):
    blocks = python_blocks(path.read_text())
    assert blocks, f"{path} has no ```python block"
    env = dict(os.environ, PYTHONPATH=extension_dir())
    for i, code in enumerate(blocks):
        result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (
            f"{path.name} python block {i + 1} failed:\n{code}\n--- stderr ---\n{result.stderr}")


def test_python_md_blocks_run():
    run_blocks(ROOT / "docs" / "PYTHON.md")


def test_readme_python_blocks_run():
    run_blocks(ROOT / "README.md")


def public_members(cls):
    return {n for n in vars(cls) if not n.startswith("_")}


def test_every_binding_has_a_docstring():
    for name in CLASSES:
        cls = getattr(gearbox, name)
        assert cls.__doc__, name
        for member in public_members(cls):
            doc = getattr(cls, member).__doc__
            assert doc and doc.strip(), f"{name}.{member} has no docstring"
    for name in FUNCTIONS:
        assert len(getattr(gearbox, name).__doc__) > 100, name
    text = pydoc.render_doc(gearbox.Runtime, renderer=pydoc.plaintext)
    for words in ("adaptive gear runtime", "runtime is closed", "dims[0].gears",
                  "release listener", "Plans a request"):
        assert words in text, words


def stub_tree():
    return ast.parse((ROOT / "python" / "gearbox" / "_gearbox.pyi").read_text())


def test_stub_names_what_the_extension_defines():
    tree = stub_tree()
    stub_classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    stub_functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert set(stub_classes) == set(CLASSES)
    assert stub_functions == set(FUNCTIONS)
    module_names = {n for n in dir(_gearbox) if not n.startswith("_")}
    assert module_names == set(CLASSES) | set(FUNCTIONS)
    for name, node in stub_classes.items():
        stub_members = {m.name for m in node.body
                        if isinstance(m, ast.FunctionDef) and not m.name.startswith("_")}
        assert stub_members == public_members(getattr(_gearbox, name)), name


def test_stub_signatures_match_the_docstrings():
    # pybind11 writes each def's signature as the first line of its docstring.
    tree = stub_tree()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        first = getattr(_gearbox, node.name).__doc__.splitlines()[0]
        args = [a.arg for a in node.args.args + node.args.kwonlyargs]
        assert re.findall(r"(\w+):", first.split("->")[0]) == args, node.name


@pytest.mark.parametrize("name", CLASSES + FUNCTIONS)
def test_package_reexports(name):
    assert getattr(gearbox, name) is getattr(_gearbox, name)
