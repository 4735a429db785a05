"""Runs the tests' Python references in forks of one process that imported their heavy modules once.

A test case that calls several references (one per case of a table) paid ~10 s of imports (torch,
transformers) for each; from here each call is a fork of a process that has them (tests/test_util.cpp's
run_python starts one per test process, on its first call).

Protocol, one JSON line each way on stdin/stdout: in, {"argv": [script, args...] or ["-c", code,
args...], "cwd", "env", "output": a file for the call's stdout and stderr}; out, {"exit_code"}, once
the call has exited and every process holding its output has closed it. EOF on stdin ends it.
The parent only imports: computing here would start thread pools that a fork cannot take along.

Shared by a whole ctest run (tests/CMakeLists.txt's fixture `python_forks`): `--listen SOCKET` binds a
Unix socket, returns once it listens and serves each test process's connection from a fork of its own
(tests/test_util.cpp connects where GPUTRAIN_PYTHON_FORKS names the socket); it also preloads
bitsandbytes, whose import (torch's compiler stack) costs more than the others. `--stop SOCKET` ends it.
"""
import json
import os
import runpy
import signal
import socket
import sys
import traceback


def preload():
    """The heavy modules, imported once here for every fork (not by --stop, which needs none)."""
    import numpy  # noqa: F401
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import GPT2LMHeadModel, LlamaForCausalLM  # noqa: F401  (transformers imports lazily)


def run_child(request, out):
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = list(request["argv"])
    code = 0
    try:
        if argv[0] == "-c":  # python -c CODE ARGS: argv[0] is "-c", the path starts with ""
            sys.argv = argv[:1] + argv[2:]
            sys.path[0] = ""
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            sys.argv = argv
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python script` puts it first
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:  # sys.exit("message"): printed, exit status 1, as the interpreter does
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: B902  (anything the script raises: its traceback and status 1)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve(requests, replies, server_pid=None):
    for line in requests:
        request = json.loads(line)
        if request.get("stop"):
            if server_pid is not None and os.getppid() == server_pid:  # never another process that took its place
                os.kill(server_pid, signal.SIGTERM)
            return
        replies.flush()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            run_child(request, write_end)
        os.close(write_end)
        # Until every holder of the output closes it (a process the script started too), as a plain run's
        # caller reads its pipe to the end.
        with open(request["output"], "wb") as output:
            while chunk := os.read(read_end, 65536):
                output.write(chunk)
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        replies.write(json.dumps({"exit_code": code if code >= 0 else 128 - code}) + "\n")
        replies.flush()


def listen(path):
    """Binds `path`, then goes on in the background (this call returns once it listens)."""
    preload()
    try:
        import bitsandbytes.functional  # noqa: F401
    except Exception:  # noqa: B902  (a reference that needs it imports it itself and says why it cannot)
        pass
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    if os.fork() != 0:
        os._exit(0)  # the caller (ctest's fixture) goes on; the server serves
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    server.settimeout(6 * 3600)  # a run whose cleanup never came: gone after six idle hours
    server_pid = os.getpid()
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            break
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this handler waits for its calls
            conn.settimeout(None)
            serve(conn.makefile("r"), conn.makefile("w"), server_pid)
            os._exit(0)
        conn.close()
    if os.path.exists(path):
        os.unlink(path)


def stop(path):
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(path)
        client.sendall(b'{"stop": true}\n')
        client.close()
    except OSError:
        pass  # not running: nothing to stop
    if os.path.exists(path):
        os.unlink(path)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--listen":
        try:
            listen(sys.argv[2])
        except Exception as e:  # noqa: B902  (no shared server: each test case then starts its own)
            print(f"fork_server: no shared server at {sys.argv[2]} ({e}); each test case starts its own")
    elif len(sys.argv) == 3 and sys.argv[1] == "--stop":
        stop(sys.argv[2])
    else:
        preload()
        serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
