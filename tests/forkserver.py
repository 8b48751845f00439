"""A fork server for the tests: a Python command (``python -m MODULE ...``, ``python SCRIPT ...`` or a console
script) starts in a fraction of a second instead of ~4 s.

Most of a tiny ``fairseq-train`` run is its start: importing torch and fairseq takes about 4 s of CPU, a few
updates well under one, and the suite runs well over a hundred such commands. ``python forkserver.py SOCKET``
imports them once and then, for every request on the Unix socket ``SOCKET``, forks a child that runs the command
as a fresh interpreter would: ``runpy.run_path`` on a script file or ``runpy.run_module`` on a module, with
``__name__ == "__main__"``, the caller's arguments, working directory, environment and standard streams (passed
as file descriptors). Each child is a fresh copy of the server, so nothing one command does is seen by the next.
Nothing of this project is imported before the fork: the child imports the package (and ``--user-dir
user_dir``) as a normal run does. What the interpreter and torch read from the environment at start-up is
applied in the child from the request's environment: ``PYTHONPATH``, ``PYTHONUNBUFFERED`` and
``OMP_NUM_THREADS``; the root logger, which importing fairseq configures, is reset to a fresh interpreter's (no
handler, WARNING). A command that must run without fairseq importable cannot run here (fairseq is already
imported). ``tests/test_forkserver.py`` compares a forked command with a fresh one.

Client side:

- ``run(socket_path, script, args)``: run console script ``script`` here (this process's directory, environment
  and streams) and return its exit status (the wrappers ``tests/test_docs_commands.py`` writes use it);
- ``write_wrappers(bin_dir, scripts)``: a ``bin/`` of console scripts and ``python`` that run this way, for tests
  that run a shell script (put it first on ``PATH``);
- ``run_python(argv, cwd=..., env=..., timeout=...)``: what ``subprocess.run([sys.executable, *argv],
  capture_output=True, text=True, ...)`` returns, for ``argv`` = ``["-m", MODULE, ...]`` or ``[SCRIPT, ...]``,
  through the session's server (started on first use, stopped when the interpreter exits; :func:`stop`).
"""
from __future__ import annotations

import atexit
import json
import locale
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from typing import List, Mapping, Optional


# ---------------------------------------------------------------------------------------------------------
# client
# ---------------------------------------------------------------------------------------------------------

def _request(socket_path: str, request: dict, fds: List[int], timeout: Optional[float] = None) -> int:
    """Send one request with ``fds`` as the child's stdin/stdout/stderr; wait for its exit status. On
    ``timeout`` (seconds) the child is killed and :class:`subprocess.TimeoutExpired` raised."""
    payload = json.dumps(request).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(socket_path)
        socket.send_fds(s, [struct.pack("!Q", len(payload))], fds)
        s.sendall(payload)
        s.settimeout(timeout)
        reply = b""
        try:
            while len(reply) < 8:  # the child's pid, then its exit status
                chunk = s.recv(8 - len(reply))
                if not chunk:
                    return 255  # the server went away
                reply += chunk
        except socket.timeout:
            if len(reply) >= 4:
                os.kill(struct.unpack("!i", reply[:4])[0], signal.SIGKILL)
            raise subprocess.TimeoutExpired(request.get("module") or request["script"], timeout)
    return struct.unpack("!i", reply[4:])[0]


def run(socket_path: str, script: str, args: list, module: bool = False) -> int:
    """Ask the server at ``socket_path`` to run console script ``script`` (with ``module``: ``python -m
    script``) with ``args`` here (this process's working directory, environment and stdin/stdout/stderr); wait
    for it and return its exit status."""
    target = {"module": script} if module else {"script": os.path.abspath(script)}
    return _request(socket_path, {**target, "args": list(args), "cwd": os.getcwd(), "env": dict(os.environ)},
                    [0, 1, 2])


WRAPPER = """#!{python}
# tests/forkserver.py wrapper: run {name} as a fork of the test session's warm interpreter
import os, sys
real, socket_path, is_python = {real!r}, {socket!r}, {is_python!r}
args = sys.argv[1:]
sys.path.insert(0, {tests!r})
import forkserver
if not is_python:
    sys.exit(forkserver.run(socket_path, real, args))
if args and args[0] == "-m" and len(args) > 1:
    sys.exit(forkserver.run(socket_path, args[1], args[2:], module=True))
if args and not args[0].startswith("-"):
    sys.exit(forkserver.run(socket_path, args[0], args[1:]))
os.execv(real, [real] + args)  # -c, - (stdin), options: the real interpreter
"""


def write_wrappers(bin_dir, scripts) -> str:
    """Fill ``bin_dir`` with one executable per console script in ``scripts`` (names in this interpreter's
    ``bin/``) and ``python`` / ``python3``, each running its command as a fork of this session's server
    (``python`` forks for ``-m MODULE`` and ``SCRIPT``; ``-c``, ``-`` and options run the real interpreter).
    Put ``bin_dir`` first on ``PATH``. Returns ``bin_dir`` as a string."""
    socket_path = server_socket()
    bin_dir = os.fspath(bin_dir)
    os.makedirs(bin_dir, exist_ok=True)
    real_bin = os.path.dirname(sys.executable)
    for name in (*scripts, "python", "python3"):
        is_python = name in ("python", "python3")
        real = sys.executable if is_python else os.path.join(real_bin, name)
        if not os.path.exists(real):
            raise FileNotFoundError(real)
        path = os.path.join(bin_dir, name)
        with open(path, "w") as f:
            f.write(WRAPPER.format(python=sys.executable, name=name, real=real, socket=socket_path,
                                   is_python=is_python, tests=os.path.dirname(os.path.abspath(__file__))))
        os.chmod(path, 0o755)
    return bin_dir


