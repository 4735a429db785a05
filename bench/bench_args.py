"""Command-line options the benchmark scripts share: the gputrain binary and
the model's shape (each script picks its own default model); and the line
naming which gputrain was measured, and when."""
import datetime
import json
import os
import subprocess


def add_model_args(ap, *, vocab, seq, layers, heads, d):
    ap.add_argument("--binary", default="build/gputrain", help="the gputrain executable")
    ap.add_argument("--vocab", type=int, default=vocab)
    ap.add_argument("--seq", type=int, default=seq)
    ap.add_argument("--layers", type=int, default=layers)
    ap.add_argument("--heads", type=int, default=heads)
    ap.add_argument("--d", type=int, default=d)
    return ap


def provenance(binary):
    """`gputrain --version` (the commit the binary was built from) and today's date: the first
    line of every table, since docs/benchmarks.md records each run with its commit and date."""
    try:
        version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError as e:
        version = f"{binary}: {e.strerror}"
    return f"{version or binary + ': no version'}; {datetime.date.today().isoformat()}"


def launched_run(binary, recipe, nproc, sets, out):
    """`gputrain run --nproc-per-node` of `recipe` with `sets` ({key: value}) into `out`: its summary.json."""
    args = [binary, "run", str(recipe), "--output-dir", str(out), "--overwrite", "--nproc-per-node", str(nproc)]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads((out / "summary.json").read_text())


def peak_rss_mb(args):
    """Runs `args` to the end and returns its peak resident set (wait4's ru_maxrss, MiB), as the kernel counts it."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        raise SystemExit(output)
    return usage.ru_maxrss / 1024
