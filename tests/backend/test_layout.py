"""The OpenCL package's structure: modules import downward only, at the top; kernels are built
through one helper; the namespace is explicit."""

import ast
import types
from pathlib import Path

import labkit
from labkit.backend import opencl

BACKEND = Path(labkit.__file__).parent / "backend"

# the OpenCL package bottom up: a module may import only modules listed before it
ORDER = ["context", "program", "shapes", "ndarray", "promotion", "elementwise", "fused",
         "transpose", "core", "arith", "reduce", "lse", "softmax", "xent", "lstm", "pool",
         "gemm_paths", "gemm", "conv", "indexing", "advanced", "methods", "api"]


def _imports(path):
    """(line, target module within labkit.backend.opencl or None, at module level?)"""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            pkg = path.parent.relative_to(BACKEND.parent).parts
            base = list(pkg[:len(pkg) - node.level + 1])
            mod = base + (node.module.split(".") if node.module else [])
            names = [a.name for a in node.names] if not node.module else [None]
            for n in names:
                yield node.lineno, ".".join(mod + ([n] if n else [])), id(node) in top
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for m in mods:
                yield node.lineno, m, id(node) in top


def test_opencl_modules_import_downward_and_at_the_top():
    bad = []
    for name in ORDER:
        path = BACKEND / "opencl" / f"{name}.py"
        for line, target, at_top in _imports(path):
            if not at_top and target != "pyopencl" and not target.startswith("pyopencl."):
                bad.append(f"opencl/{name}.py:{line} imports {target} inside a function")
            parts = target.split(".")
            if parts[:2] == ["backend", "opencl"] and len(parts) > 2:
                other = parts[2]
                if other not in ORDER or ORDER.index(other) >= ORDER.index(name):
                    bad.append(f"opencl/{name}.py:{line} imports {other}, which is not below it")
            elif parts[:1] == ["backend"] and len(parts) > 1 and parts[1] != "opencl":
                bad.append(f"opencl/{name}.py:{line} imports backend.{parts[1]} (above opencl)")
    assert not bad, "\n".join(bad)


def test_backend_has_no_lazy_imports_but_pyopencl():
    bad = [f"{p.relative_to(BACKEND)}:{line} {target}" for p in sorted(BACKEND.rglob("*.py"))
           for line, target, at_top in _imports(p)
           if not at_top and not target.startswith("pyopencl")]
    assert not bad, "imports inside functions (they defer nothing after `import labkit`):\n" + \
        "\n".join(bad)


def test_the_namespace_is_explicit():
    tree = ast.parse((BACKEND / "opencl" / "api.py").read_text())
    (assign,) = [n for n in tree.body if isinstance(n, ast.Assign)
                 and any(getattr(t, "id", None) == "__all__" for t in n.targets)]
    assert isinstance(assign.value, ast.List), "api.__all__ is a literal list"
    names = opencl.__all__
    assert len(names) == len(set(names))
    for n in names:
        assert not isinstance(getattr(opencl, n), types.ModuleType), n
    assert {"np", "sys", "builtins", "math", "launch", "CTYPES"}.isdisjoint(names)
    assert {"add", "matmul", "sum", "take", "where", "float32", "ndarray", "runtime"} <= set(names)
    assert hasattr(opencl.add, "at")


def test_kernels_come_from_one_builder():
    for path in sorted(BACKEND.rglob("*.py")):
        if path.name == "program.py":
            continue
        text = path.read_text()
        assert "set_scalar_arg_dtypes" not in text, f"{path.name}: type kernels in program.py"
        assert "OPENCL EXTENSION" not in text, f"{path.name}: the fp64 pragma comes from header()"
