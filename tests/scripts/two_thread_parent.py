"""A parent of two threads that dies as a SIGKILLed launcher can: the thread that started the child
exits first, then the process. The child (started with PR_SET_PDEATHSIG=SIGTERM, as
parallel/launcher.cpp starts workers) is told of its parent's death twice: once per thread.

usage: two_thread_parent.py READY_FILE READY_LINES PROGRAM ARGS...
Waits until READY_FILE has READY_LINES lines, then lets the starting thread end, then ends itself."""
import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1


def lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def start_and_wait(ready_file, ready_lines, argv):
    pid = os.fork()
    if pid == 0:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        os.execv(argv[0], argv)
    print(pid, flush=True)
    deadline = time.time() + 600  # a hang guard only: the wait ends when the file is ready
    while lines(ready_file) < ready_lines and time.time() < deadline:
        time.sleep(0.005)


def main():
    ready_file, ready_lines, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    starter = threading.Thread(target=start_and_wait, args=(ready_file, ready_lines, argv))
    starter.start()
    starter.join()  # the child's first notice: its parent thread is gone
    time.sleep(0.02)
    os._exit(0)  # the second: the whole process is gone


if __name__ == "__main__":
    main()
