"""The package's own sources: checks that no test of behaviour would name."""
import ast
import collections
import pathlib

import tensorframe

PACKAGE = pathlib.Path(tensorframe.__file__).parent


def top_level_names(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [node.name for node in tree.body if isinstance(node, kinds)]


def test_no_module_defines_a_function_twice():
    # A second `def _pair` once replaced the first, and 115 tests failed far
    # from the cause; a redefinition is never intended in this package.
    repeated = {}
    for path in sorted(PACKAGE.glob("*.py")):
        counts = collections.Counter(top_level_names(path))
        twice = sorted(name for name, n in counts.items() if n > 1)
        if twice:
            repeated[path.name] = twice
    assert repeated == {}