_server: Optional[subprocess.Popen] = None
_socket_path: Optional[str] = None


def server_socket() -> str:
    """The socket of this process's server, started on first call (stopped by :func:`stop` or at exit)."""
    global _server, _socket_path
    if _server is None or _server.poll() is not None:
        sock_dir = tempfile.mkdtemp(prefix="etc-fork-")
        _socket_path = os.path.join(sock_dir, "fork.sock")
        _server = subprocess.Popen([sys.executable, os.path.abspath(__file__), _socket_path],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                                   start_new_session=True)
        line = _server.stdout.readline().strip()
        if line != "ready":
            stop()
            raise RuntimeError(f"tests/forkserver.py did not start (said {line!r})")
        atexit.register(stop)
    return _socket_path


def stop() -> None:
    """Stop the server and any command it still runs."""
    global _server, _socket_path
    if _server is not None:
        try:
            os.killpg(_server.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        _server.wait(timeout=60)
        _server.stdout.close()
        import shutil

        shutil.rmtree(os.path.dirname(_socket_path), ignore_errors=True)
    _server, _socket_path = None, None


def run_python(argv: List[str], cwd=None, env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
               ) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=cwd, env=env,
    timeout=timeout)``, run as a fork of the server. ``argv``: ``["-m", MODULE, *args]`` or
    ``[SCRIPT, *args]``. stdin is ``/dev/null``."""
    argv = [str(a) for a in argv]
    if argv[0] == "-m":
        request = {"module": argv[1], "args": argv[2:]}
    elif not argv[0].startswith("-"):
        request = {"script": os.path.abspath(os.path.join(cwd or os.getcwd(), argv[0])), "args": argv[1:]}
    else:
        raise ValueError(f"run_python takes -m MODULE or a script, not {argv[0]}")
    request.update(cwd=os.path.abspath(cwd or os.getcwd()), env=dict(os.environ if env is None else env))
    encoding = locale.getpreferredencoding(False)
    with open(os.devnull, "rb") as stdin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        code = _request(server_socket(), request, [stdin.fileno(), out.fileno(), err.fileno()], timeout)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(encoding), err.read().decode(encoding)
    return subprocess.CompletedProcess([sys.executable, *argv], code, stdout, stderr)


# ---------------------------------------------------------------------------------------------------------
# server
# ---------------------------------------------------------------------------------------------------------

def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("client closed the connection")
        data += chunk
    return data


def _pythonpath() -> List[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def _child(listener: socket.socket, conn: socket.socket, fds: list, request: dict) -> None:
    """Runs in the forked child; never returns."""
    import runpy
    import traceback

    code = 1
    try:
        listener.close()
        conn.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        server_pythonpath = _pythonpath()
        os.environ.clear()
        os.environ.update(request["env"])
        # PYTHONPATH is read at start-up: the request's entries replace the server's, after sys.path[0]
        sys.path[1:] = _pythonpath() + [p for p in sys.path[1:] if p not in server_pythonpath]
        if os.environ.get("PYTHONUNBUFFERED"):  # read at interpreter start: applied to the new streams here
            import io

            for name, fd in (("stdout", 1), ("stderr", 2)):
                old = getattr(sys, name)
                setattr(sys, name, io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding=old.encoding,
                                                    errors=old.errors, write_through=True))
        # a fresh interpreter starts with an unconfigured root logger; importing fairseq configures it (some of
        # its modules call logging.basicConfig), which would turn the command's own basicConfig into a no-op
        import logging

        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
        threads = os.environ.get("OMP_NUM_THREADS")
        if threads and threads.isdigit():
            import torch

            torch.set_num_threads(int(threads))
        try:
            if "module" in request:  # python -m MODULE: sys.path[0] is the working directory
                sys.argv = [request["module"]] + list(request["args"])
                sys.path[0] = os.getcwd()
                runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            else:
                sys.argv = [request["script"]] + list(request["args"])
                sys.path[0] = os.path.dirname(request["script"])
                runpy.run_path(request["script"], run_name="__main__")
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        try:
            atexit._run_exitfuncs()
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _wait_and_reply(conn: socket.socket, pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)  # as a shell reports it
    try:
        conn.sendall(struct.pack("!i", code))
    except OSError:
        pass  # the client gave up (timeout)
    finally:
        conn.close()


def serve(socket_path: str) -> None:
    """Import the heavy modules, then fork one child per request until killed."""
    import numpy  # noqa: F401  (the imports every command pays for; nothing of this project)
    import torch  # noqa: F401
    import fairseq  # noqa: F401
    import fairseq.options  # noqa: F401
    import fairseq.trainer  # noqa: F401
    import fairseq.checkpoint_utils  # noqa: F401

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        try:
            head, fds, _, _ = socket.recv_fds(conn, 8, 3)
            if len(head) < 8:
                head += _recv_exact(conn, 8 - len(head))
            request = json.loads(_recv_exact(conn, struct.unpack("!Q", head)[0]))
        except (OSError, ValueError, ConnectionError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            _child(listener, conn, fds, request)
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(struct.pack("!i", pid))
        except OSError:
            os.kill(pid, signal.SIGKILL)  # nobody waits for it
        threading.Thread(target=_wait_and_reply, args=(conn, pid), daemon=True).start()


if __name__ == "__main__":
    serve(sys.argv[1])
