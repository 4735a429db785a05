"""Runs the tests' Python references in forks of one process that imported their heavy modules once.

A test case that calls several references (one per case of a table) paid ~10 s of imports (torch,
transformers) for each; from here each call is a fork of a process that has them (tests/test_util.cpp's
run_python starts one per test process, on its first call).

Protocol, one JSON line each way on stdin/stdout: in, {"argv": [script, args...] or ["-c", code,
args...], "cwd", "env", "output": a file for the call's stdout and stderr}; out, {"exit_code"}, once
the call has exited and every process holding its output has closed it. EOF on stdin ends it.
The parent only imports: computing here would start thread pools that a fork cannot take along.
"""
import json
import os
import runpy
import sys
import traceback

import numpy  # noqa: F401  (preloaded for the forks)
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


def main():
    replies = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
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


if __name__ == "__main__":
    main()
