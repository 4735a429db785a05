"""docs/recipe.schema.json against real recipes and typos, with the jsonschema package.

Every recipe in configs/ names the schema on its first line (for editors' YAML language server) and
validates against it; typical typos are rejected by the schema and by `gputrain validate` alike.
Usage: recipe_schema_test.py SOURCE_DIR GPUTRAIN_BINARY
"""
import copy
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import jsonschema
import yaml


class Yaml12Loader(yaml.SafeLoader):
    """PyYAML reads YAML 1.1, where 3e-4 is a string; editors' language server (and gputrain) read a number."""


Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"),
    list("-+0123456789."),
)


def load(path):
    with open(path) as f:
        return yaml.load(f, Loader=Yaml12Loader) or {}


def leaves_without_type(node, at=""):
    """Keys whose schema says nothing about their value (a field factory without value_schema)."""
    if node.get("type") == "object" and "properties" in node:
        for key, child in node["properties"].items():
            yield from leaves_without_type(child, f"{at}.{key}" if at else key)
    elif not any(k in node for k in ("type", "enum", "anyOf", "const")):
        yield at


def main():
    source, binary = pathlib.Path(sys.argv[1]), sys.argv[2]
    schema_path = source / "docs" / "recipe.schema.json"
    schema = yaml.safe_load(schema_path.read_text())  # JSON is YAML
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    failures = []
    untyped = list(leaves_without_type(schema))
    if untyped:
        failures.append(f"keys without a value schema: {untyped}")

    recipes = sorted((source / "configs").rglob("*.yaml"))
    assert len(recipes) >= 10, recipes
    for recipe in recipes:
        name = recipe.relative_to(source)
        expected = "# yaml-language-server: $schema=" + os.path.relpath(schema_path, recipe.parent)
        first = recipe.read_text().splitlines()[0]
        if first != expected:
            failures.append(f"{name}: first line is {first!r}, expected {expected!r}")
        for error in validator.iter_errors(load(recipe)):
            failures.append(f"{name}: {'.'.join(map(str, error.path))}: {error.message}")

    # Typos: each rejected by the schema and by gputrain validate (exit 2), the untouched recipe by neither.
    base = load(source / "configs" / "smoke.yaml")
    typos = {
        "unknown key": (("model", "n_layers"), 4),
        "wrong type": (("optim", "lr"), "fast"),
        "out of range": (("model", "dropout"), 1.5),
        "negative count": (("train", "max_steps"), -5),
        "wrong enum": (("precision", "mode"), "bf32"),
        "unknown section": (("optimizer",), {"lr": 0.001}),
        "another enum": (("train", "spike_policy"), "rollbak"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        cases = [("untouched", base, True)]
        for what, (path, value) in typos.items():
            recipe = copy.deepcopy(base)
            at = recipe
            for key in path[:-1]:
                at = at.setdefault(key, {})
            at[path[-1]] = value
            cases.append((what, recipe, False))
        for what, recipe, valid in cases:
            file = pathlib.Path(tmp) / "r.yaml"
            file.write_text(yaml.safe_dump(recipe))
            schema_ok = validator.is_valid(recipe)
            cli = subprocess.run([binary, "validate", str(file)], capture_output=True, text=True)
            if schema_ok != valid:
                failures.append(f"{what}: the schema {'accepts' if schema_ok else 'rejects'} it")
            # A valid recipe exits 0, a rejected one 2 (bad input); any other code (a crash) is a failure.
            if cli.returncode != (0 if valid else 2):
                failures.append(f"{what}: gputrain validate exits {cli.returncode}: {cli.stdout}{cli.stderr}")

    for f in failures:
        print("FAIL", f)
    print(f"{len(recipes)} recipes, {len(typos)} typos checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
