"""A fork server for the docs tests: the console commands of a page start in a fraction of a second.

Most of a tiny ``fairseq-train`` run is its start: importing torch and fairseq takes about 4 s of CPU, the
2 updates well under one. ``python doc_forkserver.py SOCKET`` imports them once and then, for every request
on the Unix socket ``SOCKET``, forks a child that runs one console script exactly as its file in the venv's
``bin/`` would run (``runpy.run_path`` on that file, ``__name__ == "__main__"``) with the caller's arguments,
working directory, environment and standard streams (passed as file descriptors). Each child is a fresh copy
of the server, so nothing one command does is seen by the next. Nothing of this project is imported before
the fork: ``--user-dir user_dir`` imports the scratch clone's package as it does in a normal run.

``run(socket_path, script, args)`` is the client side (used by the wrappers ``tests/test_docs_commands.py``
writes): it returns the command's exit status.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading


def run(socket_path: str, script: str, args: list) -> int:
    """Ask the server at ``socket_path`` to run console script ``script`` with ``args`` here (this process's
    working directory, environment and stdin/stdout/stderr); wait for it and return its exit status."""
    payload = json.dumps({"script": script, "args": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(socket_path)
        socket.send_fds(s, [struct.pack("!Q", len(payload))], [0, 1, 2])
        s.sendall(payload)
        status = b""
        while len(status) < 4:
            chunk = s.recv(4 - len(status))
            if not chunk:
                return 255  # the server went away
            status += chunk
    return struct.unpack("!i", status)[0]


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("client closed the connection")
        data += chunk
    return data


def _child(listener: socket.socket, conn: socket.socket, fds: list, request: dict) -> None:
    """Runs in the forked child; never returns."""
    import atexit
    import runpy
    import traceback

    code = 1
    try:
        listener.close()
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        script = request["script"]
        sys.argv = [script] + list(request["args"])
        sys.path[0] = os.path.dirname(script)
        try:
            runpy.run_path(script, run_name="__main__")
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
        threading.Thread(target=_wait_and_reply, args=(conn, pid), daemon=True).start()


if __name__ == "__main__":
    serve(sys.argv[1])
