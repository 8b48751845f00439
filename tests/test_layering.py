"""The package docstring's import layering holds: no module imports from a higher layer than its own.

The layers are read from ``etc_fairseq/__init__.py``'s docstring (each numbered entry names its modules as
````name````), so the test checks what the docstring says. Allowed, as the docstring says: ``models`` calling
``hub`` (fairseq's ``from_pretrained`` pattern) and ``register`` imported inside a function by code that reads
fairseq's registries (our tasks, models and criterions must be registered first)."""
import ast
import re
from pathlib import Path

import etc_fairseq

PKG = Path(etc_fairseq.__file__).resolve().parent
ALLOWED = {("models", "hub")}


def _layers():
    doc = etc_fairseq.__doc__
    top = {p.stem if p.suffix == ".py" else p.name for p in PKG.iterdir()
           if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    layers = {}
    for number, body in re.findall(r"^(\d+)\. (.*?)(?=^\d+\. |^``user_dir``)", doc, re.S | re.M):
        while re.search(r"\([^()]*\)", body):  # descriptions in parentheses name other modules too
            body = re.sub(r"\([^()]*\)", "", body)
        # a layer's modules: the ``names`` listed at a line's start or after a comma / semicolon
        for name in re.findall(r"(?:^|\n\s*|[,;] )``([a-z_]+)``", body):
            if name in top:
                layers.setdefault(name, int(number))
    return layers, top


def _imports(path: Path, module: str):
    """(line, imported module, inside a function) for every import of ``path``."""
    tree = ast.parse(path.read_text())
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(n) for n in ast.walk(node) if n is not node)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            names = [".".join(base + ([node.module] if node.module else []))] if node.level else [node.module or ""]
        else:
            continue
        for name in names:
            yield node.lineno, name, id(node) in in_function


def test_docstring_names_the_layers_of_the_main_modules():
    layers, _ = _layers()
    for name, layer in {"errors": 1, "checkpoint_io": 1, "commands": 1, "tracing": 1, "attention": 2, "structure": 3,
                        "encoder": 4, "models": 5, "data": 6, "prepare": 6, "finetune": 7, "pretraining": 7,
                        "cli": 8, "hub": 8, "register": 8}.items():
        assert layers.get(name) == layer, (name, layers.get(name))


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    layers, _ = _layers()
    upward = []
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if len(parts) < 2 or parts[1] not in layers:
            continue
        mine = parts[1]
        for line, name, in_function in _imports(path, module):
            target = name.split(".")
            if len(target) < 2 or target[0] != "etc_fairseq" or target[1] not in layers:
                continue
            if layers[target[1]] <= layers[mine] or (mine, target[1]) in ALLOWED:
                continue
            if target[1] == "register" and in_function:
                continue
            upward.append(f"{module}:{line} (layer {layers[mine]}) imports {name} (layer {layers[target[1]]})")
    assert upward == []
