"""``tests/forkserver.py`` runs a command as a fresh interpreter would: the same exit status, output, arguments,
working directory, environment, ``__main__`` and an unconfigured root logger, for ``python -m MODULE`` and
``python SCRIPT``; a timeout kills the command. (Most end-to-end tests run their commands through it.)"""
import subprocess
import sys
import textwrap

import pytest

from forkserver import run_python

PROBE = textwrap.dedent('''
    import json, logging, os, sys
    logging.basicConfig(format="LOG %(message)s", stream=sys.stdout, level=logging.INFO)
    logging.getLogger("probe").info("configured")
    print(json.dumps({"name": __name__, "argv": sys.argv[1:], "cwd": os.getcwd(), "path0": sys.path[0],
                      "env": os.environ.get("PROBE_VALUE")}))
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[1]))
''')


@pytest.mark.parametrize("as_module", [False, True])
def test_a_forked_command_runs_as_a_fresh_interpreter_would(tmp_path, as_module):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "probe.py").write_text(PROBE)
    work = tmp_path / "work"
    work.mkdir()
    target = ["-m", "pkg.probe"] if as_module else [str(tmp_path / "pkg" / "probe.py")]
    env = {"PROBE_VALUE": "x y", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    fresh = subprocess.run([sys.executable, *target, "3", "a b"], capture_output=True, text=True, cwd=work, env=env,
                           timeout=120)
    forked = run_python([*target, "3", "a b"], cwd=work, env=env, timeout=120)
    assert fresh.returncode == forked.returncode == 3
    assert fresh.stderr == forked.stderr == "to stderr\n"
    assert fresh.stdout == forked.stdout
    assert fresh.stdout.startswith("LOG configured\n")  # the command's own logging.basicConfig took effect
    assert '"argv": ["3", "a b"]' in fresh.stdout and '"env": "x y"' in fresh.stdout and '"name": "__main__"' in fresh.stdout


def test_a_command_past_its_timeout_is_killed(tmp_path):
    (tmp_path / "sleep.py").write_text("import time\ntime.sleep(600)\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run_python([str(tmp_path / "sleep.py")], cwd=tmp_path, timeout=1)
