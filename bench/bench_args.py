"""Command-line options the benchmark scripts share: the gputrain binary and
the model's shape (each script picks its own default model)."""


def add_model_args(ap, *, vocab, seq, layers, heads, d):
    ap.add_argument("--binary", default="build/gputrain", help="the gputrain executable")
    ap.add_argument("--vocab", type=int, default=vocab)
    ap.add_argument("--seq", type=int, default=seq)
    ap.add_argument("--layers", type=int, default=layers)
    ap.add_argument("--heads", type=int, default=heads)
    ap.add_argument("--d", type=int, default=d)
    return ap
