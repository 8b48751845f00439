"""Write ``docs/flags.md``: every ``fairseq-train`` flag that etc-fairseq adds, generated from the
dataclasses that define them (the ``etc`` model's :class:`~etc_fairseq.models.etc.EtcConfig`, the values
each ``--arch`` sets, and every task and criterion registered from ``etc_fairseq``).

``fairseq-train --help`` lists a task's and model's flags only once ``--task``/``--arch`` and
``--user-dir`` are given, so this page is the one place to read them all. Regenerate it with::

    python -m etc_fairseq.cli.flags_doc --out docs/flags.md

``tests/test_flags_doc.py`` fails when the checked-in page differs from the generated one.
"""
from __future__ import annotations

import argparse
import dataclasses
import enum
import sys
from pathlib import Path
from typing import Any, List, Optional, Sequence

HEADER = """# Flags etc-fairseq adds to `fairseq-train`

Generated from the dataclasses by `python -m etc_fairseq.cli.flags_doc --out docs/flags.md` (a test checks
that this page is current). Every flag needs `--user-dir user_dir`; `fairseq-train --user-dir user_dir
--task TASK --arch ARCH --help` then lists the flags of that task and model as well. In a
`fairseq-hydra-train` yaml a flag `--local-radius 84` is `local_radius: 84` in its group (`model:`,
`task:`, `criterion:`). Every on/off switch of the model (`--hard-g2l`, `--shared-q`, ...) also has a
`--no-` form that turns it off (`--no-hard-g2l`): with `--finetune-from-model`, a model field the command
line leaves out is taken from that checkpoint's stored config.
"""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _type_name(t: Any) -> str:
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return " / ".join(str(m.value) for m in t)
    name = getattr(t, "__name__", None) or str(t)
    return name.replace("typing.", "")


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        v = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        v = f.default_factory()  # type: ignore[misc]
    else:
        return "required"
    if isinstance(v, enum.Enum):
        v = v.value
    if isinstance(v, str) and v.startswith("${"):
        return f"`{v}` (the value of that option)"
    if v == "":
        return '`""`'
    return f"`{v}`"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def field_table(dc: type, skip: Sequence[str] = ()) -> List[str]:
    """Markdown table rows (header included) of ``dc``'s fields: flag, type, default, help."""
    rows = ["| flag | type | default | what it does |", "|---|---|---|---|"]
    for f in dataclasses.fields(dc):
        if f.name.startswith("_") or f.name in skip:
            continue
        help_text = f.metadata.get("help", "") if f.metadata else ""
        if isinstance(f.default, str) and f.default.startswith("${") and not help_text:
            continue  # fairseq takes it from another group's option (e.g. seed from --seed): no flag here
        type_name, default = _type_name(f.type), _default(f)
        if f.type is bool:
            # fairseq makes a bool field a switch that flips its default
            type_name = "switch"
            if f.default is True:
                default = "on"
                help_text = f"ON by default: giving {_flag(f.name)} turns it OFF. " + help_text
            else:
                default = "off"
        rows.append(f"| `{_flag(f.name)}` | {_cell(type_name)} | {_cell(default)} | {_cell(help_text)} |")
    return rows


def render() -> str:
    """The whole page (deterministic: registries sorted by name)."""
    import etc_fairseq.register  # noqa: F401  (registers everything)
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY

    from etc_fairseq.models import config_for_arch
    from etc_fairseq.models.etc import EtcConfig

    out: List[str] = [HEADER]
    out += ["## Model `etc` (`--arch etc_base`, ...)", "",
            "Every field of `EtcConfig` (`etc_fairseq/encoder/config.py` defines them); an `--arch` sets the "
            "values in the next table unless the flag is given.", ""]
    out += field_table(EtcConfig)
    out.append("")

    archs = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "etc")
    defaults = EtcConfig()
    out += ["## Architectures", "",
            "The fields each `--arch` (or yaml `model: {_name: ARCH}`) sets where they differ from the "
            "dataclass defaults above.", "",
            "| arch | fields set |", "|---|---|"]
    for arch in archs:
        cfg = config_for_arch(arch)
        changed = []
        for f in dataclasses.fields(EtcConfig):
            if f.name.startswith("_"):
                continue
            v, d = getattr(cfg, f.name), getattr(defaults, f.name)
            v = v.value if isinstance(v, enum.Enum) else v
            d = d.value if isinstance(d, enum.Enum) else d
            if v != d:
                changed.append(f"`{_flag(f.name)}`" if v is True else f"`{_flag(f.name)} {v}`")
        out.append(f"| `{arch}` | {', '.join(changed) or '(the defaults)'} |")
    out.append("")

    def ours(registry, dataclass_registry, kind):
        section = []
        for name in sorted(dataclass_registry):
            cls = registry.get(name)
            if cls is None or not cls.__module__.startswith("etc_fairseq"):
                continue
            dc = dataclass_registry[name]
            # only the dataclass fields: the module (where the task/criterion is described) is named, not
            # copied, so editing a docstring does not make this page stale
            section += [f"### {kind} `{name}`", "", f"Defined in `{cls.__module__}`.", ""]
            section += field_table(dc, skip=("data",) if kind == "task" else ())
            section.append("")
        return section

    from fairseq.models import MODEL_DATACLASS_REGISTRY, MODEL_REGISTRY

    for name in sorted(MODEL_DATACLASS_REGISTRY):
        cls = MODEL_REGISTRY.get(name)
        if name == "etc" or cls is None or not cls.__module__.startswith("etc_fairseq"):
            continue
        out += [f"## Model `{name}` (`--arch {name}`)", "", f"Defined in `{cls.__module__}`.", ""]
        out += field_table(MODEL_DATACLASS_REGISTRY[name])
        out.append("")

    out += ["## Tasks (`--task`)", "",
            "Each task reads the directory given as fairseq's first positional argument (`task.data` in yaml).", ""]
    out += ours(TASK_REGISTRY, TASK_DATACLASS_REGISTRY, "task")
    out += ["## Criterions (`--criterion`)", ""]
    out += ours(CRITERION_REGISTRY, CRITERION_DATACLASS_REGISTRY, "criterion")
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etc_fairseq.cli.flags_doc", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the page here (default: stdout)")
    args = parser.parse_args(argv)
    text = render()
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
