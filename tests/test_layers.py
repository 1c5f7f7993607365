"""The layer map of ../shared/DESIGN.md, enforced: each part of labkit imports only its own
layer and the layers below it, lazy imports (inside functions) included. An arrow that runs
back up is a defect; this test names it."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "labkit"

# the first component of a module's path inside labkit -> its layer (DESIGN.md, bottom up)
LAYERS = {
    "config": 0, "errors": 0, "roles": 0, "_fs": 0, "_proc": 0, "_json": 0,
    "backend": 1,
    "data": 2, "checkpoint": 2, "runs": 2,
    "functions": 3, "autograd": 3,
    "compile": 4, "bricks": 4, "optimizers": 4, "regularizers": 4, "graph": 4,
    # NOTE: models/ is the zoo: each model file carries its training script (MainLoop)
    "training": 5, "models": 5,
    "sweep": 6, "dist": 6,
    "cli": 7, "server": 7, "notebook": 7,
}


def _part(module: str) -> str:
    return module.split(".")[0]


def _imports(path: Path):
    """(line, imported labkit module) for every import in ``path``, relative ones resolved."""
    rel = path.relative_to(PKG.parent).with_suffix("")
    package = list(rel.parts[:-1])  # the package the module is in (for relative imports)
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("labkit."):
                    yield node.lineno, a.name[len("labkit."):]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base[1:] + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("labkit"):
                target = node.module[len("labkit."):] if node.module != "labkit" else ""
            else:
                continue
            if target:
                yield node.lineno, target
            else:  # from labkit import x / from .. import x
                for a in node.names:
                    yield node.lineno, a.name


def test_every_import_runs_down_the_layers():
    bad = []
    checked = 0
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.as_posix() == "__init__.py":
            continue  # the package root wires the layers together
        part = rel.parts[0].removesuffix(".py")
        assert part in LAYERS, f"labkit/{rel}: {part!r} is in no layer of DESIGN.md"
        for line, target in _imports(path):
            other = _part(target)
            if other not in LAYERS:
                continue  # a name re-exported by the package root (e.g. __version__)
            checked += 1
            if LAYERS[other] > LAYERS[part]:
                bad.append(f"labkit/{rel}:{line} ({part}, layer {LAYERS[part]}) imports "
                           f"{target} (layer {LAYERS[other]})")
    assert checked > 100
    assert not bad, "imports that run up the layers:\n" + "\n".join(bad)


def test_atomic_files_get_the_mode_a_plain_open_would(tmp_path):
    import os

    from labkit._fs import atomic_write

    mask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "f.json", b"{}")
        assert (tmp_path / "f.json").stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(mask)
