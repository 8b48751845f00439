"""The package's import layering (``.importlinter``: layers, a fairseq-free core, no import cycles) holds, as
import-linter checks it; and the checker is live: an upward import planted in a copy of the package breaks it."""
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--no-logo"], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})


def test_the_package_keeps_every_import_contract():
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_an_upward_import_inside_a_function_breaks_the_layers(tmp_path):
    shutil.copytree(REPO / "etc_fairseq", tmp_path / "etc_fairseq", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", tmp_path)
    with open(tmp_path / "etc_fairseq" / "encoder" / "heads.py", "a") as f:
        f.write("\n\ndef _upward():\n    from etc_fairseq.models import etc  # noqa: F401\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode != 0
    assert "etc_fairseq.encoder.heads -> etc_fairseq.models.etc" in proc.stdout
