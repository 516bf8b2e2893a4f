"""The fit_a_line data set, deterministic from a seed; standard library only.

``y = X . w_true + b_true + noise`` with 13 features and noise std 0.1 (so the best possible mean
squared error is about 0.01). Rows are dealt round-robin into SHARDS files in the MultiSlot text
format that Paddle's QueueDataset reads (``13 x1 .. x13 1 y`` per line)::

    python data.py OUT_DIR [SHARDS]      # writes OUT_DIR/part-00000.txt ... (the demo uploads them)

``train.py`` imports it for the true parameters, the full data set (to report the final loss) and,
outside a task master, to write its own shards.
"""

import os
import random
import sys

SEED = 2024
NUM_ROWS = 20000
NUM_FEATURES = 13
NOISE_STD = 0.1
SHARDS = 8


def true_params():
    """The weights and bias the data was made with."""
    rng = random.Random(SEED)
    return [rng.uniform(-2.0, 2.0) for _ in range(NUM_FEATURES)], 1.5


def rows():
    """Every (x, y) of the data set, in order."""
    w, b = true_params()
    rng = random.Random(SEED + 1)
    for _ in range(NUM_ROWS):
        x = [rng.gauss(0.0, 1.0) for _ in range(NUM_FEATURES)]
        yield x, sum(wi * xi for wi, xi in zip(w, x, strict=True)) + b + rng.gauss(0.0, NOISE_STD)


def shard_name(i):
    return f"part-{i:05d}.txt"


def write_shards(out_dir, shards=SHARDS, keep=None):
    """Write the shards (only those in ``keep`` if given) and return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    wanted = range(shards) if keep is None else keep
    files = {i: open(os.path.join(out_dir, shard_name(i)), "w") for i in wanted}  # noqa: SIM115
    try:
        for n, (x, y) in enumerate(rows()):
            f = files.get(n % shards)
            if f is not None:
                f.write(f"{NUM_FEATURES} {' '.join(f'{v:.6f}' for v in x)} 1 {y:.6f}\n")
    finally:
        for f in files.values():
            f.close()
    return [os.path.join(out_dir, shard_name(i)) for i in wanted]


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "dataset"
    paths = write_shards(out, int(sys.argv[2]) if len(sys.argv) > 2 else SHARDS)
    print(f"{NUM_ROWS} rows in {len(paths)} shards under {out}")
