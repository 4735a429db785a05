"""A parent of two threads that dies as a SIGKILLed launcher can: the thread that started the child
exits first, then the process. The child (started with PR_SET_PDEATHSIG=SIGTERM, as
parallel/launcher.cpp starts workers) is told of its parent's death twice: once per thread.

usage: two_thread_parent.py READY_FILE READY_LINES HELD_AT PROGRAM ARGS...
Waits until READY_FILE has READY_LINES lines, then lets the starting thread end (the first notice).
The child, told, pauses at its failpoint HELD_AT (GPUTRAIN_FAILPOINTS arms it with pause); once its
marker is in $GPUTRAIN_FAILPOINT_DIR this process ends (the second notice), and a helper it leaves
behind lets the child go on only after that: the second notice always arrives before the child saves."""
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


def state_of(pid):
    """The process's state letter (Z once it has exited), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def wait_for(ready):
    deadline = time.time() + 600  # a hang guard only: each wait ends when its event happens
    while not ready() and time.time() < deadline:
        time.sleep(0.005)


def start_and_wait(ready_file, ready_lines, argv):
    pid = os.fork()
    if pid == 0:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        os.execv(argv[0], argv)
    print(pid, flush=True)
    wait_for(lambda: lines(ready_file) >= ready_lines)


def main():
    ready_file, ready_lines, held_at, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    markers = os.environ["GPUTRAIN_FAILPOINT_DIR"]
    starter = threading.Thread(target=start_and_wait, args=(ready_file, ready_lines, argv))
    starter.start()
    starter.join()  # the child's first notice: its parent thread is gone
    wait_for(lambda: any(f.startswith(held_at + ".") and f.endswith(".reached") for f in os.listdir(markers)))
    me = os.getpid()
    if os.fork() == 0:  # the helper: releases the child once this process has exited
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.dup2(null, 2)
        wait_for(lambda: state_of(me) in ("Z", "X", None))  # exited: the second notice was sent
        open(os.path.join(markers, held_at + ".release"), "w").close()
        os._exit(0)
    os._exit(0)  # the second notice: the whole process is gone


if __name__ == "__main__":
    main()
